#include "hm_sha2.h"

#include <string.h>

/* Initial hash values and round constants (FIPS 180-4 §4.2.2, §4.2.3, §5.3): the
 * first 32/64 bits of the fractional parts of the square roots (H) and cube roots
 * (K) of the first primes. */
static const uint32_t sha256_iv[8] = {
    0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
    0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u,
};

static const uint32_t sha256_k[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u,
    0x923f82a4u, 0xab1c5ed5u, 0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u,
    0x72be5d74u, 0x80deb1feu, 0x9bdc06a7u, 0xc19bf174u, 0xe49b69c1u, 0xefbe4786u,
    0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu, 0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau,
    0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u, 0xc6e00bf3u, 0xd5a79147u,
    0x06ca6351u, 0x14292967u, 0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu, 0x53380d13u,
    0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u, 0xa2bfe8a1u, 0xa81a664bu,
    0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u,
    0x19a4c116u, 0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au,
    0x5b9cca4fu, 0x682e6ff3u, 0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u,
    0x90befffau, 0xa4506cebu, 0xbef9a3f7u, 0xc67178f2u,
};

static const uint64_t sha512_iv[8] = {
    0x6a09e667f3bcc908u, 0xbb67ae8584caa73bu, 0x3c6ef372fe94f82bu,
    0xa54ff53a5f1d36f1u, 0x510e527fade682d1u, 0x9b05688c2b3e6c1fu,
    0x1f83d9abfb41bd6bu, 0x5be0cd19137e2179u,
};

static const uint64_t sha512_k[80] = {
    0x428a2f98d728ae22u, 0x7137449123ef65cdu, 0xb5c0fbcfec4d3b2fu,
    0xe9b5dba58189dbbcu, 0x3956c25bf348b538u, 0x59f111f1b605d019u,
    0x923f82a4af194f9bu, 0xab1c5ed5da6d8118u, 0xd807aa98a3030242u,
    0x12835b0145706fbeu, 0x243185be4ee4b28cu, 0x550c7dc3d5ffb4e2u,
    0x72be5d74f27b896fu, 0x80deb1fe3b1696b1u, 0x9bdc06a725c71235u,
    0xc19bf174cf692694u, 0xe49b69c19ef14ad2u, 0xefbe4786384f25e3u,
    0x0fc19dc68b8cd5b5u, 0x240ca1cc77ac9c65u, 0x2de92c6f592b0275u,
    0x4a7484aa6ea6e483u, 0x5cb0a9dcbd41fbd4u, 0x76f988da831153b5u,
    0x983e5152ee66dfabu, 0xa831c66d2db43210u, 0xb00327c898fb213fu,
    0xbf597fc7beef0ee4u, 0xc6e00bf33da88fc2u, 0xd5a79147930aa725u,
    0x06ca6351e003826fu, 0x142929670a0e6e70u, 0x27b70a8546d22ffcu,
    0x2e1b21385c26c926u, 0x4d2c6dfc5ac42aedu, 0x53380d139d95b3dfu,
    0x650a73548baf63deu, 0x766a0abb3c77b2a8u, 0x81c2c92e47edaee6u,
    0x92722c851482353bu, 0xa2bfe8a14cf10364u, 0xa81a664bbc423001u,
    0xc24b8b70d0f89791u, 0xc76c51a30654be30u, 0xd192e819d6ef5218u,
    0xd69906245565a910u, 0xf40e35855771202au, 0x106aa07032bbd1b8u,
    0x19a4c116b8d2d0c8u, 0x1e376c085141ab53u, 0x2748774cdf8eeb99u,
    0x34b0bcb5e19b48a8u, 0x391c0cb3c5c95a63u, 0x4ed8aa4ae3418acbu,
    0x5b9cca4f7763e373u, 0x682e6ff3d6b2b8a3u, 0x748f82ee5defb2fcu,
    0x78a5636f43172f60u, 0x84c87814a1f0ab72u, 0x8cc702081a6439ecu,
    0x90befffa23631e28u, 0xa4506cebde82bde9u, 0xbef9a3f7b2c67915u,
    0xc67178f2e372532bu, 0xca273eceea26619cu, 0xd186b8c721c0c207u,
    0xeada7dd6cde0eb1eu, 0xf57d4f7fee6ed178u, 0x06f067aa72176fbau,
    0x0a637dc5a2c898a6u, 0x113f9804bef90daeu, 0x1b710b35131c471bu,
    0x28db77f523047d84u, 0x32caab7b40c72493u, 0x3c9ebe0a15c9bebcu,
    0x431d67c49c100d4cu, 0x4cc5d4becb3e42b6u, 0x597f299cfc657e2au,
    0x5fcb6fab3ad6faecu, 0x6c44198c4a475817u,
};

static void wipe(void *p, size_t len) {
    volatile uint8_t *v = (volatile uint8_t *)p;
    while (len--) *v++ = 0;
}

static uint32_t load32_be(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t load64_be(const uint8_t *p) {
    return (uint64_t)load32_be(p) << 32 | load32_be(p + 4);
}

static void store32_be(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void store64_be(uint8_t *p, uint64_t v) {
    store32_be(p, (uint32_t)(v >> 32));
    store32_be(p + 4, (uint32_t)v);
}

static uint32_t ror32(uint32_t x, unsigned n) { return x >> n | x << (32 - n); }
static uint64_t ror64(uint64_t x, unsigned n) { return x >> n | x << (64 - n); }

/* ---- SHA-256 ------------------------------------------------------------------ */

/* One 64-byte block into the state; the message schedule W rolls in 16 words
 * (W[t] lives in w[t % 16]). */
static void sha256_compress(uint32_t state[8], const uint8_t block[64]) {
    uint32_t w[16];
    for (unsigned i = 0; i < 16; i++) w[i] = load32_be(block + 4 * i);
    uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
    uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
    for (unsigned t = 0; t < 64; t++) {
        if (t >= 16) {
            uint32_t w15 = w[(t + 1) & 15], w2 = w[(t + 14) & 15];
            w[t & 15] += (ror32(w15, 7) ^ ror32(w15, 18) ^ (w15 >> 3)) + w[(t + 9) & 15]
                         + (ror32(w2, 17) ^ ror32(w2, 19) ^ (w2 >> 10));
        }
        uint32_t t1 = h + (ror32(e, 6) ^ ror32(e, 11) ^ ror32(e, 25)) + ((e & f) ^ (~e & g))
                      + sha256_k[t] + w[t & 15];
        uint32_t t2 = (ror32(a, 2) ^ ror32(a, 13) ^ ror32(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
    state[4] += e;
    state[5] += f;
    state[6] += g;
    state[7] += h;
    wipe(w, sizeof w);
}

void hm_sha256_init(hm_sha256_ctx *ctx) {
    memcpy(ctx->state, sha256_iv, sizeof ctx->state);
    ctx->count = 0;
}

void hm_sha256_update(hm_sha256_ctx *ctx, const void *data, size_t len) {
    const uint8_t *p = (const uint8_t *)data;
    size_t used = (size_t)(ctx->count & 63u);
    if (len == 0) return; /* data may be NULL */
    ctx->count += len;
    if (used) {
        size_t take = 64 - used < len ? 64 - used : len;
        memcpy(ctx->block + used, p, take);
        p += take;
        len -= take;
        if (used + take < 64) return;
        sha256_compress(ctx->state, ctx->block);
    }
    for (; len >= 64; p += 64, len -= 64) sha256_compress(ctx->state, p);
    if (len) memcpy(ctx->block, p, len);
}

void hm_sha256_final(hm_sha256_ctx *ctx, uint8_t digest[HM_SHA256_SIZE]) {
    size_t used = (size_t)(ctx->count & 63u);
    ctx->block[used++] = 0x80;
    if (used > 56) {
        memset(ctx->block + used, 0, 64 - used);
        sha256_compress(ctx->state, ctx->block);
        used = 0;
    }
    memset(ctx->block + used, 0, 56 - used);
    store64_be(ctx->block + 56, ctx->count << 3);
    sha256_compress(ctx->state, ctx->block);
    for (unsigned i = 0; i < 8; i++) store32_be(digest + 4 * i, ctx->state[i]);
    wipe(ctx, sizeof *ctx);
}

void hm_sha256(uint8_t digest[HM_SHA256_SIZE], const void *data, size_t len) {
    hm_sha256_ctx ctx;
    hm_sha256_init(&ctx);
    hm_sha256_update(&ctx, data, len);
    hm_sha256_final(&ctx, digest);
}

/* ---- SHA-512 ------------------------------------------------------------------ */

static void sha512_compress(uint64_t state[8], const uint8_t block[128]) {
    uint64_t w[16];
    for (unsigned i = 0; i < 16; i++) w[i] = load64_be(block + 8 * i);
    uint64_t a = state[0], b = state[1], c = state[2], d = state[3];
    uint64_t e = state[4], f = state[5], g = state[6], h = state[7];
    for (unsigned t = 0; t < 80; t++) {
        if (t >= 16) {
            uint64_t w15 = w[(t + 1) & 15], w2 = w[(t + 14) & 15];
            w[t & 15] += (ror64(w15, 1) ^ ror64(w15, 8) ^ (w15 >> 7)) + w[(t + 9) & 15]
                         + (ror64(w2, 19) ^ ror64(w2, 61) ^ (w2 >> 6));
        }
        uint64_t t1 = h + (ror64(e, 14) ^ ror64(e, 18) ^ ror64(e, 41)) + ((e & f) ^ (~e & g))
                      + sha512_k[t] + w[t & 15];
        uint64_t t2 = (ror64(a, 28) ^ ror64(a, 34) ^ ror64(a, 39)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
    state[4] += e;
    state[5] += f;
    state[6] += g;
    state[7] += h;
    wipe(w, sizeof w);
}

void hm_sha512_init(hm_sha512_ctx *ctx) {
    memcpy(ctx->state, sha512_iv, sizeof ctx->state);
    ctx->count = 0;
}

void hm_sha512_update(hm_sha512_ctx *ctx, const void *data, size_t len) {
    const uint8_t *p = (const uint8_t *)data;
    size_t used = (size_t)(ctx->count & 127u);
    if (len == 0) return; /* data may be NULL */
    ctx->count += len;
    if (used) {
        size_t take = 128 - used < len ? 128 - used : len;
        memcpy(ctx->block + used, p, take);
        p += take;
        len -= take;
        if (used + take < 128) return;
        sha512_compress(ctx->state, ctx->block);
    }
    for (; len >= 128; p += 128, len -= 128) sha512_compress(ctx->state, p);
    if (len) memcpy(ctx->block, p, len);
}

void hm_sha512_final(hm_sha512_ctx *ctx, uint8_t digest[HM_SHA512_SIZE]) {
    size_t used = (size_t)(ctx->count & 127u);
    ctx->block[used++] = 0x80;
    if (used > 112) {
        memset(ctx->block + used, 0, 128 - used);
        sha512_compress(ctx->state, ctx->block);
        used = 0;
    }
    /* 128-bit big-endian bit length: the byte count times 8. */
    memset(ctx->block + used, 0, 112 - used);
    store64_be(ctx->block + 112, ctx->count >> 61);
    store64_be(ctx->block + 120, ctx->count << 3);
    sha512_compress(ctx->state, ctx->block);
    for (unsigned i = 0; i < 8; i++) store64_be(digest + 8 * i, ctx->state[i]);
    wipe(ctx, sizeof *ctx);
}

void hm_sha512(uint8_t digest[HM_SHA512_SIZE], const void *data, size_t len) {
    hm_sha512_ctx ctx;
    hm_sha512_init(&ctx);
    hm_sha512_update(&ctx, data, len);
    hm_sha512_final(&ctx, digest);
}
