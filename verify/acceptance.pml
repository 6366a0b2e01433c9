/* Pack and knowledge acceptance across power cuts (SPEC §8.4-§8.5, issue 14 §2), as
 * firmware/core/hm_persist.c and hm_agent.c implement it.
 *
 * What is modelled
 *   - the NV store of hm_persist: two erase pages of SLOTS slots; a save appends a record
 *     (epoch one above the newest) in the next blank slot of the active page, or erases
 *     the other page and writes its first slot; mount keeps the valid record with the
 *     highest epoch and continues after the last slot that is not blank;
 *   - a power cut at every NV program and erase: a torn program leaves a slot that fails
 *     its CRC, a torn erase leaves a page of garbage; then the device boots again;
 *   - boot (hm_persist_boot): boot = saved boot + 1, saved before it is used;
 *   - memory packs: seq = (boot, n); the host accepts a pack whose seq is above its head
 *     and whose prev is the head (§8.5); the device signs with prev = its last signed pack
 *     or the host's head from HELLO_ACK;
 *   - knowledge: the host offers any version it ever signed (a replay of an old one
 *     included) and, to model a second signer or a host bug, a different pack with a seq
 *     already used; the device accepts seq above its head, answers the same pack as a
 *     duplicate, refuses the rest, and saves its new head before it answers.
 *
 * Safety (assertions): no two packs the device signs share a seq (no fork); the host's
 * chain only grows by extension; the device never accepts a knowledge version older
 * than, equal to but different from, or forking from one it accepted before, and after
 * every cut its head is at least every version it reported accepted.
 *
 * Planted bugs: BUG_BOOT_AFTER_USE (the boot counter saved after the boot signs a pack),
 * BUG_ANSWER_BEFORE_SAVE (the knowledge head saved after KNOWLEDGE_RESULT), BUG_MOUNT_FIRST
 * (mount takes the first valid record, not the newest). */

#ifndef SLOTS
#define SLOTS 2      /* slots per page */
#endif
#ifndef CUTS
#define CUTS 3       /* power cuts */
#endif
#ifndef LIVES_PACKS
#define LIVES_PACKS 2 /* packs a boot may sign */
#endif
#ifndef KVERSIONS
#define KVERSIONS 3  /* knowledge versions the host signs */
#endif
#ifndef OFFERS
#define OFFERS 4     /* knowledge offers in all */
#endif

#define BLANK 0
#define TORN 255
#define MAXBOOT (CUTS + 2)

/* ---- flash: epoch (BLANK, TORN or 1..), and the state a record holds --------------- */
byte ep[2 * SLOTS];
byte fboot[2 * SLOTS];
byte fkseq[2 * SLOTS];
byte fkfork[2 * SLOTS];   /* which of two packs with the knowledge seq (0 or 1) */

/* ---- the device's RAM (lost at a cut) ---------------------------------------------- */
byte epoch, next, apage;
byte boot, kseq, kfork;   /* the mounted state */
byte nsigned;             /* packs signed in this boot */

/* ---- ground truth ------------------------------------------------------------------- */
bool signed_seq[MAXBOOT * LIVES_PACKS + LIVES_PACKS + 1];
byte acked_kseq = 0;      /* highest version the device reported accepted */
byte acked_kfork = 0;
byte host_head = 0;       /* the host's chain head (as an index into signed seqs) */
byte cuts = 0;
byte offers = 0;
bool cut = false;         /* the current operation was cut: this life ends */

/* one NV operation, maybe cut: a cut tears it and ends the life */
inline program(slot, b, k, f) {
    if
    :: cuts < CUTS -> cuts++; ep[(slot)] = TORN; cut = true
    :: true -> ep[(slot)] = epoch + 1; fboot[(slot)] = b; fkseq[(slot)] = k; fkfork[(slot)] = f
    fi
}

inline erase(page) {
    i = 0;
    if
    :: cuts < CUTS -> cuts++; cut = true;
        do   /* a torn erase: garbage */
        :: i < SLOTS -> ep[(page) * SLOTS + i] = TORN; i++
        :: else -> break
        od
    :: true ->
        do
        :: i < SLOTS -> ep[(page) * SLOTS + i] = BLANK; fboot[(page) * SLOTS + i] = 0;
                        fkseq[(page) * SLOTS + i] = 0; fkfork[(page) * SLOTS + i] = 0; i++
        :: else -> break
        od
    fi;
    i = 0
}

/* hm_persist_save: append, or erase the other page and start it */
inline save(b, k, f) {
    if
    :: next < SLOTS -> program(apage * SLOTS + next, b, k, f);
        if
        :: !cut -> next++; epoch++
        :: else
        fi
    :: next >= SLOTS ->
        erase(1 - apage);
        if
        :: !cut -> program((1 - apage) * SLOTS, b, k, f);
            if
            :: !cut -> apage = 1 - apage; next = 1; epoch++
            :: else
            fi
        :: else
        fi
    fi
}

/* hm_persist_mount: the valid record with the highest epoch; continue after the last
   slot of its page that is not blank */
inline mount() {
    epoch = 0; boot = 0; kseq = 0; kfork = 0; apage = 0; next = 0; i = 0;
    do
    :: i < 2 * SLOTS ->
        if
#ifdef BUG_MOUNT_FIRST
        :: ep[i] != BLANK && ep[i] != TORN && epoch == 0 ->
#else
        :: ep[i] != BLANK && ep[i] != TORN && ep[i] > epoch ->
#endif
            epoch = ep[i]; boot = fboot[i]; kseq = fkseq[i]; kfork = fkfork[i]; apage = i / SLOTS
        :: else
        fi;
        i++
    :: else -> break
    od;
    i = 0;
    do
    :: i < SLOTS ->
        if
        :: ep[apage * SLOTS + i] != BLANK -> next = i + 1
        :: else
        fi;
        i++
    :: else -> break
    od;
    i = 0
}

inline sign_pack() {
    /* seq (boot, n) as one number: boot * LIVES_PACKS + n */
    s = boot * LIVES_PACKS + nsigned + 1;
    assert(!signed_seq[s]);          /* no fork: a seq is signed once */
    signed_seq[s] = true;
    nsigned++;
    /* the host: above its head and linked to it (the device links to the head it was
       given, so an accepted pack always extends) */
    if
    :: s > host_head -> host_head = s
    :: else -> skip                  /* refused: rollback */
    fi
}

active proctype Device() {
    byte i, s, k, f;
restart:
    cut = false; nsigned = 0;
    mount();
    /* the agreed invariant: nothing reported accepted is lost */
    assert(kseq > acked_kseq || (kseq == acked_kseq && kfork == acked_kfork));
#ifdef BUG_BOOT_AFTER_USE
    boot++;
    if
    :: nsigned < LIVES_PACKS && boot < MAXBOOT - 1 -> sign_pack()
    :: true
    fi;
    save(boot, kseq, kfork);
#else
    boot++;
    save(boot, kseq, kfork);
#endif
    if
    :: cut -> goto restart
    :: else
    fi;
    do
    /* sign a pack of this boot */
    :: nsigned < LIVES_PACKS && boot < MAXBOOT - 1 -> sign_pack()
    /* a knowledge offer: any version the host signed, or the twin of one */
    :: offers < OFFERS ->
        offers++;
        if
        :: k = 1
        :: k = 2
        :: KVERSIONS >= 3 -> k = 3
        fi;
        if
        :: f = 0
        :: f = 1                      /* a second pack with this seq */
        fi;
        if
        :: k > kseq ->
#ifdef BUG_ANSWER_BEFORE_SAVE
            acked_kseq = k; acked_kfork = f;
            save(boot, k, f);
            if
            :: cut -> goto restart
            :: else
            fi;
            kseq = k; kfork = f
#else
            save(boot, k, f);
            if
            :: cut -> goto restart
            :: else
            fi;
            /* the property: what is accepted never goes back nor forks */
            assert(k > acked_kseq);
            kseq = k; kfork = f;
            acked_kseq = k; acked_kfork = f   /* KNOWLEDGE_RESULT accepted */
#endif
        :: k == kseq && f == kfork -> skip    /* duplicate */
        :: k < kseq || (k == kseq && f != kfork) -> skip   /* refused: rollback or fork */
        fi;
        k = 0; f = 0
    /* a cut between operations (the ring is lost, the flash stays) */
    :: cuts < CUTS -> cuts++; goto restart
    :: else -> break
    od
}
