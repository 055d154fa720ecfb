#!/usr/bin/env bash
# Runs one command line in a fresh root, as root, from /root/neardup:
#
#   unshare --mount --pid --fork --kill-child --propagation private \
#       bash tests/fresh/enter.sh ROOT 'COMMAND LINE' [NAME=VALUE...]
#
# Called by tests/fresh/run.sh inside new mount and PID namespaces: the
# /proc, /dev and /sys mounts made here belong to that mount namespace and
# go away with it, and every process started in the root dies with the
# namespace's first process, on every exit path (a kill -9 of unshare too).
# The command sees a clean environment (PATH, HOME, LANG, TERM and the
# NAME=VALUE pairs given), as a login on a new machine would.
set -euo pipefail
root="${1:?ROOT}"
cmd="${2:?COMMAND}"
shift 2
[[ "$$" == 1 ]] || { echo "enter.sh: not the first process of a new PID namespace" >&2; exit 125; }
mount --make-rprivate /
# The root a mount point, as / is on a machine (ip netns exec remounts it).
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount -t sysfs -o ro sysfs "$root/sys" 2>/dev/null || true
mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm" 2>/dev/null || true
exec chroot "$root" /usr/bin/env -i \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LANG=C.UTF-8 TERM=dumb "$@" \
    /bin/bash -c "cd /root/neardup && $cmd"
