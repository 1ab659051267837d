#!/usr/bin/env bash
# A real Slurm test cluster on one machine (the stack's Slurm: 22.05 on Debian 12, 24.11 on Debian 13): munged,
# slurmctld and N slurmd, each slurmd in its own network, UTS and mount namespace so that every node looks like a
# separate host. Needs root.
#
#   cluster.sh up [--nodes N] [--plugin /path/ddp.so] [--plugstack-args "k=v ..."] [--plugstack FILE]
#                                        clear leftovers, start, wait until every node is idle; waits first
#                                        while another running ctest owns the cluster (DDP_CLUSTER_WAIT s).
#                                        --plugstack: Slurm's PlugStackConfig is FILE, as it is (an installer's,
#                                        e.g. /opt/slurm/etc/plugstack.conf), not $DIR/etc/plugstack.conf
#   cluster.sh down [--force]            stop everything, remove every trace (also when nothing is up); a
#                                        cluster another running ctest brought up is left alone unless --force
#   cluster.sh env                       `export VAR=value` lines for tests: eval "$(cluster.sh env)"
#   cluster.sh exec [--root] [--cwd DIR] CMD...
#                                        CMD (srun, sbatch, squeue, scontrol...) against the cluster, as
#                                        $DDP_CLUSTER_USER unless --root, clean environment, cwd the shared dir
#   cluster.sh node NODE [--user] CMD... CMD inside NODE's namespaces, as root unless --user
#   cluster.sh plugstack [LINE...]       rewrite the plugstack file (no LINE: empty); read again at every step
#   cluster.sh logs [LINES]              tail of every daemon log
#   cluster.sh status                    sinfo of the cluster
#   cluster.sh pgrep PGREP_ARGS...       pgrep over the processes of this machine's own pid namespace: a stack's
#                                        suite in a root (tests/stacks/root.sh, a pid namespace of its own) runs
#                                        a cluster of the same names, user and paths at the same time, and the
#                                        host sees its processes too
#
# Layout (state directory $DDP_CLUSTER_DIR, default /tmp/ddp-cluster, one cluster per machine):
#   node1..nodeN   hostnames (UTS namespaces); /etc/hosts lines tagged "# ddp-test-cluster" make them
#                  resolve on the host and on every node (all share /etc/hosts).
#   eth0           10.77.0.K/24 on node K, bridge ddpbr0; the host (slurmctld, srun) is 10.77.0.254, ddp-head.
#                  Node names resolve to these addresses, so MASTER_ADDR=node1 is reached through eth0.
#   eth1           10.78.0.K/24 on node K, bridge ddpbr1, which the host has no address on: a second NIC
#                  that reaches the other nodes' eth1 addresses, while node names resolve to eth0 addresses
#                  (NIC selection tests: the interface that reaches MASTER_ADDR is eth0).
#                  Host-side veth ends are ddpvKe0 / ddpvKe1; network namespaces ddp-nodeK (`ip netns`).
#   $DIR/shared    one directory seen by every node and the host (mode 1777); the job user's DDP_LOG_DIR (failed
#                  steps' error reports) is its ddp-logs, gone with the cluster, not in the user's home.
#   $DIR/local     node-private: a tmpfs mounted at this same path in each node's mount namespace; its file
#                  .node names the node. On the host the path is an empty directory of its own.
#   $DIR/oci/rootfs  a container image of this stack's own root, for the container tests (ch-run IMAGE), and the
#                  root file system of an OCI bundle, $DIR/oci, for srun --container (the tests write its
#                  config.json; Slurm 22.05 takes BUNDLE/rootfs whatever config.json says, and runc 1.1.5 refuses a
#                  symbolic link there): /usr bound read-only from the root, a copy of /etc, the merged-/usr links
#                  and empty mount points. Bound before the nodes start, so that every node's mount namespace has
#                  it; it goes with the cluster (`env` gives DDP_CLUSTER_IMAGE and DDP_CLUSTER_BUNDLE).
#   $DIR/etc       slurm.conf, mpi.conf, plugstack.conf (`up --plugin P` writes "required P ARGS"; P is a
#                  copy under $DIR/etc when the job user cannot read P; `env` gives it as DDP_CLUSTER_PLUGIN);
#                  gres.conf and gpu0, gpu1: every node has 2 GPUs as Slurm sees them, device files without a
#                  GPU behind them (jobs request GPUs as users do; hwloc sees none, so tasks train on CPUs).
#   $DIR/log       slurmctld.log, slurmd-nodeK.log, munged.log, jobcomp.log (one line per finished job).
#   slurm.conf     DDP_CLUSTER_SLURM_CONF_EXTRA: lines `up` adds to slurm.conf (one per line).
#   Tracing        DDP_CLUSTER_TRACE=1 traces every command with a timestamp; DDP_CLUSTER_KEEP_ON_FAILURE=1
#                  leaves a failed bring-up in place for inspection.
#   Ports          slurmctld 16817, slurmd 16818 (not Slurm's 6817/6818), MpiParams ports 12000-12999 (below
#                  the kernel's ephemeral range).
#   User           jobs run as $DDP_CLUSTER_USER (default ddpuser, created if missing).
#   Slurm          the one on PATH, or DDP_CLUSTER_SLURM_PREFIX's (bin/ and sbin/ first on every PATH here: a Slurm
#                  built from source, e.g. /opt/slurm as ParallelCluster builds it).
#   munge          one munged for the host and every node, sharing the socket; with Slurm 25.x (or
#                  DDP_CLUSTER_MUNGE_PER_NODE=1) each node runs its own, with the same key, its socket bound over
#                  the shared one's path in the node's mount namespace: 25.11's slurmd refuses a forwarded launch's
#                  credential that another node's slurmd decoded at the same munged ("Replayed credential"; srun:
#                  "Header lengths are longer than data received") for every multi-node step. 22.05, 24.11 and
#                  26.05 decode it once and work with one munged.
#
# Observed on Debian's Slurm 22.05.8 here (checked, not assumed):
# - srun runs from the host's own namespace: slurmd logs the launch as coming from 10.77.0.254 (the route to the
#   node goes over ddpbr0) and slurmstepd connects back there. No login namespace is needed; `cluster.sh exec`
#   runs clients on the host as the job user with a clean environment (PATH without pyenv, so `python3` is
#   Debian's /usr/bin/python3 with torch) in the shared directory.
# - With MpiParams=ports, a plain srun step gets SLURM_STEP_RESV_PORTS: (most tasks on one node + 1) ports, e.g.
#   12001-12003 for -N2 --ntasks-per-node=2, the same range on every node; concurrent steps get disjoint ranges.
#   `srun --resv-ports` WITHOUT a count reserves none (the variable is unset); `--resv-ports=N` reserves N.
#   The batch step has none.
# - `srun --mpi=pmix` (Debian's OpenMPI 4.1, PMIx 4) works across the nodes. Without a node-private client
#   directory it fails at launch: slurmstepd on the second node logs `Cannot create client cli tmpdir:
#   "/tmp/spmix_appdir_<uid>_<job>.<step>": File exists` (the default base is TmpFS, and /tmp is shared). Both
#   TmpFS and mpi.conf's PMIxCliTmpDirBase point at the node-private directory here.
# - `sbatch --wait` polls slowly (10 s for a 1 s job); lib.sh's wait_job polls every 0.2 s.
# - `-N2 -n4` places 3+1 tasks (block over 4 claimed CPUs per node): ask for --ntasks-per-node=2.
# - munged logs "Unauthorized credential for client UID=0" and "Replayed credential" at each step; harmless.
# - Bring-up, both versions: slurmctld logs "error: Configured MailProg is invalid" and missing state files at
#   every first start; harmless, and not a reason to stop (the daemon's exit is). Telling a daemon's death from
#   a process list raced with its daemonizing (a healthy slurmctld was reported dead on a busy machine), hence the
#   foreground daemons of start_daemon.
# - Slurm 24.11: a batch job whose SPANK user_init fails drains the node and is requeued onto the next node (which
#   drains too); tests submit such jobs with --no-requeue.
set -Eeuo pipefail
# DDP_CLUSTER_TRACE=1: every command with a timestamp, to see where a slow or failing bring-up spends its time.
if [ -n "${DDP_CLUSTER_TRACE:-}" ]; then PS4='+ ${EPOCHREALTIME} ${FUNCNAME[0]:-main}: '; set -x; fi
# A command failing under set -e would otherwise end the script without a word (a function's `return 1` has
# said why itself, e.g. wait_for's time-out).
trap 'case $BASH_COMMAND in return*) ;; *) say "error: line $LINENO: \"$BASH_COMMAND\" failed (exit $?)" ;; esac' ERR

readonly DIR=${DDP_CLUSTER_DIR:-/tmp/ddp-cluster}
readonly CLUSTER_USER=${DDP_CLUSTER_USER:-ddpuser}
readonly NET0=${DDP_CLUSTER_NET0:-10.77.0}   # first three octets of the /24 of eth0
readonly NET1=${DDP_CLUSTER_NET1:-10.78.0}   # and of eth1
readonly HOST_OCTET=254
readonly CTLD_PORT=16817 SLURMD_PORT=16818 RESV_PORTS=12000-12999
readonly FAKE_GPUS=2  # per node, as Slurm sees them (write_fake_gpus)
readonly MARKER="# ddp-test-cluster"
readonly NETNS_PREFIX=ddp-node BRIDGE0=ddpbr0 BRIDGE1=ddpbr1
readonly CONF=$DIR/etc/slurm.conf SHARED=$DIR/shared LOCAL=$DIR/local NSDIR=$DIR/ns LOG=$DIR/log
readonly LOCK=/run/ddp-test-cluster.lock
readonly SLURM_PREFIX=${DDP_CLUSTER_SLURM_PREFIX:-}
readonly SAFE_PATH=${SLURM_PREFIX:+$SLURM_PREFIX/bin:$SLURM_PREFIX/sbin:}/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin

say() { echo "cluster.sh: $*" >&2; }
elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.1f", b - a}'; }
die() { say "error: $*"; exit 1; }

need_root() {
  if [ "$(id -u)" -ne 0 ]; then
    say "skipped: needs root (network namespaces, slurmd); run as root or with sudo"
    exit 77
  fi
}

need_tools() {
  local t missing=()
  for t in slurmctld slurmd srun sinfo scontrol munged ip nsenter unshare setpriv flock findmnt useradd; do
    command -v "$t" >/dev/null || missing+=("$t")
  done
  [ ${#missing[@]} -eq 0 ] || die "missing ${missing[*]}: install slurmctld slurmd slurm-client munge iproute2 util-linux (./run.sh setup)"
}

# The state directory and every directory above it are root's: slurmctld and slurmd run as root on what is there
# (slurm.conf, plugstack.conf, the plugin's copy), and /tmp is everyone's. One that another user made first, a link,
# or a path through a directory others may change (no sticky bit) is refused, and nothing is done there.
check_dir_is_safe() {
  local prefix="" part owner mode type parts
  IFS=/ read -ra parts <<<"${DIR#/}"
  for part in "${parts[@]}"; do
    prefix+="/$part"
    [ -e "$prefix" ] || [ -L "$prefix" ] || break
    read -r owner mode type < <(stat -c '%u %a %F' "$prefix")  # without -L: a link is one
    [ "$type" = directory ] || die "$prefix is a $type, not a directory; remove it or set DDP_CLUSTER_DIR elsewhere"
    [ "$owner" = 0 ] ||
      die "$prefix is owned by uid $owner, not root: that user could change what the root-run test Slurm reads; remove it or set DDP_CLUSTER_DIR elsewhere"
    if [ $((8#$mode & 8#022)) != 0 ] && { [ "$prefix" = "$DIR" ] || [ $((8#$mode & 8#1000)) = 0 ]; }; then
      die "$prefix may be written by others (mode $mode): they could change what the root-run test Slurm reads; set DDP_CLUSTER_DIR elsewhere"
    fi
  done
}

# Deleting the state directory recursively is only safe when it is ours.
check_dir_is_ours() {
  case $DIR in
    /*/*) ;;
    *) die "DDP_CLUSTER_DIR=$DIR must be an absolute path below a top-level directory, e.g. /tmp/ddp-cluster" ;;
  esac
  check_dir_is_safe
  if [ -e "$DIR" ] && [ ! -e "$DIR/.ddp-test-cluster" ] && [ -n "$(ls -A "$DIR" 2>/dev/null)" ]; then
    die "$DIR exists and is not a test cluster's state directory; remove it or set DDP_CLUSTER_DIR elsewhere"
  fi
}

# Daemons run in their foreground mode as background children of this script, in a session of their own, so that
# while it waits for them it knows at once when one dies, and why (its exit status or signal): no guessing from
# process lists or log lines. NAME.pid and NAME.out (stdout and stderr, which hold what a daemon says before its
# log file is open) are in $DIR/run and $LOG. They must not inherit the lock's descriptor, or they hold the lock
# for their whole life.
start_daemon() {  # NAME CMD...
  local name=$1
  shift
  setsid "$@" 9>&- </dev/null >>"$LOG/$name.out" 2>&1 &
  echo $! >"$DIR/run/$name.pid"
}

daemon_pid() { cat "$DIR/run/$1.pid" 2>/dev/null || true; }

# Running: not gone and not a zombie (a dead child stays one until this script waits for it).
daemon_alive() {
  local pid
  pid=$(daemon_pid "$1")
  [ -n "$pid" ] && [ -e "/proc/$pid" ] && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]
}

# A daemon that died ends the bring-up with how it ended, from this script's own wait for its child ("exited with
# status N" or "was killed by SIGNAL"), and the last lines it wrote. Runs in this shell, never in a subshell:
# only the parent can wait.
die_if_dead() {  # NAME LOGFILE
  daemon_alive "$1" && return 0
  local pid rc=0 how
  pid=$(daemon_pid "$1")
  wait "$pid" 2>/dev/null || rc=$?
  if [ "$rc" -gt 128 ]; then how="was killed by SIG$(kill -l "$((rc - 128))" 2>/dev/null || echo "$((rc - 128))")"
  else how="exited with status $rc"; fi
  say "error: $1 (pid $pid) $how; its last lines:"
  tail -n 8 "$2" "$LOG/$1.out" 2>/dev/null | sed 's/^/  /' >&2
  exit 1
}

lock() {
  exec 9>"$LOCK"
  flock -w 120 9 || die "another cluster.sh holds $LOCK for over 120 s; is a test run still going?"
}

# Several people may run ctest on one machine, and there is one cluster per machine. The ctest run whose fixture
# brought the cluster up owns it (its pid in $DIR/owner); another ctest waits for it instead of tearing it down
# under its tests. A person's shell never owns it, and a dead owner's cluster is a leftover, cleared as usual.
owner_pid() { cat "$DIR/owner" 2>/dev/null || true; }

owned_by_other_ctest() {
  local pid
  pid=$(owner_pid)
  [ -n "$pid" ] && [ "$pid" != "$PPID" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = ctest ]
}

owner_gone() { ! owned_by_other_ctest; }

# Takes the lock once no other ctest run owns the cluster.
lock_unowned() {
  local limit=${DDP_CLUSTER_WAIT:-900}
  while :; do
    if owned_by_other_ctest; then
      say "the cluster is in use by ctest pid $(owner_pid) ($(tr '\0' ' ' </proc/"$(owner_pid)"/cmdline 2>/dev/null)); waiting up to $limit s (DDP_CLUSTER_WAIT)"
      wait_for "$limit" "ctest pid $(owner_pid) to finish with the cluster" owner_gone
    fi
    lock
    owned_by_other_ctest || return 0
    flock -u 9
  done
}

record_owner() {
  [ "$(cat "/proc/$PPID/comm" 2>/dev/null)" != ctest ] || echo "$PPID" >"$DIR/owner"
}

# ---------------------------------------------------------------------------------------------------- teardown

ns_names() { ip netns list 2>/dev/null | awk -v p="^${NETNS_PREFIX}[0-9]+\$" '$1 ~ p {print $1}'; }

own_pgrep() { pgrep --ns $$ --nslist pid "$@"; }

# pgrep warns about, though it matches, an alternation longer than 15 characters: one name at a time.
pids_named() {
  local n
  for n in "$@"; do own_pgrep -x "$n" || true; done
}

# Host-side clients (srun waiting for a dead step, sbatch --wait) of this cluster, found by their SLURM_CONF. Each
# environment is read whole before it is searched: in `tr | grep -q` under pipefail, grep's early exit can fail tr.
host_clients() {
  local pid environ
  for pid in $(pids_named srun sbatch salloc sattach); do
    environ=$(tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ") || continue
    grep -qFx "SLURM_CONF=$CONF" <<<"$environ" && echo "$pid"
  done
  true
}

# Daemons on the host: by pid file, and by a command line naming our state directory (a pid file may be gone).
host_daemons() {
  local f pid cmdline
  for f in slurmctld:"$DIR/run/slurmctld.pid" munged:"$DIR/run/munged.pid"; do
    # A stale pid file may name a recycled pid: only take it if the process has the daemon's name.
    pid=$(cat "${f#*:}" 2>/dev/null) || continue
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "${f%%:*}" ] && echo "$pid"
  done
  for pid in $(pids_named slurmctld munged slurmd); do
    cmdline=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || continue
    grep -qF "$DIR/" <<<"$cmdline" && echo "$pid"
  done
  true
}

# Everything in the node namespaces: slurmd, slurmstepd and every job process, whatever it forked into.
node_pids() {
  local ns
  for ns in $(ns_names); do ip netns pids "$ns" 2>/dev/null || true; done
}

# Zombies are left out: SIGKILL cannot end them, only their parent's wait (see wait_reaped).
our_pids() {
  local pid
  for pid in $( { node_pids; host_clients; host_daemons; } | sort -u); do
    [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = Z ] || echo "$pid"
  done | tr '\n' ' '
}

# SIGKILL at once: nothing of a test cluster is worth a graceful stop, and slurmstepd ignores SIGTERM.
# Loop, because a slurmd or slurmstepd may fork between our scan and our kill.
kill_all() {
  local pids killed="" i
  for i in $(seq 20); do
    pids=$(our_pids)
    [ -n "${pids// }" ] || break
    killed+=" $pids"
    # shellcheck disable=SC2086  # word splitting of the pid list is wanted
    kill -KILL $pids 2>/dev/null || true  # some may have exited since the scan
    sleep 0.1
  done
  [ -z "${pids// }" ] || say "warning: processes survived SIGKILL: $pids"
  wait_reaped "$killed"
}

# A killed slurmstepd is reparented to PID 1 and stays a zombie (visible to pgrep) until PID 1 reaps it.
wait_reaped() {
  local pid left i
  for i in $(seq 100); do
    left=""
    for pid in $1; do [ -e "/proc/$pid" ] && left+=" $pid"; done
    [ -n "$left" ] || return 0
    sleep 0.1
  done
  say "warning: processes not reaped by PID 1:$left"
}

remove_network() {
  local ns link
  for ns in $(ns_names); do ip netns delete "$ns" 2>/dev/null || true; done
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{sub(/@.*/, "", $2); print $2}' |
                grep -E "^(ddpv[0-9]+e[01]|$BRIDGE0|$BRIDGE1)$" || true); do
    ip link delete "$link" 2>/dev/null || true
  done
}

remove_hosts_lines() {
  grep -qF "$MARKER" /etc/hosts || return 0
  local tmp
  tmp=$(mktemp)
  grep -vF "$MARKER" /etc/hosts >"$tmp" || true
  # Rewrite in place rather than rename: /etc/hosts may be a bind mount in containers.
  cat "$tmp" >/etc/hosts
  rm -f "$tmp"
}

# Mount points at or below $DIR, deepest first (a fixed-string match: $DIR may hold regex characters).
mounts_under_dir() {
  findmnt -rn -o TARGET | awk -v d="$DIR" '$0 == d || index($0, d "/") == 1' | sort -r
}

unmount_state() {
  local m
  for m in $(mounts_under_dir); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || say "warning: cannot unmount $m"
  done
  [ -z "$(mounts_under_dir)" ] || die "mounts remain under $DIR (see findmnt); not deleting it"
}

# The plugin's per-boot topology cache (its default topology_cache): written by the steps of this cluster.
remove_topology_cache() {
  rm -f /run/slurm-ddp/topology-*.xml /run/slurm-ddp/topology-*.xml.tmp.*
  rmdir /run/slurm-ddp 2>/dev/null || true
}

teardown() {
  kill_all
  remove_network
  remove_hosts_lines
  remove_topology_cache
  if [ -d "$DIR" ]; then
    unmount_state
    rm -rf "$DIR"
  fi
}

leftovers() {
  local left=""
  [ -z "$(ns_names)" ] || left+=" netns:$(ns_names | tr '\n' ' ')"
  ip link show "$BRIDGE0" >/dev/null 2>&1 && left+=" bridge:$BRIDGE0"
  ip link show "$BRIDGE1" >/dev/null 2>&1 && left+=" bridge:$BRIDGE1"
  grep -qF "$MARKER" /etc/hosts && left+=" /etc/hosts-lines"
  [ -e "$DIR" ] && left+=" dir:$DIR"
  [ -z "$(host_daemons)" ] || left+=" daemons:$(host_daemons | tr '\n' ' ')"
  echo "$left"
}

cmd_down() {
  need_root
  check_dir_is_ours
  local t0=$EPOCHREALTIME left
  if [ "${1:-}" != --force ] && owned_by_other_ctest; then
    say "left up: ctest pid $(owner_pid) is using it and its fixture will take it down; cluster.sh down --force takes it down now"
    return 0
  fi
  lock
  teardown
  left=$(leftovers)
  [ -z "$left" ] || die "teardown left:$left"
  say "down in $(elapsed "$t0") s"
}

# ---------------------------------------------------------------------------------------------------- bring-up

check_subnet_free() {
  local net=$1 clash
  [[ $net =~ ^([0-9]{1,3}\.){2}[0-9]{1,3}$ ]] ||
    die "subnet prefix '$net' (DDP_CLUSTER_NET0/NET1): give the first three octets of a /24, e.g. 10.77.0"
  clash=$(ip -4 route show match "$net.1" 2>/dev/null | grep -v '^default' || true)
  [ -z "$clash" ] || die "subnet $net.0/24 is already routed here ($clash); set DDP_CLUSTER_NET0/NET1 to free /24 prefixes, e.g. DDP_CLUSTER_NET0=10.177.0"
}

ensure_user() {
  id -u "$CLUSTER_USER" >/dev/null 2>&1 && return 0
  useradd --create-home --shell /bin/bash "$CLUSTER_USER" || die "cannot create user $CLUSTER_USER"
}

make_dirs() {
  # Made by root, 0755, from scratch (teardown removed a leftover): check_dir_is_safe holds from here on.
  mkdir -p "$(dirname "$DIR")"
  mkdir -m 0755 "$DIR"
  touch "$DIR/.ddp-test-cluster"
  mkdir -p "$DIR"/{etc,log,run,run/slurm,ctld,spool,munge,ns} "$SHARED" "$LOCAL"
  chmod 1777 "$SHARED" "$LOCAL"
  : >"$DIR/etc/plugstack.conf"
}

start_munge() {
  local m=$DIR/munge
  chown munge:munge "$m"
  chmod 0755 "$m"
  # A key of our own: the cluster then trusts nothing signed by the machine's munge.key, and needs none.
  if command -v mungekey >/dev/null; then
    mungekey --create --keyfile="$m/munge.key" 2>/dev/null
  else
    dd if=/dev/urandom of="$m/munge.key" bs=1024 count=1 status=none
  fi
  chown munge:munge "$m/munge.key"
  chmod 0400 "$m/munge.key"
  install -o munge -g munge -m 0640 /dev/null "$LOG/munged.log"
  start_daemon munged setpriv --reuid=munge --regid=munge --init-groups munged --foreground \
    --socket="$m/munge.socket" --key-file="$m/munge.key" --pid-file="$m/munged.pid" --seed-file="$m/munged.seed" \
    --log-file="$LOG/munged.log"
  wait_for 60 "munged" munge_ok
}

munge_ok() {
  die_if_dead munged "$LOG/munged.log"
  munge -n --socket="$DIR/munge/munge.socket" 2>/dev/null | unmunge --socket="$DIR/munge/munge.socket" >/dev/null 2>&1
}

# wait_for SECONDS WHAT CMD...: poll CMD every 0.1 s.
wait_for() {
  local limit=$1 what=$2 end
  shift 2
  end=$((SECONDS + limit))
  until "$@"; do
    [ "$SECONDS" -lt "$end" ] || { say "timed out after ${limit} s waiting for $what"; return 1; }
    sleep 0.1
  done
}

add_bridge() {  # NAME PREFIX HOST_ADDR(yes|no)
  ip link add "$1" type bridge
  [ "$3" = yes ] && ip addr add "$2.$HOST_OCTET/24" dev "$1"
  ip link set "$1" up
}

add_node_nic() {  # NODE_INDEX IFINDEX(0|1) BRIDGE PREFIX
  local k=$1 i=$2 host=ddpv$1e$2 ns=$NETNS_PREFIX$1
  ip link add "$host" type veth peer name "eth$i" netns "$ns"
  ip link set "$host" master "$3" up
  ip -n "$ns" addr add "$4.$k/24" dev "eth$i"
  ip -n "$ns" link set "eth$i" up
}

setup_network() {
  local k
  add_bridge "$BRIDGE0" "$NET0" yes
  add_bridge "$BRIDGE1" "$NET1" no
  for k in $(seq "$NODES"); do
    ip netns add "$NETNS_PREFIX$k"
    ip -n "$NETNS_PREFIX$k" link set lo up
    add_node_nic "$k" 0 "$BRIDGE0" "$NET0"
    add_node_nic "$k" 1 "$BRIDGE1" "$NET1"
  done
  add_static_neighbours
}

mac_of() { sed -n 's|.*link/ether \([0-9a-f:]*\).*|\1|p'; }  # of `ip -o link show` lines
node_mac() { ip -n "$NETNS_PREFIX$1" -o link show dev "$2" | mac_of; }

# Every address of the cluster is a permanent neighbour everywhere: no ARP. When every rank of a wide step connects
# to every other at once, ARP broadcasts flood the bridges, and under load some were dropped until a connection
# failed with "No route to host" (Gloo of Debian's PyTorch does not retry a failed connect).
add_static_neighbours() {
  local k j batch
  local -a mac0 mac1
  for k in $(seq "$NODES"); do
    mac0[k]=$(node_mac "$k" eth0)
    mac1[k]=$(node_mac "$k" eth1)
    ip neigh replace "$NET0.$k" lladdr "${mac0[k]}" dev "$BRIDGE0" nud permanent
  done
  for k in $(seq "$NODES"); do
    batch="neigh replace $NET0.$HOST_OCTET lladdr $(ip -o link show dev "$BRIDGE0" | mac_of) dev eth0 nud permanent"$'\n'
    for j in $(seq "$NODES"); do
      [ "$j" = "$k" ] && continue
      batch+="neigh replace $NET0.$j lladdr ${mac0[j]} dev eth0 nud permanent"$'\n'
      batch+="neigh replace $NET1.$j lladdr ${mac1[j]} dev eth1 nud permanent"$'\n'
    done
    ip -n "$NETNS_PREFIX$k" -batch - <<<"$batch"
  done
}

# A directory image is the cheapest: no copy of /usr (2 GB with torch), one bind mount, a few MB of /etc; made once
# per cluster, in well under a second, and shared by every container test. /etc is copied after add_hosts_lines,
# so that the node names resolve inside too.
make_image() {
  local img=$DIR/oci/rootfs link
  mkdir -p "$img"/{usr,dev,proc,sys,tmp,run,home,mnt,root,var/tmp}
  ln -s /run "$img/var/run"
  cp -a /etc "$img/etc"
  for link in bin lib lib32 lib64 libx32 sbin; do
    [ ! -L "/$link" ] || ln -s "$(readlink "/$link")" "$img/$link"
  done
  mount --bind /usr "$img/usr"
  mount -o remount,bind,ro "$img/usr"
}

add_hosts_lines() {
  local k
  {
    echo "$NET0.$HOST_OCTET ddp-head $MARKER"
    for k in $(seq "$NODES"); do echo "$NET0.$k node$k $MARKER"; done
  } >>/etc/hosts
}

# Each node gets a UTS namespace (its hostname), kept alive by binding it onto a file on a private mount, and a mount
# namespace (a tmpfs at $LOCAL), which its slurmd creates and holds (start_slurm): everything the node runs
# inherits it. (A mount namespace bound onto a file, `unshare --mount=FILE`, failed now and then with EINVAL here.)
setup_node_namespaces() {
  local k
  mount --bind "$NSDIR" "$NSDIR"
  mount --make-private "$NSDIR"
  for k in $(seq "$NODES"); do
    touch "$NSDIR/node$k.uts"
    unshare --uts="$NSDIR/node$k.uts" hostname "node$k"
  done
}

in_node() {  # NODE_INDEX CMD...: all of the node's namespaces (its slurmd's mount namespace)
  local k=$1 pid
  shift
  pid=$(daemon_pid "slurmd-node$k")
  if [ -z "$pid" ] || [ ! -e "/proc/$pid/ns/mnt" ]; then die "node$k has no running slurmd (see $LOG/slurmd-node$k.log)"; fi
  nsenter --net="/run/netns/$NETNS_PREFIX$k" --uts="$NSDIR/node$k.uts" --mount="/proc/$pid/ns/mnt" -- "$@"
}

write_slurm_conf() {
  local k host
  host=$(hostname)
  cat >"$CONF" <<EOF
# Written by tests/cluster/cluster.sh; removed by \`cluster.sh down\`.
ClusterName=ddptest
SlurmctldHost=$host($NET0.$HOST_OCTET)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# cred_expire is also how long a requeued job waits before it may start again (default 120 s).
AuthInfo=socket=$DIR/munge/munge.socket,cred_expire=10
CredType=cred/munge
StateSaveLocation=$DIR/ctld
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurm/slurmctld.pid
SlurmdPidFile=$DIR/run/slurm/slurmd-%n.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$(plugstack_file)
# cgroup plugins cannot work in these namespaces; linuxproc tracks by process tree.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$LOG/jobcomp.log
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
# Pass over pending jobs every 2 s (default 60): a requeued job becomes eligible on a timer, not an event.
SchedulerParameters=sched_interval=2,bf_interval=2
MpiDefault=none
MpiParams=ports=$RESV_PORTS
# Nodes claim more CPUs than this machine has, so multi-task and concurrent steps fit.
SlurmdParameters=config_overrides
ReturnToService=2
JobRequeue=1
KillWait=2
MinJobAge=20
InactiveLimit=0
MessageTimeout=10
SlurmdTimeout=60
TmpFS=$LOCAL
GresTypes=gpu
EOF
  write_fake_gpus
  # Lines a test adds (e.g. KillOnBadExit=1), before the nodes: Slurm reads them like any other.
  [ -z "${DDP_CLUSTER_SLURM_CONF_EXTRA:-}" ] || printf '%s\n' "$DDP_CLUSTER_SLURM_CONF_EXTRA" >>"$CONF"
  for k in $(seq "$NODES"); do
    echo "NodeName=node$k NodeAddr=$NET0.$k NodeHostname=node$k CPUs=4 RealMemory=2048 Gres=gpu:$FAKE_GPUS State=UNKNOWN" >>"$CONF"
  done
  echo "PartitionName=ddp Nodes=node[1-$NODES] Default=YES MaxTime=INFINITE State=UP" >>"$CONF"
  echo "PMIxCliTmpDirBase=$LOCAL/pmix" >"$DIR/etc/mpi.conf"
  chmod 0644 "$CONF" "$DIR/etc/mpi.conf"
}

# Every node has FAKE_GPUS GPUs as Slurm sees them: gres.conf names character devices with /dev/null's numbers
# (slurmd ignores a GPU without File=), so jobs ask for GPUs as users do (--gpus-per-node, --gres=gpu) and get
# SLURM_GPUS_ON_NODE, SLURM_STEP_GPUS and CUDA_VISIBLE_DEVICES. hwloc sees no GPU on the nodes: the plugin plans for
# CPUs, and LibTorch trains on them.
write_fake_gpus() {
  local g
  for g in $(seq 0 $((FAKE_GPUS - 1))); do mknod -m 0666 "$DIR/etc/gpu$g" c 1 3; done
  echo "Name=gpu File=$DIR/etc/gpu[0-$((FAKE_GPUS - 1))]" >"$DIR/etc/gres.conf"
  chmod 0644 "$DIR/etc/gres.conf"
}

# The plugstack file Slurm reads: $DIR/etc/plugstack.conf, or the one `up --plugstack` named.
plugstack_file() { cat "$DIR/etc/plugstack-path" 2>/dev/null || echo "$DIR/etc/plugstack.conf"; }

write_plugstack() {
  local file
  file=$(plugstack_file)
  if [ $# -eq 0 ]; then : >"$file"; else printf '%s\n' "$@" >"$file"; fi
  chmod 0644 "$file"
}

# Prints the path plugstack.conf should name: PATH itself, or a copy the job user can read.
plugin_for_user() {
  local p=$1
  # srun loads the plugin as the job user: a build tree under a private home would make every srun fail.
  if as_user test -r "$p"; then
    echo "$p"
  else
    install -m 0755 "$p" "$DIR/etc/$(basename "$p")"
    say "note: $CLUSTER_USER cannot read $p; using a copy, $DIR/etc/$(basename "$p")"
    echo "$DIR/etc/$(basename "$p")"
  fi
}

as_user() { setpriv --reuid="$CLUSTER_USER" --regid="$CLUSTER_USER" --init-groups "$@"; }

slurm_env() { env -i PATH="$SAFE_PATH" LANG=C.UTF-8 SLURM_CONF="$CONF" "$@"; }

# slurmd starts in a new mount namespace of the node: its copy of $NSDIR goes (it would pin the other nodes'
# namespaces) and the node's private tmpfs is mounted at $LOCAL; then the shell becomes slurmd.
node_slurmd_script() {  # NODE_INDEX
  local k=$1
  cat <<EOF
umount -l '$NSDIR'
mount -t tmpfs -o size=256m,mode=1777 ddp-node$k-local '$LOCAL'
echo node$k >'$LOCAL/.node'
mkdir -m 0755 '$LOCAL/pmix'
$(if munge_per_node; then node_munge_script "$k"; fi)
exec env -i PATH='$SAFE_PATH' LANG=C.UTF-8 slurmd -D -f '$CONF' -N node$k
EOF
}

# Whether each node runs a munged of its own (see the header).
munge_per_node() {
  case ${DDP_CLUSTER_MUNGE_PER_NODE:-auto} in
    1) return 0 ;;
    0) return 1 ;;
  esac
  [[ $(env PATH="$SAFE_PATH" slurmd -V 2>/dev/null) =~ ^slurm\ 25\. ]]
}

# The node's munged: the cluster's key in a node-private directory bound over $DIR/munge (the socket path of
# slurm.conf's AuthInfo), started before slurmd (munged forks once it answers).
node_munge_script() {  # NODE_INDEX
  local k=$1 m=$DIR/munge
  cat <<EOF
mkdir -m 0755 '$LOCAL/munge'
cp '$m/munge.key' '$LOCAL/munge/munge.key'
chown -R munge:munge '$LOCAL/munge'
mount --bind '$LOCAL/munge' '$m'
setpriv --reuid=munge --regid=munge --init-groups munged --socket='$m/munge.socket' --key-file='$m/munge.key' \\
  --pid-file='$m/munged.pid' --seed-file='$m/munged.seed' --log-file='$LOG/munged-node$k.log'
EOF
}

# A first start on a fresh, busy machine can be slow (daemons load their plugins from a cold page cache): the
# limits are generous, and a daemon that dies ends the wait at once with its exit cause.
start_slurm() {
  local k
  start_daemon slurmctld env -i PATH="$SAFE_PATH" LANG=C.UTF-8 SLURM_CONF="$CONF" slurmctld -D -f "$CONF"
  wait_for 120 "slurmctld to answer" ctld_up
  for k in $(seq "$NODES"); do
    mkdir -p "$DIR/spool/node$k"
    install -o munge -g munge -m 0640 /dev/null "$LOG/munged-node$k.log"
    start_daemon "slurmd-node$k" nsenter --net="/run/netns/$NETNS_PREFIX$k" --uts="$NSDIR/node$k.uts" -- \
      unshare --mount --propagation private sh -ec "$(node_slurmd_script "$k")"
  done
  wait_for 180 "all $NODES nodes idle" all_idle
}

# The wait conditions stop at once when a daemon has died, rather than wait out their limit.
ctld_up() {
  die_if_dead slurmctld "$LOG/slurmctld.log"
  slurm_env scontrol ping 2>/dev/null | grep -q 'is UP'
}

all_idle() {
  local states k
  die_if_dead slurmctld "$LOG/slurmctld.log"
  for k in $(seq "$NODES"); do die_if_dead "slurmd-node$k" "$LOG/slurmd-node$k.log"; done
  states=$(slurm_env sinfo -h -N -o '%t' 2>/dev/null | sort | uniq -c | awk '{print $2"="$1}' | tr '\n' ' ')
  [ "$states" = "idle=$NODES " ]
}

print_logs() {
  local n=${1:-20} f lines
  for f in "$LOG"/*.log; do
    [ -f "$f" ] || continue
    lines=$n
    # jobcomp.log has one long line per job: the last few say enough.
    [ "$f" != "$LOG/jobcomp.log" ] || lines=$((n < 5 ? n : 5))
    echo "----- $f (last $lines lines)"
    tail -n "$lines" "$f"
  done
}

on_up_exit() {
  local rc=$?
  [ "$rc" -eq 0 ] && return 0
  say "up failed (exit $rc); daemon logs:"
  print_logs 15 >&2
  if [ "${DDP_CLUSTER_KEEP_ON_FAILURE:-0}" = 1 ]; then
    say "DDP_CLUSTER_KEEP_ON_FAILURE=1: leaving the cluster as it is; run cluster.sh down when done"
  else
    teardown || true
  fi
  exit "$rc"
}

cmd_up() {
  NODES=2
  local plugin="" pargs="" plugstack="" t0=$EPOCHREALTIME
  while [ $# -gt 0 ]; do
    case $1 in
      --nodes) NODES=${2:?--nodes needs a number}; shift 2 ;;
      --plugin) plugin=${2:?--plugin needs a path}; shift 2 ;;
      --plugstack-args) pargs=${2-}; shift 2 ;;
      --plugstack) plugstack=${2:?--plugstack needs a file}; shift 2 ;;
      *) die "up: unknown argument '$1'; usage: cluster.sh up [--nodes N] [--plugin PATH] [--plugstack-args 'k=v ...'] [--plugstack FILE]" ;;
    esac
  done
  if ! [[ $NODES =~ ^[0-9]+$ ]] || [ "$NODES" -lt 1 ] || [ "$NODES" -gt 64 ]; then
    die "--nodes $NODES: give a number from 1 to 64"
  fi
  [ -z "$pargs" ] || [ -n "$plugin" ] || die "--plugstack-args needs --plugin PATH"
  if [ -n "$plugin" ]; then
    case $plugin in /*) ;; *) die "--plugin $plugin: give an absolute path (slurmstepd resolves it on every node)" ;; esac
    [ -f "$plugin" ] || die "--plugin $plugin: no such file; build it first (cmake --build build --target ddp_spank)"
  fi
  need_root
  need_tools
  check_dir_is_ours
  lock_unowned
  teardown
  check_subnet_free "$NET0"
  check_subnet_free "$NET1"
  trap on_up_exit EXIT
  ensure_user
  make_dirs
  record_owner
  if [ -n "$plugstack" ]; then
    case $plugstack in /*) ;; *) die "--plugstack $plugstack: give an absolute path" ;; esac
    echo "$plugstack" >"$DIR/etc/plugstack-path"
    [ -f "$plugstack" ] || write_plugstack
  fi
  if [ -n "$plugin" ]; then
    plugin=$(plugin_for_user "$plugin")
    echo "$plugin" >"$DIR/etc/plugin"
    write_plugstack "required $plugin${pargs:+ $pargs}"
  fi
  start_munge
  setup_network
  add_hosts_lines
  make_image
  setup_node_namespaces
  write_slurm_conf
  start_slurm
  trap - EXIT
  say "up: $NODES nodes idle in $(elapsed "$t0") s; plugstack $(plugstack_file): $(cat "$(plugstack_file)")"
}

# ---------------------------------------------------------------------------------------------------- use

need_up() {
  check_dir_is_safe
  [ -f "$CONF" ] || die "no cluster is up at $DIR; run: cluster.sh up"
}

cmd_env() {
  need_up
  local nodes
  nodes=$(awk -F'[ =]' '/^NodeName=/{n++} END{print n}' "$CONF")
  printf 'export %s=%q\n' \
    SLURM_CONF "$CONF" \
    DDP_CLUSTER_DIR "$DIR" \
    DDP_CLUSTER_SHARED "$SHARED" \
    DDP_CLUSTER_LOCAL "$LOCAL" \
    DDP_CLUSTER_PLUGSTACK "$(plugstack_file)" \
    DDP_CLUSTER_IMAGE "$DIR/oci/rootfs" \
    DDP_CLUSTER_BUNDLE "$DIR/oci" \
    DDP_CLUSTER_PLUGIN "$(cat "$DIR/etc/plugin" 2>/dev/null || true)" \
    DDP_CLUSTER_LOGS "$LOG" \
    DDP_CLUSTER_USER "$CLUSTER_USER" \
    DDP_CLUSTER_NNODES "$nodes" \
    DDP_CLUSTER_NODES "node[1-$nodes]" \
    DDP_CLUSTER_NET0 "$NET0" \
    DDP_CLUSTER_NET1 "$NET1" \
    DDP_CLUSTER_HOST_ADDR "$NET0.$HOST_OCTET" \
    DDP_CLUSTER_RESV_PORTS "$RESV_PORTS"
}

cmd_exec() {
  need_up
  local root=0 cwd=$SHARED
  while [ $# -gt 0 ]; do
    case $1 in
      --root) root=1; shift ;;
      --cwd) cwd=${2:?--cwd needs a directory}; shift 2 ;;
      --) shift; break ;;
      *) break ;;
    esac
  done
  [ $# -gt 0 ] || die "exec: no command; usage: cluster.sh exec [--root] [--cwd DIR] CMD..."
  [ -d "$cwd" ] || die "exec: --cwd $cwd: no such directory"
  cd "$cwd"
  # exec: the command's exit status is the caller's to judge, not an error of this script.
  if [ "$root" = 1 ]; then
    exec env -i PATH="$SAFE_PATH" LANG=C.UTF-8 SLURM_CONF="$CONF" HOME=/root USER=root LOGNAME=root "$@"
  fi
  local home
  home=$(getent passwd "$CLUSTER_USER" | cut -d: -f6)
  exec setpriv --reuid="$CLUSTER_USER" --regid="$CLUSTER_USER" --init-groups env -i PATH="$SAFE_PATH" \
    LANG=C.UTF-8 SLURM_CONF="$CONF" HOME="$home" USER="$CLUSTER_USER" LOGNAME="$CLUSTER_USER" \
    DDP_LOG_DIR="$SHARED/ddp-logs" "$@"
}

cmd_node() {
  need_up
  local node=${1:-} user=0
  [[ $node =~ ^node([0-9]+)$ ]] || die "node: '$node' is not a node name; usage: cluster.sh node nodeK [--user] CMD..."
  local k=${BASH_REMATCH[1]}
  [ -e "$NSDIR/node$k.uts" ] || die "node: $node is not part of this cluster"
  shift
  if [ "${1:-}" = --user ]; then user=1; shift; fi
  [ $# -gt 0 ] || die "node: no command"
  local as=()
  [ "$user" = 0 ] || as=(setpriv --reuid="$CLUSTER_USER" --regid="$CLUSTER_USER" --init-groups)
  in_node "$k" "${as[@]}" env -i PATH="$SAFE_PATH" LANG=C.UTF-8 SLURM_CONF="$CONF" "$@"
}

cmd_plugstack() { need_up; write_plugstack "$@"; }

main() {
  local cmd=${1:-}
  shift || true
  case $cmd in
    up) cmd_up "$@" ;;
    down) cmd_down "$@" ;;
    env) cmd_env ;;
    exec) cmd_exec "$@" ;;
    node) cmd_node "$@" ;;
    plugstack) need_root; cmd_plugstack "$@" ;;
    logs) need_up; print_logs "${1:-40}" ;;
    status) need_up; slurm_env sinfo -N -l ;;
    pgrep) own_pgrep "$@" || exit $? ;;  # 1: none matched, not an error
    *) die "usage: cluster.sh up|down|env|exec|node|plugstack|logs|status|pgrep (see the header of $0)" ;;
  esac
}

main "$@"
