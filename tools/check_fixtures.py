#!/usr/bin/env python3
"""Checks the committed fixtures without torch: every file of the hub layout
is present, JSON parses, safetensors headers are sound and cover their files,
and the bytes match tests/fixtures/SHA256SUMS (so a checkout that lost or
mangled a binary file, e.g. through LFS or line-ending filters, fails here
with a clear message instead of inside a parity test).

Usage: python3 tools/check_fixtures.py [--write]   (--write regenerates SHA256SUMS)
"""
import hashlib
import json
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
SUMS = ROOT / "SHA256SUMS"
LAYOUT = [
    "config.json",
    "generation_config.json",
    "vocab.json",
    "merges.txt",
    "tokenizer_config.json",
    "speech_tokenizer/config.json",
    "speech_tokenizer/model.safetensors",
]


def check_safetensors(path: Path) -> None:
    data = path.read_bytes()
    if len(data) < 8:
        raise SystemExit(f"{path}: too short for safetensors")
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    if 8 + n + end != len(data):
        raise SystemExit(f"{path}: header declares {8 + n + end} bytes, file has {len(data)}")


def files():
    return sorted(p for p in ROOT.rglob("*") if p.is_file() and p.name != "SHA256SUMS")


def main() -> None:
    if not ROOT.is_dir():
        raise SystemExit(f"{ROOT} is missing")
    for fx in ("tiny-a", "tiny-b", "tiny-base", "tiny-vd", "tiny-base8"):
        d = ROOT / fx
        for f in LAYOUT:
            if not (d / f).is_file():
                raise SystemExit(f"{d / f}: missing")
        if not ((d / "model.safetensors").is_file() or (d / "model.safetensors.index.json").is_file()):
            raise SystemExit(f"{d}: no model.safetensors nor index")
        g = ROOT / "goldens" / fx
        for f in ("cases.json", "goldens.safetensors"):
            if not (g / f).is_file():
                raise SystemExit(f"{g / f}: missing")
    for f in ("encoders.safetensors", "ref_a.wav", "ref_b.wav"):
        if not (ROOT / "goldens" / "tiny-base" / f).is_file():
            raise SystemExit(f"{ROOT / 'goldens' / 'tiny-base' / f}: missing")
    # A fixture may read its reference clips from another's goldens (ref_clips[].file).
    for cases in sorted((ROOT / "goldens").glob("*/cases.json")):
        for c in json.loads(cases.read_text(encoding="utf-8")).get("ref_clips", []):
            if not (cases.parent / c["file"]).is_file():
                raise SystemExit(f"{cases}: reference clip {c['file']} is missing")
    for p in files():
        if p.suffix == ".json":
            json.loads(p.read_text(encoding="utf-8"))
        if p.suffix == ".safetensors":
            check_safetensors(p)
    sums = {str(p.relative_to(ROOT)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files()}
    if "--write" in sys.argv:
        SUMS.write_text("".join(f"{h}  {n}\n" for n, h in sums.items()))
        print(f"wrote {SUMS} ({len(sums)} files)")
        return
    want = {}
    for line in SUMS.read_text().splitlines():
        h, n = line.split("  ", 1)
        want[n] = h
    bad = [n for n in want if sums.get(n) != want[n]]
    extra = [n for n in sums if n not in want]
    if bad or extra:
        raise SystemExit(
            f"fixtures differ from SHA256SUMS: changed/missing {bad[:5]}, unlisted {extra[:5]}; "
            "regenerate with tools/make_fixtures.sh and then tools/check_fixtures.py --write"
        )
    print(f"fixtures ok: {len(sums)} files, {sum(p.stat().st_size for p in files()) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
