/* fold.c - the folds that run before the normalizer: text under a
 * directional override in reading order, and look-alike letters (see
 * fold.h). */
#include "fold.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <unicode/uchar.h>

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
 * whether o differs from s. */
static bool reading_order(const uint8_t *s, size_t len, uint8_t *o)
{
    memcpy(o, s, len);
    bool moved = false;
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
        }
        moved |= m;
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

int nd_fold_lookalikes(const nd_normalizer *n, const char *text, size_t len, char **buf,
                       size_t *cap, const char **out, size_t *out_len, uint32_t *lookalike)
{
    const uint8_t *s = (const uint8_t *)text;
    *out = text, *out_len = len, *lookalike = 0;
    if (!maybe_mixed(s, len) && !maybe_special(s, len))
        return 0;
    survey sv;
    if (!survey_text(n, s, len, &sv))
        return 0; /* invalid: the tokenizer refuses it */
    /* [0, len): the text in reading order, when it has overrides; then the
     * folded text (a replacement takes at most 2 bytes a byte) */
    size_t at = sv.overrides ? len : 0, need = at + 2 * len + 4;
    if (*cap < need) {
        char *b = realloc(*buf, need);
        if (!b)
            return -ENOMEM;
        *buf = b, *cap = need;
    }
    uint8_t *o = (uint8_t *)*buf + at;
    if (sv.overrides && reading_order(s, len, (uint8_t *)*buf))
        s = (const uint8_t *)*buf, *out = *buf;
    size_t olen = 0, copied = 0; /* s[0, copied) is in o[0, olen) */
    tally tl = {0};
    for (size_t pos = 0; pos < len;) {
        /* the next word: [ws, we) */
        size_t ws = pos, we = pos;
        while (we < len) {
            size_t p = we;
            uint32_t cp = 0;
            nd_utf8_decode(s, len, &p, &cp); /* valid: checked above */
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
        if (fold_word(n, &sv, s, ws, we, o, &wlen, &tl)) {
            memcpy(o + olen, s + copied, ws - copied);
            olen = wlen, copied = we;
        }
    }
    if (copied == 0)
        return 0; /* nothing replaced: *out is the text in reading order */
    memcpy(o + olen, s + copied, len - copied);
    olen += len - copied;
    /* a word of one script read in another is a swap only in a text where
     * some word mixes scripts: not a Latin name in a Russian text; and ı
     * only in a text with another swap: not a Turkish name in English */
    *out = (const char *)o, *out_len = olen;
    uint32_t swaps = tl.within + tl.swapped;
    *lookalike = swaps + (tl.swapped ? tl.whole : 0) + (swaps ? tl.dotless : 0);
    return 0;
}
