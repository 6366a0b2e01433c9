# Extra script (pre:) for the platformio.ini environments on PlatformIO's official
# platforms (hifive1-revb on sifive, stm32f4-disco on ststm32). Those platforms bring
# their own toolchain, start-up flags and upload tools; this adds what the hirmem
# image needs, from the same place as every other build (builder/hirmem.py reading
# firmware/boards.mk): the core, boards/common and boards/<custom_hirmem_board>
# sources, the warning set and the per-board core configuration, and the board's
# linker script (with another flash origin if custom_hirmem_flash_origin says so).
#
# The official toolchains ship newlib, not picolibc, and GCC 8 (sifive) does not know
# -misa-spec: those flags are left out. custom_hirmem_defines replaces boards.mk's
# values of the same names (the hardware clocks).
#
# Not run on the project's build machines (no access to PlatformIO's registry).

import os
import re
import sys

Import("env")  # noqa: F821  (SCons)

ROOT = env.subst("$PROJECT_DIR")  # noqa: F821
sys.path.insert(0, os.path.join(ROOT, "boards", "platformio", "builder"))
import hirmem  # noqa: E402

DROP = ("--specs=picolibc.specs", "-misa-spec=2.2")

board = env.GetProjectOption("custom_hirmem_board")  # noqa: F821
defines = env.GetProjectOption("custom_hirmem_defines", "").split()  # noqa: F821
origin = env.GetProjectOption("custom_hirmem_flash_origin", "")  # noqa: F821

ldscript = os.path.join(ROOT, "boards", board, "link.ld")
if origin:
    with open(ldscript, encoding="utf-8") as fp:
        text = fp.read()
    text, n = re.subn(
        r"(FLASH\s*\([^)]*\)\s*:\s*ORIGIN\s*=\s*)0x[0-9A-Fa-f]+", r"\g<1>" + origin, text
    )
    if n != 1:
        sys.stderr.write("Error: no FLASH ORIGIN to move in %s\n" % ldscript)
        env.Exit(1)  # noqa: F821
    build_dir = env.subst("$BUILD_DIR")  # noqa: F821
    os.makedirs(build_dir, exist_ok=True)
    ldscript = os.path.join(build_dir, "link-%s.ld" % origin)
    with open(ldscript, "w", encoding="utf-8") as fp:
        fp.write(text)

hirmem.configure(env, ROOT, board, drop=DROP, defines=defines, ldscript=ldscript)  # noqa: F821
