"""The checker of test_history (tests/integration/history_check.py) tested on
hand-made histories: one that keeps every promise, with
indeterminate operations that may or may not have happened, is valid; each
rule rejects the histories made to break it, and only the rule broken says
so where the fault touches one rule. The CLI judges a file and a tampered
copy of it. No process, no socket: runs in well under a second."""

import copy
import io
import json
import os
import sys
import tempfile
from contextlib import redirect_stdout

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Runner, check  # noqa: E402
import history_check as hc  # noqa: E402

T = Runner("test_history_check")

RULE_NAMES = [name for name, _ in hc.RULES]


def op(index, f, doc, t0, t1, typ, group=None, result=None, value=None, status=None):
    return {"index": index, "process": index % 3, "f": f, "group": group or doc, "doc": doc,
            "value": value, "target": "ha", "invoke": t0, "complete": t1, "type": typ,
            "status": status if status is not None else {"ok": 200, "fail": 404,
                                                          "info": 503}[typ],
            "result": result}


def reg(ok_original=None, matches=(), simhash=None):
    """A registration's result: original (registered) or a match list."""
    if ok_original:
        return {"original": True, "registered": True, "simhash": simhash, "matches": []}
    return {"original": False, "registered": False, "simhash": "x", "matches": list(matches)}


def policy_rec(simhash, tag, reprint, status="active"):
    return {"id": "c0", "simhash": simhash, "policy": {
        "reprint": reprint, "explicit": True,
        "whitelist": [{"account": tag, "may_modify": False, "may_hide_source": False}]},
        "status": status}


def good():
    """Race group g0 (a wins; b not original; c indeterminate and absent),
    claim document c0 (two PUTs, a revoke, an indeterminate restore),
    claim document c1 (deleted)."""
    ops = [
        op(0, "register", "a", 1.0, 2.0, "ok", "g0", reg(True, simhash="sa")),
        op(1, "register", "b", 1.5, 4.0, "ok", "g0", reg(matches=["a"])),
        op(2, "register", "c", 3.0, 9.0, "info", "g0"),
        op(3, "check", "b", 5.0, 6.0, "ok", "g0",
           {"original": False, "registered": False, "matches": ["a"]}),
        op(4, "check", "a", 0.5, 1.2, "ok", "g0",
           {"original": True, "registered": False, "matches": []}),  # before any ack
        op(5, "register", "c0", 1.0, 2.0, "info"),
        op(6, "register", "c0", 2.5, 3.0, "ok", result=reg(True, simhash="s0")),
        op(7, "policy", "c0", 3.5, 4.0, "ok", value={"reprint": "allow", "tag": "t1"}),
        op(8, "policy", "c0", 5.0, 6.0, "ok", value={"reprint": "forbid", "tag": "t2"}),
        op(9, "policy", "c0", 5.5, 5.6, "fail", value={"reprint": "allow", "tag": "t3"}),
        op(10, "revoke", "c0", 7.0, 8.0, "ok", result={"status": "revoked"}),
        op(11, "restore", "c0", 9.0, 10.0, "info"),
        op(12, "register", "c1", 1.0, 2.0, "ok", result=reg(True, simhash="s1")),
        op(13, "delete", "c1", 3.0, 4.0, "ok", result={"deleted": True}),
    ]
    events = [{"seq": 1, "type": "copy.detected", "data": {"copy": {"id": "b"}}},
              {"seq": 2, "type": "policy.changed", "data": {"policy": {"whitelist": [
                  {"account": "t1"}]}}},
              {"seq": 3, "type": "document.deleted", "data": {"id": "c1"}},
              {"seq": 4, "type": "policy.changed", "data": {"policy": {"whitelist": [
                  {"account": "t2"}]}}},
              {"seq": 5, "type": "claim.revoked", "data": {"id": "c0"}}]
    docs = {"a": {"id": "a", "simhash": "sa"}, "b": None, "c": None,
            "c0": policy_rec("s0", "t2", "forbid", "revoked"), "c1": None}
    return {"meta": {"run": 1},
            "groups": {"g0": {"kind": "race", "members": ["a", "b", "c"]},
                       "c0": {"kind": "claim", "members": ["c0"]},
                       "c1": {"kind": "claim", "members": ["c1"]}},
            "ops": ops,
            "final": {n: {"docs": copy.deepcopy(docs), "events": copy.deepcopy(events)}
                      for n in ("nd-1", "nd-2", "nd-3")}}


def verdict(h):
    v = hc.check_history(h)
    return v, {name: violations for name, violations in v["rules"]}


def expect_only(h, rule, what):
    """h is rejected by rule (index into RULES) and by no other."""
    v, by = verdict(h)
    check(not v["valid"], "%s: the checker accepts it:\n%s", what, hc.format_verdict(v))
    name = RULE_NAMES[rule]
    check(by[name], "%s: rule %r does not reject it:\n%s", what, name, hc.format_verdict(v))
    others = [n for n in RULE_NAMES if n != name and by[n]]
    check(not others, "%s: also rejected by %s:\n%s", what, others, hc.format_verdict(v))
    return by[name]


def expect_rejected_by(h, rule, what):
    v, by = verdict(h)
    check(by[RULE_NAMES[rule]], "%s: rule %r does not reject it:\n%s", what, RULE_NAMES[rule],
          hc.format_verdict(v))


def final_all(h, doc, rec):
    for st in h["final"].values():
        st["docs"][doc] = rec


def find(h, index):
    return [o for o in h["ops"] if o["index"] == index][0]


@T.test
def valid_history_passes():
    v, _ = verdict(good())
    check(v["valid"], "the good history is rejected:\n%s", hc.format_verdict(v))
    # Indeterminate operations may have happened: c0's restore took effect.
    h = good()
    final_all(h, "c0", policy_rec("s0", "t2", "forbid", "active"))
    v, _ = verdict(h)
    check(v["valid"], "an indeterminate restore that happened is rejected:\n%s",
          hc.format_verdict(v))
    # The indeterminate registration of c happened, and c won: valid only if
    # it began before every acknowledged registration completed; here a's
    # ack came at 2.0 and c began at 3.0, so c cannot be the winner.
    h = good()
    find(h, 2)["invoke"] = 0.9
    find(h, 0).update(type="info", result=None)
    find(h, 1)["result"] = reg(matches=["c"])
    find(h, 3)["result"]["matches"] = ["c"]
    final_all(h, "a", None)
    final_all(h, "c", {"id": "c", "simhash": "sc"})
    v, _ = verdict(h)
    check(v["valid"], "an indeterminate original that came first is rejected:\n%s",
          hc.format_verdict(v))


@T.test
def rule1_acked_registration_missing():
    h = good()
    h["final"]["nd-2"]["docs"]["a"] = None
    expect_rejected_by(h, 0, "a missing on nd-2")
    h = good()
    final_all(h, "a", {"id": "a", "simhash": "other"})
    expect_only(h, 0, "a with another simhash")
    h = good()
    final_all(h, "c0", None)  # acknowledged, never deleted
    expect_rejected_by(h, 0, "c0 missing everywhere")


@T.test
def rule2_one_original():
    h = good()
    final_all(h, "b", {"id": "b", "simhash": "x"})
    expect_only(h, 1, "two members registered")
    h = good()
    find(h, 1)["result"] = reg(True, simhash="sb")
    expect_rejected_by(h, 1, "two members answered original")
    h = good()
    find(h, 1)["result"] = reg(matches=["zz"])
    expect_only(h, 1, "a non-original answer that does not name the original")
    # The real-time rule: the winner c's only registration began (3.0) after
    # b's acknowledged (non-original) registration completed (4.0 -> 2.5).
    h = good()
    find(h, 0).update(type="info", result=None, invoke=3.5, complete=9.0)
    find(h, 1).update(complete=2.5, result=reg(matches=["c"]))
    find(h, 3)["result"]["matches"] = ["c"]
    final_all(h, "a", None)
    final_all(h, "c", {"id": "c", "simhash": "sc"})
    msgs = expect_only(h, 1, "an original that began after another's acknowledged "
                       "registration completed")
    check(any("began after" in m for m in msgs), "%r", msgs)
    # A check at the latest state after the acknowledgement saw nothing.
    h = good()
    find(h, 3)["result"] = {"original": True, "registered": False, "matches": []}
    expect_only(h, 1, "a stale latest check")
    # Acknowledged registrations, nobody registered at the end.
    h = good()
    final_all(h, "a", None)
    expect_rejected_by(h, 1, "the group's original gone")


@T.test
def rule3_changes_kept():
    h = good()
    final_all(h, "c1", {"id": "c1", "simhash": "s1"})
    expect_only(h, 2, "an acknowledged delete undone")
    # ... unless a registration of it may have come after the delete.
    h = good()
    h["ops"].append(op(14, "register", "c1", 0.5, 9.0, "info"))
    final_all(h, "c1", {"id": "c1", "simhash": "s1"})
    v, _ = verdict(h)
    check(v["valid"], "a delete followed by an indeterminate registration:\n%s",
          hc.format_verdict(v))
    h = good()
    final_all(h, "c0", policy_rec("s0", "t1", "allow", "revoked"))
    msgs = expect_only(h, 2, "an acknowledged PUT undone by an earlier one")
    check(any("undone" in m for m in msgs), "%r", msgs)
    h = good()
    final_all(h, "c0", policy_rec("s0", "t3", "allow", "revoked"))
    expect_only(h, 2, "the policy of a failed PUT")
    h = good()
    final_all(h, "c0", policy_rec("s0", "t9", "allow", "revoked"))
    expect_only(h, 2, "a policy no PUT wrote")
    h = good()
    final_all(h, "c0", dict(policy_rec("s0", "t2", "forbid", "revoked"), policy={
        "reprint": "allow", "explicit": False, "whitelist": []}))
    expect_only(h, 2, "the initial policy back")
    # Status: active at the end, the restore failed: the revoke was undone.
    h = good()
    find(h, 11).update(type="fail", status=409)
    final_all(h, "c0", policy_rec("s0", "t2", "forbid", "active"))
    expect_only(h, 2, "an acknowledged revoke undone")


@T.test
def rule4_same_feed():
    h = good()
    h["final"]["nd-3"]["events"].pop(2)
    expect_only(h, 3, "a node without one event")
    h = good()
    h["final"]["nd-2"]["events"][1]["seq"] = 7
    expect_only(h, 3, "an event under another seq")
    h = good()
    for st in h["final"].values():
        st["events"][3]["data"]["policy"]["whitelist"][0]["account"] = "t0"
    expect_only(h, 3, "an acknowledged PUT not in the feed")
    h = good()
    h["final"]["nd-1"]["docs"]["a"]["registered_at"] = "2026-01-01T00:00:00.000000Z"
    expect_only(h, 3, "records that differ between nodes")
    h = good()
    h["nats"] = {n: {"first_seq": 1, "last_seq": 9, "messages": 9, "bytes": 4000}
                 for n in ("n1", "n2", "n3")}
    v, _ = verdict(h)
    check(v["valid"], "equal NATS copies rejected:\n%s", hc.format_verdict(v))
    h["nats"]["n2"]["bytes"] = 2023  # one message of another size at some seq
    expect_only(h, 3, "NATS copies of the stream that differ")


@T.test
def cli_judges_a_file_and_a_tampered_copy():
    d = tempfile.mkdtemp(prefix="history-check-")
    path = os.path.join(d, "h.json")
    with open(path, "w") as f:
        json.dump(good(), f)
    try:
        for kind, want in [(None, 0), ("drop-acked", 1), ("flip-original", 1),
                           ("undo-delete", 1), ("undo-policy", 1), ("diverge-feed", 1)]:
            out = io.StringIO()
            with redirect_stdout(out):
                rc = hc.main(["history_check.py", path] + (["--tamper", kind] if kind else []))
            text = out.getvalue()
            check(rc == want and ("verdict: VALID" if want == 0 else "verdict: INVALID") in text,
                  "%s: exit %s, output:\n%s", kind, rc, text)
        check(hc.main(["history_check.py", os.path.join(d, "none.json")]) == 2, "no file")
    finally:
        for name in os.listdir(d):
            os.unlink(os.path.join(d, name))
        os.rmdir(d)


if __name__ == "__main__":
    T.run()
