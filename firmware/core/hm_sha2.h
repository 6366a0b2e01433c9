/* SHA-256 and SHA-512 (FIPS 180-4), streaming and one-shot.
 *
 * SHA-256 gives the record, pack and chain hashes (SPEC §7.4, §8.1); SHA-512 is the
 * hash inside Ed25519 (RFC 8032). Checked against the FIPS 180-4 examples, the NIST
 * CAVP short, long and Monte Carlo files and protocol/vectors/hashes.json:
 *   SHA-256("abc") = ba7816bf 8f01cfea 414140de 5dae2223 b00361a3 96177a9c b410ff61 f20015ad
 *
 * Use: init, then update any number of times with any split of the message, then
 * final. A context is a plain value (no pointers inside): it may be copied to fork a
 * hash, e.g. to hash a common prefix once.
 *
 * Invariants:
 *  - update(ctx, a); update(ctx, b) gives the same digest as update(ctx, a || b);
 *    update(ctx, p, 0) does nothing, and p may then be NULL.
 *  - final writes the digest and wipes the context; init it again to reuse it.
 *  - Message lengths: up to 2^61 - 1 bytes for SHA-256 (its 64-bit bit count), up
 *    to 2^64 - 1 bytes for SHA-512 (the byte counter).
 *  - No heap, no globals, no state outside the context (104 bytes for SHA-256,
 *    200 for SHA-512). Stack below update/final: about 170 / 340 bytes on a
 *    Cortex-M3 (16-word rolling message schedule); the one-shot functions add
 *    their context.
 *  - Running time depends on the message length only, not on its contents.
 */
#ifndef HM_SHA2_H
#define HM_SHA2_H

#include <stddef.h>
#include <stdint.h>

#define HM_SHA256_SIZE 32
#define HM_SHA512_SIZE 64

typedef struct {
    uint32_t state[8];
    uint64_t count; /* bytes absorbed so far */
    uint8_t block[64]; /* the first count % 64 bytes are a partial block */
} hm_sha256_ctx;

typedef struct {
    uint64_t state[8];
    uint64_t count; /* bytes absorbed so far */
    uint8_t block[128]; /* the first count % 128 bytes are a partial block */
} hm_sha512_ctx;

void hm_sha256_init(hm_sha256_ctx *ctx);
void hm_sha256_update(hm_sha256_ctx *ctx, const void *data, size_t len);
void hm_sha256_final(hm_sha256_ctx *ctx, uint8_t digest[HM_SHA256_SIZE]);
void hm_sha256(uint8_t digest[HM_SHA256_SIZE], const void *data, size_t len);

void hm_sha512_init(hm_sha512_ctx *ctx);
void hm_sha512_update(hm_sha512_ctx *ctx, const void *data, size_t len);
void hm_sha512_final(hm_sha512_ctx *ctx, uint8_t digest[HM_SHA512_SIZE]);
void hm_sha512(uint8_t digest[HM_SHA512_SIZE], const void *data, size_t len);

#endif
