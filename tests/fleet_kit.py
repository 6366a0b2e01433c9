"""What the fleet tests share: gateways that sign uploads, a fleet node served by uvicorn
(in a thread, or as a real process that can be killed), PostgreSQL under a temp dir."""

from __future__ import annotations

import http.client
import json
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import uvicorn
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from hirmem.emulation import postgres
from hirmem.fleet.app import MEDIA_TYPE, FleetConfig, create_app
from hirmem.protocol.httpsig import sign_request
from hirmem.protocol.keys import SigningKey
from hirmem.protocol.packs import Pack


@dataclass
class Reply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str]


class Gateway:
    """A gateway: its Ed25519 key signs every upload (RFC 9421, label hm)."""

    def __init__(self, key: SigningKey) -> None:
        self.key = key
        self.keyid = key.kid.hex()
        self._private = Ed25519PrivateKey.from_private_bytes(key.seed())

    def put(
        self,
        port: int,
        pack: Pack | bytes,
        pack_id: str | None = None,
        *,
        query: str = "",
        headers: dict[str, str] | None = None,
        content_type: str = MEDIA_TYPE,
        sign_path: str | None = None,
        created: int | None = None,
    ) -> Reply:
        body = pack.encoded if isinstance(pack, Pack) else pack
        pid = (
            pack_id
            if pack_id is not None
            else (pack.pack_id.hex() if isinstance(pack, Pack) else "00")
        )
        path = f"/v1/packs/{pid}"
        authority = f"127.0.0.1:{port}"
        base = {"Content-Type": content_type, **(headers or {})}
        signed = sign_request(
            "PUT",
            authority,
            sign_path or path,
            base,
            body,
            self._private,
            self.keyid,
            created or int(time.time()),
            secrets.token_hex(12),
        )
        return request(
            port,
            "PUT",
            path + (f"?{query}" if query else ""),
            body,
            {**base, **signed, "Host": authority},
        )


def request(
    port: int,
    method: str,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    timeout: float = 30,
) -> Reply:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        kind = resp.getheader("content-type") or ""
        parsed = json.loads(data) if data and "json" in kind else {"text": data.decode()}
        return Reply(resp.status, parsed, {k.lower(): v for k, v in resp.getheaders()})
    finally:
        conn.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServedFleet:
    """A fleet node's app on uvicorn in a thread of this process (stopped by ``stop``)."""

    def __init__(self, config: FleetConfig) -> None:
        self.port = free_port()
        self.app = create_app(config)
        cfg = uvicorn.Config(
            self.app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on"
        )
        self.server = uvicorn.Server(cfg)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        wait_healthy(self.port)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def wait_healthy(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if request(port, "GET", "/v1/healthz", timeout=2).status == 200:
                return
        except (OSError, http.client.HTTPException):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"the fleet node on port {port} did not become healthy")
        time.sleep(0.05)


def pg_skip() -> pytest.MarkDecorator:
    """Skip a test where no PostgreSQL server can be started."""
    reason = postgres.available()
    return pytest.mark.skipif(reason is not None, reason=reason or "")


BACKENDS = ["sqlite", pytest.param("postgres", marks=pg_skip())]


@pytest.fixture(scope="module")
def pg() -> Iterator[postgres.Primary]:
    """One PostgreSQL primary per test module (each tenant gets a database of its own)."""
    with postgres.Primary("fleet") as primary:
        yield primary
