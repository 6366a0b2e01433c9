/* Line-oriented hex I/O for the native test programs.
 *
 * A test program reads one request per line on stdin: a command word followed by
 * space-separated arguments, each either a decimal integer or a hex byte string
 * prefixed with "x" (e.g. "x00ff", "x" for empty). It answers with one line per
 * request on stdout in the same notation. pytest (tests/test_native_*.py) drives
 * the programs with protocol/vectors and independent oracles.
 */
#ifndef HEXIO_H
#define HEXIO_H

#include <stddef.h>
#include <stdint.h>

#define HEXIO_MAX_ARGS 64
#define HEXIO_MAX_BYTES 70000

typedef struct {
    char cmd[32];
    int argc;
    /* for each argument: is_bytes ? bytes[arg] with len[arg] : num[arg] */
    int is_bytes[HEXIO_MAX_ARGS];
    uint64_t num[HEXIO_MAX_ARGS];
    uint8_t *bytes[HEXIO_MAX_ARGS];
    size_t len[HEXIO_MAX_ARGS];
} hexio_req;

/* Read the next request; returns 0 at end of input, 1 on success, exits on bad input. */
int hexio_next(hexio_req *req);
/* Release the byte buffers of a request. */
void hexio_free(hexio_req *req);
/* 1 when the request has exactly the arguments ``kinds`` names, one letter each:
 * 'x' a hex byte string, anything else a number. */
int hexio_args(const hexio_req *req, const char *kinds);

/* Answer fields, then hexio_end() to finish the line. */
void hexio_num(uint64_t value);
void hexio_snum(int64_t value);
void hexio_bytes(const uint8_t *data, size_t len);
void hexio_word(const char *word);
void hexio_end(void);

#endif
