#!/bin/sh
# A real single-node Slurm cluster on this machine, for the tests and for trying `snakemake --profile
# profiles/slurm` without a cluster: this host is the controller and the only node, with munge for
# authentication, as root.
#
#   slurm_local.sh up       install slurm-wlm and munge if missing (apt-get), write the config, start munged,
#                           slurmctld and slurmd, wait until the node is idle. Idempotent: on a running cluster
#                           it only checks it.
#   slurm_local.sh down     cancel every job, stop the daemons (and any job step left), leave no daemon behind,
#                           and remove the configuration it wrote (see `down` for why).
#   slurm_local.sh status   the daemons and `sinfo`; exits 1 when the cluster is not up.
#
# It writes /etc/slurm/slurm.conf only when none is there or the one there is its own (first line below): a real
# cluster's configuration is never touched. No accounting database: `sacct` answers "accounting storage is
# disabled", so profiles/slurm asks squeue for job states (MinJobAge keeps finished jobs in squeue for 5
# minutes); every finished job is still recorded, by the job-completion log (JOBCOMP below).
set -eu
PATH="$PATH:/usr/sbin:/sbin"  # the daemons live there; a non-login root shell may not have it

CONF_DIR=/etc/slurm
CONF="$CONF_DIR/slurm.conf"
MARK="# written by kvtier workflow/scripts/slurm_local.sh"
JOBCOMP=/var/log/slurm/kvtier-jobcomp.log
HERE="$(cd "$(dirname "$0")" && pwd)"

say() { echo "slurm_local: $*" >&2; }
die() { say "$*"; exit 1; }

need_root() {
    [ "$(id -u)" = 0 ] || die "needs root (it installs packages and starts munged, slurmctld and slurmd); run it with sudo"
}

# A pid is alive when it exists and is not a zombie (orphaned daemons are not reaped on every machine).
alive() {
    state=$(ps -o stat= -p "$1" 2>/dev/null || true)
    [ -n "$state" ] && [ "${state#Z}" = "$state" ]
}

pids_of() { pgrep -x "$1" 2>/dev/null || true; }

running() {
    for pid in $(pids_of "$1"); do
        alive "$pid" && return 0
    done
    return 1
}

stop_all() {  # NAME: TERM every live process of that name, then KILL what is left after 10 s
    for pid in $(pids_of "$1"); do alive "$pid" && kill "$pid" 2>/dev/null || true; done
    n=0
    while running "$1" && [ $n -lt 20 ]; do sleep 0.5; n=$((n + 1)); done
    for pid in $(pids_of "$1"); do alive "$pid" && kill -9 "$pid" 2>/dev/null || true; done
    n=0
    while running "$1" && [ $n -lt 10 ]; do sleep 0.5; n=$((n + 1)); done
    ! running "$1" || die "$1 is still running after SIGKILL"
}

write_conf() {
    host=$(hostname -s)
    cpus=$(nproc)
    # What the node offers jobs: its memory less 10 % for the system, in MB.
    mem=$(awk '/^MemTotal:/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
    mkdir -p "$CONF_DIR" /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
    tmp="$CONF.kvtier-tmp"
    cat > "$tmp" <<EOF
$MARK
ClusterName=kvtier-local
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$JOBCOMP
MinJobAge=300
# A job that asks for more than the node has is refused at submission (sbatch fails and Snakemake says so), not
# left pending for ever (reason PartitionConfig), as Slurm does by default.
EnforcePartLimits=ALL
KillWait=10
ReturnToService=2
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=main Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
    if [ -f "$CONF" ] && cmp -s "$tmp" "$CONF"; then
        rm -f "$tmp"
        return
    fi
    mv "$tmp" "$CONF"
    say "wrote $CONF ($host: $cpus CPUs, $mem MB)"
}

start_munge() {
    running munged && return
    if [ ! -s /etc/munge/munge.key ]; then
        mungekey -c -f -k /etc/munge/munge.key 2>/dev/null || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null
    fi
    chown munge:munge /etc/munge/munge.key
    chmod 400 /etc/munge/munge.key
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge
    runuser -u munge -- /usr/sbin/munged
    n=0
    until munge -n 2>/dev/null | unmunge >/dev/null 2>&1; do
        n=$((n + 1)); [ $n -lt 20 ] || die "munged started but does not answer (see /var/log/munge/munged.log)"
        sleep 0.5
    done
}

up() {
    need_root
    sh "$HERE/system_tools.sh" slurmctld=slurm-wlm munged=munge
    for tool in slurmctld slurmd munged sbatch squeue scancel; do
        command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed (apt-get install slurm-wlm munge) and could not be installed here"
    done
    if [ -f "$CONF" ] && [ "$(head -n 1 "$CONF")" != "$MARK" ]; then
        die "$CONF is not kvtier's (a real cluster's configuration?): not touching it; use that cluster, or move it away"
    fi
    write_conf
    start_munge
    running slurmctld || slurmctld
    running slurmd || slurmd
    n=0
    until [ "$(sinfo -h -o %T 2>/dev/null | head -n 1)" = "idle" ] || [ "$(sinfo -h -o %T 2>/dev/null | head -n 1)" = "mixed" ] \
          || [ "$(sinfo -h -o %T 2>/dev/null | head -n 1)" = "allocated" ]; do
        n=$((n + 1))
        if [ $n -ge 60 ]; then
            sinfo >&2 || true
            die "the node did not come up in 30 s (see /var/log/slurm/slurmctld.log and slurmd.log)"
        fi
        # A node left down by an earlier teardown is brought back.
        scontrol update NodeName="$(hostname -s)" State=RESUME >/dev/null 2>&1 || true
        sleep 0.5
    done
    say "up: $(sinfo -h -o '%P %D %T %c CPUs %m MB' | head -n 1); job records in $JOBCOMP"
}

down() {
    need_root
    if running slurmctld && command -v squeue >/dev/null 2>&1; then
        jobs=$(squeue -h -o %i 2>/dev/null || true)
        if [ -n "$jobs" ]; then
            say "cancelling jobs $(echo $jobs)"
            # shellcheck disable=SC2086
            scancel $jobs 2>/dev/null || true
            n=0
            while [ -n "$(squeue -h -o %i 2>/dev/null || true)" ] && [ $n -lt 30 ]; do sleep 0.5; n=$((n + 1)); done
        fi
    fi
    stop_all slurmd
    stop_all slurmstepd
    stop_all slurmctld
    stop_all munged
    # Its own configuration goes too: with it left behind and no controller, every `scontrol show config`
    # retries the connection for about 10 s, and the Slurm executor plugin asks that at every Snakemake start
    # (its help text), local runs included. With no configuration scontrol fails at once. A real cluster's
    # configuration is never touched.
    if [ -f "$CONF" ] && [ "$(head -n 1 "$CONF")" = "$MARK" ]; then
        rm -f "$CONF"
    fi
    say "down: no slurmctld, slurmd, slurmstepd or munged left; $CONF removed if it was this script's"
}

status() {
    rc=0
    for daemon in munged slurmctld slurmd; do
        if running "$daemon"; then echo "$daemon: running"; else echo "$daemon: not running"; rc=1; fi
    done
    [ $rc -eq 0 ] && sinfo
    return $rc
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) status ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
