/* fold.c - the folds that run before the normalizer: text under a
 * directional override in reading order, readings in brackets after Han
 * characters dropped, and look-alike letters (see fold.h). */
#include "fold.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <unicode/uchar.h>
#include <utf8proc.h>

#include "normalizer.h"
#include "utf8.h"

#define SCAN_BLOCK 64

/* The explicit directional formatting characters (UAX #9). */
#define LRE 0x202Au
#define RLE 0x202Bu
#define PDF 0x202Cu
#define LRO 0x202Du
#define RLO 0x202Eu
#define PDI 0x2069u

/* Whether s holds a byte in [lo, lo + n): 64 bytes at a time, in byte
 * lanes throughout (a loop the compiler vectorizes; an int accumulator
 * makes it widen them). */
static bool has_byte_in(const uint8_t *s, size_t len, uint8_t lo, uint8_t n)
{
    size_t i = 0;
    for (; i + SCAN_BLOCK <= len; i += SCAN_BLOCK) {
        uint8_t hit = 0;
        for (size_t k = 0; k < SCAN_BLOCK; k++)
            hit |= (uint8_t)((uint8_t)(s[i + k] - lo) < n);
        if (hit)
            return true;
    }
    for (; i < len; i++)
        if ((uint8_t)(s[i] - lo) < n)
            return true;
    return false;
}

/* Whether s may hold a Latin letter and a Greek, Cyrillic or Armenian one:
 * a lead byte CD..D6 (rare: most texts are done after one scan for it),
 * then an ASCII letter or a lead byte C3..C9. */
static bool maybe_mixed(const uint8_t *s, size_t len)
{
    if (!has_byte_in(s, len, 0xCD, 10))
        return false;
    for (size_t i = 0; i < len; i++)
        if ((uint8_t)((s[i] | 0x20) - 'a') < 26 || (uint8_t)(s[i] - 0xC3) < 7)
            return true;
    return false;
}

#define EQ(b, v) ((uint8_t)((b) == (v)))
#define IN(b, lo, n) ((uint8_t)((uint8_t)((b) - (lo)) < (n)))

/* Whether s may hold a code point that the override reading or the
 * look-alike fold within the Latin script reads (the letters of
 * nd_normalizer.lk_base_cp; test_fold checks that each one is caught):
 * U+0131 ı (C4 B1); U+0184..018D (C6 84..8D); U+0240..02BF (IPA: C9, CA);
 * U+1D00..1D3F, U+1D80..1DBF (E1 B4, E1 B6), U+1E9D, U+1EFF; U+A700..A7BF
 * (EA 9C..9E), U+AB00..AB7F (EA AC, AD); LRO, RLO (E2 80 AD, AE). The
 * lanes are bytes and each test is a compare or a range, so that the loop
 * vectorizes (two constants compared with one byte become a 64-bit bit
 * test that does not; hence no ơ ư C6 A1, C6 B0 of Vietnamese here, and
 * normalizer.c leaves out Ʀ ƽ). */
static bool maybe_special(const uint8_t *s, size_t len)
{
    size_t i = 0;
    for (; i + SCAN_BLOCK + 2 <= len; i += SCAN_BLOCK) {
        uint8_t hit = 0;
        for (size_t k = 0; k < SCAN_BLOCK; k++) {
            uint8_t b0 = s[i + k], b1 = s[i + k + 1], b2 = s[i + k + 2];
            uint8_t e1 = EQ(b1, 0xB4) | EQ(b1, 0xB6) | (EQ(b1, 0xBA) & EQ(b2, 0x9D)) |
                         (EQ(b1, 0xBB) & EQ(b2, 0xBF));
            uint8_t ea = IN(b1, 0x9C, 3) | IN(b1, 0xAC, 2);
            hit |= (EQ(b0, 0xC4) & EQ(b1, 0xB1)) | (EQ(b0, 0xC6) & IN(b1, 0x84, 10)) |
                   IN(b0, 0xC9, 2) | (EQ(b0, 0xE1) & e1) | (EQ(b0, 0xEA) & ea) |
                   (EQ(b0, 0xE2) & EQ(b1, 0x80) & IN(b2, 0xAD, 2));
        }
        if (hit)
            return true;
    }
    /* the last bytes: decoded */
    for (size_t pos = i; pos < len;) {
        uint32_t cp = 0;
        if (nd_utf8_decode(s, len, &pos, &cp) < 0)
            pos++;
        else if (cp == 0x0131 || (cp >= 0x0184 && cp <= 0x018D) || (cp >= 0x0240 && cp <= 0x02BF) ||
                 (cp >= 0x1D00 && cp <= 0x1D3F) || (cp >= 0x1D80 && cp <= 0x1DBF) || cp == 0x1E9D ||
                 cp == 0x1EFF || (cp >= 0xA700 && cp <= 0xA7BF) || (cp >= 0xAB00 && cp <= 0xAB7F) ||
                 cp == LRO || cp == RLO)
            return true;
    }
    return false;
}

/* ---- directional overrides: the text in reading order ---- */

static bool is_paragraph_end(uint32_t cp)
{
    return cp == '\n' || cp == '\r' || (cp >= 0x1C && cp <= 0x1E) || cp == 0x85 || cp == 0x2029;
}

/* Reverses the code points of s[0, n) (valid UTF-8) in place: the bytes,
 * then each code point's bytes back. */
static void reverse_code_points(uint8_t *s, size_t n)
{
    for (size_t i = 0, j = n; i + 1 < j; i++, j--) {
        uint8_t t = s[i];
        s[i] = s[j - 1], s[j - 1] = t;
    }
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && (s[j] & 0xC0) == 0x80) /* continuation bytes, then the lead */
            j++;
        if (j == n)
            break; /* not UTF-8: cannot happen */
        for (size_t a = i, b = j; a < b; a++, b--) {
            uint8_t t = s[a];
            s[a] = s[b], s[b] = t;
        }
        i = j + 1;
    }
}

/* Reverses, in s[0, n), each stretch from a right-to-left letter (bidi
 * class R or AL) to the last one before a left-to-right letter (L): a
 * reader of those scripts reads them from the right. Returns whether one
 * was reversed. */
static bool reverse_rtl_stretches(uint8_t *s, size_t n)
{
    bool any = false;
    size_t first = 0, last = 0; /* [first, last): the stretch so far */
    unsigned count = 0;
    for (size_t pos = 0; pos <= n;) {
        size_t at = pos;
        uint32_t cp = 0;
        UCharDirection d = U_LEFT_TO_RIGHT;
        if (pos < n) {
            nd_utf8_decode(s, n, &pos, &cp);
            d = u_charDirection((UChar32)cp);
        } else {
            pos++;
        }
        if (at < n && (d == U_RIGHT_TO_LEFT || d == U_RIGHT_TO_LEFT_ARABIC)) {
            if (count++ == 0)
                first = at;
            last = pos;
        } else if (d == U_LEFT_TO_RIGHT) {
            if (count > 1) {
                reverse_code_points(s + first, last - first);
                any = true;
            }
            count = 0;
        }
    }
    return any;
}

/* Writes s (valid UTF-8) into o in reading order (fold.h): each run under a
 * right-to-left override (RLO, to the PDF that closes it, a PDI or the end
 * of its paragraph) reversed, but for its right-to-left stretches; in a run
 * under a left-to-right override (LRO), the right-to-left stretches
 * reversed; the overrides of a run that moved (its own and those nested in
 * it) replaced by the embeddings of their direction (RLE, LRE). Returns
 * the code points of the runs that moved (the override opening each not
 * counted, those nested in it counted): 0 when o holds s unchanged. */
static uint32_t reading_order(const uint8_t *s, size_t len, uint8_t *o)
{
    memcpy(o, s, len);
    uint32_t moved = 0;
    for (size_t pos = 0; pos < len;) {
        uint32_t cp = 0;
        nd_utf8_decode(s, len, &pos, &cp);
        if (cp != RLO && cp != LRO)
            continue;
        size_t end = pos;
        unsigned depth = 0; /* embeddings and overrides opened in the run */
        while (end < len) {
            size_t p = end;
            uint32_t c = 0;
            nd_utf8_decode(s, len, &p, &c);
            if (is_paragraph_end(c) || c == PDI || (c == PDF && depth == 0))
                break;
            if (c == PDF)
                depth--;
            else if (c >= LRE && c <= RLO)
                depth++;
            end = p;
        }
        uint8_t *run = o + pos;
        size_t n = end - pos;
        bool m;
        if (cp == RLO) {
            reverse_code_points(run, n);
            reverse_rtl_stretches(run, n);
            m = memcmp(run, s + pos, n) != 0;
        } else {
            m = reverse_rtl_stretches(run, n);
        }
        /* the override, now that its run is in reading order, becomes the
         * embedding of its direction (RLE, LRE: 3 bytes too, dropped the
         * same), and so do those nested in the run: read again, the run
         * stays as it is */
        if (m) {
            run[-1] = (uint8_t)(run[-1] - (RLO - RLE));
            for (size_t i = 0; i + 3 <= n; i++)
                if (run[i] == 0xE2 && run[i + 1] == 0x80 &&
                    (run[i + 2] == 0xAD || run[i + 2] == 0xAE))
                    run[i + 2] = (uint8_t)(run[i + 2] - (RLO - RLE));
            for (size_t i = 0; i < n; i++)
                moved += (run[i] & 0xC0) != 0x80;
        }
        pos = end;
    }
    return moved;
}

/* ---- look-alike letters ---- */

/* Whether cp continues a word: a letter, mark or digit, or a code point the
 * normalizer drops. */
static bool is_word_cp(const nd_normalizer *n, uint32_t cp)
{
    if (cp < ND_LK_END)
        return (n->lk[cp] & ND_LK_WORD) != 0;
    if (cp >= ND_NORM_BMP)
        return false;
    uint32_t e = n->table[cp];
    if (!(e & ND_NORM_MULTI))
        return ND_NORM_CLASS(e) == ND_CHAR_WORD;
    unsigned len = (e >> 24) & 0x7Fu;
    return len == 0 || ND_NORM_CLASS(n->pool[e & 0xFFFFu]) == ND_CHAR_WORD;
}

/* The script with most of counts[1..], or ND_LK_NONE when there is none or
 * a tie for the most (tie_low: a tie goes to the lowest instead). */
static unsigned majority(const uint32_t counts[ND_LK_SCRIPTS], bool tie_low)
{
    unsigned best = ND_LK_NONE;
    uint32_t most = 0;
    bool tie = false;
    for (unsigned s = 1; s < ND_LK_SCRIPTS; s++) {
        if (counts[s] > most)
            best = s, most = counts[s], tie = false;
        else if (counts[s] && counts[s] == most)
            tie = true;
    }
    return tie && !tie_low ? ND_LK_NONE : best;
}

static inline unsigned script_of(const nd_normalizer *n, uint32_t cp)
{
    return cp < ND_LK_END ? n->lk[cp] & 7u : ND_LK_NONE;
}

static inline bool is_unambiguous(const nd_normalizer *n, uint32_t cp)
{
    return cp < ND_LK_END && (n->lk[cp] & 7u) && !(n->lk[cp] & ND_LK_CONFUSABLE);
}

/* The replacement of cp in a word of script ws, or 0. */
static inline uint32_t twin_of(const nd_normalizer *n, uint32_t cp, unsigned ws)
{
    if (cp >= ND_LK_END || !(n->lk[cp] & ND_LK_CONFUSABLE) || (n->lk[cp] & 7u) == ws)
        return 0;
    return n->lk_twin[cp][ws];
}

/* The ASCII letter cp reads as within the Latin script, or 0 (ı: only
 * outside Turkic text). */
static uint32_t base_of(const nd_normalizer *n, uint32_t cp, bool turkic)
{
    if (cp < ND_LK_END ? !(n->lk[cp] & ND_LK_BASE) : cp >= ND_NORM_BMP)
        return 0;
    if (cp == ND_LK_DOTLESS_I && turkic)
        return 0;
    size_t lo = 0, hi = n->lk_base_n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (n->lk_base_cp[mid] < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n->lk_base_n && n->lk_base_cp[lo] == cp ? n->lk_base_to[lo] : 0;
}

/* The letters of Turkic alphabets that other Latin alphabets lack: ğ ş İ ə,
 * and the Cyrillic ә, ə's twin (either case). A text with one of them reads
 * ı as a letter of its own (the look-alike fold keeps it one). */
static bool is_turkic(uint32_t cp)
{
    return cp == 0x011E || cp == 0x011F || cp == 0x015E || cp == 0x015F || cp == 0x0130 ||
           cp == 0x018F || cp == 0x0259 || cp == 0x04D8 || cp == 0x04D9;
}

/* What the first pass over a text found. */
typedef struct survey {
    unsigned dominant; /* the dominant script (ND_LK_*) */
    bool turkic;       /* a Turkic letter (is_turkic()) */
    bool overrides;    /* an LRO or RLO */
} survey;

/* Reads s once. Returns false when it is not valid UTF-8. */
static bool survey_text(const nd_normalizer *n, const uint8_t *s, size_t len, survey *sv)
{
    uint32_t counts[ND_LK_SCRIPTS] = {0};
    sv->turkic = sv->overrides = false;
    for (size_t pos = 0; pos < len;) {
        uint32_t cp = 0;
        if (nd_utf8_decode(s, len, &pos, &cp) < 0)
            return false;
        uint32_t b = base_of(n, cp, false); /* ı counts for no script either way */
        if (is_unambiguous(n, b ? b : cp))
            counts[n->lk[b ? b : cp] & 7u]++;
        sv->turkic |= is_turkic(cp);
        sv->overrides |= cp == RLO || cp == LRO;
    }
    sv->dominant = majority(counts, true);
    return true;
}

/* The letters a text's words replaced, by kind. */
typedef struct tally {
    uint32_t within;  /* look-alikes within the Latin script, but ı */
    uint32_t dotless; /* ı read as i */
    uint32_t swapped; /* twins in words with letters of two scripts */
    uint32_t whole;   /* twins in words of one script */
} tally;

/* The word s[ws, we) (valid UTF-8) read: appended to o at *olen. Returns
 * whether a letter was replaced, counted in *t. */
static bool fold_word(const nd_normalizer *n, const survey *sv, const uint8_t *s, size_t ws,
                      size_t we, uint8_t *o, size_t *olen, tally *tl)
{
    uint32_t wc[ND_LK_SCRIPTS] = {0};
    unsigned scripts = 0; /* bit per script of the word's letters */
    bool folds = false, any_unambiguous = false;
    for (size_t p = ws; p < we;) {
        uint32_t cp = 0;
        nd_utf8_decode(s, we, &p, &cp);
        uint32_t b = base_of(n, cp, sv->turkic);
        folds |= b != 0;
        cp = b ? b : cp;
        scripts |= 1u << script_of(n, cp);
        if (is_unambiguous(n, cp))
            wc[n->lk[cp] & 7u]++, any_unambiguous = true;
        folds |= cp < ND_LK_END && (n->lk[cp] & ND_LK_CONFUSABLE);
    }
    if (!folds)
        return false;
    unsigned script = any_unambiguous ? majority(wc, false) : sv->dominant;
    /* A word without unambiguous letters is read in the dominant script
     * only when each of its letters has a twin there (else it is a word of
     * its own script: "Google" in a Russian text). */
    bool whole = script != ND_LK_NONE;
    for (size_t p = ws; p < we && whole && !any_unambiguous;) {
        uint32_t cp = 0;
        nd_utf8_decode(s, we, &p, &cp);
        uint32_t b = base_of(n, cp, sv->turkic);
        cp = b ? b : cp;
        unsigned sc = script_of(n, cp);
        whole = twin_of(n, cp, script) || sc == ND_LK_NONE || sc == script;
    }
    /* a word with letters of two scripts */
    bool mixed = (scripts & ~1u & ((scripts & ~1u) - 1)) != 0;
    bool change = false;
    for (size_t p = ws; p < we;) {
        size_t at = p;
        uint32_t cp = 0;
        nd_utf8_decode(s, we, &p, &cp);
        uint32_t b = base_of(n, cp, sv->turkic);
        uint32_t t = whole ? twin_of(n, b ? b : cp, script) : 0;
        t = t ? t : b;
        if (!t) {
            memcpy(o + *olen, s + at, p - at);
            *olen += p - at;
            continue;
        }
        *olen += nd_utf8_encode(t, o + *olen);
        if (cp == ND_LK_DOTLESS_I)
            tl->dotless++;
        else if (b)
            tl->within++;
        else if (mixed)
            tl->swapped++;
        else
            tl->whole++;
        change = true;
    }
    return change;
}

/* ---- readings in brackets after Han characters ---- */

/* What a code point of a dropped reading becomes: U+0300 COMBINING GRAVE
 * ACCENT, a mark step 2 drops (no token, no char; not invisible, so not
 * counted there either), one code point for one. */
#define DROPPED_0 0xCCu
#define DROPPED_1 0x80u
/* A reading's bytes between its brackets, at most (8 syllables and more). */
#define READING_MAX 64
/* A text's readings are dropped when it holds this many that carry a tone
 * (a mark or a digit), or this many in all: one reading alone, or a few
 * English words that happen to spell syllables (`(locale)`, `(hang)`), is
 * text (proto/fingerprint.md, step 0c). */
#define READINGS_TONED 2
#define READINGS_ALL 8

/* The syllables of Hanyu Pinyin, toneless, ü written v (sorted: bsearch). */
static const char *const syllables[] = {
    "a",     "ai",    "an",    "ang",    "ao",     "ba",    "bai",   "ban",   "bang",   "bao",
    "bei",   "ben",   "beng",  "bi",     "bian",   "biao",  "bie",   "bin",   "bing",   "bo",
    "bu",    "ca",    "cai",   "can",    "cang",   "cao",   "ce",    "cen",   "ceng",   "cha",
    "chai",  "chan",  "chang", "chao",   "che",    "chen",  "cheng", "chi",   "chong",  "chou",
    "chu",   "chua",  "chuai", "chuan",  "chuang", "chui",  "chun",  "chuo",  "ci",     "cong",
    "cou",   "cu",    "cuan",  "cui",    "cun",    "cuo",   "da",    "dai",   "dan",    "dang",
    "dao",   "de",    "dei",   "den",    "deng",   "di",    "dia",   "dian",  "diao",   "die",
    "ding",  "diu",   "dong",  "dou",    "du",     "duan",  "dui",   "dun",   "duo",    "e",
    "ei",    "en",    "eng",   "er",     "fa",     "fan",   "fang",  "fei",   "fen",    "feng",
    "fiao",  "fo",    "fou",   "fu",     "ga",     "gai",   "gan",   "gang",  "gao",    "ge",
    "gei",   "gen",   "geng",  "gong",   "gou",    "gu",    "gua",   "guai",  "guan",   "guang",
    "gui",   "gun",   "guo",   "ha",     "hai",    "han",   "hang",  "hao",   "he",     "hei",
    "hen",   "heng",  "hong",  "hou",    "hu",     "hua",   "huai",  "huan",  "huang",  "hui",
    "hun",   "huo",   "ji",    "jia",    "jian",   "jiang", "jiao",  "jie",   "jin",    "jing",
    "jiong", "jiu",   "ju",    "juan",   "jue",    "jun",   "ka",    "kai",   "kan",    "kang",
    "kao",   "ke",    "kei",   "ken",    "keng",   "kong",  "kou",   "ku",    "kua",    "kuai",
    "kuan",  "kuang", "kui",   "kun",    "kuo",    "la",    "lai",   "lan",   "lang",   "lao",
    "le",    "lei",   "leng",  "li",     "lia",    "lian",  "liang", "liao",  "lie",    "lin",
    "ling",  "liu",   "lo",    "long",   "lou",    "lu",    "luan",  "lue",   "lun",    "luo",
    "lv",    "lve",   "ma",    "mai",    "man",    "mang",  "mao",   "me",    "mei",    "men",
    "meng",  "mi",    "mian",  "miao",   "mie",    "min",   "ming",  "miu",   "mo",     "mou",
    "mu",    "na",    "nai",   "nan",    "nang",   "nao",   "ne",    "nei",   "nen",    "neng",
    "ni",    "nian",  "niang", "niao",   "nie",    "nin",   "ning",  "niu",   "nong",   "nou",
    "nu",    "nuan",  "nue",   "nun",    "nuo",    "nv",    "nve",   "o",     "ou",     "pa",
    "pai",   "pan",   "pang",  "pao",    "pei",    "pen",   "peng",  "pi",    "pian",   "piao",
    "pie",   "pin",   "ping",  "po",     "pou",    "pu",    "qi",    "qia",   "qian",   "qiang",
    "qiao",  "qie",   "qin",   "qing",   "qiong",  "qiu",   "qu",    "quan",  "que",    "qun",
    "ran",   "rang",  "rao",   "re",     "ren",    "reng",  "ri",    "rong",  "rou",    "ru",
    "rua",   "ruan",  "rui",   "run",    "ruo",    "sa",    "sai",   "san",   "sang",   "sao",
    "se",    "sen",   "seng",  "sha",    "shai",   "shan",  "shang", "shao",  "she",    "shei",
    "shen",  "sheng", "shi",   "shou",   "shu",    "shua",  "shuai", "shuan", "shuang", "shui",
    "shun",  "shuo",  "si",    "song",   "sou",    "su",    "suan",  "sui",   "sun",    "suo",
    "ta",    "tai",   "tan",   "tang",   "tao",    "te",    "tei",   "teng",  "ti",     "tian",
    "tiao",  "tie",   "ting",  "tong",   "tou",    "tu",    "tuan",  "tui",   "tun",    "tuo",
    "wa",    "wai",   "wan",   "wang",   "wei",    "wen",   "weng",  "wo",    "wu",     "xi",
    "xia",   "xian",  "xiang", "xiao",   "xie",    "xin",   "xing",  "xiong", "xiu",    "xu",
    "xuan",  "xue",   "xun",   "ya",     "yan",    "yang",  "yao",   "ye",    "yi",     "yin",
    "ying",  "yo",    "yong",  "you",    "yu",     "yuan",  "yue",   "yun",   "za",     "zai",
    "zan",   "zang",  "zao",   "ze",     "zei",    "zen",   "zeng",  "zha",   "zhai",   "zhan",
    "zhang", "zhao",  "zhe",   "zhei",   "zhen",   "zheng", "zhi",   "zhong", "zhou",   "zhu",
    "zhua",  "zhuai", "zhuan", "zhuang", "zhui",   "zhun",  "zhuo",  "zi",    "zong",   "zou",
    "zu",    "zuan",  "zui",   "zun",    "zuo",
};
#define SYLLABLE_LONGEST 6

/* Interjections (嗯 ń, 呣 ḿ, 哼 hng): syllables only with a tone mark, else
 * they are the variables and units of a formula. */
static const char *const toned_only[] = {"hm", "hng", "m", "n", "ng"};

static bool in_list(const char *const *list, size_t count, const char *s, size_t len)
{
    size_t lo = 0, hi = count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strncmp(list[mid], s, len);
        if (c == 0 && list[mid][len] != '\0')
            c = 1;
        if (c == 0)
            return true;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

static bool is_syllable(const char *s, size_t len, bool toned)
{
    return in_list(syllables, sizeof(syllables) / sizeof(*syllables), s, len) ||
           (toned && in_list(toned_only, sizeof(toned_only) / sizeof(*toned_only), s, len));
}

/* Han ideographs (as step 2's HAN flag). */
static bool is_han(uint32_t cp)
{
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
           (cp >= 0x20000 && cp <= 0x323AF) || (cp >= 0xF900 && cp <= 0xFAFF) ||
           (cp >= 0x2F800 && cp <= 0x2FA1F);
}

/* Whether cp closes the bracket open: ( and （ close with ) or ）, [ and ［
 * with ] or ］, 【 with 】 (a half-width edit may change one of a pair). */
static bool closes(uint32_t open, uint32_t cp)
{
    switch (open) {
    case '(':
    case 0xFF08: return cp == ')' || cp == 0xFF09;
    case '[':
    case 0xFF3B: return cp == ']' || cp == 0xFF3D;
    case 0x3010: return cp == 0x3011;
    default: return false;
    }
}

/* Whether a letter of a reading may start at byte b: a..z, or the lead
 * byte of a Latin letter with a tone mark, ü, ê (C3..C9, E1), or of a letter
 * the look-alike fold reads as a Latin one (C3..D6: IPA, Greek, Cyrillic,
 * Armenian; E1, EA: small capitals and the other look-alikes within Latin),
 * since the fold runs after this one and must find no reading when run
 * again. */
#define LETTER_LEAD(b) (IN(b, 'a', 26) | IN(b, 0xC3, 20) | EQ(b, 0xE1) | EQ(b, 0xEA))
/* The same, in byte lanes that vectorize, with the byte after it (E1 B4..BB,
 * EA 9C..AD): no byte is compared with several constants in one
 * disjunction, which gcc makes a 64-bit bit test that does not vectorize. */
#define LETTER_LEAD2(b, c)                                                                         \
    (IN(b, 'a', 26) | IN(b, 0xC3, 20) | (EQ(b, 0xE1) & IN(c, 0xB4, 8)) |                           \
     (EQ(b, 0xEA) & IN(c, 0x9C, 18)))

/* Whether the bytes p[-1..3] may be a reading's start: ( or [ then a
 * letter, or （ ［ 【 (EF BC 88, EF BC BB, E3 80 90) then a letter, after
 * the last byte of a Han character (a continuation byte). Byte lanes: a
 * compare or a range each, so that a loop over it vectorizes. */
static inline uint8_t opens_at(const uint8_t *p)
{
    uint8_t b0 = p[0], b1 = p[1], b2 = p[2], b3 = p[3];
    uint8_t ascii = (EQ(b0, '(') | EQ(b0, '[')) & LETTER_LEAD(b1);
    uint8_t wide = ((EQ(b0, 0xEF) & EQ(b1, 0xBC) & (EQ(b2, 0x88) | EQ(b2, 0xBB))) |
                    (EQ(b0, 0xE3) & EQ(b1, 0x80) & EQ(b2, 0x90))) &
                   LETTER_LEAD(b3);
    return (ascii | wide) & EQ(p[-1] & 0xC0, 0x80);
}

/* Whether the bytes b0..b3 may be the end of an opening bracket and the
 * start of a letter: a continuation byte (the end of a Han character) and (
 * or [, or the last two bytes of （ ［ 【 (EF BC 88, EF BC BB, E3 80 90);
 * then a letter (LETTER_LEAD2()). */
static inline uint8_t may_open(uint8_t b0, uint8_t b1, uint8_t b2, uint8_t b3)
{
    uint8_t ascii = IN(b0, 0x80, 64) & (EQ(b1, '(') | EQ(b1, '['));
    uint8_t wide = (EQ(b0, 0xBC) & (EQ(b1, 0x88) | EQ(b1, 0xBB))) | (EQ(b0, 0x80) & EQ(b1, 0x90));
    return (ascii | wide) & LETTER_LEAD2(b2, b3);
}
#define MAY_OPEN(p, last) may_open((p)[-2], (p)[-1], (p)[0], (p) + 1 < (last) ? (p)[1] : 0)

/* The position of the next byte from `from` on that may open a reading
 * (opens_at()), or len when there is none. Blocks of 64 bytes are passed
 * over on a lighter test, two bytes a lane (a loop that vectorizes): the
 * last byte of a bracket, then the lead byte of a letter; where it holds,
 * opens_at() decides. */
static size_t next_open(const uint8_t *s, size_t len, size_t from)
{
    size_t i = from + 1 < 2 ? 2 : from + 1; /* i: a letter after a bracket ending at i - 1 */
    for (; i + SCAN_BLOCK + 2 <= len; i += SCAN_BLOCK) {
        uint8_t hit = 0;
        const uint8_t *b = s + i - 2;
        for (size_t k = 0; k < SCAN_BLOCK; k++)
            hit |= may_open(b[k], b[k + 1], b[k + 2], b[k + 3]);
        for (size_t k = 0; hit && k < SCAN_BLOCK; k++) {
            size_t q = i + k;
            if (!MAY_OPEN(s + q, s + len))
                continue;
            if (q >= from + 1 && opens_at(s + q - 1)) /* ( [ */
                return q - 1;
            if (q >= from + 3 && q >= 4 && opens_at(s + q - 3)) /* （ ［ 【 */
                return q - 3;
        }
    }
    for (; i < len; i++) {
        if (!MAY_OPEN(s + i, s + len))
            continue;
        if (i >= from + 1 && i + 2 < len && opens_at(s + i - 1))
            return i - 1;
        if (i >= from + 1 && i + 2 >= len && (s[i - 1] == '(' || s[i - 1] == '[') &&
            (s[i - 2] & 0xC0) == 0x80)
            return i - 1;
        if (i >= from + 3 && i >= 4 && opens_at(s + i - 3))
            return i - 3;
    }
    return len;
}

/* What reads readings: the text, and whether it is Turkic (-1: not known
 * yet; the dotless ı reads as i outside Turkic text, as the look-alike
 * fold reads it). */
typedef struct reader {
    const nd_normalizer *n;
    const uint8_t *s;
    size_t len;
    int turkic;
} reader;

/* The letter cp reads as in a reading: its look-alike within the Latin
 * script (ɑ ɡ ᴀ ı...), or its Latin twin (Cyrillic а, Greek ο), as the
 * look-alike fold would read it in a Latin word; else cp. */
static uint32_t latin_letter(reader *rd, uint32_t cp)
{
    const nd_normalizer *n = rd->n;
    if (cp == ND_LK_DOTLESS_I && rd->turkic < 0) {
        rd->turkic = 0;
        for (size_t pos = 0; pos < rd->len && !rd->turkic;) {
            uint32_t c = 0;
            if (nd_utf8_decode(rd->s, rd->len, &pos, &c) < 0)
                pos++;
            rd->turkic = is_turkic(c);
        }
    }
    uint32_t b = base_of(n, cp, rd->turkic > 0);
    if (b)
        return b;
    if (cp < ND_LK_END && (n->lk[cp] & ND_LK_CONFUSABLE) && (n->lk[cp] & 7u) != ND_LK_LATIN &&
        n->lk_twin[cp][ND_LK_LATIN])
        return n->lk_twin[cp][ND_LK_LATIN];
    return cp;
}

/* A reading's letters: a..z (v for ü), '1'..'5' for a tone digit after a
 * syllable, ' ' between two groups; tone[i]: letter i carries a tone. */
typedef struct reading {
    char c[READING_MAX + 1];
    bool tone[READING_MAX + 1];
    size_t n;
    bool toned; /* some letter carries a tone mark, or a digit follows one */
} reading;

/* Appends code point cp of a reading (a letter, a tone mark on the last
 * letter, a tone digit or a separator) to r. Returns false when cp is none
 * of these, or out of place. */
static bool reading_add(reader *rd, reading *r, uint32_t cp)
{
    char last = r->n ? r->c[r->n - 1] : ' ';
    bool after_letter = last >= 'a' && last <= 'z';
    if (r->n == READING_MAX)
        return false;
    switch (cp) {
    case 0x0300: /* the tone marks: grave, acute, macron, caron */
    case 0x0301:
    case 0x0304:
    case 0x030C:
        if (!after_letter)
            return false;
        r->tone[r->n - 1] = r->toned = true;
        return true;
    case 0x0308: /* ü */
        if (last != 'u')
            return false;
        r->c[r->n - 1] = 'v';
        return true;
    case 0x0302: /* ê */ return last == 'e';
    case ' ':
    case '\'':
    case 0x2019: /* between syllables: xī'ān */
        if (last == ' ')
            return false;
        r->tone[r->n] = false, r->c[r->n++] = ' ';
        return true;
    default: cp = latin_letter(rd, cp); break; /* ɑ ɡ, as pinyin is often typeset */
    }
    if (cp >= '1' && cp <= '5') {
        if (!after_letter)
            return false;
        r->tone[r->n] = r->toned = true, r->c[r->n++] = (char)cp;
        return true;
    }
    if (cp >= 'a' && cp <= 'z') {
        r->tone[r->n] = false, r->c[r->n++] = (char)cp;
        return true;
    }
    if (cp < 0xC0 || cp > 0x1EFF)
        return false;
    /* a precomposed letter: its canonical decomposition, a letter and marks */
    utf8proc_int32_t d[4];
    int last_bound = 0;
    utf8proc_ssize_t k = utf8proc_decompose_char((utf8proc_int32_t)cp, d, 4, UTF8PROC_DECOMPOSE,
                                                 &last_bound);
    if (k < 2 || k > 4 || d[0] < 'a' || d[0] > 'z')
        return false;
    for (utf8proc_ssize_t i = 0; i < k; i++)
        if (!reading_add(rd, r, (uint32_t)d[i]))
            return false;
    return true;
}

/* Whether the group g[0, n) (letters and tone digits) splits into
 * syllables, each followed by at most one tone digit; *one: whether it is
 * exactly one. */
static bool splits(const char *g, const bool *tone, size_t n, bool *one)
{
    bool ok[READING_MAX + 1];
    ok[n] = true;
    *one = false;
    for (size_t i = n; i-- > 0;) {
        ok[i] = false;
        bool toned = false;
        for (size_t j = i + 1; j <= n && j - i <= SYLLABLE_LONGEST && g[j - 1] >= 'a'; j++) {
            toned |= tone[j - 1];
            size_t k = j < n && g[j] < 'a' ? j + 1 : j; /* its tone digit */
            if (ok[k] && is_syllable(g + i, j - i, toned || k > j)) {
                ok[i] = true;
                *one |= i == 0 && k == n;
            }
        }
    }
    return ok[0];
}

/* Whether s[at] (an opening bracket) opens a reading (fold.h): after a Han
 * character, lowercase syllables with tone marks, tone digits or none,
 * separated by a space or an apostrophe, up to the closing bracket; without
 * a tone, each group one syllable and the bracket not followed by a letter
 * or digit. Sets *end after the closing bracket and *toned. */
static bool reading_at(reader *rd, size_t at, size_t *end, bool *toned)
{
    const uint8_t *s = rd->s;
    size_t len = rd->len;
    size_t pos = at, p = at;
    uint32_t open = 0, cp = 0;
    if (at == 0 || nd_utf8_decode(s, len, &pos, &open) < 0)
        return false;
    /* the code point before: a Han character */
    do
        p--;
    while (p > 0 && at - p < 4 && (s[p] & 0xC0) == 0x80);
    size_t q = p;
    if (nd_utf8_decode(s, len, &q, &cp) < 0 || q != at || !is_han(cp))
        return false;
    reading r = {.n = 0};
    for (;;) {
        if (pos >= len || pos - at > READING_MAX || nd_utf8_decode(s, len, &pos, &cp) < 0)
            return false;
        if (closes(open, cp))
            break;
        if (!reading_add(rd, &r, cp))
            return false;
    }
    if (r.n == 0 || r.c[r.n - 1] == ' ')
        return false;
    bool single = true;
    for (size_t g = 0; g < r.n;) {
        size_t e = g;
        while (e < r.n && r.c[e] != ' ')
            e++;
        bool one;
        if (!splits(r.c + g, r.tone + g, e - g, &one))
            return false;
        single &= one;
        g = e + 1;
    }
    if (!r.toned) {
        size_t next = pos;
        if (!single ||
            (next < len && nd_utf8_decode(s, len, &next, &cp) == 0 && is_word_cp(rd->n, cp)))
            return false;
    }
    *end = pos, *toned = r.toned;
    return true;
}

/* Whether s holds readings enough to drop (READINGS_TONED, READINGS_ALL).
 * A text without a lead byte E3..F0 (Han: E3..E9 and EF A4..AB in the BMP,
 * F0 A0..B2 beyond) has none: most texts of other scripts are done after
 * that scan. */
static bool has_readings(const nd_normalizer *n, const uint8_t *s, size_t len)
{
    if (!has_byte_in(s, len, 0xE3, 14))
        return false;
    uint32_t toned = 0, all = 0;
    reader rd = {.n = n, .s = s, .len = len, .turkic = -1};
    for (size_t at = next_open(s, len, 0); at < len; at = next_open(s, len, at + 1)) {
        size_t end;
        bool t;
        if (!reading_at(&rd, at, &end, &t))
            continue;
        toned += t, all++;
        if (toned >= READINGS_TONED || all >= READINGS_ALL)
            return true;
    }
    return false;
}

/* Writes s into o with the code points of each reading, brackets included,
 * as U+0300 (at most 2 bytes a byte). Returns the bytes written; *count
 * gets the readings. */
static size_t drop_readings(const nd_normalizer *n, const uint8_t *s, size_t len, uint8_t *o,
                            uint32_t *count)
{
    size_t olen = 0, copied = 0;
    *count = 0;
    reader rd = {.n = n, .s = s, .len = len, .turkic = -1};
    for (size_t at = next_open(s, len, 0); at < len; at = next_open(s, len, at + 1)) {
        size_t end;
        bool t;
        if (!reading_at(&rd, at, &end, &t))
            continue;
        memcpy(o + olen, s + copied, at - copied);
        olen += at - copied;
        for (size_t i = at; i < end; i++)
            if ((s[i] & 0xC0) != 0x80)
                o[olen++] = DROPPED_0, o[olen++] = DROPPED_1;
        copied = end;
        at = end - 1;
        (*count)++;
    }
    memcpy(o + olen, s + copied, len - copied);
    return olen + len - copied;
}

/* ---- the folds in their order ---- */

/* The look-alike fold of the words of s (valid UTF-8) into o (at most 2
 * bytes a byte). Returns the bytes written, 0 when no letter was replaced;
 * *lookalike gets the letters counted. */
static size_t fold_words(const nd_normalizer *n, const survey *sv, const uint8_t *s, size_t len,
                         uint8_t *o, uint32_t *lookalike)
{
    size_t olen = 0, copied = 0; /* s[0, copied) is in o[0, olen) */
    tally tl = {0};
    for (size_t pos = 0; pos < len;) {
        /* the next word: [ws, we) */
        size_t ws = pos, we = pos;
        while (we < len) {
            size_t p = we;
            uint32_t cp = 0;
            nd_utf8_decode(s, len, &p, &cp); /* valid: checked by the caller */
            if (!is_word_cp(n, cp))
                break;
            we = p;
        }
        if (we == ws) { /* not a word character */
            uint32_t cp = 0;
            nd_utf8_decode(s, len, &pos, &cp);
            continue;
        }
        pos = we;
        /* the word goes after the text since the last one replaced */
        size_t wlen = olen + (ws - copied);
        if (fold_word(n, sv, s, ws, we, o, &wlen, &tl)) {
            memcpy(o + olen, s + copied, ws - copied);
            olen = wlen, copied = we;
        }
    }
    if (copied == 0)
        return 0;
    memcpy(o + olen, s + copied, len - copied);
    olen += len - copied;
    /* a word of one script read in another is a swap only in a text where
     * some word mixes scripts: not a Latin name in a Russian text; and ı
     * only in a text with another swap: not a Turkish name in English */
    uint32_t swaps = tl.within + tl.swapped;
    *lookalike = swaps + (tl.swapped ? tl.whole : 0) + (swaps ? tl.dotless : 0);
    return olen;
}

/* nd_fold_text(), or nd_fold_lookalikes() when annotation (and reordered)
 * is NULL. */
static int fold_text(const nd_normalizer *n, const char *text, size_t len, char **buf, size_t *cap,
                     const char **out, size_t *out_len, uint32_t *lookalike, uint32_t *annotation,
                     uint32_t *reordered)
{
    const uint8_t *s = (const uint8_t *)text;
    *out = text, *out_len = len, *lookalike = 0;
    if (annotation)
        *annotation = 0, *reordered = 0;
    bool letters = maybe_mixed(s, len) || maybe_special(s, len);
    bool readings = annotation && has_readings(n, s, len);
    if (!letters && !readings)
        return 0;
    survey sv;
    if (!survey_text(n, s, len, &sv))
        return 0; /* invalid: the tokenizer refuses it */
    /* *buf: [0, len) the text in reading order, when it has overrides; then
     * the text without its readings, when it may have some; then the folded
     * letters (each at most 2 bytes a byte of its input) */
    bool drop = annotation && (readings || sv.overrides);
    size_t at = sv.overrides ? len : 0, dropped = drop ? 2 * len : len;
    size_t need = at + (drop ? dropped : 0) + (letters ? 2 * dropped : 0) + 4;
    if (*cap < need) {
        char *b = realloc(*buf, need);
        if (!b)
            return -ENOMEM;
        *buf = b, *cap = need;
    }
    uint8_t *o = (uint8_t *)*buf;
    uint32_t moved = sv.overrides ? reading_order(s, len, o) : 0;
    if (moved) {
        s = o, *out = *buf;
        if (reordered)
            *reordered = moved;
        readings = drop && has_readings(n, s, len); /* in the order read */
    }
    uint32_t count = 0;
    if (readings) {
        size_t olen = drop_readings(n, s, len, o + at, &count);
        s = o + at, len = olen;
        *out = (const char *)s, *out_len = len, *annotation = count;
        at += olen;
    }
    if (!letters)
        return 0;
    if (count && !survey_text(n, s, len, &sv)) /* the dominant script without them */
        return 0;
    size_t olen = fold_words(n, &sv, s, len, o + at, lookalike);
    if (olen)
        *out = (const char *)o + at, *out_len = olen;
    return 0;
}

int nd_fold_lookalikes(const nd_normalizer *n, const char *text, size_t len, char **buf,
                       size_t *cap, const char **out, size_t *out_len, uint32_t *lookalike)
{
    return fold_text(n, text, len, buf, cap, out, out_len, lookalike, NULL, NULL);
}

int nd_fold_text(const nd_normalizer *n, const char *text, size_t len, char **buf, size_t *cap,
                 const char **out, size_t *out_len, uint32_t *lookalike, uint32_t *annotation,
                 uint32_t *reordered)
{
    return fold_text(n, text, len, buf, cap, out, out_len, lookalike, annotation, reordered);
}
