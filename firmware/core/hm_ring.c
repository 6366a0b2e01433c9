/* hm_ring — working memory. See hm_ring.h for the contract and its invariants. */
#include "hm_ring.h"

#include <string.h>

#define NIL ((uint8_t)HM_RING_NIL)

/* ACSL contracts (tools/verify_c.py ring-wp): every function requires and ensures
 * ring_ok, the part of the invariants of hm_ring.h that is a property of each slot or
 * pair of slots, states its postconditions, and is checked for runtime errors
 * (-wp-rte). WP with Z3 through Why3 proves every goal except those listed, with the
 * reason, in verify/ring/wp_unproved.txt. What ring_ok leaves out (list order and
 * membership, the block maps as unions, the counts) and every listed goal are checked
 * by verify/ring/ring_explore.c; protocol/SPEC.md §13 says which is which.
 *
 * ring_ok's facts are macros (Frama-C preprocesses annotations; the compiler never sees
 * them): HM_ACSL_RING_FACTS(kw, pre, rg, but) states each as a clause of its own (kw:
 * requires, ensures or loop invariant; pre: an optional premise such as
 * `\result == HM_RING_OK ==>`), the predicate ring_ok_but(r, but) is their conjunction,
 * and `but` exempts one slot from I7's zero scores (a record being gated). One goal per
 * fact, each quantifier written out: Z3 proves a fact about every slot after a store into
 * one of them when the quantifier is the goal's own (it skolemises it and instantiates the
 * precondition's at that slot); hidden in a predicate it must unfold, it does not, and
 * the conjunction of all facts in one query is beyond it. In order: the ring's scalars,
 * list heads and I8's captures = stored + refusals (32-bit counters); every prev and
 * every next link a slot or NIL; each slot's geometry (I6, nblocks_of below); each live
 * record's seq, state, pin and layer (I1, I5, I7); live seqs distinct (I1); zero scores
 * while VOLATILE (I7). */
#ifdef __FRAMAC__
#define HM_ACSL_RING_SHAPE(rg)                                                             \
    (1 <= (rg)->capacity <= HM_RING_CAPACITY && 10 <= (rg)->block_size &&                  \
     (rg)->block_size * HM_RING_BLOCKS <= HM_ARENA_SIZE &&                                 \
     link_ok(rg, (rg)->free_head) && link_ok(rg, (rg)->mru) && link_ok(rg, (rg)->lru) &&   \
     (rg)->counters.captures == ((rg)->seq + (rg)->counters.refusals) % 4294967296)
#define HM_ACSL_RING_PREVS(rg)                                                             \
    (\forall integer k; 0 <= k < (rg)->capacity ==>                                        \
       (rg)->rec[k].prev == HM_RING_NIL || (rg)->rec[k].prev < (rg)->capacity)
#define HM_ACSL_RING_NEXTS(rg)                                                             \
    (\forall integer k; 0 <= k < (rg)->capacity ==>                                        \
       (rg)->rec[k].next == HM_RING_NIL || (rg)->rec[k].next < (rg)->capacity)
#define HM_ACSL_RING_GEOMETRY(rg)                                                          \
    (\forall integer k; 0 <= k < (rg)->capacity ==>                                        \
       (rg)->rec[k].payload_len <= HM_MAX_PAYLOAD && (rg)->rec[k].source_len <= HM_MAX_SOURCE && \
       (rg)->rec[k].nblocks ==                                                             \
         nblocks_of((rg)->rec[k].payload_len + (rg)->rec[k].source_len, (rg)->block_size) && \
       (rg)->rec[k].block + (rg)->rec[k].nblocks <= HM_RING_BLOCKS &&                      \
       ((rg)->rec[k].nblocks == 0 ==> (rg)->rec[k].block == 0))
#define HM_ACSL_RING_LIVE_SLOT(rg, k)                                                      \
    (1 <= (rg)->rec[k].seq <= (rg)->seq &&                                                 \
     ((rg)->rec[k].state == HM_STATE_VOLATILE || (rg)->rec[k].state == HM_STATE_CANDIDATE || \
      (rg)->rec[k].state == HM_STATE_QUARANTINED) &&                                       \
     ((rg)->rec[k].state == HM_STATE_VOLATILE ==> (rg)->rec[k].layer == HM_LAYER_WORKING && \
        (rg)->rec[k].pack == 0 && (rg)->rec[k].chained == 0) &&                            \
     ((rg)->rec[k].state != HM_STATE_VOLATILE ==> (rg)->rec[k].layer == HM_LAYER_EPISODIC))
#define HM_ACSL_RING_LIVES(rg)                                                             \
    (\forall integer k; 0 <= k < (rg)->capacity && (rg)->rec[k].seq != 0 ==>               \
       HM_ACSL_RING_LIVE_SLOT(rg, k))
/* The same for every live slot but one (`but`): the facts a store into that slot's
 * record leaves standing for the others (asserted at hm_ring_set_state's stores). */
#define HM_ACSL_RING_LIVES_BUT(rg, but)                                                    \
    (\forall integer k; 0 <= k < (rg)->capacity && k != (but) && (rg)->rec[k].seq != 0 ==> \
       HM_ACSL_RING_LIVE_SLOT(rg, k))
#define HM_ACSL_RING_SEQS(rg)                                                              \
    (\forall integer j, k; 0 <= j < (rg)->capacity && 0 <= k < (rg)->capacity &&           \
       j != k && (rg)->rec[j].seq != 0 ==> (rg)->rec[j].seq != (rg)->rec[k].seq)
#define HM_ACSL_RING_SCORES(rg, but)                                                       \
    (\forall integer k; 0 <= k < (rg)->capacity && k != (but) &&                           \
       (rg)->rec[k].seq != 0 && (rg)->rec[k].state == HM_STATE_VOLATILE ==>                \
       (rg)->rec[k].confidence == 0 && (rg)->rec[k].provenance == 0 &&                     \
       (rg)->rec[k].priority == 0 && (rg)->rec[k].gate.h == 0 && (rg)->rec[k].gate.i == 0 && \
       (rg)->rec[k].gate.r == 0 && (rg)->rec[k].gate.f == 0 && (rg)->rec[k].gate.c == 0 && \
       (rg)->rec[k].gate.rn == 0 && (rg)->rec[k].gate.w == 0 && (rg)->rec[k].gate.flags == 0 && \
       (rg)->rec[k].gate.verdict == 0 && (rg)->rec[k].gate.hard == 0 &&                    \
       (rg)->rec[k].gate.state == 0)
#define HM_ACSL_RING_OK_BUT(rg, but)                                                       \
    (HM_ACSL_RING_SHAPE(rg) && HM_ACSL_RING_PREVS(rg) && HM_ACSL_RING_NEXTS(rg) && HM_ACSL_RING_GEOMETRY(rg) && \
     HM_ACSL_RING_LIVES(rg) && HM_ACSL_RING_SEQS(rg) && HM_ACSL_RING_SCORES(rg, but))
#define HM_ACSL_RING_FACTS(kw, pre, rg, but)                                               \
    kw pre HM_ACSL_RING_SHAPE(rg);                                                         \
    kw pre HM_ACSL_RING_PREVS(rg);                                                         \
    kw pre HM_ACSL_RING_NEXTS(rg);                                                         \
    kw pre HM_ACSL_RING_GEOMETRY(rg);                                                      \
    kw pre HM_ACSL_RING_LIVES(rg);                                                         \
    kw pre HM_ACSL_RING_SEQS(rg);                                                          \
    kw pre HM_ACSL_RING_SCORES(rg, but)
#endif
/*@ // I6's blocks for `bytes`: ceil(bytes / bs). Axiomatic, not a definition, so that Z3
    // meets the division only where a goal needs it (not in every frame of ring_ok)
    axiomatic Blocks {
      logic integer nblocks_of(integer bytes, integer bs);
      axiom nblocks_of_def: \forall integer bytes, bs; bs > 0 ==>
        nblocks_of(bytes, bs) == (bytes + bs - 1) / bs;
    }
    predicate link_ok(hm_ring *r, integer l) = l == HM_RING_NIL || 0 <= l < r->capacity;
    // I7: a VOLATILE record has no scores yet
    predicate unscored(hm_ring_record *x) =
      x->confidence == 0 && x->provenance == 0 && x->priority == 0 &&
      x->gate.h == 0 && x->gate.i == 0 && x->gate.r == 0 && x->gate.f == 0 &&
      x->gate.c == 0 && x->gate.rn == 0 && x->gate.w == 0 && x->gate.flags == 0 &&
      x->gate.verdict == 0 && x->gate.hard == 0 && x->gate.state == 0;
    predicate ring_ok_but(hm_ring *r, integer but) = HM_ACSL_RING_OK_BUT(r, but);
    predicate ring_ok(hm_ring *r) = ring_ok_but(r, -1);
    // A slot `i` holds a live record
    predicate live_at(hm_ring *r, integer i) = 0 <= i < r->capacity && r->rec[i].seq != 0;
*/

/* Index of the lowest set bit of x != 0. */
/*@ requires x != 0;
    assigns \nothing;
    ensures range: 0 <= \result < 32;
    ensures lowest: x % (1 << (\result + 1)) == (1 << \result); */
static unsigned ctz32(uint32_t x) {
#if defined(__GNUC__) && defined(__ARM_FEATURE_CLZ) && defined(__ARM_ARCH) && __ARM_ARCH >= 7
    return (unsigned)__builtin_ctz(x); /* RBIT + CLZ on ARMv7-M */
#else
    static const uint8_t debruijn[32] = {0,  1,  28, 2,  29, 14, 24, 3,  30, 22, 20,
                                         15, 25, 17, 4,  8,  31, 27, 13, 23, 21, 19,
                                         16, 7,  26, 12, 18, 6,  11, 5,  10, 9};
    return debruijn[((x & (0u - x)) * 0x077CB531u) >> 27];
#endif
}

/* n bits from `block` (none for n = 0). */
/*@ requires n <= HM_RING_BLOCKS && (n == 0 || block + n <= HM_RING_BLOCKS);
    assigns \nothing; */
static uint32_t blocks_mask(unsigned block, unsigned n) {
    if (n == 0) return 0;
    return (0xFFFFFFFFu >> (HM_RING_BLOCKS - n)) << block;
}

/* The blocks of a record. */
/*@ requires \valid_read(rec) && rec->block + rec->nblocks <= HM_RING_BLOCKS;
    assigns \nothing; */
static uint32_t rec_mask(const hm_ring_record *rec) {
    return blocks_mask(rec->block, rec->nblocks);
}

/* Lowest start of k >= 1 consecutive set bits of `map`, or -1. After j steps bit i
 * is set iff bits i..i+j are; the zeros shifted in keep a run inside the 32 bits. */
/*@ requires run_length: 1 <= k <= HM_RING_BLOCKS;
    assigns \nothing;
    ensures \result == -1 || (0 <= \result && \result + k <= HM_RING_BLOCKS); */
static int find_run(uint32_t map, unsigned k) {
    /*@ loop invariant 1 <= k <= \at(k, Pre);
        loop invariant map < (1 << (HM_RING_BLOCKS - (\at(k, Pre) - k)));
        loop assigns k, map;
        loop variant k; */
    while (--k) map &= map >> 1;
    return map ? (int)ctz32(map) : -1;
}

/*@ requires \valid_read(ring) && 1 <= ring->capacity <= HM_RING_CAPACITY;
    assigns \nothing;
    ensures live_at(ring, index) ? \result == &ring->rec[index] : \result == \null; */
static hm_ring_record *live(hm_ring *ring, int index) {
    if (index < 0 || index >= (int)ring->capacity || ring->rec[index].seq == 0) return NULL;
    return &ring->rec[index];
}

/* Volatile list (I2): head ring->mru, tail ring->lru. */
/*@ requires \valid(ring) && i < ring->capacity;
    HM_ACSL_RING_FACTS(requires, , ring, i);
    assigns ring->mru, ring->lru, ring->rec[0 .. HM_RING_CAPACITY - 1].prev,
            ring->rec[0 .. HM_RING_CAPACITY - 1].next;
    HM_ACSL_RING_FACTS(ensures, , ring, i);
    // only links change: a VOLATILE record unscored before is unscored after
    ensures \old(ring->rec[i].seq != 0 && ring->rec[i].state == HM_STATE_VOLATILE ==>
                 unscored(&ring->rec[i])) ==>
            (ring->rec[i].seq != 0 && ring->rec[i].state == HM_STATE_VOLATILE ==>
             unscored(&ring->rec[i])); */
static void lru_unlink(hm_ring *ring, uint8_t i) {
    hm_ring_record *rec = &ring->rec[i];
    if (rec->prev != NIL) ring->rec[rec->prev].next = rec->next;
    else ring->mru = rec->next;
    if (rec->next != NIL) ring->rec[rec->next].prev = rec->prev;
    else ring->lru = rec->prev;
    rec->prev = rec->next = NIL;
}

/*@ requires \valid(ring) && i < ring->capacity;
    HM_ACSL_RING_FACTS(requires, , ring, -1);
    assigns ring->mru, ring->lru, ring->rec[0 .. HM_RING_CAPACITY - 1].prev,
            ring->rec[i].next;
    HM_ACSL_RING_FACTS(ensures, , ring, -1);
    ensures ring->mru == i; */
static void lru_push_front(hm_ring *ring, uint8_t i) {
    hm_ring_record *rec = &ring->rec[i];
    rec->prev = NIL;
    rec->next = ring->mru;
    if (ring->mru != NIL) ring->rec[ring->mru].prev = i;
    else ring->lru = i;
    ring->mru = i;
}

/* Give back a live record's blocks (`mask`, its rec_mask). */
/*@ requires \valid(ring) && \valid_read(rec);
    assigns ring->used_blocks, ring->counters.arena_used; */
static void blocks_free(hm_ring *ring, const hm_ring_record *rec, uint32_t mask) {
    ring->used_blocks &= ~mask;
    ring->counters.arena_used -= (uint32_t)rec->nblocks * ring->block_size;
}

/* Push a live slot that is in no list and holds no blocks on the free list. */
/*@ requires \valid(ring) && i < ring->capacity;
    HM_ACSL_RING_FACTS(requires, , ring, -1);
    assigns ring->counters.used, ring->rec[i].seq, ring->rec[i].next, ring->free_head;
    HM_ACSL_RING_FACTS(ensures, , ring, -1);
    ensures ring->rec[i].seq == 0 && ring->free_head == i; */
static void slot_push_free(hm_ring *ring, uint8_t i) {
    hm_ring_record *rec = &ring->rec[i];
    ring->counters.used--;
    rec->seq = 0; /* the other fields of a free slot mean nothing until capture */
    rec->next = ring->free_head;
    ring->free_head = i;
}

/* Take the first free slot (there is one) for a new VOLATILE record, counted. */
/*@ requires \valid(ring) && ring->free_head != HM_RING_NIL;
    HM_ACSL_RING_FACTS(requires, , ring, -1);
    assigns ring->free_head, ring->counters.used, ring->counters.volatiles;
    HM_ACSL_RING_FACTS(ensures, , ring, -1);
    ensures \result == \old(ring->free_head) && \result < ring->capacity; */
static uint8_t slot_take(hm_ring *ring) {
    uint8_t i = ring->free_head;
    ring->free_head = ring->rec[i].next;
    ring->counters.used++;
    ring->counters.volatiles++;
    return i;
}

/* The least recently accessed VOLATILE record, the list's tail, leaves (I3): off the
 * list, its blocks given back (`mask`: its rec_mask), counted as an eviction. Its slot
 * still counts as a used VOLATILE one: the caller frees it or reuses it. */
/*@ requires \valid(ring) && ring->lru != HM_RING_NIL;
    HM_ACSL_RING_FACTS(requires, , ring, -1);
    assigns ring->lru, ring->mru, ring->rec[0 .. HM_RING_CAPACITY - 1].next,
            ring->vol_blocks, ring->used_blocks, ring->counters.arena_used,
            ring->counters.evictions;
    HM_ACSL_RING_FACTS(ensures, , ring, -1);
    ensures \result == \old(ring->lru) && \result < ring->capacity; */
static uint8_t evict_lru(hm_ring *ring, uint32_t mask) {
    uint8_t i = ring->lru;
    hm_ring_record *rec = &ring->rec[i];
    ring->lru = rec->prev;
    if (rec->prev != NIL) ring->rec[rec->prev].next = NIL;
    else ring->mru = NIL;
    ring->vol_blocks &= ~mask;
    blocks_free(ring, rec, mask);
    ring->counters.evictions++;
    return i;
}

/* Called when the ring has no free slot or no run of k free blocks: evict VOLATILE
 * records, least recently accessed first, until a slot is free and k blocks in a row
 * are; returns the run's first block and sets *slot to a slot taken for the new
 * record (slot_take's counting), or returns -1 with nothing evicted (I4).
 * The common case first, a full ring of similar records: evicting the LRU record alone
 * makes room. The run is then the first fit over the blocks free after it (one run
 * search, no check of the whole volatile set), and the LRU's slot is the one the new
 * record takes (the free list is LIFO), so it is reused in place. Otherwise it decides
 * first whether evicting every VOLATILE record would be enough, then evicts one at a
 * time. */
/*@ requires \valid(ring) && k <= HM_RING_BLOCKS && \valid(slot) &&
             \separated(slot, ring);
    HM_ACSL_RING_FACTS(requires, , ring, -1);
    assigns *ring, *slot;
    HM_ACSL_RING_FACTS(ensures, , ring, -1);
    ensures ring->seq == \old(ring->seq) && ring->counters.captures ==
            \old(ring->counters.captures) && ring->counters.refusals ==
            \old(ring->counters.refusals);
    ensures \result < 0 ==> \result == -1;
    ensures fits: \result >= 0 ==> \result + k <= HM_RING_BLOCKS;
    ensures empty: k == 0 ==> \result == 0;
    ensures slot: \result >= 0 ==> *slot < ring->capacity; */
static int make_room(hm_ring *ring, unsigned k, uint8_t *slot) {
    uint32_t mask;
    int block = 0;
    if (ring->lru == NIL) return -1; /* nothing evictable */
    mask = rec_mask(&ring->rec[ring->lru]);
#ifdef HM_PLANT_RING /* planted bug for tools/verify_c.py: the run search after the LRU's
                      * eviction asks for one block too few (WP must refuse the capture) */
    if (k) block = find_run(~ring->used_blocks | mask, k - 1u);
#else
    if (k) block = find_run(~ring->used_blocks | mask, k);
#endif
    if (block >= 0) {
        *slot = evict_lru(ring, mask); /* still a used VOLATILE slot: now the new one's */
        return block;
    }
    if (find_run(~ring->used_blocks | ring->vol_blocks, k) < 0) return -1;
    /*@ loop invariant 1 <= k;
 HM_ACSL_RING_FACTS(loop invariant, , ring, -1);
        loop invariant ring->seq == \at(ring->seq, Pre) &&
          ring->counters.captures == \at(ring->counters.captures, Pre) &&
          ring->counters.refusals == \at(ring->counters.refusals, Pre);
        loop assigns *ring, block;
        loop variant ring->counters.volatiles; */
    do { /* first fit after each eviction: a lower run may have formed (I6) */
        uint8_t i = evict_lru(ring, rec_mask(&ring->rec[ring->lru]));
        ring->counters.volatiles--;
        slot_push_free(ring, i);
        block = find_run(~ring->used_blocks, k);
    } while (block < 0); /* a slot is free after the first eviction */
    *slot = slot_take(ring);
    return block;
}

/* The 32-byte context: eight word moves when both ends are word-aligned (a -Os
 * libc memcpy may be a byte loop). */
#if defined(__GNUC__)
typedef uint32_t __attribute__((may_alias)) hm_word;
#endif
/*@ requires \valid(dst + (0 .. HM_HASH_SIZE - 1)) &&
             \valid_read(src + (0 .. HM_HASH_SIZE - 1)) &&
             \separated(dst + (0 .. HM_HASH_SIZE - 1), src + (0 .. HM_HASH_SIZE - 1));
    assigns dst[0 .. HM_HASH_SIZE - 1]; */
static void copy_context(uint8_t *dst, const uint8_t *src) {
#if defined(__GNUC__)
    if ((((uintptr_t)dst | (uintptr_t)src) & 3u) == 0) {
        hm_word *d = (hm_word *)(void *)dst;
        const hm_word *s = (const hm_word *)(const void *)src;
        d[0] = s[0], d[1] = s[1], d[2] = s[2], d[3] = s[3];
        d[4] = s[4], d[5] = s[5], d[6] = s[6], d[7] = s[7];
        return;
    }
#endif
    memcpy(dst, src, HM_HASH_SIZE);
}

/* 1 if capacity or arena_size is outside what hm_ring_init_sized takes. */
/*@ assigns \nothing;
    ensures \result == 0 <==> 1 <= capacity <= HM_RING_CAPACITY &&
            HM_MAX_PAYLOAD + HM_MAX_SOURCE <= arena_size <= HM_ARENA_SIZE; */
static int bad_size(unsigned capacity, unsigned arena_size) {
    return capacity < 1u || capacity > HM_RING_CAPACITY ||
           arena_size < HM_MAX_PAYLOAD + HM_MAX_SOURCE || arena_size > HM_ARENA_SIZE;
}

/*@ requires \valid(ring) && \valid_read(device_id + (0 .. HM_ID_SIZE - 1)) &&
             \separated(ring, device_id + (0 .. HM_ID_SIZE - 1));
    assigns *ring;
    behavior bad:
      assumes capacity < 1 || capacity > HM_RING_CAPACITY ||
              arena_size < HM_MAX_PAYLOAD + HM_MAX_SOURCE || arena_size > HM_ARENA_SIZE;
      assigns \nothing;
      ensures \result == HM_RING_BAD_ARG;
    behavior good:
      assumes 1 <= capacity <= HM_RING_CAPACITY &&
              HM_MAX_PAYLOAD + HM_MAX_SOURCE <= arena_size <= HM_ARENA_SIZE;
      HM_ACSL_RING_FACTS(ensures, , ring, -1);
      ensures \result == HM_RING_OK;
      ensures ring->capacity == capacity && ring->block_size == arena_size / HM_RING_BLOCKS;
      ensures ring->seq == 0 && ring->boot == boot && ring->mru == HM_RING_NIL &&
              ring->lru == HM_RING_NIL && ring->free_head == 0;
      ensures \forall integer k; 0 <= k < ring->capacity ==> ring->rec[k].seq == 0;
      ensures ring->counters.captures == 0 && ring->counters.refusals == 0 &&
              ring->counters.used == 0 && ring->used_blocks == 0;
    complete behaviors;
    disjoint behaviors; */
hm_ring_status hm_ring_init_sized(hm_ring *ring, const uint8_t device_id[HM_ID_SIZE],
                                  uint32_t boot, unsigned capacity, unsigned arena_size) {
    unsigned k;
    if (bad_size(capacity, arena_size)) return HM_RING_BAD_ARG;
    memset(ring, 0, sizeof *ring);
    memcpy(ring->device_id, device_id, HM_ID_SIZE);
    ring->boot = boot;
    ring->capacity = (uint16_t)capacity;
    ring->block_size = (uint16_t)(arena_size / HM_RING_BLOCKS);
    /*@ loop invariant 0 <= k <= capacity;
        loop invariant \forall integer j; 0 <= j < k ==> ring->rec[j].prev == HM_RING_NIL &&
          (ring->rec[j].next == HM_RING_NIL || ring->rec[j].next < capacity);
        loop assigns k, ring->rec[0 .. capacity - 1].prev, ring->rec[0 .. capacity - 1].next;
        loop variant capacity - k; */
    for (k = 0; k < capacity; k++) {
        ring->rec[k].prev = NIL;
        ring->rec[k].next = (uint8_t)(k + 1u < capacity ? k + 1u : NIL);
    }
    ring->free_head = 0;
    ring->mru = ring->lru = NIL;
    return HM_RING_OK;
}

/*@ requires \valid(ring) && \valid_read(device_id + (0 .. HM_ID_SIZE - 1)) &&
             \separated(ring, device_id + (0 .. HM_ID_SIZE - 1));
    assigns *ring;
    HM_ACSL_RING_FACTS(ensures, , ring, -1);
    ensures ring->capacity == HM_RING_CAPACITY && ring->seq == 0; */
void hm_ring_init(hm_ring *ring, const uint8_t device_id[HM_ID_SIZE], uint32_t boot) {
    (void)hm_ring_init_sized(ring, device_id, boot, HM_RING_CAPACITY, HM_ARENA_SIZE);
}

/*@ requires \valid(ring);
    HM_ACSL_RING_FACTS(requires, , ring, -1);
    requires payload_len <= HM_MAX_PAYLOAD && payload != \null ==>
             \valid_read(payload + (0 .. payload_len - 1));
    requires source_len <= HM_MAX_SOURCE && source != \null ==>
             \valid_read(source + (0 .. source_len - 1));
    requires context != \null ==> \valid_read(context + (0 .. HM_HASH_SIZE - 1));
    requires out_index == \null || \valid(out_index);
    requires \separated(ring, out_index);
    requires payload != \null ==> \separated(ring, payload + (0 .. payload_len - 1));
    requires source != \null ==> \separated(ring, source + (0 .. source_len - 1));
    requires context != \null ==> \separated(ring, context + (0 .. HM_HASH_SIZE - 1));
    assigns *ring, *out_index;
    HM_ACSL_RING_FACTS(ensures, , ring, -1);
    ensures ring->counters.captures == (\old(ring->counters.captures) + 1) % 4294967296;
    ensures \result == HM_RING_OK || \result == HM_RING_REFUSED_FULL ||
            \result == HM_RING_REFUSED_INVALID;
    ensures \result == HM_RING_REFUSED_INVALID <==>
            payload_len > HM_MAX_PAYLOAD || source_len > HM_MAX_SOURCE ||
            context == \null || (payload == \null && payload_len != 0) ||
            (source == \null && source_len != 0);
    ensures \old(ring->seq) == 4294967295 ==> \result != HM_RING_OK;
    // I4: a refusal stores nothing and is counted
    ensures \result != HM_RING_OK ==> ring->seq == \old(ring->seq) &&
            ring->counters.refusals == (\old(ring->counters.refusals) + 1) % 4294967296;
    // stored: a VOLATILE record with the next seq and the sizes and time given
    ensures \result == HM_RING_OK ==> ring->seq == \old(ring->seq) + 1 &&
            ring->counters.refusals == \old(ring->counters.refusals);
    ensures \result == HM_RING_OK && out_index != \null ==> live_at(ring, *out_index) &&
            ring->rec[*out_index].seq == ring->seq &&
            ring->rec[*out_index].state == HM_STATE_VOLATILE &&
            ring->rec[*out_index].payload_len == payload_len &&
            ring->rec[*out_index].source_len == source_len &&
            ring->rec[*out_index].timestamp == timestamp && ring->mru == *out_index;
    // I3: a gated record is never evicted
    ensures \result == HM_RING_OK ==> \forall integer j; 0 <= j < ring->capacity &&
            \old(ring->rec[j].seq) != 0 && \old(ring->rec[j].state) != HM_STATE_VOLATILE ==>
            ring->rec[j].seq == \old(ring->rec[j].seq); */
hm_ring_status hm_ring_capture(hm_ring *ring, const uint8_t *payload, size_t payload_len,
                               const uint8_t *source, size_t source_len, uint64_t timestamp,
                               const uint8_t context[HM_HASH_SIZE], int *out_index) {
    hm_ring_counters *cnt = &ring->counters;
    hm_ring_record *rec;
    unsigned k;
    int block = 0;
    uint8_t i;

    /* captures = seq + refusals (I8) holds at every call below: each exit counts the
     * capture where it counts the refusal or takes the seq */
    if (payload_len > HM_MAX_PAYLOAD || source_len > HM_MAX_SOURCE || context == NULL ||
        (payload == NULL && payload_len) || (source == NULL && source_len)) {
        cnt->captures++;
        cnt->refusals++;
        return HM_RING_REFUSED_INVALID;
    }
    if (ring->seq == UINT32_MAX) { /* ids would repeat: reboot for a new boot counter */
        cnt->captures++;
        cnt->refusals++;
        return HM_RING_REFUSED_FULL;
    }
    /* blocks needed: at most 320 / 10 = 32 */
    k = ((unsigned)(payload_len + source_len) + ring->block_size - 1u) / ring->block_size;
    if (ring->free_head == NIL) block = -1; /* no slot: make_room finds both */
    else if (k) block = find_run(~ring->used_blocks, k);
    if (block >= 0) {
        i = slot_take(ring);
    } else {
        block = make_room(ring, k, &i);
        if (block < 0) {
            cnt->captures++;
            cnt->refusals++;
            return HM_RING_REFUSED_FULL;
        }
    }
    rec = &ring->rec[i];

    copy_context(rec->context, context);
    rec->gate.h = rec->gate.i = rec->gate.r = rec->gate.f = rec->gate.c = 0;
    rec->gate.rn = rec->gate.w = 0;
    rec->gate.flags = 0;
    rec->gate.verdict = rec->gate.hard = rec->gate.state = 0;
    rec->timestamp = timestamp;
    rec->seq = ++ring->seq;
    cnt->captures++;
    rec->confidence = rec->provenance = rec->priority = 0;
    rec->pack = 0;
    rec->payload_len = (uint16_t)payload_len;
    rec->source_len = (uint8_t)source_len;
    rec->block = (uint8_t)block;
    rec->nblocks = (uint8_t)k;
    rec->state = HM_STATE_VOLATILE;
    rec->layer = HM_LAYER_WORKING;
    rec->chained = 0;
    {
        uint8_t *data = &ring->arena[(uint32_t)block * ring->block_size];
        uint8_t *to = data + payload_len;
        const uint8_t *from = source, *end = source + source_len;
        uint32_t mask = blocks_mask((unsigned)block, k); /* rec_mask(rec) */
        if (payload_len) memcpy(data, payload, payload_len);
        /* the source is short: a byte loop costs less than a call (bottom-tested) */
        if (from != end)
            /*@ loop invariant source <= from < end && to == data + payload_len + (from - source);
                loop assigns from, to, ring->arena[0 .. HM_ARENA_SIZE - 1];
                loop variant end - from; */
            do *to++ = *from++; while (from != end);
        ring->used_blocks |= mask;
        ring->vol_blocks |= mask;
    }
    lru_push_front(ring, i);

    cnt->arena_used += (uint32_t)k * ring->block_size;
    if (out_index) *out_index = i;
    return HM_RING_OK;
}

/*@ requires \valid(ring);
    HM_ACSL_RING_FACTS(requires, , ring, -1);
    assigns ring->mru, ring->lru, ring->rec[0 .. HM_RING_CAPACITY - 1].prev,
            ring->rec[0 .. HM_RING_CAPACITY - 1].next;
    HM_ACSL_RING_FACTS(ensures, , ring, -1);
    ensures live_at(ring, index) ? \result == &ring->rec[index] : \result == \null;
    ensures live_at(ring, index) && ring->rec[index].state == HM_STATE_VOLATILE ==>
            ring->mru == index; */
const hm_ring_record *hm_ring_get(hm_ring *ring, int index) {
    hm_ring_record *rec = live(ring, index);
#ifdef HM_PLANT_RING_LRU /* planted bug for tools/verify_c.py: an access is not counted */
    if (0) {
#else
    if (rec && rec->state == HM_STATE_VOLATILE && ring->mru != (uint8_t)index) {
#endif
        lru_unlink(ring, (uint8_t)index);
        lru_push_front(ring, (uint8_t)index);
    }
    return rec;
}

/*@ requires \valid_read(ring);
    HM_ACSL_RING_FACTS(requires, , ring, -1);
    assigns \nothing;
    ensures live_at(ring, index) ? \result == &ring->rec[index] : \result == \null; */
const hm_ring_record *hm_ring_peek(const hm_ring *ring, int index) {
    if (index < 0 || index >= (int)ring->capacity || ring->rec[index].seq == 0) return NULL;
    return &ring->rec[index];
}

/*@ requires \valid_read(ring);
    HM_ACSL_RING_FACTS(requires, , ring, -1);
    requires \exists integer i; live_at(ring, i) && rec == &ring->rec[i];
    assigns \nothing;
    ensures \result == &ring->arena[rec->block * ring->block_size];
    ensures \valid_read(\result + (0 .. rec->payload_len + rec->source_len - 1)); */
const uint8_t *hm_ring_payload(const hm_ring *ring, const hm_ring_record *rec) {
    return &ring->arena[(uint32_t)rec->block * ring->block_size];
}

/*@ requires \valid_read(ring);
    HM_ACSL_RING_FACTS(requires, , ring, -1);
    requires \exists integer i; live_at(ring, i) && rec == &ring->rec[i];
    assigns \nothing;
    ensures \result == &ring->arena[rec->block * ring->block_size + rec->payload_len];
    ensures \valid_read(\result + (0 .. rec->source_len - 1)); */
const uint8_t *hm_ring_source(const hm_ring *ring, const hm_ring_record *rec) {
    return hm_ring_payload(ring, rec) + rec->payload_len;
}

/*@ requires \valid(p + (0 .. 3));
    assigns p[0 .. 3];
    ensures p[0] == v / 16777216 % 256 && p[1] == v / 65536 % 256 && p[2] == v / 256 % 256 &&
            p[3] == v % 256; */
static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/*@ requires \valid_read(ring) && \valid_read(rec) &&
             \valid(id + (0 .. HM_RECORD_ID_SIZE - 1)) &&
             \separated(id + (0 .. HM_RECORD_ID_SIZE - 1), ring, rec);
    assigns id[0 .. HM_RECORD_ID_SIZE - 1];
    ensures id[8] == ring->boot / 16777216 % 256 && id[11] == ring->boot % 256;
    ensures id[12] == rec->seq / 16777216 % 256 && id[15] == rec->seq % 256; */
void hm_ring_id(const hm_ring *ring, const hm_ring_record *rec,
                uint8_t id[HM_RECORD_ID_SIZE]) {
    memcpy(id, ring->device_id, HM_ID_SIZE);
    put_be32(id + HM_ID_SIZE, ring->boot);
    put_be32(id + HM_ID_SIZE + 4, rec->seq);
}

/*@ requires \valid(ring);
    HM_ACSL_RING_FACTS(requires, , ring, index);
    assigns *ring;
    ensures \result == HM_RING_OK || \result == HM_RING_NO_RECORD ||
            \result == HM_RING_BAD_ARG || \result == HM_RING_BAD_STATE;
    HM_ACSL_RING_FACTS(ensures, \result == HM_RING_OK || ring_ok{Pre}(ring) ==>, ring, -1);
    ensures \result == HM_RING_NO_RECORD <==> !live_at(ring, index);
    // VOLATILE -> CANDIDATE | QUARANTINED only, counted (I7, I8)
    ensures \result == HM_RING_OK <==> live_at(ring, index) &&
            \old(ring->rec[index].state) == HM_STATE_VOLATILE &&
            (state == HM_STATE_CANDIDATE || state == HM_STATE_QUARANTINED);
    ensures \result == HM_RING_OK ==> ring->rec[index].state == state &&
            ring->rec[index].layer == HM_LAYER_EPISODIC &&
            ring->rec[index].seq == \old(ring->rec[index].seq) &&
            ring->counters.candidates + ring->counters.quarantines ==
              \old(ring->counters.candidates) + \old(ring->counters.quarantines) + 1; */
hm_ring_status hm_ring_set_state(hm_ring *ring, int index, unsigned state) {
    hm_ring_record *rec = live(ring, index);
    if (!rec) return HM_RING_NO_RECORD;
    /*@ assert slot: 0 <= index < ring->capacity <= HM_RING_CAPACITY &&
                     rec == &ring->rec[index]; */
    if (state > HM_STATE_ARCHIVED) return HM_RING_BAD_ARG;
    if (rec->state != HM_STATE_VOLATILE ||
        (state != HM_STATE_CANDIDATE && state != HM_STATE_QUARANTINED))
        return HM_RING_BAD_STATE;
    lru_unlink(ring, (uint8_t)index);
    ring->vol_blocks &= ~rec_mask(rec);
    ring->counters.volatiles--;
    if (state == HM_STATE_CANDIDATE) ring->counters.candidates++;
    else ring->counters.quarantines++;
    /* The two stores into the record one at a time, the other slots' facts asserted
     * after each: Z3 carries a quantified fact across one store, not across two. */
    //@ assert HM_ACSL_RING_LIVES(ring);
    //@ assert HM_ACSL_RING_SCORES(ring, index);
    rec->state = (uint8_t)state;
    //@ assert HM_ACSL_RING_LIVES_BUT(ring, index);
    //@ assert HM_ACSL_RING_SCORES(ring, index);
    //@ assert ring->rec[index].state != HM_STATE_VOLATILE;
    rec->layer = HM_LAYER_EPISODIC;
    return HM_RING_OK;
}

/*@ requires \valid(ring) && (out == \null || \valid(out)) &&
             \separated(ring, out);
    HM_ACSL_RING_FACTS(requires, , ring, -1);
    assigns *ring, *out;
    HM_ACSL_RING_FACTS(ensures, , ring, -1);
    ensures \result == HM_RING_OK <==> live_at(ring, index) &&
            \old(ring->rec[index].state) == HM_STATE_VOLATILE && priority <= HM_Q_ONE &&
            flags <= 0xFFF && quality <= HM_Q_ONE && provenance <= HM_Q_ONE;
    ensures \result == HM_RING_OK ==> ring->rec[index].confidence == quality &&
            ring->rec[index].provenance == provenance &&
            ring->rec[index].priority == priority &&
            ring->rec[index].state == ring->rec[index].gate.state &&
            ring->rec[index].layer == HM_LAYER_EPISODIC; */
hm_ring_status hm_ring_gate(hm_ring *ring, int index, uint32_t flags, uint32_t quality,
                            uint32_t provenance, uint32_t priority, hm_gate_result *out) {
    hm_ring_record *rec = live(ring, index);
    hm_gate_result g;
    if (!rec) return HM_RING_NO_RECORD;
    if (rec->state != HM_STATE_VOLATILE) return HM_RING_BAD_STATE;
    if (priority > HM_Q_ONE) return HM_RING_BAD_ARG;
    flags = hm_gate_normalise(flags, rec->payload_len, rec->timestamp, HM_HASH_SIZE,
                              rec->source_len);
    if (hm_gate_evaluate(flags, quality, provenance, &g) != HM_GATE_OK) return HM_RING_BAD_ARG;
    rec->gate = g;
    rec->confidence = quality;
    rec->provenance = provenance;
    rec->priority = priority;
    if (out) *out = g;
    return hm_ring_set_state(ring, index, g.state);
}

/*@ requires \valid(ring);
    HM_ACSL_RING_FACTS(requires, , ring, -1);
    requires \valid_read(hash + (0 .. HM_HASH_SIZE - 1)) &&
             \valid_read(prev_hash + (0 .. HM_HASH_SIZE - 1));
    requires \separated(ring, hash + (0 .. HM_HASH_SIZE - 1), prev_hash + (0 .. HM_HASH_SIZE - 1));
    assigns ring->rec[0 .. HM_RING_CAPACITY - 1].hash[0 .. HM_HASH_SIZE - 1],
            ring->rec[0 .. HM_RING_CAPACITY - 1].prev_hash[0 .. HM_HASH_SIZE - 1],
            ring->rec[0 .. HM_RING_CAPACITY - 1].chained;
    HM_ACSL_RING_FACTS(ensures, , ring, -1);
    ensures \result == HM_RING_OK <==> live_at(ring, index) &&
            ring->rec[index].state != HM_STATE_VOLATILE && ring->rec[index].pack == 0;
    ensures \result == HM_RING_OK ==> ring->rec[index].chained == 1; */
hm_ring_status hm_ring_set_chain(hm_ring *ring, int index, const uint8_t hash[HM_HASH_SIZE],
                                 const uint8_t prev_hash[HM_HASH_SIZE]) {
    hm_ring_record *rec = live(ring, index);
    if (!rec) return HM_RING_NO_RECORD;
    if (rec->state == HM_STATE_VOLATILE || rec->pack) return HM_RING_BAD_STATE;
    memcpy(rec->hash, hash, HM_HASH_SIZE);
    memcpy(rec->prev_hash, prev_hash, HM_HASH_SIZE);
    rec->chained = 1;
    return HM_RING_OK;
}

/*@ requires \valid(ring);
    HM_ACSL_RING_FACTS(requires, , ring, -1);
    assigns ring->rec[0 .. HM_RING_CAPACITY - 1].pack, ring->counters.pinned;
    HM_ACSL_RING_FACTS(ensures, , ring, -1);
    // I5: only a gated, unpinned record is pinned
    ensures \result == HM_RING_OK <==> live_at(ring, index) && pack != 0 &&
            ring->rec[index].state != HM_STATE_VOLATILE && \old(ring->rec[index].pack) == 0;
    ensures \result == HM_RING_OK ==> ring->rec[index].pack == pack &&
            ring->counters.pinned == (\old(ring->counters.pinned) + 1) % 4294967296; */
hm_ring_status hm_ring_pin(hm_ring *ring, int index, uint32_t pack) {
    hm_ring_record *rec = live(ring, index);
    if (!rec) return HM_RING_NO_RECORD;
    if (pack == 0) return HM_RING_BAD_ARG;
    if (rec->state == HM_STATE_VOLATILE || rec->pack) return HM_RING_BAD_STATE;
    rec->pack = pack;
    /* the store through live()'s pointer apart from the count modulo 2^32 (I5, I8) */
    //@ assert ring->counters.pinned == \at(ring->counters.pinned, Pre);
    ring->counters.pinned++;
    return HM_RING_OK;
}

/*@ requires \valid(ring);
    HM_ACSL_RING_FACTS(requires, , ring, -1);
    // only slot `index` (nothing when it is not live): a caller's facts of the others stand
    assigns ring->rec[index].pack, ring->rec[index].chained, ring->counters.pinned;
    HM_ACSL_RING_FACTS(ensures, , ring, -1);
    ensures \result == HM_RING_OK <==> live_at(ring, index) && \old(ring->rec[index].pack) != 0;
    // I7: the next pack links it anew
    ensures \result == HM_RING_OK ==> ring->rec[index].pack == 0 &&
            ring->rec[index].chained == 0 &&
            // the count minus one modulo 2^32 (ACSL's % truncates: (0 - 1) % 2^32 is -1)
            ring->counters.pinned == (\old(ring->counters.pinned) + 4294967295) % 4294967296; */
hm_ring_status hm_ring_unpin(hm_ring *ring, int index) {
    hm_ring_record *rec = live(ring, index);
    if (!rec) return HM_RING_NO_RECORD;
    if (!rec->pack) return HM_RING_BAD_STATE;
    rec->pack = 0;
    rec->chained = 0;
    //@ assert ring->counters.pinned == \at(ring->counters.pinned, Pre);
    ring->counters.pinned--;
    return HM_RING_OK;
}

/*@ requires \valid(ring);
    HM_ACSL_RING_FACTS(requires, , ring, -1);
    assigns *ring;
    HM_ACSL_RING_FACTS(ensures, , ring, -1);
    // I3: only a pinned record (gated, I5) leaves by a release (live before, free after)
    ensures \result == HM_RING_OK <==> \old(live_at(ring, index) && ring->rec[index].pack != 0);
    ensures ring->capacity == \old(ring->capacity);
    // the other slots keep their record and its pin (hm_ring_release_pack's sweep)
    ensures \result == HM_RING_OK ==> ring->rec[index].seq == 0 && ring->free_head == index &&
            \forall integer j; 0 <= j < ring->capacity && j != index ==>
              ring->rec[j].seq == \old(ring->rec[j].seq) &&
              ring->rec[j].pack == \old(ring->rec[j].pack); */
hm_ring_status hm_ring_release(hm_ring *ring, int index) {
    hm_ring_record *rec = live(ring, index);
    if (!rec) return HM_RING_NO_RECORD;
    //@ assert slot: 0 <= index < ring->capacity <= HM_RING_CAPACITY && rec == &ring->rec[index];
    if (!rec->pack) return HM_RING_BAD_STATE;
    ring->counters.pinned--;
    blocks_free(ring, rec, rec_mask(rec));
    /*@ assert \forall integer j; 0 <= j < ring->capacity ==>
                 ring->rec[j].seq == \at(ring->rec[j].seq, Pre) &&
                 ring->rec[j].pack == \at(ring->rec[j].pack, Pre); */
    slot_push_free(ring, (uint8_t)index);
    return HM_RING_OK;
}

/*@ requires \valid(ring);
    HM_ACSL_RING_FACTS(requires, , ring, -1);
    assigns ring->rec[0 .. HM_RING_CAPACITY - 1].pack,
            ring->rec[0 .. HM_RING_CAPACITY - 1].chained, ring->counters.pinned;
    HM_ACSL_RING_FACTS(ensures, , ring, -1);
    ensures \result <= ring->capacity;
    ensures pack != 0 ==> \forall integer j; 0 <= j < ring->capacity &&
            ring->rec[j].seq != 0 ==> ring->rec[j].pack != pack; */
unsigned hm_ring_unpin_pack(hm_ring *ring, uint32_t pack) {
    unsigned k, n = 0;
    /*@ loop invariant 0 <= k <= ring->capacity && n <= k;
 HM_ACSL_RING_FACTS(loop invariant, , ring, -1);
        loop invariant pack != 0 ==> \forall integer j; 0 <= j < k &&
          ring->rec[j].seq != 0 ==> ring->rec[j].pack != pack;
        loop assigns k, n, ring->rec[0 .. HM_RING_CAPACITY - 1].pack,
          ring->rec[0 .. HM_RING_CAPACITY - 1].chained, ring->counters.pinned;
        loop variant ring->capacity - k; */
    for (k = 0; pack && k < ring->capacity; k++) {
        if (ring->rec[k].seq && ring->rec[k].pack == pack) {
            (void)hm_ring_unpin(ring, (int)k);
            n++;
        }
    }
    return n;
}

/*@ requires \valid(ring);
    HM_ACSL_RING_FACTS(requires, , ring, -1);
    assigns *ring;
    HM_ACSL_RING_FACTS(ensures, , ring, -1);
    ensures \result <= ring->capacity;
    ensures pack != 0 ==> \forall integer j; 0 <= j < ring->capacity &&
            ring->rec[j].seq != 0 ==> ring->rec[j].pack != pack; */
unsigned hm_ring_release_pack(hm_ring *ring, uint32_t pack) {
    unsigned k, n = 0;
    /*@ loop invariant 0 <= k <= ring->capacity && n <= k;
 HM_ACSL_RING_FACTS(loop invariant, , ring, -1);
        loop invariant ring->capacity == \at(ring->capacity, Pre);
        loop invariant pack != 0 ==> \forall integer j; 0 <= j < k &&
          ring->rec[j].seq != 0 ==> ring->rec[j].pack != pack;
        loop assigns k, n, *ring;
        loop variant ring->capacity - k; */
    for (k = 0; pack && k < ring->capacity; k++) {
        if (ring->rec[k].seq && ring->rec[k].pack == pack) {
            (void)hm_ring_release(ring, (int)k);
            n++;
        }
    }
    return n;
}

/*@ requires \valid_read(ring);
    HM_ACSL_RING_FACTS(requires, , ring, -1);
    assigns \nothing;
    ensures \result == -1 || (live_at(ring, \result) && ring->rec[\result].seq > after_seq);
    // the smallest such seq among the records `select` admits
    ensures \forall integer j; 0 <= j < ring->capacity && ring->rec[j].seq > after_seq &&
            (\result == -1 || ring->rec[j].seq < ring->rec[\result].seq) ==>
            (select & (1 << ring->rec[j].state)) == 0 ||
            ((select & HM_RING_SEL_UNPINNED) != 0 && ring->rec[j].pack != 0) ||
            ((select & HM_RING_SEL_PINNED) != 0 && ring->rec[j].pack == 0); */
int hm_ring_next(const hm_ring *ring, uint32_t after_seq, unsigned select) {
    int best = -1;
    uint32_t best_seq = 0;
    unsigned k;
    /*@ loop invariant 0 <= k <= ring->capacity && -1 <= best < k;
        loop invariant best != -1 ==> ring->rec[best].seq == best_seq && best_seq > after_seq;
        loop invariant \forall integer j; 0 <= j < k && ring->rec[j].seq > after_seq &&
          (best == -1 || ring->rec[j].seq < best_seq) ==>
          (select & (1 << ring->rec[j].state)) == 0 ||
          ((select & HM_RING_SEL_UNPINNED) != 0 && ring->rec[j].pack != 0) ||
          ((select & HM_RING_SEL_PINNED) != 0 && ring->rec[j].pack == 0);
        loop assigns k, best, best_seq;
        loop variant ring->capacity - k; */
    for (k = 0; k < ring->capacity; k++) {
        const hm_ring_record *rec = &ring->rec[k];
        if (rec->seq <= after_seq || (best >= 0 && rec->seq >= best_seq)) continue;
        if (!(select & (1u << rec->state))) continue;
        if ((select & HM_RING_SEL_UNPINNED) && rec->pack) continue;
        if ((select & HM_RING_SEL_PINNED) && !rec->pack) continue;
        best = (int)k;
        best_seq = rec->seq;
    }
    return best;
}

/* Resume: 1 if the list from `i` holds exactly n slots, each once (a repeat would be
 * a cycle: it never reaches NIL within n steps), all free ones (vol 0) or all live
 * VOLATILE ones linked back through prev (vol 1); *last gets its last slot. */
/*@ requires \valid_read(ring) && \valid(last) && \separated(ring, last) &&
             ring->capacity <= HM_RING_CAPACITY;
    assigns *last;
    ensures \result == 0 || \result == 1; */
static int walk(const hm_ring *ring, uint8_t i, unsigned n, int vol, uint8_t *last) {
    uint8_t prev = NIL;
    /*@ loop assigns i, n, prev;
        loop variant n; */
    for (; i != NIL; prev = i, i = ring->rec[i].next) {
        const hm_ring_record *r = &ring->rec[i];
        if (i >= ring->capacity || n-- == 0 ||
            (vol ? r->seq == 0 || r->state != HM_STATE_VOLATILE || r->prev != prev : r->seq != 0))
            return 0;
    }
    *last = prev;
    return n == 0;
}

/*@ requires \valid_read(ring) && \valid_read(device_id + (0 .. HM_ID_SIZE - 1));
    assigns \nothing;
    ensures \result == 0 || \result == -1; */
int hm_ring_validate(const hm_ring *ring, const uint8_t device_id[HM_ID_SIZE],
                     unsigned capacity, unsigned arena_size) {
    const hm_ring_counters *c = &ring->counters;
    uint32_t used = 0, vol = 0, nlive = 0, nvol = 0, npin = 0, bytes = 0;
    unsigned k, j, bs = arena_size / HM_RING_BLOCKS;
    uint8_t last;

    if (bad_size(capacity, arena_size) || ring->capacity != capacity || ring->block_size != bs ||
        memcmp(ring->device_id, device_id, HM_ID_SIZE) != 0)
        return -1;
    /*@ loop invariant 0 <= k <= capacity <= HM_RING_CAPACITY;
        loop assigns k, j, used, vol, nlive, nvol, npin, bytes;
        loop variant capacity - k; */
    for (k = 0; k < capacity; k++) { /* I1, I5, I6, I7 of each live slot */
        const hm_ring_record *r = &ring->rec[k];
        unsigned st = r->state;
        uint32_t m;
        if (r->seq == 0) continue;
        if (r->seq > ring->seq || r->payload_len > HM_MAX_PAYLOAD ||
            r->source_len > HM_MAX_SOURCE ||
            r->nblocks != (r->payload_len + r->source_len + bs - 1u) / bs ||
            r->block + r->nblocks > HM_RING_BLOCKS || ((m = rec_mask(r)) & used) != 0 ||
            (st != HM_STATE_VOLATILE && st != HM_STATE_CANDIDATE &&
             st != HM_STATE_QUARANTINED) ||
            r->layer != (st == HM_STATE_VOLATILE ? HM_LAYER_WORKING : HM_LAYER_EPISODIC))
            return -1;
        /*@ loop invariant 0 <= j <= k;
            loop assigns j;
            loop variant k - j; */
        for (j = 0; j < k; j++)
            if (ring->rec[j].seq == r->seq) return -1;
        if (st == HM_STATE_VOLATILE) {
            if (r->pack || r->chained) return -1;
            vol |= m;
            nvol++;
        }
        npin += r->pack != 0;
        used |= m;
        nlive++;
        bytes += r->nblocks;
    }
    /* I1 the free list, I2 the volatile list; I6 and I8 */
    if (!walk(ring, ring->free_head, capacity - nlive, 0, &last) ||
        !walk(ring, ring->mru, nvol, 1, &last) || ring->lru != last ||
        ring->used_blocks != used || ring->vol_blocks != vol || c->used != nlive ||
        c->volatiles != nvol || c->pinned != npin ||
        c->arena_used != bytes * bs ||
        c->captures != ring->seq + c->refusals)
        return -1;
    return 0;
}
