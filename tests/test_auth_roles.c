/* test_auth_roles.c - the token file's roles (auth.h): parsing, refusals, the
 * identity a checked header yields, who may act for which account; and
 * retention.h, the detection a full copies list drops. */
#include "auth.h"
#include "retention.h"
#include "unit.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TA "alice-token-0123456789abcdef"
#define TB "bob-token-fedcba9876543210ab"
#define TO "op-token-0123456789abcdef01"
#define TL "legacy-token-0123456789abcd"

static nd_auth *parse(const char *text, char *err, size_t cap)
{
    nd_auth *a = NULL;
    err[0] = 0;
    int rc = nd_auth_parse(&a, text, strlen(text), "tokens", err, cap);
    CHECK((rc == 0) == (a != NULL), "rc %d", rc);
    return a;
}

static const nd_auth_identity *who_of(const nd_auth *a, const char *token)
{
    char h[300];
    snprintf(h, sizeof(h), "Bearer %s", token);
    const nd_auth_identity *who = NULL;
    int rc = nd_auth_check_identity(a, h, &who);
    CHECK((rc == ND_AUTH_OK) == (who != NULL), "rc %d", rc);
    return who;
}

static void test_roles(void)
{
    char err[512];
    nd_auth *a = parse("# clients\n"
                       "alice-cms " TA " accounts=alice\n"
                       "bob-cms\t" TB "   accounts=bob,bob-2,b\xc3\xa9\n"
                       "ops " TO " operator\n"
                       "legacy " TL "\n",
                       err, sizeof(err));
    REQUIRE(a, "%s", err);
    CHECK(nd_auth_count(a) == 4);
    const nd_auth_identity *al = who_of(a, TA), *bo = who_of(a, TB), *op = who_of(a, TO),
                           *le = who_of(a, TL);
    REQUIRE(al && bo && op && le);
    CHECK(strcmp(al->name, "alice-cms") == 0 && !al->is_operator && al->naccounts == 1);
    CHECK(strcmp(bo->name, "bob-cms") == 0 && bo->naccounts == 3);
    /* A named token without a role: a client, which acts for no account
     * (it owns what it registers: the API's business). */
    CHECK(op->is_operator && !op->is_client && strcmp(le->name, "legacy") == 0);
    CHECK(le->is_client && !le->is_operator && le->naccounts == 0);
    CHECK(!al->is_client && !bo->is_client);
    CHECK(nd_auth_may_act_for(al, "alice", 5) && !nd_auth_may_act_for(al, "bob", 3));
    CHECK(!nd_auth_may_act_for(al, "alic", 4) && !nd_auth_may_act_for(al, "alice2", 6));
    CHECK(nd_auth_may_act_for(bo, "bob-2", 5) && nd_auth_may_act_for(bo, "b\xc3\xa9", 3));
    CHECK(!nd_auth_may_act_for(bo, "alice", 5) && !nd_auth_may_act_for(NULL, "bob", 3));
    CHECK(nd_auth_may_act_for(op, "anyone", 6) && !nd_auth_may_act_for(le, "x", 1));
    size_t len = 0;
    const char *acc = nd_auth_account(bo, 1, &len);
    CHECK(acc && len == 5 && memcmp(acc, "bob-2", 5) == 0);
    CHECK(!nd_auth_account(bo, 3, &len) && !nd_auth_account(op, 0, &len) &&
          !nd_auth_account(le, 0, &len));
    /* The name check of before: the same client names. */
    const char *name = NULL;
    CHECK(nd_auth_check_named(a, "Bearer " TB, &name) == ND_AUTH_OK && name &&
          strcmp(name, "bob-cms") == 0);
    CHECK(nd_auth_check_named(a, "Bearer " TB "x", &name) == ND_AUTH_INVALID && !name);
    CHECK(nd_auth_identity_at(a, 2) == op && !nd_auth_identity_at(a, 4));
    nd_auth_destroy(a);

    /* A bare token and NEARDUP_TOKEN: the operator "default". */
    a = parse(TO "\n", err, sizeof(err));
    REQUIRE(a, "%s", err);
    CHECK(who_of(a, TO)->is_operator && !who_of(a, TO)->is_client &&
          strcmp(who_of(a, TO)->name, "default") == 0);
    nd_auth_destroy(a);
    bool loose;
    CHECK(nd_auth_create(&a, "", TO, &loose, err, sizeof(err)) == 0 && a);
    CHECK(who_of(a, TO)->is_operator);
    nd_auth_destroy(a);
}

/* --help's token roles (nd_auth_usage()) are those a token file takes:
 * each role listed, on a named line, gives its identity; all three are
 * listed. */
static void test_usage_roles(void)
{
    char *text = NULL, err[512];
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    REQUIRE(f != NULL);
    nd_auth_usage(f);
    fclose(f);
    const char *at = strstr(text, "Token roles");
    CHECK(at != NULL, "%s", text);
    unsigned seen = 0;
    for (const char *l = at ? strchr(at, '\n') : NULL; l && l[1]; l = strchr(l + 1, '\n')) {
        char role[64], line[256];
        if (l[1] != ' ' || l[3] == ' ' || sscanf(l + 1, " %63s", role) != 1)
            continue; /* a heading, or a description carried over */
        char *acc = strstr(role, "A[,B...]");
        if (acc)
            snprintf(acc, sizeof(role) - (size_t)(acc - role), "alice,bob");
        snprintf(line, sizeof(line), "n " TA "%s%s\n", strcmp(role, "(none)") ? " " : "",
                 strcmp(role, "(none)") ? role : "");
        nd_auth *a = parse(line, err, sizeof(err));
        CHECK(a != NULL, "--help's role %s: %s", role, err);
        const nd_auth_identity *who = a ? who_of(a, TA) : NULL;
        if (who && strcmp(role, "operator") == 0)
            seen |= who->is_operator ? 1 : 0;
        else if (who && acc)
            seen |= who->naccounts == 2 && !who->is_operator && !who->is_client ? 2 : 0;
        else if (who)
            seen |= who->is_client && !who->is_operator && !who->naccounts ? 4 : 0;
        nd_auth_destroy(a);
    }
    CHECK(seen == 7, "--help lists the roles operator, accounts= and none: %u\n%s", seen, text);
    free(text);
}

static void test_refusals(void)
{
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"x " TA " admin\n", "may hold only"},
        {"x " TA " accounts=\n", "accounts on line 1"},
        {"x " TA " accounts=a,,b\n", "account 2 on line 1"},
        {"x " TA " accounts=a,\n", "account 2 on line 1"},
        {"x " TA " accounts=a,a\n", "listed twice"},
        {"x " TA " accounts=a\x01z\n", "account 1 on line 1"},
        {"x " TA " operator extra\n", "may hold only"},
        {"x " TA " accounts=a\ny " TA " operator\n", "given twice"},
        {"x short accounts=a\n", "16 to 256"},
    };
    char err[512];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        nd_auth *a = parse(bad[i].text, err, sizeof(err));
        CHECK(!a, "accepted %zu", i);
        CHECK(strstr(err, bad[i].want), "%zu: %s", i, err);
        CHECK(!strstr(err, TA), "%zu: the token in %s", i, err);
        nd_auth_destroy(a);
    }
    /* 33 accounts: one too many; 32 fit. */
    char text[2048], list[1024] = "";
    for (int i = 0; i < 33; i++)
        snprintf(list + strlen(list), sizeof(list) - strlen(list), "%sa%d", i ? "," : "", i);
    snprintf(text, sizeof(text), "x " TA " accounts=%s\n", list);
    nd_auth *a = parse(text, err, sizeof(err));
    CHECK(!a && strstr(err, "more than 32 accounts"), "%s", err);
    *strrchr(list, ',') = 0;
    snprintf(text, sizeof(text), "x " TA " accounts=%s\n", list);
    a = parse(text, err, sizeof(err));
    CHECK(a && who_of(a, TA)->naccounts == 32, "%s", err);
    CHECK(a && nd_auth_may_act_for(who_of(a, TA), "a31", 3));
    nd_auth_destroy(a);
    /* An account of 256 bytes fits, 257 does not. */
    char acc[300];
    memset(acc, 'q', 257);
    acc[257] = 0;
    snprintf(text, sizeof(text), "x " TA " accounts=%s\n", acc);
    a = parse(text, err, sizeof(err));
    CHECK(!a && strstr(err, "account 1 on line 1"), "%s", err);
    acc[256] = 0;
    snprintf(text, sizeof(text), "x " TA " accounts=%s\n", acc);
    a = parse(text, err, sizeof(err));
    CHECK(a && nd_auth_may_act_for(who_of(a, TA), acc, 256), "%s", err);
    nd_auth_destroy(a);
}

/* A tally over values written as the API writes detections (at_us
 * 100, 101, ...): the first k victims into at; returns how many. */
static int64_t victims(const char *const *values, size_t n, size_t k, int64_t *at)
{
    nd_retention *t = nd_retention_new(n);
    if (!t) {
        CHECK(t, "out of memory");
        return -2;
    }
    for (size_t i = 0; i < n; i++)
        CHECK(nd_retention_add(t, values[i], strlen(values[i]), (int64_t)(100 + i)) == 0);
    int64_t got = nd_retention_victims(t, k, at);
    nd_retention_free(t);
    return got;
}

static int64_t pick(const char *const *values, size_t n)
{
    int64_t at = -1;
    return victims(values, n, 1, &at) == 1 ? at : -1;
}

static int account_of(const char *v, const char **acc, size_t *len)
{
    return nd_retention_account(v, strlen(v), acc, len);
}

static void test_retention(void)
{
    const char *acc = NULL;
    size_t len = 0;
    CHECK(account_of("{\"id\":\"a\\\"account\\\":\",\"account\":\"b\\u00e9\",\"kind\":"
                     "\"identical\",\"distance\":0}",
                     &acc, &len) == 0);
    CHECK(acc && len == 7 && memcmp(acc, "b\\u00e9", 7) == 0, "%.*s", (int)len, acc);
    CHECK(account_of("{\"id\":\"x\",\"kind\":\"identical\"}", &acc, &len) == -ENOENT);
    CHECK(account_of("{\"x\":{\"account\":\"in\"},\"account\":\"out\"}", &acc, &len) == 0 &&
          len == 3 && memcmp(acc, "out", 3) == 0);
    CHECK(account_of("not json", &acc, &len) == -ENOENT);
    CHECK(account_of("{\"account\":", &acc, &len) == -ENOENT);
    CHECK(account_of("{\"account\":7}", &acc, &len) == -ENOENT);

    /* The biggest account drops its oldest. */
    const char *flood[] = {"{\"id\":\"g\",\"account\":\"bob\"}",
                           "{\"id\":\"m1\",\"account\":\"m\"}", "{\"id\":\"m2\",\"account\":\"m\"}",
                           "{\"id\":\"c\",\"account\":\"c\"}", "{\"id\":\"m3\",\"account\":\"m\"}"};
    CHECK(pick(flood, 5) == 101);
    /* Ties: the account with the newest entry (a newcomer drops its own). */
    const char *tie[] = {"{\"id\":\"g\",\"account\":\"bob\"}", "{\"id\":\"m1\",\"account\":\"m\"}"};
    CHECK(pick(tie, 2) == 101);
    /* Without accounts (as before): the oldest. */
    const char *none[] = {"{\"id\":\"a\"}", "{\"id\":\"b\"}", "{}", "garbage"};
    CHECK(pick(none, 4) == 100);
    CHECK(pick(NULL, 0) == -1);
    /* Many accounts: the table grows. */
    enum { N = 5000 };
    static char buf[N][48];
    static const char *many[N];
    for (int i = 0; i < N; i++) {
        snprintf(buf[i], sizeof(buf[i]), "{\"id\":\"%d\",\"account\":\"a%d\"}", i,
                 i == N - 1 ? 7 : i);
        many[i] = buf[i];
    }
    CHECK(pick(many, N) == 107);
    /* Several at once: each the rule's pick after the ones before. */
    const char *mix[] = {"{\"account\":\"a\"}", "{\"account\":\"b\"}", "{\"account\":\"a\"}",
                         "{\"account\":\"b\"}", "{\"account\":\"a\"}", "{\"account\":\"c\"}"};
    int64_t at[8];
    CHECK(victims(mix, 6, 4, at) == 4);
    /* a:3 -> 100; then a:2 (newest 104) b:2 (103) -> a's 102; then b:2 ->
     * 101; then a:1 b:1 c:1, c's the newest -> 105. */
    CHECK(at[0] == 100 && at[1] == 102 && at[2] == 101 && at[3] == 105, "%lld %lld %lld %lld",
          (long long)at[0], (long long)at[1], (long long)at[2], (long long)at[3]);
    CHECK(victims(mix, 6, 8, at) == 6);
    CHECK(nd_retention_target(10000) == 9844 && nd_retention_target(63) == 63 &&
          nd_retention_target(64) == 63 && nd_retention_target(1) == 1);
}

int main(void)
{
    UNIT_RUN(test_roles);
    UNIT_RUN(test_usage_roles);
    UNIT_RUN(test_refusals);
    UNIT_RUN(test_retention);
    return unit_summary("auth_roles");
}
