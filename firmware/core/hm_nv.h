/* hm_nv — a small non-volatile region as NOR flash behaves (issue 14 §1).
 *
 * The core sees one region of `pages` erase pages of `page_size` bytes through three
 * operations a board driver provides. The rules are those of NOR flash, so code that
 * works over one driver works over real flash:
 *  - erase(page) sets every byte of the page to 0xFF;
 *  - program(off, data, len) can only clear bits (new = old & data); off and len are
 *    multiples of `word` (4 or 8) and stay inside one page; a program that would set
 *    a bit is refused by an emulating driver (HM_NV_E_FLASH: on real flash it silently
 *    stores the AND, which is a bug in the caller);
 *  - read(off, buf, len) anywhere in the region.
 * A cut of power may stop an erase or a program part way: the words not yet written
 * keep their old value (a torn program leaves a prefix of the new words, a torn
 * erase a prefix of 0xFF words). Callers detect that with a CRC, never by trust.
 *
 * Drivers: hm_nvram.h (the rules over a RAM buffer: the QEMU boards, whose file-backed
 * RAM keeps it across a kill, and the native tests, with a cut after the N-th write).
 */
#ifndef HM_NV_H
#define HM_NV_H

#include <stdint.h>

typedef enum {
    HM_NV_OK = 0,
    HM_NV_E_RANGE = 1, /* outside the region or across a page */
    HM_NV_E_ALIGN = 2, /* offset or length not a multiple of the word */
    HM_NV_E_FLASH = 3, /* a program would set a bit (the page needs an erase first) */
    HM_NV_E_POWER = 4  /* the power was cut during or before this write */
} hm_nv_status;

typedef struct hm_nv hm_nv;
struct hm_nv {
    uint32_t page_size; /* bytes per erase page, a multiple of word */
    uint32_t pages;     /* erase pages in the region */
    uint32_t word;      /* program granularity in bytes: 4 or 8 */
    hm_nv_status (*read)(const hm_nv *nv, uint32_t off, uint8_t *buf, uint32_t len);
    hm_nv_status (*program)(const hm_nv *nv, uint32_t off, const uint8_t *data, uint32_t len);
    hm_nv_status (*erase)(const hm_nv *nv, uint32_t page);
    void *ctx; /* the driver's */
};

#endif
