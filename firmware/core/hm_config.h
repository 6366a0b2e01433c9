/* Compile-time configuration of the hirmem firmware core.
 *
 * Every size here is a build-time choice of the board; the core never allocates.
 * Boards override a value with -D on the command line (e.g. -DHM_RING_CAPACITY=8).
 */
#ifndef HM_CONFIG_H
#define HM_CONFIG_H

/* Working-memory ring: records held and the payload arena they share. */
#ifndef HM_RING_CAPACITY
#define HM_RING_CAPACITY 16
#endif
#ifndef HM_ARENA_SIZE
#define HM_ARENA_SIZE 2048
#endif

/* Largest decoded frame (body + CRC) this device accepts; SPEC §2.5 (floor 128). */
#ifndef HM_MAX_FRAME
#define HM_MAX_FRAME 512
#endif

/* Largest reassembled message this device accepts (SPEC §6.8). */
#ifndef HM_MAX_MESSAGE
#define HM_MAX_MESSAGE 4096
#endif

/* Go-back-N window this device offers (SPEC §6.4), 1..8. */
#ifndef HM_WINDOW
#define HM_WINDOW 4
#endif

/* Wire limits fixed by the protocol (SPEC §7, §5). */
#define HM_MAX_PAYLOAD 256
#define HM_MAX_SOURCE 64
#define HM_MAX_TEXT 240
#define HM_ID_SIZE 8
#define HM_KID_SIZE 8
#define HM_RECORD_ID_SIZE 16
#define HM_HASH_SIZE 32

#if HM_MAX_FRAME < 128
#error "HM_MAX_FRAME is below the protocol floor of 128"
#endif
/* Planted bugs exist only for tools/verify_c.py, which shows its checkers catch them;
 * a build that sets one by mistake stops here. */
#if (defined(HM_PLANT_OOB) || defined(HM_PLANT_COBS) || defined(HM_PLANT_RING_LRU) || \
     defined(HM_PLANT_RING)) && !defined(HM_VERIFY_PLANTED)
#error "HM_PLANT_* are planted bugs for tools/verify_c.py only"
#endif
#if defined(HM_PLANT_JOIN) && !defined(HM_VERIFY_PLANTED)
#error "HM_PLANT_JOIN is a planted bug for tools/verify_c.py only"
#endif
#if defined(HM_PLANT_PACK) && !defined(HM_VERIFY_PLANTED)
#error "HM_PLANT_PACK is a planted bug for tools/verify_c.py only"
#endif
#if HM_WINDOW < 1 || HM_WINDOW > 8
#error "HM_WINDOW must be 1..8"
#endif

#endif
