#include "hm_crc32.h"

/* T[n] = CRC register after shifting the nibble n through 4 reflected steps. */
static const uint32_t crc_nibble[16] = {
    0x00000000u, 0x1db71064u, 0x3b6e20c8u, 0x26d930acu, 0x76dc4190u, 0x6b6b51f4u,
    0x4db26158u, 0x5005713cu, 0xedb88320u, 0xf00f9344u, 0xd6d6a3e8u, 0xcb61b38cu,
    0x9b64c2b0u, 0x86d3d2d4u, 0xa00ae278u, 0xbdbdf21cu,
};

/*@ requires \valid_read(data + (0 .. len - 1));
    assigns \nothing; */
uint32_t hm_crc32(uint32_t crc, const uint8_t *data, size_t len) {
    uint32_t c = ~crc;
    /*@ loop invariant i <= len;
        loop assigns i, c; */
    for (size_t i = 0; i < len; i++) {
        c ^= data[i];
        c = (c >> 4) ^ crc_nibble[c & 15u];
        c = (c >> 4) ^ crc_nibble[c & 15u];
    }
    return ~c;
}
