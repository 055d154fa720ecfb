// A platform's typed client of neardupd, as it would write one: the types
// are generated from proto/openapi.yaml by openapi-typescript with its
// default options (into api.d.ts beside this file, never committed), the
// calls go through openapi-fetch, and the program is compiled with tsc
// --strict. tests/integration/test_contract.py regenerates the types,
// compiles this and runs it against a live neardupd on loopback.
//
// What compiling proves: every request below type-checks against the
// generated types, optional fields left out (register, k, consistency,
// may_modify, ...), and the @ts-expect-error lines prove that a wrong enum
// value or a missing required field does not. What running proves: the
// server answers each call with the status and the fields these types
// promise (checked here), and every exchange is printed as one JSON line
// {"step", "method", "path", "status", "headers", "body"} for the driver,
// which validates each body against the contract's schema for that path,
// method and status.
//
// Environment: ND_URL (http://127.0.0.1:PORT), ND_TOKEN (the bearer token
// the server was given, named "platform"), ND_TEXTS (tests/integration/texts).

import { readFileSync } from "node:fs";
import { join } from "node:path";
import createClient, { type Middleware } from "openapi-fetch";
import type { components, paths } from "./api.js";

type Schemas = components["schemas"];
type ErrorCode = Schemas["Error"]["error"]["code"];

const baseUrl = need("ND_URL");
const token = need("ND_TOKEN");
const textsDir = need("ND_TEXTS");
const auth = { Authorization: `Bearer ${token}` };

function need(name: string): string {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
}

function text(name: string): string {
  return readFileSync(join(textsDir, `${name}.txt`), "utf8");
}

function expect(cond: unknown, what: string, got?: unknown): asserts cond {
  if (!cond) throw new Error(`${step}: ${what}${got === undefined ? "" : `: ${JSON.stringify(got)}`}`);
}

// Every exchange, printed for the driver. The middleware sees the path as
// the contract names it (/documents/{id}), and a copy of the answer.
let step = "start";
let exchanges = 0;
function emit(method: string, path: string, status: number, headers: Headers, raw: string): void {
  let body: unknown = null;
  if (raw !== "") {
    try {
      body = JSON.parse(raw);
    } catch {
      body = raw;
    }
  }
  const h: Record<string, string> = {};
  headers.forEach((v, k) => (h[k] = v));
  console.log(JSON.stringify({ step, method, path, status, headers: h, body }));
  exchanges++;
}
const recorder: Middleware = {
  async onResponse({ request, response, schemaPath }) {
    emit(request.method, schemaPath, response.status, response.headers, await response.clone().text());
    return undefined;
  },
};

const api = createClient<paths>({ baseUrl });
api.use(recorder);

// Checks an error answer: the status, and a body of the contract's Error
// shape with that code (typed: a code the contract does not list would not
// compile).
function expectError(
  error: Schemas["Error"] | undefined,
  response: Response,
  status: number,
  code: ErrorCode,
  field?: string,
): Schemas["Error"]["error"] {
  expect(response.status === status, `status ${response.status}, wanted ${status}`, error);
  expect(error && error.error.code === code, `code, wanted ${code}`, error);
  expect(typeof error.error.message === "string" && error.error.message.length > 0, "message", error);
  if (field !== undefined) expect(error.error.field === field, `field, wanted ${field}`, error);
  return error.error;
}

// A body sent as it is (text/plain, JSON lines) rather than as JSON.
const asIs = (b: unknown): string => (typeof b === "string" ? b : JSON.stringify(b));

const simhash = /^[0-9a-f]{16}$/;
const timestamp = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/;

const en1 = text("en1");
const zh1 = text("zh1");
const river = "news/2024/river"; // a '/' in an id: percent-encoded in every path
const market = "zh-market";

// ---- probes ----
step = "probes";
{
  const h = await api.GET("/healthz");
  expect(h.data?.status === "ok", "healthz", h.data);
  const r = await api.GET("/readyz");
  expect(r.data?.status === "ready", "readyz", r.data);
}

// ---- fingerprint: one text as JSON, a batch, text/plain ----
step = "fingerprint";
let enSimhash: string;
{
  const one = await api.POST("/fingerprint", { body: { text: en1 } });
  expect(one.data && "simhash" in one.data, "one fingerprint", one.data);
  expect(simhash.test(one.data.simhash) && one.data.chars > 0 && one.data.features > 0, "fields", one.data);
  enSimhash = one.data.simhash;

  const batch = await api.POST("/fingerprint", { body: { texts: [en1, "Hello, world."] } });
  expect(batch.data && "results" in batch.data && batch.data.results.length === 2, "batch", batch.data);
  expect(batch.data.results[0].simhash === enSimhash, "batch[0] = one", batch.data);

  const plain = await api.POST("/fingerprint", {
    body: en1,
    bodySerializer: asIs,
    headers: { "Content-Type": "text/plain; charset=utf-8" },
  });
  expect(plain.data && "simhash" in plain.data && plain.data.simhash === enSimhash, "text/plain", plain.data);
}

// ---- registrations: optional fields left out or given ----
step = "register";
let riverAt: string;
{
  const req: Schemas["CheckRequest"] = {
    id: river,
    text: en1,
    register: true,
    account: "river-notes",
    meta: { title: "Advanced Administration", url: "https://example.com/handbook/12" },
    reprint: "forbid",
    whitelist: [{ account: "partner" }], // may_modify, may_hide_source: absent means false
  };
  const { data, error, response } = await api.POST("/check-original", { body: req, headers: auth });
  expect(response.status === 200 && data, "status", error);
  expect(data.original && data.verdict === "original" && data.action === "publish", "original", data);
  expect(data.registered && data.id === river && data.matches.length === 0, "registered", data);
  expect(data.registered_at !== undefined && timestamp.test(data.registered_at), "registered_at", data);
  expect(data.simhash === enSimhash, "same simhash as /fingerprint", data);
  riverAt = data.registered_at;

  // The fewest fields: no register (a check), no k, no consistency.
  const probe = await api.POST("/check-original", { body: { text: zh1 } });
  expect(probe.data?.verdict === "original" && !probe.data.registered, "a check only", probe.data);

  const second = await api.POST("/check-original", {
    body: { id: market, text: zh1, register: true, account: "market-writer", k: 3, consistency: "local" },
    headers: auth,
  });
  expect(second.data?.registered === true, "second", second.data);
}

// ---- the stored record, by an id holding '/' ----
step = "document";
{
  const { data } = await api.GET("/documents/{id}", { params: { path: { id: river } } });
  expect(data && data.id === river && data.registered_at === riverAt, "document", data);
  expect(data.account === "river-notes" && data.meta !== null && data.meta.title === "Advanced Administration", "fields", data);
  const p = data.policy;
  expect(p && p.reprint === "forbid" && p.explicit, "policy", p);
  expect(p.whitelist.length === 1 && p.whitelist[0].account === "partner", "whitelist", p);
  expect(!p.whitelist[0].may_modify && !p.whitelist[0].may_hide_source, "defaults false", p);

  const latest = await api.GET("/documents/{id}", { params: { path: { id: river }, query: { consistency: "latest" } } });
  expect(latest.data?.id === river, "consistency latest", latest.data);

  const head = await api.HEAD("/documents/{id}", { params: { path: { id: river } } });
  expect(head.response.status === 200, "HEAD", head.response.status);
}

// ---- a duplicate with its matches ----
const repost = "Reposted from the admin handbook.\n\n" + en1.replaceAll(". ", ".  ");
step = "duplicate";
{
  const { data } = await api.POST("/check-original", {
    body: { id: "aggregator-77", account: "aggregator", text: repost },
    headers: auth, // a detection is recorded for a caller who may act for the account
  });
  expect(data && !data.original && data.verdict === "duplicate" && !data.registered, "duplicate", data);
  const m = data.matches[0];
  expect(m && m.id === river && (m.kind === "near_duplicate" || m.kind === "identical"), "match", data.matches);
  expect(m.resemblance >= 0.9 && m.similarity <= 1 && m.distance >= 0 && simhash.test(m.simhash), "figures", m);
  expect(m.registered_at === riverAt && m.meta?.url === "https://example.com/handbook/12", "match record", m);
  expect(m.account === "river-notes" && m.same_account === false && m.status === "active", "workflow fields", m);
  // The original forbids reprints and aggregator is on no whitelist.
  expect(data.action === "block" && data.source?.id === river, "action", data);

  // A named account counts only for a caller who may act for it: the
  // platform's token (a client may name its authors' accounts).
  const partner = await api.POST("/check-original", { body: { account: "partner", text: repost }, headers: auth });
  expect(partner.data?.action === "publish_as_reprint", "whitelisted", partner.data);
  expect(partner.data.show_source === true && partner.data.may_modify === false, "as reprint", partner.data);
}

// ---- a partial copy with its passages ----
const paras = en1.split("\n").filter((p) => p.trim() !== "");
const excerpt = `${paras[4]}\n\n${paras[5]}\n\nThis excerpt was quoted in a forum thread about provisioning, with a sentence of its own.`;
step = "partial_copy";
{
  const { data } = await api.POST("/check-original", {
    body: { id: "forum-9", account: "reader", text: excerpt },
    headers: auth,
  });
  expect(data && data.verdict === "partial_copy" && !data.original, "partial copy", data);
  expect(data.matches[0]?.kind === "partial_copy" && data.matches[0].containment >= 0.5, "match", data.matches);
  expect(data.passages.length > 0, "passages", data);
  let prev = 0;
  for (const p of data.passages) {
    expect(p.start >= prev && p.end > p.start && p.end <= [...excerpt].length, "passage", data.passages);
    prev = p.end;
  }
}

// ---- the workflow: policy, revoke/restore, copies, audit ----
step = "policy";
{
  const put = await api.PUT("/documents/{id}/policy", {
    params: { path: { id: river } },
    body: { reprint: "allow", whitelist: [{ account: "partner", may_hide_source: true }] },
    headers: auth,
  });
  expect(put.data?.reprint === "allow" && put.data.explicit, "PUT", put.data);
  expect(put.data.whitelist[0]?.may_hide_source === true && put.data.whitelist[0].may_modify === false, "entry", put.data);

  const patch = await api.PATCH("/documents/{id}/policy", {
    params: { path: { id: river } },
    body: { reprint: "forbid" },
    headers: auth,
  });
  expect(patch.data?.reprint === "forbid" && patch.data.whitelist.length === 1, "PATCH keeps the whitelist", patch.data);
}

step = "revoke";
{
  const rv = await api.POST("/documents/{id}/revoke", {
    params: { path: { id: river } },
    body: { reason: "appeal 7: licensed to the platform" },
    headers: auth,
  });
  expect(rv.data?.status === "revoked" && rv.data.id === river, "revoke", rv.data);
  // A revoked claim is listed but no evidence: the repost is original now.
  const again = await api.POST("/check-original", { body: { text: repost } });
  expect(again.data?.original === true && again.data.matches[0]?.status === "revoked", "revoked claim", again.data);
  const doc = await api.GET("/documents/{id}", { params: { path: { id: river } } });
  expect(doc.data?.status === "revoked", "document status", doc.data);

  // No body at all: the body is optional.
  const rs = await api.POST("/documents/{id}/restore", { params: { path: { id: river } }, headers: auth });
  expect(rs.data?.status === "active", "restore", rs.data);
}

step = "copies";
{
  // A second copy of the same original, then a page of one and the next.
  const c = await api.POST("/check-original", {
    body: { id: "aggregator-78", account: "aggregator", text: repost },
    headers: auth,
  });
  expect(c.data?.verdict === "duplicate", "second copy", c.data);
  const page1 = await api.GET("/documents/{id}/copies", { params: { path: { id: river }, query: { limit: 1 } } });
  expect(page1.data?.copies.length === 1 && page1.data.next_cursor !== null, "page 1", page1.data);
  const newest = page1.data.copies[0];
  expect(newest.id === "aggregator-78" && timestamp.test(newest.detected_at), "newest first", page1.data);
  const page2 = await api.GET("/documents/{id}/copies", {
    params: { path: { id: river }, query: { limit: 10, cursor: page1.data.next_cursor } },
  });
  const ids = page2.data?.copies.map((x) => x.id) ?? [];
  expect(ids.includes("aggregator-77") && ids.includes("forum-9") && !ids.includes("aggregator-78"), "page 2", page2.data);
  const forum = page2.data?.copies.find((x) => x.id === "forum-9");
  expect(forum?.kind === "partial_copy" && forum.account === "reader", "the partial copy", forum);
}

step = "audit";
{
  const { data } = await api.GET("/audit", { params: { query: { document: river, limit: 10 } }, headers: auth });
  expect(data, "audit");
  const actions = data.entries.map((e) => e.action);
  expect(JSON.stringify(actions) === JSON.stringify(["restore", "revoke", "policy", "policy", "register"]), "actions", actions);
  for (const e of data.entries) {
    expect(e.client === "platform" && e.document === river && timestamp.test(e.at), "entry", e);
  }
  expect(data.next_cursor === null, "one page", data);
}

step = "import";
{
  const lines = [
    { id: "import-1", account: "archive", registered_at: "2020-01-02T03:04:05Z", text: text("en2") },
    { id: "import-2", registered_at: 1577934245000001, text: text("en2").replace("\n", "\n\n") },
    { id: "import-3", text: "too short" },
  ];
  const { data } = await api.POST("/import", {
    params: { query: { predate: false } },
    body: lines.map((l) => JSON.stringify(l)).join("\n"),
    bodySerializer: asIs,
    headers: { ...auth, "Content-Type": "application/x-ndjson" },
  });
  expect(data && data.summary.complete && data.summary.lines === 3, "import", data);
  expect(data.summary.imported === 1 && data.summary.duplicates === 1 && data.summary.errors === 1, "counts", data);
  const refused = data.events.find((e) => e.line === 3);
  expect(refused?.code === "text_too_short", "refused line", data.events);
  expect(data.events.find((e) => e.line === 2)?.source === "import-1", "duplicate line", data.events);
}

step = "replica";
{
  const { data } = await api.GET("/replica", { headers: auth });
  expect(data && data.replicated === false && data.documents === 3 && simhash.test(data.digest), "replica", data);
}

step = "delete";
{
  const del = await api.DELETE("/documents/{id}", { params: { path: { id: market } }, headers: auth });
  expect(del.data?.deleted === true && del.data.id === market, "delete", del.data);
  const gone = await api.GET("/documents/{id}", { params: { path: { id: market } } });
  const e = expectError(gone.error, gone.response, 404, "not_found");
  expect(e.id === market, "id", e);
}

// ---- each error shape ----
step = "invalid_json";
{
  const { error, response } = await api.POST("/check-original", {
    body: { text: en1 },
    bodySerializer: () => '{"text": ',
  });
  const e = expectError(error, response, 400, "invalid_json");
  expect(e.line === 1 && typeof e.column === "number", "line, column", e);
}

step = "invalid_field";
{
  const k = await api.POST("/check-original", { body: { text: en1, k: 12 } });
  expectError(k.error, k.response, 400, "invalid_field", "k");
  const noId = await api.POST("/check-original", { body: { text: en1, register: true }, headers: auth });
  expectError(noId.error, noId.response, 400, "invalid_field", "id");
  const c = await api.POST("/check-original", {
    // @ts-expect-error consistency is "local" or "latest" in the contract
    body: { text: en1, consistency: "strong" },
  });
  expectError(c.error, c.response, 400, "invalid_field", "consistency");
  const r = await api.PUT("/documents/{id}/policy", {
    params: { path: { id: river } },
    // @ts-expect-error reprint is "allow" or "forbid"
    body: { reprint: "maybe" },
    headers: auth,
  });
  expectError(r.error, r.response, 400, "invalid_field", "reprint");
  const cur = await api.GET("/documents/{id}/copies", { params: { path: { id: river }, query: { cursor: "x" } } });
  expectError(cur.error, cur.response, 400, "invalid_field", "cursor");
  // @ts-expect-error text is required
  const noText = await api.POST("/check-original", { body: { id: "x" } });
  expectError(noText.error, noText.response, 400, "invalid_field", "text");
}

step = "unauthorized";
{
  const { error, response } = await api.POST("/check-original", { body: { id: "anon-1", text: zh1, register: true } });
  expectError(error, response, 401, "unauthorized");
  expect((response.headers.get("WWW-Authenticate") ?? "").startsWith('Bearer realm="neardup"'), "WWW-Authenticate");
  const audit = await api.GET("/audit", { headers: { Authorization: "Bearer not-the-token-at-all" } });
  expectError(audit.error, audit.response, 401, "unauthorized");
  expect((audit.response.headers.get("WWW-Authenticate") ?? "").includes('error="invalid_token"'), "invalid_token");
}

step = "forbidden";
{
  // A valid token of another account: it may not change the river's policy.
  const other = { Authorization: `Bearer ${need("ND_OTHER_TOKEN")}` };
  const { error, response } = await api.PATCH("/documents/{id}/policy", {
    params: { path: { id: river } },
    body: { reprint: "allow" },
    headers: other,
  });
  expectError(error, response, 403, "forbidden");
}

step = "not_found";
{
  const r = await api.POST("/documents/{id}/revoke", { params: { path: { id: "no-such" } }, headers: auth });
  const e = expectError(r.error, r.response, 404, "not_found");
  expect(e.id === "no-such", "id", e);
}

step = "id_conflict";
{
  const { error, response } = await api.POST("/check-original", {
    body: { id: river, text: zh1, register: true },
    headers: auth,
  });
  const e = expectError(error, response, 409, "id_conflict");
  expect(e.id === river, "id", e);
}

step = "text_too_short";
{
  const { error, response } = await api.POST("/check-original", { body: { text: "Too short to judge." } });
  const e = expectError(error, response, 422, "text_too_short");
  expect(typeof e.chars === "number" && e.min_chars === 300, "chars, min_chars", e);
}

step = "unsupported_media_type";
{
  const { error, response } = await api.POST("/check-original", {
    body: { text: en1 },
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    bodySerializer: () => "text=hello",
  });
  expectError(error, response, 415, "unsupported_media_type");
}

step = "body_too_large";
{
  // The server runs with --max-body 64K.
  const { error, response } = await api.POST("/fingerprint", { body: { text: "x".repeat(70000) } });
  expectError(error, response, 413, "body_too_large");
}

step = "empty_body";
{
  const { error, response } = await api.POST("/import", {
    body: "\n",
    bodySerializer: asIs,
    headers: { ...auth, "Content-Type": "application/x-ndjson" },
  });
  expectError(error, response, 400, "empty_body");
}

step = "method_not_allowed";
{
  // A method the contract does not list for the path: the typed client has
  // no call for it, so plain fetch; the answer is still the Error shape.
  const response = await fetch(`${baseUrl}/fingerprint`);
  const raw = await response.text();
  emit("GET", "/fingerprint", response.status, response.headers, raw);
  const body = JSON.parse(raw) as Schemas["Error"];
  expectError(body, response, 405, "method_not_allowed");
  expect(response.headers.get("Allow") === "POST", "Allow", response.headers.get("Allow"));
}

console.log(`client: ${exchanges} exchanges, every check passed`);
