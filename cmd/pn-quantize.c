/* pn-quantize: float GGUF -> PN GGUF. Parses options, prints progress; the
 * work is pn_quantize_file (pipeline/quantize.h). */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/text.h"
#include "mix/plan.h"
#include "mix/size.h"
#include "pipeline/quantize.h"
#include "quant/types.h"

static volatile sig_atomic_t g_cancel = 0;

static void on_signal(int sig)
{
    (void)sig;
    g_cancel = 1;
}

static const char usage[] =
    "usage: pn-quantize [options] SRC.gguf DST.gguf\n"
    "\n"
    "Quantizes a float GGUF (F32/F16/BF16) to a PN GGUF: rotates the weights that\n"
    "become pn3t/pn4t, assigns every tensor a type by a mix recipe, runs the\n"
    "36-candidate scale search, writes DST beside itself under a temporary name,\n"
    "re-reads and validates it, then renames it into place. On any error or signal\n"
    "nothing is left at DST; SRC is never modified.\n"
    "\n"
    "options:\n"
    "  --recipe FILE           mix recipe (default: the built-in P0k+19,\n"
    "                          recipes/qwen3.8-27b-pn3.mix)\n"
    "  --promote N             number of pn3t -> pn4t promotions (overrides the recipe)\n"
    "  --promote-list FILE     promote exactly these tensor names, one per line\n"
    "  --measurement FILE      read the promotion measurement from FILE if it exists,\n"
    "                          else measure and save it there\n"
    "  --measure-rows N        rows sampled per tensor for the measurement (default 256)\n"
    "  --target-size SIZE      choose the number of promotions: the most (in measured\n"
    "                          order) whose file still fits SIZE (e.g. 12.5GiB, 13e9)\n"
    "  --rotation none|hadamard[:CAP]\n"
    "                          override the recipe's rotation (none is for experiments)\n"
    "  --threads N             worker threads (default: all cores)\n"
    "  --backend auto|cpu|cuda scale search on the CPU or a CUDA GPU (default auto:\n"
    "                          the GPU when one is usable, else the CPU)\n"
    "  --device N              CUDA device index (default 0)\n"
    "  --dry-run               print the plan (tensor, shape, types, bytes, totals) and\n"
    "                          exit without writing; DST may be omitted\n"
    "  --report FILE.json      per-tensor report: name, shape, source type, type, bytes,\n"
    "                          relative error, seconds; and the per-phase times\n"
    "  --force                 allow replacing an existing DST\n"
    "  --quiet                 no progress and no plan totals\n"
    "  --progress              progress on stderr even when it is not a terminal\n"
    "  -h, --help              this text\n"
    "  --version               the version\n"
    "\n"
    "exit status: 0 written and validated, 1 error (message on stderr), 2 usage,\n"
    "130 interrupted\n";

typedef struct cli_state {
    int show_progress;
    int tty;
    double last;
    int quiet;
    const char *report_path;
    char report_tmp[4096];     /* the report, written before the output's commit */
    char *totals;              /* the plan totals, printed after a successful run */
    size_t totals_len;
} cli_state;

/* ---- the plan table, the totals and the report (from the job's data) ---- */

static void format_shape(const pn_plan_tensor *t, char *buf, size_t size)
{
    int k = snprintf(buf, size, "%lld", (long long)t->ne[0]);
    for (uint32_t d = 1; d < t->n_dims && k > 0 && (size_t)k < size; d++)
        k += snprintf(buf + k, size - (size_t)k, "x%lld", (long long)t->ne[d]);
}

static const char *type_name(int type)
{
    const pn_type_traits *tt = pn_type_traits_get(type);
    return tt ? tt->name : "?";
}

static void print_plan_table(FILE *f, const pn_quantize_result *r)
{
    fprintf(f, "%-40s %-16s %-6s %-6s %14s  %s\n", "tensor", "shape", "source", "type", "bytes",
            "note");
    for (size_t i = 0; i < r->plan->n_tensors; i++) {
        const pn_plan_tensor *t = &r->plan->tensors[i];
        char shape[64];
        format_shape(t, shape, sizeof shape);
        char note[64] = "";
        if (t->promoted)
            snprintf(note, sizeof note, "promoted #%d", t->promote_rank + 1);
        if (t->rotated) {
            size_t l = strlen(note);
            snprintf(note + l, sizeof note - l, "%srotated B=%d", l ? ", " : "",
                     t->rotation_block);
        }
        fprintf(f, "%-40s %-16s %-6s %-6s %14llu  %s\n", t->name, shape, type_name(t->src_type),
                type_name(t->type), (unsigned long long)t->bytes, note);
    }
}

static void print_totals(FILE *f, const pn_quantize_result *r)
{
    pn_plan_totals tot;
    pn_plan_totals_get(r->plan, &tot);
    fprintf(f,
            "plan %s: %zu tensors, %llu weights; pn3t %zu, pn4t %zu (%zu promoted of "
            "%zu candidates)\n",
            r->mix_label, r->plan->n_tensors, (unsigned long long)tot.n_weights, tot.n_pn3t,
            tot.n_pn4t, tot.n_promoted, tot.n_candidates);
    fprintf(f,
            "file size %llu bytes (%.3f GiB, %.3f GB); %.4f bits/weight over PN tensors, "
            "%.4f over all weights\n",
            (unsigned long long)r->file_bytes, (double)r->file_bytes / 1073741824.0,
            (double)r->file_bytes / 1e9, tot.bpw_pn, tot.bpw_all);
}

static void write_report_json(FILE *f, const pn_quantize_result *r)
{
    const pn_quantize_stats *s = r->stats;
    fprintf(f, "{\n  \"source\": ");
    pn_json_put_str(f, r->src_path);
    fprintf(f, ",\n  \"output\": ");
    pn_json_put_str(f, r->dst_path ? r->dst_path : "");
    fprintf(f, ",\n  \"mix\": ");
    pn_json_put_str(f, s->mix_name);
    fprintf(f, ",\n  \"backend\": ");
    pn_json_put_str(f, s->backend);
    fprintf(f, ",\n  \"dry_run\": %s,\n  \"file_bytes\": %llu,\n  \"weights\": %llu,\n",
            r->dry_run ? "true" : "false", (unsigned long long)s->file_bytes,
            (unsigned long long)s->weights);
    fprintf(f,
            "  \"seconds\": {\"total\": %.3f, \"plan\": %.3f, \"measure\": %.3f, \"read\": %.3f, "
            "\"rotate\": %.3f, \"quantize\": %.3f, \"error\": %.3f, \"write\": %.3f, "
            "\"crc\": %.3f, \"validate\": %.3f},\n",
            s->t_total, s->t_plan, s->t_measure, s->t_read, s->t_rotate, s->t_quantize,
            s->t_error, s->t_write, s->t_crc, s->t_validate);
    fprintf(f, "  \"promoted\": [");
    int k = 0;
    for (size_t i = 0; i < r->plan->n_tensors; i++)
        if (r->plan->tensors[i].promoted) {
            fprintf(f, "%s", k++ ? ", " : "");
            pn_json_put_str(f, r->plan->tensors[i].name);
        }
    fprintf(f, "],\n  \"tensors\": [\n");
    for (size_t i = 0; i < r->plan->n_tensors; i++) {
        const pn_plan_tensor *t = &r->plan->tensors[i];
        fprintf(f, "    {\"name\": ");
        pn_json_put_str(f, t->name);
        fprintf(f, ", \"shape\": [");
        for (uint32_t d = 0; d < t->n_dims; d++)
            fprintf(f, "%s%lld", d ? ", " : "", (long long)t->ne[d]);
        fprintf(f, "], \"source_type\": \"%s\", \"type\": \"%s\", \"bytes\": %llu, ",
                type_name(t->src_type), type_name(t->type), (unsigned long long)t->bytes);
        fprintf(f, "\"rotation_block\": %d, \"promoted\": %s, ", t->rotation_block,
                t->promoted ? "true" : "false");
        if (r->dry_run)
            fprintf(f, "\"relative_error\": null, \"seconds\": null}");
        else
            fprintf(f, "\"relative_error\": %.6e, \"seconds\": %.3f}", r->rel_error[i],
                    r->seconds[i]);
        fprintf(f, "%s\n", i + 1 < r->plan->n_tensors ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
}

/* The job's result hook: the dry run's plan, the totals for later, and the
 * report under a temporary name (renamed once the output is in place). */
static pn_status on_result(const pn_quantize_result *r, void *user, pn_error *err)
{
    cli_state *s = user;
    if (r->dry_run) {
        print_plan_table(stdout, r);
        print_totals(stdout, r);
    } else if (!s->quiet) {
        FILE *m = open_memstream(&s->totals, &s->totals_len);
        if (m) {
            print_totals(m, r);
            fclose(m);
        }
    }
    if (!s->report_path)
        return PN_OK;
    snprintf(s->report_tmp, sizeof s->report_tmp, "%s.tmp", s->report_path);
    FILE *f = fopen(s->report_tmp, "w");
    if (!f)
        return pn_error_set(err, PN_ERR_IO, "%s: cannot write the report: %s", s->report_tmp,
                            strerror(errno));
    write_report_json(f, r);
    if (fclose(f) != 0) {
        unlink(s->report_tmp);
        return pn_error_set(err, PN_ERR_IO, "%s: cannot write the report: %s", s->report_path,
                            strerror(errno));
    }
    if (r->dry_run && rename(s->report_tmp, s->report_path) != 0) {
        unlink(s->report_tmp);
        return pn_error_set(err, PN_ERR_IO, "%s: cannot write the report: %s", s->report_path,
                            strerror(errno));
    }
    return PN_OK;
}

static const char *phase_name(int phase)
{
    switch (phase) {
    case PN_PHASE_MEASURE: return "measuring";
    case PN_PHASE_VALIDATE: return "validating";
    default: return "quantizing";
    }
}

static void on_progress(const pn_progress *p, void *user)
{
    cli_state *s = user;
    if (!s->show_progress)
        return;
    /* Redraw at most 4 times a second on a terminal, once every 5 s otherwise. */
    double every = s->tty ? 0.25 : 5.0;
    if (p->elapsed_s - s->last < every && p->weights_done < p->weights_total &&
        p->phase != PN_PHASE_VALIDATE)
        return;
    s->last = p->elapsed_s;
    double pct = p->weights_total ? 100.0 * (double)p->weights_done / (double)p->weights_total : 0;
    double rate = p->elapsed_s > 0 ? (double)p->weights_done / p->elapsed_s : 0;
    double eta = rate > 0 ? (double)(p->weights_total - p->weights_done) / rate : 0;
    fprintf(stderr, "%s%s tensor %zu/%zu %-36.36s %5.1f%%  %.3g w/s  ETA %.0fs%s",
            s->tty ? "\r" : "", phase_name(p->phase), p->tensor_index + (p->phase != PN_PHASE_VALIDATE),
            p->n_tensors, p->tensor_name ? p->tensor_name : "", pct, rate, eta,
            s->tty ? "\033[K" : "\n");
    fflush(stderr);
}

static void on_note(const char *msg, void *user)
{
    cli_state *s = user;
    fprintf(stderr, "%spn-quantize: %s\n", s->tty && s->show_progress ? "\r\033[K" : "", msg);
}

static int parse_int(const char *opt, const char *v, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "pn-quantize: %s: '%s' is not an integer in [%ld, %ld]\n", opt, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

int main(int argc, char **argv)
{
    pn_quantize_opts o;
    pn_quantize_opts_init(&o);
    cli_state cs;
    memset(&cs, 0, sizeof cs);
    cs.tty = isatty(2);
    cs.last = -1e9;
    int quiet = 0, force_progress = 0;
    enum { O_RECIPE = 256, O_PROMOTE, O_PLIST, O_MEAS, O_MROWS, O_TARGET, O_ROT, O_THREADS,
           O_BACKEND, O_DEVICE, O_DRY, O_REPORT, O_FORCE, O_QUIET, O_PROGRESS, O_VERSION };
    static const struct option lopts[] = {
        {"recipe", required_argument, 0, O_RECIPE},
        {"promote", required_argument, 0, O_PROMOTE},
        {"promote-list", required_argument, 0, O_PLIST},
        {"measurement", required_argument, 0, O_MEAS},
        {"measure-rows", required_argument, 0, O_MROWS},
        {"target-size", required_argument, 0, O_TARGET},
        {"rotation", required_argument, 0, O_ROT},
        {"threads", required_argument, 0, O_THREADS},
        {"backend", required_argument, 0, O_BACKEND},
        {"device", required_argument, 0, O_DEVICE},
        {"dry-run", no_argument, 0, O_DRY},
        {"report", required_argument, 0, O_REPORT},
        {"force", no_argument, 0, O_FORCE},
        {"quiet", no_argument, 0, O_QUIET},
        {"progress", no_argument, 0, O_PROGRESS},
        {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, O_VERSION},
        {0, 0, 0, 0},
    };
    int c;
    long v;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", lopts, NULL)) != -1) {
        switch (c) {
        case O_RECIPE: o.recipe_path = optarg; break;
        case O_PROMOTE:
            if (parse_int("--promote", optarg, 0, 1000000, &v)) return 2;
            o.promote = (int)v;
            break;
        case O_PLIST: o.promote_list_path = optarg; break;
        case O_MEAS: o.measurement_path = optarg; break;
        case O_MROWS:
            if (parse_int("--measure-rows", optarg, 1, 1L << 30, &v)) return 2;
            o.measure_rows = (uint64_t)v;
            break;
        case O_TARGET: {
            pn_error e;
            if (pn_parse_size(optarg, &o.target_size, &e) != PN_OK || o.target_size == 0) {
                fprintf(stderr, "pn-quantize: --target-size: '%s' is not a size (examples: "
                                "12.5GiB, 13000MB, 13e9)\n", optarg);
                return 2;
            }
            break;
        }
        case O_ROT:
            if (strcmp(optarg, "none") == 0)
                o.rotation_cap = 0;
            else if (strcmp(optarg, "hadamard") == 0)
                o.rotation_cap = 1024;
            else if (strncmp(optarg, "hadamard:", 9) == 0) {
                if (parse_int("--rotation hadamard:CAP", optarg + 9, 1, 4096, &v)) return 2;
                if (v & (v - 1)) {
                    fprintf(stderr, "pn-quantize: --rotation: the cap %ld is not a power of two\n", v);
                    return 2;
                }
                o.rotation_cap = (int)v;
            } else {
                fprintf(stderr, "pn-quantize: --rotation: expected none, hadamard or "
                                "hadamard:CAP, got '%s'\n", optarg);
                return 2;
            }
            break;
        case O_THREADS:
            if (parse_int("--threads", optarg, 1, 4096, &v)) return 2;
            o.threads = (int)v;
            break;
        case O_BACKEND:
            if (strcmp(optarg, "auto") == 0) o.backend = PN_BACKEND_AUTO;
            else if (strcmp(optarg, "cpu") == 0) o.backend = PN_BACKEND_CPU;
            else if (strcmp(optarg, "cuda") == 0) o.backend = PN_BACKEND_CUDA;
            else {
                fprintf(stderr, "pn-quantize: --backend: expected auto, cpu or cuda, got '%s'\n", optarg);
                return 2;
            }
            break;
        case O_DEVICE:
            if (parse_int("--device", optarg, 0, 1024, &v)) return 2;
            o.device = (int)v;
            break;
        case O_DRY: o.dry_run = true; break;
        case O_REPORT: cs.report_path = optarg; break;
        case O_FORCE: o.force = true; break;
        case O_QUIET: quiet = 1; break;
        case O_PROGRESS: force_progress = 1; break;
        case 'h': fputs(usage, stdout); return 0;
        case O_VERSION: printf("pn-quantize %s\n", PN_VERSION); return 0;
        default:
            if (optopt && optopt < 256)
                fprintf(stderr, "pn-quantize: unknown option -%c\n", optopt);
            else
                fprintf(stderr, "pn-quantize: unknown option or missing value: %s\n", argv[optind - 1]);
            fprintf(stderr, "Try 'pn-quantize --help'.\n");
            return 2;
        }
    }
    int npos = argc - optind;
    if (npos < 1 || npos > 2 || (npos == 1 && !o.dry_run)) {
        fprintf(stderr, "pn-quantize: expected SRC.gguf DST.gguf%s\nTry 'pn-quantize --help'.\n",
                o.dry_run ? " (DST is optional with --dry-run)" : "");
        return 2;
    }
    if (o.promote_list_path && (o.promote >= 0 || o.target_size)) {
        fprintf(stderr, "pn-quantize: --promote-list cannot be combined with --promote or --target-size\n");
        return 2;
    }
    if (o.target_size && o.promote >= 0) {
        fprintf(stderr, "pn-quantize: --target-size chooses the number of promotions; do not give --promote too\n");
        return 2;
    }
    o.src_path = argv[optind];
    o.dst_path = npos == 2 ? argv[optind + 1] : NULL;
    cs.show_progress = !quiet && (cs.tty || force_progress);
    o.progress = on_progress;
    o.note = on_note;
    o.user = &cs;
    o.cancel = &g_cancel;
    o.result = on_result;
    cs.quiet = quiet;

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    pn_quantize_stats stats;
    pn_error err;
    pn_error_clear(&err);
    pn_status st = pn_quantize_file(&o, &stats, &err);
    if (cs.show_progress && cs.tty)
        fprintf(stderr, "\r\033[K");
    if (st != PN_OK) {
        fprintf(stderr, "pn-quantize: error: %s\n", err.msg[0] ? err.msg : pn_strerror(st));
        if (o.dst_path && !o.dry_run)
            fprintf(stderr, "pn-quantize: nothing was written to %s\n", o.dst_path);
        return st == PN_ERR_INTERRUPTED ? 130 : (st == PN_ERR_USAGE ? 2 : 1);
    }
    if (cs.report_path && !o.dry_run && rename(cs.report_tmp, cs.report_path) != 0) {
        fprintf(stderr, "pn-quantize: error: %s: cannot write the report: %s\n", cs.report_path,
                strerror(errno));
        unlink(cs.report_tmp);
        return 1;
    }
    if (cs.totals)
        fputs(cs.totals, stdout);
    free(cs.totals);
    if (!o.dry_run && !quiet) {
        printf("wrote %s: %s, %llu bytes, %.1f s (plan %.1f, measure %.1f, read %.1f, rotate %.1f, "
               "quantize %.1f, error %.1f, write %.1f, crc %.1f, validate %.1f), backend %s\n",
               o.dst_path, stats.mix_name, (unsigned long long)stats.file_bytes, stats.t_total,
               stats.t_plan, stats.t_measure, stats.t_read, stats.t_rotate, stats.t_quantize,
               stats.t_error, stats.t_write, stats.t_crc, stats.t_validate, stats.backend);
    }
    return 0;
}
