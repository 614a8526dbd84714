/* The notation's prelude (src/notation/prelude.cnl; issue 30 item 1, "the notation's prelude"):
 * relu and matmul written with `operation` as OCANNL's operation.ml writes them.
 *
 *   - relu (matmul w x) through the prelude and through the C API (cn_tensor_apply of CN_OP_RELU
 *     over cn_tensor_matmul) give the same assignments, the same generated C and bit-identical
 *     values and gradients on both backends, equal to numbers worked by hand;
 *   - the gradients through the prelude agree with finite differences (double, both backends);
 *   - cn_tensor_operation's rule behind it: code that is one primitive over the operands with the
 *     derivative table's gradients is that primitive's tensor; other code keeps its formulas; the
 *     result's precision is the operands' promotion either way;
 *   - names: a script's binding hides the prelude's, the prelude's code is closed over its own
 *     names, its helpers can be applied, its errors point at the script's application;
 *   - an empty script builds no tensor and compiles nothing (the prelude is definitions only);
 *   - docs/notation.md quotes the prelude as it is.
 * (test_notation's allocation sweep runs a script applying the prelude's relu.) */
#include "check.h"
#include "notation_check.h"

#include "cannl.h"
#include "tensor/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const cn_backend_kind backends[2] = {CN_BACKEND_INTERP, CN_BACKEND_C};

/* w: input axis 3, output axis 2 (memory [2][3]); x: output axis 3. */
static const double w0[6] = {0.5, -1, 2, -0.75, 1.5, -1}, x0[3] = {1, -2, 3};
static const double coef0[2] = {2, 3};

typedef struct {
  cn_ctx *ctx;
  cn_graph *g;
  cn_tensor *w, *x, *h, *loss;
} model;

static cn_tensor *param(cn_graph *g, const char *label, const cn_dims *d, const double *v,
                        size_t n) {
  cn_tensor *init = cn_tensor_data(g, label, d, v, n);
  return init ? cn_tensor_param(g, label, d, init) : NULL;
}

/* loss = sum_i relu(w x)_i * coef_i, relu (matmul w x) written in the notation (the prelude's) or
 * built by the C API. */
static bool build(model *m, cn_prec prec, bool notation, const double *w, const double *x) {
  memset(m, 0, sizeof *m);
  m->ctx = cn_ctx_create();
  m->g = cn_graph_create(m->ctx);
  cn_graph_set_prec(m->g, prec);
  cn_dims dw = {CN_AXES_NONE, {1, (int64_t[]){3}, NULL}, {1, (int64_t[]){2}, NULL}};
  cn_dims dx = {CN_AXES_NONE, CN_AXES_NONE, {1, (int64_t[]){3}, NULL}};
  cn_dims dc = {CN_AXES_NONE, CN_AXES_NONE, {1, (int64_t[]){2}, NULL}};
  m->w = param(m->g, "w", &dw, w, 6);
  m->x = param(m->g, "x", &dx, x, 3);
  if (!m->w || !m->x) return false;
  if (notation) {
    const cn_notation_binding b[2] = {{"w", m->w, 0}, {"x", m->x, 0}};
    m->h = cn_notation_op(m->g, "relu (matmul w x)", 2, b);
  } else {
    cn_tensor *p = cn_tensor_matmul(m->g, m->w, m->x);
    m->h = p ? cn_tensor_apply(m->g, CN_OP_RELU, 1, &p) : NULL;
  }
  cn_tensor *c = cn_tensor_data(m->g, "coef", &dc, coef0, 2);
  m->loss = m->h && c ? cn_tensor_einsum(m->g, "...|...->... ; ...|...->... => 0", CN_OP_ADD,
                                         CN_OP_MUL, 2, (cn_tensor *[]){m->h, c})
                      : NULL;
  CHECK_MSG(m->loss != NULL, "building (%s): %s", notation ? "prelude" : "C API",
            cn_ctx_error(m->ctx));
  return m->loss != NULL;
}

/* What one path computes: the texts of its code and the values. */
typedef struct {
  char asgn[4096], source[65536];
  double h[2], wg[6], xg[3];
} outcome_bits;

static bool compute(bool notation, cn_backend_kind be, outcome_bits *o) {
  model m;
  memset(o, 0, sizeof *o);
  bool ok = build(&m, CN_PREC_SINGLE, notation, w0, x0);
  cn_asgn *init = ok ? cn_graph_init_params(m.g, m.loss) : NULL;
  cn_asgn *update = init ? cn_graph_grad_update(m.g, m.loss) : NULL;
  cn_asgn *all = update ? cn_asgn_seq(m.ctx, 2, (cn_asgn *[]){init, update}) : NULL;
  const char *text = all ? cn_asgn_to_string(m.ctx, all) : NULL;
  cn_routine *r = text ? cn_routine_compile(m.ctx, all, be, "step") : NULL;
  ok = r && cn_routine_run(r) == CN_OK;
  CHECK_MSG(ok, "%s: %s", notation ? "prelude" : "C API", cn_ctx_error(m.ctx));
  if (ok) {
    snprintf(o->asgn, sizeof o->asgn, "%s", text);
    const char *src = cn_routine_source(r);
    snprintf(o->source, sizeof o->source, "%s", src ? src : "");
    CHECK(cn_node_get_values(cn_tensor_value(m.h), false, o->h, 2) == CN_OK);
    CHECK(cn_node_get_values(cn_tensor_grad(m.w), false, o->wg, 6) == CN_OK);
    CHECK(cn_node_get_values(cn_tensor_grad(m.x), false, o->xg, 3) == CN_OK);
  }
  if (r) cn_routine_free(r);
  cn_ctx_destroy(m.ctx);
  return ok;
}

/* By hand: w x = [0.5 + 2 + 6, -0.75 - 3 - 3] = [8.5, -6.75], relu [8.5, 0]; the gradient at h
 * is coef gated by relu, [2, 0]; w.grad = [2, 0] (x) x; x.grad = w^T [2, 0] = 2 * w's row 0. */
static void test_same_as_builtin(int b) {
  static outcome_bits api, pre;
  if (!compute(false, backends[b], &api) || !compute(true, backends[b], &pre)) return;
  CHECK_MSG(strcmp(api.asgn, pre.asgn) == 0, "%s: assignments differ:\n%s\nvs\n%s", backend_name[b],
            api.asgn, pre.asgn);
  if (backends[b] == CN_BACKEND_C) {
    CHECK_MSG(api.source[0] && strcmp(api.source, pre.source) == 0, "generated C differs");
  }
  CHECK(memcmp(api.h, pre.h, sizeof api.h) == 0);
  CHECK(memcmp(api.wg, pre.wg, sizeof api.wg) == 0);
  CHECK(memcmp(api.xg, pre.xg, sizeof api.xg) == 0);
  const double h[2] = {8.5, 0}, wg[6] = {2, -4, 6, 0, 0, 0}, xg[3] = {1, -2, 4};
  for (int i = 0; i < 6; i++) {
    if (i < 2) CHECK_MSG(pre.h[i] == h[i], "%s: h[%d] = %g", backend_name[b], i, pre.h[i]);
    CHECK_MSG(pre.wg[i] == wg[i], "%s: w.grad[%d] = %g", backend_name[b], i, pre.wg[i]);
    if (i < 3) CHECK_MSG(pre.xg[i] == xg[i], "%s: x.grad[%d] = %g", backend_name[b], i, pre.xg[i]);
  }
}

/* The gradients of the prelude's relu (matmul w x) against central differences, in double; the
 * pre-activations stay at least 0.5 from relu's kink. */
static void test_fd(int b) {
  const double w[6] = {0.3, -0.8, 1.1, -0.6, 0.9, -0.4}, x[3] = {0.7, -0.2, 0.5};
  model m;
  bool ok = build(&m, CN_PREC_DOUBLE, true, w, x);
  cn_asgn *init = ok ? cn_graph_init_params(m.g, m.loss) : NULL;
  cn_asgn *update = init ? cn_graph_grad_update(m.g, m.loss) : NULL;
  cn_routine *setup =
      update ? cn_routine_compile(m.ctx, cn_asgn_seq(m.ctx, 2, (cn_asgn *[]){init, update}),
                                  backends[b], "setup")
             : NULL;
  cn_routine *fwd =
      setup ? cn_routine_compile(m.ctx, cn_graph_forward(m.g, m.loss), backends[b], "forward")
            : NULL;
  ok = fwd && cn_routine_run(setup) == CN_OK;
  CHECK_MSG(ok, "%s: %s", backend_name[b], cn_ctx_error(m.ctx));
  int compared = 0;
  for (int p = 0; ok && p < 2; p++) {
    cn_node *v = cn_tensor_value(p ? m.x : m.w), *gr = cn_tensor_grad(p ? m.x : m.w);
    size_t n = p ? 3 : 6;
    double vals[6], grads[6], loss[2];
    CHECK(cn_node_get_values(v, false, vals, n) == CN_OK);
    CHECK(cn_node_get_values(gr, false, grads, n) == CN_OK);
    for (size_t j = 0; j < n; j++) {
      const double step = 1e-6, saved = vals[j];
      for (int s = 0; s < 2; s++) {
        vals[j] = saved + (s ? -step : step);
        cn_node_set_values(v, false, vals, n);
        CHECK(cn_routine_run(fwd) == CN_OK);
        cn_node_get_values(cn_tensor_value(m.loss), false, &loss[s], 1);
      }
      vals[j] = saved;
      cn_node_set_values(v, false, vals, n);
      double numeric = (loss[0] - loss[1]) / (2 * step);
      CHECK_MSG(fabs(numeric - grads[j]) <= 1e-7 * (1 + fabs(numeric)),
                "%s: %s.grad[%zu]: backprop %.12g, finite differences %.12g", backend_name[b],
                p ? "x" : "w", j, grads[j], numeric);
      compared += grads[j] != 0;
    }
  }
  CHECK_MSG(!ok || compared == 6,
            "%s: %d nonzero gradient cells, expected 6 (a live and a dead "
            "relu)",
            backend_name[b], compared);
  if (fwd) cn_routine_free(fwd);
  if (setup) cn_routine_free(setup);
  cn_ctx_destroy(m.ctx);
}

/* cn_tensor_operation: the table's own rule is the primitive's tensor, any other code keeps its
 * formulas; the result's precision is the operands' promotion. */
static void test_primitive_rule(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_dims d3 = {CN_AXES_NONE, CN_AXES_NONE, {1, (int64_t[]){3}, NULL}};
  const double v[3] = {1, 2, 3};
  cn_tensor *a = param(g, "a", &d3, v, 3), *b = param(g, "b", &d3, v, 3);
  cn_graph_set_prec(g, CN_PREC_DOUBLE); /* a double operand in a single graph */
  cn_tensor *dbl = cn_tensor_data(g, "d", &d3, v, 3);
  cn_graph_set_prec(g, CN_PREC_SINGLE);
  CHECK(a && b && dbl && dbl->prec == CN_PREC_DOUBLE);
  const cn_op_code mul = {"mul", 2, ".", CN_OP_ARG2, "a * b", {"g * b", "a * g"}, false};
  const cn_op_code swapped = {"mul", 2, ".", CN_OP_ARG2, "a * b", {"b * g", "a * g"}, false};
  const cn_op_code relu = {"relu", 1, ".", CN_OP_ARG2, "relu(a)", {"relu_gate(a, g)"}, false};
  const cn_op_code relu_ng = {"relu", 1, ".", CN_OP_ARG2, "relu(a)", {"relu_gate(a, g)"}, true};
  const cn_op_code reversed = {"mul", 2, ".", CN_OP_ARG2, "b * a", {"g * b", "a * g"}, false};
  cn_tensor *t1 = cn_tensor_operation(g, &mul, (cn_tensor *[]){a, b});
  cn_tensor *t2 = cn_tensor_operation(g, &swapped, (cn_tensor *[]){a, b});
  cn_tensor *t3 = cn_tensor_operation(g, &relu, &a);
  cn_tensor *t4 = cn_tensor_operation(g, &relu_ng, &a);
  cn_tensor *t5 = cn_tensor_operation(g, &reversed, (cn_tensor *[]){a, b});
  cn_tensor *t6 = cn_tensor_operation(g, &swapped, (cn_tensor *[]){a, dbl});
  cn_tensor *t7 = cn_tensor_operation(g, &mul, (cn_tensor *[]){dbl, b});
  CHECK_MSG(t1 && t2 && t3 && t4 && t5 && t6 && t7, "%s", cn_ctx_error(ctx));
  if (t1 && t2 && t3 && t4 && t5 && t6 && t7) {
    /* the primitive's tensor: a pointwise =: becomes the library's =:+ */
    CHECK(!t1->formulas && t1->prim == CN_OP_MUL && t1->accum == CN_OP_ADD);
    CHECK(!t3->formulas && t3->prim == CN_OP_RELU && t3->accum == CN_OP_ADD);
    CHECK(!t4->formulas && !cn_tensor_is_diff(t4) && t4->stops_gradient);
    CHECK(t2->formulas && t2->accum == CN_OP_ARG2 && cn_tensor_is_diff(t2));
    CHECK(t5->formulas);
    CHECK(cn_tensor_is_diff(t1) && cn_tensor_is_diff(t3));
    CHECK(t1->prec == CN_PREC_SINGLE && t6->prec == CN_PREC_DOUBLE && t7->prec == CN_PREC_DOUBLE);
  }
  cn_ctx_destroy(ctx);
}

/* The prelude's names in scripts. */
static void test_names(void) {
  outcome o;
  for (int b = 0; b < 2; b++) {
    /* the prelude's code does not see the script's names: rebinding operation and the code
     * functions changes nothing; a script's own relu hides the prelude's afterwards */
    if (run(&o, b,
            "let operation = 1\nlet relu_fwd = 2\nlet matmul_bwd = 3\n"
            "print (relu [-1.0; 2.0])\n"
            "print (matmul [(1.0, 0.0); (0.0, -1.0)] [5.0; 7.0])\n"
            "let%op relu x = x *. 2\nprint (relu [-1.0; 2.0])\n")) {
      expect(&o, b, 0, "relu", "|->2", VALUES(0, 2), 0);
      expect(&o, b, 1, "compose", "|->2", VALUES(5, -7), 0);
      expect(&o, b, 2, "relu", "|->2", VALUES(-2, 4), 0);
    }
    /* the prelude's code functions are the script's to apply */
    if (run(&o, b,
            "let%cd sq ~v ~t1 = v =: v1 * v1\n"
            "print (operation ~op_asn:relu_fwd ~grad_asn:relu_bwd [-3.0; 3.0])\n"
            "print (operation ~op_asn:sq ~grad_asn:relu_bwd [-3.0; 3.0])\n"))
      expect(&o, b, 1, "operation", "|->2", VALUES(9, 9), 0);
  }
  /* an operand is refused where the script wrote it, as a builtin's */
  const char *msg = run_error("let%op f x = x\nprint (relu f)\n");
  CHECK_MSG(strstr(msg, "seed.cnl:2:13: ") && strstr(msg, "expected a tensor, found a function") &&
                !strstr(msg, "prelude"),
            "%s", msg);
  /* a shape conflict of the prelude's matmul points at the script's matmul */
  msg = run_error("let a = [(1.0, 2.0)]\nlet c = matmul a [1.0; 2.0; 3.0]\nprint c\n");
  CHECK_MSG(strstr(msg, "seed.cnl:2:9: ") && strstr(msg, "shape") && !strstr(msg, "prelude"), "%s",
            msg);
  msg = run_error("print (relu [1.0] [2.0])\n");
  CHECK_MSG(strstr(msg, "seed.cnl:1:19: too many arguments"), "%s", msg);
}

/* The prelude is definitions only: a script that uses nothing of it builds no tensor and
 * compiles and runs nothing. */
static void test_nothing_built(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  FILE *out = fopen("/dev/null", "w");
  cn_notation_options opts = {.backend = CN_BACKEND_C, .out = out};
  CHECK(cn_notation_run(g, "empty.cnl", "let n = 3\n", &opts) == CN_OK);
  fclose(out);
  CHECK_INT(g->n_tensors, 0);
  CHECK_INT(cn_ctx_stat(ctx, CN_STAT_COMPILER_RUNS) + cn_ctx_stat(ctx, CN_STAT_CACHE_HITS), 0);
  CHECK_INT(cn_ctx_stat(ctx, CN_STAT_ROUTINE_RUNS), 0);
  cn_ctx_destroy(ctx);
}

extern const char cn_nt_prelude_source[];

/* docs/notation.md quotes the prelude's definitions: each quoted line is a line of the prelude. */
static void test_docs_quote(void) {
  const char *root = getenv("CANNL_SOURCE_DIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/docs/notation.md", root ? root : ".");
  FILE *f = fopen(path, "rb");
  CHECK_MSG(f != NULL, "cannot read %s", path);
  if (!f) return;
  static char doc[1 << 20];
  size_t n = fread(doc, 1, sizeof doc - 1, f);
  fclose(f);
  doc[n] = '\0';
  const char *at = strstr(doc, "### The prelude\n");
  const char *open = at ? strstr(at, "\n```\n") : NULL;
  const char *close = open ? strstr(open + 5, "\n```\n") : NULL;
  CHECK_MSG(close != NULL, "%s", "docs/notation.md: no quoted prelude");
  int lines = 0;
  for (const char *line = open ? open + 5 : NULL; line && line < close; lines++) {
    const char *end = strchr(line, '\n');
    char want[512];
    snprintf(want, sizeof want, "\n%.*s\n", (int)(end - line), line);
    CHECK_MSG(strstr(cn_nt_prelude_source, want) != NULL, "the prelude has no line %s", want);
    line = end + 1;
  }
  CHECK(lines == 6);
}

int main(void) {
  for (int b = 0; b < 2; b++) {
    test_same_as_builtin(b);
    test_fd(b);
  }
  test_primitive_rule();
  test_names();
  test_nothing_built();
  test_docs_quote();
  CHECK_DONE();
}
