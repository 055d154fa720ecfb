"""Copies a reader cannot tell from the original, against a real neardupd.

Each evasion a re-poster uses against a checker that reads characters, not
text: a Simplified article converted to Traditional (and the reverse) by
OpenCC's own converter (the `opencc` command), Latin letters swapped for
Cyrillic and Greek look-alikes or for small capitals and IPA letters,
invisible and blank characters (format characters too) sprinkled between
letters, the text reversed under a right-to-left override, a Mandarin reading in
brackets after most Han characters (原(yuán)创(chuàng)). Each copy must be found (duplicate, its source first among
the matches) and the answer's `integrity` must say what was hidden, counted
exactly where the test knows the count, while an ordinary article (with
emoji joiners and variation selectors) reports nothing. Real Russian text
is not read as Latin: a Russian article and its Latin-look-alike twin match
each other and nothing English, and Latin brand names in it are not swaps. neardup_check_integrity_total counts the
checks that carried each kind. Skipped (77) when `opencc` is missing
(deploy/install-deps.sh --test installs it).
"""

import os
import random
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Runner, Server, check, load_texts, parse_metrics  # noqa: E402

T = Runner("test_evasion")
TEXTS = load_texts()

# Look-alikes a plagiarist swaps in (test data: what the copies are made of;
# the server takes its own table from ICU's confusables).
LOOKALIKE = {"a": "а", "c": "с", "e": "е", "i": "і", "j": "ј", "o": "о", "p": "р",
             "s": "ѕ", "x": "х", "y": "у", "A": "А", "B": "В", "C": "С", "E": "Е",
             "H": "Н", "K": "К", "M": "М", "O": "О", "P": "Р", "T": "Т", "X": "Х",
             "v": "ν"}
# Zero-width characters, a tag character and a variation selector: put
# anywhere, a reader sees nothing. Blank-looking characters (Hangul fillers,
# the empty Braille pattern): a reader sees a space, so a copier puts them
# where a space is, or between Chinese characters.
ZERO_WIDTH = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\U000e0041",
              "\ufe00"]
BLANK = ["\u2800", "\u3164", "\uffa0", "\u115f", "\u1160"]

RU = ("Почтовый сервер принимает письма от других серверов и хранит их до тех пор, "
      "пока пользователь не заберёт их своим клиентом. Настройка такого сервера требует "
      "внимания к нескольким вещам: записи в системе доменных имён должны указывать на "
      "правильный адрес, сертификаты должны обновляться вовремя, а фильтр нежелательной "
      "почты должен пропускать настоящие письма. Администратор проверяет журналы каждый "
      "день и следит за очередью: если письма задерживаются, причина обычно в сети или в "
      "переполненном диске. Резервные копии почтовых ящиков делаются каждую ночь, и раз в "
      "месяц их восстанавливают на отдельной машине, чтобы убедиться, что они работают.")


def opencc(config, text):
    r = subprocess.run(["opencc", "-c", config], input=text.encode(), capture_output=True,
                       timeout=60)
    check(r.returncode == 0, "opencc -c %s: %s", config, r.stderr)
    return r.stdout.decode()


def swap_lookalikes(text, share, seed):
    """Swaps `share` of the letters that have a look-alike; returns (text, n)."""
    rnd = random.Random(seed)
    out, n = [], 0
    for ch in text:
        if ch in LOOKALIKE and rnd.random() < share:
            out.append(LOOKALIKE[ch])
            n += 1
        else:
            out.append(ch)
    return "".join(out), n


def sprinkle(text, every, seed):
    """Hides characters in text: after every `every`-th letter or Han
    character that another follows, a zero-width one (between Han
    characters also a blank one); and every third space between two words
    becomes a blank one. Returns (text, number of characters hidden)."""
    rnd = random.Random(seed)
    out, n, seen, spaces = [], 0, 0, 0
    for i, ch in enumerate(text):
        nxt = text[i + 1] if i + 1 < len(text) else ""
        prev = text[i - 1] if i else ""
        if ch == " " and prev.isalnum() and nxt.isalnum():
            spaces += 1
            if spaces % 3 == 0:
                out.append(rnd.choice(BLANK))
                n += 1
                continue
        out.append(ch)
        if ch.isalnum() and nxt.isalnum():
            seen += 1
            if seen % every == 0:
                han = "\u4e00" <= ch <= "\u9fff" and "\u4e00" <= nxt <= "\u9fff"
                out.append(rnd.choice(ZERO_WIDTH + (BLANK if han else [])))
                n += 1
    return "".join(out), n


def check_text(srv, text, **extra):
    body = dict(text=text, **extra)
    status, ans = srv.json("POST", "/check-original", body, timeout=60)
    check(status == 200, "%s %r", status, ans)
    check(set(ans["integrity"]) == {"invisible", "lookalike", "annotation", "reordered",
                                    "traditional", "script"},
          "integrity fields %r", ans["integrity"])
    return ans


def register(srv, doc_id, text):
    ans = check_text(srv, text, id=doc_id, register=True)
    check(ans["registered"], "%s not registered: %r", doc_id, ans)
    return ans


def found(ans, source, what):
    ids = [m["id"] for m in ans["matches"]]
    check(ans["verdict"] == "duplicate" and ids and ids[0] == source,
          "%s: verdict %s, matches %r (want %s first)", what, ans["verdict"], ids, source)


def integrity_metrics(srv):
    status, _, data = srv.request("GET", "/metrics", timeout=10)
    check(status == 200, "metrics %s", status)
    m = parse_metrics(data.decode())
    return {k: m.get('neardup_check_integrity_total{kind="%s"}' % k, 0)
            for k in ("invisible", "lookalike", "annotation", "reordered", "script")}


@T.test
def ordinary_text_reports_nothing(srv):
    zh = register(srv, "zh-plain", TEXTS["zh1"])
    check(zh["integrity"] == {"invisible": 0, "lookalike": 0, "annotation": 0, "reordered": 0,
                              "traditional": 0, "script": "simplified"}, "zh1: %r", zh["integrity"])
    en = register(srv, "en-plain", TEXTS["en1"])
    check(en["integrity"] == {"invisible": 0, "lookalike": 0, "annotation": 0, "reordered": 0,
                              "traditional": 0, "script": None},
          "en1: %r", en["integrity"])
    # Emoji sequences use joiners and variation selectors: nothing hidden.
    emoji = TEXTS["en2"] + "\n\nThanks \u2764\ufe0f from the team \U0001F468\u200d\U0001F469" \
        "\u200d\U0001F467 and \U0001F44D\U0001F3FD!"
    ans = check_text(srv, emoji)
    check(ans["integrity"]["invisible"] == 0, "emoji counted as hidden: %r", ans["integrity"])
    check(integrity_metrics(srv) == {"invisible": 0, "lookalike": 0, "annotation": 0,
                                     "reordered": 0, "script": 0},
          "metrics moved: %r", integrity_metrics(srv))


@T.test
def traditional_and_simplified_read_as_one(srv):
    register(srv, "zh-src", TEXTS["zh1"])
    trad = opencc("s2t.json", TEXTS["zh1"])
    check(trad != TEXTS["zh1"], "opencc changed nothing")
    ans = check_text(srv, trad)
    found(ans, "zh-src", "s2t")
    check(ans["integrity"]["traditional"] > 0 and ans["integrity"]["script"] == "traditional"
          and ans["integrity"]["lookalike"] == 0 and ans["integrity"]["invisible"] == 0,
          "s2t: %r", ans["integrity"])
    # Taiwan phrases (軟體 for 软件) on top of the characters.
    found(check_text(srv, opencc("s2twp.json", TEXTS["zh1"])), "zh-src", "s2twp")
    # A Traditional original, re-posted in Simplified.
    register(srv, "zh-tw-src", opencc("s2t.json", TEXTS["zh3"]))
    simp = opencc("t2s.json", opencc("s2t.json", TEXTS["zh3"]))
    ans = check_text(srv, simp)
    found(ans, "zh-tw-src", "t2s")
    check(ans["integrity"]["script"] == "simplified" and ans["integrity"]["traditional"] == 0,
          "t2s: %r", ans["integrity"])
    check(integrity_metrics(srv)["script"] >= 2, "metrics: %r", integrity_metrics(srv))


@T.test
def lookalike_letters_read_as_latin(srv):
    register(srv, "en-src", TEXTS["en1"])
    copy, n = swap_lookalikes(TEXTS["en1"], 0.5, 1)
    check(n > 100, "only %d swaps", n)
    ans = check_text(srv, copy)
    found(ans, "en-src", "homoglyph")
    check(ans["integrity"]["lookalike"] == n, "lookalike %d, swapped %d",
          ans["integrity"]["lookalike"], n)
    # Every look-alike swapped, whole words in Cyrillic: still English.
    copy, n = swap_lookalikes(TEXTS["en3"], 1.0, 2)
    register(srv, "en3-src", TEXTS["en3"])
    ans = check_text(srv, copy)
    found(ans, "en3-src", "homoglyph, every letter")
    check(ans["integrity"]["lookalike"] == n, "lookalike %d, swapped %d",
          ans["integrity"]["lookalike"], n)
    check(integrity_metrics(srv)["lookalike"] == 2, "metrics: %r", integrity_metrics(srv))


@T.test
def hidden_characters_counted(srv):
    for name, every in (("en4", 4), ("zh2", 3)):
        register(srv, name + "-src", TEXTS[name])
        copy, n = sprinkle(TEXTS[name], every, 3)
        check(n > 50, "only %d hidden", n)
        ans = check_text(srv, copy)
        found(ans, name + "-src", "hidden characters in " + name)
        check(ans["integrity"]["invisible"] == n, "%s: invisible %d, sprinkled %d", name,
              ans["integrity"]["invisible"], n)
    check(integrity_metrics(srv)["invisible"] == 2, "metrics: %r", integrity_metrics(srv))


@T.test
def russian_is_not_latin(srv):
    register(srv, "en-mail", TEXTS["en5"])
    register(srv, "ru-src", RU)
    # Cyrillic letters that have a Latin look-alike swapped for it.
    back = {v: k for k, v in LOOKALIKE.items() if k.isalpha()}
    rnd = random.Random(4)
    twin = "".join(back[c] if c in back and rnd.random() < 0.5 else c for c in RU)
    check(twin != RU, "no swap")
    ans = check_text(srv, twin)
    found(ans, "ru-src", "Russian with Latin look-alikes")
    check(ans["integrity"]["lookalike"] > 0, "twin: %r", ans["integrity"])
    # The Russian original itself: nothing read differently, found as itself.
    ans = check_text(srv, RU)
    check(ans["integrity"]["lookalike"] == 0, "Russian read as look-alikes: %r",
          ans["integrity"])
    check([m["id"] for m in ans["matches"]] == ["ru-src"], "Russian: %r", ans["matches"])
    # Nothing English in it, nor in its twin.
    for text in (RU, twin):
        ids = [m["id"] for m in check_text(srv, text)["matches"]]
        check("en-mail" not in ids, "Russian matched English: %r", ids)


# Latin letters a reader reads as others of the Latin script (audit G05):
# small capitals, IPA letters, the dotless i.
SMALL_CAPS = {"c": "\u1d04", "o": "\u1d0f", "s": "\ua731", "u": "\u1d1c", "v": "\u1d20",
              "w": "\u1d21", "z": "\u1d22"}
IPA = {"a": "\u0251", "g": "\u0261", "i": "\u0131"}
# Characters that render as nothing and are not default-ignorable: format
# characters (Cf) and the musical null notehead.
FORMAT = ["\ufff9", "\U00013430", "\U0001d159"]


def translate(text, table):
    """Each character of table replaced; returns (text, number replaced)."""
    out = [table.get(c, c) for c in text]
    return "".join(out), sum(1 for c in text if c in table)


def reversed_under_rlo(text):
    """Each line reversed after U+202E RIGHT-TO-LEFT OVERRIDE, closed by
    U+202C: a browser shows the text itself."""
    return "\n".join("\u202e" + line[::-1] + "\u202c" for line in text.split("\n"))


def between_letters(text, ch, every):
    """ch after every `every`-th letter that another letter follows; returns
    (text, number put)."""
    out, n, seen = [], 0, 0
    for i, c in enumerate(text):
        out.append(c)
        if c.isalpha() and i + 1 < len(text) and text[i + 1].isalpha():
            seen += 1
            if seen % every == 0:
                out.append(ch)
                n += 1
    return "".join(out), n


@T.test
def reversed_under_override_found(srv):
    """Audit G05: the text reversed under RLO was judged original; later
    found, but integrity counted nothing."""
    register(srv, "en-src", TEXTS["en1"])
    register(srv, "zh-src", TEXTS["zh1"])
    for name, src in (("en", "en-src"), ("zh", "zh-src")):
        text = TEXTS[name + "1"]
        ans = check_text(srv, reversed_under_rlo(text))
        found(ans, src, "reversed under RLO, " + name)
        # every code point of a line that reads otherwise reversed (no
        # right-to-left letter in these texts), not the RLO and PDF
        n = sum(len(line) for line in text.split("\n") if line[::-1] != line)
        check(n > 0 and ans["integrity"]["reordered"] == n
              and ans["integrity"]["lookalike"] == 0 and ans["integrity"]["annotation"] == 0,
              "%s: %r, reversed %d", name, ans["integrity"], n)
    check(integrity_metrics(srv)["reordered"] == 2, "metrics: %r", integrity_metrics(srv))
    # an embedding or an isolate is no override: nothing counted
    ans = check_text(srv, "\u202b" + TEXTS["en1"] + "\u202c \u2067isolated\u2069")
    check(ans["integrity"]["reordered"] == 0, "RLE, RLI: %r", ans["integrity"])
    check(integrity_metrics(srv)["reordered"] == 2, "metrics: %r", integrity_metrics(srv))


@T.test
def latin_lookalikes_of_latin_found(srv):
    """Audit G05: small capitals, IPA letters and the dotless i were judged
    original, with nothing in integrity."""
    register(srv, "en-src", TEXTS["en1"])
    for what, table in (("small capitals", SMALL_CAPS), ("IPA letters, dotless i", IPA)):
        copy, n = translate(TEXTS["en1"], table)
        check(n > 50, "%s: only %d", what, n)
        ans = check_text(srv, copy)
        found(ans, "en-src", what)
        check(ans["integrity"]["lookalike"] == n and ans["integrity"]["invisible"] == 0,
              "%s: %r, replaced %d", what, ans["integrity"], n)
    check(integrity_metrics(srv)["lookalike"] == 2, "metrics: %r", integrity_metrics(srv))


@T.test
def format_characters_hidden(srv):
    """Audit G05: format characters that are not default-ignorable split
    the words they hid in."""
    register(srv, "en-src", TEXTS["en1"])
    for ch in FORMAT:
        copy, n = between_letters(TEXTS["en1"], ch, 3)
        ans = check_text(srv, copy)
        found(ans, "en-src", "U+%04X between letters" % ord(ch))
        check(ans["integrity"]["invisible"] == n, "U+%04X: %r, put %d", ord(ch),
              ans["integrity"], n)
    check(integrity_metrics(srv)["invisible"] == len(FORMAT), "metrics: %r",
          integrity_metrics(srv))


@T.test
def latin_names_in_russian_are_not_swaps(srv):
    """Audit G06: Latin words whose every letter has a Cyrillic twin, in an
    untouched Russian text, counted 17 look-alikes."""
    text = ("Компании TOYOTA и PEPSICO, XEROX и COCA-COLA представили отчёты за год. " + RU)
    ans = register(srv, "ru-brands", text)
    check(ans["integrity"]["lookalike"] == 0, "untouched: %r", ans["integrity"])
    check(integrity_metrics(srv)["lookalike"] == 0, "metrics: %r", integrity_metrics(srv))
    # A swap inside one of them is one.
    ans = check_text(srv, text.replace("TOYOTA", "T\u041eYOTA"))
    found(ans, "ru-brands", "a Cyrillic О in TOYOTA")
    check(ans["integrity"]["lookalike"] >= 1, "swap: %r", ans["integrity"])


# Mandarin readings (Unihan kMandarin) of the characters of texts/zh1.txt that a
# re-poster annotates (test data: what the copies are made of).
READINGS = dict(w.split(":") for w in (
    "的:de 件:jiàn 包:bāo 软:ruǎn 一:yī 们:men 理:lǐ 源:yuán 用:yòng 个:gè 它:tā 代:dài "
    "方:fāng 为:wèi 存:cún 有:yǒu 者:zhě 整:zhěng 器:qì 来:lái 服:fú 务:wù 在:zài 以:yǐ "
    "些:xiē 建:jiàn 程:chéng 提:tí 供:gōng 作:zuò 于:yú 并:bìng 缓:huǎn 官:guān 了:le "
    "使:shǐ 人:rén 员:yuán 本:běn 创:chuàng 时:shí 保:bǎo 要:yào 与:yǔ 可:kě 配:pèi 置:zhì "
    "级:jí 过:guò 他:tā 开:kāi 发:fā 意:yì 志:zhì 愿:yuàn 任:rèn 完:wán 性:xìng 行:xíng "
    "因:yīn 内:nèi 容:róng 当:dāng 远:yuǎn 更:gèng 中:zhōng 参:cān 见:jiàn 节:jié 间:jiān "
    "非:fēi 户:hù 新:xīn 编:biān 给:gěi 所:suǒ 比:bǐ 选:xuǎn").split())
READING = re.compile(r"(?<=[\u4e00-\u9fff])[(（\[]([a-zāáǎàēéěèīíǐìōóǒòūúǔùǖǘǚǜü' ]+)[)）\]]")


def annotate(text, share, seed, brackets="()"):
    """A reading after `share` of the characters READINGS knows; returns
    (text, number of readings a reader skips: a toneless one before a
    Latin letter or digit is left out, as the server reads it as text)."""
    rnd = random.Random(seed)
    out, n = [], 0
    for i, ch in enumerate(text):
        out.append(ch)
        if ch in READINGS and rnd.random() < share:
            r = READINGS[ch]
            out.append(brackets[0] + r + brackets[1])
            nxt = text[i + 1] if i + 1 < len(text) else ""
            toned = not r.isascii()
            n += toned or not (nxt.isascii() and nxt.isalnum())
    return "".join(out), n


def code_points(text):
    return list(text)


@T.test
def annotation_noise_found(srv):
    """A copy with its Mandarin reading in brackets after most Han
    characters was judged original (pinyin 1.0 % on the dev set)."""
    src = TEXTS["zh1"]
    register(srv, "zh-src", src)
    for seed, brackets in ((5, "()"), (6, "（）"), (7, "[]")):
        copy, n = annotate(src, 0.8, seed, brackets)
        check(n > 300, "only %d readings", n)
        ans = check_text(srv, copy)
        found(ans, "zh-src", "readings in %s" % brackets)
        check(ans["original"] is False and ans["integrity"]["annotation"] == n
              and ans["integrity"]["invisible"] == 0 and ans["integrity"]["lookalike"] == 0,
              "%s: %r, put %d", brackets, ans["integrity"], n)
    check(integrity_metrics(srv)["annotation"] == 3, "metrics: %r", integrity_metrics(srv))
    # POST /compare: the same counts, and passages that map to the copy's
    # own code points: each copy span, its readings taken out, is the
    # source span it pairs with.
    copy, n = annotate(src, 0.8, 8)
    status, ans = srv.json("POST", "/compare", {"text_a": copy, "id_b": "zh-src"}, timeout=60)
    check(status == 200, "compare %s %r", status, ans)
    check(ans["integrity_a"]["annotation"] == n and ans["integrity_b"]["annotation"] == 0
          and ans["kind"] in ("identical", "near_duplicate"),
          "compare: %s %r %r", ans.get("kind"), ans.get("integrity_a"), ans.get("integrity_b"))
    a, b = code_points(copy), code_points(src)
    pairs = ans.get("passages") or []
    check(pairs, "no passages")
    covered = sum(p["end"] - p["start"] for p in pairs)
    check(covered >= 0.9 * len(a), "passages cover %d of %d code points", covered, len(a))
    for p in pairs:
        span = READING.sub("", "".join(a[p["start"]:p["end"]]))
        check(span == "".join(b[p["source_start"]:p["source_end"]]),
              "passage %r: %r vs %r", p, span[:60], "".join(b[p["source_start"]:p["source_end"]])[:60])
    # The same article with a few English words in brackets: text, nothing
    # dropped.
    words = src.replace("软件", "软件 (software) ", 2).replace("使用", "使用(use)", 2)
    ans = check_text(srv, words)
    check(ans["integrity"]["annotation"] == 0, "English words dropped: %r", ans["integrity"])


def main():
    if not shutil.which("opencc"):
        print("SKIP: opencc not installed (deploy/install-deps.sh --test)")
        sys.exit(77)
    T.run(fresh=lambda: Server(in_memory=True))


if __name__ == "__main__":
    main()
