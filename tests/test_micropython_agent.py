"""The MicroPython agent end to end against a host over a pty (unix port).

The agent (firmware/micropython, board glue PtyLink) runs in `micropython` on the
slave side of a pty; tests/mp_host.py plays the host with the host codec. Checks:
handshake, captures and verdicts (against hirmem.protocol.gate.evaluate), a device pack
offloaded in fragments and verified with hirmem.protocol.packs.verify_pack, a knowledge pack
accepted, a rollback refused, a corrupted frame counted and recovered.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from hirmem.protocol import identity
from hirmem.protocol.frames import encode_frame
from hirmem.protocol.gate import evaluate
from hirmem.protocol.keys import SigningKey
from hirmem.protocol.messages import (
    Capture,
    CaptureResult,
    Error,
    Hello,
    HelloAck,
    KnowledgePush,
    KnowledgeResult,
    PackOffer,
    Status,
    StatusRequest,
    encode_message,
)
from hirmem.protocol.packs import KnowledgeItem, PackKind, TrustedKey, sign_pack, verify_pack
from hirmem.protocol.proof import hello_echo
from hirmem.protocol.records import GENESIS, Record, normalise, record_id
from mp_host import MpDevice, MpHost, until
from mp_run import MICROPYTHON

pytestmark = pytest.mark.skipif(MICROPYTHON is None, reason="micropython not installed")

T0 = 1_780_000_000_000
ONE = 0x10000
DEVICE_ID = bytes.fromhex("0102030405060708")
HOST_ID = bytes.fromhex("a1a2a3a4a5a6a7a8")
DEVICE_SEED = hashlib.sha256(b"hirmem test key: device 0102030405060708").digest()
HOST_SEED = hashlib.sha256(b"hirmem test key: host a1a2a3a4a5a6a7a8").digest()
DEVICE_KEY = SigningKey(DEVICE_SEED)
HOST_KEY = SigningKey(HOST_SEED)
MEMORY_KEYS = {DEVICE_KEY.kid: TrustedKey(DEVICE_KEY.public, DEVICE_ID, PackKind.MEMORY)}
CONTEXT = hashlib.sha256(b"event frame").digest()
BOOT = 7


@pytest.fixture
def host(tmp_path: Path) -> Iterator[MpHost]:
    config = {
        "device_id": DEVICE_ID.hex(), "seed": DEVICE_SEED.hex(),
        "host_public": HOST_KEY.public.raw.hex(), "host_id": HOST_ID.hex(),
        "board": "unix-pty", "boot": BOOT, "offer_threshold": 3,
        "stop_after_ms": 60000,
    }  # fmt: skip
    dev = MpDevice(config, tmp_path)
    h = MpHost(dev, HOST_ID)
    yield h
    err = dev.close()
    assert "Traceback" not in err, err


def knowledge(seq: int) -> bytes:
    items = [
        KnowledgeItem(bytes.fromhex(identity.triple_id("pump", "serves", f"zone {seq}")),
                      "pump", "serves", f"zone {seq}", ONE),
    ]
    return sign_pack(HOST_KEY, PackKind.KNOWLEDGE, HOST_ID, seq, GENESIS, T0, items).encoded


def status(host: MpHost) -> Status:
    host.send(StatusRequest())
    [st] = host.wait(Status)
    assert isinstance(st, Status)
    return st


def test_a_hello_ack_of_another_hello_opens_nothing(host: MpHost) -> None:
    """SPEC §6.5 device step 3: the HELLO_ACK of the previous boot's HELLO (and one beyond
    the offer that is not for this HELLO either) is ignored: no PROOF, no ERROR, HELLO
    goes on; the HELLO_ACK of the current HELLO opens the session."""
    until(host, lambda: host.hello is not None, 10)
    assert host.hello is not None
    older = encode_message(replace(host.hello, boot=BOOT - 1), 1, 0)
    stale = HelloAck(HOST_ID, 512, 65536, 4, T0, 0, GENESIS, bytes(16), hello_echo(older))
    for ack in (stale, replace(stale, window=9)):
        host.dev.write(encode_frame(encode_message(ack, 1, 1), 128))
    hellos = host.hellos
    until(host, lambda: host.hellos >= hellos + 1, 5)
    assert host.proofs == [] and host.last_ack == 0
    assert not any(isinstance(e.message, Error) for e in host.unsequenced)
    host.handshake(T0)
    host.pump(0.2)
    assert host.proof_verifies(DEVICE_KEY.public, HOST_ID)


def test_agent_end_to_end(host: MpHost) -> None:
    # ---- handshake
    host.handshake(T0)
    assert host.hello == Hello(
        DEVICE_ID, "unix-pty", "0.1.0", BOOT, 0x1F, 512, 4096, 4, DEVICE_KEY.kid, HOST_KEY.kid,
        8, 32,  # KNOWLEDGE_CAPACITY facts of KNOWLEDGE_TEXT bytes
    )  # fmt: skip
    host.pump(0.1)
    # the HELLO_ACK is acknowledged by the PROOF (seq 2, ack 1), which signs the challenge
    assert [env.ack for _, _, env in host.frames if env.seq == 2][:1] == [1]
    assert host.proof_verifies(DEVICE_KEY.public, HOST_ID)

    # ---- captures and verdicts (the third one triggers a pack: offer_threshold 3)
    cases = [
        ("temp0", b'{"t":21.5}', 0x0FFF, ONE, 0xE666),
        ("", b"", 0x0F73, 0x8000, 0x8000),
        ("s", b"x", 0x0BFF, ONE, ONE),  # consent failed: quarantined
    ]
    seqs = [host.send(Capture(src, pl, CONTEXT, fl, q, p, 0x8000)) for src, pl, fl, q, p in cases]
    results = host.wait(CaptureResult, 3)
    for n, ((src, pl, fl, q, p), seq, res) in enumerate(zip(cases, seqs, results, strict=True)):
        g = evaluate(normalise(fl, pl, src, T0, CONTEXT), q, p)
        assert res == CaptureResult(
            seq, 0, record_id(DEVICE_ID, BOOT, n + 1), g.flags, g.h, g.i, g.r, g.f, g.c,
            g.rn, g.w, int(g.verdict), int(g.hard), int(g.disposition),
        )  # fmt: skip
    assert [r.state for r in results if isinstance(r, CaptureResult)] == [1, 1, 3]

    # ---- the device pack, offloaded (fragmented at 512) and verified by the host
    [(offer_seq, offer)] = host.wait_seq(PackOffer, timeout=15)
    assert isinstance(offer, PackOffer)
    verified = verify_pack(offer.pack, MEMORY_KEYS, None, PackKind.MEMORY)
    pk = verified.pack
    assert pk.seq == (BOOT << 32) | 1 and pk.prev == GENESIS and len(pk.items) == 3
    recs = [r for r in pk.items if isinstance(r, Record)]
    assert [r.payload for r in recs] == [c[1] for c in cases]
    assert [r.state for r in recs] == [1, 1, 3]
    host.send(host.pack_result(offer_seq, 0, 0))
    host.pump(0.2)
    st = status(host)
    assert (st.ring_used, st.captures, st.candidates, st.quarantined) == (0, 3, 2, 1)
    assert (st.packs_sent, st.packs_acked) == (1, 1)

    # ---- knowledge: accepted, then a rollback refused
    host.send(KnowledgePush(knowledge(5)))
    [kr] = host.wait(KnowledgeResult, timeout=15)
    assert kr == KnowledgeResult(HOST_ID + (5).to_bytes(8, "big"), 0, 0, 5)
    host.send(KnowledgePush(knowledge(3)))
    [kr] = host.wait(KnowledgeResult, timeout=15)
    assert kr == KnowledgeResult(HOST_ID + (3).to_bytes(8, "big"), 2, 7, 5)

    # ---- a corrupted frame: counted, not answered, recovered by retransmission
    bad_before = st.frames_bad
    cap = Capture("temp1", b"1", CONTEXT, 0x0FFF, ONE, ONE, 0)
    seq = host.next_seq
    good = host.wire(cap, seq)
    host.next_seq += 1
    corrupt = bytearray(good)
    corrupt[5] ^= 0x10
    host.dev.write(bytes(corrupt))
    host.pump(0.3)
    assert not [m for _, m in host.delivered if isinstance(m, CaptureResult)]
    host.dev.write(good)  # the host's retransmission, byte-identical
    [res] = host.wait(CaptureResult)
    assert isinstance(res, CaptureResult) and res.ref == seq and res.status == 0
    st = status(host)
    assert st.frames_bad == bad_before + 1
    assert st.knowledge_seq == 5
    assert not host.frame_errors


def test_hello_resent_without_answer(host: MpHost) -> None:
    end = time.monotonic() + 10
    while host.hellos == 0 and time.monotonic() < end:
        host.pump(0.01)
    first = host.hello
    host.pump(1.0)  # resends at 0.25 and 0.75 s after the first, the next at 1.75 s
    assert host.hellos == 3
    assert host.hello == first
    assert not host.delivered and not host.unsequenced  # nothing else without a session
