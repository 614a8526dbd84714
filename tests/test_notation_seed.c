/* Every code example of syntax-extensions-cd-op.txt that does not depend on OCaml-only
 * constructs, and the notation examples of convolution-is-a-contraction.txt ("Surface: literals,
 * inline declarations, and the unit boundary"), of contraction-is-emergent.txt (the
 * producer-regime SGD update) and of ocannl-notes §2.6, run as .cnl scripts or through
 * cn_notation_op / cn_notation_cd on both backends (the interpreter and generated C), in double
 * precision, with their JSON output parsed back and compared with values computed by hand. Each
 * test names the seed section its example comes from; docs/notation.md lists the examples that
 * do not apply and why. */
#include "notation_check.h"

/* ---- syntax-extensions-cd-op "Primitive operations" ------------------------------------------ */

/* The unary table, each op applied by name in %cd (and relu in %op), against interpret_unop. */
static void test_unary_ops(void) {
  static const char *const names[] = {"id",    "relu",       "sat01", "exp",  "log",
                                      "exp2",  "log2",       "sin",   "cos",  "sqrt",
                                      "recip", "recip_sqrt", "neg",   "tanh", "not"};
  enum { N = sizeof names / sizeof names[0] };
  const double x[6] = {-2, 0, 0.25, 0.5, 1, 4}, p[4] = {0.25, 0.5, 1, 4};
  char script[4096];
  size_t n = (size_t)snprintf(script, sizeof script,
                              "let x = [-2.0; 0.0; 0.25; 0.5; 1.0; 4.0]\n"
                              "let p = [0.25; 0.5; 1.0; 4.0]\nlet%%cd un =");
  for (int k = 0; k < N; k++) { /* the elementary functions on positive arguments only */
    bool positive = k >= 3 && k <= 13 && k != 12;
    n += (size_t)snprintf(script + n, sizeof script - n, "%s {u_%s} =: %s %s", k ? ";" : "",
                          names[k], names[k], positive ? "p" : "x");
  }
  n += (size_t)snprintf(script + n, sizeof script - n, "\nrun un\n");
  for (int k = 0; k < N; k++)
    n += (size_t)snprintf(script + n, sizeof script - n, "print u_%s\n", names[k]);
  snprintf(script + n, sizeof script - n, "print (relu x)\n");
  BOTH {
    outcome o;
    if (!run(&o, b, script)) continue;
    for (int k = 0; k < N; k++) {
      bool positive = k >= 3 && k <= 13 && k != 12;
      const double *in = positive ? p : x;
      int m = positive ? 4 : 6;
      double want[6];
      for (int i = 0; i < m; i++) {
        double v = in[i];
        switch (k) {
        case 0: want[i] = v; break;
        case 1: want[i] = v >= 0 ? v : 0; break;
        case 2: want[i] = v <= 0 ? 0 : v >= 1 ? 1 : v; break;
        case 3: want[i] = exp(v); break;
        case 4: want[i] = log(v); break;
        case 5: want[i] = pow(2, v); break;
        case 6: want[i] = log(v) / log(2); break;
        case 7: want[i] = sin(v); break;
        case 8: want[i] = cos(v); break;
        case 9: want[i] = sqrt(v); break;
        case 10: want[i] = 1 / v; break;
        case 11: want[i] = 1 / sqrt(v); break;
        case 12: want[i] = -v; break;
        case 13: want[i] = tanh(v); break;
        default: want[i] = v == 0 ? 1 : 0; break;
        }
      }
      char dims[16], label[32];
      snprintf(dims, sizeof dims, "|->%d", m);
      snprintf(label, sizeof label, "u_%s_%s", names[k], positive ? "p" : "x");
      expect(&o, b, k, label, dims, m, want, 1e-14);
    }
    expect(&o, b, N, "relu", "|->6", VALUES(0, 0, 0.25, 0.5, 1, 4), 0);
  }
}

/* The binary table: each op by its infix operator, curried and uncurried by name, against
 * interpret_binop (`*` needs ~logic in an assignment, contraction-is-emergent). */
static void test_binary_ops(void) {
  static const struct {
    const char *name, *infix, *a, *b;
    double want[6];
  } ops[] = {
      {"fst", "-@>", "a", "b", {1, -2, 0.5, 3, 0, 0}},
      {"snd", "-/>", "a", "b", {3, 4, 0.25, 3, 2, 1}},
      {"add", "+", "a", "b", {4, 2, 0.75, 6, 2, 1}},
      {"sub", "-", "a", "b", {-2, -6, 0.25, 0, -2, -1}},
      {"mul", "*", "a", "b", {3, -8, 0.125, 9, 0, 0}},
      {"div", "/", "a", "b", {1.0 / 3, -0.5, 2, 1, 0, 0}},
      {"pow", "**", "a", "b", {1, 16, 0.84089641525371454, 27, 0, 0}}, /* 0.5 ** 0.25 */
      {"relu_gate", "-?/", "a", "b", {3, 0, 0.25, 3, 0, 0}},
      {"sat01_gate", "-?^", "a", "b", {0, 0, 0.25, 0, 0, 0}},
      {"lt", "<", "a", "b", {1, 1, 0, 0, 1, 1}},
      {"eq", "<>", "a", "b", {0, 0, 0, 1, 0, 0}},
      {"max", "@^", "a", "b", {3, 4, 0.5, 3, 2, 1}},
      {"min", "^^", "a", "b", {1, -2, 0.25, 3, 0, 0}},
      {"or_", "||", "c", "d", {0, 1, 1, 1, 1, 1}},
      {"and_", "&&", "c", "d", {0, 0, 0, 1, 1, 0}},
      {"mod_", "%", "e", "f", {1, 1.5, 1, 0, 2, 0.5}},
  };
  enum { N = sizeof ops / sizeof ops[0] };
  char script[8192];
  size_t n = (size_t)snprintf(script, sizeof script,
                              "let a = [1.0; -2.0; 0.5; 3.0; 0.0; 0.0]\n"
                              "let b = [3.0; 4.0; 0.25; 3.0; 2.0; 1.0]\n"
                              "let c = [0.0; 0.0; 1.0; 2.0; -1.0; 3.0]\n"
                              "let d = [0.0; 1.0; 0.0; 5.0; 1.0; 0.0]\n"
                              "let e = [7.0; 5.5; 1.0; 6.0; 2.0; 4.5]\n"
                              "let f = [3.0; 2.0; 4.0; 3.0; 5.0; 2.0]\n"
                              "let%%cd bin =");
  for (int k = 0; k < N; k++) {
    const char *logic =
        strcmp(ops[k].infix, "*") == 0 || strcmp(ops[k].infix, "/") == 0 ? " ~logic:\".\"" : "";
    n += (size_t)snprintf(script + n, sizeof script - n,
                          "%s {i_%d} =: %s %s %s%s; {c_%d} =: %s %s %s; {t_%d} =: %s (%s, %s)",
                          k ? ";" : "", k, ops[k].a, ops[k].infix, ops[k].b, logic, k, ops[k].name,
                          ops[k].a, ops[k].b, k, ops[k].name, ops[k].a, ops[k].b);
  }
  n += (size_t)snprintf(script + n, sizeof script - n, "\nrun bin\n");
  for (int k = 0; k < N; k++)
    n += (size_t)snprintf(script + n, sizeof script - n, "print i_%d\nprint c_%d\nprint t_%d\n", k,
                          k, k);
  BOTH {
    outcome o;
    if (!run(&o, b, script)) continue;
    for (int k = 0; k < N; k++)
      for (int form = 0; form < 3; form++) {
        CHECK_MSG(3 * k + form < o.n, "%s: %s form %d not printed", backend_name[b], ops[k].name,
                  form);
        expect(&o, b, 3 * k + form, NULL, "|->6", 6, ops[k].want, 1e-15);
      }
  }
}

/* The ternary table: where (curried and uncurried) and fma, against interpret_ternop (fma told
 * to be pointwise: its default projection is compose-accumulate, see test_notation_fidelity). */
static void test_ternary_ops(void) {
  BOTH {
    outcome o;
    if (!run(&o, b,
             "let c = [1.0; 0.0; -1.0]\nlet x = [2.0; 3.0; 4.0]\nlet y = [10.0; 20.0; 30.0]\n"
             "let%cd t = {w1} =: where c x y; {w2} =: where (c, x, y);\n"
             "  {f} =: fma x y c ~logic:\".\"\n"
             "run t\nprint w1\nprint w2\nprint f\nprint (where c x y)\n"))
      continue;
    expect(&o, b, 0, "w1_c", "|->3", VALUES(2, 20, 4), 0);
    expect(&o, b, 1, "w2_c", "|->3", VALUES(2, 20, 4), 0);
    expect(&o, b, 2, "f_x", "|->3", VALUES(21, 60, 119), 0);
    expect(&o, b, 3, "where", "|->3", VALUES(2, 20, 4), 0);
  }
}

/* The Assignments column: every accumulating op as =OP (onto the target's values) and =:OP
 * (cleared to the op's neutral element first, here reducing [2; 3; 4] in order), and `=:`. */
static void test_assignment_ops(void) {
  static const struct {
    const char *op;
    double start[2], x[2], acc[2], cleared;
  } ops[] = {
      {"+", {0.5, 3}, {4, 2}, {4.5, 5}, 9},
      {"-", {0.5, 3}, {4, 2}, {-3.5, 1}, -9},
      {"*", {0.5, 3}, {4, 2}, {2, 6}, 24},
      {"/", {0.5, 3}, {4, 2}, {0.125, 1.5}, 1.0 / 24},
      {"**", {0.5, 3}, {4, 2}, {0.0625, 9}, 1},
      {"?/", {0.5, -3}, {4, 2}, {4, 0}, 4}, /* relu_gate(acc, x): neutral 1 */
      {"?^", {0.5, 3}, {4, 2}, {4, 0}, 0},  /* sat01_gate: neutral 0.5 lets 2 in, then 0 */
      {"||", {0, 0}, {0, 2}, {0, 1}, 1},
      {"&&", {1, 0}, {3, 2}, {1, 0}, 1},
      {"@^", {0.5, 3}, {4, 2}, {4, 3}, 4},
      {"^^", {0.5, 3}, {4, 2}, {0.5, 2}, 2},
  };
  enum { N = sizeof ops / sizeof ops[0] };
  char script[8192];
  size_t n = (size_t)snprintf(script, sizeof script, "let r = [2.0; 3.0; 4.0]\n");
  for (int k = 0; k < N; k++)
    n += (size_t)snprintf(
        script + n, sizeof script - n,
        "let s%d = [%g; %g]\nlet x%d = [%g; %g]\n"
        "let%%cd a%d = {acc%d} =: s%d; acc%d =%s x%d; {cl%d} =:%s r ~logic:\"i=>0\"\n"
        "run a%d\nprint acc%d\nprint cl%d\n",
        k, ops[k].start[0], ops[k].start[1], k, ops[k].x[0], ops[k].x[1], k, k, k, k, ops[k].op, k,
        k, ops[k].op, k, k, k);
  BOTH {
    outcome o;
    if (!run(&o, b, script)) continue;
    for (int k = 0; k < N; k++) {
      expect(&o, b, 2 * k, NULL, "|->2", 2, ops[k].acc, 1e-15);
      expect(&o, b, 2 * k + 1, NULL, "|->1", 1, &ops[k].cleared, 1e-15);
    }
  }
  /* the ops without an assignment form (fst, lt, eq, mod_: "none") */
  CHECK_HAS(run_error("let x = [1.0]\nlet%cd r = {y} =% x\n"), "unknown assignment operator '=%'");
  CHECK_HAS(run_error("let x = [1.0]\nlet%cd r = {y} =< x\n"), "unknown assignment operator '=<'");
}

/* ---- syntax-extensions-cd-op "The syntax for %op" -------------------------------------------- */

/* y = relu(w x + b) for w (hid x 3, memory [out][in]), b (hid) as printed. */
static void expect_layer(const outcome *o, int b, int iw, int ib, int iy, const double *x) {
  if (iy >= o->n || iw >= o->n || ib >= o->n) {
    CHECK_MSG(false, "%s: layer prints missing", backend_name[b]);
    return;
  }
  const jtensor *w = &o->t[iw], *bias = &o->t[ib];
  double want[8];
  for (int i = 0; i < 8; i++) {
    double s = bias->v[i];
    for (int j = 0; j < 3; j++) s += w->v[3 * i + j] * x[j];
    want[i] = s > 0 ? s : 0;
  }
  expect(o, b, iy, NULL, "|->8", 8, want, 1e-15);
}

/* `let%op layer x = relu(w * x + b)` over parameters declared beforehand (the seed declares them
 * with Tensor.param, an OCaml function: here {w} and {b; o = [hid_dim]}). */
static void test_op_layer(void) {
  const double x[3] = {1, -2, 0.5};
  BOTH {
    outcome o;
    if (!run(&o, b,
             "let hid_dim = 8\nlet w = {w}\nlet b = {b; o = [hid_dim]}\n"
             "let%op layer x = relu (w * x + b)\n"
             "let y = layer [1.0; -2.0; 0.5]\nprint w\nprint b\nprint y\n"))
      continue;
    expect(&o, b, 0, "w", "|3->8", 24, o.t[0].v, 0);
    for (int i = 0; i < 24; i++) /* the default init 0.5 * (uniform1 - 0.5) */
      CHECK(o.t[0].v[i] >= -0.25 && o.t[0].v[i] < 0.25);
    expect(&o, b, 1, "b", "|->8", 8, o.t[1].v, 0);
    expect_layer(&o, b, 0, 1, 2, x);
    CHECK_STR(o.t[2].label, "y");
  }
}

/* `let%op mlp_layer x = relu("w" * x + "b" hid_dim)`: inline declarations, created once when
 * the function is defined and shared by its applications. */
static void test_op_inline_layer(void) {
  const double x1[3] = {1, -2, 0.5}, x2[3] = {0.5, 0.5, 2};
  BOTH {
    outcome o;
    if (!run(&o, b,
             "let hid_dim = 8\n"
             "let%op mlp_layer x = relu(\"w\" * x + \"b\" hid_dim)\n"
             "let y1 = mlp_layer [1.0; -2.0; 0.5]\nlet y2 = mlp_layer [0.5; 0.5; 2.0]\n"
             "print w\nprint b\nprint y1\nprint y2\n"))
      continue;
    expect(&o, b, 0, "w", "|3->8", 24, o.t[0].v, 0);
    expect(&o, b, 1, "b", "|->8", 8, o.t[1].v, 0);
    expect_layer(&o, b, 0, 1, 2, x1);
    expect_layer(&o, b, 0, 1, 3, x2);
  }
}

/* ---- syntax-extensions-cd-op "The syntax for %cd" -------------------------------------------- */

/* `c =:+ a * b ~logic:"@"`: tensor multiplication (rhs2's output axes feed rhs1's input axes),
 * in a script and through cn_notation_cd. */
static void test_cd_compose(void) {
  BOTH {
    outcome o;
    if (!run(&o, b,
             "let a = [(1, 2, 3); (4, 5, 6)]\nlet v = [1.0; 0.0; -1.0]\n"
             "let m = [(1, 0); (0, 1); (1, 1)]\n"
             "let%cd mm = {c} =:+ a * v ~logic:\"@\"; {d} =:+ a * m ~logic:\"@\"\n"
             "run mm\nprint c\nprint d\n"))
      continue;
    expect(&o, b, 0, "c_a", "|->2", VALUES(-2, -2), 0);
    expect(&o, b, 1, "d_a", "|2->2", VALUES(4, 5, 10, 11), 0);
  }
  BOTH {
    cn_ctx *ctx = cn_ctx_create();
    cn_graph *g = cn_graph_create(ctx);
    cn_graph_set_prec(g, CN_PREC_DOUBLE);
    cn_dims da = {CN_AXES_NONE, {1, (int64_t[]){3}, NULL}, {1, (int64_t[]){2}, NULL}};
    cn_dims dm = {CN_AXES_NONE, {1, (int64_t[]){2}, NULL}, {1, (int64_t[]){3}, NULL}};
    cn_tensor *a = cn_tensor_data(g, "a", &da, (double[]){1, 2, 3, 4, 5, 6}, 6);
    cn_tensor *m = cn_tensor_data(g, "b", &dm, (double[]){1, 0, 0, 1, 1, 1}, 6);
    cn_tensor *c = cn_tensor_buffer(g, "c", NULL);
    cn_asgn *asgn = cn_notation_cd(g, "c =:+ a * b ~logic:\"@\"", 3,
                                   (cn_notation_binding[]){{"a", a, 0}, {"b", m, 0}, {"c", c, 0}});
    CHECK_MSG(asgn != NULL, "%s", cn_ctx_error(ctx));
    cn_routine *r =
        asgn ? cn_routine_compile(ctx, asgn, b ? CN_BACKEND_C : CN_BACKEND_INTERP, "seed_compose")
             : NULL;
    CHECK_MSG(!asgn || r, "%s", cn_ctx_error(ctx));
    double v[4] = {0};
    if (r) {
      CHECK(cn_routine_run(r) == CN_OK);
      CHECK(cn_node_get_values(cn_tensor_value(c), false, v, 4) == CN_OK);
      cn_routine_free(r);
    }
    CHECK_STR(cn_tensor_shape(c), "|2->2");
    const double want[4] = {4, 5, 10, 11};
    for (int i = 0; i < 4; i++) CHECK_NEAR(v[i], want[i], 0);
    cn_ctx_destroy(ctx);
  }
}

/* `p =+ learning_rate * p.grad ~logic:"."` (Accum_binop: accum Add, op Mul) and
 * `p =+ learning_rate *. p.grad` (Accum_unop over an intermediate tensor) give the same values,
 * with learning_rate a host number and a tensor. */
static void test_update_spellings(void) {
  BOTH {
    outcome o;
    if (!run(&o, b,
             "let p = {p = [1.0; 2.0; 3.0]}\nlet q = {q = [1.0; 2.0; 3.0]}\n"
             "let loss = ((p *. [0.5; 1.0; 2.0]) + (q *. [0.5; 1.0; 2.0])) ++ \"i => 0\"\n"
             "backprop loss\n"
             "let learning_rate = 0.1\n"
             "let%cd binary = p =+ learning_rate * p.grad ~logic:\".\"\n"
             "let%cd unary = q =+ learning_rate *. q.grad\n"
             "run binary\nrun unary\nprint p\nprint q\n"
             "let learning_rate = !.0.5\n"
             "let%cd binary = p =+ learning_rate * p.grad ~logic:\".\"\n"
             "let%cd unary = q =+ learning_rate *. q.grad\n"
             "run binary\nrun unary\nprint p\nprint q\n"))
      continue;
    expect(&o, b, 0, "p", "|->3", VALUES(1.05, 2.1, 3.2), 1e-15);
    expect(&o, b, 1, "q", "|->3", VALUES(1.05, 2.1, 3.2), 1e-15);
    expect(&o, b, 2, "p", "|->3", VALUES(1.3, 2.6, 4.2), 1e-15);
    expect(&o, b, 3, "q", "|->3", VALUES(1.3, 2.6, 4.2), 1e-15);
  }
  /* the representations: one binary assignment, or the intermediate's forward code then a unary
   * assignment of it */
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_dims d3 = {CN_AXES_NONE, CN_AXES_NONE, {1, (int64_t[]){3}, NULL}};
  cn_tensor *p = cn_tensor_param(g, "p", &d3, NULL);
  cn_dims scalar = {CN_AXES_NONE, CN_AXES_NONE, CN_AXES_NONE};
  cn_tensor *lr = cn_tensor_data(g, "learning_rate", &scalar, (double[]){0.1}, 1);
  cn_notation_binding bind[2] = {{"p", p, 0}, {"learning_rate", lr, 0}};
  cn_asgn *bin = cn_notation_cd(g, "p =+ learning_rate * p.grad ~logic:\".\"", 2, bind);
  CHECK_STR(bin ? cn_asgn_to_string(ctx, bin) : cn_ctx_error(ctx),
            "p =+ learning_rate * p.grad;\n");
  cn_asgn *un = cn_notation_cd(g, "p =+ learning_rate *. p.grad", 2, bind);
  CHECK_STR(un ? cn_asgn_to_string(ctx, un) : cn_ctx_error(ctx),
            "mul =:+ learning_rate * p.grad;\np =+ mul;\n");
  cn_ctx_destroy(ctx);
}

/* ---- syntax-extensions-cd-op "Numeric and N-dimensional array literals"
 * ------------------------------------ */

/* `[ (1, 2, 3); (4, 5, 6) ]` converts 3D vectors into 2D vectors; `'q' 2.0` is a number whose
 * output axis (of dimension 1) is labeled q, and the label propagates through inference. */
static void test_literals(void) {
  BOTH {
    outcome o;
    if (!run(&o, b,
             "let m = [ (1, 2, 3); (4, 5, 6) ]\nprint m\nprint (m * [1.0; 1.0; 1.0])\n"
             "let bt = [| [ (1, 2) ]; [ (3, 4) ]; [ (5, 6) ] |]\nprint bt\nprint ('q' 2.0)\n"))
      continue;
    expect(&o, b, 0, "m", "|3->2", VALUES(1, 2, 3, 4, 5, 6), 0);
    expect(&o, b, 1, NULL, "|->2", VALUES(6, 15), 0);
    expect(&o, b, 2, "bt", "3|2->1", VALUES(1, 2, 3, 4, 5, 6), 0);
    expect(&o, b, 3, "q", "|->1", VALUES(2), 0);
  }
  /* the seed's example as written: hey is the 1x1 matrix q=1 -> p=1 (its input axis takes q's
   * label, its output axis p's: a labeled unit does not broadcast), y its value times 2 plus 1:
   * 2 * -0.08661606 + 1 = 0.82676788 (hey's default initializer is built first, so hey is #11;
   * the labels head the grid's rows and columns) */
  const char *text = run_text("let%op y = (\"hey\" * 'q' 2.0) + 'p' 1.0\nprint hey\nprint y\n");
  CHECK_HAS(text, "\"hey\" (#11) |1:q->1:p\n"
                  "p\\q            0\n"
                  "  0  -0.08661606\n");
  CHECK_HAS(text, "\"y\" (#15) |->1:p\n"
                  "p           0\n"
                  "   0.82676788\n");
}

/* ---- syntax-extensions-cd-op "Wildcard bindings"
 * ------------------------------------------------------------ */

/* let%op _ and let%cd _ (and let _) only add shape constraints: x gets 3 output axes, z 2. */
static void test_wildcards(void) {
  BOTH {
    outcome o;
    if (!run(&o, b,
             "let x = {x}\nlet%op _ = x + [1.0; 2.0; 3.0]\n"
             "let%cd _ = {z} =: [1.0; 2.0]\nlet%cd r = z =+ [10.0; 20.0]\nrun r\nprint z\n"
             "let _ = x *. [1.0; 1.0; 1.0]\nprint (x - x)\n"))
      continue;
    expect(&o, b, 0, "z", "|->2", VALUES(10, 20), 0); /* the wildcard routine never ran */
    expect(&o, b, 1, NULL, "|->3", VALUES(0, 0, 0), 0);
  }
}

/* ---- syntax-extensions-cd-op "Inline declarations" (%cd)
 * ---------------------------------------------------- */

/* sgd_one, with `Float.(momentum > 0.0)` (an OCaml local open) written `momentum > 0.0`: the
 * two inline declarations take p's label; plain SGD, momentum (state kept across runs of the
 * same routine) and Nesterov with weight decay, all by hand from p = [1; 2], p.grad = 2p. */
static void test_sgd_one(void) {
  static const char *const script =
      "let%cd sgd_one ~learning_rate ?(momentum = 0.0) ?(weight_decay = 0.0) ?(nesterov = false) "
      "p =\n"
      "    \"sgd_delta\" =: p.grad + (!.weight_decay *. p);\n"
      "    if momentum > 0.0 then (\n"
      "      \"sgd_momentum\" =: (!.momentum *. sgd_momentum) + sgd_delta;\n"
      "      if nesterov then sgd_delta =+ !.momentum *. sgd_momentum else sgd_delta =: "
      "sgd_momentum);\n"
      "    p =- learning_rate *. sgd_delta\n"
      "let p = {p = [1.0; 2.0]}\nlet q = {q = [1.0; 2.0]}\nlet r = {r = [1.0; 2.0]}\n"
      "backprop (((p *. p) + (q *. q) + (r *. r)) ++ \"i => 0\")\n"
      "let plain = sgd_one ~learning_rate:0.1 p\n"
      "let heavy = sgd_one ~learning_rate:0.1 ~momentum:0.9 q\n"
      "let nest = sgd_one ~learning_rate:0.1 ~momentum:0.9 ~weight_decay:0.5 ~nesterov:true r\n"
      "run plain\nrun heavy\nrun heavy\nrun nest\n"
      "print p\nprint q\nprint r\nprint sgd_delta\nprint sgd_momentum\n"
      "run sgd_one ~learning_rate:1.0 p\nprint p\n";
  BOTH {
    outcome o;
    if (!run(&o, b, script)) continue;
    /* p - 0.1 * 2p */
    expect(&o, b, 0, "p", "|->2", VALUES(0.8, 1.6), 1e-15);
    /* m = d = [2; 4], p = [0.8; 1.6]; then m = 0.9 m + d = [3.8; 7.6], p -= 0.1 m */
    expect(&o, b, 1, "q", "|->2", VALUES(0.42, 0.84), 1e-15);
    /* d = [2; 4] + 0.5 [1; 2] = [2.5; 5] = m; d += 0.9 m = [4.75; 9.5]; r -= 0.1 d */
    expect(&o, b, 2, "r", "|->2", VALUES(0.525, 1.05), 1e-15);
    expect(&o, b, 3, "sgd_delta_r", "|->2", VALUES(4.75, 9.5), 1e-15);
    expect(&o, b, 4, "sgd_momentum_r", "|->2", VALUES(2.5, 5), 1e-15);
    /* a one-off application: p -= 1.0 * p.grad */
    expect(&o, b, 5, "p", "|->2", VALUES(-1.2, -2.4), 1e-15);
  }
}

/* ---- syntax-extensions-cd-op "inline declarations" under ~config and "Name from binding"
 * -------------------- */

/* `let%op mlp_layer ~config x = relu ("w" * x + "b" config.hid_dim)`: parameters per config,
 * labeled by the declared name then config.label, shared by the applications of one configured
 * layer; the layer's result is labeled by the function's name and its argument's label. */
static void test_config_layer(void) {
  BOTH {
    outcome o;
    if (!run(&o, b,
             "let%op mlp_layer ~config x = relu (\"w\" * x + \"b\" config.hid_dim)\n"
             "let l1 = mlp_layer ~config:{ label = [ \"L1\" ]; hid_dim = 3 }\n"
             "let x = [1.0; -1.0; 2.0]\nlet y = l1 x\n"
             "let l2 = mlp_layer ~config:{ label = [ \"L2\" ]; hid_dim = 8 }\n"
             "let z = l2 x\n"
             "print w\nprint b\nprint z\nprint y\nprint (l1 x)\n"))
      continue;
    expect(&o, b, 0, "w_L2", "|3->8", 24, o.t[0].v, 0);
    expect(&o, b, 1, "b_L2", "|->8", 8, o.t[1].v, 0);
    expect_layer(&o, b, 0, 1, 2, (double[]){1, -1, 2});
    expect(&o, b, 3, "y", "|->3", 3, o.t[3].v, 0);
    expect(&o, b, 4, "mlp_layer_x", "|->3", 3, o.t[3].v, 0); /* l1's parameters again */
  }
}

/* `three_layer_perceptron ~config x` (its `type tlp_config` is OCaml-only: records are
 * structural here): the three config blocks are evaluated once per configuration, so applying
 * the configured network twice shares its parameters; another configuration gets its own. */
static void test_three_layer_perceptron(void) {
  BOTH {
    outcome o;
    if (!run(&o, b,
             "let%op mlp_layer ~config x = relu (\"w\" * x + \"b\" config.hid_dim)\n"
             "let%op three_layer_perceptron ~config x =\n"
             "  mlp_layer ~config:{ label = [ \"L3\" ]; hid_dim = config.dim3 }\n"
             "    (mlp_layer ~config:{ label = [ \"L2\" ]; hid_dim = config.dim2 }\n"
             "       (mlp_layer ~config:{ label = [ \"L1\" ]; hid_dim = config.dim1 } x))\n"
             "let tlp = three_layer_perceptron ~config:{ label = [\"tlp\"]; dim1 = 4; dim2 = 3; "
             "dim3 = 2 }\n"
             "let y1 = tlp [1.0; 2.0]\nlet y2 = tlp [1.0; 2.0]\n"
             "let other = three_layer_perceptron ~config:{ label = [\"o\"]; dim1 = 4; dim2 = 3; "
             "dim3 = 2 }\n"
             "let y3 = other [1.0; 2.0]\n"
             "print y1\nprint y2\nprint y3\nprint w\nprint b\n"))
      continue;
    expect(&o, b, 0, "y1", "|->2", 2, o.t[0].v, 0);
    expect(&o, b, 1, "y2", "|->2", 2, o.t[0].v, 0);
    CHECK_MSG(o.n >= 3 && memcmp(o.t[2].v, o.t[0].v, 2 * sizeof(double)) != 0,
              "%s: another configuration shares parameters", backend_name[b]);
    /* the last block created is L1's of `other` (blocks are created outermost first) */
    expect(&o, b, 3, "w_L1", "|2->4", 8, o.t[3].v, 0);
    expect(&o, b, 4, "b_L1", "|->4", 4, o.t[4].v, 0);
  }
}

/* "Configuring inline declarations": a tuple after "name" gives its output axes, an integer or
 * an identifier its single output axis, a list its initial values (`"a" [ -4 ] + "b" [ 2 ]`). */
static void test_declaration_forms(void) {
  BOTH {
    outcome o;
    if (!run(&o, b,
             "let%op c = \"a\" [ -4 ] + \"b\" [ 2 ]\nprint c\nprint a\nprint b\n"
             "let hid = 4\n"
             "let t = \"e\" (2, 3) + range_of_shape ~output_dims:[2; 3]\n"
             "let u = \"f\" hid + range 4\nlet v = \"g\" 5 + range 5\n"
             "print e\nprint f\nprint g\n"))
      continue;
    expect(&o, b, 0, "c", "|->1", VALUES(-2), 0);
    expect(&o, b, 1, "a", "|->1", VALUES(-4), 0);
    expect(&o, b, 2, "b", "|->1", VALUES(2), 0);
    expect(&o, b, 3, "e", "|->2,3", 6, o.t[3].v, 0);
    expect(&o, b, 4, "f", "|->4", 4, o.t[4].v, 0);
    expect(&o, b, 5, "g", "|->5", 5, o.t[5].v, 0);
  }
}

/* ---- syntax-extensions-cd-op "Using OCANNL's generalized einsum notation" -------------------- */

/* `let%op scalar_loss = (margin_loss ++ "...|... => 0") /. !..batch_size`. */
static void test_scalar_loss(void) {
  BOTH {
    outcome o;
    if (!run(&o, b,
             "let batch_size = 2\nlet margin_loss = [| [1.0; 2.0]; [3.0; 4.0] |]\n"
             "let%op scalar_loss = (margin_loss ++ \"...|... => 0\") /. !..batch_size\n"
             "print scalar_loss\n"))
      continue;
    expect(&o, b, 0, "scalar_loss", "|->1", VALUES(5), 0);
  }
}

/* The spec examples of "Syntax of the generalized einsum notation", on x[b][o][i] = 6b + 3o + i
 * (batch 2, input 3, output 2) and other ranges, all by hand. */
static void test_spec_examples(void) {
  double kji[24], kji_sum[24], ki[8], vkji[48];
  for (int k = 0, n = 0; k < 4; k++)
    for (int j = 0; j < 3; j++)
      for (int i = 0; i < 2; i++, n++) {
        kji[n] = 12 * i + 4 * j + k;                /* z[i][j][k] reversed */
        kji_sum[n] = 24 + 2 * (12 * i + 4 * j + k); /* summed over a batch axis of 2 */
      }
  for (int k = 0; k < 4; k++)
    for (int i = 0; i < 2; i++) ki[2 * k + i] = 36 * i + 12 + 3 * k; /* sum over j */
  for (int v = 0, n = 0; v < 2; v++)
    for (int k = 0; k < 4; k++)
      for (int j = 0; j < 3; j++)
        for (int i = 0; i < 2; i++) /* the extra output axis of 5 summed */
          vkji[n++] = 5 * (120 * v + 12 * i + 4 * j + k) + 24 * 10;
  double squares[12];
  for (int i = 0; i < 12; i++) squares[i] = i * i;
  BOTH {
    outcome o;
    if (!run(&o, b,
             "let x = range_of_shape ~batch_dims:[2] ~input_dims:[3] ~output_dims:[2]\n"
             "print (x ++ \"...|...->... => 0\")\nprint (x ++ \"...|... => 0\")\n"
             "print (x ++ \"... => 0\")\n"
             "print (x ++ \"...|...->... => ...|...->...\")\n"
             "print (x +* \"...|...->... ; ...|...->... => ...|...->...\" x)\n"
             "print (x ++ \"...|...->... => ...->...\")\nprint (x ++ \"...->... => ...->...\")\n"
             "let y = range_of_shape ~batch_dims:[3] ~output_dims:[2]\n"
             "print (y ++ \"2...|...->... => ...|...->...\")\n"
             "let v = [2.0; 3.0]\nprint (v ++ \"...|... => ...|...2\")\n"
             "let%cd expand = {e} =:* v ~logic:\"...|... => ...|...2\"\nrun expand\nprint e\n"
             "let z = range_of_shape ~output_dims:[2; 3; 4]\n"
             "let zb = range_of_shape ~batch_dims:[2] ~output_dims:[2; 3; 4]\n"
             "print (z ++ \"ijk => kji\")\nprint (zb ++ \"ijk => kji\")\n"
             "print (z ++ \"ijk => ki\")\n"
             "let w = range_of_shape ~batch_dims:[2] ~output_dims:[5; 2; 3; 4]\n"
             "print (w ++ \"..v..|ijk => ..v..kji\")\n"
             "let s = range_of_shape ~batch_dims:[3; 2] ~input_dims:[2] ~output_dims:[2]\n"
             "print (s ++ \"2..v..|... => ..v..\")\n"))
      continue;
    for (int k = 0; k < 3; k++) expect(&o, b, k, NULL, "|->1", VALUES(66), 0);
    expect(&o, b, 3, NULL, "2|3->2", VALUES(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11), 0);
    expect(&o, b, 4, NULL, "2|3->2", 12, squares, 0);
    for (int k = 5; k < 7; k++) expect(&o, b, k, NULL, "|3->2", VALUES(6, 8, 10, 12, 14, 16), 0);
    expect(&o, b, 7, NULL, "|->2", VALUES(4, 5), 0);
    /* the argument at index 2 of a new (rightmost) output axis; zeros, resp. ones (the neutral
     * element of =:*) elsewhere */
    expect(&o, b, 8, NULL, "|->2,3", VALUES(0, 0, 2, 0, 0, 3), 0);
    expect(&o, b, 9, "e_v", "|->2,3", VALUES(1, 1, 2, 1, 1, 3), 0);
    expect(&o, b, 10, NULL, "|->4,3,2", 24, kji, 0);
    expect(&o, b, 11, NULL, "|->4,3,2", 24, kji_sum, 0);
    expect(&o, b, 12, NULL, "|->4,2", 8, ki, 0);
    expect(&o, b, 13, NULL, "|->2,4,3,2", 48, vkji, 0);
    /* s[2][v][o][i] = 16 + 4v + 2o + i summed over o, i */
    expect(&o, b, 14, NULL, "|->2", VALUES(70, 86), 0);
  }
}

/* ---- syntax-extensions-cd-op "Referencing arrays" and "Block comments" ----------------------- */

/* `p.grad =+ p.grad.merge` (and `p =+ p.merge`, the shorthand for p.value.merge): the merge
 * buffers, filled from C as a device-to-device transfer would, are read in place of the nodes. */
static void test_merge_buffers(void) {
  BOTH {
    cn_ctx *ctx = cn_ctx_create();
    cn_graph *g = cn_graph_create(ctx);
    cn_graph_set_prec(g, CN_PREC_DOUBLE);
    cn_dims d2 = {CN_AXES_NONE, CN_AXES_NONE, {1, (int64_t[]){2}, NULL}};
    cn_tensor *p = cn_tensor_param(g, "p", &d2, NULL);
    cn_notation_binding bind[1] = {{"p", p, 0}};
    cn_asgn *a = cn_notation_cd(g, "p.grad =+ p.grad.merge; p =+ p.merge", 1, bind);
    CHECK_MSG(a != NULL, "%s", cn_ctx_error(ctx));
    if (a) {
      CHECK_STR(cn_asgn_to_string(ctx, a), "p.grad =+ p.grad.merge;\np =+ p.merge;\n");
      cn_node *value = cn_tensor_value(p), *grad = cn_tensor_grad(p);
      CHECK(cn_node_set_values(value, false, (double[]){1, 2}, 2) == CN_OK);
      CHECK(cn_node_set_values(value, true, (double[]){10, 20}, 2) == CN_OK);
      CHECK(cn_node_set_values(grad, false, (double[]){3, 4}, 2) == CN_OK);
      CHECK(cn_node_set_values(grad, true, (double[]){0.5, 0.25}, 2) == CN_OK);
      cn_routine *r = cn_routine_compile(ctx, a, b ? CN_BACKEND_C : CN_BACKEND_INTERP, "merge");
      CHECK_MSG(r != NULL, "%s", cn_ctx_error(ctx));
      double v[2] = {0, 0}, gv[2] = {0, 0};
      if (r && cn_routine_run(r) == CN_OK) {
        cn_node_get_values(value, false, v, 2);
        cn_node_get_values(grad, false, gv, 2);
      }
      CHECK(v[0] == 11 && v[1] == 22);
      CHECK(gv[0] == 3.5 && gv[1] == 4.25);
      cn_routine_free(r);
    }
    CHECK(cn_notation_cd(g, "p.merge =: p", 1, bind) == NULL);
    CHECK_HAS(cn_ctx_error(ctx), "<cn_cd>:1:1: a merge buffer is read, never assigned to");
    CHECK(cn_notation_op(g, "p.merge + p", 1, bind) == NULL);
    CHECK_HAS(cn_ctx_error(ctx), "a merge buffer (.merge) is read only as an operand of a %cd");
    cn_ctx_destroy(ctx);
  }
}

/* `~~("space" "separated" "comment" "tensor p debug_name:" p; <scope>)`: the comment wraps the
 * assignments of its scope, which run. */
static void test_block_comment(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_dims d2 = {CN_AXES_NONE, CN_AXES_NONE, {1, (int64_t[]){2}, NULL}};
  cn_tensor *p = cn_tensor_param(g, "p", &d2, NULL);
  cn_asgn *a = cn_notation_cd(
      g, "~~(\"space\" \"separated\" \"comment\" \"tensor p debug_name:\" p p.grad; p =+ p.grad)",
      1, (cn_notation_binding[]){{"p", p, 0}});
  CHECK_STR(a ? cn_asgn_to_string(ctx, a) : cn_ctx_error(ctx),
            "~~(\"space separated comment tensor p debug_name: p p.grad\";\n  p =+ p.grad;\n);\n");
  CHECK(cn_notation_cd(g, "~~(\"n\" 3; p =+ p.grad)", 1, (cn_notation_binding[]){{"p", p, 0}}) ==
        NULL);
  CHECK_HAS(cn_ctx_error(ctx), "a comment is made of strings and tensors, not a number");
  cn_ctx_destroy(ctx);
  BOTH {
    outcome o;
    if (!run(&o, b,
             "let p = {p = [1.0; 2.0]}\nbackprop ((p *. p) ++ \"i => 0\")\n"
             "let%cd c = ~~(\"double the step\" p; p =+ p.grad; p =+ p.grad)\nrun c\nprint p\n"))
      continue;
    expect(&o, b, 0, "p", "|->2", VALUES(5, 10), 0);
  }
}

/* "Intricacies": the forward code of an embedded tensor expression comes just before the
 * assignment that reads it. */
static void test_embedded_forward(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_dims d2 = {CN_AXES_NONE, CN_AXES_NONE, {1, (int64_t[]){2}, NULL}};
  cn_tensor *a = cn_tensor_data(g, "a", &d2, (double[]){1, 2}, 2);
  cn_tensor *r = cn_tensor_buffer(g, "r", NULL);
  cn_asgn *asgn = cn_notation_cd(g, "r =: a; r =+ (a + a) *. a", 2,
                                 (cn_notation_binding[]){{"a", a, 0}, {"r", r, 0}});
  CHECK_STR(asgn ? cn_asgn_to_string(ctx, asgn) : cn_ctx_error(ctx),
            "r =: a;\nadd =:+ a + a;\nmul =:+ add * a;\nr =+ mul;\n");
  cn_ctx_destroy(ctx);
}

/* "The hard-coded to-the-power-of operator": `**.` takes a number, and its gradient is
 * p * t^(p-1) * g (2 t g for p = 2, g for p = 1); `3 *. x **. 2` is `3 *. (x **. 2)`. */
static void test_pointpow(void) {
  BOTH {
    outcome o;
    if (!run(&o, b,
             "let x = {x = [2.0; -1.0]}\nbackprop ((x **. 3.) ++ \"i => 0\")\nprint x.grad\n"
             "let y = {y = [2.0; -1.0]}\nbackprop ((y **. 2.) ++ \"i => 0\")\nprint y.grad\n"
             "let z = {z = [2.0; -1.0]}\nbackprop ((z **. 1.) ++ \"i => 0\")\nprint z.grad\n"
             "print (3 *. x **. 2)\n"))
      continue;
    expect(&o, b, 0, "x.grad", "|->2", VALUES(12, 3), 0);
    expect(&o, b, 1, "y.grad", "|->2", VALUES(4, -2), 0);
    expect(&o, b, 2, "z.grad", "|->2", VALUES(1, 1), 0);
    expect(&o, b, 3, NULL, "|->2", VALUES(12, 3), 0);
  }
  CHECK_HAS(run_error("let x = [1.0]\nprint (x **. x)\n"),
            "seed.cnl:2:14: **. takes a number as its exponent, found a tensor");
}

/* ---- syntax-extensions-cd-op "The hard-coded to-the-power-of operator": operations defined by
 * their code ---- */

/* `operation ~op_asn:F ~grad_asn:G t1 ...` with F and G let%cd functions over slot names (the
 * seed's Tensor.binop): pointpow 3 as the seed writes it (the exponent a number, operand 2,
 * without gradient): z.grad = 3 z^2 = 3, 12, 27; swish x * sigmoid x at -1, 0, 2 (values
 * -0.268941, 0, 1.761594; gradient 0.072329, 0.5, 1.090784); the bilinear form a; M; b => one
 * number over "i;ij;j=>" (95 = 1 * 17 + 2 * 39; a.grad = M b = 17, 39); a max accumulation
 * max_j a_ij w_j (7.5 and 8; the gradients at the argmax only). The errors name the position in
 * the code. (Finite-difference checks of the same operations: tests/test_autodiff.c.) */
static void test_operations(void) {
  static const char script[] =
      "let%cd pow_fwd ~v ~t1 ~t2 ~projections = v =: v1 ** v2 ~projections\n"
      "let%cd pow_bwd ~v ~g ~t1 ~t2 ~projections = g1 =+ v2 * (v1 ** (v2 - 1.0)) * g ~projections\n"
      "let%op pointpow p x = operation ~op_asn:pow_fwd ~grad_asn:pow_bwd ~label:\"pointpow\" x "
      "!.p\n"
      "let z = {z = [1.0; 2.0; 3.0]}\n"
      "backprop (pointpow 3.0 z ++ \"i => 0\")\n"
      "print z.grad\n"
      "let%cd swish_fwd ~v ~t1 = v =: v1 * recip (1.0 + exp (-v1))\n"
      "let%cd swish_bwd ~v ~g ~t1 =\n"
      "  g1 =+ g * recip (1.0 + exp (-v1)) * (1.0 + v1 * (1.0 - recip (1.0 + exp (-v1))))\n"
      "let%op swish x = operation ~op_asn:swish_fwd ~grad_asn:swish_bwd ~label:\"swish\" x\n"
      "let x = {x = [-1.0; 0.0; 2.0]}\n"
      "let y = swish x\n"
      "backprop (y ++ \"i => 0\")\n"
      "print y\n"
      "print x.grad\n"
      "let%cd bil ~v ~t1 ~t2 ~t3 = v =:+ mul3 v1 v2 v3\n"
      "let%cd bil_g ~g ~t1 ~t2 ~t3 = g1 =+ g * v2 * v3; g2 =+ v1 * g * v3; g3 =+ v1 * v2 * g\n"
      "let a = {a = [1.0; 2.0]}\n"
      "let m = {m = [[1.0; 2.0]; [3.0; 4.0]]}\n"
      "let b = {b = [5.0; 6.0]}\n"
      "let f = operation ~op_asn:bil ~grad_asn:bil_g ~logic:\"i;ij;j=>\" a m b\n"
      "backprop f\n"
      "print f\n"
      "print a.grad\n"
      "let%cd mx ~v ~t1 ~t2 = v =:@^ v1 * v2\n"
      "let%cd mx_g ~g ~t1 ~t2 = g1 =+ g * v2; g2 =+ v1 * g\n"
      "let c = {c = [[1.0; 5.0; 2.0]; [7.0; 3.0; 4.0]]}\n"
      "let w = {w = [1.0; 1.5; 2.0]}\n"
      "let r = operation ~op_asn:mx ~grad_asn:mx_g ~logic:\"ij;j=>i\" c w\n"
      "backprop (r ++ \"i => 0\")\n"
      "print r\n"
      "print c.grad\n"
      "print w.grad\n";
  BOTH {
    outcome o;
    if (!run(&o, b, script)) continue;
    expect(&o, b, 0, "z.grad", "|->3", VALUES(3, 12, 27), 1e-12);
    expect(&o, b, 1, "y", "|->3", VALUES(-0.2689414213699951, 0, 1.7615941559557646), 1e-12);
    expect(&o, b, 2, "x.grad", "|->3", VALUES(0.07232948812851325, 0.5, 1.0907842487848955), 1e-12);
    expect(&o, b, 3, "f", "|->", VALUES(95), 0);
    expect(&o, b, 4, "a.grad", "|->2", VALUES(17, 39), 0);
    expect(&o, b, 5, "r", "|->2", VALUES(7.5, 8), 0);
    expect(&o, b, 6, "c.grad", "|->2,3", VALUES(0, 1.5, 0, 0, 0, 2), 0);
    expect(&o, b, 7, "w.grad", "|->3", VALUES(0, 5, 4), 0);
  }
  static const struct {
    const char *script, *message;
  } bad[] = {
      {"let%cd f ~v ~t1 = w =: v1\nlet x = [1.0]\nprint (operation ~op_asn:f x)\n",
       "seed.cnl:1:19: ~op_asn's code is one assignment to v with =:, =:+, =:@^ or =:^^"},
      {"let%cd f ~v ~t1 = v =: v1 * q\nlet x = [1.0]\nprint (operation ~op_asn:f x)\n",
       "seed.cnl:1:29: 'q' in an operation's code: the slot names are v1 v2 v3 (t1 t2 t3), and "
       "other names must be bound to numbers"},
      {"let%cd f ~v ~t1 = v =: v1\nlet%cd gf ~g ~t1 = g2 =+ g\nlet x = [1.0]\n"
       "print (operation ~op_asn:f ~grad_asn:gf x)\n",
       "seed.cnl:2:20: g2: the operation has 1 operand"},
      {"let%cd f ~v ~t1 = v =: sigmoid v1\nlet x = [1.0]\nprint (operation ~op_asn:f x)\n",
       "seed.cnl:1:24: an operation's code reads slot names, numbers and primitive ops only"},
      {"let x = [1.0]\nprint (operation ~op_asn:3 x)\n",
       "seed.cnl:2:18: ~op_asn expects a let%cd function, found a number"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    CHECK_HAS(run_error(bad[i].script), bad[i].message);
}

/* ---- syntax-extensions-cd-op "Embedded nodes": forward roots ------------------------------- */

/* A tensor's forward code is embedded in its first consumer, and an assignment includes the
 * forward code of forward roots only: after `print ((a + b) ++ ...)` computed a and b, the
 * routine of `{c} =: a + 3.0 *. b` reads b (and a) and writes neither; `3.0 *. a + b` reads a.
 * A tensor no code computed yet is computed where it is read (d), and the values are those of a
 * full recomputation: c = a + 3b = 3, 8, 13, 18 with a = 0, 2, 4, 6 and b = 1, 2, 3, 4. */
static void test_forward_roots(void) {
  static const char script[] = "let a = range 4 *. 2.0\n"
                               "let b = range 4 + 1.0\n"
                               "let d = range 4 *. 5.0\n"
                               "let e = d + 1.0\n"
                               "print ((a + b) ++ \"i => 0\")\n"
                               "let%cd t = {c} =: a + 3.0 *. b\n"
                               "run t\n"
                               "print c\n"
                               "let%cd u = {f} =: 3.0 *. a + b\n"
                               "run u\n"
                               "print f\n"
                               "let%cd v = {h} =: 2.0 *. d\n"
                               "run v\n"
                               "print h\n";
  BOTH {
    outcome o;
    if (!run(&o, b, script)) continue;
    expect(&o, b, 0, NULL, "|->1", VALUES(22), 0);
    expect(&o, b, 1, "c_a", "|->4", VALUES(3, 8, 13, 18), 0);
    expect(&o, b, 2, "f_b", "|->4", VALUES(1, 8, 15, 22), 0);
    expect(&o, b, 3, "h", "|->4", VALUES(0, 10, 20, 30), 0);
  }
  const char *loops = script_text(script, true);
  /* the routines of run t, u, v (a print of a tensor computed already compiles none) */
  const char *t = strstr(loops, "routine cnl_2\n"), *u = strstr(loops, "routine cnl_3\n");
  const char *v = strstr(loops, "routine cnl_4\n");
  CHECK_MSG(t && u && v, "%s", loops);
  if (!t || !u || !v) return;
  char tcode[1024], ucode[1024], vcode[1024];
  snprintf(tcode, sizeof tcode, "%.*s", (int)(u - t), t);
  snprintf(ucode, sizeof ucode, "%.*s", (int)(v - u), u);
  snprintf(vcode, sizeof vcode, "%s", v);
  /* a line writing x starts "\n  x[" (scheduled or not, the nests here are one loop deep) */
  CHECK_HAS(tcode, "\n  c_a[");
  CHECK_MSG(!strstr(tcode, "\n  b[") && !strstr(tcode, "\n  a["), "%s", tcode);
  CHECK_HAS(ucode, "\n  f_b[");
  CHECK_MSG(!strstr(ucode, "\n  a[") && !strstr(ucode, "\n  b["), "%s", ucode);
  CHECK_HAS(vcode, "\n  d["); /* never computed before: computed here */
}

/* ---- convolution-is-a-contraction "Affine indices": the padding marker ---------------------- */

/* "The < after the output label marks valid mode; written =, or omitted where use_padding is in
 * scope, it marks padded mode": x = 1..5 with the kernel [1, 10] gives 10, 21, ..., 54 padded
 * (5 outputs, a left margin of one) and 21, ..., 54 valid (4 outputs); an unmarked term follows
 * the use_padding in scope (top level, a `let ... in`, an einsum builtin, a %cd ~logic), and
 * without one it is refused at its column. */
static void test_use_padding(void) {
  BOTH {
    outcome o;
    if (!run(&o, b,
             "let x = [1.0; 2.0; 3.0; 4.0; 5.0]\n"
             "let use_padding = true\n"
             "print (x +* \"o+k; k => o\" [1.0; 10.0])\n"
             "let%op valid x = let use_padding = false in x +* \"o+k; k => o\" [1.0; 10.0]\n"
             "print (valid x)\n"
             "print (einsum \"o+k; k => o\" x [1.0; 10.0])\n"
             "let kern = [1.0; 10.0]\n"
             "let%cd r = {y} =:+ x * kern ~logic:\"o+k; k => o\"\n"
             "run r\nprint y\n"))
      continue;
    expect(&o, b, 0, NULL, "|->5", VALUES(10, 21, 32, 43, 54), 0);
    expect(&o, b, 1, NULL, "|->4", VALUES(21, 32, 43, 54), 0);
    expect(&o, b, 2, NULL, "|->5", VALUES(10, 21, 32, 43, 54), 0);
    expect(&o, b, 3, "y_x", "|->5", VALUES(10, 21, 32, 43, 54), 0);
  }
  CHECK_HAS(run_error("let x = [1.0; 2.0; 3.0]\nprint (x +* \"o+k; k => o\" [1.0; 10.0])\n"),
            "seed.cnl:2:13: einsum \"o+k; k => o\": the kernel term at column 1 has no padding "
            "marker: write o=+k (padded: the output as long as the input) or o<+k (valid), or set "
            "use_padding (`let use_padding = true` in a script, cn_graph_set_use_padding in C)");
  CHECK_HAS(
      run_error("let use_padding = 1\nlet x = [1.0; 2.0]\nprint (x +* \"o<+k; k => o\" [1.0])\n"),
      "seed.cnl:3:13: use_padding is a number: it must be a boolean");
}

/* ---- convolution-is-a-contraction "Random initialization" ------------------------------------ */

/* The first line of a script's JSON output with the context option random_seed set (NULL: none):
 * the values of w (8 of them) into out; false with a message. */
static bool seeded_values(const char *option, const char *script, double *out) {
  cn_ctx *ctx = cn_ctx_create();
  if (option) CHECK_INT(cn_ctx_set_option(ctx, "random_seed", option), CN_OK);
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  cn_notation_options opts = {.backend = CN_BACKEND_INTERP, .json = true, .out = f};
  cn_status st = cn_notation_run(g, "seed.cnl", script, &opts);
  fclose(f);
  CHECK_MSG(st == CN_OK, "%s", cn_ctx_error(ctx));
  jtensor t;
  bool ok = st == CN_OK && parse_line(buf, &t) && t.nv == 8;
  for (int i = 0; ok && i < 8; i++) out[i] = t.v[i];
  free(buf);
  cn_ctx_destroy(ctx);
  return ok;
}

/* The seed's skeleton of the uniform generator, uint4x32_to_prec_uniform (threefry4x32
 * (threefry4x32 (embed_self_id ()) (random_seed ())) range_over_offsets), runs as written (the
 * fetch-op named bare, threefry4x32 the initializers' light variant) and is the library's
 * `uniform ()` bit for bit: the same leaves and hashes built in the same order. The global seed
 * is settable from a script (`set_seed 7`), the context's option random_seed (OCANNL's
 * fixed_state_for_init) and $CANNL_RANDOM_SEED, all three alike; `set_seed` wins over the
 * option; a bad value is refused with its source named. */
static void test_random_skeleton(void) {
  static const char uniform[] = "let%op w = {w = uniform (); o = [8]; i = []}\nprint w\n";
  static const char skeleton[] =
      "let%op w = {w = uint4x32_to_prec_uniform (threefry4x32 (threefry4x32 (embed_self_id ()) "
      "(random_seed ())) range_over_offsets); o = [8]; i = []}\nprint w\n";
  BOTH {
    outcome u, s;
    if (!run(&u, b, uniform) || !run(&s, b, skeleton)) continue;
    CHECK_INT(u.t[0].nv, 8);
    CHECK_MSG(s.t[0].nv == 8 && memcmp(u.t[0].v, s.t[0].v, sizeof(double) * 8) == 0,
              "%s: the skeleton differs from uniform ()", backend_name[b]);
    bool spread = false;
    for (int i = 0; i < 8; i++) {
      CHECK(u.t[0].v[i] >= 0 && u.t[0].v[i] < 1);
      spread = spread || u.t[0].v[i] != u.t[0].v[0];
    }
    CHECK(spread);
  }
  double plain[8], by_script[8], by_option[8], by_env[8], both[8];
  char with_seed[256];
  snprintf(with_seed, sizeof with_seed, "set_seed 7\n%s", uniform);
  CHECK(seeded_values(NULL, uniform, plain));
  CHECK(seeded_values(NULL, with_seed, by_script));
  CHECK(seeded_values("7", uniform, by_option));
  CHECK(seeded_values("42", with_seed, both)); /* set_seed wins */
  CHECK(setenv("CANNL_RANDOM_SEED", "7", 1) == 0);
  CHECK(seeded_values(NULL, uniform, by_env));
  CHECK(setenv("CANNL_RANDOM_SEED", "seven", 1) == 0);
  CHECK_HAS(run_error(uniform),
            "seed.cnl:1:17: CANNL_RANDOM_SEED: 'seven' is not a seed (an integer in [0, 2^32))");
  CHECK(unsetenv("CANNL_RANDOM_SEED") == 0);
  CHECK(memcmp(plain, by_script, sizeof plain) != 0);
  CHECK(memcmp(by_script, by_option, sizeof plain) == 0);
  CHECK(memcmp(by_script, by_env, sizeof plain) == 0);
  CHECK(memcmp(by_script, both, sizeof plain) == 0);
  cn_ctx *ctx = cn_ctx_create();
  CHECK_INT(cn_ctx_set_option(ctx, "random_seed", "4294967296"), CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx),
            "option random_seed: '4294967296' is not a seed (an integer in [0, 2^32))");
  cn_graph *g = cn_graph_create(ctx);
  cn_tensor *seed = cn_tensor_random_seed(g);
  CHECK(seed != NULL && cn_tensor_random_seed(g) == seed);
  CHECK_INT(cn_graph_set_seed(g, 3), CN_ERR_INVALID);
  cn_ctx_destroy(ctx);
}

/* ---- convolution-is-a-contraction "Surface: literals, inline declarations, and the unit boundary"
 * ---- */

/* Literals: lists are output axes, tuples input axes, arrays batch axes; `([2.0] : rgb)` names
 * an axis's basis, and differently labeled axes do not fuse (the error points at the operator
 * that joins them). */
static void test_seed000_literals(void) {
  BOTH {
    outcome o;
    if (!run(&o, b,
             "print [| [ (1, 2, 3); (4, 5, 6) ]; [ (7, 8, 9); (10, 11, 12) ] |]\n"
             "print (([1.0; 2.0] : rgb) + ([3.0; 4.0] : rgb))\nprint ([ 2.0 ] : rgb)\n"))
      continue;
    expect(&o, b, 0, NULL, "2|3->2", VALUES(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12), 0);
    expect(&o, b, 1, NULL, "|->2", VALUES(4, 6), 0);
    expect(&o, b, 2, NULL, "|->1", VALUES(2), 0);
  }
  CHECK_HAS(run_error("let c = ([1.0; 2.0] : rgb)\nprint (c + ([3.0; 4.0] : xy))\n"),
            "seed.cnl:2:10: shape conflict in pointwise");
  CHECK_HAS(run_error("let c = ([1.0; 2.0] : rgb)\nprint (c + ([3.0; 4.0] : xy))\n"),
            "axis labels differ ('rgb' vs 'xy')");
}

/* Declarations: {w} (shape by inference), {w = expr}, {b; o = [hid_dim]}; a parameter that
 * nothing pins is an error at its declaration; a %cd declaration has no gradient. */
static void test_seed000_declarations(void) {
  BOTH {
    outcome o;
    if (!run(&o, b,
             "let hid_dim = 3\n"
             "let y = {w} * [1.0; 2.0]\nlet v = {v = range 3} + [1.0; 1.0; 1.0]\n"
             "let c = {c; o = [hid_dim]} + v\nprint w\nprint v\nprint c\n"))
      continue;
    expect(&o, b, 0, "w", "|2->", 2, o.t[0].v, 0);
    expect(&o, b, 1, "v", "|->3", VALUES(1, 2, 3), 0);
    expect(&o, b, 2, "c", "|->3", 3, o.t[2].v, 0);
  }
  CHECK_HAS(run_error("let y = [1.0]\nlet w = {w}\nprint y\n"),
            "seed.cnl:2:9: shape inference: the number of input axes of parameter \"w\"");
  CHECK_HAS(run_error("let y = [1.0]\nlet w = {w}\nprint y\n"),
            "(found when line 3 needed the shapes)\nlet w = {w}\n        ^");
  CHECK_HAS(run_error("let%cd r = {z} =: [1.0]\nprint z.grad\n"),
            "seed.cnl:2:9: \"z\" has no gradient (not differentiable)");
}

/* The unit boundary: `let layer = make ()` mints the parameters once; every application of
 * layer reuses them, another `make ()` mints its own. */
static void test_unit_boundary(void) {
  BOTH {
    outcome o;
    if (!run(&o, b,
             "let%op make () x = {m; o = [2]} *. x\n"
             "let layer = make ()\nlet other = make ()\n"
             "let a1 = layer [1.0; 2.0]\nlet a2 = layer [1.0; 2.0]\nlet c = other [1.0; 2.0]\n"
             "print a1\nprint a2\nprint c\n"))
      continue;
    expect(&o, b, 1, "a2", "|->2", 2, o.t[0].v, 0);
    CHECK_MSG(o.n == 3 && memcmp(o.t[2].v, o.t[0].v, 2 * sizeof(double)) != 0,
              "%s: another make () shares the parameter", backend_name[b]);
  }
}

/* ---- contraction-is-emergent: the producer regime ------------------------------------------ */

/* The SGD skeleton `{ sgd_delta } =: p.grad + (!.weight_decay *. p); { sgd_momentum } =:
 * (!.momentum *. sgd_momentum) + sgd_delta; p =- learning_rate *. sgd_delta`, run twice, and
 * its last line's binary spelling `p =- learning_rate * sgd_delta ~logic:"."`. */
static void test_producer_sgd(void) {
  BOTH {
    outcome o;
    if (!run(&o, b,
             "let p = {p = [1.0; 2.0]}\nlet q = {q = [1.0; 2.0]}\n"
             "backprop (((p *. p) + (q *. q)) ++ \"i => 0\")\n"
             "let weight_decay = 0.5\nlet momentum = 0.9\nlet learning_rate = 0.1\n"
             "let%cd step = { sgd_delta } =: p.grad + (!.weight_decay *. p);\n"
             "  { sgd_momentum } =: (!.momentum *. sgd_momentum) + sgd_delta;\n"
             "  p =- learning_rate *. sgd_delta\n"
             "let%cd step2 = { delta2 } =: q.grad + (!.weight_decay *. q);\n"
             "  q =- learning_rate * delta2 ~logic:\".\"\n"
             "run step\nprint p\nprint sgd_delta\nprint sgd_momentum\nrun step\nprint p\n"
             "print sgd_momentum\nrun step2\nrun step2\nprint q\n"))
      continue;
    expect(&o, b, 0, "p", "|->2", VALUES(0.75, 1.5), 1e-15);
    expect(&o, b, 1, "sgd_delta_p", "|->2", VALUES(2.5, 5), 1e-15);
    expect(&o, b, 2, "sgd_momentum_p", "|->2", VALUES(2.5, 5), 1e-15);
    /* d = [2; 4] + 0.5 [0.75; 1.5], m = 0.9 [2.5; 5] + d, p -= 0.1 d */
    expect(&o, b, 3, "p", "|->2", VALUES(0.5125, 1.025), 1e-15);
    expect(&o, b, 4, "sgd_momentum_p", "|->2", VALUES(4.625, 9.25), 1e-15);
    expect(&o, b, 5, "q", "|->2", VALUES(0.5125, 1.025), 1e-15);
  }
}

/* ---- ocannl-notes §2.6: spec examples from OCANNL's docs and tests -----------------------------
 */

static void test_notes_specs(void) {
  BOTH {
    outcome o;
    if (!run(&o, b,
             "let x = range_of_shape ~batch_dims:[2] ~input_dims:[3] ~output_dims:[2]\n"
             "print (x ++ \"b|i->o => o|b->i\")\n"
             "print ([1.0; 2.0] +* \"i; j => i->j\" [10.0; 20.0; 30.0])\n"
             "print (x ++ \"...|1->... => ...|...\")\n"
             "print ([(1, 2); (3, 4); (5, 6)] ++ \"i->j => i0j\")\n"
             "print ([[1.0; 2.0]; [3.0; 4.0]] ++ \"ii=>i\")\n"
             "print ([1.0; 2.0] ++ \"i=>ii\")\nprint ([1.0; 2.0] ++ \"i=>i0\")\n"
             "let q = [| [ [1.0; 2.0] ]; [ [3.0; 4.0] ] |]\n"
             "let k = [| [ [1.0; 0.0] ]; [ [0.0; 1.0] ]; [ [1.0; 1.0] ] |]\n"
             "print (q +* \" ... s | h d; ... t | h d => ... s | t -> h\" k)\n"))
      continue;
    expect(&o, b, 0, NULL, "2|2->3", VALUES(0, 6, 1, 7, 2, 8, 3, 9, 4, 10, 5, 11), 0);
    expect(&o, b, 1, NULL, "|2->3", VALUES(10, 20, 20, 40, 30, 60), 0);
    expect(&o, b, 2, NULL, "2|->2", VALUES(1, 4, 7, 10), 0);
    expect(&o, b, 3, NULL, "|->2,1,3", VALUES(1, 3, 5, 2, 4, 6), 0);
    expect(&o, b, 4, NULL, "|->2", VALUES(1, 4), 0);
    expect(&o, b, 5, NULL, "|->2,2", VALUES(1, 0, 0, 2), 0);
    expect(&o, b, 6, NULL, "|->2,1", VALUES(1, 2), 0);
    /* scores[s][t] = q[s] . k[t] */
    expect(&o, b, 7, NULL, "2|3->1", VALUES(1, 2, 3, 3, 4, 7), 0);
  }
}

/* ---- The JSON output, parsed back -------------------------------------------------------------
 */

/* Full precision (a double survives the round trip exactly, -0 keeps its sign), escaped labels,
 * dims in memory order. */
static void test_json_round_trip(void) {
  const double want[6] = {0.1, 1e-300, -2.5e10, 1.0 / 3, -0.0, 123456789.125};
  BOTH {
    outcome o;
    if (!run(&o, b,
             "let v = [| [0.1; 1e-300; -2.5e10]; [0.3333333333333333; -0.0; 123456789.125] |]\n"
             "print v\n"))
      continue;
    expect(&o, b, 0, "v", "2|->3", 6, want, 0);
    CHECK(o.n == 1 && signbit(o.t[0].v[4]) && o.t[0].v[3] == 1.0 / 3);
  }
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  cn_dims d = {{1, (int64_t[]){2}, NULL}, {1, (int64_t[]){1}, NULL}, {1, (int64_t[]){3}, NULL}};
  cn_tensor *t = cn_tensor_data(g, "q\"uo\\te\n", &d, want, 6);
  const char *line = t ? cn_tensor_format(t, false, true) : NULL;
  jtensor parsed;
  CHECK_MSG(line && parse_line(line, &parsed), "%s", line ? line : cn_ctx_error(ctx));
  if (line && parse_line(line, &parsed)) {
    CHECK_STR(parsed.label, "q\"uo\\te\n");
    CHECK_STR(dims_of(&parsed), "2|1->3");
    CHECK_INT(parsed.nv, 6);
    for (int i = 0; i < 6; i++) CHECK(parsed.v[i] == want[i]);
  }
  cn_ctx_destroy(ctx);
}

int main(void) {
  test_unary_ops();
  test_binary_ops();
  test_ternary_ops();
  test_assignment_ops();
  test_op_layer();
  test_op_inline_layer();
  test_cd_compose();
  test_update_spellings();
  test_literals();
  test_wildcards();
  test_sgd_one();
  test_config_layer();
  test_three_layer_perceptron();
  test_declaration_forms();
  test_scalar_loss();
  test_spec_examples();
  test_merge_buffers();
  test_block_comment();
  test_embedded_forward();
  test_pointpow();
  test_random_skeleton();
  test_use_padding();
  test_forward_roots();
  test_operations();
  test_seed000_literals();
  test_seed000_declarations();
  test_unit_boundary();
  test_producer_sgd();
  test_notes_specs();
  test_json_round_trip();
  CHECK_DONE();
}
