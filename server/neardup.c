/* neardup.c - the command-line tool.
 *
 *   neardup fingerprint [FILE]          16 hex digits for the text in FILE or stdin
 *   neardup fingerprint --jsonl [FILE]  JSON lines in, JSON lines out
 *   neardup sketch --jsonl [FILE]       JSON lines in, sketches and anchors out
 *   neardup compare FILE_A FILE_B       the verdict figures of A (submitted) vs B
 *   neardup backup [--data DIR] DEST    consistent copy of a (running) store
 *   neardup import [--data DIR] FILE    load an archive of JSON lines (import.h)
 *   neardup version                     program and fingerprint versions */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "backfill.h"
#include "compare.h"
#include "fingerprint.h"
#include "fingerprint_stream.h"
#include "import.h"
#include "log.h"
#include "question.h"
#include "reply.h"
#include "registry.h"
#include "sketch.h"
#include "store.h"

#define DEFAULT_DATA_DIR "./data"
/* neardup import: how long the store gathers changes into one transaction
 * (nd_store_options.gather_ms). 1M documents: 2.0-2.5 s of system CPU
 * instead of 5.2-6.7 s, and record leaves in runs of ~10 pages instead of
 * ~1.4 (a cold start reads them in fewer, larger requests) */
#define IMPORT_GATHER_MS 250

/* Read by jemalloc (meson's default allocator; another allocator ignores
 * it) when the process starts: huge pages for the memory it hands out.
 * neardup import grows its indexes by inserts at random places in about a
 * million buckets, and on 4 KiB pages nearly every one missed the TLB:
 * 3M lines took 0.93-0.94x the wall and CPU time with it. And freed pages
 * are kept for reuse, never given back (a batch command: its store
 * changes and outgrown index buckets are freed and allocated again all
 * along, and on huge pages each one given back was a 2 MiB page zeroed
 * anew when touched again): 3M lines, two pairs, 0.97x the wall time and
 * 0.97-0.98x the CPU time. The daemon does not set it: its start-up places
 * the indexes on huge pages itself. */
const char *malloc_conf = "thp:always,dirty_decay_ms:-1,muzzy_decay_ms:-1";

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: neardup <command> [options]\n"
        "\n"
        "commands:\n"
        "  fingerprint [FILE]            print the 64-bit fingerprint of the text in\n"
        "                                FILE (or stdin) as 16 lowercase hex digits\n"
        "  fingerprint --jsonl [FILE]    read JSON lines {\"id\":..,\"text\":..}, write\n"
        "                                {\"id\":..,\"simhash\":..,\"chars\":N,\"features\":N}\n"
        "                                (or {\"id\":..,\"error\":..}) per line\n"
        "  sketch --jsonl [--anchors N|scaled] [FILE]\n"
        "                                read JSON lines {\"id\":..,\"text\":..}, write\n"
        "                                {\"id\",\"simhash\",\"chars\",\"mode\",\"shingles\",\n"
        "                                \"shift\",\"sketch\" (hex of the encoded sketch in\n"
        "                                the text's own mode),\"anchors\",\"sketch_alt\",\n"
        "                                \"anchors_alt\" (the other mode)} per line\n"
        "                                (N anchors per mode, default %d; scaled: as\n"
        "                                the server stores and probes, 16..64 by the\n"
        "                                mode's shingles)\n"
        "  compare [--min-resemblance R] [--min-containment C]\n"
        "          [--rewrite-verdict duplicate|review|ignore] FILE_A FILE_B\n"
        "                                the figures the server gives for A submitted\n"
        "                                against B registered, as POST /compare answers\n"
        "                                them (the same JSON): distance, resemblance,\n"
        "                                containment both ways, kind, integrity of each,\n"
        "                                passages on both sides (code points [start, end)\n"
        "                                of A, [source_start, source_end) of B); A is\n"
        "                                compared in B's mode\n"
        "  compare --jsonl [FILE]        the same per JSON line {\"text_a\",\"text_b\"}\n"
        "  backup [--data DIR] DEST      write a consistent copy of the store in DIR\n"
        "                                (default $NEARDUP_DATA or %s) into DEST;\n"
        "                                works while neardupd runs\n"
        "  import [--data DIR] [--threads N] [--no-progress] [--predate] FILE.jsonl[.gz]\n"
        "                                register an archive of JSON lines {\"id\",\"text\",\n"
        "                                \"account\",\"registered_at\",\"meta\",\"reprint\",\n"
        "                                \"whitelist\"} in registered_at order into the store\n"
        "                                in DIR (not while neardupd runs on it: POST /import\n"
        "                                then); prints a JSON line per duplicate and per\n"
        "                                refused line, then a summary; re-run after a kill\n"
        "                                to finish (ids already stored count as existing);\n"
        "                                into a store holding documents, a line is judged\n"
        "                                against all of them unless --predate (then only\n"
        "                                those before its registered_at: it may outrank\n"
        "                                them; each such registration is audited)\n"
        "  version                       print versions\n",
        ND_ANCHORS_QUERY, DEFAULT_DATA_DIR);
}

/* Reads all of f into a new buffer (caller frees). Returns NULL on error. */
static char *read_all(FILE *f, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *bigger = realloc(buf, cap * 2);
        if (!bigger) {
            free(buf);
            return NULL;
        }
        buf = bigger;
        cap *= 2;
    }
    if (buf && ferror(f)) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static int fingerprint_one(const nd_fingerprinter *fp, FILE *in, const char *name)
{
    size_t len = 0;
    char *text = read_all(in, &len);
    if (!text) {
        fprintf(stderr, "neardup: cannot read %s: %s\n", name, strerror(errno));
        return 1;
    }
    nd_fp_scratch *scratch = NULL;
    nd_fingerprint_result r;
    int rc = nd_fp_scratch_create(&scratch);
    if (rc == 0)
        rc = nd_fingerprint(fp, scratch, text, len, &r);
    nd_fp_scratch_destroy(scratch);
    free(text);
    if (rc < 0) {
        fprintf(stderr, "neardup: %s: %s\n", name,
                rc == -EILSEQ ? "text is not valid UTF-8" : strerror(-rc));
        return 1;
    }
    char hex[17];
    nd_simhash_format(r.simhash, hex);
    printf("%s\n", hex);
    return 0;
}

static int cmd_fingerprint(int argc, char **argv)
{
    int jsonl = 0;
    const char *path = NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--jsonl") == 0) {
            jsonl = 1;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "neardup fingerprint: unknown option %s\n", argv[i]);
            return 2;
        } else if (!path) {
            path = argv[i];
        } else {
            fprintf(stderr, "neardup fingerprint: one FILE at most\n");
            return 2;
        }
    }
    FILE *in = stdin;
    if (path && strcmp(path, "-") != 0 && !(in = fopen(path, "rb"))) {
        fprintf(stderr, "neardup: cannot open %s: %s\n", path, strerror(errno));
        return 1;
    }
    nd_fingerprinter *fp = NULL;
    int rc = nd_fingerprinter_create(&fp);
    if (rc < 0) {
        fprintf(stderr, "neardup: %s\n", strerror(-rc));
    } else if (jsonl) {
        rc = nd_fingerprint_stream(fp, in, stdout);
        if (rc < 0)
            fprintf(stderr, "neardup: %s\n", strerror(-rc));
    } else {
        rc = fingerprint_one(fp, in, path ? path : "stdin") ? -1 : 0;
    }
    nd_fingerprinter_destroy(fp);
    if (in != stdin)
        fclose(in);
    return rc < 0 ? 1 : 0;
}

/* Tools shared by sketch and compare. */
typedef struct sk_tools {
    nd_fingerprinter *fp;
    nd_fp_scratch *fps;
    nd_sketcher *sk;
    nd_sk_scratch *sks;
} sk_tools;

static int tools_create(sk_tools *t)
{
    memset(t, 0, sizeof(*t));
    int rc = nd_fingerprinter_create(&t->fp);
    if (rc == 0)
        rc = nd_fp_scratch_create(&t->fps);
    if (rc == 0)
        rc = nd_sketcher_create(&t->sk);
    if (rc == 0)
        rc = nd_sk_scratch_create(&t->sks);
    return rc;
}

static void tools_destroy(sk_tools *t)
{
    nd_sk_scratch_destroy(t->sks);
    nd_sketcher_destroy(t->sk);
    nd_fp_scratch_destroy(t->fps);
    nd_fingerprinter_destroy(t->fp);
}

static void hex_bytes(const uint8_t *b, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * n] = '\0';
}

/* One {"id","text"} line -> one output object (caller decrefs). */
static json_t *sketch_line(sk_tools *t, const char *line, size_t len, unsigned nanchors)
{
    json_error_t jerr;
    json_t *in = json_loadb(line, len, JSON_ALLOW_NUL, &jerr), *out = json_object();
    json_t *id = in ? json_object_get(in, "id") : NULL;
    json_t *text = in ? json_object_get(in, "text") : NULL;
    json_object_set(out, "id", id ? id : json_null());
    if (!json_is_string(text)) {
        json_object_set_new(out, "error", json_string(in ? "no \"text\" string" : jerr.text));
        json_decref(in);
        return out;
    }
    const char *s = json_string_value(text);
    size_t n = json_string_length(text);
    nd_fingerprint_result fr;
    static nd_sketch sketch[2];
    static nd_anchors anchors[2];
    int rc = nd_fingerprint(t->fp, t->fps, s, n, &fr);
    int mode = rc == 0 ? nd_sketch_text_modes(t->sk, t->sks, s, n, sketch, anchors, nanchors, NULL)
                       : rc;
    if (mode < 0) {
        json_object_set_new(
            out, "error",
            json_string(mode == -EILSEQ ? "text is not valid UTF-8" : strerror(-mode)));
        json_decref(in);
        return out;
    }
    char hex[17];
    nd_simhash_format(fr.simhash, hex);
    json_object_set_new(out, "simhash", json_string(hex));
    json_object_set_new(out, "chars", json_integer(fr.chars));
    json_object_set_new(out, "mode", json_integer(mode));
    for (int alt = 0; alt < 2; alt++) {
        const nd_sketch *sk = &sketch[alt ? !mode : mode];
        const nd_anchors *an = &anchors[alt ? !mode : mode];
        uint8_t enc[ND_SKETCH_ENCODED_MAX];
        char enchex[2 * ND_SKETCH_ENCODED_MAX + 1];
        size_t elen = nd_sketch_encode(sk, enc, sizeof(enc));
        hex_bytes(enc, elen, enchex);
        json_t *arr = json_array();
        for (uint32_t i = 0; i < an->n; i++)
            json_array_append_new(arr, json_integer(an->a[i]));
        if (!alt) {
            json_object_set_new(out, "shingles", json_integer(sk->shingles));
            json_object_set_new(out, "shift", json_integer(sk->shift));
        }
        json_object_set_new(out, alt ? "sketch_alt" : "sketch", json_string(enchex));
        json_object_set_new(out, alt ? "anchors_alt" : "anchors", arr);
    }
    json_decref(in);
    return out;
}

static int cmd_sketch(int argc, char **argv)
{
    const char *path = NULL;
    int jsonl = 0;
    unsigned nanchors = ND_ANCHORS_QUERY;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--jsonl") == 0) {
            jsonl = 1;
        } else if (strcmp(argv[i], "--anchors") == 0 && i + 1 < argc) {
            if (strcmp(argv[++i], "scaled") == 0) {
                nanchors = ND_ANCHORS_SCALED; /* as the server stores and probes */
            } else {
                nanchors = (unsigned)atoi(argv[i]);
                if (nanchors > ND_ANCHORS_MAX)
                    nanchors = ND_ANCHORS_MAX;
            }
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "neardup sketch: unknown option %s\n", argv[i]);
            return 2;
        } else if (!path) {
            path = argv[i];
        } else {
            fprintf(stderr, "neardup sketch: one FILE at most\n");
            return 2;
        }
    }
    if (!jsonl) {
        fprintf(stderr, "neardup sketch: only --jsonl is supported\n");
        return 2;
    }
    FILE *in = stdin;
    if (path && strcmp(path, "-") != 0 && !(in = fopen(path, "rb"))) {
        fprintf(stderr, "neardup: cannot open %s: %s\n", path, strerror(errno));
        return 1;
    }
    sk_tools t;
    int rc = tools_create(&t);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while (rc == 0 && (n = getline(&line, &cap, in)) >= 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            n--;
        if (n == 0)
            continue;
        json_t *o = sketch_line(&t, line, (size_t)n, nanchors);
        char *dump = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
        json_decref(o);
        if (!dump || fputs(dump, stdout) < 0 || fputc('\n', stdout) < 0)
            rc = -EIO;
        free(dump);
    }
    free(line);
    if (rc < 0)
        fprintf(stderr, "neardup sketch: %s\n", strerror(-rc));
    tools_destroy(&t);
    if (in != stdin)
        fclose(in);
    return rc < 0 ? 1 : 0;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "neardup: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    char *text = read_all(f, len);
    if (!text)
        fprintf(stderr, "neardup: cannot read %s: %s\n", path, strerror(errno));
    if (f != stdin)
        fclose(f);
    return text;
}

static void print_line(struct evbuffer *buf, nd_reply *w);

/* neardup compare --jsonl: a pair per line {"text_a","text_b"} in, the
 * answer of POST /compare (or {"error": ...}) per line out. */
static int compare_jsonl(const char *path, const nd_verdict_params *vp, const nd_rewrite_params *rw)
{
    FILE *in = stdin;
    if (path && strcmp(path, "-") != 0 && !(in = fopen(path, "rb"))) {
        fprintf(stderr, "neardup: cannot open %s: %s\n", path, strerror(errno));
        return 1;
    }
    sk_tools t;
    nd_pair_scratch *ps = NULL;
    static nd_anchors anchors[2];
    static nd_pair pair;
    struct evbuffer *buf = evbuffer_new();
    int rc = buf ? tools_create(&t) : -ENOMEM;
    if (rc == 0)
        rc = nd_pair_scratch_create(&ps);
    nd_question_tools qt = {.fp = t.fp, .sk = t.sk, .fps = t.fps, .sks = t.sks, .anchors = anchors};
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while (rc == 0 && (n = getline(&line, &cap, in)) >= 0) {
        json_error_t jerr;
        json_t *o = json_loadb(line, (size_t)n, JSON_ALLOW_NUL, &jerr);
        json_t *ja = json_object_get(o, "text_a"), *jb = json_object_get(o, "text_b");
        nd_reply w;
        nd_reply_init(&w, buf);
        int which = 0, prc = -EINVAL;
        if (json_is_string(ja) && json_is_string(jb))
            prc = nd_pair_compare(&qt, ps, json_string_value(ja), json_string_length(ja),
                                  json_string_value(jb), json_string_length(jb), vp, rw, &pair,
                                  &which);
        if (prc == 0) {
            nd_compare_write(&w, &pair);
        } else {
            nd_reply_object(&w);
            nd_reply_key(&w, "error");
            const char *msg = prc == -EINVAL   ? "text_a and text_b must be strings"
                              : prc == -EILSEQ ? (which ? "text_b is not valid UTF-8"
                                                        : "text_a is not valid UTF-8")
                                               : strerror(-prc);
            nd_reply_string(&w, msg, strlen(msg));
            nd_reply_object_end(&w);
        }
        json_decref(o);
        print_line(buf, &w);
        rc = prc == -ENOMEM ? prc : 0;
    }
    free(line);
    if (rc < 0)
        fprintf(stderr, "neardup compare: %s\n", strerror(-rc));
    nd_pair_scratch_destroy(ps);
    if (buf) {
        tools_destroy(&t);
        evbuffer_free(buf);
    }
    if (in != stdin)
        fclose(in);
    return rc < 0 ? 1 : 0;
}

static int cmd_compare(int argc, char **argv)
{
    const char *pa = NULL, *pb = NULL;
    int jsonl = 0;
    nd_verdict_params vp;
    nd_verdict_params_default(&vp);
    nd_rewrite_params rw;
    nd_rewrite_params_default(&rw);
    const nd_rewrite_params *rewrites = &rw; /* NULL: --rewrite-verdict ignore */
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--min-resemblance") == 0 && i + 1 < argc)
            vp.min_resemblance = atof(argv[++i]);
        else if (strcmp(argv[i], "--min-containment") == 0 && i + 1 < argc)
            vp.min_containment = atof(argv[++i]);
        else if (strcmp(argv[i], "--jsonl") == 0)
            jsonl = 1;
        else if (strcmp(argv[i], "--rewrite-verdict") == 0 && i + 1 < argc) {
            const char *v = argv[++i];
            if (strcmp(v, "ignore") == 0)
                rewrites = NULL; /* as the server's ignore */
            else if (strcmp(v, "duplicate") != 0 && strcmp(v, "review") != 0) {
                fprintf(stderr, "neardup compare: --rewrite-verdict duplicate|review|ignore\n");
                return 2;
            }
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "neardup compare: unknown option %s\n", argv[i]);
            return 2;
        } else if (!pa)
            pa = argv[i];
        else if (!pb)
            pb = argv[i];
        else {
            fprintf(stderr, "neardup compare: two files\n");
            return 2;
        }
    }
    if (jsonl && pb) {
        fprintf(stderr, "neardup compare --jsonl: one FILE at most\n");
        return 2;
    }
    if (jsonl)
        return compare_jsonl(pa, &vp, rewrites);
    if (!pa || !pb) {
        fprintf(stderr, "neardup compare: FILE_A FILE_B required\n");
        return 2;
    }
    size_t la = 0, lb = 0;
    char *a = read_file(pa, &la), *b = a ? read_file(pb, &lb) : NULL;
    sk_tools t;
    nd_pair_scratch *ps = NULL;
    static nd_anchors anchors[2];
    static nd_pair pair;
    int rc = a && b ? tools_create(&t) : -EIO;
    if (rc == 0)
        rc = nd_pair_scratch_create(&ps);
    if (rc == 0) {
        /* the server's code path (registry/pair.h, api/compare.h): the
         * same figures and the same bytes as POST /compare */
        nd_question_tools qt = {
            .fp = t.fp, .sk = t.sk, .fps = t.fps, .sks = t.sks, .anchors = anchors};
        int which;
        rc = nd_pair_compare(&qt, ps, a, la, b, lb, &vp, rewrites, &pair, &which);
        if (rc < 0)
            fprintf(stderr, "neardup compare: %s: %s\n", which == 1 ? pb : pa,
                    rc == -EILSEQ ? "text is not valid UTF-8" : strerror(-rc));
    }
    if (rc == 0) {
        struct evbuffer *buf = evbuffer_new();
        if (!buf)
            nd_die_oom("neardup compare");
        nd_reply w;
        nd_reply_init(&w, buf);
        nd_compare_write(&w, &pair);
        print_line(buf, &w);
        evbuffer_free(buf);
    }
    nd_pair_scratch_destroy(ps);
    if (a && b && rc != -EIO)
        tools_destroy(&t);
    free(a);
    free(b);
    return rc < 0 ? 1 : 0;
}

static int cmd_backup(int argc, char **argv)
{
    const char *data = getenv("NEARDUP_DATA");
    const char *dest = NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--data") == 0 && i + 1 < argc)
            data = argv[++i];
        else if (strncmp(argv[i], "--data=", 7) == 0)
            data = argv[i] + 7;
        else if (argv[i][0] != '-' && !dest)
            dest = argv[i];
        else {
            fprintf(stderr, "neardup backup: unexpected argument %s\n", argv[i]);
            return 2;
        }
    }
    if (!dest) {
        fprintf(stderr, "neardup backup: DEST is required\n");
        return 2;
    }
    if (!data || !*data)
        data = DEFAULT_DATA_DIR;
    char err[512] = "";
    int rc = nd_store_backup_path(data, dest, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "neardup backup: %s\n", err[0] ? err : strerror(-rc));
        return 1;
    }
    fprintf(stderr, "neardup backup: copied %s to %s\n", data, dest);
    return 0;
}

/* Prints the JSON value written into buf as one line on stdout. */
static void print_line(struct evbuffer *buf, nd_reply *w)
{
    if (nd_reply_finish(w) < 0)
        nd_die_oom("neardup import");
    fwrite(evbuffer_pullup(buf, -1), 1, evbuffer_get_length(buf), stdout);
    evbuffer_drain(buf, evbuffer_get_length(buf));
}

/* One JSON line on stdout per duplicate or refused line (as POST /import
 * lists them). arg: the line buffer. */
static void import_report(void *arg, const nd_import_event *ev)
{
    nd_reply w;
    nd_reply_init(&w, arg);
    nd_backfill_write_event(&w, ev);
    print_line(arg, &w);
}

static void import_load_progress(void *arg, uint64_t loaded, uint64_t total, uint64_t stale)
{
    (void)stale;
    if (arg)
        fprintf(arg, "\rloading the store: %llu of %llu documents ", (unsigned long long)loaded,
                (unsigned long long)total);
}

static int cmd_import(int argc, char **argv)
{
    const char *data = getenv("NEARDUP_DATA");
    const char *path = NULL;
    long threads = sysconf(_SC_NPROCESSORS_ONLN);
    int progress = -1; /* on a terminal */
    bool predate = false;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--data") == 0 && i + 1 < argc)
            data = argv[++i];
        else if (strncmp(argv[i], "--data=", 7) == 0)
            data = argv[i] + 7;
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atol(argv[++i]);
        else if (strcmp(argv[i], "--no-progress") == 0)
            progress = 0;
        else if (strcmp(argv[i], "--progress") == 0)
            progress = 1;
        else if (strcmp(argv[i], "--predate") == 0)
            predate = true;
        else if ((argv[i][0] != '-' || strcmp(argv[i], "-") == 0) && !path)
            path = argv[i];
        else {
            fprintf(stderr, "neardup import: unexpected argument %s\n", argv[i]);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "neardup import: FILE is required (- for standard input)\n");
        return 2;
    }
    if (threads < 0 || threads > 64) {
        fprintf(stderr, "neardup import: --threads takes 0 to 64\n");
        return 2;
    }
    if (!data || !*data)
        data = DEFAULT_DATA_DIR;
    if (progress < 0)
        progress = isatty(2);
    char err[512] = "";
    nd_import_input in;
    int rc = nd_import_input_open(&in, path, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "neardup import: %s\n", err);
        return 1;
    }
    /* Bulk: no fsync per commit; closing the store flushes once at the end
     * (a kill before that may lose a tail of commits, whole ones: re-run);
     * transactions of up to a quarter second of lines (gather_ms). */
    nd_store_options so;
    nd_store_options_default(&so);
    so.sync = false;
    so.max_batch = 16384;
    so.gather_ms = IMPORT_GATHER_MS;
    nd_store *st = NULL;
    rc = nd_store_open(&st, data, &so, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "neardup import: %s%s\n", err[0] ? err : strerror(-rc),
                rc == -EBUSY ? " (while neardupd runs on it, send the lines to POST /import)" : "");
        nd_import_input_close(&in);
        return 1;
    }
    if (nd_store_stream_seq(st) > 0) { /* a replica's: its peers would never see them */
        fprintf(stderr,
                "neardup import: %s is a replica's store (it applied a replication stream up to "
                "entry %llu): documents written here would not reach the other replicas; send "
                "the lines to POST /import of a running node instead\n",
                data, (unsigned long long)nd_store_stream_seq(st));
        nd_store_close(st);
        nd_import_input_close(&in);
        return 1;
    }
    struct evbuffer *line = evbuffer_new(); /* each line printed */
    if (!line)
        nd_die_oom("neardup import");
    nd_config cfg;
    nd_config_defaults(&cfg);
    nd_registry_options ro;
    nd_registry_options_from_config(&ro, &cfg);
    nd_registry *reg = NULL;
    rc = nd_registry_create(&reg, st, &ro);
    if (rc == 0) {
        rc = nd_registry_load(reg, import_load_progress, progress ? stderr : NULL, 250, NULL);
        if (progress)
            fputc('\n', stderr);
    }
    nd_import_summary sum = {0};
    if (rc < 0) {
        fprintf(stderr, "neardup import: cannot load the store in %s: %s\n", data,
                nd_registry_load_error(rc));
    } else {
        nd_import_params ip;
        nd_import_params_init(&ip, &cfg);
        ip.threads = (unsigned)threads;
        ip.progress = progress ? stderr : NULL;
        ip.detection = nd_backfill_detection;
        ip.predate = predate;
        ip.audit_client = "neardup import";
        rc = nd_import_run(reg, st, in.buf, in.len, &ip, import_report, line, &sum);
        if (rc < 0)
            fprintf(stderr, "neardup import: stopped: %s\n", strerror(-rc));
    }
    nd_registry_destroy(reg);
    nd_store_close(st); /* flushes: durable from here */
    nd_import_input_close(&in);
    double rate = sum.seconds > 0 ? (double)(sum.imported + sum.existing) / sum.seconds : 0;
    nd_reply w; /* the last line: {"summary":{...}} */
    nd_reply_init(&w, line);
    nd_reply_object(&w);
    nd_backfill_write_summary(&w, &sum, rc == 0);
    nd_reply_object_end(&w);
    print_line(line, &w);
    evbuffer_free(line);
    fprintf(stderr,
            "neardup import: %llu lines: %llu imported, %llu existing, %llu duplicates, %llu "
            "refused in %.1f s (%.0f docs/s)%s\n",
            (unsigned long long)sum.lines, (unsigned long long)sum.imported,
            (unsigned long long)sum.existing, (unsigned long long)sum.duplicates,
            (unsigned long long)sum.errors, sum.seconds, rate,
            rc == 0 ? "" : "; not finished: run it again");
    return rc < 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "fingerprint") == 0)
        return cmd_fingerprint(argc - 2, argv + 2);
    if (strcmp(cmd, "sketch") == 0)
        return cmd_sketch(argc - 2, argv + 2);
    if (strcmp(cmd, "compare") == 0)
        return cmd_compare(argc - 2, argv + 2);
    if (strcmp(cmd, "backup") == 0)
        return cmd_backup(argc - 2, argv + 2);
    if (strcmp(cmd, "import") == 0)
        return cmd_import(argc - 2, argv + 2);
    if (strcmp(cmd, "version") == 0) {
        printf("neardup %s\nfingerprint %s\nsketch %s\n", ND_PROGRAM_VERSION,
               ND_FINGERPRINT_VERSION, ND_SKETCH_VERSION);
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "neardup: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
