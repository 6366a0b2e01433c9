/* hm_nvram — NOR flash rules over RAM. See hm_nvram.h. */
#include "hm_nvram.h"

#include <string.h>

static hm_nvram *state(const hm_nv *nv) {
    return (hm_nvram *)nv->ctx;
}

/* 1 if this write is cut (or power is already off); counts the write. */
static int cut_now(hm_nvram *ram) {
    if (ram->off) return 1;
    ram->writes++;
    if (ram->cut_at != 0 && ram->writes >= ram->cut_at) ram->off = 1;
    return ram->off;
}

static hm_nv_status nv_read(const hm_nv *nv, uint32_t off, uint8_t *buf, uint32_t len) {
    uint32_t size = nv->pages * nv->page_size;
    if (off > size || len > size - off) return HM_NV_E_RANGE;
    memcpy(buf, state(nv)->mem + off, len);
    return HM_NV_OK;
}

static hm_nv_status nv_program(const hm_nv *nv, uint32_t off, const uint8_t *data,
                               uint32_t len) {
    hm_nvram *ram = state(nv);
    uint32_t size = nv->pages * nv->page_size, i, n;
    uint8_t *to = ram->mem + off;
    if (off > size || len > size - off || (len && off / nv->page_size !=
                                           (off + len - 1u) / nv->page_size))
        return HM_NV_E_RANGE;
    if (off % nv->word || len % nv->word) return HM_NV_E_ALIGN;
    for (i = 0; i < len; i++)
        if ((uint8_t)(to[i] & data[i]) != data[i]) return HM_NV_E_FLASH;
    n = len;
    if (cut_now(ram)) {
        if (ram->writes != ram->cut_at) return HM_NV_E_POWER; /* off before this one */
        n = (len / nv->word / 2u) * nv->word;                 /* torn: the first half */
    }
    for (i = 0; i < n; i++) to[i] &= data[i];
    return n == len ? HM_NV_OK : HM_NV_E_POWER;
}

static hm_nv_status nv_erase(const hm_nv *nv, uint32_t page) {
    hm_nvram *ram = state(nv);
    uint32_t n = nv->page_size;
    if (page >= nv->pages) return HM_NV_E_RANGE;
    if (cut_now(ram)) {
        if (ram->writes != ram->cut_at) return HM_NV_E_POWER;
        n = (n / nv->word / 2u) * nv->word;
    }
    memset(ram->mem + page * nv->page_size, 0xFF, n);
    return n == nv->page_size ? HM_NV_OK : HM_NV_E_POWER;
}

void hm_nvram_init(hm_nv *nv, hm_nvram *ram, uint8_t *mem, uint32_t pages,
                   uint32_t page_size, uint32_t word) {
    memset(ram, 0, sizeof *ram);
    ram->mem = mem;
    nv->page_size = page_size;
    nv->pages = pages;
    nv->word = word;
    nv->read = nv_read;
    nv->program = nv_program;
    nv->erase = nv_erase;
    nv->ctx = ram;
}

void hm_nvram_cut_after(hm_nvram *ram, uint32_t n) {
    ram->cut_at = n ? ram->writes + n : 0;
}

void hm_nvram_power_on(hm_nvram *ram) {
    if (!ram->off) return; /* it never went: an armed cut stays armed */
    ram->off = 0;
    ram->cut_at = 0;
}
