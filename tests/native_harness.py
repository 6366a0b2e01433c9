"""Drive the native C test programs (tests/native/t_*.c) from pytest.

The programs are built by ``make -C firmware host`` with -Wall -Wextra -Werror
and AddressSanitizer/UBSan. Each reads requests on stdin, one per line, and
answers one line each (see tests/native/hexio.h for the notation).
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "host"

Arg = int | bytes


@cache
def build() -> None:
    """Build the core and the test programs once per test session."""
    proc = subprocess.run(
        ["make", "-s", "-C", str(ROOT / "firmware"), "host"], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"native build failed:\n{proc.stdout}\n{proc.stderr}")


def encode_arg(arg: Arg) -> str:
    return "x" + arg.hex() if isinstance(arg, bytes) else str(arg)


def decode_field(field: str) -> Arg:
    return bytes.fromhex(field[1:]) if field.startswith("x") else int(field)


def request_text(requests: Sequence[tuple[str, Sequence[Arg]]]) -> str:
    """The request lines of a batch, in the notation of tests/native/hexio.h."""
    return "".join(" ".join([cmd, *(encode_arg(a) for a in args)]) + "\n" for cmd, args in requests)


def parse_answers(text: str) -> list[list[Arg | str]]:
    """The answer lines of a program's output; a field that is neither a number nor hex
    (a word such as an error name) is kept as a string."""
    answers: list[list[Arg | str]] = []
    for line in text.splitlines():
        fields: list[Arg | str] = []
        for field in line.split(" ") if line else []:
            if field.startswith("x") or field.lstrip("-").isdigit():
                fields.append(decode_field(field) if not field.startswith("-") else int(field))
            else:
                fields.append(field)
        answers.append(fields)
    return answers


def run(program: str, requests: Sequence[tuple[str, Sequence[Arg]]]) -> list[list[Arg | str]]:
    """Send requests to ``build/host/<program>``; return the answers, one list per line.

    A field that is neither a number nor hex (a word such as an error name) is
    returned as a string. Sanitizer reports fail the run.
    """
    build()
    text = request_text(requests)
    proc = subprocess.run(
        [str(BUILD / program)], input=text, capture_output=True, text=True, timeout=600
    )
    if proc.returncode != 0 or "runtime error" in proc.stderr or "Sanitizer" in proc.stderr:
        raise AssertionError(f"{program} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    answers = parse_answers(proc.stdout)
    if len(answers) != len(requests):
        raise AssertionError(f"{program}: {len(requests)} requests, {len(answers)} answers")
    return answers
