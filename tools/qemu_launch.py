#!/usr/bin/env python3
"""Boot a board image in QEMU with its UART on a local socket (hirmem.emulation.qemu).

    .venv/bin/python tools/qemu_launch.py hifive1 build/.../hirmem-0102030405060708.elf
    .venv/bin/python tools/qemu_launch.py hifive1 IMAGE --port 5000
    .venv/bin/python tools/qemu_launch.py --list

Prints the pyserial URL (socket://127.0.0.1:PORT) on its own line as soon as QEMU
listens (the guest starts when a client connects), then waits for the board to
exit and returns its exit code (3: the image is not provisioned). ``--port`` fixes
the TCP port (default: a free one from the kernel); a port in use is an error. QEMU
is killed after --timeout seconds (exit code 124), on Ctrl-C (130) and on SIGTERM or
SIGHUP (128 + the signal's number), and by the kernel when the launcher dies any
other way (kill -9): it never outlives the launcher.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hirmem.emulation.qemu import BOARDS, QemuBoard, QemuError, terminate_on_signals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("board", nargs="?", choices=sorted(BOARDS))
    parser.add_argument("image", nargs="?", type=Path, help="a (provisioned) ELF image")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds (default 600)")
    parser.add_argument("--port", type=int, help="TCP port of the UART (default: a free one)")
    parser.add_argument("--nv", type=Path, metavar="FILE",
                        help="back the board's non-volatile region with FILE (kept across "
                        "runs: a power cycle)")  # fmt: skip
    parser.add_argument("--list", action="store_true", help="list the boards and exit")
    args = parser.parse_args(argv)
    if args.list:
        for spec in BOARDS.values():
            print(f"{spec.name:12} {spec.qemu} -M {spec.machine} {' '.join(spec.extra)}")
        return 0
    if args.board is None or args.image is None:
        parser.error("a board and an image are needed (or --list)")
    try:
        with (
            terminate_on_signals(),
            QemuBoard(args.board, args.image, timeout=args.timeout, port=args.port,
                      die_with_parent=True, nv_file=args.nv) as qb,
        ):
            print(qb.url, flush=True)
            return qb.wait()
    except KeyboardInterrupt:
        return 130
    except QemuError as exc:
        print(f"qemu_launch: {exc}", file=sys.stderr)
        return 124 if "timeout" in str(exc) else 2


if __name__ == "__main__":
    sys.exit(main())
