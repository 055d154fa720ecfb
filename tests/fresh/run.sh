#!/usr/bin/env bash
# The fresh-machine stage: what a new user does on a minimal Debian 12, for
# real, then the container image and the systemd unit, for real.
#
#   tests/fresh/run.sh [--out DIR] [PART...]
#
# PART (default all, in this order):
#   readme     a copy of a cached `debootstrap --variant=minbase bookworm` root
#              gets the source; the README's first command, extracted from
#              README.md, runs there as written (server in the background);
#              /healthz, /readyz and a /check-original round trip are checked
#              from the host over 127.0.0.1; SIGTERM stops it with exit code 0
#   tests      in that root: deploy/install-deps.sh --test, the contract's npm
#              packages, the build; every tool the integration tests use is
#              there (tests/fresh/tools.py), the unit suite, and a test that
#              runs each tool; no test may skip (NEARDUP_FRESH_TESTS=suites
#              runs the whole unit and integration suites instead, =readme the
#              README's whole test command without this stage, =none nothing)
#   systemd    that root gets systemd and dbus, boots with systemd-nspawn -b,
#              installs and starts deploy/systemd/neardupd.service as its
#              header says; probes, drain (/readyz 503) and stop within
#              TimeoutStopSec, exit status 0, the article still there after a
#              restart
#   container  the minbase root imported as debian:bookworm-slim; the
#              Dockerfile built with podman (no registry), run with a volume:
#              HEALTHCHECK passes, uid 10001, only the runtime packages on top
#              of the base, register, stop within --stop-timeout with exit 0,
#              a new container on the same volume finds the article
#
# Needs root, network to Debian's mirror, debootstrap, podman, runc and
# systemd-container (deploy/install-deps.sh --test installs them), and
# tests/contract/node_modules (tests/contract/install.sh; run when absent).
# One line per check: "fresh NAME: PASS|FAIL|SKIP detail", also in
# DIR/results.txt (default build-fresh); logs in DIR/logs/, wall and CPU
# seconds per part in DIR/times.txt. Exit 1 if any check failed.
#
# Cache (NEARDUP_FRESH_CACHE, default /var/cache/neardup-fresh, outside the
# clone since CI clones anew each run): the minbase root, keyed by what makes
# it (suite, variant, mirror, this recipe's version) and remade after 30
# days; the .deb files apt downloaded in earlier runs (apt still checks them
# against the mirror's lists, and fetches any that changed). Each run works
# in a copy, removed at the end. NEARDUP_FRESH_MIRROR overrides the mirror.
set -uo pipefail
cd "$(dirname "$0")/../.."
src="$(pwd)"

out=build-fresh
parts=()
while (($#)); do
    case "$1" in
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,42p' "$0"; exit 0 ;;
    readme|tests|systemd|container) parts+=("$1"); shift ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
((${#parts[@]})) || parts=(readme tests systemd container)
want() { [[ " ${parts[*]} " == *" $1 "* ]]; }

cache="${NEARDUP_FRESH_CACHE:-/var/cache/neardup-fresh}"
mirror="${NEARDUP_FRESH_MIRROR:-http://deb.debian.org/debian}"
tests_mode="${NEARDUP_FRESH_TESTS:-tools}"
suite=bookworm
recipe=1 # bump when the way the base root is made changes
mkdir -p "$out/logs"
out="$(cd "$out" && pwd)"
: >"$out/results.txt"
: >"$out/times.txt"
run_id="$(date +%Y%m%d%H%M%S)-$$"
failures=0

# result NAME PASS|FAIL|SKIP [DETAIL...]
result() {
    local name="$1" status="$2"
    shift 2
    echo "fresh $name: $status${*:+ $*}" | tee -a "$out/results.txt"
    [[ "$status" != FAIL ]] || failures=$((failures + 1))
}

# cpu_now: CPU centiseconds (user + system) of the processes this shell has
# waited for (a daemonised one, such as podman's conmon, is not counted).
hz="$(getconf CLK_TCK 2>/dev/null || echo 100)"
cpu_now() { # called as $(cpu_now): this shell is $$
    local f
    read -ra f <"/proc/$$/stat"
    echo $(((f[15] + f[16]) * 100 / hz))
}
# timed PART T0 CPU0: one line of times.txt, "PART SECONDS cpu CPU_SECONDS":
# the wall seconds since T0 ($SECONDS) and the CPU seconds since CPU0 (cpu_now).
timed() {
    local w=$((SECONDS - $2)) c=$((($(cpu_now) - $3) / 100))
    echo "$1 $w cpu $c" >>"$out/times.txt"
    echo "fresh: seconds: $1 $w (CPU $c)"
}

log_tail() { tail -n "${2:-25}" "$1" 2>/dev/null | sed 's/^/    | /'; }

if [[ "$(id -u)" -ne 0 ]]; then
    for p in "${parts[@]}"; do result "$p" SKIP "needs root (debootstrap, chroot, podman, systemd-nspawn)"; done
    exit 0
fi
missing=()
for tool in debootstrap unshare chroot podman runc systemd-nspawn nsenter python3 flock; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
if ((${#missing[@]})); then
    for p in "${parts[@]}"; do result "$p" FAIL "missing ${missing[*]} (deploy/install-deps.sh --test)"; done
    exit 1
fi

mkdir -p "$cache/debs"
work="$cache/run-$run_id"
bg_pids=()
podman_objs=() # "container NAME" / "volume NAME" / "image NAME"
pod() { podman --runtime runc --cgroup-manager=cgroupfs "$@"; }
# This sandbox has no CAP_SYS_RESOURCE: containers get limits below the hard ones.
ulimits=(--ulimit nofile=16384:16384 --ulimit nproc=8192:8192)

# Mounts under the work root in this (the host's) mount namespace: none are
# made here (enter.sh and nspawn mount in their own namespaces), but check.
mounts_under() { findmnt -rn -o TARGET | awk -v w="$1" 'index($0, w "/") == 1 || $0 == w'; }

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    # Background jobs and everything under them (a job is a subshell; a
    # killed timeout leaves its child): SIGTERM to all (unshare's end kills
    # its PID namespace; nspawn shuts its container down), then SIGKILL to
    # whatever is left.
    local p q alive tree=()
    for p in "${bg_pids[@]}"; do tree+=("$p" $(descendants "$p")); done
    if ((${#tree[@]})); then
        kill -TERM "${tree[@]}" 2>/dev/null
        # unshare --fork ignores SIGTERM (its child gets it, and a PID
        # namespace's first process ignores it): end it with SIGKILL at once.
        for q in "${tree[@]}"; do
            [[ "$(cat "/proc/$q/comm" 2>/dev/null)" != unshare ]] || kill -KILL "$q" 2>/dev/null
        done
        for _ in $(seq 40); do
            alive=0
            for q in "${tree[@]}"; do running "$q" && alive=1; done
            ((alive)) || break
            sleep 0.5
        done
        ((alive == 0)) || { kill -KILL "${tree[@]}" 2>/dev/null; sleep 1; }
    fi
    local o
    for o in "${podman_objs[@]}"; do
        case "$o" in
        container\ *) pod rm -f -t 5 "${o#container }" >/dev/null 2>&1 ;;
        esac
    done
    for o in "${podman_objs[@]}"; do
        case "$o" in
        volume\ *) pod volume rm -f "${o#volume }" >/dev/null 2>&1 ;;
        image\ *) pod rmi -f "${o#image }" >/dev/null 2>&1 ;;
        esac
    done
    ((${#podman_objs[@]} == 0)) || pod image prune -f >/dev/null 2>&1
    if [[ -d "$work" ]]; then
        # Keep apt's downloads for the next run (hard links: same file system).
        find "$work/var/cache/apt/archives" -maxdepth 1 -name '*.deb' \
            -exec cp -ln -t "$cache/debs" {} + 2>/dev/null ||
            find "$work/var/cache/apt/archives" -maxdepth 1 -name '*.deb' \
                -exec cp -n -t "$cache/debs" {} + 2>/dev/null
        local m
        m="$(mounts_under "$work")"
        if [[ -n "$m" ]]; then
            echo "fresh: unmounting leftovers: $m"
            mounts_under "$work" | sort -r | while read -r t; do umount -l "$t"; done
        fi
        if [[ -z "$(mounts_under "$work")" ]]; then
            for _ in 1 2 3; do
                rm -rf --one-file-system "$work" && break
                sleep 2
            done
        else
            echo "fresh: NOT removing $work: still mounted: $(mounts_under "$work")"
        fi
    fi
    find "$cache/debs" -name '*.deb' -mtime +60 -delete 2>/dev/null
    exit "$rc"
}
trap cleanup EXIT
trap 'echo "fresh: interrupted"; exit 130' INT TERM

# in_root SECONDS LOG 'COMMAND LINE' [NAME=VALUE...]: runs in the work root
# (tests/fresh/enter.sh), bounded in time; returns the command's exit code
# (124 on timeout).
in_root() {
    local secs="$1" log="$2" cmd="$3"
    shift 3
    timeout -k 20 "$secs" unshare --mount --pid --fork --kill-child --propagation private \
        bash "$src/tests/fresh/enter.sh" "$work" "$cmd" "$@" >>"$log" 2>&1 </dev/null
}

# pids_in_root ROOT COMM: host PIDs of processes named COMM whose root is ROOT.
pids_in_root() {
    local p comm
    for p in /proc/[0-9]*; do
        { read -r comm <"$p/comm"; } 2>/dev/null || continue
        [[ "$comm" == "$2" ]] || continue
        [[ "$(readlink "$p/root" 2>/dev/null)" == "$1" ]] && echo "${p#/proc/}"
    done
}

# running PID: the process exists and is not a zombie (a killed job of ours
# stays one until waited for).
running() {
    local st
    st="$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)"
    [[ -n "$st" && "$st" != Z ]]
}

# forget PID: a background job that has been waited for (its PID may be reused).
forget() {
    local keep=() p
    for p in "${bg_pids[@]}"; do [[ "$p" == "$1" ]] || keep+=("$p"); done
    bg_pids=("${keep[@]}")
}

# descendants PID: the PIDs of all processes under PID.
descendants() {
    local c
    for c in $(pgrep -P "$1"); do
        echo "$c"
        descendants "$c"
    done
}

# descendant_named PID COMM: the first descendant of PID named COMM.
descendant_named() {
    local c
    for c in $(pgrep -P "$1"); do
        if [[ "$(cat "/proc/$c/comm" 2>/dev/null)" == "$2" ]]; then
            echo "$c"
            return
        fi
        descendant_named "$c" "$2" && return
    done
    return 1
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

probe() { python3 "$src/tests/fresh/probe.py" "$@" 2>&1; }

# The fenced sh block that follows the line of README.md matching $1.
readme_command() {
    python3 - "$src/README.md" "$1" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
i = text.find(sys.argv[2])
m = re.compile(r"^```sh\n(.*?)^```", re.S | re.M).search(text, i) if i >= 0 else None
lines = [l for l in (m.group(1) if m else "").splitlines() if l.strip() and not l.startswith("#")]
print(lines[0] if len(lines) == 1 else "")
PY
}

# ---- the base root: debootstrap minbase, cached ----------------------------
base_key="$(printf '%s\n' "debootstrap --variant=minbase $suite $mirror" "recipe $recipe" |
    sha256sum | cut -c1-16)"
base="$cache/base-$base_key"
make_base() {
    local log="$out/logs/base.log" t0=$SECONDS c0
    c0="$(cpu_now)"
    exec 9>"$cache/lock"
    flock -w 1800 9 || { result base-root FAIL "waited 30 min for $cache/lock"; return 1; }
    if [[ -f "$base.ok" && -n "$(find "$base.ok" -mtime -30)" && -d "$base" ]]; then
        result base-root PASS "cached: $base (made $(cat "$base.ok"))"
        flock -u 9
        return 0
    fi
    echo "fresh: making $base (debootstrap --variant=minbase $suite $mirror)"
    rm -rf --one-file-system "$base" "$base.ok" "$base.tmp"
    # debootstrap mounts /proc and /sys in the root: in a mount namespace of
    # its own, so they go away with it.
    if ! timeout -k 20 1200 unshare --mount --propagation private \
        debootstrap --variant=minbase "$suite" "$base.tmp" "$mirror" >"$log" 2>&1; then
        result base-root FAIL "debootstrap failed (log: $log)"
        log_tail "$log"
        rm -rf --one-file-system "$base.tmp"
        flock -u 9
        return 1
    fi
    rm -f "$base.tmp"/var/cache/apt/archives/*.deb
    mv "$base.tmp" "$base"
    date -u +%FT%TZ >"$base.ok"
    # Older bases (other keys) are no longer used.
    find "$cache" -maxdepth 1 -name 'base-*' ! -name "base-$base_key" ! -name "base-$base_key.ok" \
        -exec rm -rf --one-file-system {} +
    result base-root PASS "made in $((SECONDS - t0)) s: $base"
    timed base-root "$t0" "$c0"
    flock -u 9
}

# ---- readme: the README's first command in a fresh root --------------------
part_readme() {
    local log="$out/logs/readme.log" t0=$SECONDS
    local cmd
    cmd="$(readme_command "Set up and run the server")"
    if [[ "$cmd" != *"bash deploy/install-deps.sh"*"neardupd"* ]]; then
        result readme-command FAIL "no single command (install-deps ... neardupd) in the sh block after 'Set up and run the server' in README.md: '$cmd'"
        return 1
    fi
    echo "fresh: README's first command: $cmd"
    cp -a --reflink=auto "$base" "$work" || { result readme-command FAIL "copy of $base"; return 1; }
    # Every installed Debian system has /etc/hosts (the installer writes it);
    # debootstrap leaves none.
    printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$work/etc/hosts"
    find "$cache/debs" -maxdepth 1 -name '*.deb' -exec cp -l -t "$work/var/cache/apt/archives" {} + 2>/dev/null ||
        find "$cache/debs" -maxdepth 1 -name '*.deb' -exec cp -t "$work/var/cache/apt/archives" {} +
    mkdir -p "$work/root/neardup"
    if [[ -d "$src/.git" ]]; then
        git -C "$src" ls-files -z -co --exclude-standard |
            tar -C "$src" --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -C "$work/root/neardup" -xf -
    else
        tar -C "$src" --exclude='./build*' --exclude=./data -cf - . | tar -C "$work/root/neardup" -xf -
    fi
    # The README's address is 127.0.0.1:8080; another port when that is taken here.
    local port=8080 env=()
    if ! python3 -c 'import socket; socket.socket().bind(("127.0.0.1", 8080))' 2>/dev/null; then
        port="$(free_port)"
        env=("NEARDUP_LISTEN=127.0.0.1:$port")
        echo "fresh: 127.0.0.1:8080 is taken here; NEARDUP_LISTEN=127.0.0.1:$port"
    fi
    in_root 2400 "$log" "$cmd" "${env[@]}" &
    local job=$! pid=""
    bg_pids+=("$job")
    # Install and build, then the server: wait for it (or for the command to fail).
    local deadline=$((SECONDS + 2400))
    while ((SECONDS < deadline)) && kill -0 "$job" 2>/dev/null; do
        pid="$(pids_in_root "$work" neardupd | head -1)"
        [[ -z "$pid" ]] || break
        sleep 2
    done
    if [[ -z "$pid" ]]; then
        wait "$job"
        local rc=$?
        forget "$job"
        result readme-command FAIL "exit $rc before neardupd started, after $((SECONDS - t0)) s (log: $log)"
        log_tail "$log" 40
        return 1
    fi
    local installed=$((SECONDS - t0))
    local msg
    if msg="$(probe wait "$port" 60)"; then
        result readme-command PASS "install + build + start in ${installed} s"
    else
        result readme-command FAIL "$msg"
        log_tail "$log"
    fi
    msg="$(probe healthz "$port")" && result readme-healthz PASS || result readme-healthz FAIL "$msg"
    msg="$(probe readyz "$port")" && result readme-readyz PASS || result readme-readyz FAIL "$msg"
    if msg="$(probe register "$port" fresh-readme-1)" && msg="$(probe find "$port" fresh-readme-1)"; then
        result readme-check-original PASS "registered, found, near-duplicate caught"
    else
        result readme-check-original FAIL "$msg"
    fi
    local t1=$SECONDS rc
    kill -TERM "$pid"
    local ok=0
    for _ in $(seq 60); do kill -0 "$job" 2>/dev/null || { ok=1; break; }; sleep 0.5; done
    if ((ok)); then
        wait "$job"
        rc=$?
        forget "$job"
        if ((rc == 0)); then
            result readme-sigterm PASS "exit 0, $((SECONDS - t1)) s after SIGTERM"
        else
            result readme-sigterm FAIL "exit $rc after SIGTERM"
            log_tail "$log"
        fi
    else
        result readme-sigterm FAIL "still running 30 s after SIGTERM"
        kill -KILL "$pid" 2>/dev/null
        wait "$job"
        forget "$job"
    fi
}

# ---- tests: what the test suites need, in that root -------------------------
# What running the tests in a fresh root proves is that
# `deploy/install-deps.sh --test` brings everything they use; the host's
# suites (normal and ASan) prove that they pass. So by default
# (NEARDUP_FRESH_TESTS=tools) the root runs tests/fresh/tools.sh: after
# install-deps --test and the build, every tool the integration tests use is
# there (tests/fresh/tools.py), clang builds a libFuzzer target, the unit suite
# runs, and for each tool an integration test that runs it for real; any
# failure, or any test skipping there, fails the part. ~5 min instead of ~14.
# NEARDUP_FRESH_TESTS=suites runs the whole unit and integration suites there
# instead, =readme the README's whole test command, =none nothing.
part_tests() {
    local log="$out/logs/tests.log" t0=$SECONDS
    local cmd rc logs=() env=(NEARDUP_SKIP_FRESH=1 CI="${CI:-}")
    local setup="bash deploy/install-deps.sh --test && bash deploy/build.sh build"
    case "$tests_mode" in
    none)
        result tests SKIP "NEARDUP_FRESH_TESTS=none"
        return 0 ;;
    readme)
        cmd="$(readme_command "Set up and run all tests")"
        [[ -n "$cmd" ]] || { result tests FAIL "no test command in README.md"; return 1; }
        logs=(testlog)
        echo "fresh: README's test command (without this stage): $cmd" ;;
    suites)
        cmd="$setup && meson test -C build --suite unit --suite integration --print-errorlogs --num-processes 2"
        logs=(testlog)
        echo "fresh: the unit and integration suites: $cmd" ;;
    *)
        cmd="bash tests/fresh/tools.sh"
        logs=(unit tools)
        echo "fresh: what the tests need and a test running each tool: $cmd" ;;
    esac
    local l jsons=()
    for l in "${logs[@]}"; do
        rm -f "$work/root/neardup/build/meson-logs/$l.json"
        jsons+=("$work/root/neardup/build/meson-logs/$l.json")
    done
    if [[ "$tests_mode" == tools ]]; then
        # test_contract's npm packages: the host's, which tests/contract/install.sh
        # installed from the lock file (npm ci, as tests/run-all.sh does before
        # the suites; the same script in the root then checks node, npm and the
        # lock's sum). The root runs them on Debian's node, as a fresh machine
        # would; npm's registry is not asked twice.
        [[ -f "$src/tests/contract/node_modules/.neardup-lock-sha256" ]] ||
            bash "$src/tests/contract/install.sh" >>"$log" 2>&1
        cp -a "$src/tests/contract/node_modules" "$work/root/neardup/tests/contract/" 2>>"$log"
    fi
    in_root 3600 "$log" "$cmd" "${env[@]}"
    rc=$?
    grep -a '^fresh-tools: \|^tools: ' "$log" | sed 's/^/    | /'
    local counts skipped
    counts="$(python3 - "${jsons[@]}" <<'PY'
import json, sys
c = {"passed": 0, "failed": 0, "skipped": 0}
skipped = []
for path in sys.argv[1:]:
    try:
        for line in open(path):
            t = json.loads(line)
            r = t.get("result")
            k = "passed" if r in ("OK", "EXPECTEDFAIL") else "skipped" if r == "SKIP" else "failed"
            c[k] += 1
            if k == "skipped":
                skipped.append(t.get("name", "?").split(" / ")[-1])
    except OSError:
        pass
print("%(passed)d passed, %(failed)d failed, %(skipped)d skipped" % c
      + (" (skipped: %s)" % " ".join(skipped) if skipped else ""))
PY
)"
    [[ "$tests_mode" != readme ]] || counts="$(grep -a '^tests: ' "$log" | tail -1)"
    # A test that skips in the root is one whose tool install-deps did not bring.
    skipped=0
    [[ "$tests_mode" != tools || "$counts" != *"(skipped:"* ]] || skipped=1
    if ((rc == 0 && skipped == 0)); then
        result tests PASS "$counts in $((SECONDS - t0)) s"
    else
        result tests FAIL "exit $rc: $counts (log: $log)"
        grep -a -E '^ *[0-9]+/[0-9]+ .*(FAIL|TIMEOUT|ERROR|SKIP)' "$log" | sed 's/^/    | /' | head -20
        for l in "${jsons[@]}"; do failed_output "$l"; done
        log_tail "$log"
    fi
    for l in "${jsons[@]}"; do slowest "$l"; done
}

# slowest TESTLOG_JSON: the five slowest tests of each suite in it, and the
# suite's total, in seconds (tests/slowest_tests.py).
slowest() {
    python3 "$src/tests/slowest_tests.py" "$1" | sed 's/^/    | /'
}

# failed_output TESTLOG_JSON: the last lines each failed test printed, so a
# failure in a root that is gone after the run can still be read in CI's log.
failed_output() {
    python3 - "$1" <<'PY' | sed 's/^/    | /'
import json, sys
try:
    lines = open(sys.argv[1], errors="replace").readlines()
except OSError:
    sys.exit(0)
for line in lines:
    t = json.loads(line)
    if t.get("result") in ("OK", "EXPECTEDFAIL", "SKIP"):
        continue
    out = (t.get("stdout") or "").splitlines()
    err = (t.get("stderr") or "").splitlines()
    print("--- %s (%s): its last output" % (t.get("name"), t.get("result")))
    for l in (out + err)[-40:]:
        print(l[:400])
PY
}

# ---- systemd: boot the root, install and run the unit ----------------------
part_systemd() {
    local log="$out/logs/systemd.log" t0=$SECONDS
    local unit="$src/deploy/systemd/neardupd.service"
    # The unit's header says how to install it: its "#   install" and
    # "#   systemctl" lines, run as they are (from /root/neardup).
    local install_lines start_line
    install_lines="$(sed -n 's/^#   \(install .*\)$/\1/p' "$unit")"
    start_line="$(sed -n 's/^#   \(systemctl .*\)$/\1/p' "$unit")"
    if [[ -z "$install_lines" || "$start_line" != *"enable --now neardupd"* ]]; then
        result systemd-boot FAIL "no '#   install' / '#   systemctl ... enable --now neardupd' lines in $unit"
        return 1
    fi
    local port
    port="$(free_port)"
    # systemd and dbus for the boot; neardupd where the unit runs it from, as a
    # package would put it; the unit and environment file as the header says;
    # this run's port appended to the environment file.
    local prep="export DEBIAN_FRONTEND=noninteractive && apt-get update -q &&"
    prep+=" apt-get install -y -q --no-install-recommends systemd systemd-sysv dbus &&"
    prep+=" install -D -m 0755 build/server/neardupd /usr/bin/neardupd &&"
    prep+=" $(echo "$install_lines" | paste -sd'&' | sed 's/&/ \&\& /g') &&"
    prep+=" echo NEARDUP_LISTEN=127.0.0.1:$port >>/etc/neardup/neardupd.env &&"
    prep+=" rm -f /usr/sbin/policy-rc.d"
    if ! in_root 900 "$log" "$prep"; then
        result systemd-boot FAIL "preparing the root failed (log: $log)"
        log_tail "$log"
        return 1
    fi
    timeout -k 10 900 systemd-nspawn -D "$work" -b --register=no --keep-unit --console=pipe -q \
        >"$out/logs/systemd-boot.log" 2>&1 </dev/null &
    local nspawn=$!
    bg_pids+=("$nspawn")
    # The container's systemd: a descendant of that nspawn (its root, after
    # nspawn's pivot_root, reads as "/" from here).
    local init=""
    for _ in $(seq 60); do
        init="$(descendant_named "$nspawn" systemd)"
        [[ -z "$init" ]] || break
        kill -0 "$nspawn" 2>/dev/null || break
        sleep 0.5
    done
    if [[ -z "$init" ]] && kill -0 "$nspawn" 2>/dev/null; then
        result systemd-boot FAIL "systemd-nspawn runs, but no systemd under it after 30 s"
        return 1
    elif [[ -z "$init" ]]; then
        local why
        why="$(tr '\n' ' ' <"$out/logs/systemd-boot.log" | cut -c1-400)"
        result systemd-boot SKIP "systemd-nspawn -b did not boot the root here: ${why:-no output}"
        return 0
    fi
    inside() { timeout 120 nsenter -t "$init" -a "$@"; }
    local state=""
    for _ in $(seq 180); do # systemctl needs the manager's socket first
        inside test -S /run/systemd/private && break
        kill -0 "$nspawn" 2>/dev/null || break
        sleep 0.5
    done
    state="$(inside systemctl is-system-running --wait 2>&1)"
    if [[ "$state" != running && "$state" != degraded ]]; then
        result systemd-boot FAIL "system state '$state' after boot"
        inside systemctl --failed --no-pager 2>&1 | sed 's/^/    | /'
        return 1
    fi
    result systemd-boot PASS "booted ($state) in $((SECONDS - t0)) s"
    [[ "$state" == running ]] || inside systemctl --failed --no-pager --plain 2>&1 | sed 's/^/    | /'
    if ! inside bash -c "cd /root/neardup && $start_line" >>"$log" 2>&1; then
        result systemd-start FAIL "'$start_line' failed"
        log_tail "$log"
        inside journalctl -u neardupd --no-pager -n 30 2>&1 | sed 's/^/    | /'
        return 1
    fi
    local msg
    if msg="$(probe wait "$port" 60)" && msg="$(probe readyz "$port")" &&
        msg="$(probe register "$port" fresh-systemd-1)"; then
        local uid
        uid="$(inside systemctl show -p UID --value neardupd)"
        if [[ "$uid" =~ ^[0-9]+$ && "$uid" -ne 0 ]]; then
            result systemd-start PASS "'$start_line': probes and a round trip answer, runs as uid $uid (DynamicUser)"
        else
            result systemd-start FAIL "runs as uid '$uid'"
        fi
    else
        result systemd-start FAIL "$msg"
        inside journalctl -u neardupd --no-pager -n 30 2>&1 | sed 's/^/    | /'
        return 1
    fi
    # Stop: /readyz turns 503 during the drain delay, the unit stops within
    # TimeoutStopSec, with exit status 0.
    local stop_limit delay drain
    stop_limit="$(sed -n 's/^TimeoutStopSec=\([0-9]*\)$/\1/p' "$unit")"
    delay="$(sed -n 's/^NEARDUP_DRAIN_DELAY=\([0-9]*\)$/\1/p' "$src/deploy/neardupd.env")"
    local t1=$SECONDS
    inside systemctl stop --no-block neardupd
    drain="no 503 seen"
    for _ in $(seq 20); do
        if probe readyz "$port" 503 >/dev/null; then drain="/readyz 503 while draining"; break; fi
        sleep 0.2
    done
    local active=""
    for _ in $(seq $((2 * ${stop_limit:-30} + 10))); do
        active="$(inside systemctl is-active neardupd)"
        [[ "$active" == active || "$active" == deactivating ]] || break
        sleep 0.5
    done
    local took=$((SECONDS - t1)) res status
    res="$(inside systemctl show -p Result --value neardupd)"
    status="$(inside systemctl show -p ExecMainStatus --value neardupd)"
    if [[ "$active" == inactive && "$res" == success && "$status" == 0 && took -lt ${stop_limit:-30} &&
        "$drain" == "/readyz 503"* ]]; then
        result systemd-stop PASS "stopped in $took s (drain delay ${delay:-?} s, TimeoutStopSec ${stop_limit:-?}), $drain, exit status 0"
    else
        result systemd-stop FAIL "state $active, result $res, exit status $status, $took s (limit ${stop_limit:-?}), $drain"
        inside journalctl -u neardupd --no-pager -n 30 2>&1 | sed 's/^/    | /'
    fi
    if inside systemctl start neardupd && msg="$(probe wait "$port" 60)" &&
        msg="$(probe find "$port" fresh-systemd-1)"; then
        result systemd-restart PASS "the article is in the StateDirectory after a restart"
    else
        result systemd-restart FAIL "${msg:-systemctl start failed}"
    fi
    inside systemctl poweroff >/dev/null 2>&1
    for _ in $(seq 60); do kill -0 "$nspawn" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$nspawn" 2>/dev/null; then
        echo "fresh: the container did not power off in 30 s; cleanup stops it"
    else
        wait "$nspawn"
        forget "$nspawn"
    fi
}

# ---- container: the Dockerfile with podman ---------------------------------
part_container() {
    local log="$out/logs/container.log" t0=$SECONDS
    local base_image=debian:bookworm-slim
    local image="localhost/neardup-fresh:$run_id"
    # The minbase root as debian:bookworm-slim, unless already imported.
    exec 9>"$cache/lock"
    flock -w 1800 9
    if [[ "$(pod image inspect -f '{{index .Labels "neardup.fresh.base"}}' "$base_image" 2>/dev/null)" != "$base_key" ]]; then
        echo "fresh: importing $base as $base_image"
        if ! tar -C "$base" -c . | pod import --change "LABEL neardup.fresh.base=$base_key" \
            --change 'CMD ["bash"]' - "$base_image" >>"$log" 2>&1; then
            flock -u 9
            result container-build FAIL "podman import of the base root failed (log: $log)"
            log_tail "$log"
            return 1
        fi
    fi
    flock -u 9
    local t1=$SECONDS
    podman_objs+=("image $image")
    if ! timeout -k 20 2400 podman --runtime runc --cgroup-manager=cgroupfs build --network=host \
        --pull=never --format docker "${ulimits[@]}" -t "$image" -f "$src/Dockerfile" "$src" \
        >>"$log" 2>&1 </dev/null; then
        result container-build FAIL "podman build failed (log: $log)"
        log_tail "$log" 40
        return 1
    fi
    local size bsize
    size="$(pod image inspect -f '{{.Size}}' "$image" 2>>"$log")"
    bsize="$(pod image inspect -f '{{.Size}}' "$base_image" 2>>"$log")"
    result container-build PASS "podman build in $((SECONDS - t1)) s; image $((size / 1000000)) MB" \
        "($size bytes; the base, a minbase root, $((bsize / 1000000)) MB)"
    echo "image $size base $bsize" >"$out/image-size.txt"

    # Packages: the image holds the base's and runtime-packages.txt's, no more.
    local extra
    extra="$(comm -23 <(pod run --rm "${ulimits[@]}" --entrypoint dpkg-query "$image" -W -f '${Package}\n' 2>>"$log" | sort) \
        <( (pod run --rm "${ulimits[@]}" --entrypoint dpkg-query "$base_image" -W -f '${Package}\n' 2>>"$log"
            grep -v '^\s*#' "$src/deploy/container/runtime-packages.txt" | grep -v '^\s*$') | sort -u) |
        tr '\n' ' ')"
    local added
    added="$(comm -23 <(pod run --rm "${ulimits[@]}" --entrypoint dpkg-query "$image" -W -f '${Package}\n' 2>>"$log" | sort) \
        <(pod run --rm "${ulimits[@]}" --entrypoint dpkg-query "$base_image" -W -f '${Package}\n' 2>>"$log" | sort) | tr '\n' ' ')"
    local leftovers
    leftovers="$(pod run --rm "${ulimits[@]}" --entrypoint bash "$image" -c \
        'ls -d /src /out /usr/include/* /usr/bin/gcc /usr/bin/meson /var/lib/apt/lists/*_Packages 2>/dev/null' 2>>"$log" | tr '\n' ' ')"
    # What the runtime stage adds on the base: those libraries, ~45 MB (ICU
    # is 36 of them, its data); not apt's downloads and caches (--clean).
    local layers=$(((size - bsize) / 1000000))
    if [[ -z "$extra" && -z "$leftovers" && -n "$added" ]] && ((layers < 60)); then
        result container-packages PASS "added to the base: $added($layers MB on the base)"
    else
        result container-packages FAIL "packages not in runtime-packages.txt: '$extra'; build leftovers: '$leftovers'; $layers MB on the base (wanted < 60)"
    fi

    local hc
    hc="$(pod image inspect -f '{{json .Config.Healthcheck}}' "$image" 2>/dev/null)"
    local vol="neardup-fresh-$run_id" name="neardup-fresh-$run_id" port
    port="$(free_port)"
    podman_objs+=("container $name" "container $name-2" "volume $vol")
    pod volume create "$vol" >/dev/null
    # As the Dockerfile's header runs it: a volume, --stop-timeout 30.
    local run=(pod run -d "${ulimits[@]}" -p "127.0.0.1:$port:8080" -v "$vol:/var/lib/neardup"
               --stop-timeout 30)
    if ! "${run[@]}" --name "$name" "$image" >>"$log" 2>&1; then
        result container-run FAIL "podman run failed (log: $log)"
        log_tail "$log"
        return 1
    fi
    local msg
    if msg="$(probe wait "$port" 60)" && msg="$(probe readyz "$port")" &&
        msg="$(probe register "$port" fresh-container-1)"; then
        result container-run PASS "-p 127.0.0.1:$port:8080 -v $vol: probes and a round trip answer"
    else
        result container-run FAIL "$msg"
        pod logs --tail 20 "$name" 2>&1 | sed 's/^/    | /'
    fi
    if [[ "$hc" == *"/usr/libexec/neardup/healthcheck"* ]] && pod healthcheck run "$name" >>"$log" 2>&1; then
        result container-healthcheck PASS "podman healthcheck run: healthy ($hc)"
    else
        result container-healthcheck FAIL "image healthcheck '$hc' did not pass (log: $log)"
    fi
    local cpid uids
    cpid="$(pod inspect -f '{{.State.Pid}}' "$name" 2>>"$log")"
    uids="$(awk '/^(Uid|Gid):/ {print $1, $2, $3, $4, $5}' "/proc/$cpid/status" 2>/dev/null | tr '\n' ' ')"
    if [[ "$uids" == "Uid: 10001 10001 10001 10001 Gid: 10001 10001 10001 10001 " ]]; then
        result container-user PASS "neardupd (host pid $cpid) runs as uid/gid 10001"
    else
        result container-user FAIL "neardupd (host pid $cpid): $uids"
    fi
    local t2=$SECONDS rc
    pod stop -t 30 "$name" >>"$log" 2>&1
    local took=$((SECONDS - t2))
    rc="$(pod inspect -f '{{.State.ExitCode}}' "$name" 2>>"$log")"
    pod rm "$name" >>"$log" 2>&1
    if "${run[@]}" --name "$name-2" "$image" >>"$log" 2>&1 && msg="$(probe wait "$port" 60)" &&
        msg="$(probe find "$port" fresh-container-1)" && [[ "$rc" == 0 && took -lt 30 ]]; then
        result container-restart PASS "stopped in $took s with exit 0; a new container on $vol finds the article"
    else
        result container-restart FAIL "stop: exit ${rc:-?} in $took s (limit 30); ${msg:-}"
        pod logs --tail 20 "$name-2" 2>&1 | sed 's/^/    | /'
    fi
    pod stop -t 30 "$name-2" >/dev/null 2>&1
}

t_all=$SECONDS
c_all="$(cpu_now)"
if make_base; then
    if want readme; then
        t_part=$SECONDS
        c_part="$(cpu_now)"
        part_readme
        timed readme "$t_part" "$c_part"
        # The later parts in the root need what the README's command installed and built.
        if [[ ! -x "$work/root/neardup/build/server/neardupd" ]]; then
            want tests && result tests SKIP "the README's command did not build neardupd"
            want systemd && result systemd-boot SKIP "the README's command did not build neardupd"
            parts=("${parts[@]/tests/}")
            parts=("${parts[@]/systemd/}")
        fi
    elif want tests || want systemd; then
        result readme SKIP "tests and systemd run in the root the readme part makes: add readme"
        parts=("${parts[@]/tests/}")
        parts=("${parts[@]/systemd/}")
    fi
    for part in tests systemd container; do
        want "$part" || continue
        t_part=$SECONDS
        c_part="$(cpu_now)"
        "part_$part"
        timed "$part" "$t_part" "$c_part"
    done
fi
timed total "$t_all" "$c_all"
p=$(grep -c ': PASS' "$out/results.txt")
f=$(grep -c ': FAIL' "$out/results.txt")
s=$(grep -c ': SKIP' "$out/results.txt")
echo "fresh: $p passed, $f failed, $s skipped in $((SECONDS - t_all)) s"
((f == 0))
