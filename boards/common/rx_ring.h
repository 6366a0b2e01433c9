/* A single-producer (the receive interrupt) / single-consumer (the main loop) byte
 * ring. Capacity RX_RING_SIZE, a power of two; head and tail run freely (uint32_t)
 * and only the owner writes each: head by the interrupt, tail by the main loop.
 * Full: the byte is dropped and counted. */
#ifndef RX_RING_H
#define RX_RING_H

#include <stddef.h>
#include <stdint.h>

#ifndef RX_RING_SIZE
#define RX_RING_SIZE 1024u
#endif
#if (RX_RING_SIZE & (RX_RING_SIZE - 1u)) != 0
#error "RX_RING_SIZE must be a power of two"
#endif

typedef struct {
    volatile uint32_t head, tail, overruns;
    uint8_t buf[RX_RING_SIZE];
} rx_ring;

static inline void rx_ring_put(rx_ring *r, uint8_t b) {
    uint32_t head = r->head;
    if (head - r->tail >= RX_RING_SIZE) {
        r->overruns++;
        return;
    }
    r->buf[head & (RX_RING_SIZE - 1u)] = b;
    __asm__ volatile("" ::: "memory"); /* the byte before the index */
    r->head = head + 1u;
}

static inline size_t rx_ring_get(rx_ring *r, uint8_t *out, size_t cap) {
    uint32_t tail = r->tail, head = r->head;
    size_t n = 0;
    __asm__ volatile("" ::: "memory");
    while (tail != head && n < cap) out[n++] = r->buf[tail++ & (RX_RING_SIZE - 1u)];
    r->tail = tail;
    return n;
}

#endif
