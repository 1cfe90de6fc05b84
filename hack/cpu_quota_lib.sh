# shellcheck shell=bash
# hack/cpu_quota_lib.sh: a cgroup with a CPU quota, for worker/cpu_quota_test.sh and
# bench/cpu_quota.sh (source it). Root only; cgroup v1 (the cpu controller) or v2 (cpu delegated).
#
#   quota_cgroup_make NAME   makes /sys/fs/cgroup[/cpu]/NAME.$$ (sets QUOTA_CG), removed at EXIT;
#                            returns 77 with a reason on stderr when this host cannot
#   quota_cgroup_set CPUS_X100000   its quota in microseconds per 100 ms period (150000: 1.5 CPUs)
#   quota_cgroup_exec CMD...        runs CMD inside it (OMP_NUM_THREADS unset unless in CMD's env)

quota_cgroup_make() {
    [ "$(id -u)" = 0 ] || { echo "needs root to make a cgroup" >&2; return 77; }
    if [ -d /sys/fs/cgroup/cpu ] && [ -w /sys/fs/cgroup/cpu ]; then
        QUOTA_CG=/sys/fs/cgroup/cpu/$1.$$ QUOTA_V=1
    elif [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers; then
        echo +cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
        QUOTA_CG=/sys/fs/cgroup/$1.$$ QUOTA_V=2
    else
        echo "no writable cgroup cpu controller" >&2
        return 77
    fi
    mkdir "$QUOTA_CG" || return 77
    # shellcheck disable=SC2064 # the path now, not at exit
    trap "rmdir '$QUOTA_CG' 2>/dev/null || true" EXIT
    if [ "$QUOTA_V" = 2 ] && [ ! -f "$QUOTA_CG/cpu.max" ]; then
        echo "the cpu controller is not delegated to $QUOTA_CG" >&2
        return 77
    fi
}

quota_cgroup_set() {
    if [ "$QUOTA_V" = 1 ]; then
        echo 100000 >"$QUOTA_CG/cpu.cfs_period_us"
        echo "$1" >"$QUOTA_CG/cpu.cfs_quota_us"
    else
        echo "$1 100000" >"$QUOTA_CG/cpu.max"
    fi
}

quota_cgroup_exec() {
    local join=tasks
    [ "$QUOTA_V" = 1 ] || join=cgroup.procs
    bash -c "echo \$\$ >'$QUOTA_CG/$join'; exec \"\$@\"" _ "$@"
}
