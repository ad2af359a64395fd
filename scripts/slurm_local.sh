#!/usr/bin/env bash
# A throw-away Slurm cluster on this machine, for tests and for trying the sbatch scripts
# `python -m launch slurm` renders (issue 21).
#
#   scripts/slurm_local.sh up [--nodes 1|2]   start munged, slurmctld and the slurmd(s)
#   scripts/slurm_local.sh status             what runs, and how to talk to it
#   scripts/slurm_local.sh down               stop exactly what `up` started, remove the state
#
# Needs root and Debian's slurm-wlm + munge (Slurm 22.05 on Debian 12): `make setup` installs
# them. Everything lives under one state directory, HT_SLURM_DIR (default
# /tmp/horovod_train-slurm): slurm.conf, munge key and socket, spool and state dirs, logs and
# the pid of every daemon started. Nothing in /etc/slurm, /etc/munge or /run/munge is read or
# written, and the ports are our own (HT_SLURM_PORT_BASE, default 16817: slurmctld on the
# base, slurmd k on base + k), so a real Slurm or munge on this machine is left alone.
#
# --nodes 1: one slurmd named after this machine (so hostnames in a job's environment resolve,
#   and horovodrun/mpirun see the node as local), every daemon on 127.0.0.1.
# --nodes 2: two slurmds, n1 and n2, each in its own network namespace (tests/netns/topology.py,
#   namespaces HT_SLURM_NETNS-login/-h0/-h1, default prefix "hts"): n1 = 10.77.0.11, n2 =
#   10.77.0.12, slurmctld on the "login" namespace's bridge, 10.77.0.1. Traffic between the
#   nodes crosses the veth links and never leaves this machine. Clients (sbatch, srun, salloc)
#   must run in the login namespace: `ip netns exec hts-login sbatch ...` (`status` says so).
#
# Clients find the cluster through SLURM_CONF; `up` and `status` print the line to eval.
set -euo pipefail
shopt -s inherit_errexit

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${HT_SLURM_DIR:-/tmp/horovod_train-slurm}
PORT_BASE=${HT_SLURM_PORT_BASE:-16817}
NS_PREFIX=${HT_SLURM_NETNS:-hts}
CPUS_PER_NODE=${HT_SLURM_CPUS:-4}
MARKER=.horovod_train-slurm  # `down` removes only a directory that holds this file
CONF=$STATE/slurm.conf
MUNGE_SOCKET=$STATE/munge/munge.sock
LOGIN_ADDR=10.77.0.1  # tests/netns/topology.py's bridge address
START_TIMEOUT_S=${HT_SLURM_START_TIMEOUT:-45}

log() { printf '[slurm_local] %s\n' "$*"; }
die() { printf '[slurm_local] ERROR: %s\n' "$*" >&2; exit 1; }
# Exit 4: this machine cannot host the cluster (not root, Slurm not installed, namespaces
# refused). Tests skip on it, naming the reason; any other failure is a failure.
EXIT_UNAVAILABLE=4
unavailable() { printf '[slurm_local] ERROR: %s\n' "$*" >&2; exit "$EXIT_UNAVAILABLE"; }
usage() {
  printf 'usage: %s up [--nodes 1|2] | down | status\n' "$0" >&2
  exit 2
}

# The last lines of a log, under an error, so the first look needs no second command.
die_with_log() {
  local what=$1 file=$2
  {
    printf '[slurm_local] ERROR: %s. Read %s\n' "$what" "$file"
    [[ -f $file ]] && tail -n 15 "$file" | sed 's/^/    | /'
  } >&2
  exit 1
}

# ---------------------------------------------------------------------------------------
# Which nodes, where. One place, so up, down and status agree.
nodes_of() {  # $1 = node count -> node names, one per line
  if [[ $1 == 1 ]]; then hostname -s; else printf 'n1\nn2\n'; fi
}
node_addr() {  # $1 = node count, $2 = index 0.. -> address slurmd listens on
  if [[ $1 == 1 ]]; then echo 127.0.0.1; else echo "10.77.0.$((11 + $2))"; fi
}
node_netns() {  # $1 = node count, $2 = index -> namespace, empty for the root namespace
  [[ $1 == 1 ]] || echo "$NS_PREFIX-h$2"
}
ctld_addr() { if [[ $1 == 1 ]]; then echo 127.0.0.1; else echo "$LOGIN_ADDR"; fi; }
ctld_netns() { [[ $1 == 1 ]] || echo "$NS_PREFIX-login"; }

# ---------------------------------------------------------------------------------------
# Daemons we start, by pid. A pid file here holds "PID STARTTIME": the start time (field 22
# of /proc/PID/stat) tells our process from a later one that reused its pid, so `down` can
# never signal a stranger.
pid_file() { echo "$STATE/pids/$1"; }

start_time() {  # $1 = pid -> its start time in clock ticks, or nothing if gone
  local stat fields
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  stat=${stat##*) }  # the command name may hold spaces and ')'; fields follow the last ')'
  read -r -a fields <<<"$stat"
  echo "${fields[19]}"  # field 22 overall; the list starts at field 3
}

recorded_pid() {  # $1 = name -> pid if that very process still runs, else nothing
  local file pid started state
  file=$(pid_file "$1")
  [[ -f $file ]] || return 0
  read -r pid started <"$file" || return 0
  [[ -n $pid && $(start_time "$pid") == "$started" ]] || return 0
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)
  [[ $state == Z ]] && return 0  # a zombie runs nothing
  echo "$pid"
}

# Starts `argv...` detached (own session, stdin closed, output to its log) and records its
# pid. setsid execs in place because a background child of a non-interactive shell is not
# a process-group leader, and `ip netns exec` execs too: $! is the daemon itself. All
# daemons run in the foreground (-F / -D), so that pid stays theirs: no daemon forks away.
start_daemon() {  # $1 = name, $2 = netns or "", then argv
  local name=$1 netns=$2 out pid
  shift 2
  out=$STATE/log/$name.out
  if [[ -n $netns ]]; then set -- ip netns exec "$netns" "$@"; fi
  setsid "$@" </dev/null >>"$out" 2>&1 &
  pid=$!
  # The start time is read at once: should the daemon die at start, the record still
  # names this pid, and `recorded_pid` then reports it gone.
  echo "$pid $(start_time "$pid")" >"$(pid_file "$name")"
}

# Waits until `check` succeeds; `name` must keep running meanwhile.
wait_until() {  # $1 = name, $2 = what, $3 = log, then the check's argv
  local name=$1 what=$2 logfile=$3 deadline=$((SECONDS + START_TIMEOUT_S))
  shift 3
  until "$@" >/dev/null 2>&1; do
    [[ -n $(recorded_pid "$name") ]] || die_with_log "$name exited during start-up ($what)" "$logfile"
    ((SECONDS < deadline)) || die_with_log "$what: not within ${START_TIMEOUT_S} s" "$logfile"
    sleep 0.2
  done
}

stop_recorded() {  # $1 = name: SIGTERM, then SIGKILL after 10 s, to that pid only
  local name=$1 pid i
  pid=$(recorded_pid "$name")
  if [[ -n $pid ]]; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
      [[ -n $(recorded_pid "$name") ]] || break
      sleep 0.1
    done
    if [[ -n $(recorded_pid "$name") ]]; then
      log "$name (pid $pid) ignored SIGTERM for 10 s: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$(pid_file "$name")"
}

# ---------------------------------------------------------------------------------------
client() {  # runs a Slurm client against our cluster (in the login namespace for 2 nodes)
  local netns
  netns=$(ctld_netns "$NODES")
  if [[ -n $netns ]]; then
    SLURM_CONF=$CONF ip netns exec "$netns" "$@"
  else
    SLURM_CONF=$CONF "$@"
  fi
}

require_tools() {
  [[ $(id -u) -eq 0 ]] || unavailable "needs root: the daemons run as root (SlurmUser=root) and, for" \
    "--nodes 2, network namespaces need CAP_SYS_ADMIN. Fix: run as root (CI does)"
  local missing=() p
  for p in munged mungekey munge unmunge slurmctld slurmd slurmstepd sbatch srun sinfo scontrol; do
    command -v "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  [[ ${#missing[@]} -eq 0 ]] || unavailable "not installed: ${missing[*]}. Fix: make setup (installs" \
    "slurm-wlm and munge), or apt-get install --no-install-recommends slurm-wlm munge"
  if [[ $NODES == 2 ]]; then
    command -v ip >/dev/null 2>&1 || unavailable "ip (iproute2) is not installed; --nodes 2 needs it"
  fi
}

port_free() {  # $1 = netns or "", $2 = port: nothing listens on it there
  local listening
  if [[ -n $1 ]]; then
    listening=$(ip netns exec "$1" ss -Htln "sport = :$2" 2>/dev/null || true)
  else
    listening=$(ss -Htln "sport = :$2" 2>/dev/null || true)
  fi
  [[ -z $listening ]]
}

write_if_changed() {  # $1 = path; content on stdin. Rewrites only on a difference.
  local tmp
  tmp=$(mktemp "$1.XXXXXX")
  cat >"$tmp"
  if [[ -f $1 ]] && cmp -s "$tmp" "$1"; then
    rm -f "$tmp"
    return 1
  fi
  chmod 0644 "$tmp"  # mktemp makes 0600; clients of any user read slurm.conf
  mv "$tmp" "$1"
}

render_conf() {
  local i=0 node
  cat <<EOF
# Written by scripts/slurm_local.sh (horovod_train) for a $NODES-node test cluster.
# Rewritten only when its inputs change; do not edit: run 'down' and 'up' instead.
ClusterName=htslurm
SlurmctldHost=$(hostname -s)($(ctld_addr "$NODES"))
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$PORT_BASE
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool/%n
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd-%n.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# Our own (empty) SPANK list: a site plugstack.conf must not load into our daemons.
PlugStackConfig=$STATE/plugstack.conf
# No cgroups: linuxproc tracks a job's processes by parent pid, task/none binds nothing.
# Both work in containers and sandboxes where cgroups are read-only or absent.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
# Tasks get no MPI plugin unless they ask: the rendered scripts say --mpi=pmix themselves.
MpiDefault=none
SchedulerType=sched/builtin
# cons_tres + CR_CPU: jobs share a node by CPUs, so a job still completing does not hold
# the next one back, and memory is not tracked (nodes declare none).
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# The nodes declare CPUs=$CPUS_PER_NODE whatever this machine has: test jobs are tiny.
SlurmdParameters=config_overrides
# A node that registers comes back into service (the state dir starts empty anyway).
ReturnToService=2
# Completed jobs leave squeue within seconds, so 'down' sees an idle cluster quickly.
MinJobAge=5
KillWait=5
InactiveLimit=0
Waittime=0
# 2 busy cores: a daemon can be slow to answer; do not call nodes dead for it.
MessageTimeout=30
SlurmdTimeout=300
SlurmctldTimeout=120
# Each node's TmpFS is the same path; in two-node mode each slurmd has its own directory
# mounted there (in its own mount namespace), like a node's local disk.
TmpFS=$STATE/tmpfs
EOF
  while read -r node; do
    printf 'NodeName=%s NodeAddr=%s Port=%d CPUs=%d State=UNKNOWN\n' "$node" \
      "$(node_addr "$NODES" "$i")" "$((PORT_BASE + 1 + i))" "$CPUS_PER_NODE"
    i=$((i + 1))
  done < <(nodes_of "$NODES")
  printf 'PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n'
}

# ---------------------------------------------------------------------------------------
make_state() {
  if [[ -e $STATE && ! -f $STATE/$MARKER ]]; then
    [[ -d $STATE && -z $(ls -A "$STATE") ]] || die "$STATE exists and is not ours (no $MARKER)." \
      "Fix: set HT_SLURM_DIR to a new directory, or remove $STATE"
  fi
  # 0755: slurmd runs batch scripts from its spool dir; munged refuses group/other-writable
  # directories on the way to its key and socket.
  mkdir -p "$STATE"
  chmod 0755 "$STATE"
  # Only what is missing is made, so a second `up` changes no file.
  [[ -f $STATE/$MARKER ]] || : >"$STATE/$MARKER"
  mkdir -p "$STATE"/{pids,run,log,ctld,tmpfs,munge}
  # munged wants its socket's directory searchable by all (any user may ask for a
  # credential); the key in it is 0600.
  chmod 0755 "$STATE/munge"
  local node
  while read -r node; do mkdir -p "$STATE/spool/$node" "$STATE/tmp/$node"; done < <(nodes_of "$NODES")
  chmod -R 0755 "$STATE/spool"
  [[ -f $STATE/plugstack.conf ]] || : >"$STATE/plugstack.conf"
  [[ -f $STATE/nodes ]] || echo "$NODES" >"$STATE/nodes"
}

start_munge() {
  local key=$STATE/munge/munge.key
  if [[ -n $(recorded_pid munged) ]]; then return; fi
  if [[ ! -f $key ]]; then
    mungekey --create --keyfile="$key" >>"$STATE/log/munged.out" 2>&1 ||
      die_with_log "mungekey could not create $key" "$STATE/log/munged.out"
  fi
  chmod 0600 "$key"
  rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"  # left by a munged that was killed
  start_daemon munged "" munged --foreground --socket="$MUNGE_SOCKET" --key-file="$key" \
    --pid-file="$STATE/run/munged.pid" --log-file="$STATE/log/munged.log" \
    --seed-file="$STATE/munge/munged.seed"
  wait_until munged "munged answering on $MUNGE_SOCKET" "$STATE/log/munged.log" munge_roundtrip
}

munge_roundtrip() { munge -n -S "$MUNGE_SOCKET" | unmunge -S "$MUNGE_SOCKET"; }

setup_netns() {
  local ns absent=0 topo_out
  for ns in "$NS_PREFIX-login" "$NS_PREFIX-h0" "$NS_PREFIX-h1"; do
    [[ -e /run/netns/$ns ]] || absent=$((absent + 1))
  done
  # All three there: made by an earlier `up`, and never rebuilt under running daemons.
  if [[ $absent != 0 ]]; then
    [[ $absent == 3 ]] || die "some of the namespaces $NS_PREFIX-{login,h0,h1} exist, not" \
      "all. Fix: $0 down, then up again"
    if ! topo_out=$(python3 "$ROOT/tests/netns/topology.py" up "$NS_PREFIX" 2 2>&1); then
      printf '%s\n' "$topo_out" >"$STATE/log/netns.out"
      printf '[slurm_local] ERROR: the kernel refused the network namespaces (needs ' >&2
      printf 'CAP_SYS_ADMIN + CAP_NET_ADMIN, veth and bridge support): %s\n' \
        "$(tail -n 1 "$STATE/log/netns.out")" >&2
      exit "$EXIT_UNAVAILABLE"
    fi
  fi
  [[ -f $STATE/netns ]] || echo "$NS_PREFIX" >"$STATE/netns"  # `down` removes them
  # `ip netns exec NS` mounts /etc/netns/NS/hosts over /etc/hosts. In every namespace the
  # node names resolve (mwms jobs list workers as n1:PORT, n2:PORT), and so does this
  # machine's hostname, to the namespace's own address, as on a cluster's nodes and login
  # node. Written whole (topology.py writes the hosts' first three lines the same way),
  # so a second `up` leaves them as they are.
  local host i
  host=$(hostname -s)
  mkdir -p "/etc/netns/$NS_PREFIX-login"
  for i in login 0 1; do
    if [[ $i == login ]]; then ns=$NS_PREFIX-login; else ns=$NS_PREFIX-h$i; fi
    {
      printf '127.0.0.1 localhost\n::1 localhost\n'
      if [[ $i == login ]]; then echo "$LOGIN_ADDR $host"; else echo "10.77.0.$((11 + i)) $host"; fi
      printf '10.77.0.11 n1\n10.77.0.12 n2\n'
    } | write_if_changed "/etc/netns/$ns/hosts" || true
  done
}

start_slurmctld() {
  local netns
  [[ -n $(recorded_pid slurmctld) ]] && return
  netns=$(ctld_netns "$NODES")
  port_free "$netns" "$PORT_BASE" || die "port $PORT_BASE (slurmctld) is in use. Fix:" \
    "HT_SLURM_PORT_BASE=<another base> $0 up"
  start_daemon slurmctld "$netns" slurmctld -D -f "$CONF"
  wait_until slurmctld "slurmctld answering on $(ctld_addr "$NODES"):$PORT_BASE" \
    "$STATE/log/slurmctld.log" client scontrol ping
}

start_slurmds() {
  local i=0 node netns port
  while read -r node; do
    if [[ -z $(recorded_pid "slurmd-$node") ]]; then
      netns=$(node_netns "$NODES" "$i")
      port=$((PORT_BASE + 1 + i))
      port_free "$netns" "$port" || die "port $port (slurmd $node) is in use. Fix:" \
        "HT_SLURM_PORT_BASE=<another base> $0 up"
      if [[ -n $netns ]]; then
        # `ip netns exec` gives the daemon a mount namespace of its own, so this bind mount
        # of the node's directory over TmpFS is seen by that slurmd and its jobs alone.
        # bash execs slurmd in place: the recorded pid stays the daemon's.
        # shellcheck disable=SC2016 # $1, $2, $@ are the inner bash's arguments
        start_daemon "slurmd-$node" "$netns" bash -c \
          'mount --bind "$1" "$2" || exit 1; shift 2; exec "$@"' bind-tmpfs \
          "$STATE/tmp/$node" "$STATE/tmpfs" slurmd -D -N "$node" -f "$CONF"
      else
        start_daemon "slurmd-$node" "" slurmd -D -N "$node" -f "$CONF"
      fi
    fi
    i=$((i + 1))
  done < <(nodes_of "$NODES")
  while read -r node; do
    wait_until "slurmd-$node" "node $node registered and idle" "$STATE/log/slurmd-$node.log" \
      node_ready "$node"
  done < <(nodes_of "$NODES")
}

node_ready() {  # $1 = node: registered, and in a state that takes jobs
  local state
  state=$(client sinfo -h -n "$1" -N -o '%T' 2>/dev/null) || return 1
  [[ $state =~ ^(idle|mixed|allocated|completing)$ ]]
}

check_pmix() {
  local plugins
  plugins=$(client srun --mpi=list 2>&1 || true)
  grep -qw pmix <<<"$plugins" || die "srun --mpi=list offers no pmix (the rendered horovod" \
    "scripts use srun --mpi=pmix); it said: $plugins"
}

print_env() {
  printf 'export SLURM_CONF=%s\n' "$CONF"
  if [[ $NODES == 2 ]]; then
    printf '# clients run in the login namespace: ip netns exec %s-login sbatch|srun|salloc ...\n' \
      "$NS_PREFIX"
  fi
}

# ---------------------------------------------------------------------------------------
cmd_up() {
  local t0=$SECONDS had
  if [[ -f $STATE/nodes ]]; then
    had=$(cat "$STATE/nodes")
    [[ $had == "$NODES" ]] || die "$STATE holds a $had-node cluster; asked for $NODES." \
      "Fix: $0 down, then $0 up --nodes $NODES"
  fi
  require_tools
  make_state
  # Slurm reads cgroup.conf next to slurm.conf. 22.05's slurmd loads a cgroup plugin even
  # with proctrack/linuxproc and task/none, and "autodetect" fails where /sys/fs/cgroup is
  # empty (inside `ip netns exec`, which mounts a fresh /sys) or cgroup/v2 wants systemd.
  # cgroup/v1 named outright loads without touching the cgroup filesystem; with the
  # plugins above nothing ever asks it to.
  printf '# Written by scripts/slurm_local.sh: see slurm.conf.\nCgroupPlugin=cgroup/v1\nCgroupAutomount=no\n' |
    write_if_changed "$STATE/cgroup.conf" || true
  if render_conf | write_if_changed "$CONF"; then
    # A changed config under running daemons would leave them on the old one.
    if [[ -n $(recorded_pid slurmctld) ]]; then
      die "slurm.conf changed (ports or CPUs) while the cluster runs. Fix: $0 down, then up"
    fi
  fi
  # Namespaces first: where the kernel refuses them, nothing has started yet.
  if [[ $NODES == 2 ]]; then setup_netns; fi
  # A failure from here on may leave daemons running: say how to stop them.
  trap 'rc=$?; ((rc == 0)) || log "what did start still runs: $0 down stops it"' EXIT
  start_munge
  start_slurmctld
  start_slurmds
  check_pmix
  log "up: $NODES node(s) [$(nodes_of "$NODES" | paste -sd,)], slurmctld on" \
    "$(ctld_addr "$NODES"):$PORT_BASE, state in $STATE ($((SECONDS - t0)) s)"
  print_env
}

cmd_down() {
  if [[ ! -e $STATE ]]; then
    log "down: nothing at $STATE"
    return
  fi
  [[ -f $STATE/$MARKER ]] || die "$STATE is not a slurm_local state dir (no $MARKER); left alone"
  NODES=$(cat "$STATE/nodes" 2>/dev/null || echo 1)
  local node ns prefix
  # Jobs first: their slurmstepd processes outlive slurmd by design, and are not ours to
  # find by name. scancel through our own controller ends them, and squeue empties.
  if [[ -n $(recorded_pid slurmctld) ]]; then
    local jobs deadline=$((SECONDS + 20))
    jobs=$(client squeue -h -o %i 2>/dev/null || true)
    # shellcheck disable=SC2086 # one word per job id
    [[ -z $jobs ]] || client scancel --full --quiet $jobs 2>/dev/null || true
    while [[ -n $(client squeue -h -o %i 2>/dev/null || true) ]] && ((SECONDS < deadline)); do
      sleep 0.5
    done
  fi
  local file
  for file in "$STATE"/pids/slurmd-*; do
    [[ -f $file ]] && stop_recorded "$(basename "$file")"
  done
  stop_recorded slurmctld
  stop_recorded munged
  if [[ -f $STATE/netns ]]; then
    prefix=$(cat "$STATE/netns")
    rm -f "/etc/netns/$prefix-login/hosts"
    rmdir "/etc/netns/$prefix-login" 2>/dev/null || true
    # Kills what is left inside our own namespaces (job steps of our slurmds only), then
    # deletes them; the veths and the bridge go with them.
    python3 "$ROOT/tests/netns/topology.py" down "$prefix" 2 >/dev/null 2>&1 ||
      log "warning: removing namespaces $prefix-* failed; see: ip netns list"
    for ns in "$prefix-login" "$prefix-h0" "$prefix-h1"; do
      [[ ! -e /run/netns/$ns ]] || log "warning: namespace $ns is still there"
    done
  fi
  rm -rf -- "$STATE"
  log "down: stopped and removed $STATE"
}

cmd_status() {
  if [[ ! -f $STATE/$MARKER ]]; then
    log "down (no state at $STATE)"
    return 3
  fi
  NODES=$(cat "$STATE/nodes" 2>/dev/null || echo 1)
  local name pid up=0 total=0
  for name in munged slurmctld $(nodes_of "$NODES" | sed 's/^/slurmd-/'); do
    total=$((total + 1))
    pid=$(recorded_pid "$name")
    if [[ -n $pid ]]; then
      up=$((up + 1))
      log "$name: running, pid $pid"
    else
      log "$name: not running (log: $STATE/log/${name}.log)"
    fi
  done
  if [[ -n $(recorded_pid slurmctld) ]]; then
    client sinfo -N -o '%N %T %c %O' 2>&1 | sed 's/^/    /' || true
  fi
  print_env
  [[ $up == "$total" ]] && return 0
  [[ $up == 0 ]] && return 3
  return 1
}

main() {
  [[ $# -ge 1 ]] || usage
  local cmd=$1
  shift
  NODES=1
  while [[ $# -gt 0 ]]; do
    case $1 in
      --nodes) [[ $# -ge 2 ]] || usage; NODES=$2; shift 2 ;;
      --nodes=*) NODES=${1#--nodes=}; shift ;;
      *) usage ;;
    esac
  done
  [[ $NODES == 1 || $NODES == 2 ]] || die "--nodes: received '$NODES'; expected 1 or 2"
  if [[ ! $PORT_BASE =~ ^[0-9]{4,5}$ ]] || ((PORT_BASE < 1024 || PORT_BASE > 65000)); then
    die "HT_SLURM_PORT_BASE: received '$PORT_BASE'; expected a port from 1024 to 65000"
  fi
  [[ $CPUS_PER_NODE =~ ^[1-9][0-9]{0,3}$ ]] ||
    die "HT_SLURM_CPUS: received '$CPUS_PER_NODE'; expected a CPU count per node, e.g. 4"
  [[ $NS_PREFIX =~ ^[A-Za-z0-9][A-Za-z0-9_.-]{0,30}$ ]] ||
    die "HT_SLURM_NETNS: received '$NS_PREFIX'; expected letters, digits, '-', '_', '.'"
  case $cmd in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    *) usage ;;
  esac
}

main "$@"
