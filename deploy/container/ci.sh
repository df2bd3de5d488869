#!/usr/bin/env bash
# The container image end to end, on loopback (called by .ci/run):
#   1. podman, debootstrap and runc from Debian;
#   2. the runtime base from the Debian archive (make-base.sh), kept in this
#      test's own podman storage between runs;
#   3. the image, target `prebuilt`, around the binary the workspace tests
#      built ($TTS_RT_BIN, default target/debug/tts-rt): no second build;
#   4. a container from it: read-only root, every capability dropped, the
#      tiny-a fixture mounted read-only as the model, a volume for its state,
#      ports published on 127.0.0.1 only;
#   5. its HEALTHCHECK, speech over HTTP (a decoded WAV) and over the
#      realtime WebSocket (smoke.py), then `podman stop` during a live
#      context: the context finishes, the socket closes 1001, exit 0.
# Ends with one line: `container: ok (...)`, `container: FAILED (...)` (exit
# 1), or `container: SKIPPED (...)` (exit 0) when this machine cannot run
# containers at all, with what was tried and what it said.
set -euo pipefail
cd "$(dirname "$0")/../.."
t0=$SECONDS
target=$(mkdir -p "${CARGO_TARGET_DIR:-target}" && cd "${CARGO_TARGET_DIR:-target}" && pwd)
work=$target/container
mkdir -p "$work"
log=$work/ci.log
# One run at a time on a machine: two would share the container name and
# the storage.
exec 9>"$work/.lock"
flock -w 900 9 || { echo "container: FAILED (another container test held $work/.lock for 15 minutes)"; exit 1; }
: >"$log"
name=tts-rt-ci
image=localhost/tts-rt:ci
bin=${TTS_RT_BIN:-$target/debug/tts-rt}

say() { echo "  $*"; }
skip() { echo "container: SKIPPED ($*; details: $log)"; exit 0; }
fail() {
  [ -s "$log" ] && tail -25 "$log" | sed 's/^/  | /'
  echo "container: FAILED ($*; details: $log)"
  exit 1
}

[ "$(id -u)" -eq 0 ] || skip "needs root: rootful podman and debootstrap"
[ -x "$bin" ] || fail "no binary at $bin (build it, or set TTS_RT_BIN)"

# 1. Tools. runc beside podman's default crun: crun refuses cgroup v1
# hosts whose unified hierarchy holds a controller ("cgroups in hybrid mode
# not supported"), which runc runs on.
if ! dpkg -s podman debootstrap runc >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  { apt-get -o Acquire::Retries=3 update -qq &&
    apt-get -o Acquire::Retries=3 install -y -qq podman debootstrap runc; } >>"$log" 2>&1 ||
    skip "apt-get could not install podman, debootstrap and runc"
fi
say "podman $(podman --version | awk '{print $3}'), $(runc --version | head -1)"

# This test's own storage: nothing of the machine's podman state is read or
# changed, and a cold run is `rm -rf $work/storage`.
runroot=/run/tts-rt-ci-podman-$(echo "$work" | sha256sum | cut -c1-8)
podman=(podman --root "$work/storage" --runroot "$runroot")
cleanup() {
  "${podman[@]}" rm -f -t 0 "$name" >/dev/null 2>&1 || true
  "${podman[@]}" volume rm -f "$name-data" >/dev/null 2>&1 || true
  # The image each run replaces, untagged: ~160 MB a run otherwise.
  "${podman[@]}" image prune -f >/dev/null 2>&1 || true
}
trap cleanup EXIT
cleanup

# 2. The base, made again only when make-base.sh changes. debootstrap
# takes minutes, so a made base is also saved outside the clone, for the
# next runs on this machine (each clone starts with an empty target/), and
# made afresh once it is a week old (the archive's security updates).
base_tag=$(sha256sum deploy/container/make-base.sh | cut -c1-12)
base=localhost/tts-rt-base:bookworm-$base_tag
base_cache=/var/cache/tts-rt-ci
saved=$base_cache/base-bookworm-$base_tag.tar
mkdir -p "$base_cache"
find "$base_cache" -name 'base-*.tar' -mtime +7 -delete 2>/dev/null || true
tb=$SECONDS
if "${podman[@]}" image exists "$base"; then
  say "base: $base (kept from an earlier run)"
elif [ -f "$saved" ] && "${podman[@]}" load -q -i "$saved" >>"$log" 2>&1 && "${podman[@]}" image exists "$base"; then
  say "base: $base loaded from $saved ($(( ($(date +%s) - $(stat -c %Y "$saved")) / 3600 )) h old) in $((SECONDS - tb)) s"
else
  PODMAN="${podman[*]}" deploy/container/make-base.sh "$base" >>"$log" 2>&1 ||
    skip "could not make the Debian base with debootstrap (is deb.debian.org reachable?)"
  "${podman[@]}" save -q -o "$saved.tmp" "$base" >>"$log" 2>&1 && mv "$saved.tmp" "$saved" || rm -f "$saved.tmp"
  say "base: $base made from the Debian archive in $((SECONDS - tb)) s"
fi

# Which runtime options run a container here: the defaults first, then what
# this machine kind needed (each failure is kept in the log and summarized).
# Rootful podman raises RLIMIT_NOFILE and RLIMIT_NPROC to values a VM's
# limits may refuse ("setrlimit ... Operation not permitted").
ul=(--ulimit nofile=16384:16384 --ulimit nproc=16384:16384)
run_opts=()
tried=()
for candidate in "" "--runtime runc" "ULIMITS" "ULIMITS --runtime runc"; do
  read -r -a opts <<<"${candidate/ULIMITS/${ul[*]}}"
  if out=$("${podman[@]}" run --rm --network none "${opts[@]}" "$base" true 2>&1); then
    run_opts=("${opts[@]}")
    break
  fi
  echo "podman run ${opts[*]}: $out" >>"$log"
  tried+=("[${candidate:-defaults}] $(tail -1 <<<"$out" | cut -c1-160)")
done
if [ ${#tried[@]} -gt 0 ]; then
  for t in "${tried[@]}"; do say "tried podman run with $t"; done
fi
if [ ${#run_opts[@]} -eq 0 ] && [ ${#tried[@]} -eq 4 ]; then
  skip "podman cannot run a container on this machine: every option set failed (above)"
fi
[ ${#tried[@]} -eq 0 ] || say "containers run with: ${run_opts[*]}"
# A build's RUN steps go through the same runtime.
build_opts=()
for o in "${run_opts[@]}"; do [ "$o" = --runtime ] && build_opts=(--runtime runc); done

# 3. The image around the binary CI built: a context of three files.
tb=$SECONDS
ctx=$work/context
rm -rf "$ctx"
mkdir -p "$ctx/deploy/container"
cp deploy/container/serve.toml deploy/container/healthcheck "$ctx/deploy/container/"
ln "$bin" "$ctx/tts-rt" 2>/dev/null || cp "$bin" "$ctx/tts-rt"
"${podman[@]}" build "${build_opts[@]}" --format docker -f Containerfile --target prebuilt \
  --build-arg RUNTIME_IMAGE="$base" --build-arg BUILDER_IMAGE="$base" --build-arg BINARY=tts-rt \
  --ulimit nofile=16384:16384 --ulimit nproc=16384:16384 \
  -t "$image" "$ctx" >>"$log" 2>&1 || fail "podman build --target prebuilt failed"
read -r user hc stop size < <("${podman[@]}" image inspect "$image" \
  --format '{{.Config.User}} {{if .Config.Healthcheck}}yes{{else}}no{{end}} {{.Config.StopSignal}} {{.Size}}')
[ "$user" = 10001:10001 ] || fail "the image runs as '$user', not the tts-rt user 10001"
[ "$hc" = yes ] || fail "the image has no HEALTHCHECK (built without --format docker?)"
[ "$stop" = SIGTERM ] || fail "the image's stop signal is '$stop', not SIGTERM"
say "image: $image, $((size / 1000000)) MB (binary $(($(stat -c %s "$bin") / 1000000)) MB), built in $((SECONDS - tb)) s"

# 4. The container: the fixture as a read-only model, ports on loopback.
"${podman[@]}" run -d --name "$name" "${run_opts[@]}" \
  --read-only --cap-drop all --security-opt no-new-privileges \
  --health-interval disable \
  -v "$PWD/tests/fixtures/tiny-a:/models/tiny-a:ro" -e TTS_RT_MODEL=/models/tiny-a \
  --mount "type=volume,src=$name-data,dst=/var/lib/tts-rt" \
  -p 127.0.0.1::8080 -p 127.0.0.1::8081 \
  "$image" >>"$log" 2>&1 || fail "podman run of the image failed"
api_port=$("${podman[@]}" port "$name" 8080/tcp | head -1 | sed 's/.*://')
probe_port=$("${podman[@]}" port "$name" 8081/tcp | head -1 | sed 's/.*://')
api=http://127.0.0.1:$api_port
probe=http://127.0.0.1:$probe_port

# 5. Healthy (the image's own HEALTHCHECK, run in the container), speech,
# the drain.
ready=""
for _ in $(seq 120); do
  if hc_out=$("${podman[@]}" exec "$name" /usr/local/bin/tts-rt-healthcheck 2>&1); then
    ready=yes
    break
  fi
  [ "$("${podman[@]}" inspect "$name" --format '{{.State.Running}}' 2>/dev/null)" = true ] || break
  sleep 0.5
done
"${podman[@]}" logs "$name" >>"$log" 2>&1 || true
[ -n "$ready" ] || fail "the container did not become healthy within 60 s: ${hc_out:-no answer}"
say "health check: $hc_out"
# Non-root, and its state volume writable under the read-only root.
uid=$("${podman[@]}" exec "$name" id -u) || fail "podman exec id -u"
[ "$uid" = 10001 ] || fail "the server runs as uid $uid, not 10001"
"${podman[@]}" exec "$name" sh -c 'touch /var/lib/tts-rt/voices/.probe && rm /var/lib/tts-rt/voices/.probe' >>"$log" 2>&1 ||
  fail "the voice library on the volume is not writable by the tts-rt user"
"${podman[@]}" exec "$name" sh -c 'touch /usr/.probe' >>"$log" 2>&1 &&
  fail "the root file system is writable (--read-only did not hold)"
say "runs as uid $uid; root file system read-only; /var/lib/tts-rt/voices writable"
"${podman[@]}" healthcheck run "$name" >>"$log" 2>&1 || fail "podman healthcheck run reports unhealthy"

# The client-interop venv when it is there (it has websockets); else a small
# venv of this test's own, with the same pinned websockets.
py=${TTS_RT_CLIENT_VENV:-$target/client-venv}/bin/python
if ! { [ -x "$py" ] && "$py" -c 'import websockets' 2>/dev/null; }; then
  py=$work/venv/bin/python
  if ! { [ -x "$py" ] && "$py" -c 'import websockets' 2>/dev/null; }; then
    python3 -m venv "$work/venv" >>"$log" 2>&1 &&
      "$work/venv/bin/pip" install -q --disable-pip-version-check --retries 5 \
        "$(grep -E '^websockets==' tests/python/requirements.txt)" >>"$log" 2>&1 ||
      fail "could not make a venv with websockets for the smoke client"
  fi
fi
smoke=$("$py" deploy/container/smoke.py speak "$api" 2>&1) || { echo "$smoke" >>"$log"; fail "speech from the container"; }
echo "$smoke" | sed 's/^/  /'
drain=$("$py" deploy/container/smoke.py drain "$api" "$probe" -- "${podman[@]}" stop -t 20 "$name" 2>&1) ||
  { echo "$drain" >>"$log"; "${podman[@]}" logs "$name" >>"$log" 2>&1; fail "the drain on podman stop"; }
echo "$drain" | sed 's/^/  /'
code=$("${podman[@]}" inspect "$name" --format '{{.State.ExitCode}}')
"${podman[@]}" logs "$name" >>"$log" 2>&1 || true
[ "$code" = 0 ] || fail "the container exited $code after SIGTERM, not 0"
grep -q 'shutting down: draining' "$log" || fail "the server's log has no drain line"
echo "container: ok (image $((size / 1000000)) MB; healthy, WAV over HTTP, WebSocket context, drained on SIGTERM and exited 0; $((SECONDS - t0)) s)"
