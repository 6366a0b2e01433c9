/* The interface between a benchmark machine's startup (mps2-an385/, sifive_e/) and
 * bench_main.c. Bench-only: the real board support lives in boards/.
 *
 * A machine folder provides startup.c (reset: copy .data, zero .bss, run bench_main,
 * exit through semihosting; every fault or trap ends in bench_fault) and link.ld,
 * which defines the symbols below. The stack is everything from _stack_limit (the
 * end of .bss) up to _stack_top (the end of RAM); it grows down.
 */
#ifndef BENCH_PORT_H
#define BENCH_PORT_H

#include <stdint.h>

/* Semihosting operations (ARM "Semihosting for AArch32 and AArch64", also RISC-V). */
#define BENCH_SYS_WRITE0 0x04u        /* argument: a NUL-terminated string */
#define BENCH_SYS_EXIT_EXTENDED 0x20u /* argument: {reason, exit code} */
#define BENCH_ADP_STOPPED_APPLICATION_EXIT 0x20026u

/* Exit codes of the image (QEMU exits with them). */
#define BENCH_EXIT_OK 0
#define BENCH_EXIT_CHECK 1 /* a result differs from its known answer */
#define BENCH_EXIT_STACK 2 /* the stack reached _stack_limit */
#define BENCH_EXIT_FAULT 3 /* a CPU fault or trap */

/* Linker script symbols (addresses only). */
extern uint32_t _sram[];   /* start of RAM */
extern uint32_t _sidata[]; /* load address of .data in flash */
extern uint32_t _sdata[], _edata[];
extern uint32_t _sbss[], _ebss[];
extern uint32_t _stack_limit[], _stack_top[];

/* Machine startup: one semihosting call (op, argument block), returning r0 / a0. */
uintptr_t bench_semihost(uintptr_t op, const void *arg);
void bench_reset(void);

/* bench_main.c */
int bench_main(void);                               /* an exit code, BENCH_EXIT_OK if good */
void bench_exit(int code) __attribute__((noreturn)); /* SYS_EXIT_EXTENDED */
void bench_fault(void) __attribute__((noreturn));    /* reports and exits BENCH_EXIT_FAULT */

/* The current stack pointer. */
static inline uintptr_t bench_sp(void) {
    uintptr_t sp;
#if defined(__arm__)
    __asm__ volatile("mov %0, sp" : "=r"(sp));
#elif defined(__riscv)
    __asm__ volatile("mv %0, sp" : "=r"(sp));
#else
#error "bench_port.h: unknown architecture"
#endif
    return sp;
}

#endif
