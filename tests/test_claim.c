/* test_claim.c - server/registry/claim.c: the policy format (a request's
 * fields made into the stored policy: validated, merged, compact; the
 * check's allocation-free scan agreeing with it) and the claim rule at
 * every edge: the earliest claim decides (not the most similar),
 * same-account and revoked claims are not evidence, a whitelist entry
 * beats forbid, may_hide_source, the server's default for a policy without
 * a rule, a request without an account. */
#include "claim.h"
#include "unit.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
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

/* A check's decision as the registry's verdict makes it from the claim
 * rule: the earliest evidence is the source (d.source its index, SIZE_MAX:
 * none, publish), nd_claim_action() its action. */
typedef struct decision {
    int action;
    size_t source;
    bool show_source, may_modify;
} decision;

static decision decide(const nd_claim *c, size_t n, const char *account, int def)
{
    size_t alen = account ? strlen(account) : 0, src = SIZE_MAX;
    for (size_t i = 0; i < n; i++)
        if (nd_claim_is_evidence(&c[i], account, alen) &&
            (src == SIZE_MAX || c[i].registered_at_us < c[src].registered_at_us))
            src = i;
    if (src == SIZE_MAX)
        return (decision){.action = ND_ACTION_PUBLISH, .source = SIZE_MAX};
    nd_claim_decision d;
    nd_claim_action(&c[src], account, alen, def, &d);
    return (decision){d.action, src, d.show_source, d.may_modify};
}

/* nd_policy_merge() of reprint and whitelist (NULL: not given) over old. */
static int merge(const char *old, int reprint, const char *whitelist, char **out, size_t *len,
                 nd_request_error *e)
{
    nd_policy_fields f = {.reprint = reprint,
                          .whitelist_raw = whitelist,
                          .whitelist_raw_len = whitelist ? strlen(whitelist) : 0};
    return nd_policy_merge(old, old ? strlen(old) : 0, &f, out, len, e);
}

static void names(void)
{
    CHECK(strcmp(nd_action_name(ND_ACTION_PUBLISH), "publish") == 0);
    CHECK(strcmp(nd_action_name(ND_ACTION_REPRINT), "publish_as_reprint") == 0);
    CHECK(strcmp(nd_action_name(ND_ACTION_BLOCK), "block") == 0);
    CHECK(strcmp(nd_reprint_name(ND_REPRINT_ALLOW), "allow") == 0);
    CHECK(strcmp(nd_reprint_name(ND_REPRINT_FORBID), "forbid") == 0);
    CHECK(nd_reprint_name(ND_REPRINT_UNSET) == NULL);
    CHECK(strcmp(nd_status_name(ND_CLAIM_ACTIVE), "active") == 0);
    CHECK(strcmp(nd_status_name(ND_CLAIM_REVOKED), "revoked") == 0);
    CHECK(strcmp(nd_status_name(ND_CLAIM_SUPERSEDED), "superseded") == 0);
}

static void merge_makes_policy(void)
{
    char *out;
    size_t len;
    nd_request_error e;
    CHECK(merge(NULL, 0, NULL, &out, &len, &e) == 0 && out == NULL && len == 0, "no policy: NULL");
    const char *wl = "[ {\"account\": \"b\\u00e9\", \"may_hide_source\": true},"
                     " {\"account\": \"c\", \"may_modify\": true, \"x\": [1, {}]} ]";
    REQUIRE(merge(NULL, ND_REQUEST_REPRINT_FORBID, wl, &out, &len, &e) == 0 && out, "%s",
            e.message);
    const char *want = "{\"reprint\":\"forbid\",\"whitelist\":[{\"account\":\"b\xc3\xa9\","
                       "\"may_modify\":false,\"may_hide_source\":true},{\"account\":\"c\","
                       "\"may_modify\":true,\"may_hide_source\":false}]}";
    CHECK(strcmp(out, want) == 0 && len == strlen(want), "%s", out);
    /* A PATCH of the reprint rule keeps the stored whitelist; a PUT does not. */
    char *again;
    REQUIRE(merge(out, ND_REQUEST_REPRINT_ALLOW, NULL, &again, &len, &e) == 0 && again);
    CHECK(strstr(again, "\"reprint\":\"allow\"") && strstr(again, "\"account\":\"c\""), "%s",
          again);
    free(again);
    REQUIRE(merge(NULL, ND_REQUEST_REPRINT_ALLOW, NULL, &again, &len, &e) == 0 && again);
    CHECK(strcmp(again, "{\"reprint\":\"allow\"}") == 0, "%s", again);
    free(again);
    /* Merging nothing over a policy gives it back. */
    REQUIRE(merge(out, 0, NULL, &again, &len, &e) == 0 && again);
    CHECK(strcmp(again, out) == 0, "%s", again);
    free(again);
    free(out);
    /* Only the fields given; an empty list is kept. */
    REQUIRE(merge(NULL, 0, "[]", &out, &len, &e) == 0 && out);
    CHECK(strcmp(out, "{\"whitelist\":[]}") == 0, "%s", out);
    free(out);
    /* A stored policy that does not parse counts as none. */
    REQUIRE(merge("{\"reprint\":", 0, "[]", &out, &len, &e) == 0 && out);
    CHECK(strcmp(out, "{\"whitelist\":[]}") == 0, "%s", out);
    free(out);
}

static void merge_refuses(void)
{
    static const struct {
        const char *whitelist;
        const char *field;
    } bad[] = {
        {"{}", "whitelist"},
        {"[1]", "whitelist[0]"},
        {"[{\"may_modify\":true}]", "whitelist[0].account"},
        {"[{\"account\":\"\"}]", "whitelist[0].account"},
        {"[{\"account\":\"a\\u0001\"}]", "whitelist[0].account"},
        {"[{\"account\":\"a\\u0000b\"}]", "whitelist[0].account"},
        {"[{\"account\":\"a\",\"may_modify\":1}]", "whitelist[0].may_modify"},
        {"[{\"account\":\"a\",\"may_hide_source\":\"yes\"}]", "whitelist[0].may_hide_source"},
        {"[{\"account\":\"a\"},{\"account\":\"b\"},{\"account\":\"a\"}]", "whitelist[2].account"},
        {"[{\"account\":\"a\",\"account\":\"b\"}]", "whitelist"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *out = (char *)"x";
        size_t len = 1;
        nd_request_error e;
        int rc = merge(NULL, 0, bad[i].whitelist, &out, &len, &e);
        CHECK(rc == -1 && e.status == 400 && strcmp(e.code, "invalid_field") == 0 &&
                  strcmp(e.field, bad[i].field) == 0 && out == NULL && len == 0,
              "%s: %d %s %s", bad[i].whitelist, rc, e.field, e.message);
    }
    /* The scan refuses what is not a policy. */
    static const char *const notpol[] = {"[]",
                                         "{\"reprint\":\"maybe\"}",
                                         "{\"reprint\":null}",
                                         "{\"whitelist\":{}}",
                                         "{\"whitelist\":[1]}",
                                         "{\"whitelist\":[{\"may_modify\":true}]}",
                                         "{\"reprint\":"};
    for (size_t i = 0; i < sizeof(notpol) / sizeof(notpol[0]); i++) {
        nd_policy_view v;
        CHECK(nd_policy_lookup(S(notpol[i]), S("a"), &v) == -EINVAL && !v.listed, "%s", notpol[i]);
    }
    /* 256 entries are taken, 257 are not. */
    size_t cap = 300 * 40 + 64;
    char *buf = malloc(cap);
    REQUIRE(buf);
    for (int n = 256; n <= 257; n++) {
        size_t o = (size_t)snprintf(buf, cap, "[");
        for (int i = 0; i < n; i++)
            o += (size_t)snprintf(buf + o, cap - o, "%s{\"account\":\"acct-%d\"}", i ? "," : "", i);
        snprintf(buf + o, cap - o, "]");
        char *out = NULL;
        size_t len;
        nd_request_error e;
        int rc = merge(NULL, 0, buf, &out, &len, &e);
        CHECK(n == 256 ? rc == 0 && out : rc == -1 && strcmp(e.field, "whitelist") == 0,
              "%d entries: %d", n, rc);
        if (rc == 0) {
            nd_policy_view v;
            CHECK(nd_policy_lookup(out, len, S("acct-255"), &v) == 0 && v.listed);
        }
        free(out);
    }
    free(buf);
}

/* The check's scan reads what the merge writes. */
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
    /* Every entry of a whitelist is found by the scan of the policy it makes. */
    static const struct {
        const char *account;
        bool mm, mh;
    } entries[] = {{"a\"q", true, false},
                   {"\xe5\xbc\xa0\xe4\xb8\x89", false, true},
                   {"\xf0\x9f\x98\x80", false, false}};
    char *out;
    size_t len;
    nd_request_error e;
    REQUIRE(merge(NULL, 0,
                  "[{\"account\":\"a\\\"q\",\"may_modify\":true},{\"may_hide_source\":true,"
                  "\"account\":\"\\u5f20\\u4e09\"},{\"account\":\"\\ud83d\\ude00\"}]",
                  &out, &len, &e) == 0,
            "%s", e.message);
    for (size_t i = 0; i < sizeof(entries) / sizeof(entries[0]); i++)
        CHECK(nd_policy_lookup(out, len, S(entries[i].account), &v) == 0 && v.listed &&
                  v.may_modify == entries[i].mm && v.may_hide_source == entries[i].mh,
              "entry %zu", i);
    free(out);
    CHECK(nd_policy_lookup(S("{\"reprint\":\"allow\"} x"), S("a"), &v) == -EINVAL, "trailing");
}

/* A stored policy as answers show it. */
static void describe(void)
{
    nd_policy_desc d;
    CHECK(nd_policy_describe(NULL, 0, ND_REPRINT_FORBID, &d) == 0 &&
          strcmp(d.reprint, "forbid") == 0 && !d.explicit_rule && !d.whitelist);
    CHECK(nd_policy_describe(NULL, 0, ND_REPRINT_UNSET, &d) == 0 &&
          strcmp(d.reprint, "allow") == 0 && !d.explicit_rule);
    const char *pol = "{\"reprint\":\"allow\",\"whitelist\":[{\"account\":\"a\","
                      "\"may_modify\":false,\"may_hide_source\":true}]}";
    REQUIRE(nd_policy_describe(S(pol), ND_REPRINT_FORBID, &d) == 0 && d.whitelist);
    CHECK(strcmp(d.reprint, "allow") == 0 && d.explicit_rule &&
              strcmp(d.whitelist, "[{\"account\":\"a\",\"may_modify\":false,"
                                  "\"may_hide_source\":true}]") == 0,
          "%s", d.whitelist);
    free(d.whitelist);
    CHECK(nd_policy_describe(S("{\"reprint\":"), ND_REPRINT_FORBID, &d) == 0 &&
              strcmp(d.reprint, "forbid") == 0 && !d.explicit_rule && !d.whitelist,
          "a policy that does not parse: none");
}

/* The decision, edge by edge. Times: smaller = earlier. */
static void decide_edges(void)
{
    const char *allow = "{\"reprint\":\"allow\"}", *forbid = "{\"reprint\":\"forbid\"}";
    decision d;

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
    nd_claim c3[] = {claim(100, "a", forbid, ND_CLAIM_REVOKED), claim(200, "b", allow, 0)};
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
    x.status = ND_CLAIM_REVOKED;
    CHECK(!nd_claim_is_evidence(&x, S("b")));
    x.status = ND_CLAIM_SUPERSEDED; /* a later original: evidence still */
    CHECK(nd_claim_is_evidence(&x, S("b")) && !nd_claim_is_evidence(&x, S("a")));
}

int main(void)
{
    UNIT_RUN(names);
    UNIT_RUN(merge_makes_policy);
    UNIT_RUN(merge_refuses);
    UNIT_RUN(lookup_agrees);
    UNIT_RUN(describe);
    UNIT_RUN(decide_edges);
    return unit_summary("claim");
}
