#include "hm_frag.h"

#include <string.h>

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
