# Board images: boards/<board>/ (startup, link.ld, board.c) + boards/common/ +
# firmware/app/ + the core compiled for that board with its own configuration.
#   make boards        build/boards/<board>/hirmem.elf and hirmem.bin for every board of
#                      BOARDS (-Os, WARN + -Werror: zero warnings), then print sizes
#                      (text/data/bss) and sizeof(hm_agent) (the size of main.c's agent)
#   make board-<b>     one board
#   make boards-clean
# BOARDS_OUT=<dir> builds somewhere else (the tests build a fresh copy to see warnings).
# BOARD_EXTRA_CFLAGS adds flags (with its own BOARDS_OUT): -DBOARD_NV_CUT builds the
# power-cut test images (boards/common/board_nv.c).
# Objects live in build/boards/<board>/{core,app,board}/: every board compiles the
# core itself, since the HM_* sizes differ per board (hm_config.h, hm_agent.h).

BOARDS      := mps2-an385 hifive1 stm32f4
BOARDS_DIR  := $(ROOT)/boards
APP_DIR     := $(ROOT)/firmware/app
BOARDS_OUT  ?= $(ROOT)/build/boards

BOARD_ARCH_mps2-an385 := cortex-m3
BOARD_ARCH_hifive1    := rv32imac
BOARD_ARCH_stm32f4    := cortex-m4f

# Core configuration per board. hifive1 has 16 KB of RAM for everything: a smaller
# message, frame, pack, arena and queue keep hm_agent near 9 KB and leave room for
# the stack (Ed25519 sign/verify) with a 16-record ring. QEMU 7.2's sifive_e counts
# mtime at 10 MHz; a HiFive1 image for hardware drops BOARD_MTIME_HZ (32 768 Hz).
BOARD_CFG_mps2-an385 :=
BOARD_CFG_hifive1    := -DHM_RING_CAPACITY=16 -DHM_ARENA_SIZE=1024 -DHM_MAX_FRAME=256 \
                        -DHM_MAX_MESSAGE=1024 -DHM_AGENT_PACK_CAP=768 -DHM_AGENT_QUEUE=4 \
                        -DHM_KNOWLEDGE_CAPACITY=4 -DBOARD_MTIME_HZ=10000000u
BOARD_CFG_stm32f4    := -DBOARD_CPU_HZ=168000000u

# Link-time optimisation as in the cross build (firmware/Makefile, CROSS_LTO), so a
# board carries the core at the size tools/size_report.py judges. Two files are
# compiled without it (BOARD_NO_LTO): a board's startup.c, whose assembly names C
# functions (board_reset, board_trap) the optimiser cannot see being used, and
# slot.c, the key slot that provisioning patches into the ELF after the link (seen
# by the optimiser, its unprovisioned initialiser would fold main into an exit).
BOARD_NO_LTO := startup.c slot.c
CFLAGS_BOARD = --specs=picolibc.specs $(WARN) -Os $(CROSS_LTO) -g -ffunction-sections -fdata-sections \
               -MMD -MP -I$(CORE) -I$(BOARDS_DIR)/include -I$(BOARDS_DIR)/common -I$(APP_DIR) \
               $(BOARD_EXTRA_CFLAGS)

BOARD_COMMON_SRC := $(sort $(wildcard $(BOARDS_DIR)/common/*.c))
APP_SRC          := $(sort $(wildcard $(APP_DIR)/*.c))

# $(1): a board of BOARDS.
define BOARD_RULES
BOARD_OUT_$(1)  := $(BOARDS_OUT)/$(1)
BOARD_CC_$(1)   := $(CROSS_PREFIX_$(BOARD_ARCH_$(1)))gcc $(CROSS_CPU_$(BOARD_ARCH_$(1))) \
                   $$(CFLAGS_BOARD) $(BOARD_CFG_$(1))
BOARD_OBJ_$(1)  := $(patsubst $(CORE)/%.c,$(BOARDS_OUT)/$(1)/core/%.o,$(CORE_SRC)) \
                   $(patsubst $(APP_DIR)/%.c,$(BOARDS_OUT)/$(1)/app/%.o,$(APP_SRC)) \
                   $(patsubst $(BOARDS_DIR)/common/%.c,$(BOARDS_OUT)/$(1)/board/common_%.o,$(BOARD_COMMON_SRC)) \
                   $(patsubst $(BOARDS_DIR)/$(1)/%.c,$(BOARDS_OUT)/$(1)/board/%.o,$(sort $(wildcard $(BOARDS_DIR)/$(1)/*.c)))

$(BOARDS_OUT)/$(1)/core/%.o: $(CORE)/%.c $(BOARDS_DIR)/../firmware/boards.mk
	@mkdir -p $$(@D)
	$$(BOARD_CC_$(1)) -c $$< -o $$@

$(BOARDS_OUT)/$(1)/app/%.o: $(APP_DIR)/%.c $(BOARDS_DIR)/../firmware/boards.mk
	@mkdir -p $$(@D)
	$$(BOARD_CC_$(1)) -c $$< -o $$@

$(BOARDS_OUT)/$(1)/board/common_%.o: $(BOARDS_DIR)/common/%.c $(BOARDS_DIR)/../firmware/boards.mk
	@mkdir -p $$(@D)
	$$(BOARD_CC_$(1)) $$(if $$(filter $(BOARD_NO_LTO),$$(<F)),-fno-lto) -c $$< -o $$@

$(BOARDS_OUT)/$(1)/board/%.o: $(BOARDS_DIR)/$(1)/%.c $(BOARDS_DIR)/../firmware/boards.mk
	@mkdir -p $$(@D)
	$$(BOARD_CC_$(1)) $$(if $$(filter $(BOARD_NO_LTO),$$(<F)),-fno-lto) -c $$< -o $$@

$(BOARDS_OUT)/$(1)/hirmem.elf: $$(BOARD_OBJ_$(1)) $(BOARDS_DIR)/$(1)/link.ld
	$$(BOARD_CC_$(1)) -nostartfiles -Wl,--gc-sections -T$(BOARDS_DIR)/$(1)/link.ld \
	    -Wl,-Map=$$(@D)/hirmem.map $(CROSS_LTO_LIBC_$(BOARD_ARCH_$(1))) $$(BOARD_OBJ_$(1)) \
	    -lgcc -o $$@

$(BOARDS_OUT)/$(1)/hirmem.bin: $(BOARDS_OUT)/$(1)/hirmem.elf
	$(CROSS_PREFIX_$(BOARD_ARCH_$(1)))objcopy -O binary $$< $$@

.PHONY: board-$(1)
board-$(1): $(BOARDS_OUT)/$(1)/hirmem.elf $(BOARDS_OUT)/$(1)/hirmem.bin

-include $$(BOARD_OBJ_$(1):.o=.d)
endef
$(foreach b,$(BOARDS),$(eval $(call BOARD_RULES,$(b))))

.PHONY: boards boards-size boards-clean
boards: $(foreach b,$(BOARDS),board-$(b))
	@$(MAKE) --no-print-directory -f $(ROOT)/firmware/Makefile boards-size

boards-size:
	@printf '%-12s %8s %8s %8s %10s %s\n' board text data bss hm_agent elf
	@$(foreach b,$(BOARDS),set -e; \
	    e=$(BOARDS_OUT)/$(b)/hirmem.elf; \
	    $(CROSS_PREFIX_$(BOARD_ARCH_$(b)))size $$e | tail -1 | \
	    { read t d s rest; \
	      a=$$($(CROSS_PREFIX_$(BOARD_ARCH_$(b)))nm -S $$e | awk '$$4=="agent"{print $$2}'); \
	      printf '%-12s %8s %8s %8s %10d %s\n' $(b) $$t $$d $$s 0x$$a $$e; };)

boards-clean:
	rm -rf $(BOARDS_OUT)
