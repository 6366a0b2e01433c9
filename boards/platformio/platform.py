"""The hirmem dev-platform: PlatformIO's side (runs inside `pio`, not in SCons).

Three things differ from a registry platform:
- package versions in platform.json are `symlink://` paths relative to this folder;
  PlatformIO would resolve them against the current directory, so they are made
  absolute here;
- the board manifests live in the board folders, `boards/<board>/<board>.json`
  (beside startup, linker script and Renode files), not in `boards/platformio/boards/`;
- each board names its toolchain package (`build.toolchain`); only that one is required.
"""

import os

from platformio.platform.base import PlatformBase
from platformio.platform.board import PlatformBoardConfig


class HirmemPlatform(PlatformBase):
    def __init__(self, manifest_path):
        super().__init__(manifest_path)
        for options in self._manifest.get("packages", {}).values():
            version = options.get("version", "")
            if version.startswith("symlink://") and not os.path.isabs(version[10:]):
                options["version"] = "symlink://" + os.path.normpath(
                    os.path.join(self.get_dir(), version[10:])
                )

    def boards_root(self):
        """The repository's boards/ folder (this platform is boards/platformio)."""
        return os.path.dirname(os.path.realpath(self.get_dir()))

    def get_boards(self, id_=None):
        root = self.boards_root()
        for name in sorted(os.listdir(root)):
            manifest = os.path.join(root, name, name + ".json")
            if name in self._BOARDS_CACHE or not os.path.isfile(manifest):
                continue
            config = PlatformBoardConfig(manifest)
            config.manifest["platform"] = self.name
            self._BOARDS_CACHE[name] = config
        return super().get_boards(id_)

    def configure_default_packages(self, options, targets):
        board = options.get("board")
        if board:
            toolchain = self.board_config(board).get("build.toolchain", "")
            if toolchain in self.packages:
                self.packages[toolchain]["optional"] = False
        return super().configure_default_packages(options, targets)
