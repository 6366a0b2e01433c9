"""Issue #15 §7: one command-line convention for every ``hirmem`` command.

The store option has one name (``--database``, default ``$HIRMEM_DB``, then
``host.database`` of ``--config``), the old spellings still work with a note, options are
taken after subcommands, every table has ``--json``, ``--version``, ``--log-level``, shell
completion, a mistyped store path is an error unless ``--create``, and the systemd unit
passes ``systemd-analyze verify``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hirmem.cli.entry import build_parser, main, version
from hirmem.daemon.store import Store
from hirmem.memory.engine import MemoryEngine
from test_store import DEV_A, KEY_A, Device, store_with_conflicts

ROOT = Path(__file__).resolve().parents[1]
HOST_ID = "a1a2a3a4a5a6a7a8"
OLD_SPELLINGS = ("--db", "--intake", "--store")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "HIRMEM_DB"}
    return dict(env, PYTHONPATH=str(ROOT / "host"), **extra)


@pytest.fixture(autouse=True)
def _no_env_database(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HIRMEM_DB", raising=False)


def leaves(parser: argparse.ArgumentParser, path: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every command line's last parser, by its words ("memory review list")."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return {path.strip(): parser}
    found: dict[str, argparse.ArgumentParser] = {}
    for name, child in subs[0].choices.items():
        found.update(leaves(child, f"{path} {name}"))
    return found


def options_of(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {s: a for a in parser._actions for s in a.option_strings}


def daemon_store(path: Path) -> Path:
    """A store with one device, one accepted pack of 3 records and one refusal."""
    with Store(path) as store:
        store.register_device(DEV_A, KEY_A.public.raw, "mps2-an385")
        assert store.take_pack(DEV_A, Device(DEV_A, KEY_A).pack(3).encoded).status == "accepted"
        assert store.take_pack(DEV_A, b"\xd2\x84").status == "refused"
    return path


# --- one name, old spellings hidden and noted ---------------------------------------------


def test_every_command_that_takes_the_store_calls_it_database() -> None:
    """Every store option is spelled --database; the old spellings are on no help page."""
    commands = leaves(build_parser())
    takes_store = {
        name for name, p in commands.items()
        if any(a.dest == "database" for a in p._actions)
    }  # fmt: skip
    assert takes_store >= {"daemon", "status", "intake", "push", "device add", "device list",
                           "device remove", "memory follow", "semantic devices"}  # fmt: skip
    for name in takes_store:
        opts = options_of(commands[name])
        assert opts["--database"].dest == "database", name
        assert opts["--database"].help not in (None, argparse.SUPPRESS), name
    for name, p in commands.items():
        for spelling in OLD_SPELLINGS:
            if spelling in options_of(p):
                assert options_of(p)[spelling].help == argparse.SUPPRESS, (name, spelling)
                assert spelling not in p.format_help(), (name, spelling)


def test_old_spellings_still_work_with_a_note_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, _ = store_with_conflicts(tmp_path / "h.db")
    store.close()
    db = str(tmp_path / "h.db")
    mem, sub = str(tmp_path / "m.db"), str(tmp_path / "s.db")
    code, out, err = run(capsys, "memory", "--db", mem, "follow", "--intake", db)
    assert code == 0 and "4 admitted" in out
    assert "--db is deprecated here; use --memory" in err
    assert "--intake is deprecated here; use --database" in err
    assert len(err.strip().splitlines()) == 2  # one line each
    code, out, err = run(capsys, "semantic", "devices", "--store", db, "--db", sub)
    assert code == 0 and "fed 4 records" in out
    assert "--store is deprecated here; use --database" in err
    assert "--db is deprecated here; use --substrate" in err
    # the new spellings say nothing and do the same (nothing new to feed or admit)
    code, out, err = run(capsys, "memory", "follow", "--memory", mem, "--database", db)
    assert code == 0 and "0 admitted" in out and err == ""
    code, out, err = run(capsys, "semantic", "devices", "--database", db, "--substrate", sub)
    assert code == 0 and "fed 0 records" in out and err == ""
    # the memory group's --config (its JSON settings) is --memory-config now; before the
    # command, --config is the global TOML file and no old spelling
    settings = tmp_path / "memory.json"
    settings.write_text("{}")
    code, _, err = run(capsys, "memory", "stats", "--memory", mem, "--config", str(settings))
    assert code == 0 and err.strip() == "hirmem: --config is deprecated here; use --memory-config"
    code, _, err = run(capsys, "memory", "stats", "--memory", mem, "--memory-config",
                       str(settings))  # fmt: skip
    assert code == 0 and err == ""
    toml = tmp_path / "hirmem.toml"
    toml.write_text(f'[host]\ndatabase = "{db}"\n')
    code, out, err = run(capsys, "--config", str(toml), "memory", "follow", "--memory", mem)
    assert code == 0 and "0 admitted" in out and err == ""
    settings.write_text('{"no_such_setting": 1}')  # the JSON is read: its error shows
    code, _, err = run(capsys, "memory", "stats", "--memory", mem, "--memory-config",
                       str(settings))  # fmt: skip
    assert code == 2 and "no_such_setting" in err


# --- defaults: flag, then HIRMEM_DB, then host.database of --config ------------------------


def test_the_store_comes_from_the_flag_the_environment_or_the_toml_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    by_flag = daemon_store(tmp_path / "flag.db")
    by_env = tmp_path / "env.db"
    Store(by_env).close()  # a store with no device
    sub = tmp_path / "etc"
    sub.mkdir()
    by_toml = tmp_path / "etc" / "toml.db"
    Store(by_toml).close()
    config = sub / "hirmem.toml"
    config.write_text(f'[host]\nid = "{HOST_ID}"\ndatabase = "toml.db"\n')  # relative to it
    monkeypatch.chdir(tmp_path)  # hirmem.db, the last default, is not there

    def devices(*argv: str) -> list[Any]:
        code, out, err = run(capsys, "device", "list", "--json", *argv)
        assert code == 0, err
        return list(json.loads(out))

    assert run(capsys, "status")[0] == 2  # ./hirmem.db does not exist: refused
    assert devices("--config", str(config)) == []
    assert run(capsys, "--config", str(config), "status", "--json")[1].strip() == "[]"
    monkeypatch.setenv("HIRMEM_DB", str(by_env))
    assert devices("--config", str(config)) == []  # the environment before the file
    assert devices() == []
    monkeypatch.setenv("HIRMEM_DB", str(tmp_path / "nope.db"))
    code, _, err = run(capsys, "status")
    assert code == 2 and "nope.db" in err
    [row] = devices("--database", str(by_flag))  # the flag before everything
    assert row["device"] == DEV_A.hex()
    [row] = devices("--config", str(config), "--database", str(by_flag))
    assert row["board"] == "mps2-an385"


def test_a_broken_config_file_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[host\n")
    code, _, err = run(capsys, "status", "--config", str(bad))
    assert code == 2 and "not valid TOML" in err and str(bad) in err
    code, _, err = run(capsys, "status", "--config", str(tmp_path / "absent.toml"))
    assert code == 2 and "cannot read it" in err
    bad.write_text('[host]\ndatabase = 5\n')
    code, _, err = run(capsys, "status", "--config", str(bad))
    assert code == 2 and "host.database must be a string" in err


# --- options after subcommands ---------------------------------------------------------------


def test_options_are_taken_before_and_after_subcommands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(daemon_store(tmp_path / "h.db"))
    mem = str(tmp_path / "m.db")
    # the memory group's options after the subcommand (they had to come before it)
    assert run(capsys, "memory", "follow", "--db", mem, "--intake", db)[0] == 0
    assert run(capsys, "memory", "stats", "--memory", mem)[0] == 0
    assert run(capsys, "memory", "--memory", mem, "stats")[0] == 0
    assert run(capsys, "memory", "review", "list", "--memory", mem)[0] == 0
    # the global ones before the command, the command's after it; the last one wins
    before = run(capsys, "--database", db, "status", "--json")
    after = run(capsys, "status", "--json", "--database", db)
    assert before[0] == after[0] == 0
    assert json.loads(before[1])[0]["records"] == json.loads(after[1])[0]["records"] == 3
    wins = run(capsys, "--database", str(tmp_path / "nope.db"), "device", "list", "--database", db)
    assert wins[0] == 0 and DEV_A.hex() in wins[1]
    wins = run(capsys, "device", "--database", db, "list", "--json")
    assert wins[0] == 0 and json.loads(wins[1])[0]["device"] == DEV_A.hex()
    mem2 = str(tmp_path / "m2.db")
    code, _, _ = run(capsys, "memory", "--memory", mem2, "admit", "x", "--memory", mem)
    assert code == 0 and Path(mem).exists() and not Path(mem2).exists()


# --- --json on every table ---------------------------------------------------------------------


def test_every_table_has_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each command that prints a table prints the same facts as JSON with --json."""
    db = str(daemon_store(tmp_path / "h.db"))
    mem, sub = str(tmp_path / "m.db"), str(tmp_path / "s.db")
    tables = {n for n, p in leaves(build_parser()).items() if "--json" in options_of(p)}
    assert tables >= {"status", "intake", "device list", "memory stats", "memory list",
                      "memory patterns", "memory review list", "semantic devices"}  # fmt: skip

    def as_json(*argv: str) -> Any:
        code, out, err = run(capsys, *argv, "--json")
        assert code == 0, err
        return json.loads(out)

    [dev] = as_json("device", "list", "--database", db)
    with Store(db) as store:
        [held] = store.devices()
    assert held.head is not None and dev["head_seq"] == held.head.seq
    assert dev["device"] == DEV_A.hex() and dev["board"] == "mps2-an385"
    [row] = as_json("status", "--database", db)
    assert (row["packs"], row["records"], row["refused"]) == (1, 3, 1)
    intake = as_json("intake", "--database", db, "--records", "--check")
    assert isinstance(intake, dict)
    assert [p["records"] for p in intake["packs"]] == [3]
    assert len(intake["records"]) == 3 and intake["integrity"]["ok"] is True
    assert [r["reason"] for r in intake["refusals"]] == ["malformed"]
    # the text table says the same
    out = run(capsys, "intake", "--database", db, "--records")[1]
    assert out.count("  record ") == 3 and all(r["record"] in out for r in intake["records"])

    assert run(capsys, "memory", "follow", "--memory", mem, "--database", db)[0] == 0
    stats = as_json("memory", "stats", "--memory", mem)
    assert isinstance(stats, dict) and stats["layers"]["episodic"] == 3
    listed = as_json("memory", "list", "--memory", mem, "--limit", "2")
    assert isinstance(listed, list) and len(listed) == 2
    engine = MemoryEngine(mem)  # the ids listed are the store's, in its order
    try:
        first = [m.id for m in engine.store.select(tail="ORDER BY rowid")][:2]
    finally:
        engine.close()
    assert [m["id"] for m in listed] == first
    [pattern] = as_json("memory", "patterns", "--memory", mem)
    assert pattern["kind"] == "pattern" and len(pattern["episodes"]) == 3
    everything = as_json("memory", "list", "--memory", mem)
    assert isinstance(everything, list)
    assert set(pattern["episodes"]) <= {m["id"] for m in everything}
    assert as_json("memory", "review", "list", "--memory", mem) == []
    fed = as_json("semantic", "devices", "--database", db, "--substrate", sub)
    assert isinstance(fed, dict) and fed["fed"] == 3 and fed["conflicts"] == []


# --- --version, --log-level, completion ------------------------------------------------------


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.strip() == f"hirmem {version()}" and re.search(r"\d+\.\d+", out)


def wait_for_sigterm_handler(pid: int, timeout: float = 60.0) -> None:
    """Until the process has installed its SIGTERM handler (Linux: SigCgt in
    /proc/PID/status), which the daemon does once it runs; Python sets none by itself."""
    bit = 1 << (signal.SIGTERM - 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:") and int(line.split()[1], 16) & bit:
                return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} set no SIGTERM handler in {timeout} s")


def test_log_level_on_the_daemon_and_globally(tmp_path: Path) -> None:
    """The daemon logs its start at info: --log-level warning hides it, before or after the
    command; debug shows more than the default."""
    db = daemon_store(tmp_path / "h.db")

    def daemon_log(*argv: str) -> str:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hirmem.cli", *argv],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=cli_env(),
        )  # fmt: skip
        wait_for_sigterm_handler(proc.pid)  # up: a fixed sleep loses to a loaded machine
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, out
        return out

    args = ["--host-id", HOST_ID, "--device", "loop://", "--database", str(db)]
    default = daemon_log("daemon", *args)
    assert "daemon stopped" in default
    assert "daemon stopped" not in daemon_log("daemon", *args, "--log-level", "warning")
    assert "daemon stopped" not in daemon_log("--log-level", "error", "daemon", *args)
    assert "daemon stopped" in daemon_log("daemon", *args, "--log-level", "debug")
    # the other commands: the level reaches the hirmem loggers
    db_arg = f"--database={db}"
    for level, number in (("debug", 10), ("error", 40)):
        code = ("import logging, sys; from hirmem.cli.entry import main; "
                f"rc = main(['--log-level', '{level}', 'status', '{db_arg}']); "
                "print(logging.getLogger('hirmem.memory').getEffectiveLevel()); sys.exit(rc)")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=cli_env(), timeout=60)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines()[-1] == str(number)
    proc = subprocess.run(
        [sys.executable, "-m", "hirmem.cli", "--log-level", "loud", "status"],
        capture_output=True, text=True, env=cli_env(), timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2 and "--log-level" in proc.stderr and "debug" in proc.stderr


def test_completion_script_and_completions(tmp_path: Path) -> None:
    """`hirmem completion bash` prints the hook; the hook's protocol completes commands and
    options, the new spellings only."""
    proc = subprocess.run(
        [sys.executable, "-m", "hirmem.cli", "completion", "bash"],
        capture_output=True, text=True, env=cli_env(), timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0 and "complete " in proc.stdout and "hirmem" in proc.stdout
    if shutil.which("bash"):
        check = subprocess.run(["bash", "-n"], input=proc.stdout, capture_output=True, text=True)
        assert check.returncode == 0, check.stderr

    def complete(line: str) -> list[str]:
        out = tmp_path / "completions"
        env = cli_env(_ARGCOMPLETE="1", _ARGCOMPLETE_IFS="\n", COMP_LINE=line,
                      COMP_POINT=str(len(line)), _ARGCOMPLETE_STDOUT_FILENAME=str(out))
        subprocess.run([sys.executable, "-m", "hirmem.cli"], env=env, timeout=60,
                       capture_output=True)  # fmt: skip
        return [word.strip() for word in out.read_text().split("\n")]

    assert "status" in complete("hirmem sta")
    assert "semantic" in complete("hirmem se")
    opts = complete("hirmem memory follow --")
    assert "--database" in opts and "--memory" in opts
    assert not set(opts) & set(OLD_SPELLINGS)


# --- a mistyped path is an error unless --create -------------------------------------------------


def test_a_missing_store_is_an_error_unless_create(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    typo = tmp_path / "hirmem.bd"
    reads = [
        ["status"], ["intake"], ["device", "list"], ["device", "remove", "--id", DEV_A.hex()],
        ["memory", "follow", "--memory", str(tmp_path / "m.db")],
        ["semantic", "devices", "--substrate", str(tmp_path / "s.db")],
    ]  # fmt: skip
    for argv in reads:
        code, out, err = run(capsys, *argv, "--database", str(typo))
        assert code == 2, argv
        assert str(typo) in err and "--create" in err and "Traceback" not in err, argv
        assert not typo.exists(), argv
    code, out, err = run(capsys, "status", "--database", str(typo), "--create")
    assert code == 0 and typo.exists() and "no devices registered" in out
    # the memory store's read commands too
    mem = tmp_path / "memory.sqlite"
    for argv in (["stats"], ["list"], ["patterns"], ["review", "list"]):
        code, _, err = run(capsys, "memory", *argv, "--memory", str(mem))
        assert code == 2 and str(mem) in err and "--create" in err and not mem.exists(), argv
    assert run(capsys, "memory", "stats", "--memory", str(mem), "--create")[0] == 0
    assert mem.exists()
    # and the semantic substrate's
    substrate = tmp_path / "semantic.db"
    for argv in (["ask", "Where does Bob live?"], ["trace", "ffffffffffffffff"]):
        code, _, err = run(capsys, "semantic", *argv, "--substrate", str(substrate))
        assert code == 2 and str(substrate) in err and "--create" in err, argv
        assert not substrate.exists(), argv
    code, out, _ = run(capsys, "semantic", "ask", "Where?", "--substrate", str(substrate),
                       "--create")  # fmt: skip
    assert code == 1 and "no answer" in out and substrate.exists()
    # writes create their store, as before
    fresh = tmp_path / "fresh.db"
    ident = tmp_path / "dev.pub.json"
    ident.write_text(json.dumps({"device_id": DEV_A.hex(), "public_key": KEY_A.public.raw.hex()}))
    assert run(capsys, "device", "add", "--database", str(fresh), "--identity", str(ident))[0] == 0


def test_the_daemon_refuses_a_missing_store_unless_create(tmp_path: Path) -> None:
    typo = tmp_path / "typo.db"
    argv = [sys.executable, "-m", "hirmem.cli", "daemon", "--host-id", HOST_ID,
            "--device", "loop://", "--database", str(typo)]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, env=cli_env(), timeout=60)
    assert proc.returncode == 2 and str(typo) in proc.stderr and "--create" in proc.stderr
    assert not typo.exists() and "Traceback" not in proc.stderr
    # through the TOML file and HIRMEM_DB alike
    config = tmp_path / "hirmem.toml"
    config.write_text(f'[host]\nid = "{HOST_ID}"\ndatabase = "typo2.db"\n'
                      '[[device]]\nurl = "loop://"\n')  # fmt: skip
    via_toml = [sys.executable, "-m", "hirmem.cli", "daemon", "--config", str(config)]
    proc = subprocess.run(via_toml, capture_output=True, text=True, env=cli_env(), timeout=60)
    assert proc.returncode == 2 and "typo2.db" in proc.stderr
    env_db = tmp_path / "typo3.db"
    proc = subprocess.run(via_toml, capture_output=True, text=True, timeout=60,
                          env=cli_env(HIRMEM_DB=str(env_db)))  # fmt: skip
    assert proc.returncode == 2 and "typo3.db" in proc.stderr and "typo2.db" not in proc.stderr
    assert not (tmp_path / "typo2.db").exists() and not env_db.exists()
    # --create starts it and the store is made
    started = subprocess.Popen([*argv, "--create"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env=cli_env())  # fmt: skip
    deadline = time.monotonic() + 30
    while not typo.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(2.0)  # past its start, where SIGTERM is a clean stop
    started.send_signal(signal.SIGTERM)
    out, _ = started.communicate(timeout=30)
    assert started.returncode == 0 and typo.exists() and "daemon stopped" in out


# --- the systemd unit -------------------------------------------------------------------------


UNIT = ROOT / "packaging" / "hirmem.service"
HARDENING = ("DynamicUser=yes", "ProtectSystem=strict", "NoNewPrivileges=yes",
             "StateDirectory=hirmem", "ProtectHome=yes", "PrivateTmp=yes",
             "CapabilityBoundingSet=", "RestrictAddressFamilies=", "SystemCallFilter=")


@pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                    reason="systemd-analyze is not installed (no systemd on this machine)")
def test_the_systemd_unit_verifies_and_is_hardened(tmp_path: Path) -> None:
    text = UNIT.read_text()
    for directive in HARDENING:
        assert re.search(rf"^{re.escape(directive)}", text, re.M), directive
    # verify needs the ExecStart program to exist: point it at this machine's hirmem
    exe = shutil.which("hirmem") or str(Path(sys.executable).with_name("hirmem"))
    assert Path(exe).exists(), "the hirmem entry point is not installed"
    unit = tmp_path / "hirmem.service"
    unit.write_text(text.replace("/usr/local/bin/hirmem", exe))
    proc = subprocess.run(["systemd-analyze", "verify", str(unit)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    # verify exits 0 on unknown keys and bad values: a warning on stderr is a failure too
    assert proc.returncode == 0 and proc.stderr.strip() == "", proc.stderr
    sec = subprocess.run(["systemd-analyze", "security", "--offline=true", str(unit)],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    level = re.search(r"Overall exposure level for \S+: ([\d.]+)", sec.stdout + sec.stderr)
    if level is not None:  # systemd ≥ 252 scores units offline
        print(f"systemd-analyze security: exposure {level.group(1)} (0 best, 10 worst)")
        assert float(level.group(1)) <= 2.0, sec.stdout
    # and the unit's command line parses as hirmem's
    words = re.search(r"^ExecStart=\S+ (.*?)$", text.replace("\\\n", " "), re.M)
    assert words is not None
    args = build_parser().parse_args(words.group(1).split())
    assert args.command == "daemon" and args.create and args.log_format == "json"
