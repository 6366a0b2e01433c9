/* A synthetic sensor: a deterministic stream of temperature readings with the
 * ACTION_FLAGS a real pipeline would attach, some of them failing the gate.
 *
 * Deterministic: the same seed gives the same sequence of readings and flags on
 * every board (xorshift32). Per reading, from one draw r = next() % 100:
 *   r < 70   every check passes                       -> GREEN candidate
 *   r < 85   baseline misaligned (bit 4) and no uncertainty disclosure (bit 0)
 *   r < 93   three soft checks fail (bits 0, 4, 5)    -> RED, quarantined
 *   r < 97   consent not enforced (bit 10)            -> hard fail, quarantined
 *   else     invariant violated (bit 6)               -> hard fail, quarantined
 * Confidence 0.60..1.00 and provenance 0.80..1.00 (Q16.16) vary with the reading.
 */
#ifndef SENSOR_H
#define SENSOR_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t state; /* xorshift32, never 0 */
    uint32_t count; /* readings produced */
    int32_t centi;  /* the temperature, hundredths of a degree */
} sensor;

typedef struct {
    uint8_t payload[40];
    size_t payload_len;
    uint32_t flags, confidence, provenance, priority;
} sensor_reading;

void sensor_init(sensor *s, uint32_t seed);
void sensor_next(sensor *s, sensor_reading *out);

/* Decimal text of v into out (at least 11 bytes); returns the length. */
size_t app_utoa(uint32_t v, char *out);

#endif
