/* hm_persist — power-safe device state. See hm_persist.h. */
#include "hm_persist.h"

#include <string.h>

#include "hm_crc32.h"

/* Record layout, little-endian: magic 4, epoch 4, boot 4, seq_reserved 4, pack_seq 8,
 * pack_hash 32, knowledge_seq 8, knowledge_hash 32, crc 4 (over the 96 bytes before
 * it), 4 bytes of padding left erased (0xFF). */
#define REC_CRC 96u

/* The record is little-endian and so is every target (Cortex-M, RISC-V, x86): fields
 * are copied as they are. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "hm_persist assumes a little-endian target"
#endif

static void put32(uint8_t *p, uint32_t v) {
    memcpy(p, &v, 4);
}

static uint32_t get32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static void put64(uint8_t *p, uint64_t v) {
    memcpy(p, &v, 8);
}

static uint64_t get64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static uint32_t slots_per_page(const hm_nv *nv) {
    return nv->page_size / HM_PERSIST_SLOT;
}

static uint32_t slot_offset(const hm_persist *p, uint32_t page, uint32_t slot) {
    return (p->first_page + page) * p->nv->page_size + slot * HM_PERSIST_SLOT;
}

static int blank(const uint8_t *rec) {
    for (uint32_t i = 0; i < HM_PERSIST_SLOT; i++)
        if (rec[i] != 0xFF) return 0;
    return 1;
}

hm_nv_status hm_persist_mount(hm_persist *p, const hm_nv *nv, uint32_t first_page) {
    uint8_t rec[HM_PERSIST_SLOT];
    uint32_t page, slot, used[2] = {0, 0};
    hm_nv_status st;
    memset(p, 0, sizeof *p);
    p->nv = nv;
    p->first_page = first_page;
    if (nv->pages < 2 || first_page > nv->pages - 2 || slots_per_page(nv) < 2 ||
        HM_PERSIST_SLOT % nv->word)
        return HM_NV_E_RANGE;
    for (page = 0; page < 2; page++) {
        for (slot = 0; slot < slots_per_page(nv); slot++) {
            st = nv->read(nv, slot_offset(p, page, slot), rec, sizeof rec);
            if (st != HM_NV_OK) return st;
            if (blank(rec)) continue;
            used[page] = slot + 1; /* torn or valid: the next program goes after it */
            if (get32(rec) != HM_PERSIST_MAGIC || get32(rec + REC_CRC) !=
                                                      hm_crc32(0, rec, REC_CRC))
                continue;
            if (p->found && get32(rec + 4) <= p->epoch) continue;
            p->found = 1;
            p->epoch = get32(rec + 4);
            p->active = (uint8_t)page;
            p->st.boot = get32(rec + 8);
            p->st.seq_reserved = get32(rec + 12);
            p->st.pack_seq = get64(rec + 16);
            memcpy(p->st.pack_hash, rec + 24, 32);
            p->st.knowledge_seq = get64(rec + 56);
            memcpy(p->st.knowledge_hash, rec + 64, 32);
        }
    }
    p->next = used[p->active];
    return HM_NV_OK;
}

hm_nv_status hm_persist_save(hm_persist *p, const hm_persist_state *s) {
    const hm_nv *nv = p->nv;
    uint8_t rec[HM_PERSIST_SLOT];
    uint32_t page = p->active, slot = p->next;
    hm_nv_status st;
    memset(rec, 0xFF, sizeof rec);
    put32(rec, HM_PERSIST_MAGIC);
    put32(rec + 4, p->epoch + 1u);
    put32(rec + 8, s->boot);
    put32(rec + 12, s->seq_reserved);
    put64(rec + 16, s->pack_seq);
    memcpy(rec + 24, s->pack_hash, 32);
    put64(rec + 56, s->knowledge_seq);
    memcpy(rec + 64, s->knowledge_hash, 32);
    put32(rec + REC_CRC, hm_crc32(0, rec, REC_CRC));
    if (slot >= slots_per_page(nv)) { /* full: the other page, erased first */
        page ^= 1u;
        slot = 0;
        st = nv->erase(nv, p->first_page + page);
        if (st != HM_NV_OK) return st;
    }
    st = nv->program(nv, slot_offset(p, page, slot), rec, sizeof rec);
    if (st != HM_NV_OK) return st; /* the slot may be torn: mount again first */
    p->active = (uint8_t)page;
    p->next = slot + 1u;
    p->epoch++;
    p->found = 1;
    p->st = *s;
    return HM_NV_OK;
}

hm_nv_status hm_persist_boot(hm_persist *p, uint32_t base, uint32_t *boot) {
    hm_persist_state s = p->st;
    hm_nv_status st;
    s.boot = p->st.boot + 1u > base ? p->st.boot + 1u : base;
    st = hm_persist_save(p, &s);
    if (st == HM_NV_OK) *boot = s.boot;
    return st;
}

hm_nv_status hm_persist_reserve(hm_persist *p, uint32_t need, uint32_t ahead) {
    hm_persist_state s = p->st;
    if (need <= p->st.seq_reserved) return HM_NV_OK;
    s.seq_reserved = need + (ahead ? ahead : 1u) - 1u;
    return hm_persist_save(p, &s);
}
