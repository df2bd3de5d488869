# Sourced by the bench scripts that start their own `tts-rt serve` on
# loopback (live_text.sh, nodelay.sh). The caller starts the server in the
# background with its stdout in PREFIX.out and its log in PREFIX.log.

# serve_addr PREFIX PID: the host:port the server announced on stdout,
# waiting up to 2 minutes; fails (with the server's log) if it exits first.
serve_addr() {
  local a=""
  for _ in $(seq 1 600); do
    a=$(sed -n 's#^listening on http://\([^ ]*\).*#\1#p' "$1.out" | head -1)
    [ -n "$a" ] && break
    kill -0 "$2" 2>/dev/null || { echo "server $1 exited:" >&2; cat "$1.log" >&2; return 1; }
    sleep 0.2
  done
  [ -n "$a" ] || { echo "server $1 did not announce its address" >&2; return 1; }
  echo "$a"
}

# serve_ready ADDR: waits up to 10 minutes (a full-size checkpoint loads
# and converts its weights first) until /ready answers 200.
serve_ready() {
  for _ in $(seq 1 1200); do
    curl -sf --noproxy '*' "http://$1/ready" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  echo "the server at $1 never became ready" >&2
  return 1
}

# build_commit DIR: the short commit of the checkout DIR is in, `+dirty`
# with uncommitted changes to tracked files; `unknown` outside git.
build_commit() {
  local c
  c=$(git -C "$1" rev-parse --short HEAD 2>/dev/null || echo unknown)
  [ -n "$(git -C "$1" status --porcelain --untracked-files=no 2>/dev/null | head -1)" ] && c="$c+dirty"
  echo "$c"
}
