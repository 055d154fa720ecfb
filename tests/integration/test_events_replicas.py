"""The event feed of a replicated neardup: detections and import audit
entries travel in the stream like every other write, so every node holds
the same feed, event for event (same seq, id, type, time and data), also
after a node is killed with kill -9 while checks are running and comes
back, and after a node read entries directly from a NATS server that
answered "no message found" for them (it passed over them).
Three NATS servers and three nodes on loopback (cluster.py)."""

import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import (ReplicaCluster as Cluster, article, near_duplicate,  # noqa: E402
                     replica_state, wait_converged)
from harness import HOST, Runner, check, feed_events, parse_metrics  # noqa: E402

T = Runner("test_events_replicas")


def checked(srv, text, doc, account, register=False):
    req = {"text": text, "id": doc, "account": account}
    if register:
        req["register"] = True
    status, body = srv.json("POST", "/check-original", req, timeout=30)
    check(status == 200, "check %s on %s: %s %r", doc, srv.port, status, body)
    return body


def same_feeds(cl, want_min):
    wait_converged(cl.nodes, timeout=60)
    feeds = [feed_events(n) for n in cl.nodes]
    check(len(feeds[0]) >= want_min, "only %d events: %r", len(feeds[0]), feeds[0][:3])
    for i, f in enumerate(feeds[1:], 1):
        check(f == feeds[0], "node %d's feed differs: %d vs %d events; first difference %r",
              i + 1, len(f), len(feeds[0]),
              next(((a, b) for a, b in zip(f, feeds[0]) if a != b), None))
    return feeds[0]


@T.test
def one_feed_everywhere():
    with Cluster(n=3, haproxy=False) as cl:
        a, b, c = cl.nodes
        origs = [article(100 + i) for i in range(4)]
        for i, t in enumerate(origs):
            body = checked(a, t, "orig-%d" % i, "alice", register=True)
            check(body["registered"], body)
        wait_converged(cl.nodes)
        # Copies detected on two nodes at once.
        def copies(node, tag):
            for i in range(12):
                checked(node, near_duplicate(origs[i % 4], 7 * i + len(tag)), "%s-%d" % (tag, i),
                        "bob")
        th = [threading.Thread(target=copies, args=(n, t)) for n, t in ((b, "b"), (c, "c"))]
        for t in th:
            t.start()
        for t in th:
            t.join(120)
        status, _ = c.json("POST", "/documents/orig-1/revoke", {"reason": "appeal"})
        check(status == 200)
        line = json.dumps({"id": "imp-1", "text": article(999), "account": "carol"})
        status, _, data = b.request("POST", "/import", line + "\n",
                                    {"Content-Type": "application/x-ndjson"}, timeout=60)
        check(status == 200, "import: %s %r", status, data)
        evs = same_feeds(cl, 26)
        types = [e["type"] for e in evs]
        check(types.count("copy.detected") == 24 and "claim.revoked" in types and
              "import.finished" in types, "types: %r", types)
        # kill -9 of a node while copies are detected through the others.
        cl.nodes[1].kill()
        copies(c, "k")
        cl.restart_node(1)
        evs = same_feeds(cl, 35)  # orig-1 is revoked: its 3 copies are originals now
        k = [e for e in evs if e["type"] == "copy.detected" and
             e["data"]["copy"]["id"].startswith("k-")]
        check(len(k) == 9, "detections of the k- copies: %d", len(k))
        check(len({e["id"] for e in evs}) == len(evs), "ids repeat")


class LaggingCopy(threading.Thread):
    """What a NATS server whose copy of the stream does not hold an entry yet
    answers to a direct read of it (a stream leader just elected that has not
    applied its log to its copy): "no message found". A NATS client on
    server port (the node's own: its answer comes first) answers the first
    `times` requests $JS.API.STREAM.MSG.GET.<stream> for each sequence above
    `above` so, and stays silent for the rest (the real leader answers)."""

    NOT_FOUND = json.dumps({"type": "io.nats.jetstream.api.v1.stream_msg_get_response",
                            "error": {"code": 404, "err_code": 10037,
                                      "description": "no message found"}}).encode()

    def __init__(self, port, stream, above, times=2):
        super().__init__(daemon=True)
        self.sock = socket.create_connection((HOST, port), timeout=5)
        self.f = self.sock.makefile("rb")
        check(self.f.readline().startswith(b"INFO "), "no INFO from NATS")
        self.sock.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,'
                          b'"name":"lagging-copy"}\r\nSUB $JS.API.STREAM.MSG.GET.%s 1\r\n'
                          b"PING\r\n" % stream.encode())
        while True:
            line = self.f.readline()
            check(line and not line.startswith(b"-ERR"), "NATS refused: %r", line)
            if line.startswith(b"PONG"):
                break
        self.above, self.times = above, times
        self.answered = {}  # seq -> times answered "no message found"
        self.stop = False
        self.sock.settimeout(None)

    def run(self):
        try:
            while not self.stop:
                line = self.f.readline()
                if not line:
                    return
                if line.startswith(b"PING"):
                    self.sock.sendall(b"PONG\r\n")
                    continue
                if not line.startswith((b"MSG ", b"HMSG ")):
                    continue
                parts = line.split()
                size = int(parts[-1])
                reply = parts[3] if len(parts) == (5 if parts[0] == b"MSG" else 6) else None
                payload = self.f.read(size + 2)[:size]
                if parts[0] == b"HMSG":
                    payload = payload[int(parts[-2]):]
                try:
                    seq = int(json.loads(payload or b"{}").get("seq") or 0)
                except ValueError:
                    continue
                if reply and seq > self.above and self.answered.get(seq, 0) < self.times:
                    self.answered[seq] = self.answered.get(seq, 0) + 1
                    self.sock.sendall(b"PUB %s %d\r\n%s\r\n"
                                      % (reply, len(self.NOT_FOUND), self.NOT_FOUND))
        except OSError:
            return

    def close(self):
        self.stop = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def gap_fills(srv):
    status, _, data = srv.request("GET", "/metrics", timeout=5)
    check(status == 200, "/metrics: %s", status)
    return parse_metrics(data.decode()).get("neardup_replica_gap_fills_total", 0)


@T.test
def entry_not_found_not_passed_over():
    """Found by test_history: one node's feed lacked a policy.changed event
    the others have (its records equal: later changes covered the record).
    The node, behind after a pause, read the entry directly from the stream
    (its consumer's server stopped: a gap fill) while the stream's leader was
    just elected, and took "no message found" (that leader's copy did not
    hold it yet) for an entry deleted by hand: it passed over the entry, its
    record change, audit entry and event. Here node X's consumer is on
    another NATS server S, which is stopped; a node on the other servers
    changes a claim's policy 4 times; X reads those entries directly, and a
    client on X's NATS server answers each read first with "no message
    found" (twice per entry; then the real leader answers). X must apply
    every entry: the same feed and audit log as the others, event for
    event."""
    with Cluster(n=3, haproxy=False) as cl:
        names = [cl.name(i) for i in range(3)]
        servers = [s.name for s in cl.nats.servers]
        for attempt in range(12):  # JetStream places each node's consumer on any server
            leader = cl.nats.stream_leader(cl.stream)
            hosts = cl.nats.consumer_hosts(cl.stream)
            pairs = [(i, servers.index(hosts[names[i]])) for i in range(3)
                     if hosts.get(names[i]) not in (None, servers[i], leader)]
            if pairs:
                break
            cl.restart_node(attempt % 3)
        check(pairs, "no node's consumer on another server than its own and the leader's "
              "after 12 restarts: %r", hosts)
        X, S = pairs[0]
        Y = 3 - X - S  # its server and the leader's stay up
        x, y = cl.nodes[X], cl.nodes[Y]
        st, body = y.json("POST", "/check-original",
                          {"id": "gap-claim", "text": article(4242), "register": True})
        check(st == 200 and body.get("registered") is True, "gap-claim: %s %r", st, body)
        wait_converged(cl.nodes)
        before = replica_state(x)["applied_seq"]
        fills = gap_fills(x)
        lag = LaggingCopy(cl.nats.servers[X].port, cl.stream, before)
        lag.start()
        print("  %s's consumer is on %s (stream leader %s): stopping %s; policy changes on %s"
              % (names[X], servers[S], leader, servers[S], names[Y]))
        cl.nats.servers[S].sigstop()
        try:
            for k in range(4):
                st, body = y.json("PUT", "/documents/gap-claim/policy",
                                  {"reprint": "forbid" if k % 2 else "allow",
                                   "whitelist": [{"account": "gap-%d" % k}]}, timeout=20)
                check(st == 200, "policy %d on %s: %s %r", k, names[Y], st, body)
            want = replica_state(y)["applied_seq"]
            deadline = time.monotonic() + 20
            while replica_state(x)["applied_seq"] < want and time.monotonic() < deadline:
                time.sleep(0.1)
            got = replica_state(x)["applied_seq"]
            check(got >= want, "%s applied up to %d of %d within 20 s", names[X], got, want)
        finally:
            cl.nats.servers[S].sigcont()
            lag.close()
        print("  %s read %d entries directly; the lagging copy answered \"no message found\" "
              "%d times" % (names[X], gap_fills(x) - fills, sum(lag.answered.values())))
        check(lag.answered, "%s read no entry directly (its consumer went on): the scenario "
              "did not happen", names[X])
        deadline = time.monotonic() + 15  # X commits what it applied
        while True:
            feeds = [feed_events(n) for n in (x, y)]
            if feeds[0] == feeds[1] or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        polices = [e for e in feeds[1] if e["type"] == "policy.changed"]
        check(len(polices) == 4, "%s's feed holds %d policy changes", names[Y], len(polices))
        check(feeds[0] == feeds[1], "%s's feed differs from %s's: %d vs %d events; first "
              "difference %r", names[X], names[Y], len(feeds[0]), len(feeds[1]),
              next(((a, b) for a, b in zip(*feeds) if a != b), None))
        audits = [n.json("GET", "/audit?limit=100")[1] for n in (x, y)]
        check(audits[0] == audits[1], "the audit logs differ: %r vs %r", audits[0], audits[1])
        wait_converged(cl.nodes, timeout=30)  # the same records too (digests)


if __name__ == "__main__":
    sys.exit(T.run())
