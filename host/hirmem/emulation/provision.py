"""Provisioning: device key files and the key slot of a built board image.

A board image (build/boards/<board>/hirmem.elf and .bin) carries one ``hm_slot``
(boards/include/hm_slot.h) named ``hm_key_slot`` in its own section: 192 bytes,
little-endian, ending in a CRC-32 of the bytes before it (version 2: the device's
public key next to its seed, so that the device derives it once, at boot, to check
it, and never again per signature). Built images carry the
unprovisioned template; :func:`provision_image` finds the slot through the ELF32
symbol table (parsed here with :mod:`struct`), checks that the image holds the
template it expects, and writes a provisioned copy of the ELF and of the BIN.

Device key files are written and read by :mod:`hirmem.protocol.keys`. Nothing here
prints, logs or puts a seed into an exception message or a ``repr``.
"""

from __future__ import annotations

import argparse
import binascii
import contextlib
import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from hirmem.protocol.errors import HirmemError
from hirmem.protocol.keys import ID_SIZE, PublicKey, SigningKey, read_key_file, write_key_file

SLOT_SYMBOL = "hm_key_slot"
SLOT_MAGIC = b"HMSLOT\x00\x01"
SLOT_VERSION = 2
SLOT_FORMAT = "<8sHHI8sIIIIII32s32s32s8s8s28sI"
SLOT_SIZE = struct.calcsize(SLOT_FORMAT)  # 192, hm_slot.h HM_SLOT_SIZE

FLAG_PROVISIONED = 0x0001
FLAG_HOST_KEY = 0x0002
FLAG_SENSOR = 0x0004

# Exit code of an image whose slot is not provisioned (boards/include/board.h).
EXIT_UNPROVISIONED = 3

assert SLOT_SIZE == 192


class ProvisionError(HirmemError):
    """A key file or an image could not be used for provisioning."""


@dataclass(frozen=True)
class DeviceIdentity:
    """The public half of a device: what a host needs to trust its packs."""

    device_id: bytes
    public: PublicKey

    def to_json(self) -> str:
        return json.dumps(
            {
                "device_id": self.device_id.hex(),
                "public_key": self.public.raw.hex(),
                "kid": self.public.kid.hex(),
            },
            indent=2,
        )


def create_device_key(key_path: Path, device_id: bytes | None = None) -> DeviceIdentity:
    """A new device key pair: the seed in ``key_path`` (0600), the public half in
    ``key_path`` + ``.pub.json`` (device id, public key, kid)."""
    if device_id is None:
        device_id = os.urandom(ID_SIZE)
    _check_len("device id", device_id, ID_SIZE)
    key = SigningKey.generate()
    write_key_file(key_path, key)
    ident = DeviceIdentity(device_id, key.public)
    Path(f"{key_path}.pub.json").write_text(ident.to_json() + "\n", encoding="ascii")
    return ident


# ---- the slot --------------------------------------------------------------------


@dataclass(frozen=True)
class HostTrust:
    """The host (fleet) key a device trusts for knowledge packs."""

    public: PublicKey
    host_id: bytes


@dataclass(frozen=True)
class SlotSettings:
    """What a provisioned slot holds. ``device_key`` is secret (hidden from repr)."""

    device_id: bytes
    device_key: SigningKey = field(repr=False)
    host: HostTrust | None = None
    boot_base: int = 1
    sensor_period_ms: int = 0  # 0: the synthetic sensor is off
    sensor_seed: int = 0  # 0: derived from the device id on the device
    offer_threshold: int = 0
    offer_period_ms: int = 0
    status_period_ms: int = 0

    def __post_init__(self) -> None:
        _check_len("device id", self.device_id, ID_SIZE)
        if self.host is not None:
            _check_len("host id", self.host.host_id, ID_SIZE)
        for name in (
            "boot_base",
            "sensor_period_ms",
            "sensor_seed",
            "offer_threshold",
            "offer_period_ms",
            "status_period_ms",
        ):
            value = getattr(self, name)
            if not 0 <= value <= 0xFFFFFFFF:
                raise ProvisionError(f"{name} must be 0..2^32-1, got {value}")
        if self.boot_base == 0:
            raise ProvisionError("boot_base must be at least 1")


def _check_len(name: str, value: bytes, size: int) -> None:
    if len(value) != size:
        raise ProvisionError(f"{name} must be {size} bytes, got {len(value)}")


def pack_slot(s: SlotSettings) -> bytes:
    """The 192 slot bytes for ``s``, CRC included."""
    flags = FLAG_PROVISIONED
    host_pub, host_kid, host_id = bytes(32), bytes(8), bytes(8)
    if s.host is not None:
        flags |= FLAG_HOST_KEY
        host_pub, host_kid, host_id = s.host.public.raw, s.host.public.kid, s.host.host_id
    if s.sensor_period_ms:
        flags |= FLAG_SENSOR
    body = struct.pack(
        SLOT_FORMAT,
        SLOT_MAGIC,
        SLOT_VERSION,
        flags,
        SLOT_SIZE,
        s.device_id,
        s.boot_base,
        s.sensor_period_ms,
        s.offer_threshold,
        s.offer_period_ms,
        s.status_period_ms,
        s.sensor_seed,
        s.device_key.seed(),
        s.device_key.public.raw,
        host_pub,
        host_kid,
        host_id,
        bytes(28),
        0,
    )
    crc = binascii.crc32(body[:-4]) & 0xFFFFFFFF
    return body[:-4] + struct.pack("<I", crc)


def template_slot() -> bytes:
    """The unprovisioned slot every built image carries (boards/common/slot.c)."""
    return struct.pack(
        SLOT_FORMAT, SLOT_MAGIC, SLOT_VERSION, 0, SLOT_SIZE, bytes(8), 1, 0, 0, 0, 0, 0,
        bytes(32), bytes(32), bytes(32), bytes(8), bytes(8), bytes(28), 0,
    )  # fmt: skip


@dataclass(frozen=True)
class SlotInfo:
    """Whether an image's slot is provisioned, and its public fields."""

    provisioned: bool
    device_id: bytes
    boot_base: int
    flags: int
    host_kid: bytes
    device_public: bytes


def describe_slot(raw: bytes) -> SlotInfo:
    """Public fields of slot bytes (never the seed)."""
    if len(raw) != SLOT_SIZE:
        raise ProvisionError(f"a slot is {SLOT_SIZE} bytes, got {len(raw)}")
    f = struct.unpack(SLOT_FORMAT, raw)
    magic, version, flags, size = f[0], f[1], f[2], f[3]
    if magic != SLOT_MAGIC or version != SLOT_VERSION or size != SLOT_SIZE:
        raise ProvisionError(
            f"not an hm_slot v{SLOT_VERSION}: magic {magic!r}, version {version}, size {size}"
        )
    crc_ok = (binascii.crc32(raw[:-4]) & 0xFFFFFFFF) == f[-1]
    return SlotInfo(bool(flags & FLAG_PROVISIONED) and crc_ok, f[4], f[5], flags, f[14], f[12])


# ---- ELF32 -----------------------------------------------------------------------


@dataclass(frozen=True)
class SlotLocation:
    """Where the slot sits: its address, its offset in the ELF file and in the BIN."""

    address: int
    elf_offset: int
    bin_offset: int


def locate_slot(
    elf: bytes, symbol: str = SLOT_SYMBOL, expected: int = SLOT_SIZE
) -> SlotLocation:
    """Find ``symbol`` (an object of ``expected`` bytes, the key slot by default) in a
    little-endian ELF32 image."""
    if len(elf) < 52 or elf[:4] != b"\x7fELF":
        raise ProvisionError("not an ELF file")
    if elf[4] != 1 or elf[5] != 1:
        raise ProvisionError("only little-endian ELF32 images are supported")
    try:
        (phoff, shoff) = struct.unpack_from("<II", elf, 28)
        phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", elf, 42)
        sections = [
            struct.unpack_from("<IIIIIIIIII", elf, shoff + i * shentsize) for i in range(shnum)
        ]
        segments = [
            struct.unpack_from("<IIIIIIII", elf, phoff + i * phentsize) for i in range(phnum)
        ]
    except struct.error:
        raise ProvisionError("truncated ELF headers") from None
    symtabs = [s for s in sections if s[1] == 2]  # SHT_SYMTAB
    if not symtabs:
        raise ProvisionError("the ELF has no symbol table (stripped?)")
    sym_hdr = symtabs[0]
    strtab = sections[sym_hdr[6]]  # sh_link
    value = size = shndx = None
    for off in range(sym_hdr[4], sym_hdr[4] + sym_hdr[5], 16):
        name_off, st_value, st_size, _info, _other, st_shndx = struct.unpack_from(
            "<IIIBBH", elf, off
        )
        start = strtab[4] + name_off
        name = elf[start : elf.index(b"\x00", start)]
        if name == symbol.encode():
            value, size, shndx = st_value, st_size, st_shndx
            break
    if value is None or size is None or shndx is None:
        raise ProvisionError(f"no symbol {symbol} in the ELF: not a hirmem board image")
    if size != expected:
        raise ProvisionError(f"{symbol} is {size} bytes, expected {expected}: image/tool mismatch")
    sec = sections[shndx]
    sh_type, sh_addr, sh_offset, sh_size = sec[1], sec[3], sec[4], sec[5]
    if sh_type != 1 or not sh_addr <= value < value + size <= sh_addr + sh_size:  # PROGBITS
        raise ProvisionError(f"{symbol} is not inside a loaded section")
    elf_offset = sh_offset + (value - sh_addr)
    # objcopy -O binary: the file starts at the lowest load address of a PT_LOAD
    # segment with file contents; the slot is in flash, so its load address = value.
    loads = [p for p in segments if p[0] == 1 and p[4] > 0]  # PT_LOAD, p_filesz
    if not loads:
        raise ProvisionError("the ELF has no loadable segment")
    base = min(p[3] for p in loads)  # p_paddr
    holder = [p for p in loads if p[1] <= elf_offset < p[1] + p[4]]
    if not holder:
        raise ProvisionError(f"{symbol} is not in a loadable segment")
    paddr = holder[0][3] + (elf_offset - holder[0][1])
    return SlotLocation(value, elf_offset, paddr - base)


def read_slot(elf_path: Path) -> bytes:
    """The slot bytes of a built (or provisioned) ELF image."""
    elf = elf_path.read_bytes()
    loc = locate_slot(elf)
    return elf[loc.elf_offset : loc.elf_offset + SLOT_SIZE]


def _patch(data: bytearray, offset: int, slot: bytes, what: str) -> None:
    current = bytes(data[offset : offset + SLOT_SIZE])
    if len(current) != SLOT_SIZE:
        raise ProvisionError(f"{what}: too short for the slot at offset {offset}")
    if current != template_slot():
        info: SlotInfo | None = None
        with contextlib.suppress(ProvisionError):
            info = describe_slot(current)
        if info is None:
            raise ProvisionError(f"{what}: no hm_slot at offset {offset} (wrong BIN for this ELF?)")
        raise ProvisionError(
            f"{what}: the image is already provisioned (device {info.device_id.hex()}); "
            "provision a freshly built image"
        )
    data[offset : offset + SLOT_SIZE] = slot


def provision_image(
    elf_path: Path,
    settings: SlotSettings,
    out_elf: Path,
    bin_path: Path | None = None,
    out_bin: Path | None = None,
) -> SlotLocation:
    """Write a provisioned copy of ``elf_path`` (and of ``bin_path``, the objcopy BIN
    built beside it) to ``out_elf`` (``out_bin``). The inputs are not changed.
    The outputs hold the device seed: they are written with mode 0600."""
    elf = bytearray(elf_path.read_bytes())
    loc = locate_slot(bytes(elf))
    slot = pack_slot(settings)
    _patch(elf, loc.elf_offset, slot, str(elf_path))
    outputs: list[tuple[Path, bytes]] = [(out_elf, bytes(elf))]
    if bin_path is not None:
        if out_bin is None:
            raise ProvisionError("a BIN to patch needs an output path (out_bin)")
        binary = bytearray(bin_path.read_bytes())
        _patch(binary, loc.bin_offset, slot, str(bin_path))
        outputs.append((out_bin, bytes(binary)))
    for path, data in outputs:
        if path.resolve() in (elf_path.resolve(), (bin_path or elf_path).resolve()):
            raise ProvisionError(f"{path}: the output must not overwrite the input image")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o600)
            f.write(data)
    return loc


# ---- command line (hirmem provision) ------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--key", type=Path, required=True, help="device key file (seed, 0600)")
    parser.add_argument(
        "--new-key", action="store_true", help="create the key file first (fails if it exists)"
    )
    parser.add_argument("--device-id", required=True, help="device id, 8 bytes as 16 hex digits")
    parser.add_argument("--elf", type=Path, help="built image (build/boards/<board>/hirmem.elf)")
    parser.add_argument("--bin", type=Path, help="its BIN (default: beside the ELF, if present)")
    parser.add_argument("--out", type=Path, help="output folder for the provisioned ELF/BIN")
    parser.add_argument("--host-public", help="trusted host (knowledge) public key, 64 hex digits")
    parser.add_argument("--host-key", type=Path, help="or: the host's key file (public half used)")
    parser.add_argument("--host-id", help="host id, 16 hex digits (with a host key)")
    parser.add_argument("--boot", type=int, default=1, help="boot counter base (default 1)")
    parser.add_argument("--sensor-ms", type=int, default=0, help="synthetic sensor period, 0 off")
    parser.add_argument("--offer-threshold", type=int, default=8, help="offload at N records")
    parser.add_argument("--offer-period-ms", type=int, default=10_000, help="or every T ms")
    parser.add_argument("--status-period-ms", type=int, default=0, help="STATUS every T ms")


def _hex_arg(name: str, text: str, size: int) -> bytes:
    try:
        value = bytes.fromhex(text)
    except ValueError:
        raise ProvisionError(f"{name}: not hexadecimal") from None
    _check_len(name, value, size)
    return value


def run_cli(args: argparse.Namespace) -> int:
    """``hirmem provision``: prints paths and public facts only, never a seed."""
    device_id = _hex_arg("--device-id", args.device_id, ID_SIZE)
    if args.new_key:
        ident = create_device_key(args.key, device_id)
        print(f"device key {ident.public.kid.hex()} written to {args.key} (mode 0600)")
        print(f"public half: {args.key}.pub.json")
    key = read_key_file(args.key)
    host: HostTrust | None = None
    if args.host_public or args.host_key:
        if args.host_id is None:
            raise ProvisionError("a host key needs --host-id")
        public = (
            PublicKey(_hex_arg("--host-public", args.host_public, 32))
            if args.host_public
            else read_key_file(args.host_key).public
        )
        host = HostTrust(public, _hex_arg("--host-id", args.host_id, ID_SIZE))
    if args.elf is None:
        return 0
    if args.out is None:
        raise ProvisionError("--elf needs --out (the built image is never changed in place)")
    settings = SlotSettings(
        device_id,
        key,
        host,
        boot_base=args.boot,
        sensor_period_ms=args.sensor_ms,
        offer_threshold=args.offer_threshold,
        offer_period_ms=args.offer_period_ms,
        status_period_ms=args.status_period_ms,
    )
    bin_path = args.bin or args.elf.with_suffix(".bin")
    have_bin = bin_path.is_file()
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"{args.elf.stem}-{device_id.hex()}"
    out_elf, out_bin = args.out / f"{stem}.elf", args.out / f"{stem}.bin"
    provision_image(
        args.elf, settings, out_elf, bin_path if have_bin else None, out_bin if have_bin else None
    )
    print(f"provisioned device {device_id.hex()} (kid {key.kid.hex()}): {out_elf}")
    if have_bin:
        print(f"provisioned BIN: {out_bin}")
    return 0
