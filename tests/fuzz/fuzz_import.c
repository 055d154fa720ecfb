/* fuzz_import - the day-one backfill (the originality workflow: neardup import and POST
 * /import): any bytes as an archive of JSON lines, imported into a new
 * memory store through the real registry, then imported again.
 *
 * Invariants: the import of a memory store always completes (0); every
 * non-blank line is counted once: imported + existing + duplicates +
 * errors = lines; one report per duplicate and per refused line, with a
 * line number in 1..lines, each number at most once, a refusal with a code
 * and a message, a duplicate with its id; the store gains exactly the
 * imported documents, and a detection is committed for each duplicate
 * with a source; importing the same bytes again registers nothing new
 * (what was imported or existing is existing). The registry and store are
 * the process's, so an input also meets earlier inputs' documents. And registered_at's
 * parser: an integer is taken as it is when >= 0; an accepted RFC 3339
 * string starts with a four-digit year, '-', and lies in 0000..9999. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backfill.h"
#include "config.h"
#include "fuzz_util.h"
#include "import.h"
#include "registry.h"
#include "store.h"
#include "store_memory.h"

#define MAX_LINES 4096

typedef struct seen {
    uint64_t lines; /* physical lines: what a report's number counts */
    uint64_t dups, errs, detections;
    uint8_t reported[MAX_LINES + 1];
} seen;

static void report(void *arg, const nd_import_event *ev)
{
    seen *s = arg;
    FUZZ_CHECK(ev->line >= 1 && ev->line <= s->lines, "line %llu of %llu",
               (unsigned long long)ev->line, (unsigned long long)s->lines);
    if (ev->line <= MAX_LINES) {
        FUZZ_CHECK(!s->reported[ev->line], "line %llu reported twice",
                   (unsigned long long)ev->line);
        s->reported[ev->line] = 1;
    }
    if (ev->duplicate) {
        s->dups++;
        FUZZ_CHECK(ev->id && ev->id_len > 0, "a duplicate without its id");
        s->detections += ev->source != NULL;
    } else {
        s->errs++;
        FUZZ_CHECK(ev->code && *ev->code && ev->message && *ev->message, "refusal without words");
    }
}

/* Non-blank lines (what the summary counts); *physical: all of them (what
 * a report's line number counts). */
static uint64_t count_lines(const uint8_t *d, size_t n, uint64_t *physical)
{
    uint64_t lines = 0;
    *physical = 0;
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        bool blank = true;
        while (j < n && d[j] != '\n') {
            if (d[j] != ' ' && d[j] != '\t' && d[j] != '\r')
                blank = false;
            j++;
        }
        lines += !blank;
        ++*physical;
        i = j + 1;
    }
    return lines;
}

static void check_times(const uint8_t *data, size_t size)
{
    int64_t us;
    int64_t v = 0;
    memcpy(&v, data, size < 8 ? size : 8);
    int rc = nd_import_parse_time(NULL, 0, true, v, &us);
    /* 1 us after the epoch .. 9999-12-31T23:59:59.999999Z, nothing else. */
    const int64_t latest = 253402300799999999LL;
    FUZZ_CHECK(v > 0 && v <= latest ? rc == 0 && us == v : rc < 0, "integer %lld", (long long)v);
    const char *s = (const char *)data;
    if (nd_import_parse_time(s, size, false, 0, &us) == 0) {
        FUZZ_CHECK(size >= 10 && s[4] == '-', "accepted a time without a date");
        for (int i = 0; i < 4; i++)
            FUZZ_CHECK(s[i] >= '0' && s[i] <= '9', "year digit %d", i);
        FUZZ_CHECK(us > 0 && us <= latest, "time %lld out of range", (long long)us);
    }
}

/* Made once: what the imports share, and the registry and store every
 * input is imported into (so that an input also meets earlier inputs'
 * documents; the invariants are about what each import adds). */
static nd_fingerprinter *fp;
static nd_sketcher *sk;
static nd_store *st;
static nd_registry *reg;
static nd_config cfg;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    nd_config_defaults(&cfg);
    nd_registry_options ro = {.max_matches = cfg.max_matches};
    FUZZ_CHECK(nd_fingerprinter_create(&fp) == 0 && nd_sketcher_create(&sk) == 0 &&
                   nd_store_memory_open(&st) == 0 && nd_registry_create(&reg, st, &ro) == 0,
               "setup");
    nd_registry_set_loaded(reg);
    return 0;
}

static void import_once(const uint8_t *data, size_t size, uint64_t lines, uint64_t physical,
                        nd_import_summary *sum, seen *s)
{
    nd_import_params p;
    nd_import_params_init(&p, &cfg);
    p.detection = nd_backfill_detection;
    p.fp = fp;
    p.sk = sk;
    memset(s, 0, sizeof(*s));
    s->lines = physical;
    int rc = nd_import_run(reg, st, (const char *)data, size, &p, report, s, sum);
    FUZZ_CHECK(rc == 0, "import of a memory store failed: %d", rc);
    FUZZ_CHECK(sum->lines == lines, "%llu lines counted, %llu in the input",
               (unsigned long long)sum->lines, (unsigned long long)lines);
    FUZZ_CHECK(sum->imported + sum->existing + sum->duplicates + sum->errors == lines,
               "counts do not add up");
    FUZZ_CHECK(sum->duplicates == s->dups && sum->errors == s->errs, "reports do not match");
    FUZZ_CHECK(sum->detections == s->detections, "%llu detections, %llu duplicates with a source",
               (unsigned long long)sum->detections, (unsigned long long)s->detections);
}

static int visit_count(void *arg, const nd_record *rec)
{
    (void)rec;
    (*(uint64_t *)arg)++;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_times(data, size);
    uint64_t physical, lines = count_lines(data, size, &physical);
    if (physical > MAX_LINES)
        return 0;
    static seen s1, s2;
    nd_import_summary a, b;
    int64_t before = nd_store_count(st);
    import_once(data, size, lines, physical, &a, &s1);
    FUZZ_CHECK(nd_store_count(st) - before == (int64_t)a.imported, "%lld stored, %llu imported",
               (long long)(nd_store_count(st) - before), (unsigned long long)a.imported);
    import_once(data, size, lines, physical, &b, &s2);
    FUZZ_CHECK(b.imported == 0 && b.existing >= a.imported + a.existing,
               "again: %llu imported, %llu existing (first: %llu + %llu)",
               (unsigned long long)b.imported, (unsigned long long)b.existing,
               (unsigned long long)a.imported, (unsigned long long)a.existing);
    uint64_t scanned = 0;
    if (a.imported && nd_store_count(st) < 2000) { /* the count agrees with the records */
        nd_store_scan(st, visit_count, &scanned);
        FUZZ_CHECK((int64_t)scanned == nd_store_count(st), "scan %llu, count %lld",
                   (unsigned long long)scanned, (long long)nd_store_count(st));
    }
    return 0;
}
