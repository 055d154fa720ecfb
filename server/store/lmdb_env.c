/* lmdb_env.c - the LMDB store's small environment helpers (lmdb_env.h):
 * read transactions under env_lock, paths in the data directory, the
 * errors of opening, the size check of data.mdb, the lock file claim. */
#include "lmdb_env.h"

char *lmdb_path_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + 1 + strlen(name) + 1;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* Refuses a data.mdb shorter than the pages its meta page references (a
 * truncated copy would otherwise crash with SIGBUS on first access). */
int lmdb_check_size(MDB_env *env, const char *dir, char *err, size_t errlen)
{
    MDB_envinfo info;
    MDB_stat est;
    struct stat sb;
    int fd;
    if (mdb_env_info(env, &info) || mdb_env_stat(env, &est) || mdb_env_get_fd(env, &fd) ||
        fstat(fd, &sb))
        return set_err(err, errlen, -EIO, "cannot inspect %s/" DATA_NAME, dir);
    unsigned long long need = ((unsigned long long)info.me_last_pgno + 1) * est.ms_psize;
    if ((unsigned long long)sb.st_size < need)
        return set_err(err, errlen, -EINVAL,
                       "%s/" DATA_NAME " is truncated (%lld bytes, its pages need %llu)", dir,
                       (long long)sb.st_size, need);
    return 0;
}

int lmdb_open_err(int rc, const char *dir, const char *step, char *err, size_t errlen)
{
    if (is_corrupt_error(rc))
        return set_err(err, errlen, -EINVAL,
                       "%s/" DATA_NAME " is corrupt or not a neardup store (%s: %s)", dir, step,
                       mdb_strerror(rc));
    if (is_space_error(rc))
        return set_err(err, errlen, -ENOSPC, "no space for the store in %s (%s: %s)", dir, step,
                       mdb_strerror(rc));
    if (rc == EACCES || rc == EPERM || rc == EROFS)
        return set_err(err, errlen, rc == EROFS ? -EROFS : -EACCES,
                       "data directory %s is not writable (%s: %s)", dir, step, mdb_strerror(rc));
    if (rc == ENOMEM)
        return set_err(err, errlen, -ENOMEM, "cannot map the store in %s (%s: %s); lower map_size?",
                       dir, step, mdb_strerror(rc));
    return set_err(err, errlen, mdb_errno(rc), "cannot open the store in %s (%s: %s)", dir, step,
                   mdb_strerror(rc));
}

/* Reserves the blocks of lock.mdb before LMDB maps it. LMDB creates the
 * file sparse and writes its header and reader slots through a shared
 * mapping; touching a hole on a full disk raises SIGBUS. fallocate with
 * KEEP_SIZE reserves the space without changing the file's size, which
 * other processes that have it mapped rely on. Returns 0 or -ENOSPC. */
int lmdb_claim_lock_file(const char *dir, char *err, size_t errlen)
{
    char *path = lmdb_path_join(dir, "lock.mdb");
    if (!path)
        return set_err(err, errlen, -ENOMEM, "out of memory");
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, FILE_MODE);
    free(path);
    if (fd < 0)
        return 0; /* read-only directory: LMDB runs without it */
    struct stat sb;
    off_t want = (off_t)MAX_READERS * 64 + 4096; /* slots + header, rounded up */
    int rc = 0;
    if (fstat(fd, &sb) == 0 && sb.st_size > want)
        want = sb.st_size;
    if (fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, want))
        rc = errno;
    close(fd);
    if (rc == ENOSPC || rc == EDQUOT)
        return set_err(err, errlen, -ENOSPC, "no space for %s/lock.mdb: %s", dir, strerror(rc));
    return 0; /* EOPNOTSUPP etc.: nothing more to do */
}

/* Begins a read transaction with env_lock held shared. On success the
 * caller ends with lmdb_read_end(). Returns 0 or -errno (lock released). */
int lmdb_read_begin(nd_store *st, MDB_txn **txn)
{
    pthread_rwlock_rdlock(&st->env_lock);
    int rc = st->env ? mdb_txn_begin(st->env, NULL, MDB_RDONLY, txn) : MDB_PANIC;
    if (rc) {
        pthread_rwlock_unlock(&st->env_lock);
        return mdb_errno(rc);
    }
    return 0;
}

void lmdb_read_end(nd_store *st, MDB_txn *txn)
{
    mdb_txn_abort(txn);
    pthread_rwlock_unlock(&st->env_lock);
}
