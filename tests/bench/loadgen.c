/* loadgen: a lean closed-loop HTTP/1.1 load generator for the register-on
 * benchmark (tests/bench/bench_http.py).
 *
 * Why not only wrk: on a 2-core machine the client shares the cores with
 * the server. wrk builds each register-on body in Lua and toggles its write
 * interest with epoll_ctl twice per request; measured here it costs about
 * 23 us of CPU per request, a third of what the server spends. loadgen
 * sends the same kind of requests (four random paragraphs of the pool
 * under a new id, register true) with one write and one read per request
 * and no epoll_ctl after connecting, so that more of the machine is left
 * to the server. bench_http.py prints the client's CPU per request next to
 * the server's for both clients.
 *
 * Usage: loadgen --port P (--paragraphs FILE | --texts FILE [--register 0|1])
 *                [--connections 64] [--threads 2] [--duration 10] [--seed S]
 * FILE holds one paragraph per line, already escaped for a JSON string.
 * --paragraphs: every request four random paragraphs of FILE under a new
 * id, register true (the fixed pool: bench_archive.py's "worst case").
 * --texts: every line of FILE a whole text, sent in the file's order (the
 * threads share one cursor; it wraps at the end), register false unless
 * --register 1 (then under a new id): bench_archive.py's stream.
 * Prints one JSON object: requests, seconds, rps, p50_ms, p99_ms, status
 * counts, errors, cpu_s (this process, user + system). Exits 1 on a usage
 * or set-up error, 0 otherwise (errors are counted, not fatal). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RESP_CAP (256u << 10) /* a response larger than this is an error */
#define MAX_STATUS 600

typedef struct {
    char **text;
    size_t *len;
    size_t n;
} pool;

typedef struct conn {
    int fd;
    char *req; /* request being written */
    size_t req_len, req_off;
    char *resp;
    size_t resp_len;
    uint64_t sent_ns;
    uint64_t serial;
} conn;

typedef struct {
    int index;
    int nconns;
    uint64_t rng;
    uint64_t stop_ns;
    const pool *paras;
    bool texts;    /* --texts: paras holds whole texts, sent in order */
    bool register_; /* with texts: register true */
    uint16_t port;
    /* results */
    uint64_t requests, errors;
    uint64_t status[MAX_STATUS];
    uint32_t *lat_us;
    size_t nlat, caplat;
} worker;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t next_rand(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static int load_pool(const char *path, pool *p)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    size_t alloc = 0;
    while ((n = getline(&line, &cap, f)) > 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (n == 0)
            continue;
        if (p->n == alloc) {
            alloc = alloc ? 2 * alloc : 1024;
            p->text = realloc(p->text, alloc * sizeof(*p->text));
            p->len = realloc(p->len, alloc * sizeof(*p->len));
            if (!p->text || !p->len)
                return -1;
        }
        p->text[p->n] = strndup(line, (size_t)n);
        p->len[p->n++] = (size_t)n;
    }
    free(line);
    fclose(f);
    return p->n >= 4 ? 0 : -1;
}

static size_t append(char *dst, size_t off, const char *s, size_t n)
{
    memcpy(dst + off, s, n);
    return off + n;
}

/* Writes the HTTP head of a request whose body has body_len bytes and
 * starts with head[0..hn) into c->req; returns the offset after them. */
static size_t start_request_text(const worker *w, conn *c, const char *head, int hn,
                                 size_t body_len)
{
    int rn = snprintf(c->req, 256,
                      "POST /check-original HTTP/1.1\r\nHost: 127.0.0.1:%u\r\n"
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                      (unsigned)w->port, body_len + (size_t)hn);
    return append(c->req, (size_t)rn, head, (size_t)hn);
}

static size_t text_cursor; /* --texts: the next line to send (atomic) */

/* --texts: the next line of the file as a whole text. */
static void build_text_request(worker *w, conn *c, size_t ci)
{
    const pool *p = w->paras;
    size_t i = __atomic_fetch_add(&text_cursor, 1, __ATOMIC_RELAXED);
    size_t t = i % p->n;
    char head[160];
    int hn = w->register_
                 ? snprintf(head, sizeof(head),
                            "{\"id\":\"s%zu-%d-%zu-%llu\",\"register\":true,\"k\":3,\"text\":\"",
                            i, w->index, ci, (unsigned long long)c->serial++)
                 : snprintf(head, sizeof(head), "{\"register\":false,\"k\":3,\"text\":\"");
    size_t off = start_request_text(w, c, head, hn, p->len[t] + 2);
    off = append(c->req, off, p->text[t], p->len[t]);
    off = append(c->req, off, "\"}", 2);
    c->req_len = off;
    c->req_off = 0;
}

/* Builds the next request of c into c->req (allocated once, large enough
 * for any four paragraphs, or any one text with --texts). */
static void build_request(worker *w, conn *c, size_t ci)
{
    if (w->texts) {
        build_text_request(w, c, ci);
        return;
    }
    const pool *p = w->paras;
    size_t a = next_rand(&w->rng) % p->n, b = next_rand(&w->rng) % p->n;
    size_t d = next_rand(&w->rng) % p->n, e = (a + b + 1) % p->n;
    char head[160];
    int hn = snprintf(head, sizeof(head),
                      "{\"id\":\"g%d-%zu-%llu-%llu\",\"register\":true,\"k\":3,\"text\":\"",
                      w->index, ci, (unsigned long long)c->serial++,
                      (unsigned long long)(next_rand(&w->rng) % 1000000000u));
    size_t off = start_request_text(w, c, head, hn,
                                    p->len[a] + p->len[b] + p->len[d] + p->len[e] + 3 * 2 + 2);
    off = append(c->req, off, p->text[a], p->len[a]);
    off = append(c->req, off, "\\n", 2);
    off = append(c->req, off, p->text[b], p->len[b]);
    off = append(c->req, off, "\\n", 2);
    off = append(c->req, off, p->text[d], p->len[d]);
    off = append(c->req, off, "\\n", 2);
    off = append(c->req, off, p->text[e], p->len[e]);
    off = append(c->req, off, "\"}", 2);
    c->req_len = off;
    c->req_off = 0;
}

static int connect_to(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Writes what is left of c's request. Returns 1 when all is written, 0
 * when the socket is full (EPOLLOUT then finishes it), -1 on error. */
static int send_rest(conn *c)
{
    while (c->req_off < c->req_len) {
        ssize_t n = write(c->fd, c->req + c->req_off, c->req_len - c->req_off);
        if (n > 0) {
            c->req_off += (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return 0;
        return -1;
    }
    return 1;
}

static int watch(int ep, conn *c, bool out, int op)
{
    struct epoll_event ev = {.events = EPOLLIN | (out ? EPOLLOUT : 0), .data.ptr = c};
    return epoll_ctl(ep, op, c->fd, &ev);
}

static int start_request(worker *w, int ep, conn *c, size_t ci)
{
    build_request(w, c, ci);
    c->resp_len = 0;
    c->sent_ns = now_ns();
    int rc = send_rest(c);
    if (rc == 0)
        return watch(ep, c, true, EPOLL_CTL_MOD);
    return rc < 0 ? -1 : 0;
}

static void record_latency(worker *w, uint64_t ns)
{
    if (w->nlat == w->caplat) {
        size_t cap = w->caplat ? 2 * w->caplat : 65536;
        uint32_t *l = realloc(w->lat_us, cap * sizeof(*l));
        if (!l)
            return;
        w->lat_us = l;
        w->caplat = cap;
    }
    w->lat_us[w->nlat++] = (uint32_t)(ns / 1000u);
}

/* Parses c's response so far. Returns its total length once complete (and
 * sets *status, *close), 0 when more is needed, -1 when malformed. */
static long response_length(const conn *c, int *status, bool *close_after)
{
    const char *buf = c->resp;
    const char *end = memmem(buf, c->resp_len, "\r\n\r\n", 4);
    if (!end)
        return c->resp_len >= RESP_CAP ? -1 : 0;
    size_t head = (size_t)(end - buf) + 4;
    if (c->resp_len < 12 || memcmp(buf, "HTTP/1.", 7) != 0)
        return -1;
    *status = atoi(buf + 9);
    long clen = -1;
    *close_after = false;
    for (const char *l = memchr(buf, '\n', head); l && (size_t)(l - buf) + 1 < head;
         l = memchr(l + 1, '\n', head - (size_t)(l + 1 - buf))) {
        const char *h = l + 1;
        if (strncasecmp(h, "Content-Length:", 15) == 0)
            clen = atol(h + 15);
        else if (strncasecmp(h, "Connection: close", 17) == 0)
            *close_after = true;
    }
    if (clen < 0 || head + (size_t)clen > RESP_CAP)
        return -1;
    return c->resp_len >= head + (size_t)clen ? (long)(head + (size_t)clen) : 0;
}

static int reconnect(worker *w, int ep, conn *c)
{
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = connect_to(w->port);
    if (c->fd < 0)
        return -1;
    return watch(ep, c, true, EPOLL_CTL_ADD);
}

/* Reads what c has; finishes its response and starts the next request.
 * Returns -1 when the connection must be replaced. */
static int on_readable(worker *w, int ep, conn *c, size_t ci, bool running)
{
    for (;;) {
        ssize_t n = read(c->fd, c->resp + c->resp_len, RESP_CAP - c->resp_len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return 0;
        if (n <= 0)
            return -1;
        c->resp_len += (size_t)n;
        int status = 0;
        bool close_after = false;
        long total = response_length(c, &status, &close_after);
        if (total < 0)
            return -1;
        if (total == 0)
            continue;
        uint64_t t = now_ns();
        if (t <= w->stop_ns) {
            w->requests++;
            w->status[status > 0 && status < MAX_STATUS ? status : 0]++;
            record_latency(w, t - c->sent_ns);
        }
        if (close_after)
            return -1;
        if (!running || t > w->stop_ns)
            return 1;
        return start_request(w, ep, c, ci) < 0 ? -1 : 0;
    }
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    conn *conns = calloc((size_t)w->nconns, sizeof(*conns));
    /* Head and body start, then four paragraphs: the four indices of a
     * request may repeat (with a small pool they often do), so room for
     * four times the longest, not the four longest (a heap overflow then). */
    size_t longest = 0;
    for (size_t i = 0; i < w->paras->n; i++)
        if (w->paras->len[i] > longest)
            longest = w->paras->len[i];
    size_t max_req = 256 + 160 + 4 * longest + 16;
    if (ep < 0 || !conns)
        return NULL;
    int live = 0;
    for (int i = 0; i < w->nconns; i++) {
        conn *c = &conns[i];
        c->req = malloc(max_req);
        c->resp = malloc(RESP_CAP);
        c->fd = connect_to(w->port);
        if (!c->req || !c->resp || c->fd < 0 || watch(ep, c, true, EPOLL_CTL_ADD) < 0) {
            w->errors++;
            continue;
        }
        build_request(w, c, (size_t)i);
        /* sent when the connection is writable */
        c->sent_ns = now_ns();
        live++;
    }
    struct epoll_event evs[256];
    while (live > 0) {
        int n = epoll_wait(ep, evs, 256, 100);
        uint64_t t = now_ns();
        bool running = t <= w->stop_ns;
        if (!running && t > w->stop_ns + 2000000000u)
            break; /* responses still missing 2 s after the end: give up */
        for (int i = 0; i < n; i++) {
            conn *c = evs[i].data.ptr;
            size_t ci = (size_t)(c - conns);
            int rc = 0;
            if (evs[i].events & EPOLLOUT) {
                rc = send_rest(c);
                if (rc == 1)
                    rc = watch(ep, c, false, EPOLL_CTL_MOD);
            }
            if (rc >= 0 && (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                rc = on_readable(w, ep, c, ci, running);
            if (rc == 1) { /* done: this connection sends no more */
                epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                close(c->fd);
                c->fd = -1;
                live--;
            } else if (rc < 0) {
                if (running)
                    w->errors++;
                if (!running || reconnect(w, ep, c) < 0) {
                    if (c->fd >= 0)
                        close(c->fd);
                    c->fd = -1;
                    live--;
                    continue;
                }
                build_request(w, c, ci);
                c->sent_ns = now_ns();
            }
        }
    }
    for (int i = 0; i < w->nconns; i++) {
        if (conns[i].fd >= 0)
            close(conns[i].fd);
        free(conns[i].req);
        free(conns[i].resp);
    }
    free(conns);
    close(ep);
    return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void usage(void)
{
    fprintf(stderr, "usage: loadgen --port P (--paragraphs FILE | --texts FILE [--register 0|1]) "
                    "[--connections N] [--threads T] [--duration S] [--seed S]\n");
    exit(1);
}

int main(int argc, char **argv)
{
    int port = 0, nconn = 64, nthreads = 2;
    double duration = 10;
    uint64_t seed = (uint64_t)time(NULL);
    const char *paras_path = NULL;
    bool texts = false, reg = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            usage();
        if (!strcmp(a, "--port"))
            port = atoi(v);
        else if (!strcmp(a, "--paragraphs"))
            paras_path = v;
        else if (!strcmp(a, "--texts")) {
            paras_path = v;
            texts = true;
        } else if (!strcmp(a, "--register"))
            reg = atoi(v) != 0;
        else if (!strcmp(a, "--connections"))
            nconn = atoi(v);
        else if (!strcmp(a, "--threads"))
            nthreads = atoi(v);
        else if (!strcmp(a, "--duration"))
            duration = atof(v);
        else if (!strcmp(a, "--seed"))
            seed = strtoull(v, NULL, 10);
        else
            usage();
        i++;
    }
    if (port <= 0 || port > 65535 || !paras_path || nconn < 1 || nthreads < 1 || nthreads > nconn ||
        duration <= 0)
        usage();
    pool paras = {0};
    if (load_pool(paras_path, &paras) < 0) {
        fprintf(stderr, "loadgen: cannot read at least 4 paragraphs from %s\n", paras_path);
        return 1;
    }
    worker *ws = calloc((size_t)nthreads, sizeof(*ws));
    pthread_t *th = calloc((size_t)nthreads, sizeof(*th));
    if (!ws || !th)
        return 1;
    uint64_t t0 = now_ns();
    uint64_t stop = t0 + (uint64_t)(duration * 1e9);
    for (int i = 0; i < nthreads; i++) {
        ws[i] = (worker){.index = i,
                         .nconns = nconn / nthreads + (i < nconn % nthreads),
                         .rng = seed * 2654435761u + (uint64_t)i * 40503u + 1,
                         .stop_ns = stop,
                         .paras = &paras,
                         .texts = texts,
                         .register_ = reg,
                         .port = (uint16_t)port};
        pthread_create(&th[i], NULL, worker_main, &ws[i]);
    }
    uint64_t requests = 0, errors = 0, status[MAX_STATUS] = {0};
    size_t nlat = 0;
    for (int i = 0; i < nthreads; i++) {
        pthread_join(th[i], NULL);
        requests += ws[i].requests;
        errors += ws[i].errors;
        for (int s = 0; s < MAX_STATUS; s++)
            status[s] += ws[i].status[s];
        nlat += ws[i].nlat;
    }
    double secs = duration;
    uint32_t *lat = malloc((nlat ? nlat : 1) * sizeof(*lat));
    size_t k = 0;
    for (int i = 0; i < nthreads; i++) {
        if (lat && ws[i].nlat)
            memcpy(lat + k, ws[i].lat_us, ws[i].nlat * sizeof(*lat));
        k += ws[i].nlat;
        free(ws[i].lat_us);
    }
    double p50 = 0, p99 = 0;
    if (lat && nlat) {
        qsort(lat, nlat, sizeof(*lat), cmp_u32);
        p50 = lat[nlat / 2] / 1000.0;
        p99 = lat[(size_t)((double)nlat * 0.99)] / 1000.0;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
                 (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    printf("{\"requests\": %llu, \"seconds\": %.3f, \"rps\": %.1f, \"p50_ms\": %.3f, "
           "\"p99_ms\": %.3f, \"errors\": %llu, \"cpu_s\": %.3f, \"status\": {",
           (unsigned long long)requests, secs, (double)requests / secs, p50, p99,
           (unsigned long long)errors, cpu);
    bool first = true;
    for (int s = 0; s < MAX_STATUS; s++)
        if (status[s]) {
            printf("%s\"%d\": %llu", first ? "" : ", ", s, (unsigned long long)status[s]);
            first = false;
        }
    printf("}}\n");
    free(lat);
    free(ws);
    free(th);
    for (size_t i = 0; i < paras.n; i++)
        free(paras.text[i]);
    free(paras.text);
    free(paras.len);
    return 0;
}
