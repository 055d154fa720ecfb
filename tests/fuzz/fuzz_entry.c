/* fuzz_entry - server/replica/entry.c, the replication stream's entries:
 * any bytes split into frames or are refused (-EBADMSG), never read out of
 * bounds; each frame's change either decodes or is refused (-EBADMSG,
 * -EPROTO); what decodes encodes back to the very same bytes (one layout,
 * no two spellings of a change), and the version handed to the store is
 * NUL-terminated without an inner NUL. The input is tried both as a whole
 * entry and as one change. */
#include <errno.h>
#include <string.h>

#include "entry.h"
#include "fuzz_util.h"

static void one_change(const uint8_t *data, size_t size)
{
    nd_entry ch;
    int rc = nd_entry_decode(data, size, &ch);
    FUZZ_CHECK(rc == 0 || rc == -EBADMSG || rc == -EPROTO, "decode gave %d", rc);
    if (rc != 0)
        return;
    FUZZ_CHECK(ch.rec.version && strlen(ch.rec.version) < 256, "version");
    uint8_t *again = NULL;
    size_t len = 0;
    rc = nd_entry_encode(ch.kind, &ch.rec, ch.has_audit ? &ch.audit : NULL, &again, &len);
    FUZZ_CHECK(rc == 0, "encode of a decoded change gave %d", rc);
    FUZZ_CHECK(len == size && memcmp(again, data, size) == 0, "re-encoded %zu bytes of %zu", len,
               size);
    free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    one_change(data, size);
    size_t off = 0, seen = 0, blen = 0;
    uint64_t token;
    const uint8_t *body;
    int rc;
    while ((rc = nd_entry_frame_next(data, size, &off, &token, &body, &blen)) == 1) {
        FUZZ_CHECK(body >= data && body + blen <= data + size && off <= size, "frame bounds");
        seen += ND_ENTRY_FRAME_HEAD + blen;
        one_change(body, blen);
    }
    FUZZ_CHECK(rc == 0 || rc == -EBADMSG, "frame gave %d", rc);
    FUZZ_CHECK(rc != 0 || seen == size, "frames cover %zu of %zu bytes", seen, size);
    return 0;
}
