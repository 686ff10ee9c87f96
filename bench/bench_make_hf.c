/* bench_make_hf: writes a synthetic Hugging Face checkpoint of the
 * Qwen3.5/3.8-27B shape (bench/bench-hf.sh): config.json, a byte-level
 * tokenizer, bf16 shards of at most 4 GiB with model.safetensors.index.json,
 * and one MTP layer. Values are deterministic pseudo-random bf16 of about
 * N(0, 0.02) (norms about 0, A_log about 0): the figures are for speed, not
 * for a model that means anything.
 *
 *   bench_make_hf DIR LAYERS [VOCAB]     (full width: hidden 5120, FFN 17408,
 *                                         24/4 heads of 256, linear 16/48 of 128)
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    char name[160];
    int nd;
    uint64_t shape[3];
    int kind;
} tdesc;
enum { K_W = 0, K_NORM, K_ALOG };

static tdesc *g_t;
static size_t g_n, g_cap;

static void add(const char *name, int kind, int nd, uint64_t a, uint64_t b, uint64_t c)
{
    if (g_n == g_cap) {
        g_cap = g_cap ? 2 * g_cap : 256;
        g_t = realloc(g_t, g_cap * sizeof *g_t);
        if (!g_t) {
            perror("realloc");
            exit(1);
        }
    }
    tdesc *t = &g_t[g_n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->nd = nd;
    t->shape[0] = a;
    t->shape[1] = b;
    t->shape[2] = c;
    t->kind = kind;
}

static uint64_t bytes_of(const tdesc *t)
{
    uint64_t n = 2;
    for (int d = 0; d < t->nd; d++)
        n *= t->shape[d];
    return n;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint16_t next_bf16(int kind)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    double u = (double)(rng >> 11) / 9007199254740992.0 - 0.5;
    float f = (float)(kind == K_W ? u * 0.07 : u * 0.2);
    uint32_t b;
    memcpy(&b, &f, 4);
    return (uint16_t)(b >> 16);
}

static void layer(const char *pre, int full, uint64_t E, uint64_t F)
{
    char n[160];
#define T(suffix, kind, nd, a, b, c)                                                               \
    (snprintf(n, sizeof n, "%s.%s", pre, suffix), add(n, kind, nd, a, b, c))
    T("input_layernorm.weight", K_NORM, 1, E, 0, 0);
    T("post_attention_layernorm.weight", K_NORM, 1, E, 0, 0);
    T("mlp.gate_proj.weight", K_W, 2, F, E, 0);
    T("mlp.up_proj.weight", K_W, 2, F, E, 0);
    T("mlp.down_proj.weight", K_W, 2, E, F, 0);
    if (full) {
        T("self_attn.q_proj.weight", K_W, 2, 24 * 256 * 2, E, 0);
        T("self_attn.k_proj.weight", K_W, 2, 4 * 256, E, 0);
        T("self_attn.v_proj.weight", K_W, 2, 4 * 256, E, 0);
        T("self_attn.o_proj.weight", K_W, 2, E, 24 * 256, 0);
        T("self_attn.q_norm.weight", K_NORM, 1, 256, 0, 0);
        T("self_attn.k_norm.weight", K_NORM, 1, 256, 0, 0);
    } else {
        T("linear_attn.in_proj_qkv.weight", K_W, 2, 2 * 16 * 128 + 48 * 128, E, 0);
        T("linear_attn.in_proj_z.weight", K_W, 2, 48 * 128, E, 0);
        T("linear_attn.in_proj_a.weight", K_W, 2, 48, E, 0);
        T("linear_attn.in_proj_b.weight", K_W, 2, 48, E, 0);
        T("linear_attn.A_log", K_ALOG, 1, 48, 0, 0);
        T("linear_attn.dt_bias", K_NORM, 1, 48, 0, 0);
        T("linear_attn.conv1d.weight", K_W, 3, 2 * 16 * 128 + 48 * 128, 1, 4);
        T("linear_attn.norm.weight", K_NORM, 1, 128, 0, 0);
        T("linear_attn.out_proj.weight", K_W, 2, E, 48 * 128, 0);
    }
#undef T
}

static FILE *open_w(const char *dir, const char *name)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f) {
        fprintf(stderr, "bench_make_hf: %s: %s\n", p, strerror(errno));
        exit(1);
    }
    return f;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_make_hf DIR LAYERS [VOCAB]\n");
        return 2;
    }
    const char *dir = argv[1];
    int L = atoi(argv[2]);
    uint64_t V = argc > 3 ? strtoull(argv[3], NULL, 10) : 248320;
    const uint64_t E = 5120, F = 17408;
    if (L < 1 || V < 300) {
        fprintf(stderr, "bench_make_hf: LAYERS >= 1, VOCAB >= 300\n");
        return 2;
    }
    mkdir(dir, 0755);
    add("model.language_model.embed_tokens.weight", K_W, 2, V, E, 0);
    add("lm_head.weight", K_W, 2, V, E, 0);
    add("model.language_model.norm.weight", K_NORM, 1, E, 0, 0);
    for (int i = 0; i < L; i++) {
        char pre[96];
        snprintf(pre, sizeof pre, "model.language_model.layers.%d", i);
        layer(pre, i % 4 == 3, E, F);
    }
    layer("mtp.layers.0", 1, E, F);
    add("mtp.fc.weight", K_W, 2, E, 2 * E, 0);
    add("mtp.pre_fc_norm_embedding.weight", K_NORM, 1, E, 0, 0);
    add("mtp.pre_fc_norm_hidden.weight", K_NORM, 1, E, 0, 0);
    add("mtp.norm.weight", K_NORM, 1, E, 0, 0);

    /* shards of at most 4 GiB of data */
    const uint64_t cap = (uint64_t)4 << 30;
    size_t *first = calloc(g_n + 1, sizeof *first);
    size_t n_sh = 0;
    uint64_t acc = 0;
    for (size_t i = 0; i < g_n; i++) {
        if (i == 0 || acc + bytes_of(&g_t[i]) > cap) {
            first[n_sh++] = i;
            acc = 0;
        }
        acc += bytes_of(&g_t[i]);
    }
    first[n_sh] = g_n;
    FILE *idx = open_w(dir, "model.safetensors.index.json");
    fprintf(idx, "{\"metadata\": {}, \"weight_map\": {");
    uint16_t *buf = malloc((size_t)1 << 24);
    for (size_t s = 0; s < n_sh; s++) {
        char sn[64];
        snprintf(sn, sizeof sn, "model-%05zu-of-%05zu.safetensors", s + 1, n_sh);
        /* header */
        size_t hcap = 1 << 20, hl = 0;
        char *h = malloc(hcap);
        hl += (size_t)snprintf(h + hl, hcap - hl, "{\"__metadata__\":{\"format\":\"pt\"}");
        uint64_t off = 0;
        for (size_t i = first[s]; i < first[s + 1]; i++) {
            const tdesc *t = &g_t[i];
            hl += (size_t)snprintf(h + hl, hcap - hl, ",\"%s\":{\"dtype\":\"BF16\",\"shape\":[",
                                   t->name);
            for (int d = 0; d < t->nd; d++)
                hl += (size_t)snprintf(h + hl, hcap - hl, "%s%" PRIu64, d ? "," : "", t->shape[d]);
            hl +=
                (size_t)snprintf(h + hl, hcap - hl, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}",
                                 off, off + bytes_of(t));
            off += bytes_of(t);
            fprintf(idx, "%s\"%s\": \"%s\"", (s || i) ? ", " : "", t->name, sn);
        }
        hl += (size_t)snprintf(h + hl, hcap - hl, "}");
        while (hl % 8)
            h[hl++] = ' ';
        FILE *f = open_w(dir, sn);
        uint64_t hl64 = hl;
        fwrite(&hl64, 8, 1, f);
        fwrite(h, 1, hl, f);
        free(h);
        for (size_t i = first[s]; i < first[s + 1]; i++) {
            uint64_t n = bytes_of(&g_t[i]) / 2;
            while (n) {
                size_t k = n < ((size_t)1 << 23) ? (size_t)n : ((size_t)1 << 23);
                for (size_t j = 0; j < k; j++)
                    buf[j] = next_bf16(g_t[i].kind);
                if (fwrite(buf, 2, k, f) != k) {
                    perror("fwrite");
                    return 1;
                }
                n -= k;
            }
        }
        if (fclose(f) != 0) {
            perror("fclose");
            return 1;
        }
    }
    fprintf(idx, "}}\n");
    fclose(idx);

    FILE *c = open_w(dir, "config.json");
    fprintf(c,
            "{\"architectures\": [\"Qwen3_5ForCausalLM\"], \"model_type\": \"qwen3_5_text\",\n"
            " \"vocab_size\": %" PRIu64 ", \"hidden_size\": %" PRIu64
            ", \"intermediate_size\": %" PRIu64 ",\n"
            " \"num_hidden_layers\": %d, \"num_attention_heads\": 24, \"num_key_value_heads\": 4,\n"
            " \"head_dim\": 256, \"max_position_embeddings\": 262144, \"rms_norm_eps\": 1e-06,\n"
            " \"full_attention_interval\": 4, \"linear_conv_kernel_dim\": 4,\n"
            " \"linear_key_head_dim\": 128, \"linear_value_head_dim\": 128,\n"
            " \"linear_num_key_heads\": 16, \"linear_num_value_heads\": 48,\n"
            " \"mtp_num_hidden_layers\": 1, \"eos_token_id\": 257, \"layer_types\": [",
            V, E, F, L);
    for (int i = 0; i < L; i++)
        fprintf(c, "%s\"%s\"", i ? ", " : "", i % 4 == 3 ? "full_attention" : "linear_attention");
    fprintf(c, "],\n \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 10000000, "
               "\"partial_rotary_factor\": 0.25, \"mrope_section\": [11, 11, 10]}}\n");
    fclose(c);

    /* a byte-level BPE vocabulary of 256 tokens and two added ones */
    FILE *t = open_w(dir, "tokenizer.json");
    fprintf(
        t,
        "{\"version\": \"1.0\", \"added_tokens\": [{\"id\": 256, \"content\": \"<|endoftext|>\", "
        "\"special\": true, \"normalized\": false}, {\"id\": 257, \"content\": \"<|im_end|>\", "
        "\"special\": true, \"normalized\": false}],\n \"pre_tokenizer\": {\"type\": \"Sequence\", "
        "\"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": \"%s\"}}]},\n"
        " \"model\": {\"type\": \"BPE\", \"vocab\": {",
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?[\\\\p{L}\\\\p{M}]+|\\\\p{N}| "
        "?[^\\\\s\\\\p{L}\\\\p{M}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|"
        "\\\\s+");
    for (int i = 0; i < 256; i++)
        fprintf(t, "%s\"<0x%02X>\": %d", i ? ", " : "", i, i);
    fprintf(t, "}, \"merges\": []}}\n");
    fclose(t);
    FILE *tc = open_w(dir, "tokenizer_config.json");
    fprintf(tc, "{\"eos_token\": \"<|im_end|>\", \"pad_token\": \"<|endoftext|>\", "
                "\"add_bos_token\": false}\n");
    fclose(tc);
    printf("bench_make_hf: %s: %d layers + MTP, %zu tensors in %zu shards\n", dir, L, g_n, n_sh);
    free(buf);
    free(first);
    return 0;
}
