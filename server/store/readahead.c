/* readahead.c - the read-ahead of one LMDB database's leaf pages (see
 * readahead.h for why, and for the page format it reads). */
#include "readahead.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGE_HEADER 16    /* pgno u64, pad u16, flags u16, lower u16, upper u16 */
#define PAGE_BRANCH 0x01  /* P_BRANCH */
#define PAGE_LEAF 0x02    /* P_LEAF */
#define DB_RECORD_SIZE 48 /* sizeof(MDB_db) */
#define DB_RECORD_ROOT 40 /* offsetof(MDB_db, md_root) */
#define NODE_MIN 8        /* lo, hi, top (flags), ksize: u16 each */
#define RUN_MAX_PAGES 256 /* pages asked for by one posix_fadvise, at most */
#define DEPTH_MAX 32      /* deeper than any tree a 64-bit map holds */

struct nd_readahead {
    MDB_env *const *env; /* read with env_lock held */
    const MDB_dbi *dbi;
    const char *name;           /* borrowed */
    pthread_rwlock_t *env_lock; /* held shared while the walk reads (or NULL) */
    atomic_bool cancel;
    long long result;
    bool advised; /* span is MADV_RANDOM until stop */
    void *span;
    size_t span_len;
    pthread_t thread;
};

/* The map and the tree, as far as the walk needs them. */
typedef struct walk {
    unsigned char *base; /* page 0 of the map */
    size_t psize;
    uint64_t npages; /* pages in use: a child must be below */
    unsigned depth;  /* of the tree: the root is level 1, leaves level depth */
    int fd;          /* data.mdb, for the reads asked for */
    bool map;        /* also map the leaves into the process (pages_map()) */
    const atomic_bool *cancel;
} walk;

/* Page numbers, in key order. */
typedef struct page_list {
    uint64_t *pgno;
    size_t n, cap;
} page_list;

static uint16_t u16_at(const unsigned char *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static uint64_t u64_at(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

/* Finds page 0 of the map from a pointer into a leaf page of the main
 * database (the one mdb_get returned). Returns 0 or -EBADMSG. */
static int map_geometry(walk *w, const void *inside)
{
    uintptr_t at = (uintptr_t)inside & ~(uintptr_t)(w->psize - 1);
    const unsigned char *page = (const unsigned char *)at;
    uint64_t pgno = u64_at(page);
    if (pgno >= w->npages || !(u16_at(page + 10) & PAGE_LEAF))
        return -EBADMSG;
    w->base = (unsigned char *)(at - pgno * w->psize);
    return 0;
}

/* Adds pgno to l. Returns 0 or -ENOMEM. */
static int list_add(page_list *l, uint64_t pgno)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4096;
        uint64_t *p = realloc(l->pgno, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        l->pgno = p;
        l->cap = cap;
    }
    l->pgno[l->n++] = pgno;
    return 0;
}

static bool cancelled(const walk *w)
{
    return w->cancel && atomic_load_explicit(w->cancel, memory_order_relaxed);
}

/* The end of the run of adjacent pages of l from i (at most
 * RUN_MAX_PAGES of them). */
static size_t run_end(const page_list *l, size_t i)
{
    size_t j = i + 1;
    while (j < l->n && l->pgno[j] == l->pgno[j - 1] + 1 && j - i < RUN_MAX_PAGES)
        j++;
    return j;
}

/* Maps the pages of l into the process's page tables, in order, a run
 * per call (MADV_POPULATE_READ, Linux 5.14+; each call holds the map's
 * lock briefly), waiting for any read still under way: the scan following
 * behind then takes no page fault of its own. A warm start at 10M records
 * spent ~0.4 s of the scan's time in those faults (one per 64 KiB read
 * around); here they run on this thread, beside it. A hint: errors are
 * ignored. Returns 0 or -ECANCELED. */
static int pages_map(const walk *w, const page_list *l)
{
#ifdef MADV_POPULATE_READ
    for (size_t i = 0, j; i < l->n; i = j) {
        if (cancelled(w))
            return -ECANCELED;
        j = run_end(l, i);
        madvise(w->base + l->pgno[i] * w->psize, (j - i) * w->psize, MADV_POPULATE_READ);
    }
#else
    (void)w, (void)l;
#endif
    return 0;
}

/* Asks the kernel for the pages of l, in order, a run of adjacent pages
 * (at most RUN_MAX_PAGES) per call, so that they are read side by side;
 * pages already in the page cache cost it a lookup. Then maps them if
 * w->map. Returns the pages asked for, or -ECANCELED. */
static long long pages_ask(const walk *w, const page_list *l)
{
    for (size_t i = 0, j; i < l->n; i = j) {
        if (cancelled(w))
            return -ECANCELED;
        j = run_end(l, i);
        posix_fadvise(w->fd, (off_t)(l->pgno[i] * w->psize), (off_t)((j - i) * w->psize),
                      POSIX_FADV_WILLNEED);
    }
    if (w->map && pages_map(w, l) < 0)
        return -ECANCELED;
    return (long long)l->n;
}

/* Checks that page pgno is a branch page with sane bounds. Returns its
 * number of nodes, or -EBADMSG. */
static int branch_keys(const walk *w, uint64_t pgno, const unsigned char **page)
{
    if (pgno >= w->npages)
        return -EBADMSG;
    const unsigned char *p = w->base + pgno * w->psize;
    uint16_t flags = u16_at(p + 10), lower = u16_at(p + 12), upper = u16_at(p + 14);
    if (u64_at(p) != pgno || (flags & (PAGE_BRANCH | PAGE_LEAF)) != PAGE_BRANCH ||
        lower < PAGE_HEADER + 2 || (lower - PAGE_HEADER) % 2 || lower > upper || upper > w->psize)
        return -EBADMSG;
    *page = p;
    return (lower - PAGE_HEADER) / 2;
}

/* Adds the children of branch page pgno to next. Returns 0 or -EBADMSG,
 * -ENOMEM, -ECANCELED. */
static int branch_children(const walk *w, uint64_t pgno, page_list *next)
{
    const unsigned char *page;
    int n = branch_keys(w, pgno, &page);
    if (n < 0)
        return n;
    if (cancelled(w))
        return -ECANCELED;
    for (int i = 0; i < n; i++) {
        uint16_t off = u16_at(page + PAGE_HEADER + 2 * i);
        if (off < PAGE_HEADER + 2 * n || (size_t)off + NODE_MIN > w->psize)
            return -EBADMSG;
        const unsigned char *node = page + off;
        uint64_t child = u16_at(node) | (uint64_t)u16_at(node + 2) << 16 |
                         (uint64_t)u16_at(node + 4) << 32;
        if (child >= w->npages)
            return -EBADMSG;
        int rc = list_add(next, child);
        if (rc)
            return rc;
    }
    return 0;
}

/* Lists the leaves under root into *leaves (the caller frees its pgno),
 * level by level: each level of branch pages is asked for as a whole
 * before it is read, so that its pages are read side by side, not one
 * fault after another. Returns 0 or -errno (nothing in *leaves). */
static int list_leaves(const walk *w, uint64_t root, page_list *leaves)
{
    page_list level = {0}, next = {0};
    int rc = list_add(&level, root);
    for (unsigned depth = 1; rc == 0 && depth < w->depth; depth++) {
        if (depth > 1 && pages_ask(w, &level) < 0)
            rc = -ECANCELED;
        next.n = 0;
        for (size_t i = 0; i < level.n && rc == 0; i++)
            rc = branch_children(w, level.pgno[i], &next);
        page_list t = level;
        level = next;
        next = t;
    }
    free(next.pgno);
    if (rc)
        free(level.pgno);
    else
        *leaves = level;
    return rc;
}

/* Fills w from the environment and the database's record in the main
 * database; *root gets the tree's root. Returns 0, 1 (a tree without
 * branch pages: nothing to walk) or -errno. */
static int walk_init(walk *w, MDB_env *env, MDB_txn *txn, MDB_dbi dbi, const char *name,
                     uint64_t *root)
{
    int major, minor;
    mdb_version(&major, &minor, NULL);
    MDB_stat st;
    MDB_envinfo info;
    MDB_dbi main_dbi;
    if (major != 0 || minor != 9)
        return -ENOTSUP;
    if (mdb_stat(txn, dbi, &st) || mdb_env_info(env, &info) ||
        mdb_dbi_open(txn, NULL, 0, &main_dbi))
        return -EINVAL;
    if (st.ms_depth < 2)
        return 1;
    long sys_page = sysconf(_SC_PAGESIZE);
    if (st.ms_depth > DEPTH_MAX || st.ms_psize < 512 || (st.ms_psize & (st.ms_psize - 1)) ||
        sys_page <= 0 || st.ms_psize % (size_t)sys_page)
        return -ENOTSUP;
    MDB_val key = {strlen(name), (void *)name}, rec;
    if (mdb_get(txn, main_dbi, &key, &rec))
        return -EINVAL;
    if (rec.mv_size != DB_RECORD_SIZE)
        return -ENOTSUP;
    memset(w, 0, sizeof(*w));
    w->psize = st.ms_psize;
    w->npages = (uint64_t)info.me_last_pgno + 1;
    w->depth = st.ms_depth;
    if (mdb_env_get_fd(env, &w->fd))
        return -EINVAL;
    *root = u64_at((const unsigned char *)rec.mv_data + DB_RECORD_ROOT);
    return map_geometry(w, rec.mv_data);
}

/* Lists the leaves under root and asks for them (w as walk_init() left
 * it, with cancel set). Returns as nd_readahead_leaves(). */
static long long walk_run(const walk *w, uint64_t root)
{
    page_list leaves;
    int rc = list_leaves(w, root, &leaves);
    if (rc)
        return rc;
    long long asked = pages_ask(w, &leaves);
    free(leaves.pgno);
    return asked;
}

long long nd_readahead_leaves(MDB_env *env, MDB_txn *txn, MDB_dbi dbi, const char *name,
                              const atomic_bool *cancel)
{
    walk w;
    uint64_t root;
    int rc = walk_init(&w, env, txn, dbi, name, &root);
    if (rc)
        return rc > 0 ? 0 : rc;
    w.cancel = cancel;
    return walk_run(&w, root);
}

/* The walk in a read transaction of its own, with the map's read-around
 * off from before the first page it reads (back on if it fails). */
static void *readahead_main(void *arg)
{
    nd_readahead *ra = arg;
    pthread_setname_np(pthread_self(), "nd-readahead");
    if (ra->env_lock)
        pthread_rwlock_rdlock(ra->env_lock);
    MDB_txn *txn;
    walk w;
    uint64_t root;
    MDB_env *env = *ra->env;
    if (!env || mdb_txn_begin(env, NULL, MDB_RDONLY, &txn))
        ra->result = -EAGAIN;
    else {
        int rc = walk_init(&w, env, txn, *ra->dbi, ra->name, &root);
        if (rc == 0 && madvise(w.base, w.npages * w.psize, MADV_RANDOM) == 0) {
            ra->advised = true;
            ra->span = w.base;
            ra->span_len = w.npages * w.psize;
        }
        w.cancel = &ra->cancel;
        w.map = true; /* on this thread, ahead of the scan */
        ra->result = rc ? (rc > 0 ? 0 : rc) : walk_run(&w, root);
        mdb_txn_abort(txn);
    }
    if (ra->advised && ra->result < 0 && ra->result != -ECANCELED) {
        madvise(ra->span, ra->span_len, MADV_NORMAL); /* faults read around again */
        ra->advised = false;
    }
    if (ra->env_lock)
        pthread_rwlock_unlock(ra->env_lock);
    return NULL;
}

nd_readahead *nd_readahead_start(MDB_env *const *env, const MDB_dbi *dbi, const char *name,
                                 pthread_rwlock_t *env_lock)
{
    nd_readahead *ra = calloc(1, sizeof(*ra));
    if (!ra)
        return NULL;
    ra->name = name;
    ra->env = env;
    ra->dbi = dbi;
    ra->env_lock = env_lock;
    atomic_init(&ra->cancel, false);
    if (pthread_create(&ra->thread, NULL, readahead_main, ra)) {
        free(ra);
        return NULL;
    }
    return ra;
}

long long nd_readahead_stop(nd_readahead *ra)
{
    if (!ra)
        return 0;
    atomic_store(&ra->cancel, true);
    pthread_join(ra->thread, NULL);
    if (ra->advised)
        madvise(ra->span, ra->span_len, MADV_NORMAL);
    long long result = ra->result;
    free(ra);
    return result;
}
