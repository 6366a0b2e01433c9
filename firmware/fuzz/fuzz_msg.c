/* libFuzzer target: link message decoding and encoding (hm_msg).
 *
 * The input is a message body. It is decoded as an outer body (inner = 0) and as a
 * reassembled one (inner = 1). For each:
 *  - the result code, `type` and `seq` (the ERROR ref on failure) are compared with
 *    an oracle of SPEC §4.3 steps 1..7 written in this file (its own element parsing,
 *    field counts from the SPEC §5.1 table); after step 7 only OK or MALFORMED
 *    (step 8, the field kinds) may come back;
 *  - when decoding succeeds, hm_msg_encode() of the decoded struct must reproduce the
 *    input exactly, into a buffer of exactly that size, and refuse (TOO_LARGE) one
 *    byte less; every byte/text view points into the input.
 */
#include <string.h>

#include "fuzz_common.h"
#include "hm_cbor.h"
#include "hm_msg.h"

#define U32_MAX 0xFFFFFFFFu

/* SPEC §5.1: field count of types 1..15 (14, FRAGMENT, is retired: refused at step 4). */
static const unsigned field_count[16] = {0, 12, 9, 7, 14, 1, 3, 1, 4, 0, 14, 2, 3, 0, 0, 1};

/* One head at *pos of an input already known to be valid deterministic CBOR. */
static void head_at(const uint8_t *p, size_t *pos, unsigned *mt, uint64_t *arg) {
    uint8_t ib = p[(*pos)++];
    unsigned ai = ib & 31u;
    *mt = ib >> 5;
    *arg = ai;
    if (ai >= 24) {
        size_t n = (size_t)1 << (ai - 24);
        uint64_t v = 0;
        for (size_t i = 0; i < n; i++) v = v << 8 | p[(*pos)++];
        *arg = v;
    }
}

typedef struct {
    hm_error_code code; /* HM_OK: steps 1..7 pass (step 8 may still refuse) */
    uint8_t type;
    uint32_t seq, ack; /* on failure seq is the ERROR ref */
} expectation;

static expectation oracle(const uint8_t *body, size_t len, int inner) {
    expectation x = {HM_E_MALFORMED, 0, 0, 0};
    size_t pos = 0;
    unsigned mt[4] = {9, 9, 9, 9};
    uint64_t v[4] = {0, 0, 0, 0}, n;
    unsigned head;
    int k = 0;
    if (hm_cbor_check(body, len) != HM_CBOR_OK) return x; /* step 1 */
    head_at(body, &pos, &head, &n);
    if (head != 4 || n < 4) return x; /* step 2 */
    while (k < 4) { /* leading integer elements (heads only) */
        if ((body[pos] >> 5) > 1) break;
        head_at(body, &pos, &mt[k], &v[k]);
        k++;
    }
    if (k >= 3 && mt[2] == 0 && v[2] <= U32_MAX) x.seq = (uint32_t)v[2]; /* ERROR ref */
    if (k < 1 || mt[0] != 0 || v[0] != 1) { /* step 3 */
        x.code = HM_E_UNKNOWN_VERSION;
        return x;
    }
    if (k < 2 || mt[1] != 0 || v[1] < 1 || v[1] > 15 || v[1] == 14) { /* step 4 */
        x.code = HM_E_UNKNOWN_TYPE;
        return x;
    }
    x.type = (uint8_t)v[1];
    if (k < 4 || mt[2] != 0 || v[2] > U32_MAX || mt[3] != 0 || v[3] > U32_MAX)
        return x; /* step 5 */
    x.ack = (uint32_t)v[3];
    int unsequenced = x.type == 11 || x.type == 12 || x.type == 13;
    if (inner) { /* step 6 as SPEC §6.8 step 4 replaces it */
        if (x.seq != 0 || x.ack != 0) {
            x.code = HM_E_REASSEMBLY;
            return x;
        }
    } else if (unsequenced != (x.seq == 0)) {
        return x;
    }
    if (n - 4 != field_count[x.type]) return x; /* step 7 */
    x.code = HM_OK;
    return x;
}

static int inside(hm_bytes b, const uint8_t *body, size_t len) {
    return b.len == 0 || (b.ptr >= body && b.len <= len && b.ptr - body <= (ptrdiff_t)(len - b.len));
}

/* The byte/text views of a decoded message point into the body. */
static void check_views(const hm_msg *m, const uint8_t *body, size_t len) {
    switch (m->type) {
    case HM_MSG_HELLO:
        FUZZ_CHECK(inside(m->u.hello.device_id, body, len) && m->u.hello.device_id.len == 8);
        FUZZ_CHECK(inside(m->u.hello.board, body, len) && m->u.hello.board.len <= 240);
        FUZZ_CHECK(inside(m->u.hello.firmware, body, len) && m->u.hello.firmware.len <= 240);
        FUZZ_CHECK(inside(m->u.hello.device_kid, body, len));
        FUZZ_CHECK(inside(m->u.hello.host_kid, body, len));
        FUZZ_CHECK(fuzz_utf8_ok(m->u.hello.board.ptr, m->u.hello.board.len));
        FUZZ_CHECK(fuzz_utf8_ok(m->u.hello.firmware.ptr, m->u.hello.firmware.len));
        break;
    case HM_MSG_HELLO_ACK:
        FUZZ_CHECK(inside(m->u.hello_ack.host_id, body, len));
        FUZZ_CHECK(inside(m->u.hello_ack.pack_hash, body, len));
        FUZZ_CHECK(m->u.hello_ack.pack_hash.len == 32);
        FUZZ_CHECK(inside(m->u.hello_ack.hello_hash, body, len));
        FUZZ_CHECK(m->u.hello_ack.hello_hash.len == HM_HELLO_ECHO_SIZE);
        break;
    case HM_MSG_CAPTURE:
        FUZZ_CHECK(inside(m->u.capture.source, body, len) && m->u.capture.source.len <= 240);
        FUZZ_CHECK(inside(m->u.capture.payload, body, len) && m->u.capture.payload.len <= 256);
        FUZZ_CHECK(inside(m->u.capture.context, body, len) && m->u.capture.context.len == 32);
        FUZZ_CHECK(m->u.capture.confidence <= 0x10000 && m->u.capture.provenance <= 0x10000 &&
                   m->u.capture.priority <= 0x10000);
        break;
    case HM_MSG_CAPTURE_RESULT:
        FUZZ_CHECK(inside(m->u.capture_result.record_id, body, len));
        FUZZ_CHECK(m->u.capture_result.record_id.len == 0 ||
                   m->u.capture_result.record_id.len == 16);
        FUZZ_CHECK(m->u.capture_result.status <= 2 && m->u.capture_result.verdict <= 2 &&
                   m->u.capture_result.hard <= 15 && m->u.capture_result.state <= 4);
        break;
    case HM_MSG_PACK_OFFER: FUZZ_CHECK(inside(m->u.pack_offer.pack, body, len)); break;
    case HM_MSG_KNOWLEDGE_PUSH: FUZZ_CHECK(inside(m->u.knowledge_push.pack, body, len)); break;
    case HM_MSG_PACK_RESULT:
        FUZZ_CHECK(m->u.pack_result.status <= 3 && m->u.pack_result.reason <= 11);
        break;
    case HM_MSG_KNOWLEDGE_RESULT:
        FUZZ_CHECK(inside(m->u.knowledge_result.pack_id, body, len));
        FUZZ_CHECK(m->u.knowledge_result.pack_id.len == 16);
        break;
    case HM_MSG_LOG:
        FUZZ_CHECK(inside(m->u.log.text, body, len) && m->u.log.level <= 3);
        FUZZ_CHECK(fuzz_utf8_ok(m->u.log.text.ptr, m->u.log.text.len));
        break;
    case HM_MSG_ERROR:
        FUZZ_CHECK(inside(m->u.error.detail, body, len));
        FUZZ_CHECK(m->u.error.code >= 1 && m->u.error.code <= 8);
        break;
    default: break;
    }
}

static void one_way(const uint8_t *data, size_t size, int inner) {
    hm_msg m;
    expectation x = oracle(data, size, inner);
    memset(&m, 0xA5, sizeof m); /* nothing may be read before it is written */
    hm_error_code code = hm_msg_decode(data, size, inner, &m);
    FUZZ_CHECK(strcmp(hm_error_name(code), "?") != 0);
    if (x.code != HM_OK) {
        FUZZ_CHECK(code == x.code);
        FUZZ_CHECK(m.type == x.type);
        FUZZ_CHECK(m.seq == x.seq);
        return;
    }
    FUZZ_CHECK(code == HM_OK || code == HM_E_MALFORMED); /* step 8 */
    FUZZ_CHECK(m.type == x.type);
    FUZZ_CHECK(m.seq == x.seq);
    if (code != HM_OK) return;
    FUZZ_CHECK(m.ack == x.ack);
    check_views(&m, data, size);

    /* re-encode: exactly the input, into exactly its size */
    uint8_t *out = malloc(size);
    size_t len = 0;
    FUZZ_CHECK(out != NULL);
    FUZZ_CHECK(hm_msg_encode(&m, inner, out, size, &len) == HM_OK);
    FUZZ_CHECK(len == size);
    FUZZ_CHECK(memcmp(out, data, size) == 0);
    len = 12345;
    FUZZ_CHECK(hm_msg_encode(&m, inner, out, size - 1, &len) == HM_E_TOO_LARGE);
    FUZZ_CHECK(len == 12345);
    /* the other direction's rules: inner refuses seq/ack, outer the seq rule */
    hm_error_code other = hm_msg_encode(&m, !inner, out, size, &len);
    if (inner) {
        FUZZ_CHECK(other == ((m.type == 11 || m.type == 12 || m.type == 13) ? HM_OK
                                                                              : HM_E_MALFORMED));
    } else {
        FUZZ_CHECK(other == ((m.seq || m.ack) ? HM_E_MALFORMED : HM_OK));
    }
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    one_way(data, size, 0);
    one_way(data, size, 1);
    return 0;
}
