/* Native test program for the wire modules: hm_crc32, hm_frame, hm_cbor, hm_msg,
 * hm_frag (frame pieces). Driven by tests/test_native_wire.py through the hexio protocol, one
 * request per line, one answer line each:
 *
 *   selftest                          -> ok <checks> | fail <line> <what>
 *   crc32 x<data>                     -> <crc of all> <crc fed one byte at a time>
 *   cobs x<data>                      -> x<encoded>
 *   uncobs x<encoded>                 -> x<data> | bad-cobs
 *   cbor_check x<data>                -> ok | <hm_cbor_err name>
 *   frame_encode x<body> <max_frame>  -> x<wire> | refused
 *   frame_stream x<bytes> <max_frame> -> one field per event in order (x<body> or the
 *                                        error kind), then: stats <good> <empty>
 *                                        <too-short> <too-long> <bad-cobs> <bad-crc>
 *   msg_decode x<body> <inner>        -> ok <type> <seq> <ack> x<re-encoded> <fields...>
 *                                      | err <code> <type> <ref>
 *   msg_encode <type> <seq<<32|ack> <fields...>
 *   msg_encode_inner <type> <fields...>
 *                                     -> x<body> | err <code> | unrepresentable
 *                                        (a value the C struct cannot hold)
 *   piece_split x<body> <max_frame>   -> x<frame body>... | none (cannot be cut)
 *   body_seq x<bytes>                 -> <hm_body_seq>
 *   piece_join <limit> x<frame body>...
 *                                     -> per body: pass | more | x<joined> |
 *                                        too-large | reassembly; then: refused
 *                                        <count per hm_join_kind> joined <n>
 *
 * Fields are numbers or x-bytes (text as its UTF-8 bytes), in wire order; the
 * struct members are named here by hand, independently of hm_msg.c's table.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hexio.h"
#include "hm_cbor.h"
#include "hm_crc32.h"
#include "hm_frag.h"
#include "hm_frame.h"
#include "hm_msg.h"

static uint8_t out_buf[HEXIO_MAX_BYTES * 2];
static hm_frame_rx rx;

/* ---- struct member access, by hand --------------------------------------------- */

typedef struct {
    void *p;
    int k; /* 'b' for hm_bytes, else the size of the integer member */
} slot;

static int slots_of(hm_msg *m, slot *s) {
    int n = 0;
#define B(f) (s[n].p = &(f), s[n++].k = 'b')
#define U(f) (s[n].p = &(f), s[n++].k = (int)sizeof(f))
    switch (m->type) {
    case HM_MSG_HELLO: {
        hm_msg_hello *x = &m->u.hello;
        B(x->device_id), B(x->board), B(x->firmware), U(x->boot), U(x->capabilities);
        U(x->max_frame), U(x->max_message), U(x->window), B(x->device_kid), B(x->host_kid);
        U(x->knowledge_facts), U(x->knowledge_text);
    } break;
    case HM_MSG_HELLO_ACK: {
        hm_msg_hello_ack *x = &m->u.hello_ack;
        B(x->host_id), U(x->max_frame), U(x->max_message), U(x->window), U(x->time_ms);
        U(x->pack_seq), B(x->pack_hash), B(x->challenge), B(x->hello_hash);
    } break;
    case HM_MSG_CAPTURE: {
        hm_msg_capture *x = &m->u.capture;
        B(x->source), B(x->payload), B(x->context), U(x->flags), U(x->confidence);
        U(x->provenance), U(x->priority);
    } break;
    case HM_MSG_CAPTURE_RESULT: {
        hm_msg_capture_result *x = &m->u.capture_result;
        U(x->ref), U(x->status), B(x->record_id), U(x->flags), U(x->h), U(x->i), U(x->r);
        U(x->f), U(x->c), U(x->rn), U(x->w), U(x->verdict), U(x->hard), U(x->state);
    } break;
    case HM_MSG_PACK_OFFER: B(m->u.pack_offer.pack); break;
    case HM_MSG_PACK_RESULT: {
        hm_msg_pack_result *x = &m->u.pack_result;
        U(x->back), U(x->status), U(x->reason);
    } break;
    case HM_MSG_KNOWLEDGE_PUSH: B(m->u.knowledge_push.pack); break;
    case HM_MSG_KNOWLEDGE_RESULT: {
        hm_msg_knowledge_result *x = &m->u.knowledge_result;
        B(x->pack_id), U(x->status), U(x->reason), U(x->held_seq);
    } break;
    case HM_MSG_STATUS: {
        hm_msg_status *x = &m->u.status;
        U(x->uptime_ms), U(x->ring_used), U(x->ring_capacity), U(x->captures);
        U(x->evictions), U(x->refusals), U(x->quarantined), U(x->candidates);
        U(x->packs_sent), U(x->packs_acked), U(x->frames_good), U(x->frames_bad);
        U(x->retransmits), U(x->knowledge_seq);
    } break;
    case HM_MSG_LOG: U(m->u.log.level), B(m->u.log.text); break;
    case HM_MSG_ERROR: U(m->u.error.code), U(m->u.error.ref), B(m->u.error.detail); break;
    case HM_MSG_PROOF: B(m->u.proof.signature); break;
    default: break; /* STATUS_REQUEST, ACK: no fields */
    }
#undef B
#undef U
    return n;
}

static uint64_t slot_get(const slot *s) {
    switch (s->k) {
    case 8: return *(uint64_t *)s->p;
    case 4: return *(uint32_t *)s->p;
    case 2: return *(uint16_t *)s->p;
    default: return *(uint8_t *)s->p;
    }
}

/* 0 if the value does not fit the member. */
static int slot_set(const slot *s, uint64_t v) {
    switch (s->k) {
    case 8: *(uint64_t *)s->p = v; return 1;
    case 4: *(uint32_t *)s->p = (uint32_t)v; return v <= 0xFFFFFFFFu;
    case 2: *(uint16_t *)s->p = (uint16_t)v; return v <= 0xFFFFu;
    default: *(uint8_t *)s->p = (uint8_t)v; return v <= 0xFFu;
    }
}

/* ---- commands ---------------------------------------------------------------------- */

static void cmd_crc32(const hexio_req *q) {
    uint32_t inc = 0;
    for (size_t i = 0; i < q->len[0]; i++) inc = hm_crc32(inc, q->bytes[0] + i, 1);
    hexio_num(hm_crc32(0, q->bytes[0], q->len[0]));
    hexio_num(inc);
}

static void cmd_cobs(const hexio_req *q) {
    size_t n = hm_cobs_encode(q->bytes[0], q->len[0], out_buf, sizeof out_buf);
    hexio_bytes(out_buf, n);
}

static void cmd_uncobs(const hexio_req *q) {
    size_t n = 0;
    hm_frame_ev ev = hm_cobs_decode(q->bytes[0], q->len[0], out_buf, sizeof out_buf, &n);
    if (ev == HM_FRAME_OK) hexio_bytes(out_buf, n);
    else hexio_word(hm_frame_ev_name(ev));
}

static void cmd_cbor_check(const hexio_req *q) {
    hexio_word(hm_cbor_err_name(hm_cbor_check(q->bytes[0], q->len[0])));
}

static void cmd_frame_encode(const hexio_req *q) {
    size_t n = hm_frame_encode(q->bytes[0], q->len[0], (size_t)q->num[1], out_buf,
                               sizeof out_buf);
    if (n) hexio_bytes(out_buf, n);
    else hexio_word("refused");
}

static void cmd_frame_stream(const hexio_req *q) {
    if (hm_frame_rx_init(&rx, (size_t)q->num[1]) != 0) {
        hexio_word("badmax");
        return;
    }
    for (size_t i = 0; i < q->len[0]; i++) {
        hm_frame_ev ev = hm_frame_rx_push(&rx, q->bytes[0][i]);
        if (ev == HM_FRAME_OK) {
            size_t n;
            const uint8_t *body = hm_frame_rx_body(&rx, &n);
            hexio_bytes(body, n);
        } else if (ev != HM_FRAME_NONE) {
            hexio_word(hm_frame_ev_name(ev));
        }
    }
    hexio_word("stats");
    hexio_num(rx.frames);
    hexio_num(rx.empty);
    hexio_num(rx.too_short);
    hexio_num(rx.too_long);
    hexio_num(rx.bad_cobs);
    hexio_num(rx.bad_crc);
}

static void print_msg(hm_msg *m, int inner) {
    slot s[16];
    size_t len = 0;
    hm_error_code e = hm_msg_encode(m, inner, out_buf, sizeof out_buf, &len);
    hexio_word("ok");
    hexio_num(m->type);
    hexio_num(m->seq);
    hexio_num(m->ack);
    if (e != HM_OK) { /* a decoded message that does not re-encode: never expected */
        hexio_word("reencode-failed");
        hexio_word(hm_error_name(e));
        return;
    }
    hexio_bytes(out_buf, len);
    int n = slots_of(m, s);
    for (int i = 0; i < n; i++) {
        if (s[i].k == 'b') {
            const hm_bytes *b = s[i].p;
            hexio_bytes(b->ptr, b->len);
        } else {
            hexio_num(slot_get(&s[i]));
        }
    }
}

static void cmd_msg_decode(const hexio_req *q) {
    hm_msg m;
    int inner = q->num[1] != 0;
    hm_error_code e = hm_msg_decode(q->bytes[0], q->len[0], inner, &m);
    if (e == HM_OK) {
        print_msg(&m, inner);
    } else {
        hexio_word("err");
        hexio_num(e);
        hexio_num(m.type);
        hexio_num(m.seq);
    }
}

static void cmd_msg_encode(const hexio_req *q, int inner) {
    hm_msg m;
    slot s[16];
    int first = inner ? 1 : 2;
    memset(&m, 0, sizeof m);
    if (q->num[0] > 255) {
        hexio_word("unrepresentable");
        return;
    }
    m.type = (uint8_t)q->num[0];
    if (!inner) {
        m.seq = (uint32_t)(q->num[1] >> 32);
        m.ack = (uint32_t)q->num[1];
    }
    int n = slots_of(&m, s);
    if (n != q->argc - first) { /* wrong field count: the struct has no room for it */
        hexio_word("unrepresentable");
        return;
    }
    for (int i = 0; i < n; i++) {
        int a = first + i;
        if ((s[i].k == 'b') != (q->is_bytes[a] != 0)) {
            hexio_word("unrepresentable");
            return;
        }
        if (s[i].k == 'b') {
            hm_bytes *b = s[i].p;
            b->ptr = q->bytes[a];
            b->len = q->len[a];
        } else if (!slot_set(&s[i], q->num[a])) {
            hexio_word("unrepresentable");
            return;
        }
    }
    size_t len = 0;
    hm_error_code e = hm_msg_encode(&m, inner, out_buf, sizeof out_buf, &len);
    if (e == HM_OK) {
        hexio_bytes(out_buf, len);
    } else {
        hexio_word("err");
        hexio_num(e);
    }
}

static hm_join jn;

static void cmd_piece_split(const hexio_req *q) {
    size_t max_frame = (size_t)q->num[1];
    size_t count = hm_piece_count(q->len[0], max_frame);
    if (count == 0) {
        hexio_word("none");
        return;
    }
    for (size_t i = 0; i < count; i++) {
        size_t len = 0;
        if (hm_piece_encode(q->bytes[0], q->len[0], max_frame, i, out_buf, sizeof out_buf,
                            &len) != HM_OK) {
            hexio_word("err");
            return;
        }
        hexio_bytes(out_buf, len);
    }
}

static void cmd_piece_join(const hexio_req *q) {
    if (q->num[0] > HM_MAX_MESSAGE || hm_join_init(&jn, (uint32_t)q->num[0]) != 0) {
        hexio_word("badlimit");
        return;
    }
    for (int a = 1; a < q->argc; a++) {
        size_t len = 0;
        hm_error_code e;
        if (!HM_PIECE_IS(q->bytes[a], q->len[a])) {
            hexio_word("pass");
            continue;
        }
        e = hm_join_take(&jn, q->bytes[a], q->len[a], &len);
        if (e != HM_OK)
            hexio_word(hm_error_name(e));
        else if (len == 0)
            hexio_word("more");
        else
            hexio_bytes(jn.buf, len);
    }
    hexio_word("refused");
    for (int k = 0; k < HM_JOIN_KINDS; k++) hexio_num(jn.refused[k]);
    hexio_word("joined");
    hexio_num(jn.joined);
}

/* ---- selftest: C-only unit checks ---------------------------------------------- */

static int checks;
static int failed_line;
static const char *failed_what;

#define CHECK(cond)                                                                       \
    do {                                                                                  \
        checks++;                                                                         \
        if (!(cond) && !failed_line) {                                                    \
            failed_line = __LINE__;                                                       \
            failed_what = #cond;                                                          \
        }                                                                                 \
    } while (0)

static uint32_t crc_bitwise(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return ~c;
}

static uint32_t rng_state = 12345;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}

static void test_crc(void) {
    uint8_t buf[300];
    CHECK(hm_crc32(0, (const uint8_t *)"123456789", 9) == 0xCBF43926u);
    CHECK(hm_crc32(0, (const uint8_t *)"\x42", 1) == 0x4AD0CF31u);
    CHECK(hm_crc32(0, NULL, 0) == 0);
    CHECK(hm_crc32(0x12345678u, NULL, 0) == 0x12345678u);
    for (int i = 0; i < 256; i++) {
        buf[0] = (uint8_t)i;
        CHECK(hm_crc32(0, buf, 1) == crc_bitwise(buf, 1));
    }
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)rnd();
    for (size_t cut = 0; cut <= sizeof buf; cut += 37) {
        uint32_t whole = hm_crc32(0, buf, sizeof buf);
        CHECK(whole == crc_bitwise(buf, sizeof buf));
        CHECK(hm_crc32(hm_crc32(0, buf, cut), buf + cut, sizeof buf - cut) == whole);
    }
}

static void test_cobs(void) {
    uint8_t data[600], enc[700], dec[700];
    size_t n = 0;
    /* never writes at or beyond cap; 0 until cap is enough */
    for (int round = 0; round < 40; round++) {
        size_t len = rnd() % 600;
        for (size_t i = 0; i < len; i++) data[i] = (rnd() % 4) ? (uint8_t)rnd() : 0;
        if (round % 3 == 0) memset(data, 0x55, len); /* long zero-free runs */
        size_t full = hm_cobs_encode(data, len, enc, sizeof enc);
        CHECK(full >= 1 && full <= HM_COBS_BOUND(len));
        CHECK(memchr(enc, 0, full) == NULL);
        CHECK(hm_cobs_decode(enc, full, dec, sizeof dec, &n) == HM_FRAME_OK && n == len &&
              memcmp(dec, data, len) == 0);
        if (len) CHECK(hm_cobs_decode(enc, full, dec, len - 1, &n) == HM_FRAME_TOO_LONG);
        for (size_t cap = 0; cap < full; cap += 1 + cap / 8) {
            memset(enc, 0xEE, sizeof enc);
            CHECK(hm_cobs_encode(data, len, enc, cap) == 0);
            CHECK(enc[cap] == 0xEE);
        }
    }
    /* exactly 254 non-zero bytes: ff + data, no 01 after it */
    memset(data, 7, 254);
    CHECK(hm_cobs_encode(data, 254, enc, sizeof enc) == 255 && enc[0] == 0xFF);
    /* non-canonical ff <254> 01 decodes to the same bytes (SPEC §2.3) */
    enc[255] = 0x01;
    CHECK(hm_cobs_decode(enc, 256, dec, sizeof dec, &n) == HM_FRAME_OK && n == 254);
    CHECK(hm_cobs_decode((const uint8_t *)"\x00", 1, dec, sizeof dec, &n) == HM_FRAME_BAD_COBS);
    CHECK(hm_cobs_decode((const uint8_t *)"\x03\x01", 2, dec, sizeof dec, &n) ==
          HM_FRAME_BAD_COBS);
    CHECK(hm_cobs_decode((const uint8_t *)"\x03\x01\x00", 3, dec, sizeof dec, &n) ==
          HM_FRAME_BAD_COBS);
    CHECK(hm_cobs_decode(NULL, 0, dec, sizeof dec, &n) == HM_FRAME_OK && n == 0);
}

static void push_all(const uint8_t *p, size_t n, hm_frame_ev *last) {
    for (size_t i = 0; i < n; i++) {
        hm_frame_ev ev = hm_frame_rx_push(&rx, p[i]);
        if (ev != HM_FRAME_NONE) *last = ev;
    }
}

static void test_frame(void) {
    static uint8_t body[HM_MAX_FRAME + 8], wire[HM_FRAME_WIRE_BOUND(HM_MAX_FRAME) + 8];
    hm_frame_ev ev = HM_FRAME_NONE;
    size_t n;
    CHECK(hm_frame_rx_init(&rx, 127) == -1);
    CHECK(hm_frame_rx_init(&rx, HM_MAX_FRAME + 1) == -1);
    CHECK(hm_frame_rx_init(&rx, 128) == 0);
    CHECK(hm_frame_rx_set_max(&rx, 127) == -1 && rx.max_frame == 128);
    CHECK(strcmp(hm_frame_ev_name(HM_FRAME_BAD_CRC), "bad-crc") == 0);
    CHECK(strcmp(hm_frame_ev_name((hm_frame_ev)99), "?") == 0);
    /* encoder limits */
    CHECK(hm_frame_encode(body, 0, 128, wire, sizeof wire) == 0);
    memset(body, 0xA5, sizeof body);
    CHECK(hm_frame_encode(body, 124, 128, wire, sizeof wire) == 130); /* 128 + code + 00 */
    CHECK(hm_frame_encode(body, 125, 128, wire, sizeof wire) == 0);
    CHECK(hm_frame_encode(body, 124, 128, wire, 130) == 130);
    CHECK(hm_frame_encode(body, 124, 128, wire, 129) == 0);
    CHECK(hm_frame_encode(body, 124, 3, wire, sizeof wire) == 0);
    /* the largest body at every max_frame, all-non-zero (the longest encoding) */
    for (size_t mf = 128; mf <= HM_MAX_FRAME; mf += 51) {
        size_t w = hm_frame_encode(body, mf - 4, mf, wire, sizeof wire);
        CHECK(w >= mf && w <= HM_FRAME_WIRE_BOUND(mf));
        CHECK(hm_frame_rx_init(&rx, mf) == 0);
        ev = HM_FRAME_NONE;
        push_all(wire, w, &ev);
        CHECK(ev == HM_FRAME_OK);
        const uint8_t *b = hm_frame_rx_body(&rx, &n);
        CHECK(n == mf - 4 && memcmp(b, body, n) == 0);
        /* one more encoded byte than the limit: too-long, once, then resynchronised */
        CHECK(hm_frame_rx_set_max(&rx, mf - 1) == 0 || mf == 128);
        if (mf > 128) {
            ev = HM_FRAME_NONE;
            push_all(wire, w, &ev);
            CHECK(ev == HM_FRAME_TOO_LONG && rx.too_long == 1);
        }
    }
    /* a body still readable until the next push; empty frames only counted */
    CHECK(hm_frame_rx_init(&rx, 128) == 0);
    n = hm_frame_encode((const uint8_t *)"hi", 2, 128, wire, sizeof wire);
    ev = HM_FRAME_NONE;
    push_all((const uint8_t *)"\x00\x00\x00", 3, &ev);
    CHECK(ev == HM_FRAME_NONE && rx.empty == 3);
    push_all(wire, n, &ev);
    CHECK(ev == HM_FRAME_OK && rx.frames == 1);
    const uint8_t *b = hm_frame_rx_body(&rx, &n);
    CHECK(n == 2 && b[0] == 'h' && b[1] == 'i');
    /* noise never escapes the struct; every damaged frame is counted */
    CHECK(hm_frame_rx_init(&rx, 128) == 0);
    for (int i = 0; i < 200000; i++) {
        uint8_t x = (uint8_t)rnd();
        if (rnd() % 64 == 0) x = 0;
        (void)hm_frame_rx_push(&rx, x);
    }
    CHECK(hm_frame_rx_bad(&rx) == rx.too_short + rx.too_long + rx.bad_cobs + rx.bad_crc);
    CHECK(rx.enc <= HM_FRAME_ENC_LIMIT(rx.max_frame) + 1);
}

static void test_cbor_writer(void) {
    static const uint64_t edges[] = {0, 23, 24, 255, 256, 65535, 65536, 0xFFFFFFFFu,
                                     0x100000000u, UINT64_MAX};
    static const size_t sizes[] = {1, 1, 2, 2, 3, 3, 5, 5, 9, 9};
    uint8_t buf[32];
    hm_cbor_w w;
    hm_cbor_r r;
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        uint64_t v = 1;
        int neg = 0;
        hm_cbor_w_init(&w, buf, sizeof buf);
        hm_cbor_put_uint(&w, edges[i]);
        hm_cbor_put_nint(&w, edges[i]);
        CHECK(w.err == HM_CBOR_OK && w.len == 2 * sizes[i]);
        CHECK(buf[sizes[i]] >> 5 == 1);
        hm_cbor_r_init(&r, buf, w.len);
        CHECK(hm_cbor_get_uint(&r, UINT64_MAX, &v) == HM_CBOR_OK && v == edges[i]);
        CHECK(hm_cbor_get_int(&r, &neg, &v) == HM_CBOR_OK && neg == 1 && v == edges[i]);
        CHECK(hm_cbor_end(&r) == HM_CBOR_OK);
        CHECK(hm_cbor_check(buf, sizes[i]) == HM_CBOR_OK);
        /* all or nothing: one byte short writes nothing */
        hm_cbor_w_init(&w, buf, sizes[i] - 1);
        hm_cbor_put_uint(&w, edges[i]);
        CHECK(w.err == HM_CBOR_E_OVERFLOW && w.len == 0);
        hm_cbor_put_uint(&w, 0); /* sticky */
        CHECK(w.len == 0);
    }
    hm_cbor_w_init(&w, buf, sizeof buf);
    hm_cbor_put_array(&w, 6);
    hm_cbor_put_tag(&w, 18);
    hm_cbor_put_map(&w, 1);
    hm_cbor_put_uint(&w, 1);
    hm_cbor_put_nint(&w, 7);
    hm_cbor_put_bool(&w, 1);
    hm_cbor_put_bool(&w, 0);
    hm_cbor_put_null(&w);
    hm_cbor_put_bstr(&w, (const uint8_t *)"ab", 2);
    hm_cbor_put_tstr(&w, (const uint8_t *)"\xc3\xa9", 2);
    CHECK(w.err == HM_CBOR_OK && w.len == 14 &&
          memcmp(buf, "\x86\xd2\xa1\x01\x27\xf5\xf4\xf6\x42" "ab" "\x62\xc3\xa9", 14) == 0);
    CHECK(hm_cbor_check(buf, w.len) == HM_CBOR_OK);
    hm_cbor_put_tstr(&w, (const uint8_t *)"\xc3", 1);
    CHECK(w.err == HM_CBOR_E_UTF8 && w.len == 14);
    /* string content too big for the rest: nothing written */
    hm_cbor_w_init(&w, buf, 4);
    hm_cbor_put_bstr(&w, (const uint8_t *)"abcd", 4);
    CHECK(w.err == HM_CBOR_E_OVERFLOW && w.len == 0);
}

static hm_cbor_err check_hex(const char *hex) {
    uint8_t buf[64];
    size_t n = strlen(hex) / 2;
    for (size_t i = 0; i < n; i++) {
        unsigned x;
        sscanf(hex + 2 * i, "%2x", &x);
        buf[i] = (uint8_t)x;
    }
    return hm_cbor_check(buf, n);
}

static void test_cbor_reader(void) {
    static const struct {
        const char *hex;
        hm_cbor_err err;
    } cases[] = {
        {"1801", HM_CBOR_E_NON_MINIMAL},   {"190017", HM_CBOR_E_NON_MINIMAL},
        {"1900ff", HM_CBOR_E_NON_MINIMAL}, {"1a0000ffff", HM_CBOR_E_NON_MINIMAL},
        {"1b00000000ffffffff", HM_CBOR_E_NON_MINIMAL},
        {"1817", HM_CBOR_E_NON_MINIMAL},   {"1818", HM_CBOR_OK},
        {"5818", HM_CBOR_E_TRUNCATED},     {"d81a", HM_CBOR_E_TRUNCATED},
        {"1c", HM_CBOR_E_RESERVED},        {"5d", HM_CBOR_E_RESERVED},
        {"9f01ff", HM_CBOR_E_INDEFINITE},  {"ff", HM_CBOR_E_INDEFINITE},
        {"5f40ff", HM_CBOR_E_INDEFINITE},  {"1f", HM_CBOR_E_INDEFINITE},
        {"f93c00", HM_CBOR_E_FLOAT},       {"fa3f800000", HM_CBOR_E_FLOAT},
        {"fb3ff0000000000000", HM_CBOR_E_FLOAT},
        {"f7", HM_CBOR_E_SIMPLE},          {"e0", HM_CBOR_E_SIMPLE},
        {"f3", HM_CBOR_E_SIMPLE},          {"f814", HM_CBOR_E_SIMPLE},
        {"f815", HM_CBOR_E_SIMPLE},        {"f816", HM_CBOR_E_SIMPLE},
        {"f820", HM_CBOR_E_SIMPLE},        {"f8", HM_CBOR_E_TRUNCATED},
        {"f4", HM_CBOR_OK},                {"f5", HM_CBOR_OK},
        {"f6", HM_CBOR_OK},                {"6180", HM_CBOR_E_UTF8},
        {"62c080", HM_CBOR_E_UTF8},        {"63eda080", HM_CBOR_E_UTF8},
        {"64f4908080", HM_CBOR_E_UTF8},    {"64f48fbfbf", HM_CBOR_OK},
        {"63efbfbf", HM_CBOR_OK},          {"63e0a080", HM_CBOR_OK},
        {"63e09fbf", HM_CBOR_E_UTF8},      {"62dfbf", HM_CBOR_OK},
        {"64f0908080", HM_CBOR_OK},        {"64f08fbfbf", HM_CBOR_E_UTF8},
        {"61f5", HM_CBOR_E_UTF8},          {"62e282", HM_CBOR_E_UTF8},
        {"a20100020a", HM_CBOR_OK},         {"a202000100", HM_CBOR_E_MAP_ORDER},
        {"a201000100", HM_CBOR_E_MAP_ORDER},{"a2200001ff", HM_CBOR_E_MAP_ORDER},
        {"a201002000", HM_CBOR_OK},          {"a241000042000000", HM_CBOR_OK},
        {"a242000000410000", HM_CBOR_E_MAP_ORDER},
        {"a1f400", HM_CBOR_E_MAP_KEY},      {"a18000", HM_CBOR_E_MAP_KEY},
        {"a1c10000", HM_CBOR_E_MAP_KEY},    {"a101", HM_CBOR_E_TRUNCATED},
        {"a3010203", HM_CBOR_E_TRUNCATED},  {"83010203", HM_CBOR_OK},
        {"8301020304", HM_CBOR_E_TRAILING}, {"840102", HM_CBOR_E_TRUNCATED},
        {"0000", HM_CBOR_E_TRAILING},       {"", HM_CBOR_E_TRUNCATED},
        {"c1c2c300", HM_CBOR_OK},           {"a0", HM_CBOR_OK},
        {"80", HM_CBOR_OK},                 {"8180", HM_CBOR_OK},
        {"a161610a", HM_CBOR_OK},          {"a1616100", HM_CBOR_OK},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hm_cbor_err got = check_hex(cases[i].hex);
        int before = failed_line;
        CHECK(got == cases[i].err);
        if (!before && failed_line) failed_what = cases[i].hex;
    }
    /* depth: 16 arrays around an integer pass, 17 do not; empty array at depth 16 ok */
    uint8_t deep[40];
    memset(deep, 0x81, sizeof deep);
    deep[16] = 0x00;
    CHECK(hm_cbor_check(deep, 17) == HM_CBOR_OK);
    deep[16] = 0x80;
    CHECK(hm_cbor_check(deep, 17) == HM_CBOR_OK);
    deep[16] = 0x81, deep[17] = 0x00;
    CHECK(hm_cbor_check(deep, 18) == HM_CBOR_E_DEPTH);
    memset(deep, 0xC1, sizeof deep); /* tags count as nesting too */
    deep[16] = 0x00;
    CHECK(hm_cbor_check(deep, 17) == HM_CBOR_OK);
    deep[16] = 0xC1, deep[17] = 0x00;
    CHECK(hm_cbor_check(deep, 18) == HM_CBOR_E_DEPTH);

    /* typed getters, sticky errors */
    static const uint8_t doc[] = {0x87, 0x18, 0x64, 0x43, 1, 2, 3, 0x62, 'h', 'i', 0xf5,
                                  0xf6, 0xd2, 0x20, 0x61};
    hm_cbor_r r;
    uint64_t v = 0;
    const uint8_t *p = NULL;
    size_t n = 0;
    int bv = 0, neg = 0;
    hm_cbor_r_init(&r, doc, sizeof doc);
    CHECK(hm_cbor_peek(&r) == 4);
    CHECK(hm_cbor_expect_array(&r, 7) == HM_CBOR_OK);
    CHECK(hm_cbor_get_uint(&r, 100, &v) == HM_CBOR_OK && v == 100);
    CHECK(hm_cbor_get_bstr(&r, 3, 3, &p, &n) == HM_CBOR_OK && n == 3 && p == doc + 4);
    CHECK(hm_cbor_get_tstr(&r, 2, &p, &n) == HM_CBOR_OK && n == 2 && p[0] == 'h');
    CHECK(hm_cbor_get_bool(&r, &bv) == HM_CBOR_OK && bv == 1);
    CHECK(hm_cbor_get_null(&r) == HM_CBOR_OK);
    CHECK(hm_cbor_get_tag(&r, &v) == HM_CBOR_OK && v == 18);
    CHECK(hm_cbor_get_int(&r, &neg, &v) == HM_CBOR_OK && neg == 1 && v == 0);
    CHECK(hm_cbor_end(&r) == HM_CBOR_E_TRAILING);
    CHECK(hm_cbor_peek(&r) == -1);
    hm_cbor_r_init(&r, doc, sizeof doc);
    CHECK(hm_cbor_expect_array(&r, 6) == HM_CBOR_E_RANGE);
    CHECK(hm_cbor_get_uint(&r, 1000, &v) == HM_CBOR_E_RANGE); /* sticky */
    hm_cbor_r_init(&r, doc + 1, sizeof doc - 1);
    v = 7;
    CHECK(hm_cbor_get_uint(&r, 99, &v) == HM_CBOR_E_RANGE && v == 7);
    hm_cbor_r_init(&r, doc + 3, sizeof doc - 3);
    CHECK(hm_cbor_get_bstr(&r, 0, 2, &p, &n) == HM_CBOR_E_RANGE);
    hm_cbor_r_init(&r, doc + 3, sizeof doc - 3);
    CHECK(hm_cbor_get_tstr(&r, 10, &p, &n) == HM_CBOR_E_TYPE);
    hm_cbor_r_init(&r, doc + 7, sizeof doc - 7);
    CHECK(hm_cbor_get_tstr(&r, 1, &p, &n) == HM_CBOR_E_RANGE);
    hm_cbor_r_init(&r, doc + 11, 1);
    CHECK(hm_cbor_get_bool(&r, &bv) == HM_CBOR_E_TYPE);
    hm_cbor_r_init(&r, doc + 10, 1);
    CHECK(hm_cbor_get_null(&r) == HM_CBOR_E_TYPE);
    hm_cbor_r_init(&r, doc, 1);
    CHECK(hm_cbor_get_array(&r, &v) == HM_CBOR_E_TRUNCATED);
    hm_cbor_r_init(&r, (const uint8_t *)"\xa1\x01\x02", 3);
    CHECK(hm_cbor_get_map(&r, &v) == HM_CBOR_OK && v == 1);
    hm_cbor_r_init(&r, (const uint8_t *)"\xa2\x01\x02", 3);
    CHECK(hm_cbor_get_map(&r, &v) == HM_CBOR_E_TRUNCATED);
    hm_cbor_r_init(&r, (const uint8_t *)"\x82\x01\x02\x03", 4);
    CHECK(hm_cbor_skip(&r) == HM_CBOR_OK && r.pos == 3 && hm_cbor_get_uint(&r, 3, &v) == 0);
    CHECK(strcmp(hm_cbor_err_name(HM_CBOR_E_MAP_ORDER), "map-order") == 0);
    CHECK(strcmp(hm_cbor_err_name(HM_CBOR_E_RANGE), "range") == 0);
    /* random bytes: never out of bounds (ASan), same verdict twice */
    uint8_t junk[64];
    for (int i = 0; i < 20000; i++) {
        size_t len = rnd() % sizeof junk;
        for (size_t k = 0; k < len; k++) junk[k] = (uint8_t)(rnd() % 3 ? rnd() : rnd() % 0x20 + 0x80);
        uint8_t *heap = malloc(len ? len : 1); /* exact-size copy: ASan sees overreads */
        memcpy(heap, junk, len);
        CHECK(hm_cbor_check(heap, len) == hm_cbor_check(heap, len));
        free(heap);
    }
}

static void test_msg(void) {
    static const uint8_t id8[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    uint8_t buf[128];
    size_t len = 0;
    hm_msg m, d;
    memset(&m, 0, sizeof m);
    CHECK(hm_msg_unsequenced(HM_MSG_ACK) && !hm_msg_unsequenced(HM_MSG_HELLO));
    CHECK(strcmp(hm_error_name(HM_E_REASSEMBLY), "reassembly") == 0);
    /* unknown type, seq rules */
    m.type = 0;
    CHECK(hm_msg_encode(&m, 0, buf, sizeof buf, &len) == HM_E_MALFORMED);
    m.type = 15;
    CHECK(hm_msg_encode(&m, 0, buf, sizeof buf, &len) == HM_E_MALFORMED);
    m.type = HM_MSG_ACK, m.seq = 1;
    CHECK(hm_msg_encode(&m, 0, buf, sizeof buf, &len) == HM_E_MALFORMED);
    m.seq = 0, m.ack = 12;
    CHECK(hm_msg_encode(&m, 0, buf, sizeof buf, &len) == HM_OK && len == 5 &&
          memcmp(buf, "\x84\x01\x0d\x00\x0c", 5) == 0);
    CHECK(hm_msg_encode(&m, 1, buf, sizeof buf, &len) == HM_E_MALFORMED); /* ack != 0 */
    m.type = HM_MSG_FRAGMENT, m.ack = 0;
    CHECK(hm_msg_encode(&m, 1, buf, sizeof buf, &len) == HM_E_MALFORMED);
    m.seq = 5; /* FRAGMENT is retired (SPEC §5.14): never encoded, decoded as unknown */
    CHECK(hm_msg_encode(&m, 0, buf, sizeof buf, &len) == HM_E_MALFORMED);
    CHECK(hm_msg_decode((const uint8_t *)"\x88\x01\x0e\x05\x00\x00\x00\x00\x40", 9, 0, &m) ==
              HM_E_UNKNOWN_TYPE && m.seq == 5 && m.type == 0);
    /* HELLO: bytes bounds, text, and every too-small buffer */
    memset(&m, 0, sizeof m);
    m.type = HM_MSG_HELLO, m.seq = 1;
    m.u.hello.device_id = (hm_bytes){id8, 8};
    m.u.hello.device_kid = (hm_bytes){id8, 8};
    m.u.hello.board = (hm_bytes){(const uint8_t *)"b", 1};
    m.u.hello.max_frame = 512;
    size_t full = 0;
    CHECK(hm_msg_encode(&m, 0, buf, sizeof buf, &full) == HM_OK);
    for (size_t cap = 0; cap < full; cap++)
        CHECK(hm_msg_encode(&m, 0, buf, cap, &len) == HM_E_TOO_LARGE);
    CHECK(hm_msg_decode(buf, full, 0, &d) == HM_OK && d.type == HM_MSG_HELLO &&
          d.u.hello.max_frame == 512 && d.u.hello.board.ptr == buf + 15 &&
          d.u.hello.host_kid.len == 0);
    m.u.hello.host_kid = (hm_bytes){id8, 7};
    CHECK(hm_msg_encode(&m, 0, buf, sizeof buf, &len) == HM_E_MALFORMED);
    m.u.hello.host_kid = (hm_bytes){id8, 8};
    m.u.hello.board = (hm_bytes){(const uint8_t *)"\xff", 1};
    CHECK(hm_msg_encode(&m, 0, buf, sizeof buf, &len) == HM_E_MALFORMED);
    m.u.hello.board = (hm_bytes){NULL, 3};
    CHECK(hm_msg_encode(&m, 0, buf, sizeof buf, &len) == HM_E_MALFORMED);
    /* q16 and enum bounds */
    memset(&m, 0, sizeof m);
    m.type = HM_MSG_ERROR;
    CHECK(hm_msg_encode(&m, 0, buf, sizeof buf, &len) == HM_E_MALFORMED); /* code 0 */
    m.u.error.code = 9;
    CHECK(hm_msg_encode(&m, 0, buf, sizeof buf, &len) == HM_E_MALFORMED);
    m.u.error.code = 8;
    CHECK(hm_msg_encode(&m, 0, buf, sizeof buf, &len) == HM_OK);
    memset(&m, 0, sizeof m);
    m.type = HM_MSG_CAPTURE_RESULT, m.seq = 1;
    m.u.capture_result.w = 0x10000;
    CHECK(hm_msg_encode(&m, 0, buf, sizeof buf, &len) == HM_OK);
    m.u.capture_result.w = 0x10001;
    CHECK(hm_msg_encode(&m, 0, buf, sizeof buf, &len) == HM_E_MALFORMED);
    m.u.capture_result.w = 0, m.u.capture_result.hard = 16;
    CHECK(hm_msg_encode(&m, 0, buf, sizeof buf, &len) == HM_E_MALFORMED);
    /* ERROR ref of a refused message (SPEC §4.3) */
    CHECK(hm_msg_decode((const uint8_t *)"\x84\x02\x09\x07\x04", 5, 0, &d) ==
              HM_E_UNKNOWN_VERSION && d.seq == 7 && d.type == 0);
    CHECK(hm_msg_decode((const uint8_t *)"\x84\x01\x18\x63\x07\x04", 6, 0, &d) ==
              HM_E_UNKNOWN_TYPE && d.seq == 7);
    CHECK(hm_msg_decode((const uint8_t *)"\x84\x01\x0d\x05\x04", 5, 0, &d) ==
              HM_E_MALFORMED && d.seq == 5 && d.type == 13);
    CHECK(hm_msg_decode((const uint8_t *)"\x84\x01\x09\x20\x04", 5, 0, &d) ==
              HM_E_MALFORMED && d.seq == 0);
    CHECK(hm_msg_decode((const uint8_t *)"\x83\x01\x09\x07", 4, 0, &d) == HM_E_MALFORMED &&
          d.seq == 0);
    CHECK(hm_msg_decode((const uint8_t *)"\x84\x01\x09\x00\x00", 5, 1, &d) == HM_OK);
    CHECK(hm_msg_decode((const uint8_t *)"\x84\x01\x09\x00\x01", 5, 1, &d) ==
          HM_E_REASSEMBLY);
}

static void cmd_selftest(void) {
    checks = 0;
    failed_line = 0;
    test_crc();
    test_cobs();
    test_frame();
    test_cbor_writer();
    test_cbor_reader();
    test_msg();
    if (failed_line) {
        hexio_word("fail");
        hexio_num((uint64_t)failed_line);
        hexio_bytes((const uint8_t *)failed_what, strlen(failed_what));
    } else {
        hexio_word("ok");
        hexio_num((uint64_t)checks);
    }
}

int main(void) {
    hexio_req q;
    while (hexio_next(&q)) {
        if (!strcmp(q.cmd, "selftest")) cmd_selftest();
        else if (!strcmp(q.cmd, "crc32")) cmd_crc32(&q);
        else if (!strcmp(q.cmd, "cobs")) cmd_cobs(&q);
        else if (!strcmp(q.cmd, "uncobs")) cmd_uncobs(&q);
        else if (!strcmp(q.cmd, "cbor_check")) cmd_cbor_check(&q);
        else if (!strcmp(q.cmd, "frame_encode")) cmd_frame_encode(&q);
        else if (!strcmp(q.cmd, "frame_stream")) cmd_frame_stream(&q);
        else if (!strcmp(q.cmd, "msg_decode")) cmd_msg_decode(&q);
        else if (!strcmp(q.cmd, "msg_encode")) cmd_msg_encode(&q, 0);
        else if (!strcmp(q.cmd, "msg_encode_inner")) cmd_msg_encode(&q, 1);
        else if (!strcmp(q.cmd, "piece_split")) cmd_piece_split(&q);
        else if (!strcmp(q.cmd, "piece_join")) cmd_piece_join(&q);
        else if (!strcmp(q.cmd, "body_seq")) hexio_num(hm_body_seq(q.bytes[0], q.len[0]));
        else {
            fprintf(stderr, "t_wire: unknown command %s\n", q.cmd);
            return 2;
        }
        hexio_end();
        hexio_free(&q);
    }
    return 0;
}
