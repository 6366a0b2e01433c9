/* What WP takes as given when it proves hm_ring.c (tools/verify_c.py ring-wp): the
 * contracts of the two gate functions hm_ring_gate calls. They are not proved here
 * (hm_gate.c is fixed-point arithmetic checked bit for bit against the host's gate by
 * tests/native/t_core.c and the vectors); they state only what hm_gate.h promises. */
#include <stddef.h>
#include <stdint.h>

#include "hm_gate.h"

/*@ assigns \nothing;
    ensures \result / 4096 == flags / 4096; // bits above 11 are kept as they came */
uint32_t hm_gate_normalise(uint32_t flags, size_t payload_len, uint64_t timestamp,
                           size_t context_len, size_t source_len);

/*@ requires \valid(out);
    assigns *out;
    ensures \result == HM_GATE_OK <==> flags <= 0xFFF && quality <= HM_Q_ONE &&
                                       provenance <= HM_Q_ONE;
    ensures \result == HM_GATE_OK ==>
            out->state == HM_STATE_CANDIDATE || out->state == HM_STATE_QUARANTINED; */
hm_gate_status hm_gate_evaluate(uint32_t flags, uint32_t quality, uint32_t provenance,
                                hm_gate_result *out);
