/* test_webhooks.c - server/hooks: the subscriptions' file (every refusal
 * names its member), the signature against Python's hmac, the positions'
 * files, and the delivery thread against a real HTTP receiver on loopback
 * (libevent's evhttp on a thread of this test): order, signatures,
 * filters, retries after 503 and Retry-After, pause and resume, positions
 * kept across a restart, a cluster's rules (a refused compare-and-set
 * save loads the position again; a lease in doubt sends nothing). The events come from a small journal in this file
 * (the daemon's feed is tested by tests/integration/test_webhooks.py). */
#include "unit.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/thread.h>

#include "clock.h"
#include "hook_config.h"
#include "hook_position.h"
#include "hook_sign.h"
#include "webhooks.h"

static char tmpdir[] = "/tmp/nd_test_webhooks_XXXXXX";

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

/* Loads text as a webhooks file; returns the code, the reason in err. */
static int load_text(const char *text, nd_hook_config **c, char *err, size_t cap)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/hooks.json", tmpdir);
    write_file(path, text);
    return nd_hook_config_load(c, path, err, cap);
}

static void refused(const char *text, const char *needle)
{
    nd_hook_config *c = NULL;
    char err[1024] = "";
    int rc = load_text(text, &c, err, sizeof(err));
    CHECK(rc == -EINVAL && c == NULL, "%s: rc %d", text, rc);
    CHECK(strstr(err, needle) != NULL, "%s: \"%s\" lacks \"%s\"", text, err, needle);
}

static void test_config(void)
{
    refused("[]", "top level");
    refused("{\"subs\": []}", "unknown member \"subs\"");
    refused("{\"subscriptions\": [{\"url\": \"http://x/\"}]}", "name must be");
    refused("{\"subscriptions\": [{\"name\": \"a b\", \"url\": \"http://x/\"}]}", "name must be");
    refused("{\"subscriptions\": [{\"name\": \"a\", \"url\": \"ftp://x/\", "
            "\"secret\": \"0123456789abcdef\"}]}",
            "http or https");
    refused("{\"subscriptions\": [{\"name\": \"a\", \"url\": \"not a url\", "
            "\"secret\": \"0123456789abcdef\"}]}",
            "not a valid absolute URL");
    refused("{\"subscriptions\": [{\"name\": \"a\", \"url\": \"http://u:p@x/\", "
            "\"secret\": \"0123456789abcdef\"}]}",
            "credentials");
    refused(
        "{\"subscriptions\": [{\"name\": \"a\", \"url\": \"http://x/\", \"secret\": \"short\"}]}",
        "secret must be");
    refused("{\"subscriptions\": [{\"name\": \"a\", \"url\": \"http://x/\"}]}", "secret or");
    refused("{\"subscriptions\": [{\"name\": \"a\", \"url\": \"http://x/\", "
            "\"secret_file\": \"/nonexistent/secret\"}]}",
            "cannot open secret_file");
    refused("{\"subscriptions\": [{\"name\": \"a\", \"url\": \"http://x/\", "
            "\"secret\": \"0123456789abcdef\", \"types\": [\"copy.found\"]}]}",
            "not an event type");
    refused("{\"subscriptions\": [{\"name\": \"a\", \"url\": \"http://x/\", "
            "\"secret\": \"0123456789abcdef\", \"timeout_ms\": 5}]}",
            "timeout_ms must be");
    refused("{\"subscriptions\": [{\"name\": \"a\", \"url\": \"http://x/\", "
            "\"secret\": \"0123456789abcdef\", \"retries\": 5}]}",
            "unknown member \"retries\"");
    refused("{\"subscriptions\": [{\"name\": \"a\", \"url\": \"http://x/\", "
            "\"secret\": \"0123456789abcdef\"}, {\"name\": \"a\", \"url\": \"http://y/\", "
            "\"secret\": \"0123456789abcdef\"}]}",
            "two subscriptions are named a");
    refused("{\"subscriptions\": [{\"name\": \"a\", \"url\": \"https://x/\", "
            "\"secret\": \"0123456789abcdef\", \"ca_file\": \"/nonexistent/ca.pem\"}]}",
            "cannot read ca_file");
    refused("{\"subscriptions\": [", "line 1");

    char secret_path[256], text[1024];
    snprintf(secret_path, sizeof(secret_path), "%s/secret", tmpdir);
    write_file(secret_path, "a-secret-from-a-file\n");
    chmod(secret_path, 0600);
    snprintf(text, sizeof(text),
             "{\"subscriptions\": [{\"name\": \"review-queue\", \"url\": "
             "\"https://example.com/hook\", \"secret_file\": \"%s\", \"types\": "
             "[\"copy.detected\", \"claim.revoked\"], \"accounts\": [\"acme\"], "
             "\"timeout_ms\": 2000, \"backoff_cap_ms\": 5000, \"start\": \"oldest\"}]}",
             secret_path);
    nd_hook_config *c = NULL;
    char err[1024] = "";
    REQUIRE(load_text(text, &c, err, sizeof(err)) == 0, "%s", err);
    REQUIRE(c->nsubs == 1);
    const nd_hook_sub_config *s = &c->subs[0];
    CHECK(strcmp(s->name, "review-queue") == 0);
    CHECK(s->secret_len == 20 && memcmp(s->secret, "a-secret-from-a-file", 20) == 0);
    CHECK(s->timeout_ms == 2000 && s->backoff_base_ms == 1000 && s->backoff_cap_ms == 5000);
    CHECK(s->pause_after_s == 86400 && s->start_oldest);
    CHECK(nd_hook_config_wants(s, "copy.detected", "acme", 4));
    CHECK(!nd_hook_config_wants(s, "copy.detected", "other", 5));
    CHECK(!nd_hook_config_wants(s, "copy.detected", NULL, 0));
    CHECK(!nd_hook_config_wants(s, "policy.changed", "acme", 4));
    nd_hook_config_destroy(c);
}

static void test_sign(void)
{
    /* python3: hmac.new(b"0123456789abcdef-secret", b'1700000000.{"id":"evt_1"}',
     * hashlib.sha256).hexdigest() */
    char out[ND_HOOK_SIGNATURE_MAX];
    const char *body = "{\"id\":\"evt_1\"}";
    REQUIRE(nd_hook_sign((const unsigned char *)"0123456789abcdef-secret", 23, 1700000000, body,
                         strlen(body), out) == 0);
    CHECK(strcmp(out, "t=1700000000,v1=582eb7b77598feba531542374f259d0ba77f0be9485d87dea6125a830"
                      "1434e5a") == 0,
          "%s", out);
}

static void test_positions(void)
{
    char dir[300], err[512] = "";
    snprintf(dir, sizeof(dir), "%s/positions", tmpdir);
    nd_hook_positions *p = NULL;
    REQUIRE(nd_hook_positions_file_open(&p, dir, err, sizeof(err)) == 0, "%s", err);
    uint64_t seq = 7;
    CHECK(nd_hook_positions_load(p, "a", &seq) == -ENOENT);
    CHECK(nd_hook_positions_save(p, "a", 42) == 0);
    CHECK(nd_hook_positions_save(p, "a", 43) == 0);
    nd_hook_positions_close(p);
    REQUIRE(nd_hook_positions_file_open(&p, dir, err, sizeof(err)) == 0, "%s", err);
    CHECK(nd_hook_positions_load(p, "a", &seq) == 0 && seq == 43, "%" PRIu64, seq);
    char tmp[400];
    snprintf(tmp, sizeof(tmp), "%s/a.position.tmp", dir);
    CHECK(access(tmp, F_OK) != 0); /* renamed over, nothing left behind */
    nd_hook_positions_close(p);
}

/* ---- a journal and a receiver ---- */

#define EVENTS_MAX 400

typedef struct journal {
    pthread_mutex_t lock;
    size_t n;
    char json[EVENTS_MAX][160];
    char type[EVENTS_MAX][32];
    char account[EVENTS_MAX][16];
} journal;

static journal J = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void journal_add(const char *type, const char *account)
{
    pthread_mutex_lock(&J.lock);
    size_t i = J.n++;
    uint64_t seq = i + 1;
    snprintf(J.type[i], sizeof(J.type[i]), "%s", type);
    snprintf(J.account[i], sizeof(J.account[i]), "%s", account ? account : "");
    snprintf(J.json[i], sizeof(J.json[i]),
             "{\"id\":\"evt_%016" PRIx64 "\",\"seq\":%" PRIu64 ",\"type\":\"%s\",\"account\":%s%s%s"
             ",\"data\":{}}",
             seq, seq, type, account ? "\"" : "", account ? account : "null", account ? "\"" : "");
    pthread_mutex_unlock(&J.lock);
}

static int journal_after(void *src, uint64_t after, size_t limit,
                         int (*visit)(void *arg, const nd_hook_event *ev), void *arg)
{
    (void)src;
    pthread_mutex_lock(&J.lock);
    int rc = 0;
    for (size_t i = after, k = 0; i < J.n && k < limit && rc == 0; i++, k++) {
        nd_hook_event ev = {.seq = i + 1,
                            .type = J.type[i],
                            .json = J.json[i],
                            .json_len = strlen(J.json[i]),
                            .account = J.account[i][0] ? J.account[i] : NULL,
                            .account_len = strlen(J.account[i])};
        rc = visit(arg, &ev);
    }
    pthread_mutex_unlock(&J.lock);
    return rc < 0 ? rc : 0;
}

static uint64_t journal_latest(void *src)
{
    (void)src;
    pthread_mutex_lock(&J.lock);
    uint64_t n = J.n;
    pthread_mutex_unlock(&J.lock);
    return n;
}

#define SECRET "receiver-shared-secret"

typedef struct receiver {
    pthread_mutex_t lock;
    struct event_base *base;
    struct evhttp *http;
    pthread_t thread;
    int port;
    int fail_next;           /* answer 503 to this many more */
    bool fail_all;           /* answer 500 to every request */
    const char *retry_after; /* with the 503s */
    size_t n;
    uint64_t seqs[EVENTS_MAX * 4];
    char ids[EVENTS_MAX * 4][32];
    int64_t at_ms[EVENTS_MAX * 4];
    size_t bad_signatures, requests;
} receiver;

static receiver R = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void receive_cb(struct evhttp_request *req, void *arg)
{
    (void)arg;
    struct evkeyvalq *h = evhttp_request_get_input_headers(req);
    const char *sig = evhttp_find_header(h, "Neardup-Signature");
    const char *id = evhttp_find_header(h, "Neardup-Event-Id");
    const char *ct = evhttp_find_header(h, "Content-Type");
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    char body[512] = "";
    if (len < sizeof(body))
        evbuffer_copyout(in, body, len);
    bool good = false;
    long long t = 0;
    if (sig && sscanf(sig, "t=%lld,", &t) == 1) {
        char want[ND_HOOK_SIGNATURE_MAX];
        good = nd_hook_sign((const unsigned char *)SECRET, strlen(SECRET), t, body, len, want) ==
                   0 &&
               strcmp(want, sig) == 0 && llabs((long long)time(NULL) - t) < 60;
    }
    good = good && id && ct && strcmp(ct, "application/json") == 0 && strstr(body, id);
    const char *seqp = strstr(body, "\"seq\":");
    pthread_mutex_lock(&R.lock);
    R.requests++;
    int status = 200;
    if (!good) {
        R.bad_signatures++;
        status = 400;
    } else if (R.fail_all) {
        status = 500;
    } else if (R.fail_next > 0) {
        R.fail_next--;
        status = 503;
        if (R.retry_after)
            evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", R.retry_after);
    } else if (R.n < sizeof(R.seqs) / sizeof(R.seqs[0]) && seqp) {
        R.seqs[R.n] = strtoull(seqp + 6, NULL, 10);
        snprintf(R.ids[R.n], sizeof(R.ids[R.n]), "%s", id);
        R.at_ms[R.n++] = nd_clock_ms();
    }
    pthread_mutex_unlock(&R.lock);
    evhttp_send_reply(req, status, status == 200 ? "OK" : "No", NULL);
}

static void *receiver_main(void *arg)
{
    (void)arg;
    event_base_loop(R.base, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

static int receiver_start(void)
{
    R.base = event_base_new();
    R.http = evhttp_new(R.base);
    evhttp_set_gencb(R.http, receive_cb, NULL);
    struct evhttp_bound_socket *sock = evhttp_bind_socket_with_handle(R.http, "127.0.0.1", 0);
    if (!sock)
        return -1;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    getsockname(evhttp_bound_socket_get_fd(sock), (struct sockaddr *)&ss, &sl);
    R.port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    return pthread_create(&R.thread, NULL, receiver_main, NULL);
}

static void receiver_stop(void)
{
    event_base_loopbreak(R.base);
    pthread_join(R.thread, NULL);
    evhttp_free(R.http);
    event_base_free(R.base);
}

static size_t received(void)
{
    pthread_mutex_lock(&R.lock);
    size_t n = R.n;
    pthread_mutex_unlock(&R.lock);
    return n;
}

/* Waits (at most ms) until the receiver holds n deliveries. */
static bool wait_received(size_t n, int ms)
{
    for (int64_t end = nd_clock_ms() + ms; nd_clock_ms() < end; usleep(10000))
        if (received() >= n)
            return true;
    return received() >= n;
}

static nd_webhooks *start_delivery(const char *extra, const char *posdir)
{
    char text[1024], err[1024] = "";
    snprintf(text, sizeof(text),
             "{\"subscriptions\": [{\"name\": \"t\", \"url\": \"http://127.0.0.1:%d/hook\", "
             "\"secret\": \"" SECRET "\", \"start\": \"oldest\"%s}]}",
             R.port, extra);
    nd_hook_config *c = NULL;
    if (load_text(text, &c, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s\n", err);
        return NULL;
    }
    nd_hook_positions *pos = NULL;
    if (nd_hook_positions_file_open(&pos, posdir, err, sizeof(err)) < 0)
        return NULL;
    nd_hook_source src = {.after = journal_after, .latest = journal_latest, .src = NULL};
    nd_webhooks *wh = NULL;
    if (nd_webhooks_create(&wh, c, &src, pos, err, sizeof(err)) < 0 || nd_webhooks_start(wh) < 0) {
        fprintf(stderr, "%s\n", err);
        return NULL;
    }
    return wh;
}

static void test_delivery(void)
{
    char posdir[300];
    snprintf(posdir, sizeof(posdir), "%s/delivery", tmpdir);
    for (int i = 0; i < 40; i++)
        journal_add(i % 4 == 3 ? "policy.changed" : "copy.detected", i % 5 == 4 ? "other" : "acme");
    R.fail_next = 3; /* the first event fails three times: retried in order */
    nd_webhooks *wh = start_delivery(", \"backoff_base_ms\": 20, \"backoff_cap_ms\": 100", posdir);
    REQUIRE(wh);
    CHECK(wait_received(40, 10000), "%zu of 40 delivered", received());
    for (int i = 0; i < 20; i++) /* more while it runs: woken or polled */
        journal_add("claim.revoked", NULL);
    nd_webhooks_wake(wh);
    CHECK(wait_received(60, 10000), "%zu of 60 delivered", received());
    pthread_mutex_lock(&R.lock);
    bool in_order = R.n == 60;
    for (size_t i = 0; i < R.n && in_order; i++)
        in_order = R.seqs[i] == i + 1;
    CHECK(in_order, "%zu deliveries, not 1..60 in order", R.n);
    CHECK(R.bad_signatures == 0);
    CHECK(R.requests == 63, "%zu requests", R.requests);
    pthread_mutex_unlock(&R.lock);
    nd_hook_status st;
    nd_webhooks_status(wh, 0, &st);
    CHECK(st.delivered == 60 && st.failed == 3 && st.retried == 3, "%" PRIu64 " %" PRIu64,
          st.delivered, st.failed);
    CHECK(st.position == 60 && strcmp(st.state, "idle") == 0, "%" PRIu64 " %s", st.position,
          st.state);
    nd_webhooks_destroy(wh); /* saves the position */

    /* A restart delivers only what came after. */
    journal_add("import.finished", NULL);
    wh = start_delivery(", \"backoff_base_ms\": 20", posdir);
    REQUIRE(wh);
    CHECK(wait_received(61, 5000));
    usleep(300000);
    CHECK(received() == 61, "%zu: some sent twice", received());
    nd_webhooks_destroy(wh);
}

static void test_filters(void)
{
    char posdir[300];
    snprintf(posdir, sizeof(posdir), "%s/filters", tmpdir);
    size_t before = received();
    nd_webhooks *wh = start_delivery(", \"types\": [\"copy.detected\"], \"accounts\": [\"acme\"]",
                                     posdir);
    REQUIRE(wh);
    size_t want = 0;
    for (size_t i = 0; i < J.n; i++)
        want += strcmp(J.type[i], "copy.detected") == 0 && strcmp(J.account[i], "acme") == 0;
    CHECK(wait_received(before + want, 5000));
    usleep(300000);
    CHECK(received() == before + want, "%zu, want %zu", received() - before, want);
    nd_hook_status st;
    nd_webhooks_status(wh, 0, &st);
    CHECK(st.position == J.n && st.latest == J.n, "skipped events advance the position");
    nd_webhooks_destroy(wh);
}

static void test_retry_after_and_pause(void)
{
    char posdir[300];
    snprintf(posdir, sizeof(posdir), "%s/pause", tmpdir);
    size_t before = received();
    pthread_mutex_lock(&R.lock);
    R.fail_next = 1;
    R.retry_after = "1"; /* seconds: later than the backoff's 20 ms at most */
    pthread_mutex_unlock(&R.lock);
    int64_t t0 = nd_clock_ms();
    nd_webhooks *wh = start_delivery(", \"backoff_base_ms\": 20, \"backoff_cap_ms\": 20, "
                                     "\"pause_after_s\": 1",
                                     posdir);
    REQUIRE(wh);
    CHECK(wait_received(before + 1, 5000));
    int64_t waited = R.at_ms[before] - t0;
    CHECK(waited >= 950, "Retry-After: 1 honoured: first delivery after %" PRId64 " ms", waited);
    nd_hook_status st = {0};
    for (int64_t end = nd_clock_ms() + 5000; nd_clock_ms() < end && st.position < J.n;
         usleep(10000))
        nd_webhooks_status(wh, 0, &st);
    CHECK(st.position == J.n);
    nd_webhooks_destroy(wh);

    /* Failing for pause_after_s: paused, then resumed. */
    pthread_mutex_lock(&R.lock);
    R.retry_after = NULL;
    R.fail_all = true;
    pthread_mutex_unlock(&R.lock);
    journal_add("document.deleted", "acme");
    wh = start_delivery(", \"backoff_base_ms\": 20, \"backoff_cap_ms\": 50, \"pause_after_s\": 1",
                        posdir);
    REQUIRE(wh);
    for (int64_t end = nd_clock_ms() + 5000; nd_clock_ms() < end; usleep(20000)) {
        nd_webhooks_status(wh, 0, &st);
        if (strcmp(st.state, "paused") == 0)
            break;
    }
    CHECK(strcmp(st.state, "paused") == 0, "state %s", st.state);
    CHECK(st.inflight == J.n && st.last_status == 500 && st.failing_since_us > 0);
    uint64_t failed = st.failed;
    usleep(300000);
    nd_webhooks_status(wh, 0, &st);
    CHECK(st.failed == failed, "a paused subscription is not retried");
    pthread_mutex_lock(&R.lock);
    R.fail_all = false;
    pthread_mutex_unlock(&R.lock);
    size_t n = received(); /* before the resume: its delivery may come at once */
    CHECK(nd_webhooks_resume(wh, "nope", 4, NULL) == -ENOENT);
    CHECK(nd_webhooks_resume(wh, "t", 1, &st) == 0 && strcmp(st.state, "resuming") == 0);
    CHECK(wait_received(n + 1, 5000), "delivered after resume");
    nd_webhooks_status(wh, 0, &st);
    CHECK(strcmp(st.state, "idle") == 0 && st.position == J.n, "%s", st.state);
    nd_webhooks_destroy(wh);
}

/* ---- a cluster's positions, faked: a lease and compare-and-set saves ---- */

typedef struct fake_cluster {
    nd_hook_positions head;
    pthread_mutex_t lock;
    uint64_t value, rev; /* the shared bucket's key */
    uint64_t seen_rev;   /* what this node last read or wrote */
    bool have;
    _Atomic int lead, held;
    _Atomic int stale, back; /* saves refused; saves that would have moved it back */
} fake_cluster;

static fake_cluster FC = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int fake_load(nd_hook_positions *p, const char *sub, uint64_t *seq)
{
    (void)p, (void)sub;
    pthread_mutex_lock(&FC.lock);
    int rc = FC.have ? 0 : -ENOENT;
    *seq = FC.value;
    FC.seen_rev = FC.rev;
    pthread_mutex_unlock(&FC.lock);
    return rc;
}

static int fake_save(nd_hook_positions *p, const char *sub, uint64_t seq)
{
    (void)p, (void)sub;
    pthread_mutex_lock(&FC.lock);
    int rc = 0;
    if (FC.have && FC.seen_rev != FC.rev) {
        FC.stale++;
        rc = -ESTALE;
    } else {
        if (FC.have && seq < FC.value)
            FC.back++;
        FC.value = seq;
        FC.seen_rev = ++FC.rev;
        FC.have = true;
    }
    pthread_mutex_unlock(&FC.lock);
    return rc;
}

static int fake_lead(nd_hook_positions *p)
{
    (void)p;
    return atomic_load(&FC.lead);
}

static int fake_held(nd_hook_positions *p)
{
    (void)p;
    return atomic_load(&FC.lead) && atomic_load(&FC.held);
}

static void fake_close(nd_hook_positions *p)
{
    (void)p;
}

static const nd_hook_positions_ops fake_ops = {.name = "fake",
                                               .load = fake_load,
                                               .save = fake_save,
                                               .lead = fake_lead,
                                               .held = fake_held,
                                               .close = fake_close};

static uint64_t fake_value(void)
{
    pthread_mutex_lock(&FC.lock);
    uint64_t v = FC.value;
    pthread_mutex_unlock(&FC.lock);
    return v;
}

/* Waits (at most ms) for the subscription's state and position. */
static bool wait_status(nd_webhooks *wh, const char *state, uint64_t position, int ms)
{
    nd_hook_status st;
    for (int64_t end = nd_clock_ms() + ms; nd_clock_ms() < end; usleep(10000)) {
        nd_webhooks_status(wh, 0, &st);
        if (strcmp(st.state, state) == 0 && st.position == position)
            return true;
    }
    return false;
}

/* Audit G08's rules, without NATS: a save refused because another node
 * wrote the position (-ESTALE) stops delivery and loads the position again
 * (never writes over it, never resends what the other node delivered); a
 * lease in doubt (held 0) sends nothing. */
static void test_cluster_positions(void)
{
    char text[1024], err[1024] = "";
    snprintf(text, sizeof(text),
             "{\"subscriptions\": [{\"name\": \"t\", \"url\": \"http://127.0.0.1:%d/hook\", "
             "\"secret\": \"" SECRET "\", \"start\": \"latest\", \"backoff_base_ms\": 20}]}",
             R.port);
    nd_hook_config *c = NULL;
    REQUIRE(load_text(text, &c, err, sizeof(err)) == 0, "%s", err);
    FC.head.ops = &fake_ops;
    atomic_store(&FC.lead, 1);
    atomic_store(&FC.held, 1);
    nd_hook_source src = {.after = journal_after, .latest = journal_latest, .src = NULL};
    nd_webhooks *wh = NULL;
    REQUIRE(nd_webhooks_create(&wh, c, &src, &FC.head, err, sizeof(err)) == 0, "%s", err);
    REQUIRE(nd_webhooks_start(wh) == 0);
    uint64_t base = J.n; /* start: latest */
    size_t before = received();
    journal_add("copy.detected", "acme"); /* base + 1 */
    nd_webhooks_wake(wh);
    CHECK(wait_received(before + 1, 5000));
    CHECK(wait_status(wh, "idle", base + 1, 2000));
    for (int64_t end = nd_clock_ms() + 2000; nd_clock_ms() < end && fake_value() != base + 1;)
        usleep(10000);
    CHECK(fake_value() == base + 1, "saved %" PRIu64, fake_value());

    /* Another node delivers up to base + 10 and writes it. */
    pthread_mutex_lock(&FC.lock);
    FC.value = base + 10;
    FC.rev++;
    pthread_mutex_unlock(&FC.lock);
    journal_add("copy.detected", "acme"); /* base + 2: sent, its save refused */
    nd_webhooks_wake(wh);
    CHECK(wait_received(before + 2, 5000));
    CHECK(wait_status(wh, "idle", base + 10, 3000), "position loaded again after -ESTALE");
    CHECK(atomic_load(&FC.stale) >= 1 && fake_value() == base + 10);
    for (int i = 3; i <= 12; i++)
        journal_add("copy.detected", "acme");
    nd_webhooks_wake(wh);
    CHECK(wait_received(before + 4, 5000));
    CHECK(wait_status(wh, "idle", base + 12, 3000));
    pthread_mutex_lock(&R.lock);
    bool resumed = R.n == before + 4 && R.seqs[before + 2] == base + 11 &&
                   R.seqs[before + 3] == base + 12;
    pthread_mutex_unlock(&R.lock);
    CHECK(resumed, "after the reload: only base+11, base+12 (%zu sent)", received() - before);
    usleep(200000);
    CHECK(fake_value() == base + 12 && atomic_load(&FC.back) == 0, "%" PRIu64, fake_value());

    /* The lease in doubt: nothing is sent until it is confirmed. */
    atomic_store(&FC.held, 0);
    size_t n = received();
    journal_add("copy.detected", "acme");
    nd_webhooks_wake(wh);
    usleep(400000);
    CHECK(received() == n, "sent while the lease was in doubt");
    atomic_store(&FC.held, 1);
    CHECK(wait_received(n + 1, 5000), "sent once confirmed");
    nd_webhooks_destroy(wh);
}

int main(void)
{
    evthread_use_pthreads();
    if (!mkdtemp(tmpdir))
        return 1;
    UNIT_RUN(test_config);
    UNIT_RUN(test_sign);
    UNIT_RUN(test_positions);
    if (receiver_start() != 0)
        return 1;
    UNIT_RUN(test_delivery);
    UNIT_RUN(test_filters);
    UNIT_RUN(test_retry_after_and_pause);
    UNIT_RUN(test_cluster_positions);
    receiver_stop();
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    if (system(cmd) != 0)
        return 1;
    return unit_summary("webhooks");
}
