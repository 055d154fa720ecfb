/* test_config.c - server/ops/config.c: the one option table that makes the
 * flags, the NEARDUP_* variables and --help.
 *
 * Through the public functions only: --help is read back to list every
 * option with its variable and default, and each listed default is given
 * back as a flag and as a variable to check both reach the same field
 * (nd_config_describe, parsed with jansson). Then the documented defaults,
 * flags over variables, switches set by variables, and the one-line error
 * of each kind of bad value. Every parse starts from an environment without
 * NEARDUP_* variables. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "unit.h"

extern char **environ;

#define MAX_ARGS 16
#define MAX_OPTS 64

/* The result of one nd_config_parse call. */
typedef struct parsed {
    int rc;
    nd_config cfg;
    char *out; /* what it wrote to out and err (malloc'd, NUL-terminated) */
    char *err;
} parsed;

static void parsed_free(parsed *p)
{
    free(p->out);
    free(p->err);
    p->out = p->err = NULL;
}

/* Unsets every NEARDUP_* variable. */
static void clear_env(void)
{
    for (;;) {
        char name[256] = "";
        for (char **e = environ; *e; e++) {
            if (strncmp(*e, "NEARDUP_", 8) == 0) {
                size_t n = strcspn(*e, "=");
                if (n < sizeof(name)) {
                    memcpy(name, *e, n);
                    name[n] = 0;
                }
                break;
            }
        }
        if (!name[0])
            return;
        unsetenv(name);
    }
}

/* Parses "neardupd" + args (NULL-terminated) from the defaults, with the
 * environment holding only env (NULL or "NAME=VALUE" entries, NULL-ended).
 * argv is a writable copy: getopt may permute it. */
static parsed run(const char *const *env, const char *const *args)
{
    parsed p = {0};
    char *argv[MAX_ARGS + 2];
    int argc = 0;
    argv[argc++] = strdup("neardupd");
    for (size_t i = 0; args && args[i] && argc <= MAX_ARGS; i++)
        argv[argc++] = strdup(args[i]);
    argv[argc] = NULL;
    clear_env();
    for (size_t i = 0; env && env[i]; i++)
        putenv((char *)env[i]); /* string literals outlive the call; cleared below */
    size_t out_n, err_n;
    FILE *out = open_memstream(&p.out, &out_n);
    FILE *err = open_memstream(&p.err, &err_n);
    nd_config_defaults(&p.cfg);
    p.rc = nd_config_parse(&p.cfg, argc, argv, out, err);
    fclose(out);
    fclose(err);
    clear_env();
    for (int i = 0; i < argc; i++) { /* nothing may point into argv afterwards */
        memset(argv[i], 'X', strlen(argv[i]));
        free(argv[i]);
    }
    return p;
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define ENV(...) ((const char *const[]){__VA_ARGS__, NULL})

/* The configuration as a JSON object (nd_config_describe), new reference. */
static json_t *describe(const nd_config *cfg)
{
    char buf[16384];
    size_t n = nd_config_describe(cfg, buf, sizeof(buf));
    json_error_t e;
    json_t *j = json_loadb(buf, n, 0, &e);
    CHECK(j && json_is_object(j), "describe is not a JSON object: %s (%.200s)", e.text, buf);
    return j;
}

static int same_config(const nd_config *a, const nd_config *b)
{
    json_t *ja = describe(a), *jb = describe(b);
    int same = ja && jb && json_equal(ja, jb);
    json_decref(ja);
    json_decref(jb);
    return same;
}

/* One option as --help lists it. */
typedef struct option_line {
    char flag[64]; /* without "--" */
    char env[64];
    char def[128]; /* the default as shown, up to the first space; "off": a switch */
} option_line;

/* Reads the options back from the --help text. Returns their number. */
static size_t help_options(option_line *opts, size_t cap)
{
    parsed p = run(NULL, ARGS("--help"));
    CHECK(p.rc == ND_CONFIG_HELP, "--help returns ND_CONFIG_HELP, got %d", p.rc);
    CHECK(p.err && !p.err[0], "--help wrote to err: %s", p.err);
    size_t n = 0;
    char *save = NULL;
    const char *prev = NULL;
    for (char *line = strtok_r(p.out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        const char *env = strstr(line, " env NEARDUP_");
        if (env && prev && n < cap) {
            option_line *o = &opts[n];
            memset(o, 0, sizeof(*o));
            CHECK(sscanf(prev, " --%63s", o->flag) == 1, "flag line: %s", prev);
            CHECK(sscanf(env, " env %63[A-Z_], default %127s", o->env, o->def) == 2, "env line: %s",
                  line);
            n++;
        }
        prev = line;
    }
    parsed_free(&p);
    return n;
}

static void test_help_lists_every_option(void)
{
    option_line opts[MAX_OPTS];
    size_t n = help_options(opts, MAX_OPTS);
    static const char *const expected[] = {
        "listen",          "data",
        "in-memory",       "threads",
        "accept",          "k",
        "min-chars",       "max-body",
        "max-headers",     "max-batch",
        "max-matches",     "min-resemblance",
        "min-containment", "max-verify",
        "max-text",        "max-connections",
        "request-timeout", "token-file",
        "auth-all",        "max-meta",
        "timeout",         "drain-timeout",
        "drain-delay",     "map-size",
        "no-sync",         "log-level",
        "no-access-log",
    };
    for (size_t i = 0; i < sizeof(expected) / sizeof(expected[0]); i++) {
        int found = 0;
        for (size_t k = 0; k < n; k++)
            found |= strcmp(opts[k].flag, expected[i]) == 0;
        CHECK(found, "--%s is not in --help", expected[i]);
    }
    for (size_t k = 0; k < n; k++) {
        /* The variable is the flag's name: NEARDUP_ + upper case, '-' -> '_'. */
        char want[80] = "NEARDUP_";
        for (size_t c = 0; opts[k].flag[c] && c < 64; c++) {
            char ch = opts[k].flag[c];
            want[8 + c] = ch == '-' ? '_' : (char)(ch >= 'a' && ch <= 'z' ? ch - 32 : ch);
            want[9 + c] = 0;
        }
        CHECK(strcmp(opts[k].env, want) == 0, "--%s has variable %s, want %s", opts[k].flag,
              opts[k].env, want);
        for (size_t j = 0; j < k; j++)
            CHECK(strcmp(opts[j].flag, opts[k].flag) != 0, "--%s listed twice", opts[k].flag);
    }
}

/* Each default --help shows, given back as a flag and as a variable, parses
 * and leaves the configuration as the defaults made it: help, flags and
 * variables come from one table. A switch shows "off"; setting it by flag
 * and by variable gives the same configuration, unlike the defaults. */
static void test_help_defaults_round_trip(void)
{
    option_line opts[MAX_OPTS];
    size_t n = help_options(opts, MAX_OPTS);
    parsed base = run(NULL, NULL);
    CHECK(base.rc == 0, "no arguments: %d %s", base.rc, base.err);
    for (size_t k = 0; k < n; k++) {
        const option_line *o = &opts[k];
        char flag[80], envvar[256];
        snprintf(flag, sizeof(flag), "--%s", o->flag);
        if (strcmp(o->def, "off") == 0) {
            snprintf(envvar, sizeof(envvar), "%s=1", o->env);
            parsed a = run(NULL, ARGS(flag));
            parsed b = run(ENV(envvar), NULL);
            CHECK(a.rc == 0 && b.rc == 0, "--%s: %d, %s=1: %d", o->flag, a.rc, o->env, b.rc);
            CHECK(same_config(&a.cfg, &b.cfg), "--%s and %s=1 differ", o->flag, o->env);
            CHECK(!same_config(&a.cfg, &base.cfg), "--%s changes nothing", o->flag);
            parsed_free(&a);
            parsed_free(&b);
            continue;
        }
        if (strcmp(o->def, "none") == 0) /* --token-file: no default path */
            continue;
        snprintf(envvar, sizeof(envvar), "%s=%s", o->env, o->def);
        parsed a = run(NULL, ARGS(flag, o->def));
        parsed b = run(ENV(envvar), NULL);
        CHECK(a.rc == 0, "--%s %s: %d %s", o->flag, o->def, a.rc, a.err);
        CHECK(b.rc == 0, "%s: %d %s", envvar, b.rc, b.err);
        CHECK(same_config(&a.cfg, &base.cfg), "--%s %s is not the default", o->flag, o->def);
        CHECK(same_config(&b.cfg, &base.cfg), "%s is not the default", envvar);
        parsed_free(&a);
        parsed_free(&b);
    }
    parsed_free(&base);
}

/* The defaults README.md and config.h document. */
static void test_defaults(void)
{
    parsed p = run(NULL, NULL);
    const nd_config *c = &p.cfg;
    CHECK(p.rc == 0 && !p.out[0] && !p.err[0], "rc %d out %s err %s", p.rc, p.out, p.err);
    CHECK(strcmp(c->listen_host, "127.0.0.1") == 0 && c->listen_port == 8080, "%s:%u",
          c->listen_host, c->listen_port);
    CHECK(strcmp(c->data_dir, "./data") == 0, "data %s", c->data_dir);
    CHECK(!c->in_memory && c->sync && c->access_log && !c->auth_all && !c->token_file[0]);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    CHECK(c->threads == (unsigned)(cores > 0 ? cores : 1), "threads %u, cores %ld", c->threads,
          cores);
    CHECK(c->accept_mode == ND_ACCEPT_REUSEPORT);
    CHECK(c->k == 3 && c->min_chars == 300, "k %u min_chars %u", c->k, c->min_chars);
    CHECK(c->max_body == 4u << 20 && c->max_headers == 16u << 10 && c->max_text == 1u << 20 &&
          c->max_meta == 16u << 10);
    CHECK(c->max_batch == 1000 && c->max_matches == 100 && c->max_connections == 10000);
    CHECK(c->request_timeout_s == 30 && c->timeout_s == 30 && c->drain_s == 10 &&
          c->drain_delay_s == 0);
    CHECK(c->min_resemblance > 0 && c->min_resemblance <= 1 && c->min_containment > 0 &&
          c->min_containment <= 1 && c->max_verify == 32);
    CHECK(c->map_size == 0, "map_size %zu (0: the store's default)", c->map_size);
    json_t *j = describe(c);
    CHECK(j && json_is_string(json_object_get(j, "log_level")) &&
          strcmp(json_string_value(json_object_get(j, "log_level")), "info") == 0);
    json_decref(j);
    parsed_free(&p);
}

/* Variables are read first, flags after: a flag wins. */
static void test_flag_over_env(void)
{
    parsed p = run(ENV("NEARDUP_K=5", "NEARDUP_MAX_BODY=2M"), ARGS("--k", "6"));
    CHECK(p.rc == 0 && p.cfg.k == 6 && p.cfg.max_body == 2u << 20, "rc %d k %u max_body %zu", p.rc,
          p.cfg.k, p.cfg.max_body);
    parsed_free(&p);
    p = run(ENV("NEARDUP_K=5"), ARGS("--k=7"));
    CHECK(p.rc == 0 && p.cfg.k == 7, "--k=7 over NEARDUP_K=5: k %u", p.cfg.k);
    parsed_free(&p);
    p = run(ENV("NEARDUP_LISTEN=0.0.0.0:9000"), ARGS("--listen", "[::1]:0"));
    CHECK(p.rc == 0 && strcmp(p.cfg.listen_host, "::1") == 0 && p.cfg.listen_port == 0,
          "listen %s:%u", p.cfg.listen_host, p.cfg.listen_port);
    parsed_free(&p);
    /* A flag given twice: the last one. */
    p = run(NULL, ARGS("--k", "1", "--k", "2"));
    CHECK(p.rc == 0 && p.cfg.k == 2, "k %u", p.cfg.k);
    parsed_free(&p);
    /* A bad variable is refused even when a flag would override it. */
    p = run(ENV("NEARDUP_K=9"), ARGS("--k", "2"));
    CHECK(p.rc == -EINVAL && strstr(p.err, "NEARDUP_K=9"), "rc %d err %s", p.rc, p.err);
    parsed_free(&p);
}

/* A switch's variable names the switch: NEARDUP_NO_SYNC=1 turns sync off,
 * =0 leaves it on; the flag wins over the variable. */
static void test_switches(void)
{
    static const struct {
        const char *env;
        int rc;
        int sync;
    } cases[] = {
        {"NEARDUP_NO_SYNC=1", 0, 0},           {"NEARDUP_NO_SYNC=true", 0, 0},
        {"NEARDUP_NO_SYNC=YES", 0, 0},         {"NEARDUP_NO_SYNC=on", 0, 0},
        {"NEARDUP_NO_SYNC=0", 0, 1},           {"NEARDUP_NO_SYNC=false", 0, 1},
        {"NEARDUP_NO_SYNC=off", 0, 1},         {"NEARDUP_NO_SYNC=", 0, 1},
        {"NEARDUP_NO_SYNC=maybe", -EINVAL, 1}, {"NEARDUP_NO_SYNC=2", -EINVAL, 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        parsed p = run(ENV(cases[i].env), NULL);
        CHECK(p.rc == cases[i].rc, "%s: rc %d, want %d", cases[i].env, p.rc, cases[i].rc);
        if (p.rc == 0)
            CHECK(p.cfg.sync == cases[i].sync, "%s: sync %d", cases[i].env, p.cfg.sync);
        parsed_free(&p);
    }
    parsed p = run(ENV("NEARDUP_NO_SYNC=0"), ARGS("--no-sync"));
    CHECK(p.rc == 0 && !p.cfg.sync, "--no-sync over NEARDUP_NO_SYNC=0");
    parsed_free(&p);
    p = run(ENV("NEARDUP_IN_MEMORY=1", "NEARDUP_AUTH_ALL=1", "NEARDUP_NO_ACCESS_LOG=1"), NULL);
    CHECK(p.rc == 0 && p.cfg.in_memory && p.cfg.auth_all && !p.cfg.access_log,
          "in_memory %d auth_all %d access_log %d", p.cfg.in_memory, p.cfg.auth_all,
          p.cfg.access_log);
    parsed_free(&p);
    /* A switch takes no value as a flag. */
    p = run(NULL, ARGS("--in-memory=1"));
    CHECK(p.rc == -EINVAL, "--in-memory=1: rc %d", p.rc);
    parsed_free(&p);
    /* The console: on by default; --console BOOL and NEARDUP_CONSOLE. */
    static const struct {
        const char *env, *arg;
        int rc;
        bool console;
    } consoles[] = {
        {NULL, NULL, 0, true},
        {NULL, "--console", -EINVAL, true},
        {NULL, "--console=false", 0, false},
        {NULL, "--console=off", 0, false},
        {NULL, "--console=1", 0, true},
        {NULL, "--console=maybe", -EINVAL, true},
        {"NEARDUP_CONSOLE=false", NULL, 0, false},
        {"NEARDUP_CONSOLE=0", "--console=yes", 0, true},
        {"NEARDUP_CONSOLE=true", "--console=no", 0, false},
        {"NEARDUP_CONSOLE=sometimes", NULL, -EINVAL, true},
    };
    for (size_t i = 0; i < sizeof(consoles) / sizeof(consoles[0]); i++) {
        const char *env = consoles[i].env, *arg = consoles[i].arg;
        p = run(env ? ENV(env) : NULL, arg ? ARGS(arg) : NULL);
        CHECK(p.rc == consoles[i].rc, "%s %s: rc %d", env ? env : "", arg ? arg : "", p.rc);
        if (p.rc == 0)
            CHECK(p.cfg.console == consoles[i].console, "%s %s: console %d", env ? env : "",
                  arg ? arg : "", p.cfg.console);
        parsed_free(&p);
    }
}

/* Accepted spellings of sizes, fractions, addresses and names. */
static void test_values(void)
{
    static const struct {
        const char *flag, *value;
        size_t max_body;
    } sizes[] = {
        {"--max-body", "64k", 64u << 10}, {"--max-body", "64K", 64u << 10},
        {"--max-body", "2M", 2u << 20},   {"--max-body", "2MiB", 2u << 20},
        {"--max-body", "2mb", 2u << 20},  {"--max-body", "1G", 1u << 30},
        {"--max-body", "1GiB", 1u << 30},
    };
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        parsed p = run(NULL, ARGS(sizes[i].flag, sizes[i].value, "--max-meta", "2"));
        CHECK(p.rc == 0 && p.cfg.max_body == sizes[i].max_body, "%s %s: rc %d max_body %zu",
              sizes[i].flag, sizes[i].value, p.rc, p.cfg.max_body);
        parsed_free(&p);
    }
    parsed p = run(NULL, ARGS("--max-body", "1024", "--max-meta", "1024"));
    CHECK(p.rc == 0 && p.cfg.max_body == 1024 && p.cfg.max_meta == 1024, "the least max-body");
    parsed_free(&p);
    p = run(NULL, ARGS("--min-resemblance", "0.25", "--min-containment", ".9"));
    CHECK(p.rc == 0 && p.cfg.min_resemblance == 0.25 && p.cfg.min_containment == 0.9, "rc %d %g %g",
          p.rc, p.cfg.min_resemblance, p.cfg.min_containment);
    parsed_free(&p);
    p = run(NULL, ARGS("--min-resemblance", "1", "--max-verify", "0", "--k", "8"));
    CHECK(p.rc == 0 && p.cfg.min_resemblance == 1 && p.cfg.max_verify == 0 && p.cfg.k == 8,
          "limits of the ranges: rc %d %s", p.rc, p.err);
    parsed_free(&p);
    p = run(NULL, ARGS("--listen", "localhost:1", "--accept", "shared", "--log-level", "warn",
                       "--threads", "3", "--data", "/tmp/x y"));
    CHECK(p.rc == 0 && strcmp(p.cfg.listen_host, "localhost") == 0 && p.cfg.listen_port == 1 &&
              p.cfg.accept_mode == ND_ACCEPT_SHARED && p.cfg.threads == 3 &&
              strcmp(p.cfg.data_dir, "/tmp/x y") == 0,
          "rc %d %s", p.rc, p.err);
    json_t *j = describe(&p.cfg);
    CHECK(j && strcmp(json_string_value(json_object_get(j, "log_level")), "warn") == 0 &&
          strcmp(json_string_value(json_object_get(j, "data")), "/tmp/x y") == 0 &&
          strcmp(json_string_value(json_object_get(j, "listen")), "localhost:1") == 0);
    json_decref(j);
    parsed_free(&p);
    /* describe escapes what it quotes */
    p = run(NULL, ARGS("--data", "a\"b\\c"));
    j = describe(&p.cfg);
    CHECK(p.rc == 0 && j && strcmp(json_string_value(json_object_get(j, "data")), "a\"b\\c") == 0);
    json_decref(j);
    parsed_free(&p);
}

/* Every bad value: rc -EINVAL, nothing on out, one line on err that starts
 * "neardupd: " and names the flag or the variable (what) and, except for
 * the token, the value. */
static void test_bad_values(void)
{
    static const struct {
        const char *args[4];
        const char *env;
        const char *what;
    } cases[] = {
        {{"--k", "9"}, NULL, "--k"},
        {{"--k", "abc"}, NULL, "--k"},
        {{"--k", "-1"}, NULL, "--k"},
        {{"--k", ""}, NULL, "--k"},
        {{"--k", "3x"}, NULL, "--k"},
        {{"--k", "99999999999999999999999"}, NULL, "--k"},
        {{"--threads", "257"}, NULL, "--threads"},
        {{"--max-body", "1023"}, NULL, "--max-body"},
        {{"--max-body", "5X"}, NULL, "--max-body"},
        {{"--max-body", "2KBB"}, NULL, "--max-body"},
        {{"--max-body", "2G"}, NULL, "--max-body"},
        {{"--max-body", "18446744073709551615G"}, NULL, "--max-body"},
        {{"--max-batch", "0"}, NULL, "--max-batch"},
        {{"--listen", "8080"}, NULL, "--listen"},
        {{"--listen", ":8080"}, NULL, "--listen"},
        {{"--listen", "host:65536"}, NULL, "--listen"},
        {{"--listen", "host:"}, NULL, "--listen"},
        {{"--listen", "[::1]8080"}, NULL, "--listen"},
        {{"--min-resemblance", "1.5"}, NULL, "--min-resemblance"},
        {{"--min-resemblance", "0"}, NULL, "--min-resemblance"},
        {{"--min-resemblance", "-0.5"}, NULL, "--min-resemblance"},
        {{"--min-resemblance", "1e-1"}, NULL, "--min-resemblance"},
        {{"--min-containment", "."}, NULL, "--min-containment"},
        {{"--log-level", "loud"}, NULL, "--log-level"},
        {{"--accept", "both"}, NULL, "--accept"},
        {{"--data", ""}, NULL, "--data"},
        {{NULL}, "NEARDUP_K=x", "NEARDUP_K=x"},
        {{NULL}, "NEARDUP_LISTEN=nowhere", "NEARDUP_LISTEN=nowhere"},
        {{NULL}, "NEARDUP_MAX_TEXT=0", "NEARDUP_MAX_TEXT=0"},
        {{"--nope"}, NULL, "unknown option --nope"},
        {{"--k"}, NULL, "missing value for option --k"},
        {{"stray"}, NULL, "unexpected argument stray"},
        {{"--max-meta", "1M", "--max-body", "64K"}, NULL, "--max-meta must not exceed --max-body"},
        {{"--token", "s3cret-s3cret-s3cret"}, NULL, "--token is not accepted"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *args[5] = {cases[i].args[0], cases[i].args[1], cases[i].args[2],
                               cases[i].args[3], NULL};
        const char *env[2] = {cases[i].env, NULL};
        parsed p = run(env, args);
        const char *what = cases[i].what;
        CHECK(p.rc == -EINVAL, "%s: rc %d", what, p.rc);
        CHECK(!p.out[0], "%s: wrote to out: %s", what, p.out);
        size_t len = strlen(p.err);
        CHECK(strncmp(p.err, "neardupd: ", 10) == 0 && len > 0 && p.err[len - 1] == '\n' &&
                  strchr(p.err, '\n') == p.err + len - 1,
              "%s: not one line: %s", what, p.err);
        CHECK(strstr(p.err, what), "%s: error does not name it: %s", what, p.err);
        if (args[1] && args[1][0] && strncmp(what, "--", 2) == 0 && !strchr(what, ' '))
            CHECK(strstr(p.err, args[1]), "%s: error does not show the value: %s", what, p.err);
        CHECK(!strstr(p.err, "s3cret"), "the token was echoed: %s", p.err);
        parsed_free(&p);
    }
}

static void test_help_and_version(void)
{
    parsed p = run(NULL, ARGS("--version"));
    CHECK(p.rc == ND_CONFIG_VERSION && strcmp(p.out, "neardupd " ND_PROGRAM_VERSION "\n") == 0 &&
              !p.err[0],
          "rc %d out %s", p.rc, p.out);
    parsed_free(&p);
    /* --help wins over a bad value later on the line, not over one before */
    p = run(NULL, ARGS("--help", "--k", "99"));
    CHECK(p.rc == ND_CONFIG_HELP && strstr(p.out, "Usage: neardupd"), "rc %d", p.rc);
    parsed_free(&p);
    p = run(NULL, ARGS("-h"));
    CHECK(p.rc == ND_CONFIG_HELP && strstr(p.out, "--max-body SIZE"), "-h: rc %d", p.rc);
    parsed_free(&p);
    /* usage() writes the same text --help does */
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    nd_config_usage(f, "neardupd");
    fclose(f);
    p = run(NULL, ARGS("--help"));
    size_t d = 0;
    while (text[d] && text[d] == p.out[d])
        d++;
    CHECK(strcmp(text, p.out) == 0, "nd_config_usage differs from --help at %zu: %.40s | %.40s", d,
          text + d, p.out + d);
    free(text);
    parsed_free(&p);
}

/* describe() never writes past cap and always ends in a NUL; what it writes
 * is the whole object or, when that does not fit, {"truncated":true}: the
 * start-up log line stays JSON (a --data of 2,100 bytes used to leave
 * neardupd's 2 KiB buffer without its NUL: a stack overflow under ASan). */
static void test_describe_fits(void)
{
    char full[8192];
    nd_config c;
    nd_config_defaults(&c);
    size_t n = nd_config_describe(&c, full, sizeof(full));
    CHECK(n > 100 && n == strlen(full), "n %zu", n);
    for (size_t cap = 1; cap < n + 3; cap++) {
        char buf[8192];
        memset(buf, '#', sizeof(buf));
        size_t m = nd_config_describe(&c, buf, cap);
        CHECK(m < cap && buf[m] == 0 && buf[cap] == '#', "cap %zu: %zu", cap, m);
        if (cap > n)
            CHECK(strcmp(buf, full) == 0, "cap %zu: %s", cap, buf);
        else if (cap >= 19)
            CHECK(strcmp(buf, "{\"truncated\":true}") == 0, "cap %zu: %s", cap, buf);
        else
            CHECK(m == 0, "cap %zu: %s", cap, buf);
    }
    /* the longest --data, all quotes (escaped to twice its length), in the
     * 2 KiB neardupd gives it, and in a buffer large enough */
    memset(c.data_dir, '"', sizeof(c.data_dir) - 1);
    c.data_dir[sizeof(c.data_dir) - 1] = 0;
    char small[2048];
    size_t m = nd_config_describe(&c, small, sizeof(small));
    CHECK(m == strlen(small) && strcmp(small, "{\"truncated\":true}") == 0, "%zu", m);
    static char big[16384];
    m = nd_config_describe(&c, big, sizeof(big));
    json_t *j = describe(&c);
    CHECK(m == strlen(big) && j &&
          strlen(json_string_value(json_object_get(j, "data"))) == sizeof(c.data_dir) - 1);
    json_decref(j);
}

/* What may be logged of --nats: every userinfo's secret replaced. */
static void test_redact_urls(void)
{
    static const struct {
        const char *in, *out;
        unsigned found;
    } cases[] = {
        {"nats://u:p@h:4222", "nats://u:***@h:4222", 1},
        {"nats://tok@h", "nats://***@h", 1},
        {"nats://h:1,nats://a:b@c:2", "nats://h:1,nats://a:***@c:2", 1},
        {"tls://a:b@c:1, nats://d:e@f:2", "tls://a:***@c:1, nats://d:***@f:2", 2},
        {"u:p@h:1", "u:***@h:1", 1},
        {"nats://u:p@ss@h", "nats://u:***@h", 1},
        {"nats://h:1/x@y", "nats://h:1/x@y", 0},
        {"", "", 0},
    };
    char out[128];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        unsigned n = nd_config_redact_urls(cases[i].in, out, sizeof(out));
        CHECK(n == cases[i].found && strcmp(out, cases[i].out) == 0, "%s -> %s (%u)", cases[i].in,
              out, n);
    }
    /* In place, lengths kept (argv). */
    char masked[] = "nats://u:p@ss@h:1,tls://tok@h2, nats://h3";
    nd_config_mask_urls(masked);
    CHECK(strcmp(masked, "nats://u:****@h:1,tls://***@h2, nats://h3") == 0, "%s", masked);
    /* Cut to the buffer, still terminated, the secret never copied. */
    char small[12];
    nd_config_redact_urls("nats://user:secret@host", small, sizeof(small));
    CHECK(strlen(small) == sizeof(small) - 1 && !strstr(small, "sec"), "%s", small);
    /* The start-up line shows the URL without its secret. */
    nd_config cfg;
    nd_config_defaults(&cfg);
    snprintf(cfg.nats, sizeof(cfg.nats), "nats://admin:s3cretpass@127.0.0.1:4222");
    char line[16384];
    nd_config_describe(&cfg, line, sizeof(line));
    CHECK(!strstr(line, "s3cretpass") &&
              strstr(line, "\"nats\":\"nats://admin:***@127.0.0.1:4222\""),
          "%s", line);
}

int main(void)
{
    UNIT_RUN(test_help_lists_every_option);
    UNIT_RUN(test_help_defaults_round_trip);
    UNIT_RUN(test_defaults);
    UNIT_RUN(test_flag_over_env);
    UNIT_RUN(test_switches);
    UNIT_RUN(test_values);
    UNIT_RUN(test_bad_values);
    UNIT_RUN(test_help_and_version);
    UNIT_RUN(test_describe_fits);
    UNIT_RUN(test_redact_urls);
    return unit_summary("config");
}
