"""Kept texts: each registered text is kept in the store (zstd-packed, in
the record's transaction) and GET /documents/{id}?text=true gives it back
exactly as it was submitted, on a real neardupd on loopback:

- every registration path: /check-original with register (Chinese,
  English, emoji, U+0000, 1 MiB), POST /import, the offline `neardup
  import`; an amendment (PUT .../policy) leaves the text, a deletion takes
  it, a registration of the id again keeps the new text;
- the LMDB store across a restart (SIGTERM) and after kill -9 with
  registrations in flight: every acknowledged registration has its text,
  every record on disk its whole text;
- --keep-text=false (and NEARDUP_KEEP_TEXT=false): nothing kept, and the
  answer says so (text null, text_kept false), also after keeping is turned
  back on; the memory store keeps texts too;
- ?text=other is 400 invalid_field text; without ?text the answer has no
  text member;
- replicas: a text registered on node A is read back from node B (it
  travels packed in the stream entry); a text too large for one entry is
  registered without it on every node (text_kept false)."""

import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from urllib.parse import quote

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (Runner, Server, check, expect_error, load_texts,  # noqa: E402
                     neardup_path, neardupd_path)

T = Runner("test_texts")
TEXTS = load_texts()
TMP = tempfile.mkdtemp(prefix="neardup-texts-")
BIG_ARGS = ["--max-text", "2M", "--max-body", "8M"]
EMOJI = ("A family 👩\u200d👩\u200d👧 and faces 😀😃😄, flags 🇨🇳🇬🇧, a NUL \u0000 inside, "
         "and right-to-left \u202eevil\u202c marks. ")


def words_text(seed, nbytes):
    """A text of random words of the shipped texts (English and Chinese),
    about nbytes bytes of UTF-8, distinct for each seed."""
    rng = random.Random("texts-%s" % seed)
    vocab = sorted({w for t in TEXTS.values() for w in t.split() if len(w) <= 12})
    out, size = [], 0
    while size < nbytes:
        w = rng.choice(vocab)
        out.append(w)
        size += len(w.encode()) + 1
    return " ".join(out)


def mib_text(seed):
    """Exactly 1 MiB of UTF-8: random words, cut on a character."""
    t = words_text(seed, (1 << 20) + 64).encode()[:1 << 20].decode("utf-8", "ignore")
    return t + " " * ((1 << 20) - len(t.encode()))


def register(srv, doc_id, text, expect_registered=True):
    status, body = srv.json("POST", "/check-original", {"id": doc_id, "text": text,
                                                       "register": True}, timeout=60)
    check(status == 200, "register %s: %s %r", doc_id, status, body)
    if expect_registered:
        check(body.get("registered") is True, "%s not registered: %r", doc_id,
              {k: body.get(k) for k in ("verdict", "registered", "matches")})
    return body


def get_text(srv, doc_id, query="?text=true"):
    status, body = srv.json("GET", "/documents/%s%s" % (quote(doc_id, safe=""), query),
                            timeout=60)
    return status, body


def expect_text(srv, doc_id, text, where=""):
    status, body = get_text(srv, doc_id)
    check(status == 200, "%s GET %s: %s %r", where, doc_id, status, body)
    check(body.get("text_kept") is True, "%s %s: text_kept %r", where, doc_id,
          body.get("text_kept"))
    got = body.get("text")
    check(got == text, "%s %s: text differs (%s chars, want %s)", where, doc_id,
          None if got is None else len(got), len(text))


def expect_none(srv, doc_id, where=""):
    status, body = get_text(srv, doc_id)
    check(status == 200, "%s GET %s: %s %r", where, doc_id, status, body)
    check("text" in body and body["text"] is None and body.get("text_kept") is False,
          "%s %s: want text null, text_kept false: %r", where, doc_id,
          {k: body.get(k) for k in ("text", "text_kept")})


def sample_texts():
    """{id: text}: the shipped Chinese and English texts, one with emoji and
    U+0000, and 1 MiB."""
    docs = {}
    for name in ("zh1", "en1"):
        docs["t-" + name] = TEXTS[name]
    docs["t-emoji"] = EMOJI + TEXTS["en2"]
    docs["t-mib"] = mib_text("mib")
    check(len(docs["t-mib"].encode()) == 1 << 20, "1 MiB text: %d bytes",
          len(docs["t-mib"].encode()))
    return docs


def import_lines(docs):
    return "".join(json.dumps({"id": k, "text": v}) + "\n" for k, v in docs.items()).encode()


@T.test
def every_path_restart_and_kill():
    data = os.path.join(TMP, "paths")
    docs = sample_texts()
    imported = {"i-zh": TEXTS["zh2"], "i-emoji": EMOJI + TEXTS["en3"],
                "i-words": words_text("import", 5000)}
    with Server(BIG_ARGS, data_dir=data, sync=True) as srv:
        for k, v in docs.items():
            register(srv, k, v)
        status, _, out = srv.request("POST", "/import", import_lines(imported),
                                     {"Content-Type": "application/x-ndjson"}, timeout=120)
        check(status == 200, "POST /import: %s %r", status, out[:300])
        summary = json.loads(out)["summary"]
        check(summary["imported"] == len(imported), "import summary %r", summary)
        for k, v in list(docs.items()) + list(imported.items()):
            expect_text(srv, k, v, "registered")
        # The answer without ?text has no text; ?text=false neither.
        for q in ("", "?text=false"):
            status, body = get_text(srv, "t-zh1", q)
            check(status == 200 and "text" not in body and "text_kept" not in body,
                  "GET %s: %r", q, list(body))
        for q in ("?text=yes", "?text=1", "?text="):
            status, body = get_text(srv, "t-zh1", q)
            expect_error(status, body, 400, "invalid_field", "text")
        # An amendment leaves the text; a deletion takes it; the id
        # registered again keeps the new text.
        status, body = srv.json("PUT", "/documents/t-en1/policy", {"reprint": "forbid"})
        check(status == 200, "PUT policy: %s %r", status, body)
        expect_text(srv, "t-en1", docs["t-en1"], "amended")
        status, body = srv.json("DELETE", "/documents/t-emoji")
        check(status == 200, "DELETE: %s %r", status, body)
        status, body = get_text(srv, "t-emoji")
        expect_error(status, body, 404, "not_found")
        again = EMOJI + words_text("again", 3000)
        register(srv, "t-emoji", again)
        expect_text(srv, "t-emoji", again, "registered again")
        docs["t-emoji"] = again
        before = os.path.getsize(os.path.join(data, "data.mdb"))
    # A restart reads every text back from data.mdb.
    with Server(BIG_ARGS, data_dir=data, sync=True) as srv:
        for k, v in list(docs.items()) + list(imported.items()):
            expect_text(srv, k, v, "after a restart")
    check(before > 0, "no data.mdb")
    # The offline import into the same store keeps its texts too.
    src = os.path.join(TMP, "offline.jsonl")
    offline = {"o-zh": TEXTS["zh3"], "o-words": words_text("offline", 20000)}
    with open(src, "wb") as f:
        f.write(import_lines(offline))
    r = subprocess.run([neardup_path(), "import", "--data", data, "--no-progress", src],
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
    check(r.returncode == 0, "neardup import: %s %s", r.returncode, r.stderr[-500:])
    with Server(BIG_ARGS, data_dir=data, sync=True) as srv:
        for k, v in offline.items():
            expect_text(srv, k, v, "offline import")
        kill_in_flight(srv)


def kill_in_flight(srv):
    """Registrations from 4 clients, the server killed (-9) while they run:
    after a restart every acknowledged one has its text, and every document
    there has its whole text."""
    acked, sent = {}, {}
    lock = threading.Lock()
    stop = threading.Event()

    def client(c):
        for i in range(400):
            if stop.is_set():
                return
            doc_id, text = "k-%d-%d" % (c, i), words_text("kill-%d-%d" % (c, i), 1500 + 97 * i)
            with lock:
                sent[doc_id] = text
            try:
                status, body = srv.json("POST", "/check-original",
                                        {"id": doc_id, "text": text, "register": True},
                                        timeout=10)
            except OSError:
                return  # killed
            if status == 200 and body.get("registered"):
                with lock:
                    acked[doc_id] = text

    threads = [threading.Thread(target=client, args=(c,)) for c in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with lock:
            if len(acked) >= 60:
                break
        time.sleep(0.01)
    srv.kill()
    stop.set()
    for t in threads:
        t.join(30)
    check(len(acked) >= 60, "only %d registrations acknowledged", len(acked))
    srv.restart()
    whole = absent = 0
    for doc_id, text in sent.items():
        status, body = get_text(srv, doc_id)
        if doc_id in acked:
            check(status == 200, "acknowledged %s lost: %s", doc_id, status)
        if status == 404:
            absent += 1
            continue
        check(status == 200 and body.get("text_kept") is True and body.get("text") == text,
              "%s after kill -9: %s, text_kept %r, text %s", doc_id, status,
              body.get("text_kept"), "equal" if body.get("text") == text else "differs")
        whole += 1
    print("     kill -9: %d acknowledged, %d documents with their whole text, %d absent "
          "(cut off before their commit)" % (len(acked), whole, absent))


@T.test
def keep_text_off():
    data = os.path.join(TMP, "off")
    with Server(["--keep-text=false"], data_dir=data) as srv:
        register(srv, "off-1", TEXTS["zh1"])
        lines = json.dumps({"id": "off-2", "text": TEXTS["en1"]}) + "\n"
        status, _, out = srv.request("POST", "/import", lines.encode(),
                                     {"Content-Type": "application/x-ndjson"})
        check(status == 200, "POST /import: %s %r", status, out[:200])
        expect_none(srv, "off-1", "--keep-text=false")
        expect_none(srv, "off-2", "--keep-text=false (import)")
        status, body = srv.json("GET", "/documents/off-1")
        check(status == 200 and "text" not in body, "GET without ?text: %r", body)
    # Turned back on: those stay without a text; new ones are kept.
    with Server([], data_dir=data) as srv:
        expect_none(srv, "off-1", "kept nothing then")
        register(srv, "on-1", TEXTS["en2"])
        expect_text(srv, "on-1", TEXTS["en2"], "--keep-text on")
    with Server([], data_dir=data, env={"NEARDUP_KEEP_TEXT": "false"}) as srv:
        register(srv, "off-3", TEXTS["zh2"])
        expect_none(srv, "off-3", "NEARDUP_KEEP_TEXT=false")
        expect_text(srv, "on-1", TEXTS["en2"], "kept before")
    for bad in ("--keep-text=maybe", "--keep-text"):
        r = subprocess.run([neardupd_path(), bad, "--in-memory"], capture_output=True,
                           timeout=30, stdin=subprocess.DEVNULL)
        check(r.returncode != 0 and b"keep-text" in r.stderr, "%s: %s %r", bad, r.returncode,
              r.stderr[-200:])


@T.test
def memory_store_keeps_texts():
    with Server(BIG_ARGS, in_memory=True) as srv:
        docs = sample_texts()
        for k, v in docs.items():
            register(srv, k, v)
        for k, v in docs.items():
            expect_text(srv, k, v, "--in-memory")


@T.test
def replica_reads_text_of_another_node():
    from cluster import ReplicaCluster
    if not os.path.exists("/usr/sbin/nats-server") and not os.environ.get("ND_NATS_SERVER"):
        print("     skipped: no nats-server")
        return
    with ReplicaCluster(n=2, haproxy=False, node_extra=["--stream-replicas", "2"] + BIG_ARGS,
                        tmp_prefix="neardup-texts-replicas-") as cl:
        a, b = cl.nodes
        text = EMOJI + TEXTS["zh1"]
        register(a, "r-1", text)
        # A text that packs to more than one stream entry takes (random
        # characters: ~0.7 MB packed) is registered without it, everywhere.
        rng = random.Random(7)
        big = "".join(chr(rng.randrange(0x4E00, 0x9FA5)) for _ in range(340000))
        register(a, "r-big", big)
        deadline = time.monotonic() + 30
        while True:
            status, body = get_text(b, "r-1")
            if status == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        expect_text(b, "r-1", text, "node B")
        expect_text(a, "r-1", text, "node A")
        for node, nm in ((a, "A"), (b, "B")):
            status, body = get_text(node, "r-big")
            check(status == 200, "r-big on %s: %s", nm, status)
            expect_none(node, "r-big", "node %s, a text over one entry" % nm)
        check(any("is not kept" in line for line in a.log_text().splitlines()),
              "no log line for the text left out")


if __name__ == "__main__":
    T.run()
