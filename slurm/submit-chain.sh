#!/usr/bin/env bash
# Submits N jobs that run one after another (--dependency=afterany), for
# clusters that forbid `scontrol requeue`: each job resumes from the newest
# checkpoint of the same run directory and stops with a checkpoint before
# its time limit (exit 75); the next one starts when it ends, whatever its
# exit. Jobs that find the run finished exit at once.
#
#   slurm/submit-chain.sh N [sbatch options…] JOB.sbatch [hpctrain options…]
#   slurm/submit-chain.sh 5 --time=02:00:00 slurm/train-gpu.sbatch --config run.ini
#
# Without a --run.dir or --config among the hpctrain options (and no
# HPCTRAIN_RUN_DIR), every job of the chain gets HPCTRAIN_RUN_DIR=runs/chain-DATE.
set -euo pipefail
usage() { echo "usage: $0 N [sbatch options…] JOB.sbatch [hpctrain options…]" >&2; exit 2; }
[ $# -ge 2 ] || usage
n=$1; shift
[[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "submit-chain.sh: N must be a positive number, not '$n'" >&2; usage; }
sbatch_opts=()
while [ $# -gt 0 ] && [ ! -f "$1" ]; do sbatch_opts+=("$1"); shift; done
[ $# -ge 1 ] || { echo "submit-chain.sh: no job script among the arguments" >&2; usage; }
job=$1; shift

has_arg() { local want=$1 a; shift; for a in "$@"; do [ "${a%%=*}" = "$want" ] && return 0; done; return 1; }
if ! has_arg --run.dir "$@" && ! has_arg --config "$@" && [ -z "${HPCTRAIN_RUN_DIR:-}" ] && [ -z "${HPCTRAIN_CONFIG:-}" ]; then
  HPCTRAIN_RUN_DIR="runs/chain-$(date +%Y%m%d-%H%M%S)"
  export HPCTRAIN_RUN_DIR
  echo "run directory for the whole chain: $HPCTRAIN_RUN_DIR"
fi

prev=""
for i in $(seq 1 "$n"); do
  dep=()
  [ -n "$prev" ] && dep=(--dependency="afterany:$prev")
  out=$(sbatch --parsable "${dep[@]}" "${sbatch_opts[@]}" "$job" "$@")
  echo "job $i/$n: ${out%%;*}${prev:+ (starts after job $prev ends)}"
  prev=${out%%;*}  # "ID" or "ID;CLUSTER"
done
