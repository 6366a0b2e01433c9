/* hm_persist — the device state that must survive a power cut (issue 14 §2).
 *
 * What it keeps: the boot counter, a sequence high-water mark reserved ahead of use,
 * the chain head (seq and hash of the last pack the host holds) and the knowledge head
 * (seq and hash of the newest accepted knowledge pack: anti-rollback).
 *
 * How, over two erase pages of an hm_nv region (after MCUboot's image trailers and
 * Zephyr NVS: append, never rewrite in place, let a CRC decide): each page holds a
 * run of fixed-size slots of HM_PERSIST_SLOT bytes. A save appends one record — magic,
 * epoch (one more than the newest), the state, CRC-32 — in the next blank slot of the
 * active page, in one program. When the active page is full, the other page is erased
 * and the record goes to its first slot. Mount reads every slot of both pages and
 * keeps the valid record (magic and CRC) with the highest epoch.
 *
 * Why a cut loses nothing acknowledged: a save returns HM_NV_OK only after its program
 * completed, and a completed record is never touched again until the other page has
 * a newer complete record (a page is erased only when the other holds the newest). A
 * torn program leaves a slot whose CRC fails: mount skips it (the previous record
 * wins), and later saves skip it too (the next slot is after the last non-blank one).
 * A torn erase leaves garbage in a page that holds nothing newer. So after a cut,
 * mount returns the last acknowledged state or the one being written, never older.
 *
 * The rules on top (hm_persist_boot, hm_persist_reserve): the boot counter is saved
 * greater before the boot uses it, so no boot counter is used twice; sequence numbers
 * are reserved in steps of `ahead` before they are used, so after a cut the next one
 * starts above everything used (a gap of at most `ahead`, never a reuse).
 *
 * Flash wear: one slot per save; a page of P bytes takes P / HM_PERSIST_SLOT saves per
 * erase (a 1 KB page: 9 saves per erase, so 100 k erase cycles of two pages carry
 * about 1.8 M saves).
 */
#ifndef HM_PERSIST_H
#define HM_PERSIST_H

#include <stdint.h>

#include "hm_nv.h"

#define HM_PERSIST_SLOT 104u  /* one record: 100 bytes, padded to 8 */
#define HM_PERSIST_MAGIC 0x31504D48u /* "HMP1" little-endian */

typedef struct {
    uint32_t boot;                /* boot counter of the running boot (0: never booted) */
    uint32_t seq_reserved;        /* sequence numbers up to this one may have been used */
    uint64_t pack_seq;            /* chain head: seq of the last pack the host holds */
    uint8_t pack_hash[32];        /* and its hash (zero: none) */
    uint64_t knowledge_seq;       /* knowledge head: newest accepted version (0: none) */
    uint8_t knowledge_hash[32];   /* and its hash */
} hm_persist_state;

typedef struct {
    const hm_nv *nv;
    uint32_t first_page;  /* the two pages: first_page, first_page + 1 */
    uint32_t epoch;       /* epoch of the newest valid record (0: none yet) */
    uint32_t next;        /* the next slot to program in the active page */
    uint8_t active;       /* 0 or 1: the page of the newest record */
    uint8_t found;        /* 1 if mount found a valid record */
    hm_persist_state st;  /* the newest saved state (all zero if none) */
} hm_persist;

/* Read the newest valid record of pages first_page and first_page + 1 (nothing is
 * written). HM_NV_E_RANGE if the region or its pages are too small for two slots. */
hm_nv_status hm_persist_mount(hm_persist *p, const hm_nv *nv, uint32_t first_page);

/* Append `st` as the newest record (see above); p->st becomes st when it returns
 * HM_NV_OK. On HM_NV_E_POWER the state on flash is the previous one or st. After any
 * error p is unchanged and may point at a torn slot: mount again before saving. */
hm_nv_status hm_persist_save(hm_persist *p, const hm_persist_state *st);

/* Start a boot: boot = max(saved boot + 1, base), saved before it is returned. */
hm_nv_status hm_persist_boot(hm_persist *p, uint32_t base, uint32_t *boot);

/* Make sure sequence number `need` may be used: if it is above seq_reserved, save
 * seq_reserved = need + ahead - 1 (ahead >= 1) first. */
hm_nv_status hm_persist_reserve(hm_persist *p, uint32_t need, uint32_t ahead);

#endif
