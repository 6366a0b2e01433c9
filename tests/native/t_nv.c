/* t_nv — drive hm_nvram (NOR rules over RAM) and hm_persist from tests/test_native_nv.py.
 *
 * One request per line (hexio.h notation), one answer line each. Status words: ok,
 * range, align, flash, power.
 *
 *   flash pages page_size word fill   a new region filled with the byte `fill` (0xFF:
 *                                     erased flash; 0: a new file-backed RAM): "ok"
 *   cut n                  the n-th write from now on is torn and power goes: "ok"
 *   power                  power back, the region as the cut left it: "ok"
 *   writes                 writes so far (programs and erases)
 *   erase page             status
 *   program off x<data>    status
 *   read off len           x<bytes>, or a status word
 *   mount first_page       status found epoch boot seq_reserved pack_seq x<hash>
 *                          knowledge_seq x<hash> next active
 *   save boot seq_reserved pack_seq x<hash> knowledge_seq x<hash>     status
 *   boot base              status boot (boot 0 unless ok)
 *   reserve need ahead     status seq_reserved
 */
#include <stdlib.h>
#include <string.h>

#include "hexio.h"
#include "hm_nvram.h"
#include "hm_persist.h"

static hm_nv nv;
static hm_nvram ram;
static uint8_t *mem;
static hm_persist store;

static const char *word_of(hm_nv_status st) {
    switch (st) {
    case HM_NV_OK: return "ok";
    case HM_NV_E_RANGE: return "range";
    case HM_NV_E_ALIGN: return "align";
    case HM_NV_E_FLASH: return "flash";
    case HM_NV_E_POWER: return "power";
    }
    return "unknown";
}

static void answer_state(void) {
    const hm_persist_state *s = &store.st;
    hexio_num(store.found);
    hexio_num(store.epoch);
    hexio_num(s->boot);
    hexio_num(s->seq_reserved);
    hexio_num(s->pack_seq);
    hexio_bytes(s->pack_hash, sizeof s->pack_hash);
    hexio_num(s->knowledge_seq);
    hexio_bytes(s->knowledge_hash, sizeof s->knowledge_hash);
    hexio_num(store.next);
    hexio_num(store.active);
}

int main(void) {
    hexio_req req;
    while (hexio_next(&req)) {
        const char *c = req.cmd;
        if (!strcmp(c, "flash") && hexio_args(&req, "nnnn") && req.num[0] && req.num[1] &&
            req.num[0] * req.num[1] <= 1u << 20 && (req.num[2] == 4 || req.num[2] == 8) &&
            req.num[1] % req.num[2] == 0) {
            free(mem);
            mem = malloc((size_t)(req.num[0] * req.num[1]));
            if (!mem) return 1;
            memset(mem, (int)(req.num[3] & 0xFF), (size_t)(req.num[0] * req.num[1]));
            hm_nvram_init(&nv, &ram, mem, (uint32_t)req.num[0], (uint32_t)req.num[1],
                          (uint32_t)req.num[2]);
            hexio_word("ok");
        } else if (!mem) {
            hexio_word("no-flash");
        } else if (!strcmp(c, "cut") && hexio_args(&req, "n")) {
            hm_nvram_cut_after(&ram, (uint32_t)req.num[0]);
            hexio_word("ok");
        } else if (!strcmp(c, "power") && hexio_args(&req, "")) {
            hm_nvram_power_on(&ram);
            hexio_word("ok");
        } else if (!strcmp(c, "writes") && hexio_args(&req, "")) {
            hexio_num(ram.writes);
        } else if (!strcmp(c, "erase") && hexio_args(&req, "n")) {
            hexio_word(word_of(nv.erase(&nv, (uint32_t)req.num[0])));
        } else if (!strcmp(c, "program") && hexio_args(&req, "nx")) {
            hexio_word(word_of(nv.program(&nv, (uint32_t)req.num[0], req.bytes[1],
                                          (uint32_t)req.len[1])));
        } else if (!strcmp(c, "read") && hexio_args(&req, "nn") && req.num[1] <= 1u << 20) {
            uint8_t *buf = malloc((size_t)req.num[1] + 1u);
            hm_nv_status st;
            if (!buf) return 1;
            st = nv.read(&nv, (uint32_t)req.num[0], buf, (uint32_t)req.num[1]);
            if (st == HM_NV_OK) hexio_bytes(buf, (size_t)req.num[1]);
            else hexio_word(word_of(st));
            free(buf);
        } else if (!strcmp(c, "mount") && hexio_args(&req, "n")) {
            hexio_word(word_of(hm_persist_mount(&store, &nv, (uint32_t)req.num[0])));
            answer_state();
        } else if (!strcmp(c, "save") && hexio_args(&req, "nnnxnx") && req.len[3] == 32 &&
                   req.len[5] == 32) {
            hm_persist_state s;
            s.boot = (uint32_t)req.num[0];
            s.seq_reserved = (uint32_t)req.num[1];
            s.pack_seq = req.num[2];
            memcpy(s.pack_hash, req.bytes[3], 32);
            s.knowledge_seq = req.num[4];
            memcpy(s.knowledge_hash, req.bytes[5], 32);
            hexio_word(word_of(hm_persist_save(&store, &s)));
        } else if (!strcmp(c, "boot") && hexio_args(&req, "n")) {
            uint32_t boot = 0;
            hexio_word(word_of(hm_persist_boot(&store, (uint32_t)req.num[0], &boot)));
            hexio_num(boot);
        } else if (!strcmp(c, "reserve") && hexio_args(&req, "nn")) {
            hexio_word(word_of(hm_persist_reserve(&store, (uint32_t)req.num[0],
                                                  (uint32_t)req.num[1])));
            hexio_num(store.st.seq_reserved);
        } else {
            hexio_word("bad-request");
        }
        hexio_end();
        hexio_free(&req);
    }
    free(mem);
    return 0;
}
