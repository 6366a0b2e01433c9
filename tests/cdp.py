"""Headless Chromium driven over the DevTools protocol (CDP), for the dashboard's tests.

Debian's ``chromium`` is started with ``--remote-debugging-port=0``; the port it chose
is read from the ``DevToolsActivePort`` file of its profile folder, and one page is
driven over a websocket: navigate, evaluate JavaScript, type and press keys the way a
keyboard does (``Input.*``), take screenshots. Events are read and dropped; each call
waits for the answer with its id.
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


class CdpError(RuntimeError):
    pass


class Browser:
    def __init__(self, width: int = 1280, height: int = 1000) -> None:
        self.profile = Path(tempfile.mkdtemp(prefix="hirmem-chromium-"))
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
             "--remote-debugging-port=0", "--remote-allow-origins=*",
             f"--user-data-dir={self.profile}", f"--window-size={width},{height}",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self._ids = itertools.count(1)
        try:
            port = self._port()
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
                pages = [t for t in json.load(r) if t["type"] == "page"]
            self.ws: ClientConnection = connect(pages[0]["webSocketDebuggerUrl"],
                                                max_size=64 * 1024 * 1024)  # fmt: skip
            self.call("Page.enable")
            self.call("Runtime.enable")
        except BaseException:
            self.close()
            raise

    def _port(self, timeout: float = 30.0) -> int:
        marker = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise CdpError(f"chromium exited with {self.proc.returncode}")
            if marker.exists():
                text = marker.read_text().split()
                if text:
                    return int(text[0])
            time.sleep(0.05)
        raise CdpError("chromium did not open its DevTools port")

    def call(self, method: str, params: dict[str, Any] | None = None,
             timeout: float = 30.0) -> dict[str, Any]:  # fmt: skip
        ident = next(self._ids)
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params or {}}))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CdpError(f"{method}: no answer in {timeout} s")
            msg = json.loads(self.ws.recv(timeout=left))
            if msg.get("id") != ident:
                continue  # an event
            if "error" in msg:
                raise CdpError(f"{method}: {msg['error']}")
            result: dict[str, Any] = msg.get("result", {})
            return result

    def eval(self, expression: str) -> Any:
        """The value of a JavaScript expression (awaited when it is a promise)."""
        out = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                             "awaitPromise": True})  # fmt: skip
        if "exceptionDetails" in out:
            raise CdpError(f"{expression!r}: {out['exceptionDetails']}")
        return out["result"].get("value")

    def wait(self, expression: str, timeout: float = 10.0, what: str = "") -> Any:
        """Poll until the expression is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.eval(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise CdpError(f"timed out after {timeout} s waiting for {what or expression}")
            time.sleep(0.1)

    def goto(self, url: str) -> None:
        """Navigate and wait for the new document (redirects followed) to load."""
        self.eval("window.__hm_before = true")
        self.call("Page.navigate", {"url": url})
        self.wait_loaded(f"{url} to load")

    def wait_loaded(self, what: str = "the next page") -> None:
        """Wait for a document other than the one marked by :meth:`mark` to load."""
        self.wait("!window.__hm_before && document.readyState === 'complete'", 20, what)

    def mark(self) -> None:
        """Mark the current document, so :meth:`wait_loaded` waits for the next one."""
        self.eval("window.__hm_before = true")

    def type_text(self, text: str) -> None:
        self.call("Input.insertText", {"text": text})

    def press(self, key: str) -> None:
        """A key down and up, as a keyboard sends it (Tab, Enter, ...)."""
        codes = {"Tab": 9, "Enter": 13, " ": 32}
        base = {"key": key, "code": key if key != " " else "Space",
                "windowsVirtualKeyCode": codes[key]}  # fmt: skip
        if key == "Enter":
            base["text"] = "\r"
        self.call("Input.dispatchKeyEvent", {"type": "keyDown", **base})
        self.call("Input.dispatchKeyEvent", {"type": "keyUp", **base})

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport":
                                                    True})["data"]  # fmt: skip
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        ws = getattr(self, "ws", None)
        if ws is not None:
            ws.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
