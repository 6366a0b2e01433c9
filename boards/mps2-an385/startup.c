/* mps2-an385 startup: vector table, reset, faults, semihosting (Cortex-M3). */
#include <stdint.h>

#include "board.h"

void board_reset(void);
void board_fault(void);
void SysTick_Handler(void);
void UART0_RX_Handler(void);

typedef void (*board_handler)(void);

/* ARMv7-M: initial SP, 15 system exceptions, then the external interrupts; the
 * AN385 routes UART0 receive to IRQ 0 (and transmit to IRQ 1, unused). */
struct vector_table {
    uint32_t *initial_sp;
    board_handler system[15];
    board_handler irq[2];
};

__attribute__((section(".vectors"), used)) static const struct vector_table vectors = {
    _stack_top,
    {board_reset, board_fault, board_fault, board_fault, board_fault, board_fault, 0, 0, 0, 0,
     board_fault, board_fault, 0, board_fault, SysTick_Handler},
    {UART0_RX_Handler, board_fault},
};

void board_reset(void) {
    board_copy_data_zero_bss();
    board_paint_stack();
    board_exit(main());
}

void board_fault(void) {
    board_exit(BOARD_EXIT_FAULT);
}

uintptr_t board_semihost(uintptr_t op, const void *arg) {
    register uintptr_t r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}
