"""The journals next to the records, end to end (LMDB and --in-memory):
a DELETE, a registration and a POST /import each leave an audit entry
naming their client, written with the change (audit F07); a deleted
original's detections go with it, so a document later given its time
(an import line) lists none (F16); walking an original's copies while
clients retry their checks lists every copy once, each at the time it
was first detected (F13); GET /audit?document= reads the log's index by
document, and --audit-max-entries / NEARDUP_AUDIT_MAX_ENTRIES trims the
oldest entries (F14)."""

import http.client
import json
import os
import random
import sys
import tempfile
import threading
from urllib.parse import quote

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import RFC3339_US, Runner, Server, check, load_texts  # noqa: E402

T = Runner("test_journals")
TEXTS = load_texts()
TMP = tempfile.mkdtemp(prefix="neardup-journals-")
TOKENS = {"alice-cms": "alice-token-0123456789abcdef", "bob-cms": "bob-token-fedcba9876543210"}
TOKEN_FILE = os.path.join(TMP, "tokens")
with open(TOKEN_FILE, "w") as f:
    # alice-cms is a client (owns what it registers), bob-cms an operator
    # (deletes anyone's documents, records detections for any account).
    f.write("alice-cms %s\nbob-cms %s operator\n" % (TOKENS["alice-cms"], TOKENS["bob-cms"]))
os.chmod(TOKEN_FILE, 0o600)


def auth(name="alice-cms"):
    return {"Authorization": "Bearer " + TOKENS[name]}


def path(doc, sub=""):
    return "/documents/" + quote(doc, safe="") + sub


def register(srv, doc, text, account, client="alice-cms"):
    status, body = srv.json("POST", "/check-original",
                            {"id": doc, "text": text, "account": account, "register": True},
                            headers=auth(client))
    check(status == 200 and body["registered"] and body["original"], "%s: %s %r", doc, status, body)
    return body


def audit(srv, query=""):
    """A page of the log, read by the operator (who sees every entry)."""
    status, body = srv.json("GET", "/audit" + query, headers=auth("bob-cms"))
    check(status == 200, "audit: %s %r", status, body)
    return body


def audit_all(srv, query="", limit=100):
    """Every entry, page by page (newest first)."""
    out, cursor = [], None
    sep = "&" if query else "?"
    for _ in range(10000):
        q = query + sep + "limit=%d" % limit + ("&cursor=" + cursor if cursor else "")
        body = audit(srv, q)
        out += body["entries"]
        cursor = body["next_cursor"]
        if cursor is None:
            return out
    raise AssertionError("the audit log does not end")


def copies_walk(srv, doc, limit, pause=0.0):
    seen, cursor = [], None
    for _ in range(100000):
        q = "/copies?limit=%d" % limit + ("&cursor=" + cursor if cursor else "")
        status, body = srv.json("GET", path(doc, q))
        check(status == 200, "copies: %s %r", status, body)
        seen += body["copies"]
        cursor = body["next_cursor"]
        if cursor is None:
            return seen
        if pause:
            threading.Event().wait(pause)
    raise AssertionError("the copies do not end")


def both_stores(fn):
    """Runs fn(srv) on an LMDB server and on an --in-memory one."""
    def run(_srv):
        for in_memory in (False, True):
            with Server(["--token-file", TOKEN_FILE], in_memory=in_memory) as srv:
                fn(srv, in_memory)
    run.__name__ = fn.__name__
    return T.test(run)


@both_stores
def delete_registration_import_are_audited(srv, in_memory):
    """audit F07: bob-cms (an operator) deletes alice's original; the log names him, the
    document's account and registered_at, next to alice's registration."""
    reg = register(srv, "A", TEXTS["en1"], "alice")
    status, body = srv.json("DELETE", path("A"), headers=auth("bob-cms"))
    check(status == 200, "%s %r", status, body)
    entries = audit(srv, "?document=A")["entries"]
    got = [(e["action"], e["client"]) for e in entries]
    check(got == [("delete", "bob-cms"), ("register", "alice-cms")], "%r", entries)
    for e in entries:
        check(e["document"] == "A" and RFC3339_US.match(e["at"]), e)
        check(e["detail"] == {"account": "alice", "registered_at": reg["registered_at"]}, e)
    check(entries[0]["at"] > entries[1]["at"], entries)
    # The unfiltered log holds them too.
    check([e["action"] for e in audit(srv)["entries"]] == ["delete", "register"])
    # A deletion of nothing writes nothing.
    status, _ = srv.json("DELETE", path("A"), headers=auth("bob-cms"))
    check(status == 404)
    check(len(audit(srv)["entries"]) == 2, "an entry for a 404")
    # One entry per import run, with its counts; none per line.
    lines = "".join(json.dumps({"id": "imp-%d" % i, "account": "carol",
                                "text": TEXTS[k]}) + "\n"
                    for i, k in enumerate(("en2", "en3")))
    status, body = srv.json("POST", "/import", raw=lines.encode(),
                            headers=dict(auth("bob-cms"),
                                         **{"Content-Type": "application/x-ndjson"}))
    check(status == 200, "import: %s %r", status, body)
    entries = audit(srv)["entries"]
    check(entries[0]["action"] == "import" and entries[0]["client"] == "bob-cms", entries[0])
    check("document" not in entries[0], entries[0])
    summary = entries[0]["detail"]["summary"]
    check(summary["lines"] == 2 and summary["imported"] == 2 and summary["complete"], summary)
    check(len(entries) == 3, "an entry per imported line: %r", entries)
    check(audit(srv, "?document=imp-0")["entries"] == [], "an import line's own entry")
    if not in_memory:
        srv.restart()
        check([e["action"] for e in audit(srv)["entries"]] == ["import", "delete", "register"])


@both_stores
def deleted_originals_detections_go_with_it(srv, _in_memory):
    """audit F16: an import line given a deleted original's time lists
    none of its copies."""
    body = register(srv, "X", TEXTS["en1"], "alice")
    at = body["registered_at"]
    status, body = srv.json("POST", "/check-original", {"id": "copy-of-X", "text": TEXTS["en1"],
                                                         "account": "bob"},
                            headers=auth("bob-cms"))
    check(status == 200 and not body["original"], body)
    status, body = srv.json("GET", path("X", "/copies"))
    check([c["id"] for c in body["copies"]] == ["copy-of-X"], body)
    status, _ = srv.json("DELETE", path("X"), headers=auth())
    check(status == 200)
    line = json.dumps({"id": "Y", "account": "carol", "text": TEXTS["en2"],
                       "registered_at": at}) + "\n"
    status, body = srv.json("POST", "/import", raw=line.encode(),
                            headers=dict(auth(), **{"Content-Type": "application/x-ndjson"}))
    check(status == 200, "import: %s %r", status, body)
    status, body = srv.json("GET", path("Y"))
    check(status == 200 and body["registered_at"] == at, "Y not at X's time: %r", body)
    status, body = srv.json("GET", path("Y", "/copies"))
    check(status == 200 and body["copies"] == [], "Y lists X's copies: %r", body)


@T.test
def copies_walk_during_retries_lists_all(_srv):
    """audit F13: clients retry their checks while a walk pages through the
    copies: every copy is listed once, at the time first detected."""
    n = 600
    with Server(["--token-file", TOKEN_FILE]) as srv:
        original = TEXTS["en3"]
        register(srv, "orig", original, "alice")
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)

        def send(c, cid):
            c.request("POST", "/check-original", body=json.dumps({"id": cid, "text": original}),
                      headers=dict(auth("bob-cms"), **{"Content-Type": "application/json"}))
            r = c.getresponse()
            r.read()
            check(r.status == 200, "check %s: %s", cid, r.status)

        for i in range(n):
            send(conn, "copy-%04d" % i)
        conn.close()
        first = {c["id"]: c["detected_at"] for c in copies_walk(srv, "orig", 100)}
        check(len(first) == n, len(first))
        stop, errors, retries = threading.Event(), [], [0]

        def retry():
            c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
            rnd = random.Random(7)
            try:
                while not stop.is_set():
                    send(c, "copy-%04d" % rnd.randrange(n))
                    retries[0] += 1
            except Exception as e:  # reported below
                errors.append(e)
            finally:
                c.close()

        th = threading.Thread(target=retry)
        th.start()
        try:
            walked = copies_walk(srv, "orig", 20, pause=0.01)
        finally:
            stop.set()
            th.join(60)
        check(not errors, errors)
        ids = [c["id"] for c in walked]
        check(retries[0] > 50, "only %d retries during the walk", retries[0])
        check(len(ids) == n and len(set(ids)) == n,
              "one walk during %d retries listed %d entries, %d of the %d copies",
              retries[0], len(ids), len(set(ids)), n)
        after = {c["id"]: c["detected_at"] for c in copies_walk(srv, "orig", 100)}
        check(after == first, "a retry moved a detection")


@T.test
def audit_by_document_and_retention(_srv):
    """audit F14: the filtered read answers from the index (the entries of
    one document among many others'), and the count bound trims the
    oldest: by flag, and by its NEARDUP_ variable."""
    for args, env in ((["--audit-max-entries", "40"], None),
                      ([], {"NEARDUP_AUDIT_MAX_ENTRIES": "40"})):
        with Server(["--token-file", TOKEN_FILE] + args, env=env) as srv:
            register(srv, "busy", TEXTS["en1"], "alice")
            register(srv, "rare", TEXTS["en2"], "alice")
            for i in range(30):
                srv.json("POST", path("busy", "/revoke" if i % 2 == 0 else "/restore"), {},
                         headers=auth())
            srv.json("POST", path("rare", "/revoke"), {"reason": "r1"}, headers=auth())
            for i in range(30):
                srv.json("POST", path("busy", "/revoke" if i % 2 == 0 else "/restore"), {},
                         headers=auth())
            everything = audit_all(srv, limit=7)
            check(len(everything) == 40, "%d entries kept (bound 40)", len(everything))
            rare = audit_all(srv, "?document=rare", limit=1)
            check([(e["action"], e["detail"].get("reason")) for e in rare] == [("revoke", "r1")],
                  "rare: %r", rare)  # its registration was trimmed
            busy = audit_all(srv, "?document=busy", limit=5)
            check(len(busy) == 39 and all(e["document"] == "busy" for e in busy), len(busy))
            ats = [e["at"] for e in busy]
            check(ats == sorted(ats, reverse=True) and len(set(ats)) == len(ats), "order")
            check(audit(srv, "?document=nothing")["entries"] == [])


def main():
    T.run(None)


if __name__ == "__main__":
    main()
