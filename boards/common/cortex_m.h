/* Cortex-M system registers shared by the ARM boards (SysTick, NVIC, SCB). */
#ifndef CORTEX_M_H
#define CORTEX_M_H

#include <stdint.h>

#define REG32(addr) (*(volatile uint32_t *)(uintptr_t)(addr))

#define SYST_CSR REG32(0xE000E010u)
#define SYST_RVR REG32(0xE000E014u)
#define SYST_CVR REG32(0xE000E018u)
#define NVIC_ISER(n) REG32(0xE000E100u + 4u * (n))
#define NVIC_IPR_BYTE(irq) (*(volatile uint8_t *)(uintptr_t)(0xE000E400u + (irq)))

/* SysTick from the processor clock, an interrupt every `ticks` cycles. */
static inline void cortex_m_systick_start(uint32_t ticks) {
    SYST_RVR = ticks - 1u;
    SYST_CVR = 0;
    SYST_CSR = 7u; /* CLKSOURCE = processor, TICKINT, ENABLE */
}

static inline void cortex_m_irq_enable(unsigned irq) {
    NVIC_ISER(irq / 32u) = 1u << (irq % 32u);
}

static inline void cortex_m_enable_interrupts(void) {
    __asm__ volatile("cpsie i" ::: "memory");
}

static inline void cortex_m_wfi(void) {
    __asm__ volatile("wfi" ::: "memory");
}

#endif
