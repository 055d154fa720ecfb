/* share.c - the copied share and the verdicts below the partial-copy bar
 * (share.h): pure functions over spans. */
#include "share.h"

#include <errno.h>
#include <stdlib.h>

void nd_share_params_default(nd_share_params *p)
{
    p->min_source_share = ND_SHARE_MIN_SOURCE;
    p->min_quote_share = ND_SHARE_MIN_QUOTE;
    p->min_copied_share = ND_SHARE_MIN_COPIED;
}

/* A k-way merge of the lists by start: each step takes the list whose
 * next span starts first, and the spans are swept into disjoint runs. */
int64_t nd_share_union(const nd_passage *const *lists, const size_t *len, size_t n, nd_passage *out,
                       size_t cap, size_t *nout)
{
    if (n > ND_SHARE_SOURCES_MAX)
        return -E2BIG;
    size_t head[ND_SHARE_SOURCES_MAX] = {0}, runs = 0;
    int64_t covered = 0;
    bool open = false;
    uint32_t rs = 0, re = 0;
    for (;;) {
        size_t best = n;
        for (size_t i = 0; i < n; i++)
            if (head[i] < len[i] &&
                (best == n || lists[i][head[i]].start < lists[best][head[best]].start))
                best = i;
        if (best == n)
            break;
        nd_passage p = lists[best][head[best]++];
        if (p.end <= p.start)
            continue;
        if (open && p.start <= re) {
            if (p.end > re)
                re = p.end;
            continue;
        }
        if (open) {
            covered += re - rs;
            if (out && runs < cap)
                out[runs] = (nd_passage){rs, re};
            runs++;
        }
        open = true;
        rs = p.start, re = p.end;
    }
    if (open) {
        covered += re - rs;
        if (out && runs < cap)
            out[runs] = (nd_passage){rs, re};
        runs++;
    }
    if (nout)
        *nout = runs;
    return covered;
}

/* share of a covered length in a text of text_cp code points, at most 1 */
static double share_of(int64_t covered, uint32_t text_cp)
{
    if (!text_cp || covered <= 0)
        return 0.0;
    double s = (double)covered / (double)text_cp;
    return s > 1.0 ? 1.0 : s;
}

static int u32_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static inline bool counts(const nd_passage *p)
{
    return p->end > p->start && p->end - p->start >= ND_SHARE_MIN_SPAN;
}

/* One sweep over the elementary intervals between the counted spans'
 * ends: own[i] (when not NULL) gets the code points source i holds,
 * excl[i] those of them no source with in_union set holds (for i not in
 * it: what it would add to their union), and the return value is the code
 * points that a source with in_union[i] holds. O(spans * n) after a sort
 * of the ends. */
static int64_t sweep(const nd_share_source *s, size_t n, const bool *in_union, int64_t *own,
                     int64_t *excl)
{
    uint32_t ends[2 * ND_SHARE_SOURCES_MAX * ND_SHARE_SPANS_MAX];
    size_t ne = 0;
    for (size_t i = 0; i < n; i++) {
        size_t m = s[i].n < ND_SHARE_SPANS_MAX ? s[i].n : ND_SHARE_SPANS_MAX;
        for (size_t k = 0; k < m; k++)
            if (counts(&s[i].p[k])) {
                ends[ne++] = s[i].p[k].start;
                ends[ne++] = s[i].p[k].end;
            }
        if (own)
            own[i] = excl[i] = 0;
    }
    qsort(ends, ne, sizeof(*ends), u32_cmp);
    size_t head[ND_SHARE_SOURCES_MAX] = {0};
    uint32_t reach[ND_SHARE_SOURCES_MAX] = {0}; /* the furthest end begun so far */
    int64_t total = 0;
    for (size_t j = 0; j + 1 < ne; j++) {
        uint32_t x = ends[j], len = ends[j + 1] - x;
        if (!len)
            continue;
        unsigned depth = 0;
        bool un = false, cover[ND_SHARE_SOURCES_MAX];
        for (size_t i = 0; i < n; i++) {
            size_t m = s[i].n < ND_SHARE_SPANS_MAX ? s[i].n : ND_SHARE_SPANS_MAX;
            for (; head[i] < m && s[i].p[head[i]].start <= x; head[i]++)
                if (counts(&s[i].p[head[i]]) && s[i].p[head[i]].end > reach[i])
                    reach[i] = s[i].p[head[i]].end;
            cover[i] = reach[i] > x;
            depth += cover[i];
            un |= cover[i] && in_union[i];
        }
        if (!depth)
            continue;
        total += un ? len : 0;
        for (size_t i = 0; own && i < n; i++) {
            own[i] += cover[i] ? len : 0;
            excl[i] += cover[i] && !un ? len : 0;
        }
    }
    return total;
}

void nd_share_decide(nd_share_source *s, size_t n, uint32_t text_cp, const nd_share_params *p,
                     nd_share_answer *out)
{
    n = n < ND_SHARE_SOURCES_MAX ? n : ND_SHARE_SOURCES_MAX;
    bool eligible[ND_SHARE_SOURCES_MAX] = {false}, small[ND_SHARE_SOURCES_MAX] = {false};
    int64_t own[ND_SHARE_SOURCES_MAX] = {0}, excl[ND_SHARE_SOURCES_MAX] = {0};
    size_t nsmall = 0;
    out->verdict = ND_SHARE_ORIGINAL;
    out->bar_evidence = false;
    for (size_t i = 0; i < n; i++)
        eligible[i] = s[i].eligible;
    out->copied_share = share_of(sweep(s, n, eligible, own, excl), text_cp);
    for (size_t i = 0; i < n; i++) {
        s[i].share = share_of(own[i], text_cp);
        s[i].exclusive = 0;
        s[i].kind = ND_SHARE_KIND_NONE;
        out->bar_evidence |= s[i].eligible && s[i].above;
        small[i] = nd_share_on(p) && !s[i].above && s[i].share >= p->min_source_share;
    }
    if (!nd_share_on(p))
        return;
    /* The pieces, greedily: the eligible source below the bar adding the
     * most to the pieces' union so far, while it adds min_source_share
     * (a second version of a source, or a sibling sharing its template,
     * adds little: it is no piece). */
    bool counted[ND_SHARE_SOURCES_MAX] = {false};
    int64_t covered = 0;
    for (;;) {
        covered = sweep(s, n, counted, own, excl);
        size_t best = n;
        for (size_t i = 0; i < n; i++)
            if (small[i] && s[i].eligible && !counted[i] && (best == n || excl[i] > excl[best]))
                best = i;
        if (best == n || share_of(excl[best], text_cp) < p->min_source_share)
            break;
        counted[best] = true;
        s[best].exclusive = share_of(excl[best], text_cp);
        nsmall++;
    }
    bool compilation = nsmall >= 2 && share_of(covered, text_cp) >= p->min_copied_share;
    bool quotation = false;
    for (size_t i = 0; i < n; i++) {
        if (!small[i])
            continue;
        if (!s[i].eligible)
            s[i].kind = ND_SHARE_KIND_QUOTED;
        else if (compilation) /* a piece, or another version of one */
            s[i].kind = counted[i] ? ND_SHARE_KIND_COMPILED : ND_SHARE_KIND_QUOTED;
        else if (s[i].share >= p->min_quote_share)
            s[i].kind = ND_SHARE_KIND_QUOTATION, quotation = true;
        else
            s[i].kind = ND_SHARE_KIND_QUOTED;
    }
    out->verdict = compilation ? ND_SHARE_COMPILATION
                   : quotation ? ND_SHARE_QUOTATION
                               : ND_SHARE_ORIGINAL;
}
