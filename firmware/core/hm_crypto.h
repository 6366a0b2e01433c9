/* The cryptography the rest of the core calls: SHA-256 and Ed25519 (SPEC §7.4, §8).
 *
 * This is the only crypto interface that packs, records and the agent use, so a
 * board can swap the implementation:
 *  - by default hm_crypto.c implements it with the core's own hm_sha2 and
 *    hm_ed25519 (portable C99, checked against published vectors and OpenSSL);
 *  - a board that builds with -DHM_CRYPTO_EXTERNAL gets an empty hm_crypto.c and
 *    links its own definitions of these four functions instead (a vendor library,
 *    a hardware accelerator, an audited library such as Monocypher or libsodium).
 *
 * Contract an implementation must keep (the conformance vectors check it):
 *  - hm_hash_sha256: FIPS 180-4 SHA-256 of data[0..len).
 *  - hm_public_key / hm_sign: RFC 8032 Ed25519 (pure, no context): seed is the
 *    32-byte private key; hm_sign takes the seed's public key as well (the caller
 *    derived or checked it once) instead of deriving it per signature; signatures
 *    are deterministic, so any correct implementation reproduces
 *    protocol/vectors/ed25519.json byte for byte.
 *  - hm_verify: returns 0 for a valid signature and -1 otherwise, with OpenSSL's
 *    semantics as SPEC §8.3 states them (detailed in hm_ed25519.h): S >= L refused,
 *    a public key that does not decode refused (non-canonical y and x = 0 with the
 *    sign bit set accepted), cofactorless equation compared on the encoding of R,
 *    small-order keys NOT refused. An implementation with other edge rules
 *    (e.g. one that refuses small-order or non-canonical keys) makes a device
 *    disagree with the host on crafted packs; keys the host provisions are
 *    ordinary keys, for which every RFC 8032 verifier agrees.
 *  - No function fails or allocates; none keeps state between calls. sign and
 *    public_key take constant time in the seed. The output buffers may overlap the
 *    inputs; a data/msg pointer may be NULL when its length is 0.
 */
#ifndef HM_CRYPTO_H
#define HM_CRYPTO_H

#include <stddef.h>
#include <stdint.h>

#define HM_SHA256_DIGEST_SIZE 32
#define HM_SEED_SIZE 32
#define HM_PUBLIC_KEY_SIZE 32
#define HM_SIGNATURE_SIZE 64

void hm_hash_sha256(uint8_t digest[HM_SHA256_DIGEST_SIZE], const uint8_t *data, size_t len);

void hm_public_key(uint8_t pub[HM_PUBLIC_KEY_SIZE], const uint8_t seed[HM_SEED_SIZE]);

/* pub: the public key of seed, checked by the caller (see hm_ed25519_sign). */
void hm_sign(uint8_t sig[HM_SIGNATURE_SIZE], const uint8_t seed[HM_SEED_SIZE],
             const uint8_t pub[HM_PUBLIC_KEY_SIZE], const uint8_t *msg, size_t len);

/* 0 if valid, -1 if not. */
int hm_verify(const uint8_t sig[HM_SIGNATURE_SIZE], const uint8_t pub[HM_PUBLIC_KEY_SIZE],
              const uint8_t *msg, size_t len);

#endif
