"""POST /compare and `neardup compare` against a real neardupd.

- Every kind the verdict gives (identical, near duplicate, partial copy, and
  the evasions: Traditional characters, look-alike letters with zero-width
  spaces), each pair's passages checked against the two texts: the
  substring of A at [start, end) and of B at [source_start, source_end)
  read the same (compared again through /compare: resemblance 1.0, or a
  near duplicate where words were edited inside the passage), and they sit
  where the copy came from.
- Unrelated texts: kind null, no passage.
- /check-original's matches carry the same passages (each read from the
  kept text of the document), equal to /compare with id_b, in the LMDB mode
  before and after a restart; with --keep-text false a match has none and
  /compare with id_b answers 409 text_not_kept.
- The endpoint and the CLI give the same bytes for 1,000 dev pairs (edited
  copies with their sources, natural pairs, negatives: ../shared/eval, or
  $ND_EVAL_DATA), or for the pairs of tests/integration/texts when the
  evaluation data is not there.
- Bad input: clear JSON errors; the read right with --auth-all.
"""

import gzip
import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (SOURCE_ROOT, TEXTS_DIR, Runner, Server, check, expect_error,  # noqa: E402
                     load_texts, neardup_path)

T = Runner("test_compare")
TEXTS = load_texts()
LONG = {}
for lang in ("zh", "en"):
    with open(os.path.join(TEXTS_DIR, "long", lang + "-long.txt"), encoding="utf-8") as f:
        LONG[lang] = f.read()

HEAD = {"zh": "本站首页 | 新闻 | 技术 | 社区 | 关于我们\n当前位置：首页 > 技术文章 > 正文\n\n",
        "en": "Home | News | Tech | Community | About us\nYou are here: Home > Articles > Reading\n\n"}
FOOT = {"zh": "\n\n本文转载自网络，版权归原作者所有。如有侵权请联系删除。\n相关文章推荐 | 返回顶部",
        "en": "\n\nThis article was reposted from the web; rights belong to its author.\n"
              "Related articles | Back to top"}
# Simplified -> Traditional, characters OpenCC's t2s reads back one for one.
S2T = dict(zip("们为过软个发这时对会还经开级编库务译", "們為過軟個發這時對會還經開級編庫務譯"))


def edited(text, every=25):
    """A word replaced every `every` words (a light edit)."""
    words = text.split(" ")
    for i in range(every, len(words), every):
        words[i] = "zzq" + words[i]
    return " ".join(words)


def middle(lang):
    """The middle quarter of the long text under chrome, and its offset."""
    t = LONG[lang]
    lo, hi = int(len(t) * 0.375), int(len(t) * 0.625)
    return HEAD[lang] + t[lo:hi] + FOOT[lang], lo, hi


def cases():
    """(name, A, B, kind wanted, exact: passages read exactly the same)."""
    zh_t = "".join(S2T.get(c, c) for c in TEXTS["zh2"])
    en_h = TEXTS["en2"].replace("a", "\u0430").replace("o", "\u043e").replace(" the ",
                                                                               " th\u200be ")
    out = [("identical zh", TEXTS["zh1"], TEXTS["zh1"], "identical", True),
           ("identical en", TEXTS["en3"], TEXTS["en3"], "identical", True),
           ("near duplicate en", edited(TEXTS["en5"]), TEXTS["en5"], "near_duplicate", False),
           ("traditional zh", zh_t, TEXTS["zh2"], "near_duplicate", True),
           ("look-alikes en", en_h, TEXTS["en2"], "near_duplicate", True)]
    for lang in ("zh", "en"):
        a, _, _ = middle(lang)
        out.append(("partial copy " + lang, a, LONG[lang], "partial_copy", True))
    return out


def compare(srv, a, b):
    status, body = srv.json("POST", "/compare", {"text_a": a, "text_b": b}, timeout=60)
    check(status == 200, "compare: %s %r", status, body)
    return body


def check_passages(srv, name, a, b, body, exact):
    """Each pair's two spans read the same, compared again."""
    ps = body["passages"]
    check(ps, "%s: no passages: %r", name, body)
    for p in ps:
        check(0 <= p["start"] < p["end"] <= len(a) and
              0 <= p["source_start"] < p["source_end"] <= len(b), "%s: %r", name, p)
        sa, sb = a[p["start"]:p["end"]], b[p["source_start"]:p["source_end"]]
        again = compare(srv, sa, sb)
        if exact:
            check(again["resemblance"] == 1.0 and again["kind"] in ("identical", "near_duplicate")
                  and again["chars_a"] == again["chars_b"]
                  and again["shingles_a"] == again["shingles_b"],
                  "%s: %r and %r read differently: %r", name, sa[:80], sb[:80], again)
        else:
            check(again["kind"] in ("identical", "near_duplicate"),
                  "%s: %r and %r: %r", name, sa[:80], sb[:80], again)
    for x, y in zip(ps, ps[1:]):
        check(x["start"] <= y["start"], "%s: not sorted: %r", name, ps)


@T.test
def every_kind_with_passages_on_both_sides():
    with Server(in_memory=True) as srv:
        for name, a, b, kind, exact in cases():
            body = compare(srv, a, b)
            check(body["kind"] == kind, "%s: kind %r, wanted %s", name, body["kind"], kind)
            check_passages(srv, name, a, b, body, exact)
            covered = sum(p["end"] - p["start"] for p in body["passages"])
            # copied_share: the part of A (code points) inside the passages
            # of at least 32 code points, 4 decimals.
            union, end = 0, 0
            for p in sorted(body["passages"], key=lambda p: p["start"]):
                if p["end"] - p["start"] >= 32:
                    union += max(0, p["end"] - max(p["start"], end))
                    end = max(end, p["end"])
            check(body["copied_share"] == round(union / len(a), 4),
                  "%s: copied_share %r, the passages hold %d of %d code points", name,
                  body["copied_share"], union, len(a))
            if kind != "partial_copy":  # the whole text, but its edges
                check(covered > 0.95 * len(a.strip()), "%s: %d of %d covered", name, covered,
                      len(a))
        # The copied quarter: one pair, its source side where it came from.
        for lang in ("zh", "en"):
            a, lo, hi = middle(lang)
            body = compare(srv, a, LONG[lang])
            ps = body["passages"]
            check(len(ps) == 1, "%s: %r", lang, ps)
            p = ps[0]
            check(lo <= p["source_start"] < lo + 12 and hi - 24 < p["source_end"] <= hi,
                  "%s: source [%d, %d), copied [%d, %d)", lang, p["source_start"],
                  p["source_end"], lo, hi)
            check(len(HEAD[lang]) <= p["start"] < len(HEAD[lang]) + 12, "%s: %r", lang, p)
            check(body["integrity_a"]["script"] == ("simplified" if lang == "zh" else None),
                  "%s: %r", lang, body["integrity_a"])


@T.test
def reordered_paragraphs_pair_with_their_own():
    with Server(in_memory=True) as srv:
        ps = [TEXTS["en1"], TEXTS["en2"], TEXTS["en3"]]
        b = "\n\n".join(ps)
        a = "\n\n".join([ps[1], ps[0], ps[2]])
        body = compare(srv, a, b)
        got = body["passages"]
        check(len(got) == 3, "%r", got)
        starts = [0, len(ps[0]) + 2, len(ps[0]) + len(ps[1]) + 4]
        for p, want in zip(got, [starts[1], starts[0], starts[2]]):
            check(want <= p["source_start"] < want + 8, "%r, wanted source at %d", p, want)
        check_passages(srv, "reordered", a, b, body, True)


@T.test
def unrelated_texts_no_kind_no_passages():
    with Server(in_memory=True) as srv:
        for x, y in (("en1", "en3"), ("zh1", "zh3"), ("en2", "zh2")):
            body = compare(srv, TEXTS[x], TEXTS[y])
            check(body["kind"] is None and body["passages"] == [], "%s/%s: %r", x, y, body)
            check(body["passages_truncated"] is False and body["copied_share"] == 0.0, "%r",
                  body)


SOURCES = {"zh": "zh2", "en": "en2"}


def registered_cases():
    """(name, submitted text, registered id, its text, kind wanted, exact)."""
    out = []
    for name, a, b, kind, exact in cases():
        doc = [k for k, v in list(TEXTS.items()) + [("long-" + x, t) for x, t in LONG.items()]
               if v == b][0]
        out.append((name, a, doc, b, kind, exact))
    return out


def check_matches(srv, when):
    """Each case's match carries its passages on both sides, equal to what
    /compare gives with id_b, and they read the same in the two texts."""
    seen = {}
    for name, a, doc, b, kind, exact in registered_cases():
        status, body = srv.json("POST", "/check-original", {"text": a}, timeout=60)
        check(status == 200, "%s: %s %r", name, status, body)
        ms = [m for m in body["matches"] if m["id"] == doc]
        check(ms and ms[0]["kind"] == kind, "%s (%s): %r", name, when, body["matches"])
        m = ms[0]
        check("passages" in m, "%s (%s): no passages: %r", name, when, m)
        check_passages(srv, name, a, b, m, exact)
        status, cmp = srv.json("POST", "/compare", {"text_a": a, "id_b": doc}, timeout=60)
        check(status == 200 and cmp["passages"] == m["passages"] and cmp["kind"] == kind,
              "%s (%s): /compare with id_b %s %r, the match %r", name, when, status, cmp, m)
        seen[name] = m["passages"]
    return seen


@T.test
def check_matches_carry_passages_across_a_restart():
    with Server() as srv:  # LMDB
        docs = dict(TEXTS)
        docs.update({"long-" + x: t for x, t in LONG.items()})
        for doc, text in sorted(docs.items()):
            status, body = srv.json("POST", "/check-original",
                                    {"id": doc, "text": text, "register": True}, timeout=60)
            check(status == 200 and body["registered"], "%s: %s %r", doc, status, body)
        before = check_matches(srv, "registered")
        # an original lists nothing and reads nothing
        status, body = srv.json("POST", "/check-original", {"text": "A text of its own " * 30})
        check(status == 200 and body["matches"] == [], "%r", body)
        srv.restart()
        after = check_matches(srv, "after a restart")
        check(before == after, "passages changed across the restart: %r / %r", before, after)


@T.test
def texts_not_kept_say_so():
    with Server(["--keep-text", "false"]) as srv:
        status, body = srv.json("POST", "/check-original",
                                {"id": "kept-not", "text": TEXTS["en1"], "register": True})
        check(status == 200 and body["registered"], "%s %r", status, body)
        copy = edited(TEXTS["en1"])
        status, body = srv.json("POST", "/check-original", {"text": copy})
        check(status == 200 and body["matches"] and "passages" not in body["matches"][0],
              "%s %r", status, body)
        # the same text: its passages need no kept text
        status, body = srv.json("POST", "/check-original", {"text": TEXTS["en1"]})
        m = body["matches"][0] if status == 200 and body["matches"] else {}
        check(m.get("kind") == "identical" and len(m.get("passages", [])) == 1, "%r", body)
        status, body = srv.json("POST", "/compare", {"text_a": TEXTS["en1"], "id_b": "kept-not"})
        expect_error(status, body, 409, "text_not_kept")
        check(body["error"].get("id") == "kept-not", "%r", body)


def eval_dir():
    for d in (os.environ.get("ND_EVAL_DATA"),
              os.path.join(SOURCE_ROOT, "..", "shared", "eval", "data")):
        if d and os.path.exists(os.path.join(d, "edited.jsonl.gz")):
            return d
    return None


def dev_pairs(n):
    """n pairs of the dev set: edited copies with their sources (every kind),
    natural pairs and negatives; or, without it, the shipped texts' pairs."""
    d = eval_dir()
    if d is None:
        print("note: no evaluation data: the shipped texts' pairs instead")
        names = sorted(TEXTS)
        return [(TEXTS[x], TEXTS[y]) for x in names for y in names]
    corpus = {}
    with gzip.open(os.path.join(d, "corpus.jsonl.gz"), "rt", encoding="utf-8") as f:
        for line in f:
            o = json.loads(line)
            corpus[o["id"]] = o["text"]
    rnd = random.Random(35)
    copies = []
    with gzip.open(os.path.join(d, "edited.jsonl.gz"), "rt", encoding="utf-8") as f:
        for line in f:
            o = json.loads(line)
            if o["src"] in corpus:
                copies.append((o["text"], corpus[o["src"]]))
    pairs = rnd.sample(copies, min(len(copies), n * 6 // 10))
    for name in ("natural_pairs.jsonl", "negatives.jsonl"):
        with open(os.path.join(d, name), encoding="utf-8") as f:
            rows = [json.loads(line) for line in f]
        rows = [r for r in rows if r["a"] in corpus and r["b"] in corpus]
        for r in rnd.sample(rows, min(len(rows), n * 2 // 10)):
            pairs.append((corpus[r["b"]], corpus[r["a"]]))
    return pairs[:n]


@T.test
def endpoint_and_cli_give_the_same_bytes():
    n = int(os.environ.get("ND_COMPARE_PAIRS", "1000"))
    pairs = dev_pairs(n)
    check(len(pairs) >= min(n, 100), "%d pairs", len(pairs))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "pairs.jsonl")
        with open(path, "w", encoding="utf-8") as f:
            for a, b in pairs:
                f.write(json.dumps({"text_a": a, "text_b": b}) + "\n")
        r = subprocess.run([neardup_path(), "compare", "--jsonl", path], capture_output=True,
                           timeout=600)
        check(r.returncode == 0, "cli: %s %r", r.returncode, r.stderr[-500:])
        lines = r.stdout.split(b"\n")[:-1]
        check(len(lines) == len(pairs), "%d lines for %d pairs", len(lines), len(pairs))
    kinds = {}
    with Server(in_memory=True) as srv:
        conn = srv.connect(60)
        for i, (a, b) in enumerate(pairs):
            body = json.dumps({"text_a": a, "text_b": b}).encode()
            status, _, data = srv.request("POST", "/compare", body,
                                          {"Content-Type": "application/json"}, conn=conn)
            check(status == 200, "pair %d: %s %r", i, status, data[:300])
            check(data.rstrip(b"\n") == lines[i],
                  "pair %d differs:\nendpoint %r\ncli      %r", i, data[:400], lines[i][:400])
            k = json.loads(data)["kind"]
            kinds[k] = kinds.get(k, 0) + 1
        conn.close()
    print("%d pairs identical; kinds %r" % (len(pairs), kinds))


@T.test
def bad_input_clear_errors():
    with tempfile.TemporaryDirectory() as tmp:
        token = os.path.join(tmp, "token")
        with open(token, "w") as f:
            f.write("nd-test-compare-5a1e9c0b7d3f42e6a8c1\n")
        os.chmod(token, 0o600)
        with Server(["--max-text", "1000", "--token-file", token, "--auth-all"],
                    in_memory=True) as srv:
            auth = {"Authorization": "Bearer nd-test-compare-5a1e9c0b7d3f42e6a8c1"}
            status, body = srv.json("POST", "/compare", {"text_a": "x", "text_b": "y"})
            expect_error(status, body, 401, "unauthorized")
            status, body = srv.json("POST", "/compare", {"text_a": "a b c", "text_b": "a b c"},
                                    headers=auth)
            check(status == 200 and body["kind"] == "identical", "%s %r", status, body)
            for obj, field in (({"text_b": "x"}, "text_a"), ({"text_a": "x"}, "text_b"),
                               ({"text_a": 1, "text_b": "x"}, "text_a"),
                               ({"text_a": "x", "text_b": None}, "text_b"),
                               ({"text_a": "x", "text_b": ["y"]}, "text_b"),
                               ({"text_a": "x", "text_b": "y", "id_b": "d"}, "id_b"),
                               ({"text_a": "x", "id_b": 7}, "id_b"),
                               ({"text_a": "x", "id_b": ""}, "id_b"),
                               ({"text_a": "x" * 1001, "text_b": "y"}, "text_a"),
                               ({"text_a": "x", "text_b": "y" * 1001}, "text_b")):
                status, body = srv.json("POST", "/compare", obj, headers=auth)
                expect_error(status, body, 400, "invalid_field", field)
            for raw in (b"{", b"[]", b"{\"text_a\": \"\xff\", \"text_b\": \"x\"}", b""):
                status, body = srv.json("POST", "/compare", raw=raw, headers=auth)
                expect_error(status, body, 400, "invalid_json")
            status, body = srv.json("POST", "/compare", {"text_a": "x", "id_b": "nobody"},
                                    headers=auth)
            expect_error(status, body, 404, "not_found")
            status, _, _ = srv.request("GET", "/compare", headers=auth)
            check(status == 405, "GET: %s", status)
            status, _, _ = srv.request("POST", "/compare", b"a", {"Content-Type": "text/plain",
                                                                   **auth})
            check(status == 415, "text/plain: %s", status)


if __name__ == "__main__":
    T.run()
