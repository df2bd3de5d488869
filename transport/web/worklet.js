// tts-rt jitter buffer: an AudioWorklet processor that plays the audio the
// page receives over the WebSocket.
//
// The page posts chunks ({type: 'push', ctx, seq, samples: Float32Array at
// the AudioContext's rate}) into a ring buffer. Playback starts once
// `prebufferMs` of audio is buffered (or the stream's end is known); if the
// buffer runs dry before the end, that is an underrun: it is counted and
// playback waits for the prebuffer again. The processor reports back:
//   {type: 'stats', buffered, played, underruns, underrunSamples, state, ...}
//     about every 50 ms (sample counts at the context's rate);
//   {type: 'played', acks: [{ctx, seq}]} when the last sample of a chunk has
//     been played (the page turns it into `audio.ack`);
//   {type: 'started'} / {type: 'drained'} at the start / end of playback,
//     {type: 'underrun'} when the buffer ran dry mid-stream;
//   {type: 'flushed', dropped} after a flush (Stop): the buffer is emptied at
//     once, so the next render quantum is silence.
// Only `played` counts real audio; silence rendered while idle is not.
'use strict';

const MAX_SECONDS = 300;

class JitterBuffer extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const o = (options && options.processorOptions) || {};
    this.cap = Math.max(1024, Math.round(sampleRate * 30));
    this.buf = new Float32Array(this.cap);
    // Absolute sample positions (doubles are exact far beyond any session).
    this.read = 0;
    this.write = 0;
    this.prebuffer = this.samplesOf(o.prebufferMs ?? 200);
    this.state = 'idle'; // idle | prebuffering | playing
    this.ended = true; // no more audio expected: drain without an underrun
    this.marks = []; // {ctx, seq, end}: chunk boundaries for acks
    this.played = 0;
    this.underruns = 0;
    this.underrunSamples = 0;
    this.dropped = 0; // samples thrown away by flushes
    this.overflowSamples = 0; // samples refused beyond MAX_SECONDS
    this.maxBuffered = 0;
    this.sinceReport = 0;
    this.reportEvery = Math.round(sampleRate * 0.05);
    this.port.onmessage = (e) => this.onMessage(e.data);
  }

  samplesOf(ms) {
    const v = Number(ms);
    return Number.isFinite(v) && v > 0 ? Math.round((sampleRate * v) / 1000) : 0;
  }

  onMessage(m) {
    switch (m && m.type) {
      case 'push':
        this.push(m);
        break;
      case 'end':
        this.ended = true;
        break;
      case 'flush': {
        const dropped = this.write - this.read;
        this.dropped += dropped;
        this.read = this.write;
        this.marks = [];
        this.state = 'idle';
        this.ended = true;
        this.port.postMessage({ type: 'flushed', dropped, played: this.played });
        this.report();
        break;
      }
      case 'config':
        this.prebuffer = this.samplesOf(m.prebufferMs);
        break;
      default:
        break;
    }
  }

  push(m) {
    const s = m.samples instanceof Float32Array ? m.samples : new Float32Array(0);
    let n = s.length;
    const need = this.write - this.read + n;
    if (need > this.cap) this.grow(need);
    if (this.write - this.read + n > this.cap) {
      // Past MAX_SECONDS of buffered audio: keep what fits, count the rest.
      const fit = this.cap - (this.write - this.read);
      this.overflowSamples += n - fit;
      n = fit;
    }
    let w = this.write % this.cap;
    const first = Math.min(n, this.cap - w);
    this.buf.set(s.subarray(0, first), w);
    if (first < n) this.buf.set(s.subarray(first, n), 0);
    this.write += n;
    this.marks.push({ ctx: m.ctx, seq: m.seq, end: this.write });
    this.ended = false;
    if (this.state === 'idle') this.state = 'prebuffering';
    const buffered = this.write - this.read;
    if (buffered > this.maxBuffered) this.maxBuffered = buffered;
  }

  grow(need) {
    const maxCap = Math.round(sampleRate * MAX_SECONDS);
    let cap = this.cap;
    while (cap < need && cap < maxCap) cap *= 2;
    cap = Math.min(cap, maxCap);
    if (cap <= this.cap) return;
    const nb = new Float32Array(cap);
    for (let j = this.read; j < this.write; j++) nb[j % cap] = this.buf[j % this.cap];
    this.buf = nb;
    this.cap = cap;
  }

  process(_inputs, outputs) {
    const out = outputs[0];
    if (!out || out.length === 0) return true;
    const ch = out[0];
    const n = ch.length;
    let i = 0;
    let drained = false;
    if (this.state === 'prebuffering') {
      const avail = this.write - this.read;
      if (avail >= Math.max(1, this.prebuffer) || (this.ended && avail > 0)) {
        this.state = 'playing';
        this.port.postMessage({ type: 'started', played: this.played });
      } else if (this.ended && avail === 0) {
        this.state = 'idle';
      }
    }
    if (this.state === 'playing') {
      const k = Math.min(n, this.write - this.read);
      const r = this.read % this.cap;
      const first = Math.min(k, this.cap - r);
      ch.set(this.buf.subarray(r, r + first), 0);
      if (first < k) ch.set(this.buf.subarray(0, k - first), first);
      this.read += k;
      this.played += k;
      i = k;
      if (this.read === this.write && (k < n || this.ended)) {
        if (this.ended) {
          this.state = 'idle';
          drained = true;
        } else if (k < n) {
          // Ran dry mid-stream: the listener hears a gap.
          this.underruns += 1;
          this.underrunSamples += n - k;
          this.state = 'prebuffering';
          this.port.postMessage({ type: 'underrun', played: this.played, underruns: this.underruns });
        }
      }
    }
    if (i < n) ch.fill(0, i);
    for (let c = 1; c < out.length; c++) out[c].set(ch);
    // Acks before `drained`: the page sees every chunk played by then.
    this.ackPlayed();
    if (drained) this.port.postMessage({ type: 'drained', played: this.played });
    this.sinceReport += n;
    if (this.sinceReport >= this.reportEvery) this.report();
    return true;
  }

  ackPlayed() {
    if (this.marks.length === 0 || this.marks[0].end > this.read) return;
    const last = new Map();
    while (this.marks.length && this.marks[0].end <= this.read) {
      const mk = this.marks.shift();
      last.set(mk.ctx, mk.seq);
    }
    const acks = [];
    for (const [ctx, seq] of last) acks.push({ ctx, seq });
    this.port.postMessage({ type: 'played', acks });
  }

  report() {
    this.sinceReport = 0;
    this.port.postMessage({
      type: 'stats',
      buffered: this.write - this.read,
      played: this.played,
      underruns: this.underruns,
      underrunSamples: this.underrunSamples,
      dropped: this.dropped,
      overflowSamples: this.overflowSamples,
      maxBuffered: this.maxBuffered,
      state: this.state,
    });
  }
}

registerProcessor('tts-jitter-buffer', JitterBuffer);
