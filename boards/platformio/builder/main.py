# The hirmem dev-platform's build script (SCons, run by `pio run`).
#
# Compiles a board of boards/ with the system cross compilers (the toolchain package
# named by the board manifest's build.toolchain: links to /usr/bin made by
# tools/pio_setup.py) and the flags of firmware/boards.mk (builder/hirmem.py), links
# with the board's linker script, and writes hirmem.elf, hirmem.bin and hirmem.map
# into .pio/build/<env>/. The image is unprovisioned, like make's: run
# `hirmem provision` before booting it (tools/qemu_launch.py).

import os
import sys

from SCons.Script import AlwaysBuild, Builder, Default, DefaultEnvironment

env = DefaultEnvironment()
platform = env.PioPlatform()
board = env.BoardConfig()

BUILDER_DIR = os.path.join(platform.get_dir(), "builder")
if BUILDER_DIR not in sys.path:
    sys.path.insert(0, BUILDER_DIR)
import hirmem  # noqa: E402  (boards/platformio/builder/hirmem.py)

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(platform.get_dir())))
HIRMEM_BOARD = board.get("build.hirmem_board", env.subst("$BOARD"))

toolchain = board.get("build.toolchain")
toolchain_dir = platform.get_package_dir(toolchain) if toolchain else None
prefix = board.get("build.prefix", "")
if not toolchain_dir or not os.path.isfile(os.path.join(toolchain_dir, "bin", prefix + "gcc")):
    sys.stderr.write(
        "Error: %sgcc is not in the %s package (%s/bin): install the Debian cross "
        "compiler, then run tools/pio_setup.py (tools/run setup)\n"
        % (prefix, toolchain, toolchain_dir)
    )
    env.Exit(1)
env.PrependENVPath("PATH", os.path.join(toolchain_dir, "bin"))

env.Replace(
    AR=prefix + "gcc-ar",
    AS=prefix + "as",
    CC=prefix + "gcc",
    CXX=prefix + "g++",
    GDB=prefix + "gdb",
    OBJCOPY=prefix + "objcopy",
    RANLIB=prefix + "gcc-ranlib",
    SIZETOOL=prefix + "size",
    LINK="$CC",
    ARFLAGS=["rc"],
    PROGNAME="hirmem",
    PROGSUFFIX=".elf",
    # flash: code, the key slot and the initial values of .data; RAM: .data, .bss,
    # .noinit (the stack is what is left, checked by the linker script)
    SIZEPROGREGEXP=r"^(?:\.text|\.hm_slot|\.data|\.rodata)\s+(\d+).*",
    SIZEDATAREGEXP=r"^(?:\.data|\.bss|\.noinit)\s+(\d+).*",
    SIZECHECKCMD="$SIZETOOL -A -d $SOURCES",
    SIZEPRINTCMD="$SIZETOOL -B -d $SOURCES",
)

settings = hirmem.configure(env, ROOT, HIRMEM_BOARD)

# The manifest describes the CPU; boards.mk decides the flags: they must agree.
for key in ("cpu", "march", "mabi"):
    value = board.get("build." + key, "")
    flag = ("-mcpu=%s" if key == "cpu" else "-" + key + "=%s") % value
    if value and flag not in settings["cpu_flags"]:
        sys.stderr.write(
            "Error: boards/%s/%s.json says build.%s=%s but firmware/boards.mk compiles "
            "with %s\n" % (HIRMEM_BOARD, HIRMEM_BOARD, key, value, " ".join(settings["cpu_flags"]))
        )
        env.Exit(1)
if prefix != settings["prefix"]:
    sys.stderr.write(
        "Error: build.prefix %s differs from firmware/Makefile's %s\n" % (prefix, settings["prefix"])
    )
    env.Exit(1)

env.Append(
    BUILDERS=dict(
        ElfToBin=Builder(
            action=env.VerboseAction("$OBJCOPY -O binary $SOURCES $TARGET", "Building $TARGET"),
            suffix=".bin",
        )
    )
)

target_elf = env.BuildProgram()
target_bin = env.ElfToBin(os.path.join("$BUILD_DIR", "${PROGNAME}"), target_elf)

AlwaysBuild(env.Alias("nobuild", target_bin))
target_buildprog = env.Alias("buildprog", target_bin, target_bin)

target_size = env.Alias(
    "size", target_elf, env.VerboseAction("$SIZEPRINTCMD", "Calculating size $SOURCE")
)
AlwaysBuild(target_size)



def _no_upload(target, source, env):
    sys.stderr.write(
        "Error: there is no upload for %s here. Provision the image "
        "(hirmem provision --elf %s ...), then boot it in QEMU "
        "(tools/qemu_launch.py %s <provisioned.elf>)\n"
        % (HIRMEM_BOARD, source[0], HIRMEM_BOARD)
    )
    return 1


AlwaysBuild(env.Alias("upload", target_elf, _no_upload))

Default([target_buildprog, target_size])
