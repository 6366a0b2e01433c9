/* Link messages (SPEC §4, §5): [version, type, seq, ack, fields...] <-> hm_msg.
 *
 * One tagged struct: `type` selects the member of the union `u` (HELLO -> u.hello, ...;
 * STATUS_REQUEST and ACK have no fields). Byte and text strings are hm_bytes views:
 * after decoding they point into the body that was decoded (no copies), so the body
 * must outlive the struct; text is UTF-8 bytes, not NUL-terminated.
 *
 * Bounds are those of the host reference (host/hirmem/protocol/messages.py) and the CDDL:
 * u16/u32/uint by their C type; q16 <= 0x10000; capture status <= 2, verdict <= 2,
 * hard <= 15, state <= 4, pack status <= 3, reason <= 11, log level <= 3,
 * error code 1..8; device_id/host_id/kids 8 bytes (host_kid 0 or 8), record_id 16 or 0,
 * pack_id 16, hashes and context 32; payload <= 256; texts <= 240 bytes of UTF-8;
 * pack and chunk unbounded here (SPEC §5.6: not the message layer's business).
 *
 * Decoding (hm_msg_decode) follows SPEC §4.3 in order, as decode_message does:
 *  1 the body is one deterministic CBOR item (hm_cbor_check)   -> MALFORMED
 *  2 an array of >= 4 elements                                 -> MALFORMED
 *  3 element 0 is the unsigned integer 1                       -> UNKNOWN_VERSION
 *  4 element 1 is an unsigned integer 1..15 but 14 (FRAGMENT,
 *    retired: SPEC §5.14)                                      -> UNKNOWN_TYPE
 *  5 seq and ack are unsigned integers <= 2^32 - 1             -> MALFORMED
 *  6 seq 0 exactly for ACK, LOG, ERROR                         -> MALFORMED
 *    (inner: seq 0 and ack 0                                   -> REASSEMBLY)
 *  7 exactly the type's field count                            -> MALFORMED
 *  8 every field of its kind and bounds                        -> MALFORMED
 * All 14 other types are accepted; refusing a type from the wrong direction or without its
 * capability (also UNKNOWN_TYPE in §5.1) is the caller's decision.
 * On failure `type` is the type code if step 4 passed (else 0) and `seq` is the ERROR
 * ref of SPEC §4.3: element 2 if elements 0..2 are integers and element 2 is an
 * unsigned integer <= 2^32 - 1 in an array of >= 4 elements, else 0. Other members
 * are unspecified.
 *
 * Encoding (hm_msg_encode) checks the same rules (inner: seq 0, ack 0; never type 14),
 * so a struct that encodes decodes to itself and the body re-encodes to the same bytes.
 */
#ifndef HM_MSG_H
#define HM_MSG_H

#include <stddef.h>
#include <stdint.h>

#define HM_VERSION 1

typedef enum {
    HM_MSG_HELLO = 1,
    HM_MSG_HELLO_ACK = 2,
    HM_MSG_CAPTURE = 3,
    HM_MSG_CAPTURE_RESULT = 4,
    HM_MSG_PACK_OFFER = 5,
    HM_MSG_PACK_RESULT = 6,
    HM_MSG_KNOWLEDGE_PUSH = 7,
    HM_MSG_KNOWLEDGE_RESULT = 8,
    HM_MSG_STATUS_REQUEST = 9,
    HM_MSG_STATUS = 10,
    HM_MSG_LOG = 11,
    HM_MSG_ERROR = 12,
    HM_MSG_ACK = 13,
    HM_MSG_FRAGMENT = 14, /* retired (SPEC §5.14): no body, decoded as an unknown type */
    HM_MSG_PROOF = 15
} hm_msg_type;

/* ERROR codes of SPEC §5.12 (0: no error). */
typedef enum {
    HM_OK = 0,
    HM_E_UNKNOWN_VERSION = 1,
    HM_E_UNKNOWN_TYPE = 2,
    HM_E_MALFORMED = 3,
    HM_E_TOO_LARGE = 4, /* also: hm_msg_encode's output buffer is too small */
    HM_E_NO_SESSION = 5,
    HM_E_REASSEMBLY = 6,
    HM_E_BUSY = 7,
    HM_E_INTERNAL = 8
} hm_error_code;

/* "ok", "unknown-version", "unknown-type", "malformed", "too-large", "no-session",
 * "reassembly", "busy", "internal". */
const char *hm_error_name(hm_error_code code);

typedef struct {
    const uint8_t *ptr;
    size_t len;
} hm_bytes;

typedef struct {
    hm_bytes device_id; /* 8 */
    hm_bytes board;     /* text <= 240 */
    hm_bytes firmware;  /* text <= 240 */
    uint32_t boot;
    uint64_t capabilities;
    uint16_t max_frame;
    uint32_t max_message;
    uint16_t window;
    hm_bytes device_kid; /* 8 */
    hm_bytes host_kid;   /* 0 or 8 */
    uint16_t knowledge_facts; /* facts kept from one knowledge pack; 0: not stated */
    uint16_t knowledge_text;  /* longest fact text kept, in bytes; 0: not stated */
} hm_msg_hello;

/* HELLO_ACK's hello_hash: the first 16 bytes of SHA-256 of the HELLO body (SPEC §12) */
#define HM_HELLO_ECHO_SIZE 16

typedef struct {
    hm_bytes host_id; /* 8 */
    uint16_t max_frame;
    uint32_t max_message;
    uint16_t window;
    uint64_t time_ms;
    uint64_t pack_seq;
    hm_bytes pack_hash; /* 32 */
    hm_bytes challenge; /* 16: what the device's PROOF signs (SPEC §6.5) */
    hm_bytes hello_hash; /* 16: SHA-256 of the HELLO it answers, truncated (SPEC §5.3) */
} hm_msg_hello_ack;

typedef struct {
    hm_bytes source;  /* text <= 240 */
    hm_bytes payload; /* <= 256 */
    hm_bytes context; /* 32 */
    uint16_t flags;
    uint32_t confidence, provenance, priority; /* q16 */
} hm_msg_capture;

typedef struct {
    uint32_t ref;
    uint8_t status;     /* 0..2 */
    hm_bytes record_id; /* 16 or 0 */
    uint16_t flags;
    uint32_t h, i, r, f, c, rn, w; /* q16 */
    uint8_t verdict;               /* 0..2 */
    uint8_t hard;                  /* 0..15 */
    uint8_t state;                 /* 0..4 */
} hm_msg_capture_result;

typedef struct {
    hm_bytes pack; /* PACK_OFFER and KNOWLEDGE_PUSH */
} hm_msg_pack;

typedef struct {
    uint32_t back;  /* the PACK_OFFER answered has seq ack - back */
    uint8_t status; /* 0..3 */
    uint8_t reason; /* 0..11 */
} hm_msg_pack_result;

typedef struct {
    hm_bytes pack_id; /* 16 */
    uint8_t status;   /* 0..3 */
    uint8_t reason;   /* 0..11 */
    uint64_t held_seq;
} hm_msg_knowledge_result;

typedef struct {
    uint64_t uptime_ms, ring_used, ring_capacity, captures, evictions, refusals,
        quarantined, candidates, packs_sent, packs_acked, frames_good, frames_bad,
        retransmits, knowledge_seq;
} hm_msg_status;

typedef struct {
    uint8_t level; /* 0..3 */
    hm_bytes text; /* <= 240 */
} hm_msg_log;

typedef struct {
    uint8_t code; /* 1..8 */
    uint32_t ref;
    hm_bytes detail; /* <= 240 */
} hm_msg_error;

typedef struct {
    hm_bytes signature; /* 64: Ed25519, SPEC §5.15 */
} hm_msg_proof;

typedef struct {
    uint8_t type; /* hm_msg_type */
    uint32_t seq;
    uint32_t ack;
    union {
        hm_msg_hello hello;
        hm_msg_hello_ack hello_ack;
        hm_msg_capture capture;
        hm_msg_capture_result capture_result;
        hm_msg_pack pack_offer;
        hm_msg_pack_result pack_result;
        hm_msg_pack knowledge_push;
        hm_msg_knowledge_result knowledge_result;
        hm_msg_status status;
        hm_msg_log log;
        hm_msg_error error;
        hm_msg_proof proof;
    } u;
} hm_msg;

/* 1 for ACK, LOG and ERROR (seq 0), 0 for the other types. */
int hm_msg_unsequenced(unsigned type);

/* Decode body[0..len); inner = 1 for a reassembled body (SPEC §6.8 step 4). */
hm_error_code hm_msg_decode(const uint8_t *body, size_t len, int inner, hm_msg *m);

/* Encode m into out[0..cap); *len = bytes written. MALFORMED for a field, seq or type
 * outside its bounds, TOO_LARGE if cap is too small; nothing useful is in out then. */
hm_error_code hm_msg_encode(const hm_msg *m, int inner, uint8_t *out, size_t cap,
                            size_t *len);

#endif
