#!/usr/bin/env bash
# A real SLURM for the tests: tests/cluster/slurm.sh start|stop|status|env|install|kill-node
#
#   install install Debian's slurm-wlm, munge, slurmdbd, mariadb-server and iproute2 when
#           missing (root)
#   start   install them when missing (root), write slurm.conf from `slurmd -C`, start
#           munged -> mariadbd -> slurmdbd -> slurmctld -> slurmd, wait until the nodes are
#           idle, record their pids
#   stop    cancel the cluster's jobs, then stop exactly the processes `start` recorded (and,
#           with two nodes, remove their network)
#   status  exit 0 when the recorded processes live and the node answers
#   env     print `export SLURM_CONF=...` (clients find the cluster through it)
#   kill-node NAME  (two nodes) SIGKILL every process of node NAME: a node that dies
#   revive-node NAME  (two nodes) start node NAME's slurmd again and wait until it is idle
#   leftovers       print what of the cluster is still on this host (processes, namespaces,
#                   veths, bridge), one a line; nothing after `stop`
#
# DPSUITE_SLURM_NODES=2 (tests/cluster/slurm2.sh) makes it a two-node cluster on this host:
# each slurmd (`slurmd -N dn1`, `-N dn2`) runs in a network namespace of its own (dps-dn1,
# dps-dn2, with a hostname of its own), joined by a veth pair to the bridge dps-br0 on
# 10.213.0.0/24, where slurmctld listens (10.213.0.1). Each node's egress is shaped with tbf to
# $DPSUITE_SLURM_LINK (default 1gbit), so node-to-node traffic crosses a link of that rate in
# each direction. It has a munged of its own (its own socket, the same key for every node), so
# it can run beside the single-node cluster. `stop` removes the namespaces, veths and bridge.
#
# Everything lives in $DPSUITE_SLURM_DIR (default /tmp/dpsuite-slurm): configuration, state,
# accounting database, munge key, logs, pids. Nothing under /etc is changed, so the
# cluster is reached through SLURM_CONF only. Each start wipes the controller's state and the
# accounting database together (job ids restart at 1). No systemd or cgroups are needed:
# proctrack/linuxproc tracks processes, task/affinity binds CPUs, select/cons_tres + CR_Core
# allocates cores, and slurmdbd (on MariaDB) keeps the accounting that `sacct` reads.
set -euo pipefail

NODES=${DPSUITE_SLURM_NODES:-1}
[[ $NODES == 1 || $NODES == 2 ]] || { echo "slurm.sh: error: DPSUITE_SLURM_NODES is 1 or 2" >&2; exit 2; }
if [[ $NODES == 2 ]]; then
    DIR=${DPSUITE_SLURM_DIR:-/tmp/dpsuite-slurm2}
    PORT_BASE=${DPSUITE_SLURM_PORT_BASE:-6827}
else
    DIR=${DPSUITE_SLURM_DIR:-/tmp/dpsuite-slurm}
    PORT_BASE=${DPSUITE_SLURM_PORT_BASE:-6817}   # slurmctld, slurmd, slurmdbd, mariadb: base .. +3
fi
# The two-node network: only addresses of the namespaces and bridge created here.
BRIDGE=dps-br0
NET=10.213.0
CTLD_ADDR=$NET.1
NODE_NAMES=(dn1 dn2)
LINK_RATE=${DPSUITE_SLURM_LINK:-1gbit}
CLUSTER=dpsuite
[[ $NODES == 2 ]] && CLUSTER=dpsuite2
CTLD_PORT=$PORT_BASE
SLURMD_PORT=$((PORT_BASE + 1))
DBD_PORT=$((PORT_BASE + 2))
DB_PORT=$((PORT_BASE + 3))
PACKAGES=(slurm-wlm munge slurmdbd mariadb-server iproute2) # iproute2: ip, tc (two nodes)
if [[ $NODES == 2 ]]; then
    PROCESSES=(slurmd-dn1 slurmd-dn2 slurmctld slurmdbd mariadbd munged)
    MUNGE_SOCKET=$DIR/munge/munge.socket
else
    PROCESSES=(slurmd slurmctld slurmdbd mariadbd munged) # the order `stop` ends them in
    MUNGE_SOCKET=/run/munge/munge.socket.2                # munge's default
fi
MUNGE_SOCKET_DIR=$(dirname "$MUNGE_SOCKET")
export SLURM_CONF=$DIR/etc/slurm.conf

log() { echo "slurm.sh: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}

install_packages() {
    local missing=()
    for bin in sbatch slurmctld slurmd slurmdbd munged mariadbd ip tc; do
        command -v "$bin" >/dev/null || missing+=("$bin")
    done
    [[ ${#missing[@]} -eq 0 ]] && return
    [[ $(id -u) -eq 0 ]] || die "missing ${missing[*]}: run as root to install ${PACKAGES[*]}"
    log "installing ${PACKAGES[*]}"
    # Another apt may hold the lock for a while: wait for it rather than fail.
    apt-get -o DPkg::Lock::Timeout=300 update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q \
        --no-install-recommends "${PACKAGES[@]}" >/dev/null
}

# The node lines of slurm.conf, and the settings that differ between one and two nodes.
node_lines() {
    local node
    node=$(slurmd -C | head -n 1) # NodeName=host CPUs=.. Boards=.. ... RealMemory=..
    [[ $node == NodeName=* ]] || die "slurmd -C printed no node line: $node"
    if [[ $NODES == 1 ]]; then
        echo "$node State=UNKNOWN"
        return
    fi
    local i=11 name
    for name in "${NODE_NAMES[@]}"; do # each node: this host's CPUs and memory, its own address
        echo "NodeName=$name NodeAddr=$NET.$i NodeHostname=$name ${node#NodeName=* } State=UNKNOWN"
        i=$((i + 1))
    done
}

cluster_settings() {
    if [[ $NODES == 1 ]]; then
        cat <<EOF
SlurmctldHost=$(hostname -s)
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmdLogFile=$DIR/log/slurmd.log
SlurmdSpoolDir=$DIR/spool
EOF
        return
    fi
    # %n: each node's own files. A node that stops answering is DOWN after SlurmdTimeout, and a
    # batch job on it is not requeued (its run has already been marked failed). Clients reach
    # slurmdbd through AccountingStoragePass, the munged socket for accounting.
    cat <<EOF
SlurmctldHost=$(hostname -s)($CTLD_ADDR)
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmdSpoolDir=$DIR/spool/%n
AuthInfo=socket=$MUNGE_SOCKET
AccountingStoragePass=$MUNGE_SOCKET
SlurmdTimeout=10
JobRequeue=0
EOF
}

write_configs() {
    cat >"$DIR/etc/slurm.conf" <<EOF
ClusterName=$CLUSTER
$(cluster_settings)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
KillWait=10
$(node_lines)
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
# A partition whose time limit a default job exceeds: such a job is accepted, then pends forever.
PartitionName=short Nodes=ALL MaxTime=1 State=UP
EOF
    cat >"$DIR/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=dpsuite
StorageLoc=slurm_acct_db
PidFile=$DIR/run/slurmdbd.pid
LogFile=$DIR/log/slurmdbd.log
$([[ $NODES == 1 ]] || echo "AuthInfo=socket=$MUNGE_SOCKET")
EOF
    chmod 600 "$DIR/etc/slurmdbd.conf" # slurmdbd refuses a readable password file
}

# Start "$@" in the background, detached from this shell, and record its pid as NAME.
spawn() {
    local name=$1
    shift
    setsid "$@" >>"$DIR/log/$name.out" 2>&1 </dev/null &
    echo $! >"$DIR/pids/$name"
}

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
    local limit=$1 what=$2
    shift 2
    local deadline=$((SECONDS + limit)) # by the clock: one try may itself take seconds
    while ((SECONDS < deadline)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    die "$what did not come up within ${limit}s (logs: $DIR/log)"
}

sql() { mariadb --protocol=socket --socket="$DIR/mysql/mysql.sock" -u root -e "$1"; }

node_idle() { [[ $(timeout 5 sinfo -h -N -o %t 2>/dev/null | sort -u) == idle ]]; }

start() {
    [[ $(id -u) -eq 0 ]] || die "start needs root (the daemons run as root)"
    if status >/dev/null 2>&1; then
        log "already running ($DIR)"
        return
    fi
    stop_recorded # whatever a half-finished start left behind
    trap 'stop_recorded; stop_network' ERR EXIT # a start that fails leaves nothing running
    install_packages
    rm -rf "$DIR/state" "$DIR/spool" "$DIR/run" "$DIR/log" "$DIR/pids"
    mkdir -p "$DIR"/{etc,state,spool,run,log,pids,munge,mysql/data}
    chmod 700 "$DIR/munge"
    write_configs
    # The nodes' addresses exist before anything may try to reach them: 10.213.0.0/24 must
    # never be routed anywhere else (this host's default route).
    start_network

    # One node: SLURM's clients and daemons talk to munged on its default socket. One already
    # serving it (the system's) is used as it is; otherwise we start one with a key of our own.
    # Two nodes: always a munged of our own, on a socket of its own that slurm.conf names.
    if [[ $NODES == 2 ]] || ! munge -n >/dev/null 2>&1; then
        [[ -f $DIR/munge/munge.key ]] || head -c 1024 /dev/urandom >"$DIR/munge/munge.key"
        chmod 400 "$DIR/munge/munge.key"
        mkdir -p "$MUNGE_SOCKET_DIR" && chmod 755 "$MUNGE_SOCKET_DIR"
        spawn munged munged --foreground --force --key-file="$DIR/munge/munge.key" \
            --pid-file="$DIR/run/munged.pid" --seed-file="$DIR/munge/seed" \
            --log-file="$DIR/log/munged.log" --socket="$MUNGE_SOCKET"
        wait_for 10 munged munge --socket="$MUNGE_SOCKET" -n
    fi

    if [[ ! -d $DIR/mysql/data/mysql ]]; then
        mariadb-install-db --user=root --datadir="$DIR/mysql/data" \
            --auth-root-authentication-method=socket --skip-test-db >"$DIR/log/mariadb-install.out" 2>&1
    fi
    spawn mariadbd mariadbd --no-defaults --user=root --datadir="$DIR/mysql/data" \
        --socket="$DIR/mysql/mysql.sock" --port="$DB_PORT" --bind-address=127.0.0.1 \
        --pid-file="$DIR/run/mariadbd.pid" --log-error="$DIR/log/mariadbd.log" \
        --innodb-buffer-pool-size=64M --innodb-lock-wait-timeout=900
    wait_for 30 mariadbd sql "SELECT 1"
    # Controller state and accounting go together: job ids restart at 1 in both.
    sql "DROP DATABASE IF EXISTS slurm_acct_db;
         CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'dpsuite';
         GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"

    spawn slurmdbd slurmdbd -D
    wait_for 30 slurmdbd timeout 5 sacctmgr -i list cluster
    sacctmgr -i add cluster $CLUSTER >/dev/null 2>&1 || true # before slurmctld registers
    spawn slurmctld slurmctld -D -i
    wait_for 30 slurmctld timeout 5 scontrol ping
    if [[ $NODES == 1 ]]; then
        spawn slurmd slurmd -D
    else
        local name
        for name in "${NODE_NAMES[@]}"; do
            start_node "$name"
        done
    fi
    wait_for 30 "the nodes (idle in sinfo)" node_idle
    trap - ERR EXIT
    log "up: $(sinfo -h -N -p debug -o '%N %c CPUs %t') (SLURM_CONF=$SLURM_CONF)"
}

alive() { [[ -f $DIR/pids/$1 ]] && kill -0 "$(cat "$DIR/pids/$1")" 2>/dev/null; }

status() {
    for name in "${PROCESSES[@]}"; do
        [[ $name == munged && ! -f $DIR/pids/munged ]] && continue # the system's munged
        alive "$name" || {
            echo "$name is not running"
            return 1
        }
    done
    scontrol ping >/dev/null && sinfo -h -N -p debug -o '%N %c CPUs %t'
}

stop_recorded() {
    # All at once, in `PROCESSES` order, then wait for each (at most 10 s, then SIGKILL): each
    # takes 1-3 s to end, 10 s one after the other. The next start wipes state and accounting,
    # so nothing is lost if slurmctld outlives the slurmdbd it reports to.
    local name pids=()
    for name in "${PROCESSES[@]}"; do
        alive "$name" || continue
        pids+=("$(cat "$DIR/pids/$name")")
        kill -TERM "${pids[-1]}"
    done
    for ((i = 0; i < 100; i++)); do
        local left=0 pid
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && left=1; done
        ((left)) || break
        sleep 0.1
    done
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"; done
    for name in "${PROCESSES[@]}"; do rm -f "$DIR/pids/$name"; done
    return 0
}

stop() {
    if alive slurmctld; then # jobs first: their processes belong to slurmd's job steps
        local jobs
        jobs=$(squeue -h -o %i 2>/dev/null || true)
        if [[ -n $jobs ]]; then
            scancel $jobs 2>/dev/null || true
        fi
        for ((i = 0; i < 150; i++)); do
            [[ -z $(squeue -h -o %i 2>/dev/null) ]] && break
            sleep 0.2
        done
    fi
    stop_recorded
    stop_network
    log "stopped"
}

# The two nodes' network: a bridge on the controller's side, a namespace per node joined to it
# by a veth pair whose node end is shaped to the link rate.
start_network() {
    [[ $NODES == 2 ]] || return 0
    stop_network
    ip link add "$BRIDGE" type bridge
    ip addr add "$CTLD_ADDR/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    local i=11 name
    for name in "${NODE_NAMES[@]}"; do
        ip netns add "dps-$name"
        ip link add "dps-$name-br" type veth peer name eth0 netns "dps-$name"
        ip link set "dps-$name-br" master "$BRIDGE" up
        ip -n "dps-$name" addr add "$NET.$i/24" dev eth0
        ip -n "dps-$name" link set lo up
        ip -n "dps-$name" link set eth0 up
        # burst: at least rate/HZ, or tbf cannot reach its rate.
        tc -n "dps-$name" qdisc add dev eth0 root tbf rate "$LINK_RATE" burst 512kb latency 50ms
        i=$((i + 1))
    done
    for name in "${NODE_NAMES[@]}"; do
        wait_for 10 "the link of $name" link_up "$name"
    done
}

link_up() { [[ $(ip -n "dps-$1" -o link show eth0) == *LOWER_UP* ]]; }

# Remove whatever start_network created (safe to call when nothing is there).
stop_network() {
    [[ $NODES == 2 ]] || return 0
    local name pid
    for name in "${NODE_NAMES[@]}"; do
        [[ -e /run/netns/dps-$name ]] || continue
        for pid in $(ip netns pids "dps-$name"); do # what a killed job left in the node
            kill -KILL "$pid" 2>/dev/null || true
        done
        ip netns del "dps-$name" # takes the veth pair with it
    done
    for name in "${NODE_NAMES[@]}"; do
        ip link del "dps-$name-br" 2>/dev/null || true
    done
    ip link del "$BRIDGE" 2>/dev/null || true
    return 0
}

# slurmd of node NAME in its namespace, under its own hostname. nsenter, not `ip netns exec`,
# which mounts a /sys of its own without the cgroup filesystem slurmd looks for.
start_node() {
    mkdir -p "$DIR/spool/$1"
    spawn "slurmd-$1" nsenter --net="/run/netns/dps-$1" unshare --uts -- \
        sh -c "hostname $1 && exec slurmd -D -N $1"
}

# A node that comes back: its slurmd again, then idle (ReturnToService=2 resumes it).
revive_node() {
    local name=${1:-}
    [[ -e /run/netns/dps-$name ]] || die "no node $name (nodes: ${NODE_NAMES[*]})"
    alive "slurmd-$name" || start_node "$name"
    wait_for 60 "node $name (idle in sinfo)" node_idle
    log "node $name is back"
}

# A node that dies: every process in its namespace (slurmd, its job steps, their ranks) SIGKILLed.
kill_node() {
    [[ $NODES == 2 ]] || die "kill-node needs the two-node cluster (DPSUITE_SLURM_NODES=2)"
    local name=${1:-} pid
    [[ -e /run/netns/dps-$name ]] || die "no node $name (nodes: ${NODE_NAMES[*]})"
    for pid in $(ip netns pids "dps-$name"); do
        kill -KILL "$pid" 2>/dev/null || true
    done
    rm -f "$DIR/pids/slurmd-$name"
    log "killed node $name"
}

# Whatever the cluster left on this host, one thing a line (nothing when all is gone).
leftovers() {
    local name
    for name in "${PROCESSES[@]}"; do
        alive "$name" && echo "process $name ($(cat "$DIR/pids/$name"))"
    done
    [[ $NODES == 2 ]] || return 0
    for name in "${NODE_NAMES[@]}"; do
        [[ -e /run/netns/dps-$name ]] && echo "namespace dps-$name"
        ip link show "dps-$name-br" >/dev/null 2>&1 && echo "veth dps-$name-br"
    done
    ip link show "$BRIDGE" >/dev/null 2>&1 && echo "bridge $BRIDGE"
    return 0
}

case ${1:-} in
install) install_packages ;;
start) start ;;
stop) stop ;;
status) status ;;
env) echo "export SLURM_CONF=$SLURM_CONF" ;;
kill-node) kill_node "${2:-}" ;;
revive-node) revive_node "${2:-}" ;;
leftovers) leftovers ;;
*)
    echo "usage: $0 start|stop|status|env|install|kill-node NAME|revive-node NAME|leftovers" >&2
    exit 2
    ;;
esac
