/* The notation evaluated (issue 6): scripts run through cn_notation_run with JSON output parsed
 * back, compared with values computed by hand: micrograd in the notation, literals (lists are
 * output axes, tuples input axes, arrays batch axes), einsum operators, the two spellings of a
 * parameter update from syntax-extensions-cd-op, the expansion spec filling the other cells with
 * the accumulator's neutral element, parameter sharing across applications of a let%op function and
 * fresh parameters per ~config, static indices and loops (statements compiled once, parameters
 * initialized once), the half_moons builtin against cn_dataset_half_moons, cn_notation_op /
 * cn_notation_cd from C, positioned errors, and a token-stream fuzz smoke test. */
#include "check.h"

#include "cannl.h"
#include "core/core.h"

#include <stdlib.h>

/* Runs a script (interpreter backend, double precision) and returns its JSON output (malloc'd),
 * or NULL with the error message in *error. */
static char *run_script(const char *text, cn_backend_kind backend, char *error, size_t cap) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  cn_notation_options opts = {.backend = backend, .json = true, .out = out};
  cn_status st = cn_notation_run(g, "test.cnl", text, &opts);
  fclose(out);
  if (st != CN_OK) {
    snprintf(error, cap, "%s", cn_ctx_error(ctx));
    free(buf);
    buf = NULL;
  }
  cn_ctx_destroy(ctx);
  return buf;
}

/* The n-th printed tensor's "values" array (at most cap), parsed back from the JSON lines;
 * returns the count, -1 if absent. Also checks the line's "output" dims text when given. */
static int values_of(const char *json, int n, double *v, int cap, char *dims, size_t dims_cap) {
  const char *line = json;
  for (int i = 0; line && i < n; i++) {
    line = strchr(line, '\n');
    if (line) line++;
  }
  if (!line || !*line) return -1;
  if (dims) {
    const char *b = strstr(line, "\"batch\": ");
    const char *vals = strstr(line, ", \"values\"");
    if (!b || !vals || (size_t)(vals - b) >= dims_cap) return -1;
    memcpy(dims, b, (size_t)(vals - b));
    dims[vals - b] = '\0';
  }
  const char *p = strstr(line, "\"values\": [");
  if (!p) return -1;
  p += strlen("\"values\": [");
  int count = 0;
  while (*p && *p != ']' && count < cap) {
    char *end;
    v[count++] = strtod(p, &end);
    p = end;
    while (*p == ',' || *p == ' ') p++;
  }
  return count;
}

/* examples/micrograd.cnl, the README expression of micrograd, on both backends. */
static void test_micrograd(void) {
  const char *root = getenv("CANNL_SOURCE_DIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/examples/micrograd.cnl", root ? root : ".");
  FILE *f = fopen(path, "rb");
  static char script[8192];
  size_t n = f ? fread(script, 1, sizeof script - 1, f) : 0;
  script[n] = '\0';
  if (f) fclose(f);
  CHECK_MSG(n > 0, "cannot read %s", path);
  for (int b = 0; b < 2; b++) {
    char err[512] = "";
    char *json = run_script(script, b ? CN_BACKEND_C : CN_BACKEND_INTERP, err, sizeof err);
    CHECK_MSG(json != NULL, "%s", err);
    double v[1];
    CHECK(json && values_of(json, 0, v, 1, NULL, 0) == 1 && fabs(v[0] - 24.7041) < 5e-5);
    CHECK(json && values_of(json, 1, v, 1, NULL, 0) == 1 && fabs(v[0] - 138.8338) < 5e-5);
    CHECK(json && values_of(json, 2, v, 1, NULL, 0) == 1 && fabs(v[0] - 645.5773) < 5e-5);
    free(json);
  }
}

static void test_literals_and_einsum(void) {
  char err[512] = "", dims[128];
  double v[16];
  char *json = run_script("let m = [(1, 2, 3); (4, 5, 6)]\n" /* output 2, input 3 */
                          "let t = ([1; 2], [3; 4])\n"       /* input 2 (outer), output 2 */
                          "let b = [| [1; 2]; [3; 4]; [5; 6] |]\n"
                          "let s = m ++ \"i->o => o\"\n" /* sum over the input axis */
                          "let p = m +* \"i->o; i => o\" [1; 0; -1]\n"
                          "print m\nprint t\nprint b\nprint s\nprint p\n",
                          CN_BACKEND_INTERP, err, sizeof err);
  CHECK_MSG(json != NULL, "%s", err);
  if (!json) return;
  CHECK_INT(values_of(json, 0, v, 16, dims, sizeof dims), 6);
  CHECK_STR(dims, "\"batch\": [], \"input\": [3], \"output\": [2]");
  for (int i = 0; i < 6; i++) CHECK_NEAR(v[i], i + 1, 0);
  /* ([1; 2], [3; 4]): the tuple is the input axis, so memory order [output][input] transposes */
  CHECK_INT(values_of(json, 1, v, 16, dims, sizeof dims), 4);
  CHECK_STR(dims, "\"batch\": [], \"input\": [2], \"output\": [2]");
  CHECK(v[0] == 1 && v[1] == 3 && v[2] == 2 && v[3] == 4);
  CHECK_INT(values_of(json, 2, v, 16, dims, sizeof dims), 6);
  CHECK_STR(dims, "\"batch\": [3], \"input\": [], \"output\": [2]");
  CHECK_INT(values_of(json, 3, v, 16, NULL, 0), 2);
  CHECK(v[0] == 6 && v[1] == 15);
  CHECK_INT(values_of(json, 4, v, 16, NULL, 0), 2);
  CHECK(v[0] == 1 - 3 && v[1] == 4 - 6);
  free(json);
}

/* syntax-extensions-cd-op: `p =+ learning_rate * p.grad ~logic:"."` and `p =+ learning_rate *.
 * p.grad` (a binary assignment vs a unary one over a sub-expression) give the same values; and `lhs
 * =:* rhs ~logic:"...|... => ...|...2"` fills the other cells with 1, the neutral of *. */
static void test_cd_forms(void) {
  char err[512] = "";
  double v[16];
  char *json = run_script("let p = {p = [1.0; 2.0; 3.0]}\n"
                          "let q = {q = [1.0; 2.0; 3.0]}\n"
                          "let l = (p *. [0.5; 1.0; 2.0]) ++ \"i => 0\"\n"
                          "let l2 = (q *. [0.5; 1.0; 2.0]) ++ \"i => 0\"\n"
                          "backprop l\nbackprop l2\n"
                          "let lr = 0.1\n"
                          "let%cd upd = p =+ !.lr * p.grad ~logic:\".\"\n"
                          "let%cd upd2 = q =+ !.lr *. q.grad\n"
                          "run upd\nrun upd2\nprint p\nprint q\n"
                          "let x = [2.0; 3.0]\n"
                          "let%cd expand = {e} =:* x ~logic:\"...|... => ...|...2\"\n"
                          "run expand\nprint e\n",
                          CN_BACKEND_INTERP, err, sizeof err);
  CHECK_MSG(json != NULL, "%s", err);
  if (!json) return;
  double want[3] = {1 + 0.1 * 0.5, 2 + 0.1 * 1, 3 + 0.1 * 2};
  CHECK_INT(values_of(json, 0, v, 16, NULL, 0), 3);
  for (int i = 0; i < 3; i++) CHECK_NEAR(v[i], want[i], 1e-12);
  CHECK_INT(values_of(json, 1, v, 16, NULL, 0), 3);
  for (int i = 0; i < 3; i++) CHECK_NEAR(v[i], want[i], 1e-12);
  /* e: output axes [2, 3] (the spec's leftmost output index 2 at the new axis) */
  char dims[128];
  int n = values_of(json, 2, v, 16, dims, sizeof dims);
  CHECK_INT(n, 6);
  CHECK_STR(dims, "\"batch\": [], \"input\": [], \"output\": [2, 3]");
  double want_e[6] = {1, 1, 2, 1, 1, 3};
  for (int i = 0; i < n && i < 6; i++) CHECK_NEAR(v[i], want_e[i], 0);
  free(json);
}

/* A let%op function's inline declarations are created when it is defined and shared by every
 * application; with ~config, each configuration gets its own, labeled by config.label. */
static void test_functions(void) {
  char err[512] = "";
  double v[16];
  char *json = run_script("let%op scale x = {w = 3.0} *. x\n"
                          "let a = scale [1.0; 2.0]\n"
                          "let b = scale [10.0]\n"
                          "print a\nprint b\nprint w\n"
                          "let%op layer ~config x = {u = 2.0} *. x + !.(config.shift)\n"
                          "let l1 = layer ~config:{label = [\"L1\"]; shift = 1.0}\n"
                          "let l2 = layer ~config:{label = [\"L2\"]; shift = 5.0}\n"
                          "let y = l1 [1.0] + l2 [1.0] + l1 [2.0]\n"
                          "print y\n",
                          CN_BACKEND_INTERP, err, sizeof err);
  CHECK_MSG(json != NULL, "%s", err);
  if (!json) return;
  CHECK(values_of(json, 0, v, 16, NULL, 0) == 2 && v[0] == 3 && v[1] == 6);
  CHECK(values_of(json, 1, v, 16, NULL, 0) == 1 && v[0] == 30);
  CHECK(values_of(json, 2, v, 16, NULL, 0) == 1 && v[0] == 3);
  /* l1 1 + l2 1 + l1 2 = (2+1) + (2+5) + (4+1) */
  CHECK(values_of(json, 3, v, 16, NULL, 0) == 1 && v[0] == 15);
  CHECK(strstr(json, "\"L1.u\"") == NULL); /* only printed tensors appear */
  free(json);
}

/* Static indices and loops: slicing and embedding by a declared index, fresh loop indices in
 * nested loops, statements compiled once per loop (parameters initialized once), training with
 * a learning rate over the loop index, and a %cd routine with an embedded parameter expression
 * run many times. All values by hand. */
static void test_loops(void) {
  char err[512] = "";
  double v[16];
  char *json = run_script("let i = static_index 3\n"
                          "let x = [| [1.0; 2.0]; [3.0; 4.0]; [5.0; 6.0] |]\n"
                          "let%cd accumulate = {total} =+ (x @| i) *. !@i\n"
                          "for i = 0 to 2 do\n  run accumulate\ndone\n"
                          "print total\n"
                          "for a = 0 to 1 do\n  for b = 1 to 2 do\n    print (!@a *. 10 + !@b)\n"
                          "  done\ndone\n"
                          "let p = {p = 4.0}\n"
                          "let loss = p *. p\n"
                          "for k = 0 to 2 do\n"
                          "  backprop loss\n  sgd loss ~learning_rate:(0.1 *. !@k)\n"
                          "done\n"
                          "print p\n"
                          "let w = {w = 1.0}\n"
                          "let%cd grow = w =+ (w *. 2) *. 1\n"
                          "for k = 0 to 2 do run grow done\n"
                          "print w\n",
                          CN_BACKEND_C, err, sizeof err);
  CHECK_MSG(json != NULL, "%s", err);
  if (!json) return;
  /* total = 0 * [1; 2] + 1 * [3; 4] + 2 * [5; 6] */
  CHECK(values_of(json, 0, v, 16, NULL, 0) == 2 && v[0] == 13 && v[1] == 16);
  /* a * 10 + b for (a, b) = (0, 1), (0, 2), (1, 1), (1, 2) */
  const double ab[4] = {1, 2, 11, 12};
  for (int k = 0; k < 4; k++) CHECK(values_of(json, 1 + k, v, 16, NULL, 0) == 1 && v[0] == ab[k]);
  /* p <- p - 0.1 k * 2p: 4, then 4 - 0.1 * 8 = 3.2, then 3.2 - 0.2 * 6.4 = 1.92 (a parameter
   * initialized on every step would give 4 - 0.2 * 8 = 2.4) */
  CHECK(values_of(json, 5, v, 16, NULL, 0) == 1);
  CHECK_NEAR(v[0], 1.92, 1e-12);
  /* w <- w + 2w three times from 1 (a re-initialized w would stay at 3) */
  CHECK(values_of(json, 6, v, 16, NULL, 0) == 1 && v[0] == 27);
  free(json);
}

/* A statement in a loop is compiled once, whatever the number of iterations. */
static void test_loop_compiles_once(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  cn_notation_options opts = {.backend = CN_BACKEND_INTERP, .emit_asgn = true, .out = out};
  cn_status st = cn_notation_run(g, "once.cnl",
                                 "let q = {q = 2.0}\n"
                                 "for s = 0 to 9 do\n  print (q *. !@s)\ndone\n",
                                 &opts);
  fclose(out);
  CHECK_MSG(st == CN_OK, "%s", cn_ctx_error(ctx));
  /* the init of q once, then the print's forward code once; ten printouts */
  int routines = 0, prints = 0;
  for (const char *p = buf; p && (p = strstr(p, "# cnl_")); p++) routines++;
  for (const char *p = buf; p && (p = strstr(p, "\"mul\" (#4)")); p++) prints++;
  CHECK_INT(routines, 2);
  CHECK_INT(prints, 10);
  /* the number initializer is a constant named by its value, fetched then added into q */
  CHECK_HAS(buf, "# cnl_1: assignments\n2 =: 2;\nq =:+ 2;\n# cnl_2: assignments\ns =: !@s;\n");
  free(buf);
  cn_ctx_destroy(ctx);
}

/* half_moons: the library's points (cn_dataset_half_moons) in the requested batch layout. */
static void test_half_moons(void) {
  char err[512] = "", dims[128];
  double v[16], xy[16], labels[8];
  char *json = run_script("let (pts, labels) = half_moons ~n:8 ~noise:0.2 ~seed:5 ~batch_size:4\n"
                          "print pts\nprint labels\n"
                          "let (all, _) = half_moons ~n:2 ~noise:0.2 ~seed:5\nprint all\n",
                          CN_BACKEND_INTERP, err, sizeof err);
  CHECK_MSG(json != NULL, "%s", err);
  if (!json) return;
  cn_dataset_half_moons(5, 0.2, 8, xy, labels);
  CHECK_INT(values_of(json, 0, v, 16, dims, sizeof dims), 16);
  CHECK_STR(dims, "\"batch\": [2, 4], \"input\": [], \"output\": [2]");
  for (int i = 0; i < 16; i++) CHECK_NEAR(v[i], xy[i], 0);
  CHECK_INT(values_of(json, 1, v, 16, dims, sizeof dims), 8);
  CHECK_STR(dims, "\"batch\": [2, 4], \"input\": [], \"output\": []");
  for (int i = 0; i < 8; i++) CHECK(v[i] == (i % 2 ? -1 : 1) && labels[i] == v[i]);
  CHECK_INT(values_of(json, 2, v, 16, dims, sizeof dims), 4);
  CHECK_STR(dims, "\"batch\": [2], \"input\": [], \"output\": [2]");
  for (int i = 0; i < 4; i++) CHECK_NEAR(v[i], xy[i], 0); /* the same stream's first points */
  free(json);
}

/* Every allocation failure while running a script with loops, a tuple pattern, half_moons and
 * the prelude (its relu applied) fails the run with CN_ERR_NOMEM (never a crash, a leak or
 * another status); past the last allocation the script runs. */
static void test_allocation_failures(void) {
  const char *script = "let (pts, labels) = half_moons ~n:4 ~batch_size:2\n"
                       "let i = static_index 2\n"
                       "let%cd acc = {total} =+ (pts @| i) *. !@i\n"
                       "let q = {q = 3.0}\n"
                       "for i = 0 to 1 do\n  run acc\n  for j = 0 to 1 do\n"
                       "    backprop (relu (q *. !@j))\n    print total\n  done\ndone\n";
  int n = 1, failures = 0;
  for (;; n++) {
    cn_ctx *ctx = cn_ctx_create();
    ctx->fail_alloc_countdown = n;
    cn_graph *g = cn_graph_create(ctx);
    FILE *out = fopen("/dev/null", "w");
    cn_notation_options opts = {.backend = CN_BACKEND_INTERP, .out = out};
    cn_status st = g ? cn_notation_run(g, "a.cnl", script, &opts) : CN_ERR_NOMEM;
    fclose(out);
    bool done = st == CN_OK;
    if (!done) {
      failures++;
      CHECK_MSG(st == CN_ERR_NOMEM, "allocation %d: status %d: %s", n, (int)st, cn_ctx_error(ctx));
    }
    cn_ctx_destroy(ctx);
    if (done || n > 100000) break;
  }
  CHECK(n <= 100000);
  CHECK(failures > 100);
}

static void test_c_api(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  cn_dims d2 = {{0, NULL, NULL}, {0, NULL, NULL}, {1, (int64_t[]){2}, NULL}};
  cn_tensor *x = cn_tensor_data(g, "x", &d2, (double[]){1, -2}, 2);
  cn_tensor *y = cn_notation_op(g, "relu (x *. !.k) + x", 2,
                                (cn_notation_binding[]){{"x", x, 0}, {"k", NULL, 3}});
  CHECK_MSG(y != NULL, "%s", cn_ctx_error(ctx));
  cn_tensor *acc = cn_tensor_buffer(g, "acc", &d2);
  cn_asgn *a = cn_notation_cd(g, "acc =+ y * x ~logic:\".\"", 3,
                              (cn_notation_binding[]){{"acc", acc, 0}, {"y", y, 0}, {"x", x, 0}});
  CHECK_MSG(a != NULL, "%s", cn_ctx_error(ctx));
  if (y && a) {
    cn_asgn *parts[2] = {cn_graph_forward(g, y), a};
    cn_routine *r = cn_routine_compile(ctx, cn_asgn_seq(ctx, 2, parts), CN_BACKEND_C, "notation_c");
    CHECK_MSG(r != NULL, "%s", cn_ctx_error(ctx));
    if (r) {
      CHECK(cn_routine_run(r) == CN_OK && cn_routine_run(r) == CN_OK);
      double v[2];
      CHECK(cn_node_get_values(cn_tensor_value(acc), false, v, 2) == CN_OK);
      /* y = relu(3x) + x = [4, -2]; acc += y * x twice */
      CHECK_NEAR(v[0], 2 * 4 * 1, 0);
      CHECK_NEAR(v[1], 2 * (-2) * (-2), 0);
      cn_routine_free(r);
    }
  }
  /* the %cd printer spells a gate accumulation as syntax-extensions-cd-op does, so it parses back
   * */
  cn_asgn *gate =
      cn_notation_cd(g, "acc =?/ x", 2, (cn_notation_binding[]){{"acc", acc, 0}, {"x", x, 0}});
  CHECK_MSG(gate != NULL, "%s", cn_ctx_error(ctx));
  CHECK_HAS(gate ? cn_asgn_to_string(ctx, gate) : NULL, "acc =?/ x");
  CHECK(cn_notation_op(g, "relu (", 0, NULL) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "<cn_op>:1:");
  cn_ctx_destroy(ctx);
}

static void test_errors(void) {
  static const struct {
    const char *script, *message;
  } cases[] = {
      {"print nope\n", "test.cnl:1:7: unbound name 'nope'"},
      {"let x = [1.0; 2.0]\nlet y = [1.0; 2.0; 3.0]\nprint (x + y)\n",
       "test.cnl:3:10: shape conflict"},
      {"let x = [1.0]\nlet%cd r = x =+ x * x\n",
       "test.cnl:2:14: '*' in an assignment needs ~logic"},
      {"let x = [1.0]\nprint x.grad\n", "test.cnl:2:9: \"x\" has no gradient"},
      {"let f = frob 3\n", "test.cnl:1:9: unknown function 'frob'"},
      {"run 3\n", "test.cnl:1:5: a number is not a routine"},
      {"let i = static_index 3\nfor i = 0 to 3 do\ndone\n",
       "test.cnl:2:14: the loop reaches 3, outside the values 0 .. 2 of 'i'"},
      {"for i = -1 to 2 do\ndone\n", "test.cnl:1:9: a static index starts at 0 or more"},
      {"let i = static_index 2\nlet x = [| [1.0]; [2.0] |]\nprint (x @| i)\n",
       "test.cnl:3:1: `print x @| i` reads the static index 'i' (declared at line 1, column 9), "
       "which no loop has bound: read it in the body of `for i = ... do ... done`"},
      {"let i = static_index 2\nprint (i + 1)\n",
       "test.cnl:2:8: expected a tensor, found a static index (read its value with !@)"},
      {"print !@3\n", "test.cnl:1:7: !@ expects a static index (of static_index or a for loop), "
                      "found a number"},
      {"let i = static_index 0\n", "test.cnl:1:22: a static index needs at least one value"},
      {"let (a, b) = [1.0]\n", "test.cnl:1:14: the pattern binds 2 names: expected a tuple of 2"},
      {"let (a, b) = half_moons ~n:10 ~batch_size:3\n",
       "test.cnl:1:14: half_moons needs 1 <= ~n <= 2^26"},
      {"let (a, b) = half_moons ~n:10 ~size:3\n",
       "test.cnl:1:31: half_moons has no argument ~size"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char err[1024] = "";
    char *json = run_script(cases[i].script, CN_BACKEND_INTERP, err, sizeof err);
    CHECK_MSG(json == NULL, "case %zu ran", i);
    CHECK_HAS(err, cases[i].message);
    free(json);
  }
}

static bool positioned(const char *msg, const char *file);

/* The whole message: "FILE:LINE:COL: message", the source line, a caret under the column; a
 * shape conflict found only when shapes are closed (at the first print) points at the
 * expression that introduced the constraint, not at the print. */
static void test_error_format(void) {
  static const struct {
    const char *script, *message;
  } cases[] = {
      {"let x = [1.0]\nlet y = (x +\n",
       "test.cnl:2:13: expected an expression, found end of input\nlet y = (x +\n            ^"},
      {"let x = [1.0; 2.0]\nlet y = [1.0; 2.0; 3.0]\nprint (x + y)\n",
       "test.cnl:3:10: shape conflict in pointwise (operation #3 computing \"add\" (#3)): "},
      /* found at line 4, introduced at line 3 */
      {"let a = ([1.0; 2.0] : rgb)\nlet b = ([3.0; 4.0] : xy)\nlet c = a + b\nprint c\n",
       "test.cnl:3:11: shape conflict in pointwise (operation #3 computing \"c\" (#3)): axis "
       "labels "
       "differ ('rgb' vs 'xy'): output row of \"c\" (#3) axis 'rgb' (size 2:rgb) vs output row "
       "of \"b\" (#2) axis 'xy' (size 2:xy) (found when line 4 needed the shapes)\nlet c = a + "
       "b\n"
       "          ^"},
      /* a parameter nothing pins: at its declaration, inside a function body */
      {"let%op f x = x *. {v}\nlet y = f [1.0]\nprint y\n",
       "test.cnl:1:19: shape inference: dimension 0 of the output row of parameter \"v\" (#11) "
       "is not determined"},
      {"let x = [1.0]\nlet%cd r = {y} =+ x ~projections\n",
       "test.cnl:2:21: no projections are in scope here: ~projections belongs to an operation's "
       "code (operation ~op_asn ~grad_asn); give ~logic instead\n"
       "let%cd r = {y} =+ x ~projections\n                    ^"},
      {"let x = [1.0]\nlet%cd r = {y} =+ x ~logic\n", "test.cnl:2:21: ~logic needs a value"},
      {"let x = [1.0]\nlet%cd r = {y} =+ \"z\"\n",
       "test.cnl:2:19: a %cd declaration \"name\" is only allowed on the left of an assignment"},
      /* syntax-extensions-cd-op: a %cd declaration only in the assigned-to position, also inside
       * an embedded expression on the right (which would otherwise declare as %op does) */
      {"let a = [1.0; 2.0]\nlet%cd r = {u} =: a + {v}\n",
       "test.cnl:2:23: a %cd declaration {v} is only allowed on the left of an assignment"},
      {"let a = [1.0; 2.0]\nlet%cd r = {u} =: a *. {w}\n",
       "test.cnl:2:24: a %cd declaration {w} is only allowed on the left of an assignment"},
      {"let a = [1.0; 2.0]\nlet%cd r = {u} =: a *. (relu \"w\" + 1.0)\n",
       "test.cnl:2:30: a %cd declaration \"name\" is only allowed on the left of an assignment"},
      {"let a = [1.0; 2.0]\nlet%cd r = {u} =: a; {t} =+ sum ~spec:\"i => 0\" (u *. {w = 2.0})\n",
       "test.cnl:2:54: a %cd declaration {w} is only allowed on the left of an assignment"},
      {"let%cd f p = p =+ p\nrun f\n",
       "test.cnl:2:5: a function is not a routine (a let%cd function needs all its arguments)"},
      {"let x = [1.0]\nlet%cd r = if x then {y} =: x\n",
       "test.cnl:2:15: an if condition must be a host value, found a tensor"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char err[2048] = "";
    char *json = run_script(cases[i].script, CN_BACKEND_INTERP, err, sizeof err);
    CHECK_MSG(json == NULL, "case %zu ran", i);
    CHECK_MSG(strncmp(err, cases[i].message, strlen(cases[i].message)) == 0,
              "case %zu:\n%s\nexpected to start with\n%s", i, err, cases[i].message);
    CHECK_MSG(positioned(err, "test.cnl"), "case %zu: %s", i, err);
    free(json);
  }
  char err[2048] = "";
  free(run_script("let x = [1.0; 2.0]\nlet y = [1.0; 2.0; 3.0]\nprint (x + y)\n", CN_BACKEND_INTERP,
                  err, sizeof err));
  CHECK_HAS(err, "\nprint (x + y)\n         ^");
  /* a function's own (%op) declarations are not the %cd code's: w = 2 scales a, plus 1 */
  char *json = run_script("let%op scale x = x *. {w = 2.0}\nlet a = [1.0; 2.0]\n"
                          "let%cd r = {u} =: scale a + 1.0\nrun r\nprint u\n",
                          CN_BACKEND_INTERP, err, sizeof err);
  CHECK_MSG(json != NULL, "%s", err);
  CHECK_HAS(json, "\"values\": [3, 5]");
  free(json);
}

/* Whether msg is a positioned message of file: "FILE:LINE:COL: text", the source line, a caret. */
static bool positioned(const char *msg, const char *file) {
  size_t n = strlen(file);
  if (strncmp(msg, file, n) != 0 || msg[n] != ':') return false;
  char *end;
  long line = strtol(msg + n + 1, &end, 10), col = end[0] == ':' ? strtol(end + 1, &end, 10) : 0;
  const char *nl = strchr(msg, '\n'), *nl2 = nl ? strchr(nl + 1, '\n') : NULL;
  return line >= 1 && col >= 1 && end[0] == ':' && end[1] == ' ' && nl2 && strchr(nl2, '^');
}

/* Runs a fuzz script on the interpreter: CN_OK, or a positioned error (never another status);
 * *parsed tells whether it got past the parser. */
static cn_status fuzz_run(const char *text, bool *parsed) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  *parsed = cn_notation_check(ctx, "fuzz.cnl", text) == CN_OK;
  FILE *out = fopen("/dev/null", "w");
  cn_notation_options opts = {.backend = CN_BACKEND_INTERP, .out = out};
  cn_status st = cn_notation_run(g, "fuzz.cnl", text, &opts);
  fclose(out);
  CHECK_MSG(st == CN_OK || (st == CN_ERR_INVALID && positioned(cn_ctx_error(ctx), "fuzz.cnl")),
            "script\n%s\nstatus %d: %s", text, (int)st, cn_ctx_error(ctx));
  cn_ctx_destroy(ctx);
  return st;
}

/* Mutated scripts: valid scripts with random token edits (deletions, duplications, swaps,
 * insertions from a token list), so that the streams reach the parser's corners and, often
 * enough, the evaluator: an error or a result, never a crash (run under ASan by make test). */
static void test_fuzz(void) {
  static const char *const corpus[] = {
      "let x = [1.0; 2.0]\nlet y = {w = [0.5; 1.0]} *. x\nbackprop (y ++ \"i=>0\")\n"
      "print w.grad\n",
      "let%op f x = relu ({v} * x + {b; o = [2]})\nlet z = f [1.0; -1.0]\nprint z\n"
      "sgd (z ++ \"i=>0\") ~learning_rate:0.1\nprint v\n",
      "let p = {p = [1.0; 2.0]}\nlet%cd r = \"d\" =: p *. p; p =+ d ~logic:\".\"\nrun r\nprint d\n",
      "let i = static_index 2\nlet t = [| [1.0]; [2.0] |]\nfor i = 0 to 1 do print (t @| i) "
      "done\n",
      "let%op g ~config x = \"u\" config.h + x\nlet h = g ~config:{label = [\"L\"]; h = 2}\n"
      "print (h [1.0; 2.0])\n",
      "let m = [(1, 2); (3, 4)]\nlet%cd mm = {c} =:+ m * m ~logic:\"@\"; ~~(\"n\" m; c =* 2.0)\n"
      "run mm\nprint c\n"};
  static const char *const tokens[] = {"let",      "x",      "=",
                                       "1.0",      "[",      "]",
                                       "(",        ")",      ";",
                                       ",",        "+",      "*",
                                       "*.",       "**.",    "++",
                                       "\"i=>i\"", "{w}",    "relu",
                                       "print",    "\n",     ".grad",
                                       "-",        "let%op", "let%cd",
                                       "=+",       "=:",     "~logic:\".\"",
                                       "run",      "[|",     "|]",
                                       "@^^",      "!.",     "in",
                                       "for",      "done",   "!@",
                                       ".merge",   "\"d\"",  "~config:{label = []}",
                                       "if",       "then",   "~~(",
                                       "@|",       "-?/",    "do"};
  static const char *const names[] = {"x", "y", "w", "p", "d", "m", "z", "v", "c", "t", "i", NULL};
  static const char *const numbers[] = {"1.0", "2", "-1.0", "0", "[1.0;", "[2.0]", NULL};
  static const char *const ops[] = {"+", "-", "*", "*.", "/.", "@^", "-?/", "<>", NULL};
  static const char *const asgns[] = {"=:", "=+", "=:+", "=-", "=*", "=:*", "=@^", NULL};
  static const char *const *const classes[] = {names, numbers, ops, asgns};
  unsigned seed = 12345;
  int ran = 0, failed = 0, parsed = 0;
  enum { N = 600, MAX_WORDS = 128 };
  for (int iter = 0; iter < N; iter++) {
    /* the script's words (split on spaces: strings may split too) */
    static char buf[2048];
    snprintf(buf, sizeof buf, "%s", corpus[iter % (sizeof corpus / sizeof corpus[0])]);
    const char *words[MAX_WORDS];
    int n = 0;
    for (char *w = strtok(buf, " "); w && n < MAX_WORDS; w = strtok(NULL, " ")) words[n++] = w;
    int edits = 1 + (int)((seed >> 12) % 2);
    for (int e = 0; e < edits && n > 1; e++) {
      seed = seed * 1103515245u + 12345u;
      int k = (int)((seed >> 16) % (unsigned)n), kind = (int)((seed >> 8) % 8);
      if (kind == 0) { /* delete */
        memmove(words + k, words + k + 1, sizeof *words * (size_t)(n - k - 1));
        n--;
      } else if (kind == 1 && n < MAX_WORDS) { /* duplicate */
        memmove(words + k + 1, words + k, sizeof *words * (size_t)(n - k));
        n++;
      } else if (kind == 2) { /* swap with the next */
        int j = (k + 1) % n;
        const char *t = words[k];
        words[k] = words[j];
        words[j] = t;
      } else { /* replace: mostly by a word of the same class when it has one (keeping the
                * syntax, so that the evaluator sees the script), else by any token */
        const char *const *cls = NULL;
        size_t m = 0;
        for (size_t c = 0; c < sizeof classes / sizeof classes[0] && !cls; c++)
          for (size_t j = 0; classes[c][j]; j++)
            if (strcmp(classes[c][j], words[k]) == 0) {
              cls = classes[c];
              while (cls[m]) m++;
              break;
            }
        words[k] = cls && kind > 3 ? cls[(seed >> 5) % m]
                                   : tokens[(seed >> 4) % (sizeof tokens / sizeof tokens[0])];
      }
    }
    char text[4096] = "";
    for (int k = 0; k < n; k++) {
      strncat(text, words[k], sizeof text - strlen(text) - 1);
      strncat(text, " ", sizeof text - strlen(text) - 1);
    }
    bool p;
    cn_status st = fuzz_run(text, &p);
    parsed += p;
    if (st == CN_OK)
      ran++;
    else
      failed++;
  }
  printf("mutation fuzz: %d parsed, %d ran, %d failed\n", parsed, ran, failed);
  CHECK(ran + failed == N);
  CHECK(parsed > N / 10); /* the evaluator is reached */
  CHECK(ran > N / 50);
  CHECK(failed > N / 4);
}

/* ---- Grammar fuzz: well-formed scripts over a small vocabulary that often type-checks, all
 * evaluated (interpreter): each runs or fails with a positioned message, never crashes (ASan). */

static unsigned fuzz_seed = 2024;
static unsigned pick(unsigned n) {
  fuzz_seed = fuzz_seed * 1103515245u + 12345u;
  return (fuzz_seed >> 16) % n;
}

#define PICK(list) (list)[pick(sizeof(list) / sizeof((list)[0]))]

static void fz_expr(cn_sbuf *sb, int depth, int bound);

static void fz_atom(cn_sbuf *sb, int depth, int bound) {
  static const char *const atoms[] = {"a",
                                      "a",
                                      "m",
                                      "s",
                                      "p",
                                      "bt",
                                      "2.0",
                                      "3",
                                      "[1.0; -1.0; 0.5]",
                                      "{w}",
                                      "\"d\"",
                                      "!.s",
                                      "!@i",
                                      "p.grad",
                                      "(a, a)",
                                      "{c; o = [3]}",
                                      "'q' 1.0",
                                      "[(1, 0, 2)]"};
  if (depth > 0 && pick(3) == 0) {
    cn_sbuf_putc(sb, '(');
    fz_expr(sb, depth - 1, bound);
    cn_sbuf_putc(sb, ')');
  } else if (bound > 0 && pick(4) == 0) {
    cn_sbuf_printf(sb, "x%u", pick((unsigned)bound));
  } else {
    cn_sbuf_puts(sb, PICK(atoms));
  }
}

static void fz_expr(cn_sbuf *sb, int depth, int bound) {
  static const char *const binops[] = {"+", "-", "*.", "/.", "*", "<", "<>", "-?/", "@^", "^^"};
  static const char *const unops[] = {"relu", "exp", "neg", "sqrt", "tanh", "id", "not"};
  static const char *const specs[] = {
      "i => 0",   "...|... => 0",       "i => i", "...|...->... => 0", "ij => ji",
      "b|i => b", "...|... => ...|...2"};
  switch (depth <= 0 ? 0 : pick(9)) {
  case 0:
  case 1: fz_atom(sb, depth, bound); break;
  case 2:
  case 3:
    fz_atom(sb, depth - 1, bound);
    cn_sbuf_printf(sb, " %s ", PICK(binops));
    fz_atom(sb, depth - 1, bound);
    break;
  case 4:
    cn_sbuf_printf(sb, "%s ", PICK(unops));
    fz_atom(sb, depth - 1, bound);
    break;
  case 5: /* an einsum is parenthesized: a tighter operator may follow */
    cn_sbuf_putc(sb, '(');
    fz_atom(sb, depth - 1, bound);
    cn_sbuf_printf(sb, " ++ \"%s\")", PICK(specs));
    break;
  case 6:
    cn_sbuf_putc(sb, '(');
    fz_atom(sb, depth - 1, bound);
    cn_sbuf_puts(sb, pick(2) ? " +* \"i;i=>i\" " : " @^+ \"i;j=>ij\" ");
    fz_atom(sb, depth - 1, bound);
    cn_sbuf_putc(sb, ')');
    break;
  case 7:
    fz_atom(sb, depth - 1, bound);
    cn_sbuf_printf(sb, " %s", pick(2) ? "**. 2." : pick(2) ? "@| 1" : "@| i");
    break;
  default:
    cn_sbuf_puts(sb, "where ");
    for (int k = 0; k < 3; k++) {
      fz_atom(sb, depth - 1, bound);
      cn_sbuf_putc(sb, ' ');
    }
    break;
  }
}

static void fz_cd(cn_sbuf *sb, int depth, int bound) {
  static const char *const targets[] = {"{t}", "\"u\"", "p", "p.grad", "{v; o = [3]}"};
  static const char *const asgn[] = {"=:", "=+", "=:+", "=-", "=:*", "=/", "=?/", "=@^", "=:^^"};
  static const char *const logics[] = {
      "", "", " ~logic:\".\"", " ~logic:\"@\"", " ~logic:\"T\"", " ~logic:\"i=>0\""};
  int n = 1 + (int)pick(3);
  for (int i = 0; i < n; i++) {
    if (i) cn_sbuf_puts(sb, "; ");
    unsigned k = depth > 0 ? pick(7) : 0;
    if (k == 5) {
      cn_sbuf_puts(sb, pick(2) ? "if s > 1.0 then (" : "if s = 1.0 then (");
      fz_cd(sb, depth - 1, bound);
      cn_sbuf_puts(sb, ") else (");
      fz_cd(sb, depth - 1, bound);
      cn_sbuf_puts(sb, ")");
      continue;
    }
    if (k == 6) {
      cn_sbuf_puts(sb, "~~(\"note\" a; ");
      fz_cd(sb, depth - 1, bound);
      cn_sbuf_puts(sb, ")");
      continue;
    }
    cn_sbuf_printf(sb, "%s %s ", PICK(targets), PICK(asgn));
    switch (pick(4)) {
    case 0: fz_expr(sb, 2, bound); break;
    case 1:
      fz_atom(sb, 1, bound);
      cn_sbuf_puts(sb, " * ");
      fz_atom(sb, 1, bound);
      break;
    case 2:
      cn_sbuf_puts(sb, "add (");
      fz_atom(sb, 1, bound);
      cn_sbuf_puts(sb, ", a)");
      break;
    default:
      cn_sbuf_puts(sb, "relu ");
      fz_atom(sb, 1, bound);
      break;
    }
    cn_sbuf_puts(sb, PICK(logics));
  }
}

static void test_grammar_fuzz(void) {
  int ok = 0, eval_errors = 0, parse_errors = 0;
  enum { N = 600 };
  for (int iter = 0; iter < N; iter++) {
    cn_sbuf sb = {0};
    cn_sbuf_puts(&sb, "let a = [1.0; 2.0; 3.0]\nlet m = [(1, 2, 3); (4, 5, 6)]\nlet s = 2.0\n"
                      "let p = {p = [0.5; -1.0; 2.0]}\nlet i = static_index 2\n"
                      "let bt = [| [1.0; 2.0; 3.0]; [4.0; 5.0; 6.0] |]\n");
    int bound = 0, items = 1 + (int)pick(5);
    for (int k = 0; k < items; k++) {
      switch (pick(8)) {
      case 0:
      case 1:
        cn_sbuf_printf(&sb, "let x%d = ", bound++);
        fz_expr(&sb, 3, bound - 1);
        break;
      case 2:
        cn_sbuf_puts(&sb, "print ");
        fz_expr(&sb, 3, bound);
        break;
      case 3:
        cn_sbuf_puts(&sb, "backprop ((");
        fz_expr(&sb, 2, bound);
        cn_sbuf_puts(&sb, ") ++ \"...|...->... => 0\")");
        break;
      case 4:
        cn_sbuf_printf(&sb, "let%%cd r%d = ", k);
        fz_cd(&sb, 2, bound);
        cn_sbuf_printf(&sb, "\nrun r%d", k);
        break;
      case 5: {
        bool config = pick(2);
        cn_sbuf_printf(&sb, "let%%op f%d %sx = ", k, config ? "~config " : "");
        fz_expr(&sb, 2, bound);
        cn_sbuf_printf(&sb, " + x\nprint (f%d %sa)", k, config ? "~config:{label = [\"L\"]} " : "");
        break;
      }
      case 6:
        cn_sbuf_puts(&sb, "sgd ((");
        fz_expr(&sb, 2, bound);
        cn_sbuf_puts(&sb, ") ++ \"...|...->... => 0\") ~learning_rate:0.1");
        break;
      default:
        cn_sbuf_puts(&sb, "for j = 0 to 1 do print (");
        fz_expr(&sb, 2, bound);
        cn_sbuf_puts(&sb, ") *. !@j done");
        break;
      }
      cn_sbuf_putc(&sb, '\n');
    }
    const char *text = sb.failed ? NULL : sb.data;
    bool parsed = false;
    cn_status st = text ? fuzz_run(text, &parsed) : CN_ERR_NOMEM;
    CHECK_MSG(parsed, "generated script does not parse:\n%s", text ? text : "");
    if (st == CN_OK)
      ok++;
    else if (parsed)
      eval_errors++;
    else
      parse_errors++;
    cn_sbuf_free(&sb);
  }
  printf("grammar fuzz: %d ran, %d evaluation errors, %d parse errors\n", ok, eval_errors,
         parse_errors);
  /* both outcomes are exercised substantially: the evaluator is reached, not just the parser */
  CHECK(ok > N / 10);
  CHECK(eval_errors > N / 10);
  CHECK_INT(parse_errors, 0);
}

int main(void) {
  test_micrograd();
  test_literals_and_einsum();
  test_cd_forms();
  test_functions();
  test_loops();
  test_loop_compiles_once();
  test_half_moons();
  test_allocation_failures();
  test_c_api();
  test_errors();
  test_error_format();
  test_fuzz();
  test_grammar_fuzz();
  CHECK_DONE();
}
