/* metrics.h - counters and histograms for GET /metrics (Prometheus text).
 *
 * Request counters are per worker thread (one writer each: no atomic
 * read-modify-write, no shared cache lines on the hot path) and summed when
 * scraped. Event counters shared by all threads (verdicts, registrations)
 * use relaxed atomic adds. Gauges are passed in by the caller at scrape time. */
#ifndef ND_METRICS_H
#define ND_METRICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct evbuffer;

/* Route labels of the request counters. */
enum nd_route {
    ND_ROUTE_HEALTHZ,
    ND_ROUTE_READYZ,
    ND_ROUTE_METRICS,
    ND_ROUTE_FINGERPRINT,
    ND_ROUTE_CHECK,
    ND_ROUTE_DOCUMENTS,
    ND_ROUTE_REPLICA,
    ND_ROUTE_AUDIT,
    ND_ROUTE_IMPORT,
    ND_ROUTE_EVENTS,
    ND_ROUTE_WEBHOOKS,
    ND_ROUTE_COMPARE,
    ND_ROUTE_CONSOLE, /* the review console's files */
    ND_ROUTE_OTHER, /* unknown paths and requests libevent refused itself */
    ND_ROUTE_COUNT
};

#define ND_METRICS_STATUSES 14 /* status codes counted separately, plus "other" */
#define ND_METRICS_BUCKETS 16  /* latency histogram buckets, plus +Inf */

/* Counters written by one worker thread only. */
typedef struct nd_metrics_worker {
    _Atomic uint64_t requests[ND_ROUTE_COUNT][ND_METRICS_STATUSES + 1];
    _Atomic uint64_t latency[ND_ROUTE_COUNT][ND_METRICS_BUCKETS + 1];
    _Atomic uint64_t latency_sum_us[ND_ROUTE_COUNT];
    _Atomic uint64_t bytes_in, bytes_out;
} __attribute__((aligned(64))) nd_metrics_worker;

/* Counters of events, written by any thread. */
enum nd_event {
    ND_EV_CHECK_ORIGINAL,    /* /check-original said original */
    ND_EV_CHECK_DUPLICATE,   /* ... said duplicate (identical or near) */
    ND_EV_CHECK_PARTIAL,     /* ... said partial_copy */
    ND_EV_CHECK_COMPILATION, /* ... said compilation (lib/share.h) */
    ND_EV_CHECK_QUOTATION,   /* ... said quotation */
    ND_EV_REGISTERED,        /* registration durable */
    ND_EV_REGISTER_FAILED,   /* registration undone after a store failure */
    ND_EV_DELETED,           /* deletion durable */
    ND_EV_DELETE_FAILED,     /* deletion refused by the store */
    ND_EV_ID_CONFLICT,       /* 409 */
    ND_EV_TOO_SHORT,         /* 422 */
    ND_EV_FINGERPRINTS,      /* texts fingerprinted, any endpoint */
    ND_EV_FINGERPRINT_BYTES, /* bytes of those texts (nd_metrics_add) */
    ND_EV_INTEGRITY_INVISIBLE, /* a check's text hid characters (nd_integrity) */
    ND_EV_INTEGRITY_LOOKALIKE, /* ... swapped letters for look-alikes */
    ND_EV_INTEGRITY_ANNOTATION, /* ... hid behind readings in brackets (dropped) */
    ND_EV_INTEGRITY_REORDERED,  /* ... was shown in another order by an override */
    ND_EV_INTEGRITY_SCRIPT,    /* ... was read from Traditional characters */
    ND_EV_THIRD_CHECKS,        /* checks that ran the third stage (aligned a candidate) */
    ND_EV_THIRD_ALIGNED,       /* candidates it aligned (nd_metrics_add) */
    ND_EV_REWRITES,            /* checks that listed a rewrite */
    ND_EV_SHARE_CHECKS,        /* checks whose copied share was counted (a source listed) */
    ND_EV_COUNT
};

typedef struct nd_metrics nd_metrics;

/* Values read at scrape time. */
typedef struct nd_metrics_gauges {
    uint64_t documents;       /* registered documents in memory */
    uint64_t index_entries;   /* fingerprints in the index */
    uint64_t stale_documents; /* records with another fingerprint version */
    uint64_t pending_changes; /* registrations/deletions waiting for the store */
    uint64_t inflight;        /* requests accepted and not yet answered */
    uint64_t load_done;       /* documents loaded at start-up so far */
    uint64_t load_total;      /* documents to load at start-up */
    unsigned threads;
    bool ready, draining, loading, store_writable, in_memory;
    double uptime_s;
} nd_metrics_gauges;

/* A subsystem's collector: appends its metric families (HELP, TYPE and
 * samples, names that pass `promtool check metrics`) to out at scrape time,
 * from any worker thread. Returns 0 or -ENOMEM. arg is what was registered. */
typedef int (*nd_metrics_collect_fn)(void *arg, struct evbuffer *out);

#define ND_METRICS_COLLECTORS 8 /* collectors one nd_metrics holds */

/* Creates the counters for nworkers worker threads. Returns 0 and a new
 * object (free with nd_metrics_destroy()), or -ENOMEM. */
int nd_metrics_create(nd_metrics **out, unsigned nworkers);

/* Frees the counters; NULL is allowed. */
void nd_metrics_destroy(nd_metrics *m);

/* The counters of worker i (borrowed; lives as long as m). */
nd_metrics_worker *nd_metrics_worker_get(nd_metrics *m, unsigned i);

/* Counts one answered request on the calling worker's counters. Must be
 * called only by the thread that owns w. Does not allocate. */
void nd_metrics_request(nd_metrics_worker *w, enum nd_route route, int status, uint64_t latency_us,
                        uint64_t bytes_in, uint64_t bytes_out);

/* Registers a collector, rendered after the gauges in registration order
 * (before neardup_build_info and process_*). Before the workers start: not
 * thread-safe. arg is borrowed and must outlive m's scrapes. Returns 0, or
 * -ENOSPC past ND_METRICS_COLLECTORS. */
int nd_metrics_register(nd_metrics *m, nd_metrics_collect_fn fn, void *arg);

/* Appends one gauge or counter family (HELP, TYPE, one sample) to out, as
 * the collectors write theirs. Return 0, or 1 when out of memory. */
int nd_metrics_gauge(struct evbuffer *out, const char *name, const char *help, double v);
int nd_metrics_counter(struct evbuffer *out, const char *name, const char *help, uint64_t v);

/* Counts an event; any thread. */
void nd_metrics_event(nd_metrics *m, enum nd_event ev);

/* Adds n to an event's counter (e.g. ND_EV_FINGERPRINT_BYTES); any thread. */
void nd_metrics_add(nd_metrics *m, enum nd_event ev, uint64_t n);

/* Appends the Prometheus text exposition (format 0.0.4) of every counter, of
 * the gauges, of the registered collectors (the store's, a replica's), of
 * neardup_build_info and of the process_* metrics
 * (resident memory, CPU time, open files, start time; read from /proc and
 * getrusage) to out. Every name passes `promtool check metrics`. Returns 0
 * or -ENOMEM. */
int nd_metrics_render(nd_metrics *m, const nd_metrics_gauges *g, struct evbuffer *out);

#endif
