/* worker.h - a worker: one thread running one event loop (event_base), with
 * a queue of tasks that other threads hand to it, a heartbeat, and the
 * per-worker counter behind generated request ids. It knows nothing of HTTP:
 * http.c embeds an nd_worker in its own per-worker state and adds the
 * listener, the connections (conn.h) and the requests.
 *
 * Threads: nd_worker_post() and nd_worker_alive() from any thread; the rest
 * from the thread that owns the worker (nd_worker_init() to nd_worker_start()
 * and after nd_worker_join(): the creating thread; in between: the worker's
 * own thread). A task posted from another thread runs on the worker's
 * thread: that is how the store's commit thread hands a finished write back
 * to the request's own loop (api.c op_done -> nd_worker_post), since an
 * evhttp request must be answered on its own base's thread.
 *
 * Memory: the nd_worker is the caller's storage (_init/_finish); a task is
 * embedded in the poster's struct and stays the poster's: the queue only
 * links it. Nothing here allocates after nd_worker_init(). */
#ifndef ND_WORKER_H
#define ND_WORKER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct event_base;
struct event;

#define ND_RID_MAX 40 /* a request id with its NUL */

/* A unit of work handed to a worker's loop (embedded in the caller's struct). */
typedef struct nd_task {
    struct nd_task *next;
    void (*fn)(struct nd_task *task);
} nd_task;

typedef struct nd_worker nd_worker;

/* Called on the worker's thread: on_tick every tick (after the heartbeat),
 * on_exit once when its loop has ended. */
typedef void (*nd_worker_fn)(nd_worker *w);

struct nd_worker {
    unsigned index;
    struct event_base *base; /* this worker's loop */
    void *user;              /* the application's per-worker state (nd_worker_user) */
    /* Private to worker.c. */
    pthread_t thread;
    bool running;
    struct event *wake; /* runs posted tasks */
    struct event *tick;
    nd_worker_fn on_tick, on_exit;
    pthread_mutex_t qlock;
    nd_task *queue; /* posted tasks, newest first */
    uint64_t nrids; /* request ids generated */
    _Atomic int64_t heartbeat_ms;
};

/* Makes w's event base (with epoll's changelist when changelist is set: only
 * safe when no watched descriptor is a dup() of another), its task queue and
 * a tick every tick_ms calling on_tick (may be NULL, as may on_exit). No
 * thread yet. Returns 0 or -ENOMEM; nd_worker_finish() frees what was made
 * either way. */
int nd_worker_init(nd_worker *w, unsigned index, bool changelist, unsigned tick_ms,
                   nd_worker_fn on_tick, nd_worker_fn on_exit);

/* Starts w's thread ("nd-worker-<index>"), which runs the loop until
 * nd_worker_break(). Returns 0 or -errno (not logged). */
int nd_worker_start(nd_worker *w);

/* Asks w's loop to end (any thread; nothing if not running). */
void nd_worker_break(nd_worker *w);

/* Waits for w's thread after nd_worker_break() (nothing if not running). */
void nd_worker_join(nd_worker *w);

/* True while w's thread runs (between start and join). */
bool nd_worker_running(const nd_worker *w);

/* Frees the loop, its events and the queue (tasks still queued are not run:
 * nd_worker_run_tasks() first). The worker must not run. */
void nd_worker_finish(nd_worker *w);

/* Hands task to w's loop; any thread. The task runs on w's thread, tasks of
 * one poster in the order posted. Does not allocate. */
void nd_worker_post(nd_worker *w, nd_task *task);

/* Runs the posted tasks, oldest first, on the calling thread (w's own, or any
 * thread once w stopped, with nd_worker_set_current(w)). Returns how many ran. */
unsigned nd_worker_run_tasks(nd_worker *w);

/* The worker whose thread this is (NULL on other threads). */
nd_worker *nd_worker_current(void);

/* Makes w the calling thread's current worker (NULL: none); for running a
 * stopped worker's tasks on another thread. */
void nd_worker_set_current(nd_worker *w);

/* True if w's loop ticked within the last max_ms milliseconds; any thread. */
bool nd_worker_alive(const nd_worker *w, unsigned max_ms);

/* Writes a new request id, "<worker>-<counter>" in hex, unique in the
 * process, into rid (NUL-terminated). w's thread. */
void nd_worker_new_rid(nd_worker *w, char rid[ND_RID_MAX]);

/* The application's per-worker state (borrowed). */
void *nd_worker_user(const nd_worker *w);

#endif
