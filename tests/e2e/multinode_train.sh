#!/usr/bin/env bash
# ctest-timeout: 420
# hpctrain on two nodes that talk only over a network: the test cluster of
# tests/cluster/netns-cluster.bash (two network namespaces joined by a veth
# pair, a slurmd in each, slurmctld, munged). The real
# slurm/train-multinode.sbatch runs 4 ranks (2 per node, srun --mpi=pmix) on
# the MNIST sample, Open MPI over TCP on the link between the nodes and
# shared memory within one (HPCTRAIN_NET_IF, HPCTRAIN_MPI_TCP).
#   0. The script's PMIx fences are barriers across the nodes (a tiny MPI
#      program, tests/cluster/fence_barrier.cpp, through the same script).
#   1. A clean job: the start-up lines show 2 nodes with local ranks 0,1 on
#      each; the link carried the gradients; the final evaluation and
#      validation loss are bitwise those of 4 ranks on one host (mpirun -np 4):
#      the allreduce sums in rank order whatever the transport, so the same
#      world size gives the same bits (DESIGN "Determinism"); no tolerance.
#   2. Preemption across nodes: `scancel --batch --signal=USR1` → the batch
#      shell on node-a forwards it through srun to all 4 ranks, which stop at
#      one step, checkpoint and exit 75 on both nodes; the job requeues.
#   3. Node-b crashes (everything in its namespace SIGKILLed) mid-training:
#      the job ends within dist.timeout (10 s) plus srun's wait, and the error
#      names the lost ranks and their node; node-b comes back, the job is
#      requeued and resumes from its last periodic checkpoint.
#   The job of 2–3 then finishes with the same final loss, evaluation and
#   parameters (bitwise) as the uninterrupted reference.
# A requeued job waits ~2 minutes (BeginTime) before Slurm restarts it; the
# test moves its start time to now (scontrol update StartTime=now) once the
# nodes have finished the old instance (slurm_start_now, tests/slurm/local-slurm.bash).
source "$(dirname "$0")/lib.bash"
source "$ROOT/tests/cluster/netns-cluster.bash"
why=$(cluster_check_available) || skip "$why"
data=$(mnist_h5)
WORK=$(mktemp -d "$BUILD/multinode-train.XXXXXX")  # seen by both nodes, under /tmp too (netns-cluster.bash)
trap 'cluster_stop; keep_cores "$WORK"; rm -rf "$WORK" "$TMP"' EXIT
trap 'exit 1' INT TERM
cluster_start "$WORK/cluster" || fail "the test cluster did not start"
slurm_has_pmix || skip "srun offers no --mpi=pmix here (srun --mpi=list)"
pass "test cluster up: $(sinfo -h -o '%D nodes %t: %N'), link $CLUSTER_IF $CLUSTER_SUBNET"

export OPENBLAS_NUM_THREADS=1  # the same arithmetic in every run
args=(--data.path "$data" --model.preset mlp --model.hidden 128 --train.steps 150 --train.batch_size 32
      --log.every 5 --log.progress plain)
submit() {  # submit LOG [VAR=VALUE…] -- hpctrain args…: the job id
  local log=$1 envs=()
  shift
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  (
    # The sbatch script's knobs: MPI over TCP on the link (hpctrain itself refuses unknown HPCTRAIN_*).
    export HPCTRAIN_BIN="$BUILD/hpctrain" HPCTRAIN_NET_IF=$CLUSTER_IF HPCTRAIN_MPI_TCP=1 "${envs[@]}"
    sbatch --parsable --nodes=2 --ntasks-per-node=2 -c 1 --gpus-per-node=0 --time=15 -D "$WORK" -o "$log" \
      slurm/train-multinode.sbatch "$@"
  )
}
wait_line() {  # wait_line FILE REGEX SECONDS
  for _ in $(seq 1 $(($3 * 10))); do
    grep -qE "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}
link_bytes() { nsenter --net="/run/netns/$CLUSTER_NS_B" awk -v i="$CLUSTER_IF:" '$1 == i {print $2 + $10}' /proc/net/dev; }
val_loss() { grep -oP '"val_loss": \K[^,]+' "$1/metrics.jsonl" | tail -1; }
last_loss() { grep -oP '"step": 150, .*"loss": \K[^,]+' "$1/metrics.jsonl" | tail -1; }
job_fail() {  # job_fail JOB LOG MESSAGE: the reason first (a CI report shows the start), then the evidence
  echo "FAIL: $3" >&2
  echo "job $1: $(scontrol show job "$1" 2>&1 | grep -oE '(JobState|Reason|Restarts|ExitCode)=\S+' | tr '\n' ' ')" >&2
  echo "nodes: $(sinfo -h -N -o '%N %t' 2>&1 | tr '\n' ' ')" >&2
  echo "---- slurmctld on job $1:" >&2
  grep -E "JobId=$1( |$)" "$CLUSTER_DIR/slurmctld.log" 2>/dev/null | tail -n 15 >&2
  echo "---- the job log's last 25 lines ($2):" >&2
  tail -n 25 "$2" >&2
  exit 1
}
cd "$ROOT"

# ---- 0. the script's PMIx fences wait for every node ----------------------------------
# MPI_Finalize ends with the same kind of fence as MPI_Init's last barrier; through the sbatch
# script (SLURM_PMIX_FENCE=ring) rank 0 must leave it after the last rank, on node-b, entered
# it (tests/cluster/fence_barrier.cpp; without, Slurm completes it on each node alone, and a
# rank that left MPI_Init early crashed one that had not: SIGSEGV at address 0).
mpicxx -O1 -o "$WORK/fence_barrier" "$ROOT/tests/cluster/fence_barrier.cpp" || fail "cannot build fence_barrier"
job=$(submit "$WORK/fence.log" HPCTRAIN_BIN="$WORK/fence_barrier" -- "$WORK") || fail "sbatch refused the job"
CLUSTER_JOBS+=("$job")
slurm_wait_state "$job" 60 COMPLETED FAILED CANCELLED || job_fail "$job" "$WORK/fence.log" "job $job did not finish"
grep -qx "barrier" "$WORK/fence.log" && grep -q "^hpctrain job: SLURM_PMIX_FENCE=ring" "$WORK/fence.log" ||
  job_fail "$job" "$WORK/fence.log" "MPI_Finalize's PMIx fence did not wait for node-b's last rank"
pass "job $job: PMIx fences wait for every node (SLURM_PMIX_FENCE=ring)"

run_mpi 4 "$BUILD/hpctrain" "${args[@]}" --run.dir "$WORK/reference" >"$WORK/reference.log" 2>&1 ||
  { cat "$WORK/reference.log"; fail "the single-host 4-rank reference run"; }
grep -q "^ranks: 4 on 1 node(s)" "$WORK/reference.log" || fail "the reference run is not on one node"
pass "reference: 4 ranks on one host (mpirun), val_loss $(val_loss "$WORK/reference")"

# ---- 1. a clean job over two nodes ------------------------------------------------
before=$(link_bytes)
job=$(submit "$WORK/clean.log" -- "${args[@]}" --run.dir "$WORK/clean") || fail "sbatch refused the job"
CLUSTER_JOBS+=("$job")
slurm_wait_state "$job" 120 COMPLETED FAILED CANCELLED || job_fail "$job" "$WORK/clean.log" "job $job did not finish"
log=$WORK/clean.log
scontrol show job "$job" | grep -q JobState=COMPLETED || job_fail "$job" "$log" "job $job did not complete"
grep -q "^ranks: 4 on 2 node(s), communicator mpi" "$log" || job_fail "$job" "$log" "no '4 ranks on 2 nodes' line"
for line in "node-a .* local rank 0/2  node 0" "node-a .* local rank 1/2  node 0" \
  "node-b .* local rank 0/2  node 1" "node-b .* local rank 1/2  node 1"; do
  grep -qE "^  rank +[0-9]+  host $line" "$log" || job_fail "$job" "$log" "no start-up line matching '$line'"
done
grep -E "^  rank " "$log"
grep -q "hpctrain job: OMPI_MCA_btl_tcp_if_include=$CLUSTER_IF" "$log" &&
  grep -q "hpctrain job: OMPI_MCA_btl=self,vader,tcp" "$log" || fail "the job did not set Open MPI's TCP interface"
moved=$(($(link_bytes) - before))
# 150 allreduces of ~400 KB of gradients: well over 10 MB crosses the link.
[ "$moved" -gt 10000000 ] || fail "only $moved bytes crossed the link $CLUSTER_IF"
pass "job $job: 4 ranks on node-a, node-b (local ranks 0,1 on each); $((moved / 1000000)) MB over $CLUSTER_IF"
diff <(grep '^final:' "$WORK/reference.log") <(grep '^final:' "$log") || fail "final evaluation differs"
[ "$(val_loss "$WORK/clean")" = "$(val_loss "$WORK/reference")" ] ||
  fail "val_loss $(val_loss "$WORK/clean") on 2 nodes, $(val_loss "$WORK/reference") on one"
pass "final val_loss $(val_loss "$WORK/clean") on 2 nodes = the single-host run's, bitwise"

# ---- 2. preemption across nodes -----------------------------------------------------
run=$WORK/run
log=$WORK/job.log
job=$(submit "$log" HPCTRAIN_FAULT=sleep=40@step_end -- "${args[@]}" --run.dir "$run" --ckpt.every_steps 20 \
  --dist.timeout 10) || fail "sbatch refused the job"
CLUSTER_JOBS+=("$job")
slurm_wait_state "$job" 60 RUNNING || job_fail "$job" "$log" "job $job did not start"
for _ in $(seq 1 600); do
  grep -qE '"step": ([2-9][0-9]|1[0-9][0-9])' "$run/metrics.jsonl" 2>/dev/null && break
  case "$(squeue -h -j "$job" -o %T 2>/dev/null)" in RUNNING | "") ;; *) break ;; esac  # ended (a busy squeue: "")
  sleep 0.1
done
grep -qE '"step": ([2-9][0-9]|1[0-9][0-9])' "$run/metrics.jsonl" 2>/dev/null ||
  job_fail "$job" "$log" "job $job did not reach step 20"
slurm_signal_batch "$job" USR1 || job_fail "$job" "$log" "scancel --batch --signal=USR1 $job failed"
slurm_start_now "$job" || job_fail "$job" "$log" "job $job was not requeued"
step=$(grep -oP '^stopped after step \K[0-9]+(?= on all 4 rank\(s\), checkpoint written: exit 75)' "$log") ||
  job_fail "$job" "$log" "no agreed checkpointed stop on all 4 ranks"
grep -qE "node-a: tasks? 0(-1)?: Exited with exit code 75" "$log" && grep -qE "node-b: tasks? 2(-3)?: Exited with exit code 75" "$log" ||
  job_fail "$job" "$log" "the ranks of both nodes did not exit 75"
grep -q "requeued job $job" "$log" || job_fail "$job" "$log" "the job did not requeue itself"
pass "USR1: all 4 ranks on both nodes stopped after step $step, checkpointed, exited 75; job $job requeued"

# ---- 3. node-b crashes -----------------------------------------------------------------
slurm_wait_state "$job" 60 RUNNING || job_fail "$job" "$log" "job $job did not restart"
wait_line "$log" "resumed from $(printf '%s/ckpt-%08d.h5' "$run" "$step"): step $step of 150" 60 ||
  job_fail "$job" "$log" "no resume from step $step"
crash_at=$((step + 30))
for _ in $(seq 1 600); do
  [ "$(grep -oP '"step": \K[0-9]+' "$run/metrics.jsonl" | tail -1)" -ge "$crash_at" ] 2>/dev/null && break
  sleep 0.1
done
t0=$SECONDS
cluster_crash_node b
pass "node-b crashed at step $(grep -oP '"step": \K[0-9]+' "$run/metrics.jsonl" | tail -1)"
for _ in $(seq 1 120); do
  [ "$(squeue -h -j "$job" -t running -o %T 2>/dev/null)" = RUNNING ] || break
  sleep 0.5
done
ended=$((SECONDS - t0))
[ "$ended" -le 45 ] || job_fail "$job" "$log" "the job still ran $ended s after node-b crashed (dist.timeout 10 s)"
grep -qE "did not complete within 10 s \(dist.timeout\): ranks 2,3 \(on node-b\) do not answer" "$log" ||
  job_fail "$job" "$log" "the error does not name ranks 2,3 on node-b"
grep -oE "did not complete within 10 s .*" "$log" | head -1
pass "the job ended ${ended} s after the crash, naming ranks 2,3 on node-b"

cluster_boot_node b || fail "node-b did not come back"
slurm_wait_state "$job" 60 FAILED COMPLETED CANCELLED || job_fail "$job" "$log" "job $job did not end"
resume_from=$(ls "$run"/ckpt-*.h5 | tail -1)
err=$(scontrol requeue "$job" 2>&1) || job_fail "$job" "$log" "scontrol requeue $job: $err"
slurm_start_now "$job" || job_fail "$job" "$log" "job $job was not requeued"
slurm_wait_state "$job" 120 COMPLETED FAILED CANCELLED || job_fail "$job" "$log" "job $job did not finish"
scontrol show job "$job" | grep -q JobState=COMPLETED || job_fail "$job" "$log" "job $job did not complete"
grep -q "resumed from $resume_from: " "$log" || job_fail "$job" "$log" "no resume from $resume_from"
pass "node-b back, job $job requeued, resumed from $(basename "$resume_from") and completed"

diff <(grep '^final:' "$WORK/reference.log") <(grep '^final:' "$log" | tail -1) || fail "final evaluation differs"
[ -n "$(last_loss "$run")" ] && [ "$(last_loss "$run")" = "$(last_loss "$WORK/reference")" ] ||
  fail "final loss $(last_loss "$run") differs from the uninterrupted $(last_loss "$WORK/reference")"
"$PYTHON" - "$WORK/reference/ckpt-00000150.h5" "$run/ckpt-00000150.h5" <<'EOF' || fail "final parameters differ"
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:])
assert np.array_equal(a["params_flat"][...].view(np.uint32), b["params_flat"][...].view(np.uint32))
EOF
pass "after a preemption and a node crash: final loss $(last_loss "$run"), evaluation and parameters equal the uninterrupted run's"
