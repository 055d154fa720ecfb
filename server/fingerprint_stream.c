/* fingerprint_stream.c - JSON lines in, fingerprints out (see header). */
#include "fingerprint_stream.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Writes one output object as a line and flushes it. Steals obj. */
static int emit(json_t *obj, FILE *out)
{
    int rc = json_dumpf(obj, out, JSON_COMPACT | JSON_ENSURE_ASCII) == 0 ? 0 : -EIO;
    json_decref(obj);
    if (rc == 0 && (fputc('\n', out) == EOF || fflush(out) != 0))
        rc = -EIO;
    return rc;
}

static json_t *error_line(json_t *id, const char *msg)
{
    json_t *o = json_object();
    json_object_set(o, "id", id ? id : json_null());
    json_object_set_new(o, "error", json_string(msg));
    return o;
}

/* Fingerprints one input line; returns the output object (new reference). */
static json_t *process_line(const nd_fingerprinter *fp, nd_fp_scratch *scratch, const char *line,
                            size_t len)
{
    json_error_t jerr;
    json_t *in = json_loadb(line, len, JSON_ALLOW_NUL, &jerr);
    if (!in || !json_is_object(in)) {
        json_decref(in);
        return error_line(NULL, in ? "line is not a JSON object" : "invalid JSON");
    }
    json_t *id = json_object_get(in, "id");
    json_t *text = json_object_get(in, "text");
    json_t *res;
    if (!json_is_string(text)) {
        res = error_line(id, "field \"text\" must be a string");
    } else {
        nd_fingerprint_result r;
        int rc = nd_fingerprint(fp, scratch, json_string_value(text), json_string_length(text), &r);
        if (rc < 0) {
            res = error_line(id, rc == -EILSEQ ? "text is not valid UTF-8" : strerror(-rc));
        } else {
            char hex[17];
            nd_simhash_format(r.simhash, hex);
            res = json_object();
            json_object_set(res, "id", id ? id : json_null());
            json_object_set_new(res, "simhash", json_string(hex));
            json_object_set_new(res, "chars", json_integer(r.chars));
            json_object_set_new(res, "features", json_integer(r.features));
        }
    }
    json_decref(in);
    return res;
}

static bool is_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return false;
    return true;
}

int nd_fingerprint_stream(const nd_fingerprinter *fp, FILE *in, FILE *out)
{
    nd_fp_scratch *scratch = NULL;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int rc = nd_fp_scratch_create(&scratch);
    if (rc < 0)
        return rc;
    while ((n = getline(&line, &cap, in)) >= 0) {
        if (is_blank(line, (size_t)n))
            continue;
        rc = emit(process_line(fp, scratch, line, (size_t)n), out);
        if (rc < 0)
            break;
    }
    if (rc == 0 && ferror(in))
        rc = -EIO;
    free(line);
    nd_fp_scratch_destroy(scratch);
    return rc;
}
