#!/usr/bin/env python3
"""check_layers.py - the layers' include rules, checked at build time.

server/meson.build runs it over every layer folder before any layer is
compiled (its stamp is an input of each layer's library), so a file that
breaks a rule fails the build with one line naming the file, the line and
the rule. The rules, from the table in server/meson.build (each layer: the
layers below it that it may use, and the third-party libraries it may use):

  1. No path in a quoted include (`#include "../store/store.h"`,
     `#include "store/store.h"`): a layer names a header by its file name,
     and its include path decides which it may see.
  2. A quoted include names a header of the layer itself, of a layer below
     it that the table lets it use, of lib/ (below every layer), or one the
     build generates for it (--generated NAME). A header of any other layer
     is an include that runs up a floor (or sideways): an error naming the
     layer that owns it.
  3. An angle include is a C or POSIX system header, or a third-party
     library's header (HEADERS below) that the table lets the layer use. An
     unknown header is an error too: a new library is added to the table
     first.

Hand-written prototypes of a higher layer's functions are the link check's
(server/meson.build: each layer linked on its own with -Wl,--no-undefined
against only the layers below it).

  check_layers.py --root server --lib lib --stamp OUT
                  --layer NAME:BELOW,BELOW:LIB,LIB ... [--generated NAME]

Exit 0 (the stamp written) or 1 (each violation on stderr).
"""

import argparse
import os
import re
import sys

# Third-party headers: a file name or a folder prefix, and the library
# (server/meson.build's names) that provides it.
HEADERS = {
    "event2/": "libevent",
    "jansson.h": "jansson",
    "xxhash.h": "xxhash",
    "lmdb.h": "lmdb",
    "zstd.h": "zstd",
    "zstd_errors.h": "zstd",
    "zlib.h": "zlib",
    "curl/": "curl",
    "openssl/": "libcrypto",
    "nats/": "nats",
    "utf8proc.h": "utf8proc",
    "unicode/": "icu",
    "opencc/": "opencc",
}

# C11 and POSIX (and the few glibc) headers a layer may include freely.
SYSTEM = {
    "assert.h", "complex.h", "ctype.h", "errno.h", "fenv.h", "float.h", "inttypes.h",
    "iso646.h", "limits.h", "locale.h", "math.h", "setjmp.h", "signal.h", "stdalign.h",
    "stdarg.h", "stdatomic.h", "stdbool.h", "stddef.h", "stdint.h", "stdio.h", "stdlib.h",
    "stdnoreturn.h", "string.h", "tgmath.h", "threads.h", "time.h", "uchar.h", "wchar.h",
    "wctype.h",
    "aio.h", "arpa/inet.h", "dirent.h", "dlfcn.h", "endian.h", "fcntl.h", "fnmatch.h",
    "getopt.h", "glob.h", "grp.h", "libgen.h", "net/if.h", "netdb.h", "netinet/in.h",
    "netinet/tcp.h", "poll.h", "pthread.h", "pwd.h", "regex.h", "sched.h", "semaphore.h",
    "spawn.h", "strings.h", "sys/epoll.h", "sys/file.h", "sys/ioctl.h", "sys/mman.h",
    "sys/queue.h", "sys/random.h", "sys/resource.h", "sys/select.h", "sys/socket.h",
    "sys/stat.h", "sys/statvfs.h", "sys/time.h", "sys/types.h", "sys/uio.h", "sys/un.h",
    "sys/wait.h", "syslog.h", "termios.h", "unistd.h", "emmintrin.h", "immintrin.h",
}

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def third_party(header):
    """The library a third-party header belongs to, or None."""
    for key, lib in HEADERS.items():
        if header == key or (key.endswith("/") and header.startswith(key)):
            return lib
    return None


def parse_layer(spec):
    name, below, libs = (spec.split(":") + ["", ""])[:3]
    return name, [b for b in below.split(",") if b], [x for x in libs.split(",") if x]


def headers_of(folder):
    try:
        return {f for f in os.listdir(folder) if f.endswith(".h")}
    except OSError:
        return set()


def check(root, lib, layers, generated):
    """The violations, as "file:line: message" strings."""
    owner = {}  # header -> layer
    for name in layers:
        for h in headers_of(os.path.join(root, name)):
            owner.setdefault(h, name)
    lib_headers = headers_of(lib)
    problems = []
    for name, (below, libs) in layers.items():
        seen = headers_of(os.path.join(root, name))
        for b in below:
            seen |= headers_of(os.path.join(root, b))
        folder = os.path.join(root, name)
        for f in sorted(os.listdir(folder)):
            if not f.endswith((".c", ".h")):
                continue
            path = os.path.join(folder, f)
            with open(path, encoding="utf-8", errors="replace") as fh:
                for lineno, line in enumerate(fh, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    kind, header = m.groups()
                    where = "%s:%d: %s" % (path, lineno, line.strip())
                    if kind == '"':
                        if "/" in header:
                            problems.append("%s: a path in an include (a layer names a header "
                                            "by its file name; its include path decides what "
                                            "it sees)" % where)
                        elif header in seen or header in lib_headers or header in generated:
                            pass
                        elif header in owner:
                            problems.append("%s: %s belongs to the layer %s, which %s may not "
                                            "use (it may use: %s)" % (
                                                where, header, owner[header], name,
                                                ", ".join(below) or "only lib/"))
                        else:
                            problems.append("%s: no layer below %s and not lib/ has %s" % (
                                where, name, header))
                    else:
                        lib_name = third_party(header)
                        if lib_name is None:
                            if header not in SYSTEM:
                                problems.append("%s: <%s> is neither a system header nor a "
                                                "library of the table (server/meson.build, "
                                                "server/check_layers.py HEADERS)" % (where, header))
                        elif lib_name not in libs:
                            problems.append("%s: the layer %s may not use %s (it may use: %s)"
                                            % (where, name, lib_name, ", ".join(libs) or "none"))
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--stamp")
    ap.add_argument("--layer", action="append", default=[])
    ap.add_argument("--generated", action="append", default=[])
    a = ap.parse_args()
    layers = {}
    for spec in a.layer:
        name, below, libs = parse_layer(spec)
        layers[name] = (below, libs)
    problems = check(a.root, a.lib, layers, set(a.generated))
    for p in problems:
        print("layers: " + p, file=sys.stderr)
    if problems:
        print("layers: %d violation(s) of the layer rules (server/meson.build's table)"
              % len(problems), file=sys.stderr)
        return 1
    if a.stamp:
        with open(a.stamp, "w") as fh:
            fh.write("%d layers checked\n" % len(layers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
