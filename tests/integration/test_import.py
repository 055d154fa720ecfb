"""The day-one backfill, run as real processes on real files:
`neardup import` (lines judged in registered_at order whatever the file
order, the later of two near duplicates reported with the earliest claim as
its source, refused lines reported and counted, .jsonl.gz and standard
input, a kill -9 midway finished by re-running the same command, refused
while neardupd holds the store) and POST /import (the same lines, the same
answer as the CLI's, guarded like registration, idempotent, one at a time,
durable once answered, 503 loading before the store is loaded, stopped by
a shutdown with its partial summary and finished by sending it again)."""

import datetime
import gzip
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from urllib.parse import quote

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HEX16, RFC3339_US, Runner, Server, check, edit,  # noqa: E402
                     expect_error, load_texts, neardup_path, tool_path)

T = Runner("test_import")
TEXTS = load_texts()
TMP = tempfile.mkdtemp(prefix="neardup-import-")
TOKEN = "import-token-0123456789abcdef"
TOKEN_FILE = os.path.join(TMP, "tokens")
with open(TOKEN_FILE, "w") as f:
    f.write("# name token\nbackfill %s\n" % TOKEN)
os.chmod(TOKEN_FILE, 0o600)
AUTH = {"Authorization": "Bearer " + TOKEN}
NDJSON = "application/x-ndjson"
SUMMARY_KEYS = {"lines", "imported", "existing", "duplicates", "errors", "detections", "seconds",
                "complete"}
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def clean_env():
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("NEARDUP_"):
            del env[k]
    return env


def rfc3339(us):
    """Microseconds since the epoch as the answers give them."""
    return (EPOCH + datetime.timedelta(microseconds=us)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def us_of(y, mo, d, h=0, mi=0, s=0, frac=0):
    dt = datetime.datetime(y, mo, d, h, mi, s, tzinfo=datetime.timezone.utc)
    return (dt - EPOCH) // datetime.timedelta(microseconds=1) + frac


def doc_path(doc, sub=""):
    return "/documents/" + quote(doc, safe="") + sub


def new_dir(name):
    path = os.path.join(TMP, name)
    shutil.rmtree(path, ignore_errors=True)
    return path


# ---- running `neardup import` ----

def parse_output(stdout):
    """The CLI's stdout: JSON lines, events then one summary last."""
    lines = [json.loads(x) for x in stdout.decode("utf-8").splitlines() if x.strip()]
    check(lines and set(lines[-1]) == {"summary"}, "no summary last: %r", lines[-3:])
    summary = lines[-1]["summary"]
    check(set(summary) == SUMMARY_KEYS, "summary fields: %r", summary)
    events = lines[:-1]
    for ev in events:
        check(set(ev) in ({"line", "id", "source", "copied_share"},
                          {"line", "id", "code", "message"}),
              "event fields: %r", ev)
    return events, summary


def run_import(data, src, threads=None, stdin=None, timeout=120, want_rc=0):
    """Runs `neardup import --data data --no-progress src`; returns
    (events, summary, stderr text)."""
    cmd = [neardup_path(), "import", "--data", data, "--no-progress"]
    if threads is not None:
        cmd += ["--threads", str(threads)]
    cmd.append(src)
    r = subprocess.run(cmd, input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL,
                       capture_output=True, timeout=timeout, env=clean_env())
    err = r.stderr.decode("utf-8", "replace")
    check(r.returncode == want_rc, "neardup import exited %s:\n%s\n%s", r.returncode,
          r.stdout.decode("utf-8", "replace")[-2000:], err[-2000:])
    events, summary = parse_output(r.stdout)
    return events, summary, err


def counts(summary):
    return {k: summary[k] for k in ("lines", "imported", "existing", "duplicates", "errors",
                                    "detections")}


def events_by_line(events):
    out = {}
    for ev in events:
        check(ev["line"] not in out, "two events for line %s: %r", ev["line"], events)
        out[ev["line"]] = ev
    return out


# ---- the small archive (tests 1, 2 and POST /import) ----

_vocab = []


def en_vocab():
    """The distinct words of the shipped English texts, sorted."""
    if not _vocab:
        _vocab.extend(sorted({w.strip(".,;:!?\"'()") for k, t in TEXTS.items()
                              if k.startswith("en") for w in t.split()} - {""}))
    return _vocab


def filler(i, words=90):
    """A distinct text of random words (>= 300 characters), seeded by i."""
    import random
    rnd = random.Random(1000 + i)
    vocab = en_vocab()
    return " ".join(rnd.choice(vocab) for _ in range(words))


def small_archive():
    """~40 JSON lines, deliberately out of time order. Returns (bytes,
    expectations): expectations[line] = one of
      ("imported", id, registered_at_us or None, account, meta, reprint)
      ("existing", id)
      ("duplicate", id, source)
      ("error", id or None, code)."""
    t0 = us_of(2021, 1, 1)
    day = 86400 * 1000000
    rows = []

    def add(obj, expect, raw=None, key=None):
        """key: the line's registered_at in microseconds (the judging
        order), None for a line without a valid one (judged last)."""
        rows.append((raw if raw is not None else json.dumps(obj), expect, key))

    def doc(i, text, account, at, at_json=None, meta=None, reprint=None, **extra):
        obj = {"id": i, "text": text}
        if account is not None:
            obj["account"] = account
        if at_json is not None:
            obj["registered_at"] = at_json
        elif at is not None:
            obj["registered_at"] = at
        if meta is not None:
            obj["meta"] = meta
        if reprint is not None:
            obj["reprint"] = reprint
        obj.update(extra)
        return obj

    def imported(i, text, account, at, at_json=None, meta=None, reprint=None):
        add(doc(i, text, account, at, at_json, meta, reprint),
            ("imported", i, at, account, meta, reprint), key=at)

    imported("fill-0", filler(0), "alice", t0 + 1 * day, rfc3339(t0 + 1 * day),
             meta={"title": "Filler 0"})
    # x-late: later in time than x-early (line 19), earlier in the file.
    add(doc("x-late", edit(TEXTS["zh1"], 3, 1), "bob", None, "2022-06-01T08:00:00Z"),
        ("duplicate", "x-late", "x-early"), key=us_of(2022, 6, 1, 8))
    imported("fill-1", filler(1), "bob", t0 + 2 * day + 17)  # integer microseconds
    add(None, ("error", None, "invalid_json"), raw='{"id": "broken", "text": ')
    add(doc("tri-3", edit(TEXTS["en1"], 4, 3), "carol", t0 + 40 * day),
        ("duplicate", "tri-3", "tri-1"), key=t0 + 40 * day)
    imported("fill-2", filler(2), "carol", t0 + 3 * day, rfc3339(t0 + 3 * day),
             meta={"n": 2, "tags": ["x", "y"]})
    add(None, ("blank",), raw="")
    add(doc("short-1", "too short to judge. " * 5, "alice", t0 + 4 * day),
        ("error", "short-1", "text_too_short"), key=t0 + 4 * day)
    # tri-1: an account of non-ASCII characters (escaped by json.dumps), the
    # time with an offset: 2021-01-31T05:06:07.5+08:00 = 2021-01-30T21:06:07.500000Z.
    tri1_at = us_of(2021, 1, 30, 21, 6, 7, 500000)
    imported("tri-1", TEXTS["en1"], "作者甲", tri1_at, "2021-01-31T05:06:07.5+08:00",
             meta={"title": "Tri one", "author": "甲"})
    add({"text": filler(3), "account": "alice", "registered_at": t0 + 5 * day},
        ("error", None, "invalid_field"), key=t0 + 5 * day)
    add(doc("bad-at", filler(4), "alice", None, "yesterday"), ("error", "bad-at", "invalid_field"))
    imported("own-1", TEXTS["en3"], "alice", t0 + 50 * day)
    # the author's own re-post is original
    imported("own-2", edit(TEXTS["en3"], 3, 2), "alice", t0 + 51 * day,
             rfc3339(t0 + 51 * day))
    add(doc("tri-2", edit(TEXTS["en1"], 2, 5), "dave", t0 + 35 * day,
            rfc3339(t0 + 35 * day)), ("duplicate", "tri-2", "tri-1"), key=t0 + 35 * day)
    imported("part-a", TEXTS["en4"], "bob", t0 + 60 * day)
    imported("part-b", TEXTS["en5"], "alice", t0 + 61 * day, reprint="allow")
    # bob's own part-a plus alice's part-b: not original; the source is the
    # earliest claim among the evidence, part-b (part-a is bob's own).
    add(doc("part-z", TEXTS["en4"] + "\n\n" + TEXTS["en5"], "bob", t0 + 62 * day),
        ("duplicate", "part-z", "part-b"), key=t0 + 62 * day)
    imported("forbid-1", TEXTS["zh2"], "alice", t0 + 70 * day, meta={"title": "禁止转载"},
             reprint="forbid")
    x_early_at = us_of(2021, 2, 3, 4, 5, 6, 123456)
    x_early = doc("x-early", TEXTS["zh1"], "alice", None, "2021-02-03T04:05:06.123456Z",
                  meta={"title": "Early"})
    add(x_early, ("imported", "x-early", x_early_at, "alice", {"title": "Early"}, None),
        key=x_early_at)
    add(x_early, ("existing", "x-early"), key=x_early_at)  # the same line again
    add(doc("x-early", TEXTS["zh3"], "alice", t0 + 80 * day), ("error", "x-early", "id_conflict"),
        key=t0 + 80 * day)
    imported("no-time", TEXTS["zh4"], "erin", None)  # judged last, at the clock's time
    add(doc("float-at", filler(5), "alice", None, 1.5e15), ("error", "float-at", "invalid_field"))
    for i in range(6, 22):
        at = t0 + (100 + 7 * i) * day + i
        imported("fill-%d" % i, filler(i), "acct-%d" % (i % 4), at,
                 rfc3339(at) if i % 2 else None, meta={"n": i} if i % 3 else None)
    imported("zh5", TEXTS["zh5"], "frank", t0 + 90 * day)
    body = ("\n".join(r[0] for r in rows) + "\n").encode("utf-8")
    expect = {n + 1: r[1] for n, r in enumerate(rows) if r[1][0] != "blank"}
    keys = {n + 1: r[2] for n, r in enumerate(rows) if r[1][0] != "blank"}
    order = sorted(expect, key=lambda n: (keys[n] is None, keys[n] or 0, n))
    return body, expect, order


SMALL, SMALL_EXPECT, SMALL_ORDER = small_archive()


def expected_summary(expect):
    kinds = [e[0] for e in expect.values()]
    n_dup = kinds.count("duplicate")
    return {"lines": len(expect), "imported": kinds.count("imported"),
            "existing": kinds.count("existing"), "duplicates": n_dup,
            "errors": kinds.count("error"), "detections": n_dup}


def check_duplicate(ev, n, e):
    """The event of a duplicate ("duplicate", id, source) on line n, with
    the part of its text copied."""
    share = ev.get("copied_share")
    check(isinstance(share, (int, float)) and 0 < share <= 1, "line %d: copied_share %r", n, share)
    check(ev == {"line": n, "id": e[1], "source": e[2], "copied_share": share},
          "line %d: %r, wanted duplicate of %s", n, ev, e[2])


def check_events(events, expect, order=None):
    """Events: exactly the duplicates and refused lines expected, in the
    order the lines are judged (registered_at order, lines without a valid
    one last, in file order)."""
    got = events_by_line(events)
    want_lines = {n for n, e in expect.items() if e[0] in ("duplicate", "error")}
    check(set(got) == want_lines, "events for lines %s, wanted %s: %r",
          sorted(got), sorted(want_lines), events)
    for n, ev in got.items():
        e = expect[n]
        if e[0] == "duplicate":
            check_duplicate(ev, n, e)
        else:
            check(ev.get("code") == e[2] and ev.get("id") == e[1],
                  "line %d: %r, wanted error %s id %r", n, ev, e[2], e[1])
            check(isinstance(ev.get("message"), str) and ev["message"], "no message: %r", ev)
    if order is not None:
        want = [n for n in order if n in got]
        check([ev["line"] for ev in events] == want, "events in the order of lines %s, wanted %s",
              [ev["line"] for ev in events], want)


def check_summary(summary, expect):
    want = expected_summary(expect)
    check(counts(summary) == want, "summary %r, wanted %r", summary, want)
    check(summary["complete"] is True, "not complete: %r", summary)
    check(summary["imported"] + summary["existing"] + summary["duplicates"] + summary["errors"]
          == summary["lines"], "counts do not add up: %r", summary)
    check(isinstance(summary["seconds"], (int, float)) and summary["seconds"] >= 0, summary)


def check_store(srv, expect, t_before=None):
    """The documents of an imported small archive, through the server."""
    conn = srv.connect()
    try:
        for n, e in sorted(expect.items()):
            if e[0] != "imported":
                continue
            _, i, at, account, meta, reprint = e
            status, body = srv.json("GET", doc_path(i), conn=conn)
            check(status == 200, "line %d %s: %s %r", n, i, status, body)
            if at is not None:
                check(body["registered_at"] == rfc3339(at), "%s registered_at %s, wanted %s",
                      i, body["registered_at"], rfc3339(at))
            else:
                check(RFC3339_US.match(body["registered_at"]), body)
                if t_before is not None:
                    check(body["registered_at"] >= rfc3339(t_before), "%s: %s before the import",
                          i, body["registered_at"])
            check(body.get("account") == account, "%s account %r, wanted %r", i,
                  body.get("account"), account)
            check(body.get("meta") == meta, "%s meta %r, wanted %r", i, body.get("meta"), meta)
            check(HEX16.match(body["simhash"]) and body["chars"] >= 300, body)
            check(body.get("status") == "active", body)
            pol = body.get("policy") or {}
            if reprint is not None:
                check(pol.get("reprint") == reprint and pol.get("explicit") is True,
                      "%s policy %r, wanted reprint %s", i, pol, reprint)
            else:
                check(pol.get("explicit") is False, "%s policy %r, wanted none", i, pol)
        # Duplicates, refused lines: not registered (x-early is, with its own text).
        for n, e in expect.items():
            if e[0] == "duplicate" or (e[0] == "error" and e[1] not in (None, "x-early")):
                status, body = srv.json("GET", doc_path(e[1]), conn=conn)
                check(status == 404, "line %d %s registered: %s %r", n, e[1], status, body)
    finally:
        conn.close()


def check_verdicts(srv):
    """/check-original of copies: the earliest claim is the source."""
    def ask(text, account):
        status, body = srv.json("POST", "/check-original", {"text": text, "account": account},
                                headers=AUTH)
        check(status == 200, "check: %s %r", status, body)
        return body

    body = ask(edit(TEXTS["zh1"], 2, 9), "reader")
    check(not body["original"] and body["verdict"] == "duplicate", body)
    check(body["source"]["id"] == "x-early", "source %r, wanted x-early", body["source"])
    check({m["id"] for m in body["matches"]} == {"x-early"}, body["matches"])
    body = ask(TEXTS["en1"], "reader")
    check(not body["original"] and body["source"]["id"] == "tri-1", body)
    check(body["source"]["account"] == "作者甲", body["source"])
    # The server's own source for part-z's text is the CLI's.
    body = ask(TEXTS["en4"] + "\n\n" + TEXTS["en5"], "bob")
    check(not body["original"] and body["source"]["id"] == "part-b", body)
    # forbid-1 blocks a copy; part-b allows one.
    body = ask(edit(TEXTS["zh2"], 2, 4), "reader")
    check(body["action"] == "block" and body["source"]["id"] == "forbid-1", body)
    body = ask(TEXTS["en5"], "reader")
    check(body["action"] == "publish_as_reprint" and body["source"]["id"] == "part-b", body)


def check_copies(srv, expect):
    """Each duplicate is recorded as a detection of its source (import.h)."""
    want = {}
    for e in expect.values():
        if e[0] == "duplicate":
            want.setdefault(e[2], set()).add(e[1])
    for source, ids in sorted(want.items()):
        status, body = srv.json("GET", doc_path(source, "/copies"))
        check(status == 200, "copies of %s: %s %r", source, status, body)
        got = {c["id"] for c in body["copies"]}
        check(got == ids, "copies of %s: %s, wanted %s", source, sorted(got), sorted(ids))


# ---- 1. CLI import: order, duplicates, refused lines ----

CLI_SMALL = {}  # events and summary of the small archive, for POST /import


@T.test
def cli_import_order_and_duplicates():
    src = os.path.join(TMP, "small.jsonl")
    with open(src, "wb") as f:
        f.write(SMALL)
    data = new_dir("data-small")
    t_before = int(time.time() * 1e6)
    events, summary, _ = run_import(data, src)
    check_summary(summary, SMALL_EXPECT)
    check_events(events, SMALL_EXPECT, SMALL_ORDER)
    CLI_SMALL["events"], CLI_SMALL["summary"] = events, summary
    with Server(data_dir=data, args=["--token-file", TOKEN_FILE]) as srv:
        check_store(srv, SMALL_EXPECT, t_before)
        check_verdicts(srv)
        check_copies(srv, SMALL_EXPECT)
    # Run again on the same store: every original is existing now.
    events2, summary2, _ = run_import(data, src)
    want = expected_summary(SMALL_EXPECT)
    check(summary2["imported"] == 0 and
          summary2["existing"] == want["imported"] + want["existing"], "re-run: %r", summary2)
    check(summary2["duplicates"] == want["duplicates"] and summary2["errors"] == want["errors"],
          "re-run: %r", summary2)
    check(sorted(events2, key=lambda e: e["line"]) == sorted(events, key=lambda e: e["line"]),
          "re-run events differ: %r", events2)


@T.test
def copy_of_a_pending_source_keeps_order():
    """A copy whose source is still being committed (the store gathers a
    quarter second of lines) is set aside while the lines after it go on:
    the outcome is still the in-order one. Its event comes before those of
    later lines, a later line with the copy's id registers (the copy never
    did), and the copy is judged against its source."""
    t = us_of(2023, 5, 1)
    src_text, after_text = TEXTS["en2"], filler(41)
    rows = [
        ({"id": "pk-src", "text": src_text, "account": "alice", "registered_at": t}, None),
        ({"id": "pk-x", "text": edit(src_text, 3, 7), "account": "bob",
          "registered_at": t + 1000}, ("duplicate", "pk-x", "pk-src")),
        ({"id": "pk-short", "text": "too short. " * 4, "registered_at": t + 1500},
         ("error", "pk-short", "text_too_short")),
        ({"id": "pk-x", "text": filler(40), "account": "carol", "registered_at": t + 2000}, None),
        ({"id": "pk-after", "text": after_text, "account": "dave", "registered_at": t + 3000},
         None),
        ({"id": "pk-y", "text": edit(after_text, 3, 2), "account": "erin",
          "registered_at": t + 3001}, ("duplicate", "pk-y", "pk-after")),
        ({"id": "pk-z", "text": filler(42), "account": "frank", "registered_at": t + 3002}, None),
    ]
    src = os.path.join(TMP, "pending.jsonl")
    with open(src, "w", encoding="utf-8") as f:
        for obj, _ in rows:
            f.write(json.dumps(obj) + "\n")
    data = new_dir("data-pending")
    events, summary, _ = run_import(data, src)
    check(counts(summary) == {"lines": 7, "imported": 4, "existing": 0, "duplicates": 2,
                              "errors": 1, "detections": 2}, "summary: %r", summary)
    want = [(n + 1, e) for n, (_, e) in enumerate(rows) if e]
    check([ev["line"] for ev in events] == [n for n, _ in want],
          "events for lines %s, wanted %s", [ev["line"] for ev in events], [n for n, _ in want])
    for ev, (n, e) in zip(events, want):
        if e[0] == "duplicate":
            check_duplicate(ev, n, e)
        else:
            check(ev.get("code") == e[2] and ev.get("id") == e[1], "line %d: %r", n, ev)
    with Server(data_dir=data) as srv:
        status, _, body = srv.request("GET", doc_path("pk-x"))
        check(status == 200, "GET pk-x: %s", status)
        doc = json.loads(body)
        check(doc.get("account") == "carol", "pk-x holds line 4's text: %r", doc)
        for i_d in ("pk-src", "pk-after", "pk-z"):
            status, _, _ = srv.request("GET", doc_path(i_d))
            check(status == 200, "GET %s: %s", i_d, status)
        status, _, _ = srv.request("GET", doc_path("pk-y"))
        check(status == 404, "the copy pk-y was registered: %s", status)


# ---- 2. .jsonl.gz and standard input ----

@T.test
def gzip_and_stdin():
    gz = os.path.join(TMP, "small.jsonl.gz")
    with gzip.open(gz, "wb") as f:
        f.write(SMALL)
    ev_gz, sum_gz, _ = run_import(new_dir("data-gz"), gz)
    check_summary(sum_gz, SMALL_EXPECT)
    check_events(ev_gz, SMALL_EXPECT, SMALL_ORDER)
    ev_in, sum_in, _ = run_import(new_dir("data-stdin"), "-", stdin=SMALL)
    check_summary(sum_in, SMALL_EXPECT)
    check_events(ev_in, SMALL_EXPECT, SMALL_ORDER)
    check(counts(sum_gz) == counts(sum_in), "gz %r, stdin %r", sum_gz, sum_in)
    # gzip on standard input too (found by its magic bytes).
    ev_gzin, sum_gzin, _ = run_import(new_dir("data-gzin"), "-", stdin=gzip.compress(SMALL))
    check(counts(sum_gzin) == counts(sum_gz) and ev_gzin == ev_gz, "gzip on stdin: %r", sum_gzin)
    # Nothing to read: an empty archive is complete with no lines.
    _, sum_empty, _ = run_import(new_dir("data-empty"), "-", stdin=b"")
    check(sum_empty["lines"] == 0 and sum_empty["complete"] is True, sum_empty)
    # A missing file: exit 1 with the reason.
    r = subprocess.run([neardup_path(), "import", "--data", new_dir("data-none"),
                        "--no-progress", os.path.join(TMP, "nope.jsonl")],
                       capture_output=True, timeout=60, env=clean_env(), stdin=subprocess.DEVNULL)
    check(r.returncode == 1 and b"cannot open" in r.stderr, "missing file: %s %r",
          r.returncode, r.stderr)


# ---- 3. kill -9 midway, then the same command finishes ----

BIG_LINES = 3000
BIG_CHARS = 4000
_big = {}


def big_archive():
    """BIG_LINES lines of distinct random CJK texts (BIG_CHARS characters),
    every 37th a light edit of an earlier one, at random times, so that
    about 2.5% are duplicates. Returns (path, [(id, account)])."""
    if _big:
        return _big["path"], _big["docs"]
    import random
    rnd = random.Random(13)
    # U+4E00..U+4EFF from random bytes: E4, B8 + (b >> 6), 80 + (b & 63).
    hi = bytes(0xB8 + (b >> 6) for b in range(256))
    lo = bytes(0x80 + (b & 63) for b in range(256))
    path = os.path.join(TMP, "big.jsonl")
    docs, texts = [], []
    with open(path, "w", encoding="utf-8") as f:
        for i in range(BIG_LINES):
            if i % 37 == 36:
                text = edit(texts[rnd.randrange(len(texts))], 3, i)
            else:
                r = rnd.randbytes(BIG_CHARS)
                out = bytearray(3 * BIG_CHARS)
                out[0::3] = b"\xe4" * BIG_CHARS
                out[1::3] = r.translate(hi)
                out[2::3] = r.translate(lo)
                text = out.decode("utf-8")
            texts.append(text)
            i_d, acct = "big-%05d" % i, "acct-%d" % (i % 11)
            docs.append((i_d, acct))
            at = us_of(2020, 1, 1) + rnd.randrange(10 ** 14)
            f.write(json.dumps({"id": i_d, "text": text, "account": acct,
                                "registered_at": at if i % 2 else rfc3339(at),
                                "meta": {"n": i}}, ensure_ascii=False) + "\n")
    _big["path"], _big["docs"] = path, docs
    return path, docs


def read_docs(srv, docs):
    """GET /documents/{id} of every id on one connection: {id: record}
    of those found (404 for the others)."""
    out = {}
    conn = srv.connect()
    try:
        for i_d, _ in docs:
            status, body = srv.json("GET", doc_path(i_d), conn=conn)
            check(status in (200, 404), "%s: %s %r", i_d, status, body)
            if status == 200:
                out[i_d] = body
    finally:
        conn.close()
    return out


def kill_midway(data, src):
    """Starts the import with --progress (a bar on stderr every 250 ms)
    and kills it -9 at the first bar past 60% of the lines (late enough
    that the store has committed some: it gathers a quarter second of
    lines per transaction, and the lines are judged ahead of the commits).
    Returns the fraction of the lines judged then."""
    cmd = [neardup_path(), "import", "--data", data, "--threads", "1", "--progress", src]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=clean_env())
    frac = None
    buf = b""
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stderr], [], [], 1.0)
            if not ready:
                continue
            chunk = os.read(proc.stderr.fileno(), 4096)
            if not chunk:
                break
            buf += chunk
            m = re.findall(rb"\] +[\d.]+% (\d+)/(\d+) lines", buf)
            if m:
                done, total = int(m[-1][0]), int(m[-1][1])
                if 0.6 * total <= done < total:
                    proc.send_signal(signal.SIGKILL)
                    frac = done / total
                    break
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    check(frac is not None and proc.returncode == -signal.SIGKILL,
          "not killed midway (exit %s): %r", proc.returncode, buf[-500:])
    return frac


@T.test
def kill_midway_then_rerun_finishes():
    src, docs = big_archive()
    # The uninterrupted import, for comparison.
    full = new_dir("data-full")
    ev_full, sum_full, _ = run_import(full, src, threads=1)
    check(sum_full["complete"] is True and sum_full["lines"] == BIG_LINES, sum_full)
    check(sum_full["errors"] == 0 and sum_full["duplicates"] > 0, sum_full)
    check(sum_full["imported"] + sum_full["duplicates"] == BIG_LINES, sum_full)
    check(sum_full["seconds"] > 0, sum_full)
    # Killed midway.
    cut = new_dir("data-cut")
    frac = kill_midway(cut, src)
    with Server(data_dir=full) as srv:
        want = read_docs(srv, docs)
    check(len(want) == sum_full["imported"], "%d documents, %d imported", len(want),
          sum_full["imported"])
    # No half-applied import: the killed store opens, and every document it
    # has is whole; they are the first ones the uninterrupted import
    # registered (commits in order, none half-written).
    with Server(data_dir=cut) as srv:
        have = read_docs(srv, docs)
        m = srv.metrics()
        check(m.get("neardup_documents") == len(have), "%s documents, %d readable",
              m.get("neardup_documents"), len(have))
    check(0 < len(have) < len(want), "killed at %.0f%%: %d of %d documents stored",
          frac * 100, len(have), len(want))
    print("  killed at %.0f%% of the lines: %d of %d documents stored"
          % (frac * 100, len(have), len(want)))
    accounts = dict(docs)
    for i_d, body in have.items():
        check(HEX16.match(body["simhash"]) and RFC3339_US.match(body["registered_at"]), body)
        check(body.get("account") == accounts[i_d] and body["chars"] >= 300, body)
        check(body.get("meta") == {"n": int(i_d[4:])}, body)
        check(i_d in want and body["simhash"] == want[i_d]["simhash"], "%s: %r", i_d, body)
    order = sorted(want, key=lambda i_d: (want[i_d]["registered_at"], i_d))
    check(set(have) == set(order[:len(have)]),
          "the killed store is not a prefix of the import: %d of %d", len(
              set(have) & set(order[:len(have)])), len(have))
    # The same command again finishes it.
    ev_re, sum_re, _ = run_import(cut, src, threads=1)
    check(sum_re["complete"] is True and sum_re["lines"] == BIG_LINES, sum_re)
    check(sum_re["existing"] == len(have), "existing %d, %d were stored", sum_re["existing"],
          len(have))
    check(sum_re["imported"] + sum_re["existing"] == sum_full["imported"], "resumed %r, full %r",
          sum_re, sum_full)
    check(sum_re["duplicates"] == sum_full["duplicates"] and sum_re["errors"] == 0,
          "resumed %r, full %r", sum_re, sum_full)
    dup_full = {(e["id"], e["source"]) for e in ev_full}
    dup_re = {(e["id"], e["source"]) for e in ev_re}
    check(dup_re <= dup_full, "duplicates only in the resumed run: %s", sorted(dup_re - dup_full))
    check(dup_re == dup_full, "duplicates missing from the resumed run: %s",
          sorted(dup_full - dup_re))
    with Server(data_dir=cut) as srv:
        got = read_docs(srv, docs)
    check(set(got) == set(want), "ids: %d only resumed, %d only uninterrupted",
          len(set(got) - set(want)), len(set(want) - set(got)))
    for i_d, body in want.items():
        g = got[i_d]
        for k in ("registered_at", "simhash", "account", "meta", "chars"):
            check(g.get(k) == body.get(k), "%s %s: resumed %r, uninterrupted %r", i_d, k,
                  g.get(k), body.get(k))


# ---- 4. not while neardupd holds the store ----

@T.test
def refused_while_neardupd_runs():
    src = os.path.join(TMP, "small.jsonl")
    with open(src, "wb") as f:
        f.write(SMALL)
    with Server() as srv:
        r = subprocess.run([neardup_path(), "import", "--data", srv.data_dir, "--no-progress",
                            src], capture_output=True, timeout=60, env=clean_env(),
                           stdin=subprocess.DEVNULL)
        err = r.stderr.decode("utf-8", "replace")
        check(r.returncode == 1, "exit %s: %s", r.returncode, err)
        check("POST /import" in err, "no hint at POST /import: %r", err)
        check(srv.json("GET", doc_path("x-early"))[0] == 404, "imported while running")
        check(srv.json("GET", "/healthz")[0] == 200)


# ---- 5. POST /import ----

def post_import(srv, body, ctype=NDJSON, headers=AUTH, timeout=120):
    hdrs = {"Content-Type": ctype}
    hdrs.update(headers or {})
    status, resp_headers, data = srv.request("POST", "/import", body, hdrs, timeout=timeout)
    try:
        parsed = json.loads(data) if data else None
    except ValueError:
        parsed = None
    return status, resp_headers, parsed


def check_import_answer(status, body):
    """A 200 answer of POST /import; returns (summary, events). Every caller
    sends its import after the previous one was answered: a 409 then is the
    server's fault (its one slot must be free once an import is answered)."""
    check(status != 409, "409 for an import sent after the previous one was answered: %r", body)
    check(status == 200, "POST /import: %s %r", status, body)
    check(set(body) == {"summary", "events", "events_truncated"}, "fields: %r", sorted(body))
    check(set(body["summary"]) == SUMMARY_KEYS, "summary fields: %r", body["summary"])
    check(body["events_truncated"] is False, body)
    return body["summary"], body["events"]


@T.test
def post_import_answers_as_the_cli():
    with Server(["--token-file", TOKEN_FILE, "--max-body", "1M"], sync=True) as srv:
        status, _, body = post_import(srv, SMALL, headers=None)
        expect_error(status, body, 401, "unauthorized")
        status, _, body = post_import(srv, SMALL, headers={"Authorization": "Bearer wrong"})
        expect_error(status, body, 401, "unauthorized")
        for ctype in ("text/plain", "application/x-ndjson; charset=latin1", None):
            hdrs = dict(AUTH) if ctype is None else dict(AUTH, **{"Content-Type": ctype})
            status, _, data = srv.request("POST", "/import", SMALL, hdrs)
            expect_error(status, json.loads(data), 415, "unsupported_media_type")
        status, _, body = post_import(srv, b"")
        expect_error(status, body, 400, "empty_body")
        status, _, body = post_import(srv, b"x" * (1024 * 1024 + 1))
        expect_error(status, body, 413, "body_too_large")
        check(srv.json("GET", doc_path("x-early"))[0] == 404, "imported by a refused request")
        # GET is not an import.
        status, _, _ = srv.request("GET", "/import")
        check(status == 405, "GET /import: %s", status)
        t_before = int(time.time() * 1e6)
        summary, events = check_import_answer(*post_import(srv, SMALL)[::2])
        check_summary(summary, SMALL_EXPECT)
        check_events(events, SMALL_EXPECT, SMALL_ORDER)
        if CLI_SMALL:
            check(counts(summary) == counts(CLI_SMALL["summary"]), "POST %r, CLI %r", summary,
                  CLI_SMALL["summary"])
            check(events == CLI_SMALL["events"], "events differ from the CLI's:\n%r\n%r",
                  events, CLI_SMALL["events"])
        check_store(srv, SMALL_EXPECT, t_before)
        check_verdicts(srv)
        check_copies(srv, SMALL_EXPECT)
        # Idempotent: the same body again registers nothing new.
        want = expected_summary(SMALL_EXPECT)
        summary2, events2 = check_import_answer(*post_import(srv, SMALL)[::2])
        check(summary2["imported"] == 0 and
              summary2["existing"] == want["imported"] + want["existing"], "again: %r", summary2)
        check(summary2["duplicates"] == want["duplicates"] and
              summary2["errors"] == want["errors"], "again: %r", summary2)
        check(events2 == events, "again, other events: %r", events2)
        # The other accepted media types.
        for ctype in ("application/jsonl", "application/json",
                      "application/x-ndjson; charset=utf-8"):
            one = (json.dumps({"id": "ct-" + ctype[12:17], "text": filler(90 + len(ctype)),
                               "registered_at": us_of(2023, 1, 1) + len(ctype)}) + "\n").encode()
            s, _, b = post_import(srv, one, ctype=ctype)
            summary3, _ = check_import_answer(s, b)
            check(summary3["imported"] == 1 and summary3["lines"] == 1, "%s: %r", ctype, summary3)
        # Acknowledged is durable: kill -9 right after an answer.
        more = ("\n".join(json.dumps({"id": "late-%d" % i, "text": filler(200 + i),
                                      "account": "zed", "registered_at": us_of(2024, 1, 1) + i})
                          for i in range(20)) + "\n").encode()
        summary4, _ = check_import_answer(*post_import(srv, more)[::2])
        check(summary4["imported"] == 20, summary4)
        srv.kill()
        srv.restart()
        check_store(srv, SMALL_EXPECT)
        check_copies(srv, SMALL_EXPECT)
        conn = srv.connect()
        try:
            for i in range(20):
                status, body = srv.json("GET", doc_path("late-%d" % i), conn=conn)
                check(status == 200 and body["registered_at"] == rfc3339(us_of(2024, 1, 1) + i),
                      "late-%d after kill -9: %s %r", i, status, body)
        finally:
            conn.close()


@T.test
def post_import_sequential_never_409():
    """One import at a time means at the same time: imports sent one after
    the other on a keep-alive connection, each after the previous answer,
    are all taken (the slot is free once an import is answered)."""
    with Server(["--token-file", TOKEN_FILE]) as srv:
        conn = srv.connect()
        refused = []
        try:
            for i in range(100):
                one = (json.dumps({"id": "seq-%d" % i, "text": filler(500 + i),
                                   "registered_at": us_of(2017, 1, 1) + i}) + "\n").encode()
                status, _, data = srv.request("POST", "/import", one,
                                              dict(AUTH, **{"Content-Type": NDJSON}), conn=conn)
                if status == 409:
                    refused.append(i)
                else:
                    check(status == 200, "seq-%d: %s %r", i, status, data)
        finally:
            conn.close()
        check(not refused, "%d of 100 imports sent after the previous answer got 409 "
              "import_running (imports %s)", len(refused), refused[:10])


@T.test
def post_import_one_at_a_time():
    """A second import while one runs: 409 import_running with Retry-After
    (best effort: skipped when the first one ends too soon)."""
    src, docs = big_archive()
    with open(src, "rb") as f:
        big = f.read()
    with Server(["--token-file", TOKEN_FILE, "--max-body", "64M"]) as srv:
        result = {}

        def send_big():
            try:
                result["big"] = post_import(srv, big, timeout=300)
            except Exception as e:  # noqa: BLE001 - reported below
                result["error"] = e

        th = threading.Thread(target=send_big, daemon=True)
        th.start()
        small = (json.dumps({"id": "while-1", "text": filler(300),
                             "registered_at": us_of(2019, 1, 1)}) + "\n").encode()
        conflict = None
        try:
            # Once the big import has registered documents it holds the slot.
            deadline = time.monotonic() + 120
            while th.is_alive() and time.monotonic() < deadline:
                if srv.metrics().get("neardup_documents", 0) >= 1:
                    break
                time.sleep(0.01)
            if th.is_alive():
                status, headers, body = post_import(srv, small, timeout=60)
                if status == 409:
                    conflict = (status, headers, body)
                else:  # the big import ended meanwhile
                    check(status == 200, "small import: %s %r", status, body)
        finally:
            th.join(300)
        check(not th.is_alive(), "the big import did not answer")
        check("error" not in result, "big import: %r", result.get("error"))
        summary, events = check_import_answer(result["big"][0], result["big"][2])
        check(summary["lines"] == BIG_LINES and summary["errors"] == 0, summary)
        check(summary["detections"] == summary["duplicates"] > 0, summary)
        check(len(events) == summary["duplicates"], "%d events: %r", len(events), summary)
        check(summary["imported"] + summary["existing"] + summary["duplicates"] == BIG_LINES,
              summary)
        if conflict is None:
            print("  skip: the big import ended before a second one could be sent")
        else:
            status, headers, body = conflict
            expect_error(status, body, 409, "import_running")
            print("  409 import_running while the big import ran")
            check("retry-after" in headers, "no Retry-After: %r", headers)
        # Afterwards imports are taken again.
        status, _, body = post_import(srv, small)
        summary, _ = check_import_answer(status, body)
        check(summary["imported"] + summary["existing"] == 1, summary)
        # The big import is all there.
        have = read_docs(srv, docs[:300])
        check(len(have) >= 280, "%d of the first 300 big documents", len(have))


@T.test
def post_import_stops_at_shutdown():
    """SIGTERM while an import runs (--drain-timeout 0): 503 shutting_down
    with the partial summary, complete false; every line judged is durable
    and sending the body again finishes it. Best effort on timing: skipped
    when the import ends before the signal lands."""
    src, docs = big_archive()
    with open(src, "rb") as f:
        big = f.read()
    with Server(["--token-file", TOKEN_FILE, "--max-body", "64M", "--drain-timeout", "0"],
                sync=True) as srv:
        result = {}

        def send_big():
            try:
                result["big"] = post_import(srv, big, timeout=300)
            except Exception as e:  # noqa: BLE001 - reported below
                result["error"] = e

        th = threading.Thread(target=send_big, daemon=True)
        th.start()
        try:
            deadline = time.monotonic() + 120
            while th.is_alive() and time.monotonic() < deadline:
                if srv.metrics().get("neardup_documents", 0) >= 50:
                    break
                time.sleep(0.02)
            srv.signal(signal.SIGTERM)
            code = srv.wait(60)
        finally:
            th.join(120)
        check(code == 0, "exit %s at SIGTERM during an import:\n%s", code, srv.log_tail())
        check(not th.is_alive() and "error" not in result, "no answer: %r", result)
        status, headers, body = result["big"]
        if status == 200:
            print("  skip: the import ended before the signal")
            return
        err = expect_error(status, body, 503, "shutting_down")
        check("retry-after" in headers, "no Retry-After: %r", headers)
        part = err.get("summary")
        check(isinstance(part, dict) and set(part) == SUMMARY_KEYS, "partial summary: %r", body)
        check(part["complete"] is False and 0 < part["lines"] == BIG_LINES, part)
        done = part["imported"] + part["existing"]
        print("  stopped at SIGTERM: %r" % part)
        check(0 < done < BIG_LINES, "partial: %r", part)
        srv.restart()
        have = srv.metrics().get("neardup_documents")
        check(have >= done, "%s documents after the restart, %d acknowledged", have, done)
        summary, _ = check_import_answer(*post_import(srv, big, timeout=300)[::2])
        check(summary["existing"] == have, "again: %r, %s were stored", summary, have)
        check(summary["imported"] + summary["existing"] + summary["duplicates"] == BIG_LINES
              and summary["errors"] == 0, "again: %r", summary)


LARGE_LINES = 70000  # above the start-up's FEED_MIN_DOCS (65,536): loaded with its helper threads


@T.test
def large_import_restart_finds_excerpts():
    """A store large enough that start-up loads it with its helper threads
    (arena blocks, and the anchors placed on their own thread while the
    scan goes on): after a restart every sampled document is found by the
    first half of its text (a SimHash ~10 bits away: only the anchors find
    it) and by its whole text, and new texts stay original."""
    import random
    rnd = random.Random(70)
    vocab = en_vocab()
    path = os.path.join(TMP, "large.jsonl")
    texts = []
    with open(path, "w", encoding="utf-8") as f:
        for i in range(LARGE_LINES):
            text = " ".join(rnd.choice(vocab) for _ in range(120))
            texts.append(text)
            f.write(json.dumps({"id": "L%05d" % i, "text": text,
                                "registered_at": us_of(2021, 1, 1) + i * 1000}) + "\n")
    data = new_dir("data-large")
    r, summary, _ = run_import(data, path, timeout=600)
    check(summary["imported"] == LARGE_LINES and summary["errors"] == 0, summary)
    srv = Server([], data_dir=data)
    try:
        srv.start()
        ready = [json.loads(l) for l in srv.log_text().splitlines()
                 if l.startswith("{") and '"ready"' in l]
        check(ready and ready[-1]["documents"] == LARGE_LINES, "ready line: %r", ready)
        conn = srv.connect()
        missed = []
        for i in rnd.sample(range(LARGE_LINES), 40):
            words = texts[i].split(" ")
            for part in (" ".join(words[:60]), texts[i]):
                status, b = srv.json("POST", "/check-original",
                                     {"text": part, "register": False}, conn=conn)
                ids = [m["id"] for m in b.get("matches", [])] if status == 200 else []
                if status != 200 or b["original"] is not False or ids[:1] != ["L%05d" % i]:
                    missed.append((i, len(part), status, b.get("verdict"), ids[:3]))
        check(not missed, "%d of 80 not found after the restart: %r", len(missed), missed[:5])
        fresh = 0
        for _ in range(10):
            text = " ".join(rnd.choice(vocab) for _ in range(120))
            status, b = srv.json("POST", "/check-original", {"text": text, "register": False},
                                 conn=conn)
            fresh += status == 200 and b["original"] is True
        check(fresh == 10, "new texts judged original: %d of 10", fresh)
        conn.close()
        check(srv.stop() == 0, "exit at SIGTERM:\n%s", srv.log_tail())
        srv.check_sanitizers()
    finally:
        srv.cleanup()
        shutil.rmtree(data, ignore_errors=True)


@T.test
def post_import_while_loading():
    """503 loading with Retry-After while the server loads its store, then
    the same request is taken."""
    tool = tool_path("ND_STORE_TOOL", ("tests", "store_tool"))
    if not os.path.exists(tool):
        print("  skip: store_tool not built: %s" % tool)
        return
    data = new_dir("data-loading")
    r = subprocess.run([tool, "fill", data, "200000"], capture_output=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    check(r.returncode == 0, "store_tool fill: %s %r", r.returncode, r.stderr)
    one = (json.dumps({"id": "while-loading", "text": filler(400),
                       "registered_at": us_of(2018, 5, 6)}) + "\n").encode()
    srv = Server(["--token-file", TOKEN_FILE], data_dir=data, wait_ready=False)
    try:
        srv.start()
        answers = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            status, headers, body = post_import(srv, one)
            answers.append((status, headers, body))
            if status != 503:
                break
            time.sleep(0.01)
        status, headers, body = answers[-1]
        summary, _ = check_import_answer(status, body)
        check(summary["imported"] == 1, summary)
        if len(answers) == 1:
            print("  skip: loaded before the first request")
        else:
            status, headers, body = answers[0]
            expect_error(status, body, 503, "loading")
            check("retry-after" in headers, "no Retry-After: %r", headers)
        status, body = srv.json("GET", doc_path("while-loading"))
        check(status == 200 and body["registered_at"] == rfc3339(us_of(2018, 5, 6)), body)
        check(srv.stop() == 0, "exit at SIGTERM:\n%s", srv.log_tail())
        srv.check_sanitizers()
    finally:
        srv.cleanup()
        shutil.rmtree(data, ignore_errors=True)


# ---- 6. copied_share: what /check-original says of the same text ----

def lead(name, want):
    """The first paragraphs of TEXTS[name] making up at least want code
    points."""
    out = []
    for part in TEXTS[name].split("\n\n"):
        out.append(part)
        if len("\n\n".join(out)) >= want:
            break
    return "\n\n".join(out)


def share_archive():
    """The sources (three zh and one en article, each its own account and
    time), then a splice of three of them, a near duplicate of the fourth
    and an unrelated article. Returns (the sources' lines, the copies'
    lines): dicts with id, text, account, registered_at."""
    t0 = us_of(2022, 3, 1)
    day = 86400 * 1000000
    sources = [{"id": "src-" + n, "text": TEXTS[n], "account": "author-" + n,
                "registered_at": t0 + i * day} for i, n in enumerate(("zh1", "zh2", "zh4", "en4"))]
    splice = "\n\n".join(lead(n, w) for n, w in (("zh1", 480), ("zh2", 420), ("zh4", 400)))
    copies = [{"id": "splice", "text": splice}, {"id": "near", "text": edit(TEXTS["en4"], 4, 2)},
              {"id": "own", "text": TEXTS["en5"]}]
    for i, c in enumerate(copies):
        c.update(account="mixer", registered_at=t0 + (10 + i) * day)
    return sources, copies


def lines_of(rows):
    return ("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n").encode("utf-8")


@T.test
def copied_share_as_check_original():
    """A spliced copy and a near duplicate imported (POST /import and
    `neardup import`) are listed with the copied_share /check-original
    gives for the same text against the same archive (within 0.001), and
    their source is its; the unrelated article is imported (no event) and
    /check-original finds none of it copied."""
    sources, copies = share_archive()
    want = {}  # id -> /check-original's answer on the sources alone
    with Server(["--token-file", TOKEN_FILE]) as ref:
        summary, events = check_import_answer(*post_import(ref, lines_of(sources))[::2])
        check(summary["imported"] == len(sources) and events == [], "sources: %r %r", summary,
              events)
        for c in copies:
            status, b = ref.json("POST", "/check-original",
                                 {"text": c["text"], "account": c["account"]}, headers=AUTH)
            check(status == 200, "check %s: %s %r", c["id"], status, b)
            want[c["id"]] = b
    check(want["splice"]["verdict"] == "compilation" and want["splice"]["copied_share"] > 0.9,
          "the splice: %r", want["splice"])
    check(want["near"]["verdict"] == "duplicate", "the near duplicate: %r", want["near"])
    check(want["own"]["original"] is True and want["own"]["copied_share"] <= 0.001,
          "the unrelated article: %r", want["own"])
    body = lines_of(sources + copies)
    with Server(["--token-file", TOKEN_FILE]) as srv:
        summary, events = check_import_answer(*post_import(srv, body)[::2])
        check(summary["imported"] == len(sources) + 1 and summary["duplicates"] == 2, summary)
        status, b = srv.json("GET", doc_path("own"))
        check(status == 200 and b["account"] == "mixer", "the unrelated article: %s %r", status, b)
    src = os.path.join(TMP, "share.jsonl")
    with open(src, "wb") as f:
        f.write(body)
    cli_events, cli_summary, _ = run_import(new_dir("data-share"), src)
    check(counts(cli_summary) == counts(summary), "CLI %r, POST %r", cli_summary, summary)
    check(cli_events == events, "the CLI's events differ:\n%r\n%r", cli_events, events)
    n_source = len(sources)
    got = {ev["id"]: ev for ev in events}
    check(set(got) == {"splice", "near"}, "events: %r", events)
    for i, ev in got.items():
        w = want[i]
        check(ev["line"] == n_source + 1 + [c["id"] for c in copies].index(i), ev)
        check(abs(ev["copied_share"] - w["copied_share"]) <= 0.001,
              "%s: the import says copied_share %s, /check-original %s", i, ev["copied_share"],
              w["copied_share"])
        check(ev["source"] == w["source"]["id"], "%s: source %s, /check-original's %s", i,
              ev["source"], w["source"]["id"])
        print("  %s: copied_share %s imported, %s checked" % (i, ev["copied_share"],
                                                            w["copied_share"]))


def main():
    try:
        T.run()
    finally:
        if os.environ.get("ND_KEEP_TMP") is None:
            shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    main()
