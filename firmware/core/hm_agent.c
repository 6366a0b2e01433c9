#include "hm_agent.h"

#include <stddef.h>
#include <string.h>

#include "hm_cbor.h"
#include "hm_crypto.h"

#define U32_MAX 0xFFFFFFFFu

/* ---- clock -------------------------------------------------------------------- */

static uint64_t tick(hm_agent *a) {
    uint32_t raw = a->io.now_ms(a->io.ctx);
    a->now += (uint32_t)(raw - a->last_raw);
    a->last_raw = raw;
    return a->now;
}

/* 1 once `ms` have passed since `from` (the low 32 bits of now when it started). */
static int passed(const hm_agent *a, uint32_t from, uint32_t ms) {
    return (uint32_t)a->now - from >= ms;
}

uint64_t hm_agent_wall_ms(const hm_agent *a) {
    return a->wall_known ? (uint64_t)((int64_t)a->now + a->wall_offset) : 0;
}

/* ---- output ------------------------------------------------------------------- */

/* Frame and write one body. ack: the ack it carries (clears an owed ack if current). */
static void tx(hm_agent *a, const uint8_t *body, size_t len, uint32_t ack) {
    size_t mf = a->session ? a->max_frame : HM_FRAME_FLOOR;
    size_t n = hm_frame_encode(body, len, mf, a->wire, sizeof a->wire);
    if (n == 0) return; /* cannot happen: every body is sized for the frame */
    a->io.write(a->io.ctx, a->wire, n);
    if (a->session && ack == a->expected - 1) a->ack_due = 0;
}

/* Encode and send an unsequenced message (ACK, ERROR, LOG) with the current ack. */
static void tx_unsequenced(hm_agent *a, hm_msg *m) {
    size_t len;
    m->seq = 0;
    m->ack = a->session ? a->expected - 1 : 0;
    if (hm_msg_encode(m, 0, a->scratch, sizeof a->scratch, &len) != HM_OK) return;
    if (!a->session && len + HM_FRAME_CRC_SIZE > HM_FRAME_FLOOR) return;
    tx(a, a->scratch, len, m->ack);
}

static void send_error(hm_agent *a, unsigned code, uint32_t ref, const char *detail) {
    hm_msg m;
    memset(&m, 0, sizeof m);
    m.type = HM_MSG_ERROR;
    m.u.error.code = (uint8_t)code;
    m.u.error.ref = ref;
    m.u.error.detail.ptr = (const uint8_t *)detail;
    m.u.error.detail.len = strlen(detail);
    a->counters.errors_sent++;
    tx_unsequenced(a, &m);
}

static void send_ack(hm_agent *a) {
    hm_msg m;
    memset(&m, 0, sizeof m);
    m.type = HM_MSG_ACK;
    a->counters.acks_sent++;
    tx_unsequenced(a, &m);
}

static void hello_msg(const hm_agent *a, hm_msg *m) {
    memset(m, 0, sizeof *m);
    m->type = HM_MSG_HELLO;
    m->seq = 1;
    m->ack = 0;
    m->u.hello.device_id.ptr = a->device_id;
    m->u.hello.device_id.len = HM_ID_SIZE;
    m->u.hello.board.ptr = (const uint8_t *)a->board;
    m->u.hello.board.len = strlen(a->board);
    m->u.hello.firmware.ptr = (const uint8_t *)a->firmware;
    m->u.hello.firmware.len = strlen(a->firmware);
    m->u.hello.boot = a->boot;
    m->u.hello.capabilities = a->capabilities;
    m->u.hello.max_frame = a->max_frame_offer;
    m->u.hello.max_message = a->max_message;
    m->u.hello.window = a->window_offer;
    m->u.hello.device_kid.ptr = a->device_kid;
    m->u.hello.device_kid.len = HM_KID_SIZE;
    m->u.hello.host_kid.ptr = a->host_key ? a->host_key->kid : a->device_kid;
    m->u.hello.host_kid.len = a->host_key ? HM_KID_SIZE : 0;
    if (a->capabilities & HM_CAP_KNOWLEDGE) { /* what hm_knowledge keeps (SPEC 5.2) */
        m->u.hello.knowledge_facts = HM_KNOWLEDGE_CAPACITY;
        m->u.hello.knowledge_text = HM_KNOWLEDGE_TEXT;
    }
}

/* The HELLO body into scratch; 0 if it does not fit a 128-byte frame. */
static size_t hello_body(hm_agent *a) {
    hm_msg m;
    size_t len;
    hello_msg(a, &m);
    if (hm_msg_encode(&m, 0, a->scratch, sizeof a->scratch, &len) != HM_OK ||
        len + HM_FRAME_CRC_SIZE > HM_FRAME_FLOOR)
        return 0;
    return len;
}

static void send_hello(hm_agent *a) {
    size_t len = hello_body(a);
    if (!len) return;
    a->counters.hellos++;
    tx(a, a->scratch, len, 0);
}

static hm_agent_out *entry(hm_agent *a, unsigned i) {
    return &a->out[(a->out_head + i) % HM_AGENT_QUEUE];
}

/* Transmit seq s of the queue (snd_una <= s < next_seq: entry s - snd_una, A2). */
static void tx_seq(hm_agent *a, uint32_t s) {
    hm_agent_out *e = entry(a, s - a->snd_una);
    if (e->kind == HM_OUT_SMALL) {
        tx(a, e->body, e->len, e->ack);
    } else { /* the pack offer: one frame, or its pieces (SPEC 6.8) */
        size_t k, n, count = hm_piece_count(a->big_len, a->max_frame);
        if (count > 1) a->counters.fragments += (uint32_t)count;
        for (k = 0; k < count; k++)
            if (hm_piece_encode(a->big + a->big_off, a->big_len, a->max_frame, k, a->scratch,
                                sizeof a->scratch, &n) == HM_OK)
                tx(a, a->scratch, n, e->ack);
    }
}

static void timer_start(hm_agent *a) {
    a->timer_on = 1;
    a->timer_from = (uint32_t)a->now;
}

/* Send what the window allows. */
static void pump(hm_agent *a) {
    while (a->session && a->snd_nxt != a->next_seq && a->snd_nxt - a->snd_una < a->window) {
        tx_seq(a, a->snd_nxt);
        a->snd_nxt++;
        a->counters.sent++;
        if (!a->timer_on) timer_start(a);
    }
}

static int queue_full(const hm_agent *a) { return a->out_n >= HM_AGENT_QUEUE; }

/* Drop the session (SPEC §6.6; lost: 1 if one ended, counted) and start the
 * handshake again. One function for init and every session end. */
static void start_hello(hm_agent *a, uint32_t lost) {
    a->counters.sessions_lost += lost;
    a->session = 0;
    a->out_n = 0;
    a->out_head = 0;
    a->big_busy = 0;
    a->offered_n = 0;
    a->next_seq = a->snd_una = a->snd_nxt = 1;
    a->expected = 1;
    a->ack_due = 0;
    a->rto = HM_AGENT_RTO_MS;
    a->ntimeouts = 0;
    hm_join_reset(&a->join);
    send_hello(a);
    timer_start(a);
}


/* Queue a small sequenced message (encoded now, with the next seq and current ack). */
static int queue_small(hm_agent *a, hm_msg *m) {
    hm_agent_out *e;
    size_t len;
    if (!a->session || queue_full(a)) return -1;
    if (a->next_seq == U32_MAX) { /* SPEC §6.1: a new session before seq 2^32 */
        start_hello(a, 1);
        return -1;
    }
    e = entry(a, a->out_n);
    m->seq = a->next_seq;
    m->ack = a->expected - 1;
    if (hm_msg_encode(m, 0, e->body, sizeof e->body, &len) != HM_OK) return -1;
    if (len + HM_FRAME_CRC_SIZE > a->max_frame) return -1;
    e->seq = m->seq;
    e->ack = m->ack;
    e->len = (uint16_t)len;
    e->kind = HM_OUT_SMALL;
    a->out_n++;
    a->next_seq++;
    pump(a);
    return 0;
}

/* Build the PACK_OFFER head for `len` pack bytes ending at big + HM_AGENT_BIG_HEAD:
 * [1, 5, seq, ack, and the head of the pack bstr (the pack follows)]. */
static size_t offer_head(uint8_t hdr[HM_AGENT_BIG_HEAD], uint32_t seq, uint32_t ack,
                         size_t len) {
    hm_cbor_w w;
    size_t at;
    hm_cbor_w_init(&w, hdr, HM_AGENT_BIG_HEAD);
    hm_cbor_put_array(&w, 5);
    hm_cbor_put_uint(&w, HM_VERSION);
    hm_cbor_put_uint(&w, HM_MSG_PACK_OFFER);
    hm_cbor_put_uint(&w, seq);
    hm_cbor_put_uint(&w, ack);
    at = w.len;
    hm_cbor_put_uint(&w, len); /* the unsigned head of the argument, made major type 2 */
    hdr[at] |= 0x40u;
    return w.len;
}

/* Gated, unpinned records: every pinned record is gated (I5, I8 of hm_ring.h). */
static unsigned packable(const hm_agent *a) {
    const hm_ring_counters *rc = &a->ring.counters;
    return rc->used - rc->volatiles - rc->pinned;
}

static void offer_pack(hm_agent *a) {
    uint8_t hdr[HM_AGENT_BIG_HEAD];
    size_t cap = HM_AGENT_PACK_CAP, len, hl;
    uint64_t pseq;
    uint32_t ack = a->expected - 1;
    hm_agent_out *e;

    if (a->big_busy || queue_full(a) || a->offered_n >= 2 * HM_PACK_PENDING) return;
    if (a->host_max_message < HM_AGENT_BIG_HEAD + HM_PACK_MIN_CAP) return;
    if (a->host_max_message - HM_AGENT_BIG_HEAD < cap) cap = a->host_max_message - HM_AGENT_BIG_HEAD;
    if (hm_pack_build(&a->packer, &a->ring, hm_agent_wall_ms(a), a->big + HM_AGENT_BIG_HEAD,
                      cap, &len, &pseq) != HM_PACK_OK)
        return;
    hl = offer_head(hdr, a->next_seq, ack, len);
    e = entry(a, a->out_n);
    e->kind = HM_OUT_WHOLE;
    if (a->next_seq == U32_MAX) {
        /* cannot number it: the packer's pending pack is abandoned at the next head */
        start_hello(a, 1);
        return;
    }
    a->big_off = (uint16_t)(HM_AGENT_BIG_HEAD - hl);
    memcpy(a->big + a->big_off, hdr, hl);
    a->big_len = (uint32_t)(hl + len);
    a->big_busy = 1;
    e->seq = a->next_seq;
    e->ack = ack;
    e->len = 0;
    a->out_n++;
    a->next_seq++;
    a->offered[a->offered_n++] = pseq;
    a->counters.offers++;
    a->last_offer = (uint32_t)a->now;
    pump(a);
}

/* ---- STATUS ------------------------------------------------------------------- */

void hm_agent_status(hm_agent *a, hm_msg_status *st) {
    const hm_ring_counters *rc = &a->ring.counters;
    st->uptime_ms = a->now; /* now starts at 0 at init */
    st->ring_used = rc->used;
    st->ring_capacity = a->ring.capacity;
    st->captures = (uint64_t)rc->captures + a->counters.invalid;
    st->evictions = rc->evictions;
    st->refusals = (uint64_t)rc->refusals + a->counters.invalid;
    st->quarantined = rc->quarantines;
    st->candidates = rc->candidates;
    st->packs_sent = a->packer.counters.built;
    st->packs_acked = a->packer.counters.acked;
    st->frames_good = a->rx.frames;
    st->frames_bad = hm_frame_rx_bad(&a->rx);
    st->retransmits = a->counters.retransmits;
    st->knowledge_seq = a->knowledge.seq;
}

static int queue_status(hm_agent *a) {
    hm_msg m;
    memset(&m, 0, sizeof m);
    m.type = HM_MSG_STATUS;
    hm_agent_status(a, &m.u.status);
    a->last_status = (uint32_t)a->now;
    return queue_small(a, &m);
}

/* ---- captures ----------------------------------------------------------------- */

/* The seven scores h, i, r, f, c, rn, w: consecutive uint32_t in both structs. */
#define SCORES_SIZE (7 * sizeof(uint32_t))
typedef char hm_agent_scores_check[offsetof(hm_gate_result, w) - offsetof(hm_gate_result, h) ==
                                               6 * sizeof(uint32_t) &&
                                           offsetof(hm_msg_capture_result, w) -
                                                   offsetof(hm_msg_capture_result, h) ==
                                               6 * sizeof(uint32_t)
                                       ? 1
                                       : -1];

static unsigned do_capture(hm_agent *a, const uint8_t *payload, size_t plen,
                           const uint8_t *source, size_t slen, uint64_t ts,
                           const uint8_t *context, uint32_t flags, uint32_t q, uint32_t p,
                           uint32_t prio, hm_msg_capture_result *cr, uint8_t rid[16],
                           hm_gate_result *gout) {
    int idx;
    hm_gate_result g;
    hm_ring_status rs;
    memset(cr, 0, sizeof *cr);
    cr->verdict = HM_VERDICT_RED;
    cr->record_id.ptr = rid;
    cr->record_id.len = 0;
    if ((flags & ~(uint32_t)HM_FLAGS_DEFINED) != 0 || slen > HM_MAX_SOURCE ||
        plen > HM_MAX_PAYLOAD || q > HM_Q_ONE || p > HM_Q_ONE || prio > HM_Q_ONE ||
        !context || (slen && !hm_utf8_valid(source, slen))) {
        a->counters.invalid++;
        cr->status = HM_CAPTURE_REFUSED_INVALID;
        return cr->status;
    }
    rs = hm_ring_capture(&a->ring, payload, plen, source, slen, ts, context, &idx);
    if (rs != HM_RING_OK) {
        cr->status = rs == HM_RING_REFUSED_FULL ? HM_CAPTURE_REFUSED_FULL
                                                : HM_CAPTURE_REFUSED_INVALID;
        return cr->status;
    }
    if (hm_ring_gate(&a->ring, idx, flags, q, p, prio, &g) != HM_RING_OK) {
        cr->status = HM_CAPTURE_REFUSED_INVALID; /* not reached: arguments checked */
        return cr->status;
    }
    hm_ring_id(&a->ring, hm_ring_peek(&a->ring, idx), rid);
    cr->status = HM_CAPTURE_STORED;
    cr->record_id.len = HM_RECORD_ID_SIZE;
    cr->flags = g.flags;
    memcpy((uint8_t *)cr + offsetof(hm_msg_capture_result, h), &g.h, SCORES_SIZE); /* h .. w */
    cr->verdict = g.verdict;
    cr->hard = g.hard;
    cr->state = g.state;
    if (gout) *gout = g;
    return HM_CAPTURE_STORED;
}

unsigned hm_agent_capture(hm_agent *a, const uint8_t *payload, size_t payload_len,
                          const uint8_t *source, size_t source_len, uint64_t timestamp,
                          const uint8_t context[HM_HASH_SIZE], uint32_t flags,
                          uint32_t confidence, uint32_t provenance, uint32_t priority,
                          hm_gate_result *result) {
    hm_msg m;
    uint8_t rid[HM_RECORD_ID_SIZE];
    unsigned st;
    tick(a);
    if (timestamp == 0) timestamp = hm_agent_wall_ms(a);
    memset(&m, 0, sizeof m);
    m.type = HM_MSG_CAPTURE_RESULT;
    st = do_capture(a, payload, payload_len, source, source_len, timestamp, context, flags,
                    confidence, provenance, priority, &m.u.capture_result, rid, result);
    if (a->capabilities & HM_CAP_SENSOR) {
        m.u.capture_result.ref = 0;
        /* Own results leave two entries free, one for a pack offer and one for an
         * answer to the host: a fast sensor must not starve either. */
        if (a->out_n + HM_AGENT_OWN_RESERVE >= HM_AGENT_QUEUE || queue_small(a, &m) != 0)
            a->counters.results_lost++;
    }
    return st;
}

/* ---- receiving ---------------------------------------------------------------- */

/* What the device needs to accept each H->D type (SPEC §5.1): 0 always, a
 * capability, or NEVER (no capability has that bit: D->H types, unknown types).
 * The types that need a capability are exactly those whose delivery queues an
 * answer. */
#define NEVER 0x80u
static const uint8_t accept_needs[16] = {
    NEVER, NEVER /* HELLO */, 0 /* HELLO_ACK */, HM_CAP_CAPTURE, NEVER, NEVER,
    0 /* PACK_RESULT */, HM_CAP_KNOWLEDGE, NEVER, HM_CAP_STATUS, NEVER, NEVER,
    0 /* ERROR */, 0 /* ACK */, NEVER /* FRAGMENT: retired, SPEC 6.8 */, NEVER /* PROOF */};
typedef char hm_agent_never_check[(HM_CAP_ALL & NEVER) == 0 ? 1 : -1];

/* 1 if the device accepts this type (1..14) from the host. */
static int accepts(const hm_agent *a, unsigned type) {
    return (accept_needs[type] & ~a->capabilities) == 0;
}

/* 1 if delivering this (accepted) type queues an answer. */
static int needs_reply(unsigned type) { return accept_needs[type] != 0; }

/* hm_msg_decode, and §4.3 step 4 (a type the device does not accept) before the
 * field checks. */
static hm_error_code decode(const hm_agent *a, const uint8_t *body, size_t len, hm_msg *m) {
    hm_error_code err = hm_msg_decode(body, len, 0, m);
    if (err != HM_E_UNKNOWN_VERSION && m->type && !accepts(a, m->type))
        err = HM_E_UNKNOWN_TYPE;
    return err;
}

static void process_ack(hm_agent *a, uint32_t ack) {
    if (a->snd_una == a->snd_nxt || ack < a->snd_una || ack >= a->snd_nxt) return;
    a->snd_una = ack + 1;
    while (a->out_n) {
        hm_agent_out *e = entry(a, 0);
        if (e->seq >= a->snd_una) break;
        if (e->kind != HM_OUT_SMALL) a->big_busy = 0;
        a->out_head = (uint8_t)((a->out_head + 1) % HM_AGENT_QUEUE);
        a->out_n--;
    }
    a->rto = HM_AGENT_RTO_MS;
    a->ntimeouts = 0;
    a->timer_on = 0;
    if (a->snd_una != a->snd_nxt) timer_start(a);
}

static void owe_ack(hm_agent *a) {
    if (!a->ack_due) {
        a->ack_due = 1;
        a->ack_from = (uint32_t)a->now;
    }
}

static void on_pack_result(hm_agent *a, const hm_msg_pack_result *r) {
    uint64_t pseq;
    if (a->offered_n == 0) {
        a->counters.results_unmatched++;
        return;
    }
    pseq = a->offered[0];
    memmove(a->offered, a->offered + 1, (size_t)(a->offered_n - 1) * sizeof a->offered[0]);
    a->offered_n--;
    /* HM_PACK_E_UNKNOWN: a pack the packer abandoned; nothing to do */
    (void)hm_pack_result(&a->packer, &a->ring, pseq, r->status, r->reason);
    if (r->status == HM_PACK_DEFERRED) {
        a->hold_from = (uint32_t)a->now;
        a->hold_ms = HM_AGENT_DEFER_MS;
    }
}

static void on_knowledge(hm_agent *a, const hm_msg_pack *push, uint8_t *writable) {
    hm_msg m;
    hm_pack_reason reason = HM_REASON_NONE;
    hm_pack_status st;
    st = hm_knowledge_accept(&a->knowledge, writable, push->pack.len, &reason);
    a->counters.knowledge++;
    /* The new head is saved before the host hears of it: an ACCEPTED the host saw
     * is never undone by a reset (rollback protection across boots). */
    if (st == HM_PACK_ACCEPTED && a->io.knowledge_saved)
        a->io.knowledge_saved(a->io.ctx, a->knowledge.seq, a->knowledge.hash);
    memset(&m, 0, sizeof m);
    m.type = HM_MSG_KNOWLEDGE_RESULT;
    m.u.knowledge_result.pack_id.ptr = a->knowledge.last_pack_id;
    m.u.knowledge_result.pack_id.len = HM_PACK_ID_SIZE;
    m.u.knowledge_result.status = (uint8_t)st;
    m.u.knowledge_result.reason = (uint8_t)reason;
    m.u.knowledge_result.held_seq = a->knowledge.seq;
    (void)queue_small(a, &m);
}

static void on_capture(hm_agent *a, const hm_msg_capture *c, uint32_t ref) {
    hm_msg m;
    uint8_t rid[HM_RECORD_ID_SIZE];
    memset(&m, 0, sizeof m);
    m.type = HM_MSG_CAPTURE_RESULT;
    (void)do_capture(a, c->payload.ptr, c->payload.len, c->source.ptr, c->source.len,
                     hm_agent_wall_ms(a), c->context.ptr, c->flags, c->confidence,
                     c->provenance, c->priority, &m.u.capture_result, rid, NULL);
    m.u.capture_result.ref = ref;
    (void)queue_small(a, &m);
}

/* ---- session proof ---------------------------------------------------------- */

/* SPEC §5.15: the session's first message, PROOF, signs with the device key
 * label || host_id || challenge || device_id || boot (u32 BE) || SHA-256(HELLO body). */
static const char proof_label[] = "hirmem session proof v1";
#define PROOF_LABEL_SIZE (sizeof proof_label - 1)
#define PROOF_INPUT_SIZE (PROOF_LABEL_SIZE + 2 * HM_ID_SIZE + 16 + 4 + HM_SHA256_DIGEST_SIZE)

/* in: PROOF_INPUT_SIZE bytes whose last part, the HELLO hash, the caller wrote */
static void queue_proof(hm_agent *a, const hm_msg_hello_ack *h, uint8_t *in) {
    uint8_t sig[HM_SIGNATURE_SIZE], *p = in;
    hm_msg m;
    memcpy(p, proof_label, PROOF_LABEL_SIZE);
    p += PROOF_LABEL_SIZE;
    memcpy(p, h->host_id.ptr, HM_ID_SIZE);
    p += HM_ID_SIZE;
    memcpy(p, h->challenge.ptr, 16);
    p += 16;
    memcpy(p, a->device_id, HM_ID_SIZE);
    p += HM_ID_SIZE;
    p[0] = (uint8_t)(a->boot >> 24);
    p[1] = (uint8_t)(a->boot >> 16);
    p[2] = (uint8_t)(a->boot >> 8);
    p[3] = (uint8_t)a->boot;
    hm_sign(sig, a->packer.seed, a->packer.pub, in, PROOF_INPUT_SIZE);
    memset(&m, 0, sizeof m);
    m.type = HM_MSG_PROOF;
    m.u.proof.signature.ptr = sig;
    m.u.proof.signature.len = sizeof sig;
    (void)queue_small(a, &m); /* seq 2: the queue is empty in a new session */
}

static void deliver(hm_agent *a, const hm_msg *m, uint32_t seq, const uint8_t *base,
                    uint8_t *wbase) {
    a->counters.delivered++;
    switch (m->type) {
    case HM_MSG_CAPTURE:
        on_capture(a, &m->u.capture, seq);
        break;
    case HM_MSG_PACK_RESULT:
        on_pack_result(a, &m->u.pack_result);
        break;
    case HM_MSG_KNOWLEDGE_PUSH:
        on_knowledge(a, &m->u.knowledge_push,
                     wbase + (m->u.knowledge_push.pack.ptr - base));
        break;
    case HM_MSG_STATUS_REQUEST:
        (void)queue_status(a);
        break;
    default: /* HELLO_ACK in session is always a duplicate (seq 1) */
        break;
    }
}

static void on_hello_ack(hm_agent *a, const hm_msg_hello_ack *h, uint32_t seq, uint32_t ack) {
    /* the HELLO as sent (its encoding is deterministic): HELLO_ACK must echo its hash,
     * and PROOF signs it (SPEC §5.3, §5.15), so it goes where the PROOF input ends */
    uint8_t proof_in[PROOF_INPUT_SIZE];
    uint8_t *hello_hash = proof_in + PROOF_INPUT_SIZE - HM_SHA256_DIGEST_SIZE;
    hm_hash_sha256(hello_hash, a->scratch, hello_body(a));
    if (memcmp(hello_hash, h->hello_hash.ptr, HM_HELLO_ECHO_SIZE) != 0) {
        a->counters.stale_hello_acks++; /* it answers another HELLO: ignored (§6.5) */
        return;
    }
    if (seq != 1 || ack != 1 || h->max_frame < HM_FRAME_FLOOR ||
        h->max_frame > a->max_frame_offer || h->window == 0 || h->window > a->window_offer) {
        send_error(a, HM_E_MALFORMED, seq, "bad HELLO_ACK");
        return;
    }
    a->session = 1;
    a->counters.sessions++;
    a->max_frame = h->max_frame;
    a->window = h->window;
    a->host_max_message = h->max_message;
    memcpy(a->host_id, h->host_id.ptr, HM_ID_SIZE);
    a->wall_offset = (int64_t)h->time_ms - (int64_t)a->now;
    a->wall_known = 1;
    hm_pack_set_head(&a->packer, &a->ring, h->pack_seq, h->pack_hash.ptr);
    if (a->ring.boot != a->boot && a->ring.counters.used == 0) {
        /* resumed, and the host holds all of it: number under this boot from now on
         * (set_head left no pending pack) */
        (void)hm_ring_init_sized(&a->ring, a->device_id, a->boot, a->ring.capacity,
                                 (unsigned)a->ring.block_size * HM_RING_BLOCKS);
        a->packer.boot = a->boot;
    }
    a->next_seq = a->snd_una = a->snd_nxt = 2;
    a->expected = 2;
    a->timer_on = 0;
    a->rto = HM_AGENT_RTO_MS;
    a->ntimeouts = 0;
    a->last_offer = a->last_status = (uint32_t)a->now;
    a->hold_ms = 0;
    owe_ack(a);
    queue_proof(a, h, proof_in); /* carries the ack of HELLO_ACK */
    if (a->counters.resume_failed && a->counters.sessions == 1) {
        static const char lost[] = "resume failed: memory lost";
        (void)hm_agent_log(a, 2, (const uint8_t *)lost, sizeof lost - 1);
    }
}

/* A well-framed body (in rx.buf, or joined from pieces in join.buf: writable). */
static void on_body(hm_agent *a, uint8_t *body, size_t len) {
    hm_msg m;
    hm_error_code err = decode(a, body, len, &m);

    if (!a->session) {
        if (err == HM_OK && m.type == HM_MSG_HELLO_ACK) {
            on_hello_ack(a, &m.u.hello_ack, m.seq, m.ack);
        } else if (err == HM_E_MALFORMED && m.type == HM_MSG_HELLO_ACK) {
            send_error(a, HM_E_MALFORMED, m.seq, "bad HELLO_ACK");
        } else if (err == HM_OK && m.type == HM_MSG_ERROR) {
            a->counters.errors_rcvd++;
        } else {
            a->counters.ignored++;
        }
        return;
    }
    if (err != HM_OK) {
        if (m.type != HM_MSG_ERROR || err == HM_E_UNKNOWN_TYPE)
            send_error(a, err, m.seq,
                       err == HM_E_UNKNOWN_VERSION ? "version 1 only"
                       : err == HM_E_UNKNOWN_TYPE  ? "type not accepted"
                                                   : "malformed");
        return;
    }
    process_ack(a, m.ack);
    if (hm_msg_unsequenced(m.type)) {
        if (m.type == HM_MSG_ERROR) {
            a->counters.errors_rcvd++;
            if (m.u.error.code == HM_E_NO_SESSION) start_hello(a, 1);
        }
        pump(a);
        return;
    }
    if (m.seq != a->expected) {
        if (m.seq < a->expected) a->counters.duplicates++;
        else a->counters.out_of_order++;
        owe_ack(a);
        pump(a);
        return;
    }
    if (needs_reply(m.type) && queue_full(a)) {
        a->counters.busy++;
        send_error(a, HM_E_BUSY, m.seq, "queue full");
        return;
    }
    a->expected++;
    owe_ack(a);
    deliver(a, &m, m.seq, body, body);
    pump(a);
}

/* A frame that is a piece of a longer body (SPEC 6.8): joined below the session. */
static void on_piece(hm_agent *a, uint8_t *piece, size_t n) {
    size_t len;
    hm_error_code err = hm_join_take(&a->join, piece, n, &len);
    if (err == HM_OK) {
        if (len) on_body(a, a->join.buf, len);
    } else if (err == HM_E_TOO_LARGE && a->session) {
        /* the one refusal a retransmission cannot cure (the others are counted in
         * join.refused and left to go-back-N): answered, and delivered as refused so
         * that the session moves on */
        uint32_t s = a->join.seq;
        send_error(a, HM_E_TOO_LARGE, s, "above max_message");
        if (s == a->expected) a->expected++;
        owe_ack(a); /* also for a repeat after a lost ack */
    }
}

void hm_agent_input(hm_agent *a, const uint8_t *bytes, size_t n) {
    size_t i;
    tick(a);
    for (i = 0; i < n; i++) {
        if (hm_frame_rx_push(&a->rx, bytes[i]) == HM_FRAME_OK) {
            size_t len;
            (void)hm_frame_rx_body(&a->rx, &len);
            if (HM_PIECE_IS(a->rx.buf, len)) on_piece(a, a->rx.buf, len);
            else on_body(a, a->rx.buf, len);
        }
    }
}

/* ---- timers ------------------------------------------------------------------- */

void hm_agent_poll(hm_agent *a) {
    tick(a);
    if (a->timer_on && passed(a, a->timer_from, a->rto)) {
        a->counters.timeouts++;
        if (a->session && ++a->ntimeouts >= HM_AGENT_MAX_TIMEOUTS) {
            start_hello(a, 1); /* HELLO again, from the first RTO */
            return;
        }
        a->rto = a->rto * 2 > HM_AGENT_RTO_MAX_MS ? HM_AGENT_RTO_MAX_MS : a->rto * 2;
        if (!a->session) send_hello(a);
        for (uint32_t s = a->snd_una; s != a->snd_nxt; s++) { /* none without a session */
            tx_seq(a, s);
            a->counters.retransmits++;
        }
        timer_start(a);
    }
    if (!a->session) return;
    if (a->status_period_ms && passed(a, a->last_status, a->status_period_ms) &&
        !queue_full(a))
        (void)queue_status(a);
    if (a->session && passed(a, a->hold_from, a->hold_ms)) { /* queue_status may have ended it */
        unsigned n = (a->offer_threshold || a->offer_period_ms) ? packable(a) : 0;
        a->hold_ms = 0; /* the hold is over: it cannot come back when the clock wraps */
        if (n && ((a->offer_threshold && n >= a->offer_threshold) ||
                  (a->offer_period_ms && passed(a, a->last_offer, a->offer_period_ms))))
            offer_pack(a);
    }
    pump(a);
    if (a->session && a->ack_due && passed(a, a->ack_from, HM_AGENT_ACK_DELAY_MS)) send_ack(a);
}

/* ---- LOG ---------------------------------------------------------------------- */

int hm_agent_log(hm_agent *a, unsigned level, const uint8_t *text, size_t len) {
    hm_msg m;
    size_t max = a->session ? HM_MAX_TEXT : 100;
    if (level > 3 || (len && !hm_utf8_valid(text, len))) return -1;
    tick(a);
    if (len > max) {
        len = max;
        while (len && (text[len] & 0xC0u) == 0x80u) len--; /* a character boundary */
    }
    memset(&m, 0, sizeof m);
    m.type = HM_MSG_LOG;
    m.u.log.level = (uint8_t)level;
    m.u.log.text.ptr = text;
    m.u.log.text.len = len;
    a->counters.logs++;
    tx_unsequenced(a, &m);
    return 0;
}

/* ---- init --------------------------------------------------------------------- */

static int copy_text(char *dst, const char *src) {
    size_t n = src ? strlen(src) : 0;
    if (n > HM_MAX_TEXT || (n && !hm_utf8_valid((const uint8_t *)src, n))) return -1;
    if (n) memcpy(dst, src, n);
    dst[n] = 0;
    return 0;
}

hm_agent_err hm_agent_init(hm_agent *a, const hm_agent_config *c) {
    uint8_t pub[HM_PUBLIC_KEY_SIZE], digest[HM_SHA256_DIGEST_SIZE];
    static const uint8_t zero = 0;
    unsigned mf = c->max_frame ? c->max_frame : HM_MAX_FRAME;
    unsigned win = c->window ? c->window : HM_WINDOW;
    uint32_t mm = c->max_message ? c->max_message : HM_MAX_MESSAGE;
    unsigned cap = c->ring_capacity ? c->ring_capacity : HM_RING_CAPACITY;
    unsigned arena = c->arena_size ? c->arena_size : HM_ARENA_SIZE;
    int kept;

    if (!c->device_id || !c->seed || !c->io.write || !c->io.now_ms || mf < HM_FRAME_FLOOR ||
        mf > HM_MAX_FRAME || win < 1 || win > HM_WINDOW || mm > HM_MAX_MESSAGE ||
        (c->knowledge_seq && !c->knowledge_hash))
        return HM_AGENT_E_ARG;
    /* the one derivation of the public key: every signature reuses it */
    hm_public_key(pub, c->seed);
    if (c->public_key && memcmp(pub, c->public_key, sizeof pub) != 0) return HM_AGENT_E_ARG;
    hm_hash_sha256(digest, pub, sizeof pub); /* the kid: digest[0 .. 8) */
    /* Resume: ring and packer stay if they are whole (see "Resume" in hm_agent.h). */
    kept = c->resume && hm_ring_validate(&a->ring, c->device_id, cap, arena) == 0 &&
           hm_pack_resume(&a->packer, &a->ring, c->seed, pub, digest) == 0;
    memset(a, 0, offsetof(hm_agent, ring));
    a->counters.resumes = (uint32_t)kept;
    if (!kept) {
        if (hm_ring_init_sized(&a->ring, c->device_id, c->boot, cap, arena) != HM_RING_OK)
            return HM_AGENT_E_ARG;
        hm_pack_init(&a->packer, c->device_id, c->boot, c->seed, pub, digest);
        a->counters.resume_failed = c->resume != 0;
    }
    if (copy_text(a->board, c->board) || copy_text(a->firmware, c->firmware))
        return HM_AGENT_E_ARG;
    a->io = c->io;
    a->host_key = c->host_key;
    memcpy(a->device_id, c->device_id, HM_ID_SIZE);
    memcpy(a->device_kid, digest, HM_KID_SIZE);
    a->boot = c->boot;
    a->capabilities = c->capabilities & HM_CAP_ALL;
    a->max_message = mm;
    a->max_frame_offer = (uint16_t)mf;
    a->window_offer = (uint16_t)win;
    a->max_frame = HM_FRAME_FLOOR;
    a->window = 1;
    a->offer_threshold = c->offer_threshold;
    a->offer_period_ms = c->offer_period_ms;
    a->status_period_ms = c->status_period_ms;
    hm_knowledge_init(&a->knowledge, c->host_key);
    if (c->knowledge_seq) hm_knowledge_set_head(&a->knowledge, c->knowledge_seq, c->knowledge_hash);
    (void)hm_frame_rx_init(&a->rx, mf);
    (void)hm_join_init(&a->join, mm);

    if (!hello_body(a)) return HM_AGENT_E_ARG; /* HELLO must fit 128 bytes */

    a->last_raw = a->io.now_ms(a->io.ctx);
    a->now = 0;
    a->io.write(a->io.ctx, &zero, 1); /* SPEC §2.6: terminate any partial frame */
    start_hello(a, 0);
    return HM_AGENT_OK;
}
