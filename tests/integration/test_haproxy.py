"""A real HAProxy (Debian's package) in front of two neardupd instances, with
the shipped deploy/haproxy/haproxy.cfg (only addresses, the stats socket and
the log target substituted) and the drain delay of deploy/neardupd.env:

- `haproxy -c` accepts the shipped file and the substituted one;
- requests flow through HAProxy to the active instance;
- SIGTERM to it: HAProxy marks it DOWN via /readyz within the interval its
  health check is configured for, and no client request fails while it
  drains (clients on keep-alive and on new connections, reads and writes);
- restarted, it is UP again and gets the traffic back.

test_drain.py checks --drain-delay without HAProxy.

Skipped (exit 77) only when haproxy is not installed; CI installs it
(deploy/install-deps.sh --test)."""

import http.client
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HOST, SOURCE_ROOT, HAProxyProcess, HAProxyTimings, Runner,  # noqa: E402
                     Server, ThreadGroup, check, free_port, haproxy_check, load_texts)

T = Runner("test_haproxy")
CFG = os.path.join(SOURCE_ROOT, "deploy", "haproxy", "haproxy.cfg")
ENV = os.path.join(SOURCE_ROOT, "deploy", "neardupd.env")
TEXTS = load_texts()
TEXT = TEXTS["en1"]


def env_setting(name):
    """The value deploy/neardupd.env sets (uncommented) for name, or None."""
    with open(ENV) as f:
        for line in f:
            m = re.match(r"^%s=(.*)$" % re.escape(name), line.strip())
            if m:
                return m.group(1)
    return None


def substitute(text, pairs):
    """Applies (regex, replacement) pairs, each of which must match once."""
    for pattern, repl in pairs:
        text, n = re.subn(pattern, repl, text, flags=re.M)
        check(n == 1, "haproxy.cfg: %r matched %d times, not once (file changed?)", pattern, n)
    return text


class HAProxy(HAProxyProcess):
    """haproxy in the foreground (-db) with the substituted config."""

    def __init__(self, tmp, ports):
        self.tmp = tmp
        self.sock = os.path.join(tmp, "admin.sock")
        self.port = ports["front"]
        with open(CFG) as f:
            shipped = f.read()
        self.timings = HAProxyTimings(shipped.splitlines(), shipped)
        text = substitute(shipped, [
            (r"^\s*log /dev/log\s.*$", "    log stderr format raw local0 info"),
            (r"^\s*chroot\s.*\n", ""),
            (r"^\s*user haproxy\s*\n", ""),
            (r"^\s*group haproxy\s*\n", ""),
            (r"^\s*daemon\s*\n", ""),
            (r"^(\s*stats socket )\S+", r"\g<1>" + self.sock),
            (r"^(\s*bind )\S*:8080\b", r"\g<1>%s:%d" % (HOST, ports["front"])),
            (r"^(\s*server a )127\.0\.0\.1:8081\b", r"\g<1>%s:%d" % (HOST, ports["a"])),
            (r"^(\s*server b )127\.0\.0\.1:8082\b", r"\g<1>%s:%d" % (HOST, ports["b"])),
            (r"^(\s*bind )127\.0\.0\.1:8404\b", r"\g<1>%s:%d" % (HOST, ports["stats"])),
        ])
        self.cfg = os.path.join(tmp, "haproxy.cfg")
        with open(self.cfg, "w") as f:
            f.write(text)
        self.log_path = os.path.join(tmp, "haproxy.log")
        self.backend = "neardupd"


class Load(ThreadGroup):
    """Client threads through HAProxy: keep-alive and one connection per
    request; /fingerprint and registering /check-original. Every request must
    get a 200; paced so that two cores are not saturated."""

    def __init__(self, port):
        super().__init__(3)
        self.port = port
        self.lock = threading.Lock()
        self.results = []  # (time, kind, status or error, served by)

    def request(self, conn, i, n):
        if i == 1:
            body = {"id": "ha-%d-%d" % (i, n), "text": TEXT + " #%d" % n, "register": True}
            path = "/check-original"
        else:
            body = {"text": TEXT[: 200 + n % 300]}
            path = "/fingerprint"
        conn.request("POST", path, body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, resp.getheader("X-Served-By"), data

    def run(self, i):
        keep_alive = i != 2
        conn = None
        n = 0
        while not self.stop.is_set():
            if conn is None:
                conn = http.client.HTTPConnection(HOST, self.port, timeout=20)
            try:
                status, by, data = self.request(conn, i, n)
                outcome = status if status == 200 else "%s %r" % (status, data[:200])
            except (OSError, http.client.HTTPException) as e:
                outcome, by = "error %r" % e, None
                conn.close()
                conn = None
            with self.lock:
                self.results.append((time.monotonic(), i, outcome, by))
            if not keep_alive and conn is not None:
                conn.close()
                conn = None
            n += 1
            time.sleep(0.01)
        if conn is not None:
            conn.close()

    def served_by(self, since):
        with self.lock:
            return [r[3] for r in self.results if r[0] >= since and r[2] == 200]

    def failures(self):
        with self.lock:
            return [r for r in self.results if r[2] != 200]


@T.test
def shipped_config_is_valid():
    if os.geteuid() != 0 and not os.path.isdir("/var/lib/haproxy"):
        print("  (haproxy -c of the shipped file needs /var/lib/haproxy; skipped)")
        return
    haproxy_check(CFG)


@T.test
def drain_is_invisible_through_haproxy():
    delay = env_setting("NEARDUP_DRAIN_DELAY")
    check(delay is not None, "deploy/neardupd.env sets no NEARDUP_DRAIN_DELAY")
    tmp = tempfile.mkdtemp(prefix="neardup-haproxy-")
    ports = {k: free_port() for k in ("front", "a", "b", "stats")}
    ha = HAProxy(tmp, ports)
    tm = ha.timings
    check(int(delay) > tm.down_within(),
          "NEARDUP_DRAIN_DELAY=%s does not cover HAProxy's detection time %.1fs", delay,
          tm.down_within())
    args = ["--drain-delay", delay, "--drain-timeout", "10"]
    a = Server(args, port=ports["a"], threads=1)
    b = Server(args, port=ports["b"], threads=1)
    load = None
    try:
        a.start()
        b.start()
        ha.start()
        ha.wait_status("a", "UP", tm.up_within() + 5)
        ha.wait_status("b", "UP", tm.up_within() + 5)
        load = Load(ports["front"])
        load.start()
        time.sleep(1.0)
        check(set(load.served_by(0)) == {"a"}, "before: served by %r",
              set(load.served_by(0)))

        t0 = time.monotonic()
        a.signal(signal.SIGTERM)
        down = ha.wait_status("a", "DOWN", tm.down_within() + 5)
        print("  a marked DOWN %.2fs after SIGTERM (configured bound %.1fs)"
              % (down, tm.down_within()))
        check(down <= tm.down_within() + 0.5, "DOWN after %.2fs, bound %.1fs", down,
              tm.down_within())
        check(a.proc.poll() is None, "a exited before HAProxy marked it down")
        code = a.wait(timeout=int(delay) + 20)
        stopped = time.monotonic() - t0
        check(code == 0, "a exited %s:\n%s", code, a.log_tail())
        check(stopped >= int(delay) - 0.5, "a stopped after %.1fs, before its delay", stopped)
        msgs = [r.get("msg", "") for r in a.log_records()]
        check(any(m.startswith("draining (SIGTERM)") for m in msgs), "no draining line")
        check("drain delay over: listeners closing" in msgs, "no end-of-delay line")
        # The window this is about: between SIGTERM and HAProxy's verdict, a
        # still served the requests HAProxy sent it (none was refused).
        recs = a.log_records()
        i = next(k for k, r in enumerate(recs) if r.get("msg", "").startswith("draining"))
        late = [r for r in recs[i:] if r.get("msg") == "request" and r["path"] != "/readyz"]
        print("  a served %d requests after SIGTERM, before HAProxy's verdict" % len(late))
        check(late and all(r["status"] == 200 for r in late), "late requests: %r", late[:3])
        t_b = time.monotonic()
        time.sleep(0.5)
        check(set(load.served_by(t_b)) == {"b"}, "while a is down: served by %r",
              set(load.served_by(t_b)))

        a.restart(args)
        up = ha.wait_status("a", "UP", tm.up_within() + 5)
        print("  a UP again %.2fs after it was ready (bound %.1fs)" % (up, tm.up_within()))
        t_back = time.monotonic() + 0.2
        time.sleep(1.0)
        load.finish()
        back = load.served_by(t_back)
        check(back and set(back) == {"a"}, "after restart: served by %r", set(back))
        fails = load.failures()
        total = len(load.results)
        print("  %d requests through HAProxy, %d failed" % (total, len(fails)))
        check(total > 100, "too little load: %d requests", total)
        check(not fails, "client requests failed: %r\nhaproxy log:\n%s", fails[:5],
              ha.log_text())
    finally:
        if load:
            load.stop.set()
        ha.stop()
        for s in (a, b):  # both drain at once (each takes the drain delay)
            s.signal(signal.SIGTERM)
        for s in (a, b):
            try:
                if s.proc and s.proc.poll() is None:
                    code = s.wait(timeout=int(delay) + 20)
                    check(code == 0, "exit %s at the end:\n%s", code, s.log_tail())
                s.check_sanitizers()
            finally:
                s.cleanup()
        if os.environ.get("ND_KEEP_TMP") is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    if shutil.which("haproxy") is None:
        print("SKIP: haproxy is not installed (deploy/install-deps.sh --test installs it)")
        sys.exit(77)
    T.run()
