# PlatformIO monitor filter "hirmem": `pio device monitor` shows a board's frames as
# one readable line per message (platformio.ini: monitor_filters = hirmem).
#
# PlatformIO loads monitor/filter_*.py from the project folder. This file only
# adapts: the decoding is hirmem.protocol.wireview.WireView (typed and tested in
# tests/test_monitor.py), imported from this project's host/ folder so that the
# monitor decodes with the same tree as the firmware it watches.

import os
import sys

from platformio.device.monitor.filters.base import DeviceMonitorFilterBase

_HOST = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "host")
if _HOST not in sys.path:
    sys.path.insert(0, _HOST)

from hirmem.protocol.wireview import WireView  # noqa: E402


class HirmemFrames(DeviceMonitorFilterBase):
    NAME = "hirmem"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.view = WireView()

    def set_running_terminal(self, terminal):
        # frames are binary: read the line as Latin-1, one character per byte
        terminal.set_rx_encoding("Latin-1")
        super().set_running_terminal(terminal)

    def rx(self, text):
        return self.view.feed(text.encode("latin-1"))

    def tx(self, text):
        return text
