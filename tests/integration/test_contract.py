"""The contract as real clients read it, with tools we did not write
(tests/contract/: npm packages pinned in its package-lock.json, installed
by deploy/install-deps.sh --test, never by the server):

- validator: @apidevtools/swagger-parser validates proto/openapi.yaml
  against the OpenAPI 3.1 schema; it must pass, and must fail on a copy
  whose info.license lost its identifier (the file as it was when the
  validator refused it);
- request schemas: no property of a request body carries `default` (a
  generator such as openapi-typescript makes such a field required);
- generated client: openapi-typescript (default options) generates the
  types into a temporary directory, tsc --strict compiles
  tests/contract/client.ts against them, and the program runs with
  openapi-fetch against a real neardupd on loopback: fingerprints, a
  registration, a duplicate with its matches, a partial copy with its
  passages, policy, revoke/restore, copies, audit, import, and each error
  shape. Every exchange it prints is validated here against the
  contract's schema for its path, method and status (a status the
  contract does not list fails).

Skipped (exit 77) when node or tests/contract/node_modules is absent
(tests/contract/install.sh installs it: npm ci), as in the fresh-machine
stage's root, which has no npm packages; failed instead with
ND_CONTRACT_REQUIRED=1, which tests/run-all.sh sets for the suites after it
installed them."""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

try:
    import jsonschema
    import yaml
except ImportError:
    # The Debian packages are for Debian's python3; another python3 found
    # first on PATH may not have them.
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != \
            os.path.realpath("/usr/bin/python3") and not os.environ.get("ND_OPENAPI_REEXEC"):
        os.environ["ND_OPENAPI_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    raise

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import SOURCE_ROOT, TEXTS_DIR, Runner, Server, check  # noqa: E402

T = Runner("test_contract")
SPEC_PATH = os.path.join(SOURCE_ROOT, "proto", "openapi.yaml")
TOOLS = os.path.join(SOURCE_ROOT, "tests", "contract")
MODULES = os.path.join(TOOLS, "node_modules")
STAMP = os.path.join(MODULES, ".neardup-lock-sha256")  # written by tests/contract/install.sh
NODE = shutil.which("node") or shutil.which("nodejs")
TOKEN = "nd-contract-7d41c9e02b6f8a35e1c4"
OTHER_TOKEN = "nd-contract-other-5b90e2d4a7c13f68"  # a token of another account
WORK = tempfile.mkdtemp(prefix="neardup-contract-")
with open(SPEC_PATH, encoding="utf-8") as f:
    SPEC_TEXT = f.read()
SPEC = yaml.safe_load(SPEC_TEXT)
TIMES = {}


def tool(*parts):
    return os.path.join(MODULES, *parts)


def run(label, args, timeout, **kw):
    """Runs a command; returns (exit code, stdout + stderr), timed."""
    t0 = time.monotonic()
    p = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=timeout, text=True, **kw)
    TIMES[label] = time.monotonic() - t0
    return p.returncode, p.stdout


def why_not_ready():
    """None when node and the pinned packages are installed, else why not."""
    if NODE is None:
        return "node is not installed (deploy/install-deps.sh --test installs nodejs and npm)"
    if not os.path.isdir(MODULES):
        return "tests/contract/node_modules is absent (tests/contract/install.sh runs npm ci)"
    for bin_ in (("openapi-typescript", "bin", "cli.js"), ("typescript", "bin", "tsc"),
                 ("@apidevtools", "swagger-parser", "package.json"),
                 ("openapi-fetch", "package.json")):
        if not os.path.exists(tool(*bin_)):
            return ("tests/contract/node_modules lacks %s (tests/contract/install.sh runs "
                    "npm ci)" % "/".join(bin_))
    with open(os.path.join(TOOLS, "package-lock.json"), "rb") as f:
        want = hashlib.sha256(f.read()).hexdigest()
    try:
        with open(STAMP) as f:
            have = f.read().strip()
    except OSError:
        have = None
    if have != want:
        return ("tests/contract/node_modules was not installed from this package-lock.json "
                "(tests/contract/install.sh installs it again)")
    return None


# ---- the validator ----

@T.test
def validator_passes_on_the_contract():
    rc, out = run("validator", [NODE, os.path.join(TOOLS, "validate.mjs"), SPEC_PATH], 120)
    print("    " + out.strip().replace("\n", "\n    "))
    check(rc == 0 and out.startswith("valid: "), "the validator refuses proto/openapi.yaml:\n%s",
          out)


@T.test
def validator_fails_on_a_license_without_identifier():
    # The contract as it was: info.license with a name only. OpenAPI 3.1's
    # schema wants an SPDX identifier or a url beside the name (a contract
    # without any license is valid: the field is optional).
    broken, n = re.subn(r"^(  license:\n    name: .*\n)    identifier: .*\n", r"\1", SPEC_TEXT,
                        count=1, flags=re.M)
    check(n == 1, "no info.license.identifier in proto/openapi.yaml")
    check(set(yaml.safe_load(broken)["info"]["license"]) == {"name"}, "license not cut")
    path = os.path.join(WORK, "openapi-license-name-only.yaml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(broken)
    rc, out = run("validator (no identifier)", [NODE, os.path.join(TOOLS, "validate.mjs"), path],
                  120)
    print("    " + out.strip().replace("\n", "\n    "))
    check(rc == 1, "exit %d on a license without identifier or url:\n%s", rc, out)
    check("#/info/license must have required property 'identifier'" in out, "not the license:\n%s",
          out)


# ---- request schemas as generators read them ----

def deref(ref):
    check(ref.startswith("#/"), "external $ref %s" % ref)
    node = SPEC
    for part in ref[2:].split("/"):
        node = node[part]
    return node


def walk_schema(schema, where, seen, out):
    """Every object property under schema (through $ref, allOf/oneOf/anyOf,
    if/then/else, not, items), as (where, name, property schema)."""
    if not isinstance(schema, dict):
        return
    if "$ref" in schema:
        ref = schema["$ref"]
        if ref in seen:
            return
        seen.add(ref)
        walk_schema(deref(ref), ref, seen, out)
    for name, prop in (schema.get("properties") or {}).items():
        out.append((where, name, prop))
        walk_schema(prop, "%s.%s" % (where, name), seen, out)
    for key in ("allOf", "oneOf", "anyOf"):
        for sub in schema.get(key) or []:
            walk_schema(sub, where, seen, out)
    for key in ("if", "then", "else", "not", "items", "additionalProperties"):
        walk_schema(schema.get(key), where, seen, out)


@T.test
def request_body_fields_have_no_default():
    props = []
    for path, item in SPEC["paths"].items():
        for method, op in item.items():
            if not isinstance(op, dict) or "requestBody" not in op:
                continue
            for media, content in op["requestBody"].get("content", {}).items():
                walk_schema(content.get("schema"), "%s %s %s" % (method.upper(), path, media),
                            set(), props)
    check(len(props) > 10, "no request body property found: %d", len(props))
    bad = sorted({"%s: %s" % (where, name) for where, name, prop in props
                  if isinstance(prop, dict) and "default" in prop})
    check(not bad, "request body fields with a `default` keyword (openapi-typescript's "
          "defaults make them required; say the default in the description): %s", bad)


# ---- the generated client against a live server ----

def response_schema(path, method, status):
    """The JSON schema the contract gives for this answer (None: no body
    described), failing when the contract does not list the status."""
    item = SPEC["paths"].get(path)
    check(item is not None, "%s is not a path of the contract", path)
    op = item.get(method.lower())
    if op is None:
        # A method the path does not have (405): the status as some
        # operation of the path documents it.
        ops = [o for m, o in item.items() if isinstance(o, dict) and str(status) in
               o.get("responses", {})]
        check(ops, "%s %s: status %s is documented nowhere on the path", method, path, status)
        op = ops[0]
    resp = op.get("responses", {}).get(str(status))
    check(resp is not None, "%s %s answered %s, which the contract does not list",
          method, path, status)
    if "$ref" in resp:
        resp = deref(resp["$ref"])
    media = resp.get("content", {}).get("application/json")
    return None if media is None else media.get("schema")


def schema_errors(value, schema):
    root = dict(schema)
    root["components"] = SPEC["components"]
    return [e.message for e in jsonschema.Draft202012Validator(root).iter_errors(value)]


@T.test
def generated_client_against_the_server():
    gen = os.path.join(WORK, "client")
    os.makedirs(gen)
    for name in ("client.ts", "tsconfig.json"):
        shutil.copy(os.path.join(TOOLS, name), gen)
    os.symlink(MODULES, os.path.join(gen, "node_modules"))
    with open(os.path.join(gen, "package.json"), "w") as f:
        json.dump({"private": True, "type": "module"}, f)

    # The README's two commands, as a platform runs them.
    rc, out = run("openapi-typescript", [NODE, tool("openapi-typescript", "bin", "cli.js"),
                                         SPEC_PATH, "-o", os.path.join(gen, "api.ts")],
                  300, cwd=gen)
    check(rc == 0, "openapi-typescript failed:\n%s", out)
    rc, out = run("tsc", [NODE, tool("typescript", "bin", "tsc"), "-p", gen], 600, cwd=gen)
    check(rc == 0, "tsc failed on the generated types:\n%s", out)

    with open(os.path.join(WORK, "tokens"), "w") as f:
        f.write("platform %s operator\n" % TOKEN)  # operator: /replica too
        f.write("other %s accounts=someone-else\n" % OTHER_TOKEN)  # 403 forbidden
    os.chmod(os.path.join(WORK, "tokens"), 0o600)
    with Server(["--token-file", os.path.join(WORK, "tokens"), "--max-body", "64K"]) as srv:
        env = dict(os.environ, ND_URL="http://127.0.0.1:%d" % srv.port, ND_TOKEN=TOKEN,
                   ND_OTHER_TOKEN=OTHER_TOKEN, ND_TEXTS=TEXTS_DIR, NODE_NO_WARNINGS="1")
        t0 = time.monotonic()
        p = subprocess.run([NODE, os.path.join(gen, "out", "client.js")], cwd=gen, env=env,
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=300, text=True)
        TIMES["client"] = time.monotonic() - t0
        lines = p.stdout.splitlines()
        check(p.returncode == 0 and lines and lines[-1].endswith("every check passed"),
              "the client failed (exit %d):\n%s\n%s\nserver log:\n%s", p.returncode,
              "\n".join(lines[-5:])[-4000:], p.stderr[-4000:], srv.log_tail(30))
        print("    " + lines[-1])

    steps = set()
    statuses = set()
    for line in lines[:-1]:
        ex = json.loads(line)
        steps.add(ex["step"])
        statuses.add(ex["status"])
        schema = response_schema(ex["path"], ex["method"], ex["status"])
        if ex["method"] == "HEAD":
            check(ex["body"] is None, "HEAD %s: a body", ex["path"])
            continue
        check(schema is not None, "%s %s %s: the contract describes no JSON body",
              ex["method"], ex["path"], ex["status"])
        errors = schema_errors(ex["body"], schema)
        check(not errors, "%s %s %s (step %s): %r does not validate: %s", ex["method"],
              ex["path"], ex["status"], ex["step"], ex["body"], errors[:3])
    want_steps = {"probes", "fingerprint", "register", "document", "duplicate", "partial_copy",
                  "policy", "revoke", "copies", "audit", "import", "replica", "delete",
                  "invalid_json", "invalid_field", "unauthorized", "forbidden", "not_found", "id_conflict",
                  "text_too_short", "unsupported_media_type", "body_too_large", "empty_body",
                  "method_not_allowed"}
    check(want_steps <= steps, "steps missing: %s", sorted(want_steps - steps))
    check({200, 400, 401, 403, 404, 405, 409, 413, 415, 422} <= statuses, "statuses %s", statuses)
    print("    %d exchanges validated against the contract; seconds: %s" % (
        len(lines) - 1, ", ".join("%s %.1f" % kv for kv in TIMES.items())))


if __name__ == "__main__":
    try:
        reason = why_not_ready()
        if reason:
            if os.environ.get("ND_CONTRACT_REQUIRED") == "1":
                print("FAIL: %s; ND_CONTRACT_REQUIRED=1: this test must run" % reason)
                sys.exit(1)
            print("SKIP: %s" % reason)
            sys.exit(77)
        T.run()
    finally:
        if os.environ.get("ND_KEEP_TMP") is None:
            shutil.rmtree(WORK, ignore_errors=True)
