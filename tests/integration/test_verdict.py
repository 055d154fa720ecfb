"""The verdict of /check-original against a real neardupd.

Each verdict kind (identical, near duplicate with a footer, a
partial copy with its passages checked against the texts, original), the
same after a restart (LMDB store), a partial copy never registered.
A registration still waiting for its commit is never evidence
(an LD_PRELOAD shim slows fsync, then fails the commit); the verdict is
exact however many documents lie within k (more than the 1,024 nearest).
"""

import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (Runner, Server, check, distance, fsync_shim_env,  # noqa: E402
                     load_texts, tool_path)

T = Runner("test_verdict")
TEXTS = load_texts()
STORE_TOOL = tool_path("ND_STORE_TOOL", ("tests", "store_tool"))
NEARDUP = tool_path("NEARDUP", ("server", "neardup"))


def shim_env(tmp):
    """Environment preloading the fsync shim, and its two control files
    (absent: fsync as usual)."""
    delay, fail = os.path.join(tmp, "delay"), os.path.join(tmp, "fail")
    return fsync_shim_env(delay, fail), delay, fail


def fingerprint(text):
    r = subprocess.run([NEARDUP, "fingerprint"], input=text.encode(), capture_output=True,
                       timeout=30)
    check(r.returncode == 0, "neardup fingerprint: %s", r.stderr)
    return r.stdout.decode().strip()


def check_req(srv, obj, timeout=60):
    status, body = srv.json("POST", "/check-original", obj, timeout=timeout)
    check(status == 200, "%s %r", status, body)
    return body


def ids_of(body):
    return [m["id"] for m in body["matches"]]


# -- the verdict kinds --

FOOTER = "\n\n转载请注明出处。本文首发于某某技术社区，作者保留所有权利，未经许可不得转载。"


def excerpt_of(original, other):
    """A new article: about 40 % of original's paragraphs, verbatim, then a
    part of another text a quarter as long. Returns (text, copied prefix)."""
    paras = original.split("\n")
    copied, n = [], 0
    for p in paras:
        copied.append(p)
        n += len(p)
        if n >= len(original) * 0.4:
            break
    copied_text = "\n".join(copied)
    new = other[:int(len(copied_text) * 0.25)]
    return copied_text + "\n\n" + new, copied_text


def verdict_of(b):
    return b["verdict"], [(m["id"], m["kind"]) for m in b["matches"]]


def thresholds(srv):
    """The server's --min-resemblance and --min-containment (start-up log)."""
    for r in srv.log_records():
        if r.get("msg") == "starting neardupd":
            return r["config"]["min_resemblance"], r["config"]["min_containment"]
    raise AssertionError("no start-up line")


def check_kinds(srv, texts):
    a_text, other = texts
    min_r, min_c = thresholds(srv)
    # identical
    b = check_req(srv, {"text": a_text})
    check(verdict_of(b) == ("duplicate", [("A", "identical")]) and b["original"] is False
          and b["matches"][0]["resemblance"] == 1.0 and b["passages"] == [], "identical: %r", b)
    # near duplicate: a site footer added
    b = check_req(srv, {"text": a_text + FOOTER})
    check(verdict_of(b) == ("duplicate", [("A", "near_duplicate")]), "footer: %r", b)
    m = b["matches"][0]
    check(min_r <= m["resemblance"] < 1 and m["containment"] >= m["resemblance"], m)
    # partial copy: half of A inside a new article, passages point at it
    text, copied = excerpt_of(a_text, other)
    b = check_req(srv, {"text": text})
    check(verdict_of(b) == ("partial_copy", [("A", "partial_copy")]), "excerpt: %r", b)
    m = b["matches"][0]
    check(m["resemblance"] < min_r and m["containment"] >= min_c, m)
    check(b["passages"], "no passages: %r", b)
    covered = 0
    prev_end = -1
    for p in b["passages"]:
        s, e = p["start"], p["end"]
        check(prev_end < s < e <= len(text), "passages not sorted and disjoint: %r", b["passages"])
        prev_end = e
        check(text[s:e] in a_text, "passage %r is not in the original", text[s:e])
        covered += e - s
    check(covered >= 0.8 * len(copied), "passages cover %d of %d copied code points",
          covered, len(copied))
    # original
    b = check_req(srv, {"text": other})
    check(verdict_of(b) == ("original", []) and b["original"] is True and b["passages"] == [],
          "unrelated: %r", b)
    return text


@T.test
def verdict_kinds_and_restart():
    a_text, other = TEXTS["zh3"], TEXTS["zh4"]
    with Server(sync=False) as srv:
        b = check_req(srv, {"id": "A", "text": a_text, "register": True})
        check(b["registered"] is True and b["verdict"] == "original", b)
        excerpt = check_kinds(srv, (a_text, other))
        # A partial copy is not original: registering it does nothing.
        b = check_req(srv, {"id": "P", "text": excerpt, "register": True})
        check(b["verdict"] == "partial_copy" and b["registered"] is False, b)
        status, _ = srv.json("GET", "/documents/P")
        check(status == 404, "a partial copy was registered")
        srv.restart()
        # The anchors and sketches come back from the store.
        check_kinds(srv, (a_text, other))


@T.test
def english_verdicts_in_memory():
    a_text, other = TEXTS["en3"], TEXTS["en4"]
    with Server(in_memory=True) as srv:
        b = check_req(srv, {"id": "A", "text": a_text, "register": True})
        check(b["registered"] is True, b)
        check_kinds(srv, (a_text, other))


# -- pending registrations are never evidence --

@T.test
def pending_never_evidence():
    tmp = tempfile.mkdtemp(prefix="nd-verdict-")
    env, delay, fail = shim_env(tmp)
    text = TEXTS["zh1"]
    with Server(env=env, sync=True) as srv:
        with open(delay, "w") as f:
            f.write("1500")
        open(fail, "w").close()
        x_result = {}

        def register_x():
            x_result["r"] = srv.json("POST", "/check-original",
                                     {"id": "X", "text": text, "register": True,
                                      "meta": {"who": "x"}}, timeout=60)

        tx = threading.Thread(target=register_x, daemon=True)
        tx.start()
        time.sleep(0.4)  # X is pending: its commit sleeps 1.5 s, then fails
        check(tx.is_alive(), "X was answered before its commit: %r", x_result)
        # A query with X's id and text: X does not exist yet.
        b = check_req(srv, {"id": "X", "text": text})
        check(b["registered"] is False and "registered_at" not in b,
              "pending X reported as registered: %r", b)
        check(b["original"] is True and b["matches"] == [], "pending X is evidence: %r", b)
        # An anonymous query does not list X.
        b = check_req(srv, {"text": text, "k": 8})
        check("X" not in ids_of(b) and b["original"] is True, "pending X listed: %r", b)
        # GET does not show it.
        status, _ = srv.json("GET", "/documents/X")
        check(status == 404, "GET of pending X: %s", status)
        # Y, another id with the same text, registering: must not be refused
        # because of X; it waits for X's commit, which fails.
        y_result = {}

        def register_y():
            y_result["r"] = srv.json("POST", "/check-original",
                                     {"id": "Y", "text": text, "register": True}, timeout=60)

        ty = threading.Thread(target=register_y, daemon=True)
        ty.start()
        time.sleep(0.3)
        check(ty.is_alive(), "Y answered while X pending: %r", y_result)
        tx.join(30)
        check(not tx.is_alive(), "X not answered")
        status, body = x_result["r"]
        check(status == 503, "X's failed commit answered %s %r", status, body)
        os.unlink(fail)  # Y's commit (after X's) succeeds
        ty.join(60)
        check(not ty.is_alive(), "Y not answered")
        status, body = y_result["r"]
        check(status == 200 and body["original"] is True and body["registered"] is True
              and body["matches"] == [], "Y after X failed: %s %r", status, body)
        status, _ = srv.json("GET", "/documents/X")
        check(status == 404, "X exists after its failed commit: %s", status)
        status, body = srv.json("GET", "/documents/Y")
        check(status == 200, "Y not stored: %s %r", status, body)
        os.unlink(delay)
        # Y is evidence now that it is committed.
        b = check_req(srv, {"id": "Z", "text": text, "register": True})
        check(b["original"] is False and ids_of(b) == ["Y"], "Z: %r", b)


@T.test
def pending_then_committed_is_evidence():
    """A registration waiting for a pending near-duplicate gets the verdict
    once that one commits: not original, naming it."""
    tmp = tempfile.mkdtemp(prefix="nd-verdict-")
    env, delay, _ = shim_env(tmp)
    text = TEXTS["en1"]
    with Server(env=env, sync=True) as srv:
        with open(delay, "w") as f:
            f.write("800")
        res = {}

        def reg(name):
            res[name] = srv.json("POST", "/check-original",
                                 {"id": name, "text": text, "register": True}, timeout=60)

        ta = threading.Thread(target=reg, args=("A",), daemon=True)
        ta.start()
        time.sleep(0.3)
        tb = threading.Thread(target=reg, args=("B",), daemon=True)
        tb.start()
        ta.join(30)
        tb.join(30)
        os.unlink(delay)
        sa, ba = res["A"]
        sb, bb = res["B"]
        check(sa == 200 and ba["original"] is True and ba["registered"] is True, "A: %r", ba)
        check(sb == 200 and bb["original"] is False and bb["registered"] is False
              and ids_of(bb) == ["A"], "B: %r", bb)


# -- the verdict is exact past the 1,024 nearest --

def flip(h_hex, bits):
    v = int(h_hex, 16)
    for b in bits:
        v ^= 1 << b
    return "%016x" % v


@T.test
def verdict_exact_past_truncation():
    """Z registered; X at distance 8 from Z; 1,100 newer documents at
    distance 4 from X. Re-checking X with k = 8 must name Z (the index
    cuts its answer to the nearest 1,024, all of them newer than X)."""
    base = TEXTS["zh2"]
    x_text = base
    z_text = base + "\n\n转载请注明出处。"
    x_hash = fingerprint(x_text)
    z_hash = flip(x_hash, range(0, 8))
    t0 = 1_700_000_000_000_000
    lines = [json.dumps({"id": "Z", "simhash": z_hash, "registered_at_us": t0,
                         "text": z_text, "chars": 900}),
             json.dumps({"id": "X", "simhash": x_hash, "registered_at_us": t0 + 1000,
                         "text": x_text, "chars": 900})]
    n = 1100
    for i in range(n):
        bits = [(i + j * 13) % 64 for j in range(4)]
        bits = sorted(set(bits))
        while len(bits) < 4:
            bits.append((bits[-1] + 1) % 64)
            bits = sorted(set(bits))
        h = flip(x_hash, bits)
        check(distance(h, x_hash) == 4)
        lines.append(json.dumps({"id": "N%d" % i, "simhash": h,
                                 "registered_at_us": t0 + 2000 + i,
                                 "text": base + "\n" + str(i), "chars": 900}))
    with Server() as srv:
        srv.stop()
        r = subprocess.run([STORE_TOOL, "put", srv.data_dir],
                           input=("\n".join(lines) + "\n").encode(), capture_output=True,
                           timeout=120)
        check(r.returncode == 0, "store_tool: %s %s", r.stdout, r.stderr)
        srv.restart()
        b = check_req(srv, {"id": "X", "text": x_text, "k": 8})
        check(b["registered"] is True, "X: %r", b)
        check(b["original"] is False and "Z" in ids_of(b),
              "X re-checked at k=8 lost Z (truncated %s, %d matches)", b.get("truncated"),
              len(b["matches"]))
        # A new text near X: every document is older, so the verdict holds
        # too, and the list is cut to --max-matches.
        b = check_req(srv, {"text": x_text, "k": 8})
        check(b["original"] is False and b["truncated"] is True and len(b["matches"]) == 100,
              "anonymous: %s %d", b["original"], len(b["matches"]))


if __name__ == "__main__":
    T.run()
