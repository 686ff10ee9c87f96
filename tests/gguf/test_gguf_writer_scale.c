/* The GGUF writer on very many keys and tensors: linear time, and its key
 * index agrees with a plain model under random sets and removals. */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/outfile_testing.h"
#include "gguf/gguf.h"
#include "gguf/gguf_testing.h"
#include "fixtures/gguf_bytes.h"
#include "fixtures/gguf_files.h"
#include "quant/types.h"
#include "test_util.h"

/* ------------------------------------------------------------------ */
/* Speed of opening (a measurement, not a timed assertion)             */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------ */
/* Time linear in the keys and tensors                                 */

/* The bound is generous: linear work takes well under a second; the
 * quadratic writer took minutes. */
#define LINEAR_BOUND_S 10.0

Test(gguf_writer_scale, two_hundred_thousand_keys_are_set_copied_and_written_in_linear_time)
{
    enum { N = 200000 };
    char *dir = tu_mkdtemp();
    char *a = tu_join(dir, "keys.gguf"), *b = tu_join(dir, "copy.gguf");
    char key[32];
    double t0 = now_s();
    gguf_writer *w = gguf_writer_new();
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof key, "key.%06d", i);
        cr_assert_eq(gguf_writer_set_u32(w, key, (uint32_t)i), PN_OK);
    }
    for (int i = 0; i < N; i += 2) { /* setting again replaces in place */
        snprintf(key, sizeof key, "key.%06d", i);
        cr_assert_eq(gguf_writer_set_u32(w, key, (uint32_t)i + 1000000u), PN_OK);
    }
    cr_assert_eq(gguf_writer_n_kv(w), N, "a key set twice is one key");
    gf_finish(w, a);
    gf_close_and_commit(w);
    gguf_writer_free(w);
    double t_set = now_s() - t0;

    gguf_reader *r = gf_open_file(a);
    cr_assert_eq(gguf_reader_n_kv(r), N);
    t0 = now_s();
    w = gguf_writer_new();
    for (size_t i = 0; i < N; i++)
        cr_assert_eq(gguf_writer_copy_kv(w, gguf_reader_kv(r, i)), PN_OK);
    for (size_t i = 0; i < N; i++) /* copying again is a set of each again */
        cr_assert_eq(gguf_writer_copy_kv(w, gguf_reader_kv(r, i)), PN_OK);
    for (int i = 0; i < N; i += 3) {
        snprintf(key, sizeof key, "key.%06d", i);
        gguf_writer_remove_kv(w, key);
    }
    gf_finish(w, b);
    gf_close_and_commit(w);
    gguf_writer_free(w);
    double t_copy = now_s() - t0;
    gguf_reader_close(r);
    cr_log_info("200k keys: set and write %.2f s, copy, remove a third and write %.2f s", t_set,
                t_copy);
    cr_assert_lt(t_set, LINEAR_BOUND_S, "setting 200k keys took %.1f s", t_set);
    cr_assert_lt(t_copy, LINEAR_BOUND_S, "copying 200k keys took %.1f s", t_copy);

    r = gf_open_file(b);
    cr_assert_eq(gguf_reader_n_kv(r), N - (N + 2) / 3);
    size_t k = 0;
    for (int i = 0; i < N; i++) {
        if (i % 3 == 0)
            continue;
        const gguf_kv *kv = gguf_reader_kv(r, k++);
        snprintf(key, sizeof key, "key.%06d", i);
        cr_assert(gguf_str_eq(kv->key, key), "key %zu in insertion order", k - 1);
        cr_assert_eq(kv->v.u64, (uint64_t)i + (i % 2 == 0 ? 1000000u : 0u));
    }
    gguf_reader_close(r);
    tu_rm_rf(dir);
    free(a);
    free(b);
    free(dir);
}

Test(gguf_writer_scale, sixty_thousand_tensors_are_added_and_written_in_linear_time)
{
    enum { N = 60000 };
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "tensors.gguf");
    char name[48];
    pn_error e;
    double t0 = now_s();
    gguf_writer *w = gguf_writer_new();
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "blk.%d.ffn_gate.weight", i);
        cr_assert_eq(gguf_writer_add_tensor(w, name, 1, (int64_t[]){ 8 }, PN_TYPE_F32, &e), PN_OK,
                     "%s", e.msg);
    }
    double t_add = now_s() - t0;
    cr_assert_eq(gguf_writer_add_tensor(w, "blk.12345.ffn_gate.weight", 1, (int64_t[]){ 8 },
                                        PN_TYPE_F32, &e),
                 PN_ERR_TENSOR, "a duplicate among 60k is still refused");
    cr_assert(strstr(e.msg, "duplicate tensor name 'blk.12345.ffn_gate.weight' (tensor 12345 "
                            "and 60000)"),
              "%s", e.msg);
    cr_assert_eq(gguf_writer_n_tensors(w), N);
    t0 = now_s();
    gf_finish(w, path);
    gf_write_pattern(w, (uint64_t)N * 32, 1 << 16);
    gf_close_and_commit(w);
    gguf_writer_free(w);
    double t_write = now_s() - t0;
    cr_log_info("60k tensors: add %.2f s, write %.2f s", t_add, t_write);
    cr_assert_lt(t_add, LINEAR_BOUND_S, "adding 60k tensors took %.1f s", t_add);
    cr_assert_lt(t_write, LINEAR_BOUND_S, "writing 60k tensors took %.1f s", t_write);
    gguf_reader *r = gf_open_file(path);
    cr_assert_eq(gguf_reader_n_tensors(r), N);
    cr_assert_str_eq(gguf_reader_tensor(r, N - 1)->name, "blk.59999.ffn_gate.weight");
    gguf_reader_close(r);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}

/* The hash index against a plain array model: random sets and removals of
 * a small name space, so removals shift entries back across each other. */
Test(gguf_writer_scale, the_key_index_agrees_with_a_plain_model_under_random_sets_and_removals)
{
    enum { NAMES = 1500, OPS = 40000 };
    tu_rng rng = { 12345 };
    gguf_writer *w = gguf_writer_new();
    int64_t order[NAMES]; /* insertion stamp of a present key, -1 if absent */
    uint32_t value[NAMES];
    for (int i = 0; i < NAMES; i++)
        order[i] = -1;
    char key[32];
    size_t present = 0;
    for (int64_t op = 0; op < OPS; op++) {
        int i = (int)(tu_rng_u64(&rng) % NAMES);
        snprintf(key, sizeof key, "k%d", i);
        if (tu_rng_u64(&rng) % 3 == 0) {
            gguf_writer_remove_kv(w, key);
            present -= order[i] >= 0;
            order[i] = -1;
        } else {
            uint32_t v = (uint32_t)tu_rng_u64(&rng);
            cr_assert_eq(gguf_writer_set_u32(w, key, v), PN_OK);
            if (order[i] < 0) {
                order[i] = op;
                present++;
            }
            value[i] = v;
        }
        int j = (int)(tu_rng_u64(&rng) % NAMES);
        snprintf(key, sizeof key, "k%d", j);
        cr_assert_eq(gguf_writer_has_kv(w, key), order[j] >= 0, "op %lld: k%d", (long long)op, j);
    }
    cr_assert_eq(gguf_writer_n_kv(w), present);
    char *dir = tu_mkdtemp();
    char *path = tu_join(dir, "model.gguf");
    gf_finish(w, path);
    gf_close_and_commit(w);
    gguf_writer_free(w);
    gguf_reader *r = gf_open_file(path);
    cr_assert_eq(gguf_reader_n_kv(r), present);
    int64_t last = -1;
    for (size_t k = 0; k < present; k++) {
        const gguf_kv *kv = gguf_reader_kv(r, k);
        int i = atoi(kv->key.data + 1);
        cr_assert_gt(order[i], last, "keys in order of insertion");
        last = order[i];
        cr_assert_eq(kv->v.u64, value[i]);
    }
    gguf_reader_close(r);
    tu_rm_rf(dir);
    free(path);
    free(dir);
}
