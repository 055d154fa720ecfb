"""The HTTP contract is data: replay every example of proto/openapi.yaml
against a running neardupd, in document order (the rules are in the file's
info.description), and validate every JSON answer against its response
schema. Also checks that every path, method and documented status the server
answers is in the file, and (when PyYAML is installed) that the stdlib
reader sees the file exactly as PyYAML does."""

import json
import os
import re
import sys
from urllib.parse import quote

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import yamlsubset  # noqa: E402
from harness import HEX16, RFC3339_US, SOURCE_ROOT, Runner, Server, check  # noqa: E402

T = Runner("test_openapi")
SPEC_PATH = os.path.join(SOURCE_ROOT, "proto", "openapi.yaml")
with open(SPEC_PATH, encoding="utf-8") as f:
    SPEC_TEXT = f.read()
SPEC = yamlsubset.load(SPEC_TEXT)
METHODS = ("get", "head", "post", "put", "delete", "patch", "options")
SHAPE_ONLY = {
    "simhash": lambda v: isinstance(v, str) and HEX16.match(v),
    "registered_at": lambda v: isinstance(v, str) and RFC3339_US.match(v),
    "chars": lambda v: isinstance(v, int) and v >= 0,
    "features": lambda v: isinstance(v, int) and v >= 0,
    "distance": lambda v: isinstance(v, int) and 0 <= v <= 64,
    "similarity": lambda v: isinstance(v, (int, float)) and 0 <= v <= 1,
    "message": lambda v: isinstance(v, str) and v,
    "line": lambda v: isinstance(v, int),
    "column": lambda v: isinstance(v, int),
}


def resolve(node):
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        check(ref.startswith("#/"), "external $ref %s" % ref)
        node = SPEC
        for part in ref[2:].split("/"):
            node = node[part]
    return node


# ---- a JSON Schema validator for the keywords the file uses ----

TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def validate(value, schema, path="$"):
    schema = resolve(schema)
    if "oneOf" in schema:
        ok = [s for s in schema["oneOf"] if not _errors(value, s, path)]
        check(len(ok) == 1, "%s: matches %d of oneOf: %r" % (path, len(ok), value))
        return
    t = schema.get("type")
    if t:
        types = t if isinstance(t, list) else [t]
        good = False
        for name in types:
            if name == "integer":
                good |= isinstance(value, int) and not isinstance(value, bool)
            elif name == "number":
                good |= isinstance(value, (int, float)) and not isinstance(value, bool)
            else:
                good |= isinstance(value, TYPES[name]) and not (
                    name != "boolean" and isinstance(value, bool))
        check(good, "%s: %r is not %s" % (path, value, t))
    if "enum" in schema:
        check(value in schema["enum"], "%s: %r not in enum" % (path, value))
    if "const" in schema:
        check(value == schema["const"], "%s: %r != const" % (path, value))
    if isinstance(value, str):
        if "pattern" in schema:
            check(re.search(schema["pattern"], value), "%s: %r !~ pattern" % (path, value))
        if "minLength" in schema:
            check(len(value) >= schema["minLength"], "%s: too short" % path)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema:
            check(value >= schema["minimum"], "%s: %r < minimum" % (path, value))
        if "maximum" in schema:
            check(value <= schema["maximum"], "%s: %r > maximum" % (path, value))
    if isinstance(value, dict):
        for key in schema.get("required", []):
            check(key in value, "%s: missing %s" % (path, key))
        props = schema.get("properties", {})
        for key, v in value.items():
            if key in props:
                validate(v, props[key], path + "." + key)
            else:
                check(schema.get("additionalProperties", True) is not False,
                      "%s: undocumented field %s" % (path, key))
    if isinstance(value, list):
        if "maxItems" in schema:
            check(len(value) <= schema["maxItems"], "%s: too many items" % path)
        if "items" in schema:
            for i, v in enumerate(value):
                validate(v, schema["items"], "%s[%d]" % (path, i))


def _errors(value, schema, path):
    try:
        validate(value, schema, path)
        return None
    except AssertionError as e:
        return e


def compare(expected, actual, path="$"):
    """Equal, except SHAPE_ONLY keys, which are checked for shape."""
    if isinstance(expected, dict):
        check(isinstance(actual, dict), "%s: expected an object, got %r" % (path, actual))
        check(set(expected) == set(actual),
              "%s: fields %s, expected %s" % (path, sorted(actual), sorted(expected)))
        for k, v in expected.items():
            if k in SHAPE_ONLY:
                check(SHAPE_ONLY[k](actual[k]), "%s.%s: bad %r" % (path, k, actual[k]))
            else:
                compare(v, actual[k], path + "." + k)
    elif isinstance(expected, list):
        check(isinstance(actual, list) and len(actual) == len(expected),
              "%s: expected %d items, got %r" % (path, len(expected), actual))
        for i, (e, a) in enumerate(zip(expected, actual)):
            compare(e, a, "%s[%d]" % (path, i))
    else:
        check(expected == actual, "%s: expected %r, got %r" % (path, expected, actual))


# ---- the replay ----

def operations():
    for path, item in SPEC["paths"].items():
        for method in METHODS:
            if method in item:
                yield path, item, method, item[method]


def request_examples(op):
    """{name: (content type, example object)} of the operation's request body."""
    out = {}
    body = resolve(op.get("requestBody", {}))
    for ctype, media in body.get("content", {}).items():
        for name, ex in media.get("examples", {}).items():
            out[name] = (ctype, resolve(ex))
    return out


def response_examples(op):
    for status, resp in op.get("responses", {}).items():
        resp = resolve(resp)
        for ctype, media in resp.get("content", {}).items():
            for name, ex in media.get("examples", {}).items():
                yield int(status), ctype, media.get("schema"), name, resolve(ex), resp


def path_for(path, item, op, name):
    params = item.get("parameters", []) + op.get("parameters", [])
    for p in params:
        p = resolve(p)
        if p.get("in") == "path":
            value = p.get("examples", {}).get(name, {}).get("value")
            check(value is not None, "no example %s for {%s} of %s" % (name, p["name"], path))
            enc = value if value.startswith("%") else quote(value, safe="")
            path = path.replace("{%s}" % p["name"], enc)
    return path


def replay_one(srv, path, item, method, op, want_status, ctype, schema, name, ex, resp):
    reqs = request_examples(op)
    if ex.get("x-replay") is False:
        return "skipped"
    if "requestBody" in op and name not in reqs:
        return "shared"  # a shared response documented for another operation
    send_method = method.upper()
    headers = {}
    body = None
    if name in reqs:
        rctype, rex = reqs[name]
        send_method = rex.get("x-method", send_method)
        if send_method not in ("GET", "HEAD"):
            headers["Content-Type"] = rex.get("x-content-type", rctype)
            if "x-raw-body" in rex:
                body = rex["x-raw-body"].encode()
            elif rctype == "application/json":
                body = json.dumps(rex["value"]).encode()
            else:
                body = rex["value"].encode()
    url = path_for(path, item, op, name)
    status, hdrs, data = srv.request(send_method, url, body, headers)
    where = "%s %s example %s" % (method.upper(), path, name)
    check(status == want_status, "%s: status %s, expected %s: %r" % (where, status,
                                                                      want_status, data[:300]))
    check(hdrs.get("content-type", "").split(";")[0] == ctype,
          "%s: Content-Type %r" % (where, hdrs.get("content-type")))
    for hname, hdef in resolve(resp).get("headers", {}).items():
        if "example" in hdef:
            check(hdrs.get(hname.lower()) == hdef["example"], "%s: header %s" % (where, hname))
    if ctype == "application/json":
        actual = json.loads(data)
        if schema:
            validate(actual, schema)
        compare(ex["value"], actual)
    else:
        text = data.decode()
        for line in ex["value"].splitlines():
            check(line in text, "%s: %r not in the answer" % (where, line))
    return "replayed"


@T.test
def stdlib_reader_matches_pyyaml(srv):
    try:
        import yaml
    except ImportError:
        print("     (PyYAML not installed: skipped)")
        return
    check(yaml.safe_load(SPEC_TEXT) == SPEC, "yamlsubset reads the file differently")


@T.test
def spec_is_valid_openapi(srv):
    check(str(SPEC["openapi"]).startswith("3.1"), SPEC["openapi"])
    try:
        from openapi_spec_validator import validate as validate_spec
    except ImportError:
        print("     (openapi-spec-validator not installed: structural check only)")
        for path, item, method, op in operations():
            check("responses" in op, "%s %s has no responses" % (method, path))
        return
    import yaml
    validate_spec(yaml.safe_load(SPEC_TEXT))


@T.test
def examples_replay(srv):
    counts = {"replayed": 0, "skipped": 0, "shared": 0}
    for path, item, method, op in operations():
        for status, ctype, schema, name, ex, resp in response_examples(op):
            counts[replay_one(srv, path, item, method, op, status, ctype, schema, name, ex,
                              resp)] += 1
    print("     %(replayed)d examples replayed, %(skipped)d not replayable, "
          "%(shared)d shared" % counts)
    check(counts["replayed"] >= 20, counts)
    check(counts["skipped"] <= 8, counts)


@T.test
def every_route_documented(srv):
    paths = SPEC["paths"]
    for route, methods in (("/fingerprint", ["post"]), ("/check-original", ["post"]),
                           ("/documents/{id}", ["get", "head", "delete"]),
                           ("/healthz", ["get", "head"]), ("/readyz", ["get", "head"]),
                           ("/metrics", ["get"])):
        check(route in paths, "%s is not documented" % route)
        for m in methods:
            check(m in paths[route], "%s %s is not documented" % (m, route))
    statuses = {path + " " + m: set(op["responses"]) for path, _, m, op in operations()}
    for key, want in (("/check-original post", {"200", "400", "405", "409", "413", "415",
                                                "422", "503"}),
                      ("/fingerprint post", {"200", "400", "405", "413", "415"}),
                      ("/documents/{id} get", {"200", "400", "404", "503"}),
                      ("/documents/{id} delete", {"200", "404", "503"}),
                      ("/readyz get", {"200", "503"})):
        check(want <= statuses[key], "%s lacks %s" % (key, want - statuses[key]))
    codes = set(resolve({"$ref": "#/components/schemas/Error"})["properties"]["error"]
                ["properties"]["code"]["enum"])
    server = os.path.join(SOURCE_ROOT, "server")
    used = set()
    for name in ("api.c", "http.c", "request.c"):
        with open(os.path.join(server, name), encoding="utf-8") as f:
            used |= set(re.findall(r'"([a-z_]+)"', f.read()))
    for code in ("invalid_json", "invalid_field", "not_found", "method_not_allowed",
                 "id_conflict", "body_too_large", "unsupported_media_type", "text_too_short",
                 "storage_unavailable", "loading", "draining"):
        check(code in codes, "error code %s not in the Error schema" % code)
        check(code in used, "error code %s not used by the server" % code)


def main():
    with Server() as srv:
        T.run(srv)


if __name__ == "__main__":
    main()
