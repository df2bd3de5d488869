#!/usr/bin/env bash
# Makes the runtime base image from the Debian archive alone (no image
# registry): a Debian bookworm minbase root filesystem made by debootstrap,
# with the two libraries tts-rt links beyond the C library, trimmed and
# imported into podman's storage.
#
#   deploy/container/make-base.sh [IMAGE]          # default localhost/tts-rt-base:bookworm
#   podman build --format docker --build-arg RUNTIME_IMAGE=localhost/tts-rt-base:bookworm ...
#
# Environment: DEBIAN_MIRROR (default http://deb.debian.org/debian);
# PODMAN, the podman command with its global options (default `podman`);
# DEBOOTSTRAP_CACHE, where debootstrap keeps the .debs it fetched (default:
# apt's own cache, so packages the host already downloaded are not fetched
# again). Needs root (debootstrap creates device nodes and owners).
set -euo pipefail
image=${1:-localhost/tts-rt-base:bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=${DEBOOTSTRAP_CACHE:-/var/cache/apt/archives}
read -r -a podman <<<"${PODMAN:-podman}"

if [ "$(id -u)" -ne 0 ]; then
  echo "make-base: needs root (debootstrap); run it with sudo" >&2
  exit 1
fi
command -v debootstrap >/dev/null || { echo "make-base: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }

root=$(mktemp -d "${TMPDIR:-/var/tmp}/tts-rt-base.XXXXXX")
trap 'rm -rf "$root"' EXIT
mkdir -p "$cache"
# minbase: Essential and apt, no init system. libasound2 (ALSA, linked for
# playback, idle in a server) and libopus0 (the Opus encoder); nothing else
# the binary needs is outside libc6 and libgcc-s1, which minbase has.
debootstrap --variant=minbase --include=libasound2,libopus0 --cache-dir="$cache" \
  bookworm "$root" "$mirror" >"$root.log" 2>&1 || {
  tail -20 "$root.log" >&2
  echo "make-base: debootstrap failed (full log: $root.log)" >&2
  exit 1
}
rm -f "$root.log"
# What a server never reads: documentation, manuals, locales, apt's lists
# and caches (the build stage runs `apt-get update` itself if it must).
rm -rf "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
  "$root"/usr/share/locale/* "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* \
  "$root"/var/log/* "$root"/debootstrap
tar --numeric-owner -C "$root" -c . | "${podman[@]}" import \
  --quiet --change 'CMD ["/bin/bash"]' \
  --message "Debian bookworm minbase + libasound2 libopus0 (debootstrap from $mirror)" \
  - "$image" >/dev/null
echo "make-base: $image ($(du -sh --apparent-size "$root" | cut -f1) root filesystem)"
