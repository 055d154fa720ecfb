"""The originality workflow, walked against the real neardupd
(LMDB, a token file of two named tokens): accounts (an author's own
re-post is original), reprint policies and the action of every verdict
(publish, publish_as_reprint with its source, block; whitelists with
may_modify and may_hide_source; the server's --default-reprint), the
earliest claim deciding, appeals (revoke, restore), the copies of an
original paged through 1,000 detections with an opaque cursor, bounded
by --copies-max, and the audit log naming the client of every change,
all surviving a restart."""

import json
import os
import sys
import tempfile
from urllib.parse import quote

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (RFC3339_US, Runner, Server, check, edit, expect_error,  # noqa: E402
                     load_texts, run_threads)

T = Runner("test_workflow")
TEXTS = load_texts()
TMP = tempfile.mkdtemp(prefix="neardup-workflow-")
TOKENS = {"alice-app": "alice-token-0123456789abcdef", "bob-app": "bob-token-fedcba9876543210"}
TOKEN_FILE = os.path.join(TMP, "tokens")
# alice-app is a client (no role: it owns what it registers); bob-app, who
# handles appeals and changes alice-app's documents, is an operator.
ROLES = {"alice-app": "", "bob-app": " operator"}
with open(TOKEN_FILE, "w") as f:
    f.write("# name token [role]\n")
    for name, tok in TOKENS.items():
        f.write("%s %s%s\n" % (name, tok, ROLES[name]))
os.chmod(TOKEN_FILE, 0o600)


def auth(name="alice-app"):
    return {"Authorization": "Bearer " + TOKENS[name]}


def check_text(srv, text, doc=None, account=None, register=False, client="alice-app", **extra):
    req = {"text": text}
    if doc is not None:
        req["id"] = doc
    if account is not None:
        req["account"] = account
    if register:
        req["register"] = True
    req.update(extra)
    status, body = srv.json("POST", "/check-original", req, headers=auth(client))
    check(status == 200, "check %r: %s %r", doc, status, body)
    return body


def register(srv, doc, text, account, **extra):
    body = check_text(srv, text, doc, account, register=True, **extra)
    check(body["registered"] and body["original"] and body["action"] == "publish",
          "%s not registered as original: %r", doc, body)
    check("source" not in body and "show_source" not in body, body)
    return body


def path(doc, sub=""):
    return "/documents/" + quote(doc, safe="") + sub


def post(srv, doc, sub, obj=None, client="alice-app"):
    return srv.json("POST", path(doc, "/" + sub), obj, headers=auth(client))


def copies(srv, doc, limit=None, cursor=None):
    q = []
    if limit is not None:
        q.append("limit=%d" % limit)
    if cursor is not None:
        q.append("cursor=" + quote(cursor, safe=""))
    status, body = srv.json("GET", path(doc, "/copies") + ("?" + "&".join(q) if q else ""))
    check(status == 200, "copies of %s: %s %r", doc, status, body)
    return body


def audit(srv, client="alice-app", query=""):
    status, body = srv.json("GET", "/audit" + query, headers=auth(client))
    check(status == 200, "audit: %s %r", status, body)
    return body["entries"]


def fresh(args=()):
    return Server(["--token-file", TOKEN_FILE] + list(args))


# ---- accounts and actions ----

@T.test
def own_repost_is_published(srv):
    """An author's own re-post: its match has the same account, is listed
    with same_account true, and is not evidence: original, publish, and
    (with register) registered."""
    register(srv, "own-1", TEXTS["zh1"], "alice")
    body = check_text(srv, edit(TEXTS["zh1"], 3, 1), "own-2", "alice", register=True)
    check(body["original"] and body["verdict"] == "original", body)
    check(body["action"] == "publish" and body["registered"], body)
    m = body["matches"]
    check(len(m) == 1 and m[0]["id"] == "own-1" and m[0]["same_account"] is True, m)
    check(m[0]["account"] == "alice" and m[0]["status"] == "active", m)
    # Another account's copy of it is not original.
    body = check_text(srv, TEXTS["zh1"], "other-1", "bob")
    check(not body["original"] and body["action"] == "publish_as_reprint", body)
    check(all(x["same_account"] is False for x in body["matches"]), body)
    # A check without an account is anonymous: never the same account.
    body = check_text(srv, TEXTS["zh1"])
    check(not body["original"] and body["matches"][0]["same_account"] is False, body)


@T.test
def allow_gives_reprint_with_source(srv):
    reg = register(srv, "allow-1", TEXTS["en1"], "alice", reprint="allow",
                   meta={"title": "Original", "author": "A"})
    body = check_text(srv, edit(TEXTS["en1"], 4, 2), "copy-1", "bob")
    check(not body["original"] and body["verdict"] == "duplicate", body)
    check(body["action"] == "publish_as_reprint", body)
    check(body["show_source"] is True and body["may_modify"] is False, body)
    src = body["source"]
    check(src == {"id": "allow-1", "account": "alice", "meta": {"title": "Original", "author": "A"},
                  "registered_at": reg["registered_at"]}, src)
    check(RFC3339_US.match(src["registered_at"]), src)


@T.test
def forbid_blocks(srv):
    register(srv, "forbid-1", TEXTS["en2"], "alice", reprint="forbid")
    body = check_text(srv, edit(TEXTS["en2"], 2, 3), "copy-2", "bob")
    check(body["action"] == "block" and body["source"]["id"] == "forbid-1", body)
    check("show_source" not in body and "may_modify" not in body, body)
    # A registration of the copy is refused as not original, and blocked.
    body = check_text(srv, edit(TEXTS["en2"], 2, 3), "copy-2", "bob", register=True)
    check(not body["registered"] and body["action"] == "block", body)


@T.test
def whitelist_may_hide_source(srv):
    register(srv, "wl-1", TEXTS["zh2"], "alice", reprint="forbid",
             whitelist=[{"account": "bob", "may_hide_source": True, "may_modify": True},
                        {"account": "carol"}])
    body = check_text(srv, TEXTS["zh2"], "wl-bob", "bob")
    check(body["action"] == "publish_as_reprint" and body["show_source"] is False, body)
    check(body["may_modify"] is True and body["source"]["id"] == "wl-1", body)
    body = check_text(srv, TEXTS["zh2"], "wl-carol", "carol")
    check(body["action"] == "publish_as_reprint" and body["show_source"] is True, body)
    check(body["may_modify"] is False, body)
    body = check_text(srv, TEXTS["zh2"], "wl-dave", "dave")
    check(body["action"] == "block", body)
    body = check_text(srv, TEXTS["zh2"])  # anonymous: on no whitelist
    check(body["action"] == "block", body)
    status, doc = srv.json("GET", path("wl-1"))
    check(status == 200 and doc["account"] == "alice" and doc["status"] == "active", doc)
    check(doc["policy"] == {"reprint": "forbid", "explicit": True, "whitelist": [
        {"account": "bob", "may_modify": True, "may_hide_source": True},
        {"account": "carol", "may_modify": False, "may_hide_source": False}]}, doc)


@T.test
def default_reprint_forbid(_srv):
    """--default-reprint forbid: an original without its own rule blocks;
    GET /documents shows the effective rule, explicit false."""
    with fresh(["--default-reprint", "forbid"]) as srv:
        register(srv, "def-1", TEXTS["en3"], "alice")
        check(check_text(srv, TEXTS["en3"], "def-c", "bob")["action"] == "block")
        status, doc = srv.json("GET", path("def-1"))
        check(doc["policy"] == {"reprint": "forbid", "explicit": False, "whitelist": []}, doc)
        register(srv, "def-2", TEXTS["en4"], "alice", reprint="allow")
        check(check_text(srv, TEXTS["en4"], "def-d", "bob")["action"] == "publish_as_reprint")


@T.test
def earliest_claim_decides(srv):
    """Two originals match: the earliest claim is the source, not the most
    similar one; a revoked claim is skipped; the author's own is skipped."""
    text = TEXTS["zh3"]
    register(srv, "early", text, "alice", reprint="forbid")
    check(post(srv, "early", "revoke")[0] == 200)
    # While early is revoked, a near duplicate by carol registers as original.
    later_text = edit(text, 2, 5)
    body = register(srv, "later", later_text, "carol", reprint="allow")
    check(body["matches"][0]["status"] == "revoked", body)
    check(post(srv, "early", "restore")[0] == 200)
    # later_text itself: "later" is identical (most similar), "early" earlier.
    body = check_text(srv, later_text, "q-1", "bob")
    check({m["id"] for m in body["matches"]} == {"early", "later"}, body)
    check(body["source"]["id"] == "early" and body["action"] == "block", body)
    # early revoked again: the source is later (allow).
    check(post(srv, "early", "revoke")[0] == 200)
    body = check_text(srv, later_text, "q-2", "bob")
    check(body["source"]["id"] == "later" and body["action"] == "publish_as_reprint", body)
    check(post(srv, "early", "restore")[0] == 200)
    # alice's own text: early is hers (not evidence), later is the source.
    body = check_text(srv, later_text, "q-3", "alice")
    check(body["source"]["id"] == "later" and body["action"] == "publish_as_reprint", body)
    ev = [m for m in body["matches"] if m["id"] == "early"]
    check(ev and ev[0]["same_account"] is True, body)
    # Evidence is listed before the other matches.
    check(body["matches"][0]["id"] == "later", body)


# ---- appeals ----

@T.test
def revoke_then_restore(srv):
    register(srv, "claim-1", TEXTS["en5"], "alice", reprint="forbid")
    copy = edit(TEXTS["en5"], 3, 7)
    check(check_text(srv, copy, "c-1", "bob")["action"] == "block")
    status, body = post(srv, "claim-1", "revoke", {"reason": "appeal #12: licensed text"},
                        client="bob-app")
    check(status == 200 and body == {"id": "claim-1", "status": "revoked"}, body)
    body = check_text(srv, copy, "c-1", "bob")
    check(body["original"] and body["action"] == "publish", body)
    check(body["matches"][0]["status"] == "revoked", body)
    status, doc = srv.json("GET", path("claim-1"))
    check(doc["status"] == "revoked", doc)
    # Idempotent: revoking again is 200, unchanged, no audit entry.
    before = audit(srv, query="?document=claim-1")
    status, body = post(srv, "claim-1", "revoke")
    check(status == 200 and body["status"] == "revoked", body)
    check(len(audit(srv, query="?document=claim-1")) == len(before), "audit entry for no change")
    status, body = post(srv, "claim-1", "restore")
    check(status == 200 and body == {"id": "claim-1", "status": "active", "predates": [],
                                     "predates_truncated": False}, body)
    body = check_text(srv, copy, "c-1", "bob")
    check(not body["original"] and body["action"] == "block", body)


# ---- policies ----

@T.test
def policy_put_and_patch(srv):
    register(srv, "pol-1", TEXTS["zh4"], "alice")
    wl = [{"account": "bob", "may_modify": True}]
    status, body = srv.json("PUT", path("pol-1", "/policy"), {"reprint": "forbid", "whitelist": wl},
                            headers=auth())
    want = {"reprint": "forbid", "explicit": True,
            "whitelist": [{"account": "bob", "may_modify": True, "may_hide_source": False}]}
    check(status == 200 and body == want, "%s %r", status, body)
    check(srv.json("GET", path("pol-1"))[1]["policy"] == want)
    check(check_text(srv, TEXTS["zh4"], "p-c", "carol")["action"] == "block")
    body = check_text(srv, TEXTS["zh4"], "p-b", "bob")
    check(body["action"] == "publish_as_reprint" and body["may_modify"] is True, body)
    # PATCH changes only what it gives.
    status, body = srv.json("PATCH", path("pol-1", "/policy"), {"reprint": "allow"},
                            headers=auth("bob-app"))
    check(status == 200 and body == dict(want, reprint="allow"), body)
    check(check_text(srv, TEXTS["zh4"], "p-c", "carol")["action"] == "publish_as_reprint")
    # PUT replaces: a field absent is unset.
    status, body = srv.json("PUT", path("pol-1", "/policy"), {}, headers=auth())
    check(status == 200 and body == {"reprint": "allow", "explicit": False, "whitelist": []}, body)
    # Refusals.
    status, body = srv.json("PUT", path("nope", "/policy"), {"reprint": "allow"}, headers=auth())
    expect_error(status, body, 404, "not_found")
    status, body = srv.json("PUT", path("pol-1", "/policy"), {"reprint": "maybe"}, headers=auth())
    expect_error(status, body, 400, "invalid_field", "reprint")
    status, body = srv.json("PATCH", path("pol-1", "/policy"),
                            {"whitelist": [{"account": "x"}, {"account": "x"}]}, headers=auth())
    expect_error(status, body, 400, "invalid_field", "whitelist[1].account")
    status, body = srv.json("PUT", path("pol-1", "/policy"), {"reprint": "allow"})
    expect_error(status, body, 401, "unauthorized")
    status, body = srv.json("GET", path("pol-1", "/policy"))
    expect_error(status, body, 405, "method_not_allowed")


# ---- copies ----

@T.test
def copies_page_through_1000_detections(srv):
    original = TEXTS["zh5"]
    register(srv, "orig", original, "alice")
    n = 1000

    def work(i):
        for k in range(i, n, 4):
            conn_body = check_text(srv, original, "copy-%04d" % k, "acct-%d" % (k % 7))
            check(not conn_body["original"], conn_body)

    run_threads(4, work, timeout=600)
    # A retry of a check updates its detection in place: still 1000, and
    # copy-0005 keeps the time it was first detected at.
    first_at = {c["id"]: c["detected_at"] for c in copies(srv, "orig", limit=1000)["copies"]}
    check_text(srv, original, "copy-0005", "acct-5")
    seen, cursor, pages, last = [], None, 0, None
    while True:
        page = copies(srv, "orig", limit=37, cursor=cursor)
        pages += 1
        for c in page["copies"]:
            check(set(c) == {"id", "account", "kind", "resemblance", "containment", "distance",
                             "detected_at"}, c)
            check(c["kind"] == "identical" and c["resemblance"] == 1.0, c)
            check(RFC3339_US.match(c["detected_at"]), c)
            check(last is None or c["detected_at"] < last, "not newest first: %s", c)
            last = c["detected_at"]
            seen.append(c["id"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
        check(len(page["copies"]) == 37, page)
    check(len(seen) == n and len(set(seen)) == n, "%d seen, %d distinct", len(seen), len(set(seen)))
    check(seen[0] != "copy-0005", "the retried check moved to the front")
    after = {c["id"]: c["detected_at"] for c in copies(srv, "orig", limit=1000)["copies"]}
    check(after == first_at, "a retry changed a detection's time")
    check(pages == (n + 36) // 37, pages)
    check(len(copies(srv, "orig")["copies"]) == 100, "default limit")
    # Cursors are opaque and checked.
    page = copies(srv, "orig", limit=3)
    status, body = srv.json("GET", path("orig", "/copies?cursor=" + page["next_cursor"][:-2] + "AA"))
    expect_error(status, body, 400, "invalid_field", "cursor")
    register(srv, "orig-2", TEXTS["en1"], "alice")
    status, body = srv.json("GET", path("orig-2", "/copies?cursor=" + page["next_cursor"]))
    expect_error(status, body, 400, "invalid_field", "cursor")
    for q in ("limit=0", "limit=1001", "limit=x", "limit=5&limit=6"):
        status, body = srv.json("GET", path("orig", "/copies?" + q))
        expect_error(status, body, 400, "invalid_field", "limit")
    status, body = srv.json("GET", path("nope", "/copies"))
    expect_error(status, body, 404, "not_found")
    # Restart: the detections are durable.
    srv.restart()
    check(len(copies(srv, "orig", limit=1000)["copies"]) == n)


@T.test
def copies_retention_is_bounded(_srv):
    with fresh(["--copies-max", "5"]) as srv:
        register(srv, "ret", TEXTS["en2"], "alice")
        for i in range(8):
            check_text(srv, TEXTS["en2"], "r-%d" % i, "bob")
        got = [c["id"] for c in copies(srv, "ret")["copies"]]
        check(got == ["r-7", "r-6", "r-5", "r-4", "r-3"], got)
        # A check without an id records nothing; an original one neither.
        check_text(srv, TEXTS["en2"])
        check_text(srv, TEXTS["en3"], "unrelated", "bob")
        check([c["id"] for c in copies(srv, "ret")["copies"]] == got)


# ---- the audit log ----

@T.test
def every_change_is_audited_with_its_client(srv):
    register(srv, "aud-1", TEXTS["en4"], "alice")
    srv.json("PUT", path("aud-1", "/policy"), {"reprint": "forbid"}, headers=auth("alice-app"))
    post(srv, "aud-1", "revoke", {"reason": "appeal"}, client="bob-app")
    post(srv, "aud-1", "restore", client="alice-app")
    srv.json("PATCH", path("aud-1", "/policy"), {"whitelist": [{"account": "bob"}]},
             headers=auth("bob-app"))
    entries = audit(srv, query="?document=aud-1")
    got = [(e["action"], e["client"]) for e in entries]
    check(got == [("policy", "bob-app"), ("restore", "alice-app"),
                  ("revoke", "bob-app"), ("policy", "alice-app"), ("register", "alice-app")], got)
    for e in entries:
        check(set(e) == {"at", "client", "action", "document", "detail"}, e)
        check(e["document"] == "aud-1" and RFC3339_US.match(e["at"]), e)
    check(entries[2]["detail"] == {"status": "revoked", "reason": "appeal"}, entries[2])
    check(entries[3]["detail"]["policy"] == {"reprint": "forbid"}, entries[3])
    check(entries[3]["detail"]["previous"] is None, entries[3])
    check(entries[0]["detail"]["policy"] == {"reprint": "forbid", "whitelist": [
        {"account": "bob", "may_modify": False, "may_hide_source": False}]}, entries[0])
    status, _ = srv.json("DELETE", path("aud-1"), headers=auth("bob-app"))
    check(status == 200)
    ats = [e["at"] for e in entries]
    check(ats == sorted(ats, reverse=True) and len(set(ats)) == len(ats), ats)
    # Paging the whole log, and the guard.
    page = audit(srv, query="?limit=2")
    check(len(page) == 2, page)
    status, body = srv.json("GET", "/audit")
    expect_error(status, body, 401, "unauthorized")
    status, body = srv.json("GET", "/audit?cursor=xyz", headers=auth())
    expect_error(status, body, 400, "invalid_field", "cursor")
    # The access log names the client, never the token. Wait for both
    # requests' lines: two workers may have served them.
    def logged(recs):
        recs = [r for r in recs if r.get("msg") == "request"]
        named = any(r.get("client") == "bob-app" and r.get("method") == "DELETE" for r in recs)
        return named, any(r.get("client") == "-" for r in recs)

    recs = srv.log_records_until(lambda recs: all(logged(recs)), timeout=5)
    log = srv.log_text()
    named, anonymous = logged(recs)
    recs = [r for r in recs if r.get("msg") == "request"]
    check(named, recs[-3:])
    check(anonymous, "no anonymous request logged")
    for tok in TOKENS.values():
        check(tok not in log, "a token in the log")
    # Durable: after a restart the log is the same, the deletion first
    # (read by bob-app, an operator).
    srv.restart()
    after = audit(srv, "bob-app", query="?document=aud-1")
    check(after[1:] == entries, after)
    check((after[0]["action"], after[0]["client"]) == ("delete", "bob-app"), after[0])


@T.test
def named_token_file_rules(_srv):
    """A bare token is "default"; bad lines stop the start without
    showing a token."""
    bare = os.path.join(TMP, "bare")
    with open(bare, "w") as f:
        f.write(TOKENS["alice-app"] + "\n")
    os.chmod(bare, 0o600)
    with Server(["--token-file", bare]) as srv:
        register(srv, "b-1", TEXTS["en1"], "alice")
        post(srv, "b-1", "revoke")
        check(audit(srv)[0]["client"] == "default")
    for content, want in (("a has space inside-0123456789\n", "may hold only"),
                          ("x %s\nx %s\n" % (TOKENS["alice-app"], TOKENS["bob-app"]), "used twice"),
                          ("x %s\ny %s\n" % (TOKENS["alice-app"], TOKENS["alice-app"]),
                           "given twice"),
                          ("b@d %s\n" % TOKENS["alice-app"], "name on line 1")):
        p = os.path.join(TMP, "bad")
        with open(p, "w") as f:
            f.write(content)
        os.chmod(p, 0o600)
        srv = Server(["--token-file", p], wait_ready=False)
        try:
            try:
                srv.start()
                srv.wait(10)
            except RuntimeError:
                pass
            log = srv.log_text()
            check(srv.proc.poll() not in (None, 0), "started with %r", content)
            check(want in log, "%r not in %s", want, log[-400:])
            for tok in TOKENS.values():
                check(tok not in log, "token in the error")
        finally:
            srv.cleanup()


def main():
    T.run(fresh=fresh)


if __name__ == "__main__":
    main()
