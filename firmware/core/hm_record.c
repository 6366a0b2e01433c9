/* hm_record — wire record and record hash. See hm_record.h for the contract. */
#include "hm_record.h"

#include <string.h>

#include "hm_crypto.h"

#define head_size hm_cbor_head_size

size_t hm_record_size(const hm_ring_record *rec) {
    const hm_gate_result *g = &rec->gate;
    const uint32_t q[10] = {g->h,          g->i,           g->r,         g->f,
                            g->c,          g->rn,          rec->confidence,
                            rec->provenance, rec->priority, g->w};
    size_t n = 1 + (1 + HM_RECORD_ID_SIZE);
    n += head_size(rec->payload_len) + rec->payload_len;
    n += head_size(rec->source_len) + rec->source_len;
    n += head_size(rec->timestamp);
    n += 2 + HM_HASH_SIZE; /* context */
    n += head_size(g->flags);
    for (unsigned k = 0; k < 10; k++) n += head_size(q[k]);
    n += head_size(rec->state) + head_size(rec->layer);
    n += 2 * (2 + HM_HASH_SIZE); /* hash, prev_hash */
    return n;
}

/* The five elements the hash input and the wire record share. */
static void put_common(hm_cbor_w *w, const hm_ring *ring, const hm_ring_record *rec) {
    uint8_t id[HM_RECORD_ID_SIZE];
    hm_ring_id(ring, rec, id);
    hm_cbor_put_bstr(w, id, sizeof id);
    hm_cbor_put_bstr(w, hm_ring_payload(ring, rec), rec->payload_len);
    hm_cbor_put_tstr(w, hm_ring_source(ring, rec), rec->source_len);
    hm_cbor_put_uint(w, rec->timestamp);
    hm_cbor_put_bstr(w, rec->context, HM_HASH_SIZE);
}

void hm_record_hash_input(hm_cbor_w *w, const hm_ring *ring, const hm_ring_record *rec,
                          const uint8_t prev_hash[HM_HASH_SIZE]) {
    hm_cbor_put_array(w, HM_RECORD_HASH_FIELDS);
    put_common(w, ring, rec);
    hm_cbor_put_bstr(w, prev_hash, HM_HASH_SIZE);
}

hm_cbor_err hm_record_encode(hm_cbor_w *w, const hm_ring *ring, const hm_ring_record *rec,
                             const uint8_t prev_hash[HM_HASH_SIZE], uint8_t hash[HM_HASH_SIZE]) {
    const hm_gate_result *g = &rec->gate;
    uint8_t digest[HM_HASH_SIZE];
    size_t start = w->len, common_end;

    if (w->err) return w->err;
    /* 1. The hash input, in place: 0x86, the five shared elements, prev_hash. */
    hm_cbor_put_array(w, HM_RECORD_HASH_FIELDS);
    put_common(w, ring, rec);
    common_end = w->len;
    hm_cbor_put_bstr(w, prev_hash, HM_HASH_SIZE);
    if (w->err) {
        w->len = start;
        return w->err;
    }
    hm_hash_sha256(digest, w->buf + start, w->len - start);

    /* 2. The same bytes become the record: head 0x94 (both heads are one byte), then
     * the other fifteen elements over the temporary prev_hash. */
    w->buf[start] = (uint8_t)(0x80u | HM_RECORD_FIELDS);
    w->len = common_end;
    {
        /* elements 6..18 of §7.1, all unsigned: one call site is smaller than 13 */
        const uint32_t scores[] = {g->flags, g->h, g->i, g->r, g->f, g->c, g->rn,
                                   rec->confidence, rec->provenance, rec->priority, g->w,
                                   rec->state, rec->layer};
        for (size_t k = 0; k < sizeof scores / sizeof scores[0]; k++)
            hm_cbor_put_uint(w, scores[k]);
    }
    hm_cbor_put_bstr(w, digest, HM_HASH_SIZE);
    hm_cbor_put_bstr(w, prev_hash, HM_HASH_SIZE); /* before hash[] is written: may alias */
    if (w->err) {
        w->len = start;
        return w->err;
    }
    memcpy(hash, digest, HM_HASH_SIZE);
    return HM_CBOR_OK;
}
