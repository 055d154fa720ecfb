/* fingerprint.c - weight, hash, sum: the SimHash of a text's tokens.
 * proto/fingerprint.md is the specification; this file follows it step by
 * step:
 *   1..3. the folds, skipped URLs and markup, the normalizer and the tokens:
 *      lib/tokenizer.h (one reading for the fingerprint and the sketch);
 *   4. features: token n-grams with a weight per (kind, n), counted;
 *   5. each distinct feature adds +w/-w per bit of its XXH3-64 hash into 64
 *      integer counters, w = weight(kind, n) * min(tf, cap)^pow (integer);
 *   6. bit i is set iff counter i > 0. */
#include "fingerprint.h"
#include "fingerprint_tuning.h"
#include "normalizer.h"
#include "sort.h"
#include "tokenizer.h"
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

struct nd_fingerprinter {
    nd_tokenizer *tk; /* the folds and the tokens (tokenizer.h) */
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
    /* The text's tokens (nd_fingerprint()). Unigram CJK tokens of the
     * BMP are counted by code point instead (no hashing per occurrence):
     * tokens.cjk, by the tokenizer or by nd_fingerprint_tokens(). */
    nd_tokens tokens;
    /* With seen_hash: the hash of each code point in tokens.cjk.seen[], as
     * its token carried it (nd_fingerprint_tokens()), so that sum_cjk()
     * need not look it up in the fingerprinter's 512 KiB cjk_hash[]. */
    uint64_t *cjk_seen_hash;
    bool seen_hash;
    struct fp_sum *sum; /* allocated at the first sum; counters kept zero */
};

/* Per-call state. */
typedef struct fp_state {
    const nd_fingerprinter *fp;
    nd_fp_scratch *scratch;
    uint64_t ring[ND_FP_MAX_N]; /* last token hashes, newest at (ntok-1) % N */
    bool ring_cjk[ND_FP_MAX_N]; /* whether that token is a CJK character */
    uint64_t ntok;
    uint32_t chars, features;
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
    int rc = nd_tokenizer_create(&fp->tk);
    if (rc < 0) {
        free(fp);
        return rc;
    }
    fp->params = *p;
    init_weights(fp);
    if (fp->direct_cjk) {
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
    nd_tokenizer_destroy(fp->tk);
    free(fp->cjk_hash);
    free(fp);
}

int nd_fp_scratch_create(nd_fp_scratch **out)
{
    nd_fp_scratch *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    nd_tokens_init(&s->tokens);
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
    nd_tokens_finish(&s->tokens);
    free(s->cjk_seen_hash);
    free(s->sum);
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

/* Allocates the per-code-point CJK counters (and the hashes they carry)
 * at the first CJK character counted here. Returns 0 or -ENOMEM. */
static int scratch_cjk_ready(nd_fp_scratch *s)
{
    if (s->cjk_seen_hash && s->tokens.cjk.tf)
        return 0;
    if (nd_cjk_counts_ready(&s->tokens.cjk) < 0)
        return -ENOMEM;
    if (!s->cjk_seen_hash && !(s->cjk_seen_hash = malloc(ND_NORM_BMP * sizeof(uint64_t))))
        return -ENOMEM;
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
    nd_cjk_counts *c = &s->tokens.cjk;
    uint16_t *tf = &c->tf[cp];
    if (*tf == 0)
        c->seen[c->n++] = (uint16_t)cp;
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

/* Counts a word token of hash h. */
static inline void push_word(fp_state *st, uint64_t h)
{
    if (st->fp->direct_word)
        count_feature(st, h, KIND_WORD, 1);
    else
        push_token(st, h, false);
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
    nd_cjk_counts *c = &s->tokens.cjk;
    for (size_t k = 0; k < c->n; k++) {
        uint32_t cp = c->seen[k];
        uint32_t tf = c->tf[cp];
        c->tf[cp] = 0;
        if (!fp->cjk_hash) { /* two CJK hashes are equal: they must merge */
            if (count_feature_tf(s, cjk_token_hash(cp), KIND_CJK, 1, tf, s->nused + c->n) < 0)
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
    c->n = 0;
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
    nd_cjk_counts *c = &s->tokens.cjk;
    for (size_t k = 0; k < c->n; k++)
        c->tf[c->seen[k]] = 0;
    c->n = 0;
}

/* Steps 4..6 over the features counted in st; fills *out. Returns 0 or
 * -ENOMEM (the table is emptied either way). */
static int finish(fp_state *st, nd_fingerprint_result *out)
{
    const nd_fingerprinter *fp = st->fp;
    nd_fp_scratch *scratch = st->scratch;
    uint64_t simhash = 0;
    if (st->err == 0 && (scratch->nused || scratch->nspill || scratch->tokens.cjk.n))
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

/* Counts n word unigrams of hashes h, in text order (direct_word). */
static void count_words(fp_state *st, const uint64_t *h, size_t n)
{
    nd_fp_scratch *s = st->scratch;
    uint32_t features = st->features;
    for (size_t i = 0; i < n; i++) {
        if (count_feature_tf(s, h[i], KIND_WORD, 1, 1, ++features) < 0) {
            st->err = -ENOMEM;
            break;
        }
    }
    st->features = features;
}

/* Counts the tokens' features in text order: a word's, and a CJK
 * token's (its hash is the one cjk_token_hash() gives). BMP CJK tokens
 * already counted by code point (ND_TOKENIZE_CJK_COUNTS) are not in t. */
static void count_tokens(fp_state *st, const nd_fp_tokens *t)
{
    const nd_fingerprinter *fp = st->fp;
    nd_fp_scratch *s = st->scratch;
    const uint64_t *hash = t->hash;
    const uint32_t *cjk = t->cjk;
    if (fp->direct_cjk && fp->direct_word) { /* the defaults: unigrams */
        for (size_t i = 0; i < t->n && st->err == 0; i++) {
            uint32_t cp = cjk[i];
            if (cp == 0) {
                count_feature(st, hash[i], KIND_WORD, 1);
            } else if (cp < ND_NORM_BMP && scratch_cjk_ready(s) == 0) {
                /* every CJK code point is counted here with its hash */
                nd_cjk_counts *c = &s->tokens.cjk;
                s->seen_hash = true;
                st->features++;
                uint16_t *tf = &c->tf[cp];
                if (*tf == 0)
                    s->cjk_seen_hash[c->n] = hash[i], c->seen[c->n++] = (uint16_t)cp;
                *tf = (uint16_t)(*tf + (*tf < UINT16_MAX));
            } else if (cp < ND_NORM_BMP) {
                st->err = -ENOMEM;
            } else {
                push_token(st, hash[i], true);
            }
        }
    } else {
        for (size_t i = 0; i < t->n && st->err == 0; i++) {
            if (cjk[i] == 0)
                push_word(st, hash[i]);
            else if (fp->direct_cjk && cjk[i] < ND_NORM_BMP)
                push_cjk(st, cjk[i]);
            else
                push_token(st, hash[i], true);
        }
    }
}

int nd_fingerprint(const nd_fingerprinter *fp, nd_fp_scratch *scratch, const char *text, size_t len,
                   nd_fingerprint_result *out)
{
    /* Steps 1..3 (tokenizer.h). With unigram CJK features, the BMP CJK
     * tokens are counted by the tokenizer; their hashes come from
     * cjk_hash[] when summed. */
    unsigned flags = (fp->params.strip_urls ? 0 : ND_TOKENIZE_KEEP_MARKUP) |
                     (fp->direct_cjk ? ND_TOKENIZE_CJK_COUNTS : 0);
    nd_tokens *tk = &scratch->tokens;
    int rc = nd_tokenize(fp->tk, tk, text, len, flags);
    if (rc < 0) {
        reset_table(scratch);
        return rc;
    }
    scratch->seen_hash = false;
    fp_state st = {.fp = fp,
                   .scratch = scratch,
                   .chars = tk->stats.chars,
                   .features = fp->direct_cjk ? tk->cjk.occurrences : 0};
    nd_fp_tokens t = {.hash = tk->word.h, .cjk = tk->word.cjk, .n = tk->word.n};
    if (fp->direct_cjk && fp->direct_word && tk->cjk.listed == 0)
        count_words(&st, t.hash, t.n); /* the defaults, and only words listed: most texts */
    else
        count_tokens(&st, &t);
    return finish(&st, out);
}

int nd_fingerprint_tokens(const nd_fingerprinter *fp, nd_fp_scratch *scratch, const nd_fp_tokens *t,
                          nd_fingerprint_result *out)
{
    if (!fp->params.strip_urls)
        return -ENOTSUP;
    fp_state st = {.fp = fp, .scratch = scratch, .chars = t->chars};
    scratch->seen_hash = false;
    count_tokens(&st, t);
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
