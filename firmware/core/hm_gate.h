/* hm_gate — capture normalisation and the HIR admission gate (SPEC §9.2–§9.5).
 *
 * Bit for bit the host's host/hirmem/protocol/records.py normalise() and gate.py evaluate();
 * the vectors are protocol/vectors/gate.json. All arithmetic is unsigned Q16.16
 * (hm_fixed.h). Stateless: no globals, no heap.
 *
 * ACTION_FLAGS: one bit per sub-check, set = passed; bits 12..15 reserved (must be 0).
 *   H (honesty)   bits 0..3    I (integrity) bits 4..7    R (respect) bits 8..11
 *   hard checks   bit 6 no_invariant_violation, bit 10 consent_enforced,
 *                 bit 11 no_domination (mask 0x0C40)
 *
 * Invariants of hm_gate_evaluate (on HM_GATE_OK):
 *   - h, i, r are 0x4000 x (passed checks of the axis), after the hard-fail forcing:
 *     i = 0 if no_invariant_violation failed; r = 0 if no_domination or
 *     consent_enforced failed.
 *   - f = sqrt_mul(h, i), c = sqrt_mul(r, i), rn = sqrt_mul(f, c) (hm_q_sqrt_mul).
 *   - verdict GREEN if rn >= 0xC000, YELLOW if rn >= 0x8000, else RED.
 *   - w = mul(mul(mul(mul(Q, P), h), i), r), left to right, round half up each step.
 *   - hard = HM_HARD_* bits; H == 0 sets HM_HARD_HONESTY_ZERO.
 *   - state = HM_STATE_CANDIDATE iff verdict != RED and hard == 0, else
 *     HM_STATE_QUARANTINED. Nothing else is ever produced.
 *   - every score is in 0..HM_Q_ONE; a zero axis makes w and rn zero.
 * On an error nothing is written to *out:
 *   HM_GATE_RESERVED  flags has a bit above 11 set (reserved, or beyond 16 bits);
 *   HM_GATE_RANGE     quality or provenance is above HM_Q_ONE (1.0).
 * (flags is checked first, as the host does.)
 *
 * Cost: no loops and no data-dependent branches except inside hm_isqrt_round (three
 * calls); the axis counts are one SWAR popcount of the three nibbles. Measured per
 * evaluation over all 4096 flag words (GCC 12 -Os, QEMU single-step instruction
 * trace): Cortex-M3 mean 175, max 303 instructions; RV32IMAC mean 246, max 455.
 */
#ifndef HM_GATE_H
#define HM_GATE_H

#include <stddef.h>
#include <stdint.h>

#include "hm_fixed.h"

/* ACTION_FLAGS sub-checks (SPEC §9.2). */
#define HM_CHECK_UNCERTAINTY_DISCLOSED   0x0001u
#define HM_CHECK_SIGNATURE_INTACT        0x0002u
#define HM_CHECK_SOURCE_PRESENT          0x0004u
#define HM_CHECK_SCHEMA_VALID            0x0008u
#define HM_CHECK_BASELINE_ALIGNED        0x0010u
#define HM_CHECK_REVERSIBLE_PREFERENCE   0x0020u
#define HM_CHECK_NO_INVARIANT_VIOLATION  0x0040u
#define HM_CHECK_STRUCTURALLY_CONSISTENT 0x0080u
#define HM_CHECK_LIFE_FIRST_ALIGNED      0x0100u
#define HM_CHECK_NO_COERCION             0x0200u
#define HM_CHECK_CONSENT_ENFORCED        0x0400u
#define HM_CHECK_NO_DOMINATION           0x0800u

#define HM_FLAGS_HONESTY   0x000Fu
#define HM_FLAGS_INTEGRITY 0x00F0u
#define HM_FLAGS_RESPECT   0x0F00u
#define HM_FLAGS_DEFINED   0x0FFFu
#define HM_FLAGS_RESERVED  0xF000u
#define HM_FLAGS_HARD      0x0C40u

/* Hard-fail bits of hm_gate_result.hard (SPEC §9.5). */
#define HM_HARD_DOMINATION   1u /* bit 11 clear: R = 0 (MEM-INV-2) */
#define HM_HARD_INVARIANT    2u /* bit 6 clear: I = 0 */
#define HM_HARD_CONSENT      4u /* bit 10 clear: R = 0 */
#define HM_HARD_HONESTY_ZERO 8u /* bits 0..3 clear: H = 0 (MEM-INV-1) */

#define HM_GATE_AXIS_STEP 0x4000u /* 0.25 per passed sub-check */
#define HM_GATE_GREEN     0xC000u /* rn >= 0.75 */
#define HM_GATE_YELLOW    0x8000u /* rn >= 0.50 */

/* Verdicts (CAPTURE_RESULT field 15). */
#define HM_VERDICT_GREEN  0u
#define HM_VERDICT_YELLOW 1u
#define HM_VERDICT_RED    2u

/* Record lifecycle states and layers (SPEC §7.3); the gate yields CANDIDATE or
 * QUARANTINED, a device never produces CONSOLIDATED or ARCHIVED. */
#define HM_STATE_VOLATILE     0u
#define HM_STATE_CANDIDATE    1u
#define HM_STATE_CONSOLIDATED 2u
#define HM_STATE_QUARANTINED  3u
#define HM_STATE_ARCHIVED     4u
#define HM_LAYER_WORKING      0u
#define HM_LAYER_EPISODIC     1u

typedef enum {
    HM_GATE_OK = 0,
    HM_GATE_RESERVED = 1, /* flags sets a bit above 11 */
    HM_GATE_RANGE = 2     /* quality or provenance above 1.0 */
} hm_gate_status;

typedef struct {
    uint32_t h, i, r, f, c, rn, w; /* Q16.16, each 0..HM_Q_ONE */
    uint16_t flags;                /* the flags judged (0..0x0FFF) */
    uint8_t verdict;               /* HM_VERDICT_* */
    uint8_t hard;                  /* HM_HARD_* bits, 0..15 */
    uint8_t state;                 /* disposition: HM_STATE_CANDIDATE or _QUARANTINED */
} hm_gate_result;

/* Stage 2 (SPEC §9.3): returns flags with bit 3 schema_valid set iff
 * 1 <= payload_len <= 256, timestamp > 0, context_len == 32 and source_len <= 64, and
 * bit 2 source_present set iff source_len > 0; every other bit is kept as it came
 * (reserved bits included: rejecting them is the gate's and the capture's job). */
uint32_t hm_gate_normalise(uint32_t flags, size_t payload_len, uint64_t timestamp,
                           size_t context_len, size_t source_len);

/* Stage 3 (SPEC §9.4): run the gate on normalised flags, Q (quality) and P
 * (provenance); see the invariants above. */
hm_gate_status hm_gate_evaluate(uint32_t flags, uint32_t quality, uint32_t provenance,
                                hm_gate_result *out);

#endif
