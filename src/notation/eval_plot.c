/* The evaluator's statement floor (eval_stmt.h: it may include every floor's header): the
 * statement plot (its arguments read by eval_elab.c's helpers).
 *
 *   plot "FILE.svg" ~x:X ("name", V) ... [~ascii:B] [~matrix:T | ~matrix:("title", T)]
 *
 * Each execution appends the point (X, V) to each named series (X and V host numbers or one-cell
 * tensors, computed as printf computes its arguments), then rewrites FILE.svg: one line chart per
 * series (its name as the title, the y range and the x range written at the axes, each point a
 * circle whose <title> is "x, y"), and with ~matrix the 2-D tensor T (computed as print computes
 * it) as a heat map below (each cell a rect whose <title> is "row, column: value"), titled by the
 * title given or the tensor's label. The file is written by the atomic writer (a temporary file
 * renamed over FILE, so a reader never sees half a chart; a link is written through, a FIFO,
 * device or directory refused). With ~ascii true, each series is also written to the script's
 * output as an ASCII chart of 8 rows (examples/fashion_mnist.c's ascii_plot), and the matrix as
 * a table of its values under its title.
 *
 * Invariants: the series of a plot statement live in its statement state (created on its first
 * execution, with the series' names) for the rest of the run; their points are malloc'd (a loop
 * gives back the arena of iterations that create no state) and freed by nt_plots_free at the end
 * of the run; the output holds nothing that varies between runs (no times). */
#include "notation/eval_stmt.h"

#include "data/data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The series of one plot statement. */
typedef struct nt_plot {
  struct nt_plot *next; /* nt_interp.plots */
  int n_series;
  const char **names;
  nt_item_state **cells; /* per series, then ~x: the state of a tensor argument (NULL: host) */
  nt_item_state matrix;  /* ~matrix's tensor */
  int n, cap;            /* points per series */
  double *x, *y;         /* malloc'd: x[i]; y[i * n_series + s] */
} nt_plot;

void nt_plots_free(nt_interp *I) {
  for (nt_plot *p = I->plots; p; p = p->next) {
    free(p->x);
    free(p->y);
    p->x = p->y = NULL;
  }
  I->plots = NULL;
}

/* The plot of statement it, created with its series' names on the first execution. */
static nt_plot *plot_of(nt_interp *I, const cn_nt_item *it, nt_env *scope, nt_item_state *st) {
  if (st->plot) return st->plot;
  int n = it->u.plot.n_series;
  nt_plot *p = cn_alloc(I->ctx, sizeof *p);
  if (!p) return NULL;
  memset(p, 0, sizeof *p);
  p->n_series = n;
  p->names = cn_alloc(I->ctx, sizeof *p->names * (size_t)n);
  p->cells = cn_alloc(I->ctx, sizeof *p->cells * (size_t)(n + 1));
  if (!p->names || !p->cells) return NULL;
  memset(p->cells, 0, sizeof *p->cells * (size_t)(n + 1));
  for (int s = 0; s < n; s++) {
    const cn_nt_expr *x = it->u.plot.names[s];
    nt_value *v = nt_host_of(I, scope, x, NT_V_STR, "a series' name is a string");
    if (!v) return NULL;
    p->names[s] = v->str;
  }
  p->next = I->plots;
  I->plots = p;
  return st->plot = p;
}

/* Appends one point to every series; false after a message. */
static bool add_point(nt_interp *I, nt_plot *p, double x, const double *y) {
  if (p->n == p->cap) {
    int cap = p->cap ? 2 * p->cap : 16;
    double *nx = cn_realloc(I->ctx, p->x, sizeof *nx * (size_t)cap);
    if (!nx) return false;
    p->x = nx;
    double *ny = cn_realloc(I->ctx, p->y, sizeof *ny * (size_t)cap * (size_t)p->n_series);
    if (!ny) return false;
    p->y = ny;
    p->cap = cap;
  }
  p->x[p->n] = x;
  memcpy(p->y + (size_t)p->n * (size_t)p->n_series, y, sizeof *y * (size_t)p->n_series);
  p->n++;
  return true;
}

/* ---- SVG ------------------------------------------------------------------------------------ */

enum { WIDTH = 640, CHART = 240, LEFT = 80, RIGHT = 30, TOP = 36, BOTTOM = 44, CELL = 30 };

static void put_escaped(cn_sbuf *sb, const char *s) {
  for (; *s; s++) switch (*s) {
    case '&': cn_sbuf_puts(sb, "&amp;"); break;
    case '<': cn_sbuf_puts(sb, "&lt;"); break;
    case '>': cn_sbuf_puts(sb, "&gt;"); break;
    case '"': cn_sbuf_puts(sb, "&quot;"); break;
    default: cn_sbuf_putc(sb, *s);
    }
}

/* The range of n values at v (stride apart). */
static void range_of(const double *v, int n, size_t stride, double *lo, double *hi) {
  *lo = *hi = v[0];
  for (int i = 1; i < n; i++) {
    double x = v[(size_t)i * stride];
    *lo = x < *lo ? x : *lo;
    *hi = x > *hi ? x : *hi;
  }
}

/* Where value v of [lo, hi] falls on an axis of `size` pixels (the middle for a flat range). */
static double scale(double v, double lo, double hi, double size) {
  return hi > lo ? (v - lo) / (hi - lo) * size : size / 2;
}

/* Series s as a chart whose top is at y0. */
static void svg_chart(cn_sbuf *sb, const nt_plot *p, int s, int y0) {
  double xlo, xhi, ylo, yhi, w = WIDTH - LEFT - RIGHT, h = CHART - TOP - BOTTOM;
  const double *y = p->y + s;
  range_of(p->x, p->n, 1, &xlo, &xhi);
  range_of(y, p->n, (size_t)p->n_series, &ylo, &yhi);
  cn_sbuf_printf(sb, "<g transform=\"translate(0,%d)\">\n", y0);
  cn_sbuf_printf(sb, "<text x=\"%d\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">", WIDTH / 2);
  put_escaped(sb, p->names[s]);
  cn_sbuf_printf(sb,
                 "</text>\n<rect x=\"%d\" y=\"%d\" width=\"%g\" height=\"%g\" fill=\"none\" "
                 "stroke=\"#999\"/>\n",
                 LEFT, TOP, w, h);
  cn_sbuf_printf(sb, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" font-size=\"12\">%.6g</text>\n",
                 LEFT - 6, TOP + 4, yhi);
  cn_sbuf_printf(sb, "<text x=\"%d\" y=\"%g\" text-anchor=\"end\" font-size=\"12\">%.6g</text>\n",
                 LEFT - 6, TOP + h + 4, ylo);
  cn_sbuf_printf(sb,
                 "<text x=\"%d\" y=\"%g\" text-anchor=\"middle\" font-size=\"12\">%.6g</text>\n"
                 "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\" font-size=\"12\">%.6g</text>\n",
                 LEFT, TOP + h + 18, xlo, LEFT + w, TOP + h + 18, xhi);
  cn_sbuf_puts(sb, "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"");
  for (int i = 0; i < p->n; i++)
    cn_sbuf_printf(sb, "%s%.1f,%.1f", i ? " " : "", LEFT + scale(p->x[i], xlo, xhi, w),
                   TOP + h - scale(y[(size_t)i * (size_t)p->n_series], ylo, yhi, h));
  cn_sbuf_puts(sb, "\"/>\n");
  for (int i = 0; i < p->n; i++) {
    double v = y[(size_t)i * (size_t)p->n_series];
    cn_sbuf_printf(sb,
                   "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"#1f77b4\"><title>%.6g, "
                   "%.6g</title></circle>\n",
                   LEFT + scale(p->x[i], xlo, xhi, w), TOP + h - scale(v, ylo, yhi, h), p->x[i], v);
  }
  cn_sbuf_puts(sb, "</g>\n");
}

/* A rows x cols matrix as a heat map (white to blue over its range) whose top is at y0. */
static void svg_matrix(cn_sbuf *sb, const char *title, const double *m, int64_t rows, int64_t cols,
                       int y0) {
  double lo, hi;
  range_of(m, (int)(rows * cols), 1, &lo, &hi);
  cn_sbuf_printf(sb, "<g transform=\"translate(0,%d)\">\n", y0);
  cn_sbuf_printf(sb, "<text x=\"%d\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">", WIDTH / 2);
  put_escaped(sb, title);
  cn_sbuf_puts(sb, "</text>\n");
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) {
      double v = m[r * cols + c], t = scale(v, lo, hi, 1);
      int shade = (int)lround(255 * (1 - 0.8 * t));
      long long x = LEFT + c * CELL, y = TOP + r * CELL;
      cn_sbuf_printf(sb,
                     "<rect x=\"%lld\" y=\"%lld\" width=\"%d\" height=\"%d\" "
                     "fill=\"rgb(%d,%d,255)\"><title>%lld, %lld: %.6g</title></rect>\n",
                     x, y, CELL, CELL, shade, shade, (long long)r, (long long)c, v);
      cn_sbuf_printf(sb,
                     "<text x=\"%lld\" y=\"%lld\" text-anchor=\"middle\" font-size=\"9\">%.4g"
                     "</text>\n",
                     x + CELL / 2, y + CELL / 2 + 3, v);
    }
  cn_sbuf_puts(sb, "</g>\n");
}

/* The matrix of ~matrix (computed now) as malloc'd values with its dims; false after a
 * message. */
static bool matrix_values(nt_interp *I, const cn_nt_item *it, nt_env *scope, nt_plot *p,
                          double **out, int64_t *rows, int64_t *cols) {
  const cn_nt_expr *x = it->u.plot.matrix;
  cn_node *node = nt_computed_node(I, scope, x, &p->matrix);
  if (!node) return false;
  if (cn_node_rank(node) != 2)
    return nt_fail(I, x->pos, "plot's ~matrix draws a tensor of 2 axes: \"%s\" (#%d) has %d",
                   p->matrix.tensor->label, p->matrix.tensor->id, cn_node_rank(node)),
           false;
  *rows = cn_node_dim(node, 0);
  *cols = cn_node_dim(node, 1);
  if (*rows * *cols > 10000)
    return nt_fail(I, x->pos, "plot's ~matrix draws at most 10000 cells, not %lld",
                   (long long)(*rows * *cols)),
           false;
  if (!(*out = cn_malloc(I->ctx, sizeof **out * (size_t)(*rows * *cols)))) return false;
  if (cn_node_get_values(node, false, *out, (size_t)(*rows * *cols)) != CN_OK) {
    free(*out);
    return nt_fail_here(I, x->pos), false;
  }
  return true;
}

/* The SVG text of the plot (and the matrix, when m is not NULL) written to path by the atomic
 * writer of src/data (cn_data_writer: a temporary file renamed over path, through a symbolic
 * link, never over a FIFO, a device or a directory), whose messages become the statement's. */
static bool write_svg(nt_interp *I, const nt_plot *p, const char *title, const double *m,
                      int64_t rows, int64_t cols, const char *path, cn_nt_pos at) {
  int height = p->n_series * CHART + (m ? TOP + (int)rows * CELL + 20 : 0);
  cn_sbuf sb = {0};
  cn_sbuf_printf(&sb,
                 "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                 "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n"
                 "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                 WIDTH, height, WIDTH, height);
  for (int s = 0; s < p->n_series; s++) svg_chart(&sb, p, s, s * CHART);
  if (m) svg_matrix(&sb, title, m, rows, cols, p->n_series * CHART);
  cn_sbuf_puts(&sb, "</svg>\n");
  cn_status st = sb.failed ? cn_fail(I->ctx, CN_ERR_NOMEM, "out of memory") : CN_OK;
  cn_data_writer w;
  if (st == CN_OK) st = cn_data_writer_open(I->ctx, path, &w);
  if (st == CN_OK) {
    st = cn_data_write(I->ctx, &w, sb.data, sb.len);
    if (st == CN_OK)
      st = cn_data_writer_commit(I->ctx, &w);
    else
      cn_data_writer_abort(&w);
  }
  cn_sbuf_free(&sb);
  return st == CN_OK || (nt_fail_here(I, at), false);
}

/* ---- ASCII ---------------------------------------------------------------------------------- */

/* Series s as 8 rows of '*' marks between its min and max, the x values below when they are
 * small integers (as epochs are), else their range. */
static void ascii_chart(cn_sbuf *sb, const nt_plot *p, int s) {
  enum { ROWS = 8 };
  const double *v = p->y + s;
  size_t stride = (size_t)p->n_series;
  double lo, hi;
  range_of(v, p->n, stride, &lo, &hi);
  cn_sbuf_printf(sb, "%s\n", p->names[s]);
  for (int r = ROWS - 1; r >= 0; r--) {
    cn_sbuf_printf(sb, "%10.4f |", hi - (hi - lo) * (ROWS - 1 - r) / (ROWS - 1));
    for (int i = 0; i < p->n; i++) {
      double y = v[(size_t)i * stride];
      int row = hi > lo ? (int)((y - lo) / (hi - lo) * (ROWS - 1) + 0.5) : ROWS - 1;
      cn_sbuf_printf(sb, " %c ", row == r ? '*' : ' ');
    }
    cn_sbuf_putc(sb, '\n');
  }
  cn_sbuf_printf(sb, "%10s +", "");
  for (int i = 0; i < p->n; i++) cn_sbuf_puts(sb, "---");
  bool small = true;
  for (int i = 0; i < p->n; i++) small &= p->x[i] == floor(p->x[i]) && fabs(p->x[i]) < 100;
  cn_sbuf_printf(sb, "\n%10s  ", "x");
  if (small)
    for (int i = 0; i < p->n; i++) cn_sbuf_printf(sb, "%2d ", (int)p->x[i]);
  else
    cn_sbuf_printf(sb, "%.6g .. %.6g", p->x[0], p->x[p->n - 1]);
  cn_sbuf_putc(sb, '\n');
}

/* The matrix as a table: its title, the column indices, each row's index and values. */
static void ascii_matrix(cn_sbuf *sb, const char *title, const double *m, int64_t rows,
                         int64_t cols) {
  cn_sbuf_printf(sb, "%s\n%4s", title, "");
  for (int64_t c = 0; c < cols; c++) cn_sbuf_printf(sb, " %6lld", (long long)c);
  for (int64_t r = 0; r < rows; r++) {
    cn_sbuf_printf(sb, "\n%4lld", (long long)r);
    for (int64_t c = 0; c < cols; c++) cn_sbuf_printf(sb, " %6.6g", m[r * cols + c]);
  }
  cn_sbuf_putc(sb, '\n');
}

/* ---- The statement -------------------------------------------------------------------------- */

bool nt_plot_item(nt_interp *I, const cn_nt_item *it, nt_env *scope, nt_item_state *st) {
  bool first = st->plot == NULL;
  nt_plot *p = plot_of(I, it, scope, st);
  if (!p) return false;
  int n = p->n_series;
  double *y = cn_alloc(I->ctx, sizeof *y * (size_t)n);
  if (!y) return false;
  nt_value *v = nt_cell_value(I, scope, it->u.plot.x, &p->cells[n], first, "plot's ~x takes");
  if (!v) return false;
  if (v->kind != NT_V_NUM)
    return nt_fail(I, it->u.plot.x->pos, "plot's ~x is a number, found %s", nt_kind_name(v->kind)),
           false;
  double x = v->num;
  for (int s = 0; s < n; s++) {
    const cn_nt_expr *e = it->u.plot.values[s];
    if (!(v = nt_cell_value(I, scope, e, &p->cells[s], first, "a series takes"))) return false;
    if (v->kind != NT_V_NUM)
      return nt_fail(I, e->pos, "a series' value is a number, found %s", nt_kind_name(v->kind)),
             false;
    y[s] = v->num;
  }
  v = nt_host_of(I, scope, it->u.plot.file, NT_V_STR,
                 "plot writes a file: expected its name (a string)");
  if (!v) return false;
  const char *path = nt_output_path(I, v->str, true, it->u.plot.file->pos);
  if (!path) return false;
  bool ascii = false;
  if (it->u.plot.ascii) {
    if (!(v = nt_host_of(I, scope, it->u.plot.ascii, NT_V_BOOL, "plot's ~ascii is a boolean")))
      return false;
    ascii = v->b;
  }
  const char *title = NULL;
  if (it->u.plot.matrix_title) {
    if (!(v = nt_host_of(I, scope, it->u.plot.matrix_title, NT_V_STR,
                         "~matrix's title is a string")))
      return false;
    title = v->str;
  }
  double *m = NULL;
  int64_t rows = 0, cols = 0;
  if (it->u.plot.matrix && !matrix_values(I, it, scope, p, &m, &rows, &cols)) return false;
  if (m && !title) title = p->matrix.tensor->label;
  bool ok =
      add_point(I, p, x, y) && write_svg(I, p, title, m, rows, cols, path, it->u.plot.file->pos);
  cn_sbuf text = {0};
  if (ok && ascii) {
    for (int s = 0; s < n; s++) ascii_chart(&text, p, s);
    if (m) ascii_matrix(&text, title, m, rows, cols);
    if (text.failed) ok = (cn_fail(I->ctx, CN_ERR_NOMEM, "out of memory"), false);
    if (ok) nt_write_text(I, text.data);
  }
  cn_sbuf_free(&text);
  free(m);
  return ok;
}
