"""A small world for the API's tests: an intake store, a memory store, a substrate and
tokens of every scope, with the API served by real uvicorn on a free loopback port.

The intake holds three devices: A (packs across a reboot, active), B (a refused
offer, silent), C (registered, never seen). The memory follows the intake and holds a
quarantined, Trust = 0 memory (an invariant hard fail: reviewable) and admitted facts.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hirmem.api.dashboard import application
from hirmem.api.server import ApiServer
from hirmem.api.sources import LocalSources
from hirmem.api.tokens import TokenStore
from hirmem.daemon.store import Store
from hirmem.memory.engine import MemoryEngine
from hirmem.memory.follow import follow_intake
from hirmem.protocol.keys import derive_test_key
from hirmem.semantic.devices import DeviceFeed
from hirmem.semantic.extract import RuleExtractor
from hirmem.semantic.ingest import MemoryIngester
from hirmem.semantic.split import SentenceSplitter
from hirmem.semantic.stages import Pipeline
from hirmem.semantic.substrate import Substrate
from test_store import DEV_A, DEV_B, KEY_A, KEY_B, Device

DEV_C = bytes.fromhex("0c0c0c0c0c0c0c03")
KEY_C = derive_test_key("api device c")
HOST_KEY = derive_test_key("api host")
STAFF = "Bob works at Plant North. Dora lives in Lyon."
SUSPECT = "valve 7 reads a pressure no pump can make"


@dataclass
class World:
    root: Path
    url: str = ""
    tokens: dict[str, str] = field(default_factory=dict)  # scope → token
    suspect_id: str = ""  # the quarantined, Trust = 0 memory
    sources: LocalSources | None = None

    def call(
        self, method: str, path: str, *, scope: str | None = "read", body: Any = None,
        token: str | None = None,
    ) -> tuple[int, dict[str, str], bytes]:  # fmt: skip
        """(status, headers with lower-case names, body) of one request."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        secret = token or (self.tokens[scope] if scope else None)
        if secret:
            req.add_header("Authorization", f"Bearer {secret}")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
        except urllib.error.HTTPError as err:
            return err.code, {k.lower(): v for k, v in err.headers.items()}, err.read()

    def json(self, method: str, path: str, **kw: Any) -> tuple[int, Any]:
        status, _, raw = self.call(method, path, **kw)
        return status, json.loads(raw)


def build(root: Path) -> World:
    """Fill the stores of a world (no server)."""
    world = World(root)
    with Store(root / "hirmem.db") as store:
        store.register_device(DEV_A, KEY_A.public.raw, "mps2-an385")
        store.register_device(DEV_B, KEY_B.public.raw, "hifive1")
        store.register_device(DEV_C, KEY_C.public.raw, "mps2-an386")
        a = Device(DEV_A, KEY_A)
        for n in (3, 2, 4):
            assert store.take_pack(DEV_A, a.pack(n).encoded).status == "accepted"
        a.boot, a.capture_seq = 2, 0  # a reboot: record ids carry the new boot counter
        assert store.take_pack(DEV_A, a.pack(2).encoded).status == "accepted"
        b = Device(DEV_B, KEY_B)
        assert store.take_pack(DEV_B, b.pack(2).encoded).status == "accepted"
        forged = bytearray(b.pack(2).encoded)
        forged[-5] ^= 0x55  # inside the signature
        assert store.take_pack(DEV_B, bytes(forged)).status == "refused"
        now = int(time.time() * 1000)
        store.save_counters(DEV_A, {"device.ring_used": 6, "device.ring_capacity": 16,
                                    "device.knowledge_seq": 1, "frames_good": 40},
                            seen_at=now)  # fmt: skip
        store.save_counters(DEV_B, {"frames_good": 3}, seen_at=now - 3_600_000)
        store.set_session(DEV_A, "socket://127.0.0.1:5000", "open", "bench-a")
        engine = MemoryEngine(root / "memory.db", signing_key=HOST_KEY)
        try:
            follow_intake(engine, store)
            engine.admit("pump 3 serves zone 3", "api", subject="pump 3",
                         attribute="serves", value="zone 3")  # fmt: skip
            suspect = engine.admit(SUSPECT, "api", flags=0xFBF)  # invariant: Trust 0
            world.suspect_id = suspect.id
            sub = Substrate.open(root / "semantic.db")
            try:
                DeviceFeed(store, sub, verdict=engine.withheld).pull(0)
                sub.ingest(Pipeline(MemoryIngester({"staff": STAFF}),
                                    splitter=SentenceSplitter(512), extractor=RuleExtractor()),
                           "staff")  # fmt: skip
            finally:
                sub.close()
        finally:
            engine.close()
    tokens = TokenStore(root / "hirmem.db")
    try:
        for scope, name in (("read", "viewer"), ("review", "steward-ann"), ("admin", "ops")):
            world.tokens[scope], _ = tokens.create(name, scope)
        world.tokens["other-tenant"], _ = tokens.create("elsewhere", "admin", "acme")
    finally:
        tokens.close()
    return world


@contextmanager
def serve(world: World, **app_options: Any) -> Iterator[World]:
    """The API over the world's stores on a free port while the block runs."""
    with ExitStack() as stack:
        sources = LocalSources(world.root / "hirmem.db", world.root / "memory.db",
                               world.root / "semantic.db", signing_key=HOST_KEY)  # fmt: skip
        stack.callback(sources.close)
        tokens = TokenStore(world.root / "hirmem.db")
        stack.callback(tokens.close)
        app = application(sources, tokens, **app_options)
        server = stack.enter_context(ApiServer(app))
        world.url, world.sources = server.url, sources
        yield world
