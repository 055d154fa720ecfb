"""Crash safety and start-up.

kill_cycles: concurrent clients register documents (and one deletes some)
against a neardupd that fsyncs each group commit, as in production; the
server is killed with SIGKILL at a random moment and restarted, again and
again (ND_CRASH_CYCLES, default 20). After every restart:
- every acknowledged registration (200, "registered": true) is present with
  the same simhash, registered_at, chars and meta;
- every acknowledged deletion (200, "deleted": true) is absent;
- the store starts with STALE documents of an older fingerprint version,
  which one client upgrades by registering their texts again: every
  acknowledged upgrade is present with the current version, the text's
  fingerprint and the old registered_at and meta; an upgrade the kill cut
  off left either the old record or the new one, whole; the start-up
  report counts exactly the documents not upgraded yet;
- every request the kill cut off is either absent or whole: its record has
  the fingerprint of the text sent, its meta, the current version;
- the server holds exactly the documents the model says (neardup_documents),
  which with the above proves that no older document went missing; older
  documents are also compared field by field, a sample each cycle and all of
  them every ND_CRASH_FULL_EVERY cycles and at the end;
- times stay monotonic: what is registered after a restart has a later
  registered_at than anything stored before it.
Some cycles also kill the server while it is still loading. The last line
printed is a summary: cycles, acknowledged writes, lost (must be 0), time.

Also: the restarted server listens at once, answers /readyz 503 "loading"
until the index is rebuilt (progress logged), then finds the same near
duplicates as before; a second neardupd on the same directory is refused."""

import http.client
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HEX16, RFC3339_US, Runner, Server, check, edit,  # noqa: E402
                     fsync_shim_env, load_texts, request, tool_path)

T = Runner("test_crash")
TEXTS = load_texts()
BASES = [TEXTS[k] for k in sorted(TEXTS)]
CYCLES = int(os.environ.get("ND_CRASH_CYCLES", "20"))
CLIENTS = int(os.environ.get("ND_CRASH_CLIENTS", "6"))
FULL_EVERY = int(os.environ.get("ND_CRASH_FULL_EVERY", "10"))
SAMPLE = int(os.environ.get("ND_CRASH_SAMPLE", "300"))
MAX_RUN_S = float(os.environ.get("ND_CRASH_MAX_RUN", "1.5"))
SEED = int(os.environ.get("ND_CRASH_SEED", str(int(time.time() * 1000) % 1000000)))
VERSION = "nd-simhash-2+nd-sketch-2"  # fingerprint + sketch, with the folds

# Pseudo-words: texts of ~80 of them are far apart, so with k=0 every one is
# original, and short enough that the clients, not fingerprinting, set the pace.
_wr = random.Random(7)
WORDS = ["".join(_wr.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(_wr.randint(3, 9)))
         for _ in range(3000)]
PADS = [0, 0, 40, 700, 3000, 9000]  # meta sizes: inline, one page, overflow pages
STALE = int(os.environ.get("ND_CRASH_STALE", "400"))  # older-version documents to upgrade
OLD_VERSION = "nd-simhash-0"
T0_US = 1600000000000000  # their registration times: before anything registered here


def make_text(rng):
    return " ".join(rng.choice(WORDS) for _ in range(80))


class Model:
    """What the store must hold, from the clients' point of view."""

    def __init__(self):
        self.lock = threading.Lock()
        self.known = {}          # id -> expected record (durable: acked or seen)
        self.absent = set()      # ids that must be 404 (acked delete, or seen absent)
        self.pending_reg = {}    # id -> (text, meta): sent, no answer (cut off)
        self.pending_del = set() # ids of known documents whose delete got no answer
        self.deleting = set()    # ids the deleter has in flight
        self.fresh = []          # ids acked since the last check
        self.fresh_gone = []     # ids acked deleted since the last check
        self.stale = {}          # id -> text: older-version documents not upgraded
        self.pending_upg = {}    # id -> text: upgrade sent, no answer (cut off)
        self.acked_upgs = self.cut_upgs = 0
        self.errors = []
        self.acked_regs = self.acked_dels = 0
        self.cut_regs = self.cut_dels = 0
        self.cut_present = 0

    def fail(self, msg):
        with self.lock:
            self.errors.append(msg)


def post_check(conn, fields):
    """POSTs /check-original. Returns (status, reply), or None when the kill
    cut the request off (its outcome is unknown)."""
    try:
        status, _, data = request(conn, "POST", "/check-original", json.dumps(fields).encode(),
                                  {"Content-Type": "application/json"}, close=False)
        return status, json.loads(data)
    except (OSError, http.client.HTTPException, ValueError):
        return None


def register_client(srv, model, cycle, i, stop, rng):
    conn = srv.connect(timeout=20)
    n = 0
    while not stop.is_set():
        doc = "c%d-t%d-n%d" % (cycle, i, n)
        n += 1
        text = make_text(rng)
        meta = {"c": cycle, "t": i, "pad": "p" * rng.choice(PADS)}
        with model.lock:
            model.pending_reg[doc] = (text, meta)
        answer = post_check(conn, {"id": doc, "text": text, "register": True, "k": 0,
                                   "meta": meta})
        if answer is None:
            return  # killed: the registration stays pending
        status, reply = answer
        with model.lock:
            del model.pending_reg[doc]
            if status == 200 and reply.get("registered"):
                model.known[doc] = {"id": doc, "simhash": reply["simhash"],
                                    "chars": reply["chars"], "version": reply["version"],
                                    "registered_at": reply["registered_at"], "meta": meta}
                model.fresh.append(doc)
                model.acked_regs += 1
            elif status == 200:
                model.absent.add(doc)  # a near duplicate: answered, not registered
            else:
                model.errors.append("register %s: %s %r" % (doc, status, reply))
                return


def upgrade_client(srv, model, stop, rng):
    """Registers the texts of stale documents again under their ids."""
    conn = srv.connect(timeout=20)
    while not stop.is_set():
        time.sleep(rng.uniform(0, 0.04))  # spread over many cycles
        with model.lock:
            cands = sorted(set(model.stale) - set(model.pending_upg))
            if not cands:
                return
            doc = rng.choice(cands)
            text = model.stale[doc]
            model.pending_upg[doc] = text
        answer = post_check(conn, {"id": doc, "text": text, "register": True, "k": 0})
        if answer is None:
            return  # killed: the upgrade stays pending
        status, reply = answer
        with model.lock:
            del model.pending_upg[doc]
            old = model.known[doc]
            if status == 200 and reply.get("registered") \
                    and reply.get("registered_at") == old["registered_at"]:
                model.known[doc] = dict(old, simhash=reply["simhash"], chars=reply["chars"],
                                        version=reply["version"])
                del model.stale[doc]
                model.fresh.append(doc)
                model.acked_upgs += 1
            else:
                model.errors.append("upgrade %s: %s %r" % (doc, status, reply))
                return


def seed_stale(srv, model):
    """Writes STALE older-version documents into the (stopped) server's store
    with tests/store_tool, as an upgrade would find them."""
    if STALE <= 0:
        return
    rng = random.Random(11)
    lines = []
    for i in range(STALE):
        doc = "stale-%d" % i
        text = make_text(rng)
        meta = {"old": i}
        at = T0_US + i * 1000
        lines.append(json.dumps({"id": doc, "simhash": "%016x" % rng.getrandbits(64),
                                 "version": OLD_VERSION, "registered_at_us": at,
                                 "chars": 500, "text": text, "meta": meta}))
        model.stale[doc] = text
        model.known[doc] = None  # filled from the server after the first start
    tool = tool_path("ND_STORE_TOOL", ("tests", "store_tool"))
    r = subprocess.run([tool, "put", srv.data_dir], input=("\n".join(lines) + "\n").encode(),
                       capture_output=True, timeout=120)
    check(r.returncode == 0, "store_tool: %s %s", r.stdout, r.stderr)


def delete_client(srv, model, stop, rng):
    conn = srv.connect(timeout=20)
    while not stop.is_set():
        time.sleep(0.005)
        with model.lock:
            cands = [d for d in model.fresh[-200:] if d in model.known
                     and d not in model.deleting and d not in model.pending_del]
            if not cands:
                continue
            doc = rng.choice(cands)
            model.deleting.add(doc)
        try:
            status, _, data = request(conn, "DELETE", "/documents/" + doc, close=False)
            reply = json.loads(data)
        except (OSError, http.client.HTTPException, ValueError):
            with model.lock:
                model.deleting.discard(doc)
                model.pending_del.add(doc)
            return
        with model.lock:
            model.deleting.discard(doc)
            if status == 200 and reply.get("deleted") is True:
                del model.known[doc]
                model.absent.add(doc)
                model.fresh_gone.append(doc)
                model.acked_dels += 1
            else:
                model.errors.append("delete %s: %s %r" % (doc, status, reply))
                return


def get_doc(conn, doc):
    status, _, data = request(conn, "GET", "/documents/" + doc, close=False)
    return status, json.loads(data) if data else None


def check_many(srv, ids, want, nthreads=4):
    """GETs ids on nthreads keep-alive connections; want(doc, status, body)
    raises on a wrong answer."""
    ids = list(ids)
    errors = []

    def worker(k):
        conn = srv.connect(timeout=30)
        try:
            for doc in ids[k::nthreads]:
                status, body = get_doc(conn, doc)
                want(doc, status, body)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            conn.close()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(nthreads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def whole(doc, body, text_fp, meta):
    """A record of a cut-off registration must be complete and right."""
    check(isinstance(body, dict), "%s: not a record: %r", doc, body)
    check(body.get("id") == doc and body.get("version") == VERSION, "%s: %r", doc, body)
    check(HEX16.match(body.get("simhash", "")) and body["simhash"] == text_fp["simhash"],
          "%s: simhash %r, the text's is %r", doc, body.get("simhash"), text_fp["simhash"])
    check(body.get("chars") == text_fp["chars"], "%s: chars %r", doc, body.get("chars"))
    check(body.get("meta") == meta, "%s: meta differs", doc)
    check(RFC3339_US.match(body.get("registered_at", "")), "%s: %r", doc, body)


def verify(srv, model, cycle, rng, full, stats):
    """Checks the restarted server against the model (see the top)."""
    conn = srv.connect(timeout=30)
    deadline = time.monotonic() + 10  # /readyz may say 200 just before the log line
    while True:
        recs = srv.log_records()
        ready = [r for r in recs if r.get("msg") == "ready"]
        if ready or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    check(ready, "no ready line:\n%s", srv.log_tail())
    # Cut-off upgrades: the old record, or the new one whole (same time, meta).
    for doc, text in sorted(model.pending_upg.items()):
        model.cut_upgs += 1
        status, body = get_doc(conn, doc)
        old = model.known[doc]
        check(status == 200, "LOST: %s (cut-off upgrade): %s %r", doc, status, body)
        if body == old:
            continue
        st, fp = srv.json("POST", "/fingerprint", {"text": text})
        check(st == 200, fp)
        whole(doc, body, fp, old["meta"])
        check(body["registered_at"] == old["registered_at"], "%s: time changed: %r", doc, body)
        model.known[doc] = body
        del model.stale[doc]
    model.pending_upg.clear()
    check(ready[-1]["stale"] == len(model.stale), "stale: %r, model %d", ready[-1],
          len(model.stale))
    check(not any("repeat an id" in r.get("msg", "") for r in recs), "duplicate records")
    # Cut-off registrations: absent, or whole (and then durable from now on).
    for doc, (text, meta) in sorted(model.pending_reg.items()):
        model.cut_regs += 1
        status, body = get_doc(conn, doc)
        if status == 404:
            model.absent.add(doc)
            continue
        check(status == 200, "%s: %s %r", doc, status, body)
        st, fp = srv.json("POST", "/fingerprint", {"text": text})
        check(st == 200, fp)
        whole(doc, body, fp, meta)
        model.known[doc] = body
        model.cut_present += 1
    model.pending_reg.clear()
    # Cut-off deletions: present and unchanged, or absent.
    for doc in sorted(model.pending_del):
        model.cut_dels += 1
        status, body = get_doc(conn, doc)
        if status == 404:
            del model.known[doc]
            model.absent.add(doc)
        else:
            check(status == 200 and body == model.known[doc], "%s: %s %r", doc, status, body)
    model.pending_del.clear()
    conn.close()
    before_max = max((r["registered_at"] for r in model.known.values()), default="")

    def same(doc, status, body):
        check(status == 200, "LOST: acknowledged %s: %s %r (cycle %d)", doc, status, body, cycle)
        check(body == model.known[doc], "CHANGED: %s: %r, acknowledged %r", doc, body,
              model.known[doc])

    def gone(doc, status, body):
        check(status == 404, "%s should be absent: %s %r (cycle %d)", doc, status, body, cycle)

    fresh = [d for d in model.fresh if d in model.known]
    older = [d for d in model.known if d not in set(fresh)]
    if not full and len(older) > SAMPLE:
        older = rng.sample(older, SAMPLE)
    check_many(srv, fresh + older, same)
    absent = list(model.absent)
    if not full and len(absent) > SAMPLE:
        absent = list(set(rng.sample(absent, SAMPLE)) | set(model.fresh_gone))
    check_many(srv, absent, gone)
    stats["checked"] += len(fresh) + len(older) + len(absent)
    model.fresh.clear()
    model.fresh_gone.clear()
    # Nothing else is there: with every id above checked, an equal count
    # means no older document is missing.
    m = srv.metrics()
    check(m["neardup_documents"] == len(model.known) == ready[-1]["documents"],
          "documents: server %s, ready log %s, model %d", m["neardup_documents"],
          ready[-1]["documents"], len(model.known))
    return before_max


@T.test
def kill_cycles(srv):
    rng = random.Random(SEED)
    print("kill_cycles: seed %d (ND_CRASH_SEED), %d cycles, %d clients"
          % (SEED, CYCLES, CLIENTS), flush=True)
    model = Model()
    stats = {"checked": 0, "loading_kills": 0}
    check(srv.stop() == 0)
    seed_stale(srv, model)
    srv.restart()
    conn = srv.connect(timeout=30)
    for doc in model.stale:
        status, body = get_doc(conn, doc)
        check(status == 200 and body["version"] == OLD_VERSION, "%s: %s %r", doc, status, body)
        model.known[doc] = body
    conn.close()
    t0 = time.monotonic()
    for cycle in range(CYCLES + 1):
        last = cycle == CYCLES
        before_max = verify(srv, model, cycle, rng,
                            full=last or (cycle and cycle % FULL_EVERY == 0), stats=stats)
        check(not model.errors, "client errors: %s", model.errors[:5])
        if last:
            break
        stop = threading.Event()
        threads = [threading.Thread(target=register_client,
                                    args=(srv, model, cycle, i, stop,
                                          random.Random(rng.random())), daemon=True)
                   for i in range(CLIENTS)]
        threads.append(threading.Thread(target=delete_client,
                                        args=(srv, model, stop, random.Random(rng.random())),
                                        daemon=True))
        threads.append(threading.Thread(target=upgrade_client,
                                        args=(srv, model, stop, random.Random(rng.random())),
                                        daemon=True))
        for t in threads:
            t.start()
        time.sleep(rng.uniform(0.02, MAX_RUN_S))
        srv.proc.send_signal(signal.SIGKILL)
        srv.wait(timeout=10)
        stop.set()
        for t in threads:
            t.join(30)
        check(not any(t.is_alive() for t in threads), "clients hung")
        with model.lock:
            new = [model.known[d] for d in model.fresh
                   if d in model.known and not d.startswith("stale-")]  # upgrades keep theirs
        check(all(r["registered_at"] > before_max for r in new),
              "registered_at went back after the restart before cycle %d", cycle)
        if rng.random() < 0.2:
            # Kill it again while it is starting up or loading.
            srv.restart(wait_ready=False)
            time.sleep(rng.uniform(0, 0.05))
            srv.proc.send_signal(signal.SIGKILL)
            srv.wait(timeout=10)
            stats["loading_kills"] += 1
        srv.restart()
    elapsed = time.monotonic() - t0
    check(model.acked_regs >= CYCLES * 5, "too few registrations: %d", model.acked_regs)
    print("crash: cycles=%d (+%d during start-up) acked_registrations=%d acked_deletions=%d "
          "acked_upgrades=%d cut_off=%d (%d registrations found whole, rest absent; %d "
          "upgrades) stale_left=%d documents=%d checked=%d lost=0 time=%.1fs"
          % (CYCLES, stats["loading_kills"], model.acked_regs, model.acked_dels,
             model.acked_upgs, model.cut_regs + model.cut_dels + model.cut_upgs,
             model.cut_present, model.cut_upgs, len(model.stale), len(model.known),
             stats["checked"], elapsed), flush=True)


@T.test
def restart_loads_index(srv):
    n = 300
    expect = {}
    conn = srv.connect()
    for i in range(n):
        text = edit(BASES[i % len(BASES)], 30, i) + "\n#%d" % i
        status, body = srv.json("POST", "/check-original",
                                {"id": "d%d" % i, "text": text, "register": True, "k": 0},
                                conn=conn)
        check(status == 200, body)
        if body["registered"]:
            expect["d%d" % i] = (text, body["simhash"])
    conn.close()
    check(srv.stop() == 0)
    srv.restart(wait_ready=False)
    statuses = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            status, body = srv.json("GET", "/readyz", timeout=5)
        except OSError:
            continue
        statuses.append((status, (body or {}).get("error", {}).get("code")))
        if status == 200:
            break
    check(statuses and statuses[-1][0] == 200, statuses[-5:])
    check(all(s == (503, "loading") for s in statuses[:-1]), statuses[:5])
    msgs = [r for r in srv.log_records() if r.get("msg") in ("listening", "loading documents",
                                                             "ready")]
    order = [r["msg"] for r in msgs]
    check(order[0] == "listening" and order[-1] == "ready", order)
    progress = [r for r in msgs if r["msg"] == "loading documents"]
    check(progress and progress[-1]["loaded"] == progress[-1]["total"] == len(expect), progress)
    check(msgs[-1]["documents"] == len(expect) and msgs[-1]["stale"] == 0, msgs[-1])
    # Same answers as before the restart.
    for doc, (text, simhash) in list(expect.items())[:40]:
        status, body = srv.json("POST", "/check-original", {"text": text, "k": 0})
        check(status == 200 and doc in [m["id"] for m in body["matches"]], (doc, body))
        status, body = srv.json("POST", "/check-original", {"id": doc, "text": text,
                                                             "register": True, "k": 0})
        check(body["original"] and body["registered"] and body["simhash"] == simhash, body)


@T.test
def second_server_on_same_data_refused(srv):
    other = Server(data_dir=srv.data_dir, wait_ready=False)
    try:
        other.start()
        code = other.wait(timeout=10)
        raise AssertionError("second server started (exit %s)" % code)
    except RuntimeError as e:
        check("exited with 1" in str(e), str(e))
        check("in use by another neardupd" in str(e), str(e))
    finally:
        other.cleanup()
    status, _ = srv.json("GET", "/readyz")
    check(status == 200)


# ---- the workflow: policies, revocations and detections under kill -9 ----

WF_CYCLES = int(os.environ.get("ND_CRASH_WF_CYCLES", "6"))


def wf_call(conn, method, path, obj=None):
    """(status, body), or None when the kill cut the request off."""
    try:
        body = None if obj is None else json.dumps(obj).encode()
        hdrs = {"Content-Type": "application/json"} if body is not None else {}
        status, _, data = request(conn, method, path, body, hdrs, close=False)
        return status, json.loads(data)
    except (OSError, http.client.HTTPException, ValueError):
        return None


def wf_client(srv, docs, state, tags, stop, rng, errors):
    """Changes its own documents one request at a time: a PUT of a policy
    whose whitelist names a unique tag, or a revoke/restore whose reason is
    one; a check of a copy with a unique id (a detection). Records each
    acknowledged change, and the one the kill cut off as pending."""
    conn = srv.connect(timeout=20)
    while not stop.is_set():
        doc = rng.choice(docs)
        st = state[doc]
        tag = "t%d" % rng.randrange(10 ** 12)
        kind = rng.choice(("policy", "status", "copy"))
        if kind == "policy":
            reprint = rng.choice(("allow", "forbid"))
            want = {"reprint": reprint, "explicit": True,
                    "whitelist": [{"account": tag, "may_modify": False, "may_hide_source": False}]}
            st["pending"] = ("policy", want, tag)
            answer = wf_call(conn, "PUT", "/documents/%s/policy" % doc,
                             {"reprint": reprint, "whitelist": [{"account": tag}]})
        elif kind == "status":
            target = "active" if st["status"] == "revoked" else "revoked"
            want = target
            st["pending"] = ("status", target, tag)
            answer = wf_call(conn, "POST", "/documents/%s/%s" % (
                doc, "revoke" if target == "revoked" else "restore"), {"reason": tag})
        else:
            st["pending"] = ("copy", tag, tag)
            answer = wf_call(conn, "POST", "/check-original",
                             {"id": "copy-" + tag, "account": "copier", "text": st["text"]})
        if answer is None:
            return  # killed: the change stays pending
        status, body = answer
        if status != 200:
            errors.append("%s %s: %s %r" % (kind, doc, status, body))
            return
        if kind == "policy":
            st["policy"] = want
        elif kind == "status":
            st["status"] = want
        else:  # a copy of a revoked claim is original, and no detection
            revoked = st["status"] == "revoked"
            if body.get("original") is not revoked:
                errors.append("copy of %s (%s): %r" % (doc, st["status"], body))
            if not revoked:
                st["copies"].add("copy-" + tag)
        if kind != "copy":
            tags[doc].add(tag)
        st["pending"] = None
        st["acked"] += 1


def wf_verify(srv, docs, state, tags):
    """Each document is in its last acknowledged state or in the state of
    the change the kill cut off; every acknowledged change has its audit
    entry; every acknowledged detection is listed. Returns changes lost (0)."""
    conn = srv.connect(timeout=30)
    audit_tags = {}
    cursor = None
    while True:
        status, body = wf_call(conn, "GET", "/audit?limit=1000" +
                               ("&cursor=" + cursor if cursor else ""))
        check(status == 200, "audit: %s %r", status, body)
        for e in body["entries"]:
            d = e["detail"]
            tag = d.get("reason") or (d.get("policy") or {}).get("whitelist", [{}])[0].get("account")
            audit_tags.setdefault(e["document"], set()).add(tag)
        cursor = body["next_cursor"]
        if not cursor:
            break
    lost = 0
    for doc in docs:
        st = state[doc]
        status, body = wf_call(conn, "GET", "/documents/" + doc)
        check(status == 200, "%s: %s %r", doc, status, body)
        pend = st["pending"]
        if body["policy"] != st["policy"]:
            if pend and pend[0] == "policy" and body["policy"] == pend[1]:
                st["policy"] = pend[1]
                tags[doc].add(pend[2])  # the cut-off change was committed: with its entry
            else:
                lost += 1
                print("LOST policy of %s: %r, acknowledged %r" % (doc, body["policy"],
                                                                   st["policy"]))
        if body["status"] != st["status"]:
            if pend and pend[0] == "status" and body["status"] == pend[1]:
                st["status"] = pend[1]
                tags[doc].add(pend[2])
            else:
                lost += 1
                print("LOST status of %s: %s, acknowledged %s" % (doc, body["status"],
                                                                   st["status"]))
        missing = tags[doc] - audit_tags.get(doc, set())
        if missing:
            lost += len(missing)
            print("LOST audit entries of %s: %s" % (doc, sorted(missing)))
        status, body = wf_call(conn, "GET", "/documents/%s/copies?limit=1000" % doc)
        check(status == 200, "copies of %s: %s %r", doc, status, body)
        listed = {c["id"] for c in body["copies"]}
        if st["copies"] - listed:
            lost += len(st["copies"] - listed)
            print("LOST detections of %s: %s" % (doc, sorted(st["copies"] - listed)))
        st["pending"] = None
    conn.close()
    return lost


@T.test
def workflow_kill_cycles(srv):
    """Policy changes, revocations and detections while neardupd (fsync on)
    is killed with SIGKILL: 0 acknowledged changes lost, each with its audit
    entry; a change cut off is either whole (state and entry) or absent."""
    rng = random.Random(SEED + 13)
    docs, state, tags = [], {}, {}
    conn = srv.connect(timeout=30)
    for i in range(24):
        doc, text = "wf-%d" % i, make_text(rng)
        status, _, data = request(conn, "POST", "/check-original", json.dumps(
            {"id": doc, "text": text, "register": True, "k": 0, "account": "owner"}).encode(),
            {"Content-Type": "application/json"}, close=False)
        check(status == 200 and json.loads(data)["registered"], data)
        docs.append(doc)
        state[doc] = {"text": text, "status": "active", "copies": set(), "pending": None,
                      "acked": 0, "policy": {"reprint": "allow", "explicit": False,
                                              "whitelist": []}}
        tags[doc] = set()
    conn.close()
    errors, acked = [], 0
    for cycle in range(WF_CYCLES):
        stop = threading.Event()
        # Each client owns a share of the documents: one change at a time each.
        threads = [threading.Thread(target=wf_client, args=(
            srv, docs[i::4], state, tags, stop, random.Random(rng.random()), errors), daemon=True)
            for i in range(4)]
        for t in threads:
            t.start()
        time.sleep(rng.uniform(0.1, MAX_RUN_S))
        srv.proc.send_signal(signal.SIGKILL)
        srv.wait(timeout=10)
        stop.set()
        for t in threads:
            t.join(30)
        check(not any(t.is_alive() for t in threads), "clients hung")
        check(not errors, "client errors: %s", errors[:5])
        srv.restart()
        check(wf_verify(srv, docs, state, tags) == 0, "acknowledged changes lost")
    acked = sum(st["acked"] for st in state.values())
    check(acked >= WF_CYCLES * 5, "too few changes: %d", acked)
    print("crash (workflow): cycles=%d acked_changes=%d (policies, revokes/restores, "
          "detections) lost=0" % (WF_CYCLES, acked), flush=True)


# ---- POST /import killed midway ----

IMPORT_CYCLES = int(os.environ.get("ND_CRASH_IMPORT_CYCLES", "4"))


@T.test
def import_killed_midway(_srv):
    """POST /import of an archive (originals, copies of earlier lines,
    shuffled lines with their registered_at) while neardupd (fsync on) is
    killed with SIGKILL mid-import, again and again: after each restart
    every document present is whole (its text's fingerprint, its given
    registered_at, account and meta) and is one of the archive's originals
    (no copy was registered: the earliest claim still decided); sending the
    body again finishes it: in the end the store holds exactly the
    archive's originals, and the copies are its duplicates with their
    sources, as one import without a kill gives."""
    rng = random.Random(SEED + 29)
    lines, originals, copies = [], {}, {}
    t0 = 1600000000000000
    for i in range(1200):
        at = t0 + i * 1000003
        if i >= 10 and rng.random() < 0.1:
            src = rng.choice(sorted(originals))
            doc, text = "imp-c%d" % i, originals[src]["text"] + " " + rng.choice(WORDS)
            copies[doc] = src
        else:
            doc, text = "imp-o%d" % i, make_text(rng)
            originals[doc] = {"text": text, "at": at, "account": "acc%d" % (i % 5)}
        account = "copier" if doc in copies else "acc%d" % (i % 5)  # never the source's
        lines.append(json.dumps({"id": doc, "text": text, "registered_at": at,
                                 "account": account, "meta": {"i": i}}))
    rng.shuffle(lines)  # the import orders them by registered_at
    body = ("\n".join(lines) + "\n").encode()
    hdrs = {"Content-Type": "application/x-ndjson"}
    # Each fsync takes 300 ms (the shim): the commits make the import last
    # long enough to be killed in the middle (a copy of a line still being
    # committed no longer holds the lines after it up, so the judging alone
    # takes a few milliseconds). The first kill waits for the middle.
    tmp = tempfile.mkdtemp(prefix="neardup-crash-import-")
    delay = os.path.join(tmp, "delay")
    with open(delay, "w") as f:
        f.write("300")
    with Server(sync=True, env=fsync_shim_env(delay_file=delay)) as srv:
        import_cycles(srv, rng, body, hdrs, originals, copies)
    shutil.rmtree(tmp, ignore_errors=True)


def import_cycles(srv, rng, body, hdrs, originals, copies):

    def verify_whole():
        conn = srv.connect(timeout=30)
        present = 0
        for doc, o in originals.items():
            status, _, data = request(conn, "GET", "/documents/" + doc, close=False)
            check(status in (200, 404), "GET %s: %s", doc, status)
            if status == 200:
                d = json.loads(data)
                check(d["account"] == o["account"] and d["meta"]["i"] >= 0, d)
                us = int(o["at"])
                want_at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(us // 1000000)) + \
                    ".%06dZ" % (us % 1000000)
                check(d["registered_at"] == want_at, "%s: %s != %s", doc, d["registered_at"], want_at)
                present += 1
        for doc in copies:
            status, _, _ = request(conn, "GET", "/documents/" + doc, close=False)
            check(status == 404, "copy %s was registered", doc)
        conn.close()
        return present

    killed_at = []
    for cycle in range(IMPORT_CYCLES):
        result = {}

        def send():
            try:
                result["answer"] = srv.request("POST", "/import", body, hdrs, timeout=120)
            except (OSError, http.client.HTTPException) as e:
                result["error"] = e
        committed = srv.metrics().get("neardup_store_changes_total", 0)
        th = threading.Thread(target=send, daemon=True)
        th.start()
        if cycle == 0:
            # Inside the import for sure: once it has committed some of its
            # lines while more wait for their commit (the store's counters).
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                m = srv.metrics()
                if m.get("neardup_store_changes_total", 0) > committed and \
                        m.get("neardup_pending_changes", 0) > 0:
                    break
                time.sleep(0.01)
        else:
            time.sleep(rng.uniform(0.05, 0.9))
        srv.proc.send_signal(signal.SIGKILL)
        srv.wait(timeout=10)
        th.join(30)
        check(not th.is_alive(), "import client hung")
        srv.restart()
        killed_at.append(verify_whole())
    status, _, data = srv.request("POST", "/import", body, hdrs, timeout=300)
    check(status == 200, "final import: %s %r", status, data[:300])
    ans = json.loads(data)
    sm = ans["summary"]
    check(sm["complete"] and sm["errors"] == 0, sm)
    check(sm["imported"] + sm["existing"] == len(originals), sm)
    check(sm["duplicates"] == len(copies), sm)
    got = {ev["id"]: ev["source"] for ev in ans["events"]}
    check(got == copies, "duplicates differ: %d of %d", len(set(got.items()) & set(copies.items())),
          len(copies))
    check(verify_whole() == len(originals), "originals missing")
    check(any(0 < n < len(originals) for n in killed_at), "no kill fell inside an import: %s",
          killed_at)
    print("crash (import): cycles=%d present after each kill=%s of %d, then complete; "
          "copies=%d all judged against their earliest source" % (
              IMPORT_CYCLES, killed_at, len(originals), len(copies)), flush=True)


def main():
    T.run(fresh=lambda: Server(sync=True))


if __name__ == "__main__":
    main()
