"""--drain-delay (NEARDUP_DRAIN_DELAY), the first step of a drain behind a
load balancer: at SIGTERM /readyz answers 503 at once while new connections
are still accepted and served (each reply with "Connection: close") for the
delay; then the listeners close and the usual drain follows. A second
signal still ends the process at once. test_haproxy.py checks the whole
sequence through a real HAProxy."""

import json
import os
import signal
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import HOST, Runner, Server, check  # noqa: E402

T = Runner("test_drain")


def refused(port):
    try:
        socket.create_connection((HOST, port), timeout=2).close()
        return False
    except OSError:
        return True


@T.test
def delay_keeps_serving_then_closes():
    with Server(["--drain-delay", "2", "--drain-timeout", "5"], in_memory=True,
                threads=1) as srv:
        t0 = time.monotonic()
        srv.signal(signal.SIGTERM)
        time.sleep(0.2)
        status, hdrs, data = srv.request("GET", "/readyz")
        check(status == 503 and json.loads(data)["error"]["code"] == "draining",
              "readyz %s %r", status, data)
        # New connections are still accepted and served, and told to close.
        status, hdrs, data = srv.request("POST", "/fingerprint", json.dumps({"text": "x y z"}),
                                         {"Content-Type": "application/json"})
        check(status == 200, "POST during the delay: %s %r", status, data)
        check(hdrs.get("connection") == "close", "no Connection: close: %r", hdrs)
        check(srv.metrics().get("neardup_draining") == 1, "neardup_draining not 1")
        while not refused(srv.port):
            check(time.monotonic() - t0 < 4, "still accepting after the delay")
            time.sleep(0.05)
        closed_after = time.monotonic() - t0
        check(closed_after >= 1.8, "listeners closed after %.2fs, delay 2s", closed_after)
        check(srv.wait(timeout=10) == 0, "exit code")
        recs = srv.log_records()
        first = [r for r in recs if r.get("msg", "").startswith("draining")]
        check(first and first[0].get("drain_delay") == 2 and first[0].get("drain_timeout") == 5
              and first[0].get("reason") == "SIGTERM", "draining line %r", first)
        check(any(r.get("msg") == "drain delay over: listeners closing" for r in recs),
              "no end-of-delay line")
        check(recs[-1].get("msg") == "stopped (exit 0)", recs[-1])


@T.test
def environment_variable_and_default():
    with Server([], in_memory=True, threads=1, env={"NEARDUP_DRAIN_DELAY": "1"}) as srv:
        start = [r for r in srv.log_records() if r.get("msg") == "starting neardupd"][0]
        check(start["config"]["drain_delay"] == 1, start["config"])
    with Server([], in_memory=True, threads=1) as srv:
        start = [r for r in srv.log_records() if r.get("msg") == "starting neardupd"][0]
        check(start["config"]["drain_delay"] == 0, start["config"])
        # Default: no delay, the listeners close at once (as before).
        t0 = time.monotonic()
        srv.signal(signal.SIGTERM)
        check(srv.wait(timeout=10) == 0, "exit code")
        check(time.monotonic() - t0 < 1.5, "stop took %.1fs without a delay",
              time.monotonic() - t0)


@T.test
def second_signal_ends_the_delay():
    srv = Server(["--drain-delay", "30"], in_memory=True, threads=1)
    try:
        srv.start()
        t0 = time.monotonic()
        srv.signal(signal.SIGTERM)
        time.sleep(0.3)
        check(srv.proc.poll() is None, "exited during the delay")
        srv.signal(signal.SIGTERM)
        code = srv.wait(timeout=10)
        check(code == -signal.SIGTERM, "exit %s, wanted death by SIGTERM", code)
        check(time.monotonic() - t0 < 5, "took %.1fs", time.monotonic() - t0)
    finally:
        srv.cleanup()


if __name__ == "__main__":
    T.run()
