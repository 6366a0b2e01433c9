/* Default implementation of hm_crypto.h with the core's own SHA-2 and Ed25519.
 * Build with -DHM_CRYPTO_EXTERNAL to supply these functions from elsewhere. */
#include "hm_crypto.h"

#ifndef HM_CRYPTO_EXTERNAL

#include "hm_ed25519.h"
#include "hm_sha2.h"

void hm_hash_sha256(uint8_t digest[HM_SHA256_DIGEST_SIZE], const uint8_t *data, size_t len) {
    hm_sha256(digest, data, len);
}

void hm_public_key(uint8_t pub[HM_PUBLIC_KEY_SIZE], const uint8_t seed[HM_SEED_SIZE]) {
    hm_ed25519_public_key(pub, seed);
}

void hm_sign(uint8_t sig[HM_SIGNATURE_SIZE], const uint8_t seed[HM_SEED_SIZE],
             const uint8_t pub[HM_PUBLIC_KEY_SIZE], const uint8_t *msg, size_t len) {
    hm_ed25519_sign(sig, seed, pub, msg, len);
}

int hm_verify(const uint8_t sig[HM_SIGNATURE_SIZE], const uint8_t pub[HM_PUBLIC_KEY_SIZE],
              const uint8_t *msg, size_t len) {
    return hm_ed25519_verify(sig, pub, msg, len);
}

#else

/* ISO C forbids an empty translation unit. */
typedef int hm_crypto_external_build;

#endif
