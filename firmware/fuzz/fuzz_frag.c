/* libFuzzer target: fragmentation (hm_frag), the reassembler and the sender.
 *
 * Input: one configuration byte (the reassembler's limit), then records, each led by
 * an op byte (op % 4):
 *   0  body:   u16 LE length, then that many bytes: a message body, decoded as an
 *              outer message; a FRAGMENT goes to the reassembler
 *   1  direct: a fragment built from the input: msg_id (u8), offset and total (u16),
 *              a chunk (u16 length & 0x7ff, then its bytes); op bit 4 takes the offset
 *              and bit 5 the msg_id and total of the reassembly in progress, so that
 *              the fuzzer reaches completions easily
 *   2  reset
 *   3  split:  max_frame (u16), first_seq (u32), ack (u32), then an inner body (u16
 *              length & 0xfff and its bytes), fragmented with hm_frag_encode() and
 *              reassembled by a second reassembler
 * Checks: every add is compared with a model of SPEC §6.8 written here (result,
 * completion, the bytes reassembled, busy/msg_id/total/have); a completed body is
 * decoded with inner = 1 and, if valid, re-encodes to itself. Split: every fragment
 * fits max_frame - 4 whatever seq, ack and offset, decodes as the FRAGMENT it should
 * be (seq first_seq + i, msg_id first_seq, offset i * chunk, total), and the fragments
 * reassemble to the inner body; refusals (index/seq out of range) are as documented.
 */
#include <string.h>

#include "fuzz_common.h"
#include "hm_frag.h"
#include "hm_msg.h"

/* ---- model of the reassembler (SPEC §6.8 receiver) --------------------------------- */

typedef struct {
    uint8_t buf[HM_MAX_MESSAGE];
    uint64_t limit, msg_id, total, have;
    int busy;
} model;

static void model_reset(model *md) {
    md->busy = 0;
    md->msg_id = md->total = md->have = 0;
}

static hm_error_code model_add(model *md, const hm_msg_fragment *f, size_t *done) {
    *done = 0;
    if (f->offset == 0) {
        if (md->busy) {
            model_reset(md);
            return HM_E_REASSEMBLY;
        }
        if (f->total > md->limit) return HM_E_TOO_LARGE;
        md->busy = 1;
        md->msg_id = f->msg_id;
        md->total = f->total;
        md->have = 0;
    } else if (!md->busy || f->msg_id != md->msg_id || f->total != md->total ||
               f->offset != md->have) {
        model_reset(md);
        return HM_E_REASSEMBLY;
    }
    if (f->chunk.len == 0 || (uint64_t)f->offset + f->chunk.len > md->total) {
        model_reset(md);
        return HM_E_REASSEMBLY;
    }
    memcpy(md->buf + md->have, f->chunk.ptr, f->chunk.len);
    md->have += f->chunk.len;
    if (md->have == md->total) {
        *done = (size_t)md->total;
        model_reset(md);
    }
    return HM_OK;
}

static void check_same(const hm_reasm *ra, const model *md) {
    FUZZ_CHECK(!!ra->busy == md->busy);
    FUZZ_CHECK(ra->limit == md->limit);
    if (md->busy) {
        FUZZ_CHECK(ra->msg_id == md->msg_id && ra->total == md->total && ra->have == md->have);
        FUZZ_CHECK(ra->have < ra->total && ra->total <= ra->limit);
    }
}

/* A completed inner body: decoded as a reassembled message; if valid, it re-encodes. */
static void check_inner(const uint8_t *inner, size_t len) {
    static uint8_t out[HM_MAX_MESSAGE];
    hm_msg m;
    size_t n = 0;
    hm_error_code code = hm_msg_decode(inner, len, 1, &m);
    if (code != HM_OK) return;
    FUZZ_CHECK(m.type != HM_MSG_FRAGMENT && m.seq == 0 && m.ack == 0);
    FUZZ_CHECK(hm_msg_encode(&m, 1, out, sizeof out, &n) == HM_OK);
    FUZZ_CHECK(n == len && memcmp(out, inner, len) == 0);
}

static void add_both(hm_reasm *ra, model *md, const hm_msg_fragment *f) {
    size_t got = 7, want = 0;
    hm_error_code c = hm_reasm_add(ra, f, &got);
    hm_error_code w = model_add(md, f, &want);
    FUZZ_CHECK(c == w);
    FUZZ_CHECK(got == want);
    if (got > 0) {
        FUZZ_CHECK(memcmp(ra->buf, md->buf, got) == 0);
        check_inner(ra->buf, got);
    }
    check_same(ra, md);
}

/* ---- sender and a second reassembler --------------------------------------------- */

static void split(const uint8_t *inner, size_t len, size_t max_frame, uint32_t first_seq,
                  uint32_t ack) {
    static hm_reasm ra;
    uint8_t out[HM_FRAG_OVERHEAD + 0x1000 + 64];
    size_t step = hm_frag_chunk_size(max_frame);
    size_t count = hm_frag_count(len, max_frame);
    size_t n = 0;
    hm_msg m;
    FUZZ_CHECK(step == (max_frame > HM_FRAG_OVERHEAD ? max_frame - HM_FRAG_OVERHEAD : 0));
    FUZZ_CHECK(count == (step && len ? (len + step - 1) / step : 0));
    FUZZ_CHECK(hm_reasm_init(&ra, HM_MAX_MESSAGE) == 0);
    /* one past the last index: refused */
    FUZZ_CHECK(hm_frag_encode(inner, len, max_frame, count, first_seq, ack, out, sizeof out,
                              &n) == HM_E_MALFORMED);
    int feed = first_seq != 0; /* with fragment 0 refused, the rest cannot reassemble */
    for (size_t i = 0; i < count; i++) {
        hm_error_code c =
            hm_frag_encode(inner, len, max_frame, i, first_seq, ack, out, sizeof out, &n);
        uint64_t seq = (uint64_t)first_seq + i;
        if (seq == 0 || seq > 0xFFFFFFFFu) { /* seq 0, or beyond u32: refused */
            FUZZ_CHECK(c == HM_E_MALFORMED);
            if (seq > 0xFFFFFFFFu) feed = 0;
            continue;
        }
        FUZZ_CHECK(c == HM_OK);
        if (max_frame <= 0xFFFF) FUZZ_CHECK(n + 4 <= max_frame); /* fits, CRC included */
        FUZZ_CHECK(hm_msg_decode(out, n, 0, &m) == HM_OK);
        FUZZ_CHECK(m.type == HM_MSG_FRAGMENT && m.seq == seq && m.ack == ack);
        FUZZ_CHECK(m.u.fragment.msg_id == first_seq);
        FUZZ_CHECK(m.u.fragment.offset == i * step && m.u.fragment.total == len);
        size_t chunk = len - i * step < step ? len - i * step : step;
        FUZZ_CHECK(m.u.fragment.chunk.len == chunk);
        FUZZ_CHECK(memcmp(m.u.fragment.chunk.ptr, inner + i * step, chunk) == 0);
        if (feed) {
            size_t done = 9;
            FUZZ_CHECK(hm_reasm_add(&ra, &m.u.fragment, &done) == HM_OK);
            FUZZ_CHECK(done == (i + 1 == count ? len : 0));
            if (done) FUZZ_CHECK(memcmp(ra.buf, inner, len) == 0);
        }
        /* a buffer one byte short: TOO_LARGE */
        size_t short_n = 5;
        FUZZ_CHECK(hm_frag_encode(inner, len, max_frame, i, first_seq, ack, out, n - 1,
                                  &short_n) == HM_E_TOO_LARGE);
    }
    if (feed) FUZZ_CHECK(!ra.busy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static hm_reasm ra;
    static model md;
    fuzz_in in = {data, size, 0};
    uint8_t cfg = fuzz_u8(&in);
    uint32_t limit = cfg & 0x80 ? (uint32_t)((cfg & 0x7Fu) * 37u % (HM_MAX_MESSAGE + 1u))
                                : HM_MAX_MESSAGE;
    FUZZ_CHECK(hm_reasm_init(&ra, HM_MAX_MESSAGE + 1) == -1);
    FUZZ_CHECK(hm_reasm_init(&ra, limit) == 0);
    md.limit = limit;
    model_reset(&md);
    check_same(&ra, &md);

    while (in.pos < in.len) {
        uint8_t op = fuzz_u8(&in);
        switch (op & 3) {
        case 0: { /* a FRAGMENT body */
            size_t n;
            const uint8_t *body = fuzz_take(&in, fuzz_u16(&in), &n);
            hm_msg m;
            if (hm_msg_decode(body, n, 0, &m) == HM_OK && m.type == HM_MSG_FRAGMENT)
                add_both(&ra, &md, &m.u.fragment);
            break;
        }
        case 1: { /* a fragment from its fields */
            hm_msg_fragment f;
            size_t n;
            f.msg_id = fuzz_u8(&in);
            f.offset = fuzz_u16(&in);
            f.total = fuzz_u16(&in);
            if (op & 0x10) f.offset = (uint32_t)md.have;
            if (op & 0x20) {
                f.msg_id = (uint32_t)md.msg_id;
                f.total = (uint32_t)md.total;
            }
            if (op & 0x40) f.total |= (uint32_t)fuzz_u8(&in) << 24; /* far beyond any limit */
            f.chunk.ptr = fuzz_take(&in, fuzz_u16(&in) & 0x7FF, &n);
            f.chunk.len = n;
            add_both(&ra, &md, &f);
            break;
        }
        case 2:
            hm_reasm_reset(&ra);
            model_reset(&md);
            check_same(&ra, &md);
            break;
        default: {
            size_t max_frame = fuzz_u16(&in), n;
            uint32_t first_seq = fuzz_u32(&in), ack = fuzz_u32(&in);
            const uint8_t *inner = fuzz_take(&in, fuzz_u16(&in) & 0xFFF, &n);
            split(inner, n, max_frame, first_seq, ack);
            break;
        }
        }
    }
    return 0;
}
