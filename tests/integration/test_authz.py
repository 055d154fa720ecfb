"""Authorization (audit F06, F02): tokens bound to accounts or documents.

A token file's third field is the token's role: "operator" (also a bare
token) or "accounts=A,B"; a named line without one is a client, which owns
the documents it registers (kept with the stored record): only it, a token
of the document's account or an operator changes them, and GET /audit
shows it the entries it made and those about its documents (the F06 repro's
token file, alice-cms and bob-cms without roles). Every endpoint is walked
with an operator token, an account token for alice, one for bob and no
token: document writes (registration with an account, policy PUT/PATCH,
revoke, restore, DELETE) need the right to act for the document's account
(403 forbidden otherwise, nothing changed), POST /import and GET /replica
are for operators, GET /audit shows an account token only entries about
its accounts' documents (or made by itself), reads stay open. A check's
"account" counts (same account: not evidence) only when the caller may act
for it, and a check with an id records its detection only then (the answer
says "recorded"). A full copies list drops the oldest entry of the account
holding the most entries, so a flood from one account evicts only its own.
With no token configured everything stays open."""

import json
import os
import sys
import tempfile
from urllib.parse import quote

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Runner, Server, check, expect_error, load_texts  # noqa: E402

T = Runner("test_authz")
TEXTS = load_texts()
TMP = tempfile.mkdtemp(prefix="neardup-authz-")
TOKENS = {"op": "op-token-0123456789abcdef01",
          "legacy": "legacy-token-0123456789abcd",
          "alice": "alice-token-0123456789abcdef",
          "bob": "bob-token-fedcba9876543210ab",
          "multi": "multi-token-0123456789abcdef"}
ROLES = {"op": "operator", "legacy": "", "alice": "accounts=alice", "bob": "accounts=bob",
         "multi": "accounts=carol,alice"}
CALLERS = ("op", "alice", "bob", None)


def write_file(name, lines):
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        f.write("# name token role\n" + "".join(line + "\n" for line in lines))
    os.chmod(path, 0o600)
    return path


TOKEN_FILE = write_file("tokens", ["%s-app %s %s" % (n, TOKENS[n], ROLES[n]) for n in TOKENS])
# The same names without roles: every token a client (the format before roles).
LEGACY_FILE = write_file("legacy", ["%s-app %s" % (n, TOKENS[n]) for n in TOKENS])


def hdr(who):
    return {"Authorization": "Bearer " + TOKENS[who]} if who else {}


def call(srv, method, path, obj=None, who=None):
    return srv.json(method, path, obj, headers=hdr(who))


def doc_path(doc, sub=""):
    return "/documents/" + quote(doc, safe="") + sub


def register(srv, doc, text, account=None, who="op", **extra):
    req = {"id": doc, "text": text, "register": True}
    if account is not None:
        req["account"] = account
    req.update(extra)
    return call(srv, "POST", "/check-original", req, who)


def registered(srv, doc, text, account, who="op", **extra):
    status, body = register(srv, doc, text, account, who, **extra)
    check(status == 200 and body["registered"], "register %s: %s %r", doc, status, body)
    return body


def get_doc(srv, doc):
    return srv.json("GET", doc_path(doc))


def copies(srv, doc):
    status, body = srv.json("GET", doc_path(doc, "/copies?limit=100"))
    check(status == 200, "copies: %s %r", status, body)
    return body["copies"]


def refused(status, body, who, what):
    """401 without a token, 403 forbidden with a valid one lacking the right."""
    if who is None:
        expect_error(status, body, 401, "unauthorized")
    else:
        err = expect_error(status, body, 403, "forbidden")
        check(TOKENS[who] not in json.dumps(body), "%s: a token in the answer", what)
        return err


def fresh(args=(), token_file=TOKEN_FILE, **kw):
    return Server(["--token-file", token_file] + list(args), in_memory=kw.pop("in_memory", True),
                  **kw)


# ---- the token file ----

@T.test
def token_file_roles():
    """Roles are checked at start: a bad one stops it, naming the line."""
    for lines, want in ((["x %s admin" % TOKENS["op"]], "the third field, a role"),
                        (["x %s accounts=" % TOKENS["op"]], "accounts on line 2"),
                        (["x %s accounts=a,,b" % TOKENS["op"]], "account 2 on line 2"),
                        (["x %s accounts=a,a" % TOKENS["op"]], "listed twice")):
        p = write_file("bad", lines)
        srv = Server(["--token-file", p], wait_ready=False, in_memory=True)
        try:
            try:
                srv.start()
                srv.wait(10)
            except RuntimeError:
                pass
            log = srv.log_text()
            check(srv.proc.poll() not in (None, 0), "started with %r", lines)
            check(want in log, "%r not in %s", want, log[-400:])
            check(TOKENS["op"] not in log, "token in the error")
        finally:
            srv.cleanup()


# ---- open reads ----

@T.test
def reads_stay_open():
    with fresh() as srv:
        registered(srv, "r-1", TEXTS["en1"], "alice", reprint="forbid")
        for who in CALLERS:
            for path in ("/healthz", "/readyz", "/metrics", doc_path("r-1"),
                         doc_path("r-1", "/copies")):
                status, _, _ = srv.request("GET", path, headers=hdr(who))
                check(status == 200, "GET %s as %s: %s", path, who, status)
            status, _, _ = srv.request("HEAD", doc_path("r-1"), headers=hdr(who))
            check(status == 200, "HEAD as %s: %s", who, status)
            status, body = call(srv, "POST", "/fingerprint", {"text": TEXTS["en2"]}, who)
            check(status == 200 and "simhash" in body, body)
            status, body = call(srv, "POST", "/check-original", {"text": TEXTS["en2"]}, who)
            check(status == 200 and body["original"] and "recorded" not in body, body)


# ---- registration ----

@T.test
def registration_needs_the_account():
    with fresh() as srv:
        status, body = register(srv, "a-1", TEXTS["en1"], "alice", who=None)
        refused(status, body, None, "anonymous registration")
        status, body = register(srv, "a-1", TEXTS["en1"], "alice", who="bob")
        err = refused(status, body, "bob", "bob registers for alice")
        check("bob-app" in err["message"], err)
        check(get_doc(srv, "a-1")[0] == 404, "registered by a refused request")
        registered(srv, "a-1", TEXTS["en1"], "alice", who="alice")
        registered(srv, "o-1", TEXTS["en2"], "alice", who="op")
        registered(srv, "l-1", TEXTS["en3"], "dave", who="legacy")  # a line without a role
        # Without an account: a token of one account registers for it; of
        # several, it must name one; an operator's document has none.
        registered(srv, "b-1", TEXTS["zh1"], None, who="bob")
        check(get_doc(srv, "b-1")[1].get("account") == "bob", get_doc(srv, "b-1"))
        status, body = register(srv, "m-1", TEXTS["en4"], None, who="multi")
        expect_error(status, body, 400, "invalid_field", "account")
        registered(srv, "m-1", TEXTS["en4"], "carol", who="multi")
        registered(srv, "n-1", TEXTS["en5"], None, who="op")
        check("account" not in get_doc(srv, "n-1")[1], get_doc(srv, "n-1"))
        # An id registered already is its account's: bob may not register
        # it again (even with his own account), alice may (same answer);
        # with a meta it does not have, that is a conflict, not a drop
        # once the right is granted.
        status, body = register(srv, "a-1", TEXTS["en1"], "bob", who="bob")
        err = refused(status, body, "bob", "bob registers alice's id")
        check(err.get("id") == "a-1", err)
        status, body = register(srv, "a-1", TEXTS["en1"], "alice", who="alice")
        check(status == 200 and body["registered"], body)
        status, body = register(srv, "a-1", TEXTS["en1"], "alice", who="alice",
                                meta={"title": "x"})
        expect_error(status, body, 409, "id_conflict", "meta")


# ---- document writes ----

@T.test
def policy_only_for_the_owner():
    with fresh() as srv:
        registered(srv, "p-1", TEXTS["en1"], "alice", who="alice", reprint="forbid")
        registered(srv, "p-none", TEXTS["en2"], None, who="op")
        evil = {"reprint": "allow",
                "whitelist": [{"account": "mallory", "may_hide_source": True}]}
        for method in ("PUT", "PATCH"):
            for who in ("bob", None):
                status, body = call(srv, method, doc_path("p-1", "/policy"), evil, who)
                refused(status, body, who, "%s policy as %s" % (method, who))
                if who:
                    check(body["error"].get("id") == "p-1", body)
            # Refused before the body is judged: an invalid one is 403 too.
            status, body = call(srv, method, doc_path("p-1", "/policy"), {"reprint": 7}, "bob")
            refused(status, body, "bob", "invalid body")
        check(get_doc(srv, "p-1")[1]["policy"]["reprint"] == "forbid", "changed by bob")
        for who, reprint in (("alice", "allow"), ("op", "forbid")):
            status, body = call(srv, "PATCH", doc_path("p-1", "/policy"), {"reprint": reprint}, who)
            check(status == 200 and body["reprint"] == reprint, "%s: %s %r", who, status, body)
            status, body = call(srv, "PUT", doc_path("p-1", "/policy"), {"reprint": reprint}, who)
            check(status == 200, "%s PUT: %s %r", who, status, body)
        # A document without an account: only an operator changes it.
        status, body = call(srv, "PUT", doc_path("p-none", "/policy"), {"reprint": "allow"},
                            "alice")
        refused(status, body, "alice", "alice on a document without account")
        status, _ = call(srv, "PUT", doc_path("p-none", "/policy"), {"reprint": "allow"}, "op")
        check(status == 200, status)
        # An unknown id: 404 for whoever may write.
        status, body = call(srv, "PUT", doc_path("nope", "/policy"), {"reprint": "allow"}, "bob")
        expect_error(status, body, 404, "not_found")


@T.test
def revoke_restore_only_for_the_owner():
    with fresh() as srv:
        registered(srv, "s-1", TEXTS["en1"], "alice", who="alice")
        for sub in ("revoke", "restore"):
            for who in ("bob", None):
                status, body = call(srv, "POST", doc_path("s-1", "/" + sub), {"reason": "x"}, who)
                refused(status, body, who, "%s as %s" % (sub, who))
        check(get_doc(srv, "s-1")[1]["status"] == "active", "revoked by bob")
        for who in ("alice", "op"):
            status, body = call(srv, "POST", doc_path("s-1", "/revoke"), {"reason": "x"}, who)
            check(status == 200 and body["status"] == "revoked", "%s: %s %r", who, status, body)
            # bob cannot restore it either
            status, body = call(srv, "POST", doc_path("s-1", "/restore"), None, "bob")
            refused(status, body, "bob", "restore as bob")
            check(get_doc(srv, "s-1")[1]["status"] == "revoked", "restored by bob")
            status, body = call(srv, "POST", doc_path("s-1", "/restore"), None, who)
            check(status == 200 and body["status"] == "active", "%s: %s %r", who, status, body)


@T.test
def delete_only_for_the_owner():
    with fresh() as srv:
        registered(srv, "d-1", TEXTS["en1"], "alice", who="alice")
        registered(srv, "d-2", TEXTS["en2"], "alice", who="alice")
        registered(srv, "d-3", TEXTS["en3"], None, who="op")
        for who in ("bob", None):
            status, body = call(srv, "DELETE", doc_path("d-1"), None, who)
            refused(status, body, who, "DELETE as %s" % who)
        status, body = call(srv, "DELETE", doc_path("d-3"), None, "alice")
        refused(status, body, "alice", "alice deletes a document without account")
        check(get_doc(srv, "d-1")[0] == 200 and get_doc(srv, "d-3")[0] == 200, "deleted")
        for doc, who in (("d-1", "alice"), ("d-2", "op"), ("d-3", "op")):
            status, body = call(srv, "DELETE", doc_path(doc), None, who)
            check(status == 200 and body == {"id": doc, "deleted": True}, "%s: %s %r", who,
                  status, body)
            check(get_doc(srv, doc)[0] == 404, "%s still there", doc)
        # Then bob may take the id for himself (it is free).
        registered(srv, "d-1", TEXTS["en1"], "bob", who="bob")


# ---- the audit log ----

@T.test
def audit_filtered_to_the_token():
    with fresh() as srv:
        registered(srv, "al-1", TEXTS["en1"], "alice", who="alice")
        registered(srv, "bo-1", TEXTS["en2"], "bob", who="bob")
        call(srv, "POST", doc_path("al-1", "/revoke"), {"reason": "by alice"}, "alice")
        call(srv, "POST", doc_path("al-1", "/restore"), None, "op")
        call(srv, "PATCH", doc_path("bo-1", "/policy"), {"reprint": "forbid"}, "bob")

        def entries(who, query=""):
            status, body = call(srv, "GET", "/audit" + query, None, who)
            check(status == 200, "%s: %s %r", who, status, body)
            return [(e["document"], e["action"], e["client"]) for e in body["entries"]]

        status, body = call(srv, "GET", "/audit", None, None)
        refused(status, body, None, "anonymous audit")
        op = entries("op")
        check(("al-1", "revoke", "alice-app") in op and ("bo-1", "policy", "bob-app") in op and
              ("al-1", "restore", "op-app") in op, op)
        al = entries("alice")
        check(sorted(al) == sorted(e for e in op if e[0] == "al-1"), al)
        bo = entries("bob")
        check(("bo-1", "policy", "bob-app") in bo and all(e[0] == "bo-1" for e in bo), bo)
        check(entries("bob", "?document=al-1") == [], "bob reads alice's entries")
        # Paging through a filtered list: one entry a page, no other's entry.
        status, body = call(srv, "GET", "/audit?limit=1", None, "alice")
        check(status == 200 and len(body["entries"]) == 1 and body["next_cursor"], body)
        status, body = call(srv, "GET", "/audit?limit=1&cursor=" + quote(body["next_cursor"]),
                            None, "alice")
        check(status == 200 and [e["document"] for e in body["entries"]] == ["al-1"], body)


# ---- checks: the account and the detections ----

@T.test
def same_account_only_for_its_caller():
    """Audit F06: an anonymous check naming alice was judged her own
    re-post (original, publish) of her forbidden article."""
    with fresh() as srv:
        registered(srv, "c-1", TEXTS["en1"], "alice", who="alice", reprint="forbid")
        for who in (None, "bob"):
            status, body = call(srv, "POST", "/check-original",
                                {"account": "alice", "text": TEXTS["en1"]}, who)
            check(status == 200, body)
            check(not body["original"] and body["action"] == "block", "%s: %r", who, body)
            check(body["matches"][0]["same_account"] is False, body)
        for who in ("alice", "op"):
            status, body = call(srv, "POST", "/check-original",
                                {"account": "alice", "text": TEXTS["en1"]}, who)
            check(body["original"] and body["action"] == "publish", "%s: %r", who, body)
            check(body["matches"][0]["same_account"] is True, body)


@T.test
def detections_only_for_who_may_act():
    """Audit F02: an anonymous check with an id wrote a durable detection
    with any account."""
    with fresh() as srv:
        registered(srv, "orig", TEXTS["en1"], "alice", who="alice")
        copy = TEXTS["en1"]
        cases = ((None, "anon-1", "bob", False, None),
                 (None, "anon-2", None, False, None),
                 ("alice", "al-x", "bob", False, None),   # alice does not act for bob
                 ("multi", "mu-1", None, False, None),    # several accounts, none named
                 ("bob", "bob-1", "bob", True, "bob"),
                 ("bob", "bob-2", None, True, "bob"),     # its one account
                 ("multi", "mu-2", "carol", True, "carol"),
                 ("op", "op-1", "zed", True, "zed"),
                 ("op", "op-2", None, True, None))
        for who, cid, account, recorded, stored in cases:
            req = {"id": cid, "text": copy}
            if account:
                req["account"] = account
            status, body = call(srv, "POST", "/check-original", req, who)
            check(status == 200 and not body["original"], "%s: %s %r", cid, status, body)
            check(body["recorded"] is recorded and body["registered"] is False,
                  "%s: %r", cid, body)
        got = {c["id"]: c.get("account") for c in copies(srv, "orig")}
        want = {cid: stored for who, cid, account, recorded, stored in cases if recorded}
        check(got == want, "copies %r, wanted %r", got, want)
        # An original check with an id records nothing, for anyone.
        status, body = call(srv, "POST", "/check-original", {"id": "new", "text": TEXTS["en2"]},
                            "op")
        check(body["original"] and body["recorded"] is False, body)


@T.test
def anonymous_detections_with_legacy_tokens():
    """The same with a token file without roles (today's files): an
    anonymous check with an id records nothing; a token records."""
    with fresh(token_file=LEGACY_FILE, in_memory=False) as srv:
        registered(srv, "orig", TEXTS["en1"], "alice", who="alice")
        status, body = call(srv, "POST", "/check-original",
                            {"id": "x-1", "account": "victim", "text": TEXTS["en1"]})
        check(status == 200 and not body["original"], body)
        check(body.get("recorded") is False, "anonymous detection: %r", body)
        status, body = call(srv, "POST", "/check-original",
                            {"id": "x-2", "account": "bob", "text": TEXTS["en1"]}, "bob")
        check(body.get("recorded") is True, body)
        check([c["id"] for c in copies(srv, "orig")] == ["x-2"], copies(srv, "orig"))


# ---- clients: named tokens without a role (the F06 repro's token file) ----

CLIENT_TOKENS = {"alice-cms": "tokenAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
                 "bob-cms": "tokenBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB",
                 "ops": "tokenOOOOOOOOOOOOOOOOOOOOOOOOOOOOOOOO",
                 "alice-acct": "tokenCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCC"}
CLIENT_FILE = write_file("clients", ["alice-cms " + CLIENT_TOKENS["alice-cms"],
                                     "bob-cms " + CLIENT_TOKENS["bob-cms"],
                                     "ops %s operator" % CLIENT_TOKENS["ops"],
                                     "alice-acct %s accounts=alice" % CLIENT_TOKENS["alice-acct"]])


def ccall(srv, method, path, obj=None, who=None):
    h = {"Authorization": "Bearer " + CLIENT_TOKENS[who]} if who else {}
    return srv.json(method, path, obj, headers=h)


def cforbidden(status, body, what):
    err = expect_error(status, body, 403, "forbidden")
    check(not any(t in json.dumps(body) for t in CLIENT_TOKENS.values()), "%s: a token", what)
    return err


def clients_own_their_documents(in_memory):
    """Audit F06 with its own token file (alice-cms, bob-cms: no role):
    bob-cms replaced alice's policy, revoked her claim and read every
    client's audit entries, because a line without a role was an
    operator."""
    with fresh(token_file=CLIENT_FILE, in_memory=in_memory) as srv:
        def reg(doc, text, who, account="alice", **extra):
            req = dict({"id": doc, "text": text, "register": True, "account": account}, **extra)
            status, body = ccall(srv, "POST", "/check-original", req, who)
            check(status == 200 and body["registered"], "%s by %s: %s %r", doc, who, status, body)

        def audit(who, query=""):
            status, body = ccall(srv, "GET", "/audit" + query, None, who)
            check(status == 200, "audit as %s: %s %r", who, status, body)
            return [(e["document"], e["action"], e["client"]) for e in body["entries"]]

        def bob_refused(phase):
            evil = {"reprint": "allow",
                    "whitelist": [{"account": "mallory", "may_hide_source": True,
                                   "may_modify": True}]}
            for method, path, obj in (("PUT", doc_path("a-1", "/policy"), evil),
                                      ("PATCH", doc_path("a-1", "/policy"), {"reprint": "allow"}),
                                      ("POST", doc_path("a-1", "/revoke"), {"reason": "x"}),
                                      ("POST", doc_path("a-1", "/restore"), None),
                                      ("DELETE", doc_path("a-1"), None),
                                      ("POST", "/check-original",
                                       {"id": "a-1", "text": TEXTS["en1"], "register": True,
                                        "account": "bob", "meta": {"title": "bob's"}})):
                status, body = ccall(srv, method, path, obj, "bob-cms")
                err = cforbidden(status, body, "%s %s" % (method, path))
                check("bob-cms" in err["message"] and err.get("id") == "a-1",
                      "%s: %s %s: %r" % (phase, method, path, err))
            status, doc = get_doc(srv, "a-1")
            check(status == 200 and doc["policy"]["reprint"] == "forbid" and
                  doc["policy"]["whitelist"] == [] and doc["status"] == "active" and
                  not doc.get("meta"),
                  "%s: a-1 changed by bob-cms: %r", phase, doc)
            check(audit("bob-cms") == [e for e in audit("bob-cms") if e[2] == "bob-cms" or
                                       e[0] == "b-1"], "%s: bob-cms reads others' entries" % phase)
            check(audit("bob-cms", "?document=a-1") == [], "%s: bob-cms reads a-1's entries" % phase)

        reg("a-1", TEXTS["en1"], "alice-cms", reprint="forbid")
        reg("a-2", TEXTS["en2"], "alice-cms")
        reg("b-1", TEXTS["en3"], "bob-cms", account="bob")
        status, body = ccall(srv, "PATCH", doc_path("a-2", "/policy"), {"reprint": "forbid"},
                             "alice-cms")
        check(status == 200 and body["reprint"] == "forbid", "alice-cms: %s %r", status, body)
        status, _ = ccall(srv, "PATCH", doc_path("b-1", "/policy"), {"reprint": "forbid"},
                          "bob-cms")
        check(status == 200, "bob-cms on his own document: %s", status)
        bob_refused("first")
        check(audit("bob-cms") == [("b-1", "policy", "bob-cms"), ("b-1", "register", "bob-cms")],
              audit("bob-cms"))
        check(audit("alice-cms") == [("a-2", "policy", "alice-cms"),
                                     ("a-2", "register", "alice-cms"),
                                     ("a-1", "register", "alice-cms")], audit("alice-cms"))
        # alice-cms revokes and restores its own; an explicit operator
        # line changes it; so does a token of its account. The client
        # stays with the record through those rewrites.
        for sub in ("revoke", "restore"):
            status, body = ccall(srv, "POST", doc_path("a-1", "/" + sub), {"reason": "x"},
                                 "alice-cms")
            check(status == 200, "alice-cms %s: %s %r", sub, status, body)
        status, _ = ccall(srv, "PATCH", doc_path("a-1", "/policy"), {"reprint": "allow"}, "ops")
        check(status == 200, "operator PATCH: %s", status)
        status, _ = ccall(srv, "PATCH", doc_path("a-1", "/policy"), {"reprint": "forbid"},
                          "alice-acct")
        check(status == 200, "account token PATCH: %s", status)
        al = audit("alice-cms")
        check(("a-1", "policy", "ops") in al and ("a-1", "revoke", "alice-cms") in al and
              ("a-1", "policy", "alice-acct") in al and all(e[0] != "b-1" for e in al), al)
        check(("b-1", "policy", "bob-cms") in audit("ops"), audit("ops"))
        # A client names any account in a check (the platform vouches for
        # its authors), records its detection; reads no admin call.
        status, body = ccall(srv, "POST", "/check-original",
                             {"account": "alice", "text": TEXTS["en1"]}, "bob-cms")
        check(status == 200 and body["matches"][0]["same_account"] is True, body)
        status, body = ccall(srv, "POST", "/check-original",
                             {"id": "copy-1", "account": "carol", "text": TEXTS["en1"]}, "bob-cms")
        check(status == 200 and not body["original"] and body["recorded"] is True, body)
        status, body = ccall(srv, "GET", "/replica", None, "alice-cms")
        cforbidden(status, body, "replica as a client")
        # A client imports; what it imports is its own.
        line = json.dumps({"id": "imp-1", "text": TEXTS["en4"], "account": "alice",
                           "registered_at": "2020-01-02T03:04:05Z"}) + "\n"
        status, _, data = srv.request("POST", "/import", line.encode(),
                                      {"Authorization": "Bearer " + CLIENT_TOKENS["alice-cms"],
                                       "Content-Type": "application/x-ndjson"})
        check(status == 200 and json.loads(data)["summary"]["imported"] == 1, "%s %s", status,
              data[:300])
        status, body = ccall(srv, "POST", doc_path("imp-1", "/revoke"), {"reason": "x"}, "bob-cms")
        cforbidden(status, body, "bob-cms revokes an import of alice-cms")
        if not in_memory:
            srv.restart()  # ownership is read from the store: it holds after a restart
        bob_refused("after a restart" if not in_memory else "again")
        status, body = ccall(srv, "POST", doc_path("imp-1", "/revoke"), {"reason": "x"}, "bob-cms")
        cforbidden(status, body, "bob-cms revokes an import of alice-cms")
        for who, reprint in (("alice-cms", "allow"), ("ops", "forbid")):
            status, body = ccall(srv, "PATCH", doc_path("a-1", "/policy"), {"reprint": reprint},
                                 who)
            check(status == 200 and body["reprint"] == reprint, "%s: %s %r", who, status, body)
        status, body = ccall(srv, "POST", doc_path("imp-1", "/revoke"), {"reason": "x"},
                             "alice-cms")
        check(status == 200, "alice-cms revokes its import: %s %r", status, body)
        # alice-cms may re-register its id (same text and account) and delete it.
        status, body = ccall(srv, "POST", "/check-original",
                             {"id": "a-1", "text": TEXTS["en1"], "register": True,
                              "account": "alice"}, "alice-cms")
        check(status == 200 and body["registered"], body)
        status, body = ccall(srv, "DELETE", doc_path("a-1"), None, "alice-cms")
        check(status == 200 and body.get("deleted") is True, "alice-cms DELETE: %s %r", status,
              body)
        check(get_doc(srv, "a-1")[0] == 404, "a-1 still there")


@T.test
def clients_own_their_documents_lmdb():
    clients_own_their_documents(False)


@T.test
def clients_own_their_documents_memory():
    clients_own_their_documents(True)


@T.test
def clients_own_their_documents_on_replicas():
    """The registering client travels with the replication change: on the
    node that did not take the registration, and after a policy change
    made there (which rewrites the record on both), only alice-cms (or an
    operator) changes alice-cms's document; the same after that node
    restarts. Skipped without nats-server."""
    import shutil
    if shutil.which("nats-server") is None:
        print("  skipped: nats-server not installed")
        return
    from cluster import ReplicaCluster
    with ReplicaCluster(n=2, haproxy=False, node_extra=["--token-file", CLIENT_FILE, "--stream-replicas", "2"],
                        tmp_prefix="neardup-authz-replicas-") as cl:
        a, b = cl.nodes
        status, body = ccall(a, "POST", "/check-original",
                             {"id": "r-1", "text": TEXTS["en1"], "register": True,
                              "account": "alice"}, "alice-cms")
        check(status == 200 and body["registered"], "%s %r", status, body)
        status, _ = ccall(b, "GET", doc_path("r-1") + "?consistency=latest")
        check(status == 200, "r-1 not on the other node: %s", status)

        def owner_only(node, phase, reprint):
            status, body = ccall(node, "PATCH", doc_path("r-1", "/policy"),
                                 {"reprint": "allow"}, "bob-cms")
            cforbidden(status, body, "%s: bob-cms" % phase)
            status, body = ccall(node, "POST", doc_path("r-1", "/revoke"), {"reason": "x"},
                                 "bob-cms")
            cforbidden(status, body, "%s: bob-cms revokes" % phase)
            status, body = ccall(node, "PATCH", doc_path("r-1", "/policy"),
                                 {"reprint": reprint}, "alice-cms")
            check(status == 200 and body["reprint"] == reprint, "%s: alice-cms: %s %r", phase,
                  status, body)

        owner_only(b, "the other node", "forbid")
        # The change made on b rewrote the record on a too: the client stayed.
        status, doc = ccall(a, "GET", doc_path("r-1") + "?consistency=latest")
        check(status == 200 and doc["policy"]["reprint"] == "forbid", doc)
        owner_only(a, "the registering node after an amendment elsewhere", "allow")
        cl.restart_node(1)
        owner_only(cl.nodes[1], "the other node after a restart", "forbid")
        status, _ = ccall(cl.nodes[1], "PATCH", doc_path("r-1", "/policy"), {"reprint": "allow"},
                          "ops")
        check(status == 200, "operator on a replica: %s", status)


# ---- admin calls ----

@T.test
def admin_calls_for_operators():
    line = json.dumps({"id": "imp-1", "text": TEXTS["en3"], "account": "alice",
                       "registered_at": "2020-01-02T03:04:05Z"}) + "\n"
    with fresh() as srv:
        for who in ("alice", "bob", None):
            status, _, data = srv.request("POST", "/import", line.encode(),
                                          dict(hdr(who), **{"Content-Type":
                                                            "application/x-ndjson"}))
            refused(status, json.loads(data), who, "import as %s" % who)
            status, body = call(srv, "GET", "/replica", None, who)
            refused(status, body, who, "replica as %s" % who)
        check(get_doc(srv, "imp-1")[0] == 404, "imported by a refused request")
        status, _, data = srv.request("POST", "/import", line.encode(),
                                      dict(hdr("op"), **{"Content-Type": "application/x-ndjson"}))
        check(status == 200, "%s %s", status, data[:300])
        check(get_doc(srv, "imp-1")[1]["account"] == "alice", get_doc(srv, "imp-1"))
        status, body = call(srv, "GET", "/replica", None, "op")
        check(status == 200 and "digest" in body, "op: %s %r", status, body)
        # A client (a line without a role) imports, but reads no admin call.
        status, body = call(srv, "GET", "/replica", None, "legacy")
        err = refused(status, body, "legacy", "replica as a client")
        check("a client" in err["message"], err)


@T.test
def open_without_tokens():
    """No token configured: every caller is an operator, as before."""
    with Server(in_memory=True) as srv:
        registered(srv, "o-1", TEXTS["en1"], "alice", who=None)
        status, body = call(srv, "POST", "/check-original",
                            {"id": "c-1", "account": "alice", "text": TEXTS["en1"]})
        check(body["original"] and body["matches"][0]["same_account"] is True, body)
        status, body = call(srv, "POST", "/check-original",
                            {"id": "c-2", "account": "bob", "text": TEXTS["en1"]})
        check(body["recorded"] is True, body)
        for method, path, obj in (("PATCH", doc_path("o-1", "/policy"), {"reprint": "forbid"}),
                                  ("POST", doc_path("o-1", "/revoke"), None),
                                  ("GET", "/audit", None), ("GET", "/replica", None),
                                  ("DELETE", doc_path("o-1"), None)):
            status, body = call(srv, method, path, obj)
            check(status == 200, "%s %s: %s %r", method, path, status, body)


# ---- retention of detections ----

def flood_keeps_other_accounts(in_memory):
    """Audit F02: at --copies-max the globally oldest detection was dropped,
    so one caller's flood evicted every other account's copy."""
    with fresh(["--copies-max", "4"], token_file=LEGACY_FILE, in_memory=in_memory) as srv:
        registered(srv, "orig", TEXTS["en2"], "alice")
        for cid, account in (("genuine", "bob"), ("carol-1", "carol")):
            status, body = call(srv, "POST", "/check-original",
                                {"id": cid, "account": account, "text": TEXTS["en2"]}, "op")
            check(status == 200 and body.get("recorded") is not False, body)
        for i in range(12):
            status, body = call(srv, "POST", "/check-original",
                                {"id": "flood-%d" % i, "account": "mallory",
                                 "text": TEXTS["en2"]}, "op")
            check(status == 200 and body.get("recorded") is not False, body)
        got = [c["id"] for c in copies(srv, "orig")]
        check(got == ["flood-11", "flood-10", "carol-1", "genuine"], "copies %r", got)
        # Then the biggest account is bob's own once it floods: its oldest goes.
        for i in range(3):
            call(srv, "POST", "/check-original",
                 {"id": "bob-%d" % i, "account": "bob", "text": TEXTS["en2"]}, "op")
        got = [c["id"] for c in copies(srv, "orig")]
        check(len(got) == 4 and "carol-1" in got and "bob-2" in got, "copies %r", got)
        if not in_memory:  # the same after a restart
            srv.restart()
            check([c["id"] for c in copies(srv, "orig")] == got, copies(srv, "orig"))


@T.test
def flood_keeps_other_accounts_lmdb():
    flood_keeps_other_accounts(False)


@T.test
def flood_keeps_other_accounts_memory():
    flood_keeps_other_accounts(True)


if __name__ == "__main__":
    T.run()
