/* fuzz_fingerprint - the fingerprint pipeline (UTF-8 check, normalization,
 * tokenization, SimHash) on arbitrary bytes.
 *
 * Invariants, besides "no crash, no sanitizer report":
 * - -EILSEQ exactly when the bytes are not UTF-8 by an independent validator,
 *   and then the result is left untouched;
 * - determinism: the same bytes give the same result twice;
 * - scratch reuse: a scratch that has served every earlier input (grown,
 *   full of their leftovers) gives the same result as a fresh one;
 * - the empty text gives 0, 0, 0. */
#include <errno.h>
#include <string.h>

#include "fingerprint.h"
#include "fuzz_util.h"

static nd_fingerprinter *fp;
static nd_fp_scratch *reused;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    if (nd_fingerprinter_create(&fp) < 0 || nd_fp_scratch_create(&reused) < 0)
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    bool valid = fuzz_utf8_valid(data, size);

    nd_fingerprint_result a, b, c;
    memset(&a, 0xA5, sizeof(a));
    int rc = nd_fingerprint(fp, reused, text, size, &a);
    if (!valid) {
        FUZZ_CHECK(rc == -EILSEQ, "invalid UTF-8 of %zu bytes gave %d", size, rc);
        nd_fingerprint_result untouched;
        memset(&untouched, 0xA5, sizeof(untouched));
        FUZZ_CHECK(memcmp(&a, &untouched, sizeof(a)) == 0, "result written on -EILSEQ");
        return 0;
    }
    FUZZ_CHECK(rc == 0, "valid UTF-8 of %zu bytes gave %d", size, rc);

    nd_fp_scratch *fresh = NULL;
    if (nd_fp_scratch_create(&fresh) < 0)
        abort();
    FUZZ_CHECK(nd_fingerprint(fp, fresh, text, size, &b) == 0, "fresh scratch failed");
    FUZZ_CHECK(nd_fingerprint(fp, reused, text, size, &c) == 0, "second call failed");
    nd_fp_scratch_destroy(fresh);
    FUZZ_CHECK(a.simhash == b.simhash && a.chars == b.chars && a.features == b.features,
               "reused scratch %016llx/%u/%u, fresh %016llx/%u/%u", (unsigned long long)a.simhash,
               a.chars, a.features, (unsigned long long)b.simhash, b.chars, b.features);
    FUZZ_CHECK(a.simhash == c.simhash && a.chars == c.chars && a.features == c.features,
               "not deterministic");
    if (size == 0)
        FUZZ_CHECK(a.simhash == 0 && a.chars == 0 && a.features == 0, "empty text");
    if (a.features == 0)
        FUZZ_CHECK(a.simhash == 0, "no features but simhash %016llx",
                   (unsigned long long)a.simhash);
    return 0;
}
