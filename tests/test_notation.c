/* The notation evaluated (issue 6): scripts run through cn_notation_run with JSON output parsed
 * back, compared with values computed by hand: micrograd in the notation, literals (lists are
 * output axes, tuples input axes, arrays batch axes), einsum operators, the two spellings of a
 * parameter update from seed 002, the expansion spec filling the other cells with the
 * accumulator's neutral element, parameter sharing across applications of a let%op function and
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

/* Seed 002: `p =+ learning_rate * p.grad ~logic:"."` and `p =+ learning_rate *. p.grad` (a
 * binary assignment vs a unary one over a sub-expression) give the same values; and
 * `lhs =:* rhs ~logic:"...|... => ...|...2"` fills the other cells with 1, the neutral of *. */
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
  CHECK_HAS(buf, "# cnl_1: assignments\nq =:+ init;\n# cnl_2: assignments\ns =: !@s;\n");
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

/* Every allocation failure while running a script with loops, a tuple pattern and half_moons
 * fails the run with CN_ERR_NOMEM (never a crash, a leak or another status); past the last
 * allocation the script runs. */
static void test_allocation_failures(void) {
  const char *script = "let (pts, labels) = half_moons ~n:4 ~batch_size:2\n"
                       "let i = static_index 2\n"
                       "let%cd acc = {total} =+ (pts @| i) *. !@i\n"
                       "let q = {q = 3.0}\n"
                       "for i = 0 to 1 do\n  run acc\n  for j = 0 to 1 do\n"
                       "    backprop (q *. !@j)\n    print total\n  done\ndone\n";
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
  /* the %cd printer spells a gate accumulation as seed 002 does, so it parses back */
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
       "test.cnl:3:8: routine 'cnl_1': symbol 'i' is not bound"},
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

/* Random token streams: an error or a result, never a crash (run under ASan by make test). */
static void test_fuzz(void) {
  static const char *const tokens[] = {"let ",
                                       "x",
                                       "y",
                                       "=",
                                       "1.0",
                                       "2",
                                       "[",
                                       "]",
                                       "(",
                                       ")",
                                       ";",
                                       ",",
                                       "+",
                                       "*",
                                       "*.",
                                       "**.",
                                       "++",
                                       "\"i=>i\"",
                                       "{w}",
                                       "{w = 2.0}",
                                       "relu",
                                       "print ",
                                       "backprop ",
                                       "\n",
                                       ".grad",
                                       "-",
                                       "let%op f x =",
                                       "let%cd r =",
                                       "=+",
                                       "=:",
                                       "~logic:\".\"",
                                       "run r",
                                       "[|",
                                       "|]",
                                       "@^^",
                                       "!.",
                                       "sgd x ~learning_rate:0.1",
                                       "in",
                                       "for i = 0 to 1 do",
                                       "done",
                                       "!@",
                                       "static_index 2",
                                       "f"};
  unsigned seed = 12345;
  int ran = 0, failed = 0;
  for (int i = 0; i < 400; i++) {
    char text[512] = "";
    int n = 1 + (int)(seed % 24);
    for (int k = 0; k < n; k++) {
      seed = seed * 1103515245u + 12345u;
      strncat(text, tokens[(seed >> 16) % (sizeof tokens / sizeof tokens[0])],
              sizeof text - strlen(text) - 1);
      strncat(text, " ", sizeof text - strlen(text) - 1);
    }
    char err[1024] = "";
    char *json = run_script(text, CN_BACKEND_INTERP, err, sizeof err);
    if (json)
      ran++;
    else
      failed += err[0] != '\0';
    free(json);
  }
  CHECK(ran + failed == 400);
  CHECK(failed > 0);
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
  test_fuzz();
  CHECK_DONE();
}
