/* Small sorts shared by the sketcher and the anchor index. */
#ifndef ND_SORT_H
#define ND_SORT_H

#include <stddef.h>
#include <stdint.h>

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

#endif
