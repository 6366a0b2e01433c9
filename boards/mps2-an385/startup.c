/* mps2-an385 startup (Cortex-M3): vector table and reset; the fault handler and
 * semihosting are in boards/common/cortex_m.c. */
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
