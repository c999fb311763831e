# shellcheck shell=bash
# Shared by slurm/train-*.sbatch (sourced): launch hpctrain on the job's
# tasks, forward Slurm's warning signal to them, and requeue the job when
# hpctrain exits 75 ("checkpointed, requeue me").
#
# The life of a job:
#   1. srun --mpi=pmix starts one hpctrain per task (each task IS the trainer,
#      or `singularity exec` of it: no wrapper shell, so signals reach it);
#      hpctrain resumes from the newest valid checkpoint (--resume auto).
#   2. Near the time limit Slurm sends SIGUSR1 to this batch shell
#      (--signal=B:USR1@120), or a person runs `scancel --signal=USR1 JOB`.
#      The trap forwards SIGUSR1 to the launcher, which passes it to every
#      task; the ranks agree at the next step boundary, rank 0 writes a
#      checkpoint, all exit 75. SIGTERM (preemption) is forwarded the same way.
#   3. On 75 this script runs `scontrol requeue $SLURM_JOB_ID` (unless the job
#      is no longer RUNNING: a plain `scancel` ends it for good): the job goes
#      back to the queue with the same id (SLURM_RESTART_COUNT + 1) and its
#      log continues (--open-mode=append). On clusters that refuse requeue,
#      chain jobs instead: slurm/submit-chain.sh N slurm/train-cpu.sbatch …
#   4. A step that dies before training starts (a crash in MPI_Init, a node
#      that cannot start its ranks: any signal or exit code but 0, 2 and 75)
#      lost nothing but its start, so the job is requeued the same way, at
#      most HPCTRAIN_START_RETRIES times in a row, and the log says why. Exit
#      2 (bad input) still ends the job: it would fail the same way again.
#      The script knows that training started from a file hpctrain creates
#      (HPCTRAIN_STARTED_FILE: the first rank of each node, once set-up and
#      resume succeeded on every rank) in the job's state directory,
#      .hpctrain-job-JOBID in its working directory, which also counts the
#      failed starts in a row and is removed when the job ends for good.
#
# Knobs (set them when submitting; sbatch passes the environment on). They
# belong to this script, not to hpctrain, and are removed from the
# environment before the launch (hpctrain refuses HPCTRAIN_* variables that
# are not its options):
#   HPCTRAIN_HOME      the hpctrain checkout (default: the submit directory)
#   HPCTRAIN_BIN       the trainer binary (default: $HPCTRAIN_HOME/build/hpctrain)
#   HPCTRAIN_IMAGE     a Singularity/Apptainer image: run `singularity exec --nv IMAGE hpctrain`
#   HPCTRAIN_BIND      extra container binds, comma-separated (the submit dir is always bound)
#   HPCTRAIN_LAUNCHER  srun (default) | mpirun
#   HPCTRAIN_SRUN_MPI  srun's --mpi plugin (default pmix; `srun --mpi=list` shows yours)
#   HPCTRAIN_NET_IF    the network between nodes, as interface names (eth1 or ib0,ib1) or subnets
#                      (10.1.0.0/16): sets OMPI_MCA_btl_tcp_if_include and OMPI_MCA_oob_tcp_if_include,
#                      and NCCL_SOCKET_IFNAME for names, each only where you have not set it.
#                      Default: unset, and Open MPI and NCCL use every interface but loopback, which
#                      fails where nodes have interfaces the others cannot reach (docker0, a
#                      management network, a login-only subnet).
#   HPCTRAIN_MPI_TCP=1 Open MPI over TCP sockets between nodes and shared memory within a node
#                      (OMPI_MCA_pml=ob1, OMPI_MCA_btl=self,vader,tcp where unset): Ethernet-only CPU
#                      clusters, or where UCX picks a device that does not work. Default: unset
#                      (Open MPI chooses; UCX on InfiniBand).
#   HPCTRAIN_START_RETRIES  how many starts in a row that die before training may requeue the
#                      job (default 3; 0: none)
#
# Environment passed through untouched when you set it (see docs/cluster.md,
# "Slurm scripts" and "Multi-node"): NCCL_IB_HCA, NCCL_SOCKET_IFNAME,
# NCCL_DEBUG, UCX_*, OMPI_MCA_*. Only HDF5_USE_FILE_LOCKING (FALSE: Lustre,
# GPFS and NFS often refuse HDF5's locks) and, with srun --mpi=pmix,
# SLURM_PMIX_FENCE (ring: see hpctrain_pmix_fence) get defaults, and the two
# knobs above fill in unset OMPI_MCA_* / NCCL_SOCKET_IFNAME values.

# HPCTRAIN_NET_IF and HPCTRAIN_MPI_TCP → the variables Open MPI and NCCL read.
hpctrain_net_settings() {
  local net=${HPCTRAIN_NET_IF:-} tcp=${HPCTRAIN_MPI_TCP:-}
  unset HPCTRAIN_NET_IF HPCTRAIN_MPI_TCP
  if [ -n "$net" ]; then
    export OMPI_MCA_btl_tcp_if_include=${OMPI_MCA_btl_tcp_if_include:-$net}
    export OMPI_MCA_oob_tcp_if_include=${OMPI_MCA_oob_tcp_if_include:-$net}
    # NCCL takes interface names (or prefixes), not subnets.
    case "$net" in */*) ;; *) export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-$net} ;; esac
  fi
  if [ "$tcp" = 1 ]; then
    export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
    export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader,tcp}
  fi
}

# Slurm's mpi/pmix plugin (22.05 and later) runs a PMIx fence that collects no
# data, such as Open MPI's barrier at the end of MPI_Init, as a tree over the
# step's nodes; with fewer nodes than TreeWidth (default 50; 16 from 23.02.5)
# there is no tree, and every node completes the fence on its own. A rank
# then leaves MPI_Init while a rank on another node has not yet registered
# its receive handlers, and the first message it sends there is a call
# through a null pointer: SIGSEGV at address 0 in MPI_Init, at random, more
# often on a loaded node or at a requeued job's start. The ring algorithm
# makes every fence wait for every node.
hpctrain_pmix_fence() {  # hpctrain_pmix_fence SRUN_MPI_PLUGIN
  case "$1" in pmix*) export SLURM_PMIX_FENCE=${SLURM_PMIX_FENCE:-ring} ;; esac
}

# The flags the job runs with, after the user's own.
hpctrain_has_arg() {  # hpctrain_has_arg --run.dir "$@": is the option among the arguments?
  local want=$1 a
  shift
  for a in "$@"; do
    [ "$a" = "$want" ] || [ "${a%%=*}" = "$want" ] && return 0
  done
  return 1
}

# Unix time at which Slurm ends this job, from squeue once, for hpctrain's
# deadline (SLURM_JOB_END_TIME; newer Slurm sets it itself).
hpctrain_job_end_time() {
  [ -n "${SLURM_JOB_END_TIME:-}" ] && return 0
  [ -n "${SLURM_JOB_ID:-}" ] && command -v squeue >/dev/null 2>&1 || return 0
  local end
  end=$(squeue -h -j "$SLURM_JOB_ID" -o %e 2>/dev/null | head -1) || return 0
  end=$(date -d "$end" +%s 2>/dev/null) || return 0  # "Unknown", "NONE" and the like: no end
  export SLURM_JOB_END_TIME=$end
}

# Is this answer of a Slurm client a busy or unreachable controller, worth
# asking again (rather than a refusal, which is final)?
hpctrain_slurm_busy() {
  case "$1" in
    *"timed out"* | *"Unable to contact"* | *"connect failure"* | *"Connection refused"* | \
      *"Zero Bytes were transmitted"* | *"try again later"* | *"Resource temporarily unavailable"*) return 0 ;;
  esac
  return 1
}

# scontrol requeue JOB, asked again while the controller is only busy; a
# refusal (a job that may not requeue) is final. Every answer goes to the log.
hpctrain_requeue() {
  local err try
  for try in 1 2 3 4 5; do
    err=$(scontrol requeue "$1" 2>&1) && return 0
    echo "hpctrain job: scontrol requeue $1: $err" >&2
    hpctrain_slurm_busy "$err" || return 1
    [ "$try" = 5 ] || sleep "$try"
  done
  return 1
}

# The job's state (RUNNING, COMPLETING, …) from squeue, asked again while the
# controller does not answer; empty if it never did (its last answer then goes
# to the log). After a plain `scancel`, or at the hard time limit, the job is
# COMPLETING: a person or Slurm meant it to end, and it is not requeued.
hpctrain_job_state() {
  local out="" try
  for try in 1 2 3 4 5; do
    # (inside `if`: the sbatch scripts run under set -e, where a failed squeue
    # would end this shell silently, job not requeued)
    if out=$(squeue -h -j "$1" -o %T 2>&1) && [ -n "$out" ]; then
      echo "${out%%$'\n'*}"
      return 0
    fi
    [ "$try" = 5 ] || sleep "$try"
  done
  echo "hpctrain job: squeue -j $1: ${out:-no answer}" >&2
}

# "killed by SIGSEGV (exit code 139)" or "exit code 1": how the step ended.
hpctrain_exit_cause() {
  local name
  if [ "$1" -gt 128 ] && name=$(kill -l $(($1 - 128)) 2>/dev/null); then
    echo "killed by SIG${name#SIG} (exit code $1)"
  else
    echo "exit code $1"
  fi
}

hpctrain_run() {
  local home=${HPCTRAIN_HOME:-${SLURM_SUBMIT_DIR:-$PWD}}
  local bin=${HPCTRAIN_BIN:-$home/build/hpctrain}
  local image=${HPCTRAIN_IMAGE:-} binds=${HPCTRAIN_BIND:-}
  local launcher=${HPCTRAIN_LAUNCHER:-srun} srun_mpi=${HPCTRAIN_SRUN_MPI:-pmix}
  local start_retries=${HPCTRAIN_START_RETRIES:-3}
  unset HPCTRAIN_HOME HPCTRAIN_BIN HPCTRAIN_IMAGE HPCTRAIN_BIND HPCTRAIN_LAUNCHER HPCTRAIN_SRUN_MPI \
    HPCTRAIN_START_RETRIES
  case "$start_retries" in
    '' | *[!0-9]*) echo "hpctrain job: HPCTRAIN_START_RETRIES must be a number, not '$start_retries'" >&2; return 2 ;;
  esac
  hpctrain_net_settings

  export HDF5_USE_FILE_LOCKING=${HDF5_USE_FILE_LOCKING:-FALSE}
  # Since Slurm 22.05, srun no longer inherits --cpus-per-task from sbatch.
  [ -n "${SLURM_CPUS_PER_TASK:-}" ] && export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK
  hpctrain_job_end_time

  local args=("$@")
  hpctrain_has_arg --resume "$@" || args+=(--resume auto)
  # A requeued job must find its checkpoints again: without any run directory
  # (argument, HPCTRAIN_RUN_DIR, or a config file that may name one) it gets
  # its own, stable across requeues.
  if ! hpctrain_has_arg --run.dir "$@" && ! hpctrain_has_arg --config "$@" && [ -z "${HPCTRAIN_RUN_DIR:-}" ] &&
    [ -z "${HPCTRAIN_CONFIG:-}" ]; then
    args+=(--run.dir "runs/${SLURM_JOB_NAME:-hpctrain}-${SLURM_JOB_ID:-local}")
  fi

  local trainer=("$bin")
  if [ -n "$image" ]; then
    local runtime
    runtime=$(command -v apptainer || command -v singularity) ||
      { echo "hpctrain job: HPCTRAIN_IMAGE is set but neither apptainer nor singularity is on PATH" >&2; return 2; }
    local nv=()
    command -v nvidia-smi >/dev/null 2>&1 && nv=(--nv)
    trainer=("$runtime" exec "${nv[@]}" --bind "${SLURM_SUBMIT_DIR:-$PWD}${binds:+,$binds}" "$image" hpctrain)
  elif [ ! -x "$bin" ]; then
    echo "hpctrain job: $bin not found: build it (make) or set HPCTRAIN_BIN / HPCTRAIN_IMAGE" >&2
    return 2
  fi

  local ntasks=${SLURM_NTASKS:-1} launch
  case "$launcher" in
    srun)
      [ -n "${SLURM_JOB_ID:-}" ] || { echo "hpctrain job: not inside a Slurm job; use HPCTRAIN_LAUNCHER=mpirun" >&2; return 2; }
      launch=(srun --mpi="$srun_mpi")
      hpctrain_pmix_fence "$srun_mpi" ;;
    mpirun) launch=(mpirun -np "$ntasks" --bind-to none) ;;
    *) echo "hpctrain job: HPCTRAIN_LAUNCHER must be srun or mpirun, not '$launcher'" >&2; return 2 ;;
  esac

  echo "hpctrain job ${SLURM_JOB_ID:-(no Slurm job)} restart ${SLURM_RESTART_COUNT:-0}:" \
    "$ntasks task(s) on ${SLURM_JOB_NUM_NODES:-1} node(s) (${SLURM_JOB_NODELIST:-$(hostname)}), $(date -Is)"
  echo "hpctrain job: SLURM_RESTART_COUNT=${SLURM_RESTART_COUNT:-0} SLURM_JOB_END_TIME=${SLURM_JOB_END_TIME:-none}"
  local v
  for v in NCCL_IB_HCA NCCL_SOCKET_IFNAME NCCL_DEBUG UCX_NET_DEVICES UCX_TLS OMPI_MCA_pml OMPI_MCA_btl \
    OMPI_MCA_btl_tcp_if_include OMPI_MCA_oob_tcp_if_include HDF5_USE_FILE_LOCKING SLURM_PMIX_FENCE; do
    [ -n "${!v:-}" ] && echo "hpctrain job: $v=${!v}"
  done
  echo "hpctrain job: ${launch[*]} ${trainer[*]} ${args[*]}"

  # Where hpctrain says that training started (see 4. above): a Slurm job's
  # state directory, in its working directory (the submit directory unless
  # --chdir), which the nodes usually share; where they do not, the ranks on
  # this node, rank 0 among them, write it.
  local state_dir="" started=""
  if [ -n "${SLURM_JOB_ID:-}" ]; then
    state_dir=$PWD/.hpctrain-job-$SLURM_JOB_ID
    if mkdir -p "$state_dir" 2>/dev/null && rm -f "$state_dir/started"; then
      started=$state_dir/started
      export HPCTRAIN_STARTED_FILE=$started
    else
      echo "hpctrain job: warning: cannot create $state_dir: a step that dies at start-up ends the job" >&2
      state_dir=""
    fi
  fi

  # The launcher runs in the background so that this shell can take signals:
  # bash runs a trap only between commands, and `wait` is interruptible.
  local child interrupted rc
  forward() {
    interrupted=1
    echo "hpctrain job: got SIG$1, forwarding SIGUSR1 to the job step (checkpoint, then exit 75)"
    kill -USR1 "$child" 2>/dev/null || true
  }
  trap 'forward USR1' USR1
  trap 'forward TERM' TERM
  "${launch[@]}" "${trainer[@]}" "${args[@]}" &
  child=$!
  while :; do
    interrupted=0
    rc=0
    wait "$child" || rc=$?
    [ "$interrupted" = 1 ] || break  # the launcher ended (bash keeps its status for a second wait)
  done
  # The step has ended: a late or repeated SIGUSR1 (whose default action ends
  # the shell) and the SIGTERM that Slurm sends the batch shell once the
  # requeue is accepted must not cut the requeue or its message short.
  trap '' USR1 TERM

  local failed_starts=0
  if [ -n "$started" ]; then
    failed_starts=$(cat "$state_dir/failed-starts" 2>/dev/null || echo 0)
    [ -e "$started" ] && failed_starts=0  # training started: the count of failed starts in a row begins again
  fi
  if [ "$rc" -eq 75 ] && [ -n "${SLURM_JOB_ID:-}" ]; then
    local state
    state=$(hpctrain_job_state "$SLURM_JOB_ID")
    if [ "$state" != RUNNING ]; then
      echo "hpctrain job: checkpointed; job $SLURM_JOB_ID is ${state:-gone} (cancelled?), so it is not requeued" >&2
    elif hpctrain_requeue "$SLURM_JOB_ID"; then
      echo "hpctrain job: checkpointed; requeued job $SLURM_JOB_ID (it continues with --resume auto)"
      [ -z "$state_dir" ] || echo "$failed_starts" >"$state_dir/failed-starts" 2>/dev/null || true
      return 0
    else
      echo "hpctrain job: checkpointed, but Slurm refused the requeue (--no-requeue, or the cluster forbids it):" \
        "exit 75; the next job of a slurm/submit-chain.sh chain continues" >&2
    fi
  elif [ "$rc" -eq 75 ]; then
    echo "hpctrain job: checkpointed; not a Slurm job, so nothing to requeue; exit 75" >&2
  elif [ "$rc" -ne 0 ] && [ "$rc" -ne 2 ] && [ -n "$started" ] && [ ! -e "$started" ]; then
    # Nothing was trained, so nothing is lost but the start: requeue, a bounded number of times in a row.
    local cause state
    cause=$(hpctrain_exit_cause "$rc")
    failed_starts=$((failed_starts + 1))
    state=$(hpctrain_job_state "$SLURM_JOB_ID")
    if [ "$failed_starts" -gt "$start_retries" ]; then
      echo "hpctrain job: the step died before training started ($cause), $failed_starts times in a row:" \
        "not requeued again (HPCTRAIN_START_RETRIES=$start_retries)" >&2
    elif [ "$state" != RUNNING ]; then
      echo "hpctrain job: the step died before training started ($cause); job $SLURM_JOB_ID is ${state:-gone}" \
        "(cancelled?), so it is not requeued" >&2
    elif hpctrain_requeue "$SLURM_JOB_ID"; then
      echo "$failed_starts" >"$state_dir/failed-starts" 2>/dev/null || true
      echo "hpctrain job: the step died before training started ($cause): requeued job $SLURM_JOB_ID" \
        "(failed start $failed_starts in a row, at most $start_retries; it continues with --resume auto)"
      return 0
    else
      echo "hpctrain job: the step died before training started ($cause), and Slurm refused the requeue" >&2
    fi
  fi
  [ "$rc" -eq 2 ] && echo "hpctrain job: bad input (exit 2): not requeued, it would fail the same way" >&2
  [ -z "$state_dir" ] || rm -rf "$state_dir"  # the job ends here for good
  echo "hpctrain job: finished with exit code $rc, $(date -Is)"
  return "$rc"
}
