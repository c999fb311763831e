#!/usr/bin/env bash
# Runs every libFuzzer target for a while, two at a time, and prints a table.
#
#   tests/fuzz/run.sh FUZZ_BUILD SECONDS [NAME...]     (make fuzz FUZZ_SECONDS=N calls this)
#
# Each target starts from its seed corpus (tests/fuzz/corpus/NAME, read-only)
# and its regression inputs (tests/fuzz/regressions/NAME); new inputs go to
# FUZZ_BUILD/corpus/NAME, which the next run starts from too. A finding is
# saved as FUZZ_BUILD/findings/NAME/crash-… (or oom-, timeout-, leak-) and
# makes this script exit 1: replay it with `FUZZ_BUILD/fuzz_NAME FILE`,
# fix the parser and copy it into tests/fuzz/regressions/NAME/.
# FUZZ_JOBS (default 2) targets run at once; FUZZ_FLAGS adds libFuzzer flags.
# FUZZ_SEED (default 0: a new random seed each run) fixes libFuzzer's seed:
# CI uses 1, so a CI run explores the same inputs as a local run with that
# seed and a fresh work corpus, only fewer of them on a slower machine.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:?usage: run.sh FUZZ_BUILD SECONDS [NAME...]}
seconds=${2:-30}
shift 2
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for f in "$root"/tests/fuzz/fuzz_*.cpp; do
    n=$(basename "$f" .cpp)
    names+=("${n#fuzz_}")
  done
fi

# Per target: the longest input worth trying (bytes). Text parsers are short;
# the binary formats need room for a header plus a few records.
max_len() {
  case $1 in
    spec) echo 256 ;;
    config) echo 2048 ;;
    cifar) echo 8192 ;;
    idx | npy | csv) echo 4096 ;;
    *) echo 1024 ;;
  esac
}

run_one() {
  local name=$1 bin="$build/fuzz_$1"
  local work="$build/corpus/$name" findings="$build/findings/$name" log="$build/logs/$name.log"
  mkdir -p "$work" "$findings" "$build/logs"
  local dirs=("$work")
  for d in "$root/tests/fuzz/corpus/$name" "$root/tests/fuzz/regressions/$name"; do
    [ -d "$d" ] && dirs+=("$d")
  done
  local dict=()
  [ -f "$root/tests/fuzz/$name.dict" ] && dict=(-dict="$root/tests/fuzz/$name.dict")
  # -rss_limit_mb / -malloc_limit_mb: a process above 2 GiB, or one allocation
  # of 1 GiB or more, is a finding (no small input may ask for that much).
  # Leak detection is off: HDF5 keeps free lists and caches for the process's
  # lifetime, which LeakSanitizer's per-input check reports as leaks.
  OPENBLAS_NUM_THREADS=1 HDF5_USE_FILE_LOCKING=FALSE \
    ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    nice -n "${FUZZ_NICE:-0}" "$bin" -max_total_time="$seconds" -timeout=10 -seed="${FUZZ_SEED:-0}" -rss_limit_mb=2048 \
    -malloc_limit_mb=1024 -max_len="$(max_len "$name")" -print_final_stats=1 \
    -artifact_prefix="$findings/" "${dict[@]}" ${FUZZ_FLAGS:-} "${dirs[@]}" >"$log" 2>&1
  echo $? >"$build/logs/$name.rc"
}

for name in "${names[@]}"; do
  [ -x "$build/fuzz_$name" ] || { echo "run.sh: $build/fuzz_$name is not built (make fuzz-build)" >&2; exit 2; }
  rm -f "$build/logs/$name.rc"
done
export -f run_one max_len
export build root seconds
printf '%s\n' "${names[@]}" | xargs -P "${FUZZ_JOBS:-2}" -I{} bash -c 'run_one "$@"' _ {}

status=0
printf '%-10s %12s %10s %8s %8s  %s\n' target executions exec/s corpus rss_mb result
for name in "${names[@]}"; do
  log="$build/logs/$name.log"
  stat() { grep -oP "^stat::$1:\s*\K[0-9]+" "$log" | tail -1; }
  rc=$(cat "$build/logs/$name.rc" 2>/dev/null || echo 1)
  corpus=$(find "$build/corpus/$name" -type f | wc -l)
  result="ok"
  if [ "$rc" != 0 ]; then
    result="FINDING (exit $rc): $(grep -m1 -E 'ERROR: |FUZZ FINDING|runtime error|==ERROR' "$log" | cut -c1-120)"
    result+=" -> $(ls "$build/findings/$name" | head -1) (log: $log)"
    status=1
  fi
  printf '%-10s %12s %10s %8s %8s  %s\n' "$name" "$(stat number_of_executed_units)" \
    "$(stat average_exec_per_sec)" "$corpus" "$(stat peak_rss_mb)" "$result"
done
exit $status
