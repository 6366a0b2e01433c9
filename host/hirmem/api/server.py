"""uvicorn on a thread of its own: :class:`ApiServer` starts, tells its port, and stops.

The socket is bound before the thread starts, so a busy port is an error at start (and
port 0 picks a free one that :attr:`ApiServer.port` tells)."""

from __future__ import annotations

import logging
import socket
import threading
import time

import uvicorn
from fastapi import FastAPI

from hirmem.protocol.errors import HirmemError

log = logging.getLogger("hirmem.api")


class ApiServer:
    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0) -> None:
        self.app, self.host = app, host
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._sock.bind((host, port))
        except OSError as exc:
            self._sock.close()
            raise HirmemError(f"the API cannot listen on {host}:{port}: {exc.strerror}"
                              ) from None  # fmt: skip
        config = uvicorn.Config(app, log_level="warning", lifespan="off",
                                access_log=False, timeout_keep_alive=30)  # fmt: skip
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, name="api", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 15.0
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise HirmemError(f"the API on {self.url} did not start")
            time.sleep(0.02)
        log.info("API and dashboard listening", extra={"ctx": {"url": self.url + "/ui/"}})

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10.0)
        self._sock.close()

    def __enter__(self) -> ApiServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
