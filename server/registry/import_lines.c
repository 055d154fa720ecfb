/* import_lines.c - the input of an import (import.h): the file or body
 * (gzip inflated to a temporary file, then mapped), its lines found and
 * numbered over the threads, their registered_at read and checked, and
 * the judging order. The judging itself is import.c's. */
#include "import_lines.h"
#include "import_lines_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "bounds.h"
#include "json.h"

/* ---- registered_at ---- */

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant). */
static int64_t days_from_civil(int64_t y, int64_t m, int64_t d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* Reads n digits at s[*i]; returns -1 when they are not all digits. */
static int64_t digits(const char *s, size_t len, size_t *i, unsigned n)
{
    int64_t v = 0;
    for (unsigned k = 0; k < n; k++, (*i)++) {
        if (*i >= len || s[*i] < '0' || s[*i] > '9')
            return -1;
        v = v * 10 + (s[*i] - '0');
    }
    return v;
}

int nd_import_parse_time(const char *s, size_t len, bool is_int, int64_t v, int64_t *us)
{
    if (is_int) {
        if (v <= 0 || v > LATEST_US)
            return -ERANGE;
        *us = v;
        return 0;
    }
    if (!s)
        return -EINVAL;
    size_t i = 0;
    int64_t y = digits(s, len, &i, 4);
    if (y < 0 || i >= len || s[i++] != '-')
        return -EINVAL;
    int64_t mo = digits(s, len, &i, 2);
    if (mo < 1 || mo > 12 || i >= len || s[i++] != '-')
        return -EINVAL;
    int64_t d = digits(s, len, &i, 2);
    static const int mdays[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (d < 1 || d > mdays[mo - 1] || (mo == 2 && d == 29 && !leap))
        return -EINVAL;
    if (i >= len || (s[i] != 'T' && s[i] != 't' && s[i] != ' '))
        return -EINVAL;
    i++;
    int64_t h = digits(s, len, &i, 2);
    if (h < 0 || h > 23 || i >= len || s[i++] != ':')
        return -EINVAL;
    int64_t mi = digits(s, len, &i, 2);
    if (mi < 0 || mi > 59 || i >= len || s[i++] != ':')
        return -EINVAL;
    int64_t se = digits(s, len, &i, 2);
    if (se < 0 || se > 60)
        return -EINVAL;
    bool leap_second = se == 60; /* a time, refused (-ERANGE) once the rest is read */
    int64_t frac = 0;
    if (i < len && s[i] == '.') {
        unsigned n = 0;
        for (i++; i < len && s[i] >= '0' && s[i] <= '9'; i++, n++)
            if (n < 6)
                frac = frac * 10 + (s[i] - '0');
        if (n == 0 || n > 9)
            return -EINVAL;
        for (; n < 6; n++)
            frac *= 10;
    }
    int64_t off = 0;
    if (i < len && (s[i] == 'Z' || s[i] == 'z')) {
        i++;
    } else if (i < len && (s[i] == '+' || s[i] == '-')) {
        int sign = s[i++] == '-' ? -1 : 1;
        int64_t oh = digits(s, len, &i, 2);
        if (oh < 0 || oh > 23 || i >= len || s[i++] != ':')
            return -EINVAL;
        int64_t om = digits(s, len, &i, 2);
        if (om < 0 || om > 59)
            return -EINVAL;
        off = sign * (oh * 3600 + om * 60);
    } else {
        return -EINVAL;
    }
    if (i != len)
        return -EINVAL;
    int64_t secs = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + se - off;
    if (leap_second || secs < 0 || secs > LATEST_US / 1000000 || secs * 1000000 + frac == 0)
        return -ERANGE;
    *us = secs * 1000000 + frac;
    return 0;
}

/* ---- input ---- */

static int fail(char *err, size_t errlen, int rc, const char *fmt, const char *path)
{
    snprintf(err, errlen, fmt, path, strerror(-rc));
    return rc;
}

/* Decompresses (or copies) fd into an unlinked temporary file; returns its
 * descriptor or -errno. */
static int inflate_to_temp(int fd, const char *path, char *err, size_t errlen)
{
    const char *dir = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof(tmpl), "%s/neardup-import-XXXXXX", dir && *dir ? dir : "/tmp");
    int out = mkstemp(tmpl);
    if (out < 0)
        return fail(err, errlen, -errno, "cannot make a temporary file for %s: %s", path);
    unlink(tmpl);
    gzFile gz = gzdopen(fd, "rb");
    if (!gz) {
        close(out);
        return fail(err, errlen, -ENOMEM, "cannot read %s: %s", path);
    }
    gzbuffer(gz, 1 << 20);
    size_t cap = 1 << 20;
    char *buf = malloc(cap);
    int rc = buf ? 0 : -ENOMEM;
    while (rc == 0) {
        int n = gzread(gz, buf, (unsigned)cap);
        if (n < 0) {
            int zerr;
            const char *why = gzerror(gz, &zerr);
            snprintf(err, errlen, "cannot decompress %s: %s", path, why);
            rc = -EIO;
            break;
        }
        if (n == 0)
            break;
        for (ssize_t w, off = 0; off < n; off += w) {
            w = write(out, buf + off, (size_t)(n - off));
            if (w < 0) {
                rc = fail(err, errlen, -errno, "cannot write the temporary copy of %s: %s", path);
                break;
            }
        }
    }
    free(buf);
    gzclose(gz); /* closes fd */
    if (rc < 0) {
        close(out);
        return rc;
    }
    return out;
}

int nd_import_input_open(nd_import_input *in, const char *path, char *err, size_t errlen)
{
    memset(in, 0, sizeof(*in));
    bool is_stdin = strcmp(path, "-") == 0;
    int fd = is_stdin ? dup(0) : open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fail(err, errlen, -errno, "cannot open %s: %s", path);
    struct stat sb;
    if (fstat(fd, &sb) < 0) {
        int rc = -errno;
        close(fd);
        return fail(err, errlen, rc, "cannot read %s: %s", path);
    }
    unsigned char magic[2] = {0, 0};
    bool regular = S_ISREG(sb.st_mode);
    if (regular && pread(fd, magic, 2, 0) < 0) {
        int rc = -errno;
        close(fd);
        return fail(err, errlen, rc, "cannot read %s: %s", path);
    }
    if (!regular || (magic[0] == 0x1f && magic[1] == 0x8b)) {
        int tmp = inflate_to_temp(fd, path, err, errlen);
        if (tmp < 0)
            return tmp;
        fd = tmp;
        if (fstat(fd, &sb) < 0) {
            int rc = -errno;
            close(fd);
            return fail(err, errlen, rc, "cannot read the temporary copy of %s: %s", path);
        }
    }
    in->map_len = (size_t)sb.st_size;
    if (in->map_len) {
        in->map = mmap(NULL, in->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (in->map == MAP_FAILED) {
            int rc = -errno;
            in->map = NULL;
            close(fd);
            return fail(err, errlen, rc, "cannot map %s: %s", path);
        }
        madvise(in->map, in->map_len, MADV_WILLNEED);
    }
    close(fd);
    in->buf = in->map ? in->map : "";
    in->len = in->map_len;
    return 0;
}

void nd_import_input_close(nd_import_input *in)
{
    if (in->map)
        munmap(in->map, in->map_len);
    memset(in, 0, sizeof(*in));
}

/* ---- pass 1: the lines and their times ---- */

typedef struct scan_part {
    int64_t latest; /* later given times are AT_FUTURE */
    const char *buf;
    size_t from, to; /* [from, to): whole lines */
    line_ref *refs;
    size_t n, cap;
    uint64_t starts; /* line starts in the part (blank lines too) */
    int rc;
} scan_part;

/* The time of a registered_at value parsed by nd_import_parse_time()
 * (rc, us), or the refusal it gets. */
static int64_t time_or_refusal(int rc, int64_t us, int64_t latest)
{
    if (rc == -ERANGE)
        return AT_RANGE;
    if (rc < 0)
        return AT_BAD;
    return us > latest ? AT_FUTURE : us;
}

static int64_t line_time(const char *s, size_t len, int64_t latest, nd_json_scratch *js,
                         nd_json_member *mem)
{
    size_t n = 0;
    nd_json_error jerr;
    if (nd_json_read_object(s, len, js, mem, ND_REQUEST_MAX_MEMBERS, &n, &jerr) < 0)
        return AT_NONE; /* refused when judged, with the reader's message */
    const nd_json_member *m = nd_json_find(mem, n, "registered_at");
    if (!m)
        return AT_NONE;
    int64_t us;
    const nd_json_value *v = &m->value;
    int rc;
    if (v->type == ND_JSON_NUMBER && v->is_int)
        rc = nd_import_parse_time(NULL, 0, true, v->i, &us);
    else if (v->type == ND_JSON_STRING)
        rc = nd_import_parse_time(v->str, v->str_len, false, 0, &us);
    else
        return AT_BAD;
    return time_or_refusal(rc, us, latest);
}

static void *scan_main(void *arg)
{
    scan_part *sp = arg;
    nd_json_scratch js = {0};
    nd_json_member *mem = malloc(ND_REQUEST_MAX_MEMBERS * sizeof(*mem));
    if (!mem) {
        sp->rc = -ENOMEM;
        return NULL;
    }
    size_t i = sp->from;
    while (i < sp->to) {
        const char *s = sp->buf + i;
        const char *nl = memchr(s, '\n', sp->to - i);
        size_t len = nl ? (size_t)(nl - s) : sp->to - i;
        sp->starts++;
        size_t next = i + len + (nl ? 1 : 0);
        size_t l = len;
        while (l && (s[l - 1] == '\r' || s[l - 1] == ' ' || s[l - 1] == '\t'))
            l--;
        size_t b = 0;
        while (b < l && (s[b] == ' ' || s[b] == '\t'))
            b++;
        if (b < l) {
            if (sp->n == sp->cap) {
                size_t cap = sp->cap ? sp->cap * 2 : 4096;
                line_ref *r = realloc(sp->refs, cap * sizeof(*r));
                if (!r) {
                    sp->rc = -ENOMEM;
                    break;
                }
                sp->refs = r;
                sp->cap = cap;
            }
            sp->refs[sp->n++] = (line_ref){.at = line_time(s, l, sp->latest, &js, mem),
                                           .off = i,
                                           .len = l > UINT32_MAX ? UINT32_MAX : (uint32_t)l,
                                           .no = (uint32_t)sp->starts};
        }
        i = next;
    }
    free(mem);
    nd_json_scratch_finish(&js);
    return NULL;
}

static int64_t sort_key(const line_ref *r)
{
    return r->at < 0 ? AT_NONE : r->at; /* refused: with the lines without one */
}

static int ref_cmp(const void *a, const void *b)
{
    const line_ref *x = a, *y = b;
    int64_t kx = sort_key(x), ky = sort_key(y);
    if (kx != ky)
        return kx < ky ? -1 : 1;
    return x->no < y->no ? -1 : x->no > y->no;
}

/* import_lines_internal.h */
int nd_import_scan_lines(const char *buf, size_t len, unsigned nthreads, int64_t latest,
                         line_ref **out, size_t *n)
{
    unsigned np = nthreads ? nthreads : 1;
    if (len < ((size_t)1 << 20))
        np = 1;
    scan_part parts[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    size_t from = 0;
    for (unsigned i = 0; i < np; i++) {
        size_t to = i + 1 == np ? len : len / np * (i + 1);
        if (to < from)
            to = from;
        const char *nl = to < len ? memchr(buf + to, '\n', len - to) : NULL;
        to = i + 1 == np ? len : nl ? (size_t)(nl - buf) + 1 : len;
        parts[i] = (scan_part){.latest = latest, .buf = buf, .from = from, .to = to};
        from = to;
    }
    unsigned started = 0;
    for (unsigned i = 1; i < np; i++, started++)
        if (pthread_create(&th[i], NULL, scan_main, &parts[i]) != 0)
            break;
    for (unsigned i = 1 + started; i < np; i++)
        scan_main(&parts[i]); /* could not start a thread: here */
    scan_main(&parts[0]);
    for (unsigned i = 1; i < 1 + started; i++)
        pthread_join(th[i], NULL);
    size_t total = 0;
    int rc = 0;
    for (unsigned i = 0; i < np; i++) {
        total += parts[i].n;
        rc = rc ? rc : parts[i].rc;
    }
    line_ref *all = rc == 0 ? malloc((total ? total : 1) * sizeof(*all)) : NULL;
    if (!all)
        rc = -ENOMEM;
    size_t k = 0;
    uint64_t base = 0;
    bool sorted = true;
    for (unsigned i = 0; i < np; i++) {
        for (size_t j = 0; all && j < parts[i].n; j++) {
            line_ref r = parts[i].refs[j];
            r.no = (uint32_t)(r.no + base);
            if (k && sort_key(&all[k - 1]) > sort_key(&r))
                sorted = false;
            all[k++] = r;
        }
        base += parts[i].starts;
        free(parts[i].refs);
    }
    if (rc < 0) {
        free(all);
        return rc;
    }
    if (!sorted)
        qsort(all, total, sizeof(*all), ref_cmp);
    *out = all;
    *n = total;
    return 0;
}
