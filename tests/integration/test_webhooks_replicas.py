"""Webhooks of a replicated neardup: three nodes behind the shipped HAProxy
share one subscription; exactly one node delivers (a lease in a JetStream
key-value bucket), the positions live in JetStream, and when the
delivering node is killed with kill -9 mid-delivery another takes over:
every event of the feed reaches the receiver (checked by id), none under a
new id, duplicates only of what was in flight; the killed node comes back
as a standby with the same feed."""

import os
import sys
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
            check(feed_ids(cl.nodes[leader[0]]) == want, "the restarted node's feed differs")
            time.sleep(1.5)
            check(len(rcv.records()) == len(recs), "deliveries after the takeover settled")


if __name__ == "__main__":
    T.run()
