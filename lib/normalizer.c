/* normalizer.c - the per-code-point normalization table (see normalizer.h). */
#include "normalizer.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <utf8proc.h>

#define BMP_SIZE ND_NORM_BMP
#define POOL_MAX ND_NORM_POOL_MAX
/* Table entry for a BMP code point: either a single mapped entry inline
 * (bit 31 clear), or bit 31 set with the length in bits 24..30 and the
 * offset into the pool in bits 0..23. A dropped code point has length 0. */
#define MULTI_FLAG ND_NORM_MULTI

static bool in_range(uint32_t cp, uint32_t lo, uint32_t hi)
{
    return cp >= lo && cp <= hi;
}

/* Scripts written without spaces between words, and Hangul, whose syllables
 * are tokenized one by one (character n-grams) rather than as words. */
static bool is_cjk_script(uint32_t cp)
{
    return in_range(cp, 0x4E00, 0x9FFF)      /* CJK Unified Ideographs */
           || in_range(cp, 0x3400, 0x4DBF)   /* Extension A */
           || in_range(cp, 0x20000, 0x323AF) /* Extensions B..H */
           || in_range(cp, 0xF900, 0xFAFF)   /* Compatibility Ideographs */
           || in_range(cp, 0x2F800, 0x2FA1F) || in_range(cp, 0x3005, 0x3007) /* 々 〆 〇 */
           || in_range(cp, 0x3040, 0x30FF)                                 /* Hiragana, Katakana */
           || in_range(cp, 0x31F0, 0x31FF)                                 /* Katakana ext. */
           || in_range(cp, 0xAC00, 0xD7A3)                                 /* Hangul syllables */
           || in_range(cp, 0x1100, 0x11FF)                                 /* Hangul jamo */
           || in_range(cp, 0x3130, 0x318F) || in_range(cp, 0x0E00, 0x0EFF) /* Thai, Lao */
           || in_range(cp, 0x1000, 0x109F)                                 /* Myanmar */
           || in_range(cp, 0x1780, 0x17FF)                                 /* Khmer */
           || in_range(cp, 0x0F00, 0x0FFF);                                /* Tibetan */
}

enum nd_char_class nd_char_classify(uint32_t cp)
{
    const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);
    switch (p->category) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
    case UTF8PROC_CATEGORY_MC: return is_cjk_script(cp) ? ND_CHAR_CJK : ND_CHAR_WORD;
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
    case UTF8PROC_CATEGORY_SM:
    case UTF8PROC_CATEGORY_SC:
    case UTF8PROC_CATEGORY_SK:
    case UTF8PROC_CATEGORY_SO: return ND_CHAR_PUNCT;
    default: return ND_CHAR_SPACE;
    }
}

static bool is_dropped_mark(uint32_t cp)
{
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_ME;
}

/* Computes the mapping of cp into out[ND_NORM_MAX]; returns its length. */
unsigned nd_normalizer_map_slow(uint32_t cp, uint32_t out[ND_NORM_MAX])
{
    utf8proc_int32_t dec[ND_NORM_MAX];
    int boundclass = UTF8PROC_BOUNDCLASS_START;
    utf8proc_ssize_t n;

    if (in_range(cp, 0xAC00, 0xD7A3)) { /* NFKC keeps Hangul syllables */
        out[0] = ((uint32_t)ND_CHAR_CJK << 24) | cp;
        return 1;
    }
    n = utf8proc_decompose_char(
        (utf8proc_int32_t)cp, dec, ND_NORM_MAX,
        UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT | UTF8PROC_CASEFOLD | UTF8PROC_IGNORE, &boundclass);
    if (n < 0) /* unassigned or invalid: treat as a separator */
        n = 0, dec[n++] = ' ';
    if (n > ND_NORM_MAX)
        n = ND_NORM_MAX;
    unsigned len = 0;
    for (utf8proc_ssize_t i = 0; i < n; i++) {
        uint32_t c = (uint32_t)dec[i];
        if (is_dropped_mark(c))
            continue;
        out[len++] = ((uint32_t)nd_char_classify(c) << 24) | c;
    }
    return len;
}

int nd_normalizer_create(nd_normalizer **out)
{
    nd_normalizer *n = malloc(sizeof(*n));
    if (!n)
        return -ENOMEM;
    n->pool_len = 0;
    for (uint32_t cp = 0; cp < BMP_SIZE; cp++) {
        uint32_t seq[ND_NORM_MAX];
        unsigned len = (cp >= 0xD800 && cp <= 0xDFFF) ? 0 : nd_normalizer_map_slow(cp, seq);
        if (len == 1) {
            n->table[cp] = seq[0];
            continue;
        }
        if (n->pool_len + len > POOL_MAX) { /* cannot happen with Unicode 15 */
            free(n);
            return -ENOMEM;
        }
        n->table[cp] = MULTI_FLAG | (len << 24) | n->pool_len;
        for (unsigned i = 0; i < len; i++)
            n->pool[n->pool_len++] = seq[i];
    }
    *out = n;
    return 0;
}

void nd_normalizer_destroy(nd_normalizer *n)
{
    free(n);
}
