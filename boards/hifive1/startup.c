/* hifive1 startup (FE310, rv32imac): entry, the trap handler, semihosting. */
#include <stdint.h>

#include "board.h"

void _start(void);
void board_reset(void);
void board_trap(void);
void board_on_trap(uint32_t mcause); /* board.c: interrupts; anything else ends the run */

/* Reset lands here (first in flash, see link.ld): set the stack and the trap vector
 * (direct mode), continue in C. gp is not used (no __global_pointer$). */
__attribute__((naked, section(".text.start"))) void _start(void) {
    __asm__ volatile(
        "la sp, _stack_top\n"
        "la t0, board_trap\n"
        "csrw mtvec, t0\n"
        "j board_reset\n");
}

void board_reset(void) {
    board_copy_data_zero_bss();
    board_paint_stack();
    board_exit(main());
}

/* Every trap: save the caller-saved registers (GCC's interrupt attribute), hand
 * mcause to the board, return with mret. mtvec direct mode needs 4-byte alignment. */
__attribute__((interrupt("machine"), aligned(4))) void board_trap(void) {
    uint32_t mcause;
    __asm__ volatile("csrr %0, mcause" : "=r"(mcause));
    board_on_trap(mcause);
}

/* The RISC-V semihosting call: ebreak between slli x0 and srai x0 (uncompressed, in
 * one page: QEMU reads the neighbours), operation in a0, argument in a1. */
__asm__(
    ".section .text.board_semihost,\"ax\",@progbits\n"
    ".globl board_semihost\n"
    ".type board_semihost, @function\n"
    ".balign 16\n"
    "board_semihost:\n"
    ".option push\n"
    ".option norvc\n"
    "slli x0, x0, 0x1f\n"
    "ebreak\n"
    "srai x0, x0, 7\n"
    ".option pop\n"
    "ret\n"
    ".size board_semihost, . - board_semihost\n");
