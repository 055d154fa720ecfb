/* hook_position.h - where each webhook subscription's delivery position
 * (the sequence of the last event it has delivered or skipped) is kept
 * between runs: one small interface, two implementations here (a file per
 * subscription in a directory, and memory for --in-memory); a replicated
 * implementation (the cluster's) fills the same ops table.
 *
 * Calls come from the webhook delivery thread only (one at a time); save
 * may block (fsync, a network round trip): that thread never serves a
 * request. */
#ifndef ND_HOOK_POSITION_H
#define ND_HOOK_POSITION_H

#include <stddef.h>
#include <stdint.h>

typedef struct nd_hook_positions nd_hook_positions;

typedef struct nd_hook_positions_ops {
    const char *name; /* "file", "memory", ... */
    /* The position kept for subscription sub (NUL-terminated, a valid
     * name): 0 and *seq, -ENOENT when none is kept (a new subscription), or
     * another -errno (unreadable: delivery of sub does not start). */
    int (*load)(nd_hook_positions *p, const char *sub, uint64_t *seq);
    /* Keeps seq as sub's position; durable (survives kill -9 and a power
     * loss) when it returns 0; else -errno and the previous position is
     * still the one kept. -ESTALE (a store shared by a cluster): another
     * process wrote sub's position since this one last loaded or saved it;
     * nothing was written (a position never moves back): this process
     * stops delivering and loads the positions again. */
    int (*save)(nd_hook_positions *p, const char *sub, uint64_t seq);
    /* Optional (NULL: this process always delivers): 1 when this process
     * may deliver now, 0 when another one does or may (a cluster elects
     * one deliverer: the others stand by, and a newly elected one loads
     * the positions again). Called before every send and save: the
     * implementation rate-limits its round trips, and answers 0 as soon as
     * its last confirmation is too old to rely on (a process that was
     * stopped or starved), whatever it answered before. */
    int (*lead)(nd_hook_positions *p);
    /* Optional (NULL: always 1): what lead would answer now without any
     * I/O (a clock read), for the last check before a request is written.
     * 0 means: call lead again (and load the positions if it answers 1). */
    int (*held)(nd_hook_positions *p);
    /* Frees p. */
    void (*close)(nd_hook_positions *p);
} nd_hook_positions_ops;

/* The head every implementation begins with. */
struct nd_hook_positions {
    const nd_hook_positions_ops *ops;
};

/* Positions as files dir/<sub>.position ("<seq>\n"), each replaced
 * atomically: written to a temporary file, fsynced, renamed over, the
 * directory fsynced. dir is created (0700) if missing. Returns 0 and a new
 * object in *out (free with nd_hook_positions_close()), or -errno with a
 * reason in err[cap]. */
int nd_hook_positions_file_open(nd_hook_positions **out, const char *dir, char *err, size_t cap);

/* Positions in this process only (a memory store loses its events too).
 * Returns 0 and a new object, or -ENOMEM. */
int nd_hook_positions_memory_open(nd_hook_positions **out);

static inline int nd_hook_positions_load(nd_hook_positions *p, const char *sub, uint64_t *seq)
{
    return p->ops->load(p, sub, seq);
}

static inline int nd_hook_positions_save(nd_hook_positions *p, const char *sub, uint64_t seq)
{
    return p->ops->save(p, sub, seq);
}

/* Whether this process delivers now (see the lead op). */
static inline int nd_hook_positions_lead(nd_hook_positions *p)
{
    return p->ops->lead ? p->ops->lead(p) : 1;
}

/* Whether this process still delivers, without I/O (see the held op). */
static inline int nd_hook_positions_held(nd_hook_positions *p)
{
    return p->ops->held ? p->ops->held(p) : 1;
}

/* Frees p; NULL is allowed. */
static inline void nd_hook_positions_close(nd_hook_positions *p)
{
    if (p)
        p->ops->close(p);
}

#endif
