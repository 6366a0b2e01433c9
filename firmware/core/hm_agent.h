/* hm_agent — the device side of a hirmem session (SPEC §4–§6, §8.5).
 *
 * One explicit state struct (hm_agent) holds everything: the frame receiver, the
 * session (sequencing, acknowledgements, go-back-N retransmission), the outgoing
 * queue, the reassembly buffer, and the ring, packer and knowledge store it drives.
 * No heap, no globals; the board supplies two callbacks (hm_agent_io): write bytes
 * to the line, and read a millisecond clock. The same code runs on the host build
 * (tests/native/t_agent.c, with a virtual clock) and on boards.
 *
 * Driving it:
 *   hm_agent_init(a, &config)        sends 00 (flush the peer's receiver) and HELLO
 *   hm_agent_input(a, bytes, n)      bytes from the line, any chunking
 *   hm_agent_poll(a)                 timers: retransmission, delayed ack, HELLO
 *                                    resends, offload policy, periodic STATUS
 *   hm_agent_capture(a, ...)         the device's own sensor (CAPTURE_RESULT ref 0)
 *   hm_agent_log(a, level, text, n)  a LOG line (unsequenced, any time)
 * The callbacks are called only from inside these functions; they must not call
 * back into the agent. Call hm_agent_poll at least every few ms: the delayed ACK
 * leaves at the first poll at or after HM_AGENT_ACK_DELAY_MS.
 *
 * Session (SPEC §6):
 *  - Without a session the agent sends HELLO (seq 1, ack 0, frames of at most 128
 *    bytes), resent at 250 ms doubling to 4 s and then every 4 s, never giving up. It
 *    ignores everything but HELLO_ACK and ERROR and acknowledges nothing. A HELLO_ACK
 *    whose hello_hash is not the first 16 bytes of SHA-256 of its current HELLO answers
 *    another HELLO (an older boot's, late on the line): ignored, counted in
 *    stale_hello_acks. One that echoes it, with seq 1, ack 1, 128 <= max_frame <= offer, 1 <= window <= offer opens the
 *    session: next_seq = expected = 2, the clock offset is set from time_ms, the
 *    packer takes pack_seq/pack_hash as the host's head (hm_pack_set_head), and the
 *    first message of the session, PROOF (seq 2, SPEC 5.15: the device key over the
 *    HELLO_ACK's host_id and challenge and the HELLO as sent), is queued at once; it
 *    acknowledges the HELLO_ACK. Any other HELLO_ACK: ERROR malformed, no session.
 *  - Receiving: frame -> hm_msg_decode -> type check (the H->D types the device
 *    announced, plus HELLO_ACK, PACK_RESULT, ERROR, ACK; else ERROR unknown-type) ->
 *    ack processing (§6.2) -> sequencing (§6.3). Decode failures are answered with
 *    ERROR (code and ref of §4.3), never for an ERROR, never for frame damage (only
 *    counted). seq == expected is delivered; below or above is discarded and
 *    re-acknowledged. A request whose answer finds the outgoing queue full is
 *    answered ERROR busy and not delivered (the host's retransmission brings it back).
 *  - Sending: every sequenced message is encoded once, when it is queued, with the
 *    next seq and the ack current at that moment, and transmitted as the window
 *    allows; retransmissions are byte-identical (go-back-N over every unacked seq).
 *    RTO 250 ms doubling to 4 s, reset when an ack advances; the 8th consecutive
 *    timeout kills the session (HELLO again). An ack is owed after each delivery or
 *    re-acknowledgement; it rides on the next frame carrying the current ack, or an
 *    ACK leaves after HM_AGENT_ACK_DELAY_MS.
 *  - A session ends on 8 timeouts, on ERROR no-session, or on seq exhaustion; the
 *    queue, the reassembly and the sequence state are dropped (nothing of the old
 *    session is re-queued: pack offers are rebuilt from their records, because
 *    hm_pack_set_head at the next HELLO_ACK abandons unheld packs and unpins their
 *    records; see hm_pack.h).
 *
 * Packs: the offload policy builds a pack (hm_pack_build) when at least
 * offer_threshold records are packable (gated, unpinned), or when offer_period_ms
 * has passed since the last offer and at least one is. One PACK_OFFER is in transit
 * at a time (its bytes live in one buffer until its seq is acknowledged); it takes one
 * seq and travels whole if its body fits max_frame - 4, else in frame pieces cut from
 * the buffer at each transmission (hm_piece_encode, SPEC §6.8). A body from the host
 * in pieces is joined in hm_join before it is decoded; a too-large one is answered
 * ERROR too-large and delivered as refused. The pack is at most
 * min(HM_AGENT_PACK_CAP, host max_message - HM_AGENT_BIG_HEAD) bytes. PACK_RESULTs
 * are matched to offers in order (a FIFO of offered pack seqs, so results for packs
 * the packer already abandoned are recognised and ignored). A deferred result holds
 * the next offer back for HM_AGENT_DEFER_MS.
 *
 * Resume (a warm reset: watchdog, reset pin, QEMU system_reset). A caller that keeps
 * the hm_agent struct's memory across the reset (e.g. in a .noinit section, see
 * boards/include/board_noinit.h) sets config.resume. hm_agent_init then checks the
 * kept ring (hm_ring_validate: I1, I2, I5–I8 of hm_ring.h, bounded loops) and packer
 * (hm_pack_resume: undo a build the reset interrupted, then P1 and P4 of hm_pack.h)
 * against this config (device id, ring capacity, arena size), before it touches them:
 *  - valid: ring and packer are kept as they are (records, their ids, gate results,
 *    pins, pending packs, pack numbering, host head, their counters); everything
 *    else (session, queue, receiver, reassembly, knowledge store from the config's
 *    head, agent counters, clock) starts fresh; counters.resumes = 1. The HELLO
 *    carries the new boot counter, but the ring keeps the boot of its ids and goes on
 *    with its seq, so new captures continue the same id sequence. At the HELLO_ACK
 *    hm_pack_set_head does the rest: pending packs at or below the host head are
 *    released (the host stored them; a lost PACK_RESULT changes nothing), those above
 *    are abandoned and their records packed again. A pack the host stored is never
 *    offered again, one it did not store is offered again: nothing lost, nothing
 *    twice. If the ring is empty after that head (the host holds all of it), the
 *    ring and packer renumber under the new boot (ids boot.1, packs boot << 32 | 1).
 *  - broken (any check fails, e.g. a reset inside a ring operation, or RAM that is
 *    not this agent's): ring and packer start empty under the new boot,
 *    counters.resume_failed = 1, and at the first HELLO_ACK a LOG (level warn)
 *    "resume failed: memory lost" is sent. Never silent.
 * Not checked: record bytes and gate results (content, not structure), the recency
 * order of the volatile list, P2 (the pack bytes are gone), counters that are only
 * statistics (P5). A ring whose seq is exhausted stays so across resumes until it
 * is empty at a handshake (then it renumbers).
 *
 * INVARIANTS (tests/native/t_agent.c checks A1–A4 after every request; A5 is
 * checked on the wire by tests/test_native_agent.py):
 *  A1 Sequence state: snd_una <= snd_nxt <= next_seq, snd_nxt - snd_una <= window;
 *     without a session snd_una = snd_nxt = next_seq and the queue is empty.
 *  A2 The queue holds exactly the seqs snd_una .. next_seq - 1, in order, one entry
 *     per seq (the pack offer too, however many frame pieces it takes).
 *  A3 big_busy iff one queue entry is the pack offer (kind WHOLE or FRAGS).
 *  A4 The retransmission timer runs iff snd_una < snd_nxt (or no session: HELLO).
 *  A5 nothing but HELLO, LOG, ERROR malformed (for a bad HELLO_ACK) and empty frames
 *     is written without a session, and no frame above 128 decoded bytes.
 *
 * RAM: sizeof(hm_agent) in the default configuration (HM_RING_CAPACITY 16,
 * HM_ARENA_SIZE 2048, HM_MAX_FRAME 512, HM_MAX_MESSAGE 4096, HM_WINDOW 4,
 * HM_AGENT_QUEUE 6, HM_AGENT_PACK_CAP 1536, HM_PACK_PENDING 4, HM_KNOWLEDGE_CAPACITY
 * 8): about 15 KB, 15 104 bytes on x86-64 (t_agent `sizes`; 32-bit targets a little
 * less). Of it: hm_join 4 152 (the HM_MAX_MESSAGE + 4 buffer), hm_ring 4 936,
 * pack buffer 1 552, hm_knowledge 984, queue 672, hm_frame_rx ~560, wire + scratch
 * ~1 030, hm_packer 352. A 16 KB board sets HM_MAX_MESSAGE, HM_MAX_FRAME,
 * HM_AGENT_PACK_CAP and the ring smaller. Code: tools/size_report.py.
 */
#ifndef HM_AGENT_H
#define HM_AGENT_H

#include <stddef.h>
#include <stdint.h>

#include "hm_config.h"
#include "hm_frag.h"
#include "hm_frame.h"
#include "hm_msg.h"
#include "hm_pack.h"
#include "hm_ring.h"

/* Outgoing queue entries (sequenced messages queued or unacknowledged), >= window. */
#ifndef HM_AGENT_QUEUE
#define HM_AGENT_QUEUE 6
#endif
/* Largest pack the agent builds (>= HM_PACK_MIN_CAP). */
#ifndef HM_AGENT_PACK_CAP
#define HM_AGENT_PACK_CAP 1536
#endif
/* Bytes of one small queued body: CAPTURE_RESULT <= 77, KNOWLEDGE_RESULT <= 41,
 * STATUS <= 91 (32-bit counters, 64-bit uptime and knowledge seq). */
#define HM_AGENT_SLOT 96
#define HM_AGENT_ACK_DELAY_MS 20u
#define HM_AGENT_RTO_MS 250u
#define HM_AGENT_RTO_MAX_MS 4000u
#define HM_AGENT_MAX_TIMEOUTS 8u
#define HM_AGENT_DEFER_MS 4000u
/* Room before the pack in the pack buffer for the PACK_OFFER head (<= 16 bytes). */
#define HM_AGENT_BIG_HEAD 16

/* Queue entries the device's own CAPTURE_RESULTs leave free (a pack offer and one
 * answer to a host request); a result that finds fewer is counted in results_lost. */
#define HM_AGENT_OWN_RESERVE 2

#if HM_AGENT_QUEUE < HM_WINDOW
#error "HM_AGENT_QUEUE must be at least HM_WINDOW"
#endif
#if HM_AGENT_QUEUE <= HM_AGENT_OWN_RESERVE
#error "HM_AGENT_QUEUE must be above HM_AGENT_OWN_RESERVE"
#endif
#if HM_AGENT_PACK_CAP < HM_PACK_MIN_CAP
#error "HM_AGENT_PACK_CAP must be at least HM_PACK_MIN_CAP"
#endif

/* Capabilities (SPEC §5.2). */
#define HM_CAP_CAPTURE 0x01u
#define HM_CAP_KNOWLEDGE 0x02u
#define HM_CAP_SENSOR 0x04u
#define HM_CAP_FRAGMENTS 0x08u
#define HM_CAP_STATUS 0x10u
#define HM_CAP_ALL 0x1Fu

/* CaptureStatus (SPEC §5.5). */
#define HM_CAPTURE_STORED 0u
#define HM_CAPTURE_REFUSED_FULL 1u
#define HM_CAPTURE_REFUSED_INVALID 2u

typedef struct {
    /* Hand n bytes to the line (all of them; the agent does not retry). */
    void (*write)(void *ctx, const uint8_t *bytes, size_t n);
    /* A monotonic millisecond clock; may wrap at 2^32. */
    uint32_t (*now_ms)(void *ctx);
    /* Optional (NULL: none): a knowledge pack was accepted; keep seq and hash where
     * they survive a reset, and give them back as knowledge_seq / knowledge_hash of
     * the next hm_agent_config. Called before the KNOWLEDGE_RESULT is queued. */
    void (*knowledge_saved)(void *ctx, uint64_t seq, const uint8_t hash[32]);
    void *ctx;
} hm_agent_io;

typedef struct {
    const uint8_t *device_id;      /* 8 bytes */
    const uint8_t *seed;           /* 32-byte Ed25519 device key (copied into the packer) */
    const uint8_t *public_key;     /* its public key (32 bytes, e.g. from the key slot),
                                    * checked once against the seed: a mismatch is
                                    * HM_AGENT_E_ARG; NULL: derived from the seed */
    const hm_host_key *host_key;   /* trusted knowledge signer, NULL if none; must outlive */
    const char *board, *firmware;  /* NUL-terminated UTF-8; HELLO must fit 124 bytes */
    uint32_t boot;                 /* boot counter */
    uint32_t capabilities;         /* HM_CAP_* */
    uint16_t max_frame;            /* offer, 128 .. HM_MAX_FRAME; 0: HM_MAX_FRAME */
    uint16_t window;               /* offer, 1 .. HM_WINDOW; 0: HM_WINDOW */
    uint32_t max_message;          /* offer, <= HM_MAX_MESSAGE; 0: HM_MAX_MESSAGE */
    uint16_t ring_capacity;        /* 0: HM_RING_CAPACITY */
    uint16_t arena_size;           /* 0: HM_ARENA_SIZE */
    uint32_t offer_threshold;      /* offload at >= N packable records; 0: never by count */
    uint32_t offer_period_ms;      /* offload every T ms if any packable; 0: never by time */
    uint32_t status_period_ms;     /* unsolicited STATUS every T ms in session; 0: never */
    uint64_t knowledge_seq;        /* persisted knowledge head (0: none) */
    const uint8_t *knowledge_hash; /* its hash (32 bytes), NULL with seq 0 */
    uint8_t resume;                /* nonzero: the hm_agent struct's memory was kept
                                    * across a warm reset; resume its ring and packer */
    hm_agent_io io;
} hm_agent_config;

typedef enum {
    HM_AGENT_OK = 0,
    HM_AGENT_E_ARG = 1 /* a config value out of range, HELLO too large, or a public_key
                        * that is not the seed's */
} hm_agent_err;

typedef struct {
    uint32_t sessions;      /* HELLO_ACKs that opened a session */
    uint32_t sessions_lost; /* sessions ended (timeouts, no-session, exhaustion) */
    uint32_t hellos;        /* HELLO transmissions, first and resent */
    uint32_t delivered;     /* sequenced messages delivered */
    uint32_t duplicates;    /* sequenced messages below expected (re-acked) */
    uint32_t out_of_order;  /* sequenced messages above expected (re-acked) */
    uint32_t sent;          /* sequenced messages sent the first time */
    uint32_t retransmits;   /* sequenced messages sent again (STATUS retransmits) */
    uint32_t timeouts;      /* retransmission timer expiries (HELLO included) */
    uint32_t acks_sent;     /* ACK messages sent */
    uint32_t errors_sent;   /* ERROR messages sent */
    uint32_t errors_rcvd;   /* ERROR messages received */
    uint32_t ignored;       /* messages ignored without a session */
    uint32_t busy;          /* requests answered ERROR busy */
    uint32_t invalid;       /* captures refused-invalid before reaching the ring */
    uint32_t results_lost;  /* own CAPTURE_RESULTs not queued (no session, reserve reached) */
    uint32_t offers;        /* PACK_OFFERs queued */
    uint32_t fragments;     /* frame pieces sent (a retransmission counts again) */
    uint32_t results_unmatched; /* PACK_RESULTs with no offer outstanding */
    uint32_t knowledge;     /* KNOWLEDGE_PUSHes processed */
    uint32_t logs;          /* LOG messages sent */
    uint32_t resumes;       /* 1: this init resumed the kept ring and packer */
    uint32_t resume_failed; /* 1: resume asked, the kept memory was broken: started empty */
    uint32_t stale_hello_acks; /* HELLO_ACKs ignored: their echo is not the current HELLO's */
} hm_agent_counters;

enum { HM_OUT_SMALL = 0, HM_OUT_WHOLE = 1 }; /* WHOLE: the pack offer, framed in pieces if needed */

typedef struct {
    uint32_t seq;   /* its seq */
    uint32_t ack;   /* ack it carries */
    uint16_t len;   /* SMALL: body length */
    uint8_t kind;   /* HM_OUT_* */
    uint8_t body[HM_AGENT_SLOT];
} hm_agent_out;

typedef struct {
    /* Order: the fields the code touches most come first, the large buffers last, so
     * that most accesses are short offsets from the struct (compressed RV32C and
     * 16-bit Thumb loads and stores reach the first 124 bytes; RV32 loads reach 2 KB
     * without an extra address computation). */

    /* session */
    uint8_t session;          /* 1: HELLO_ACK received */
    uint8_t timer_on;
    uint8_t ack_due;
    uint8_t wall_known;
    uint16_t max_frame;       /* agreed (128 before the handshake) */
    uint16_t window;          /* agreed */
    uint32_t next_seq, snd_una, snd_nxt, expected;
    uint32_t rto;
    uint32_t ntimeouts;
    /* timers: the low 32 bits of `now` when each started; a timer is due once
     * (uint32_t)now - start >= its period (exact for periods below 2^32 ms) */
    uint32_t timer_from;        /* retransmission: due after rto */
    uint32_t ack_from;          /* delayed ack: due after HM_AGENT_ACK_DELAY_MS */
    uint32_t last_offer, last_status;
    uint32_t hold_from, hold_ms; /* a deferred pack result holds offers back hold_ms */

    /* clock: now = the callback's clock widened to 64 bits, 0 at init (uptime) */
    uint64_t now;
    uint32_t last_raw;
    int64_t wall_offset; /* wall = now + offset; valid if wall_known */

    /* outgoing queue (A2) and the pack offer's bytes (A3) */
    uint8_t out_head, out_n;
    uint8_t big_busy;
    uint8_t offered_n;
    uint16_t big_off;
    uint32_t big_len;

    /* configuration */
    hm_agent_io io;
    const hm_host_key *host_key;
    uint32_t boot, capabilities, max_message;
    uint16_t max_frame_offer, window_offer;
    uint32_t offer_threshold, offer_period_ms, status_period_ms;
    uint32_t host_max_message;
    uint8_t device_id[HM_ID_SIZE];
    uint8_t device_kid[HM_KID_SIZE];
    uint8_t host_id[HM_ID_SIZE];

    hm_agent_counters counters;
    uint64_t offered[2 * HM_PACK_PENDING]; /* pack seqs offered, results due, in order */
    hm_agent_out out[HM_AGENT_QUEUE];
    char board[HM_MAX_TEXT + 1], firmware[HM_MAX_TEXT + 1];

    /* receiving */
    hm_frame_rx rx;
    hm_knowledge knowledge;

    /* scratch: one encoded frame on its way out, one body being built */
    uint8_t wire[HM_FRAME_WIRE_BOUND(HM_MAX_FRAME)];
    uint8_t scratch[HM_MAX_FRAME];
    uint8_t big[HM_AGENT_BIG_HEAD + HM_AGENT_PACK_CAP];
    hm_join join;

    /* the memory it drives, last: everything before `ring` starts fresh at every init,
     * ring and packer may be resumed (see Resume above) */
    hm_ring ring;
    hm_packer packer;
} hm_agent;

/* Start the agent: ring and packer fresh, or resumed (config.resume, see Resume
 * above), knowledge store fresh, no session; writes 00 and the first HELLO.
 * HM_AGENT_E_ARG (nothing written) for a value out of range. */
hm_agent_err hm_agent_init(hm_agent *a, const hm_agent_config *config);

/* Bytes received from the line, in any chunking. */
void hm_agent_input(hm_agent *a, const uint8_t *bytes, size_t n);

/* Run the timers (see above). */
void hm_agent_poll(hm_agent *a);

/* A capture of the device's own sensor: stored in the ring and gated as a host
 * CAPTURE would be (timestamp 0: the wall clock if known, else 0), and reported with
 * CAPTURE_RESULT ref 0 when a session exists and the device announced SENSOR.
 * Returns the CaptureStatus (HM_CAPTURE_*); *result (may be NULL) gets the gate
 * result when stored. */
unsigned hm_agent_capture(hm_agent *a, const uint8_t *payload, size_t payload_len,
                          const uint8_t *source, size_t source_len, uint64_t timestamp,
                          const uint8_t context[HM_HASH_SIZE], uint32_t flags,
                          uint32_t confidence, uint32_t provenance, uint32_t priority,
                          hm_gate_result *result);

/* A LOG line (level 0..3), cut at a character boundary to 240 bytes (100 without a
 * session). Returns 0, or -1 if the text is not UTF-8 or level is above 3. */
int hm_agent_log(hm_agent *a, unsigned level, const uint8_t *text, size_t len);

/* The 14 STATUS counters (SPEC §5.10) as the agent would send them now. */
void hm_agent_status(hm_agent *a, hm_msg_status *st);

/* The wall clock (ms since the epoch), 0 before the first HELLO_ACK. */
uint64_t hm_agent_wall_ms(const hm_agent *a);

#endif
