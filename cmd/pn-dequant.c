/* pn-dequant: PN GGUF -> float GGUF that stock llama.cpp loads. Parses
 * options and prints; the work is pn_dequant_file (dequant/dequant.h). */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cli.h"
#include "common/text.h"
#include "dequant/dequant.h"
#include "quant/types.h"

typedef struct progress_state {
    pn_cli_meter meter;
    const char *out; /* OUT, named in the line */
} progress_state;

/* The tensor data bytes written, through the one reporter (cli.h). */
static void on_progress(void *ctx, uint64_t done, uint64_t total)
{
    progress_state *ps = ctx;
    pn_cli_meter_show(&ps->meter, "decoding", NULL, 0, 0, ps->out, (double)done / 1e6,
                      (double)total / 1e6, "MB");
}

/* What pn_cli_next returns for each option. */
enum {
    OPT_TYPE = 256,
    OPT_KEEP,
    OPT_THREADS,
    OPT_FORCE,
    OPT_QUIET,
    OPT_VERSION,
    OPT_PROGRESS,
    OPT_SPLIT_SIZE,
    OPT_SPLIT_TENSORS,
    OPT_KEEP_SPLIT
};

static const pn_cli_option options[] = {
    { "type", required_argument, OPT_TYPE,
      "  --type f32|f16|bf16  type of the decoded tensors (default f32)\n" },
    { "keep-rotation", no_argument, OPT_KEEP,
      "  --keep-rotation      leave PN tensors in the rotated domain (for experiments:\n"
      "                       a model run on them needs rotated activations)\n" },
    { "split-max-size", required_argument, OPT_SPLIT_SIZE,
      "  --split-max-size SIZE  write OUT as a split set, as llama.cpp's gguf-split\n"
      "                       does (a decoded 27 B model is over the hubs' 50 GB per\n"
      "                       file): NAME.gguf becomes NAME-00001-of-0000N.gguf ...\n"
      "                       beside it, each split at most SIZE of tensor data (50G,\n"
      "                       500M as gguf-split takes them, or 48GiB, 2.5GB)\n" },
    { "split-max-tensors", required_argument, OPT_SPLIT_TENSORS,
      "  --split-max-tensors N  the same, at most N tensors per split\n" },
    { "keep-split", no_argument, OPT_KEEP_SPLIT,
      "  --keep-split         split OUT the way IN is split (IN may be any file of a\n"
      "                       split set, with or without this option)\n" },
    { "threads", required_argument, OPT_THREADS,
      "  --threads N          worker threads (default: all cores)\n" },
    { "progress", no_argument, OPT_PROGRESS,
      "  --progress           progress on stderr even when it is not a terminal (on a\n"
      "                       terminal it is shown unless --quiet)\n" },
    { "force", no_argument, OPT_FORCE, "  --force              replace an existing OUT\n" },
    { "quiet", no_argument, OPT_QUIET,
      "  --quiet              print nothing on success, no progress and no notes\n" },
    { "help", no_argument, 'h', "  -h, --help           this text\n" },
    { "version", no_argument, OPT_VERSION, "  --version            the version\n" },
    { NULL, 0, 0, NULL },
};

static const pn_cli_program program = {
    "pn-dequant",
    "usage: pn-dequant [options] IN.gguf OUT.gguf\n"
    "\n"
    "Decodes every quantized tensor of IN (pn3t/pn4t with the Hadamard rotation\n"
    "undone, q8_0, q4_K, q3_K, f16, bf16) into a float GGUF that stock llama.cpp\n"
    "tools load. f32 tensors are copied. Keys are kept, except that pn.X becomes\n"
    "pn_decoded.X, general.quantization_version is removed and general.file_type\n"
    "names the float type. OUT is written under a temporary name beside itself,\n"
    "re-read, then renamed into place; on any error or signal nothing is left there.\n"
    "\n"
    "options:\n",
    options,
    "\n"
    "exit status: 0 written, 1 what the files hold (message on stderr), 2 the command\n"
    "line itself, 128+N signal N (130 SIGINT, 143 SIGTERM, 129 SIGHUP)\n",
};

int main(int argc, char **argv)
{
    pn_dequant_opts o;
    pn_dequant_opts_init(&o);
    bool quiet = false, progress = false;
    const char *why;
    int c;
    while ((c = pn_cli_next(&program, argc, argv)) != -1) {
        switch (c) {
        case OPT_TYPE:
            o.out_type = pn_float_type_from_name(optarg);
            if (o.out_type < 0) {
                fprintf(stderr, "pn-dequant: error: --type: '%s' is not f32, f16 or bf16\n",
                        optarg);
                return 2;
            }
            break;
        case OPT_KEEP: o.keep_rotation = true; break;
        case OPT_KEEP_SPLIT: o.keep_split = true; break;
        case OPT_SPLIT_SIZE:
        case OPT_SPLIT_TENSORS: {
            gguf_split_mode mode =
                c == OPT_SPLIT_SIZE ? GGUF_SPLIT_MAX_SIZE : GGUF_SPLIT_MAX_TENSORS;
            if (o.split.mode != GGUF_SPLIT_NONE && o.split.mode != mode) {
                fprintf(
                    stderr,
                    "pn-dequant: error: give --split-max-size or --split-max-tensors, not both\n");
                return 2;
            }
            o.split.mode = mode;
            const char *bad = "";
            if (c == OPT_SPLIT_SIZE) {
                o.split.max = pn_cli_split_size(optarg, &bad);
            } else {
                char *end;
                errno = 0;
                long long v = strtoll(optarg, &end, 10);
                o.split.max =
                    errno || end == optarg || *end || v < 1 || v > (1LL << 31) ? 0 : (uint64_t)v;
                bad = "expected an integer in [1, 2147483648]";
            }
            if (!o.split.max) {
                fprintf(stderr, "pn-dequant: error: %s: '",
                        c == OPT_SPLIT_SIZE ? "--split-max-size" : "--split-max-tensors");
                pn_fput_safe(stderr, optarg);
                fprintf(stderr, "': %s\n", bad);
                return 2;
            }
            break;
        }
        case OPT_FORCE: o.force = true; break;
        case OPT_QUIET: quiet = true; break;
        case OPT_PROGRESS: progress = true; break;
        case OPT_THREADS:
            if (!pn_cli_threads("pn-dequant", optarg, &o.threads))
                return 2;
            break;
        case 'h': return pn_cli_help(&program, 1);
        case OPT_VERSION: printf("pn-dequant %s\n", PN_VERSION); return 0;
        default: return pn_cli_refuse_option(&program, argv);
        }
    }
    if (o.keep_split && o.split.mode != GGUF_SPLIT_NONE) {
        fprintf(stderr, "pn-dequant: error: --keep-split follows IN's splits; do not give "
                        "--split-max-size or --split-max-tensors too\n");
        return 2;
    }
    if (!pn_cli_positional("pn-dequant", argc, argv, 2, 2, "IN.gguf OUT.gguf"))
        return 2;
    pn_cli_cap_threads("pn-dequant", "--threads", &o.threads, quiet);

    volatile sig_atomic_t *cancel = pn_cli_trap_signals();
    o.cancel = cancel;
    progress_state ps = { .out = argv[optind + 1] };
    pn_cli_meter_open(&ps.meter, quiet, progress);
    if (ps.meter.on) {
        o.progress = on_progress;
        o.progress_ctx = &ps;
    }

    pn_dequant_stats s;
    pn_error err = { 0 };
    pn_status st = pn_dequant_file(argv[optind], argv[optind + 1], &o, &s, &err);
    pn_cli_meter_end(&ps.meter);
    if (st) {
        pn_cli_error("pn-dequant", err.msg);
        return pn_cli_exit_status_signal(st, *cancel);
    }
    if (s.rotation_key_missing) {
        fputs("pn-dequant: warning: ", stderr);
        pn_fput_safe(stderr, argv[optind]);
        fputs(" has PN tensors but no pn.rotation.type; they were decoded without "
              "un-rotating\n",
              stderr);
    }
    if (!quiet) {
        pn_fput_safe(stdout, argv[optind + 1]);
        printf(": %zu tensors (%zu PN%s, %zu other decoded, %zu copied), %llu -> %llu data "
               "bytes in %.2f s\n",
               s.n_tensors, s.n_pn,
               s.n_pn == 0         ? ""
               : s.rotation_undone ? ", rotation undone"
               : o.keep_rotation   ? ", rotation kept"
                                   : ", no rotation",
               s.n_stock, s.n_copied, (unsigned long long)s.bytes_in,
               (unsigned long long)s.bytes_out, s.seconds);
        if (s.n_files > 1)
            printf("  written as %zu splits beside it, %llu bytes in all\n", s.n_files,
                   (unsigned long long)s.file_bytes);
    }
    if (pn_cli_finish_stdout(&why) != 0) {
        /* OUT is complete and in place: say so rather than pretend it is not */
        fputs("pn-dequant: error: ", stderr);
        pn_fput_safe(stderr, argv[optind + 1]);
        fprintf(stderr,
                " was written, but the summary could not be written to standard "
                "output: %s\n",
                why);
        return 1;
    }
    return 0;
}
