/* hm_gate — normalisation and the HIR gate. See hm_gate.h for the contract. */
#include "hm_gate.h"

#include "hm_config.h"

uint32_t hm_gate_normalise(uint32_t flags, size_t payload_len, uint64_t timestamp,
                           size_t context_len, size_t source_len) {
    /* payload_len - 1 < 256 is 1 <= payload_len <= 256 (size_t wraps at 0). */
    uint32_t schema = (payload_len - 1u < (size_t)HM_MAX_PAYLOAD) & (timestamp > 0u) &
                      (context_len == (size_t)HM_HASH_SIZE) &
                      (source_len <= (size_t)HM_MAX_SOURCE);
    uint32_t source = source_len > 0u;
    flags &= ~(HM_CHECK_SCHEMA_VALID | HM_CHECK_SOURCE_PRESENT);
    return flags | schema << 3 | source << 2;
}

hm_gate_status hm_gate_evaluate(uint32_t flags, uint32_t quality, uint32_t provenance,
                                hm_gate_result *out) {
    uint32_t n, h, i, r, f, c, rn, hard, verdict, fail;
    if (flags & ~HM_FLAGS_DEFINED) return HM_GATE_RESERVED;
    if ((quality > HM_Q_ONE) | (provenance > HM_Q_ONE)) return HM_GATE_RANGE;

    /* Passed checks per axis: a 2-bit-field SWAR popcount leaves each nibble's count
     * (0..4) in that nibble. */
    n = flags - ((flags >> 1) & 0x555u);
    n = (n & 0x333u) + ((n >> 2) & 0x333u);

    /* Hard fails from the clear hard bits (SPEC §9.5); fail has a 1 where a check
     * failed. */
    fail = ~flags;
    hard = ((fail >> 11) & 1u)                        /* domination */
           | ((fail >> 5) & 2u)                       /* invariant (bit 6 -> 1) */
           | ((fail >> 8) & 4u)                       /* consent (bit 10 -> 2) */
           | ((uint32_t)((flags & HM_FLAGS_HONESTY) == 0u) << 3);

    h = (n & 15u) << 14;                                           /* x 0x4000 */
    i = ((n >> 4) & 15u) << 14 & (0u - ((flags >> 6) & 1u));        /* forced 0 */
    r = ((n >> 8) & 15u) << 14 & (0u - ((flags >> 10) & (flags >> 11) & 1u));

    f = hm_q_sqrt_mul(h, i);
    c = hm_q_sqrt_mul(r, i);
    rn = hm_q_sqrt_mul(f, c);
    verdict = (uint32_t)(rn < HM_GATE_GREEN) + (uint32_t)(rn < HM_GATE_YELLOW);

    out->h = h;
    out->i = i;
    out->r = r;
    out->f = f;
    out->c = c;
    out->rn = rn;
    out->w = hm_q_mul_unit(hm_q_mul_unit(hm_q_mul_unit(hm_q_mul_unit(quality, provenance),
                                                       h), i), r);
    out->flags = (uint16_t)flags;
    out->verdict = (uint8_t)verdict;
    out->hard = (uint8_t)hard;
    /* candidate (1) unless RED (verdict 2) or any hard bit: then quarantined (3). */
    out->state = (uint8_t)(HM_STATE_CANDIDATE +
                           2u * ((verdict >> 1) | (uint32_t)(hard != 0u)));
    return HM_GATE_OK;
}
