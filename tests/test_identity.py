"""hirmem.protocol.identity against Go semantics (reference ids and independent models)."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hirmem.protocol.identity import EDGE_CASES, fnv1a64, fold, triple_id

# --- independent, deliberately naive models of the Go behaviour ------------------------------

GO_SPACE = frozenset(
    "\t\n\v\f\r \u0085\u00a0\u1680\u2028\u2029\u202f\u205f\u3000"
    + "".join(chr(c) for c in range(0x2000, 0x200B))
)


def go_decode(data: bytes) -> str:
    """Decode like ranging over a Go string: one U+FFFD per byte that starts no valid rune."""
    out: list[str] = []
    i = 0
    n = len(data)
    while i < n:
        c = data[i]
        if c < 0x80:
            out.append(chr(c))
            i += 1
            continue
        size, lo, hi = 0, 0x80, 0xBF
        if 0xC2 <= c <= 0xDF:
            size = 2
        elif c == 0xE0:
            size, lo = 3, 0xA0
        elif 0xE1 <= c <= 0xEC or 0xEE <= c <= 0xEF:
            size = 3
        elif c == 0xED:
            size, hi = 3, 0x9F
        elif c == 0xF0:
            size, lo = 4, 0x90
        elif 0xF1 <= c <= 0xF3:
            size = 4
        elif c == 0xF4:
            size, hi = 4, 0x8F
        ok = (
            size > 0
            and i + size <= n
            and lo <= data[i + 1] <= hi
            and all(0x80 <= data[j] <= 0xBF for j in range(i + 2, i + size))
        )
        if not ok:
            out.append("\ufffd")
            i += 1
            continue
        cp = c & (0xFF >> (size + 1))
        for j in range(i + 1, i + size):
            cp = (cp << 6) | (data[j] & 0x3F)
        out.append(chr(cp))
        i += size
    return "".join(out)


def simple_lower(ch: str) -> str:
    if ch == "\u0130":
        return "i"
    low = ch.lower()  # a lone character never triggers the final-sigma rule
    assert len(low) == 1
    return low


def ref_fold(s: str | bytes) -> str:
    if isinstance(s, bytes):
        text = go_decode(s)
    else:
        text = "".join("\ufffd" if 0xD800 <= ord(ch) <= 0xDFFF else ch for ch in s)
    fields: list[str] = []
    cur: list[str] = []
    for ch in text:
        if ch in GO_SPACE:
            if cur:
                fields.append("".join(cur))
                cur = []
        else:
            cur.append(simple_lower(ch))
    if cur:
        fields.append("".join(cur))
    return " ".join(fields)


# --- strategies ------------------------------------------------------------------------------

FRAGMENTS = [
    b"a",
    b"Z",
    b" ",
    b"\t",
    b"\n",
    b"\x0b",
    b"\x0c",
    b"\r",
    b"\x1c",
    b"\x1d",
    b"\x1e",
    b"\x1f",
    b"\x00",
    b"\x80",
    b"\xbf",
    b"\xc0",
    b"\xc1",
    b"\xc2",
    b"\xe0",
    b"\xe2",
    b"\xe2\x82",
    b"\xed",
    b"\xed\xa0\x80",
    b"\xf0",
    b"\xf4",
    b"\xf4\x90",
    b"\xf5",
    b"\xff",
    *(
        ch.encode()
        for ch in "\u0085\u00a0\u1680\u2000\u200a\u200b\u2028\u2029\u202f\u205f\u3000"
        "\u0130\u03a3\u03c3\u03c2\u039f\u0394\u03a3ЖжǄǅǆẞß\ufffd\U0001f600\u180e\ufeff"
    ),
]
fragment_bytes = st.lists(st.sampled_from(FRAGMENTS), max_size=30).map(b"".join)
any_bytes = st.one_of(st.binary(max_size=64), fragment_bytes)
any_text = st.one_of(
    st.text(st.characters(exclude_categories=()), max_size=40),
    fragment_bytes.map(lambda b: b.decode("utf-8", errors="surrogateescape")),
)
any_part = st.one_of(any_bytes, any_text)

# --- reference ids ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("s", "p", "o", "expected"),
    [
        ("Alice", "knows", "Bob", "f7e43c882ab02b80"),
        ("  Alice  Smith ", "WORKS_AT", "Acme\tCorp", "feb326503cdb8f90"),
        ("é", "ß", "İ", "00ea780590d4c37e"),
        ("", "", "", "d94d12186c0f2fb7"),
    ],
)
def test_reference_ids(s: str, p: str, o: str, expected: str) -> None:
    assert triple_id(s, p, o) == expected
    assert triple_id(s.encode(), p.encode(), o.encode()) == expected


def test_fnv1a64_known_vectors() -> None:
    assert fnv1a64(b"") == 0xCBF29CE484222325
    assert fnv1a64(b"a") == 0xAF63DC4C8601EC8C
    assert fnv1a64(b"foobar") == 0x85944171F73967E8


def test_id_format() -> None:
    tid = triple_id("x", "y", "z")
    assert len(tid) == 16
    assert all(c in "0123456789abcdef" for c in tid)


# --- individual rules ------------------------------------------------------------------------


def test_dotted_capital_i_simple_mapping() -> None:
    assert fold("\u0130") == "i"
    assert fold("\u0130STANBUL") == "istanbul"
    assert fold("\u0130".encode()) == "i"
    assert "\u0307" not in fold("K\u0130M")


def test_no_final_sigma() -> None:
    assert fold("ΟΔΟΣ") == "οδοσ"
    assert fold("ΟΔΟΣ ΟΔΟΣ") == "οδοσ οδοσ"
    assert fold("ΣΟΦΟΣ") == "σοφοσ"
    assert "\u03c2" not in fold("ὈΔΥΣΣΕΎΣ")
    assert fold("\u03c2") == "\u03c2"  # an existing final sigma is left alone


@pytest.mark.parametrize(
    "space",
    [
        "\t", "\n", "\v", "\f", "\r", " ", "\u0085", "\u00a0", "\u1680",
        *(chr(c) for c in range(0x2000, 0x200B)),
        "\u2028", "\u2029", "\u202f", "\u205f", "\u3000",
    ],
)  # fmt: skip
def test_go_white_space_splits(space: str) -> None:
    assert fold(f"{space}A{space}{space}B{space}") == "a b"
    assert fold(f"{space}A{space}{space}B{space}".encode()) == "a b"


@pytest.mark.parametrize("ch", ["\x1c", "\x1d", "\x1e", "\x1f", "\u200b", "\u180e", "\ufeff"])
def test_not_go_white_space(ch: str) -> None:
    assert ch.isspace() or ch in "\u200b\u180e\ufeff"  # the point: Python may disagree
    assert fold(f"A{ch}B") == f"a{ch}b"
    assert fold(f" {ch} ") == ch
    assert fold(f"A{ch}B".encode()) == f"a{ch}b"


def test_white_space_collapse() -> None:
    assert fold("  Alice  Smith ") == "alice smith"
    assert fold("Acme\tCorp") == "acme corp"
    assert fold(" \t\n\r\v\f ") == ""
    assert fold("\u00a0\u3000x\u2028\u2029y\u3000") == "x y"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"\x80", "\ufffd"),
        (b"\xe2\x82", "\ufffd\ufffd"),
        (b"\xc0\xaf", "\ufffd\ufffd"),
        (b"\xed\xa0\x80", "\ufffd\ufffd\ufffd"),
        (b"\xff", "\ufffd"),
        (b"\xf4\x90\x80\x80", "\ufffd\ufffd\ufffd\ufffd"),
        (b"\xe0\x80\x80", "\ufffd\ufffd\ufffd"),
        (b"A\xe2\x82B", "A\ufffd\ufffdB"),
        (b"\xc3\x28", "\ufffd("),
        (b"\xf0\x9f\x98", "\ufffd\ufffd\ufffd"),
        (b"\xf0\x9f\x98\x80", "\U0001f600"),
        (b"\xef\xbf\xbd", "\ufffd"),
        (b"\xed\x9f\xbf", "\ud7ff"),
        (b"\xf4\x8f\xbf\xbf", "\U0010ffff"),
        (b"\xc3\x89\x80", "\u00c9\ufffd"),
    ],
)
def test_invalid_utf8_byte_per_byte(raw: bytes, expected: str) -> None:
    assert go_decode(raw) == expected  # sanity of the model against hand-computed values
    assert fold(raw) == expected.lower()


def test_lone_surrogates_in_str() -> None:
    assert fold("a\ud800b") == "a\ufffdb"
    assert fold("\udfff\ud800") == "\ufffd\ufffd"
    assert triple_id("a\ud800", "p", "o") == triple_id(b"a\x80", "p", "o")
    assert triple_id("a\ud800", "p", "o") == triple_id("a\ufffd", "p", "o")


def test_full_lower_is_simple_except_dotted_i() -> None:
    offenders = [
        f"U+{c:04X}" for c in range(sys.maxunicode + 1) if c != 0x130 and len(chr(c).lower()) != 1
    ]
    assert offenders == []


def test_fold_every_code_point_matches_model() -> None:
    for c in range(sys.maxunicode + 1):
        ch = chr(c)
        assert fold(ch) == ref_fold(ch), f"U+{c:04X}"


def test_positions_matter() -> None:
    assert triple_id("a b", "c", "d") != triple_id("a", "b c", "d")
    assert triple_id("a", "b", "c") != triple_id("b", "a", "c")
    assert triple_id("ab", "", "c") != triple_id("a", "b", "c")
    assert triple_id("", "", "x") != triple_id("x", "", "")


def test_edge_cases_shape() -> None:
    assert len(EDGE_CASES) >= 4
    for triple in EDGE_CASES:
        assert len(triple) == 3
        assert all(isinstance(part, bytes) for part in triple)
        assert len(triple_id(*triple)) == 16
    refs = {
        (b"Alice", b"knows", b"Bob"),
        (b"  Alice  Smith ", b"WORKS_AT", b"Acme\tCorp"),
        ("é".encode(), "ß".encode(), "İ".encode()),
        (b"", b"", b""),
    }
    assert refs <= set(EDGE_CASES)


def test_edge_cases_match_model() -> None:
    for triple in EDGE_CASES:
        for part in triple:
            assert fold(part) == ref_fold(part), part


# --- properties ------------------------------------------------------------------------------


@given(any_part)
def test_fold_matches_model(x: str | bytes) -> None:
    assert fold(x) == ref_fold(x)


@given(any_bytes)
def test_decode_matches_go_model(x: bytes) -> None:
    assert fold(x) == fold(go_decode(x))


@given(any_part)
def test_fold_idempotent(x: str | bytes) -> None:
    once = fold(x)
    assert fold(once) == once
    assert fold(once.encode()) == once


@given(any_part)
def test_fold_shape(x: str | bytes) -> None:
    out = fold(x)
    assert out == out.strip(" ")
    assert "  " not in out
    assert not any(ch in GO_SPACE for ch in out.replace(" ", ""))
    assert not any(0xD800 <= ord(ch) <= 0xDFFF for ch in out)


@given(any_part, any_part, any_part)
def test_triple_id_depends_only_on_folds(s: str | bytes, p: str | bytes, o: str | bytes) -> None:
    tid = triple_id(s, p, o)
    assert tid == triple_id(fold(s), fold(p), fold(o))
    data = b"".join(fold(part).encode() + b"\x00" for part in (s, p, o))
    assert tid == f"{fnv1a64(data):016x}"


@given(st.text(max_size=20), st.text(max_size=20), st.text(max_size=20))
def test_str_and_utf8_bytes_agree(s: str, p: str, o: str) -> None:
    assert triple_id(s, p, o) == triple_id(s.encode(), p.encode(), o.encode())
