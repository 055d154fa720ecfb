/* fold.h - what the reader-equivalence folds read differently, and the
 * folds that run before the normalizer.
 *
 * The normalizer (normalizer.h) folds, code point by code point, Traditional
 * Han characters into Simplified ones (OpenCC's t2s character table) and
 * drops or blanks characters that render as nothing or as a space. Two
 * folds depend on a code point's neighbours, so they run before the
 * normalizer, into a scratch copy of the text with as many code points:
 * text under a directional override is put in reading order, a reading in
 * brackets after Han characters (原(yuán)创(chuàng)) is dropped, and
 * look-alike letters are replaced one for one (a letter's reading depends
 * on the other letters of its word). proto/fingerprint.md specifies every
 * fold. */
#ifndef ND_FOLD_H
#define ND_FOLD_H

#include <stddef.h>
#include <stdint.h>

struct nd_normalizer;

/* What a text's reading changed, by kind (a plain value). */
typedef struct nd_integrity {
    uint32_t invisible;   /* characters that render as nothing or a blank: dropped, or a space */
    uint32_t lookalike;   /* letters read as a look-alike (nd_fold_lookalikes(): swaps) */
    uint32_t annotation;  /* readings in brackets after Han characters, dropped (nd_fold_text()) */
    uint32_t reordered;   /* code points read in another order under an override (nd_fold_text()) */
    uint32_t traditional; /* Traditional characters read as Simplified */
    uint32_t han;         /* Han characters read (to judge the script: traditional*20 >= han) */
} nd_integrity;

/* The Chinese script a text is written in, as an answer reports it:
 * "traditional" when at least one Han character in 20 was read from its
 * Traditional form, "simplified" when it has other Han characters, NULL
 * when it has none. A static string. */
static inline const char *nd_integrity_script(const nd_integrity *in)
{
    if (in->han == 0)
        return NULL;
    return (uint64_t)in->traditional * 20 >= in->han ? "traditional" : "simplified";
}

/* The folds before the normalizer (proto/fingerprint.md, step 0b).
 *
 * Overrides: the run after an RLO (U+202E), up to the PDF that closes it
 * (embeddings and overrides opened inside it are closed by their own), a
 * PDI or the end of its paragraph, is shown reversed: its code points are
 * reversed, but for each stretch from a right-to-left letter (bidi class R
 * or AL) to the last one before a left-to-right letter (L), which its
 * reader reads from the right anyway. In a run after an LRO (U+202D), only
 * those stretches are reversed. Nested overrides move with the run that
 * holds them. The overrides of a run that changed (its own and the nested
 * ones) become embeddings of their direction (RLE, LRE), so the fold is
 * idempotent. Counted by nd_fold_text() only (*reordered: the code points
 * of the runs that changed, nested overrides included, the override that
 * opens a run not). Embeddings (RLE, LRE) and isolates (RLI, LRI, FSI)
 * are not overrides: they are read as they are and count 0, and so does a
 * run that reads the same either way (right-to-left words under an RLO).
 *
 * Look-alike letters. A word is a run of code points that are letters,
 * marks or digits (or dropped by the normalizer). A Latin letter that a
 * reader reads as an ASCII letter (nd_normalizer.lk_base_cp: its UTS #39
 * skeleton is that letter, or it is a small capital; not the letters of
 * living orthographies, and the dotless i only in a text without a Turkic
 * letter ğ ş İ ə ә) is read as that letter first, in any word. Then each
 * letter of the Latin, Cyrillic, Greek or Armenian script is unambiguous,
 * or confusable when a letter of another of these scripts shares its UTS
 * #39 skeleton (nd_normalizer.lk). A word's script is that of most of its
 * unambiguous letters (a tie: none); a word without any takes the text's
 * dominant script (most unambiguous letters over the whole text; a tie
 * goes to the lower of Latin, Cyrillic, Greek, Armenian; none when the
 * text has no unambiguous letter), but only when each of its letters of
 * these scripts is of that script or has a twin in it. In a word with a
 * script, each confusable letter of another script is replaced by its twin
 * in the word's script, when it has one.
 *
 * Counted (*lookalike): letters read as an ASCII letter, letters replaced
 * in words holding letters of two scripts; letters replaced in words of one
 * script only when some word of the text mixes scripts (TOYOTA in an
 * untouched Russian text reads in Cyrillic, but is no swap), and ı read as
 * i only when another letter is counted (a Turkish name in English text).
 *
 * Only a text that may hold both a Latin letter (an ASCII letter or a lead
 * byte C3..C9) and a Greek, Cyrillic or Armenian one (lead byte CD..D6), or
 * may hold a look-alike within the Latin script or an override (a byte
 * pattern), is read; any other is returned as is, after a cheap byte scan.
 *
 * Sets *out and *out_len to the text to read: text itself when nothing
 * changes (or when the text is not valid UTF-8: the tokenizer refuses it),
 * else a part of *buf, a caller-owned buffer of *cap bytes that is grown
 * with realloc() when needed (free it with free()). The code points are as
 * many as those of text, and outside override runs at the same offsets.
 * *lookalike gets the number of letters counted. Returns 0, or -ENOMEM
 * (outputs as for an unchanged text). */
int nd_fold_lookalikes(const struct nd_normalizer *n, const char *text, size_t len, char **buf,
                       size_t *cap, const char **out, size_t *out_len, uint32_t *lookalike);

/* Every fold before the normalizer, in the order of proto/fingerprint.md:
 * overrides (step 0a), readings (step 0c), look-alike letters (step 0b, on
 * the text without its readings). What the fingerprint and the sketch read.
 *
 * Readings. A reading is an opening bracket ( [ （ ［ 【 right after a Han
 * character, then lowercase Hanyu Pinyin syllables (ü as ü, v or u with
 * U+0308; ɑ ɡ as a g), with tone marks (U+0300 U+0301 U+0304 U+030C,
 * precomposed or not), tone digits 1..5 or none, a space or an apostrophe
 * between two syllables, up to its closing bracket ) ） for ( （, ] ］ for
 * [ ［, 】 for 【, within 64 bytes. Without a tone, each run between
 * separators must be exactly one syllable and the closing bracket not be
 * followed by a letter or digit (`(locale)` spells lo-ca-le, `(hang)3` is
 * text). The interjections m n ng hm hng are syllables only with a tone
 * mark. A text's readings are dropped only when it holds at least 2 with a
 * tone or 8 in all (an English word in brackets that spells syllables, or
 * one gloss, stays text): each of their code points, brackets included,
 * becomes U+0300 (a mark step 2 drops, not counted as invisible), so the
 * code points keep their offsets and a passage maps to the text's own.
 * Only a text with an opening bracket is scanned past a byte scan, and only
 * its brackets after a Han character are read.
 *
 * Outputs as nd_fold_lookalikes(), but *out may hold readings dropped (and
 * *buf may grow to 7 bytes a byte of text); *annotation gets the readings
 * dropped, *reordered the code points of the override runs read in another
 * order (both not NULL). Returns 0 or -ENOMEM. */
int nd_fold_text(const struct nd_normalizer *n, const char *text, size_t len, char **buf,
                 size_t *cap, const char **out, size_t *out_len, uint32_t *lookalike,
                 uint32_t *annotation, uint32_t *reordered);

#endif
