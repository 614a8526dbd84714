/* libFuzzer target: the Tile parser and compiler (src/tile). The input (up to its first NUL
 * byte) is read three ways:
 *   - as the body of a Tile function with parameters I, V, W, J, S (cn_tile_fn_create), applied
 *     to I [5], V [4], W [3], J [3], S = 2 and to I [4, 3], V [2], W [2], J [3], S = 1
 *     (cn_tile_fn_apply), each result's forward code built (cn_graph_forward: materialization and
 *     projections, no buffers);
 *   - as a body with its own C++ header (no parameters given), applied to one to three tensors;
 *   - as one contraction (cn_tile) with I [4, 3] (dims M, N), V [3] (N), W [2] (K), A [2, 4],
 *     B [4] and the dims S = 2, P = 1.
 * The names are those of the docs' and tests' bodies and statements, the seeds of the corpus.
 * Beyond ASan and UBSan, the harness aborts (a crash libFuzzer reports) when a failure is not
 * CN_ERR_INVALID, or a function body's syntax error is not positioned in the body
 * ("fuzz.tile:LINE:COL: "). Nothing runs a routine: a valid body may ask for outputs of 2^40
 * bytes, which is not a bug. One context per reading, destroyed after it. */
#include "cannl.h"

#define FUZZ_NAME "fuzz_tile"
#include "fuzz_common.h"

static void expect_invalid(cn_ctx *ctx) {
  if (cn_ctx_status(ctx) != CN_ERR_INVALID)
    fail("a failure with a status other than CN_ERR_INVALID:", cn_ctx_error(ctx));
}

static cn_tensor *vector(cn_graph *g, const char *label, int rank, const int64_t *dims) {
  static const double values[12] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8};
  cn_dims d = {CN_AXES_NONE, CN_AXES_NONE, {rank, dims, NULL}};
  int64_t n = 1;
  for (int a = 0; a < rank; a++) n *= dims[a];
  cn_tensor *t = cn_tensor_data(g, label, &d, values, (size_t)n);
  if (!t) abort(); /* valid data: only memory could fail, and it has no limit here */
  return t;
}

static void build(cn_graph *g, cn_tensor *t) {
  if (!t || !cn_graph_forward(g, t)) expect_invalid(cn_graph_ctx(g));
}

static void as_function(const char *text) {
  cn_ctx *ctx = cn_ctx_create();
  if (!ctx) abort();
  const char *const params[5] = {"I", "V", "W", "J", "S"};
  cn_tile_fn *f = cn_tile_fn_create(ctx, "f", 5, params, text, "fuzz.tile", 1, 1);
  if (!f) {
    expect_invalid(ctx);
    if (strncmp(cn_ctx_error(ctx), "fuzz.tile:", 10) != 0)
      fail("a syntax error not positioned in the body:", cn_ctx_error(ctx));
  }
  for (int k = 0; f && k < 2; k++) {
    cn_graph *g = cn_graph_create(ctx);
    if (!g) abort();
    cn_tensor *I = k ? vector(g, "I", 2, (int64_t[]){4, 3}) : vector(g, "I", 1, (int64_t[]){5});
    cn_tensor *V = vector(g, "V", 1, (int64_t[]){4 - 2 * k});
    cn_tensor *W = vector(g, "W", 1, (int64_t[]){3 - k});
    cn_tensor *J = vector(g, "J", 1, (int64_t[]){3});
    build(g, cn_tile_fn_apply(g, f, 5,
                              (cn_tile_arg[]){{I, 0}, {V, 0}, {W, 0}, {J, 0}, {NULL, 2 - k}}));
  }
  cn_ctx_destroy(ctx);
}

static void as_headed_function(const char *text) {
  cn_ctx *ctx = cn_ctx_create();
  if (!ctx) abort();
  cn_tile_fn *f = cn_tile_fn_create(ctx, "f", 0, NULL, text, "fuzz.tile", 1, 1);
  if (!f) expect_invalid(ctx);
  for (int n = 1; f && n <= 3; n++) {
    cn_graph *g = cn_graph_create(ctx);
    if (!g) abort();
    cn_tile_arg args[3];
    for (int a = 0; a < n; a++) args[a] = (cn_tile_arg){vector(g, "A", 1, (int64_t[]){5}), 0};
    build(g, cn_tile_fn_apply(g, f, n, args));
  }
  cn_ctx_destroy(ctx);
}

static void as_statement(const char *text) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = ctx ? cn_graph_create(ctx) : NULL;
  if (!g) abort();
  cn_tile_binding b[7] = {{"I", vector(g, "I", 2, (int64_t[]){4, 3}), "M, N", 0},
                          {"V", vector(g, "V", 1, (int64_t[]){3}), "N", 0},
                          {"W", vector(g, "W", 1, (int64_t[]){2}), "K", 0},
                          {"A", vector(g, "A", 2, (int64_t[]){2, 4}), NULL, 0},
                          {"B", vector(g, "B", 1, (int64_t[]){4}), NULL, 0},
                          {"S", NULL, NULL, 2},
                          {"P", NULL, NULL, 1}};
  build(g, cn_tile(g, text, 7, b));
  cn_ctx_destroy(ctx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size);
  if (!text) return 0;
  as_function(text);
  as_headed_function(text);
  as_statement(text);
  free(text);
  return 0;
}
