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
#include "fingerprint_tuning.h"
#include "normalizer.h"
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

#define WORD_MAX 256       /* bytes of a word that are hashed; the rest is cut */
#define WEIGHT_SCALE 1024  /* weights are integers: 1.0 == 1024 */
#define TABLE_MIN 1024     /* initial slots of the feature table */
/* Features summed in 32-bit lanes before they are carried into 64-bit
 * counters: 2^31 / (largest weight, < 2^17 with cap 28 and pow 1.1). */
#define LANE_FLUSH 8192

enum { KIND_WORD = 0, KIND_CJK = 1 };

struct nd_fingerprinter {
    nd_normalizer *norm;
    nd_fp_params params;
    unsigned max_n; /* longest n-gram with a non-zero weight */
    /* weight[kind][n][tf] for tf = 0..ND_FP_TF_TABLE */
    int64_t weight[2][ND_FP_MAX_N + 1][ND_FP_TF_TABLE + 1];
    /* bit_mask[b][i] is -1 when bit i of byte b is set, else 0 */
    int32_t bit_mask[256][8];
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
    /* Unigram CJK tokens of the BMP are counted by code point instead
     * (no hashing per occurrence): tf by code point, and the code points
     * seen, in order. Allocated at the first CJK character. */
    uint16_t *cjk_tf;
    uint16_t *cjk_seen;
    size_t ncjk;
};

/* Per-call state. */
typedef struct fp_state {
    const nd_fingerprinter *fp;
    nd_fp_scratch *scratch;
    uint64_t ring[ND_FP_MAX_N];  /* last token hashes, newest at (ntok-1) % N */
    bool ring_cjk[ND_FP_MAX_N];  /* whether that token is a CJK character */
    uint64_t ntok;
    uint32_t chars, features;
    uint8_t word[WORD_MAX];
    size_t word_len;
    uint32_t hangul; /* a Hangul L jamo or LV syllable that may compose, or 0 */
    bool word_start; /* a URL may start here (spec step 1) */
    int err;
} fp_state;

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
    for (unsigned b = 0; b < 256; b++)
        for (unsigned i = 0; i < 8; i++)
            fp->bit_mask[b][i] = (b >> i) & 1 ? -1 : 0;
    for (unsigned n = 1; n <= ND_FP_MAX_N; n++) {
        if (p->w_word[n] != 0.0f || p->w_cjk[n] != 0.0f)
            fp->max_n = n;
        for (uint32_t tf = 1; tf <= ND_FP_TF_TABLE; tf++) {
            fp->weight[KIND_WORD][n][tf] = feature_weight(p, p->w_word[n], tf);
            fp->weight[KIND_CJK][n][tf] = feature_weight(p, p->w_cjk[n], tf);
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
    free(s->cjk_tf);
    free(s->cjk_seen);
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
            i = (i + 1) & mask;
        slots[i] = *f;
        used[k] = (uint32_t)i;
    }
    free(s->slots);
    free(s->used);
    s->slots = slots;
    s->used = used;
    s->cap = cap;
    return 0;
}

/* Adds tf occurrences of feature h to the table. Returns 0 or -ENOMEM. */
static int count_feature_tf(nd_fp_scratch *s, uint64_t h, unsigned kind, unsigned n, uint32_t tf)
{
    if (s->nused + 1 > s->cap / 2 && scratch_grow(s) < 0)
        return -ENOMEM;
    if (h == 0)
        h = 1;
    size_t mask = s->cap - 1, i = (size_t)h & mask;
    while (s->slots[i].hash != 0) {
        if (s->slots[i].hash == h) {
            s->slots[i].tf += tf;
            return 0;
        }
        i = (i + 1) & mask;
    }
    s->slots[i] = (feature){.hash = h, .tf = tf, .kind = (uint8_t)kind, .n = (uint8_t)n};
    s->used[s->nused++] = (uint32_t)i;
    return 0;
}

/* Counts one occurrence of feature h. */
static void count_feature(fp_state *st, uint64_t h, unsigned kind, unsigned n)
{
    st->features++;
    if (count_feature_tf(st->scratch, h, kind, n, 1) < 0)
        st->err = -ENOMEM;
}

/* Adds a token with hash th and the n-grams that it ends. */
static void push_token(fp_state *st, uint64_t th, bool cjk)
{
    const nd_fp_params *p = &st->fp->params;
    if (st->fp->max_n == 1) { /* the default: tokens are the features */
        if ((cjk ? p->w_cjk[1] : p->w_word[1]) != 0.0f)
            count_feature(st, th, cjk ? KIND_CJK : KIND_WORD, 1);
        else
            st->features++;
        return;
    }
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

static uint64_t cjk_token_hash(uint32_t cp)
{
    uint8_t b[4];
    return XXH3_64bits(b, nd_utf8_encode(cp, b));
}

/* Counts a BMP CJK unigram by code point. Returns 0 or -ENOMEM. */
static int count_cjk_direct(fp_state *st, uint32_t cp)
{
    nd_fp_scratch *s = st->scratch;
    if (!s->cjk_tf) {
        s->cjk_tf = calloc(ND_NORM_BMP, sizeof(*s->cjk_tf));
        s->cjk_seen = malloc(ND_NORM_BMP * sizeof(*s->cjk_seen));
        if (!s->cjk_tf || !s->cjk_seen) {
            free(s->cjk_tf);
            free(s->cjk_seen);
            s->cjk_tf = s->cjk_seen = NULL;
            return -ENOMEM;
        }
    }
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
    if (st->fp->max_n == 1 && cp < ND_NORM_BMP && st->fp->params.w_cjk[1] != 0.0f) {
        if (count_cjk_direct(st, cp) < 0)
            st->err = -ENOMEM;
        return;
    }
    push_token(st, cjk_token_hash(cp), true);
}

/* Hangul composition (Unicode 3.12), as NFKC does: conjoining jamo L+V
 * compose into an LV syllable, and LV+T into an LVT syllable. */
#define HANGUL_S 0xAC00u
#define HANGUL_L 0x1100u
#define HANGUL_V 0x1161u
#define HANGUL_T 0x11A7u
#define HANGUL_NV 21u
#define HANGUL_NT 28u
#define HANGUL_NS 11172u

static bool is_jamo_l(uint32_t cp) { return cp >= HANGUL_L && cp < HANGUL_L + 19; }
static bool is_jamo_v(uint32_t cp) { return cp >= HANGUL_V && cp < HANGUL_V + HANGUL_NV; }
static bool is_jamo_t(uint32_t cp) { return cp > HANGUL_T && cp < HANGUL_T + HANGUL_NT; }
static bool is_lv(uint32_t cp)
{
    return cp >= HANGUL_S && cp < HANGUL_S + HANGUL_NS && (cp - HANGUL_S) % HANGUL_NT == 0;
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
        st->hangul = HANGUL_S + ((p - HANGUL_L) * HANGUL_NV + (cp - HANGUL_V)) * HANGUL_NT;
        return;
    }
    if (p && is_lv(p) && is_jamo_t(cp)) {
        st->hangul = 0;
        push_cjk(st, p + (cp - HANGUL_T));
        return;
    }
    flush_hangul(st);
    if (is_jamo_l(cp) || is_lv(cp))
        st->hangul = cp;
    else
        push_cjk(st, cp);
}

static void end_word(fp_state *st)
{
    if (st->word_len == 0)
        return;
    push_token(st, XXH3_64bits(st->word, st->word_len), false);
    st->word_len = 0;
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

static bool ascii_prefix_ci(const uint8_t *s, size_t len, const char *lit)
{
    size_t i = 0;
    for (; lit[i]; i++) {
        if (i >= len)
            return false;
        uint8_t c = s[i];
        if (c >= 'A' && c <= 'Z')
            c = (uint8_t)(c + 32);
        if (c != (uint8_t)lit[i])
            return false;
    }
    return true;
}

/* Bytes that end a URL: ASCII space and controls, quotes, angle brackets,
 * parentheses, square and curly brackets, backquote, and any non-ASCII byte
 * (text in another script usually follows a URL directly). */
static bool ends_url(uint8_t c)
{
    return c <= ' ' || c >= 0x80 || c == '"' || c == '\'' || c == '<' ||
           c == '>' || c == '(' || c == ')' || c == '[' || c == ']' ||
           c == '{' || c == '}' || c == '`';
}

/* Returns the index just past the first byte c in s[i, min(len, i + max)),
 * or 0 if a newline or the limit comes first. */
static size_t find_on_line(const uint8_t *s, size_t len, size_t i, size_t max, uint8_t c)
{
    size_t end = len - i > max ? i + max : len;
    for (size_t j = i; j < end && s[j] != '\n'; j++)
        if (s[j] == c)
            return j + 1;
    return 0;
}

/* Markup that re-posting adds without adding words: a markdown image
 * "![alt](target)" (the alt text is mostly "image" or "图片"), and the
 * target of a markdown link "](target)". Returns the length to skip, or 0. */
static size_t markup_length(const uint8_t *s, size_t len, size_t i)
{
    size_t j;
    if (s[i] == '!' && i + 1 < len && s[i + 1] == '[') {
        j = find_on_line(s, len, i + 2, 512, ']');
        if (j && j < len && s[j] == '(' && (j = find_on_line(s, len, j + 1, 4096, ')')))
            return j - i;
        return 0;
    }
    if (s[i] == ']' && i + 1 < len && s[i + 1] == '(') {
        j = find_on_line(s, len, i + 2, 4096, ')');
        return j ? j - i : 0;
    }
    return 0;
}

/* Whether a URL or link markup may start with the ASCII byte c. */
static inline bool may_start_skip(uint8_t c)
{
    uint8_t lower = c | 0x20;
    return lower == 'h' || lower == 'w' || lower == 'f' || c == '!' || c == ']';
}

/* Length of the URL or link markup starting at s[i], or 0. A URL starts
 * with http://, https://, ftp:// or www. (ASCII case-insensitive) where a
 * word may start, and runs to the first byte for which ends_url() holds. */
static size_t skip_length(const uint8_t *s, size_t len, size_t i, bool at_word_start)
{
    size_t j = markup_length(s, len, i);
    uint8_t lower = s[i] | 0x20;
    if (j || !at_word_start || (lower != 'h' && lower != 'w' && lower != 'f'))
        return j;
    const uint8_t *p = s + i;
    size_t rest = len - i;
    if (ascii_prefix_ci(p, rest, "https://"))
        j = i + 8;
    else if (ascii_prefix_ci(p, rest, "http://"))
        j = i + 7;
    else if (ascii_prefix_ci(p, rest, "ftp://"))
        j = i + 6;
    else if (ascii_prefix_ci(p, rest, "www."))
        j = i + 4;
    else
        return 0;
    while (j < len && !ends_url(s[j]))
        j++;
    return j - i;
}

/* Integer weight of feature f. */
static int64_t weight_of(const nd_fingerprinter *fp, const feature *f)
{
    if (f->tf <= ND_FP_TF_TABLE)
        return fp->weight[f->kind][f->n][f->tf];
    const float *w = f->kind == KIND_CJK ? fp->params.w_cjk : fp->params.w_word;
    return feature_weight(&fp->params, w[f->n], f->tf);
}

/* lanes[i] += w where bit i of h is set; table-driven so that it vectorizes. */
static void add_bits(const nd_fingerprinter *fp, int32_t lanes[64], uint64_t h, int32_t w)
{
    for (unsigned byte = 0; byte < 8; byte++) {
        const int32_t *mask = fp->bit_mask[(h >> (8 * byte)) & 0xFF];
        int32_t *lane = lanes + 8 * byte;
        for (unsigned i = 0; i < 8; i++)
            lane[i] += mask[i] & w;
    }
}

/* Sums the distinct features into the fingerprint and empties the table:
 * counter i = sum of +w over features with bit i set and -w over the rest,
 * computed as 2 * set_i - total. Bit i of the result is set iff counter i > 0. */
static uint64_t sum_features(const nd_fingerprinter *fp, nd_fp_scratch *s, int *err)
{
    int64_t set[64] = {0}, total = 0;
    int32_t lanes[64] = {0};
    for (size_t k = 0; k < s->ncjk; k++) { /* merge the direct CJK counts */
        uint32_t cp = s->cjk_seen[k];
        uint32_t tf = s->cjk_tf[cp];
        s->cjk_tf[cp] = 0;
        if (count_feature_tf(s, cjk_token_hash(cp), KIND_CJK, 1, tf) < 0)
            *err = -ENOMEM;
    }
    s->ncjk = 0;
    for (size_t k = 0; k < s->nused; k++) {
        feature *f = &s->slots[s->used[k]];
        int64_t w = weight_of(fp, f);
        total += w;
        if (w > INT32_MAX / LANE_FLUSH) { /* only with experimental parameters */
            for (int i = 0; i < 64; i++)
                set[i] += (f->hash >> i) & 1 ? w : 0;
        } else {
            add_bits(fp, lanes, f->hash, (int32_t)w);
        }
        f->hash = 0;
        if ((k + 1) % LANE_FLUSH == 0 || k + 1 == s->nused) {
            for (int i = 0; i < 64; i++)
                set[i] += lanes[i], lanes[i] = 0;
        }
    }
    s->nused = 0;
    uint64_t out = 0;
    for (int i = 0; i < 64; i++)
        if (2 * set[i] - total > 0)
            out |= 1ull << i;
    return out;
}

static void reset_table(nd_fp_scratch *s)
{
    for (size_t k = 0; k < s->nused; k++)
        s->slots[s->used[k]].hash = 0;
    s->nused = 0;
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

/* Feeds the ASCII byte at s[pos] and, if it starts a word, the rest of the
 * word's ASCII bytes in one tight loop. Returns the position after them. */
static size_t feed_ascii(fp_state *st, const uint8_t *s, size_t len, size_t pos)
{
    uint32_t e = st->fp->norm->table[s[pos]];
    if (ND_NORM_CLASS(e) != ND_CHAR_WORD) {
        feed_char(st, e);
        st->word_start = true;
        return pos + 1;
    }
    flush_hangul(st);
    do {
        if (st->word_len < WORD_MAX)
            st->word[st->word_len++] = (uint8_t)ND_NORM_CP(e);
        st->chars++;
        if (++pos == len || s[pos] >= 0x80)
            break;
        e = st->fp->norm->table[s[pos]];
    } while (ND_NORM_CLASS(e) == ND_CHAR_WORD);
    st->word_start = false;
    return pos;
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
    size_t skip = skip_length(s, len, pos, st->word_start);
    if (!skip)
        return 0;
    if (nd_utf8_validate((const char *)s + pos, skip, NULL) < 0)
        st->err = -EILSEQ;
    end_word(st);
    flush_hangul(st);
    st->word_start = true;
    return skip;
}

/* Runs steps 1..3 of the spec over the text, counting features. */
static void scan_text(fp_state *st, const uint8_t *s, size_t len)
{
    bool strip = st->fp->params.strip_urls;
    size_t pos = 0, n;
    while (pos < len && st->err == 0) {
        uint8_t c = s[pos];
        bool may_skip = strip && may_start_skip(c) && (st->word_start || c == '!' || c == ']');
        if (c < 0x80 && !may_skip) {
            pos = feed_ascii(st, s, len, pos);
        } else if ((n = feed_3byte(st, s, len, pos)) != 0) {
            pos += n;
        } else if (strip && (n = skip_markup(st, s, len, pos)) != 0) {
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

int nd_fingerprint(const nd_fingerprinter *fp, nd_fp_scratch *scratch,
                   const char *text, size_t len, nd_fingerprint_result *out)
{
    fp_state st = {.fp = fp, .scratch = scratch, .word_start = true};
    scan_text(&st, (const uint8_t *)text, len);
    uint64_t simhash = 0;
    if (st.err == 0 && (scratch->nused || scratch->ncjk))
        simhash = sum_features(fp, scratch, &st.err);
    if (st.err < 0) {
        reset_table(scratch);
        return st.err;
    }
    out->simhash = simhash;
    out->chars = st.chars;
    out->features = st.features;
    return 0;
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
