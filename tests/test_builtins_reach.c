/* The builtins people reach for (issue 31): abs, clip, where, max / min reducing over axes,
 * concat and reshape.
 *
 *   - values on both backends (double) against numpy's (np.abs, np.clip, np.where, x.max(),
 *     x.max(axis=0), x.min(axis=1) of one 3x4 matrix, printed by /usr/bin/python3 and copied
 *     here), bit-identical between the interpreter and generated C;
 *   - gradients by hand where the functions have corners (abs at 0, clip at its bounds, ties of
 *     max), and against central differences in double through the C API on both backends;
 *   - integer abs (wraparound of the most negative int64), the C API's refusals, and the
 *     notation's positioned errors. */
#include "check.h"
#include "notation_check.h"

#include "cannl.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define X34                                                                                        \
  "let x = {x = [[0.5; -1.25; 3.0; 2.0]; [4.5; 0.0; -3.5; 1.0]; [-2.0; 6.0; 1.5; -0.75]]}\n"

/* ---- Values: numpy's, both backends ---------------------------------------------------------- */

static void test_values(void) {
  outcome o[2];
  const char *script = X34 "let c = [[1.0; 0.0; 2.0; 0.0]; [0.0; 0.0; 1.0; 1.0]; [1.0; 1.0; 0.0; "
                           "0.0]]\n"
                           "print (abs x)\nprint (clip x ~min:(-1.0) ~max:2.0)\n"
                           "print (where c x (neg x))\n"
                           "print (max x)\nprint (min x)\n"
                           "print (max ~spec:\"ij => j\" x)\nprint (min ~spec:\"ij => i\" x)\n"
                           "print (max ~spec:\"ij => i\" x)\n"
                           "print (clip x ~max:0.0)\nprint (clip x ~min:1.0)\n"
                           "print (max (x, 1.0))\n";
  for (int b = 0; b < 2; b++) {
    if (!run(&o[b], b, script)) return;
    expect(&o[b], b, 0, "abs", "|->3,4",
           VALUES(0.5, 1.25, 3., 2., 4.5, 0., 3.5, 1., 2., 6., 1.5, 0.75), 0);
    expect(&o[b], b, 1, "clip", "|->3,4",
           VALUES(0.5, -1., 2., 2., 2., 0., -1., 1., -1., 2., 1.5, -0.75), 0);
    expect(&o[b], b, 2, "where", "|->3,4",
           VALUES(0.5, 1.25, 3., -2., -4.5, -0., -3.5, 1., -2., 6., -1.5, 0.75), 0);
    expect(&o[b], b, 3, "max", "|->", VALUES(6.0), 0);
    expect(&o[b], b, 4, "min", "|->", VALUES(-3.5), 0);
    expect(&o[b], b, 5, "max", "|->4", VALUES(4.5, 6., 3., 2.), 0);
    expect(&o[b], b, 6, "min", "|->3", VALUES(-1.25, -3.5, -2.), 0);
    expect(&o[b], b, 7, "max", "|->3", VALUES(3., 4.5, 6.), 0);
    expect(&o[b], b, 8, "clip", "|->3,4", VALUES(0, -1.25, 0, 0, 0, 0, -3.5, 0, -2, 0, 0, -0.75),
           0);
    expect(&o[b], b, 9, "clip", "|->3,4", VALUES(1, 1, 3, 2, 4.5, 1, 1, 1, 1, 6, 1.5, 1), 0);
    /* max of a tuple of two is still the binary op */
    expect(&o[b], b, 10, "max", "|->3,4", VALUES(1, 1, 3, 2, 4.5, 1, 1, 1, 1, 6, 1.5, 1), 0);
  }
  for (int i = 0; i < o[0].n && i < o[1].n; i++)
    CHECK_MSG(memcmp(o[0].t[i].v, o[1].t[i].v, sizeof(double) * (size_t)o[0].t[i].nv) == 0,
              "print %d differs between the backends", i);
  /* -0: where's neg branch keeps the sign (JSON prints it) */
  CHECK(o[0].n > 2 && signbit(o[0].t[2].v[5]));
}

/* concat and reshape: numpy's np.concatenate([a, b], axis) and a.reshape, in memory order (batch,
 * output, input); the gradients split back and reshaped back, by hand. */
static void test_layout(void) {
  outcome o[2];
  const char *script =
      "let a = {a = [(1.0, 2.0); (3.0, 4.0)]}\nlet b = {b = [(5.0, 6.0)]}\n"
      "print (concat a b)\n"
      "print (concat ~axis:1 a [(7.0, 8.0, 9.0); (10.0, 11.0, 12.0)])\n"
      "print (reshape a ~output_dims:[4])\n"
      "print (reshape [1.0; 2.0; 3.0; 4.0; 5.0; 6.0] ~batch_dims:[2] ~input_dims:[3])\n"
      "print (concat [|[1.0]; [2.0]|] [|[3.0]; [4.0]|])\n"
      "backprop ((concat a b * [1.0; 10.0]) ++ \"...|... => 0\")\nprint a.grad\nprint b.grad\n"
      "backprop (reshape a ~output_dims:[4] *. [1.0; 2.0; 3.0; 4.0] ++ \"i => 0\")\n"
      "print a.grad\n";
  for (int b = 0; b < 2; b++) {
    if (!run(&o[b], b, script)) return;
    expect(&o[b], b, 0, "concat", "|2->3", VALUES(1, 2, 3, 4, 5, 6), 0);
    expect(&o[b], b, 1, "concat", "|5->2", VALUES(1, 2, 7, 8, 9, 3, 4, 10, 11, 12), 0);
    expect(&o[b], b, 2, "reshape", "|->4", VALUES(1, 2, 3, 4), 0);
    expect(&o[b], b, 3, "reshape", "2|3->", VALUES(1, 2, 3, 4, 5, 6), 0);
    /* the default axis is the last output axis; batch axes are kept */
    expect(&o[b], b, 4, "concat", "2|->2", VALUES(1, 3, 2, 4), 0);
    expect(&o[b], b, 5, "a.grad", "|2->2", VALUES(1, 10, 1, 10), 0);
    expect(&o[b], b, 6, "b.grad", "|2->1", VALUES(1, 10), 0);
    expect(&o[b], b, 7, "a.grad", "|2->2", VALUES(1, 2, 3, 4), 0);
  }
}

/* ---- Gradients at the corners, by hand ------------------------------------------------------- */

static void test_corner_gradients(void) {
  outcome o;
  /* abs: sign(x), 0 at 0; clip [-1, 2]: 1 on the closed interval; max of all with a tie (6 at
   * two cells): every attaining cell; where: to a where c != 0, to b elsewhere */
  const char *script =
      "let p = {p = [-1.5; 0.0; 2.0; -1.0; 2.0; 3.0]}\n"
      "let q = {q = [1.0; 6.0; 6.0; 2.0]}\n"
      "let a = {a = [1.0; 2.0; 3.0]}\nlet z = {z = [10.0; 20.0; 30.0]}\n"
      "backprop (abs p ++ \"i => 0\")\nprint p.grad\n"
      "backprop (clip p ~min:(-1.0) ~max:2.0 ++ \"i => 0\")\nprint p.grad\n"
      "backprop (max q)\nprint q.grad\n"
      "backprop (min q)\nprint q.grad\n"
      "backprop (where [2.0; 0.0; -1.0] a z ++ \"i => 0\")\nprint a.grad\nprint z.grad\n";
  for (int b = 0; b < 2; b++) {
    if (!run(&o, b, script)) continue;
    expect(&o, b, 0, "p.grad", "|->6", VALUES(-1, 0, 1, -1, 1, 1), 0);
    expect(&o, b, 1, "p.grad", "|->6", VALUES(0, 1, 1, 1, 1, 0), 0);
    expect(&o, b, 2, "q.grad", "|->4", VALUES(0, 1, 1, 0), 0);
    expect(&o, b, 3, "q.grad", "|->4", VALUES(1, 0, 0, 0), 0);
    expect(&o, b, 4, "a.grad", "|->3", VALUES(1, 0, 1), 0);
    expect(&o, b, 5, "z.grad", "|->3", VALUES(0, 1, 0), 0);
  }
}

/* ---- Gradients against finite differences (C API, double) ------------------------------------ */

typedef enum { F_ABS, F_CLIP, F_WHERE, F_MAX_ROWS, F_MIN_ALL, F_CONCAT, F_RESHAPE } fn;
static const char *const fn_names[] = {"abs",        "clip",   "where",  "max over rows",
                                       "min of all", "concat", "reshape"};

/* The function of x (3x4, output axes) and y (the same shape) under test. */
static cn_tensor *apply_fn(cn_graph *g, fn f, cn_tensor *x, cn_tensor *y, cn_tensor *c) {
  switch (f) {
  case F_ABS: return cn_tensor_apply(g, CN_OP_ABS, 1, &x);
  case F_CLIP: return cn_tensor_clip(g, x, -1, 2);
  case F_WHERE: return cn_tensor_apply(g, CN_OP_WHERE, 3, (cn_tensor *[]){c, x, y});
  case F_MAX_ROWS: return cn_tensor_reduce_max(g, x, "ij => j");
  case F_MIN_ALL: return cn_tensor_reduce_min(g, x, NULL);
  case F_CONCAT: return cn_tensor_concat(g, x, y, 1);
  case F_RESHAPE: {
    const cn_dims d = {
        {1, (int64_t[]){2}, NULL}, {1, (int64_t[]){3}, NULL}, {1, (int64_t[]){2}, NULL}};
    return cn_tensor_reshape(g, x, &d);
  }
  }
  return NULL;
}

static void fd_check(fn f, cn_backend_kind be) {
  /* distinct values, at least 0.25 from abs's corner, clip's bounds and each other */
  static const double xv[12] = {0.5, -1.25, 3.0, 2.25, 4.5, 0.75, -3.5, 1.0, -2.0, 6.0, 1.5, -0.25};
  static const double yv[12] = {1.5, 2.5, -0.5, 0.25, 3.5, -1.5, 0.5, 2.0, -2.5, 1.25, -0.75, 3.0};
  static const double cv[12] = {1, 0, 2, 0, 0, 0, 1, 1, 1, 1, 0, 0};
  const char *bn = be == CN_BACKEND_C ? "C" : "interp";
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  cn_dims d = {CN_AXES_NONE, CN_AXES_NONE, {2, (int64_t[]){3, 4}, NULL}};
  cn_tensor *x = cn_tensor_param(g, "x", &d, cn_tensor_data(g, "x0", &d, xv, 12));
  cn_tensor *y = cn_tensor_param(g, "y", &d, cn_tensor_data(g, "y0", &d, yv, 12));
  cn_tensor *c = cn_tensor_data(g, "c", &d, cv, 12);
  cn_tensor *out = x && y && c ? apply_fn(g, f, x, y, c) : NULL;
  /* loss = the sum of out's cells squared: each cell's gradient weighted by its own value */
  cn_tensor *sq = out ? cn_tensor_apply(g, CN_OP_MUL, 2, (cn_tensor *[]){out, out}) : NULL;
  cn_tensor *loss = sq ? cn_tensor_sum(g, sq) : NULL;
  CHECK_MSG(loss != NULL, "%s [%s]: %s", fn_names[f], bn, cn_ctx_error(ctx));
  cn_asgn *init = loss ? cn_graph_init_params(g, loss) : NULL;
  cn_asgn *update = init ? cn_graph_grad_update(g, loss) : NULL;
  cn_routine *setup =
      update ? cn_routine_compile(ctx, cn_asgn_seq(ctx, 2, (cn_asgn *[]){init, update}), be, "s")
             : NULL;
  cn_routine *fwd = setup ? cn_routine_compile(ctx, cn_graph_forward(g, loss), be, "f") : NULL;
  bool ok = fwd && cn_routine_run(setup) == CN_OK;
  CHECK_MSG(ok, "%s [%s]: %s", fn_names[f], bn, cn_ctx_error(ctx));
  int nonzero = 0;
  for (int p = 0; ok && p < 2; p++) {
    cn_tensor *t = p ? y : x;
    cn_node *v = cn_tensor_value(t), *gr = cn_tensor_grad(t);
    double vals[12], grads[12], l[2];
    CHECK(cn_node_get_values(v, false, vals, 12) == CN_OK);
    CHECK(cn_node_get_values(gr, false, grads, 12) == CN_OK);
    for (int j = 0; j < 12; j++) {
      const double step = 1e-6, saved = vals[j];
      for (int s = 0; s < 2; s++) {
        vals[j] = saved + (s ? -step : step);
        cn_node_set_values(v, false, vals, 12);
        CHECK(cn_routine_run(fwd) == CN_OK);
        cn_node_get_values(cn_tensor_value(loss), false, &l[s], 1);
      }
      vals[j] = saved;
      cn_node_set_values(v, false, vals, 12);
      double numeric = (l[0] - l[1]) / (2 * step);
      CHECK_MSG(fabs(numeric - grads[j]) <= 1e-6 * (1 + fabs(numeric)),
                "%s [%s]: %s.grad[%d]: backprop %.12g, finite differences %.12g", fn_names[f], bn,
                p ? "y" : "x", j, grads[j], numeric);
      nonzero += grads[j] != 0;
    }
  }
  /* what flows: abs 12 cells; clip the 5 inside [-1, 2]; where 6 of x and 6 of y; the maxima of
   * the 4 columns; the one minimum; concat every cell of both; reshape every cell of x */
  static const int expect_nonzero[] = {12, 5, 12, 4, 1, 24, 12};
  CHECK_MSG(!ok || nonzero == expect_nonzero[f], "%s [%s]: %d cells with a gradient, expected %d",
            fn_names[f], bn, nonzero, expect_nonzero[f]);
  if (fwd) cn_routine_free(fwd);
  if (setup) cn_routine_free(setup);
  cn_ctx_destroy(ctx);
}

/* ---- Integer abs, refusals, errors ---------------------------------------------------------- */

static void test_integer_abs(void) {
  cn_ctx *ctx = cn_ctx_create();
  int64_t in[3] = {-7, INT64_MIN, 5}, out = 0;
  const int64_t want[3] = {7, INT64_MIN, 5};
  for (int i = 0; i < 3; i++) {
    CHECK(cn_op_eval(ctx, CN_OP_ABS, CN_PREC_INT64, (const void *[]){&in[i]}, &out) == CN_OK);
    CHECK_MSG(out == want[i], "abs(%lld) = %lld", (long long)in[i], (long long)out);
  }
  int32_t i32 = -2147483647, r32 = 0;
  CHECK(cn_op_eval(ctx, CN_OP_ABS, CN_PREC_INT32, (const void *[]){&i32}, &r32) == CN_OK);
  CHECK(r32 == 2147483647);
  cn_ctx_destroy(ctx);
}

static void test_refusals(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_tensor *x = cn_tensor_number(g, 1);
  CHECK(cn_tensor_clip(g, x, 2, 1) == NULL &&
        strstr(cn_ctx_error(ctx), "clip: the bounds 2 and 1 are not an interval"));
  CHECK(cn_tensor_clip(g, x, NAN, 1) == NULL);
  CHECK(cn_tensor_clip(g, NULL, 0, 1) == NULL &&
        strstr(cn_ctx_error(ctx), "clip: operand 1 is NULL"));
  CHECK(cn_tensor_reduce_max(g, NULL, NULL) == NULL &&
        strstr(cn_ctx_error(ctx), "max: operand 1 is NULL"));
  CHECK(cn_tensor_reduce_min(g, x, "i = j") == NULL && strstr(cn_ctx_error(ctx), "i = j"));
  CHECK(cn_tensor_clip(g, x, -INFINITY, INFINITY) != NULL);
  /* concat and reshape need solved dims */
  cn_tensor *open = cn_tensor_param(g, "open", NULL, cn_tensor_number(g, 1));
  CHECK(cn_tensor_concat(g, open, open, 0) == NULL &&
        strstr(cn_ctx_error(ctx), "concat: the shape of \"open\"") &&
        strstr(cn_ctx_error(ctx), "is not known yet"));
  const cn_dims d2 = {CN_AXES_NONE, CN_AXES_NONE, {1, (int64_t[]){2}, NULL}};
  CHECK(cn_tensor_reshape(g, open, &d2) == NULL &&
        strstr(cn_ctx_error(ctx), "reshape: the shape of \"open\""));
  cn_ctx_destroy(ctx);
}

static void test_errors(void) {
  static const struct {
    const char *script, *want;
  } cases[] = {
      {"print (clip [1.0])\n", "seed.cnl:1:8: clip needs ~min:LO, ~max:HI or both"},
      {"print (clip [1.0] ~min:3.0 ~max:1.0)\n", "seed.cnl:1:8: clip: ~min:3 is above ~max:1"},
      {"print (clip [1.0] ~min:\"a\")\n", "seed.cnl:1:19: ~min expects a number, found a string"},
      {"print (clip [1.0] ~lo:1.0)\n", "seed.cnl:1:19: clip has no argument ~lo (~min ~max)"},
      {"print (max ~spec:3 [1.0])\n", "seed.cnl:1:12: ~spec expects an einsum spec string"},
      {"print (max ~axis:1 [1.0])\n", "seed.cnl:1:12: max has no argument ~axis (~spec)"},
      {"print (min ~spec:\"i => 0\" [1.0] [2.0])\n", "seed.cnl:1:8: min x [~spec:"},
      {"print (abs [1.0] [2.0])\n", "seed.cnl:1:8: abs takes its operands as arguments"},
      {"print (where [1.0] [2.0])\n", "seed.cnl:1:8: where takes its operands as arguments"},
      {"print (concat [1.0; 2.0] [(1.0, 2.0)])\n",
       "seed.cnl:1:8: concat: \"literal\" (#1) is |->2 and \"literal\" (#2) is |2->1"},
      {"print (concat ~axis:1 [1.0; 2.0] [3.0])\n", "seed.cnl:1:8: concat: axis 1 of"},
      {"print (concat ~axis:(-1) [1.0] [3.0])\n", "seed.cnl:1:15: ~axis:-1: an axis counts"},
      {"print (concat ~axis:1 [(1.0, 2.0)] [(3.0, 4.0); (5.0, 6.0)])\n",
       "seed.cnl:1:8: concat along axis 1: axis 0 is 1 in"},
      {"print (reshape [1.0; 2.0; 3.0] ~output_dims:[2])\n",
       "seed.cnl:1:8: reshape: \"literal\" (#1) is |->3, 3 cells; the new dims hold 2"},
      {"print (reshape [1.0])\n", "seed.cnl:1:8: reshape takes the new rows"},
      {"print (reshape [1.0] ~output_dims:[0])\n", "reshape: a dim of 0"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const char *msg = run_error(cases[i].script);
    CHECK_MSG(strstr(msg, cases[i].want) != NULL, "case %zu: %s", i, msg);
  }
}

int main(void) {
  test_values();
  test_corner_gradients();
  test_layout();
  for (int f = F_ABS; f <= F_RESHAPE; f++) {
    fd_check((fn)f, CN_BACKEND_INTERP);
    fd_check((fn)f, CN_BACKEND_C);
  }
  test_integer_abs();
  test_refusals();
  test_errors();
  CHECK_DONE();
}
