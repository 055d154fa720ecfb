#!/usr/bin/env python3
"""Writes proto/vectors.jsonl: fingerprint test vectors for ND_FINGERPRINT_VERSION.

Usage: python3 proto/vectors_gen.py build/server/neardup > proto/vectors.jsonl

Run it only when the algorithm changes (and the version is bumped): the
vectors pin the outputs, and tests/test_fingerprint.c checks every one.
Each line: {"name", "text" | "text_hex", "simhash", "chars", "features"}, or
{"name", "text_hex", "error": "EILSEQ"} for input that is not UTF-8.
"""
import json
import subprocess
import sys

def wrap_cjk(text, width):
    """Hard-wraps at width characters, never inside a run of ASCII letters."""
    lines, start = [], 0
    while start < len(text):
        end = min(start + width, len(text))
        while end < len(text) and end > start + 1 and text[end - 1].isascii() and text[end].isascii() \
                and text[end - 1].isalnum() and text[end].isalnum():
            end -= 1
        lines.append(text[start:end])
        start = end
    return lines


EN_PARA = ("The quick brown fox jumps over the lazy dog. A near-duplicate detector "
           "must see through small edits: a changed word, a moved paragraph, a new "
           "footer. SimHash maps a document to 64 bits so that similar documents land "
           "a few bits apart, and an index finds every stored fingerprint within that "
           "distance in microseconds.")
ZH_PARA = ("近似重复检测要看穿细小的改动：换掉几个字、挪动一个段落、加上转载网站的页脚。"
           "SimHash把一篇文章映射成六十四位的指纹，相似的文章指纹只差几位，"
           "索引能在几微秒内找出距离之内的所有指纹。原创声明需要在发布前完成这个检查。")
ZH_TW_PARA = ("近似重複檢測要看穿細小的改動：換掉幾個字、挪動一個段落、加上轉載網站的頁腳。"
              "SimHash把一篇文章映射成六十四位元的指紋，相似的文章指紋只差幾位。")
JA_PARA = ("近似重複の検出は、小さな編集を見抜かなければならない。単語の置き換え、"
           "段落の移動、転載サイトのフッターなど。SimHashは文書を64ビットに写像する。")
KO_PARA = ("유사 중복 탐지는 작은 수정을 꿰뚫어 보아야 한다. 단어 교체, 문단 이동, "
           "재게시 사이트의 꼬리말 같은 것들이다. SimHash는 문서를 64비트로 사상한다.")

VECTORS = [
    ("empty", ""),
    ("whitespace only", " \t\r\n\u3000\u00a0  \n"),
    ("single ascii word", "hello"),
    ("single word uppercase", "HELLO"),
    ("two words", "hello world"),
    ("punctuation only", "!!! ... ??? ，。！"),
    ("digits", "2024 12 31 3.14159"),
    ("english sentence", "The quick brown fox jumps over the lazy dog."),
    ("english paragraph", EN_PARA),
    ("english paragraph rewrapped", EN_PARA.replace(". ", ".\n\n").replace(", ", ",\n")),
    ("english paragraph upper", EN_PARA.upper()),
    ("english curly quotes", "\u201cQuoted\u201d text \u2014 with dashes\u2026 and \u2018apostrophes\u2019"),
    ("english straight quotes", "\"Quoted\" text -- with dashes... and 'apostrophes'"),
    ("english repeated word 40x", " ".join(["duplicate"] * 40)),
    ("english repeated word 20x", " ".join(["duplicate"] * 20)),
    ("long word over 256 bytes", "a" * 300 + " tail"),
    ("chinese simplified sentence", "近似重复检测要看穿细小的改动。"),
    ("chinese simplified paragraph", ZH_PARA),
    ("chinese with half-width punctuation", ZH_PARA.replace("，", ",").replace("。", ".").replace("：", ":").replace("、", ",")),
    ("chinese hard-wrapped", "\n".join(wrap_cjk(ZH_PARA, 40))),
    ("chinese with paragraph indent", "\u3000\u3000" + ZH_PARA),
    ("chinese traditional paragraph", ZH_TW_PARA),
    ("chinese single character", "中"),
    ("chinese repeated char", "好" * 50),
    ("mixed chinese english no spaces", "使用Linux系统管理Debian服务器"),
    ("mixed chinese english spaces", "使用 Linux 系统管理 Debian 服务器"),
    ("japanese kana and kanji", JA_PARA),
    ("japanese half-width katakana", "ｶﾀｶﾅ ﾃｽﾄ"),
    ("japanese full-width katakana", "カタカナ テスト"),
    ("korean hangul", KO_PARA),
    ("korean single syllable", "한"),
    ("korean two syllables", "\ud55c\uae00"),
    ("korean conjoining jamo", "\u1112\u1161\u11ab\u1100\u1173\u11af"),
    ("korean compatibility jamo", "\u314e\u314f\u3134\u3131\u3161\u3139"),
    ("emoji only", "\U0001F600\U0001F680\U0001F44D\u2764\ufe0f"),
    ("emoji with text", "launch day \U0001F680 went well \U0001F44D"),
    ("emoji zwj sequence", "family \U0001F468\u200d\U0001F469\u200d\U0001F467 photo"),
    ("full-width ascii", "\uff28\uff25\uff2c\uff2c\uff2f\u3000\uff37\uff2f\uff32\uff2c\uff24\uff01"),
    ("half-width ascii", "HELLO WORLD!"),
    ("full-width digits", "\uff12\uff10\uff12\uff14\u5e74"),
    ("combining acute (NFD)", "cafe\u0301 re\u0301sume\u0301"),
    ("precomposed acute (NFC)", "caf\u00e9 r\u00e9sum\u00e9"),
    ("unaccented", "cafe resume"),
    ("combining marks stacked", "a\u0300\u0301\u0302 o\u0308\u0304"),
    ("ligature fi", "\ufb01nance of\ufb01ce"),
    ("circled digits", "\u2460\u2461\u2462"),
    ("roman numeral", "\u216b chapter"),
    ("german sharp s", "Stra\u00dfe"),
    ("german sharp s folded", "STRASSE"),
    ("turkish dotted I", "\u0130stanbul"),
    ("greek", "\u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1 \u03ba\u03cc\u03c3\u03bc\u03b5"),
    ("cyrillic", "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!"),
    ("arabic", "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645"),
    ("hebrew", "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd"),
    ("thai", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01"),
    ("devanagari", "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e"),
    ("zero-width characters", "zero\u200bwidth\u200c join\u200der soft\u00adhyphen"),
    ("zero-width removed", "zerowidth joiner softhyphen"),
    ("nul byte", "before\u0000after"),
    ("control characters", "bell\u0007 tab\t form\u000c feed"),
    ("crlf line endings", "line one\r\nline two\r\n"),
    ("lf line endings", "line one\nline two\n"),
    ("url http", "see http://example.com/path?q=1&r=2 for details"),
    ("url https and www", "visit https://a.example.org/x/y.html or www.example.net today"),
    ("url stripped equivalent", "see  for details"),
    ("url inside chinese", "详见https://example.com/p/123文章"),
    ("markdown image", "text before ![screenshot](https://cdn.example.com/a/b/c.png) text after"),
    ("markdown image removed", "text before text after"),
    ("markdown link", "read [the manual](https://example.com/manual) first"),
    ("markdown emphasis and heading", "# Title\n\n**bold** and *italic* and `code`\n\n---\n"),
    ("markdown plain equivalent", "Title bold and italic and code"),
    ("chinese markdown repost", "## 标题\n\n![图片](https://img.example.cn/x.png)\n\n**" + ZH_PARA + "**\n\n---"),
    ("surrogate-free astral han", "\U00020000\U00020001 \U0002A700"),
    # The folds (fingerprint.md, "Folds"): each pair reads the same.
    ("fold traditional", "國家的歷史與文化，軟件開發"),
    ("fold traditional simplified equivalent", "国家的历史与文化，软件开发"),
    ("fold compatibility ideograph", "\uF900\uF901"),
    ("fold invisible dropped", "hel\u200blo wor\u2060ld ag\ufeffain \U000E0041tag\U000E0100"),
    ("fold invisible dropped equivalent", "hello world again tag"),
    ("fold blanks read as space", "hello\u3164world\u2800again\u115fand\uffa0again"),
    ("fold blanks equivalent", "hello world again and again"),
    ("fold lookalike latin", "Thе quiсk brоwn fох jumрs оvеr thе lаzу dоg"),
    ("fold lookalike latin equivalent", "The quick brown fox jumps over the lazy dog"),
    ("fold lookalike greek in latin", "Ηellο wοrld, ρlease αnswer"),
    ("fold lookalike latin equivalent 2", "Hello world, please answer"),
    ("fold lookalike cyrillic", "Быcтpaя кopичнeвaя лиca пpыгaeт чepeз лeнивyю coбaкy"),
    ("fold lookalike cyrillic equivalent", "Быстрая коричневая лиса прыгает через ленивую собаку"),
    # What must not fold.
    ("no fold russian", "Съешь же ещё этих мягких французских булок, да выпей чаю. Он сказал: ок."),
    ("no fold greek", "Ο γρήγορος καφέ αλεπού πηδά πάνω από τον τεμπέλη σκύλο, και ο σκύλος κοιμάται."),
    ("no fold ukrainian", "Швидка руда лисиця перестрибує через ледачого собаку і їсть хліб."),
    ("no fold latin word in russian", "Компания Microsoft выпустила Windows, а Google ответил."),
    ("no fold emoji zwj", "Family \U0001F468\u200d\U0001F469\u200d\U0001F467 and love \u2764\ufe0f, thumbs \U0001F44D\U0001F3FD"),
    ("no fold persian zwnj", "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"),
]

# Byte-level vectors: input that is not valid UTF-8 is an error, never a fingerprint.
INVALID = [
    ("invalid lone continuation byte", "80"),
    ("invalid truncated sequence", "68656c6c6fe4b8"),
    ("invalid overlong slash", "c0af"),
    ("invalid surrogate", "eda080"),
    ("invalid above U+10FFFF", "f4908080"),
    ("invalid byte ff", "414243ff"),
]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    lines = "".join(json.dumps({"id": i, "text": t}) + "\n" for i, (_, t) in enumerate(VECTORS))
    out = subprocess.run([sys.argv[1], "fingerprint", "--jsonl"], input=lines.encode(),
                         capture_output=True, check=True).stdout.decode()
    results = {}
    for line in out.splitlines():
        r = json.loads(line)
        results[r["id"]] = r
    for i, (name, text) in enumerate(VECTORS):
        r = results[i]
        print(json.dumps({"name": name, "text": text, "simhash": r["simhash"],
                          "chars": r["chars"], "features": r["features"]}, ensure_ascii=False))
    for name, hexbytes in INVALID:
        print(json.dumps({"name": name, "text_hex": hexbytes, "error": "EILSEQ"}))


if __name__ == "__main__":
    main()
