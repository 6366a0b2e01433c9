/* hm_crypto.h for the EVA harness of the pack verifier (eva_pack in eva_decoders.c):
 * the real SHA-256 (hm_sha2.c is analysed with it); Ed25519 verification replaced by
 * a function that reads every byte it is given (so EVA checks the verifier passes
 * valid buffers) and answers valid or invalid, either. The Ed25519 arithmetic itself
 * works on fixed-size values and is not part of this analysis. Not part of any build. */
#include "__fc_builtin.h"

#include "hm_crypto.h"
#include "hm_sha2.h"

void hm_hash_sha256(uint8_t digest[HM_SHA256_DIGEST_SIZE], const uint8_t *data, size_t len) {
    hm_sha256(digest, data, len);
}

int hm_verify(const uint8_t sig[HM_SIGNATURE_SIZE], const uint8_t pub[HM_PUBLIC_KEY_SIZE],
              const uint8_t *msg, size_t len) {
    unsigned acc = 0;
    for (size_t i = 0; i < HM_SIGNATURE_SIZE; i++) acc ^= sig[i];
    for (size_t i = 0; i < HM_PUBLIC_KEY_SIZE; i++) acc ^= pub[i];
    for (size_t i = 0; i < len; i++) acc ^= msg[i];
    return Frama_C_interval(-1, 0) | (int)(acc & 0u);
}
