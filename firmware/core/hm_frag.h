/* Fragmentation (SPEC §6.8): an inner body carried in FRAGMENT messages.
 *
 * Sender: the inner body (a message encoded with seq 0, ack 0, never a FRAGMENT) is
 * cut into chunks of hm_frag_chunk_size(max_frame) = max_frame - 35 bytes (the last
 * one shorter), the host's rule (hirmem/protocol/fragments.py): 4 bytes of CRC plus 31, the
 * largest FRAGMENT envelope, so every fragment fits max_frame whatever its seq, ack
 * and offset. Fragment i has seq first_seq + i, msg_id first_seq, offset
 * i * chunk_size and total = the inner length. Fragments are produced one at a time
 * (a device keeps them in its retransmission window, not all at once).
 *
 * Receiver (hm_reasm): one reassembly at a time into a fixed buffer of HM_MAX_MESSAGE
 * bytes, limited to the announced max_message. Invariants:
 *  - Only bytes inside buf[0..total) with total <= limit <= HM_MAX_MESSAGE are written.
 *  - offset 0 while busy: REASSEMBLY, idle after. offset 0 with total > limit:
 *    TOO_LARGE, stays idle. offset != 0 that does not continue (msg_id, total,
 *    bytes so far) of the reassembly in progress, or arrives idle: REASSEMBLY, idle.
 *    An empty chunk or one overrunning total: REASSEMBLY, idle.
 *  - Completion returns the inner body (buf, total bytes), valid until the next
 *    add or reset; the receiver is then idle. The caller decodes it with
 *    hm_msg_decode(..., inner = 1).
 *  These are the results of fragments.Reassembler.add for the same sequence.
 */
#ifndef HM_FRAG_H
#define HM_FRAG_H

#include <stddef.h>
#include <stdint.h>

#include "hm_config.h"
#include "hm_msg.h"

#define HM_FRAG_OVERHEAD 35 /* CRC + the largest FRAGMENT envelope around a chunk */

/* Chunk bytes per fragment at max_frame; 0 if max_frame <= HM_FRAG_OVERHEAD. */
size_t hm_frag_chunk_size(size_t max_frame);

/* Number of fragments for an inner body of len bytes (0 for len 0 or no room). */
size_t hm_frag_count(size_t len, size_t max_frame);

/* Encode fragment `index` of inner[0..len) as a FRAGMENT body into out[0..cap).
 * MALFORMED if index >= hm_frag_count(), seq first_seq + index is 0 or above 2^32 - 1,
 * or len above 2^32 - 1; TOO_LARGE if cap is too small. */
hm_error_code hm_frag_encode(const uint8_t *inner, size_t len, size_t max_frame,
                             size_t index, uint32_t first_seq, uint32_t ack, uint8_t *out,
                             size_t cap, size_t *out_len);

typedef struct {
    uint32_t limit;  /* max_message announced to the peer, <= HM_MAX_MESSAGE */
    uint32_t msg_id; /* of the reassembly in progress */
    uint32_t total;
    uint32_t have;   /* bytes received so far */
    uint8_t busy;    /* a reassembly is in progress */
    uint8_t buf[HM_MAX_MESSAGE]; /* last: the fields above are short offsets */
} hm_reasm;

/* Start idle with limit <= HM_MAX_MESSAGE; returns 0, or -1 if limit is larger. */
int hm_reasm_init(hm_reasm *ra, uint32_t limit);

/* Drop any reassembly in progress (session lost, SPEC §6.6). */
void hm_reasm_reset(hm_reasm *ra);

/* Take one delivered FRAGMENT. Returns HM_OK, HM_E_TOO_LARGE or HM_E_REASSEMBLY.
 * On HM_OK *inner_len is 0 while more is due, else the completed inner body's length
 * (its bytes at ra->buf). */
hm_error_code hm_reasm_add(hm_reasm *ra, const hm_msg_fragment *f, size_t *inner_len);

/* ---- Frame pieces (SPEC §6.8; hirmem/protocol/pieces.py, hirmem_mp/frag.py) -------
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
