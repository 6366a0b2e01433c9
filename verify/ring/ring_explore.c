/* ring_explore — bounded exhaustive exploration of hm_ring (hm_ring.h I1..I8).
 *
 *   ring_explore DEPTH      every sequence of up to DEPTH operations from an empty ring
 *
 * The ring is small (HM_RING_CAPACITY slots, HM_ARENA_SIZE bytes: the Makefile builds
 * this with 3 slots and 320 bytes, i.e. 32 blocks of 10 bytes), and the operations are
 * the whole API with a few argument values each: capture of 0, 95, 160 and 320 bytes
 * (no eviction, eviction of one or several LRU records, refusal for lack of room) and
 * of 257 (refused invalid); per slot get (an access), set_state to CANDIDATE and to
 * QUARANTINED, gate, set_chain, pin to pack 1 and to pack 2, unpin, release; per pack
 * unpin_pack and release_pack; and reset (hm_ring_init_sized). Every operation applies
 * in every state (one that is not allowed answers an error and must change nothing),
 * so the sequences of length n are exactly OPS^n.
 *
 * After every step: the invariant checker of the native tests (tests/native/ring_check.c),
 * hm_ring_validate (the resume check), and a model kept here independently of the ring:
 * the recency order of the volatile records (I2), and for each capture the outcome the
 * contract demands (I3, I4, I6): which LRU records are evicted (the fewest, oldest
 * first), the first-fit block, or a refusal that leaves the ring unchanged; every
 * live record still holds the bytes it was captured with (I6: bytes never move); a
 * gating is counted once as a candidate or a quarantine (I8); an operation the ring
 * refuses changes nothing (a refused capture only its two counters).
 *
 * Search: depth-first; a state (the whole ring struct plus the model) already explored
 * with at least as many steps left is not explored again (the ring is deterministic,
 * so every sequence through it is covered). States are told apart by a 64-bit hash.
 * On a violation: the sequence that led to it on stderr, exit status 1.
 * Output: "depth D ops K sequences S states N steps T ...": S = the sequences covered
 * (sum of K^i, i = 1..D), N = distinct states reached, T = operations executed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hm_ring.h"
#include "ring_check.h"

#define CAP HM_RING_CAPACITY
#define ARENA HM_ARENA_SIZE
#define MAX_DEPTH 24

static const uint8_t device_id[HM_ID_SIZE] = {1, 2, 3, 4, 5, 6, 7, 8};
static const unsigned sizes[] = {0, 95, 160, 320, 257};
#define NSIZES (sizeof sizes / sizeof sizes[0])
enum { OP_GET, OP_CAND, OP_QUAR, OP_GATE, OP_CHAIN, OP_PIN1, OP_PIN2, OP_UNPIN, OP_RELEASE,
       NSLOTOPS };
static const char *const slot_op_names[NSLOTOPS] = {"get", "candidate", "quarantine", "gate",
                                                    "chain", "pin1", "pin2", "unpin",
                                                    "release"};
#define NOPS (NSIZES + CAP * NSLOTOPS + 4 + 1)

/* What the exploration holds per state: the ring and the model's recency order. */
typedef struct {
    hm_ring ring;
    uint32_t recency[CAP]; /* seqs of the volatile records, most recent first */
    unsigned nrec;
} state;

static uint8_t payload[HM_MAX_PAYLOAD + 1], source[HM_MAX_SOURCE];
static const uint8_t context[HM_HASH_SIZE] = {9};
static int trail[MAX_DEPTH];
static unsigned long long steps, sequences;

static void op_name(int op, char *out, size_t n) {
    if (op < (int)NSIZES) snprintf(out, n, "capture(%u)", sizes[op]);
    else if ((op -= (int)NSIZES) < CAP * NSLOTOPS)
        snprintf(out, n, "%s(%d)", slot_op_names[op % NSLOTOPS], op / NSLOTOPS);
    else if ((op -= CAP * NSLOTOPS) < 4)
        snprintf(out, n, "%s(pack %d)", op < 2 ? "unpin_pack" : "release_pack", op % 2 + 1);
    else snprintf(out, n, "reset");
}

static void fail(int depth, const char *what) {
    char name[40];
    fprintf(stderr, "ring_explore: %s\nsequence:", what);
    for (int i = 0; i <= depth; i++) {
        op_name(trail[i], name, sizeof name);
        fprintf(stderr, " %s", name);
    }
    fprintf(stderr, "\n");
    exit(1);
}

/* ---- the model's view of a capture (independent of hm_ring.c) ---- */

static uint32_t mask_of(const hm_ring_record *r) {
    uint32_t m = 0;
    for (unsigned b = r->block; b < (unsigned)r->block + r->nblocks; b++) m |= 1u << b;
    return m;
}

/* Lowest b with blocks b..b+k-1 all free in `used`, or -1 (k = 0: block 0). */
static int first_fit(uint32_t used, unsigned k) {
    if (k == 0) return 0;
    for (unsigned b = 0; b + k <= HM_RING_BLOCKS; b++) {
        unsigned j = 0;
        while (j < k && !(used >> (b + j) & 1u)) j++;
        if (j == k) return (int)b;
    }
    return -1;
}

static int slot_of(const hm_ring *rg, uint32_t seq) {
    for (int k = 0; k < (int)rg->capacity; k++)
        if (rg->rec[k].seq == seq) return k;
    return -1;
}

/* Evictions a capture of n bytes needs by the contract (the fewest LRU records), or -1
 * for a refusal; *block gets the first fit after them. */
static int expected_evictions(const state *s, unsigned n, int *block) {
    const hm_ring *rg = &s->ring;
    unsigned k = (n + rg->block_size - 1u) / rg->block_size, free_slots = rg->capacity;
    uint32_t used = 0;
    for (unsigned i = 0; i < rg->capacity; i++)
        if (rg->rec[i].seq) {
            free_slots--;
            used |= mask_of(&rg->rec[i]);
        }
    for (unsigned j = 0; j <= s->nrec; j++) {
        if (j > 0) used &= ~mask_of(&rg->rec[slot_of(rg, s->recency[s->nrec - j])]);
        if (free_slots + j > 0 && (*block = first_fit(used, k)) >= 0) return (int)j;
    }
    return -1;
}

static void touch(state *s, uint32_t seq) { /* seq becomes the most recent */
    unsigned i = 0;
    while (i < s->nrec && s->recency[i] != seq) i++;
    if (i == s->nrec) s->nrec++;
    memmove(&s->recency[1], &s->recency[0], i * sizeof s->recency[0]);
    s->recency[0] = seq;
}

static void forget(state *s, uint32_t seq) {
    for (unsigned i = 0; i < s->nrec; i++)
        if (s->recency[i] == seq) {
            memmove(&s->recency[i], &s->recency[i + 1], (s->nrec - i - 1) * sizeof s->recency[0]);
            s->recency[--s->nrec] = 0; /* unused entries stay 0: the hash sees them */
            return;
        }
}

/* ---- one step ---- */

static void step(state *s, int op, int depth) {
    hm_ring *rg = &s->ring;
    hm_ring_status st;
    steps++;
    if (op < (int)NSIZES) {
        unsigned n = sizes[op], pl = n > HM_MAX_PAYLOAD ? n - HM_MAX_SOURCE : n;
        unsigned sl = n - pl;
        int block = -1, idx = -1;
        int want = n > HM_MAX_PAYLOAD + HM_MAX_SOURCE ? -2 : expected_evictions(s, n, &block);
        uint32_t evictions = rg->counters.evictions;
        state before;
        memcpy(&before, s, sizeof before); /* memcpy: padding too, for memcmp and the hash */
        if (n == 257) { pl = 257; sl = 0; want = -2; } /* a payload above 256: invalid */
        st = hm_ring_capture(rg, payload, pl, source, sl, 7, context, &idx);
        if (want == -2 || want == -1) {
            if (st != (want == -2 ? HM_RING_REFUSED_INVALID : HM_RING_REFUSED_FULL))
                fail(depth, "capture: not the refusal the contract demands (I4)");
            before.ring.counters.captures++;
            before.ring.counters.refusals++;
            if (memcmp(&before.ring, rg, sizeof *rg) != 0)
                fail(depth, "refused capture changed the ring (I4)");
            return;
        }
        if (st != HM_RING_OK) fail(depth, "capture refused though evicting LRU records makes room (I4)");
        if (rg->counters.evictions - evictions != (uint32_t)want)
            fail(depth, "capture evicted another number of records than the fewest (I3)");
        for (int j = 0; j < want; j++) { /* the `want` least recent ones, and no other */
            uint32_t victim = s->recency[s->nrec - 1];
            if (slot_of(rg, victim) >= 0) fail(depth, "an LRU record survived its eviction (I3)");
            forget(s, victim);
        }
        for (unsigned k = 0; k < before.ring.capacity; k++) {
            uint32_t q = before.ring.rec[k].seq;
            if (q && slot_of(rg, q) < 0 && before.ring.rec[k].state == HM_STATE_VOLATILE) {
                int in = 0;
                for (unsigned i = 0; i < s->nrec; i++) in |= s->recency[i] == q;
                if (in) fail(depth, "a record other than the LRU ones was evicted (I3)");
            } else if (q && slot_of(rg, q) < 0) {
                fail(depth, "a gated record left the ring by a capture (I3)");
            }
        }
        if (rg->rec[idx].block != (uint8_t)block || rg->rec[idx].seq != rg->seq)
            fail(depth, "capture did not take the first fit (I6) or the next seq (I1)");
        if (memcmp(hm_ring_payload(rg, &rg->rec[idx]), payload, pl) != 0 ||
            memcmp(hm_ring_source(rg, &rg->rec[idx]), source, sl) != 0)
            fail(depth, "captured bytes differ");
        touch(s, rg->seq);
        return;
    }
    op -= (int)NSIZES;
    if (op < CAP * NSLOTOPS) {
        int k = op / NSLOTOPS;
        const hm_ring_record *r = hm_ring_peek(rg, k);
        uint32_t seq = r ? r->seq : 0;
        int vol = r && r->state == HM_STATE_VOLATILE;
        hm_ring before;
        memcpy(&before, rg, sizeof before);
        static const uint8_t hash[HM_HASH_SIZE] = {5}, prev[HM_HASH_SIZE] = {6};
        uint32_t cands = rg->counters.candidates, quars = rg->counters.quarantines;
        switch (op % NSLOTOPS) {
        case OP_GET:
            if ((hm_ring_get(rg, k) != NULL) != (r != NULL)) fail(depth, "get");
            if (vol) touch(s, seq);
            return;
        case OP_CAND: st = hm_ring_set_state(rg, k, HM_STATE_CANDIDATE); break;
        case OP_QUAR: st = hm_ring_set_state(rg, k, HM_STATE_QUARANTINED); break;
        case OP_GATE: st = hm_ring_gate(rg, k, 0, 0xC000, 0x8000, 0x4000, NULL); break;
        case OP_CHAIN: st = hm_ring_set_chain(rg, k, hash, prev); break;
        case OP_PIN1: st = hm_ring_pin(rg, k, 1); break;
        case OP_PIN2: st = hm_ring_pin(rg, k, 2); break;
        case OP_UNPIN: st = hm_ring_unpin(rg, k); break;
        default: st = hm_ring_release(rg, k); break;
        }
        if (st == HM_RING_OK && vol) { /* gated: off the recency order, counted (I8) */
            forget(s, seq);
            if (rg->counters.candidates - cands + rg->counters.quarantines - quars != 1 ||
                (rg->rec[k].state == HM_STATE_CANDIDATE) != (rg->counters.candidates != cands))
                fail(depth, "gating not counted as a candidate or quarantine (I8)");
        } else if (rg->counters.candidates != cands || rg->counters.quarantines != quars) {
            fail(depth, "candidates or quarantines counted without a gating (I8)");
        }
        if (st == HM_RING_OK && op % NSLOTOPS == OP_UNPIN && rg->rec[k].chained)
            fail(depth, "unpinned record still chained (I7)");
        if (st != HM_RING_OK && memcmp(&before, rg, sizeof *rg) != 0)
            fail(depth, "a refused operation changed the ring");
        if (st == HM_RING_OK && op % NSLOTOPS == OP_RELEASE && slot_of(rg, seq) >= 0)
            fail(depth, "released record still live");
        if (st == HM_RING_OK && op % NSLOTOPS == OP_RELEASE && (!r || vol))
            fail(depth, "release of an unpinned record (I3)");
        return;
    }
    op -= CAP * NSLOTOPS;
    if (op < 2) (void)hm_ring_unpin_pack(rg, (uint32_t)op + 1u);
    else if (op < 4) (void)hm_ring_release_pack(rg, (uint32_t)op - 1u);
    else {
        if (hm_ring_init_sized(rg, device_id, 1, CAP, ARENA) != HM_RING_OK) fail(depth, "init");
        memset(s->recency, 0, sizeof s->recency);
        s->nrec = 0;
    }
}

/* The model's recency order is the ring's volatile list (I2). */
static void check_model(const state *s, int depth) {
    const hm_ring *rg = &s->ring;
    unsigned i = 0, slot = 0;
    const char *what = ring_violation(rg, &slot);
    if (what) fail(depth, what);
    if (hm_ring_validate(rg, device_id, CAP, ARENA) != 0) fail(depth, "hm_ring_validate refused");
    for (unsigned k = rg->mru; k != HM_RING_NIL; k = rg->rec[k].next, i++)
        if (i >= s->nrec || rg->rec[k].seq != s->recency[i])
            fail(depth, "volatile list is not in order of last access (I2)");
    if (i != s->nrec) fail(depth, "volatile list is not in order of last access (I2)");
    for (unsigned k = 0; k < rg->capacity; k++) { /* bytes never move (I6) */
        const hm_ring_record *r = &rg->rec[k];
        if (r->seq && (memcmp(hm_ring_payload(rg, r), payload, r->payload_len) != 0 ||
                       memcmp(hm_ring_source(rg, r), source, r->source_len) != 0))
            fail(depth, "a live record's bytes changed (I6)");
    }
}

/* ---- visited states: open addressing over 64-bit hashes ---- */

static uint64_t *seen_hash;
static uint8_t *seen_left; /* steps left when first explored, plus 1 (0: empty) */
static size_t seen_cap, seen_n;

static uint64_t hash_state(const state *s) {
    const uint8_t *p = (const uint8_t *)s;
    uint64_t h = 1469598103934665603u;
    for (size_t i = 0; i < sizeof *s; i++) h = (h ^ p[i]) * 1099511628211u;
    return h ? h : 1;
}

static void seen_grow(void);

/* 1 if the state was explored with at least `left` steps to go; else records it. */
static int seen_before(const state *s, unsigned left) {
    uint64_t h = hash_state(s);
    if (2 * (seen_n + 1) > seen_cap) seen_grow();
    size_t i = h & (seen_cap - 1);
    while (seen_left[i] && seen_hash[i] != h) i = (i + 1) & (seen_cap - 1);
    if (seen_left[i] > left) return 1;
    if (!seen_left[i]) seen_n++;
    seen_hash[i] = h;
    seen_left[i] = (uint8_t)(left + 1);
    return 0;
}

static void seen_grow(void) {
    uint64_t *oh = seen_hash;
    uint8_t *ol = seen_left;
    size_t oc = seen_cap;
    seen_cap = oc ? 2 * oc : 1u << 16;
    seen_hash = calloc(seen_cap, sizeof *seen_hash);
    seen_left = calloc(seen_cap, 1);
    if (!seen_hash || !seen_left) {
        fprintf(stderr, "ring_explore: out of memory at %zu states\n", seen_n);
        exit(2);
    }
    for (size_t j = 0; j < oc; j++)
        if (ol[j]) {
            size_t i = oh[j] & (seen_cap - 1);
            while (seen_left[i]) i = (i + 1) & (seen_cap - 1);
            seen_hash[i] = oh[j];
            seen_left[i] = ol[j];
        }
    free(oh);
    free(ol);
}

static void explore(const state *s, int depth, int max_depth) {
    if (seen_before(s, (unsigned)(max_depth - depth)) || depth == max_depth) return;
    for (int op = 0; op < (int)NOPS; op++) {
        state next;
        memcpy(&next, s, sizeof next);
        trail[depth] = op;
        step(&next, op, depth);
        check_model(&next, depth);
        explore(&next, depth + 1, max_depth);
    }
}

int main(int argc, char **argv) {
    int depth = argc > 1 ? atoi(argv[1]) : 4;
    static state start;
    if (depth < 1 || depth > MAX_DEPTH) {
        fprintf(stderr, "usage: ring_explore DEPTH (1..%d)\n", MAX_DEPTH);
        return 2;
    }
    for (size_t i = 0; i < sizeof payload; i++) payload[i] = (uint8_t)(i * 7 + 1);
    for (size_t i = 0; i < sizeof source; i++) source[i] = (uint8_t)(i * 5 + 3);
    memset(&start, 0, sizeof start);
    if (hm_ring_init_sized(&start.ring, device_id, 1, CAP, ARENA) != HM_RING_OK) return 2;
    check_model(&start, 0);
    explore(&start, 0, depth);
    sequences = 0;
    {
        unsigned long long len = 1;
        for (int d = 1; d <= depth; d++) sequences += (len *= NOPS);
    }
    printf("depth %d ops %u sequences %llu states %zu steps %llu capacity %u arena %u\n", depth,
           (unsigned)NOPS, sequences, seen_n, steps, (unsigned)CAP, (unsigned)ARENA);
    return 0;
}
