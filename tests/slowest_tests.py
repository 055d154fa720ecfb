#!/usr/bin/env python3
"""slowest_tests.py TESTLOG_JSON: per suite in a meson testlog, its tests'
seconds summed and the five slowest, one line a suite ("unit: 29 tests,
41 s in all; slowest: registry 14 s, ..."). Nothing when the file is
missing. Used by tests/run-all.sh and tests/fresh/run.sh."""
import json
import sys

suites = {}
try:
    for line in open(sys.argv[1]):
        t = json.loads(line)
        suite = t["name"].split(" / ")[0].split(":")[-1]  # "neardup:unit / utf8"
        suites.setdefault(suite, []).append((t.get("duration", 0.0), t["name"].split(" / ")[-1]))
except OSError:
    sys.exit(0)
for suite, tests in sorted(suites.items()):
    tests.sort(reverse=True)
    print("%s: %d tests, %.0f s in all; slowest: %s" % (
        suite, len(tests), sum(d for d, _ in tests),
        ", ".join("%s %.0f s" % (n, d) for d, n in tests[:5])))
