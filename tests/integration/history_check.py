"""The checker of tests/integration/test_history.py: a recorded
history of concurrent operations on a replicated neardup, judged against
the cluster's promises the way Jepsen judges one. Pure Python, standard
library only; no process, no socket.

A history (a dict, as JSON) holds:

- "groups": {group: {"kind": "race" | "claim", "members": [doc ids]}}. A
  race group is an original and near-duplicate variants of it, each
  registered at most once, never deleted, revoked or restored. A claim
  group is one document, registered (and registered again with the same id
  and text until acknowledged), then changed: policy PUTs, revokes,
  restores, at most one delete at its end.
- "ops": [{"index", "process", "f", "group", "doc", "value", "target",
  "invoke", "complete", "type", "status", "result", "error"}]: f is
  register, check (a query with consistency latest), delete, policy,
  revoke or restore; invoke and complete are monotonic seconds; type is
  "ok" (acknowledged: 200), "fail" (it did not happen: a 4xx, or the
  connection was refused before anything was sent) or "info"
  (indeterminate: a timeout, a connection lost, any 5xx; it may take
  effect at any time after its invoke, or never). result keeps what the
  checker reads of the answer: original, registered, simhash, match ids.
  A policy op's value is {"reprint", "tag"}: the tag is the one account of
  its whitelist, unique per op, so the final policy names its write.
- "final": {node: {"docs": {id: record or null}, "events": [...]}}: each
  node's records of every id ever used and its whole event feed, read after
  every fault was healed and the nodes converged.

Rules (each a function returning a list of violations):

1. acked_registrations_kept: a registration answered 200 "registered":
   true is on every node at the end with the simhash it was answered
   with, unless a delete of it was acknowledged or is indeterminate.
2. one_original: in a group at most one member is registered at the end;
   at most one registration was answered original; an original answered
   is the member registered at the end; every acknowledged non-original
   answer names that member among its matches; that member's registration
   was invoked before every acknowledged registration of another member
   completed (the original is the real-time earliest among the
   acknowledged; indeterminate ones may or may not have happened); a check
   at the latest state invoked after an acknowledged registration of the
   group completed is not original and names that member.
3. changes_kept: an acknowledged delete leaves the document absent at
   the end (unless a registration of it is indeterminate or overlapped the
   delete); on a document present at the end (and not maybe registered
   anew after a delete: an indeterminate registration of a document that has
   a delete), the policy is the one written
   by a PUT that no acknowledged PUT followed in real time (never the
   initial one once a PUT was acknowledged, never one whose PUT failed, never
   a policy no PUT wrote), and its status (revoke: "revoked", restore:
   "active", registration: "active") likewise is the value of an op that
   no acknowledged op of the other value followed in real time.
4. same_feed: every node ends with the same event feed (event for event)
   and the same records; every acknowledged policy PUT is in the feed; when
   the history has "nats" ({server: {first_seq, last_seq, messages,
   bytes}} of each NATS server's copy of the stream), the copies agree.

CLI: python3 history_check.py HISTORY.json [--tamper KIND]
prints the verdict (exit 0 valid, 1 not, 2 unreadable); --tamper alters
the loaded history first, as a hand-made fault (KINDS below), to show the
checker rejecting it.
"""

import copy
import json
import sys

INF = float("inf")


class _Index:
    """The ops of a history by doc and by group, built once per check."""

    def __init__(self, history):
        self.history = history
        self.by_doc, self.by_group = {}, {}
        for op in history.get("ops", []):
            self.by_doc.setdefault(op.get("doc"), []).append(op)
            self.by_group.setdefault(op.get("group"), []).append(op)

    def ops(self, f=None, doc=None, group=None, types=None):
        if doc is not None:
            src = self.by_doc.get(doc, [])
        elif group is not None:
            src = self.by_group.get(group, [])
        else:
            src = self.history.get("ops", [])
        return [op for op in src
                if (f is None or op.get("f") == f)
                and (group is None or op.get("group") == group)
                and (types is None or op.get("type") in types)]


_CACHE = {}


def _ops(history, f=None, doc=None, group=None, types=None):
    idx = _CACHE.get(id(history))
    if idx is None or idx.history is not history:
        idx = _CACHE[id(history)] = _Index(history)
    return idx.ops(f, doc, group, types)


def _complete(op):
    """When op's effect is known to be over: its complete time if it was
    acknowledged; never (infinity) if indeterminate."""
    return op["complete"] if op.get("type") == "ok" else INF


def _result(op):
    return op.get("result") or {}


def _final_docs(history):
    return {node: (st.get("docs") or {}) for node, st in (history.get("final") or {}).items()}


def _short(op):
    return {k: op.get(k) for k in ("index", "f", "doc", "type", "invoke", "complete",
                                   "target", "status")}


# -- rule 1 --

def acked_registrations_kept(history):
    out = []
    finals = _final_docs(history)
    if not finals:
        return ["no final reads in the history"]
    for op in _ops(history, "register", types=("ok",)):
        if _result(op).get("registered") is not True:
            continue
        doc = op["doc"]
        if _ops(history, "delete", doc=doc, types=("ok", "info")):
            continue
        for node, docs in sorted(finals.items()):
            rec = docs.get(doc)
            if rec is None:
                out.append("%s: acknowledged registration of %s is missing (op %s)"
                           % (node, doc, _short(op)))
            elif _result(op).get("simhash") and rec.get("simhash") != _result(op)["simhash"]:
                out.append("%s: %s has simhash %s, acknowledged with %s" % (
                    node, doc, rec.get("simhash"), _result(op)["simhash"]))
    return out


# -- rule 2 --

def _winner(history, group, members, out):
    """The member registered at the end (the same on every node), or None."""
    winners = set()
    for node, docs in sorted(_final_docs(history).items()):
        present = sorted(m for m in members if docs.get(m) is not None)
        if len(present) > 1:
            out.append("%s: group %s has %d members registered: %s" % (
                node, group, len(present), present))
        winners.add(present[0] if len(present) == 1 else None)
    if len(winners) > 1:
        out.append("group %s: the nodes disagree on its original: %s" % (
            group, sorted(winners, key=str)))
        return None
    return winners.pop() if winners else None


def one_original(history):
    out = []
    for group, g in sorted((history.get("groups") or {}).items()):
        members = list(g.get("members") or [])
        regs = _ops(history, "register", group=group)
        acked = [op for op in regs if op.get("type") == "ok"]
        deleted = {op["doc"] for op in _ops(history, "delete", group=group, types=("ok", "info"))}
        w = _winner(history, group, members, out)
        answered = sorted({op["doc"] for op in acked if _result(op).get("original") is True})
        if len(answered) > 1:
            out.append("group %s: %d members were answered original: %s" % (
                group, len(answered), answered))
        for doc in answered:
            if doc != w and doc not in deleted:
                out.append("group %s: %s was answered original but %s is registered at the end"
                           % (group, doc, w))
        if w is None:
            if acked and not deleted:
                out.append("group %s: %d acknowledged registrations, none registered at the "
                           "end" % (group, len(acked)))
            continue
        # Non-original answers name the original of the group.
        for op in acked:
            res = _result(op)
            if res.get("original") is False and op["doc"] != w \
                    and w not in (res.get("matches") or []):
                out.append("group %s: %s was answered not original without naming %s (the "
                           "group's original) among its matches %s (op %s)" % (
                               group, op["doc"], w, res.get("matches"), op.get("index")))
        # The original's registration came first in real time.
        mine = [op for op in regs if op["doc"] == w and op.get("type") in ("ok", "info")
                and (op.get("type") == "info" or _result(op).get("registered") is True)]
        if not mine:
            out.append("group %s: %s is registered at the end, but no registration of it was "
                       "acknowledged as original or is indeterminate" % (group, w))
            continue
        first_inv = min(op["invoke"] for op in mine)
        for op in acked:
            if op["doc"] != w and op["complete"] < first_inv:
                out.append("group %s: %s is the original, but its registration (invoked at "
                           "%.3f) began after %s's acknowledged registration completed (%.3f; "
                           "op %s)" % (group, w, first_inv, op["doc"], op["complete"],
                                       op.get("index")))
        # Checks at the latest state after an acknowledged registration.
        if acked and w not in deleted:
            first_ack = min(op["complete"] for op in acked)
            for op in _ops(history, "check", group=group, types=("ok",)):
                if op["invoke"] <= first_ack:
                    continue
                res = _result(op)
                if res.get("original") is not False or w not in (res.get("matches") or []):
                    out.append("group %s: a latest check invoked at %.3f, after a registration "
                               "was acknowledged (%.3f), answered original=%s matches %s, not "
                               "naming %s (op %s)" % (group, op["invoke"], first_ack,
                                                      res.get("original"), res.get("matches"),
                                                      w, op.get("index")))
    return out


# -- rule 3 --

def _register_check(ops, final_value, initial, what):
    """A register's final value: the value of an op (ok or info; initial: a
    write acknowledged before any op) that no acknowledged op of another
    value followed in real time. ops: [(op, value)]. Returns a violation or
    None."""
    acked_other = [(op, v) for op, v in ops if op.get("type") == "ok" and v != final_value]
    cands = [(op, v) for op, v in ops if v == final_value and op.get("type") in ("ok", "info")]
    if initial is not None and initial == final_value:
        cands.append(({"type": "ok", "complete": -INF, "index": "initial"}, initial))
    if not cands:
        failed = [op.get("index") for op, v in ops if v == final_value]
        return "%s is %r at the end, which no acknowledged or indeterminate op wrote%s" % (
            what, final_value, " (failed ops %s did)" % failed if failed else "")
    for op, _ in cands:
        c = _complete(op) if op.get("index") != "initial" else -INF
        if not any(a["invoke"] > c for a, _ in acked_other):
            return None
    late = max(acked_other, key=lambda av: av[0]["invoke"])
    return ("%s is %r at the end, but the acknowledged op %s (%r, invoked at %.3f) followed "
            "every op that wrote %r in real time: it was undone" % (
                what, final_value, late[0].get("index"), late[1], late[0]["invoke"],
                final_value))


def _policy_value(rec):
    pol = (rec or {}).get("policy") or {}
    if not pol.get("explicit"):
        return ("default", None)
    wl = pol.get("whitelist") or []
    tag = wl[0].get("account") if len(wl) == 1 and isinstance(wl[0], dict) else repr(wl)
    return (pol.get("reprint"), tag)


def changes_kept(history):
    out = []
    finals = _final_docs(history)
    for group, g in sorted((history.get("groups") or {}).items()):
        for doc in g.get("members") or []:
            regs = _ops(history, "register", doc=doc)
            for dop in _ops(history, "delete", doc=doc, types=("ok",)):
                late_reg = [r for r in regs if r.get("type") == "info"
                            or (r.get("type") == "ok" and r["complete"] > dop["invoke"])]
                if late_reg:
                    continue
                for node, docs in sorted(finals.items()):
                    if docs.get(doc) is not None:
                        out.append("%s: %s was deleted (acknowledged, op %s) but is there at "
                                   "the end" % (node, doc, dop.get("index")))
            pol_ops = [(op, (op["value"]["reprint"], op["value"]["tag"]))
                       for op in _ops(history, "policy", doc=doc)]
            st_ops = [(op, "revoked") for op in _ops(history, "revoke", doc=doc)]
            st_ops += [(op, "active") for op in _ops(history, "restore", doc=doc)]
            if (_ops(history, "delete", doc=doc, types=("ok", "info"))
                    and any(r.get("type") == "info" for r in regs)):
                continue  # present at the end: maybe registered anew after its delete
            for node, docs in sorted(finals.items()):
                rec = docs.get(doc)
                if rec is None:
                    continue
                if pol_ops:
                    v = _register_check(pol_ops, _policy_value(rec), ("default", None),
                                        "%s: the policy of %s" % (node, doc))
                    if v:
                        out.append(v)
                if st_ops:
                    v = _register_check(st_ops, rec.get("status", "active"), "active",
                                        "%s: the status of %s" % (node, doc))
                    if v:
                        out.append(v)
    return out


# -- rule 4 --

def same_feed(history):
    out = []
    final = history.get("final") or {}
    nodes = sorted(final)
    if len(nodes) < 2:
        return ["fewer than two nodes in the final reads"]
    ref = nodes[0]
    ev0 = final[ref].get("events") or []
    for node in nodes[1:]:
        ev = final[node].get("events") or []
        if len(ev) != len(ev0):
            out.append("%s has %d events, %s %d" % (node, len(ev), ref, len(ev0)))
        for k, (a, b) in enumerate(zip(ev0, ev)):
            if a != b:
                out.append("event %d differs: %s %s, %s %s" % (
                    k, ref, json.dumps(a, sort_keys=True)[:300], node,
                    json.dumps(b, sort_keys=True)[:300]))
                break
        d0, d = final[ref].get("docs") or {}, final[node].get("docs") or {}
        diff = sorted(k for k in set(d0) | set(d) if d0.get(k) != d.get(k))
        if diff:
            out.append("%s and %s hold different records for %d ids, e.g. %s: %s / %s" % (
                ref, node, len(diff), diff[0], d0.get(diff[0]), d.get(diff[0])))
    copies = history.get("nats") or {}
    if len({json.dumps(v, sort_keys=True) for v in copies.values()}) > 1:
        out.append("the NATS servers' copies of the stream differ: %s" % json.dumps(
            copies, sort_keys=True))
    feed = json.dumps(ev0)
    for op in _ops(history, "policy", types=("ok",)):
        if json.dumps(op["value"]["tag"]) not in feed:
            out.append("the acknowledged policy PUT %s on %s (tag %s) is not in the feed" % (
                op.get("index"), op["doc"], op["value"]["tag"]))
    return out


RULES = [
    ("1 acked registrations kept", acked_registrations_kept),
    ("2 one original, the earliest", one_original),
    ("3 deletes and claim changes kept", changes_kept),
    ("4 same event feed on every node", same_feed),
]


def check_history(history):
    """{"valid": bool, "rules": [(name, [violations])], "stats": {...}}."""
    _CACHE.clear()
    try:
        rules = [(name, fn(history)) for name, fn in RULES]
    finally:
        _CACHE.clear()
    stats = {}
    for op in history.get("ops", []):
        key = "%s %s" % (op.get("f"), op.get("type"))
        stats[key] = stats.get(key, 0) + 1
    return {"valid": not any(v for _, v in rules), "rules": rules, "stats": stats}


def format_verdict(verdict, limit=10):
    lines = []
    for name, violations in verdict["rules"]:
        lines.append("%-36s %s" % (name, "ok" if not violations
                                   else "VIOLATED (%d)" % len(violations)))
        for v in violations[:limit]:
            lines.append("    " + v)
        if len(violations) > limit:
            lines.append("    ... %d more" % (len(violations) - limit))
    lines.append("ops: " + ", ".join("%s %d" % kv for kv in sorted(verdict["stats"].items())))
    lines.append("verdict: " + ("VALID" if verdict["valid"] else "INVALID"))
    return "\n".join(lines)


# -- hand-made faults, for the demonstration --

def _first_acked(h, f, pred=lambda op: True):
    for op in h["ops"]:
        if op["f"] == f and op["type"] == "ok" and pred(op):
            return op
    raise SystemExit("the history has no acknowledged %s to tamper with" % f)


def tamper(history, kind):
    """A copy of history with one fault injected into its recorded results."""
    h = copy.deepcopy(history)
    finals = h["final"]
    if kind == "drop-acked":
        # An acknowledged registration missing from one node's final read.
        deleted = {op["doc"] for op in h["ops"] if op["f"] == "delete"
                   and op["type"] in ("ok", "info")}
        op = _first_acked(h, "register", lambda o: (o.get("result") or {}).get("registered")
                          and o["doc"] not in deleted)
        node = sorted(finals)[-1]
        finals[node]["docs"][op["doc"]] = None
        return h, "%s's final read lost %s (acknowledged by op %s)" % (node, op["doc"],
                                                                      op["index"])
    if kind == "flip-original":
        # A race group's loser answered original and found registered
        # instead of the winner, everywhere.
        for op in h["ops"]:
            g = h["groups"].get(op.get("group")) or {}
            res = op.get("result") or {}
            if (op["f"] == "register" and op["type"] == "ok" and g.get("kind") == "race"
                    and res.get("registered") is False):
                winner = [m for m in g["members"] if finals[sorted(finals)[0]]["docs"].get(m)]
                res["original"], res["registered"] = True, True
                for st in finals.values():
                    for m in winner:
                        rec = st["docs"][m]
                        st["docs"][m] = None
                        st["docs"][op["doc"]] = rec
                return h, "op %s (%s) flipped to original, %s swapped out of the final reads" % (
                    op["index"], op["doc"], winner)
        raise SystemExit("no acknowledged non-original registration to flip")
    if kind == "undo-delete":
        op = _first_acked(h, "delete")
        rec = {"simhash": "0", "status": "active"}
        for st in finals.values():
            st["docs"][op["doc"]] = rec
        return h, "%s, deleted by op %s, put back in every final read" % (op["doc"], op["index"])
    if kind == "undo-policy":
        # The last acknowledged PUT of a document present at the end undone.
        present = finals[sorted(finals)[0]]["docs"]
        cands = [op for op in h["ops"] if op["f"] == "policy" and op["type"] == "ok"
                 and present.get(op["doc"])]
        if not cands:
            raise SystemExit("no acknowledged policy PUT on a document present at the end")
        op = max(cands, key=lambda o: o["invoke"])
        for st in finals.values():
            st["docs"][op["doc"]] = dict(st["docs"][op["doc"]], policy={
                "reprint": "allow", "explicit": False, "whitelist": []})
        return h, "the policy of %s (last acknowledged PUT: op %s) reset in the final reads" % (
            op["doc"], op["index"])
    if kind == "diverge-feed":
        node = sorted(finals)[-1]
        ev = finals[node]["events"]
        if not ev:
            raise SystemExit("empty feed")
        k = len(ev) // 2
        lost = ev.pop(k)
        return h, "%s's feed lost its event %d (seq %s)" % (node, k, lost.get("seq"))
    raise SystemExit("unknown tamper kind %r (one of %s)" % (kind, ", ".join(KINDS)))


KINDS = ("drop-acked", "flip-original", "undo-delete", "undo-policy", "diverge-feed")


def main(argv):
    args = list(argv[1:])
    kind = None
    if "--tamper" in args:
        i = args.index("--tamper")
        kind = args[i + 1] if i + 1 < len(args) else ""
        del args[i:i + 2]
    if len(args) != 1:
        print("usage: history_check.py HISTORY.json [--tamper %s]" % "|".join(KINDS),
              file=sys.stderr)
        return 2
    try:
        with open(args[0]) as f:
            history = json.load(f)
    except (OSError, ValueError) as e:
        print("cannot read %s: %s" % (args[0], e), file=sys.stderr)
        return 2
    if kind is not None:
        history, what = tamper(history, kind)
        print("tampered (%s): %s" % (kind, what))
    meta = history.get("meta") or {}
    if meta:
        print("history: %s" % ", ".join("%s %s" % (k, meta[k]) for k in sorted(meta)
                                         if not isinstance(meta[k], (dict, list))))
    verdict = check_history(history)
    print(format_verdict(verdict))
    return 0 if verdict["valid"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
