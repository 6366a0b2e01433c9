"""``hirmem memory`` on a PostgreSQL store (``--memory postgresql://…?schema=S``): the
same commands as on a SQLite file, against a real server."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from hirmem.cli.entry import main
from hirmem.emulation import postgres
from hirmem.fleet.registry import create_database
from hirmem.memory.cli import store_target
from hirmem.protocol.errors import HirmemError
from hirmem.protocol.keys import SigningKey, write_key_file
from hirmem.sql import PgTarget

pytestmark = pytest.mark.skipif(postgres.available() is not None,
                                reason=str(postgres.available()))  # fmt: skip


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    """A postgresql:// URI of a fresh database on a server of this module."""
    with postgres.Primary("memcli") as primary:
        info = dict(p.split("=", 1) for p in primary.dsn.split())
        name = f"hirmem_memcli_{secrets.token_hex(4)}"
        create_database(primary.dsn, name)
        yield f"postgresql://{info['user']}@{info['host']}:{info['port']}/{name}"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_uri_names_the_schema_and_keeps_the_rest() -> None:
    got = store_target("postgresql://u@h:5432/db?schema=mem2&connect_timeout=5")
    assert got == PgTarget("postgresql://u@h:5432/db?connect_timeout=5", "mem2")
    assert store_target("postgres://u@h/db") == PgTarget("postgres://u@h/db", "memory")
    assert store_target("mem.sqlite") == Path("mem.sqlite")
    with pytest.raises(HirmemError, match="schema="):
        store_target("postgresql://u@h/db?schema=Bad-Name")


def test_memory_commands_on_a_postgresql_store(
    database: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = f"{database}?schema=cli_{secrets.token_hex(3)}"
    key = tmp_path / "host.key"
    write_key_file(key, SigningKey.generate())
    code, _, err = run(capsys, "memory", "stats", "--memory", uri, "--key", str(key))
    assert code == 2 and "no memory store here" in err and "--create" in err
    code, _, err = run(capsys, "memory", "admit", "x", "--memory", uri)
    assert code == 2 and "--key FILE" in err  # no key file sits beside a database
    s = ["--memory", uri, "--key", str(key)]
    code, out, err = run(capsys, "memory", "admit", "the pump runs at night", *s,
                         "--source", "ops")  # fmt: skip
    assert code == 0, err
    first = out.split()[0]
    code, out, err = run(capsys, "memory", "admit", "tamper alarm", *s, "--flags", "0x0",
                         "--source", "ops")  # fmt: skip
    assert code == 0 and "quarantined" in out, err
    stats = json.loads(run(capsys, "memory", "stats", *s, "--json")[1])
    assert sum(stats["states"].values()) == 2 and stats["states"]["quarantined"] == 1
    code, out, _ = run(capsys, "memory", "recall", "pump at night", *s, "--no-touch")
    assert code == 0 and first in out
    waiting = json.loads(run(capsys, "memory", "review", "list", *s, "--json")[1])
    assert [m["payload"] for m in waiting] == ["tamper alarm"]
    code, out, err = run(capsys, "memory", "repair", first, "the pump runs at dawn", *s,
                         "--reason", "the log said dawn", "--steward", "ana")  # fmt: skip
    assert code == 0 and "supersedes" in out, err
    code, out, _ = run(capsys, "memory", "history", first, *s)
    assert code == 0 and "steward:ana" in out
    code, out, _ = run(capsys, "memory", "checkpoint", *s)
    assert code == 0
    anchor = out.strip().splitlines()[-1]
    code, out, _ = run(capsys, "memory", "verify", *s, "--anchor", anchor)
    assert code == 0 and "audit chain intact" in out
    before = json.loads(run(capsys, "memory", "stats", *s, "--json")[1])
    other = tmp_path / "other.key"
    write_key_file(other, SigningKey.generate())
    code, out, err = run(capsys, "memory", "admit", "y", "--memory", uri, "--key", str(other))
    assert code == 2 and "signed by key" in err  # refused before anything is written
    assert json.loads(run(capsys, "memory", "stats", *s, "--json")[1]) == before
