/* tokenizer.c - the folds, the normalizer and the tokens, once for the
 * fingerprint and the sketch (see tokenizer.h).
 *
 * One reading, made in three shapes chosen at compile time (the hot loops
 * are specialized on a constant `opt`, so that a consumer pays only for
 * what it asks): with spans, weights and integrity counts (the sketch),
 * with the BMP CJK tokens counted by code point (the fingerprint's
 * unigrams), or a plain list of hashes (the fingerprint's n-grams). */
#include "tokenizer.h"
#include "hangul.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#pragma GCC diagnostic push
/* gcc 12 at -O3 flags reads in XXH3's length-dispatched branches that never
 * run for the short buffers passed here */
#pragma GCC diagnostic ignored "-Warray-bounds"
#define XXH_INLINE_ALL
#include <xxhash.h>
#pragma GCC diagnostic pop

#include <unicode/uchar.h>

#include "fold.h"
#include "markup.h"
#include "normalizer.h"
#include "swar.h"
#include "utf8.h"

#define WORD_MAX 256 /* bytes of a word that are hashed (fingerprint.md) */
#define W_CJK ND_TOKEN_W_CJK
#define W_WORD ND_TOKEN_W_WORD

/* The CJK Unified Ideographs block, most of Chinese text. */
#define HAN_FIRST 0x4E00u
#define HAN_COUNT 0x5200u

/* Bits of nd_tokenizer.ascii[], per byte. A_CHAR must be 1. */
enum {
    A_CHAR = 1,    /* counts in `chars`: not class S */
    A_WORD = 2,    /* a word character */
    A_TRIGGER = 4, /* may start a skipped span: ! ] h w f H W F */
    A_HIGH = 8,    /* not ASCII */
};

/* The shapes of a reading (compile-time constants of the hot loops). */
enum {
    O_SPANS = 1, /* spans, weights, integrity counts; the character stream by st->want_char */
    O_COUNT = 2, /* BMP CJK tokens counted (nd_cjk_counts), not listed */
};

struct nd_tokenizer {
    nd_normalizer *norm;
    uint64_t *cp_hash;      /* XXH3 of the UTF-8 of each BMP code point */
    uint8_t cjk_block[256]; /* BMP block cp >> 8 has a code point mapping to CJK */
    /* Each ASCII byte maps to one entry, not CJK, and a word character to an
     * ASCII one: tokenize_ascii() may take runs of them (true with Unicode
     * 15; checked when the tokenizer is made). */
    bool ascii_fast;
    /* The ASCII word characters are the letters and digits, letters lowered
     * (true with Unicode 15; checked when the tokenizer is made):
     * ascii_word_swar() may take eight at a time. */
    bool ascii_swar;
    /* With ascii_fast: the A_* bits of each byte (tokenize_ascii()). */
    uint8_t ascii[256];
    /* Per code point of the CJK Unified Ideographs block (bit cp -
     * HAN_FIRST): it maps to itself, a single Han entry that no fold
     * changes (not Traditional, not invisible). tokenize_3byte_run() takes
     * those without the 256 KiB table, whose lines a request's other work
     * evicts, and hashes their UTF-8 in place; this map is 2.6 KiB. Built
     * from the table when the tokenizer is made. */
    uint64_t han_plain[(HAN_COUNT + 63) / 64];
    /* For a BMP code point from U+0800 that maps to a single CJK entry
     * that is a token by itself (not a Hangul jamo or LV syllable that may
     * compose), that token's code point; else 0. tokenize_3byte_run()
     * counts those by one lookup (O_COUNT). */
    uint16_t cjk_direct[ND_NORM_BMP];
};

typedef struct tok_state {
    nd_tokens *t;
    const uint64_t *cp_hash;
    uint8_t word[WORD_MAX];
    size_t word_len;
    uint32_t word_start, word_end;
    uint32_t hangul, hangul_start; /* pending jamo L or LV syllable, its start */
    uint32_t cjk_cps, word_cps;    /* class C and W code points (after mapping) */
    uint32_t chars;                /* entries not of class S (fingerprint.md's chars) */
    bool want_char;                /* build the character stream (O_SPANS) */
    bool skip;                     /* skip markup (step 1) */
    /* What the folds read differently (nd_integrity, O_SPANS): invisible
     * code points are counted when they sit between two letters (W or C):
     * pending_inv since the last visible code point, prev_letter whether
     * that was a letter, prev_cp its code point. */
    uint32_t invisible, pending_inv, traditional, han, prev_cp;
    bool prev_letter, prev_cjk;
    int err;
} tok_state;

/* Bytes that may start a skipped span (lib/markup.h, fingerprint.md step
 * 1): ! ] h w f H W F. */
static const uint8_t skip_trigger[256] = {
    ['!'] = 1, [']'] = 1, ['h'] = 1, ['w'] = 1, ['f'] = 1, ['H'] = 1, ['W'] = 1, ['F'] = 1,
};

/* Whether nd_markup_skip_length() may find a URL or link markup at s[pos]
 * (a byte of skip_trigger[]): a quick test of its first two bytes. */
static inline bool may_skip(const uint8_t *s, size_t len, size_t pos, bool word_start)
{
    uint8_t c = s[pos];
    if (pos + 1 >= len)
        return false;
    uint8_t next = s[pos + 1];
    if (c == '!' || c == ']')
        return next == (c == '!' ? '[' : '(');
    return word_start && (next | 0x20) == ((c | 0x20) == 'w' ? 'w' : 't'); /* www. http ftp: */
}

int nd_tokenizer_create(nd_tokenizer **out)
{
    nd_tokenizer *tk = calloc(1, sizeof(*tk));
    if (!tk)
        return -ENOMEM;
    tk->cp_hash = malloc(ND_NORM_BMP * sizeof(uint64_t));
    int rc = tk->cp_hash ? nd_normalizer_create(&tk->norm) : -ENOMEM;
    if (rc < 0) {
        free(tk->cp_hash);
        free(tk);
        return rc;
    }
    for (uint32_t cp = 0; cp < ND_NORM_BMP; cp++) {
        uint8_t b[4];
        tk->cp_hash[cp] = cp >= 0xD800 && cp <= 0xDFFF ? 0 : XXH3_64bits(b, nd_utf8_encode(cp, b));
        uint32_t buf[ND_NORM_MAX];
        const uint32_t *seq;
        unsigned n = cp >= 0xD800 && cp <= 0xDFFF ? 0 : nd_normalizer_map(tk->norm, cp, buf, &seq);
        for (unsigned i = 0; i < n; i++)
            if (ND_NORM_CLASS(seq[i]) == ND_CHAR_CJK)
                tk->cjk_block[cp >> 8] = 1;
    }
    tk->ascii_fast = true;
    for (uint32_t c = 0; c < 0x80; c++) {
        uint32_t e = tk->norm->table[c];
        tk->ascii_fast &= !(e & ND_NORM_MULTI) && ND_NORM_CLASS(e) != ND_CHAR_CJK &&
                          (ND_NORM_CLASS(e) != ND_CHAR_WORD || ND_NORM_CP(e) < 0x80);
    }
    tk->ascii_swar = ND_SWAR && tk->ascii_fast;
    for (unsigned c = 0; c < 256; c++) {
        uint32_t cls = c < 0x80 ? ND_NORM_CLASS(tk->norm->table[c]) : 0;
        tk->ascii[c] = (uint8_t)(c >= 0x80                ? A_HIGH
                                 : (cls != ND_CHAR_SPACE) | (cls == ND_CHAR_WORD ? A_WORD : 0) |
                                       (skip_trigger[c] ? A_TRIGGER : 0));
    }
    for (uint32_t c = 0; c < 0x80; c++) {
        uint32_t e = tk->norm->table[c];
        uint32_t want = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ? c
                        : c >= 'A' && c <= 'Z'                           ? c | 0x20
                                                                         : 0;
        tk->ascii_swar &= want ? ND_NORM_CLASS(e) == ND_CHAR_WORD && ND_NORM_CP(e) == want
                               : ND_NORM_CLASS(e) != ND_CHAR_WORD;
    }
    for (uint32_t cp = HAN_FIRST; cp < HAN_FIRST + HAN_COUNT; cp++) {
        uint32_t e = tk->norm->table[cp];
        bool plain = !(e & (ND_NORM_MULTI | ND_NORM_F_INVISIBLE | ND_NORM_F_TRAD)) &&
                     (e & ND_NORM_F_HAN) && ND_NORM_CLASS(e) == ND_CHAR_CJK && ND_NORM_CP(e) == cp;
        if (plain)
            tk->han_plain[(cp - HAN_FIRST) / 64] |= 1ull << ((cp - HAN_FIRST) % 64);
    }
    for (uint32_t cp = 0x800; cp < ND_NORM_BMP; cp++) {
        uint32_t e = tk->norm->table[cp], x = ND_NORM_CP(e);
        if (!(e & ND_NORM_MULTI) && ND_NORM_CLASS(e) == ND_CHAR_CJK && x != 0 && x < ND_NORM_BMP &&
            !is_jamo_l(x) && !is_lv(x))
            tk->cjk_direct[cp] = (uint16_t)x;
    }
    *out = tk;
    return 0;
}

void nd_tokenizer_destroy(nd_tokenizer *tk)
{
    if (!tk)
        return;
    nd_normalizer_destroy(tk->norm);
    free(tk->cp_hash);
    free(tk);
}

void nd_tokens_init(nd_tokens *t)
{
    memset(t, 0, sizeof(*t));
}

static void stream_finish(nd_token_stream *t)
{
    free(t->h), free(t->start), free(t->end), free(t->cjk), free(t->w);
}

void nd_tokens_finish(nd_tokens *t)
{
    stream_finish(&t->word);
    stream_finish(&t->chr);
    free(t->cjk.tf);
    free(t->cjk.seen);
    free(t->fold);
    nd_tokens_init(t);
}

/* ---- token streams ---- */

static __attribute__((noinline)) int ts_grow(nd_token_stream *t)
{
    size_t c = t->cap ? t->cap * 2 : 1024;
    uint64_t *h = realloc(t->h, c * sizeof(*h));
    if (h)
        t->h = h;
    uint32_t *a = realloc(t->start, c * sizeof(*a));
    if (a)
        t->start = a;
    uint32_t *b = realloc(t->end, c * sizeof(*b));
    if (b)
        t->end = b;
    uint32_t *k = realloc(t->cjk, c * sizeof(*k));
    if (k)
        t->cjk = k;
    uint8_t *w = realloc(t->w, c);
    if (w)
        t->w = w;
    if (!h || !a || !b || !k || !w)
        return -ENOMEM;
    t->cap = c;
    return 0;
}

/* Makes room for `extra` more tokens in t. Returns 0 or -ENOMEM. */
static int ts_reserve(nd_token_stream *t, size_t extra)
{
    while (t->cap - t->n < extra)
        if (ts_grow(t) < 0)
            return -ENOMEM;
    return 0;
}

int nd_cjk_counts_ready(nd_cjk_counts *c)
{
    if (c->tf)
        return 0;
    c->tf = calloc(ND_NORM_BMP, sizeof(*c->tf));
    c->seen = malloc(ND_NORM_BMP * sizeof(*c->seen));
    if (!c->tf || !c->seen) {
        free(c->tf);
        free(c->seen);
        c->tf = c->seen = NULL;
        return -ENOMEM;
    }
    return 0;
}

/* Appends a token to t (its span and weight with O_SPANS). */
static inline __attribute__((always_inline)) void push_to(tok_state *st, nd_token_stream *t,
                                                          unsigned opt, uint64_t h, uint32_t start,
                                                          uint32_t end, uint32_t w, uint32_t cjk)
{
    if (__builtin_expect(t->n == t->cap, 0) && ts_grow(t) < 0) {
        st->err = -ENOMEM;
        return;
    }
    size_t i = t->n++;
    t->h[i] = h, t->cjk[i] = cjk;
    if (opt & O_SPANS)
        t->start[i] = start, t->end[i] = end, t->w[i] = (uint8_t)w;
}

static inline uint64_t cp_hash(const tok_state *st, uint32_t cp)
{
    if (cp < ND_NORM_BMP)
        return st->cp_hash[cp];
    uint8_t b[4];
    return XXH3_64bits(b, nd_utf8_encode(cp, b));
}

/* A token of the character stream (every W or C code point); wi: the
 * token's word-stream index + 1 (the CJK token just pushed there), or 0
 * for a letter or digit. */
static inline __attribute__((always_inline)) void push_char_token(tok_state *st, uint64_t h,
                                                                  uint32_t start, uint32_t end,
                                                                  uint32_t wi)
{
    push_to(st, &st->t->chr, O_SPANS, h, start, end, W_CJK, wi);
}

/* Counts one BMP CJK token of code point cp (O_COUNT). */
static inline void count_cjk(tok_state *st, uint32_t cp)
{
    nd_cjk_counts *c = &st->t->cjk;
    if (!c->tf && nd_cjk_counts_ready(c) < 0) {
        st->err = -ENOMEM;
        return;
    }
    uint32_t n = c->tf[cp];
    if (n == 0)
        c->seen[c->n++] = (uint16_t)cp;
    c->tf[cp] = (uint16_t)(n + (n < UINT16_MAX));
    c->occurrences++;
}

static inline __attribute__((always_inline)) void push_cjk(tok_state *st, unsigned opt,
                                                           uint32_t cp, uint32_t start,
                                                           uint32_t end)
{
    if (opt & O_COUNT) {
        if (cp < ND_NORM_BMP) {
            count_cjk(st, cp);
            return;
        }
        st->t->cjk.listed++;
    }
    uint64_t h = cp_hash(st, cp);
    push_to(st, &st->t->word, opt, h, start, end, W_CJK, cp);
    if ((opt & O_SPANS) && st->want_char)
        push_char_token(st, h, start, end, (uint32_t)st->t->word.n);
}

static inline __attribute__((always_inline)) void flush_hangul(tok_state *st, unsigned opt,
                                                               uint32_t end)
{
    if (st->hangul) {
        push_cjk(st, opt, st->hangul, st->hangul_start, end);
        st->hangul = 0;
    }
}

/* One CJK-class code point from source code point ci. */
static inline __attribute__((always_inline)) void feed_cjk(tok_state *st, unsigned opt,
                                                           uint32_t cp, uint32_t ci)
{
    uint32_t p = st->hangul;
    if (p && is_jamo_l(p) && is_jamo_v(cp)) {
        st->hangul = hangul_compose_lv(p, cp);
        return;
    }
    if (p && is_lv(p) && is_jamo_t(cp)) {
        st->hangul = 0;
        push_cjk(st, opt, hangul_compose_lvt(p, cp), st->hangul_start, ci + 1);
        return;
    }
    flush_hangul(st, opt, ci);
    if (is_jamo_l(cp) || is_lv(cp))
        st->hangul = cp, st->hangul_start = ci;
    else
        push_cjk(st, opt, cp, ci, ci + 1);
}

static inline __attribute__((always_inline)) void end_word(tok_state *st, unsigned opt)
{
    if (st->word_len == 0)
        return;
    push_to(st, &st->t->word, opt, XXH3_64bits(st->word, st->word_len), st->word_start,
            st->word_end, W_WORD, 0);
    st->word_len = 0;
}

/* One normalized entry of source code point ci. */
static inline __attribute__((always_inline)) void feed_entry(tok_state *st, unsigned opt,
                                                             uint32_t e, uint32_t ci)
{
    uint32_t cls = ND_NORM_CLASS(e), cp = ND_NORM_CP(e);
    st->chars += cls != ND_CHAR_SPACE;
    if (opt & O_SPANS) {
        st->traditional += (e & ND_NORM_F_TRAD) != 0;
        st->han += (e & ND_NORM_F_HAN) != 0;
    }
    if (cls == ND_CHAR_WORD) {
        /* A pending jamo ends where the word starts. */
        flush_hangul(st, opt, ci);
        st->word_cps++;
        if ((opt & O_SPANS) && st->want_char)
            push_char_token(st, cp_hash(st, cp), ci, ci + 1, 0);
        if (st->word_len == 0)
            st->word_start = ci;
        st->word_end = ci + 1;
        if (cp < 0x80 && st->word_len < WORD_MAX) {
            st->word[st->word_len++] = (uint8_t)cp;
        } else if (st->word_len + 4 <= WORD_MAX) {
            st->word_len += nd_utf8_encode(cp, st->word + st->word_len);
        } else {
            uint8_t b[4];
            size_t n = nd_utf8_encode(cp, b);
            if (st->word_len + n <= WORD_MAX) {
                memcpy(st->word + st->word_len, b, n);
                st->word_len += n;
            }
        }
        return;
    }
    end_word(st, opt);
    if (cls == ND_CHAR_CJK)
        st->cjk_cps++, feed_cjk(st, opt, cp, ci);
    else
        flush_hangul(st, opt, ci);
}

/* Whether s may hold a code point that maps to a CJK-class entry (false:
 * it certainly holds none, so its character stream is not needed). Reads
 * only s[0, len), whether s is valid UTF-8 or not. */
static bool maybe_cjk(const nd_tokenizer *tk, const uint8_t *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        if (i + 8 <= len) {
            uint64_t x;
            memcpy(&x, s + i, 8);
            if (!(x & 0x8080808080808080ull)) {
                i += 8;
                continue;
            }
        }
        uint8_t b = s[i];
        if (b < 0x80) {
            i++;
        } else if (len - i < 3) {
            return true; /* a short tail (or invalid): the tokenizer decides */
        } else if (b < 0xE0) {
            uint32_t cp = (uint32_t)(b & 0x1F) << 6 | (s[i + 1] & 0x3Fu);
            if (tk->cjk_block[cp >> 8])
                return true;
            i += 2;
        } else if (b < 0xF0) {
            uint32_t cp = (uint32_t)(b & 0x0F) << 12 | (uint32_t)(s[i + 1] & 0x3F) << 6 |
                          (s[i + 2] & 0x3Fu);
            if (tk->cjk_block[cp >> 8])
                return true;
            i += 3;
        } else {
            return true; /* outside the BMP: not tabulated */
        }
    }
    return false;
}

#define RUN_CHUNK 4096 /* tokens tokenize_3byte_run() makes room for at once */

/* A run of valid 3-byte sequences from s[pos] (lead E0..EF, two
 * continuation bytes, not overlong; a surrogate's entry has length 0) that
 * each map to one entry which is a CJK code point outside the Hangul
 * composition, or punctuation or space: what feed_entry() does for them,
 * with no pending jamo. Returns the bytes consumed (0: the first is not
 * one; an invalid sequence ends the run, for the general path to refuse);
 * *ci advances by the code points consumed. Most of Chinese and Japanese
 * text: it makes room for a chunk of tokens at once and writes them through
 * local pointers (or, with O_COUNT, counts them). */
static inline __attribute__((always_inline)) size_t
tokenize_3byte_run(const nd_tokenizer *tk, tok_state *st, unsigned opt, const uint8_t *s,
                   size_t len, size_t pos, uint32_t *ci)
{
    const uint32_t *table = tk->norm->table;
    const uint64_t *cp_hash = tk->cp_hash;
    const uint64_t *han_plain = tk->han_plain;
    const bool want_char = (opt & O_SPANS) && st->want_char;
    nd_token_stream *t = &st->t->word, *ct = &st->t->chr;
    nd_cjk_counts *cc = &st->t->cjk;
    size_t p = pos;
    uint32_t c = *ci, cjk = 0, punct = 0, trad = 0, han = 0;
    bool ended = false, more = true, last_cjk = false;
    while (more && p + 3 <= len) {
        size_t room = (len - p) / 3 < RUN_CHUNK ? (len - p) / 3 : RUN_CHUNK;
        /* + 1: the word that the run ends (end_word()) */
        if (ts_reserve(t, (opt & O_COUNT ? 0 : room) + 1) < 0 ||
            (want_char && ts_reserve(ct, room) < 0) ||
            ((opt & O_COUNT) && !cc->tf && nd_cjk_counts_ready(cc) < 0)) {
            st->err = -ENOMEM;
            break;
        }
        size_t n = t->n, cn = ct->n, stop = p + 3 * room;
        for (; p < stop; p += 3, c++) {
            uint32_t b0 = s[p], b1 = s[p + 1] ^ 0x80u, b2 = s[p + 2] ^ 0x80u;
            uint32_t cp = ((b0 & 0x0F) << 12) | (b1 << 6) | b2, x;
            if ((opt & O_COUNT) && (b0 & 0xF0) == 0xE0 && (b1 | b2) <= 0x3F &&
                (x = tk->cjk_direct[cp]) != 0) { /* a CJK token, counted */
                last_cjk = true;
                if (!ended) { /* the run ends the word before it */
                    t->n = n;
                    end_word(st, opt);
                    n = t->n, ended = true;
                }
                cjk++;
                uint32_t k = cc->tf[x];
                if (k == 0)
                    cc->seen[cc->n++] = (uint16_t)x;
                cc->tf[x] = (uint16_t)(k + (k < UINT16_MAX));
                continue;
            }
            if ((b0 & 0xF0) != 0xE0 || (b1 | b2) > 0x3F || cp < 0x800) {
                more = false;
                break;
            }
            uint64_t h = 0;
            uint32_t cls = ND_CHAR_CJK;
            uint32_t hi = cp - HAN_FIRST;
            if (hi < HAN_COUNT && (han_plain[hi / 64] >> (hi % 64) & 1)) {
                /* itself: its hash is that of its own UTF-8, computed in
                 * place (cheaper than a cache miss in cp_hash[]) */
                x = cp;
                if (!(opt & O_COUNT))
                    h = XXH3_64bits(s + p, 3);
                han++;
            } else {
                uint32_t e = table[cp];
                cls = ND_NORM_CLASS(e), x = ND_NORM_CP(e);
                /* an invisible blank: the general path counts it */
                bool take = !(e & (ND_NORM_MULTI | ND_NORM_F_INVISIBLE)) &&
                            (cls == ND_CHAR_PUNCT || cls == ND_CHAR_SPACE ||
                             (cls == ND_CHAR_CJK && !is_jamo_l(x) && !is_lv(x) && x < ND_NORM_BMP));
                if (!take) {
                    more = false;
                    break;
                }
                if (cls == ND_CHAR_CJK) {
                    /* itself: the hash of its own UTF-8, computed in place
                     * (cheaper than a cache miss in cp_hash[]) */
                    if (!(opt & O_COUNT))
                        h = x == cp ? XXH3_64bits(s + p, 3) : cp_hash[x];
                    trad += (e & ND_NORM_F_TRAD) != 0;
                    han += (e & ND_NORM_F_HAN) != 0;
                }
            }
            last_cjk = cls == ND_CHAR_CJK;
            if (!ended) { /* the run ends the word before it */
                t->n = n;
                end_word(st, opt);
                n = t->n, ended = true;
            }
            if (cls != ND_CHAR_CJK) {
                punct += cls == ND_CHAR_PUNCT;
                continue;
            }
            cjk++;
            if (opt & O_COUNT) {
                uint32_t k = cc->tf[x];
                if (k == 0)
                    cc->seen[cc->n++] = (uint16_t)x;
                cc->tf[x] = (uint16_t)(k + (k < UINT16_MAX));
                continue;
            }
            t->h[n] = h, t->cjk[n] = x;
            if (opt & O_SPANS)
                t->start[n] = c, t->end[n] = c + 1, t->w[n] = W_CJK;
            n++;
            if (want_char) {
                ct->h[cn] = h, ct->start[cn] = c, ct->end[cn] = c + 1, ct->w[cn] = W_CJK;
                ct->cjk[cn] = (uint32_t)n;
                cn++;
            }
        }
        t->n = n, ct->n = cn;
    }
    st->cjk_cps += cjk;
    st->chars += cjk + punct;
    if (opt & O_COUNT)
        cc->occurrences += cjk;
    if (opt & O_SPANS) {
        st->traditional += trad;
        st->han += han;
        if (p != pos)
            st->prev_letter = last_cjk, st->prev_cjk = last_cjk;
    }
    *ci = c;
    return p - pos;
}

/* Skips the markup of k bytes at s[pos] (lib/markup.h), checking that it
 * is valid UTF-8 (it may hold any byte up to its end). */
static inline __attribute__((always_inline)) void skip_span(tok_state *st, unsigned opt,
                                                            const uint8_t *s, size_t pos, size_t k,
                                                            uint32_t *ci)
{
    if (nd_utf8_validate((const char *)s + pos, k, NULL) < 0) {
        st->err = -EILSEQ;
        return;
    }
    end_word(st, opt);
    flush_hangul(st, opt, *ci);
    uint32_t c = *ci;
    for (size_t j = pos; j < pos + k; j++)
        c += (s[j] & 0xC0) != 0x80;
    *ci = c;
}

/* Continues the current word with the ASCII letters and digits at s[pos..]
 * eight at a time (tk->ascii_swar), while eight more fit in st->word: what
 * tokenize_ascii() does for them one by one (inside a word no markup can
 * start at a letter or digit). Returns the bytes taken; the caller counts
 * them in ci and chars. */
static inline __attribute__((always_inline)) size_t
ascii_word_swar(tok_state *st, unsigned opt, const uint8_t *s, size_t len, size_t pos, uint32_t ci)
{
    size_t room = len - pos < WORD_MAX - st->word_len ? len - pos : WORD_MAX - st->word_len;
    uint8_t *w = st->word + st->word_len;
    bool ended;
    size_t done = nd_swar_word_copy(s + pos, room, w, &ended);
    if (done == 0)
        return 0;
    if ((opt & O_SPANS) && st->want_char)
        for (size_t i = 0; i < done; i++)
            push_char_token(st, st->cp_hash[w[i]], ci + (uint32_t)i, ci + (uint32_t)i + 1, 0);
    st->word_len += done;
    st->word_cps += (uint32_t)done;
    if (opt & O_SPANS)
        st->word_end = ci + (uint32_t)done;
    return done;
}

/* A run of ASCII bytes from s[pos] (tk->ascii_fast): what the general path
 * below does for them, markup included, without decoding or mapping each.
 * Returns the position after the run; *ci and *word_start follow. Each
 * byte is one code point: ci is cb + pos but across a skipped span. */
static inline __attribute__((always_inline)) size_t
tokenize_ascii(const nd_tokenizer *tk, tok_state *st, unsigned opt, const uint8_t *s, size_t len,
               size_t pos, uint32_t *ci_io, bool *word_start)
{
    const uint8_t *ascii = tk->ascii;
    const bool swar = tk->ascii_swar;
    const unsigned trigger = st->skip ? A_TRIGGER : 0;
    uint32_t cb = *ci_io - (uint32_t)pos, chars = 0;
    bool ws = *word_start;
    flush_hangul(st, opt, *ci_io); /* every ASCII entry ends a pending jamo */
    while (pos < len) {
        unsigned a = ascii[s[pos]];
        size_t k;
        if (a & A_HIGH)
            break;
        if ((a & trigger) && may_skip(s, len, pos, ws) &&
            (k = nd_markup_skip_length(s, len, pos, ws)) != 0) {
            uint32_t ci = cb + (uint32_t)pos;
            skip_span(st, opt, s, pos, k, &ci);
            if (st->err)
                break;
            pos += k;
            cb = ci - (uint32_t)pos;
            ws = true;
            continue;
        }
        if (a & A_WORD) {
            uint32_t ci = cb + (uint32_t)pos;
            if ((opt & O_SPANS) && st->word_len == 0)
                st->word_start = ci;
            ws = false;
            if (swar && (k = ascii_word_swar(st, opt, s, len, pos, ci)) != 0) {
                pos += k, chars += (uint32_t)k;
                continue;
            }
            uint32_t cp = ND_NORM_CP(tk->norm->table[s[pos]]);
            st->word_cps++;
            if ((opt & O_SPANS) && st->want_char)
                push_char_token(st, st->cp_hash[cp], ci, ci + 1, 0);
            if (opt & O_SPANS)
                st->word_end = ci + 1;
            if (st->word_len < WORD_MAX)
                st->word[st->word_len++] = (uint8_t)cp;
            chars++, pos++;
            continue;
        }
        /* space and punctuation, up to what may start a word or a skip */
        end_word(st, opt);
        ws = true;
        do
            chars += a & A_CHAR;
        while (++pos < len && !((a = ascii[s[pos]]) & (A_WORD | A_TRIGGER | A_HIGH)));
    }
    st->chars += chars;
    *ci_io = cb + (uint32_t)pos;
    *word_start = ws;
    return pos;
}

/* Counts the invisible code points that hide between two letters (what a
 * reader cannot see; a joiner, ICU's Join_Control, only after a letter of
 * Latin, Greek, Cyrillic, Armenian or a CJK one, as other scripts use them
 * in ordinary text), after cp (n entries seq) was fed. Emoji sequences
 * (joiners and variation selectors after symbols) are not counted. */
static void count_invisible(const nd_tokenizer *tk, tok_state *st, uint32_t cp, unsigned n,
                            const uint32_t *seq)
{
    if (n == 0) {
        bool inv = cp < ND_NORM_BMP ? (tk->norm->table[cp] & ND_NORM_F_INVISIBLE) != 0
                                    : nd_normalizer_invisible(cp);
        if (!inv) { /* a dropped mark: visible */
            st->pending_inv = 0;
            return;
        }
        if (st->prev_letter && (!u_hasBinaryProperty((UChar32)cp, UCHAR_JOIN_CONTROL) ||
                                st->prev_cp < 0x0590 || st->prev_cjk))
            st->pending_inv++;
        return;
    }
    uint32_t e = seq[n - 1], cls = ND_NORM_CLASS(e);
    if (n == 1 && (e & ND_NORM_F_INVISIBLE)) { /* a blank read as a space */
        if (st->prev_letter)
            st->pending_inv++;
        return;
    }
    if (cls == ND_CHAR_WORD || cls == ND_CHAR_CJK) {
        if (ND_NORM_CLASS(seq[0]) == ND_CHAR_WORD || ND_NORM_CLASS(seq[0]) == ND_CHAR_CJK)
            st->invisible += st->pending_inv;
        st->prev_letter = true, st->prev_cp = cp, st->prev_cjk = cls == ND_CHAR_CJK;
    } else {
        st->prev_letter = false;
    }
    st->pending_inv = 0;
}

/* Tokenizes UTF-8, refusing it (st->err -EILSEQ) where it is not valid;
 * returns the code point count. */
static inline __attribute__((always_inline)) uint32_t
tokenize_with(const nd_tokenizer *tk, tok_state *st, unsigned opt, const uint8_t *s, size_t len)
{
    size_t pos = 0;
    uint32_t ci = 0;
    bool word_start = true;
    while (pos < len && !st->err) {
        uint8_t b = s[pos];
        /* the fast paths run with no invisible code point pending */
        if ((b & 0xF0) == 0xE0 && !st->hangul && !st->pending_inv) {
            size_t k = tokenize_3byte_run(tk, st, opt, s, len, pos, &ci);
            if (k) {
                pos += k;
                word_start = true;
                continue;
            }
        }
        if (b < 0x80 && tk->ascii_fast && !st->pending_inv) {
            pos = tokenize_ascii(tk, st, opt, s, len, pos, &ci, &word_start);
            if (opt & O_SPANS) {
                st->prev_letter = st->word_len > 0;
                st->prev_cp = 'a', st->prev_cjk = false;
            }
            continue;
        }
        if (skip_trigger[b] && st->skip) {
            size_t k = nd_markup_skip_length(s, len, pos, word_start);
            if (k) {
                skip_span(st, opt, s, pos, k, &ci);
                pos += k;
                word_start = true;
                continue;
            }
        }
        uint32_t cp;
        if (nd_utf8_decode(s, len, &pos, &cp) < 0) {
            st->err = -EILSEQ;
            break;
        }
        uint32_t buf[ND_NORM_MAX];
        const uint32_t *seq;
        unsigned n = nd_normalizer_map(tk->norm, cp, buf, &seq);
        for (unsigned i = 0; i < n; i++)
            feed_entry(st, opt, seq[i], ci);
        if (n)
            word_start = ND_NORM_CLASS(seq[n - 1]) != ND_CHAR_WORD;
        if (opt & O_SPANS)
            count_invisible(tk, st, cp, n, seq);
        ci++;
    }
    end_word(st, opt);
    flush_hangul(st, opt, ci);
    return ci;
}

/* The three shapes, each its own specialized copy of the loops. */
static __attribute__((noinline)) uint32_t tokenize_spans(const nd_tokenizer *tk, tok_state *st,
                                                         const uint8_t *s, size_t len)
{
    return tokenize_with(tk, st, O_SPANS, s, len);
}

static __attribute__((noinline)) uint32_t tokenize_counts(const nd_tokenizer *tk, tok_state *st,
                                                          const uint8_t *s, size_t len)
{
    return tokenize_with(tk, st, O_COUNT, s, len);
}

static __attribute__((noinline)) uint32_t tokenize_list(const nd_tokenizer *tk, tok_state *st,
                                                        const uint8_t *s, size_t len)
{
    return tokenize_with(tk, st, 0, s, len);
}

int nd_tokenize(const nd_tokenizer *tk, nd_tokens *t, const char *text, size_t len,
                unsigned flags)
{
    /* overrides in reading order, readings dropped, look-alike letters
     * read as their twin (fold.h) */
    uint32_t lookalike, annotation, reordered;
    int rc = nd_fold_text(tk->norm, text, len, &t->fold, &t->fold_cap, &text, &len, &lookalike,
                          &annotation, &reordered);
    if (rc < 0)
        return rc;
    bool spans = flags & ND_TOKENIZE_SPANS;
    tok_state st = {.t = t,
                    .cp_hash = tk->cp_hash,
                    .skip = !(flags & ND_TOKENIZE_KEEP_MARKUP),
                    .want_char = spans && (flags & ND_TOKENIZE_CHARS) &&
                                 maybe_cjk(tk, (const uint8_t *)text, len)};
    t->word.n = t->chr.n = 0;
    t->cjk.occurrences = t->cjk.listed = 0;
    const uint8_t *s = (const uint8_t *)text;
    uint32_t ncp = spans                              ? tokenize_spans(tk, &st, s, len)
                   : flags & ND_TOKENIZE_CJK_COUNTS ? tokenize_counts(tk, &st, s, len)
                                                    : tokenize_list(tk, &st, s, len);
    t->stats = (nd_text_stats){.code_points = ncp,
                               .chars = st.chars,
                               .cjk_cps = st.cjk_cps,
                               .word_cps = st.word_cps,
                               .integrity = {.invisible = st.invisible,
                                             .lookalike = lookalike,
                                             .annotation = annotation,
                                             .reordered = reordered,
                                             .traditional = st.traditional,
                                             .han = st.han}};
    return st.err;
}
