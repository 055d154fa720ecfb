/* neardup.c - the command-line tool.
 *
 *   neardup fingerprint [FILE]          16 hex digits for the text in FILE or stdin
 *   neardup fingerprint --jsonl [FILE]  JSON lines in, JSON lines out
 *   neardup backup [--data DIR] DEST    consistent copy of a (running) store
 *   neardup version                     program and fingerprint versions */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fingerprint.h"
#include "fingerprint_stream.h"
#include "store.h"

#define DEFAULT_DATA_DIR "./data"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: neardup <command> [options]\n"
            "\n"
            "commands:\n"
            "  fingerprint [FILE]            print the 64-bit fingerprint of the text in\n"
            "                                FILE (or stdin) as 16 lowercase hex digits\n"
            "  fingerprint --jsonl [FILE]    read JSON lines {\"id\":..,\"text\":..}, write\n"
            "                                {\"id\":..,\"simhash\":..,\"chars\":N,\"features\":N}\n"
            "                                (or {\"id\":..,\"error\":..}) per line\n"
            "  backup [--data DIR] DEST      write a consistent copy of the store in DIR\n"
            "                                (default $NEARDUP_DATA or %s) into DEST;\n"
            "                                works while neardupd runs\n"
            "  version                       print versions\n",
            DEFAULT_DATA_DIR);
}

/* Reads all of f into a new buffer (caller frees). Returns NULL on error. */
static char *read_all(FILE *f, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *bigger = realloc(buf, cap * 2);
        if (!bigger) {
            free(buf);
            return NULL;
        }
        buf = bigger;
        cap *= 2;
    }
    if (buf && ferror(f)) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static int fingerprint_one(const nd_fingerprinter *fp, FILE *in, const char *name)
{
    size_t len = 0;
    char *text = read_all(in, &len);
    if (!text) {
        fprintf(stderr, "neardup: cannot read %s: %s\n", name, strerror(errno));
        return 1;
    }
    nd_fp_scratch *scratch = NULL;
    nd_fingerprint_result r;
    int rc = nd_fp_scratch_create(&scratch);
    if (rc == 0)
        rc = nd_fingerprint(fp, scratch, text, len, &r);
    nd_fp_scratch_destroy(scratch);
    free(text);
    if (rc < 0) {
        fprintf(stderr, "neardup: %s: %s\n", name,
                rc == -EILSEQ ? "text is not valid UTF-8" : strerror(-rc));
        return 1;
    }
    char hex[17];
    nd_simhash_format(r.simhash, hex);
    printf("%s\n", hex);
    return 0;
}

static int cmd_fingerprint(int argc, char **argv)
{
    int jsonl = 0;
    const char *path = NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--jsonl") == 0) {
            jsonl = 1;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "neardup fingerprint: unknown option %s\n", argv[i]);
            return 2;
        } else if (!path) {
            path = argv[i];
        } else {
            fprintf(stderr, "neardup fingerprint: one FILE at most\n");
            return 2;
        }
    }
    FILE *in = stdin;
    if (path && strcmp(path, "-") != 0 && !(in = fopen(path, "rb"))) {
        fprintf(stderr, "neardup: cannot open %s: %s\n", path, strerror(errno));
        return 1;
    }
    nd_fingerprinter *fp = NULL;
    int rc = nd_fingerprinter_create(&fp);
    if (rc < 0) {
        fprintf(stderr, "neardup: %s\n", strerror(-rc));
    } else if (jsonl) {
        rc = nd_fingerprint_stream(fp, in, stdout);
        if (rc < 0)
            fprintf(stderr, "neardup: %s\n", strerror(-rc));
    } else {
        rc = fingerprint_one(fp, in, path ? path : "stdin") ? -1 : 0;
    }
    nd_fingerprinter_destroy(fp);
    if (in != stdin)
        fclose(in);
    return rc < 0 ? 1 : 0;
}

static int cmd_backup(int argc, char **argv)
{
    const char *data = getenv("NEARDUP_DATA");
    const char *dest = NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--data") == 0 && i + 1 < argc)
            data = argv[++i];
        else if (strncmp(argv[i], "--data=", 7) == 0)
            data = argv[i] + 7;
        else if (argv[i][0] != '-' && !dest)
            dest = argv[i];
        else {
            fprintf(stderr, "neardup backup: unexpected argument %s\n", argv[i]);
            return 2;
        }
    }
    if (!dest) {
        fprintf(stderr, "neardup backup: DEST is required\n");
        return 2;
    }
    if (!data || !*data)
        data = DEFAULT_DATA_DIR;
    char err[512] = "";
    int rc = nd_store_backup_path(data, dest, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "neardup backup: %s\n", err[0] ? err : strerror(-rc));
        return 1;
    }
    fprintf(stderr, "neardup backup: copied %s to %s\n", data, dest);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "fingerprint") == 0)
        return cmd_fingerprint(argc - 2, argv + 2);
    if (strcmp(cmd, "backup") == 0)
        return cmd_backup(argc - 2, argv + 2);
    if (strcmp(cmd, "version") == 0) {
        printf("neardup %s\nfingerprint %s\n", ND_PROGRAM_VERSION, ND_FINGERPRINT_VERSION);
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "neardup: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
