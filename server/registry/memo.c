/* memo.c - a check's figures kept between a registration's two passes
 * (memo.h). */
#include "memo.h"
#include "docs_internal.h"

#include <stdlib.h>
#include <string.h>

nd_memo *nd_memo_create(size_t cap)
{
    nd_memo *memo = calloc(1, sizeof(*memo));
    if (!memo)
        return NULL;
    if (!(memo->e = calloc(cap ? cap : 1, sizeof(*memo->e)))) {
        free(memo);
        return NULL;
    }
    memo->cap = cap;
    return memo;
}

void nd_memo_destroy(nd_memo *memo)
{
    if (!memo)
        return;
    nd_memo_clear(memo);
    free(memo->e);
    free(memo);
}

void nd_memo_put(nd_memo *memo, nd_doc *d, double resemblance, double containment, float gap,
                 uint8_t kind, float reach, bool gray)
{
    if (memo->mode != ND_MEMO_RECORD || memo->n == memo->cap)
        return;
    memo->e[memo->n++] = (nd_memo_entry){.doc = doc_ref(d),
                                         .resemblance = resemblance,
                                         .containment = containment,
                                         .gap = gap,
                                         .kind = kind,
                                         .reach = reach,
                                         .gray = gray};
}

static int entry_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const nd_memo_entry *)a)->doc;
    uintptr_t y = (uintptr_t)((const nd_memo_entry *)b)->doc;
    return x < y ? -1 : x > y;
}

void nd_memo_seal(nd_memo *memo)
{
    qsort(memo->e, memo->n, sizeof(*memo->e), entry_cmp);
    memo->mode = ND_MEMO_USE;
}

const nd_memo_entry *nd_memo_get(const nd_memo *memo, const nd_doc *d)
{
    if (memo->mode != ND_MEMO_USE)
        return NULL;
    nd_memo_entry key = {.doc = (nd_doc *)d};
    return bsearch(&key, memo->e, memo->n, sizeof(*memo->e), entry_cmp);
}

void nd_memo_put_third(nd_memo *memo, const nd_memo_third *third)
{
    if (memo->mode != ND_MEMO_RECORD || memo->have_third)
        return;
    memo->third = *third;
    for (size_t i = 0; i < third->npick; i++)
        doc_ref(third->pick[i]);
    memo->have_third = true;
}

const nd_memo_third *nd_memo_get_third(const nd_memo *memo, nd_doc *const *pick, size_t npick)
{
    if (memo->mode != ND_MEMO_USE || !memo->have_third || memo->third.npick != npick)
        return NULL;
    for (size_t i = 0; i < npick; i++)
        if (memo->third.pick[i] != pick[i])
            return NULL;
    return &memo->third;
}

void nd_memo_clear(nd_memo *memo)
{
    for (size_t i = 0; i < memo->n; i++)
        nd_doc_release(memo->e[i].doc);
    memo->n = 0;
    if (memo->have_third)
        for (size_t i = 0; i < memo->third.npick; i++)
            nd_doc_release(memo->third.pick[i]);
    memo->have_third = false;
    memo->mode = ND_MEMO_OFF;
}
