"""Storage full, both ways it happens: the LMDB map (--map-size set small)
and the filesystem (a small tmpfs the test mounts; skipped when it cannot
mount, i.e. not root).

A registration the store cannot commit is undone in memory and answered
503 with the JSON error storage_unavailable ("... storage is full");
/readyz says 503 storage_unavailable meanwhile; fingerprints, plain checks
(which still find the earlier documents) and reads keep working; every
document registered earlier is still there, unchanged, also after a
restart and after SIGKILL; the refused one is not. Service resumes when
space returns: after deletions (map), when a larger --map-size is given at
restart, and when the filesystem has room again (readiness comes back by
itself, without a write to prove it). A new store on a full filesystem
is refused at start with a clear message."""

import os
import random
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Runner, Server, check, edit, expect_error, load_texts  # noqa: E402

T = Runner("test_storage_full")
TEXTS = load_texts()
BASES = [TEXTS[k] for k in sorted(TEXTS)]
META = {"note": "m" * 15000}


_WR = random.Random(11)
WORDS = ["".join(_WR.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(_WR.randint(3, 9)))
         for _ in range(5000)]


def doc_text(i):
    """Document i: ~2 KB of pseudo-words, far from every other one (the
    verdict compares shingles: edits of a few shared bases would be
    near duplicates of each other and never registered)."""
    rng = random.Random(i)
    return " ".join(rng.choice(WORDS) for _ in range(300)) + " #%d" % i * 40


def fill(srv, limit=2000, prefix="f"):
    """Registers until the store refuses. Returns ({id: record}, {id: text},
    the refused request)."""
    recs, texts = {}, {}
    conn = srv.connect()
    try:
        for i in range(limit):
            req = {"id": "%s%d" % (prefix, i), "text": doc_text(i), "register": True, "k": 0,
                   "meta": dict(META, i=i)}
            status, body = srv.json("POST", "/check-original", req, conn=conn)
            if status == 503:
                expect_error(status, body, 503, "storage_unavailable")
                check("storage is full" in body["error"]["message"], body)
                return recs, texts, req
            check(status == 200, "%s %r", status, body)
            if body["registered"]:
                recs[req["id"]] = {"id": req["id"], "simhash": body["simhash"],
                                   "chars": body["chars"], "version": body["version"],
                                   "registered_at": body["registered_at"], "meta": req["meta"]}
                texts[req["id"]] = req["text"]
    finally:
        conn.close()
    raise AssertionError("the store never filled up")


def all_there(srv, recs):
    """Every record in recs is served unchanged."""
    conn = srv.connect()
    try:
        for doc, want in recs.items():
            status, body = srv.json("GET", "/documents/" + doc, conn=conn)
            check(status == 200, "LOST %s: %s %r", doc, status, body)
            check(body == want, "%s changed: %r", doc, body)
    finally:
        conn.close()


def refused_left_nothing(srv, refused):
    status, body = srv.json("GET", "/documents/" + refused["id"])
    expect_error(status, body, 404, "not_found")
    status, body = srv.json("POST", "/check-original", dict(refused, register=False))
    check(status == 200 and body["original"] and not body["registered"], body)


def reads_work(srv, recs, texts, failed=True):
    """Not ready, but everything that does not write works."""
    status, body = srv.json("GET", "/readyz")
    expect_error(status, body, 503, "storage_unavailable")
    status, _ = srv.json("GET", "/healthz")
    check(status == 200)
    status, body = srv.json("POST", "/fingerprint", {"text": BASES[0]})
    check(status == 200 and body["simhash"], body)
    doc = sorted(recs)[0]
    status, body = srv.json("POST", "/check-original", {"text": texts[doc], "k": 0})
    check(status == 200 and not body["original"]
          and [m["id"] for m in body["matches"]] == [doc], body)
    # Asking about a stored id (register true, same text) is a read too.
    status, body = srv.json("POST", "/check-original",
                            {"id": doc, "text": texts[doc], "register": True, "k": 0})
    check(status == 200 and body["registered"] and body["registered_at"]
          == recs[doc]["registered_at"], body)
    all_there(srv, recs)
    m = srv.metrics()
    fails = m['neardup_registrations_total{result="failed"}']
    check(m["neardup_store_writable"] == 0 and m["neardup_ready"] == 0 and fails >= failed,
          "writable %s, ready %s, failed registrations %s", m["neardup_store_writable"],
          m["neardup_ready"], fails)


def restart_loaded(srv, args=None):
    """Restarts and waits until loaded: on a full store /readyz then says
    503 storage_unavailable (the store's probe at open found no room)."""
    srv.restart(args, wait_ready=False)
    deadline = time.monotonic() + 30
    while True:
        try:
            status, body = srv.json("GET", "/readyz")
            if status == 200 or body["error"]["code"] not in ("loading",):
                return status, body
        except OSError:
            pass
        check(time.monotonic() < deadline, "not loaded:\n%s", srv.log_tail())
        time.sleep(0.02)


def wait_ready(srv, timeout):
    deadline = time.monotonic() + timeout
    while True:
        status, body = srv.json("GET", "/readyz")
        if status == 200 or time.monotonic() > deadline:
            return status, body
        time.sleep(0.1)


# -- the map is full --

@T.test
def map_full_refuses_and_deletions_free_space(srv):
    recs, texts, refused = fill(srv)
    check(len(recs) > 5, "only %d registered" % len(recs))
    refused_left_nothing(srv, refused)
    reads_work(srv, recs, texts)
    # Free space: registrations resume and readiness returns.
    gone = sorted(recs)[: len(recs) // 2]
    for doc in gone:
        status, body = srv.json("DELETE", "/documents/" + doc)
        check(status == 200 and body["deleted"], body)
        del recs[doc]
    status, body = srv.json("POST", "/check-original", refused)
    check(status == 200 and body["registered"], body)
    status, body = srv.json("GET", "/readyz")
    check(status == 200, body)
    all_there(srv, recs)
    for doc in gone:
        status, _ = srv.json("GET", "/documents/" + doc)
        check(status == 404, doc)


@T.test
def map_full_larger_map_at_restart(srv):
    recs, texts, refused = fill(srv)
    # SIGKILL while full: nothing earlier lost, the refused one not there.
    srv.proc.send_signal(signal.SIGKILL)
    srv.wait()
    status, body = restart_loaded(srv)
    expect_error(status, body, 503, "storage_unavailable")
    all_there(srv, recs)
    refused_left_nothing(srv, refused)
    status, body = srv.json("POST", "/check-original", refused)
    expect_error(status, body, 503, "storage_unavailable")
    # The same map size after a clean stop: still full, still whole.
    restart_loaded(srv)
    all_there(srv, recs)
    reads_work(srv, recs, texts, failed=False)
    # A larger map: registrations resume, ready again, nothing lost.
    srv.restart(["--map-size", "4M"])
    status, body = srv.json("GET", "/readyz")
    check(status == 200, body)
    status, body = srv.json("POST", "/check-original", refused)
    check(status == 200 and body["registered"], body)
    more, _, _ = fill(srv, prefix="g")
    check(len(more) > len(recs), "the larger map took only %d more" % len(more))
    all_there(srv, recs)
    all_there(srv, more)


# -- the filesystem is full --

class Tmpfs:
    """A small tmpfs mounted for the test (root only)."""

    def __init__(self, size):
        self.dir = tempfile.mkdtemp(prefix="neardupd-fs-")
        self.size = size
        self.mounted = False

    def __enter__(self):
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s,mode=0700" % self.size,
                            "tmpfs", self.dir], capture_output=True, text=True)
        self.mounted = r.returncode == 0
        self.why = r.stderr.strip()
        return self

    def fill(self, leave=0):
        """Writes a filler file until the filesystem is full (minus leave bytes)."""
        path = os.path.join(self.dir, "filler")
        block = b"\0" * 4096
        with open(path, "wb") as f:
            try:
                while True:
                    st = os.statvfs(self.dir)
                    if st.f_bavail * st.f_frsize <= leave:
                        break
                    f.write(block)
                    f.flush()
            except OSError:
                pass
        return path

    def __exit__(self, *exc):
        if self.mounted:
            subprocess.run(["umount", self.dir], capture_output=True)
        os.rmdir(self.dir)
        return False


def skip(why):
    print("  SKIP: %s" % why, flush=True)


@T.test
def disk_full_refuses_and_recovers_when_space_returns(_):
    with Tmpfs("4m") as fs:
        if not fs.mounted:
            return skip("cannot mount a tmpfs: %s" % fs.why)
        srv = Server(data_dir=os.path.join(fs.dir, "data"), sync=True)
        try:
            srv.start()
            # Some documents, then a filesystem with no room left.
            early, early_texts = {}, {}
            conn = srv.connect()
            for i in range(20):
                req = {"id": "e%d" % i, "text": doc_text(1000 + i), "register": True, "k": 0,
                       "meta": {"i": i}}
                status, body = srv.json("POST", "/check-original", req, conn=conn)
                check(status == 200 and body["registered"], body)
                early[req["id"]] = {"id": req["id"], "simhash": body["simhash"],
                                    "chars": body["chars"], "version": body["version"],
                                    "registered_at": body["registered_at"], "meta": req["meta"]}
                early_texts[req["id"]] = req["text"]
            conn.close()
            filler = fs.fill()
            recs, texts, refused = fill(srv)
            recs.update(early)
            texts.update(early_texts)
            refused_left_nothing(srv, refused)
            reads_work(srv, recs, texts)
            check(any("storage is full" in r.get("msg", "") for r in srv.log_records()),
                  "no log line about the full storage")
            # Space returns: readiness comes back without any write, and
            # registrations resume.
            os.unlink(filler)
            status, body = wait_ready(srv, 10)
            check(status == 200, "not ready after space returned: %s %r", status, body)
            status, body = srv.json("POST", "/check-original", refused)
            check(status == 200 and body["registered"], body)
            recs[refused["id"]] = {"id": refused["id"], "simhash": body["simhash"],
                                   "chars": body["chars"], "version": body["version"],
                                   "registered_at": body["registered_at"],
                                   "meta": refused["meta"]}
            # Full again, then SIGKILL: everything acknowledged survives.
            filler = fs.fill()
            more, _, refused2 = fill(srv, prefix="h")
            recs.update(more)
            srv.proc.send_signal(signal.SIGKILL)
            srv.wait()
            os.unlink(filler)
            srv.restart()
            all_there(srv, recs)
            refused_left_nothing(srv, refused2)
            check(srv.stop() == 0)
            srv.check_sanitizers()
        finally:
            srv.cleanup()


@T.test
def new_store_on_full_disk_refused_at_start(_):
    with Tmpfs("1m") as fs:
        if not fs.mounted:
            return skip("cannot mount a tmpfs: %s" % fs.why)
        fs.fill()
        srv = Server(data_dir=os.path.join(fs.dir, "data"), wait_ready=False)
        try:
            srv.start()
            code = srv.wait(timeout=10)
            raise AssertionError("neardupd started on a full disk (exit %s)" % code)
        except RuntimeError as e:
            check("exited with 1" in str(e), str(e))
            check("cannot open the store" in str(e) and "no space" in str(e), str(e))
        finally:
            srv.cleanup()
        check(not os.path.exists(os.path.join(fs.dir, "data", "data.mdb")),
              "a stub data.mdb was left behind")


def refused_at_start(data_dir, want):
    """neardupd on data_dir exits 1 at start, logging want."""
    srv = Server(data_dir=data_dir, wait_ready=False)
    try:
        srv.start()
        code = srv.wait(timeout=10)
        raise AssertionError("neardupd started on %s (exit %s)" % (data_dir, code))
    except RuntimeError as e:
        check("exited with 1" in str(e), str(e))
        errors = [r["msg"] for r in srv.log_records() if r.get("level") == "error"]
        check(errors and errors[0].startswith("cannot open the store: ") and want in errors[0],
              "wanted %r, got %r", want, errors)
    finally:
        srv.cleanup()


@T.test
def data_dir_problems_refused_at_start(srv):
    """A clear error and exit 1, never a crash, and the directory left as it
    was. (Not writable and full are in test_store; root ignores modes.)"""
    tmp = srv.tmp
    refused_at_start(os.path.join(tmp, "no", "such", "dir"), "cannot be created")
    afile = os.path.join(tmp, "afile")
    open(afile, "w").close()
    refused_at_start(afile, "is not a directory")
    cases = {
        "empty": b"",
        "garbage": os.urandom(64 << 10),
        "truncated": None,  # the first 8 KiB of a real store
    }
    check(srv.stop() == 0)
    with open(os.path.join(srv.data_dir, "data.mdb"), "rb") as f:
        real = f.read()
    for name, content in cases.items():
        d = os.path.join(tmp, name)
        os.mkdir(d)
        with open(os.path.join(d, "data.mdb"), "wb") as f:
            f.write(real[:8192] if content is None else content)
        before = open(os.path.join(d, "data.mdb"), "rb").read()
        want = {"empty": "is empty", "garbage": "corrupt or not a neardup store",
                "truncated": "is truncated"}[name]
        refused_at_start(d, want)
        check(open(os.path.join(d, "data.mdb"), "rb").read() == before,
              "%s: data.mdb was changed", name)
    srv.restart()  # the real one is fine


def main():
    T.run(fresh=lambda: Server(["--map-size", "1M"]))


if __name__ == "__main__":
    main()
