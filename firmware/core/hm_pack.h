/* hm_pack — signed packs on a device (SPEC §8): the memory packer (device -> host)
 * and the knowledge verifier (host -> device).
 *
 * A pack is a COSE_Sign1 (tag 18) with EdDSA over Ed25519:
 *   18([ h'a2 01 27 04 48 <kid>', {}, payload, signature ])
 *   payload = [kind, pack_id, signer, seq, prev, created, items]
 *   signature over Sig_structure = ["Signature1", protected, h'', payload]
 *   pack hash = SHA-256 of the whole encoded COSE_Sign1 (tag byte d2 included)
 * Bit for bit host/hirmem/protocol/packs.py (sign_pack, verify_pack); vectors in
 * protocol/vectors/packs.json. Crypto goes only through hm_crypto.h (one-shot hash,
 * sign and verify), so both directions lay out their buffer so that the
 * Sig_structure is one contiguous run of bytes without a second copy of the payload.
 * No heap, no globals: one explicit state struct per role.
 *
 * ==== The packer (hm_packer) ========================================================
 *
 * hm_pack_build takes the packable records of the ring (CANDIDATE or QUARANTINED, not
 * pinned) in capture order, as many as fit in `cap`, chains them (the first links to
 * the pack's prev, each later one to the record before it, §7.4), signs the pack with
 * the device seed, pins the records to it and remembers it as *pending* until
 * hm_pack_result reports the host's PACK_RESULT for it.
 *
 * Build layout (no second buffer, one memmove): the payload is written once at
 * out + 27 + H (H = its bstr head), behind the 27-byte Sig_structure head
 *   84 6a "Signature1" 4d <protected> 40
 * so out[0 .. 27 + H + P) is the Sig_structure; it is signed into a 64-byte local,
 * then the payload bstr moves 10 bytes down to out + 17, behind the COSE head
 *   d2 84 4d <protected> a0
 * and 58 40 <signature> follows it. The whole pack (83 + H + P bytes) is what `cap`
 * must hold; the Sig_structure is 56 bytes shorter, so cap bounds both.
 *
 * Chain-head rules (SPEC §8.5), and what happens to refused packs:
 *  - Sequence. A pack's seq is (boot << 32) | n. The next seq is
 *      max((boot << 32) | 1, last_seq + 1, host_seq + 1)
 *    where last_seq is the highest seq this packer ever signed and host_seq the host's
 *    head (HELLO_ACK pack_seq, or the last pack it accepted). A seq is never reused:
 *    a refused, deferred or abandoned pack's seq is burnt.
 *  - Pending chain. The pending packs always form one chain that starts at the host's
 *    head: pending[0].prev = host_hash, pending[i].prev = pending[i-1].hash. A new
 *    pack links to the last pending pack, or to host_hash if none is pending
 *    (hm_pack_prev). This is §8.5's "the hash of the device's last signed pack, or
 *    pack_hash if it holds no unaccepted pack", with packs that can no longer be
 *    accepted dropped from "held".
 *  - accepted / duplicate for pending[i]: the host now holds pending[0..i] (it only
 *    accepts a pack whose prev is its head, so accepting pending[i] means it holds
 *    the packs it links to): their records are released (freed from the ring), and
 *    (seq, hash) of pending[i] becomes the host head.
 *  - refused / deferred for pending[i]: the host kept nothing of it. Its records are
 *    unpinned (hm_ring_unpin_pack): they stay in the ring, packable again, and go
 *    into the next pack, first (lowest capture seq). pending[i+1..] link to it, so no
 *    honest host can accept them any more: they are *abandoned* at once, their
 *    records unpinned as well. The next pack links to pending[i-1] (still pending,
 *    may yet be accepted) or to the host head. The refusal is counted (refused or
 *    deferred, last_reason); abandoned packs are counted. A later PACK_RESULT for an
 *    abandoned pack (it will be refused with broken-chain) answers
 *    HM_PACK_E_UNKNOWN and changes nothing.
 *    Deferred (SPEC §5.7: "offer the same bytes again later"): a caller that keeps
 *    the bytes and re-offers them simply does not report the deferral; a caller
 *    that reports it must drop the bytes, because the records are re-packed.
 *  - hm_pack_set_head (each HELLO_ACK): pending packs with seq <= pack_seq are held
 *    by the host (§8.5, §6.6): released. Pending packs above it are not held; the
 *    core keeps no pack bytes, so they are abandoned (records unpinned and re-packed;
 *    the caller must not re-queue their PACK_OFFERs into the new session). The host
 *    head becomes (pack_seq, pack_hash), and so does the next prev. If pack_seq is at
 *    or above (boot << 32) | 1, numbering continues from pack_seq + 1 (a device that
 *    lost its RAM or whose boot counter did not persist).
 *  - Exhaustion: when the next seq would pass 2^64 - 1, build answers
 *    HM_PACK_E_EXHAUSTED (nothing is ever signed twice with one seq).
 *
 * INVARIANTS (tests/native/t_pack.c checks P1, P4, P5 after every request):
 *  P1 pending[0 .. npending) are in signing order, seqs strictly increasing, all
 *     above host_seq and at most last_seq; tags distinct and nonzero.
 *  P2 pending[0] links to host_hash, pending[i] to pending[i-1].hash; hm_pack_prev is
 *     the last pending hash, or host_hash.
 *  P3 every seq built is above every seq built before and above host_seq.
 *  P4 a ring record is pinned iff it is carried by exactly one pending pack; its pin
 *     tag is that pack's tag, and pending[i].records counts those records.
 *  P5 records_sent = records_released + records_returned + records pinned now.
 *  P6 a record leaves the ring only through a release, i.e. only after the host
 *     acknowledged a pack carrying it (a result accepted or duplicate, or a HELLO_ACK
 *     head at or above that pack's seq). Nothing is dropped silently.
 * Records whose source is not UTF-8 cannot be carried (no verifier accepts such a
 * tstr): build skips them and counts them in `unsendable`; they stay in the ring. The
 * capture path should refuse such sources (CAPTURE_RESULT refused-invalid).
 *
 * RAM (Cortex-M3 and RV32IMAC alike, default configuration): hm_packer 352 bytes
 * (48 per pending pack), hm_knowledge 984 bytes (112 per item).
 *
 * ==== The knowledge verifier (hm_knowledge) =========================================
 *
 * hm_knowledge_accept runs SPEC §8.4 for kind 2 with require_chain false, in order,
 * with the host key the board provisioned (hm_host_key), and gives the same status
 * and reason as host/hirmem/protocol/packs.py verify_pack(kind=KNOWLEDGE, require_chain=False)
 * with the held head (seq, hash) as chain head (none while seq is 0). One deliberate
 * difference: step 6 refuses (malformed) every protected-header key other than 1 and
 * 4, as SPEC §8.4 and the CDDL say; the host reference ignores extra text and byte
 * string labels (it only compares the integer keys).
 * On acceptance the store is replaced by the pack's items, all or nothing (each
 * knowledge pack is a full snapshot: a device may have missed versions). Items that
 * the store cannot hold (more than HM_KNOWLEDGE_CAPACITY, or a text longer than
 * HM_KNOWLEDGE_TEXT bytes) give status deferred, reason storage, after every
 * verification step passed; the store and the held head are then unchanged.
 * Signature check in place: `pack` must be writable. Step 8 copies the signature out,
 * moves the protected bstr and the payload bstr 10 bytes up inside the pack (into the
 * room of the signature) to form the Sig_structure, verifies, and moves them back.
 * On return the pack bytes are as they were.
 */
#ifndef HM_PACK_H
#define HM_PACK_H

#include <stddef.h>
#include <stdint.h>

#include "hm_config.h"
#include "hm_crypto.h"
#include "hm_ring.h"

/* Packs awaiting their PACK_RESULT at once (1 .. 64). */
#ifndef HM_PACK_PENDING
#define HM_PACK_PENDING 4
#endif
/* Knowledge items held (1 .. 65535) and the bound of each of their three texts in
 * bytes (1 .. 255). */
#ifndef HM_KNOWLEDGE_CAPACITY
#define HM_KNOWLEDGE_CAPACITY 8
#endif
#ifndef HM_KNOWLEDGE_TEXT
#define HM_KNOWLEDGE_TEXT 32
#endif

#if HM_PACK_PENDING < 1 || HM_PACK_PENDING > 64
#error "HM_PACK_PENDING must be 1..64"
#endif
#if HM_KNOWLEDGE_CAPACITY < 1 || HM_KNOWLEDGE_CAPACITY > 65535
#error "HM_KNOWLEDGE_CAPACITY must be 1..65535"
#endif
#if HM_KNOWLEDGE_TEXT < 1 || HM_KNOWLEDGE_TEXT > 255
#error "HM_KNOWLEDGE_TEXT must be 1..255"
#endif

#define HM_PACK_MAX 65536u     /* MAX_PACK, SPEC §8.1 */
#define HM_PACK_ID_SIZE 16     /* signer || seq (u64 BE) */
#define HM_PACK_KIND_MEMORY 1u
#define HM_PACK_KIND_KNOWLEDGE 2u
#define HM_TRIPLE_ID_SIZE 8
/* A pack of one largest record (HM_RECORD_MAX_SIZE) with the largest seq and
 * created fits in this many bytes; a smaller cap may fit no record at all. */
#define HM_PACK_MIN_CAP 676u

/* PackStatus (SPEC §5.7). */
typedef enum {
    HM_PACK_ACCEPTED = 0,
    HM_PACK_DUPLICATE = 1,
    HM_PACK_REFUSED = 2,
    HM_PACK_DEFERRED = 3
} hm_pack_status;

/* Refusal reasons (SPEC §8.4), the wire codes. */
typedef enum {
    HM_REASON_NONE = 0,
    HM_REASON_MALFORMED = 1,
    HM_REASON_TOO_LARGE = 2,
    HM_REASON_UNSUPPORTED_ALG = 3,
    HM_REASON_UNKNOWN_KEY = 4,
    HM_REASON_BAD_SIGNATURE = 5,
    HM_REASON_WRONG_SIGNER = 6,
    HM_REASON_ROLLBACK = 7,
    HM_REASON_REPLAY = 8,
    HM_REASON_BROKEN_CHAIN = 9,
    HM_REASON_BAD_RECORD = 10,
    HM_REASON_STORAGE = 11
} hm_pack_reason;

/* "accepted", "duplicate", "refused", "deferred"; "?" beyond. */
const char *hm_pack_status_name(unsigned status);
/* "none", "malformed", "too-large", "unsupported-alg", "unknown-key", "bad-signature",
 * "wrong-signer", "rollback", "replay", "broken-chain", "bad-record", "storage". */
const char *hm_pack_reason_name(unsigned reason);

/* ---- the packer ------------------------------------------------------------------ */

typedef enum {
    HM_PACK_OK = 0,
    HM_PACK_NOTHING = 1,     /* build: no packable record; nothing built */
    HM_PACK_E_SPACE = 2,     /* build: cap cannot hold the first packable record */
    HM_PACK_E_BUSY = 3,      /* build: HM_PACK_PENDING packs await their results */
    HM_PACK_E_EXHAUSTED = 4, /* build: the next seq would pass 2^64 - 1 */
    HM_PACK_E_DEVICE = 5,    /* build: the ring's device id or boot is not the packer's */
    HM_PACK_E_UNKNOWN = 6,   /* result: no pending pack has this seq; nothing changed */
    HM_PACK_E_ARG = 7        /* a status above 3, or a NULL output pointer */
} hm_pack_err;

typedef struct {
    uint64_t seq;              /* the pack's seq */
    uint8_t hash[HM_HASH_SIZE]; /* its pack hash */
    uint32_t tag;              /* pin tag of its records in the ring (nonzero) */
    uint32_t records;          /* records it carries */
} hm_pack_pending;

typedef struct {
    uint32_t built;            /* packs signed (STATUS packs_sent) */
    uint32_t acked;            /* results accepted or duplicate (STATUS packs_acked) */
    uint32_t duplicates;       /* of which duplicate */
    uint32_t refused;          /* results refused */
    uint32_t deferred;         /* results deferred */
    uint32_t abandoned;        /* pending packs dropped: linked to a refused or deferred
                                * pack, or above a HELLO_ACK head */
    uint32_t head_acked;       /* pending packs a HELLO_ACK head showed held */
    uint32_t records_sent;     /* records put in packs (a re-packed record again) */
    uint32_t records_released; /* records freed: the host holds them */
    uint32_t records_returned; /* records unpinned, packable again */
    uint32_t unsendable;       /* packable records the last build skipped: source not UTF-8 */
    uint8_t last_reason;       /* reason of the last refused or deferred result */
} hm_pack_counters;

typedef struct {
    /* the small fields first: short offsets from the struct, smaller code */
    uint32_t npending;
    uint32_t boot;                  /* boot counter: seq = (boot << 32) | n */
    uint32_t next_tag;              /* pin tags, counted (0 skipped) */
    uint64_t last_seq;              /* highest seq signed, 0 before the first pack */
    uint64_t host_seq;              /* host's chain head: seq of the last pack it holds */
    hm_pack_counters counters;
    uint8_t device_id[HM_ID_SIZE];  /* signer of the packs */
    uint8_t kid[HM_KID_SIZE];       /* kid of the device key (protected header) */
    uint8_t seed[HM_SEED_SIZE];     /* the device signing key: never logged or sent */
    uint8_t pub[HM_PUBLIC_KEY_SIZE]; /* its public key, checked by the caller */
    uint8_t host_hash[HM_HASH_SIZE]; /* pack hash of host_seq (32 zero bytes: none) */
    hm_pack_pending pending[HM_PACK_PENDING]; /* P1, P2 */
} hm_packer;

/* A packer with nothing signed and the genesis head (seq 0, 32 zero bytes) until a
 * HELLO_ACK says otherwise. seed is the 32-byte Ed25519 private key, pub its public
 * key (the caller derived or checked it: hm_sign does not derive it again), kid the
 * 8-byte key id of pub (SHA-256(public)[0..8), host/hirmem/protocol/keys.py). */
void hm_pack_init(hm_packer *p, const uint8_t device_id[HM_ID_SIZE], uint32_t boot,
                  const uint8_t seed[HM_SEED_SIZE], const uint8_t pub[HM_PUBLIC_KEY_SIZE],
                  const uint8_t kid[HM_KID_SIZE]);

/* Zero the whole state, seed included (the writes are not optimised away). */
void hm_pack_wipe(hm_packer *p);

/* Resume (hm_agent.h): take over a packer kept across a warm reset, driving `ring`,
 * which hm_ring_validate has accepted. First a build the reset interrupted is undone:
 * hm_pack_build pins its records to pending[npending].tag before it signs and commits
 * the pack (npending++), so those records are unpinned (the pack was never counted or
 * offered; its seq may be burnt). Then P1 and P4 are checked (P2 cannot be: the
 * pack bytes are gone), and the packer's device id and boot must be the ring's. 0: the packer keeps its pending packs, sequence and host head, and takes
 * seed, pub and kid anew; -1: broken (the caller starts fresh; the ring may have been
 * unpinned). P5 (counters) is not checked. */
int hm_pack_resume(hm_packer *p, hm_ring *ring, const uint8_t seed[HM_SEED_SIZE],
                   const uint8_t pub[HM_PUBLIC_KEY_SIZE], const uint8_t kid[HM_KID_SIZE]);

/* Apply a HELLO_ACK's pack_seq / pack_hash (see the chain-head rules above). */
void hm_pack_set_head(hm_packer *p, hm_ring *ring, uint64_t pack_seq,
                      const uint8_t pack_hash[HM_HASH_SIZE]);

/* The prev of the next pack (P2) and its seq (0 if exhausted). */
const uint8_t *hm_pack_prev(const hm_packer *p);
uint64_t hm_pack_next_seq(const hm_packer *p);

/* Build and sign the next memory pack into out[0 .. cap) (cap above HM_PACK_MAX counts
 * as HM_PACK_MAX); *len = its size, *seq = its seq. Records: see above; on any
 * result but HM_PACK_OK nothing is signed, pinned or counted (except `unsendable`).
 * Cost: one hm_sign over the Sig_structure, one SHA-256 per record over its hash input
 * and one over the pack, one memmove of the payload. Stack, deepest path (GCC 12 -Os,
 * -fcallgraph-info): 2.78 KB on Cortex-M3 (240 bytes of its own + hm_ed25519_sign),
 * 2.74 KB on RV32IMAC (256 + the same). */
hm_pack_err hm_pack_build(hm_packer *p, hm_ring *ring, uint64_t created_ms, uint8_t *out,
                          size_t cap, size_t *len, uint64_t *seq);

/* Report the PACK_RESULT of the pending pack `seq` (PACK_RESULT comes in offer order;
 * the caller matches it to its offer). status is a PackStatus; reason is kept in
 * counters.last_reason for refused and deferred. */
hm_pack_err hm_pack_result(hm_packer *p, hm_ring *ring, uint64_t seq, unsigned status,
                           unsigned reason);

/* ---- the knowledge verifier ---------------------------------------------------- */

/* The host key a board provisions at build time (typically a const in flash). */
typedef struct {
    uint8_t public_key[HM_PUBLIC_KEY_SIZE]; /* checked not small-order when provisioned */
    uint8_t kid[HM_KID_SIZE];
    uint8_t host_id[HM_ID_SIZE];            /* the signer of knowledge packs */
} hm_host_key;

/* A knowledge item [triple_id, subject, predicate, object, confidence]; texts are
 * UTF-8 bytes, not NUL-terminated. */
typedef struct {
    uint8_t triple_id[HM_TRIPLE_ID_SIZE];
    uint32_t confidence; /* Q16.16, 0 .. 0x10000 */
    uint8_t subject_len, predicate_len, object_len;
    uint8_t subject[HM_KNOWLEDGE_TEXT];
    uint8_t predicate[HM_KNOWLEDGE_TEXT];
    uint8_t object[HM_KNOWLEDGE_TEXT];
} hm_knowledge_item;

typedef struct {
    uint32_t accepted, duplicates, refused, deferred;
    uint8_t last_reason; /* of the last refused or deferred pack */
} hm_knowledge_counters;

/* INVARIANTS: K1 count <= HM_KNOWLEDGE_CAPACITY and items[0 .. count) are the items
 * of the pack (seq, hash), in its order; K2 seq and hash change only when a pack is
 * accepted, and seq only grows through hm_knowledge_accept; K3 last_pack_id is the id
 * of the last pack that got past step 9 of §8.4, 16 zero bytes otherwise. */
typedef struct {
    const hm_host_key *key;         /* NULL: no host key, every pack is unknown-key */
    uint64_t seq;                   /* held knowledge seq (KNOWLEDGE_RESULT held_seq), 0 none */
    uint8_t hash[HM_HASH_SIZE];     /* its pack hash */
    uint8_t last_pack_id[HM_PACK_ID_SIZE]; /* KNOWLEDGE_RESULT pack_id of the last call */
    uint32_t count;
    hm_knowledge_counters counters;
    hm_knowledge_item items[HM_KNOWLEDGE_CAPACITY]; /* last: the rest are short offsets */
} hm_knowledge;

/* An empty store that trusts `key` (may be NULL). */
void hm_knowledge_init(hm_knowledge *k, const hm_host_key *key);

/* Restore a persisted head (SPEC §8.5: a device SHOULD persist it); items are not
 * touched. */
void hm_knowledge_set_head(hm_knowledge *k, uint64_t seq, const uint8_t hash[HM_HASH_SIZE]);

/* Verify a pushed knowledge pack (pack[0 .. len), writable, restored on return) and
 * keep it: returns the PackStatus for KNOWLEDGE_RESULT and sets *reason (0 unless
 * refused or deferred); reason may be NULL. Stack, deepest path: 3.29 KB on Cortex-M3
 * (280 bytes of its own + hm_ed25519_verify), 3.23 KB on RV32IMAC (288 + the same). */
hm_pack_status hm_knowledge_accept(hm_knowledge *k, uint8_t *pack, size_t len,
                                   hm_pack_reason *reason);

#endif
