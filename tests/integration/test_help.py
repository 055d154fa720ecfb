"""`neardupd --help` lists every endpoint, one line each (method and path),
and the token roles: its endpoints are exactly the paths
and methods of proto/openapi.yaml (HEAD folded into GET, as the help says;
a redirect the contract does not list aside), and every role a token file
takes. test_api checks the same list against the route table in process;
test_auth_roles that each role listed parses. No server is started."""

import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import SOURCE_ROOT, Runner, check, neardupd_path  # noqa: E402

T = Runner("test_help")
LINE = re.compile(r"^  (GET|POST|PUT|PATCH|DELETE) +(/\S*) +(.*)$")


def help_text():
    p = subprocess.run([neardupd_path(), "--help"], capture_output=True, text=True, timeout=10)
    check(p.returncode == 0 and not p.stderr, "exit %s: %s", p.returncode, p.stderr)
    return p.stdout


def contract_endpoints():
    """{(METHOD, path)} of openapi.yaml's paths (read by indentation, as
    the file is written: two spaces a path, four a method)."""
    out, path = set(), None
    with open(os.path.join(SOURCE_ROOT, "proto", "openapi.yaml"), encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^  (/\S*):\s*$", line)
            if m:
                path = m.group(1)
                continue
            if re.match(r"^\S", line):
                path = None
            m = re.match(r"^    (get|post|put|patch|delete|head):\s*$", line)
            if path and m:
                out.add((m.group(1).upper(), path))
    return out


@T.test
def every_endpoint_once():
    text = help_text()
    check("\nEndpoints" in text, "no Endpoints section: %s", text)
    listed = [LINE.match(l) for l in text[text.index("\nEndpoints"):].splitlines()]
    listed = [(m.group(1), m.group(2), m.group(3)) for m in listed if m]
    pairs = [(m, p) for m, p, _ in listed]
    check(len(pairs) == len(set(pairs)), "listed twice: %r", pairs)
    mine = {(m, p) for m, p, who in listed if "redirect" not in who}
    want = {(m, p) for m, p in contract_endpoints() if m != "HEAD"}
    check(len(want) >= 20, "openapi.yaml read wrong: %r", want)
    check(mine == want, "--help lacks %r; lists what openapi.yaml does not: %r",
          sorted(want - mine), sorted(mine - want))
    heads = {p for m, p in contract_endpoints() if m == "HEAD"}
    check(heads <= {p for m, p in mine if m == "GET"}, "HEAD without GET: %r", heads)
    check(all(who.strip() for _, _, who in listed), "a line without who may call it: %r", listed)


@T.test
def token_roles():
    text = help_text()
    check("Token roles" in text, "no token roles: %s", text)
    roles = text[text.index("Token roles"):]
    for role in ("operator", "accounts=A[,B...]", "(none)"):
        check(re.search(r"^  " + re.escape(role) + r" ", roles, re.M), "role %s missing:\n%s",
              role, roles)


if __name__ == "__main__":
    T.run()
