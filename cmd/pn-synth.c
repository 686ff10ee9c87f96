/* pn-synth: writes a Qwen3.8-shaped float GGUF with generated weights. */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "cmd/cli.h"
#include "common/clock.h"
#include "synth/synth.h"
#include "quant/types.h"

/* What pn_cli_next returns for each option. */
enum {
    O_LAYERS = 256,
    O_WS,
    O_VOCAB,
    O_DTYPE,
    O_SEED,
    O_FULL,
    O_THREADS,
    O_FORCE,
    O_NO_HEADER_HASH,
    O_QUIET,
    O_PROGRESS,
    O_VERSION,
    O_SPLIT_SIZE,
    O_SPLIT_TENSORS,
    O_HF,
    O_MTP,
    O_SHARD_SIZE,
    O_PROFILE
};

static const pn_cli_option options[] = {
    { "layers", required_argument, O_LAYERS,
      "  --layers N          blocks (default 6; every 4th block is full attention; with\n"
      "                      fewer than 4 blocks the last one is)\n" },
    { "width-scale", required_argument, O_WS,
      "  --width-scale S     1..16: divide the widths of the 27 B model by S in whole\n"
      "                      heads (default 4); n_embd is a multiple of 1280 up to S 4\n"
      "                      (1280 at 3 and 4), of 320 above (320 at 16: the shipped\n"
      "                      recipe's q3_K/q4_K need a fallback there)\n" },
    { "vocab", required_argument, O_VOCAB,
      "  --vocab N           tokens (rows of token_embd and output; default 8192;\n"
      "                      at least 259 for all 256 byte tokens and 3 special ones)\n" },
    { "dtype", required_argument, O_DTYPE,
      "  --dtype bf16|f16|f32  type of the 2-D weights (default bf16; norms, every\n"
      "                      1-D tensor and ssm_conv1d are f32)\n" },
    { "seed", required_argument, O_SEED, "  --seed N            generator seed (default 1)\n" },
    { "profile", required_argument, O_PROFILE,
      "  --profile gaussian|trained  what the weights are like: gaussian (default:\n"
      "                      near-Gaussian, made-up outliers, norm gains near 1) or\n"
      "                      trained (the tails, outlier channels and unequal row and\n"
      "                      column scales published for trained models;\n"
      "                      docs/usage.md#the-trained-profile)\n" },
    { "full", no_argument, O_FULL,
      "  --full              the real Qwen3.8-27B shape: 64 layers, width scale 1,\n"
      "                      vocab 248320 (about 54 GB in BF16; free disk is checked)\n" },
    { "split-max-size", required_argument, O_SPLIT_SIZE,
      "  --split-max-size SIZE  write OUT as a split set, as llama.cpp's gguf-split\n"
      "                      does: OUT NAME.gguf becomes NAME-00001-of-0000N.gguf ...,\n"
      "                      each split at most SIZE of tensor data (50G, 500M as\n"
      "                      gguf-split takes them, or 48GiB, 2.5GB)\n" },
    { "split-max-tensors", required_argument, O_SPLIT_TENSORS,
      "  --split-max-tensors N  the same, at most N tensors per split\n" },
    { "mtp", no_argument, O_MTP,
      "  --mtp               add an MTP layer: block LAYERS with the nextn.* tensors,\n"
      "                      qwen35.nextn_predict_layers 1 (block_count counts it), as\n"
      "                      llama.cpp's converter keeps it; mtp.* in the --hf form\n" },
    { "hf", no_argument, O_HF,
      "  --hf                write DIR, a Hugging Face checkpoint folder of the same\n"
      "                      model (Qwen3_5ForConditionalGeneration): config.json,\n"
      "                      safetensors shards with model.safetensors.index.json,\n"
      "                      tokenizer.json, tokenizer_config.json, and a few vision\n"
      "                      tensors; pn-convert DIR makes of it, tensor for tensor,\n"
      "                      the GGUF pn-synth writes with the same options (bf16 or\n"
      "                      f32; --outtype f32 for f32)\n" },
    { "shard-size", required_argument, O_SHARD_SIZE,
      "  --shard-size SIZE   with --hf: at most SIZE of tensor data per shard (as\n"
      "                      --split-max-size takes it; default 5G)\n" },
    { "threads", required_argument, O_THREADS,
      "  --threads N         worker threads (default: all cores)\n" },
    { "force", no_argument, O_FORCE, "  --force             replace an existing OUT\n" },
    { "no-header-hash", no_argument, O_NO_HEADER_HASH,
      "  --no-header-hash    write no header record (pn.header.*): the bytes of builds\n"
      "                      before it, as the golden models of tests/data were made\n" },
    { "progress", no_argument, O_PROGRESS,
      "  --progress          progress on stderr even when it is not a terminal (on a\n"
      "                      terminal it is shown unless --quiet)\n" },
    { "quiet", no_argument, O_QUIET,
      "  --quiet             print nothing on success, no progress and no notes\n" },
    { "help", no_argument, 'h', "  -h, --help          this text\n" },
    { "version", no_argument, O_VERSION, "  --version           the version\n" },
    { NULL, 0, 0, NULL },
};

static const pn_cli_program program = {
    "pn-synth",
    "usage: pn-synth [options] OUT.gguf\n"
    "       pn-synth --hf [options] DIR\n"
    "\n"
    "Writes a float GGUF with the Qwen3.8-27B tensor names and shapes (llama.cpp\n"
    "'qwen35' naming, general.architecture = qwen35) and generated weights:\n"
    "near-Gaussian (std 0.02) with 0.1% of entries x10 and 4 outlier columns x8,\n"
    "norms near 1. Every file is a complete qwen35 model that stock llama.cpp loads\n"
    "and runs: the hyperparameter keys its loader reads, consistent with the shapes,\n"
    "and a byte-level BPE tokenizer (gpt2) of --vocab tokens. The default is a small\n"
    "model that quantizes in seconds: 6 layers, width scale 4 (n_embd 1280),\n"
    "vocab 8192, BF16 (about 164 M weights).\n"
    "\n"
    "options:\n",
    options,
    "\n"
    "exit status: 0 written, 1 what the files hold (message on stderr), 2 the command\n"
    "line itself, 128+N signal N (130 SIGINT, 143 SIGTERM, 129 SIGHUP)\n",
};

typedef struct progress_state {
    pn_cli_meter meter;
    const char *path;
} progress_state;

/* The weights written, through the one reporter (cli.h). */
static void on_progress(uint64_t done, uint64_t total, void *user)
{
    progress_state *ps = user;
    pn_cli_meter_show(&ps->meter, "generating", NULL, 0, 0, ps->path, (double)done, (double)total,
                      "w");
}

/* The options that do not go together; false (after saying why) when
 * these do not. */
static bool combination_ok(bool full_with_shape, int hf, bool gguf_split, bool shard_size,
                           int dtype)
{
    if (full_with_shape) {
        fprintf(stderr, "pn-synth: error: --full is the 27 B shape; it takes no --layers, "
                        "--width-scale or --vocab\n");
        return false;
    }
    if (hf && gguf_split) {
        fprintf(stderr, "pn-synth: error: --hf writes shards (--shard-size), not GGUF splits\n");
        return false;
    }
    if (shard_size && !hf) {
        fprintf(
            stderr,
            "pn-synth: error: --shard-size is for --hf; a GGUF is split with --split-max-size\n");
        return false;
    }
    if (hf && dtype == PN_TYPE_F16) {
        fprintf(stderr,
                "pn-synth: error: --hf --dtype f16: llama.cpp's converter computes an f16 "
                "checkpoint in half precision and pn-convert refuses it; use bf16 or f32\n");
        return false;
    }
    return true;
}

/* False (after saying so) when the folder of path has less than bytes free. */
static bool space_ok(const char *path, uint64_t bytes)
{
    char *dup = strdup(path);
    struct statvfs vfs;
    bool ok = true;
    if (dup && statvfs(dirname(dup), &vfs) == 0) {
        uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
        if (avail < bytes) {
            fprintf(stderr,
                    "pn-synth: error: %s needs %llu bytes (%.2f GB) but its folder has %llu bytes "
                    "(%.2f GB) free\n",
                    path, (unsigned long long)bytes, bytes / 1e9, (unsigned long long)avail,
                    avail / 1e9);
            ok = false;
        }
    }
    free(dup);
    return ok;
}

static void print_wrote(const pn_synth_opts *o, int hf, size_t n_files, uint64_t bytes,
                        double seconds)
{
    printf("wrote ");
    if (hf)
        printf("%zu shard%s of ", n_files, n_files == 1 ? "" : "s");
    else if (n_files > 1)
        printf("%zu splits of ", n_files);
    printf("%s: %d layers%s, n_embd %lld, vocab %lld, %s%llu bytes in %.1f s\n", o->path,
           o->config.n_layers, o->config.n_mtp ? " and an MTP layer" : "",
           (long long)o->config.n_embd, (long long)o->config.n_vocab, hf ? "at most " : "",
           (unsigned long long)bytes, seconds);
}

/* --profile's value; -1 after the message. */
static int parse_profile(const char *v, pn_synth_profile *out)
{
    if (strcmp(v, "gaussian") == 0)
        *out = PN_SYNTH_GAUSSIAN;
    else if (strcmp(v, "trained") == 0)
        *out = PN_SYNTH_TRAINED;
    else {
        fprintf(stderr, "pn-synth: error: --profile: expected gaussian or trained, got '");
        pn_fput_safe(stderr, v);
        fprintf(stderr, "'\n");
        return -1;
    }
    return 0;
}

/* --dtype's value; -1 after the message. */
static int parse_dtype(const char *v, int *out)
{
    *out = pn_float_type_from_name(v);
    if (*out < 0) {
        fprintf(stderr, "pn-synth: error: --dtype: expected bf16, f16 or f32, got '%s'\n", v);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    long layers = -1, wscale = -1, vocab = -1, seed = 1, threads = 0;
    pn_synth_profile profile = PN_SYNTH_GAUSSIAN;
    int dtype = PN_TYPE_BF16, full = 0, force = 0, quiet = 0, hf = 0, mtp = 0, progress = 0,
        no_header_hash = 0;
    uint64_t shard_size = 0;
    gguf_split_limit split = { GGUF_SPLIT_NONE, 0 };
    int c;
    while ((c = pn_cli_next(&program, argc, argv)) != -1) {
        switch (c) {
        case O_LAYERS:
            if (!pn_cli_long("pn-synth", "--layers", optarg, 1, 4096, &layers))
                return 2;
            break;
        case O_WS:
            if (!pn_cli_long("pn-synth", "--width-scale", optarg, 1, 16, &wscale))
                return 2;
            break;
        case O_VOCAB:
            if (!pn_cli_long("pn-synth", "--vocab", optarg, 1, 1L << 24, &vocab))
                return 2;
            break;
        case O_PROFILE:
            if (parse_profile(optarg, &profile))
                return 2;
            break;
        case O_SEED:
            if (!pn_cli_long("pn-synth", "--seed", optarg, 0, __LONG_MAX__, &seed))
                return 2;
            break;
        case O_THREADS:
            if (!pn_cli_long("pn-synth", "--threads", optarg, 1, 4096, &threads))
                return 2;
            break;
        case O_DTYPE:
            if (parse_dtype(optarg, &dtype))
                return 2;
            break;
        case O_SPLIT_SIZE:
        case O_SPLIT_TENSORS: {
            gguf_split_mode mode = c == O_SPLIT_SIZE ? GGUF_SPLIT_MAX_SIZE : GGUF_SPLIT_MAX_TENSORS;
            if (split.mode != GGUF_SPLIT_NONE && split.mode != mode) {
                fprintf(
                    stderr,
                    "pn-synth: error: give --split-max-size or --split-max-tensors, not both\n");
                return 2;
            }
            split.mode = mode;
            if (c == O_SPLIT_SIZE) {
                if (!pn_cli_size("pn-synth", "--split-max-size", optarg, &split.max))
                    return 2;
            } else {
                long v;
                if (!pn_cli_long("pn-synth", "--split-max-tensors", optarg, 1, 1L << 31, &v))
                    return 2;
                split.max = (uint64_t)v;
            }
            break;
        }
        case O_SHARD_SIZE:
            if (!pn_cli_size("pn-synth", "--shard-size", optarg, &shard_size))
                return 2;
            break;
        case O_HF: hf = 1; break;
        case O_MTP: mtp = 1; break;
        case O_FULL: full = 1; break;
        case O_FORCE: force = 1; break;
        case O_NO_HEADER_HASH: no_header_hash = 1; break;
        case O_QUIET: quiet = 1; break;
        case O_PROGRESS: progress = 1; break;
        case 'h': pn_cli_usage(stdout, &program); return pn_cli_close_stdout("pn-synth");
        case O_VERSION: printf("pn-synth %s\n", PN_VERSION); return pn_cli_close_stdout("pn-synth");
        default: return pn_cli_refuse_option(&program, argv);
        }
    }
    if (!pn_cli_positional("pn-synth", argc, argv, 1, 1, hf ? "DIR" : "OUT.gguf"))
        return 2;
    if (!combination_ok(full && (layers > 0 || wscale > 0 || vocab > 0), hf,
                        split.mode != GGUF_SPLIT_NONE, shard_size != 0, dtype))
        return 2;
    pn_synth_opts o;
    memset(&o, 0, sizeof o);
    o.path = argv[optind];
    if (full) {
        o.config = pn_qwen38_config_full();
    } else {
        pn_qwen38_config d = pn_synth_default_config();
        o.config = pn_qwen38_config_narrow(wscale > 0 ? (int)wscale : 4,
                                           layers > 0 ? (int)layers : d.n_layers,
                                           vocab > 0 ? vocab : d.n_vocab);
    }
    o.config.weight_type = dtype;
    o.config.n_mtp = mtp;
    o.shard_size = shard_size;
    pn_error err;
    pn_error_clear(&err);
    if (pn_qwen38_llama_runnable(&o.config, &err) != PN_OK) {
        fprintf(stderr, "pn-synth: error: --layers %d: %s\n", o.config.n_layers, err.msg);
        return 2;
    }
    o.seed = (uint64_t)seed;
    o.profile = profile;
    o.force = force;
    o.no_header_hash = no_header_hash;
    o.split = split;
    o.threads = (int)threads;
    pn_cli_cap_threads("pn-synth", "--threads", &o.threads, quiet);
    progress_state ps = { .path = o.path }; /* off until pn_cli_meter_open below */
    o.progress = on_progress;
    o.user = &ps;

    struct stat sb;
    if (!hf && split.mode == GGUF_SPLIT_NONE && stat(o.path, &sb) == 0 && !force) {
        fprintf(stderr, "pn-synth: error: %s exists; use --force to replace it\n", o.path);
        return 1;
    }
    uint64_t bytes = 0;
    size_t n_files = 1;
    pn_status pst = hf ? pn_synth_hf_bytes(&o, &bytes, &n_files, &err)
                       : pn_synth_files(&o, &bytes, &n_files, &err);
    if (pst != PN_OK) {
        fprintf(stderr, "pn-synth: error: %s\n", err.msg);
        return pn_cli_exit_status(pst);
    }
    if (!space_ok(o.path, bytes))
        return 1;

    /* SIGINT, SIGTERM and SIGHUP cancel the write (its temporary files are
     * removed) */
    volatile sig_atomic_t *cancel = pn_cli_trap_signals();
    o.cancel = cancel;

    double t0 = pn_now_seconds();
    pn_cli_meter_open(&ps.meter, quiet, progress);
    pn_status st = hf ? pn_synth_write_hf(&o, &err) : pn_synth_write(&o, &err);
    pn_cli_meter_end(&ps.meter);
    if (st != PN_OK) {
        fprintf(stderr, "pn-synth: error: %s\n", err.msg[0] ? err.msg : pn_strerror(st));
        return pn_cli_exit_status_signal(st, *cancel);
    }
    if (!quiet)
        print_wrote(&o, hf, n_files, bytes, pn_now_seconds() - t0);
    return pn_cli_close_stdout("pn-synth");
}
