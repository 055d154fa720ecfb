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


# ---- a middle quarter under chrome of ~40 % of the copy ----

EN_CHROME = ("portal weekly digest reader forum gallery archive subscribe newsletter sponsor "
             "travel recipes garden music movies sports weather market podcast events "
             "classifieds jobs housing autos contest quiz horoscope puzzle comics letters "
             "opinion editorial columnist tribune herald gazette courier chronicle").split()
ZH_CHROME = ("旅游美食健康汽车房产教育游戏体育娱乐财经时尚母婴宠物摄影读书星座"
             "彩票天气招聘婚恋家居装修理财基金股票期货黄金外汇保险银行信用卡")


def chrome(lang, chars, seed):
    """The re-poster's own text of about `chars` characters: a site's
    menus, recommended links and notices, in no registered document."""
    import random
    rnd = random.Random(seed)
    out = []
    while sum(len(x) for x in out) < chars:
        if lang == "en":
            out.append(" ".join(rnd.choice(EN_CHROME) for _ in range(8)).capitalize() + ".\n")
        else:
            out.append("".join(rnd.choice(ZH_CHROME) for _ in range(16)) + "。\n")
    return "".join(out)


def framed(lang):
    """The middle quarter of the long article under a header and above a
    footer that together are ~42 % of the copy: the copy's containment in
    the article is below the 0.6 of the plain rule; its core (the stretch
    between the first and the last shingle found) is the article's."""
    t = LONG[lang]
    n = len(t)
    body = t[int(n * 0.375):int(n * 0.625)]
    extra = int(len(body) * 0.42 / 0.58)
    return chrome(lang, extra * 2 // 5, 11) + "\n" + body + "\n\n" + chrome(lang, extra * 3 // 5, 12)


@T.test
def chrome_framed_excerpt_found_by_check_and_import():
    """A middle quarter framed by ~42 % chrome is a partial copy of its
    article whether it comes to /check-original or in an import: the
    positions of its shingles travel with its sketch (sketch.h
    nd_sketch.pos), so both paths judge it alike."""
    import json as _json
    import tempfile
    copies = {lang: framed(lang) for lang in ("zh", "en")}
    with Server(sync=False) as srv:
        for lang in ("zh", "en"):
            status, b = srv.json("POST", "/check-original",
                                 {"id": "LONG-" + lang, "text": LONG[lang], "register": True})
            check(status == 200 and b["registered"] is True, "%s: %s %r", lang, status, b)
        for lang, text in copies.items():
            status, b = srv.json("POST", "/check-original", {"text": text}, timeout=60)
            kinds = [(m["id"], m["kind"]) for m in b.get("matches", [])]
            check(status == 200 and b["verdict"] == "partial_copy" and
                  ("LONG-" + lang, "partial_copy") in kinds,
                  "check: %s framed copy: %s %s %r", lang, status, b.get("verdict"), b)
    tmp = tempfile.mkdtemp(prefix="neardup-excerpts-")
    token = "excerpts-token-0123456789abcdef"
    tokens = os.path.join(tmp, "tokens")
    with open(tokens, "w") as f:
        f.write("backfill %s\n" % token)
    os.chmod(tokens, 0o600)
    lines = []
    for i, lang in enumerate(("zh", "en")):
        lines.append({"id": "LONG-" + lang, "text": LONG[lang],
                      "registered_at": "2020-01-0%dT00:00:00Z" % (i + 1)})
        lines.append({"id": "COPY-" + lang, "text": copies[lang],
                      "registered_at": "2021-01-0%dT00:00:00Z" % (i + 1)})
    body = "".join(_json.dumps(x, ensure_ascii=False) + "\n" for x in lines).encode()
    with Server(["--token-file", tokens, "--max-body", "1M"], sync=True) as srv:
        status, _, data = srv.request("POST", "/import", body,
                                      {"Content-Type": "application/x-ndjson",
                                       "Authorization": "Bearer " + token}, timeout=120)
        check(status == 200, "POST /import: %s %r", status, data)
        answer = _json.loads(data)
        found = {ev["id"]: ev.get("source") for ev in answer["events"]}
        for lang in ("zh", "en"):
            check(found.get("COPY-" + lang) == "LONG-" + lang,
                  "import: %s framed copy: %r", lang, answer)
        check(answer["summary"]["imported"] == 2 and answer["summary"]["duplicates"] == 2,
              "import summary: %r", answer["summary"])


if __name__ == "__main__":
    T.run()
