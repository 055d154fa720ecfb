/* fsync_shim.c - an LD_PRELOAD library that makes fsync(2) and fdatasync(2)
 * slow or failing on demand, for tests of what the server does while a
 * commit is in flight or after one failed.
 *
 * Controlled at run time through two files whose paths come from the
 * environment, so a test can switch the behaviour while the server runs:
 *   ND_SHIM_DELAY_FILE  while this file exists, each call first sleeps the
 *                       number of milliseconds written in it (0..60000)
 *   ND_SHIM_FAIL_FILE   while this file exists, each call fails with EIO
 *                       (after the delay, if both are set)
 * Without either variable the calls pass straight through. The files are
 * looked up on every call: a call costs one stat() and, with a delay, one
 * small read, which is nothing next to a real fsync.
 *
 * Under AddressSanitizer the preloaded library is not first in the link
 * order: run with ASAN_OPTIONS=verify_asan_link_order=0
 * (tests/integration/harness.py's fsync_shim_env() sets it). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef int (*sync_fn)(int);

/* Milliseconds written in the delay file, 0 when there is none. */
static long delay_ms(void)
{
    const char *path = getenv("ND_SHIM_DELAY_FILE");
    if (!path)
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char buf[32];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    long ms = strtol(buf, NULL, 10);
    return ms < 0 ? 0 : ms > 60000 ? 60000 : ms;
}

/* True while the fail file exists. */
static int must_fail(void)
{
    const char *path = getenv("ND_SHIM_FAIL_FILE");
    struct stat st;
    return path && stat(path, &st) == 0;
}

/* Sleeps as asked, then fails or calls the real function. */
static int shimmed(const char *name, int fd)
{
    long ms = delay_ms();
    if (ms > 0) {
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
    if (must_fail()) {
        errno = EIO;
        return -1;
    }
    sync_fn real = (sync_fn)dlsym(RTLD_NEXT, name);
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    return real(fd);
}

int fsync(int fd)
{
    return shimmed("fsync", fd);
}

int fdatasync(int fd)
{
    return shimmed("fdatasync", fd);
}
