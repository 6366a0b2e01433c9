/* stm32f4: USART1 (PB6 TX / PB7 RX, AF7) with interrupt-driven receive, SysTick.
 *
 * Clock: the core runs from the 16 MHz HSI after reset on hardware; QEMU's
 * netduinoplus2 models a fixed 168 MHz SYSCLK and no RCC (its registers read 0).
 * BOARD_CPU_HZ (default 168 MHz, boards.mk) is the clock SysTick and the baud
 * divisor assume; a hardware build for the Discovery kit without a PLL set-up
 * passes -DBOARD_CPU_HZ=16000000 (APB2 then equals the core clock too). */
#include "board.h"
#include "cortex_m.h"
#include "rx_ring.h"

#ifndef BOARD_CPU_HZ
#define BOARD_CPU_HZ 168000000u
#endif
#if BOARD_CPU_HZ > 84000000u
#define APB2_HZ (BOARD_CPU_HZ / 2u)
#else
#define APB2_HZ BOARD_CPU_HZ
#endif

#define RCC_AHB1ENR REG32(0x40023830u)
#define RCC_APB2ENR REG32(0x40023844u)
#define GPIOB_MODER REG32(0x40020400u)
#define GPIOB_AFRL REG32(0x40020420u)

#define USART1_BASE 0x40011000u
#define USART_SR REG32(USART1_BASE + 0x00u) /* bit 5 RXNE, bit 7 TXE, bit 3 ORE */
#define USART_DR REG32(USART1_BASE + 0x04u)
#define USART_BRR REG32(USART1_BASE + 0x08u)
#define USART_CR1 REG32(USART1_BASE + 0x0Cu) /* UE 13, RXNEIE 5, TE 3, RE 2 */
#define USART1_IRQ 37u

static rx_ring rx;
static volatile uint32_t ticks_ms;

void SysTick_Handler(void);
void USART1_Handler(void);

void SysTick_Handler(void) {
    ticks_ms++;
}

void USART1_Handler(void) {
    while (USART_SR & ((1u << 5) | (1u << 3))) rx_ring_put(&rx, (uint8_t)USART_DR);
}

void board_init(void) {
    RCC_AHB1ENR |= 1u << 1;  /* GPIOB */
    RCC_APB2ENR |= 1u << 4;  /* USART1 */
    GPIOB_MODER = (GPIOB_MODER & ~(0xFu << 12)) | (0xAu << 12); /* PB6, PB7: alternate */
    GPIOB_AFRL = (GPIOB_AFRL & ~(0xFFu << 24)) | (0x77u << 24); /* AF7: USART1 */
    USART_BRR = (APB2_HZ + 57600u) / 115200u;
    USART_CR1 = (1u << 13) | (1u << 5) | (1u << 3) | (1u << 2);
    cortex_m_irq_enable(USART1_IRQ);
    cortex_m_systick_start(BOARD_CPU_HZ / 1000u);
    cortex_m_enable_interrupts();
}

size_t board_uart_read(uint8_t *buf, size_t cap) {
    return rx_ring_get(&rx, buf, cap);
}

void board_uart_write(const uint8_t *bytes, size_t n) {
    for (size_t i = 0; i < n; i++) {
        while (!(USART_SR & (1u << 7))) {
        }
        USART_DR = bytes[i];
    }
}

uint32_t board_uart_overruns(void) {
    return rx.overruns;
}

uint32_t board_now_ms(void) {
    return ticks_ms;
}

/* netduinoplus2 in QEMU 7.2: no RAM a file can back was found, so the region is a RAM
 * shadow of a host file, through semihosting (only when the host names a file). */
const struct hm_nv *board_nv(void) {
    static uint8_t shadow[2 * 1024];
    return board_nv_over_semihost(shadow, 2, 1024);
}

const char *board_name(void) {
    return "stm32f4";
}

void board_idle(void) {
    cortex_m_wfi();
}

void board_exit(int code) {
    const uintptr_t block[2] = {0x20026u, (uintptr_t)code}; /* ADP_Stopped_ApplicationExit */
    for (;;) board_semihost(0x20u, block);                  /* SYS_EXIT_EXTENDED */
}
