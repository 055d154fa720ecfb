/* passages.c - copied passages on both sides (see passages.h). */
#include "passages.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sort.h"

/* A run may start this many shingles before the previous run's end in B
 * and still continue it (a word repeated at an edit). */
#define BACK_SLACK 3

/* Occupied cells the table may pass per shingle (beyond PROBES_MIN), in
 * build() over B and in first_of() over the walk of A, before the pairing
 * gives the table up for the sort (by_sort()). Random hashes at the
 * table's load (at most 1/2) pass about 1.5 an insertion, and 8 a shingle
 * over a text is never reached by chance; hashes crafted to fall into a
 * few cells (anyone can: the shingle hash is public and unseeded) pass one
 * per shingle already there, O(n^2) in all. */
#define PROBES_PER 8
#define PROBES_MIN 4096

struct nd_pairing {
    uint32_t *slot; /* open addressing: B position + 1 of a hash's first
                     * occurrence, 0 empty; power-of-two size */
    size_t slot_cap;
    uint32_t *next; /* per B position: the next position + 1 of its hash */
    size_t next_cap;
    /* by_sort(): per A position, the B position + 1 of its hash's first
     * occurrence (0: none), and the sort's (hash, position) pairs */
    uint32_t *first;
    size_t first_cap;
    uint64_t *key;
    size_t key_cap;
    uint32_t *idx;
    size_t idx_cap;
};

/* What the walk asks B's hashes: the table (mask, a budget of probes left)
 * or, once by_sort() ran, first[]. */
typedef struct lookup {
    size_t mask, budget;
    bool sorted;
} lookup;

int nd_pairing_create(nd_pairing **out)
{
    nd_pairing *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    *out = p;
    return 0;
}

void nd_pairing_destroy(nd_pairing *p)
{
    if (!p)
        return;
    free(p->slot);
    free(p->next);
    free(p->first);
    free(p->key);
    free(p->idx);
    free(p);
}

static size_t cell_of(uint64_t h, size_t mask)
{
    return (size_t)(h ^ (h >> 32)) & mask;
}

static int grow(void **buf, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    void *q = realloc(*buf, need * elem);
    if (!q)
        return -ENOMEM;
    *buf = q, *cap = need;
    return 0;
}

/* Fills the table with b's positions, each hash's chain in text order, and
 * lk (the mask; then the walk's budget for the lookups of na shingles of
 * A). Each occupied cell passed is taken from lk->budget. Returns 1 when
 * done, 0 when the budget ran out (the table is then unusable: by_sort()
 * must run), or -ENOMEM. */
static int build(nd_pairing *p, const nd_shingle *b, size_t nb, size_t na, lookup *lk)
{
    size_t size = 16;
    while (size < 2 * nb)
        size *= 2;
    if (grow((void **)&p->slot, &p->slot_cap, size, sizeof(uint32_t)) < 0 ||
        grow((void **)&p->next, &p->next_cap, nb, sizeof(uint32_t)) < 0)
        return -ENOMEM;
    memset(p->slot, 0, size * sizeof(uint32_t));
    size_t mask = size - 1, budget = lk->budget;
    for (size_t j = nb; j-- > 0;) {
        uint64_t h = b[j].h;
        size_t c = cell_of(h, mask);
        while (p->slot[c] && b[p->slot[c] - 1].h != h) {
            if (budget-- == 0)
                return 0;
            c = (c + 1) & mask;
        }
        p->next[j] = p->slot[c]; /* 0 when the cell was empty */
        p->slot[c] = (uint32_t)(j + 1);
    }
    lk->mask = mask;
    lk->budget = PROBES_MIN + PROBES_PER * (na + nb); /* for the walk's first_of() */
    return 1;
}

/* B position + 1 of h's first occurrence, or 0, into *out; each cell
 * passed is taken from lk->budget. false when it runs out (*out unset). */
static bool first_of(const nd_pairing *p, lookup *lk, const nd_shingle *b, uint64_t h, uint32_t *out)
{
    size_t mask = lk->mask, c = cell_of(h, mask);
    while (p->slot[c] && b[p->slot[c] - 1].h != h) {
        if (lk->budget-- == 0)
            return false;
        c = (c + 1) & mask;
    }
    *out = p->slot[c];
    return true;
}

/* The table's answers without the table: next[] for b (each hash's chain
 * in text order) and first[] for a (first_of() of every A position), from
 * radix sorts of (hash, position) pairs of both texts and a merge of the
 * two: O(na + nb) whatever the hashes. Returns 0 or -ENOMEM. */
static int by_sort(nd_pairing *p, const nd_shingle *a, size_t na, const nd_shingle *b, size_t nb)
{
    size_t most = na > nb ? na : nb, pairs = na + nb + most;
    if (grow((void **)&p->next, &p->next_cap, nb, sizeof(uint32_t)) < 0 ||
        grow((void **)&p->first, &p->first_cap, na, sizeof(uint32_t)) < 0 ||
        grow((void **)&p->key, &p->key_cap, pairs, sizeof(uint64_t)) < 0 ||
        grow((void **)&p->idx, &p->idx_cap, pairs, sizeof(uint32_t)) < 0)
        return -ENOMEM;
    uint64_t *kb = p->key, *ka = p->key + nb, *tk = p->key + nb + na;
    uint32_t *xb = p->idx, *xa = p->idx + nb, *tx = p->idx + nb + na;
    for (size_t j = 0; j < nb; j++)
        kb[j] = b[j].h, xb[j] = (uint32_t)j;
    for (size_t i = 0; i < na; i++)
        ka[i] = a[i].h, xa[i] = (uint32_t)i;
    nd_radix_sort_u64_idx(kb, xb, nb, tk, tx);
    nd_radix_sort_u64_idx(ka, xa, na, tk, tx);
    /* stable: each run of one hash in B is its chain, in text order */
    for (size_t g = 0; g < nb; g++)
        p->next[xb[g]] = g + 1 < nb && kb[g + 1] == kb[g] ? xb[g + 1] + 1 : 0;
    size_t g = 0;
    for (size_t i = 0; i < na; i++) {
        while (g < nb && kb[g] < ka[i])
            g++; /* g: the start of a run (or the end) */
        p->first[xa[i]] = g < nb && kb[g] == ka[i] ? xb[g] + 1 : 0;
    }
    return 0;
}

static size_t extend(const nd_shingle *a, size_t na, size_t i, const nd_shingle *b, size_t nb,
                     size_t j)
{
    size_t n = 0;
    while (i + n < na && j + n < nb && a[i + n].h == b[j + n].h)
        n++;
    return n;
}

/* Runs merged into a passage, in shingle positions: A [as, ae), B [bs,
 * be) (be the furthest end), the last run's B end and the shingles
 * matched. */
typedef struct group {
    size_t as, ae, bs, be, last_be, matched;
    bool open;
} group;

typedef struct pair_out {
    const nd_shingle *a, *b;
    size_t na, nb, min;
    nd_passage_pair *out;
    size_t cap, count;
} pair_out;

static void flush(pair_out *po, group *g)
{
    if (!g->open)
        return;
    g->open = false;
    bool whole = (g->as == 0 && g->ae == po->na) || (g->bs == 0 && g->be == po->nb);
    if (g->matched < po->min && !whole)
        return;
    if (po->count < po->cap)
        po->out[po->count] = (nd_passage_pair){.start = po->a[g->as].start,
                                               .end = po->a[g->ae - 1].end,
                                               .source_start = po->b[g->bs].start,
                                               .source_end = po->b[g->be - 1].end};
    po->count++;
}

/* Adds the run A [i, i+n) = B [j, j+n) to the open group, or closes it and
 * opens another. */
static void add_run(pair_out *po, group *g, size_t i, size_t j, size_t n)
{
    if (g->open && i - g->ae <= ND_PAIRING_GAP && j + BACK_SLACK >= g->last_be &&
        j <= g->last_be + ND_PAIRING_GAP) {
        g->ae = i + n;
        g->bs = j < g->bs ? j : g->bs;
        g->be = j + n > g->be ? j + n : g->be;
        g->last_be = j + n;
        g->matched += n;
        return;
    }
    flush(po, g);
    *g = (group){
        .as = i, .ae = i + n, .bs = j, .be = j + n, .last_be = j + n, .matched = n, .open = true};
}

int nd_passage_pairs(nd_pairing *p, const nd_shingle *a, size_t na, const nd_shingle *b, size_t nb,
                     unsigned mode, nd_passage_pair *out, size_t cap, size_t *total)
{
    *total = 0;
    if (na == 0 || nb == 0)
        return 0;
    if (nb >= UINT32_MAX)
        nb = UINT32_MAX - 1; /* positions + 1 fit a uint32_t */
    lookup lk = {.budget = PROBES_MIN + PROBES_PER * nb};
    int rc = build(p, b, nb, na, &lk);
    if (rc == 0)
        rc = by_sort(p, a, na, b, nb), lk.sorted = true;
    if (rc < 0)
        return rc;
    pair_out po = {.a = a,
                   .b = b,
                   .na = na,
                   .nb = nb,
                   .min = mode == ND_SKETCH_MODE_CHAR ? ND_PAIRING_MIN_CHAR : ND_PAIRING_MIN_WORD,
                   .out = out,
                   .cap = cap};
    group g = {0};
    for (size_t i = 0; i < na;) {
        size_t best = 0, best_j = 0;
        /* The continuation: where the open passage would go on after the
         * same gap in B as in A. */
        size_t cont = SIZE_MAX;
        if (g.open && i - g.ae <= ND_PAIRING_GAP) {
            cont = g.last_be + (i - g.ae);
            if (cont < nb && b[cont].h == a[i].h)
                best = extend(a, na, i, b, nb, cont), best_j = cont;
            else
                cont = SIZE_MAX;
        }
        uint32_t k;
        if (!lk.sorted && !first_of(p, &lk, b, a[i].h, &k)) {
            if ((rc = by_sort(p, a, na, b, nb)) < 0)
                return rc;
            lk.sorted = true;
        }
        if (lk.sorted)
            k = p->first[i];
        for (unsigned c = 0; k && c < ND_PAIRING_CANDIDATES; c++, k = p->next[k - 1]) {
            size_t j = k - 1;
            if (j == cont)
                continue;
            size_t n = extend(a, na, i, b, nb, j);
            if (n > best)
                best = n, best_j = j;
        }
        if (best == 0) {
            i++;
            continue;
        }
        add_run(&po, &g, i, best_j, best);
        i += best;
    }
    flush(&po, &g);
    *total = po.count;
    return 0;
}
