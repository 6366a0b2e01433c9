/* Frame pieces (SPEC §6.8): a body longer than one frame, cut below the session.
 * They replaced the FRAGMENT message (type 14, retired: §5.14), which has no codec here. */
#ifndef HM_FRAG_H
#define HM_FRAG_H

#include <stddef.h>
#include <stdint.h>

#include "hm_config.h"
#include "hm_msg.h"

/* Host: hirmem/protocol/pieces.py; MicroPython: hirmem_mp/frag.py.
 * A body longer than max_frame - 4 is cut below the session: the stream
 * body || CRC-32(body) (4 bytes LE, the body check) travels in pieces, one per frame:
 * the first is f0 then bytes, continuation k (1, 2, ...) is e0 | last << 3 | (k mod 8)
 * then bytes, `last` on the piece that ends the stream; every frame but the last is
 * full. The message keeps its own seq and ack; the receiver joins one body at a time,
 * bounded by its limit, checks the body check and counts every dropped frame by kind. */
#define HM_PIECE_FIRST 0xF0u
#define HM_PIECE_CONTINUATION 0xE0u
#define HM_PIECE_LAST 0x08u
#define HM_PIECE_CHECK 4u

typedef enum {
    HM_JOIN_TOO_LARGE, /* the body passes the limit */
    HM_JOIN_ORPHAN,    /* continuation with nothing in progress */
    HM_JOIN_GAP,       /* continuation out of number (a lost frame) */
    HM_JOIN_EMPTY,     /* piece without bytes */
    HM_JOIN_BAD_HEAD,  /* head f1..ff */
    HM_JOIN_BAD_CHECK, /* the joined body does not match its check (or is shorter) */
    HM_JOIN_RESTART,   /* first piece while busy: partial dropped, new body started */
    HM_JOIN_DUPLICATE, /* the previous continuation's number again: ignored */
    HM_JOIN_KINDS
} hm_join_kind;

/* Frames that carry a body of len bytes at max_frame: 1 if it fits one, 0 if it
 * cannot be cut (max_frame < 6). */
size_t hm_piece_count(size_t len, size_t max_frame);

/* Frame body number `index` of body[0..len) into out[0..cap): the body itself if it
 * fits. MALFORMED if index >= hm_piece_count(), TOO_LARGE if cap is too small. */
hm_error_code hm_piece_encode(const uint8_t *body, size_t len, size_t max_frame,
                              size_t index, uint8_t *out, size_t cap, size_t *out_len);

/* A frame body that is a piece rather than a message (first byte e0..ff). */
#define HM_PIECE_IS(body, n) ((n) > 0 && (body)[0] >= HM_PIECE_CONTINUATION)

/* The seq in the envelope at the start of a (possibly incomplete) body, for the ERROR
 * too-large that refuses it: at least 8 bytes, an array head 84..97, version 01, a
 * type 01..17, then the seq's head: 00..17 itself, 18 / 19 / 1a followed by 1, 2 or 4
 * bytes big-endian. 0 if the bytes are not of that form. */
uint32_t hm_body_seq(const uint8_t *b, size_t n);

typedef struct {
    uint32_t limit;  /* max_message announced to the peer, <= HM_MAX_MESSAGE */
    uint32_t have;   /* stream bytes joined so far (body, then its check) */
    uint32_t next;   /* number of the next continuation, 0 when idle */
    uint32_t seq;    /* hm_body_seq of the last first piece: names a refused body */
    uint32_t joined; /* bodies completed */
    uint32_t refused[HM_JOIN_KINDS];
    uint8_t buf[HM_MAX_MESSAGE + HM_PIECE_CHECK]; /* last: the fields above are short */
} hm_join;

/* Start idle with no counts; 0, or -1 if limit > HM_MAX_MESSAGE. */
int hm_join_init(hm_join *j, uint32_t limit);

/* Drop a body in progress (session lost); the counts stay. */
void hm_join_reset(hm_join *j);

/* Take one piece (HM_PIECE_IS). HM_OK with *out_len 0 while more is due, else the
 * joined body's length (its bytes at j->buf, valid until the next take). Refusals
 * count refused[kind] and return HM_E_TOO_LARGE (too-large: j->seq names the body) or
 * HM_E_REASSEMBLY; the joiner is idle after each. A restart and a duplicate are
 * counted, not refused. */
hm_error_code hm_join_take(hm_join *j, const uint8_t *body, size_t n, size_t *out_len);

#endif
