"""Reproduce one file of protocol/vectors on MicroPython; print the results as JSON.

Usage: micropython checks/vectors.py <vectors dir> <name>
Prints one JSON document of computed values (never the expected ones): the pytest
side (tests/test_micropython_vectors.py) compares them with the file.
"""

import json
import sys
from hashlib import sha256

from hirmem_mp import cbor, ed25519, fixed, frag, frames, gate, msg, pack, record
from hirmem_mp.sha512 import sha512

NAMES = {
    "HELLO": (1, ("device_id", "board", "firmware", "boot", "capabilities", "max_frame",
                  "max_message", "window", "device_kid", "host_kid", "knowledge_facts",
                  "knowledge_text")),
    "HELLO_ACK": (2, ("host_id", "max_frame", "max_message", "window", "time_ms",
                      "pack_seq", "pack_hash", "challenge", "hello_hash")),
    "CAPTURE": (3, ("source", "payload", "context", "flags", "confidence", "provenance",
                    "priority")),
    "CAPTURE_RESULT": (4, ("ref", "status", "record_id", "flags", "h", "i", "r", "f", "c",
                           "rn", "w", "verdict", "hard", "state")),
    "PACK_OFFER": (5, ("pack",)),
    "PACK_RESULT": (6, ("back", "status", "reason")),
    "KNOWLEDGE_PUSH": (7, ("pack",)),
    "KNOWLEDGE_RESULT": (8, ("pack_id", "status", "reason", "held_seq")),
    "STATUS_REQUEST": (9, ()),
    "STATUS": (10, ("uptime_ms", "ring_used", "ring_capacity", "captures", "evictions",
                    "refusals", "quarantined", "candidates", "packs_sent", "packs_acked",
                    "frames_good", "frames_bad", "retransmits", "knowledge_seq")),
    "LOG": (11, ("level", "text")),
    "ERROR": (12, ("code", "ref", "detail")),
    "ACK": (13, ()),
    "PROOF": (15, ("signature",)),
}
TYPE_NAMES = {v[0]: k for k, v in NAMES.items()}
ALL_TYPES = 0xFFFE


def h(b) -> str:
    return bytes(b).hex()


def feed_all(data: bytes, max_frame: int, step: int) -> list:
    out = []
    rx = frames.FrameRx(max_frame, lambda body: out.append({"body": h(body)}),
                        lambda kind: out.append({"error": frames.ERROR_NAMES[kind]}))
    for i in range(0, len(data), step):
        rx.feed(data[i : i + step])
    return out


def do_frames(d: dict) -> dict:
    res: dict = {"valid": [], "cobs": [], "invalid": [], "streams": []}
    for v in d["valid"]:
        body = bytes.fromhex(v["body"])
        from binascii import crc32
        res["valid"].append({
            "crc32": "%08x" % crc32(body),
            "wire": h(frames.encode_frame(body)),
            "decoded": feed_all(bytes.fromhex(v["wire"]), 512, 1 << 20),
        })
    for v in d["cobs"]:
        data = bytes.fromhex(v["data"])
        enc = bytearray(len(data) + len(data) // 254 + 2)
        n = frames.cobs_encode_into(data, len(data), enc)
        wire = bytes.fromhex(v["encoded"])
        dec = bytearray(len(wire) + 1)
        k = frames.cobs_decode_into(wire, len(wire), dec)
        res["cobs"].append({"encoded": h(enc[0:n]), "decoded": h(dec[0:k]) if k >= 0 else None})
    for v in d["invalid"]:
        res["invalid"].append(feed_all(bytes.fromhex(v["wire"]), v["max_frame"], 1 << 20))
    for v in d["streams"]:
        data = bytes.fromhex(v["stream"])
        res["streams"].append([feed_all(data, v["max_frame"], s) for s in (1 << 20, 1, 3, 7)])
    return res


def to_json_field(v):
    if type(v) is bytes:
        return h(v)
    return v


def do_messages(d: dict) -> dict:
    res: dict = {"valid": [], "invalid": [], "pieces": []}
    for v in d["valid"]:
        m = v["message"]
        t, names = NAMES[m["type"]]
        fields = []
        for i, n in enumerate(names):
            x = m[n]
            kind = msg.KINDS[t][i]
            if type(x) is str and kind not in "t":
                x = bytes.fromhex(x)
            fields.append(x)
        body = msg.encode(t, v["seq"], v["ack"], fields)
        fr = frames.encode_frame(body) if len(body) + 4 <= 512 else None
        dm = msg.decode(bytes.fromhex(v["body"]), ALL_TYPES)
        dec = {"type": TYPE_NAMES[dm[1]], "seq": dm[2], "ack": dm[3]}
        for i, n in enumerate(names):
            dec[n] = to_json_field(dm[4 + i])
        res["valid"].append({"body": h(body), "frame": h(fr) if fr else None, "decoded": dec})
    for v in d["invalid"]:
        try:
            msg.decode(bytes.fromhex(v["body"]), ALL_TYPES)
            res["invalid"].append(0)
        except msg.MsgError as e:
            res["invalid"].append(e.code)
    for v in d["pieces"]:
        body = bytes.fromhex(v["body"])
        mf = v["max_frame"]
        cut = frag.split(body, mf)
        joiner = frag.Joiner(4096)
        got = []
        for fw in v["frames"]:
            rx = frames.FrameRx(mf, lambda b: got.append(bytes(b)))
            rx.feed(bytes.fromhex(fw))
        n = 0
        for b in got:
            n = joiner.take(b)
        res["pieces"].append({
            "pieces": [h(b) for b in cut],
            "frames": [h(frames.encode_frame(b)) for b in cut],
            "joined": h(joiner.buf[0:n]) if n > 0 else "",
        })
    return res


def do_fixed(d: dict) -> dict:
    return {
        "mul": [fixed.mul(c["a"], c["b"]) for c in d["mul"]],
        "isqrt_round": [fixed.isqrt_round(c["n"]) for c in d["isqrt_round"]],
        "sqrt": [fixed.sqrt(c["a"]) for c in d["sqrt"]],
        "sqrt_mul": [fixed.sqrt_mul(c["a"], c["b"]) for c in d["sqrt_mul"]],
    }


def do_gate(d: dict) -> list:
    out = []
    for c in d["cases"]:
        g = gate.evaluate(c["flags"], c["quality"], c["provenance"])
        out.append({"h": g.h, "i": g.i, "r": g.r, "f": g.f, "c": g.c, "rn": g.rn, "w": g.w,
                    "verdict": g.verdict, "hard": g.hard, "state": g.state})
    return out


def do_records(d: dict) -> list:
    out = []
    for c in d["chain"]:
        r = cbor.decode(bytes.fromhex(c["wire"]))
        assert isinstance(r, list)
        rid, payload, source, ts, ctx, flags = r[0], r[1], r[2].encode(), r[3], r[4], r[5]
        prev = r[19]
        flags = gate.normalise(flags, len(payload), True, len(source), ts, len(ctx))
        g = gate.evaluate(flags, r[12], r[13])
        hin = record.hash_input(rid, payload, source, ts, ctx, prev)
        rh = sha256(hin).digest()
        wire = bytearray()
        record.encode_into(wire, rid, payload, source, ts, ctx, g, r[12], r[13], r[14], 1,
                           rh, prev)
        out.append({"hash_input": h(hin), "hash": h(rh), "prev_hash": h(prev),
                    "wire": h(wire)})
    return out


def do_hashes(d: dict) -> list:
    out = []
    for c in d["cases"]:
        if "repeat" in c:
            from hirmem_mp.sha512 import SHA512
            rep = c["repeat"]
            chunk = bytes.fromhex(rep["byte"]) * 1000
            s2 = sha256()
            s5 = SHA512()
            for _ in range(rep["count"] // 1000):
                s2.update(chunk)
                s5.update(chunk)
            out.append({"sha256": h(s2.digest()), "sha512": h(s5.digest())})
        else:
            m = bytes.fromhex(c["message"])
            out.append({"sha256": h(sha256(m).digest()), "sha512": h(sha512(m))})
    return out


def do_ed25519(d: dict) -> list:
    out = []
    for c in d["cases"]:
        pub = bytes.fromhex(c["public"])
        m = bytes.fromhex(c["message"])
        r: dict = {"valid": ed25519.verify(bytes.fromhex(c["signature"]), pub, m)}
        if "secret" in c:
            seed = bytes.fromhex(c["secret"])
            r["public"] = h(ed25519.public_key(seed))
            r["signature"] = h(ed25519.sign(seed, m))
        out.append(r)
    return out


def do_packs(d: dict) -> list:
    keys = []
    for t in d["trusted"].values():
        kind = pack.KIND_MEMORY if t["kind"] == "memory" else pack.KIND_KNOWLEDGE
        keys.append(pack.TrustedKey(bytes.fromhex(t["public"]), bytes.fromhex(t["signer"]),
                                    kind))
    out = []
    for c in d["cases"]:
        kind = pack.KIND_MEMORY if c["kind"] == "memory" else pack.KIND_KNOWLEDGE
        head = None
        if c["head"] is not None:
            head = (int(c["head"]["seq"]), bytes.fromhex(c["head"]["hash"]))
        st, reason, pid, phash, _ = pack.verify(bytes.fromhex(c["pack"]), keys, head, kind,
                                                c["require_chain"])
        out.append({"status": pack.STATUSES[st], "reason": reason, "pack_id": h(pid),
                    "hash": h(phash) if phash else None})
    return out


def main() -> None:
    vdir, name = sys.argv[1], sys.argv[2]
    with open(vdir + "/" + name + ".json") as f:
        d = json.load(f)
    fn = {"frames": do_frames, "messages": do_messages, "fixed_point": do_fixed,
          "gate": do_gate, "records": do_records, "hashes": do_hashes,
          "ed25519": do_ed25519, "packs": do_packs}[name]
    print(json.dumps(fn(d)))


main()
