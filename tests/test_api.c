/* test_api.c - server/api/: the handlers in process, behind the real
 * dispatch of net/http.c (route table, 404, 405, the routes' auth levels),
 * over an in-memory store and registry; --help's endpoints against the
 * route table. One worker listens on 127.0.0.1
 * port 0 and the test speaks raw HTTP/1.1 to it from its own thread.
 *
 * (A socketpair handed to evhttp would spare the listener, but the
 * installed libevent 2.1.12 does not export evhttp_get_request(): it is
 * internal to http.c there. Loopback TCP is the public way in.) */
#include "unit.h"

#include "api.h"
#include "backfill.h"
#include "corpus_local.h"
#include "log.h"
#include "routes.h"
#include "store_memory.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define OPERATOR "op-ooooooooooooooooooooooooooooo"
#define ALICE "alice-aaaaaaaaaaaaaaaaaaaaaaaaaa"

static nd_config cfg;
static nd_api api;
static nd_store *store;
static uint16_t port;

typedef struct answer {
    int status;
    char head[4096];
    char body[65536];
} answer;

/* Sends one request (Connection: close) and reads the whole answer.
 * Returns 0 or -1. */
static int ask(const char *method, const char *path, const char *token, const char *body, answer *a)
{
    memset(a, 0, sizeof(*a));
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        close(fd);
        return -1;
    }
    static char req[1 << 16];
    size_t blen = body ? strlen(body) : 0;
    int n = snprintf(req, sizeof(req),
                     "%s %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n%s%s%s"
                     "%sContent-Length: %zu\r\n\r\n%s",
                     method, path, token ? "Authorization: Bearer " : "", token ? token : "",
                     token ? "\r\n" : "", body ? "Content-Type: application/json\r\n" : "", blen,
                     body ? body : "");
    if (n < 0 || (size_t)n >= sizeof(req) || write(fd, req, (size_t)n) != n) {
        close(fd);
        return -1;
    }
    static char in[sizeof(a->head) + sizeof(a->body)];
    size_t got = 0;
    ssize_t r;
    while (got < sizeof(in) - 1 && (r = read(fd, in + got, sizeof(in) - 1 - got)) > 0)
        got += (size_t)r;
    close(fd);
    in[got] = 0;
    char *end = strstr(in, "\r\n\r\n");
    if (!end || sscanf(in, "HTTP/1.1 %d", &a->status) != 1)
        return -1;
    size_t hl = (size_t)(end - in);
    if (hl >= sizeof(a->head))
        hl = sizeof(a->head) - 1;
    memcpy(a->head, in, hl);
    snprintf(a->body, sizeof(a->body), "%s", end + 4);
    return 0;
}

/* A text long enough to be judged (cfg.min_chars). */
static const char *long_text(void)
{
    static char t[2048];
    if (!t[0])
        for (int i = 0; i < 40; i++)
            snprintf(t + strlen(t), sizeof(t) - strlen(t),
                     "Sentence %d of a test document about rivers and their bridges. ", i);
    return t;
}

static void test_probes(void)
{
    answer a;
    REQUIRE(ask("GET", "/healthz", NULL, NULL, &a) == 0);
    CHECK(a.status == 200, "%d", a.status);
    CHECK(strcmp(a.body, "{\"status\":\"ok\"}\n") == 0, "%s", a.body);
    REQUIRE(ask("GET", "/readyz", NULL, NULL, &a) == 0);
    CHECK(a.status == 200 && strstr(a.body, "\"ready\""), "%d %s", a.status, a.body);
}

static void test_not_found_and_method(void)
{
    answer a;
    REQUIRE(ask("GET", "/nope", NULL, NULL, &a) == 0);
    CHECK(a.status == 404, "%d", a.status);
    CHECK(strstr(a.body, "\"not_found\"") != NULL, "%s", a.body);
    REQUIRE(ask("DELETE", "/healthz", NULL, NULL, &a) == 0);
    CHECK(a.status == 405, "%d", a.status);
    CHECK(strstr(a.head, "Allow: GET, HEAD") != NULL, "%s", a.head);
    CHECK(strstr(a.body, "\"method_not_allowed\"") != NULL, "%s", a.body);
    REQUIRE(ask("GET", "/fingerprint", NULL, NULL, &a) == 0);
    CHECK(a.status == 405 && strstr(a.head, "Allow: POST"), "%d %s", a.status, a.head);
}

static void test_fingerprint(void)
{
    answer a;
    REQUIRE(ask("POST", "/fingerprint", NULL, "{\"text\":\"hello world\"}", &a) == 0);
    CHECK(a.status == 200, "%d %s", a.status, a.body);
    CHECK(strstr(a.body, "\"simhash\":\"") != NULL, "%s", a.body);
    REQUIRE(ask("POST", "/fingerprint", NULL, "{\"text\": 5}", &a) == 0);
    CHECK(a.status == 400 && strstr(a.body, "\"invalid_field\""), "%d %s", a.status, a.body);
}

static void test_check_and_register(void)
{
    char body[4096];
    answer a;
    snprintf(body, sizeof(body), "{\"text\":\"%s\"}", long_text());
    REQUIRE(ask("POST", "/check-original", NULL, body, &a) == 0);
    CHECK(a.status == 200, "%d %s", a.status, a.body);
    CHECK(strstr(a.body, "\"verdict\":\"original\"") != NULL, "%s", a.body);
    /* A registration waits for the store's commit (pending.c). */
    snprintf(body, sizeof(body),
             "{\"id\":\"doc-1\",\"account\":\"alice\",\"register\":true,\"text\":\"%s\"}",
             long_text());
    REQUIRE(ask("POST", "/check-original", NULL, body, &a) == 0);
    CHECK(a.status == 401, "a registration needs a token: %d %s", a.status, a.body);
    REQUIRE(ask("POST", "/check-original", ALICE, body, &a) == 0);
    CHECK(a.status == 200, "%d %s", a.status, a.body);
    snprintf(body, sizeof(body), "{\"text\":\"%s\"}", long_text());
    REQUIRE(ask("POST", "/check-original", NULL, body, &a) == 0);
    CHECK(a.status == 200 && strstr(a.body, "\"verdict\":\"duplicate\"") &&
              strstr(a.body, "\"doc-1\""),
          "%d %s", a.status, a.body);
    REQUIRE(ask("GET", "/documents/doc-1", NULL, NULL, &a) == 0);
    CHECK(a.status == 200 && strstr(a.body, "\"id\":\"doc-1\""), "%d %s", a.status, a.body);
    REQUIRE(ask("POST", "/check-original", NULL, "{\"text\":\"too short\"}", &a) == 0);
    CHECK(a.status == 422 && strstr(a.body, "\"text_too_short\""), "%d %s", a.status, a.body);
    /* A deletion by a token that acts for the account, after its commit. */
    REQUIRE(ask("DELETE", "/documents/doc-1", ALICE, NULL, &a) == 0);
    CHECK(a.status == 200 && strstr(a.body, "\"deleted\":true"), "%d %s", a.status, a.body);
    REQUIRE(ask("GET", "/documents/doc-1", NULL, NULL, &a) == 0);
    CHECK(a.status == 404, "%d %s", a.status, a.body);
}

static void test_auth_levels(void)
{
    answer a;
    /* Operator level: 401 without a token, 403 with an account's. */
    REQUIRE(ask("GET", "/replica", NULL, NULL, &a) == 0);
    CHECK(a.status == 401, "%d", a.status);
    CHECK(strstr(a.head, "WWW-Authenticate: Bearer") != NULL, "%s", a.head);
    REQUIRE(ask("GET", "/replica", "not-a-token-xxxxxxxxxxxxxxxxxxxxx", NULL, &a) == 0);
    CHECK(a.status == 401 && strstr(a.head, "invalid_token"), "%d %s", a.status, a.head);
    REQUIRE(ask("GET", "/replica", ALICE, NULL, &a) == 0);
    CHECK(a.status == 403 && strstr(a.body, "\"forbidden\""), "%d %s", a.status, a.body);
    REQUIRE(ask("GET", "/replica", OPERATOR, NULL, &a) == 0);
    CHECK(a.status == 200 && strstr(a.body, "\"replicated\":false"), "%d %s", a.status, a.body);
    /* Token level: any valid token. */
    REQUIRE(ask("GET", "/audit", NULL, NULL, &a) == 0);
    CHECK(a.status == 401, "%d", a.status);
    REQUIRE(ask("GET", "/audit", OPERATOR, NULL, &a) == 0);
    CHECK(a.status == 200, "%d %s", a.status, a.body);
    /* Read level: open without --auth-all. */
    REQUIRE(ask("GET", "/metrics", NULL, NULL, &a) == 0);
    CHECK(a.status == 200, "%d", a.status);
    CHECK(strstr(a.body, "neardup_http_requests_total{route=\"/replica\",code=\"200\"} 1") != NULL,
          "/replica has its own label");
    CHECK(strstr(a.body, "neardup_http_requests_total{route=\"/audit\",code=\"200\"} 1") != NULL,
          "/audit has its own label");
}

/* The method bit of "GET", "POST"... (0: none of the API's). */
static int method_bit(const char *m)
{
    static const struct {
        const char *name;
        int bit;
    } bits[] = {{"GET", EVHTTP_REQ_GET},     {"POST", EVHTTP_REQ_POST},
                {"PUT", EVHTTP_REQ_PUT},     {"PATCH", EVHTTP_REQ_PATCH},
                {"DELETE", EVHTTP_REQ_DELETE}};
    for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]); i++)
        if (strcmp(m, bits[i].name) == 0)
            return bits[i].bit;
    return 0;
}

typedef struct help_line {
    char method[8], path[64];
} help_line;

/* Asks for one endpoint --help lists, {id} a registered document's and
 * {name} a subscription's that does not exist: the real dispatch must take
 * it to a handler (not 405, not 404 but for the subscription). */
static void ask_listed(const help_line *l)
{
    char path[128];
    const char *brace = strchr(l->path, '{');
    if (brace)
        snprintf(path, sizeof(path), "%.*s%s%s", (int)(brace - l->path), l->path,
                 strncmp(brace, "{id}", 4) == 0 ? "help-1" : "none", strchr(brace, '}') + 1);
    else
        snprintf(path, sizeof(path), "%s", l->path);
    bool body = method_bit(l->method) & (EVHTTP_REQ_POST | EVHTTP_REQ_PUT | EVHTTP_REQ_PATCH);
    answer a;
    REQUIRE(ask(l->method, path, OPERATOR, body ? "{}" : NULL, &a) == 0);
    CHECK(a.status != 405 && (a.status != 404 || strstr(l->path, "{name}")),
          "--help lists %s %s; it answers %d %s", l->method, l->path, a.status, a.body);
}

/* `neardupd --help`'s endpoints (nd_api_usage()) and the route table
 * (nd_api_routes) agree: each row's path with each method it admits is
 * listed (a prefix row's by a path under it), and each line listed reaches
 * its handler through the real dispatch. */
static void test_help_lists_every_route(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    REQUIRE(f != NULL);
    nd_api_usage(f);
    fclose(f);
    static help_line lines[64];
    size_t n = 0;
    char *save = NULL;
    for (char *l = strtok_r(text, "\n", &save); l && n < 64; l = strtok_r(NULL, "\n", &save))
        if (sscanf(l, "  %7s %63s", lines[n].method, lines[n].path) == 2 &&
            method_bit(lines[n].method) && lines[n].path[0] == '/')
            n++;
    free(text);
    CHECK(n >= 20, "%zu endpoints listed", n);
    static const char *const names[] = {"GET", "POST", "PUT", "PATCH", "DELETE"};
    for (const nd_route_def *d = nd_api_routes; d->path; d++) {
        CHECK(!(d->methods & EVHTTP_REQ_GET) || (d->methods & EVHTTP_REQ_HEAD),
              "%s: GET without HEAD, which --help says it answers", d->path);
        for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
            if (!(d->methods & method_bit(names[k])))
                continue;
            size_t plen = strlen(d->path), i = 0;
            while (i < n && !(strcmp(lines[i].method, names[k]) == 0 &&
                              (d->prefix ? strncmp(lines[i].path, d->path, plen) == 0
                                         : strcmp(lines[i].path, d->path) == 0)))
                i++;
            CHECK(i < n, "--help does not list %s %s%s", names[k], d->path, d->prefix ? "..." : "");
        }
    }
    char body[4096];
    answer a;
    snprintf(body, sizeof(body), "{\"id\":\"help-1\",\"register\":true,\"text\":\"%s\"}",
             long_text());
    REQUIRE(ask("POST", "/check-original", OPERATOR, body, &a) == 0);
    REQUIRE(a.status == 200, "%d %s", a.status, a.body);
    for (int pass = 0; pass < 2; pass++) /* the deletions last */
        for (size_t i = 0; i < n; i++)
            if ((strcmp(lines[i].method, "DELETE") == 0) == (pass == 1))
                ask_listed(&lines[i]);
}

int main(void)
{
    nd_log_set_level(ND_LOG_ERROR);
    nd_config_defaults(&cfg);
    snprintf(cfg.listen_host, sizeof(cfg.listen_host), "127.0.0.1");
    cfg.listen_port = 0;
    cfg.in_memory = true;
    cfg.threads = 1;
    static const char tokens[] = "operator " OPERATOR " operator\n"
                                 "alice-cms " ALICE " accounts=alice\n";
    nd_auth *auth = NULL;
    nd_fingerprinter *fp = NULL;
    nd_sketcher *sk = NULL;
    nd_metrics *metrics = NULL;
    nd_registry *reg = NULL;
    nd_backfill *bf = NULL;
    nd_http *http = NULL;
    char err[256];
    nd_registry_options o = {.max_matches = cfg.max_matches};
    if (nd_auth_parse(&auth, tokens, strlen(tokens), "test", err, sizeof(err)) < 0 ||
        nd_fingerprinter_create(&fp) < 0 || nd_sketcher_create(&sk) < 0 ||
        nd_metrics_create(&metrics, cfg.threads) < 0 ||
        nd_backfill_create(&bf) < 0 || nd_store_memory_open(&store) < 0 ||
        nd_registry_create(&reg, store, &o) < 0) {
        fprintf(stderr, "cannot set up: %s\n", err);
        return 1;
    }
    nd_registry_set_loaded(reg);
    nd_corpus *corpus = NULL;
    if (nd_corpus_local_wrap(&corpus, reg, store) < 0)
        return 1;
    api = (nd_api){.cfg = &cfg,
                   .fp = fp,
                   .sk = sk,
                   .corpus = corpus,
                   .metrics = metrics,
                   .auth = auth,
                   .backfill = bf};
    nd_http_hooks hooks = {.routes = nd_api_routes,
                           .admit = nd_api_admit,
                           .app = &api,
                           .worker_init = nd_api_worker_init,
                           .worker_finish = nd_api_worker_finish};
    if (nd_http_create(&http, &cfg, &hooks, metrics) < 0)
        return 1;
    api.http = http;
    if (nd_http_start(http) < 0)
        return 1;
    port = nd_http_port(http);

    UNIT_RUN(test_probes);
    UNIT_RUN(test_not_found_and_method);
    UNIT_RUN(test_fingerprint);
    UNIT_RUN(test_check_and_register);
    UNIT_RUN(test_auth_levels);
    UNIT_RUN(test_help_lists_every_route);

    nd_http_refuse(http);
    nd_registry_shutdown(reg);
    nd_backfill_stop(bf);
    nd_store_close(store);
    nd_http_wait_idle(http, 2000);
    nd_http_stop(http);
    nd_http_finish(http);
    nd_http_destroy(http);
    nd_registry_destroy(reg);
    nd_metrics_destroy(metrics);
    nd_fingerprinter_destroy(fp);
    nd_sketcher_destroy(sk);
    nd_auth_destroy(auth);
    nd_backfill_destroy(bf);
    return unit_summary("api");
}
