/* pn-synth: the program's options, output and refusals. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gguf/gguf.h"
#include "mix/qwen38_shapes.h"
#include "quant/types.h"
#include "test_util.h"

static char *g_dir;
static void setup(void) { g_dir = tu_mkdtemp(); }
static void teardown(void)
{
    tu_rm_rf(g_dir);
    free(g_dir);
}

static int synth(const char *args, char **out, char **err)
{
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "%s/pn-synth %s", PN_BIN_DIR, args);
    return tu_run(cmd, out, err);
}

Test(synth_cli, help_names_every_option)
{
    char *out, *err;
    cr_assert_eq(synth("--help", &out, &err), 0);
    const char *opts[] = {"--layers", "--width-scale", "--vocab", "--dtype", "--seed", "--full",
                          "--threads", "--force"};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        cr_assert(strstr(out, opts[i]), "--help lacks %s", opts[i]);
    free(out);
    free(err);
}

Test(synth_cli, bad_options_are_usage_errors)
{
    char *out, *err;
    cr_assert_eq(synth("--dtype q4_K x.gguf", &out, &err), 2);
    cr_assert(strstr(err, "bf16, f16 or f32"), "%s", err);
    cr_assert_eq(synth("--width-scale 0 x.gguf", &out, &err), 2);
    cr_assert_eq(synth("--full --layers 2 x.gguf", &out, &err), 2);
    cr_assert_eq(synth("", &out, &err), 2);
    free(out);
    free(err);
}

Test(synth_cli, writes_the_qwen38_tensor_list_with_the_chosen_dtype, .init = setup,
     .fini = teardown)
{
    char args[8192], *out, *err, path[1024];
    snprintf(path, sizeof path, "%s/m.gguf", g_dir);
    snprintf(args, sizeof args, "--quiet --layers 4 --vocab 64 --dtype f16 %s", path);
    cr_assert_eq(synth(args, &out, &err), 0, "%s", err);
    gguf_reader *r;
    pn_error e;
    cr_assert_eq(gguf_reader_open(path, &r, &e), PN_OK, "%s", e.msg);
    pn_qwen38_config c = pn_qwen38_config_scaled(4, 4, 64);
    pn_tensor_desc *t;
    size_t n;
    cr_assert_eq(pn_qwen38_tensors(&c, &t, &n, &e), PN_OK);
    cr_assert_eq(gguf_reader_n_tensors(r), n);
    for (size_t i = 0; i < n; i++) {
        const gguf_tensor_info *ti = gguf_reader_tensor(r, i);
        cr_assert_str_eq(ti->name, t[i].name);
        cr_assert_eq(ti->n_dims, t[i].n_dims, "%s", ti->name);
        for (int k = 0; k < 4; k++)
            cr_assert_eq(ti->ne[k], t[i].ne[k], "%s", ti->name);
        cr_assert_eq(ti->type, t[i].n_dims == 1 ? PN_TYPE_F32 : PN_TYPE_F16, "%s", ti->name);
    }
    const gguf_kv *arch = gguf_reader_find_kv(r, "general.architecture");
    cr_assert(arch && gguf_str_eq(arch->v.str, "qwen35"));
    const gguf_kv *blocks = gguf_reader_find_kv(r, "qwen35.block_count");
    cr_assert(blocks && blocks->v.u64 == 4);
    free(t);
    gguf_reader_close(r);
    free(out);
    free(err);
}

Test(synth_cli, the_file_depends_on_the_seed_only_not_the_threads, .init = setup, .fini = teardown)
{
    char args[8192], *out, *err, a[1024], b[1024], c[1024];
    snprintf(a, sizeof a, "%s/a.gguf", g_dir);
    snprintf(b, sizeof b, "%s/b.gguf", g_dir);
    snprintf(c, sizeof c, "%s/c.gguf", g_dir);
    snprintf(args, sizeof args, "--quiet --layers 1 --vocab 64 --threads 1 %s", a);
    cr_assert_eq(synth(args, &out, &err), 0, "%s", err);
    snprintf(args, sizeof args, "--quiet --layers 1 --vocab 64 --threads 2 %s", b);
    cr_assert_eq(synth(args, &out, &err), 0, "%s", err);
    snprintf(args, sizeof args, "--quiet --layers 1 --vocab 64 --seed 2 %s", c);
    cr_assert_eq(synth(args, &out, &err), 0, "%s", err);
    size_t na, nb, nc;
    void *da = tu_read_file(a, &na), *db = tu_read_file(b, &nb), *dc = tu_read_file(c, &nc);
    cr_assert(na == nb && memcmp(da, db, na) == 0, "thread count changed the file");
    cr_assert(na == nc && memcmp(da, dc, na) != 0, "another seed gave the same file");
    free(da);
    free(db);
    free(dc);
    free(out);
    free(err);
}

Test(synth_cli, refuses_to_replace_a_file_without_force, .init = setup, .fini = teardown)
{
    char args[8192], *out, *err, path[1024];
    snprintf(path, sizeof path, "%s/m.gguf", g_dir);
    tu_write_file(path, "x", 1);
    snprintf(args, sizeof args, "--quiet --layers 1 --vocab 64 %s", path);
    cr_assert_eq(synth(args, &out, &err), 1);
    cr_assert(strstr(err, "exists") && strstr(err, "--force"), "%s", err);
    struct stat sb;
    stat(path, &sb);
    cr_assert_eq(sb.st_size, 1);
    free(out);
    free(err);
}
