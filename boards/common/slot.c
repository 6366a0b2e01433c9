/* The key slot template every built image carries: unprovisioned (flags 0, crc 0).
 * host/hirmem/emulation/provision.py patches it in a copy of the ELF and BIN; see
 * include/hm_slot.h. The application reads it only through the extern declaration,
 * so the compiler cannot fold the template's values into the code. */
#include "hm_slot.h"

__attribute__((section(".hm_slot"), used, aligned(8))) const hm_slot hm_key_slot = {
    .magic = HM_SLOT_MAGIC,
    .version = HM_SLOT_VERSION,
    .flags = 0,
    .size = sizeof(hm_slot),
    .boot_base = 1,
};
