/* Shared by the libFuzzer targets of firmware/fuzz (not part of the core).
 *
 * FUZZ_CHECK(cond): an invariant of the code under test. A broken one prints where
 * and what, then aborts; libFuzzer reports it as a crash ("deadly signal") and writes
 * the input to its artifact directory, exactly like a sanitizer report.
 */
#ifndef FUZZ_COMMON_H
#define FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static inline void fuzz_fail(const char *file, int line, const char *what) {
    fprintf(stderr, "%s:%d: invariant broken: %s\n", file, line, what);
    fflush(stderr);
    abort();
}

#define FUZZ_CHECK(cond)                                                                 \
    do {                                                                                 \
        if (!(cond)) fuzz_fail(__FILE__, __LINE__, #cond);                               \
    } while (0)

/* Sequential reader over the fuzz input: bytes run out as zeros, never past the end. */
typedef struct {
    const uint8_t *p;
    size_t len, pos;
} fuzz_in;

static inline uint8_t fuzz_u8(fuzz_in *in) { return in->pos < in->len ? in->p[in->pos++] : 0; }

static inline uint32_t fuzz_u16(fuzz_in *in) {
    uint32_t lo = fuzz_u8(in);
    return lo | (uint32_t)fuzz_u8(in) << 8;
}

static inline uint32_t fuzz_u32(fuzz_in *in) {
    uint32_t lo = fuzz_u16(in);
    return lo | fuzz_u16(in) << 16;
}

static inline uint64_t fuzz_u64(fuzz_in *in) {
    uint64_t lo = fuzz_u32(in);
    return lo | (uint64_t)fuzz_u32(in) << 32;
}

/* Up to n bytes of the input at the current position (fewer at its end). */
static inline const uint8_t *fuzz_take(fuzz_in *in, size_t n, size_t *got) {
    size_t rest = in->len - in->pos;
    const uint8_t *p = in->p + in->pos;
    *got = n < rest ? n : rest;
    in->pos += *got;
    return p;
}

/* Independent oracles (written from the SPEC, sharing no code with the core). */

/* CRC-32 IEEE, bitwise (SPEC §2.2). */
static inline uint32_t fuzz_crc32(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return c ^ 0xFFFFFFFFu;
}

/* RFC 3629 UTF-8, by the ranges of Unicode Table 3-7. */
static inline int fuzz_utf8_ok(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t b = s[i];
        size_t k;
        uint8_t lo = 0x80, hi = 0xBF;
        if (b <= 0x7F) { i++; continue; }
        if (b >= 0xC2 && b <= 0xDF) k = 1;
        else if (b == 0xE0) { k = 2; lo = 0xA0; }
        else if (b >= 0xE1 && b <= 0xEC) k = 2;
        else if (b == 0xED) { k = 2; hi = 0x9F; }
        else if (b >= 0xEE && b <= 0xEF) k = 2;
        else if (b == 0xF0) { k = 3; lo = 0x90; }
        else if (b >= 0xF1 && b <= 0xF3) k = 3;
        else if (b == 0xF4) { k = 3; hi = 0x8F; }
        else return 0;
        if (n - i - 1 < k) return 0;
        if (s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (size_t j = 2; j <= k; j++)
            if (s[i + j] < 0x80 || s[i + j] > 0xBF) return 0;
        i += k + 1;
    }
    return 1;
}

#endif
