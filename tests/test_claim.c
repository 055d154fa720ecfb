/* test_claim.c - server/registry/claim.c: reprint policies (parse, validate,
 * serialize, the check's allocation-free scan agreeing with the parse) and
 * the action rule of issue 13 at every edge: the earliest claim decides
 * (not the most similar), same-account and revoked claims are not
 * evidence, a whitelist entry beats forbid, may_hide_source, the server's
 * default for a policy without a rule, a request without an account. */
#include "claim.h"
#include "unit.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define S(x) x, strlen(x)

static nd_claim claim(int64_t at, const char *account, const char *policy, int status)
{
    return (nd_claim){.registered_at_us = at,
                      .account = account,
                      .account_len = account ? strlen(account) : 0,
                      .policy = policy,
                      .policy_len = policy ? strlen(policy) : 0,
                      .status = status};
}

static nd_claim_decision decide(const nd_claim *c, size_t n, const char *account, int def)
{
    nd_claim_decision d;
    nd_claim_decide(c, n, account, account ? strlen(account) : 0, def, &d);
    return d;
}

static void names(void)
{
    CHECK(strcmp(nd_action_name(ND_ACTION_PUBLISH), "publish") == 0);
    CHECK(strcmp(nd_action_name(ND_ACTION_REPRINT), "publish_as_reprint") == 0);
    CHECK(strcmp(nd_action_name(ND_ACTION_BLOCK), "block") == 0);
    CHECK(strcmp(nd_reprint_name(ND_REPRINT_ALLOW), "allow") == 0);
    CHECK(strcmp(nd_reprint_name(ND_REPRINT_FORBID), "forbid") == 0);
    CHECK(nd_reprint_name(ND_REPRINT_UNSET) == NULL);
    CHECK(strcmp(nd_status_name(ND_STATUS_ACTIVE), "active") == 0);
    CHECK(strcmp(nd_status_name(ND_STATUS_REVOKED), "revoked") == 0);
    CHECK(strcmp(nd_status_name(ND_STATUS_SUPERSEDED), "superseded") == 0);
}

static void parse_and_serialize(void)
{
    nd_policy p;
    char err[256], *out;
    size_t len;
    CHECK(nd_policy_parse(NULL, 0, &p, err, sizeof(err)) == 0 && p.reprint == 0 &&
          !p.has_whitelist);
    CHECK(nd_policy_serialize(&p, &out, &len) == 0 && out == NULL && len == 0, "no policy: NULL");
    const char *in = "{ \"whitelist\": [ {\"account\": \"b\\u00e9\", \"may_hide_source\": true},"
                     " {\"account\": \"c\", \"may_modify\": true, \"x\": [1, {}]} ],"
                     " \"reprint\": \"forbid\", \"other\": null }";
    REQUIRE(nd_policy_parse(S(in), &p, err, sizeof(err)) == 0, "%s", err);
    CHECK(p.reprint == ND_REPRINT_FORBID && p.has_whitelist && p.n == 2);
    CHECK(strcmp(p.entries[0].account, "b\xc3\xa9") == 0 && !p.entries[0].may_modify &&
          p.entries[0].may_hide_source);
    CHECK(strcmp(p.entries[1].account, "c") == 0 && p.entries[1].may_modify &&
          !p.entries[1].may_hide_source);
    REQUIRE(nd_policy_serialize(&p, &out, &len) == 0 && out);
    const char *want = "{\"reprint\":\"forbid\",\"whitelist\":[{\"account\":\"b\xc3\xa9\","
                       "\"may_modify\":false,\"may_hide_source\":true},{\"account\":\"c\","
                       "\"may_modify\":true,\"may_hide_source\":false}]}";
    CHECK(strcmp(out, want) == 0 && len == strlen(want), "%s", out);
    nd_policy q;
    CHECK(nd_policy_parse(out, len, &q, err, sizeof(err)) == 0 && q.n == 2, "round trip");
    nd_policy_finish(&q);
    free(out);
    nd_policy_finish(&p);
    CHECK(p.n == 0 && p.entries == NULL, "finish zeroes");
    nd_policy_finish(NULL);

    /* Only the fields given. */
    REQUIRE(nd_policy_parse(S("{\"reprint\":\"allow\"}"), &p, err, sizeof(err)) == 0);
    REQUIRE(nd_policy_serialize(&p, &out, &len) == 0);
    CHECK(strcmp(out, "{\"reprint\":\"allow\"}") == 0, "%s", out);
    free(out);
    nd_policy_finish(&p);
    REQUIRE(nd_policy_parse(S("{\"whitelist\":[]}"), &p, err, sizeof(err)) == 0);
    CHECK(p.has_whitelist && p.n == 0 && p.reprint == ND_REPRINT_UNSET);
    REQUIRE(nd_policy_serialize(&p, &out, &len) == 0);
    CHECK(strcmp(out, "{\"whitelist\":[]}") == 0, "an empty list is kept: %s", out);
    free(out);
    nd_policy_finish(&p);
    REQUIRE(nd_policy_parse(S("{}"), &p, err, sizeof(err)) == 0);
    REQUIRE(nd_policy_serialize(&p, &out, &len) == 0);
    CHECK(out == NULL, "{} sets nothing: no policy");
    nd_policy_finish(&p);
}

static void parse_refuses(void)
{
    static const struct {
        const char *in;
        int rc;
        const char *field; /* in the message */
    } bad[] = {
        {"[]", -EINVAL, "object"},
        {"{\"reprint\":\"maybe\"}", -EINVAL, "reprint"},
        {"{\"reprint\":null}", -EINVAL, "reprint"},
        {"{\"reprint\":\"allow\",\"reprint\":\"forbid\"}", -EINVAL, "policy"},
        {"{\"whitelist\":{}}", -EINVAL, "whitelist"},
        {"{\"whitelist\":[1]}", -EINVAL, "whitelist[0]"},
        {"{\"whitelist\":[{\"may_modify\":true}]}", -EINVAL, "whitelist[0].account"},
        {"{\"whitelist\":[{\"account\":\"\"}]}", -EINVAL, "whitelist[0].account"},
        {"{\"whitelist\":[{\"account\":\"a\\u0001\"}]}", -EINVAL, "whitelist[0].account"},
        {"{\"whitelist\":[{\"account\":\"a\\u0000b\"}]}", -EINVAL, "policy"},
        {"{\"whitelist\":[{\"account\":\"a\",\"may_modify\":1}]}", -EINVAL,
         "whitelist[0].may_modify"},
        {"{\"whitelist\":[{\"account\":\"a\",\"may_hide_source\":\"yes\"}]}", -EINVAL,
         "whitelist[0].may_hide_source"},
        {"{\"whitelist\":[{\"account\":\"a\"},{\"account\":\"b\"},{\"account\":\"a\"}]}", -EEXIST,
         "whitelist[2].account"},
        {"{\"reprint\":", -EINVAL, "policy"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        nd_policy p;
        char err[256];
        int rc = nd_policy_parse(S(bad[i].in), &p, err, sizeof(err));
        CHECK(rc == bad[i].rc && strstr(err, bad[i].field) && p.n == 0 && p.entries == NULL,
              "%s: %d %s", bad[i].in, rc, err);
        nd_policy_view v;
        if (bad[i].rc == -EINVAL && i != 3 && i != 7 && i != 8 &&
            i != 9) /* the scan checks syntax and types */
            CHECK(nd_policy_lookup(S(bad[i].in), S("a"), &v) == -EINVAL && !v.listed, "%s",
                  bad[i].in);
    }
    /* 256 entries are taken, 257 are not; the 257th add too. */
    size_t cap = 300 * 40 + 64;
    char *buf = malloc(cap);
    REQUIRE(buf);
    for (int n = 256; n <= 257; n++) {
        size_t o = (size_t)snprintf(buf, cap, "{\"whitelist\":[");
        for (int i = 0; i < n; i++)
            o += (size_t)snprintf(buf + o, cap - o, "%s{\"account\":\"acct-%d\"}", i ? "," : "", i);
        o += (size_t)snprintf(buf + o, cap - o, "]}");
        nd_policy p;
        char err[128];
        int rc = nd_policy_parse(buf, o, &p, err, sizeof(err));
        CHECK(n == 256 ? rc == 0 && p.n == 256 : rc == -E2BIG, "%d entries: %d", n, rc);
        if (rc == 0) {
            CHECK(nd_policy_add(&p, S("one-more"), false, false) == -E2BIG);
            CHECK(nd_policy_add(&p, S("acct-7"), false, false) == -EEXIST);
            nd_policy_view v;
            CHECK(nd_policy_lookup(buf, o, S("acct-255"), &v) == 0 && v.listed);
        }
        nd_policy_finish(&p);
    }
    free(buf);
    nd_policy p = {0};
    CHECK(nd_policy_add(&p, "", 0, false, false) == -EINVAL);
    char big[ND_POLICY_ACCOUNT_MAX + 2];
    memset(big, 'x', sizeof(big));
    CHECK(nd_policy_add(&p, big, ND_POLICY_ACCOUNT_MAX + 1, false, false) == -EINVAL);
    CHECK(nd_policy_add(&p, big, ND_POLICY_ACCOUNT_MAX, false, false) == 0);
    nd_policy_finish(&p);
}

/* The check's scan reads what the parse reads. */
static void lookup_agrees(void)
{
    nd_policy_view v;
    CHECK(nd_policy_lookup(NULL, 0, S("a"), &v) == 0 && v.reprint == 0 && !v.listed);
    const char *pol =
        "{\"reprint\":\"forbid\",\"whitelist\":[{\"account\":\"a\\\"q\","
        "\"may_modify\":true},{\"may_hide_source\":true,\"account\":\"\\u5f20\\u4e09\"},"
        "{\"account\":\"\\ud83d\\ude00\"}]}";
    CHECK(nd_policy_lookup(S(pol), S("a\"q"), &v) == 0 && v.reprint == ND_REPRINT_FORBID &&
          v.listed && v.may_modify && !v.may_hide_source);
    CHECK(nd_policy_lookup(S(pol), S("\xe5\xbc\xa0\xe4\xb8\x89"), &v) == 0 && v.listed &&
              !v.may_modify && v.may_hide_source,
          "escaped CJK account");
    CHECK(nd_policy_lookup(S(pol), S("\xf0\x9f\x98\x80"), &v) == 0 && v.listed, "surrogate pair");
    CHECK(nd_policy_lookup(S(pol), S("a"), &v) == 0 && !v.listed, "a prefix is not a match");
    CHECK(nd_policy_lookup(S(pol), S("a\"qq"), &v) == 0 && !v.listed);
    CHECK(nd_policy_lookup(S(pol), NULL, 0, &v) == 0 && !v.listed && v.reprint == ND_REPRINT_FORBID,
          "anonymous: never listed");
    /* Every entry of a parsed policy is found by the scan of its serialization. */
    nd_policy p;
    char err[128], *out;
    size_t len;
    REQUIRE(nd_policy_parse(S(pol), &p, err, sizeof(err)) == 0, "%s", err);
    REQUIRE(nd_policy_serialize(&p, &out, &len) == 0);
    for (size_t i = 0; i < p.n; i++) {
        CHECK(nd_policy_lookup(out, len, p.entries[i].account, p.entries[i].account_len, &v) == 0 &&
                  v.listed && v.may_modify == p.entries[i].may_modify &&
                  v.may_hide_source == p.entries[i].may_hide_source,
              "entry %zu", i);
    }
    free(out);
    nd_policy_finish(&p);
    CHECK(nd_policy_lookup(S("{\"reprint\":\"allow\"} x"), S("a"), &v) == -EINVAL, "trailing");
}

/* The decision, edge by edge. Times: smaller = earlier. */
static void decide_edges(void)
{
    const char *allow = "{\"reprint\":\"allow\"}", *forbid = "{\"reprint\":\"forbid\"}";
    nd_claim_decision d;

    /* No matches: publish, whoever asks. */
    d = decide(NULL, 0, "u", ND_REPRINT_FORBID);
    CHECK(d.action == ND_ACTION_PUBLISH && d.source == SIZE_MAX && !d.show_source && !d.may_modify);

    /* The earliest forbids, a later one allows: block (the earliest decides,
     * whatever the order they come in). */
    nd_claim c1[] = {claim(300, "late", allow, 0), claim(100, "early", forbid, 0),
                     claim(200, "mid", allow, 0)};
    d = decide(c1, 3, "u", ND_REPRINT_ALLOW);
    CHECK(d.action == ND_ACTION_BLOCK && d.source == 1 && !d.show_source && !d.may_modify);
    /* ... and the other way round: earliest allows, a later forbids. */
    nd_claim c1b[] = {claim(100, "early", allow, 0), claim(200, "late", forbid, 0)};
    d = decide(c1b, 2, "u", ND_REPRINT_FORBID);
    CHECK(d.action == ND_ACTION_REPRINT && d.source == 0 && d.show_source && !d.may_modify);

    /* The earliest is the request's own account: not evidence; the next decides. */
    nd_claim c2[] = {claim(100, "u", forbid, 0), claim(200, "other", allow, 0)};
    d = decide(c2, 2, "u", ND_REPRINT_FORBID);
    CHECK(d.action == ND_ACTION_REPRINT && d.source == 1 && d.show_source);
    /* Only own claims: publish (an author's re-post). */
    d = decide(c2, 1, "u", ND_REPRINT_FORBID);
    CHECK(d.action == ND_ACTION_PUBLISH && d.source == SIZE_MAX);
    /* The same bytes only: another account with that prefix is evidence. */
    d = decide(c2, 1, "uu", ND_REPRINT_ALLOW);
    CHECK(d.action == ND_ACTION_BLOCK && d.source == 0);

    /* The earliest is revoked: not evidence; the next decides; all revoked:
     * publish. */
    nd_claim c3[] = {claim(100, "a", forbid, ND_STATUS_REVOKED), claim(200, "b", allow, 0)};
    d = decide(c3, 2, "u", ND_REPRINT_ALLOW);
    CHECK(d.action == ND_ACTION_REPRINT && d.source == 1);
    d = decide(c3, 1, "u", ND_REPRINT_ALLOW);
    CHECK(d.action == ND_ACTION_PUBLISH);

    /* A whitelist entry beats forbid; its flags pass through. */
    const char *wl = "{\"reprint\":\"forbid\",\"whitelist\":[{\"account\":\"w1\",\"may_modify\":"
                     "true,\"may_hide_source\":false},{\"account\":\"w2\",\"may_modify\":false,"
                     "\"may_hide_source\":true}]}";
    nd_claim c4[] = {claim(100, "o", wl, 0)};
    d = decide(c4, 1, "w1", ND_REPRINT_FORBID);
    CHECK(d.action == ND_ACTION_REPRINT && d.show_source && d.may_modify, "w1");
    d = decide(c4, 1, "w2", ND_REPRINT_FORBID);
    CHECK(d.action == ND_ACTION_REPRINT && !d.show_source && !d.may_modify, "may_hide_source");
    d = decide(c4, 1, "w3", ND_REPRINT_ALLOW);
    CHECK(d.action == ND_ACTION_BLOCK, "not listed: forbid");
    /* A whitelist on an allowing original still gives its entry's flags. */
    nd_claim c4b[] = {
        claim(100, "o", "{\"whitelist\":[{\"account\":\"w2\",\"may_hide_source\":true}]}", 0)};
    d = decide(c4b, 1, "w2", ND_REPRINT_ALLOW);
    CHECK(d.action == ND_ACTION_REPRINT && !d.show_source);
    d = decide(c4b, 1, "w9", ND_REPRINT_FORBID);
    CHECK(d.action == ND_ACTION_BLOCK, "whitelist without a rule: the default (forbid)");
    /* The whitelist of a later claim does not help. */
    nd_claim c4c[] = {claim(50, "e", forbid, 0), claim(100, "o", wl, 0)};
    d = decide(c4c, 2, "w1", ND_REPRINT_ALLOW);
    CHECK(d.action == ND_ACTION_BLOCK && d.source == 0);

    /* No rule, no policy: the server's default. */
    nd_claim c5[] = {claim(100, "o", NULL, 0)};
    d = decide(c5, 1, "u", ND_REPRINT_ALLOW);
    CHECK(d.action == ND_ACTION_REPRINT && d.show_source && !d.may_modify, "default allow");
    d = decide(c5, 1, "u", ND_REPRINT_FORBID);
    CHECK(d.action == ND_ACTION_BLOCK, "default forbid");
    d = decide(c5, 1, "u", ND_REPRINT_UNSET);
    CHECK(d.action == ND_ACTION_REPRINT, "unset default counts as allow");
    /* An explicit rule beats the default either way. */
    nd_claim c5b[] = {claim(100, "o", allow, 0)};
    d = decide(c5b, 1, "u", ND_REPRINT_FORBID);
    CHECK(d.action == ND_ACTION_REPRINT);

    /* No account on the request: nothing is "the same account" (not even a
     * claim without an account), and no whitelist lists it. */
    nd_claim c6[] = {claim(100, NULL, wl, 0)};
    d = decide(c6, 1, NULL, ND_REPRINT_ALLOW);
    CHECK(d.action == ND_ACTION_BLOCK && d.source == 0, "anonymous vs an anonymous claim");
    nd_claim c6b[] = {claim(100, NULL, NULL, 0)};
    d = decide(c6b, 1, NULL, ND_REPRINT_ALLOW);
    CHECK(d.action == ND_ACTION_REPRINT && d.show_source, "today's behaviour: not original");
    d = decide(c6b, 1, "", ND_REPRINT_ALLOW);
    CHECK(d.action == ND_ACTION_REPRINT, "an empty account is none");
    /* A claim without an account is never the request's. */
    d = decide(c6b, 1, "u", ND_REPRINT_ALLOW);
    CHECK(d.action == ND_ACTION_REPRINT);

    /* A corrupt stored policy falls back to the default. */
    nd_claim c7[] = {claim(100, "o", "{\"reprint\":", 0)};
    d = decide(c7, 1, "u", ND_REPRINT_FORBID);
    CHECK(d.action == ND_ACTION_BLOCK);

    /* The predicates. */
    nd_claim x = claim(1, "a", NULL, 0);
    CHECK(nd_claim_same_account(&x, S("a")) && !nd_claim_is_evidence(&x, S("a")));
    CHECK(!nd_claim_same_account(&x, NULL, 0) && nd_claim_is_evidence(&x, NULL, 0));
    x.status = ND_STATUS_REVOKED;
    CHECK(!nd_claim_is_evidence(&x, S("b")));
    x.status = ND_STATUS_SUPERSEDED; /* a later original: evidence still */
    CHECK(nd_claim_is_evidence(&x, S("b")) && !nd_claim_is_evidence(&x, S("a")));
}

int main(void)
{
    UNIT_RUN(names);
    UNIT_RUN(parse_and_serialize);
    UNIT_RUN(parse_refuses);
    UNIT_RUN(lookup_agrees);
    UNIT_RUN(decide_edges);
    return unit_summary("claim");
}
