/* fingerprint.c - normalize, tokenize, weight, hash, sum: the SimHash. */
#include "fingerprint.h"
#include "fingerprint_tuning.h"
#include "normalizer.h"
#include "utf8.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define WORD_MAX 256 /* bytes of a word kept for hashing; longer words are cut */

struct nd_fingerprinter {
    nd_normalizer *norm;
    nd_fp_params params;
};

/* One distinct feature of the current text (used when tf_mode != RAW). */
typedef struct feature_slot {
    uint64_t hash;
    float weight; /* base weight of its n-gram kind */
    uint32_t tf;
} feature_slot;

struct nd_fp_scratch {
    feature_slot *slots; /* open-addressing table, cap slots, 0 hash = empty */
    uint32_t *used;      /* indexes of occupied slots, to reset quickly */
    size_t cap, nused;
};

/* Per-call state of the tokenizer. */
typedef struct fp_state {
    const nd_fingerprinter *fp;
    nd_fp_scratch *scratch;
    float acc[64];
    uint64_t ring[ND_FP_MAX_N];  /* last token hashes, newest at ntok % N */
    bool ring_word[ND_FP_MAX_N]; /* whether that token is a word */
    uint64_t ntok;
    uint32_t chars, features;
    uint8_t word[WORD_MAX];
    size_t word_len;
    int err;
} fp_state;

void nd_fp_params_default(nd_fp_params *p)
{
    memset(p, 0, sizeof(*p));
    p->w_word[1] = 1.0f;
    p->w_word[2] = 1.0f;
    p->w_cjk[1] = 1.0f;
    p->w_cjk[2] = 1.0f;
    p->tf_mode = ND_TF_RAW;
    p->strip_urls = 1;
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
    free(s);
}

/* Makes room for n distinct features at load <= 1/2. Returns 0 or -ENOMEM. */
static int scratch_reserve(nd_fp_scratch *s, size_t n)
{
    size_t want = 64;
    while (want < 2 * n)
        want *= 2;
    if (want <= s->cap)
        return 0;
    feature_slot *slots = calloc(want, sizeof(*slots));
    uint32_t *used = malloc(want * sizeof(*used));
    if (!slots || !used) {
        free(slots);
        free(used);
        return -ENOMEM;
    }
    free(s->slots);
    free(s->used);
    s->slots = slots;
    s->used = used;
    s->cap = want;
    s->nused = 0;
    return 0;
}

static void accumulate(float acc[64], uint64_t h, float w)
{
    for (int i = 0; i < 64; i++)
        acc[i] += ((h >> i) & 1) ? w : -w;
}

static void count_feature(fp_state *st, uint64_t h, float w)
{
    nd_fp_scratch *s = st->scratch;
    if (h == 0)
        h = 1; /* 0 marks an empty slot */
    size_t mask = s->cap - 1, i = (size_t)h & mask;
    while (s->slots[i].hash != 0) {
        if (s->slots[i].hash == h) {
            s->slots[i].tf++;
            return;
        }
        i = (i + 1) & mask;
    }
    s->slots[i].hash = h;
    s->slots[i].weight = w;
    s->slots[i].tf = 1;
    s->used[s->nused++] = (uint32_t)i;
}

static void add_feature(fp_state *st, uint64_t h, float w)
{
    st->features++;
    if (w == 0.0f)
        return;
    if (st->fp->params.tf_mode == ND_TF_RAW)
        accumulate(st->acc, h, w);
    else
        count_feature(st, h, w);
}

/* Adds the token with hash th and the n-grams it ends. */
static void push_token(fp_state *st, uint64_t th, bool is_word)
{
    const nd_fp_params *p = &st->fp->params;
    unsigned at = (unsigned)(st->ntok % ND_FP_MAX_N);
    st->ring[at] = th;
    st->ring_word[at] = is_word;
    st->ntok++;
    bool any_word = false;
    uint64_t gram[ND_FP_MAX_N];
    for (unsigned n = 1; n <= ND_FP_MAX_N && n <= st->ntok; n++) {
        unsigned k = (unsigned)((st->ntok - n) % ND_FP_MAX_N);
        any_word |= st->ring_word[k];
        gram[ND_FP_MAX_N - n] = st->ring[k];
        float w = any_word ? p->w_word[n] : p->w_cjk[n];
        if (w == 0.0f)
            continue;
        uint64_t h = n == 1 ? th : XXH3_64bits(&gram[ND_FP_MAX_N - n], n * sizeof(uint64_t));
        add_feature(st, h, w);
    }
}

static void end_word(fp_state *st)
{
    if (st->word_len == 0)
        return;
    push_token(st, XXH3_64bits(st->word, st->word_len), true);
    st->word_len = 0;
}

static void append_word(fp_state *st, uint32_t cp)
{
    uint8_t b[4];
    size_t n = nd_utf8_encode(cp, b);
    if (st->word_len + n <= WORD_MAX) {
        memcpy(st->word + st->word_len, b, n);
        st->word_len += n;
    }
}

static void feed_char(fp_state *st, uint32_t e)
{
    uint32_t cls = ND_NORM_CLASS(e), cp = ND_NORM_CP(e);
    if (cls != ND_CHAR_SPACE)
        st->chars++;
    if (cls == ND_CHAR_WORD) {
        append_word(st, cp);
        return;
    }
    end_word(st);
    if (cls == ND_CHAR_CJK) {
        uint8_t b[4];
        push_token(st, XXH3_64bits(b, nd_utf8_encode(cp, b)), false);
    }
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

/* Bytes that end a URL: ASCII space and controls, quotes, brackets, and any
 * non-ASCII byte (text in another script usually follows a URL directly). */
static bool ends_url(uint8_t c)
{
    return c <= ' ' || c >= 0x80 || c == '"' || c == '\'' || c == '<' ||
           c == '>' || c == '(' || c == ')' || c == '[' || c == ']' ||
           c == '{' || c == '}' || c == '`' || c == '|';
}

/* If a URL or a markdown link target starts at s[i], returns its length. */
static size_t url_length(const uint8_t *s, size_t len, size_t i, bool at_word_start)
{
    size_t start;
    if (s[i] == ']' && i + 1 < len && s[i + 1] == '(') {
        start = i + 2; /* markdown link target: up to ')' */
        size_t j = start;
        while (j < len && s[j] != ')' && s[j] != '\n' && s[j] != ' ')
            j++;
        if (j < len && s[j] == ')')
            return j + 1 - i;
        return 0;
    }
    if (!at_word_start)
        return 0;
    const uint8_t *p = s + i;
    size_t rest = len - i;
    if (ascii_prefix_ci(p, rest, "https://"))
        start = i + 8;
    else if (ascii_prefix_ci(p, rest, "http://") || ascii_prefix_ci(p, rest, "www."))
        start = i + (p[3] == '.' ? 4 : 7);
    else if (ascii_prefix_ci(p, rest, "ftp://"))
        start = i + 6;
    else
        return 0;
    size_t j = start;
    while (j < len && !ends_url(s[j]))
        j++;
    return j - i;
}

/* Turns the accumulated sums into the fingerprint. */
static uint64_t sign_bits(const float acc[64])
{
    uint64_t h = 0;
    for (int i = 0; i < 64; i++)
        if (acc[i] > 0.0f)
            h |= 1ull << i;
    return h;
}

static float tf_weight(int mode, uint32_t tf)
{
    switch (mode) {
    case ND_TF_BINARY: return 1.0f;
    case ND_TF_LOG: return 1.0f + logf((float)tf);
    case ND_TF_SQRT: return sqrtf((float)tf);
    default: return (float)tf;
    }
}

static void flush_counted(fp_state *st)
{
    nd_fp_scratch *s = st->scratch;
    int mode = st->fp->params.tf_mode;
    for (size_t k = 0; k < s->nused; k++) {
        feature_slot *f = &s->slots[s->used[k]];
        accumulate(st->acc, f->hash, f->weight * tf_weight(mode, f->tf));
        f->hash = 0;
    }
    s->nused = 0;
}

int nd_fingerprint(const nd_fingerprinter *fp, nd_fp_scratch *scratch,
                   const char *text, size_t len, nd_fingerprint_result *out)
{
    const uint8_t *s = (const uint8_t *)text;
    fp_state st;
    memset(&st, 0, sizeof(st));
    st.fp = fp;
    st.scratch = scratch;
    if (fp->params.tf_mode != ND_TF_RAW) {
        /* every byte starts at most one token and a token ends <= N n-grams */
        int rc = scratch_reserve(scratch, (len + 1) * ND_FP_MAX_N);
        if (rc < 0)
            return rc;
    }
    size_t pos = 0;
    bool prev_word = false;
    while (pos < len) {
        if (fp->params.strip_urls) {
            size_t skip = url_length(s, len, pos, !prev_word);
            if (skip) {
                if (nd_utf8_validate(text + pos, skip, NULL) < 0)
                    goto bad;
                end_word(&st);
                prev_word = false;
                pos += skip;
                continue;
            }
        }
        uint32_t cp, buf[ND_NORM_MAX];
        const uint32_t *seq;
        if (nd_utf8_decode(s, len, &pos, &cp) < 0)
            goto bad;
        unsigned n = nd_normalizer_map(fp->norm, cp, buf, &seq);
        for (unsigned i = 0; i < n; i++)
            feed_char(&st, seq[i]);
        if (n)
            prev_word = ND_NORM_CLASS(seq[n - 1]) == ND_CHAR_WORD;
    }
    end_word(&st);
    if (fp->params.tf_mode != ND_TF_RAW)
        flush_counted(&st);
    out->simhash = st.features ? sign_bits(st.acc) : 0;
    out->chars = st.chars;
    out->features = st.features;
    return 0;
bad:
    if (fp->params.tf_mode != ND_TF_RAW)
        flush_counted(&st);
    return -EILSEQ;
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
