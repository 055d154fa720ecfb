/* fp_tokens_check.c - the fingerprint from the sketch's tokens
 * (nd_sketch_fp_tokens() + nd_fingerprint_tokens()) against nd_fingerprint(),
 * over JSON lines {"id":..,"text":..}:
 *
 *   fp_tokens_check FILE.jsonl > out.jsonl
 *
 * Writes the lines `neardup fingerprint --jsonl` writes (same fields, same
 * order), computed from the tokens of nd_sketch_query() (the server's
 * /check-original path), so the two outputs' sha256 can be compared; checks
 * on every line that nd_sketch_text()'s tokens give the same, and that
 * nd_fingerprint() agrees. Prints the number of lines that differ on stderr
 * and exits 1 if any does. */
#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fingerprint.h"
#include "sketch.h"

static int from_tokens(const nd_fingerprinter *fp, nd_fp_scratch *fs, const nd_sketcher *sk,
                       nd_sk_scratch *ss, const char *t, size_t n, int query,
                       nd_fingerprint_result *r)
{
    nd_anchors a[2];
    nd_sketch one;
    int rc = query ? nd_sketch_query(sk, ss, t, n, a, ND_ANCHORS_QUERY, NULL)
                   : nd_sketch_text(sk, ss, t, n, &one, a, ND_ANCHORS_STORE, NULL);
    if (rc < 0)
        return rc;
    nd_fp_tokens tk;
    if ((rc = nd_sketch_fp_tokens(ss, &tk)) < 0)
        return rc;
    return nd_fingerprint_tokens(fp, fs, &tk, r);
}

int main(int argc, char **argv)
{
    FILE *in = argc > 1 ? fopen(argv[1], "r") : stdin;
    nd_fingerprinter *fp;
    nd_fp_scratch *fs;
    nd_sketcher *sk;
    nd_sk_scratch *ss;
    if (!in || nd_fingerprinter_create(&fp) < 0 || nd_fp_scratch_create(&fs) < 0 ||
        nd_sketcher_create(&sk) < 0 || nd_sk_scratch_create(&ss) < 0) {
        fprintf(stderr, "fp_tokens_check: cannot start\n");
        return 2;
    }
    char *line = NULL;
    size_t cap = 0, lines = 0, differ = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, in)) > 0) {
        json_error_t jerr;
        json_t *d = json_loadb(line, (size_t)len, JSON_ALLOW_NUL, &jerr);
        json_t *id = d ? json_object_get(d, "id") : NULL, *text = d ? json_object_get(d, "text") : NULL;
        if (!json_is_string(text)) {
            json_decref(d);
            continue;
        }
        const char *t = json_string_value(text);
        size_t n = json_string_length(text);
        nd_fingerprint_result q, s, f;
        int rq = from_tokens(fp, fs, sk, ss, t, n, 1, &q);
        int rs = from_tokens(fp, fs, sk, ss, t, n, 0, &s);
        int rf = nd_fingerprint(fp, fs, t, n, &f);
        lines++;
        bool same = rq == rf && rs == rf &&
                    (rf < 0 || (q.simhash == f.simhash && q.chars == f.chars &&
                                q.features == f.features && s.simhash == f.simhash &&
                                s.chars == f.chars && s.features == f.features));
        if (!same) {
            differ++;
            fprintf(stderr, "differs: %s (%d %d %d)\n", id ? json_string_value(id) : "?", rq, rs,
                    rf);
        }
        json_t *res = json_object();
        json_object_set(res, "id", id ? id : json_null());
        if (rq < 0) {
            json_object_set_new(res, "error", json_string(rq == -EILSEQ ? "text is not valid UTF-8"
                                                                        : strerror(-rq)));
        } else {
            char hex[17];
            nd_simhash_format(q.simhash, hex);
            json_object_set_new(res, "simhash", json_string(hex));
            json_object_set_new(res, "chars", json_integer(q.chars));
            json_object_set_new(res, "features", json_integer(q.features));
        }
        char *out = json_dumps(res, JSON_COMPACT | JSON_ENSURE_ASCII);
        puts(out);
        free(out);
        json_decref(res);
        json_decref(d);
    }
    fprintf(stderr, "fp_tokens_check: %zu lines, %zu differ\n", lines, differ);
    free(line);
    nd_sk_scratch_destroy(ss);
    nd_sketcher_destroy(sk);
    nd_fp_scratch_destroy(fs);
    nd_fingerprinter_destroy(fp);
    return differ ? 1 : 0;
}
