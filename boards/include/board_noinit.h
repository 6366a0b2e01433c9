/* board_noinit.h — what survives a warm reset: the boot counter and the knowledge head.
 *
 * One board_noinit record lives in the `.noinit` output section of every board's
 * link.ld: RAM that the startup code neither copies nor zeroes and that is in no
 * loadable ELF segment, so neither a debugger/QEMU reloading the image (QEMU's
 * system_reset rewrites only the loadable segments of a -kernel ELF) nor the startup
 * code touches it. A watchdog, a reset button, NVIC_SystemReset or QEMU's
 * system_reset keep it; a power cycle does not (a cold boot: RAM comes up random).
 *
 * The record is trusted only with its magic, version, size and CRC-32 intact and
 * for the same identity: the device id and the boot base of the slot that wrote it
 * (a re-provisioned image starts cold). board_noinit_boot() decides once per boot:
 *   warm:  boot = saved boot + 1 (saturating at 2^32 - 1), knowledge head kept;
 *   cold:  boot = the slot's boot_base, knowledge head none (seq 0);
 * and writes the new record back at once, so a reset during this boot counts.
 *
 * A cold boot repeats the slot's boot base: record ids of that boot can repeat ids of
 * an earlier cold boot (the packer still numbers packs above the host's head, see
 * hm_pack.h). On a board with a non-volatile region (board.h board_nv) the
 * application takes the boot counter and the knowledge head from hm_persist instead,
 * which survive power loss.
 */
#ifndef BOARD_NOINIT_H
#define BOARD_NOINIT_H

#include <stdint.h>

#define BOARD_NOINIT_MAGIC 0x484D4E49u /* "HMNI" */
#define BOARD_NOINIT_VERSION 1u

typedef struct {
    uint32_t magic;
    uint16_t version;
    uint16_t size;
    uint8_t device_id[8];
    uint32_t boot_base;      /* the slot's, when written */
    uint32_t boot;           /* this boot's counter */
    uint32_t warm;           /* consecutive warm boots since the last cold one */
    uint32_t reserved;
    uint64_t knowledge_seq;  /* 0: none */
    uint8_t knowledge_hash[32];
    uint32_t crc;            /* CRC-32 of every byte before it */
} board_noinit;

/* The boot decision (see above): returns the boot counter for this boot; *warm gets
 * 1 for a warm boot. Call once, after board_init(). */
uint32_t board_noinit_boot(const uint8_t device_id[8], uint32_t boot_base, int *warm);

/* The knowledge head kept across warm resets (seq 0 and hash NULL: none). */
uint64_t board_noinit_knowledge(const uint8_t **hash);

/* hm_agent_io.knowledge_saved: keep seq and hash (recomputes the CRC). */
void board_noinit_save_knowledge(uint64_t seq, const uint8_t hash[32]);

/* The number of warm boots since the last cold one (0 after a cold boot). */
uint32_t board_noinit_warm_count(void);

#endif
