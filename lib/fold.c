/* fold.c - the word-level look-alike fold (see fold.h). */
#include "fold.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "normalizer.h"
#include "utf8.h"

#define SCAN_BLOCK 64

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

int nd_fold_lookalikes(const nd_normalizer *n, const char *text, size_t len, char **buf,
                       size_t *cap, const char **out, size_t *out_len, uint32_t *lookalike)
{
    const uint8_t *s = (const uint8_t *)text;
    *out = text, *out_len = len, *lookalike = 0;
    if (!maybe_mixed(s, len))
        return 0;
    /* The text's dominant script, over its unambiguous letters. */
    uint32_t counts[ND_LK_SCRIPTS] = {0};
    for (size_t pos = 0; pos < len;) {
        uint32_t cp = 0;
        if (nd_utf8_decode(s, len, &pos, &cp) < 0)
            return 0; /* invalid: the tokenizer refuses it */
        if (is_unambiguous(n, cp))
            counts[n->lk[cp] & 7u]++;
    }
    unsigned dominant = majority(counts, true);
    uint8_t *o = NULL;
    size_t olen = 0, copied = 0; /* text[0, copied) is in o[0, olen) */
    uint32_t replaced = 0;
    size_t pos = 0;
    while (pos < len) {
        /* the next word: [ws, we) */
        size_t ws = pos, we = pos;
        uint32_t wc[ND_LK_SCRIPTS] = {0};
        bool folds = false;
        while (we < len) {
            size_t p = we;
            uint32_t cp = 0;
            nd_utf8_decode(s, len, &p, &cp); /* valid: checked above */
            if (!is_word_cp(n, cp))
                break;
            if (is_unambiguous(n, cp))
                wc[n->lk[cp] & 7u]++;
            folds |= cp < ND_LK_END && (n->lk[cp] & ND_LK_CONFUSABLE);
            we = p;
        }
        if (we == ws) { /* not a word character */
            uint32_t cp = 0;
            nd_utf8_decode(s, len, &pos, &cp);
            continue;
        }
        pos = we;
        unsigned script = majority(wc, false);
        bool any_unambiguous = false;
        for (unsigned k = 1; k < ND_LK_SCRIPTS; k++)
            any_unambiguous |= wc[k] != 0;
        if (!any_unambiguous)
            script = dominant;
        if (!folds || script == ND_LK_NONE)
            continue;
        /* Is anything replaced? A word without unambiguous letters is read
         * in the dominant script only when each of its letters has a twin
         * there (else it is a word of its own script: "Google" in a Russian
         * text). */
        bool change = false, whole = true;
        for (size_t p = ws; p < we && whole;) {
            uint32_t cp = 0;
            nd_utf8_decode(s, len, &p, &cp);
            bool t = twin_of(n, cp, script) != 0;
            change |= t;
            whole = any_unambiguous || t || cp >= ND_LK_END || (n->lk[cp] & 7u) == ND_LK_NONE ||
                    (n->lk[cp] & 7u) == script;
        }
        if (!change || !whole)
            continue;
        if (!o) {
            size_t need = 2 * len + 4;
            if (*cap < need) {
                char *b = realloc(*buf, need);
                if (!b)
                    return -ENOMEM;
                *buf = b, *cap = need;
            }
            o = (uint8_t *)*buf;
        }
        memcpy(o + olen, s + copied, ws - copied);
        olen += ws - copied;
        for (size_t p = ws; p < we;) {
            size_t at = p;
            uint32_t cp = 0;
            nd_utf8_decode(s, len, &p, &cp);
            uint32_t t = twin_of(n, cp, script);
            if (t) {
                olen += nd_utf8_encode(t, o + olen);
                replaced++;
            } else {
                memcpy(o + olen, s + at, p - at);
                olen += p - at;
            }
        }
        copied = we;
    }
    if (!o)
        return 0;
    memcpy(o + olen, s + copied, len - copied);
    olen += len - copied;
    *out = (const char *)o, *out_len = olen, *lookalike = replaced;
    return 0;
}
