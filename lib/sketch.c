/* sketch.c - see sketch.h (stub bodies; implementation follows). */
#include "sketch.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int nd_sketcher_create(nd_sketcher **out) { *out = NULL; return -ENOMEM; }
void nd_sketcher_destroy(nd_sketcher *sk) { (void)sk; }
int nd_sk_scratch_create(nd_sk_scratch **out) { *out = NULL; return -ENOMEM; }
void nd_sk_scratch_destroy(nd_sk_scratch *s) { (void)s; }
int nd_sketch_text(const nd_sketcher *sk, nd_sk_scratch *scratch, const char *text,
                   size_t len, nd_sketch *out, nd_anchors *anchors_out,
                   unsigned anchors_wanted, nd_sketch_info *info)
{
    (void)sk, (void)scratch, (void)text, (void)len, (void)out, (void)anchors_out;
    (void)anchors_wanted, (void)info;
    return -ENOMEM;
}
void nd_sketch_compare(const nd_sketch *q, const nd_sketch *d, nd_sketch_estimate *out)
{
    (void)q, (void)d;
    memset(out, 0, sizeof(*out));
}
size_t nd_sketch_passages(const nd_sk_scratch *q, const nd_sketch *d, nd_passage *out, size_t cap)
{
    (void)q, (void)d, (void)out, (void)cap;
    return 0;
}
size_t nd_sketch_encoded_size(const nd_sketch *s) { return 8 + 4 * (size_t)s->n; }
size_t nd_sketch_encode(const nd_sketch *s, uint8_t *buf, size_t cap) { (void)s, (void)buf, (void)cap; return 0; }
int nd_sketch_decode(const uint8_t *buf, size_t len, nd_sketch *out) { (void)buf, (void)len, (void)out; return -EINVAL; }
