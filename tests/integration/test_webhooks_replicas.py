"""Webhooks of a replicated neardup: three nodes behind the shipped HAProxy
share one subscription; exactly one node delivers (a lease in a JetStream
key-value bucket), the positions live in JetStream, and when the
delivering node is killed with kill -9 mid-delivery another takes over:
every event of the feed reaches the receiver (checked by id), none under a
new id, duplicates only of what was in flight; the killed node comes back
as a standby with the same feed. A deliverer stopped (SIGSTOP) past its
lease while an answer is pending stands down when continued: it sends
nothing more, and the shared position never moves back (audit G08)."""

import base64
import json
import os
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import ReplicaCluster, article, near_duplicate, post, register_body  # noqa: E402
from harness import Runner, check, feed_events  # noqa: E402
from test_webhooks import Receiver, hooks_file, sub, wait_for  # noqa: E402

T = Runner("test_webhooks_replicas")


def feed_ids(srv):
    return [e["id"] for e in feed_events(srv)]


def states(cl):
    out = {}
    for i, n in enumerate(cl.nodes):
        if n.proc and n.proc.poll() is None:
            status, body = n.json("GET", "/webhooks")
            check(status == 200, "GET /webhooks on node %d: %s %r", i + 1, status, body)
            out[i] = body["subscriptions"][0]["state"]
    return out


def check_copies(front_port, origs, tag, n):
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", front_port, timeout=30)
    try:
        for i in range(n):
            status, _, body = post(conn, "/check-original",
                                register_body("%s-%d" % (tag, i),
                                              near_duplicate(origs[i % len(origs)], 31 * i + 7),
                                              account="bob", register=False))
            check(status == 200 and not body["original"], "copy %s-%d: %s %r", tag, i, status,
                  body)
    finally:
        conn.close()


@T.test
def one_deliverer_and_a_takeover():
    with Receiver(delay=0.05) as rcv:
        path = hooks_file([sub("cluster", rcv.url(), start="oldest")])
        with ReplicaCluster(n=3, haproxy=True, node_extra=["--webhooks", path]) as cl:
            conn = cl.front()
            origs = [article(500 + i) for i in range(4)]
            for i, t in enumerate(origs):
                status, _, body = post(conn, "/check-original",
                                    register_body("o-%d" % i, t, account="alice"))
                check(status == 200 and body["registered"], "%s %r", status, body)
            conn.close()
            wait_for(lambda: sorted(states(cl).values()).count("standby") == 2, 30,
                     "one deliverer and two standbys: %r" % states(cl))
            check_copies(cl.haproxy.port, origs, "a", 40)
            # kill -9 the deliverer while it delivers (50 ms per event)
            wait_for(lambda: len(rcv.records()) >= 5, 30, "deliveries")
            leader = [i for i, s in states(cl).items() if s != "standby"]
            check(len(leader) == 1, "deliverers: %r", states(cl))
            cl.nodes[leader[0]].kill()
            got_at_kill = len(rcv.records())
            check(got_at_kill < 40, "delivery was over before the kill: %d", got_at_kill)
            check_copies(cl.haproxy.port, origs, "b", 20)
            alive = [n for i, n in enumerate(cl.nodes) if i != leader[0]]
            want = feed_ids(alive[0])
            check(len(want) == 60, "events: %d", len(want))
            wait_for(lambda: set(want) <= {r["id"] for r in rcv.records()}, 90,
                     "every event at the receiver after the takeover")
            recs = rcv.records()
            check(all(r["ok"] and r["header_id"] == r["id"] for r in recs), "a bad delivery")
            ids = [r["id"] for r in recs]
            check(set(ids) == set(want), "delivered ids not in the feed: %r",
                  set(ids) - set(want))
            dups = len(ids) - len(set(ids))
            print("  %d events, %d deliveries (%d again, same id), %d before the kill"
                  % (len(want), len(ids), dups, got_at_kill))
            check(dups <= 5, "%d duplicates: more than what was in flight" % dups)
            # The killed node comes back: same feed, standing by.
            cl.restart_node(leader[0])
            wait_for(lambda: len(states(cl)) == 3 and
                     sorted(states(cl).values()).count("standby") == 2, 30,
                     "the old deliverer back as a standby: %r" % states(cl))
            # Its feed catches up from the stream after it is back (a standby
            # may still be applying what it missed): equal within 30 s.
            node = cl.nodes[leader[0]]
            wait_for(lambda: feed_ids(node) == want, 30, "the restarted node's feed equal")
            time.sleep(1.5)
            check(len(rcv.records()) == len(recs), "deliveries after the takeover settled")


class KvWatch(threading.Thread):
    """Reads one key of a JetStream key-value bucket every 20 ms over a
    plain NATS connection ($JS.API.STREAM.MSG.GET, last_by_subj) and keeps
    every change: (time, value)."""

    def __init__(self, port, bucket, key):
        super().__init__(daemon=True)
        self.stream = "KV_" + bucket
        self.subject = "$KV.%s.%s" % (bucket, key)
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buf = b""
        self._line()  # INFO
        self.sock.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nSUB _INBOX.kvw 1\r\n')
        self.seen = []
        self.errors = []
        self.halt = threading.Event()

    def _line(self):
        while b"\r\n" not in self.buf:
            d = self.sock.recv(65536)
            if not d:
                raise OSError("NATS closed the connection")
            self.buf += d
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def get(self):
        req = json.dumps({"last_by_subj": self.subject}).encode()
        self.sock.sendall(b"PUB $JS.API.STREAM.MSG.GET.%s _INBOX.kvw %d\r\n%s\r\n"
                          % (self.stream.encode(), len(req), req))
        while True:
            line = self._line()
            if line.startswith(b"PING"):
                self.sock.sendall(b"PONG\r\n")
            elif line.startswith(b"MSG"):
                n = int(line.split()[-1])
                while len(self.buf) < n + 2:
                    self.buf += self.sock.recv(65536)
                payload, self.buf = self.buf[:n], self.buf[n + 2:]
                msg = json.loads(payload).get("message")
                return int(base64.b64decode(msg["data"])) if msg else None

    def run(self):
        try:
            while not self.halt.is_set():
                v = self.get()
                if v is not None and (not self.seen or self.seen[-1][1] != v):
                    self.seen.append((time.time(), v))
                self.halt.wait(0.02)
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.errors.append(repr(e))
        finally:
            self.sock.close()

    def finish(self):
        self.halt.set()
        self.join(timeout=10)
        return self.seen


def hook_counts(srv):
    status, body = srv.json("GET", "/webhooks", timeout=5)
    check(status == 200, "GET /webhooks: %s %r", status, body)
    s = body["subscriptions"][0]
    return s["state"], s["delivered"] + s["failed"]


@T.test
def deposed_deliverer_stands_down():
    """Audit G08: the deliverer is stopped (SIGSTOP) while a request's answer
    is pending, for longer than its lease; another node takes over and
    delivers past it. When continued, the old deliverer sends nothing more
    (its pending answer only completes), never writes its older position
    over the new holder's (the bucket's value never goes back), and the
    receiver's answers after SIGCONT keep going forward."""
    n_events = 24
    with Receiver(delay=0.3) as rcv:
        path = hooks_file([sub("g08", rcv.url(), start="oldest", backoff_base_ms=100,
                               backoff_cap_ms=500)])
        with ReplicaCluster(n=3, haproxy=False, node_extra=["--webhooks", path]) as cl:
            node0 = cl.nodes[0]
            orig = article(800)
            conn = node0.connect()
            status, _, body = post(conn, "/check-original", register_body("g08-o", orig,
                                                                          account="alice"))
            check(status == 200 and body["registered"], "%s %r", status, body)
            for i in range(n_events):
                status, _, body = post(conn, "/check-original",
                                    register_body("g08-c%d" % i, near_duplicate(orig, 41 * i + 3),
                                                  account="bob", register=False))
                check(status == 200 and not body["original"], "copy %d: %s %r", i, status, body)
            conn.close()
            want = feed_ids(node0)
            check(len(want) == n_events, "events: %d", len(want))
            wait_for(lambda: len(rcv.records(strict=False)) >= 3, 60, "3 deliveries")
            kv = KvWatch(cl.nats.servers[1].port, cl.stream + "_hooks", "pos.g08")
            kv.start()
            leader = [i for i, s in states(cl).items() if s != "standby"]
            check(len(leader) == 1, "deliverers: %r", states(cl))
            dep = cl.nodes[leader[0]]
            # Stop it while its next request's answer is pending (0.3 s each).
            n0 = len(rcv.records(strict=False))
            wait_for(lambda: len(rcv.records(strict=False)) > n0, 10, "the next delivery")
            time.sleep(0.1)
            _, attempts0 = hook_counts(dep)
            t_stop = time.time()
            dep.proc.send_signal(signal.SIGSTOP)  # our own child, by its PID
            stopped = True
            try:
                top = max(r["seq"] for r in rcv.records(strict=False))
                # Another node takes the lease (expired 5 s after its last
                # renewal) and delivers two events past the pending one.
                wait_for(lambda: max([r["seq"] for r in rcv.records(strict=False)
                                      if r["at"] > t_stop + 1.0] or [0]) >= top + 3, 60,
                         "another node delivering while the deliverer is stopped")
                time.sleep(max(0.0, 7.5 - (time.time() - t_stop)))  # well past the lease
                stop_s = time.time() - t_stop
                t_cont = time.time()
                dep.proc.send_signal(signal.SIGCONT)
                stopped = False
            finally:
                if stopped:
                    dep.proc.send_signal(signal.SIGCONT)
            wait_for(lambda: set(want) <= {r["id"] for r in rcv.records(strict=False)}, 60,
                     "every event at the receiver")
            wait_for(lambda: hook_counts(dep)[0] == "standby", 10,
                     "the continued node standing by: %r" % (hook_counts(dep),))
            time.sleep(1.0)
            seen = kv.finish()
            check(not kv.errors, "reading the bucket: %r", kv.errors)
            _, attempts1 = hook_counts(dep)
            recs = rcv.records()
            before = [r["seq"] for r in recs if r["at"] < t_cont]
            after = [r["seq"] for r in recs if r["at"] >= t_cont]
            values = [v for _, v in seen]
            back = [(a, b) for a, b in zip(values, values[1:]) if b < a]
            ids = [r["id"] for r in recs]
            print("  deliverer stopped %.1f s; receiver had up to seq %d at SIGCONT, then %r; "
                  "bucket values %r; the continued node made %d attempt(s) after its stop; "
                  "%d deliveries of %d events"
                  % (stop_s, max(before), after[:6], values, attempts1 - attempts0, len(ids),
                     len(want)))
            check(not back, "the shared position went back: %r in %r", back, values)
            check(all(b > a for a, b in zip(after, after[1:])) and
                  all(s > max(before) for s in after),
                  "an event arrived out of order after SIGCONT (before: up to %d): %r",
                  max(before), after)
            check(attempts1 - attempts0 <= 1,
                  "the deposed node sent %d more event(s) after SIGCONT",
                  attempts1 - attempts0 - 1)
            check(all(r["ok"] and r["header_id"] == r["id"] for r in recs), "a bad delivery")
            check(set(ids) == set(want), "ids not in the feed: %r", set(ids) - set(want))
            check(len(ids) - len(set(ids)) <= 3, "%d duplicates", len(ids) - len(set(ids)))


if __name__ == "__main__":
    T.run()
