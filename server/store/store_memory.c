/* store_memory.c - the memory store (see store_memory.h). */
#include "store_memory.h"
#include "feed.h"
#include "record.h"
#include "json.h"
#include "retention.h"
#include "text_pack.h"
#include "clock.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#define TRIM_SLACK 64u /* audit entries a change may drop beyond its own */

/* One record: rec's pointers point into data (id, version, meta, anchors,
 * sketch, account, policy, client; version, meta, account, policy and
 * client NUL-terminated as the LMDB store gives them). */
typedef struct mem_rec {
    struct mem_rec *next; /* hash chain */
    nd_record rec;
    unsigned char data[];
} mem_rec;

/* One event: ev's pointers point into data (copy id, value NUL-terminated). */
typedef struct mem_ev {
    nd_store_event ev;
    uint64_t doc_hash; /* audit: XXH3 of the document it names */
    bool has_doc;      /* audit: it names one (nd_store_audit_subject) */
    char data[];
} mem_ev;

/* The events of one (kind, owner_at), by at_us ascending: ev[first..n)
 * (the oldest leave from the front: first moves, the array is compacted
 * when it must grow). */
typedef struct mem_journal {
    struct mem_journal *next; /* hash chain */
    nd_event_kind kind;
    int64_t owner;
    uint64_t doc; /* a document's list (ms->docs: the audit entries of owner
                   * naming it, not owned): the document's hash */
    mem_ev **ev;
    size_t first, n, cap;
} mem_journal;

/* One event of the feed: its seq and stored value (feed.h's layout). */
typedef struct mem_feed_ev {
    uint64_t seq;
    size_t len;
    unsigned char v[];
} mem_feed_ev;

typedef struct mem_store {
    nd_store_base base;    /* first: the interface */
    pthread_rwlock_t lock; /* guards everything below but the counters */
    mem_rec **buckets;
    size_t nbuckets; /* power of two */
    size_t count;
    mem_journal **journals; /* hash table of journals */
    size_t njournal_buckets, njournals;
    mem_journal **docs; /* hash table of the audit entries by document */
    size_t ndoc_buckets, ndocs;
    _Atomic uint64_t commits, failed;
    _Atomic uint64_t stream_seq; /* the greatest stream sequence applied */
    nd_json_scratch js;          /* write lock: audit subjects */
    mem_feed_ev **feed;          /* the feed, by seq: feed[feed_first..feed_n) */
    size_t feed_first, feed_n, feed_cap;
    _Atomic uint64_t feed_seq;  /* the greatest seq handed out */
    _Atomic uint64_t feed_hold; /* events after this are kept whatever their age */
    int64_t events_max_age_us;
} mem_store;

static mem_store *ms_of(const nd_store *st)
{
    return (mem_store *)(void *)nd_store_base_of(st);
}

static size_t bucket_of(const mem_store *ms, int64_t at)
{
    uint64_t h = (uint64_t)at * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & (ms->nbuckets - 1);
}

/* The record at time at, and the link that points at it. Lock held. */
static mem_rec **find(mem_store *ms, int64_t at)
{
    mem_rec **pp = &ms->buckets[bucket_of(ms, at)];
    while (*pp && (*pp)->rec.registered_at_us != at)
        pp = &(*pp)->next;
    return pp;
}

/* Doubles the table when it is 3/4 full. Write lock held. A failed growth
 * only leaves the chains longer. */
static void grow(mem_store *ms)
{
    if (ms->count * 4 < ms->nbuckets * 3)
        return;
    size_t nb = ms->nbuckets * 2;
    mem_rec **b = calloc(nb, sizeof(*b));
    if (!b)
        return;
    for (size_t i = 0; i < ms->nbuckets; i++)
        for (mem_rec *r = ms->buckets[i], *next; r; r = next) {
            next = r->next;
            uint64_t h = (uint64_t)r->rec.registered_at_us * 0x9E3779B97F4A7C15ull;
            size_t j = (size_t)(h >> 32) & (nb - 1);
            r->next = b[j];
            b[j] = r;
        }
    free(ms->buckets);
    ms->buckets = b;
    ms->nbuckets = nb;
}

/* A copy of r in one allocation, or NULL; its kept text: r's packed text
 * text_packed[0..text_packed_len) (NULL: none). */
static mem_rec *rec_copy(const nd_record *r)
{
    size_t vlen = strlen(r->version);
    size_t alen = 4 * (size_t)r->nanchors;
    size_t tlen = r->text_packed ? r->text_packed_len : 0;
    size_t size = r->id_len + vlen + 1 + (r->meta ? r->meta_len + 1 : 0) + alen + r->sketch_len +
                  tlen + (r->account_len ? r->account_len + 1 : 0) +
                  (r->policy ? r->policy_len + 1 : 0) + (r->client_len ? r->client_len + 1 : 0);
    mem_rec *m = malloc(sizeof(*m) + size);
    if (!m)
        return NULL;
    m->next = NULL;
    m->rec = *r;
    m->rec.supersede = NULL;
    m->rec.nsupersede = 0;
    if (r->status != ND_CLAIM_SUPERSEDED)
        m->rec.superseded_by_us = 0;
    unsigned char *p = m->data;
    memcpy(p, r->id, r->id_len);
    m->rec.id = (const char *)p;
    p += r->id_len;
    memcpy(p, r->version, vlen + 1);
    m->rec.version = (const char *)p;
    p += vlen + 1;
    if (r->meta) {
        if (r->meta_len)
            memcpy(p, r->meta, r->meta_len);
        p[r->meta_len] = '\0';
        m->rec.meta = (const char *)p;
        p += r->meta_len + 1;
    }
    if (alen)
        memcpy(p, r->anchors, alen);
    m->rec.anchors = alen ? p : NULL;
    p += alen;
    if (r->sketch_len)
        memcpy(p, r->sketch, r->sketch_len);
    m->rec.sketch = r->sketch_len ? p : NULL;
    p += r->sketch_len;
    if (tlen)
        memcpy(p, r->text_packed, tlen);
    m->rec.text = NULL;
    m->rec.text_len = 0;
    m->rec.text_packed = tlen ? p : NULL;
    m->rec.text_packed_len = tlen;
    p += tlen;
    m->rec.account = NULL;
    if (r->account_len) {
        memcpy(p, r->account, r->account_len);
        p[r->account_len] = '\0';
        m->rec.account = (const char *)p;
        p += r->account_len + 1;
    }
    if (r->policy) {
        if (r->policy_len)
            memcpy(p, r->policy, r->policy_len);
        p[r->policy_len] = '\0';
        m->rec.policy = (const char *)p;
        p += r->policy_len + 1;
    }
    m->rec.client = NULL;
    if (r->client_len) {
        memcpy(p, r->client, r->client_len);
        p[r->client_len] = '\0';
        m->rec.client = (const char *)p;
    }
    return m;
}

static bool same_id(const nd_record *r, const char *id, size_t id_len)
{
    return r->id_len == id_len && memcmp(r->id, id, id_len) == 0;
}

/* Notes the stream sequence of a change that was applied (or refused for
 * good: it is not tried again) under the lock. */
static void note_seq(mem_store *ms, uint64_t seq)
{
    if (seq > atomic_load_explicit(&ms->stream_seq, memory_order_relaxed))
        atomic_store_explicit(&ms->stream_seq, seq, memory_order_relaxed);
}

/* Ends a write: counts it (write lock held). */
static void committed(mem_store *ms, int status)
{
    if (status == 0) {
        atomic_fetch_add_explicit(&ms->commits, 1, memory_order_relaxed);
    } else if (status != -ENOENT) {
        atomic_fetch_add_explicit(&ms->failed, 1, memory_order_relaxed);
    }
}

typedef struct mem_ev mem_ev;
typedef struct mem_journal mem_journal;
static mem_ev *ev_copy(const nd_store_event *ev);
static mem_journal *event_reserve(mem_store *ms, mem_ev *e);
static void journal_insert(mem_store *ms, mem_journal *j, mem_ev *e, const nd_record *subject);

/* put (replace false, with audit, or NULL) or replace (true). */
static int mem_write(nd_store *st, const nd_record *r, const nd_store_event *audit, bool replace,
                     nd_store_done_fn done, void *arg)
{
    mem_store *ms = ms_of(st);
    if (!nd_record_check(r) || !nd_record_audit_ok(audit))
        return -EINVAL;
    nd_record packed = *r; /* with its text packed (text_pack.h), as LMDB keeps it */
    uint8_t *owned;
    int rc = nd_text_pack_record(r, &packed.text_packed, &packed.text_packed_len, &owned);
    if (rc)
        return rc;
    mem_rec *m = rec_copy(&packed);
    free(owned);
    mem_ev *e = audit ? ev_copy(audit) : NULL;
    if (!m || (audit && !e)) {
        free(m);
        free(e);
        return -ENOMEM;
    }
    pthread_rwlock_wrlock(&ms->lock);
    mem_rec **pp = find(ms, r->registered_at_us);
    mem_journal *j = NULL;
    int status = 0;
    if (!replace && *pp) {
        status = -EEXIST;
    } else if (e && !(j = event_reserve(ms, e))) {
        status = -ENOMEM;
    } else if (replace && (!*pp || !same_id(&(*pp)->rec, r->id, r->id_len))) {
        status = -ENOENT;
    } else if (replace) {
        mem_rec *old = *pp;
        m->next = old->next;
        *pp = m;
        free(old);
    } else {
        m->next = ms->buckets[bucket_of(ms, r->registered_at_us)];
        ms->buckets[bucket_of(ms, r->registered_at_us)] = m;
        ms->count++;
        grow(ms);
    }
    if (status != -ENOMEM)
        note_seq(ms, r->stream_seq);
    committed(ms, status);
    m->rec.stream_seq = 0; /* scans and gets do not see it */
    if (status == 0 && e)
        journal_insert(ms, j, e, &m->rec);
    pthread_rwlock_unlock(&ms->lock);
    if (status) {
        free(m);
        free(e);
        if (status == -ENOMEM)
            return -ENOMEM;
    }
    if (done)
        done(arg, status);
    return 0;
}

static int mem_put(nd_store *st, const nd_record *rec, const nd_store_event *audit,
                   nd_store_done_fn done, void *arg)
{
    return mem_write(st, rec, audit, false, done, arg);
}

static int mem_replace(nd_store *st, const nd_record *rec, nd_store_done_fn done, void *arg)
{
    return mem_write(st, rec, NULL, true, done, arg);
}

/* ---- events ---- */

static size_t journal_bucket(size_t nb, nd_event_kind kind, int64_t owner)
{
    uint64_t h = ((uint64_t)owner * 2 + (uint64_t)kind) * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & (nb - 1);
}

/* The journal of (kind, owner), or NULL. Lock held. */
static mem_journal *journal_find(mem_store *ms, nd_event_kind kind, int64_t owner)
{
    mem_journal *j = ms->journals[journal_bucket(ms->njournal_buckets, kind, owner)];
    while (j && (j->kind != kind || j->owner != owner))
        j = j->next;
    return j;
}

/* The journal of (kind, owner), made if missing, with room for one more
 * event: after this, journal_insert cannot fail. NULL: out of memory.
 * Write lock held. */
static mem_journal *journal_reserve(mem_store *ms, nd_event_kind kind, int64_t owner)
{
    mem_journal *j = journal_find(ms, kind, owner);
    if (!j) {
        if (!(j = calloc(1, sizeof(*j))))
            return NULL;
        j->kind = kind;
        j->owner = owner;
        size_t b = journal_bucket(ms->njournal_buckets, kind, owner);
        j->next = ms->journals[b];
        ms->journals[b] = j;
        ms->njournals++;
        if (ms->njournals * 4 >= ms->njournal_buckets * 3) { /* grow; failure: longer chains */
            size_t nb = ms->njournal_buckets * 2;
            mem_journal **t = calloc(nb, sizeof(*t));
            for (size_t i = 0; t && i < ms->njournal_buckets; i++)
                for (mem_journal *x = ms->journals[i], *next; x; x = next) {
                    next = x->next;
                    size_t k = journal_bucket(nb, x->kind, x->owner);
                    x->next = t[k];
                    t[k] = x;
                }
            if (t) {
                free(ms->journals);
                ms->journals = t;
                ms->njournal_buckets = nb;
            }
        }
    }
    if (j->n == j->cap && j->first > 0) { /* room at the front: compact */
        memmove(j->ev, j->ev + j->first, (j->n - j->first) * sizeof(*j->ev));
        j->n -= j->first;
        j->first = 0;
    }
    if (j->n == j->cap) {
        size_t cap = j->cap ? j->cap * 2 : 8;
        mem_ev **e = realloc(j->ev, cap * sizeof(*e));
        if (!e)
            return NULL; /* an empty journal made here stays, harmless */
        j->ev = e;
        j->cap = cap;
    }
    return j;
}

/* The first index of j whose at_us is >= at. */
static size_t journal_lower(const mem_journal *j, int64_t at)
{
    size_t lo = j->first, hi = j->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (j->ev[mid]->ev.at_us < at)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void journal_remove(mem_journal *j, size_t i)
{
    free(j->ev[i]);
    if (i == j->first) {
        j->first++;
        return;
    }
    memmove(j->ev + i, j->ev + i + 1, (j->n - i - 1) * sizeof(*j->ev));
    j->n--;
}

/* Events in j. */
static size_t journal_len(const mem_journal *j)
{
    return j->n - j->first;
}

/* A copy of ev in one allocation, or NULL. */
static mem_ev *ev_copy(const nd_store_event *ev)
{
    mem_ev *e = malloc(sizeof(*e) + ev->copy_id_len + ev->value_len + 1);
    if (!e)
        return NULL;
    e->ev = *ev;
    e->doc_hash = 0;
    e->has_doc = false;
    char *p = e->data;
    if (ev->copy_id_len)
        memcpy(p, ev->copy_id, ev->copy_id_len);
    e->ev.copy_id = ev->copy_id_len ? p : NULL;
    p += ev->copy_id_len;
    if (ev->value_len)
        memcpy(p, ev->value, ev->value_len);
    p[ev->value_len] = '\0';
    e->ev.value = p;
    return e;
}

/* ---- the audit entries by document ---- */

static size_t doc_bucket(size_t nb, uint64_t h, int64_t owner)
{
    return (size_t)((h ^ (uint64_t)owner * 0x9E3779B97F4A7C15ull) >> 20) & (nb - 1);
}

/* The list of the audit entries of owner naming the document of hash h,
 * or NULL. Lock held. */
static mem_journal *doclist_find(mem_store *ms, uint64_t h, int64_t owner)
{
    mem_journal *d = ms->docs[doc_bucket(ms->ndoc_buckets, h, owner)];
    while (d && (d->doc != h || d->owner != owner))
        d = d->next;
    return d;
}

/* Doubles the table of lists when it is 3/4 full (failure: longer chains). */
static void docs_grow(mem_store *ms)
{
    if (ms->ndocs * 4 < ms->ndoc_buckets * 3)
        return;
    size_t nb = ms->ndoc_buckets * 2;
    mem_journal **t = calloc(nb, sizeof(*t));
    if (!t)
        return;
    for (size_t i = 0; i < ms->ndoc_buckets; i++)
        for (mem_journal *x = ms->docs[i], *next; x; x = next) {
            next = x->next;
            size_t k = doc_bucket(nb, x->doc, x->owner);
            x->next = t[k];
            t[k] = x;
        }
    free(ms->docs);
    ms->docs = t;
    ms->ndoc_buckets = nb;
}

/* Makes the list of e's document (made if missing) hold room for one more
 * entry. Returns false when out of memory. Write lock held. */
static bool doclist_reserve(mem_store *ms, const mem_ev *e)
{
    mem_journal *d = doclist_find(ms, e->doc_hash, e->ev.owner_at);
    if (!d) {
        if (!(d = calloc(1, sizeof(*d))))
            return false;
        d->kind = ND_EVENT_AUDIT;
        d->owner = e->ev.owner_at;
        d->doc = e->doc_hash;
        size_t b = doc_bucket(ms->ndoc_buckets, d->doc, d->owner);
        d->next = ms->docs[b];
        ms->docs[b] = d;
        ms->ndocs++;
        docs_grow(ms);
    }
    if (d->n == d->cap && d->first > 0) {
        memmove(d->ev, d->ev + d->first, (d->n - d->first) * sizeof(*d->ev));
        d->n -= d->first;
        d->first = 0;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        mem_ev **ev = realloc(d->ev, cap * sizeof(*ev));
        if (!ev)
            return false; /* an empty list made here stays, harmless */
        d->ev = ev;
        d->cap = cap;
    }
    return true;
}

/* Adds e (stored in its journal, at its final at_us) to its document's
 * list, reserved by doclist_reserve(). Write lock held. */
static void doclist_insert(mem_store *ms, mem_ev *e)
{
    mem_journal *d = doclist_find(ms, e->doc_hash, e->ev.owner_at);
    size_t i = journal_lower(d, e->ev.at_us);
    memmove(d->ev + i + 1, d->ev + i, (d->n - i) * sizeof(*d->ev));
    d->ev[i] = e;
    d->n++;
}

/* Takes e out of its document's list (before it is freed); a list left
 * empty goes. Write lock held. */
static void doclist_remove(mem_store *ms, const mem_ev *e)
{
    size_t b = doc_bucket(ms->ndoc_buckets, e->doc_hash, e->ev.owner_at);
    mem_journal **pp = &ms->docs[b];
    while (*pp && ((*pp)->doc != e->doc_hash || (*pp)->owner != e->ev.owner_at))
        pp = &(*pp)->next;
    mem_journal *d = *pp;
    if (!d)
        return;
    size_t i = d->first;
    while (i < d->n && d->ev[i] != e)
        i++;
    if (i == d->first)
        d->first++;
    else if (i < d->n) {
        memmove(d->ev + i, d->ev + i + 1, (d->n - i - 1) * sizeof(*d->ev));
        d->n--;
    }
    if (d->first == d->n) {
        *pp = d->next;
        ms->ndocs--;
        free(d->ev);
        free(d);
    }
}

/* The journal e goes to, with room for it (and, for an audit entry that
 * names a document, its document's list: e's has_doc and doc_hash are set
 * here). NULL: out of memory. Write lock held. */
static mem_journal *event_reserve(mem_store *ms, mem_ev *e)
{
    if (e->ev.kind == ND_EVENT_AUDIT) {
        const char *doc;
        size_t dlen;
        e->has_doc = nd_store_audit_subject(e->ev.value, e->ev.value_len, &ms->js, &doc, &dlen);
        e->doc_hash = e->has_doc ? XXH3_64bits(doc, dlen) : 0;
        if (e->has_doc && !doclist_reserve(ms, e))
            return NULL;
    }
    return journal_reserve(ms, e->ev.kind, e->ev.owner_at);
}

/* Drops the oldest audit entries of j beyond audit_max_entries or older
 * than audit_max_age_us, at most budget of them (as the LMDB store's
 * retention, counted per journal: the API keeps every audit entry in
 * owner_at 0). Write lock held. */
static void audit_trim(mem_store *ms, mem_journal *j, size_t budget)
{
    uint64_t max = ms->base.audit_max_entries;
    int64_t age = ms->base.audit_max_age_us;
    int64_t cutoff = age ? nd_clock_wall_us() - age : INT64_MIN;
    while ((max || age) && budget-- > 0 && journal_len(j) > 0 &&
           ((max && journal_len(j) > max) || j->ev[j->first]->ev.at_us < cutoff)) {
        if (j->ev[j->first]->has_doc)
            doclist_remove(ms, j->ev[j->first]);
        journal_remove(j, j->first);
    }
}

/* Cuts detection journal j to target entries, dropping the ones
 * retention.h picks (as the LMDB store does). Out of memory: the oldest. */
static void journal_retain(mem_journal *j, uint64_t target)
{
    size_t len = journal_len(j), k = (size_t)(len - target), n = 0;
    nd_retention *t = nd_retention_new(len);
    int64_t *at = malloc(k * sizeof(int64_t));
    bool ok = t && at;
    for (size_t i = j->first; ok && i < j->n; i++)
        ok = nd_retention_add(t, j->ev[i]->ev.value, j->ev[i]->ev.value_len, j->ev[i]->ev.at_us) ==
             0;
    int64_t got = ok ? nd_retention_victims(t, k, at) : -1;
    nd_retention_free(t);
    if (got < 0) { /* out of memory: the oldest, as before */
        free(at);
        while (journal_len(j) > target)
            journal_remove(j, j->first);
        return;
    }
    n = (size_t)got;
    /* Drop them in one pass: at_us is unique in a journal. */
    size_t w = 0;
    for (size_t i = j->first; i < j->n; i++) {
        bool drop = false;
        for (size_t v = 0; v < n && !drop; v++)
            drop = at[v] == j->ev[i]->ev.at_us;
        if (drop)
            free(j->ev[i]);
        else
            j->ev[w++] = j->ev[i];
    }
    j->first = 0;
    j->n = w;
    free(at);
}

/* ---- the feed ---- */

/* Drops the oldest events older than events_max_age_us and not held, at
 * most budget. Write lock held. */
static void feed_trim(mem_store *ms, size_t budget)
{
    if (!ms->events_max_age_us)
        return;
    int64_t cutoff = nd_clock_wall_us() - ms->events_max_age_us;
    uint64_t hold = atomic_load(&ms->feed_hold);
    for (; budget > 0 && ms->feed_first < ms->feed_n; budget--) {
        mem_feed_ev *f = ms->feed[ms->feed_first];
        nd_event_rec ev;
        bool bad = nd_feed_value_decode(f->seq, f->v, f->len, &ev) != 0;
        if (f->seq > hold || (!bad && ev.at_us >= cutoff))
            break;
        free(f);
        ms->feed[ms->feed_first++] = NULL;
    }
}

/* Appends the feed's event of the journal entry e, if it shows one (see
 * nd_feed_event_of(); a detection's original is looked up). Write lock
 * held. An event that cannot be kept (no memory) is not shown. */
static void feed_append(mem_store *ms, const nd_store_event *e, const nd_record *subject)
{
    if (e->kind == ND_EVENT_DETECTION && !subject) {
        mem_rec *orig = *find(ms, e->owner_at);
        subject = orig ? &orig->rec : NULL;
    }
    nd_event_rec ev;
    char *owned;
    if (nd_feed_event_of(e, subject, &ev, &owned) <= 0)
        return;
    size_t len = nd_feed_value_size(&ev);
    mem_feed_ev *f = malloc(sizeof(*f) + len);
    if (ms->feed_n == ms->feed_cap && f) {
        if (ms->feed_first > 0) { /* compact before growing */
            memmove(ms->feed, ms->feed + ms->feed_first,
                    (ms->feed_n - ms->feed_first) * sizeof(*ms->feed));
            ms->feed_n -= ms->feed_first;
            ms->feed_first = 0;
        }
        if (ms->feed_n == ms->feed_cap) {
            size_t cap = ms->feed_cap ? 2 * ms->feed_cap : 64;
            mem_feed_ev **grown = realloc(ms->feed, cap * sizeof(*grown));
            if (grown) {
                ms->feed = grown;
                ms->feed_cap = cap;
            }
        }
    }
    if (!f || ms->feed_n == ms->feed_cap) {
        free(f);
        free(owned);
        return;
    }
    f->seq = atomic_load(&ms->feed_seq) + 1;
    f->len = len;
    nd_feed_value_encode(f->v, &ev);
    free(owned);
    ms->feed[ms->feed_n++] = f;
    atomic_store(&ms->feed_seq, f->seq);
    feed_trim(ms, 1 + TRIM_SLACK);
}

/* The index of the first event with seq >= seq in feed[feed_first..n). */
static size_t feed_lower(const mem_store *ms, uint64_t seq)
{
    size_t lo = ms->feed_first, hi = ms->feed_n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ms->feed[mid]->seq < seq)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int mem_feed_scan(nd_store *st, uint64_t from, bool descending,
                         int (*visit)(void *arg, const nd_event_rec *ev), void *arg)
{
    mem_store *ms = ms_of(st);
    int rc = 0;
    pthread_rwlock_rdlock(&ms->lock);
    if (descending) {
        size_t i = from == 0 ? ms->feed_n : feed_lower(ms, from);
        while (rc == 0 && i > ms->feed_first) {
            const mem_feed_ev *f = ms->feed[--i];
            nd_event_rec ev;
            if (nd_feed_value_decode(f->seq, f->v, f->len, &ev) == 0)
                rc = visit(arg, &ev);
        }
    } else {
        for (size_t i = feed_lower(ms, from == UINT64_MAX ? from : from + 1);
             rc == 0 && i < ms->feed_n; i++) {
            const mem_feed_ev *f = ms->feed[i];
            nd_event_rec ev;
            if (nd_feed_value_decode(f->seq, f->v, f->len, &ev) == 0)
                rc = visit(arg, &ev);
        }
    }
    pthread_rwlock_unlock(&ms->lock);
    return rc;
}

static void mem_feed_bounds(nd_store *st, uint64_t *oldest, uint64_t *latest)
{
    mem_store *ms = ms_of(st);
    pthread_rwlock_rdlock(&ms->lock);
    *latest = atomic_load(&ms->feed_seq);
    *oldest = ms->feed_first < ms->feed_n ? ms->feed[ms->feed_first]->seq
              : *latest                   ? *latest + 1
                                          : 0;
    pthread_rwlock_unlock(&ms->lock);
}

static void mem_feed_hold(nd_store *st, uint64_t seq)
{
    atomic_store(&ms_of(st)->feed_hold, seq);
}

/* Inserts e into j (reserved by journal_reserve): updates a detection of
 * the same copy id in place (its at_us kept), else raises at_us while
 * taken and drops the oldest beyond detections_max (audit: retention);
 * Write lock held. */
static void journal_insert(mem_store *ms, mem_journal *j, mem_ev *e, const nd_record *subject)
{
    if (e->ev.kind == ND_EVENT_DETECTION)
        for (size_t i = j->first; i < j->n; i++)
            if (j->ev[i]->ev.copy_id_len == e->ev.copy_id_len &&
                memcmp(j->ev[i]->ev.copy_id, e->ev.copy_id, e->ev.copy_id_len) == 0) {
                e->ev.at_us = j->ev[i]->ev.at_us;
                free(j->ev[i]);
                j->ev[i] = e;
                return;
            }
    size_t i = journal_lower(j, e->ev.at_us);
    while (i < j->n && j->ev[i]->ev.at_us == e->ev.at_us) {
        e->ev.at_us++;
        i++;
    }
    memmove(j->ev + i + 1, j->ev + i, (j->n - i) * sizeof(*j->ev));
    j->ev[i] = e;
    j->n++;
    feed_append(ms, &e->ev, subject);
    if (e->has_doc)
        doclist_insert(ms, e);
    uint64_t max = ms->base.detections_max;
    nd_event_kind kind = e->ev.kind; /* e may be dropped below */
    if (kind == ND_EVENT_DETECTION && max && journal_len(j) > max)
        journal_retain(j, nd_retention_target(max));
    if (kind == ND_EVENT_AUDIT)
        audit_trim(ms, j, 1 + TRIM_SLACK);
}

static int mem_event_put(nd_store *st, const nd_store_event *ev, nd_store_done_fn done, void *arg)
{
    mem_store *ms = ms_of(st);
    if (!nd_record_event_ok(ev))
        return -EINVAL;
    mem_ev *e = ev_copy(ev);
    if (!e)
        return -ENOMEM;
    pthread_rwlock_wrlock(&ms->lock);
    mem_journal *j = event_reserve(ms, e);
    if (j) {
        atomic_fetch_add_explicit(&ms->commits, 1, memory_order_relaxed);
        journal_insert(ms, j, e, NULL);
        note_seq(ms, ev->stream_seq);
    }
    pthread_rwlock_unlock(&ms->lock);
    if (!j) {
        free(e);
        return -ENOMEM;
    }
    if (done)
        done(arg, 0);
    return 0;
}

static int mem_events(nd_store *st, nd_event_kind kind, int64_t owner_at, int64_t before_at,
                      size_t limit, int (*visit)(void *arg, const nd_store_event *ev), void *arg)
{
    mem_store *ms = ms_of(st);
    if (owner_at < 0 || (kind != ND_EVENT_DETECTION && kind != ND_EVENT_AUDIT))
        return -EINVAL;
    int rc = 0;
    pthread_rwlock_rdlock(&ms->lock);
    mem_journal *j = journal_find(ms, kind, owner_at);
    size_t i = !j ? 0 : before_at >= 0 ? journal_lower(j, before_at) : j->n;
    size_t first = j ? j->first : 0;
    for (size_t seen = 0; i > first && rc == 0 && (limit == 0 || seen < limit); seen++)
        rc = visit(arg, &j->ev[--i]->ev);
    pthread_rwlock_unlock(&ms->lock);
    return rc;
}

/* The audit entries of owner_at naming document: its document's list,
 * newest first (each compared by the document itself). */
static int mem_audit_of(nd_store *st, int64_t owner_at, const char *doc, size_t len,
                        int64_t before_at, size_t limit,
                        int (*visit)(void *arg, const nd_store_event *ev), void *arg)
{
    mem_store *ms = ms_of(st);
    if (owner_at < 0 || !doc || len == 0 || len > ND_ID_MAX)
        return -EINVAL;
    uint64_t h = XXH3_64bits(doc, len);
    nd_json_scratch js = {0};
    int rc = 0;
    pthread_rwlock_rdlock(&ms->lock);
    mem_journal *d = doclist_find(ms, h, owner_at);
    size_t i = !d ? 0 : before_at >= 0 ? journal_lower(d, before_at) : d->n;
    size_t first = d ? d->first : 0, seen = 0;
    while (i > first && rc == 0 && (limit == 0 || seen < limit)) {
        const mem_ev *e = d->ev[--i];
        const char *sd;
        size_t sl;
        if (!nd_store_audit_subject(e->ev.value, e->ev.value_len, &js, &sd, &sl) || sl != len ||
            memcmp(sd, doc, len) != 0)
            continue; /* another document of the same hash */
        seen++;
        rc = visit(arg, &e->ev);
    }
    pthread_rwlock_unlock(&ms->lock);
    nd_json_scratch_finish(&js);
    return rc;
}

/* amend: replace keeping the stored sketch, with the audit event in the
 * same critical section. */
static int mem_amend(nd_store *st, const nd_record *rec, const nd_store_event *audit,
                     nd_store_done_fn done, void *arg)
{
    mem_store *ms = ms_of(st);
    if (!rec || !nd_record_audit_ok(audit))
        return -EINVAL;
    nd_record r = *rec;
    r.sketch = NULL;
    r.sketch_len = 0;
    r.text = NULL;
    r.text_len = 0;
    r.text_packed = NULL;
    r.text_packed_len = 0;
    if (!nd_record_check(&r) || !nd_record_refs_ok(&r))
        return -EINVAL;
    size_t nsup = r.supersede ? r.nsupersede : 0;
    mem_ev *e = audit ? ev_copy(audit) : NULL;
    if (audit && !e)
        return -ENOMEM;
    pthread_rwlock_wrlock(&ms->lock);
    mem_rec **pp = find(ms, r.registered_at_us), *m = NULL;
    mem_journal *j = NULL;
    int status = 0;
    if (!*pp || !same_id(&(*pp)->rec, r.id, r.id_len)) {
        status = -ENOENT;
    } else {
        r.sketch = (*pp)->rec.sketch;
        r.sketch_len = (*pp)->rec.sketch_len;
        r.text_packed = (*pp)->rec.text_packed; /* the kept text stays too */
        r.text_packed_len = (*pp)->rec.text_packed_len;
        if (!(m = rec_copy(&r)) || (e && !(j = event_reserve(ms, e))))
            status = -ENOMEM;
    }
    if (status == 0) {
        mem_rec *old = *pp;
        m->next = old->next;
        *pp = m;
        free(old);
        m->rec.stream_seq = 0;
        committed(ms, 0);
        for (size_t i = 0; i < nsup; i++) { /* in place: same bytes */
            mem_rec *b = *find(ms, r.supersede[i].registered_at_us);
            if (b && same_id(&b->rec, r.supersede[i].id, r.supersede[i].id_len) &&
                b->rec.status == ND_CLAIM_ACTIVE) {
                b->rec.status = ND_CLAIM_SUPERSEDED;
                b->rec.superseded_by_us = r.registered_at_us;
            }
        }
        if (e)
            journal_insert(ms, j, e, &m->rec);
    } else {
        committed(ms, status);
    }
    note_seq(ms, r.stream_seq);
    pthread_rwlock_unlock(&ms->lock);
    if (status) {
        free(m);
        free(e);
        if (status == -ENOMEM)
            return -ENOMEM;
    }
    if (done)
        done(arg, status);
    return 0;
}

/* Empties the detections of owner (a deleted record's). Write lock held. */
static void detections_drop(mem_store *ms, int64_t owner)
{
    mem_journal *j = journal_find(ms, ND_EVENT_DETECTION, owner);
    while (j && journal_len(j) > 0)
        journal_remove(j, j->first);
}

static int mem_delete_at(nd_store *st, const char *id, size_t id_len, int64_t at, uint64_t seq,
                         const nd_store_event *audit, nd_store_done_fn done, void *arg)
{
    mem_store *ms = ms_of(st);
    if (!nd_record_id_ok(id, id_len) || at < 0 || !nd_record_audit_ok(audit))
        return -EINVAL;
    mem_ev *e = audit ? ev_copy(audit) : NULL;
    if (audit && !e)
        return -ENOMEM;
    pthread_rwlock_wrlock(&ms->lock);
    mem_rec **pp = find(ms, at), *gone = NULL;
    mem_journal *j = NULL;
    int status = -ENOENT;
    if (*pp && same_id(&(*pp)->rec, id, id_len)) {
        if (e && !(j = event_reserve(ms, e))) {
            pthread_rwlock_unlock(&ms->lock);
            free(e);
            return -ENOMEM;
        }
        gone = *pp;
        *pp = gone->next;
        ms->count--;
        detections_drop(ms, at);
        status = 0;
    }
    note_seq(ms, seq);
    committed(ms, status);
    if (status == 0 && e) {
        journal_insert(ms, j, e, &gone->rec);
        e = NULL;
    }
    pthread_rwlock_unlock(&ms->lock);
    free(e);
    free(gone);
    if (done)
        done(arg, status);
    return 0;
}

static int at_cmp(const void *a, const void *b)
{
    int64_t x = (*(mem_rec *const *)a)->rec.registered_at_us;
    int64_t y = (*(mem_rec *const *)b)->rec.registered_at_us;
    return x < y ? -1 : x > y;
}

static int mem_scan(nd_store *st, int (*visit)(void *arg, const nd_record *rec), void *arg)
{
    mem_store *ms = ms_of(st);
    pthread_rwlock_rdlock(&ms->lock);
    mem_rec **all = malloc((ms->count ? ms->count : 1) * sizeof(*all));
    int rc = all ? 0 : -ENOMEM;
    size_t n = 0;
    for (size_t i = 0; all && i < ms->nbuckets; i++)
        for (mem_rec *r = ms->buckets[i]; r; r = r->next)
            all[n++] = r;
    if (all)
        qsort(all, n, sizeof(*all), at_cmp); /* registration order */
    for (size_t i = 0; i < n && rc == 0; i++) {
        nd_record r = all[i]->rec;
        r.sketch = NULL; /* as a scan of the LMDB store: never the sketch, nor the text */
        r.sketch_len = 0;
        r.text_packed = NULL;
        r.text_packed_len = 0;
        rc = visit(arg, &r);
    }
    pthread_rwlock_unlock(&ms->lock);
    free(all);
    return rc;
}

static int mem_get(nd_store *st, int64_t at, int (*visit)(void *arg, const nd_record *rec),
                   void *arg)
{
    mem_store *ms = ms_of(st);
    if (at < 0)
        return -EINVAL;
    pthread_rwlock_rdlock(&ms->lock);
    mem_rec *m = *find(ms, at);
    int rc = -ENOENT;
    if (m) {
        nd_record r = m->rec;
        r.sketch = NULL;
        r.sketch_len = 0;
        r.text_packed = NULL;
        r.text_packed_len = 0;
        rc = visit(arg, &r);
    }
    pthread_rwlock_unlock(&ms->lock);
    return rc;
}

static int mem_sketches(nd_store *st, const int64_t *at, size_t n,
                        int (*visit)(void *arg, size_t i, const uint8_t *buf, size_t len),
                        void *arg)
{
    mem_store *ms = ms_of(st);
    int rc = 0;
    pthread_rwlock_rdlock(&ms->lock);
    for (size_t i = 0; i < n && rc == 0; i++) {
        mem_rec *m = at[i] < 0 ? NULL : *find(ms, at[i]);
        rc = m ? visit(arg, i, m->rec.sketch, m->rec.sketch_len) : visit(arg, i, NULL, 0);
    }
    pthread_rwlock_unlock(&ms->lock);
    return rc;
}

static int mem_text(nd_store *st, int64_t at, int (*visit)(void *arg, const char *text, size_t len),
                    void *arg)
{
    mem_store *ms = ms_of(st);
    char *text = NULL;
    size_t len = 0;
    if (at < 0)
        return -EINVAL;
    pthread_rwlock_rdlock(&ms->lock);
    mem_rec *m = *find(ms, at);
    int rc = m && m->rec.text_packed
                 ? nd_text_unpack(m->rec.text_packed, m->rec.text_packed_len, &text, &len)
                 : -ENOENT;
    pthread_rwlock_unlock(&ms->lock);
    if (rc == 0)
        rc = visit(arg, text, len); /* no lock held: visit may call the store */
    free(text);
    return rc;
}

static int64_t mem_count(nd_store *st)
{
    mem_store *ms = ms_of(st);
    pthread_rwlock_rdlock(&ms->lock);
    int64_t n = (int64_t)ms->count;
    pthread_rwlock_unlock(&ms->lock);
    return n;
}

static uint64_t mem_stream_seq(nd_store *st)
{
    return atomic_load_explicit(&ms_of(st)->stream_seq, memory_order_relaxed);
}

static bool mem_writable(const nd_store *st)
{
    (void)st;
    return true;
}

/* One committed change per transaction: commits and changes count them. */
static void mem_get_stats(nd_store *st, nd_store_stats *out)
{
    mem_store *ms = ms_of(st);
    memset(out, 0, sizeof(*out));
    out->commits = out->changes = atomic_load(&ms->commits);
    out->failed_changes = atomic_load(&ms->failed);
    out->max_batch = out->commits ? 1 : 0;
    out->commit_buckets[0] = out->commits;
}

static void mem_close(nd_store *st)
{
    mem_store *ms = ms_of(st);
    for (size_t i = 0; i < ms->nbuckets; i++)
        for (mem_rec *r = ms->buckets[i], *next; r; r = next) {
            next = r->next;
            free(r);
        }
    free(ms->buckets);
    for (size_t i = 0; i < ms->njournal_buckets; i++)
        for (mem_journal *j = ms->journals[i], *next; j; j = next) {
            next = j->next;
            for (size_t k = j->first; k < j->n; k++)
                free(j->ev[k]);
            free(j->ev);
            free(j);
        }
    free(ms->journals);
    for (size_t i = 0; i < ms->ndoc_buckets; i++)
        for (mem_journal *d = ms->docs[i], *next; d; d = next) {
            next = d->next;
            free(d->ev); /* the entries are the journals' */
            free(d);
        }
    free(ms->docs);
    for (size_t i = ms->feed_first; i < ms->feed_n; i++)
        free(ms->feed[i]);
    free(ms->feed);
    nd_json_scratch_finish(&ms->js);
    pthread_rwlock_destroy(&ms->lock);
    free(ms);
}

static const nd_store_ops mem_ops = {
    .name = "memory",
    .durable = false,
    .commits_in_call = true,
    .put = mem_put,
    .replace = mem_replace,
    .amend = mem_amend,
    .event_put = mem_event_put,
    .list_events = mem_events,
    .list_audit = mem_audit_of,
    .feed_scan = mem_feed_scan,
    .feed_bounds = mem_feed_bounds,
    .feed_hold = mem_feed_hold,
    .delete_at = mem_delete_at,
    .scan = mem_scan,
    .get = mem_get,
    .sketches = mem_sketches,
    .text = mem_text,
    .count = mem_count,
    .stream_seq = mem_stream_seq,
    .writable = mem_writable,
    .get_stats = mem_get_stats,
    .close = mem_close,
};

int nd_store_memory_open(nd_store **out)
{
    return nd_store_memory_open_with(out, NULL);
}

int nd_store_memory_open_with(nd_store **out, const nd_store_options *opts)
{
    nd_store_options d;
    if (!opts) {
        nd_store_options_default(&d);
        opts = &d;
    }
    mem_store *ms = calloc(1, sizeof(*ms));
    if (!ms || !(ms->buckets = calloc(1024, sizeof(*ms->buckets))) ||
        !(ms->journals = calloc(64, sizeof(*ms->journals))) ||
        !(ms->docs = calloc(64, sizeof(*ms->docs)))) {
        if (ms) {
            free(ms->buckets);
            free(ms->journals);
        }
        free(ms);
        return -ENOMEM;
    }
    ms->ndoc_buckets = 64;
    ms->nbuckets = 1024;
    ms->njournal_buckets = 64;
    ms->base.ops = &mem_ops;
    ms->base.detections_max = opts->detections_max;
    ms->base.audit_max_entries = opts->audit_max_entries;
    ms->base.audit_max_age_us = opts->audit_max_age_us;
    ms->events_max_age_us = opts->events_max_age_us;
    atomic_store(&ms->feed_hold, UINT64_MAX);
    pthread_rwlock_init(&ms->lock, NULL);
    *out = (nd_store *)(void *)ms;
    return 0;
}
