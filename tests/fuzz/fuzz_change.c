/* fuzz_change - server/replica/change.c, the replication stream's entry
 * layout: any bytes either decode or are refused (-EBADMSG, -EPROTO), never
 * read out of bounds; what decodes encodes back to the very same bytes
 * (one layout, no two spellings of an entry), and the version handed to
 * the store is NUL-terminated without an inner NUL. */
#include <errno.h>
#include <string.h>

#include "change.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    nd_change ch;
    int rc = nd_change_decode(data, size, &ch);
    FUZZ_CHECK(rc == 0 || rc == -EBADMSG || rc == -EPROTO, "decode gave %d", rc);
    if (rc != 0)
        return 0;
    FUZZ_CHECK(ch.rec.version && strlen(ch.rec.version) < 256, "version");
    uint8_t *again = NULL;
    size_t len = 0;
    rc = nd_change_encode(ch.kind, &ch.rec, ch.has_audit ? &ch.audit : NULL, &again, &len);
    FUZZ_CHECK(rc == 0, "encode of a decoded entry gave %d", rc);
    FUZZ_CHECK(len == size && memcmp(again, data, size) == 0, "re-encoded %zu bytes of %zu", len,
               size);
    free(again);
    return 0;
}
