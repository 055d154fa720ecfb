"""The event feed, GET /events, against the real neardupd: every event
type (a copy detected, a claim revoked and restored, a policy changed, a
document deleted, an import finished) written with the change it shows,
paged forwards (after=) and backwards (order=desc), filtered by type and
account, seen by an account token only for its own accounts; in the LMDB
store across a restart and a kill -9 (an acknowledged change has its event,
and no seq is handed out twice); age retention with its 410 for a position
too old; bad parameters answered with clear errors. Audit 2026-12-07 G03:
a page is bounded in bytes (~1 MiB), whatever its limit, and large events
come whole across pages. G04: after README's restore (data.mdb from
`neardup backup`, lock.mdb removed, after a kill -9) no seq or event id is
handed out again, the webhook and a consumer at their old positions get
the new events, a position ahead of the feed answers 409 (2^64 - 1 too,
not wrapped), and a webhook position ahead of the feed is moved back to
it instead of waiting for ever."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (RFC3339_US, Runner, Server, check, edit, expect_error,  # noqa: E402
                     feed_events, load_texts, neardup_path)

T = Runner("test_events")
TEXTS = load_texts()
TMP = tempfile.mkdtemp(prefix="neardup-events-")
TOKENS = {"ops": ("ops-token-0123456789abcdef", " operator"),
          "alice": ("alice-token-0123456789abcdef", " accounts=alice"),
          "bob": ("bob-token-0123456789abcdef", " accounts=bob"),
          "cms": ("cms-token-0123456789abcdef", "")}
TOKEN_FILE = os.path.join(TMP, "tokens")
with open(TOKEN_FILE, "w") as f:
    for name, (tok, role) in TOKENS.items():
        f.write("%s %s%s\n" % (name, tok, role))
os.chmod(TOKEN_FILE, 0o600)
TYPES = {"copy.detected", "claim.revoked", "claim.restored", "policy.changed",
         "document.deleted", "import.finished"}


def auth(name="ops"):
    return {"Authorization": "Bearer " + TOKENS[name][0]}


def checked(srv, text, doc, account, register=False, who="ops"):
    req = {"text": text, "id": doc, "account": account}
    if register:
        req["register"] = True
    status, body = srv.json("POST", "/check-original", req, headers=auth(who))
    check(status == 200, "check %s: %s %r", doc, status, body)
    return body


def events(srv, query="", who="ops", want=200):
    status, body = srv.json("GET", "/events" + query, headers=auth(who))
    check(status == want, "GET /events%s: %s %r", query, status, body)
    return body


def all_events(srv, who="ops", limit=3, query=""):
    """Every event, paged forwards limit at a time."""
    return feed_events(srv, auth(who), limit, query)


def walk_changes(srv, tag=""):
    """Makes one event of every type; returns the ids it used."""
    orig, copy = "orig" + tag, "copy" + tag
    body = checked(srv, TEXTS["en1"], orig, "alice", register=True)
    check(body["registered"] and body["original"], body)
    body = checked(srv, edit(TEXTS["en1"], 3, 2), copy, "bob")
    check(not body["original"], body)
    path = "/documents/" + quote(orig, safe="")
    status, _ = srv.json("POST", path + "/revoke", {"reason": "appeal"}, headers=auth())
    check(status == 200)
    status, _ = srv.json("POST", path + "/restore", {"reason": "appeal lost"}, headers=auth())
    check(status == 200)
    status, b = srv.json("PATCH", path + "/policy", {"reprint": "forbid"}, headers=auth())
    check(status == 200, "%s %r", status, b)
    line = json.dumps({"id": "imp" + tag, "text": TEXTS["zh1"], "account": "bob"})
    status, _, data = srv.request("POST", "/import", line + "\n",
                                  dict(auth(), **{"Content-Type": "application/x-ndjson"}),
                                  timeout=60)
    check(status == 200, "import: %s %r", status, data)
    status, _ = srv.json("DELETE", "/documents/" + quote("imp" + tag, safe=""), headers=auth())
    check(status == 200)
    return orig, copy


def fresh(args=()):
    return Server(["--token-file", TOKEN_FILE] + list(args))


@T.test
def every_type_in_order(srv):
    orig, copy = walk_changes(srv)
    evs = all_events(srv)
    types = [e["type"] for e in evs]
    check(types == ["copy.detected", "claim.revoked", "claim.restored", "policy.changed",
                    "import.finished", "document.deleted"], "types: %r", types)
    seqs = [e["seq"] for e in evs]
    check(seqs == sorted(seqs) and len(set(seqs)) == len(seqs), "seqs: %r", seqs)
    for e in evs:
        check(set(e) == {"id", "seq", "type", "at", "account", "data"}, e)
        check(e["id"] == "evt_%016x" % e["seq"], e)
        check(RFC3339_US.match(e["at"]), e)
    det = evs[0]
    check(det["account"] == "alice", det)  # the original's owner is told
    check(det["data"]["copy"] == {"id": copy, "account": "bob"}, det)
    check(det["data"]["original"]["id"] == orig and
          det["data"]["original"]["account"] == "alice" and
          RFC3339_US.match(det["data"]["original"]["registered_at"]), det)
    check(det["data"]["kind"] in ("near_duplicate", "duplicate", "partial_copy"), det)
    check(0 < det["data"]["resemblance"] <= 1, det)
    check(evs[1]["data"]["action"] == "revoke" and evs[1]["data"]["document"] == orig, evs[1])
    check(evs[1]["account"] == "alice", evs[1])
    check(evs[5]["data"]["document"] == "imp" and evs[5]["account"] == "bob", evs[5])
    # The same copy checked again is no new event; another copy is.
    checked(srv, edit(TEXTS["en1"], 3, 2), copy, "bob")
    check(len(all_events(srv)) == 6, "a repeated detection made an event")
    checked(srv, edit(TEXTS["en1"], 4, 5), copy + "-2", "bob")
    check(len(all_events(srv)) == 7)


@T.test
def pages_filters_and_order(srv):
    walk_changes(srv)
    evs = all_events(srv, limit=100)
    check(all_events(srv, limit=1) == evs, "pages of one differ from one page")
    page = events(srv, "?order=desc&limit=2")
    check([e["seq"] for e in page["events"]] == [evs[-1]["seq"], evs[-2]["seq"]], page)
    check(page["next_before"] == evs[-2]["seq"], page)
    back = []
    before = None
    for _ in range(20):
        q = "?order=desc&limit=2" + ("&before=%d" % before if before else "")
        page = events(srv, q)
        back += page["events"]
        if page["next_before"] is None:
            break
        before = page["next_before"]
    check(back == list(reversed(evs)), "newest first: %r", [e["seq"] for e in back])
    only = events(srv, "?type=claim.revoked")["events"]
    check([e["type"] for e in only] == ["claim.revoked"], only)
    bobs = events(srv, "?account=bob")["events"]
    check([e["type"] for e in bobs] == ["document.deleted"], bobs)  # an import has no account
    page = events(srv, "?after=%d" % evs[-1]["seq"])
    check(page["events"] == [] and page["next_after"] == evs[-1]["seq"], page)
    check(page["oldest"] == evs[0]["seq"] and page["latest"] == evs[-1]["seq"], page)


@T.test
def tokens_see_their_accounts(srv):
    walk_changes(srv)
    a = all_events(srv, who="alice")
    check(a and all(e["account"] == "alice" for e in a), a)
    check({e["type"] for e in a} == {"copy.detected", "claim.revoked", "claim.restored",
                                    "policy.changed"}, a)
    b = all_events(srv, who="bob")
    check(b and all(e["account"] == "bob" for e in b), b)
    status, body = srv.json("GET", "/events")
    expect_error(status, body, 401, "unauthorized")


@T.test
def bad_parameters(srv):
    for q, field in (("?limit=0", "limit"), ("?limit=1001", "limit"), ("?limit=x", "limit"),
                     ("?after=-1", "after"), ("?after=1&after=2", "after"),
                     ("?type=copy", "type"), ("?order=up", "order"),
                     ("?order=desc&after=3", "after"), ("?before=3", "before"),
                     ("?after=99999999999999999999999", "after")):
        status, body = srv.json("GET", "/events" + q, headers=auth())
        expect_error(status, body, 400, "invalid_field", field)
    status, body = srv.json("POST", "/events", {}, headers=auth())
    expect_error(status, body, 405, "method_not_allowed")


@T.test
def lmdb_restart_and_kill(_srv):
    with fresh() as srv:
        walk_changes(srv)
        before = all_events(srv)
        srv.restart()
        check(all_events(srv) == before, "the feed changed across a restart")
        # Acknowledged detections, then kill -9: each has its event; the
        # next seq after the restart is new.
        for i in range(20):
            checked(srv, edit(TEXTS["en1"], 3 + i % 4, 10 + i), "k-%d" % i, "bob")
        srv.kill()
        srv.restart()
        evs = all_events(srv, limit=50)
        ids = {e["data"]["copy"]["id"] for e in evs if e["type"] == "copy.detected"}
        check(all("k-%d" % i in ids for i in range(20)), "lost detections: %r", ids)
        last = evs[-1]["seq"]
        checked(srv, edit(TEXTS["en1"], 5, 99), "after-kill", "bob")
        new = events(srv, "?after=%d" % last)["events"]
        check(len(new) == 1 and new[0]["seq"] == last + 1, new)


@T.test
def retention_by_age(_srv):
    with fresh(["--events-max-age", "1"]) as srv:
        walk_changes(srv)
        first = all_events(srv)
        time.sleep(1.5)
        # Pruning runs with later commits: one more change prunes the old.
        walk_changes(srv, "-b")
        page = events(srv, "?limit=1000")
        check(page["oldest"] > first[-1]["seq"], "not pruned: %r", page["oldest"])
        events(srv, "?after=1", want=410)
        body = events(srv, "?after=%d" % (page["oldest"] - 1))
        check(body["events"] and body["events"][0]["seq"] == page["oldest"], body)
        # After a restart the seq goes on, never reused.
        latest = page["latest"]
        srv.restart()
        checked(srv, edit(TEXTS["en1"], 6, 77), "after-restart", "bob")
        check(events(srv, "?after=%d" % latest)["events"][0]["seq"] == latest + 1)


PAGE_BYTES = 1 << 20  # events.c EVENTS_PAGE_BYTES


def big_policy(v):
    """A policy of ~65 KB (the most PUT takes is 65536 bytes of compact JSON)."""
    return {"reprint": "allow", "whitelist": [
        {"account": ("%03d-%d-" % (i, v)) + "a" * 185, "may_modify": True,
         "may_hide_source": True} for i in range(256)]}


@T.test
def pages_bounded_in_bytes(srv):
    """G03: 24 policy.changed events of ~65 KB each. A limit=1000 page
    stops before 1 MiB (next_after where it stopped), and paging (up and
    down) gives every event whole, as pages of one do."""
    checked(srv, TEXTS["en1"], "pol", "alice", register=True)
    n = 24
    for v in range(n):
        status, b = srv.json("PUT", "/documents/pol/policy", big_policy(v), headers=auth())
        check(status == 200, "PUT policy %d: %s %r", v, status, b)
    t0 = time.monotonic()
    status, _, raw = srv.request("GET", "/events?limit=1000", headers=auth())
    took = time.monotonic() - t0
    check(status == 200, "GET /events?limit=1000: %s %r", status, raw[:200])
    page = json.loads(raw)
    got = len(page["events"])
    print("   a limit=1000 page: %d of %d events, %d bytes, %.3f s" % (got, n, len(raw), took))
    check(len(raw) <= PAGE_BYTES + 1024, "a page of %d bytes (%d events)", len(raw), got)
    check(0 < got < n, "%d events in the first page", got)
    check(page["next_after"] == page["events"][-1]["seq"], "next_after %r", page["next_after"])
    check(page["latest"] > page["next_after"], page["latest"])
    evs = all_events(srv, limit=1000)
    check(len(evs) == n and all(e["type"] == "policy.changed" for e in evs),
          "%d events: %r", len(evs), [e["type"] for e in evs])
    check(evs == all_events(srv, limit=1), "byte-bounded pages differ from pages of one")
    for v, e in enumerate(evs):
        check(e["data"]["detail"]["policy"] == big_policy(v), "event %d's policy changed", v)
    back, before = [], None
    for _ in range(n + 1):
        q = "?order=desc&limit=1000" + ("&before=%d" % before if before else "")
        status, _, raw = srv.request("GET", "/events" + q, headers=auth())
        check(status == 200 and len(raw) <= PAGE_BYTES + 1024, "%s: %s, %d bytes", q, status,
              len(raw))
        page = json.loads(raw)
        back += page["events"]
        if page["next_before"] is None:
            break
        before = page["next_before"]
    check(back == list(reversed(evs)), "newest first: %r", [e["seq"] for e in back])


class Hooks:
    """A webhook receiver in this process: (Neardup-Event-Id, seq, data) of
    each POST, answered 200."""

    def __init__(self):
        got = self.got = []

        class Hook(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                ev = json.loads(body)
                got.append((self.headers.get("Neardup-Event-Id"), ev["seq"], ev["data"]))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.file = os.path.join(TMP, "hooks-%d.json" % self.httpd.server_address[1])
        with open(self.file, "w") as f:
            json.dump({"subscriptions": [{
                "name": "cms", "url": "http://127.0.0.1:%d/hook" % self.httpd.server_address[1],
                "secret": "0123456789abcdef0123", "start": "oldest",
                "backoff_base_ms": 50, "backoff_cap_ms": 1000}]}, f)

    def wait(self, n, what, timeout=10):
        deadline = time.monotonic() + timeout
        while len(self.got) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        check(len(self.got) >= n, "%s: the webhook got %d events of %d in %d s: %r", what,
              len(self.got), n, timeout, [g[:2] for g in self.got])

    def wait_ids(self, ids, what, timeout=10):
        """Waits until every id of ids came (others may come too: the
        events after the last position saved come again after a kill -9)."""
        deadline = time.monotonic() + timeout
        while not set(ids) <= {g[0] for g in self.got} and time.monotonic() < deadline:
            time.sleep(0.05)
        got = [g[0] for g in self.got]
        check([i for i in got if i in ids] == list(ids), "%s: wanted %r, the webhook got %r",
              what, ids, got)

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def copy_checked(srv, doc, seed):
    checked(srv, edit(TEXTS["en1"], 3 + seed % 4, 20 + seed), doc, "bob")


@T.test
def restore_never_reuses_seqs(_srv):
    """G04: README's restore after a kill -9. The feed goes on after every
    seq handed out before (logged): no id names another event, and the
    webhook and a consumer at their old positions get the new events."""
    rx = Hooks()
    try:
        with fresh(["--webhooks", rx.file]) as srv:
            checked(srv, TEXTS["en1"], "r-orig", "alice", register=True)
            for i in range(3):
                copy_checked(srv, "r-a%d" % i, i)
            bk = os.path.join(srv.tmp, "backup")
            b = subprocess.run([neardup_path(), "backup", "--data", srv.data_dir, bk],
                               capture_output=True, timeout=60,
                               env=dict(os.environ, NEARDUP_DATA=""))
            check(b.returncode == 0, "backup: %r", b.stderr)
            for i in range(3, 6):
                copy_checked(srv, "r-a%d" % i, i)
            before = all_events(srv, limit=100)
            check(len(before) == 6, "%d events before", len(before))
            rx.wait(6, "before the restore")
            consumer_at = before[-1]["seq"]
            srv.kill()  # then README's restore: the backup's data.mdb, no lock.mdb
            shutil.copy(os.path.join(bk, "data.mdb"), os.path.join(srv.data_dir, "data.mdb"))
            if os.path.exists(os.path.join(srv.data_dir, "lock.mdb")):
                os.remove(os.path.join(srv.data_dir, "lock.mdb"))
            srv.restart()
            for i in range(3):
                copy_checked(srv, "r-b%d" % i, 10 + i)
            after = all_events(srv, limit=100)
            old = {e["id"]: e for e in before}
            reused = [(e["id"], old[e["id"]]["data"]["copy"]["id"], e["data"]["copy"]["id"])
                      for e in after if e["id"] in old and e != old[e["id"]]]
            check(not reused, "event ids given again to other events: %r", reused)
            check("the event feed goes on after seq %d" % consumer_at in srv.log_text(),
                  "no floor logged: %s", srv.log_tail())
            new = [e for e in after if e["id"] not in old]
            check([e["data"]["copy"]["id"] for e in new] == ["r-b0", "r-b1", "r-b2"] and
                  new[0]["seq"] > consumer_at, "new events: %r", new)
            page = events(srv, "?after=%d" % consumer_at)  # a consumer's position from before
            check([e["id"] for e in page["events"]] == [e["id"] for e in new], page)
            rx.wait_ids([e["id"] for e in new], "after the restore")
            sent = {}
            for eid, seq, data in rx.got:  # sent again after the kill: the same event
                check(sent.setdefault(eid, data) == data, "webhook id %s sent for 2 events", eid)
            latest = page["latest"]
            for after_q in (latest + 1, 2**63 - 1, 2**63, 2**64 - 1):
                status, body = srv.json("GET", "/events?after=%d&limit=3" % after_q,
                                        headers=auth())
                err = expect_error(status, body, 409, "position_ahead")
                check(err.get("latest") == latest, "after=%d: %r", after_q, err)
            # A plain restart after it: seqs go on by one, no gap, no reuse.
            srv.restart()
            copy_checked(srv, "r-c0", 30)
            more = events(srv, "?after=%d" % latest)["events"]
            check(len(more) == 1 and more[0]["seq"] == latest + 1, more)
    finally:
        rx.close()


@T.test
def webhook_position_ahead_of_feed(_srv):
    """G04: a webhook position past the feed's latest event (positions of
    another store) is logged and moved back to the feed's end; the next
    event is delivered instead of the subscription waiting idle."""
    rx = Hooks()
    try:
        with fresh(["--webhooks", rx.file]) as srv:
            checked(srv, TEXTS["en1"], "w-orig", "alice", register=True)
            copy_checked(srv, "w-a0", 0)
            rx.wait(1, "the first event")
            srv.stop()
            with open(os.path.join(srv.data_dir, "webhooks", "cms.position"), "w") as f:
                f.write("1000000\n")
            srv.restart()
            copy_checked(srv, "w-a1", 1)
            rx.wait(2, "with the position ahead")
            check(rx.got[1][2]["copy"]["id"] == "w-a1", rx.got)
            check("is ahead of the feed" in srv.log_text(), "not logged: %s", srv.log_tail())
            status, body = srv.json("GET", "/webhooks", headers=auth())
            subs = body["subscriptions"]
            check(status == 200 and subs[0]["position"] == rx.got[1][1], body)
    finally:
        rx.close()


if __name__ == "__main__":
    sys.exit(T.run(fresh=lambda: Server(["--token-file", TOKEN_FILE], in_memory=True)))
