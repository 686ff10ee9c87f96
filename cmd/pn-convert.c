/* pn-convert: a Hugging Face checkpoint (Qwen3.5) -> the GGUF that llama.cpp's
 * convert_hf_to_gguf.py writes from it. Parses options and prints; the work
 * is pn_convert (convert/convert.h). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cli.h"
#include "common/text.h"
#include "hf/hf.h"
#include "convert/convert.h"

static const char usage[] =
    "usage: pn-convert [options] SRC OUT.gguf\n"
    "\n"
    "Converts a Hugging Face checkpoint of the Qwen3.5 family (Qwen3_5ForCausalLM,\n"
    "Qwen3_5ForConditionalGeneration) to GGUF exactly as llama.cpp's\n"
    "convert_hf_to_gguf.py does: the same tensor data byte for byte, the same keys\n"
    "except general.*. SRC is the model folder (a download or a hub-cache snapshot),\n"
    "its config.json, its model.safetensors.index.json, or a single model.safetensors.\n"
    "Vision tensors are dropped; the MTP layer is kept unless --no-mtp. F16\n"
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
    "  --force              replace an existing OUT (never a file SRC is read from:\n"
    "                       its config.json, index, shards or tokenizer files)\n"
    "  --quiet              print nothing on success\n"
    "  -h, --help           this text\n"
    "  --version            the version\n"
    "\n"
    "exit status: 0 written, 1 what the files hold (message on stderr), 2 the\n"
    "command line itself\n";

int main(int argc, char **argv)
{
    pn_hf_opts ho = { 0 };
    pn_convert_opts co = { 0 };
    bool quiet = false;
    enum {
        OPT_OUTTYPE = 256,
        OPT_NO_MTP,
        OPT_PRE,
        OPT_SPLIT_SIZE,
        OPT_SPLIT_TENSORS,
        OPT_FORCE,
        OPT_QUIET,
        OPT_VERSION
    };
    static const struct option longopts[] = {
        { "outtype", required_argument, NULL, OPT_OUTTYPE },
        { "no-mtp", no_argument, NULL, OPT_NO_MTP },
        { "tokenizer-pre", required_argument, NULL, OPT_PRE },
        { "split-max-size", required_argument, NULL, OPT_SPLIT_SIZE },
        { "split-max-tensors", required_argument, NULL, OPT_SPLIT_TENSORS },
        { "force", no_argument, NULL, OPT_FORCE },
        { "quiet", no_argument, NULL, OPT_QUIET },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, OPT_VERSION },
        { NULL, 0, NULL, 0 },
    };
    int c;
    opterr = 0; /* one message, ours */
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_OUTTYPE:
            if (strcmp(optarg, "bf16") == 0)
                ho.outtype = PN_HF_OUT_BF16;
            else if (strcmp(optarg, "f16") == 0)
                ho.outtype = PN_HF_OUT_F16;
            else if (strcmp(optarg, "f32") == 0)
                ho.outtype = PN_HF_OUT_F32;
            else if (strcmp(optarg, "auto") == 0)
                ho.outtype = PN_HF_OUT_AUTO;
            else {
                fprintf(stderr, "pn-convert: --outtype: '");
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
                fprintf(stderr,
                        "pn-convert: give --split-max-size or --split-max-tensors, not both\n");
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
                fprintf(stderr, "pn-convert: %s: '",
                        c == OPT_SPLIT_SIZE ? "--split-max-size" : "--split-max-tensors");
                pn_fput_safe(stderr, optarg);
                fprintf(stderr, "': %s\n", bad);
                return 2;
            }
            break;
        }
        case OPT_FORCE: co.force = true; break;
        case OPT_QUIET: quiet = true; break;
        case 'h': fputs(usage, stdout); return 0;
        case OPT_VERSION: printf("pn-convert %s\n", PN_VERSION); return 0;
        default:
            fputs("pn-convert: option '", stderr);
            pn_fput_safe(stderr, argv[optind - 1]);
            fputs("' needs a value or is unknown\n", stderr);
            return pn_cli_try_help("pn-convert");
        }
    }
    if (!pn_cli_positional("pn-convert", argc, argv, 2, 2, "SRC OUT.gguf"))
        return 2;
    const char *src = argv[optind], *dst = argv[optind + 1];
    pn_error err = { 0 };
    pn_hf_model *m = NULL;
    pn_status st = pn_hf_open(src, &ho, &m, &err);
    size_t n_files = 0;
    if (st == PN_OK)
        st = pn_convert(m, src, dst, &co, &n_files, &err);
    if (st != PN_OK) {
        pn_cli_error("pn-convert", err.msg);
        pn_hf_close(m);
        return pn_cli_exit_status(st);
    }
    if (!quiet) {
        printf("pn-convert: ");
        pn_fput_safe(stdout, dst);
        printf(": %zu tensors", pn_hf_n_tensors(m));
        if (n_files > 1)
            printf(", written as %zu splits beside it", n_files);
        printf("\n");
    }
    pn_hf_close(m);
    const char *why;
    if (pn_cli_finish_stdout(&why) != 0) {
        fprintf(stderr, "pn-convert: standard output: %s\n", why);
        return 1;
    }
    return 0;
}
