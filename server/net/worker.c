/* worker.c - worker threads: an event loop each, a task queue, a heartbeat. */
#include "worker.h"
#include "clock.h"

#include <errno.h>
#include <stdio.h>

#include <event2/event.h>

static _Thread_local nd_worker *tls_worker;

static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    nd_worker_run_tasks(arg);
}

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    nd_worker *w = arg;
    atomic_store_explicit(&w->heartbeat_ms, nd_clock_ms(), memory_order_relaxed);
    if (w->on_tick)
        w->on_tick(w);
}

/* The event base. epoll's changelist folds the disable/enable pairs that
 * evhttp makes around every request into at most one epoll_ctl per loop
 * turn; libevent's documented caveat is dup()ed descriptors. NULL on failure. */
static struct event_base *new_base(bool changelist)
{
    struct event_config *ec = event_config_new();
    if (!ec)
        return NULL;
    if (changelist)
        event_config_set_flag(ec, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
    struct event_base *base = event_base_new_with_config(ec);
    event_config_free(ec);
    return base;
}

int nd_worker_init(nd_worker *w, unsigned index, bool changelist, unsigned tick_ms,
                   nd_worker_fn on_tick, nd_worker_fn on_exit)
{
    w->index = index;
    w->on_tick = on_tick;
    w->on_exit = on_exit;
    pthread_mutex_init(&w->qlock, NULL);
    w->base = new_base(changelist);
    if (!w->base)
        return -ENOMEM;
    w->wake = event_new(w->base, -1, EV_PERSIST, wake_cb, w);
    w->tick = event_new(w->base, -1, EV_PERSIST, tick_cb, w);
    if (!w->wake || !w->tick)
        return -ENOMEM;
    struct timeval tv = {tick_ms / 1000, (tick_ms % 1000) * 1000};
    event_add(w->tick, &tv);
    atomic_store(&w->heartbeat_ms, nd_clock_ms());
    return 0;
}

static void *worker_main(void *arg)
{
    nd_worker *w = arg;
    char name[16]; /* the kernel's limit, NUL included: top -H, perf, gdb */
    snprintf(name, sizeof(name), "nd-worker-%u", w->index);
    pthread_setname_np(pthread_self(), name);
    tls_worker = w;
    event_base_loop(w->base, EVLOOP_NO_EXIT_ON_EMPTY);
    if (w->on_exit)
        w->on_exit(w);
    return NULL;
}

int nd_worker_start(nd_worker *w)
{
    int rc = pthread_create(&w->thread, NULL, worker_main, w);
    if (rc != 0)
        return -rc;
    w->running = true;
    return 0;
}

void nd_worker_break(nd_worker *w)
{
    if (w->running)
        event_base_loopbreak(w->base);
}

void nd_worker_join(nd_worker *w)
{
    if (w->running) {
        pthread_join(w->thread, NULL);
        w->running = false;
    }
}

bool nd_worker_running(const nd_worker *w)
{
    return w->running;
}

void nd_worker_finish(nd_worker *w)
{
    if (w->wake)
        event_free(w->wake);
    if (w->tick)
        event_free(w->tick);
    if (w->base)
        event_base_free(w->base);
    w->wake = w->tick = NULL;
    w->base = NULL;
    pthread_mutex_destroy(&w->qlock);
}

void nd_worker_post(nd_worker *w, nd_task *task)
{
    pthread_mutex_lock(&w->qlock);
    bool was_empty = w->queue == NULL;
    task->next = w->queue;
    w->queue = task;
    pthread_mutex_unlock(&w->qlock);
    if (was_empty)
        event_active(w->wake, EV_READ, 0);
}

/* The queue holds the newest first: reversed, the oldest first. */
static nd_task *reverse(nd_task *t)
{
    nd_task *fifo = NULL;
    while (t) {
        nd_task *next = t->next;
        t->next = fifo;
        fifo = t;
        t = next;
    }
    return fifo;
}

unsigned nd_worker_run_tasks(nd_worker *w)
{
    pthread_mutex_lock(&w->qlock);
    nd_task *t = w->queue;
    w->queue = NULL;
    pthread_mutex_unlock(&w->qlock);
    unsigned n = 0;
    for (nd_task *fifo = reverse(t); fifo; n++) {
        nd_task *next = fifo->next;
        fifo->fn(fifo);
        fifo = next;
    }
    return n;
}

nd_worker *nd_worker_current(void)
{
    return tls_worker;
}

void nd_worker_set_current(nd_worker *w)
{
    tls_worker = w;
}

bool nd_worker_alive(const nd_worker *w, unsigned max_ms)
{
    int64_t beat = atomic_load_explicit(&w->heartbeat_ms, memory_order_relaxed);
    return nd_clock_ms() - beat <= (int64_t)max_ms;
}

/* Writes v in hex at out; returns the digits written. */
static size_t put_hex(char *out, uint64_t v)
{
    static const char hex[] = "0123456789abcdef";
    char tmp[16];
    size_t n = 0, len = 0;
    do {
        tmp[n++] = hex[v & 15];
        v >>= 4;
    } while (v);
    while (n)
        out[len++] = tmp[--n];
    return len;
}

void nd_worker_new_rid(nd_worker *w, char rid[ND_RID_MAX])
{
    size_t pos = put_hex(rid, w->index);
    rid[pos++] = '-';
    pos += put_hex(rid + pos, ++w->nrids);
    rid[pos] = 0;
}

void *nd_worker_user(const nd_worker *w)
{
    return w->user;
}
