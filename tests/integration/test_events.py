"""The event feed, GET /events, against the real neardupd: every event
type (a copy detected, a claim revoked and restored, a policy changed, a
document deleted, an import finished) written with the change it shows,
paged forwards (after=) and backwards (order=desc), filtered by type and
account, seen by an account token only for its own accounts; in the LMDB
store across a restart and a kill -9 (an acknowledged change has its event,
and no seq is handed out twice); age retention with its 410 for a position
too old; bad parameters answered with clear errors."""

import json
import os
import sys
import tempfile
import time
from urllib.parse import quote

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (RFC3339_US, Runner, Server, check, edit, expect_error,  # noqa: E402
                     feed_events, load_texts)

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


if __name__ == "__main__":
    sys.exit(T.run(fresh=lambda: Server(["--token-file", TOKEN_FILE], in_memory=True)))
