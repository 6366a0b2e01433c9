/* hm_fixed — unsigned Q16.16 arithmetic, bit for bit as protocol/SPEC.md §9.1.
 *
 * A Q16.16 value is a uint32_t v standing for v / 65536: HM_Q_ONE (0x10000) is 1.0,
 * one ulp is 2^-16. The host reference is host/hirmem/protocol/fixedpoint.py; the vectors are
 * protocol/vectors/fixed_point.json. No floating point, no libc, no state.
 *
 * Invariants (what every function here guarantees):
 *   - hm_q_mul:        *out = (a*b + 0x8000) >> 16 (round half up) computed in 64 bits.
 *                      A result above 0xFFFFFFFF is an ERROR (HM_FIXED_OVERFLOW, *out
 *                      untouched) — never saturated — exactly as the host raises.
 *   - hm_q_mul_unit:   the same value without the check; the caller guarantees that one
 *                      factor is <= HM_Q_ONE, which makes overflow impossible
 *                      ((0x10000 * 0xFFFFFFFF + 0x8000) >> 16 == 0xFFFFFFFF). The gate
 *                      uses it: every factor there is in 0..1.0.
 *   - hm_isqrt_round:  the integer nearest sqrt(n) for every n in 0..2^64-1: with
 *                      r = floor(sqrt(n)), r + 1 if n - r*r > r, else r (no tie exists).
 *                      The result is in 0..2^32 (2^32 only for n > 2^64 - 2^32), hence
 *                      the uint64_t return type.
 *   - hm_q_sqrt:       hm_isqrt_round(a << 16); always <= 2^24.
 *   - hm_q_sqrt_mul:   hm_isqrt_round(a * b) from the exact 64-bit product, one rounding;
 *                      always fits 32 bits. (a == b returns a at once: exact. In the
 *                      gate every other product is below 2^32, so the gate never takes
 *                      the 64-bit path.)
 *
 * Cost. hm_isqrt_round is the recursive digit-by-digit ("Karatsuba") square root of
 * Zimmermann (1999): the input is normalised (shifted left by an even count until one
 * of its top two bits is set), the top 8 bits take their root (8..15) from three
 * compare-and-add steps (a 192-byte table did it in one load, at 152 bytes of flash
 * more on rv32), and each further level appends one digit of 4, 8 and 16 bits with ONE 32-bit by
 * 32-bit division (UDIV on Cortex-M3, DIVU on RV32M: a single instruction; never a
 * 64-bit division, never a libgcc call) and at most one correction. A result that
 * fits 16 bits (n < 2^32, the gate's case) skips the 16-bit level. There is no loop
 * over bits: the path length is nearly constant, against 16..32 iterations of 64-bit
 * arithmetic for the bit-by-bit method of §9.1 (which tests/native/t_core.c keeps as
 * the reference it is checked against). On a core without a hardware divider
 * (Cortex-M0) each division becomes a __aeabi_uidiv call; use a bitwise isqrt there.
 * Measured over random 64-bit inputs of every magnitude (GCC 12 -Os, QEMU instruction
 * trace), with the table: Cortex-M3 mean 69, max 84 instructions; RV32IMAC (no CLZ)
 * mean 114, max 145; the compare steps add about 10 (the gate's worst vector: +33 on
 * Cortex-M3, +20 on rv32, tools/bench_core.py).
 */
#ifndef HM_FIXED_H
#define HM_FIXED_H

#include <stdint.h>

#define HM_Q_FRAC_BITS 16
#define HM_Q_ONE 0x10000u /* 1.0 */
#define HM_Q_HALF_ULP 0x8000u
#define HM_Q_MAX 0xFFFFFFFFu /* just under 65536.0 */

typedef enum {
    HM_FIXED_OK = 0,
    HM_FIXED_OVERFLOW = 1 /* the exact result does not fit 32 bits */
} hm_fixed_status;

/* (a*b + 0x8000) >> 16; HM_FIXED_OVERFLOW (and *out unwritten) if above 0xFFFFFFFF. */
hm_fixed_status hm_q_mul(uint32_t a, uint32_t b, uint32_t *out);

/* (a*b + 0x8000) >> 16 for factors of which at least one is <= HM_Q_ONE. */
static inline uint32_t hm_q_mul_unit(uint32_t a, uint32_t b) {
    return (uint32_t)(((uint64_t)a * b + HM_Q_HALF_ULP) >> HM_Q_FRAC_BITS);
}

/* Integer square root of n rounded to nearest (SPEC §9.1); result in 0..2^32. */
uint64_t hm_isqrt_round(uint64_t n);

/* sqrt(a) as Q16.16: hm_isqrt_round(a << 16). */
uint32_t hm_q_sqrt(uint32_t a);

/* sqrt(a*b) as Q16.16: hm_isqrt_round(a * b), one rounding. */
uint32_t hm_q_sqrt_mul(uint32_t a, uint32_t b);

#endif
