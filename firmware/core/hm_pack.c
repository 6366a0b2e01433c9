/* hm_pack — memory packer and knowledge verifier. See hm_pack.h for the contract. */
#include "hm_pack.h"

#include <string.h>

#include "hm_cbor.h"
#include "hm_record.h"

#define COSE_SIGN1_TAG 18u
#define ALG_EDDSA_N 7u       /* -8 = -1 - 7 */
#define HDR_ALG 1u
#define HDR_KID 4u
#define PROTECTED_SIZE 13u   /* a2 01 27 04 48 <kid> */
#define COSE_HEAD 17u        /* d2 84 4d <protected> a0 */
#define SIG_HEAD 27u         /* 84 6a "Signature1" 4d <protected> 40 */
#define SIG_TAIL 66u         /* 58 40 <signature> */
#define SIG_SHIFT (SIG_HEAD - COSE_HEAD) /* 10 */

static const uint8_t signature1[10] = {'S', 'i', 'g', 'n', 'a', 't', 'u', 'r', 'e', '1'};

const char *hm_pack_status_name(unsigned status) {
    static const char *const names[] = {"accepted", "duplicate", "refused", "deferred"};
    return status < 4 ? names[status] : "?";
}

const char *hm_pack_reason_name(unsigned reason) {
    static const char *const names[] = {
        "none",         "malformed",    "too-large", "unsupported-alg",
        "unknown-key",  "bad-signature", "wrong-signer", "rollback",
        "replay",       "broken-chain", "bad-record", "storage"};
    return reason < sizeof names / sizeof names[0] ? names[reason] : "?";
}

#define head_size hm_cbor_head_size

/* A byte string head alone (its content follows elsewhere): the unsigned-integer
 * head of the same argument with major type 2. Returns its size. */
static size_t put_bstr_head(uint8_t *dst, size_t cap, uint64_t n) {
    hm_cbor_w w;
    hm_cbor_w_init(&w, dst, cap);
    hm_cbor_put_uint(&w, n);
    if (w.err) return 0;
    dst[0] |= 0x40u;
    return w.len;
}

/* Last byte first, shifting by a constant: a variable 64-bit shift is a libgcc call
 * on rv32. */
/*@ requires \valid(p + (0 .. 7));
    assigns p[0 .. 7]; */
static void put_be64(uint8_t *p, uint64_t v) {
    /*@ loop invariant i <= 8;
        loop assigns i, v, p[0 .. 7]; */
    for (unsigned i = 8; i-- > 0; v >>= 8) p[i] = (uint8_t)v;
}

static void protected_header(uint8_t out[PROTECTED_SIZE], const uint8_t kid[HM_KID_SIZE]) {
    out[0] = 0xA2; /* map(2) */
    out[1] = 0x01; /* 1: alg */
    out[2] = 0x27; /* -8: EdDSA */
    out[3] = 0x04; /* 4: kid */
    out[4] = 0x48; /* bstr(8) */
    memcpy(out + 5, kid, HM_KID_SIZE);
}

/* ---- the packer ------------------------------------------------------------------ */

void hm_pack_init(hm_packer *p, const uint8_t device_id[HM_ID_SIZE], uint32_t boot,
                  const uint8_t seed[HM_SEED_SIZE], const uint8_t pub[HM_PUBLIC_KEY_SIZE],
                  const uint8_t kid[HM_KID_SIZE]) {
    memset(p, 0, sizeof *p);
    memcpy(p->seed, seed, HM_SEED_SIZE);
    memcpy(p->pub, pub, HM_PUBLIC_KEY_SIZE);
    memcpy(p->device_id, device_id, HM_ID_SIZE);
    memcpy(p->kid, kid, HM_KID_SIZE);
    p->boot = boot;
}

void hm_pack_wipe(hm_packer *p) {
    volatile uint8_t *b = (volatile uint8_t *)p;
    for (size_t i = 0; i < sizeof *p; i++) b[i] = 0;
}

const uint8_t *hm_pack_prev(const hm_packer *p) {
    return p->npending ? p->pending[p->npending - 1].hash : p->host_hash;
}

uint64_t hm_pack_next_seq(const hm_packer *p) {
    uint64_t top = p->last_seq > p->host_seq ? p->last_seq : p->host_seq;
    uint64_t first = (uint64_t)p->boot << 32 | 1u;
    if (top == UINT64_MAX) return 0;
    return top + 1 > first ? top + 1 : first;
}

/* Drop pending[from ..]: the host cannot hold them; their records become packable. */
static void abandon_from(hm_packer *p, hm_ring *ring, uint32_t from) {
    for (uint32_t j = from; j < p->npending && j < HM_PACK_PENDING; j++) {
        p->counters.records_returned += hm_ring_unpin_pack(ring, p->pending[j].tag);
        p->counters.abandoned++;
        memset(&p->pending[j], 0, sizeof p->pending[j]);
    }
    if (p->npending > from) p->npending = from;
}

/* pending[0 .. n) are held by the host: free their records, close the gap. */
static void release_first(hm_packer *p, hm_ring *ring, uint32_t n) {
    if (n == 0) return;
    for (uint32_t i = 0; i < n; i++)
        p->counters.records_released += hm_ring_release_pack(ring, p->pending[i].tag);
    memmove(&p->pending[0], &p->pending[n], (p->npending - n) * sizeof p->pending[0]);
    memset(&p->pending[p->npending - n], 0, n * sizeof p->pending[0]);
    p->npending -= n;
}

/* Kept out of line and under its own name under link-time optimisation:
 * tools/bench_boards.py counts the instructions to the handshake up to this
 * function's first instruction. */
#if defined(__clang__)
__attribute__((noinline)) /* clang has no noclone (the fuzz build) */
#elif defined(__GNUC__)
__attribute__((noinline, noclone))
#endif
void hm_pack_set_head(hm_packer *p, hm_ring *ring, uint64_t pack_seq,
                      const uint8_t pack_hash[HM_HASH_SIZE]) {
    uint32_t held = 0;
    while (held < p->npending && p->pending[held].seq <= pack_seq) held++;
    p->counters.head_acked += held;
    release_first(p, ring, held);
    abandon_from(p, ring, 0);
    p->host_seq = pack_seq;
    memcpy(p->host_hash, pack_hash, HM_HASH_SIZE);
}

hm_pack_err hm_pack_result(hm_packer *p, hm_ring *ring, uint64_t seq, unsigned status,
                           unsigned reason) {
    uint32_t i = 0;
    if (status > HM_PACK_DEFERRED) return HM_PACK_E_ARG;
    while (i < p->npending && p->pending[i].seq != seq) i++;
    if (i == p->npending) return HM_PACK_E_UNKNOWN;
    if (status == HM_PACK_ACCEPTED || status == HM_PACK_DUPLICATE) {
        p->host_seq = seq;
        memcpy(p->host_hash, p->pending[i].hash, HM_HASH_SIZE);
        p->counters.acked++;
        if (status == HM_PACK_DUPLICATE) p->counters.duplicates++;
        release_first(p, ring, i + 1);
    } else {
        if (status == HM_PACK_REFUSED) p->counters.refused++;
        else p->counters.deferred++;
        p->counters.last_reason = (uint8_t)(reason <= 255u ? reason : 255u);
        abandon_from(p, ring, i + 1); /* they link to pending[i]: no host can take them */
        p->counters.records_returned += hm_ring_unpin_pack(ring, p->pending[i].tag);
        memset(&p->pending[i], 0, sizeof p->pending[i]);
        p->npending = i;
    }
    return HM_PACK_OK;
}

int hm_pack_resume(hm_packer *p, hm_ring *ring, const uint8_t seed[HM_SEED_SIZE],
                   const uint8_t pub[HM_PUBLIC_KEY_SIZE], const uint8_t kid[HM_KID_SIZE]) {
    uint32_t i, k, n = p->npending, count[HM_PACK_PENDING] = {0};
    uint64_t below = p->host_seq;
    if (n > HM_PACK_PENDING || p->boot != ring->boot ||
        memcmp(p->device_id, ring->device_id, HM_ID_SIZE) != 0)
        return -1;
    if (n < HM_PACK_PENDING) { /* an interrupted build: pinned, never counted or offered */
        (void)hm_ring_unpin_pack(ring, p->pending[n].tag);
        memset(&p->pending[n], 0, sizeof p->pending[n]);
    }
    for (k = 0; k < ring->capacity; k++) { /* P4: each pin is a pending pack's */
        const hm_ring_record *rec = &ring->rec[k];
        if (rec->seq == 0 || rec->pack == 0) continue;
        for (i = 0; i < n && p->pending[i].tag != rec->pack; i++) {
        }
        if (i == n) return -1;
        count[i]++;
    }
    for (i = 0; i < n; i++) { /* P1; a repeated tag leaves the second pack no records */
        const hm_pack_pending *e = &p->pending[i];
        if (count[i] == 0 || count[i] != e->records || e->seq <= below || e->seq > p->last_seq)
            return -1;
        below = e->seq;
    }
    memcpy(p->seed, seed, HM_SEED_SIZE);
    memcpy(p->pub, pub, HM_PUBLIC_KEY_SIZE);
    memcpy(p->kid, kid, HM_KID_SIZE);
    return 0;
}

static uint32_t new_tag(hm_packer *p) {
    for (;;) {
        uint32_t tag = ++p->next_tag, i;
        if (tag == 0) continue;
        for (i = 0; i < p->npending && p->pending[i].tag != tag; i++) {
        }
        if (i == p->npending) return tag;
    }
}

/* The packable records the pack will carry are the first `n` that are not
 * unsendable, in capture order: this picks the next one after `after`. */
static int next_sendable(const hm_ring *ring, uint32_t after, uint32_t *skipped) {
    int idx;
    while ((idx = hm_ring_next(ring, after, HM_RING_SEL_PACKABLE)) >= 0) {
        const hm_ring_record *rec = &ring->rec[idx];
        if (hm_utf8_valid(hm_ring_source(ring, rec), rec->source_len)) return idx;
        after = rec->seq;
        if (skipped) (*skipped)++;
    }
    return -1;
}

hm_pack_err hm_pack_build(hm_packer *p, hm_ring *ring, uint64_t created_ms, uint8_t *out,
                          size_t cap, size_t *len, uint64_t *seq_out) {
    uint8_t prot[PROTECTED_SIZE], pid[HM_PACK_ID_SIZE], link[HM_HASH_SIZE];
    uint8_t sig[HM_SIGNATURE_SIZE];
    hm_pack_pending *e;
    hm_cbor_w w;
    uint64_t seq;
    size_t fixed, records = 0, payload, hl, total;
    uint32_t n = 0, after = 0, skipped = 0;
    int idx, full = 0;

    if (!out || !len || !seq_out) return HM_PACK_E_ARG;
    if (memcmp(ring->device_id, p->device_id, HM_ID_SIZE) != 0 || ring->boot != p->boot)
        return HM_PACK_E_DEVICE;
    if (cap > HM_PACK_MAX) cap = HM_PACK_MAX;
    seq = hm_pack_next_seq(p);
    if (seq == 0) return HM_PACK_E_EXHAUSTED;
    if (p->npending == HM_PACK_PENDING) return HM_PACK_E_BUSY;

    /* Sizing: every head is known in advance, so the pack is written once. */
    fixed = 1 + 1 + (1 + HM_PACK_ID_SIZE) + (1 + HM_ID_SIZE) + head_size(seq) +
            (2 + HM_HASH_SIZE) + head_size(created_ms);
    while ((idx = next_sendable(ring, after, &skipped)) >= 0) {
        const hm_ring_record *rec = &ring->rec[idx];
        size_t rs = hm_record_size(rec), pl = fixed + head_size(n + 1u) + records + rs;
        after = rec->seq;
        if (full || COSE_HEAD + head_size(pl) + pl + SIG_TAIL > cap) {
            full = 1; /* a prefix in capture order: keep counting the unsendable ones */
            continue;
        }
        records += rs;
        n++;
    }
    p->counters.unsendable = skipped;
    if (n == 0) return full ? HM_PACK_E_SPACE : HM_PACK_NOTHING;
    payload = fixed + head_size(n) + records;
    hl = head_size(payload);
    total = COSE_HEAD + hl + payload + SIG_TAIL;

    /* The payload, once, at out + SIG_HEAD + hl. */
    put_be64(pid + HM_ID_SIZE, seq);
    memcpy(pid, p->device_id, HM_ID_SIZE);
    memcpy(link, hm_pack_prev(p), HM_HASH_SIZE);
    e = &p->pending[p->npending];
    e->tag = new_tag(p);
    hm_cbor_w_init(&w, out, SIG_HEAD + hl + payload);
    w.len = SIG_HEAD + hl;
    hm_cbor_put_array(&w, 7);
    hm_cbor_put_uint(&w, HM_PACK_KIND_MEMORY);
    hm_cbor_put_bstr(&w, pid, sizeof pid);
    hm_cbor_put_bstr(&w, p->device_id, HM_ID_SIZE);
    hm_cbor_put_uint(&w, seq);
    hm_cbor_put_bstr(&w, link, HM_HASH_SIZE);
    hm_cbor_put_uint(&w, created_ms);
    hm_cbor_put_array(&w, n);
    after = 0;
    for (uint32_t k = 0; k < n; k++) {
        uint8_t hash[HM_HASH_SIZE];
        idx = next_sendable(ring, after, NULL);
        after = ring->rec[idx].seq;
        if (hm_record_encode(&w, ring, &ring->rec[idx], link, hash) != HM_CBOR_OK ||
            hm_ring_set_chain(ring, idx, hash, link) != HM_RING_OK ||
            hm_ring_pin(ring, idx, e->tag) != HM_RING_OK)
            break;
        memcpy(link, hash, HM_HASH_SIZE);
        e->records++;
    }
    if (e->records != n || w.err || w.len != SIG_HEAD + hl + payload) {
        /* cannot happen (the sizes above are exact); undo the pins, sign nothing */
        (void)hm_ring_unpin_pack(ring, e->tag);
        memset(e, 0, sizeof *e);
        return HM_PACK_E_ARG;
    }

    /* Sig_structure = out[0 .. SIG_HEAD + hl + payload), signed as it stands. */
    protected_header(prot, p->kid);
    out[0] = 0x84;
    out[1] = 0x6A;
    memcpy(out + 2, signature1, sizeof signature1);
    out[12] = 0x40 | PROTECTED_SIZE;
    memcpy(out + 13, prot, PROTECTED_SIZE);
    out[26] = 0x40;
    (void)put_bstr_head(out + SIG_HEAD, hl, payload);
    hm_sign(sig, p->seed, p->pub, out, SIG_HEAD + hl + payload);

    /* COSE_Sign1 around it: the payload bstr moves down 10 bytes (the one memmove). */
    memmove(out + COSE_HEAD, out + SIG_HEAD, hl + payload);
    out[0] = 0xD2;
    out[1] = 0x84;
    out[2] = 0x40 | PROTECTED_SIZE;
    memcpy(out + 3, prot, PROTECTED_SIZE);
    out[16] = 0xA0;
    out[COSE_HEAD + hl + payload] = 0x58;
    out[COSE_HEAD + hl + payload + 1] = HM_SIGNATURE_SIZE;
    memcpy(out + COSE_HEAD + hl + payload + 2, sig, HM_SIGNATURE_SIZE);

    e->seq = seq;
    hm_hash_sha256(e->hash, out, total);
    p->last_seq = seq;
    p->npending++; /* the commit: a reset before it leaves an interrupted build (resume) */
    p->counters.built++;
    p->counters.records_sent += n;
    *len = total;
    *seq_out = seq;
    return HM_PACK_OK;
}

/* ---- the knowledge verifier ---------------------------------------------------- */

void hm_knowledge_init(hm_knowledge *k, const hm_host_key *key) {
    memset(k, 0, sizeof *k);
    k->key = key;
}

void hm_knowledge_set_head(hm_knowledge *k, uint64_t seq, const uint8_t hash[HM_HASH_SIZE]) {
    k->seq = seq;
    memcpy(k->hash, hash, HM_HASH_SIZE);
}

/* one call, not an inlined copy at each of the 15 exits (not for Frama-C, which takes
 * no attribute between a contract and its function) */
#if defined(__GNUC__) && !defined(__FRAMAC__)
__attribute__((noinline))
#endif
/*@ requires \valid(k) && \valid(reason);
    assigns k->counters.refused, k->counters.last_reason, *reason;
    ensures \result == HM_PACK_REFUSED; */
static hm_pack_status refuse(hm_knowledge *k, hm_pack_reason why, hm_pack_reason *reason) {
    k->counters.refused++;
    k->counters.last_reason = (uint8_t)why;
    *reason = why;
    return HM_PACK_REFUSED;
}

/* Step 4 to 6: the protected header. Returns NONE, UNSUPPORTED_ALG or MALFORMED and
 * the kid. */
/*@ requires \valid_read(prot + (0 .. n - 1)) && \valid(kid);
    assigns *kid;
    ensures kid_in_header: *kid == \null || (prot <= *kid && *kid + HM_KID_SIZE <= prot + n);
    ensures \result == HM_REASON_NONE ==> *kid != \null; */
static hm_pack_reason check_protected(const uint8_t *prot, size_t n, const uint8_t **kid) {
    hm_cbor_r r;
    uint64_t pairs, v;
    int alg_ok = 0, extra = 0;
    *kid = NULL;
    if (hm_cbor_check(prot, n) != HM_CBOR_OK) return HM_REASON_MALFORMED;
    hm_cbor_r_init(&r, prot, n);
    if (hm_cbor_get_map(&r, &pairs) != HM_CBOR_OK) return HM_REASON_MALFORMED;
    /*@ loop invariant r.p == prot && r.len == n;
        loop invariant kid_in_header: *kid == \null || (prot <= *kid && *kid + HM_KID_SIZE <= prot + n);
        loop assigns i, r, v, alg_ok, extra, *kid; */
    for (size_t i = 0; i < (size_t)pairs; i++) { /* pairs <= n / 2: fits */
        int key_type = hm_cbor_peek(&r), neg, label = -1;
        if (key_type == 0) {
            (void)hm_cbor_get_uint(&r, UINT64_MAX, &v);
            label = v == HDR_ALG ? 1 : v == HDR_KID ? 4 : -1;
        } else {
            (void)hm_cbor_skip(&r); /* negative, byte or text label */
        }
        if (label == 1) {
            if (hm_cbor_peek(&r) == 1 && hm_cbor_get_int(&r, &neg, &v) == HM_CBOR_OK)
                alg_ok = v == ALG_EDDSA_N;
            else
                (void)hm_cbor_skip(&r);
        } else if (label == 4 && hm_cbor_peek(&r) == 2) {
            const uint8_t *p;
            size_t len;
            (void)hm_cbor_get_bstr(&r, 0, SIZE_MAX, &p, &len);
            if (len == HM_KID_SIZE) *kid = p;
            else extra = 1;
        } else {
            extra = 1; /* another label, or kid not a byte string */
            (void)hm_cbor_skip(&r);
        }
    }
    if (!alg_ok) return HM_REASON_UNSUPPORTED_ALG;
    if (extra || !*kid) return HM_REASON_MALFORMED;
    return HM_REASON_NONE;
}

/* Step 8 in place (see hm_pack.h). pack[0 .. len) is d2 84 | P | a0 | L | 58 40 sig
 * with P the protected bstr (plen bytes) and L the payload bstr (llen bytes). */
/*@ requires pack_room: \valid(pack + (0 .. plen + llen + 68)) &&
                        \initialized(pack + (0 .. plen + llen + 68));
    requires \valid_read(pub + (0 .. HM_PUBLIC_KEY_SIZE - 1));
    requires pack_apart: \separated(pub + (0 .. HM_PUBLIC_KEY_SIZE - 1),
                                    pack + (0 .. plen + llen + 68));
    assigns pack[0 .. plen + llen + 68]; */
static int verify_in_place(uint8_t *pack, size_t plen, size_t llen,
                           const uint8_t pub[HM_PUBLIC_KEY_SIZE]) {
    uint8_t sig[HM_SIGNATURE_SIZE];
    size_t sig_at = 3 + plen + llen;
    int ok;
#ifdef HM_PLANT_PACK /* planted bug for tools/verify_c.py (WP must not prove the copy) */
    memcpy(sig, pack + sig_at + 3, HM_SIGNATURE_SIZE); /* one byte late: past the pack */
#else
    memcpy(sig, pack + sig_at + 2, HM_SIGNATURE_SIZE);
#endif
    memmove(pack + 3 + plen + SIG_SHIFT, pack + 3 + plen, llen); /* into the signature */
    memmove(pack + 2 + SIG_SHIFT, pack + 2, plen);
    pack[0] = 0x84;
    pack[1] = 0x6A;
    memcpy(pack + 2, signature1, sizeof signature1);
    pack[12 + plen] = 0x40;
    ok = hm_verify(sig, pub, pack, 13 + plen + llen) == 0;
    memmove(pack + 2, pack + 2 + SIG_SHIFT, plen);
    pack[2 + plen] = 0xA0;
    memmove(pack + 3 + plen, pack + 3 + plen + SIG_SHIFT, llen);
    pack[0] = 0xD2;
    pack[1] = 0x84;
    pack[sig_at] = 0x58;
    pack[sig_at + 1] = HM_SIGNATURE_SIZE;
    memcpy(pack + sig_at + 2, sig, HM_SIGNATURE_SIZE);
    return ok;
}

/* One item [triple_id, subject, predicate, object, confidence]; *fits = 0 if the
 * store could not hold it. With `into`, copies it. */
/*@ requires \valid(r) && \valid_read(r->p + (0 .. r->len - 1)) && \valid(fits);
    requires \separated(r, fits);
    requires into == \null ||
             (\valid(into) && \separated(into, r, fits, r->p + (0 .. r->len - 1)));
    assigns r->pos, r->err, *fits, *into; */
static int read_item(hm_cbor_r *r, hm_knowledge_item *into, int *fits) {
    const uint8_t *tid, *s[3];
    size_t n, sl[3];
    uint64_t conf;
    if (hm_cbor_expect_array(r, 5) || hm_cbor_get_bstr(r, 8, 8, &tid, &n)) return 0;
    /*@ loop invariant i <= 3 && \initialized(&tid) && \valid_read(tid + (0 .. 7));
        loop invariant i > 0 ==> \initialized(&s[0]) && \initialized(&sl[0]) &&
                                 \valid_read(s[0] + (0 .. sl[0] - 1));
        loop invariant i > 1 ==> \initialized(&s[1]) && \initialized(&sl[1]) &&
                                 \valid_read(s[1] + (0 .. sl[1] - 1));
        loop invariant i > 2 ==> \initialized(&s[2]) && \initialized(&sl[2]) &&
                                 \valid_read(s[2] + (0 .. sl[2] - 1));
        loop assigns i, s[0 .. 2], sl[0 .. 2], *fits, r->pos, r->err; */
    for (unsigned i = 0; i < 3; i++) {
        if (hm_cbor_get_tstr(r, SIZE_MAX, &s[i], &sl[i])) return 0;
        if (sl[i] > HM_KNOWLEDGE_TEXT) *fits = 0;
    }
    if (hm_cbor_get_uint(r, HM_Q_ONE, &conf)) return 0;
    if (into) {
        memcpy(into->triple_id, tid, HM_TRIPLE_ID_SIZE);
        into->confidence = (uint32_t)conf;
        into->subject_len = (uint8_t)sl[0];
        into->predicate_len = (uint8_t)sl[1];
        into->object_len = (uint8_t)sl[2];
        memcpy(into->subject, s[0], sl[0]);
        memcpy(into->predicate, s[1], sl[1]);
        memcpy(into->object, s[2], sl[2]);
    }
    return 1;
}

/* The contract of the pack path (tools/verify_c.py eva_pack: EVA, then WP over this
 * function and the helpers above): any writable, initialised pack, a store separate
 * from it, with or without a host key and a reason. */
/*@ requires \valid(k) && \valid(pack + (0 .. len - 1)) && \initialized(pack + (0 .. len - 1));
    requires k->key == \null || \valid_read(k->key);
    requires reason == \null || \valid(reason);
    requires \separated(k, pack + (0 .. len - 1));
    requires k->key == \null || \separated(k->key, k, pack + (0 .. len - 1));
    requires reason == \null || \separated(reason, k, pack + (0 .. len - 1)); */
hm_pack_status hm_knowledge_accept(hm_knowledge *k, uint8_t *pack, size_t len,
                                   hm_pack_reason *reason) {
    hm_pack_reason why, dummy;
    hm_cbor_r r, items;
    uint64_t v, pairs, seq, count;
    const uint8_t *prot, *payload, *sig, *kid, *signer, *pid = NULL, *prev;
    size_t prot_n, payload_n, sig_n, n, pid_n = 0;
    uint8_t want_pid[HM_PACK_ID_SIZE], hash[HM_HASH_SIZE];
    int fits = 1;

    if (!reason) reason = &dummy;
    *reason = HM_REASON_NONE;
    memset(k->last_pack_id, 0, HM_PACK_ID_SIZE);
    /* 1 */
    if (len > HM_PACK_MAX) return refuse(k, HM_REASON_TOO_LARGE, reason);
    /* 2, 3 */
    if (hm_cbor_check(pack, len) != HM_CBOR_OK) return refuse(k, HM_REASON_MALFORMED, reason);
    hm_cbor_r_init(&r, pack, len);
    if (hm_cbor_get_tag(&r, &v) || v != COSE_SIGN1_TAG || hm_cbor_expect_array(&r, 4) ||
        hm_cbor_get_bstr(&r, 0, SIZE_MAX, &prot, &prot_n) || hm_cbor_get_map(&r, &pairs) ||
        pairs != 0 || hm_cbor_get_bstr(&r, 0, SIZE_MAX, &payload, &payload_n) ||
        hm_cbor_get_bstr(&r, 0, SIZE_MAX, &sig, &sig_n))
        return refuse(k, HM_REASON_MALFORMED, reason);
    /* 4, 5, 6 */
    why = check_protected(prot, prot_n, &kid);
    if (why != HM_REASON_NONE) return refuse(k, why, reason);
    /* 7 */
    if (!k->key || memcmp(kid, k->key->kid, HM_KID_SIZE) != 0)
        return refuse(k, HM_REASON_UNKNOWN_KEY, reason);
    /* 8: pack = d2 84 | protected bstr (plen) | a0 | payload bstr (llen) | 58 40 sig */
    {
        size_t plen = (size_t)(prot - pack) + prot_n - 2;
        size_t llen = (size_t)(payload - pack) + payload_n - 3 - plen;
        if (sig_n != HM_SIGNATURE_SIZE || !verify_in_place(pack, plen, llen, k->key->public_key))
            return refuse(k, HM_REASON_BAD_SIGNATURE, reason);
    }
    /* 9: the payload (signed bytes only from here on) */
    hm_cbor_r_init(&r, payload, payload_n);
    if (hm_cbor_check(payload, payload_n) || hm_cbor_expect_array(&r, 7) ||
        hm_cbor_get_uint(&r, UINT64_MAX, &v) || v != HM_PACK_KIND_KNOWLEDGE)
        return refuse(k, HM_REASON_MALFORMED, reason);
    if (hm_cbor_peek(&r) == 2) (void)hm_cbor_get_bstr(&r, 0, SIZE_MAX, &pid, &pid_n);
    else (void)hm_cbor_skip(&r); /* any other item: pack_id cannot match */
    if (hm_cbor_get_bstr(&r, HM_ID_SIZE, HM_ID_SIZE, &signer, &n) ||
        hm_cbor_get_uint(&r, UINT64_MAX, &seq) || seq == 0)
        return refuse(k, HM_REASON_MALFORMED, reason);
    memcpy(want_pid, signer, HM_ID_SIZE);
    put_be64(want_pid + HM_ID_SIZE, seq);
    if (!pid || pid_n != HM_PACK_ID_SIZE || memcmp(pid, want_pid, HM_PACK_ID_SIZE) != 0 ||
        hm_cbor_get_bstr(&r, HM_HASH_SIZE, HM_HASH_SIZE, &prev, &n) ||
        hm_cbor_get_uint(&r, UINT64_MAX, &v) || hm_cbor_get_array(&r, &count))
        return refuse(k, HM_REASON_MALFORMED, reason);
    items = r;
    /* count <= the bytes left (hm_cbor_get_array): it fits a size_t */
    /*@ loop invariant r.p == payload && r.len == payload_n;
        loop assigns i, r, fits; */
    for (size_t i = 0; i < (size_t)count; i++)
        if (!read_item(&r, NULL, &fits)) return refuse(k, HM_REASON_MALFORMED, reason);
    if (hm_cbor_end(&r)) return refuse(k, HM_REASON_MALFORMED, reason);
    memcpy(k->last_pack_id, want_pid, HM_PACK_ID_SIZE);
    /* 10 */
    if (memcmp(signer, k->key->host_id, HM_ID_SIZE) != 0)
        return refuse(k, HM_REASON_WRONG_SIGNER, reason);
    /* 11, 12 (13 is skipped: require_chain false; 14 is for memory packs) */
    hm_hash_sha256(hash, pack, len);
    if (k->seq) {
        if (seq < k->seq) return refuse(k, HM_REASON_ROLLBACK, reason);
        if (seq == k->seq) {
            if (memcmp(hash, k->hash, HM_HASH_SIZE) != 0)
                return refuse(k, HM_REASON_REPLAY, reason);
            k->counters.duplicates++;
            return HM_PACK_DUPLICATE;
        }
    }
    /* keep it, all or nothing */
    if (count > HM_KNOWLEDGE_CAPACITY || !fits) {
        k->counters.deferred++;
        k->counters.last_reason = HM_REASON_STORAGE;
        *reason = HM_REASON_STORAGE;
        return HM_PACK_DEFERRED;
    }
    /*@ loop invariant items.p == payload && items.len == payload_n && i <= count;
        loop assigns i, items, fits, k->items[0 .. HM_KNOWLEDGE_CAPACITY - 1]; */
    for (size_t i = 0; i < (size_t)count; i++) (void)read_item(&items, &k->items[i], &fits);
    //@ split count;
    if (count < HM_KNOWLEDGE_CAPACITY)
        memset(&k->items[count], 0, (HM_KNOWLEDGE_CAPACITY - (size_t)count) * sizeof k->items[0]);
    k->count = (uint32_t)count;
    k->seq = seq;
    memcpy(k->hash, hash, HM_HASH_SIZE);
    k->counters.accepted++;
    return HM_PACK_ACCEPTED;
}
