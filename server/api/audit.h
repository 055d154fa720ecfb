/* audit.h - the journals' pages (audit.c). Internal to server/api/. */
#ifndef ND_AUDIT_H
#define ND_AUDIT_H

#include <stdint.h>

#include "corpus.h"
#include "http.h"

/* Writes the list of kind of owner as {"<name>":[...],"next_cursor":..}
 * and answers it. */
void nd_audit_page(nd_req *r, const char *name, nd_event_kind kind, int64_t owner,
                   const nd_page_req *pg);

/* GET /audit. */
void nd_workflow_audit(nd_req *r);

#endif
