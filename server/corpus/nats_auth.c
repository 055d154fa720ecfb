/* nats_auth.c - the NATS authentication of a replica (nats_auth.h). */
#include "nats_auth.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "log.h"

/* Reads the NATS secret what (a password or a token) from the file path
 * into buf[NATS_SECRET_MAX], without its trailing line end; a file readable
 * by its group or others is warned about. Returns 0, or -errno with a
 * reason in err (never the secret). */
static int read_nats_secret(const char *path, const char *what, char *buf, char *err, size_t cap)
{
    FILE *f = fopen(path, "re");
    struct stat st;
    if (!f || fstat(fileno(f), &st) < 0) {
        int e = errno;
        snprintf(err, cap, "cannot open the NATS %s file %s: %s", what, path, strerror(e));
        if (f)
            fclose(f);
        return -e;
    }
    size_t n = S_ISREG(st.st_mode) ? fread(buf, 1, NATS_SECRET_MAX, f) : NATS_SECRET_MAX;
    fclose(f);
    while (n > 0 && n < NATS_SECRET_MAX && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        n--;
    if (n == 0 || n >= NATS_SECRET_MAX || memchr(buf, 0, n) || memchr(buf, '\n', n)) {
        snprintf(err, cap,
                 "the NATS %s file %s must be a regular file holding one line of 1 to %d bytes",
                 what, path, NATS_SECRET_MAX - 1);
        explicit_bzero(buf, NATS_SECRET_MAX);
        return -EINVAL;
    }
    buf[n] = 0;
    if (st.st_mode & (S_IRGRP | S_IROTH))
        nd_log(ND_LOG_WARN, "the NATS %s file %s is readable by other users (chmod 600 it)", what,
               path);
    return 0;
}

int nd_nats_auth(const nd_config *c, nd_replica_options *o, char *password, char *token, char *err,
                 size_t cap)
{
    const char *env_password = getenv("NEARDUP_NATS_PASSWORD");
    const char *env_token = getenv("NEARDUP_NATS_TOKEN");
    int rc = 0;
    if (c->nats_password_file[0] && env_password)
        return snprintf(err, cap,
                        "give the NATS password either in a file "
                        "(--nats-password-file) or in NEARDUP_NATS_PASSWORD, not both"),
               -EINVAL;
    if (c->nats_token_file[0] && env_token)
        return snprintf(err, cap,
                        "give the NATS token either in a file (--nats-token-file) or "
                        "in NEARDUP_NATS_TOKEN, not both"),
               -EINVAL;
    bool has_password = c->nats_password_file[0] || env_password;
    bool has_token = c->nats_token_file[0] || env_token;
    if (has_password != (c->nats_user[0] != 0))
        return snprintf(err, cap, "%s",
                        has_password ? "a NATS password needs --nats-user"
                                     : "--nats-user needs its password (--nats-password-file or "
                                       "NEARDUP_NATS_PASSWORD)"),
               -EINVAL;
    if ((c->nats_user[0] != 0) + has_token + (c->nats_creds[0] != 0) > 1)
        return snprintf(err, cap,
                        "give NATS one way to authenticate: --nats-user with its "
                        "password, a token, or --nats-creds"),
               -EINVAL;
    if (c->nats_tls_key[0] && !c->nats_tls_cert[0])
        return snprintf(err, cap, "--nats-tls-key needs --nats-tls-cert"), -EINVAL;
    if (c->nats_tls_cert[0] && !c->nats_tls_key[0])
        return snprintf(err, cap, "--nats-tls-cert needs --nats-tls-key"), -EINVAL;
    char shown[sizeof(c->nats)];
    unsigned in_url = nd_config_redact_urls(c->nats, shown, sizeof(shown));
    if (in_url && (c->nats_user[0] || has_token || c->nats_creds[0]))
        return snprintf(err, cap,
                        "the --nats URLs carry credentials and so do --nats-user, a "
                        "token or --nats-creds: give them once"),
               -EINVAL;
    if (in_url)
        nd_log(ND_LOG_WARN,
               "%u --nats URL(s) carry credentials, which ps and the environment show: give "
               "them with --nats-user and --nats-password-file, --nats-token-file or "
               "--nats-creds instead",
               in_url);
    if (c->nats_password_file[0])
        rc = read_nats_secret(c->nats_password_file, "password", password, err, cap);
    else if (env_password && strlen(env_password) < NATS_SECRET_MAX && *env_password)
        snprintf(password, NATS_SECRET_MAX, "%s", env_password);
    else if (env_password)
        return snprintf(err, cap, "NEARDUP_NATS_PASSWORD must hold 1 to %d bytes",
                        NATS_SECRET_MAX - 1),
               -EINVAL;
    if (rc == 0 && c->nats_token_file[0])
        rc = read_nats_secret(c->nats_token_file, "token", token, err, cap);
    else if (rc == 0 && env_token && strlen(env_token) < NATS_SECRET_MAX && *env_token)
        snprintf(token, NATS_SECRET_MAX, "%s", env_token);
    else if (rc == 0 && env_token)
        return snprintf(err, cap, "NEARDUP_NATS_TOKEN must hold 1 to %d bytes",
                        NATS_SECRET_MAX - 1),
               -EINVAL;
    if (rc < 0)
        return rc;
    o->user = c->nats_user[0] ? c->nats_user : NULL;
    o->password = has_password ? password : NULL;
    o->token = has_token ? token : NULL;
    o->creds_file = c->nats_creds[0] ? c->nats_creds : NULL;
    o->tls_ca = c->nats_tls_ca[0] ? c->nats_tls_ca : NULL;
    o->tls_cert = c->nats_tls_cert[0] ? c->nats_tls_cert : NULL;
    o->tls_key = c->nats_tls_key[0] ? c->nats_tls_key : NULL;
    nd_log(ND_LOG_INFO, "replica: NATS authentication: %s%s",
           o->user         ? "user and password"
           : o->token      ? "token"
           : o->creds_file ? "credentials file"
           : in_url        ? "credentials in the URL"
                           : "none",
           o->tls_ca || o->tls_cert ? ", TLS" : "");
    return 0;
}
