/* hashflood_gen.c - writes a text crafted against the sketch's and the
 * fingerprint's hash tables (tests/hashflood.h; audit 2026-12-07, G01) on
 * stdout, for tests/integration/test_hashflood.py:
 *
 *   hashflood_gen N WINDOW [hi] [SEED]
 *   hashflood_gen words N WINDOW [SEED]
 *
 * N + 4 ideographs (3 bytes each) whose N character-mode shingles fall into
 * the first WINDOW cells of a table of the smallest power of two >= 2 N
 * cells (WINDOW 0: random text of the same characters); "hi": none of them
 * among the text's anchors. With "words": N distinct words of 6 to 9
 * lowercase letters, each followed by a space, whose XXH3_64 (the
 * fingerprint's feature hash of a word) falls into the first WINDOW cells
 * of such a table (cell h & (size - 1), size at least 1024: the
 * fingerprint's feature table). Exits 0, or 1 when the sketcher cannot be
 * made or gives the alphabet other tokens than one a character. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hashflood.h"

static int words(size_t n, size_t window, uint64_t seed)
{
    size_t size = hf_table_size(n) < 1024 ? 1024 : hf_table_size(n);
    for (size_t k = 0; k < n; k++) {
        char w[10];
        size_t l;
        do {
            uint64_t x = hf_rand(&seed);
            l = 6 + x % 4;
            x /= 4;
            for (size_t i = 0; i < l; i++)
                w[i] = (char)('a' + x % 26), x /= 26;
            w[l] = ' ';
        } while (window && (XXH3_64bits(w, l) & (size - 1)) >= window);
        fwrite(w, 1, l + 1, stdout);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && strcmp(argv[1], "words") == 0)
        return words(strtoull(argv[2], NULL, 10), strtoull(argv[3], NULL, 10),
                     argc > 4 ? strtoull(argv[4], NULL, 10) : 88172645463325252ull);
    if (argc < 3) {
        fprintf(stderr, "usage: hashflood_gen N WINDOW [hi] [SEED]\n");
        return 2;
    }
    size_t n = strtoull(argv[1], NULL, 10), window = strtoull(argv[2], NULL, 10);
    int hi = argc > 3 && strcmp(argv[3], "hi") == 0;
    uint64_t seed = argc > 3 + hi ? strtoull(argv[3 + hi], NULL, 10) : 88172645463325252ull;
    static hf_alphabet al;
    nd_sketcher *sk = NULL;
    nd_sk_scratch *s = NULL;
    char *buf = malloc(3 * (n + 4));
    uint64_t *th = malloc((n + 4) * sizeof(uint64_t));
    int rc = 1;
    if (!buf || !th || seed == 0 || nd_sketcher_create(&sk) < 0 || nd_sk_scratch_create(&s) < 0 ||
        hf_alphabet_init(sk, s, &al) < 0) {
        fprintf(stderr, "hashflood_gen: cannot make the alphabet\n");
        goto out;
    }
    size_t missed = hf_text(&al, n, window ? window : SIZE_MAX, hi, &seed, buf, th);
    fwrite(buf, 1, 3 * (n + 4), stdout);
    fprintf(stderr, "hashflood_gen: %zu characters, window %zu, %zu shingles outside\n", n + 4,
            window, missed);
    rc = 0;
out:
    nd_sk_scratch_destroy(s);
    nd_sketcher_destroy(sk);
    free(th);
    free(buf);
    return rc;
}
