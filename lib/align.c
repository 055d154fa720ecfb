/* align.c - the third stage's token alignment (see align.h). */
#include "align.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct nd_aligner {
    uint32_t *head; /* bucket -> first index into pos (CSR), size buckets + 1 */
    size_t head_cap;
    uint32_t *pos; /* B's bigram positions: per bucket grouped by bigram,
                    * ascending within a bigram */
    size_t pos_cap;
    uint32_t *tmp; /* merge sort scratch */
    size_t tmp_cap;
    uint8_t *mark_a, *mark_b; /* aligned tokens */
    size_t mark_a_cap, mark_b_cap;
    uint32_t *chain_i, *chain_j; /* the current chain's seeds */
    size_t chain_i_cap, chain_j_cap;
    size_t last_na; /* A's tokens of the last call (mark_a holds its marks) */
};

int nd_aligner_create(nd_aligner **out)
{
    nd_aligner *al = calloc(1, sizeof(*al));
    if (!al)
        return -ENOMEM;
    *out = al;
    return 0;
}

void nd_aligner_destroy(nd_aligner *al)
{
    if (!al)
        return;
    free(al->head);
    free(al->pos);
    free(al->tmp);
    free(al->mark_a);
    free(al->mark_b);
    free(al->chain_i);
    free(al->chain_j);
    free(al);
}

/* Grows *p (elements of size el) to hold n. Returns 0 or -ENOMEM. */
static int grow(void **p, size_t *cap, size_t n, size_t el)
{
    if (n <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < n)
        c *= 2;
    void *q = realloc(*p, c * el);
    if (!q)
        return -ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

static inline size_t bucket_of(uint64_t x, uint64_t y, size_t mask)
{
    uint64_t h = x ^ (y * 0x9E3779B97F4A7C15ull);
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return (size_t)h & mask;
}

/* Orders B positions p, q by their bigrams (b[p], b[p+1]). */
static int bigram_cmp(const uint64_t *b, uint32_t p, uint64_t x, uint64_t y)
{
    if (b[p] != x)
        return b[p] < x ? -1 : 1;
    if (b[p + 1] != y)
        return b[p + 1] < y ? -1 : 1;
    return 0;
}

/* Sorts x[0..n) by bigram, stably (positions stay ascending within one):
 * a merge sort, O(n log n) however the bucket's bigrams collide. */
static void sort_by_bigram(const uint64_t *b, uint32_t *x, uint32_t *tmp, size_t n)
{
    if (n < 2)
        return;
    size_t h = n / 2;
    sort_by_bigram(b, x, tmp, h);
    sort_by_bigram(b, x + h, tmp, n - h);
    if (bigram_cmp(b, x[h], b[x[h - 1]], b[x[h - 1] + 1]) >= 0)
        return; /* already in order: the common case of one bigram */
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n)
        tmp[k++] = bigram_cmp(b, x[j], b[x[i]], b[x[i] + 1]) < 0 ? x[j++] : x[i++];
    while (i < h)
        tmp[k++] = x[i++];
    while (j < n)
        tmp[k++] = x[j++];
    memcpy(x, tmp, n * sizeof(*x));
}

/* Narrows [*lo, *hi) of a bucket to the positions of bigram (x, y). */
static void bigram_range(const nd_aligner *al, const uint64_t *b, uint64_t x, uint64_t y,
                         size_t *lo, size_t *hi)
{
    size_t l = *lo, h = *hi;
    while (l < h) {
        size_t m = l + (h - l) / 2;
        if (bigram_cmp(b, al->pos[m], x, y) < 0)
            l = m + 1;
        else
            h = m;
    }
    size_t l2 = l, h2 = *hi;
    while (l2 < h2) {
        size_t m = l2 + (h2 - l2) / 2;
        if (bigram_cmp(b, al->pos[m], x, y) <= 0)
            l2 = m + 1;
        else
            h2 = m;
    }
    *lo = l;
    *hi = l2;
}

/* Fills the bucket table with b's bigram positions, each bucket grouped by
 * bigram. Returns the mask. */
static size_t build(nd_aligner *al, const uint64_t *b, size_t nb)
{
    size_t nbig = nb - 1, size = 16;
    while (size < 2 * nbig)
        size *= 2;
    size_t mask = size - 1;
    memset(al->head, 0, (size + 1) * sizeof(*al->head));
    for (size_t j = 0; j < nbig; j++)
        al->head[bucket_of(b[j], b[j + 1], mask) + 1]++;
    for (size_t k = 0; k < size; k++)
        al->head[k + 1] += al->head[k];
    /* head[k] is now bucket k's start; fill using head[k] as a cursor,
     * then shift back. */
    for (size_t j = 0; j < nbig; j++)
        al->pos[al->head[bucket_of(b[j], b[j + 1], mask)]++] = (uint32_t)j;
    for (size_t k = size; k > 0; k--)
        al->head[k] = al->head[k - 1];
    al->head[0] = 0;
    for (size_t k = 0; k < size; k++)
        sort_by_bigram(b, al->pos + al->head[k], al->tmp, al->head[k + 1] - al->head[k]);
    return mask;
}

/* The first index in pos[lo..hi) holding a position >= j. */
static size_t lower_bound(const uint32_t *pos, size_t lo, size_t hi, size_t j)
{
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (pos[mid] < j)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* How many tokens a[i..] and b[j..] agree on, at most ND_ALIGN_RUN_MAX. */
static size_t run_length(const uint64_t *a, size_t na, size_t i, const uint64_t *b, size_t nb,
                         size_t j)
{
    size_t l = 0;
    while (i + l < na && j + l < nb && a[i + l] == b[j + l] && l < ND_ALIGN_RUN_MAX)
        l++;
    return l;
}

typedef struct walk {
    nd_aligner *al;
    const uint64_t *a, *b;
    size_t na, nb, mask;
    size_t n;      /* seeds of the current chain */
    long diag;     /* the last chain's diagonal (j - i of its last seed) */
    bool has_diag; /* a chain was started */
    nd_align_segment *seg;
    size_t cap, total;
} walk;

/* Ends the current chain: kept (marked, a segment) when long enough. */
static void chain_end(walk *w)
{
    nd_aligner *al = w->al;
    if (w->n >= ND_ALIGN_MIN_SEEDS) {
        for (size_t k = 0; k < w->n; k++) {
            al->mark_a[al->chain_i[k]] = al->mark_a[al->chain_i[k] + 1] = 1;
            al->mark_b[al->chain_j[k]] = al->mark_b[al->chain_j[k] + 1] = 1;
        }
        /* One segment per stretch of the chain without an unaligned run
         * of ND_ALIGN_SPLIT tokens (a reworded clause) on either side. */
        size_t first = 0;
        for (size_t k = 1; k <= w->n; k++) {
            if (k < w->n && al->chain_i[k] < al->chain_i[k - 1] + 2 + ND_ALIGN_SPLIT &&
                al->chain_j[k] < al->chain_j[k - 1] + 2 + ND_ALIGN_SPLIT)
                continue;
            if (w->total < w->cap)
                w->seg[w->total] = (nd_align_segment){.a_start = al->chain_i[first],
                                                      .a_end = al->chain_i[k - 1] + 2,
                                                      .b_start = al->chain_j[first],
                                                      .b_end = al->chain_j[k - 1] + 2};
            w->total++;
            first = k;
        }
    }
    w->n = 0;
}

/* The B position continuing the current chain with A's seed i, or -1. */
static long continuation(const walk *w, size_t i, size_t lo, size_t hi)
{
    const nd_aligner *al = w->al;
    size_t li = al->chain_i[w->n - 1], lj = al->chain_j[w->n - 1];
    if (i - li > ND_ALIGN_GAP)
        return -1;
    long diag = (long)lj - (long)li;
    long from = (long)i + diag - ND_ALIGN_DRIFT, to = (long)i + diag + ND_ALIGN_DRIFT;
    if (from < (long)lj + 1)
        from = (long)lj + 1;
    if (to < from)
        return -1;
    long best = -1, best_d = 0;
    for (size_t k = lower_bound(al->pos, lo, hi, (size_t)from); k < hi && al->pos[k] <= to; k++) {
        size_t j = al->pos[k];
        if (w->b[j] != w->a[i] || w->b[j + 1] != w->a[i + 1])
            continue; /* another bigram of the bucket */
        long d = (long)j - (long)i - diag;
        d = d < 0 ? -d : d;
        if (best < 0 || d < best_d)
            best = (long)j, best_d = d;
    }
    return best;
}

/* The B position starting a chain at A's seed i (pos[lo..hi): the
 * bigram's positions): of the ND_ALIGN_START_CANDIDATES around where the
 * copy would go on (the last chain's diagonal; before any chain, i's
 * share of B), the longest exact run, ties the nearest; -1 when none.
 * *len gets its run. */
static long chain_start(const walk *w, size_t i, size_t lo, size_t hi, size_t *len)
{
    const nd_aligner *al = w->al;
    long expect = w->has_diag ? (long)i + w->diag : (long)((double)i * w->nb / w->na);
    size_t from = lower_bound(al->pos, lo, hi, expect < 0 ? 0 : (size_t)expect);
    from = from > lo + ND_ALIGN_START_CANDIDATES / 2 ? from - ND_ALIGN_START_CANDIDATES / 2 : lo;
    if (hi - from < ND_ALIGN_START_CANDIDATES)
        from = hi - lo > ND_ALIGN_START_CANDIDATES ? hi - ND_ALIGN_START_CANDIDATES : lo;
    long best = -1, best_d = 0;
    size_t best_len = 0;
    for (size_t k = from; k < hi && k < from + ND_ALIGN_START_CANDIDATES; k++) {
        size_t j = al->pos[k];
        size_t l = run_length(w->a, w->na, i, w->b, w->nb, j);
        long d = (long)j - expect;
        d = d < 0 ? -d : d;
        if (best < 0 || l > best_len || (l == best_len && d < best_d))
            best = (long)j, best_len = l, best_d = d;
    }
    *len = best_len;
    return best;
}

/* The coverage of the window at ND_ALIGN_SPREAD_RANK from the lowest of
 * mark[0..n) cut into ND_ALIGN_WINDOWS. */
static double spread_of(const uint8_t *mark, size_t n, uint32_t aligned)
{
    if (n < 2 * ND_ALIGN_WINDOWS)
        return n ? (double)aligned / (double)n : 0.0;
    double win[ND_ALIGN_WINDOWS];
    for (size_t k = 0; k < ND_ALIGN_WINDOWS; k++) {
        size_t lo = k * n / ND_ALIGN_WINDOWS, hi = (k + 1) * n / ND_ALIGN_WINDOWS, c = 0;
        for (size_t x = lo; x < hi; x++)
            c += mark[x];
        double v = (double)c / (double)(hi - lo);
        size_t at = k; /* insertion sort, ascending */
        for (; at && win[at - 1] > v; at--)
            win[at] = win[at - 1];
        win[at] = v;
    }
    return win[ND_ALIGN_SPREAD_RANK];
}

/* The share of mark[0..n) in unaligned runs of at least long_gap. */
static double long_gaps_of(const uint8_t *mark, size_t n, unsigned long_gap)
{
    size_t in_long = 0, run = 0;
    for (size_t x = 0; x <= n; x++) {
        if (x < n && !mark[x]) {
            run++;
            continue;
        }
        if (run >= long_gap)
            in_long += run;
        run = 0;
    }
    return n ? (double)in_long / (double)n : 0.0;
}

static uint32_t count_marks(const uint8_t *mark, size_t n)
{
    uint32_t c = 0;
    for (size_t x = 0; x < n; x++)
        c += mark[x];
    return c;
}

int nd_align(nd_aligner *al, const uint64_t *a, size_t na, const uint64_t *b, size_t nb,
             unsigned long_gap, nd_alignment *out, nd_align_segment *seg, size_t cap,
             size_t *total)
{
    memset(out, 0, sizeof(*out));
    al->last_na = 0;
    if (total)
        *total = 0;
    if (na > UINT32_MAX / 2 || nb > UINT32_MAX / 2)
        return -E2BIG;
    out->na = (uint32_t)na;
    out->nb = (uint32_t)nb;
    if (na < 2 || nb < 2) {
        out->long_gaps_a = na ? 1.0 : 0.0;
        out->long_gaps_b = nb ? 1.0 : 0.0;
        return 0;
    }
    size_t buckets = 16;
    while (buckets < 2 * (nb - 1))
        buckets *= 2;
    if (grow((void **)&al->head, &al->head_cap, buckets + 1, sizeof(*al->head)) ||
        grow((void **)&al->pos, &al->pos_cap, nb, sizeof(*al->pos)) ||
        grow((void **)&al->tmp, &al->tmp_cap, nb, sizeof(*al->tmp)) ||
        grow((void **)&al->mark_a, &al->mark_a_cap, na, 1) ||
        grow((void **)&al->mark_b, &al->mark_b_cap, nb, 1) ||
        grow((void **)&al->chain_i, &al->chain_i_cap, na, sizeof(*al->chain_i)) ||
        grow((void **)&al->chain_j, &al->chain_j_cap, na, sizeof(*al->chain_j))) {
        out->na = out->nb = 0;
        return -ENOMEM;
    }
    memset(al->mark_a, 0, na);
    memset(al->mark_b, 0, nb);
    al->last_na = na;
    walk w = {.al = al, .a = a, .b = b, .na = na, .nb = nb, .seg = seg, .cap = seg ? cap : 0};
    w.mask = build(al, b, nb);
    for (size_t i = 0; i + 1 < na; i++) {
        size_t bk = bucket_of(a[i], a[i + 1], w.mask);
        size_t lo = al->head[bk], hi = al->head[bk + 1];
        if (lo < hi)
            bigram_range(al, b, a[i], a[i + 1], &lo, &hi);
        if (lo == hi)
            continue;
        long j = w.n ? continuation(&w, i, lo, hi) : -1;
        if (j < 0) {
            size_t run;
            j = chain_start(&w, i, lo, hi, &run);
            if (j < 0)
                continue;
            /* A chance seed off the diagonal does not break a chain that
             * may go on: only an exact run of ND_ALIGN_HOLD tokens does. */
            if (w.n && i - al->chain_i[w.n - 1] <= ND_ALIGN_GAP && run < ND_ALIGN_HOLD)
                continue;
            chain_end(&w);
        }
        al->chain_i[w.n] = (uint32_t)i;
        al->chain_j[w.n] = (uint32_t)j;
        w.n++;
        w.diag = j - (long)i;
        w.has_diag = true;
    }
    chain_end(&w);
    out->aligned_a = count_marks(al->mark_a, na);
    out->aligned_b = count_marks(al->mark_b, nb);
    out->coverage_a = (double)out->aligned_a / (double)na;
    out->coverage_b = (double)out->aligned_b / (double)nb;
    out->spread_a = spread_of(al->mark_a, na, out->aligned_a);
    out->spread_b = spread_of(al->mark_b, nb, out->aligned_b);
    out->long_gaps_a = long_gaps_of(al->mark_a, na, long_gap ? long_gap : 1);
    out->long_gaps_b = long_gaps_of(al->mark_b, nb, long_gap ? long_gap : 1);
    out->segments = (uint32_t)w.total;
    if (total)
        *total = w.total;
    return 0;
}

const uint8_t *nd_align_marks(const nd_aligner *al, size_t *n)
{
    *n = al->last_na;
    return al->mark_a;
}

int nd_align_is_rewrite(const nd_alignment *al, double min_coverage, double min_spread,
                        double max_long_gaps_a, double max_long_gaps_b)
{
    return al->coverage_a >= min_coverage && al->spread_a >= min_spread &&
           al->spread_b >= min_spread && al->long_gaps_a <= max_long_gaps_a &&
           al->long_gaps_b <= max_long_gaps_b;
}
