/* CRC-32, IEEE 802.3 / zlib (SPEC §2.2): the value of Python's binascii.crc32.
 *
 * Reflected polynomial 0xEDB88320, initial value 0xFFFFFFFF, final XOR 0xFFFFFFFF.
 * Check value: hm_crc32(0, "123456789", 9) == 0xCBF43926.
 *
 * Invariants:
 *  - Incremental like zlib's crc32(): start from 0 and pass the previous result,
 *    hm_crc32(hm_crc32(0, a, na), b, nb) == hm_crc32(0, a || b, na + nb).
 *  - hm_crc32(crc, p, 0) == crc; p may then be NULL.
 *  - No state, no heap; reads exactly len bytes of data.
 *
 * Implementation: a 16-entry (64-byte) nibble table, two lookups per byte (a 1 KB
 * byte table needs one; bitwise needs eight shift/xor steps).
 */
#ifndef HM_CRC32_H
#define HM_CRC32_H

#include <stddef.h>
#include <stdint.h>

uint32_t hm_crc32(uint32_t crc, const uint8_t *data, size_t len);

#endif
