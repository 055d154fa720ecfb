"""The event feed of a replicated neardup: detections and import audit
entries travel in the stream like every other write, so every node holds
the same feed, event for event (same seq, id, type, time and data), also
after a node is killed with kill -9 while checks are running and comes
back. Three NATS servers and three nodes on loopback (cluster.py)."""

import json
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import ReplicaCluster as Cluster, article, near_duplicate, wait_converged  # noqa: E402
from harness import Runner, check, feed_events  # noqa: E402

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


if __name__ == "__main__":
    sys.exit(T.run())
