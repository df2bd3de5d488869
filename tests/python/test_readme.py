"""Every command in README.md, run: a README command that breaks fails here.

The README's fenced blocks are read in order. Every `sh`/`bash`/`shell`
block is a list of shell commands (one per line, `\\` continues a line,
`#` lines are comments); every `python` block is a program, run with this
suite's interpreter (the client venv of tests/python/run.sh, which has the
`openai` SDK). A block of another language must be one of `NOT_CODE`, and a
block without a language fails, so nothing that looks like a command
escapes the run.

How the README's commands become runnable here, all of it in the tables
below (a command the tables do not name is run exactly as written, after
the rewrites):

- `tts-rt` is this tree's binary ($TTS_RT_BIN, built by run.sh) on PATH,
  and `cargo run --release --` runs the same arguments through it (a
  release build of the whole workspace does not fit CI's time; it is the
  same code). `cargo install` builds that release binary: NOT_RUN.
- The real weights cannot be downloaded here: `TTS_RT_MODEL` points at the
  tiny CustomVoice fixture (what a command without `--model` speaks with,
  in place of the default checkpoint the README downloads), the hub repo
  ids are replaced by the fixture of their family (`MODELS`), and the hub
  is off (`HF_HUB_OFFLINE=1`, an empty cache). The hub client's download
  is NOT_RUN.
- Files the reader brings (`INPUTS`) are fixture clips.
- `tts-rt serve` runs in the background on loopback with `--port 0` (an
  ephemeral port; `127.0.0.1:8080` in the commands after it becomes that
  address) and `--max-frames 40` (random weights seldom end an utterance);
  it is stopped with SIGTERM at the end and must exit 0.
- `--play` plays on an ALSA default device that is a file over a null
  device (as tests/it/play_cli.rs), so no sound card is needed.
- The voice library is a temporary directory (`TTS_RT_VOICES_DIR`).

Each command must exit 0; every file it writes (`--out F`, `-o F`,
`write_to_file("F")`) must exist afterwards, and a `.wav` must decode.
The URLs the README gives for the server (127.0.0.1:8080) are requested
(HTTP: any answer but 404; WebSocket: the handshake completes; the Wyoming
port is not opened by the README's `serve`: test_wyoming.py drives it),
and every relative link in the README and docs/ must point at a file, and
at a heading in it when it names one.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import wave
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FIXTURES = "tests/fixtures"

# Commands the README gives that this test does not run, and why. Each must
# still be in the README (a stale entry fails), and every other command runs.
NOT_RUN = {
    "cargo test --workspace": (
        "the README's test command: .ci/run runs it before this suite, and this "
        "suite is part of what it stands for"
    ),
    "cargo install --locked --path .": (
        "a release build of the workspace (minutes, beyond CI's time); `tts-rt` "
        "here is the same tree's debug binary on PATH"
    ),
    "pip install -U huggingface_hub && hf download Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice": (
        "needs the Hugging Face hub, which CI cannot reach; TTS_RT_MODEL="
        "tests/fixtures/tiny-a stands in for the checkpoint it downloads"
    ),
}

# A command's leading words rewritten before it runs.
PROGRAM = {
    # The release build of this tree: the same code as the debug binary.
    "cargo run --release -- ": "tts-rt ",
}

# Hub repo ids: the small fixture of the same family.
MODELS = {
    "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice": f"{FIXTURES}/tiny-a",
    "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice": f"{FIXTURES}/tiny-a",
    "Qwen/Qwen3-TTS-12Hz-0.6B-Base": f"{FIXTURES}/tiny-base",
    "Qwen/Qwen3-TTS-12Hz-1.7B-Base": f"{FIXTURES}/tiny-base",
    "Qwen/Qwen3-TTS-12Hz-1.7B-VoiceDesign": f"{FIXTURES}/tiny-vd",
}

# Files the README's reader brings, and the fixture that stands in for each.
INPUTS = {
    "me.wav": f"{FIXTURES}/goldens/tiny-base/ref_a.wav",
}

# The server the README starts, and what it gets here beside its own flags.
SERVE = "tts-rt serve"
SERVE_EXTRA = ["--port", "0", "--max-frames", "40"]
README_ADDR = "127.0.0.1:8080"

# What a command must print (stdout or stderr), beside its exit status and
# files, by the start of the command as the README writes it.
EXPECT = {
    "tts-rt voices": "languages:",
    "tts-rt voice add me ": 'voice "me"',
    "tts-rt serve": "precision fast",
}

# Fenced blocks that hold no commands (program output, configuration).
NOT_CODE = {"text", "toml", "json"}
SHELL = {"sh", "bash", "shell"}

# README URLs that are a base for a client to build on, not a route.
BASE_URLS = {"http://127.0.0.1:8080/v1", "ws://127.0.0.1:8080", "http://127.0.0.1:8080"}

TIMEOUT_S = 300


def blocks(text: str) -> list[tuple[str, str, int]]:
    """The fenced blocks of a Markdown text: (language, body, line)."""
    out = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^(```+)(.*)$", lines[i])
        if m:
            fence, lang, start = m.group(1), m.group(2).strip(), i + 1
            body = []
            i += 1
            while i < len(lines) and not lines[i].startswith(fence):
                body.append(lines[i])
                i += 1
            out.append((lang, "\n".join(body), start))
        i += 1
    return out


def commands(body: str) -> list[str]:
    """The shell commands of a block: `\\`-continued lines joined, comment
    lines and blank lines dropped."""
    out, cur = [], ""
    for line in body.split("\n"):
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1].rstrip() + " "
            continue
        out.append(" ".join((cur + line).split()))
        cur = ""
    assert not cur, f"a command ends in a continuation: {cur!r}"
    return out


def steps() -> list[tuple[str, str, int]]:
    """The README's code in order: ("sh", command, line) or ("python", program, line)."""
    out = []
    for lang, body, line in blocks(README.read_text()):
        if lang in SHELL:
            out += [("sh", c, line) for c in commands(body)]
        elif lang == "python":
            out.append(("python", body, line))
        elif lang not in NOT_CODE:
            pytest.fail(
                f"README.md:{line}: a fenced block of language {lang!r}: "
                f"mark it sh/bash/python (run here) or one of {sorted(NOT_CODE)} (no commands)"
            )
    return out


def rewrite(cmd: str) -> str:
    for prefix, to in PROGRAM.items():
        if cmd.startswith(prefix):
            cmd = to + cmd[len(prefix):]
    for repo, fixture in MODELS.items():
        cmd = cmd.replace(repo, fixture)
    return cmd


def outputs(code: str) -> list[str]:
    found = re.findall(r"(?:--out|-o)\s+(\S+)", code) + re.findall(r'write_to_file\(\s*"([^"]+)"', code)
    return [f.strip("'\"") for f in found if f != "-"]


def check_output(work: Path, name: str, where: str) -> None:
    path = work / name
    assert path.is_file() and path.stat().st_size > 0, f"{where}: wrote no {name}"
    if name.endswith(".wav"):
        with wave.open(str(path)) as w:
            assert w.getnchannels() == 1 and w.getframerate() == 24000, f"{where}: {name}: not 24 kHz mono"
            assert w.getnframes() > 0, f"{where}: {name}: no samples"


class Background:
    """The README's `tts-rt serve`, in the background, on any free port."""

    def __init__(self, cmd: str, work: Path, env: dict):
        self.stderr: list[str] = []
        lines: "queue.Queue[str | None]" = queue.Queue()
        self.proc = subprocess.Popen(
            ["bash", "-c", f"exec {cmd} {' '.join(SERVE_EXTRA)}"],
            cwd=work, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )

        # Both pipes are drained for the server's whole life, so it never
        # blocks on a full pipe.
        def drain_stderr() -> None:
            for line in self.proc.stderr:
                self.stderr.append(line)

        def drain_stdout() -> None:
            for line in self.proc.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=drain_stderr, daemon=True).start()
        threading.Thread(target=drain_stdout, daemon=True).start()
        try:
            first = lines.get(timeout=60) or ""
        except queue.Empty:
            first = ""
        if "http://" not in first:
            self.stop(check=False)
            pytest.fail(f"`{cmd}` printed no address: {first!r}; stderr: {''.join(self.stderr)}")
        self.addr = first.split("http://", 1)[1].split()[0].rstrip("/")
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        deadline = time.monotonic() + 120
        while True:
            try:
                with opener.open(f"http://{self.addr}/ready", timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError):
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop(check=False)
                pytest.fail(f"`{cmd}` never became ready: {''.join(self.stderr)}")
            time.sleep(0.1)

    def stop(self, check: bool = True) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                pytest.fail("the README's server did not stop within 30 s of SIGTERM")
        if check:
            assert self.proc.returncode == 0, f"serve exited {self.proc.returncode}: {''.join(self.stderr)}"


def workspace(tmp: Path) -> tuple[Path, dict]:
    """A working directory that looks like a clone (the repo's top-level
    entries linked in, so `tests/fixtures/...` and `examples/...` resolve;
    what a command writes stays here), and the environment of the tables above."""
    work = tmp / "work"
    work.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in {".git", "target"}:
            (work / entry.name).symlink_to(entry)
    for name, fixture in INPUTS.items():
        (work / name).write_bytes((ROOT / fixture).read_bytes())
    binary = Path(os.environ.get("TTS_RT_BIN", ROOT / "target" / "debug" / "tts-rt"))
    assert binary.exists(), f"tts-rt binary not found at {binary}"
    bindir = tmp / "bin"
    bindir.mkdir()
    (bindir / "tts-rt").symlink_to(binary)
    sink = tmp / "played.raw"
    (tmp / "asound.conf").write_text(
        f'pcm.!default {{\n  type file\n  slave.pcm {{ type null }}\n  file "{sink}"\n  format "raw"\n}}\n'
    )
    env = dict(os.environ)
    for k in ("TTS_RT_MODEL", "TTS_RT_VOICES_DIR", "HF_HUB_CACHE", "HF_HOME", "HF_ENDPOINT", "RUST_LOG"):
        env.pop(k, None)
    env.update(
        PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}",
        TTS_RT_MODEL=str(ROOT / MODELS["Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"]),
        TTS_RT_VOICES_DIR=str(tmp / "voices"),
        HF_HOME=str(tmp / "hf"),
        HF_HUB_OFFLINE="1",
        ALSA_CONFIG_PATH=str(tmp / "asound.conf"),
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
    )
    return work, env


def test_not_run_entries_are_in_the_readme():
    listed = {c for kind, c, _ in steps() if kind == "sh"}
    stale = [c for c in NOT_RUN if c not in listed]
    assert not stale, f"NOT_RUN names commands the README no longer has: {stale}"


def test_inline_commands_are_run():
    """A command written inline in the prose (`tts-rt speak ...`) is not run
    here: it must be (the start of) a command of a fenced block."""
    text = README.read_text()
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    run = [c for kind, c, _ in steps() if kind == "sh"]
    spans = re.findall(r"`([^`\n]+)`", prose)
    loose = [
        s for s in spans
        if re.match(r"(tts-rt|cargo|curl|pip|hf|python3?) ", s) and not any(c.startswith(s.strip()) for c in run)
    ]
    assert not loose, f"commands in the README's prose that no fenced block runs: {loose}"


def test_every_readme_command(tmp_path):
    work, env = workspace(tmp_path)
    server: "Background | None" = None
    ran, skipped = [], []
    try:
        for n, (kind, code, line) in enumerate(steps()):
            where = f"README.md:{line}"
            if kind == "sh" and code in NOT_RUN:
                skipped.append(code)
                continue
            expect = [s for prefix, s in EXPECT.items() if kind == "sh" and code.startswith(prefix)]
            code = rewrite(code) if kind == "sh" else code
            if kind == "sh":
                assert "Qwen/" not in code, f"{where}: a hub repo id MODELS does not map: {code}"
                assert not code.startswith("cargo "), f"{where}: a cargo command neither run nor in NOT_RUN: {code}"
            if README_ADDR in code:
                assert server is not None, f"{where}: names {README_ADDR} before the README starts a server"
                code = code.replace(README_ADDR, server.addr)
            if kind == "sh" and (code == SERVE or code.startswith(SERVE + " ")):
                if server is not None:
                    server.stop()
                server = Background(code, work, env)
                for s in expect:  # its log, drained by a thread: a moment's grace
                    deadline = time.monotonic() + 10
                    while s not in "".join(server.stderr) and time.monotonic() < deadline:
                        time.sleep(0.1)
                    assert s in "".join(server.stderr), f"{where}: `{code}` did not print {s!r}"
                ran.append(code)
                continue
            outs = outputs(code)
            for name in outs:
                (work / name).unlink(missing_ok=True)
            if kind == "sh":
                argv = ["bash", "-euo", "pipefail", "-c", code]
            else:
                script = tmp_path / f"snippet_{n}.py"
                script.write_text(code)
                argv = [sys.executable, str(script)]
            try:
                p = subprocess.run(
                    argv, cwd=work, env=env, stdin=subprocess.DEVNULL,
                    capture_output=True, text=True, timeout=TIMEOUT_S,
                )
            except subprocess.TimeoutExpired:
                pytest.fail(f"{where}: did not finish within {TIMEOUT_S} s: {code}")
            assert p.returncode == 0, (
                f"{where}: exit {p.returncode}: {code}\nstdout: {p.stdout[-2000:]}\nstderr: {p.stderr[-4000:]}"
            )
            for name in outs:
                check_output(work, name, where)
            for s in expect:
                assert s in p.stdout + p.stderr, f"{where}: `{code}` did not print {s!r}: {p.stderr[-2000:]}"
            if kind == "sh" and " --play" in code:
                assert "played" in p.stderr, f"{where}: --play did not say what it played: {p.stderr[-2000:]}"
                assert (tmp_path / "played.raw").stat().st_size > 0, f"{where}: nothing reached the device"
            ran.append(code)
        assert server is not None, "the README starts no server: its URLs are not checked"
        check_urls(server)
    finally:
        if server is not None:
            server.stop()
    print(f"README: {len(ran)} commands and snippets ran, {len(skipped)} listed as not run")


def check_urls(server: Background) -> None:
    """The loopback URLs the README gives answer on the README's server."""
    import websockets.sync.client

    urls = sorted(set(re.findall(r"(?:https?|wss?)://127\.0\.0\.1:8080[^\s`\"')<>]*", README.read_text())))
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for url in urls:
        url = url.rstrip(".,;")
        if url.rstrip("/") in BASE_URLS and url != "http://127.0.0.1:8080/":
            continue
        live = url.replace(README_ADDR, server.addr).replace("{voice_id}", "ryan")
        if live.startswith("ws"):
            with websockets.sync.client.connect(live, open_timeout=10) as ws:
                ws.close()
            continue
        try:
            with opener.open(live, timeout=30) as r:
                status = r.status
        except urllib.error.HTTPError as e:
            status = e.code
        assert status != 404, f"README URL {url}: 404 on the README's server"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    h = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", h).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
    seen: dict[str, int] = {}
    out = set()
    for h in re.findall(r"^#{1,6}\s+(.*)$", text, flags=re.M):
        s = slug(h)
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def test_readme_links():
    """Every relative link in the README (and in docs/) points at a file,
    and at one of its headings when it names one. Web links are not fetched."""
    bad = []
    for doc in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        text = re.sub(r"^```.*?^```", "", doc.read_text(), flags=re.S | re.M)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            path = (doc.parent / file).resolve() if file else doc
            if not path.exists():
                bad.append(f"{doc.relative_to(ROOT)}: {target}: no such file")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                bad.append(f"{doc.relative_to(ROOT)}: {target}: no such heading")
    assert not bad, "\n".join(bad)
