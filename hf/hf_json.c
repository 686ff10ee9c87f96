/* hf_json.c - the one place hf/ parses JSON: Jansson, duplicate keys refused,
 * a top-level value that is not an object refused. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hf/hf_internal.h"

pn_status pn_hf_json_parse(const char *text, size_t len, const char *name, size_t base,
                           json_t **out, pn_error *err)
{
    *out = NULL;
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return pn_error_set(err, PN_ERR_FORMAT, "%s: at byte %llu: JSON: %s", name,
                            (unsigned long long)(base + (je.position > 0 ? (size_t)je.position : 0)),
                            je.text);
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
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return pn_error_set(err, PN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return pn_error_set(err, PN_ERR_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)sb.st_size > PN_HF_MAX_JSON) {
        close(fd);
        return pn_error_set(err, PN_ERR_FORMAT, "%s: %lld bytes, above the limit of %u for a "
                            "JSON file", path, (long long)sb.st_size, PN_HF_MAX_JSON);
    }
    size_t n = (size_t)sb.st_size;
    char *buf = malloc(n ? n : 1);
    if (!buf) { close(fd); return pn_error_set(err, PN_ERR_NOMEM, "%s: out of memory", path); }
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, buf + got, n - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            free(buf);
            close(fd);
            return pn_error_set(err, r < 0 ? PN_ERR_IO : PN_ERR_TRUNCATED,
                                "%s: at byte %zu: %s", path, got,
                                r < 0 ? strerror(errno) : "file shrank while read");
        }
        got += (size_t)r;
    }
    close(fd);
    pn_status st = pn_hf_json_parse(buf, n, path, 0, out, err);
    free(buf);
    return st;
}
