/* The warm-reset record (boards/include/board_noinit.h) in the .noinit section. */
#include "board_noinit.h"

#include <stddef.h>
#include <string.h>

#include "hm_crc32.h"

__attribute__((section(".noinit"), aligned(8))) static board_noinit keep;

static uint32_t crc_of(const board_noinit *k) {
    return hm_crc32(0, (const uint8_t *)k, offsetof(board_noinit, crc));
}

static void seal(void) {
    keep.crc = crc_of(&keep);
}

uint32_t board_noinit_boot(const uint8_t device_id[8], uint32_t boot_base, int *warm) {
    int ok = keep.magic == BOARD_NOINIT_MAGIC && keep.version == BOARD_NOINIT_VERSION &&
             keep.size == sizeof keep && keep.crc == crc_of(&keep) &&
             memcmp(keep.device_id, device_id, sizeof keep.device_id) == 0 &&
             keep.boot_base == boot_base && keep.boot >= boot_base;
    if (ok) {
        if (keep.boot != 0xFFFFFFFFu) keep.boot++;
        keep.warm++;
    } else {
        memset(&keep, 0, sizeof keep);
        keep.magic = BOARD_NOINIT_MAGIC;
        keep.version = BOARD_NOINIT_VERSION;
        keep.size = (uint16_t)sizeof keep;
        memcpy(keep.device_id, device_id, sizeof keep.device_id);
        keep.boot_base = boot_base;
        keep.boot = boot_base;
    }
    seal();
    if (warm) *warm = ok;
    return keep.boot;
}

uint64_t board_noinit_knowledge(const uint8_t **hash) {
    if (hash) *hash = keep.knowledge_seq ? keep.knowledge_hash : NULL;
    return keep.knowledge_seq;
}

void board_noinit_save_knowledge(uint64_t seq, const uint8_t hash[32]) {
    keep.knowledge_seq = seq;
    memcpy(keep.knowledge_hash, hash, sizeof keep.knowledge_hash);
    seal();
}

uint32_t board_noinit_warm_count(void) {
    return keep.warm;
}
