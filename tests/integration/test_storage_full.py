"""Storage full: a registration the store cannot commit is undone in memory
and answered 503 storage_unavailable; /readyz says 503 while the store is
not writable; fingerprints, plain checks and reads keep working; deleting
documents frees space and registrations resume by themselves."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Runner, Server, check, edit, expect_error, load_texts  # noqa: E402

T = Runner("test_storage_full")
TEXTS = load_texts()
BASES = [TEXTS[k] for k in sorted(TEXTS)]
META = {"note": "m" * 15000}


def fill(srv, limit=400):
    """Registers until the store refuses; returns (registered ids, refused request)."""
    ids = []
    for i in range(limit):
        req = {"id": "f%d" % i, "text": edit(BASES[i % len(BASES)], 40, i) + " #%d" % i * 40,
               "register": True, "k": 0, "meta": META}
        status, body = srv.json("POST", "/check-original", req)
        if status == 503:
            expect_error(status, body, 503, "storage_unavailable")
            check("full" in body["error"]["message"], body)
            return ids, req
        check(status == 200, "%s %r", status, body)
        if body["registered"]:
            ids.append(req["id"])
    raise AssertionError("the store never filled up")


@T.test
def full_store_refuses_and_recovers(srv):
    ids, refused = fill(srv)
    check(len(ids) > 5, "only %d registered" % len(ids))
    # The refused registration left nothing behind.
    status, body = srv.json("GET", "/documents/" + refused["id"])
    expect_error(status, body, 404, "not_found")
    status, body = srv.json("POST", "/check-original", dict(refused, register=False))
    check(status == 200 and body["original"] and not body["registered"], body)
    # Not ready, but everything that does not write still works.
    status, body = srv.json("GET", "/readyz")
    expect_error(status, body, 503, "storage_unavailable")
    status, _ = srv.json("GET", "/healthz")
    check(status == 200)
    status, body = srv.json("POST", "/fingerprint", {"text": BASES[0]})
    check(status == 200, body)
    status, body = srv.json("GET", "/documents/" + ids[0])
    check(status == 200 and body["meta"] == META, body)
    m = srv.metrics()
    check(m["neardup_store_writable"] == 0 and m["neardup_ready"] == 0, m)
    check(m['neardup_registrations_total{result="failed"}'] >= 1, m)
    # Free space: registrations resume and readiness returns.
    for doc in ids[: len(ids) // 2]:
        status, body = srv.json("DELETE", "/documents/" + doc)
        check(status == 200, body)
    status, body = srv.json("POST", "/check-original", refused)
    check(status == 200 and body["registered"], body)
    status, body = srv.json("GET", "/readyz")
    check(status == 200, body)


@T.test
def refused_registration_survives_no_restart(srv):
    ids, refused = fill(srv)
    srv.restart()
    status, _ = srv.json("GET", "/documents/" + refused["id"])
    check(status == 404, "an undone registration came back after restart")
    for doc in ids:
        status, _ = srv.json("GET", "/documents/" + doc)
        check(status == 200, doc)


def main():
    T.run(fresh=lambda: Server(["--map-size", "1M"]))


if __name__ == "__main__":
    main()
