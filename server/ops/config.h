/* config.h - neardupd's configuration: one struct, defaults in one function,
 * overridden by NEARDUP_* environment variables and then by command-line
 * flags, validated once at start-up and read-only afterwards.
 *
 * The options are described as data (a table in config.c) from which the
 * flag parser, the environment reader and `neardupd --help` are all made. */
#ifndef ND_CONFIG_H
#define ND_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum nd_accept_mode {
    ND_ACCEPT_REUSEPORT = 0, /* one SO_REUSEPORT listening socket per worker */
    ND_ACCEPT_SHARED = 1,    /* one listening socket, accepted by every worker */
};

enum nd_config_reprint {
    ND_CONFIG_REPRINT_ALLOW = 0,  /* copies may be published as reprints */
    ND_CONFIG_REPRINT_FORBID = 1, /* copies are blocked */
};

/* --rewrite-verdict: what a rewrite found by the third stage does. */
enum nd_config_rewrite {
    ND_CONFIG_REWRITE_DUPLICATE = 0, /* a copy like a near duplicate */
    ND_CONFIG_REWRITE_REVIEW = 1,    /* listed, not evidence, "review": true */
    ND_CONFIG_REWRITE_IGNORE = 2,    /* the third stage is off */
};

typedef struct nd_config {
    char listen_host[256];      /* address to listen on (default 127.0.0.1) */
    uint16_t listen_port;       /* port; 0 picks a free one, logged at start (8080) */
    char data_dir[4096];        /* directory of the LMDB store (./data) */
    bool in_memory;             /* keep registrations in memory only (false) */
    unsigned threads;           /* worker threads, each with its own event loop (cores) */
    int accept_mode;            /* enum nd_accept_mode (reuseport) */
    unsigned k;                 /* default Hamming radius of /check-original (3) */
    unsigned min_chars;         /* shortest text /check-original judges (300) */
    size_t max_body;            /* largest request body in bytes (4 MiB) */
    size_t max_headers;         /* largest request header block in bytes (16 KiB) */
    unsigned max_batch;         /* most texts in one /fingerprint batch (1000) */
    unsigned max_matches;       /* most matches listed in one answer (100) */
    double min_resemblance;     /* a near duplicate shares this share of shingles (0.5) */
    double min_containment;     /* a partial copy: this share of the text is in the doc (0.5) */
    double min_source_share;    /* a source below the partial bar is listed from this
                                 * share of the text's code points (0.1; share.h) */
    double min_quote_share;     /* one such source from this share: a quotation (1: none) */
    double min_copied_share;    /* several together from this share: a compilation (0.95) */
    unsigned max_verify;        /* anchor-index candidates verified per check (32) */
    size_t max_meta;            /* largest "meta" object, compact JSON bytes (16 KiB) */
    size_t max_text;            /* longest single text, bytes of UTF-8 (1 MiB) */
    unsigned max_connections;   /* open client connections; more are refused (10000) */
    unsigned request_timeout_s; /* each request must arrive whole within this (30 s) */
    char token_file[4096];      /* file holding the bearer token, "" for none (see auth.h) */
    bool auth_all;              /* the token guards every endpoint but the probes (false) */
    bool console;               /* serve the review console at /console/ (true) */
    unsigned timeout_s;         /* idle / read / write timeout of a connection (30 s) */
    unsigned drain_s;           /* deadline for in-flight requests at shutdown (10 s) */
    unsigned drain_delay_s;     /* at shutdown, keep accepting this long while /readyz
                              * is 503, so a load balancer stops sending first (0 s) */
    size_t map_size;            /* storage limit: LMDB map size in bytes (store default) */
    bool sync;                  /* fsync every commit (true) */
    bool keep_text;             /* keep each registered text in the store, packed, for
                                 * GET /documents/{id}?text=true (true) */
    int log_level;              /* enum nd_log_level (info) */
    bool access_log;            /* one JSON line per request (true; needs level info) */
    int default_reprint;        /* a document without its own reprint rule: enum
                                 * nd_config_reprint (allow) */
    int rewrite_verdict;        /* enum nd_config_rewrite (duplicate) */
    unsigned copies_max;        /* detections kept per original, the oldest dropped
                                 * (10000; 0 = unbounded) */
    unsigned audit_max_entries; /* audit entries kept, the oldest dropped by later
                                 * commits (10000000; 0 = unbounded) */
    unsigned events_max_age_s;  /* feed events older than this dropped once delivered (0: kept) */
    unsigned audit_max_age_s;   /* audit entries older than this dropped by later
                                 * commits, seconds (0 = kept whatever their age) */
    /* Replicas (server/replica): */
    char nats[4096];          /* NATS server URLs, comma-separated; "": one node (default) */
    char stream[4096];        /* JetStream stream name ("neardup") */
    char node_name[4096];     /* this node's name ("": the host name) */
    unsigned stream_replicas; /* replicas of a stream this node creates (3) */
    unsigned max_lag;         /* entries behind beyond which /readyz is 503 (1000) */
    unsigned nats_timeout_ms; /* wait for a JetStream answer (2000 ms) */
    /* How this node authenticates to NATS ("": not used; secrets are read
     * from these files, or NEARDUP_NATS_PASSWORD / NEARDUP_NATS_TOKEN, by
     * neardupd, never taken as flags): */
    char nats_user[4096];          /* user name (with a password) */
    char nats_password_file[4096]; /* file holding its password */
    char nats_token_file[4096];    /* file holding a token */
    char nats_creds[4096];         /* credentials file: user JWT and nkey seed */
    char nats_tls_ca[4096];        /* CA certificates (PEM): TLS with verified servers */
    char nats_tls_cert[4096];      /* client certificate chain (PEM) */
    char nats_tls_key[4096];       /* its private key (PEM) */
    /* Webhooks (server/hooks): */
    char webhooks[4096]; /* the subscriptions' JSON file ("": none; see hook_config.h) */
} nd_config;

/* Fills cfg with the defaults. */
void nd_config_defaults(nd_config *cfg);

#define ND_CONFIG_VERSION 1 /* nd_config_parse(): --version written */
#define ND_CONFIG_HELP 2    /* nd_config_parse(): --help's options written */

/* Applies NEARDUP_* variables from the process environment, then the flags in
 * argv. Returns 0; ND_CONFIG_VERSION or ND_CONFIG_HELP when --version or
 * --help was given (the text has been written to out; after the help the
 * caller adds what it serves, the endpoints, and exits 0); or -EINVAL after
 * writing a one-line reason to err (the caller exits 2). Validates every
 * value. Does not keep pointers into argv or the environment. */
int nd_config_parse(nd_config *cfg, int argc, char **argv, FILE *out, FILE *err);

/* Writes the usage text, listing every flag with its variable and default,
 * then authentication (the token roles, nd_auth_usage()), NATS
 * credentials and signals. */
void nd_config_usage(FILE *out, const char *prog);

/* Copies the comma-separated URL list urls into out[cap] (NUL-terminated,
 * cut when it does not fit) with the password (or token) of any userinfo
 * replaced by three stars: nats://u:p@h:4222 becomes nats://u:(stars)@h:4222,
 * nats://tok@h becomes nats://(stars)@h. What may be logged of --nats. Returns
 * the number of URLs that carried userinfo. */
unsigned nd_config_redact_urls(const char *urls, char *out, size_t cap);

/* Overwrites in place, with '*', the secret of every userinfo of the
 * comma-separated URL list urls (lengths kept): for a copy in argv, which
 * ps shows. */
void nd_config_mask_urls(char *urls);

/* Writes the effective configuration as one JSON object (no newline),
 * NUL-terminated, into buf[cap] for the start-up log line. Returns the length
 * written. If it does not fit, writes {"truncated":true} instead (or "" when
 * cap < 19). */
size_t nd_config_describe(const nd_config *cfg, char *buf, size_t cap);

#endif
