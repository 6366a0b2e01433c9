"""The daemon's configuration: a TOML file, command-line devices, checked before anything starts.

Example (every key but ``host.id`` and one device is optional)::

    [host]
    id = "a1a2a3a4a5a6a7a8"        # this host's 8-byte id, 16 hex digits
    database = "hirmem.db"          # the durable store (SQLite, WAL)
    key = "keys/host.key"           # knowledge-pack signing key (hirmem keys host)
    max_frame = 512                 # largest frame offered to devices
    window = 4
    metrics = "127.0.0.1:9464"      # /metrics (Prometheus) and /healthz, off when absent
    metrics_public = false          # true: metrics may listen beyond loopback (0.0.0.0, …)
    status_every = 5.0              # seconds between STATUS_REQUESTs to each device
    save_every = 1.0                # seconds between counter saves to the store
    reconnect_min = 0.25            # backoff after a line drops, doubling …
    reconnect_max = 8.0             # … up to this
    memory = "hirmem-memory.sqlite" # the memory engine's store, beside the database
    memory_every = 2.0              # seconds between memory ticks; 0 keeps no memory
    memory_config = "memory.json"   # MemoryConfig overrides (JSON), defaults when absent
    write_timeout = 5.0             # a device line that takes no byte this long is dropped

    [fleet]                         # optional: forward every accepted pack to a fleet node
    url = "https://fleet.example:8443"
    key = "keys/gateway.key"        # this gateway's Ed25519 key (hirmem keys)
    keyid = "gw-0042"               # the name the fleet registered the key under
                                    # (default: the key's kid, 16 hex digits)
    max_packs = 100000              # the outbox bound: at this many unsent packs …
    max_bytes = 268435456           # … or bytes, intake defers new packs (devices keep them)
    timeout = 10.0                  # seconds for one upload
    backoff_min = 0.5               # retry delays: full jitter over min·2^n, capped …
    backoff_max = 300.0             # … at this; a 429/503 Retry-After is honoured
    ca = "fleet-ca.pem"             # https: trust this CA instead of the system's
    [api]                           # the HTTP API and dashboard (hirmem.api), off when absent
    listen = "127.0.0.1:8080"       # loopback unless public = true
    public = false
    semantic = "semantic.db"        # a semantic substrate to serve (optional)
    rate = 50.0                     # requests a second per token …
    burst = 100                     # … in bursts of this many

    [[device]]
    url = "socket://127.0.0.1:5000" # any pyserial URL, a /dev path or a pty
    name = "bench-m3"               # for logs and `hirmem status`
    baudrate = 115200

The metrics address: an IP address (``127.0.0.1``, ``[::1]``) or ``localhost``, and a
port (0: any free one). Only loopback addresses are accepted unless ``metrics_public =
true``: the endpoint has no authentication, so exposing it is a decision, not a default.
The address is bound once while the configuration is checked, so a busy port or an
address this host does not have is a configuration error, not a traceback at start.

The memory keys: on by default, the daemon follows its own intake into a memory store
beside the intake database (``hirmem-memory.sqlite`` in the database's folder, the file
``hirmem memory`` opens by default) and every ``memory_every`` seconds admits the packs
stored since the last tick; the decay sweep runs from the same tick whenever the memory
config's ``sweep_interval_s`` (one hour by default) has passed. On by default because a
daemon that stores packs nobody consolidates leaves the memory stale and undecayed
until someone remembers to run ``hirmem memory follow`` and ``sweep`` (issue 13).
``memory_every = 0`` turns it off, for hosts that run the memory elsewhere.

Every problem found is reported at once, each with what to change, and nothing is
started until the whole configuration is sound (:class:`ConfigError`).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from hirmem.protocol.errors import HirmemError
from hirmem.protocol.keys import ID_SIZE

# URL schemes pyserial's serial_for_url understands.
SERIAL_SCHEMES = frozenset({"socket", "rfc2217", "loop", "spy", "alt", "hwgrep", "cp2110"})


class ConfigError(HirmemError):
    """The configuration cannot be used; the message lists every problem."""


@dataclass(frozen=True, slots=True)
class DeviceConfig:
    url: str
    name: str = ""
    baudrate: int = 115200

    @property
    def label(self) -> str:
        return self.name or self.url


@dataclass(frozen=True, slots=True)
class MetricsAddress:
    """Where ``/metrics`` and ``/healthz`` listen."""

    host: str  # an IP address literal
    port: int  # 0: any free port
    public: bool = False  # the operator allowed an address beyond loopback

    @property
    def loopback(self) -> bool:
        return ipaddress.ip_address(self.host).is_loopback

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def open_listener(address: MetricsAddress) -> socket.socket:
    """A listening TCP socket on ``address`` (raises OSError as ``bind`` does)."""
    family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart in TIME_WAIT
        sock.bind((address.host, address.port))
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    return sock


def bind_problem(address: MetricsAddress, exc: OSError, key: str = "host.metrics") -> str:
    """What to change when ``address`` cannot be listened on."""
    where = f'{key} = "{address}"'
    if exc.errno == errno.EADDRINUSE:
        return (
            f"{where}: port {address.port} is already in use by another program; choose "
            f"another port, or find the program with `ss -ltnp 'sport = :{address.port}'`"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return (
            f"{where}: {address.host} is not an address of this host; use 127.0.0.1, or "
            "one of the addresses `ip -brief address` lists"
        )
    if exc.errno == errno.EACCES:
        return f"{where}: port {address.port} needs privileges; use a port above 1023"
    return f"{where}: cannot listen there ({exc.strerror or exc})"


def parse_metrics_address(
    text: str, public: bool, problems: list[str], key: str = "host.metrics",
    public_key: str = "host.metrics_public",
    what: str = "/metrics and /healthz (no authentication)",
) -> MetricsAddress | None:  # fmt: skip
    """``"address:port"`` checked: an IP address or localhost, a port, loopback unless
    ``public``, and bindable now."""
    example = 'like "127.0.0.1:9464" or "[::1]:9464"'
    if text.startswith("["):
        host, sep, port_text = text[1:].partition("]:")
    else:
        host, sep, port_text = text.rpartition(":")
        if ":" in host:
            problems.append(
                f"{key} = {text!r}: write an IPv6 address in brackets, {example}"
            )
            return None
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        problems.append(f'{key} = {text!r}: give "address:port", {example}')
        return None
    if host == "localhost":
        host = "127.0.0.1"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        problems.append(
            f"{key} = {text!r}: {host!r} is not an IP address; give one, {example} "
            "(or localhost)"
        )
        return None
    address = MetricsAddress(str(ip), int(port_text), public)
    if not ip.is_loopback and not public:
        problems.append(
            f"{key} = {text!r} is not a loopback address: {what} would be reachable from "
            f'other hosts. Listen on 127.0.0.1 ({key} = "127.0.0.1:9464"), or set '
            f"{public_key} = true to expose them"
        )
        return None
    try:
        open_listener(address).close()
    except OSError as exc:
        problems.append(bind_problem(address, exc, key))
        return None
    return address


@dataclass(frozen=True, slots=True)
class FleetConfig:
    """Where the outbox sends accepted packs (hirmem.daemon.outbox)."""

    url: str  # http:// or https://, host and port, optionally a path prefix
    key: Path
    keyid: str | None = None
    max_packs: int = 100_000
    max_bytes: int = 256 << 20
    timeout: float = 10.0
    backoff_min: float = 0.5
    backoff_max: float = 300.0
    ca: Path | None = None


@dataclass(frozen=True, slots=True)
class ApiConfig:
    """Where the HTTP API and dashboard listen, and what they serve besides the stores."""

    listen: MetricsAddress
    semantic: Path | None = None
    rate: float = 50.0
    burst: int = 100


@dataclass(frozen=True, slots=True)
class DaemonConfig:
    host_id: bytes
    database: Path
    devices: tuple[DeviceConfig, ...]
    host_key: Path | None = None
    max_frame: int = 512
    window: int = 4
    metrics: MetricsAddress | None = None
    status_every: float = 5.0
    save_every: float = 1.0
    reconnect_min: float = 0.25
    reconnect_max: float = 8.0
    memory: Path | None = None  # the memory store; None: the daemon keeps no memory
    memory_every: float = 2.0
    memory_config: Path | None = None
    write_timeout: float = 5.0
    extra: dict[str, Any] = field(default_factory=dict)
    fleet: FleetConfig | None = None
    api: ApiConfig | None = None


def port_problem(url: str) -> str | None:
    """Why ``url`` cannot name a serial line, or None.

    A device path (``/dev/ttyACM0``, a pty) must exist now; a URL must have a scheme
    pyserial knows, and ``socket://`` / ``rfc2217://`` a host and a port. Whether the
    other end answers is not checked: a device may be unplugged, and the daemon
    reconnects.
    """
    if "://" not in url:
        if not url:
            return "the device url is empty"
        if not os.path.exists(url):
            return (
                f"{url}: no such port; check the cable, or list the ports with "
                "`python -m serial.tools.list_ports`"
            )
        return None
    parts = urlsplit(url)
    if parts.scheme not in SERIAL_SCHEMES:
        known = ", ".join(sorted(SERIAL_SCHEMES))
        return f"{url}: unknown scheme {parts.scheme!r} (known: {known})"
    if parts.scheme in ("socket", "rfc2217"):
        try:
            port = parts.port
        except ValueError:
            port = None
        if not parts.hostname or port is None:
            return (
                f"{url}: a {parts.scheme} URL needs a host and a port, "
                f"like {parts.scheme}://127.0.0.1:5000"
            )
    return None


def _hex_id(value: object, where: str, problems: list[str]) -> bytes:
    if not isinstance(value, str):
        problems.append(f"{where} must be {ID_SIZE * 2} hex digits in quotes")
        return bytes(ID_SIZE)
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        raw = b""
    if len(raw) != ID_SIZE:
        problems.append(f"{where} = {value!r}: must be {ID_SIZE * 2} hex digits")
        return bytes(ID_SIZE)
    return raw


def _number(
    table: dict[str, Any], key: str, default: float, low: float, high: float, problems: list[str]
) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        problems.append(f"host.{key} = {value!r}: must be a number in {low}..{high}")
        return default
    return float(value)


def _integer(
    table: dict[str, Any], key: str, default: int, low: int, high: int, problems: list[str]
) -> int:
    """An integer setting: 512.7 or "512" is an error, not silently made 512."""
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        problems.append(f"host.{key} = {value!r}: must be a whole number in {low}..{high}")
        return default
    return value


def _text(table: dict[str, Any], key: str, default: str, where: str, problems: list[str]) -> str:
    """A text setting: a number or a table where text belongs is an error."""
    value = table.get(key, default)
    if not isinstance(value, str):
        problems.append(f'{where}.{key} = {value!r}: must be text in quotes, like "{default}"')
        return default
    return value


def build_config(data: dict[str, Any], base: Path, cli_devices: list[str]) -> DaemonConfig:
    """A checked :class:`DaemonConfig` from parsed TOML (``base``: where relative paths start)."""
    problems: list[str] = []
    host = data.get("host", {})
    if not isinstance(host, dict):
        raise ConfigError("[host] must be a table")
    unknown = set(data) - {"host", "device", "fleet", "api"}
    if unknown:
        problems.append(
            f"unknown top-level keys {sorted(unknown)}: only [host], [fleet], [api] and [[device]]"
        )
    known_host = {
        "id", "database", "key", "max_frame", "window", "metrics", "metrics_public",
        "status_every",
        "save_every", "reconnect_min", "reconnect_max", "memory", "memory_every",
        "memory_config", "write_timeout",
    }  # fmt: skip
    for key in sorted(set(host) - known_host):
        problems.append(f"host.{key}: unknown key (known: {', '.join(sorted(known_host))})")
    if "id" not in host:
        problems.append('host.id is missing: add id = "<16 hex digits>" under [host]')
    host_id = _hex_id(host.get("id", "00" * ID_SIZE), "host.id", problems)

    database = base / _text(host, "database", "hirmem.db", "host", problems)
    if not database.parent.is_dir():
        problems.append(
            f"host.database = {str(database)!r}: the folder {database.parent} does not exist"
        )
    host_key: Path | None = None
    if "key" in host and isinstance(host["key"], str):
        host_key = base / host["key"]
        from hirmem.protocol.keys import KeyFileError, read_key_file

        try:
            read_key_file(host_key)
        except KeyFileError as exc:
            problems.append(f"host.key: {exc}")

    if "key" in host and not isinstance(host["key"], str):
        problems.append(f"host.key = {host['key']!r}: must be a path in quotes")
    max_frame = _integer(host, "max_frame", 512, 128, 4096, problems)
    window = _integer(host, "window", 4, 1, 8, problems)
    metrics: MetricsAddress | None = None
    public = host.get("metrics_public", False)
    if not isinstance(public, bool):
        problems.append(f"host.metrics_public = {public!r}: must be true or false")
        public = False
    if "metrics" in host and isinstance(host["metrics"], str):
        metrics = parse_metrics_address(host["metrics"], public, problems)
    elif "metrics" in host:
        _text(host, "metrics", "127.0.0.1:9464", "host", problems)  # says what is wrong
    status_every = _number(host, "status_every", 5.0, 0.0, 3600.0, problems)
    save_every = _number(host, "save_every", 1.0, 0.05, 3600.0, problems)
    reconnect_min = _number(host, "reconnect_min", 0.25, 0.01, 60.0, problems)
    reconnect_max = _number(host, "reconnect_max", 8.0, 0.01, 3600.0, problems)
    memory_every = _number(host, "memory_every", 2.0, 0.0, 86400.0, problems)
    memory: Path | None = None
    memory_config: Path | None = None
    if memory_every > 0:
        memory = base / str(host.get("memory", database.parent / "hirmem-memory.sqlite"))
        if memory.resolve() == database.resolve():
            problems.append(
                f"host.memory = {str(memory)!r} is the intake database itself: "
                "give the memory its own file"
            )
        elif not memory.parent.is_dir():
            problems.append(
                f"host.memory = {str(memory)!r}: the folder {memory.parent} does not exist"
            )
        if "memory_config" in host:
            memory_config = base / str(host["memory_config"])
            if not memory_config.is_file():
                problems.append(f"host.memory_config = {str(memory_config)!r}: no such file")
    write_timeout = _number(host, "write_timeout", 5.0, 0.05, 600.0, problems)

    devices: list[DeviceConfig] = []
    raw_devices = data.get("device", [])
    if not isinstance(raw_devices, list):
        problems.append("device must be an array of tables: write [[device]] for each one")
        raw_devices = []
    for n, entry in enumerate(raw_devices, 1):
        where = f"device #{n}"
        if not isinstance(entry, dict) or not isinstance(entry.get("url"), str):
            problems.append(f'{where}: needs url = "<port or URL>"')
            continue
        for key in sorted(set(entry) - {"url", "name", "baudrate"}):
            problems.append(f"{where}.{key}: unknown key (known: baudrate, name, url)")
        baud = entry.get("baudrate", 115200)
        if isinstance(baud, bool) or not isinstance(baud, int) or baud <= 0:
            problems.append(f"{where}.baudrate = {baud!r}: must be a positive integer")
            baud = 115200
        name = _text(entry, "name", "", where, problems)
        devices.append(DeviceConfig(entry["url"], name, baud))
    devices.extend(DeviceConfig(url) for url in cli_devices)
    if not devices:
        problems.append("no devices: add a [[device]] with a url, or give --device URL")
    seen: set[str] = set()
    for dev in devices:
        problem = port_problem(dev.url)
        if problem:
            problems.append(f"device {dev.label}: {problem}")
        if dev.url in seen:
            problems.append(f"device {dev.url} is listed twice")
        seen.add(dev.url)
    fleet = _fleet_config(data.get("fleet"), base, problems)
    api = _api_config(data.get("api"), base, problems)
    if problems:
        raise ConfigError("the configuration cannot be used:\n  - " + "\n  - ".join(problems))
    return DaemonConfig(
        host_id, database, tuple(devices), host_key, max_frame, window, metrics,
        status_every, save_every, reconnect_min, reconnect_max, memory, memory_every,
        memory_config, write_timeout, fleet=fleet, api=api,
    )  # fmt: skip


FLEET_KEYS = frozenset({"url", "key", "keyid", "max_packs", "max_bytes", "timeout",
                        "backoff_min", "backoff_max", "ca"})  # fmt: skip


def _fleet_config(table: object, base: Path, problems: list[str]) -> FleetConfig | None:
    """The [fleet] table, checked (None when there is none: the daemon keeps no outbox)."""
    if table is None:
        return None
    if not isinstance(table, dict):
        problems.append("fleet must be a table: write [fleet] with url and key under it")
        return None
    before = len(problems)
    for key in sorted(set(table) - FLEET_KEYS):
        problems.append(f"fleet.{key}: unknown key (known: {', '.join(sorted(FLEET_KEYS))})")
    url = _text(table, "url", "", "fleet", problems)
    parts = urlsplit(url)
    try:
        port_ok = parts.port is not None or parts.scheme in ("http", "https")
    except ValueError:
        port_ok = False
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        problems.append(
            f"fleet.url = {url!r}: must be an http:// or https:// URL with a host, "
            'like "https://fleet.example:8443"'
        )
    if parts.query or parts.fragment:
        problems.append(f"fleet.url = {url!r}: no query or fragment (a path prefix is fine)")
    key_text = _text(table, "key", "", "fleet", problems)
    key = base / key_text
    if not key_text:
        problems.append('fleet.key is missing: the gateway key file, like "keys/gateway.key"')
    else:
        from hirmem.protocol.keys import KeyFileError, read_key_file

        try:
            read_key_file(key)
        except KeyFileError as exc:
            problems.append(f"fleet.key: {exc}")
    keyid = table.get("keyid")
    if keyid is not None and (not isinstance(keyid, str) or not keyid
                              or not keyid.isascii() or not keyid.isprintable()):  # fmt: skip
        problems.append(f"fleet.keyid = {keyid!r}: must be printable ASCII text in quotes")
        keyid = None

    def integer(name: str, default: int, low: int, high: int) -> int:
        value = table.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            problems.append(f"fleet.{name} = {value!r}: must be a whole number in {low}..{high}")
            return default
        return value

    def number(name: str, default: float, low: float, high: float) -> float:
        value = table.get(name, default)
        if (isinstance(value, bool) or not isinstance(value, int | float)
                or not low <= value <= high):  # fmt: skip
            problems.append(f"fleet.{name} = {value!r}: must be a number in {low}..{high}")
            return default
        return float(value)

    max_packs = integer("max_packs", 100_000, 1, 100_000_000)
    max_bytes = integer("max_bytes", 256 << 20, 4096, 1 << 40)
    timeout = number("timeout", 10.0, 0.1, 300.0)
    backoff_min = number("backoff_min", 0.5, 0.001, 3600.0)
    backoff_max = number("backoff_max", 300.0, 0.001, 86400.0)
    if backoff_max < backoff_min:
        problems.append(f"fleet.backoff_max = {backoff_max} is below backoff_min = {backoff_min}")
    ca: Path | None = None
    if "ca" in table:
        ca = base / _text(table, "ca", "", "fleet", problems)
        if not ca.is_file():
            problems.append(f"fleet.ca = {str(ca)!r}: no such file")
    if len(problems) > before:
        return None
    return FleetConfig(url.rstrip("/"), key, keyid if isinstance(keyid, str) else None,
                       max_packs, max_bytes, timeout, backoff_min, backoff_max, ca)  # fmt: skip


def _api_config(table: object, base: Path, problems: list[str]) -> ApiConfig | None:
    """``[api]``: absent, no API; present, ``listen`` is required."""
    if table is None:
        return None
    if not isinstance(table, dict):
        problems.append("[api] must be a table")
        return None
    known = {"listen", "public", "semantic", "rate", "burst"}
    for key in sorted(set(table) - known):
        problems.append(f"api.{key}: unknown key (known: {', '.join(sorted(known))})")
    public = table.get("public", False)
    if not isinstance(public, bool):
        problems.append(f"api.public = {public!r}: must be true or false")
        public = False
    listen = table.get("listen")
    if not isinstance(listen, str):
        problems.append('api.listen is missing or not text: add listen = "127.0.0.1:8080"')
        return None
    address = parse_metrics_address(listen, public, problems, "api.listen", "api.public",
                                    "the API and dashboard")  # fmt: skip
    semantic: Path | None = None
    if "semantic" in table:
        semantic = base / _text(table, "semantic", "semantic.db", "api", problems)
        if not semantic.is_file():
            problems.append(f"api.semantic = {str(semantic)!r}: no such file (fill one with "
                            "`hirmem semantic devices`)")  # fmt: skip
    rate = table.get("rate", 50.0)
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate <= 1e6:
        problems.append(f"api.rate = {rate!r}: must be a number of requests a second, > 0")
        rate = 50.0
    burst = table.get("burst", 100)
    if isinstance(burst, bool) or not isinstance(burst, int) or not 1 <= burst <= 1_000_000:
        problems.append(f"api.burst = {burst!r}: must be a whole number >= 1")
        burst = 100
    if address is None:
        return None
    return ApiConfig(address, semantic, float(rate), burst)


def load_config(
    path: Path | None, cli_devices: list[str], overrides: dict[str, Any]
) -> DaemonConfig:
    """Read ``path`` (optional) and apply command-line devices and [host] overrides."""
    data: dict[str, Any] = {}
    base = Path.cwd()
    if path is not None:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read the configuration ({exc.strerror})") from None
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        base = path.resolve().parent
    host = dict(data.get("host", {})) if isinstance(data.get("host", {}), dict) else {}
    host.update({k: v for k, v in overrides.items() if v is not None})
    if host:
        data["host"] = host
    return build_config(data, base, cli_devices)
