/* hm_icount — a QEMU TCG plugin that counts guest instructions between benchmark marks.
 *
 *   qemu-system-… -plugin build/bench/hm_icount.so,out=FILE,mark=0xADDR[,copy=0xLO-0xHI]…
 *
 * Every translated guest instruction gets an inline "counter += 1" in front of it, so
 * the counter is the exact number of instructions executed (an instruction is counted
 * when it starts; a translation block left early, e.g. by semihosting, counts only
 * what ran). Instructions whose address lies in a `copy` range [LO, HI) (memcpy,
 * memset, …) also count in a second counter, COPIED. Each time the instruction at
 * `mark` (bench_mark's entry) is about to execute, the line "mark TOTAL COPIED" is
 * appended to FILE, and each time the first instruction of a copy range is, the line
 * "copy COPIED" (so the cost of each copy call is the growth of COPIED up to the next
 * line). Nothing depends on timing: the same image gives the same lines on every run.
 *
 * Debian's QEMU ships no qemu-plugin.h, so the few declarations of the plugin API
 * version 1 (QEMU 7.2) used here are written out below; QEMU resolves them when it
 * loads the plugin.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- QEMU plugin API v1 (the subset used) ---------------------------------------- */

typedef uint64_t qemu_plugin_id_t;
struct qemu_info_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;

enum qemu_plugin_cb_flags {
    QEMU_PLUGIN_CB_NO_REGS,
    QEMU_PLUGIN_CB_R_REGS,
    QEMU_PLUGIN_CB_RW_REGS
};
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };

typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*qemu_plugin_vcpu_udata_cb_t)(unsigned int vcpu_index, void *userdata);
typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id,
                                           qemu_plugin_vcpu_tb_trans_cb_t cb);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *insn);
void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *insn,
                                            qemu_plugin_vcpu_udata_cb_t cb,
                                            enum qemu_plugin_cb_flags flags, void *userdata);
void qemu_plugin_register_vcpu_insn_exec_inline(struct qemu_plugin_insn *insn,
                                                enum qemu_plugin_op op, void *ptr,
                                                uint64_t imm);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb,
                                    void *userdata);

#define QEMU_PLUGIN_EXPORT __attribute__((visibility("default")))
QEMU_PLUGIN_EXPORT extern int qemu_plugin_version;
QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const struct qemu_info_t *info,
                                           int argc, char **argv);

QEMU_PLUGIN_EXPORT int qemu_plugin_version = 1;

/* ---- the counter ------------------------------------------------------------------ */

#define MAX_COPY_RANGES 8

static uint64_t total;  /* instructions executed */
static uint64_t copied; /* of which inside a copy range */
static uint64_t mark_addr = UINT64_MAX;
static uint64_t copy_lo[MAX_COPY_RANGES], copy_hi[MAX_COPY_RANGES];
static unsigned n_copy;
static FILE *out;

static void on_mark(unsigned int vcpu_index, void *userdata) {
    (void)vcpu_index;
    (void)userdata;
    fprintf(out, "mark %" PRIu64 " %" PRIu64 "\n", total, copied);
}

static void on_copy_entry(unsigned int vcpu_index, void *userdata) {
    (void)vcpu_index;
    (void)userdata;
    fprintf(out, "copy %" PRIu64 "\n", copied);
}

static void on_exit_cb(qemu_plugin_id_t id, void *userdata) {
    (void)id;
    (void)userdata;
    fprintf(out, "end %" PRIu64 " %" PRIu64 "\n", total, copied);
    fclose(out);
    out = NULL;
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    size_t i, n = qemu_plugin_tb_n_insns(tb);
    (void)id;
    for (i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        uint64_t va = qemu_plugin_insn_vaddr(insn);
        unsigned k;
        /* Callbacks are registered before the counters of their instruction: a line
         * reports the instructions executed before that instruction. */
        if (va == mark_addr)
            qemu_plugin_register_vcpu_insn_exec_cb(insn, on_mark, QEMU_PLUGIN_CB_NO_REGS, NULL);
        for (k = 0; k < n_copy; k++) {
            if (va == copy_lo[k])
                qemu_plugin_register_vcpu_insn_exec_cb(insn, on_copy_entry,
                                                       QEMU_PLUGIN_CB_NO_REGS, NULL);
        }
        qemu_plugin_register_vcpu_insn_exec_inline(insn, QEMU_PLUGIN_INLINE_ADD_U64, &total, 1);
        for (k = 0; k < n_copy; k++) {
            if (va >= copy_lo[k] && va < copy_hi[k]) {
                qemu_plugin_register_vcpu_insn_exec_inline(insn, QEMU_PLUGIN_INLINE_ADD_U64,
                                                           &copied, 1);
                break;
            }
        }
    }
}

static int parse_u64(const char *s, uint64_t *v) {
    char *end;
    *v = strtoull(s, &end, 0);
    return end != s;
}

int qemu_plugin_install(qemu_plugin_id_t id, const struct qemu_info_t *info, int argc,
                        char **argv) {
    const char *path = NULL;
    int i;
    (void)info;
    for (i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "out=", 4) == 0) {
            path = arg + 4;
        } else if (strncmp(arg, "mark=", 5) == 0) {
            if (!parse_u64(arg + 5, &mark_addr)) goto bad;
        } else if (strncmp(arg, "copy=", 5) == 0) {
            const char *dash = strchr(arg + 5, '-');
            if (n_copy == MAX_COPY_RANGES || dash == NULL || !parse_u64(arg + 5, &copy_lo[n_copy]) ||
                !parse_u64(dash + 1, &copy_hi[n_copy]))
                goto bad;
            n_copy++;
        } else {
            goto bad;
        }
    }
    if (path == NULL || mark_addr == UINT64_MAX) {
        fprintf(stderr, "hm_icount: out=FILE and mark=ADDR are required\n");
        return -1;
    }
    out = fopen(path, "w");
    if (out == NULL) {
        perror(path);
        return -1;
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, on_exit_cb, NULL);
    return 0;
bad:
    fprintf(stderr, "hm_icount: bad argument '%s' (out=FILE mark=ADDR copy=LO-HI)\n", argv[i]);
    return -1;
}
