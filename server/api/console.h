/* console.h - the review console's files (server/console/), embedded in the
 * binary at build time: server/console/embed.py writes console_assets.c,
 * one row per file. console.c serves them at /console/ (handlers.h).
 * Internal to server/api/. */
#ifndef ND_CONSOLE_H
#define ND_CONSOLE_H

#include <stddef.h>

/* One embedded file: all static, never freed. */
typedef struct nd_console_asset {
    const char *name;          /* its path under /console/ ("index.html") */
    const char *type;          /* its Content-Type */
    const char *etag;          /* a strong ETag, quoted: its SHA-256's first 16 hex digits */
    const unsigned char *data; /* its bytes */
    size_t len;
} nd_console_asset;

/* The files, in the order meson lists them; ends with a row whose name is
 * NULL (console_assets.c, generated). */
extern const nd_console_asset nd_console_assets[];

/* The file named name[0..len) (borrowed, static), or NULL. */
const nd_console_asset *nd_console_find(const char *name, size_t len);

#endif
