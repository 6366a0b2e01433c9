/* Forced into the core files of tools/verify_c.py's WP_ENV_FILES (hm_frag.c) for the
 * EVA+WP sessions (-cpp-extra-args-per-file ... -include): memcmp and memcpy there work on uint8_t
 * buffers, while Frama-C's libc states them over char. WP's typed memory model cannot
 * relate a char view to uint8_t memory (its goals through such a call are weakened
 * and it loses every fact about the caller's memory), and it has no model of
 * \dangling, which the libc's memcmp requires. These two functions carry the same
 * contract stated over uint8_t: readable (and for memcmp initialised) inputs, a
 * writable destination disjoint from the source; a pointer WP proves \valid is never
 * dangling in its model. EVA checks the same preconditions at each call and takes the
 * result from the assigns clauses. Not part of any build. */
#ifndef HM_WP_ENV_H
#define HM_WP_ENV_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/*@ requires valid_dest: \valid(dest + (0 .. n - 1));
    requires valid_src: \valid_read(src + (0 .. n - 1));
    requires separation: \separated(dest + (0 .. n - 1), src + (0 .. n - 1));
    assigns dest[0 .. n - 1] \from src[0 .. n - 1];
    assigns \result \from dest;
    ensures \result == dest;
    ensures \initialized(src + (0 .. n - 1)) ==> \initialized(dest + (0 .. n - 1)); */
uint8_t *hm_wp_memcpy(uint8_t *dest, const uint8_t *src, size_t n);

/*@ requires valid_s1: \valid_read(s1 + (0 .. n - 1)) && \initialized(s1 + (0 .. n - 1));
    requires valid_s2: \valid_read(s2 + (0 .. n - 1)) && \initialized(s2 + (0 .. n - 1));
    assigns \result \from s1[0 .. n - 1], s2[0 .. n - 1]; */
int hm_wp_memcmp(const uint8_t *s1, const uint8_t *s2, size_t n);

#define memcpy(dest, src, n) hm_wp_memcpy((dest), (src), (n))
#define memcmp(s1, s2, n) hm_wp_memcmp((s1), (s2), (n))

/* With HM_WP_ENV_BYTES (tools/verify_c.py WP_ENV_BYTES_FILES: hm_pack.c), memmove and
 * memset too, over uint8_t: the knowledge verifier moves and clears byte arrays (the
 * pack in place, last_pack_id). Not in hm_frag.c, which clears a struct: a struct
 * pointer passed here is converted (Frama-C warns), which WP's typed model cannot
 * follow; EVA takes such a call's result from the assigns clause. */
#ifdef HM_WP_ENV_BYTES
/*@ requires valid_dest: \valid(dest + (0 .. n - 1));
    requires valid_src: \valid_read(src + (0 .. n - 1));
    assigns dest[0 .. n - 1] \from src[0 .. n - 1];
    assigns \result \from dest;
    ensures \result == dest; */
uint8_t *hm_wp_memmove(uint8_t *dest, const uint8_t *src, size_t n);

/*@ requires valid_s: \valid(s + (0 .. n - 1));
    assigns s[0 .. n - 1] \from c;
    assigns \result \from s;
    ensures \result == s; */
uint8_t *hm_wp_memset(uint8_t *s, int c, size_t n);

#define memmove(dest, src, n) hm_wp_memmove((dest), (src), (n))
#define memset(s, c, n) hm_wp_memset((s), (c), (n))
#endif

#endif
