/* fuzz_fold - the folds that read a text as a reader sees it (lib/fold.h,
 * lib/normalizer.h) on arbitrary bytes.
 *
 * Invariants, besides "no crash, no sanitizer report":
 * - the folds before the normalizer (overrides in reading order,
 *   look-alike letters) return text that is not UTF-8 as is, and valid
 *   UTF-8 as valid UTF-8 with the same number of code points (moved or
 *   replaced one for one), not the text itself when a letter was counted;
 * - they are idempotent: the folded text folds to itself, nothing counted;
 * - with the readings in brackets (nd_fold_text()): the same, and each
 *   reading dropped is one opening and one closing bracket become U+0300
 *   where they were (in a text without overrides, which move code points);
 *   without a reading dropped, the text reads as nd_fold_lookalikes() reads
 *   it;
 * - the normalizer's fold is idempotent too: a code point mapped to one
 *   entry maps, once more, to the same entry's code point;
 * - the sketch's integrity counts are bounded: look-alikes and readings as
 *   the fold counts them, invisible <= code points, traditional <= han (Han code
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
static char *buf, *buf2, *buf3, *buf4;
static size_t cap, cap2, cap3, cap4;

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

static bool is_open(uint32_t cp)
{
    return cp == '(' || cp == '[' || cp == 0xFF08 || cp == 0xFF3B || cp == 0x3010;
}

static bool is_close(uint32_t cp)
{
    return cp == ')' || cp == ']' || cp == 0xFF09 || cp == 0xFF3D || cp == 0x3011;
}

/* The readings nd_fold_text() dropped from text (valid UTF-8, no override)
 * into out: opening and closing brackets that became U+0300 where they
 * were, counted apart; false when another code point moved or changed to
 * something other than U+0300 or a letter. */
static bool brackets_dropped(const uint8_t *in, size_t ilen, const uint8_t *out, size_t olen,
                             uint32_t *opened, uint32_t *closed)
{
    *opened = *closed = 0;
    size_t i = 0, o = 0;
    while (i < ilen && o < olen) {
        uint32_t a, b;
        if (nd_utf8_decode(in, ilen, &i, &a) < 0 || nd_utf8_decode(out, olen, &o, &b) < 0)
            return false;
        if (a == b)
            continue;
        if (b == 0x0300) {
            *opened += is_open(a), *closed += is_close(a);
            continue;
        }
        if (is_open(a) || is_close(a) || is_open(b) || is_close(b))
            return false; /* the look-alike fold replaces letters only */
    }
    return i == ilen && o == olen;
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

    /* every fold, with the readings in brackets */
    const char *tout;
    size_t tlen;
    uint32_t tlk, an, ro;
    FUZZ_CHECK(nd_fold_text(norm, text, size, &buf3, &cap3, &tout, &tlen, &tlk, &an, &ro) == 0,
               "fold text");
    FUZZ_CHECK(fuzz_utf8_valid((const uint8_t *)tout, tlen) &&
                   code_points((const uint8_t *)tout, tlen) == code_points(data, size),
               "readings: code points %zu -> %zu", code_points(data, size),
               code_points((const uint8_t *)tout, tlen));
    FUZZ_CHECK(an == 0 || tout != text, "%u readings but out is text", an);
    if (an == 0)
        FUZZ_CHECK(tlen == olen && memcmp(tout, out, olen) == 0 && tlk == lk,
                   "no reading, read otherwise than nd_fold_lookalikes()");
    bool overrides = false; /* LRO, RLO: E2 80 AD, E2 80 AE */
    for (size_t i = 0; i + 2 < size; i++)
        overrides |= data[i] == 0xE2 && data[i + 1] == 0x80 &&
                     (data[i + 2] == 0xAD || data[i + 2] == 0xAE);
    /* code points read in another order only under an override, at most
     * all of them */
    FUZZ_CHECK(ro <= code_points(data, size) && (overrides || ro == 0) && (ro == 0 || tout != text),
               "%u reordered (overrides %d)", ro, overrides);
    uint32_t opened, closed;
    if (!overrides)
        FUZZ_CHECK(brackets_dropped(data, size, (const uint8_t *)tout, tlen, &opened, &closed) &&
                       opened == an && closed == an,
                   "%u readings: %u opening, %u closing brackets dropped", an, opened, closed);
    const char *tagain;
    size_t talen;
    uint32_t tlk2, an2, ro2;
    FUZZ_CHECK(nd_fold_text(norm, tout, tlen, &buf4, &cap4, &tagain, &talen, &tlk2, &an2, &ro2) ==
                       0 &&
                   tagain == tout && an2 == 0 && tlk2 == 0 && ro2 == 0,
               "readings: not idempotent: %u more readings, %u letters, %u reordered", an2, tlk2,
               ro2);

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
    FUZZ_CHECK(info.integrity.lookalike == tlk && info.integrity.annotation == an,
               "lookalike %u annotation %u, fold %u %u", info.integrity.lookalike,
               info.integrity.annotation, tlk, an);
    FUZZ_CHECK(info.integrity.invisible <= info.code_points &&
                   info.integrity.traditional <= info.integrity.han &&
                   info.integrity.han <= (uint64_t)ND_NORM_MAX * info.code_points,
               "integrity %u %u %u of %u", info.integrity.invisible, info.integrity.traditional,
               info.integrity.han, info.code_points);
    return 0;
}
