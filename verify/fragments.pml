/* Joining frame pieces (protocol/SPEC.md §6.8), as hm_join_take (hm_frag.c),
 * hirmem/protocol/pieces.py and hirmem_mp/frag.py implement it.
 *
 * Two peers, one model (the sender is chosen by a define):
 *
 * - HOSTILE (default): every piece is the peer's choice: a first piece with any total
 *   and any chunk length, a continuation with any number and chunk length, or a bad
 *   head. Safety (assertions):
 *     - the receiver never holds more than its limit (max_message);
 *     - a body it completes is one first piece followed by continuations numbered
 *       1, 2, ... (mod MOD) with nothing skipped, each taken once, exactly total bytes;
 *     - after any refusal the receiver is idle (nothing half-kept).
 * - HONEST: a sender sends bodies of BODY bytes cut into first + continuations of at
 *   most CHUNK bytes, retransmitting every body whole (go-back-N) up to SENDS times,
 *   over a line that may drop any frame or repeat it once right away (a serial line
 *   neither reorders nor invents frames, SPEC §13). Safety: every body the receiver
 *   completes is byte for byte a body the sender sent (each byte carries a ghost tag:
 *   its body and its offset). MOD is small (4) so that numbers wrap within one body.
 *
 * Bounds: LIMIT, MAXTOTAL, MAXCHUNK, MOD and PIECES pieces in all (HOSTILE); BODY,
 * CHUNK, SENDS and BODIES (HONEST).
 *
 * Planted bugs: BUG_GAP (a continuation is taken whatever its number: caught by both
 * peers), BUG_NO_LIMIT (total is not checked against the limit). */

#ifndef LIMIT
#ifdef HONEST
#define LIMIT BODY
#else
#define LIMIT 4
#endif
#endif
#ifndef MAXTOTAL
#define MAXTOTAL 5
#endif
#ifndef MAXCHUNK
#define MAXCHUNK 3
#endif
#ifndef MOD
#define MOD 4
#endif
#ifndef PIECES
#define PIECES 6
#endif
#ifndef BODY
#define BODY 7
#endif
#ifndef CHUNK
#define CHUNK 1
#endif
#ifndef SENDS
#define SENDS 2
#endif
#ifndef BODIES
#define BODIES 2
#endif

#define KIND_FIRST 0
#define KIND_CONT 1
#define KIND_BAD 2

#ifdef HONEST
#define BUFSZ BODY
#else
#define BUFSZ MAXTOTAL
#endif

/* the receiver (hm_join) */
byte next = 0;          /* number of the next continuation, 0 when idle */
byte total = 0, have = 0;
byte refusals = 0, completed = 0;
/* ghost: per byte held, its body and its offset there (HONEST), or the number of the
 * piece it came from (HOSTILE) */
byte tag_body[BUFSZ];
byte tag_at[BUFSZ];

inline idle() {
    next = 0; total = 0; have = 0;
    i = 0;
    do
    :: i < BUFSZ -> tag_body[i] = 0; tag_at[i] = 0; i++
    :: else -> break
    od;
    i = 0
}

inline refuse() {
    refusals++;
    idle()
}

#ifdef BUG_NO_LIMIT
#define TOO_LARGE(t) false
#else
#define TOO_LARGE(t) (t > LIMIT)
#endif
#ifdef BUG_GAP
#define WRONG_NUMBER(k) false
#else
#define WRONG_NUMBER(k) (k != next % MOD)
#endif

/* Take one piece: kind, total t (first), number k (continuation), clen bytes whose
 * ghost tags are body b, offsets from at. */
inline take(kind, t, k, clen, b, at) {
    ok = 0;
    if
    :: kind == KIND_BAD -> refuse()                     /* bad head */
    :: kind == KIND_FIRST ->
        idle();                                         /* a restart drops the partial */
        if
        :: TOO_LARGE(t) -> refuse()                     /* too-large */
        :: else ->
            if
            :: clen == 0 -> refuse()                    /* empty */
            :: clen > 0 && clen >= t -> refuse()        /* overrun: fits one frame */
            :: else -> total = t; next = 1; ok = 1
            fi
        fi
    :: kind == KIND_CONT ->
        if
        :: next == 0 -> refuse()                        /* orphan */
        :: next >= 2 && k == (next + MOD - 1) % MOD -> skip   /* duplicate: ignored */
        :: else ->
            if
            :: WRONG_NUMBER(k) -> refuse()              /* gap */
            :: else ->
                if
                :: clen == 0 || have + clen > total -> refuse()  /* empty, overrun */
                :: else -> ok = 1; next++
                fi
            fi
        fi
    fi;
    if
    :: ok ->
        j = 0;
        do
        :: j < clen ->
            tag_body[have + j] = b;
#ifdef HONEST
            tag_at[have + j] = at + j;
#else
            tag_at[have + j] = (kind == KIND_FIRST -> 0 : k);  /* the piece's number */
#endif
            j++
        :: else -> break
        od;
        have = have + clen;
        assert(have <= total && total <= LIMIT);        /* never more than the limit held */
        if
        :: have == total ->                             /* complete */
            j = 0;
            do
            :: j < total ->
#ifdef HONEST
                assert(tag_body[j] == tag_body[0] && tag_at[j] == j);  /* one sent body */
#else
                /* one first piece, then continuations 1, 2, ... (mod MOD), none skipped */
                assert(j > 0 || tag_at[0] == 0);
                assert(j == 0 || tag_at[j] == tag_at[j - 1] ||
                       tag_at[j] == (tag_at[j - 1] + 1) % MOD);
#endif
                j++
            :: else -> break
            od;
            completed++;
            idle()
        :: else
        fi
    :: else
    fi;
    assert(next != 0 || (have == 0 && total == 0))     /* idle after every refusal */
}

#ifdef HONEST
/* The honest sender (bodies 1..BODIES, each sent SENDS times whole) over a line that
 * drops a frame, passes it, or passes it twice in a row. */
active proctype Line() {
    byte b = 1, s, at, k, n, kind, clen, i, j, ok;
    do
    :: b <= BODIES ->
        s = 0;
        do
        :: s < SENDS ->
            s++;
            at = 0; k = 0;
            do
            :: at < BODY ->
                kind = (k == 0 -> KIND_FIRST : KIND_CONT);
                clen = (BODY - at < CHUNK -> BODY - at : CHUNK);
                if
                :: skip                                 /* dropped */
                :: atomic { n = clen; take(kind, BODY, k % MOD, n, b, at) }
                :: atomic { n = clen; take(kind, BODY, k % MOD, n, b, at) };
                   atomic { n = clen; take(kind, BODY, k % MOD, n, b, at) }
                fi;
                at = at + clen;
                k++
            :: else -> break
            od
        :: else -> break
        od;
        b++
    :: else -> break
    od;
    assert(completed <= BODIES * SENDS)
}
#else
active proctype Receiver() {
    byte p = 0, kind, t, k, clen, i, j, ok;
    do
    :: p < PIECES ->
        p++;
        if :: kind = KIND_FIRST :: kind = KIND_CONT :: kind = KIND_BAD fi;
        if :: t = 1 :: t = 2 :: t = 3 :: t = 4 :: MAXTOTAL >= 5 -> t = 5 fi;
        if :: k = 0 :: k = 1 :: k = 2 :: MOD >= 4 -> k = 3 fi;
        if :: clen = 0 :: clen = 1 :: clen = 2 :: MAXCHUNK >= 3 -> clen = 3 fi;
        atomic { take(kind, t, k, clen, 1, 0) };
        kind = 0; t = 0; k = 0; clen = 0
    :: else -> break
    od
}
#endif
