/* Tensor nodes: creation, shape and padding queries, the value and merge buffers and the host
 * transfers (cn_node_set/get_values/cells), which reach the buffers through the host accessor
 * (cn_node_host, resident.c) like every other host access.
 *
 * Invariants: a node lives in the context arena; its dims never change; its buffers are malloc'd
 * zero-filled on first use over the padded extent, after which the padding is frozen, and each
 * buffer is registered as a cleanup of the context (cn_ctx_add_cleanup), whose destruction frees
 * it: the context never knows nodes, only what to free; the padded cell count times the cell size
 * fits in size_t (checked whenever dims or padding are set), so buffer arithmetic cannot overflow.
 * Host transfers address the unpadded cells in row-major order: the margins are the routines'
 * business (convolution-is-a-contraction "Padding"). Query functions given an axis outside
 * 0..rank-1 return -1. */
#include "ir/ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

/* ---- Description for messages ---- */

static int describe_into(const cn_node *node, char *buf, size_t size) {
  if (node->label[0]) return snprintf(buf, size, "'%s' (#%d)", node->label, node->id);
  return snprintf(buf, size, "#%d", node->id);
}

/* Allocated straight from the arena, bypassing cn_alloc: a description is built while another
 * failure is being reported, and must neither replace that message with an out-of-memory one nor
 * fail; when memory is exhausted the label alone stands in. */
const char *cn_node_describe(const cn_node *node) {
  int n = describe_into(node, NULL, 0);
  char *text = n >= 0 ? cn_arena_alloc(&node->ctx->arena, (size_t)n + 1) : NULL;
  if (!text) return node->label[0] ? node->label : "a node";
  describe_into(node, text, (size_t)n + 1);
  return text;
}

/* ---- Creation and queries ---- */

/* The padded cell count (given the margins in pad) if it and its byte size fit; false if not. */
static bool padded_cells(int rank, const int64_t *dims, const int64_t (*pad)[2], size_t bytes,
                         size_t *out) {
  size_t cells = 1;
  for (int a = 0; a < rank; a++) {
    int64_t extent;
    if (__builtin_add_overflow(dims[a], pad[a][0], &extent) ||
        __builtin_add_overflow(extent, pad[a][1], &extent) || (uint64_t)extent > SIZE_MAX ||
        !cn_mul_size(cells, (size_t)extent, &cells))
      return false;
  }
  size_t total;
  if (!cn_mul_size(cells, bytes, &total) || cells > (size_t)INT64_MAX) return false;
  *out = cells;
  return true;
}

cn_node *cn_node_create(cn_ctx *ctx, const char *label, cn_prec prec, int rank,
                        const int64_t *dims) {
  if (!ctx) return NULL;
  const char *name = label ? label : "";
  if ((int)prec < 0 || prec >= CN_PREC_COUNT) {
    cn_fail(ctx, CN_ERR_INVALID, "node '%s': %d is not a precision (0..%d)", name, (int)prec,
            CN_PREC_COUNT - 1);
    return NULL;
  }
  if (rank < 0 || rank > CN_MAX_RANK) {
    cn_fail(ctx, CN_ERR_INVALID, "node '%s': rank %d is outside 0..%d", name, rank, CN_MAX_RANK);
    return NULL;
  }
  if (rank > 0 && !dims) {
    cn_fail(ctx, CN_ERR_INVALID, "node '%s': rank %d but dims is NULL", name, rank);
    return NULL;
  }
  for (int a = 0; a < rank; a++)
    if (dims[a] < 0) {
      cn_fail(ctx, CN_ERR_INVALID, "node '%s': dim %lld of axis %d is negative", name,
              (long long)dims[a], a);
      return NULL;
    }
  static const int64_t no_pad[CN_MAX_RANK][2];
  size_t cells;
  if (!padded_cells(rank, dims, no_pad, cn_prec_bytes(prec), &cells)) {
    cn_fail(ctx, CN_ERR_INVALID, "node '%s': its %d dims hold too many cells for one buffer", name,
            rank);
    return NULL;
  }
  cn_node *node = cn_alloc(ctx, sizeof *node);
  char *copy = node ? cn_strdup(ctx, name) : NULL;
  if (!copy) return NULL;
  node->ctx = ctx;
  node->id = ctx->next_node_id++;
  node->label = copy;
  node->prec = prec;
  node->rank = rank;
  for (int a = 0; a < rank; a++) node->dims[a] = dims[a];
  node->mode = CN_MEM_MATERIALIZED;
  return node;
}

int cn_node_id(const cn_node *node) {
  return node->id;
}
const char *cn_node_label(const cn_node *node) {
  return node->label;
}
cn_prec cn_node_prec(const cn_node *node) {
  return node->prec;
}
int cn_node_rank(const cn_node *node) {
  return node->rank;
}

int64_t cn_node_dim(const cn_node *node, int axis) {
  return axis >= 0 && axis < node->rank ? node->dims[axis] : -1;
}

int64_t cn_node_numel(const cn_node *node) {
  int64_t n = 1;
  for (int a = 0; a < node->rank; a++) n *= node->dims[a];
  return n;
}

int64_t cn_node_padded_dim(const cn_node *node, int axis) {
  CN_ASSERT(axis >= 0 && axis < node->rank);
  return node->pad[axis][0] + node->dims[axis] + node->pad[axis][1];
}

size_t cn_node_buffer_cells(const cn_node *node) {
  size_t cells = 1;
  for (int a = 0; a < node->rank; a++) cells *= (size_t)cn_node_padded_dim(node, a);
  return cells;
}

void cn_node_strides(const cn_node *node, int64_t *strides) {
  int64_t stride = 1;
  for (int a = node->rank - 1; a >= 0; a--) {
    strides[a] = stride;
    stride *= cn_node_padded_dim(node, a);
  }
}

cn_status cn_node_set_padding(cn_node *node, int axis, int64_t left, int64_t right) {
  if (!node) return CN_ERR_INVALID;
  cn_ctx *ctx = node->ctx;
  if (axis < 0 || axis >= node->rank)
    return cn_fail(ctx, CN_ERR_INVALID, "padding of %s: axis %d is outside 0..%d",
                   cn_node_describe(node), axis, node->rank - 1);
  if (left < 0 || right < 0)
    return cn_fail(ctx, CN_ERR_INVALID, "padding of %s: margins %lld+%lld of axis %d are negative",
                   cn_node_describe(node), (long long)left, (long long)right, axis);
  if (node->pad[axis][0] == left && node->pad[axis][1] == right) return CN_OK;
  if (node->buffers_used)
    return cn_fail(ctx, CN_ERR_INVALID,
                   "padding of %s: axis %d cannot change from %lld+%lld to %lld+%lld, its buffer "
                   "already exists (set padding before the first use)",
                   cn_node_describe(node), axis, (long long)node->pad[axis][0],
                   (long long)node->pad[axis][1], (long long)left, (long long)right);
  int64_t pad[CN_MAX_RANK][2];
  memcpy(pad, node->pad, sizeof pad);
  pad[axis][0] = left;
  pad[axis][1] = right;
  size_t cells;
  if (!padded_cells(node->rank, node->dims, (const int64_t(*)[2])pad, cn_prec_bytes(node->prec),
                    &cells))
    return cn_fail(ctx, CN_ERR_INVALID,
                   "padding of %s: margins %lld+%lld of axis %d make the buffer too large",
                   cn_node_describe(node), (long long)left, (long long)right, axis);
  node->pad[axis][0] = left;
  node->pad[axis][1] = right;
  return CN_OK;
}

int64_t cn_node_padding(const cn_node *node, int axis, bool right) {
  return axis >= 0 && axis < node->rank ? node->pad[axis][right ? 1 : 0] : -1;
}

cn_status cn_node_set_memory(cn_node *node, cn_memory_mode mode) {
  if (!node) return CN_ERR_INVALID;
  if (mode != CN_MEM_MATERIALIZED && mode != CN_MEM_LOCAL && mode != CN_MEM_VIRTUAL)
    return cn_fail(node->ctx, CN_ERR_INVALID, "memory mode of %s: %d is not a memory mode",
                   cn_node_describe(node), (int)mode);
  node->mode = mode;
  return CN_OK;
}

cn_memory_mode cn_node_memory(const cn_node *node) {
  return node->mode;
}

/* ---- Buffers ---- */

/* The failure of a buffer allocation, naming the node, its dims and the bytes asked for, so that
 * a model too large for the machine says which tensor did not fit. Built without allocating
 * (memory has just run out); a label too long for the buffer is truncated. */
static void *buffer_failure(const cn_node *node, bool merge, size_t bytes) {
  char who[256], dims[CN_MAX_RANK * 22 + 3] = "[";
  describe_into(node, who, sizeof who);
  for (int a = 0; a < node->rank; a++)
    snprintf(dims + strlen(dims), sizeof dims - strlen(dims), "%s%lld", a ? ", " : "",
             (long long)node->dims[a]);
  strcat(dims, "]");
  /* the margins too, when they make most of the buffer (padded convolutions) */
  char pad[CN_MAX_RANK * 44 + 32] = "";
  for (int a = 0; a < node->rank; a++)
    if (node->pad[a][0] || node->pad[a][1])
      snprintf(pad + strlen(pad), sizeof pad - strlen(pad), "%s%lld/%lld on axis %d",
               pad[0] ? ", " : " with padding margins ", (long long)node->pad[a][0],
               (long long)node->pad[a][1], a);
  cn_fail(node->ctx, CN_ERR_NOMEM, "cannot allocate the %sbuffer of %s %s%s (%zu bytes)",
          merge ? "merge " : "", who, dims, pad, bytes);
  node->ctx->failed_node = node->id;
  return NULL;
}

/* A buffer is freed by its context's cleanup (the node has no release of its own); when the
 * cleanup cannot be registered the buffer is given back at once and the allocation fails. */
void *cn_node_raw_buffer(cn_node *node, bool merge) {
  void **slot = merge ? &node->merge : &node->value;
  if (*slot) return *slot;
  size_t bytes;
  if (!cn_mul_size(cn_node_buffer_cells(node), cn_prec_bytes(node->prec), &bytes))
    return buffer_failure(node, merge, SIZE_MAX);
  void *buffer = cn_calloc_cells(node->ctx, bytes);
  if (!buffer) return buffer_failure(node, merge, bytes);
  if (!cn_ctx_add_cleanup(node->ctx, free, buffer)) {
    free(buffer);
    return NULL;
  }
  node->buffers_used = true;
  return *slot = buffer;
}

/* ---- Host transfers ---- */

typedef enum { PUT_VALUES, GET_VALUES, PUT_CELLS, GET_CELLS } transfer_kind;

/* The public function of a transfer, with the host's buffer or (on_device) a named device's. */
static const char *transfer_name(transfer_kind kind, bool on_device) {
  switch (kind) {
  case PUT_VALUES: return on_device ? "cn_node_set_device_values" : "cn_node_set_values";
  case GET_VALUES: return on_device ? "cn_node_get_device_values" : "cn_node_get_values";
  case PUT_CELLS: return on_device ? "cn_node_set_device_cells" : "cn_node_set_cells";
  case GET_CELLS: return on_device ? "cn_node_get_device_cells" : "cn_node_get_cells";
  }
  return "";
}

/* The host side of a transfer: read from `in` (PUT_*) or written into `out` (GET_*). */
typedef struct {
  const void *in;
  void *out;
} host_array;

/* Moves one row of `count` contiguous cells between the buffer and the host array. */
static void move_row(transfer_kind kind, cn_prec prec, unsigned char *cells, host_array host,
                     size_t host_cell, int64_t count) {
  size_t bytes = cn_prec_bytes(prec);
  switch (kind) {
  case PUT_CELLS:
    memcpy(cells, (const unsigned char *)host.in + host_cell * bytes, (size_t)count * bytes);
    break;
  case GET_CELLS:
    memcpy((unsigned char *)host.out + host_cell * bytes, cells, (size_t)count * bytes);
    break;
  case PUT_VALUES:
    for (int64_t c = 0; c < count; c++) {
      double x = ((const double *)host.in)[host_cell + (size_t)c];
      cn_value_store(prec, cn_value_of_double(prec, x), cells + (size_t)c * bytes);
    }
    break;
  case GET_VALUES:
    for (int64_t c = 0; c < count; c++)
      ((double *)host.out)[host_cell + (size_t)c] =
          cn_value_to_double(prec, cn_value_load(prec, cells + (size_t)c * bytes));
    break;
  }
}

/* Walks the unpadded cells of the host buffer or (on_device) of CPU device `device`'s copy row by
 * row, an odometer over the leading axes giving each row's padded offset. A row is the last axis
 * together with the axes before it whose followers have no padding: those cells are contiguous in
 * the padded buffer too (a data set's images of one channel, [.., 28, 28, 1], move as one row per
 * batch, not one per pixel). */
static cn_status transfer(cn_node *node, bool merge, bool on_device, int device, host_array host,
                          size_t count, transfer_kind kind) {
  if (!node) return CN_ERR_INVALID;
  cn_ctx *ctx = node->ctx;
  const char *name = transfer_name(kind, on_device);
  const cn_device *dev = on_device ? cn_cpu_device(ctx, device, name) : NULL;
  if (on_device && !dev) return ctx->status;
  int64_t numel = cn_node_numel(node);
  if (count != (size_t)numel)
    return cn_fail(ctx, CN_ERR_INVALID, "%s: %s has %lld cells, but %zu were given", name,
                   cn_node_describe(node), (long long)numel, count);
  if (!(host.in || host.out) && count > 0)
    return cn_fail(ctx, CN_ERR_INVALID, "%s: the host array for %s is NULL", name,
                   cn_node_describe(node));
  if (node->mode == CN_MEM_LOCAL)
    return cn_fail(ctx, CN_ERR_INVALID,
                   "%s: %s is local to the routines using it (CN_MEM_LOCAL): it has no host buffer",
                   name, cn_node_describe(node));
  if (node->mode == CN_MEM_VIRTUAL)
    return cn_fail(ctx, CN_ERR_INVALID,
                   "%s: %s is virtual (CN_MEM_VIRTUAL): computed inside the routine that uses it, "
                   "it has no host buffer (set it CN_MEM_MATERIALIZED before compiling to read it)",
                   name, cn_node_describe(node));
  /* a write of every cell of a buffer without padding leaves nothing a device copy could add */
  bool padded = false;
  for (int a = 0; a < node->rank; a++) padded |= node->pad[a][0] || node->pad[a][1];
  cn_host_access access = kind == GET_VALUES || kind == GET_CELLS ? CN_HOST_READ
                          : padded                                ? CN_HOST_WRITE
                                                                  : CN_HOST_OVERWRITE;
  unsigned char *buffer =
      dev ? cn_node_device_host(node, merge, dev, access) : cn_node_host(node, merge, access);
  if (!buffer) return ctx->status;
  if (numel == 0) return CN_OK;
  size_t bytes = cn_prec_bytes(node->prec);
  if (node->rank == 0) {
    move_row(kind, node->prec, buffer, host, 0, 1);
    return CN_OK;
  }
  int last = node->rank - 1;
  int64_t strides[CN_MAX_RANK], idx[CN_MAX_RANK] = {0};
  cn_node_strides(node, strides);
  int first = last; /* the row's first axis */
  int64_t row = node->dims[last];
  while (first > 0 && node->pad[first][0] == 0 && node->pad[first][1] == 0)
    row *= node->dims[--first];
  size_t host_cell = 0;
  for (;;) {
    int64_t offset = node->pad[first][0] * strides[first];
    for (int a = 0; a < first; a++) offset += (idx[a] + node->pad[a][0]) * strides[a];
    move_row(kind, node->prec, buffer + (size_t)offset * bytes, host, host_cell, row);
    host_cell += (size_t)row;
    int a = first - 1;
    while (a >= 0 && ++idx[a] == node->dims[a]) idx[a--] = 0;
    if (a < 0) return CN_OK;
  }
}

bool cn_node_find_cell(const cn_node *node, const void *cells, bool nonzero, int64_t *at,
                       double *value) {
  if ((!nonzero && cn_prec_kind_of(node->prec) != CN_PKIND_FLOAT) || cn_node_numel(node) == 0)
    return false;
  size_t bytes = cn_prec_bytes(node->prec);
  const unsigned char *buffer = cells;
  int last = node->rank - 1;
  int64_t strides[CN_MAX_RANK], idx[CN_MAX_RANK] = {0};
  cn_node_strides(node, strides);
  for (;;) { /* rows along the last axis, as in transfer() */
    int64_t offset = last >= 0 ? node->pad[last][0] : 0, n = last >= 0 ? node->dims[last] : 1;
    for (int a = 0; a < last; a++) offset += (idx[a] + node->pad[a][0]) * strides[a];
    const unsigned char *row = buffer + (size_t)offset * bytes;
    for (int64_t c = 0; c < n; c++) {
      /* single and double read directly: the generic load costs a switch per cell */
      double x =
          node->prec == CN_PREC_SINGLE ? ((const float *)row)[c]
          : node->prec == CN_PREC_DOUBLE
              ? ((const double *)row)[c]
              : cn_value_to_double(node->prec, cn_value_load(node->prec, row + (size_t)c * bytes));
      if (nonzero ? x == 0 : isfinite(x)) continue; /* NaN is nonzero */
      for (int a = 0; a < last; a++) at[a] = idx[a];
      if (last >= 0) at[last] = c;
      *value = x;
      return true;
    }
    int a = last - 1;
    while (a >= 0 && ++idx[a] == node->dims[a]) idx[a--] = 0;
    if (a < 0) return false;
  }
}

cn_status cn_node_set_values(cn_node *node, bool merge, const double *values, size_t count) {
  return transfer(node, merge, false, 0, (host_array){values, NULL}, count, PUT_VALUES);
}
cn_status cn_node_get_values(cn_node *node, bool merge, double *values, size_t count) {
  return transfer(node, merge, false, 0, (host_array){NULL, values}, count, GET_VALUES);
}
cn_status cn_node_set_cells(cn_node *node, bool merge, const void *cells, size_t count) {
  return transfer(node, merge, false, 0, (host_array){cells, NULL}, count, PUT_CELLS);
}
cn_status cn_node_get_cells(cn_node *node, bool merge, void *cells, size_t count) {
  return transfer(node, merge, false, 0, (host_array){NULL, cells}, count, GET_CELLS);
}
cn_status cn_node_set_device_values(cn_node *node, bool merge, int device, const double *values,
                                    size_t count) {
  return transfer(node, merge, true, device, (host_array){values, NULL}, count, PUT_VALUES);
}
cn_status cn_node_get_device_values(cn_node *node, bool merge, int device, double *values,
                                    size_t count) {
  return transfer(node, merge, true, device, (host_array){NULL, values}, count, GET_VALUES);
}
cn_status cn_node_set_device_cells(cn_node *node, bool merge, int device, const void *cells,
                                   size_t count) {
  return transfer(node, merge, true, device, (host_array){cells, NULL}, count, PUT_CELLS);
}
cn_status cn_node_get_device_cells(cn_node *node, bool merge, int device, void *cells,
                                   size_t count) {
  return transfer(node, merge, true, device, (host_array){NULL, cells}, count, GET_CELLS);
}

/* A transfer's end: the host (NULL) or a CPU device; false with a message for another number. */
static bool transfer_end(cn_ctx *ctx, int k, const cn_device **dev) {
  *dev = k == CN_DEVICE_HOST ? NULL : cn_cpu_device(ctx, k, "cn_node_transfer");
  return k == CN_DEVICE_HOST || *dev;
}

cn_status cn_node_transfer(cn_node *node, int from, int to, bool into_merge) {
  if (!node) return CN_ERR_INVALID;
  cn_ctx *ctx = node->ctx;
  const cn_device *src, *dst;
  if (!transfer_end(ctx, from, &src) || !transfer_end(ctx, to, &dst)) return ctx->status;
  if (node->mode != CN_MEM_MATERIALIZED)
    return cn_fail(ctx, CN_ERR_INVALID,
                   "cn_node_transfer: %s is not materialized: only the routines using it hold it",
                   cn_node_describe(node));
  return cn_node_transfer_between(node, src, dst, into_merge);
}
