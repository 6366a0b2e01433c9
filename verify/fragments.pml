/* Reassembly of fragmented messages (protocol/SPEC.md §6.8), as hm_frag.c and
 * host/hirmem/protocol/fragments.py implement it, against ANY sequence of delivered
 * FRAGMENTs: an honest sender's, a sender that restarts a message (a new session, or a
 * refusal it obeys), and a hostile peer's (any msg_id, total, offset and chunk length).
 *
 * The session layer (verify/session.pml) delivers each sequenced message once and in
 * order; this model takes over from there: every FRAGMENT here is a delivered one.
 *
 * Safety (assertions):
 *   - the receiver never holds more than its limit (max_message) of partial message;
 *   - a message it completes was built from fragments of one (msg_id, total) whose
 *     chunks were contiguous from offset 0 to total: no gap, no overlap, no mixing;
 *   - after any refusal the receiver is idle (nothing half-kept).
 * Bounds: message ids 1..IDS, totals 1..MAXTOTAL, chunks 1..MAXCHUNK, LIMIT, and FRAGS
 * fragments in all; the peer chooses every field of every fragment.
 *
 * Planted bugs: BUG_GAP (a fragment continues a reassembly when its offset is at or above
 * the bytes received, not equal), BUG_NO_LIMIT (total is not checked against the limit). */

#ifndef IDS
#define IDS 2
#endif
#ifndef MAXTOTAL
#define MAXTOTAL 5
#endif
#ifndef MAXCHUNK
#define MAXCHUNK 3
#endif
#ifndef LIMIT
#define LIMIT 4
#endif
#ifndef FRAGS
#define FRAGS 6
#endif

/* the receiver */
bool busy = false;
byte r_id, r_total, r_have;
/* ghost: where each byte of the partial message came from */
byte src_id[MAXTOTAL];
byte src_total[MAXTOTAL];
byte completed = 0;
byte refusals = 0;

inline refuse() {
    busy = false; r_id = 0; r_total = 0; r_have = 0; refusals++;
    i = 0;
    do
    :: i < MAXTOTAL -> src_id[i] = 0; src_total[i] = 0; i++
    :: else -> break
    od;
    i = 0
}

active proctype Receiver() {
    byte n = 0, id, total, off, clen, i;
    do
    :: n < FRAGS ->
        n++;
        /* the peer's fragment: every field free */
        if :: id = 1 :: IDS >= 2 -> id = 2 fi;
        if :: total = 1 :: total = 2 :: total = 3 :: total = 4 :: MAXTOTAL >= 5 -> total = 5 fi;
        if :: off = 0 :: off = 1 :: off = 2 :: off = 3 :: off = 4 fi;
        if :: clen = 0 :: clen = 1 :: clen = 2 :: MAXCHUNK >= 3 -> clen = 3 fi;
        atomic {
            if
            :: off == 0 && busy -> refuse()            /* step 1: one at a time */
            :: off == 0 && !busy ->
#ifdef BUG_NO_LIMIT
                if :: false -> skip :: else ->
#else
                if
                :: total > LIMIT -> refuse()           /* too-large */
                :: else ->
#endif
                    busy = true; r_id = id; r_total = total; r_have = 0
                fi
            :: off != 0 ->
#ifdef BUG_GAP
                if
                :: busy && id == r_id && total == r_total && off >= r_have ->
                    r_have = off                       /* planted: a gap is skipped */
#else
                if
                :: busy && id == r_id && total == r_total && off == r_have -> skip
#endif
                :: else -> refuse()                    /* step 2: not the continuation */
                fi
            fi;
            /* step 3: the chunk */
            if
            :: busy && (clen == 0 || r_have + clen > r_total) -> refuse()
            :: busy && clen > 0 && r_have + clen <= r_total ->
                i = 0;
                do
                :: i < clen -> src_id[r_have + i] = id; src_total[r_have + i] = total; i++
                :: else -> break
                od;
                r_have = r_have + clen;
                assert(r_have <= LIMIT);               /* never more than the limit held */
                if
                :: r_have == r_total ->                /* step 4: complete */
                    i = 0;
                    do
                    :: i < r_total ->
                        assert(src_id[i] == r_id && src_total[i] == r_total);
                        i++
                    :: else -> break
                    od;
                    completed++;
                    busy = false; r_id = 0; r_total = 0; r_have = 0;
                    i = 0;
                    do
                    :: i < MAXTOTAL -> src_id[i] = 0; src_total[i] = 0; i++
                    :: else -> break
                    od
                :: else
                fi
            :: !busy -> assert(r_have == 0 && r_total == 0)  /* refused: idle */
            fi;
            i = 0; id = 0; total = 0; off = 0; clen = 0
        }
    :: else -> break
    od
}
