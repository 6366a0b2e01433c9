/* mps2-an385: CMSDK APB UART0 (interrupt-driven receive), SysTick at 25 MHz. */
#include "board.h"
#include "cortex_m.h"
#include "rx_ring.h"

#define CPU_HZ 25000000u /* the AN385 SYSCLK (QEMU's mps2 machines: 25 MHz) */

#define UART0_BASE 0x40004000u
#define UART_DATA REG32(UART0_BASE + 0x00u)
#define UART_STATE REG32(UART0_BASE + 0x04u) /* bit 0 TX full, bit 1 RX full */
#define UART_CTRL REG32(UART0_BASE + 0x08u)  /* TX en 1, RX en 2, RX int en 8 */
#define UART_INTCLEAR REG32(UART0_BASE + 0x0Cu)
#define UART_BAUDDIV REG32(UART0_BASE + 0x10u)
#define UART0_RX_IRQ 0u

static rx_ring rx;
static volatile uint32_t ticks_ms;

void SysTick_Handler(void);
void UART0_RX_Handler(void);

void SysTick_Handler(void) {
    ticks_ms++;
}

/* Clear first, then drain: a byte that lands after the last read raises the
 * interrupt again instead of waiting unseen in DATA. */
void UART0_RX_Handler(void) {
    UART_INTCLEAR = 2u;
    while (UART_STATE & 2u) rx_ring_put(&rx, (uint8_t)UART_DATA);
}

void board_init(void) {
    /* 25 MHz / 217 = 115 200 baud; QEMU drops transmitted bytes below 16. */
    UART_BAUDDIV = CPU_HZ / 115200u;
    UART_CTRL = 1u | 2u | 8u;
    cortex_m_irq_enable(UART0_RX_IRQ);
    cortex_m_systick_start(CPU_HZ / 1000u);
    cortex_m_enable_interrupts();
}

size_t board_uart_read(uint8_t *buf, size_t cap) {
    return rx_ring_get(&rx, buf, cap);
}

void board_uart_write(const uint8_t *bytes, size_t n) {
    for (size_t i = 0; i < n; i++) {
        while (UART_STATE & 1u) {
        }
        UART_DATA = bytes[i];
    }
}

uint32_t board_uart_overruns(void) {
    return rx.overruns;
}

uint32_t board_now_ms(void) {
    return ticks_ms;
}

const char *board_name(void) {
    return "mps2-an385";
}

/* The machine's 16 MB PSRAM at 0x21000000: the image uses none of it, and QEMU backs
 * it with a file given -machine mps2-an385,memory-backend=... (a new file reads 0). */
const struct hm_nv *board_nv(void) {
    return board_nv_over_ram((uint8_t *)0x21000000u, 2, 1024);
}

void board_idle(void) {
    cortex_m_wfi();
}

void board_exit(int code) {
    const uintptr_t block[2] = {0x20026u, (uintptr_t)code}; /* ADP_Stopped_ApplicationExit */
    for (;;) board_semihost(0x20u, block);                  /* SYS_EXIT_EXTENDED */
}
