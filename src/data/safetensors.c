/* safetensors files (cannl.h, "Data files and checkpoints"): an 8-byte little-endian header
 * length N, N bytes of JSON header, then the data bytes every tensor's data_offsets point into.
 *
 * Saving writes "__metadata__" first (with "cannl_crc32" before the caller's entries), then the
 * tensors in the order given, contiguous from offset 0, the header padded with spaces to a
 * multiple of 8 so that the data starts 8-aligned. The file goes through the module's atomic
 * writer (data.h: a temporary file, fsync, rename, fsync of the directory): PATH is at every
 * moment the old file or the new one, whole. Only one node's cells are held in memory at a
 * time: the CRC is written into the header's placeholder last.
 *
 * Loading checks everything before it writes anything: the header length against the file size
 * (before allocating for it), the JSON (json.c), each entry (a known dtype, a shape, offsets
 * whose span is the shape's size, inside the data), that the entries cover the data exactly as
 * the reference implementation requires (sorted by offset, each starting where the previous one
 * ends, the last ending at the end of the file), the CRC when the file has one (files of other
 * tools do not), and every requested node's name, dtype and shape. Only then are nodes filled.
 * The header's tree lives in the context's arena only during the call (cn_arena_reset), so
 * repeated loads do not grow the context. Cells are little-endian in the file and converted on a
 * big-endian host. */
#include "data/data.h"
#include "data/json.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* The reference implementation's limit on the header length. */
#define MAX_HEADER 100000000u
/* Tensor names, in bytes. */
#define MAX_NAME 4096
/* The rank a file's shape may have (a node's rank plus uint4x32's word axis fits easily). */
#define MAX_FILE_RANK 64
#define CRC_KEY       "cannl_crc32"
#define META_KEY      "__metadata__"

typedef struct {
  const char *name;
  size_t bytes;
  int prec; /* the cannl precision, -1 for a dtype the format has and cannl has not */
} dtype_info;

/* Every dtype of the format with a whole number of bytes: files holding the ones cannl lacks
 * are still validated, and only a request for such a tensor fails. */
static const dtype_info dtypes[] = {
    {"BOOL", 1, -1},
    {"U8", 1, CN_PREC_BYTE},
    {"I8", 1, -1},
    {"F8_E5M2", 1, CN_PREC_FP8},
    {"F8_E4M3", 1, -1},
    {"I16", 2, -1},
    {"U16", 2, CN_PREC_UINT16},
    {"F16", 2, CN_PREC_HALF},
    {"BF16", 2, CN_PREC_BFLOAT16},
    {"I32", 4, CN_PREC_INT32},
    {"U32", 4, CN_PREC_UINT32},
    {"F32", 4, CN_PREC_SINGLE},
    {"I64", 8, CN_PREC_INT64},
    {"U64", 8, CN_PREC_UINT64},
    {"F64", 8, CN_PREC_DOUBLE},
};
#define N_DTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))

/* A node as the file holds it: its dtype, and its dims (uint4x32 as U32 with a trailing 4). */
typedef struct {
  const dtype_info *dtype;
  int rank;
  int64_t dims[CN_MAX_RANK + 1];
  size_t bytes; /* of its cells */
} file_form;

static void form_of(cn_node *node, file_form *f) {
  cn_prec prec = cn_node_prec(node);
  int want = prec == CN_PREC_UINT4X32 ? CN_PREC_UINT32 : (int)prec;
  f->dtype = NULL;
  for (int d = 0; d < N_DTYPES; d++)
    if (dtypes[d].prec == want) f->dtype = &dtypes[d];
  f->rank = cn_node_rank(node);
  for (int a = 0; a < f->rank; a++) f->dims[a] = cn_node_dim(node, a);
  if (prec == CN_PREC_UINT4X32) f->dims[f->rank++] = 4;
  /* the node's buffer exists or can exist, so its size fits size_t */
  f->bytes = (size_t)cn_node_numel(node) * cn_prec_bytes(prec);
  CN_ASSERT(f->dtype); /* the table above has a dtype for every precision */
}

/* "[2, 3]" into buf, cut with "..." when it does not fit. */
static const char *dims_text(char *buf, size_t size, int rank, const int64_t *dims) {
  size_t n = (size_t)snprintf(buf, size, "[");
  for (int a = 0; a < rank && n < size; a++)
    n += (size_t)snprintf(buf + n, size - n, "%s%lld", a ? ", " : "", (long long)dims[a]);
  if (n + 1 < size)
    snprintf(buf + n, size - n, "]");
  else
    snprintf(buf + size - 5, 5, "...]");
  return buf;
}

/* zlib's crc32 over a size_t length (its own takes an unsigned int). */
static uLong crc_update(uLong crc, const unsigned char *b, size_t n) {
  while (n > 0) {
    uInt chunk = n > (1u << 30) ? 1u << 30 : (uInt)n;
    crc = crc32(crc, b, chunk);
    b += chunk;
    n -= chunk;
  }
  return crc;
}

/* ---- Writing ---- */

/* The checks of a save's arguments: names and keys present, unique, valid UTF-8 (so that the
 * header is JSON), tensor names of 1 to MAX_NAME bytes as loading requires, the reserved keys
 * unused, nodes with host buffers. Metadata keys have no length limit: loading has none. */
static cn_status check_text(cn_ctx *ctx, const char *path, const char *what, int i, const char *s) {
  size_t bad;
  if (!s) return cn_fail(ctx, CN_ERR_INVALID, "saving '%s': %s %d is NULL", path, what, i);
  if (!cn_json_utf8_valid(s, strlen(s), &bad))
    return cn_fail(ctx, CN_ERR_INVALID, "saving '%s': %s %d is not valid UTF-8 (byte %zu)", path,
                   what, i, bad);
  return CN_OK;
}

static cn_status check_name(cn_ctx *ctx, const char *path, const char *what, int i, const char *s,
                            bool is_tensor, cn_map *seen) {
  cn_status st = check_text(ctx, path, what, i, s);
  if (st != CN_OK) return st;
  size_t len = strlen(s);
  if (is_tensor && (len == 0 || len > MAX_NAME))
    return cn_fail(ctx, CN_ERR_INVALID, "saving '%s': %s %d \"%s\" has %zu bytes (1 to %d allowed)",
                   path, what, i, len > 64 ? "..." : s, len, MAX_NAME);
  if (cn_map_get(seen, s))
    return cn_fail(ctx, CN_ERR_INVALID, "saving '%s': %s \"%s\" appears twice (entries %d and %d)",
                   path, what, s, (int)(intptr_t)cn_map_get(seen, s) - 1, i);
  return cn_map_put(ctx, seen, s, (void *)(intptr_t)(i + 1)) ? CN_OK : CN_ERR_NOMEM;
}

static cn_status check_save_args(cn_ctx *ctx, const char *path, int n_nodes,
                                 const cn_named_node *nodes, int n_meta,
                                 const cn_metadata_entry *meta) {
  if (n_nodes < 0 || (n_nodes > 0 && !nodes) || n_meta < 0 || (n_meta > 0 && !meta))
    return cn_fail(ctx, CN_ERR_INVALID,
                   "saving '%s': %d nodes at %p and %d metadata entries at %p are not arrays", path,
                   n_nodes, (const void *)nodes, n_meta, (const void *)meta);
  cn_map names = {.strings = true}, keys = {.strings = true};
  for (int i = 0; i < n_nodes; i++) {
    cn_status st = check_name(ctx, path, "tensor name", i, nodes[i].name, true, &names);
    if (st != CN_OK) return st;
    if (strcmp(nodes[i].name, META_KEY) == 0)
      return cn_fail(ctx, CN_ERR_INVALID,
                     "saving '%s': tensor name %d is \"" META_KEY "\", the format's metadata key",
                     path, i);
    if (!nodes[i].node)
      return cn_fail(ctx, CN_ERR_INVALID, "saving '%s': tensor \"%s\" has no node (NULL)", path,
                     nodes[i].name);
    if (cn_node_memory(nodes[i].node) != CN_MEM_MATERIALIZED)
      return cn_fail(ctx, CN_ERR_INVALID,
                     "saving '%s': tensor \"%s\" (node %s) is not materialized: it has no host "
                     "buffer to save",
                     path, nodes[i].name, cn_node_label(nodes[i].node));
  }
  for (int i = 0; i < n_meta; i++) {
    cn_status st = check_name(ctx, path, "metadata key", i, meta[i].key, false, &keys);
    if (st == CN_OK) st = check_text(ctx, path, "metadata value", i, meta[i].value);
    if (st != CN_OK) return st;
    if (strcmp(meta[i].key, CRC_KEY) == 0)
      return cn_fail(ctx, CN_ERR_INVALID,
                     "saving '%s': metadata key \"" CRC_KEY "\" is reserved for the checksum cannl "
                     "writes",
                     path);
  }
  return CN_OK;
}

/* The header text, padded to a multiple of 8, with "00000000" for the CRC at *crc_at. */
static bool build_header(cn_sbuf *sb, int n_nodes, const cn_named_node *nodes, int n_meta,
                         const cn_metadata_entry *meta, size_t *crc_at) {
  cn_sbuf_puts(sb, "{\"" META_KEY "\":{\"" CRC_KEY "\":\"");
  *crc_at = sb->len;
  cn_sbuf_puts(sb, "00000000\"");
  for (int i = 0; i < n_meta; i++) {
    cn_sbuf_putc(sb, ',');
    cn_sbuf_json_string(sb, meta[i].key);
    cn_sbuf_putc(sb, ':');
    cn_sbuf_json_string(sb, meta[i].value);
  }
  cn_sbuf_putc(sb, '}');
  uint64_t offset = 0;
  for (int i = 0; i < n_nodes; i++) {
    file_form f;
    form_of(nodes[i].node, &f);
    cn_sbuf_putc(sb, ',');
    cn_sbuf_json_string(sb, nodes[i].name);
    cn_sbuf_printf(sb, ":{\"dtype\":\"%s\",\"shape\":[", f.dtype->name);
    for (int a = 0; a < f.rank; a++)
      cn_sbuf_printf(sb, "%s%lld", a ? "," : "", (long long)f.dims[a]);
    cn_sbuf_printf(sb, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offset,
                   (unsigned long long)(offset + f.bytes));
    offset += f.bytes;
  }
  cn_sbuf_putc(sb, '}');
  while (sb->len % 8) cn_sbuf_putc(sb, ' ');
  return !sb->failed;
}

/* Writes the nodes' cells after the header, then the CRC of all of them into the header's
 * placeholder at crc_at. */
static cn_status write_data(cn_ctx *ctx, cn_data_writer *w, int n_nodes, const cn_named_node *nodes,
                            uint64_t crc_at) {
  uLong crc = crc32(0, Z_NULL, 0);
  for (int i = 0; i < n_nodes; i++) {
    file_form f;
    form_of(nodes[i].node, &f);
    if (f.bytes == 0) continue;
    unsigned char *cells = cn_malloc(ctx, f.bytes);
    if (!cells) return CN_ERR_NOMEM;
    cn_status st =
        cn_node_get_cells(nodes[i].node, false, cells, (size_t)cn_node_numel(nodes[i].node));
    if (st == CN_OK) {
      cn_data_copy_order(cells, cells, f.bytes / f.dtype->bytes, f.dtype->bytes, false);
      crc = crc_update(crc, cells, f.bytes);
      st = cn_data_write(ctx, w, cells, f.bytes);
    }
    free(cells);
    if (st != CN_OK) return st;
  }
  char hex[9];
  snprintf(hex, sizeof hex, "%08lx", (unsigned long)crc);
  return cn_data_write_at(ctx, w, hex, 8, crc_at);
}

cn_status cn_data_save_safetensors(cn_ctx *ctx, const char *path, int n_nodes,
                                   const cn_named_node *nodes, int n_meta,
                                   const cn_metadata_entry *meta) {
  if (!path) return cn_fail(ctx, CN_ERR_INVALID, "cn_data_save_safetensors: the path is NULL");
  cn_arena_marker mark = cn_arena_mark(&ctx->arena);
  cn_status st = check_save_args(ctx, path, n_nodes, nodes, n_meta, meta);
  cn_arena_reset(&ctx->arena, mark);
  if (st != CN_OK) return st;
  uint64_t total = 0;
  for (int i = 0; i < n_nodes; i++) {
    file_form f;
    form_of(nodes[i].node, &f);
    if (total + f.bytes < total)
      return cn_fail(ctx, CN_ERR_INVALID, "saving '%s': the tensors hold more than 2^64 bytes",
                     path);
    total += f.bytes;
  }
  cn_sbuf header = {0};
  size_t crc_at;
  if (!build_header(&header, n_nodes, nodes, n_meta, meta, &crc_at)) {
    cn_sbuf_free(&header);
    return cn_fail(ctx, CN_ERR_NOMEM, "saving '%s': out of memory building the header", path);
  }
  if (header.len > MAX_HEADER) {
    cn_sbuf_free(&header);
    return cn_fail(ctx, CN_ERR_INVALID,
                   "saving '%s': the header would be %zu bytes, more than the format's limit of %u",
                   path, header.len, MAX_HEADER);
  }
  unsigned char len8[8];
  for (int b = 0; b < 8; b++) len8[b] = (unsigned char)((uint64_t)header.len >> (8 * b));
  cn_data_writer w;
  st = cn_data_writer_open(ctx, path, &w);
  if (st == CN_OK && (st = cn_data_write(ctx, &w, len8, 8)) == CN_OK &&
      (st = cn_data_write(ctx, &w, header.data, header.len)) == CN_OK)
    st = write_data(ctx, &w, n_nodes, nodes, 8 + crc_at);
  cn_sbuf_free(&header);
  if (st != CN_OK) {
    cn_data_writer_abort(&w);
    return st;
  }
  return cn_data_writer_commit(ctx, &w);
}

/* ---- Reading ---- */

/* A tensor of the file's header. */
typedef struct {
  const char *name;
  size_t at; /* the file offset of its key, for messages */
  const dtype_info *dtype;
  int rank;
  int64_t *dims; /* arena */
  uint64_t begin, end;
} entry;

/* What the header says. */
typedef struct {
  entry *entries; /* arena */
  int n_entries;
  const cn_json *meta; /* NULL without "__metadata__" */
  const char *crc;     /* the value of cannl_crc32, NULL when absent */
  uint64_t data_len;   /* the bytes after the header */
} header_info;

static cn_status bad_at(cn_ctx *ctx, const char *path, size_t at, const char *fmt, ...)
    CN_PRINTF(4, 5);
static cn_status bad_at(cn_ctx *ctx, const char *path, size_t at, const char *fmt, ...) {
  char what[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return cn_fail(ctx, CN_ERR_INVALID, "%s: at byte %zu: %s", path, at, what);
}

static const char *kind_name(cn_json_kind kind) {
  switch (kind) {
  case CN_JSON_OBJECT: return "an object";
  case CN_JSON_ARRAY: return "an array";
  case CN_JSON_STRING: return "a string";
  case CN_JSON_INT: return "an integer";
  }
  return "";
}

/* The file offset of a header value: the header starts after the 8-byte length. */
static size_t pos(const cn_json *v) {
  return 8 + v->offset;
}

/* An array of `count` (0: any count up to `max`) non-negative integers into out. */
static cn_status read_naturals(cn_ctx *ctx, const char *path, const cn_json *v, const char *what,
                               const char *name, int count, int max, int64_t *out) {
  if (v->kind != CN_JSON_ARRAY)
    return bad_at(ctx, path, pos(v), "expected the %s of tensor \"%s\" to be an array, found %s",
                  what, name, kind_name(v->kind));
  if ((count && v->count != count) || v->count > max)
    return bad_at(ctx, path, pos(v), "the %s of tensor \"%s\" has %d elements, expected %s%d", what,
                  name, v->count, count ? "" : "at most ", count ? count : max);
  for (int i = 0; i < v->count; i++) {
    const cn_json *x = v->members[i].value;
    if (x->kind != CN_JSON_INT || x->integer < 0)
      return bad_at(ctx, path, pos(x),
                    "expected a non-negative integer in the %s of tensor \"%s\", found %s", what,
                    name, x->kind == CN_JSON_INT ? "a negative one" : kind_name(x->kind));
    out[i] = x->integer;
  }
  return CN_OK;
}

static cn_status parse_entry(cn_ctx *ctx, const char *path, const cn_json_member *m,
                             uint64_t data_len, entry *e) {
  e->name = m->key;
  e->at = 8 + m->key_offset;
  size_t len = strlen(m->key);
  if (len == 0 || len > MAX_NAME)
    return bad_at(ctx, path, e->at, "a tensor name of %zu bytes (1 to %d allowed)", len, MAX_NAME);
  const cn_json *v = m->value, *fields[3] = {NULL, NULL, NULL};
  static const char *const field_names[3] = {"dtype", "shape", "data_offsets"};
  if (v->kind != CN_JSON_OBJECT)
    return bad_at(ctx, path, pos(v),
                  "expected the entry of tensor \"%s\" to be an object {\"dtype\", \"shape\", "
                  "\"data_offsets\"}, found %s",
                  e->name, kind_name(v->kind));
  for (int i = 0; i < v->count; i++) {
    int k = 0;
    while (k < 3 && strcmp(v->members[i].key, field_names[k]) != 0) k++;
    if (k == 3)
      return bad_at(ctx, path, 8 + v->members[i].key_offset,
                    "unknown field \"%s\" in the entry of tensor \"%s\" (expected dtype, shape and "
                    "data_offsets)",
                    v->members[i].key, e->name);
    fields[k] = v->members[i].value;
  }
  for (int k = 0; k < 3; k++)
    if (!fields[k])
      return bad_at(ctx, path, pos(v), "the entry of tensor \"%s\" lacks \"%s\"", e->name,
                    field_names[k]);
  const cn_json *dtype = fields[0];
  if (dtype->kind != CN_JSON_STRING)
    return bad_at(ctx, path, pos(dtype),
                  "expected the dtype of tensor \"%s\" to be a string, found %s", e->name,
                  kind_name(dtype->kind));
  e->dtype = NULL;
  for (int d = 0; d < N_DTYPES; d++)
    if (strcmp(dtypes[d].name, dtype->string) == 0) e->dtype = &dtypes[d];
  if (!e->dtype)
    return bad_at(
        ctx, path, pos(dtype),
        "unknown dtype \"%s\" of tensor \"%s\" (known: BOOL U8 I8 F8_E5M2 F8_E4M3 I16 U16 "
        "F16 BF16 I32 U32 F32 I64 U64 F64)",
        dtype->string, e->name);
  int64_t offsets[2];
  /* as many dims as the shape holds (read_naturals refuses a longer one before writing) */
  const cn_json *dims = fields[1];
  int rank = dims->kind == CN_JSON_ARRAY && dims->count <= MAX_FILE_RANK ? dims->count : 0;
  e->dims = cn_alloc(ctx, (size_t)(rank + 1) * sizeof *e->dims);
  if (!e->dims) return CN_ERR_NOMEM;
  cn_status st = read_naturals(ctx, path, dims, "shape", e->name, 0, MAX_FILE_RANK, e->dims);
  if (st == CN_OK) st = read_naturals(ctx, path, fields[2], "data_offsets", e->name, 2, 2, offsets);
  if (st != CN_OK) return st;
  e->rank = rank;
  e->begin = (uint64_t)offsets[0];
  e->end = (uint64_t)offsets[1];
  char shape[256];
  dims_text(shape, sizeof shape, e->rank, e->dims);
  if (e->begin > e->end || e->end > data_len)
    return bad_at(
        ctx, path, pos(fields[2]),
        "data_offsets [%llu, %llu] of tensor \"%s\" are not a range within the %llu bytes "
        "of data",
        (unsigned long long)e->begin, (unsigned long long)e->end, e->name,
        (unsigned long long)data_len);
  /* the shape's size, 0 for an empty one whatever its other dims */
  uint64_t bytes = e->dtype->bytes;
  bool overflow = false;
  for (int a = 0; a < e->rank; a++)
    if (e->dims[a] == 0) bytes = 0;
  for (int a = 0; a < e->rank && bytes && !overflow; a++) {
    uint64_t d = (uint64_t)e->dims[a];
    overflow = bytes > UINT64_MAX / d;
    bytes *= overflow ? 1 : d;
  }
  if (overflow)
    return bad_at(ctx, path, pos(dims),
                  "tensor \"%s\" of dtype %s and shape %s holds 2^64 bytes or more", e->name,
                  e->dtype->name, shape);
  if (bytes != e->end - e->begin)
    return bad_at(ctx, path, pos(fields[2]),
                  "tensor \"%s\" of dtype %s and shape %s needs %llu bytes, but its data_offsets "
                  "[%llu, %llu] span %llu",
                  e->name, e->dtype->name, shape, (unsigned long long)bytes,
                  (unsigned long long)e->begin, (unsigned long long)e->end,
                  (unsigned long long)(e->end - e->begin));
  return CN_OK;
}

static cn_status parse_metadata(cn_ctx *ctx, const char *path, const cn_json *meta,
                                header_info *h) {
  if (meta->kind != CN_JSON_OBJECT)
    return bad_at(ctx, path, pos(meta), "expected \"" META_KEY "\" to be an object, found %s",
                  kind_name(meta->kind));
  for (int i = 0; i < meta->count; i++) {
    const cn_json *v = meta->members[i].value;
    if (v->kind != CN_JSON_STRING)
      return bad_at(ctx, path, pos(v),
                    "expected the metadata value of \"%s\" to be a string, found %s",
                    meta->members[i].key, kind_name(v->kind));
  }
  h->meta = meta;
  const cn_json *crc = cn_json_get(meta, CRC_KEY);
  if (crc) {
    bool hex = strlen(crc->string) == 8;
    for (const char *c = crc->string; *c && hex; c++)
      hex = (*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f');
    if (!hex)
      return bad_at(ctx, path, pos(crc),
                    "metadata \"" CRC_KEY "\" is \"%s\", expected 8 lowercase "
                    "hex digits",
                    crc->string);
    h->crc = crc->string;
  }
  return CN_OK;
}

static int by_offsets(const void *a, const void *b) {
  const entry *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

/* The entries sorted by offsets must tile the data: each starts where the previous one ends. */
static cn_status check_coverage(cn_ctx *ctx, const char *path, header_info *h) {
  qsort(h->entries, (size_t)h->n_entries, sizeof *h->entries, by_offsets);
  uint64_t at = 0;
  for (int i = 0; i < h->n_entries; i++) {
    const entry *e = &h->entries[i];
    if (e->begin < at)
      return bad_at(ctx, path, e->at,
                    "the data of tensor \"%s\" [%llu, %llu] overlaps that of tensor \"%s\" [%llu, "
                    "%llu]",
                    e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                    h->entries[i - 1].name, (unsigned long long)h->entries[i - 1].begin,
                    (unsigned long long)h->entries[i - 1].end);
    if (e->begin > at)
      return bad_at(ctx, path, e->at,
                    "bytes %llu to %llu of the data belong to no tensor (tensor \"%s\" starts at "
                    "%llu)",
                    (unsigned long long)at, (unsigned long long)e->begin, e->name,
                    (unsigned long long)e->begin);
    at = e->end;
  }
  if (at != h->data_len)
    return cn_fail(ctx, CN_ERR_INVALID,
                   "%s: the tensors cover %llu bytes of data, but the file holds %llu after its "
                   "header",
                   path, (unsigned long long)at, (unsigned long long)h->data_len);
  return CN_OK;
}

/* Reads the length and the header (after checking the length against the file size) and
 * validates all of it. */
static cn_status read_header(cn_ctx *ctx, const char *path, FILE *f, header_info *h) {
  struct stat sb;
  if (fstat(fileno(f), &sb) != 0)
    return cn_fail(ctx, CN_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
  if (!S_ISREG(sb.st_mode)) return cn_fail(ctx, CN_ERR_IO, "%s: not a regular file", path);
  uint64_t size = (uint64_t)sb.st_size;
  unsigned char len8[8];
  if (size < 8 || fread(len8, 1, 8, f) != 8)
    return cn_fail(
        ctx, CN_ERR_INVALID,
        "%s: at byte 0: expected an 8-byte little-endian header length, but the file has "
        "%llu bytes",
        path, (unsigned long long)size);
  uint64_t n = 0;
  for (int b = 7; b >= 0; b--) n = n << 8 | len8[b];
  if (n > size - 8)
    return cn_fail(ctx, CN_ERR_INVALID,
                   "%s: at byte 0: a header length of %llu bytes, but only %llu bytes follow it",
                   path, (unsigned long long)n, (unsigned long long)(size - 8));
  if (n > MAX_HEADER)
    return cn_fail(
        ctx, CN_ERR_INVALID,
        "%s: at byte 0: a header length of %llu bytes, more than the format's limit of %u", path,
        (unsigned long long)n, MAX_HEADER);
  h->data_len = size - 8 - n;
  char *text = cn_malloc(ctx, (size_t)n + 1);
  if (!text) return CN_ERR_NOMEM;
  if (fread(text, 1, (size_t)n, f) != (size_t)n) {
    cn_status st = cn_fail(ctx, CN_ERR_IO, "%s: cannot read the %llu-byte header: %s", path,
                           (unsigned long long)n,
                           ferror(f) ? strerror(errno) : "the file is shorter than it was");
    free(text);
    return st;
  }
  cn_json *top = cn_json_parse(ctx, text, (size_t)n, path, 8);
  free(text);
  if (!top) return cn_ctx_status(ctx);
  if (top->kind != CN_JSON_OBJECT)
    return bad_at(ctx, path, pos(top), "expected the header to be an object, found %s",
                  kind_name(top->kind));
  h->entries = cn_alloc(ctx, (size_t)(top->count ? top->count : 1) * sizeof *h->entries);
  if (!h->entries) return CN_ERR_NOMEM;
  for (int i = 0; i < top->count; i++) {
    const cn_json_member *m = &top->members[i];
    cn_status st = strcmp(m->key, META_KEY) == 0
                       ? parse_metadata(ctx, path, m->value, h)
                       : parse_entry(ctx, path, m, h->data_len, &h->entries[h->n_entries++]);
    if (st != CN_OK) return st;
  }
  return check_coverage(ctx, path, h);
}

/* Finds every requested node's tensor and checks its dtype and shape. */
static cn_status plan_fills(cn_ctx *ctx, const char *path, const header_info *h, int n_nodes,
                            const cn_named_node *nodes, uint64_t *starts) {
  cn_map index = {.strings = true};
  for (int i = 0; i < h->n_entries; i++)
    if (!cn_map_put(ctx, &index, h->entries[i].name, &h->entries[i])) return CN_ERR_NOMEM;
  for (int i = 0; i < n_nodes; i++) {
    const entry *e = cn_map_get(&index, nodes[i].name);
    if (!e)
      return cn_fail(ctx, CN_ERR_INVALID, "%s: no tensor \"%s\" in the file (it holds %d tensors)",
                     path, nodes[i].name, h->n_entries);
    file_form f;
    form_of(nodes[i].node, &f);
    bool same = f.dtype == e->dtype && f.rank == e->rank;
    for (int a = 0; same && a < f.rank; a++) same = f.dims[a] == e->dims[a];
    if (!same) {
      char file_shape[256], node_shape[256];
      return bad_at(ctx, path, e->at,
                    "tensor \"%s\" is %s %s in the file, but its node '%s' is %s %s (precision %s)",
                    e->name, e->dtype->name,
                    dims_text(file_shape, sizeof file_shape, e->rank, e->dims),
                    cn_node_label(nodes[i].node), f.dtype->name,
                    dims_text(node_shape, sizeof node_shape, f.rank, f.dims),
                    cn_prec_name(cn_node_prec(nodes[i].node)));
    }
    starts[i] = e->begin; /* where its cells lie in the data */
  }
  return CN_OK;
}

/* The metadata entries but the CRC, copied into one malloc'd block (keys and values after the
 * array), so that they survive the reset of the arena holding the header's tree. */
static cn_metadata_entry *copy_metadata(cn_ctx *ctx, const cn_json *meta, int *count) {
  size_t bytes = 0;
  int n = 0;
  for (int i = 0; meta && i < meta->count; i++)
    if (strcmp(meta->members[i].key, CRC_KEY) != 0) {
      bytes += strlen(meta->members[i].key) + strlen(meta->members[i].value->string) + 2;
      n++;
    }
  cn_metadata_entry *out = cn_malloc(ctx, (size_t)n * sizeof *out + bytes + 1);
  if (!out) return NULL;
  char *text = (char *)(out + n);
  n = 0;
  for (int i = 0; meta && i < meta->count; i++) {
    if (strcmp(meta->members[i].key, CRC_KEY) == 0) continue;
    const char *kv[2] = {meta->members[i].key, meta->members[i].value->string};
    for (int k = 0; k < 2; k++) {
      size_t len = strlen(kv[k]) + 1;
      memcpy(text, kv[k], len);
      kv[k] = text;
      text += len;
    }
    out[n++] = (cn_metadata_entry){kv[0], kv[1]};
  }
  *count = n;
  return out;
}

/* The file's data, read whole and checked against the CRC when the file has one. */
static cn_status read_data(cn_ctx *ctx, const char *path, FILE *f, const header_info *h,
                           unsigned char **data) {
  if (h->data_len > SIZE_MAX - 1)
    return cn_fail(ctx, CN_ERR_NOMEM, "%s: %llu bytes of data do not fit this machine's memory",
                   path, (unsigned long long)h->data_len);
  *data = cn_malloc(ctx, (size_t)h->data_len + 1);
  if (!*data) return CN_ERR_NOMEM;
  if (fread(*data, 1, (size_t)h->data_len, f) != (size_t)h->data_len)
    return cn_fail(ctx, CN_ERR_IO, "%s: cannot read its %llu bytes of data: %s", path,
                   (unsigned long long)h->data_len,
                   ferror(f) ? strerror(errno) : "the file is shorter than it was");
  if (!h->crc) return CN_OK;
  char hex[9];
  snprintf(hex, sizeof hex, "%08lx",
           (unsigned long)crc_update(crc32(0, Z_NULL, 0), *data, (size_t)h->data_len));
  if (strcmp(hex, h->crc) != 0)
    return cn_fail(ctx, CN_ERR_INVALID,
                   "%s: the file is corrupted: the CRC-32 of its %llu bytes of data is %s, but its "
                   "metadata says " CRC_KEY " %s",
                   path, (unsigned long long)h->data_len, hex, h->crc);
  return CN_OK;
}

static cn_status check_load_args(cn_ctx *ctx, const char *path, int n_nodes,
                                 const cn_named_node *nodes) {
  if (!path) return cn_fail(ctx, CN_ERR_INVALID, "cn_data_load_safetensors: the path is NULL");
  if (n_nodes < 0 || (n_nodes > 0 && !nodes))
    return cn_fail(ctx, CN_ERR_INVALID, "loading %s: %d nodes at %p are not an array", path,
                   n_nodes, (const void *)nodes);
  for (int i = 0; i < n_nodes; i++) {
    if (!nodes[i].name || !nodes[i].node)
      return cn_fail(ctx, CN_ERR_INVALID, "loading %s: request %d has no %s (NULL)", path, i,
                     nodes[i].name ? "node" : "name");
    if (cn_node_memory(nodes[i].node) != CN_MEM_MATERIALIZED)
      return cn_fail(ctx, CN_ERR_INVALID,
                     "loading %s: the node '%s' for tensor \"%s\" is not materialized: it has no "
                     "host buffer to fill",
                     path, cn_node_label(nodes[i].node), nodes[i].name);
  }
  return CN_OK;
}

/* Converts every tensor's cells from the file's little-endian order to the host's, in place
 * (tensors do not overlap; nothing to do on a little-endian host). */
static void to_host_order(const header_info *h, unsigned char *data) {
  for (int i = 0; i < h->n_entries; i++) {
    const entry *e = &h->entries[i];
    unsigned char *cells = data + e->begin;
    cn_data_copy_order(cells, cells, (size_t)(e->end - e->begin) / e->dtype->bytes, e->dtype->bytes,
                       false);
  }
}

static cn_status fill_nodes(int n_nodes, const cn_named_node *nodes, const uint64_t *starts,
                            const unsigned char *data) {
  for (int i = 0; i < n_nodes; i++) {
    cn_status st = cn_node_set_cells(nodes[i].node, false, data + starts[i],
                                     (size_t)cn_node_numel(nodes[i].node));
    if (st != CN_OK) return st;
  }
  return CN_OK;
}

cn_status cn_data_load_safetensors(cn_ctx *ctx, const char *path, int n_nodes,
                                   const cn_named_node *nodes, int *n_meta_out,
                                   cn_metadata_entry **meta_out) {
  cn_status st = check_load_args(ctx, path, n_nodes, nodes);
  if (st != CN_OK) return st;
  FILE *f = cn_data_open_read(path);
  if (!f) return cn_fail(ctx, CN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  uint64_t *starts = cn_malloc(ctx, (size_t)(n_nodes ? n_nodes : 1) * sizeof *starts);
  unsigned char *data = NULL;
  cn_metadata_entry *meta = NULL;
  int n_meta = 0;
  cn_arena_marker mark = cn_arena_mark(&ctx->arena);
  header_info h = {0};
  st = starts ? read_header(ctx, path, f, &h) : CN_ERR_NOMEM;
  if (st == CN_OK) st = plan_fills(ctx, path, &h, n_nodes, nodes, starts);
  if (st == CN_OK) st = read_data(ctx, path, f, &h, &data);
  if (st == CN_OK && !(meta = copy_metadata(ctx, h.meta, &n_meta))) st = CN_ERR_NOMEM;
  if (st == CN_OK) to_host_order(&h, data);
  /* from here on nothing refers to the header's tree */
  cn_arena_reset(&ctx->arena, mark);
  fclose(f);
  cn_metadata_entry *out = NULL;
  if (st == CN_OK && n_meta_out && meta_out && n_meta > 0) {
    if (!(out = cn_alloc(ctx, (size_t)n_meta * sizeof *out))) st = CN_ERR_NOMEM;
    for (int i = 0; st == CN_OK && i < n_meta; i++) {
      out[i].key = cn_strdup(ctx, meta[i].key);
      out[i].value = out[i].key ? cn_strdup(ctx, meta[i].value) : NULL;
      if (!out[i].value) st = CN_ERR_NOMEM;
    }
  }
  if (st == CN_OK) st = fill_nodes(n_nodes, nodes, starts, data);
  if (st == CN_OK && n_meta_out && meta_out) {
    *n_meta_out = n_meta;
    *meta_out = out;
  }
  free(meta);
  free(data);
  free(starts);
  return st;
}
