/* Test program for hm_sha2, hm_ed25519 and hm_crypto (driven by tests/test_native_crypto.py).
 *
 * Requests, one per line (hexio notation), and answers:
 *   sha256 x<msg>                  -> x<digest>        (hm_hash_sha256, one-shot)
 *   sha512 x<msg>                  -> x<digest>
 *   sha256_chunks x<msg> <chunk>   -> x<digest>        (streaming, updates of <chunk> bytes)
 *   sha512_chunks x<msg> <chunk>   -> x<digest>
 *   sha256_repeat x<part> <count>  -> x<digest>        (part repeated count times, streamed)
 *   sha512_repeat x<part> <count>  -> x<digest>
 *   sha256_monte x<seed>           -> x<md> * 100      (NIST CAVP SHA Monte Carlo checkpoints)
 *   sha512_monte x<seed>           -> x<md> * 100
 *   pub x<seed>                    -> x<public key>
 *   sign x<seed> x<msg>            -> x<signature>
 *   verify x<pub> x<msg> x<sig>    -> 1 (valid) or 0
 *   selftest                       -> ok, or fail <what>
 * A request with wrong argument kinds or sizes answers "bad-request".
 */
#include <stdio.h>
#include <string.h>

#include "hexio.h"
#include "hm_crypto.h"
#include "hm_ed25519.h"
#include "hm_sha2.h"

static int is_bytes(const hexio_req *req, int i, size_t len) {
    return i < req->argc && req->is_bytes[i] && (len == (size_t)-1 || req->len[i] == len);
}

static int is_num(const hexio_req *req, int i) { return i < req->argc && !req->is_bytes[i]; }

#define ANY ((size_t)-1)

/* The hash functions behind one interface, so each request exists once for both. */
typedef struct {
    size_t size;
    void (*oneshot)(uint8_t *digest, const uint8_t *data, size_t len);
    void (*init)(void *ctx);
    void (*update)(void *ctx, const uint8_t *data, size_t len);
    void (*final)(void *ctx, uint8_t *digest);
} hash_fns;

static void s256_oneshot(uint8_t *d, const uint8_t *p, size_t n) { hm_hash_sha256(d, p, n); }
static void s256_init(void *c) { hm_sha256_init(c); }
static void s256_update(void *c, const uint8_t *p, size_t n) { hm_sha256_update(c, p, n); }
static void s256_final(void *c, uint8_t *d) { hm_sha256_final(c, d); }
static void s512_oneshot(uint8_t *d, const uint8_t *p, size_t n) { hm_sha512(d, p, n); }
static void s512_init(void *c) { hm_sha512_init(c); }
static void s512_update(void *c, const uint8_t *p, size_t n) { hm_sha512_update(c, p, n); }
static void s512_final(void *c, uint8_t *d) { hm_sha512_final(c, d); }

static const hash_fns sha256_fns = {32, s256_oneshot, s256_init, s256_update, s256_final};
static const hash_fns sha512_fns = {64, s512_oneshot, s512_init, s512_update, s512_final};

typedef union {
    hm_sha256_ctx s256;
    hm_sha512_ctx s512;
} any_ctx;

static void hash_chunks(const hash_fns *h, const hexio_req *req) {
    any_ctx ctx;
    uint8_t digest[64];
    size_t chunk = (size_t)req->num[1], len = req->len[0];
    h->init(&ctx);
    h->update(&ctx, NULL, 0);
    for (size_t off = 0; off < len; off += chunk) {
        size_t n = len - off < chunk ? len - off : chunk;
        h->update(&ctx, req->bytes[0] + off, n);
        h->update(&ctx, NULL, 0);
    }
    h->final(&ctx, digest);
    hexio_bytes(digest, h->size);
}

static void hash_repeat(const hash_fns *h, const hexio_req *req) {
    any_ctx ctx;
    uint8_t digest[64];
    h->init(&ctx);
    for (uint64_t i = 0; i < req->num[1]; i++) h->update(&ctx, req->bytes[0], req->len[0]);
    h->final(&ctx, digest);
    hexio_bytes(digest, h->size);
}

/* SHAVS Monte Carlo test: MD0 = MD1 = MD2 = seed; MDi = H(MD(i-3) || MD(i-2) ||
 * MD(i-1)) for i = 3..1002; checkpoint MD1002, which seeds the next of 100 rounds. */
static void hash_monte(const hash_fns *h, const hexio_req *req) {
    uint8_t md[3][64], msg[3 * 64];
    size_t n = h->size;
    memcpy(md[0], req->bytes[0], n);
    for (unsigned j = 0; j < 100; j++) {
        memcpy(md[1], md[0], n);
        memcpy(md[2], md[0], n);
        for (unsigned i = 3; i < 1003; i++) {
            memcpy(msg, md[i % 3], n);
            memcpy(msg + n, md[(i + 1) % 3], n);
            memcpy(msg + 2 * n, md[(i + 2) % 3], n);
            h->oneshot(md[i % 3], msg, 3 * n);
        }
        hexio_bytes(md[1002 % 3], n); /* md[0]: the next round's seed */
    }
}

static int hex_eq(const uint8_t *got, const char *hex, size_t len) {
    for (size_t i = 0; i < len; i++) {
        unsigned byte;
        if (sscanf(hex + 2 * i, "%2x", &byte) != 1 || got[i] != byte) return 0;
    }
    return 1;
}

/* Built-in checks, independent of the Python side. */
static const char *selftest(void) {
    uint8_t d[64], pub[32], sig[64], seed[32];
    hm_sha256_ctx c256;
    hm_hash_sha256(d, (const uint8_t *)"abc", 3);
    if (!hex_eq(d, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", 32))
        return "sha256-abc";
    hm_sha512(d, "abc", 3);
    if (!hex_eq(d,
                "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a"
                "2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f",
                64))
        return "sha512-abc";
    hm_sha256_init(&c256);
    hm_sha256_update(&c256, "a", 1);
    hm_sha256_update(&c256, "bc", 2);
    hm_sha256_final(&c256, d);
    if (!hex_eq(d, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", 32))
        return "sha256-abc-streamed";
    /* RFC 8032 §7.1 TEST 1: empty message. */
    for (size_t i = 0; i < 32; i++) {
        unsigned byte;
        sscanf("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60" + 2 * i,
               "%2x", &byte);
        seed[i] = (uint8_t)byte;
    }
    hm_public_key(pub, seed);
    if (!hex_eq(pub, "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", 32))
        return "rfc8032-test1-public";
    hm_sign(sig, seed, pub, NULL, 0);
    if (!hex_eq(sig,
                "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155"
                "5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
                64))
        return "rfc8032-test1-signature";
    if (hm_verify(sig, pub, NULL, 0) != 0) return "rfc8032-test1-verify";
    sig[0] ^= 1;
    if (hm_verify(sig, pub, NULL, 0) != -1) return "rfc8032-test1-forgery";
    sig[0] ^= 1;
    /* The direct API agrees with the interface, also when sig overlaps the message. */
    uint8_t buf[64] = {1, 2, 3};
    hm_ed25519_sign(buf, seed, pub, buf, 3);
    uint8_t msg[3] = {1, 2, 3};
    if (hm_ed25519_verify(buf, pub, msg, 3) != 0) return "sign-in-place";
    return NULL;
}

int main(void) {
    hexio_req req;
    while (hexio_next(&req)) {
        const char *cmd = req.cmd;
        const hash_fns *h = strncmp(cmd, "sha256", 6) == 0   ? &sha256_fns
                            : strncmp(cmd, "sha512", 6) == 0 ? &sha512_fns
                                                             : NULL;
        const char *sub = h ? cmd + 6 : "";
        if (h && strcmp(sub, "") == 0 && req.argc == 1 && is_bytes(&req, 0, ANY)) {
            uint8_t digest[64];
            h->oneshot(digest, req.bytes[0], req.len[0]);
            hexio_bytes(digest, h->size);
        } else if (h && strcmp(sub, "_chunks") == 0 && req.argc == 2 && is_bytes(&req, 0, ANY)
                   && is_num(&req, 1) && req.num[1] > 0) {
            hash_chunks(h, &req);
        } else if (h && strcmp(sub, "_repeat") == 0 && req.argc == 2 && is_bytes(&req, 0, ANY)
                   && is_num(&req, 1)) {
            hash_repeat(h, &req);
        } else if (h && strcmp(sub, "_monte") == 0 && req.argc == 1
                   && is_bytes(&req, 0, h->size)) {
            hash_monte(h, &req);
        } else if (strcmp(cmd, "pub") == 0 && req.argc == 1 && is_bytes(&req, 0, 32)) {
            uint8_t pub[32];
            hm_public_key(pub, req.bytes[0]);
            hexio_bytes(pub, 32);
        } else if (strcmp(cmd, "sign") == 0 && req.argc == 2 && is_bytes(&req, 0, 32)
                   && is_bytes(&req, 1, ANY)) {
            uint8_t sig[64], pub[32];
            hm_public_key(pub, req.bytes[0]); /* as the agent does, once per key */
            hm_sign(sig, req.bytes[0], pub, req.bytes[1], req.len[1]);
            hexio_bytes(sig, 64);
        } else if (strcmp(cmd, "verify") == 0 && req.argc == 3 && is_bytes(&req, 0, 32)
                   && is_bytes(&req, 1, ANY) && is_bytes(&req, 2, 64)) {
            hexio_num(hm_verify(req.bytes[2], req.bytes[0], req.bytes[1], req.len[1]) == 0);
        } else if (strcmp(cmd, "selftest") == 0 && req.argc == 0) {
            const char *failed = selftest();
            hexio_word(failed ? "fail" : "ok");
            if (failed) hexio_word(failed);
        } else {
            hexio_word("bad-request");
        }
        hexio_end();
        hexio_free(&req);
    }
    return 0;
}
