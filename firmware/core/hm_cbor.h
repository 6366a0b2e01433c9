/* Deterministic CBOR (SPEC §3): a writer and a strict reader over caller buffers.
 *
 * Profile (RFC 8949 §4.2.1 core deterministic encoding, restricted by SPEC §3): the
 * shortest head for every argument; definite lengths only; map keys are integers,
 * byte or text strings in strictly increasing bytewise order of their encodings;
 * simple values only f4 (false), f5 (true), f6 (null); no floats; text is UTF-8
 * (RFC 3629); nesting depth <= HM_CBOR_MAX_DEPTH (outermost item: depth 0).
 *
 * Writer invariants (hm_cbor_w):
 *  - Every head is the shortest form. Nothing is ever written at or beyond cap.
 *  - Errors are sticky: the first failure (OVERFLOW, or UTF8 for invalid text) is kept
 *    in w->err, and later calls write nothing. An item is written whole or not at all,
 *    so w->len always ends on an item boundary.
 *  - Map key order and element counts are the caller's job (the schema's).
 *
 * Reader invariants (hm_cbor_r):
 *  - Never reads outside p[0..len). Every head is checked in full: non-minimal
 *    arguments, additional information 28..31, floats and simple values other than
 *    false/true/null are refused wherever they appear (also every f8 xx, SPEC §3.2).
 *  - Errors are sticky: after the first failure every getter returns that error and
 *    leaves its outputs untouched; r->pos is then meaningless.
 *  - Byte and text strings are returned as pointers into the input (no copies).
 *  - The typed getters read one flat item each; the schema that calls them bounds the
 *    nesting. hm_cbor_check() validates a whole input generically (depth, map order,
 *    UTF-8, trailing bytes) without recursion: its explicit stack is
 *    HM_CBOR_MAX_DEPTH small entries.
 *  - hm_cbor_check() refuses exactly the inputs the host reference (host/hirmem/protocol/cbor.py
 *    decode) refuses; tests/test_native_wire.py checks this differentially.
 */
#ifndef HM_CBOR_H
#define HM_CBOR_H

#include <stddef.h>
#include <stdint.h>

#define HM_CBOR_MAX_DEPTH 16

typedef enum {
    HM_CBOR_OK = 0,
    HM_CBOR_E_OVERFLOW,    /* writer: the item does not fit the buffer */
    HM_CBOR_E_TRUNCATED,   /* input ends inside an item; a length or count beyond it */
    HM_CBOR_E_NON_MINIMAL, /* head argument not in its shortest form */
    HM_CBOR_E_INDEFINITE,  /* additional information 31: indefinite length or break */
    HM_CBOR_E_RESERVED,    /* additional information 28..30 */
    HM_CBOR_E_FLOAT,       /* f9, fa, fb */
    HM_CBOR_E_SIMPLE,      /* simple value other than false, true, null */
    HM_CBOR_E_UTF8,        /* text string not valid UTF-8 */
    HM_CBOR_E_MAP_KEY,     /* map key not an integer, byte or text string */
    HM_CBOR_E_MAP_ORDER,   /* map keys repeated or not in increasing order */
    HM_CBOR_E_DEPTH,       /* nesting deeper than HM_CBOR_MAX_DEPTH */
    HM_CBOR_E_TRAILING,    /* bytes after the item */
    HM_CBOR_E_TYPE,        /* schema: another kind of item than expected */
    HM_CBOR_E_RANGE        /* schema: integer, size or count outside its bounds */
} hm_cbor_err;

/* "ok", "overflow", "truncated", "non-minimal", "indefinite", "reserved", "float",
 * "simple", "utf8", "map-key", "map-order", "depth", "trailing", "type", "range". */
const char *hm_cbor_err_name(hm_cbor_err err);

/* 1 if s[0..n) is valid UTF-8 (RFC 3629: no overlong forms, no surrogates,
 * nothing above U+10FFFF), else 0. */
int hm_utf8_valid(const uint8_t *s, size_t n);

/* ---- writer ---------------------------------------------------------------- */

typedef struct {
    uint8_t *buf;
    size_t cap;
    size_t len;      /* bytes written */
    hm_cbor_err err; /* HM_CBOR_OK, HM_CBOR_E_OVERFLOW or HM_CBOR_E_UTF8 */
} hm_cbor_w;

void hm_cbor_w_init(hm_cbor_w *w, uint8_t *buf, size_t cap);
void hm_cbor_put_uint(hm_cbor_w *w, uint64_t v);
void hm_cbor_put_nint(hm_cbor_w *w, uint64_t n); /* the integer -1 - n */
void hm_cbor_put_bstr(hm_cbor_w *w, const uint8_t *p, size_t n);
void hm_cbor_put_tstr(hm_cbor_w *w, const uint8_t *p, size_t n); /* refuses bad UTF-8 */
void hm_cbor_put_array(hm_cbor_w *w, uint64_t count);            /* head only */
void hm_cbor_put_map(hm_cbor_w *w, uint64_t pairs);              /* head only */
void hm_cbor_put_tag(hm_cbor_w *w, uint64_t tag);                /* head only */
void hm_cbor_put_bool(hm_cbor_w *w, int v);
void hm_cbor_put_null(hm_cbor_w *w);
/* Bytes of a head with argument v in its shortest form (1, 2, 3, 5 or 9). */
size_t hm_cbor_head_size(uint64_t v);

/* ---- reader ---------------------------------------------------------------- */

typedef struct {
    const uint8_t *p;
    size_t len;
    size_t pos;      /* next byte to read */
    hm_cbor_err err; /* first failure, sticky */
} hm_cbor_r;

void hm_cbor_r_init(hm_cbor_r *r, const uint8_t *p, size_t len);

/* Major type (0..7) of the next item without consuming it; -1 at the end of the
 * input or after an error. */
int hm_cbor_peek(const hm_cbor_r *r);

/* Typed getters: each returns HM_CBOR_OK or the (sticky) error; TYPE if the next
 * item is of another kind, RANGE if it is outside the bounds given. */
hm_cbor_err hm_cbor_get_uint(hm_cbor_r *r, uint64_t max, uint64_t *v);
/* An integer of either sign: *neg = 0 for v, 1 for the value -1 - v. */
hm_cbor_err hm_cbor_get_int(hm_cbor_r *r, int *neg, uint64_t *v);
hm_cbor_err hm_cbor_get_bstr(hm_cbor_r *r, size_t min, size_t max, const uint8_t **p,
                             size_t *n);
hm_cbor_err hm_cbor_get_tstr(hm_cbor_r *r, size_t max, const uint8_t **p, size_t *n);
hm_cbor_err hm_cbor_get_array(hm_cbor_r *r, uint64_t *count); /* head only */
hm_cbor_err hm_cbor_expect_array(hm_cbor_r *r, uint64_t count); /* RANGE if another */
hm_cbor_err hm_cbor_get_map(hm_cbor_r *r, uint64_t *pairs); /* head only */
hm_cbor_err hm_cbor_get_tag(hm_cbor_r *r, uint64_t *tag);   /* head only */
hm_cbor_err hm_cbor_get_bool(hm_cbor_r *r, int *v);
hm_cbor_err hm_cbor_get_null(hm_cbor_r *r);

/* Skip one whole item, validated as hm_cbor_check() does (the item counts as depth 0). */
hm_cbor_err hm_cbor_skip(hm_cbor_r *r);
/* TRAILING if bytes remain (else the sticky error, or OK). */
hm_cbor_err hm_cbor_end(hm_cbor_r *r);

/* Exactly one deterministic item spans p[0..len) (SPEC §3). */
hm_cbor_err hm_cbor_check(const uint8_t *p, size_t len);

#endif
