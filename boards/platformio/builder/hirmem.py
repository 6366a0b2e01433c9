"""SCons side of a hirmem board build, shared by the local dev-platform's main.py and
the official-platform environments (boards/platformio/official.py).

configure(env, root, board) adds to a PlatformIO build environment what
`make -C firmware board-<board>` uses (firmware/boards.mk, read through make by
makeflags.py): the board's CPU flags, the warning set (-Werror), the per-board core
configuration (BOARD_CFG_<board>), the include folders, and the sources of the core,
boards/common and boards/<board>. The application (firmware/app) is the project's
src_dir in platformio.ini, which PlatformIO compiles itself with the same flags.
"""

import os

import makeflags

# What boards.mk's link rule adds to BOARD_CC besides the linker script. The objects
# are compiled as boards.mk says (-flto -ffat-lto-objects), but linked from their
# regular code (-fno-lto): boards.mk compiles a board's startup.c and slot.c without
# LTO (BOARD_NO_LTO), which SCons's per-folder builds cannot say per file. So a
# PlatformIO image is a few hundred bytes larger than make's; tools/size_report.py
# judges the make build.
LINK_FLAGS = ["-nostartfiles", "-Wl,--gc-sections", "-fno-lto"]


def _object_dir(root, src_dir):
    rel = os.path.relpath(src_dir, root)
    return os.path.join("$BUILD_DIR", "hirmem", rel.replace(os.sep, "_"))


def configure(env, root, board, drop=(), defines=(), ldscript=None):
    """Flags, sources and linker script of <board> into env; returns the settings.

    drop: flags to leave out (an official toolchain that lacks picolibc or
    -misa-spec); defines: "-DNAME=value" that replace the same NAME of boards.mk;
    ldscript: the linker script, by default the board's (a relative
    board_build.ldscript is looked up in the project, then in boards/<board>/)."""
    try:
        settings = makeflags.board_settings(root, board)
    except makeflags.MakeFlagsError as exc:
        import sys

        sys.stderr.write("Error: %s\n" % exc)
        env.Exit(1)
    names = {d.split("=", 1)[0] for d in defines}
    ccflags = [
        f
        for f in settings["ccflags"]
        if f not in drop and f.split("=", 1)[0] not in names
    ] + list(defines)
    env.Append(
        CCFLAGS=ccflags,
        LINKFLAGS=[f for f in settings["cpu_flags"] + settings["link_specs"] if f not in drop]
        + ["-Os"]
        + LINK_FLAGS
        + ["-Wl,-Map=%s" % os.path.join("$BUILD_DIR", "${PROGNAME}.map")],
        LIBS=["gcc"],
    )
    app_dir = os.path.join(root, "firmware", "app")
    groups = {}
    for src in settings["sources"]:
        if os.path.dirname(src) == app_dir:
            continue  # the project's src_dir
        groups.setdefault(os.path.dirname(src), []).append(os.path.basename(src))
    for src_dir, names_ in sorted(groups.items()):
        env.BuildSources(
            _object_dir(root, src_dir),
            src_dir,
            " ".join("+<%s>" % n for n in names_),
        )
    if ldscript is None:
        ldscript = env.subst("$LDSCRIPT_PATH") or "link.ld"
        if not os.path.isabs(ldscript):
            in_project = os.path.join(env.subst("$PROJECT_DIR"), ldscript)
            in_board = os.path.join(root, "boards", board, ldscript)
            ldscript = in_project if os.path.isfile(in_project) else in_board
    env.Replace(LDSCRIPT_PATH=ldscript)
    return settings
