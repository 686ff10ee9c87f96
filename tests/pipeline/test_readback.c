/* Pins pipeline/readback.h: what the writer has settled on the device is
 * read back while the rest is written, every tensor read back there is one
 * less for the end, and bytes that are not what was computed are found,
 * whether they changed before the read-back behind the writer or after it
 * stopped, and named at the end. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/crc32.h"
#include "gguf/gguf.h"
#include "io/outset.h"
#include "pipeline/readback.h"
#include "quant/pn.h"
#include "quant/types.h"
#include "fixtures/scratch.h"
#include "test_util.h"

/* Four tensors: f32 of 1.6 MB, pn3t of 1.1 MB (rows of 5120), f32 of 2.4 MB,
 * pn3t of 0.4 MB; written in pieces of 64 KiB, drop-behind 256 KiB. */
#define N_TENSORS 4
static const int64_t g_ne[N_TENSORS][2] = {
    { 4000, 100 }, { 5120, 512 }, { 6000, 100 }, { 5120, 192 }
};
static const int g_type[N_TENSORS] = { PN_TYPE_F32, PN_TYPE_PN3T, PN_TYPE_F32, PN_TYPE_PN3T };
#define PIECE ((size_t)65536)
#define DROP_BEHIND ((uint64_t)262144)

typedef struct written_set {
    gguf_writer *model;
    pn_outset *os;
    pn_plan_tensor t[N_TENSORS];
    uint8_t *bytes[N_TENSORS];
    uint32_t crcs[N_TENSORS];
} written_set;

/* Tensor i's bytes: random f32, or random weights quantized to pn3t. */
static uint8_t *tensor_bytes(int i, uint64_t *n)
{
    const int64_t weights = g_ne[i][0] * g_ne[i][1];
    *n = (uint64_t)pn_type_row_bytes(g_type[i], g_ne[i][0]) * (uint64_t)g_ne[i][1];
    float *x = malloc((size_t)weights * sizeof *x);
    tu_rng rng = { 700 + (uint64_t)i };
    for (int64_t k = 0; k < weights; k++)
        x[k] = (float)((double)(tu_rng_u64(&rng) >> 11) * 0x1p-53 - 0.5);
    if (g_type[i] == PN_TYPE_F32)
        return (uint8_t *)x;
    uint8_t *q = malloc((size_t)*n);
    int64_t bad = 0;
    cr_assert_eq(pn_quantize_row(g_type[i], x, weights, q, &bad), PN_OK);
    free(x);
    return q;
}

/* The set made and begun, the readback ready; nothing written yet. */
static void set_up(written_set *s, const char *path, pn_readback *rb)
{
    memset(s, 0, sizeof *s);
    s->model = gguf_writer_new();
    cr_assert_not_null(s->model);
    cr_assert_eq(gguf_writer_set_str(s->model, "general.architecture", "test"), PN_OK);
    pn_error err;
    for (int i = 0; i < N_TENSORS; i++) {
        char name[32];
        snprintf(name, sizeof name, "t%d.weight", i);
        cr_assert_eq(gguf_writer_add_tensor(s->model, name, 2, g_ne[i], g_type[i], &err), PN_OK,
                     "%s", err.msg);
        s->t[i].name = strdup(name);
        s->t[i].type = g_type[i];
        s->t[i].ne[0] = g_ne[i][0];
        s->t[i].ne[1] = g_ne[i][1];
        s->bytes[i] = tensor_bytes(i, &s->t[i].bytes);
        s->crcs[i] = pn_crc32(0, s->bytes[i], (size_t)s->t[i].bytes);
    }
    pn_outset_opts oo;
    pn_outset_opts_init(&oo);
    oo.writeback_bytes = PIECE;
    oo.drop_behind_bytes = DROP_BEHIND;
    cr_assert_eq(pn_outset_make(s->model, path, &oo, &s->os, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(pn_outset_check_targets(s->os, NULL, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(pn_outset_begin(s->os, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(pn_readback_init(rb, s->os, s->t, s->crcs, N_TENSORS, 2, NULL, &err), PN_OK);
}

/* Tensor i written in pieces, each followed by the read-back, as the
 * writer thread does. */
static void write_tensor(written_set *s, pn_readback *rb, int i)
{
    pn_error err;
    for (uint64_t at = 0; at < s->t[i].bytes; at += PIECE) {
        const size_t k = s->t[i].bytes - at < PIECE ? (size_t)(s->t[i].bytes - at) : PIECE;
        cr_assert_eq(pn_outset_write(s->os, (size_t)i, s->bytes[i] + at, k, &err), PN_OK, "%s",
                     err.msg);
        pn_readback_behind(rb);
    }
}

static void tear_down(written_set *s, pn_readback *rb)
{
    pn_readback_free(rb);
    pn_outset_free(s->os);
    gguf_writer_free(s->model);
    for (int i = 0; i < N_TENSORS; i++) {
        free(s->t[i].name);
        free(s->bytes[i]);
    }
}


/* Byte `at` of tensor i's data made `value` in the file. */
static void damage(const written_set *s, int i, uint64_t at, uint8_t value)
{
    gguf_reader *r = NULL;
    pn_error err;
    cr_assert_eq(pn_outset_open_settled(s->os, 0, &r, &err), PN_OK, "%s", err.msg);
    const uint64_t off = gguf_reader_tensor_file_offset(r, (size_t)i) + at;
    gguf_reader_close(r);
    char *tmp = tu_find_temporary_output(g_dir);
    const int fd = open(tmp, O_WRONLY);
    cr_assert_geq(fd, 0, "%s", tmp);
    free(tmp);
    cr_assert_eq(pwrite(fd, &value, 1, (off_t)off), 1);
    close(fd);
}

Test(readback, the_settled_tensors_are_read_back_while_the_rest_is_written, .init = setup,
     .fini = teardown)
{
    char *path = path_in("out.gguf");
    written_set s;
    pn_readback rb;
    set_up(&s, path, &rb);
    for (int i = 0; i < N_TENSORS; i++)
        write_tensor(&s, &rb, i);
    /* the first two end more than the distance before the end of the data */
    cr_assert(rb.verified[0] && rb.verified[1], "settled tensors were not read back");
    cr_assert(!rb.verified[N_TENSORS - 1], "the last tensor cannot have settled yet");
    cr_assert_geq(rb.bytes, s.t[0].bytes + s.t[1].bytes);
    cr_assert(!rb.stopped);
    pn_error err;
    cr_assert_eq(pn_outset_close(s.os, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(pn_readback_split(&rb, 0, &err), PN_OK, "%s", err.msg);
    cr_assert_eq(pn_outset_commit(s.os, &err), PN_OK, "%s", err.msg);
    tear_down(&s, &rb);
    /* and the file is what was written */
    gguf_reader *r;
    cr_assert_eq(gguf_reader_open(path, &r, &err), PN_OK, "%s", err.msg);
    for (int i = 0; i < N_TENSORS; i++) {
        uint64_t n;
        uint8_t *want = tensor_bytes(i, &n), *got = malloc((size_t)n);
        cr_assert_eq(gguf_reader_read_tensor(r, (size_t)i, 0, got, (size_t)n, &err), PN_OK);
        cr_assert(memcmp(want, got, (size_t)n) == 0, "tensor %d differs", i);
        free(want);
        free(got);
    }
    gguf_reader_close(r);
    free(path);
}

Test(readback, a_byte_changed_before_its_tensor_is_read_back_stops_it_and_is_named_at_the_end,
     .init = setup, .fini = teardown)
{
    for (int which = 0; which < 2; which++) {
        char name[32];
        snprintf(name, sizeof name, "out%d.gguf", which);
        char *path = path_in(name);
        written_set s;
        pn_readback rb;
        set_up(&s, path, &rb);
        /* tensors 0 to 2 written with no read-back, then one of them
         * damaged in the file: a data byte of tensor 0 (its CRC), or a
         * reserved bit of tensor 1 (bit 15 of word 0, the block's bytes 2
         * and 3, of block 1 of row 2) */
        pn_error err;
        for (int i = 0; i < 3; i++)
            cr_assert_eq(pn_outset_write(s.os, (size_t)i, s.bytes[i], (size_t)s.t[i].bytes, &err),
                         PN_OK, "%s", err.msg);
        if (which == 0) {
            damage(&s, 0, 12345, (uint8_t)(s.bytes[0][12345] ^ 0x10));
        } else {
            const uint64_t at =
                2 * (uint64_t)pn_type_row_bytes(PN_TYPE_PN3T, 5120) + PN_BLOCK_BYTES + 3;
            cr_assert_eq(s.bytes[1][at] & 0x80, 0);
            damage(&s, 1, at, (uint8_t)(s.bytes[1][at] | 0x80));
        }
        write_tensor(&s, &rb, 3);
        cr_assert(!rb.verified[which], "the damaged tensor %d passed", which);
        cr_assert(rb.stopped, "the read-back went on past a bad tensor");
        cr_assert_eq(pn_outset_close(s.os, &err), PN_OK, "%s", err.msg);
        pn_status st = pn_readback_split(&rb, 0, &err);
        if (which == 0) {
            cr_assert_eq(st, PN_ERR_CRC, "%s", err.msg);
            cr_assert(strstr(err.msg, "t0.weight") && strstr(err.msg, "CRC-32"), "%s", err.msg);
        } else {
            cr_assert_eq(st, PN_ERR_RESERVED_BITS, "%s", err.msg);
            cr_assert(strstr(err.msg, "t1.weight") && strstr(err.msg, "row 2") &&
                          strstr(err.msg, "block 1"),
                      "%s", err.msg);
        }
        tear_down(&s, &rb);
        free(path);
    }
}
