#include "hm_ed25519.h"

#include <string.h>

#include "hm_sha2.h"

/* Keeps a helper with large locals out of its caller's frame, so that the deepest
 * stack is the largest single path, not the sum of every helper's locals. */
#if defined(__GNUC__)
#define HM_NOINLINE __attribute__((noinline))
#else
#define HM_NOINLINE
#endif

static void wipe(void *p, size_t len) {
    volatile uint8_t *v = (volatile uint8_t *)p;
    while (len--) *v++ = 0;
}

/* ==== The field GF(p), p = 2^255 - 19 ===============================================
 *
 * An element is ten signed limbs in radix 2^25.5: f = sum f[i] 2^ceil(25.5 i), so
 * even limbs carry 26 bits and odd limbs 25. Products are 32x32 -> 64-bit.
 *
 * Bounds: fe_mul (and fe_sq) return limbs with |f[i]| <= 2^25 (even) and 2^24 + 2^16
 * (odd), rounding carries; their inputs may have |f[i]| <= 2^27, so a sum or
 * difference of up to four such results can be multiplied without carrying.
 * fe_add, fe_sub and fe_neg do not carry. Every function here runs in time
 * independent of the values (no branch or index on limb contents). Carries use >>
 * on negative values, which C99 leaves implementation-defined: every compiler the
 * core targets (GCC, Clang, IAR, Arm Compiler) shifts arithmetically.
 */
typedef int32_t fe[10];

/* d = -121665/121666, 2d, sqrt(-1) = 2^((p-1)/4), and the base point B = (x, 4/5)
 * with x even (RFC 8032 §5.1), as limbs. */
static const fe fe_d = {56195235, 13857412, 51736253, 6949390,  114729,
                        24766616, 60832955, 30306712, 48412415, 21499315};
static const fe fe_d2 = {45281625, 27714825, 36363642, 13898781, 229458,
                         15978800, 54557047, 27058993, 29715967, 9444199};
static const fe fe_sqrtm1 = {34513072, 25610706, 9377949, 3500415,  12389472,
                             33281959, 41962654, 31548777, 326685, 11406482};
static const fe base_x = {52811034, 25909283, 16144682, 17082669, 27570973,
                          30858332, 40966398, 8378388,  20764389, 8758491};
static const fe base_y = {40265304, 26843545, 13421772, 20132659, 26843545,
                          6710886,  53687091, 13421772, 40265318, 26843545};

static unsigned limb_pos(unsigned i) { return (51 * i + 1) / 2; } /* ceil(25.5 i) */

static void fe_copy(fe h, const fe f) { memcpy(h, f, sizeof(fe)); }

static void fe_small(fe h, int32_t v) {
    memset(h, 0, sizeof(fe));
    h[0] = v;
}

static void fe_add(fe h, const fe f, const fe g) {
    for (unsigned i = 0; i < 10; i++) h[i] = f[i] + g[i];
}

static void fe_sub(fe h, const fe f, const fe g) {
    for (unsigned i = 0; i < 10; i++) h[i] = f[i] - g[i];
}

static void fe_neg(fe h, const fe f) {
    for (unsigned i = 0; i < 10; i++) h[i] = -f[i];
}

/* h = f if b == 1, h unchanged if b == 0 (b is 0 or 1), without branching on b. */
static void fe_cmov(fe h, const fe f, uint32_t b) {
    int32_t mask = -(int32_t)b;
    for (unsigned i = 0; i < 10; i++) h[i] ^= (h[i] ^ f[i]) & mask;
}

/* Swap f and g if b == 1 (b is 0 or 1), without branching on b. */
static void fe_cswap(fe f, fe g, uint32_t b) {
    int32_t mask = -(int32_t)b;
    for (unsigned i = 0; i < 10; i++) {
        int32_t x = (f[i] ^ g[i]) & mask;
        f[i] ^= x;
        g[i] ^= x;
    }
}

/* Rounding carry out of the 64-bit column t[a] (w bits wide) into t[a + 1]; the
 * limb left behind, in -2^(w-1) .. 2^(w-1), is stored in h[a] as 32 bits. */
#define FE_CARRY(a, w)                                                                    \
    do {                                                                                  \
        c = (t[a] + ((int64_t)1 << ((w) - 1))) >> (w);                                    \
        h[a] = (int32_t)(t[a] - c * ((int64_t)1 << (w)));                                 \
        t[(a) + 1] += c;                                                                  \
    } while (0)

/* Carry 64-bit column sums into limbs (rounding to nearest, so limbs come out
 * signed and small); the carry out of the top limb wraps around times 19
 * (2^255 = 19 mod p). |t[i]| < 2^63 - 2^26 is enough. */
static void fe_carry_wide(fe h, int64_t t[10]) {
    int64_t c;
    for (unsigned i = 0; i < 8; i += 2) { /* pairs, so that shifts are constants */
        FE_CARRY(i, 26);
        FE_CARRY(i + 1, 25);
    }
    FE_CARRY(8, 26);
    c = (t[9] + ((int64_t)1 << 24)) >> 25;
    h[9] = (int32_t)(t[9] - c * ((int64_t)1 << 25));
    c = h[0] + 19 * c; /* |c| < 2^43 */
    int32_t c0 = (int32_t)((c + ((int64_t)1 << 25)) >> 26);
    h[0] = (int32_t)(c - (int64_t)c0 * ((int64_t)1 << 26));
    h[1] += c0;
}

#define M(a, b) ((int64_t)(a) * (b))

/* The field multiply comes in two forms with identical results (the same exact
 * integer column sums): straight-line, fastest, and a loop over the columns, several
 * KB smaller on rv32 (each 32x32->64 product is a mul/mulh pair there) but more
 * than twice as slow (rv32 Ed25519 sign 13 M instructions instead of 5.8 M;
 * Thumb-2 would miss its 6 M goal, so only RISC-V takes it). HM_FE_MUL_LOOP
 * selects the loop; it defaults on for RISC-V. */
#if !defined(HM_FE_MUL_LOOP)
#if defined(__riscv)
#define HM_FE_MUL_LOOP 1
#else
#define HM_FE_MUL_LOOP 0
#endif
#endif

#if HM_FE_MUL_LOOP
/* h = f g. Column k sums f[i] g[j] over i + j = k, plus 19 times the sum over
 * i + j = k + 10 (2^255 = 19). Limb weights are 2^ceil(25.5 i), so a product of
 * two odd limbs lands one bit above its column and is doubled: in an even column
 * i and j are both odd or both even, so the odd limbs of f are doubled (f2); in
 * an odd column no product is. */
static void fe_mul(fe h, const fe f, const fe g) {
    int32_t f2[10];
    int64_t t[10];
    for (unsigned i = 0; i < 10; i++) f2[i] = f[i] * (int32_t)(1 + (i & 1));
    for (unsigned k = 0; k < 10; k++) {
        const int32_t *ff = (k & 1) ? f : f2;
        int64_t lo = 0, hi = 0;
        unsigned i = 0;
        for (; i <= k; i++) lo += M(ff[i], g[k - i]);
        for (; i < 10; i++) hi += M(ff[i], g[k + 10 - i]);
        t[k] = lo + 19 * hi;
    }
    fe_carry_wide(h, t);
}
#else
/* h = f g. Column k sums f[i] g[j] over i + j = k, plus 19 times the sum over
 * i + j = k + 10 (2^255 = 19). Limb weights are 2^ceil(25.5 i), so a product of
 * two odd limbs lands one bit above its column and is doubled (the f*_2 terms). */
static void fe_mul(fe h, const fe f, const fe g) {
    int32_t f0 = f[0], f1 = f[1], f2 = f[2], f3 = f[3], f4 = f[4];
    int32_t f5 = f[5], f6 = f[6], f7 = f[7], f8 = f[8], f9 = f[9];
    int32_t g0 = g[0], g1 = g[1], g2 = g[2], g3 = g[3], g4 = g[4];
    int32_t g5 = g[5], g6 = g[6], g7 = g[7], g8 = g[8], g9 = g[9];
    int32_t f1_2 = 2 * f1, f3_2 = 2 * f3, f5_2 = 2 * f5, f7_2 = 2 * f7, f9_2 = 2 * f9;
    int64_t t[10];
    t[0] = M(f0, g0)
           + 19 * (M(f1_2, g9) + M(f2, g8) + M(f3_2, g7) + M(f4, g6) + M(f5_2, g5)
                   + M(f6, g4) + M(f7_2, g3) + M(f8, g2) + M(f9_2, g1));
    t[1] = M(f0, g1) + M(f1, g0)
           + 19 * (M(f2, g9) + M(f3, g8) + M(f4, g7) + M(f5, g6) + M(f6, g5) + M(f7, g4)
                   + M(f8, g3) + M(f9, g2));
    t[2] = M(f0, g2) + M(f1_2, g1) + M(f2, g0)
           + 19 * (M(f3_2, g9) + M(f4, g8) + M(f5_2, g7) + M(f6, g6) + M(f7_2, g5)
                   + M(f8, g4) + M(f9_2, g3));
    t[3] = M(f0, g3) + M(f1, g2) + M(f2, g1) + M(f3, g0)
           + 19 * (M(f4, g9) + M(f5, g8) + M(f6, g7) + M(f7, g6) + M(f8, g5) + M(f9, g4));
    t[4] = M(f0, g4) + M(f1_2, g3) + M(f2, g2) + M(f3_2, g1) + M(f4, g0)
           + 19 * (M(f5_2, g9) + M(f6, g8) + M(f7_2, g7) + M(f8, g6) + M(f9_2, g5));
    t[5] = M(f0, g5) + M(f1, g4) + M(f2, g3) + M(f3, g2) + M(f4, g1) + M(f5, g0)
           + 19 * (M(f6, g9) + M(f7, g8) + M(f8, g7) + M(f9, g6));
    t[6] = M(f0, g6) + M(f1_2, g5) + M(f2, g4) + M(f3_2, g3) + M(f4, g2) + M(f5_2, g1)
           + M(f6, g0) + 19 * (M(f7_2, g9) + M(f8, g8) + M(f9_2, g7));
    t[7] = M(f0, g7) + M(f1, g6) + M(f2, g5) + M(f3, g4) + M(f4, g3) + M(f5, g2) + M(f6, g1)
           + M(f7, g0) + 19 * (M(f8, g9) + M(f9, g8));
    t[8] = M(f0, g8) + M(f1_2, g7) + M(f2, g6) + M(f3_2, g5) + M(f4, g4) + M(f5_2, g3)
           + M(f6, g2) + M(f7_2, g1) + M(f8, g0) + 19 * M(f9_2, g9);
    t[9] = M(f0, g9) + M(f1, g8) + M(f2, g7) + M(f3, g6) + M(f4, g5) + M(f5, g4) + M(f6, g3)
           + M(f7, g2) + M(f8, g1) + M(f9, g0);
    fe_carry_wide(h, t);
}
#endif

/* h = f^2. A dedicated squaring (about half the products) would be 15 % faster
 * for Ed25519 but costs 600 bytes of Thumb-2 and 1.2 KB of rv32 code. */
static void fe_sq(fe h, const fe f) { fe_mul(h, f, f); }

/* h = f^(2^n), n >= 1. */
static void fe_sqn(fe h, const fe f, unsigned n) {
    fe_sq(h, f);
    while (--n) fe_sq(h, h);
}

/* t = z^(2^250 - 1) and z11 = z^11: the common start of the addition chains for
 * z^(p-2) and z^((p-5)/8). */
static void fe_pow250(fe t, fe z11, const fe z) {
    fe a, b, c;
    fe_sq(a, z);          /* 2 */
    fe_sqn(b, a, 2);      /* 8 */
    fe_mul(b, b, z);      /* 9 */
    fe_mul(z11, b, a);    /* 11 */
    fe_sq(a, z11);        /* 22 */
    fe_mul(a, a, b);      /* 31 = 2^5 - 1 */
    fe_sqn(b, a, 5);
    fe_mul(a, b, a);      /* 2^10 - 1 */
    fe_sqn(b, a, 10);
    fe_mul(b, b, a);      /* 2^20 - 1 */
    fe_sqn(c, b, 20);
    fe_mul(c, c, b);      /* 2^40 - 1 */
    fe_sqn(c, c, 10);
    fe_mul(c, c, a);      /* 2^50 - 1 */
    fe_sqn(b, c, 50);
    fe_mul(b, b, c);      /* 2^100 - 1 */
    fe_sqn(a, b, 100);
    fe_mul(a, a, b);      /* 2^200 - 1 */
    fe_sqn(a, a, 50);
    fe_mul(t, a, c);      /* 2^250 - 1 */
}

/* h = 1/z = z^(p - 2) = z^(2^255 - 21); 1/0 gives 0. */
static void fe_invert(fe h, const fe z) {
    fe t, z11;
    fe_pow250(t, z11, z);
    fe_sqn(t, t, 5);
    fe_mul(h, t, z11);
}

/* h = z^((p - 5)/8) = z^(2^252 - 3), the square root helper. */
static void fe_pow22523(fe h, const fe z) {
    fe t, z11;
    fe_pow250(t, z11, z);
    fe_sqn(t, t, 2);
    fe_mul(h, t, z);
}

/* 255-bit little-endian integer (bit 255 ignored) to limbs; not reduced mod p, so an
 * encoding of y >= p stands for y - p. */
static void fe_frombytes(fe h, const uint8_t s[32]) {
    for (unsigned i = 0; i < 10; i++) {
        /* pos % 8 + width <= 32 for every limb (the largest: 6 + 26): four bytes from
         * byte pos / 8 <= 28 hold it, so 32-bit words do */
        unsigned pos = limb_pos(i), width = limb_pos(i + 1) - pos, byte = pos / 8;
        uint32_t v = 0;
        for (unsigned k = 0; k < 4; k++) v |= (uint32_t)s[byte + k] << (8 * k);
        h[i] = (int32_t)((v >> (pos % 8)) & ((1u << width) - 1));
    }
}

/* The canonical encoding (0 <= value < p, 32 bytes little-endian, bit 255 zero). */
static void fe_tobytes(uint8_t s[32], const fe f) {
    int32_t h[10];
    int32_t c;
    fe_copy(h, f);
    /* Two floor-carry passes leave every limb non-negative and within its width
     * (limb 0 up to 2^26 + 18): 0 <= h < 2^255 + 2^26 < 2p. */
    for (unsigned pass = 0; pass < 2; pass++) {
        for (unsigned i = 0; i < 10; i++) {
            unsigned w = 26 - (i & 1);
            c = h[i] >> w;
            h[i] -= c * (1 << w);
            if (i < 9) {
                h[i + 1] += c;
            } else {
                h[0] += 19 * c;
            }
        }
    }
    /* q = 1 if h >= p, i.e. if h + 19 carries out of bit 255. */
    c = (h[0] + 19) >> 26;
    for (unsigned i = 1; i < 10; i++) c = (h[i] + c) >> (26 - (i & 1));
    h[0] += 19 * c;
    for (unsigned i = 0; i < 9; i++) {
        unsigned w = 26 - (i & 1);
        c = h[i] >> w;
        h[i] -= c * (1 << w);
        h[i + 1] += c;
    }
    h[9] &= (1 << 25) - 1; /* drops q 2^255: h + 19 q - 2^255 q = h - q p */
    /* bit by bit (255 of them), so that no 64-bit shift is needed (a libgcc call on
     * rv32); the loops depend on positions only */
    uint32_t acc = 0;
    unsigned bits = 0, k = 0;
    for (unsigned i = 0; i < 10; i++) {
        for (unsigned b = 0; b < 26 - (i & 1); b++) {
            acc |= ((uint32_t)h[i] >> b & 1u) << bits;
            if (++bits == 8) {
                s[k++] = (uint8_t)acc;
                acc = 0;
                bits = 0;
            }
        }
    }
    s[31] = (uint8_t)acc;
}

/* 1 if f (mod p) is odd, the "negative" x of RFC 8032. */
static uint32_t fe_isodd(const fe f) {
    uint8_t s[32];
    fe_tobytes(s, f);
    return s[0] & 1u;
}

/* 1 if f = 0 (mod p), else 0. */
static uint32_t fe_iszero(const fe f) {
    uint8_t s[32];
    uint32_t acc = 0;
    fe_tobytes(s, f);
    for (unsigned i = 0; i < 32; i++) acc |= s[i];
    return (acc - 1) >> 31;
}

/* ==== The curve -x^2 + y^2 = 1 + d x^2 y^2 ==========================================
 *
 * Points in extended coordinates (X : Y : Z : T), x = X/Z, y = Y/Z, x y = T/Z.
 * A second operand of an addition is "cached": (Y + X, Y - X, Z, 2 d T). The
 * addition (add-2008-hwcd-3) and doubling (dbl-2008-hwcd) formulas are complete on
 * this curve (a = -1 is a square, d is not), so the identity and points of small
 * order need no special case.
 */
typedef struct {
    fe X, Y, Z, T;
} ge;

typedef struct {
    fe YpX, YmX, Z, T2d;
} ge_cached;

static void ge_identity(ge *p) {
    fe_small(p->X, 0);
    fe_small(p->Y, 1);
    fe_small(p->Z, 1);
    fe_small(p->T, 0);
}

static void ge_base(ge *p) {
    fe_copy(p->X, base_x);
    fe_copy(p->Y, base_y);
    fe_small(p->Z, 1);
    fe_mul(p->T, base_x, base_y);
}

static void ge_to_cached(ge_cached *c, const ge *p) {
    fe_add(c->YpX, p->Y, p->X);
    fe_sub(c->YmX, p->Y, p->X);
    fe_copy(c->Z, p->Z);
    fe_mul(c->T2d, p->T, fe_d2);
}

static void cached_identity(ge_cached *c) {
    fe_small(c->YpX, 1);
    fe_small(c->YmX, 1);
    fe_small(c->Z, 1);
    fe_small(c->T2d, 0);
}

/* c = d if b == 1, unchanged if b == 0, without branching on b. */
static void cached_cmov(ge_cached *c, const ge_cached *d, uint32_t b) {
    fe_cmov(c->YpX, d->YpX, b);
    fe_cmov(c->YmX, d->YmX, b);
    fe_cmov(c->Z, d->Z, b);
    fe_cmov(c->T2d, d->T2d, b);
}

/* c = -c if b == 1 ((x, y) -> (-x, y)), unchanged if b == 0, without branching. */
static void cached_cneg(ge_cached *c, uint32_t b) {
    fe t;
    fe_cswap(c->YpX, c->YmX, b);
    fe_neg(t, c->T2d);
    fe_cmov(c->T2d, t, b);
}

/* r = p + q; r may be p. 8 multiplications. */
static void ge_add(ge *r, const ge *p, const ge_cached *q) {
    fe a, b, c, d, e;
    fe_sub(a, p->Y, p->X);
    fe_mul(a, a, q->YmX); /* A = (Y1 - X1)(Y2 - X2) */
    fe_add(b, p->Y, p->X);
    fe_mul(b, b, q->YpX); /* B = (Y1 + X1)(Y2 + X2) */
    fe_mul(c, p->T, q->T2d); /* C = 2d T1 T2 */
    fe_mul(d, p->Z, q->Z);
    fe_add(d, d, d);      /* D = 2 Z1 Z2 */
    fe_sub(e, b, a);      /* E = B - A */
    fe_add(b, b, a);      /* H = B + A */
    fe_sub(a, d, c);      /* F = D - C */
    fe_add(d, d, c);      /* G = D + C */
    fe_mul(r->X, e, a);   /* E F */
    fe_mul(r->Y, d, b);   /* G H */
    fe_mul(r->T, e, b);   /* E H */
    fe_mul(r->Z, a, d);   /* F G */
}

/* r = 2 p; r may be p. 4 squarings, 4 multiplications. The signs of E, F, G, H
 * are flipped relative to dbl-2008-hwcd with a = -1; the products are the same. */
static void ge_dbl(ge *r, const ge *p) {
    fe a, b, c, g;
    fe_sq(a, p->X);       /* A = X^2 */
    fe_sq(b, p->Y);       /* B = Y^2 */
    fe_sq(c, p->Z);
    fe_add(c, c, c);      /* C = 2 Z^2 */
    fe_sub(g, a, b);      /* G' = A - B */
    fe_add(a, a, b);      /* H' = A + B */
    fe_add(b, p->X, p->Y);
    fe_sq(b, b);
    fe_sub(b, a, b);      /* E' = A + B - (X + Y)^2 */
    fe_add(c, c, g);      /* F' = C + A - B */
    fe_mul(r->X, b, c);
    fe_mul(r->Y, g, a);
    fe_mul(r->T, b, a);
    fe_mul(r->Z, c, g);
}

/* The encoding of RFC 8032 §5.1.2: y canonical, bit 255 = x odd. */
static void ge_tobytes(uint8_t s[32], const ge *p) {
    fe zi, x, y;
    fe_invert(zi, p->Z);
    fe_mul(x, p->X, zi);
    fe_mul(y, p->Y, zi);
    fe_tobytes(s, y);
    s[31] = (uint8_t)(s[31] | fe_isodd(x) << 7);
}

/* Decodes a public encoding as OpenSSL does (variable time, public data only):
 * y is the low 255 bits taken mod p (y >= p is accepted as y - p); -1 if
 * x^2 = (y^2 - 1)/(d y^2 + 1) has no root; x = 0 is accepted whatever bit 255 says. */
HM_NOINLINE static int ge_frombytes_vartime(ge *p, const uint8_t s[32]) {
    fe u, v, v3, vxx;
    fe_frombytes(p->Y, s);
    fe_small(p->Z, 1);
    fe_sq(u, p->Y);
    fe_mul(v, u, fe_d);
    fe_sub(u, u, p->Z);     /* u = y^2 - 1 */
    fe_add(v, v, p->Z);     /* v = d y^2 + 1 */
    fe_sq(v3, v);
    fe_mul(v3, v3, v);      /* v^3 */
    fe_sq(p->X, v3);
    fe_mul(p->X, p->X, v);
    fe_mul(p->X, p->X, u);  /* u v^7 */
    fe_pow22523(p->X, p->X);
    fe_mul(p->X, p->X, v3);
    fe_mul(p->X, p->X, u);  /* x = u v^3 (u v^7)^((p-5)/8) */
    fe_sq(vxx, p->X);
    fe_mul(vxx, vxx, v);    /* v x^2: u if x is a root, -u if x sqrt(-1) is */
    fe_sub(v, vxx, u);
    if (!fe_iszero(v)) {
        fe_add(v, vxx, u);
        if (!fe_iszero(v)) return -1;
        fe_mul(p->X, p->X, fe_sqrtm1);
    }
    if (fe_isodd(p->X) != (uint32_t)(s[31] >> 7)) fe_neg(p->X, p->X);
    fe_mul(p->T, p->X, p->Y);
    return 0;
}

/* ---- Fixed-base multiplication, constant time --------------------------------- */

/* a (little-endian, a[31] <= 127) as 64 signed digits e[i] in -8..8, a = sum e[i] 16^i. */
static void scalar_radix16(int8_t e[64], const uint8_t a[32]) {
    int carry = 0;
    for (unsigned i = 0; i < 32; i++) {
        e[2 * i] = (int8_t)(a[i] & 15);
        e[2 * i + 1] = (int8_t)(a[i] >> 4);
    }
    for (unsigned i = 0; i < 63; i++) {
        int v = e[i] + carry; /* 0..16 */
        carry = (v + 8) >> 4;
        e[i] = (int8_t)(v - carry * 16);
    }
    e[63] = (int8_t)(e[63] + carry);
}

/* t = digit B from table[j] = (j + 1) B, digit in -8..8: every entry is read, the
 * one wanted is kept by mask, and the sign is applied by mask. */
static void table_select(ge_cached *t, const ge_cached table[8], int8_t digit) {
    uint32_t neg = (uint32_t)(uint8_t)digit >> 7;
    int32_t mask = -(int32_t)neg;
    uint32_t babs = (uint32_t)((digit ^ mask) - mask);
    cached_identity(t);
    for (uint32_t j = 0; j < 8; j++) cached_cmov(t, &table[j], ((babs ^ (j + 1)) - 1) >> 31);
    cached_cneg(t, neg);
}

/* h = a B. Horner over the signed radix-16 digits: 63 x 4 doublings and 64
 * additions of a table entry chosen in constant time. The table (1..8) B is built
 * on the stack (1280 bytes) at each call. */
static void ge_scalarmult_base(ge *h, const uint8_t a[32]) {
    ge_cached table[8], t;
    ge p;
    int8_t e[64];
    ge_base(&p);
    ge_to_cached(&table[0], &p);
    ge_dbl(&p, &p);
    ge_to_cached(&table[1], &p);
    for (unsigned j = 2; j < 8; j++) {
        ge_add(&p, &p, &table[0]);
        ge_to_cached(&table[j], &p);
    }
    scalar_radix16(e, a);
    ge_identity(h);
    for (unsigned i = 64; i-- > 0;) {
        if (i < 63) {
            for (unsigned k = 0; k < 4; k++) ge_dbl(h, h);
        }
        table_select(&t, table, e[i]);
        ge_add(h, h, &t);
    }
    wipe(e, sizeof e);
    wipe(&t, sizeof t);
}

/* ---- Double-scalar multiplication, variable time (verification) --------------- */

/* Width-4 NAF of s < 2^253: digits odd in -7..7 or 0, a nonzero digit followed by at
 * least three zeros, s = sum naf[i] 2^i. */
static void scalar_wnaf(int8_t naf[256], const uint8_t s[32]) {
    unsigned carry = 0, i = 0;
    memset(naf, 0, 256);
    while (i < 256) {
        unsigned bit = (s[i / 8] >> (i % 8)) & 1u;
        if (bit == carry) { /* bit + carry even: digit 0, carry unchanged */
            i++;
            continue;
        }
        unsigned window = s[i / 8] | (i / 8 + 1 < 32 ? (unsigned)s[i / 8 + 1] << 8 : 0);
        unsigned word = ((window >> (i % 8)) & 15u) + carry; /* odd, 1..15 */
        carry = word >> 3;
        naf[i] = (int8_t)((int)word - (int)(carry << 4));
        i += 4;
    }
}

/* t[j] = (2j + 1) p for j = 0..3; t[3] holds 2p until it is overwritten last. */
static void table_odd(ge_cached t[4], const ge *p) {
    ge q;
    ge_dbl(&q, p);
    ge_to_cached(&t[3], &q);
    ge_to_cached(&t[0], p);
    q = *p;
    for (unsigned j = 1; j < 4; j++) {
        ge_add(&q, &q, &t[3]);
        ge_to_cached(&t[j], &q);
    }
}

static void add_digit_vartime(ge *r, const ge_cached t[4], int8_t digit) {
    ge_cached c;
    if (digit > 0) {
        ge_add(r, r, &t[digit / 2]);
    } else if (digit < 0) {
        c = t[-digit / 2];
        cached_cneg(&c, 1);
        ge_add(r, r, &c);
    }
}

/* r = a P + b B (a, b < 2^253), interleaved width-4 NAFs. */
HM_NOINLINE static void ge_double_scalarmult_vartime(ge *r, const uint8_t a[32],
                                                     const ge *p, const uint8_t b[32]) {
    int8_t na[256], nb[256];
    ge_cached tp[4], tb[4];
    ge base;
    scalar_wnaf(na, a);
    scalar_wnaf(nb, b);
    table_odd(tp, p);
    ge_base(&base);
    table_odd(tb, &base);
    ge_identity(r);
    unsigned i = 256;
    while (i > 0 && !na[i - 1] && !nb[i - 1]) i--;
    while (i-- > 0) {
        ge_dbl(r, r);
        add_digit_vartime(r, tp, na[i]);
        add_digit_vartime(r, tb, nb[i]);
    }
}

/* ==== Scalars mod L = 2^252 + 27742317777372353535851937790883648493 =================
 *
 * A number in reduction is 64 (or 32) signed byte positions x[i] (weight 2^(8i)) in
 * int64, so intermediate values need no care; each pass is a fixed sequence of
 * operations (no branch or index on values).
 */
static const uint8_t l_low[16] = { /* L - 2^252, little-endian */
    0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58,
    0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
};

/* Floor carries: x[0..30] into 0..255, the excess into x[31]. */
static void sc_carry(int64_t x[32]) {
    for (unsigned i = 0; i < 31; i++) {
        int64_t c = x[i] >> 8;
        x[i] -= c * 256;
        x[i + 1] += c;
    }
}

/* x += L & mask, mask 0 or -1 (add L or nothing, without branching). */
static void sc_add_l_masked(int64_t x[32], int64_t mask) {
    for (unsigned k = 0; k < 16; k++) x[k] += l_low[k] & mask;
    x[31] += 16 & mask;
    sc_carry(x);
}

/* x -= L. */
static void sc_sub_l(int64_t x[32]) {
    for (unsigned k = 0; k < 16; k++) x[k] -= l_low[k];
    x[31] -= 16;
    sc_carry(x);
}

/* out = x mod L for |x[i]| < 2^40. */
static void sc_reduce_limbs(uint8_t out[32], int64_t x[64]) {
    /* Fold the top positions down: 2^(8i) = 2^252 2^(8(i-32)+4) = -16 (L - 2^252)
     * 2^(8(i-32)) mod L; rounding carries keep the touched positions small. */
    for (unsigned i = 63; i >= 32; i--) {
        int64_t v = x[i];
        x[i] = 0;
        for (unsigned k = 0; k < 16; k++) x[i - 32 + k] -= 16 * v * l_low[k];
        for (unsigned j = i - 32; j < i - 16; j++) {
            int64_t c = (x[j] + 128) >> 8;
            x[j] -= c * 256;
            x[j + 1] += c;
        }
    }
    /* Now x < 2^262 or so in magnitude: fold bits 252 and up once more, which
     * leaves x[31] in -1..15, i.e. -2^248 <= x < 2^252. */
    sc_carry(x);
    int64_t top = x[31] >> 4;
    x[31] -= top * 16;
    for (unsigned k = 0; k < 16; k++) x[k] -= top * l_low[k];
    sc_carry(x);
    sc_add_l_masked(x, x[31] >> 63); /* 0 <= x < 2L */
    sc_sub_l(x);                     /* -L <= x < L */
    sc_add_l_masked(x, x[31] >> 63); /* 0 <= x < L */
    for (unsigned i = 0; i < 32; i++) out[i] = (uint8_t)x[i];
    wipe(x, 64 * sizeof x[0]);
}

/* out = in mod L, in a 64-byte little-endian number; out may be in. */
static void sc_reduce(uint8_t out[32], const uint8_t in[64]) {
    int64_t x[64];
    for (unsigned i = 0; i < 64; i++) x[i] = in[i];
    sc_reduce_limbs(out, x);
}

/* out = (a b + c) mod L, a, b, c 32-byte little-endian; out may alias the inputs. */
HM_NOINLINE static void sc_muladd(uint8_t out[32], const uint8_t a[32],
                                  const uint8_t b[32], const uint8_t c[32]) {
    int64_t x[64];
    memset(x, 0, sizeof x);
    for (unsigned i = 0; i < 32; i++) {
        x[i] += c[i];
        for (unsigned j = 0; j < 32; j++) x[i + j] += (int32_t)a[i] * b[j];
    }
    sc_reduce_limbs(out, x);
}

/* 1 if s < L (canonical), variable time (s is public). */
static int sc_is_canonical(const uint8_t s[32]) {
    for (unsigned i = 32; i-- > 0;) {
        uint8_t l = i == 31 ? 0x10 : i < 16 ? l_low[i] : 0;
        if (s[i] != l) return s[i] < l;
    }
    return 0; /* s = L */
}

/* ==== Ed25519 ========================================================================= */

/* h = SHA-512(seed); h[0..31] clamped is the secret scalar, h[32..63] the prefix. */
static void expand_seed(uint8_t h[64], const uint8_t seed[32]) {
    hm_sha512(h, seed, 32);
    h[0] &= 248;
    h[31] &= 127;
    h[31] |= 64;
}

/* out = SHA-512(a || b || msg) mod L, a and b 32 bytes (b may be NULL). */
static void hash_to_scalar(uint8_t out[32], const uint8_t a[32], const uint8_t *b,
                           const uint8_t *msg, size_t len) {
    uint8_t digest[64];
    hm_sha512_ctx ctx;
    hm_sha512_init(&ctx);
    hm_sha512_update(&ctx, a, 32);
    if (b) hm_sha512_update(&ctx, b, 32);
    hm_sha512_update(&ctx, msg, len);
    hm_sha512_final(&ctx, digest);
    sc_reduce(out, digest);
    wipe(digest, sizeof digest);
}

static void scalarmult_base_encode(uint8_t out[32], const uint8_t a[32]) {
    ge p;
    ge_scalarmult_base(&p, a);
    ge_tobytes(out, &p);
    wipe(&p, sizeof p);
}

void hm_ed25519_public_key(uint8_t pub[HM_ED25519_PUBLIC_SIZE],
                           const uint8_t seed[HM_ED25519_SEED_SIZE]) {
    uint8_t h[64];
    expand_seed(h, seed);
    scalarmult_base_encode(pub, h);
    wipe(h, sizeof h);
}

void hm_ed25519_sign(uint8_t sig[HM_ED25519_SIGNATURE_SIZE],
                     const uint8_t seed[HM_ED25519_SEED_SIZE],
                     const uint8_t pub[HM_ED25519_PUBLIC_SIZE], const uint8_t *msg,
                     size_t len) {
    uint8_t h[64], r[32], rb[32], k[32];
    expand_seed(h, seed);
    hash_to_scalar(r, h + 32, NULL, msg, len); /* r = SHA-512(prefix || M) mod L */
    scalarmult_base_encode(rb, r);             /* R = r B */
    hash_to_scalar(k, rb, pub, msg, len);      /* k = SHA-512(R || A || M) mod L */
    memcpy(sig, rb, 32);
    sc_muladd(sig + 32, k, h, r);              /* S = (r + k a) mod L */
    wipe(h, sizeof h);
    wipe(r, sizeof r);
}

int hm_ed25519_verify(const uint8_t sig[HM_ED25519_SIGNATURE_SIZE],
                      const uint8_t pub[HM_ED25519_PUBLIC_SIZE], const uint8_t *msg,
                      size_t len) {
    uint8_t k[32], check[32];
    ge a, r;
    if (!sc_is_canonical(sig + 32)) return -1;
    if (ge_frombytes_vartime(&a, pub) != 0) return -1;
    fe_neg(a.X, a.X); /* -A */
    fe_neg(a.T, a.T);
    hash_to_scalar(k, sig, pub, msg, len);
    ge_double_scalarmult_vartime(&r, k, &a, sig + 32); /* [S]B - [k]A */
    ge_tobytes(check, &r);
    return memcmp(check, sig, 32) == 0 ? 0 : -1;
}
