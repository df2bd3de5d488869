// tts-rt browser page: types text into the realtime WebSocket protocol
// (docs/protocol.md) and plays the audio through an AudioWorklet jitter
// buffer (worklet.js). Plain JavaScript, no dependencies, served by tts-rt.
//
// The token comes from this page's URL (`/?token=T`): it is sent as a
// bearer header on fetches and as `?token=` on the WebSocket URL (browsers
// cannot set headers on a WebSocket).
//
// `window.ttsDebug` holds the page's state (connection, chunks, worklet
// counters, the last Stop) for tests and for curious people.
'use strict';

(() => {
  const $ = (id) => document.getElementById(id);
  const token = new URLSearchParams(location.search).get('token') || '';

  const dbg = {
    connected: false,
    connection: 'idle', // idle | connecting | open | closed | unauthorized
    sessionId: null,
    session: null, // effective settings from session.updated
    sampleRate: null, // output rate the server confirmed
    audioState: null, // AudioContext state
    audioRate: null, // AudioContext sample rate
    chunks: 0, // audio messages received (all contexts)
    bytes: 0,
    ttfpMs: null, // last context: first append sent -> first audio received
    contexts: {}, // id -> {state, chunks, samples, ttfpMs, done, cancel, ...}
    current: null, // id of the last context started
    worklet: { played: 0, buffered: 0, underruns: 0, underrunSamples: 0, state: 'idle', started: 0, drained: 0 },
    acksSent: 0,
    stop: null, // the last Stop: {contexts, flushed, dropped, flushMs, ack, ...}
    droppedAfterStop: 0, // chunks that arrived between Stop and the server's ack
    lateChunks: 0, // chunks of a context after its context.cancelled (must stay 0)
    errors: [], // every error shown, in order
    lastError: null,
    events: 0,
  };
  window.ttsDebug = dbg;

  const ui = {
    text: $('text'), voice: $('voice'), language: $('language'), format: $('format'),
    prebuffer: $('prebuffer'), live: $('live'), speak: $('speak'), stop: $('stop'),
    error: $('error'), stopinfo: $('stopinfo'), log: $('log'), model: $('model'), hint: $('hint'),
    conn: $('s-conn'), ttfp: $('s-ttfp'), chunks: $('s-chunks'), buffered: $('s-buffered'),
    bufmeter: $('m-buffered'), underruns: $('s-underruns'), played: $('s-played'), audio: $('s-audio'),
    server: $('s-server'), instruct: $('instruct'),
    record: $('record'), clip: $('clip'), clipinfo: $('clipinfo'), vname: $('vname'), vtext: $('vtext'),
    save: $('save'), saveinfo: $('saveinfo'),
  };

  // ------------------------------------------------------------ helpers --

  function log(line) {
    dbg.events += 1;
    const t = (performance.now() / 1000).toFixed(3).padStart(8);
    ui.log.textContent = `${t}  ${line}\n` + ui.log.textContent.split('\n').slice(0, 199).join('\n');
  }

  function showError(msg) {
    dbg.errors.push(msg);
    dbg.lastError = msg;
    ui.error.textContent = msg;
    ui.error.hidden = false;
    log(`error: ${msg}`);
  }

  function clearError() {
    ui.error.hidden = true;
    ui.error.textContent = '';
  }

  function authHeaders() {
    return token ? { Authorization: `Bearer ${token}` } : {};
  }

  function tokenAdvice() {
    return token
      ? 'The token in this page\'s URL (?token=…) is wrong: open the page as /?token=TOKEN with the token given to "tts-rt serve --token".'
      : 'This server needs a token: open the page as /?token=TOKEN with the token given to "tts-rt serve --token".';
  }

  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  // ------------------------------------------------------------- voices --

  async function loadVoices() {
    for (;;) {
      let r;
      try {
        r = await fetch(new URL('v1/audio/voices', location.href), { headers: authHeaders(), cache: 'no-store' });
      } catch (e) {
        showError(`Cannot reach the server (${e.message}); retrying…`);
        await sleep(2000);
        continue;
      }
      if (r.status === 401) {
        dbg.connection = 'unauthorized';
        ui.model.textContent = 'not connected';
        renderStatus();
        showError(`Unauthorized (401). ${tokenAdvice()}`);
        return false;
      }
      if (r.status === 503) {
        ui.model.textContent = 'model loading…';
        await sleep(1000);
        continue;
      }
      if (!r.ok) {
        showError(`GET /v1/audio/voices failed: HTTP ${r.status}`);
        return false;
      }
      const v = await r.json();
      fillVoices(v);
      clearError();
      return true;
    }
  }

  function fillVoices(v, select) {
    const previous = select || ui.voice.value;
    ui.voice.textContent = '';
    const stored = v.uploaded_voices || [];
    if (stored.length > 0) {
      const g = document.createElement('optgroup');
      g.label = 'Stored voices';
      for (const x of stored) {
        const o = document.createElement('option');
        o.value = x.name;
        o.textContent = `${x.name} (${x.mode})`;
        g.appendChild(o);
      }
      ui.voice.appendChild(g);
    }
    const groups = { speaker: 'Speakers', openai: 'OpenAI voice names' };
    for (const kind of Object.keys(groups)) {
      const list = (v.voices || []).filter((x) => x.kind === kind);
      if (list.length === 0) continue;
      const g = document.createElement('optgroup');
      g.label = groups[kind];
      for (const x of list) {
        const o = document.createElement('option');
        o.value = x.id;
        o.textContent = kind === 'openai' ? `${x.id} → ${x.speaker}` : x.id;
        g.appendChild(o);
      }
      ui.voice.appendChild(g);
    }
    ui.language.textContent = '';
    for (const l of ['auto', ...(v.languages || []).filter((l) => l !== 'auto')]) {
      const o = document.createElement('option');
      o.value = l;
      o.textContent = l;
      ui.language.appendChild(o);
    }
    if (previous && [...ui.voice.options].some((o) => o.value === previous)) ui.voice.value = previous;
    dbg.voices = (v.voices || []).map((x) => x.id);
    dbg.storedVoices = stored.map((x) => x.name);
    // Instructions only where the checkpoint follows them (`none`: 0.6B
    // CustomVoice and Base refuse them): a style, or on VoiceDesign the
    // voice's description.
    const role = v.instructions;
    $('instruct-field').hidden = role === 'none';
    if (role === 'none') ui.instruct.value = '';
    if (role === 'style') {
      $('instruct-label').textContent = 'Style';
      $('instruct-hint').textContent = '(optional, e.g. cheerful, a little fast)';
    } else if (role === 'voice') {
      $('instruct-label').textContent = 'Voice description';
      $('instruct-hint').textContent = '(this checkpoint makes the voice from it; left empty, it speaks an undescribed voice)';
    }
    dbg.instructions = role;
    // Only a Base checkpoint makes voices; with no voice stored yet, that
    // is where to start.
    $('voices').hidden = v.family !== undefined && v.family !== 'Base';
    if (v.family === 'Base' && stored.length === 0) $('voices').open = true;
    log(`voices: ${dbg.voices.length}, languages: ${(v.languages || []).join(', ')}, model rate ${v.sample_rate} Hz`);
  }

  // -------------------------------------------------------------- audio --

  let ac = null;
  let node = null;

  async function ensureAudio() {
    if (!ac) {
      if (typeof AudioWorkletNode === 'undefined' || !window.isSecureContext) {
        throw new Error('AudioWorklet is not available here: browsers allow it only in secure contexts; open the page over https or on localhost.');
      }
      ac = new AudioContext({ latencyHint: 'interactive' });
      if (ac.sampleRate > 48000 || ac.sampleRate < 8000) {
        // The server resamples to 8000–48000 Hz; let the browser do the rest.
        await ac.close();
        ac = new AudioContext({ latencyHint: 'interactive', sampleRate: 48000 });
      }
      await ac.audioWorklet.addModule(new URL('worklet.js', location.href));
      node = new AudioWorkletNode(ac, 'tts-jitter-buffer', {
        numberOfInputs: 0,
        numberOfOutputs: 1,
        outputChannelCount: [1],
        processorOptions: { prebufferMs: Number(ui.prebuffer.value) },
      });
      node.port.onmessage = (e) => onWorklet(e.data);
      node.connect(ac.destination);
      ac.onstatechange = () => {
        dbg.audioState = ac.state;
        renderStatus();
      };
      dbg.audioRate = ac.sampleRate;
      log(`audio: AudioContext at ${ac.sampleRate} Hz, base latency ${(ac.baseLatency * 1000).toFixed(1)} ms`);
    }
    if (ac.state !== 'running') await ac.resume();
    dbg.audioState = ac.state;
    node.port.postMessage({ type: 'config', prebufferMs: Number(ui.prebuffer.value) });
  }

  function onWorklet(m) {
    const w = dbg.worklet;
    switch (m.type) {
      case 'stats':
        Object.assign(w, {
          played: m.played, buffered: m.buffered, underruns: m.underruns,
          underrunSamples: m.underrunSamples, state: m.state, dropped: m.dropped,
          overflowSamples: m.overflowSamples, maxBuffered: m.maxBuffered,
        });
        renderStatus();
        break;
      case 'played':
        for (const a of m.acks) sendAck(a.ctx, a.seq);
        break;
      case 'started':
        w.started += 1;
        w.state = 'playing';
        break;
      case 'underrun':
        w.underruns = m.underruns;
        log(`underrun after ${(m.played / ac.sampleRate).toFixed(2)} s played (buffer ran dry; waiting for the prebuffer)`);
        break;
      case 'drained':
        w.drained += 1;
        w.played = m.played;
        w.buffered = 0;
        w.state = 'idle';
        log('playback drained');
        renderStatus();
        updateButtons();
        break;
      case 'flushed':
        w.played = m.played;
        w.buffered = 0;
        w.state = 'idle';
        if (dbg.stop) {
          dbg.stop.flushed = true;
          dbg.stop.dropped = m.dropped;
          dbg.stop.flushMs = performance.now() - dbg.stop.t0;
          dbg.stop.playedAtFlush = m.played;
          renderStop();
        }
        renderStatus();
        updateButtons();
        break;
      default:
        break;
    }
  }

  function sendAck(ctx, seq) {
    const c = dbg.contexts[ctx];
    // A stopped context's audio was flushed, not played: nothing to ack.
    if (!c || c.stopped || c.state === 'cancelled' || c.state === 'failed') return;
    if (send({ type: 'audio.ack', context_id: ctx, seq })) {
      dbg.acksSent += 1;
      c.ackedSeq = seq;
    }
  }

  // ---------------------------------------------------------- websocket --

  let ws = null;
  let opening = null;
  let pendingUpdate = null; // {resolve, reject} while a session.update is in flight
  let applied = null; // settings key the server last confirmed
  const streams = new Map(); // stream_id -> context id

  function send(msg) {
    if (!ws || ws.readyState !== WebSocket.OPEN) return false;
    ws.send(JSON.stringify(msg));
    return true;
  }

  function connect() {
    if (ws && ws.readyState === WebSocket.OPEN) return Promise.resolve();
    if (opening) return opening;
    const u = new URL('v1/realtime', location.href);
    u.protocol = location.protocol === 'https:' ? 'wss:' : 'ws:';
    if (token) u.searchParams.set('token', token);
    dbg.connection = 'connecting';
    renderStatus();
    opening = new Promise((resolve, reject) => {
      const s = new WebSocket(u);
      s.binaryType = 'arraybuffer';
      let created = false;
      s.onmessage = (e) => {
        if (typeof e.data === 'string') {
          let m;
          try {
            m = JSON.parse(e.data);
          } catch {
            log('server sent a non-JSON text message');
            return;
          }
          if (m.type === 'session.created') {
            created = true;
            ws = s;
            opening = null;
            applied = null;
            dbg.connected = true;
            dbg.connection = 'open';
            dbg.sessionId = m.session_id;
            ui.model.textContent = `${m.model} · protocol v${m.protocol_version}`;
            log(`connected: session ${m.session_id}, model ${m.model}`);
            renderStatus();
            resolve();
          }
          onServerMessage(m);
        } else {
          onAudio(e.data);
        }
      };
      s.onclose = (e) => {
        dbg.connected = false;
        dbg.connection = 'closed';
        renderStatus();
        if (!created) {
          opening = null;
          reject(new Error(`The WebSocket could not be opened (code ${e.code}): the server refused it (${token ? 'wrong token?' : 'no ?token= in the page URL?'}) or is unreachable.`));
          return;
        }
        if (ws === s) ws = null;
        if (pendingUpdate) pendingUpdate.reject(new Error('connection closed'));
        pendingUpdate = null;
        for (const c of Object.values(dbg.contexts)) {
          if (c.state === 'open' || c.state === 'ended') c.state = 'lost';
        }
        updateButtons();
        log(`disconnected (code ${e.code}${e.reason ? `, ${e.reason}` : ''})`);
        if (e.code !== 1000) showError(`Connection closed (code ${e.code}${e.reason ? `: ${e.reason}` : ''}); Speak reconnects.`);
      };
    });
    return opening;
  }

  function settings() {
    const s = {
      voice: ui.voice.value || undefined,
      language: ui.language.value || 'auto',
      // "" clears it; VoiceDesign checkpoints need it.
      instruct: ui.instruct.value.trim(),
      format: ui.format.value,
      sample_rate: ac.sampleRate,
      audio_acks: true,
      // The worklet's prebuffer: the server paces and measures for it.
      prebuffer_ms: Math.min(Math.max(Number(ui.prebuffer.value) || 0, 0), 10000),
      // Stream-as-I-type: a short deadline, so finished words are spoken
      // while the user goes on typing.
      chunking: ui.live.checked ? { mode: 'clause', max_delay_ms: 600, min_chars: 12 } : { mode: 'clause', max_delay_ms: 400, min_chars: 24 },
    };
    return s;
  }

  // Settings are captured when a context is created: update them (and wait
  // for the confirmation) before each context whose settings changed.
  async function ensureSession() {
    const s = settings();
    const key = JSON.stringify(s);
    if (key === applied) return;
    const done = new Promise((resolve, reject) => {
      pendingUpdate = { resolve, reject };
    });
    send({ type: 'session.update', session: s });
    await done;
    applied = key;
  }

  function onServerMessage(m) {
    const c = m.context_id ? dbg.contexts[m.context_id] : null;
    switch (m.type) {
      case 'session.created':
        break;
      case 'session.updated':
        dbg.session = m.session;
        dbg.sampleRate = m.session.sample_rate;
        log(`session: voice ${m.session.voice}, ${m.session.sample_rate} Hz ${m.session.format} (model ${m.session.native_sample_rate} Hz)`);
        if (pendingUpdate) pendingUpdate.resolve();
        pendingUpdate = null;
        break;
      case 'context.started':
        streams.set(m.stream_id, m.context_id);
        if (c) c.streamId = m.stream_id;
        if (m.sample_rate !== ac.sampleRate) log(`warning: stream at ${m.sample_rate} Hz, AudioContext at ${ac.sampleRate} Hz`);
        log(`context ${m.context_id}: started (stream ${m.stream_id}, ${m.sample_rate} Hz ${m.format})`);
        break;
      case 'audio':
        onAudioJson(m);
        break;
      case 'context.done':
        if (c) {
          c.state = 'done';
          c.metrics = m.metrics;
        }
        ui.server.textContent = serverFigures(m.metrics);
        log(`context ${m.context_id}: done — ${serverFigures(m.metrics)}`);
        break;
      case 'context.cancelled':
        if (c) {
          c.state = 'cancelled';
          c.cancel = m;
        }
        ui.server.textContent = `cancelled (${m.reason}) — ${serverFigures(m.metrics)}`;
        if (dbg.stop && dbg.stop.contexts.includes(m.context_id)) {
          dbg.stop.acks[m.context_id] = {
            reason: m.reason,
            cancel_ack_ms: m.cancel_ack_ms,
            late_audio_samples: m.late_audio_samples,
            interruption_ms: m.interruption_ms,
            roundtrip_ms: performance.now() - dbg.stop.t0,
          };
          dbg.stop.ack = dbg.stop.acks[m.context_id];
          renderStop();
        }
        log(`context ${m.context_id}: cancelled (${m.reason}), server ack ${fmt(m.cancel_ack_ms, 1)} ms, late audio ${m.late_audio_samples} samples`);
        break;
      case 'context.failed':
        if (c) c.state = 'failed';
        showError(`Context ${m.context_id} failed: ${m.code}: ${m.message}`);
        break;
      case 'speech.started':
      case 'speech.stopped':
        log(m.type);
        break;
      case 'error':
        if (pendingUpdate && !m.context_id) {
          pendingUpdate.reject(new Error(`${m.code}: ${m.message}`));
          pendingUpdate = null;
        }
        showError(`Server: ${m.code}: ${m.message}${m.valid ? ` (valid: ${m.valid.join(', ')})` : ''}`);
        break;
      case 'pong':
        break;
      default:
        log(`unknown server message ${m.type}`);
    }
    updateButtons();
  }

  function onAudio(buf) {
    if (buf.byteLength < 16) return log('short binary message');
    const h = new DataView(buf);
    const version = h.getUint8(0);
    const flags = h.getUint8(1);
    const hlen = h.getUint16(2, true);
    if (version !== 1 || hlen < 16 || hlen > buf.byteLength) return log(`bad audio header (version ${version}, length ${hlen})`);
    const streamId = h.getUint32(4, true);
    const seq = h.getUint32(8, true);
    const payload = buf.slice(hlen);
    const samples = (flags & 2) ? new Float32Array(payload) : pcm16ToF32(payload);
    chunk(streams.get(streamId), seq, (flags & 1) !== 0, samples, buf.byteLength);
  }

  function onAudioJson(m) {
    const bin = atob(m.audio);
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    const samples = m.format === 'f32' ? new Float32Array(bytes.buffer) : pcm16ToF32(bytes.buffer);
    chunk(m.context_id, m.seq, m.terminal, samples, bytes.length);
  }

  function pcm16ToF32(ab) {
    const i16 = new Int16Array(ab, 0, ab.byteLength >> 1);
    const f = new Float32Array(i16.length);
    for (let i = 0; i < i16.length; i++) f[i] = i16[i] / 32768;
    return f;
  }

  function chunk(id, seq, terminal, samples, bytes) {
    const c = id ? dbg.contexts[id] : null;
    if (!c) return log(`audio for an unknown stream (seq ${seq})`);
    if (c.state === 'cancelled') {
      dbg.lateChunks += 1; // the protocol promises none: shown if it happens
      return;
    }
    if (c.stopped) {
      dbg.droppedAfterStop += 1;
      return;
    }
    dbg.chunks += 1;
    dbg.bytes += bytes;
    c.chunks += 1;
    c.samples += samples.length;
    // Arrival time (ms since the context's first append) and length of
    // each chunk: what the jitter buffer had to work with.
    if (c.arrivals.length < 2000) c.arrivals.push([Math.round(performance.now() - c.t0), samples.length]);
    if (c.ttfpMs === null) {
      c.ttfpMs = performance.now() - c.t0;
      dbg.ttfpMs = c.ttfpMs;
      log(`context ${id}: first audio after ${c.ttfpMs.toFixed(0)} ms`);
    }
    node.port.postMessage({ type: 'push', ctx: id, seq, samples }, [samples.buffer]);
    if (terminal) {
      c.terminal = true;
      node.port.postMessage({ type: 'end', ctx: id });
    }
    renderStatus();
  }

  // ----------------------------------------------------------- contexts --

  let nextId = 1;
  let live = null; // stream-as-I-type: {id, sent} while a context is open
  let liveBase = ''; // text already spoken by earlier live contexts

  function newContext() {
    const id = `c${nextId++}-${Date.now().toString(36)}`;
    dbg.contexts[id] = { id, state: 'open', chunks: 0, samples: 0, ttfpMs: null, t0: performance.now(), stopped: false, terminal: false, ackedSeq: null, arrivals: [] };
    dbg.current = id;
    dbg.ttfpMs = null;
    return id;
  }

  async function prepare() {
    clearError();
    await ensureAudio();
    await connect();
    await ensureSession();
  }

  async function speak() {
    if (live) return finishLive();
    const text = ui.text.value;
    if (!text.trim()) {
      showError('Type some text first.');
      return;
    }
    try {
      await prepare();
    } catch (e) {
      showError(e.message);
      return;
    }
    const id = newContext();
    // One append per ~1000 characters (any split works: the server
    // segments the text itself), then the end of input.
    for (let i = 0; i < text.length; i += 1000) send({ type: 'context.append', context_id: id, text: text.slice(i, i + 1000) });
    send({ type: 'context.end', context_id: id });
    dbg.contexts[id].state = 'ended';
    log(`context ${id}: ${text.length} characters sent`);
    updateButtons();
  }

  // Stream as I type: every edit that extends the text appends the new
  // characters to one open context; Speak (now "Finish") ends it.
  let liveChain = Promise.resolve();
  function onInput() {
    if (!ui.live.checked) return;
    liveChain = liveChain.then(liveStep).catch((e) => showError(e.message));
  }

  async function liveStep() {
    const text = ui.text.value;
    if (!live) {
      const fresh = text.startsWith(liveBase) ? text.slice(liveBase.length) : text;
      if (!fresh.trim()) return;
      await prepare();
      live = { id: newContext(), sent: text.startsWith(liveBase) ? liveBase : '' };
      updateButtons();
    }
    let common = 0;
    while (common < live.sent.length && common < text.length && text[common] === live.sent[common]) common++;
    if (common < live.sent.length) {
      ui.hint.textContent = 'Edits before the spoken point are not re-sent.';
      live.sent = text.slice(0, common);
      return;
    }
    const delta = text.slice(live.sent.length);
    if (!delta) return;
    send({ type: 'context.append', context_id: live.id, text: delta });
    live.sent = text;
  }

  async function finishLive() {
    await liveChain;
    if (!live) return;
    send({ type: 'context.end', context_id: live.id });
    const c = dbg.contexts[live.id];
    if (c && c.state === 'open') c.state = 'ended';
    liveBase = live.sent;
    live = null;
    updateButtons();
  }

  // Stop = barge-in from the page: silence now (flush the worklet), then
  // cancel every context the server is still working on.
  function stop() {
    const t0 = performance.now();
    const open = Object.values(dbg.contexts).filter((c) => c.state === 'open' || c.state === 'ended');
    dbg.stop = {
      t0, contexts: open.map((c) => c.id), acks: {}, ack: null, flushed: false, dropped: null,
      flushMs: null, playedAtFlush: null, bufferedAtStop: dbg.worklet.buffered,
    };
    if (node) node.port.postMessage({ type: 'flush' });
    for (const c of open) {
      c.stopped = true;
      send({ type: 'context.cancel', context_id: c.id });
    }
    if (live) {
      liveBase = ui.text.value;
      live = null;
    }
    log(`stop: flushing playback, cancelling ${open.length ? open.map((c) => c.id).join(', ') : 'nothing (the server had finished)'}`);
    renderStop();
    updateButtons();
  }

  // ------------------------------------------------------------ display --

  const fmt = (v, d = 0) => (v === null || v === undefined || Number.isNaN(v) ? '–' : Number(v).toFixed(d));

  function serverFigures(mt) {
    if (!mt) return '';
    return `server: ttfp ${fmt(mt.ttfp_ms)} ms, rtf ${fmt(mt.rtf, 2)}, ${fmt(mt.audio_s, 2)} s audio, ${mt.segments ?? '–'} segment(s), `
      + `underruns a player would have at ${fmt(mt.prebuffer_ms)} ms prebuffer: ${mt.underruns_at_prebuffer ?? '–'}`;
  }

  function renderStop() {
    const s = dbg.stop;
    if (!s) return;
    const rate = ac ? ac.sampleRate : 1;
    const parts = [];
    if (s.flushed) parts.push(`silent after ${fmt(s.flushMs, 1)} ms (dropped ${fmt((s.dropped / rate) * 1000)} ms of buffered audio)`);
    else parts.push('flushing…');
    if (s.contexts.length === 0) parts.push('the server had already finished sending');
    else if (s.ack) {
      const a = s.ack;
      parts.push(`server cancel ack ${fmt(a.cancel_ack_ms, 1)} ms (round trip ${fmt(a.roundtrip_ms, 1)} ms), late audio ${a.late_audio_samples} samples`);
      if (a.interruption_ms !== null && a.interruption_ms !== undefined) parts.push(`interruption ${fmt(a.interruption_ms, 1)} ms`);
    } else parts.push('waiting for the server\'s cancel ack…');
    ui.stopinfo.textContent = `Stopped: ${parts.join('; ')}.`;
    ui.stopinfo.hidden = false;
  }

  let lastRender = 0;
  function renderStatus() {
    const now = performance.now();
    if (now - lastRender < 40 && dbg.connection === 'open') return;
    lastRender = now;
    const rate = ac ? ac.sampleRate : null;
    ui.conn.textContent = dbg.connection === 'open' ? `connected${dbg.sampleRate ? ` · ${dbg.sampleRate} Hz` : ''}` : dbg.connection;
    ui.conn.className = `v ${dbg.connection}`;
    ui.ttfp.textContent = dbg.ttfpMs === null ? '–' : `${dbg.ttfpMs.toFixed(0)} ms`;
    ui.chunks.textContent = String(dbg.chunks);
    const bufMs = rate ? (dbg.worklet.buffered / rate) * 1000 : 0;
    ui.buffered.textContent = `${bufMs.toFixed(0)} ms`;
    ui.bufmeter.value = Math.min(bufMs, Number(ui.bufmeter.max));
    ui.underruns.textContent = String(dbg.worklet.underruns);
    ui.played.textContent = rate ? `${(dbg.worklet.played / rate).toFixed(2)} s` : '–';
    ui.audio.textContent = ac ? `${ac.state} · ${ac.sampleRate} Hz · ${dbg.worklet.state}` : 'not started';
  }

  function updateButtons() {
    const busy = Object.values(dbg.contexts).some((c) => c.state === 'open' || c.state === 'ended');
    const playing = dbg.worklet.buffered > 0 || dbg.worklet.state !== 'idle';
    ui.stop.disabled = !(busy || playing || live);
    ui.speak.textContent = live ? 'Finish' : 'Speak';
  }

  // ------------------------------------------------------- make a voice --
  // The server decodes WAV/FLAC/MP3/OGG/M4A but not the Opus/WebM a
  // MediaRecorder makes: the page decodes the clip itself (the browser can
  // read its own recordings and most files) and sends 16-bit mono WAV.

  let clip = null; // {samples: Float32Array, rate, secs, source}
  let recorder = null;

  function wavBlob(samples, rate) {
    const b = new DataView(new ArrayBuffer(44 + samples.length * 2));
    const str = (o, t) => { for (let i = 0; i < t.length; i++) b.setUint8(o + i, t.charCodeAt(i)); };
    str(0, 'RIFF'); b.setUint32(4, 36 + samples.length * 2, true); str(8, 'WAVEfmt ');
    b.setUint32(16, 16, true); b.setUint16(20, 1, true); b.setUint16(22, 1, true);
    b.setUint32(24, rate, true); b.setUint32(28, rate * 2, true); b.setUint16(32, 2, true);
    b.setUint16(34, 16, true); str(36, 'data'); b.setUint32(40, samples.length * 2, true);
    for (let i = 0; i < samples.length; i++) {
      const x = Math.max(-1, Math.min(1, samples[i]));
      b.setInt16(44 + i * 2, Math.round(x * 32767), true);
    }
    return new Blob([b.buffer], { type: 'audio/wav' });
  }

  async function takeClip(arrayBuffer, source) {
    const ctx = new (window.OfflineAudioContext || window.webkitOfflineAudioContext)(1, 1, 48000);
    const audio = await ctx.decodeAudioData(arrayBuffer);
    const mono = new Float32Array(audio.length);
    for (let c = 0; c < audio.numberOfChannels; c++) {
      const d = audio.getChannelData(c);
      for (let i = 0; i < d.length; i++) mono[i] += d[i] / audio.numberOfChannels;
    }
    clip = { samples: mono, rate: audio.sampleRate, secs: audio.duration, source };
    ui.clipinfo.textContent = `${source}: ${audio.duration.toFixed(1)} s`;
    ui.save.disabled = false;
  }

  async function toggleRecording() {
    if (recorder) {
      recorder.stop();
      return;
    }
    let stream;
    try {
      stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    } catch (e) {
      showError(`No microphone (${e.message}); pick a file instead.`);
      return;
    }
    const parts = [];
    recorder = new MediaRecorder(stream);
    recorder.ondataavailable = (e) => parts.push(e.data);
    recorder.onstop = async () => {
      stream.getTracks().forEach((t) => t.stop());
      recorder = null;
      ui.record.textContent = 'Record';
      try {
        await takeClip(await new Blob(parts).arrayBuffer(), 'recording');
      } catch (e) {
        showError(`The recording could not be read: ${e.message}`);
      }
    };
    recorder.start();
    ui.record.textContent = 'Stop recording';
    ui.clipinfo.textContent = 'recording…';
  }

  async function saveVoice() {
    const name = ui.vname.value.trim();
    if (!clip || !name) {
      showError('Record or pick a clip and give the voice a name first.');
      return;
    }
    const fd = new FormData();
    fd.append('name', name);
    if (ui.vtext.value.trim()) fd.append('ref_text', ui.vtext.value.trim());
    fd.append('audio_sample', wavBlob(clip.samples, clip.rate), `${clip.source}.wav`);
    ui.save.disabled = true;
    ui.saveinfo.textContent = 'making the voice…';
    try {
      const r = await fetch(new URL('v1/audio/voices', location.href), { method: 'POST', headers: authHeaders(), body: fd });
      const body = await r.json().catch(() => ({}));
      if (r.status !== 201) {
        ui.saveinfo.textContent = '';
        showError(`Saving the voice failed (HTTP ${r.status}): ${(body.error && body.error.message) || r.statusText}`);
        return;
      }
      clearError();
      const t = body.timings_ms || {};
      ui.saveinfo.textContent = `saved "${body.name}" (${body.mode}, x-vector ${Math.round(t.x_vector || 0)} ms, codes ${Math.round(t.codes || 0)} ms)`;
      log(`voice saved: ${body.name} (${body.mode})`);
      const v = await fetch(new URL('v1/audio/voices', location.href), { headers: authHeaders(), cache: 'no-store' });
      if (v.ok) fillVoices(await v.json(), body.name);
    } catch (e) {
      showError(`Saving the voice failed: ${e.message}`);
    } finally {
      ui.save.disabled = !clip;
    }
  }

  // ------------------------------------------------------------- wiring --

  ui.record.addEventListener('click', () => toggleRecording());
  ui.clip.addEventListener('change', async () => {
    const f = ui.clip.files && ui.clip.files[0];
    if (!f) return;
    try {
      await takeClip(await f.arrayBuffer(), f.name.replace(/\.[^.]*$/, '') || 'upload');
      if (!ui.vname.value) ui.vname.value = (f.name.replace(/\.[^.]*$/, '').replace(/[^A-Za-z0-9_.-]/g, '-') || 'voice').slice(0, 64);
    } catch (e) {
      showError(`This file could not be decoded by the browser: ${e.message}`);
    }
  });
  ui.save.addEventListener('click', () => saveVoice());

  ui.speak.addEventListener('click', () => speak());
  ui.stop.addEventListener('click', () => stop());
  ui.text.addEventListener('input', onInput);
  ui.text.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      speak();
    } else if (e.key === 'Escape') {
      stop();
    }
  });
  ui.live.addEventListener('change', () => {
    ui.hint.textContent = ui.live.checked ? 'Text is spoken as you type; Finish (Ctrl+Enter) ends it.' : 'Ctrl+Enter speaks, Esc stops.';
    if (!ui.live.checked && live) finishLive();
    if (ui.live.checked) liveBase = ui.text.value;
  });
  ui.prebuffer.addEventListener('change', () => {
    if (node) node.port.postMessage({ type: 'config', prebufferMs: Number(ui.prebuffer.value) });
  });
  setInterval(() => {
    renderStatus();
    updateButtons();
  }, 250);

  (async () => {
    renderStatus();
    if (await loadVoices()) {
      ui.speak.disabled = false;
      try {
        await connect();
      } catch (e) {
        showError(e.message);
      }
    }
  })();
})();
