/* libFuzzer target: the byte-at-a-time frame receiver (hm_frame_rx) and COBS.
 *
 * The input is a byte stream off the wire. It is pushed, one byte at a time, into
 * four receivers:
 *  - three at a fixed max_frame (HM_MAX_FRAME, the floor 128, and one between them
 *    picked from the input length), each compared at every 00 with an oracle that
 *    judges the bytes since the previous 00 by SPEC §2.4 in this file (its own COBS
 *    decoder and bitwise CRC-32): the same event, the same body;
 *  - one whose max_frame changes during the stream (at delimiters and in the middle of
 *    frames), which must still keep every invariant below.
 * Invariants, whatever the stream: every byte but 00 gives NONE; every completed body
 * re-encodes with hm_frame_encode() to a frame that a fresh receiver accepts with the
 * same body, and that equals the bytes received unless those were the non-canonical
 * "ff <254 bytes> 01" ending (SPEC §2.3); the counters add up (frames + frames_bad +
 * empty = number of 00 bytes, each kind counted as reported); after the stream, a 00
 * and a good frame give that frame (resynchronised).
 * The same input also goes through hm_cobs_encode/hm_cobs_decode (round trip, no 00 in
 * the output, the size bound, the oracle's decoding).
 */
#include <string.h>

#include "fuzz_common.h"
#include "hm_frame.h"

#define LIMIT_MAX (HM_FRAME_ENC_LIMIT(HM_MAX_FRAME))

typedef struct {
    uint32_t ev[6]; /* events seen, by hm_frame_ev */
    uint32_t empty, delimiters;
} tally;

/* SPEC §2.4 for the bytes between two delimiters; body in dec[0..*body). */
static hm_frame_ev oracle(const uint8_t *seg, size_t n, size_t mf, uint8_t *dec,
                          size_t *body) {
    size_t pos = 0, o = 0;
    if (n > mf + (mf + 253) / 254) return HM_FRAME_TOO_LONG; /* check 1 */
    while (pos < n) {                                         /* check 2 */
        size_t c = seg[pos++];
        if (c == 0 || c - 1 > n - pos) return HM_FRAME_BAD_COBS;
        for (size_t k = 1; k < c; k++) {
            if (seg[pos] == 0) return HM_FRAME_BAD_COBS;
            dec[o++] = seg[pos++];
        }
        if (c != 0xFF && pos < n) dec[o++] = 0;
    }
    if (o < 5) return HM_FRAME_TOO_SHORT;   /* check 3 */
    if (o > mf) return HM_FRAME_TOO_LONG;   /* check 4 */
    uint32_t crc = (uint32_t)dec[o - 4] | (uint32_t)dec[o - 3] << 8 |
                   (uint32_t)dec[o - 2] << 16 | (uint32_t)dec[o - 1] << 24;
    if (crc != fuzz_crc32(dec, o - 4)) return HM_FRAME_BAD_CRC; /* check 5 */
    *body = o - 4;
    return HM_FRAME_OK;
}

static void check_counters(const hm_frame_rx *rx, const tally *t) {
    FUZZ_CHECK(rx->frames == t->ev[HM_FRAME_OK]);
    FUZZ_CHECK(rx->too_short == t->ev[HM_FRAME_TOO_SHORT]);
    FUZZ_CHECK(rx->too_long == t->ev[HM_FRAME_TOO_LONG]);
    FUZZ_CHECK(rx->bad_cobs == t->ev[HM_FRAME_BAD_COBS]);
    FUZZ_CHECK(rx->bad_crc == t->ev[HM_FRAME_BAD_CRC]);
    FUZZ_CHECK(hm_frame_rx_bad(rx) == rx->too_short + rx->too_long + rx->bad_cobs + rx->bad_crc);
    FUZZ_CHECK(rx->empty == t->empty);
    FUZZ_CHECK(rx->frames + hm_frame_rx_bad(rx) + rx->empty == t->delimiters);
}

/* A body just reported OK: it re-encodes to a frame a fresh receiver accepts as is. */
static void check_reencode(const uint8_t *body, size_t len, size_t mf, const uint8_t *seg,
                           size_t seg_len) {
    uint8_t wire[HM_FRAME_WIRE_BOUND(HM_MAX_FRAME) + 8];
    hm_frame_rx fresh;
    size_t n = hm_frame_encode(body, len, mf, wire, sizeof wire);
    FUZZ_CHECK(n >= 2 && n <= HM_FRAME_WIRE_BOUND(mf));
    FUZZ_CHECK(wire[n - 1] == 0 && memchr(wire, 0, n - 1) == NULL);
    FUZZ_CHECK(hm_frame_encode(body, len, mf, wire, n - 1) == 0); /* one byte short */
    FUZZ_CHECK(hm_frame_encode(body, len, mf, wire, n) == n);
    if (seg != NULL) { /* the same bytes, or the one non-canonical ending */
        FUZZ_CHECK((seg_len == n - 1 && memcmp(seg, wire, n - 1) == 0) ||
                   (seg_len == n && seg[n - 1] == 0x01 && memcmp(seg, wire, n - 1) == 0));
    }
    FUZZ_CHECK(hm_frame_rx_init(&fresh, mf) == 0);
    for (size_t i = 0; i < n; i++) {
        hm_frame_ev ev = hm_frame_rx_push(&fresh, wire[i]);
        FUZZ_CHECK(ev == (i + 1 < n ? HM_FRAME_NONE : HM_FRAME_OK));
    }
    size_t got_len = 0;
    const uint8_t *got = hm_frame_rx_body(&fresh, &got_len);
    FUZZ_CHECK(got_len == len && memcmp(got, body, len) == 0);
    FUZZ_CHECK(fresh.frames == 1 && hm_frame_rx_bad(&fresh) == 0 && fresh.empty == 0);
}

static void count_event(tally *t, hm_frame_ev ev) {
    t->delimiters++;
    if (ev == HM_FRAME_NONE) t->empty++;
    else t->ev[ev]++;
}

/* Feed the stream to a receiver at a fixed max_frame and compare with the oracle. */
static void run_fixed(const uint8_t *data, size_t size, size_t mf) {
    static hm_frame_rx rx;
    static uint8_t dec[LIMIT_MAX + 8];
    static const uint8_t good[] = {0x06, 0x42, 0x31, 0xcf, 0xd0, 0x4a, 0x00};
    tally t;
    size_t start = 0;
    memset(&t, 0, sizeof t);
    FUZZ_CHECK(hm_frame_rx_init(&rx, mf) == 0);
    FUZZ_CHECK(rx.max_frame == mf);
    check_counters(&rx, &t);
    for (size_t i = 0; i <= size; i++) {
        uint8_t b = i < size ? data[i] : 0; /* then one 00 to end the last frame */
        hm_frame_ev ev = hm_frame_rx_push(&rx, b);
        if (b != 0) {
            FUZZ_CHECK(ev == HM_FRAME_NONE);
            continue;
        }
        size_t seg_len = i - start, body = 0;
        hm_frame_ev want = seg_len == 0 ? HM_FRAME_NONE
                                        : oracle(data + start, seg_len, mf, dec, &body);
        FUZZ_CHECK(ev == want);
        FUZZ_CHECK(rx.max_frame == mf && rx.enc == 0 && rx.dec == 0); /* ready for more */
        count_event(&t, ev);
        if (ev == HM_FRAME_OK) {
            size_t len = 0;
            const uint8_t *got = hm_frame_rx_body(&rx, &len);
            FUZZ_CHECK(got == rx.buf);
            FUZZ_CHECK(len == body && len >= 1 && len + HM_FRAME_CRC_SIZE <= mf);
            FUZZ_CHECK(memcmp(got, dec, len) == 0);
            check_reencode(got, len, mf, data + start, seg_len);
        }
        start = i + 1;
    }
    check_counters(&rx, &t);
    /* resynchronised: a good frame now is received as such */
    for (size_t i = 0; i < sizeof good; i++) {
        hm_frame_ev ev = hm_frame_rx_push(&rx, good[i]);
        FUZZ_CHECK(ev == (i + 1 < sizeof good ? HM_FRAME_NONE : HM_FRAME_OK));
    }
    size_t len = 0;
    const uint8_t *got = hm_frame_rx_body(&rx, &len);
    FUZZ_CHECK(len == 1 && got[0] == 0x42);
    FUZZ_CHECK(rx.frames == t.ev[HM_FRAME_OK] + 1);
}

/* A receiver whose max_frame is changed by the stream itself. */
static void run_changing(const uint8_t *data, size_t size) {
    static hm_frame_rx rx;
    tally t;
    size_t mf = HM_FRAME_FLOOR;
    memset(&t, 0, sizeof t);
    FUZZ_CHECK(hm_frame_rx_init(&rx, mf) == 0);
    FUZZ_CHECK(hm_frame_rx_init(&rx, HM_FRAME_FLOOR - 1) == -1 && rx.max_frame == mf);
    FUZZ_CHECK(hm_frame_rx_init(&rx, HM_MAX_FRAME + 1) == -1 && rx.max_frame == mf);
    for (size_t i = 0; i < size; i++) {
        uint8_t b = data[i];
        hm_frame_ev ev = hm_frame_rx_push(&rx, b);
        FUZZ_CHECK(rx.enc <= LIMIT_MAX + 1);
        if (b != 0) {
            FUZZ_CHECK(ev == HM_FRAME_NONE);
        } else {
            count_event(&t, ev);
            if (ev == HM_FRAME_OK) {
                size_t len = 0;
                const uint8_t *got = hm_frame_rx_body(&rx, &len);
                FUZZ_CHECK(len >= 1 && len + HM_FRAME_CRC_SIZE <= rx.max_frame);
                check_reencode(got, len, rx.max_frame, NULL, 0);
            }
            check_counters(&rx, &t);
        }
        /* after a delimiter, and inside a frame at every fe byte: a new max_frame */
        if ((b == 0 || b == 0xFE) && i + 1 < size) {
            size_t want = HM_FRAME_FLOOR + (size_t)data[i + 1] * 3u % (HM_MAX_FRAME - 127u);
            FUZZ_CHECK(hm_frame_rx_set_max(&rx, want) == 0 && rx.max_frame == want);
            FUZZ_CHECK(hm_frame_rx_set_max(&rx, HM_FRAME_FLOOR - 1) == -1);
            FUZZ_CHECK(hm_frame_rx_set_max(&rx, HM_MAX_FRAME + 1) == -1);
            FUZZ_CHECK(rx.max_frame == want);
        }
    }
    count_event(&t, hm_frame_rx_push(&rx, 0));
    check_counters(&rx, &t);
}

/* COBS alone: round trip, bounds, and the decoder against the oracle's rules. */
static void run_cobs(const uint8_t *data, size_t size) {
    size_t bound = HM_COBS_BOUND(size), n, back = 0;
    uint8_t *enc = malloc(bound);
    uint8_t *dec = malloc(size + 1);
    FUZZ_CHECK(enc != NULL && dec != NULL);
    n = hm_cobs_encode(data, size, enc, bound);
    FUZZ_CHECK(n >= 1 && n <= bound);
    FUZZ_CHECK(memchr(enc, 0, n) == NULL);
    FUZZ_CHECK(hm_cobs_encode(data, size, enc, n - 1) == 0);
    FUZZ_CHECK(hm_cobs_encode(data, size, enc, n) == n);
    FUZZ_CHECK(hm_cobs_decode(enc, n, dec, size, &back) == HM_FRAME_OK);
    FUZZ_CHECK(back == size && (size == 0 || memcmp(dec, data, size) == 0));
    if (size > 0) FUZZ_CHECK(hm_cobs_decode(enc, n, dec, size - 1, &back) == HM_FRAME_TOO_LONG);

    /* the input itself as COBS: the oracle's structure rules, cap = len suffices */
    size_t pos = 0, o = 0;
    int ok = 1;
    while (ok && pos < size) {
        size_t c = data[pos++];
        if (c == 0 || c - 1 > size - pos || memchr(data + pos, 0, c - 1) != NULL) {
            ok = 0;
            break;
        }
        o += c - 1;
        pos += c - 1;
        if (c != 0xFF && pos < size) o++;
    }
    hm_frame_ev ev = hm_cobs_decode(data, size, dec, size, &back);
    FUZZ_CHECK(ev == (ok ? HM_FRAME_OK : HM_FRAME_BAD_COBS));
    if (ok) {
        FUZZ_CHECK(back == o && back <= size);
        if (o > 0) {
            ev = hm_cobs_decode(data, size, dec, o - 1, &back);
            FUZZ_CHECK(ev == HM_FRAME_TOO_LONG);
        }
    }
    free(enc);
    free(dec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    run_fixed(data, size, HM_MAX_FRAME);
    run_fixed(data, size, HM_FRAME_FLOOR);
    run_fixed(data, size, HM_FRAME_FLOOR + size % (HM_MAX_FRAME - HM_FRAME_FLOOR + 1));
    run_changing(data, size);
    run_cobs(data, size);
    FUZZ_CHECK(strcmp(hm_frame_ev_name(HM_FRAME_BAD_CRC), "bad-crc") == 0);
    return 0;
}
