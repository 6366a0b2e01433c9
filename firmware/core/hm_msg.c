#include "hm_msg.h"

#include <string.h>

#include "hm_cbor.h"

#define U32_MAX 0xFFFFFFFFu

const char *hm_error_name(hm_error_code code) {
    static const char *const names[] = {"ok",         "unknown-version", "unknown-type",
                                        "malformed",  "too-large",       "no-session",
                                        "reassembly", "busy",            "internal"};
    return (unsigned)code < sizeof names / sizeof names[0] ? names[code] : "?";
}

/* Field kinds, as messages.py names them. Integers first, then strings. */
enum {
    K_U64, K_U32, K_U16, K_Q16, K_CSTATUS, K_VERDICT, K_HARD, K_STATE, K_PSTATUS,
    K_REASON, K_LEVEL, K_ECODE,
    K_BSTR, K_PAYLOAD, K_B8, K_B16, K_B32, K_B0_8, K_B0_16, K_TSTR, K_B64
};

/* Integer kinds: largest value (K_U64: any) and size of the C member. */
static const uint32_t int_max[K_BSTR] = {U32_MAX, U32_MAX, 0xFFFF, 0x10000, 2, 2,
                                         15,      4,       3,      11,      3, 8};
static const uint8_t int_size[K_BSTR] = {8, 4, 2, 4, 1, 1, 1, 1, 1, 1, 1, 1};
/* String kinds from K_PAYLOAD on: largest length (K_BSTR: any). */
static const uint8_t str_max[] = {0, 0 /* 256 */, 8, 16, 32, 8, 16, 240, 64};

typedef struct {
    uint8_t kind;
    uint8_t off; /* offset of the member in the type's struct (all < 256) */
} field;

#define F(T, member, kind) {kind, (uint8_t)offsetof(T, member)}

/* Every type's fields in wire order (SPEC §5); first[t - 1] .. first[t] index them. */
static const field fields[] = {
    /* 1 HELLO */
    F(hm_msg_hello, device_id, K_B8), F(hm_msg_hello, board, K_TSTR),
    F(hm_msg_hello, firmware, K_TSTR), F(hm_msg_hello, boot, K_U32),
    F(hm_msg_hello, capabilities, K_U64), F(hm_msg_hello, max_frame, K_U16),
    F(hm_msg_hello, max_message, K_U32), F(hm_msg_hello, window, K_U16),
    F(hm_msg_hello, device_kid, K_B8), F(hm_msg_hello, host_kid, K_B0_8),
    F(hm_msg_hello, knowledge_facts, K_U16), F(hm_msg_hello, knowledge_text, K_U16),
    /* 2 HELLO_ACK */
    F(hm_msg_hello_ack, host_id, K_B8), F(hm_msg_hello_ack, max_frame, K_U16),
    F(hm_msg_hello_ack, max_message, K_U32), F(hm_msg_hello_ack, window, K_U16),
    F(hm_msg_hello_ack, time_ms, K_U64), F(hm_msg_hello_ack, pack_seq, K_U64),
    F(hm_msg_hello_ack, pack_hash, K_B32), F(hm_msg_hello_ack, challenge, K_B16),
    F(hm_msg_hello_ack, hello_hash, K_B16),
    /* 3 CAPTURE */
    F(hm_msg_capture, source, K_TSTR), F(hm_msg_capture, payload, K_PAYLOAD),
    F(hm_msg_capture, context, K_B32), F(hm_msg_capture, flags, K_U16),
    F(hm_msg_capture, confidence, K_Q16), F(hm_msg_capture, provenance, K_Q16),
    F(hm_msg_capture, priority, K_Q16),
    /* 4 CAPTURE_RESULT */
    F(hm_msg_capture_result, ref, K_U32), F(hm_msg_capture_result, status, K_CSTATUS),
    F(hm_msg_capture_result, record_id, K_B0_16), F(hm_msg_capture_result, flags, K_U16),
    F(hm_msg_capture_result, h, K_Q16), F(hm_msg_capture_result, i, K_Q16),
    F(hm_msg_capture_result, r, K_Q16), F(hm_msg_capture_result, f, K_Q16),
    F(hm_msg_capture_result, c, K_Q16), F(hm_msg_capture_result, rn, K_Q16),
    F(hm_msg_capture_result, w, K_Q16), F(hm_msg_capture_result, verdict, K_VERDICT),
    F(hm_msg_capture_result, hard, K_HARD), F(hm_msg_capture_result, state, K_STATE),
    /* 5 PACK_OFFER */
    F(hm_msg_pack, pack, K_BSTR),
    /* 6 PACK_RESULT */
    F(hm_msg_pack_result, back, K_U32), F(hm_msg_pack_result, status, K_PSTATUS),
    F(hm_msg_pack_result, reason, K_REASON),
    /* 7 KNOWLEDGE_PUSH */
    F(hm_msg_pack, pack, K_BSTR),
    /* 8 KNOWLEDGE_RESULT */
    F(hm_msg_knowledge_result, pack_id, K_B16),
    F(hm_msg_knowledge_result, status, K_PSTATUS),
    F(hm_msg_knowledge_result, reason, K_REASON),
    F(hm_msg_knowledge_result, held_seq, K_U64),
    /* 9 STATUS_REQUEST: none */
    /* 10 STATUS */
    F(hm_msg_status, uptime_ms, K_U64), F(hm_msg_status, ring_used, K_U64),
    F(hm_msg_status, ring_capacity, K_U64), F(hm_msg_status, captures, K_U64),
    F(hm_msg_status, evictions, K_U64), F(hm_msg_status, refusals, K_U64),
    F(hm_msg_status, quarantined, K_U64), F(hm_msg_status, candidates, K_U64),
    F(hm_msg_status, packs_sent, K_U64), F(hm_msg_status, packs_acked, K_U64),
    F(hm_msg_status, frames_good, K_U64), F(hm_msg_status, frames_bad, K_U64),
    F(hm_msg_status, retransmits, K_U64), F(hm_msg_status, knowledge_seq, K_U64),
    /* 11 LOG */
    F(hm_msg_log, level, K_LEVEL), F(hm_msg_log, text, K_TSTR),
    /* 12 ERROR */
    F(hm_msg_error, code, K_ECODE), F(hm_msg_error, ref, K_U32),
    F(hm_msg_error, detail, K_TSTR),
    /* 13 ACK: none */
    /* 14 FRAGMENT: retired (SPEC §5.14), refused at step 4 */
    /* 15 PROOF */
    F(hm_msg_proof, signature, K_B64),
};

static const uint8_t first[16] = {0, 12, 21, 28, 42, 43, 46, 47, 51, 51, 65, 67, 70, 70, 70, 71};

/* compile-time: the table and the index agree, and every offset fits its byte */
typedef char hm_msg_table_check[sizeof fields / sizeof fields[0] == 71 ? 1 : -1];
typedef char hm_msg_offset_check[sizeof(((hm_msg *)0)->u) <= 256 ? 1 : -1];

int hm_msg_unsequenced(unsigned type) {
    return type == HM_MSG_LOG || type == HM_MSG_ERROR || type == HM_MSG_ACK;
}

static int int_ok(unsigned kind, uint64_t v) {
    return kind == K_U64 || (v <= int_max[kind] && (kind != K_ECODE || v >= 1));
}

/* A string the reader returned (set, and readable for its length: hm_cbor_get_tstr and
 * hm_cbor_get_bstr ensure both on OK), checked against its kind; WP proves the
 * contract at the call in hm_msg_decode (tools/verify_c.py WP_CALLS). */
/*@ requires str_set: \valid_read(b) && \initialized(&b->ptr) && \initialized(&b->len);
    requires str_readable: \valid_read(b->ptr + (0 .. b->len - 1));
    assigns \nothing; */
static int str_ok(unsigned kind, const hm_bytes *b) {
    size_t max = kind == K_PAYLOAD ? 256u : str_max[kind - K_BSTR];
    if (kind == K_BSTR) return 1;
    if (b->len > max) return 0;
    if (kind == K_TSTR) return hm_utf8_valid(b->ptr, b->len);
    if (kind == K_B0_8 || kind == K_B0_16) return b->len == 0 || b->len == max;
    return kind == K_PAYLOAD || b->len == max;
}

static void store_uint(uint8_t *dst, unsigned size, uint64_t v) {
    uint32_t v32 = (uint32_t)v;
    uint16_t v16 = (uint16_t)v;
    uint8_t v8 = (uint8_t)v;
    memcpy(dst, size == 8 ? (const void *)&v : size == 4 ? (const void *)&v32
                : size == 2 ? (const void *)&v16 : (const void *)&v8, size);
}

static uint64_t load_uint(const uint8_t *src, unsigned size) {
    uint64_t v64;
    uint32_t v32;
    uint16_t v16;
    switch (size) {
    case 8: memcpy(&v64, src, 8); return v64;
    case 4: memcpy(&v32, src, 4); return v32;
    case 2: memcpy(&v16, src, 2); return v16;
    default: return *src;
    }
}

hm_error_code hm_msg_decode(const uint8_t *body, size_t len, int inner, hm_msg *m) {
    hm_cbor_r r;
    uint64_t n = 0, v[3] = {0, 0, 0}, ack = 0; /* set on every path LTO cannot see */
    int neg[3] = {1, 1, 1}, k = 0;
    m->type = 0;
    m->seq = m->ack = 0;
    if (hm_cbor_check(body, len)) return HM_E_MALFORMED;                 /* step 1 */
    hm_cbor_r_init(&r, body, len);
    if (hm_cbor_get_array(&r, &n) || n < 4) return HM_E_MALFORMED;     /* step 2 */
    while (k < 3 && hm_cbor_peek(&r) >= 0 && hm_cbor_peek(&r) <= 1) { /* integers */
        (void)hm_cbor_get_int(&r, &neg[k], &v[k]);
        k++;
    }
    if (k == 3 && !neg[2] && v[2] <= U32_MAX) m->seq = (uint32_t)v[2]; /* ERROR ref */
    if (neg[0] || v[0] != HM_VERSION) return HM_E_UNKNOWN_VERSION;     /* step 3 */
    if (neg[1] || v[1] < 1 || v[1] > HM_MSG_PROOF || v[1] == HM_MSG_FRAGMENT) /* step 4 */
        return HM_E_UNKNOWN_TYPE;
    unsigned t = (unsigned)v[1];
    /* EVA keeps one state per type: each field offset below is then a constant */
    //@ split t;
    m->type = (uint8_t)t;
    if (neg[2] || v[2] > U32_MAX || hm_cbor_get_uint(&r, U32_MAX, &ack)) /* step 5 */
        return HM_E_MALFORMED;
    m->ack = (uint32_t)ack;
    if (inner) {                                                        /* step 6 */
        if (m->seq || m->ack) return HM_E_REASSEMBLY;
    } else if (hm_msg_unsequenced(t) != (m->seq == 0)) {
        return HM_E_MALFORMED;
    }
    if (n - 4 != (uint64_t)(first[t] - first[t - 1])) return HM_E_MALFORMED; /* step 7 */
    uint8_t *base = (uint8_t *)&m->u;
    for (unsigned i = first[t - 1]; i < first[t]; i++) {                /* step 8 */
        unsigned kind = fields[i].kind;
        uint8_t *dst = base + fields[i].off;
        if (kind < K_BSTR) {
            uint64_t x = 0;
            if (hm_cbor_get_uint(&r, UINT64_MAX, &x) || !int_ok(kind, x)) return HM_E_MALFORMED;
            store_uint(dst, int_size[kind], x);
        } else {
            hm_bytes b;
            if ((kind == K_TSTR ? hm_cbor_get_tstr(&r, SIZE_MAX, &b.ptr, &b.len)
                                : hm_cbor_get_bstr(&r, 0, SIZE_MAX, &b.ptr, &b.len)) ||
                !str_ok(kind, &b))
                return HM_E_MALFORMED;
            memcpy(dst, &b, sizeof b);
        }
    }
    return HM_OK;
}

hm_error_code hm_msg_encode(const hm_msg *m, int inner, uint8_t *out, size_t cap,
                            size_t *len) {
    hm_cbor_w w;
    unsigned t = m->type;
    if (t < 1 || t > HM_MSG_PROOF || t == HM_MSG_FRAGMENT) return HM_E_MALFORMED;
    if (inner ? (m->seq || m->ack)
              : hm_msg_unsequenced(t) != (m->seq == 0))
        return HM_E_MALFORMED;
    hm_cbor_w_init(&w, out, cap);
    hm_cbor_put_array(&w, 4u + (unsigned)(first[t] - first[t - 1]));
    hm_cbor_put_uint(&w, HM_VERSION);
    hm_cbor_put_uint(&w, t);
    hm_cbor_put_uint(&w, m->seq);
    hm_cbor_put_uint(&w, m->ack);
    const uint8_t *base = (const uint8_t *)&m->u;
    for (unsigned i = first[t - 1]; i < first[t]; i++) {
        unsigned kind = fields[i].kind;
        const uint8_t *src = base + fields[i].off;
        if (kind < K_BSTR) {
            uint64_t x = load_uint(src, int_size[kind]);
            if (!int_ok(kind, x)) return HM_E_MALFORMED;
            hm_cbor_put_uint(&w, x);
        } else {
            hm_bytes b;
            memcpy(&b, src, sizeof b);
            if ((b.ptr == NULL && b.len) || !str_ok(kind, &b)) return HM_E_MALFORMED;
            if (kind == K_TSTR) hm_cbor_put_tstr(&w, b.ptr, b.len);
            else hm_cbor_put_bstr(&w, b.ptr, b.len);
        }
    }
    if (w.err) return HM_E_TOO_LARGE;
    *len = w.len;
    return HM_OK;
}
