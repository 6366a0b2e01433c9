/* t_core — drive hm_fixed, hm_gate and hm_ring from tests/test_native_core.py.
 *
 * One request per line (hexio.h notation), one answer line each:
 *
 *   mul a b                 q16 product, or "overflow"
 *   isqrt n                 hm_isqrt_round(n)
 *   sqrt a / sqrt_mul a b   hm_q_sqrt / hm_q_sqrt_mul
 *   gate flags q p          h i r f c rn w verdict hard state, or "reserved" / "range"
 *   normalise flags x<payload> x<source> ts x<context>      normalised flags
 *
 *   ring_init cap arena x<device_id> boot        "ok" or "bad_arg"
 *   ring_capture x<payload> x<source> ts [x<context>]
 *                           "ok" idx x<id>, or "refused_full" / "refused_invalid"
 *                           (no context: 32 zero bytes; a context not 32 bytes long is
 *                           passed as NULL)
 *   ring_get idx / ring_peek idx
 *                           "ok" x<id> state layer pack x<payload> x<source> ts x<context>
 *                           or "none" (get is an access, peek is not)
 *   ring_state idx state    "ok" or an error word
 *   ring_gate idx flags q p prio   "ok" flags h i r f c rn w verdict hard state, or error
 *   ring_chain idx x<hash> x<prev_hash>    "ok" or error
 *   ring_hashes idx         chained x<hash> x<prev_hash>, or "none"
 *   ring_pin idx tag / ring_unpin idx / ring_release idx   "ok" or an error word
 *   ring_unpin_pack tag / ring_release_pack tag            how many records
 *   ring_next after_seq select      slot index or -1
 *   ring_counters           captures evictions refusals quarantines candidates used
 *                           volatiles pinned arena_used
 *   ring_list               idx seq state pack for every live slot, in slot order
 *   ring_lru                volatile slots, most recently accessed first
 *   selftest                "ok", or "fail" and the line of the failed check
 *
 * Error words: no_record, bad_state, bad_arg. After every ring command the ring's
 * invariants (hm_ring.h I1..I8) are checked; a broken one ends the program with
 * exit status 1 and a message on stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hexio.h"
#include "ring_check.h"
#include "ring_words.h"
#include "hm_fixed.h"
#include "hm_gate.h"
#include "hm_ring.h"

static hm_ring ring;

/* ---- the SPEC §9.1 bit-by-bit reference, to check hm_isqrt_round against ---- */

static uint64_t isqrt_round_ref(uint64_t n) {
    uint64_t rem = n, r = 0, bit = (uint64_t)1 << 62;
    while (bit > rem) bit >>= 2;
    while (bit != 0) {
        if (rem >= r + bit) {
            rem -= r + bit;
            r = (r >> 1) + bit;
        } else {
            r >>= 1;
        }
        bit >>= 2;
    }
    return rem > r ? r + 1 : r;
}

/* ---- answers ---- */


static void put_gate(const hm_gate_result *g) {
    hexio_num(g->h);
    hexio_num(g->i);
    hexio_num(g->r);
    hexio_num(g->f);
    hexio_num(g->c);
    hexio_num(g->rn);
    hexio_num(g->w);
    hexio_num(g->verdict);
    hexio_num(g->hard);
    hexio_num(g->state);
}

static void put_record(const hm_ring_record *rec) {
    uint8_t id[HM_RECORD_ID_SIZE];
    if (!rec) {
        hexio_word("none");
        return;
    }
    hm_ring_id(&ring, rec, id);
    hexio_word("ok");
    hexio_bytes(id, sizeof id);
    hexio_num(rec->state);
    hexio_num(rec->layer);
    hexio_num(rec->pack);
    hexio_bytes(hm_ring_payload(&ring, rec), rec->payload_len);
    hexio_bytes(hm_ring_source(&ring, rec), rec->source_len);
    hexio_num(rec->timestamp);
    hexio_bytes(rec->context, sizeof rec->context);
}

static int arg_index(const hexio_req *rq, int k) {
    /* Indexes beyond int range become -1: no record. */
    return rq->num[k] > 1000000u ? -1 : (int)rq->num[k];
}

/* ---- C-only unit tests ---- */

static const uint8_t dev[HM_ID_SIZE] = {1, 2, 3, 4, 5, 6, 7, 8};
static const uint8_t ctx0[HM_HASH_SIZE];

static int selftest(void) {
    uint32_t out;
    int idx, a, b2;
    uint8_t id[HM_RECORD_ID_SIZE], pl[256];

#define CHECK(cond)                    \
    do {                               \
        if (!(cond)) return __LINE__;  \
    } while (0)

    /* isqrt against the SPEC reference: every n < 2^20, then scattered values of
     * every magnitude, squares and their neighbours. */
    for (uint64_t n = 0; n < (1u << 20); n++)
        if (hm_isqrt_round(n) != isqrt_round_ref(n)) CHECK(0);
    {
        uint64_t x = 0x9E3779B97F4A7C15ull;
        for (int k = 0; k < 2000000; k++) {
            uint64_t n;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            n = x >> (x & 63);
            if (hm_isqrt_round(n) != isqrt_round_ref(n)) CHECK(0);
            n = (x >> 32) * (x >> 32) + (uint64_t)(k % 3) - 1u; /* square - 1, +0, +1 */
            if (hm_isqrt_round(n) != isqrt_round_ref(n)) CHECK(0);
        }
    }
    CHECK(hm_isqrt_round(UINT64_MAX) == (uint64_t)1 << 32);
    CHECK(hm_isqrt_round(0xFFFFFFFF00000000ull) == 0xFFFFFFFFull);    /* r^2 + r - ... */
    CHECK(hm_isqrt_round(0xFFFFFFFF00000001ull) == (uint64_t)1 << 32); /* 2^64 - 2^32 + 1 */

    /* hm_q_mul: the largest exact result, the first overflow; *out untouched then. */
    out = 7;
    CHECK(hm_q_mul(0xFFFFFFFFu, HM_Q_ONE, &out) == HM_FIXED_OK && out == 0xFFFFFFFFu);
    out = 7;
    CHECK(hm_q_mul(0xFFFFFFFFu, HM_Q_ONE + 1u, &out) == HM_FIXED_OVERFLOW && out == 7);
    CHECK(hm_q_mul(0x10000u, 0xFFFF8000u, &out) == HM_FIXED_OK && out == 0xFFFF8000u);
    CHECK(hm_q_mul_unit(0xFFFFFFFFu, HM_Q_ONE) == 0xFFFFFFFFu);

    /* Gate: nothing written on an error. */
    {
        hm_gate_result g;
        memset(&g, 0xA5, sizeof g);
        CHECK(hm_gate_evaluate(0x1000u, HM_Q_ONE, HM_Q_ONE, &g) == HM_GATE_RESERVED);
        CHECK(hm_gate_evaluate(0x10FFFu, HM_Q_ONE, HM_Q_ONE, &g) == HM_GATE_RESERVED);
        CHECK(hm_gate_evaluate(0x0FFFu, HM_Q_ONE + 1u, 0, &g) == HM_GATE_RANGE);
        CHECK(hm_gate_evaluate(0x1FFFu, HM_Q_ONE + 1u, 0, &g) == HM_GATE_RESERVED);
        CHECK(g.h == 0xA5A5A5A5u && g.state == 0xA5u);
    }

    /* init_sized bounds. */
    CHECK(hm_ring_init_sized(&ring, dev, 1, 0, HM_ARENA_SIZE) == HM_RING_BAD_ARG);
    CHECK(hm_ring_init_sized(&ring, dev, 1, HM_RING_CAPACITY + 1, HM_ARENA_SIZE) == HM_RING_BAD_ARG);
    CHECK(hm_ring_init_sized(&ring, dev, 1, 4, 319) == HM_RING_BAD_ARG);
    CHECK(hm_ring_init_sized(&ring, dev, 1, 4, HM_ARENA_SIZE + 1) == HM_RING_BAD_ARG);
    CHECK(hm_ring_init_sized(&ring, dev, 1, 4, 320) == HM_RING_OK);
    check_ring_or_exit("t_core", &ring);

    /* NULL pointers with lengths are refused, and counted; NULL with length 0 is fine. */
    CHECK(hm_ring_capture(&ring, NULL, 1, NULL, 0, 1, ctx0, &idx) == HM_RING_REFUSED_INVALID);
    CHECK(hm_ring_capture(&ring, NULL, 0, NULL, 1, 1, ctx0, &idx) == HM_RING_REFUSED_INVALID);
    CHECK(hm_ring_capture(&ring, NULL, 0, NULL, 0, 1, NULL, &idx) == HM_RING_REFUSED_INVALID);
    CHECK(hm_ring_capture(&ring, NULL, 0, NULL, 0, 1, ctx0, NULL) == HM_RING_OK);
    CHECK(ring.counters.captures == 4 && ring.counters.refusals == 3 && ring.counters.used == 1);
    check_ring_or_exit("t_core", &ring);

    /* The largest record fits an empty ring of the smallest arena: 32 blocks of 10. */
    memset(pl, 0x5A, sizeof pl);
    CHECK(hm_ring_capture(&ring, pl, 256, pl, 64, 1, ctx0, &idx) == HM_RING_OK);
    CHECK(ring.counters.arena_used == 320 && ring.counters.evictions == 0);
    CHECK(ring.used_blocks == 0xFFFFFFFFu);
    /* Now a 1-byte capture must evict the big record (the LRU is the empty one, first;
     * evicting it frees no block, so the big one goes too). */
    CHECK(hm_ring_capture(&ring, pl, 1, NULL, 0, 1, ctx0, &idx) == HM_RING_OK);
    CHECK(ring.counters.evictions == 2 && ring.counters.used == 1 && ring.counters.arena_used == 10);
    check_ring_or_exit("t_core", &ring);

    /* Every surviving byte stays where it was: records of distinct sizes and contents,
     * evicted from the middle by accessing around them. */
    hm_ring_init(&ring, dev, 9);
    for (int k = 0; k < 12; k++) {
        uint8_t p[200], s[40];
        memset(p, 0x10 + k, sizeof p);
        memset(s, 0x80 + k, sizeof s);
        CHECK(hm_ring_capture(&ring, p, (size_t)(37 * k % 200), s, (size_t)(k * 3 % 40), 5,
                              ctx0, &idx) == HM_RING_OK);
    }
    check_ring_or_exit("t_core", &ring);
    for (int k = 0; k < 12; k += 2) CHECK(hm_ring_gate(&ring, k, 0x0FFF, HM_Q_ONE, HM_Q_ONE, 0, NULL) == HM_RING_OK);
    for (int k = 1; k < 12; k += 4) CHECK(hm_ring_get(&ring, k) != NULL);
    for (int k = 0; k < 6; k++) {
        uint8_t p[256];
        memset(p, 0xEE, sizeof p);
        CHECK(hm_ring_capture(&ring, p, 256, NULL, 0, 5, ctx0, &idx) == HM_RING_OK);
        check_ring_or_exit("t_core", &ring);
    }
    for (int k = 0; k < HM_RING_CAPACITY; k++) {
        const hm_ring_record *r = hm_ring_peek(&ring, k);
        const uint8_t *p, *s;
        unsigned orig;
        if (!r) continue;
        p = hm_ring_payload(&ring, r);
        s = hm_ring_source(&ring, r);
        orig = r->seq <= 12 ? r->seq - 1u : 99u;
        for (unsigned b = 0; b < r->payload_len; b++)
            CHECK(p[b] == (orig == 99u ? 0xEE : 0x10 + orig));
        for (unsigned b = 0; b < r->source_len; b++) CHECK(s[b] == 0x80 + orig);
    }

    /* seq is never reused: at 2^32 - 1 the ring refuses (backpressure). */
    hm_ring_init(&ring, dev, 0xA0B0C0D0u);
    ring.seq = UINT32_MAX - 1u;
    ring.counters.captures = UINT32_MAX - 1u; /* keep I8 (captures = stored + refusals) */
    CHECK(hm_ring_capture(&ring, pl, 3, NULL, 0, 1, ctx0, &idx) == HM_RING_OK);
    hm_ring_id(&ring, hm_ring_peek(&ring, idx), id);
    CHECK(memcmp(id, "\1\2\3\4\5\6\7\x08\xa0\xb0\xc0\xd0\xff\xff\xff\xff", 16) == 0);
    CHECK(hm_ring_capture(&ring, pl, 3, NULL, 0, 1, ctx0, &idx) == HM_RING_REFUSED_FULL);
    CHECK(ring.counters.refusals == 1 && ring.counters.used == 1);
    check_ring_or_exit("t_core", &ring);

    /* Transitions, pins, chain fields, iteration order. */
    hm_ring_init_sized(&ring, dev, 2, 5, 1000);
    for (int k = 0; k < 5; k++) CHECK(hm_ring_capture(&ring, pl, 10, pl, 2, 7, ctx0, &idx) == HM_RING_OK && idx == k);
    CHECK(hm_ring_set_state(&ring, 0, HM_STATE_CANDIDATE) == HM_RING_OK);
    CHECK(hm_ring_set_state(&ring, 0, HM_STATE_QUARANTINED) == HM_RING_BAD_STATE);
    CHECK(hm_ring_set_state(&ring, 1, HM_STATE_CONSOLIDATED) == HM_RING_BAD_STATE);
    CHECK(hm_ring_set_state(&ring, 1, HM_STATE_VOLATILE) == HM_RING_BAD_STATE);
    CHECK(hm_ring_set_state(&ring, 1, 5) == HM_RING_BAD_ARG);
    CHECK(hm_ring_set_state(&ring, 5, HM_STATE_CANDIDATE) == HM_RING_NO_RECORD);
    CHECK(hm_ring_set_state(&ring, -1, HM_STATE_CANDIDATE) == HM_RING_NO_RECORD);
    CHECK(hm_ring_gate(&ring, 1, 0x0FFF, HM_Q_ONE, HM_Q_ONE, HM_Q_ONE + 1, NULL) == HM_RING_BAD_ARG);
    CHECK(hm_ring_gate(&ring, 1, 0x8FFF, HM_Q_ONE, HM_Q_ONE, 0, NULL) == HM_RING_BAD_ARG);
    CHECK(hm_ring_peek(&ring, 1)->state == HM_STATE_VOLATILE);
    CHECK(hm_ring_gate(&ring, 1, 0x07FF, HM_Q_ONE, HM_Q_ONE, 0x8000, NULL) == HM_RING_OK);
    CHECK(hm_ring_peek(&ring, 1)->state == HM_STATE_QUARANTINED);
    CHECK(hm_ring_gate(&ring, 1, 0x0FFF, HM_Q_ONE, HM_Q_ONE, 0, NULL) == HM_RING_BAD_STATE);
    CHECK(hm_ring_gate(&ring, 3, 0x0FFF, 0xE666, HM_Q_ONE, 0x8000, NULL) == HM_RING_OK);
    CHECK(hm_ring_peek(&ring, 3)->gate.w == 0xE666 && hm_ring_peek(&ring, 3)->priority == 0x8000);
    CHECK(ring.counters.candidates == 2 && ring.counters.quarantines == 1);
    {
        uint8_t h[HM_HASH_SIZE], ph[HM_HASH_SIZE];
        memset(h, 0x11, sizeof h);
        memset(ph, 0x22, sizeof ph);
        CHECK(hm_ring_set_chain(&ring, 2, h, ph) == HM_RING_BAD_STATE); /* volatile */
        CHECK(hm_ring_set_chain(&ring, 3, h, ph) == HM_RING_OK);
        CHECK(hm_ring_peek(&ring, 3)->hash[31] == 0x11 && hm_ring_peek(&ring, 3)->prev_hash[0] == 0x22);
        CHECK(hm_ring_peek(&ring, 3)->chained == 1);
        CHECK(hm_ring_pin(&ring, 3, 0) == HM_RING_BAD_ARG);
        CHECK(hm_ring_pin(&ring, 2, 9) == HM_RING_BAD_STATE);
        CHECK(hm_ring_pin(&ring, 3, 9) == HM_RING_OK);
        CHECK(hm_ring_pin(&ring, 3, 9) == HM_RING_BAD_STATE);
        CHECK(hm_ring_set_chain(&ring, 3, h, ph) == HM_RING_BAD_STATE); /* pinned */
    }
    /* Capture order over packable records: slots 0 (seq 1), 1 (seq 2); 3 is pinned. */
    a = hm_ring_next(&ring, 0, HM_RING_SEL_PACKABLE);
    b2 = hm_ring_next(&ring, hm_ring_peek(&ring, a)->seq, HM_RING_SEL_PACKABLE);
    CHECK(a == 0 && b2 == 1 && hm_ring_next(&ring, 2, HM_RING_SEL_PACKABLE) == -1);
    CHECK(hm_ring_next(&ring, 0, HM_RING_SEL_CANDIDATE | HM_RING_SEL_PINNED) == 3);
    CHECK(hm_ring_next(&ring, 3, HM_RING_SEL_VOLATILE) == 4);
    CHECK(hm_ring_pin(&ring, 0, 9) == HM_RING_OK && hm_ring_pin(&ring, 1, 10) == HM_RING_OK);
    CHECK(hm_ring_unpin_pack(&ring, 10) == 1 && hm_ring_peek(&ring, 1)->pack == 0);
    CHECK(hm_ring_unpin(&ring, 1) == HM_RING_BAD_STATE);
    CHECK(hm_ring_release(&ring, 1) == HM_RING_BAD_STATE); /* not acknowledged */
    CHECK(hm_ring_release_pack(&ring, 0) == 0);
    CHECK(hm_ring_release_pack(&ring, 9) == 2 && ring.counters.used == 3);
    check_ring_or_exit("t_core", &ring);
    /* Freed LIFO: slot 3 was freed last, so it is taken first, then 0. */
    CHECK(hm_ring_capture(&ring, pl, 1, NULL, 0, 1, ctx0, &idx) == HM_RING_OK && idx == 3);
    CHECK(hm_ring_capture(&ring, pl, 1, NULL, 0, 1, ctx0, &idx) == HM_RING_OK && idx == 0);
    CHECK(ring.counters.evictions == 0);
    check_ring_or_exit("t_core", &ring);
#undef CHECK
    return 0;
}

int main(void) {
    hexio_req rq;
    hm_ring_init(&ring, dev, 0);
    while (hexio_next(&rq)) {
        const char *cmd = rq.cmd;
        int ring_cmd = strncmp(cmd, "ring_", 5) == 0;
        if (!strcmp(cmd, "mul")) {
            uint32_t out;
            if (rq.num[0] > HM_Q_MAX || rq.num[1] > HM_Q_MAX) hexio_word("range");
            else if (hm_q_mul((uint32_t)rq.num[0], (uint32_t)rq.num[1], &out) != HM_FIXED_OK)
                hexio_word("overflow");
            else hexio_num(out);
        } else if (!strcmp(cmd, "isqrt")) {
            hexio_num(hm_isqrt_round(rq.num[0]));
        } else if (!strcmp(cmd, "sqrt")) {
            hexio_num(hm_q_sqrt((uint32_t)rq.num[0]));
        } else if (!strcmp(cmd, "sqrt_mul")) {
            hexio_num(hm_q_sqrt_mul((uint32_t)rq.num[0], (uint32_t)rq.num[1]));
        } else if (!strcmp(cmd, "gate")) {
            hm_gate_result g;
            uint64_t f = rq.num[0], q = rq.num[1], p = rq.num[2];
            hm_gate_status st = hm_gate_evaluate(f > 0xFFFFFFFFu ? 0xFFFFFFFFu : (uint32_t)f,
                                                 q > 0xFFFFFFFFu ? 0xFFFFFFFFu : (uint32_t)q,
                                                 p > 0xFFFFFFFFu ? 0xFFFFFFFFu : (uint32_t)p, &g);
            if (st == HM_GATE_RESERVED) hexio_word("reserved");
            else if (st == HM_GATE_RANGE) hexio_word("range");
            else put_gate(&g);
        } else if (!strcmp(cmd, "normalise")) {
            hexio_num(hm_gate_normalise((uint32_t)rq.num[0], rq.len[1], rq.num[3], rq.len[4],
                                        rq.len[2]));
        } else if (!strcmp(cmd, "ring_init")) {
            uint8_t id[HM_ID_SIZE] = {0};
            memcpy(id, rq.bytes[2], rq.len[2] < HM_ID_SIZE ? rq.len[2] : HM_ID_SIZE);
            hexio_word(ring_status_word(hm_ring_init_sized(&ring, id, (uint32_t)rq.num[3],
                                                      (unsigned)rq.num[0], (unsigned)rq.num[1])));
        } else if (!strcmp(cmd, "ring_capture")) {
            int idx = -1;
            const uint8_t *ctx = ctx0;
            hm_ring_status st;
            if (rq.argc > 3) ctx = rq.len[3] == HM_HASH_SIZE ? rq.bytes[3] : NULL;
            st = hm_ring_capture(&ring, rq.bytes[0], rq.len[0], rq.bytes[1], rq.len[1],
                                 rq.num[2], ctx, &idx);
            hexio_word(ring_status_word(st));
            if (st == HM_RING_OK) {
                uint8_t id[HM_RECORD_ID_SIZE];
                hm_ring_id(&ring, hm_ring_peek(&ring, idx), id);
                hexio_num((uint64_t)idx);
                hexio_bytes(id, sizeof id);
            }
        } else if (!strcmp(cmd, "ring_get")) {
            put_record(hm_ring_get(&ring, arg_index(&rq, 0)));
        } else if (!strcmp(cmd, "ring_peek")) {
            put_record(hm_ring_peek(&ring, arg_index(&rq, 0)));
        } else if (!strcmp(cmd, "ring_state")) {
            hexio_word(ring_status_word(hm_ring_set_state(&ring, arg_index(&rq, 0), (unsigned)rq.num[1])));
        } else if (!strcmp(cmd, "ring_gate")) {
            hm_gate_result g;
            hm_ring_status st = hm_ring_gate(&ring, arg_index(&rq, 0), (uint32_t)rq.num[1],
                                             (uint32_t)rq.num[2], (uint32_t)rq.num[3],
                                             (uint32_t)rq.num[4], &g);
            hexio_word(ring_status_word(st));
            if (st == HM_RING_OK) {
                hexio_num(g.flags);
                put_gate(&g);
            }
        } else if (!strcmp(cmd, "ring_chain")) {
            hexio_word(rq.len[1] != HM_HASH_SIZE || rq.len[2] != HM_HASH_SIZE
                           ? "bad_arg"
                           : ring_status_word(hm_ring_set_chain(&ring, arg_index(&rq, 0), rq.bytes[1],
                                                           rq.bytes[2])));
        } else if (!strcmp(cmd, "ring_hashes")) {
            const hm_ring_record *r = hm_ring_peek(&ring, arg_index(&rq, 0));
            if (!r) {
                hexio_word("none");
            } else {
                hexio_num(r->chained);
                hexio_bytes(r->hash, sizeof r->hash);
                hexio_bytes(r->prev_hash, sizeof r->prev_hash);
            }
        } else if (!strcmp(cmd, "ring_pin")) {
            hexio_word(ring_status_word(hm_ring_pin(&ring, arg_index(&rq, 0), (uint32_t)rq.num[1])));
        } else if (!strcmp(cmd, "ring_unpin")) {
            hexio_word(ring_status_word(hm_ring_unpin(&ring, arg_index(&rq, 0))));
        } else if (!strcmp(cmd, "ring_release")) {
            hexio_word(ring_status_word(hm_ring_release(&ring, arg_index(&rq, 0))));
        } else if (!strcmp(cmd, "ring_unpin_pack")) {
            hexio_num(hm_ring_unpin_pack(&ring, (uint32_t)rq.num[0]));
        } else if (!strcmp(cmd, "ring_release_pack")) {
            hexio_num(hm_ring_release_pack(&ring, (uint32_t)rq.num[0]));
        } else if (!strcmp(cmd, "ring_next")) {
            hexio_snum(hm_ring_next(&ring, (uint32_t)rq.num[0], (unsigned)rq.num[1]));
        } else if (!strcmp(cmd, "ring_counters")) {
            const hm_ring_counters *c = &ring.counters;
            hexio_num(c->captures);
            hexio_num(c->evictions);
            hexio_num(c->refusals);
            hexio_num(c->quarantines);
            hexio_num(c->candidates);
            hexio_num(c->used);
            hexio_num(c->volatiles);
            hexio_num(c->pinned);
            hexio_num(c->arena_used);
        } else if (!strcmp(cmd, "ring_list")) {
            for (unsigned k = 0; k < ring.capacity; k++) {
                const hm_ring_record *r = &ring.rec[k];
                if (!r->seq) continue;
                hexio_num(k);
                hexio_num(r->seq);
                hexio_num(r->state);
                hexio_num(r->pack);
            }
        } else if (!strcmp(cmd, "ring_lru")) {
            for (unsigned k = ring.mru; k != HM_RING_NIL; k = ring.rec[k].next) hexio_num(k);
        } else if (!strcmp(cmd, "selftest")) {
            int failed = selftest();
            hm_ring_init(&ring, dev, 0);
            if (failed) {
                hexio_word("fail");
                hexio_num((uint64_t)failed);
            } else {
                hexio_word("ok");
            }
        } else {
            fprintf(stderr, "t_core: unknown command %s\n", cmd);
            return 2;
        }
        hexio_end();
        if (ring_cmd) check_ring_or_exit("t_core", &ring);
        hexio_free(&rq);
    }
    return 0;
}
