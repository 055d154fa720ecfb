/* fingerprint.c - normalize, tokenize, weight, hash, sum: the SimHash.
 * proto/fingerprint.md is the specification; this file follows it step by
 * step:
 *   1. skip URLs and markdown image/link targets (raw bytes);
 *   2. map each code point through the normalizer (NFKD + case fold, marks
 *      and ignorables dropped) and count the characters that are not space;
 *   3. tokens: a maximal run of word characters is one token, each CJK
 *      character is one token, everything else separates;
 *   4. features: token n-grams with a weight per (kind, n), counted;
 *   5. each distinct feature adds +w/-w per bit of its XXH3-64 hash into 64
 *      integer counters, w = weight(kind, n) * min(tf, cap)^pow (integer);
 *   6. bit i is set iff counter i > 0. */
#include "fingerprint.h"
#include "hangul.h"
#include "fingerprint_tuning.h"
#include "fold.h"
#include "markup.h"
#include "normalizer.h"
#include "sort.h"
#include "swar.h"
#include "utf8.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* XXH3 from libxxhash, inlined: most features are a few bytes long, where a
 * call through the shared library would cost more than the hash. */
#pragma GCC diagnostic push
/* gcc 12 flags reads in XXH3's length-dispatched branches that never run
 * for the short buffers passed here */
#pragma GCC diagnostic ignored "-Warray-bounds"
#define XXH_INLINE_ALL
#include <xxhash.h>
#pragma GCC diagnostic pop

#define WORD_MAX 256      /* bytes of a word that are hashed; the rest is cut */
#define WEIGHT_SCALE 1024 /* weights are integers: 1.0 == 1024 */
#define TABLE_MIN 1024    /* initial slots of the feature table */
/* Occupied cells the feature table may pass per feature counted (beyond
 * PROBES_MIN) before the text's features are spilled and sorted instead.
 * Random hashes at the table's load (at most 1/2) pass about 1.5 a
 * feature, and 8 a feature over a text is never reached by chance; words
 * crafted so that their hashes (public, unseeded XXH3) fall into a few
 * cells pass one per feature already there, O(n^2): an anonymous POST
 * /fingerprint of 1 MiB of such words cost 15 s (audit 2026-12-07 G01). */
#define PROBES_PER 8
#define PROBES_MIN 4096
/* The sum of step 5 is done per slot: the distinct features of one weight
 * (most have tf 1, 2, 3, or at least the cap, so a text uses few slots). A
 * slot counts, for each of the 64 bits, the features that have it set, in
 * byte-wide counters; the counts are multiplied by the slot's weight before
 * a counter could overflow and at the end. Integer arithmetic: the sums are
 * exactly those of adding each feature's weight. */
#define NSLOT_MAX (2 * ND_FP_MAX_N * ND_FP_TF_TABLE) /* distinct weights, at most */
#define NO_SLOT 0xFFFFu
#define SLOT_FLUSH 255 /* features after which a slot's byte counters are carried */
/* Slot weights below PAIR_MAX are carried two counters per 64-bit multiply
 * into pairs of 32-bit sums, themselves carried into set[] before they
 * could overflow. */
#define PAIR_MAX (1u << 23)

enum { KIND_WORD = 0, KIND_CJK = 1 };

/* Bits of nd_fingerprinter.ascii[], per byte. ASCII_CHAR must be 1. */
enum {
    ASCII_CHAR = 1, /* counts in `chars`: not class S */
    ASCII_WORD = 2, /* a word character (ascii_fold[] holds its mapping) */
    ASCII_SKIP = 4, /* '!' or ']': may start link markup anywhere */
    ASCII_URL = 8,  /* h, w, f in either case: may start a URL at a word start */
    ASCII_HIGH = 16 /* not ASCII */
};

struct nd_fingerprinter {
    nd_normalizer *norm;
    nd_fp_params params;
    unsigned max_n;   /* longest n-gram with a non-zero weight */
    bool counted[2];  /* [kind]: unigrams of that kind have a weight */
    bool direct_cjk;  /* BMP CJK unigrams are counted by code point */
    bool direct_word; /* word unigrams are the features (max_n 1) */
    /* weight[kind][n][tf] for tf = 0..ND_FP_TF_TABLE */
    int64_t weight[2][ND_FP_MAX_N + 1][ND_FP_TF_TABLE + 1];
    /* slot_of[kind][n][tf], tf = 1..ND_FP_TF_TABLE: the slot of that weight;
     * with a cap <= ND_FP_TF_TABLE (capped), larger tf share the last one. */
    uint16_t slot_of[2][ND_FP_MAX_N + 1][ND_FP_TF_TABLE + 1];
    int64_t slot_weight[NSLOT_MAX];
    bool capped;
    uint8_t ascii[256];      /* ASCII_* bits of each byte */
    uint8_t ascii_fold[256]; /* normalized form of an ASCII word byte, else 0 */
    bool ascii_swar;         /* ascii_fold[] is [0-9a-z] and [A-Z] lowered */
    /* With direct_cjk: for a BMP code point that normalizes to one CJK token
     * counted by code point and not taking part in Hangul composition, that
     * token's code point; else 0. */
    uint16_t cjk_direct[ND_NORM_BMP];
    /* With direct_cjk: the feature hash of each BMP code point as a CJK
     * token (0 replaced by 1), or NULL if two of them are equal. Owned. */
    uint64_t *cjk_hash;
};

/* One distinct feature of the current text. */
typedef struct feature {
    uint64_t hash; /* 0 marks an empty slot (a real 0 hash is stored as 1) */
    uint32_t tf;
    uint8_t kind, n;
} feature;

struct nd_fp_scratch {
    feature *slots; /* open addressing, linear probing, load <= 1/2 */
    uint32_t *used; /* indexes of occupied slots, in insertion order */
    size_t cap, nused;
    size_t limit; /* cap / 2: the table grows before it holds more */
    /* This text's occupied cells passed in the table. Past a budget
     * (PROBES_PER a feature of the text) the table is given up: the
     * features counted after it go to spill[] in counting order, repeats
     * too, and sum_spilled() merges both by a radix sort. */
    size_t probes;
    bool spilled;
    feature *spill;
    size_t nspill, spill_cap;
    uint64_t *sort_key; /* sum_spilled()'s pairs: 2 (nused + nspill) */
    uint32_t *sort_idx;
    size_t sort_cap;
    /* Unigram CJK tokens of the BMP are counted by code point instead
     * (no hashing per occurrence): tf by code point, and the code points
     * seen, in order. Allocated at the first CJK character. */
    uint16_t *cjk_tf;
    uint16_t *cjk_seen;
    /* With seen_hash: the hash of each code point in cjk_seen[], as its
     * token carried it (nd_fingerprint_tokens()), so that sum_cjk() need
     * not look it up in the fingerprinter's 512 KiB cjk_hash[]. */
    uint64_t *cjk_seen_hash;
    bool seen_hash;
    size_t ncjk;
    struct fp_sum *sum; /* allocated at the first sum; counters kept zero */
    char *fold;         /* the look-alike fold's copy of the text (fold.h) */
    size_t fold_cap;
};

/* Per-call state. */
typedef struct fp_state {
    const nd_fingerprinter *fp;
    nd_fp_scratch *scratch;
    uint64_t ring[ND_FP_MAX_N]; /* last token hashes, newest at (ntok-1) % N */
    bool ring_cjk[ND_FP_MAX_N]; /* whether that token is a CJK character */
    uint64_t ntok;
    uint32_t chars, features;
    uint8_t word[WORD_MAX];
    size_t word_len;
    uint32_t hangul; /* a Hangul L jamo or LV syllable that may compose, or 0 */
    bool word_start; /* a URL may start here (spec step 1) */
    int err;
} fp_state;

/* Running sums of sum_features(): set[i] is the sum of the weights of the
 * features with bit i set, total the sum of all weights. */
typedef struct fp_sum {
    int64_t set[64], total;
    /* pairs[k][j]: two 32-bit parts of set[], for bits 8j+k (low half) and
     * 8j+32+k (high half); room is what each half can still take */
    uint64_t pairs[8][4];
    uint64_t room;
    unsigned nused;            /* slots in use */
    uint16_t used[NSLOT_MAX];  /* the slots in use, whose counters are not 0 */
    uint32_t count[NSLOT_MAX]; /* features added to each slot */
    uint32_t fresh[NSLOT_MAX]; /* of which in bytes[], not carried yet */
    /* byte j of bytes[s][k]: features of slot s with bit 8j+k set, since the
     * last carry */
    uint64_t bytes[NSLOT_MAX][8];
} fp_sum;

void nd_fp_params_default(nd_fp_params *p)
{
    memset(p, 0, sizeof(*p));
    p->w_word[1] = 1.0f;
    p->w_cjk[1] = 0.5f;
    p->tf_pow = 1.1f;
    p->tf_cap = 28;
    p->strip_urls = 1;
}

/* Integer weight of a feature of base weight w seen tf times. */
static int64_t feature_weight(const nd_fp_params *p, float w, uint32_t tf)
{
    if (p->tf_cap > 0 && tf > (uint32_t)p->tf_cap)
        tf = (uint32_t)p->tf_cap;
    return (int64_t)llround((double)WEIGHT_SCALE * w * pow((double)tf, p->tf_pow));
}

static uint64_t cjk_token_hash(uint32_t cp)
{
    uint8_t b[4];
    return XXH3_64bits(b, nd_utf8_encode(cp, b));
}

/* Hangul composition (Unicode 3.12), as NFKC does: conjoining jamo L+V
 * compose into an LV syllable, and LV+T into an LVT syllable. */

/* Fills ascii[] and ascii_fold[] from the normalizer's table. */
static void init_ascii(nd_fingerprinter *fp)
{
    for (unsigned c = 0; c < 256; c++) {
        if (c >= 0x80) {
            fp->ascii[c] = ASCII_HIGH;
            continue;
        }
        uint32_t e = fp->norm->table[c];
        unsigned bits = ND_NORM_CLASS(e) != ND_CHAR_SPACE ? ASCII_CHAR : 0;
        if (ND_NORM_CLASS(e) == ND_CHAR_WORD) {
            fp->ascii_fold[c] = (uint8_t)ND_NORM_CP(e);
            bits |= ASCII_WORD;
        }
        if (c == '!' || c == ']')
            bits |= ASCII_SKIP;
        unsigned lower = c | 0x20;
        if (lower == 'h' || lower == 'w' || lower == 'f')
            bits |= ASCII_URL;
        fp->ascii[c] = (uint8_t)bits;
    }
    fp->ascii_swar = true;
    for (unsigned c = 0; c < 0x80; c++) {
        unsigned want = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ? c
                        : c >= 'A' && c <= 'Z'                           ? c | 0x20
                                                                         : 0;
        fp->ascii_swar &= fp->ascii_fold[c] == want;
    }
}

/* Fills cjk_direct[]: the BMP code points whose normalization is a single
 * CJK token that feed_cjk() would count at once, whatever came before. */
static void init_cjk_direct(nd_fingerprinter *fp)
{
    for (uint32_t cp = 0; cp < ND_NORM_BMP; cp++) {
        uint32_t e = fp->norm->table[cp];
        if ((e & ND_NORM_MULTI) || ND_NORM_CLASS(e) != ND_CHAR_CJK)
            continue;
        uint32_t t = ND_NORM_CP(e);
        if (cp < 0x800 || t == 0 || t >= ND_NORM_BMP || is_jamo_l(t) || is_jamo_v(t) ||
            is_jamo_t(t) || is_lv(t))
            continue;
        fp->cjk_direct[cp] = (uint16_t)t;
    }
}

/* Whether two of the non-zero values h[0..n) are equal (n <= 2^16). */
static int have_duplicate(const uint64_t *h, size_t n, bool *dup)
{
    size_t cap = 1u << 17, mask = cap - 1;
    uint64_t *set = calloc(cap, sizeof(*set));
    if (!set)
        return -ENOMEM;
    *dup = false;
    for (size_t k = 0; k < n && !*dup; k++) {
        if (h[k] == 0)
            continue;
        size_t i = (size_t)h[k] & mask;
        while (set[i] != 0 && set[i] != h[k])
            i = (i + 1) & mask;
        *dup = set[i] == h[k];
        set[i] = h[k];
    }
    free(set);
    return 0;
}

/* Builds cjk_hash: the hash of each BMP scalar value as a CJK token, so that
 * the distinct CJK characters of a text are summed without hashing them or
 * inserting them into the feature table. That is only the same as inserting
 * them if no two of them can merge, so the table is dropped (NULL) when two
 * hashes are equal. Returns 0 or -ENOMEM. */
static int init_cjk_hash(nd_fingerprinter *fp)
{
    uint64_t *h = malloc(ND_NORM_BMP * sizeof(*h));
    if (!h)
        return -ENOMEM;
    for (uint32_t cp = 0; cp < ND_NORM_BMP; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF) {
            h[cp] = 0;
            continue;
        }
        h[cp] = cjk_token_hash(cp);
        if (h[cp] == 0)
            h[cp] = 1;
    }
    bool dup;
    if (have_duplicate(h, ND_NORM_BMP, &dup) < 0) {
        free(h);
        return -ENOMEM;
    }
    if (dup) {
        free(h);
        h = NULL;
    }
    fp->cjk_hash = h;
    return 0;
}

/* Gives each distinct weight a slot: fills slot_of[] and slot_weight[]. */
static void init_slots(nd_fingerprinter *fp)
{
    unsigned nslot = 0;
    for (unsigned kind = 0; kind < 2; kind++) {
        for (unsigned n = 1; n <= ND_FP_MAX_N; n++) {
            for (unsigned tf = 1; tf <= ND_FP_TF_TABLE; tf++) {
                int64_t w = fp->weight[kind][n][tf];
                unsigned slot = 0;
                while (slot < nslot && fp->slot_weight[slot] != w)
                    slot++;
                if (slot == nslot)
                    fp->slot_weight[nslot++] = w;
                fp->slot_of[kind][n][tf] = (uint16_t)slot;
            }
        }
    }
    fp->capped = fp->params.tf_cap > 0 && fp->params.tf_cap <= ND_FP_TF_TABLE;
}

/* Fills the weight tables. */
static void init_weights(nd_fingerprinter *fp)
{
    const nd_fp_params *p = &fp->params;
    for (unsigned n = 1; n <= ND_FP_MAX_N; n++) {
        if (p->w_word[n] != 0.0f || p->w_cjk[n] != 0.0f)
            fp->max_n = n;
        for (uint32_t tf = 1; tf <= ND_FP_TF_TABLE; tf++) {
            fp->weight[KIND_WORD][n][tf] = feature_weight(p, p->w_word[n], tf);
            fp->weight[KIND_CJK][n][tf] = feature_weight(p, p->w_cjk[n], tf);
        }
    }
    init_slots(fp);
    fp->counted[KIND_WORD] = p->w_word[1] != 0.0f;
    fp->counted[KIND_CJK] = p->w_cjk[1] != 0.0f;
    fp->direct_cjk = fp->max_n == 1 && fp->counted[KIND_CJK];
    fp->direct_word = fp->max_n == 1 && fp->counted[KIND_WORD];
}

int nd_fingerprinter_create_tuned(nd_fingerprinter **out, const nd_fp_params *p)
{
    nd_fingerprinter *fp = calloc(1, sizeof(*fp));
    if (!fp)
        return -ENOMEM;
    int rc = nd_normalizer_create(&fp->norm);
    if (rc < 0) {
        free(fp);
        return rc;
    }
    fp->params = *p;
    init_weights(fp);
    init_ascii(fp);
    if (fp->direct_cjk) {
        init_cjk_direct(fp);
        if ((rc = init_cjk_hash(fp)) < 0) {
            nd_fingerprinter_destroy(fp);
            return rc;
        }
    }
    *out = fp;
    return 0;
}

int nd_fingerprinter_create(nd_fingerprinter **out)
{
    nd_fp_params p;
    nd_fp_params_default(&p);
    return nd_fingerprinter_create_tuned(out, &p);
}

void nd_fingerprinter_destroy(nd_fingerprinter *fp)
{
    if (!fp)
        return;
    nd_normalizer_destroy(fp->norm);
    free(fp->cjk_hash);
    free(fp);
}

int nd_fp_scratch_create(nd_fp_scratch **out)
{
    nd_fp_scratch *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    *out = s;
    return 0;
}

void nd_fp_scratch_destroy(nd_fp_scratch *s)
{
    if (!s)
        return;
    free(s->slots);
    free(s->used);
    free(s->spill);
    free(s->sort_key);
    free(s->sort_idx);
    free(s->cjk_tf);
    free(s->cjk_seen);
    free(s->cjk_seen_hash);
    free(s->sum);
    free(s->fold);
    free(s);
}

/* Doubles the feature table (or makes the first one), keeping its features.
 * Returns 0 or -ENOMEM (the old table is kept). */
static int scratch_grow(nd_fp_scratch *s)
{
    size_t cap = s->cap ? s->cap * 2 : TABLE_MIN;
    feature *slots = calloc(cap, sizeof(*slots));
    uint32_t *used = malloc((cap / 2) * sizeof(*used));
    if (!slots || !used || cap > UINT32_MAX) {
        free(slots);
        free(used);
        return -ENOMEM;
    }
    size_t mask = cap - 1;
    for (size_t k = 0; k < s->nused; k++) {
        const feature *f = &s->slots[s->used[k]];
        size_t i = (size_t)f->hash & mask;
        while (slots[i].hash != 0)
            i = (i + 1) & mask, s->probes++;
        slots[i] = *f;
        used[k] = (uint32_t)i;
    }
    free(s->slots);
    free(s->used);
    s->slots = slots;
    s->used = used;
    s->cap = cap;
    s->limit = cap / 2;
    return 0;
}

/* Allocates the per-code-point CJK counters at the first CJK character.
 * Returns 0 or -ENOMEM. */
static int scratch_cjk_ready(nd_fp_scratch *s)
{
    if (s->cjk_tf)
        return 0;
    s->cjk_tf = calloc(ND_NORM_BMP, sizeof(*s->cjk_tf));
    s->cjk_seen = malloc(ND_NORM_BMP * sizeof(*s->cjk_seen));
    s->cjk_seen_hash = malloc(ND_NORM_BMP * sizeof(*s->cjk_seen_hash));
    if (!s->cjk_tf || !s->cjk_seen || !s->cjk_seen_hash) {
        free(s->cjk_tf);
        free(s->cjk_seen);
        free(s->cjk_seen_hash);
        s->cjk_tf = s->cjk_seen = NULL;
        s->cjk_seen_hash = NULL;
        return -ENOMEM;
    }
    return 0;
}

/* Appends tf occurrences of feature h to the spill. Returns 0 or -ENOMEM. */
static __attribute__((noinline)) int spill_add(nd_fp_scratch *s, uint64_t h, unsigned kind,
                                               unsigned n, uint32_t tf)
{
    if (s->nspill == s->spill_cap) {
        size_t cap = s->spill_cap ? 2 * s->spill_cap : 4096;
        feature *f = realloc(s->spill, cap * sizeof(*f));
        if (!f)
            return -ENOMEM;
        s->spill = f, s->spill_cap = cap;
    }
    s->spill[s->nspill++] = (feature){.hash = h, .tf = tf, .kind = (uint8_t)kind, .n = (uint8_t)n};
    return 0;
}

/* Adds tf occurrences of feature h to the table (or, once it is given up,
 * to the spill); features: the text's features so far (the probe budget's
 * measure). Returns 0 or -ENOMEM. */
static inline int count_feature_tf(nd_fp_scratch *s, uint64_t h, unsigned kind, unsigned n,
                                   uint32_t tf, size_t features)
{
    if (h == 0)
        h = 1;
    if (__builtin_expect(s->nused >= s->limit, 0)) { /* limit 0 once spilled */
        if (s->spilled)
            return spill_add(s, h, kind, n, tf);
        if (scratch_grow(s) < 0)
            return -ENOMEM;
    }
    size_t mask = s->cap - 1, i = (size_t)h & mask;
    while (s->slots[i].hash != 0) {
        if (s->slots[i].hash == h) {
            s->slots[i].tf += tf;
            return 0;
        }
        if (__builtin_expect(++s->probes > PROBES_MIN + PROBES_PER * features, 0)) {
            /* h may be further on: the sort merges it with the table's */
            s->spilled = true, s->limit = 0;
            return spill_add(s, h, kind, n, tf);
        }
        i = (i + 1) & mask;
    }
    s->slots[i] = (feature){.hash = h, .tf = tf, .kind = (uint8_t)kind, .n = (uint8_t)n};
    s->used[s->nused++] = (uint32_t)i;
    return 0;
}

/* The feature of hash h (not 0) in the table: borrowed, or NULL. */
static feature *find_feature(const nd_fp_scratch *s, uint64_t h)
{
    if (s->nused == 0)
        return NULL;
    size_t mask = s->cap - 1, i = (size_t)h & mask;
    for (; s->slots[i].hash != 0; i = (i + 1) & mask)
        if (s->slots[i].hash == h)
            return &s->slots[i];
    return NULL;
}

/* Counts one occurrence of feature h. */
static inline void count_feature(fp_state *st, uint64_t h, unsigned kind, unsigned n)
{
    st->features++;
    if (count_feature_tf(st->scratch, h, kind, n, 1, st->features) < 0)
        st->err = -ENOMEM;
}

/* Adds a token with hash th and the n-grams that it ends (max_n > 1). */
static void push_ngrams(fp_state *st, uint64_t th, bool cjk)
{
    const nd_fp_params *p = &st->fp->params;
    unsigned at = (unsigned)(st->ntok % ND_FP_MAX_N);
    st->ring[at] = th;
    st->ring_cjk[at] = cjk;
    st->ntok++;
    bool all_cjk = true;
    uint64_t gram[ND_FP_MAX_N];
    for (unsigned n = 1; n <= st->fp->max_n && n <= st->ntok; n++) {
        unsigned k = (unsigned)((st->ntok - n) % ND_FP_MAX_N);
        all_cjk &= st->ring_cjk[k];
        gram[ND_FP_MAX_N - n] = st->ring[k];
        if ((all_cjk ? p->w_cjk[n] : p->w_word[n]) == 0.0f)
            continue;
        uint64_t h = n == 1 ? th : XXH3_64bits(&gram[ND_FP_MAX_N - n], n * sizeof(uint64_t));
        count_feature(st, h, all_cjk ? KIND_CJK : KIND_WORD, n);
    }
}

/* Adds a token with hash th: in the default (max_n 1), the token is the
 * feature. */
static inline void push_token(fp_state *st, uint64_t th, bool cjk)
{
    if (st->fp->max_n != 1) {
        push_ngrams(st, th, cjk);
        return;
    }
    unsigned kind = cjk ? KIND_CJK : KIND_WORD;
    if (st->fp->counted[kind])
        count_feature(st, th, kind, 1);
    else
        st->features++;
}

/* Counts a BMP CJK unigram by code point. Returns 0 or -ENOMEM. */
static int count_cjk_direct(fp_state *st, uint32_t cp)
{
    nd_fp_scratch *s = st->scratch;
    if (scratch_cjk_ready(s) < 0)
        return -ENOMEM;
    st->features++;
    uint16_t *tf = &s->cjk_tf[cp];
    if (*tf == 0)
        s->cjk_seen[s->ncjk++] = (uint16_t)cp;
    if (*tf < UINT16_MAX)
        (*tf)++;
    return 0;
}

static void push_cjk(fp_state *st, uint32_t cp)
{
    if (st->fp->direct_cjk && cp < ND_NORM_BMP) {
        if (count_cjk_direct(st, cp) < 0)
            st->err = -ENOMEM;
        return;
    }
    push_token(st, cjk_token_hash(cp), true);
}

static void flush_hangul(fp_state *st)
{
    if (st->hangul) {
        push_cjk(st, st->hangul);
        st->hangul = 0;
    }
}

/* Feeds one CJK-class code point, composing Hangul jamo on the way. */
static void feed_cjk(fp_state *st, uint32_t cp)
{
    uint32_t p = st->hangul;
    if (p && is_jamo_l(p) && is_jamo_v(cp)) {
        st->hangul = hangul_compose_lv(p, cp);
        return;
    }
    if (p && is_lv(p) && is_jamo_t(cp)) {
        st->hangul = 0;
        push_cjk(st, hangul_compose_lvt(p, cp));
        return;
    }
    flush_hangul(st);
    if (is_jamo_l(cp) || is_lv(cp))
        st->hangul = cp;
    else
        push_cjk(st, cp);
}

/* Counts a word token of hash h. */
static inline void push_word(fp_state *st, uint64_t h)
{
    if (st->fp->direct_word)
        count_feature(st, h, KIND_WORD, 1);
    else
        push_token(st, h, false);
}

static inline void end_word(fp_state *st)
{
    if (st->word_len == 0)
        return;
    uint64_t h = XXH3_64bits(st->word, st->word_len);
    st->word_len = 0;
    push_word(st, h);
}

/* Feeds one normalized code point (class and code point, see normalizer.h). */
static inline void feed_char(fp_state *st, uint32_t e)
{
    uint32_t cls = ND_NORM_CLASS(e), cp = ND_NORM_CP(e);
    st->chars += cls != ND_CHAR_SPACE;
    if (cls == ND_CHAR_WORD) {
        flush_hangul(st);
        if (cp < 0x80 && st->word_len < WORD_MAX) {
            st->word[st->word_len++] = (uint8_t)cp;
        } else if (cp >= 0x80) {
            uint8_t b[4];
            size_t n = nd_utf8_encode(cp, b);
            if (st->word_len + n <= WORD_MAX) {
                memcpy(st->word + st->word_len, b, n);
                st->word_len += n;
            }
        }
        return;
    }
    end_word(st);
    if (cls == ND_CHAR_CJK)
        feed_cjk(st, cp);
    else
        flush_hangul(st);
}

/* Integer weight of a feature of kind and n seen tf times. */
static int64_t weight_of(const nd_fingerprinter *fp, unsigned kind, unsigned n, uint32_t tf)
{
    if (tf <= ND_FP_TF_TABLE)
        return fp->weight[kind][n][tf];
    const float *w = kind == KIND_CJK ? fp->params.w_cjk : fp->params.w_word;
    return feature_weight(&fp->params, w[n], tf);
}

/* Adds a feature of hash h and weight w that has no slot (tf above the
 * weight table with no cap: only with experimental parameters). */
static void sum_weighted(fp_sum *sum, uint64_t h, int64_t w)
{
    sum->total += w;
    for (int i = 0; i < 64; i++)
        sum->set[i] += (h >> i) & 1 ? w : 0;
}

/* Carries the 32-bit pair sums into set[]. */
static void carry_pairs(fp_sum *sum)
{
    for (unsigned k = 0; k < 8; k++) {
        for (unsigned j = 0; j < 4; j++) {
            uint64_t v = sum->pairs[k][j];
            sum->set[8 * j + k] += (int64_t)(v & 0xFFFFFFFFu);
            sum->set[8 * j + 32 + k] += (int64_t)(v >> 32);
            sum->pairs[k][j] = 0;
        }
    }
    sum->room = UINT32_MAX;
}

/* Carries the byte counters of a slot, times its weight, into the sums. */
static void carry_slot(const nd_fingerprinter *fp, fp_sum *sum, unsigned slot)
{
    const uint64_t pair = 0x000000FF000000FFull; /* counters of bits 8j+k, 8j+32+k */
    int64_t w = fp->slot_weight[slot];
    uint64_t *bytes = sum->bytes[slot];
    uint64_t most = (uint64_t)w * sum->fresh[slot]; /* the most a sum grows by */
    sum->fresh[slot] = 0;
    if (w < 0 || w >= PAIR_MAX) { /* only with experimental parameters */
        for (unsigned k = 0; k < 8; k++)
            for (unsigned j = 0; j < 8; j++)
                sum->set[8 * j + k] += w * (int64_t)((bytes[k] >> (8 * j)) & 0xFF);
        memset(bytes, 0, sizeof(sum->bytes[slot]));
        return;
    }
    if (most > sum->room)
        carry_pairs(sum);
    sum->room -= most;
    for (unsigned k = 0; k < 8; k++) {
        uint64_t v = bytes[k];
        bytes[k] = 0;
        sum->pairs[k][0] += (v & pair) * (uint64_t)w;
        sum->pairs[k][1] += ((v >> 8) & pair) * (uint64_t)w;
        sum->pairs[k][2] += ((v >> 16) & pair) * (uint64_t)w;
        sum->pairs[k][3] += ((v >> 24) & pair) * (uint64_t)w;
    }
}

/* The slot of a feature of kind and n seen tf times, or NO_SLOT. */
static inline unsigned feature_slot(const nd_fingerprinter *fp, unsigned kind, unsigned n,
                                    uint32_t tf)
{
    if (tf <= ND_FP_TF_TABLE)
        return fp->slot_of[kind][n][tf];
    return fp->capped ? fp->slot_of[kind][n][ND_FP_TF_TABLE] : NO_SLOT;
}

/* Adds one distinct feature of hash h and weight class slot to the sums. */
static inline void slot_add(const nd_fingerprinter *fp, fp_sum *sum, unsigned slot, uint64_t h)
{
    const uint64_t ones = 0x0101010101010101ull;
    uint64_t *b = sum->bytes[slot];
    b[0] += h & ones;
    b[1] += (h >> 1) & ones;
    b[2] += (h >> 2) & ones;
    b[3] += (h >> 3) & ones;
    b[4] += (h >> 4) & ones;
    b[5] += (h >> 5) & ones;
    b[6] += (h >> 6) & ones;
    b[7] += (h >> 7) & ones;
    if (sum->count[slot]++ == 0)
        sum->used[sum->nused++] = (uint16_t)slot;
    if (++sum->fresh[slot] == SLOT_FLUSH)
        carry_slot(fp, sum, slot);
}

/* Adds one distinct feature of hash h (kind, n, tf) to the sums. */
static inline __attribute__((always_inline)) void
sum_feature(const nd_fingerprinter *fp, fp_sum *sum, uint64_t h, unsigned kind, unsigned n,
            uint32_t tf)
{
    unsigned slot = feature_slot(fp, kind, n, tf);
    if (slot != NO_SLOT)
        slot_add(fp, sum, slot, h);
    else
        sum_weighted(sum, h, weight_of(fp, kind, n, tf));
}

/* Sums the CJK characters counted by code point and forgets them. One whose
 * hash is in the table already (a word, or an astral CJK token, of equal
 * hash) is merged into it, as inserting it into the table would. */
static void sum_cjk(const nd_fingerprinter *fp, nd_fp_scratch *s, fp_sum *sum, int *err)
{
    for (size_t k = 0; k < s->ncjk; k++) {
        uint32_t cp = s->cjk_seen[k];
        uint32_t tf = s->cjk_tf[cp];
        s->cjk_tf[cp] = 0;
        if (!fp->cjk_hash) { /* two CJK hashes are equal: they must merge */
            if (count_feature_tf(s, cjk_token_hash(cp), KIND_CJK, 1, tf, s->nused + s->ncjk) < 0)
                *err = -ENOMEM;
            continue;
        }
        uint64_t h = !s->seen_hash         ? fp->cjk_hash[cp]
                     : s->cjk_seen_hash[k] ? s->cjk_seen_hash[k] /* the same, from the token */
                                           : 1;
        if (s->spilled) { /* merged by sum_spilled() (the earlier feature's kind) */
            if (spill_add(s, h, KIND_CJK, 1, tf) < 0)
                *err = -ENOMEM;
            continue;
        }
        feature *f = find_feature(s, h);
        if (f)
            f->tf += tf;
        else
            sum_feature(fp, sum, h, KIND_CJK, 1, tf);
    }
    s->ncjk = 0;
}

static void reset_table(nd_fp_scratch *s);

/* Sums the table's features and the spill's (which may repeat them and
 * each other) as the table would have: a stable radix sort of (hash,
 * index) pairs, the table's in insertion order first, then each run of one
 * hash is one feature, its tf the run's sum, its kind and n the run's
 * first. O(n) whatever the hashes. Returns 0 or -ENOMEM (nothing summed). */
static __attribute__((noinline)) int sum_spilled(const nd_fingerprinter *fp, nd_fp_scratch *s,
                                                 fp_sum *sum)
{
    size_t n = s->nused + s->nspill;
    if (n > UINT32_MAX)
        return -ENOMEM;
    if (2 * n > s->sort_cap) {
        uint64_t *k = realloc(s->sort_key, 2 * n * sizeof(*k));
        if (k)
            s->sort_key = k;
        uint32_t *x = realloc(s->sort_idx, 2 * n * sizeof(*x));
        if (x)
            s->sort_idx = x;
        if (!k || !x)
            return -ENOMEM;
        s->sort_cap = 2 * n;
    }
    uint64_t *key = s->sort_key;
    uint32_t *idx = s->sort_idx;
    for (size_t k = 0; k < n; k++) {
        key[k] = k < s->nused ? s->slots[s->used[k]].hash : s->spill[k - s->nused].hash;
        idx[k] = (uint32_t)k;
    }
    nd_radix_sort_u64_idx(key, idx, n, key + n, idx + n);
    for (size_t g = 0; g < n;) {
        const feature *first = idx[g] < s->nused ? &s->slots[s->used[idx[g]]]
                                                 : &s->spill[idx[g] - s->nused];
        uint32_t tf = 0;
        size_t e = g;
        for (; e < n && key[e] == key[g]; e++)
            tf += idx[e] < s->nused ? s->slots[s->used[idx[e]]].tf : s->spill[idx[e] - s->nused].tf;
        sum_feature(fp, sum, first->hash, first->kind, first->n, tf);
        g = e;
    }
    return 0;
}

/* Sums the distinct features into the fingerprint and empties the table:
 * counter i = sum of +w over features with bit i set and -w over the rest,
 * computed as 2 * set_i - total. Bit i of the result is set iff counter i > 0.
 * Returns the fingerprint; sets *err to -ENOMEM if out of memory. */
static uint64_t sum_features(const nd_fingerprinter *fp, nd_fp_scratch *s, int *err)
{
    if (!s->sum && !(s->sum = calloc(1, sizeof(*s->sum)))) {
        *err = -ENOMEM;
        return 0;
    }
    fp_sum *sum = s->sum;
    memset(sum->set, 0, sizeof(sum->set));
    sum->total = 0;
    sum->room = UINT32_MAX;
    sum_cjk(fp, s, sum, err);
    if (s->spilled) {
        if (sum_spilled(fp, s, sum) < 0)
            *err = -ENOMEM;
    } else {
        for (size_t k = 0; k < s->nused; k++) {
            feature *f = &s->slots[s->used[k]];
            sum_feature(fp, sum, f->hash, f->kind, f->n, f->tf);
            f->hash = 0;
        }
        s->nused = 0;
    }
    reset_table(s);
    for (unsigned k = 0; k < sum->nused; k++) {
        unsigned slot = sum->used[k];
        carry_slot(fp, sum, slot);
        sum->total += fp->slot_weight[slot] * sum->count[slot];
        sum->count[slot] = 0;
    }
    sum->nused = 0;
    carry_pairs(sum);
    uint64_t out = 0;
    for (int i = 0; i < 64; i++)
        if (2 * sum->set[i] - sum->total > 0)
            out |= 1ull << i;
    return out;
}

static void reset_table(nd_fp_scratch *s)
{
    for (size_t k = 0; k < s->nused; k++)
        s->slots[s->used[k]].hash = 0;
    s->nused = 0;
    s->nspill = 0;
    s->spilled = false;
    s->limit = s->cap / 2;
    s->probes = 0;
    for (size_t k = 0; k < s->ncjk; k++)
        s->cjk_tf[s->cjk_seen[k]] = 0;
    s->ncjk = 0;
}

/* Feeds the normalized form of code point cp. */
static void feed_code_point(fp_state *st, uint32_t cp)
{
    uint32_t buf[ND_NORM_MAX];
    const uint32_t *seq;
    unsigned n = nd_normalizer_map(st->fp->norm, cp, buf, &seq);
    for (unsigned i = 0; i < n; i++)
        feed_char(st, seq[i]);
    if (n)
        st->word_start = ND_NORM_CLASS(seq[n - 1]) != ND_CHAR_WORD;
}

/* Appends the ASCII word bytes at s[*pos..] to word[*wl..] eight at a time
 * (letters lowered, digits kept), while eight fit. Returns true if the word
 * ended there. */
static inline bool scan_word_swar(const uint8_t *s, size_t len, size_t *pos, uint8_t *word,
                                  size_t *wl)
{
    size_t room = len - *pos < WORD_MAX - *wl ? len - *pos : WORD_MAX - *wl;
    bool ended;
    size_t done = nd_swar_word_copy(s + *pos, room, word + *wl, &ended);
    *pos += done;
    *wl += done;
    return ended;
}

/* Feeds the ASCII word bytes from s[pos] on (s[pos] is one), appending their
 * normalized form to the current word while it has room. Returns the
 * position after them (the caller counts them in chars). */
static size_t scan_ascii_word(fp_state *st, const uint8_t *s, size_t len, size_t pos)
{
    const uint8_t *fold = st->fp->ascii_fold;
    uint8_t *word = st->word, f;
    size_t wl = st->word_len;
    if (!(ND_SWAR && st->fp->ascii_swar && scan_word_swar(s, len, &pos, word, &wl))) {
        size_t end = len - pos > WORD_MAX - wl ? pos + (WORD_MAX - wl) : len;
        while (pos < end && (f = fold[s[pos]]) != 0) {
            word[wl++] = f;
            pos++;
        }
        if (pos == end) /* the word is full: the rest is cut */
            while (pos < len && fold[s[pos]])
                pos++;
    }
    st->word_len = wl;
    st->word_start = false;
    return pos;
}

/* What the character at p (3 readable bytes) is to scan_3byte_run(). */
enum { RUN_NONE, RUN_CJK, RUN_PUNCT, RUN_SPACE };
static inline unsigned run_char(const nd_fingerprinter *fp, const uint8_t *p, uint32_t *t)
{
    uint32_t b0 = p[0], b1 = p[1], b2 = p[2];
    if ((b0 & 0xF0) != 0xE0 || ((b1 | b2 << 8) & 0xC0C0) != 0x8080) /* 1110xxxx 10xxxxxx 10xxxxxx */
        return RUN_NONE;
    uint32_t cp = (b0 << 12) + (b1 << 6) + b2 - ((0xE0u << 12) + (0x80u << 6) + 0x80u);
    if ((*t = fp->cjk_direct[cp]) != 0) /* 0 for overlong and surrogate forms */
        return RUN_CJK;
    if (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))
        return RUN_NONE;
    uint32_t cls = ND_NORM_CLASS(fp->norm->table[cp]); /* not 1..4 if not one */
    return cls == ND_CHAR_PUNCT ? RUN_PUNCT : cls == ND_CHAR_SPACE ? RUN_SPACE : RUN_NONE;
}

/* Feeds a run of 3-byte characters from s[pos] that need no state: CJK
 * characters counted by code point (cjk_direct) and punctuation or space
 * that maps to one code point — most of Chinese and Japanese text. Returns
 * the bytes consumed: 0 when the first character is not such a one. */
static size_t scan_3byte_run(fp_state *st, const uint8_t *s, size_t len, size_t pos)
{
    const nd_fingerprinter *fp = st->fp;
    nd_fp_scratch *sc = st->scratch;
    uint32_t t, chars = 0, features = 0;
    if (len - pos < 3 || run_char(fp, s + pos, &t) == RUN_NONE)
        return 0;
    end_word(st); /* what the previous characters left open */
    flush_hangul(st);
    const uint8_t *p = s + pos, *last = s + len - 3;
    uint16_t *tf = sc->cjk_tf, *seen = sc->cjk_seen;
    size_t ncjk = sc->ncjk;
    unsigned kind;
    while (p <= last && (kind = run_char(fp, p, &t)) != RUN_NONE) {
        if (kind == RUN_CJK) {
            if (!tf) {
                if (scratch_cjk_ready(sc) < 0) {
                    st->err = -ENOMEM;
                    break;
                }
                tf = sc->cjk_tf, seen = sc->cjk_seen;
            }
            uint32_t n = tf[t];
            if (n == 0)
                seen[ncjk++] = (uint16_t)t;
            tf[t] = (uint16_t)(n + (n < UINT16_MAX));
            features++;
        }
        chars += kind != RUN_SPACE;
        p += 3;
    }
    sc->ncjk = ncjk;
    st->chars += chars;
    st->features += features;
    st->word_start = true;
    return (size_t)(p - (s + pos));
}

/* Feeds a 3-byte sequence with lead E1..EC at s[pos] (no overlong or
 * surrogate form is possible there: most Han, kana and Hangul text), if it
 * is one. Returns the bytes consumed: 3, or 0 when it is not such a sequence. */
static size_t feed_3byte(fp_state *st, const uint8_t *s, size_t len, size_t pos)
{
    uint8_t c = s[pos];
    if (c < 0xE1 || c > 0xEC || len - pos < 3 || (s[pos + 1] & 0xC0) != 0x80 ||
        (s[pos + 2] & 0xC0) != 0x80)
        return 0;
    uint32_t cp = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[pos + 1] & 0x3F) << 6) |
                  (s[pos + 2] & 0x3F);
    uint32_t e = st->fp->norm->table[cp];
    if (!(e & ND_NORM_MULTI) && ND_NORM_CLASS(e) == ND_CHAR_CJK) {
        end_word(st);
        st->chars++;
        feed_cjk(st, ND_NORM_CP(e));
        st->word_start = true;
    } else {
        feed_code_point(st, cp);
    }
    return 3;
}

/* Skips a URL or link markup at s[pos], if one starts there (spec step 1).
 * Returns the bytes skipped, or 0. */
static size_t skip_markup(fp_state *st, const uint8_t *s, size_t len, size_t pos)
{
    size_t skip = nd_markup_skip_length(s, len, pos, st->word_start);
    if (!skip)
        return 0;
    if (nd_utf8_validate((const char *)s + pos, skip, NULL) < 0)
        st->err = -EILSEQ;
    end_word(st);
    flush_hangul(st);
    st->word_start = true;
    return skip;
}

/* Whether nd_markup_skip_length() may find a URL or link markup at s[pos], an ASCII
 * byte of class bits a: a quick test of the first two bytes. */
static inline bool may_skip(const uint8_t *s, size_t len, size_t pos, unsigned a, bool word_start)
{
    if (!(a & ASCII_SKIP || (a & ASCII_URL && word_start)) || pos + 1 >= len)
        return false;
    uint8_t c = s[pos], next = s[pos + 1];
    if (c == '!' || c == ']')
        return next == (c == '!' ? '[' : '(');
    return (next | 0x20) == ((c | 0x20) == 'w' ? 'w' : 't'); /* www. http ftp: */
}

/* Feeds the ASCII text from s[pos] (an ASCII byte) up to the next non-ASCII
 * byte: words, the space and punctuation between them, URLs and link markup
 * to skip. Returns the position after it. */
static size_t scan_ascii(fp_state *st, const uint8_t *s, size_t len, size_t pos)
{
    const nd_fingerprinter *fp = st->fp;
    const uint8_t *ascii = fp->ascii;
    bool strip = fp->params.strip_urls;
    uint32_t chars = 0;
    size_t n;
    flush_hangul(st); /* any ASCII character ends a Hangul composition */
    while (pos < len) {
        unsigned a = ascii[s[pos]];
        if (a & ASCII_HIGH)
            break;
        if (strip && may_skip(s, len, pos, a, st->word_start) &&
            (n = skip_markup(st, s, len, pos)) != 0) {
            pos += n;
            if (st->err)
                break;
            continue;
        }
        if (a & ASCII_WORD) {
            n = scan_ascii_word(st, s, len, pos);
            chars += (uint32_t)(n - pos);
            pos = n;
            continue;
        }
        end_word(st); /* space and punctuation, up to what may start a skip */
        do
            chars += a & ASCII_CHAR;
        while (++pos < len && !((a = ascii[s[pos]]) & (ASCII_WORD | ASCII_SKIP | ASCII_HIGH)));
        st->word_start = true;
    }
    st->chars += chars;
    return pos;
}

/* Runs steps 1..3 of the spec over the text, counting features. */
static void scan_text(fp_state *st, const uint8_t *s, size_t len)
{
    size_t pos = 0, n;
    while (pos < len && st->err == 0) {
        if (s[pos] < 0x80) {
            pos = scan_ascii(st, s, len, pos);
        } else if ((n = scan_3byte_run(st, s, len, pos)) != 0) {
            pos += n;
        } else if ((n = feed_3byte(st, s, len, pos)) != 0) {
            pos += n;
        } else {
            uint32_t cp;
            if (nd_utf8_decode(s, len, &pos, &cp) < 0)
                st->err = -EILSEQ;
            else
                feed_code_point(st, cp);
        }
    }
    end_word(st);
    flush_hangul(st);
}

/* Steps 4..6 over the features counted in st; fills *out. Returns 0 or
 * -ENOMEM (the table is emptied either way). */
static int finish(fp_state *st, nd_fingerprint_result *out)
{
    const nd_fingerprinter *fp = st->fp;
    nd_fp_scratch *scratch = st->scratch;
    uint64_t simhash = 0;
    if (st->err == 0 && (scratch->nused || scratch->nspill || scratch->ncjk))
        simhash = sum_features(fp, scratch, &st->err);
    if (st->err < 0) {
        reset_table(scratch);
        return st->err;
    }
    out->simhash = simhash;
    out->chars = st->chars;
    out->features = st->features;
    return 0;
}

int nd_fingerprint(const nd_fingerprinter *fp, nd_fp_scratch *scratch, const char *text, size_t len,
                   nd_fingerprint_result *out)
{
    fp_state st = {.fp = fp, .scratch = scratch, .word_start = true};
    scratch->seen_hash = false;
    /* overrides in reading order, readings dropped, look-alike letters
     * read as their twin (fold.h) */
    uint32_t lookalike, annotation, reordered;
    int rc = nd_fold_text(fp->norm, text, len, &scratch->fold, &scratch->fold_cap, &text, &len,
                          &lookalike, &annotation, &reordered);
    if (rc < 0)
        return rc;
    scan_text(&st, (const uint8_t *)text, len);
    return finish(&st, out);
}

/* The tokens' events in text order, as scan_text() has them: end_word()
 * for a word and push_cjk() for a CJK token (its hash is the one
 * cjk_token_hash() gives). */
int nd_fingerprint_tokens(const nd_fingerprinter *fp, nd_fp_scratch *scratch, const nd_fp_tokens *t,
                          nd_fingerprint_result *out)
{
    if (!fp->params.strip_urls)
        return -ENOTSUP;
    fp_state st = {.fp = fp, .scratch = scratch, .chars = t->chars};
    const uint64_t *hash = t->hash;
    const uint32_t *cjk = t->cjk;
    scratch->seen_hash = false;
    if (fp->direct_cjk && fp->direct_word) { /* the defaults: unigrams */
        nd_fp_scratch *s = scratch;
        /* every CJK code point is counted below with its hash */
        s->seen_hash = true;
        for (size_t i = 0; i < t->n && st.err == 0; i++) {
            uint32_t cp = cjk[i];
            if (cp == 0) {
                count_feature(&st, hash[i], KIND_WORD, 1);
            } else if (cp < ND_NORM_BMP && (s->cjk_tf || scratch_cjk_ready(s) == 0)) {
                st.features++;
                uint16_t *tf = &s->cjk_tf[cp];
                if (*tf == 0)
                    s->cjk_seen_hash[s->ncjk] = hash[i], s->cjk_seen[s->ncjk++] = (uint16_t)cp;
                *tf = (uint16_t)(*tf + (*tf < UINT16_MAX));
            } else if (cp < ND_NORM_BMP) {
                st.err = -ENOMEM;
            } else {
                push_token(&st, hash[i], true);
            }
        }
    } else {
        for (size_t i = 0; i < t->n && st.err == 0; i++) {
            if (cjk[i] == 0)
                push_word(&st, hash[i]);
            else if (fp->direct_cjk && cjk[i] < ND_NORM_BMP)
                push_cjk(&st, cjk[i]);
            else
                push_token(&st, hash[i], true);
        }
    }
    return finish(&st, out);
}

void nd_simhash_format(uint64_t simhash, char buf[17])
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 15; i >= 0; i--) {
        buf[i] = hex[simhash & 0xF];
        simhash >>= 4;
    }
    buf[16] = '\0';
}

int nd_simhash_parse(const char *str, size_t len, uint64_t *out)
{
    if (len != 16)
        return -EINVAL;
    uint64_t v = 0;
    for (size_t i = 0; i < 16; i++) {
        char c = str[i];
        unsigned d;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (unsigned)(c - 'A' + 10);
        else
            return -EINVAL;
        v = (v << 4) | d;
    }
    *out = v;
    return 0;
}
