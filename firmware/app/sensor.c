#include "sensor.h"

#define ALL_CHECKS 0x0FFFu

static uint32_t next(sensor *s) {
    uint32_t x = s->state;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    s->state = x;
    return x;
}

void sensor_init(sensor *s, uint32_t seed) {
    s->state = seed ? seed : 0x9E3779B9u;
    s->count = 0;
    s->centi = 2150;
}

size_t app_utoa(uint32_t v, char *out) {
    char tmp[10];
    size_t n = 0, i;
    do {
        tmp[n++] = (char)('0' + v % 10u);
        v /= 10u;
    } while (v);
    for (i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
    return n;
}

static size_t put(uint8_t *p, size_t at, const char *text) {
    while (*text) p[at++] = (uint8_t)*text++;
    return at;
}

void sensor_next(sensor *s, sensor_reading *out) {
    uint32_t r = next(s) % 100u;
    uint32_t walk = next(s) % 41u; /* a random walk of -0.20 .. +0.20 degrees */
    char num[11];
    size_t n = 0, k;
    uint32_t mag;

    s->centi += (int32_t)walk - 20;
    if (s->centi < -4000) s->centi = -4000;
    if (s->centi > 8500) s->centi = 8500;
    s->count++;

    /* {"t":21.53,"n":17} */
    n = put(out->payload, n, "{\"t\":");
    if (s->centi < 0) out->payload[n++] = '-';
    mag = (uint32_t)(s->centi < 0 ? -s->centi : s->centi);
    k = app_utoa(mag / 100u, num);
    for (size_t i = 0; i < k; i++) out->payload[n++] = (uint8_t)num[i];
    out->payload[n++] = '.';
    out->payload[n++] = (uint8_t)('0' + (mag / 10u) % 10u);
    out->payload[n++] = (uint8_t)('0' + mag % 10u);
    n = put(out->payload, n, ",\"n\":");
    k = app_utoa(s->count, num);
    for (size_t i = 0; i < k; i++) out->payload[n++] = (uint8_t)num[i];
    out->payload[n++] = '}';
    out->payload_len = n;

    if (r < 70u)
        out->flags = ALL_CHECKS;
    else if (r < 85u)
        out->flags = ALL_CHECKS & ~0x11u;
    else if (r < 93u)
        out->flags = ALL_CHECKS & ~0x31u;
    else if (r < 97u)
        out->flags = ALL_CHECKS & ~0x400u;
    else
        out->flags = ALL_CHECKS & ~0x40u;
    out->confidence = 0x9999u + (next(s) % 0x6668u); /* 0.60 .. 1.00 */
    out->provenance = 0xCCCCu + (next(s) % 0x3335u); /* 0.80 .. 1.00 */
    out->priority = 0x8000u;
}
