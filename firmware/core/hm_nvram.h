/* hm_nvram — an hm_nv driver that enforces NOR flash rules over a RAM buffer.
 *
 * For boards whose emulator has no writable flash (QEMU 7.2's mps2-an385 and sifive_e
 * accept a file as RAM instead, so a region of that RAM outlives a kill of QEMU) and
 * for the native tests. It checks every rule of hm_nv.h (alignment, one page per
 * program, bits only cleared) and counts the writes. A power cut can be armed: the
 * `cut_at`-th write (program or erase, counting from 1) is torn, writing only the
 * first half of its words, and it and every later write return HM_NV_E_POWER, as if
 * the board had stopped there (the caller stops; hm_nvram_power_on restores power
 * with the region as the cut left it). That is littlefs's test block device idea: run
 * a scenario once to count its writes N, then cut after each n = 1..N.
 *
 * No heap: the caller gives the buffer (pages * page_size bytes) and the state.
 */
#ifndef HM_NVRAM_H
#define HM_NVRAM_H

#include "hm_nv.h"

typedef struct {
    uint8_t *mem;     /* pages * page_size bytes */
    uint32_t writes;  /* writes attempted since hm_nvram_init (programs + erases) */
    uint32_t cut_at;  /* 0: no cut; n: the n-th write is torn and power is gone */
    uint8_t off;      /* 1 once the cut happened */
} hm_nvram;

/* nv: a driver over `mem` with this geometry (word 4 or 8; page_size a multiple of
 * word). The contents of mem are kept (a region that survived a power cycle). */
void hm_nvram_init(hm_nv *nv, hm_nvram *ram, uint8_t *mem, uint32_t pages,
                   uint32_t page_size, uint32_t word);

/* Arm a cut at the n-th write from now on (0 disarms). */
void hm_nvram_cut_after(hm_nvram *ram, uint32_t n);

/* Power is back after a cut: writes work again (the cut is disarmed); the region
 * keeps what the cut left. Without a cut before, nothing changes. */
void hm_nvram_power_on(hm_nvram *ram);

#endif
