/* Small sorts shared by the sketcher, the passages and the anchor index. */
#ifndef ND_SORT_H
#define ND_SORT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Sorts v[0..n) ascending in place: an insertion sort, for short or nearly
 * sorted arrays (after a counting pass on the top bits of hash values, each
 * value moves only within its bucket). */
static inline void nd_insertion_sort_u64(uint64_t *v, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        uint64_t x = v[i];
        size_t j = i;
        for (; j && v[j - 1] > x; j--)
            v[j] = v[j - 1];
        v[j] = x;
    }
}

/* qsort()'s comparison of two uint64_t, ascending. */
static inline int nd_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Sorts the pairs (key[i], idx[i]), i < n, by key, stably (equal keys keep
 * their order): an LSD radix sort, eight passes of 8 bits (a pass whose
 * byte is the same in every key is skipped). O(n) whatever the keys: the
 * fallback of the hash tables that user text keys (sketch.c's distinct
 * set, passages.c's table), so that keys crafted to collide in a table's
 * cells cost no more than any others. tkey and tidx: scratch of n entries.
 * Does not allocate. */
static inline void nd_radix_sort_u64_idx(uint64_t *key, uint32_t *idx, size_t n, uint64_t *tkey,
                                         uint32_t *tidx)
{
    size_t count[8][256];
    memset(count, 0, sizeof(count));
    for (size_t i = 0; i < n; i++)
        for (unsigned d = 0; d < 8; d++)
            count[d][(key[i] >> (8 * d)) & 0xFF]++;
    uint64_t *k = key, *tk = tkey;
    uint32_t *x = idx, *tx = tidx;
    for (unsigned d = 0; d < 8; d++) {
        size_t *c = count[d], sum = 0;
        if (n == 0 || c[(k[0] >> (8 * d)) & 0xFF] == n)
            continue; /* one byte value: the order stays */
        for (unsigned b = 0; b < 256; b++) {
            size_t t = c[b];
            c[b] = sum;
            sum += t;
        }
        for (size_t i = 0; i < n; i++) {
            size_t at = c[(k[i] >> (8 * d)) & 0xFF]++;
            tk[at] = k[i], tx[at] = x[i];
        }
        uint64_t *sk = k;
        uint32_t *sx = x;
        k = tk, x = tx, tk = sk, tx = sx;
    }
    if (k != key) {
        memcpy(key, k, n * sizeof(*key));
        memcpy(idx, x, n * sizeof(*idx));
    }
}

#endif
