/* libFuzzer target: the deterministic CBOR reader and writer (hm_cbor).
 *
 * Every input is used three ways:
 *  1. hm_cbor_check() over the whole input must agree (accept / refuse) with an
 *     independent recursive validator written from SPEC §3 in this file, and with
 *     hm_cbor_skip() + hm_cbor_end() on a reader.
 *  2. When it is accepted: the typed getters walk the item and the writer re-encodes
 *     it, which must reproduce the input byte for byte (SPEC §3: re-encoding an
 *     accepted item reproduces its bytes); every proper prefix is TRUNCATED, one
 *     byte more is TRAILING; a getter of the wrong kind gives TYPE and stays sticky.
 *     hm_utf8_valid() agrees with the table-driven oracle on every text string.
 *  3. The input is also read as a script of writer calls into a buffer of exactly
 *     `cap` bytes (so ASan sees any write beyond it), compared call by call with a
 *     model of the writer: shortest heads, all-or-nothing items, sticky errors.
 */
#include <string.h>

#include "fuzz_common.h"
#include "hm_cbor.h"

/* ---- independent validator (SPEC §3) --------------------------------------------- */

typedef struct {
    const uint8_t *p;
    size_t len, pos;
} ref_r;

static int ref_head(ref_r *r, unsigned *mt, uint64_t *arg) {
    if (r->pos >= r->len) return 0;
    uint8_t ib = r->p[r->pos++];
    unsigned ai = ib & 31u;
    *mt = ib >> 5;
    if (ai < 24) {
        *arg = ai;
    } else if (ai <= 27) {
        static const uint64_t least[4] = {24, 0x100, 0x10000, 0x100000000ull};
        size_t n = (size_t)1 << (ai - 24);
        uint64_t v = 0;
        if (r->len - r->pos < n) return 0;
        for (size_t i = 0; i < n; i++) v = v << 8 | r->p[r->pos++];
        if (v < least[ai - 24]) return 0; /* not the shortest form */
        *arg = v;
    } else {
        return 0; /* 28..30 reserved, 31 indefinite / break */
    }
    if (*mt == 7 && (ai < 20 || ai > 22)) return 0; /* only false, true, null */
    return 1;
}

static int ref_item(ref_r *r, unsigned depth) {
    unsigned mt;
    uint64_t a;
    if (depth > HM_CBOR_MAX_DEPTH || !ref_head(r, &mt, &a)) return 0;
    switch (mt) {
    case 2:
    case 3:
        if (a > r->len - r->pos) return 0;
        if (mt == 3 && !fuzz_utf8_ok(r->p + r->pos, (size_t)a)) return 0;
        r->pos += (size_t)a;
        return 1;
    case 4:
        for (uint64_t i = 0; i < a; i++)
            if (!ref_item(r, depth + 1)) return 0;
        return 1;
    case 5: {
        size_t prev = 0, prev_len = 0;
        for (uint64_t i = 0; i < a; i++) {
            size_t k = r->pos;
            if (!ref_item(r, depth + 1)) return 0;
            size_t klen = r->pos - k;
            if ((r->p[k] >> 5) > 3) return 0; /* key: integer, bytes or text only */
            if (i > 0) {
                size_t m = klen < prev_len ? klen : prev_len;
                int c = memcmp(r->p + prev, r->p + k, m);
                if (c > 0 || (c == 0 && prev_len >= klen)) return 0; /* not increasing */
            }
            prev = k;
            prev_len = klen;
            if (!ref_item(r, depth + 1)) return 0;
        }
        return 1;
    }
    case 6:
        return ref_item(r, depth + 1);
    default:
        return 1;
    }
}

static int ref_check(const uint8_t *p, size_t len) {
    ref_r r = {p, len, 0};
    return ref_item(&r, 0) && r.pos == len;
}

/* ---- typed walk + re-encode --------------------------------------------------------- */

/* A getter of the wrong kind on a copy of r: TYPE, and sticky afterwards. */
static void check_wrong_getter(const hm_cbor_r *r, int major) {
    hm_cbor_r c = *r;
    uint64_t v;
    const uint8_t *s;
    size_t n;
    hm_cbor_err e = major == 0 ? hm_cbor_get_bstr(&c, 0, SIZE_MAX, &s, &n)
                               : hm_cbor_get_uint(&c, UINT64_MAX, &v);
    FUZZ_CHECK(e == HM_CBOR_E_TYPE);
    FUZZ_CHECK(c.err == HM_CBOR_E_TYPE);
    FUZZ_CHECK(hm_cbor_peek(&c) == -1);
    FUZZ_CHECK(hm_cbor_get_null(&c) == HM_CBOR_E_TYPE);
    FUZZ_CHECK(hm_cbor_skip(&c) == HM_CBOR_E_TYPE);
    FUZZ_CHECK(hm_cbor_end(&c) == HM_CBOR_E_TYPE);
}

static void copy_item(hm_cbor_r *r, hm_cbor_w *w, unsigned depth) {
    int mt = hm_cbor_peek(r);
    FUZZ_CHECK(depth <= HM_CBOR_MAX_DEPTH);
    FUZZ_CHECK(mt >= 0 && mt <= 7);
    check_wrong_getter(r, mt);
    switch (mt) {
    case 0:
    case 1: {
        int neg = -1;
        uint64_t v = 0, u = 0;
        if (mt == 0) { /* get_uint agrees, and a bound just below the value is RANGE */
            hm_cbor_r c = *r;
            FUZZ_CHECK(hm_cbor_get_uint(&c, UINT64_MAX, &u) == HM_CBOR_OK);
            if (u > 0) {
                hm_cbor_r lo = *r;
                FUZZ_CHECK(hm_cbor_get_uint(&lo, u - 1, &v) == HM_CBOR_E_RANGE);
            }
        }
        FUZZ_CHECK(hm_cbor_get_int(r, &neg, &v) == HM_CBOR_OK);
        FUZZ_CHECK(neg == mt);
        if (neg) {
            hm_cbor_put_nint(w, v);
        } else {
            FUZZ_CHECK(v == u);
            hm_cbor_put_uint(w, v);
        }
        break;
    }
    case 2:
    case 3: {
        const uint8_t *s = NULL;
        size_t n = 0;
        if (mt == 2) {
            hm_cbor_r c = *r;
            if (hm_cbor_get_bstr(&c, 0, SIZE_MAX, &s, &n) == HM_CBOR_OK && n > 0) {
                hm_cbor_r lo = *r, hi = *r;
                FUZZ_CHECK(hm_cbor_get_bstr(&lo, n + 1, SIZE_MAX, &s, &n) == HM_CBOR_E_RANGE);
                FUZZ_CHECK(hm_cbor_get_bstr(&hi, 0, n - 1, &s, &n) == HM_CBOR_E_RANGE);
            }
            FUZZ_CHECK(hm_cbor_get_bstr(r, 0, SIZE_MAX, &s, &n) == HM_CBOR_OK);
            hm_cbor_put_bstr(w, s, n);
        } else {
            FUZZ_CHECK(hm_cbor_get_tstr(r, SIZE_MAX, &s, &n) == HM_CBOR_OK);
            FUZZ_CHECK(fuzz_utf8_ok(s, n));
            FUZZ_CHECK(hm_utf8_valid(s, n));
            hm_cbor_put_tstr(w, s, n);
        }
        FUZZ_CHECK(s >= r->p && s + n <= r->p + r->len);
        break;
    }
    case 4:
    case 5: {
        uint64_t count = 0;
        if (mt == 4) {
            FUZZ_CHECK(hm_cbor_get_array(r, &count) == HM_CBOR_OK);
            hm_cbor_put_array(w, count);
        } else {
            FUZZ_CHECK(hm_cbor_get_map(r, &count) == HM_CBOR_OK);
            hm_cbor_put_map(w, count);
            FUZZ_CHECK(count <= (r->len - r->pos) / 2);
            count *= 2;
        }
        FUZZ_CHECK(count <= r->len - r->pos);
        for (uint64_t i = 0; i < count; i++) {
            if (mt == 5 && (i & 1) == 0) FUZZ_CHECK(hm_cbor_peek(r) <= 3); /* a key */
            copy_item(r, w, depth + 1);
        }
        break;
    }
    case 6: {
        uint64_t tag = 0;
        FUZZ_CHECK(hm_cbor_get_tag(r, &tag) == HM_CBOR_OK);
        hm_cbor_put_tag(w, tag);
        copy_item(r, w, depth + 1);
        break;
    }
    default: {
        uint8_t b = r->p[r->pos];
        if (b == 0xF6) {
            FUZZ_CHECK(hm_cbor_get_null(r) == HM_CBOR_OK);
            hm_cbor_put_null(w);
        } else {
            int v = -1;
            FUZZ_CHECK(b == 0xF4 || b == 0xF5);
            FUZZ_CHECK(hm_cbor_get_bool(r, &v) == HM_CBOR_OK);
            FUZZ_CHECK(v == (b == 0xF5));
            hm_cbor_put_bool(w, v);
        }
        break;
    }
    }
}

static void check_accepted(const uint8_t *data, size_t size) {
    /* typed walk and re-encode: exactly the input */
    uint8_t *out = malloc(size);
    hm_cbor_r r;
    hm_cbor_w w;
    FUZZ_CHECK(out != NULL);
    hm_cbor_r_init(&r, data, size);
    hm_cbor_w_init(&w, out, size);
    copy_item(&r, &w, 0);
    FUZZ_CHECK(hm_cbor_end(&r) == HM_CBOR_OK);
    FUZZ_CHECK(w.err == HM_CBOR_OK);
    FUZZ_CHECK(w.len == size);
    FUZZ_CHECK(memcmp(out, data, size) == 0);

    /* one byte less of room: the writer refuses, within its buffer */
    if (size > 0) {
        hm_cbor_r_init(&r, data, size);
        hm_cbor_w_init(&w, out, size - 1);
        copy_item(&r, &w, 0);
        FUZZ_CHECK(w.err == HM_CBOR_E_OVERFLOW);
        FUZZ_CHECK(w.len < size);
        FUZZ_CHECK(memcmp(out, data, w.len) == 0); /* whole items before the refusal */
    }
    free(out);

    /* CBOR is a prefix code: every proper prefix is truncated (two samples) */
    FUZZ_CHECK(hm_cbor_check(data, size - 1) == HM_CBOR_E_TRUNCATED);
    FUZZ_CHECK(hm_cbor_check(data, size / 2) == HM_CBOR_E_TRUNCATED);

    /* one byte more: trailing, whatever the byte */
    uint8_t *more = malloc(size + 1);
    FUZZ_CHECK(more != NULL);
    memcpy(more, data, size);
    more[size] = data[size / 3];
    FUZZ_CHECK(hm_cbor_check(more, size + 1) == HM_CBOR_E_TRAILING);
    free(more);
}

/* ---- writer script against a model -------------------------------------------------- */

static size_t model_head(uint8_t *h, unsigned major, uint64_t v) {
    if (v < 24) {
        h[0] = (uint8_t)(major << 5 | (unsigned)v);
        return 1;
    }
    size_t s = v <= 0xFF ? 1 : v <= 0xFFFF ? 2 : v <= 0xFFFFFFFFu ? 4 : 8;
    h[0] = (uint8_t)(major << 5 | (s == 1 ? 24u : s == 2 ? 25u : s == 4 ? 26u : 27u));
    for (size_t i = 0; i < s; i++) h[1 + i] = (uint8_t)(v >> (8 * (s - 1 - i)));
    return 1 + s;
}

static void writer_script(const uint8_t *data, size_t size) {
    fuzz_in in = {data, size, 0};
    size_t cap = fuzz_u16(&in) % 700u;
    uint8_t *buf = malloc(cap); /* exactly cap bytes: ASan catches a write beyond */
    uint8_t *model = malloc(cap + 1);
    size_t mlen = 0;
    hm_cbor_err merr = HM_CBOR_OK;
    hm_cbor_w w;
    FUZZ_CHECK(buf != NULL || cap == 0);
    FUZZ_CHECK(model != NULL);
    hm_cbor_w_init(&w, buf, cap);
    while (in.pos < in.len) {
        uint8_t op = fuzz_u8(&in);
        unsigned kind = op & 7u, width = (op >> 3) & 3u;
        uint64_t v = width == 0 ? fuzz_u8(&in) : width == 1 ? fuzz_u16(&in)
                     : width == 2 ? fuzz_u32(&in) : fuzz_u64(&in);
        const uint8_t *s = NULL;
        size_t n = 0, hl;
        uint8_t h[9];
        unsigned major = kind;
        if (kind == 2 || kind == 3) {
            s = fuzz_take(&in, (size_t)(v & 0x3FF), &n);
            v = n;
        }
        if (kind == 7) {
            v = (op >> 3) % 3 + 20;
            n = 0;
        }
        hl = model_head(h, major, v);
        switch (kind) {
        case 0: hm_cbor_put_uint(&w, v); break;
        case 1: hm_cbor_put_nint(&w, v); break;
        case 2: hm_cbor_put_bstr(&w, s, n); break;
        case 3: hm_cbor_put_tstr(&w, s, n); break;
        case 4: hm_cbor_put_array(&w, v); break;
        case 5: hm_cbor_put_map(&w, v); break;
        case 6: hm_cbor_put_tag(&w, v); break;
        default:
            if (v == 22) hm_cbor_put_null(&w);
            else hm_cbor_put_bool(&w, v == 21 ? (int)(op >> 5) + 1 : 0);
            break;
        }
        if (merr == HM_CBOR_OK) {
            if (kind == 3 && !fuzz_utf8_ok(s, n)) {
                merr = HM_CBOR_E_UTF8;
            } else if (hl + n > cap - mlen) {
                merr = HM_CBOR_E_OVERFLOW;
            } else {
                memcpy(model + mlen, h, hl);
                if (n) memcpy(model + mlen + hl, s, n);
                mlen += hl + n;
            }
        }
        FUZZ_CHECK(w.err == merr);
        FUZZ_CHECK(w.len == mlen);
        FUZZ_CHECK(w.len <= cap);
    }
    FUZZ_CHECK(mlen == 0 || memcmp(buf, model, mlen) == 0);
    free(model);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    hm_cbor_err e = hm_cbor_check(data, size);
    int ref = ref_check(data, size);
    hm_cbor_r r;

    FUZZ_CHECK((unsigned)e <= HM_CBOR_E_RANGE);
    FUZZ_CHECK(e != HM_CBOR_E_OVERFLOW && e != HM_CBOR_E_TYPE && e != HM_CBOR_E_RANGE);
    FUZZ_CHECK(strcmp(hm_cbor_err_name(e), "?") != 0);
    FUZZ_CHECK((e == HM_CBOR_OK) == ref); /* the core and the SPEC agree */
    FUZZ_CHECK(hm_utf8_valid(data, size) == fuzz_utf8_ok(data, size));

    hm_cbor_r_init(&r, data, size);
    if (hm_cbor_skip(&r) == HM_CBOR_OK) {
        FUZZ_CHECK(r.pos <= size && r.pos > 0);
        FUZZ_CHECK(hm_cbor_end(&r) == e); /* OK, or TRAILING after one whole item */
        FUZZ_CHECK(e == HM_CBOR_OK || e == HM_CBOR_E_TRAILING);
        FUZZ_CHECK(hm_cbor_check(data, r.pos) == HM_CBOR_OK);
    } else {
        FUZZ_CHECK(r.err == e); /* the first item already fails, for the same reason */
    }

    if (e == HM_CBOR_OK) check_accepted(data, size);
    writer_script(data, size);
    return 0;
}
