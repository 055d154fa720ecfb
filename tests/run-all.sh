#!/usr/bin/env bash
# Sets up and runs every test: the unit and integration suites on a normal
# build, then the same suites on an AddressSanitizer + UBSan build.
# Ends with one line "tests: N passed, M failed"; exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

bash deploy/install-deps.sh --test || { echo "tests: 0 passed, 1 failed"; exit 1; }
# The npm packages of tests/contract (test_contract: an OpenAPI validator and a
# client generated from proto/openapi.yaml), as its lock file pins them. The
# suites below must run that test, not skip it (ND_CONTRACT_REQUIRED); the
# fresh-machine stage's root has no npm packages and skips it.
bash tests/contract/install.sh || echo "=== contract: npm ci failed: test_contract will fail"
export ND_CONTRACT_REQUIRED=1
# The console's browser test (chromium, installed above) must run too, not skip.
export ND_BROWSER_REQUIRED=1

passed=0
failed=0
skipped=0

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

# run_suite NAME BUILD_DIR SETUP [meson setup options...]
# SETUP is a meson test setup (meson.build: add_test_setup) or "" for none;
# meson test writes testlog.json, or testlog-SETUP.json under a setup.
run_suite() {
    local name="$1" dir="$2" setup="$3"
    shift 3
    echo "=== $name: build ($dir)"
    if ! bash deploy/build.sh "$dir" "$@"; then
        echo "=== $name: BUILD FAILED"
        failed=$((failed + 1))
        return
    fi
    echo "=== $name: test"
    local log="testlog${setup:+-$setup}.json"
    rm -f "$dir/meson-logs/$log"
    meson test -C "$dir" ${setup:+--setup "$setup"} --print-errorlogs --num-processes 2
    count_results "$dir/meson-logs/$log"
}

run_suite "normal build" build ""
# The sanitizers are the build's (b_sanitize); their options and the longer
# timeouts come from the test setup "asan" (meson.build).
run_suite "AddressSanitizer + UBSan build" build-asan asan \
    -Db_sanitize=address,undefined -Db_lundef=false

# ---- fuzz stage -------------------------------------------------
# libFuzzer targets built with clang (ASan + UBSan), each run for
# FUZZ_SECONDS (60) on its seed corpus, two at a time; each target counts as
# one test result. Details: tests/fuzz/run.sh; reports in build-fuzz/logs/.
echo "=== fuzz: build and run"
bash tests/fuzz/run.sh --time "${FUZZ_SECONDS:-60}" --jobs 2 --out build-fuzz
fuzz_pass=$(grep -c ': PASS' build-fuzz/results.txt 2>/dev/null)
fuzz_fail=$(grep -c ': FAIL' build-fuzz/results.txt 2>/dev/null)
passed=$((passed + ${fuzz_pass:-0}))
failed=$((failed + ${fuzz_fail:-0}))
((${fuzz_pass:-0} + ${fuzz_fail:-0} > 0)) || failed=$((failed + 1)) # no result at all
# ---- end of fuzz stage ----------------------------------------------------

# ---- fresh-machine stage ----------------------------------------
# A cached `debootstrap --variant=minbase bookworm` root: the README's first
# command there (probes, round trip, SIGTERM), the unit and integration suites
# there, the systemd unit booted with systemd-nspawn, the Dockerfile built and
# run with podman; each check counts as one test result. Needs root and
# Debian's mirror; 15-25 min cold, less with its cache. Details:
# tests/fresh/run.sh; logs in build-fresh/logs/. NEARDUP_SKIP_FRESH=1 skips it
# (counted as one skipped).
if [[ "${NEARDUP_SKIP_FRESH:-0}" == 1 ]]; then
    echo "=== fresh: skipped (NEARDUP_SKIP_FRESH=1)"
    skipped=$((skipped + 1))
else
    echo "=== fresh: minimal Debian 12 root, systemd, container"
    timeout -k 60 "${NEARDUP_FRESH_TIMEOUT:-3600}" bash tests/fresh/run.sh --out build-fresh
    fresh_rc=$?
    fresh_pass=$(grep -c ': PASS' build-fresh/results.txt 2>/dev/null)
    fresh_fail=$(grep -c ': FAIL' build-fresh/results.txt 2>/dev/null)
    fresh_skip=$(grep -c ': SKIP' build-fresh/results.txt 2>/dev/null)
    passed=$((passed + ${fresh_pass:-0}))
    failed=$((failed + ${fresh_fail:-0}))
    skipped=$((skipped + ${fresh_skip:-0}))
    # No result at all, or a failure no check reported (a timeout: exit 124).
    if ((fresh_rc != 0 && ${fresh_fail:-0} == 0)); then
        echo "=== fresh: exit $fresh_rc"
        failed=$((failed + 1))
    fi
    ((${fresh_pass:-0} + ${fresh_fail:-0} + ${fresh_skip:-0} > 0)) || failed=$((failed + 1))
fi
# ---- end of fresh-machine stage --------------------------------------------

echo "tests: $passed passed, $failed failed, $skipped skipped"
[[ $failed -eq 0 && $passed -gt 0 ]]
