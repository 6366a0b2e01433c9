"""Non-volatile state that survives power cuts: hm_nvram (NOR flash rules over RAM) and
hm_persist (boot counter, reserved sequence mark, chain head, knowledge head).

build/host/t_nv is driven one request at a time (tests/native/t_nv.c). The oracles: a
Python reading of the record format (struct + binascii.crc32) over the raw region, and a
model of what was acknowledged. Power cuts the way littlefs tests its block devices: a
scenario is run once to count its writes N, then again with a cut at every n = 1..N
(the n-th write torn: half its words written), and at random points many times; after
each cut the device powers on, mounts and boots again, and the invariants hold:
 - the state mounted is the last acknowledged one or the one being written at the cut,
   never older (so the knowledge head never rolls back and the chain head never goes
   back past what the host acknowledged);
 - every boot counter handed out is greater than every one handed out before;
 - no sequence number is handed out twice: after a cut, numbering resumes above the
   reserved mark (a gap of at most the reservation step).
"""

from __future__ import annotations

import binascii
import random
import struct
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, replace

import pytest

from native_harness import BUILD, build, encode_arg

SLOT = 104
MAGIC = 0x31504D48
AHEAD = 8  # sequence numbers reserved per save


class Nv:
    """t_nv, one request line at a time."""

    def __init__(self) -> None:
        build()
        self.proc = subprocess.Popen([str(BUILD / "t_nv")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)  # fmt: skip

    def request(self, cmd: str, *args: int | bytes) -> list[str]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(" ".join([cmd, *(encode_arg(a) for a in args)]) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(10)
            assert self.proc.stderr is not None
            raise AssertionError(f"t_nv died ({self.proc.returncode}): {self.proc.stderr.read()}")
        return line.split()

    def ok(self, cmd: str, *args: int | bytes) -> list[str]:
        answer = self.request(cmd, *args)
        assert answer[0] == "ok", (cmd, args, answer)
        return answer

    def read(self, off: int, n: int) -> bytes:
        [field] = self.request("read", off, n)
        return bytes.fromhex(field[1:])

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        assert self.proc.wait(10) == 0
        assert self.proc.stderr is not None
        err = self.proc.stderr.read()
        assert "Sanitizer" not in err and "runtime error" not in err, err


@pytest.fixture
def nv() -> Iterator[Nv]:
    dev = Nv()
    yield dev
    dev.close()


@dataclass(frozen=True)
class State:
    boot: int = 0
    seq_reserved: int = 0
    pack_seq: int = 0
    pack_hash: bytes = bytes(32)
    knowledge_seq: int = 0
    knowledge_hash: bytes = bytes(32)

    def save_args(self) -> tuple[int, int, int, bytes, int, bytes]:
        return (self.boot, self.seq_reserved, self.pack_seq, self.pack_hash,
                self.knowledge_seq, self.knowledge_hash)  # fmt: skip


def mounted(answer: list[str]) -> tuple[bool, int, State]:
    """(found, epoch, state) of a mount answer."""
    assert answer[0] == "ok", answer
    f = answer[1:]
    state = State(int(f[2]), int(f[3]), int(f[4]), bytes.fromhex(f[5][1:]), int(f[6]),
                  bytes.fromhex(f[7][1:]))  # fmt: skip
    return f[0] == "1", int(f[1]), state


def oracle(region: bytes, page_size: int, first_page: int = 0) -> tuple[int, State] | None:
    """The newest valid record of the two pages, read with struct and binascii."""
    best: tuple[int, State] | None = None
    for page in (first_page, first_page + 1):
        for slot in range(page_size // SLOT):
            rec = region[page * page_size + slot * SLOT:][:SLOT]
            magic, epoch, boot, reserved, pseq = struct.unpack_from("<IIIIQ", rec)
            (kseq,) = struct.unpack_from("<Q", rec, 56)
            (crc,) = struct.unpack_from("<I", rec, 96)
            if magic != MAGIC or crc != binascii.crc32(rec[:96]):
                continue
            if best is None or epoch > best[0]:
                best = (epoch, State(boot, reserved, pseq, rec[24:56], kseq, rec[64:96]))
    return best


# ---- the flash rules -----------------------------------------------------------------


@pytest.mark.parametrize("word", [4, 8])
def test_nor_rules_are_enforced(nv: Nv, word: int) -> None:
    nv.ok("flash", 4, 256, word, 0xFF)
    assert nv.read(0, 1024) == b"\xff" * 1024
    assert nv.request("program", 8 * word, b"\x0f" * word) == ["ok"]
    assert nv.read(8 * word, word) == b"\x0f" * word
    assert nv.request("program", 8 * word, b"\x0e" * word) == ["ok"]  # clears one more bit
    assert nv.request("program", 8 * word, b"\xf0" * word) == ["flash"]  # would set bits
    assert nv.read(8 * word, word) == b"\x0e" * word  # a refused program changes nothing
    assert nv.request("program", 2, b"\x00" * word) == ["align"]
    assert nv.request("program", 0, b"\x00" * (word + 1)) == ["align"]
    assert nv.request("program", 256 - word, b"\x00" * 2 * word) == ["range"]  # two pages
    assert nv.request("program", 1024, b"\x00" * word) == ["range"]
    assert nv.request("erase", 4) == ["range"]
    assert nv.request("erase", 0) == ["ok"]
    assert nv.read(0, 256) == b"\xff" * 256
    assert nv.request("read", 1020, 8) == ["range"]
    assert nv.request("writes") == ["3"]  # two programs and an erase; refusals are not


def test_a_cut_tears_the_write_and_power_stays_off(nv: Nv) -> None:
    nv.ok("flash", 2, 256, 4, 0xFF)
    nv.ok("cut", 1)
    assert nv.request("program", 0, bytes(range(16))) == ["power"]
    assert nv.read(0, 16) == bytes(range(8)) + b"\xff" * 8  # half its words
    assert nv.request("erase", 1) == ["power"]  # off: nothing happens
    assert nv.read(256, 4) == b"\xff" * 4
    nv.ok("power")
    assert nv.request("program", 256, bytes(4)) == ["ok"]
    nv.ok("cut", 1)
    assert nv.request("erase", 1) == ["power"]
    assert nv.read(256, 256) == b"\xff" * 256  # (it held zeros in its first word only)
    nv.ok("power")
    assert nv.request("program", 8, b"\x00" * 8) == ["ok"]
    nv.ok("cut", 1)
    assert nv.request("erase", 0) == ["power"]
    assert nv.read(0, 256) == b"\xff" * 128 + nv.read(128, 128)  # the first half erased
    assert nv.read(0, 16) == b"\xff" * 16


# ---- the store -----------------------------------------------------------------------


@pytest.mark.parametrize("fill", [0xFF, 0x00])
def test_a_new_region_mounts_empty_and_boots_at_the_base(nv: Nv, fill: int) -> None:
    """Erased flash, or a new file-backed RAM (zeros): nothing found, boot = base."""
    nv.ok("flash", 4, 1024, 4, fill)
    found, epoch, state = mounted(nv.request("mount", 0))
    assert (found, epoch, state) == (False, 0, State())
    assert nv.ok("boot", 5)[1] == "5"
    found, _, state = mounted(nv.request("mount", 0))
    assert found and state.boot == 5
    assert nv.ok("boot", 1)[1] == "6"  # saved + 1 wins over a lower base
    assert nv.request("mount", 3)[0] == "range"  # needs two pages from there


@pytest.mark.parametrize("page_size", [256, 1024])
def test_saves_round_trip_across_page_switches(nv: Nv, page_size: int) -> None:
    nv.ok("flash", 2, page_size, 8, 0xFF)
    mounted(nv.request("mount", 0))
    rng = random.Random(page_size)
    per_page = page_size // SLOT
    for n in range(1, 5 * per_page + 3):
        st = State(rng.randrange(1, 2**32), rng.randrange(2**32), rng.randrange(2**64),
                   rng.randbytes(32), rng.randrange(2**64), rng.randbytes(32))  # fmt: skip
        nv.ok("save", *st.save_args())
        found, epoch, got = mounted(nv.request("mount", 0))
        assert (found, epoch, got) == (True, n, st)
        assert oracle(nv.read(0, 2 * page_size), page_size) == (n, st)
    # one program per save, one erase per page switch (the first page needs none)
    switches = (5 * per_page + 2 - 1) // per_page
    assert nv.request("writes") == [str(5 * per_page + 2 + switches)]


def test_reserve_saves_only_when_the_mark_is_passed(nv: Nv) -> None:
    nv.ok("flash", 2, 1024, 4, 0xFF)
    mounted(nv.request("mount", 0))
    assert nv.ok("reserve", 1, AHEAD)[1] == str(AHEAD)
    writes = nv.request("writes")
    for need in range(2, AHEAD + 1):
        assert nv.ok("reserve", need, AHEAD)[1] == str(AHEAD)
    assert nv.request("writes") == writes  # within the reservation: no write
    assert nv.ok("reserve", AHEAD + 1, AHEAD)[1] == str(2 * AHEAD)


# ---- power cuts ----------------------------------------------------------------------


@dataclass
class Device:
    """A device's life over the store: boots, uses sequence numbers (reserved ahead),
    moves its chain head and its knowledge head; every answer is checked against
    what was acknowledged."""

    nv: Nv
    rng: random.Random
    page_size: int
    acked: State = State()
    inflight: State | None = None
    boots: tuple[int, ...] = ()
    used_seqs: tuple[tuple[int, int], ...] = ()  # (boot, seq) handed out
    next_seq: int = 0

    def write(self, cmd: str, *args: int | bytes, new: State) -> bool:
        """One store write; False when the power went (the device stops)."""
        answer = self.nv.request(cmd, *args)
        if answer[0] == "power":
            self.inflight = new
            return False
        assert answer[0] == "ok", (cmd, answer)
        self.acked, self.inflight = new, None
        return True

    def power_on(self) -> bool:
        """Mount and boot; False if the cut came during the boot's own write."""
        self.nv.ok("power")
        found, _, state = mounted(self.nv.request("mount", 0))
        candidates = [self.acked] + ([self.inflight] if self.inflight else [])
        assert state in candidates, (state, candidates)
        assert found == (state != State())
        assert oracle(self.nv.read(0, 2 * self.page_size), self.page_size) == (
            None if not found else (mounted(self.nv.request("mount", 0))[1], state)
        )
        self.acked, self.inflight = state, None
        new = replace(state, boot=max(state.boot + 1, 1))
        answer = self.nv.request("boot", 1)
        if answer[0] == "power":
            self.inflight = new
            return False
        assert answer == ["ok", str(new.boot)]
        assert all(new.boot > b for b in self.boots)  # never a boot counter twice
        self.boots += (new.boot,)
        self.acked = new
        self.next_seq = state.seq_reserved + 1  # above all that may have been used
        return True

    def live(self, steps: int) -> bool:
        """Use the device for a while; False when the power went."""
        for _ in range(steps):
            kind = self.rng.randrange(3)
            if kind == 0:  # hand out sequence numbers, reserving ahead
                for _ in range(self.rng.randrange(1, 2 * AHEAD)):
                    seq = self.next_seq
                    if seq > self.acked.seq_reserved:
                        new = replace(self.acked, seq_reserved=seq + AHEAD - 1)
                        if not self.write("reserve", seq, AHEAD, new=new):
                            return False
                    assert seq <= self.acked.seq_reserved
                    assert (self.boots[-1], seq) not in self.used_seqs
                    self.used_seqs += ((self.boots[-1], seq),)
                    self.next_seq += 1
            elif kind == 1:  # the host acknowledged a pack: the chain head moves on
                new = replace(self.acked, pack_seq=self.acked.pack_seq + 1,
                              pack_hash=self.rng.randbytes(32))  # fmt: skip
                if not self.write("save", *new.save_args(), new=new):
                    return False
            else:  # a newer knowledge version was accepted: never below the held one
                new = replace(self.acked, knowledge_seq=self.acked.knowledge_seq + 1,
                              knowledge_hash=self.rng.randbytes(32))  # fmt: skip
                if not self.write("save", *new.save_args(), new=new):
                    return False
        return True


def run_life(nv: Nv, seed: int, page_size: int, lives: int, cuts: list[int]) -> Device:
    """A new region, then `lives` power-ons with 6 steps each. cuts[0]: the write,
    counted from the start, at which the power goes first (0: none); cuts[i] for
    i >= 1: armed at the start of life i, counted from there (0: none)."""
    nv.ok("flash", 4, page_size, 4, 0xFF)
    dev = Device(nv, random.Random(seed), page_size)
    knowledge_floor = 0
    for life in range(lives):
        cut = cuts[life] if life < len(cuts) else 0
        if cut:
            nv.ok("cut", cut)
        if dev.power_on():
            assert dev.acked.knowledge_seq >= knowledge_floor  # no rollback
            dev.live(6)
        knowledge_floor = max(knowledge_floor, dev.acked.knowledge_seq)
    return dev


@pytest.mark.parametrize("page_size", [256, 1024])
def test_a_cut_after_every_write_of_a_scenario(nv: Nv, page_size: int) -> None:
    """The writes of one scenario counted, then a cut after each of them in turn."""
    seed = 1400 + page_size
    run_life(nv, seed, page_size, 4, [])
    total = int(nv.request("writes")[0])
    assert total > 2 * (page_size // SLOT)  # the scenario switches pages
    for n in range(1, total + 1):
        dev = run_life(nv, seed, page_size, 5, [n])
        assert len(dev.boots) >= 4


def test_random_cuts_in_many_lives() -> None:
    nv = Nv()
    try:
        for seed in range(150):
            rng = random.Random(seed)
            cuts = [rng.choice([0, rng.randrange(1, 12)]) for _ in range(8)]
            dev = run_life(nv, seed, rng.choice([256, 512]), 8, cuts)
            assert dev.boots == tuple(sorted(set(dev.boots)))
    finally:
        nv.close()
