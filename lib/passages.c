/* passages.c - copied passages on both sides (see passages.h). */
#include "passages.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* A run may start this many shingles before the previous run's end in B
 * and still continue it (a word repeated at an edit). */
#define BACK_SLACK 3

struct nd_pairing {
    uint32_t *slot; /* open addressing: B position + 1 of a hash's first
                     * occurrence, 0 empty; power-of-two size */
    size_t slot_cap;
    uint32_t *next; /* per B position: the next position + 1 of its hash */
    size_t next_cap;
};

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
    free(p);
}

static size_t cell_of(uint64_t h, size_t mask)
{
    return (size_t)(h ^ (h >> 32)) & mask;
}

/* Fills the table with b's positions, each hash's chain in text order.
 * Returns the table's mask, or 0 with -ENOMEM in *err. */
static size_t build(nd_pairing *p, const nd_shingle *b, size_t nb, int *err)
{
    size_t size = 16;
    while (size < 2 * nb)
        size *= 2;
    if (size > p->slot_cap) {
        uint32_t *s = realloc(p->slot, size * sizeof(*s));
        if (!s) {
            *err = -ENOMEM;
            return 0;
        }
        p->slot = s, p->slot_cap = size;
    }
    if (nb > p->next_cap) {
        uint32_t *n = realloc(p->next, nb * sizeof(*n));
        if (!n) {
            *err = -ENOMEM;
            return 0;
        }
        p->next = n, p->next_cap = nb;
    }
    memset(p->slot, 0, size * sizeof(uint32_t));
    size_t mask = size - 1;
    for (size_t j = nb; j-- > 0;) {
        uint64_t h = b[j].h;
        size_t c = cell_of(h, mask);
        while (p->slot[c] && b[p->slot[c] - 1].h != h)
            c = (c + 1) & mask;
        p->next[j] = p->slot[c]; /* 0 when the cell was empty */
        p->slot[c] = (uint32_t)(j + 1);
    }
    return mask;
}

/* B position + 1 of h's first occurrence, or 0. */
static uint32_t first_of(const nd_pairing *p, size_t mask, const nd_shingle *b, uint64_t h)
{
    size_t c = cell_of(h, mask);
    while (p->slot[c]) {
        if (b[p->slot[c] - 1].h == h)
            return p->slot[c];
        c = (c + 1) & mask;
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
    int err = 0;
    size_t mask = build(p, b, nb, &err);
    if (err)
        return err;
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
        uint32_t k = first_of(p, mask, b, a[i].h);
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
