#!/usr/bin/env bash
# tests/quick.sh - the developer's loop after changing a file or two:
# builds (incrementally, in its own build directory), runs the unit
# suite and the integration tests of what changed, else a fast subset, and
# ends with one line:
#   quick: N passed, M failed in S s
# exiting 1 when a test failed, 2 when the build did. About a minute on a
# quiet 2-core machine once the build directory exists (the unit suite is
# ~40 s of it; the first build takes a few minutes). tests/run-all.sh still
# runs everything (normal, sanitizers, fuzz, a fresh root) before a push.
#
#   bash tests/quick.sh            the unit suite + the chosen integration tests
#   bash tests/quick.sh NAME...    the unit suite + these integration tests
#                                  (meson names: compare, events, ...)
#
# What changed: the files that differ from ND_QUICK_BASE, or origin/main's
# merge base when there is an origin/main, or HEAD~1 (committed since, staged,
# not staged, and new files). An integration test is chosen when its own file
# changed (tests/integration/test_NAME.py) or a changed file is named like
# it (server/api/compare.c: compare; README.md: readme); those in SLOW (a
# minute or more, or clusters of processes) and those past the first
# ND_QUICK_MAX (4) are named, not run. No change found that maps to a test:
# the FAST subset.
#
# Environment: ND_QUICK_BUILD (build directory, default build-quick; set up
# as deploy/build.sh does), ND_QUICK_BASE (a git revision), ND_QUICK_MAX.
set -uo pipefail
cd "$(dirname "$0")/.."

FAST=(help openapi numbers reregister versions workflow)
SLOW=" server import webhooks replicas badinput console contract history crash events_replicas
       webhooks_replicas policy_races race container systemd "
t0=$(date +%s.%N)
dir=${ND_QUICK_BUILD:-build-quick}
log=$(mktemp -t nd-quick.XXXXXX)
trap 'rm -f "$log"' EXIT

elapsed() { awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }'; }

# -- build --
if [[ ! -f $dir/build.ninja ]] && ! meson setup "$dir" >"$log" 2>&1; then
    tail -n 30 "$log"
    echo "quick: meson setup failed in $(elapsed) s"
    exit 2
fi
if ! ninja -C "$dir" >"$log" 2>&1; then
    grep -E "error|FAILED" "$log" | head -n 30
    echo "quick: build failed in $(elapsed) s"
    exit 2
fi

t_build=$(elapsed)

# -- which integration tests --
known=" $(meson test -C "$dir" --list --suite integration 2>/dev/null |
          sed -n 's|.*integration / ||p' | tr '\n' ' ') "
chosen=() slow=()
add() { # add NAME: a known test, once; SLOW ones only named
    [[ $known == *" $1 "* ]] || return 0
    [[ " ${chosen[*]:-} ${slow[*]:-} " == *" $1 "* ]] && return 0
    if [[ -z ${2:-} && ($SLOW == *" $1 "* || ${#chosen[@]} -ge ${ND_QUICK_MAX:-4}) ]]; then
        slow+=("$1")
    else
        chosen+=("$1")
    fi
}
if (($#)); then
    for name in "$@"; do
        [[ $known == *" $name "* ]] || { echo "quick: no integration test $name"; exit 2; }
        add "$name" named
    done
else
    base=${ND_QUICK_BASE:-}
    if [[ -z $base ]] && git rev-parse -q --verify origin/main >/dev/null; then
        base=$(git merge-base origin/main HEAD)
    fi
    [[ -z $base ]] && git rev-parse -q --verify HEAD~1 >/dev/null && base=HEAD~1
    changed=$( { [[ -n $base ]] && git diff --name-only "$base" --
                 git ls-files --others --exclude-standard; } 2>/dev/null | sort -u)
    while IFS= read -r f; do
        [[ -z $f ]] && continue
        stem=$(basename "$f"); stem=${stem%%.*}; stem=${stem,,}
        case $f in
        tests/integration/test_*.py) add "${stem#test_}" ;;
        *) add "$stem" ;;
        esac
    done <<<"$changed"
    ((${#chosen[@]})) || chosen=("${FAST[@]}")
    echo "quick: changed since ${base:-nothing}: $(wc -l <<<"$changed" | tr -d ' ') files;" \
         "integration: ${chosen[*]}"
    ((${#slow[@]})) && echo "quick: not run (slow, or past ${ND_QUICK_MAX:-4}): ${slow[*]};" \
                            "run them with: bash tests/quick.sh ${slow[*]}"
fi

# -- run --
passed=0 failed=0
run() { # run [meson test arguments]: adds to passed/failed
    meson test -C "$dir" --no-rebuild --print-errorlogs "$@" >"$log" 2>&1
    local ok bad
    ok=$(awk '/^Ok:/ { n += $2 } END { print n + 0 }' "$log")
    bad=$(awk '/^(Fail|Timeout|Unexpected Pass):/ { n += $NF } END { print n + 0 }' "$log")
    if ! grep -q "^Ok:" "$log"; then  # meson itself failed
        tail -n 20 "$log"
        bad=$((bad + 1))
    elif ((bad)); then  # the failures' logs (--print-errorlogs), then which failed
        sed -n '/^Summary of Failures:/q; p' "$log" | grep -vE "^(>>> |ninja)" |
            grep -vE "^ *[0-9]+/[0-9]+ .* (OK|SKIP|EXPECTEDFAIL) " | tail -n 60
        echo "quick: failed:"
        grep -E "^ *[0-9]+/[0-9]+ .* (FAIL|TIMEOUT|UNEXPECTEDPASS|ERROR) " "$log" | sort -u
    fi
    passed=$((passed + ok)) failed=$((failed + bad))
}
run --suite unit
t_unit=$(elapsed)
run "${chosen[@]}"

echo "quick: build ${t_build} s, unit suite $((t_unit - t_build)) s," \
     "integration $(($(elapsed) - t_unit)) s"
echo "quick: $passed passed, $failed failed in $(elapsed) s"
((failed == 0))
