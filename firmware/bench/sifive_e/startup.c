/* Bench-only startup for QEMU's sifive_e (FE310, rv32imac): entry, trap, semihosting.
 * No clocks, no UART, no interrupts: results leave through semihosting. */
#include <stdint.h>

#include "bench_port.h"

void _start(void);
void bench_trap(void);

/* Reset lands here (first in flash, see link.ld): set the stack, send every trap to
 * bench_trap, and continue in C. gp is not used (no __global_pointer$). */
__attribute__((naked, section(".text.start"))) void _start(void) {
    __asm__ volatile(
        "la sp, _stack_top\n"
        "la t0, bench_trap\n"
        "csrw mtvec, t0\n"
        "j bench_reset\n");
}

/* Any exception (mtvec direct mode needs a 4-aligned address): report it from a fresh
 * stack, in case the stack overflowed. */
__attribute__((naked, aligned(4))) void bench_trap(void) {
    __asm__ volatile(
        "la sp, _stack_top\n"
        "j bench_fault\n");
}

void bench_reset(void) {
    uint32_t *src = _sidata, *dst = _sdata;
    while (dst < _edata) *dst++ = *src++;
    for (dst = _sbss; dst < _ebss; dst++) *dst = 0;
    bench_exit(bench_main());
}

/* The RISC-V semihosting call: ebreak between slli x0 and srai x0 (uncompressed, one
 * page: the host reads the neighbours), operation in a0, argument in a1, result a0. */
__asm__(
    ".section .text.bench_semihost,\"ax\",@progbits\n"
    ".globl bench_semihost\n"
    ".type bench_semihost, @function\n"
    ".balign 16\n"
    "bench_semihost:\n"
    ".option push\n"
    ".option norvc\n"
    "slli x0, x0, 0x1f\n"
    "ebreak\n"
    "srai x0, x0, 7\n"
    ".option pop\n"
    "ret\n"
    ".size bench_semihost, . - bench_semihost\n");
