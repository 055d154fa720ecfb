#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan), in a meson build
# directory of their own (OUT/meson, -Dfuzzing=true; the gcc builds stay as
# they are), and runs each for a bounded time on its seed corpus.
#
#   tests/fuzz/run.sh [--time SECONDS] [--jobs N] [--build-only] [--out DIR] [TARGET...]
#
# --time      seconds per target (default 60)
# --jobs      targets run at the same time (default 1)
# --out       build and work directory (default build-fuzz)
# TARGET      fuzz_fingerprint fuzz_json fuzz_fingerprint_body fuzz_check_body
#             fuzz_headers fuzz_index fuzz_sketch fuzz_framing (default: all)
#
# Each target's corpus grows in OUT/corpus/TARGET (the seeds in
# tests/fuzz/corpus/TARGET are read, never written); a crash is saved as
# OUT/artifacts/TARGET-crash-* and its report is in OUT/logs/TARGET.log.
# One line per target: "fuzz TARGET: PASS|FAIL execs=N cov=C ft=F corpus=K";
# OUT/results.txt holds the same lines. Exit status 1 if any target failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
root="$(pwd)"

time_s=60
jobs=1
build_only=0
out=build-fuzz
targets=()
while (($#)); do
    case "$1" in
    --time) time_s="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --build-only) build_only=1; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
    esac
done
all=(fuzz_fingerprint fuzz_json fuzz_fingerprint_body fuzz_check_body fuzz_headers fuzz_index fuzz_sketch fuzz_framing
     fuzz_workflow fuzz_import fuzz_entry fuzz_fold fuzz_passages fuzz_align)
((${#targets[@]})) || targets=("${all[@]}")

cc="${CC_FUZZ:-clang}"
mkdir -p "$out/corpus" "$out/artifacts" "$out/logs"
: >"$out/results.txt"
command -v "$cc" >/dev/null || {
    echo "fuzz: $cc not found (apt-get install clang libclang-rt-14-dev)"
    for t in "${targets[@]}"; do echo "fuzz $t: FAIL (no $cc)" >>"$out/results.txt"; done
    exit 1
}

# A build failure fails every target asked for.
build_failed() {
    echo "fuzz: build failed: $1"
    for t in "${targets[@]}"; do
        echo "fuzz $t: FAIL (build)" | tee -a "$out/results.txt"
    done
    exit 1
}

# ---- build ----
# A meson build of its own (OUT/meson): clang, ASan + UBSan, -Dfuzzing=true
# (libFuzzer's coverage on every object; tests/fuzz/meson.build defines the
# targets, linked with the server library). -O1 -g as libFuzzer advises;
# clang's warnings are not errors here (the gcc builds hold that line).
bdir="$out/meson"
if [[ ! -f "$bdir/build.ninja" ]]; then
    CC="$cc" meson setup "$bdir" -Dfuzzing=true -Db_sanitize=address,undefined -Db_lundef=false \
        -Doptimization=1 -Ddebug=true -Dwerror=false >"$out/logs/meson-setup.log" 2>&1 ||
        { cat "$out/logs/meson-setup.log"; build_failed "meson setup $bdir"; }
fi
meson compile -C "$bdir" "${targets[@]/#/tests/fuzz/}" || build_failed "meson compile"
for t in "${targets[@]}"; do
    ln -sf "meson/tests/fuzz/$t" "$out/$t"
done
echo "fuzz: built ${targets[*]} in $out"
((build_only)) && exit 0

# ---- run ----
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"

run_one() {
    local t="$1"
    local log="$out/logs/$t.log"
    mkdir -p "$out/corpus/$t"
    local dict=()
    case "$t" in
    fuzz_json|fuzz_fingerprint_body|fuzz_check_body|fuzz_import) dict=(-dict=tests/fuzz/json.dict) ;;
    esac
    local seeds=()
    [[ -d "tests/fuzz/corpus/$t" ]] && seeds=("tests/fuzz/corpus/$t")
    local max_len=65536
    [[ "$t" == fuzz_index ]] && max_len=2048 # a few hundred operations
    "$out/$t" -max_total_time="$time_s" -timeout=10 -rss_limit_mb=2048 -max_len="$max_len" \
        -print_final_stats=1 -artifact_prefix="$out/artifacts/$t-" "${dict[@]}" \
        "$out/corpus/$t" "${seeds[@]}" >"$log" 2>&1
    local rc=$?
    local execs cov ft corp
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    corp=$(grep -o 'corp: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    local verdict=PASS
    ((rc == 0)) || verdict=FAIL
    echo "fuzz $t: $verdict execs=${execs:-0} cov=${cov:-0} ft=${ft:-0} corpus=${corp:-0} seconds=$time_s"
    if ((rc != 0)); then
        grep -E 'ERROR:|invariant failed|SUMMARY|runtime error|Test unit written' "$log" | head -20
        echo "(full report: $log)"
    fi
}

running=0
for t in "${targets[@]}"; do
    run_one "$t" >"$out/results.txt.$t" &
    running=$((running + 1))
    if ((running >= jobs)); then
        wait -n
        running=$((running - 1))
    fi
done
wait
status=0
for t in "${targets[@]}"; do
    cat "$out/results.txt.$t"
    cat "$out/results.txt.$t" >>"$out/results.txt"
    rm -f "$out/results.txt.$t"
done
grep -q ': FAIL' "$out/results.txt" && status=1
exit $status
