/* NumPy .npy files: magic \x93NUMPY, version (1.0: u16 header length; 2.0 and 3.0: u32), a
 * header that is a Python dict literal {'descr': ..., 'fortran_order': ..., 'shape': (...)}
 * padded with blanks to a newline, then the cells in C order and nothing after them.
 *
 * Invariants: the header is parsed by a small reader of that dict (strings in either quote,
 * True/False, tuples of non-negative integers, blanks anywhere, a trailing comma) that accepts
 * each of the three keys exactly once and nothing else; the header and the cells are allocated
 * only after their claimed sizes were checked against the bytes left in the file; on failure
 * *out is zeroed. Saving writes version 1.0 little-endian with the header padded so that the
 * cells start at a multiple of 64 bytes, as NumPy does, through the atomic writer. */
#include "data/data.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static const char npy_magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

typedef struct {
  const char *code; /* the descr without its byte-order character */
  cn_prec prec;
  size_t width; /* bytes of a cell in the file */
  bool widen;   /* i1 and i2: signed, widened to int32 */
  bool boolean; /* b1: 0 or 1 */
} npy_dtype;

/* The dtypes cannl reads; the first nine are also those it writes (one per precision). */
static const npy_dtype npy_dtypes[] = {
    {"u1", CN_PREC_BYTE, 1, false, false},   {"u2", CN_PREC_UINT16, 2, false, false},
    {"i4", CN_PREC_INT32, 4, false, false},  {"u4", CN_PREC_UINT32, 4, false, false},
    {"i8", CN_PREC_INT64, 8, false, false},  {"u8", CN_PREC_UINT64, 8, false, false},
    {"f2", CN_PREC_HALF, 2, false, false},   {"f4", CN_PREC_SINGLE, 4, false, false},
    {"f8", CN_PREC_DOUBLE, 8, false, false}, {"i1", CN_PREC_INT32, 1, true, false},
    {"i2", CN_PREC_INT32, 2, true, false},   {"b1", CN_PREC_BYTE, 1, false, true},
};
#define N_SAVABLE 9

/* ---- The header dict ---- */

typedef struct {
  cn_ctx *ctx;
  cn_data_reader *r;
  const char *s;
  size_t n, i, base; /* the header text, its length, the cursor, its offset in the file */
} hdr;

static void skip_blanks(hdr *h) {
  while (h->i < h->n && h->s[h->i] && strchr(" \t\r\n", h->s[h->i])) h->i++;
}

/* "expected WHAT, found <the text at the cursor>", positioned at the cursor. */
static cn_status hdr_fail(hdr *h, cn_status status, const char *what) {
  char found[32];
  size_t len = 0;
  while (len < 12 && h->i + len < h->n && h->s[h->i + len] > ' ' && h->s[h->i + len] < 127) len++;
  if (h->i >= h->n)
    snprintf(found, sizeof found, "the end of the header");
  else if (len)
    snprintf(found, sizeof found, "\"%.*s\"", (int)len, h->s + h->i);
  else
    snprintf(found, sizeof found, "byte 0x%02x", (unsigned char)h->s[h->i]);
  return cn_data_fail_at(h->ctx, status, h->r, h->base + h->i,
                         "in the header dict: expected %s, found %s", what, found);
}

static bool accept(hdr *h, char c) {
  skip_blanks(h);
  if (h->i < h->n && h->s[h->i] == c) {
    h->i++;
    return true;
  }
  return false;
}

/* A quoted string (no escapes: NumPy's keys and simple descrs have none) into out, of cap
 * bytes. */
static cn_status parse_string(hdr *h, char *out, size_t cap, const char *what) {
  skip_blanks(h);
  char q = h->i < h->n ? h->s[h->i] : 0;
  if (q != '\'' && q != '"') return hdr_fail(h, CN_ERR_INVALID, what);
  size_t start = ++h->i;
  while (h->i < h->n && h->s[h->i] != q && h->s[h->i] != '\n') h->i++;
  if (h->i >= h->n || h->s[h->i] != q) return hdr_fail(h, CN_ERR_INVALID, "a closing quote");
  /* A string too long for out is cut: longer than every key and dtype code, it matches none,
   * and the caller reports it. */
  size_t len = h->i - start < cap - 1 ? h->i - start : cap - 1;
  memcpy(out, h->s + start, len);
  out[len] = '\0';
  h->i++;
  return CN_OK;
}

static const npy_dtype *find_dtype(const char *descr) {
  char order = descr[0];
  if (order != '<' && order != '>' && order != '|') return NULL;
  for (size_t k = 0; k < sizeof npy_dtypes / sizeof *npy_dtypes; k++)
    if (strcmp(descr + 1, npy_dtypes[k].code) == 0)
      return order == '|' && npy_dtypes[k].width > 1 ? NULL : &npy_dtypes[k];
  return NULL;
}

static cn_status parse_descr(hdr *h, const npy_dtype **dtype, bool *big) {
  skip_blanks(h);
  if (h->i < h->n && h->s[h->i] == '[')
    return hdr_fail(h, CN_ERR_UNSUPPORTED, "a simple dtype such as '<f4' (not a structured one)");
  size_t at = h->i;
  char descr[16];
  cn_status s = parse_string(h, descr, sizeof descr, "a dtype string such as '<f4'");
  if (s != CN_OK) return s;
  *dtype = find_dtype(descr);
  *big = descr[0] == '>';
  if (!*dtype) {
    h->i = at;
    return hdr_fail(h, CN_ERR_UNSUPPORTED,
                    "a dtype among u1 u2 i4 u4 i8 u8 f2 f4 f8 i1 i2 b1 with byte order <, > or | "
                    "(| for one byte)");
  }
  return CN_OK;
}

static cn_status parse_bool(hdr *h, bool *out) {
  skip_blanks(h);
  if (h->n - h->i >= 4 && memcmp(h->s + h->i, "True", 4) == 0) {
    h->i += 4;
    *out = true;
  } else if (h->n - h->i >= 5 && memcmp(h->s + h->i, "False", 5) == 0) {
    h->i += 5;
    *out = false;
  } else {
    return hdr_fail(h, CN_ERR_INVALID, "True or False");
  }
  return CN_OK;
}

static cn_status parse_shape(hdr *h, cn_array *a) {
  if (!accept(h, '(')) return hdr_fail(h, CN_ERR_INVALID, "a shape tuple such as (2, 3)");
  a->rank = 0;
  while (!accept(h, ')')) {
    skip_blanks(h);
    if (h->i >= h->n || h->s[h->i] < '0' || h->s[h->i] > '9')
      return hdr_fail(h, CN_ERR_INVALID, "a dimension (a non-negative integer) or ')'");
    if (a->rank == CN_MAX_RANK) {
      char what[64];
      snprintf(what, sizeof what, "at most %d dimensions (cannl's most axes)", CN_MAX_RANK);
      return hdr_fail(h, CN_ERR_UNSUPPORTED, what);
    }
    uint64_t d;
    size_t start = h->i;
    while (h->i < h->n && h->s[h->i] >= '0' && h->s[h->i] <= '9') h->i++;
    if (!cn_parse_natural(h->s + start, h->i - start, INT64_MAX, &d)) {
      h->i = start;
      return hdr_fail(h, CN_ERR_INVALID, "a dimension below 2^63");
    }
    a->dims[a->rank++] = (int64_t)d;
    if (accept(h, ')')) break;
    if (!accept(h, ',')) return hdr_fail(h, CN_ERR_INVALID, "',' or ')' in the shape tuple");
  }
  return CN_OK;
}

/* The dict: each key once; dtype, byte order and shape out. */
static cn_status parse_header(hdr *h, const npy_dtype **dtype, bool *big, cn_array *a) {
  static const char *const keys[3] = {"descr", "fortran_order", "shape"};
  bool seen[3] = {false, false, false};
  if (!accept(h, '{')) return hdr_fail(h, CN_ERR_INVALID, "'{' (a Python dict literal)");
  while (!accept(h, '}')) {
    skip_blanks(h);
    size_t at = h->i;
    char key[16];
    cn_status s = parse_string(h, key, sizeof key, "a key ('descr', 'fortran_order', 'shape')");
    if (s != CN_OK) return s;
    int k = 0;
    while (k < 3 && strcmp(key, keys[k]) != 0) k++;
    if (k == 3 || seen[k]) {
      h->i = at;
      return hdr_fail(h, CN_ERR_INVALID,
                      k == 3 ? "one of the keys 'descr', 'fortran_order', 'shape'"
                             : "each key once");
    }
    seen[k] = true;
    if (!accept(h, ':')) return hdr_fail(h, CN_ERR_INVALID, "':' after the key");
    if (k == 0) {
      s = parse_descr(h, dtype, big);
    } else if (k == 1) {
      bool fortran = false;
      skip_blanks(h);
      size_t value_at = h->i;
      s = parse_bool(h, &fortran);
      if (s == CN_OK && fortran) {
        h->i = value_at;
        return hdr_fail(h, CN_ERR_UNSUPPORTED,
                        "fortran_order False (cannl reads C-order arrays only)");
      }
    } else {
      s = parse_shape(h, a);
    }
    if (s != CN_OK) return s;
    if (accept(h, '}')) break;
    if (!accept(h, ',')) return hdr_fail(h, CN_ERR_INVALID, "',' or '}' after a value");
  }
  for (int k = 0; k < 3; k++)
    if (!seen[k]) {
      char what[48];
      snprintf(what, sizeof what, "the key '%s' in the dict", keys[k]);
      h->i--; /* at the closing brace */
      return hdr_fail(h, CN_ERR_INVALID, what);
    }
  skip_blanks(h);
  if (h->i < h->n) return hdr_fail(h, CN_ERR_INVALID, "only blanks after the dict");
  return CN_OK;
}

/* ---- Loading ---- */

/* Turns the n file cells at the start of cells into cells of dtype->prec, in place (widened
 * from the last cell down, so no cell is overwritten before it is read). */
static void convert(const npy_dtype *dtype, bool big, void *cells, size_t n) {
  if (dtype->widen && dtype->width == 1) {
    const int8_t *src = cells;
    int32_t *dst = cells;
    for (size_t i = n; i-- > 0;) dst[i] = src[i];
  } else if (dtype->widen) {
    int32_t *dst = cells;
    for (size_t i = n; i-- > 0;) {
      int16_t v;
      cn_data_copy_order(&v, (const unsigned char *)cells + 2 * i, 1, 2, big);
      dst[i] = v;
    }
  } else if (dtype->boolean) {
    unsigned char *c = cells;
    for (size_t i = 0; i < n; i++) c[i] = c[i] != 0;
  } else {
    cn_data_copy_order(cells, cells, n, dtype->width, big);
  }
}

/* Reads the prefix and the header dict: dtype, order, shape. */
static cn_status read_header(cn_ctx *ctx, cn_data_reader *r, const npy_dtype **dtype, bool *big,
                             cn_array *a) {
  unsigned char pre[12];
  cn_status s = cn_data_read_exact(ctx, r, pre, 8, "the magic string and version");
  if (s != CN_OK) return s;
  if (memcmp(pre, npy_magic, 6) != 0)
    return cn_data_fail_at(ctx, CN_ERR_INVALID, r, 0,
                           "expected the magic string \\x93NUMPY, found %02x %02x %02x %02x %02x "
                           "%02x",
                           pre[0], pre[1], pre[2], pre[3], pre[4], pre[5]);
  if (pre[6] < 1 || pre[6] > 3 || pre[7] != 0)
    return cn_data_fail_at(ctx, CN_ERR_UNSUPPORTED, r, 6,
                           "expected format version 1.0, 2.0 or 3.0, found %d.%d", pre[6], pre[7]);
  size_t len_bytes = pre[6] == 1 ? 2 : 4;
  s = cn_data_read_exact(ctx, r, pre + 8, len_bytes, "the header length");
  if (s != CN_OK) return s;
  size_t hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
  if (len_bytes == 4) hlen |= (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
  size_t base = r->pos;
  s = cn_data_check_claim(ctx, r, hlen, "header");
  if (s != CN_OK) return s;
  char *text = cn_malloc(ctx, hlen);
  if (!text) return cn_fail(ctx, CN_ERR_NOMEM, "%s: out of memory for the header", r->path);
  s = cn_data_read_exact(ctx, r, text, hlen, "the header");
  if (s == CN_OK) {
    hdr h = {ctx, r, text, hlen, 0, base};
    s = parse_header(&h, dtype, big, a);
  }
  free(text);
  return s;
}

cn_status cn_data_npy_read(cn_ctx *ctx, cn_data_reader *r, cn_array *out) {
  cn_array a;
  memset(&a, 0, sizeof a);
  memset(out, 0, sizeof *out);
  const npy_dtype *dtype = NULL;
  bool big = false;
  cn_status s = read_header(ctx, r, &dtype, &big, &a);
  if (s != CN_OK) return s;
  a.prec = dtype->prec;
  size_t numel, payload, bytes;
  if (!cn_data_numel(a.rank, a.dims, &numel) || !cn_mul_size(numel, dtype->width, &payload) ||
      !cn_mul_size(numel, cn_prec_bytes(a.prec), &bytes)) /* the cells in memory fit too */
    return cn_data_fail_at(ctx, CN_ERR_INVALID, r, r->pos,
                           "expected a shape whose size in bytes fits in memory, found %d "
                           "dimensions whose product overflows",
                           a.rank);
  char what[80];
  snprintf(what, sizeof what, "data (%zu cells of %zu bytes)", numel, dtype->width);
  s = cn_data_check_claim(ctx, r, payload, what);
  if (s != CN_OK) return s;
  if (numel) {
    s = cn_data_read_payload(ctx, r, &a, numel, payload, "data");
    if (s == CN_OK) convert(dtype, big, a.cells, numel);
  }
  return cn_data_finish_read(ctx, r, &a, s, out);
}

cn_status cn_data_load_npy(cn_ctx *ctx, const char *path, cn_array *out) {
  memset(out, 0, sizeof *out);
  cn_data_reader r;
  cn_status s = cn_data_reader_open(ctx, path, false, &r);
  if (s != CN_OK) return s;
  s = cn_data_npy_read(ctx, &r, out);
  cn_data_reader_close(&r);
  return s;
}

/* ---- Saving ---- */

cn_status cn_data_npy_prefix(cn_ctx *ctx, const cn_array *a, cn_sbuf *sb) {
  const npy_dtype *dtype = NULL;
  for (int k = 0; k < N_SAVABLE; k++)
    if (npy_dtypes[k].prec == a->prec) dtype = &npy_dtypes[k];
  if (!dtype)
    return cn_fail(ctx, CN_ERR_UNSUPPORTED, "cannot save %s cells as .npy: NumPy has no such dtype",
                   cn_prec_name(a->prec));
  if (cn_array_numel(a) < 0)
    return cn_fail(ctx, CN_ERR_INVALID,
                   "cannot save as .npy: rank %d with these dims is not a valid shape (rank 0 to "
                   "%d, dims >= 0, a size that fits in memory)",
                   a->rank, CN_MAX_RANK);
  cn_sbuf dict = {0};
  cn_sbuf_printf(&dict, "{'descr': '%c%s', 'fortran_order': False, 'shape': (",
                 dtype->width == 1 ? '|' : '<', dtype->code);
  for (int k = 0; k < a->rank; k++) cn_sbuf_printf(&dict, "%s%" PRId64, k ? ", " : "", a->dims[k]);
  cn_sbuf_puts(&dict, a->rank == 1 ? ",), }" : "), }");
  /* Blanks and a newline so that the cells start at a multiple of 64 bytes: 10 bytes of magic,
   * version and u16 length come first (the dict of at most 16 dims stays far below 65535 bytes,
   * so version 1.0 always fits). */
  while ((10 + dict.len + 1) % 64 != 0) cn_sbuf_putc(&dict, ' ');
  cn_sbuf_putc(&dict, '\n');
  if (dict.failed) {
    cn_sbuf_free(&dict);
    return cn_fail(ctx, CN_ERR_NOMEM, "out of memory building a .npy header");
  }
  const char version_and_length[4] = {1, 0, (char)(dict.len & 0xff), (char)(dict.len >> 8)};
  for (int k = 0; k < 6; k++) cn_sbuf_putc(sb, npy_magic[k]);
  for (int k = 0; k < 4; k++) cn_sbuf_putc(sb, version_and_length[k]);
  cn_sbuf_puts(sb, dict.data);
  cn_sbuf_free(&dict);
  if (sb->failed) return cn_fail(ctx, CN_ERR_NOMEM, "out of memory building a .npy header");
  return CN_OK;
}

cn_status cn_data_save_npy(cn_ctx *ctx, const char *path, const cn_array *a) {
  cn_sbuf prefix = {0};
  cn_status s = cn_data_npy_prefix(ctx, a, &prefix);
  size_t numel = (size_t)cn_array_numel(a), width = cn_prec_bytes(a->prec);
  if (s == CN_OK && numel && !a->cells)
    s = cn_fail(ctx, CN_ERR_INVALID, "%s: cannot save: the array has %zu cells but no storage",
                path, numel);
  cn_data_writer w;
  if (s == CN_OK) s = cn_data_writer_open(ctx, path, &w);
  if (s != CN_OK) {
    cn_sbuf_free(&prefix);
    return s;
  }
  s = cn_data_write(ctx, &w, prefix.data, prefix.len);
  cn_sbuf_free(&prefix);
  /* Little-endian through a bounce buffer, so that a big-endian host writes the same file. */
  unsigned char chunk[1 << 16];
  size_t per_chunk = sizeof chunk / width;
  for (size_t i = 0; s == CN_OK && i < numel; i += per_chunk) {
    size_t n = numel - i < per_chunk ? numel - i : per_chunk;
    cn_data_copy_order(chunk, (const unsigned char *)a->cells + i * width, n, width, false);
    s = cn_data_write(ctx, &w, chunk, n * width);
  }
  if (s != CN_OK) {
    cn_data_writer_abort(&w);
    return s;
  }
  return cn_data_writer_commit(ctx, &w);
}
