/* minimal_evhttp.c - the ceiling for neardupd's HTTP numbers: the same
 * threading as neardupd (one event_base + evhttp per thread, SO_REUSEPORT
 * listening sockets or one shared socket) answering every request with a
 * fixed 200 and nothing else: no routing, no logging, no metrics.
 *
 *   minimal_evhttp [--port N] [--threads N] [--accept reuseport|shared]
 *
 * Port 0 picks a free port; the bound port is printed on stdout as
 * "listening PORT". Stops on SIGTERM/SIGINT. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/thread.h>

static const char BODY[] = "{\"status\":\"ok\"}\n";

typedef struct worker {
    pthread_t thread;
    struct event_base *base;
    struct evhttp *http;
    struct evbuffer *out;
    int fd;
} worker;

static void reply(struct evhttp_request *req, void *arg)
{
    worker *w = arg;
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
    evbuffer_add_reference(w->out, BODY, sizeof(BODY) - 1, NULL, NULL);
    evhttp_send_reply(req, 200, "OK", w->out);
}

static int listen_on(uint16_t port, int reuseport, uint16_t *bound)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        (reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0) ||
        bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 1024) < 0) {
        perror("listen");
        exit(1);
    }
    socklen_t sl = sizeof(sa);
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    *bound = ntohs(sa.sin_port);
    return fd;
}

static void *run(void *arg)
{
    worker *w = arg;
    event_base_loop(w->base, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)sig, (void)what;
    event_base_loopbreak(arg);
}

int main(int argc, char **argv)
{
    unsigned port = 0, threads = (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
    int reuseport = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--port") == 0)
            port = (unsigned)atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--threads") == 0)
            threads = (unsigned)atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--accept") == 0)
            reuseport = strcmp(argv[i + 1], "shared") != 0;
    }
    if (threads == 0)
        threads = 1;
    signal(SIGPIPE, SIG_IGN);
    evthread_use_pthreads();
    worker *ws = calloc(threads, sizeof(*ws));
    uint16_t bound = (uint16_t)port;
    for (unsigned i = 0; i < threads; i++) {
        worker *w = &ws[i];
        w->fd = (i > 0 && !reuseport) ? fcntl(ws[0].fd, F_DUPFD_CLOEXEC, 0)
                                      : listen_on(bound, reuseport, &bound);
        w->base = event_base_new();
        w->http = evhttp_new(w->base);
        w->out = evbuffer_new();
        evhttp_set_gencb(w->http, reply, w);
        evhttp_set_timeout(w->http, 30);
        if (!evhttp_accept_socket_with_handle(w->http, w->fd)) {
            fprintf(stderr, "accept socket failed\n");
            return 1;
        }
    }
    struct event_base *main_base = event_base_new();
    struct event *st = evsignal_new(main_base, SIGTERM, on_signal, main_base);
    struct event *si = evsignal_new(main_base, SIGINT, on_signal, main_base);
    event_add(st, NULL);
    event_add(si, NULL);
    for (unsigned i = 0; i < threads; i++)
        pthread_create(&ws[i].thread, NULL, run, &ws[i]);
    printf("listening %u\n", bound);
    fflush(stdout);
    event_base_dispatch(main_base);
    for (unsigned i = 0; i < threads; i++)
        event_base_loopbreak(ws[i].base);
    for (unsigned i = 0; i < threads; i++) {
        pthread_join(ws[i].thread, NULL);
        evhttp_free(ws[i].http);
        evbuffer_free(ws[i].out);
        event_base_free(ws[i].base);
    }
    event_free(st);
    event_free(si);
    event_base_free(main_base);
    free(ws);
    return 0;
}
