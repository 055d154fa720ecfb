/* bounds.h - every limit of a request and of its answer in one place: the
 * fixed ones (ids, request objects, answers), and the defaults and ranges
 * of the configurable ones (the flags of config.c; README "Limits").
 *
 * Header only: macros, no code. Named bounds.h, not limits.h: with server/
 * on the include path a "limits.h" here would hide the C library's
 * <limits.h> from every file compiled with it. The store's own format
 * bounds (ND_ID_MAX bytes of an id, ND_META_MAX) stay in store.h; api.c
 * asserts that they hold every request these bounds let through. */
#ifndef ND_BOUNDS_H
#define ND_BOUNDS_H

/* ---- fixed ---- */

/* A document id: 1 to 256 characters (Unicode code points, as JSON Schema's
 * maxLength counts them) of UTF-8 without control characters, so at most
 * 4 bytes each. */
#define ND_ID_MAX_CHARS 256
#define ND_ID_MAX_UTF8 (4 * ND_ID_MAX_CHARS)

#define ND_REQUEST_MAX_MEMBERS 32 /* fields of a request object (more: invalid_json) */
#define ND_REQUEST_MAX_DEPTH 512  /* nesting of a request body (more: invalid_json) */
#define ND_K_MAX 8                /* largest k; = ND_INDEX_MAX_K (lib/index.h) */
#define ND_REPLY_MAX_PASSAGES 64  /* passages listed in one /check-original answer */
#define ND_VERIFY_MAX 64          /* largest --max-verify: anchor-index hits asked per check */

/* ---- configurable: default, smallest, largest (config.c) ---- */

#define ND_KIB ((size_t)1024)
#define ND_MIB (1024 * ND_KIB)

#define ND_K_DEFAULT 3 /* --k: 0..ND_K_MAX */

#define ND_MIN_CHARS_DEFAULT 300 /* --min-chars: shorter texts are too short to judge */
#define ND_MIN_CHARS_LARGEST 1000000

#define ND_MAX_BODY_DEFAULT (4 * ND_MIB) /* --max-body: a long article is ~100 KB */
#define ND_MAX_BODY_SMALLEST 1024
#define ND_MAX_BODY_LARGEST (1024 * ND_MIB)

#define ND_MAX_HEADERS_DEFAULT (16 * ND_KIB) /* --max-headers: request line + headers */
#define ND_MAX_HEADERS_SMALLEST 1024
#define ND_MAX_HEADERS_LARGEST ND_MIB

#define ND_MAX_TEXT_DEFAULT ND_MIB /* --max-text: one text, bytes of UTF-8 */
#define ND_MAX_TEXT_SMALLEST 1
#define ND_MAX_TEXT_LARGEST (1024 * ND_MIB)

#define ND_MAX_BATCH_DEFAULT 1000 /* --max-batch: texts in one /fingerprint batch */
#define ND_MAX_BATCH_SMALLEST 1
#define ND_MAX_BATCH_LARGEST 100000

#define ND_MAX_META_DEFAULT (16 * ND_KIB) /* --max-meta: "meta" as compact JSON */
#define ND_MAX_META_SMALLEST 2
#define ND_MAX_META_LARGEST ND_MIB

#define ND_MAX_MATCHES_DEFAULT 100 /* --max-matches: matches listed, then "truncated" */
#define ND_MAX_MATCHES_SMALLEST 1
#define ND_MAX_MATCHES_LARGEST 10000

#endif
