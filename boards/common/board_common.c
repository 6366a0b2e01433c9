/* What every board's startup shares: .data/.bss set-up and the stack paint. */
#include "board.h"

void board_copy_data_zero_bss(void) {
    uint32_t *src = _sidata, *dst = _sdata;
    while (dst < _edata) *dst++ = *src++;
    for (dst = _sbss; dst < _ebss; dst++) *dst = 0;
}

/* Paint from the bottom of the stack up to 64 bytes below the caller's frame. */
__attribute__((noinline)) void board_paint_stack(void) {
    uintptr_t sp = (uintptr_t)__builtin_frame_address(0) - 64u;
    volatile uint32_t *p = _stack_limit;
    while ((uintptr_t)p < sp) *p++ = BOARD_STACK_PAINT;
}

size_t board_stack_size(void) {
    return (size_t)((uintptr_t)_stack_top - (uintptr_t)_stack_limit);
}

size_t board_stack_untouched(void) {
    const volatile uint32_t *p = _stack_limit;
    while (p < _stack_top && *p == BOARD_STACK_PAINT) p++;
    return (size_t)((uintptr_t)p - (uintptr_t)_stack_limit);
}
