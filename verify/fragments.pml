/* Joining frame pieces (protocol/SPEC.md §6.8), as hm_join_take (hm_frag.c),
 * hirmem/protocol/pieces.py and hirmem_mp/frag.py implement it: a first piece, then
 * continuations numbered k mod MOD with a last flag on the piece that ends the stream
 * body || check; the receiver joins one body at a time and, at the last piece, compares
 * the body with its check.
 *
 * The check is modelled as what it is for: a body passes it only if its bytes are the
 * bytes of one sent body in order. (CRC-32 lets through a wrong body with probability
 * about 2^-32; the model takes it as exact.) Each byte carries a ghost tag: its body and
 * its offset there.
 *
 * Two peers, one model:
 * - HONEST: a sender sends BODIES bodies of BODY bytes cut into pieces of CHUNK bytes,
 *   each body SENDS times whole (go-back-N), over a line that drops a frame, passes
 *   it, or passes it twice in a row (a serial line neither reorders nor invents frames,
 *   SPEC §13). Safety: every body the receiver delivers is a sent body, byte for byte,
 *   and the receiver never holds more than its limit. MOD is small so that numbers
 *   wrap within one body (the case the check is for).
 * - HOSTILE (default): every piece is the peer's choice (kind, number, last flag,
 *   length; its bytes tagged with any body and offset). Safety: never more than the
 *   limit held; idle after every refusal; a delivered body passed the check.
 *
 * Planted bugs: BUG_NO_CHECK (the check is not compared: with losses a wrong body is
 * delivered, caught by HONEST), BUG_NO_LIMIT (the limit is not checked, caught by
 * HOSTILE). */

#ifndef MOD
#define MOD 4
#endif
#ifndef BODY
#define BODY 6
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
#ifndef PIECES
#define PIECES 6
#endif
#ifndef LIMIT
#ifdef HONEST
#define LIMIT BODY
#else
#define LIMIT 3
#endif
#endif
#define BUFSZ (LIMIT + 1)

#define KIND_FIRST 0
#define KIND_CONT 1
#define KIND_BAD 2

/* the receiver (hm_join): the stream is modelled as the body's bytes; the check is the
 * comparison at the last piece */
byte next = 0;          /* number of the next continuation, 0 when idle */
byte have = 0;
byte refusals = 0, delivered = 0;
byte tag_body[BUFSZ];   /* ghost: per byte held, its body and its offset there */
byte tag_at[BUFSZ];
byte sent_len[BODIES + 1]; /* ghost: the length of each sent body (HONEST) */

inline idle() {
    next = 0; have = 0
}

inline refuse() {
    refusals++;
    idle()
}

#ifdef BUG_NO_LIMIT
#define OVER_LIMIT(n) false
#else
#define OVER_LIMIT(n) (have + n > LIMIT)
#endif

/* the body check: the bytes held are one sent body, in order, whole */
inline check(ok) {
    ok = (have > 0);
    j = 0;
    do
    :: j < have ->
        if
        :: tag_body[j] != tag_body[0] || tag_at[j] != j -> ok = 0
        :: else
        fi;
        j++
    :: else -> break
    od;
#ifdef HONEST
    if :: ok && sent_len[tag_body[0]] != have -> ok = 0 :: else fi;
#endif
    j = 0
}

/* Take one piece: kind, number k, last flag, clen bytes tagged body b from offset at. */
inline take(kind, k, last, clen, b, at) {
    ok = 0;
    if
    :: kind == KIND_BAD -> refuse()                         /* bad head */
    :: kind == KIND_FIRST ->
        idle();                                             /* a restart drops the partial */
        if :: clen == 0 -> refuse() :: else -> ok = 1 fi    /* empty */
    :: kind == KIND_CONT ->
        if
        :: next == 0 -> refuse()                            /* orphan */
        :: next >= 2 && k == (next + MOD - 1) % MOD -> skip /* duplicate: ignored */
        :: else ->
            if
            :: k != next % MOD -> refuse()                  /* gap */
            :: else -> if :: clen == 0 -> refuse() :: else -> ok = 1 fi
            fi
        fi
    fi;
    if
    :: ok && OVER_LIMIT(clen) -> refuse(); ok = 0           /* too-large */
    :: ok && !OVER_LIMIT(clen) ->
        j = 0;
        do
        :: j < clen -> tag_body[have + j] = b; tag_at[have + j] = at + j; j++
        :: else -> break
        od;
        j = 0;
        have = have + clen;
        next++;
        assert(have <= LIMIT);                              /* never more than the limit */
        if
        :: kind == KIND_CONT && last ->
#ifdef BUG_NO_CHECK
            good = 1;
#else
            check(good);
#endif
            if
            :: good ->
#ifdef HONEST
                check(good);
                assert(good);                               /* a sent body, byte for byte */
#endif
                delivered++; idle()
            :: else -> refuse()                             /* bad check */
            fi
        :: else
        fi
    :: else
    fi;
    assert(next != 0 || have == 0)                          /* idle after every refusal */
}

#ifdef HONEST
active proctype Line() {
    byte b = 1, s, at, k, n, kind, clen, last, j, ok, good;
    do
    :: b <= BODIES ->
        sent_len[b] = BODY;
        s = 0;
        do
        :: s < SENDS ->
            s++;
            at = 0; k = 0;
            do
            :: at < BODY ->
                kind = (k == 0 -> KIND_FIRST : KIND_CONT);
                clen = (BODY - at < CHUNK -> BODY - at : CHUNK);
                last = (at + clen == BODY -> 1 : 0);
                if
                :: skip                                     /* dropped */
                :: atomic { n = clen; take(kind, k % MOD, last, n, b, at) }
                :: atomic { n = clen; take(kind, k % MOD, last, n, b, at) };
                   atomic { n = clen; take(kind, k % MOD, last, n, b, at) }
                fi;
                at = at + clen;
                k++
            :: else -> break
            od
        :: else -> break
        od;
        b++
    :: else -> break
    od
}
#else
active proctype Peer() {
    byte p = 0, kind, k, last, clen, b, at, j, ok, good;
    do
    :: p < PIECES ->
        p++;
        if :: kind = KIND_FIRST :: kind = KIND_CONT :: kind = KIND_BAD fi;
        if :: k = 0 :: k = 1 :: k = 2 :: MOD >= 4 -> k = 3 fi;
        if :: last = 0 :: last = 1 fi;
        if :: clen = 0 :: clen = 1 :: clen = 2 fi;
        if :: b = 1 :: b = 2 fi;
        if :: at = 0 :: at = 1 :: at = 2 fi;
        atomic { take(kind, k, last, clen, b, at) };
        kind = 0; k = 0; last = 0; clen = 0; b = 0; at = 0
    :: else -> break
    od
}
#endif
