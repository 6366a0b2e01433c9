"""The MicroPython agent keeps its boot counter and knowledge head across resets and
kill -9 (hirmem_mp.persist: one CRC-checked line, replaced by an atomic rename).

On the real unix port. A reset of the agent (its process killed and started again on
the same line) comes back with a boot counter one higher (it used the fixed configured
one before, so record ids repeated after every reset) and with its knowledge head. A
loop that saves a boot and then knowledge heads as fast as it can is killed with
SIGKILL at random instants, dozens of times: every boot it announced is above all the
earlier ones, the head it comes back with is at least the last one it announced, and
the state file is never damaged.
"""

from __future__ import annotations

import binascii
import hashlib
import random
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from hirmem.protocol.messages import KnowledgePush, KnowledgeResult
from hirmem.protocol.records import record_id
from mp_host import DEVICE_ID, T0
from mp_run import MICROPYTHON, MP_DIR, mp_env, run_mp_json
from test_micropython_session import capture, knowledge, make_host  # noqa: F401

pytestmark = pytest.mark.skipif(MICROPYTHON is None, reason="micropython not installed")
LOOP = MP_DIR / "checks" / "persist_loop.py"


def test_a_reset_agent_boots_higher_and_keeps_its_knowledge(make_host: Any,  # noqa: F811
                                                            tmp_path: Path) -> None:
    state = tmp_path / "hirmem.state"
    host = make_host(state_file=str(state), boot=7)
    host.handshake(T0)
    assert host.hello.boot == 7
    pack5 = knowledge(5)
    host.send(KnowledgePush(pack5))
    [kr] = host.wait(KnowledgeResult, timeout=15)
    assert isinstance(kr, KnowledgeResult) and kr.status == 0
    line = state.read_text().split()
    assert line[:3] == ["7", "5", hashlib.sha256(pack5).hexdigest()]
    assert line[3] == f"{binascii.crc32(' '.join(line[:3]).encode()):08x}"
    for boot in (8, 9):
        host.dev.restart()
        host.hello = None
        host.handshake(T0 + 1000 * boot)
        assert host.hello.boot == boot  # record ids of this boot are new ones
        host.send(KnowledgePush(knowledge(4)))
        [kr] = host.wait(KnowledgeResult, timeout=15)
        assert (kr.status, kr.held_seq) == (2, 5)  # rollback refused after the reset
    assert record_id(DEVICE_ID, 9, 1) != record_id(DEVICE_ID, 8, 1)


def test_a_damaged_state_file_stops_the_agent(tmp_path: Path) -> None:
    state = tmp_path / "hirmem.state"
    state.write_text("7 5 - 00000000\n")  # the CRC does not match
    assert MICROPYTHON is not None
    proc = subprocess.run([MICROPYTHON, str(LOOP), str(state), "1"], capture_output=True,
                          text=True, env=mp_env(), timeout=30)  # fmt: skip
    assert proc.returncode != 0 and "damaged state file" in proc.stdout + proc.stderr
    assert state.read_text() == "7 5 - 00000000\n"  # left for the operator, not reset


def test_kill_9_at_random_instants_never_reuses_a_boot_or_loses_a_head(
    tmp_path: Path,
) -> None:
    assert MICROPYTHON is not None
    state = tmp_path / "hirmem.state"
    rng = random.Random(1414)
    boots: list[int] = []
    held = 0
    # Kill until 30 boots and 100 heads were made, however slow the machine is today: a
    # fifth of the kills land while the port starts (before it read its state), the rest at
    # a random instant of a life that has begun (the timing is the machine's, the count is
    # the test's).
    attempts = 0
    while (len(boots) < 30 or held <= 100) and attempts < 400:
        attempts += 1
        proc = subprocess.Popen([MICROPYTHON, str(LOOP), str(state), "3"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=mp_env())  # fmt: skip
        assert proc.stdout is not None
        first = ""
        if rng.random() < 0.2:
            time.sleep(rng.uniform(0.0, 0.03))
        else:
            first = proc.stdout.readline()  # "start …": it has read its state
            time.sleep(rng.uniform(0.0, 0.1))
        proc.kill()
        proc.wait(timeout=10)
        # read through the same buffered pipes readline used (communicate() would read the
        # raw descriptors and miss what readline had already buffered)
        assert proc.stderr is not None
        out, err = proc.stdout.read(), proc.stderr.read()
        proc.stdout.close()
        proc.stderr.close()
        assert "Traceback" not in err, err
        lines = ([first.rstrip("\n")] if first else []) + out.splitlines()
        if not lines:
            continue  # killed before it read the state
        start = lines[0].split()
        assert start[0] == "start" and int(start[2]) >= held  # no knowledge rollback
        assert int(start[1]) >= (boots[-1] if boots else 0)  # never behind a used boot
        last = int(start[2])
        for line in lines[1:]:
            kind, value = line.split()
            if kind == "boot":
                assert all(int(value) > b for b in boots), (value, boots)
                boots.append(int(value))
            else:
                assert kind == "held" and int(value) == last + 1, (line, last)
                last = held = int(value)
    assert len(boots) >= 30 and boots[0] == 3 and held > 100
    fields = state.read_text().split()
    assert fields[3] == f"{binascii.crc32(' '.join(fields[:3]).encode()):08x}"


def test_an_upgrade_takes_over_the_old_knowledge_head(tmp_path: Path) -> None:
    """main.py kept only knowledge.head before: the first boot with hirmem_mp.persist
    takes it over, so the upgrade cannot roll the knowledge back."""
    got = run_mp_json(MP_DIR / "checks" / "persist_legacy.py", str(tmp_path), "5")
    assert got == {"taken": True, "held": 5, "again": False}
    assert (tmp_path / "hirmem.state").read_text().split()[1] == "5"
