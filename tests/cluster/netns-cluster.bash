#!/usr/bin/env bash
# shellcheck shell=bash
# A two-node Slurm cluster on one machine, for tests: two Linux network
# namespaces joined by a veth pair, one slurmd in each (nodes node-a and
# node-b), slurmctld in node-a's namespace, one munged.
#
# Sourced by tests (tests/e2e/multinode_*.sh):
#   cluster_check_available     prints why not and returns 1 where this host cannot build one
#   cluster_start DIR           namespaces, link, daemons; config, spool, logs, munge socket under DIR
#   cluster_stop                cancels jobs, stops the daemons and every process left in the
#                               namespaces by PID, deletes the namespaces (call it from an EXIT trap)
#   on_node a|b CMD…            runs CMD in that node's namespace (and host name, for hostname-minded tools)
#   sbatch, srun, scontrol, squeue, scancel, sinfo   the Slurm clients, run inside node-a's namespace
#   cluster_delay a|b MS        adds MS ms to every packet that node sends to the other (0: none)
#   cluster_crash_node a|b      SIGKILLs everything in that node's namespace (slurmd, steps, ranks)
#   cluster_boot_node a|b       clears its /tmp and stale PMIx sockets, starts its slurmd again
# Run:   tests/cluster/netns-cluster.bash start DIR   (prints how to use it)
#        tests/cluster/netns-cluster.bash stop DIR
#
# Exported after cluster_start: SLURM_CONF, CLUSTER_IF (the link's interface
# name, the same in both namespaces), CLUSTER_SUBNET (its /30), CLUSTER_ADDR_A,
# CLUSTER_ADDR_B.
#
# Why it looks like this:
# - Each "node" has a network of its own: only `lo` and its end of the veth
#   pair, with an address from 10.231.X.0/30 that the host does not use. So
#   MPI between the nodes can only go over the link (TCP), and nothing the
#   tests send leaves the two namespaces. The daemons use Slurm's standard
#   ports inside the namespaces: a fresh namespace has nothing bound.
# - Each daemon also gets its own UTS namespace with the node's host name
#   (unshare --uts), so gethostname() on a rank names its node, as on a real
#   cluster, and a private mount namespace in which DIR/hosts covers
#   /etc/hosts, so both nodes resolve node-a and node-b.
# - The file system and the PID space are shared, so run directories and the
#   MNIST sample need no copying, and the test can find and stop every process.
#   Except /tmp and /dev/shm: each node has its own, as real nodes do (a
#   fresh tmpfs on /dev/shm, so Open MPI's shared-memory files of two test
#   clusters on one host, whose nodes and job ids have the same names, never
#   meet), and /tmp is DIR/tmp-node-X: Slurm's PMIx plugin makes
#   /tmp/spmix_appdir_<uid>_<job>.<step> on every node, which would collide
#   on a shared /tmp. What the cluster shares must
#   still be seen by every node wherever it lies, since users clone under
#   /tmp: the top-level /tmp entries that hold the checkout, DIR and the
#   paths in CLUSTER_SHARED (space-separated) are bind-mounted from the
#   host's /tmp into each node's own (cluster_shared_tmp_names). Only a
#   checkout or DIR that is /tmp itself cannot be shared, and
#   cluster_check_available says so.
# - Delay: `tc qdisc … netem` where the kernel has it; otherwise the sender's
#   packets for its peer are routed into a TUN device and tests/cluster/linkdelay
#   (built on first use) hands them to the peer's namespace DELAY later:
#   the same one-way delay netem gives.
# - munged listens on a Unix socket only (under DIR), which both namespaces reach.

CLUSTER_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../slurm/local-slurm.bash
source "$CLUSTER_HERE/../slurm/local-slurm.bash"

CLUSTER_DIR=""
CLUSTER_NS_A="" CLUSTER_NS_B=""
CLUSTER_JOBS=()
CLUSTER_IF=hpcnet0
CLUSTER_TUN=hpcdly0

cluster_check_available() {
  local why
  why=$(slurm_check_available) || { echo "$why"; return 1; }
  local b
  for b in ip unshare; do
    command -v "$b" >/dev/null 2>&1 || { echo "$b not found (iproute2, util-linux)"; return 1; }
  done
  local probe="hpct-probe-$$"
  ip netns add "$probe" 2>/dev/null ||
    { echo "cannot create network namespaces here (ip netns add needs CAP_SYS_ADMIN and CAP_NET_ADMIN)"; return 1; }
  if ! ip link add "hpcp$$a" netns "$probe" type veth peer name "hpcp$$b" netns "$probe" 2>/dev/null; then
    ip netns del "$probe"
    echo "cannot create a veth pair in a network namespace (no veth support in this kernel?)"
    return 1
  fi
  ip netns del "$probe"
  unshare --uts true 2>/dev/null || { echo "cannot create a UTS namespace (unshare --uts)"; return 1; }
  [ "$(realpath -m "$CLUSTER_HERE/../..")" != /tmp ] ||
    { echo "the checkout is /tmp itself, which each test node replaces with its own /tmp: clone into a folder"; return 1; }
  return 0
}

on_node() {  # on_node a|b CMD…
  local ns=$CLUSTER_NS_A node=node-a
  [ "$1" = b ] && ns=$CLUSTER_NS_B node=node-b
  shift
  # nsenter, not `ip netns exec`: that remounts /sys, hiding the cgroup file
  # system slurmd looks for. A private mount namespace carries the hosts file,
  # the node's own /tmp and its own /dev/shm.
  # The host's /tmp is bound into the node's /tmp first (.host-tmp), so that
  # the shared entries can be bound back to their own paths once the node's
  # /tmp covers the host's; then .host-tmp is detached again.
  local tmp=$CLUSTER_DIR/tmp-$node
  mkdir -p "$tmp/.host-tmp"
  nsenter --net="/run/netns/$ns" unshare --uts --mount /bin/sh -c '
    node=$1 hosts=$2 tmp=$3 shared=$4
    shift 4
    mount --bind "$hosts" /etc/hosts && mount --bind /tmp "$tmp/.host-tmp" && mount --rbind "$tmp" /tmp || exit 1
    mount -t tmpfs -o mode=1777 "shm-$node" /dev/shm || exit 1
    for name in $shared; do
      mkdir -p "/tmp/$name" && mount --bind "/tmp/.host-tmp/$name" "/tmp/$name" || exit 1
    done
    umount -l /tmp/.host-tmp && hostname "$node" && exec "$@"' \
    sh "$node" "$CLUSTER_DIR/hosts" "$tmp" "$(cluster_shared_tmp_names)" "$@"
}

# The top-level names in /tmp under which the checkout, the cluster's DIR and
# CLUSTER_SHARED lie (one per line; none when nothing is under /tmp).
cluster_shared_tmp_names() {
  local p rel
  for p in "$CLUSTER_HERE/../.." ${CLUSTER_DIR:+"$CLUSTER_DIR"} ${CLUSTER_SHARED:-}; do
    p=$(realpath -m "$p")
    case "$p/" in
      /tmp/?*) rel=${p#/tmp/} && echo "${rel%%/*}" ;;
    esac
  done | sort -u
}

# The Slurm clients talk to slurmctld in node-a's namespace: the host has no route to it.
sbatch() { nsenter --net="/run/netns/$CLUSTER_NS_A" sbatch "$@"; }
srun() { nsenter --net="/run/netns/$CLUSTER_NS_A" srun "$@"; }
scontrol() { nsenter --net="/run/netns/$CLUSTER_NS_A" scontrol "$@"; }
squeue() { nsenter --net="/run/netns/$CLUSTER_NS_A" squeue "$@"; }
scancel() { nsenter --net="/run/netns/$CLUSTER_NS_A" scancel "$@"; }
sinfo() { nsenter --net="/run/netns/$CLUSTER_NS_A" sinfo "$@"; }

# A /30 in 10.231.0.0/16 that no host interface or route uses.
cluster_pick_subnet() {
  local x used
  used=$(ip -4 addr show; ip -4 route show table all 2>/dev/null)
  for _ in $(seq 1 50); do
    x=$((RANDOM % 64 * 4))
    local third=$((RANDOM % 256))
    grep -q "10\.231\.$third\." <<<"$used" && continue
    echo "10.231.$third.$x"
    return 0
  done
  return 1
}

cluster_start() {
  CLUSTER_DIR=$1
  local d=$CLUSTER_DIR id=$$ base mem
  [ "$(realpath -m "$d")" != /tmp ] ||
    { echo "cluster_start: $d is /tmp itself, which each node replaces with its own" >&2; return 1; }
  mkdir -p "$d/state" "$d/munge"
  chmod 700 "$d/munge"
  CLUSTER_NS_A="hpct-$id-a" CLUSTER_NS_B="hpct-$id-b"
  base=$(cluster_pick_subnet) || { echo "no free 10.231.x.y/30 subnet" >&2; return 1; }
  local prefix=${base%.*} last=${base##*.}
  export CLUSTER_ADDR_A=$prefix.$((last + 1)) CLUSTER_ADDR_B=$prefix.$((last + 2))
  export CLUSTER_SUBNET=$base/30 CLUSTER_IF
  # Written before anything is made, so that `stop DIR` can undo a partial start.
  cat >"$d/cluster.env" <<ENV
CLUSTER_NS_A=$CLUSTER_NS_A
CLUSTER_NS_B=$CLUSTER_NS_B
CLUSTER_ADDR_A=$CLUSTER_ADDR_A
CLUSTER_ADDR_B=$CLUSTER_ADDR_B
CLUSTER_SUBNET=$CLUSTER_SUBNET
ENV

  ip netns add "$CLUSTER_NS_A" && ip netns add "$CLUSTER_NS_B" || return 1
  # Made in the host namespace under unique names, then moved and renamed, so
  # both ends are called $CLUSTER_IF (one OMPI_MCA_btl_tcp_if_include for all nodes).
  ip link add "hpct${id}a" type veth peer name "hpct${id}b" || return 1
  ip link set "hpct${id}a" netns "$CLUSTER_NS_A" && ip link set "hpct${id}b" netns "$CLUSTER_NS_B" || return 1
  local ns addr node
  for node in a b; do
    ns=$CLUSTER_NS_A addr=$CLUSTER_ADDR_A
    [ $node = b ] && ns=$CLUSTER_NS_B addr=$CLUSTER_ADDR_B
    ip -n "$ns" link set "hpct${id}$node" name "$CLUSTER_IF" &&
      ip -n "$ns" link set "$CLUSTER_IF" mtu 9000 &&
      ip -n "$ns" addr add "$addr/30" dev "$CLUSTER_IF" &&
      ip -n "$ns" link set "$CLUSTER_IF" up && ip -n "$ns" link set lo up || return 1
  done
  printf '127.0.0.1 localhost\n%s node-a\n%s node-b\n' "$CLUSTER_ADDR_A" "$CLUSTER_ADDR_B" >"$d/hosts"

  dd if=/dev/urandom of="$d/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$d/munge/munge.key"
  munged --socket="$d/munge/munge.sock" --key-file="$d/munge/munge.key" --pid-file="$d/munge/munged.pid" \
    --log-file="$d/munge/munged.log" --seed-file="$d/munge/munged.seed" --force ||
    { cat "$d/munge/munged.log" 2>/dev/null; return 1; }

  # Each node gets 40% of the memory: both slurmds see the same machine.
  mem=$(awk '/MemTotal/ {print int($2 / 1024 * 0.4)}' /proc/meminfo)
  cat >"$d/slurm.conf" <<CONF
ClusterName=hpcnet
SlurmctldHost=node-a($CLUSTER_ADDR_A)
SlurmctldPort=6817
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/munge/munge.sock
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool-%n
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd-%n.pid
SlurmctldLogFile=$d/slurmctld.log
SlurmdLogFile=$d/slurmd-%n.log
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
SchedulerParameters=sched_interval=2,bf_interval=2
KillWait=10
MinJobAge=600
# A node whose slurmd is gone is DOWN after 20 s (default 300), and its job ends.
SlurmdTimeout=20
NodeName=node-a NodeHostname=node-a NodeAddr=$CLUSTER_ADDR_A CPUs=$(nproc) RealMemory=$mem State=UNKNOWN
NodeName=node-b NodeHostname=node-b NodeAddr=$CLUSTER_ADDR_B CPUs=$(nproc) RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=node-a,node-b Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
  export SLURM_CONF=$d/slurm.conf
  echo "SLURM_CONF=$SLURM_CONF" >>"$d/cluster.env"
  mkdir -p "$d/spool-node-a" "$d/spool-node-b"
  on_node a slurmctld -f "$SLURM_CONF" || { cat "$d/slurmctld.log" 2>/dev/null; return 1; }
  on_node a slurmd -f "$SLURM_CONF" -N node-a || { cat "$d/slurmd-node-a.log" 2>/dev/null; return 1; }
  on_node b slurmd -f "$SLURM_CONF" -N node-b || { cat "$d/slurmd-node-b.log" 2>/dev/null; return 1; }
  for _ in $(seq 1 60); do
    [ "$(sinfo -h -o %t 2>/dev/null)" = idle ] && [ "$(sinfo -h -o %D 2>/dev/null)" = 2 ] && return 0
    sleep 0.5
  done
  echo "the test cluster's nodes did not become idle in 30 s:" >&2
  sinfo -N -l >&2 || true
  tail -5 "$d/slurmctld.log" "$d"/slurmd-node-*.log >&2 || true
  return 1
}

# cluster_delay a|b MS: every packet node a (or b) sends to the other arrives MS ms later.
cluster_delay() {
  local node=$1 ms=$2 ns=$CLUSTER_NS_A peer_ns=$CLUSTER_NS_B peer_addr=$CLUSTER_ADDR_B src=$CLUSTER_ADDR_A
  [ "$node" = b ] && ns=$CLUSTER_NS_B peer_ns=$CLUSTER_NS_A peer_addr=$CLUSTER_ADDR_A src=$CLUSTER_ADDR_B
  local d=$CLUSTER_DIR
  # Undo any earlier delay of this node first.
  ip netns exec "$ns" tc qdisc del dev "$CLUSTER_IF" root 2>/dev/null || true
  ip -n "$ns" route del "$peer_addr/32" 2>/dev/null || true
  slurm_kill_pidfile "$d/linkdelay-$node.pid"
  [ "$ms" = 0 ] && return 0
  if ip netns exec "$ns" tc qdisc add dev "$CLUSTER_IF" root netem delay "${ms}ms" 2>/dev/null; then
    echo "cluster: node-$node's packets delayed by $ms ms (netem)"
    return 0
  fi
  local bin=$d/linkdelay
  [ -x "$bin" ] || g++ -O2 -std=c++20 -o "$bin" "$CLUSTER_HERE/linkdelay.cpp" || return 1
  local n
  for n in "$ns" "$peer_ns"; do
    ip -n "$n" link show "$CLUSTER_TUN" >/dev/null 2>&1 ||
      ip netns exec "$n" ip tuntap add dev "$CLUSTER_TUN" mode tun || return 1
    ip -n "$n" link set "$CLUSTER_TUN" mtu 9000 up || return 1
    # The peer receives the sender's address on the TUN device, whose route back is the veth.
    ip netns exec "$n" sysctl -qw net.ipv4.conf.all.rp_filter=0 "net.ipv4.conf.$CLUSTER_TUN.rp_filter=0"
  done
  # Started from a subshell, so it is no child of the caller's `wait`.
  ("$bin" "$ns" "$CLUSTER_TUN" "$peer_ns" "$CLUSTER_TUN" $((ms * 1000)) </dev/null >/dev/null 2>>"$d/linkdelay-$node.log" &
    echo $! >"$d/linkdelay-$node.pid")
  sleep 0.2
  kill -0 "$(cat "$d/linkdelay-$node.pid")" 2>/dev/null || { cat "$d/linkdelay-$node.log" >&2; return 1; }
  ip -n "$ns" route add "$peer_addr/32" dev "$CLUSTER_TUN" src "$src" || return 1
  echo "cluster: node-$node's packets delayed by $ms ms (no netem in this kernel: TUN + linkdelay)"
}

# cluster_crash_node a|b: the node loses power: SIGKILL to everything in its
# namespace (slurmd, slurmstepd, the job's ranks), by PID.
cluster_crash_node() {
  local ns=$CLUSTER_NS_A pid
  [ "$1" = b ] && ns=$CLUSTER_NS_B
  for pid in $(ip netns pids "$ns"); do kill -9 "$pid" 2>/dev/null || true; done
}

# cluster_boot_node a|b: the node comes back: an empty /tmp and no stale PMIx
# sockets in its spool (a requeued job reuses its id, and with it their
# names), then slurmd; waits until Slurm sees the node again.
cluster_boot_node() {
  local node=node-$1 d=$CLUSTER_DIR
  rm -rf "${d:?}/tmp-$node" "$d/spool-$node"/*pmix*
  on_node "$1" slurmd -f "$SLURM_CONF" -N "$node" || { tail -5 "$d/slurmd-$node.log" >&2; return 1; }
  for _ in $(seq 1 60); do
    case "$(sinfo -h -n "$node" -o %t 2>/dev/null)" in idle | alloc | mix) return 0 ;; esac
    sleep 0.5
  done
  echo "$node did not come back in 30 s" >&2
  return 1
}

cluster_stop() {
  [ -n "$CLUSTER_DIR" ] && [ -f "$CLUSTER_DIR/cluster.env" ] || return 0
  local d=$CLUSTER_DIR job ns pid
  if [ -f "$d/slurmctld.pid" ] && kill -0 "$(cat "$d/slurmctld.pid")" 2>/dev/null; then
    for job in "${CLUSTER_JOBS[@]}"; do scancel "$job" 2>/dev/null || true; done
    for _ in $(seq 1 20); do
      [ -z "$(squeue -h -t running,completing 2>/dev/null)" ] && break
      sleep 0.5
    done
  fi
  slurm_kill_pidfile "$d/linkdelay-a.pid"
  slurm_kill_pidfile "$d/linkdelay-b.pid"
  slurm_kill_pidfile "$d/slurmd-node-a.pid"
  slurm_kill_pidfile "$d/slurmd-node-b.pid"
  slurm_kill_pidfile "$d/slurmctld.pid"
  slurm_kill_pidfile "$d/munge/munged.pid"
  # Whatever still runs in the namespaces was started by this cluster (a
  # slurmstepd or a rank of a node whose slurmd was killed): stop it by PID.
  for ns in "$CLUSTER_NS_A" "$CLUSTER_NS_B"; do
    [ -n "$ns" ] && [ -e "/run/netns/$ns" ] || continue
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  CLUSTER_DIR=""
}

# Entry points when run rather than sourced.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  case "${1:-}" in
    start)
      [ -n "${2:-}" ] || { echo "usage: $0 start DIR" >&2; exit 2; }
      why=$(cluster_check_available) || { echo "cannot build the test cluster: $why" >&2; exit 1; }
      mkdir -p "$2"
      dir=$(cd "$2" && pwd)
      cluster_start "$dir" || { cluster_stop; exit 1; }
      echo "test cluster up: $(sinfo -h -o '%P %D %t %N')"
      echo "  nsenter --net=/run/netns/$CLUSTER_NS_A env SLURM_CONF=$SLURM_CONF sbatch …   (clients run in node-a's namespace)"
      echo "  MPI over the link: OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=$CLUSTER_IF"
      echo "  stop it: $0 stop $dir"
      ;;
    stop)
      [ -f "${2:-}/cluster.env" ] || { echo "usage: $0 stop DIR (a directory given to start)" >&2; exit 2; }
      CLUSTER_DIR=$(cd "$2" && pwd)
      # shellcheck disable=SC1091
      source "$CLUSTER_DIR/cluster.env"
      export SLURM_CONF
      cluster_stop
      echo "test cluster stopped"
      ;;
    *)
      echo "usage: $0 start DIR | stop DIR" >&2
      exit 2
      ;;
  esac
fi
