#!/usr/bin/env bash
# A single-node SLURM cluster on this machine, for normbench's `slurm` tests and for trying
# `normbench sweep --launcher slurm` without a real cluster.
#
#   scripts/slurm_cluster.sh start    # install the packages if missing (root), start everything
#   scripts/slurm_cluster.sh status   # exit 0 when the node is up and idle or busy
#   scripts/slurm_cluster.sh stop     # cancel jobs, stop every daemon by its pid file
#
# then `export SLURM_CONF=${NORMBENCH_SLURM_DIR:-/tmp/normbench-slurm}/etc/slurm.conf`: sbatch,
# squeue, sacct and scancel (and so submitit) read the cluster's config from there.
#
# Debian 12 packages (slurm 22.05, munge 0.5.15, MariaDB for accounting). No systemd: this
# script starts munged, mariadbd, slurmdbd, slurmctld and slurmd itself, in that order, each
# wait bounded by wall time. Every config file, key, socket, database, log and pid file lives
# under the state directory; nothing under /etc is written. Everything listens on 127.0.0.1.
# `start` is idempotent: a running cluster is left as it is; otherwise leftovers are stopped
# and the cluster starts from a fresh state (empty queue, empty accounting database).
set -euo pipefail

STATE=${NORMBENCH_SLURM_DIR:-/tmp/normbench-slurm}
DB_PORT=${NORMBENCH_SLURM_DB_PORT:-3306}
PACKAGES=(slurmctld slurmd slurm-client munge slurmdbd mariadb-server)
CLUSTER=normbench
PARTITION=debug

ETC=$STATE/etc
MUNGE=$STATE/munge
# munged's socket: the default path, because slurm's accounting connections (sacctmgr, sacct to
# slurmdbd) ignore AuthInfo=socket= and look only there.
MUNGE_SOCKET=/run/munge/munge.socket.2
DB=$STATE/mysql
SLURM=$STATE/slurm
export SLURM_CONF=$ETC/slurm.conf

T0=${EPOCHREALTIME/./}
# Messages on stderr, stamped with the seconds since this script started.
log() {
    local tenths=$(((${EPOCHREALTIME/./} - T0) / 100000))
    printf 'slurm_cluster: [%d.%d s] %s\n' $((tenths / 10)) $((tenths % 10)) "$*" >&2
}
die() {
    log "error: $*"
    exit 1
}

# wait_for SECONDS DESCRIPTION COMMAND...: run COMMAND every 0.2 s until it succeeds; give up
# after SECONDS of wall time (each try is itself capped, so a hanging client cannot stall it).
wait_for() {
    local seconds=$1 what=$2
    shift 2
    local deadline=$((SECONDS + seconds))
    until timeout 5 "$@" >/dev/null 2>&1; do
        if ((SECONDS >= deadline)); then
            log "$what: not ready after ${seconds} s"
            return 1
        fi
        sleep 0.2
    done
}

pid_alive() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

# stop_pids NAME:PIDFILE...: SIGTERM to all of them, up to 10 s for them to exit, then SIGKILL
# (slurmd ignores SIGTERM while it cannot reach its controller).
stop_pids() {
    local entry pids=() names=()
    for entry in "$@"; do
        if pid_alive "${entry#*:}"; then
            pids+=("$(cat "${entry#*:}")")
            names+=("${entry%%:*}")
            kill -TERM "${pids[-1]}" 2>/dev/null || true
        fi
        rm -f "${entry#*:}"
    done
    local deadline=$((SECONDS + 10)) i
    for i in "${!pids[@]}"; do
        while kill -0 "${pids[i]}" 2>/dev/null && ((SECONDS < deadline)); do
            sleep 0.1
        done
        if kill -0 "${pids[i]}" 2>/dev/null; then
            log "${names[i]} (pid ${pids[i]}) ignored SIGTERM for 10 s: SIGKILL"
            kill -KILL "${pids[i]}" 2>/dev/null || true
        fi
    done
    ((${#names[@]} == 0)) || log "stopped ${names[*]}"
}

ensure_packages() {
    local missing=()
    for package in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
            missing+=("$package")
    done
    ((${#missing[@]} == 0)) && return 0
    ((EUID == 0)) || die "missing packages (${missing[*]}); install them as root or run this as root"
    command -v apt-get >/dev/null || die "missing packages (${missing[*]}) and no apt-get"
    log "installing ${missing[*]}"
    local started=$SECONDS
    # Package lists: fetched once, when this machine has none.
    if ! compgen -G "/var/lib/apt/lists/*_Packages*" >/dev/null; then
        apt-get update -q >/dev/null
    fi
    # policy-rc.d (containers) or the missing systemd keep the packages' services from starting.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" \
        >"${TMPDIR:-/tmp}/normbench-slurm-apt.log" 2>&1 ||
        die "apt-get install failed; see ${TMPDIR:-/tmp}/normbench-slurm-apt.log"
    log "installed in $((SECONDS - started)) s"
}

cluster_up() {
    pid_alive "$SLURM/slurmctld.pid" && pid_alive "$SLURM/slurmd.pid" &&
        timeout 5 sinfo -h -n "$(hostname -s)" -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'
}

write_configs() {
    local host node cpus memory password
    host=$(hostname -s)
    node=$(slurmd -C | head -n 1) # NodeName=<host> CPUs=... RealMemory=...
    cpus=$(sed -E 's/.*CPUs=([0-9]+).*/\1/' <<<"$node")
    memory=$(sed -E 's/.*RealMemory=([0-9]+).*/\1/' <<<"$node")
    password=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
    mkdir -p "$ETC"
    cat >"$ETC/slurm.conf" <<EOF
# Written by scripts/slurm_cluster.sh: a one-node cluster on 127.0.0.1.
ClusterName=$CLUSTER
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=6817
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# A requeued job waits cred_expire + 1 s before it may start again (default 120 s).
AuthInfo=cred_expire=10
StateSaveLocation=$SLURM/state
SlurmdSpoolDir=$SLURM/spool
SlurmctldPidFile=$SLURM/slurmctld.pid
SlurmdPidFile=$SLURM/slurmd.pid
SlurmctldLogFile=$SLURM/slurmctld.log
SlurmdLogFile=$SLURM/slurmd.log
# No cgroups in a container: plain process tracking, no task binding, no usage sampling.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
# Cores and memory are consumable: without DefMemPerCPU a job takes the node's whole memory
# and jobs run one at a time.
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=$((memory / cpus < 1024 ? memory / cpus : 1024))
# Schedule every 2 s, not at the next 60 s pass.
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
ReturnToService=2
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=6819
JobCompType=jobcomp/none
$node NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=$PARTITION Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
    (
        umask 077
        cat >"$ETC/slurmdbd.conf" <<EOF
# Written by scripts/slurm_cluster.sh: accounting for the one-node cluster.
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6819
SlurmUser=root
PidFile=$SLURM/slurmdbd.pid
LogFile=$SLURM/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$password
StorageLoc=slurm_acct_db
EOF
    )
    printf '%s' "$password"
}

start_munge() {
    mkdir -p "$MUNGE"
    chown munge:munge "$MUNGE"
    chmod 0700 "$MUNGE"
    mkdir -p "${MUNGE_SOCKET%/*}"
    chown munge:munge "${MUNGE_SOCKET%/*}"
    chmod 0755 "${MUNGE_SOCKET%/*}" # clients need to reach the socket
    runuser -u munge -- mungekey --create --keyfile="$MUNGE/munge.key"
    runuser -u munge -- munged --socket="$MUNGE_SOCKET" --key-file="$MUNGE/munge.key" \
        --pid-file="$MUNGE/munged.pid" --log-file="$MUNGE/munged.log" \
        --seed-file="$MUNGE/munged.seed"
    wait_for 10 munged bash -c "munge -n | unmunge"
    log "munged up"
}

start_mariadb() {
    local password=$1
    mkdir -p "$DB"
    mariadb-install-db --no-defaults --user=root --datadir="$DB/data" --skip-test-db \
        --auth-root-authentication-method=socket >"$DB/install.log" 2>&1 ||
        die "mariadb-install-db failed; see $DB/install.log"
    setsid -f mariadbd --no-defaults --user=root --datadir="$DB/data" \
        --socket="$DB/mysqld.sock" --pid-file="$DB/mysqld.pid" --log-error="$DB/error.log" \
        --bind-address=127.0.0.1 --port="$DB_PORT" --skip-name-resolve \
        --innodb-buffer-pool-size=64M </dev/null >/dev/null 2>&1
    wait_for 30 mariadb mariadb-admin --no-defaults --socket="$DB/mysqld.sock" ping
    # A fresh database, but ALTER USER all the same: CREATE USER IF NOT EXISTS would keep an
    # older password.
    mariadb --no-defaults --socket="$DB/mysqld.sock" <<EOF
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1';
ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$password';
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
EOF
    log "mariadb up"
}

start() {
    ensure_packages
    if cluster_up; then
        log "already running (SLURM_CONF=$SLURM_CONF)"
        return 0
    fi
    ((EUID == 0)) || die "starting the daemons needs root (slurmd runs jobs as their users)"
    local password
    stop_daemons
    rm -rf "$STATE"
    mkdir -p "$STATE" "$SLURM/state" "$SLURM/spool"
    password=$(write_configs)
    start_munge
    start_mariadb "$password"
    slurmdbd
    # slurmctld exits on its first start when slurmdbd does not answer yet.
    wait_for 30 slurmdbd sacctmgr -n list cluster
    log "slurmdbd up"
    slurmctld
    wait_for 30 slurmctld bash -c "scontrol ping | grep -q UP"
    log "slurmctld up"
    slurmd
    wait_for 30 "the node" bash -c \
        "sinfo -h -n $(hostname -s) -o %T | grep -qE '^(idle|mixed|allocated)$'"
    log "cluster up: partition $PARTITION, node $(hostname -s)"
    echo "export SLURM_CONF=$SLURM_CONF"
}

stop_daemons() {
    stop_pids slurmd:"$SLURM/slurmd.pid" slurmctld:"$SLURM/slurmctld.pid"
    stop_pids slurmdbd:"$SLURM/slurmdbd.pid" mariadbd:"$DB/mysqld.pid" munged:"$MUNGE/munged.pid"
}

stop() {
    if pid_alive "$SLURM/slurmctld.pid" && [[ -n $(timeout 5 squeue -h -o %i 2>/dev/null) ]]; then
        # Jobs first, while slurmd can still signal them; then wait (bounded) for the queue
        # to drain so no job step outlives its daemon.
        timeout 10 squeue -h -o %F | sort -u | xargs -r timeout 10 scancel 2>/dev/null || true
        wait_for 15 "the queue" bash -c '[[ -z $(squeue -h -o %i) ]]' || true
    fi
    stop_daemons
    log "stopped (state and logs kept in $STATE)"
}

status() {
    local name pidfile up=0
    for name in munged:$MUNGE/munged.pid mariadbd:$DB/mysqld.pid slurmdbd:$SLURM/slurmdbd.pid \
        slurmctld:$SLURM/slurmctld.pid slurmd:$SLURM/slurmd.pid; do
        pidfile=${name#*:}
        if pid_alive "$pidfile"; then
            printf '%-10s running (pid %s)\n' "${name%%:*}" "$(cat "$pidfile")"
        else
            printf '%-10s stopped\n' "${name%%:*}"
            up=1
        fi
    done
    if ((up == 0)) && cluster_up; then
        timeout 5 sinfo
        echo "export SLURM_CONF=$SLURM_CONF"
        return 0
    fi
    return 3
}

case ${1:-} in
start) start ;;
stop) stop ;;
status) status ;;
*)
    echo "usage: $0 start|stop|status  (state in \${NORMBENCH_SLURM_DIR:-/tmp/normbench-slurm})" >&2
    exit 2
    ;;
esac
