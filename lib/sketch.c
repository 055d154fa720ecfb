/* sketch.c - shingles, the nested-sample sketch, estimates, passages and
 * anchors (see sketch.h; the specification is proto/sketch.md). */
#include "sketch.h"

#include <errno.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#pragma GCC diagnostic push
/* gcc 12 at -O3 flags reads in XXH3's length-dispatched branches that never
 * run for the short buffers passed here (as in fingerprint.c) */
#pragma GCC diagnostic ignored "-Warray-bounds"
#define XXH_INLINE_ALL
#include <xxhash.h>
#pragma GCC diagnostic pop

#include "sort.h"
#include "swar.h" /* ND_SWAR: nd_sketch_decode()'s SSE2 path */
#include "tokenizer.h"

#define W_SHINGLE 15 /* a shingle's tokens reach this summed weight */
#define LEVEL_MAX 31
#define CHAR_MODE_NUM 1 /* character mode when CJK >= NUM/DEN of C + W */
#define CHAR_MODE_DEN 25
#define ENCODING_FORMAT 1

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "sketch.c hashes token hashes as little-endian bytes; port the shingle hash"
#endif

struct nd_sketcher {
    nd_tokenizer *tk; /* the folds and the tokens (tokenizer.h) */
};

/* A token stream (tokenizer.h): the hashes of a shingle's tokens are
 * contiguous, so the shingle hash reads them in place. */
typedef nd_token_stream tstream;

typedef nd_shingle shingle;

struct nd_sk_scratch {
    nd_tokens tokens; /* the last text's: word and character mode streams, stats */
    shingle *sh[2]; /* per mode: the last text's shingles, in text order */
    size_t nsh[2], sh_cap[2];
    uint64_t *set;  /* open addressing, 0 = empty; power-of-two size */
    size_t set_cap; /* allocated */
    uint32_t *sort_idx; /* first_by_sort(): 2 entries a shingle */
    size_t sort_idx_cap;
    uint64_t *uniq; /* the distinct hashes of the current stream */
    size_t uniq_cap;
    uint8_t *upos; /* their positions (nd_sketch.pos), uniq's order */
    size_t upos_cap;
    uint64_t *keys; /* shingle_stream(): rank keys that may be anchors */
    size_t keys_cap;
    uint64_t *keys_tmp; /* bottom_keys(): keys sorted by their top bits */
    size_t keys_tmp_cap;
    size_t set_size;        /* in use for the current text */
    bool have_text;         /* sh[] holds the last text */
    uint8_t shift[2];       /* that text's sketch shift, per mode */
    bool has_cjk;           /* the last text has CJK code points */
    bool sampled[2];        /* shift[mode] is that of sh[mode] (sample_stream()) */
    bool query;             /* sh[] holds both modes of nd_sketch_query() */
    uint8_t own_mode;       /* the last text's own mode */
};

int nd_sketcher_create(nd_sketcher **out)
{
    nd_sketcher *sk = calloc(1, sizeof(*sk));
    if (!sk)
        return -ENOMEM;
    int rc = nd_tokenizer_create(&sk->tk);
    if (rc < 0) {
        free(sk);
        return rc;
    }
    *out = sk;
    return 0;
}

void nd_sketcher_destroy(nd_sketcher *sk)
{
    if (!sk)
        return;
    nd_tokenizer_destroy(sk->tk);
    free(sk);
}

int nd_sk_scratch_create(nd_sk_scratch **out)
{
    nd_sk_scratch *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    *out = s;
    return 0;
}

void nd_sk_scratch_destroy(nd_sk_scratch *s)
{
    if (!s)
        return;
    nd_tokens_finish(&s->tokens);
    free(s->sh[0]);
    free(s->sh[1]);
    free(s->set);
    free(s->sort_idx);
    free(s->uniq);
    free(s->upos);
    free(s->keys);
    free(s->keys_tmp);
    free(s);
}

/* ---- shingles, set, sample ---- */

static unsigned level_of(uint64_t h)
{
    return h ? ((unsigned)__builtin_ctzll(h) > LEVEL_MAX ? LEVEL_MAX : (unsigned)__builtin_ctzll(h))
             : LEVEL_MAX;
}

static uint32_t value_of(uint64_t h)
{
    return (uint32_t)((h >> 37) << 5) | level_of(h);
}

static uint64_t rotl32(uint64_t h)
{
    return (h << 32) | (h >> 32);
}

/* Inserts h into the set; true if it was new. h is a hash already: its
 * halves folded pick the cell (the set's layout changes no output). Adds
 * the occupied cells passed to *probes. */
static inline bool set_add(nd_sk_scratch *s, uint64_t h, size_t *probes)
{
    size_t mask = s->set_size - 1, i = (size_t)(h ^ (h >> 32)) & mask;
    while (s->set[i]) {
        if (s->set[i] == h)
            return false;
        i = (i + 1) & mask;
        ++*probes;
    }
    s->set[i] = h;
    return true;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q)
        return -ENOMEM;
    *p = q, *cap = c;
    return 0;
}

/* Sorts a[0..n), n <= ND_SKETCH_MAX, and pos[] with it, stably: one
 * counting pass on the top 8 bits (the values' top bits are hash bits: ~2
 * per bucket), then an insertion sort of the nearly sorted result (it only
 * moves values within a bucket). */
static void sort_u32_pos(uint32_t *a, uint8_t *pos, size_t n)
{
    if (n < 2)
        return;
    uint32_t tmp[ND_SKETCH_MAX], count[257] = {0};
    uint8_t tpos[ND_SKETCH_MAX];
    for (size_t i = 0; i < n; i++)
        count[(a[i] >> 24) + 1]++;
    for (unsigned b = 1; b < 257; b++)
        count[b] += count[b - 1];
    for (size_t i = 0; i < n; i++) {
        uint32_t k = count[a[i] >> 24]++;
        tmp[k] = a[i], tpos[k] = pos[i];
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t x = tmp[i];
        size_t j = i;
        for (; j && a[j - 1] > x; j--)
            a[j] = a[j - 1], pos[j] = pos[j - 1];
        a[j] = x, pos[j] = tpos[i];
    }
}

/* XXH3_64bits of the n token hashes at t (n of 3..5 in all but a text's
 * only shingle): one call per length, so that each is inlined for its
 * constant size. */
static inline uint64_t shingle_hash(const uint64_t *t, size_t n)
{
    switch (n) {
    case 5: return XXH3_64bits(t, 5 * sizeof(uint64_t));
    case 4: return XXH3_64bits(t, 4 * sizeof(uint64_t));
    case 3: return XXH3_64bits(t, 3 * sizeof(uint64_t));
    default: return XXH3_64bits(t, n * sizeof(uint64_t));
    }
}

/* The rank keys below which about `want` of n distinct hashes fall (all
 * of them when want >= n). */
static uint64_t keys_below(size_t n, uint64_t want)
{
    return want >= n ? UINT64_MAX : UINT64_MAX / n * want;
}

#define KEYS_SCALE 4           /* bottom_keys() first looks at ~4 m keys */
#define KEYS_BUCKETS_MAX 4096u /* buckets of the counting pass */

/* Sorts keys[0..n) (each <= below) into tmp[0..n): one counting pass on
 * their top bits below `below` (the keys are hashes: about one per
 * bucket), then an insertion sort of the nearly sorted result. More keys
 * than KEYS_BUCKETS_MAX (only when bottom_keys() widens its filter) are
 * sorted by qsort(). */
static void sort_keys(const uint64_t *keys, size_t n, uint64_t below, uint64_t *tmp)
{
    if (n > KEYS_BUCKETS_MAX) {
        memcpy(tmp, keys, n * sizeof(*tmp));
        qsort(tmp, n, sizeof(*tmp), nd_cmp_u64);
        return;
    }
    unsigned lg = 4;
    while ((1u << lg) < n)
        lg++;
    unsigned bits = below ? 64 - (unsigned)__builtin_clzll(below) : 0;
    unsigned shift = bits > lg ? bits - lg : 0;
    uint32_t count[KEYS_BUCKETS_MAX + 1];
    memset(count, 0, ((1u << lg) + 1) * sizeof(count[0]));
    for (size_t i = 0; i < n; i++)
        count[(keys[i] >> shift) + 1]++;
    for (unsigned b = 1; b <= 1u << lg; b++)
        count[b] += count[b - 1];
    for (size_t i = 0; i < n; i++)
        tmp[count[keys[i] >> shift]++] = keys[i];
    nd_insertion_sort_u64(tmp, n);
}

/* The min(m, distinct) smallest distinct values of keys[0..n) (each <=
 * below) into out[], ascending; returns their count. tmp: n entries. */
static unsigned smallest_distinct(const uint64_t *keys, size_t n, uint64_t below, unsigned m,
                                  uint64_t *tmp, uint64_t *out)
{
    sort_keys(keys, n, below, tmp);
    unsigned k = 0;
    for (size_t i = 0; i < n && k < m; i++)
        if (k == 0 || tmp[i] != out[k - 1])
            out[k++] = tmp[i];
    return k;
}

/* The min(m, distinct) smallest distinct rank keys (rotl32(h)) of the
 * shingles sh[0..nsh) into out[], ascending; returns their count.
 * keys[0..nkeys) are the shingles' keys that are <= below, in text order
 * (shingle_stream() filters them as it hashes); tmp holds nsh entries.
 *
 * The keys are hashes, so about m * scale / nsh of them fall below
 * UINT64_MAX / nsh * m * scale. Only those are sorted, a few times m
 * instead of every shingle: the result is the same as long as at least m
 * distinct keys passed the filter (the m smallest are then all below it).
 * A text with many repeated shingles can fall short: the filter then
 * widens, up to every key. */
static unsigned bottom_keys(const shingle *sh, size_t nsh, unsigned m, uint64_t *out,
                            uint64_t *keys, uint64_t *tmp, size_t nkeys, uint64_t below)
{
    if (m == 0)
        return 0;
    for (uint64_t scale = KEYS_SCALE;; scale *= 4) {
        unsigned k = smallest_distinct(keys, nkeys, below, m, tmp, out);
        if (k == m || below == UINT64_MAX)
            return k;
        below = keys_below(nsh, scale * 4 * m);
        nkeys = 0;
        for (size_t i = 0; i < nsh; i++) {
            uint64_t key = rotl32(sh[i].h);
            keys[nkeys] = key;
            nkeys += key <= below;
        }
    }
}

unsigned nd_anchors_scaled(unsigned mode, size_t shingles)
{
    size_t rate = mode == ND_SKETCH_MODE_CHAR ? ND_ANCHORS_RATE_CHAR : ND_ANCHORS_RATE_WORD;
    size_t m = shingles / rate + (shingles % rate != 0);
    return m < ND_ANCHORS_STORE ? ND_ANCHORS_STORE
           : m > ND_ANCHORS_MAX ? ND_ANCHORS_MAX
                                : (unsigned)m;
}

/* Whether char-mode tokens i..i+4 are five CJK tokens that are adjacent in
 * the word mode too (their word-mode indexes + 1 rise by one each): the
 * word-mode shingle at cjk[i] - 1 is then the same five token hashes with
 * the same span, so the same shingle. */
static inline bool same_as_word_shingle(const uint32_t *cjk, size_t i)
{
    return cjk[i] && cjk[i + 1] && cjk[i + 2] && cjk[i + 3] && cjk[i + 4] == cjk[i] + 4;
}

/* Shingles of one token stream into mode slot `mode` (text order, with
 * their spans) and, when anchors_out is not NULL, its anchors: the bottom-m
 * of the distinct hashes (bottom_keys()). word_sh, when not NULL, holds the
 * same text's word-mode shingles (mode must then be the character mode):
 * a character-mode shingle of five CJK tokens is copied from there instead
 * of hashed again. */
static int shingle_stream(nd_sk_scratch *s, const tstream *ts, unsigned mode,
                          const shingle *word_sh, nd_anchors *anchors_out, unsigned anchors_wanted)
{
    size_t nt = ts->n;
    const uint64_t *th = ts->h;
    const uint8_t *tw = ts->w;
    /* Shingles: tokens i..j, j the first index where the weight reaches 15. */
    if (grow((void **)&s->sh[mode], &s->sh_cap[mode], nt ? nt : 1, sizeof(shingle)) < 0 ||
        grow((void **)&s->keys, &s->keys_cap, nt ? nt : 1, sizeof(uint64_t)) < 0 ||
        grow((void **)&s->keys_tmp, &s->keys_tmp_cap, nt ? nt : 1, sizeof(uint64_t)) < 0)
        return -ENOMEM;
    shingle *sh = s->sh[mode];
    size_t nsh = 0, nkeys = 0;
    /* Rank keys at or below `below` are kept for the anchors (about
     * KEYS_SCALE * m of them: there are at most nt shingles). */
    unsigned m = !anchors_out                          ? 0
                 : anchors_wanted == ND_ANCHORS_SCALED ? nd_anchors_scaled(mode, nt)
                 : anchors_wanted > ND_ANCHORS_MAX     ? ND_ANCHORS_MAX
                                                       : anchors_wanted;
    uint64_t below = m ? keys_below(nt, (uint64_t)KEYS_SCALE * m) : 0, *keys = s->keys;
    if (mode == ND_SKETCH_MODE_CHAR && nt >= 5) {
        /* Every token weighs 3 (ND_TOKEN_W_CJK): shingle i is tokens i..i+4, for
         * every i up to nt - 5, as the general loop below finds too. */
        const uint32_t *cjk = ts->cjk;
        for (size_t i = 0; i + 5 <= nt; i++) {
            if (word_sh && same_as_word_shingle(cjk, i)) {
                sh[nsh] = word_sh[cjk[i] - 1];
            } else {
                uint64_t h = XXH3_64bits(th + i, 5 * sizeof(uint64_t));
                sh[nsh] = (shingle){.h = h ? h : 1, .start = ts->start[i], .end = ts->end[i + 4]};
            }
            uint64_t key = rotl32(sh[nsh++].h);
            keys[nkeys] = key;
            nkeys += key <= below;
        }
    } else {
        size_t j = 0;
        uint32_t w = 0; /* weight of tokens i..j-1 */
        for (size_t i = 0; i < nt; i++) {
            while (j < nt && w < W_SHINGLE)
                w += tw[j++];
            if (w < W_SHINGLE && i > 0)
                break; /* the rest never reaches 15 */
            /* the hashes of tokens i..j-1 in place (j - i <= 5 unless the
             * text never reaches 15: then all of them) */
            uint64_t h = shingle_hash(th + i, j - i);
            h = h ? h : 1;
            sh[nsh++] = (shingle){.h = h, .start = ts->start[i], .end = ts->end[j - 1]};
            uint64_t key = rotl32(h);
            keys[nkeys] = key;
            nkeys += key <= below;
            if (w < W_SHINGLE)
                break; /* i == 0: one shingle of all the tokens */
            w -= tw[i];
        }
    }
    s->nsh[mode] = nsh;
    s->sampled[mode] = false;
    if (!anchors_out)
        return 0;
    /* Scaled anchors follow the shingles (nt bounded them above, so the
     * keys kept below `below` are enough for the smaller m too). */
    if (anchors_wanted == ND_ANCHORS_SCALED)
        m = nd_anchors_scaled(mode, nsh);
    uint64_t low[ND_ANCHORS_MAX];
    unsigned nlow = bottom_keys(sh, nsh, m, low, keys, s->keys_tmp, nkeys, below);
    anchors_out->n = nlow;
    for (unsigned i = 0; i < nlow; i++)
        anchors_out->a[i] = (uint32_t)low[i]; /* low half of rotl = h >> 32 */
    return 0;
}

/* Occupied cells the distinct set may pass per shingle of a text (beyond
 * SET_PROBES_MIN) before sample_stream() gives it up for the sort. Random
 * hashes at the set's load (at most 1/2) pass about 1.5 an insertion, and
 * 8 a shingle over a whole text is never reached by chance; hashes crafted
 * to fall into a few cells (anyone can: the shingle hash is public and
 * unseeded) pass one per shingle already there, O(n^2) in all. */
#define SET_PROBES_PER 8
#define SET_PROBES_MIN 4096
/* Shingles between two looks at that budget: past it, a block costs at
 * most SET_BLOCK times the set's largest cluster, so O(n) in all. */
#define SET_BLOCK 64

/* The distinct step without the set: *first (borrowed, in the scratch) gets
 * per shingle 1 when it is its hash's first occurrence, else 0, from a
 * radix sort of (hash, position) pairs: O(nsh) whatever the hashes.
 * Overwrites the set (2 nsh cells at least: the sort's keys). Returns 0 or
 * -ENOMEM. */
static int first_by_sort(nd_sk_scratch *s, const shingle *sh, size_t nsh, const uint32_t **first)
{
    if (grow((void **)&s->sort_idx, &s->sort_idx_cap, 2 * nsh, sizeof(uint32_t)) < 0)
        return -ENOMEM;
    uint64_t *key = s->set, *tkey = s->set + nsh;
    uint32_t *idx = s->sort_idx, *mark = s->sort_idx + nsh;
    for (size_t i = 0; i < nsh; i++)
        key[i] = sh[i].h, idx[i] = (uint32_t)i;
    nd_radix_sort_u64_idx(key, idx, nsh, tkey, mark);
    /* stable: each run of one hash starts at its first position */
    memset(mark, 0, nsh * sizeof(*mark));
    for (size_t g = 0; g < nsh; g++)
        if (g == 0 || key[g] != key[g - 1])
            mark[idx[g]] = 1;
    *first = mark;
    return 0;
}

/* The sketch of the shingles held in mode slot `mode` (shingle_stream()). */
static int sample_stream(nd_sk_scratch *s, unsigned mode, nd_sketch *out)
{
    const shingle *sh = s->sh[mode];
    size_t nsh = s->nsh[mode];
    /* Distinct set and level histogram. */
    size_t need = 16;
    while (need < 2 * nsh)
        need *= 2;
    if (need > s->set_cap) {
        uint64_t *t = realloc(s->set, need * sizeof(*t));
        if (!t)
            return -ENOMEM;
        s->set = t, s->set_cap = need;
    }
    memset(s->set, 0, need * sizeof(uint64_t));
    s->set_size = need;
    if (grow((void **)&s->uniq, &s->uniq_cap, nsh ? nsh : 1, sizeof(uint64_t)) < 0 ||
        grow((void **)&s->upos, &s->upos_cap, nsh ? nsh : 1, 1) < 0)
        return -ENOMEM;
    uint64_t *uniq = s->uniq;
    uint8_t *upos = s->upos;
    uint32_t hist[LEVEL_MAX + 1] = {0};
    uint32_t distinct = 0;
    /* The set while its probes stay within a budget that random hashes
     * never reach; then the sort, from where the set stopped. */
    size_t i = 0, probes = 0, budget = SET_PROBES_MIN + SET_PROBES_PER * nsh;
    while (i < nsh && probes <= budget) {
        /* a block of SET_BLOCK shingles between two looks at the budget */
        size_t end = nsh - i > SET_BLOCK ? i + SET_BLOCK : nsh;
        for (; i < end; i++) {
            uint64_t h = sh[i].h;
            if (!set_add(s, h, &probes))
                continue;
            /* its first occurrence: i of nsh, scaled to 0..255 */
            upos[distinct] = (uint8_t)(((uint64_t)i << 8) / nsh);
            uniq[distinct++] = h;
            hist[level_of(h)]++;
        }
    }
    if (i < nsh) {
        const uint32_t *first;
        int rc = first_by_sort(s, sh, nsh, &first);
        if (rc < 0)
            return rc;
        for (; i < nsh; i++) {
            uint64_t h = sh[i].h;
            if (!first[i])
                continue;
            upos[distinct] = (uint8_t)(((uint64_t)i << 8) / nsh);
            uniq[distinct++] = h;
            hist[level_of(h)]++;
        }
    }
    unsigned shift = 0;
    {
        uint32_t above = distinct;
        while (shift < LEVEL_MAX && above > ND_SKETCH_MAX)
            above -= hist[shift++];
    }
    /* Values of the sample: walk the set (each distinct hash once). */
    out->shift = (uint8_t)shift;
    out->mode = (uint8_t)mode;
    out->shingles = distinct;
    uint32_t n = 0;
    for (size_t i = 0; i < distinct; i++) {
        uint64_t h = uniq[i];
        if (level_of(h) >= shift && n < ND_SKETCH_MAX)
            out->pos[n] = upos[i], out->values[n++] = value_of(h);
    }
    sort_u32_pos(out->values, out->pos, n);
    /* Two hashes with one value: one value, at the first one's position
     * (the sort is stable and uniq is in text order: the earlier). */
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++)
        if (k == 0 || out->values[i] != out->values[k - 1])
            out->pos[k] = out->pos[i], out->values[k++] = out->values[i];
    out->n = (uint16_t)k;
    out->positioned = 1;
    s->shift[mode] = (uint8_t)shift;
    s->sampled[mode] = true;
    return 0;
}

/* Shingles, sample and anchors of one token stream into mode slot `mode`. */
static int sketch_stream(nd_sk_scratch *s, const tstream *ts, unsigned mode, nd_sketch *out,
                         nd_anchors *anchors_out, unsigned anchors_wanted)
{
    int rc = shingle_stream(s, ts, mode, NULL, anchors_out, anchors_wanted);
    return rc < 0 ? rc : sample_stream(s, mode, out);
}

/* Tokenizes into both streams; returns the text's own mode or -errno. */
static int tokenize_text(const nd_sketcher *sk, nd_sk_scratch *s, const char *text, size_t len,
                         uint32_t *ncp)
{
    s->have_text = false;
    int rc = nd_tokenize(sk->tk, &s->tokens, text, len, ND_TOKENIZE_SPANS | ND_TOKENIZE_CHARS);
    if (rc < 0)
        return rc;
    const nd_text_stats *st = &s->tokens.stats;
    *ncp = st->code_points;
    /* Character mode: when CJK code points are at least 1/25 of the CJK,
     * letter and digit code points, every letter and digit is a token of
     * weight 3, as the ground truth's character 5-grams of Chinese text
     * count them. */
    s->has_cjk = st->cjk_cps > 0;
    return st->cjk_cps && (uint64_t)st->cjk_cps * CHAR_MODE_DEN >=
                              (uint64_t)(st->cjk_cps + st->word_cps) * CHAR_MODE_NUM
               ? ND_SKETCH_MODE_CHAR
               : ND_SKETCH_MODE_WORD;
}

/* Marks the scratch as holding the text just sketched (for passages) and
 * fills info, when given, with its statistics in its own mode. */
static void finish_text(nd_sk_scratch *s, int mode, uint32_t ncp, nd_sketch_info *info)
{
    if (info) {
        info->tokens = (uint32_t)(mode ? s->tokens.chr.n : s->tokens.word.n);
        info->shingles = (uint32_t)s->nsh[mode];
        info->code_points = ncp;
        info->mode = (uint8_t)mode;
        info->integrity = s->tokens.stats.integrity;
    }
    s->own_mode = (uint8_t)mode;
    s->have_text = true;
}

/* Tokenizes a text for its own mode only (no query): the scratch holds no
 * shingles yet. Returns its mode or -errno; *ncp its code points. */
static int tokenize_own(const nd_sketcher *sk, nd_sk_scratch *s, const char *text, size_t len,
                        uint32_t *ncp)
{
    s->query = false;
    int mode = tokenize_text(sk, s, text, len, ncp);
    s->nsh[0] = s->nsh[1] = 0;
    s->sampled[0] = s->sampled[1] = false;
    return mode;
}

int nd_sketch_text(const nd_sketcher *sk, nd_sk_scratch *s, const char *text, size_t len,
                   nd_sketch *out, nd_anchors *anchors_out, unsigned anchors_wanted,
                   nd_sketch_info *info)
{
    uint32_t ncp;
    int mode = tokenize_own(sk, s, text, len, &ncp);
    if (mode < 0)
        return mode;
    int rc = mode == ND_SKETCH_MODE_CHAR
                 ? sketch_stream(s, &s->tokens.chr, 1, out, anchors_out, anchors_wanted)
                 : sketch_stream(s, &s->tokens.word, 0, out, anchors_out, anchors_wanted);
    if (rc < 0)
        return rc;
    finish_text(s, mode, ncp, info);
    return 0;
}

int nd_sketch_shingle_text(const nd_sketcher *sk, nd_sk_scratch *s, const char *text, size_t len,
                           nd_sketch_info *info)
{
    uint32_t ncp;
    int mode = tokenize_own(sk, s, text, len, &ncp);
    if (mode < 0)
        return mode;
    int rc = shingle_stream(s, mode == ND_SKETCH_MODE_CHAR ? &s->tokens.chr : &s->tokens.word, (unsigned)mode,
                            NULL, NULL, 0);
    if (rc < 0)
        return rc;
    finish_text(s, mode, ncp, info);
    return 0;
}

int nd_sketch_query(const nd_sketcher *sk, nd_sk_scratch *s, const char *text, size_t len,
                    nd_anchors anchors_out[2], unsigned anchors_wanted, nd_sketch_info *info)
{
    uint32_t ncp;
    s->query = false;
    int mode = tokenize_text(sk, s, text, len, &ncp);
    if (mode < 0)
        return mode;
    /* Scaled: the text's own mode's grow with it, the other mode's are the
     * first ND_ANCHORS_QUERY (what a query probes; fewer keys to rank). */
    unsigned want[2] = {anchors_wanted, anchors_wanted};
    if (anchors_wanted == ND_ANCHORS_SCALED)
        want[!mode] = ND_ANCHORS_QUERY;
    int rc = shingle_stream(s, &s->tokens.word, 0, NULL, anchors_out ? &anchors_out[0] : NULL, want[0]);
    if (rc == 0 && s->has_cjk) {
        rc = shingle_stream(s, &s->tokens.chr, 1, s->sh[0], anchors_out ? &anchors_out[1] : NULL,
                            want[1]);
    } else if (rc == 0) {
        /* No CJK code point: the character mode is left empty (it would
         * cost 3x the word mode for English text, and measured no match on
         * the dev set). */
        s->nsh[1] = 0, s->shift[1] = 0, s->sampled[1] = true;
        if (anchors_out)
            anchors_out[1].n = 0;
    }
    if (rc < 0)
        return rc;
    finish_text(s, mode, ncp, info);
    s->query = true;
    return mode;
}

int nd_sketch_query_finish(nd_sk_scratch *s, nd_sketch out[2])
{
    if (!s->query)
        return -EINVAL;
    int rc = sample_stream(s, 0, &out[0]);
    if (rc == 0 && s->has_cjk)
        rc = sample_stream(s, 1, &out[1]);
    else if (rc == 0)
        out[1].shift = 0, out[1].mode = 1, out[1].n = 0, out[1].shingles = 0, out[1].positioned = 1;
    return rc;
}

int nd_sketch_text_modes(const nd_sketcher *sk, nd_sk_scratch *s, const char *text, size_t len,
                         nd_sketch out[2], nd_anchors anchors_out[2], unsigned anchors_wanted,
                         nd_sketch_info *info)
{
    int mode = nd_sketch_query(sk, s, text, len, anchors_out, anchors_wanted, info);
    if (mode < 0)
        return mode;
    int rc = nd_sketch_query_finish(s, out);
    return rc < 0 ? rc : mode;
}

int nd_sketch_fp_tokens(const nd_sk_scratch *s, nd_fp_tokens *out)
{
    if (!s->have_text)
        return -EINVAL;
    out->hash = s->tokens.word.h;
    out->cjk = s->tokens.word.cjk;
    out->n = s->tokens.word.n;
    out->chars = s->tokens.stats.chars;
    return 0;
}

int nd_sketch_own_mode(const nd_sk_scratch *s)
{
    return s->have_text ? s->own_mode : -EINVAL;
}

int nd_sketch_shingles(const nd_sk_scratch *s, unsigned mode, const nd_shingle **out, size_t *n)
{
    if (!s->have_text || mode > 1)
        return -EINVAL;
    *out = s->sh[mode];
    *n = s->nsh[mode];
    return 0;
}

int nd_sketch_tokens(const nd_sk_scratch *s, unsigned mode, const uint64_t **h,
                     const uint32_t **start, const uint32_t **end, size_t *n)
{
    if (!s->have_text || mode > 1)
        return -EINVAL;
    const tstream *t = mode == ND_SKETCH_MODE_CHAR ? &s->tokens.chr : &s->tokens.word;
    /* the character stream is only built for a text that needs it */
    size_t held = s->nsh[mode] ? t->n : 0;
    *h = t->h;
    *start = t->start;
    *end = t->end;
    *n = held;
    return 0;
}

/* ---- compare, passages ---- */

/* Fills out->core_found and out->core_n (nd_sketch_estimate) for q compared
 * with d at `shift`, out->shared already set: the positions of the found
 * values give the core [first, last]; the q values at the shift whose
 * position lies in it are counted. 0 and 0 when q is not positioned or
 * nothing is shared. O(q->n + d->n), pure. */
static void core_of(const nd_sketch *q, const nd_sketch *d, unsigned shift, nd_sketch_estimate *out)
{
    out->core_found = out->core_n = 0;
    if (!q->positioned || out->shared == 0)
        return;
    unsigned lo = 255, hi = 0;
    uint32_t i = 0, j = 0;
    while (i < q->n && j < d->n) {
        uint32_t x = q->values[i], y = d->values[j];
        if (x == y && (x & 31) >= shift) {
            unsigned p = q->pos[i];
            lo = p < lo ? p : lo;
            hi = p > hi ? p : hi;
        }
        i += x <= y;
        j += y <= x;
    }
    uint32_t c = 0;
    for (i = 0; i < q->n; i++)
        c += (q->values[i] & 31) >= shift && q->pos[i] >= lo && q->pos[i] <= hi;
    out->core_found = out->shared;
    out->core_n = c;
}

uint32_t nd_sketch_max_gap(const nd_sketch *q, const nd_sketch *d, const nd_sketch_estimate *e)
{
    if (!q->positioned || e->shared == 0)
        return e->q_n;
    unsigned shift = e->shift;
    uint8_t found[256] = {0};
    uint16_t at[256] = {0}; /* q values at the shift per position */
    uint32_t i = 0, j = 0;
    while (i < q->n && j < d->n) {
        uint32_t x = q->values[i], y = d->values[j];
        if (x == y && (x & 31) >= shift)
            found[q->pos[i]] = 1;
        i += x <= y;
        j += y <= x;
    }
    for (i = 0; i < q->n; i++)
        at[q->pos[i]] += (q->values[i] & 31) >= shift;
    uint32_t run = 0, gap = 0;
    for (unsigned p = 0; p < 256; p++) {
        if (found[p]) {
            run = 0;
            continue;
        }
        run += at[p];
        gap = run > gap ? run : gap;
    }
    return gap;
}

void nd_sketch_compare(const nd_sketch *q, const nd_sketch *d, nd_sketch_estimate *out)
{
    unsigned shift = q->shift > d->shift ? q->shift : d->shift;
    uint32_t i = 0, j = 0, qn = 0, dn = 0, shared = 0;
    while (i < q->n || j < d->n) {
        uint32_t a = i < q->n ? q->values[i] : UINT32_MAX;
        uint32_t b = j < d->n ? d->values[j] : UINT32_MAX;
        bool ia = i < q->n, jb = j < d->n;
        if (ia && (!jb || a <= b)) {
            bool keep = (a & 31) >= shift;
            qn += keep;
            if (jb && a == b) {
                dn += keep;
                shared += keep;
                j++;
            }
            i++;
        } else {
            dn += (b & 31) >= shift;
            j++;
        }
    }
    uint32_t uni = qn + dn - shared;
    out->shared = shared;
    out->q_n = qn;
    out->d_n = dn;
    out->q_shingles = q->shingles;
    out->shift = (uint8_t)shift;
    out->resemblance = uni ? (double)shared / uni : 0.0;
    out->containment = qn ? (double)shared / qn : 0.0;
    out->containment_r = dn ? (double)shared / dn : 0.0;
    core_of(q, d, shift, out);
}

static bool sketch_has(const nd_sketch *d, uint32_t v)
{
    uint32_t lo = 0, hi = d->n;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (d->values[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < d->n && d->values[lo] == v;
}

#define PASSAGE_MIN_FOUND 2

typedef struct passage_out {
    nd_passage *out;
    size_t cap, count;
    nd_passage last; /* not yet written: the next one may touch it */
    bool have_last;
} passage_out;

static void passage_commit(passage_out *po)
{
    if (!po->have_last)
        return;
    if (po->count < po->cap)
        po->out[po->count] = po->last;
    po->count++;
    po->have_last = false;
}

/* Adds [start, end), merged into the previous passage if they touch. */
static void passage_emit(passage_out *po, uint32_t start, uint32_t end)
{
    if (po->have_last && start <= po->last.end) {
        if (end > po->last.end)
            po->last.end = end;
        return;
    }
    passage_commit(po);
    po->last = (nd_passage){start, end};
    po->have_last = true;
}

size_t nd_sketch_passages(const nd_sk_scratch *s, const nd_sketch *d, nd_passage *out, size_t cap)
{
    unsigned mode = d->mode & 1;
    if (!s->have_text || s->nsh[mode] == 0 || !s->sampled[mode])
        return 0;
    unsigned shift = s->shift[mode] > d->shift ? s->shift[mode] : d->shift;
    const shingle *sh = s->sh[mode];
    passage_out po = {.out = out, .cap = cap, .count = 0};
    bool open = false;
    uint32_t ps = 0, pe = 0, found = 0, misses = 0;
    for (size_t i = 0; i < s->nsh[mode]; i++) {
        uint64_t h = sh[i].h;
        if (level_of(h) < shift)
            continue;
        if (sketch_has(d, value_of(h))) {
            if (open && misses <= 1) {
                if (sh[i].end > pe)
                    pe = sh[i].end;
                found++;
            } else {
                open = true;
                ps = sh[i].start, pe = sh[i].end, found = 1;
            }
            misses = 0;
        } else if (open && ++misses > 1) {
            open = false;
            if (found >= PASSAGE_MIN_FOUND)
                passage_emit(&po, ps, pe);
        }
    }
    if (open && found >= PASSAGE_MIN_FOUND)
        passage_emit(&po, ps, pe);
    passage_commit(&po);
    return po.count;
}

/* ---- rules ---- */

void nd_verdict_params_default(nd_verdict_params *p)
{
    p->min_resemblance = ND_VERDICT_MIN_RESEMBLANCE;
    p->min_containment = ND_VERDICT_MIN_CONTAINMENT;
    p->min_containment_r = 2.0;
    p->min_core = ND_VERDICT_MIN_CORE;
    p->min_containment_core = ND_VERDICT_CORE_CONTAINMENT;
}

/* Whether the core rule is on in p. */
static bool core_rule_on(const nd_verdict_params *p)
{
    return p->min_core > 0.0 && p->min_core <= 1.0;
}

/* The lowest containment at which nd_match_classify() can list a pair of
 * a query q (positioned or not) under p: what the bounds must admit. */
static double containment_needed(const nd_sketch *q, const nd_verdict_params *p)
{
    return q->positioned && core_rule_on(p) && p->min_containment_core < p->min_containment
               ? p->min_containment_core
               : p->min_containment;
}

/* Whether a containment estimate is sure enough to name a partial copy:
 * exact when every shingle of the query was compared (q_n of q_shingles);
 * else q_n of them are a random sample (the shingles whose level reaches
 * the common shift), and the estimate's one-sided 95 % lower bound (normal
 * approximation, finite-population corrected) must reach
 * ND_VERDICT_CONTAINMENT_FLOOR: a query compared with a long document
 * through a few dozen values is not called a copy on their luck. */
static bool containment_sure(const nd_sketch_estimate *e)
{
    if (e->q_n == 0 || e->q_n >= e->q_shingles)
        return true;
    double c = e->containment;
    double fpc = 1.0 - (double)e->q_n / e->q_shingles;
    double sd = sqrt(c * (1.0 - c) / e->q_n * fpc);
    return c - 1.645 * sd >= ND_VERDICT_CONTAINMENT_FLOOR;
}

/* P(X >= k) for X ~ Binomial(n, p), 0 < p < 1, k <= n, in IEEE double in
 * this order: t = p^n by n multiplications, the sum of the terms from
 * j = n down to k, each from the one above (t * j / (n - j + 1) * q / p). */
static double binomial_tail(uint32_t k, uint32_t n, double p)
{
    double t = 1.0, r = (1.0 - p) / p;
    for (uint32_t i = 0; i < n; i++)
        t *= p;
    double sum = t;
    for (uint32_t j = n; j > k; j--) {
        t = t * j / (n - j + 1) * r;
        sum += t;
    }
    return sum;
}

/* The core rule: the query's core (the stretch between its first and last
 * value found in the document) is densely found, surely, and the found
 * values are at least min_containment_core of the query's. Dense: found /
 * core_n >= min_core; surely: a stretch copied at a density of only
 * min_core would show that many found values of core_n with a chance of
 * at most 5 % (the exact one-sided binomial test: all core_n found needs
 * core_n >= 29 at min_core 0.9), so that a few values that happen to lie
 * together do not make a core. */
static bool core_copy(const nd_sketch_estimate *e, const nd_verdict_params *p)
{
    if (!core_rule_on(p) || e->core_n == 0 || e->containment < p->min_containment_core ||
        (double)e->core_found / e->core_n < p->min_core)
        return false;
    return p->min_core >= 1.0 || binomial_tail(e->core_found, e->core_n, p->min_core) <= 0.05;
}

nd_match_kind nd_match_classify(const nd_sketch_estimate *e, int same_text,
                                const nd_verdict_params *p)
{
    if (same_text)
        return ND_MATCH_IDENTICAL;
    if (e->shared == 0)
        return ND_MATCH_NONE;
    if (e->resemblance >= p->min_resemblance)
        return ND_MATCH_NEAR_DUPLICATE;
    if ((e->containment >= p->min_containment && containment_sure(e)) ||
        e->containment_r >= p->min_containment_r || core_copy(e, p))
        return ND_MATCH_PARTIAL_COPY;
    return ND_MATCH_NONE;
}

const char *nd_match_kind_name(nd_match_kind k)
{
    switch (k) {
    case ND_MATCH_IDENTICAL: return "identical";
    case ND_MATCH_NEAR_DUPLICATE: return "near_duplicate";
    case ND_MATCH_PARTIAL_COPY: return "partial_copy";
    case ND_MATCH_REWRITE: return "rewrite";
    default: return "none";
    }
}

/* ---- encoding ---- */

size_t nd_sketch_encoded_size(const nd_sketch *s)
{
    return 8 + 4 * (size_t)s->n;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16),
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static bool sketch_valid(const nd_sketch *s)
{
    if (s->shift > LEVEL_MAX || s->mode > 1 || s->n > ND_SKETCH_MAX || s->n > s->shingles)
        return false;
    for (uint32_t i = 0; i < s->n; i++) {
        if ((s->values[i] & 31) < s->shift)
            return false;
        if (i && s->values[i] <= s->values[i - 1])
            return false;
    }
    return true;
}

size_t nd_sketch_encode(const nd_sketch *s, uint8_t *buf, size_t cap)
{
    size_t need = nd_sketch_encoded_size(s);
    if (cap < need || !sketch_valid(s))
        return 0;
    buf[0] = ENCODING_FORMAT;
    buf[1] = (uint8_t)(s->shift | s->mode << 7);
    buf[2] = (uint8_t)s->n, buf[3] = (uint8_t)(s->n >> 8);
    put32(buf + 4, s->shingles);
    for (uint32_t i = 0; i < s->n; i++)
        put32(buf + 8 + 4 * i, s->values[i]);
    return need;
}

#if defined(__SSE2__) && ND_SWAR
/* Whether v[0..n) ascends strictly with every level at or above shift
 * (sketch_valid()'s test), four values at a time. */
static bool values_valid(const uint32_t *v, uint32_t n, unsigned shift)
{
    uint32_t i = 1;
    unsigned bad = n && (v[0] & 31) < shift;
    const __m128i bias = _mm_set1_epi32(INT32_MIN), low = _mm_set1_epi32(31),
                  below = _mm_set1_epi32((int)shift - 1);
    __m128i ok = _mm_set1_epi32(-1);
    for (; i + 4 <= n; i += 4) {
        __m128i cur = _mm_loadu_si128((const __m128i *)(v + i));
        __m128i before = _mm_loadu_si128((const __m128i *)(v + i - 1));
        __m128i up = _mm_cmpgt_epi32(_mm_xor_si128(cur, bias), _mm_xor_si128(before, bias));
        __m128i level = _mm_cmpgt_epi32(_mm_and_si128(cur, low), below);
        ok = _mm_and_si128(ok, _mm_and_si128(up, level));
    }
    bad |= _mm_movemask_ps(_mm_castsi128_ps(ok)) != 0xF;
    for (; i < n; i++)
        bad |= ((v[i] & 31) < shift) | (v[i] <= v[i - 1]);
    return !bad;
}
#endif

int nd_sketch_decode(const uint8_t *buf, size_t len, nd_sketch *out)
{
    if (len < 8 || buf[0] != ENCODING_FORMAT)
        return -EINVAL;
    uint32_t n = (uint32_t)buf[2] | (uint32_t)buf[3] << 8;
    if (n > ND_SKETCH_MAX || len != 8 + 4 * (size_t)n)
        return -EINVAL;
    out->shift = buf[1] & 0x7F;
    out->mode = buf[1] >> 7;
    out->n = (uint16_t)n;
    out->shingles = get32(buf + 4);
    out->positioned = 0; /* positions are not stored */
    if (out->shift > LEVEL_MAX || n > out->shingles)
        return -EINVAL;
    /* sketch_valid()'s checks of the values, as they are read (a
     * candidate's sketch is decoded on every verification) */
    uint32_t i = 0;
    unsigned bad = 0;
#if defined(__SSE2__) && ND_SWAR
    /* little-endian: the stored values are the host's */
    memcpy(out->values, buf + 8, 4 * (size_t)n);
    bad = !values_valid(out->values, n, out->shift);
    i = n;
#endif
    uint32_t prev = 0;
    for (; i < n; i++) {
        uint32_t v = get32(buf + 8 + 4 * i);
        bad |= ((v & 31) < out->shift) | (i && v <= prev);
        out->values[i] = prev = v;
    }
    return bad ? -EINVAL : 0;
}

/* ---- bounded comparison (registrations verify many candidates
 * that cannot be listed; these skip or cut short the work on them) ---- */

#ifdef __SSE2__
/* Set bits of a 4-bit mask (a movemask of four lanes): a table, as the
 * baseline x86-64 has no popcnt instruction. */
static const uint8_t POP4[16] = {0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4};
#endif

/* Values of s with level >= shift (four at a time with SSE2). */
static uint32_t count_at_shift(const nd_sketch *s, unsigned shift)
{
    if (shift <= s->shift)
        return s->n; /* a sketch holds only values at or above its shift */
    uint32_t c = 0, i = 0;
#ifdef __SSE2__
    const __m128i low = _mm_set1_epi32(31), below = _mm_set1_epi32((int)shift - 1);
    for (; i + 4 <= s->n; i += 4) {
        __m128i v = _mm_loadu_si128((const __m128i *)(s->values + i));
        __m128i ge = _mm_cmpgt_epi32(_mm_and_si128(v, low), below);
        c += POP4[_mm_movemask_ps(_mm_castsi128_ps(ge))];
    }
#endif
    for (; i < s->n; i++)
        c += (s->values[i] & 31) >= shift;
    return c;
}

/* Up to `steps` merge steps over a[*i..na) and b[*j..nb) (strictly
 * ascending, both): returns the values they have in common met on the
 * way, and advances *i and *j past them (at least one step when both are
 * non-empty). A value two sketches share has a level at or above both
 * shifts (each sketch holds only such values), so no level test is
 * needed. With SSE2, blocks of four against four (each value of one
 * block against every one of the other, then the block with the smaller
 * last value moves on: a value of it can only equal one in the other
 * block), as in Schlegel, Willhalm and Lehner, "Fast sorted-set
 * intersection using SIMD instructions" (2011); the tail one by one. */
static uint32_t common_steps(const uint32_t *a, uint32_t na, uint32_t *pi, const uint32_t *b,
                             uint32_t nb, uint32_t *pj, uint32_t steps)
{
    uint32_t i = *pi, j = *pj, c = 0, t = 0;
#ifdef __SSE2__
    for (; t < steps && i + 4 <= na && j + 4 <= nb; t += 4) {
        __m128i va = _mm_loadu_si128((const __m128i *)(a + i));
        __m128i vb = _mm_loadu_si128((const __m128i *)(b + j));
        __m128i m0 = _mm_or_si128(_mm_cmpeq_epi32(va, vb),
                                  _mm_cmpeq_epi32(va, _mm_shuffle_epi32(vb, 0x39)));
        __m128i m1 = _mm_or_si128(_mm_cmpeq_epi32(va, _mm_shuffle_epi32(vb, 0x4E)),
                                  _mm_cmpeq_epi32(va, _mm_shuffle_epi32(vb, 0x93)));
        __m128i m = _mm_or_si128(m0, m1);
        c += POP4[_mm_movemask_ps(_mm_castsi128_ps(m))];
        uint32_t amax = a[i + 3], bmax = b[j + 3];
        i += amax <= bmax ? 4 : 0;
        j += bmax <= amax ? 4 : 0;
    }
#endif
    for (; t < steps && i < na && j < nb; t++) {
        uint32_t x = a[i], y = b[j];
        c += x == y;
        i += x <= y;
        j += y <= x;
    }
    *pi = i;
    *pj = j;
    return c;
}

/* Whether some shared count <= ub (ub <= min(qn, dn)) could make
 * nd_match_classify() list the pair: each figure is computed as
 * nd_sketch_compare() computes it, and each is monotone in shared (and a
 * correctly rounded division is monotone), so the figures at ub bound the
 * real ones from above, bit for bit. */
static bool reachable_at(uint32_t ub, uint32_t qn, uint32_t dn, const nd_verdict_params *p,
                         double cmin)
{
    if (ub == 0)
        return false; /* shared 0: never listed */
    return (double)ub / (qn + dn - ub) >= p->min_resemblance || (double)ub / qn >= cmin ||
           (double)ub / dn >= p->min_containment_r;
}

int nd_sketch_reachable(const nd_sketch *q, unsigned d_shift, uint32_t d_n,
                        const nd_verdict_params *p)
{
    if (d_shift >= q->shift) { /* the common shift is d's: dn = d_n exactly */
        uint32_t qn = count_at_shift(q, d_shift);
        uint32_t m = qn < d_n ? qn : d_n;
        return reachable_at(m, qn, d_n, p, containment_needed(q, p));
    }
    /* Common shift q's: qn = q->n; dn (d's values at q's shift) <= d_n is
     * all that is known. shared <= min(qn, dn). */
    uint32_t qn = q->n;
    if (qn == 0 || d_n == 0)
        return 0;
    uint32_t m = qn < d_n ? qn : d_n;
    if (p->min_containment_r <= 1.0)
        return 1; /* shared / dn may be anything up to 1 */
    if ((double)m / qn >= containment_needed(q, p))
        return 1;
    /* Resemblance: for dn <= qn, shared / (qn + dn - shared) <= dn / qn <= d_n / qn;
     * a dn above qn is possible only when d_n > qn: then no bound. */
    return d_n > qn || (double)d_n / qn >= p->min_resemblance;
}

#define BOUNDED_BLOCK 64 /* merge steps between two checks of the bound */

int nd_sketch_compare_bounded(const nd_sketch *q, const nd_sketch *d, const nd_verdict_params *p,
                              nd_sketch_estimate *out)
{
    unsigned shift = q->shift > d->shift ? q->shift : d->shift;
    uint32_t qn = count_at_shift(q, shift), dn = count_at_shift(d, shift);
    uint32_t most = qn < dn ? qn : dn;
    const uint32_t *a = q->values, *b = d->values;
    uint32_t na = q->n, nb = d->n, i = 0, j = 0, shared = 0;
    double cmin = containment_needed(q, p);
    bool cut = !reachable_at(most, qn, dn, p, cmin);
    while (!cut && i < na && j < nb) {
        shared += common_steps(a, na, &i, b, nb, &j, BOUNDED_BLOCK);
        uint32_t rem = na - i < nb - j ? na - i : nb - j;
        uint32_t ub = shared + rem < most ? shared + rem : most;
        cut = !reachable_at(ub, qn, dn, p, cmin);
    }
    out->q_n = qn;
    out->d_n = dn;
    out->q_shingles = q->shingles;
    out->shift = (uint8_t)shift;
    if (cut) {
        out->shared = 0;
        out->core_found = out->core_n = 0;
        out->resemblance = out->containment = out->containment_r = 0.0;
        return 0;
    }
    uint32_t uni = qn + dn - shared;
    out->shared = shared;
    out->resemblance = uni ? (double)shared / uni : 0.0;
    out->containment = qn ? (double)shared / qn : 0.0;
    out->containment_r = dn ? (double)shared / dn : 0.0;
    core_of(q, d, shift, out);
    return 1;
}
