/* EVA harnesses for the decoders that face the wire (tools/verify_c.py runs them).
 *
 * Each eva_* function is one analysis entry point (frama-c -main eva_X). The input is
 * a buffer of HM_MAX_FRAME bytes of any content (Frama_C_make_unknown) read up to a
 * length of any value 0 .. HM_MAX_FRAME (Frama_C_interval): EVA then covers every
 * input a peer can send in one frame. Zero alarms from EVA on an entry point means no
 * run of that decoder on such an input has undefined behaviour (out-of-bounds access,
 * uninitialised read, signed overflow, invalid shift, ...). Not part of any build.
 */
#include "__fc_builtin.h"

#include "hm_cbor.h"
#include "hm_frag.h"
#include "hm_frame.h"
#include "hm_msg.h"
#include "hm_pack.h"

static uint8_t wire[HM_MAX_FRAME];

/* Any content, any length up to the maximum frame. */
static size_t any_input(void) {
    Frama_C_make_unknown((char *)wire, sizeof wire);
    return Frama_C_size_t_interval(0, sizeof wire);
}

/* The generic deterministic-CBOR validator and every typed getter on the same input. */
void eva_cbor(void) {
    size_t len = any_input();
    (void)hm_cbor_check(wire, len);

    hm_cbor_r r;
    uint64_t v, max = Frama_C_unsigned_long_long_interval(0, UINT64_MAX);
    int neg, b;
    const uint8_t *p;
    size_t n, lo = Frama_C_size_t_interval(0, 300), hi = Frama_C_size_t_interval(0, SIZE_MAX);
    hm_cbor_r_init(&r, wire, len);
    (void)hm_cbor_peek(&r);
    switch (Frama_C_interval(0, 10)) {
    case 0: (void)hm_cbor_get_uint(&r, max, &v); break;
    case 1: (void)hm_cbor_get_int(&r, &neg, &v); break;
    case 2: (void)hm_cbor_get_bstr(&r, lo, hi, &p, &n); break;
    case 3: (void)hm_cbor_get_tstr(&r, hi, &p, &n); break;
    case 4: (void)hm_cbor_get_array(&r, &v); break;
    case 5: (void)hm_cbor_expect_array(&r, max); break;
    case 6: (void)hm_cbor_get_map(&r, &v); break;
    case 7: (void)hm_cbor_get_tag(&r, &v); break;
    case 8: (void)hm_cbor_get_bool(&r, &b); break;
    case 9: (void)hm_cbor_get_null(&r); break;
    default: (void)hm_cbor_skip(&r); break;
    }
    (void)hm_cbor_end(&r);
}

/* The frame receiver fed byte by byte: more bytes than the longest frame on the wire
 * at the largest max_frame, any of them 00 (so any sequence of frames and garbage);
 * then the one-shot COBS decoder on the same bytes. */
static hm_frame_rx rx;
static uint8_t decoded[HM_MAX_FRAME];

void eva_frame(void) {
    size_t len = any_input(), body_len, out_len;
    size_t cap = Frama_C_size_t_interval(0, sizeof decoded);
    if (hm_frame_rx_init(&rx, Frama_C_size_t_interval(HM_FRAME_FLOOR, HM_MAX_FRAME)) != 0)
        return;
    for (size_t i = 0; i < HM_FRAME_WIRE_BOUND(HM_MAX_FRAME) + 8u; i++) {
        uint8_t byte = (uint8_t)Frama_C_interval(0, 255);
        if (hm_frame_rx_push(&rx, byte) == HM_FRAME_OK) (void)hm_frame_rx_body(&rx, &body_len);
        if (Frama_C_interval(0, 1))
            (void)hm_frame_rx_set_max(&rx, Frama_C_size_t_interval(0, 2 * HM_MAX_FRAME));
    }
    (void)hm_frame_rx_bad(&rx);
    (void)hm_cobs_decode(wire, len, decoded, cap, &out_len);
}

/* Link messages: the whole decode of SPEC §4.3 on any body, outer or inner. */
void eva_msg(void) {
    size_t len = any_input();
    hm_msg m;
    (void)hm_msg_decode(wire, len, Frama_C_interval(0, 1), &m);
}

/* Frame pieces (SPEC §6.8): a run of frame bodies with any bytes (any head) and any
 * length up to the frame, with resets in between, joined against any limit (also one
 * init refuses); the seq a too-large refusal names is read from each. EVA checks each
 * call's buffers; WP (tools/verify_c.py WP_HARNESS) carries the joiner's bound
 * (hm_join_take's first precondition) over the run, which EVA's intervals lose. */
static hm_join jn;

void eva_join(void) {
    size_t len = any_input(), got, n;
    if (len == 0 || hm_join_init(&jn, Frama_C_unsigned_int_interval(0, 2 * HM_MAX_MESSAGE)))
        return;
    //@ assert jn.limit <= HM_MAX_MESSAGE && jn.have <= jn.limit + HM_PIECE_CHECK;
    /*@ loop invariant jn.limit <= HM_MAX_MESSAGE && jn.have <= jn.limit + HM_PIECE_CHECK;
        loop assigns i, n, got, jn, Frama_C_entropy_source; */
    for (int i = 0; i < 64; i++) {
        n = Frama_C_size_t_interval(1, len);
        if (Frama_C_interval(0, 7) == 0) hm_join_reset(&jn);
        (void)hm_body_seq(wire, n);
        if (HM_PIECE_IS(wire, n)) (void)hm_join_take(&jn, wire, n, &got);
    }
}

/* The knowledge-pack verifier (SPEC §8.4) on any pushed pack up to HM_MAX_MESSAGE
 * bytes (the largest message a device reassembles), with or without a host key and
 * with any held head. Ed25519 is eva_crypto.c's stand-in (reads, any verdict). */
static uint8_t pushed[HM_MAX_MESSAGE];
static hm_host_key host_key;
static hm_knowledge know;

void eva_pack(void) {
    uint8_t head_hash[HM_HASH_SIZE];
    hm_pack_reason reason;
    size_t len;
    Frama_C_make_unknown((char *)pushed, sizeof pushed);
    Frama_C_make_unknown((char *)&host_key, sizeof host_key);
    Frama_C_make_unknown((char *)head_hash, sizeof head_hash);
    len = Frama_C_size_t_interval(0, sizeof pushed);
    hm_knowledge_init(&know, Frama_C_interval(0, 1) ? &host_key : NULL);
    if (Frama_C_interval(0, 1))
        hm_knowledge_set_head(&know, Frama_C_unsigned_long_long_interval(0, UINT64_MAX),
                              head_hash);
    (void)hm_knowledge_accept(&know, pushed, len, Frama_C_interval(0, 1) ? &reason : NULL);
}
