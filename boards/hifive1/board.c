/* hifive1 (FE310): UART0 receive through the PLIC (interrupt-driven), the clock from
 * the CLINT's mtime, and a machine timer interrupt every ~1 ms so board_idle can wait
 * with wfi. mtime counts the 32 768 Hz RTC clock on the HiFive1; QEMU 7.2's sifive_e
 * counts it at 10 MHz (RISCV_ACLINT_DEFAULT_TIMEBASE_FREQ), so BOARD_MTIME_HZ is a
 * build choice (boards.mk sets 10 MHz for the QEMU image). */
#include "board.h"
#define RX_RING_SIZE 256u
#include "rx_ring.h"

#define REG32(addr) (*(volatile uint32_t *)(uintptr_t)(addr))

#define UART0_BASE 0x10013000u
#define UART_TXDATA REG32(UART0_BASE + 0x00u) /* bit 31: full */
#define UART_RXDATA REG32(UART0_BASE + 0x04u) /* bit 31: empty */
#define UART_TXCTRL REG32(UART0_BASE + 0x08u) /* bit 0 txen */
#define UART_RXCTRL REG32(UART0_BASE + 0x0Cu) /* bit 0 rxen, bits 16..18 rxcnt */
#define UART_IE REG32(UART0_BASE + 0x10u)     /* bit 1 rxwm */
#define UART_DIV REG32(UART0_BASE + 0x18u)

#define CLINT_MTIMECMP_LO REG32(0x02004000u)
#define CLINT_MTIMECMP_HI REG32(0x02004004u)
#define CLINT_MTIME_LO REG32(0x0200BFF8u)
#define CLINT_MTIME_HI REG32(0x0200BFFCu)
#ifndef BOARD_MTIME_HZ
#define BOARD_MTIME_HZ 32768u
#endif
#define MTIME_HZ BOARD_MTIME_HZ

#define PLIC_BASE 0x0C000000u
#define PLIC_PRIORITY(irq) REG32(PLIC_BASE + 4u * (irq))
#define PLIC_ENABLE0 REG32(PLIC_BASE + 0x2000u)
#define PLIC_THRESHOLD REG32(PLIC_BASE + 0x200000u)
#define PLIC_CLAIM REG32(PLIC_BASE + 0x200004u)
#define UART0_IRQ 3u

#define MCAUSE_INT 0x80000000u
#define MCAUSE_TIMER 7u
#define MCAUSE_EXTERNAL 11u
#define MIE_MTIE (1u << 7)
#define MIE_MEIE (1u << 11)
#define MSTATUS_MIE (1u << 3)

static rx_ring rx;

static uint64_t mtime(void) {
    uint32_t hi, lo;
    do {
        hi = CLINT_MTIME_HI;
        lo = CLINT_MTIME_LO;
    } while (hi != CLINT_MTIME_HI);
    return ((uint64_t)hi << 32) | lo;
}

static void timer_arm(void) {
    uint64_t at = mtime() + MTIME_HZ / 1000u; /* 32 ticks, ~1 ms */
    CLINT_MTIMECMP_HI = 0xFFFFFFFFu;          /* no spurious match while updating */
    CLINT_MTIMECMP_LO = (uint32_t)at;
    CLINT_MTIMECMP_HI = (uint32_t)(at >> 32);
}

void board_on_trap(uint32_t mcause);

void board_on_trap(uint32_t mcause) {
    if (mcause == (MCAUSE_INT | MCAUSE_EXTERNAL)) {
        uint32_t irq = PLIC_CLAIM;
        if (irq == UART0_IRQ) {
            for (;;) {
                uint32_t d = UART_RXDATA;
                if (d & 0x80000000u) break;
                rx_ring_put(&rx, (uint8_t)d);
            }
        }
        if (irq) PLIC_CLAIM = irq; /* complete */
        return;
    }
    if (mcause == (MCAUSE_INT | MCAUSE_TIMER)) {
        timer_arm();
        return;
    }
    board_exit(BOARD_EXIT_FAULT);
}

void board_init(void) {
    /* 115 200 baud from the 16 MHz hfclk of a reset FE310 (div = 16e6 / 115200 - 1). */
    UART_DIV = 138u;
    UART_TXCTRL = 1u;
    UART_RXCTRL = 1u; /* rxen, watermark 0: interrupt while one byte is waiting */
    UART_IE = 2u;
    PLIC_PRIORITY(UART0_IRQ) = 1u;
    PLIC_ENABLE0 = 1u << UART0_IRQ;
    PLIC_THRESHOLD = 0u;
    timer_arm();
    uint32_t mie = MIE_MEIE | MIE_MTIE;
    __asm__ volatile("csrs mie, %0" ::"r"(mie));
    uint32_t mstatus = MSTATUS_MIE;
    __asm__ volatile("csrs mstatus, %0" ::"r"(mstatus));
}

size_t board_uart_read(uint8_t *buf, size_t cap) {
    return rx_ring_get(&rx, buf, cap);
}

void board_uart_write(const uint8_t *bytes, size_t n) {
    for (size_t i = 0; i < n; i++) {
        while (UART_TXDATA & 0x80000000u) {
        }
        UART_TXDATA = bytes[i];
    }
}

uint32_t board_uart_overruns(void) {
    return rx.overruns;
}

uint32_t board_now_ms(void) {
#if MTIME_HZ == 32768u
    return (uint32_t)((mtime() * 125u) >> 12); /* mtime * 1000 / 32768, exact */
#elif MTIME_HZ % 1000u == 0
    return (uint32_t)(mtime() / (MTIME_HZ / 1000u));
#else
#error "BOARD_MTIME_HZ: 32768 or a multiple of 1000"
#endif
}

/* The last 512 bytes of the 16 KB DTIM (link.ld: NV, outside every section and the
 * stack): QEMU's sifive_e backs the whole RAM with a file given
 * -machine sifive_e,memory-backend=...; the loader writes only the loaded sections. */
extern uint8_t _snvram[];
const struct hm_nv *board_nv(void) {
    return board_nv_over_ram(_snvram, 2, 256);
}

const char *board_name(void) {
    return "hifive1";
}

void board_idle(void) {
    __asm__ volatile("wfi" ::: "memory");
}

void board_exit(int code) {
    const uintptr_t block[2] = {0x20026u, (uintptr_t)code}; /* ADP_Stopped_ApplicationExit */
    for (;;) board_semihost(0x20u, block);                  /* SYS_EXIT_EXTENDED */
}
