/* fp_tune.c - `neardup fingerprint --jsonl` with explicit parameters, used
 * with ../shared/eval/score.py to choose the fingerprint's defaults.
 *
 *   fp_tune [wN=F] [cN=F] [tfpow=F] [tfcap=N] [urls=0|1]
 * wN: weight of token n-grams holding a word (N = 1..4), cN: of CJK-only
 * n-grams; unset ones keep their defaults (see nd_fp_params_default). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fingerprint_stream.h"
#include "fingerprint_tuning.h"

static int set_param(nd_fp_params *p, const char *arg)
{
    const char *eq = strchr(arg, '=');
    if (!eq)
        return -1;
    const char *v = eq + 1;
    if ((arg[0] == 'w' || arg[0] == 'c') && arg[1] >= '1' && arg[1] <= '4' && eq == arg + 2) {
        float *w = arg[0] == 'w' ? p->w_word : p->w_cjk;
        w[arg[1] - '0'] = strtof(v, NULL);
        return 0;
    }
    if (strncmp(arg, "tfpow=", 6) == 0)
        return p->tf_pow = strtof(v, NULL), 0;
    if (strncmp(arg, "tfcap=", 6) == 0)
        return p->tf_cap = atoi(v), 0;
    if (strncmp(arg, "urls=", 5) == 0)
        return p->strip_urls = atoi(v), 0;
    return -1;
}

int main(int argc, char **argv)
{
    nd_fp_params p;
    nd_fp_params_default(&p);
    for (int i = 1; i < argc; i++) {
        if (set_param(&p, argv[i]) < 0) {
            fprintf(stderr, "fp_tune: bad parameter %s\n", argv[i]);
            return 2;
        }
    }
    nd_fingerprinter *fp = NULL;
    if (nd_fingerprinter_create_tuned(&fp, &p) < 0)
        return 1;
    int rc = nd_fingerprint_stream(fp, stdin, stdout);
    nd_fingerprinter_destroy(fp);
    return rc < 0 ? 1 : 0;
}
