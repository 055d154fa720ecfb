"""Partial copies are found whatever else is registered (audit F03).

A document's anchors (the 16 shingles with the smallest hashes) are public:
`neardup sketch` prints them. Decoy posts built offline so that their own
anchors are a chosen text's (its anchor shingles joined by separator words)
used to crowd the 32 verified candidates and to make anchors "hot" (held by
more than 64 documents: skipped), so that a 60 % copy of an original X was
judged original. Here 1000 decoys from 40 accounts, half carrying all the
anchors of the copy C, half 11 of X's 16 each (~340 holders per anchor of
X), are registered after X: C and five
other partial copies of X still name X, before and after a restart (the
start-up load keeps each anchor's earliest documents), and a check of C
costs a bounded number of verifications.
"""

import json
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Runner, Server, check, neardup_path, word_article as article  # noqa: E402

T = Runner("test_decoys")

FILLER = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
          "november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee "
          "zulu").split()
DECOYS = 1000
ACCOUNTS = 40



def sketch_lines(texts):
    inp = "".join(json.dumps({"id": str(i), "text": t}) + "\n" for i, t in enumerate(texts))
    r = subprocess.run([neardup_path(), "sketch", "--jsonl"], input=inp.encode(),
                       capture_output=True, timeout=120)
    check(r.returncode == 0, "neardup sketch: %s", r.stderr[-400:])
    return [json.loads(line) for line in r.stdout.decode().splitlines()]


def anchor_windows(text):
    """The text's anchors that are the shingle of a 3-word window, and those
    windows."""
    anchors = sketch_lines([text])[0]["anchors"]
    w = text.split()
    wins = [w[i:i + 3] for i in range(len(w) - 2)]
    found = {}
    for x, o in zip(wins, sketch_lines([" ".join(x) for x in wins])):
        if o["anchors"] and o["anchors"][0] in anchors:
            found[o["anchors"][0]] = x
    return [a for a in anchors if a in found], [found[a] for a in anchors if a in found]


def decoys(text, count, seed, carry=None, exclude=(), pad=0):
    """count distinct texts each indexed under `carry` (default: all) of
    text's anchors but those in exclude: the windows of those anchors (a
    random choice of them per text) joined by random separator words, pad
    random words after them, kept when the text's own anchors include them
    all; tried in batches."""
    anchors, wins = anchor_windows(text)
    keep = [i for i, a in enumerate(anchors) if a not in exclude]
    check(len(keep) >= 6, "anchor windows: %d", len(keep))
    carry = carry or len(keep)
    rnd = random.Random(seed)
    sep = lambda: "q%dz%09dk%06d" % (seed, rnd.randrange(10**9), rnd.randrange(10**6))
    out = []
    for _ in range(40):
        cands, wanted = [], []
        for _ in range(1000):
            pick = sorted(rnd.sample(keep, carry))
            words = list(wins[pick[0]])
            for i in pick[1:]:
                words += [sep()] + list(wins[i])
            words += [sep() for _ in range(pad)]
            cands.append(" ".join(words))
            wanted.append(set(anchors[i] for i in pick))
        for cand, want, o in zip(cands, wanted, sketch_lines(cands)):
            if want <= set(o["anchors"]) and not set(exclude) & set(o["anchors"]):
                out.append(cand)
        if len(out) >= count:
            return out[:count]
    raise AssertionError("only %d of %d decoys found" % (len(out), count))


def check_text(srv, text, **kw):
    body = dict(kw, text=text)
    status, b = srv.json("POST", "/check-original", body, timeout=60)
    check(status == 200, "%s %r", status, b)
    return b


def names_x(b):
    return b["original"] is False and b["verdict"] == "partial_copy" and \
        "X" in [m["id"] for m in b["matches"]]


def summary(b):
    return "original=%s verdict=%s matches=%s" % (
        b["original"], b["verdict"], [(m["id"], m["kind"]) for m in b["matches"]][:5])


@T.test
def test_decoys_do_not_hide_a_partial_copy(srv):
    x = article(4242, 220)
    xw = x.split()
    rnd = random.Random(9)
    c = " ".join(xw[:140] + [rnd.choice(FILLER) for _ in range(90)])  # 60 % of X
    copies = [c]
    rnd = random.Random(11)
    for _ in range(5):
        start = rnd.randint(0, 60)
        copies.append(" ".join(xw[start:start + 140] + [rnd.choice(FILLER) for _ in range(90)]))
    # Built offline, from the public CLI only, before anything is registered.
    t0 = time.monotonic()
    crowd = decoys(c, DECOYS // 2, 1)   # indexed under every anchor of the copy
    blind = decoys(x, DECOYS // 2, 2, 11)  # under 11 of the original's 16 each
    print("  %d decoys built in %.1f s" % (DECOYS, time.monotonic() - t0), flush=True)

    b = check_text(srv, x, id="X", account="alice", register=True)
    check(b["registered"] and b["original"], "X: %s", summary(b))
    for i, cp in enumerate(copies):
        b = check_text(srv, cp, account="mallory")
        check(names_x(b), "copy %d before the decoys: %s", i, summary(b))

    t0 = time.monotonic()
    conn = srv.connect(60)
    originals = 0
    for k in range(DECOYS):
        text = crowd[k // 2] if k % 2 == 0 else blind[k // 2]
        body = {"id": "decoy-%d" % k, "account": "acct-%d" % (k % ACCOUNTS), "text": text,
                "register": True}
        status, b = srv.json("POST", "/check-original", body, timeout=60, conn=conn)
        check(status == 200 and b["registered"], "decoy %d: %s %r", k, status, b)
        originals += bool(b["original"])
    conn.close()
    print("  %d decoys registered (%d judged original) in %.1f s"
          % (DECOYS, originals, time.monotonic() - t0), flush=True)
    check(originals >= DECOYS * 9 // 10, "decoys judged original: %d", originals)

    def all_found(when):
        for i, cp in enumerate(copies):
            t = time.monotonic()
            b = check_text(srv, cp, account="mallory")
            check(names_x(b), "copy %d %s: %s", i, when, summary(b))
            check(b["action"] != "publish", "copy %d %s: action %s", i, when, b["action"])
            print("  copy %d %s: partial copy of X, %d matches, %.1f ms"
                  % (i, when, len(b["matches"]), 1000 * (time.monotonic() - t)), flush=True)

    all_found("after %d decoys" % DECOYS)
    srv.restart()
    all_found("after a restart")


@T.test
def test_decoys_do_not_hide_an_excerpt(srv):
    """An excerpt holding one anchor of its source X is found through it:
    of the documents holding a single anchor of the query, each anchor's
    earliest are verified. 400 decoys carry 6 of the excerpt's other anchors
    each (more than X shares), 100 more that one anchor of X; some
    take slots freed by documents deleted after X was registered."""
    x = article(777, 900)
    xw = x.split()
    anchors, wins = anchor_windows(x)
    # where each anchor window sits in X
    at = {}
    for a, w in zip(anchors, wins):
        for i in range(len(xw) - 2):
            if xw[i:i + 3] == w:
                at[a] = i
                break
    # an excerpt of 66 words around exactly one anchor window of X
    e, one = None, None
    for a, i in sorted(at.items(), key=lambda kv: kv[1]):
        lo = max(0, i - 30)
        inside = [b for b, j in at.items() if lo <= j and j + 3 <= lo + 66]
        if inside == [a]:
            e, one = " ".join(xw[lo:lo + 66]), a
            break
    check(e is not None, "no excerpt with a single anchor of X")
    e_anchors = sketch_lines([e])[0]["anchors"]
    check(one in e_anchors, "the excerpt holds X's anchor")
    crowd = decoys(e, 400, 3, carry=6, exclude=(one,), pad=12)  # 6 of its other anchors
    blind = []
    rnd = random.Random(5)
    while len(blind) < 100:  # X's anchor in the excerpt, and filler
        cands = [" ".join(wins[anchors.index(one)] + ["w%dk%d" % (len(blind), rnd.randrange(10**9))
                                                      for _ in range(40)]) for _ in range(200)]
        blind += [c for c, o in zip(cands, sketch_lines(cands)) if one in o["anchors"]]
    blind = blind[:100]

    junk = [article(9000 + i, 80) for i in range(100)]
    for i, t in enumerate(junk):  # registered before X, deleted after: free slots below X's
        b = check_text(srv, t, id="junk-%d" % i, account="mallory", register=True)
        check(b["registered"], "junk %d", i)
    b = check_text(srv, x, id="X", account="alice", register=True)
    check(b["registered"] and b["original"], "X: %s", summary(b))
    b = check_text(srv, e, account="mallory")
    check(names_x(b), "the excerpt before the decoys: %s", summary(b))
    for i in range(len(junk)):
        status, _ = srv.json("DELETE", "/documents/junk-%d" % i)
        check(status in (200, 204), "delete junk %d: %s", i, status)
    conn = srv.connect(60)
    for k, text in enumerate(blind + crowd):  # blind first: the freed slots
        body = {"id": "decoy-%d" % k, "account": "acct-%d" % (k % ACCOUNTS), "text": text,
                "register": True}
        status, b = srv.json("POST", "/check-original", body, timeout=60, conn=conn)
        check(status == 200 and b["registered"], "decoy %d: %s %r", k, status, b)
    conn.close()
    for when in ("after %d decoys" % (len(crowd) + len(blind)), "after a restart"):
        if when.startswith("after a"):
            srv.restart()
        t = time.monotonic()
        b = check_text(srv, e, account="mallory")
        check(names_x(b), "the excerpt %s: %s", when, summary(b))
        print("  the excerpt %s: partial copy of X, %d matches, %.1f ms"
              % (when, len(b["matches"]), 1000 * (time.monotonic() - t)), flush=True)


if __name__ == "__main__":
    # The decoys of one generator carry the same anchor windows in the same
    # order, so the third stage would call each a rewrite of the first and
    # refuse to register it (as it should an attacker's); this test is about
    # the candidate stage, so it registers them all with the third stage off.
    T.run(fresh=lambda: Server(args=("--rewrite-verdict", "ignore")))
