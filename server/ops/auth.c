/* auth.c - bearer token loading and constant-time checking. */
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define FILE_MAX 4096 /* a token file larger than this is not a token file */

struct nd_auth {
    size_t len;
    unsigned char token[ND_AUTH_TOKEN_MAX]; /* zero-padded */
};

int nd_auth_equal(const void *a, const void *b, size_t n)
{
    /* volatile: the compiler may neither stop at the first difference nor
     * turn the loop into memcmp(). */
    const volatile unsigned char *x = a, *y = b;
    unsigned d = 0;
    for (size_t i = 0; i < n; i++)
        d |= (unsigned)(x[i] ^ y[i]);
    /* d is 0..255: (d - 1) >> 8 has its low bit set only when d == 0. */
    return (int)(1u & ((d - 1u) >> 8));
}

static bool b64token_char(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~' || c == '+' || c == '/';
}

/* RFC 6750: b64token = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=" */
static bool b64token(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && b64token_char((unsigned char)s[i]))
        i++;
    if (i == 0)
        return false;
    while (i < n && s[i] == '=')
        i++;
    return i == n;
}

static int set_token(nd_auth *a, const char *s, size_t n, const char *where, char *err, size_t cap)
{
    if (n < ND_AUTH_TOKEN_MIN || n > ND_AUTH_TOKEN_MAX) {
        snprintf(err, cap, "the token in %s must be %d to %d characters long (it has %zu)", where,
                 ND_AUTH_TOKEN_MIN, ND_AUTH_TOKEN_MAX, n);
        return -EINVAL;
    }
    if (!b64token(s, n)) {
        snprintf(err, cap, "the token in %s may hold only A-Z a-z 0-9 - . _ ~ + / and trailing '='",
                 where);
        return -EINVAL;
    }
    memcpy(a->token, s, n);
    a->len = n;
    return 0;
}

/* Reads the token file into buf[FILE_MAX]; returns its length or -errno. */
static ssize_t read_file(const char *path, char *buf, bool *others_can_read, char *err, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        int e = errno;
        snprintf(err, cap, "cannot open the token file %s: %s", path, strerror(e));
        if (fd >= 0)
            close(fd);
        return -e;
    }
    if (!S_ISREG(st.st_mode) || st.st_size >= FILE_MAX) {
        snprintf(err, cap, "the token file %s is not a regular file under %d bytes", path,
                 FILE_MAX);
        close(fd);
        return -EINVAL;
    }
    /* Other users: the file's group as well as everyone (a token file is
     * for the owner alone, mode 0600 or 0400). */
    *others_can_read = (st.st_mode & (S_IRGRP | S_IROTH)) != 0;
    size_t n = 0;
    while (n < FILE_MAX - 1) {
        ssize_t k = read(fd, buf + n, FILE_MAX - 1 - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            int e = errno;
            snprintf(err, cap, "cannot read the token file %s: %s", path, strerror(e));
            close(fd);
            return -e;
        }
        if (k == 0)
            break;
        n += (size_t)k;
    }
    close(fd);
    return (ssize_t)n;
}

int nd_auth_create(nd_auth **out, const char *path, const char *env_token, bool *others_can_read,
                   char *err, size_t cap)
{
    *out = NULL;
    *others_can_read = false;
    bool have_file = path && *path;
    if (!have_file && !env_token)
        return 0;
    if (have_file && env_token) {
        snprintf(err, cap,
                 "give the token either in a file (--token-file) or in NEARDUP_TOKEN, "
                 "not both");
        return -EINVAL;
    }
    nd_auth *a = calloc(1, sizeof(*a));
    if (!a) {
        snprintf(err, cap, "out of memory");
        return -ENOMEM;
    }
    int rc;
    if (have_file) {
        char buf[FILE_MAX];
        ssize_t n = read_file(path, buf, others_can_read, err, cap);
        if (n < 0) {
            rc = (int)n;
        } else {
            while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' ||
                             buf[n - 1] == '\t'))
                n--;
            rc = set_token(a, buf, (size_t)n, path, err, cap);
        }
        explicit_bzero(buf, sizeof(buf));
    } else {
        rc = set_token(a, env_token, strlen(env_token), "NEARDUP_TOKEN", err, cap);
    }
    if (rc < 0) {
        nd_auth_destroy(a);
        return rc;
    }
    *out = a;
    return 0;
}

void nd_auth_destroy(nd_auth *a)
{
    if (!a)
        return;
    explicit_bzero(a, sizeof(*a));
    free(a);
}

int nd_auth_check(const nd_auth *a, const char *h)
{
    if (!h)
        return ND_AUTH_MISSING;
    while (*h == ' ' || *h == '\t')
        h++;
    if (strncasecmp(h, "Bearer", 6) != 0 || (h[6] != ' ' && h[6] != '\t'))
        return ND_AUTH_MISSING;
    h += 6;
    while (*h == ' ' || *h == '\t')
        h++;
    size_t n = strlen(h);
    while (n > 0 && (h[n - 1] == ' ' || h[n - 1] == '\t'))
        n--;
    if (n == 0 || n > ND_AUTH_TOKEN_MAX)
        return ND_AUTH_INVALID; /* depends on what was sent only */
    unsigned char given[ND_AUTH_TOKEN_MAX] = {0};
    memcpy(given, h, n);
    /* Both the bytes (over the whole padded buffer) and the lengths are
     * compared, each in constant time, and combined without a branch. */
    int same = nd_auth_equal(given, a->token, sizeof(given)) &
               nd_auth_equal(&n, &a->len, sizeof(n));
    explicit_bzero(given, sizeof(given));
    return same ? ND_AUTH_OK : ND_AUTH_INVALID;
}
