/* store.c - PLACEHOLDER: being written (issue 5). */
#include "store.h"
#include <errno.h>
#include <string.h>
void nd_store_options_default(nd_store_options *o) { memset(o, 0, sizeof(*o)); }
int nd_store_open(nd_store **out, const char *dir, const nd_store_options *opts, char *err, size_t errlen)
{ (void)out; (void)dir; (void)opts; (void)err; (void)errlen; return -ENOSYS; }
int nd_store_put(nd_store *st, const nd_record *rec, nd_store_done_fn done, void *arg)
{ (void)st; (void)rec; (void)done; (void)arg; return -ENOSYS; }
int nd_store_delete(nd_store *st, const char *id, size_t id_len, nd_store_done_fn done, void *arg)
{ (void)st; (void)id; (void)id_len; (void)done; (void)arg; return -ENOSYS; }
int nd_store_scan(nd_store *st, int (*visit)(void *, const nd_record *), void *arg)
{ (void)st; (void)visit; (void)arg; return -ENOSYS; }
int64_t nd_store_count(nd_store *st) { (void)st; return -ENOSYS; }
int nd_store_backup(nd_store *st, const char *dir, char *err, size_t errlen)
{ (void)st; (void)dir; (void)err; (void)errlen; return -ENOSYS; }
bool nd_store_writable(const nd_store *st) { (void)st; return false; }
void nd_store_close(nd_store *st) { (void)st; }
