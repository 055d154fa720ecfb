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

typedef struct auth_token {
    size_t len;
    unsigned char token[ND_AUTH_TOKEN_MAX]; /* zero-padded */
    nd_auth_identity id;
} auth_token;

struct nd_auth {
    size_t n;
    auth_token t[]; /* n of them */
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

static int set_token(auth_token *a, const char *s, size_t n, const char *where, char *err,
                     size_t cap)
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

static bool name_char(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_';
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* One content line of a token file: [start, end) without surrounding white space. */
typedef struct line_span {
    const char *s;
    size_t n;
    unsigned lineno;
} line_span;

/* Splits text into content lines (blank lines and '#' comments skipped);
 * returns how many there are (at most cap are stored), or more than cap. */
static size_t split_lines(const char *text, size_t len, line_span *out, size_t cap)
{
    size_t count = 0;
    unsigned lineno = 0;
    for (size_t pos = 0; pos < len;) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - text) : len, b = pos, e = end;
        lineno++;
        while (b < e && is_space(text[b]))
            b++;
        while (e > b && is_space(text[e - 1]))
            e--;
        if (e > b && text[b] != '#') {
            if (count < cap)
                out[count] = (line_span){text + b, e - b, lineno};
            count++;
        }
        pos = end + 1;
    }
    return count;
}

/* An account of a token file: no white space, ',' or control character. */
static bool account_char(unsigned char c)
{
    return c > 0x20 && c != 0x7f && c != ',';
}

/* The role field of a named line, s[0..n): "operator" or "accounts=A,B"
 * into id. what names the line. */
static int parse_role(nd_auth_identity *id, const char *s, size_t n, const char *what, char *err,
                      size_t cap)
{
    static const char acc[] = "accounts=";
    if (n == 8 && memcmp(s, "operator", 8) == 0) {
        id->is_operator = true;
        return 0;
    }
    if (n < sizeof(acc) - 1 || memcmp(s, acc, sizeof(acc) - 1) != 0) {
        snprintf(err, cap,
                 "the role on %s must be \"operator\" or \"accounts=ACCOUNT[,ACCOUNT...]\"", what);
        return -EINVAL;
    }
    s += sizeof(acc) - 1;
    n -= sizeof(acc) - 1;
    if (n == 0 || n >= ND_AUTH_ACCOUNTS_TEXT_MAX) {
        snprintf(err, cap, "the accounts on %s must be 1 to %d bytes in all", what,
                 ND_AUTH_ACCOUNTS_TEXT_MAX - 1);
        return -EINVAL;
    }
    memcpy(id->accounts, s, n);
    id->accounts[n] = 0;
    for (size_t pos = 0; pos <= n;) {
        size_t end = pos;
        while (end < n && s[end] != ',')
            end++;
        size_t len = end - pos;
        bool ok = len > 0 && len <= ND_AUTH_ACCOUNT_MAX;
        for (size_t k = pos; ok && k < end; k++)
            ok = account_char((unsigned char)s[k]);
        if (!ok) {
            snprintf(err, cap,
                     "account %u on %s must be 1 to %d bytes without white space, ',' or "
                     "control characters",
                     id->naccounts + 1, what, ND_AUTH_ACCOUNT_MAX);
            return -EINVAL;
        }
        if (id->naccounts == ND_AUTH_ACCOUNTS_MAX) {
            snprintf(err, cap, "%s lists more than %d accounts", what, ND_AUTH_ACCOUNTS_MAX);
            return -EINVAL;
        }
        for (unsigned j = 0; j < id->naccounts; j++)
            if (id->account_len[j] == len && memcmp(s + id->account_off[j], s + pos, len) == 0) {
                snprintf(err, cap, "account %u on %s is listed twice", id->naccounts + 1, what);
                return -EINVAL;
            }
        id->account_off[id->naccounts] = (uint16_t)pos;
        id->account_len[id->naccounts] = (uint16_t)len;
        id->naccounts++;
        pos = end + 1;
    }
    return 0;
}

/* "NAME TOKEN [ROLE]" into t; where names the file. */
static int named_token(auth_token *t, const line_span *l, const char *where, char *err, size_t cap)
{
    size_t i = 0;
    while (i < l->n && !is_space(l->s[i]))
        i++;
    size_t name_len = i;
    while (i < l->n && is_space(l->s[i]))
        i++;
    if (i == l->n) {
        snprintf(err, cap,
                 "line %u of %s must be \"NAME TOKEN [ROLE]\" (or the file one bare token)",
                 l->lineno, where);
        return -EINVAL;
    }
    bool name_ok = name_len > 0 && name_len <= ND_AUTH_NAME_MAX;
    for (size_t k = 0; name_ok && k < name_len; k++)
        name_ok = name_char((unsigned char)l->s[k]);
    if (!name_ok) {
        snprintf(err, cap,
                 "the name on line %u of %s must be 1 to %d characters of A-Z a-z 0-9 - . _",
                 l->lineno, where, ND_AUTH_NAME_MAX);
        return -EINVAL;
    }
    /* TOKEN, then a ROLE when the last field is one; anything else after
     * the name is the token, which may not hold white space. */
    size_t tok = i, end = l->n, role = l->n;
    while (role > tok && !is_space(l->s[role - 1]))
        role--;
    bool has_role = role > tok && ((end - role >= 9 && memcmp(l->s + role, "accounts=", 9) == 0) ||
                                   (end - role == 8 && memcmp(l->s + role, "operator", 8) == 0));
    size_t tok_end = has_role ? role : end;
    while (tok_end > tok && is_space(l->s[tok_end - 1]))
        tok_end--;
    char what[4200];
    snprintf(what, sizeof(what), "line %u of %s", l->lineno, where);
    int rc = set_token(t, l->s + tok, tok_end - tok, what, err, cap);
    bool spaced = false;
    for (size_t k = tok; k < end && !spaced; k++)
        spaced = is_space(l->s[k]);
    if (rc < 0 && !has_role && spaced)
        snprintf(err, cap,
                 "the token in %s may hold only A-Z a-z 0-9 - . _ ~ + / and trailing '=' (the "
                 "third field, a role, is \"operator\" or \"accounts=ACCOUNT[,ACCOUNT...]\")",
                 what);
    if (rc == 0 && has_role)
        rc = parse_role(&t->id, l->s + role, end - role, what, err, cap);
    else if (rc == 0)
        t->id.is_client = true; /* "NAME TOKEN": a client, owner of what it registers */
    if (rc == 0) {
        memcpy(t->id.name, l->s, name_len);
        t->id.name[name_len] = 0;
    }
    return rc;
}

int nd_auth_parse(nd_auth **out, const char *text, size_t len, const char *where, char *err,
                  size_t cap)
{
    *out = NULL;
    line_span lines[ND_AUTH_TOKENS_MAX];
    size_t n = split_lines(text, len, lines, ND_AUTH_TOKENS_MAX);
    if (n > ND_AUTH_TOKENS_MAX) {
        snprintf(err, cap, "%s holds more than %d tokens", where, ND_AUTH_TOKENS_MAX);
        return -EINVAL;
    }
    /* One line without white space inside (or none at all): a bare token. */
    bool bare = n == 0 || (n == 1 && !memchr(lines[0].s, ' ', lines[0].n) &&
                           !memchr(lines[0].s, '\t', lines[0].n));
    nd_auth *a = calloc(1, sizeof(*a) + (bare ? 1 : n) * sizeof(auth_token));
    if (!a) {
        snprintf(err, cap, "out of memory");
        return -ENOMEM;
    }
    int rc = 0;
    if (bare) {
        a->n = 1;
        strcpy(a->t[0].id.name, "default");
        a->t[0].id.is_operator = true;
        rc = set_token(&a->t[0], n ? lines[0].s : "", n ? lines[0].n : 0, where, err, cap);
    }
    for (size_t i = 0; !bare && i < n && rc == 0; i++) {
        rc = named_token(&a->t[i], &lines[i], where, err, cap);
        for (size_t j = 0; rc == 0 && j < i; j++) {
            if (strcmp(a->t[j].id.name, a->t[i].id.name) == 0) {
                snprintf(err, cap, "the name on line %u of %s is used twice", lines[i].lineno,
                         where);
                rc = -EINVAL;
            } else if (a->t[j].len == a->t[i].len &&
                       memcmp(a->t[j].token, a->t[i].token, a->t[i].len) == 0) {
                snprintf(err, cap, "the token on line %u of %s is given twice", lines[i].lineno,
                         where);
                rc = -EINVAL;
            }
        }
        a->n = i + 1;
    }
    if (rc < 0) {
        nd_auth_destroy(a);
        return rc;
    }
    *out = a;
    return 0;
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
    int rc;
    if (have_file) {
        char buf[FILE_MAX];
        ssize_t n = read_file(path, buf, others_can_read, err, cap);
        rc = n < 0 ? (int)n : nd_auth_parse(out, buf, (size_t)n, path, err, cap);
        explicit_bzero(buf, sizeof(buf));
        return rc;
    }
    nd_auth *a = calloc(1, sizeof(*a) + sizeof(auth_token));
    if (!a) {
        snprintf(err, cap, "out of memory");
        return -ENOMEM;
    }
    a->n = 1;
    strcpy(a->t[0].id.name, "default");
    a->t[0].id.is_operator = true;
    rc = set_token(&a->t[0], env_token, strlen(env_token), "NEARDUP_TOKEN", err, cap);
    if (rc < 0) {
        nd_auth_destroy(a);
        return rc;
    }
    *out = a;
    return 0;
}

size_t nd_auth_count(const nd_auth *a)
{
    return a ? a->n : 0;
}

const char *nd_auth_name(const nd_auth *a, size_t i)
{
    return a && i < a->n ? a->t[i].id.name : NULL;
}

const nd_auth_identity *nd_auth_identity_at(const nd_auth *a, size_t i)
{
    return a && i < a->n ? &a->t[i].id : NULL;
}

bool nd_auth_may_act_for(const nd_auth_identity *who, const char *account, size_t len)
{
    if (!who)
        return false;
    if (who->is_operator)
        return true;
    for (unsigned i = 0; i < who->naccounts; i++)
        if (who->account_len[i] == len &&
            memcmp(who->accounts + who->account_off[i], account, len) == 0)
            return true;
    return false;
}

const char *nd_auth_account(const nd_auth_identity *who, unsigned i, size_t *len)
{
    if (!who || who->is_operator || i >= who->naccounts)
        return NULL;
    *len = who->account_len[i];
    return who->accounts + who->account_off[i];
}

void nd_auth_destroy(nd_auth *a)
{
    if (!a)
        return;
    explicit_bzero(a, sizeof(*a) + a->n * sizeof(auth_token));
    free(a);
}

int nd_auth_check(const nd_auth *a, const char *h)
{
    return nd_auth_check_named(a, h, NULL);
}

int nd_auth_check_named(const nd_auth *a, const char *h, const char **name)
{
    const nd_auth_identity *who = NULL;
    int rc = nd_auth_check_identity(a, h, &who);
    if (name)
        *name = who ? who->name : NULL;
    return rc;
}

int nd_auth_check_identity(const nd_auth *a, const char *h, const nd_auth_identity **name)
{
    if (name)
        *name = NULL;
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
    /* Every token is compared, bytes (over the whole padded buffer) and
     * lengths, each in constant time, and the match is picked without a
     * branch on the secret: the time depends on the number of tokens only. */
    size_t which = 0;
    int any = 0;
    for (size_t i = 0; i < a->n; i++) {
        int same = nd_auth_equal(given, a->t[i].token, sizeof(given)) &
                   nd_auth_equal(&n, &a->t[i].len, sizeof(n));
        size_t mask = (size_t)0 - (size_t)same; /* all ones when same */
        which |= i & mask;
        any |= same;
    }
    explicit_bzero(given, sizeof(given));
    if (!any)
        return ND_AUTH_INVALID;
    if (name)
        *name = &a->t[which].id;
    return ND_AUTH_OK;
}

void nd_auth_usage(FILE *out)
{
    fprintf(out,
            "Token roles (a token file's line \"NAME TOKEN [ROLE]\"; a bare token and\n"
            "NEARDUP_TOKEN are the operator \"default\"):\n"
            "  %-22s %s\n  %-22s %s\n  %-22s %s\n  %-22s %s\n",
            "operator", "acts for every account; also the operator's calls (GET /replica,",
            "", "GET /webhooks, POST /webhooks/{name}/resume)",
            "accounts=A[,B...]", "acts for the listed accounts only",
            "(none)", "a client: names any account, changes only what it registered");
}
