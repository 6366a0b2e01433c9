"""Link messages (SPEC sections 4 and 5): [version, type, seq, ack, fields...].

encode() builds a body from a type, seq, ack and field values; decode() checks a body
in the order of SPEC 4.3 and raises MsgError(code, ref) with the ERROR code a
receiver answers with.
"""

from micropython import const

from . import cbor

HELLO = const(1)
HELLO_ACK = const(2)
CAPTURE = const(3)
CAPTURE_RESULT = const(4)
PACK_OFFER = const(5)
PACK_RESULT = const(6)
KNOWLEDGE_PUSH = const(7)
KNOWLEDGE_RESULT = const(8)
STATUS_REQUEST = const(9)
STATUS = const(10)
LOG = const(11)
ERROR = const(12)
ACK = const(13)
FRAGMENT = const(14)  # retired (SPEC 5.14): no fields, an unknown type
PROOF = const(15)

E_UNKNOWN_VERSION = const(1)
E_UNKNOWN_TYPE = const(2)
E_MALFORMED = const(3)
E_TOO_LARGE = const(4)
E_NO_SESSION = const(5)
E_REASSEMBLY = const(6)
E_BUSY = const(7)
E_INTERNAL = const(8)

_U32 = const(0xFFFFFFFF)

# Field kinds, one character each:
#  w u16, l u32, q u64, f q16, i bstr(8), k bstr(16), h bstr(32), g bstr(64), j bstr(0 or 8),
#  r bstr(16 or 0), t tstr<=240, p bstr<=256, b bstr, s <=2, x <=15, z <=4, a <=3,
#  n <=11, e 1..8
KINDS = (
    "",  # no type 0
    "ittlqwlwijww",  # 1 HELLO
    "iwlwqqhkk",  # 2 HELLO_ACK
    "tphwfff",  # 3 CAPTURE
    "lsrwfffffffsxz",  # 4 CAPTURE_RESULT
    "b",  # 5 PACK_OFFER
    "lan",  # 6 PACK_RESULT
    "b",  # 7 KNOWLEDGE_PUSH
    "kanq",  # 8 KNOWLEDGE_RESULT
    "",  # 9 STATUS_REQUEST
    "qqqqqqqqqqqqqq",  # 10 STATUS
    "at",  # 11 LOG
    "elt",  # 12 ERROR
    "",  # 13 ACK
    "",  # 14 FRAGMENT, retired: refused at step 4
    "g",  # 15 PROOF
)
_MAXV = {"w": 0xFFFF, "l": _U32, "q": 0xFFFFFFFFFFFFFFFF, "f": 0x10000, "s": 2, "x": 15,
         "z": 4, "a": 3, "n": 11, "e": 8}
_BLEN = {"i": (8, 8), "k": (16, 16), "h": (32, 32), "g": (64, 64), "j": (0, 8), "r": (16, 0)}

# H->D types a device accepts, by the capability bit that announces them
DEVICE_ALWAYS = (HELLO_ACK, PACK_RESULT, ERROR, ACK)
# FRAGMENT (14) is retired (SPEC 6.8: bodies travel in frame pieces): never accepted
_CAP_TYPES = ((0x01, CAPTURE), (0x02, KNOWLEDGE_PUSH), (0x10, STATUS_REQUEST))


def device_accepts(capabilities: int) -> int:
    """Bit set (1 << type) of the types a device with these capabilities accepts."""
    m = 0
    for t in DEVICE_ALWAYS:
        m |= 1 << t
    for bit, t in _CAP_TYPES:
        if capabilities & bit:
            m |= 1 << t
    return m


HOST_ACCEPTS = (1 << HELLO) | (1 << CAPTURE_RESULT) | (1 << PACK_OFFER) | (
    1 << KNOWLEDGE_RESULT) | (1 << STATUS) | (1 << LOG) | (1 << ERROR) | (1 << ACK) | (
    1 << PROOF)


class MsgError(Exception):
    def __init__(self, code: int, ref: int, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.ref = ref
        self.detail = detail


def sequenced(t: int) -> bool:
    return t != LOG and t != ERROR and t != ACK


def _field_ok(kind: str, v: object) -> bool:
    if kind in _MAXV:
        if type(v) is not int or v < 0 or v > _MAXV[kind]:  # noqa: E721
            return False
        return kind != "e" or v >= 1
    if kind == "t":
        return type(v) is str and len(v.encode()) <= 240  # noqa: E721
    if type(v) is not bytes:  # noqa: E721
        return False
    if kind == "b":
        return True
    if kind == "p":
        return len(v) <= 256
    a, b = _BLEN[kind]
    return len(v) == a or len(v) == b


def encode(t: int, seq: int, ack: int, fields) -> bytes:
    out = bytearray()
    kinds = KINDS[t]
    cbor.head(out, 4, 4 + len(kinds))
    out.append(1)
    cbor.head(out, 0, t)
    cbor.head(out, 0, seq)
    cbor.head(out, 0, ack)
    for v in fields:
        cbor.encode_into(out, v)
    return bytes(out)


def decode(body, accepts: int, inner: bool = False) -> list:
    """The message as a list [1, type, seq, ack, fields...], or MsgError (SPEC 4.3).

    accepts is a bit set of the types this receiver takes (1 << type). With inner (a
    body without its sequencing) seq and ack must be 0. FRAGMENT (14) is retired: an
    unknown type whatever accepts says.
    """
    try:
        m = cbor.decode(body)
    except cbor.CborError as e:
        raise MsgError(E_MALFORMED, 0, "not deterministic CBOR: " + str(e))
    if type(m) is not list or len(m) < 4:  # noqa: E721
        raise MsgError(E_MALFORMED, 0, "not an array of at least 4 elements")
    v, t, seq, ack = m[0], m[1], m[2], m[3]
    ref = 0
    if type(v) is int and type(t) is int and type(seq) is int and 0 <= seq <= _U32:  # noqa: E721
        ref = seq
    if type(v) is not int or v != 1:  # noqa: E721
        raise MsgError(E_UNKNOWN_VERSION, ref, "unsupported version; this peer speaks 1")
    if (type(t) is not int or t < 1 or t > PROOF or t == FRAGMENT  # noqa: E721
            or not (accepts >> t) & 1):
        raise MsgError(E_UNKNOWN_TYPE, ref, "unknown message type " + str(t))
    if (type(seq) is not int or type(ack) is not int or not 0 <= seq <= _U32  # noqa: E721
            or not 0 <= ack <= _U32):
        raise MsgError(E_MALFORMED, ref, "seq or ack out of range")
    if inner:
        if seq != 0 or ack != 0:
            raise MsgError(E_REASSEMBLY, ref, "inner body with seq/ack")
    elif sequenced(t) != (seq != 0):
        raise MsgError(E_MALFORMED, ref, "seq does not fit the type")
    kinds = KINDS[t]
    if len(m) != 4 + len(kinds):
        raise MsgError(E_MALFORMED, ref, "wrong number of fields")
    for k in range(len(kinds)):
        if not _field_ok(kinds[k], m[4 + k]):
            raise MsgError(E_MALFORMED, ref, "field " + str(4 + k) + " out of kind")
    return m
