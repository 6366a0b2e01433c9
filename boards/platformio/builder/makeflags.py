"""A hirmem board's build settings, read from firmware/boards.mk through make.

firmware/boards.mk (with CROSS_PREFIX_* / CROSS_CPU_* in firmware/Makefile) is the
one place that says how a board is compiled: its architecture, the core
configuration (BOARD_CFG_<board>), the warning set and the source lists. The
PlatformIO builds ask make for those values instead of repeating them:

    make -s -C firmware --eval 'hm-pio-vars: ; $(info ...)' hm-pio-vars

so a flag changed in boards.mk changes both builds. Needs GNU make (>= 3.82, for
--eval). Plain Python: imported by the SCons scripts of boards/platformio and by
the tests.
"""

import os
import re
import shlex
import subprocess

# What PlatformIO needs, as make expressions ($(B): the board).
_QUERY = (
    ("board_known", "$(filter $(B),$(BOARDS))"),
    ("arch", "$(BOARD_ARCH_$(B))"),
    ("prefix", "$(CROSS_PREFIX_$(BOARD_ARCH_$(B)))"),
    ("cpu_flags", "$(CROSS_CPU_$(BOARD_ARCH_$(B)))"),
    ("cflags", "$(CFLAGS_BOARD)"),
    ("board_cfg", "$(BOARD_CFG_$(B))"),
    ("core_src", "$(CORE_SRC)"),
    ("app_src", "$(APP_SRC)"),
    ("common_src", "$(BOARD_COMMON_SRC)"),
    ("board_src", "$(sort $(wildcard $(BOARDS_DIR)/$(B)/*.c))"),
)

# make's dependency-file flags: SCons tracks headers itself.
_MAKE_ONLY = ("-MMD", "-MP")


class MakeFlagsError(Exception):
    pass


def query(root, board):
    """{name: [words]} for the names of _QUERY, from make in <root>/firmware."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", board):
        raise MakeFlagsError("not a board name: %r" % board)
    recipe = "".join("$(info HM:%s=%s)" % (name, expr) for name, expr in _QUERY)
    cmd = [
        os.environ.get("MAKE", "make"),
        "-s",
        "--no-print-directory",
        "-C",
        os.path.join(root, "firmware"),
        "B=" + board,
        "--eval",
        "hm-pio-vars: ; %s@:" % recipe,
        "hm-pio-vars",
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise MakeFlagsError(
            "GNU make is needed to read the board flags from firmware/boards.mk: %s" % exc
        ) from exc
    if proc.returncode != 0:
        raise MakeFlagsError(
            "make could not report the flags of %s:\n%s" % (board, proc.stderr.strip())
        )
    found = {}
    for line in proc.stdout.splitlines():
        if line.startswith("HM:") and "=" in line:
            name, _, value = line[3:].partition("=")
            found[name] = shlex.split(value)
    missing = [name for name, _ in _QUERY if name not in found]
    if missing:
        raise MakeFlagsError("make did not report %s for %s" % (", ".join(missing), board))
    if found["board_known"] != [board]:
        raise MakeFlagsError(
            "%s is not a board of firmware/boards.mk (BOARDS)" % board
        )
    return found


def board_settings(root, board):
    """What a build of <board> needs: compiler prefix, compile flags, link flags, sources."""
    q = query(root, board)
    if not q["prefix"] or not q["cpu_flags"]:
        raise MakeFlagsError("firmware/Makefile has no CROSS_PREFIX/CROSS_CPU for %s" % board)
    cflags = [f for f in q["cflags"] if f not in _MAKE_ONLY]
    return {
        "arch": q["arch"][0],
        "prefix": q["prefix"][0],
        "cpu_flags": q["cpu_flags"],
        # the order of boards.mk's BOARD_CC: CPU, CFLAGS_BOARD, BOARD_CFG_<board>
        "ccflags": q["cpu_flags"] + cflags + q["board_cfg"],
        "board_cfg": q["board_cfg"],
        # what boards.mk links with besides the objects: BOARD_CC's CPU and --specs
        "link_specs": [f for f in cflags if f.startswith("--specs=")],
        "sources": q["core_src"] + q["app_src"] + q["common_src"] + q["board_src"],
    }
