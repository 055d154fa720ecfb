/* hashflood.h - texts crafted against a hash table keyed by the sketch's
 * shingle hashes (audit 2026-12-07, G01): CJK characters chosen one by one
 * so that every character-mode shingle hash h (XXH3_64 of the five token
 * hashes, proto/sketch.md: public and unseeded) falls into the first
 * `window` cells of a linear-probing table of `size` cells, cell (h ^ h >>
 * 32) & (size - 1), size the smallest power of two >= 2 n: the layout of
 * the sketcher's distinct set and of the passages table before the fix
 * (each insertion then walked the whole cluster: O(n^2)). About size /
 * window tries a character.
 *
 * Shared by test_sketch.c, test_passages.c and hashflood_gen.c (the
 * generator of tests/integration/test_hashflood.py). The token hashes come
 * from the sketcher itself (nd_sketch_tokens()), so folds and token rules
 * stay its own. */
#ifndef ND_TEST_HASHFLOOD_H
#define ND_TEST_HASHFLOOD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <xxhash.h>

#include "sketch.h"

#define HF_ALPHABET 1024 /* ideographs from U+4E00 tried as candidates */

typedef struct hf_alphabet {
    char utf8[HF_ALPHABET][3];
    uint64_t h[HF_ALPHABET]; /* each one's character-mode token hash */
    size_t n;
} hf_alphabet;

/* The table size the generator aims at for n shingles. */
static inline size_t hf_table_size(size_t n)
{
    size_t size = 16;
    while (size < 2 * n)
        size *= 2;
    return size;
}

static inline size_t hf_cell(uint64_t h, size_t size)
{
    return (size_t)(h ^ (h >> 32)) & (size - 1);
}

/* Fills al with HF_ALPHABET ideographs and their token hashes, read from
 * the sketcher's character-mode tokens of the string of all of them.
 * Returns 0, or -1 when the sketcher does not make one token each. */
static inline int hf_alphabet_init(const nd_sketcher *sk, nd_sk_scratch *s, hf_alphabet *al)
{
    static char text[3 * HF_ALPHABET];
    for (uint32_t i = 0; i < HF_ALPHABET; i++) {
        uint32_t cp = 0x4E00 + i;
        text[3 * i] = (char)(0xE0 | cp >> 12);
        text[3 * i + 1] = (char)(0x80 | ((cp >> 6) & 63));
        text[3 * i + 2] = (char)(0x80 | (cp & 63));
    }
    nd_sketch out;
    const uint64_t *h;
    const uint32_t *start, *end;
    size_t n;
    if (nd_sketch_text(sk, s, text, sizeof(text), &out, NULL, 0, NULL) < 0 ||
        nd_sketch_tokens(s, ND_SKETCH_MODE_CHAR, &h, &start, &end, &n) < 0 || n != HF_ALPHABET)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (start[i] != i || end[i] != i + 1)
            return -1;
        memcpy(al->utf8[i], text + 3 * i, 3);
        al->h[i] = h[i];
    }
    al->n = n;
    return 0;
}

static inline uint64_t hf_rand(uint64_t *x)
{
    *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
    return *x;
}

/* Writes n + 4 characters (3 (n + 4) bytes, no NUL) into buf: four at
 * random, then each the first candidate (from a random one on) whose
 * shingle with the four before it falls into the first `window` cells of
 * a table of hf_table_size(n) cells (the best tried when none does);
 * window >= that size: random text. With hi, only shingles whose hash's
 * low 32 bits are >= 2^31 are taken (never among a text's anchors, the
 * smallest rank keys rotl32(h)). Returns how many shingles fell outside the
 * window. */
static inline size_t hf_text(const hf_alphabet *al, size_t n, size_t window, bool hi,
                             uint64_t *seed, char *buf, uint64_t *th)
{
    size_t size = hf_table_size(n), missed = 0;
    for (size_t p = 0; p < n + 4; p++) {
        size_t r = hf_rand(seed) % al->n, best = r, best_cell = SIZE_MAX;
        for (size_t t = 0; p >= 4 && t < al->n; t++) {
            size_t c = (r + t) % al->n;
            th[p] = al->h[c];
            uint64_t h = XXH3_64bits(th + p - 4, 5 * sizeof(uint64_t));
            h = h ? h : 1;
            if (hi && (uint32_t)h < 0x80000000u)
                continue;
            size_t cell = hf_cell(h, size);
            if (cell < best_cell)
                best_cell = cell, best = c;
            if (cell < window)
                break;
        }
        missed += p >= 4 && best_cell >= window && window < size;
        th[p] = al->h[best];
        memcpy(buf + 3 * p, al->utf8[best], 3);
    }
    return missed;
}

#endif
