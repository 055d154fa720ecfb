"""Short excerpts of long articles against a real neardupd.

A registered document is indexed under anchors whose number grows with its
length (one per 48 character-mode / 12 word-mode shingles, 16..64: sketch.h
ND_ANCHORS_SCALED, proto/sketch.md section 5), and a query probes as many of
its own. So a page quoting the first 10 % of a long article, or a middle
quarter of it under its own site chrome, finds the article as a partial
copy; with 16 anchors each, these first-10 % excerpts shared none. The same
after a restart (the anchors come back from the LMDB records).

Texts: tests/integration/texts/long/ (real Debian documentation from the
eval corpus, see texts/SOURCES).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import TEXTS_DIR, Runner, Server, check, load_texts  # noqa: E402

T = Runner("test_excerpts")
SHORT = load_texts()
LONG = {}
for lang in ("zh", "en"):
    with open(os.path.join(TEXTS_DIR, "long", lang + "-long.txt"), encoding="utf-8") as f:
        LONG[lang] = f.read()

HEAD = {"zh": "本站首页 | 新闻 | 技术 | 社区 | 关于我们\n当前位置：首页 > 技术文章 > 正文\n\n",
        "en": "Home | News | Tech | Community | About us\nYou are here: Home > Articles > Reading\n\n"}
FOOT = {"zh": "\n\n本文转载自网络，版权归原作者所有。如有侵权请联系删除。\n相关文章推荐 | 返回顶部",
        "en": "\n\nThis article was reposted from the web; rights belong to its author.\n"
              "Related articles | Back to top"}


def excerpts(lang):
    """(name, text): the first 10 % of the long article, and its middle
    quarter under a site header and above a footer."""
    t = LONG[lang]
    n = len(t)
    first = t[:n // 10]
    middle = HEAD[lang] + t[int(n * 0.375):int(n * 0.625)] + FOOT[lang]
    check(n >= 5000 and len(first) >= 300, "%s: %d characters", lang, n)
    return [("first 10%", first), ("middle 25% +chrome", middle)]


def check_excerpts(srv, when):
    missed = []
    for lang in ("zh", "en"):
        for name, text in excerpts(lang):
            status, b = srv.json("POST", "/check-original", {"text": text}, timeout=60)
            check(status == 200, "%s %s: %s %r", lang, name, status, b)
            kinds = [(m["id"], m["kind"]) for m in b["matches"]]
            if b["verdict"] != "partial_copy" or ("LONG-" + lang, "partial_copy") not in kinds:
                missed.append("%s %s (%d characters): %s %r"
                              % (lang, name, len(text), b["verdict"], kinds))
    check(not missed, "%s: excerpts not found as partial copies: %s", when, "; ".join(missed))


@T.test
def excerpts_of_long_articles_found():
    with Server(sync=False) as srv:
        for name, text in sorted(SHORT.items()):  # other documents beside them
            status, b = srv.json("POST", "/check-original",
                                 {"id": name, "text": text, "register": True})
            check(status == 200, "%s: %s %r", name, status, b)
        for lang in ("zh", "en"):
            status, b = srv.json("POST", "/check-original",
                                 {"id": "LONG-" + lang, "text": LONG[lang], "register": True})
            check(status == 200 and b["registered"] is True, "%s: %s %r", lang, status, b)
        check_excerpts(srv, "registered")
        srv.restart()
        check_excerpts(srv, "after a restart")


if __name__ == "__main__":
    T.run()
