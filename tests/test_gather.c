/* Embeddings: cn_tensor_gather and the one-hot rewrite (src/tensor/gather.c, index-valued
 * projections in src/ir/index.c, CN_LL_LET in the loop IR and both backends).
 *   - forward and gradient of a gather with repeated ids over two batch axes equal, in f64, the
 *     values computed here by hand and those of the one-hot contraction it replaces, built with a
 *     materialized one-hot (an `eq` einsum the rewrite does not know), on both backends;
 *   - the routines read the table through a let of the ids' cell: no buffer of the one-hot's size,
 *     in the loops and in the generated C;
 *   - `table * one_hot ids` (compose, table {V -> D}) becomes the same gather: no one_hot buffer,
 *     same values and gradient;
 *   - ids outside [0, V) (negative, equal to V, far beyond) fail the run with the ids, the cell,
 *     the value and the table named, and their rows read nothing (0), never out of bounds (the ASan
 *     build of this test checks the last part);
 *   - the scatter-add gradient is bit-identical on 1, 2 and 3 threads, with the parallel threshold
 *     at 1 so that the loops inside the let run on the pool;
 *   - a one-hot product keeping the class axis stays a product over the one-hot, with its values;
 *   - float ids of whole numbers gather as integer ones, a fractional one fails the run, uint4x32
 *     ids are refused;
 *   - ids with one batch row (a unit-sized batch axis) gather their rows, and the guard still
 *     fails the run on a bad index. */
#include "check.h"
#include "graph_check.h"

#include <stdint.h>

#define V 5
#define D 3
#define B 2
#define T 4

/* ids [B] -> [T], with repeats, so the gradient's scatter-add accumulates into rows 1 and 3 */
static const double ids_v[B * T] = {3, 1, 3, 0, 1, 1, 4, 3};

static void table_values(double *tv) {
  for (int i = 0; i < V * D; i++) tv[i] = 0.25 * i - 1.5 + (i % 3) * 0.125;
}

static cn_tensor *ids_tensor(cn_graph *g, const double *v) {
  cn_graph_set_prec(g, CN_PREC_INT32);
  cn_tensor *ids = data(g, "ids", (cn_dims){AXES(B), NONE, AXES(T)}, v);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  return ids;
}

static cn_tensor *table_param(cn_graph *g, bool transposed) {
  double tv[V * D], tt[V * D];
  table_values(tv);
  /* transposed: {V -> D}, memory order [D, V] */
  for (int v = 0; v < V; v++)
    for (int d = 0; d < D; d++) tt[d * V + v] = tv[v * D + d];
  cn_dims dims = transposed ? (cn_dims){NONE, AXES(V), AXES(D)} : (cn_dims){NONE, NONE, AXES(V, D)};
  return cn_tensor_param(g, "table", &dims, data(g, "table_init", dims, transposed ? tt : tv));
}

/* The materialized one-hot contraction: eq(ids, range V) as an einsum (not cn_tensor_one_hot),
 * then summed against the table's first axis. */
static cn_tensor *one_hot_reference(cn_graph *g, cn_tensor *table, cn_tensor *ids) {
  cn_tensor *hot = cn_tensor_einsum(g, "b | -> t; c => b, t | -> c", CN_OP_ADD, CN_OP_EQ, 2,
                                    (cn_tensor *[]){ids, cn_tensor_range(g, V)});
  return cn_tensor_einsum(g, "b, t | -> c; c, d => b, t | -> d", CN_OP_ADD, CN_OP_MUL, 2,
                          (cn_tensor *[]){hot, table});
}

/* sin(0.7 * offset + 0.3), as weighted_sum computes it (fma) */
static double weight(int cell) {
  return sin(fma(0.7, cell, 0.3));
}

/* x[b, t, d] = table[ids[b, t], d]; grad[v, d] = the weights of the cells whose id is v, summed
 * in the order of the ids' cells. */
static void reference(double *x, double *grad) {
  double tv[V * D];
  table_values(tv);
  memset(grad, 0, sizeof(double) * V * D);
  for (int c = 0; c < B * T; c++)
    for (int d = 0; d < D; d++) {
      int v = (int)ids_v[c];
      x[c * D + d] = tv[v * D + d];
      grad[v * D + d] += weight(c * D + d);
    }
}

typedef cn_tensor *(*build_fn)(cn_graph *g, cn_tensor *table, cn_tensor *ids);

static cn_tensor *build_gather(cn_graph *g, cn_tensor *table, cn_tensor *ids) {
  return cn_tensor_gather(g, table, ids);
}

/* {V -> D} composed with one_hot ids: the rewrite's form */
static cn_tensor *build_compose(cn_graph *g, cn_tensor *table, cn_tensor *ids) {
  return cn_tensor_compose(g, CN_OP_ADD, CN_OP_MUL, table, cn_tensor_one_hot(g, ids, V));
}

/* Forward values and the table's gradient (memory order [V, D] whatever the table's layout) of
 * sum(weight * x) for x built by `make`, on backend b; the grad routine's loops must contain
 * `want` and not `forbid` (NULL: not checked), its generated C `want_c`. */
static void evaluate(build_fn make, bool transposed, cn_backend_kind b, double *x_out,
                     double *grad_out, const char *want, const char *forbid, const char *want_c) {
  cn_graph *g = new_graph(CN_PREC_DOUBLE);
  cn_ctx *ctx = cn_graph_ctx(g);
  cn_tensor *table = table_param(g, transposed);
  cn_tensor *x = make(g, table, ids_tensor(g, ids_v));
  CHECK_MSG(x != NULL, "build: %s", cn_ctx_error(ctx));
  double grad[V * D];
  if (x) {
    cn_tensor *loss = weighted_sum(g, x, (cn_dims){AXES(B, T), NONE, AXES(D)});
    cn_routine *r = compile(g, cn_graph_grad_update(g, loss), b, "grad");
    CHECK_STR(cn_tensor_shape(x), "2,4|->3");
    if (r && run(g, cn_graph_init_params(g, loss), b, "init")) {
      CHECK_INT(cn_routine_run(r), CN_OK);
      read_node(cn_tensor_value(x), x_out, B * T * D);
      read_node(cn_tensor_grad(table), grad, V * D);
      for (int v = 0; v < V; v++)
        for (int d = 0; d < D; d++)
          grad_out[v * D + d] = transposed ? grad[d * V + v] : grad[v * D + d];
      const char *loops = cn_routine_loops(r);
      if (want) CHECK_HAS(loops, want);
      if (forbid) CHECK_MSG(!strstr(loops, forbid), "\"%s\" in the loops:\n%s", forbid, loops);
      if (want_c && b == CN_BACKEND_C) CHECK_HAS(cn_routine_source(r), want_c);
    }
    cn_routine_free(r);
  }
  free_graph(g);
}

static void expect_exact(const char *what, const double *got, const double *want, int n) {
  int bad = 0;
  for (int i = 0; i < n; i++)
    if (memcmp(&got[i], &want[i], sizeof *got) != 0 && bad++ < 4)
      fprintf(stderr, "  %s[%d] = %.17g, expected %.17g\n", what, i, got[i], want[i]);
  CHECK_MSG(bad == 0, "%s: %d cells differ", what, bad);
}

/* The gather, the rewritten compose and the materialized one-hot against the hand reference. */
static void test_values(cn_backend_kind b) {
  double want_x[B * T * D], want_g[V * D], x[B * T * D], grad[V * D];
  reference(want_x, want_g);
  /* the gather: a let of the ids' cell, no one-hot-sized [2, 4, 5] buffer */
  memset(x, 0, sizeof x);
  evaluate(build_gather, false, b, x, grad, "let c = ids[", "[2, 4, 5]", "if (0 <= c && c < 5) {");
  expect_exact("gather", x, want_x, B * T * D);
  expect_exact("gather grad", grad, want_g, V * D);
  /* the rewritten one-hot: no one_hot buffer at all */
  memset(x, 0, sizeof x);
  evaluate(build_compose, true, b, x, grad, "= ids[", "one_hot", NULL);
  expect_exact("one_hot compose", x, want_x, B * T * D);
  expect_exact("one_hot compose grad", grad, want_g, V * D);
  /* the materialized one-hot it replaces: a [2, 4, 5] buffer, same values */
  memset(x, 0, sizeof x);
  evaluate(one_hot_reference, false, b, x, grad, "[2, 4, 5]", "let ", NULL);
  expect_near("one-hot einsum", x, want_x, B * T * D, 1e-15);
  expect_near("one-hot einsum grad", grad, want_g, V * D, 1e-15);
}

/* Out-of-range ids fail the run, naming the ids, the first bad cell, its value and the table;
 * their rows of the result are 0 and the good ones right (the let skipped the bad points). */
static void test_out_of_range(cn_backend_kind b) {
  static const struct {
    double ids[B * T];
    const char *message;
  } cases[] = {
      {{3, -1, 3, 0, 1, 1, 4, 3}, "-1 at [0, 1]"},
      {{3, 1, 3, 0, 1, 5, 4, 3}, "5 at [1, 1]"},
      {{99, 1, 3, 0, 1, 1, 4, -7}, "99 at [0, 0]"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    cn_graph *g = new_graph(CN_PREC_DOUBLE);
    cn_ctx *ctx = cn_graph_ctx(g);
    cn_tensor *table = table_param(g, false);
    cn_tensor *x = cn_tensor_gather(g, table, ids_tensor(g, cases[k].ids));
    CHECK_MSG(x != NULL, "build: %s", cn_ctx_error(ctx));
    cn_routine *r = x ? compile(g, cn_graph_forward(g, x), b, "eval") : NULL;
    if (r && run(g, cn_graph_init_params(g, x), b, "init")) {
      CHECK_INT(cn_routine_run(r), CN_ERR_RUNTIME);
      char want[256];
      snprintf(want, sizeof want,
               "routine 'eval': gather: index %s of \"ids\" (#3) is not one of the 5 rows of "
               "\"table\" (#2): an integer from 0 to 4",
               cases[k].message);
      CHECK_STR(cn_ctx_error(ctx), want);
      double tv[V * D], got[B * T * D];
      table_values(tv);
      if (read_node(cn_tensor_value(x), got, B * T * D))
        for (int c = 0; c < B * T; c++)
          for (int d = 0; d < D; d++) {
            double id = cases[k].ids[c];
            double w = id >= 0 && id < V ? tv[(int)id * D + d] : 0;
            CHECK_MSG(got[c * D + d] == w, "case %zu: x[%d, %d] = %g, expected %g", k, c, d,
                      got[c * D + d], w);
          }
    }
    cn_routine_free(r);
    free_graph(g);
  }
}

/* A larger scatter-add (1024 ids over 7 rows) with the parallel threshold at 1, so that the loops
 * inside the let go to the pool: the table's gradient has the same bits on 1, 2 and 3 threads, and
 * equals the sum in the order of the ids' cells. */
#define BT_B 16
#define BT_T 64
#define BT_V 7
#define BT_D 40
static void test_threads(void) {
  static double ids[BT_B * BT_T], want[BT_V * BT_D], grads[3][BT_V * BT_D];
  for (int c = 0; c < BT_B * BT_T; c++) ids[c] = (c * 5 + c / 7) % BT_V;
  memset(want, 0, sizeof want);
  for (int c = 0; c < BT_B * BT_T; c++)
    for (int d = 0; d < BT_D; d++) want[(int)ids[c] * BT_D + d] += weight(c * BT_D + d);
  for (int threads = 1; threads <= 3; threads++) {
    cn_graph *g = new_graph(CN_PREC_DOUBLE);
    cn_ctx *ctx = cn_graph_ctx(g);
    char n[4];
    snprintf(n, sizeof n, "%d", threads);
    CHECK(cn_ctx_set_option(ctx, "threads", n) == CN_OK);
    CHECK(cn_ctx_set_option(ctx, "parallel_work", "1") == CN_OK);
    /* the test is about the parallel scatter-add: scheduled even where CANNL_SCHEDULE=none */
    CHECK(cn_ctx_set_option(ctx, "schedule", "all") == CN_OK);
    cn_tensor *table = cn_tensor_param(g, "table", &(cn_dims){NONE, NONE, AXES(BT_V, BT_D)},
                                       cn_tensor_number(g, 0.5));
    cn_graph_set_prec(g, CN_PREC_INT32);
    cn_tensor *id = data(g, "ids", (cn_dims){AXES(BT_B), NONE, AXES(BT_T)}, ids);
    cn_graph_set_prec(g, CN_PREC_DOUBLE);
    cn_tensor *x = cn_tensor_gather(g, table, id);
    cn_tensor *loss = x ? weighted_sum(g, x, (cn_dims){AXES(BT_B, BT_T), NONE, AXES(BT_D)}) : NULL;
    CHECK_MSG(loss != NULL, "build: %s", cn_ctx_error(ctx));
    cn_routine *r = loss ? compile(g, cn_graph_grad_update(g, loss), CN_BACKEND_C, "grad") : NULL;
    if (r) {
      /* the scatter-add's row loop, inside the let, runs on the pool */
      const char *let = strstr(cn_routine_loops(r), "table.grad[c, ");
      CHECK(let != NULL);
      if (let) {
        const char *loop = let;
        while (loop > cn_routine_loops(r) && strncmp(loop, "for ", 4) != 0) loop--;
        const char *par = strstr(loop, "(parallel");
        CHECK_MSG(strncmp(loop, "for ", 4) == 0 && par && par < let,
                  "the loop around the scatter-add is not parallel:\n%.300s", loop);
      }
      CHECK_INT(cn_routine_run(r), CN_OK);
      read_node(cn_tensor_grad(table), grads[threads - 1], BT_V * BT_D);
      expect_exact("threads grad", grads[threads - 1], want, BT_V * BT_D);
    }
    cn_routine_free(r);
    free_graph(g);
  }
  CHECK(memcmp(grads[0], grads[1], sizeof grads[0]) == 0);
  CHECK(memcmp(grads[0], grads[2], sizeof grads[0]) == 0);
}

/* A one-hot product that keeps the class axis (no sum over it) is no gather: it stays a product
 * over the materialized one-hot, with its values. The gather's own assignment names its
 * gathered symbol in the %cd dump. */
static void test_not_rewritten(cn_backend_kind b) {
  cn_graph *g = new_graph(CN_PREC_DOUBLE);
  cn_ctx *ctx = cn_graph_ctx(g);
  cn_tensor *table = table_param(g, false), *ids = ids_tensor(g, ids_v);
  cn_tensor *kept = cn_tensor_einsum(g, "b, t | -> c; c, d => b, t | -> c, d", CN_OP_ADD, CN_OP_MUL,
                                     2, (cn_tensor *[]){cn_tensor_one_hot(g, ids, V), table});
  CHECK_MSG(kept != NULL, "build: %s", cn_ctx_error(ctx));
  cn_routine *r = kept ? compile(g, cn_graph_forward(g, kept), b, "kept") : NULL;
  double got[B * T * V * D], tv[V * D];
  table_values(tv);
  if (r && run(g, cn_graph_init_params(g, kept), b, "init")) {
    CHECK_INT(cn_routine_run(r), CN_OK);
    CHECK_HAS(cn_routine_loops(r), "one_hot[");
    CHECK_MSG(!strstr(cn_routine_loops(r), "let "), "a let in:\n%s", cn_routine_loops(r));
    if (read_node(cn_tensor_value(kept), got, B * T * V * D))
      for (int c = 0; c < B * T; c++)
        for (int v = 0; v < V; v++)
          for (int d = 0; d < D; d++) {
            double w = (int)ids_v[c] == v ? tv[v * D + d] : 0;
            CHECK_MSG(got[(c * V + v) * D + d] == w, "kept[%d, %d, %d] = %g, expected %g", c, v, d,
                      got[(c * V + v) * D + d], w);
          }
  }
  cn_routine_free(r);
  cn_tensor *x = cn_tensor_gather(g, table, ids);
  const cn_asgn *fw = x ? cn_graph_forward(g, x) : NULL;
  CHECK_MSG(fw != NULL, "build: %s", cn_ctx_error(ctx));
  if (fw) CHECK_HAS(cn_asgn_to_string(ctx, fw), "gather =:+ table ~gather:c<-ids;\n");
  free_graph(g);
}

/* Float ids holding whole numbers gather as integer ones do; one that is not whole fails the run;
 * uint4x32 words are refused when the gather is built. */
static void test_float_ids(cn_backend_kind b) {
  double want_x[B * T * D], want_g[V * D], got[B * T * D];
  reference(want_x, want_g);
  cn_graph *g = new_graph(CN_PREC_DOUBLE);
  cn_ctx *ctx = cn_graph_ctx(g);
  cn_tensor *table = table_param(g, false);
  cn_tensor *x =
      cn_tensor_gather(g, table, data(g, "fids", (cn_dims){AXES(B), NONE, AXES(T)}, ids_v));
  CHECK_MSG(x != NULL, "build: %s", cn_ctx_error(ctx));
  if (x && run(g, cn_graph_init_params(g, x), b, "init") &&
      run(g, cn_graph_forward(g, x), b, "fw") && read_node(cn_tensor_value(x), got, B * T * D))
    expect_exact("float ids", got, want_x, B * T * D);
  static const double half[B * T] = {3, 1, 3, 0, 1, 2.5, 4, 3};
  x = cn_tensor_gather(g, table, data(g, "half", (cn_dims){AXES(B), NONE, AXES(T)}, half));
  cn_routine *r = x ? compile(g, cn_graph_forward(g, x), b, "eval") : NULL;
  if (r) {
    CHECK_INT(cn_routine_run(r), CN_ERR_RUNTIME);
    CHECK_STR(cn_ctx_error(ctx), "routine 'eval': gather: index 2.5 at [1, 1] of \"half\" (#16) is "
                                 "not one of the 5 rows of \"table\" (#2): an integer from 0 to 4");
  }
  cn_routine_free(r);
  CHECK(cn_tensor_gather(g, table, cn_tensor_embed_self_id(g)) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "gather: the indices \"embed_self_id\"");
  CHECK_HAS(cn_ctx_error(ctx), "are of precision uint4x32; indices are integers (e.g. int32) or "
                               "whole numbers of a float precision");
  free_graph(g);
}

/* ids with one batch row (batch [1], output [3]): the unit-sized batch axis reaches the guard's
 * pointwise chain through its rank-free constants and the einsum that reads the guard with the
 * ids' own spec; every tensor of the chain keeps the ids' batch axis (shape inference used to
 * close one of them to no batch axis and fail). Rows 2, 0, 2 of a [3; 2] table; an index 3 still
 * fails the run. */
static void test_batch_of_one(cn_backend_kind b) {
  static const double tv[6] = {1, 2, 3, 4, 5, 6}, want[6] = {5, 6, 1, 2, 5, 6};
  static const double good[3] = {2, 0, 2}, bad[3] = {2, 3, 0};
  for (int k = 0; k < 2; k++) {
    cn_graph *g = new_graph(CN_PREC_DOUBLE);
    cn_ctx *ctx = cn_graph_ctx(g);
    cn_tensor *table = data(g, "table", (cn_dims){NONE, NONE, AXES(3, 2)}, tv);
    cn_graph_set_prec(g, CN_PREC_INT32);
    cn_tensor *ids = data(g, "ids", (cn_dims){AXES(1), NONE, AXES(3)}, k ? bad : good);
    cn_graph_set_prec(g, CN_PREC_DOUBLE);
    cn_tensor *x = cn_tensor_gather(g, table, ids);
    cn_routine *r = x ? compile(g, cn_graph_forward(g, x), b, "fw") : NULL;
    CHECK_MSG(r != NULL, "build: %s", cn_ctx_error(ctx));
    if (r && !k) {
      double got[6];
      CHECK_STR(cn_tensor_shape(x), "1,3|->2");
      CHECK_INT(cn_routine_run(r), CN_OK);
      if (read_node(cn_tensor_value(x), got, 6)) expect_exact("batch of one", got, want, 6);
    } else if (r) {
      CHECK_INT(cn_routine_run(r), CN_ERR_RUNTIME);
      CHECK_HAS(cn_ctx_error(ctx), "gather: index 3 at [0, 1] of \"ids\" (#2) is not one of the "
                                   "3 rows of \"table\" (#1)");
    }
    cn_routine_free(r);
    free_graph(g);
  }
}

int main(void) {
  for (int k = 0; k < 2; k++) {
    test_values(backends[k]);
    test_out_of_range(backends[k]);
    test_float_ids(backends[k]);
    test_not_rewritten(backends[k]);
    test_batch_of_one(backends[k]);
  }
  test_threads();
  CHECK_DONE();
}
