#!/usr/bin/env bash
# Run by tests/fresh/run.sh (part "tests", NEARDUP_FRESH_TESTS=tools) inside
# the fresh root, from the copy of the source there, after the README's first
# command: proves that `deploy/install-deps.sh --test` brings everything the
# tests use, on a minimal Debian 12.
#
#   1. deploy/install-deps.sh --test, tests/contract/install.sh (node, npm and
#      the lock's packages: run.sh copied the host's, which npm ci installed
#      from the lock), the build;
#   2. tests/fresh/tools.py check: every program the integration tests start
#      and every Python module they import (read from their source) is
#      installed; test_history's network namespace and iptables commands and
#      test_webhooks' openssl certificate run;
#   3. clang builds a libFuzzer target with ASan + UBSan and runs it
#      (tests/fuzz/run.sh's toolchain: clang, libclang-rt-14-dev);
#   4. the unit suite (meson-logs/unit.json);
#   5. for each of those tools, an integration test that runs it for real
#      (tools.py tests; meson-logs/tools.json), none allowed to skip
#      (ND_BROWSER_REQUIRED=1, ND_CONTRACT_REQUIRED=1; run.sh fails a SKIP).
# One line "fresh-tools: STEP: exit N in S s" per step. Exit 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
export ND_BROWSER_REQUIRED=1 ND_CONTRACT_REQUIRED=1

step() {
    local name="$1" t0=$SECONDS rc
    shift
    "$@"
    rc=$?
    echo "fresh-tools: $name: exit $rc in $((SECONDS - t0)) s"
    return $rc
}

fuzz_smoke() {
    local d
    d="$(mktemp -d)" || return 1
    printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
        'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return n > 0 && d[0] == 0x7f ? 0 : 0; }' \
        >"$d/smoke.c"
    clang -fsanitize=fuzzer,address,undefined -o "$d/smoke" "$d/smoke.c" &&
        "$d/smoke" -runs=2000 2>&1 | tail -n 2
    local rc=${PIPESTATUS[0]}
    rm -rf "$d"
    return "$rc"
}

step "install-deps --test" bash deploy/install-deps.sh --test || exit 1
step "tests/contract/install.sh" bash tests/contract/install.sh || exit 1
step "build" bash deploy/build.sh build || exit 1
step "tools.py check" python3 tests/fresh/tools.py check || exit 1
step "clang -fsanitize=fuzzer" fuzz_smoke || exit 1
names="$(python3 tests/fresh/tools.py tests)" || exit 1
rc=0
step "unit suite" meson test -C build --suite unit --logbase unit --print-errorlogs \
    --num-processes 2 || rc=1
# shellcheck disable=SC2086 # one test name a word
step "integration tests running each tool ($names)" meson test -C build --suite integration \
    --logbase tools --print-errorlogs --num-processes 2 $names || rc=1
exit $rc
