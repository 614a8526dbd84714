/* Tensor values as text: a readable grid, or one-line JSON
 *   {"label": "...", "batch": [..], "input": [..], "output": [..], "values": [...]}
 * with the values in memory order (batch, then output, then input) at full precision (%.17g;
 * NaN and infinities as the strings "nan", "inf", "-inf", which JSON has no numbers for).
 *
 * The grid (numpy's and OCANNL's layout): after the header line `"label" (#id) SHAPE`, the last
 * output axis against the last input axis (or, without input axes, the last two output axes) as
 * rows and columns; every other axis (batch axes first) makes blocks, each headed by its position
 * in numpy's slice notation, `[1, :, :]` (axes in memory order, a labeled one as `rgb=1`). A
 * single axis is one line, wrapped at WRAP columns; blocks of single lines put the values after
 * their header. When an axis of the grid has a label, its indices head the rows or columns and
 * the corner says `row_label\column_label`. Only a tensor of more cells than the threshold (the
 * context's print_threshold, numpy's default 1000) is elided: each of its axes longer than
 * 2 * EDGE shows its first and last EDGE positions around "...", rows, columns and blocks alike.
 *
 * Numbers, as numpy's default float mode: every value with the fewest fractional digits (at
 * most the precision, the context's print_precision, default 8) that read back give the value
 * at the node's precision (a single 0.1 is "0.1", not 0.10000000149), decimal points aligned,
 * no trailing dot on an integral value; scientific notation, with one digit count for all, when
 * the largest magnitude reaches 1e8, the smallest nonzero is below 1e-4, or they are more than
 * 1e3 apart. Integer precisions print as integers. A uint4x32 cell is four 32-bit words, not a
 * number: the grid shows it as [0xW0 0xW1 0xW2 0xW3] (hex, word 0 first) and JSON as the array
 * [w0, w1, w2, w3] of the words in decimal.
 *
 * Invariants: formatting reads the node's host values and never changes them; the format of the
 * cells is computed from the shown cells only; lines never end with a space; the result is the
 * graph's reused buffer (NULL with a message when the tensor cannot be materialized). */
#include "numeric/numeric.h"
#include "shape/shape.h"
#include "tensor/tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EDGE              3  /* an elided axis shows its first and last EDGE positions */
#define WRAP              80 /* a single axis wraps before this column */
#define MAX_AXES          (CN_N_ROWS * CN_MAX_RANK)
#define DEFAULT_THRESHOLD 1000
#define DEFAULT_PRECISION 8
#define MAX_PRECISION     17

typedef struct {
  int n[CN_N_ROWS];
  int64_t dims[CN_N_ROWS][CN_MAX_RANK];
  const char *labels[CN_N_ROWS][CN_MAX_RANK];
} row_dims;

static bool read_rows(cn_tensor *t, row_dims *r) {
  cn_shape_env *env = t->g->shapes;
  for (int k = 0; k < CN_N_ROWS; k++) {
    r->n[k] = cn_shape_row_dims(env, t->shape, (cn_row_kind)k, r->dims[k], CN_MAX_RANK);
    if (r->n[k] < 0) return false;
    /* solved (cn_shape_row_dims checked it): the labels of the same resolved dims */
    const cn_row *row = cn_row_resolve(env, t->shape->rows[k]);
    if (!row) return false;
    for (int i = 0; i < r->n[k]; i++) r->labels[k][i] = row->trail[i]->label;
  }
  return true;
}

/* ---- Options -------------------------------------------------------------------------------- */

/* The option key (else the variable env, else def) as an integer in [0, max]; false with a
 * message naming where a bad value came from (a set option was checked when set). */
static bool option_count(cn_ctx *ctx, const char *key, const char *env, int64_t def, int64_t max,
                         int64_t *out) {
  const char *text = cn_ctx_stored_option(ctx, key);
  const char *from = key;
  if (!text && (text = getenv(env)) && *text) from = env;
  *out = def;
  if (!text || !*text) return true;
  uint64_t value;
  if (!cn_parse_natural(text, strlen(text), (uint64_t)max, &value))
    return cn_fail(ctx, CN_ERR_INVALID, "%s: '%s' is not an integer in [0, %lld]", from, text,
                   (long long)max),
           false;
  *out = (int64_t)value;
  return true;
}

cn_status cn_tensor_print_options(cn_ctx *ctx, cn_print_options *out) {
  int64_t threshold, precision;
  if (!option_count(ctx, "print_threshold", "CANNL_PRINT_THRESHOLD", DEFAULT_THRESHOLD, INT64_MAX,
                    &threshold) ||
      !option_count(ctx, "print_precision", "CANNL_PRINT_PRECISION", DEFAULT_PRECISION,
                    MAX_PRECISION, &precision))
    return cn_ctx_status(ctx);
  *out = (cn_print_options){.threshold = threshold, .precision = (int)precision};
  return CN_OK;
}

/* ---- JSON ----------------------------------------------------------------------------------- */

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

static void json(cn_sbuf *sb, const char *label, const row_dims *r, const double *v,
                 const cn_u4x32 *words, size_t count) {
  cn_sbuf_puts(sb, "{\"label\": ");
  cn_sbuf_json_string(sb, label);
  json_dims(sb, "batch", r->n[CN_ROW_BATCH], r->dims[CN_ROW_BATCH]);
  json_dims(sb, "input", r->n[CN_ROW_INPUT], r->dims[CN_ROW_INPUT]);
  json_dims(sb, "output", r->n[CN_ROW_OUTPUT], r->dims[CN_ROW_OUTPUT]);
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
}

/* ---- The view: axes, what is shown, how cells read ------------------------------------------ */

typedef struct {
  int n; /* axes, in memory order: batch, output, input */
  int64_t size[MAX_AXES], stride[MAX_AXES];
  const char *label[MAX_AXES]; /* NULL when unlabeled */
  int row, col;                /* the grid's axes (-1: none; a single axis is col) */
  int n_blocks, blocks[MAX_AXES];
  bool elide;
  const double *v;
  const cn_u4x32 *words; /* uint4x32 cells (v is NULL) */
  cn_prec prec;
  bool integer; /* an integer precision */
  bool sci;     /* scientific notation, with `digits` mantissa digits */
  int digits;   /* sci: digits after the point; fixed: the most fractional digits */
  int precision;
  int left,
      right; /* fixed: widths of the integral part (with sign) and of the point and fraction */
  int width; /* of every cell */
} view;

/* The next shown position of an axis after i, size when none: a jump over the middle when
 * elided. */
static int64_t next_shown(const view *w, int a, int64_t i) {
  int64_t size = w->size[a];
  if (w->elide && size > 2 * EDGE && i == EDGE - 1) return size - EDGE;
  return i + 1;
}

/* Advances idx over the axes axes[0..n) (the last fastest), shown positions only; the index of
 * the axis that moved (-1 at the end), *jumped when it jumped over elided positions. */
static int advance(const view *w, const int *axes, int n, int64_t *idx, bool *jumped) {
  for (int k = n - 1; k >= 0; k--) {
    int a = axes[k];
    int64_t next = next_shown(w, a, idx[a]);
    if (next < w->size[a]) {
      *jumped = next != idx[a] + 1;
      idx[a] = next;
      return k;
    }
    idx[a] = 0;
  }
  return -1;
}

static int64_t offset(const view *w, const int64_t *idx) {
  int64_t at = 0;
  for (int a = 0; a < w->n; a++) at += idx[a] * w->stride[a];
  return at;
}

/* The value at node precision: x stored as the node stores it and read back. */
static double at_precision(cn_prec prec, double x) {
  unsigned char cell[sizeof(cn_u4x32)];
  cn_value_store(prec, cn_value_of_double(prec, x), cell);
  return cn_value_to_double(prec, cn_value_load(prec, cell));
}

/* x with `digits` digits after the point (scientific or fixed) into buf. */
static int number_text(char *buf, size_t cap, bool sci, int digits, double x) {
  return snprintf(buf, cap, sci ? "%.*e" : "%.*f", digits, x);
}

/* The fewest digits from `from` up to w->precision that read back as x at the node's precision. */
static int fewest_digits(const view *w, bool sci, int from, double x) {
  char buf[400];
  for (int d = from; d < w->precision; d++) {
    number_text(buf, sizeof buf, sci, d, x);
    if (at_precision(w->prec, strtod(buf, NULL)) == x) return d;
  }
  return w->precision;
}

/* The text of the cell at `at` (without padding) into buf. */
static void cell_text(const view *w, int64_t at, char *buf, size_t cap) {
  if (w->words) {
    const uint32_t *u = w->words[at].v;
    snprintf(buf, cap, "[0x%08lx 0x%08lx 0x%08lx 0x%08lx]", (unsigned long)u[0],
             (unsigned long)u[1], (unsigned long)u[2], (unsigned long)u[3]);
    return;
  }
  double x = w->v[at];
  if (isnan(x))
    snprintf(buf, cap, "nan");
  else if (isinf(x))
    snprintf(buf, cap, x > 0 ? "inf" : "-inf");
  else if (w->integer)
    snprintf(buf, cap, "%.0f", x);
  else if (w->sci)
    number_text(buf, cap, true, w->digits, x);
  else
    number_text(buf, cap, false, fewest_digits(w, false, 0, x), x);
}

/* The integral part's length of a fixed-notation text (up to the point). */
static int integral_len(const char *text) {
  const char *dot = strchr(text, '.');
  return dot ? (int)(dot - text) : (int)strlen(text);
}

/* Every shown cell, in memory order: the scale of the finite values decides the notation, then
 * the digits and the widths are measured. */
static void measure(view *w) {
  int all[MAX_AXES];
  for (int a = 0; a < w->n; a++) all[a] = a;
  int64_t idx[MAX_AXES] = {0};
  bool jumped, any = false, integral = true;
  double hi = 0, lo = INFINITY;
  if (w->v && !w->integer) {
    do {
      double x = fabs(w->v[offset(w, idx)]);
      if (!isfinite(x)) continue;
      any = true;
      if (x > hi) hi = x;
      if (x > 0 && x < lo) lo = x;
      integral = integral && x == floor(x);
    } while (advance(w, all, w->n, idx, &jumped) >= 0);
    /* numpy's rule, except that integral values below 1e16 (every digit exact) stay integers */
    w->sci = any && hi > 0 && (integral ? hi >= 1e16 : hi >= 1e8 || lo < 1e-4 || hi / lo > 1e3);
    if (w->sci) {
      memset(idx, 0, sizeof idx);
      do {
        double x = w->v[offset(w, idx)];
        if (isfinite(x)) w->digits = fewest_digits(w, true, w->digits, x);
      } while (advance(w, all, w->n, idx, &jumped) >= 0);
    }
  }
  memset(idx, 0, sizeof idx);
  char buf[400];
  int finite_width = 0, other_width = 0;
  do {
    int64_t at = offset(w, idx);
    cell_text(w, at, buf, sizeof buf);
    int len = (int)strlen(buf);
    if (w->v && !w->integer && !w->sci && isfinite(w->v[at])) {
      int left = integral_len(buf);
      if (left > w->left) w->left = left;
      if (len - left > w->right) w->right = len - left;
    } else if (len > other_width) {
      other_width = len;
    }
  } while (advance(w, all, w->n, idx, &jumped) >= 0);
  finite_width = w->left + w->right;
  w->width = finite_width > other_width ? finite_width : other_width;
}

/* The cell at `at`, right-aligned to the common width (fixed notation: points aligned). */
static void put_cell(cn_sbuf *sb, const view *w, int64_t at) {
  char buf[400];
  cell_text(w, at, buf, sizeof buf);
  int len = (int)strlen(buf), pad_right = 0;
  if (w->v && !w->integer && !w->sci && isfinite(w->v[at]))
    pad_right = w->right - (len - integral_len(buf));
  cn_sbuf_printf(sb, "%*s%s%*s", w->width - len - pad_right, "", buf, pad_right, "");
}

/* Ends a line, dropping the spaces the alignment left at its end. */
static void end_line(cn_sbuf *sb) {
  while (!sb->failed && sb->len > 0 && sb->data[sb->len - 1] == ' ') sb->len--;
  cn_sbuf_putc(sb, '\n');
}

static int digits_of(int64_t n) {
  int d = 1;
  while (n >= 10) n /= 10, d++;
  return d;
}

/* ---- Layout --------------------------------------------------------------------------------- */

/* A block's header: the indices of the block axes, ":" for the grid's, in memory order. */
static void block_header(cn_sbuf *sb, const view *w, const int64_t *idx) {
  cn_sbuf_putc(sb, '[');
  for (int a = 0; a < w->n; a++) {
    if (a) cn_sbuf_puts(sb, ", ");
    if (a == w->row || a == w->col)
      cn_sbuf_putc(sb, ':');
    else if (w->label[a])
      cn_sbuf_printf(sb, "%s=%lld", w->label[a], (long long)idx[a]);
    else
      cn_sbuf_printf(sb, "%lld", (long long)idx[a]);
  }
  cn_sbuf_putc(sb, ']');
}

/* The cells (or, header, the indices) of the single axis col at idx, after a prefix of pw
 * columns already written; lines wrap before WRAP columns, continuing under the first cell. */
static void put_line(cn_sbuf *sb, const view *w, int64_t *idx, int pw, bool header) {
  int col = w->col, column = pw;
  for (int64_t i = 0, prev = -1; i < w->size[col]; prev = i, i = next_shown(w, col, i)) {
    bool gap = prev >= 0 && i != prev + 1;
    for (int part = gap ? 0 : 1; part < 2; part++) {
      int len = part ? w->width : 3;
      int sep = column > 0 ? 2 : 0;
      if (column > pw && column + sep + len > WRAP) {
        end_line(sb);
        cn_sbuf_printf(sb, "%*s", pw, "");
        column = pw;
        sep = pw > 0 ? 2 : 0;
      }
      cn_sbuf_printf(sb, "%*s", sep, "");
      column += sep + len;
      if (!part) {
        cn_sbuf_puts(sb, "...");
      } else if (header) {
        cn_sbuf_printf(sb, "%*lld", w->width, (long long)i);
      } else {
        idx[col] = i;
        put_cell(sb, w, offset(w, idx));
      }
    }
  }
  end_line(sb);
}

/* Whether the line of the single axis fits before WRAP after a prefix of pw columns. */
static bool line_fits(const view *w, int pw) {
  int64_t size = w->size[w->col];
  int64_t shown = w->elide && size > 2 * EDGE ? 2 * EDGE : size;
  int64_t len = pw + shown * (w->width + 2) + (shown < size ? 5 : 0) - (pw ? 0 : 2);
  return len <= WRAP;
}

/* The grid of rows x columns at the block idx. */
static void put_grid(cn_sbuf *sb, const view *w, int64_t *idx) {
  int row = w->row, col = w->col;
  bool headers = w->label[row] || w->label[col];
  int rw = 0;
  char corner[256] = "";
  if (headers) {
    snprintf(corner, sizeof corner, "%s\\%s", w->label[row] ? w->label[row] : "",
             w->label[col] ? w->label[col] : "");
    rw = (int)strlen(corner);
    if (digits_of(w->size[row] - 1) > rw) rw = digits_of(w->size[row] - 1);
    cn_sbuf_printf(sb, "%-*s", rw, corner);
    put_line(sb, w, idx, rw, true);
  }
  for (int64_t r = 0, prev = -1; r < w->size[row]; prev = r, r = next_shown(w, row, r)) {
    if (prev >= 0 && r != prev + 1) {
      cn_sbuf_printf(sb, "%*s%s...", rw, "", rw ? "  " : "");
      end_line(sb);
    }
    idx[row] = r;
    if (headers) cn_sbuf_printf(sb, "%*lld", rw, (long long)r);
    put_line(sb, w, idx, rw, false);
  }
}

/* The grid's axes and the blocks' (see the file's comment). */
static void choose_axes(view *w, const row_dims *r) {
  int n_batch = r->n[CN_ROW_BATCH], n_out = r->n[CN_ROW_OUTPUT], n_in = r->n[CN_ROW_INPUT];
  int last_out = n_out ? n_batch + n_out - 1 : -1, last_in = n_in ? w->n - 1 : -1;
  if (last_out >= 0 && last_in >= 0) {
    w->row = last_out;
    w->col = last_in;
  } else {
    /* the last two of the output or input axes, else of the batch axes */
    int from = n_out + n_in > 0 ? n_batch : 0;
    w->col = w->n > 0 ? w->n - 1 : -1;
    w->row = w->n - from >= 2 ? w->n - 2 : -1;
  }
  w->n_blocks = 0;
  for (int a = 0; a < w->n; a++)
    if (a != w->row && a != w->col) w->blocks[w->n_blocks++] = a;
}

static void grid(cn_sbuf *sb, view *w) {
  int64_t idx[MAX_AXES] = {0};
  measure(w);
  if (w->col < 0) { /* a scalar */
    put_cell(sb, w, 0);
    end_line(sb);
    return;
  }
  if (w->row >= 0 && (w->label[w->row] || w->label[w->col])) {
    int digits = digits_of(w->size[w->col] - 1);
    if (digits > w->width) w->width = digits;
  }
  bool single = w->row < 0;
  /* a single axis: the header of the last block is the widest (its indices are the largest) */
  int pw = 0;
  if (single && w->n_blocks > 0) {
    int64_t last[MAX_AXES] = {0};
    for (int k = 0; k < w->n_blocks; k++) last[w->blocks[k]] = w->size[w->blocks[k]] - 1;
    size_t before = sb->len;
    block_header(sb, w, last);
    pw = (int)(sb->len - before);
    sb->len = before;
  }
  const char *label = single ? w->label[w->col] : NULL;
  if (label) {
    int digits = digits_of(w->size[w->col] - 1);
    int with = pw > (int)strlen(label) ? pw : (int)strlen(label);
    int width = w->width > digits ? w->width : digits;
    int saved = w->width;
    w->width = width;
    if (line_fits(w, with)) { /* the indices head the values when the line does not wrap */
      pw = with;
      cn_sbuf_printf(sb, "%-*s", pw, label);
      put_line(sb, w, idx, pw, true);
    } else {
      w->width = saved;
    }
  }
  for (bool more = true; more;) {
    if (w->n_blocks > 0) {
      size_t before = sb->len;
      block_header(sb, w, idx);
      if (single)
        cn_sbuf_printf(sb, "%*s", pw - (int)(sb->len - before), "");
      else
        end_line(sb);
    } else if (single) {
      cn_sbuf_printf(sb, "%*s", pw, "");
    }
    if (single)
      put_line(sb, w, idx, pw, false);
    else
      put_grid(sb, w, idx);
    bool jumped = false;
    more = w->n_blocks > 0 && advance(w, w->blocks, w->n_blocks, idx, &jumped) >= 0;
    if (more && jumped) {
      cn_sbuf_puts(sb, "...");
      end_line(sb);
    }
  }
}

/* ---- Entry points --------------------------------------------------------------------------- */

static void free_formatted(void *graph) {
  cn_sbuf_free(&((cn_graph *)graph)->formatted);
}

const char *cn_tensor_format_with(cn_tensor *t, bool grad, const cn_print_options *o) {
  cn_graph *g = t->g;
  cn_ctx *ctx = g->ctx;
  if (!o->json && (o->precision < 0 || o->precision > MAX_PRECISION)) {
    cn_fail(ctx, CN_ERR_INVALID, "print precision %d is not in [0, %d]", o->precision,
            MAX_PRECISION);
    return NULL;
  }
  cn_node *node = grad ? cn_tensor_grad(t) : cn_tensor_value(t);
  row_dims r;
  if (!node || !read_rows(t, &r)) return NULL;
  if (!g->formatted_cleanup && !(g->formatted_cleanup = cn_ctx_add_cleanup(ctx, free_formatted, g)))
    return NULL;
  size_t count = (size_t)cn_node_numel(node);
  cn_prec prec = cn_node_prec(node);
  bool u4 = prec == CN_PREC_UINT4X32;
  /* a uint4x32 cell as a double would be word 0 only (or a 64-bit reading): read the words */
  void *cells = cn_malloc(ctx, (count ? count : 1) * (u4 ? sizeof(cn_u4x32) : sizeof(double)));
  if (!cells) return NULL;
  if ((u4 ? cn_node_get_cells(node, false, cells, count)
          : cn_node_get_values(node, false, cells, count)) != CN_OK) {
    free(cells);
    return NULL;
  }
  const char *label = grad ? cn_node_label(node) : t->label;
  cn_sbuf *sb = &g->formatted;
  sb->len = 0;
  sb->failed = false;
  if (o->json) {
    json(sb, label, &r, u4 ? NULL : cells, u4 ? cells : NULL, count);
  } else {
    cn_sbuf_printf(sb, "\"%s\" (#%d) ", label, t->id);
    cn_shape_print(sb, g->shapes, t->shape);
    cn_sbuf_putc(sb, '\n');
    view w = {.v = u4 ? NULL : cells, .words = u4 ? cells : NULL, .prec = prec};
    w.integer = !u4 && cn_prec_table[prec].kind != CN_PKIND_FLOAT;
    w.precision = o->precision;
    w.elide = o->threshold >= 0 && (int64_t)count > o->threshold;
    static const cn_row_kind order[CN_N_ROWS] = {CN_ROW_BATCH, CN_ROW_OUTPUT, CN_ROW_INPUT};
    for (int k = 0; k < CN_N_ROWS; k++)
      for (int i = 0; i < r.n[order[k]]; i++, w.n++) {
        w.size[w.n] = r.dims[order[k]][i];
        w.label[w.n] = r.labels[order[k]][i];
      }
    for (int a = w.n - 1; a >= 0; a--)
      w.stride[a] = a == w.n - 1 ? 1 : w.stride[a + 1] * w.size[a + 1];
    choose_axes(&w, &r);
    if (count > 0) grid(sb, &w);
  }
  free(cells);
  if (!sb->failed) return sb->data ? sb->data : "";
  cn_fail(ctx, CN_ERR_NOMEM, "out of memory while building text");
  return NULL;
}

/* JSON reads no option: a bad $CANNL_PRINT_THRESHOLD does not stop --json. */
const char *cn_tensor_format(cn_tensor *t, bool grad, bool json) {
  cn_print_options o = {.json = true};
  if (!json && cn_tensor_print_options(t->g->ctx, &o) != CN_OK) return NULL;
  return cn_tensor_format_with(t, grad, &o);
}
