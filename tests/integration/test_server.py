"""Every endpoint of neardupd through a real HTTP client, on a real process:
probes, /fingerprint (single, text/plain, batch), /check-original (verdicts,
matches, ordering, idempotency, k, meta, truncation), /documents/{id} (get,
delete), /metrics, and persistence across a restart."""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HEX16, RFC3339_US, Runner, Server, check, distance, edit,  # noqa: E402
                     expect_error, load_texts)

T = Runner("test_server")
TEXTS = load_texts()
ZH = [TEXTS[k] for k in sorted(TEXTS) if k.startswith("zh")]
EN = [TEXTS[k] for k in sorted(TEXTS) if k.startswith("en")]
_ids = iter(range(1, 1_000_000))


def new_id(prefix="doc"):
    return "%s-%d-%d" % (prefix, os.getpid(), next(_ids))


def check_original(srv, text, id=None, register=False, k=None, meta=None, **extra):
    req = {"text": text}
    if id is not None:
        req["id"] = id
    if register:
        req["register"] = True
    if k is not None:
        req["k"] = k
    if meta is not None:
        req["meta"] = meta
    req.update(extra)
    return srv.json("POST", "/check-original", req)


def fingerprint(srv, text):
    status, body = srv.json("POST", "/fingerprint", {"text": text})
    check(status == 200, "fingerprint: %s %r", status, body)
    return body


@T.test
def probes(srv):
    for path, want in (("/healthz", {"status": "ok"}), ("/readyz", {"status": "ready"})):
        status, hdrs, data = srv.request("GET", path)
        check(status == 200, "%s %s", path, status)
        check(json.loads(data) == want, "%s body %r", path, data)
        check(hdrs["content-type"] == "application/json", hdrs)
        check(hdrs.get("x-request-id"), "no X-Request-Id")
        status, hdrs, data = srv.request("HEAD", path)
        check(status == 200 and data == b"", "HEAD %s: %s %r", path, status, data)
    status, hdrs, data = srv.request("GET", "/metrics")
    check(status == 200 and hdrs["content-type"].startswith("text/plain"), hdrs)
    status, _, data = srv.request("HEAD", "/metrics")
    check(status == 200 and data == b"")


@T.test
def threads_named(srv):
    """Each thread says what it is (top -H, perf, gdb): the workers, the
    store's commit thread, the main loop."""
    task = "/proc/%d/task" % srv.proc.pid
    names = sorted(open(os.path.join(task, t, "comm")).read().strip()
                   for t in os.listdir(task))
    want = ["nd-commit"] + ["nd-worker-%d" % i for i in range(srv.threads)]
    check([n for n in names if n.startswith("nd-") and not n.startswith("nd-load")] == want,
          names)
    check("neardupd" in names, names)


@T.test
def request_id_echoed(srv):
    status, hdrs, _ = srv.request("GET", "/healthz", headers={"X-Request-Id": "abc-123"})
    check(status == 200 and hdrs["x-request-id"] == "abc-123", hdrs)
    status, hdrs, _ = srv.request("GET", "/healthz", headers={"X-Request-Id": "bad id\x7f"})
    check(hdrs["x-request-id"] != "bad id\x7f", hdrs)


@T.test
def fingerprint_single(srv):
    for text in (ZH[0], EN[0]):
        body = fingerprint(srv, text)
        check(set(body) == {"simhash", "chars", "features", "version"}, body)
        check(HEX16.match(body["simhash"]), body)
        check(isinstance(body["chars"], int) and body["chars"] > 300, body)
        check(isinstance(body["features"], int) and body["features"] > 0, body)
        check(body == fingerprint(srv, text), "not deterministic")
    check(fingerprint(srv, "")["chars"] == 0)


@T.test
def fingerprint_text_plain(srv):
    want = fingerprint(srv, ZH[1])
    for ctype in ("text/plain", "text/plain; charset=utf-8", "TEXT/PLAIN;charset=\"UTF-8\""):
        status, _, data = srv.request("POST", "/fingerprint", ZH[1].encode(),
                                      {"Content-Type": ctype})
        check(status == 200 and json.loads(data) == want, "%s: %s %r", ctype, status, data)
    status, body = srv.json("POST", "/fingerprint", None,
                            headers={"Content-Type": "application/json; charset=UTF-8"},
                            raw=json.dumps({"text": ZH[1]}).encode())
    check(status == 200 and body == want, body)


@T.test
def fingerprint_batch(srv):
    texts = ZH + EN + ["", "short"]
    status, body = srv.json("POST", "/fingerprint", {"texts": texts})
    check(status == 200 and len(body["results"]) == len(texts), "%s %r", status, body)
    for text, res in zip(texts, body["results"]):
        check(res == fingerprint(srv, text), "batch result out of order")
    status, body = srv.json("POST", "/fingerprint", {"texts": []})
    check(status == 200 and body == {"results": []}, body)
    status, body = srv.json("POST", "/fingerprint", {"texts": ["x"] * 1000})
    check(status == 200 and len(body["results"]) == 1000, status)


@T.test
def original_then_duplicate(srv):
    a, b = new_id(), new_id()
    status, r1 = check_original(srv, ZH[0], id=a, register=True,
                                meta={"author": "张三", "title": "t", "url": "https://x/1"})
    check(status == 200, "%s %r", status, r1)
    check(r1["original"] is True and r1["registered"] is True and r1["matches"] == [], r1)
    check(r1["id"] == a and HEX16.match(r1["simhash"]), r1)
    check(RFC3339_US.match(r1["registered_at"]), r1)
    check(r1["truncated"] is False, r1)
    dup = edit(ZH[0], 2, 1)
    status, r2 = check_original(srv, dup, id=b, register=True)
    check(status == 200 and r2["original"] is False and r2["registered"] is False, r2)
    check(r2["verdict"] == "duplicate" and r2["passages"] == [], r2)
    check(len(r2["matches"]) == 1, r2)
    m = r2["matches"][0]
    check(set(m) == {"id", "simhash", "distance", "similarity", "resemblance", "containment",
                     "kind", "registered_at", "meta", "passages", "share", "action",
                     "show_source", "may_modify"}, m)
    # its own part of the text (lib/share.h), and the action its claim gives
    check(0.9 <= m["share"] <= 1 and r2["copied_share"] == m["share"], r2)
    check(m["action"] == "publish_as_reprint" and m["show_source"] is True, m)
    # the copy (two characters edited) on both sides: from the start to the end
    check(len(m["passages"]) == 1 and m["passages"][0]["start"] == 0
          and m["passages"][0]["source_start"] == 0, m)
    check(m["kind"] == "near_duplicate" and 0.5 <= m["resemblance"] < 1
          and m["resemblance"] <= m["containment"] <= 1, m)
    check(m["id"] == a and m["simhash"] == r1["simhash"], m)
    check(m["distance"] == distance(r2["simhash"], r1["simhash"]) and m["distance"] <= 3, m)
    check(abs(m["similarity"] - (1 - m["distance"] / 64)) < 1e-12, m)
    check(m["registered_at"] == r1["registered_at"], m)
    check(m["meta"] == {"author": "张三", "title": "t", "url": "https://x/1"}, m)
    status, doc = srv.json("GET", "/documents/" + b)
    expect_error(status, doc, 404, "not_found")
    # Without an id: a plain question, nothing registered.
    status, r3 = check_original(srv, dup)
    check(status == 200 and r3["original"] is False and "id" not in r3, r3)
    check(r3["registered"] is False, r3)


@T.test
def unrelated_texts_are_original(srv):
    for text in ZH[1:] + EN:
        status, r = check_original(srv, text, id=new_id(), register=True)
        check(status == 200 and r["original"] is True, "%s %r", status, r)


@T.test
def check_without_register(srv):
    text = edit(EN[0], 5, 3)
    status, r = check_original(srv, text, id=new_id())
    check(status == 200 and r["registered"] is False, r)
    status, r2 = check_original(srv, text, id=new_id())
    check(r2["original"] == r["original"] and r2["registered"] is False, r2)


@T.test
def idempotent_same_id_same_text(srv):
    i = new_id()
    text = edit(ZH[2], 3, 9) + "\n补充一段。"
    status, first = check_original(srv, text, id=i, register=True, meta={"title": "a"})
    check(status == 200 and first["original"] and first["registered"], first)
    for register in (True, False):
        status, again = check_original(srv, text, id=i, register=register)
        check(status == 200, again)
        check(again["original"] is True and again["registered"] is True, again)
        check(again["matches"] == [], "matched itself: %r", again)
        check(again["registered_at"] == first["registered_at"], again)
    status, doc = srv.json("GET", "/documents/" + i)
    check(doc["meta"] == {"title": "a"}, doc)


@T.test
def idempotent_duplicate_keeps_earlier_matches(srv):
    # a registered, then b (a near copy) asked with b's own id: not original;
    # b is not registered so asking again gives the same answer.
    a, b = new_id(), new_id()
    base = EN[1] + " extra words for this test only."
    check_original(srv, base, id=a, register=True)
    dup = edit(base, 1, 2)
    _, r1 = check_original(srv, dup, id=b, register=True)
    _, r2 = check_original(srv, dup, id=b, register=True)
    check(r1 == r2 and r1["original"] is False, "%r vs %r", r1, r2)


@T.test
def id_conflict(srv):
    i = new_id()
    check_original(srv, ZH[3] + "冲突测试", id=i, register=True)
    for register in (True, False):
        status, body = check_original(srv, EN[3], id=i, register=register)
        err = expect_error(status, body, 409, "id_conflict")
        check(err.get("id") == i, err)


@T.test
def matches_sorted_and_k(srv):
    base = EN[2] + " Sorting test."
    ids = []
    variants = [edit(base, n, 5) for n in (0, 2, 4, 6)]
    fps = [fingerprint(srv, v)["simhash"] for v in variants]
    # register them far apart in k by registering with k=0 (each original
    # unless identical fingerprints)
    for v in variants:
        i = new_id("sort")
        status, r = check_original(srv, v, id=i, register=True, k=0)
        check(status == 200, r)
        if r["registered"]:
            ids.append((i, r["registered_at"], r["simhash"]))
    probe = edit(base, 1, 11)
    status, r = check_original(srv, probe, k=8)
    check(status == 200, r)
    got = [(m["distance"], m["registered_at"]) for m in r["matches"]]
    check(got == sorted(got), "not sorted: %r", got)
    want = sorted(i for i, _, h in ids if distance(h, r["simhash"]) <= 8)
    check(sorted(m["id"] for m in r["matches"]) == want, "%r vs %r", r["matches"], want)
    for k in range(0, 9):
        status, rk = check_original(srv, probe, k=k)
        check(all(m["distance"] <= k for m in rk["matches"]), rk)
        check(rk["original"] == (len(rk["matches"]) == 0), rk)
    check(len(fps) == 4)


@T.test
def default_k_is_3(srv):
    """k is the SimHash radius of stage 1; the passage (anchor) index finds
    the rest. With it off (--max-verify 0), only k decides which
    documents are candidates."""
    base = ZH[4] + "默认半径测试。"
    a = new_id()
    with Server(["--max-verify", "0"], in_memory=True) as s2:
        _, ra = check_original(s2, base, id=a, register=True)
        _, ra2 = check_original(srv, base, id=a, register=True)
        for n in range(1, 40):
            v = edit(base, n, 1)
            d = distance(fingerprint(s2, v)["simhash"], ra["simhash"])
            if d > 3:
                _, r = check_original(s2, v)
                check(all(m["id"] != a for m in r["matches"]), "k default is not 3: %r", r)
                _, r = check_original(s2, v, k=d)
                check(any(m["id"] == a for m in r["matches"]), r)
                # The default configuration finds it beyond k, verified.
                _, r = check_original(srv, v)
                check([m["kind"] for m in r["matches"] if m["id"] == a] == ["near_duplicate"],
                      r)
                return
    raise AssertionError("no variant found at distance > 3")


@T.test
def document_get_delete(srv):
    i = new_id("del")
    text = ZH[1] + "删除测试。" * 3
    _, r = check_original(srv, text, id=i, register=True, meta={"url": "https://e/x"})
    check(r["registered"], r)
    status, doc = srv.json("GET", "/documents/" + i)
    check(status == 200, doc)
    check(doc == {"id": i, "simhash": r["simhash"], "chars": r["chars"],
                  "version": r["version"], "registered_at": r["registered_at"],
                  "meta": {"url": "https://e/x"}}, doc)
    status, _, data = srv.request("HEAD", "/documents/" + i)
    check(status == 200 and data == b"")
    _, r2 = check_original(srv, edit(text, 1, 4))
    check(any(m["id"] == i for m in r2["matches"]), r2)
    status, body = srv.json("DELETE", "/documents/" + i)
    check(status == 200 and body == {"id": i, "deleted": True}, body)
    status, body = srv.json("GET", "/documents/" + i)
    expect_error(status, body, 404, "not_found")
    status, body = srv.json("DELETE", "/documents/" + i)
    expect_error(status, body, 404, "not_found")
    _, r3 = check_original(srv, edit(text, 1, 4))
    check(all(m["id"] != i for m in r3["matches"]), "deleted doc still matches: %r", r3)
    # The id is free again, with another text.
    status, r4 = check_original(srv, EN[4] + " new text under an old id", id=i, register=True)
    check(status == 200 and r4["registered"], r4)


@T.test
def consistency_on_a_single_node(srv):
    """consistency is for replicas; a single node is always at its
    latest state: "latest" answers as "local", anything else is 400."""
    i = new_id("latest")
    text = ZH[2] + "一致性测试。" * 3
    status, r = check_original(srv, text, id=i, register=True, consistency="latest")
    check(status == 200 and r["registered"], "%s %r", status, r)
    for value in ("latest", "local"):
        status, doc = srv.json("GET", "/documents/%s?consistency=%s" % (i, value))
        check(status == 200 and doc["simhash"] == r["simhash"], "%s: %s %r", value, status, doc)
        status, q = check_original(srv, text, consistency=value)
        check(status == 200 and q["original"] is False and q["matches"][0]["id"] == i,
              "%s: %s %r", value, status, q)
    status, body = srv.json("GET", "/documents/%s?limit=3&consistency=eventual" % i)
    expect_error(status, body, 400, "invalid_field")
    check(body["error"].get("field") == "consistency", body)
    for bad in ("strong", 1, None, True):
        status, body = check_original(srv, text, consistency=bad)
        expect_error(status, body, 400, "invalid_field")
        check(body["error"].get("field") == "consistency", "%r: %r", bad, body)


@T.test
def document_ids_need_encoding(srv):
    i = "文章/2024 #1?x=%"
    from urllib.parse import quote
    _, r = check_original(srv, EN[0] + " ids with odd characters", id=i, register=True)
    check(r["registered"], r)
    status, doc = srv.json("GET", "/documents/" + quote(i, safe=""))
    check(status == 200 and doc["id"] == i, "%s %r", status, doc)
    status, body = srv.json("DELETE", "/documents/" + quote(i, safe=""))
    check(status == 200, body)


@T.test
def registered_at_monotonic(srv):
    times = []
    for n in range(5):
        _, r = check_original(srv, edit(EN[3], 30 + n * 40, n) + " mono %d" % n + "x" * n * 50,
                              id=new_id("mono"), register=True, k=0)
        if r["registered"]:
            times.append(r["registered_at"])
    check(times == sorted(times) and len(set(times)) == len(times), times)


@T.test
def truncated_matches(srv):
    with Server(["--max-matches", "3"], in_memory=True) as s2:
        base = ZH[0] + "截断"
        for n in range(6):
            check_original(s2, base, id="t%d" % n, register=True)  # first original only
        # register copies under k=0 so that several identical documents exist
        for n in range(6):
            check_original(s2, base + "!" * 0, id="u%d" % n, register=False)
        status, r = check_original(s2, base, k=8)
        check(status == 200 and len(r["matches"]) == 1 and r["truncated"] is False, r)
        # identical fingerprints registered with distinct ids need k<0; use
        # different texts of distance <= 8 registered with k=0 instead
        made = 1
        for n in range(1, 60):
            v = edit(base, n, n)
            _, rv = check_original(s2, v, id="v%d" % n, register=True, k=0)
            if rv["registered"]:
                made += 1
            if made >= 6:
                break
        status, r = check_original(s2, base, k=8)
        near = len(r["matches"])
        check(near <= 3, r)
        if made >= 5:
            check(r["truncated"] is True and near == 3, r)


@T.test
def metrics_counts(srv):
    check_original(srv, ZH[0], id=new_id(), register=True)
    check_original(srv, ZH[0])
    m = srv.metrics()
    check(m.get('neardup_checks_total{verdict="duplicate"}', 0) >= 1, m)
    check(m.get('neardup_registrations_total{result="ok"}', 0) == 1, m)
    check(m.get('neardup_http_requests_total{route="/check-original",code="200"}', 0) > 0, m)
    check(m.get("neardup_ready") == 1.0, m)
    check(m.get("neardup_documents", 0) >= 1, m)
    check(m.get('neardup_checks_total{verdict="original"}', 0) >= 1, m)
    check('neardup_http_request_duration_seconds_count{route="/check-original"}' in m, m)


@T.test
def keep_alive_connection(srv):
    conn = srv.connect()
    try:
        for _ in range(50):
            status, _ = srv.json("GET", "/healthz", conn=conn)
            check(status == 200)
        status, body = srv.json("POST", "/fingerprint", {"text": ZH[0]}, conn=conn)
        check(status == 200, body)
    finally:
        conn.close()


@T.test
def access_log_lines(srv):
    srv.request("GET", "/healthz", headers={"X-Request-Id": "log-probe-1"})
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        recs = [r for r in srv.log_records() if r.get("rid") == "log-probe-1"]
        if recs:
            r = recs[0]
            for key in ("time", "level", "method", "path", "status", "latency_ms", "bytes_in",
                        "bytes_out"):
                check(key in r, "access log lacks %s: %r", key, r)
            check(r["path"] == "/healthz" and r["status"] == 200, r)
            return
        time.sleep(0.05)
    raise AssertionError("no access log line")


@T.test
def persistence_across_restart(srv):
    with Server() as s2:
        a, b = new_id("p"), new_id("p")
        _, ra = check_original(s2, ZH[2], id=a, register=True, meta={"author": "甲"})
        _, rb = check_original(s2, EN[2], id=b, register=True)
        check(ra["registered"] and rb["registered"], (ra, rb))
        check(s2.stop() == 0)
        s2.restart()
        recs = [r for r in s2.log_records() if r.get("msg") == "ready"]
        check(recs and recs[-1]["documents"] == 2, recs)
        status, doc = s2.json("GET", "/documents/" + a)
        check(status == 200 and doc["registered_at"] == ra["registered_at"], doc)
        check(doc["meta"] == {"author": "甲"}, doc)
        _, r = check_original(s2, edit(ZH[2], 1, 1))
        check([m["id"] for m in r["matches"]] == [a], r)
        _, again = check_original(s2, ZH[2], id=a, register=True)
        check(again["original"] and again["registered_at"] == ra["registered_at"], again)
        # registered_at stays monotonic across restarts
        _, rc = check_original(s2, ZH[4], id=new_id("p"), register=True)
        check(rc["registered_at"] > rb["registered_at"], rc)


@T.test
def config_env_and_flags(srv):
    import subprocess
    from harness import neardupd_path
    short = {"text": "x" * 15}
    with Server(in_memory=True, env={"NEARDUP_MIN_CHARS": "10"}) as s2:
        status, _ = s2.json("POST", "/check-original", short)
        check(status == 200, "NEARDUP_MIN_CHARS not applied")
    with Server(["--min-chars", "20"], in_memory=True, env={"NEARDUP_MIN_CHARS": "10"}) as s2:
        status, body = s2.json("POST", "/check-original", short)
        check(status == 422 and body["error"]["min_chars"] == 20, "flag does not win: %r", body)
    out = subprocess.run([neardupd_path(), "--help"], capture_output=True, text=True, timeout=10)
    check(out.returncode == 0, out)
    for var in ("NEARDUP_LISTEN", "NEARDUP_DATA", "NEARDUP_THREADS", "NEARDUP_K",
                "NEARDUP_MIN_CHARS", "NEARDUP_MAX_BODY", "NEARDUP_TIMEOUT",
                "NEARDUP_DRAIN_TIMEOUT", "NEARDUP_LOG_LEVEL", "NEARDUP_MAX_MATCHES",
                "NEARDUP_MAX_META"):
        check(var in out.stdout, "--help does not list %s" % var)
    for flag in ("--listen", "--data", "--threads", "--k", "--min-chars", "--max-body",
                 "--timeout", "--log-level"):
        check(flag in out.stdout, "--help does not list %s" % flag)
    for bad in (["--k", "9"], ["--listen", "nohostport"], ["--max-body", "12Q"], ["--bogus"],
                ["--log-level", "loud"]):
        out = subprocess.run([neardupd_path(), "--in-memory"] + bad, capture_output=True,
                             text=True, timeout=10)
        check(out.returncode == 2 and "neardupd:" in out.stderr, (bad, out))
    env = dict(os.environ, NEARDUP_K="12")
    out = subprocess.run([neardupd_path(), "--in-memory"], capture_output=True, text=True,
                         timeout=10, env=env)
    check(out.returncode == 2 and "NEARDUP_K" in out.stderr, out)


@T.test
def idle_connections_time_out(srv):
    import socket
    from harness import HOST
    with Server(["--timeout", "1"], in_memory=True) as s2:
        sock = socket.create_connection((HOST, s2.port), timeout=5)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(0.2)
        first = sock.recv(4096)
        check(first.startswith(b"HTTP/1.1 200"), first)
        t0 = time.monotonic()
        rest = sock.recv(4096)  # blocks until the server closes the idle connection
        check(rest == b"" and 0.5 < time.monotonic() - t0 < 4, (rest, time.monotonic() - t0))
        sock.close()
        # A client that never finishes its headers is dropped too.
        sock = socket.create_connection((HOST, s2.port), timeout=5)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost:")
        t0 = time.monotonic()
        data = sock.recv(4096)
        check(time.monotonic() - t0 < 4, "slow client kept")
        sock.close()
        check(data == b"" or b" 408 " in data or b" 400 " in data, data)


@T.test
def second_server_on_same_port_refused(srv):
    other = Server(in_memory=True, port=srv.port, wait_ready=False)
    try:
        other.start()
        code = other.wait(timeout=10)
        check(code == 1, "second server on the port: exit %s" % code)
        check("Address already in use" in other.log_text(), other.log_text())
    finally:
        other.cleanup()
    status, _ = srv.json("GET", "/readyz")
    check(status == 200)


@T.test
def log_level_warn_silences_requests(srv):
    from harness import free_port
    with Server(["--log-level", "warn"], in_memory=True, port=free_port()) as s2:
        s2.request("GET", "/healthz")
        time.sleep(0.3)
        check(not [r for r in s2.log_records() if r.get("msg") == "request"], "access log at warn")
        check(s2.port)


def main():
    T.run(fresh=Server)


if __name__ == "__main__":
    main()
