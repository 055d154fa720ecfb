"""`systemd-analyze verify` accepts deploy/systemd/neardupd.service and an
instance of neardupd@.service (ExecStart pointed at the built neardupd, as
verify wants an existing binary), each also with the replica drop-in
(deploy/systemd/neardupd-replica.conf, in the unit's .d directory), and
deploy/systemd/nats-server.service (ExecStart pointed at the installed
nats-server; skipped, with a line saying so, where there is none), with no
warning about the units; and `systemd-analyze security --offline` rates
their exposure low.

Skipped (exit 77) where systemd-analyze is not installed. The unit also
runs for real under systemd in CI's fresh-machine stage (tests/fresh/run.sh
systemd: a minbase root booted with systemd-nspawn -b, the unit installed as
its header says, probes, drain and stop, restart)."""

import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import SOURCE_ROOT, Runner, check, neardupd_path  # noqa: E402

T = Runner("test_systemd")
UNITS = os.path.join(SOURCE_ROOT, "deploy", "systemd")


def prepared(tmp, unit, name, binary="/usr/bin/neardupd", built=None, dropin=None):
    """A copy of unit named name, running built (default: the built
    neardupd) instead of binary; with dropin, a copy of that file in the
    drop-in directory dropin names (relative to tmp)."""
    with open(os.path.join(UNITS, unit)) as f:
        text = f.read()
    built = built or os.path.abspath(neardupd_path())
    text, n = re.subn(r"^ExecStart=%s\b" % re.escape(binary), "ExecStart=" + built, text,
                      flags=re.M)
    check(n == 1, "%s: ExecStart=%s not found once", unit, binary)
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(text)
    if dropin:
        os.makedirs(os.path.join(tmp, os.path.dirname(dropin)), exist_ok=True)
        shutil.copy(os.path.join(UNITS, "neardupd-replica.conf"), os.path.join(tmp, dropin))
    return path


def verify(path, also=()):
    """systemd-analyze verify path; no line may name it (or one of also)."""
    p = subprocess.run(["systemd-analyze", "verify", path], capture_output=True, text=True,
                       timeout=60)
    name = os.path.basename(path)
    ours = [l for l in (p.stdout + p.stderr).splitlines()
            if name in l or path in l or any(a in l for a in also)]
    check(p.returncode == 0 and not ours, "systemd-analyze verify %s (exit %d):\n%s%s", name,
          p.returncode, p.stdout, p.stderr)


def exposure(path):
    """Overall exposure (0 = safe .. 10), or None if --offline is missing."""
    p = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager", path],
                       capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", p.stdout)
    return float(m.group(1)) if m else None


def hardened(path):
    name = os.path.basename(path)
    level = exposure(path)
    if level is None:
        print("  %s: systemd-analyze security --offline unavailable" % name)
    else:
        print("  %s: exposure %.1f" % (name, level))
        check(level <= 2.0, "%s: exposure %.1f, above 2.0", name, level)


@T.test
def units_verify_and_are_hardened():
    tmp = tempfile.mkdtemp(prefix="neardup-systemd-")
    try:
        for unit, name in (("neardupd.service", "neardupd.service"),
                           ("neardupd@.service", "neardupd@a.service")):
            path = prepared(tmp, unit, name)
            verify(path)
            hardened(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@T.test
def replica_units_verify_and_are_hardened():
    # A node with the drop-in (installed as neardupd.service.d/replica.conf,
    # or neardupd@.service.d/ for the instances), and a NATS server.
    for unit, name, dropin in (("neardupd.service", "neardupd.service",
                                "neardupd.service.d/replica.conf"),
                               ("neardupd@.service", "neardupd@a.service",
                                "neardupd@.service.d/replica.conf")):
        tmp = tempfile.mkdtemp(prefix="neardup-systemd-")
        try:
            path = prepared(tmp, unit, name, dropin=dropin)
            verify(path, also=(os.path.join(tmp, dropin),))
            hardened(path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    nats = shutil.which("nats-server")
    if nats is None:
        print("  nats-server is not installed: nats-server.service not verified")
        return
    tmp = tempfile.mkdtemp(prefix="neardup-systemd-")
    try:
        path = prepared(tmp, "nats-server.service", "nats-server.service",
                        binary="/usr/sbin/nats-server", built=os.path.abspath(nats))
        verify(path)
        hardened(path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    if shutil.which("systemd-analyze") is None:
        print("SKIP: systemd-analyze is not installed here")
        sys.exit(77)
    T.run()
