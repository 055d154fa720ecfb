/* hook_position.c - the webhook positions kept in files (one per
 * subscription, replaced atomically) or in memory. */
#include "hook_position.h"
#include "hook_config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- files ---- */

typedef struct file_positions {
    nd_hook_positions base;
    int dirfd;
    char dir[4096];
} file_positions;

static int file_load(nd_hook_positions *p, const char *sub, uint64_t *seq)
{
    file_positions *fp = (file_positions *)p;
    char name[ND_HOOK_NAME_MAX + 16];
    snprintf(name, sizeof(name), "%s.position", sub);
    int fd = openat(fp->dirfd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    char buf[32];
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    int e = errno;
    close(fd);
    if (n < 0)
        return -e;
    buf[n] = 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(buf, &end, 10);
    if (n == 0 || errno || end == buf || (*end && *end != '\n'))
        return -EBADMSG;
    *seq = v;
    return 0;
}

static int file_save(nd_hook_positions *p, const char *sub, uint64_t seq)
{
    file_positions *fp = (file_positions *)p;
    char name[ND_HOOK_NAME_MAX + 16], tmp[ND_HOOK_NAME_MAX + 24];
    snprintf(name, sizeof(name), "%s.position", sub);
    snprintf(tmp, sizeof(tmp), "%s.position.tmp", sub);
    char buf[32];
    int len = snprintf(buf, sizeof(buf), "%" PRIu64 "\n", seq);
    int fd = openat(fp->dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    int rc = 0;
    if (write(fd, buf, (size_t)len) != len || fsync(fd) < 0)
        rc = errno ? -errno : -EIO;
    if (close(fd) < 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && renameat(fp->dirfd, tmp, fp->dirfd, name) < 0)
        rc = -errno;
    if (rc == 0 && fsync(fp->dirfd) < 0)
        rc = -errno;
    if (rc < 0)
        unlinkat(fp->dirfd, tmp, 0);
    return rc;
}

static void file_close(nd_hook_positions *p)
{
    file_positions *fp = (file_positions *)p;
    close(fp->dirfd);
    free(fp);
}

static const nd_hook_positions_ops file_ops = {
    .name = "file", .load = file_load, .save = file_save, .close = file_close};

int nd_hook_positions_file_open(nd_hook_positions **out, const char *dir, char *err, size_t cap)
{
    *out = NULL;
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        int e = errno;
        snprintf(err, cap, "cannot create the webhook positions directory %s: %s", dir,
                 strerror(e));
        return -e;
    }
    file_positions *fp = calloc(1, sizeof(*fp));
    if (!fp)
        return -ENOMEM;
    fp->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fp->dirfd < 0) {
        int e = errno;
        snprintf(err, cap, "cannot open the webhook positions directory %s: %s", dir, strerror(e));
        free(fp);
        return -e;
    }
    fp->base.ops = &file_ops;
    snprintf(fp->dir, sizeof(fp->dir), "%s", dir);
    *out = &fp->base;
    return 0;
}

/* ---- memory ---- */

typedef struct memory_positions {
    nd_hook_positions base;
    size_t n;
    struct {
        char name[ND_HOOK_NAME_MAX + 1];
        uint64_t seq;
    } kept[ND_HOOK_SUBS_MAX];
} memory_positions;

static int memory_load(nd_hook_positions *p, const char *sub, uint64_t *seq)
{
    memory_positions *mp = (memory_positions *)p;
    for (size_t i = 0; i < mp->n; i++)
        if (strcmp(mp->kept[i].name, sub) == 0)
            return *seq = mp->kept[i].seq, 0;
    return -ENOENT;
}

static int memory_save(nd_hook_positions *p, const char *sub, uint64_t seq)
{
    memory_positions *mp = (memory_positions *)p;
    for (size_t i = 0; i < mp->n; i++)
        if (strcmp(mp->kept[i].name, sub) == 0)
            return mp->kept[i].seq = seq, 0;
    if (mp->n == ND_HOOK_SUBS_MAX)
        return -ENOSPC;
    snprintf(mp->kept[mp->n].name, sizeof(mp->kept[mp->n].name), "%s", sub);
    mp->kept[mp->n++].seq = seq;
    return 0;
}

static void memory_close(nd_hook_positions *p)
{
    free(p);
}

static const nd_hook_positions_ops memory_ops = {
    .name = "memory", .load = memory_load, .save = memory_save, .close = memory_close};

int nd_hook_positions_memory_open(nd_hook_positions **out)
{
    memory_positions *mp = calloc(1, sizeof(*mp));
    if (!mp)
        return *out = NULL, -ENOMEM;
    mp->base.ops = &memory_ops;
    *out = &mp->base;
    return 0;
}
