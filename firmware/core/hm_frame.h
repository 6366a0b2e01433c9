/* Frames (SPEC §2): COBS( body || CRC-32(body) LE ) || 00.
 *
 * The *decoded frame* is body || CRC: 5 .. max_frame bytes. max_frame is the agreed
 * value of the link (128 .. HM_MAX_FRAME); the receiver buffer holds HM_MAX_FRAME
 * decoded bytes and nothing else (COBS is undone as bytes arrive).
 *
 * Encoder invariants:
 *  - hm_cobs_encode() produces standard COBS exactly as SPEC §2.3: no 00 byte in the
 *    output, and no empty 01 block after a final full (ff) block. The output holds at
 *    most HM_COBS_BOUND(len) bytes; nothing is written beyond cap.
 *  - hm_frame_encode() writes COBS(body || CRC LE) and the 00 delimiter, at most
 *    HM_FRAME_WIRE_BOUND(max_frame) bytes for a body that fits max_frame.
 *
 * Receiver invariants (SPEC §2.4, §2.6), whatever the input:
 *  - Never reads or writes outside the state struct; every byte is consumed.
 *  - A frame is the bytes between two 00; checks in SPEC order, the first failure
 *    decides: encoded length > max_frame + ceil(max_frame/254) -> TOO_LONG (reported
 *    once, at the next 00, the bytes in between are ignored); COBS -> BAD_COBS;
 *    decoded < 5 -> TOO_SHORT; decoded > max_frame -> TOO_LONG; CRC -> BAD_CRC.
 *  - 00 with nothing before it (since the last 00 or the start) is an empty frame:
 *    counted in `empty`, no event.
 *  - After every event the receiver is ready for the next frame (resynchronised).
 *  - Counters only grow (uint32, wrapping); frames_bad = too_short + too_long +
 *    bad_cobs + bad_crc.
 */
#ifndef HM_FRAME_H
#define HM_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "hm_config.h"

#define HM_FRAME_CRC_SIZE 4
#define HM_FRAME_MIN 5          /* smallest decoded frame: one body byte + CRC */
#define HM_FRAME_FLOOR 128      /* smallest max_frame of the protocol */

/* Upper bound of the COBS encoding of n bytes: one code byte per started 254. */
#define HM_COBS_BOUND(n) ((n) + (n) / 254u + 1u)
/* Largest encoded frame for max_frame, delimiter excluded (receiver check 1). */
#define HM_FRAME_ENC_LIMIT(mf) ((mf) + ((mf) + 253u) / 254u)
/* Largest frame on the wire for max_frame, delimiter included. */
#define HM_FRAME_WIRE_BOUND(mf) (HM_FRAME_ENC_LIMIT(mf) + 1u)

typedef enum {
    HM_FRAME_NONE = 0,  /* byte taken, nothing to report (also: empty frame skipped) */
    HM_FRAME_OK,        /* a good frame: hm_frame_rx_body() until the next push */
    HM_FRAME_TOO_SHORT,
    HM_FRAME_TOO_LONG,
    HM_FRAME_BAD_COBS,
    HM_FRAME_BAD_CRC
} hm_frame_ev;

/* "ok", "too-short", "too-long", "bad-cobs", "bad-crc" ("none" for NONE): the
 * error kinds of SPEC §2.4 as frames.json names them. */
const char *hm_frame_ev_name(hm_frame_ev ev);

/* COBS-encode len bytes into out[0..cap); returns the encoded length (>= 1), or 0 if
 * cap is too small. No delimiter is appended. in and out must not overlap. */
size_t hm_cobs_encode(const uint8_t *in, size_t len, uint8_t *out, size_t cap);

/* Decode a COBS block sequence without delimiter (SPEC §2.3 decoder). Returns
 * HM_FRAME_OK and *out_len, HM_FRAME_BAD_COBS (a 00 byte, a block overrunning the
 * input) or HM_FRAME_TOO_LONG (more than cap decoded bytes; cap >= len always
 * suffices). out receives at most cap bytes. */
hm_frame_ev hm_cobs_decode(const uint8_t *in, size_t len, uint8_t *out, size_t cap,
                           size_t *out_len);

/* Frame a body: writes COBS(body || CRC LE) || 00 into out[0..cap) and returns its
 * length; 0 if the body is empty, body + CRC exceeds max_frame, or cap is too small. */
size_t hm_frame_encode(const uint8_t *body, size_t len, size_t max_frame, uint8_t *out,
                       size_t cap);

typedef struct {
    size_t max_frame;          /* 128 .. HM_MAX_FRAME */
    size_t enc;                /* encoded bytes of the current frame so far */
    size_t dec;                /* decoded bytes so far (only the first HM_MAX_FRAME kept) */
    size_t body;               /* body length of the last HM_FRAME_OK frame */
    uint8_t code;              /* code byte of the current COBS block, 0 before the first */
    uint8_t left;              /* data bytes still due in the current block */
    uint8_t skip;              /* 1: over the limit, ignoring bytes up to the next 00 */
    uint32_t frames;           /* good frames */
    uint32_t empty;            /* empty frames skipped */
    uint32_t too_short, too_long, bad_cobs, bad_crc;
    /* last: the fields above are short offsets from the struct (smaller code) */
    uint8_t buf[HM_MAX_FRAME]; /* decoded bytes of the current frame (body || CRC) */
} hm_frame_rx;

/* Start a receiver with max_frame in 128 .. HM_MAX_FRAME; returns 0, or -1 (and does
 * nothing) if max_frame is out of range. All counters start at 0. */
int hm_frame_rx_init(hm_frame_rx *rx, size_t max_frame);

/* Change max_frame (after the handshake); same range and result as init. Takes
 * effect for the frame being collected. Counters are kept. */
int hm_frame_rx_set_max(hm_frame_rx *rx, size_t max_frame);

/* Feed one byte; returns the event it completes (HM_FRAME_NONE most of the time). */
hm_frame_ev hm_frame_rx_push(hm_frame_rx *rx, uint8_t byte);

/* The body of the frame just reported as HM_FRAME_OK (valid until the next push). */
const uint8_t *hm_frame_rx_body(const hm_frame_rx *rx, size_t *len);

/* frames_bad of STATUS: the four error counters together. */
uint32_t hm_frame_rx_bad(const hm_frame_rx *rx);

#endif
