/* hirmem session protocol (protocol/SPEC.md §5-§8), as host/hirmem/link/session.py and
 * firmware/core/hm_agent.c implement it, over lines that lose, duplicate and reorder.
 *
 * What is modelled
 *   - lines that lose and duplicate frames in both directions, and hold a device frame
 *     back behind later ones of its session (reordering); host frames keep their order
 *     unless REORDER_H2D (a real line keeps them in order; the checks with REORDER_H2D
 *     show that the protocol does not rely on it, see SEND_H);
 *   - one device and the host; the device may reset (boot grows, §6.6) and may declare
 *     its session dead (the eighth timeout of §6.4, taken as a nondeterministic choice);
 *   - go-back-N with cumulative acks (§6.2), in-order delivery and duplicate
 *     suppression (§6.3), the window (§6.4), delayed acks (an ACK may be sent whenever
 *     an ack is owed), retransmission of every unacked message in order (on a global
 *     timeout, and a bounded number of times early, which is what a timer that fires
 *     while the answer is still on the line does);
 *   - HELLO_ACK's echo of the HELLO it answers (SPEC §5.3): the device ignores one that
 *     answers another HELLO;
 *   - the handshake and the HELLO retransmission rule of §6.5 host step 2 (same HELLO
 *     (here: boot) and fresh: nothing delivered after HELLO, nothing sent after HELLO_ACK), the host's
 *     ERROR no-session (§6.5), §6.6 (host: captures already sent fail and are never
 *     re-queued; device: packs the host holds are not offered again);
 *   - the pack chain of §8.5: the host accepts a pack only if it extends its chain head
 *     (seq above the head, prev = the head's hash) and answers duplicates as such;
 *   - host CAPTUREs (§5.4): each takes effect on the device when delivered.
 * Abstracted: message bodies (a pack is its number k: seq k, prev = hash of k-1),
 * fragmentation (a fragmented message is delivered whole or not at all; the reassembly
 * limits are model-checked in verify/fragments.pml), clocks (timers fire when nothing
 * else can happen, or early within a budget), signatures (packs verify; forged ones are
 * the acceptance model's business).
 *
 * Properties
 *   safety (assertions): a capture takes effect at most once ("no record stored twice",
 *   the device side); a pack is stored at most once; the host accepts only the pack that
 *   extends its chain (nothing out of order, nothing rolled back); the device forgets a
 *   pack only when the host has stored it ("none acknowledged to the device is lost").
 *   liveness (LTL, weak fairness): every pack the device releases is eventually stored.
 *
 * Planted bugs (-D flags; tools/verify.py shows that each is caught):
 *   BUG_HELLO_FRESH  the host takes every HELLO of the session's boot for a retransmission;
 *   HELLO_FRESH_HALF (not a bug since the session proof) the freshness test without "sent
 *                    nothing after HELLO_ACK": the host sends nothing before the PROOF is
 *                    delivered, and once it is the session is not fresh, so the second
 *                    condition is implied; the check shows the model agrees;
 *   BUG_DUP_DELIVER  the device lets a duplicate CAPTURE (seq below expected) take effect;
 *   BUG_NO_ECHO      the device takes a HELLO_ACK without checking that it echoes its
 *                    current HELLO (SPEC §5.3 field 12, §6.5 device step 3). */

#ifndef NPACK
#define NPACK 3      /* packs the device releases */
#endif
#ifndef NCAP
#define NCAP 2       /* captures the host asks for */
#endif
#ifndef WIN
#define WIN 2        /* agreed window */
#endif
#ifndef RESETS
#define RESETS 1     /* device resets */
#endif
#ifndef TRIES
#define TRIES 2      /* timeouts before a session is dead (8 in SPEC §6.4) */
#endif
#ifndef FAULTS
#define FAULTS 3     /* losses, duplications and reorderings, both lines together */
#endif
#ifndef EARLY
#define EARLY 1      /* retransmissions while the answer may still be on the line */
#endif

#define CAP (WIN + 2)
/* a process's scratch variables are zeroed after use, so they add no states */
#define CLEAR6(p, q, r, u, v, w) p = 0; q = 0; r = 0; u = 0; v = 0; w = 0

/* §6.5 host step 2: "fresh" is nothing delivered after HELLO (the PROOF not yet) and
   nothing sent after HELLO_ACK */
#if defined(BUG_HELLO_FRESH)
#define FRESH true
#elif defined(HELLO_FRESH_HALF)
#define FRESH (h_exp == 2)
#else
#define FRESH (h_exp == 2 && h_next == 2)
#endif

/* §6.5 device step 3: a HELLO_ACK opens a session only if it echoes the current HELLO */
#ifdef BUG_NO_ECHO
#define ECHO_OK(e) true
#else
#define ECHO_OK(e) (e == boot)
#endif

mtype = { HELLO, HELLO_ACK, PROOF, OFFER, RESULT, CAPTURE, CRESULT, ACK, ERR_NOSESSION };
/* the fifth field: a PACK_RESULT's status, a HELLO_ACK's or a PROOF's challenge */
#define ACCEPTED 0
#define DUPLICATE 1
#define REFUSED 2

/* type, seq, ack, arg (boot | head | pack | capture), status, echo: a HELLO_ACK's echo of
   the HELLO it answers (SPEC §5.3, the hash of the HELLO as sent; a HELLO is its boot
   here, so the echo is that boot), 0 on every other message */
chan d2h = [CAP] of { mtype, byte, byte, byte, byte, byte };
chan h2d = [CAP] of { mtype, byte, byte, byte, byte, byte };

byte faults = 0;
byte early = 0;

/* ---- ground truth, for the properties -------------------------------------------- */
byte stored[NPACK + 1];   /* times the host stored pack k */
byte effect[NCAP + 1];    /* times capture c took effect on the device */
byte released = NPACK - 1; /* packs the device has made */
byte head = 0;            /* the host's chain head (durable) */

/* ---- the lines: each send may be delivered, lost, duplicated or held back and
 * delivered after later messages of the same session (reordered); FAULTS bounds the
 * faults in all ---------------------------------------------------------------------- */
#define XMIT(ch, late, lt, ls, la, lx, lst, le, mt, ms, ma, mx, mst, me) \
    if \
    :: ch!mt,ms,ma,mx,mst,me \
    :: faults < FAULTS -> faults++ \
    :: faults < FAULTS && len(ch) + 2 <= CAP -> faults++; ch!mt,ms,ma,mx,mst,me; ch!mt,ms,ma,mx,mst,me \
    :: faults < FAULTS && !late -> faults++; late = true; lt = mt; ls = ms; la = ma; lx = mx; lst = mst; le = me \
    fi

bool dl = false; mtype dl_t; byte dl_st, dl_s, dl_a, dl_x, dl_e;   /* held back on device -> host */
bool hl = false; mtype hl_t; byte hl_st, hl_s, hl_a, hl_x, hl_e;   /* held back on host -> device */
#define SEND_D(mt, ms, ma, mx, mst) XMIT(d2h, dl, dl_t, dl_s, dl_a, dl_x, dl_st, dl_e, mt, ms, ma, mx, mst, 0)
#ifdef REORDER_H2D
#define SEND_H(mt, ms, ma, mx, mst, me) XMIT(h2d, hl, hl_t, hl_s, hl_a, hl_x, hl_st, hl_e, mt, ms, ma, mx, mst, me)
#else
/* host -> device frames are lost or duplicated but not reordered unless REORDER_H2D: a
   serial line or a TCP stream keeps order. Before HELLO_ACK echoed the HELLO it answers,
   reordering broke safety (a HELLO_ACK delayed past a device reset opened a session on
   the new boot and the old session's CAPTURE took effect twice); the check
   session-safety-reorder shows that it no longer does */
#define SEND_H(mt, ms, ma, mx, mst, me) \
    if \
    :: h2d!mt,ms,ma,mx,mst,me \
    :: faults < FAULTS -> faults++ \
    :: faults < FAULTS && len(h2d) + 2 <= CAP -> faults++; h2d!mt,ms,ma,mx,mst,me; h2d!mt,ms,ma,mx,mst,me \
    fi
#endif

/* ---- the device ------------------------------------------------------------------- */
byte boot = 1;
bool d_open = false;
bool d_hello = true;       /* a HELLO is due */
byte d_next, d_exp;
byte d_base;              /* seq of the oldest unacked message */
byte d_nun = 0;           /* unacked messages: seqs d_base .. d_base + d_nun - 1 */
mtype d_ut[WIN];          /* their types (OFFER or CRESULT) */
byte d_ua[WIN];           /* and arguments */
bool d_owe = false;       /* an ack is owed (§6.2) */
byte d_held = 0;          /* packs 1..d_held are held by the host, as the device knows */
byte d_offered = 0;       /* highest pack offered in this session */
byte d_answer = 0;        /* a capture delivered, its CAPTURE_RESULT not yet sent */
bool d_proof = false;      /* PROOF due: the first message of a session (SPEC §5.15) */
byte d_chal = 0;          /* the challenge of the HELLO_ACK that opened the session */
byte resets = 0, deaths = 0;
byte d_tries = 0;         /* consecutive timeouts without progress */

inline d_forget_upto(k) {
    /* the device drops packs up to k from its ring: the host must have every one */
    assert(head >= k);
    j = 1;
    do
    :: j <= k -> assert(stored[j] == 1); j++
    :: else -> break
    od;
    if
    :: k > d_held -> d_held = k
    :: else
    fi
}

inline d_lose_session() {
    d_open = false; d_nun = 0; d_owe = false; d_answer = 0; d_hello = true; d_tries = 0;
    d_proof = false; d_chal = 0;
    /* a frame is never delayed past the end of its session: a session ends after 19.75 s
       of timeouts or a reset, and a line keeps a frame for milliseconds */
    dl = false; CLEAR6(dl_t, dl_s, dl_a, dl_x, dl_st, dl_e);
    hl = false; CLEAR6(hl_t, hl_s, hl_a, hl_x, hl_st, hl_e)
}

inline d_take_ack(a) {
    if
    :: d_nun > 0 && a >= d_base && a < d_base + d_nun ->
        /* cumulative: drop every message with seq <= a, oldest first */
        drop = a - d_base + 1;
        i = 0;
        do
        :: i + drop < d_nun -> d_ut[i] = d_ut[i + drop]; d_ua[i] = d_ua[i + drop]; i++
        :: else -> break
        od;
        d_nun = d_nun - drop; d_base = a + 1; d_tries = 0
    :: else
    fi
}

inline d_send(t, x) {
    d_ut[d_nun] = t; d_ua[d_nun] = x;
    if
    :: d_nun == 0 -> d_base = d_next
    :: else
    fi;
    d_nun++;
    SEND_D(t,d_next,d_exp - 1,x,(t == PROOF -> d_chal : ACCEPTED));
    d_next++; d_owe = false
}

inline d_resend() {
    i = 0;
    do
    :: i < d_nun -> SEND_D(d_ut[i],d_base + i,d_exp - 1,d_ua[i],(d_ut[i] == PROOF -> d_chal : ACCEPTED)); i++
    :: else -> break
    od;
    i = 0; d_owe = false
}

proctype Device() {
    mtype t; byte st; byte s, a, x, e, i, j, drop;
    end:
    do
    /* the device makes a pack as it captures (the rest were made before boot) */
    :: released < NPACK -> released++

    /* no session: send HELLO (seq 1, ack 0, the boot), resend it on a timeout */
    :: atomic { !d_open && d_hello && nfull(d2h) -> SEND_D(HELLO,1,0,boot,ACCEPTED); d_hello = false }
    :: atomic { !d_open && !d_hello && timeout -> d_hello = true }

    /* a session: offer the next held pack, answer a capture, acknowledge */
    :: atomic { d_open && d_proof && d_nun < WIN && nfull(d2h) ->
        d_send(PROOF, boot); d_proof = false }
    :: atomic { d_open && !d_proof && d_answer == 0 && d_nun < WIN && d_offered < released && nfull(d2h) ->
        d_offered++; d_send(OFFER, d_offered) }
    :: atomic { d_open && !d_proof && d_answer != 0 && d_nun < WIN && nfull(d2h) ->
        d_send(CRESULT, d_answer); d_answer = 0 }
    :: atomic { d_open && d_owe && nfull(d2h) -> SEND_D(ACK,0,d_exp - 1,0,ACCEPTED); d_owe = false }

    /* a message held back on the line arrives after later ones */
    :: atomic { dl && nfull(d2h) -> d2h!dl_t,dl_s,dl_a,dl_x,dl_st,dl_e; dl = false;
        CLEAR6(dl_t, dl_s, dl_a, dl_x, dl_st, dl_e) }
    /* retransmission (go-back-N): on a timeout, or early within the budget */
    :: atomic { d_open && d_nun > 0 && len(d2h) + d_nun <= CAP && d_tries < TRIES && timeout ->
        d_tries++; d_resend() }
    :: atomic { d_open && d_nun > 0 && len(d2h) + d_nun <= CAP && early < EARLY ->
        early++; d_resend() }
    /* the last timeout (the eighth in SPEC §6.4, TRIES here): the session is dead; start
       over with the same boot */
    :: atomic { d_open && d_nun > 0 && d_tries == TRIES && timeout -> deaths++; d_lose_session();
        /* 19.75 s have passed: nothing sent before is still on the line */
        do
        :: nempty(h2d) -> h2d?_,_,_,_,_,_
        :: empty(h2d) -> break
        od }
    /* a reset: the ring survives (.noinit or persisted), the boot grows */
    :: atomic { resets < RESETS -> resets++; boot++; d_lose_session() }

    :: atomic { h2d?t,s,a,x,st,e ->
        if
        :: t == ERR_NOSESSION && d_open -> d_lose_session()
        :: t == ERR_NOSESSION && !d_open -> skip   /* hm_agent: counted, nothing else */
        :: !d_open && t == HELLO_ACK && s == 1 && a == 1 && ECHO_OK(e) ->
            /* §6.5 device step 3: HELLO acknowledged, HELLO_ACK delivered */
            d_open = true; d_next = 2; d_exp = 2; d_nun = 0;
            d_proof = true; d_chal = st;   /* the PROOF acknowledges HELLO_ACK */
            d_forget_upto(x);
            d_offered = d_held
        :: !d_open && t != ERR_NOSESSION && !(t == HELLO_ACK && s == 1 && a == 1 && ECHO_OK(e)) ->
            skip     /* everything else is ignored without a session; a HELLO_ACK that
                        answers another HELLO (an older boot's) is ignored and counted */
        :: d_open && t == ACK -> d_take_ack(a)
        :: d_open && t != ACK && t != ERR_NOSESSION && t != HELLO_ACK ->
            d_take_ack(a);
            if
            :: s == d_exp && (d_answer == 0 || t != CAPTURE) ->
                d_exp++; d_owe = true;
                if
                :: t == CAPTURE -> effect[x]++; assert(effect[x] <= 1); d_answer = x
                :: t == RESULT && st != REFUSED -> d_forget_upto(x)
                :: t == RESULT && st == REFUSED ->
                    /* hm_pack_result: the pack and those linked after it are abandoned, their
                       records return to the ring and go out again in a new pack */
                    if
                    :: x - 1 < d_offered -> d_offered = x - 1
                    :: else
                    fi
                fi
            :: s == d_exp && d_answer != 0 && t == CAPTURE -> skip  /* busy: not delivered */
            :: s != d_exp -> d_owe = true   /* duplicate or out of order: re-acknowledge */
#ifdef BUG_DUP_DELIVER
                /* planted: a duplicate CAPTURE takes effect again */
                if
                :: s < d_exp && t == CAPTURE -> effect[x]++; assert(effect[x] <= 1)
                :: else
                fi
#endif
            fi
        :: d_open && t == HELLO_ACK -> d_take_ack(a); d_owe = true  /* seq 1 < expected */
        fi;
        CLEAR6(t, s, a, x, st, e); i = 0; j = 0; drop = 0 }
    od
}

/* ---- the host ----------------------------------------------------------------------- */
byte h_deaths = 0;
byte h_tries = 0;
byte h_phase = 0;         /* 0 idle, 1 handshake (HELLO_ACK unacked), 2 open */
byte h_boot = 0;          /* the session's boot */
byte h_next, h_exp;
byte h_base;
byte h_nun = 0;
mtype h_ut[WIN];
byte h_ua[WIN];
byte h_us[WIN];
bool h_owe = false;
byte h_cap = 0;           /* captures sent (each once: §6.6, a sent capture is never re-queued) */
byte h_ack_head;          /* the head the stored HELLO_ACK carries */
byte h_chal = 0;          /* its challenge: fresh for each new session */
byte proofs_refused = 0;
byte h_pending = 0;       /* a pack delivered, its PACK_RESULT not yet sent */
byte h_pstatus;

inline h_take_ack(a) {
    if
    :: h_nun > 0 && a >= h_base && a < h_base + h_nun ->
        drop = a - h_base + 1;
        i = 0;
        do
        :: i + drop < h_nun ->
            h_ut[i] = h_ut[i + drop]; h_ua[i] = h_ua[i + drop]; h_us[i] = h_us[i + drop]; i++
        :: else -> break
        od;
        h_nun = h_nun - drop; h_base = a + 1; h_tries = 0;
    :: else
    fi
}

inline h_send(t, x, st) {
    h_ut[h_nun] = t; h_ua[h_nun] = x; h_us[h_nun] = st;
    if
    :: h_nun == 0 -> h_base = h_next
    :: else
    fi;
    h_nun++;
    SEND_H(t,h_next,h_exp - 1,x,st,(t == HELLO_ACK -> h_boot : 0));
    h_next++; h_owe = false
}

inline h_resend() {
    i = 0;
    do
    :: i < h_nun -> SEND_H(h_ut[i],h_base + i,h_exp - 1,h_ua[i],h_us[i],(h_ut[i] == HELLO_ACK -> h_boot : 0)); i++
    :: else -> break
    od;
    i = 0; h_owe = false
}

proctype Host() {
    mtype t; byte st; byte s, a, x, e, i, drop;
    end:
    do
    /* open: ask for a capture, answer a pack, acknowledge */
    :: atomic { h_phase == 2 && h_pending == 0 && h_cap < NCAP && h_nun < WIN && nfull(h2d) ->
        h_cap++; h_send(CAPTURE, h_cap, ACCEPTED) }
    :: atomic { h_phase == 2 && h_pending != 0 && h_nun < WIN && nfull(h2d) ->
        h_send(RESULT, h_pending, h_pstatus); h_pending = 0 }
    :: atomic { hl && nfull(h2d) -> h2d!hl_t,hl_s,hl_a,hl_x,hl_st,hl_e; hl = false;
        CLEAR6(hl_t, hl_s, hl_a, hl_x, hl_st, hl_e) }
    :: atomic { h_phase != 0 && h_owe && nfull(h2d) -> SEND_H(ACK,0,h_exp - 1,0,ACCEPTED,0); h_owe = false }
    :: atomic { h_phase != 0 && h_nun > 0 && len(h2d) + h_nun <= CAP && h_tries < TRIES && timeout ->
        h_tries++; h_resend() }
    :: atomic { h_phase != 0 && h_nun > 0 && len(h2d) + h_nun <= CAP && early < EARLY ->
        early++; h_resend() }
    /* the host's eighth timeout: the session is dead; sent captures fail, never re-queued */
    :: atomic { h_phase != 0 && h_nun > 0 && h_tries == TRIES && timeout ->
        h_deaths++; h_phase = 0; h_tries = 0; h_nun = 0; h_pending = 0; h_owe = false;
        hl = false; CLEAR6(hl_t, hl_s, hl_a, hl_x, hl_st, hl_e) }

    :: atomic { d2h?t,s,a,x,st,e ->
        if
        :: t == HELLO ->
            if
            :: h_phase != 0 && h_boot == x && FRESH ->
                /* §6.5 host step 2: a retransmission; resend the stored HELLO_ACK */
                if
                :: nfull(h2d) -> SEND_H(HELLO_ACK,1,1,h_ack_head,h_chal,h_boot)
                :: full(h2d)    /* the line is full: as good as lost */
                fi
            :: !(h_phase != 0 && h_boot == x && FRESH) ->
                /* step 3: a new session; the old one's unacked messages are dropped */
                h_phase = 1; h_boot = x; h_exp = 2; h_next = 1; h_nun = 0; h_tries = 0;
                h_pending = 0; h_owe = false; h_ack_head = head; h_chal++;
                hl = false; CLEAR6(hl_t, hl_s, hl_a, hl_x, hl_st, hl_e);
                if
                :: nfull(h2d) -> h_send(HELLO_ACK, head, h_chal)
                :: full(h2d) -> h_ut[0] = HELLO_ACK; h_ua[0] = head; h_us[0] = h_chal;
                           h_base = 1; h_nun = 1; h_next = 2   /* sent into a full line: lost */
                fi
            fi
        :: t != HELLO && h_phase == 0 && t != ACK ->
            if
            :: nfull(h2d) -> SEND_H(ERR_NOSESSION,0,0,s,ACCEPTED,0)
            :: full(h2d)
            fi
        :: t != HELLO && h_phase == 0 && t == ACK -> skip
        :: t == ACK && h_phase != 0 -> h_take_ack(a)
        :: t != HELLO && t != ACK && h_phase != 0 ->
            h_take_ack(a);
            if
            :: h_phase == 2 && s == h_exp && h_pending == 0 ->
                h_exp++; h_owe = true;
                if
                :: t == OFFER ->
                    if
                    :: x == head + 1 ->   /* seq above the head and prev = the head's hash */
                        stored[x]++; assert(stored[x] == 1); head = x; h_pstatus = ACCEPTED
                    :: x <= head -> h_pstatus = DUPLICATE
                    :: x > head + 1 -> h_pstatus = REFUSED
                    fi;
                    h_pending = x
                :: t == CRESULT -> skip
                fi
            :: h_phase == 2 && s == h_exp && h_pending != 0 -> skip   /* busy */
            :: h_phase == 1 && s == h_exp && t == PROOF && x == h_boot && st == h_chal ->
                /* the proof verifies: the session opens (SPEC §6.5 host step 4) */
                h_exp++; h_owe = true; h_phase = 2
            :: h_phase == 1 && s == h_exp && !(t == PROOF && x == h_boot && st == h_chal) ->
                /* no proof, or a proof of another session: refused, nothing kept */
                proofs_refused++; h_phase = 0; h_nun = 0; h_owe = false;
                if
                :: nfull(h2d) -> SEND_H(ERR_NOSESSION,0,0,s,ACCEPTED,0)
                :: full(h2d)
                fi
            :: s != h_exp -> h_owe = true
            fi
        fi;
        CLEAR6(t, s, a, x, st, e); i = 0; drop = 0 }
    od
}

init {
    atomic {
        run Device();
        run Host()
    }
}

/* liveness: with weak fairness, every released pack is eventually stored */
ltl all_stored { <> (head == NPACK) }
