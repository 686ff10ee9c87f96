/* Pins the type table (quant/types.h): each type's block against the one
 * block-layout header (quant/blocks.h: the structs' sizes, PN_QK_K; the PN
 * groups of quant/pn.h), every name round-trips (name -> type -> name, in
 * either case), and what each type can be decides which kernels it has:
 * the types a mix writes, and only they, have a decoder and an encoder on
 * every path; the k-quants, and only they, a weighted one. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "quant/blocks.h"
#include "quant/pn.h"
#include "quant/pn_fast.h"
#include "quant/types.h"
#include "quant/types_testing.h"

typedef struct layout {
    int id;
    int64_t weights, bytes;
} layout;

Test(types, each_written_type_has_the_block_of_the_layout_header)
{
    const layout want[] = {
        { PN_TYPE_PN3T, 80, sizeof(block_pnt) },
        { PN_TYPE_PN4T, 64, sizeof(block_pnt) },
        { PN_TYPE_Q8_0, sizeof(((block_q8_0 *)0)->qs), sizeof(block_q8_0) },
        { PN_TYPE_Q4_K, PN_QK_K, sizeof(block_q4_K) },
        { PN_TYPE_Q3_K, PN_QK_K, sizeof(block_q3_K) },
        { PN_TYPE_F32, 1, sizeof(float) },
        { PN_TYPE_F16, 1, sizeof(uint16_t) },
        { PN_TYPE_BF16, 1, sizeof(uint16_t) },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const pn_type_traits *t = pn_type_traits_get(want[i].id);
        cr_assert_not_null(t, "type %d is not in the table", want[i].id);
        cr_expect_eq(t->block_weights, want[i].weights, "%s: %lld weights a block, blocks.h: %lld",
                     t->name, (long long)t->block_weights, (long long)want[i].weights);
        cr_expect_eq(t->block_bytes, want[i].bytes, "%s: %lld bytes a block, blocks.h: %lld",
                     t->name, (long long)t->block_bytes, (long long)want[i].bytes);
        if (t->can & PN_CAN_PN)
            cr_expect_eq(t->block_weights, pn_params_get(t->id)->group, "%s: the PN group",
                         t->name);
    }
}

Test(types, every_entry_has_a_block_and_a_name_of_its_own)
{
    size_t n = 0;
    const pn_type_traits *all = pn_type_traits_all(&n);
    cr_assert_geq(n, 8);
    for (size_t i = 0; i < n; i++) {
        cr_expect_gt(all[i].block_weights, 0, "%s", all[i].name);
        cr_expect_gt(all[i].block_bytes, 0, "%s", all[i].name);
        cr_expect_eq(pn_type_row_bytes(all[i].id, 3 * all[i].block_weights), 3 * all[i].block_bytes,
                     "%s", all[i].name);
        for (size_t j = 0; j < i; j++) {
            cr_expect_neq(all[i].id, all[j].id, "id %d twice", all[i].id);
            cr_expect_neq(strcasecmp(all[i].name, all[j].name), 0, "%s and %s", all[i].name,
                          all[j].name);
        }
    }
}

Test(types, every_name_round_trips_through_the_table)
{
    size_t n = 0;
    const pn_type_traits *all = pn_type_traits_all(&n);
    for (size_t i = 0; i < n; i++) {
        const char *name = pn_type_name(all[i].id);
        cr_assert_str_eq(name, all[i].name);
        const pn_type_traits *back = pn_type_traits_by_name(name);
        cr_assert_not_null(back, "%s", name);
        cr_expect_eq(back->id, all[i].id, "%s -> %d, expected %d", name, back->id, all[i].id);
        cr_expect_str_eq(pn_type_name(back->id), name);
        char upper[32];
        size_t k = 0;
        for (; name[k] && k + 1 < sizeof upper; k++)
            upper[k] = (char)toupper((unsigned char)name[k]);
        upper[k] = '\0';
        back = pn_type_traits_by_name(upper);
        cr_expect(back && back->id == all[i].id, "%s is not found as %s", name, upper);
    }
    cr_expect_str_eq(pn_type_name(-1), "?");
    cr_expect_str_eq(pn_type_name(123), "?");
    cr_expect_null(pn_type_traits_by_name("q4_K_M"));
    cr_expect_null(pn_type_traits_by_name(""));
    cr_expect_null(pn_type_traits_by_name(NULL));
}

Test(types, an_option_names_a_float_type_exactly_as_the_table_spells_it)
{
    cr_expect_eq(pn_float_type_from_name("f32"), PN_TYPE_F32);
    cr_expect_eq(pn_float_type_from_name("f16"), PN_TYPE_F16);
    cr_expect_eq(pn_float_type_from_name("bf16"), PN_TYPE_BF16);
    static const char *const no[] = { "F32", "Bf16", "q8_0", "pn3t", "f64", "", "f32 ", "auto" };
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        cr_expect_eq(pn_float_type_from_name(no[i]), -1, "'%s'", no[i]);
}

Test(types, what_a_type_can_be_decides_its_kernels)
{
    static const int written[] = { PN_TYPE_PN3T, PN_TYPE_PN4T, PN_TYPE_Q8_0, PN_TYPE_Q4_K,
                                   PN_TYPE_Q3_K, PN_TYPE_F32,  PN_TYPE_F16,  PN_TYPE_BF16 };
    size_t n = 0;
    const pn_type_traits *all = pn_type_traits_all(&n);
    size_t n_written = 0;
    for (size_t i = 0; i < n; i++) {
        const pn_type_traits *t = &all[i];
        bool in_list = false;
        for (size_t j = 0; j < sizeof written / sizeof written[0]; j++)
            in_list |= written[j] == t->id;
        const bool w = t->can & PN_CAN_WRITE;
        cr_expect_eq(w, in_list, "%s: written %d, a mix writes it %d", t->name, w, in_list);
        n_written += w;
        const bool pn = t->id == PN_TYPE_PN3T || t->id == PN_TYPE_PN4T;
        const bool kq = t->id == PN_TYPE_Q4_K || t->id == PN_TYPE_Q3_K;
        const bool fl = t->id == PN_TYPE_F32 || t->id == PN_TYPE_F16 || t->id == PN_TYPE_BF16;
        cr_expect_eq(pn_type_is_pn(t->id), pn, "%s", t->name);
        cr_expect_eq(pn_type_can(t->id, PN_CAN_KQUANT), kq, "%s", t->name);
        cr_expect_eq(pn_type_is_float(t->id), fl, "%s", t->name);
        cr_expect_eq(pn_type_can(t->id, PN_CAN_STOCK), in_list && !pn, "%s", t->name);
        cr_expect_eq(t->decode != NULL, w, "%s: decoder", t->name);
        cr_expect_eq(t->sum_block > 0, w, "%s: sum block", t->name);
        for (int p = 0; p < PN_PATH_COUNT; p++)
            cr_expect_eq(t->encode[p] != NULL, w, "%s: encoder on path %s", t->name,
                         pn_path_name(p));
        cr_expect_eq(t->encode_weighted != NULL, kq, "%s: weighted encoder", t->name);
    }
    cr_expect_eq(n_written, sizeof written / sizeof written[0]);
    cr_expect_not(pn_type_can(-1, 0));
    cr_expect_not(pn_type_can(1000, 0));
}
