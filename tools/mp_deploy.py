"""Deploy the MicroPython agent to a board: mpy-cross, a config module, mpremote.

Usage:
  python tools/mp_deploy.py --port /dev/ttyACM0 --device-id 0102030405060708 \
      --seed-file keys/device.seed --host-public <64 hex> --host-id a1a2a3a4a5a6a7a8 \
      [--boot 1] [--board pico] [--uart 0 --baud 115200] [--out build/mp] [--dry-run]

Compiles firmware/micropython/hirmem_mp/*.py to .mpy with mpy-cross, writes
hirmem_config.py (device id, key seed, host public key and id; mode 0600 on the
host, because it holds the seed) and copies hirmem_mp/, hirmem_config.py and main.py
to the board with `mpremote connect <port> fs cp`. The seed file holds the 32-byte
seed raw or as 64 hex digits and must not be readable by others; the seed is never
printed. With --dry-run nothing is copied.
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MP_DIR = ROOT / "firmware" / "micropython"


def tool(name: str) -> str:
    local = Path(sys.executable).parent / name
    found = str(local) if local.exists() else shutil.which(name)
    if found is None:
        raise SystemExit(f"{name} not found: pip install -e '.[test]'")
    return found


def read_seed(path: Path) -> bytes:
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SystemExit(f"{path} is readable by others: chmod 600 {path}")
    raw = path.read_bytes()
    if len(raw) != 32:
        try:
            raw = bytes.fromhex(raw.decode().strip())
        except ValueError:
            raw = b""
    if len(raw) != 32:
        raise SystemExit(f"{path}: expected a 32-byte seed (raw or 64 hex digits)")
    return raw


def hex_arg(value: str, size: int, name: str) -> bytes:
    try:
        b = bytes.fromhex(value)
    except ValueError:
        b = b""
    if len(b) != size:
        raise SystemExit(f"--{name} must be {2 * size} hex digits")
    return b


def compile_package(out: Path) -> list[Path]:
    mpy_cross = tool("mpy-cross")
    pkg = out / "hirmem_mp"
    pkg.mkdir(parents=True, exist_ok=True)
    built = []
    for src in sorted((MP_DIR / "hirmem_mp").glob("*.py")):
        dst = pkg / f"{src.stem}.mpy"
        subprocess.run([mpy_cross, "-o", str(dst), str(src)], check=True)
        built.append(dst)
    return built


def write_config(out: Path, args: argparse.Namespace, seed: bytes) -> Path:
    host_public = hex_arg(args.host_public, 32, "host-public") if args.host_public else None
    host_id = hex_arg(args.host_id, 8, "host-id") if args.host_id else None
    text = (
        "# written by tools/mp_deploy.py: holds the device key seed, keep it private\n"
        f"DEVICE_ID = {hex_arg(args.device_id, 8, 'device-id')!r}\n"
        f"SEED = {seed!r}\n"
        f"HOST_PUBLIC = {host_public!r}\n"
        f"HOST_ID = {host_id!r}\n"
        f"BOOT = {args.boot}\n"
        f"BOARD = {args.board!r}\n"
        f"UART_ID = {args.uart}\n"
        f"BAUDRATE = {args.baud}\n"
        f"OFFER_THRESHOLD = {args.offer_threshold}\n"
        f"OFFER_PERIOD_MS = {args.offer_period_ms}\n"
    )
    path = out / "hirmem_config.py"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", default="auto", help="mpremote connect target")
    ap.add_argument("--device-id", required=True)
    ap.add_argument("--seed-file", type=Path, required=True)
    ap.add_argument("--host-public", default="")
    ap.add_argument("--host-id", default="")
    ap.add_argument("--boot", type=int, default=1)
    ap.add_argument("--board", default="micropython")
    ap.add_argument("--uart", type=int, default=0)
    ap.add_argument("--baud", type=int, default=115200)
    ap.add_argument("--offer-threshold", type=int, default=4)
    ap.add_argument("--offer-period-ms", type=int, default=60000)
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "mp")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    seed = read_seed(args.seed_file)
    args.out.mkdir(parents=True, exist_ok=True)
    built = compile_package(args.out)
    config = write_config(args.out, args, seed)
    print(f"compiled {len(built)} modules into {args.out / 'hirmem_mp'}; config {config} (0600)")
    if args.dry_run:
        return 0
    mpremote = tool("mpremote")
    base = [mpremote, "connect", args.port]
    subprocess.run([*base, "fs", "mkdir", ":hirmem_mp"], check=False)
    subprocess.run([*base, "fs", "cp", *map(str, built), ":hirmem_mp/"], check=True)
    subprocess.run([*base, "fs", "cp", str(config), str(MP_DIR / "main.py"), ":"], check=True)
    print(f"deployed to {args.port}; reset the board to start the agent")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
