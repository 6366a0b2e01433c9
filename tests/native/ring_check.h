/* The invariant checker of hm_ring.h (I1, I2, I5..I8 as structure and counters), shared
 * by t_core (after every ring command) and verify/ring/ring_explore.c (after every step
 * of the bounded exploration). Independent of hm_ring_validate: it walks the lists and
 * recomputes the block maps and counters on its own. */
#ifndef RING_CHECK_H
#define RING_CHECK_H

#include "hm_ring.h"

/* NULL if the ring holds the invariants, else what is broken (*slot: where). */
const char *ring_violation(const hm_ring *rg, unsigned *slot);

/* ring_violation, and on a violation a message "<who>: ring invariant broken: ..." on
 * stderr and exit status 1. */
void check_ring_or_exit(const char *who, const hm_ring *rg);

#endif
