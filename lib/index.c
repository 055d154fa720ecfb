/* index.c - PLACEHOLDER: being written (issue 3). */
#include "index.h"
#include <errno.h>
#include <stdlib.h>
struct nd_index { size_t n; };
int nd_index_create(nd_index **out) { *out = calloc(1, sizeof(nd_index)); return *out ? 0 : -ENOMEM; }
void nd_index_destroy(nd_index *idx) { free(idx); }
int nd_index_insert(nd_index *idx, uint64_t h, uint32_t s) { (void)idx; (void)h; (void)s; return -ENOSYS; }
int nd_index_remove(nd_index *idx, uint64_t h, uint32_t s) { (void)idx; (void)h; (void)s; return -ENOSYS; }
int nd_index_query(const nd_index *idx, uint64_t h, unsigned k, nd_index_hit *hits, size_t cap, size_t *found)
{ (void)idx; (void)h; (void)k; (void)hits; (void)cap; *found = 0; return -ENOSYS; }
size_t nd_index_count(const nd_index *idx) { return idx->n; }
