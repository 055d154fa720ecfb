"""The cluster's promises checked as Jepsen checks them: a recorded
history of concurrent operations under faults, judged by a model
(tests/integration/history_check.py; its own tests:
test_history_check.py).

Why: Jepsen's analysis of NATS 2.12.1 (December 2025) found that JetStream
can lose acknowledged messages, and keep a split brain, after an OS crash of
one node combined with pauses or partitions, or after a coordinated power
loss, because it flushes to disk every two minutes by default; Debian 12's
nats-server 2.9.10 has no per-write sync. neardup's replicas lean on
JetStream for "an acknowledged registration is never lost" and "of two
near-duplicates, exactly one original". proto/replication.md says what that
leaves (an OS crash or power loss is not simulated here: kill -9 of a
process keeps the page cache).

Set-up (tests/integration/cluster.py): 3 nats-servers (Debian's 2.9), 3
neardupd nodes with fsync on (nd-i on n-i only), HAProxy with the shipped
deploy/haproxy/haproxy-replicas.cfg in front. n3 runs in a network
namespace of its own (`ip netns add`, a veth pair 10.231.A.1/30 -
10.231.A.2/30 made by the test: A from the test's pid), its client,
monitoring and route ports on 10.231.A.2; n1 and n2 keep their client and
monitoring ports on 127.0.0.1 and listen for routes on 10.231.A.1 (the veth's
end in the test's namespace). nd-3 reaches n3 over the veth. Without root
(or `ip`, or veth) the namespace cannot be made: every server stays on
127.0.0.1 and the partition is skipped, said in the output.

Clients (6 threads: 3 through HAProxy, 1 directly on each node; a new
connection per operation, each bounded by REQ_S) run, with 20-50 ms
between operations:
- registrations of race groups: an article of random words of the shipped
  texts (English ~650-820 characters, every fourth group Chinese ~330-350)
  and 2 near-duplicate variants of it (3 words/characters changed each),
  each member registered once with its own id, two groups open at a time
  so that members of one group race on different threads and nodes;
- checks at the latest state (`"consistency": "latest"`) of a member of a
  group whose registrations were sent;
- claim documents (unrelated articles): registered (again with the same id
  and text until acknowledged), then policy PUTs (`reprint` allow or forbid
  and a whitelist of one account, a tag unique to the operation), revokes,
  restores (`POST /documents/{id}/revoke`, `/restore`), and a DELETE at the
  end of some.
Every operation is recorded: invoke and complete (monotonic), arguments,
result: ok (200), fail (a 4xx, or the connection refused before anything
was sent), info (indeterminate: a timeout, a lost connection, any 5xx).

Nemesis (main thread), in an order shuffled per run, each followed by a
recovery (every node /readyz 200, the live NATS servers agreeing on a
stream leader; bounded) and GAP_S of quiet:
- partition: n3 cut from n1 and n2 for PART_S (12 s, over JetStream's 4-9 s
  election timeout): iptables rules inside n3's namespace (its own
  tables, not the machine's) drop every packet on its veth end except those
  of its client and monitoring ports, so nd-3 still talks to n3 (a node on
  the minority side) and the test still reads n3's /jsz; routes between n3
  and its peers are silent, both ways. Healed by flushing those rules; the
  namespace goes at the end (its processes first).
- kill-nats: kill -9 of the NATS server leading the stream, restarted
  on its store KILL_NATS_S (3 s) later;
- pause-nats: SIGSTOP of the NATS server leading the stream for PAUSE_S
  (12 s), then SIGCONT;
- kill-node: kill -9 of the node HAProxy writes to (nd-1 when ready),
  restarted on its directory 2 s later;
- pause-node: SIGSTOP of that node for PAUSE_NODE_S (8 s: longer than the
  webhook deliverer's 5 s lease and HAProxy's check), then SIGCONT: the
  requests it held are answered, or time out, late.
Then everything is healed (SIGCONT, rules flushed, every process running),
the clients stop, the nodes converge (same applied_seq, digest), and each
node's records of every id used and its whole event feed are read: the
history's "final". history_check.check_history() judges it (four rules:
acked registrations kept; one original per group, the real-time earliest;
deletes and claim changes never undone; the same feed on every node).

A run whose NATS servers end with copies of the stream that differ, or
whose stream lost entries a node had applied (the node then refuses to
start: Nemesis.restart_node), is counted inconclusive (printed, logs kept; exit 77 when no run was judged)
unless ND_HISTORY_STRICT=1 (see STRICT below).

Bounded: one run is 65-110 s on 2 cores (about a minute of workload; up
to ~3 min when a node stops in replica_failed or the nodes do not converge); HISTORY_RUNS (1) runs in a row,
each with its own cluster. Every process is stopped by the test itself, on
failure too (SIGTERM from meson included). Timeouts times 3 when the node
is an ASan build (as test_badinput does). ND_HISTORY_JSON=PATH writes each
run's history (PATH, or PATH with .N before the extension for run N > 1):
`python3 tests/integration/history_check.py PATH [--tamper KIND]` judges it
again. ND_HISTORY_SEED fixes the texts and the fault order; ND_KEEP_TMP=1
keeps the logs (a failed run keeps them anyway, and says where). Skipped (77) without nats-server or haproxy."""

import http.client
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import HOST, ThreadGroup, check, feed_events  # noqa: E402
from cluster import (ReplicaCluster, article, near_duplicate,  # noqa: E402
                     replica_state, wait_converged)
import history_check  # noqa: E402

RUNS = int(os.environ.get("HISTORY_RUNS", "1"))
SEED = int(os.environ.get("ND_HISTORY_SEED", str(int(time.time() * 1000) % 1000000)))
OUT = os.environ.get("ND_HISTORY_JSON")
# A run whose NATS servers end with copies of the stream that differ (a
# JetStream split brain, nats-server 2.9.10: proto/replication.md, "Faults:
# what holds") is reported as such and counted inconclusive, not failed,
# unless ND_HISTORY_STRICT=1: neardupd cannot be judged on a log that is not
# one log. Every other violation fails the run.
STRICT = os.environ.get("ND_HISTORY_STRICT") == "1"
# Each fault waits for the NATS cluster to have settled after the one before
# (Nemesis.settled()); ND_HISTORY_OVERLAP=1 lets the next fault start once
# the nodes are ready, with a server maybe still rejoining: how the
# divergence of proto/replication.md's "What it found" 3 was found.
OVERLAP = os.environ.get("ND_HISTORY_OVERLAP") == "1"
PART_S = 12.0        # partition: over JetStream's election timeout (4-9 s)
PAUSE_S = 12.0       # SIGSTOP of a NATS server: the same
PAUSE_NODE_S = 8.0   # SIGSTOP of a node: over the 5 s lease and HAProxy's checks
KILL_NATS_S = 3.0    # down time of a NATS server killed
KILL_NODE_S = 2.0
GAP_S = 2.0          # quiet between faults, after recovery
RECOVER_S = 60.0     # recovery bound (JetStream's elections: up to ~18 s, more when loaded)
REQ_S = 5.0          # a client gives up on an operation (indeterminate)
THINK_S = (0.02, 0.05)
MEMBERS = 3          # per race group: the original and 2 variants
OPEN_GROUPS = 2
LIVE_CLAIMS = 8
FAULTS = ("partition", "kill-nats", "pause-nats", "kill-node", "pause-node")


def sanitized(pid):
    try:
        with open("/proc/%d/maps" % pid) as f:
            maps = f.read()
    except OSError:
        return False
    return "libasan" in maps or "libclang_rt.asan" in maps


# -- n3's network namespace --

def ip(*args, ns=None, check_rc=True):
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    if check_rc and r.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(cmd), r.stderr.strip()))
    return r


def sweep_namespaces():
    """Removes ndh-PID namespaces left by a test process that is gone (one
    killed with SIGKILL cannot clean up)."""
    r = ip("ip", "netns", "list", check_rc=False)
    for line in r.stdout.splitlines():
        m = re.match(r"^(ndh-(\d+)-\d+)\b", line)
        if m and not os.path.exists("/proc/%s" % m.group(2)):
            ip("ip", "netns", "del", m.group(1), check_rc=False)


class Netns:
    """A network namespace with a veth pair to this one: ours 10.231.A.1/30,
    its 10.231.A.2/30. make() returns self, or None when it cannot be made
    (not root, no ip, no veth): the partition is then skipped."""

    def __init__(self, run):
        self.name = "ndh-%d-%d" % (os.getpid(), run)
        a = (os.getpid() * 7 + run) % 250 + 1
        self.outer, self.inner = "10.231.%d.1" % a, "10.231.%d.2" % a
        self.if_out, self.if_in = "ndh%da" % (os.getpid() % 100000), "ndh%db" % (
            os.getpid() % 100000)
        self.made = False
        self.cut = False

    def make(self):
        if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("iptables") is None:
            return None
        try:
            sweep_namespaces()
            ip("ip", "netns", "add", self.name)
            self.made = True
            ip("ip", "link", "add", self.if_out, "type", "veth", "peer", "name", self.if_in,
               "netns", self.name)
            ip("ip", "addr", "add", self.outer + "/30", "dev", self.if_out)
            ip("ip", "link", "set", self.if_out, "up")
            ip("ip", "addr", "add", self.inner + "/30", "dev", self.if_in, ns=self.name)
            ip("ip", "link", "set", self.if_in, "up", ns=self.name)
            ip("ip", "link", "set", "lo", "up", ns=self.name)
            ip("iptables", "-S", ns=self.name)
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
            print("  (no network namespace: %s; the partition is skipped)" % e)
            self.remove()
            return None
        return self

    def partition(self, keep_ports):
        """Drops every packet on n3's veth end but those of keep_ports (its
        client and monitoring ports), both ways."""
        ports = ",".join(str(p) for p in keep_ports)
        for chain, d, opt in (("INPUT", "-i", "--dports"), ("OUTPUT", "-o", "--sports")):
            ip("iptables", "-A", chain, d, self.if_in, "-p", "tcp", "-m", "multiport", opt,
               ports, "-j", "ACCEPT", ns=self.name)
            ip("iptables", "-A", chain, d, self.if_in, "-j", "DROP", ns=self.name)
        self.cut = True

    def heal(self):
        if self.made:
            ip("iptables", "-F", "INPUT", ns=self.name, check_rc=False)
            ip("iptables", "-F", "OUTPUT", ns=self.name, check_rc=False)
        self.cut = False

    def remove(self):
        if self.made:
            ip("ip", "netns", "del", self.name, check_rc=False)
            self.made = False
        ip("ip", "link", "del", self.if_out, check_rc=False)


# -- the workload --

class Workload:
    """The operations the clients draw (under a lock), and the history."""

    def __init__(self, seed, run):
        self.rng = random.Random("%s-%s" % (seed, run))
        self.lock = threading.Lock()
        self.ops = []
        self.groups = {}
        self.texts = {}      # doc -> text
        self.open = []       # race groups: [group, [members not yet sent]]
        self.closed = []     # race groups whose members were all sent
        self.claims = {}     # doc -> "new" | "live" | "done"
        self.n_groups = 0
        self.n_claims = 0
        self.n_tags = 0
        self.t0 = time.monotonic()

    def _new_group(self):
        g = "g%d" % self.n_groups
        lang = "zh" if self.n_groups % 4 == 3 else "en"
        self.n_groups += 1
        base = article("hist-%d-%s" % (SEED, g), lang)
        texts = [base] + [near_duplicate(base, "%d-%s-%d" % (SEED, g, k), 3, lang)
                          for k in range(1, MEMBERS)]
        ids = ["%s-m%d" % (g, k) for k in range(MEMBERS)]
        for d, t in zip(ids, texts):
            check(len(t) >= 300, "%s: %d characters", d, len(t))
            self.texts[d] = t
        self.groups[g] = {"kind": "race", "members": ids}
        order = ids[:]
        self.rng.shuffle(order)
        self.open.append([g, order])

    def _new_claim(self):
        d = "c%d" % self.n_claims
        self.n_claims += 1
        self.texts[d] = article("hist-claim-%d-%s" % (SEED, d), "en")
        self.groups[d] = {"kind": "claim", "members": [d]}
        self.claims[d] = "new"
        return d

    def next_op(self):
        """(f, group, doc, value) of the next operation."""
        with self.lock:
            rng = self.rng
            r = rng.random()
            if r < 0.40:
                while len(self.open) < OPEN_GROUPS:
                    self._new_group()
                grp = self.open[rng.randrange(len(self.open))]
                d = grp[1].pop()
                if not grp[1]:
                    self.open.remove(grp)
                    self.closed.append(grp[0])
                return "register", grp[0], d, None
            if r < 0.55 and self.closed:
                g = self.closed[-1 - rng.randrange(min(20, len(self.closed)))]
                return "check", g, rng.choice(self.groups[g]["members"]), None
            new = [d for d, s in self.claims.items() if s == "new"]
            live = [d for d, s in self.claims.items() if s == "live"]
            if new and (not live or rng.random() < 0.3):
                d = rng.choice(new)
                return "register", d, d, None
            if len(live) + len(new) < LIVE_CLAIMS:
                d = self._new_claim()
                return "register", d, d, None
            d = rng.choice(live)
            r = rng.random()
            if r < 0.06:
                self.claims[d] = "done"
                return "delete", d, d, None
            if r < 0.55:
                self.n_tags += 1
                return "policy", d, d, {"reprint": rng.choice(("allow", "forbid")),
                                         "tag": "t%d" % self.n_tags}
            return ("revoke" if r < 0.78 else "restore"), d, d, None

    def record(self, op):
        with self.lock:
            op["index"] = len(self.ops)
            self.ops.append(op)
            if (op["f"] == "register" and op["type"] == "ok"
                    and self.claims.get(op["doc"]) == "new"):
                self.claims[op["doc"]] = "live"


def request_of(w, f, doc, value):
    """(method, path, body or None) of an operation."""
    if f == "register":
        return "POST", "/check-original", {"id": doc, "text": w.texts[doc], "register": True}
    if f == "check":
        return "POST", "/check-original", {"text": w.texts[doc], "consistency": "latest"}
    if f == "delete":
        return "DELETE", "/documents/" + doc, None
    if f == "policy":
        return "PUT", "/documents/%s/policy" % doc, {
            "reprint": value["reprint"], "whitelist": [{"account": value["tag"]}]}
    return "POST", "/documents/%s/%s" % (doc, f), None


def summary(f, body):
    """What the checker reads of a 200's body."""
    if not isinstance(body, dict):
        return {}
    if f in ("register", "check"):
        return {"original": body.get("original"), "registered": body.get("registered"),
                "simhash": body.get("simhash"),
                "matches": [m.get("id") for m in body.get("matches") or []]}
    if f in ("revoke", "restore"):
        return {"status": body.get("status")}
    if f == "delete":
        return {"deleted": body.get("deleted")}
    return {"reprint": body.get("reprint")}


class Clients(ThreadGroup):
    def __init__(self, cl, w, req_s):
        self.targets = ["ha", "ha", "ha", 0, 1, 2]
        super().__init__(len(self.targets))
        self.cl, self.w, self.req_s = cl, w, req_s

    def port(self, target):
        return self.cl.haproxy.port if target == "ha" else self.cl.nodes[target].port

    def run(self, k):
        target = self.targets[k]
        rng = random.Random("%s-client-%d" % (SEED, k))
        while not self.stop.is_set():
            f, group, doc, value = self.w.next_op()
            method, path, body = request_of(self.w, f, doc, value)
            op = {"process": k, "f": f, "group": group, "doc": doc, "value": value,
                  "target": "ha" if target == "ha" else self.cl.name(target)}
            data = json.dumps(body).encode() if body is not None else None
            hdrs = {"Content-Type": "application/json"} if data is not None else {}
            conn = http.client.HTTPConnection(HOST, self.port(target), timeout=self.req_s)
            op["invoke"] = time.monotonic()
            try:
                try:
                    conn.connect()
                except OSError as e:
                    op.update(type="fail", status=None, error="connect: %r" % e)
                else:
                    conn.request(method, path, body=data, headers=hdrs)
                    resp = conn.getresponse()
                    raw = resp.read()
                    op["status"] = resp.status
                    op["served_by"] = resp.getheader("X-Served-By")
                    try:
                        parsed = json.loads(raw) if raw else None
                    except ValueError:
                        parsed = None
                    if resp.status == 200:
                        op.update(type="ok", result=summary(f, parsed))
                    else:
                        op["type"] = "info" if resp.status >= 500 else "fail"
                        err = (parsed or {}).get("error") if isinstance(parsed, dict) else None
                        op["error"] = (err or {}).get("code") if isinstance(err, dict) \
                            else raw[:120].decode("utf-8", "replace")
            except (OSError, http.client.HTTPException) as e:
                op.update(type="info", status=None, error=repr(e)[:160])
            finally:
                conn.close()
            op["complete"] = time.monotonic()
            self.w.record(op)
            self.stop.wait(rng.uniform(*THINK_S))


# -- the nemesis --

class Nemesis:
    def __init__(self, cl, netns, slow, log):
        self.cl, self.netns, self.slow, self.log = cl, netns, slow, log

    def note(self, fault, phase, **kw):
        rec = dict(t=time.monotonic(), fault=fault, phase=phase, **kw)
        self.log.append(rec)
        print("  %7.2fs %s %s %s" % (rec["t"] - self.log[0]["t"] if self.log else 0.0, fault,
                                     phase, " ".join("%s=%s" % kv for kv in sorted(kw.items()))),
              flush=True)

    def leader(self):
        name, _ = self.cl.nats.agreed_leader(self.cl.stream)
        return self.cl.nats.by_name(name) if name else None

    def writer(self):
        """The node HAProxy's writer backend sends changes to: the first
        ready one."""
        for i, srv in enumerate(self.cl.nodes):
            try:
                if srv.json("GET", "/readyz", timeout=2)[0] == 200:
                    return i
            except (OSError, http.client.HTTPException):
                pass
        return 0

    def settled(self):
        """Whether the stream's leader, named by all three NATS servers,
        hears from both followers (current, heard from within 2 s)."""
        lead = self.leader()
        if lead is None or len(self.cl.nats.live()) < len(self.cl.nats.servers):
            return False
        sd = self.cl.nats._stream_detail(lead, self.cl.stream) or {}
        reps = (sd.get("cluster") or {}).get("replicas") or []
        return (len(reps) == len(self.cl.nats.servers) - 1 and
                all(r.get("current") and not r.get("offline") and
                    (r.get("active") or 0) < 2e9 for r in reps))

    def recover(self, why):
        """Waits (bounded) for every node ready and a stream leader and, but
        with ND_HISTORY_OVERLAP=1, for the NATS cluster settled (settled():
        the next fault does not fall on a server still rejoining); returns
        the seconds it took, or None at the bound (noted, not fatal here:
        the final convergence decides)."""
        t0 = time.monotonic()
        deadline = t0 + RECOVER_S * self.slow
        while time.monotonic() < deadline:
            ready, failed = 0, []
            for i, srv in enumerate(self.cl.nodes):
                try:
                    st, body = srv.json("GET", "/readyz", timeout=2)
                except (OSError, http.client.HTTPException):
                    continue
                ready += st == 200
                if "replica_failed" in json.dumps(body):
                    failed.append(self.cl.name(i))
            if failed:  # never ready again without an operator
                self.note(why, "replica-failed", nodes=",".join(failed))
                return None
            if ready == len(self.cl.nodes) and (self.settled() if not OVERLAP
                                                else self.leader() is not None):
                dt = time.monotonic() - t0
                self.note(why, "recovered", secs="%.2f" % dt)
                return dt
            time.sleep(0.25)
        self.note(why, "not-recovered", secs="%.0f" % (RECOVER_S * self.slow))
        return None

    def partition(self):
        if self.netns is None:
            self.note("partition", "skipped", why="no network namespace")
            return
        n3 = self.cl.nats.servers[2]
        lead = self.leader()
        self.note("partition", "start", server=n3.name, stream_leader=lead and lead.name)
        self.netns.partition([n3.port, n3.mon_port])
        time.sleep(PART_S)
        self.netns.heal()
        self.note("partition", "healed")

    def kill_nats(self):
        s = self.leader() or self.cl.nats.servers[0]
        self.note("kill-nats", "start", server=s.name)
        s.kill9()
        time.sleep(KILL_NATS_S)
        s.start()
        self.note("kill-nats", "restarted", server=s.name)

    def pause_nats(self):
        s = self.leader() or self.cl.nats.servers[0]
        self.note("pause-nats", "start", server=s.name)
        s.sigstop()
        try:
            time.sleep(PAUSE_S)
        finally:
            s.sigcont()
        self.note("pause-nats", "resumed", server=s.name)

    def kill_node(self):
        i = self.writer()
        self.note("kill-node", "start", node=self.cl.name(i))
        self.cl.nodes[i].kill()
        time.sleep(KILL_NODE_S)
        self.restart_node(i)
        self.note("kill-node", "restarted", node=self.cl.name(i))

    def pause_node(self):
        i = self.writer()
        self.note("pause-node", "start", node=self.cl.name(i))
        self.cl.nodes[i].signal(signal.SIGSTOP)
        try:
            time.sleep(PAUSE_NODE_S)
        finally:
            self.cl.nodes[i].signal(signal.SIGCONT)
        self.note("pause-node", "resumed", node=self.cl.name(i))

    def heal_all(self):
        """Everything back: rules flushed, every process continued and
        running (a start that fails is raised)."""
        if self.netns is not None:
            self.netns.heal()
        for s in self.cl.nats.servers:
            s.sigcont()
            if not s.running():
                s.start()
        for i, srv in enumerate(self.cl.nodes):
            srv.signal(signal.SIGCONT)
            if srv.proc is None or srv.proc.poll() is not None:
                self.restart_node(i)

    def restart_node(self, i):
        """Starts node i again (bounded by RECOVER_S). A node that refuses
        to start because the stream now ends before the entries it applied
        (they were acknowledged by a JetStream quorum, then lost: the
        nats-server 2.9.10 fault of proto/replication.md, "Faults: what
        holds") ends the run inconclusive, not failed, unless
        ND_HISTORY_STRICT=1: refusing is what it must do there."""
        srv = self.cl.nodes[i]
        srv.start_timeout = RECOVER_S * self.slow
        try:
            self.cl.restart_node(i)
        except RuntimeError as e:
            if STRICT or "but the stream ends at" not in str(e):
                raise
            self.note("restart", "stream-behind-node", node=self.cl.name(i))
            raise Inconclusive("node %s refuses the stream: it applied entries the stream no "
                               "longer holds (JetStream lost acknowledged entries); NATS "
                               "copies %s" % (self.cl.name(i), json.dumps(
                                   nats_copies(self.cl, 10 * self.slow), sort_keys=True)))


# -- one run --

def nats_copies(cl, timeout):
    """{server: {"last_seq", "messages", "bytes"}} of each NATS server's copy
    of the stream, once all report the same last_seq (or at timeout): the
    copies of one stream hold the same messages, so the same byte count."""
    deadline = time.monotonic() + timeout
    while True:
        out = {}
        for s in cl.nats.servers:
            sd = cl.nats._stream_detail(s, cl.stream) or {}
            st = sd.get("state") or {}
            out[s.name] = {k: st.get(k) for k in ("first_seq", "last_seq", "messages", "bytes")}
        if len({v["last_seq"] for v in out.values()}) == 1 or time.monotonic() > deadline:
            return out
        time.sleep(0.25)


def final_reads(cl, w, slow):
    final = {}
    ids = sorted(w.texts)
    for i, srv in enumerate(cl.nodes):
        docs = {}
        conn = srv.connect(timeout=10 * slow)
        try:
            for d in ids:
                conn.request("GET", "/documents/" + d)
                resp = conn.getresponse()
                raw = resp.read()
                check(resp.status in (200, 404), "final GET /documents/%s on %s: %s %r", d,
                      cl.name(i), resp.status, raw[:200])
                docs[d] = json.loads(raw) if resp.status == 200 else None
        finally:
            conn.close()
        final[cl.name(i)] = {"docs": docs, "events": feed_events(srv)}
    return final


def out_path(run):
    if not OUT:
        return None
    if RUNS == 1 or run == 1:
        return OUT
    base, ext = os.path.splitext(OUT)
    return "%s.%d%s" % (base, run, ext)


def one_run(run):
    t_run = time.monotonic()
    netns = Netns(run).make()
    placement = None
    if netns is not None:
        placement = [{"route_host": netns.outer}, {"route_host": netns.outer},
                     {"host": netns.inner, "netns": netns.name}]
    cl = None
    ok = False
    try:
        cl = ReplicaCluster(n=3, haproxy=True, sync=True, nats_placement=placement,
                            tmp_prefix="neardup-history-")
        cl.start()
        slow = 3.0 if sanitized(cl.nodes[0].proc.pid) else 1.0
        print("run %d: seed %d, %s; cluster up in %.1fs%s" % (
            run, SEED, "n3 in namespace %s (%s)" % (netns.name, netns.inner) if netns
            else "no namespace", time.monotonic() - t_run, ", ASan: timeouts x3"
            if slow > 1 else ""), flush=True)
        w = Workload(SEED, run)
        clients = Clients(cl, w, REQ_S * slow)
        log = []
        nem = Nemesis(cl, netns, slow, log)
        order = list(FAULTS)
        random.Random("%s-faults-%s" % (SEED, run)).shuffle(order)
        nem.note("workload", "start", faults=",".join(order))
        clients.start()
        try:
            time.sleep(3.0)
            for fault in order:
                getattr(nem, fault.replace("-", "_"))()
                nem.recover(fault)
                time.sleep(GAP_S)
        finally:
            try:
                nem.heal_all()
            finally:
                clients.finish(timeout=REQ_S * slow + 15)
        nem.note("workload", "stopped", ops=len(w.ops))
        names = [cl.name(i) for i in range(3)]
        # Nodes that do not converge are judged all the same: the checker
        # says what differs, and the history is kept.
        diverged = None
        try:
            states = wait_converged(cl.nodes, RECOVER_S * slow, names)
        except AssertionError as e:
            diverged = str(e)
            print("  NOT CONVERGED: %s" % diverged, flush=True)
            states = [replica_state(n) for n in cl.nodes]
        nats = nats_copies(cl, 30 * slow)
        final = final_reads(cl, w, slow)
        history = {
            "meta": {"run": run, "seed": SEED, "seconds": round(time.monotonic() - t_run, 1),
                     "partition": "netns+iptables" if netns else "skipped",
                     "converged": diverged is None,
                     "stream_seq": states[0]["stream_seq"], "digest": states[0]["digest"]},
            "replicas": {nm: st for nm, st in zip(names, states)},
            "nats": nats,
            "groups": w.groups, "ops": w.ops, "nemesis": log, "final": final}
        path = out_path(run)
        if path:
            with open(path, "w") as f:
                json.dump(history, f)
        verdict = history_check.check_history(history)
        print(history_check.format_verdict(verdict))
        acked = sum(1 for op in w.ops if op["f"] == "register" and op["type"] == "ok")
        kinds = {op["f"] for op in w.ops if op["type"] == "ok"}
        races = sum(1 for g in w.groups.values() if g["kind"] == "race")
        print("run %d: %.1fs, %d ops (%d registrations acknowledged, %d race groups), stream "
              "seq %s, %d events%s" % (run, time.monotonic() - t_run, len(w.ops), acked, races,
                                       states[0]["stream_seq"],
                                       len(final[names[0]]["events"]),
                                       ", history in " + path if path else ""), flush=True)
        copies = {json.dumps(v, sort_keys=True) for v in nats.values()}
        if len(copies) > 1 and not STRICT and (not verdict["valid"] or diverged):
            raise Inconclusive("run %d (seed %d): the NATS servers' copies of the stream differ "
                               "(%s): JetStream diverged, the checker's verdict above is about "
                               "that log%s" % (run, SEED, json.dumps(nats, sort_keys=True),
                                               "; history in " + path if path else ""))
        check(verdict["valid"], "run %d: the checker rejects the history (seed %d)%s", run,
              SEED, "; it is in " + path if path else " (set ND_HISTORY_JSON to keep it)")
        check(diverged is None, "run %d: %s", run, diverged)
        check(acked >= 20 and kinds >= {"register", "check", "policy", "revoke", "restore"},
              "run %d: too little acknowledged to judge: %d registrations, kinds %s", run,
              acked, sorted(kinds))
        ok = True
    finally:
        kept = os.environ.get("ND_KEEP_TMP")
        if not ok and kept is None:
            os.environ["ND_KEEP_TMP"] = "1"  # the logs of every process, for the report
        try:
            if cl is not None:
                cl.cleanup(ok)
        finally:
            if kept is None:
                os.environ.pop("ND_KEEP_TMP", None)
            if netns is not None:
                netns.remove()
    return time.monotonic() - t_run


class Inconclusive(Exception):
    pass


def _sigterm(signum, frame):
    raise SystemExit("SIGTERM")  # the finally blocks stop every process


if __name__ == "__main__":
    missing = [p for p in ("nats-server", "haproxy") if shutil.which(p) is None]
    if missing:
        print("SKIP: %s not installed (deploy/install-deps.sh --test installs it)"
              % " and ".join(missing))
        sys.exit(77)
    signal.signal(signal.SIGTERM, _sigterm)
    times, inconclusive = [], []
    for run in range(1, RUNS + 1):
        try:
            times.append(one_run(run))
        except Inconclusive as e:
            print("INCONCLUSIVE %s" % e, flush=True)
            inconclusive.append(run)
        except Exception:  # noqa: BLE001 - reported, then the exit code
            import traceback
            traceback.print_exc()
            print("FAIL test_history run %d of %d (seed %d; %d passed before)" % (
                run, RUNS, SEED, len(times)), flush=True)
            sys.exit(1)
    print("test_history: %d of %d runs passed, %s s each; %d inconclusive (JetStream "
          "diverged: %s)" % (len(times), RUNS, ", ".join("%.0f" % t for t in times),
                             len(inconclusive), inconclusive or "none"))
    if not times:
        sys.exit(77)  # nothing judged: every run's log diverged
