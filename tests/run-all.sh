#!/usr/bin/env bash
# Sets up and runs every test: the unit and integration suites on a normal
# build, then the same suites on an AddressSanitizer + UBSan build, then the
# fuzz stage; as root, the fresh-machine stage last.
# Prints what each stage cost (wall and CPU seconds, the slowest tests of each
# suite) and, before the last line, a table of the stages and the total.
# Ends with one line "tests: N passed, M failed, K skipped"; exits non-zero on
# any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

passed=0
failed=0
skipped=0

# ---- what each stage costs ----------------------------------------------------
# stage_begin NAME / stage_end: wall seconds, and the CPU seconds (user + system)
# of the processes the stage ran (those waited for: this shell's children's
# times; a daemonised process, such as podman's conmon, is not counted).
# CPU / wall is how many of the cores the stage kept busy on average.
# One line per stage in $stages (tab-separated: name, wall, CPU).
stages="$(mktemp)"
slow="$(mktemp)"
trap 'rm -f "$stages" "$slow"' EXIT
hz="$(getconf CLK_TCK 2>/dev/null || echo 100)"
t_start=$SECONDS
self=$BASHPID # the shell whose children are counted
children_cpu() { # centiseconds; called as $(children_cpu), a subshell of $self
    local f
    read -ra f <"/proc/$self/stat"
    echo $(((f[15] + f[16]) * 100 / hz))
}
stage_begin() {
    st_name="$1"
    st_t0=$SECONDS
    st_c0="$(children_cpu)"
    echo "=== $st_name"
}
stage_end() {
    local w=$((SECONDS - st_t0)) c=$((($(children_cpu) - st_c0) / 100))
    printf '%s\t%d\t%d\n' "$st_name" "$w" "$c" >>"$stages"
    echo "=== $st_name: $w s (CPU $c s)"
}

# slowest TESTLOG_JSON: per suite in it, its tests' seconds summed and the five
# slowest (tests/slowest_tests.py), indented.
slowest() {
    python3 tests/slowest_tests.py "$1" | sed 's/^/    /'
}

# Adds the results of one meson test run (its testlog JSON) to the totals.
count_results() {
    local log="$1"
    if [[ ! -f "$log" ]]; then
        failed=$((failed + 1))
        return
    fi
    read -r p f s < <(python3 - "$log" <<'PY'
import json, sys
p = f = s = 0
for line in open(sys.argv[1]):
    r = json.loads(line).get("result")
    if r in ("OK", "EXPECTEDFAIL"):
        p += 1
    elif r == "SKIP":
        s += 1
    else:
        f += 1
print(p, f, s)
PY
)
    passed=$((passed + p))
    failed=$((failed + f))
    skipped=$((skipped + s))
}

stage_begin "deps: install-deps --test, contract npm ci"
bash deploy/install-deps.sh --test || { echo "tests: 0 passed, 1 failed"; exit 1; }
# The npm packages of tests/contract (test_contract: an OpenAPI validator and a
# client generated from proto/openapi.yaml), as its lock file pins them. The
# suites below must run that test, not skip it (ND_CONTRACT_REQUIRED); the
# fresh-machine stage installs them in its root the same way.
bash tests/contract/install.sh || echo "=== contract: npm ci failed: test_contract will fail"
export ND_CONTRACT_REQUIRED=1
# The console's browser test (chromium, installed above) must run too, not skip.
export ND_BROWSER_REQUIRED=1
stage_end

# run_suite NAME BUILD_DIR SETUP [meson setup options...]
# SETUP is a meson test setup (meson.build: add_test_setup) or "" for none;
# meson test writes testlog.json, or testlog-SETUP.json under a setup.
run_suite() {
    local name="$1" dir="$2" setup="$3"
    shift 3
    stage_begin "$name: build ($dir)"
    if ! bash deploy/build.sh "$dir" "$@"; then
        echo "=== $name: BUILD FAILED"
        failed=$((failed + 1))
        stage_end
        return
    fi
    stage_end
    stage_begin "$name: unit and integration suites"
    local log="testlog${setup:+-$setup}.json"
    rm -f "$dir/meson-logs/$log"
    meson test -C "$dir" ${setup:+--setup "$setup"} --print-errorlogs --num-processes 2
    count_results "$dir/meson-logs/$log"
    stage_end
    slowest "$dir/meson-logs/$log" | sed "s/^    /    $name, /" | tee -a "$slow"
}

# ---- fresh-machine stage ----------------------------------------
# A `debootstrap --variant=minbase bookworm` root (cached): the README's first
# command there (probes, round trip, SIGTERM), then, after install-deps --test,
# every tool the tests use present and a test running each (tests/fresh/tools.sh)
# with the unit suite, the systemd unit booted with systemd-nspawn, the
# Dockerfile built and run with podman; each check counts as one test result.
# Needs root and Debian's mirror. Details: tests/fresh/run.sh; logs in
# build-fresh/logs/, wall and CPU seconds per part in build-fresh/times.txt.
# NEARDUP_SKIP_FRESH=1 skips it (counted as one skipped).
fresh_stage() {
    stage_begin "fresh: minimal Debian 12 root, systemd, container"
    timeout -k 60 "${NEARDUP_FRESH_TIMEOUT:-3600}" bash tests/fresh/run.sh --out build-fresh
    echo $? >build-fresh/exit-status
    stage_end
}
count_fresh() {
    local rc
    rc="$(cat build-fresh/exit-status 2>/dev/null || echo 1)"
    fresh_pass=$(grep -c ': PASS' build-fresh/results.txt 2>/dev/null)
    fresh_fail=$(grep -c ': FAIL' build-fresh/results.txt 2>/dev/null)
    fresh_skip=$(grep -c ': SKIP' build-fresh/results.txt 2>/dev/null)
    passed=$((passed + ${fresh_pass:-0}))
    failed=$((failed + ${fresh_fail:-0}))
    skipped=$((skipped + ${fresh_skip:-0}))
    # No result at all, or a failure no check reported (a timeout: exit 124).
    if ((rc != 0 && ${fresh_fail:-0} == 0)); then
        echo "=== fresh: exit $rc"
        failed=$((failed + 1))
    fi
    ((${fresh_pass:-0} + ${fresh_fail:-0} + ${fresh_skip:-0} > 0)) || failed=$((failed + 1))
}

run_suite "normal" build ""

# The sanitizers are the build's (b_sanitize); their options and the longer
# timeouts come from the test setup "asan" (meson.build).
run_suite "asan" build-asan asan \
    -Db_sanitize=address,undefined -Db_lundef=false

# ---- fuzz stage -------------------------------------------------
# libFuzzer targets built with clang (ASan + UBSan), each run for
# FUZZ_SECONDS (60) on its seed corpus, two at a time; each target counts as
# one test result. Details: tests/fuzz/run.sh; reports in build-fuzz/logs/.
stage_begin "fuzz: build"
bash tests/fuzz/run.sh --build-only --out build-fuzz
stage_end
stage_begin "fuzz: run (${FUZZ_SECONDS:-60} s a target, 2 at a time)"
bash tests/fuzz/run.sh --time "${FUZZ_SECONDS:-60}" --jobs 2 --out build-fuzz
fuzz_pass=$(grep -c ': PASS' build-fuzz/results.txt 2>/dev/null)
fuzz_fail=$(grep -c ': FAIL' build-fuzz/results.txt 2>/dev/null)
passed=$((passed + ${fuzz_pass:-0}))
failed=$((failed + ${fuzz_fail:-0}))
((${fuzz_pass:-0} + ${fuzz_fail:-0} > 0)) || failed=$((failed + 1)) # no result at all
stage_end
# ---- end of fuzz stage ----------------------------------------------------

if [[ "${NEARDUP_SKIP_FRESH:-0}" == 1 ]]; then
    echo "=== fresh: skipped (NEARDUP_SKIP_FRESH=1)"
    skipped=$((skipped + 1))
else
    mkdir -p build-fresh
    rm -f build-fresh/exit-status
    fresh_stage
    count_fresh
fi

# ---- the cost of each stage, then the result ---------------------------------
echo "=== CI's time per stage (wall s; CPU s of its processes; cores busy on average)"
awk -F'\t' '{ printf "    %-52s %5d s  CPU %5d s  %4.2f cores\n", $1, $2, $3, ($2 ? $3 / $2 : 0) }' "$stages"
if [[ -f build-fresh/times.txt && "${NEARDUP_SKIP_FRESH:-0}" != 1 ]]; then
    echo "    fresh, per part: $(grep -v '^total ' build-fresh/times.txt |
        awk '{ printf "%s%s %d s (CPU %d s)", sep, $1, $2, $4; sep = ", " }')"
fi
echo "=== the slowest tests of each suite (seconds)"
cat "$slow"
echo "=== total: $((SECONDS - t_start)) s"
echo "tests: $passed passed, $failed failed, $skipped skipped"
[[ $failed -eq 0 && $passed -gt 0 ]]
