"""How much of a text is someone else's against a real neardupd:
the copied share, each source's share, and the verdicts below the
partial-copy bar (lib/share.h, proto/sketch.md section 8).

- compilation: runs of paragraphs of three registered articles, none
  holding half of the text: not original, verdict compilation, every
  source listed with kind compiled, its share and its own action (one of
  them forbids reprints: block), copied_share all of the text;
- quotation: a third of the text from one registered article inside an
  unregistered one, on a server with --min-quote-share 0.3 (set through
  NEARDUP_MIN_QUOTE_SHARE): not original, kind quotation; at the default
  (no quotation verdict) the same text stays original, the source quoted;
- quoted: a short quotation (about 15 %) stays original; the source is
  listed with kind quoted, its share, no action, and counts in
  copied_share; with --min-source-share 0 it is not listed at all.

The shares are checked against the texts: a source's share is the part of
the submitted text (code points) its run makes up, within a few points (a
passage starts at its first shingle and ends at its last). Texts: the
shipped tests/integration/texts (real, unrelated Debian documentation).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Runner, Server, check, load_texts  # noqa: E402

T = Runner("test_compilation")
TEXTS = load_texts()
TOLERANCE = 0.04


def paragraphs(name, want):
    """The start of TEXTS[name] making up about want code points: cut at
    the first line or sentence end from there on."""
    t = TEXTS[name]
    ends = [i + 1 for i in (t.find("\n", want), t.find("\u3002", want), t.find(". ", want))
            if i >= 0]
    return t[:min(ends)].strip() if ends else t.strip()


def compose(parts):
    """The text of the parts joined by blank lines, and each part's
    [start, end) in code points."""
    text, spans = "", []
    for p in parts:
        if text:
            text += "\n\n"
        spans.append((len(text), len(text) + len(p)))
        text += p
    return text, spans


def register(srv, name, **extra):
    status, b = srv.json("POST", "/check-original",
                         dict({"id": name, "text": TEXTS[name], "register": True}, **extra))
    check(status == 200 and b["registered"] is True and b["original"] is True,
          "register %s: %s %r", name, status, b)


def ask(srv, text):
    status, b = srv.json("POST", "/check-original", {"text": text}, timeout=60)
    check(status == 200, "check: %s %r", status, b)
    return b


def by_id(b):
    return {m["id"]: m for m in b["matches"]}


def near(got, want, what):
    check(abs(got - want) <= TOLERANCE, "%s: %.4f, want %.4f +- %.2f", what, got, want, TOLERANCE)


def summary(b):
    return {k: b.get(k) for k in ("original", "verdict", "copied_share", "share_estimated",
                                  "action")} | {
        "matches": [(m["id"], m["kind"], m.get("share"), m.get("action"))
                    for m in b["matches"]]}


@T.test
def compilation_of_three_articles():
    for lang in ("zh", "en"):
        names = [lang + "1", lang + "2", lang + "3"]
        parts = [paragraphs(n, w) for n, w in zip(names, (520, 420, 380))]
        text, spans = compose(parts)
        for (s, e), n in zip(spans, names):
            check((e - s) / len(text) < 0.5, "%s holds half of the text", n)
        with Server(in_memory=True) as srv:
            register(srv, names[0])
            register(srv, names[1])
            register(srv, names[2], reprint="forbid")
            b = ask(srv, text)
            where = "compilation %s: %r" % (lang, summary(b))
            check(b["original"] is False and b["verdict"] == "compilation", where)
            ms = by_id(b)
            for (s, e), n in zip(spans, names):
                m = ms.get(n)
                check(m is not None and m["kind"] == "compiled", where)
                near(m["share"], (e - s) / len(text), "%s share of %s" % (lang, n))
                check(m["containment"] < 0.6 and m["resemblance"] < 0.5, where)
            check(ms[names[0]]["action"] == "publish_as_reprint", where)
            check(ms[names[2]]["action"] == "block", where)
            # the source is the earliest claim: the first one registered
            check(b["source"]["id"] == names[0] and b["action"] == "publish_as_reprint", where)
            near(b["copied_share"], sum(e - s for s, e in spans) / len(text), "copied " + lang)
            check(b["copied_share"] >= 0.9, where)
            # the answer's passages: the union of the sources' spans
            cover = sum(p["end"] - p["start"] for p in b["passages"])
            near(cover / len(text), b["copied_share"], "passages " + lang)


def quoted_text(host, source, share):
    """host's text with a run of source's paragraphs making up about share
    of the result inserted at a paragraph boundary in its middle; the
    run's span."""
    h = TEXTS[host].split("\n\n")
    run = paragraphs(source, int(share * len(TEXTS[host]) / (1 - share)))
    mid = len(h) // 2
    before = "\n\n".join(h[:mid])
    text = before + "\n\n" + run + "\n\n" + "\n\n".join(h[mid:])
    start = len(before) + 2
    return text, (start, start + len(run))


@T.test
def quotation_at_its_share():
    text, (s, e) = quoted_text("en5", "en1", 0.35)
    share = (e - s) / len(text)
    check(0.3 <= share < 0.5, "the quotation's share %.3f", share)
    with Server(in_memory=True, env=dict(os.environ, NEARDUP_MIN_QUOTE_SHARE="0.3")) as srv:
        register(srv, "en1")
        b = ask(srv, text)
        where = "quotation: %r" % summary(b)
        check(b["original"] is False and b["verdict"] == "quotation", where)
        m = by_id(b).get("en1")
        check(m is not None and m["kind"] == "quotation" and m["action"] == "publish_as_reprint",
              where)
        near(m["share"], share, "quotation share")
        near(b["copied_share"], share, "quotation copied share")
        check(b["source"]["id"] == "en1", where)
    with Server(in_memory=True) as srv:  # the default: no quotation verdict
        register(srv, "en1")
        b = ask(srv, text)
        where = "quotation at the defaults: %r" % summary(b)
        check(b["original"] is True and b["verdict"] == "original", where)
        m = by_id(b).get("en1")
        check(m is not None and m["kind"] == "quoted" and "action" not in m, where)


@T.test
def short_quotation_stays_original():
    for host, source in (("en5", "en2"), ("zh5", "zh4")):
        text, (s, e) = quoted_text(host, source, 0.15)
        share = (e - s) / len(text)
        with Server(in_memory=True) as srv:
            register(srv, source)
            b = ask(srv, text)
            where = "quoted %s: %r" % (source, summary(b))
            check(b["original"] is True and b["verdict"] == "original" and
                  b["action"] == "publish", where)
            m = by_id(b).get(source)
            check(m is not None and m["kind"] == "quoted" and "action" not in m, where)
            near(m["share"], share, "quoted share of " + source)
            near(b["copied_share"], share, "quoted copied share " + source)
            check(b["passages"] == [], where)
        with Server(in_memory=True, args=["--min-source-share", "0"]) as srv:
            register(srv, source)
            b = ask(srv, text)
            check(b["original"] is True and b["matches"] == [] and b["copied_share"] == 0,
                  "--min-source-share 0: %r", summary(b))


if __name__ == "__main__":
    T.run()
