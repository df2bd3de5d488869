#!/usr/bin/env bash
# Regenerate tests/fixtures/audio/: small compressed reference clips for the
# audio crate's decoder tests (audio/tests/it/reference_audio.rs). Each is one
# second of a deterministic 440 Hz tone, so a test can check the decoded
# duration, the channel mean and that the tone's frequency survives the
# resampling to 24 kHz. WAV variants are made inside the tests with hound;
# only the formats hound cannot write are committed here.
#
# Stereo clips carry 0.6·sin on the left and 0.2·sin on the right, so the
# channel mean (librosa's mono=True) is 0.4·sin; mono clips carry 0.5·sin.
#
# Then tools/make_audio_goldens.py records the official load-and-resample
# path (librosa.load + librosa.resample, soxr HQ) on those clips and on a
# synthetic signal, for audio/tests/it/reference_official.rs.
#
# Needs ffmpeg with libmp3lame, libvorbis, libopus and the native AAC encoder
# (Debian: apt-get install ffmpeg), and the reference venv
# (TTS_RT_REF_VENV, default tools/.venv, as tools/make_fixtures.sh makes it;
# librosa comes with qwen-tts). CI never runs this: the outputs are
# committed and listed in tests/fixtures/SHA256SUMS, which this script
# refreshes at the end. Made with ffmpeg 5.1 (Debian 12), librosa 0.11.0,
# soxr 1.1.0; another ffmpeg may give other bytes but the same tone, so
# regenerate the goldens together with the clips.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$root/tests/fixtures/audio"
mkdir -p "$out"

mono='0.5*sin(2*PI*440*t)'
stereo='0.6*sin(2*PI*440*t)|0.2*sin(2*PI*440*t)'
# No metadata, no encoder version string, no timestamps: stable bytes.
common=(-hide_banner -loglevel error -y -fflags +bitexact)
outopts=(-map_metadata -1 -flags:a +bitexact -fflags +bitexact)

tone() { # expr rate
    echo "aevalsrc=$1:s=$2:d=1"
}

ffmpeg "${common[@]}" -f lavfi -i "$(tone "$stereo" 44100)" \
    -c:a flac -sample_fmt s16 "${outopts[@]}" "$out/tone440-44100-stereo.flac"
ffmpeg "${common[@]}" -f lavfi -i "$(tone "$mono" 22050)" \
    -c:a libmp3lame -b:a 64k "${outopts[@]}" "$out/tone440-22050-mono.mp3"
# The same MP3 without the Xing/Info frame (and so without a LAME tag):
# its length is only an estimate, and the encoder delay is not trimmed.
ffmpeg "${common[@]}" -f lavfi -i "$(tone "$mono" 22050)" \
    -c:a libmp3lame -b:a 64k -write_xing 0 "${outopts[@]}" "$out/tone440-22050-mono-noxing.mp3"
ffmpeg "${common[@]}" -f lavfi -i "$(tone "$stereo" 48000)" \
    -c:a libvorbis -q:a 3 "${outopts[@]}" "$out/tone440-48000-stereo.ogg"
ffmpeg "${common[@]}" -f lavfi -i "$(tone "$stereo" 44100)" \
    -c:a aac -b:a 96k "${outopts[@]}" "$out/tone440-44100-stereo.m4a"
# Ogg Opus, as browsers and phones record it (libopus, 48 kHz, family 0):
# decoded by the crate's own demuxer and libopus, not symphonia.
ffmpeg "${common[@]}" -f lavfi -i "$(tone "$stereo" 48000)" \
    -c:a libopus -b:a 64k "${outopts[@]}" "$out/tone440-48000-stereo.opus"
# The same in WebM (Matroska), what Chrome's and Firefox's MediaRecorder
# write by default (audio/webm;codecs=opus): walked by the crate's own
# reader, decoded by libopus.
ffmpeg "${common[@]}" -f lavfi -i "$(tone "$stereo" 48000)" \
    -c:a libopus -b:a 64k "${outopts[@]}" "$out/tone440-48000-stereo.webm"

venv="${TTS_RT_REF_VENV:-$root/tools/.venv}"
if [ ! -x "$venv/bin/python" ]; then
    echo "no reference venv at $venv; run tools/make_fixtures.sh once or set TTS_RT_REF_VENV" >&2
    exit 1
fi
"$venv/bin/python" "$root/tools/make_audio_goldens.py"

for f in "$out"/*; do
    size=$(stat -c %s "$f")
    if [ "$size" -ge 102400 ]; then
        echo "$f is $size bytes; fixtures must stay under 100 KB" >&2
        exit 1
    fi
done
ls -l "$out"
python3 "$root/tools/check_fixtures.py" --write
