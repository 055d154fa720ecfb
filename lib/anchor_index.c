/* anchor_index.c - see anchor_index.h (stub bodies; implementation follows). */
#include "anchor_index.h"

#include <errno.h>
#include <string.h>

int nd_anchor_index_create(nd_anchor_index **out, unsigned cap) { (void)cap; *out = NULL; return -ENOMEM; }
void nd_anchor_index_destroy(nd_anchor_index *idx) { (void)idx; }
int nd_anchor_index_insert(nd_anchor_index *idx, uint32_t slot, const uint32_t *a, size_t n)
{ (void)idx, (void)slot, (void)a, (void)n; return -ENOMEM; }
int nd_anchor_index_insert_many(nd_anchor_index *idx, const uint32_t *slots,
                                const uint32_t *a, size_t ndocs, size_t m)
{ (void)idx, (void)slots, (void)a, (void)ndocs, (void)m; return -ENOMEM; }
size_t nd_anchor_index_remove(nd_anchor_index *idx, uint32_t slot, const uint32_t *a, size_t n)
{ (void)idx, (void)slot, (void)a, (void)n; return 0; }
size_t nd_anchor_index_query(const nd_anchor_index *idx, const uint32_t *a, size_t n,
                             nd_anchor_hit *hits, size_t cap, unsigned *skipped)
{ (void)idx, (void)a, (void)n, (void)hits, (void)cap; if (skipped) *skipped = 0; return 0; }
size_t nd_anchor_index_postings(const nd_anchor_index *idx, uint32_t anchor) { (void)idx, (void)anchor; return 0; }
void nd_anchor_index_stats(const nd_anchor_index *idx, nd_anchor_stats *out) { (void)idx; memset(out, 0, sizeof(*out)); }
