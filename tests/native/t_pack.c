/* t_pack — drive hm_record and hm_pack from tests/test_native_pack.py.
 *
 * One request per line (hexio.h notation), one answer line each:
 *
 *   init x<device_id> boot x<seed> x<kid> [capacity arena]
 *                           a fresh ring (hm_ring_init_sized) and packer; "ok" / "bad_arg"
 *   capture x<payload> x<source> ts x<context> flags q p prio
 *                           capture and gate: "ok" idx seq state, or the ring's error word
 *   capturev x<payload> x<source> ts x<context>
 *                           capture only (stays VOLATILE): "ok" idx seq, or error word
 *   record idx x<prev>      x<wire> x<hash> x<hash_input> (record linked to prev; the
 *                           ring is not changed), or "none"
 *   build created cap       "ok" seq x<pack> x<pack_hash>, or nothing / space / busy /
 *                           exhausted / device
 *   result seq status reason        "ok", "unknown" or "bad_arg"
 *   head seq x<hash>        hm_pack_set_head: "ok"
 *   packer                  last_seq host_seq x<host_hash> x<prev> next_seq npending
 *                           then the seq of each pending pack
 *   counters                built acked duplicates refused deferred abandoned head_acked
 *                           records_sent records_released records_returned unsendable
 *                           last_reason
 *   ring                    used pinned volatiles captures refusals
 *   ring_list               seq state pinned chained, per live record in capture order
 *
 *   k_init [x<public> x<kid> x<host_id>]   knowledge store trusting that key (none
 *                           without arguments): "ok"
 *   k_head seq x<hash>      hm_knowledge_set_head: "ok"
 *   k_accept x<pack>        status reason held_seq x<last_pack_id> count (words: see
 *                           hm_pack_status_name / hm_pack_reason_name)
 *   k_items                 count, then x<triple_id> x<subject> x<predicate> x<object>
 *                           confidence per item
 *   sizes                   sizeof hm_packer, hm_knowledge, hm_knowledge_item,
 *                           hm_pack_pending, hm_ring
 *   limits                  HM_PACK_PENDING HM_KNOWLEDGE_CAPACITY HM_KNOWLEDGE_TEXT
 *                           HM_PACK_MIN_CAP HM_RECORD_MAX_SIZE HM_RING_CAPACITY
 *   selftest                "ok", or "fail" and the line of the failed check
 *
 * After every request the packer invariants P1, P4 and P5 of hm_pack.h are checked
 * against the ring; a broken one ends the program with exit status 1. k_accept also
 * checks that the pack bytes are unchanged after the call (they are moved in place).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hexio.h"
#include "ring_words.h"
#include "hm_crypto.h"
#include "hm_pack.h"
#include "hm_record.h"
#include "hm_ring.h"

static hm_ring ring;
static hm_packer packer;
static hm_knowledge know;
static hm_host_key host_key;
static uint8_t buf[HM_PACK_MAX + 64];

/* ---- invariants ---- */

static void broken(const char *what, unsigned long long detail) {
    fprintf(stderr, "t_pack: packer invariant broken: %s (%llu)\n", what, detail);
    exit(1);
}

static void check_packer(void) {
    const hm_packer *p = &packer;
    const hm_pack_counters *c = &p->counters;
    uint32_t i, j, k;
    if (p->npending > HM_PACK_PENDING) broken("npending", p->npending);
    /* P1 */
    for (i = 0; i < p->npending; i++) {
        const hm_pack_pending *e = &p->pending[i];
        if (e->seq <= p->host_seq || e->seq > p->last_seq) broken("pending seq range", e->seq);
        if (i && e->seq <= p->pending[i - 1].seq) broken("pending order", e->seq);
        if (e->tag == 0) broken("zero tag", i);
        for (j = 0; j < i; j++)
            if (p->pending[j].tag == e->tag) broken("repeated tag", e->tag);
    }
    /* P4 */
    for (i = 0; i < p->npending; i++) {
        uint32_t n = 0;
        for (k = 0; k < ring.capacity; k++)
            if (ring.rec[k].seq && ring.rec[k].pack == p->pending[i].tag) n++;
        if (n != p->pending[i].records) broken("records pinned to a pending pack", n);
    }
    for (k = 0; k < ring.capacity; k++) {
        const hm_ring_record *r = &ring.rec[k];
        if (!r->seq || !r->pack) continue;
        for (i = 0; i < p->npending && p->pending[i].tag != r->pack; i++) {
        }
        if (i == p->npending) broken("record pinned to no pending pack", r->seq);
        if (!r->chained) broken("pinned record not chained", r->seq);
    }
    /* P5 */
    if (c->records_sent != c->records_released + c->records_returned + ring.counters.pinned)
        broken("records_sent != released + returned + pinned", c->records_sent);
}

/* ---- answers ---- */


static const char *pack_word(hm_pack_err e) {
    switch (e) {
    case HM_PACK_OK: return "ok";
    case HM_PACK_NOTHING: return "nothing";
    case HM_PACK_E_SPACE: return "space";
    case HM_PACK_E_BUSY: return "busy";
    case HM_PACK_E_EXHAUSTED: return "exhausted";
    case HM_PACK_E_DEVICE: return "device";
    case HM_PACK_E_UNKNOWN: return "unknown";
    case HM_PACK_E_ARG: return "bad_arg";
    }
    return "?";
}

static const uint8_t *ctx_or_null(const hexio_req *req, int i) {
    return req->len[i] == HM_HASH_SIZE ? req->bytes[i] : NULL;
}

static void cmd_capture(const hexio_req *req, int gate) {
    int idx = -1;
    hm_ring_status st = hm_ring_capture(&ring, req->bytes[0], req->len[0], req->bytes[1],
                                        req->len[1], req->num[2], ctx_or_null(req, 3), &idx);
    if (st != HM_RING_OK) {
        hexio_word(ring_status_word(st));
        return;
    }
    if (gate) {
        hm_gate_result g;
        st = hm_ring_gate(&ring, idx, (uint32_t)req->num[4], (uint32_t)req->num[5],
                          (uint32_t)req->num[6], (uint32_t)req->num[7], &g);
        if (st != HM_RING_OK) {
            hexio_word(ring_status_word(st));
            return;
        }
    }
    hexio_word("ok");
    hexio_num((uint64_t)idx);
    hexio_num(ring.rec[idx].seq);
    if (gate) hexio_num(ring.rec[idx].state);
}

static void cmd_record(const hexio_req *req) {
    const hm_ring_record *rec = hm_ring_peek(&ring, (int)req->num[0]);
    static uint8_t wire[HM_RECORD_MAX_SIZE], input[HM_RECORD_HASH_INPUT_MAX];
    uint8_t hash[HM_HASH_SIZE];
    hm_cbor_w w, wi;
    if (!rec || req->len[1] != HM_HASH_SIZE) {
        hexio_word("none");
        return;
    }
    hm_cbor_w_init(&w, wire, sizeof wire);
    hm_cbor_w_init(&wi, input, sizeof input);
    if (hm_record_encode(&w, &ring, rec, req->bytes[1], hash) != HM_CBOR_OK) {
        hexio_word(hm_cbor_err_name(w.err));
        return;
    }
    hm_record_hash_input(&wi, &ring, rec, req->bytes[1]);
    if (wi.err || w.len != hm_record_size(rec)) broken("record size", w.len);
    hexio_bytes(wire, w.len);
    hexio_bytes(hash, sizeof hash);
    hexio_bytes(input, wi.len);
}

static void cmd_build(const hexio_req *req) {
    size_t len = 0;
    uint64_t seq = 0;
    hm_pack_err e = hm_pack_build(&packer, &ring, req->num[0], buf, (size_t)req->num[1], &len,
                                  &seq);
    hexio_word(pack_word(e));
    if (e != HM_PACK_OK) return;
    hexio_num(seq);
    hexio_bytes(buf, len);
    hexio_bytes(packer.pending[packer.npending - 1].hash, HM_HASH_SIZE);
}

static void cmd_packer(void) {
    hexio_num(packer.last_seq);
    hexio_num(packer.host_seq);
    hexio_bytes(packer.host_hash, HM_HASH_SIZE);
    hexio_bytes(hm_pack_prev(&packer), HM_HASH_SIZE);
    hexio_num(hm_pack_next_seq(&packer));
    hexio_num(packer.npending);
    for (uint32_t i = 0; i < packer.npending; i++) hexio_num(packer.pending[i].seq);
}

static void cmd_counters(void) {
    const hm_pack_counters *c = &packer.counters;
    hexio_num(c->built);
    hexio_num(c->acked);
    hexio_num(c->duplicates);
    hexio_num(c->refused);
    hexio_num(c->deferred);
    hexio_num(c->abandoned);
    hexio_num(c->head_acked);
    hexio_num(c->records_sent);
    hexio_num(c->records_released);
    hexio_num(c->records_returned);
    hexio_num(c->unsendable);
    hexio_num(c->last_reason);
}

static void cmd_ring_list(void) {
    uint32_t after = 0;
    int idx;
    const unsigned all = HM_RING_SEL_VOLATILE | HM_RING_SEL_CANDIDATE | HM_RING_SEL_QUARANTINED;
    while ((idx = hm_ring_next(&ring, after, all)) >= 0) {
        const hm_ring_record *r = &ring.rec[idx];
        after = r->seq;
        hexio_num(r->seq);
        hexio_num(r->state);
        hexio_num(r->pack != 0);
        hexio_num(r->chained);
    }
}

static void cmd_k_accept(const hexio_req *req) {
    hm_pack_reason reason = HM_REASON_MALFORMED;
    uint8_t *copy = malloc(req->len[0] + 1);
    hm_pack_status st;
    if (!copy) exit(2);
    if (req->len[0]) memcpy(copy, req->bytes[0], req->len[0]);
    st = hm_knowledge_accept(&know, req->bytes[0], req->len[0], &reason);
    if (req->len[0] && memcmp(copy, req->bytes[0], req->len[0]) != 0) {
        fprintf(stderr, "t_pack: hm_knowledge_accept left the pack changed\n");
        exit(1);
    }
    free(copy);
    hexio_word(hm_pack_status_name(st));
    hexio_word(hm_pack_reason_name(reason));
    hexio_num(know.seq);
    hexio_bytes(know.last_pack_id, HM_PACK_ID_SIZE);
    hexio_num(know.count);
}

static void cmd_k_items(void) {
    hexio_num(know.count);
    for (uint32_t i = 0; i < know.count; i++) {
        const hm_knowledge_item *it = &know.items[i];
        hexio_bytes(it->triple_id, HM_TRIPLE_ID_SIZE);
        hexio_bytes(it->subject, it->subject_len);
        hexio_bytes(it->predicate, it->predicate_len);
        hexio_bytes(it->object, it->object_len);
        hexio_num(it->confidence);
    }
}

/* ---- selftest: what only C can reach ---- */

#define CHECK(cond)                                                                       \
    do {                                                                                  \
        if (!(cond)) return __LINE__;                                                     \
    } while (0)

static const uint8_t dev[HM_ID_SIZE] = {1, 2, 3, 4, 5, 6, 7, 8};

static int capture_gated(hm_ring *rg, size_t payload_len, const char *source,
                         uint64_t ts, uint32_t q) {
    static uint8_t payload[HM_MAX_PAYLOAD];
    uint8_t ctx[HM_HASH_SIZE];
    int idx = -1;
    memset(payload, 'p', sizeof payload);
    memset(ctx, 0x5A, sizeof ctx);
    if (hm_ring_capture(rg, payload, payload_len, (const uint8_t *)source, strlen(source), ts,
                        ctx, &idx) != HM_RING_OK)
        return -1;
    if (hm_ring_gate(rg, idx, 0x0FFF, q, q, q, NULL) != HM_RING_OK) return -1;
    return idx;
}

static int selftest(void) {
    static hm_ring rg;
    static hm_packer pk;
    static uint8_t out[2048];
    static const char src64[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    uint8_t seed[HM_SEED_SIZE], pub[HM_PUBLIC_KEY_SIZE], kid[HM_KID_SIZE];
    uint8_t prev[HM_HASH_SIZE], h1[HM_HASH_SIZE], h2[HM_HASH_SIZE];
    size_t len = 0;
    uint64_t seq = 0;
    hm_cbor_w w;
    int a, b;

    memset(seed, 0x11, sizeof seed);
    hm_public_key(pub, seed);
    memset(kid, 0x22, sizeof kid);
    memset(prev, 0x33, sizeof prev);

    /* The largest record is HM_RECORD_MAX_SIZE bytes, and a pack of it with the largest
     * seq and created time needs exactly HM_PACK_MIN_CAP bytes. */
    hm_ring_init(&rg, dev, 9);
    hm_pack_init(&pk, dev, 9, seed, pub, kid);
    a = capture_gated(&rg, HM_MAX_PAYLOAD, src64, UINT64_MAX, HM_Q_ONE);
    CHECK(a >= 0 && hm_record_size(&rg.rec[a]) == HM_RECORD_MAX_SIZE);
    hm_pack_set_head(&pk, &rg, UINT64_MAX - 1, prev);
    CHECK(hm_pack_build(&pk, &rg, UINT64_MAX, out, HM_PACK_MIN_CAP - 1, &len, &seq) ==
          HM_PACK_E_SPACE);
    CHECK(pk.counters.built == 0 && rg.counters.pinned == 0 && !rg.rec[a].chained);
    CHECK(hm_pack_build(&pk, &rg, UINT64_MAX, out, HM_PACK_MIN_CAP, &len, &seq) == HM_PACK_OK);
    CHECK(len == HM_PACK_MIN_CAP && seq == UINT64_MAX && rg.counters.pinned == 1);
    /* seq 2^64 - 1 used: nothing more can be signed, ever */
    b = capture_gated(&rg, 4, "s", 1, HM_Q_ONE);
    CHECK(b >= 0);
    CHECK(hm_pack_build(&pk, &rg, 1, out, sizeof out, &len, &seq) == HM_PACK_E_EXHAUSTED);
    CHECK(hm_pack_next_seq(&pk) == 0);

    /* Record encoding: overflow leaves w->len where it was, and hash may alias prev. */
    hm_cbor_w_init(&w, out, 100);
    w.len = 3;
    CHECK(hm_record_encode(&w, &rg, &rg.rec[b], prev, h1) == HM_CBOR_E_OVERFLOW);
    CHECK(w.len == 3 && w.err == HM_CBOR_E_OVERFLOW);
    CHECK(hm_record_encode(&w, &rg, &rg.rec[b], prev, h1) == HM_CBOR_E_OVERFLOW); /* sticky */
    hm_cbor_w_init(&w, out, sizeof out);
    CHECK(hm_record_encode(&w, &rg, &rg.rec[b], prev, h1) == HM_CBOR_OK);
    CHECK(w.len == hm_record_size(&rg.rec[b]));
    memcpy(h2, prev, sizeof h2);
    hm_cbor_w_init(&w, out + 1024, 1024);
    CHECK(hm_record_encode(&w, &rg, &rg.rec[b], h2, h2) == HM_CBOR_OK);
    CHECK(memcmp(h1, h2, sizeof h1) == 0 && memcmp(out, out + 1024, w.len) == 0);
    /* the record encoding for exactly the record's size fits; one byte less does not */
    hm_cbor_w_init(&w, out, hm_record_size(&rg.rec[b]));
    CHECK(hm_record_encode(&w, &rg, &rg.rec[b], prev, h1) == HM_CBOR_OK);
    hm_cbor_w_init(&w, out, hm_record_size(&rg.rec[b]) - 1);
    CHECK(hm_record_encode(&w, &rg, &rg.rec[b], prev, h1) == HM_CBOR_E_OVERFLOW && w.len == 0);

    /* A source that is not UTF-8 cannot travel: skipped, counted, kept in the ring. */
    hm_ring_init(&rg, dev, 3);
    hm_pack_init(&pk, dev, 3, seed, pub, kid);
    a = capture_gated(&rg, 4, "\xff", 5, HM_Q_ONE);
    CHECK(a >= 0);
    hm_cbor_w_init(&w, out, sizeof out);
    CHECK(hm_record_encode(&w, &rg, &rg.rec[a], prev, h1) == HM_CBOR_E_UTF8 && w.len == 0);
    CHECK(hm_pack_build(&pk, &rg, 1, out, sizeof out, &len, &seq) == HM_PACK_NOTHING);
    CHECK(pk.counters.unsendable == 1);
    b = capture_gated(&rg, 4, "ok", 5, HM_Q_ONE);
    CHECK(hm_pack_build(&pk, &rg, 1, out, sizeof out, &len, &seq) == HM_PACK_OK);
    CHECK(seq == ((uint64_t)3 << 32 | 1) && pk.pending[0].records == 1);
    CHECK(rg.rec[b].pack && !rg.rec[a].pack && pk.counters.unsendable == 1);

    /* Pending table full: busy, and nothing is pinned by the refused build. */
    hm_ring_init(&rg, dev, 3);
    hm_pack_init(&pk, dev, 3, seed, pub, kid);
    for (unsigned i = 0; i < HM_PACK_PENDING; i++) {
        CHECK(capture_gated(&rg, 8, "x", 5, HM_Q_ONE) >= 0);
        CHECK(hm_pack_build(&pk, &rg, 1, out, sizeof out, &len, &seq) == HM_PACK_OK);
    }
    a = capture_gated(&rg, 8, "x", 5, HM_Q_ONE);
    CHECK(hm_pack_build(&pk, &rg, 1, out, sizeof out, &len, &seq) == HM_PACK_E_BUSY);
    CHECK(!rg.rec[a].pack && rg.counters.pinned == HM_PACK_PENDING);
    CHECK(hm_pack_result(&pk, &rg, 12345, HM_PACK_ACCEPTED, 0) == HM_PACK_E_UNKNOWN);
    CHECK(hm_pack_result(&pk, &rg, pk.pending[0].seq, 4, 0) == HM_PACK_E_ARG);
    CHECK(hm_pack_build(&pk, &rg, 1, NULL, sizeof out, &len, &seq) == HM_PACK_E_ARG);

    /* The ring of another device or boot is not packed. */
    hm_ring_init(&rg, dev, 4);
    CHECK(hm_pack_build(&pk, &rg, 1, out, sizeof out, &len, &seq) == HM_PACK_E_DEVICE);

    /* Wipe clears the seed. */
    hm_pack_wipe(&pk);
    for (size_t i = 0; i < sizeof pk.seed; i++) CHECK(pk.seed[i] == 0);

    /* Knowledge: too large before anything else, and no key at all: unknown-key. */
    {
        static hm_knowledge kn;
        static uint8_t big[HM_PACK_MAX + 1];
        hm_pack_reason reason = HM_REASON_NONE;
        hm_knowledge_init(&kn, NULL);
        CHECK(hm_knowledge_accept(&kn, big, sizeof big, &reason) == HM_PACK_REFUSED &&
              reason == HM_REASON_TOO_LARGE);
        CHECK(hm_knowledge_accept(&kn, big, 0, &reason) == HM_PACK_REFUSED &&
              reason == HM_REASON_MALFORMED);
        CHECK(kn.counters.refused == 2 && kn.counters.last_reason == HM_REASON_MALFORMED);
        CHECK(hm_knowledge_accept(&kn, big, 1, NULL) == HM_PACK_REFUSED);
    }
    return 0;
}

int main(void) {
    hexio_req req;
    static const uint8_t zero_id[HM_ID_SIZE] = {0};
    static const uint8_t zero_seed[HM_SEED_SIZE] = {0};
    hm_ring_init(&ring, zero_id, 0);
    hm_pack_init(&packer, zero_id, 0, zero_seed, zero_seed, zero_id);
    hm_knowledge_init(&know, NULL);
    while (hexio_next(&req)) {
        const char *c = req.cmd;
        if (!strcmp(c, "init") && (hexio_args(&req, "xnxx") || hexio_args(&req, "xnxxnn")) &&
            req.len[0] == HM_ID_SIZE && req.len[2] == HM_SEED_SIZE && req.len[3] == HM_KID_SIZE) {
            unsigned cap = req.argc == 6 ? (unsigned)req.num[4] : HM_RING_CAPACITY;
            unsigned arena = req.argc == 6 ? (unsigned)req.num[5] : HM_ARENA_SIZE;
            hm_ring_status st =
                hm_ring_init_sized(&ring, req.bytes[0], (uint32_t)req.num[1], cap, arena);
            uint8_t pub[HM_PUBLIC_KEY_SIZE];
            hm_public_key(pub, req.bytes[2]);
            hm_pack_init(&packer, req.bytes[0], (uint32_t)req.num[1], req.bytes[2], pub,
                         req.bytes[3]);
            hexio_word(ring_status_word(st));
        } else if (!strcmp(c, "capture") && hexio_args(&req, "xxnxnnnn")) {
            cmd_capture(&req, 1);
        } else if (!strcmp(c, "capturev") && hexio_args(&req, "xxnx")) {
            cmd_capture(&req, 0);
        } else if (!strcmp(c, "record") && hexio_args(&req, "nx")) {
            cmd_record(&req);
        } else if (!strcmp(c, "build") && hexio_args(&req, "nn")) {
            cmd_build(&req);
        } else if (!strcmp(c, "result") && hexio_args(&req, "nnn")) {
            hexio_word(pack_word(hm_pack_result(&packer, &ring, req.num[0], (unsigned)req.num[1],
                                                (unsigned)req.num[2])));
        } else if (!strcmp(c, "head") && hexio_args(&req, "nx") && req.len[1] == HM_HASH_SIZE) {
            hm_pack_set_head(&packer, &ring, req.num[0], req.bytes[1]);
            hexio_word("ok");
        } else if (!strcmp(c, "packer") && hexio_args(&req, "")) {
            cmd_packer();
        } else if (!strcmp(c, "counters") && hexio_args(&req, "")) {
            cmd_counters();
        } else if (!strcmp(c, "ring") && hexio_args(&req, "")) {
            hexio_num(ring.counters.used);
            hexio_num(ring.counters.pinned);
            hexio_num(ring.counters.volatiles);
            hexio_num(ring.counters.captures);
            hexio_num(ring.counters.refusals);
        } else if (!strcmp(c, "ring_list") && hexio_args(&req, "")) {
            cmd_ring_list();
        } else if (!strcmp(c, "k_init") && hexio_args(&req, "xxx") &&
                   req.len[0] == HM_PUBLIC_KEY_SIZE && req.len[1] == HM_KID_SIZE &&
                   req.len[2] == HM_ID_SIZE) {
            memcpy(host_key.public_key, req.bytes[0], HM_PUBLIC_KEY_SIZE);
            memcpy(host_key.kid, req.bytes[1], HM_KID_SIZE);
            memcpy(host_key.host_id, req.bytes[2], HM_ID_SIZE);
            hm_knowledge_init(&know, &host_key);
            hexio_word("ok");
        } else if (!strcmp(c, "k_init") && hexio_args(&req, "")) {
            hm_knowledge_init(&know, NULL);
            hexio_word("ok");
        } else if (!strcmp(c, "k_head") && hexio_args(&req, "nx") && req.len[1] == HM_HASH_SIZE) {
            hm_knowledge_set_head(&know, req.num[0], req.bytes[1]);
            hexio_word("ok");
        } else if (!strcmp(c, "k_accept") && hexio_args(&req, "x")) {
            cmd_k_accept(&req);
        } else if (!strcmp(c, "k_items") && hexio_args(&req, "")) {
            cmd_k_items();
        } else if (!strcmp(c, "sizes") && hexio_args(&req, "")) {
            hexio_num(sizeof(hm_packer));
            hexio_num(sizeof(hm_knowledge));
            hexio_num(sizeof(hm_knowledge_item));
            hexio_num(sizeof(hm_pack_pending));
            hexio_num(sizeof(hm_ring));
        } else if (!strcmp(c, "limits") && hexio_args(&req, "")) {
            hexio_num(HM_PACK_PENDING);
            hexio_num(HM_KNOWLEDGE_CAPACITY);
            hexio_num(HM_KNOWLEDGE_TEXT);
            hexio_num(HM_PACK_MIN_CAP);
            hexio_num(HM_RECORD_MAX_SIZE);
            hexio_num(HM_RING_CAPACITY);
        } else if (!strcmp(c, "selftest") && hexio_args(&req, "")) {
            int line = selftest();
            if (line) {
                hexio_word("fail");
                hexio_num((uint64_t)line);
            } else {
                hexio_word("ok");
            }
        } else {
            hexio_word("bad-request");
        }
        hexio_end();
        hexio_free(&req);
        check_packer();
    }
    return 0;
}
