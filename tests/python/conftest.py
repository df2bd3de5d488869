"""Shared pytest fixtures for the client-interop tests.

`server` starts one `tts-rt serve` on the tiny-a fixture checkpoint for the
whole test session; `serve_base` starts (and, called again, restarts) one on
the tiny-base fixture with a temp voices directory. Each is on loopback, any
free port, with a bearer token; it waits for /ready, and stops the server with
SIGTERM at the end, asserting a clean drain (exit 0).

Environment:
  TTS_RT_BIN   the tts-rt binary (default: target/debug/tts-rt, built by run.sh)
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "ci-token"
# The server is on loopback: never route to it through a configured proxy
# (the openai SDK's HTTP client honours these variables).
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
MAX_FRAMES = 40


@dataclass
class Server:
    addr: str  # host:port
    token: str
    process: subprocess.Popen
    stderr_lines: list
    tls: bool = False  # served with --tls-cert/--tls-key (https, wss)

    @property
    def http(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.addr}"

    @property
    def ws(self) -> str:
        return f"{'wss' if self.tls else 'ws'}://{self.addr}/v1/realtime"


def _binary() -> Path:
    b = Path(os.environ.get("TTS_RT_BIN", ROOT / "target" / "debug" / "tts-rt"))
    if not b.exists():
        pytest.exit(f"tts-rt binary not found at {b}: build it (cargo build) or set TTS_RT_BIN", 2)
    return b


def pytest_terminal_summary(terminalreporter):
    """test_capacity.py's refusal latencies (client sent -> client saw the
    refusal), once the run is over."""
    latencies = getattr(sys.modules.get("test_capacity"), "LATENCIES", None)
    if latencies:
        terminalreporter.section("refusal latencies (test_capacity.py)")
        for name, s in sorted(latencies.items()):
            terminalreporter.write_line(f"  {name:<60} {s * 1000:8.1f} ms")


@pytest.fixture(scope="session")
def server() -> Server:
    with serve("tiny-a") as srv:
        yield srv


@pytest.fixture
def serve_base(tmp_path):
    """Starts `tts-rt serve` on the tiny-base fixture with a temp voices
    directory (the same one each call, so a second call is a restart)."""
    voices = tmp_path / "voices"

    def start():
        return serve("tiny-base", "--voices-dir", str(voices))

    return start


@pytest.fixture
def serve_fixture():
    """`serve` itself: a `tts-rt serve` on any checkpoint fixture
    (`with serve_fixture("tiny-vd") as server:`)."""
    return serve


@contextlib.contextmanager
def serve(
    fixture: str, *extra: str, cafile: "str | None" = None, max_frames: int = MAX_FRAMES
):
    """A `tts-rt serve` on tests/fixtures/FIXTURE (loopback, any port, the
    token, at most MAX_FRAMES codec frames per request unless `max_frames`),
    ready; SIGTERM on exit, asserting a clean drain (exit 0).
    `cafile`: the server is given --tls-cert/--tls-key in `extra` and is
    reached over HTTPS trusting this certificate."""
    # These tests are about protocols and clients, several at once. The
    # debug build on a shared 2-core host keeps about one stream real time,
    # so admission by measured real-time capacity (on by default) is off
    # here unless a test asks for it; tests/it/serve_cli.rs tests it.
    realtime = [] if "--realtime-load" in extra else ["--realtime-load", "0"]
    cmd = [
        str(_binary()),
        "serve",
        "--model", str(ROOT / "tests" / "fixtures" / fixture),
        "--port", "0",
        "--max-frames", str(max_frames),
        "--token", TOKEN,
        "--drain-timeout-s", "10",
        *realtime,
        *extra,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stderr_lines: list = []
    stdout_lines: "queue.Queue[str | None]" = queue.Queue()

    # Both pipes are drained for the server's whole life, so it can never
    # block on a full pipe.
    def drain_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            stderr_lines.append(line)

    def drain_stdout() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            stdout_lines.put(line)
        stdout_lines.put(None)

    threading.Thread(target=drain_stderr, daemon=True).start()
    threading.Thread(target=drain_stdout, daemon=True).start()
    serving = False
    try:
        try:
            first = stdout_lines.get(timeout=60) or ""
        except queue.Empty:
            first = ""
        scheme = "https" if cafile else "http"
        if f"{scheme}://" not in first:
            proc.kill()
            proc.wait()
            pytest.fail(f"tts-rt serve did not print its address: {first!r}; stderr: {''.join(stderr_lines)}")
        addr = first.split(f"{scheme}://", 1)[1].split()[0]
        opener = _DIRECT
        if cafile:
            opener = urllib.request.build_opener(
                urllib.request.ProxyHandler({}),
                urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=cafile)),
            )
        deadline = time.monotonic() + 120
        while True:
            try:
                with opener.open(f"{scheme}://{addr}/ready", timeout=5) as r:
                    if r.status == 200:
                        break
            except urllib.error.HTTPError as e:
                if e.code != 503:
                    raise
            except urllib.error.URLError:
                pass
            if proc.poll() is not None:
                pytest.fail(f"tts-rt serve exited early ({proc.returncode}): {''.join(stderr_lines)}")
            if time.monotonic() > deadline:
                pytest.fail("tts-rt serve never became ready within 120 s")
            time.sleep(0.1)
        srv = Server(addr=addr, token=TOKEN, process=proc, stderr_lines=stderr_lines, tls=bool(cafile))
        serving = True
        yield srv
    finally:
        if serving and proc.poll() is not None:
            pytest.fail(f"tts-rt serve died during the tests (exit {proc.returncode}): {''.join(stderr_lines)}")
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                pytest.fail("tts-rt serve did not exit within 30 s of SIGTERM")
            assert code == 0, f"tts-rt serve exited {code} after SIGTERM: {''.join(stderr_lines)}"


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1 and its key (PEM files): the
    ElevenLabs SDK's realtime socket is always wss://."""
    if shutil.which("openssl") is None:
        pytest.fail("the openssl command is needed to make the test certificate")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=tts-rt test",
            "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-addext", "basicConstraints=critical,CA:FALSE",
            "-addext", "keyUsage=critical,digitalSignature",
            "-addext", "extendedKeyUsage=serverAuth",
        ],
        check=True,
        capture_output=True,
    )
    return str(cert), str(key)
