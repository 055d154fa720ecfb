"""No silent drops: registering an id again with its
text but another account (or none where there was one), or a meta other
than the document's, is 409 id_conflict naming the field that differs
(account, meta; another text names text), and the document stays as it
was; the same account again, with the same meta (members in another order
too) or none, is the idempotent 200 of the first time. The same for each line of POST /import (a refused line with
its code, the rest go on), and on a replicated node (NATS JetStream, two
nodes): a re-registration there is decided the same way, whether or not
the node applied the first one yet. A check without register changes
nothing and answers as before."""

import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Runner, Server, check, expect_error, load_texts  # noqa: E402

T = Runner("test_reregister")
TEXTS = load_texts()
TMP = tempfile.mkdtemp(prefix="neardup-reregister-")
TOKEN = "reregister-operator-0123456789abcdef"
TOKEN_FILE = os.path.join(TMP, "tokens")
with open(TOKEN_FILE, "w") as f:
    f.write("op %s operator\n" % TOKEN)
os.chmod(TOKEN_FILE, 0o600)
AUTH = {"Authorization": "Bearer " + TOKEN}
META = {"title": "Morning", "n": 1}


def register(srv, doc, text, account=None, meta=None, register=True):
    req = {"id": doc, "text": text, "register": register}
    if account is not None:
        req["account"] = account
    if meta is not None:
        req["meta"] = meta
    return srv.json("POST", "/check-original", req, headers=AUTH)


def conflict(srv, field, doc, text, **kw):
    status, body = register(srv, doc, text, **kw)
    err = expect_error(status, body, 409, "id_conflict", field)
    check(err.get("id") == doc, "the error names the id: %r", err)
    check(field in err["message"], "the message says what differs: %r", err)


def stored(srv, doc, query=""):
    status, body = srv.json("GET", "/documents/" + doc + query, headers=AUTH)
    check(status == 200, "GET %s: %s %r", doc, status, body)
    return body


def the_first_registration_stays(srv, doc, text, query=""):
    """doc registered by alice with META: every other account or meta is
    409, the same again 200."""
    for kw, field in (({"account": "bob", "meta": META}, "account"),
                      ({"meta": META}, "account"),  # no account where alice was
                      ({"account": "alice", "meta": {"title": "Evening", "n": 1}}, "meta"),
                      ({"account": "alice", "meta": {"title": "Morning", "n": 1.5}}, "meta"),
                      ({"account": "alice", "meta": {}}, "meta"),  # META cleared
                      ({"account": "alice", "meta": META}, "text")):
        conflict(srv, field, doc, text if field != "text" else TEXTS["en2"], **kw)
    d = stored(srv, doc, query)
    check(d["account"] == "alice" and d["meta"] == META, "the document changed: %r", d)
    # The same members in any order, or no meta (a retry that brings none).
    for meta in (META, {"n": 1, "title": "Morning"}, None):
        status, body = register(srv, doc, text, account="alice", meta=meta)
        check(status == 200 and body["registered"], "the same again: %s %r", status, body)


@T.test
def a_check_and_an_import():
    with Server(["--token-file", TOKEN_FILE]) as srv:
        status, body = register(srv, "a-1", TEXTS["en1"], account="alice", meta=META)
        check(status == 200 and body["registered"], "%s %r", status, body)
        the_first_registration_stays(srv, "a-1", TEXTS["en1"])
        # Without an account or meta, registered so: the same again is 200.
        status, body = register(srv, "a-2", TEXTS["zh1"])
        check(status == 200 and body["registered"], "%s %r", status, body)
        status, body = register(srv, "a-2", TEXTS["zh1"], meta={})
        check(status == 200 and body["registered"], "an empty meta is none: %s %r", status, body)
        conflict(srv, "account", "a-2", TEXTS["zh1"], account="carol")
        conflict(srv, "meta", "a-2", TEXTS["zh1"], meta={"x": 1})
        # A check that does not register changes nothing: answered as before.
        status, body = register(srv, "a-1", TEXTS["en1"], account="bob", register=False)
        check(status == 200 and body["registered"], "a check: %s %r", status, body)
        # POST /import: each line decided the same way.
        lines = [{"id": "a-1", "text": TEXTS["en1"], "account": "alice"},
                 {"id": "a-1", "text": TEXTS["en1"], "account": "bob", "meta": META},
                 {"id": "a-1", "text": TEXTS["en1"], "account": "alice", "meta": {"n": 2}},
                 {"id": "a-2", "text": TEXTS["zh1"], "account": "carol"},
                 {"id": "a-2", "text": TEXTS["zh1"]},
                 {"id": "a-3", "text": TEXTS["zh2"], "account": "carol"}]
        raw = "".join(json.dumps(x) + "\n" for x in lines).encode()
        status, body = srv.json("POST", "/import", raw=raw,
                                headers=dict(AUTH, **{"Content-Type": "application/x-ndjson"}))
        check(status == 200, "import: %s %r", status, body)
        s = body["summary"]
        check((s["existing"], s["errors"], s["imported"]) == (2, 3, 1), "summary %r", s)
        errs = {e["line"]: e for e in body["events"] if "error" in e or "code" in e}
        got = {n: (e.get("error") or e)["code"] for n, e in errs.items()}
        check(got == {2: "id_conflict", 3: "id_conflict", 4: "id_conflict"}, "events %r",
              body["events"])
        msgs = {n: (e.get("error") or e)["message"] for n, e in errs.items()}
        check("account" in msgs[2] and "meta" in msgs[3] and "account" in msgs[4], "%r", msgs)
        d = stored(srv, "a-1")
        check(d["account"] == "alice" and d["meta"] == META, "after the import: %r", d)


@T.test
def on_a_replicated_node():
    if shutil.which("nats-server") is None:
        print("  skipped: nats-server not installed")
        return
    from cluster import ReplicaCluster
    with ReplicaCluster(n=2, haproxy=False, tmp_prefix="neardup-reregister-replicas-",
                        node_extra=["--token-file", TOKEN_FILE, "--stream-replicas", "2"]) as cl:
        a, b = cl.nodes
        status, body = register(a, "r-1", TEXTS["en1"], account="alice", meta=META)
        check(status == 200 and body["registered"], "%s %r", status, body)
        # On the other node at once (it may not have applied r-1 yet: the
        # registration is then decided on the stream's latest state).
        conflict(b, "account", "r-1", TEXTS["en1"], account="bob", meta=META)
        the_first_registration_stays(b, "r-1", TEXTS["en1"], "?consistency=latest")
        the_first_registration_stays(a, "r-1", TEXTS["en1"], "?consistency=latest")


if __name__ == "__main__":
    T.run()
