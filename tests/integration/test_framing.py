"""HTTP/1.1 framing on raw sockets: a proxy in front
of neardupd reuses connections, so any request whose boundaries the two
read differently is a smuggling hole.

Every case is a byte string sent on a fresh connection, and asserts one
response per request (in order, with X-Request-Id; errors are JSON), the
close the RFCs require after a refused framing (RFC 9112 6.3, 9.6: the
server closes, with "Connection: close", long before any timeout), and
that no request hidden in a body ever ran (its path, /smuggled, never
shows in the access log). The cases: HEAD answers (Content-Length, no
body), bodies on GET/HEAD/TRACE/DELETE/OPTIONS, whitespace before the
colon, duplicate and conflicting Content-Length, CL.TE, TE.CL, TE.TE with
obfuscated Transfer-Encoding, unknown codings (xchunked, gzip, chunked),
obs-fold, bare LF and bare CR, NUL in the request line, a name and a value,
Host missing or twice, Expect: 100-continue over --max-body (refused at
once) and within it, malformed chunked bodies, unknown methods, headers
over the limit.

Then the same cases go through a real HAProxy with the shipped
deploy/haproxy/haproxy.cfg (as test_haproxy.py starts it) in front of
neardupd, and the two must agree on every request's boundaries: every
request neardupd logged carries a request id that HAProxy logged as sent
to it, with the same status; nothing HAProxy did not frame itself reached
neardupd; the client got exactly one response per request HAProxy logged;
and /smuggled never ran. Skipped through HAProxy (not directly) when
haproxy is not installed."""

import os
import re
import shutil
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import HOST, Runner, Server, check, free_port  # noqa: E402

T = Runner("test_framing")
MAX_BODY = 65536
ARGS = ["--max-body", str(MAX_BODY)]
SMUGGLED = b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
CLOSE_WITHIN_S = 2.0  # well under every timeout of the servers here (30 s)


def req(method, path="/healthz", headers=(), body=b"", host=True, version=b"HTTP/1.1",
        close=False):
    head = b"%s %s %s\r\n" % (method, path.encode() if isinstance(path, str) else path,
                              version)
    if host:
        head += b"Host: x\r\n"
    for h in headers:
        head += h + b"\r\n"
    if close:
        head += b"Connection: close\r\n"
    return head + b"\r\n" + body


LAST = req(b"GET", close=True)  # a plain request after the case's, then close


class Resp:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def __repr__(self):
        return "<%d %r %r>" % (self.status, self.headers, self.body[:120])


def parse(data, heads):
    """Responses in data; heads[i] says whether the i-th (final) response
    answers a HEAD (no body whatever Content-Length says). Interim 1xx
    responses are returned too."""
    out = []
    k = 0
    while data.startswith(b"HTTP/"):
        head, sep, rest = data.partition(b"\r\n\r\n")
        check(sep, "a truncated response head: %r", data[:300])
        lines = head.decode("latin-1").split("\r\n")
        hdrs = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            check(name.lower() not in hdrs, "header %s twice: %r", name, head)
            hdrs[name.lower()] = value.strip()
        status = int(lines[0].split()[1])
        if 100 <= status < 200:
            out.append(Resp(status, hdrs, b""))
            data = rest
            continue
        is_head = k < len(heads) and heads[k]
        k += 1
        n = 0 if is_head else int(hdrs.get("content-length", len(rest)))
        out.append(Resp(status, hdrs, rest[:n]))
        data = rest[n:]
    check(data in (b"", b"<timeout>", b"<reset>"), "bytes after the responses: %r", data[:300])
    return out


def exchange(port, data, pause_after=None, timeout=10.0, idle=None):
    """Sends data on a new connection (pausing after the first pause_after
    bytes until a 100 Continue or a final answer came), reads until the
    peer closes (or, with idle, until nothing came for idle seconds).
    Returns (bytes read, seconds until the close)."""
    s = socket.create_connection((HOST, port), timeout=timeout)
    t0 = time.monotonic()
    out = b""
    try:
        try:
            if pause_after is not None:
                s.sendall(data[:pause_after])
                while b"\r\n\r\n" not in out:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    out += chunk
                if out.startswith(b"HTTP/1.1 100"):
                    s.sendall(data[pause_after:])
            else:
                s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        if idle is not None:
            s.settimeout(idle)
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    except socket.timeout:
        out += b"<timeout>"
    except ConnectionResetError:
        out += b"<reset>"
    finally:
        s.close()
    return out, time.monotonic() - t0


# (name, bytes, [(status or None for any, error code or None, is HEAD)], refused)
# refused: the server must close right after the last answer, with
# "Connection: close" (no request in the case asks for a close itself).
CASES = [
    ("head_has_length_no_body",
     req(b"HEAD", "/metrics") + req(b"HEAD") + LAST,
     [(200, None, True), (200, None, True), (200, None, False)], False),
    ("head_unknown_route",
     req(b"HEAD", "/nope") + LAST, [(404, "not_found", True), (200, None, False)], False),
    ("head_with_body",
     req(b"HEAD", headers=[b"Content-Length: %d" % len(SMUGGLED)], body=SMUGGLED),
     [(400, "bad_request", True)], True),
    ("head_with_chunked_body",
     req(b"HEAD", headers=[b"Transfer-Encoding: chunked"],
         body=b"%x\r\n%s\r\n0\r\n\r\n" % (len(SMUGGLED), SMUGGLED)),
     [(400, "bad_request", True)], True),
    ("head_content_length_0", req(b"HEAD", headers=[b"Content-Length: 0"]) + LAST,
     [(200, None, True), (200, None, False)], False),
    ("trace_with_body",
     req(b"TRACE", headers=[b"Content-Length: %d" % len(SMUGGLED)], body=SMUGGLED),
     [(400, "bad_request", False)], True),
    ("get_with_body",
     req(b"GET", headers=[b"Content-Length: %d" % len(SMUGGLED)], body=SMUGGLED) + LAST,
     [(200, None, False), (200, None, False)], False),
    ("delete_with_body",
     req(b"DELETE", "/documents/nope", headers=[b"Content-Length: %d" % len(SMUGGLED)],
         body=SMUGGLED) + LAST,
     [(404, None, False), (200, None, False)], False),
    ("options_with_body",
     req(b"OPTIONS", headers=[b"Content-Length: %d" % len(SMUGGLED)], body=SMUGGLED) + LAST,
     [(None, None, False), (200, None, False)], False),
    ("get_with_chunked_body",
     req(b"GET", headers=[b"Transfer-Encoding: chunked"],
         body=b"%x\r\n%s\r\n0\r\n\r\n" % (len(SMUGGLED), SMUGGLED)) + LAST,
     [(200, None, False), (200, None, False)], False),
    ("space_before_colon",
     req(b"POST", "/fingerprint", headers=[b"Content-Length : %d" % len(SMUGGLED)],
         body=SMUGGLED),
     [(400, "bad_request", False)], True),
    ("tab_before_colon",
     req(b"POST", "/fingerprint", headers=[b"Content-Length\t: %d" % len(SMUGGLED)],
         body=SMUGGLED),
     [(400, "bad_request", False)], True),
    ("duplicate_content_length",
     req(b"POST", "/fingerprint", headers=[b"Content-Length: %d" % len(SMUGGLED)] * 2,
         body=SMUGGLED),
     [(400, "bad_request", False)], True),
    ("conflicting_content_length",
     req(b"POST", "/fingerprint", headers=[b"Content-Length: 2",
                                           b"Content-Length: %d" % (len(SMUGGLED) + 2)],
         body=b"{}" + SMUGGLED),
     [(400, "bad_request", False)], True),
    ("content_length_list",
     req(b"POST", "/fingerprint", headers=[b"Content-Length: 2, 2"], body=b"{}"),
     [(400, "bad_request", False)], True),
    ("content_length_plus",
     req(b"POST", "/fingerprint", headers=[b"Content-Length: +2"], body=b"{}"),
     [(400, "bad_request", False)], True),
    ("content_length_huge",
     req(b"POST", "/fingerprint", headers=[b"Content-Length: 99999999999999999999999"],
         body=b"{}"),
     [(413, "body_too_large", False)], True),
    ("cl_te",
     req(b"POST", "/fingerprint", headers=[b"Content-Length: 4", b"Transfer-Encoding: chunked"],
         body=b"0\r\n\r\n" + SMUGGLED),
     [(400, "bad_request", False)], True),
    ("te_cl",
     req(b"POST", "/fingerprint", headers=[b"Transfer-Encoding: chunked",
                                           b"Content-Length: %d" % (len(SMUGGLED) + 5)],
         body=b"0\r\n\r\n" + SMUGGLED),
     [(400, "bad_request", False)], True),
    ("te_xchunked",
     req(b"POST", "/fingerprint", headers=[b"Transfer-Encoding: xchunked"], body=SMUGGLED),
     [(501, "not_implemented", False)], True),
    ("te_gzip_chunked",
     req(b"POST", "/fingerprint", headers=[b"Transfer-Encoding: gzip, chunked"],
         body=b"0\r\n\r\n" + SMUGGLED),
     [(501, "not_implemented", False)], True),
    ("te_chunked_identity",
     req(b"POST", "/fingerprint", headers=[b"Transfer-Encoding: chunked, identity"],
         body=b"0\r\n\r\n" + SMUGGLED),
     [(501, "not_implemented", False)], True),
    ("te_te_second_obfuscated",
     req(b"POST", "/fingerprint", headers=[b"Transfer-Encoding: chunked",
                                           b"Transfer-Encoding: x"],
         body=b"0\r\n\r\n" + SMUGGLED),
     [(501, "not_implemented", False)], True),
    ("te_te_twice",
     req(b"POST", "/fingerprint", headers=[b"Transfer-Encoding: chunked",
                                           b"Transfer-encoding: chunked"],
         body=b"0\r\n\r\n" + SMUGGLED),
     [(400, "bad_request", False)], True),
    ("te_tab_value",
     req(b"POST", "/fingerprint", headers=[b"Transfer-Encoding:\tchunked",
                                           b"Content-Length: 5"],
         body=b"0\r\n\r\n" + SMUGGLED),
     [(400, "bad_request", False)], True),
    ("te_space_before_colon",
     req(b"POST", "/fingerprint", headers=[b"Transfer-Encoding : chunked"],
         body=b"0\r\n\r\n" + SMUGGLED),
     [(400, "bad_request", False)], True),
    ("te_quoted",
     req(b"POST", "/fingerprint", headers=[b'Transfer-Encoding: "chunked"'],
         body=b"0\r\n\r\n" + SMUGGLED),
     [(501, "not_implemented", False)], True),
    ("te_trailing_comma",
     req(b"POST", "/fingerprint", headers=[b"Transfer-Encoding: chunked,"],
         body=b"0\r\n\r\n" + SMUGGLED),
     [(400, "bad_request", False)], True),
    ("te_obs_fold",
     req(b"POST", "/fingerprint", headers=[b"X-A: 1", b"Transfer-Encoding:", b" chunked"],
         body=b"0\r\n\r\n" + SMUGGLED),
     [(400, "bad_request", False)], True),
    ("te_http_1_0",
     req(b"POST", "/fingerprint", version=b"HTTP/1.0", headers=[b"Transfer-Encoding: chunked"],
         body=b"0\r\n\r\n" + SMUGGLED),
     [(400, "bad_request", False)], True),
    ("obs_fold",
     req(b"GET", headers=[b"X-A: 1", b" folded"]), [(400, "bad_request", False)], True),
    ("first_header_folded",
     b"GET /healthz HTTP/1.1\r\n Host: x\r\n\r\n", [(400, "bad_request", False)], True),
    ("bare_lf",
     b"GET /healthz HTTP/1.1\nHost: x\n\n" + SMUGGLED, [(400, "bad_request", False)], True),
    ("bare_lf_in_header",
     b"GET /healthz HTTP/1.1\r\nHost: x\nX-A: 1\r\n\r\n", [(400, "bad_request", False)], True),
    ("bare_cr",
     b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: 1\rX-B: 2\r\n\r\n",
     [(400, "bad_request", False)], True),
    ("nul_in_value",
     b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", [(400, "bad_request", False)],
     True),
    ("nul_in_content_length",
     b"POST /fingerprint HTTP/1.1\r\nHost: x\r\nContent-Length: 2\x00 0\r\n\r\n{}",
     [(400, "bad_request", False)], True),
    ("nul_in_name",
     b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-\x00A: 1\r\n\r\n", [(400, "bad_request", False)],
     True),
    ("nul_in_request_line",
     b"GET /heal\x00thz HTTP/1.1\r\nHost: x\r\n\r\n", [(400, "bad_request", False)], True),
    ("host_missing", req(b"GET", host=False), [(400, "bad_request", False)], True),
    ("host_twice", req(b"GET", headers=[b"Host: y"]), [(400, "bad_request", False)], True),
    ("http_1_0_without_host",
     req(b"GET", host=False, version=b"HTTP/1.0"), [(200, None, False)], False),
    ("expect_100_over_limit",
     req(b"POST", "/fingerprint", headers=[b"Content-Type: application/json",
                                           b"Expect: 100-continue",
                                           b"Content-Length: %d" % (MAX_BODY + 1)]),
     [(413, "body_too_large", False)], True),
    ("chunk_without_crlf",
     req(b"POST", "/fingerprint", headers=[b"Transfer-Encoding: chunked"],
         body=b"2\r\n{}0\r\n\r\n" + SMUGGLED),
     [(413, "body_too_large", False)], True),
    ("chunk_extension",
     req(b"POST", "/fingerprint", headers=[b"Transfer-Encoding: chunked"],
         body=b"2;x=1\r\n{}\r\n0\r\n\r\n"),
     [(413, "body_too_large", False)], True),
    ("chunk_size_0x",
     req(b"POST", "/fingerprint", headers=[b"Transfer-Encoding: chunked"],
         body=b"0x2\r\n{}\r\n0\r\n\r\n"),
     [(413, "body_too_large", False)], True),
    ("chunked_then_pipelined",
     req(b"POST", "/fingerprint", headers=[b"Content-Type: application/json",
                                           b"Transfer-Encoding: chunked"],
         body=b"5\r\n{\"tex\r\n9\r\nt\": \"a b\"\r\n1\r\n}\r\n0\r\nX-Trailer: 1\r\n\r\n") + LAST,
     [(200, None, False), (200, None, False)], False),
    ("unknown_method", req(b"BREW"), [(501, "not_implemented", False)], True),
    ("request_line_extra", b"GET /healthz HTTP/1.1 x\r\nHost: x\r\n\r\n",
     [(400, "bad_request", False)], True),
    ("http_2_0", b"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n",
     [(505, "http_version_not_supported", False)], True),
    ("headers_over_limit",
     req(b"GET", headers=[b"X-Big: " + b"a" * 40000]), [(None, None, False)], True),
]


if os.environ.get("ND_FRAMING_CASES"):  # a comma-separated subset, when debugging
    _only = os.environ["ND_FRAMING_CASES"].split(",")
    CASES = [c for c in CASES if c[0] in _only]


def check_case(name, data, want, refused, out, dt):
    resp = parse(out, [w[2] for w in want])
    final = [r for r in resp if r.status >= 200]
    check(len(final) == len(want), "%s: %d responses, wanted %d: %r", name, len(final),
          len(want), resp)
    for (status, code, is_head), r in zip(want, final):
        check(status is None or r.status == status, "%s: status %d, wanted %s: %r", name,
              r.status, status, r)
        check(r.headers.get("x-request-id"), "%s: no X-Request-Id: %r", name, r)
        if is_head:
            check(r.body == b"" and int(r.headers.get("content-length", "-1")) > 0,
                  "%s: HEAD answer without Content-Length or with a body: %r", name, r)
        elif r.status >= 400:
            check(r.headers.get("content-type") == "application/json", "%s: %r", name, r)
            import json
            err = json.loads(r.body)["error"]
            check(code is None or err["code"] == code, "%s: code %r, wanted %r", name,
                  err["code"], code)
    if refused:
        check(final[-1].headers.get("connection") == "close", "%s: no Connection: close: %r",
              name, final[-1])
    check(b"<timeout>" not in out and dt < CLOSE_WITHIN_S, "%s: not closed (%.1fs): %r", name,
          dt, out[-200:])


def access_of(recs):
    return [r for r in recs if r.get("msg") == "request"]


def access_lines(srv):
    return access_of(srv.log_records())


FLUSH_S = 0.25  # the access log is written in batches, every 100 ms


@T.test
def direct(srv):
    """Every case straight against neardupd."""
    for name, data, want, refused in CASES:
        time.sleep(FLUSH_S)
        before = len(access_lines(srv))
        pause = len(data) if name.startswith("expect_100") else None
        out, dt = exchange(srv.port, data, pause_after=pause)
        check_case(name, data, want, refused, out, dt)
        # One access line per response, the same request ids, nothing else.
        rids = [r.headers["x-request-id"] for r in parse(out, [w[2] for w in want])
                if r.status >= 200]
        time.sleep(FLUSH_S)
        srv.log_records_until(lambda recs: len(access_of(recs)) - before >= len(rids))
        lines = access_lines(srv)[before:]
        check(sorted(r["rid"] for r in lines) == sorted(rids),
              "%s: access lines %r for the answers %r", name, lines, rids)
    smuggled = [r for r in access_lines(srv) if "smuggled" in (r.get("path") or "")]
    check(not smuggled, "a request hidden in a body ran: %r", smuggled)


@T.test
def expect_100_within_limit(srv):
    body = b'{"text": "a b c"}'
    data = req(b"POST", "/fingerprint", headers=[b"Content-Type: application/json",
                                                 b"Expect: 100-continue",
                                                 b"Content-Length: %d" % len(body)],
               close=True) + body
    out, dt = exchange(srv.port, data, pause_after=len(data) - len(body))
    resp = parse(out, [False])
    check([r.status for r in resp] == [100, 200], "%r", resp)


@T.test
def expect_100_over_limit_is_immediate(srv):
    """The 413 comes before any body byte is sent (the client waits for
    100 Continue or an answer)."""
    data = req(b"POST", "/fingerprint", headers=[b"Expect: 100-continue",
                                                 b"Content-Length: %d" % (MAX_BODY * 10)])
    s = socket.create_connection((HOST, srv.port), timeout=5)
    t0 = time.monotonic()
    s.sendall(data)
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = s.recv(4096)
        if not chunk:
            break
        got += chunk
    dt = time.monotonic() - t0
    s.close()
    check(got.startswith(b"HTTP/1.1 413"), "%r", got[:200])
    check(dt < 1.0, "413 after %.2fs", dt)


@T.test
def pipelined_refusal_keeps_order(srv):
    """Two good requests, then a refused one, then one that must never
    run: two 200s, the 400, the close."""
    data = req(b"GET") + req(b"GET", "/readyz") + req(b"GET", headers=[b"X-A: 1", b" fold"]) \
        + SMUGGLED
    out, dt = exchange(srv.port, data)
    resp = parse(out, [False] * 3)
    check([r.status for r in resp] == [200, 200, 400], "%r", resp)
    check(dt < CLOSE_WITHIN_S, "not closed: %.1fs", dt)


@T.test
def refusal_in_a_later_segment(srv):
    """The head arrives in pieces (libevent has consumed the first lines
    when the refusal is seen): still refused with the check's status."""
    s = socket.create_connection((HOST, srv.port), timeout=5)
    s.sendall(b"POST /fingerprint HTTP/1.1\r\nHost: x\r\n")
    time.sleep(0.2)
    s.sendall(b"Transfer-Encoding: gzip, chunked\r\n")
    time.sleep(0.2)
    s.sendall(b"\r\n0\r\n\r\n" + SMUGGLED)
    out = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        out += chunk
    s.close()
    resp = parse(out, [False])
    check(len(resp) == 1 and resp[0].status == 501, "%r", resp)


# ---- through HAProxy ----

def haproxy_log_records(path):
    """(backend/server, status, request id) of each request HAProxy logged."""
    out = []
    with open(path, "rb") as f:
        for line in f.read().decode("utf-8", "replace").splitlines():
            m = re.search(r" (\S+)/(\S+) \S+/\S+/\S+/\S+/\S+ (-?\d+) .* (\S+)$", line)
            if m and "/" not in m.group(4):
                out.append((m.group(1) + "/" + m.group(2), int(m.group(3)), m.group(4)))
    return out


@T.test
def through_haproxy(srv):
    if shutil.which("haproxy") is None:
        print("     (haproxy not installed: skipped; deploy/install-deps.sh --test installs it)")
        return
    from test_haproxy import HAProxy  # noqa: E402 - same directory
    tmp = tempfile.mkdtemp(prefix="neardup-framing-")
    ports = {k: free_port() for k in ("front", "a", "b", "stats")}
    ha = HAProxy(tmp, ports)
    a = Server(ARGS, port=ports["a"], threads=1, in_memory=True)
    try:
        a.start()
        ha.start()
        ha.wait_status("a", "UP", ha.timings.up_within() + 5)
        agreed = 0
        for name, data, want, refused in CASES:
            n_ha = len(haproxy_log_records(ha.log_path))
            n_nd = len(access_lines(a))
            pause = len(data) if name.startswith("expect_100") else None
            out, dt = exchange(ports["front"], data, pause_after=pause, idle=0.5)
            resp = [r for r in parse(out, [w[2] for w in want]) if r.status >= 200]
            # HAProxy logs a request when it ends: wait for the lines.
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                ha_new = haproxy_log_records(ha.log_path)[n_ha:]
                if len(ha_new) >= len(resp):
                    break
                time.sleep(0.05)
            time.sleep(0.1)
            ha_new = haproxy_log_records(ha.log_path)[n_ha:]
            n_sent = sum(1 for rec in ha_new if rec[0] == "neardupd/a")
            deadline = time.monotonic() + 3  # neardupd writes its log in batches
            while True:
                nd_new = [r for r in access_lines(a)[n_nd:]
                          if not (r["path"] == "/readyz" and "-" in r["rid"][:3])]
                if len(nd_new) >= n_sent or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            time.sleep(FLUSH_S)  # and nothing more comes
            nd_new = [r for r in access_lines(a)[n_nd:]
                      if not (r["path"] == "/readyz" and "-" in r["rid"][:3])]
            # The client got one response per request HAProxy logged.
            check(len(resp) == len(ha_new), "%s: client saw %d responses, HAProxy logged %d: "
                  "%r %r", name, len(resp), len(ha_new), resp, ha_new)
            # Everything neardupd served, HAProxy framed and sent it, and
            # neardupd's answer is the one HAProxy logged. A request that
            # neardupd refuses in its head may not show HAProxy's request id
            # (it comes last, after the refused line): those pair up in
            # order, by status.
            sent = [(rid, status) for srv_name, status, rid in ha_new
                    if srv_name == "neardupd/a"]
            by_rid = dict(sent)
            check(len(nd_new) == len(sent), "%s: HAProxy sent %d requests, neardupd served "
                  "%d: %r %r", name, len(sent), len(nd_new), ha_new, nd_new)
            unmatched = [st for rid, st in sent if rid not in {r["rid"] for r in nd_new}]
            for r in nd_new:
                if r["rid"] in by_rid:
                    check(by_rid[r["rid"]] == r["status"], "%s: status %s at neardupd, %s at "
                          "HAProxy", name, r["status"], by_rid[r["rid"]])
                else:
                    check(r["status"] >= 400 and unmatched and unmatched[0] == r["status"],
                          "%s: neardupd served a request HAProxy did not send: %r (HAProxy: "
                          "%r)", name, r, ha_new)
                    unmatched.pop(0)
            agreed += 1
        print("     %d cases: HAProxy and neardupd agree on every request's boundaries"
              % agreed)
    finally:
        ha.stop()
        try:
            if a.proc and a.proc.poll() is None:
                check(a.stop() == 0, "neardupd exit at the end:\n%s", a.log_tail())
            a.check_sanitizers()
        finally:
            a.cleanup()
            if os.environ.get("ND_KEEP_TMP") is None:
                shutil.rmtree(tmp, ignore_errors=True)


def main():
    with Server(ARGS, in_memory=True) as srv:
        T.run(srv)


if __name__ == "__main__":
    main()
