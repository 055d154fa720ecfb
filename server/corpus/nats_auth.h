/* nats_auth.h - the NATS authentication a replica (--nats) connects with,
 * read from the configuration, the environment (NEARDUP_NATS_PASSWORD,
 * NEARDUP_NATS_TOKEN) and secret files. Internal to server/corpus/
 * (corpus_local.c opens the replica). */
#ifndef ND_NATS_AUTH_H
#define ND_NATS_AUTH_H

#include <stddef.h>

#include "config.h"
#include "replica.h"

#define NATS_SECRET_MAX 4096 /* longest NATS password or token, bytes */

/* The NATS authentication of the configuration c into o: user and password
 * (--nats-user, --nats-password-file or NEARDUP_NATS_PASSWORD), a token
 * (--nats-token-file or NEARDUP_NATS_TOKEN) or a credentials file, TLS
 * files; credentials inside the --nats URLs are refused with any of these
 * and warned about otherwise (ps shows a flag). The secrets go to
 * password[NATS_SECRET_MAX] and token[NATS_SECRET_MAX] (the caller's, to
 * wipe); o's strings borrow c and them. Logs what it picked. Returns 0, or
 * -EINVAL / -errno with a reason in err (never a secret). */
int nd_nats_auth(const nd_config *c, nd_replica_options *o, char *password, char *token, char *err,
                 size_t cap);

#endif
