/* Device binaries (PTX, OpenCL program binaries) in the generated-C backend's cache directory
 * (cc.c: the option cache_dir and its defaults, "off" for none), with the objects' integrity
 * scheme: an entry <dir>/<name>-<hash>.<binary> is used only after its bytes match its record
 * <dir>/<name>-<hash>.sum, which holds
 *   "cannl cache record 1\nkey <n>\n" <the n bytes of key text> "\n<binary> <size> <fnv1a64>\n"
 * and whose key text equals the caller's byte for byte (the hash only names the slot); any
 * mismatch deletes the entry with a warning (the caller then compiles again). Files appear by
 * rename() of complete temporaries, the binary before its record; the generated source is written
 * beside them as <dir>/<name>-<hash>.<source> (the file a compile error names). Without a usable
 * shared directory (cache_dir "off", a read-only one) the entry lives in a private temporary
 * directory, removed by cn_cache_entry_close, and nothing is ever found. Internal to src/backend.
 */
#ifndef CN_BACKEND_CACHE_H
#define CN_BACKEND_CACHE_H

#include "core/core.h"

typedef struct cn_cache_entry cn_cache_entry;

/* The entry of `name` (a routine's name) for the key text (key_len bytes: everything the binary
 * depends on), its files named with the two extensions (without the dot). */
cn_status cn_cache_entry_open(cn_ctx *ctx, const char *name, const char *key, size_t key_len,
                              const char *source_ext, const char *binary_ext, cn_cache_entry **out);
/* Where the source is (or will be) written. */
const char *cn_cache_entry_source_path(const cn_cache_entry *e);
/* The checked binary: *data malloc'd (NUL-terminated after its *size bytes), or NULL on a miss
 * (none, or one discarded with a warning); counts CN_STAT_CACHE_HITS. */
cn_status cn_cache_entry_load(cn_ctx *ctx, cn_cache_entry *e, char **data, size_t *size);
/* Writes the generated source at its path (after a miss). */
cn_status cn_cache_entry_write_source(cn_ctx *ctx, cn_cache_entry *e, const char *text, size_t len);
/* Publishes the binary with its record (a shared directory only). */
cn_status cn_cache_entry_store(cn_ctx *ctx, cn_cache_entry *e, const char *data, size_t size);
void cn_cache_entry_close(cn_cache_entry *e);

#endif
