#!/usr/bin/env python3
"""What the integration tests need from the machine, read from their source,
and the tests that run each of those tools for real (python3 stdlib only).

The fresh-machine stage (tests/fresh/run.sh, part "tests") runs this in a
fresh Debian 12 root after `deploy/install-deps.sh --test`, instead of the
whole unit and integration suites a third time:

  tools.py check        every program the integration tests start and every
                        Python module they import (not the standard library's,
                        not their own) is installed there; SMOKE's commands
                        (a network namespace, a veth, an iptables rule) run
  tools.py tests        the integration tests to run there: for each of those
                        tools, a test that runs it (TOOLS below); exit 1 when a
                        test uses a tool TOOLS does not name
  tools.py list         each tool, the tests that use it and the one run

Read from tests/integration/*.py with ast: the constant arguments of
shutil.which(), the first element of a list literal given to subprocess.run,
Popen, call, check_call or check_output or assigned to a name ending in
"cmd", and top-level import names. shutil.which(A) or shutil.which(B) asks
for A or B. Exit 0 when all is there; otherwise one line per tool missing."""

import ast
import importlib.util
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
INTEGRATION = os.path.join(ROOT, "tests", "integration")

# Each tool the integration tests use -> the test (tests/meson.build's name)
# that runs it for real in the fresh root. The cheapest that does. A tool a
# test starts that is not here fails "tools.py tests": add it, with a test.
TOOLS = {
    "haproxy": "haproxy",           # neardupd behind HAProxy, keep-alive, health checks
    "nats-server": "events_replicas",  # 3 NATS servers, JetStream, 3 nodes
    "opencc": "evasion",            # Traditional copies made by OpenCC itself
    "promtool": "metrics",          # promtool check metrics on /metrics
    "systemd-analyze": "systemd",   # verify and security of the unit
    "mount": "storage_full",        # a small tmpfs filled up
    "umount": "storage_full",
    "chromium": "console",          # the console in headless chromium
    "chromedriver": "console",
    "node|nodejs": "contract",      # the npm validator and generated client
    "selenium": "console",          # python3-selenium
    "yaml": "contract",             # python3-yaml, python3-jsonschema
    "jsonschema": "contract",
}
# Used only by a long test (test_history: 65-110 s, up to 3 min, flaky on a
# busy machine; test_webhooks: ~60 s): in the root, the commands it runs with
# the tool are run once here instead ("tools.py check"): to cut a NATS server
# off; to make the TLS receiver's certificate.
SMOKE = {
    "openssl": [["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                 "-keyout", "/tmp/nd-fresh-tools-key.pem", "-out", "/tmp/nd-fresh-tools-cert.pem",
                 "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]],
    "ip": [["ip", "netns", "add", "nd-fresh-tools"],
           ["ip", "link", "add", "ndft0", "type", "veth", "peer", "name", "ndft1"],
           ["ip", "link", "set", "ndft1", "netns", "nd-fresh-tools"],
           ["ip", "netns", "exec", "nd-fresh-tools", "ip", "link", "set", "lo", "up"]],
    "iptables": [["ip", "netns", "exec", "nd-fresh-tools", "iptables", "-A", "INPUT",
                  "-i", "ndft1", "-p", "tcp", "-j", "DROP"],
                 ["ip", "netns", "exec", "nd-fresh-tools", "iptables", "-S"]],
}
SMOKE_CLEANUP = [["ip", "link", "del", "ndft0"], ["ip", "netns", "del", "nd-fresh-tools"],
                 ["rm", "-f", "/tmp/nd-fresh-tools-key.pem", "/tmp/nd-fresh-tools-cert.pem"]]
# In every Debian (Essential: yes): checked present, no test needed for them.
ESSENTIAL = {"bash", "sh"}
# Imported when present, with a fallback that still checks (not a skip).
OPTIONAL = {
    "openapi_spec_validator": "test_openapi: a structural check of the spec without it",
}
SUBPROCESS_CALLS = {"run", "Popen", "call", "check_call", "check_output"}
PROGRAM = re.compile(r"^[a-z][a-z0-9_.+-]*$")


def first_program(node):
    """The program a list literal starts, or None."""
    if isinstance(node, ast.List) and node.elts:
        e = node.elts[0]
        if isinstance(e, ast.Constant) and isinstance(e.value, str) and PROGRAM.match(e.value):
            return e.value
    return None


def which_names(node):
    """shutil.which("A") [or shutil.which("B") ...] -> "A|B", else None."""
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
        names = [which_names(v) for v in node.values]
        names = [n for n in names if n]
        return "|".join(names) if names else None
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "which" and node.args
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        return node.args[0].value
    return None


def scan():
    """{tool: set of files using it} for programs and third-party modules."""
    local = {f[:-3] for f in os.listdir(INTEGRATION) if f.endswith(".py")}
    uses = {}
    for f in sorted(os.listdir(INTEGRATION)):
        if not f.endswith(".py"):
            continue
        tree = ast.parse(open(os.path.join(INTEGRATION, f), encoding="utf-8").read(), f)
        found = set()
        inside_or = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.BoolOp):
                n = which_names(node)
                if n and "|" in n:
                    found.add(n)
                    inside_or.update(id(v) for v in node.values)
        for node in ast.walk(tree):
            if id(node) in inside_or:
                continue
            n = which_names(node)
            if n and "|" not in n:
                found.add(n)
            if isinstance(node, ast.Call):
                fn = node.func
                if (isinstance(fn, ast.Attribute) and fn.attr in SUBPROCESS_CALLS
                        and isinstance(fn.value, ast.Name) and fn.value.id == "subprocess"
                        and node.args and first_program(node.args[0])):
                    found.add(first_program(node.args[0]))
            elif isinstance(node, ast.Assign) and first_program(node.value):
                if any(isinstance(t, ast.Name) and t.id.endswith("cmd") for t in node.targets):
                    found.add(first_program(node.value))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                if isinstance(node, ast.ImportFrom):
                    if node.level:
                        continue
                    names = [node.module]
                else:
                    names = [a.name for a in node.names]
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in local:
                        found.add(top)
        for t in found:
            uses.setdefault(t, set()).add(f)
    return uses


def is_module(tool):
    return not any(shutil.which(p) for p in tool.split("|")) and importlib.util.find_spec(tool) is not None


def present(tool):
    """None when the tool is there and runs, else why not."""
    progs = tool.split("|")
    if any(shutil.which(p) for p in progs):
        return None
    if len(progs) == 1 and importlib.util.find_spec(tool) is not None:
        try:
            __import__(tool)
        except Exception as e:  # a module installed but broken
            return "python3 cannot import %s: %s" % (tool, e)
        return None
    return "not installed (no program %s on PATH, no Python module)" % " or ".join(progs)


def smoke(tools):
    """Runs SMOKE's commands of those tools; prints and counts the failures."""
    failed = 0
    try:
        for t in tools:
            for cmd in SMOKE[t]:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
                if r.returncode != 0:
                    print("tools: %s: '%s' failed (exit %d): %s" % (
                        t, " ".join(cmd), r.returncode, (r.stderr or r.stdout).strip()[:300]))
                    failed += 1
                    break
    finally:
        for cmd in SMOKE_CLEANUP:
            subprocess.run(cmd, capture_output=True, timeout=30)
    return failed


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "list"
    uses = scan()
    tools = sorted(t for t in uses if t not in OPTIONAL)
    if mode == "list":
        for t in tools:
            print("%-16s run by %-16s used by %s" % (t, TOOLS.get(t, "(check)" if t in SMOKE else
                                                              "(essential)" if t in ESSENTIAL else "(none)"),
                                                    " ".join(sorted(uses[t]))))
        for t, why in OPTIONAL.items():
            print("%-16s optional: %s" % (t, why))
        return 0
    if mode == "tests":
        unnamed = [t for t in tools if t not in TOOLS and t not in SMOKE and t not in ESSENTIAL]
        for t in unnamed:
            print("tools: %s (used by %s) is not in tests/fresh/tools.py's TOOLS: "
                  "name the test that runs it" % (t, " ".join(sorted(uses[t]))), file=sys.stderr)
        wrong = [t for t, test in TOOLS.items() if t in uses and "test_%s.py" % test not in uses[t]
                 and not any(u.startswith(("harness", "cluster")) for u in uses[t])]
        for t in wrong:
            print("tools: TOOLS names test %s for %s, which its source does not use (used by %s)"
                  % (TOOLS[t], t, " ".join(sorted(uses[t]))), file=sys.stderr)
        if unnamed or wrong:
            return 1
        names = []
        for t in tools:
            if t in TOOLS and TOOLS[t] not in names:
                names.append(TOOLS[t])
        print(" ".join(names))
        return 0
    if mode == "check":
        missing = [(t, present(t)) for t in tools]
        missing = [(t, why) for t, why in missing if why]
        for t, why in missing:
            print("tools: %s: %s (used by %s)" % (t, why, " ".join(sorted(uses[t]))))
        if missing:
            return 1
        failed = smoke([t for t in tools if t in SMOKE])
        if failed:
            return 1
        versions = []
        for t in tools:
            p = next((shutil.which(x) for x in t.split("|") if shutil.which(x)), None)
            versions.append(t + ("" if p else " (python3 module)"))
        print("tools: all %d present: %s" % (len(tools), ", ".join(versions)))
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
