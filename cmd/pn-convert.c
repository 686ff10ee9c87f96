/* pn-convert: a Hugging Face checkpoint (Qwen3.5) -> the GGUF that llama.cpp's
 * convert_hf_to_gguf.py writes from it. Parses options and prints; the work
 * is pn_convert (convert/convert.h). */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cli.h"
#include "common/text.h"
#include "hf/hf.h"
#include "convert/convert.h"
#include "quant/types.h"

static const char usage[] =
    "usage: pn-convert [options] SRC OUT.gguf\n"
    "\n"
    "Converts a Hugging Face checkpoint of the Qwen3.5 family (Qwen3_5ForCausalLM,\n"
    "Qwen3_5ForConditionalGeneration) to GGUF exactly as llama.cpp's\n"
    "convert_hf_to_gguf.py does: the same tensor data byte for byte, the same keys\n"
    "except general.* (and the record pn.header.* that proves them, which\n"
    "--no-header-hash leaves out). SRC is the model folder (a download or a\n"
    "hub-cache snapshot), its config.json, its model.safetensors.index.json, or a\n"
    "single model.safetensors. Vision tensors are dropped; the MTP layer is kept\n"
    "unless --no-mtp. F16\n"
    "checkpoints are refused (see docs/hf.md). OUT is written under a temporary\n"
    "name, read back, then put in place; on any error nothing is left there.\n"
    "\n"
    "options:\n"
    "  --outtype bf16|f16|f32|auto  type of the weights (default auto: bf16 for a\n"
    "                       bf16 checkpoint, else f16, as the converter chooses)\n"
    "  --no-mtp             drop the MTP layer (the converter's --no-mtp)\n"
    "  --tokenizer-pre NAME tokenizer.ggml.pre when the pre-tokenizer pattern of\n"
    "                       tokenizer.json is not one pn-convert knows\n"
    "  --split-max-size SIZE  write OUT as a split set, as llama.cpp's gguf-split\n"
    "                       does, each split at most SIZE of tensor data (50G,\n"
    "                       500M as gguf-split takes them, or 48GiB, 2.5GB)\n"
    "  --split-max-tensors N  the same, at most N tensors per split\n"
    "  --no-header-hash     write exactly the converter's keys: without the record\n"
    "                       pn.header.* that proves OUT's keys (docs/format.md)\n"
    "  --force              replace an existing OUT (never a file SRC is read from:\n"
    "                       its config.json, index, shards or tokenizer files)\n"
    "  --dry-run            list the tensors OUT would hold (GGUF name, type, shape,\n"
    "                       bytes) and the total; read no tensor data, write nothing;\n"
    "                       refuse what the real run would refuse\n"
    "  --threads N          accepted as llama.cpp's tools take it; the conversion is\n"
    "                       one stream (read, convert, write a chunk at a time) whose\n"
    "                       speed is the disk's, so it uses one thread whatever N is\n"
    "  --progress           progress on stderr even when it is not a terminal (on a\n"
    "                       terminal it is shown unless --quiet)\n"
    "  --quiet              print nothing on success, no progress and no notes\n"
    "  -h, --help           this text\n"
    "  --version            the version\n"
    "\n"
    "exit status: 0 written, 1 what the files hold (message on stderr), 2 the\n"
    "command line itself, 128+N signal N (130 SIGINT, 143 SIGTERM, 129 SIGHUP)\n";

typedef struct progress_state {
    pn_cli_meter meter;
    double start;
} progress_state;

static void on_progress(void *user, size_t tensor, size_t n_tensors, const char *name,
                        uint64_t done, uint64_t total)
{
    progress_state *ps = user;
    double elapsed = pn_cli_now() - ps->start;
    if (pn_cli_meter_due(&ps->meter, elapsed, done >= total))
        pn_cli_meter_line(&ps->meter, "converting", "tensor", tensor + 1, n_tensors, name,
                          (double)done / 1e6, (double)total / 1e6, elapsed, "MB");
}

/* --dry-run: the tensors the real run would write, one line each, and the
 * total (the set's file bytes come from the planned set). */
static void print_tensors(const pn_hf_model *m)
{
    printf("%-48s %-5s %-20s %14s\n", "tensor", "type", "shape", "bytes");
    for (size_t i = 0; i < pn_hf_n_tensors(m); i++) {
        const pn_hf_tensor *t = pn_hf_tensor_at(m, i);
        char shape[96], name[200];
        int k = snprintf(shape, sizeof shape, "%lld", (long long)t->ne[0]);
        for (uint32_t d = 1; d < t->n_dims && k > 0 && (size_t)k < sizeof shape; d++)
            k += snprintf(shape + k, sizeof shape - (size_t)k, "x%lld", (long long)t->ne[d]);
        pn_safe_text(t->name, name, sizeof name);
        printf("%-48s %-5s %-20s %14llu\n", name, pn_type_name(t->type), shape,
               (unsigned long long)(t->n_rows * t->row_elems * pn_hf_type_size(t->type)));
    }
}

static uint64_t tensor_bytes_total(const pn_hf_model *m)
{
    uint64_t n = 0;
    for (size_t i = 0; i < pn_hf_n_tensors(m); i++) {
        const pn_hf_tensor *t = pn_hf_tensor_at(m, i);
        n += t->n_rows * t->row_elems * pn_hf_type_size(t->type);
    }
    return n;
}

static int convert(const char *src, const char *dst, const pn_hf_opts *ho, pn_convert_opts *o,
                   bool quiet, bool force_progress);

int main(int argc, char **argv)
{
    pn_hf_opts ho = { 0 };
    pn_convert_opts co = { 0 };
    bool quiet = false, force_progress = false;
    int threads = 0;
    enum {
        OPT_OUTTYPE = 256,
        OPT_NO_MTP,
        OPT_PRE,
        OPT_SPLIT_SIZE,
        OPT_SPLIT_TENSORS,
        OPT_FORCE,
        OPT_NO_HEADER_HASH,
        OPT_QUIET,
        OPT_DRY_RUN,
        OPT_THREADS,
        OPT_PROGRESS,
        OPT_VERSION
    };
    static const struct option longopts[] = {
        { "outtype", required_argument, NULL, OPT_OUTTYPE },
        { "no-mtp", no_argument, NULL, OPT_NO_MTP },
        { "tokenizer-pre", required_argument, NULL, OPT_PRE },
        { "split-max-size", required_argument, NULL, OPT_SPLIT_SIZE },
        { "split-max-tensors", required_argument, NULL, OPT_SPLIT_TENSORS },
        { "force", no_argument, NULL, OPT_FORCE },
        { "no-header-hash", no_argument, NULL, OPT_NO_HEADER_HASH },
        { "quiet", no_argument, NULL, OPT_QUIET },
        { "dry-run", no_argument, NULL, OPT_DRY_RUN },
        { "threads", required_argument, NULL, OPT_THREADS },
        { "progress", no_argument, NULL, OPT_PROGRESS },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, OPT_VERSION },
        { NULL, 0, NULL, 0 },
    };
    int c;
    opterr = 0; /* one message, ours */
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_OUTTYPE:
            if (pn_float_type_from_name(optarg) == PN_TYPE_BF16)
                ho.outtype = PN_HF_OUT_BF16;
            else if (pn_float_type_from_name(optarg) == PN_TYPE_F16)
                ho.outtype = PN_HF_OUT_F16;
            else if (pn_float_type_from_name(optarg) == PN_TYPE_F32)
                ho.outtype = PN_HF_OUT_F32;
            else if (strcmp(optarg, "auto") == 0)
                ho.outtype = PN_HF_OUT_AUTO;
            else {
                fprintf(stderr, "pn-convert: error: --outtype: '");
                pn_fput_safe(stderr, optarg);
                fprintf(stderr, "' is not bf16, f16, f32 or auto\n");
                return 2;
            }
            break;
        case OPT_NO_MTP: ho.no_mtp = true; break;
        case OPT_PRE: ho.tokenizer_pre = optarg; break;
        case OPT_SPLIT_SIZE:
        case OPT_SPLIT_TENSORS: {
            gguf_split_mode mode =
                c == OPT_SPLIT_SIZE ? GGUF_SPLIT_MAX_SIZE : GGUF_SPLIT_MAX_TENSORS;
            if (co.split.mode != GGUF_SPLIT_NONE && co.split.mode != mode) {
                fprintf(
                    stderr,
                    "pn-convert: error: give --split-max-size or --split-max-tensors, not both\n");
                return 2;
            }
            co.split.mode = mode;
            const char *bad = "expected a whole number of tensors from 1";
            if (c == OPT_SPLIT_SIZE) {
                co.split.max = pn_cli_split_size(optarg, &bad);
            } else {
                char *end;
                errno = 0;
                long long v = strtoll(optarg, &end, 10);
                co.split.max =
                    errno || end == optarg || *end || v < 1 || v > (1LL << 31) ? 0 : (uint64_t)v;
            }
            if (!co.split.max) {
                fprintf(stderr, "pn-convert: error: %s: '",
                        c == OPT_SPLIT_SIZE ? "--split-max-size" : "--split-max-tensors");
                pn_fput_safe(stderr, optarg);
                fprintf(stderr, "': %s\n", bad);
                return 2;
            }
            break;
        }
        case OPT_FORCE: co.force = true; break;
        case OPT_NO_HEADER_HASH: co.no_header_hash = true; break;
        case OPT_QUIET: quiet = true; break;
        case OPT_DRY_RUN: co.dry_run = true; break;
        case OPT_PROGRESS: force_progress = true; break;
        case OPT_THREADS:
            if (!pn_cli_threads("pn-convert", optarg, &threads))
                return 2;
            break;
        case 'h': fputs(usage, stdout); return 0;
        case OPT_VERSION: printf("pn-convert %s\n", PN_VERSION); return 0;
        default:
            fputs("pn-convert: error: option '", stderr);
            pn_fput_safe(stderr, argv[optind - 1]);
            fputs("' needs a value or is unknown\n", stderr);
            return pn_cli_try_help("pn-convert");
        }
    }
    if (!pn_cli_positional("pn-convert", argc, argv, 2, 2, "SRC OUT.gguf"))
        return 2;
    pn_cli_cap_threads("pn-convert", "--threads", &threads, quiet);
    return convert(argv[optind], argv[optind + 1], &ho, &co, quiet, force_progress);
}

/* The run after the options: the folder opened, converted (or, on a dry
 * run, listed and its targets checked), what happened said. */
static int convert(const char *src, const char *dst, const pn_hf_opts *ho, pn_convert_opts *o,
                   bool quiet, bool force_progress)
{
    pn_convert_opts co = *o;
    progress_state ps;
    pn_cli_meter_init(&ps.meter);
    ps.start = pn_cli_now();
    if (!quiet && !co.dry_run && (ps.meter.tty || force_progress)) {
        co.progress = on_progress;
        co.user = &ps;
    }
    volatile sig_atomic_t *cancel = pn_cli_trap_signals();
    co.cancel = cancel;

    pn_error err = { 0 };
    pn_hf_model *m = NULL;
    pn_status st = pn_hf_open(src, ho, &m, &err);
    pn_convert_result res = { 0 };
    /* a dry run refuses what the real run refuses (an OUT there without
     * --force), before it lists anything */
    if (st == PN_OK)
        st = pn_convert(m, src, dst, &co, &res, &err);
    if (st == PN_OK && co.dry_run)
        print_tensors(m);
    pn_cli_meter_end(&ps.meter);
    if (st != PN_OK) {
        pn_cli_error("pn-convert", err.msg);
        if (!co.dry_run && st == PN_ERR_INTERRUPTED) {
            fputs("pn-convert: interrupted: nothing was written to ", stderr);
            pn_fput_safe(stderr, dst);
            fputs("; what was there is as it was\n", stderr);
        }
        pn_hf_close(m);
        return pn_cli_exit_status_signal(st, *cancel);
    }
    if (co.dry_run) {
        printf("total: %zu tensors, %llu bytes of tensor data, %llu bytes in %zu file%s "
               "(dry run: nothing written)\n",
               pn_hf_n_tensors(m), (unsigned long long)tensor_bytes_total(m),
               (unsigned long long)res.file_bytes, res.n_files, res.n_files == 1 ? "" : "s");
    } else if (!quiet) {
        printf("pn-convert: ");
        pn_fput_safe(stdout, dst);
        printf(": %zu tensors", pn_hf_n_tensors(m));
        if (res.n_files > 1)
            printf(", written as %zu splits beside it", res.n_files);
        printf("\n");
    }
    pn_hf_close(m);
    const char *why;
    if (pn_cli_finish_stdout(&why) != 0) {
        fprintf(stderr, "pn-convert: error: standard output: %s\n", why);
        return 1;
    }
    return 0;
}
