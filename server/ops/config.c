/* config.c - defaults, NEARDUP_* variables and flags, all from one table. */
#include "config.h"
#include "auth.h"
#include "bounds.h"
#include "json.h"
#include "log.h"
#include "share.h"
#include "sketch.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KiB ND_KIB
#define MiB ND_MIB
#define GiB (1024 * MiB)

void nd_config_defaults(nd_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    strcpy(cfg->listen_host, "127.0.0.1"); /* loopback unless asked otherwise */
    cfg->listen_port = 8080;
    strcpy(cfg->data_dir, "./data");           /* the embedded store lives here */
    cfg->in_memory = false;                    /* registrations are durable */
    cfg->keep_text = true;                     /* registered texts kept, packed */
    cfg->threads = 0;                          /* 0: one per online core, resolved in parse */
    cfg->accept_mode = ND_ACCEPT_REUSEPORT;    /* measured faster: tests/bench/bench_http.sh */
    cfg->k = ND_K_DEFAULT;                     /* Hamming radius of a "near duplicate" */
    cfg->min_chars = ND_MIN_CHARS_DEFAULT;     /* shorter texts are too short to judge */
    cfg->max_body = ND_MAX_BODY_DEFAULT;       /* a long article is ~100 KB */
    cfg->max_headers = ND_MAX_HEADERS_DEFAULT; /* request line + headers */
    cfg->max_batch = ND_MAX_BATCH_DEFAULT;     /* texts in one /fingerprint batch */
    cfg->max_matches = ND_MAX_MATCHES_DEFAULT; /* matches listed; more sets "truncated" */
    cfg->min_resemblance = ND_VERDICT_MIN_RESEMBLANCE; /* measured: proto/sketch.md */
    cfg->min_containment = ND_VERDICT_MIN_CONTAINMENT;
    cfg->min_source_share = ND_SHARE_MIN_SOURCE; /* measured: proto/sketch.md section 8 */
    cfg->min_quote_share = ND_SHARE_MIN_QUOTE;
    cfg->min_copied_share = ND_SHARE_MIN_COPIED;
    cfg->max_verify = ND_VERDICT_MAX_VERIFY;
    cfg->max_meta = ND_MAX_META_DEFAULT;            /* author/title/url and friends */
    cfg->max_text = ND_MAX_TEXT_DEFAULT;            /* ten times a long article */
    cfg->max_connections = 10000;                   /* lowered to fit RLIMIT_NOFILE at start */
    cfg->request_timeout_s = 30;                    /* slow clients (slowloris) are cut off */
    cfg->token_file[0] = 0;                         /* no token: every endpoint is open */
    cfg->auth_all = false;                          /* a token guards writes only */
    cfg->console = true;                            /* the review console at /console/ */
    cfg->timeout_s = 30;                            /* idle keep-alive and slow clients */
    cfg->drain_s = 10;                              /* in-flight requests at shutdown */
    cfg->drain_delay_s = 0;                         /* no load balancer assumed */
    cfg->map_size = 0;                              /* 0: the store's default */
    cfg->sync = true;                               /* fsync each group commit */
    cfg->log_level = ND_LOG_INFO;                   /* start-up lines and the access log */
    cfg->access_log = true;                         /* one line per request */
    cfg->default_reprint = ND_CONFIG_REPRINT_ALLOW; /* the usual platform rule */
    cfg->copies_max = 10000;                        /* detections per original */
    cfg->audit_max_entries = 10000000;  /* audit log: ~2-3 GB at most, years of changes */
    cfg->audit_max_age_s = 0;           /* no age limit: the count bounds it */
    cfg->events_max_age_s = 30 * 86400; /* the event feed: 30 days */
    cfg->nats[0] = 0;                   /* one node, no replication */
    cfg->webhooks[0] = 0;               /* no webhook subscriptions */
    snprintf(cfg->stream, sizeof(cfg->stream), "neardup");
    cfg->node_name[0] = 0;       /* the host name */
    cfg->stream_replicas = 3;    /* a Raft quorum of 2 survives one server */
    cfg->max_lag = 1000;         /* entries: well under a second of writes */
    cfg->nats_timeout_ms = 2000; /* a JetStream answer on a LAN takes ms */
}

/* T_BOOL: a switch (no value as a flag; its variable takes 1/0...);
 * T_ONOFF: a setting of true or false, as a flag's value too. */
enum opt_type {
    T_LISTEN,
    T_PATH,
    T_UINT,
    T_SIZE,
    T_BOOL,
    T_ONOFF,
    T_ACCEPT,
    T_LEVEL,
    T_FRAC,
    T_REPRINT,
    T_REWRITE
};

typedef struct opt_desc {
    const char *flag;    /* long flag without "--" */
    const char *env;     /* NEARDUP_* variable */
    const char *metavar; /* NULL: a switch without argument */
    enum opt_type type;
    size_t offset;     /* into nd_config */
    uint64_t min, max; /* for T_UINT and T_SIZE; T_FRAC: thousandths */
    bool switch_value; /* for switches: the value the flag sets */
    const char *help;
} opt_desc;

#define OFF(f) offsetof(nd_config, f)

static const opt_desc options[] = {
    {"listen", "NEARDUP_LISTEN", "HOST:PORT", T_LISTEN, OFF(listen_host), 0, 0, false,
     "address and port to listen on; port 0 picks a free port (logged)"},
    {"data", "NEARDUP_DATA", "DIR", T_PATH, OFF(data_dir), 0, 0, false,
     "directory of the embedded store (created if missing)"},
    {"in-memory", "NEARDUP_IN_MEMORY", NULL, T_BOOL, OFF(in_memory), 0, 0, true,
     "keep registrations in memory only, no store (tests, benchmarks)"},
    {"threads", "NEARDUP_THREADS", "N", T_UINT, OFF(threads), 0, 256, false,
     "worker threads, one event loop each; 0 = number of cores"},
    {"accept", "NEARDUP_ACCEPT", "MODE", T_ACCEPT, OFF(accept_mode), 0, 0, false,
     "reuseport (a listening socket per worker) or shared (one socket)"},
    {"k", "NEARDUP_K", "N", T_UINT, OFF(k), 0, ND_K_MAX, false,
     "default Hamming radius of /check-original (0..8)"},
    {"min-chars", "NEARDUP_MIN_CHARS", "N", T_UINT, OFF(min_chars), 0, ND_MIN_CHARS_LARGEST, false,
     "shortest text (characters after normalization) /check-original judges"},
    {"max-body", "NEARDUP_MAX_BODY", "SIZE", T_SIZE, OFF(max_body), ND_MAX_BODY_SMALLEST,
     ND_MAX_BODY_LARGEST, false, "largest request body (suffix K, M, G)"},
    {"max-headers", "NEARDUP_MAX_HEADERS", "SIZE", T_SIZE, OFF(max_headers),
     ND_MAX_HEADERS_SMALLEST, ND_MAX_HEADERS_LARGEST, false, "largest request line plus headers"},
    {"max-batch", "NEARDUP_MAX_BATCH", "N", T_UINT, OFF(max_batch), ND_MAX_BATCH_SMALLEST,
     ND_MAX_BATCH_LARGEST, false, "most texts in one /fingerprint batch"},
    {"max-matches", "NEARDUP_MAX_MATCHES", "N", T_UINT, OFF(max_matches), ND_MAX_MATCHES_SMALLEST,
     ND_MAX_MATCHES_LARGEST, false, "most matches in one answer (then \"truncated\": true)"},
    {"min-resemblance", "NEARDUP_MIN_RESEMBLANCE", "FRACTION", T_FRAC, OFF(min_resemblance), 1,
     1000, false, "a match is a near duplicate from this estimated resemblance (0..1)"},
    {"min-containment", "NEARDUP_MIN_CONTAINMENT", "FRACTION", T_FRAC, OFF(min_containment), 1,
     1000, false, "a match is a partial copy when this share of the text is in it (0..1)"},
    {"min-source-share", "NEARDUP_MIN_SOURCE_SHARE", "FRACTION", T_FRAC, OFF(min_source_share), 0,
     1000, false,
     "a source below the partial-copy bar is listed (\"quoted\") when its passages hold this "
     "share of the text (0..1; 0: none listed, no compilation or quotation verdict)"},
    {"min-quote-share", "NEARDUP_MIN_QUOTE_SHARE", "FRACTION", T_FRAC, OFF(min_quote_share), 1,
     1000, false, "one source holding this share of the text makes it a quotation (0..1)"},
    {"min-copied-share", "NEARDUP_MIN_COPIED_SHARE", "FRACTION", T_FRAC, OFF(min_copied_share), 1,
     1000, false,
     "two or more listed sources together holding this share of the text make it a "
     "compilation (0..1)"},
    {"max-verify", "NEARDUP_MAX_VERIFY", "N", T_UINT, OFF(max_verify), 0, ND_VERIFY_MAX, false,
     "anchor candidates sharing one anchor verified per check (every one sharing two is)"},
    {"max-text", "NEARDUP_MAX_TEXT", "SIZE", T_SIZE, OFF(max_text), ND_MAX_TEXT_SMALLEST,
     ND_MAX_TEXT_LARGEST, false, "longest single text (bytes of UTF-8) in any request"},
    {"max-connections", "NEARDUP_MAX_CONNECTIONS", "N", T_UINT, OFF(max_connections), 1, 1000000,
     false, "open client connections; more are answered 503 and closed"},
    {"request-timeout", "NEARDUP_REQUEST_TIMEOUT", "SECONDS", T_UINT, OFF(request_timeout_s), 1,
     3600, false, "a whole request must arrive within this of the connection or the last answer"},
    {"token-file", "NEARDUP_TOKEN_FILE", "PATH", T_PATH, OFF(token_file), 0, 0, false,
     "file holding the bearer token that guards writes (or set NEARDUP_TOKEN)"},
    {"auth-all", "NEARDUP_AUTH_ALL", NULL, T_BOOL, OFF(auth_all), 0, 0, true,
     "with a token, guard every endpoint except /healthz and /readyz"},
    {"console", "NEARDUP_CONSOLE", "BOOL", T_ONOFF, OFF(console), 0, 0, false,
     "serve the review console at /console/ (false: the API alone)"},
    {"max-meta", "NEARDUP_MAX_META", "SIZE", T_SIZE, OFF(max_meta), ND_MAX_META_SMALLEST,
     ND_MAX_META_LARGEST, false, "largest \"meta\" object, as compact JSON"},
    {"timeout", "NEARDUP_TIMEOUT", "SECONDS", T_UINT, OFF(timeout_s), 1, 3600, false,
     "idle, read and write timeout of a connection"},
    {"drain-timeout", "NEARDUP_DRAIN_TIMEOUT", "SECONDS", T_UINT, OFF(drain_s), 0, 3600, false,
     "at SIGTERM/SIGINT, how long in-flight requests may take"},
    {"drain-delay", "NEARDUP_DRAIN_DELAY", "SECONDS", T_UINT, OFF(drain_delay_s), 0, 3600, false,
     "at SIGTERM/SIGINT, first answer /readyz 503 this long while still serving new "
     "requests (a load balancer's health check notices)"},
    {"map-size", "NEARDUP_MAP_SIZE", "SIZE", T_SIZE, OFF(map_size), 0, (uint64_t)1 << 44, false,
     "storage limit (LMDB map size); 0 = the store's default"},
    {"no-sync", "NEARDUP_NO_SYNC", NULL, T_BOOL, OFF(sync), 0, 0, false,
     "do not fsync commits (tests only: loses data on power failure)"},
    {"keep-text", "NEARDUP_KEEP_TEXT", "BOOL", T_ONOFF, OFF(keep_text), 0, 0, false,
     "keep each registered text (zstd-packed, on disk) for GET /documents/{id}?text=true; "
     "false: none kept"},
    {"log-level", "NEARDUP_LOG_LEVEL", "LEVEL", T_LEVEL, OFF(log_level), 0, 0, false,
     "debug, info, warn, error or off"},
    {"no-access-log", "NEARDUP_NO_ACCESS_LOG", NULL, T_BOOL, OFF(access_log), 0, 0, false,
     "do not log one line per request"},
    {"default-reprint", "NEARDUP_DEFAULT_REPRINT", "RULE", T_REPRINT, OFF(default_reprint), 0, 0,
     false, "allow or forbid: the reprint rule of an original that has none of its own"},
    {"rewrite-verdict", "NEARDUP_REWRITE_VERDICT", "RULE", T_REWRITE, OFF(rewrite_verdict), 0, 0,
     false,
     "a rewrite (the third stage: reworded, in the original's order) counts as a duplicate, is "
     "listed for review, or is ignored (duplicate, review, ignore)"},
    {"copies-max", "NEARDUP_COPIES_MAX", "N", T_UINT, OFF(copies_max), 0, 100000000, false,
     "detections (copies) kept per original, the oldest dropped; 0 = no limit"},
    {"audit-max-entries", "NEARDUP_AUDIT_MAX_ENTRIES", "N", T_UINT, OFF(audit_max_entries), 0,
     4000000000u, false, "audit log entries kept, the oldest dropped; 0 = no limit"},
    {"audit-max-age", "NEARDUP_AUDIT_MAX_AGE", "SECONDS", T_UINT, OFF(audit_max_age_s), 0,
     4000000000u, false, "audit log entries older than this are dropped; 0 = no age limit"},
    {"events-max-age", "NEARDUP_EVENTS_MAX_AGE", "SECONDS", T_UINT, OFF(events_max_age_s), 0,
     4000000000u, false,
     "events of GET /events older than this are dropped once every webhook has them; 0 = kept"},
    {"nats", "NEARDUP_NATS", "URLS", T_PATH, OFF(nats), 0, 0, false,
     "replicate through NATS JetStream at these comma-separated URLs (default: one node)"},
    {"stream", "NEARDUP_STREAM", "NAME", T_PATH, OFF(stream), 0, 0, false,
     "JetStream stream of the replicas (its subject is NAME.changes)"},
    {"stream-replicas", "NEARDUP_STREAM_REPLICAS", "N", T_UINT, OFF(stream_replicas), 1, 5, false,
     "replicas of the stream when this node creates it"},
    {"node-name", "NEARDUP_NODE_NAME", "NAME", T_PATH, OFF(node_name), 0, 0, false,
     "this replica's name in logs, /replica and metrics (default: the host name)"},
    {"max-lag", "NEARDUP_MAX_LAG", "N", T_UINT, OFF(max_lag), 0, 100000000, false,
     "stream entries a replica may be behind and still be ready"},
    {"nats-timeout-ms", "NEARDUP_NATS_TIMEOUT_MS", "MS", T_UINT, OFF(nats_timeout_ms), 100, 60000,
     false, "wait for a JetStream answer before a write answers 503"},
    {"nats-user", "NEARDUP_NATS_USER", "NAME", T_PATH, OFF(nats_user), 0, 0, false,
     "user name this node gives NATS (password: --nats-password-file or NEARDUP_NATS_PASSWORD)"},
    {"nats-password-file", "NEARDUP_NATS_PASSWORD_FILE", "PATH", T_PATH, OFF(nats_password_file), 0,
     0, false, "file holding the NATS password of --nats-user"},
    {"nats-token-file", "NEARDUP_NATS_TOKEN_FILE", "PATH", T_PATH, OFF(nats_token_file), 0, 0,
     false, "file holding a NATS authentication token (or set NEARDUP_NATS_TOKEN)"},
    {"nats-creds", "NEARDUP_NATS_CREDS", "PATH", T_PATH, OFF(nats_creds), 0, 0, false,
     "NATS credentials file (user JWT and nkey seed, as nsc writes it)"},
    {"nats-tls-ca", "NEARDUP_NATS_TLS_CA", "PATH", T_PATH, OFF(nats_tls_ca), 0, 0, false,
     "CA certificates (PEM) the NATS servers' certificates are verified with: TLS on"},
    {"nats-tls-cert", "NEARDUP_NATS_TLS_CERT", "PATH", T_PATH, OFF(nats_tls_cert), 0, 0, false,
     "this node's client certificate chain (PEM) for NATS TLS (with --nats-tls-key)"},
    {"nats-tls-key", "NEARDUP_NATS_TLS_KEY", "PATH", T_PATH, OFF(nats_tls_key), 0, 0, false,
     "the private key (PEM) of --nats-tls-cert"},
    {"webhooks", "NEARDUP_WEBHOOKS", "PATH", T_PATH, OFF(webhooks), 0, 0, false,
     "JSON file of the webhook subscriptions (URL, secret, filters), read at start"},
};

#define NOPTIONS (sizeof(options) / sizeof(options[0]))

static int parse_uint(const char *s, uint64_t *out)
{
    if (!isdigit((unsigned char)*s))
        return -EINVAL;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return -EINVAL;
    *out = v;
    return 0;
}

static int parse_size(const char *s, uint64_t *out)
{
    if (!isdigit((unsigned char)*s))
        return -EINVAL;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -EINVAL;
    uint64_t mul = 1;
    switch (*end) {
    case 0: break;
    case 'k':
    case 'K':
        mul = KiB;
        end++;
        break;
    case 'm':
    case 'M':
        mul = MiB;
        end++;
        break;
    case 'g':
    case 'G':
        mul = GiB;
        end++;
        break;
    default: return -EINVAL;
    }
    if (*end == 'i' || *end == 'I')
        end++;
    if (*end == 'b' || *end == 'B')
        end++;
    if (*end || (v && mul > UINT64_MAX / v))
        return -EINVAL;
    *out = v * mul;
    return 0;
}

/* A decimal fraction such as 0.5 (no exponent, no sign). */
static int parse_frac(const char *s, double *out)
{
    if (!isdigit((unsigned char)*s) && *s != '.')
        return -EINVAL;
    for (const char *p = s; *p; p++)
        if (!isdigit((unsigned char)*p) && *p != '.')
            return -EINVAL;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s)
        return -EINVAL;
    *out = v;
    return 0;
}

static int parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off", ""};
    for (size_t i = 0; i < 4; i++)
        if (strcasecmp(s, yes[i]) == 0)
            return *out = true, 0;
    for (size_t i = 0; i < 5; i++)
        if (strcasecmp(s, no[i]) == 0)
            return *out = false, 0;
    return -EINVAL;
}

/* "HOST:PORT" or "[V6]:PORT"; HOST may be empty (then 0.0.0.0 is NOT assumed:
 * it is an error, to keep listening on every interface explicit). */
static int parse_listen(nd_config *cfg, const char *s)
{
    const char *colon;
    const char *host = s;
    size_t hlen;
    if (*s == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':')
            return -EINVAL;
        host = s + 1;
        hlen = (size_t)(close - host);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon)
            return -EINVAL;
        hlen = (size_t)(colon - s);
    }
    uint64_t port;
    if (hlen == 0 || hlen >= sizeof(cfg->listen_host) || parse_uint(colon + 1, &port) ||
        port > 65535)
        return -EINVAL;
    memcpy(cfg->listen_host, host, hlen);
    cfg->listen_host[hlen] = 0;
    cfg->listen_port = (uint16_t)port;
    return 0;
}

/* Applies value to the option; for switches value is NULL (flag) or the
 * variable's text (environment). */
static int apply(nd_config *cfg, const opt_desc *o, const char *value)
{
    char *field = (char *)cfg + o->offset;
    uint64_t v;
    bool b;
    int lvl;
    switch (o->type) {
    case T_LISTEN: return parse_listen(cfg, value);
    case T_PATH:
        if (!*value || strlen(value) >= sizeof(cfg->data_dir))
            return -EINVAL;
        strcpy(field, value);
        return 0;
    case T_UINT:
        if (parse_uint(value, &v) || v < o->min || v > o->max)
            return -EINVAL;
        *(unsigned *)field = (unsigned)v;
        return 0;
    case T_SIZE:
        if (parse_size(value, &v) || v < o->min || v > o->max)
            return -EINVAL;
        *(size_t *)field = (size_t)v;
        return 0;
    case T_BOOL:
        if (!value) {
            *(bool *)field = o->switch_value;
            return 0;
        }
        if (parse_bool(value, &b))
            return -EINVAL;
        /* NEARDUP_NO_SYNC=1 means sync=false: the variable names the switch. */
        *(bool *)field = b ? o->switch_value : !o->switch_value;
        return 0;
    case T_ONOFF:
        if (parse_bool(value, &b))
            return -EINVAL;
        *(bool *)field = b;
        return 0;
    case T_ACCEPT:
        if (strcmp(value, "reuseport") == 0)
            *(int *)field = ND_ACCEPT_REUSEPORT;
        else if (strcmp(value, "shared") == 0)
            *(int *)field = ND_ACCEPT_SHARED;
        else
            return -EINVAL;
        return 0;
    case T_LEVEL:
        lvl = nd_log_level_parse(value);
        if (lvl < 0)
            return -EINVAL;
        *(int *)field = lvl;
        return 0;
    case T_REPRINT:
        if (strcmp(value, "allow") == 0)
            *(int *)field = ND_CONFIG_REPRINT_ALLOW;
        else if (strcmp(value, "forbid") == 0)
            *(int *)field = ND_CONFIG_REPRINT_FORBID;
        else
            return -EINVAL;
        return 0;
    case T_REWRITE:
        if (strcmp(value, "duplicate") == 0)
            *(int *)field = ND_CONFIG_REWRITE_DUPLICATE;
        else if (strcmp(value, "review") == 0)
            *(int *)field = ND_CONFIG_REWRITE_REVIEW;
        else if (strcmp(value, "ignore") == 0)
            *(int *)field = ND_CONFIG_REWRITE_IGNORE;
        else
            return -EINVAL;
        return 0;
    case T_FRAC: {
        double f;
        if (parse_frac(value, &f) || f * 1000 < (double)o->min || f * 1000 > (double)o->max)
            return -EINVAL;
        *(double *)field = f;
        return 0;
    }
    }
    return -EINVAL;
}

static void describe_default(const opt_desc *o, char *buf, size_t cap)
{
    nd_config d;
    nd_config_defaults(&d);
    const char *field = (const char *)&d + o->offset;
    switch (o->type) {
    case T_LISTEN: snprintf(buf, cap, "%s:%u", d.listen_host, d.listen_port); break;
    case T_PATH: snprintf(buf, cap, "%s", *field ? field : "none"); break;
    case T_UINT:
        if (o->offset == OFF(threads))
            snprintf(buf, cap, "0 (%ld here)", sysconf(_SC_NPROCESSORS_ONLN));
        else
            snprintf(buf, cap, "%u", *(const unsigned *)field);
        break;
    case T_SIZE: {
        size_t v = *(const size_t *)field;
        if (v && v % MiB == 0)
            snprintf(buf, cap, "%zuM", v / MiB);
        else if (v && v % KiB == 0)
            snprintf(buf, cap, "%zuK", v / KiB);
        else
            snprintf(buf, cap, "%zu", v);
        break;
    }
    case T_BOOL: snprintf(buf, cap, "off"); break;
    case T_ONOFF: snprintf(buf, cap, "%s", *(const bool *)field ? "true" : "false"); break;
    case T_ACCEPT: snprintf(buf, cap, "reuseport"); break;
    case T_REPRINT: snprintf(buf, cap, "allow"); break;
    case T_REWRITE: snprintf(buf, cap, "duplicate"); break;
    case T_FRAC: snprintf(buf, cap, "%g", *(const double *)field); break;
    case T_LEVEL: snprintf(buf, cap, "%s", nd_log_level_name(*(const int *)field)); break;
    }
}

void nd_config_usage(FILE *out, const char *prog)
{
    fprintf(out,
            "Usage: %s [OPTIONS]\n"
            "The neardup server: near-duplicate lookup over HTTP (every endpoint is listed\n"
            "at the end; the contract is proto/openapi.yaml).\n"
            "Every option may also be set by its environment variable; flags win.\n\n",
            prog);
    for (size_t i = 0; i < NOPTIONS; i++) {
        const opt_desc *o = &options[i];
        char left[64], def[4400];
        snprintf(left, sizeof(left), "--%s%s%s", o->flag, o->metavar ? " " : "",
                 o->metavar ? o->metavar : "");
        describe_default(o, def, sizeof(def));
        fprintf(out, "  %-26s %s\n  %-26s env %s, default %s\n", left, o->help, "", o->env, def);
    }
    fprintf(out, "  %-26s %s\n  %-26s %s\n", "--help", "show this text and exit", "--version",
            "show the version and exit");
    fprintf(out, "\nAuthentication: with a token (--token-file, or NEARDUP_TOKEN in the\n"
                 "environment; never as a flag, which ps would show) writes and the operator's\n"
                 "calls need \"Authorization: Bearer <token>\", else 401; a token without the\n"
                 "right is 403 (who may call what: Endpoints below). A token file may hold\n"
                 "several named tokens; the name is the client of the audit log and the\n"
                 "access log.\n");
    nd_auth_usage(out);
    fprintf(out, "\nNATS (--nats): a replicated node logs in with --nats-user and its password\n"
                 "in --nats-password-file or NEARDUP_NATS_PASSWORD, a token in --nats-token-file\n"
                 "or NEARDUP_NATS_TOKEN, or --nats-creds; never as flags. Credentials inside\n"
                 "the --nats URLs work but are warned about; logs show them as user:***@host.\n");
    fprintf(out, "\nSignals: SIGTERM or SIGINT drains and exits 0: /readyz answers 503 at once,\n"
                 "the listeners close after --drain-delay, requests in flight get --drain-timeout\n"
                 "more, the store is flushed. A second signal exits at once.\n");
}

static int finish(nd_config *cfg, FILE *err)
{
    if (cfg->threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        cfg->threads = n > 0 ? (unsigned)n : 1;
    }
    if (cfg->max_meta > cfg->max_body) {
        fprintf(err, "neardupd: --max-meta must not exceed --max-body\n");
        return -EINVAL;
    }
    return 0;
}

int nd_config_parse(nd_config *cfg, int argc, char **argv, FILE *out, FILE *err)
{
    for (size_t i = 0; i < NOPTIONS; i++) {
        const char *v = getenv(options[i].env);
        if (v && apply(cfg, &options[i], v) < 0) {
            fprintf(err, "neardupd: invalid %s=%s\n", options[i].env,
                    options[i].offset == OFF(nats) ? "(not shown: it may hold credentials)" : v);
            return -EINVAL;
        }
    }
    struct option longopts[NOPTIONS + 6];
    for (size_t i = 0; i < NOPTIONS; i++) {
        longopts[i] = (struct option){options[i].flag,
                                      options[i].metavar           ? required_argument
                                      : options[i].type == T_ONOFF ? optional_argument
                                                                   : no_argument,
                                      NULL, (int)(i + 1)};
    }
    longopts[NOPTIONS] = (struct option){"help", no_argument, NULL, 'h'};
    longopts[NOPTIONS + 1] = (struct option){"version", no_argument, NULL, 'V'};
    /* An exact "--token" (getopt would take it for --token-file): refused
     * without echoing the value. */
    longopts[NOPTIONS + 2] = (struct option){"token", required_argument, NULL, 'T'};
    /* The same for NATS secrets (getopt would take them for the -file
     * flags, and a file name is echoed in errors). */
    longopts[NOPTIONS + 3] = (struct option){"nats-password", required_argument, NULL, 'P'};
    longopts[NOPTIONS + 4] = (struct option){"nats-token", required_argument, NULL, 'N'};
    longopts[NOPTIONS + 5] = (struct option){NULL, 0, NULL, 0};
    optind = 0; /* 0, not 1: glibc's getopt then forgets the previous argv entirely */
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":hV", longopts, NULL)) != -1) {
        if (c == 'h') {
            nd_config_usage(out, "neardupd");
            return ND_CONFIG_HELP;
        }
        if (c == 'T') {
            fprintf(err, "neardupd: --token is not accepted (ps would show the token): use "
                         "--token-file PATH or NEARDUP_TOKEN\n");
            return -EINVAL;
        }
        if (c == 'P' || c == 'N') {
            fprintf(err,
                    "neardupd: --nats-%s is not accepted (ps would show it): use --nats-%s-file "
                    "PATH or NEARDUP_NATS_%s\n",
                    c == 'P' ? "password" : "token", c == 'P' ? "password" : "token",
                    c == 'P' ? "PASSWORD" : "TOKEN");
            return -EINVAL;
        }
        if (c == 'V') {
            fprintf(out, "neardupd %s\n", ND_PROGRAM_VERSION);
            return ND_CONFIG_VERSION;
        }
        if (c == '?' || c == ':') {
            fprintf(err, "neardupd: %s option %s (see --help)\n",
                    c == ':' ? "missing value for" : "unknown", argv[optind - 1]);
            return -EINVAL;
        }
        const opt_desc *o = &options[c - 1];
        if (apply(cfg, o, optarg) < 0) {
            fprintf(err, "neardupd: invalid value for --%s: %s\n", o->flag,
                    o->offset == OFF(nats) ? "(not shown: it may hold credentials)" : optarg);
            return -EINVAL;
        }
    }
    if (optind < argc) {
        fprintf(err, "neardupd: unexpected argument %s (see --help)\n", argv[optind]);
        return -EINVAL;
    }
    return finish(cfg, err);
}

/* The secret of the URL p[0..n) (no separator inside): true with
 * [*from, *to) when it has userinfo (the password after "user:", or the
 * whole userinfo, a token, up to its last '@'). */
static bool url_secret(const char *p, size_t n, size_t *from, size_t *to)
{
    const char *sep = strstr(p, "://");
    if (sep && sep + 3 > p + n)
        sep = NULL;                                /* in a later URL */
    size_t host = sep ? (size_t)(sep - p) + 3 : 0; /* the authority begins */
    size_t end = host + strcspn(p + host, "/?#, ");
    end = end < n ? end : n;
    const char *at = NULL; /* the last '@' of the authority */
    for (size_t i = host; i < end; i++)
        if (p[i] == '@')
            at = p + i;
    if (!at)
        return false;
    const char *colon = memchr(p + host, ':', (size_t)(at - (p + host)));
    *from = colon ? (size_t)(colon - p) + 1 : host; /* the user name stays */
    *to = (size_t)(at - p);
    return true;
}

unsigned nd_config_redact_urls(const char *urls, char *out, size_t cap)
{
    unsigned found = 0;
    size_t o = 0;
    for (const char *p = urls; *p;) {
        size_t n = strcspn(p, ", "), from = 0, to = 0; /* one URL: p[0..n) */
        bool secret = n && url_secret(p, n, &from, &to);
        found += secret;
        for (size_t i = 0; i < (n ? n : 1); i++) {
            if (secret && i == from) {
                for (const char *m = "***"; *m; m++)
                    if (o + 1 < cap)
                        out[o++] = *m;
                i = to;
            }
            if (o + 1 < cap)
                out[o++] = p[i];
        }
        p += n ? n : 1;
    }
    if (cap)
        out[o < cap ? o : cap - 1] = 0;
    return found;
}

void nd_config_mask_urls(char *urls)
{
    for (char *p = urls; *p;) {
        size_t n = strcspn(p, ", "), from = 0, to = 0;
        if (n && url_secret(p, n, &from, &to))
            memset(p + from, '*', to - from);
        p += n ? n : 1;
    }
}

size_t nd_config_describe(const nd_config *cfg, char *buf, size_t cap)
{
    size_t pos = 0;
    int n = snprintf(buf, cap, "{\"listen\":");
    pos = (size_t)n;
    char hostport[300];
    snprintf(hostport, sizeof(hostport), "%s:%u", cfg->listen_host, cfg->listen_port);
    nd_json_escape(buf, cap, &pos, hostport, strlen(hostport));
    if (pos < cap) {
        n = snprintf(buf + pos, cap - pos, ",\"data\":");
        pos += (size_t)n;
    }
    if (pos < cap)
        nd_json_escape(buf, cap, &pos, cfg->data_dir, strlen(cfg->data_dir));
    if (pos < cap) {
        n = snprintf(
            buf + pos, cap - pos,
            ",\"in_memory\":%s,\"threads\":%u,\"accept\":\"%s\",\"k\":%u,"
            "\"min_chars\":%u,\"max_body\":%zu,\"max_headers\":%zu,\"max_batch\":%u,"
            "\"max_matches\":%u,\"min_resemblance\":%g,\"min_containment\":%g,"
            "\"min_source_share\":%g,\"min_quote_share\":%g,\"min_copied_share\":%g,"
            "\"max_verify\":%u,\"max_meta\":%zu,\"max_text\":%zu,"
            "\"max_connections\":%u,\"request_timeout\":%u,\"auth_all\":%s,\"console\":%s,"
            "\"timeout\":%u,\"drain_timeout\":%u,"
            "\"drain_delay\":%u,"
            "\"map_size\":%zu,\"sync\":%s,\"keep_text\":%s,\"log_level\":\"%s\",\"access_log\":%s,"
            "\"default_reprint\":\"%s\",\"rewrite_verdict\":\"%s\",\"copies_max\":%u,"
            "\"audit_max_entries\":%u,\"audit_max_age\":%u,\"events_max_age\":%u,"
            "\"stream_replicas\":%u,\"max_lag\":%u,\"nats_timeout_ms\":%u",
            cfg->in_memory ? "true" : "false", cfg->threads,
            cfg->accept_mode == ND_ACCEPT_SHARED ? "shared" : "reuseport", cfg->k, cfg->min_chars,
            cfg->max_body, cfg->max_headers, cfg->max_batch, cfg->max_matches, cfg->min_resemblance,
            cfg->min_containment, cfg->min_source_share, cfg->min_quote_share,
            cfg->min_copied_share, cfg->max_verify, cfg->max_meta, cfg->max_text,
            cfg->max_connections, cfg->request_timeout_s, cfg->auth_all ? "true" : "false",
            cfg->console ? "true" : "false", cfg->timeout_s, cfg->drain_s, cfg->drain_delay_s,
            cfg->map_size, cfg->sync ? "true" : "false", cfg->keep_text ? "true" : "false",
            nd_log_level_name(cfg->log_level), cfg->access_log ? "true" : "false",
            cfg->default_reprint == ND_CONFIG_REPRINT_FORBID ? "forbid" : "allow",
            cfg->rewrite_verdict == ND_CONFIG_REWRITE_REVIEW   ? "review"
            : cfg->rewrite_verdict == ND_CONFIG_REWRITE_IGNORE ? "ignore"
                                                               : "duplicate",
            cfg->copies_max,
            cfg->audit_max_entries, cfg->audit_max_age_s, cfg->events_max_age_s,
            cfg->stream_replicas, cfg->max_lag, cfg->nats_timeout_ms);
        pos = n < 0 ? pos : pos + (size_t)n;
    }
    static const char *const names[] = {",\"nats\":",
                                        ",\"stream\":",
                                        ",\"node_name\":",
                                        ",\"nats_user\":",
                                        ",\"nats_password_file\":",
                                        ",\"nats_token_file\":",
                                        ",\"nats_creds\":",
                                        ",\"nats_tls_ca\":",
                                        ",\"nats_tls_cert\":",
                                        ",\"nats_tls_key\":",
                                        ",\"webhooks\":"};
    char nats[sizeof(cfg->nats)]; /* its credentials never logged */
    nd_config_redact_urls(cfg->nats, nats, sizeof(nats));
    const char *values[] = {nats,
                            cfg->stream,
                            cfg->node_name,
                            cfg->nats_user,
                            cfg->nats_password_file,
                            cfg->nats_token_file,
                            cfg->nats_creds,
                            cfg->nats_tls_ca,
                            cfg->nats_tls_cert,
                            cfg->nats_tls_key,
                            cfg->webhooks};
    for (int i = 0; i < (int)(sizeof(names) / sizeof(names[0])) && pos < cap; i++) {
        n = snprintf(buf + pos, cap - pos, "%s", names[i]);
        pos += (size_t)n;
        if (pos < cap)
            nd_json_escape(buf, cap, &pos, values[i], strlen(values[i]));
    }
    if (pos + 1 < cap) {
        buf[pos++] = '}';
        buf[pos] = 0;
    } else {
        pos = cap;
    }
    if (pos >= cap) {
        /* It did not fit (a long --data, escaped): still one JSON object,
         * NUL-terminated, rather than a cut one without its NUL. */
        static const char cut[] = "{\"truncated\":true}";
        if (cap >= sizeof(cut)) {
            memcpy(buf, cut, sizeof(cut));
            return sizeof(cut) - 1;
        }
        if (cap)
            buf[0] = 0;
        return 0;
    }
    return pos;
}
