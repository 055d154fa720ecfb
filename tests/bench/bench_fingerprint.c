/* bench_fingerprint.c - fingerprint throughput on one core.
 *
 *   bench_fingerprint [CORPUS.jsonl[.gz]] [--passes N]
 *
 * Reads the evaluation corpus (default ../shared/eval/data/corpus.jsonl.gz
 * beside the source tree), splits it by "lang", and for each language times
 * nd_fingerprint() over every document, next to a same-run baseline: XXH3-64
 * over each whole document (a memory-speed floor no fingerprint can beat).
 * Each figure is the best of N passes. Prints MB/s, µs per document and the
 * ratio to the baseline; the last line sums it up. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "fingerprint.h"

typedef struct doc_set {
    char **text;
    size_t *len;
    size_t n, cap, bytes;
} doc_set;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int doc_set_add(doc_set *d, const char *text, size_t len)
{
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 1024;
        char **t = realloc(d->text, cap * sizeof(*t));
        if (!t)
            return -ENOMEM;
        d->text = t;
        size_t *l = realloc(d->len, cap * sizeof(*l));
        if (!l)
            return -ENOMEM;
        d->len = l;
        d->cap = cap;
    }
    if (!(d->text[d->n] = malloc(len ? len : 1)))
        return -ENOMEM;
    memcpy(d->text[d->n], text, len);
    d->len[d->n++] = len;
    d->bytes += len;
    return 0;
}

static FILE *open_corpus(const char *path, int *is_pipe)
{
    size_t n = strlen(path);
    *is_pipe = n > 3 && strcmp(path + n - 3, ".gz") == 0;
    if (!*is_pipe)
        return fopen(path, "r");
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "gzip -dc '%s'", path);
    return popen(cmd, "r");
}

static int load(const char *path, doc_set *zh, doc_set *en)
{
    int is_pipe;
    FILE *f = open_corpus(path, &is_pipe);
    if (!f)
        return -errno;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        json_t *o = json_loads(line, 0, NULL);
        const char *lang = json_string_value(json_object_get(o, "lang"));
        json_t *text = json_object_get(o, "text");
        if (lang && json_is_string(text)) {
            doc_set *d = strcmp(lang, "zh") == 0 ? zh : en;
            doc_set_add(d, json_string_value(text), json_string_length(text));
        }
        json_decref(o);
    }
    free(line);
    is_pipe ? pclose(f) : fclose(f);
    return 0;
}

/* Best-of-passes seconds for fingerprinting (or hashing) every document. */
static double time_pass(const doc_set *d, const nd_fingerprinter *fp, nd_fp_scratch *s, int passes,
                        uint64_t *sink)
{
    double best = 1e30;
    for (int p = 0; p < passes; p++) {
        double t0 = now();
        for (size_t i = 0; i < d->n; i++) {
            if (fp) {
                nd_fingerprint_result r;
                if (nd_fingerprint(fp, s, d->text[i], d->len[i], &r) == 0)
                    *sink ^= r.simhash;
            } else {
                *sink ^= XXH3_64bits(d->text[i], d->len[i]);
            }
        }
        double t = now() - t0;
        if (t < best)
            best = t;
    }
    return best;
}

static double report(const char *lang, const doc_set *d, const nd_fingerprinter *fp,
                     nd_fp_scratch *s, int passes)
{
    uint64_t sink = 0;
    time_pass(d, fp, s, 1, &sink); /* warm the scratch and the caches */
    double t_fp = time_pass(d, fp, s, passes, &sink);
    double t_base = time_pass(d, NULL, NULL, passes, &sink);
    double mb = (double)d->bytes / 1e6;
    printf("%s: docs=%zu avg_bytes=%.0f fingerprint=%.1f MB/s (%.2f us/doc) "
           "xxh3_baseline=%.0f MB/s ratio=%.4f (sink %016llx)\n",
           lang, d->n, (double)d->bytes / (double)d->n, mb / t_fp, t_fp * 1e6 / (double)d->n,
           mb / t_base, t_base / t_fp, (unsigned long long)sink);
    return mb / t_fp;
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    int passes = 5;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--passes") == 0 && i + 1 < argc)
            passes = atoi(argv[++i]);
        else
            path = argv[i];
    }
    char def[4096];
    if (!path) {
        const char *root = getenv("ND_SOURCE_ROOT");
        snprintf(def, sizeof(def), "%s/../shared/eval/data/corpus.jsonl.gz", root ? root : ".");
        path = def;
    }
    doc_set zh = {0}, en = {0};
    if (load(path, &zh, &en) < 0 || zh.n + en.n == 0) {
        fprintf(stderr, "bench_fingerprint: cannot read %s\n", path);
        return 1;
    }
    nd_fingerprinter *fp = NULL;
    nd_fp_scratch *s = NULL;
    if (nd_fingerprinter_create(&fp) < 0 || nd_fp_scratch_create(&s) < 0)
        return 1;
    printf("fingerprint %s, one thread, best of %d passes\n", ND_FINGERPRINT_VERSION, passes);
    double zh_mbs = zh.n ? report("zh", &zh, fp, s, passes) : 0;
    double en_mbs = en.n ? report("en", &en, fp, s, passes) : 0;
    printf("fingerprint: zh_mbps=%.1f en_mbps=%.1f\n", zh_mbs, en_mbs);
    nd_fp_scratch_destroy(s);
    nd_fingerprinter_destroy(fp);
    return 0;
}
