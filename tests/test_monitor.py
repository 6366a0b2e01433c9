"""`pio device monitor` speaks hirmem: hirmem.protocol.wireview and monitor/filter_hirmem.py.

- WireView on streams made here: frames between text and garbage, damaged frames,
  message types this host does not know (a later firmware's), fragments, and the
  same text whatever the chunking (random streams and random cuts).
- A byte stream recorded from a real QEMU board (a LineTap between the board and a
  BoardHost that plays a session) fed through the filter class that PlatformIO's
  own loader finds in monitor/: each message the host codec decoded has its line.
- `pio device monitor --port socket://...` itself, on a pseudo-terminal (it refuses
  to run without one), against a QEMU board: decoded HELLO lines on the screen.
"""

from __future__ import annotations

import os
import pty
import random
import select
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from board_host import BOARDS, ROOT, BoardHost, LineTap, provisioned
from hirmem.emulation.provision import HostTrust, SlotSettings
from hirmem.emulation.qemu import QemuBoard
from hirmem.protocol import cbor
from hirmem.protocol.frames import FrameDecoder, encode_frame
from hirmem.protocol.gate import Hard, Verdict
from hirmem.protocol.keys import derive_test_key
from hirmem.protocol.messages import (
    Ack,
    Capture,
    CaptureResult,
    Hello,
    HelloAck,
    Log,
    Message,
    MsgType,
    PackOffer,
    Status,
    StatusRequest,
    encode_message,
)
from hirmem.protocol.pieces import split
from hirmem.protocol.wireview import WireView
from pio_host import PIO, prepare_core

T0 = 1_780_000_000_000
DEVICE_ID = bytes.fromhex("4d4f4e0000000001")
HOST_ID = bytes.fromhex("c1c2c3c4c5c6c7c8")
SETTINGS = SlotSettings(
    DEVICE_ID,
    derive_test_key("device 4d4f4e0000000001"),
    HostTrust(derive_test_key("host c1c2c3c4c5c6c7c8").public, HOST_ID),
    boot_base=2,
)
HELLO = Hello(DEVICE_ID, "hifive1", "0.1.0", 2, 31, 256, 1024, 4, b"k" * 8, b"")
RESULT = CaptureResult(
    3, 0, bytes(16), 0x0BFF, 0x10000, 0x10000, 0, 0x10000, 0, 0, 0, 2, int(Hard.CONSENT), 3
)


def frame(message: Message, seq: int = 0, ack: int = 0) -> bytes:
    return encode_frame(encode_message(message, seq, ack), 4096)


def raw_frame(*items: Any) -> bytes:
    """A frame of any CBOR array: what a newer firmware might send."""
    return encode_frame(cbor.encode(list(items)), 4096)


def lines(view: WireView, data: bytes) -> list[str]:
    return view.feed(data).splitlines()


# ---- WireView on made streams ----------------------------------------------------------


def test_frames_between_text_and_garbage() -> None:
    view = WireView()
    stream = (
        b"boot rom v1\r\n"
        + frame(HELLO, 1)
        + b"\x01\x02\xfe garbage\x00"  # not a frame (empty first block): passed through
        + frame(RESULT, 2, 1)
        + frame(Log(1, "stack used=1 free=2"), 0, 1)
    )
    got = lines(view, stream)
    assert got[0] == "boot rom v1"
    assert got[1].startswith("HELLO seq=1 ack=0 device_id=4d4f4e0000000001 board='hifive1'")
    assert got[2] == "\\x01\\x02\\xfe garbage"
    assert got[3] == (
        "CAPTURE_RESULT seq=2 ack=1 ref=3 status=STORED record_id=00000000000000000000000000000000"
        " flags=0x0bff h=1.0000 i=1.0000 r=0.0000 f=1.0000 c=0.0000 rn=0.0000 w=0.0000"
        " verdict=RED hard=CONSENT state=QUARANTINED"
    )
    assert got[4] == "LOG seq=0 ack=1 level=INFO text='stack used=1 free=2'"
    assert (view.frames, view.damaged, len(got)) == (3, 0, 5)


def test_a_damaged_frame_is_reported_and_the_next_one_decoded() -> None:
    view = WireView()
    bad = bytearray(frame(Log(2, "x"), 0, 0))
    bad[3] ^= 0x01  # inside the body: the CRC no longer matches
    got = lines(view, bytes(bad) + frame(Ack(), 0, 5))
    assert got[0].startswith("!! damaged frame (bad-crc: ")
    assert got[1] == "ACK seq=0 ack=5"
    assert (view.frames, view.damaged) == (1, 1)


def test_types_and_fields_this_host_does_not_know_are_shown_by_number() -> None:
    """What a newer peer's messages look like to this monitor: a type it does not know
    is shown by number, a known type with a field more is named, its fields shown raw."""
    view = WireView()
    hello_ack = HelloAck(HOST_ID, 256, 1024, 4, T0, 0, bytes(32), bytes(16), bytes(16))
    ack = encode_message(hello_ack, 1, 1)
    longer = cbor.encode([*cbor.decode(ack), b"\xaa" * 16])  # one field more
    got = lines(view, raw_frame(1, 99, 4, 3, b"\x01" * 40, "t", 7) + encode_frame(longer))
    assert got[0].startswith("type 99 seq=4 ack=3 01010101010101" "01…(40 bytes) 't' 7 (")
    assert "unknown message type 99" in got[0]
    assert got[1].startswith("HELLO_ACK seq=1 ack=1 c1c2c3c4c5c6c7c8 256 1024 4 ")
    assert "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" in got[1] and "fields after the header" in got[1]
    assert view.damaged == 0 and view.frames == 2


def test_pieces_are_joined_and_retransmissions_marked() -> None:
    view = WireView()
    pack = bytes(range(256)) * 2
    cut = split(encode_message(PackOffer(pack), 5, 1), 128)
    wire = b"".join(encode_frame(p, 128) for p in cut)
    stream = frame(HELLO, 1) + wire + wire  # sent again: nobody acknowledged
    got = lines(view, stream)
    assert len(cut) > 3
    piece_lines = [g for g in got if g.startswith("PIECE")]
    assert len(piece_lines) == 2 * len(cut) and piece_lines[0] == "PIECE first (123 bytes)"
    assert piece_lines[len(cut) - 1].startswith(f"PIECE {(len(cut) - 1) % 8} last")
    whole = [g for g in got if g.startswith("  = ")]
    offer = f"  = PACK_OFFER seq=5 ack=1 pack={pack[:8].hex()}…(512 bytes)"
    assert whole == [offer, offer + " (again)"]
    assert view.damaged == 0


TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=30)
ITEM = st.one_of(
    st.tuples(st.just("log"), TEXT),
    st.tuples(st.just("text"), TEXT),
    st.tuples(st.just("status"), st.integers(0, 2**40)),
    st.tuples(st.just("unknown"), st.integers(max(MsgType) + 1, 255)),
)


@given(st.lists(ITEM, max_size=12), st.randoms(use_true_random=False))
def test_random_streams_whatever_the_chunking(items: list[tuple[str, Any]], rnd: Any) -> None:
    """Each item comes back as its own line, in order, however the bytes are cut."""
    stream, want = b"", []
    for seq, (kind, value) in enumerate(items, start=1):
        if kind == "log":
            stream += frame(Log(3, value), 0, seq)
            want.append(f"LOG seq=0 ack={seq} level=ERROR text={value!r}")
        elif kind == "text":
            stream += value.encode() + b"\n"
            want.append(value)
        elif kind == "status":
            stream += frame(Status(value, *range(13)), seq, 0)
            want.append(f"STATUS seq={seq} ack=0 uptime_ms={value} ring_used=0 ring_capacity=1")
        else:
            stream += raw_frame(1, value, seq, 0)
            want.append(f"type {value} seq={seq} ack=0 (unknown message type {value})")
    stream += b"\x00"  # the last text byte is held until the next byte shows it is no frame
    whole = WireView().feed(stream)
    view, cut = WireView(), []
    at = 0
    while at < len(stream):
        step = rnd.randint(1, 40)
        cut.append(view.feed(stream[at : at + step]))
        at += step
    assert "".join(cut) == whole
    got = whole.splitlines()
    assert len(got) == len(want)
    for line, expected in zip(got, want, strict=True):
        assert line.startswith(expected), (line, expected)


@settings(max_examples=1000)
@given(st.lists(st.tuples(st.binary(max_size=40), st.text(max_size=20)), max_size=8))
def test_a_frame_after_a_delimiter_survives_any_garbage(
    pieces: list[tuple[bytes, str]],
) -> None:
    """Random bytes (zeros, stray code bytes, CBOR-looking heads) between frames: the
    view never fails, and every frame that follows a 0x00 comes back as its line,
    as the host codec (FrameDecoder) would take it."""
    stream = b""
    for garbage, text in pieces:
        stream += garbage + b"\x00" + frame(Log(0, text), 0, 0)
    view = WireView()
    got = view.feed(stream).splitlines()
    logs = [g for g in got if g.startswith("LOG seq=0 ack=0 level=DEBUG text=")]
    assert [g.split(" text=", 1)[1] for g in logs] == [repr(t) for _, t in pieces]
    decoder = FrameDecoder(4096)
    good = [b for b in decoder.feed(stream) if isinstance(b, bytes)]
    assert view.frames == len(good)  # the same frames as the host codec, no more


# ---- a recorded QEMU stream through the PlatformIO filter --------------------------------


def load_filter(monkeypatch: pytest.MonkeyPatch) -> Any:
    """monitor/filter_hirmem.py as `pio device monitor` loads it (PlatformIO's loader)."""
    from platformio.device.monitor.filters.base import load_monitor_filter
    from serial.tools import miniterm

    monkeypatch.chdir(ROOT)  # the filter base reads the project's platformio.ini
    monkeypatch.delitem(miniterm.TRANSFORMATIONS, "hirmem", raising=False)
    assert load_monitor_filter(str(ROOT / "monitor" / "filter_hirmem.py"), {})
    return miniterm.TRANSFORMATIONS.pop("hirmem")


@pytest.mark.parametrize("board", BOARDS)
def test_recorded_board_stream_through_the_filter(
    board: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elf = provisioned(board, tmp_path, SETTINGS)
    captures = [("temp/0", b'{"t":21.5}', 0x0FFF), ("door", b"open", 0x0BFF), ("x", b"1", 0)]
    with QemuBoard(board, elf, timeout=30) as qb:
        tap = LineTap(qb.url)
        host = BoardHost.connect(tap.url, HOST_ID)
        try:
            host.handshake(T0)
            for src, payload, flags in captures:
                host.send(Capture(src, payload, bytes(32), flags, 0x10000, 0xE666, 0x8000))
            results = host.wait_take(CaptureResult, len(captures))
            host.send(StatusRequest())
            [(status_seq, status)] = host.wait_take(Status)
            host.wait_for(lambda: len(host.logs()) >= 2, 5, "two LOG lines")
        finally:
            host.close()
            tap.close()
    recorded = bytes(tap.to_host)
    shown = load_filter(monkeypatch)
    rnd = random.Random(board)
    text, at = "", 0
    while at < len(recorded):  # the terminal hands the filter text in pieces
        step = rnd.randint(1, 64)
        text += shown.rx(recorded[at : at + step].decode("latin-1"))
        at += step
    got = text.splitlines()
    assert shown.view.damaged == 0 and shown.view.text_bytes == 0
    assert shown.view.frames == host.decoder.stats.frames  # the host codec's count
    [hello] = [g for g in got if g.startswith("HELLO ")]
    assert f"device_id={DEVICE_ID.hex()} board={board!r}" in hello
    result_lines = [g for g in got if g.startswith("CAPTURE_RESULT ")]
    assert len(result_lines) == len(results)
    for line, (seq, m) in zip(result_lines, results, strict=True):
        assert line.startswith(f"CAPTURE_RESULT seq={seq} ")
        hard = "|".join(f.name or "" for f in Hard(m.hard)) if m.hard else "0"
        for part in (f"verdict={Verdict(m.verdict).name}", f"hard={hard}",
                     f"rn={m.rn / 0x10000:.4f}", f"w={m.w / 0x10000:.4f}",
                     f"record_id={m.record_id.hex()}"):  # fmt: skip
            assert part in line, (part, line)
    assert {Verdict(m.verdict).name for _, m in results} >= {"GREEN", "RED"}
    [status_line] = [g for g in got if g.startswith("STATUS ")]
    assert status_line.startswith(f"STATUS seq={status_seq} ")
    assert f"captures={status.captures} " in status_line
    log_lines = [g for g in got if g.startswith("LOG ")]
    assert [line.split(" text=", 1)[1] for line in log_lines] == [repr(t) for t in host.logs()]


# ---- pio device monitor itself ---------------------------------------------------------


def read_pty(master: int, until: bytes, count: int, seconds: float) -> bytes:
    out, end = b"", time.monotonic() + seconds
    while out.count(until) < count and time.monotonic() < end:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                out += os.read(master, 4096)
            except OSError:  # the monitor closed the terminal
                break
    return out


@pytest.mark.parametrize("board", ["hifive1"])
def test_pio_device_monitor_shows_decoded_messages(
    board: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    env = prepare_core(tmp_path_factory.mktemp("pio-monitor"))
    elf = provisioned(board, tmp_path, SETTINGS)
    with QemuBoard(board, elf, timeout=60) as qb:
        master, slave = pty.openpty()  # pio device monitor needs a terminal
        cmd = [str(PIO), "device", "monitor", "-e", board, "--port", qb.url, "--quiet",
               "--no-reconnect"]  # fmt: skip
        proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, cwd=ROOT, env=env)
        os.close(slave)
        try:
            # nobody answers the HELLO: the device offers it again and again
            screen = read_pty(master, b"HELLO seq=1", 2, 40)
            os.write(master, b"\x03")  # the monitor's exit character (Ctrl+C)
            code = proc.wait(15)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            os.close(master)
    text = screen.decode("utf-8", "replace")
    hellos = [line for line in text.splitlines() if line.startswith("HELLO seq=1 ack=0 ")]
    assert len(hellos) >= 2, text
    assert f"device_id={DEVICE_ID.hex()} board='{board}' firmware='0.1.0' boot=2" in hellos[0]
    assert "\\x" not in text  # nothing raw on the screen
    assert code == 0, text


def test_every_environment_monitors_at_the_firmware_baud_through_the_filter() -> None:
    from platformio.project.config import ProjectConfig

    config = ProjectConfig(str(ROOT / "platformio.ini"))
    envs = config.envs()
    assert {"mps2-an385", "hifive1", "stm32f4", "hifive1-revb", "stm32f4-disco"} <= set(envs)
    for env in envs:
        assert config.get(f"env:{env}", "monitor_speed") == 115200, env
        assert config.get(f"env:{env}", "monitor_filters") == ["hirmem"], env
    for board in BOARDS:  # the UART set-up of each board says the same
        assert "115200" in (ROOT / "boards" / board / "board.c").read_text()
