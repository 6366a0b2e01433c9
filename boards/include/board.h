/* board.h — what a board gives the application (firmware/app/), and nothing more.
 *
 * Every board folder (boards/<board>/) implements this interface in its board.c and
 * startup.c; the application never touches a register. The portable core
 * (firmware/core/) includes none of this.
 *
 * INVARIANTS
 *  - board_init() is called once, first, by main(); before it only startup code runs.
 *  - Receive is interrupt-driven on every board: the UART receive interrupt moves
 *    each byte into a 1 KB (hifive1: 256 B) single-producer/single-consumer ring;
 *    board_uart_read() empties it from the main loop. Bytes arriving while the ring
 *    is full are dropped and counted (board_uart_overruns); nothing else is lost
 *    while the core is busy (signing a pack, verifying a knowledge pack).
 *  - board_uart_write() blocks until every byte is in the transmitter.
 *  - board_now_ms() is monotonic and wraps at 2^32 (SysTick interrupt on Cortex-M,
 *    the CLINT mtime counter on the FE310).
 *  - board_exit() ends the program with a code (QEMU exits with it through
 *    semihosting; on hardware without a debugger the board halts in a loop).
 *  - The stack is painted with BOARD_STACK_PAINT at reset (from _stack_limit, the
 *    end of .bss, to just below the reset handler's frame); board_stack_untouched()
 *    counts the bytes still painted from the bottom, i.e. the high-water mark is
 *    board_stack_size() - board_stack_untouched().
 */
#ifndef BOARD_H
#define BOARD_H

#include <stddef.h>
#include <stdint.h>

/* Exit codes of a board image (documented in boards/README.md). */
#define BOARD_EXIT_OK 0
#define BOARD_EXIT_FAULT 1          /* a CPU fault, trap or unexpected interrupt */
#define BOARD_EXIT_STACK 2          /* the stack paint at the bottom was overwritten */
#define BOARD_EXIT_UNPROVISIONED 3  /* the key slot is not provisioned (or damaged) */
#define BOARD_EXIT_CONFIG 4         /* hm_agent_init refused the slot's configuration */
#define BOARD_EXIT_NV 5             /* the non-volatile state could not be read or saved */

#define BOARD_STACK_PAINT 0x5AA5C33Cu

void board_init(void);
size_t board_uart_read(uint8_t *buf, size_t cap);
void board_uart_write(const uint8_t *bytes, size_t n);
uint32_t board_uart_overruns(void);
uint32_t board_now_ms(void);
const char *board_name(void);
void board_idle(void); /* wait for the next interrupt (or return at once) */
void board_exit(int code) __attribute__((noreturn));

/* The board's non-volatile region (hm_nv.h), or NULL if it has none. In QEMU
 * (boards/README.md "Non-volatile state"), with the NOR rules enforced by hm_nvram:
 * mps2-an385 2 pages of 1 KB at 0x21000000 and hifive1 2 pages of 256 B at the end of
 * the DTIM, RAM that a file backs; stm32f4 2 pages of 1 KB written through to a host
 * file by semihosting (only when the host names one). */
struct hm_nv;
const struct hm_nv *board_nv(void);
/* The common drivers behind it (boards/common/board_nv.c): hm_nvram over `pages`
 * pages of `page_size` bytes of RAM, or of a RAM shadow of a semihosting file. */
const struct hm_nv *board_nv_over_ram(uint8_t *base, uint32_t pages, uint32_t page_size);
const struct hm_nv *board_nv_over_semihost(uint8_t *shadow, uint32_t pages,
                                           uint32_t page_size);

/* Stack accounting (boards/common/board_common.c). */
size_t board_stack_size(void);
size_t board_stack_untouched(void);

/* Shared by the boards' startup code (boards/common/board_common.c). */
void board_copy_data_zero_bss(void);
void board_paint_stack(void);
int main(void);

/* Linker script symbols (addresses only). */
extern uint32_t _sidata[], _sdata[], _edata[], _sbss[], _ebss[];
extern uint32_t _stack_limit[], _stack_top[];

/* Semihosting (ARM bkpt 0xab / RISC-V slli-ebreak-srai), in each board's startup.c. */
uintptr_t board_semihost(uintptr_t op, const void *arg);

#endif
