/* The boards' non-volatile region: hm_nvram (NOR rules) over a RAM region that
 * outlives the image in QEMU when a file backs the RAM (board.h, board_nv). */
#include "board.h"
#include "hm_nvram.h"

const struct hm_nv *board_nv_over_ram(uint8_t *base, uint32_t pages, uint32_t page_size) {
    static hm_nv nv;
    static hm_nvram ram;
    hm_nvram_init(&nv, &ram, base, pages, page_size, 4);
    return &nv;
}
