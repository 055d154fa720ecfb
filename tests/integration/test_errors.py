"""Every error neardupd answers, each as JSON {"error": {"code", "message"}}
with the right status: 400 invalid_json / invalid_field (naming the field),
404, 405 with Allow, 409, 413 (also when libevent itself refuses the body),
415, 422 with the counts, and malformed HTTP."""

import http.client
import json
import os
import socket
import sys
from urllib.parse import quote

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import HOST, Runner, Server, check, expect_error, load_texts  # noqa: E402

T = Runner("test_errors")
TEXTS = load_texts()
LONG = TEXTS["zh1"]


def post(srv, path, obj=None, raw=None, ctype="application/json"):
    headers = {"Content-Type": ctype} if ctype else {}
    body = raw if raw is not None else json.dumps(obj).encode()
    status, hdrs, data = srv.request("POST", path, body, headers)
    if status >= 400:
        check(hdrs.get("content-type") == "application/json", "error not JSON: %r", hdrs)
    try:
        return status, json.loads(data)
    except ValueError:
        raise AssertionError("body is not JSON: %r" % data[:200])


@T.test
def invalid_json(srv):
    for raw in (b"{", b"", b"[1,2]", b"\"text\"", b"{\"text\": \"a\"} trailing",
                b"{\"text\": \"a\", \"text\": \"b\"}", b"{'text': 'a'}", b"\xff\xfe{}",
                b"{\"text\": \"\xff\"}"):
        for path in ("/fingerprint", "/check-original"):
            status, body = post(srv, path, raw=raw)
            expect_error(status, body, 400, "invalid_json")


@T.test
def json_reader_edges(srv):
    """The request reader accepts exactly RFC 8259 objects."""
    text = json.dumps(LONG)
    good = [
        '{"text": %s}' % text,
        ' \r\n\t{ "text" : %s , "x" : [1, -0, 0.5, 1e5, 2E-3, -1.5e+2, true, false, null,'
        ' {"a": [[]], "b": {}}, "\\u00e9\\ud83d\\ude00\\/\\b\\f\\n\\r\\t\\"\\\\"] } \n' % text,
        '{"\\u0074ext": %s}' % text,
        '{"text": %s, "k": 3, "id": "\\u6587\\u7ae0-1"}' % text,
        '{"text": %s, "unknown": {"dup": 1, "nested": [1, 2, {"deep": [[[[]]]]}]}}' % text,
    ]
    for body in good:
        status, resp = post(srv, "/check-original", raw=body.encode())
        check(status == 200, "rejected %r...: %r", body[:60], resp)
    bad = ['{"text": "\\ud800"}', '{"text": "\\udc00x"}', '{"k": 01}', '{"k": 1.}',
           '{"k": .5}', '{"k": +1}', '{"k": -}', '{"text": "a\tb"}', '{"k": tru}', '{',
           '{"a" 1}', '{"a": 1,}', '{,}', '{"a": [1,]}', '{"a": [1 2]}', '{"a": "\\x"}',
           '{"a": "\\u12G4"}', '{"a": NaN}', '{"a": Infinity}', '{"a": 1} {}', 'null',
           '{"a": "unterminated}', '{"a": 1}}', '{"a": {"b": 1}']
    for body in bad:
        status, resp = post(srv, "/fingerprint", raw=body.encode())
        expect_error(status, resp, 400, "invalid_json")
    deep = '{"a": ' + "[" * 600 + "]" * 600 + "}"
    status, resp = post(srv, "/fingerprint", raw=deep.encode())
    expect_error(status, resp, 400, "invalid_json")
    status, resp = post(srv, "/fingerprint",
                        raw=json.dumps({"text": "a\u0000b\u00e9\n\"x\""}).encode())
    check(status == 200, resp)
    # Escaped and plain spellings of the same text fingerprint the same.
    status, a = post(srv, "/fingerprint", raw=json.dumps({"text": LONG}).encode())
    status, b = post(srv, "/fingerprint", raw=json.dumps({"text": LONG},
                                                         ensure_ascii=False).encode())
    check(a == b, (a, b))
    status, resp = post(srv, "/fingerprint", raw=json.dumps(
        {"texts": [LONG, "x\n\"y\"", "\u00e9"]}).encode())
    check(status == 200 and len(resp["results"]) == 3 and resp["results"][0] == a, resp)
    status, resp = post(srv, "/fingerprint", raw=json.dumps(
        {"texts": [LONG, "x\n\"y\"", "\u00e9"]}, ensure_ascii=False).encode())
    check(status == 200 and resp["results"][0] == a, resp)


@T.test
def invalid_fields_check(srv):
    cases = [
        ({}, "text"),
        ({"text": 5}, "text"),
        ({"text": None}, "text"),
        ({"text": LONG, "id": ""}, "id"),
        ({"text": LONG, "id": "x" * 257}, "id"),
        ({"text": LONG, "id": "a\nb"}, "id"),
        ({"text": LONG, "id": 12}, "id"),
        ({"text": LONG, "register": "yes"}, "register"),
        ({"text": LONG, "register": 1}, "register"),
        ({"text": LONG, "register": True}, "id"),
        ({"text": LONG, "k": -1}, "k"),
        ({"text": LONG, "k": 9}, "k"),
        ({"text": LONG, "k": "3"}, "k"),
        ({"text": LONG, "k": 2.5}, "k"),
        ({"text": LONG, "k": True}, "k"),
        ({"text": LONG, "meta": []}, "meta"),
        ({"text": LONG, "meta": "author"}, "meta"),
        ({"text": LONG, "id": "m1", "register": True, "meta": {"x": "y" * 20000}}, "meta"),
        # null is a value of the wrong type, never "absent"
        ({"text": LONG, "meta": None}, "meta"),
        ({"text": LONG, "k": None}, "k"),
        ({"text": LONG, "id": None}, "id"),
        ({"text": LONG, "register": None}, "register"),
        ({"text": LONG, "id": "n1", "register": True, "meta": None}, "meta"),
        # k must have an integer value (3.0 has), within 0..8
        ({"text": LONG, "k": 8.5}, "k"),
        ({"text": LONG, "k": 9.0}, "k"),
        ({"text": LONG, "k": 1e300}, "k"),
    ]
    for req, field in cases:
        status, body = post(srv, "/check-original", req)
        err = expect_error(status, body, 400, "invalid_field", field)
        check(field in err["message"], "message does not name %s: %r", field, err)
    # The longest id and the largest meta are accepted. An id counts
    # characters, as JSON Schema's maxLength does: 256
    # of them whatever their UTF-8 size.
    status, body = post(srv, "/check-original", {"text": LONG, "id": "é" * 128,
                                                  "meta": {"x": "y" * 16000}})
    check(status == 200, body)
    for i, ch in enumerate(("x", "é", "文", "\U0001F600")):
        doc = ch * 255 + str(i)
        status, body = post(srv, "/check-original", {"text": TEXTS["en%d" % (i + 1)],
                                                      "id": doc, "register": True})
        check(status == 200 and body["registered"] and body["id"] == doc, body)
        status, _, data = srv.request("GET", "/documents/" + quote(doc, safe=""))
        check(status == 200 and json.loads(data)["id"] == doc, data[:200])
        status, body = post(srv, "/check-original", {"text": LONG, "id": doc + "x"})
        expect_error(status, body, 400, "invalid_field", "id")
        status, _, data = srv.request("GET", "/documents/" + quote(doc + "x", safe=""))
        expect_error(status, json.loads(data), 400, "invalid_field", "id")
    # The meta limit counts the compact JSON stored, not the bytes sent: a
    # meta of 16,008 bytes sent as 48,008 bytes of \u escapes is accepted.
    meta = {"x": "é" * 8000}
    raw = json.dumps({"text": LONG, "id": "esc-1", "register": True, "meta": meta})
    check(len(raw) > 3 * 16384, len(raw))
    status, body = post(srv, "/check-original", raw=raw.encode())
    check(status == 200 and body["registered"], body)
    status, doc = srv.json("GET", "/documents/esc-1")
    check(status == 200 and doc["meta"] == meta, "meta changed")
    # A query ignores meta beyond its type: not read, not limited.
    status, body = post(srv, "/check-original", {"text": LONG, "meta": {"x": "y" * 20000}})
    check(status == 200, body)


@T.test
def k_as_integer_valued_number(srv):
    """JSON Schema calls 3.0 an integer: so does k."""
    for raw in ("3.0", "30e-1", "0.3e1", "3E0", "8.000", "-0", "0.0e5", "0e999",
                "1" + "0" * 45 + "e-45", "0." + "0" * 47 + "8e48"):
        status, body = post(srv, "/check-original",
                            raw=('{"text": %s, "k": %s}' % (json.dumps(LONG), raw)).encode())
        check(status == 200, "k %s: %r", raw, body)
    for raw in ("3.5", "9.0", "90e-1", "-1.0", "1e1", "3.0000000000000000000001", "1e999999999"):
        status, body = post(srv, "/check-original",
                            raw=('{"text": %s, "k": %s}' % (json.dumps(LONG), raw)).encode())
        expect_error(status, body, 400, "invalid_field", "k")


@T.test
def null_fields_refused(srv):
    """A null field is refused like any other wrong type, on both bodies."""
    for req, field in (({"text": None}, "text"), ({"texts": None}, "texts"),
                       ({"text": "a", "texts": None}, "texts"),
                       ({"texts": ["a"], "text": None}, "texts")):
        status, body = post(srv, "/fingerprint", req)
        expect_error(status, body, 400, "invalid_field", field)


@T.test
def meta_round_trips(srv):
    """What a registration stores as meta is what every read shows, NUL
    characters included."""
    meta = {"title": "a\u0000b", "nested": {"s": "\u0000", "list": [1, "x\u0000"]},
            "author": "李明"}
    status, body = post(srv, "/check-original", {"text": LONG, "id": "nul-1",
                                                  "register": True, "meta": meta})
    check(status == 200 and body["registered"], body)
    status, doc = srv.json("GET", "/documents/nul-1")
    check(status == 200 and doc["meta"] == meta, "GET shows %r", doc)
    status, body = post(srv, "/check-original", {"text": LONG, "id": "nul-2"})
    check(status == 200 and body["matches"][0]["meta"] == meta, body)
    # A NUL in a key is refused (jansson keeps keys as C strings).
    status, body = post(srv, "/check-original", {"text": LONG, "id": "nul-3", "register": True,
                                                  "meta": {"a\u0000b": 1}})
    expect_error(status, body, 400, "invalid_field", "meta")


@T.test
def invalid_fields_fingerprint(srv):
    cases = [
        ({}, "text"),
        ({"text": ["a"]}, "text"),
        ({"texts": "a"}, "texts"),
        ({"texts": ["a", 1]}, "texts[1]"),
        ({"texts": ["a"], "text": "b"}, "texts"),
        ({"texts": ["a"] * 1001}, "texts"),
    ]
    for req, field in cases:
        status, body = post(srv, "/fingerprint", req)
        expect_error(status, body, 400, "invalid_field", field)
    status, body = post(srv, "/fingerprint", raw=b"abc \xff\xfe def", ctype="text/plain")
    expect_error(status, body, 400, "invalid_field", "text")


@T.test
def not_found(srv):
    for method, path in (("GET", "/"), ("GET", "/nope"), ("POST", "/check"),
                         ("GET", "/healthz/x"), ("GET", "/documents"),
                         ("GET", "/documents/"), ("GET", "/documents/missing"),
                         ("DELETE", "/documents/missing")):
        status, hdrs, data = srv.request(method, path)
        expect_error(status, json.loads(data), 404, "not_found")
        check(hdrs["content-type"] == "application/json", hdrs)


@T.test
def bad_document_id_in_path(srv):
    for path in ("/documents/%ff", "/documents/a%0ab", "/documents/" + "x" * 300,
                 "/documents/a%c2%85b", "/documents/a%7fb"):
        for method in ("GET", "DELETE"):
            status, _, data = srv.request(method, path)
            expect_error(status, json.loads(data), 400, "invalid_field", "id")
        status, _, data = srv.request("HEAD", path)
        check(status == 400 and data == b"", "HEAD %s: %s %r", path, status, data)


@T.test
def method_not_allowed(srv):
    cases = [
        ("POST", "/healthz", "GET, HEAD"),
        ("DELETE", "/readyz", "GET, HEAD"),
        ("PUT", "/metrics", "GET, HEAD"),
        ("GET", "/fingerprint", "POST"),
        ("GET", "/check-original", "POST"),
        ("PUT", "/check-original", "POST"),
        ("POST", "/documents/x", "GET, HEAD, DELETE"),
        ("PATCH", "/documents/x", "GET, HEAD, DELETE"),
        ("OPTIONS", "/fingerprint", "POST"),
    ]
    for method, path, allow in cases:
        status, hdrs, data = srv.request(method, path, b"{}" if method != "GET" else None)
        expect_error(status, json.loads(data), 405, "method_not_allowed")
        check(hdrs.get("allow") == allow, "%s %s: Allow %r", method, path, hdrs.get("allow"))


@T.test
def conflict(srv):
    status, body = post(srv, "/check-original", {"text": LONG, "id": "c1", "register": True})
    check(status == 200 and body["registered"], body)
    status, body = post(srv, "/check-original", {"text": TEXTS["en1"], "id": "c1",
                                                  "register": True})
    expect_error(status, body, 409, "id_conflict")


@T.test
def unsupported_media_type(srv):
    body = json.dumps({"text": LONG}).encode()
    for path, ctype in (("/fingerprint", None),
                        ("/fingerprint", "application/x-www-form-urlencoded"),
                        ("/fingerprint", "application/json; charset=latin1"),
                        ("/fingerprint", "text/html"),
                        ("/check-original", "text/plain"),
                        ("/check-original", None),
                        ("/check-original", "multipart/form-data; boundary=x")):
        status, resp = post(srv, path, raw=body, ctype=ctype)
        expect_error(status, resp, 415, "unsupported_media_type")


@T.test
def too_short(srv):
    status, body = post(srv, "/check-original", {"text": "太短了。Too short.", "id": "s1",
                                                  "register": True})
    err = expect_error(status, body, 422, "text_too_short")
    check(err["min_chars"] == 300 and isinstance(err["chars"], int) and err["chars"] < 300, err)
    status, body = post(srv, "/check-original", {"text": ""})
    err = expect_error(status, body, 422, "text_too_short")
    check(err["chars"] == 0, err)
    status, body = srv.json("GET", "/documents/s1")
    expect_error(status, body, 404, "not_found")
    # /fingerprint answers for any length.
    status, body = post(srv, "/fingerprint", {"text": "短"})
    check(status == 200, body)


@T.test
def too_short_configurable(srv):
    with Server(["--min-chars", "10"], in_memory=True) as s2:
        status, body = post(s2, "/check-original", {"text": "twelve chars here"})
        check(status == 200, body)
        status, body = post(s2, "/check-original", {"text": "short"})
        err = expect_error(status, body, 422, "text_too_short")
        check(err["min_chars"] == 10, err)


def raw_exchange(port, data, timeout=5):
    s = socket.create_connection((HOST, port), timeout=timeout)
    try:
        s.sendall(data)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            out += chunk
        return out
    finally:
        s.close()


def parse_raw(resp):
    head, _, body = resp.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    hdrs = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return status, hdrs, body


@T.test
def body_too_large(srv):
    with Server(["--max-body", "64K"], in_memory=True) as s2:
        # Declared length over the limit: refused before the body is read.
        big = json.dumps({"text": "a" * 70000}).encode()
        status, body = post(s2, "/fingerprint", raw=big)
        err = expect_error(status, body, 413, "body_too_large")
        check("65536" in err["message"], err)
        status, body = post(s2, "/check-original", raw=big)
        expect_error(status, body, 413, "body_too_large")
        # A client that sends a large body in full still reads the answer.
        huge = b"{\"text\": \"" + b"a" * (8 << 20) + b"\"}"
        status, body = post(s2, "/check-original", raw=huge)
        expect_error(status, body, 413, "body_too_large")
        # Just under the limit works.
        ok = json.dumps({"text": "a" * 60000}).encode()
        status, body = post(s2, "/fingerprint", raw=ok)
        check(status == 200, body)
        # Expect: 100-continue with a body over the limit: answered by a JSON
        # 413 once the body arrives (the body is read and dropped).
        conn = http.client.HTTPConnection(HOST, s2.port, timeout=10)
        conn.request("POST", "/fingerprint", body=b"b" * 100000,
                     headers={"Content-Type": "text/plain"})
        r = conn.getresponse()
        expect_error(r.status, json.loads(r.read()), 413, "body_too_large")
        conn.close()


@T.test
def malformed_http(srv):
    for data in (b"GARBAGE\r\n\r\n", b"GET / HTTP/1.1\r\nno colon line\r\n\r\n",
                 b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n"):
        resp = raw_exchange(srv.port, data)
        status, hdrs, body = parse_raw(resp)
        check(status in (400, 413), "status %s: %r", status, resp[:200])
        check(hdrs.get("content-type") == "application/json", hdrs)
        err = json.loads(body)["error"]
        check(err["code"] in ("bad_request", "body_too_large"), err)
        check(resp.startswith(b"HTTP/1.1 "), resp[:40])
    resp = raw_exchange(srv.port, b"BREW /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    status, hdrs, body = parse_raw(resp)
    check(status == 501 and json.loads(body)["error"]["code"] == "not_implemented", resp)


@T.test
def errors_counted_in_metrics(srv):
    post(srv, "/check-original", {"text": "short"})
    srv.request("GET", "/nope")
    m = srv.metrics()
    check(m.get('neardup_http_requests_total{route="/check-original",code="422"}') == 1, m)
    check(m.get('neardup_http_requests_total{route="other",code="404"}') == 1, m)
    check(m.get("neardup_too_short_total") == 1, m)


def main():
    T.run(fresh=lambda: Server(in_memory=True))


if __name__ == "__main__":
    main()
