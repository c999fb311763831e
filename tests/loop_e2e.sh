#!/usr/bin/env bash
# Runs end-to-end scripts again and again, in a fixed order, to catch a
# failure that comes only now and then: a crash at a job's restart, a race
# with Slurm's controller. Not part of `make test` (it takes as long as its
# rounds); for whoever chases such a failure, or checks that it is gone.
#
#   tests/loop_e2e.sh [-n ROUNDS] [-l BUSY] [-o DIR] [-b BUILD] SCRIPT…
#
#   SCRIPT  names in tests/e2e without .sh, run one after the other in every
#           round, e.g. `multinode_doctor multinode_train` (the suite's order:
#           what the first leaves behind is what the second meets)
#   -n      rounds (default 10)
#   -l      busy loops beside them (`while :; do :; done`, default 0), stopped
#           at the end: load on top of whatever else the machine runs
#   -o      where the logs go (default BUILD/loop-DATE-TIME)
#   -b      the build directory (default build)
#
# Every script's output is kept (DIR/ROUND-NAME.log). Core dumps are on
# (ulimit -c unlimited, which sbatch and srun pass on to a job's tasks):
# with the kernel's core_pattern a plain name, a crashed process leaves its
# core in its working directory, which the Slurm tests move to BUILD/cores
# at exit (keep_cores, tests/e2e/lib.bash); each new core file there or in
# the checkout goes to DIR/ROUND-NAME.core.N, to read with
# `gdb BUILD/hpctrain CORE` (`bt`, `info registers rip`). After each script
# the names left in /dev/shm (Open MPI's shared-memory segments and the
# like) go to DIR/ROUND-NAME.shm. The last lines are one per script:
# `NAME: P/N passed`; the exit status is 0 only if every run passed.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
rounds=10 busy=0 out="" build=$ROOT/build
while getopts "n:l:o:b:" opt; do
  case $opt in
    n) rounds=$OPTARG ;;
    l) busy=$OPTARG ;;
    o) out=$OPTARG ;;
    b) build=$(cd "$OPTARG" && pwd) ;;
    *) sed -n '7,16p' "$0" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || { sed -n '7,16p' "$0" >&2; exit 2; }
for name in "$@"; do
  [ -f "$ROOT/tests/e2e/$name.sh" ] || { echo "no tests/e2e/$name.sh" >&2; exit 2; }
done
out=${out:-$build/loop-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
touch "$out/.started"

loads=()
stop_loads() {
  local pid
  for pid in "${loads[@]}"; do kill "$pid" 2>/dev/null; done
  loads=()
}
trap stop_loads EXIT
trap 'exit 130' INT TERM
for _ in $(seq 1 "$busy"); do
  (while :; do :; done) &
  loads+=($!)
done

ulimit -c unlimited
declare -A passed=()
cores_now() {
  { find "$ROOT" -maxdepth 1 -name 'core*' -type f -newer "$out/.started"
    find "$build/cores" -type f -newer "$out/.started"; } 2>/dev/null | sort
}
echo "loop: $rounds round(s) of $* with $busy busy loop(s); logs in $out"
for round in $(seq 1 "$rounds"); do
  for name in "$@"; do
    log=$out/$round-$name.log
    before=$(cores_now)
    t0=$SECONDS
    rc=0
    (cd "$ROOT" && bash "tests/e2e/$name.sh" "$build") >"$log" 2>&1 || rc=$?
    ls -la /dev/shm >"$out/$round-$name.shm" 2>&1
    n=0
    for core in $(comm -13 <(echo "$before") <(cores_now)); do
      n=$((n + 1))
      mv "$core" "$out/$round-$name.core.$n"
    done
    case $rc in
      0) result=passed passed[$name]=$((${passed[$name]:-0} + 1)) ;;
      77) result="skipped: $(grep -m1 '^SKIPPED' "$log")" ;;
      *) result="FAILED (exit $rc): $(grep -m1 '^FAIL' "$log")" ;;
    esac
    echo "round $round $name: $result, $((SECONDS - t0)) s$([ $n -gt 0 ] && echo ", $n core file(s)")"
  done
done
all=0
for name in "$@"; do
  echo "$name: ${passed[$name]:-0}/$rounds passed"
  [ "${passed[$name]:-0}" = "$rounds" ] || all=1
done
exit $all
