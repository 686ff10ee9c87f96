/* gguf_tensors.c - a parsed reader's tensors, by index and by name, of one
 * file or of a split set (whose reader answers from the split holding the
 * tensor, gguf_internal.h), and the splits of a set. Parsing and checking
 * the header is gguf_header.c's. */
#include "gguf/gguf.h"
#include "gguf/gguf_testing.h"
#include "gguf/gguf_internal.h"

#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Tensors, of one file or of a set                                    */

/* The split holding tensor i of a set (i < n_tensors): the last split whose
 * first tensor is at or before i (a split may hold no tensor). */
static size_t split_of(const gguf_reader *r, size_t i)
{
    size_t lo = 0, hi = r->n_splits; /* split_first[lo] <= i < split_first[hi] */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->split_first[mid] <= i)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

const gguf_tensor_info *gguf_reader_tensor(const gguf_reader *r, size_t i)
{
    if (i >= r->n_tensors)
        return NULL;
    if (!r->splits)
        return &r->tensors[i];
    size_t s = split_of(r, i);
    return &r->splits[s]->tensors[i - r->split_first[s]];
}

/* The index of tensor info ti (one of r's) in r's tensor order. */
static size_t index_of(const gguf_reader *r, const gguf_tensor_info *ti)
{
    if (!r->splits)
        return (size_t)(ti - r->tensors);
    return r->split_first[ti->split] + (size_t)(ti - r->splits[ti->split]->tensors);
}

long gguf_reader_find_tensor(const gguf_reader *r, const char *name)
{
    const gguf_tensor_info *const *by_name = r->splits ? r->set_by_name : r->tensor_by_name;
    if (!name || !by_name)
        return -1;
    size_t lo = 0, hi = r->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(by_name[mid]->name, name);
        if (c == 0)
            return (long)index_of(r, by_name[mid]);
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

const uint8_t *gguf_reader_tensor_data(const gguf_reader *r, size_t i)
{
    const gguf_tensor_info *ti = gguf_reader_tensor(r, i);
    if (!ti)
        return NULL;
    const gguf_reader *f = gguf_file_of_tensor_(r, ti);
    uint64_t start, end;
    if (__builtin_add_overflow(f->data_offset, ti->offset, &start) ||
        __builtin_add_overflow(start, ti->size, &end) || end > f->avail)
        return NULL; /* outside the file (lenient), or not in the buffer */
    return f->base + start;
}

/* ------------------------------------------------------------------ */
/* The splits of a set                                                 */

size_t gguf_reader_n_splits(const gguf_reader *r)
{
    return r->splits ? r->n_splits : 1;
}

const gguf_reader *gguf_reader_split(const gguf_reader *r, size_t s)
{
    if (!r->splits)
        return s == 0 ? r : NULL;
    return s < r->n_splits ? r->splits[s] : NULL;
}

size_t gguf_reader_split_first(const gguf_reader *r, size_t s)
{
    if (!r->splits)
        return s == 0 ? 0 : r->n_tensors;
    return r->split_first[s < r->n_splits ? s : r->n_splits];
}

size_t gguf_reader_tensor_index_in_split(const gguf_reader *r, size_t i)
{
    const gguf_tensor_info *ti = gguf_reader_tensor(r, i);
    if (!ti)
        return SIZE_MAX;
    return r->splits ? i - r->split_first[ti->split] : i;
}
