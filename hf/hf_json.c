/* hf_json.c - the one place hf/ parses JSON: Jansson, duplicate keys refused,
 * a top-level value that is not an object refused; files read by common's
 * small-file reader (a regular file, its size bounded before it is read). */
#include <jansson.h>
#include <stdlib.h>

#include "common/file.h"
#include "hf/hf_internal.h"

pn_status pn_hf_json_parse(const char *text, size_t len, const char *name, size_t base,
                           json_t **out, pn_error *err)
{
    *out = NULL;
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return pn_error_set(
            err, PN_ERR_FORMAT, "%s: at byte %llu: JSON: %s", name,
            (unsigned long long)(base + (je.position > 0 ? (size_t)je.position : 0)), je.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return pn_error_set(err, PN_ERR_FORMAT, "%s: at byte %llu: JSON is not an object", name,
                            (unsigned long long)base);
    }
    *out = root;
    return PN_OK;
}

pn_status pn_hf_json_load(const char *path, json_t **out, pn_error *err)
{
    *out = NULL;
    char *buf = NULL;
    size_t n = 0;
    pn_status st = pn_read_small_file(path, PN_HF_MAX_JSON, "JSON file", &buf, &n, err);
    if (st == PN_OK)
        st = pn_hf_json_parse(buf, n, path, 0, out, err);
    free(buf);
    return st;
}
