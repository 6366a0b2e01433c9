#include "hm_sha2.h"

#include <string.h>

/* Initial hash values and round constants (FIPS 180-4 §4.2.2, §4.2.3, §5.3): the
 * first 32/64 bits of the fractional parts of the square roots (H) and cube roots
 * (K) of the first primes. */
static const uint32_t sha256_iv[8] = {
    0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
    0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u,
};

/* Round constants: the high 32 bits of SHA-512's K, whose first 64 words are
 * SHA-256's K (the same roots to fewer bits); SHA-256 uses k_hi[0..63]. */
static const uint32_t k_hi[80] = {
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
    0x90befffau, 0xa4506cebu, 0xbef9a3f7u, 0xc67178f2u, 0xca273eceu, 0xd186b8c7u,
    0xeada7dd6u, 0xf57d4f7fu, 0x06f067aau, 0x0a637dc5u, 0x113f9804u, 0x1b710b35u,
    0x28db77f5u, 0x32caab7bu, 0x3c9ebe0au, 0x431d67c4u, 0x4cc5d4beu, 0x597f299cu,
    0x5fcb6fabu, 0x6c44198cu,
};

/* The low 32 bits of SHA-512's initial hash; the high 32 bits are SHA-256's. */
static const uint32_t sha512_iv_lo[8] = {
    0xf3bcc908u, 0x84caa73bu, 0xfe94f82bu, 0x5f1d36f1u,
    0xade682d1u, 0x2b3e6c1fu, 0xfb41bd6bu, 0x137e2179u,
};

/* The low 32 bits of SHA-512's K. */
static const uint32_t sha512_k_lo[80] = {
    0xd728ae22u, 0x23ef65cdu, 0xec4d3b2fu, 0x8189dbbcu, 0xf348b538u, 0xb605d019u,
    0xaf194f9bu, 0xda6d8118u, 0xa3030242u, 0x45706fbeu, 0x4ee4b28cu, 0xd5ffb4e2u,
    0xf27b896fu, 0x3b1696b1u, 0x25c71235u, 0xcf692694u, 0x9ef14ad2u, 0x384f25e3u,
    0x8b8cd5b5u, 0x77ac9c65u, 0x592b0275u, 0x6ea6e483u, 0xbd41fbd4u, 0x831153b5u,
    0xee66dfabu, 0x2db43210u, 0x98fb213fu, 0xbeef0ee4u, 0x3da88fc2u, 0x930aa725u,
    0xe003826fu, 0x0a0e6e70u, 0x46d22ffcu, 0x5c26c926u, 0x5ac42aedu, 0x9d95b3dfu,
    0x8baf63deu, 0x3c77b2a8u, 0x47edaee6u, 0x1482353bu, 0x4cf10364u, 0xbc423001u,
    0xd0f89791u, 0x0654be30u, 0xd6ef5218u, 0x5565a910u, 0x5771202au, 0x32bbd1b8u,
    0xb8d2d0c8u, 0x5141ab53u, 0xdf8eeb99u, 0xe19b48a8u, 0xc5c95a63u, 0xe3418acbu,
    0x7763e373u, 0xd6b2b8a3u, 0x5defb2fcu, 0x43172f60u, 0xa1f0ab72u, 0x1a6439ecu,
    0x23631e28u, 0xde82bde9u, 0xb2c67915u, 0xe372532bu, 0xea26619cu, 0x21c0c207u,
    0xcde0eb1eu, 0xee6ed178u, 0x72176fbau, 0xa2c898a6u, 0xbef90daeu, 0x131c471bu,
    0x23047d84u, 0x40c72493u, 0x15c9bebcu, 0x9c100d4cu, 0xcb3e42b6u, 0xfc657e2au,
    0x3ad6faecu, 0x4a475817u,
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

/* ---- The Merkle-Damgard framing both hashes share -------------------------------
 * bs: the block size (64 or 128); block: the partial block; count: bytes absorbed. */
typedef void compress_fn(void *state, const uint8_t *block);

static void md_update(void *state, uint8_t *block, uint64_t *count, size_t bs,
                      compress_fn *compress, const void *data, size_t len) {
    const uint8_t *p = (const uint8_t *)data;
    size_t used = (size_t)(*count & (bs - 1));
    if (len == 0) return; /* data may be NULL */
    *count += len;
    if (used) {
        size_t take = bs - used < len ? bs - used : len;
        memcpy(block + used, p, take);
        p += take;
        len -= take;
        if (used + take < bs) return;
        compress(state, block);
    }
    for (; len >= bs; p += bs, len -= bs) compress(state, p);
    if (len) memcpy(block, p, len);
}

/* Padding and the big-endian bit length (64 bits for SHA-256, 128 for SHA-512: the
 * byte count times 8), then the last compression. */
static void md_final(void *state, uint8_t *block, uint64_t count, size_t bs,
                     compress_fn *compress) {
    size_t used = (size_t)(count & (bs - 1)), lenpos = bs - bs / 8;
    block[used++] = 0x80;
    if (used > lenpos) {
        memset(block + used, 0, bs - used);
        compress(state, block);
        used = 0;
    }
    memset(block + used, 0, bs - 8 - used);
    if (bs == 128) store64_be(block + lenpos, count >> 61);
    store64_be(block + bs - 8, count << 3);
    compress(state, block);
}

/* ---- SHA-256 ------------------------------------------------------------------ */

/* One 64-byte block into the state; the message schedule W rolls in 16 words
 * (W[t] lives in w[t % 16]). */
static void sha256_compress(void *st, const uint8_t *block) {
    uint32_t *state = st;
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
                      + k_hi[t] + w[t & 15];
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
    md_update(ctx->state, ctx->block, &ctx->count, 64, sha256_compress, data, len);
}

void hm_sha256_final(hm_sha256_ctx *ctx, uint8_t digest[HM_SHA256_SIZE]) {
    md_final(ctx->state, ctx->block, ctx->count, 64, sha256_compress);
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

/* ror(x, r[0]) ^ ror(x, r[1]) ^ ror(x, r[2]), or x >> r[2] as the last term when
 * r[3] is set. One out-of-line helper for the four SHA-512 sigma functions: 64-bit
 * rotations by constants expand to long Thumb-2 and rv32 sequences, and SHA-512
 * (Ed25519's few blocks per signature) is not on any hot path. */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static uint64_t sigma64(uint64_t x, const uint8_t r[4]) {
    uint64_t acc = 0;
    for (unsigned i = 0; i < 3; i++) {
        /* x rotated right by r[i] (r[i] % 32 != 0), in 32-bit halves */
        uint32_t hi = (uint32_t)(x >> 32), lo = (uint32_t)x, n = r[i];
        if (n >= 32) {
            uint32_t tmp = hi;
            hi = lo;
            lo = tmp;
            n -= 32;
        }
        /* x >> n instead (n < 32 there): no bits of lo wrap into the top half */
        uint32_t top = hi >> n | (i == 2 && r[3] ? 0 : lo << (32 - n));
        acc ^= (uint64_t)top << 32 | (lo >> n | hi << (32 - n));
    }
    return acc;
}

static const uint8_t sig_e[4] = {14, 18, 41, 0}, sig_a[4] = {28, 34, 39, 0};
static const uint8_t sig_w15[4] = {1, 8, 7, 1}, sig_w2[4] = {19, 61, 6, 1};

static void sha512_compress(void *st, const uint8_t *block) {
    uint64_t *state = st;
    uint64_t w[16], v[8];
    for (unsigned i = 0; i < 16; i++) w[i] = load64_be(block + 8 * i);
    memcpy(v, state, sizeof v); /* a b c d e f g h */
    for (unsigned t = 0; t < 80; t++) {
        if (t >= 16)
            w[t & 15] += sigma64(w[(t + 1) & 15], sig_w15) + w[(t + 9) & 15]
                         + sigma64(w[(t + 14) & 15], sig_w2);
        uint64_t e = v[4], a = v[0];
        uint64_t t1 = v[7] + sigma64(e, sig_e) + ((e & v[5]) ^ (~e & v[6]))
                      + ((uint64_t)k_hi[t] << 32 | sha512_k_lo[t]) + w[t & 15];
        uint64_t t2 = sigma64(a, sig_a) + ((a & v[1]) ^ (a & v[2]) ^ (v[1] & v[2]));
        memmove(v + 1, v, 7 * sizeof v[0]);
        v[4] += t1;
        v[0] = t1 + t2;
    }
    for (unsigned i = 0; i < 8; i++) state[i] += v[i];
    wipe(w, sizeof w);
    wipe(v, sizeof v);
}

void hm_sha512_init(hm_sha512_ctx *ctx) {
    for (unsigned i = 0; i < 8; i++) ctx->state[i] = (uint64_t)sha256_iv[i] << 32 | sha512_iv_lo[i];
    ctx->count = 0;
}

void hm_sha512_update(hm_sha512_ctx *ctx, const void *data, size_t len) {
    md_update(ctx->state, ctx->block, &ctx->count, 128, sha512_compress, data, len);
}

void hm_sha512_final(hm_sha512_ctx *ctx, uint8_t digest[HM_SHA512_SIZE]) {
    md_final(ctx->state, ctx->block, ctx->count, 128, sha512_compress);
    for (unsigned i = 0; i < 8; i++) store64_be(digest + 8 * i, ctx->state[i]);
    wipe(ctx, sizeof *ctx);
}

void hm_sha512(uint8_t digest[HM_SHA512_SIZE], const void *data, size_t len) {
    hm_sha512_ctx ctx;
    hm_sha512_init(&ctx);
    hm_sha512_update(&ctx, data, len);
    hm_sha512_final(&ctx, digest);
}
