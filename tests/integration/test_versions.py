"""Documents stored with another fingerprint version.

A data directory is written directly (tests/store_tool put, through the
store's own code) with documents of two other versions, whose stored
fingerprints are the *current* fingerprints of their texts, so a silent
comparison would match them at distance 0, and documents of the current
version. neardupd started on it must: report them at start (how many, which
versions); serve them by id with their own version; never match them in
/check-original, nor let them stop a registration; index the current-version
documents normally; keep all of this across a deletion and a restart."""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (Runner, Server, check, edit, expect_error, load_texts,  # noqa: E402
                     run_threads, tool_path)

T = Runner("test_versions")
TEXTS = load_texts()
BASES = [TEXTS[k] for k in sorted(TEXTS)]
CURRENT = "nd-simhash-2+nd-sketch-2"  # fingerprint + sketch, with the folds
OLD = "nd-simhash-1"  # the release before the sketches
ODD = "simhash-v0-experimental"
T0_US = 1700000000000000  # 2023-11-14T22:13:20Z


STORE_TOOL = tool_path("ND_STORE_TOOL", ("tests", "store_tool"))
NEARDUP = tool_path("NEARDUP", ("server", "neardup"))


def fingerprints(texts):
    """{text index: (simhash, chars)} from the CLI (the current version)."""
    lines = "".join(json.dumps({"id": str(i), "text": t}) + "\n" for i, t in enumerate(texts))
    r = subprocess.run([NEARDUP, "fingerprint", "--jsonl"], input=lines.encode(),
                       capture_output=True, timeout=60)
    check(r.returncode == 0, r.stderr.decode())
    out = {}
    for line in r.stdout.decode().splitlines():
        d = json.loads(line)
        out[int(d["id"])] = (d["simhash"], d["chars"])
    return out


def rfc3339(us):
    import datetime
    t = datetime.datetime.fromtimestamp(us // 1000000, datetime.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S") + ".%06dZ" % (us % 1000000)


def make_store(data_dir):
    """Writes the documents; returns {id: (text, expected record)}."""
    texts = [edit(BASES[i % len(BASES)], 7, i) + "\n#v%d" % i for i in range(7)]
    fps = fingerprints(texts)
    plan = [("old-1", OLD), ("old-2", OLD), ("odd-1", ODD), ("cur-1", CURRENT),
            ("old-3", OLD), ("cur-2", CURRENT), ("cur-3", CURRENT)]
    docs, lines = {}, []
    for i, (doc, version) in enumerate(plan):
        simhash, chars = fps[i]
        at = T0_US + i * 1000
        meta = {"n": i, "version_written": version}
        lines.append(json.dumps({"id": doc, "simhash": simhash, "version": version,
                                 "registered_at_us": at, "chars": chars, "text": texts[i],
                                 "meta": meta}))
        docs[doc] = (texts[i], {"id": doc, "simhash": simhash, "chars": chars,
                                "version": version, "registered_at": rfc3339(at),
                                "meta": meta})
    # Two later records under ids stored already (the registry never writes
    # such; a damaged or hand-made store might): the first registration wins
    # and the skipped ones count nowhere.
    for j, (doc, version) in enumerate([("old-3", OLD), ("cur-1", ODD)]):
        lines.append(json.dumps({"id": doc, "simhash": "0123456789abcdef", "version": version,
                                 "registered_at_us": T0_US + 100000 + j, "chars": 999}))
    r = subprocess.run([STORE_TOOL, "put", data_dir], input=("\n".join(lines) + "\n").encode(),
                       capture_output=True, timeout=60)
    check(r.returncode == 0 and r.stdout.decode().strip() == "put %d" % len(lines),
          "store_tool: %s %s", r.stdout, r.stderr)
    return docs


def stale_warning(srv):
    recs = [r for r in srv.log_records() if "another fingerprint version" in r.get("msg", "")]
    check(len(recs) == 1, "no (single) start-up warning:\n%s", srv.log_tail())
    return recs[0]


def check_served(srv, docs):
    for doc, (_, want) in docs.items():
        status, body = srv.json("GET", "/documents/" + doc)
        check(status == 200 and body == want, "%s: %s %r, want %r", doc, status, body, want)


def check_never_matched(srv, docs):
    """Stale documents are never matched; current ones are."""
    for doc, (text, want) in docs.items():
        for k in (0, 3, 8):
            status, body = srv.json("POST", "/check-original", {"text": text, "k": k})
            check(status == 200, body)
            ids = [m["id"] for m in body["matches"]]
            if want["version"] == CURRENT:
                check(doc in ids and body["matches"][ids.index(doc)]["distance"] == 0,
                      "%s not matched at k=%d: %r", doc, k, body)
            else:
                check(body["simhash"] == want["simhash"], "the text's fingerprint changed")
                check(not any(i.startswith(("old-", "odd-")) for i in ids),
                      "a stale document was compared (k=%d): %r", k, body)


@T.test
def other_versions_reported_kept_never_compared(_):
    srv = Server(wait_ready=False)
    try:
        docs = make_store(srv.data_dir)
        srv.start()
        srv.wait_for_ready()
        # Reported at start: count and versions, as text and as fields.
        warn = stale_warning(srv)
        check(warn["level"] == "warn" and warn["stale"] == 4 and warn["current"] == CURRENT,
              warn)
        check(warn["versions"] == {OLD: 3, ODD: 1}, warn)
        check("4 documents" in warn["msg"] and "%s: 3" % OLD in warn["msg"]
              and "%s: 1" % ODD in warn["msg"], warn["msg"])
        ready = [r for r in srv.log_records() if r.get("msg") == "ready"][-1]
        check(ready["documents"] == 7 and ready["indexed"] == 3 and ready["stale"] == 4, ready)
        check(any(r.get("msg", "").startswith("2 stored records repeat an id")
                  for r in srv.log_records()), "no warning about the repeated ids")
        m = srv.metrics()
        check(m["neardup_stale_documents"] == 4 and m["neardup_index_entries"] == 3
              and m["neardup_documents"] == 7, "metrics")
        check_served(srv, docs)
        check_never_matched(srv, docs)

        # A new registration of the text of a stale document is original
        # (nothing current is near it), and later than everything stored.
        text, old1 = docs["old-1"]
        status, body = srv.json("POST", "/check-original",
                                {"id": "new-1", "text": text, "register": True, "k": 3})
        check(status == 200 and body["original"] and body["registered"]
              and body["matches"] == [] and body["version"] == CURRENT, body)
        check(body["registered_at"] > max(w["registered_at"] for _, w in docs.values()), body)
        new1 = {"id": "new-1", "simhash": body["simhash"], "chars": body["chars"],
                "version": CURRENT, "registered_at": body["registered_at"], "meta": None}
        # ... and from now on it is what that text matches.
        status, body = srv.json("POST", "/check-original", {"text": text, "k": 3})
        check([m["id"] for m in body["matches"]] == ["new-1"], body)
        # The stale document's id keeps its record; another text under it is
        # a conflict, as for any id.
        status, body = srv.json("POST", "/check-original",
                                {"id": "old-1", "text": docs["cur-1"][0], "register": True})
        expect_error(status, body, 409, "id_conflict")
        status, body = srv.json("GET", "/documents/old-1")
        check(body == old1, body)

        # Deleting a stale document; a restart keeps all of it.
        status, body = srv.json("DELETE", "/documents/old-2")
        check(status == 200 and body["deleted"], body)
        del docs["old-2"]
        docs["new-1"] = (text, new1)
        srv.restart()
        warn = stale_warning(srv)
        check(warn["stale"] == 3 and warn["versions"] == {OLD: 2, ODD: 1}, warn)
        status, _ = srv.json("GET", "/documents/old-2")
        check(status == 404, "deleted stale document came back")
        check_served(srv, docs)
        check_never_matched(srv, {d: v for d, v in docs.items() if d != "new-1"})
        check(srv.stop() == 0)
        srv.check_sanitizers()
    finally:
        srv.cleanup()


@T.test
def reregistering_upgrades_in_place(_):
    """The upgrade procedure: a stale document registered again under its id
    with its text gets the current fingerprint, keeps its registered_at and
    its claim (a later registration of the same text is its duplicate), is
    matched from then on, and stays so across a restart. A different text is
    still a conflict; the other stale documents are untouched."""
    srv = Server(wait_ready=False)
    try:
        docs = make_store(srv.data_dir)
        srv.start()
        srv.wait_for_ready()
        text, old1 = docs["old-1"]
        # A later document with the same text, registered while old-1 is
        # stale: original then (nothing current is near it).
        status, body = srv.json("POST", "/check-original",
                                {"id": "later", "text": text, "register": True, "k": 3})
        check(status == 200 and body["original"] and body["registered"], body)
        later_at = body["registered_at"]
        # Another text under old-1: still a conflict, nothing changes.
        status, body = srv.json("POST", "/check-original",
                                {"id": "old-1", "text": docs["cur-1"][0], "register": True})
        expect_error(status, body, 409, "id_conflict")
        # Without register, the id is only looked up: no upgrade.
        status, body = srv.json("POST", "/check-original", {"id": "old-1", "text": text})
        check(status == 200, body)
        status, body = srv.json("GET", "/documents/old-1")
        check(body == old1, body)
        check(srv.metrics()["neardup_stale_documents"] == 4, "stale count")
        # The upgrade: same id, same text, register.
        status, body = srv.json("POST", "/check-original",
                                {"id": "old-1", "text": text, "register": True, "k": 3})
        check(status == 200 and body["registered"] and body["version"] == CURRENT
              and body["registered_at"] == old1["registered_at"], body)
        check(body["original"] and body["matches"] == [], "nothing current is older: %r", body)
        want = dict(old1, simhash=body["simhash"], version=CURRENT)
        check(want["simhash"] == old1["simhash"], "the store_tool wrote the current fingerprint")
        status, got = srv.json("GET", "/documents/old-1")
        check(status == 200 and got == want, "%r != %r", got, want)
        m = srv.metrics()
        check(m["neardup_stale_documents"] == 3 and m["neardup_index_entries"] == 5
              and m["neardup_documents"] == 8, "metrics after the upgrade: %r",
              {k: m[k] for k in ("neardup_stale_documents", "neardup_index_entries",
                                 "neardup_documents")})
        # The earlier claim now wins: the later registration is its duplicate.
        status, body = srv.json("POST", "/check-original",
                                {"id": "later", "text": text, "register": True, "k": 3})
        check(status == 200 and not body["original"]
              and [x["id"] for x in body["matches"]] == ["old-1"]
              and body["registered_at"] == later_at, body)
        status, body = srv.json("POST", "/check-original", {"text": text, "k": 0})
        check(sorted(x["id"] for x in body["matches"]) == ["later", "old-1"], body)
        # Again: an ordinary existing document now (same answer, no write).
        status, body = srv.json("POST", "/check-original",
                                {"id": "old-1", "text": text, "register": True, "k": 3})
        check(status == 200 and body["registered_at"] == old1["registered_at"]
              and body["original"], body)
        # With meta: an upgrade takes the request's meta.
        text2, old2 = docs["old-2"]
        status, body = srv.json("POST", "/check-original",
                                {"id": "old-2", "text": text2, "register": True,
                                 "meta": {"upgraded": True}})
        check(status == 200 and body["registered_at"] == old2["registered_at"], body)
        want2 = dict(old2, version=CURRENT, meta={"upgraded": True})
        status, got = srv.json("GET", "/documents/old-2")
        check(got == want2, "%r != %r", got, want2)
        # Eight identical upgrades at once: one writes, the others wait
        # behind it and get the same answer.
        text3, old3 = docs["old-3"]
        answers = []

        def upgrade(_):
            st, b = srv.json("POST", "/check-original",
                             {"id": "old-3", "text": text3, "register": True, "k": 3})
            answers.append((st, b["registered_at"] if st == 200 else b))

        run_threads(8, upgrade)
        check(answers == [(200, old3["registered_at"])] * 8, answers)
        m = srv.metrics()
        check(m["neardup_stale_documents"] == 1 and m["neardup_documents"] == 8
              and m["neardup_index_entries"] == 7, "after the concurrent upgrades")
        # Durable: after a restart all three are current, odd-1 still stale.
        srv.restart()
        warn = stale_warning(srv)
        check(warn["stale"] == 1 and warn["versions"] == {ODD: 1}, warn)
        status, got = srv.json("GET", "/documents/old-3")
        check(got == dict(old3, version=CURRENT), got)
        status, got = srv.json("GET", "/documents/old-1")
        check(got == want, "%r != %r", got, want)
        status, got = srv.json("GET", "/documents/old-2")
        check(got == want2, "%r != %r", got, want2)
        status, body = srv.json("POST", "/check-original",
                                {"id": "later", "text": text, "register": True, "k": 3})
        check(not body["original"] and [x["id"] for x in body["matches"]] == ["old-1"], body)
        check(srv.stop() == 0)
        srv.check_sanitizers()
    finally:
        srv.cleanup()


@T.test
def only_current_versions_no_warning(_):
    with Server() as srv:
        status, body = srv.json("POST", "/check-original",
                                {"id": "a", "text": BASES[0], "register": True})
        check(status == 200 and body["registered"], body)
        srv.restart()
        check(not any("another fingerprint version" in r.get("msg", "")
                      for r in srv.log_records()), "warning without stale documents")
        status, body = srv.json("GET", "/documents/a")
        check(status == 200 and body["version"] == CURRENT, body)


def main():
    T.run(None)


if __name__ == "__main__":
    main()
