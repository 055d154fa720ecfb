"""The HTTP contract is data: replay every example of proto/openapi.yaml
against a running neardupd, in document order (the rules are in the file's
info.description), and validate every example and every JSON answer
against its schema with a real JSON Schema validator (Debian's python3-yaml
and python3-jsonschema, draft 2020-12 as OpenAPI 3.1 uses). Valid request
examples must validate, the negative ones (x-negative-examples) must not.
Also: the schema and the server agree on which requests are valid (a small
schema-driven run over every field's edge values), the links lead where
they say, and every path, method and documented status the server answers
is in the file."""

import json
import os
import re
import sys
from urllib.parse import quote, urlencode

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
from harness import (HEX16, RFC3339_US, SOURCE_ROOT, Runner, Server, check,  # noqa: E402
                     load_texts)

T = Runner("test_openapi")
SPEC_PATH = os.path.join(SOURCE_ROOT, "proto", "openapi.yaml")
with open(SPEC_PATH, encoding="utf-8") as f:
    SPEC_TEXT = f.read()
SPEC = yaml.safe_load(SPEC_TEXT)
METHODS = ("get", "head", "post", "put", "delete", "patch", "options")
SHAPE_ONLY = {
    "simhash": lambda v: isinstance(v, str) and HEX16.match(v),
    "registered_at": lambda v: isinstance(v, str) and RFC3339_US.match(v),
    "chars": lambda v: isinstance(v, int) and v >= 0,
    "features": lambda v: isinstance(v, int) and v >= 0,
    "distance": lambda v: isinstance(v, int) and 0 <= v <= 64,
    "similarity": lambda v: isinstance(v, (int, float)) and 0 <= v <= 1,
    # estimates of the sketch: their exact values follow the
    # sketch's parameters; test_verdict checks them against the texts
    "resemblance": lambda v: isinstance(v, (int, float)) and 0 <= v <= 1,
    "containment": lambda v: isinstance(v, (int, float)) and 0 <= v <= 1,
    "start": lambda v: isinstance(v, int) and v >= 0,
    "end": lambda v: isinstance(v, int) and v >= 0,
    "message": lambda v: isinstance(v, str) and v,
    "line": lambda v: isinstance(v, int),
    "column": lambda v: isinstance(v, int),
    # journal times and opaque cursors
    "detected_at": lambda v: isinstance(v, str) and RFC3339_US.match(v),
    "at": lambda v: isinstance(v, str) and RFC3339_US.match(v),
    "next_cursor": lambda v: v is None or (isinstance(v, str) and v),
    "seconds": lambda v: isinstance(v, (int, float)) and v >= 0,  # POST /import
    # GET /replica: whatever the examples before it registered
    "documents": lambda v: isinstance(v, int) and v >= 0,
    "digest": lambda v: isinstance(v, str) and HEX16.match(v),
}


def resolve(node):
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        check(ref.startswith("#/"), "external $ref %s" % ref)
        node = SPEC
        for part in ref[2:].split("/"):
            node = node[part]
    return node


# ---- JSON Schema (2020-12) through jsonschema; $refs resolve in the spec ----

def schema_errors(value, schema):
    """The validator's messages for value against schema (a fragment of the
    spec; its "#/components/..." references resolve in the spec)."""
    root = dict(schema)
    root["components"] = SPEC["components"]
    validator = jsonschema.Draft202012Validator(root)
    return [e.message for e in validator.iter_errors(value)]


def validate(value, schema, path="$"):
    errors = schema_errors(value, schema)
    check(not errors, "%s: %r does not validate: %s" % (path, value, errors[:3]))


def is_valid(value, schema):
    return not schema_errors(value, schema)


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


def request_examples(op, kinds=("examples", "x-negative-examples")):
    """{name: (content type, example object)} of the operation's request
    body: the valid examples and the negative ones."""
    out = {}
    body = resolve(op.get("requestBody", {}))
    for ctype, media in body.get("content", {}).items():
        for kind in kinds:
            for name, ex in media.get(kind, {}).items():
                out[name] = (ctype, resolve(ex))
    return out


def path_params(item, op):
    return [resolve(p) for p in item.get("parameters", []) + op.get("parameters", [])
            if resolve(p).get("in") == "path"]


def response_examples(op):
    for status, resp in op.get("responses", {}).items():
        resp = resolve(resp)
        for ctype, media in resp.get("content", {}).items():
            for name, ex in media.get("examples", {}).items():
                yield int(status), ctype, media.get("schema"), name, resolve(ex), resp


def path_for(path, item, op, name):
    """The path with the path parameters' examples of that name, and the
    query parameters that have one (?text=true of found_text)."""
    for p in path_params(item, op):
        ex = p.get("examples", {}).get(name) or p.get("x-negative-examples", {}).get(name)
        check(ex is not None, "no example %s for {%s} of %s" % (name, p["name"], path))
        path = path.replace("{%s}" % p["name"], quote(ex["value"], safe=""))
    query = [(p["name"], p["examples"][name]["value"])
             for p in (resolve(q) for q in item.get("parameters", []) + op.get("parameters", []))
             if p.get("in") == "query" and name in p.get("examples", {})]
    if query:
        path += "?" + urlencode(query)
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
            validate(actual, schema, where)
        try:
            compare(ex["value"], actual)
        except AssertionError as e:
            raise AssertionError("%s: %s" % (where, e)) from None
    else:
        text = data.decode()
        for line in ex["value"].splitlines():
            check(line in text, "%s: %r not in the answer" % (where, line))
    return "replayed"


@T.test
def examples_validate(srv):
    """Every valid example validates against its schema, every negative one
    does not: a schema-driven tester that takes the spec's examples as valid
    requests gets only valid ones."""
    counts = {"valid": 0, "negative": 0, "responses": 0}
    for path, item, method, op in operations():
        body = resolve(op.get("requestBody", {}))
        for ctype, media in body.get("content", {}).items():
            for kind, want in (("examples", True), ("x-negative-examples", False)):
                for name, ex in media.get(kind, {}).items():
                    ok = is_valid(resolve(ex)["value"], media["schema"])
                    check(ok == want, "%s %s %s %s: valid %s" % (method, path, kind, name, ok))
                    counts["valid" if want else "negative"] += 1
        for p in path_params(item, op):
            for kind, want in (("examples", True), ("x-negative-examples", False)):
                for name, ex in p.get(kind, {}).items():
                    ok = is_valid(ex["value"], p["schema"])
                    check(ok == want, "{%s} %s %s: valid %s" % (p["name"], kind, name, ok))
        for status, ctype, schema, name, ex, resp in response_examples(op):
            if schema:
                validate(ex["value"], schema, "%s %s %s example %s" % (method, path, status, name))
                counts["responses"] += 1
    for name, sch in SPEC["components"]["schemas"].items():
        for i, ex in enumerate(sch.get("examples", [])):
            validate(ex, sch, "%s example %d" % (name, i))
    print("     %(valid)d valid and %(negative)d negative request examples, "
          "%(responses)d response examples" % counts)
    check(counts["negative"] >= 6 and counts["valid"] >= 8, counts)


def example_sites(node, where="#"):
    """Every example in the document beside the schema it illustrates, as
    (where, schema, value, valid): the `example` and `examples` of a media
    type, parameter or header (valid), their `x-negative-examples` (not
    valid), and the `examples` list of a schema, wherever it is (paths,
    components, webhooks, nested properties)."""
    if isinstance(node, list):
        for i, v in enumerate(node):
            yield from example_sites(v, "%s/%d" % (where, i))
        return
    if not isinstance(node, dict):
        return
    schema = node.get("schema")
    if isinstance(schema, dict):
        if "example" in node:
            yield where + "/example", schema, node["example"], True
        for kind, valid in (("examples", True), ("x-negative-examples", False)):
            for name, ex in (node.get(kind) or {}).items():
                ex = resolve(ex)
                if "value" in ex:
                    yield "%s/%s/%s" % (where, kind, name), schema, ex["value"], valid
    if isinstance(node.get("examples"), list) and "$ref" not in node:
        for i, v in enumerate(node["examples"]):
            yield "%s/examples/%d" % (where, i), node, v, True
    for k, v in node.items():
        if k not in ("example", "examples", "x-negative-examples"):
            yield from example_sites(v, "%s/%s" % (where, k.replace("/", "~1")))


@T.test
def every_example_validates(srv):
    """Besides the request and response examples above, every
    example anywhere in the file validates against its schema (a negative
    one does not): the singular `example` of a media type, the examples of
    query and header parameters and of response headers, the `examples` of
    schemas inside properties, parameters and the webhooks section. And
    every request example gets its documented answer: each one (valid or
    negative) has a response example of the same name in its operation,
    which examples_replay sends to the server and compares, unless that
    answer is marked x-replay: false."""
    n = 0
    for where, schema, value, valid in example_sites(SPEC):
        errors = schema_errors(value, schema)
        check(not errors if valid else bool(errors), "%s: %r %s" % (
            where, value, ("does not validate: %s" % errors[:3]) if valid else
            "validates, but it is a negative example"))
        n += 1
    unanswered = []
    for path, item, method, op in operations():
        answers = {name for _, _, _, name, _, _ in response_examples(op)}
        for name in request_examples(op):
            if name not in answers:
                unanswered.append("%s %s example %s" % (method.upper(), path, name))
    check(not unanswered, "request examples without a documented answer (a response "
          "example of the same name): %s" % unanswered)
    print("     %d examples, each against its schema" % n)
    check(n >= 40, n)


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
    # a shared response marked x-replay: false (storage_full) counts once per
    # operation that refers to it: 8 before the workflow's six operations; and
    # GET /replica's replicated example (test_replicas checks it);
    # GET /events refers to it too; GET /webhooks' retrying and the
    # resume's 202 need a subscription and a receiver (test_webhooks checks
    # both); and POST /compare's 413 (BodyTooLarge, shared) and 409
    # text_not_kept (a store without texts: test_compare checks it)
    check(counts["skipped"] <= 20, counts)


TEXTS = load_texts()


def accepted(status):
    """The server took the request as valid: an answer, or a refusal the
    schema cannot express (422 too short, 409 id held by another text)."""
    return status in (200, 404, 409, 422)


@T.test
def schema_and_server_agree(srv):
    """A small schema-driven run: edge values of every field of both request
    bodies and of the path id. A request the schema calls valid is accepted
    (2xx, or 404/409/422), one it calls invalid is refused with 400, and
    every JSON answer validates against the documented schema of its status
    (null fields, k 3.0, id length in
    characters, control characters in path ids, register without id)."""
    check_schema = resolve({"$ref": "#/components/schemas/CheckRequest"})
    fp_schema = SPEC["paths"]["/fingerprint"]["post"]["requestBody"]["content"][
        "application/json"]["schema"]
    text = TEXTS["en2"]
    n = 0
    cases = []
    for v in ("", "x" * 256, "x" * 257, "é" * 256, "é" * 257, "文" * 256, "\U0001F600" * 256,
              "a\nb", "a\u007fb", "a\u0085b", "a/b c?d#e", None, 5, ["x"]):
        cases.append({"text": text, "id": v})
    for v in (0, 8, 9, -1, 3.0, 2.5, 1e1, "3", True, None):
        cases.append({"text": text, "k": v})
    for v in (True, False, None, "yes", 1):
        cases.append({"text": text, "register": v})
        cases.append({"text": text, "register": v, "id": "agree-reg"})
    for v in ({}, {"a": [1, {"b": None}]}, {"s": "\u0000"}, [], None, "x", 3):
        cases.append({"text": text, "meta": v})
        cases.append({"text": text, "meta": v, "id": "agree-meta", "register": True})
    for v in (None, 5, ["x"], "short"):
        cases.append({"text": v})
    cases.append({"id": "agree-notext"})
    cases.append(dict({"text": text}, **{"f%d" % i: i for i in range(31)}))
    cases.append(dict({"text": text}, **{"f%d" % i: i for i in range(32)}))
    fp_cases = [{"text": "a"}, {"texts": ["a", "b"]}, {"texts": []}, {"text": "a", "texts": ["b"]},
                {"text": None}, {"texts": None}, {"text": "a", "texts": None},
                {"texts": ["a", None]}, {"texts": "a"}, {}, {"text": 5}]
    answers = SPEC["paths"]["/check-original"]["post"]["responses"]
    for url, schema, bodies in (("/check-original", check_schema, cases),
                                ("/fingerprint", fp_schema, fp_cases)):
        for req in bodies:
            valid = is_valid(req, schema)
            status, hdrs, data = srv.request("POST", url, json.dumps(req).encode(),
                                             {"Content-Type": "application/json"})
            shown = {k: ("<%d chars>" % len(v) if k == "text" and isinstance(v, str) and
                         len(v) > 40 else v) for k, v in req.items()}
            check(accepted(status) == valid, "%s %r: schema says %s, server %s %r" % (
                url, shown, "valid" if valid else "invalid", status, data[:200]))
            if not valid:
                check(status == 400, "%s %r: %s" % (url, req, status))
            if url == "/check-original":
                resp = resolve(answers[str(status)])
                validate(json.loads(data), resp["content"]["application/json"]["schema"],
                         "%s %r -> %s" % (url, req, status))
            n += 1
    param = path_params(SPEC["paths"]["/documents/{id}"], {})[0]
    for v in ("x" * 256, "x" * 257, "é" * 256, "é" * 257, "a\tb", "a\u0085b", "a/b", "%41"):
        valid = is_valid(v, param["schema"])
        status, _, data = srv.request("GET", "/documents/" + quote(v, safe=""))
        check(accepted(status) == valid, "GET id %r: schema says %s, server %s" % (
            v, valid, status))
        n += 1
    print("     %d requests, schema and server agree on each" % n)


@T.test
def links_lead_to_the_document(srv):
    """The links of a /check-original answer (registered) name operations
    that answer for the registered document, as a stateful tester follows
    them: GET then DELETE, each answer valid against its schema."""
    post = SPEC["paths"]["/check-original"]["post"]
    links = resolve(post["responses"]["200"])["links"]
    check({"getDocument", "deleteDocument"} <= set(links), links)
    by_id = {op["operationId"]: (path, method, op) for path, _, method, op in operations()}
    req = {"id": "linked/1 é", "text": TEXTS["zh4"], "register": True, "meta": {"a": 1}}
    status, _, data = srv.request("POST", "/check-original", json.dumps(req).encode(),
                                  {"Content-Type": "application/json"})
    body = json.loads(data)
    check(status == 200 and body["registered"], body)
    for name in ("getDocument", "deleteDocument"):
        link = links[name]
        path, method, op = by_id[link["operationId"]]
        url = path
        for pname, expr in link["parameters"].items():
            check(expr.startswith("$response.body#/"), expr)
            value = body
            for part in expr[len("$response.body#/"):].split("/"):
                value = value[part]
            url = url.replace("{%s}" % pname, quote(value, safe=""))
        status, _, data = srv.request(method.upper(), url)
        check(status == 200, "%s %s: %s" % (method, url, status))
        resp = resolve(op["responses"]["200"])
        validate(json.loads(data), resp["content"]["application/json"]["schema"], name)
        check(json.loads(data)["id"] == req["id"], data)


@T.test
def every_route_documented(srv):
    paths = SPEC["paths"]
    for route, methods in (("/fingerprint", ["post"]), ("/check-original", ["post"]),
                           ("/documents/{id}", ["get", "head", "delete"]),
                           ("/healthz", ["get", "head"]), ("/readyz", ["get", "head"]),
                           ("/metrics", ["get"]), ("/documents/{id}/policy", ["put", "patch"]),
                           ("/documents/{id}/revoke", ["post"]),
                           ("/documents/{id}/restore", ["post"]),
                           ("/documents/{id}/copies", ["get"]), ("/audit", ["get"]), ("/events", ["get"]),
                           ("/import", ["post"])):
        check(route in paths, "%s is not documented" % route)
        for m in methods:
            check(m in paths[route], "%s %s is not documented" % (m, route))
    statuses = {path + " " + m: set(op["responses"]) for path, _, m, op in operations()}
    for key, want in (("/check-original post", {"200", "400", "405", "409", "413", "415",
                                                "422", "503"}),
                      ("/fingerprint post", {"200", "400", "405", "413", "415"}),
                      ("/documents/{id} get", {"200", "400", "404", "503"}),
                      ("/documents/{id} delete", {"200", "400", "404", "503"}),
                      ("/documents/{id} head", {"200", "400", "404"}),
                      ("/readyz get", {"200", "503"})):
        check(want <= statuses[key], "%s lacks %s" % (key, want - statuses[key]))
    codes = set(resolve({"$ref": "#/components/schemas/Error"})["properties"]["error"]
                ["properties"]["code"]["enum"])
    server = os.path.join(SOURCE_ROOT, "server")
    used = set()
    api_files = sorted("api/" + n for n in os.listdir(os.path.join(server, "api"))
                       if n.endswith(".c"))
    for name in api_files + ["net/http.c", "core/request.c"]:
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
