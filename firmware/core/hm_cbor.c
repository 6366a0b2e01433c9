#include "hm_cbor.h"

#include <string.h>

const char *hm_cbor_err_name(hm_cbor_err err) {
    static const char *const names[] = {
        "ok",       "overflow", "truncated", "non-minimal", "indefinite",
        "reserved", "float",    "simple",    "utf8",        "map-key",
        "map-order", "depth",   "trailing",  "type",        "range"};
    return (unsigned)err < sizeof names / sizeof names[0] ? names[err] : "?";
}

/* ACSL contracts (verify/framac, tools/verify_c.py): WP proves each of the reader's
 * functions free of out-of-bounds reads for any reader over a readable buffer. */
/*@ requires \valid_read(s + (0 .. n - 1));
    assigns \nothing; */
int hm_utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    /*@ loop invariant i <= n;
        loop assigns i; */
    while (i < n) {
        uint32_t c = s[i++];
        if (c < 0x80) continue;
        if (c < 0xC2 || c > 0xF4) return 0; /* continuation, overlong lead, > U+10FFFF */
        unsigned k = c >= 0xF0 ? 3u : c >= 0xE0 ? 2u : 1u; /* continuation bytes */
        uint32_t cp = c & (0x3Fu >> k);
        if (k > n - i) return 0;
        /*@ loop invariant j <= k && i == \at(i, LoopEntry) + j;
            loop assigns i, j, cp; */
        for (unsigned j = 0; j < k; j++) {
            uint32_t d = s[i++];
            if ((d & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (d & 0x3F);
        }
        if ((k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
            (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
            return 0;
    }
    return 1;
}

/* ---- writer ---------------------------------------------------------------- */

void hm_cbor_w_init(hm_cbor_w *w, uint8_t *buf, size_t cap) {
    w->buf = buf;
    w->cap = cap;
    w->len = 0;
    w->err = HM_CBOR_OK;
}

/*@ assigns \nothing;
    ensures 1 <= \result <= 9; */
size_t hm_cbor_head_size(uint64_t v) {
    return v < 24 ? 1u : v <= 0xFFu ? 2u : v <= 0xFFFFu ? 3u : v <= 0xFFFFFFFFu ? 5u : 9u;
}

/* One head with the shortest argument, then n content bytes; all or nothing. */
static void put(hm_cbor_w *w, unsigned major, uint64_t v, const uint8_t *p, size_t n) {
    uint8_t h[9];
    size_t hl = hm_cbor_head_size(v), s = hl - 1; /* s: argument bytes, 0 1 2 4 8 */
    /* additional information: v itself, or 24 25 26 27 for 1 2 4 8 bytes */
    unsigned info = s == 0 ? (unsigned)v : 24u + (s > 1) + (s > 2) + (s > 4);
    if (w->err) return;
    for (size_t i = s; i > 0; i--, v >>= 8) h[i] = (uint8_t)v; /* big-endian, constant shifts */
    h[0] = (uint8_t)(major << 5 | info);
    if (hl > w->cap - w->len || n > w->cap - w->len - hl) {
        w->err = HM_CBOR_E_OVERFLOW;
        return;
    }
    memcpy(w->buf + w->len, h, hl);
    if (n) memcpy(w->buf + w->len + hl, p, n);
    w->len += hl + n;
}

void hm_cbor_put_uint(hm_cbor_w *w, uint64_t v) { put(w, 0, v, NULL, 0); }
void hm_cbor_put_nint(hm_cbor_w *w, uint64_t n) { put(w, 1, n, NULL, 0); }
void hm_cbor_put_bstr(hm_cbor_w *w, const uint8_t *p, size_t n) { put(w, 2, n, p, n); }
void hm_cbor_put_array(hm_cbor_w *w, uint64_t count) { put(w, 4, count, NULL, 0); }
void hm_cbor_put_map(hm_cbor_w *w, uint64_t pairs) { put(w, 5, pairs, NULL, 0); }
void hm_cbor_put_tag(hm_cbor_w *w, uint64_t tag) { put(w, 6, tag, NULL, 0); }
void hm_cbor_put_bool(hm_cbor_w *w, int v) { put(w, 7, v ? 21u : 20u, NULL, 0); }
void hm_cbor_put_null(hm_cbor_w *w) { put(w, 7, 22, NULL, 0); }

void hm_cbor_put_tstr(hm_cbor_w *w, const uint8_t *p, size_t n) {
    if (!w->err && !hm_utf8_valid(p, n)) w->err = HM_CBOR_E_UTF8;
    put(w, 3, n, p, n);
}

/* ---- reader ---------------------------------------------------------------- */

/*@ predicate hm_reader(hm_cbor_r *r) =
      \valid(r) && \valid_read(r->p + (0 .. r->len - 1));
    predicate hm_reader_at(hm_cbor_r *r) = hm_reader(r) && r->pos <= r->len;
    // what a function of the reader returns: OK, or the sticky error it left in r->err
    predicate hm_outcome(hm_cbor_r *r, hm_cbor_err e) =
      e == HM_CBOR_OK || (e == r->err && e != HM_CBOR_OK);
    // an item read: pos moved past its head (one byte, two or more for an argument of
    // 24 or more) and `rest` bytes of content, still inside the input (the callers'
    // layout facts: hm_pack.c's COSE parse)
    predicate hm_moved{L1, L2}(hm_cbor_r *r, integer arg, integer rest) =
      \at(r->pos, L1) + 1 + (arg >= 24 ? 1 : 0) + rest <= \at(r->pos, L2) <= \at(r->len, L2); */

/*@ requires \valid(r) && \valid_read(p + (0 .. len - 1));
    assigns *r;
    ensures hm_reader_at(r) && r->p == p && r->len == len; */
void hm_cbor_r_init(hm_cbor_r *r, const uint8_t *p, size_t len) {
    r->p = p;
    r->len = len;
    r->pos = 0;
    r->err = HM_CBOR_OK;
}

/*@ requires \valid(r) && err != HM_CBOR_OK;
    assigns r->err;
    ensures \result == err && r->err == err; */
static hm_cbor_err fail(hm_cbor_r *r, hm_cbor_err err) {
    r->err = err;
    return err;
}

/* Read and check one head: shortest argument, no 28..31, no floats, and of the
 * simple values only false/true/null (f8 xx never). */
/*@ requires hm_reader(r) && \valid(major) && \valid(arg) && \separated(r, major, arg);
    assigns r->pos, r->err, *major, *arg;
    ensures hm_outcome(r, \result);
    ensures \result == HM_CBOR_OK ==>
            r->pos <= r->len && \initialized(major) && \initialized(arg);
    ensures \result == HM_CBOR_OK ==> hm_moved{Old, Post}(r, *arg, 0); */
static hm_cbor_err head(hm_cbor_r *r, unsigned *major, uint64_t *arg) {
    if (r->err) return r->err;
    if (r->pos >= r->len) return fail(r, HM_CBOR_E_TRUNCATED);
    unsigned ib = r->p[r->pos++];
    unsigned mt = ib >> 5, info = ib & 31u;
    uint64_t v = info;
    if (info >= 24) {
        if (info > 27) return fail(r, info == 31 ? HM_CBOR_E_INDEFINITE : HM_CBOR_E_RESERVED);
        size_t s = (size_t)1 << (info - 24);
        if (s > r->len - r->pos) return fail(r, HM_CBOR_E_TRUNCATED);
        if (mt == 7) return fail(r, s == 1 ? HM_CBOR_E_SIMPLE : HM_CBOR_E_FLOAT);
        v = 0;
        /*@ loop invariant i <= s && r->pos == \at(r->pos, LoopEntry) + i && (i == 0 ==> v == 0);
            loop assigns i, v, r->pos; */
        for (size_t i = 0; i < s; i++) v = v << 8 | r->p[r->pos++];
        if (hm_cbor_head_size(v) != 1 + s) return fail(r, HM_CBOR_E_NON_MINIMAL);
    }
    if (mt == 7 && (v < 20 || v > 22)) return fail(r, HM_CBOR_E_SIMPLE);
    *major = mt;
    *arg = v;
    return HM_CBOR_OK;
}

/* A head of the wanted major type (TYPE otherwise). */
/*@ requires hm_reader(r) && \valid(arg) && \separated(r, arg);
    assigns r->pos, r->err, *arg;
    ensures hm_outcome(r, \result);
    ensures \result == HM_CBOR_OK ==> r->pos <= r->len && \initialized(arg);
    ensures \result == HM_CBOR_OK ==> hm_moved{Old, Post}(r, *arg, 0); */
static hm_cbor_err want(hm_cbor_r *r, unsigned major, uint64_t *arg) {
    unsigned mt;
    if (head(r, &mt, arg)) return r->err;
    return mt == major ? HM_CBOR_OK : fail(r, HM_CBOR_E_TYPE);
}

/* n content bytes of a string at r->pos. */
/*@ requires hm_reader_at(r) && \valid(p) && \separated(r, p);
    assigns r->pos, r->err, *p;
    ensures hm_outcome(r, \result);
    ensures \result == HM_CBOR_OK ==> r->pos <= r->len && \initialized(p);
    ensures \result == HM_CBOR_OK ==> *p == r->p + \old(r->pos);
    ensures \result == HM_CBOR_OK ==> r->pos == \old(r->pos) + n; */
static hm_cbor_err take(hm_cbor_r *r, uint64_t n, const uint8_t **p) {
    if (n > r->len - r->pos) return fail(r, HM_CBOR_E_TRUNCATED);
    *p = r->p + r->pos;
    r->pos += (size_t)n;
    return HM_CBOR_OK;
}

/*@ requires \valid_read(r) && \valid_read(r->p + (0 .. r->len - 1));
    assigns \nothing; */
int hm_cbor_peek(const hm_cbor_r *r) {
    return r->err || r->pos >= r->len ? -1 : r->p[r->pos] >> 5;
}

/*@ requires hm_reader(r) && \valid(v) && \separated(r, v);
    assigns r->pos, r->err, *v;
    ensures hm_outcome(r, \result);
    ensures \result == HM_CBOR_OK ==> \initialized(v);
    ensures \result == HM_CBOR_OK ==> hm_moved{Old, Post}(r, 0, 0); */
hm_cbor_err hm_cbor_get_uint(hm_cbor_r *r, uint64_t max, uint64_t *v) {
    uint64_t a;
    if (want(r, 0, &a)) return r->err;
    if (a > max) return fail(r, HM_CBOR_E_RANGE);
    *v = a;
    return HM_CBOR_OK;
}

/*@ requires hm_reader(r) && \valid(neg) && \valid(v) && \separated(r, neg, v);
    assigns r->pos, r->err, *neg, *v;
    ensures hm_outcome(r, \result);
    ensures \result == HM_CBOR_OK ==> \initialized(neg) && \initialized(v); */
hm_cbor_err hm_cbor_get_int(hm_cbor_r *r, int *neg, uint64_t *v) {
    unsigned mt;
    uint64_t a;
    if (head(r, &mt, &a)) return r->err;
    if (mt > 1) return fail(r, HM_CBOR_E_TYPE);
    *neg = (int)mt;
    *v = a;
    return HM_CBOR_OK;
}

/*@ requires hm_reader(r) && \valid(p) && \valid(n) && \separated(r, p, n);
    assigns r->pos, r->err, *p, *n;
    ensures hm_outcome(r, \result);
    ensures \result == HM_CBOR_OK ==> \initialized(p) && \initialized(n);
    ensures \result == HM_CBOR_OK ==> \valid_read(*p + (0 .. *n - 1));
    ensures \result == HM_CBOR_OK ==>
            min <= *n <= max && hm_moved{Old, Post}(r, *n, *n) && *p == r->p + (r->pos - *n);
    ensures \result != HM_CBOR_OK ==> *p == \old(*p) && *n == \old(*n); */
static hm_cbor_err get_str(hm_cbor_r *r, unsigned major, size_t min, size_t max,
                           const uint8_t **p, size_t *n) {
    uint64_t a;
    const uint8_t *s;
    if (want(r, major, &a) || take(r, a, &s)) return r->err;
    if (major == 3 && !hm_utf8_valid(s, (size_t)a)) return fail(r, HM_CBOR_E_UTF8);
    if (a < min || a > max) return fail(r, HM_CBOR_E_RANGE);
    *p = s;
    *n = (size_t)a;
    return HM_CBOR_OK;
}

/*@ requires hm_reader(r) && \valid(p) && \valid(n) && \separated(r, p, n);
    assigns r->pos, r->err, *p, *n;
    ensures hm_outcome(r, \result);
    ensures \result == HM_CBOR_OK ==> \initialized(p) && \initialized(n);
    ensures \result == HM_CBOR_OK ==> \valid_read(*p + (0 .. *n - 1));
    ensures \result == HM_CBOR_OK ==>
            min <= *n <= max && hm_moved{Old, Post}(r, *n, *n) && *p == r->p + (r->pos - *n);
    ensures \result != HM_CBOR_OK ==> *p == \old(*p) && *n == \old(*n); */
hm_cbor_err hm_cbor_get_bstr(hm_cbor_r *r, size_t min, size_t max, const uint8_t **p,
                             size_t *n) {
    return get_str(r, 2, min, max, p, n);
}

/*@ requires hm_reader(r) && \valid(p) && \valid(n) && \separated(r, p, n);
    assigns r->pos, r->err, *p, *n;
    ensures hm_outcome(r, \result);
    ensures \result == HM_CBOR_OK ==> \initialized(p) && \initialized(n);
    ensures \result == HM_CBOR_OK ==> \valid_read(*p + (0 .. *n - 1));
    ensures \result == HM_CBOR_OK ==>
            0 <= *n <= max && hm_moved{Old, Post}(r, *n, *n) && *p == r->p + (r->pos - *n);
    ensures \result != HM_CBOR_OK ==> *p == \old(*p) && *n == \old(*n); */
hm_cbor_err hm_cbor_get_tstr(hm_cbor_r *r, size_t max, const uint8_t **p, size_t *n) {
    return get_str(r, 3, 0, max, p, n);
}

/* Array or map head: every element needs at least one byte of the rest. */
/*@ requires hm_reader(r) && \valid(count) && \separated(r, count);
    assigns r->pos, r->err, *count;
    ensures hm_outcome(r, \result);
    ensures \result == HM_CBOR_OK ==> \initialized(count);
    ensures \result == HM_CBOR_OK ==> hm_moved{Old, Post}(r, 0, 0); */
static hm_cbor_err get_container(hm_cbor_r *r, unsigned major, uint64_t *count) {
    uint64_t a;
    if (want(r, major, &a)) return r->err;
    size_t rest = r->len - r->pos;
    if (a > (major == 5 ? rest / 2 : rest)) return fail(r, HM_CBOR_E_TRUNCATED);
    *count = a;
    return HM_CBOR_OK;
}

/*@ requires hm_reader(r) && \valid(count) && \separated(r, count);
    assigns r->pos, r->err, *count;
    ensures hm_outcome(r, \result);
    ensures \result == HM_CBOR_OK ==> \initialized(count);
    ensures \result == HM_CBOR_OK ==> hm_moved{Old, Post}(r, 0, 0); */
hm_cbor_err hm_cbor_get_array(hm_cbor_r *r, uint64_t *count) {
    return get_container(r, 4, count);
}

/*@ requires hm_reader(r);
    assigns r->pos, r->err;
    ensures hm_outcome(r, \result);
    ensures \result == HM_CBOR_OK ==> hm_moved{Old, Post}(r, 0, 0); */
hm_cbor_err hm_cbor_expect_array(hm_cbor_r *r, uint64_t count) {
    uint64_t n;
    if (get_container(r, 4, &n)) return r->err;
    return n == count ? HM_CBOR_OK : fail(r, HM_CBOR_E_RANGE);
}

/*@ requires hm_reader(r) && \valid(pairs) && \separated(r, pairs);
    assigns r->pos, r->err, *pairs;
    ensures hm_outcome(r, \result);
    ensures \result == HM_CBOR_OK ==> \initialized(pairs);
    ensures \result == HM_CBOR_OK ==> hm_moved{Old, Post}(r, 0, 0); */
hm_cbor_err hm_cbor_get_map(hm_cbor_r *r, uint64_t *pairs) {
    return get_container(r, 5, pairs);
}

/*@ requires hm_reader(r) && \valid(tag) && \separated(r, tag);
    assigns r->pos, r->err, *tag;
    ensures hm_outcome(r, \result);
    ensures \result == HM_CBOR_OK ==> \initialized(tag);
    ensures \result == HM_CBOR_OK ==> hm_moved{Old, Post}(r, 0, 0); */
hm_cbor_err hm_cbor_get_tag(hm_cbor_r *r, uint64_t *tag) { return want(r, 6, tag); }

/*@ requires hm_reader(r) && \valid(v) && \separated(r, v);
    assigns r->pos, r->err, *v;
    ensures hm_outcome(r, \result);
    ensures \result == HM_CBOR_OK ==> \initialized(v); */
hm_cbor_err hm_cbor_get_bool(hm_cbor_r *r, int *v) {
    uint64_t a;
    if (want(r, 7, &a)) return r->err;
    if (a == 22) return fail(r, HM_CBOR_E_TYPE);
    *v = a == 21;
    return HM_CBOR_OK;
}

/*@ requires hm_reader(r);
    assigns r->pos, r->err;
    ensures hm_outcome(r, \result); */
hm_cbor_err hm_cbor_get_null(hm_cbor_r *r) {
    uint64_t a;
    if (want(r, 7, &a)) return r->err;
    return a == 22 ? HM_CBOR_OK : fail(r, HM_CBOR_E_TYPE);
}

/* Generic validation without recursion: one stack entry per open container. */
hm_cbor_err hm_cbor_skip(hm_cbor_r *r) {
    struct {
        size_t left;  /* items still due (a map counts keys and values) */
        size_t key;   /* offset of the previous key (maps) */
        size_t klen;  /* its encoded length, 0 before the first key */
        uint8_t map;
    } st[HM_CBOR_MAX_DEPTH];
    size_t depth = 0; /* open containers = depth of the next item */
    if (r->err) return r->err;
    for (;;) {
        size_t start = r->pos;
        unsigned mt;
        uint64_t v;
        int is_key = depth > 0 && st[depth - 1].map && (st[depth - 1].left & 1) == 0;
        if (head(r, &mt, &v)) return r->err;
        if (is_key && mt > 3) return fail(r, HM_CBOR_E_MAP_KEY);
        if (mt == 2 || mt == 3) {
            const uint8_t *s;
            if (take(r, v, &s)) return r->err;
            if (mt == 3 && !hm_utf8_valid(s, (size_t)v)) return fail(r, HM_CBOR_E_UTF8);
        } else if (mt >= 4 && mt <= 6) {
            size_t rest = r->len - r->pos;
            if ((mt == 4 && v > rest) || (mt == 5 && v > rest / 2))
                return fail(r, HM_CBOR_E_TRUNCATED);
            size_t n = mt == 4 ? (size_t)v : mt == 5 ? 2 * (size_t)v : 1;
            if (n > 0) {
                if (depth == HM_CBOR_MAX_DEPTH) return fail(r, HM_CBOR_E_DEPTH);
                st[depth].left = n;
                st[depth].key = st[depth].klen = 0;
                st[depth].map = mt == 5;
                depth++;
                continue;
            }
        }
        if (is_key) { /* keys are scalars: the whole key is p[start..pos) */
            size_t klen = r->pos - start, plen = st[depth - 1].klen;
            if (plen) {
                int c = memcmp(r->p + start, r->p + st[depth - 1].key, klen < plen ? klen : plen);
                if (c < 0 || (c == 0 && klen <= plen)) return fail(r, HM_CBOR_E_MAP_ORDER);
            }
            st[depth - 1].key = start;
            st[depth - 1].klen = klen;
        }
        /* this item is complete, and so is every container it completes */
        while (depth > 0 && --st[depth - 1].left == 0) depth--;
        if (depth == 0) return HM_CBOR_OK;
    }
}

/*@ requires \valid(r);
    assigns r->err;
    ensures hm_outcome(r, \result); */
hm_cbor_err hm_cbor_end(hm_cbor_r *r) {
    if (r->err) return r->err;
    return r->pos == r->len ? HM_CBOR_OK : fail(r, HM_CBOR_E_TRAILING);
}

/*@ requires \valid_read(p + (0 .. len - 1)); */
hm_cbor_err hm_cbor_check(const uint8_t *p, size_t len) {
    hm_cbor_r r;
    hm_cbor_r_init(&r, p, len);
    if (hm_cbor_skip(&r)) return r.err;
    return hm_cbor_end(&r);
}
