/* hf_inputs.c - the files a Hugging Face source is read from, by name: what
 * no output of any program may be (io/source_open.c compares a target with
 * each). The list is made from the folder's names and its index, without
 * opening the model, so that a program can check a target before anything
 * else; where the index cannot be read, its fixed names are still listed
 * (the open refuses the index itself). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hf/hf.h"
#include "hf/hf_internal.h"

/* Every file pn_hf_open and the key writer may read in a model folder. */
static const char *const fixed_names[] = {
    "config.json",    "model.safetensors.index.json", "model.safetensors",
    "tokenizer.json", "tokenizer_config.json",        "chat_template.jinja",
};

static pn_status add(pn_hf_inputs *in, size_t *cap, const char *dir, const char *name,
                     pn_error *err)
{
    if (in->n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        char **grown = realloc(in->path, nc * sizeof *grown);
        if (!grown)
            return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
        in->path = grown;
        *cap = nc;
    }
    size_t len = strlen(dir) + strlen(name) + 2;
    char *p = malloc(len);
    if (!p)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    snprintf(p, len, "%s/%s", dir, name);
    in->path[in->n++] = p;
    return PN_OK;
}

static int cmp_path(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void pn_hf_inputs_free(pn_hf_inputs *in)
{
    for (size_t i = 0; in && i < in->n; i++)
        free(in->path[i]);
    if (in) {
        free(in->path);
        in->path = NULL;
        in->n = 0;
    }
}

pn_status pn_hf_input_files(const char *src, pn_hf_inputs *out, pn_error *err)
{
    memset(out, 0, sizeof *out);
    struct stat sb;
    bool is_dir = stat(src, &sb) == 0 && S_ISDIR(sb.st_mode);
    char *dir;
    const char *given = NULL; /* the file SRC names, when it is a file */
    if (is_dir) {
        dir = strdup(src);
    } else {
        const char *s = strrchr(src, '/');
        dir = !s ? strdup(".") : s == src ? strdup("/") : strndup(src, (size_t)(s - src));
        given = s ? s + 1 : src;
    }
    if (!dir)
        return pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    pn_status st = PN_OK;
    size_t cap = 0;
    for (size_t i = 0; st == PN_OK && i < sizeof fixed_names / sizeof *fixed_names; i++)
        st = add(out, &cap, dir, fixed_names[i], err);
    if (st == PN_OK && given && given[0])
        st = add(out, &cap, dir, given, err);
    /* the shards the index names: the given index, or the folder's */
    const char *index_name =
        given && strstr(given, ".safetensors.index.json") ? given : "model.safetensors.index.json";
    size_t il = strlen(dir) + strlen(index_name) + 2;
    char *index_path = st == PN_OK ? malloc(il) : NULL;
    if (st == PN_OK && !index_path)
        st = pn_error_set(err, PN_ERR_NOMEM, "out of memory");
    json_t *idx = NULL;
    if (st == PN_OK && index_path) {
        snprintf(index_path, il, "%s/%s", dir, index_name);
        pn_error ignored = { 0 };
        if (stat(index_path, &sb) == 0 && pn_hf_json_load(index_path, &idx, &ignored) == PN_OK) {
            const json_t *wm = json_object_get(idx, "weight_map");
            const char *key;
            json_t *v;
            if (json_is_object(wm))
                json_object_foreach((json_t *)wm, key, v)
                {
                    if (json_is_string(v) && json_string_value(v)[0] && st == PN_OK)
                        st = add(out, &cap, dir, json_string_value(v), err);
                }
        }
    }
    json_decref(idx);
    free(index_path);
    free(dir);
    if (st != PN_OK) {
        pn_hf_inputs_free(out);
        return st;
    }
    /* each once: an index names a shard for every tensor it holds */
    qsort(out->path, out->n, sizeof *out->path, cmp_path);
    size_t u = 0;
    for (size_t i = 0; i < out->n; i++) {
        if (u > 0 && strcmp(out->path[u - 1], out->path[i]) == 0)
            free(out->path[i]);
        else
            out->path[u++] = out->path[i];
    }
    out->n = u;
    return PN_OK;
}
