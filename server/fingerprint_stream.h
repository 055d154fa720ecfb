/* fingerprint_stream.h - fingerprints a stream of JSON lines
 * {"id": ..., "text": "..."} into {"id": ..., "simhash": "<16 hex>",
 * "chars": N, "features": N} lines, one output line per input line, flushed
 * per line. A bad line gets {"id": ..., "error": "..."} and the stream goes on.
 * Used by `neardup fingerprint --jsonl` and the tuning tool. */
#ifndef ND_FINGERPRINT_STREAM_H
#define ND_FINGERPRINT_STREAM_H

#include <stdio.h>

#include "fingerprint.h"

/* Reads in until EOF, writes to out. Returns 0, or -errno on a read/write
 * error or when scratch memory cannot be had (-ENOMEM). */
int nd_fingerprint_stream(const nd_fingerprinter *fp, FILE *in, FILE *out);

#endif
