/* t_agent — drive hm_agent from tests/test_native_agent.py with a virtual clock.
 *
 * One request per line (hexio.h notation), one answer line each. "x<out>" is every
 * byte the agent wrote while handling the request ("x" if none).
 *
 *   init x<device_id> boot caps max_frame window max_message offer_n offer_t status_t
 *        x<seed> x<host_public> x<host_kid> x<host_id> ring_capacity
 *                       a fresh agent (host key none if host_public is empty; 0 for a
 *                       size means the default): "ok" x<out>, or "bad_arg"
 *   input x<bytes>      hm_agent_input: x<out>
 *   advance ms          the clock moves 1 ms at a time, hm_agent_poll after each: x<out>
 *   capture x<payload> x<source> ts x<context> flags q p prio
 *                       hm_agent_capture: status x<out>
 *   log level x<text>   hm_agent_log: result (0 / -1 as 0 / 1) x<out>
 *   status              name value pairs: the 14 STATUS fields, then the agent's
 *                       counters, the knowledge_saved callback's last seq, its number
 *                       of calls and the first two bytes of its hash, packer
 *                       records_released / records_returned, ring pinned
 *   state               session next_seq snd_una snd_nxt expected rto max_frame window
 *                       wall_ms
 *   sizes               sizeof hm_agent, hm_ring, hm_packer, hm_knowledge, hm_join,
 *                       hm_frame_rx, the queue
 *   resume boot         a warm reset: hm_agent_init again on the same struct with the
 *                       last init's configuration, this boot counter and resume = 1:
 *                       "ok" x<out>, or "bad_arg"
 *   scribble offset x<bytes>
 *                       overwrite the agent's ring at byte `offset` of its slots
 *                       (ring.rec[0] onwards; a corrupted RAM): "ok", or "bad_arg"
 *                       beyond the ring
 *   halfbuild           what a reset inside hm_pack_build leaves: the first packable
 *                       record pinned to the tag of pending[npending], npending not
 *                       yet counted: "ok", or "none"
 *   ring                the ring's boot and seq, records held and pinned, and the
 *                       packer's boot and pending packs
 *
 * After every request the invariants A1–A4 of hm_agent.h are checked, and the ring and
 * packer must pass the resume checks (hm_ring_validate, hm_pack_resume on copies):
 * valid state at rest is never refused. A broken one ends the program with exit
 * status 1.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hexio.h"
#include "hm_agent.h"

static hm_agent agent;
static hm_host_key host_key;
static int have_agent;
static uint64_t saved_seq, saved_calls; /* the knowledge_saved callback's last call */
static uint8_t saved_hash[32];
static uint32_t vclock = 1000; /* not 0: the agent must not assume a zero start */
static hm_agent_config last_config; /* of the last successful init */
static uint8_t last_device_id[HM_ID_SIZE], last_seed[HM_SEED_SIZE];
static uint8_t last_pub[HM_PUBLIC_KEY_SIZE];   /* the public key of last_seed */
static uint8_t last_given[HM_PUBLIC_KEY_SIZE]; /* the public key the init gave, if any */
static hm_ring ring_copy;
static hm_packer packer_copy;
static int scribbled; /* the ring was overwritten: no at-rest check until an init */
static uint8_t outbuf[1u << 20];
static size_t outlen;

static void io_write(void *ctx, const uint8_t *bytes, size_t n) {
    (void)ctx;
    if (outlen + n > sizeof outbuf) {
        fprintf(stderr, "t_agent: output buffer overflow\n");
        exit(1);
    }
    memcpy(outbuf + outlen, bytes, n);
    outlen += n;
}

static void io_saved(void *ctx, uint64_t seq, const uint8_t hash[32]) {
    (void)ctx;
    saved_seq = seq;
    saved_calls++;
    memcpy(saved_hash, hash, sizeof saved_hash);
}

static uint32_t io_now(void *ctx) {
    (void)ctx;
    return vclock;
}

static void flush_out(void) {
    hexio_bytes(outbuf, outlen);
    outlen = 0;
}

static void broken(const char *what, unsigned long long detail) {
    fprintf(stderr, "t_agent: agent invariant broken: %s (%llu)\n", what, detail);
    exit(1);
}

static void check_agent(void) {
    const hm_agent *a = &agent;
    uint32_t s;
    unsigned i, bigs = 0;
    if (!have_agent) return;
    /* A1 */
    if (a->snd_una > a->snd_nxt || a->snd_nxt > a->next_seq) broken("seq order", a->snd_una);
    if (a->snd_nxt - a->snd_una > a->window) broken("window", a->snd_nxt - a->snd_una);
    if (!a->session && (a->out_n || a->snd_una != a->next_seq)) broken("no session", a->out_n);
    /* A2 */
    s = a->snd_una;
    for (i = 0; i < a->out_n; i++) {
        const hm_agent_out *e = &a->out[(a->out_head + i) % HM_AGENT_QUEUE];
        if (e->seq != s) broken("queue seqs", e->seq);
        s = e->seq + 1;
        if (e->kind != HM_OUT_SMALL) bigs++;
    }
    if (a->out_n && s != a->next_seq) broken("queue end", s);
    /* A3 */
    if (bigs > 1 || (bigs == 1) != (a->big_busy != 0)) broken("big", bigs);
    /* A4 */
    if (a->session && (a->timer_on != 0) != (a->snd_una != a->snd_nxt))
        broken("timer", a->timer_on);
    /* the memory at rest passes the resume checks */
    if (scribbled) return;
    ring_copy = a->ring;
    packer_copy = a->packer;
    if (hm_ring_validate(&ring_copy, last_device_id,
                         last_config.ring_capacity ? last_config.ring_capacity
                                                   : HM_RING_CAPACITY,
                         HM_ARENA_SIZE) != 0)
        broken("ring refused by hm_ring_validate", a->ring.seq);
    if (hm_pack_resume(&packer_copy, &ring_copy, last_seed, last_pub, a->device_kid) != 0)
        broken("packer refused by hm_pack_resume", a->packer.npending);
    if (memcmp(&ring_copy, &a->ring, sizeof ring_copy) != 0)
        broken("hm_pack_resume changed a ring at rest", 0);
}

static void run_init(hm_agent_config *c) {
    outlen = 0;
    scribbled = 0;
    if (hm_agent_init(&agent, c) != HM_AGENT_OK) {
        have_agent = 0;
        hexio_word("bad_arg");
        return;
    }
    have_agent = 1;
    hexio_word("ok");
    flush_out();
}

static void cmd_init(hexio_req *r) {
    hm_agent_config c;
    memset(&c, 0, sizeof c);
    if ((r->argc != 14 && r->argc != 15) || r->len[0] != HM_ID_SIZE ||
        r->len[9] != HM_SEED_SIZE || (r->argc == 15 && r->len[14] != HM_PUBLIC_KEY_SIZE)) {
        hexio_word("bad_arg");
        return;
    }
    c.device_id = r->bytes[0];
    c.boot = (uint32_t)r->num[1];
    c.capabilities = (uint32_t)r->num[2];
    c.max_frame = (uint16_t)r->num[3];
    c.window = (uint16_t)r->num[4];
    c.max_message = (uint32_t)r->num[5];
    c.offer_threshold = (uint32_t)r->num[6];
    c.offer_period_ms = (uint32_t)r->num[7];
    c.status_period_ms = (uint32_t)r->num[8];
    c.seed = r->bytes[9];
    if (r->len[10] == HM_PUBLIC_KEY_SIZE && r->len[11] == HM_KID_SIZE &&
        r->len[12] == HM_ID_SIZE) {
        memcpy(host_key.public_key, r->bytes[10], HM_PUBLIC_KEY_SIZE);
        memcpy(host_key.kid, r->bytes[11], HM_KID_SIZE);
        memcpy(host_key.host_id, r->bytes[12], HM_ID_SIZE);
        c.host_key = &host_key;
    }
    c.ring_capacity = (uint16_t)r->num[13];
    if (r->argc == 15) c.public_key = r->bytes[14]; /* as the key slot gives it */
    c.board = "native";
    c.firmware = "0.1.0";
    c.io.write = io_write;
    c.io.now_ms = io_now;
    c.io.knowledge_saved = io_saved;
    saved_seq = saved_calls = 0;
    memcpy(last_device_id, c.device_id, HM_ID_SIZE);
    memcpy(last_seed, c.seed, HM_SEED_SIZE);
    hm_public_key(last_pub, last_seed);
    last_config = c;
    last_config.device_id = last_device_id;
    last_config.seed = last_seed;
    if (c.public_key) { /* r's buffer is freed after this request */
        memcpy(last_given, c.public_key, HM_PUBLIC_KEY_SIZE);
        last_config.public_key = last_given;
    }
    run_init(&c);
}

/* A warm reset: the same configuration, a new boot counter, resume = 1. */
static void cmd_resume(hexio_req *r) {
    hm_agent_config c = last_config;
    if (r->argc != 1 || !c.device_id) {
        hexio_word("bad_arg");
        return;
    }
    c.boot = (uint32_t)r->num[0];
    c.resume = 1;
    run_init(&c);
}

static void cmd_scribble(hexio_req *r) {
    const size_t room = sizeof agent.ring - offsetof(hm_ring, rec);
    if (r->argc != 2 || !r->is_bytes[1] || r->num[0] > room || r->len[1] > room - r->num[0]) {
        hexio_word("bad_arg");
        return;
    }
    memcpy((uint8_t *)agent.ring.rec + r->num[0], r->bytes[1], r->len[1]);
    scribbled = 1;
    hexio_word("ok");
}

#define PAIR(name, value) (hexio_word(name), hexio_num((uint64_t)(value)))

static void cmd_status(void) {
    hm_msg_status st;
    const hm_agent_counters *c = &agent.counters;
    hm_agent_status(&agent, &st);
    PAIR("uptime_ms", st.uptime_ms);
    PAIR("ring_used", st.ring_used);
    PAIR("ring_capacity", st.ring_capacity);
    PAIR("captures", st.captures);
    PAIR("evictions", st.evictions);
    PAIR("refusals", st.refusals);
    PAIR("quarantined", st.quarantined);
    PAIR("candidates", st.candidates);
    PAIR("packs_sent", st.packs_sent);
    PAIR("packs_acked", st.packs_acked);
    PAIR("frames_good", st.frames_good);
    PAIR("frames_bad", st.frames_bad);
    PAIR("retransmits", st.retransmits);
    PAIR("knowledge_seq", st.knowledge_seq);
    PAIR("sessions", c->sessions);
    PAIR("sessions_lost", c->sessions_lost);
    PAIR("hellos", c->hellos);
    PAIR("delivered", c->delivered);
    PAIR("duplicates", c->duplicates);
    PAIR("out_of_order", c->out_of_order);
    PAIR("sent", c->sent);
    PAIR("timeouts", c->timeouts);
    PAIR("acks_sent", c->acks_sent);
    PAIR("errors_sent", c->errors_sent);
    PAIR("errors_rcvd", c->errors_rcvd);
    PAIR("ignored", c->ignored);
    PAIR("stale_hello_acks", c->stale_hello_acks);
    PAIR("busy", c->busy);
    PAIR("invalid", c->invalid);
    PAIR("results_lost", c->results_lost);
    PAIR("offers", c->offers);
    PAIR("fragments", c->fragments);
    PAIR("results_unmatched", c->results_unmatched);
    PAIR("knowledge", c->knowledge);
    PAIR("logs", c->logs);
    PAIR("saved_seq", saved_seq);
    PAIR("saved_calls", saved_calls);
    PAIR("saved_hash_head", (uint64_t)saved_hash[0] << 8 | saved_hash[1]);
    PAIR("records_released", agent.packer.counters.records_released);
    PAIR("records_returned", agent.packer.counters.records_returned);
    PAIR("pinned", agent.ring.counters.pinned);
    PAIR("packs_refused", agent.packer.counters.refused);
    PAIR("resumes", c->resumes);
    PAIR("resume_failed", c->resume_failed);
}

int main(void) {
    hexio_req r;
    while (hexio_next(&r)) {
        if (strcmp(r.cmd, "init") == 0) {
            cmd_init(&r);
        } else if (strcmp(r.cmd, "sizes") == 0) {
            hexio_num(sizeof(hm_agent));
            hexio_num(sizeof(hm_ring));
            hexio_num(sizeof(hm_packer));
            hexio_num(sizeof(hm_knowledge));
            hexio_num(sizeof(hm_join));
            hexio_num(sizeof(hm_frame_rx));
            hexio_num(sizeof agent.out);
        } else if (strcmp(r.cmd, "resume") == 0) {
            cmd_resume(&r);
        } else if (!have_agent) {
            hexio_word("no_agent");
        } else if (strcmp(r.cmd, "input") == 0 && r.argc == 1 && r.is_bytes[0]) {
            hm_agent_input(&agent, r.bytes[0], r.len[0]);
            flush_out();
        } else if (strcmp(r.cmd, "advance") == 0 && r.argc == 1) {
            uint64_t ms;
            for (ms = 0; ms < r.num[0]; ms++) {
                vclock++;
                hm_agent_poll(&agent);
                if (ms % 64 == 0) check_agent();
            }
            flush_out();
        } else if (strcmp(r.cmd, "capture") == 0 && r.argc == 8) {
            unsigned st = hm_agent_capture(&agent, r.bytes[0], r.len[0], r.bytes[1], r.len[1],
                                           r.num[2], r.len[3] == 32 ? r.bytes[3] : NULL,
                                           (uint32_t)r.num[4], (uint32_t)r.num[5],
                                           (uint32_t)r.num[6], (uint32_t)r.num[7], NULL);
            hexio_num(st);
            flush_out();
        } else if (strcmp(r.cmd, "log") == 0 && r.argc == 2) {
            int rc = hm_agent_log(&agent, (unsigned)r.num[0], r.bytes[1], r.len[1]);
            hexio_num(rc == 0 ? 0u : 1u);
            flush_out();
        } else if (strcmp(r.cmd, "scribble") == 0) {
            cmd_scribble(&r);
        } else if (strcmp(r.cmd, "halfbuild") == 0) {
            int idx = hm_ring_next(&agent.ring, 0, HM_RING_SEL_PACKABLE);
            hm_pack_pending *e = &agent.packer.pending[agent.packer.npending];
            if (idx < 0 || agent.packer.npending >= HM_PACK_PENDING) {
                hexio_word("none");
            } else {
                e->tag = 0x7FFFFFF0u; /* distinct from the counted tags of a test */
                e->records = 1;
                (void)hm_ring_pin(&agent.ring, idx, e->tag);
                scribbled = 1; /* not a state at rest */
                hexio_word("ok");
            }
        } else if (strcmp(r.cmd, "ring") == 0) {
            hexio_num(agent.ring.boot);
            hexio_num(agent.ring.seq);
            hexio_num(agent.ring.counters.used);
            hexio_num(agent.ring.counters.pinned);
            hexio_num(agent.packer.boot);
            hexio_num(agent.packer.npending);
        } else if (strcmp(r.cmd, "status") == 0) {
            cmd_status();
        } else if (strcmp(r.cmd, "state") == 0) {
            hexio_num(agent.session);
            hexio_num(agent.next_seq);
            hexio_num(agent.snd_una);
            hexio_num(agent.snd_nxt);
            hexio_num(agent.expected);
            hexio_num(agent.rto);
            hexio_num(agent.max_frame);
            hexio_num(agent.window);
            hexio_num(hm_agent_wall_ms(&agent));
        } else {
            hexio_word("bad_request");
        }
        check_agent();
        hexio_end();
        hexio_free(&r);
    }
    return 0;
}
