/* The device application: board init, the key slot, the agent main loop, the
 * synthetic sensor, and the stack report.
 *
 *  1. board_init(); the key slot (boards/include/hm_slot.h) is checked: magic,
 *     version, size, CRC-32, PROVISIONED. Anything wrong: board_exit(3)
 *     (BOARD_EXIT_UNPROVISIONED) before the agent ever starts — the line stays
 *     silent, since the wire is binary.
 *  2. hm_agent_init with the slot's identity and policy (offer threshold and period,
 *     status period); the agent writes 00 and HELLO.
 *  3. Loop: bytes from the UART ring -> hm_agent_input; hm_agent_poll; in a session,
 *     the sensor every sensor_period_ms (hm_agent_capture, CAPTURE_RESULT ref 0; no
 *     captures before the first handshake, so none of them is reported lost); every
 *     STACK_REPORT_MS in a session, a LOG line when the stack high-water mark rose
 *     since the last report (and once per session):
 *         "stack used=<bytes> free=<bytes> size=<bytes> rx_overruns=<n>"
 *     free is the never-touched part of the painted stack, used = size - free.
 *     STATUS_REQUEST is answered by the agent itself. Idle: board_idle (wfi) until
 *     the next interrupt (UART receive, or the 1 ms tick).
 *  On a board with a non-volatile region (board_nv), the boot counter is taken from
 *  hm_persist (above every earlier one, saved before use) and each accepted knowledge
 *  head is saved there too, so both survive a power cycle; a failure there is
 *  board_exit(5) (BOARD_EXIT_NV). hm_persist's reserved sequence mark and chain head
 *  are left unused here, on purpose: record ids are boot.n and pack seqs boot << 32 | n
 *  (hm_agent.h), so a boot counter saved greater before its boot uses it already makes
 *  every id and seq of a power-on new, whatever a cut took (tests/test_power_cuts.py,
 *  tests/test_board_nv_cuts.py); the host's chain head comes back in every HELLO_ACK.
 *  Reserving seqs would add an NV write per block of packs and flash for nothing.
 *  Boot counter and knowledge head (boards/include/board_noinit.h): kept in .noinit
 *  RAM with a magic and a CRC. A warm reset (watchdog, reset pin, QEMU system_reset)
 *  boots with the saved boot + 1 and the saved knowledge head (so a rollback stays
 *  refused); a cold boot starts from the slot's boot_base with no knowledge head.
 *  The agent saves each accepted knowledge head there (hm_agent_io.knowledge_saved)
 *  before the host hears of it. The agent itself lives in .noinit too: after a warm
 *  reset it is initialised with resume = 1 and keeps its working memory and pending
 *  packs (hm_agent.h "Resume"; if the kept memory is broken it starts empty and says
 *  so in a LOG line); a cold boot initialises it with resume = 0. At the first session
 *  after a resume the app logs what it kept (records held, of them pinned to packs
 *  awaiting their result):
 *         "resume kept=<n> pinned=<n>"
 *  Once per session
 *  the app logs
 *         "boot=<n> reset=warm|cold warm_boots=<n>"
 *  before the first stack line.
 */
#include <string.h>

#include "board.h"
#include "board_noinit.h"
#include "hm_agent.h"
#include "hm_crc32.h"
#include "hm_nv.h"
#include "hm_persist.h"
#include "hm_sha2.h"
#include "hm_slot.h"
#include "sensor.h"

#ifndef HM_FIRMWARE_VERSION
#define HM_FIRMWARE_VERSION "0.1.0"
#endif
#define STACK_REPORT_MS 500u

/* In .noinit (board_noinit.h): a warm reset keeps it, and the agent resumes its ring
 * and packer from it (hm_agent.h "Resume"); a cold boot starts it fresh. */
__attribute__((section(".noinit"), aligned(8))) static hm_agent agent;
static sensor sens;
/* The power-safe state (hm_persist.h) on a board with a non-volatile region. */
static hm_persist persist;
static int have_nv;

static void io_write(void *ctx, const uint8_t *bytes, size_t n) {
    (void)ctx;
    board_uart_write(bytes, n);
}

static uint32_t io_now(void *ctx) {
    (void)ctx;
    return board_now_ms();
}

static void io_knowledge_saved(void *ctx, uint64_t seq, const uint8_t hash[32]) {
    (void)ctx;
    board_noinit_save_knowledge(seq, hash);
    if (have_nv) { /* before the host hears of it: a cut after this keeps the head */
        hm_persist_state s = persist.st;
        s.knowledge_seq = seq;
        memcpy(s.knowledge_hash, hash, sizeof s.knowledge_hash);
        if (hm_persist_save(&persist, &s) != HM_NV_OK) board_exit(BOARD_EXIT_NV);
    }
}

static int slot_ok(const hm_slot *s) {
    if (memcmp(s->magic, HM_SLOT_MAGIC, sizeof s->magic) != 0) return 0;
    if (s->version != HM_SLOT_VERSION || s->size != sizeof(hm_slot)) return 0;
    if (hm_crc32(0, (const uint8_t *)s, offsetof(hm_slot, crc)) != s->crc) return 0;
    return (s->flags & HM_SLOT_PROVISIONED) != 0;
}

static size_t put_field(char *out, size_t at, const char *name, uint32_t v) {
    while (*name) out[at++] = *name++;
    return at + app_utoa(v, out + at);
}

static void boot_report(uint32_t boot, int warm) {
    char line[96];
    size_t n = put_field(line, 0, "boot=", boot);
    const char *kind = warm ? " reset=warm" : " reset=cold";
    while (*kind) line[n++] = *kind++;
    n = put_field(line, n, " warm_boots=", board_noinit_warm_count());
    /* HELLO_ACKs of another HELLO the agent ignored (SPEC 6.5); named only when there were */
    if (agent.counters.stale_hello_acks)
        n = put_field(line, n, " stale_hello_acks=", agent.counters.stale_hello_acks);
    (void)hm_agent_log(&agent, 1, (const uint8_t *)line, n);
}

static void stack_report(void) {
    char line[96];
    size_t size = board_stack_size(), free_bytes = board_stack_untouched(), n = 0;
    n = put_field(line, n, "stack used=", (uint32_t)(size - free_bytes));
    n = put_field(line, n, " free=", (uint32_t)free_bytes);
    n = put_field(line, n, " size=", (uint32_t)size);
    n = put_field(line, n, " rx_overruns=", board_uart_overruns());
    (void)hm_agent_log(&agent, 1, (const uint8_t *)line, n);
}

int main(void) {
    const hm_slot *slot = &hm_key_slot;
    hm_agent_config cfg;
    uint8_t context[HM_HASH_SIZE];
    uint8_t rxbuf[64];
    uint32_t last_sensor, last_stack_check, reported_sessions = 0;
    size_t reported_free = (size_t)-1;
    int sensor_on, warm = 0, resumed;
    uint32_t kept, kept_pinned;
    const uint8_t *khash = NULL;

    board_init();
    if (!slot_ok(slot)) board_exit(BOARD_EXIT_UNPROVISIONED);

    memset(&cfg, 0, sizeof cfg);
    cfg.device_id = slot->device_id;
    cfg.seed = slot->device_seed;
    cfg.public_key = slot->device_public; /* checked against the seed by hm_agent_init */
    cfg.host_key = (slot->flags & HM_SLOT_HOST_KEY) ? &slot->host_key : NULL;
    cfg.board = board_name();
    cfg.firmware = HM_FIRMWARE_VERSION;
    cfg.boot = board_noinit_boot(slot->device_id, slot->boot_base ? slot->boot_base : 1u, &warm);
    cfg.knowledge_seq = board_noinit_knowledge(&khash);
    cfg.knowledge_hash = khash;
    if (board_nv()) {
        /* a boot counter above every earlier one, saved before it is used; the newest
         * knowledge head a power cycle kept (anti-rollback) */
        uint32_t boot = 0;
        if (hm_persist_mount(&persist, board_nv(), 0) != HM_NV_OK ||
            hm_persist_boot(&persist, cfg.boot, &boot) != HM_NV_OK)
            board_exit(BOARD_EXIT_NV);
        have_nv = 1;
        cfg.boot = boot;
        if (persist.st.knowledge_seq > cfg.knowledge_seq) {
            cfg.knowledge_seq = persist.st.knowledge_seq;
            cfg.knowledge_hash = persist.st.knowledge_hash;
        }
    }
    cfg.capabilities = HM_CAP_ALL;
    cfg.offer_threshold = slot->offer_threshold;
    cfg.offer_period_ms = slot->offer_period_ms;
    cfg.status_period_ms = slot->status_period_ms;
    cfg.io.write = io_write;
    cfg.io.now_ms = io_now;
    cfg.io.knowledge_saved = io_knowledge_saved;
    /* a valid warm-reset record (same device, same slot) says the agent's RAM is the
     * one this image left: resume it; the agent still checks it before trusting it */
    cfg.resume = (uint8_t)(warm != 0);
    if (hm_agent_init(&agent, &cfg) != HM_AGENT_OK) board_exit(BOARD_EXIT_CONFIG);
    /* what the resume kept, reported once the first session is open */
    resumed = agent.counters.resumes != 0;
    kept = agent.ring.counters.used;
    kept_pinned = agent.ring.counters.pinned;

    sensor_on = (slot->flags & HM_SLOT_SENSOR) && slot->sensor_period_ms;
    if (sensor_on) {
        uint32_t seed = slot->sensor_seed;
        if (!seed) seed = hm_crc32(0, slot->device_id, sizeof slot->device_id);
        sensor_init(&sens, seed);
        hm_sha256(context, "hirmem synthetic sensor", 23);
    }
    last_sensor = last_stack_check = board_now_ms();

    for (;;) {
        size_t n = board_uart_read(rxbuf, sizeof rxbuf);
        uint32_t now;
        if (n) hm_agent_input(&agent, rxbuf, n);
        hm_agent_poll(&agent);
        now = board_now_ms();
        if (resumed && agent.session) {
            char line[48];
            size_t k = put_field(line, 0, "resume kept=", kept);
            k = put_field(line, k, " pinned=", kept_pinned);
            (void)hm_agent_log(&agent, 1, (const uint8_t *)line, k);
            resumed = 0;
        }
        if (sensor_on && agent.session && now - last_sensor >= slot->sensor_period_ms) {
            sensor_reading r;
            last_sensor = now;
            sensor_next(&sens, &r);
            (void)hm_agent_capture(&agent, r.payload, r.payload_len,
                                   (const uint8_t *)"sensor/temp0", 12, 0, context, r.flags,
                                   r.confidence, r.provenance, r.priority, NULL);
        }
        if (now - last_stack_check >= STACK_REPORT_MS) {
            size_t free_bytes = board_stack_untouched();
            last_stack_check = now;
            if (free_bytes < 16u) board_exit(BOARD_EXIT_STACK);
            if (agent.session &&
                (free_bytes != reported_free || agent.counters.sessions != reported_sessions)) {
                reported_free = free_bytes;
                if (agent.counters.sessions != reported_sessions) boot_report(cfg.boot, warm);
                reported_sessions = agent.counters.sessions;
                stack_report();
            }
        }
        if (!n) board_idle();
    }
}
