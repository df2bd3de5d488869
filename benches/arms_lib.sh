# Sourced by the bench scripts that compare arms of `tts-rt bench`
# (continuous_streams.sh, chunk_pace.sh): the host line every figure
# carries, and the passes over the arms with their order rotated.

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
