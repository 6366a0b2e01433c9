"""The wire contract alone, no emulator: ``hirmem demo --simulated``.

A simulated device captures sensor readings, gates them (Q16.16 HIR gate),
hashes and chains the records, signs them into a COSE_Sign1 memory pack and
offers it in frame pieces over a byte channel that flips bits, drops bytes
and injects garbage. The receiving side decodes the stream, joins the pieces,
verifies the pack and its records, and the demo checks that every captured
record arrived intact. Then it shows how the verifier refuses a duplicate, a
tampered pack and a rollback. Everything printed is measured in this run.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field

from hirmem.protocol import pieces
from hirmem.protocol.errors import FrameError, HirmemError, MessageError, PackError
from hirmem.protocol.frames import FrameDecoder, encode_frame
from hirmem.protocol.gate import Check, verdict_of
from hirmem.protocol.keys import SigningKey
from hirmem.protocol.messages import Ack, PackOffer, decode_message, encode_message
from hirmem.protocol.packs import ChainHead, PackKind, TrustedKey, sign_pack, verify_pack
from hirmem.protocol.records import GENESIS, Record, State, record_id

ALL_PASS = 0x0FFF
Q_ONE = 0x10000

# (source, reading, ACTION_FLAGS, confidence, provenance): a realistic mix
READINGS: list[tuple[str, dict[str, object], int, int, int]] = [
    ("temp0", {"c": 21.4}, ALL_PASS, Q_ONE, 0xF000),
    ("temp0", {"c": 21.6}, ALL_PASS, 0xF000, 0xF000),
    ("door1", {"open": True}, ALL_PASS & ~Check.UNCERTAINTY_DISCLOSED, 0xE000, 0xC000),
    ("temp0", {"c": 85.2, "note": "spike"}, ALL_PASS & ~Check.BASELINE_ALIGNED, 0xC000, 0xF000),
    ("pump", {"rpm": 1450}, ALL_PASS, Q_ONE, Q_ONE),
    ("", {"c": 19.0}, ALL_PASS & ~Check.SOURCE_PRESENT & ~Check.SIGNATURE_INTACT, 0x8000, 0x4000),
    ("cmd", {"op": "lock all doors"}, ALL_PASS & ~Check.NO_DOMINATION, Q_ONE, Q_ONE),
    ("cmd", {"op": "share location"}, ALL_PASS & ~Check.CONSENT_ENFORCED, Q_ONE, 0xC000),
    ("temp1", {"c": -4.0}, ALL_PASS & ~0x0033, 0xC000, 0xC000),
    ("gps", {"fix": 0}, ALL_PASS & ~0x0037, 0xA000, 0x8000),
    ("mic", {"db": 31}, ALL_PASS & ~0x00B7, 0x8000, 0x8000),
    ("imu", {"g": 0.98}, ALL_PASS & ~Check.REVERSIBLE_PREFERENCE, 0xF000, 0xE000),
    ("pump", {"rpm": 0}, ALL_PASS & ~Check.NO_INVARIANT_VIOLATION, Q_ONE, Q_ONE),
    ("temp0", {"c": 21.5}, ALL_PASS, Q_ONE, 0xF000),
]


@dataclass
class NoisyChannel:
    """A byte channel that damages what crosses it, reproducibly from a seed."""

    rng: random.Random
    flip: float
    drop: float
    garbage: float
    damaged: int = 0

    def carry(self, data: bytes) -> bytes:
        out = bytearray()
        for byte in data:
            if self.rng.random() < self.garbage:
                out += self.rng.randbytes(self.rng.randint(1, 6))
                self.damaged += 1
            if self.rng.random() < self.drop:
                self.damaged += 1
                continue
            if self.rng.random() < self.flip:
                byte ^= 1 << self.rng.randrange(8)
                self.damaged += 1
            out.append(byte)
        return bytes(out)


@dataclass
class LinkStats:
    frames_sent: int = 0
    retransmissions: int = 0
    frame_errors: Counter[str] = field(default_factory=Counter)
    message_errors: int = 0


def _send_reliably(
    bodies: list[tuple[int, bytes]],
    max_frame: int,
    forward: NoisyChannel,
    backward: NoisyChannel,
    receiver: FrameDecoder,
    sender_rx: FrameDecoder,
    stats: LinkStats,
) -> list[bytes]:
    """Stop-and-wait: resend each message (all its frame pieces) until its
    acknowledgement comes back intact."""
    delivered: list[bytes] = []
    expected = bodies[0][0]
    joiner = pieces.Joiner(65536 + 16)
    for seq, body in bodies:
        cut = pieces.split(body, max_frame)
        for attempt in range(50):
            stats.frames_sent += len(cut)
            stats.retransmissions += len(cut) if attempt > 0 else 0
            # a leading 0x00 flushes whatever partial frame damage left in the receiver
            acked = False
            wire = b"\x00" + b"".join(encode_frame(p, max_frame) for p in cut)
            for event in receiver.feed(forward.carry(wire)):
                if isinstance(event, FrameError):
                    stats.frame_errors[event.kind] += 1
                    continue
                try:
                    joined = joiner.take(event)
                    if joined is None:
                        continue
                    env = decode_message(joined)
                    event = joined
                except MessageError:
                    stats.message_errors += 1
                    continue
                if env.seq == expected:
                    delivered.append(event)
                    expected += 1
                ack = encode_frame(encode_message(Ack(), 0, expected - 1))
                for back in sender_rx.feed(backward.carry(b"\x00" + ack)):
                    if isinstance(back, FrameError):
                        stats.frame_errors[back.kind] += 1
                        continue
                    try:
                        acked = acked or decode_message(back).ack >= seq
                    except MessageError:
                        stats.message_errors += 1
            if acked:
                break
        else:
            raise HirmemError(f"frame {seq} not acknowledged after 50 attempts")
    return delivered


def run(
    seed: int = 2026,
    flip: float = 0.001,
    drop: float = 0.0005,
    garbage: float = 0.0005,
    max_frame: int = 512,
) -> int:
    rng = random.Random(seed)
    device_id = bytes.fromhex("d0e1c2e3a4b5c6d7")
    boot = 3
    device_key = SigningKey.generate()
    print("hirmem demo: one device, one signed memory pack, a noisy serial line\n")
    print(f"device {device_id.hex()}  boot {boot}  key id {device_key.kid.hex()}")

    # 1. capture, normalise, gate, hash and chain on the "device"
    records: list[Record] = []
    prev = GENESIS
    t0 = int(time.time() * 1000)
    print(
        f"\n{'#':>2} {'source':6} {'reading':28} {'H':>5} {'I':>5} {'R':>5} {'Rn':>6} "
        f"{'W':>6} verdict  state"
    )
    for n, (source, reading, flags, conf, prov) in enumerate(READINGS, start=1):
        payload = json.dumps(reading, separators=(",", ":")).encode()
        ctx = hashlib.sha256(b"frame %d" % (n // 4)).digest()
        rec = Record.capture(
            record_id(device_id, boot, n),
            payload,
            source,
            t0 + 250 * n,
            ctx,
            int(flags),
            conf,
            prov,
            0x8000,
            prev,
        )
        records.append(rec)
        prev = rec.hash
        print(
            f"{n:>2} {source or '-':6} {payload.decode():28} {rec.h / Q_ONE:5.2f} "
            f"{rec.i / Q_ONE:5.2f} {rec.r / Q_ONE:5.2f} {rec.rn / Q_ONE:6.4f} "
            f"{rec.w / Q_ONE:6.4f} {verdict_of(rec.rn).name:8} {State(rec.state).name}"
        )

    # 2. sign the pack and offer it over the noisy line
    pack = sign_pack(
        device_key, PackKind.MEMORY, device_id, (boot << 32) | 1, GENESIS, t0 + 5000, records
    )
    offer = encode_message(PackOffer(pack.encoded), 2, 0)
    parts = pieces.split(offer, max_frame)
    bodies = [(2, offer)]
    print(
        f"\npack {pack.pack_id.hex()}: {len(records)} records, {len(pack.encoded)} bytes "
        f"signed; PACK_OFFER of {len(offer)} bytes in {len(parts)} frame pieces of "
        f"max_frame {max_frame}"
    )
    forward = NoisyChannel(rng, flip, drop, garbage)
    backward = NoisyChannel(rng, flip, drop, garbage)
    receiver, sender_rx = FrameDecoder(max_frame), FrameDecoder(max_frame)
    stats = LinkStats()
    delivered = _send_reliably(bodies, max_frame, forward, backward, receiver, sender_rx, stats)

    # 3. the host side: the joined offer, decoded and verified
    if not delivered:
        raise HirmemError("the pack offer was not delivered")
    got = decode_message(delivered[0]).message
    assert isinstance(got, PackOffer)
    keys = {device_key.kid: TrustedKey(device_key.public, device_id, PackKind.MEMORY)}
    verified = verify_pack(got.pack, keys, None, PackKind.MEMORY)
    arrived = [r for r in verified.pack.items if isinstance(r, Record)]
    errors = ", ".join(f"{k} {v}" for k, v in sorted(stats.frame_errors.items())) or "none"
    print(
        f"line: {forward.damaged + backward.damaged} bytes damaged (flip {flip}, drop {drop}, "
        f"garbage {garbage}); {stats.frames_sent} frames sent, {stats.retransmissions} "
        f"retransmitted; damaged frames caught: {errors}; bad bodies: {stats.message_errors}"
    )
    states = Counter(State(r.state).name.lower() for r in arrived)
    print(
        f"host: pack verified (signature, key, chain, {len(arrived)} record hashes and gate "
        f"scores): " + ", ".join(f"{v} {k}" for k, v in sorted(states.items()))
    )

    # 4. what the verifier refuses
    head = ChainHead(verified.pack.seq, verified.pack.hash)
    tampered = bytearray(pack.encoded)
    tampered[tampered.find(b"spike")] ^= 0x01
    older = sign_pack(device_key, PackKind.MEMORY, device_id, (boot << 32), GENESIS, t0, [])
    print("\nrefusals:")
    for label, data in (
        ("same pack again", pack.encoded),
        ("one byte changed", bytes(tampered)),
        ("older sequence", older.encoded),
    ):
        try:
            result = verify_pack(data, keys, head, PackKind.MEMORY)
            what = "duplicate: acknowledged, stored once" if result.duplicate else "accepted"
            print(f"  {label:18} -> {what}")
        except PackError as err:
            print(f"  {label:18} -> refused, reason {err.reason} {err}")

    ok = [r.to_wire() for r in arrived] == [r.to_wire() for r in records]
    print(
        f"\ncheck: {len(records)} records captured, {len(arrived)} verified on the host, "
        f"identical: {'yes' if ok else 'NO'}"
    )
    return 0 if ok else 1
