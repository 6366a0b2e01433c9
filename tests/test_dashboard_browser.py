"""The dashboard in a real browser: Debian's headless Chromium, over the DevTools
protocol (tests/cdp.py), against a daemon serving a QEMU board (mps2-an385) and a
simulated device, with its memory keeper and the API started from ``[api]``.

Every page is loaded and its DOM checked (data, landmarks, labels, table headers,
chart titles); screenshots are kept under ``build/dashboard/``; a steward's decision
is made with the keyboard through the review page and is then in the audit chain.
"""

from __future__ import annotations

import json
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from board_host import provisioned
from cdp import Browser
from conftest import ROOT
from hirmem.api.tokens import TokenStore
from hirmem.cli import commands
from hirmem.daemon.config import build_config
from hirmem.daemon.service import Daemon
from hirmem.daemon.store import Store
from hirmem.emulation.qemu import QemuBoard
from hirmem.emulation.simdevice import SimDevice
from hirmem.protocol.keys import derive_test_key, write_key_file
from test_daemon import BOARDS, HOST_ID, HOST_KEY, needs_qemu, slot, wait_until

SHOTS = ROOT / "build" / "dashboard"
BOARD = "mps2-an385"
SIM_ID = bytes.fromhex("5100000000000011")
SIM_KEY = derive_test_key("dashboard sim device")
NEVER_ID = bytes.fromhex("5e00000000000099")
SUSPECT = "valve 7 reads a pressure no pump can make"

# what every page must hold, checked in the page itself
A11Y = """(() => {
  const bad = [];
  if (!document.documentElement.lang) bad.push('no lang');
  for (const tag of ['header', 'main', 'footer'])
    if (!document.querySelector(tag)) bad.push('no ' + tag);
  for (const el of document.querySelectorAll('input:not([type=hidden]), select, textarea'))
    if (!el.labels || el.labels.length === 0) bad.push('unlabelled ' + (el.id || el.name));
  for (const t of document.querySelectorAll('table'))
    if (!t.querySelector('th')) bad.push('table without headers');
  for (const s of document.querySelectorAll('svg'))
    if (s.getAttribute('role') !== 'img' || !s.querySelector('title'))
      bad.push('svg without role/title');
  for (const b of document.querySelectorAll('[onclick], a:not([href])'))
    bad.push('not a real control');
  return bad;
})()"""


def _api(url: str, token: str, method: str = "GET", body: Any = None) -> Any:
    req = urllib.request.Request(url, method=method,
                                 data=None if body is None else json.dumps(body).encode())
    req.add_header("Authorization", f"Bearer {token}")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.load(resp)


def _page(b: Browser, base: str, path: str, shot: str) -> None:
    b.goto(base + path)
    assert b.eval("location.pathname") == path.split("?")[0], f"{path}: sent elsewhere"
    assert b.eval(A11Y) == [], path
    b.screenshot(SHOTS / f"{shot}.png")


@needs_qemu
def test_every_page_in_chromium_and_a_steward_decision_by_keyboard(tmp_path: Path) -> None:
    db = tmp_path / "hirmem.db"
    board_id = BOARDS[BOARD]
    with Store(db) as store:
        store.register_device(board_id, derive_test_key(f"daemon test device {board_id.hex()}")
                              .public.raw, BOARD)  # fmt: skip
        store.register_device(SIM_ID, SIM_KEY.public.raw, "simulated")
        store.register_device(NEVER_ID, derive_test_key("never").public.raw, "hifive1")
    tokens = TokenStore(db)
    steward, _ = tokens.create("steward-ann", "review")
    admin, _ = tokens.create("ops", "admin")
    tokens.close()
    write_key_file(tmp_path / "host.key", HOST_KEY)
    with ExitStack() as stack:
        qb = stack.enter_context(QemuBoard(BOARD, provisioned(BOARD, tmp_path, slot(board_id)),
                                           timeout=120))  # fmt: skip
        sim = SimDevice(SIM_ID, SIM_KEY, pack_every_s=0.3, packs_to_make=8)
        stack.callback(sim.close)
        sim.start()
        config = build_config({
            "host": {"id": HOST_ID.hex(), "database": db.name, "key": "host.key",
                     "save_every": 0.2, "status_every": 0.5, "memory_every": 0.3, "max_frame": 1024,
                     "metrics": "127.0.0.1:0"},
            "api": {"listen": "127.0.0.1:0"},
            "device": [{"url": qb.url, "name": BOARD}, {"url": sim.url, "name": "sim"}],
        }, tmp_path, [])  # fmt: skip
        daemon = Daemon(config)
        daemon.add_background(commands._MemoryJob(config, None, HOST_KEY))
        daemon.start()
        stack.callback(daemon.stop)
        base = stack.enter_context(commands.serve_api(daemon, config, None, HOST_KEY)).url
        wait_until(lambda: len(daemon.store.packs(board_id)) >= 2
                   and len(daemon.store.packs(SIM_ID)) >= 3, 60, "packs from both")  # fmt: skip
        wait_until(lambda: (tmp_path / "hirmem-memory.sqlite").exists(), 20, "the memory")
        suspect = _api(base + "/v1/memories", admin, "POST",
                       {"text": SUSPECT, "flags": 0xFBF})  # an invariant fails: quarantined
        assert suspect["state"] == "quarantined"
        b = stack.enter_context(Browser())

        # signed out, every page sends to the login form; sign in with the keyboard
        b.goto(base + "/ui/devices")
        assert b.eval("location.pathname") == "/ui/login"
        assert b.eval(A11Y) == []
        b.screenshot(SHOTS / "login.png")
        b.eval("document.getElementById('token').focus()")
        b.type_text(steward)
        b.mark()
        b.press("Enter")
        b.wait_loaded("the overview after signing in")
        assert b.eval("location.pathname") == "/ui/"

        # the overview: the board and the simulated device active, one never seen
        b.wait("document.querySelector('[data-count=active]').textContent.trim() === '2'",
               15, "two active devices")  # fmt: skip
        assert b.eval("document.querySelector('[data-count=\"never-seen\"]').textContent") \
            .strip() == "1"  # fmt: skip
        assert b.eval("document.querySelectorAll('svg[role=img]').length") >= 3
        assert b.eval("document.querySelector('[data-testid=layers] tbody tr') !== null")
        assert b.eval(A11Y) == []
        # it updates live: a device registered now shows without a reload
        b.mark()
        before = int(b.eval("document.querySelector('[data-count=devices]').textContent"))
        daemon.store.register_device(bytes.fromhex("5e000000000000aa"),
                                     derive_test_key("late").public.raw)  # fmt: skip
        b.wait(f"Number(document.querySelector('[data-count=devices]').textContent) === "
               f"{before + 1}", 15, "the live update")  # fmt: skip
        assert b.eval("window.__hm_before === true"), "the page was reloaded, not updated"
        b.screenshot(SHOTS / "overview.png")

        _page(b, base, "/ui/devices", "devices")
        row = f"document.querySelector('tr[data-device=\"{board_id.hex()}\"]')"
        assert "active" in b.eval(f"{row}.textContent")
        assert b.eval(f"{row}.querySelectorAll('td')[3].textContent.trim()") != "-"  # seq

        _page(b, base, f"/ui/devices/{board_id.hex()}", "device")
        assert b.eval("document.querySelectorAll('[data-testid=timeline] tr.ev-pack').length") >= 2

        _page(b, base, "/ui/memories?q=sensor%20reading", "memories")
        pattern = b.wait("(() => { const a = document.querySelector("
                         "'[data-testid=distilled] tbody a'); return a && a.getAttribute("
                         "'href'); })()", 10, "a distilled memory")  # fmt: skip
        _page(b, base, pattern, "memory")
        episode = b.eval("[...document.querySelectorAll('[data-testid=memory-fields] a')]"
                         ".map(a => a.getAttribute('href')).pop()")  # fmt: skip
        _page(b, base, episode, "episode")
        # the episode's chart draws it and the memory distilled from it
        assert b.eval("document.querySelector('svg desc').textContent").count("points") == 2

        # a steward's decision, by keyboard: type the reason, Tab to Promote, Enter
        _page(b, base, "/ui/review", "review")
        field = f"reason-{suspect['id']}"
        b.eval(f"document.getElementById('{field}').focus()")
        b.type_text("valve recalibrated on site")
        b.press("Tab")
        assert b.eval("document.activeElement.tagName + ':' + document.activeElement.value") \
            == "BUTTON:promote"  # fmt: skip
        b.press("Enter")
        said = b.wait("(() => { const s = document.querySelector('[data-testid=decided]');"
                      " return s && s.textContent; })()", 10, "the decision")  # fmt: skip
        assert "promote by steward-ann" in said
        b.screenshot(SHOTS / "review-decided.png")
        history = _api(base + f"/v1/memories/{suspect['id']}/history", steward)
        [review] = [a for a in history["audit"] if a["action"] == "review"]
        assert review["actor"] == "steward:steward-ann"
        assert review["detail"] == {"decision": "promote", "reason": "valve recalibrated on site"}

        _page(b, base, "/ui/audit", "audit")
        assert b.eval("document.querySelector('[data-testid=verify]').textContent") \
            .startswith("intact")  # fmt: skip
        assert _api(base + "/v1/audit/verify", steward)["records"] >= review["seq"]
