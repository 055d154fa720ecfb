/* test_worker.c - server/net/worker.c: a real worker thread and its loop. Tasks
 * posted from other threads run on the worker's thread, each poster's in the
 * order posted, none lost; the tick keeps the heartbeat; tasks left when the
 * loop stops run on the caller with nd_worker_run_tasks(); generated request
 * ids are "<worker>-<counter>" in hex. */
#include "unit.h"
#include "worker.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POSTERS 4
#define PER_POSTER 20000

typedef struct item {
    nd_task task; /* first: the task is the item */
    unsigned poster, seq;
} item;

static nd_worker worker;
static unsigned last_seq[POSTERS]; /* worker thread only */
static _Atomic unsigned ran, out_of_order, wrong_thread;

static void item_fn(nd_task *t)
{
    item *it = (item *)t;
    if (nd_worker_current() != &worker)
        wrong_thread++;
    if (it->seq != last_seq[it->poster] + 1)
        out_of_order++;
    last_seq[it->poster] = it->seq;
    ran++;
}

static item *items;

static void *poster_main(void *arg)
{
    unsigned p = (unsigned)(uintptr_t)arg;
    for (unsigned i = 0; i < PER_POSTER; i++) {
        item *it = &items[p * PER_POSTER + i];
        *it = (item){.task.fn = item_fn, .poster = p, .seq = i + 1};
        nd_worker_post(&worker, &it->task);
    }
    return NULL;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static _Atomic unsigned ticks, exits;

static void on_tick(nd_worker *w)
{
    (void)w;
    ticks++;
}

static void on_exit_loop(nd_worker *w)
{
    if (w == &worker && nd_worker_current() == &worker)
        exits++;
}

static void test_tasks_from_threads(void)
{
    REQUIRE(nd_worker_init(&worker, 3, true, 10, on_tick, on_exit_loop) == 0);
    REQUIRE(nd_worker_start(&worker) == 0);
    CHECK(nd_worker_running(&worker));
    items = calloc(POSTERS * PER_POSTER, sizeof(*items));
    REQUIRE(items != NULL);
    pthread_t th[POSTERS];
    for (unsigned p = 0; p < POSTERS; p++)
        REQUIRE(pthread_create(&th[p], NULL, poster_main, (void *)(uintptr_t)p) == 0);
    for (unsigned p = 0; p < POSTERS; p++)
        pthread_join(th[p], NULL);
    for (int i = 0; i < 500 && ran < POSTERS * PER_POSTER; i++)
        sleep_ms(10);
    CHECK(ran == POSTERS * PER_POSTER, "ran %u of %u", (unsigned)ran, POSTERS * PER_POSTER);
    CHECK(out_of_order == 0, "%u out of order", (unsigned)out_of_order);
    CHECK(wrong_thread == 0, "%u on another thread", (unsigned)wrong_thread);
    CHECK(nd_worker_current() == NULL, "this thread is no worker");
}

static void test_heartbeat(void)
{
    unsigned t0 = ticks;
    sleep_ms(200);
    CHECK(ticks > t0, "the tick ran (%u -> %u)", t0, (unsigned)ticks);
    CHECK(nd_worker_alive(&worker, 1000));
}

static void test_stop_then_run_left_tasks(void)
{
    nd_worker_break(&worker);
    nd_worker_join(&worker);
    CHECK(!nd_worker_running(&worker));
    CHECK(exits == 1, "on_exit ran once on the worker's thread (%u)", (unsigned)exits);
    unsigned before = ran;
    for (unsigned i = 0; i < 3; i++) {
        items[i] = (item){.task.fn = item_fn, .poster = 0, .seq = last_seq[0] + 1 + i};
        nd_worker_post(&worker, &items[i].task);
    }
    CHECK(ran == before, "nothing runs while stopped");
    nd_worker_set_current(&worker);
    CHECK(nd_worker_run_tasks(&worker) == 3);
    nd_worker_set_current(NULL);
    CHECK(ran == before + 3 && out_of_order == 0 && wrong_thread == 0);
    CHECK(nd_worker_run_tasks(&worker) == 0, "the queue is empty");
}

static void test_request_ids(void)
{
    char a[ND_RID_MAX], b[ND_RID_MAX];
    worker.nrids = 0xffe;
    nd_worker_new_rid(&worker, a);
    nd_worker_new_rid(&worker, b);
    CHECK(strcmp(a, "3-fff") == 0, "%s", a);
    CHECK(strcmp(b, "3-1000") == 0, "%s", b);
    worker.nrids = UINT64_MAX - 1;
    nd_worker_new_rid(&worker, a);
    CHECK(strcmp(a, "3-ffffffffffffffff") == 0, "%s", a);
}

int main(void)
{
    UNIT_RUN(test_tasks_from_threads);
    UNIT_RUN(test_heartbeat);
    UNIT_RUN(test_stop_then_run_left_tasks);
    UNIT_RUN(test_request_ids);
    nd_worker_finish(&worker);
    free(items);
    return unit_summary("worker");
}
