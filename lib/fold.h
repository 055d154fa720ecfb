/* fold.h - what the reader-equivalence folds read differently, and the
 * word-level look-alike fold.
 *
 * The normalizer (normalizer.h) folds, code point by code point, Traditional
 * Han characters into Simplified ones (OpenCC's t2s character table) and
 * drops or blanks characters that render as nothing or as a space. The
 * look-alike fold is word-level (a letter's reading depends on the other
 * letters of its word), so it runs before the normalizer, into a scratch
 * copy of the text with code points replaced one for one (code-point
 * offsets unchanged). proto/fingerprint.md specifies every fold. */
#ifndef ND_FOLD_H
#define ND_FOLD_H

#include <stddef.h>
#include <stdint.h>

struct nd_normalizer;

/* What a text's reading changed, by kind (a plain value). */
typedef struct nd_integrity {
    uint32_t invisible;   /* characters that render as nothing or a blank: dropped, or a space */
    uint32_t lookalike;   /* letters read as their look-alike in another script */
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

/* The look-alike fold (proto/fingerprint.md, "Look-alike letters"). A word
 * is a run of code points that are letters, marks or digits (or dropped by
 * the normalizer). Each letter of the Latin, Cyrillic, Greek or Armenian
 * script is unambiguous, or confusable when a letter of another of these
 * scripts shares its UTS #39 skeleton (nd_normalizer.lk). A word's script
 * is that of most of its unambiguous letters (a tie: none); a word without
 * any takes the text's dominant script (most unambiguous letters over the
 * whole text; a tie goes to the lower of Latin, Cyrillic, Greek, Armenian;
 * none when the text has no unambiguous letter), but only when each of its
 * letters of these scripts is of that script or has a twin in it. In a word
 * with a script, each confusable letter of another script is replaced by
 * its twin in the word's script, when it has one.
 *
 * Only a text that may hold both a Latin letter (an ASCII letter or a lead
 * byte C3..C9) and a Greek, Cyrillic or Armenian one (lead byte CD..D6) is
 * read; any other is returned as is, with a cheap byte scan.
 *
 * Sets *out and *out_len to the text to read: text itself when nothing is
 * replaced (or when the text is not valid UTF-8: the tokenizer refuses it),
 * else *buf, a caller-owned buffer of *cap bytes that is grown with
 * realloc() when needed (free it with free()). Code points are replaced one
 * for one, so code-point offsets are those of text. *lookalike gets the
 * number of letters replaced. Returns 0, or -ENOMEM (outputs untouched). */
int nd_fold_lookalikes(const struct nd_normalizer *n, const char *text, size_t len, char **buf,
                       size_t *cap, const char **out, size_t *out_len, uint32_t *lookalike);

#endif
