#!/usr/bin/env python3
"""The API reaches the engine only through the corpus (server/corpus/corpus.h).

Fails when a file of server/api/:
  - reaches the registry, the store or the replica through the API's state
    (api->reg, nd_api_of(r)->store, j->api->replica, ...);
  - includes a header of server/registry/, server/store/ or server/replica/
    (corpus.h is the one door: it brings the types its calls take);
  - calls a function of the registry, the store, the replica or the import
    (nd_registry_*(), nd_store_*(), nd_replica_*(), nd_import_*()) other
    than the few value helpers listed below;
  - names the registry's document (nd_doc, struct nd_doc) or its accessors
    (nd_doc_*()): a document crosses the corpus as a value, nd_corpus_doc;
  - reaches, through the headers it includes (followed to the end), an
    interface of the engine: registry.h, docs.h, store.h, any header of
    server/replica/ (corpus.h brings value types only).
Before checking the tree, each check is run on a planted violation and must
catch it, so a check that stopped matching fails too.

    python3 tests/test_api_corpus.py      (ND_SOURCE_ROOT: the tree; default ..)
"""
import os
import re
import sys

ROOT = os.environ.get("ND_SOURCE_ROOT") or os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))
API = os.path.join(ROOT, "server", "api")
ENGINE = ("registry", "store", "replica")

REACH = re.compile(r"(\bapi|nd_api_of\(r\))->(reg|store|replica)\b")
CALL = re.compile(r"\b(nd_(?:registry|store|replica|import)_\w+)\s*\(")
DOC = re.compile(r"\bnd_doc\b|\bnd_doc_\w+\s*\(")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# Value helpers that touch no engine state: the verdict's thresholds read
# from the configuration (compare.c asks with the server's settings), and an
# import's parameters from the configuration (backfill.c).
ALLOWED_CALLS = {"nd_registry_options_from_config", "nd_import_params_init"}


def strip_comments(src):
    src = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), src, flags=re.S)
    return re.sub(r"//[^\n]*", "", src)


def engine_headers():
    names = set()
    for layer in ENGINE:
        d = os.path.join(ROOT, "server", layer)
        names.update(f for f in os.listdir(d) if f.endswith(".h"))
    return names


def violations(name, src, headers):
    out = []
    code = strip_comments(src)
    for i, line in enumerate(code.split("\n"), 1):
        if REACH.search(line):
            out.append("%s:%d: reaches the engine past the corpus: %s" % (name, i, line.strip()))
        for m in CALL.finditer(line):
            if m.group(1) not in ALLOWED_CALLS:
                out.append("%s:%d: calls %s() (use the corpus: corpus.h)" % (name, i, m.group(1)))
        if DOC.search(line):
            out.append("%s:%d: names the registry's document (use nd_corpus_doc): %s"
                       % (name, i, line.strip()))
    for m in INCLUDE.finditer(code):
        if os.path.basename(m.group(1)) in headers:
            line = code.count("\n", 0, m.start()) + 1
            out.append("%s:%d: includes %s, an engine header (include corpus.h)"
                       % (name, line, m.group(1)))
    return out


# Headers whose reach from server/api/ means the engine's state is visible.
INTERFACES = {"registry.h", "registry_internal.h", "docs.h", "docs_internal.h", "store.h"}


def header_index():
    """name -> path of every header of server/*/ and lib/."""
    out = {}
    for d in [os.path.join(ROOT, "lib")] + [
            os.path.join(ROOT, "server", x) for x in sorted(os.listdir(os.path.join(ROOT, "server")))]:
        if os.path.isdir(d):
            for f in os.listdir(d):
                if f.endswith(".h"):
                    out.setdefault(f, os.path.join(d, f))
    return out


def reached(src, read, forbidden):
    """The forbidden headers src reaches through its includes, each with
    the chain that reaches it; read(name) gives a header's text or None
    (not ours: a system or generated header)."""
    found, seen = [], set()
    todo = [(m, [m]) for m in INCLUDE.findall(strip_comments(src))]
    while todo:
        name, chain = todo.pop()
        base = os.path.basename(name)
        if base in seen:
            continue
        seen.add(base)
        if base in forbidden:
            found.append(" -> ".join(chain))
            continue
        text = read(base)
        if text is not None:
            todo += [(m, chain + [m]) for m in INCLUDE.findall(strip_comments(text))]
    return found


def self_test(headers):
    planted = {
        "reach": "int f(nd_req *r) { return nd_registry_loaded(nd_api_of(r)->reg); }\n",
        "reach_job": "void g(job *j) { use(j->api->store); }\n",
        "reach_replica": "bool h(nd_api *api) { return api->replica != NULL; }\n",
        "call": "void k(nd_corpus *c) { nd_store_text(x, 1, v, 0); }\n",
        "include": '#include "replica.h"\n',
        "include_store": '#include "store.h"\n',
        "doc": "bool o(nd_req *r, const nd_doc *d);\n",
        "doc_struct": "char *a(void *r, const struct nd_doc *d);\n",
        "doc_accessor": "void m(nd_reply *w) { nd_reply_raw(w, nd_doc_meta(x), 1); }\n",
    }
    bad = [k for k, src in planted.items() if not violations(k, src, headers)]
    fake = {"corpus.h": '#include "verdict.h"\n', "verdict.h": '#include "docs.h"\n',
            "docs.h": '#include "store.h"\n', "store.h": ""}
    if reached('#include "corpus.h"\n', fake.get, INTERFACES | {"replica.h"}) != [
            "corpus.h -> verdict.h -> docs.h"]:
        bad.append("reach through includes")
    if reached('#include "corpus.h"\n', {"corpus.h": '#include "claim.h"\n'}.get, INTERFACES):
        bad.append("clean includes flagged")
    clean = ("/* nd_store_text() in a comment */\nint ok(nd_req *r) { return nd_corpus_loaded(nd_api_corpus(r)); }\n"
             "void v(nd_corpus *c, const nd_corpus_doc *d) { nd_corpus_doc_release(c, 0); }\n")
    if violations("clean", clean, headers):
        bad.append("clean code flagged")
    return bad


def main():
    headers = engine_headers()
    for h in ("registry.h", "store.h", "replica.h"):
        if h not in headers:
            print("not ok: %s not found under server/{registry,store,replica}" % h)
            return 1
    missed = self_test(headers)
    if missed:
        print("not ok: the checks miss planted violations: %s" % ", ".join(missed))
        return 1
    found = []
    files = sorted(f for f in os.listdir(API) if f.endswith((".c", ".h")))
    for f in files:
        with open(os.path.join(API, f), encoding="utf-8") as fh:
            found += violations("server/api/" + f, fh.read(), headers)
    index = header_index()

    def read(name):
        path = index.get(name)
        if not path:
            return None
        with open(path, encoding="utf-8") as fh:
            return fh.read()

    forbidden = INTERFACES | {f for f in os.listdir(os.path.join(ROOT, "server", "replica"))
                              if f.endswith(".h")}
    for f in files:
        with open(os.path.join(API, f), encoding="utf-8") as fh:
            for chain in reached(fh.read(), read, forbidden):
                found.append("server/api/%s: reaches an engine interface: %s" % (f, chain))
    for v in found:
        print(v)
    print("%s: %d files of server/api/ checked, %d violations"
          % ("ok" if not found else "not ok", len(files), len(found)))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
