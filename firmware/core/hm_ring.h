/* hm_ring — the device's working memory (lifecycle stage 1, SPEC §7).
 *
 * A bounded store of at most HM_RING_CAPACITY records whose payload and source bytes
 * live in one arena of HM_ARENA_SIZE bytes (hm_config.h). One explicit state struct
 * (hm_ring), no heap, no globals. Record fields are those of a wire record (§7.1);
 * the 16-byte id is not stored: it is device_id || boot (u32 BE) || seq (u32 BE), and
 * device_id and boot are the ring's (hm_ring_id builds it).
 *
 * Lifecycle on a device:
 *   capture -> VOLATILE --hm_ring_gate / hm_ring_set_state--> CANDIDATE | QUARANTINED
 *   CANDIDATE | QUARANTINED --hm_ring_pin (offered in a pack)--> pinned
 *   pinned --hm_ring_unpin (pack refused)--> unpinned again
 *   pinned --hm_ring_release (pack acknowledged by the host)--> slot freed
 *   VOLATILE --evicted by a capture that needs room--> slot freed
 * VOLATILE -> CANDIDATE and VOLATILE -> QUARANTINED are the only state changes a
 * device makes: consolidation, archiving and re-promotion happen on the host, and a
 * pack verifier requires each record's state to be its gate disposition (§8.6), so a
 * device cannot quarantine a candidate afterwards either.
 *
 * INVARIANTS (kept by every function; tests/native/ring_check.c checks them after every
 * operation of t_core's scenarios, and verify/ring/ring_explore.c after every step of
 * every operation sequence up to a bound, tools/verify_c.py). The ACSL predicate
 * ring_ok in hm_ring.c states the part of them that is a fact of each slot or pair of
 * slots (I1's seqs, I5, I6's geometry, I7, I8's captures = seq + refusals, every link in
 * range); every function's contract requires and ensures it, and WP (tools/verify_c.py
 * ring-wp) proves the goals not listed in verify/ring/wp_unproved.txt, which lists among
 * others ring_ok kept by most stores (protocol/SPEC.md §13: which invariant how):
 *  I1 Slots. Each of the `capacity` slots is free (seq == 0, on the free list) or
 *     live (seq >= 1). Live seqs are distinct and <= ring->seq, so record ids are
 *     unique within a boot; seq counts stored records from 1 (refusals use none).
 *  I2 Recency. The live VOLATILE records are exactly the members of one list ordered
 *     by last access, most recent first; access = capture or hm_ring_get. (Gated
 *     records are never evicted, so their recency is not kept.) counters.volatiles is
 *     that list's length.
 *  I3 Eviction. A capture evicts only VOLATILE records, least recently accessed
 *     first, and stops as soon as a free slot and a run of free blocks for its bytes
 *     exist (I6). CANDIDATE,
 *     QUARANTINED and pinned records are never evicted: they leave the ring only by
 *     hm_ring_release, which requires a pin, i.e. a pack the host acknowledged.
 *  I4 Backpressure. If even evicting every VOLATILE record would not make room, the
 *     capture evicts nothing, stores nothing and returns HM_RING_REFUSED_FULL; every
 *     refusal is counted. Nothing is ever dropped silently.
 *  I5 Pins. pack != 0 (pinned) only for CANDIDATE or QUARANTINED records.
 *  I6 Arena. The arena is HM_RING_BLOCKS (32) blocks of block_size = arena_size / 32
 *     bytes. A live record holds nblocks = ceil((payload_len + source_len) /
 *     block_size) consecutive blocks from `block` (0 for an empty record), payload then
 *     source. ring->used_blocks is the union of the live records' block sets, which
 *     are disjoint; ring->vol_blocks that of the VOLATILE ones. Bytes never move: the
 *     pointers of hm_ring_payload/hm_ring_source stay valid while the record is live.
 *     A capture takes the lowest run of free blocks that fits (first fit).
 *  I7 Scores. A VOLATILE record has layer WORKING, all gate fields, confidence,
 *     provenance and priority zero and chained == 0; a gated record has layer
 *     EPISODIC. After hm_ring_gate its flags are normalised (§9.3) against its own
 *     payload, source, timestamp and context and its state is the gate disposition.
 *     hash and prev_hash are meaningful only while chained == 1 (hm_ring_set_chain;
 *     hm_ring_unpin clears it, since the next pack links the record differently).
 *  I8 Counters. captures = stored + refusals; evictions, candidates and quarantines
 *     count those events; used, volatiles, pinned and arena_used (bytes of the blocks
 *     held) describe the ring now.
 *
 * Why fixed blocks. Payloads are 0..256 bytes plus 0..64 of source. One fixed area
 * per slot would need 320 bytes per slot (5 KB at 16 slots) or refuse payloads the
 * protocol allows. A compacting arena is exact about bytes, but every eviction must
 * move the bytes above the victim (the LRU victim is usually the oldest, lowest
 * record, so that is nearly the whole arena) and fix every offset: measured on a
 * Cortex-M3, about 290 instructions more per eviction plus a memmove of up to 2 KB,
 * i.e. on nearly every capture of a full ring. Blocks with
 * a 32-bit map cost O(1) per capture and eviction: the free run is found with k - 1
 * shift-ANDs and one count-trailing-zeros, and nothing moves. The price: up to one
 * block minus one byte of slack per record (64-byte blocks at the default 2 KB), and
 * fragmentation: "full" can mean "no run of free blocks long enough" while enough
 * blocks are free in pieces. The capture then evicts LRU records until a run forms;
 * if no run could form even after evicting every VOLATILE record, it refuses without
 * evicting (I4). The source shares the payload's blocks. At most 32 records can be
 * non-empty, whatever HM_RING_CAPACITY says.
 *
 * Why lists and not recency stamps: the LRU victim is the tail of the volatile list
 * (O(1), no scan, no stamp wrap-around), access moves a record to the head (O(1)),
 * and free slots are a LIFO list: a freed slot is the next one a capture takes (at
 * init, slot 0 first). There is no loop over the slots on the capture path; the only
 * loop is the run search, at most (blocks per record - 1) steps. hm_ring_next is
 * O(capacity) per call and meant for pack building.
 *
 * Measured cost of hm_ring_capture (tools/bench_core.py: GCC 12 -Os, instructions
 * counted in QEMU, default configuration, 64-byte payload and 5-byte source; the
 * payload memcpy not counted, the source and the 32-byte context copies counted):
 * Cortex-M3 197 instructions without an eviction, 241 with one; rv32imac 254 and 299
 * (goal 300). What keeps the eviction cheap: the ring's scalar fields come first in
 * the struct (rv32 reaches them with 12-bit offsets), the run search asks "what if the
 * LRU record went" before evicting, so one eviction costs one search, and the evicted
 * slot is reused in place (no free-list round trip, no counter churn).
 */
#ifndef HM_RING_H
#define HM_RING_H

#include <stddef.h>
#include <stdint.h>

#include "hm_config.h"
#include "hm_gate.h"

#if HM_RING_CAPACITY < 1 || HM_RING_CAPACITY > 254
#error "HM_RING_CAPACITY must be 1..254 (slot links are bytes)"
#endif
#if HM_ARENA_SIZE < HM_MAX_PAYLOAD + HM_MAX_SOURCE || HM_ARENA_SIZE > 65535
#error "HM_ARENA_SIZE must be 320..65535: one largest record fits an empty ring"
#endif

#define HM_RING_BLOCKS 32 /* the arena's blocks: one bit each in a uint32_t */

typedef enum {
    HM_RING_OK = 0,
    HM_RING_REFUSED_FULL = 1,    /* CaptureStatus refused-full: no room even by evicting */
    HM_RING_REFUSED_INVALID = 2, /* CaptureStatus refused-invalid: sizes out of bounds */
    HM_RING_NO_RECORD = 3,       /* index out of range or slot free */
    HM_RING_BAD_STATE = 4,       /* not allowed in the record's state (or pin state) */
    HM_RING_BAD_ARG = 5          /* an argument out of its range */
} hm_ring_status;

typedef struct {
    uint8_t context[HM_HASH_SIZE];   /* event-frame hash from the capture */
    uint8_t hash[HM_HASH_SIZE];      /* §7.4, set by the pack builder; valid if chained */
    uint8_t prev_hash[HM_HASH_SIZE]; /* §7.4, likewise */
    uint64_t timestamp;              /* ms since the epoch, 0 = unknown */
    hm_gate_result gate;             /* normalised flags and h..w, verdict, hard */
    uint32_t seq;                    /* capture_seq of the id (§7.2); 0 = free slot */
    uint32_t confidence, provenance, priority; /* Q, P, relevance (Q16.16) */
    uint32_t pack;                   /* 0 = not pinned, else the pinning pack's tag */
    uint16_t payload_len;            /* 0..256 */
    uint8_t source_len;              /* 0..64 */
    uint8_t block, nblocks;          /* payload at block * block_size, source after it */
    uint8_t state;                   /* HM_STATE_VOLATILE, _CANDIDATE or _QUARANTINED */
    uint8_t layer;                   /* HM_LAYER_WORKING while volatile, else EPISODIC */
    uint8_t chained;                 /* 1: hash and prev_hash are set (I7) */
    uint8_t prev, next;              /* list links (internal) */
} hm_ring_record;

typedef struct {
    uint32_t captures;    /* hm_ring_capture calls, stored or refused */
    uint32_t evictions;   /* volatile records evicted to make room */
    uint32_t refusals;    /* captures refused (full or invalid) */
    uint32_t quarantines; /* records that became QUARANTINED */
    uint32_t candidates;  /* records that became CANDIDATE */
    uint32_t used;        /* records held now */
    uint32_t volatiles;   /* VOLATILE records held now (the evictable ones) */
    uint32_t pinned;      /* records pinned by an unacknowledged pack now */
    uint32_t arena_used;  /* arena bytes held now, in whole blocks */
} hm_ring_counters;

/* The scalar fields come first: at small offsets from the struct, which rv32 reaches
 * with a 12-bit immediate (after 2.8 KB of slots and a 2 KB arena every access needs
 * two more instructions to form the address). */
typedef struct {
    hm_ring_counters counters;
    uint8_t device_id[HM_ID_SIZE];
    uint32_t boot;         /* boot counter of the ids */
    uint32_t seq;          /* last capture_seq assigned (0: none yet) */
    uint32_t used_blocks;  /* bit b set: block b belongs to a live record */
    uint32_t vol_blocks;   /* bit b set: block b belongs to a VOLATILE record */
    uint16_t capacity;     /* slots in use by this ring, <= HM_RING_CAPACITY */
    uint16_t block_size;   /* arena_size / HM_RING_BLOCKS, >= 10 */
    uint8_t free_head;     /* free-slot list (LIFO) */
    uint8_t mru, lru;      /* volatile list: most and least recently accessed */
    hm_ring_record rec[HM_RING_CAPACITY]; /* 8-aligned (a record holds a uint64_t) */
    uint8_t arena[HM_ARENA_SIZE]; /* 8-aligned: follows an array of 8-aligned records */
} hm_ring;

#define HM_RING_NIL 0xFFu

/* Selectors of hm_ring_next: any of these states ... */
#define HM_RING_SEL_VOLATILE    (1u << HM_STATE_VOLATILE)
#define HM_RING_SEL_CANDIDATE   (1u << HM_STATE_CANDIDATE)
#define HM_RING_SEL_QUARANTINED (1u << HM_STATE_QUARANTINED)
/* ... and, optionally, only unpinned or only pinned records. */
#define HM_RING_SEL_UNPINNED 0x100u
#define HM_RING_SEL_PINNED   0x200u
/* Records that a new pack may carry: gated and not in an unacknowledged pack. */
#define HM_RING_SEL_PACKABLE \
    (HM_RING_SEL_CANDIDATE | HM_RING_SEL_QUARANTINED | HM_RING_SEL_UNPINNED)

/* An empty ring with every slot and the whole arena; seq restarts at 1. */
void hm_ring_init(hm_ring *ring, const uint8_t device_id[HM_ID_SIZE], uint32_t boot);

/* The same with fewer slots or a smaller arena (tests, or a board lending RAM):
 * HM_RING_BAD_ARG unless 1 <= capacity <= HM_RING_CAPACITY and
 * HM_MAX_PAYLOAD + HM_MAX_SOURCE <= arena_size <= HM_ARENA_SIZE. The block size is
 * arena_size / 32 (bytes beyond 32 blocks are not used). */
hm_ring_status hm_ring_init_sized(hm_ring *ring, const uint8_t device_id[HM_ID_SIZE],
                                  uint32_t boot, unsigned capacity, unsigned arena_size);

/* Stage 1: store a VOLATILE record, the most recently accessed, with the next seq,
 * the timestamp, source and 32-byte context given, evicting least recently accessed
 * VOLATILE records as needed (I3). Returns
 *   HM_RING_OK               stored; *out_index (if not NULL) is its slot;
 *   HM_RING_REFUSED_FULL     nothing evictable makes room (I4), or seq is exhausted
 *                            (2^32 - 1 records this boot: reboot for a new boot counter);
 *   HM_RING_REFUSED_INVALID  payload_len > 256, source_len > 64, context NULL, or a
 *                            NULL pointer with a nonzero length.
 * Both refusals leave the ring unchanged except captures and refusals. Reserved
 * ACTION_FLAGS bits (§9.3) are the caller's to refuse before capturing. */
hm_ring_status hm_ring_capture(hm_ring *ring, const uint8_t *payload, size_t payload_len,
                               const uint8_t *source, size_t source_len, uint64_t timestamp,
                               const uint8_t context[HM_HASH_SIZE], int *out_index);

/* An access: the record at `index` (NULL if none); a VOLATILE one becomes the most
 * recently accessed. */
const hm_ring_record *hm_ring_get(hm_ring *ring, int index);

/* The record at `index` (NULL if none) without counting as an access. */
const hm_ring_record *hm_ring_peek(const hm_ring *ring, int index);

/* A live record's payload (payload_len bytes) and source (source_len bytes); see I6
 * for how long the pointers stay valid. */
const uint8_t *hm_ring_payload(const hm_ring *ring, const hm_ring_record *rec);
const uint8_t *hm_ring_source(const hm_ring *ring, const hm_ring_record *rec);

/* The 16-byte record id (§7.2): device_id || boot (BE) || seq (BE). */
void hm_ring_id(const hm_ring *ring, const hm_ring_record *rec,
                uint8_t id[HM_RECORD_ID_SIZE]);

/* Stages 2 and 3 on a VOLATILE record: normalise `flags` against the record (§9.3),
 * run the gate with Q = quality and P = provenance (§9.4), store the results with
 * priority, and move the record to the gate's disposition (counted). *out (if not
 * NULL) receives the result. HM_RING_BAD_ARG (record untouched) if flags sets a bit
 * above 11 or quality, provenance or priority is above 1.0; HM_RING_BAD_STATE if the
 * record is not VOLATILE. */
hm_ring_status hm_ring_gate(hm_ring *ring, int index, uint32_t flags, uint32_t quality,
                            uint32_t provenance, uint32_t priority, hm_gate_result *out);

/* The raw state change: only VOLATILE -> CANDIDATE or VOLATILE -> QUARANTINED
 * (counted; the record leaves the eviction list, layer becomes EPISODIC). Other
 * changes: HM_RING_BAD_STATE; a state above 4: HM_RING_BAD_ARG. A device records gate
 * results with hm_ring_gate, which uses this. */
hm_ring_status hm_ring_set_state(hm_ring *ring, int index, unsigned state);

/* The pack builder stores a gated, unpinned record's hash and prev_hash (§7.4) and
 * sets chained. */
hm_ring_status hm_ring_set_chain(hm_ring *ring, int index, const uint8_t hash[HM_HASH_SIZE],
                                 const uint8_t prev_hash[HM_HASH_SIZE]);

/* Pin a gated, unpinned record to the unacknowledged pack `pack` (any nonzero tag,
 * e.g. the low word of the pack's seq); HM_RING_BAD_ARG for 0, HM_RING_BAD_STATE if
 * VOLATILE or already pinned. */
hm_ring_status hm_ring_pin(hm_ring *ring, int index, uint32_t pack);

/* The pack was refused or abandoned: the pinned record becomes packable again (and
 * unchained: the next pack gives it another prev_hash). */
hm_ring_status hm_ring_unpin(hm_ring *ring, int index);

/* The host acknowledged the pack holding this pinned record: free its slot and
 * bytes. HM_RING_BAD_STATE if not pinned (a record the host does not hold is never
 * freed). */
hm_ring_status hm_ring_release(hm_ring *ring, int index);

/* hm_ring_unpin / hm_ring_release of every record pinned to `pack`; returns how many. */
unsigned hm_ring_unpin_pack(hm_ring *ring, uint32_t pack);
unsigned hm_ring_release_pack(hm_ring *ring, uint32_t pack);

/* The slot of the record with the smallest seq above after_seq that `select` admits
 * (HM_RING_SEL_*: states, and optionally pinned or unpinned only), or -1. Capture
 * order: start with after_seq = 0, continue with the seq of the record returned. */
int hm_ring_next(const hm_ring *ring, uint32_t after_seq, unsigned select);

/* Resume (hm_agent.h): 0 if `ring`, memory kept across a warm reset, is a ring of
 * device_id with `capacity` slots and an arena of `arena_size` bytes (the values
 * hm_ring_init_sized was given) that holds I1, I2, I5, I6, I7 and the counters of I8
 * (captures = seq + refusals; used, volatiles, pinned, arena_used); -1 otherwise, with
 * the ring untouched. Bounded: one pass over the slots (plus O(capacity^2) compares for
 * distinct seqs), the free list and the volatile list each walked at most capacity
 * steps, so any content of the memory ends. Of I7 it checks the structure (state and
 * layer agree; a volatile record is neither pinned nor chained), not the content:
 * scores are not recomputed (record bytes and gate results are data). Not
 * checked: recency order (any order of the volatile list is a valid one), hash and
 * prev_hash (rewritten before a record is offered again), boot and seq beyond I1. */
int hm_ring_validate(const hm_ring *ring, const uint8_t device_id[HM_ID_SIZE],
                     unsigned capacity, unsigned arena_size);

#endif
