#include "ring_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *bad(unsigned *slot, const char *what, unsigned where) {
    *slot = where;
    return what;
}

static uint32_t rec_blocks_mask(const hm_ring_record *rec) {
    uint32_t m = 0;
    for (unsigned b = rec->block; b < (unsigned)rec->block + rec->nblocks; b++) m |= 1u << b;
    return m;
}

const char *ring_violation(const hm_ring *rg, unsigned *slot) {
    const hm_ring_counters *c = &rg->counters;
    unsigned cap = rg->capacity, k, n, live = 0, vol = 0, pinned = 0;
    uint8_t seen[HM_RING_CAPACITY];
    uint32_t blocks = 0, vblocks = 0, nblocks = 0;

    if (cap < 1 || cap > HM_RING_CAPACITY) return bad(slot, "capacity", cap);
    memset(seen, 0, sizeof seen);
    /* I1: free list holds exactly the free slots. */
    n = 0;
    for (k = rg->free_head; k != HM_RING_NIL; k = rg->rec[k].next) {
        if (k >= cap || seen[k] || ++n > cap) return bad(slot, "free list", k);
        if (rg->rec[k].seq != 0) return bad(slot, "live slot on the free list", k);
        seen[k] = 1;
    }
    for (k = 0; k < cap; k++) {
        const hm_ring_record *r = &rg->rec[k];
        if (r->seq == 0) {
            if (!seen[k]) return bad(slot, "free slot missing from the free list", k);
            continue;
        }
        live++;
        if (r->seq > rg->seq) return bad(slot, "seq above the last assigned", k);
        for (unsigned j = 0; j < k; j++)
            if (rg->rec[j].seq == r->seq) return bad(slot, "duplicate seq", k);
        /* I5, I7 */
        if (r->state != HM_STATE_VOLATILE && r->state != HM_STATE_CANDIDATE &&
            r->state != HM_STATE_QUARANTINED)
            return bad(slot, "state", k);
        if (r->pack) {
            pinned++;
            if (r->state == HM_STATE_VOLATILE) return bad(slot, "pinned volatile record", k);
        }
        if (r->state == HM_STATE_VOLATILE) {
            vol++;
            vblocks |= rec_blocks_mask(r);
            const hm_gate_result *g = &r->gate;
            if (r->layer != HM_LAYER_WORKING || g->h || g->i || g->r || g->f || g->c || g->rn ||
                g->w || g->flags || g->verdict || g->hard || g->state || r->confidence ||
                r->provenance || r->priority || r->chained)
                return bad(slot, "volatile record with scores", k);
        } else {
            if (r->layer != HM_LAYER_EPISODIC) return bad(slot, "gated record not episodic", k);
            if (r->prev != HM_RING_NIL || r->next != HM_RING_NIL) return bad(slot, "gated record linked", k);
        }
        if (r->payload_len > HM_MAX_PAYLOAD || r->source_len > HM_MAX_SOURCE)
            return bad(slot, "record sizes", k);
        /* I6: the least number of blocks, inside the 32, disjoint from the others. */
        if (r->nblocks != (r->payload_len + r->source_len + rg->block_size - 1u) / rg->block_size ||
            (r->nblocks == 0 && r->block != 0) || r->block + r->nblocks > HM_RING_BLOCKS)
            return bad(slot, "record blocks", k);
        if (blocks & rec_blocks_mask(r)) return bad(slot, "overlapping records", k);
        blocks |= rec_blocks_mask(r);
        nblocks += r->nblocks;
    }
    if (live + n != cap) return bad(slot, "slots neither live nor free", live);
    if (blocks != rg->used_blocks || vblocks != rg->vol_blocks) return bad(slot, "block maps", 0);
    if (c->arena_used != nblocks * rg->block_size) return bad(slot, "arena_used", nblocks);
    /* I2: the volatile list is exactly the volatile records, links consistent. */
    n = 0;
    {
        unsigned prev = HM_RING_NIL;
        for (k = rg->mru; k != HM_RING_NIL; k = rg->rec[k].next) {
            if (k >= cap || ++n > cap) return bad(slot, "volatile list", k);
            if (rg->rec[k].seq == 0 || rg->rec[k].state != HM_STATE_VOLATILE)
                return bad(slot, "non-volatile record on the volatile list", k);
            if (rg->rec[k].prev != prev) return bad(slot, "volatile list back link", k);
            prev = k;
        }
        if (rg->lru != prev) return bad(slot, "lru is not the list tail", prev);
    }
    if (n != vol || c->volatiles != vol) return bad(slot, "volatile count", n);
    /* I8 */
    if (c->used != live || c->pinned != pinned) return bad(slot, "used or pinned counter", live);
    if (c->captures != rg->seq + c->refusals) return bad(slot, "captures != stored + refusals", 0);
    return NULL;
}

void check_ring_or_exit(const char *who, const hm_ring *rg) {
    unsigned slot = 0;
    const char *what = ring_violation(rg, &slot);
    if (what) {
        fprintf(stderr, "%s: ring invariant broken: %s (slot %u)\n", who, what, slot);
        exit(1);
    }
}
