"""Logs: JSON lines on stderr.

- one access line per request with time, request id (the X-Request-Id the
  client gave or got), method, path, status, latency and bytes in and out;
  also for requests libevent refuses itself (malformed, too large);
- the level flag (--log-level / NEARDUP_LOG_LEVEL) and --no-access-log;
- the start-up lines in order: "starting neardupd" (version, effective
  configuration), "listening", "loading documents" progress (a first line at
  once with the total, a last one with everything loaded), "ready"; and the
  shutdown lines."""

import json
import os
import random
import re
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HOST, RFC3339_US, Runner, Server, check, free_port,  # noqa: E402
                     neardupd_path)

T = Runner("test_logs")


def every_line_is_json(srv):
    for line in srv.log_text().splitlines():
        rec = json.loads(line)  # raises on a line that is not JSON
        check(RFC3339_US.match(rec.get("time", "")), "time %r", rec.get("time"))
        check(rec.get("level") in ("debug", "info", "warn", "error"), rec)
        check(isinstance(rec.get("msg"), str), rec)


def access(recs):
    return [r for r in recs if r.get("msg") == "request"]


@T.test
def one_line_per_request_with_every_field():
    with Server(in_memory=True, threads=2) as srv:
        sent = []  # (method, path, status, rid, bytes in, bytes out)
        body = json.dumps({"text": "The quick brown fox jumps over the lazy dog."}).encode()
        cases = [("GET", "/healthz", None, {}), ("HEAD", "/readyz", None, {}),
                 ("POST", "/fingerprint", body, {"Content-Type": "application/json"}),
                 ("POST", "/fingerprint", b"{bad", {"Content-Type": "application/json"}),
                 ("GET", "/documents/nope%20x", None, {}), ("DELETE", "/healthz", None, {}),
                 ("GET", "/nowhere?q=1", None, {"X-Request-Id": "client-given.42"})]
        for method, path, data, hdrs in cases:
            status, h, out = srv.request(method, path, data, hdrs)
            sent.append((method, path.split("?")[0], status, h.get("x-request-id"),
                         len(data or b""), len(out)))
        rids = [x[3] for x in sent]
        check(len(set(rids)) == len(rids), "request ids not unique: %r", rids)
        # Workers flush their lines every 100 ms, each in its own order.
        mine = lambda recs: [r for r in access(recs) if r["rid"] in rids]  # noqa: E731
        recs = srv.log_records_until(lambda r: len(mine(r)) >= len(sent))
        lines = mine(recs)
        check(len(lines) == len(sent), "%d access lines for %d requests: %r", len(lines),
              len(sent), lines)
        by_rid = {r["rid"]: r for r in lines}
        for method, path, status, rid, n_in, n_out in sent:
            check(rid in by_rid, "no access line with rid %r", rid)
            r = by_rid[rid]
            check(r["method"] == method and r["path"] == path and r["status"] == status,
                  "%r for %s %s %s", r, method, path, status)
            check(r["bytes_in"] == n_in, "bytes_in %r, sent %d", r["bytes_in"], n_in)
            if method != "HEAD":
                check(r["bytes_out"] == n_out, "bytes_out %r, got %d", r["bytes_out"], n_out)
            check(isinstance(r["latency_ms"], float) and 0 <= r["latency_ms"] < 5000, r)
            check(r["level"] == "info" and RFC3339_US.match(r["time"]), r)
        check("client-given.42" in by_rid, "the client's X-Request-Id was not kept")
        every_line_is_json(srv)


@T.test
def refused_by_libevent_is_logged_too():
    with Server(["--max-body", "2K", "--max-meta", "1K"], in_memory=True, threads=1) as srv:
        s = socket.create_connection((HOST, srv.port), timeout=5)
        s.sendall(b"BLAH /x HTTP/1.1\r\nHost: y\r\n\r\n")
        s.recv(4096)
        s.close()
        status, _, _ = srv.request("POST", "/fingerprint", b"x" * 4096,
                                   {"Content-Type": "text/plain"})
        check(status == 413, status)
        recs = srv.log_records_until(lambda r: any(x["status"] == 413 for x in access(r)))
        lines = access(recs)
        check(any(x["status"] == 413 for x in lines), "no line for the 413: %r", lines)
        check(any(x["status"] in (400, 501) for x in lines), "no line for the bad method: %r",
              lines)
        every_line_is_json(srv)


@T.test
def level_flag_and_environment():
    # warn: neither start-up lines nor the access log (the port is given:
    # it is not logged at this level).
    with Server(["--log-level", "warn"], in_memory=True, threads=1, port=free_port()) as srv:
        srv.request("GET", "/healthz")
        time.sleep(0.3)
        check(srv.log_records() == [], "lines at warn: %r", srv.log_records()[:3])
    with Server(in_memory=True, threads=1, port=free_port(),
                env={"NEARDUP_LOG_LEVEL": "error"}) as srv:
        srv.request("GET", "/healthz")
        time.sleep(0.3)
        check(srv.log_records() == [], "lines at error")
    # A warning is still written at warn: a second server on the same port.
    port = free_port()
    with Server(["--log-level", "warn"], in_memory=True, threads=1, port=port):
        other = Server(["--log-level", "error"], in_memory=True, threads=1, port=port,
                       wait_ready=False)
        try:
            other.start()
            check(other.wait(timeout=10) == 1, "second server did not fail")
            errs = [r for r in other.log_records() if r["level"] == "error"]
            check(errs and "cannot listen" in errs[0]["msg"], other.log_text())
        finally:
            other.cleanup()
    # debug is accepted and includes info.
    with Server(["--log-level", "debug"], in_memory=True, threads=1) as srv:
        srv.request("GET", "/healthz")
        check(access(srv.log_records_until(lambda r: len(access(r)) >= 2)), "no access lines")
    # An unknown level is refused before start.
    p = subprocess.run([neardupd_path(), "--in-memory", "--log-level", "loud"],
                       capture_output=True, text=True, timeout=10)
    check(p.returncode == 2 and "log-level" in p.stderr, p)


@T.test
def no_access_log():
    with Server(["--no-access-log"], in_memory=True, threads=1) as srv:
        for _ in range(5):
            srv.request("GET", "/healthz")
        time.sleep(0.3)
        recs = srv.log_records()
        check(not access(recs), "access lines with --no-access-log")
        check(any(r.get("msg") == "ready" for r in recs), "start-up lines missing")


def random_text(rng, words=90):
    return " ".join("w%x" % rng.getrandbits(40) for _ in range(words))


@T.test
def start_up_and_shutdown_lines():
    rng = random.Random(7)
    n = 150
    with Server(["--min-chars", "50"], threads=2) as srv:
        for i in range(n):
            status, r = srv.json("POST", "/check-original",
                                 {"id": "s%d" % i, "text": random_text(rng), "register": True,
                                  "k": 0})
            check(status == 200 and r["registered"], r)
        check(srv.stop() == 0)
        srv.restart()
        recs = srv.log_records()
        msgs = [r["msg"] for r in recs]
        order = ["starting neardupd", "listening", "loading documents", "ready"]
        pos = [msgs.index(m) for m in order]
        check(pos == sorted(pos), "start-up lines out of order: %r", msgs[:8])
        start = recs[pos[0]]
        check(re.match(r"^\d+\.\d+\.\d+", start["version"]) and start["fingerprint"], start)
        check(start["config"]["data"] == srv.data_dir and start["config"]["threads"] == 2,
              start["config"])
        check(recs[pos[1]]["port"] == srv.port, recs[pos[1]])
        progress = [r for r in recs if r["msg"] == "loading documents"]
        check(progress[0]["loaded"] == 0 and progress[0]["total"] == n, progress[0])
        check(progress[-1]["loaded"] == n and progress[-1]["total"] == n, progress[-1])
        for p in progress:
            for key in ("loaded", "total", "stale", "rate"):
                check(key in p, "progress line lacks %s: %r", key, p)
        ready = recs[pos[3]]
        check(ready["documents"] == n and ready["indexed"] == n and "seconds" in ready, ready)
        check(srv.stop() == 0)
        recs = srv.log_records()
        msgs = [r["msg"] for r in recs]
        check(any(m.startswith("draining (SIGTERM)") for m in msgs), msgs[-3:])
        check(msgs[-1] == "stopped (exit 0)", msgs[-1])
        every_line_is_json(srv)


if __name__ == "__main__":
    T.run()
