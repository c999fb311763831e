# shellcheck shell=bash
# A throw-away single-host Slurm for tests (sourced, not run).
#
#   slurm_check_available       prints why not and returns 1 when this host cannot run one
#   slurm_has_pmix              (after slurm_start) srun --mpi=pmix is available
#   slurm_start DIR             munged + slurmctld + slurmd with config, ports, spool, state,
#                               logs and munge socket all under DIR; exports SLURM_CONF
#   slurm_stop                  cancels the jobs it knows, stops the daemons by their PIDs
#   slurm_wait_state JOB SECONDS STATE…   waits until the job is in one of the states
#   slurm_signal_batch JOB SIGNAL  scancel --batch --signal=SIGNAL JOB, asked again while the
#                               controller is busy; says why when it refuses
#   slurm_start_now JOB         a requeued job starts now, not after Slurm's BeginTime (~2 min)
#
# Nothing is shared with a Slurm or munge the host may already run: own
# ports (free ones, asked from the kernel), own munge key and socket, own
# spool, and slurmd's jobs see a /dev/shm of their own. proctrack/linuxproc and task/none need no cgroups, so it runs in
# containers. The daemons run as root (SlurmUser=root), so the tests need root.
# Facts behind the choices: ../../../shared/notes/local-slurm.md.

SLURM_TEST_DIR=""
SLURM_TEST_JOBS=()

slurm_check_available() {
  local b
  for b in munged slurmctld slurmd sbatch srun scontrol squeue scancel sinfo; do
    command -v "$b" >/dev/null 2>&1 ||
      { echo "$b not found (install slurm-wlm and munge: scripts/install-deps.sh --slurm)"; return 1; }
  done
  [ "$(id -u)" -eq 0 ] || { echo "the local Slurm runs its daemons as root; run as root"; return 1; }
  unshare --mount true 2>/dev/null || { echo "cannot create a mount namespace (unshare --mount, util-linux)"; return 1; }
  return 0
}

# After slurm_start: does srun offer --mpi=pmix (Debian: slurm-wlm-basic-plugins)?
slurm_has_pmix() { srun --mpi=list 2>&1 | grep -q pmix; }

# A TCP port nobody listens on, chosen by the kernel.
slurm_free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

slurm_start() {
  SLURM_TEST_DIR=$1
  local d=$SLURM_TEST_DIR host mem ctld_port slurmd_port
  mkdir -p "$d/state" "$d/spool" "$d/munge"
  chmod 700 "$d/munge"
  host=$(hostname)
  mem=$(awk '/MemTotal/ {print int($2 / 1024 * 0.8)}' /proc/meminfo)
  ctld_port=$(slurm_free_port)
  slurmd_port=$(slurm_free_port)
  while [ "$slurmd_port" = "$ctld_port" ]; do slurmd_port=$(slurm_free_port); done

  dd if=/dev/urandom of="$d/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$d/munge/munge.key"
  munged --socket="$d/munge/munge.sock" --key-file="$d/munge/munge.key" --pid-file="$d/munge/munged.pid" \
    --log-file="$d/munge/munged.log" --seed-file="$d/munge/munged.seed" --force ||
    { cat "$d/munge/munged.log" 2>/dev/null; return 1; }

  cat >"$d/slurm.conf" <<CONF
ClusterName=hpctest
SlurmctldHost=$host
SlurmctldAddr=127.0.0.1
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/munge/munge.sock
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/slurmctld.log
SlurmdLogFile=$d/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
JobRequeue=1
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
MailProg=/bin/true
# Look at pending jobs every 2 s instead of every 60 s: a requeued job waits
# out its BeginTime (~2 min, fixed) and should start right after it.
SchedulerParameters=sched_interval=2,bf_interval=2
KillWait=10
MinJobAge=600
NodeName=hpctest-node NodeHostname=$host NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=hpctest-node Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
  export SLURM_CONF=$d/slurm.conf
  slurmctld -f "$SLURM_CONF" || { cat "$d/slurmctld.log" 2>/dev/null; return 1; }
  # slurmd, and so the jobs' tasks, get a /dev/shm of their own: Open MPI names its
  # shared-memory files after the host, the Slurm job and the step, which two
  # such clusters on one host (another test, another checkout) share.
  unshare --mount sh -c 'mount -t tmpfs -o mode=1777 slurm-test-shm /dev/shm && exec "$@"' sh \
    slurmd -f "$SLURM_CONF" -N hpctest-node || { cat "$d/slurmd.log" 2>/dev/null; return 1; }
  for _ in $(seq 1 60); do
    [ "$(sinfo -h -n hpctest-node -o %t 2>/dev/null)" = idle ] && return 0
    sleep 0.5
  done
  echo "the local Slurm node did not become idle in 30 s:" >&2
  sinfo -N -l >&2 || true
  tail -5 "$d/slurmctld.log" "$d/slurmd.log" >&2 || true
  return 1
}

# slurm_wait_state JOB SECONDS STATE…: 0 once the job is in one of the states, 1 at the timeout.
slurm_wait_state() {
  local job=$1 seconds=$2 state s
  shift 2
  for _ in $(seq 1 $((seconds * 2))); do
    state=$(scontrol show job "$job" 2>/dev/null | grep -oP 'JobState=\K\S+' || true)
    for s in "$@"; do [ "$state" = "$s" ] && return 0; done
    sleep 0.5
  done
  echo "job $job is $state after ${seconds} s, expected $*" >&2
  return 1
}

# slurm_signal_batch JOB SIGNAL: signals the job's batch shell, as Slurm's --signal=B:SIG@T does.
# A busy controller (no answer in time, "try again later") is asked again. What is not transient
# is a failure, with the controller's answer and the job's state on stderr: scancel itself prints
# nothing (without -v) when the job has already ended ("already completing or completed",
# "Invalid job id"), as one that crashed at start-up has.
slurm_signal_batch() {
  local job=$1 sig=$2 out="" try
  for try in 1 2 3 4 5; do
    out=$(scancel -v --batch --signal="$sig" "$job" 2>&1) && return 0
    case "$out" in
      *"timed out"* | *"Unable to contact"* | *"connect failure"* | *"Connection refused"* | \
        *"Zero Bytes were transmitted"* | *"try again later"*) [ "$try" = 5 ] || sleep "$try" ;;
      *) break ;;
    esac
  done
  echo "scancel --batch --signal=$sig $job failed: $(grep -v '^scancel: Signal ' <<<"$out" | tr '\n' ' ')" \
    "(job $job: $(scontrol show job "$job" 2>&1 | grep -oE '(JobState|Reason|ExitCode)=\S+' | tr '\n' ' '))" >&2
  return 1
}

# slurm_start_now JOB: waits until a requeued job is PENDING, then moves its start to now
# (Slurm holds a requeued job ~2 minutes, BeginTime), until it runs (or ended at once).
# Not at once: a job allocated again while its old instance's credential is still revoked
# (the nodes finishing it, or within the same second) is killed at launch, exit 1 ("Killing
# non-startable batch JobId=N: Job credential revoked" in slurmctld's log). The BeginTime
# delay this skips is what avoids that: let the nodes go idle and the second pass first.
slurm_start_now() {
  local restarts
  slurm_wait_state "$1" 60 PENDING || return 1
  restarts=$(scontrol show job "$1" | grep -oP 'Restarts=\K[0-9]+')
  for _ in $(seq 1 60); do
    [ "$(sinfo -h -o %t 2>/dev/null | sort -u)" = idle ] && break
    sleep 0.5
  done
  sleep 2
  for _ in $(seq 1 30); do
    scontrol update JobId="$1" StartTime=now 2>/dev/null || true
    slurm_wait_state "$1" 2 RUNNING COMPLETED FAILED 2>/dev/null && return 0
    # (it ran and was requeued again in between: a start that failed at once)
    [ "$(scontrol show job "$1" | grep -oP 'Restarts=\K[0-9]+')" = "$restarts" ] || return 0
  done
  return 1
}

# Kills a daemon by the PID in its pid file, waiting up to 10 s before SIGKILL.
slurm_kill_pidfile() {
  local f=$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.5; done
  kill -9 "$pid" 2>/dev/null || true
}

slurm_stop() {
  [ -n "$SLURM_TEST_DIR" ] || return 0
  local d=$SLURM_TEST_DIR job
  if [ -f "$d/slurmctld.pid" ]; then
    for job in "${SLURM_TEST_JOBS[@]}"; do scancel "$job" 2>/dev/null || true; done
    # Let the steps end before slurmd goes: slurmstepd outlives slurmd otherwise.
    for _ in $(seq 1 20); do
      [ -z "$(squeue -h -t running,completing 2>/dev/null)" ] && break
      sleep 0.5
    done
  fi
  slurm_kill_pidfile "$d/slurmd.pid"
  slurm_kill_pidfile "$d/slurmctld.pid"
  slurm_kill_pidfile "$d/munge/munged.pid"
  SLURM_TEST_DIR=""
}
