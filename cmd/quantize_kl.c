/* quantize_kl.c - pn-quantize's --measure kl (quantize_kl.h): options, the
 * measurement before the job, its progress lines, the plan's gains, and
 * --judge after the run. */
#include "cmd/quantize_kl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd/cli.h"
#include "common/mem.h"
#include "common/text.h"
#include "common/threads.h"
#include "compare/compare.h"

void kl_cli_init(kl_cli *k)
{
    memset(k, 0, sizeof *k);
    k->seq_len = 256;
    k->max_seqs = 8;
    k->node = "node";
}

void kl_cli_free(kl_cli *k)
{
    PN_CLOSE(pn_kl_measurement_free, k->m);
    PN_CLOSE(pn_measurement_free, k->as);
    PN_CLOSE(free, k->script_found);
    PN_CLOSE(free, k->promoted);
}

static int bad_value(const char *opt, const char *arg, const char *want)
{
    fprintf(stderr, "pn-quantize: error: %s: '", opt);
    pn_fput_safe(stderr, arg);
    fprintf(stderr, "': %s\n", want);
    return 2;
}

int kl_cli_take(kl_cli *k, int which, const char *arg)
{
    switch (which) {
    case KL_OPT_MEASURE:
        if (strcmp(arg, "kl") != 0 && strcmp(arg, "error") != 0 && strcmp(arg, "forward") != 0)
            return bad_value("--measure", arg, "expected error, forward or kl");
        k->kl = strcmp(arg, "kl") == 0;
        k->forward = strcmp(arg, "forward") == 0;
        break;
    case KL_OPT_CALIBRATION: k->calibration = arg; break;
    case KL_OPT_SEQ_LEN:
        if (!pn_cli_long("pn-quantize", "--seq-len", arg, 1, 1L << 20, &k->seq_len))
            return 2;
        break;
    case KL_OPT_MAX_SEQS:
        if (!pn_cli_long("pn-quantize", "--max-seqs", arg, 1, 1L << 20, &k->max_seqs))
            return 2;
        break;
    case KL_OPT_PART: {
        char tail;
        if (sscanf(arg, "%d/%d%c", &k->part, &k->n_parts, &tail) != 2 || k->n_parts < 1 ||
            k->n_parts > 99999 || k->part < 1 || k->part > k->n_parts)
            return bad_value("--measure-part", arg,
                             "expected I/N with 1 <= I <= N <= 99999 (part 2 of 16: 2/16)");
        break;
    }
    case KL_OPT_NODE: k->node = arg; break;
    case KL_OPT_SCRIPT: k->script = arg; break;
    case KL_OPT_JUDGE: k->judge = true; break;
    }
    return -1;
}

int kl_cli_check(const kl_cli *k, const pn_quantize_opts *o, bool have_dst)
{
    const char *need = NULL;
    if (!k->kl && (k->calibration || k->n_parts || k->judge))
        need = k->calibration ? "--calibration" : k->n_parts ? "--measure-part" : "--judge";
    if (need) {
        fprintf(stderr, "pn-quantize: error: %s belongs to the KL measurement: give --measure kl\n",
                need);
        return 2;
    }
    if (!k->kl)
        return 0;
    if (!k->calibration) {
        fprintf(stderr,
                "pn-quantize: error: --measure kl needs --calibration FILE, a text to judge "
                "the candidates on (not the text you will judge the result on)\n");
        return 2;
    }
    if (o->promote_list_path) {
        fprintf(stderr,
                "pn-quantize: error: --promote-list names the promotions itself; --measure kl "
                "chooses them\n");
        return 2;
    }
    if (k->n_parts && (have_dst || k->judge)) {
        fprintf(stderr,
                "pn-quantize: error: --measure-part measures a share and writes no model: give "
                "SRC and --measurement FILE only\n");
        return 2;
    }
    if (k->n_parts && !o->measurement_path) {
        fprintf(stderr, "pn-quantize: error: --measure-part needs --measurement FILE (the part is "
                        "written beside it as FILE.part-IIIII-of-NNNNN)\n");
        return 2;
    }
    if (k->judge && o->dry_run) {
        fprintf(stderr,
                "pn-quantize: error: --judge judges the written file; a dry run writes none\n");
        return 2;
    }
    return 0;
}

static void compare_opts(kl_cli *k, const pn_quantize_opts *o, char **envp,
                         volatile sig_atomic_t *cancel, pn_compare_opts *c)
{
    pn_compare_opts_init(c);
    if (!k->script && !k->script_found)
        k->script_found = pn_cli_llama_script();
    c->node = k->node;
    c->script = k->script ? k->script : k->script_found;
    c->envp = envp;
    const char *tmp = getenv("TMPDIR");
    c->tmp_dir = tmp && *tmp ? tmp : "/tmp";
    c->source_path = o->src_path;
    c->text_path = k->calibration;
    c->seq_len = (int)k->seq_len;
    c->max_seqs = (int)k->max_seqs;
    c->threads = pn_threads_resolve(o->threads);
    c->dequant_threads = o->threads;
    c->cancel = cancel;
}

static void on_kl_progress(const pn_kl_progress *p, void *user)
{
    const kl_cli *k = user;
    if (!k->progress)
        return;
    fprintf(stderr, "pn-quantize: KL measurement: %zu of %zu candidates done", p->done, p->total);
    if (p->name) {
        fprintf(stderr, ", judging ");
        pn_fput_safe(stderr, p->name);
    } else {
        fprintf(stderr, ", %s", p->step);
    }
    fprintf(stderr, " (%.0f s", p->elapsed_s);
    if (p->eta_s >= 0)
        fprintf(stderr, ", about %.0f s left", p->eta_s);
    fprintf(stderr, ")\n");
}

static void on_kl_note(const char *msg, void *user)
{
    const kl_cli *k = user;
    if (k->quiet)
        return;
    fprintf(stderr, "pn-quantize: ");
    pn_fput_safe(stderr, msg);
    fputc('\n', stderr);
}

int kl_cli_obtain(kl_cli *k, pn_quantize_opts *o, char **envp, volatile sig_atomic_t *cancel)
{
    o->forward_order = k->forward;
    if (!k->kl)
        return -1;
    pn_kl_opts ko;
    memset(&ko, 0, sizeof ko);
    ko.q = *o;
    ko.q.progress = NULL;
    ko.q.note = NULL;
    ko.q.result = NULL;
    ko.q.cancel = cancel;
    compare_opts(k, o, envp, cancel, &ko.c);
    ko.path = o->measurement_path;
    ko.part = k->part;
    ko.n_parts = k->n_parts;
    ko.force = o->force;
    ko.progress = on_kl_progress;
    ko.note = on_kl_note;
    ko.user = k;
    pn_error err;
    pn_error_clear(&err);
    pn_status st = pn_kl_measure(&ko, &k->m, &err);
    if (st != PN_OK) {
        fprintf(stderr, "pn-quantize: error: ");
        pn_fput_safe(stderr, err.msg);
        fputc('\n', stderr);
        return pn_cli_exit_status_signal(st, cancel ? *cancel : 0);
    }
    if (k->n_parts) {
        if (!k->quiet)
            printf("measured part %d of %d: candidates %zu to %zu of %zu (base KL %.4f), saved "
                   "beside ",
                   k->m->part, k->m->n_parts, k->m->first + 1, k->m->first + k->m->count,
                   k->m->total, k->m->kl_base);
        if (!k->quiet) {
            pn_fput_safe(stdout, o->measurement_path);
            printf("\n");
        }
        return 0;
    }
    st = pn_kl_as_measurement(k->m, o->target_size != 0, &k->as, &err);
    if (st != PN_OK) {
        pn_cli_error("pn-quantize", err.msg);
        return 1;
    }
    o->measurement = k->as;
    o->measurement_path = NULL; /* the KL file is the measurement; nothing else is saved */
    if (!k->quiet)
        fprintf(stderr,
                "pn-quantize: KL measurement: %zu candidates on %zu positions of the calibration "
                "text, base %s KL %.4f \xc2\xb1 %.4f (llama.cpp %s)\n",
                k->m->n, k->m->n_positions, k->m->params.base_label, k->m->kl_base,
                k->m->kl_base_se, k->m->params.llama_cpp);
    return -1;
}

void kl_cli_plan_note(const kl_cli *k, const pn_plan_tensor *t, char *note, size_t cap)
{
    if (!k->m || !t->candidate)
        return;
    for (size_t i = 0; i < k->m->n; i++) {
        const pn_kl_entry *e = &k->m->entries[i];
        if (strcmp(e->name, t->name) != 0)
            continue;
        size_t l = strlen(note);
        /* two standard errors: a gain smaller than that is not told from none */
        snprintf(note + l, cap - l, "%sKL gain %.4f \xc2\xb1 %.4f%s", l ? ", " : "", e->gain, e->se,
                 fabs(e->gain) < 2.0 * e->se ? " (within noise)" : "");
        return;
    }
}

static const pn_kl_entry *entry_of(const kl_cli *k, const char *name)
{
    for (size_t i = 0; k->m && i < k->m->n; i++)
        if (strcmp(k->m->entries[i].name, name) == 0)
            return &k->m->entries[i];
    return NULL;
}

void kl_cli_take_plan(kl_cli *k, const pn_plan *plan)
{
    if (!k->m || k->promoted)
        return;
    size_t len = 0;
    FILE *f = open_memstream(&k->promoted, &len);
    if (!f)
        return;
    k->gain_sum = 0.0;
    k->n_promoted = 0;
    for (size_t rank = 0; rank < plan->n_promoted; rank++)
        for (size_t i = 0; i < plan->n_tensors; i++) {
            const pn_plan_tensor *t = &plan->tensors[i];
            const pn_kl_entry *e =
                t->promoted && t->promote_rank == (int)rank ? entry_of(k, t->name) : NULL;
            if (!e)
                continue;
            fprintf(f, "  #%zu ", rank + 1);
            pn_fput_safe(f, t->name);
            fprintf(f, ": KL gain %.4f \xc2\xb1 %.4f%s, %llu bytes more\n", e->gain, e->se,
                    fabs(e->gain) < 2.0 * e->se ? " (within noise)" : "",
                    (unsigned long long)e->extra_bytes);
            k->gain_sum += e->gain;
            k->n_promoted++;
        }
    fclose(f);
}

void kl_cli_print_promoted(const kl_cli *k, bool quiet)
{
    if (!k->m || !k->promoted || quiet)
        return;
    printf("promoted by KL gain (base %s %.4f \xc2\xb1 %.4f on %zu positions; the gains add up "
           "to %.4f):\n%s",
           k->m->params.base_label, k->m->kl_base, k->m->kl_base_se, k->m->n_positions, k->gain_sum,
           k->promoted);
}

int kl_cli_judge(kl_cli *k, const pn_quantize_opts *o, char **envp, volatile sig_atomic_t *cancel)
{
    if (!k->judge || !k->m)
        return 0;
    pn_compare_opts c;
    compare_opts(k, o, envp, cancel, &c);
    c.source_path = o->src_path;
    const char *files[1] = { o->dst_path };
    c.pn_paths = files;
    c.n_pn = 1;
    c.decode_type = k->m->params.decode_type;
    pn_compare_report rep;
    pn_error err;
    pn_error_clear(&err);
    pn_status st = pn_compare_run(&c, &rep, &err);
    if (st != PN_OK) {
        fprintf(stderr, "pn-quantize: error: --judge: ");
        pn_fput_safe(stderr, err.msg);
        fputc('\n', stderr);
        return pn_cli_exit_status_signal(st, cancel ? *cancel : 0);
    }
    double sum = k->gain_sum;
    size_t n = k->n_promoted;
    printf("judged on the calibration text (%zu positions): this mix KL %.4f \xc2\xb1 %.4f, the "
           "base %s %.4f \xc2\xb1 %.4f; the %zu promotions' single gains add up to %.4f "
           "(predicting %.4f)\n",
           rep.n_positions, rep.files[0].kl_mean, rep.files[0].kl_se, k->m->params.base_label,
           k->m->kl_base, k->m->kl_base_se, n, sum, k->m->kl_base - sum);
    pn_compare_report_free(&rep);
    return 0;
}
