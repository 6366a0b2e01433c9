#include "hm_frame.h"

#include <string.h>

#include "hm_crc32.h"

const char *hm_frame_ev_name(hm_frame_ev ev) {
    static const char *const names[] = {"none",     "ok",       "too-short",
                                        "too-long", "bad-cobs", "bad-crc"};
    return (unsigned)ev < sizeof names / sizeof names[0] ? names[ev] : "?";
}

/* COBS over the concatenation a || b (so a frame needs no copy of body || CRC). */
static size_t cobs_encode2(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen,
                           uint8_t *out, size_t cap) {
    size_t o = 1, cp = 0; /* cp: where the open block's code byte goes */
    unsigned code = 1;    /* 1 + data bytes in the open block */
    int open = 1;         /* 0 right after a full block: the next block starts lazily */
    if (cap < 1) return 0;
    for (size_t i = 0; i < alen + blen; i++) {
        uint8_t x = i < alen ? a[i] : b[i - alen];
        if (!open) { /* a full block was closed and more data follows */
            if (o >= cap) return 0;
            cp = o++;
            code = 1;
            open = 1;
        }
        if (x == 0) {
            out[cp] = (uint8_t)code;
            if (o >= cap) return 0;
            cp = o++;
            code = 1;
        } else {
            if (o >= cap) return 0;
            out[o++] = x;
            if (++code == 0xFF) {
                out[cp] = 0xFF;
                open = 0; /* SPEC §2.3 step 2.2: no empty block if nothing follows */
            }
        }
    }
    if (open) out[cp] = (uint8_t)code;
    return o;
}

size_t hm_cobs_encode(const uint8_t *in, size_t len, uint8_t *out, size_t cap) {
    return cobs_encode2(in, len, NULL, 0, out, cap);
}

/*@ requires \valid_read(in + (0 .. len - 1));
    requires \valid(out + (0 .. cap - 1));
    requires \valid(out_len);
    assigns out[0 .. cap - 1], *out_len; */
hm_frame_ev hm_cobs_decode(const uint8_t *in, size_t len, uint8_t *out, size_t cap,
                           size_t *out_len) {
    size_t pos = 0, o = 0;
    /*@ loop invariant pos <= len && o <= cap;
        loop assigns pos, o, out[0 .. cap - 1]; */
    while (pos < len) {
        size_t code = in[pos];
#ifdef HM_PLANT_COBS /* planted bug for tools/verify_c.py (WP must not prove the reads) */
        if (code == 0 || code > len - pos + 1) return HM_FRAME_BAD_COBS;
#else
        if (code == 0 || code > len - pos) return HM_FRAME_BAD_COBS;
#endif
        /*@ loop invariant 1 <= k <= code && o <= cap;
            loop assigns k, o, out[0 .. cap - 1]; */
        for (size_t k = 1; k < code; k++) {
            if (in[pos + k] == 0) return HM_FRAME_BAD_COBS;
            if (o >= cap) return HM_FRAME_TOO_LONG;
            out[o++] = in[pos + k];
        }
        pos += code;
        if (code != 0xFF && pos < len) {
            if (o >= cap) return HM_FRAME_TOO_LONG;
            out[o++] = 0;
        }
    }
    *out_len = o;
    return HM_FRAME_OK;
}

size_t hm_frame_encode(const uint8_t *body, size_t len, size_t max_frame, uint8_t *out,
                       size_t cap) {
    uint8_t crc[HM_FRAME_CRC_SIZE];
    uint32_t c = hm_crc32(0, body, len);
    if (len == 0 || len > max_frame || max_frame - len < HM_FRAME_CRC_SIZE) return 0;
    for (int i = 0; i < HM_FRAME_CRC_SIZE; i++) crc[i] = (uint8_t)(c >> (8 * i));
    size_t n = cobs_encode2(body, len, crc, sizeof crc, out, cap);
    if (n == 0 || n >= cap) return 0;
    out[n] = 0;
    return n + 1;
}

static void rx_clear(hm_frame_rx *rx) {
    rx->enc = rx->dec = 0;
    rx->code = rx->left = rx->skip = 0;
}

int hm_frame_rx_set_max(hm_frame_rx *rx, size_t max_frame) {
    if (max_frame < HM_FRAME_FLOOR || max_frame > HM_MAX_FRAME) return -1;
    rx->max_frame = max_frame;
    return 0;
}

int hm_frame_rx_init(hm_frame_rx *rx, size_t max_frame) {
    if (max_frame < HM_FRAME_FLOOR || max_frame > HM_MAX_FRAME) return -1;
    memset(rx, 0, sizeof *rx);
    rx->max_frame = max_frame;
    return 0;
}

static void rx_put(hm_frame_rx *rx, uint8_t x) {
#ifdef HM_PLANT_OOB /* planted bug for tools/verify_c.py (EVA must flag it); never built */
    if (rx->dec <= sizeof rx->buf) rx->buf[rx->dec] = x;
#else
    if (rx->dec < sizeof rx->buf) rx->buf[rx->dec] = x; /* beyond: counted, too long */
#endif
    rx->dec++;
}

/* A 00 arrived: judge the collected frame (SPEC §2.4 order). */
static hm_frame_ev rx_finish(hm_frame_rx *rx) {
    hm_frame_ev ev;
    if (rx->skip) {
        ev = HM_FRAME_TOO_LONG;
    } else if (rx->enc == 0) {
        rx->empty++;
        return HM_FRAME_NONE;
    } else if (rx->left != 0) {
        ev = HM_FRAME_BAD_COBS; /* the last block claims more bytes than arrived */
    } else if (rx->dec < HM_FRAME_MIN) {
        ev = HM_FRAME_TOO_SHORT;
    } else if (rx->dec > rx->max_frame) {
        ev = HM_FRAME_TOO_LONG;
    } else {
        /* HM_FRAME_MIN <= dec <= max_frame <= HM_MAX_FRAME: all of it is in buf */
        size_t body = rx->dec - HM_FRAME_CRC_SIZE;
        const uint8_t *t = rx->buf + body;
        uint32_t got = (uint32_t)t[0] | (uint32_t)t[1] << 8 | (uint32_t)t[2] << 16 |
                       (uint32_t)t[3] << 24;
        if (got != hm_crc32(0, rx->buf, body)) {
            ev = HM_FRAME_BAD_CRC;
        } else {
            rx->body = body;
            ev = HM_FRAME_OK;
        }
    }
    switch (ev) {
    case HM_FRAME_OK: rx->frames++; break;
    case HM_FRAME_TOO_SHORT: rx->too_short++; break;
    case HM_FRAME_TOO_LONG: rx->too_long++; break;
    case HM_FRAME_BAD_COBS: rx->bad_cobs++; break;
    default: rx->bad_crc++; break;
    }
    return ev;
}

hm_frame_ev hm_frame_rx_push(hm_frame_rx *rx, uint8_t byte) {
    if (byte == 0) {
        hm_frame_ev ev = rx_finish(rx);
        rx_clear(rx);
        return ev;
    }
    if (rx->skip) return HM_FRAME_NONE;
    if (++rx->enc > HM_FRAME_ENC_LIMIT(rx->max_frame)) {
        rx->skip = 1; /* check 1: stop collecting, report once at the next 00 */
        return HM_FRAME_NONE;
    }
    if (rx->left == 0) {          /* a code byte */
        if (rx->code != 0 && rx->code != 0xFF) rx_put(rx, 0); /* more input follows */
        rx->code = byte;
        rx->left = (uint8_t)(byte - 1);
    } else {
        rx_put(rx, byte);
        rx->left--;
    }
    return HM_FRAME_NONE;
}

const uint8_t *hm_frame_rx_body(const hm_frame_rx *rx, size_t *len) {
    *len = rx->body;
    return rx->buf;
}

uint32_t hm_frame_rx_bad(const hm_frame_rx *rx) {
    return rx->too_short + rx->too_long + rx->bad_cobs + rx->bad_crc;
}
