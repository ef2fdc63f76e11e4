#!/usr/bin/env bash
# A real single-host SLURM for the tests: tests/cluster/slurm.sh start|stop|status|env|install
#
#   install install Debian's slurm-wlm, munge, slurmdbd and mariadb-server when missing (root)
#   start   install Debian's slurm-wlm, munge, slurmdbd and mariadb-server when missing (root),
#           write a one-node slurm.conf from `slurmd -C`, start munged -> mariadbd -> slurmdbd ->
#           slurmctld -> slurmd, wait until the node is idle, record their pids
#   stop    cancel the cluster's jobs, then stop exactly the processes `start` recorded
#   status  exit 0 when the recorded processes live and the node answers
#   env     print `export SLURM_CONF=...` (clients find the cluster through it)
#
# Everything lives in $DPSUITE_SLURM_DIR (default /tmp/dpsuite-slurm): configuration, state,
# accounting database, munge key, logs, pids. Nothing under /etc is changed, so the
# cluster is reached through SLURM_CONF only. Each start wipes the controller's state and the
# accounting database together (job ids restart at 1). No systemd or cgroups are needed:
# proctrack/linuxproc tracks processes, task/affinity binds CPUs, select/cons_tres + CR_Core
# allocates cores, and slurmdbd (on MariaDB) keeps the accounting that `sacct` reads.
set -euo pipefail

DIR=${DPSUITE_SLURM_DIR:-/tmp/dpsuite-slurm}
PORT_BASE=${DPSUITE_SLURM_PORT_BASE:-6817}   # slurmctld, slurmd, slurmdbd, mariadb: base .. +3
CTLD_PORT=$PORT_BASE
SLURMD_PORT=$((PORT_BASE + 1))
DBD_PORT=$((PORT_BASE + 2))
DB_PORT=$((PORT_BASE + 3))
PACKAGES=(slurm-wlm munge slurmdbd mariadb-server)
PROCESSES=(slurmd slurmctld slurmdbd mariadbd munged)   # the order `stop` ends them in
MUNGE_SOCKET_DIR=/run/munge
export SLURM_CONF=$DIR/etc/slurm.conf

log() { echo "slurm.sh: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}

install_packages() {
    local missing=()
    for bin in sbatch slurmctld slurmd slurmdbd munged mariadbd; do
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

write_configs() {
    local node
    node=$(slurmd -C | head -n 1) # NodeName=host CPUs=.. Boards=.. ... RealMemory=..
    [[ $node == NodeName=* ]] || die "slurmd -C printed no node line: $node"
    cat >"$DIR/etc/slurm.conf" <<EOF
ClusterName=dpsuite
SlurmctldHost=$(hostname -s)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
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
$node State=UNKNOWN
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
    for ((i = 0; i < limit * 10; i++)); do
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
    trap 'stop_recorded' ERR EXIT # a start that fails leaves nothing running
    install_packages
    rm -rf "$DIR/state" "$DIR/spool" "$DIR/run" "$DIR/log" "$DIR/pids"
    mkdir -p "$DIR"/{etc,state,spool,run,log,pids,munge,mysql/data}
    chmod 700 "$DIR/munge"
    write_configs

    # SLURM's clients and daemons talk to munged on its default socket. One already serving it
    # (the system's) is used as it is; otherwise we start one with a key of our own.
    if ! munge -n >/dev/null 2>&1; then
        [[ -f $DIR/munge/munge.key ]] || head -c 1024 /dev/urandom >"$DIR/munge/munge.key"
        chmod 400 "$DIR/munge/munge.key"
        mkdir -p "$MUNGE_SOCKET_DIR" && chmod 755 "$MUNGE_SOCKET_DIR"
        spawn munged munged --foreground --force --key-file="$DIR/munge/munge.key" \
            --pid-file="$DIR/run/munged.pid" --seed-file="$DIR/munge/seed" \
            --log-file="$DIR/log/munged.log"
        wait_for 10 munged munge -n
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
    sacctmgr -i add cluster dpsuite >/dev/null 2>&1 || true # before slurmctld registers
    spawn slurmctld slurmctld -D -i
    wait_for 30 slurmctld timeout 5 scontrol ping
    spawn slurmd slurmd -D
    wait_for 30 "the node (idle in sinfo)" node_idle
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
    for name in "${PROCESSES[@]}"; do
        alive "$name" || continue
        local pid
        pid=$(cat "$DIR/pids/$name")
        kill -TERM "$pid"
        for ((i = 0; i < 100; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
        rm -f "$DIR/pids/$name"
    done
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
    log "stopped"
}

case ${1:-} in
install) install_packages ;;
start) start ;;
stop) stop ;;
status) status ;;
env) echo "export SLURM_CONF=$SLURM_CONF" ;;
*)
    echo "usage: $0 start|stop|status|env|install" >&2
    exit 2
    ;;
esac
