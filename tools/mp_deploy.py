"""Deploy the MicroPython agent to a board: mpy-cross, a config module, mpremote.

Usage:
  hirmem keys --out keys/device.key            # the device's key (once per device)
  python tools/mp_deploy.py --port /dev/ttyACM0 --device-id 0102030405060708 \
      --seed-file keys/device.key --host-key keys/host.key --host-id a1a2a3a4a5a6a7a8 \
      [--boot 1] [--board pico] [--uart 0 --baud 115200] [--out build/mp] [--dry-run]

Compiles firmware/micropython/hirmem_mp/*.py to .mpy with mpy-cross, writes
hirmem_config.py (device id, key seed, host public key and id; mode 0600 on the
host, because it holds the seed) and copies hirmem_mp/, hirmem_config.py and main.py
to the board with `mpremote connect <port> fs cp`.

The device's seed file is a key file that `hirmem keys` writes, or the 32-byte seed
raw or as 64 hex digits; it must not be readable by others, and the seed is never
printed. The host's public key comes from its key file (--host-key, what `hirmem
keys` wrote for the host: only the public half is used) or as 64 hex digits
(--host-public, what `hirmem keys` printed). The device's public key is printed with
the `hirmem device add` line that makes the host trust it. A missing or unreadable
file is an error message and exit status 2, never a traceback. With --dry-run
nothing is copied.
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
sys.path.insert(0, str(ROOT / "host"))

from hirmem.protocol.keys import KEY_FILE_TAG, KeyFileError, SigningKey, read_key_file  # noqa: E402


class DeployError(Exception):
    """What the user gave cannot be deployed; the message says why."""


def tool(name: str) -> str:
    local = Path(sys.executable).parent / name
    found = str(local) if local.exists() else shutil.which(name)
    if found is None:
        raise DeployError(f"{name} not found: pip install -e '.[test]'")
    return found


def read_seed(path: Path, what: str = "--seed-file") -> bytes:
    """A 32-byte seed from a `hirmem keys` key file, raw bytes or 64 hex digits."""
    try:
        mode = path.stat().st_mode
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DeployError(f"{what} {path}: no such file (create a key with "
                          f"`hirmem keys --out {path}`)") from None  # fmt: skip
    except OSError as exc:
        raise DeployError(f"{what} {path}: cannot read it ({exc.strerror})") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise DeployError(f"{what} {path} is readable by others: chmod 600 {path}")
    if raw.startswith(KEY_FILE_TAG.encode()):
        try:
            return read_key_file(path).seed()
        except KeyFileError as exc:
            raise DeployError(f"{what} {exc}") from None
    if len(raw) != 32:
        try:
            raw = bytes.fromhex(raw.decode().strip())
        except (ValueError, UnicodeDecodeError):
            raw = b""
    if len(raw) != 32:
        raise DeployError(f"{what} {path}: expected a `hirmem keys` key file or a "
                          "32-byte seed (raw or 64 hex digits)")  # fmt: skip
    return raw


def hex_arg(value: str, size: int, name: str) -> bytes:
    try:
        b = bytes.fromhex(value)
    except ValueError:
        b = b""
    if len(b) != size:
        raise DeployError(f"--{name} must be {2 * size} hex digits")
    return b


def run_tool(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise DeployError(f"{Path(cmd[0]).name} failed ({proc.returncode}): "
                          f"{(proc.stderr or proc.stdout).strip()[-800:]}")  # fmt: skip


def compile_package(out: Path) -> list[Path]:
    mpy_cross = tool("mpy-cross")
    pkg = out / "hirmem_mp"
    pkg.mkdir(parents=True, exist_ok=True)
    built = []
    for src in sorted((MP_DIR / "hirmem_mp").glob("*.py")):
        dst = pkg / f"{src.stem}.mpy"
        run_tool([mpy_cross, "-o", str(dst), str(src)])
        built.append(dst)
    return built


def host_public_key(args: argparse.Namespace) -> bytes | None:
    """The host's public key: from its key file (--host-key) or as hex (--host-public)."""
    if args.host_key and args.host_public:
        raise DeployError("give --host-key or --host-public, not both")
    if args.host_key:
        return SigningKey(read_seed(args.host_key, "--host-key")).public.raw
    return hex_arg(args.host_public, 32, "host-public") if args.host_public else None


def write_config(out: Path, args: argparse.Namespace, seed: bytes) -> Path:
    host_public = host_public_key(args)
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
    ap.add_argument("--host-public", default="", help="the host's public key, 64 hex digits")
    ap.add_argument("--host-key", type=Path, help="the host's key file (`hirmem keys`)")
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
    try:
        return deploy(args)
    except DeployError as exc:
        print(f"mp_deploy: {exc}", file=sys.stderr)
        return 2


def deploy(args: argparse.Namespace) -> int:
    device_id = hex_arg(args.device_id, 8, "device-id")
    seed = read_seed(args.seed_file)
    host_public_key(args)  # a bad host key stops us before anything is compiled
    args.out.mkdir(parents=True, exist_ok=True)
    built = compile_package(args.out)
    config = write_config(args.out, args, seed)
    print(f"compiled {len(built)} modules into {args.out / 'hirmem_mp'}; config {config} (0600)")
    public = SigningKey(seed).public.raw.hex()
    print(f"device public key: {public}")
    print(f"trust it on the host: hirmem device add --id {device_id.hex()} --public {public} "
          f"--board {args.board}")  # fmt: skip
    if args.dry_run:
        return 0
    mpremote = tool("mpremote")
    base = [mpremote, "connect", args.port]
    subprocess.run([*base, "fs", "mkdir", ":hirmem_mp"], check=False)
    run_tool([*base, "fs", "cp", *map(str, built), ":hirmem_mp/"])
    run_tool([*base, "fs", "cp", str(config), str(MP_DIR / "main.py"), ":"])
    print(f"deployed to {args.port}; reset the board to start the agent")
    return 0


if __name__ == "__main__":
    sys.exit(main())
