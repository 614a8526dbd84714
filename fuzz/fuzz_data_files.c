/* libFuzzer target: the data file readers of src/data, IDX (plain or gzip) and NumPy .npy. The
 * input is the whole file, read by both parsers from memory (cn_data_reader_open_bytes). Beyond
 * ASan and UBSan, the harness aborts (a crash libFuzzer reports) when a documented property
 * fails:
 *   - a refusal is CN_ERR_INVALID or CN_ERR_UNSUPPORTED with a message naming the file and a byte
 *     offset ("fuzz.idx: ... at byte N"), and leaves the array empty;
 *   - an accepted array has a rank and dims within the limits, and cells exactly when it has a
 *     cell;
 *   - an accepted .npy array, written back as cn_data_save_npy writes it (its prefix, then its
 *     cells little-endian), reads back equal: the same precision, shape and cell bytes.
 * Memory stays bounded: a claim is checked against the bytes the input can hold before
 * allocating (for gzip, 1032 times the compressed bytes). One context per input. */
#include "data/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* As fuzz_common.h reports a broken property; that header is not included because its
 * fuzz_text (the input as a string) would be an unused static function here. */
static void fail(const char *why, const char *detail) {
  fprintf(stderr, "fuzz_data_files: %s\n%s\n", why, detail);
  abort();
}

/* Reads the input as `name` with the given parser; checks the properties of the outcome. */
static cn_status parse(cn_ctx *ctx, const char *name, const uint8_t *data, size_t size, bool idx,
                       cn_array *out) {
  cn_data_reader r;
  if (cn_data_reader_open_bytes(ctx, name, data, size, idx, &r) != CN_OK) abort();
  cn_status st = idx ? cn_data_idx_read(ctx, &r, out) : cn_data_npy_read(ctx, &r, out);
  cn_data_reader_close(&r);
  const char *msg = cn_ctx_error(ctx);
  if (st != CN_OK) {
    if (st != CN_ERR_INVALID && st != CN_ERR_UNSUPPORTED)
      fail("a refusal that is neither CN_ERR_INVALID nor CN_ERR_UNSUPPORTED:", msg);
    if (strncmp(msg, name, strlen(name)) != 0 || !strstr(msg, "at byte "))
      fail("a refusal that does not name the file and a byte offset:", msg);
    if (out->cells || out->rank) fail("a refusal that leaves an array behind:", msg);
    return st;
  }
  int64_t numel = cn_array_numel(out);
  if (out->rank < (idx ? 1 : 0) || out->rank > CN_MAX_RANK || numel < 0)
    fail("an accepted array with a bad shape:", name);
  if ((numel > 0) != (out->cells != NULL))
    fail("an accepted array whose cells do not match its count:", name);
  return st;
}

/* The .npy file cn_data_save_npy would write for a, in a malloc'd buffer. */
static unsigned char *npy_image(cn_ctx *ctx, const cn_array *a, size_t *len) {
  cn_sbuf sb = {0};
  if (cn_data_npy_prefix(ctx, a, &sb) != CN_OK)
    fail("an accepted array cannot be saved:", cn_ctx_error(ctx));
  size_t numel = (size_t)cn_array_numel(a), width = cn_prec_bytes(a->prec);
  *len = sb.len + numel * width;
  unsigned char *image = malloc(*len);
  if (!image) abort();
  memcpy(image, sb.data, sb.len);
  cn_data_copy_order(image + sb.len, a->cells, numel, width, false);
  cn_sbuf_free(&sb);
  return image;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cn_ctx *ctx = cn_ctx_create();
  if (!ctx) abort();
  cn_array a;
  parse(ctx, "fuzz.idx", data, size, true, &a);
  cn_array_free(&a);
  if (parse(ctx, "fuzz.npy", data, size, false, &a) == CN_OK) {
    size_t len;
    unsigned char *image = npy_image(ctx, &a, &len);
    cn_array b;
    if (parse(ctx, "fuzz-again.npy", image, len, false, &b) != CN_OK)
      fail("a saved array does not read back:", cn_ctx_error(ctx));
    size_t bytes = (size_t)cn_array_numel(&a) * cn_prec_bytes(a.prec);
    if (b.prec != a.prec || b.rank != a.rank ||
        memcmp(b.dims, a.dims, sizeof a.dims[0] * (size_t)a.rank) != 0 ||
        (bytes && memcmp(a.cells, b.cells, bytes) != 0))
      fail("a saved array reads back different:", "fuzz-again.npy");
    cn_array_free(&b);
    free(image);
  }
  cn_array_free(&a);
  cn_ctx_destroy(ctx);
  return 0;
}
