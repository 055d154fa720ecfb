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

#include <stdint.h>

/* What a text's reading changed, by kind (a plain value). */
typedef struct nd_integrity {
    uint32_t
        invisible; /* characters that render as nothing or as a blank, dropped or read as a space */
    uint32_t lookalike;   /* letters read as their look-alike in another script */
    uint32_t traditional; /* Traditional characters read as Simplified */
    uint32_t han;         /* Han characters read (to judge the script: traditional*20 >= han) */
} nd_integrity;

#endif
