/* fuzz_framing.c - server/net/framing.c, the strict scan of every byte a client
 * sends before libevent parses it. For arbitrary streams:
 * - no crash, no out-of-bounds access, no undefined behaviour (ASan/UBSan);
 * - the verdict, the refused request and the cut position do not depend on
 *   how the stream is split into reads, nor on whether body bytes go
 *   through nd_framing_skip() first (as http.c does) — the fuzzer picks the
 *   splits from the input's first bytes;
 * - a refused scan stays refused with the same reason; the cut lies within
 *   the bytes seen; an accepted scan has seen every byte;
 * - every reason has an HTTP status (or 0 for libevent's own) and a code
 *   and message. */
#include "framing.h"
#include "fuzz_util.h"

#include <string.h>

typedef struct {
    int why;
    uint32_t heads;
    uint64_t line_start;
    uint64_t off;
} result;

/* Scans data[0, n) in pieces whose sizes come from splits[0, nsplits)
 * (cycled; 0 means the rest), skipping body bytes first when skip is set. */
static result scan(const uint8_t *data, size_t n, const uint8_t *splits, size_t nsplits, bool skip)
{
    nd_framing f;
    nd_framing_init(&f, 4096);
    size_t i = 0, k = 0;
    int why = ND_FR_OK;
    while (i < n && why == ND_FR_OK) {
        size_t take = nsplits ? splits[k++ % nsplits] : 0;
        if (take == 0 || take > n - i)
            take = n - i;
        size_t skipped = skip ? nd_framing_skip(&f, take) : 0;
        FUZZ_CHECK(skipped <= take, "skipped %zu of %zu", skipped, take);
        if (take > skipped)
            why = nd_framing_scan(&f, data + i + skipped, take - skipped);
        i += take;
    }
    if (why != ND_FR_OK) {
        FUZZ_CHECK(nd_framing_refused(&f), "refusal not kept");
        FUZZ_CHECK(f.line_start <= n, "cut %llu past %zu bytes", (unsigned long long)f.line_start,
                   n);
        FUZZ_CHECK(nd_framing_scan(&f, (const unsigned char *)"GET", 3) == why,
                   "a refused scan changed its reason");
        int status = nd_framing_status(why);
        FUZZ_CHECK(status == 0 || (status >= 400 && status <= 505), "status %d", status);
        FUZZ_CHECK(nd_framing_code(why) && nd_framing_message(why), "no code or message");
    } else {
        FUZZ_CHECK(f.off == n, "accepted scan saw %llu of %zu bytes", (unsigned long long)f.off, n);
    }
    result r = {why, f.heads, why ? f.line_start : 0, why ? 0 : f.off};
    return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* The first byte says how many split sizes follow (0..7). */
    size_t nsplits = size ? data[0] % 8 : 0;
    if (size < 1 + nsplits)
        return 0;
    const uint8_t *splits = data + 1;
    const uint8_t *stream = data + 1 + nsplits;
    size_t n = size - 1 - nsplits;

    result whole = scan(stream, n, NULL, 0, false);
    result pieces = scan(stream, n, splits, nsplits, false);
    result skipped = scan(stream, n, splits, nsplits, true);
    result bytes = scan(stream, n, (const uint8_t *)"\1", 1, true);
    const result *other[] = {&pieces, &skipped, &bytes};
    for (size_t i = 0; i < 3; i++)
        FUZZ_CHECK(other[i]->why == whole.why && other[i]->heads == whole.heads &&
                       other[i]->line_start == whole.line_start && other[i]->off == whole.off,
                   "split %zu: why %d/%d heads %u/%u cut %llu/%llu", i, other[i]->why, whole.why,
                   other[i]->heads, whole.heads, (unsigned long long)other[i]->line_start,
                   (unsigned long long)whole.line_start);
    return 0;
}
