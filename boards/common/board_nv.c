/* The boards' non-volatile regions (board.h, board_nv), behind hm_nv.h with the NOR
 * rules enforced by hm_nvram:
 *  - board_nv_over_ram: a RAM region that outlives the image in QEMU when a file backs
 *    the RAM (mps2-an385, hifive1);
 *  - board_nv_over_semihost: a RAM shadow written through to a host file by
 *    semihosting (stm32f4: netduinoplus2 has no RAM a file can back). The host names
 *    the file on the semihosting command line, "hirmem-nv PATH"
 *    (-semihosting-config ...,arg=hirmem-nv,arg=PATH); without it there is no region.
 *    Each program or erase is written through (the range it touched) before it
 *    returns, so the file holds what the flash would.
 *
 * Power-cut tests (issue 14 §3): an image built with -DBOARD_NV_CUT (make boards
 * BOARD_EXTRA_CFLAGS=-DBOARD_NV_CUT BOARDS_OUT=...) tears the board_nv_cut_at-th write
 * of each power-on and fails it and every later one (HM_NV_E_POWER: the application
 * stops, exit code 5), as a power cut at that instant would. board_nv_cut_at is
 * patched per test in a copy of the ELF (0: no cut); release images have neither. */
#include <string.h>

#include "board.h"
#include "hm_nvram.h"

#ifdef BOARD_NV_CUT
__attribute__((used)) const volatile uint32_t board_nv_cut_at = 0;
#endif

static hm_nv ram_nv;
static hm_nvram ram;

static const hm_nv *over(uint8_t *mem, uint32_t pages, uint32_t page_size) {
    hm_nvram_init(&ram_nv, &ram, mem, pages, page_size, 4);
#ifdef BOARD_NV_CUT
    hm_nvram_cut_after(&ram, board_nv_cut_at);
#endif
    return &ram_nv;
}

const struct hm_nv *board_nv_over_ram(uint8_t *base, uint32_t pages, uint32_t page_size) {
    return over(base, pages, page_size);
}

/* ---- write-through to a host file (semihosting) ---------------------------------- */

#define SYS_OPEN 0x01u
#define SYS_WRITE 0x05u
#define SYS_READ 0x06u
#define SYS_SEEK 0x0Au
#define SYS_FLEN 0x0Cu
#define SYS_GET_CMDLINE 0x15u
#define MODE_READ_WRITE 3u /* "r+b" */
#define MODE_CREATE 7u     /* "w+b" */
#define PREFIX "hirmem-nv "

static hm_nv file_nv;
static uintptr_t file;

/* 1 if mem[off .. off + len) reached the file. */
static int write_through(uint32_t off, uint32_t len) {
    uintptr_t seek[2] = {file, off};
    uintptr_t write[3] = {file, (uintptr_t)(ram.mem + off), len};
    return board_semihost(SYS_SEEK, seek) == 0 && board_semihost(SYS_WRITE, write) == 0;
}

static hm_nv_status file_read(const hm_nv *nv, uint32_t off, uint8_t *buf, uint32_t len) {
    (void)nv;
    return ram_nv.read(&ram_nv, off, buf, len);
}

static hm_nv_status file_program(const hm_nv *nv, uint32_t off, const uint8_t *data,
                                 uint32_t len) {
    hm_nv_status st = ram_nv.program(&ram_nv, off, data, len);
    (void)nv;
    if (st == HM_NV_OK && !write_through(off, len)) st = HM_NV_E_POWER;
    return st;
}

static hm_nv_status file_erase(const hm_nv *nv, uint32_t page) {
    hm_nv_status st = ram_nv.erase(&ram_nv, page);
    (void)nv;
    if (st == HM_NV_OK && !write_through(page * ram_nv.page_size, ram_nv.page_size))
        st = HM_NV_E_POWER;
    return st;
}

const struct hm_nv *board_nv_over_semihost(uint8_t *shadow, uint32_t pages,
                                           uint32_t page_size) {
    static char line[160];
    static int tried;
    uintptr_t cmd[2] = {(uintptr_t)line, sizeof line - 1u}, size = pages * page_size;
    const char *path = line + sizeof PREFIX - 1u;
    if (tried) return file ? &file_nv : NULL;
    tried = 1;
    if (board_semihost(SYS_GET_CMDLINE, cmd) != 0 || cmd[1] >= sizeof line) return NULL;
    line[cmd[1]] = 0;
    if (strncmp(line, PREFIX, sizeof PREFIX - 1u) != 0) return NULL; /* no file named */
    {
        uintptr_t open[3] = {(uintptr_t)path, MODE_READ_WRITE, strlen(path)};
        uintptr_t fh = board_semihost(SYS_OPEN, open);
        if (fh == (uintptr_t)-1) {
            open[1] = MODE_CREATE; /* a new file: an empty region */
            fh = board_semihost(SYS_OPEN, open);
            if (fh == (uintptr_t)-1) return NULL;
        }
        file = fh;
    }
    memset(shadow, 0, size);
    if (board_semihost(SYS_FLEN, &file) >= size) {
        uintptr_t seek[2] = {file, 0}, read[3] = {file, (uintptr_t)shadow, size};
        if (board_semihost(SYS_SEEK, seek) != 0 || board_semihost(SYS_READ, read) != 0)
            memset(shadow, 0, size); /* unreadable: an empty region */
    }
    (void)over(shadow, pages, page_size);
    file_nv = ram_nv;
    file_nv.read = file_read;
    file_nv.program = file_program;
    file_nv.erase = file_erase;
    return &file_nv;
}
