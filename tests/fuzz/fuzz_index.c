/* fuzz_index - lib/index.c: a sequence of inserts, removals and queries
 * decoded from the input, checked step by step against a brute-force list.
 *
 * Fingerprints are drawn near a few base values (a few bits flipped), so
 * that buckets fill, share keys and queries find several entries. Checked:
 * insert gives 0, or -EEXIST for a pair already stored; remove gives 0, or
 * -ENOENT for a pair not stored; count is the list's size; a query finds
 * exactly the pairs within k (its total in *found), sorted by distance then
 * slot, the cap nearest when capped (-E2BIG); k above 8 is -EINVAL. */
#include <errno.h>
#include <string.h>

#include "fuzz_util.h"
#include "index.h"

#define MAX_ENTRIES 2048

typedef struct entry {
    uint64_t h;
    uint32_t slot;
} entry;

typedef struct cursor {
    const uint8_t *p;
    size_t n;
} cursor;

static uint8_t next(cursor *c)
{
    if (!c->n)
        return 0;
    c->n--;
    return *c->p++;
}

static const uint64_t base[8] = {
    0x0000000000000000ull, 0xffffffffffffffffull, 0x5a47ff2c81b2c816ull, 0x5a47ff2c81b2c817ull,
    0x8212868318d29267ull, 0x0123456789abcdefull, 0xffff0000ffff0000ull, 0x00000000ffffffffull,
};

static uint64_t draw(cursor *c)
{
    uint8_t b = next(c);
    uint64_t h = base[b & 7];
    for (unsigned flips = (b >> 3) & 7; flips; flips--)
        h ^= 1ull << (next(c) & 63);
    return h;
}

static int cmp_hit(const void *a, const void *b)
{
    const nd_index_hit *x = a, *y = b;
    if (x->distance != y->distance)
        return x->distance < y->distance ? -1 : 1;
    return x->slot < y->slot ? -1 : x->slot > y->slot;
}

static nd_index_hit want[MAX_ENTRIES], got[MAX_ENTRIES];
static nd_index *idx;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    if (nd_index_create(&idx) < 0)
        abort();
    return 0;
}

static void query(const entry *e, size_t n, cursor *c)
{
    uint64_t q = draw(c);
    uint8_t b = next(c);
    unsigned k = b % 10; /* 9 is out of range */
    size_t cap = (b >> 4) == 0 ? 0 : (b >> 4) < 8 ? (size_t)(b >> 4) : MAX_ENTRIES;
    size_t found = 12345;
    int rc = nd_index_query(idx, q, k, cap ? got : NULL, cap, &found);
    if (k > ND_INDEX_MAX_K) {
        FUZZ_CHECK(rc == -EINVAL && found == 0, "k %u: rc %d", k, rc);
        return;
    }
    size_t nw = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned d = (unsigned)__builtin_popcountll(e[i].h ^ q);
        if (d <= k)
            want[nw++] = (nd_index_hit){.slot = e[i].slot, .distance = d};
    }
    qsort(want, nw, sizeof(want[0]), cmp_hit);
    FUZZ_CHECK(found == nw, "k %u: found %zu, brute force %zu", k, found, nw);
    FUZZ_CHECK(rc == (nw > cap ? -E2BIG : 0), "rc %d with %zu found, cap %zu", rc, nw, cap);
    size_t m = nw < cap ? nw : cap;
    for (size_t i = 0; i < m; i++)
        FUZZ_CHECK(got[i].slot == want[i].slot && got[i].distance == want[i].distance,
                   "hit %zu: slot %u distance %u, wanted slot %u distance %u", i, got[i].slot,
                   got[i].distance, want[i].slot, want[i].distance);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static entry e[MAX_ENTRIES];
    size_t n = 0;
    uint32_t next_slot = 1;
    cursor c = {data, size};
    while (c.n) {
        uint8_t op = next(&c) & 7;
        if (op <= 3 && n < MAX_ENTRIES) { /* insert a new pair */
            uint64_t h = draw(&c);
            uint32_t slot = (next(&c) & 1) ? next_slot++ : 1000000 + next_slot++;
            FUZZ_CHECK(nd_index_insert(idx, h, slot) == 0, "insert");
            e[n++] = (entry){h, slot};
        } else if (op == 4 && n) { /* the same pair again */
            entry x = e[next(&c) % n];
            FUZZ_CHECK(nd_index_insert(idx, x.h, x.slot) == -EEXIST, "double insert");
        } else if (op == 5 && n) { /* remove a stored pair */
            size_t i = next(&c) % n;
            FUZZ_CHECK(nd_index_remove(idx, e[i].h, e[i].slot) == 0, "remove");
            e[i] = e[--n];
        } else if (op == 6) { /* remove what is not there */
            uint64_t h = draw(&c);
            uint32_t slot = n ? e[next(&c) % n].slot : 7;
            bool stored = false;
            for (size_t i = 0; i < n; i++)
                stored |= e[i].h == h && e[i].slot == slot;
            if (!stored)
                FUZZ_CHECK(nd_index_remove(idx, h, slot) == -ENOENT, "remove missing");
        } else if (op == 7) {
            query(e, n, &c);
        }
        FUZZ_CHECK(nd_index_count(idx) == n, "count %zu, wanted %zu", nd_index_count(idx), n);
    }
    /* Empty it again for the next input (the index is reused: creating and
     * destroying its 2 MiB of buckets per input would cost most of the
     * time). */
    while (n) {
        n--;
        FUZZ_CHECK(nd_index_remove(idx, e[n].h, e[n].slot) == 0, "final remove");
    }
    FUZZ_CHECK(nd_index_count(idx) == 0, "not empty");
    return 0;
}
