/* hm_fixed — unsigned Q16.16 arithmetic (SPEC §9.1). See hm_fixed.h for the contract. */
#include "hm_fixed.h"

hm_fixed_status hm_q_mul(uint32_t a, uint32_t b, uint32_t *out) {
    /* a*b <= (2^32-1)^2 = 2^64 - 2^33 + 1, so a*b + 0x8000 cannot wrap. */
    uint64_t p = (uint64_t)a * b + HM_Q_HALF_ULP;
    if (p >> (32 + HM_Q_FRAC_BITS)) return HM_FIXED_OVERFLOW;
    *out = (uint32_t)(p >> HM_Q_FRAC_BITS);
    return HM_FIXED_OK;
}

/* floor(sqrt(z)) for z = 64..255 (the first digit of every normalised input): a root
 * in 8..15 found bit by bit (4, 2, 1 added where its square still fits), a dozen
 * instructions instead of a 192-byte table. */
static uint32_t root8(uint32_t z) {
    uint32_t s = z >= 144u ? 12u : 8u;
    if (z >= (s + 2u) * (s + 2u)) s += 2u;
    if (z >= (s + 1u) * (s + 1u)) s += 1u;
    return s;
}

/* One level of Zimmermann's Karatsuba square root with digits of `d` bits.
 *
 * Input: the root s1 and remainder r1 = top - s1^2 (0 <= r1 <= 2*s1) of the top half
 * of a normalised value, and the next two digits a1, a0 (each < 2^d). Then
 *   q = (r1*2^d + a1) / (2*s1),  u = (r1*2^d + a1) mod (2*s1),
 *   s = s1*2^d + q,  r = u*2^d + a0 - q^2,
 * and if r < 0, one correction (s - 1, r + 2s - 1) makes (s, r) the exact root and
 * remainder of the whole value (one correction suffices for a normalised input:
 * its top digit is >= 2^d / 4). Used for d = 4 and d = 8, where every quantity fits
 * comfortably in 32 bits (r1*2^8 < 2^17).
 */
#define HM_KARATSUBA_LEVEL(d, s1, r1, a1, a0, s, r)                          \
    do {                                                                     \
        uint32_t num_ = ((r1) << (d)) | (a1), den_ = (s1) << 1;             \
        uint32_t q_ = num_ / den_, u_ = num_ - q_ * den_;                    \
        int32_t r_ = (int32_t)((u_ << (d)) | (a0)) - (int32_t)(q_ * q_);     \
        uint32_t s_ = ((s1) << (d)) + q_;                                    \
        if (r_ < 0) {                                                        \
            r_ += (int32_t)(2u * s_ - 1u);                                   \
            s_ -= 1u;                                                        \
        }                                                                    \
        (s) = s_;                                                            \
        (r) = (uint32_t)r_;                                                  \
    } while (0)

/* x in [2^30, 2^32): returns floor(sqrt(x)) in [2^15, 2^16), *rem = x - root^2. */
static uint32_t sqrtrem32(uint32_t x, uint32_t *rem) {
    uint32_t z = x >> 24;                 /* 64..255 */
    uint32_t s3 = root8(z), r3 = z - s3 * s3;
    uint32_t s2, r2, s1, r1;
    /* 16-bit value x >> 16 = z*2^8 + digits (x >> 20) & 15, (x >> 16) & 15. */
    HM_KARATSUBA_LEVEL(4, s3, r3, (x >> 20) & 15u, (x >> 16) & 15u, s2, r2);
    /* 32-bit value x = (x >> 16)*2^16 + digits (x >> 8) & 255, x & 255. */
    HM_KARATSUBA_LEVEL(8, s2, r2, (x >> 8) & 255u, x & 255u, s1, r1);
    *rem = r1;
    return s1;
}

/* Half the even shift that normalises x != 0: the k with x << 2k in [2^30, 2^32). */
static unsigned norm_shift(uint32_t x) {
#if defined(__GNUC__) && defined(__ARM_FEATURE_CLZ)
    return (unsigned)__builtin_clz(x) >> 1; /* one CLZ instruction on ARMv7-M */
#else
    unsigned k = 0;
    if (x < 0x10000u) { x <<= 16; k += 8; }
    if (x < 0x1000000u) { x <<= 8; k += 4; }
    if (x < 0x10000000u) { x <<= 4; k += 2; }
    if (x < 0x40000000u) { k += 1; }
    return k;
#endif
}

uint64_t hm_isqrt_round(uint64_t n) {
    uint32_t hi = (uint32_t)(n >> 32), lo = (uint32_t)n;
    uint32_t root, rem;
    if (hi == 0) {
        /* n < 2^32: the root has at most 16 bits; 32-bit arithmetic throughout. */
        unsigned k;
        if (lo == 0) return 0;
        k = norm_shift(lo);
        root = sqrtrem32(lo << (2 * k), &rem) >> k; /* floor(floor(sqrt(m))/2^k) */
        rem = lo - root * root;                     /* <= 2*root < 2^17 */
        return root + (rem > root);
    } else {
        unsigned k = norm_shift(hi), sh = 2 * k;
        /* m = n << sh, so m >= 2^62; (lo >> 1) >> (31 - sh) avoids a shift by 32. */
        uint32_t mhi = (hi << sh) | ((lo >> 1) >> (31u - sh));
        uint32_t mlo = lo << sh;
        uint32_t r1, s1 = sqrtrem32(mhi, &r1); /* s1 in [2^15, 2^16), r1 <= 2*s1 */
        uint32_t a1 = mlo >> 16, a0 = mlo & 0xFFFFu;
        /* q = (r1*2^16 + a1) / (2*s1), computed as (r1*2^15 + a1/2) / s1 so that the
         * dividend fits 32 bits (r1 <= 2^17 - 2); same quotient (nested floors). */
        uint32_t t = (r1 << 15) | (a1 >> 1);
        uint32_t q = t / s1;                      /* 0..2^16 */
        uint32_t u = ((t - q * s1) << 1) | (a1 & 1u); /* remainder, < 2*s1 <= 2^17 */
        /* s = s1*2^16 + q may be 2^32 before the correction; the true root of m is
         * below 2^32, so the wrap-around of 32-bit arithmetic yields it exactly. */
        uint32_t s = (s1 << 16) + q;
        s -= (((uint64_t)u << 16) | a0) < (uint64_t)q * q; /* remainder < 0: s - 1 */
        root = s >> k;
        {
            uint64_t rem64 = n - (uint64_t)root * root; /* <= 2*root < 2^33 */
            return (uint64_t)root + (rem64 > root);
        }
    }
}

uint32_t hm_q_sqrt(uint32_t a) {
    return (uint32_t)hm_isqrt_round((uint64_t)a << HM_Q_FRAC_BITS);
}

uint32_t hm_q_sqrt_mul(uint32_t a, uint32_t b) {
    /* sqrt(a*a) is a exactly. In the gate this is the common all-pass case, and the
     * only one whose product (2^32 for 1.0 x 1.0) would take the 64-bit path. */
    if (a == b) return a;
    return (uint32_t)hm_isqrt_round((uint64_t)a * b);
}
