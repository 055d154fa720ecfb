"""The atomic check-and-register: many clients submit near-duplicate articles
at the same moment, round after round; in each round exactly one is
original and registered, and every other one names it as a match. Also: the
same id with the same text submitted concurrently gets one registration and
the same answer everywhere, and plain checks run alongside."""

import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Runner, Server, check, distance, edit, load_texts  # noqa: E402

T = Runner("test_race")
TEXTS = load_texts()
BASES = [TEXTS[k] for k in sorted(TEXTS)]
CLIENTS = int(os.environ.get("ND_RACE_CLIENTS", "8"))
ROUNDS = int(os.environ.get("ND_RACE_ROUNDS", "30"))
K = 8


def variants(srv, base, n, seed):
    """n near duplicates of base, all within K of each other."""
    texts = [edit(base, 1 + (i % 3), seed * 31 + i) for i in range(n)]
    status, body = srv.json("POST", "/fingerprint", {"texts": texts})
    check(status == 200, body)
    hashes = [r["simhash"] for r in body["results"]]
    for i in range(n):
        if any(distance(hashes[i], h) > K for h in hashes):
            texts[i] = base
    return texts


def race_round(srv, conns, texts, ids):
    n = len(texts)
    barrier = threading.Barrier(n)
    results = [None] * n

    def client(i):
        barrier.wait(timeout=30)
        results[i] = srv.json("POST", "/check-original",
                              {"id": ids[i], "text": texts[i], "register": True, "k": K},
                              conn=conns[i])

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    check(not any(t.is_alive() for t in threads), "clients hung")
    return results


@T.test
def one_original_per_round(srv):
    conns = [srv.connect() for _ in range(CLIENTS)]
    try:
        for r in range(ROUNDS):
            base = BASES[r % len(BASES)] + "\n(round %d)" % r
            texts = variants(srv, base, CLIENTS, r)
            ids = ["r%d-c%d" % (r, i) for i in range(CLIENTS)]
            results = race_round(srv, conns, texts, ids)
            for status, body in results:
                check(status == 200, "round %d: %s %r", r, status, body)
            winners = [i for i, (_, b) in enumerate(results) if b["original"]]
            check(len(winners) == 1, "round %d: %d originals: %r", r, len(winners), results)
            w = winners[0]
            check(results[w][1]["registered"] is True, results[w])
            for i, (_, b) in enumerate(results):
                if i == w:
                    continue
                check(b["registered"] is False, "round %d: loser registered: %r", r, b)
                check([m["id"] for m in b["matches"]] == [ids[w]],
                      "round %d: loser %d matches %r, winner %s", r, i, b["matches"], ids[w])
            status, doc = srv.json("GET", "/documents/" + ids[w])
            check(status == 200, doc)
            for i in range(CLIENTS):
                if i != w:
                    status, _ = srv.json("GET", "/documents/" + ids[i])
                    check(status == 404, "loser %s stored" % ids[i])
            # Take it down so that the next round starts from an empty index.
            status, body = srv.json("DELETE", "/documents/" + ids[w])
            check(status == 200, body)
    finally:
        for c in conns:
            c.close()
    m = srv.metrics()
    check(m.get("neardup_documents") == 0, m.get("neardup_documents"))
    check(m.get('neardup_registrations_total{result="ok"}') == ROUNDS, m)


@T.test
def same_id_same_text_concurrently(srv):
    conns = [srv.connect() for _ in range(CLIENTS)]
    try:
        for r in range(5):
            text = BASES[(r + 3) % len(BASES)] + "\n(same id %d)" % r
            ids = ["same-%d" % r] * CLIENTS
            results = race_round(srv, conns, [text] * CLIENTS, ids)
            bodies = [b for _, b in results]
            check(all(s == 200 for s, _ in results), results)
            check(all(b["original"] and b["registered"] and b["matches"] == [] for b in bodies),
                  "round %d: %r", r, bodies)
            check(len({b["registered_at"] for b in bodies}) == 1, bodies)
            status, body = srv.json("DELETE", "/documents/" + ids[0])
            check(status == 200, body)
    finally:
        for c in conns:
            c.close()
    m = srv.metrics()
    check(m.get('neardup_registrations_total{result="ok"}') == 5, m)


@T.test
def readers_alongside_writers(srv):
    """Plain checks on other connections while registrations and deletions
    change the index: every answer is well-formed and consistent."""
    stop = time.monotonic() + 4
    errors = []
    probe = BASES[0] + "\n(reader)"

    def writer(i):
        conn = srv.connect()
        n = 0
        try:
            while time.monotonic() < stop:
                doc = "w%d-%d" % (i, n)
                text = edit(BASES[(i + n) % len(BASES)], 2, n) + "\n(writer %d %d)" % (i, n)
                st, b = srv.json("POST", "/check-original",
                                 {"id": doc, "text": text, "register": True, "k": 0}, conn=conn)
                if st != 200:
                    errors.append((st, b))
                elif b["registered"]:
                    st, b = srv.json("DELETE", "/documents/" + doc, conn=conn)
                    if st != 200:
                        errors.append((st, b))
                n += 1
        finally:
            conn.close()

    def reader(i):
        conn = srv.connect()
        try:
            while time.monotonic() < stop:
                st, b = srv.json("POST", "/check-original", {"text": probe, "k": 8}, conn=conn)
                if st != 200 or b["original"] != (b["matches"] == []):
                    errors.append((st, b))
                d = [m["distance"] for m in b.get("matches", [])]
                if d != sorted(d) or any(x > 8 for x in d):
                    errors.append(("order", b))
        finally:
            conn.close()

    threads = [threading.Thread(target=writer, args=(i,), daemon=True) for i in range(3)]
    threads += [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    check(not errors, "errors: %r", errors[:3])


def main():
    T.run(fresh=Server)


if __name__ == "__main__":
    main()
