/* stm32f4 startup (Cortex-M4F): vector table and reset (FPU on); the fault handler
 * and semihosting are in boards/common/cortex_m.c. */
#include <stdint.h>

#include "board.h"
#include "cortex_m.h"

void board_reset(void);
void board_fault(void);
void SysTick_Handler(void);
void USART1_Handler(void);

typedef void (*board_handler)(void);

/* ARMv7-M: initial SP, 15 system exceptions, then the external interrupts up to
 * USART1 (IRQ 37 on the STM32F405/407); every other interrupt stays disabled. */
#define USART1_IRQ 37
struct vector_table {
    uint32_t *initial_sp;
    board_handler system[15];
    board_handler irq[USART1_IRQ + 1];
};

__attribute__((section(".vectors"), used)) static const struct vector_table vectors = {
    _stack_top,
    {board_reset, board_fault, board_fault, board_fault, board_fault, board_fault, 0, 0, 0, 0,
     board_fault, board_fault, 0, board_fault, SysTick_Handler},
    {[USART1_IRQ] = USART1_Handler},
};

void board_reset(void) {
    /* CPACR: full access to CP10/CP11 before any code may use the FPU. */
    REG32(0xE000ED88u) |= 0xFu << 20;
    __asm__ volatile("dsb\n isb" ::: "memory");
    board_copy_data_zero_bss();
    board_paint_stack();
    board_exit(main());
}
