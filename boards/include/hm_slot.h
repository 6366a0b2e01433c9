/* hm_slot.h — the key slot: a board image's provisioned identity and settings.
 *
 * One const hm_slot named `hm_key_slot` lives in its own section (.hm_slot) in
 * flash, so a host tool can find it through the ELF symbol table and patch it in a
 * built ELF and BIN (host/hirmem/emulation/provision.py) without rebuilding. Built images
 * carry the unprovisioned template (flags 0): the application refuses to start the
 * agent and exits with BOARD_EXIT_UNPROVISIONED (3).
 *
 * Layout: 192 bytes, little-endian, no padding (every field at its natural
 * alignment); provision.py packs the same layout with struct format
 * "<8sHHI8sIIIIII32s32s32s8s8s28sI" (keep the two in step: HM_SLOT_SIZE and the
 * _Static_assert below). Version 2 added device_public (version 1: 160 bytes,
 * without it); an image refuses a slot of another version.
 *
 * INVARIANTS (checked by the application before anything is used)
 *  - magic == "HMSLOT\0\1", version == HM_SLOT_VERSION, size == sizeof(hm_slot);
 *  - crc == hm_crc32 over every byte before it (a half-patched slot is refused);
 *  - flags has HM_SLOT_PROVISIONED; without HM_SLOT_HOST_KEY the device trusts no
 *    knowledge signer (every pushed pack is unknown-key);
 *  - device_public is the public key of device_seed: hm_agent_init derives it once
 *    and compares (a mismatch: BOARD_EXIT_CONFIG), then every signature uses it.
 */
#ifndef HM_SLOT_H
#define HM_SLOT_H

#include <stdint.h>

#include "hm_pack.h"

#define HM_SLOT_MAGIC "HMSLOT\0\1"
#define HM_SLOT_VERSION 2u
#define HM_SLOT_SIZE 192u

#define HM_SLOT_PROVISIONED 0x0001u /* device id and seed are set */
#define HM_SLOT_HOST_KEY 0x0002u    /* host_key is set */
#define HM_SLOT_SENSOR 0x0004u      /* run the synthetic sensor every sensor_period_ms */

typedef struct {
    uint8_t magic[8];
    uint16_t version;
    uint16_t flags;            /* HM_SLOT_* */
    uint32_t size;             /* sizeof(hm_slot) */
    uint8_t device_id[8];
    uint32_t boot_base;        /* boot counter of this image (>= 1; 0 is taken as 1) */
    uint32_t sensor_period_ms; /* synthetic sensor period (with HM_SLOT_SENSOR) */
    uint32_t offer_threshold;  /* hm_agent_config.offer_threshold (0: never by count) */
    uint32_t offer_period_ms;  /* hm_agent_config.offer_period_ms (0: never by time) */
    uint32_t status_period_ms; /* hm_agent_config.status_period_ms (0: never) */
    uint32_t sensor_seed;      /* synthetic sensor PRNG seed (0: from the device id) */
    uint8_t device_seed[32];   /* Ed25519 device key: SECRET */
    uint8_t device_public[32]; /* its public key (what the host registers) */
    hm_host_key host_key;      /* public key 32, kid 8, host id 8 */
    uint8_t reserved[28];      /* zero */
    uint32_t crc;              /* CRC-32 (IEEE) of the bytes above */
} hm_slot;

_Static_assert(sizeof(hm_slot) == HM_SLOT_SIZE, "hm_slot layout changed: update provision.py");

extern const hm_slot hm_key_slot;

#endif
