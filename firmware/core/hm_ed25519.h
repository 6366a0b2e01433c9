/* Ed25519 (RFC 8032 §5.1, pure EdDSA: no context, no pre-hash), the pack signature
 * of SPEC §8.3.
 *
 * Keys: a 32-byte seed (the RFC's private key) and the 32-byte public key derived
 * from it. Checked against RFC 8032 §7.1, the SUPERCOP sign.input file and
 * protocol/vectors/ed25519.json, and differentially against OpenSSL (Python
 * `cryptography`) on random and edge-case keys, signatures and messages.
 *
 * Secrets: public_key and sign run in time independent of the seed, the secret
 * scalar and the nonce: no branch and no memory index depends on them (table
 * entries are picked by scanning with masks, signs applied by masked swaps). Their
 * running time depends only on the message length. One caveat: this holds for the
 * C code; on a core whose 32x32->64 multiplier finishes early on small operands
 * (Cortex-M3 UMULL/SMULL), the field multiplications leak operand sizes through
 * timing. verify handles public data only and runs in variable time.
 *
 * Verification semantics are OpenSSL's (what the host uses, SPEC §8.3), established
 * by differential testing against OpenSSL 4.0.3 through `cryptography` 50
 * (tests/test_native_crypto.py pins each rule by name):
 *  - S (the second half of the signature) must be < L, else refused; so S + L and
 *    any S with one of its top three bits set are refused.
 *  - A (the public key) must decode to a curve point, else refused. Decoding takes
 *    the low 255 bits as y and reduces them mod p: a non-canonical y (p <= y <
 *    2^255, e.g. y = p + 1 for the identity) is accepted as y - p. When x = 0
 *    (y = 1 or y = -1), a set sign bit is accepted and ignored. A of small order
 *    (the identity and the other 7 torsion points) and A with a torsion component
 *    are accepted: the signature check alone does not reject weak keys, a key
 *    registry must (SPEC §8.3).
 *  - k = SHA-512(R || A || M) mod L over the bytes as given (a non-canonical A is
 *    hashed as sent), and the cofactorless equation: the canonical encoding of
 *    [S]B - [k]A must equal the 32 bytes of R. R is never decoded: a non-canonical
 *    R (y >= p, or x = 0 with the sign bit set) never matches and is refused, an R
 *    of small order is accepted whenever the equation holds, and a signature that
 *    only the cofactored equation ([8][S]B = [8]R + [8][k]A) accepts is refused.
 *
 * Cost on a Cortex-M3 (Thumb-2, gcc 12 -Os, counted in QEMU by tools/bench_core.py):
 * public_key 1.84 M instructions, sign 2.15 M (the public key given, not derived
 * again; 3.93 M when sign derived it), verify 2.04 M (127-byte message); about
 * 5.7 KB of code and constants (no precomputed tables). Stack, deepest path: 2.4 KB public_key,
 * 2.5 KB sign (the table (1..8)B lives on the stack), 3.0 KB verify (two 4-entry
 * tables of odd multiples and two 256-digit NAFs). No heap, no globals.
 */
#ifndef HM_ED25519_H
#define HM_ED25519_H

#include <stddef.h>
#include <stdint.h>

#define HM_ED25519_SEED_SIZE 32
#define HM_ED25519_PUBLIC_SIZE 32
#define HM_ED25519_SIGNATURE_SIZE 64

/* pub = the public key of seed. */
void hm_ed25519_public_key(uint8_t pub[HM_ED25519_PUBLIC_SIZE],
                           const uint8_t seed[HM_ED25519_SEED_SIZE]);

/* sig = R || S, the signature of msg[0..len) under seed. Deterministic. pub MUST be
 * the public key of seed (hm_ed25519_public_key, or a stored copy checked against
 * it once): it is hashed into k, not recomputed. Signing one message under two
 * different pubs gives two S with the same r, which reveals the secret scalar, so a
 * caller never passes a pub it has not checked (the agent checks the key slot's
 * once, at hm_agent_init). sig may overlap msg, seed or pub. msg may be NULL if len
 * is 0. */
void hm_ed25519_sign(uint8_t sig[HM_ED25519_SIGNATURE_SIZE],
                     const uint8_t seed[HM_ED25519_SEED_SIZE],
                     const uint8_t pub[HM_ED25519_PUBLIC_SIZE], const uint8_t *msg,
                     size_t len);

/* 0 if sig is a valid signature of msg[0..len) under pub, -1 if not (with the
 * semantics above). msg may be NULL if len is 0. */
int hm_ed25519_verify(const uint8_t sig[HM_ED25519_SIGNATURE_SIZE],
                      const uint8_t pub[HM_ED25519_PUBLIC_SIZE], const uint8_t *msg,
                      size_t len);

#endif
