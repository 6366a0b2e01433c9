#define _POSIX_C_SOURCE 200809L /* strtok_r */
#include "hexio.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char line[2 * HEXIO_MAX_BYTES * 2 + 256];
static int first_field = 1;

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static void die(const char *what, const char *tok) {
    fprintf(stderr, "hexio: %s: %s\n", what, tok);
    exit(2);
}

int hexio_next(hexio_req *req) {
    memset(req, 0, sizeof *req);
    if (!fgets(line, sizeof line, stdin)) return 0;
    size_t n = strlen(line);
    if (n && line[n - 1] == '\n') line[--n] = 0;
    char *save = NULL;
    char *tok = strtok_r(line, " ", &save);
    if (!tok) die("empty request", "");
    if (strlen(tok) >= sizeof req->cmd) die("command too long", tok);
    strcpy(req->cmd, tok);
    while ((tok = strtok_r(NULL, " ", &save)) != NULL) {
        if (req->argc >= HEXIO_MAX_ARGS) die("too many arguments", tok);
        int i = req->argc++;
        if (tok[0] == 'x') {
            size_t hex = strlen(tok + 1);
            if (hex % 2) die("odd hex length", tok);
            req->is_bytes[i] = 1;
            req->len[i] = hex / 2;
            req->bytes[i] = malloc(hex / 2 + 1);
            if (!req->bytes[i]) die("out of memory", tok);
            for (size_t k = 0; k < hex / 2; k++) {
                int hi = hexval(tok[1 + 2 * k]), lo = hexval(tok[2 + 2 * k]);
                if (hi < 0 || lo < 0) die("bad hex", tok);
                req->bytes[i][k] = (uint8_t)(hi << 4 | lo);
            }
        } else {
            char *end = NULL;
            req->num[i] = strtoull(tok, &end, 10);
            if (!end || *end) die("bad number", tok);
        }
    }
    return 1;
}

void hexio_free(hexio_req *req) {
    for (int i = 0; i < req->argc; i++) free(req->bytes[i]);
}

static void sep(void) {
    if (!first_field) putchar(' ');
    first_field = 0;
}

void hexio_num(uint64_t value) {
    sep();
    printf("%llu", (unsigned long long)value);
}

void hexio_snum(int64_t value) {
    sep();
    printf("%lld", (long long)value);
}

void hexio_bytes(const uint8_t *data, size_t len) {
    sep();
    putchar('x');
    for (size_t i = 0; i < len; i++) printf("%02x", data[i]);
}

void hexio_word(const char *word) {
    sep();
    fputs(word, stdout);
}

void hexio_end(void) {
    putchar('\n');
    fflush(stdout);
    first_field = 1;
}

int hexio_args(const hexio_req *req, const char *kinds) {
    size_t n = strlen(kinds);
    if ((size_t)req->argc != n) return 0;
    for (size_t i = 0; i < n; i++)
        if ((kinds[i] == 'x') != (req->is_bytes[i] != 0)) return 0;
    return 1;
}
