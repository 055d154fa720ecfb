/* hangul.h - Hangul jamo and syllables, as Unicode's canonical composition
 * defines them (Unicode 15, section 3.12): the predicates and the two
 * compositions (L + V -> LV, LV + T -> LVT) that the fingerprint's and the
 * sketch's readers apply to decomposed Korean text. Header only; pure. */
#ifndef ND_HANGUL_H
#define ND_HANGUL_H

#include <stdbool.h>
#include <stdint.h>

#define HANGUL_S 0xAC00u /* first syllable */
#define HANGUL_L 0x1100u /* first leading jamo */
#define HANGUL_V 0x1161u /* first vowel jamo */
#define HANGUL_T 0x11A7u /* one before the first trailing jamo */
#define HANGUL_NV 21u
#define HANGUL_NT 28u
#define HANGUL_NS 11172u

static inline bool is_jamo_l(uint32_t cp)
{
    return cp >= HANGUL_L && cp < HANGUL_L + 19;
}
static inline bool is_jamo_v(uint32_t cp)
{
    return cp >= HANGUL_V && cp < HANGUL_V + HANGUL_NV;
}
static inline bool is_jamo_t(uint32_t cp)
{
    return cp > HANGUL_T && cp < HANGUL_T + HANGUL_NT;
}
/* An LV syllable: one without a trailing jamo, which a T jamo may complete. */
static inline bool is_lv(uint32_t cp)
{
    return cp >= HANGUL_S && cp < HANGUL_S + HANGUL_NS && (cp - HANGUL_S) % HANGUL_NT == 0;
}
/* The LV syllable of leading jamo l and vowel jamo v (is_jamo_l, is_jamo_v). */
static inline uint32_t hangul_compose_lv(uint32_t l, uint32_t v)
{
    return HANGUL_S + ((l - HANGUL_L) * HANGUL_NV + (v - HANGUL_V)) * HANGUL_NT;
}
/* The LVT syllable of LV syllable lv and trailing jamo t (is_lv, is_jamo_t). */
static inline uint32_t hangul_compose_lvt(uint32_t lv, uint32_t t)
{
    return lv + (t - HANGUL_T);
}

#endif
