#include "hm_frag.h"

#include <stddef.h>
#include <string.h>

#include "hm_crc32.h"
#include "hm_frame.h"

size_t hm_piece_count(size_t len, size_t max_frame) {
    size_t room = max_frame - HM_FRAME_CRC_SIZE;
    if (max_frame < HM_FRAME_CRC_SIZE + 2) return 0;
    if (len <= room) return 1;
    /* the stream (body and check) in pieces of room - 1 bytes */
    return (len + HM_PIECE_CHECK + room - 2) / (room - 1);
}

hm_error_code hm_piece_encode(const uint8_t *body, size_t len, size_t max_frame,
                              size_t index, uint8_t *out, size_t cap, size_t *out_len) {
    size_t count = hm_piece_count(len, max_frame), step = max_frame - HM_FRAME_CRC_SIZE - 1;
    size_t at, end, k;
    uint8_t check[HM_PIECE_CHECK];
    uint32_t crc;
    if (index >= count) return HM_E_MALFORMED;
    if (count == 1) {
        if (cap < len) return HM_E_TOO_LARGE;
        memcpy(out, body, len);
        *out_len = len;
        return HM_OK;
    }
    at = index * step;
    end = at + step < len + HM_PIECE_CHECK ? at + step : len + HM_PIECE_CHECK;
    if (cap < 1 + end - at) return HM_E_TOO_LARGE;
    out[0] = (uint8_t)(index == 0 ? HM_PIECE_FIRST
                                  : HM_PIECE_CONTINUATION | (index & 0x07u) |
                                        (index + 1 == count ? HM_PIECE_LAST : 0));
    if (end > len) { /* the piece holds some of the check: only then is it computed */
        crc = hm_crc32(0, body, len);
        for (k = 0; k < HM_PIECE_CHECK; k++) check[k] = (uint8_t)(crc >> (8 * k));
    }
    for (k = at; k < end; k++) out[1 + k - at] = k < len ? body[k] : check[k - len];
    *out_len = 1 + end - at;
    return HM_OK;
}

/* ACSL contracts (tools/verify_c.py, eva_join): WP proves that the joiner keeps
 * have <= limit + 4 <= the size of buf across any run of pieces, so its copy and its
 * check stay inside buf. */
/*@ predicate hm_join_bounded(hm_join *j) =
      j->limit <= HM_MAX_MESSAGE && j->have <= j->limit + HM_PIECE_CHECK; */

/*@ requires \valid_read(b + (0 .. n - 1));
    assigns \nothing; */
uint32_t hm_body_seq(const uint8_t *b, size_t n) {
    uint32_t v;
    unsigned k, w;
    if (n < 8 || b[0] - 0x84u > 0x13u || b[1] != 1 || b[2] - 1u > 22u || (v = b[3]) > 26u)
        return 0;
    if (v >= 24u) {
        w = 1u << (v - 24u);
        /*@ loop invariant k <= w && w <= 4;
            loop assigns k, v; */
        for (v = 0, k = 0; k < w; k++) v = v << 8 | b[4 + k];
    }
    return v;
}

int hm_join_init(hm_join *j, uint32_t limit) {
    if (limit > HM_MAX_MESSAGE) return -1;
    memset(j, 0, offsetof(hm_join, buf));
    j->limit = limit;
    return 0;
}

/*@ requires \valid(j);
    assigns j->next, j->have;
    ensures j->next == 0 && j->have == 0; */
void hm_join_reset(hm_join *j) { j->next = j->have = 0; }

/*@ requires \valid(j) && kind < HM_JOIN_KINDS;
    assigns j->refused[kind], j->next, j->have;
    ensures j->next == 0 && j->have == 0; */
static hm_error_code join_refuse(hm_join *j, hm_join_kind kind) {
    j->refused[kind]++;
    hm_join_reset(j);
    return kind == HM_JOIN_TOO_LARGE ? HM_E_TOO_LARGE : HM_E_REASSEMBLY;
}

/*@ requires \valid(j);
    requires hm_join_bounded(j);
    requires n >= 1 && \valid_read(body + (0 .. n - 1));
    requires \valid(out_len) && \separated(j, out_len, body + (0 .. n - 1));
    assigns *j, *out_len;
    ensures hm_join_bounded(j);
    ensures j->limit == \old(j->limit); */
hm_error_code hm_join_take(hm_join *j, const uint8_t *body, size_t n, size_t *out_len) {
    unsigned head = body[0];
    uint32_t crc;
    size_t k;
    *out_len = 0;
    if (head > HM_PIECE_FIRST) return join_refuse(j, HM_JOIN_BAD_HEAD);
    if (head == HM_PIECE_FIRST) {
        if (j->next) {
            j->refused[HM_JOIN_RESTART]++;
            hm_join_reset(j);
        }
        j->seq = hm_body_seq(body + 1, n - 1);
        if (n < 2) return join_refuse(j, HM_JOIN_EMPTY);
    } else {
        if (!j->next) return join_refuse(j, HM_JOIN_ORPHAN);
        if (j->next >= 2 && (head & 0x07u) == ((j->next - 1) & 0x07u)) {
            j->refused[HM_JOIN_DUPLICATE]++; /* a line that repeated a frame */
            return HM_OK;
        }
        if ((head & 0x07u) != (j->next & 0x07u)) return join_refuse(j, HM_JOIN_GAP);
        if (n < 2) return join_refuse(j, HM_JOIN_EMPTY);
    }
    /* have <= limit + 4 = the bound of buf: the copy stays inside it */
#ifdef HM_PLANT_JOIN /* planted bug for tools/verify_c.py (WP must not prove the copy) */
    if (n - 1 > j->limit + HM_PIECE_CHECK + 1 - j->have) return join_refuse(j, HM_JOIN_TOO_LARGE);
#else
    if (n - 1 > j->limit + HM_PIECE_CHECK - j->have) return join_refuse(j, HM_JOIN_TOO_LARGE);
#endif
    memcpy(j->buf + j->have, body + 1, n - 1);
    j->have += (uint32_t)(n - 1);
    j->next++;
    if (head == HM_PIECE_FIRST || !(head & HM_PIECE_LAST)) return HM_OK;
    if (j->have < HM_PIECE_CHECK) return join_refuse(j, HM_JOIN_BAD_CHECK);
    k = j->have - HM_PIECE_CHECK;
    crc = hm_crc32(0, j->buf, k);
    if ((j->buf[k] | (uint32_t)j->buf[k + 1] << 8 | (uint32_t)j->buf[k + 2] << 16 |
         (uint32_t)j->buf[k + 3] << 24) != crc)
        return join_refuse(j, HM_JOIN_BAD_CHECK);
    *out_len = k;
    j->joined++;
    hm_join_reset(j);
    return HM_OK;
}
