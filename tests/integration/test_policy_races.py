"""Changes of a claim decided on the document as it is when the change is
made, against the real neardupd (LMDB, a named token):

- concurrent PATCHes of a policy's different fields both survive, and every
  audit entry's "previous" is the policy that change replaced (audit F08);
- a policy of any size the API accepts (up to 64 KiB as compact JSON) can
  be changed afterwards: the audit entry keeps a policy too large for it as
  its size and digest instead of failing the change (audit F11);
- a restore lists the documents it now predates: the active originals of
  other accounts registered while it was revoked that are near-duplicates
  of it; they stay registered, become "superseded" (by the restored claim,
  in the same change, across a restart too), and checks of their text name
  the restored claim as the source again; a superseded claim is restored
  explicitly, audited; revoking the restored claim again leaves them
  superseded (audit F12);
- on replicas (3 NATS servers, 3 nodes; skipped without nats-server),
  PATCHes of different fields sent at once to two nodes both survive on
  every node, and every node's audit entries chain the same way; a
  restore supersedes the same documents on every node."""

import json
import os
import shutil
import sys
import tempfile
import threading
from urllib.parse import quote

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Runner, Server, check, edit, expect_error, load_texts  # noqa: E402

T = Runner("test_policy_races")
TEXTS = load_texts()
TMP = tempfile.mkdtemp(prefix="neardup-policy-races-")
TOKEN = "cms-token-0123456789abcdef0123"
TOKEN_FILE = os.path.join(TMP, "tokens")
with open(TOKEN_FILE, "w") as f:
    f.write("cms %s\n" % TOKEN)
os.chmod(TOKEN_FILE, 0o600)
AUTH = {"Authorization": "Bearer " + TOKEN}
POLICY_MAX = 65536  # bytes of a policy as compact JSON


def fresh(args=()):
    return Server(["--token-file", TOKEN_FILE] + list(args), threads=4)


def path(doc, sub=""):
    return "/documents/" + quote(doc, safe="") + sub


def register(srv, doc, text, account, **extra):
    req = {"id": doc, "text": text, "account": account, "register": True}
    req.update(extra)
    status, body = srv.json("POST", "/check-original", req, headers=AUTH)
    check(status == 200 and body["registered"] and body["original"],
          "%s not registered as original: %s %r", doc, status, body)
    return body


def audit_entries(srv, doc):
    """Every audit entry of doc, oldest first."""
    out, cursor = [], None
    for _ in range(100):
        q = "?document=%s&limit=1000" % quote(doc, safe="")
        if cursor:
            q += "&cursor=" + quote(cursor, safe="")
        status, body = srv.json("GET", "/audit" + q, headers=AUTH)
        check(status == 200, "audit: %s %r", status, body)
        out.extend(body["entries"])
        cursor = body["next_cursor"]
        if not cursor:
            return list(reversed(out))
    raise AssertionError("audit paging does not end")


def compact(policy_answer):
    """The stored text of a policy as GET /documents answers it."""
    p = {}
    if policy_answer["explicit"]:
        p["reprint"] = policy_answer["reprint"]
    if policy_answer["whitelist"]:
        p["whitelist"] = policy_answer["whitelist"]
    return json.dumps(p, separators=(",", ":")) if p else None


def whitelist(n, width, tag="acct"):
    """n entries whose accounts are width characters long."""
    return [{"account": ("%s-%03d-" % (tag, i)).ljust(width, "z")} for i in range(n)]


# ---- concurrent PATCHes ----

@T.test
def concurrent_patches_keep_both_fields(srv):
    """Two PATCHes of different fields sent together, 100 rounds: after
    each, the policy has both (the rule of one, the whitelist of the other),
    and the audit entries chain: each one's "previous" is the policy the
    entry before it set."""
    register(srv, "doc", TEXTS["en3"], "alice")
    rounds, lost = 100, []
    conns = [srv.connect(), srv.connect()]
    for i in range(rounds):
        rule = "forbid" if i % 2 == 0 else "allow"
        acct = "acct-%d" % i
        bodies = [{"reprint": rule}, {"whitelist": [{"account": acct}]}]
        res = [None, None]
        gate = threading.Barrier(2, timeout=30)

        def send(k):
            gate.wait()
            res[k] = srv.json("PATCH", path("doc", "/policy"), bodies[k], headers=AUTH,
                              conn=conns[k])

        threads = [threading.Thread(target=send, args=(k,), daemon=True) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        check(not any(t.is_alive() for t in threads), "a PATCH hangs")
        check(res[0][0] == 200 and res[1][0] == 200, "round %d: %r", i, res)
        p = srv.json("GET", path("doc"))[1]["policy"]
        if p["reprint"] != rule or [w["account"] for w in p["whitelist"]] != [acct]:
            lost.append((i, p))
    for c in conns:
        c.close()
    check(not lost, "%d of %d rounds lost an acknowledged PATCH; first: round %d, policy %r",
          len(lost), rounds, lost[0][0] if lost else 0, lost[0][1] if lost else None)
    entries = [e for e in audit_entries(srv, "doc") if e["action"] == "policy"]
    check(len(entries) == 2 * rounds, "%d policy audit entries, wanted %d",
          len(entries), 2 * rounds)
    prev = None
    for n, e in enumerate(entries):
        check(e["detail"]["method"] == "PATCH", e)
        check(e["detail"]["previous"] == prev,
              "audit entry %d: previous %r, but the entry before set %r", n,
              e["detail"]["previous"], prev)
        prev = e["detail"]["policy"]
    final = srv.json("GET", path("doc"))[1]["policy"]
    check(compact(final) == json.dumps(prev, separators=(",", ":")), "%r != %r", final, prev)


# ---- policies of any accepted size ----

@T.test
def large_policies_stay_changeable(srv):
    """A 200-entry whitelist (about 35 KiB), then PATCH of its rule and a
    PUT of a like-sized one: 200 each (the audit entry of a change whose
    policies do not both fit gives the previous one as its size and
    digest). A policy just under the 64 KiB limit: accepted, and PATCH and
    PUT of it afterwards too; one over the limit: 400 naming the limit."""
    register(srv, "big", TEXTS["en4"], "alice")
    wl = whitelist(200, 160)
    status, body = srv.json("PUT", path("big", "/policy"), {"reprint": "allow", "whitelist": wl},
                            headers=AUTH)
    check(status == 200 and len(body["whitelist"]) == 200, "PUT 200 entries: %s", status)
    stored = compact(body)
    status, body = srv.json("PATCH", path("big", "/policy"), {"reprint": "forbid"}, headers=AUTH)
    check(status == 200 and body["reprint"] == "forbid" and len(body["whitelist"]) == 200,
          "PATCH {reprint: forbid} of a 200-entry whitelist: %s %r", status,
          body if status != 200 else "")
    e = audit_entries(srv, "big")[-1]["detail"]
    check(e["previous"].get("omitted") is True and e["previous"]["bytes"] == len(stored),
          "previous: %r", {k: v for k, v in e["previous"].items() if k != "whitelist"})
    check(len(e["previous"]["xxh3_128"]) == 32, e["previous"])
    check(e["policy"]["reprint"] == "forbid" and len(e["policy"]["whitelist"]) == 200,
          "the new policy in full when it fits")
    status, body = srv.json("PUT", path("big", "/policy"),
                            {"reprint": "forbid", "whitelist": wl[:150]}, headers=AUTH)
    check(status == 200 and len(body["whitelist"]) == 150, "PUT 150 entries: %s %r", status,
          body if status != 200 else "")
    # At the limit: 256 entries, 65535 bytes (65536 once PATCHed to forbid).
    wl = whitelist(256, 197, "max")

    def size_of(wl):
        return len(json.dumps({"reprint": "allow", "whitelist": [
            dict(w, may_modify=False, may_hide_source=False) for w in wl]},
            separators=(",", ":")))

    for w in wl:
        w["account"] += "y" * min(256 - len(w["account"]), POLICY_MAX - 1 - size_of(wl))
    size = size_of(wl)
    check(size == POLICY_MAX - 1, "test policy of %d bytes", size)
    status, body = srv.json("PUT", path("big", "/policy"), {"reprint": "allow", "whitelist": wl},
                            headers=AUTH)
    check(status == 200 and len(body["whitelist"]) == 256, "PUT of %d bytes: %s %r", size, status,
          body if status != 200 else "")
    status, body = srv.json("PATCH", path("big", "/policy"), {"reprint": "forbid"}, headers=AUTH)
    check(status == 200 and body["reprint"] == "forbid", "PATCH of %d bytes: %s %r", size + 1,
          status, body if status != 200 else "")
    e = audit_entries(srv, "big")[-1]["detail"]
    check(e["previous"]["omitted"] and e["policy"]["omitted"], "both digested: %r",
          {k: e[k] for k in ("method",)})
    check(e["policy"]["bytes"] == size + 1, e["policy"])
    status, body = srv.json("PUT", path("big", "/policy"), {"whitelist": wl[:10]}, headers=AUTH)
    check(status == 200 and len(body["whitelist"]) == 10 and not body["explicit"], status)
    # Over the limit: refused before anything is written.
    over = whitelist(256, 256, "over")
    status, body = srv.json("PUT", path("big", "/policy"), {"reprint": "allow", "whitelist": over},
                            headers=AUTH)
    err = expect_error(status, body, 400, "invalid_field", "whitelist")
    check(str(POLICY_MAX) in err["message"], err)
    check(len(srv.json("GET", path("big"))[1]["policy"]["whitelist"]) == 10)


# ---- restores ----

@T.test
def restore_lists_the_documents_it_predates(srv):
    """A (alice, forbid) revoked; B (bob, the same text), E (another text)
    and C (carol, a near-duplicate of another revoked claim A2) register as
    originals. Restoring A answers predates [B] (not E), and its audit entry
    records it; B stays registered, its status "superseded" by A (also
    after a restart), and a check of B's text names A as the source
    (block); restoring A2 lists C. An own re-post (the same account is never
    evidence) is not listed; a restore of an active claim lists nothing.
    Revoking A again leaves B superseded; B's restore makes it active again
    (audited, "previous": "superseded")."""
    t = TEXTS["en5"]
    register(srv, "A", t, "alice", reprint="forbid")
    check(srv.json("POST", path("A", "/revoke"), {"reason": "appeal"}, headers=AUTH)[0] == 200)
    b = register(srv, "B", t, "bob")
    register(srv, "E", TEXTS["zh1"], "erin")
    register(srv, "A2", TEXTS["en2"], "alice")
    check(srv.json("POST", path("A2", "/revoke"), None, headers=AUTH)[0] == 200)
    register(srv, "C", edit(TEXTS["en2"], 3, 7), "carol")
    status, body = srv.json("POST", path("A", "/restore"), {"reason": "appeal withdrawn"},
                            headers=AUTH)
    check(status == 200, "restore A: %s %r", status, body)
    want = [{"id": "B", "account": "bob", "registered_at": b["registered_at"]}] \
        if "registered_at" in b else None
    got = body.get("predates")
    check(isinstance(got, list) and [x["id"] for x in got] == ["B"],
          "restore of A answers %r, wanted predates [B]", body)
    if want:
        check(got == want, "%r != %r", got, want)
    check(body["predates_truncated"] is False and body["status"] == "active", body)
    e = audit_entries(srv, "A")[-1]
    check(e["action"] == "restore" and [x["id"] for x in e["detail"].get("predates", [])] == ["B"],
          "restore audit entry: %r", e)
    check(e["detail"]["reason"] == "appeal withdrawn", e)
    check("previous" not in e["detail"], e)
    a_at = srv.json("GET", path("A"))[1]["registered_at"]
    for restarted in (False, True):
        if restarted:
            srv.restart()
        # B is still registered, superseded by A; its text now has A as the source.
        status, doc = srv.json("GET", path("B"))
        check(status == 200 and doc["status"] == "superseded"
              and doc.get("superseded_by") == {"id": "A", "registered_at": a_at},
              "B after the restore of A (restarted: %s): %s %r", restarted, status, doc)
        check(srv.json("GET", path("A"))[1]["status"] == "active")
        check(srv.json("GET", path("E"))[1]["status"] == "active", "E is another text")
        status, r = srv.json("POST", "/check-original",
                             {"id": "B", "text": t, "account": "bob", "register": True},
                             headers=AUTH)
        check(status == 200 and r["registered"] and not r["original"] and r["action"] == "block"
              and r["source"]["id"] == "A", "re-check of B: %r", r)
    # The near-duplicate case.
    status, body = srv.json("POST", path("A2", "/restore"), None, headers=AUTH)
    check(status == 200 and [x["id"] for x in body["predates"]] == ["C"],
          "restore of A2: %s %r", status, body)
    # The same account: not listed.
    register(srv, "A3", TEXTS["zh2"], "alice")
    check(srv.json("POST", path("A3", "/revoke"), None, headers=AUTH)[0] == 200)
    register(srv, "D", TEXTS["zh2"], "alice")
    status, body = srv.json("POST", path("A3", "/restore"), None, headers=AUTH)
    check(status == 200 and body["predates"] == [], "restore of A3: %s %r", status, body)
    # Nothing changes: nothing listed, no audit entry.
    n = len(audit_entries(srv, "A"))
    status, body = srv.json("POST", path("A", "/restore"), None, headers=AUTH)
    check(status == 200 and body["predates"] == [] and body["predates_truncated"] is False, body)
    check(len(audit_entries(srv, "A")) == n, "an audit entry for no change")
    # Revoke answers keep their shape; revoking A again leaves B superseded.
    status, body = srv.json("POST", path("A", "/revoke"), None, headers=AUTH)
    check(status == 200 and body == {"id": "A", "status": "revoked"}, body)
    check(srv.json("GET", path("B"))[1]["status"] == "superseded", "B after A's revoke")
    # B restored explicitly: active, audited.
    status, body = srv.json("POST", path("B", "/restore"), {"reason": "A revoked"}, headers=AUTH)
    check(status == 200 and body["status"] == "active", "restore of B: %s %r", status, body)
    e = audit_entries(srv, "B")[-1]
    check(e["action"] == "restore" and e["detail"]["previous"] == "superseded"
          and e["detail"]["reason"] == "A revoked", "B's restore audit entry: %r", e)
    status, doc = srv.json("GET", path("B"))
    check(doc["status"] == "active" and "superseded_by" not in doc, "B restored: %r", doc)
    status, body = srv.json("PUT", path("nope", "/policy"), {"reprint": "allow"}, headers=AUTH)
    expect_error(status, body, 404, "not_found")


# ---- replicas ----

@T.test
def concurrent_patches_on_two_replicas(_srv):
    """ROUNDS rounds: PATCH {reprint} on nd-1 and PATCH {whitelist} on nd-2
    at the same moment; both 200, and a read at the latest state on nd-3
    has both fields. At the end every node holds the same policy and the
    same chain of audit entries (each "previous" the policy the entry
    before set)."""
    if shutil.which("nats-server") is None:
        print("     skipped: nats-server not installed")
        return
    from cluster import ReplicaCluster, wait_converged  # noqa: E402
    rounds = 30
    with ReplicaCluster(n=3, haproxy=False, tmp_prefix="neardup-policy-replicas-") as cl:
        nodes = cl.nodes
        names = [cl.name(i) for i in range(3)]
        st, body = nodes[0].json("POST", "/check-original",
                                 {"id": "rp", "text": TEXTS["zh3"], "account": "alice",
                                  "register": True})
        check(st == 200 and body["registered"], "register: %s %r", st, body)
        wait_converged(nodes, 30, names)
        conns = [nodes[0].connect(), nodes[1].connect()]
        lost, contended = [], [0]
        for i in range(rounds):
            rule = "forbid" if i % 2 == 0 else "allow"
            acct = "acct-%d" % i
            bodies = [{"reprint": rule}, {"whitelist": [{"account": acct}]}]
            res = [None, None]
            gate = threading.Barrier(2, timeout=30)

            def send(k):
                gate.wait()
                for _ in range(5):  # the contract: a 503 contention is asked again
                    res[k] = nodes[k].json("PATCH", path("rp", "/policy"), bodies[k],
                                           conn=conns[k])
                    if res[k][0] != 503:
                        break
                    contended[0] += 1

            threads = [threading.Thread(target=send, args=(k,), daemon=True) for k in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            check(not any(t.is_alive() for t in threads), "a PATCH hangs")
            check(res[0][0] == 200 and res[1][0] == 200, "round %d: %r", i, res)
            st, doc = nodes[2].json("GET", path("rp") + "?consistency=latest")
            check(st == 200, "latest read on nd-3: %s %r", st, doc)
            p = doc["policy"]
            if p["reprint"] != rule or [w["account"] for w in p["whitelist"]] != [acct]:
                lost.append((i, p))
        for c in conns:
            c.close()
        print("     %d rounds, %d PATCHes asked again after 503" % (rounds, contended[0]))
        check(not lost, "%d of %d rounds lost an acknowledged PATCH; first: %r",
              len(lost), rounds, lost[:1])
        wait_converged(nodes, 30, names)
        chains = []
        for k, srv in enumerate(nodes):
            entries = [e for e in audit_entries(srv, "rp") if e["action"] == "policy"]
            check(len(entries) == 2 * rounds, "%s: %d policy audit entries", names[k],
                  len(entries))
            prev = None
            for n, e in enumerate(entries):
                check(e["detail"]["previous"] == prev, "%s: audit entry %d: previous %r, the "
                      "entry before set %r", names[k], n, e["detail"]["previous"], prev)
                prev = e["detail"]["policy"]
            chains.append([e["detail"] for e in entries])
            final = srv.json("GET", path("rp"))[1]["policy"]
            check(compact(final) == json.dumps(prev, separators=(",", ":")), "%s: %r != %r",
                  names[k], final, prev)
        check(chains[0] == chains[1] == chains[2], "the nodes' audit chains differ")


@T.test
def restore_supersedes_on_replicas(_srv):
    """A (alice) revoked on nd-1, B (bob, the same text) registered on nd-2,
    A restored on nd-3: every node shows B superseded by A; B restored on
    nd-2: active on every node (audit F12, with the stream)."""
    if shutil.which("nats-server") is None:
        print("     skipped: nats-server not installed")
        return
    from cluster import ReplicaCluster, wait_converged  # noqa: E402
    t = TEXTS["en4"]
    with ReplicaCluster(n=3, haproxy=False, tmp_prefix="neardup-policy-replicas-") as cl:
        nodes = cl.nodes
        names = [cl.name(i) for i in range(3)]

        def ok(node, method, url, body=None):
            st, r = node.json(method, url, body)
            check(st == 200, "%s %s: %s %r", method, url, st, r)
            return r

        ok(nodes[0], "POST", "/check-original",
           {"id": "A", "text": t, "account": "alice", "register": True})
        ok(nodes[0], "POST", path("A", "/revoke"))
        wait_converged(nodes, 30, names)
        r = ok(nodes[1], "POST", "/check-original",
               {"id": "B", "text": t, "account": "bob", "register": True})
        check(r["registered"] and r["original"], "B: %r", r)
        wait_converged(nodes, 30, names)
        r = ok(nodes[2], "POST", path("A", "/restore"))
        check([x["id"] for x in r["predates"]] == ["B"], "restore of A: %r", r)
        wait_converged(nodes, 30, names)
        a_at = ok(nodes[0], "GET", path("A"))["registered_at"]
        for k, node in enumerate(nodes):
            doc = ok(node, "GET", path("B"))
            check(doc["status"] == "superseded"
                  and doc.get("superseded_by") == {"id": "A", "registered_at": a_at},
                  "%s: B %r", names[k], doc)
        ok(nodes[1], "POST", path("B", "/restore"))
        wait_converged(nodes, 30, names)
        for k, node in enumerate(nodes):
            doc = ok(node, "GET", path("B"))
            check(doc["status"] == "active" and "superseded_by" not in doc,
                  "%s: B %r", names[k], doc)


def main():
    T.run(fresh=fresh)


if __name__ == "__main__":
    main()
