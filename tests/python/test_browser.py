"""The browser page (`/`, transport/web/) in headless Chromium.

Debian's /usr/bin/chromium driven by the `playwright` package (no browser
download). The page streams text over /v1/realtime and plays it through its
AudioWorklet jitter buffer; assertions read `window.ttsDebug`, the state the
page exposes. Headless Chromium without a sound card still runs an
AudioContext (it renders to a null sink), so the worklet really plays.

Environment:
  TTS_RT_CHROMIUM   the browser (default /usr/bin/chromium)
  TTS_RT_SCREENSHOTS a directory: save speak.png, stop.png, live.png and
                     wrong-token.png there (to look at the page)
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Pinned in requirements.txt: a missing package is a failure, not a skip.
from playwright import sync_api as playwright_sync  # noqa: E402

CHROMIUM = os.environ.get("TTS_RT_CHROMIUM", "/usr/bin/chromium")
# As root in a container: no sandbox, no GPU, nothing that phones home.
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",
]
# Several sentences: with the tiny fixture every segment runs to
# --max-frames (40 frames, 3.2 s), and with audio acks the server stays
# at most ~4 s ahead of playback, so there is audio left to stop.
LONG_TEXT = " ".join(
    f"This is sentence number {i} of a long text that keeps the speaker busy." for i in range(1, 9)
)
TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def server():
    """The page's tests run on the reference numerics (`--precision f32`):
    on the tiny random fixture they keep every segment running to
    --max-frames, so a long text is still being spoken when the test
    presses Stop. At `serve`'s default (`fast`) the same random weights end
    most segments within a few frames, and the text can be spoken whole
    before the click."""
    from conftest import serve

    with serve("tiny-a", "--precision", "f32") as srv:
        yield srv


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium not found at {CHROMIUM} (apt-get install chromium, or set TTS_RT_CHROMIUM)")
    with playwright_sync.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1000, "height": 900})
    pg = ctx.new_page()
    console: list[str] = []
    pg.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    pg.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
    pg.console_lines = console  # type: ignore[attr-defined]
    yield pg
    ctx.close()


def debug(pg) -> dict:
    return pg.evaluate("() => JSON.parse(JSON.stringify(window.ttsDebug))")


def wait_for(pg, expr: str, what: str, timeout_ms: int = TIMEOUT_MS) -> None:
    try:
        pg.wait_for_function(expr, timeout=timeout_ms)
    except playwright_sync.TimeoutError:
        pytest.fail(f"timed out waiting for {what}; page state: {debug(pg)}; console: {pg.console_lines}")


def screenshot(pg, name: str) -> None:
    d = os.environ.get("TTS_RT_SCREENSHOTS")
    if d:
        Path(d).mkdir(parents=True, exist_ok=True)
        pg.screenshot(path=str(Path(d) / f"{name}.png"), full_page=True)


def assert_clean_console(pg) -> None:
    bad = [l for l in pg.console_lines if l.startswith(("pageerror", "error"))]
    assert not bad, f"errors in the browser console (CSP violations, exceptions): {bad}"


def open_page(pg, server, token: str) -> None:
    pg.goto(f"{server.http}/?token={token}")
    wait_for(pg, "() => window.ttsDebug && window.ttsDebug.connected", "the WebSocket to connect")
    wait_for(pg, "() => !document.getElementById('speak').disabled", "the Speak button")


def test_browser_speaks_plays_and_stops(server, page):
    open_page(page, server, server.token)
    voices = page.eval_on_selector_all("#voice option", "os => os.map(o => o.value)")
    assert "alloy" in voices and len(voices) > 1, voices

    # 1. A short text plays to the end, acknowledged as it plays; the page
    # tells the server the prebuffer its player holds.
    page.fill("#prebuffer", "300")
    page.fill("#text", "Hello from the browser test.")
    page.click("#speak")
    wait_for(page, "() => window.ttsDebug.chunks >= 1", "the first audio chunk")
    wait_for(
        page,
        "() => { const d = window.ttsDebug; const c = d.contexts[d.current];"
        " return c && c.state === 'done' && d.worklet.drained >= 1 && d.worklet.buffered === 0; }",
        "the first utterance to finish playing",
    )
    d = debug(page)
    first = d["contexts"][d["current"]]
    assert d["connection"] == "open" and d["connected"]
    assert d["audioState"] == "running", d
    assert d["sampleRate"] == d["audioRate"], "the server resampled to the AudioContext's rate"
    assert d["session"]["format"] == "f32" and d["session"]["audio_acks"] is True
    assert d["session"]["prebuffer_ms"] == 300, "the page declares its player's prebuffer"
    assert d["ttfpMs"] is not None and d["ttfpMs"] > 0
    assert first["chunks"] >= 1 and first["samples"] > 0
    # Everything received was played (the tail of the buffer included).
    assert d["worklet"]["played"] >= first["samples"], (d["worklet"], first)
    assert d["acksSent"] >= 1 and first["ackedSeq"] == first["chunks"] - 1, first
    assert first["metrics"]["complete"] is True
    assert not d["errors"], d["errors"]
    screenshot(page, "speak")

    # 2. A long text, stopped mid-utterance: silence at once, the server
    # acknowledges the cancel, and nothing plays afterwards.
    page.fill("#text", LONG_TEXT)
    page.click("#speak")
    wait_for(
        page,
        "() => { const d = window.ttsDebug; const c = d.contexts[d.current];"
        " return c && c.chunks >= 2 && d.worklet.state === 'playing' && d.worklet.buffered > 0; }",
        "the long text to be playing",
    )
    before = debug(page)
    long_id = before["current"]
    assert before["contexts"][long_id]["state"] in ("open", "ended"), "still being synthesized"
    page.click("#stop")
    wait_for(page, "() => window.ttsDebug.stop && window.ttsDebug.stop.flushed", "the worklet flush")
    wait_for(page, "() => window.ttsDebug.stop && window.ttsDebug.stop.ack", "the server's cancel ack")
    d = debug(page)
    stop = d["stop"]
    assert stop["contexts"] == [long_id]
    assert stop["ack"]["reason"] == "client"
    assert stop["ack"]["late_audio_samples"] == 0
    assert stop["ack"]["cancel_ack_ms"] >= 0
    assert d["contexts"][long_id]["state"] == "cancelled"
    played_at_stop = stop["playedAtFlush"]
    page.wait_for_timeout(600)
    d = debug(page)
    assert d["worklet"]["played"] == played_at_stop, "no audio played after Stop"
    assert d["worklet"]["buffered"] == 0 and d["worklet"]["state"] == "idle"
    assert d["lateChunks"] == 0, "no audio of a context after its context.cancelled"
    info = page.inner_text("#stopinfo")
    assert "Stopped" in info and "server cancel ack" in info, info
    assert page.is_disabled("#stop")
    screenshot(page, "stop")

    # 3. The session goes on: the next text plays.
    page.fill("#text", "And one more.")
    page.click("#speak")
    wait_for(
        page,
        "() => { const d = window.ttsDebug; const c = d.contexts[d.current];"
        f" return d.current !== '{long_id}' && c && c.state === 'done' && d.worklet.drained >= 2; }}",
        "the next utterance after Stop",
    )
    assert not debug(page)["errors"]
    status = page.inner_text(".status")
    for label in ("connected", "ttfp", "chunks", "buffered", "underruns"):
        assert label in status.lower(), status
    assert_clean_console(page)


def test_browser_stream_as_i_type(server, page):
    open_page(page, server, server.token)
    page.fill("#text", "")
    # pcm16 here (f32 in the other test): both payload decoders run.
    page.select_option("#format", "pcm16")
    page.check("#live")
    page.click("#text")
    # Typed slowly, like a person: words reach the server as they are typed
    # and the first audio may start before the text is finished.
    page.keyboard.type("Streaming while typing, one word at a time. ", delay=15)
    wait_for(page, "() => window.ttsDebug.current !== null", "a live context")
    live_id = debug(page)["current"]
    assert page.inner_text("#speak") == "Finish"
    page.click("#speak")
    wait_for(
        page,
        f"() => {{ const c = window.ttsDebug.contexts['{live_id}'];"
        " return c && c.state === 'done' && window.ttsDebug.worklet.drained >= 1; }",
        "the typed text to be spoken",
    )
    d = debug(page)
    assert d["session"]["format"] == "pcm16"
    assert d["contexts"][live_id]["chunks"] >= 1
    assert d["worklet"]["played"] > 0
    assert not d["errors"], d["errors"]
    screenshot(page, "live")
    assert_clean_console(page)


def test_browser_wrong_token_shows_a_clear_error(server, page):
    page.goto(f"{server.http}/?token=not-the-token")
    wait_for(page, "() => window.ttsDebug && window.ttsDebug.lastError", "an error on the page")
    err = page.inner_text("#error")
    assert page.is_visible("#error")
    assert "401" in err and "token" in err.lower(), err
    assert page.is_disabled("#speak")
    d = debug(page)
    assert d["connection"] == "unauthorized" and not d["connected"]
    screenshot(page, "wrong-token")

    # Without any token: the page itself loads (it is public), the error
    # says a token is needed.
    page.goto(f"{server.http}/")
    wait_for(page, "() => window.ttsDebug && window.ttsDebug.lastError", "an error on the page")
    err = page.inner_text("#error")
    assert "needs a token" in err, err


# The jitter buffer's logic, deterministically: worklet.js (as served) runs
# on a blank page under a stand-in AudioWorkletProcessor, fed and pulled by
# hand one 128-sample render quantum at a time.
WORKLET_HARNESS = """
async ([src, rate, prebufferMs]) => {
  const msgs = [];
  let Cls = null;
  const scope = {
    sampleRate: rate,
    AudioWorkletProcessor: class { constructor() { this.port = { postMessage: (m) => msgs.push(m) }; } },
    registerProcessor: (name, c) => { Cls = c; },
  };
  new Function('sampleRate', 'AudioWorkletProcessor', 'registerProcessor', src)(
    scope.sampleRate, scope.AudioWorkletProcessor, scope.registerProcessor);
  const p = new Cls({ processorOptions: { prebufferMs } });
  let next = 0; // value of the next pushed sample: a ramp 1, 2, 3, ...
  const out = [];
  const api = {
    push(ctx, seq, n) {
      const s = new Float32Array(n);
      for (let i = 0; i < n; i++) s[i] = ++next;
      p.port.onmessage({ data: { type: 'push', ctx, seq, samples: s } });
    },
    msg(m) { p.port.onmessage({ data: m }); },
    quantum() {
      const o = [new Float32Array(128)];
      p.process([], [o]);
      out.push(...o[0]);
      return Array.from(o[0]);
    },
  };
  window.__jb = { p, api, msgs, out };
  return Cls.name;
}
"""


def test_worklet_jitter_buffer_logic(server, browser):
    import urllib.request

    with urllib.request.urlopen(f"{server.http}/worklet.js") as r:
        src = r.read().decode()
    pg = browser.new_page()
    try:
        pg.goto("about:blank")
        # 1000 Hz so that 200 ms of prebuffer is 200 samples.
        assert pg.evaluate(WORKLET_HARNESS, [src, 1000, 200]) == "JitterBuffer"

        def run(js: str):
            return pg.evaluate(f"() => {{ const {{p, api, msgs, out}} = window.__jb; {js} }}")

        # Below the prebuffer: silence, nothing played.
        q = run("api.push('a', 0, 150); return api.quantum();")
        assert q == [0.0] * 128
        assert run("return [p.state, p.played, p.underruns];") == ["prebuffering", 0, 0]
        # Past it: the samples come out in order.
        q = run("api.push('a', 1, 150); return api.quantum();")
        assert q == [float(i) for i in range(1, 129)]
        assert run("return msgs.filter(m => m.type === 'started').length;") == 1
        # Chunk 0 (samples 1..150) is acknowledged once its last sample played.
        run("api.quantum();")  # samples 129..256
        acks = run("return msgs.filter(m => m.type === 'played').map(m => m.acks);")
        assert acks == [[{"ctx": "a", "seq": 0}]]
        # Running dry before the end of the stream: one underrun, the tail of
        # the quantum is silence, and playback waits for the prebuffer again.
        q = run("return api.quantum();")  # samples 257..300, then dry
        assert q[:44] == [float(i) for i in range(257, 301)] and q[44:] == [0.0] * 84
        assert run("return [p.state, p.played, p.underruns, p.underrunSamples];") == [
            "prebuffering", 300, 1, 84]
        assert run("return msgs.filter(m => m.type === 'played').length;") == 2
        # The end of the stream: shorter than the prebuffer, it plays anyway,
        # drains without an underrun, and the terminal (empty) frame is acked.
        run("api.push('a', 2, 100); api.push('a', 3, 0); api.msg({type: 'end', ctx: 'a'});")
        q = run("return api.quantum();")
        assert q[:100] == [float(i) for i in range(301, 401)] and q[100:] == [0.0] * 28
        assert run("return [p.state, p.played, p.underruns];") == ["idle", 400, 1]
        assert run("return msgs.filter(m => m.type === 'drained').length;") == 1
        acks = run("return msgs.filter(m => m.type === 'played').map(m => m.acks);")
        assert acks[-1] == [{"ctx": "a", "seq": 3}]
        # Idle: silence, nothing counted.
        assert run("return api.quantum();") == [0.0] * 128
        assert run("return [p.played, p.underruns];") == [400, 1]

        # Flush (Stop): everything buffered is dropped at once, no ack for it.
        run("api.push('b', 0, 500); api.quantum();")  # plays 401..528
        n_played_msgs = run("return msgs.filter(m => m.type === 'played').length;")
        run("api.msg({type: 'flush'});")
        assert run("return msgs.filter(m => m.type === 'flushed').map(m => m.dropped);") == [372]
        assert run("return api.quantum();") == [0.0] * 128
        assert run("return [p.state, p.played, p.write - p.read];") == ["idle", 528, 0]
        assert run("return msgs.filter(m => m.type === 'played').length;") == n_played_msgs

        # Wrap-around and growth: the ring (30 s = 30000 samples here) grows
        # past its size with the read position mid-buffer; order is kept.
        run("api.msg({type: 'config', prebufferMs: 0}); api.push('c', 0, 29000);")
        run("for (let i = 0; i < 100; i++) api.quantum();")  # read 12800 in
        run("api.push('c', 1, 10000);")  # wraps: positions 528 + 29000 .. + 10000 > 30000
        assert run("return p.cap;") == 30000
        run("api.push('c', 2, 40000); api.msg({type: 'end', ctx: 'c'});")
        assert run("return p.cap;") == 120000  # 66200 buffered: doubled twice
        run("out.length = 0; while (p.state !== 'idle') api.quantum();")
        first = run("return out[0];")
        tail = run("return out.filter(v => v !== 0).length;")
        assert tail == 29000 + 10000 + 40000 - 12800
        ok = run("const f = out[0]; for (let i = 0; i < 66200; i++) if (out[i] !== f + i) return i; return -1;")
        assert ok == -1, f"sample order broken at {ok} (first {first})"
        assert run("return p.underruns;") == 1
    finally:
        pg.close()


def test_browser_saves_a_voice_from_a_file_and_speaks_with_it(serve_base, page):
    """A Base server: a clip picked in the page (decoded by the browser,
    sent as 16-bit WAV) is saved with its transcript, appears under Voice,
    and the page speaks with it."""
    import json

    ref = Path(__file__).resolve().parents[1] / "fixtures" / "goldens" / "tiny-base"
    text = json.loads((ref / "cases.json").read_text())["ref_clips"][0]["text"]
    with serve_base() as server:
        open_page(page, server, server.token)
        page.set_input_files("#clip", str(ref / "ref_a.wav"))
        wait_for(page, "() => !document.getElementById('save').disabled", "the clip to be decoded")
        page.fill("#vname", "browser-voice")
        page.fill("#vtext", text)
        page.click("#save")
        wait_for(
            page,
            "() => (window.ttsDebug.storedVoices || []).includes('browser-voice')",
            "the saved voice in the voice list",
        )
        assert page.input_value("#voice") == "browser-voice"
        assert "saved" in page.inner_text("#saveinfo")
        page.fill("#text", "Hello from a stored voice.")
        page.click("#speak")
        wait_for(
            page,
            "() => { const d = window.ttsDebug; const c = d.contexts[d.current];"
            " return c && c.state === 'done' && c.samples > 0; }",
            "the stored voice to speak",
        )
        d = debug(page)
        assert d["session"]["voice"] == "browser-voice", d["session"]
        assert not d["errors"], d["errors"]
        assert_clean_console(page)
        screenshot(page, "voice")


def test_browser_hides_instructions_the_checkpoint_cannot_follow(server, serve_fixture, page):
    """The Instructions box shows only where the checkpoint follows them:
    hidden on tiny-a (0.6B CustomVoice, which refuses them), shown as the
    voice's description on tiny-vd (VoiceDesign, which needs it)."""
    open_page(page, server, server.token)
    wait_for(page, "() => window.ttsDebug.instructions !== undefined", "the checkpoint's instructions role")
    assert debug(page)["instructions"] == "none"
    assert not page.is_visible("#instruct")
    with serve_fixture("tiny-vd") as vd:
        open_page(page, vd, vd.token)
        wait_for(page, "() => window.ttsDebug.instructions === 'voice'", "VoiceDesign's instructions role")
        assert page.is_visible("#instruct")
        assert "Voice description" in page.inner_text("label[for=instruct]")
        page.fill("#instruct", "A warm, low voice.")
        page.fill("#text", "Hello from a described voice.")
        page.click("#speak")
        wait_for(
            page,
            "() => { const d = window.ttsDebug; const c = d.contexts[d.current];"
            " return c && c.state === 'done' && c.samples > 0; }",
            "the described voice to speak",
        )
        assert not debug(page)["errors"], debug(page)["errors"]
        assert_clean_console(page)
