/* corpus_doc.c - the views of registry documents (corpus_doc.h), and of a
 * check's matches and source (corpus.h). */
#include "corpus_doc.h"

void nd_corpus_doc_view(const nd_doc *d, const char *version, nd_doc *ref, nd_corpus_doc *out)
{
    *out = (nd_corpus_doc){.id = nd_doc_id(d),
                           .id_len = d->id_len,
                           .meta = nd_doc_meta(d),
                           .meta_len = d->meta_len,
                           .account = nd_doc_account(d),
                           .account_len = d->account_len,
                           .policy = nd_doc_policy(d),
                           .policy_len = d->policy_len,
                           .version = version,
                           .simhash = d->simhash,
                           .registered_at_us = d->registered_at_us,
                           .superseded_by_us = nd_doc_superseded_by(d),
                           .chars = d->chars,
                           .status = d->status,
                           .ref = ref};
}

void nd_corpus_match_doc(const nd_match *m, nd_corpus_doc *out)
{
    nd_corpus_doc_view(m->doc, NULL, NULL, out);
}

bool nd_corpus_source_doc(const nd_check_res *res, nd_corpus_doc *out)
{
    if (!res->source)
        return false;
    nd_corpus_doc_view(res->source, NULL, NULL, out);
    return true;
}

bool nd_corpus_registered_doc(const nd_check_res *res, nd_corpus_doc *out)
{
    if (!res->doc)
        return false;
    nd_corpus_doc_view(res->doc, NULL, NULL, out);
    return true;
}

bool nd_corpus_is_source(const nd_check_res *res, const nd_match *m)
{
    return res->source && m->doc == res->source;
}
