/* fuzz_fold - the folds that read a text as a reader sees it (lib/fold.h,
 * lib/normalizer.h) on arbitrary bytes.
 *
 * Invariants, besides "no crash, no sanitizer report":
 * - the folds before the normalizer (overrides in reading order,
 *   look-alike letters) return text that is not UTF-8 as is, and valid
 *   UTF-8 as valid UTF-8 with the same number of code points (moved or
 *   replaced one for one), not the text itself when a letter was counted;
 * - they are idempotent: the folded text folds to itself, nothing counted;
 * - the normalizer's fold is idempotent too: a code point mapped to one
 *   entry maps, once more, to the same entry's code point;
 * - the sketch's integrity counts are bounded: look-alikes as the fold
 *   counts them, invisible <= code points, traditional <= han (Han code
 *   points after normalization: U+337B SQUARE ERA NAME HEISEI reads two). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fold.h"
#include "fuzz_util.h"
#include "normalizer.h"
#include "sketch.h"
#include "utf8.h"

static nd_normalizer *norm;
static nd_sketcher *sk;
static nd_sk_scratch *scr;
static char *buf, *buf2;
static size_t cap, cap2;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    if (nd_normalizer_create(&norm) < 0 || nd_sketcher_create(&sk) < 0 ||
        nd_sk_scratch_create(&scr) < 0)
        abort();
    return 0;
}

static size_t code_points(const uint8_t *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += (s[i] & 0xC0) != 0x80;
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    bool valid = fuzz_utf8_valid(data, size);
    const char *out;
    size_t olen;
    uint32_t lk;
    FUZZ_CHECK(nd_fold_lookalikes(norm, text, size, &buf, &cap, &out, &olen, &lk) == 0, "fold");
    if (!valid) {
        FUZZ_CHECK(out == text && olen == size && lk == 0, "invalid UTF-8 folded");
        return 0;
    }
    FUZZ_CHECK(fuzz_utf8_valid((const uint8_t *)out, olen), "folded text is not UTF-8");
    FUZZ_CHECK(code_points((const uint8_t *)out, olen) == code_points(data, size),
               "code points %zu -> %zu", code_points(data, size),
               code_points((const uint8_t *)out, olen));
    FUZZ_CHECK(lk == 0 || out != text, "counted %u but out is text", lk);
    const char *again;
    size_t alen;
    uint32_t lk2;
    FUZZ_CHECK(nd_fold_lookalikes(norm, out, olen, &buf2, &cap2, &again, &alen, &lk2) == 0 &&
                   again == out && lk2 == 0,
               "not idempotent: %u more replaced", lk2);

    /* the normalizer's per-code-point fold */
    for (size_t pos = 0; pos < size;) {
        uint32_t cp, b1[ND_NORM_MAX], b2[ND_NORM_MAX];
        if (nd_utf8_decode(data, size, &pos, &cp) < 0)
            break;
        const uint32_t *s1, *s2;
        unsigned n1 = nd_normalizer_map(norm, cp, b1, &s1);
        FUZZ_CHECK(n1 <= ND_NORM_MAX, "U+%04X: %u entries", cp, n1);
        if (n1 != 1 || ND_NORM_CP(s1[0]) == 0x20)
            continue;
        uint32_t x = ND_NORM_CP(s1[0]);
        unsigned n2 = nd_normalizer_map(norm, x, b2, &s2);
        if (ND_NORM_CLASS(s1[0]) == ND_CHAR_CJK)
            FUZZ_CHECK(n2 == 1 && ND_NORM_CP(s2[0]) == x, "U+%04X -> U+%04X -> not itself", cp, x);
    }

    nd_sketch sketch;
    nd_sketch_info info;
    FUZZ_CHECK(nd_sketch_text(sk, scr, text, size, &sketch, NULL, 0, &info) == 0, "sketch");
    FUZZ_CHECK(info.integrity.lookalike == lk, "lookalike %u, fold %u", info.integrity.lookalike,
               lk);
    FUZZ_CHECK(info.integrity.invisible <= info.code_points &&
                   info.integrity.traditional <= info.integrity.han &&
                   info.integrity.han <= (uint64_t)ND_NORM_MAX * info.code_points,
               "integrity %u %u %u of %u", info.integrity.invisible, info.integrity.traditional,
               info.integrity.han, info.code_points);
    return 0;
}
