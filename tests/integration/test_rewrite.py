"""The verdict's third stage (rewrites, 洗稿) on a real neardupd on loopback.

A rewrite is made here, seeded, from an English and a Chinese article of
tests/integration/texts/long: a fifth of the words (en) or Han characters
(zh), one in each run of five, substituted (by another of the text's own or
of a short list), deleted or preceded by an inserted one.

- POST /compare: stage 2 alone would not list the rewrite (containment
  < 0.6, resemblance < 0.5) and the pair is kind "rewrite", its alignment
  within the rule, its passages the aligned stretches; `neardup compare`
  prints the same answer.
- /check-original after the article is registered: the rewrite is listed
  as kind "rewrite" with its alignment, it is the evidence (original false,
  verdict duplicate, the article the source), its passages are spans in
  both texts that share most of their words / characters and together
  cover at least half of the submitted text, and /compare with id_b gives
  the same passages.
- A spun copy with sentences of its own (long unaligned runs on the
  copy's side, 0.09-0.12 of its tokens) is a rewrite; the article checked
  against it (the runs on the registered side) is not.
- Texts on the same topic that are not rewrites (the article's sentences
  shuffled among another article's, which stage 2 leaves in the gray zone
  and the third stage aligns; other articles alone) are not listed.
- --rewrite-verdict review (and NEARDUP_REWRITE_VERDICT): listed, not
  evidence, the answer has "review": true; ignore: no third stage, nothing
  listed, no "review".
- --keep-text=false: a document registered without its text is never
  aligned, also once texts are kept again.
- POST /import of the rewrite, after the article's import and in the same
  import as the article: the rewrite's line is a duplicate of the article,
  as a check says, not registered, recorded as its copy (kind rewrite);
  the shuffled mix is imported.
- LMDB: the rewrite is still found after a restart (SIGTERM).
"""

import collections
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (TEXTS_DIR, Runner, Server, check, expect_error,  # noqa: E402
                     load_texts, neardup_path, neardupd_path)

T = Runner("test_rewrite")
TEXTS = load_texts()
TMP = tempfile.mkdtemp(prefix="neardup-rewrite-")
LANGS = ("en", "zh")
# The articles: a man page (8,693 characters) and a chapter of the Debian
# handbook (8,896 characters, 2,592 of them Han).
ARTICLE = {}
for _lang in LANGS:
    with open(os.path.join(TEXTS_DIR, "long", _lang + "-long.txt"), encoding="utf-8") as _f:
        ARTICLE[_lang] = _f.read()
DOC = {"en": "article-en", "zh": "article-zh"}
# Other articles of the same languages (the same Debian documentation).
OTHERS = {lang: "\n\n".join(TEXTS["%s%d" % (lang, i)] for i in range(1, 6)) for lang in LANGS}
EXTRA = {"en": ["really", "quite", "simply", "indeed", "perhaps", "usually", "often", "also",
                "then", "rather"],
         "zh": list("的了是在有和就也都而及与着或被把让给对从向")}
SHARE = 0.2  # of the words / Han characters edited


def is_han(c):
    return "\u4e00" <= c <= "\u9fff"


def rewrite(text, lang, seed):
    """text with SHARE of its words (en) or Han characters (zh) edited: one
    in each run of 1/SHARE, at a seeded place in the run, substituted (by
    one of the text's own or of EXTRA), deleted or preceded by an inserted
    one of EXTRA."""
    rng = random.Random("rewrite-%s-%s" % (lang, seed))
    if lang == "en":
        parts = re.split(r"(\s+)", text)
        units = [i for i, p in enumerate(parts) if p and not p.isspace()]
    else:
        parts = list(text)
        units = [i for i, c in enumerate(parts) if is_han(c)]
    vocab = sorted({parts[i] for i in units}) + EXTRA[lang]
    run = 1.0 / SHARE
    for k in range(int(len(units) * SHARE)):
        i = units[rng.randrange(int(k * run), min(len(units), int((k + 1) * run)))]
        op = rng.choice(("substitute", "substitute", "delete", "insert"))
        if op == "substitute":
            parts[i] = rng.choice(vocab)
        elif op == "delete":
            parts[i] = ""
            if lang == "en" and i + 1 < len(parts):
                parts[i + 1] = ""  # and the space after it
        else:
            parts[i] = rng.choice(EXTRA[lang]) + (" " if lang == "en" else "") + parts[i]
    return "".join(parts)


def sentences(text, lang):
    pat = r"(?<=[.!?:;])\s+|\n+" if lang == "en" else r"(?<=[。！？；：])|\n+"
    return [s.strip() for s in re.split(pat, text) if s and s.strip()]


def shuffled_mix(lang, seed=1):
    """Not a rewrite, on the article's topic: every sentence of the article,
    unchanged, shuffled among the sentences of the other articles, four
    sentences a paragraph."""
    rng = random.Random("mix-%s-%s" % (lang, seed))
    out = sentences(ARTICLE[lang], lang) + sentences(OTHERS[lang], lang)
    rng.shuffle(out)
    sep = " " if lang == "en" else ""
    return "\n\n".join(sep.join(out[i:i + 4]) for i in range(0, len(out), 4))


REWRITE = {lang: rewrite(ARTICLE[lang], lang, 1) for lang in LANGS}
MIX = {lang: shuffled_mix(lang) for lang in LANGS}


def tokens(s, lang):
    """Words (en), or Han characters and Latin words (zh)."""
    if lang == "en":
        return re.findall(r"\w+", s.lower())
    return re.findall(r"[\u4e00-\u9fff]|[A-Za-z0-9_]+", s)


def overlap(a, b, lang):
    """The tokens a and b share (as multisets), over the larger count."""
    x, y = collections.Counter(tokens(a, lang)), collections.Counter(tokens(b, lang))
    n = max(sum(x.values()), sum(y.values()))
    return sum((x & y).values()) / n if n else 0.0


def covered(ps):
    """Code points of the submitted text under the union of passages ps."""
    total, end = 0, 0
    for p in sorted(ps, key=lambda p: p["start"]):
        lo = max(p["start"], end)
        if p["end"] > lo:
            total += p["end"] - lo
            end = p["end"]
    return total


def check_passages(lang, ps, a, b, where):
    """Rewrite passages: valid spans on both sides whose texts share most
    of their tokens, covering at least half of a, in the order of a."""
    check(ps, "%s: no passages", where)
    for p in ps:
        check(0 <= p["start"] < p["end"] <= len(a) and
              0 <= p["source_start"] < p["source_end"] <= len(b),
              "%s: span %r outside the texts (%d, %d code points)", where, p, len(a), len(b))
        sa, sb = a[p["start"]:p["end"]], b[p["source_start"]:p["source_end"]]
        r = overlap(sa, sb, lang)
        check(r >= 0.5, "%s: passage %r shares %.2f of its tokens:\n%r\n%r", where, p, r,
              sa[:200], sb[:200])
    for x, y in zip(ps, ps[1:]):
        check(x["start"] <= y["start"], "%s: passages not sorted: %r %r", where, x, y)
    share = covered(ps) / len(a)
    check(share >= 0.5, "%s: passages cover %.2f of the submitted text", where, share)
    return share


def compare(srv, a, b=None, id_b=None, want=200):
    obj = {"text_a": a}
    if id_b is None:
        obj["text_b"] = b
    else:
        obj["id_b"] = id_b
    status, body = srv.json("POST", "/compare", obj, timeout=60)
    if want != 200:
        return status, body
    check(status == 200, "compare: %s %r", status, body)
    return body


def ask(srv, text, **extra):
    obj = {"text": text}
    obj.update(extra)
    status, body = srv.json("POST", "/check-original", obj, timeout=60)
    check(status == 200, "check: %s %r", status, body)
    return body


def register_articles(srv):
    for lang in LANGS:
        body = ask(srv, ARTICLE[lang], id=DOC[lang], register=True)
        check(body["registered"] is True and body["original"] is True,
              "%s: %r", DOC[lang], {k: body.get(k) for k in ("registered", "original",
                                                             "matches")})


def summary(body):
    return {"original": body.get("original"), "verdict": body.get("verdict"),
            "review": body.get("review"), "source": (body.get("source") or {}).get("id"),
            "matches": [(m["id"], m["kind"], m["resemblance"], m["containment"],
                         m.get("alignment")) for m in body.get("matches", [])]}


def rewrite_match(body, lang, where):
    """The one match of a check of REWRITE[lang]: the article, kind rewrite,
    with its alignment within the rule (other documents sharing a part of
    the text may be listed as quoted: never evidence, lib/share.h)."""
    ms = [m for m in body["matches"] if m["kind"] != "quoted"]
    check(len(ms) == 1 and ms[0]["id"] == DOC[lang] and ms[0]["kind"] == "rewrite",
          "%s: want the article listed as a rewrite: %r", where, summary(body))
    m = ms[0]
    al = m.get("alignment")
    check(isinstance(al, dict) and set(al) == {"coverage", "spread"}, "%s: alignment %r",
          where, al)
    check(al["coverage"] >= 0.5 and al["spread"] >= 0.35, "%s: alignment %r", where, al)
    check(m["containment"] < 0.6 and m["resemblance"] < 0.5, "%s: stage 2 would list it: %r",
          where, m)
    check_passages(lang, m.get("passages"), REWRITE[lang], ARTICLE[lang], where)
    return m


def expect_rewrite_evidence(srv, lang, where):
    """A check of the rewrite: the article, a rewrite, is the evidence."""
    body = ask(srv, REWRITE[lang])
    m = rewrite_match(body, lang, where)
    check(body["original"] is False and body["verdict"] == "duplicate",
          "%s: the rewrite is not evidence: %r", where, summary(body))
    check(body.get("source", {}).get("id") == DOC[lang], "%s: source %r", where,
          body.get("source"))
    check("review" not in body, "%s: review in a duplicate verdict: %r", where, summary(body))
    return m


def expect_not_listed(body, where, ids=None):
    """Nothing listed (or none of ids), original: a source holding a part of
    the text may be listed as quoted (never evidence, lib/share.h)."""
    ms = [m for m in body["matches"]
          if (ids is None or m["id"] in ids) and m["kind"] != "quoted"]
    check(not ms and body["original"] is True and "review" not in body,
          "%s: want no match, original: %r", where, summary(body))


def metric(srv, name):
    return srv.metrics().get(name, 0.0)


@T.test
def compare_says_rewrite_where_stage_two_would_not():
    with Server(in_memory=True) as srv:
        for lang in LANGS:
            a, b = REWRITE[lang], ARTICLE[lang]
            check(a != b and len(a) > 0.9 * len(b), "%s: the rewrite %d, the article %d", lang,
                  len(a), len(b))
            body = compare(srv, a, b)
            where = "compare %s" % lang
            check(body["containment"] < 0.6 and body["resemblance"] < 0.5,
                  "%s: stage 2 alone would list it (containment %s, resemblance %s): not a "
                  "test of the third stage", where, body["containment"], body["resemblance"])
            check(body["containment"] >= 0.05, "%s: not even in the gray zone: %r", where,
                  body["containment"])
            check(body["kind"] == "rewrite", "%s: kind %r, alignment %r", where, body["kind"],
                  body["alignment"])
            al = body["alignment"]
            check(set(al) == {"coverage_a", "coverage_b", "spread_a", "spread_b", "long_gaps_a",
                              "long_gaps_b", "tokens_a", "tokens_b", "segments"},
                  "%s: alignment keys %r", where, sorted(al))
            check(al["coverage_a"] >= 0.5 and min(al["spread_a"], al["spread_b"]) >= 0.35 and
                  max(al["long_gaps_a"], al["long_gaps_b"]) <= 0.10, "%s: %r", where, al)
            check(al["tokens_a"] > 0 and al["tokens_b"] > 0 and al["segments"] > 0, "%s: %r",
                  where, al)
            check(body["passages_truncated"] is False and
                  len(body["passages"]) == al["segments"],
                  "%s: %d passages for %d segments", where, len(body["passages"]),
                  al["segments"])
            share = check_passages(lang, body["passages"], a, b, where)
            print("     %s: containment %.3f resemblance %.3f coverage %.3f spread %.3f/%.3f, "
                  "%d passages over %.0f %%" % (lang, body["containment"], body["resemblance"],
                                                al["coverage_a"], al["spread_a"],
                                                al["spread_b"], len(body["passages"]),
                                                100 * share))
            # The article against itself: identical, not a rewrite.
            same = compare(srv, b, b)
            check(same["kind"] == "identical", "%s: itself: %r", where, same["kind"])
            # The CLI: the same answer.
            fa, fb = os.path.join(TMP, "a-" + lang), os.path.join(TMP, "b-" + lang)
            for path, text in ((fa, a), (fb, b)):
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
            r = subprocess.run([neardup_path(), "compare", fa, fb], stdin=subprocess.DEVNULL,
                               capture_output=True, timeout=60)
            check(r.returncode == 0, "neardup compare: %s %r", r.returncode, r.stderr[-300:])
            check(json.loads(r.stdout) == body, "%s: neardup compare differs:\n%s\n%r", where,
                  r.stdout[:600], body)
            # Not rewrites: the shuffled sentences are in the gray zone and
            # aligned, but not along the article; the other articles share
            # nothing.
            mix = compare(srv, MIX[lang], b)
            check(mix["kind"] is None and mix["containment"] >= 0.05,
                  "%s: the shuffled mix: kind %r containment %r %r", where, mix["kind"],
                  mix["containment"], mix["alignment"])
            other = compare(srv, OTHERS[lang], b)
            check(other["kind"] is None and other["passages"] == [], "%s: other articles: %r",
                  where, other["kind"])


def with_own_sentences(lang, k):
    """REWRITE[lang] with k sentences of the other articles inserted, one
    after every len/k-th paragraph break (a spun copy that adds sentences of
    its own: long unaligned runs on the copy's side only)."""
    paras = REWRITE[lang].split("\n\n")
    own = sentences(OTHERS[lang], lang)
    sep = " " if lang == "en" else ""
    step = max(1, len(paras) // (k + 1))
    out, added = [], 0
    for i, p in enumerate(paras):
        out.append(p)
        if added < k and (i + 1) % step == 0:
            out.append(sep.join(own[2 * added:2 * added + 2]))
            added += 1
    return "\n\n".join(out)


@T.test
def spun_copy_with_sentences_of_its_own():
    """The rule's long-gap limit is per side: a spun copy with sentences of
    its own holds more of its tokens in long unaligned runs than the
    original does (re-posts found on the web failed the rule at 0.10 and
    0.12 on the copy's side alone, against 0.09 for both sides before).
    Sentences of other articles are added to the rewrite until its
    long_gaps_a passes 0.09: /compare still says rewrite (long_gaps_a at
    most 0.12, long_gaps_b at most 0.09), and once the article is registered
    the copy is not original, the article its rewrite evidence."""
    with Server(in_memory=True) as srv:
        register_articles(srv)
        for lang in LANGS:
            where = "spun %s" % lang
            body, k = None, 0
            while k < 40:
                k += 1
                text = with_own_sentences(lang, k)
                body = compare(srv, text, ARTICLE[lang])
                if body["alignment"]["long_gaps_a"] > 0.09:
                    break
            al = body["alignment"]
            print("     %s: %d sentences added: %r, kind %r" % (lang, k, al, body["kind"]))
            check(0.09 < al["long_gaps_a"] <= 0.12, "%s: long gaps of the copy %r", where, al)
            check(al["long_gaps_b"] <= 0.09, "%s: long gaps of the article %r", where, al)
            check(body["kind"] == "rewrite", "%s: kind %r %r", where, body["kind"], al)
            ans = ask(srv, text)
            check(ans["original"] is False and (ans.get("source") or {}).get("id") == DOC[lang],
                  "%s: %r", where, summary(ans))
            kinds = {m["id"]: m["kind"] for m in ans["matches"]}
            check(kinds.get(DOC[lang]) == "rewrite", "%s: %r", where, kinds)
            # The other way round (the article checked against the copy
            # registered): the long runs are then on the registered side,
            # over its limit: not a rewrite.
            back = compare(srv, ARTICLE[lang], text)
            check(back["alignment"]["long_gaps_b"] > 0.09 and back["kind"] != "rewrite",
                  "%s, the other way round: %r %r", where, back["kind"], back["alignment"])


@T.test
def check_lists_rewrite_as_evidence():
    with Server(in_memory=True) as srv:
        register_articles(srv)
        for lang in LANGS:
            where = "check %s" % lang
            before = metric(srv, "neardup_rewrites_total")
            m = expect_rewrite_evidence(srv, lang, where)
            check(metric(srv, "neardup_rewrites_total") == before + 1,
                  "%s: neardup_rewrites_total did not count it", where)
            # /compare with the registered id: the same kind and passages.
            cmp = compare(srv, REWRITE[lang], id_b=DOC[lang])
            check(cmp["kind"] == "rewrite" and cmp["passages"] == m["passages"],
                  "%s: /compare with id_b: kind %r, %d passages; the match %d",
                  where, cmp["kind"], len(cmp["passages"]), len(m["passages"]))
            check(abs(cmp["alignment"]["coverage_a"] - m["alignment"]["coverage"]) < 1e-3,
                  "%s: coverage %r vs %r", where, cmp["alignment"], m["alignment"])
            # An account of its own sees the same evidence.
            body = ask(srv, REWRITE[lang], account="someone-else")
            check(body["original"] is False and body["matches"][0]["kind"] == "rewrite" and
                  body["matches"][0]["same_account"] is False, "%s, with an account: %r",
                  where, summary(body))
        # Not rewrites. The shuffled sentences: aligned (the gray zone), not
        # listed.
        for lang in LANGS:
            where = "shuffled mix %s" % lang
            aligned = metric(srv, "neardup_rewrite_stage_aligned_total")
            body = ask(srv, MIX[lang])
            check(metric(srv, "neardup_rewrite_stage_aligned_total") > aligned,
                  "%s: the third stage did not align it (no test of its rule)", where)
            check(not any(m["kind"] == "rewrite" for m in body["matches"]),
                  "%s: listed as a rewrite: %r", where, summary(body))
            expect_not_listed(body, where)
            expect_not_listed(ask(srv, OTHERS[lang]), "other articles " + lang)
        # The article itself: identical, no alignment.
        body = ask(srv, ARTICLE["en"])
        check(body["matches"][0]["kind"] == "identical" and
              "alignment" not in body["matches"][0], "the article: %r", summary(body))


@T.test
def review_lists_without_evidence():
    with Server(["--rewrite-verdict", "review"], in_memory=True) as srv:
        register_articles(srv)
        for lang in LANGS:
            where = "review %s" % lang
            body = ask(srv, REWRITE[lang])
            rewrite_match(body, lang, where)
            check(body["original"] is True and body["verdict"] == "original" and
                  body.get("review") is True and body.get("source") is None and
                  body["action"] == "publish",
                  "%s: want original with review: %r", where, summary(body))
            # Evidence of another kind still decides, without review.
            body = ask(srv, ARTICLE[lang])
            check(body["original"] is False and body["matches"][0]["kind"] == "identical" and
                  "review" not in body, "%s, the article itself: %r", where, summary(body))
    with Server([], in_memory=True, env={"NEARDUP_REWRITE_VERDICT": "review"}) as srv:
        register_articles(srv)
        body = ask(srv, REWRITE["zh"])
        rewrite_match(body, "zh", "NEARDUP_REWRITE_VERDICT=review")
        check(body["original"] is True and body.get("review") is True,
              "NEARDUP_REWRITE_VERDICT=review: %r", summary(body))
    for bad in ("maybe", ""):
        r = subprocess.run([neardupd_path(), "--in-memory", "--rewrite-verdict", bad],
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
        check(r.returncode != 0 and b"rewrite-verdict" in r.stderr,
              "--rewrite-verdict %r: %s %r", bad, r.returncode, r.stderr[-300:])


@T.test
def ignore_turns_the_third_stage_off():
    with Server(["--rewrite-verdict", "ignore"], in_memory=True) as srv:
        register_articles(srv)
        for lang in LANGS:
            where = "ignore %s" % lang
            cmp = compare(srv, REWRITE[lang], ARTICLE[lang])
            check(cmp["kind"] is None, "%s: /compare kind %r", where, cmp["kind"])
            # Stage 2 alone: the article is not listed (it is a candidate of
            # stage 1, which stage 2 must still reject), and the texts that
            # share less with it even less.
            for name, text in (("rewrite", REWRITE[lang]), ("shuffled mix", MIX[lang]),
                               ("other articles", OTHERS[lang])):
                expect_not_listed(ask(srv, text), "%s, %s" % (where, name))
        check(metric(srv, "neardup_rewrite_stage_aligned_total") == 0, "ignore aligned")


@T.test
def text_not_kept_is_not_aligned():
    data = os.path.join(TMP, "no-text")
    with Server(["--keep-text=false"], data_dir=data) as srv:
        register_articles(srv)
        for lang in LANGS:
            status, body = srv.json("GET", "/documents/%s?text=true" % DOC[lang])
            check(status == 200 and body["text_kept"] is False, "%s: %s %r", DOC[lang], status,
                  body.get("text_kept"))
            expect_not_listed(ask(srv, REWRITE[lang]), "--keep-text=false " + lang)
            status, body = compare(srv, REWRITE[lang], id_b=DOC[lang], want=409)
            expect_error(status, body, 409, "text_not_kept")
        check(metric(srv, "neardup_rewrite_stage_aligned_total") == 0,
              "aligned without a text")
    # Kept again: the documents registered then still have none.
    with Server([], data_dir=data) as srv:
        for lang in LANGS:
            expect_not_listed(ask(srv, REWRITE[lang]), "texts kept again, " + lang)


T0 = 1609459200 * 1000000  # 2021-01-01T00:00:00Z
DAY = 86400 * 1000000


def import_lines(srv, lines):
    """POST /import of lines (dicts); returns (summary, events)."""
    raw = "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines).encode()
    status, _, data = srv.request("POST", "/import", raw,
                                  {"Content-Type": "application/x-ndjson"}, timeout=120)
    check(status == 200, "POST /import: %s %r", status, data[:300])
    body = json.loads(data)
    check(body["events_truncated"] is False and body["summary"]["complete"] is True,
          "import: %r", body)
    return body["summary"], body["events"]


def article_line(lang):
    return {"id": DOC[lang], "text": ARTICLE[lang],
            "registered_at": T0 + 10 * LANGS.index(lang) * DAY}


def later_lines(lang):
    """The rewrite a day after the article, the shuffled mix two days."""
    at = article_line(lang)["registered_at"]
    return [{"id": "rw-" + lang, "text": REWRITE[lang], "registered_at": at + DAY},
            {"id": "mix-" + lang, "text": MIX[lang], "registered_at": at + 2 * DAY}]


def check_imported(srv, s, events, lines, want_lines):
    """The rewrite lines (at want_lines[lang]) are duplicates of the
    article, as a check says: an event naming the article as the source, not
    registered, recorded as the article's copy, a rewrite; the shuffled
    mixes are imported."""
    want = [{"line": want_lines[lang], "id": "rw-" + lang, "source": DOC[lang]}
            for lang in LANGS]
    shares = [ev.pop("copied_share", None) for ev in events]
    check(events == want, "import events %r, wanted %r (summary %r)", events, want, s)
    # a rewrite's copied share: at least its alignment's coverage of the text
    check(all(isinstance(x, float) and 0.8 <= x <= 1 for x in shares), "copied_share %r", shares)
    check((s["lines"], s["duplicates"], s["detections"], s["errors"]) == (lines, 2, 2, 0) and
          s["imported"] == lines - 2, "import summary %r", s)
    for lang in LANGS:
        where = "import " + lang
        status, _ = srv.json("GET", "/documents/rw-" + lang)
        check(status == 404, "%s: the rewrite registered: %s", where, status)
        status, _ = srv.json("GET", "/documents/mix-" + lang)
        check(status == 200, "%s: the shuffled mix not registered: %s", where, status)
        status, copies = srv.json("GET", "/documents/%s/copies" % DOC[lang])
        check(status == 200, "%s: copies: %s %r", where, status, copies)
        got = [(c["id"], c["kind"]) for c in copies["copies"]]
        check(got == [("rw-" + lang, "rewrite")], "%s: copies %r", where, got)
        # A check says the same: the article is the source.
        expect_rewrite_evidence(srv, lang, where + ", then a check")


@T.test
def import_rewrite_of_a_document_imported_before():
    """The articles imported, then (another POST /import) the rewrites."""
    with Server([]) as srv:
        s, events = import_lines(srv, [article_line(lang) for lang in LANGS])
        check(s["imported"] == 2 and not events, "the articles: %r %r", s, events)
        s, events = import_lines(srv, [x for lang in LANGS for x in later_lines(lang)])
        check_imported(srv, s, events, 4, {"en": 1, "zh": 3})


@T.test
def import_rewrite_in_the_same_import():
    """One POST /import: each article, its rewrite, its shuffled mix."""
    with Server([]) as srv:
        s, events = import_lines(srv, [x for lang in LANGS
                                       for x in [article_line(lang)] + later_lines(lang)])
        check_imported(srv, s, events, 6, {"en": 2, "zh": 5})


@T.test
def rewrite_found_after_a_restart():
    data = os.path.join(TMP, "restart")
    with Server([], data_dir=data) as srv:
        register_articles(srv)
    with Server([], data_dir=data) as srv:
        for lang in LANGS:
            expect_rewrite_evidence(srv, lang, "after a restart, " + lang)


if __name__ == "__main__":
    try:
        T.run()
    finally:
        if os.environ.get("ND_KEEP_TMP") is None:
            shutil.rmtree(TMP, ignore_errors=True)
