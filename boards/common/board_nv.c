/* The boards' non-volatile region: hm_nvram (NOR rules) over a RAM region that
 * outlives the image in QEMU when a file backs the RAM (board.h, board_nv).
 *
 * Power-cut tests (issue 14 §3): an image built with -DBOARD_NV_CUT (make boards
 * BOARD_EXTRA_CFLAGS=-DBOARD_NV_CUT BOARDS_OUT=...) tears the board_nv_cut_at-th write
 * of each power-on and fails it and every later one (HM_NV_E_POWER: the application
 * stops, exit code 5), as a power cut at that instant would. board_nv_cut_at is
 * patched per test in a copy of the ELF (0: no cut); release images have neither. */
#include "board.h"
#include "hm_nvram.h"

#ifdef BOARD_NV_CUT
__attribute__((used)) const volatile uint32_t board_nv_cut_at = 0;
#endif

const struct hm_nv *board_nv_over_ram(uint8_t *base, uint32_t pages, uint32_t page_size) {
    static hm_nv nv;
    static hm_nvram ram;
    hm_nvram_init(&nv, &ram, base, pages, page_size, 4);
#ifdef BOARD_NV_CUT
    hm_nvram_cut_after(&ram, board_nv_cut_at);
#endif
    return &nv;
}
