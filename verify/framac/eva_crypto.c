/* hm_crypto.h for the EVA harness of the pack verifier (eva_pack in eva_decoders.c):
 * the real SHA-256 (hm_sha2.c is analysed with it); Ed25519 verification replaced by
 * a function that reads every byte it is given (so EVA checks the verifier passes
 * valid buffers) and answers valid or invalid, either (a volatile read). The Ed25519 arithmetic itself
 * works on fixed-size values and is not part of this analysis. Not part of any build. */
#include "__fc_builtin.h"

#include "hm_crypto.h"
#include "hm_sha2.h"

/* Its assigns clause is checked by From over EVA's results (-from-verify-assigns), not by
 * WP: hm_sha256 has no contract (tools/verify_c.py WP_GIVEN). */
/*@ requires \valid(digest + (0 .. HM_SHA256_DIGEST_SIZE - 1));
    requires \valid_read(data + (0 .. len - 1));
    assigns digest[0 .. HM_SHA256_DIGEST_SIZE - 1]; */
void hm_hash_sha256(uint8_t digest[HM_SHA256_DIGEST_SIZE], const uint8_t *data, size_t len) {
    hm_sha256(digest, data, len);
}

/* the verdict: a volatile read, any value (EVA and WP alike) */
static volatile int verdict;

/*@ requires \valid_read(sig + (0 .. HM_SIGNATURE_SIZE - 1)) &&
             \initialized(sig + (0 .. HM_SIGNATURE_SIZE - 1));
    requires \valid_read(pub + (0 .. HM_PUBLIC_KEY_SIZE - 1));
    requires \valid_read(msg + (0 .. len - 1));
    assigns \nothing; */
int hm_verify(const uint8_t sig[HM_SIGNATURE_SIZE], const uint8_t pub[HM_PUBLIC_KEY_SIZE],
              const uint8_t *msg, size_t len) {
    unsigned acc = 0;
    /*@ loop invariant i <= HM_SIGNATURE_SIZE;
        loop assigns i, acc; */
    for (size_t i = 0; i < HM_SIGNATURE_SIZE; i++) acc ^= sig[i];
    /*@ loop invariant i <= HM_PUBLIC_KEY_SIZE;
        loop assigns i, acc; */
    for (size_t i = 0; i < HM_PUBLIC_KEY_SIZE; i++) acc ^= pub[i];
    /*@ loop invariant i <= len;
        loop assigns i, acc; */
    for (size_t i = 0; i < len; i++) acc ^= msg[i];
    return (verdict ? -1 : 0) | (int)(acc & 0u);
}
