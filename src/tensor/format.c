/* Tensor values as text: a readable grid (one block per batch index, rows = output cells,
 * columns = input cells, long axes elided in the middle) and one-line JSON
 *   {"label": "...", "batch": [..], "input": [..], "output": [..], "values": [...]}
 * with the values in memory order (batch, then output, then input) at full precision (%.17g;
 * NaN and infinities as the strings "nan", "inf", "-inf", which JSON has no numbers for).
 *
 * A uint4x32 cell is four 32-bit words, not a number: the grid shows it as [0xW0 0xW1 0xW2 0xW3]
 * (hex, word 0 first) and JSON as the array [w0, w1, w2, w3] of the words in decimal.
 *
 * Invariants: formatting reads the node's host values and never changes them; the result is an
 * arena string (NULL with a message when the tensor cannot be materialized). */
#include "tensor/tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define ELIDE_OVER 12 /* an axis of more cells than this shows its first and last ELIDE_KEEP */
#define ELIDE_KEEP 5

typedef struct {
  int n[CN_N_ROWS];
  int64_t dims[CN_N_ROWS][CN_MAX_RANK];
  int64_t cells[CN_N_ROWS]; /* product of each row's dims */
} row_dims;

static bool read_rows(cn_tensor *t, row_dims *r) {
  for (int k = 0; k < CN_N_ROWS; k++) {
    r->n[k] = cn_shape_row_dims(t->g->shapes, t->shape, (cn_row_kind)k, r->dims[k], CN_MAX_RANK);
    if (r->n[k] < 0) return false;
    r->cells[k] = 1;
    for (int i = 0; i < r->n[k]; i++) r->cells[k] *= r->dims[k][i];
  }
  return true;
}

static void json_number(cn_sbuf *sb, double v) {
  if (isnan(v))
    cn_sbuf_puts(sb, "\"nan\"");
  else if (isinf(v))
    cn_sbuf_puts(sb, v > 0 ? "\"inf\"" : "\"-inf\"");
  else
    cn_sbuf_printf(sb, "%.17g", v);
}

static void json_dims(cn_sbuf *sb, const char *key, int n, const int64_t *dims) {
  cn_sbuf_printf(sb, ", \"%s\": [", key);
  for (int i = 0; i < n; i++) cn_sbuf_printf(sb, "%s%lld", i ? ", " : "", (long long)dims[i]);
  cn_sbuf_putc(sb, ']');
}

/* Shown positions of an axis of n cells: all, or the first and last ELIDE_KEEP with a gap. */
static bool shown(int64_t i, int64_t n) {
  return n <= ELIDE_OVER || i < ELIDE_KEEP || i >= n - ELIDE_KEEP;
}

/* One cell of the grid: a number, or the four words of a uint4x32 cell (words != NULL). */
static void grid_cell(cn_sbuf *sb, const double *v, const cn_u4x32 *words, int64_t at) {
  if (!words) {
    cn_sbuf_printf(sb, " %11.5g", v[at]);
    return;
  }
  const uint32_t *w = words[at].v;
  cn_sbuf_printf(sb, " [0x%08lx 0x%08lx 0x%08lx 0x%08lx]", (unsigned long)w[0], (unsigned long)w[1],
                 (unsigned long)w[2], (unsigned long)w[3]);
}

static void grid(cn_sbuf *sb, const double *v, const cn_u4x32 *words, const row_dims *r) {
  int64_t rows = r->cells[CN_ROW_OUTPUT], cols = r->cells[CN_ROW_INPUT];
  int64_t batches = r->cells[CN_ROW_BATCH];
  for (int64_t b = 0; b < batches; b++) {
    if (!shown(b, batches)) {
      if (b == ELIDE_KEEP) cn_sbuf_puts(sb, "...\n");
      continue;
    }
    if (r->n[CN_ROW_BATCH] > 0) cn_sbuf_printf(sb, "batch %lld:\n", (long long)b);
    for (int64_t o = 0; o < rows; o++) {
      if (!shown(o, rows)) {
        if (o == ELIDE_KEEP) cn_sbuf_puts(sb, "  ...\n");
        continue;
      }
      cn_sbuf_puts(sb, " ");
      for (int64_t i = 0; i < cols; i++) {
        if (!shown(i, cols)) {
          if (i == ELIDE_KEEP) cn_sbuf_puts(sb, "  ...");
          continue;
        }
        grid_cell(sb, v, words, (b * rows + o) * cols + i);
      }
      cn_sbuf_putc(sb, '\n');
    }
  }
}

static void free_formatted(void *graph) {
  cn_sbuf_free(&((cn_graph *)graph)->formatted);
}

const char *cn_tensor_format(cn_tensor *t, bool grad, bool json) {
  cn_graph *g = t->g;
  cn_ctx *ctx = g->ctx;
  cn_node *node = grad ? cn_tensor_grad(t) : cn_tensor_value(t);
  row_dims r;
  if (!node || !read_rows(t, &r)) return NULL;
  if (!g->formatted_cleanup && !(g->formatted_cleanup = cn_ctx_add_cleanup(ctx, free_formatted, g)))
    return NULL;
  size_t count = (size_t)cn_node_numel(node);
  bool u4 = cn_node_prec(node) == CN_PREC_UINT4X32;
  /* a uint4x32 cell as a double would be word 0 only (or a 64-bit reading): read the words */
  void *cells = cn_malloc(ctx, (count ? count : 1) * (u4 ? sizeof(cn_u4x32) : sizeof(double)));
  if (!cells) return NULL;
  if ((u4 ? cn_node_get_cells(node, false, cells, count)
          : cn_node_get_values(node, false, cells, count)) != CN_OK) {
    free(cells);
    return NULL;
  }
  const double *v = u4 ? NULL : cells;
  const cn_u4x32 *words = u4 ? cells : NULL;
  cn_sbuf *sb = &g->formatted;
  sb->len = 0;
  sb->failed = false;
  if (json) {
    cn_sbuf_puts(sb, "{\"label\": ");
    cn_sbuf_json_string(sb, grad ? cn_node_label(node) : t->label);
    json_dims(sb, "batch", r.n[CN_ROW_BATCH], r.dims[CN_ROW_BATCH]);
    json_dims(sb, "input", r.n[CN_ROW_INPUT], r.dims[CN_ROW_INPUT]);
    json_dims(sb, "output", r.n[CN_ROW_OUTPUT], r.dims[CN_ROW_OUTPUT]);
    cn_sbuf_puts(sb, ", \"values\": [");
    for (size_t i = 0; i < count; i++) {
      if (i) cn_sbuf_puts(sb, ", ");
      if (words)
        cn_sbuf_printf(sb, "[%lu, %lu, %lu, %lu]", (unsigned long)words[i].v[0],
                       (unsigned long)words[i].v[1], (unsigned long)words[i].v[2],
                       (unsigned long)words[i].v[3]);
      else
        json_number(sb, v[i]);
    }
    cn_sbuf_puts(sb, "]}");
  } else {
    cn_sbuf_printf(sb, "\"%s\" (#%d) ", grad ? cn_node_label(node) : t->label, t->id);
    cn_shape_print(sb, g->shapes, t->shape);
    cn_sbuf_putc(sb, '\n');
    grid(sb, v, words, &r);
  }
  free(cells);
  if (!sb->failed) return sb->data ? sb->data : "";
  cn_fail(ctx, CN_ERR_NOMEM, "out of memory while building text");
  return NULL;
}
