/* What every Cortex-M board shares: the fault handler and the semihosting call
 * (BKPT 0xAB). Built for every board; empty on other architectures. */
#include <stdint.h>

#include "board.h"

#if defined(__arm__)

void board_fault(void);

void board_fault(void) {
    board_exit(BOARD_EXIT_FAULT);
}

uintptr_t board_semihost(uintptr_t op, const void *arg) {
    register uintptr_t r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

#else
typedef int board_cortex_m_unused; /* ISO C wants a translation unit to declare something */
#endif
