# Sourced by the bench scripts that compare arms of `tts-rt bench`
# (continuous_streams.sh, chunk_pace.sh): their arguments, the host line
# every figure carries, and the passes over the arms with their order
# rotated. Each pass's line also gives the read rate `tts-rt bench`
# measured at its start (`provenance.host.read_gb_s` in its JSON).

# arms_args USAGE DEFAULT_PASSES DEFAULT_ARMS ARG...: the script's
# arguments `MODEL_DIR [PASSES] [ARM...]` into `model`, `passes` and
# `arms` (DEFAULT_ARMS, space-separated, when none is given), with `bin`
# ($TTS_RT, else target/release/tts-rt) and `out` ($OUT, else a temp
# dir, made).
arms_args() {
  local usage=$1 default_passes=$2 default_arms=$3
  shift 3
  model=${1:?usage: $usage}
  passes=${2:-$default_passes}
  shift 2 || shift $#
  if [ $# -gt 0 ]; then
    arms=("$@")
  else
    # shellcheck disable=SC2206 # the default arms are words
    arms=($default_arms)
  fi
  bin=${TTS_RT:-target/release/tts-rt}
  out=${OUT:-$(mktemp -d)}
  mkdir -p "$out"
}

# host_line: CPU model, core count and the instruction sets that matter.
host_line() {
  echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cpus," \
    "isa: $(grep -o -w -E 'avx512_bf16|avx512_vnni|avx512f|avx2|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
}

# rotate_arms PASSES RUN ARM...: for each pass, each ARM (LABEL=FLAGS,
# commas for spaces) in an order rotated by one every pass, calls
# `RUN LABEL PASS LOAD FLAG...` (LOAD: the 1-minute load average before it).
rotate_arms() {
  local passes=$1 run=$2
  shift 2
  local arms=("$@") n=$# pass i arm
  for pass in $(seq 1 "$passes"); do
    for i in $(seq 0 $((n - 1))); do
      arm=${arms[$(((i + pass - 1) % n))]}
      # shellcheck disable=SC2046 # the arm's flags are words
      "$run" "${arm%%=*}" "$pass" "$(cut -d' ' -f1 /proc/loadavg)" $(tr ',' ' ' <<<"${arm#*=}")
    done
  done
}
