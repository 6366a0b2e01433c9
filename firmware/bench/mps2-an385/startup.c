/* Bench-only startup for QEMU's mps2-an385 (Cortex-M3): vector table, reset, faults,
 * semihosting. No clocks, no UART: results leave through semihosting. */
#include <stdint.h>

#include "bench_port.h"

typedef void (*bench_handler)(void);

static void fault_handler(void) {
    bench_fault();
}

/* ARMv7-M: initial SP, then Reset, NMI, HardFault, MemManage, BusFault, UsageFault,
 * four reserved, SVCall, DebugMonitor, reserved, PendSV, SysTick. No interrupt is ever
 * enabled, so no external vector is needed. */
struct vector_table {
    uint32_t *initial_sp;
    bench_handler handler[15];
};

__attribute__((section(".vectors"), used)) static const struct vector_table vectors = {
    _stack_top,
    {bench_reset, fault_handler, fault_handler, fault_handler, fault_handler, fault_handler,
     0, 0, 0, 0, fault_handler, fault_handler, 0, fault_handler, fault_handler},
};

void bench_reset(void) {
    uint32_t *src = _sidata, *dst = _sdata;
    while (dst < _edata) *dst++ = *src++;
    for (dst = _sbss; dst < _ebss; dst++) *dst = 0;
    bench_exit(bench_main());
}

uintptr_t bench_semihost(uintptr_t op, const void *arg) {
    register uintptr_t r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}
