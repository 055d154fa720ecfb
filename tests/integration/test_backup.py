"""`neardup backup [--data DIR] DEST`: a consistent copy of the store while
neardupd runs and registrations (and deletions) keep arriving.

A second neardupd started on the copy (another port) must hold every
document acknowledged before the backup started, with identical records;
of the changes acknowledged while it ran, it holds a consistent snapshot:
the registrations it has are exactly the earliest ones (by registration
time, the order the store commits them), each identical, nothing that was
never registered. Errors (DEST holds a store already, no store at the
source, DEST not a directory, no DEST) give a clear message and exit 1 (2
for usage)."""

import os
import random
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Runner, Server, check, load_texts, neardup_path  # noqa: E402

T = Runner("test_backup")
TEXTS = load_texts()
BASES = [TEXTS[k] for k in sorted(TEXTS)]


def backup(*args, timeout=120):
    return subprocess.run([neardup_path(), "backup"] + list(args), capture_output=True,
                          timeout=timeout, env=dict(os.environ, NEARDUP_DATA=""))


_WR = random.Random(5)
WORDS = ["".join(_WR.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(_WR.randint(3, 9)))
         for _ in range(5000)]


def text_of(tag, i):
    """A text of its own: pseudo-words drawn for (tag, i), far from every
    other text (the verdict compares shingles), then unique words."""
    rng = random.Random("%s-%d" % (tag, i))
    words = " ".join("%s%dw%d" % (tag, i, j) for j in range(40))
    return " ".join(rng.choice(WORDS) for _ in range(250)) + "\n" + words


def register(srv, conn, doc, text, meta):
    req = {"id": doc, "text": text, "register": True, "k": 0}
    if meta is not None:  # a null meta is refused
        req["meta"] = meta
    status, body = srv.json("POST", "/check-original", req, conn=conn)
    check(status == 200, "%s: %s %r", doc, status, body)
    if not body["registered"]:
        return None
    return {"id": doc, "simhash": body["simhash"], "chars": body["chars"],
            "version": body["version"], "registered_at": body["registered_at"], "meta": meta}


def all_docs(srv, ids):
    """{id: record} of those ids the server holds."""
    out = {}
    conn = srv.connect()
    try:
        for doc in ids:
            status, body = srv.json("GET", "/documents/" + doc, conn=conn)
            check(status in (200, 404), "%s: %s %r", doc, status, body)
            if status == 200:
                out[doc] = body
    finally:
        conn.close()
    return out


@T.test
def backup_while_registering(srv):
    # Before the backup: these must all be in the copy.
    before = {}
    conn = srv.connect()
    for i in range(300):
        meta = {"i": i, "pad": "x" * (i % 7) * 300}
        rec = register(srv, conn, "pre-%d" % i, text_of("pre", i), meta)
        if rec:
            before[rec["id"]] = rec
    deleted = []
    for doc in sorted(before)[:30]:
        status, body = srv.json("DELETE", "/documents/" + doc, conn=conn)
        check(status == 200 and body["deleted"], body)
        deleted.append(doc)
        del before[doc]
    conn.close()

    # While it runs: three clients register, one deletes what they registered.
    during, sent, gone = {}, set(), set()
    lock = threading.Lock()
    stop = threading.Event()

    def writer(w):
        c = srv.connect()
        n = 0
        while not stop.is_set():
            doc = "w%d-%d" % (w, n)
            with lock:
                sent.add(doc)
            rec = register(srv, c, doc, text_of("w%d" % w, n), {"w": w, "n": n})
            if rec:
                with lock:
                    during[doc] = rec
            n += 1
        c.close()

    def deleter():
        c = srv.connect()
        while not stop.is_set():
            time.sleep(0.01)
            with lock:
                cands = sorted(set(during) - gone)
            if len(cands) > 20:
                doc = cands[len(cands) // 2]
                status, _ = srv.json("DELETE", "/documents/" + doc, conn=c)
                check(status == 200, "delete %s: %s", doc, status)
                with lock:
                    gone.add(doc)
        c.close()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    threads.append(threading.Thread(target=deleter))
    for t in threads:
        t.start()
    try:
        time.sleep(0.5)
        dest = os.path.join(srv.tmp, "backup")
        r = backup("--data", srv.data_dir, dest)
        time.sleep(0.3)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    check(r.returncode == 0, "backup failed: %s", r.stderr.decode())
    check("copied" in r.stderr.decode(), r.stderr)
    check(sorted(os.listdir(dest)) == ["data.mdb"], os.listdir(dest))
    check(len(during) > 20, "too few registrations during the backup: %d", len(during))

    # Another neardupd on the copy, another port.
    with Server(data_dir=dest) as copy:
        check(copy.port != srv.port)
        have = all_docs(copy, sorted(set(before) | set(deleted) | sent))
        for doc, want in before.items():
            check(have.get(doc) == want, "%s: %r, want %r", doc, have.get(doc), want)
        for doc in deleted:
            check(doc not in have, "%s was deleted before the backup", doc)
        # Registrations during the backup: a prefix in commit order.
        order = sorted(during.values(), key=lambda r: r["registered_at"])
        in_copy = [r["id"] for r in order if r["id"] in have]
        for doc in in_copy:
            check(have[doc] == during[doc], "%s differs in the copy", doc)
        last = max((i for i, r in enumerate(order) if r["id"] in have), default=-1)
        missing = [r["id"] for r in order[: last + 1]
                   if r["id"] not in have and r["id"] not in gone]
        check(not missing, "not a snapshot: %s missing, later ones present", missing[:5])
        check(not (set(have) - set(before) - set(during)),
              "documents never acknowledged: %s", sorted(set(have) - set(before) - set(during)))
        print("  copy: %d from before, %d of the %d registered while it ran (%d of those "
              "deleted meanwhile)" % (len(before), len(in_copy), len(during), len(gone)),
              flush=True)
        # The copy is a store of its own: it takes registrations, its clock
        # continues after what it holds, and the original does not see them.
        status, body = copy.json("POST", "/check-original",
                                 {"id": "only-in-copy", "text": text_of("copy", 1),
                                  "register": True, "k": 0})
        check(status == 200 and body["registered"], body)
        check(body["registered_at"] > max(r["registered_at"] for r in have.values()), body)
        status, _ = srv.json("GET", "/documents/only-in-copy")
        check(status == 404, "the copy shares storage with the original")
        m = copy.metrics()
        check(m["neardup_documents"] == len(have) + 1, "documents in the copy")


@T.test
def backup_of_stopped_store_and_errors(srv):
    conn = srv.connect()
    recs = {}
    for i in range(50):
        rec = register(srv, conn, "s-%d" % i, text_of("s", i), None)
        if rec:
            recs[rec["id"]] = rec
    conn.close()
    check(srv.stop() == 0)
    tmp = srv.tmp
    dest = os.path.join(tmp, "copy1")
    r = backup("--data", srv.data_dir, dest)
    check(r.returncode == 0, r.stderr.decode())

    # DEST holds a store already: refused, the copy untouched.
    size = os.path.getsize(os.path.join(dest, "data.mdb"))
    r = backup("--data", srv.data_dir, dest)
    err = r.stderr.decode()
    check(r.returncode == 1 and "already holds a store" in err and dest in err, err)
    check(os.path.getsize(os.path.join(dest, "data.mdb")) == size)
    check(sorted(os.listdir(dest)) == ["data.mdb"], os.listdir(dest))
    # No store at the source: a missing directory, an empty one.
    r = backup("--data", os.path.join(tmp, "nope"), os.path.join(tmp, "copy2"))
    err = r.stderr.decode()
    check(r.returncode == 1 and "no store in" in err, err)
    check(not os.path.exists(os.path.join(tmp, "copy2", "data.mdb")))
    empty = os.path.join(tmp, "empty")
    os.mkdir(empty)
    r = backup("--data", empty, os.path.join(tmp, "copy3"))
    err = r.stderr.decode()
    check(r.returncode == 1 and "no store in" in err, err)
    check(os.listdir(empty) == [], "the source directory was written: %s" % os.listdir(empty))
    # DEST is a file; DEST's parent is missing.
    afile = os.path.join(tmp, "afile")
    open(afile, "w").close()
    r = backup("--data", srv.data_dir, afile)
    err = r.stderr.decode()
    check(r.returncode == 1 and "not a directory" in err, err)
    r = backup("--data", srv.data_dir, os.path.join(tmp, "no", "such", "dir"))
    err = r.stderr.decode()
    check(r.returncode == 1 and "cannot be created" in err, err)
    # Usage.
    r = backup("--data", srv.data_dir)
    check(r.returncode == 2 and "DEST is required" in r.stderr.decode(), r.stderr)

    # The copy of a stopped store: the same documents, and the original
    # still starts.
    with Server(data_dir=dest) as copy:
        have = all_docs(copy, sorted(recs))
        check(have == recs, "copy differs")
    srv.restart()
    check(all_docs(srv, sorted(recs)) == recs, "original changed")


def main():
    T.run(fresh=Server)


if __name__ == "__main__":
    main()
