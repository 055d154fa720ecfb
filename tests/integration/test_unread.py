"""Clients that do not read their answers: an answer can
be about 100 matches x 16 KiB of meta = 1.65 MB, and 300 connections that
sent k=8 queries into a dense cluster of such documents and never read took
the server from 13 to 559 MB. Now a connection whose reply stays unwritten
stops being read, unwritten replies together are bounded (32 MiB: new
requests get 503 "overloaded" above it, and connections whose reply made no
progress for a second are closed), and the memory stays bounded while
other clients are served (README, "Limits"). On jemalloc the peak RSS
holds to it because the daemon has freed memory reused before new pages
are touched (neardupd.c's malloc_conf; with jemalloc's default reuse rule
the peak grew by 96-171 MB while live memory stayed under 58 MB).

The cluster is written straight into a store (store_tool): N documents of
one text (so that each verifies as identical) with 16 KiB of meta each."""

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HOST, Runner, Server, check, load_texts, tool_path)  # noqa: E402
from test_badinput import Prober, hwm_kb, raise_nofile, rss_kb, sanitized  # noqa: E402

T = Runner("test_unread")


class ErrorProber(Prober):
    """Probes /healthz and a small /fingerprint: none may fail. The latency
    is printed, not checked here: the attack itself (200 queries of 150
    candidates and 1.65 MB answers) is CPU work on two shared cores."""

    def check(self):
        check(not self.errors, "other clients failed meanwhile: %r", self.errors[:5])
        lat = sorted(self.lat)
        if lat:
            print("     probes: %d, p50 %.1f ms, p99 %.1f ms" % (
                len(lat), lat[len(lat) // 2] * 1e3, lat[min(len(lat) - 1, int(len(lat) * .99))] * 1e3))
TEXT = load_texts()["en1"]
CLUSTER = 150
META = {"note": "m" * 16000}
ATTACKERS = 200


def simhash_of(text):
    p = subprocess.run([tool_path("NEARDUP", ("server", "neardup")), "fingerprint"],
                       input=text.encode(), capture_output=True, timeout=60)
    check(p.returncode == 0, "neardup fingerprint: %r", p.stderr)
    return p.stdout.decode().strip()


def make_cluster(data_dir):
    h = simhash_of(TEXT)
    lines = []
    t0 = int(time.time() * 1e6) - 10 ** 9
    for i in range(CLUSTER):
        lines.append(json.dumps({"id": "dense-%d" % i, "simhash": h, "registered_at_us": t0 + i,
                                 "chars": len(TEXT), "text": TEXT, "meta": META}))
    p = subprocess.run([tool_path("ND_STORE_TOOL", ("tests", "store_tool")), "put", data_dir],
                       input=("\n".join(lines) + "\n").encode(), capture_output=True,
                       timeout=120)
    check(p.returncode == 0, "store_tool: %r %r", p.stdout, p.stderr)


def query(k=8):
    body = json.dumps({"text": TEXT, "k": k}).encode()
    return (b"POST /check-original HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


@T.test
def unread_replies_stay_bounded():
    raise_nofile()
    tmp = tempfile.mkdtemp(prefix="neardup-unread-")
    data = os.path.join(tmp, "data")
    make_cluster(data)
    with Server(["--request-timeout", "60", "--timeout", "60"], data_dir=data) as srv:
        status, _, body = srv.request("POST", "/check-original", json.dumps(
            {"text": TEXT, "k": 8}), {"Content-Type": "application/json"})
        check(status == 200, "%s %r", status, body[:300])
        answer = json.loads(body)
        print("     one answer: %d matches, %.2f MB" % (len(answer["matches"]), len(body) / 1e6))
        check(len(body) > 1_000_000, "the answer is only %d bytes" % len(body))
        time.sleep(0.5)
        rss0, hwm0 = rss_kb(srv), hwm_kb(srv.proc.pid)
        socks = []
        with ErrorProber(srv) as prober:
            for i in range(ATTACKERS):
                s = socket.socket()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.connect((HOST, srv.port))
                s.setblocking(False)
                try:
                    s.send(query() * 8)  # pipelined; never read
                except BlockingIOError:
                    pass
                socks.append(s)
            time.sleep(4)
            hwm = hwm_kb(srv.proc.pid)
            # Other clients still get their (large) answers.
            status, _, body = srv.request("POST", "/check-original", json.dumps(
                {"text": TEXT, "k": 8}), {"Content-Type": "application/json"}, timeout=30)
            check(status in (200, 503), "%s %r", status, body[:200])
        closed = 0
        for s in socks:
            try:
                while True:
                    if s.recv(1 << 20) == b"":
                        closed += 1
                        break
            except BlockingIOError:
                pass
            except OSError:
                closed += 1
            s.close()
        grown = (hwm - hwm0) / 1024
        print("     %d connections that never read: peak RSS +%.0f MB (from %.0f MB), %d of "
              "them closed by the server" % (
                  ATTACKERS, grown, rss0 / 1024, closed))
        m = srv.metrics()
        print("     503 overloaded answers: %d" % m.get(
            'neardup_http_requests_total{route="/check-original",code="503"}', 0))
        if not sanitized(srv):
            # At most 32 MiB of unwritten replies, one answer per worker
            # being built, the attackers' requests: 39-49 MB measured on
            # jemalloc, 15-19 MB on glibc malloc (-Dallocator=system).
            check(grown < 80, "peak RSS grew by %.0f MB" % grown)
        check(closed > 0, "no connection that does not read was closed")
        shed = [r for r in srv.log_records()
                if r.get("msg", "").startswith("unwritten replies over their budget")]
        print("     stalled connections closed (log): %d" % sum(r["closed"] for r in shed))
        time.sleep(1.5)
        status, _, body = srv.request("POST", "/check-original", json.dumps(
            {"text": TEXT, "k": 8}), {"Content-Type": "application/json"}, timeout=30)
        check(status == 200, "after the attack: %s %r", status, body[:200])
        del prober


if __name__ == "__main__":
    T.run()
