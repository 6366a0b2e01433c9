/* libFuzzer target: the device agent's input path (hm_agent).
 *
 * The input is a script. Header: a config block (see read_config) and a mode byte
 * (bit 0: perform a valid handshake right after init, so most scripts start inside a
 * session; bit 1: RESET is a warm reset, hm_agent_init with resume = 1 on the same
 * struct, so the kept ring and packer are checked and resumed or refused). Then operations, one opcode byte each (op % OPS):
 *   RAW      u16 n, u8 chunking, n bytes: hm_agent_input in pseudo-random chunks
 *   ADVANCE  u16 ms, u8 step: the virtual clock moves by ms, hm_agent_poll every step
 *   JUMP     u32: the clock jumps (wraps at 2^32), one poll
 *   CAPTURE  the device's own capture, every argument from the input
 *   RESET    re-init (a device reset) with a new config from the input (resumed: see
 *            mode bit 1)
 *   BODY     u16 n, n bytes: a message body wrapped in a valid frame (CRC right)
 *   HANDSHAKE a valid HELLO_ACK built from the last HELLO the agent sent
 *   MESSAGE  a host message built field by field (CAPTURE, PACK_RESULT,
 *            KNOWLEDGE_PUSH, STATUS_REQUEST, ERROR, ACK, HELLO_ACK), with the host's
 *            next seq and current ack unless the input says otherwise; in frame
 *            pieces (hm_piece_encode) when it does not fit the agreed max_frame
 *   ACKALL   an ACK of everything the agent sent
 *   DAMAGED  a 00, then a frame with a wrong CRC (or too short / too long): the agent
 *            must not write anything for it
 *   LOG      hm_agent_log with input text
 * Host frames are built with the core's encoders (hm_msg_encode, hm_piece_encode,
 * hm_frame_encode) and fed in pseudo-random chunks.
 *
 * Checked after every operation (besides ASan/UBSan):
 *  - A1-A4 of hm_agent.h on the agent's state (as tests/native/t_agent.c does), the
 *    session counters, agreed sizes within the offers;
 *  - every counter (agent, frame receiver, ring, packer, knowledge) never decreases
 *    between resets (the ring's restart when a resumed ring is renumbered under the
 *    new boot); STATUS uptime and knowledge_seq never decrease;
 *  - ring invariants I1, I5, I6, I8 of hm_ring.h from its public state;
 *  - everything written is whole frames; checked at every written 00 with an
 *    independent COBS decoder and CRC oracle (fuzz_common.h): COBS valid, CRC right,
 *    at most the agent's max_frame (128 without a session: A5); the body decodes with
 *    hm_msg (outer); only device-to-host types; without a session only HELLO (seq 1,
 *    ack 0, the configured device id and offers), LOG and ERROR malformed (A5);
 *  - in a session: sequenced messages are numbered consecutively from 2 (a new seq is
 *    the highest sent + 1), a retransmission is byte-identical to the first sending
 *    and not below snd_una, no seq at or beyond snd_una + window is sent, the ack
 *    carried is at most expected - 1; the agent's frame pieces join (hm_join, every
 *    one taken: the harness sees every byte) to a PACK_OFFER, whose retransmission
 *    is the same body (length and CRC-32 compared).
 */
#include <stddef.h>
#include <string.h>

#include "fuzz_common.h"
#include "hm_agent.h"
#include "hm_crypto.h"
#include "hm_frag.h"
#include "hm_frame.h"
#include "hm_msg.h"

enum {
    OP_RAW,
    OP_ADVANCE,
    OP_JUMP,
    OP_CAPTURE,
    OP_RESET,
    OP_BODY,
    OP_HANDSHAKE,
    OP_MESSAGE,
    OP_ACKALL,
    OP_DAMAGED,
    OP_LOG,
    OPS
};

static const uint8_t device_id[HM_ID_SIZE] = {1, 2, 3, 4, 5, 6, 7, 8};
static const uint8_t host_id[HM_ID_SIZE] = {0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8};
static uint8_t device_seed[HM_SEED_SIZE];
static hm_host_key host_key;
static int ready;

static hm_agent agent;
static int have_agent;
static uint32_t vclock;
static hm_agent_config cfg;
static uint8_t knowledge_hash[HM_HASH_SIZE];

/* ---- the host's view of what the agent wrote ------------------------------------ */

#define KEEP 64 /* bodies of the last sequenced seqs, for byte-identical retransmission */

static struct {
    uint8_t pending[HM_FRAME_WIRE_BOUND(HM_MAX_FRAME) + 8]; /* bytes since the last 00 */
    size_t npending;
    int overflow;
    uint32_t sessions; /* agent.counters.sessions the tracking below belongs to */
    uint32_t hi;       /* highest sequenced seq sent in this session (1: HELLO) */
    uint8_t body[KEEP][HM_MAX_FRAME];
    size_t body_len[KEEP];
    uint32_t body_seq[KEEP];
    hm_join join;           /* the agent's frame pieces */
    uint32_t body_crc[KEEP]; /* of a joined body (too long to keep) */
    int have_hello;         /* a HELLO was seen since the last init */
    uint16_t hello_mf, hello_win;
    uint8_t hello_echo[HM_HELLO_ECHO_SIZE]; /* what its HELLO_ACK must echo (SPEC 5.3) */
    uint32_t hello_mm;
    uint32_t host_next;     /* the host's next seq in this session */
    uint32_t writes;        /* bytes written during the current operation */
} host;

static uint8_t scratch[HM_MAX_MESSAGE + 64];
static uint8_t inner[HM_MAX_MESSAGE + 64];
static uint8_t wire[HM_FRAME_WIRE_BOUND(HM_MAX_FRAME) + 8];

static int is_seq_type(unsigned t) { return !hm_msg_unsequenced(t); }

static int device_type(unsigned t) {
    return t == HM_MSG_HELLO || t == HM_MSG_CAPTURE_RESULT || t == HM_MSG_PACK_OFFER ||
           t == HM_MSG_KNOWLEDGE_RESULT || t == HM_MSG_STATUS || t == HM_MSG_LOG ||
           t == HM_MSG_ERROR || t == HM_MSG_ACK || t == HM_MSG_PROOF;
}

static void track_reset(void) {
    host.hi = 1;
    host.host_next = 2;
    memset(host.body_seq, 0, sizeof host.body_seq);
    hm_join_reset(&host.join);
}

/* Independent COBS decoder (SPEC §2.3): 1 and *out_len, or 0 if invalid. */
static int cobs_decode(const uint8_t *in, size_t len, uint8_t *out, size_t cap, size_t *out_len) {
    size_t i = 0, o = 0;
    while (i < len) {
        uint8_t code = in[i++];
        if (code == 0) return 0;
        for (unsigned k = 1; k < code; k++) {
            if (i >= len || in[i] == 0 || o >= cap) return 0;
            out[o++] = in[i++];
        }
        if (code != 0xFF && i < len) {
            if (o >= cap) return 0;
            out[o++] = 0;
        }
    }
    *out_len = o;
    return 1;
}

/* One frame the agent wrote (the bytes before a 00). */
static void check_frame(const uint8_t *enc, size_t n) {
    static uint8_t dec[HM_FRAME_WIRE_BOUND(HM_MAX_FRAME)];
    const hm_agent *a = &agent;
    size_t len;
    hm_msg m;
    if (n == 0) return; /* an empty frame: allowed (the 00 of init) */
    FUZZ_CHECK(cobs_decode(enc, n, dec, sizeof dec, &len));
    FUZZ_CHECK(len >= HM_FRAME_MIN);
    FUZZ_CHECK(len <= (a->session ? a->max_frame : HM_FRAME_FLOOR)); /* A5 */
    FUZZ_CHECK(len <= HM_FRAME_FLOOR || len <= a->max_frame);
    uint32_t crc = (uint32_t)dec[len - 4] | (uint32_t)dec[len - 3] << 8 |
                   (uint32_t)dec[len - 2] << 16 | (uint32_t)dec[len - 1] << 24;
    len -= 4;
    FUZZ_CHECK(crc == fuzz_crc32(dec, len));
    const uint8_t *body = dec;
    int joined = 0;
    if (HM_PIECE_IS(dec, len)) { /* a piece of the pack offer: joined first (SPEC 6.8) */
        size_t got;
        FUZZ_CHECK(a->session);
        FUZZ_CHECK(hm_join_take(&host.join, dec, len, &got) == HM_OK);
        if (!got) return;
        body = host.join.buf;
        len = got;
        joined = 1;
        FUZZ_CHECK(len + HM_FRAME_CRC_SIZE > a->max_frame); /* a body that fits is not cut */
    }
    FUZZ_CHECK(hm_msg_decode(body, len, 0, &m) == HM_OK);
    FUZZ_CHECK(!joined || m.type == HM_MSG_PACK_OFFER);
    FUZZ_CHECK(device_type(m.type));

    if (a->counters.sessions != host.sessions) { /* a new session since the last frame */
        host.sessions = a->counters.sessions;
        track_reset();
    }
    if (!a->session) { /* A5 */
        FUZZ_CHECK(m.type == HM_MSG_HELLO || m.type == HM_MSG_LOG ||
                   (m.type == HM_MSG_ERROR && m.u.error.code == HM_E_MALFORMED));
        if (m.type == HM_MSG_HELLO) {
            FUZZ_CHECK(m.seq == 1 && m.ack == 0);
            FUZZ_CHECK(memcmp(m.u.hello.device_id.ptr, device_id, HM_ID_SIZE) == 0);
            FUZZ_CHECK(m.u.hello.max_frame == a->max_frame_offer);
            FUZZ_CHECK(m.u.hello.window == a->window_offer);
            FUZZ_CHECK(m.u.hello.boot == cfg.boot && m.u.hello.capabilities == (cfg.capabilities & HM_CAP_ALL));
            FUZZ_CHECK(m.u.hello.host_kid.len == (cfg.host_key ? 8u : 0u));
            host.have_hello = 1;
            host.hello_mf = m.u.hello.max_frame;
            host.hello_win = m.u.hello.window;
            host.hello_mm = m.u.hello.max_message;
            {
                uint8_t digest[HM_SHA256_DIGEST_SIZE];
                hm_hash_sha256(digest, dec, len);
                memcpy(host.hello_echo, digest, sizeof host.hello_echo);
            }
            FUZZ_CHECK(host.hello_mm == (cfg.max_message ? cfg.max_message : HM_MAX_MESSAGE));
        } else {
            FUZZ_CHECK(m.seq == 0 && m.ack == 0);
        }
        return;
    }
    FUZZ_CHECK(m.type != HM_MSG_HELLO);
    FUZZ_CHECK(m.ack <= a->expected - 1);
    if (!is_seq_type(m.type)) return;
    /* sequenced, in a session */
    FUZZ_CHECK(m.seq >= 2);
    FUZZ_CHECK(m.seq >= a->snd_una && m.seq - a->snd_una < a->window); /* the window */
    unsigned slot = m.seq % KEEP;
    uint32_t body_crc = fuzz_crc32(body, len);
    if (m.seq <= host.hi) { /* a retransmission: byte-identical */
        if (host.body_seq[slot] == m.seq)
            FUZZ_CHECK(host.body_len[slot] == len && host.body_crc[slot] == body_crc &&
                       (joined || memcmp(host.body[slot], body, len) == 0));
        return;
    }
    FUZZ_CHECK(m.seq == host.hi + 1); /* numbered consecutively */
    host.hi = m.seq;
    host.body_seq[slot] = m.seq;
    host.body_len[slot] = len;
    host.body_crc[slot] = body_crc;
    if (!joined) memcpy(host.body[slot], body, len);
    FUZZ_CHECK(len <= HM_AGENT_PACK_CAP + HM_AGENT_BIG_HEAD);
}

static void io_write(void *ctx, const uint8_t *bytes, size_t n) {
    (void)ctx;
    FUZZ_CHECK(n > 0);
    host.writes += (uint32_t)n;
    for (size_t i = 0; i < n; i++) {
        if (bytes[i] == 0) {
            FUZZ_CHECK(!host.overflow);
            check_frame(host.pending, host.npending);
            host.npending = 0;
        } else if (host.npending < sizeof host.pending) {
            host.pending[host.npending++] = bytes[i];
        } else {
            host.overflow = 1; /* longer than any frame of HM_MAX_FRAME */
        }
    }
}

static uint32_t io_now(void *ctx) {
    (void)ctx;
    return vclock;
}

/* ---- state checks --------------------------------------------------------------- */

static struct {
    hm_agent_counters c;
    hm_pack_counters p;
    hm_knowledge_counters k;
    uint32_t rx[6], ring[5], ring_boot;
    uint64_t uptime, knowledge_seq;
} last;

static void snapshot_rx(uint32_t v[6]) {
    const hm_frame_rx *rx = &agent.rx;
    v[0] = rx->frames, v[1] = rx->empty, v[2] = rx->too_short, v[3] = rx->too_long;
    v[4] = rx->bad_cobs, v[5] = rx->bad_crc;
}

static void snapshot_ring(uint32_t v[5]) {
    const hm_ring_counters *c = &agent.ring.counters;
    v[0] = c->captures, v[1] = c->evictions, v[2] = c->refusals, v[3] = c->quarantines;
    v[4] = c->candidates;
}

#define MONOTONIC(T, now, before)                                                        \
    do {                                                                                 \
        const uint32_t *n_ = (const uint32_t *)(const void *)&(now);                     \
        const uint32_t *b_ = (const uint32_t *)(const void *)&(before);                  \
        for (size_t i_ = 0; i_ < sizeof(T) / sizeof(uint32_t); i_++)                     \
            FUZZ_CHECK(n_[i_] >= b_[i_]);                                                \
    } while (0)

static void check_ring(void) {
    const hm_ring *r = &agent.ring;
    uint32_t used = 0, vol = 0, pinned = 0, blocks = 0, vblocks = 0, bytes = 0;
    FUZZ_CHECK(r->capacity >= 1 && r->capacity <= HM_RING_CAPACITY);
    for (unsigned i = 0; i < r->capacity; i++) {
        const hm_ring_record *rec = &r->rec[i];
        if (rec->seq == 0) continue;
        used++;
        FUZZ_CHECK(rec->seq <= r->seq); /* I1 */
        for (unsigned j = 0; j < i; j++) FUZZ_CHECK(r->rec[j].seq != rec->seq);
        FUZZ_CHECK((rec->state == HM_STATE_VOLATILE || rec->state == HM_STATE_CANDIDATE ||
                    rec->state == HM_STATE_QUARANTINED) &&
                   rec->payload_len <= HM_MAX_PAYLOAD &&
                   rec->source_len <= HM_MAX_SOURCE);
        if (rec->state == HM_STATE_VOLATILE) {
            vol++;
            FUZZ_CHECK(rec->pack == 0); /* I5 */
        }
        if (rec->pack) pinned++;
        /* I6: ceil((payload + source) / block_size) consecutive blocks, disjoint */
        uint32_t need = ((uint32_t)rec->payload_len + rec->source_len + r->block_size - 1) /
                        r->block_size;
        FUZZ_CHECK(rec->nblocks == need);
        if (need) {
            FUZZ_CHECK((uint32_t)rec->block + need <= HM_RING_BLOCKS);
            uint32_t mask = (need == 32 ? 0xFFFFFFFFu : ((1u << need) - 1u)) << rec->block;
            FUZZ_CHECK((blocks & mask) == 0);
            blocks |= mask;
            if (rec->state == HM_STATE_VOLATILE) vblocks |= mask;
            bytes += need * r->block_size;
        }
    }
    /* I8 */
    FUZZ_CHECK(r->counters.used == used && r->counters.volatiles == vol);
    FUZZ_CHECK(r->counters.pinned == pinned);
    FUZZ_CHECK(r->used_blocks == blocks && r->vol_blocks == vblocks);
    FUZZ_CHECK(r->counters.arena_used == bytes);
    FUZZ_CHECK(r->counters.captures == r->seq + r->counters.refusals);
}

static void check_agent(void) {
    const hm_agent *a = &agent;
    uint32_t s, v[6], w[5];
    unsigned bigs = 0;
    hm_msg_status st;
    FUZZ_CHECK(host.npending == 0 && !host.overflow); /* only whole frames are written */
    /* A1 */
    FUZZ_CHECK(a->snd_una <= a->snd_nxt && a->snd_nxt <= a->next_seq);
    FUZZ_CHECK(a->snd_nxt - a->snd_una <= a->window);
    if (!a->session) FUZZ_CHECK(a->out_n == 0 && a->snd_una == a->next_seq);
    /* A2 */
    FUZZ_CHECK(a->out_n <= HM_AGENT_QUEUE);
    s = a->snd_una;
    for (unsigned i = 0; i < a->out_n; i++) {
        const hm_agent_out *e = &a->out[(a->out_head + i) % HM_AGENT_QUEUE];
        FUZZ_CHECK(e->seq == s); /* one seq per entry, the pack offer too */
        s = e->seq + 1;
        if (e->kind != HM_OUT_SMALL) bigs++;
        else FUZZ_CHECK(e->len <= HM_AGENT_SLOT);
    }
    if (a->out_n) FUZZ_CHECK(s == a->next_seq);
    /* A3 */
    FUZZ_CHECK(bigs <= 1 && (bigs == 1) == (a->big_busy != 0));
    /* A4 */
    if (a->session) FUZZ_CHECK((a->timer_on != 0) == (a->snd_una != a->snd_nxt));
    else FUZZ_CHECK(a->timer_on);
    /* the session and what was agreed */
    FUZZ_CHECK(a->counters.sessions - a->counters.sessions_lost == (a->session ? 1u : 0u));
    FUZZ_CHECK(a->max_frame >= HM_FRAME_FLOOR && a->max_frame <= a->max_frame_offer);
    FUZZ_CHECK(a->window >= 1 && a->window <= a->window_offer);
    if (a->session) FUZZ_CHECK(a->expected >= 2 && a->next_seq >= 2);
    /* counters never decrease */
    MONOTONIC(hm_agent_counters, a->counters, last.c);
    /* hm_pack_counters up to records_returned (unsendable is of the last build) */
    FUZZ_CHECK(offsetof(hm_pack_counters, unsendable) == 10 * sizeof(uint32_t));
    for (size_t i = 0; i < 10; i++)
        FUZZ_CHECK(((const uint32_t *)(const void *)&a->packer.counters)[i] >=
                   ((const uint32_t *)(const void *)&last.p)[i]);
    FUZZ_CHECK(a->knowledge.counters.accepted >= last.k.accepted &&
               a->knowledge.counters.duplicates >= last.k.duplicates &&
               a->knowledge.counters.refused >= last.k.refused &&
               a->knowledge.counters.deferred >= last.k.deferred);
    snapshot_rx(v);
    for (int i = 0; i < 6; i++) FUZZ_CHECK(v[i] >= last.rx[i]);
    snapshot_ring(w);
    /* a resumed ring renumbered under the new boot at the first HELLO_ACK (hm_agent.c)
     * is a fresh ring: its counters restart with its numbering (captures == seq +
     * refusals, check_ring) */
    if (a->ring.boot != last.ring_boot) memset(last.ring, 0, sizeof last.ring);
    for (int i = 0; i < 5; i++) FUZZ_CHECK(w[i] >= last.ring[i]);
    hm_agent_status(&agent, &st);
    FUZZ_CHECK(st.uptime_ms >= last.uptime && st.knowledge_seq >= last.knowledge_seq);
    FUZZ_CHECK(st.ring_used <= st.ring_capacity);
    FUZZ_CHECK(a->knowledge.count <= HM_KNOWLEDGE_CAPACITY);
    FUZZ_CHECK(a->packer.npending <= HM_PACK_PENDING);
    check_ring();
    last.c = a->counters;
    last.p = a->packer.counters;
    last.k = a->knowledge.counters;
    memcpy(last.rx, v, sizeof v);
    memcpy(last.ring, w, sizeof w);
    last.ring_boot = a->ring.boot;
    last.uptime = st.uptime_ms;
    last.knowledge_seq = st.knowledge_seq;
}

/* ---- driving -------------------------------------------------------------------- */

static void setup(void) {
    static const char dlabel[] = "hirmem test key: device 0102030405060708";
    static const char hlabel[] = "hirmem test key: host a1a2a3a4a5a6a7a8";
    uint8_t hseed[32], digest[32];
    hm_hash_sha256(device_seed, (const uint8_t *)dlabel, sizeof dlabel - 1);
    hm_hash_sha256(hseed, (const uint8_t *)hlabel, sizeof hlabel - 1);
    hm_public_key(host_key.public_key, hseed);
    hm_hash_sha256(digest, host_key.public_key, 32);
    memcpy(host_key.kid, digest, HM_KID_SIZE);
    memcpy(host_key.host_id, host_id, HM_ID_SIZE);
    memset(knowledge_hash, 0x5a, sizeof knowledge_hash);
    ready = 1;
}

/* Config block: caps u8, max_frame u16, window u8, max_message u16, ring u8,
 * offer_threshold u8, offer_period u16, status_period u16, flags u8 (1: no host key,
 * 2: a persisted knowledge head), boot u8. Mostly valid; out-of-range values give
 * HM_AGENT_E_ARG and no agent until the next good RESET. */
static void do_init(fuzz_in *in, int resume) {
    unsigned caps = fuzz_u8(in), mf = fuzz_u16(in), win = fuzz_u8(in);
    uint32_t mm = fuzz_u16(in);
    unsigned ring = fuzz_u8(in), thr = fuzz_u8(in);
    uint32_t period = fuzz_u16(in), status = fuzz_u16(in);
    unsigned flags = fuzz_u8(in), boot = fuzz_u8(in);
    memset(&cfg, 0, sizeof cfg);
    cfg.device_id = device_id;
    cfg.seed = device_seed;
    cfg.host_key = (flags & 1) ? NULL : &host_key;
    cfg.board = "fuzz";
    cfg.firmware = "0.1.0";
    cfg.boot = boot;
    cfg.capabilities = caps & 0x80 ? caps : (caps | HM_CAP_ALL) & 0x3F;
    cfg.max_frame = (uint16_t)(mf & 0x8000 ? mf : mf % (HM_MAX_FRAME + 1));
    cfg.window = (uint16_t)(win & 0x80 ? win : win % (HM_WINDOW + 1));
    cfg.max_message = mm & 0x8000 ? mm : mm % (HM_MAX_MESSAGE + 1);
    cfg.ring_capacity = (uint16_t)(ring & 0x80 ? ring : ring % (HM_RING_CAPACITY + 1));
    cfg.offer_threshold = thr % 8;
    cfg.offer_period_ms = period;
    cfg.status_period_ms = status;
    if (flags & 2) {
        cfg.knowledge_seq = flags >> 2;
        cfg.knowledge_hash = knowledge_hash;
    }
    cfg.io.write = io_write;
    cfg.io.now_ms = io_now;
    cfg.resume = (uint8_t)resume;
    memset(&host, 0, sizeof host);
    (void)hm_join_init(&host.join, HM_MAX_MESSAGE);
    track_reset();
    memset(&last, 0, sizeof last);
    host.writes = 0;
    have_agent = hm_agent_init(&agent, &cfg) == HM_AGENT_OK;
    if (!have_agent) {
        FUZZ_CHECK(host.writes == 0); /* nothing written on E_ARG */
        return;
    }
    FUZZ_CHECK(host.writes > 0 && host.have_hello); /* 00 and the first HELLO */
    /* a resume either kept the memory or said it did not; never both, never neither */
    FUZZ_CHECK(agent.counters.resumes + agent.counters.resume_failed == (resume ? 1u : 0u));
    host.sessions = agent.counters.sessions;
}

/* Feed bytes in chunks: chunking 0 all at once, else pseudo-random 1..chunking. */
static void feed(const uint8_t *p, size_t n, unsigned chunking) {
    uint32_t r = chunking * 2654435761u + 1;
    while (n) {
        size_t k = n;
        if (chunking) {
            r = r * 1103515245u + 12345u;
            k = 1 + (r >> 16) % chunking;
            if (k > n) k = n;
        }
        hm_agent_input(&agent, p, k);
        p += k;
        n -= k;
    }
}

/* Frame a body (CRC right) at the largest frame the protocol allows and feed it. */
static void feed_body(const uint8_t *body, size_t len, unsigned chunking) {
    size_t n = hm_frame_encode(body, len, HM_MAX_FRAME, wire, sizeof wire);
    if (n) feed(wire, n, chunking);
}

/* Encode m (seq and ack set) and feed it: whole if it fits the agreed max_frame, else
 * in frame pieces. Returns the number of seqs used (1, or 0 if it does not encode). */
static uint32_t send_msg(hm_msg *m, unsigned chunking) {
    size_t len;
    if (hm_msg_encode(m, 0, inner, sizeof inner, &len) != HM_OK) return 0;
    if (len + HM_FRAME_CRC_SIZE <= agent.max_frame || hm_msg_unsequenced(m->type)) {
        feed_body(inner, len, chunking);
        return 1;
    }
    size_t count = hm_piece_count(len, agent.max_frame);
    for (size_t i = 0; i < count; i++) {
        size_t plen;
        if (hm_piece_encode(inner, len, agent.max_frame, i, scratch, sizeof scratch, &plen) !=
            HM_OK)
            break;
        feed_body(scratch, plen, chunking);
    }
    return 1;
}

static hm_bytes take(fuzz_in *in, size_t n) {
    hm_bytes b;
    b.ptr = fuzz_take(in, n, &b.len);
    return b;
}

static void hello_ack(fuzz_in *in, hm_msg *m) {
    unsigned mf_off = fuzz_u16(in), win = fuzz_u8(in), flags = fuzz_u8(in);
    uint16_t offer_mf = host.have_hello ? host.hello_mf : HM_MAX_FRAME;
    uint16_t offer_win = host.have_hello ? host.hello_win : HM_WINDOW;
    static uint8_t hash[HM_HASH_SIZE], echo[HM_HELLO_ECHO_SIZE];
    m->type = HM_MSG_HELLO_ACK;
    m->u.hello_ack.host_id.ptr = host_id;
    m->u.hello_ack.host_id.len = HM_ID_SIZE;
    m->u.hello_ack.max_frame =
        (uint16_t)(flags & 0x80 ? mf_off : offer_mf - mf_off % (offer_mf - HM_FRAME_FLOOR + 1u));
    m->u.hello_ack.window = (uint16_t)(flags & 0x40 ? win : 1 + win % offer_win);
    m->u.hello_ack.max_message = flags & 0x20 ? fuzz_u32(in) : HM_MAX_MESSAGE;
    m->u.hello_ack.time_ms = flags & 0x10 ? fuzz_u64(in) : 1780000000000ull;
    m->u.hello_ack.pack_seq = flags & 0x08 ? fuzz_u64(in) : 0;
    memset(hash, flags & 0x04 ? 0x33 : 0, sizeof hash);
    m->u.hello_ack.pack_hash.ptr = hash;
    m->u.hello_ack.pack_hash.len = HM_HASH_SIZE;
    m->u.hello_ack.challenge.ptr = hash; /* any 16 bytes: the device signs what it gets */
    m->u.hello_ack.challenge.len = 16;
    /* the echo of the last HELLO, or (bit 1) one of another HELLO: ignored, counted */
    memcpy(echo, host.hello_echo, sizeof echo);
    if (flags & 0x02) echo[fuzz_u8(in) % sizeof echo] ^= (uint8_t)(1 + fuzz_u8(in) % 255);
    m->u.hello_ack.hello_hash.ptr = echo;
    m->u.hello_ack.hello_hash.len = sizeof echo;
}

/* A host message field by field; seq/ack the host's own unless the input says. */
static void op_message(fuzz_in *in) {
    hm_msg m;
    unsigned kind = fuzz_u8(in), how = fuzz_u8(in), chunking = fuzz_u8(in) % 24;
    uint32_t used;
    memset(&m, 0, sizeof m);
    switch (kind % 7) {
    case 0: {
        size_t slen = fuzz_u8(in) % 72, plen = fuzz_u16(in) % 300;
        m.type = HM_MSG_CAPTURE;
        m.u.capture.source = take(in, slen);
        m.u.capture.payload = take(in, plen);
        m.u.capture.context = take(in, 32);
        m.u.capture.flags = (uint16_t)fuzz_u16(in);
        m.u.capture.confidence = fuzz_u32(in) % 0x10001u;
        m.u.capture.provenance = fuzz_u32(in) % 0x10001u;
        m.u.capture.priority = fuzz_u32(in) % 0x10001u;
        break;
    }
    case 1: {
        m.type = HM_MSG_PACK_RESULT;
        m.u.pack_result.back = fuzz_u8(in);
        m.u.pack_result.status = fuzz_u8(in) % 4;
        m.u.pack_result.reason = fuzz_u8(in) % 12;
        break;
    }
    case 2:
        m.type = HM_MSG_KNOWLEDGE_PUSH;
        m.u.knowledge_push.pack = take(in, fuzz_u16(in) % 3000);
        break;
    case 3: m.type = HM_MSG_STATUS_REQUEST; break;
    case 4:
        m.type = HM_MSG_ERROR;
        m.u.error.code = (uint8_t)(1 + fuzz_u8(in) % 8);
        m.u.error.ref = fuzz_u8(in);
        m.u.error.detail = take(in, fuzz_u8(in) % 16);
        break;
    case 5: m.type = HM_MSG_ACK; break;
    default: hello_ack(in, &m); break;
    }
    if (hm_msg_unsequenced(m.type)) m.seq = 0;
    else if (m.type == HM_MSG_HELLO_ACK) m.seq = 1;
    else m.seq = host.host_next + (how & 1 ? (uint32_t)(int8_t)fuzz_u8(in) : 0);
    m.ack = how & 2 ? fuzz_u32(in) : host.hi;
    if (m.type == HM_MSG_HELLO_ACK && !(how & 2)) m.ack = 1;
    used = send_msg(&m, chunking);
    if (!(how & 1) && is_seq_type(m.type) && m.type != HM_MSG_HELLO_ACK)
        host.host_next += used;
}

static void op_handshake(fuzz_in *in) {
    hm_msg m;
    memset(&m, 0, sizeof m);
    hello_ack(in, &m);
    m.seq = 1;
    m.ack = 1;
    uint32_t before = agent.counters.sessions, stale = agent.counters.stale_hello_acks;
    int was_open = agent.session;
    int foreign = memcmp(m.u.hello_ack.hello_hash.ptr, host.hello_echo, HM_HELLO_ECHO_SIZE);
    send_msg(&m, fuzz_u8(in) % 24);
    /* without a session, a foreign echo never opens one and is counted (unless the frame
     * was lost in bytes an earlier RAW left in the receiver); the right one is not counted */
    if (!was_open && host.have_hello)
        FUZZ_CHECK(foreign ? agent.counters.stale_hello_acks - stale <= 1 &&
                                 agent.counters.sessions == before
                           : agent.counters.stale_hello_acks == stale);
    if (agent.counters.sessions != before) {
        FUZZ_CHECK(agent.session && agent.next_seq >= 2 && agent.expected == 2);
        FUZZ_CHECK(agent.max_frame == m.u.hello_ack.max_frame &&
                   agent.window == m.u.hello_ack.window);
    }
}

static void op_capture(fuzz_in *in) {
    size_t plen = fuzz_u16(in) % 300, slen = fuzz_u8(in) % 72;
    hm_bytes payload = take(in, plen), source = take(in, slen);
    uint8_t context[32];
    size_t got;
    const uint8_t *c = fuzz_take(in, 32, &got);
    uint64_t ts = fuzz_u8(in) & 1 ? fuzz_u64(in) : 0;
    uint32_t flags = fuzz_u16(in);
    uint32_t q = fuzz_u32(in) % 0x10002u, p = fuzz_u32(in) % 0x10002u, pr = fuzz_u32(in) % 0x10002u;
    hm_gate_result result;
    memset(context, 0, sizeof context);
    memcpy(context, c, got);
    unsigned st = hm_agent_capture(&agent, payload.ptr, payload.len, source.ptr, source.len,
                                   ts, context, flags, q, p, pr, &result);
    FUZZ_CHECK(st <= HM_CAPTURE_REFUSED_INVALID);
}

static void op_damaged(fuzz_in *in) {
    static uint8_t frame[HM_MAX_FRAME + 8 + 4]; /* body up to HM_MAX_FRAME + 7, CRC */
    uint8_t zero = 0;
    size_t n = fuzz_u16(in) % (HM_MAX_FRAME + 8), got;
    const uint8_t *body = fuzz_take(in, n, &got);
    uint8_t delta = fuzz_u8(in) | 1; /* nonzero */
    hm_agent_input(&agent, &zero, 1); /* ends a partial frame (which may be answered) */
    memcpy(frame, body, got);
    uint32_t crc = fuzz_crc32(frame, got);
    uint32_t bad_before = hm_frame_rx_bad(&agent.rx);
    for (int i = 0; i < 4; i++) frame[got + (size_t)i] = (uint8_t)(crc >> (8 * i));
    frame[got + (size_t)(delta % 4)] ^= delta; /* a wrong CRC */
    size_t enc = hm_cobs_encode(frame, got + 4, wire, sizeof wire - 1);
    if (!enc) return;
    wire[enc++] = 0;
    host.writes = 0;
    feed(wire, enc, fuzz_u8(in) % 24);
    FUZZ_CHECK(host.writes == 0); /* frame damage is never answered */
    FUZZ_CHECK(hm_frame_rx_bad(&agent.rx) == bad_before + 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_in in = {data, size, 0};
    if (!ready) setup();
    vclock = fuzz_u32(&in);
    do_init(&in, 0);
    unsigned mode = fuzz_u8(&in);
    if (have_agent) {
        check_agent();
        if (mode & 1) {
            op_handshake(&in);
            check_agent();
        }
    }
    int ops = 0;
    while (in.pos < in.len && ops++ < 256) {
        unsigned op = fuzz_u8(&in) % OPS;
        if (!have_agent && op != OP_RESET) continue;
        switch (op) {
        case OP_RAW: {
            size_t n = fuzz_u16(&in) % 1024, got;
            unsigned chunking = fuzz_u8(&in);
            const uint8_t *p = fuzz_take(&in, n, &got);
            feed(p, got, chunking);
            break;
        }
        case OP_ADVANCE: {
            uint32_t ms = fuzz_u16(&in), step = 1 + fuzz_u8(&in) % 64;
            if (step < ms / 256) step = ms / 256;
            for (uint32_t t = 0; t < ms; t += step) {
                vclock += step;
                hm_agent_poll(&agent);
            }
            break;
        }
        case OP_JUMP:
            vclock += fuzz_u32(&in);
            hm_agent_poll(&agent);
            break;
        case OP_CAPTURE: op_capture(&in); break;
        case OP_RESET: do_init(&in, (mode & 2) != 0); break; /* a warm reset */
        case OP_BODY: {
            size_t n = fuzz_u16(&in) % 600, got;
            unsigned chunking = fuzz_u8(&in) % 24;
            const uint8_t *p = fuzz_take(&in, n, &got);
            if (got) feed_body(p, got, chunking);
            break;
        }
        case OP_HANDSHAKE: op_handshake(&in); break;
        case OP_MESSAGE: op_message(&in); break;
        case OP_ACKALL: {
            hm_msg m;
            memset(&m, 0, sizeof m);
            m.type = HM_MSG_ACK;
            m.ack = host.hi;
            send_msg(&m, 0);
            break;
        }
        case OP_DAMAGED: op_damaged(&in); break;
        default: {
            unsigned level = fuzz_u8(&in) % 5;
            size_t n = fuzz_u8(&in), got;
            const uint8_t *p = fuzz_take(&in, n, &got);
            int rc = hm_agent_log(&agent, level, p, got);
            FUZZ_CHECK(rc == ((level <= 3 && fuzz_utf8_ok(p, got)) ? 0 : -1));
            break;
        }
        }
        if (have_agent) check_agent();
    }
#ifdef FUZZ_AGENT_TRACE /* seed maintenance: how far a script got */
    if (have_agent)
        fprintf(stderr, "sessions %u delivered %u sent %u offers %u fragments %u knowledge %u "
                "accepted %u acked %u errors %u captures %u\n", agent.counters.sessions,
                agent.counters.delivered, agent.counters.sent, agent.counters.offers,
                agent.counters.fragments, agent.counters.knowledge,
                agent.knowledge.counters.accepted, agent.packer.counters.acked,
                agent.counters.errors_sent, agent.ring.counters.captures);
#endif
    return 0;
}
