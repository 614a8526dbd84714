/* IDX files (the MNIST family), plain or gzip-compressed: magic 00 00 TYPE RANK, RANK big-endian
 * u32 dims, then the cells big-endian in row-major order and nothing after them.
 *
 * Invariants: the claimed size is checked (overflow, the 2^31-cell limit, the bytes the file can
 * still hold) before the cells are allocated; the payload is read straight into the cells and
 * converted in place (byte order, and i8/i16 widened to int32 from the last cell down, so no cell
 * is overwritten before it is read); on failure *out is zeroed and nothing stays allocated. */
#include "data/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The documented limit of a loaded IDX array. */
#define IDX_MAX_CELLS ((size_t)1 << 31)

typedef struct {
  unsigned char code;
  const char *name;
  size_t width; /* bytes of a cell in the file */
  cn_prec prec;
} idx_type;

static const idx_type idx_types[] = {
    {0x08, "u8", 1, CN_PREC_BYTE},    {0x09, "i8", 1, CN_PREC_INT32},
    {0x0B, "i16", 2, CN_PREC_INT32},  {0x0C, "i32", 4, CN_PREC_INT32},
    {0x0D, "f32", 4, CN_PREC_SINGLE}, {0x0E, "f64", 8, CN_PREC_DOUBLE},
};

/* Turns the n file cells at the start of cells (big-endian, t->width bytes each) into cells of
 * t->prec. */
static void convert(const idx_type *t, void *cells, size_t n) {
  if (t->code == 0x09) {
    const int8_t *src = cells;
    int32_t *dst = cells;
    for (size_t i = n; i-- > 0;) dst[i] = src[i];
  } else if (t->code == 0x0B) {
    const unsigned char *src = cells;
    int32_t *dst = cells;
    for (size_t i = n; i-- > 0;) {
      uint16_t bits = (uint16_t)(src[2 * i] << 8 | src[2 * i + 1]);
      int16_t v;
      memcpy(&v, &bits, sizeof v);
      dst[i] = v;
    }
  } else {
    cn_data_copy_order(cells, cells, n, t->width, true);
  }
}

/* The header: the type and the dims; the cell count in *numel. */
static cn_status read_header(cn_ctx *ctx, cn_data_reader *r, const idx_type **type, cn_array *a,
                             size_t *numel) {
  unsigned char magic[4], dims[4 * CN_MAX_RANK];
  cn_status s = cn_data_read_exact(ctx, r, magic, 4, "the IDX magic number (00 00 TYPE RANK)");
  if (s != CN_OK) return s;
  if (magic[0] != 0 || magic[1] != 0)
    return cn_data_fail_at(ctx, CN_ERR_INVALID, r, 0,
                           "expected the IDX magic number 00 00 TYPE RANK, found %02x %02x %02x "
                           "%02x",
                           magic[0], magic[1], magic[2], magic[3]);
  *type = NULL;
  for (size_t i = 0; i < sizeof idx_types / sizeof *idx_types; i++)
    if (idx_types[i].code == magic[2]) *type = &idx_types[i];
  if (!*type)
    return cn_data_fail_at(ctx, CN_ERR_INVALID, r, 2,
                           "expected an IDX type code (08 u8, 09 i8, 0b i16, 0c i32, 0d f32, 0e "
                           "f64), found %02x",
                           magic[2]);
  int rank = magic[3];
  if (rank == 0)
    return cn_data_fail_at(ctx, CN_ERR_INVALID, r, 3,
                           "expected a rank from 1 to %d, found 0 (an IDX file has dimensions)",
                           CN_MAX_RANK);
  if (rank > CN_MAX_RANK)
    return cn_data_fail_at(ctx, CN_ERR_UNSUPPORTED, r, 3,
                           "expected a rank from 1 to %d (cannl's most axes), found %d",
                           CN_MAX_RANK, rank);
  s = cn_data_read_exact(ctx, r, dims, 4 * (size_t)rank, "dimensions (big-endian u32 each)");
  if (s != CN_OK) return s;
  a->prec = (*type)->prec;
  a->rank = rank;
  for (int k = 0; k < rank; k++) {
    const unsigned char *d = dims + 4 * k;
    a->dims[k] =
        (int64_t)((uint32_t)d[0] << 24 | (uint32_t)d[1] << 16 | (uint32_t)d[2] << 8 | d[3]);
  }
  size_t payload;
  if (!cn_data_numel(rank, a->dims, numel) || !cn_mul_size(*numel, (*type)->width, &payload))
    return cn_data_fail_at(ctx, CN_ERR_INVALID, r, 4,
                           "expected dimensions whose size in bytes fits in memory, found %d "
                           "dimensions whose product overflows",
                           rank);
  if (*numel > IDX_MAX_CELLS)
    return cn_data_fail_at(ctx, CN_ERR_UNSUPPORTED, r, 4,
                           "expected at most 2^31 cells, found dimensions claiming %zu", *numel);
  char what[64];
  snprintf(what, sizeof what, "payload (%zu %s cells)", *numel, (*type)->name);
  return cn_data_check_claim(ctx, r, payload, what);
}

cn_status cn_data_idx_read(cn_ctx *ctx, cn_data_reader *r, cn_array *out) {
  cn_array a;
  memset(&a, 0, sizeof a);
  memset(out, 0, sizeof *out);
  const idx_type *type = NULL;
  size_t numel = 0;
  cn_status s = read_header(ctx, r, &type, &a, &numel);
  if (s != CN_OK) return s;
  if (numel) {
    s = cn_data_read_payload(ctx, r, &a, numel, numel * type->width, "payload");
    if (s == CN_OK) convert(type, a.cells, numel);
  }
  return cn_data_finish_read(ctx, r, &a, s, out);
}

cn_status cn_data_load_idx(cn_ctx *ctx, const char *path, cn_array *out) {
  memset(out, 0, sizeof *out);
  cn_data_reader r;
  cn_status s = cn_data_reader_open(ctx, path, true, &r);
  if (s != CN_OK) return s;
  s = cn_data_idx_read(ctx, &r, out);
  cn_data_reader_close(&r);
  return s;
}
