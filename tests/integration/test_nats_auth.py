"""A replicated node authenticates to NATS from a file, its credentials are
never logged, and only the nodes may write to the stream (audit F10).

One nats-server on loopback with the authorization block of the shipped
deploy/nats/nats-server.conf (its users, passwords and permissions), a
single JetStream stream of one replica.

- password_file: a node with --nats-user neardup-node and
  --nats-password-file starts, registers through the stream; the password
  is in neither its log nor its command line.
- url_credentials_redacted: credentials inside the --nats URL still work,
  are warned about, and every log line shows user:***@.
- wrong_password: start-up fails at once with a clear reason (NATS refused
  the credentials); a missing password file and --nats-password too.
- others_cannot_publish: a client without the nodes' credentials (none, a
  wrong password, the nodes' user name with another password) cannot
  connect and so cannot publish to neardup.changes (plain NATS protocol over
  a socket: CONNECT, PUB, PING -> -ERR); the stream is unchanged.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HOST, SOURCE_ROOT, Server, check, free_port,  # noqa: E402
                     load_texts, neardupd_path)

NODE_USER = "neardup-node"
NODE_PASSWORD = "n0de-Pa55-" + "x7Qz" * 6
ADMIN_PASSWORD = "adm1n-Pa55-" + "k3Wv" * 6
STREAM = "neardup"  # the shipped permissions name its subject, neardup.changes
NATS_CONF = os.path.join(SOURCE_ROOT, "deploy", "nats", "nats-server.conf")


def shipped_authorization():
    """The authorization { ... } block of the shipped NATS configuration."""
    with open(NATS_CONF) as f:
        text = f.read()
    m = re.search(r"^authorization\s*\{", text, re.M)
    check(m, "no authorization block in %s", NATS_CONF)
    depth, i = 0, m.end() - 1
    while True:
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[m.start():i + 1]
        i += 1


class Nats:
    def __init__(self, tmp):
        self.port, self.mon = free_port(), free_port()
        self.dir = os.path.join(tmp, "nats")
        os.makedirs(self.dir)
        self.conf = os.path.join(self.dir, "nats.conf")
        with open(self.conf, "w") as f:
            f.write("server_name: nats-auth-test\nlisten: %s:%d\nhttp: %s:%d\n"
                    "jetstream {\n  store_dir: \"%s\"\n  max_memory_store: 64MB\n"
                    "  max_file_store: 256MB\n}\n%s\n"
                    % (HOST, self.port, HOST, self.mon, os.path.join(self.dir, "js"),
                       shipped_authorization()))
        self.log = open(os.path.join(self.dir, "nats.log"), "wb")
        env = dict(os.environ, NATS_NODE_PASSWORD=NODE_PASSWORD, NATS_ADMIN_PASSWORD=ADMIN_PASSWORD)
        self.proc = subprocess.Popen(["nats-server", "-c", self.conf], stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 15
        while True:
            check(self.proc.poll() is None, "nats-server exited: %s", self.log_text())
            try:
                socket.create_connection((HOST, self.port), timeout=1).close()
                break
            except OSError:
                check(time.monotonic() < deadline, "nats-server did not listen")
                time.sleep(0.05)

    @property
    def url(self):
        return "nats://%s:%d" % (HOST, self.port)

    def log_text(self):
        with open(os.path.join(self.dir, "nats.log"), "rb") as f:
            return f.read().decode("utf-8", "replace")[-3000:]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


def nats_session(port, connect, publish=None, timeout=5.0):
    """Speaks the NATS text protocol: INFO, CONNECT connect (a dict), an
    optional PUB (subject, payload bytes), PING; returns every line the
    server sent until PONG, an -ERR, or the connection closing."""
    s = socket.create_connection((HOST, port), timeout=timeout)
    try:
        f = s.makefile("rb")
        info = f.readline()
        check(info.startswith(b"INFO "), "no INFO: %r", info)
        out = [info.decode().strip()]
        msg = b"CONNECT " + json.dumps(dict(connect, verbose=False, pedantic=False,
                                            protocol=1, name="probe")).encode() + b"\r\n"
        if publish:
            subject, payload = publish
            msg += b"PUB %s %d\r\n%s\r\n" % (subject.encode(), len(payload), payload)
        s.sendall(msg + b"PING\r\n")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = f.readline()
            if not line:
                break
            line = line.decode("utf-8", "replace").strip()
            out.append(line)
            if line == "PONG" or line.startswith("-ERR"):
                break
        return out
    finally:
        s.close()


def node_args(nats, name, extra=()):
    return ["--nats", nats.url, "--stream", STREAM, "--stream-replicas", "1", "--node-name",
            name, "--nats-timeout-ms", "2000"] + list(extra)


def secret_file(tmp, name, text):
    path = os.path.join(tmp, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")
    return path


def fails_to_start(args, env=None, timeout=30):
    """Runs neardupd with args (in memory, port 0); it must exit non-zero
    within timeout. Returns its stderr."""
    cmd = [neardupd_path(), "--listen", "%s:0" % HOST, "--in-memory", "--threads", "1"] + args
    penv = {k: v for k, v in os.environ.items() if not k.startswith("NEARDUP_")}
    penv.update(env or {})
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=timeout, env=penv)
    check(p.returncode != 0, "neardupd started (exit %s):\n%s", p.returncode, p.stderr[-2000:])
    return p.stderr


def stream_seq(srv):
    status, body = srv.json("GET", "/replica")
    check(status == 200, "GET /replica: %s %r", status, body)
    return body["stream_seq"]


def password_file(tmp, nats, srv_box):
    path = secret_file(tmp, "nats-password", NODE_PASSWORD)
    srv = Server(node_args(nats, "n1", ["--nats-user", NODE_USER, "--nats-password-file", path]),
                 in_memory=True)
    srv.start()
    srv_box.append(srv)
    texts = load_texts()
    status, body = srv.json("POST", "/check-original",
                            {"id": "auth-1", "text": texts["en1"], "register": True})
    check(status == 200 and body.get("registered"), "registration: %s %r", status, body)
    check(stream_seq(srv) >= 1, "nothing in the stream")
    log = srv.log_text()
    check(NODE_PASSWORD not in log, "the password is in the log")
    check("user and password" in log, "the log does not say how it authenticated:\n%s", log)
    with open("/proc/%d/cmdline" % srv.proc.pid, "rb") as f:
        cmdline = f.read()
    check(NODE_PASSWORD.encode() not in cmdline, "the password is on the command line")


def url_credentials_redacted(tmp, nats):
    url = "nats://%s:%s@%s:%d" % (NODE_USER, NODE_PASSWORD, HOST, nats.port)
    args = node_args(nats, "n2")
    args[1] = url
    with Server(args, in_memory=True) as srv:
        check(stream_seq(srv) >= 0, "no stream")
        log = srv.log_text()
        check(NODE_PASSWORD not in log, "the password from the URL is in the log")
        check("%s:***@" % NODE_USER in log, "the URL is not shown redacted:\n%s", log[-3000:])
        check("carry credentials" in log, "no warning about credentials in the URL")
        with open("/proc/%d/cmdline" % srv.proc.pid, "rb") as f:
            cmdline = f.read()
        check(NODE_PASSWORD.encode() not in cmdline and b"%s:***" % NODE_USER.encode() in cmdline,
              "ps shows the password of the URL: %r", cmdline)


def wrong_password(tmp, nats):
    wrong = "wr0ng-Pa55-" + "q9Lm" * 6
    path = secret_file(tmp, "wrong-password", wrong)
    t0 = time.monotonic()
    err = fails_to_start(node_args(nats, "n3", ["--nats-user", NODE_USER,
                                                 "--nats-password-file", path]))
    took = time.monotonic() - t0
    check(wrong not in err, "the wrong password is in the log")
    check(re.search(r"cannot start the replica: cannot connect to NATS at nats://[^ ]+: "
                    r".*Authorization Violation.*refused this node's credentials", err),
          "no clear reason:\n%s", err[-2000:])
    check(took < 15, "a refused password took %.1f s to stop the start", took)
    print("  wrong password: exit after %.2f s: %s"
          % (took, [json.loads(l)["msg"] for l in err.splitlines()
                    if l.startswith("{") and "cannot start" in l][0]))
    err = fails_to_start(node_args(nats, "n3", ["--nats-user", NODE_USER,
                                                 "--nats-password-file",
                                                 os.path.join(tmp, "missing")]))
    check("cannot open the NATS password file" in err, "missing file:\n%s", err[-2000:])
    err = fails_to_start(node_args(nats, "n3", ["--nats-user", NODE_USER]))
    check("--nats-user needs its password" in err, "user without password:\n%s", err[-2000:])
    err = fails_to_start(node_args(nats, "n3", ["--nats-user", NODE_USER, "--nats-password",
                                                 wrong]))
    check("--nats-password is not accepted" in err and wrong not in err,
          "--nats-password:\n%s", err[-2000:])


def others_cannot_publish(nats, srv):
    before = stream_seq(srv)
    change = b'{"forged": true}'
    for what, connect in (("no credentials", {}),
                          ("a wrong password", {"user": NODE_USER, "pass": "nope-" * 4}),
                          ("a token", {"auth_token": NODE_PASSWORD}),
                          ("another user", {"user": "mallory", "pass": NODE_PASSWORD})):
        out = nats_session(nats.port, connect, publish=(STREAM + ".changes", change))
        check(any(l.startswith("-ERR") and "Authorization Violation" in l for l in out),
              "%s: %r", what, out)
        check("PONG" not in out, "%s: the server answered PING: %r", what, out)
    # The nodes' credentials do publish (the permission names the subject).
    out = nats_session(nats.port, {"user": NODE_USER, "pass": NODE_PASSWORD},
                       publish=("elsewhere.changes", b"x"))
    check(any("Permissions Violation" in l for l in out),
          "the nodes' user may publish outside the stream: %r", out)
    time.sleep(0.3)
    check(stream_seq(srv) == before, "the stream moved: %s -> %s", before, stream_seq(srv))


def main():
    if shutil.which("nats-server") is None:
        print("nats-server is not installed: skipped")
        sys.exit(77)
    tmp = tempfile.mkdtemp(prefix="nd-nats-auth-")
    nats = Nats(tmp)
    box = []
    try:
        t = time.monotonic()
        failed = 0
        for name, fn in (("password_file", lambda: password_file(tmp, nats, box)),
                         ("url_credentials_redacted", lambda: url_credentials_redacted(tmp, nats)),
                         ("wrong_password", lambda: wrong_password(tmp, nats)),
                         ("others_cannot_publish", lambda: others_cannot_publish(
                             nats, box[0] if box else None))):
            t0 = time.monotonic()
            try:
                check(name != "others_cannot_publish" or box, "no node (password_file failed)")
                fn()
            except Exception:  # noqa: BLE001 - reported, counted
                failed += 1
                import traceback
                print("FAIL %s (%.2fs)" % (name, time.monotonic() - t0), flush=True)
                traceback.print_exc()
            else:
                print("ok   %s (%.2fs)" % (name, time.monotonic() - t0), flush=True)
        print("nats_auth: %.1fs\n%d passed, %d failed" % (time.monotonic() - t, 4 - failed,
                                                            failed), flush=True)
    finally:
        for srv in box:
            srv.stop()
            srv.cleanup()
        nats.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
