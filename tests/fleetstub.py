"""A small real HTTP fleet node for the outbox tests: the upload contract of issue 17.

``PUT /v1/packs/{pack_id hex}``: the request's RFC 9421 signature is verified with
:mod:`hirmem.protocol.httpsig` against the registered gateway keys, the body against the
registered device keys and each device's chain (as the daemon's store does), then the
pack is stored: 201 with ``{"pack_id", "device", "seq", "records", "stored_at"}`` the
first time, 200 with that same answer on a repeat, RFC 9457 problems otherwise (400,
401, 403, 409, 413, 415). A script of upcoming behaviours drives the failure cases:
``"ok"`` handles the upload as usual; ``"503:7"`` answers 503 with ``Retry-After: 7``;
``"500"`` answers 500; ``"drop"``
stores the pack and closes the connection without an answer (the answer lost after the
commit). ``stored`` counts how many times each pack was stored: the tests want 1.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections import Counter, deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from hirmem.protocol import httpsig
from hirmem.protocol.errors import PackError
from hirmem.protocol.keys import SigningKey
from hirmem.protocol.packs import ChainHead, PackKind, Reason, TrustedKey, verify_pack

CONTENT_TYPE = 'application/cose; cose-type="cose-sign1"'
MAX_BODY = 64 << 10
CHAIN_STATUS = {Reason.ROLLBACK: 409, Reason.REPLAY: 409, Reason.BROKEN_CHAIN: 409,
                Reason.UNKNOWN_KEY: 403, Reason.WRONG_SIGNER: 403}  # fmt: skip


class FleetStub:
    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.gateways: dict[str, Ed25519PublicKey] = {}
        self.devices: dict[bytes, TrustedKey] = {}  # by kid
        self.answers: dict[str, dict[str, Any]] = {}
        self.bodies: dict[str, bytes] = {}
        self.stored: Counter[str] = Counter()
        self.order: list[str] = []  # pack ids in the order first stored
        self.heads: dict[bytes, ChainHead] = {}
        self.log: list[tuple[str, int, str]] = []  # (pack id, status, reason) per request
        self.script: deque[str] = deque()
        self.delay = 0.0  # seconds each request waits before it is handled
        self.hang_up = False  # close each connection after its answer, unannounced
        self.nonces = httpsig.NonceCache()
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.scheme = "http"
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
            self.scheme = "https"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def register_gateway(self, keyid: str, key: SigningKey) -> None:
        self.gateways[keyid] = Ed25519PublicKey.from_public_bytes(key.public.raw)

    def register_device(self, device_id: bytes, key: SigningKey) -> None:
        self.devices[key.kid] = TrustedKey(key.public, device_id, PackKind.MEMORY)

    def __enter__(self) -> FleetStub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    def statuses(self) -> Counter[int]:
        with self.lock:
            return Counter(status for _, status, _ in self.log)

    # ---- one upload (under the lock: one transaction at a time) --------------------------

    def handle(self, handler: BaseHTTPRequestHandler, body: bytes) -> tuple[int, dict[str, Any],
                                                                            dict[str, str]]:
        path = handler.path
        if not path.startswith("/v1/packs/"):
            return 404, problem("not-found", path), {}
        pack_hex = path.removeprefix("/v1/packs/")
        headers = {k: v for k, v in handler.headers.items()}
        if headers.get("Content-Type") != CONTENT_TYPE:
            return 415, problem("wrong-content-type", str(headers.get("Content-Type"))), {}
        try:
            httpsig.verify_request("PUT", headers.get("Host", ""), path, headers, body,
                                   self.gateways.get, int(time.time()), self.nonces)  # fmt: skip
        except httpsig.HttpSignatureError as exc:
            return 401, problem(exc.reason, exc.detail), {}
        if self.script:
            step = self.script.popleft()
            if step == "ok":
                return self._store(pack_hex, body)
            if step.startswith("503:"):
                return 503, problem("overloaded", "busy"), {"Retry-After": step[4:]}
            if step == "500":
                return 500, problem("internal", "boom"), {}
            assert step == "drop", step
            handler.close_connection = True
            self._store(pack_hex, body)  # stored, and the answer never leaves
            return 0, {}, {}
        return self._store(pack_hex, body)

    def _store(self, pack_hex: str, body: bytes) -> tuple[int, dict[str, Any], dict[str, str]]:
        if pack_hex in self.answers:
            if self.bodies[pack_hex] != body:
                return 409, problem("duplicate-seq-different-pack", pack_hex), {}
            return 200, self.answers[pack_hex], {}
        try:
            first = verify_pack(body, self.devices, None, PackKind.MEMORY, require_chain=False)
            pack = first.pack
            verify_pack(body, self.devices, self.heads.get(pack.signer), PackKind.MEMORY,
                        require_chain=True)  # fmt: skip
        except PackError as exc:
            reason = Reason(exc.reason)
            name = "unknown-device" if reason == Reason.UNKNOWN_KEY else (
                reason.name.lower().replace("_", "-"))  # fmt: skip
            return CHAIN_STATUS.get(reason, 400), problem(name, exc.detail), {}
        if pack.pack_id.hex() != pack_hex:
            return 400, problem("pack-id-mismatch", pack.pack_id.hex()), {}
        answer = {"pack_id": pack_hex, "device": pack.signer.hex(), "seq": pack.seq,
                  "records": len(pack.items), "stored_at": time.time()}  # fmt: skip
        self.answers[pack_hex] = answer
        self.bodies[pack_hex] = body
        self.stored[pack_hex] += 1
        self.order.append(pack_hex)
        self.heads[pack.signer] = ChainHead(pack.seq, pack.hash)
        return 201, answer, {}


def problem(reason: str, detail: str) -> dict[str, Any]:
    return {"type": "about:blank", "title": reason, "reason": reason, "detail": detail}


def _handler(stub: FleetStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a real fleet node

        def do_PUT(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            if length > MAX_BODY:
                self._answer(413, problem("too-large", str(length)), {})
                self.close_connection = True
                return
            body = self.rfile.read(length)
            if stub.delay:
                time.sleep(stub.delay)
            with stub.lock:
                status, answer, extra = stub.handle(self, body)
                pack_hex = self.path.rsplit("/", 1)[-1]
                stub.log.append((pack_hex, status, str(answer.get("reason", ""))))
            if status:
                self._answer(status, answer, extra)
            if stub.hang_up:  # as a server does with a keep-alive connection left idle
                self.close_connection = True

        def _answer(self, status: int, answer: dict[str, Any], extra: dict[str, str]) -> None:
            data = json.dumps(answer).encode()
            self.send_response(status)
            kind = "application/json" if status < 300 else "application/problem+json"
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            for key, value in extra.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
