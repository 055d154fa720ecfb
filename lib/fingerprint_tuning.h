/* fingerprint_tuning.h - the fingerprint's parameters, exposed only to the
 * tuning tool (tests/bench/fp_tune.c) that chose the defaults by measurement
 * (the table in proto/fingerprint.md). Changing a default changes outputs:
 * bump ND_FINGERPRINT_VERSION. */
#ifndef ND_FINGERPRINT_TUNING_H
#define ND_FINGERPRINT_TUNING_H

/* The handle of fingerprint.h, declared here so that this header does not
 * depend on fingerprint.h (fingerprint.c defines what it declares). */
typedef struct nd_fingerprinter nd_fingerprinter;

#define ND_FP_MAX_N 4     /* longest token n-gram a feature may be */
#define ND_FP_TF_TABLE 64 /* term frequencies with a precomputed weight */

typedef struct nd_fp_params {
    /* Weight of a feature that is an n-gram of tokens, n = 1..ND_FP_MAX_N
     * (index 0 unused): w_word when it holds a word token, w_cjk when it is
     * made of CJK characters only. 0 disables that kind. */
    float w_word[ND_FP_MAX_N + 1];
    float w_cjk[ND_FP_MAX_N + 1];
    /* Term-frequency weighting: min(tf, tf_cap)^tf_pow; tf_cap 0 = no cap.
     * tf_pow 1 with no cap is raw TF, tf_pow 0 is binary. */
    float tf_pow;
    int tf_cap;
    int strip_urls; /* drop URLs, markdown images and link targets */
} nd_fp_params;

/* The parameters of ND_FINGERPRINT_VERSION. */
void nd_fp_params_default(nd_fp_params *p);

/* Like nd_fingerprinter_create(), with explicit parameters. */
int nd_fingerprinter_create_tuned(nd_fingerprinter **out, const nd_fp_params *p);

#endif
