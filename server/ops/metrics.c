/* metrics.c - per-worker counters, summed into Prometheus text on scrape. */
#include "metrics.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <jansson.h>

#include "fingerprint.h"
#include "sketch.h"

struct nd_metrics {
    unsigned nworkers;
    nd_metrics_worker *workers; /* nworkers, cache-line aligned */
    _Atomic uint64_t events[ND_EV_COUNT];
    struct {
        nd_metrics_collect_fn fn;
        void *arg;
    } collectors[ND_METRICS_COLLECTORS];
    unsigned ncollectors;
};

static const char *const route_names[ND_ROUTE_COUNT] = {
    "/healthz",  "/readyz",  "/metrics", "/fingerprint", "/check-original", "/documents/{id}",
    "/replica",  "/audit",   "/import",  "/events",      "/webhooks",       "/compare",
    "/console/", "other",
};

static const int statuses[ND_METRICS_STATUSES] = {
    200, 204, 400, 404, 405, 408, 409, 411, 413, 415, 417, 422, 500, 503,
};

/* Upper bounds of the latency buckets, microseconds. */
static const uint64_t bucket_us[ND_METRICS_BUCKETS] = {
    50,    100,   250,    500,    1000,   2500,    5000,    10000,
    25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 10000000,
};

static const struct {
    const char *name, *help, *label;
} events[ND_EV_COUNT] = {
    [ND_EV_CHECK_ORIGINAL] = {"neardup_checks_total", "Answers of /check-original by verdict.",
                              "verdict=\"original\""},
    [ND_EV_CHECK_DUPLICATE] = {"neardup_checks_total", NULL, "verdict=\"duplicate\""},
    [ND_EV_CHECK_PARTIAL] = {"neardup_checks_total", NULL, "verdict=\"partial_copy\""},
    [ND_EV_CHECK_COMPILATION] = {"neardup_checks_total", NULL, "verdict=\"compilation\""},
    [ND_EV_CHECK_QUOTATION] = {"neardup_checks_total", NULL, "verdict=\"quotation\""},
    [ND_EV_REGISTERED] = {"neardup_registrations_total",
                          "Registrations by outcome (failed: undone after a store error).",
                          "result=\"ok\""},
    [ND_EV_REGISTER_FAILED] = {"neardup_registrations_total", NULL, "result=\"failed\""},
    [ND_EV_DELETED] = {"neardup_deletions_total", "Deletions by outcome.", "result=\"ok\""},
    [ND_EV_DELETE_FAILED] = {"neardup_deletions_total", NULL, "result=\"failed\""},
    [ND_EV_ID_CONFLICT] = {"neardup_id_conflicts_total",
                           "Requests refused because the id holds another text.", NULL},
    [ND_EV_TOO_SHORT] = {"neardup_too_short_total", "Texts refused as too short to judge.", NULL},
    [ND_EV_FINGERPRINTS] = {"neardup_fingerprints_total", "Texts fingerprinted.", NULL},
    [ND_EV_FINGERPRINT_BYTES] = {"neardup_fingerprinted_bytes_total",
                                 "Bytes of UTF-8 text fingerprinted.", NULL},
    [ND_EV_INTEGRITY_INVISIBLE] = {"neardup_check_integrity_total",
                                   "Checks whose text was read differently from its characters, "
                                   "by kind (the answer's integrity).",
                                   "kind=\"invisible\""},
    [ND_EV_INTEGRITY_LOOKALIKE] = {"neardup_check_integrity_total", NULL, "kind=\"lookalike\""},
    [ND_EV_INTEGRITY_ANNOTATION] = {"neardup_check_integrity_total", NULL,
                                    "kind=\"annotation\""},
    [ND_EV_INTEGRITY_REORDERED] = {"neardup_check_integrity_total", NULL, "kind=\"reordered\""},
    [ND_EV_INTEGRITY_SCRIPT] = {"neardup_check_integrity_total", NULL, "kind=\"script\""},
    [ND_EV_THIRD_CHECKS] = {"neardup_rewrite_stage_checks_total",
                            "Checks whose gray-zone candidates the third stage aligned.", NULL},
    [ND_EV_THIRD_ALIGNED] = {"neardup_rewrite_stage_aligned_total",
                             "Candidates the third stage read and aligned.", NULL},
    [ND_EV_REWRITES] = {"neardup_rewrites_total", "Checks that listed a rewrite.", NULL},
    [ND_EV_SHARE_CHECKS] = {"neardup_copied_share_checks_total",
                            "Checks whose copied share was counted over their listed sources.",
                            NULL},
};

int nd_metrics_create(nd_metrics **out, unsigned nworkers)
{
    nd_metrics *m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    m->nworkers = nworkers;
    void *mem = NULL;
    if (posix_memalign(&mem, 64, sizeof(nd_metrics_worker) * (nworkers ? nworkers : 1)) != 0)
        mem = NULL;
    m->workers = mem;
    if (!m->workers) {
        free(m);
        return -ENOMEM;
    }
    memset(m->workers, 0, sizeof(nd_metrics_worker) * (nworkers ? nworkers : 1));
    *out = m;
    return 0;
}

void nd_metrics_destroy(nd_metrics *m)
{
    if (!m)
        return;
    free(m->workers);
    free(m);
}

nd_metrics_worker *nd_metrics_worker_get(nd_metrics *m, unsigned i)
{
    return &m->workers[i];
}

static inline void bump(_Atomic uint64_t *c, uint64_t by)
{
    /* Single writer: a relaxed load and store, no locked instruction. */
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + by,
                          memory_order_relaxed);
}

void nd_metrics_request(nd_metrics_worker *w, enum nd_route route, int status, uint64_t latency_us,
                        uint64_t bytes_in, uint64_t bytes_out)
{
    unsigned si = ND_METRICS_STATUSES;
    for (unsigned i = 0; i < ND_METRICS_STATUSES; i++)
        if (statuses[i] == status) {
            si = i;
            break;
        }
    unsigned bi = 0;
    while (bi < ND_METRICS_BUCKETS && latency_us > bucket_us[bi])
        bi++;
    bump(&w->requests[route][si], 1);
    bump(&w->latency[route][bi], 1);
    bump(&w->latency_sum_us[route], latency_us);
    bump(&w->bytes_in, bytes_in);
    bump(&w->bytes_out, bytes_out);
}

int nd_metrics_register(nd_metrics *m, nd_metrics_collect_fn fn, void *arg)
{
    if (m->ncollectors == ND_METRICS_COLLECTORS)
        return -ENOSPC;
    m->collectors[m->ncollectors].fn = fn;
    m->collectors[m->ncollectors].arg = arg;
    m->ncollectors++;
    return 0;
}

void nd_metrics_event(nd_metrics *m, enum nd_event ev)
{
    atomic_fetch_add_explicit(&m->events[ev], 1, memory_order_relaxed);
}

void nd_metrics_add(nd_metrics *m, enum nd_event ev, uint64_t n)
{
    atomic_fetch_add_explicit(&m->events[ev], n, memory_order_relaxed);
}

static uint64_t sum(nd_metrics *m, size_t offset)
{
    uint64_t s = 0;
    for (unsigned i = 0; i < m->nworkers; i++)
        s += atomic_load_explicit((_Atomic uint64_t *)((char *)&m->workers[i] + offset),
                                  memory_order_relaxed);
    return s;
}

#define WOFF(field) offsetof(nd_metrics_worker, field)

static int render_requests(nd_metrics *m, struct evbuffer *out)
{
    int rc = 0;
    rc |= evbuffer_add_printf(out, "# HELP neardup_http_requests_total HTTP requests answered, "
                                   "by route and status.\n"
                                   "# TYPE neardup_http_requests_total counter\n") < 0;
    for (unsigned r = 0; r < ND_ROUTE_COUNT; r++)
        for (unsigned s = 0; s <= ND_METRICS_STATUSES; s++) {
            uint64_t v = sum(m, WOFF(requests) + (r * (ND_METRICS_STATUSES + 1) + s) * 8);
            if (!v)
                continue;
            char code[16];
            if (s < ND_METRICS_STATUSES)
                snprintf(code, sizeof(code), "%d", statuses[s]);
            else
                strcpy(code, "other");
            rc |= evbuffer_add_printf(
                      out, "neardup_http_requests_total{route=\"%s\",code=\"%s\"} %llu\n",
                      route_names[r], code, (unsigned long long)v) < 0;
        }
    rc |= evbuffer_add_printf(out, "# HELP neardup_http_request_duration_seconds Time from "
                                   "request dispatch to reply, by route.\n"
                                   "# TYPE neardup_http_request_duration_seconds histogram\n") < 0;
    for (unsigned r = 0; r < ND_ROUTE_COUNT; r++) {
        uint64_t cum = 0;
        uint64_t counts[ND_METRICS_BUCKETS + 1];
        for (unsigned b = 0; b <= ND_METRICS_BUCKETS; b++) {
            counts[b] = sum(m, WOFF(latency) + (r * (ND_METRICS_BUCKETS + 1) + b) * 8);
            cum += counts[b];
        }
        if (!cum)
            continue;
        uint64_t run = 0;
        for (unsigned b = 0; b < ND_METRICS_BUCKETS; b++) {
            run += counts[b];
            rc |= evbuffer_add_printf(out,
                                      "neardup_http_request_duration_seconds_bucket{route=\"%s\","
                                      "le=\"%g\"} %llu\n",
                                      route_names[r], (double)bucket_us[b] / 1e6,
                                      (unsigned long long)run) < 0;
        }
        rc |= evbuffer_add_printf(
                  out,
                  "neardup_http_request_duration_seconds_bucket{route=\"%s\",le=\"+Inf\"} %llu\n"
                  "neardup_http_request_duration_seconds_sum{route=\"%s\"} %.6f\n"
                  "neardup_http_request_duration_seconds_count{route=\"%s\"} %llu\n",
                  route_names[r], (unsigned long long)cum, route_names[r],
                  (double)sum(m, WOFF(latency_sum_us) + r * 8) / 1e6, route_names[r],
                  (unsigned long long)cum) < 0;
    }
    rc |= evbuffer_add_printf(out,
                              "# HELP neardup_http_received_bytes_total Request body bytes.\n"
                              "# TYPE neardup_http_received_bytes_total counter\n"
                              "neardup_http_received_bytes_total %llu\n"
                              "# HELP neardup_http_sent_bytes_total Response body bytes.\n"
                              "# TYPE neardup_http_sent_bytes_total counter\n"
                              "neardup_http_sent_bytes_total %llu\n",
                              (unsigned long long)sum(m, WOFF(bytes_in)),
                              (unsigned long long)sum(m, WOFF(bytes_out))) < 0;
    return rc;
}

static int render_events(nd_metrics *m, struct evbuffer *out)
{
    int rc = 0;
    for (unsigned e = 0; e < ND_EV_COUNT; e++) {
        uint64_t v = atomic_load_explicit(&m->events[e], memory_order_relaxed);
        if (events[e].help)
            rc |= evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s counter\n", events[e].name,
                                      events[e].help, events[e].name) < 0;
        if (events[e].label)
            rc |= evbuffer_add_printf(out, "%s{%s} %llu\n", events[e].name, events[e].label,
                                      (unsigned long long)v) < 0;
        else
            rc |= evbuffer_add_printf(out, "%s %llu\n", events[e].name, (unsigned long long)v) < 0;
    }
    return rc;
}

int nd_metrics_gauge(struct evbuffer *out, const char *name, const char *help, double v)
{
    return evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s gauge\n%s %.15g\n", name, help, name,
                               name, v) < 0;
}

int nd_metrics_counter(struct evbuffer *out, const char *name, const char *help, uint64_t v)
{
    return evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name,
                               name, (unsigned long long)v) < 0;
}

/* neardup_build_info: versions as labels, value 1 (label values are fixed
 * strings without quotes or backslashes). fingerprint and sketch are the
 * two halves of the record version a document is stored with. */
static int render_build_info(struct evbuffer *out)
{
    return evbuffer_add_printf(out,
                               "# HELP neardup_build_info Versions of neardupd, its fingerprint "
                               "and sketch algorithms and its libraries; always 1.\n"
                               "# TYPE neardup_build_info gauge\n"
                               "neardup_build_info{version=\"%s\",fingerprint=\"%s\",sketch=\"%s\","
                               "libevent=\"%s\",lmdb=\"%s\",jansson=\"%s\"} 1\n",
                               ND_PROGRAM_VERSION, ND_FINGERPRINT_VERSION, ND_SKETCH_VERSION,
                               event_get_version(), ND_LMDB_VERSION, JANSSON_VERSION) < 0;
}

static unsigned count_open_fds(void)
{
    DIR *dir = opendir("/proc/self/fd");
    if (!dir)
        return 0;
    unsigned n = 0;
    struct dirent *e;
    while ((e = readdir(dir)))
        if (e->d_name[0] != '.')
            n++;
    closedir(dir);
    return n ? n - 1 : 0; /* not the directory's own descriptor */
}

/* The usual process_* metrics of Prometheus clients. */
static int render_process(const nd_metrics_gauges *g, struct evbuffer *out)
{
    int rc = 0;
    long page = sysconf(_SC_PAGESIZE);
    unsigned long long size = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%llu %llu", &size, &resident) != 2)
            size = resident = 0;
        fclose(f);
    }
    struct rusage ru;
    double cpu = 0;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
              (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    double start = (double)now.tv_sec + (double)now.tv_nsec / 1e9 - g->uptime_s;
    rc |= nd_metrics_gauge(out, "process_resident_memory_bytes", "Resident memory size in bytes.",
                           (double)resident * (double)page);
    rc |= nd_metrics_gauge(out, "process_virtual_memory_bytes", "Virtual memory size in bytes.",
                           (double)size * (double)page);
    rc |= evbuffer_add_printf(out,
                              "# HELP process_cpu_seconds_total Total user and system CPU "
                              "time spent in seconds.\n"
                              "# TYPE process_cpu_seconds_total counter\n"
                              "process_cpu_seconds_total %.6f\n",
                              cpu) < 0;
    rc |= nd_metrics_gauge(out, "process_open_fds", "Number of open file descriptors.",
                           (double)count_open_fds());
    rc |= nd_metrics_gauge(out, "process_start_time_seconds",
                           "Start time of the process since unix epoch in seconds.", start);
    return rc;
}

int nd_metrics_render(nd_metrics *m, const nd_metrics_gauges *g, struct evbuffer *out)
{
    int rc = render_requests(m, out);
    rc |= render_events(m, out);
    rc |= nd_metrics_gauge(out, "neardup_documents", "Registered documents held in memory.",
                           (double)g->documents);
    rc |= nd_metrics_gauge(out, "neardup_index_entries", "Fingerprints in the index.",
                           (double)g->index_entries);
    rc |= nd_metrics_gauge(out, "neardup_stale_documents",
                           "Documents with another fingerprint version (kept out of the index).",
                           (double)g->stale_documents);
    rc |= nd_metrics_gauge(out, "neardup_pending_changes",
                           "Registrations and deletions waiting for a durable commit.",
                           (double)g->pending_changes);
    rc |= nd_metrics_gauge(out, "neardup_inflight_requests",
                           "Requests accepted and not yet answered.", (double)g->inflight);
    rc |= nd_metrics_gauge(out, "neardup_load_documents",
                           "Documents loaded from the store at start-up.", (double)g->load_done);
    rc |= nd_metrics_gauge(out, "neardup_load_expected_documents",
                           "Documents in the store at start-up.", (double)g->load_total);
    rc |= nd_metrics_gauge(out, "neardup_worker_threads", "Worker threads (event loops).",
                           (double)g->threads);
    rc |= nd_metrics_gauge(out, "neardup_ready", "1 when /readyz answers 200.", g->ready);
    rc |= nd_metrics_gauge(out, "neardup_loading", "1 while the index is being rebuilt.",
                           g->loading);
    rc |= nd_metrics_gauge(out, "neardup_draining", "1 after SIGTERM/SIGINT.", g->draining);
    rc |= nd_metrics_gauge(out, "neardup_store_writable", "1 while the last commit succeeded.",
                           g->store_writable);
    rc |= nd_metrics_gauge(out, "neardup_in_memory", "1 when registrations are not stored.",
                           g->in_memory);
    rc |= nd_metrics_gauge(out, "neardup_uptime_seconds", "Seconds since start.", g->uptime_s);
    for (unsigned i = 0; i < m->ncollectors; i++)
        rc |= m->collectors[i].fn(m->collectors[i].arg, out) < 0;
    rc |= render_build_info(out);
    rc |= render_process(g, out);
    return rc ? -ENOMEM : 0;
}
