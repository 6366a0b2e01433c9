#include "hm_frag.h"

#include <stddef.h>
#include <string.h>

#include "hm_frame.h"

size_t hm_frag_chunk_size(size_t max_frame) {
    return max_frame > HM_FRAG_OVERHEAD ? max_frame - HM_FRAG_OVERHEAD : 0;
}

size_t hm_frag_count(size_t len, size_t max_frame) {
    size_t step = hm_frag_chunk_size(max_frame);
    return step ? len / step + (len % step != 0) : 0;
}

hm_error_code hm_frag_encode(const uint8_t *inner, size_t len, size_t max_frame,
                             size_t index, uint32_t first_seq, uint32_t ack, uint8_t *out,
                             size_t cap, size_t *out_len) {
    size_t step = hm_frag_chunk_size(max_frame);
    hm_msg m;
    if (index >= hm_frag_count(len, max_frame) || (len >> 16 >> 16) != 0 ||
        index > 0xFFFFFFFFu - (size_t)first_seq)
        return HM_E_MALFORMED;
    size_t offset = index * step;
    memset(&m, 0, sizeof m);
    m.type = HM_MSG_FRAGMENT;
    m.seq = (uint32_t)(first_seq + index);
    m.ack = ack;
    m.u.fragment.msg_id = first_seq;
    m.u.fragment.offset = (uint32_t)offset;
    m.u.fragment.total = (uint32_t)len;
    m.u.fragment.chunk.ptr = inner + offset;
    m.u.fragment.chunk.len = len - offset < step ? len - offset : step;
    return hm_msg_encode(&m, 0, out, cap, out_len); /* seq 0 is refused there */
}

int hm_reasm_init(hm_reasm *ra, uint32_t limit) {
    if (limit > HM_MAX_MESSAGE) return -1;
    ra->limit = limit;
    hm_reasm_reset(ra);
    return 0;
}

void hm_reasm_reset(hm_reasm *ra) {
    ra->msg_id = ra->total = ra->have = 0;
    ra->busy = 0;
}

static hm_error_code refuse(hm_reasm *ra) {
    hm_reasm_reset(ra);
    return HM_E_REASSEMBLY;
}

hm_error_code hm_reasm_add(hm_reasm *ra, const hm_msg_fragment *f, size_t *inner_len) {
    *inner_len = 0;
    if (f->offset == 0) {
        if (ra->busy) return refuse(ra);
        if (f->total > ra->limit) return HM_E_TOO_LARGE;
        ra->busy = 1;
        ra->msg_id = f->msg_id;
        ra->total = f->total;
        ra->have = 0;
    } else if (!ra->busy || f->msg_id != ra->msg_id || f->total != ra->total ||
               f->offset != ra->have) {
        return refuse(ra);
    }
    /* have <= total <= limit <= HM_MAX_MESSAGE, so the copy stays inside buf */
    if (f->chunk.len == 0 || f->chunk.len > ra->total - ra->have) return refuse(ra);
    memcpy(ra->buf + ra->have, f->chunk.ptr, f->chunk.len);
    ra->have += (uint32_t)f->chunk.len;
    if (ra->have < ra->total) return HM_OK;
    *inner_len = ra->total;
    hm_reasm_reset(ra);
    return HM_OK;
}

/* ---- Frame pieces --------------------------------------------------------------- */

size_t hm_piece_count(size_t len, size_t max_frame) {
    size_t room = max_frame - HM_FRAME_CRC_SIZE;
    if (max_frame <= 2 * HM_PIECE_FIRST_HEAD || (len >> 24) != 0) return 0;
    if (len <= room) return 1;
    len -= room - HM_PIECE_FIRST_HEAD;
    return 1 + (len + room - 2) / (room - 1);
}

hm_error_code hm_piece_encode(const uint8_t *body, size_t len, size_t max_frame,
                              size_t index, uint8_t *out, size_t cap, size_t *out_len) {
    size_t count = hm_piece_count(len, max_frame), room = max_frame - HM_FRAME_CRC_SIZE;
    size_t head = 0, at = 0, n;
    if (index >= count) return HM_E_MALFORMED;
    if (count > 1) {
        /* the first piece takes room - 4 bytes, each continuation room - 1 */
        if (index == 0) {
            head = HM_PIECE_FIRST_HEAD;
        } else {
            at = room - HM_PIECE_FIRST_HEAD + (index - 1) * (room - 1);
            head = 1;
        }
    }
    n = len - at < room - head ? len - at : room - head;
    if (cap < head + n) return HM_E_TOO_LARGE;
    if (head == HM_PIECE_FIRST_HEAD) {
        out[0] = (uint8_t)HM_PIECE_FIRST;
        out[1] = (uint8_t)(len >> 16);
        out[2] = (uint8_t)(len >> 8);
        out[3] = (uint8_t)len;
    } else if (head == 1) {
        out[0] = (uint8_t)(HM_PIECE_CONTINUATION | (index & 0x0Fu));
    }
    memcpy(out + head, body + at, n);
    *out_len = head + n;
    return HM_OK;
}

int hm_join_init(hm_join *j, uint32_t limit) {
    if (limit > HM_MAX_MESSAGE) return -1;
    memset(j, 0, offsetof(hm_join, buf));
    j->limit = limit;
    return 0;
}

uint32_t hm_piece_seq(const uint8_t *b, size_t n) {
    /* f0 t t t, then [1, type, seq, ...]: array head 84..97, 01, type 01..17, and the
     * seq's head (0..23 inline, 18 / 19 / 1a with 1, 2 or 4 bytes) at b[7] */
    uint32_t v;
    unsigned k, w;
    if (n < 12 || b[0] != HM_PIECE_FIRST || b[4] - 0x84u > 0x13u || b[5] != 1 ||
        b[6] - 1u > 22u || (v = b[7]) > 26u)
        return 0;
    if (v >= 24u) {
        w = 1u << (v - 24u);
        for (v = 0, k = 0; k < w; k++) v = v << 8 | b[8 + k];
    }
    return v;
}

void hm_join_reset(hm_join *j) { j->next = j->total = j->have = 0; }

static hm_error_code join_refuse(hm_join *j, hm_join_kind kind) {
    j->refused[kind]++;
    hm_join_reset(j);
    return kind == HM_JOIN_TOO_LARGE ? HM_E_TOO_LARGE : HM_E_REASSEMBLY;
}

hm_error_code hm_join_take(hm_join *j, const uint8_t *body, size_t n, size_t *out_len) {
    size_t head = 1;
    *out_len = 0;
    if (n == 0 || body[0] > HM_PIECE_FIRST) return join_refuse(j, HM_JOIN_BAD_HEAD);
    if (body[0] == HM_PIECE_FIRST) {
        uint32_t total;
        if (n < HM_PIECE_FIRST_HEAD) return join_refuse(j, HM_JOIN_BAD_HEAD);
        if (j->next) {
            j->refused[HM_JOIN_RESTART]++;
            j->next = 0;
        }
        total = (uint32_t)body[1] << 16 | (uint32_t)body[2] << 8 | body[3];
        head = HM_PIECE_FIRST_HEAD;
        if (total > j->limit) return join_refuse(j, HM_JOIN_TOO_LARGE);
        if (n == head) return join_refuse(j, HM_JOIN_EMPTY);
        if (n - head >= total) return join_refuse(j, HM_JOIN_OVERRUN);
        j->total = total;
        j->have = 0;
    } else {
        if (!j->next) return join_refuse(j, HM_JOIN_ORPHAN);
        if (j->next >= 2 && (body[0] & 0x0Fu) == ((j->next - 1) & 0x0Fu)) {
            j->refused[HM_JOIN_DUPLICATE]++; /* a line that repeated a frame */
            return HM_OK;
        }
        if ((body[0] & 0x0Fu) != (j->next & 0x0Fu)) return join_refuse(j, HM_JOIN_GAP);
        if (n == head) return join_refuse(j, HM_JOIN_EMPTY);
        /* have < total <= limit <= HM_MAX_MESSAGE: the copy stays inside buf */
        if (n - head > j->total - j->have) return join_refuse(j, HM_JOIN_OVERRUN);
    }
    memcpy(j->buf + j->have, body + head, n - head);
    j->have += (uint32_t)(n - head);
    j->next++;
    if (j->have < j->total) return HM_OK;
    *out_len = j->total;
    j->joined++;
    hm_join_reset(j);
    return HM_OK;
}
