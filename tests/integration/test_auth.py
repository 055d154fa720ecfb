"""Bearer tokens: with a token configured (--token-file, or NEARDUP_TOKEN in
the environment), registering, DELETE and (with --auth-all) everything but
the probes need "Authorization: Bearer <token>", else 401 with a JSON error
and WWW-Authenticate; checking without registering and fingerprinting stay
open. The token never shows in the command line, the log or /metrics; a
token that cannot be used stops the start."""

import json
import os
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Runner, Server, check, expect_error, load_texts, neardupd_path  # noqa: E402

T = Runner("test_auth")
TEXTS = load_texts()
TOKEN = "nd-test-9f2c4e71a0b35d68c7e1f04a2b9d3c56"
TMP = tempfile.mkdtemp(prefix="neardup-auth-")


def token_file(content, mode=0o600, name="token"):
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        f.write(content)
    os.chmod(path, mode)
    return path


def bearer(token=TOKEN):
    return {"Authorization": "Bearer " + token}


def register(srv, doc, text, headers=None):
    return srv.json("POST", "/check-original", {"id": doc, "text": text, "register": True},
                    headers=headers)


def raw_401(srv, method, path, obj=None, headers=None):
    """One request; checks a 401 with the JSON error and WWW-Authenticate."""
    hdrs = {"Content-Type": "application/json"}
    hdrs.update(headers or {})
    body = json.dumps(obj).encode() if obj is not None else None
    status, rh, data = srv.request(method, path, body, hdrs)
    expect_error(status, json.loads(data), 401, "unauthorized")
    check(rh.get("content-type") == "application/json", rh)
    check(rh.get("www-authenticate", "").startswith('Bearer realm="neardup"'), rh)
    return rh


@T.test
def open_without_a_token(srv):
    with Server(in_memory=True) as s:
        status, body = register(s, "open-1", TEXTS["en1"])
        check(status == 200 and body["registered"], body)
        status, _, _ = s.request("DELETE", "/documents/open-1")
        check(status == 200, status)
        check(any(r.get("auth") == "off" for r in s.log_records()), "no auth line")


@T.test
def writes_need_the_token(srv):
    path = token_file(TOKEN + "\n")
    with Server(["--token-file", path], in_memory=True) as s:
        # Registering: refused without, with a wrong, or with another scheme.
        for headers, invalid in ((None, False), (bearer("wrong-token-0123456789"), True),
                                 ({"Authorization": "Basic dXNlcjpwYXNz"}, False),
                                 ({"Authorization": "Bearer"}, False),
                                 ({"Authorization": "Bearer " + TOKEN + "x"}, True),
                                 ({"Authorization": "Bearer " + TOKEN[:-1]}, True),
                                 ({"Authorization": TOKEN}, False)):
            rh = raw_401(s, "POST", "/check-original",
                         {"id": "a-1", "text": TEXTS["en1"], "register": True}, headers)
            check(('error="invalid_token"' in rh["www-authenticate"]) == invalid,
                  "%r: %r", headers, rh["www-authenticate"])
        status, _ = s.json("GET", "/documents/a-1")
        check(status == 404, "registered without the token")
        # Refused before any work: a too-short text is still 401, not 422.
        raw_401(s, "POST", "/check-original", {"id": "a-2", "text": "short", "register": True})
        # With the token (scheme in any case, extra spaces): registered.
        status, body = register(s, "a-1", TEXTS["en1"], bearer())
        check(status == 200 and body["registered"], body)
        status, body = register(s, "a-3", TEXTS["zh1"],
                                {"Authorization": "bEaReR   " + TOKEN + "  "})
        check(status == 200 and body["registered"], body)
        # Open: checking without registering, fingerprints, reads, probes, metrics.
        status, body = s.json("POST", "/check-original", {"text": TEXTS["en1"]})
        check(status == 200 and not body["original"], body)
        status, body = s.json("POST", "/check-original",
                              {"id": "a-4", "text": TEXTS["en2"], "register": False})
        check(status == 200 and not body["registered"], body)
        status, body = s.json("POST", "/fingerprint", {"text": TEXTS["en1"]})
        check(status == 200, body)
        for path in ("/documents/a-1", "/healthz", "/readyz", "/metrics"):
            status, _, _ = s.request("GET", path)
            check(status == 200, "%s: %s", path, status)
        # DELETE needs it.
        raw_401(s, "DELETE", "/documents/a-1")
        raw_401(s, "DELETE", "/documents/no-such-doc", headers=bearer("x" * 300))
        status, _, _ = s.request("DELETE", "/documents/a-1", headers=bearer())
        check(status == 200, status)
        m = s.metrics()
        # Counted (as "401", or "other" if metrics.c does not list 401).
        for route, n in (("/check-original", 8), ("/documents/{id}", 2)):
            key = 'neardup_http_requests_total{route="%s",code="%%s"}' % route
            check(m.get(key % "401", m.get(key % "other")) == n, "%s: %r", route, m)
        check(any(r.get("auth") == "writes" for r in s.log_records()), "no auth line")


@T.test
def token_from_the_environment(srv):
    with Server(in_memory=True, env={"NEARDUP_TOKEN": TOKEN}) as s:
        raw_401(s, "POST", "/check-original", {"id": "e-1", "text": TEXTS["zh2"],
                                               "register": True})
        status, body = register(s, "e-1", TEXTS["zh2"], bearer())
        check(status == 200 and body["registered"], body)
        with open("/proc/%d/cmdline" % s.proc.pid, "rb") as f:
            check(TOKEN.encode() not in f.read(), "token in the command line")


@T.test
def auth_all(srv):
    path = token_file(TOKEN)
    with Server(["--token-file", path, "--auth-all"], in_memory=True) as s:
        raw_401(s, "POST", "/fingerprint", {"text": "x"})
        raw_401(s, "POST", "/check-original", {"text": TEXTS["en3"]})
        for method, p in (("GET", "/documents/x"), ("HEAD", "/documents/x"),
                          ("GET", "/metrics"), ("DELETE", "/documents/x")):
            status, rh, _ = s.request(method, p)
            check(status == 401 and "www-authenticate" in rh, "%s %s: %s", method, p, status)
        for p in ("/healthz", "/readyz"):
            status, _, _ = s.request("GET", p)
            check(status == 200, "%s: %s", p, status)
        status, body = s.json("POST", "/fingerprint", {"text": "x"}, headers=bearer())
        check(status == 200, body)
        status, _, _ = s.request("GET", "/metrics", headers=bearer())
        check(status == 200, status)
        check(any(r.get("auth") == "all" for r in s.log_records()), "no auth line")


@T.test
def token_never_logged(srv):
    path = token_file(TOKEN)
    with Server(["--token-file", path], in_memory=True) as s:
        register(s, "l-1", TEXTS["en4"], bearer("guess-" + TOKEN[6:]))
        register(s, "l-1", TEXTS["en4"], bearer())
        _, _, metrics = s.request("GET", "/metrics")
        log = s.log_text()
    check(TOKEN not in log and TOKEN[6:] not in log, "token in the log")
    check(TOKEN.encode() not in metrics, "token in /metrics")


def start_fails(args, env=None, want=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith("NEARDUP_")}
    e.update(env or {})
    p = subprocess.run([neardupd_path(), "--in-memory", "--listen", "127.0.0.1:0"] + args,
                       env=e, capture_output=True, timeout=30)
    check(p.returncode != 0, "started with %r", args)
    err = p.stderr.decode()
    if want:
        check(want in err, "%r not in %s", want, err[-500:])
    check(TOKEN not in err and "short-token" not in err, "token in the error: %s", err)
    return err


@T.test
def unusable_tokens_stop_the_start(srv):
    start_fails(["--token-file", os.path.join(TMP, "missing")], want="cannot open the token file")
    start_fails(["--token-file", token_file("short-token\n", name="short")],
                want="16 to 256 characters")
    start_fails(["--token-file", token_file("has space inside-0123456789", name="space")],
                want="may hold only")
    start_fails(["--token-file", token_file("", name="empty")], want="16 to 256")
    start_fails(["--token-file", token_file("x" * 300, name="long")], want="16 to 256")
    start_fails(["--token-file", TMP], want="not a regular file")
    start_fails([], env={"NEARDUP_TOKEN": "short-token"}, want="NEARDUP_TOKEN")
    start_fails(["--token-file", token_file(TOKEN)], env={"NEARDUP_TOKEN": TOKEN},
                want="not both")
    start_fails(["--auth-all"], want="--auth-all needs a token")
    start_fails(["--token", TOKEN], want="--token is not accepted")


def readable_warning(s):
    warns = [r for r in s.log_records() if r.get("level") == "warn"]
    return any("readable by other users" in r.get("msg", "") for r in warns)


@T.test
def world_readable_token_file_warns(srv):
    path = token_file(TOKEN + "\r\n", mode=0o644, name="loose")
    with Server(["--token-file", path], in_memory=True) as s:
        check(readable_warning(s), s.log_text())
        status, body = register(s, "w-1", TEXTS["zh3"], bearer())
        check(status == 200, body)
    check(stat.S_IMODE(os.stat(path).st_mode) == 0o644)


@T.test
def group_readable_token_file_warns(srv):
    """The group is other users too (only the world bit
    was checked); an owner-only file gets no warning."""
    for mode, warned in ((0o640, True), (0o440, True), (0o604, True), (0o600, False),
                         (0o400, False)):
        path = token_file(TOKEN + "\n", mode=mode, name="mode-%o" % mode)
        with Server(["--token-file", path], in_memory=True) as s:
            check(readable_warning(s) == warned, "mode %o: warning %s, wanted %s",
                  mode, readable_warning(s), warned)


def main():
    try:
        T.run(None)
    finally:
        import shutil
        shutil.rmtree(TMP, ignore_errors=True)


if __name__ == "__main__":
    main()
