/* fingerprint_tuning.h - the fingerprint's parameters, exposed only to the
 * tuning tool (tests/bench/fp_tune.c) that chose the defaults by measurement.
 * Changing a default changes outputs: bump ND_FINGERPRINT_VERSION. */
#ifndef ND_FINGERPRINT_TUNING_H
#define ND_FINGERPRINT_TUNING_H

#include "fingerprint.h"

#define ND_FP_MAX_N 4

enum nd_tf_mode {
    ND_TF_RAW = 0,    /* every occurrence adds the n-gram's weight */
    ND_TF_BINARY = 1, /* each distinct feature counts once */
    ND_TF_LOG = 2,    /* 1 + ln(tf) */
    ND_TF_SQRT = 3,   /* sqrt(tf) */
};

typedef struct nd_fp_params {
    float w_word[ND_FP_MAX_N + 1]; /* weight of an n-gram with a word token, by n */
    float w_cjk[ND_FP_MAX_N + 1];  /* weight of an n-gram of CJK characters, by n */
    int tf_mode;                   /* enum nd_tf_mode */
    int strip_urls;                /* drop URLs and markdown link targets */
} nd_fp_params;

/* The parameters of ND_FINGERPRINT_VERSION. */
void nd_fp_params_default(nd_fp_params *p);

/* Like nd_fingerprinter_create(), with explicit parameters. */
int nd_fingerprinter_create_tuned(nd_fingerprinter **out, const nd_fp_params *p);

#endif
