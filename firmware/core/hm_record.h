/* hm_record — a ring record as it travels in a memory pack (SPEC §7.1) and its hash
 * (SPEC §7.4).
 *
 * Wire layout, a CBOR array of exactly 20 elements:
 *   [id, payload, source, timestamp, context, flags, h, i, r, f, c, rn,
 *    confidence, provenance, priority, w, state, layer, hash, prev_hash]
 * Record hash: SHA-256 over the deterministic CBOR of
 *   [id, payload, source, timestamp, context, prev_hash]            (header 0x86)
 * Bit for bit host/hirmem/protocol/records.py (Record.to_wire, record_hash); the vectors are
 * protocol/vectors/records.json.
 *
 * How the hash costs no RAM. The hash input and the wire record share their first
 * five elements, byte for byte, and differ in the array head (0x86 / 0x94, one byte
 * each) and in what follows the context. hm_record_encode therefore writes the hash
 * input into the output buffer where the record goes (head 0x86, the five elements,
 * then prev_hash), hashes those bytes with the one-shot hm_hash_sha256, turns the head
 * into 0x94 and writes the record's remaining fifteen elements over the temporary
 * prev_hash. The hash input is always shorter than the record (>= 81 bytes shorter),
 * so a buffer that holds the record holds the hash input: no scratch buffer, no
 * second copy of the payload, and no SHA-256 context on the stack. (Streaming the
 * CBOR into a hm_sha256_ctx would need the streaming API of hm_sha2.h, which a board
 * that swaps the crypto through hm_crypto.h (HM_CRYPTO_EXTERNAL) does not provide;
 * packs and records call crypto only through hm_crypto.h.)
 *
 * Invariants:
 *  - hm_record_encode writes exactly hm_record_size(rec) bytes on success, and the
 *    bytes are deterministic CBOR (shortest heads, definite lengths).
 *  - On failure (OVERFLOW, or UTF8: the source is not UTF-8, which no verifier
 *    accepts in a tstr) w->len is back where it was and w->err holds the error (it
 *    is sticky, as for every hm_cbor writer call); bytes beyond w->len are scratch.
 *  - The encoders read the record and the ring only; they never change them.
 *  - hash may alias prev_hash (hm_record_encode(w, ring, rec, link, link) advances a
 *    chain link in place).
 *  - No heap, no globals. Stack: a 16-byte id and a 32-byte digest; deepest path 368
 *    bytes on Cortex-M3 and RV32IMAC (GCC 12 -Os), most of it the one-shot SHA-256.
 */
#ifndef HM_RECORD_H
#define HM_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "hm_cbor.h"
#include "hm_config.h"
#include "hm_ring.h"

#define HM_RECORD_FIELDS 20
#define HM_RECORD_HASH_FIELDS 6

/* Largest encoded record: 1 (head) + 17 (id) + 3 + 256 (payload) + 2 + 64 (source)
 * + 9 (timestamp) + 34 (context) + 3 (flags) + 10 * 5 (q16 scores) + 1 + 1 (state,
 * layer) + 34 + 34 (hash, prev_hash). */
#define HM_RECORD_MAX_SIZE 509u
/* Largest hash input: 1 + 17 + 259 + 66 + 9 + 34 + 34. */
#define HM_RECORD_HASH_INPUT_MAX 420u

/* Bytes of the wire array hm_record_encode writes for this record. */
size_t hm_record_size(const hm_ring_record *rec);

/* Write the hash input [id, payload, source, timestamp, context, prev_hash] (§7.4). */
void hm_record_hash_input(hm_cbor_w *w, const hm_ring *ring, const hm_ring_record *rec,
                          const uint8_t prev_hash[HM_HASH_SIZE]);

/* Write the 20-element wire array of `rec` linked to prev_hash, and its hash into
 * hash[] (computed in place, see above). The record's own hash/prev_hash/chained
 * fields are not read: the caller decides the link. Returns HM_CBOR_OK or the error. */
hm_cbor_err hm_record_encode(hm_cbor_w *w, const hm_ring *ring, const hm_ring_record *rec,
                             const uint8_t prev_hash[HM_HASH_SIZE], uint8_t hash[HM_HASH_SIZE]);

#endif
