/* libFuzzer target: knowledge pack verification on a device (hm_pack: hm_knowledge).
 *
 * The trusted host key is the fixed test key of protocol/vectors/packs.json: seed =
 * SHA-256("hirmem test key: host a1a2a3a4a5a6a7a8") (hirmem.protocol.keys.derive_test_key),
 * host id a1a2a3a4a5a6a7a8. Anyone can recompute it; it is for tests only.
 *
 * A. The input is a pushed pack (the seeds are the packs of packs.json). It is
 *    verified by a fresh store and by a store holding the vectors' seq-5 pack as its
 *    head, each time in a writable copy of exactly the input's size, twice in a row.
 *    Must never crash; the pack bytes are as they were on return; status and reason
 *    agree (refused: 1..10, deferred: storage, else none); the store keeps K1..K3 of
 *    hm_pack.h; a second call after an acceptance is a duplicate. Nobody but the
 *    host key signs, so an accepted (or duplicate) pack is exactly one of the three
 *    packs of the vectors it signed: its SHA-256 must be one of theirs, and the
 *    store must then hold that pack's seq.
 * B. When the input starts like a payload (an array of 7, 0x87), it is also signed
 *    here with the test host seed into a COSE_Sign1 as the host would build it, so
 *    that everything after the signature check (payload schema, signer, rollback,
 *    replay, storage limits) is fuzzed too. Accepted: the store holds exactly the
 *    payload's seq, hash and items.
 * C. When the input starts with 'K', it describes a knowledge payload field by field
 *    (see structured()), which is built, signed and verified against the result that
 *    SPEC §8.4 gives it, worked out here: malformed (seq 0, pack_id, kind, a text not
 *    UTF-8, a confidence above 1.0), wrong-signer, rollback / replay against a head,
 *    deferred-storage (more than HM_KNOWLEDGE_CAPACITY items or a text longer than
 *    HM_KNOWLEDGE_TEXT bytes), or accepted with exactly those items.
 */
#include <string.h>

#include "fuzz_common.h"
#include "hm_cbor.h"
#include "hm_crypto.h"
#include "hm_pack.h"

#define PACK_CAP 8192

/* protocol/vectors/packs.json: trusted.host, and the three packs of the vectors that
 * the host key signed (pack hash, seq): "knowledge rollback on a device" (seq 4, valid
 * on a store that holds nothing newer), "knowledge pack on a device" (5) and
 * "knowledge pack after missed versions" (9). tests/test_fuzz_c.py checks that these
 * still match the vectors. */
static const uint8_t host_public[32] = {
    0x04, 0x40, 0xc1, 0xe5, 0x2f, 0xd3, 0xdb, 0x24, 0xa3, 0x4d, 0x94, 0x75, 0xb7, 0x72, 0x45, 0x68,
    0xca, 0x60, 0xbb, 0x61, 0x18, 0x4b, 0x28, 0xa0, 0x0b, 0x65, 0x2b, 0x65, 0xcc, 0x8b, 0xc3, 0x89};
static const uint8_t host_kid[8] = {0xc3, 0x74, 0x65, 0x8a, 0xc4, 0xef, 0x08, 0xac};
static const uint8_t host_id[8] = {0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8};
static const struct {
    uint64_t seq;
    uint8_t hash[32];
} signed_seeds[3] = {
    {4, {0x73, 0xff, 0x1c, 0x6f, 0x05, 0x35, 0x65, 0x41, 0x74, 0xd4, 0xf5, 0x9b, 0x78, 0x26, 0xb8, 0xa7,
         0xb1, 0x35, 0x88, 0xf2, 0xcc, 0x81, 0xad, 0xc1, 0x45, 0xff, 0x65, 0x80, 0xdb, 0xc3, 0x86, 0x0e}},
    {5, {0x52, 0xa5, 0xce, 0x70, 0x03, 0x73, 0x9c, 0xc3, 0xbf, 0xe5, 0x2b, 0x00, 0x7e, 0x09, 0xf7, 0xdd,
         0x10, 0xd6, 0x6f, 0xdf, 0xd1, 0x92, 0x27, 0x0c, 0x0d, 0x69, 0xba, 0xfe, 0x14, 0x22, 0xc4, 0x22}},
    {9, {0x30, 0xeb, 0xa8, 0x0a, 0x10, 0xac, 0xfd, 0xed, 0x04, 0x41, 0xfa, 0x2b, 0x36, 0xaf, 0xe7, 0xd1,
         0xee, 0xef, 0x46, 0x65, 0x4b, 0xce, 0x19, 0x73, 0xa9, 0x70, 0x8f, 0xdf, 0xe9, 0x0e, 0x66, 0x9c}},
};
#define HEAD_SEED 1 /* the store that holds a head holds the seq-5 pack */

static hm_host_key key;
static uint8_t host_seed[32], host_pub[32];
static int ready;

static void setup(void) {
    static const char label[] = "hirmem test key: host a1a2a3a4a5a6a7a8";
    uint8_t pub[32], digest[32];
    hm_hash_sha256(host_seed, (const uint8_t *)label, sizeof label - 1);
    hm_public_key(pub, host_seed);
    FUZZ_CHECK(memcmp(pub, host_public, 32) == 0); /* the vectors' host key */
    memcpy(host_pub, pub, 32);
    hm_hash_sha256(digest, pub, 32);
    FUZZ_CHECK(memcmp(digest, host_kid, 8) == 0); /* kid = SHA-256(public)[0..8) */
    memcpy(key.public_key, pub, 32);
    memcpy(key.kid, host_kid, 8);
    memcpy(key.host_id, host_id, 8);
    ready = 1;
}

/* Status and reason agree; the store keeps its invariants. */
static void check_result(const hm_knowledge *k, hm_pack_status st, hm_pack_reason why) {
    static const uint8_t zeros[HM_PACK_ID_SIZE];
    FUZZ_CHECK((unsigned)st <= HM_PACK_DEFERRED);
    FUZZ_CHECK(strcmp(hm_pack_status_name(st), "?") != 0);
    FUZZ_CHECK(strcmp(hm_pack_reason_name(why), "?") != 0);
    switch (st) {
    case HM_PACK_ACCEPTED:
    case HM_PACK_DUPLICATE: FUZZ_CHECK(why == HM_REASON_NONE); break;
    case HM_PACK_REFUSED: FUZZ_CHECK(why >= HM_REASON_MALFORMED && why <= HM_REASON_BAD_RECORD); break;
    default: FUZZ_CHECK(why == HM_REASON_STORAGE); break;
    }
    FUZZ_CHECK(k->count <= HM_KNOWLEDGE_CAPACITY); /* K1 */
    for (uint32_t i = 0; i < k->count; i++) {
        const hm_knowledge_item *it = &k->items[i];
        FUZZ_CHECK(it->subject_len <= HM_KNOWLEDGE_TEXT && it->predicate_len <= HM_KNOWLEDGE_TEXT &&
                   it->object_len <= HM_KNOWLEDGE_TEXT);
        FUZZ_CHECK(it->confidence <= 0x10000);
        FUZZ_CHECK(fuzz_utf8_ok(it->subject, it->subject_len));
        FUZZ_CHECK(fuzz_utf8_ok(it->predicate, it->predicate_len));
        FUZZ_CHECK(fuzz_utf8_ok(it->object, it->object_len));
    }
    /* K3: the last pack id is signer || seq of a pack past step 9, or zeros */
    if (memcmp(k->last_pack_id, zeros, sizeof zeros) != 0)
        FUZZ_CHECK(why == HM_REASON_NONE || why == HM_REASON_WRONG_SIGNER ||
                   why == HM_REASON_ROLLBACK || why == HM_REASON_REPLAY ||
                   why == HM_REASON_STORAGE);
    else
        FUZZ_CHECK(st == HM_PACK_REFUSED);
}

static uint64_t be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | p[i];
    return v;
}

static hm_pack_reason last_why; /* reason of the last verify() */

/* Verify pack[0..len) (copied to a writable buffer of exactly len bytes) in store k:
 * returns the status (the reason in last_why). K2: seq/hash change only on
 * acceptance, seq only grows. */
static hm_pack_status verify(hm_knowledge *k, const uint8_t *pack, size_t len) {
    uint8_t *copy = malloc(len ? len : 1);
    uint64_t seq_before = k->seq;
    uint8_t hash_before[32];
    hm_pack_reason why = (hm_pack_reason)99;
    FUZZ_CHECK(copy != NULL);
    if (len) memcpy(copy, pack, len);
    memcpy(hash_before, k->hash, 32);
    hm_pack_status st = hm_knowledge_accept(k, copy, len, &why);
    FUZZ_CHECK(len == 0 || memcmp(copy, pack, len) == 0); /* restored */
    free(copy);
    check_result(k, st, why);
    last_why = why;
    if (st == HM_PACK_ACCEPTED) {
        uint8_t h[32];
        hm_hash_sha256(h, pack, len);
        FUZZ_CHECK(memcmp(k->hash, h, 32) == 0);
        FUZZ_CHECK(k->seq > seq_before && k->seq == be64(k->last_pack_id + 8));
        FUZZ_CHECK(memcmp(k->last_pack_id, host_id, 8) == 0);
    } else {
        FUZZ_CHECK(k->seq == seq_before && memcmp(k->hash, hash_before, 32) == 0);
    }
    if (st == HM_PACK_DUPLICATE) FUZZ_CHECK(k->seq == be64(k->last_pack_id + 8));
    return st;
}

/* The seed signed by the host that pack[0..len) is, if any: its seq, else 0. */
static uint64_t signed_seed_seq(const uint8_t *pack, size_t len) {
    uint8_t h[32];
    hm_hash_sha256(h, pack, len);
    for (size_t i = 0; i < sizeof signed_seeds / sizeof signed_seeds[0]; i++)
        if (memcmp(h, signed_seeds[i].hash, 32) == 0) return signed_seeds[i].seq;
    return 0;
}

/* Verify twice in store k: an accepted pack is a duplicate the second time, any other
 * result repeats. With only_seeds, an accepted or duplicate pack is one of the packs
 * the host key signed in the vectors, and the store then holds its seq. */
static void twice(hm_knowledge *k, const uint8_t *pack, size_t len, int only_seeds,
                  hm_pack_status first) {
    hm_pack_status again = verify(k, pack, len);
    if (first == HM_PACK_ACCEPTED) FUZZ_CHECK(again == HM_PACK_DUPLICATE);
    else FUZZ_CHECK(again == first);
    if (only_seeds && (first == HM_PACK_ACCEPTED || first == HM_PACK_DUPLICATE)) {
        uint64_t seq = signed_seed_seq(pack, len);
        FUZZ_CHECK(seq != 0);
        FUZZ_CHECK(k->seq == seq);
    }
}

/* A fresh store and one holding the seq-5 pack; a store without a host key. Returns
 * the fresh store's first result; *after is that store right after it. */
static hm_pack_status run_stores(const uint8_t *pack, size_t len, int only_seeds,
                                 hm_knowledge *after) {
    static const uint8_t zeros[HM_PACK_ID_SIZE];
    static hm_knowledge fresh, held;
    hm_knowledge_init(&fresh, &key);
    hm_pack_status first = verify(&fresh, pack, len);
    memcpy(after, &fresh, sizeof fresh);
    /* Steps 1..9 do not depend on the store: a pack refused there (no pack id kept)
     * is refused the same way by every store; the signature checks cost, skip them. */
    if (!(first == HM_PACK_REFUSED && memcmp(fresh.last_pack_id, zeros, sizeof zeros) == 0)) {
        twice(&fresh, pack, len, only_seeds, first);
        hm_knowledge_init(&held, &key);
        hm_knowledge_set_head(&held, signed_seeds[HEAD_SEED].seq, signed_seeds[HEAD_SEED].hash);
        FUZZ_CHECK(held.seq == signed_seeds[HEAD_SEED].seq && held.count == 0);
        twice(&held, pack, len, only_seeds, verify(&held, pack, len));
    }
    /* no host key: refused, at step 7 at the latest */
    hm_knowledge_init(&fresh, NULL);
    uint8_t *copy = malloc(len ? len : 1);
    hm_pack_reason why = HM_REASON_NONE;
    FUZZ_CHECK(copy != NULL);
    if (len) memcpy(copy, pack, len);
    FUZZ_CHECK(hm_knowledge_accept(&fresh, copy, len, &why) == HM_PACK_REFUSED);
    FUZZ_CHECK(why >= HM_REASON_MALFORMED && why <= HM_REASON_UNKNOWN_KEY);
    FUZZ_CHECK(len == 0 || memcmp(copy, pack, len) == 0);
    free(copy);
    return first;
}

/* B: sign payload[0..n) as the host would, into pack; returns the pack length. */
static size_t sign_payload(const uint8_t *payload, size_t n, uint8_t *pack) {
    static const uint8_t prot[13] = {0xa2, 0x01, 0x27, 0x04, 0x48, 0xc3, 0x74,
                                     0x65, 0x8a, 0xc4, 0xef, 0x08, 0xac};
    static uint8_t sig_structure[PACK_CAP];
    uint8_t sig[64];
    hm_cbor_w w;
    hm_cbor_w_init(&w, sig_structure, sizeof sig_structure);
    hm_cbor_put_array(&w, 4);
    hm_cbor_put_tstr(&w, (const uint8_t *)"Signature1", 10);
    hm_cbor_put_bstr(&w, prot, sizeof prot);
    hm_cbor_put_bstr(&w, NULL, 0);
    hm_cbor_put_bstr(&w, payload, n);
    FUZZ_CHECK(w.err == HM_CBOR_OK);
    hm_sign(sig, host_seed, host_pub, sig_structure, w.len);
    hm_cbor_w_init(&w, pack, PACK_CAP);
    hm_cbor_put_tag(&w, 18);
    hm_cbor_put_array(&w, 4);
    hm_cbor_put_bstr(&w, prot, sizeof prot);
    hm_cbor_put_map(&w, 0);
    hm_cbor_put_bstr(&w, payload, n);
    hm_cbor_put_bstr(&w, sig, sizeof sig);
    FUZZ_CHECK(w.err == HM_CBOR_OK);
    return w.len;
}

/* The store holds exactly the items of payload[0..n) (a payload it accepted). */
static void check_items(const hm_knowledge *k, const uint8_t *payload, size_t n) {
    hm_cbor_r r;
    uint64_t count = 0, v;
    hm_cbor_r_init(&r, payload, n);
    FUZZ_CHECK(hm_cbor_expect_array(&r, 7) == HM_CBOR_OK);
    for (int i = 0; i < 6; i++) FUZZ_CHECK(hm_cbor_skip(&r) == HM_CBOR_OK);
    FUZZ_CHECK(hm_cbor_get_array(&r, &count) == HM_CBOR_OK && count == k->count);
    for (uint32_t i = 0; i < k->count; i++) {
        const hm_knowledge_item *it = &k->items[i];
        const uint8_t *p;
        size_t len;
        FUZZ_CHECK(hm_cbor_expect_array(&r, 5) == HM_CBOR_OK);
        FUZZ_CHECK(hm_cbor_get_bstr(&r, 8, 8, &p, &len) == HM_CBOR_OK);
        FUZZ_CHECK(memcmp(p, it->triple_id, 8) == 0);
        FUZZ_CHECK(hm_cbor_get_tstr(&r, SIZE_MAX, &p, &len) == HM_CBOR_OK);
        FUZZ_CHECK(len == it->subject_len && memcmp(p, it->subject, len) == 0);
        FUZZ_CHECK(hm_cbor_get_tstr(&r, SIZE_MAX, &p, &len) == HM_CBOR_OK);
        FUZZ_CHECK(len == it->predicate_len && memcmp(p, it->predicate, len) == 0);
        FUZZ_CHECK(hm_cbor_get_tstr(&r, SIZE_MAX, &p, &len) == HM_CBOR_OK);
        FUZZ_CHECK(len == it->object_len && memcmp(p, it->object, len) == 0);
        FUZZ_CHECK(hm_cbor_get_uint(&r, UINT64_MAX, &v) == HM_CBOR_OK);
        FUZZ_CHECK(v == it->confidence);
    }
    FUZZ_CHECK(hm_cbor_end(&r) == HM_CBOR_OK);
}

/* C: a CBOR head written here (shortest form), for payloads with raw text strings. */
static size_t put_head(uint8_t *out, unsigned major, uint64_t v) {
    size_t s = v < 24 ? 0 : v <= 0xFF ? 1 : v <= 0xFFFF ? 2 : v <= 0xFFFFFFFFu ? 4 : 8;
    out[0] = (uint8_t)(major << 5 | (s == 0 ? (unsigned)v : s == 1 ? 24u : s == 2 ? 25u
                                                       : s == 4 ? 26u : 27u));
    for (size_t i = 0; i < s; i++) out[1 + i] = (uint8_t)(v >> (8 * (s - 1 - i)));
    return 1 + s;
}

/* C: a knowledge payload built from the input's fields, with the result SPEC §8.4
 * gives it worked out here: seq (u8), flags (u8: 1 another signer, 2 a pack_id that
 * is not signer || seq, 4 kind 1, 8 created 2^64 - 1), items (u8 % 16), then per item
 * the confidence (u32 & 0x1ffff), a triple id (8 bytes) and three texts (length
 * u8 % 64, raw input bytes: not always UTF-8). */
static void structured(const uint8_t *data, size_t size, uint8_t *pack) {
    static uint8_t payload[PACK_CAP];
    static hm_knowledge k;
    fuzz_in in = {data, size, 1};
    uint64_t seq = fuzz_u8(&in);
    unsigned flags = fuzz_u8(&in), count = fuzz_u8(&in) % 16u;
    int valid = 1, fits = count <= HM_KNOWLEDGE_CAPACITY;
    size_t n = 0, got;
    uint8_t signer[8];
    memcpy(signer, host_id, 8);
    if (flags & 1) signer[7] ^= 0x01;
    payload[n++] = 0x87;
    payload[n++] = flags & 4 ? 0x01 : 0x02;
    n += put_head(payload + n, 2, 16);
    memcpy(payload + n, signer, 8);
    for (int i = 0; i < 8; i++) payload[n + 8 + (size_t)i] = (uint8_t)(seq >> (56 - 8 * i));
    if (flags & 2) payload[n + 15] ^= 0x80;
    n += 16;
    n += put_head(payload + n, 2, 8);
    memcpy(payload + n, signer, 8);
    n += 8;
    n += put_head(payload + n, 0, seq);
    n += put_head(payload + n, 2, 32);
    memset(payload + n, 0, 32);
    n += 32;
    n += put_head(payload + n, 0, flags & 8 ? UINT64_MAX : 1760000000000ull);
    n += put_head(payload + n, 4, count);
    for (unsigned i = 0; i < count; i++) {
        uint32_t conf = fuzz_u32(&in) & 0x1FFFFu;
        const uint8_t *tid = fuzz_take(&in, 8, &got);
        payload[n++] = 0x85;
        n += put_head(payload + n, 2, 8);
        memset(payload + n, 0, 8);
        memcpy(payload + n, tid, got);
        n += 8;
        for (int t = 0; t < 3; t++) {
            size_t want = fuzz_u8(&in) % 64u;
            const uint8_t *text = fuzz_take(&in, want, &got);
            n += put_head(payload + n, 3, got);
            memcpy(payload + n, text, got);
            n += got;
            if (!fuzz_utf8_ok(text, got)) valid = 0;
            if (got > HM_KNOWLEDGE_TEXT) fits = 0;
        }
        n += put_head(payload + n, 0, conf);
        if (conf > 0x10000) valid = 0;
    }
    size_t len = sign_payload(payload, n, pack);

    /* SPEC §8.4 from step 9 on, for a store without a head and one at seq 5 */
    hm_pack_reason want = HM_REASON_NONE;
    if (seq == 0 || (flags & 6) || !valid) want = HM_REASON_MALFORMED; /* 9 */
    else if (flags & 1) want = HM_REASON_WRONG_SIGNER;                   /* 10 */
    for (int s = 0; s < 2; s++) {
        hm_pack_reason w = want;
        hm_pack_status expect = w ? HM_PACK_REFUSED : HM_PACK_ACCEPTED;
        hm_knowledge_init(&k, &key);
        if (s == 1) hm_knowledge_set_head(&k, 5, signed_seeds[HEAD_SEED].hash);
        if (!w && s == 1 && seq < 5) w = HM_REASON_ROLLBACK;              /* 11 */
        else if (!w && s == 1 && seq == 5) w = HM_REASON_REPLAY;          /* 12 */
        expect = w ? HM_PACK_REFUSED : fits ? HM_PACK_ACCEPTED : HM_PACK_DEFERRED;
        if (!w && !fits) w = HM_REASON_STORAGE;
        hm_pack_status st = verify(&k, pack, len);
        FUZZ_CHECK(st == expect);
        FUZZ_CHECK(last_why == w);
        if (st == HM_PACK_ACCEPTED) {
            check_items(&k, payload, n);
            FUZZ_CHECK(k.seq == seq);
            FUZZ_CHECK(verify(&k, pack, len) == HM_PACK_DUPLICATE);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static uint8_t pack[PACK_CAP];
    static hm_knowledge k;
    if (!ready) setup();

    /* A: the input is the pack */
    (void)run_stores(data, size, 1, &k);

    /* B: the input is a payload, signed here with the test host key */
    if (size > 0 && data[0] == 0x87 && size <= PACK_CAP - 100) {
        size_t len = sign_payload(data, size, pack);
        /* accepted: the store holds exactly this payload's items */
        if (run_stores(pack, len, 0, &k) == HM_PACK_ACCEPTED) check_items(&k, data, size);
    }

    /* C: the input describes a knowledge payload, signed here */
    if (size > 0 && data[0] == 'K') structured(data, size, pack);
    return 0;
}
