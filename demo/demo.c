/* The cannl demo: a matrix multiplication and a padded 2-D convolution built by hand through the
 * C API (nodes, symbols, index maps, projections records, assignments, routines), each run on
 * the reference interpreter and on generated C. It prints the inputs, the assignments, the
 * projections, the loop IR and the results, and checks the backends against each other and
 * against a direct computation; demo_run returns 1 if any of them disagree or anything fails.
 *
 * The contraction is never declared: the matmul's product space has iterators i, j, k and the
 * output map mentions only i and j, so the loop over k writes each output cell repeatedly and the
 * `=:+` accumulation sums. The convolution reads its input at the affine index o + k - 1 from a
 * buffer padded by one cell on every side, so the margins (reset to the neutral 0 of `+`) are
 * read at the image border.
 *
 * The models and demo_run, their single entry point, live here (demo.h) and are shared by the
 * program examples/demo.c and the `cannl demo` command (tools/cannl.c). */
#include "demo.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define DEMO_MAX_CELLS 64

/* One model: an assignment over its projections, the nodes to print, and the output computed
 * directly by plain loops (the independent reference). */
typedef struct {
  const char *title;
  const char *routine_name;
  const cn_asgn *asgn;
  const cn_proj *proj;
  int n_inputs;
  cn_node *inputs[2];
  cn_node *output;
  double expected[DEMO_MAX_CELLS];
} demo_model;

static cn_node *demo_matrix(cn_ctx *ctx, const char *label, int64_t rows, int64_t cols,
                            const double *values) {
  int64_t dims[2] = {rows, cols};
  cn_node *node = cn_node_create(ctx, label, CN_PREC_SINGLE, 2, dims);
  if (!node) return NULL;
  if (values && cn_node_set_values(node, false, values, (size_t)(rows * cols)) != CN_OK)
    return NULL;
  return node;
}

/* c[i,j] =:+ a[i,k] * b[k,j]: a 2x3 by 3x2 matrix multiplication. */
static cn_status demo_build_matmul(cn_ctx *ctx, demo_model *m) {
  enum { I = 2, K = 3, J = 2 };
  const double a_values[I * K] = {1, 2, 3, 4, 5, 6};
  const double b_values[K * J] = {7, 8, 9, 10, 11, 12};
  m->title = "matrix multiplication: c = a . b (the sum over k is emergent)";
  m->routine_name = "matmul";
  cn_node *a = demo_matrix(ctx, "a", I, K, a_values);
  cn_node *b = demo_matrix(ctx, "b", K, J, b_values);
  cn_node *c = demo_matrix(ctx, "c", I, J, NULL);
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0),
            k = cn_symbol_create(ctx, "k", 0);
  if (!a || !b || !c || i < 0 || j < 0 || k < 0) return cn_ctx_status(ctx);

  const cn_symbol iterators[3] = {i, j, k};
  const int64_t sizes[3] = {I, J, K};
  const int64_t a_dims[2] = {I, K}, b_dims[2] = {K, J}, c_dims[2] = {I, J};
  const cn_index a_map[2] = {cn_index_iter(i), cn_index_iter(k)};
  const cn_index b_map[2] = {cn_index_iter(k), cn_index_iter(j)};
  const cn_index c_map[2] = {cn_index_iter(i), cn_index_iter(j)};
  const cn_proj_tensor rhs[2] = {{2, a_dims, a_map}, {2, b_dims, b_map}};
  m->proj = cn_proj_create(ctx, 3, iterators, sizes, (cn_proj_tensor){2, c_dims, c_map}, 2, rhs);
  if (!m->proj) return cn_ctx_status(ctx);
  const cn_buffer operands[2] = {{a, false}, {b, false}};
  m->asgn = cn_asgn_accum(ctx, true, CN_OP_ADD, c, CN_OP_MUL, operands, m->proj);
  if (!m->asgn) return cn_ctx_status(ctx);

  m->n_inputs = 2;
  m->inputs[0] = a;
  m->inputs[1] = b;
  m->output = c;
  for (int r = 0; r < I; r++)
    for (int s = 0; s < J; s++) {
      double sum = 0;
      for (int t = 0; t < K; t++) sum += a_values[r * K + t] * b_values[t * J + s];
      m->expected[r * J + s] = sum;
    }
  return CN_OK;
}

/* out[o1,o2] =:+ image[o1+k1-1, o2+k2-1] * kernel[k1,k2]: a 3x3 box blur of a 5x5 image padded
 * by 1, so the output keeps the image's size and border cells average in the zero margins. */
static cn_status demo_build_blur(cn_ctx *ctx, demo_model *m) {
  enum { N = 5, KS = 3, PAD = 1 };
  double image_values[N * N], kernel_values[KS * KS];
  for (int p = 0; p < N * N; p++) image_values[p] = 9;
  for (int p = 0; p < KS * KS; p++) kernel_values[p] = 1.0 / (KS * KS);
  m->title = "2-D convolution: a 3x3 box blur of a 5x5 image padded by 1";
  m->routine_name = "blur";
  /* Padding is fixed before the buffer is first used, so set it before the values. */
  cn_node *image = demo_matrix(ctx, "image", N, N, NULL);
  if (!image || cn_node_set_padding(image, 0, PAD, PAD) != CN_OK ||
      cn_node_set_padding(image, 1, PAD, PAD) != CN_OK ||
      cn_node_set_values(image, false, image_values, N * N) != CN_OK)
    return cn_ctx_status(ctx);
  cn_node *kernel = demo_matrix(ctx, "kernel", KS, KS, kernel_values);
  cn_node *out = demo_matrix(ctx, "blurred", N, N, NULL);
  cn_symbol o1 = cn_symbol_create(ctx, "o1", 0), o2 = cn_symbol_create(ctx, "o2", 0);
  cn_symbol k1 = cn_symbol_create(ctx, "k1", 0), k2 = cn_symbol_create(ctx, "k2", 0);
  if (!kernel || !out || o1 < 0 || o2 < 0 || k1 < 0 || k2 < 0) return cn_ctx_status(ctx);

  const cn_symbol iterators[4] = {o1, o2, k1, k2};
  const int64_t sizes[4] = {N, N, KS, KS};
  const int64_t image_dims[2] = {N, N}, kernel_dims[2] = {KS, KS}, out_dims[2] = {N, N};
  const cn_symbol rows[2] = {o1, k1}, cols[2] = {o2, k2};
  const int64_t unit[2] = {1, 1};
  const cn_index image_map[2] = {cn_index_affine(2, rows, unit, -PAD),
                                 cn_index_affine(2, cols, unit, -PAD)};
  const cn_index kernel_map[2] = {cn_index_iter(k1), cn_index_iter(k2)};
  const cn_index out_map[2] = {cn_index_iter(o1), cn_index_iter(o2)};
  const cn_proj_tensor rhs[2] = {{2, image_dims, image_map}, {2, kernel_dims, kernel_map}};
  m->proj =
      cn_proj_create(ctx, 4, iterators, sizes, (cn_proj_tensor){2, out_dims, out_map}, 2, rhs);
  if (!m->proj) return cn_ctx_status(ctx);
  const cn_buffer operands[2] = {{image, false}, {kernel, false}};
  m->asgn = cn_asgn_accum(ctx, true, CN_OP_ADD, out, CN_OP_MUL, operands, m->proj);
  if (!m->asgn) return cn_ctx_status(ctx);

  m->n_inputs = 2;
  m->inputs[0] = image;
  m->inputs[1] = kernel;
  m->output = out;
  for (int r = 0; r < N; r++)
    for (int s = 0; s < N; s++) {
      double sum = 0;
      for (int u = 0; u < KS; u++)
        for (int v = 0; v < KS; v++) {
          int y = r + u - PAD, x = s + v - PAD;
          if (y >= 0 && y < N && x >= 0 && x < N)
            sum += image_values[y * N + x] * kernel_values[u * KS + v];
        }
      m->expected[r * N + s] = sum;
    }
  return CN_OK;
}

static void demo_print_grid(FILE *out, const char *caption, const cn_node *node,
                            const double *values) {
  int64_t rows = cn_node_dim(node, 0), cols = cn_node_dim(node, 1);
  fprintf(out, "%s (%lld x %lld):\n", caption, (long long)rows, (long long)cols);
  for (int64_t r = 0; r < rows; r++) {
    fputs("   ", out);
    for (int64_t s = 0; s < cols; s++) fprintf(out, " %8.4g", values[r * cols + s]);
    fputc('\n', out);
  }
}

static bool demo_close(double actual, double expected) {
  return fabs(actual - expected) <= 1e-4 * fmax(1.0, fabs(expected));
}

/* Compiles the model for one backend, runs it from a zeroed output and reads the result. */
static cn_routine *demo_compile_and_run(cn_ctx *ctx, const demo_model *m, cn_backend_kind backend,
                                        double *result) {
  cn_routine *routine = cn_routine_compile(ctx, m->asgn, backend, m->routine_name);
  if (!routine) return NULL;
  size_t n = (size_t)cn_node_numel(m->output);
  const double zeros[DEMO_MAX_CELLS] = {0};
  if (cn_node_set_values(m->output, false, zeros, n) != CN_OK || cn_routine_run(routine) != CN_OK ||
      cn_node_get_values(m->output, false, result, n) != CN_OK) {
    cn_routine_free(routine);
    return NULL;
  }
  return routine;
}

/* Prints only the text --emit asks for (no run). */
static cn_status demo_emit_text(cn_ctx *ctx, const demo_model *m, const demo_options *opts,
                                FILE *out) {
  fprintf(out, "// %s: %s\n", m->routine_name, m->title);
  if (opts->emit == DEMO_EMIT_ASGN) {
    const char *text = cn_asgn_to_string(ctx, m->asgn);
    if (!text) return cn_ctx_status(ctx);
    fputs(text, out);
    return CN_OK;
  }
  cn_backend_kind backend = opts->backend >= 0          ? (cn_backend_kind)opts->backend
                            : opts->emit == DEMO_EMIT_C ? CN_BACKEND_C
                                                        : CN_BACKEND_INTERP;
  cn_routine *routine = cn_routine_compile(ctx, m->asgn, backend, m->routine_name);
  if (!routine) return cn_ctx_status(ctx);
  fputs(opts->emit == DEMO_EMIT_C ? cn_routine_source(routine) : cn_routine_loops(routine), out);
  cn_routine_free(routine);
  return CN_OK;
}

/* Prints the model, runs it on the selected backends and checks the results. Returns 0, or 1
 * after a message on stderr. */
static int demo_show(cn_ctx *ctx, const demo_model *m, const demo_options *opts, FILE *out) {
  fprintf(out, "== %s ==\n\n", m->title);
  double values[DEMO_MAX_CELLS];
  for (int t = 0; t < m->n_inputs; t++) {
    size_t n = (size_t)cn_node_numel(m->inputs[t]);
    if (cn_node_get_values(m->inputs[t], false, values, n) != CN_OK) return 1;
    demo_print_grid(out, cn_node_label(m->inputs[t]), m->inputs[t], values);
  }
  const char *asgn_text = cn_asgn_to_string(ctx, m->asgn);
  const char *proj_text = cn_proj_to_string(ctx, m->proj);
  if (!asgn_text || !proj_text) return 1;
  fprintf(out, "\nassignment:\n%s\nprojections:\n%s\n", asgn_text, proj_text);

  bool both = opts->backend < 0;
  const struct {
    bool selected;
    cn_backend_kind kind;
    const char *name;
  } backends[3] = {{both || opts->backend == CN_BACKEND_INTERP, CN_BACKEND_INTERP, "interpreter"},
                   {both || opts->backend == CN_BACKEND_C, CN_BACKEND_C, "generated C"},
                   {opts->backend > CN_BACKEND_C, (cn_backend_kind)opts->backend,
                    cn_backend_name((cn_backend_kind)opts->backend)}};
  double results[3][DEMO_MAX_CELLS];
  bool loops_printed = false;
  size_t n = (size_t)cn_node_numel(m->output);
  for (int b = 0; b < 3; b++) {
    if (!backends[b].selected) continue;
    cn_routine *routine = demo_compile_and_run(ctx, m, backends[b].kind, results[b]);
    if (!routine) return 1;
    if (!loops_printed) fprintf(out, "loop IR:\n%s\n", cn_routine_loops(routine));
    loops_printed = true;
    cn_routine_free(routine);
    char caption[128];
    snprintf(caption, sizeof caption, "%s on the %s", cn_node_label(m->output), backends[b].name);
    demo_print_grid(out, caption, m->output, results[b]);
    for (size_t p = 0; p < n; p++)
      if (!demo_close(results[b][p], m->expected[p])) {
        fprintf(stderr, "demo: %s: the %s gives %g at cell %zu, a direct computation %g\n",
                m->routine_name, backends[b].name, results[b][p], p, m->expected[p]);
        return 1;
      }
  }
  if (both) {
    for (size_t p = 0; p < n; p++)
      if (!demo_close(results[0][p], results[1][p])) {
        fprintf(stderr, "demo: %s: the interpreter gives %g at cell %zu, generated C %g\n",
                m->routine_name, results[0][p], p, results[1][p]);
        return 1;
      }
    fputs("the interpreter and generated C agree, and match a direct computation\n", out);
  } else {
    fputs("the result matches a direct computation\n", out);
  }
  fputc('\n', out);
  return 0;
}

int demo_run(const demo_options *opts, FILE *out) {
  cn_ctx *ctx = cn_ctx_create();
  if (!ctx) {
    fputs("demo: out of memory\n", stderr);
    return 1;
  }
  demo_model models[2];
  int rc = 0;
  if (demo_build_matmul(ctx, &models[0]) != CN_OK || demo_build_blur(ctx, &models[1]) != CN_OK)
    rc = 1;
  for (int m = 0; m < 2 && rc == 0; m++) {
    if (opts->emit == DEMO_EMIT_ALL)
      rc = demo_show(ctx, &models[m], opts, out);
    else
      rc = demo_emit_text(ctx, &models[m], opts, out) == CN_OK ? 0 : 1;
  }
  if (rc != 0 && cn_ctx_status(ctx) != CN_OK) fprintf(stderr, "demo: %s\n", cn_ctx_error(ctx));
  cn_ctx_destroy(ctx);
  return rc;
}
