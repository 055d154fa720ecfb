/* corpus_doc.h - a registry document as the corpus hands it out
 * (nd_corpus_doc, corpus.h): the views of an nd_doc. Private to
 * server/corpus/: the implementations fill the views their calls return;
 * the API sees only corpus.h. */
#ifndef ND_CORPUS_DOC_H
#define ND_CORPUS_DOC_H

#include "corpus.h"
#include "registry.h"

/* Fills *out with the values of d and its strings (borrowed from d),
 * version (borrowed; NULL: none) and ref (the reference the view holds,
 * stolen; NULL: none). Does not allocate. */
void nd_corpus_doc_view(const nd_doc *d, const char *version, nd_doc *ref, nd_corpus_doc *out);

#endif
