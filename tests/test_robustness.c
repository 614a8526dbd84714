/* Robustness of scripts (issue 14): integer extremes are reported as written, at the literal's
 * position, never wrapped (a script computes with doubles, exact up to 2^53); sizes computed from
 * script values are checked with positions; the NaN check (option "check" = "nan", CANNL_CHECK=nan)
 * stops at the first non-finite value a routine writes, naming the tensor, its operation and where
 * the script built it (in a let%tile body, the operation's own line; for a %cd assignment, its
 * operator and operation), and never reads padding margins; a buffer too large for memory (below
 * the 2^40-byte limit checked when the shape is known) is reported at the tensor's position with
 * its dims. Messages compared exactly, on both backends. */
#include "limit_check.h"
#include "notation_check.h"

/* Runs script with the "check" option at `check` (NULL: the default) on backend b; the status,
 * the message in msg (empty on success) and the printed text in printed. */
static cn_status run_checked(const char *script, const char *check, int b, char *msg, size_t cap,
                             char *printed, size_t printed_cap) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  cn_notation_options opts = {.backend = b ? CN_BACKEND_C : CN_BACKEND_INTERP, .out = out};
  cn_status st = check ? cn_ctx_set_option(ctx, "check", check) : CN_OK;
  if (st == CN_OK) st = cn_notation_run(g, "nan.cnl", script, &opts);
  fclose(out);
  snprintf(msg, cap, "%s", st == CN_OK ? "" : cn_ctx_error(ctx));
  snprintf(printed, printed_cap, "%s", buf ? buf : "");
  free(buf);
  cn_ctx_destroy(ctx);
  return st;
}

static void test_integer_extremes(void) {
  CHECK_HAS(run_error("print (range 9223372036854775807)\n"),
            "seed.cnl:1:14: the integer 9223372036854775807 has no exact value in a script, which "
            "computes with doubles (at most 2^53 = 9007199254740992 in magnitude)");
  CHECK_HAS(run_error("let n = -9223372036854775807\n"),
            "seed.cnl:1:9: the integer -9223372036854775807 has no exact value in a script");
  CHECK_HAS(run_error("print (range 9223372036854775808)\n"),
            "seed.cnl:1:14: integer literal too large");
  CHECK_HAS(run_error("print (range 1e300)\n"),
            "seed.cnl:1:8: the integer 1e+300 is out of range (at most 9e15 in magnitude)");
  CHECK_HAS(run_error("print (range 2.5)\n"), "seed.cnl:1:8: expected an integer, found 2.5");
  CHECK_HAS(run_error("print (range (-3))\n"), "seed.cnl:1:8: range: -3 values (at least 1)");
  /* 2^53 itself is exact, and too large to allocate: refused when the shape is known */
  CHECK_HAS(run_error("print (range 9007199254740992)\n"),
            "seed.cnl:1:8: the integer 9007199254740992 is out of range (at most 9e15 in "
            "magnitude)");
  CHECK_HAS(run_error("print (range 4000000000000000)\n"),
            "seed.cnl:1:8: \"range\" (#2) of shape |->4000000000000000 is too large: more than "
            "2^40 bytes (axis 0 of size 4000000000000000)");
  /* the largest exact integers still compute */
  BOTH {
    outcome o;
    if (!run(&o, b, "print (!.9007199254740992 - !.9007199254740991)\n")) continue;
    expect(&o, b, 0, NULL, "|->1", VALUES(1), 0);
  }
}

/* log of -1 is NaN: the check stops at y (built on line 2, run by the print on line 4); without
 * it the script prints nan and succeeds. exp(1000) overflows to +Inf, 0/0 is NaN; log(0) in the
 * forward pass of a backprop is -Inf. */
static void test_nan_check(void) {
  static const char *const forward = "let x = [1.0; -1.0]\nlet y = log x\nlet z = y *. 2.0\n"
                                     "print z\n";
  char msg[2048], printed[2048];
  BOTH {
    CHECK_INT(run_checked(forward, "nan", b, msg, sizeof msg, printed, sizeof printed),
              CN_ERR_RUNTIME);
    CHECK_STR(msg, "nan.cnl:2:9: routine 'cnl_1' wrote NaN into \"y\" (#2) at [1], its first "
                   "non-finite value (check \"nan\"); computed by log (the routine ran for line "
                   "4)\nlet y = log x\n        ^");
    CHECK_STR(printed, "");
    CHECK_INT(run_checked(forward, NULL, b, msg, sizeof msg, printed, sizeof printed), CN_OK);
    CHECK_HAS(printed, "nan");
    CHECK_INT(run_checked("print (exp [1.0; 1000.0])\n", "nan", b, msg, sizeof msg, printed,
                          sizeof printed),
              CN_ERR_RUNTIME);
    CHECK_HAS(msg, "nan.cnl:1:8: routine 'cnl_1' wrote +Inf into \"exp\" (#2) at [1]");
    CHECK_INT(run_checked("print ([[0.0; 1.0]] /. [[0.0; 1.0]])\n", "nan", b, msg, sizeof msg,
                          printed, sizeof printed),
              CN_ERR_RUNTIME);
    CHECK_HAS(msg, "wrote NaN into \"div\" (#3) at [0, 0]");
    CHECK_HAS(msg, "computed by div");
    CHECK_INT(run_checked("let w = {w = [1.0; 2.0]}\nlet x = [0.0; 1.0]\n"
                          "let loss = (log (w *. x)) ++ \"i => 0\"\nbackprop loss\n",
                          "nan", b, msg, sizeof msg, printed, sizeof printed),
              CN_ERR_RUNTIME);
    CHECK_HAS(msg, "nan.cnl:3:13: routine 'cnl_1' wrote -Inf into \"log\" (#5) at [0]");
    CHECK_HAS(msg, "(the routine ran for line 4)");
    /* in a let%tile body, at the operation that computed the value (not the body's first line);
     * an elementwise einsum reduces nothing, so no accumulation is named */
    CHECK_INT(run_checked("let%tile f I =\n"
                          "  I.bind_dims(N)\n"
                          "  O = TensorOutput(N)\n"
                          "  O[i] += I[i] * I[i]\n"
                          "  return log(O - 1)\n"
                          "print f [2.0; 0.5]\n",
                          "nan", b, msg, sizeof msg, printed, sizeof printed),
              CN_ERR_RUNTIME);
    CHECK_STR(msg, "nan.cnl:5:10: routine 'cnl_1' wrote NaN into \"f\" (#5) at [1], its first "
                   "non-finite value (check \"nan\"); computed by log (the routine ran for line "
                   "6)\n  return log(O - 1)\n         ^");
    CHECK_INT(run_checked("let%tile g I = I.bind_dims(N); O = TensorOutput(N); O[i] += I[i]; "
                          "return O / O\nprint g [1.0; 0.0]\n",
                          "nan", b, msg, sizeof msg, printed, sizeof printed),
              CN_ERR_RUNTIME);
    CHECK_HAS(msg, "nan.cnl:1:76: routine 'cnl_1' wrote NaN into \"g\" (#3) at [1], its first "
                   "non-finite value (check \"nan\"); computed by div (the routine ran for line "
                   "2)");
    /* a %cd assignment: its operator and operation, at the assignment */
    CHECK_INT(run_checked("let x = [1.0; -1.0]\nlet y = [0.0; 0.0]\nlet%cd r =\n  y =: log x\n"
                          "run r\n",
                          "nan", b, msg, sizeof msg, printed, sizeof printed),
              CN_ERR_RUNTIME);
    CHECK_STR(msg, "nan.cnl:4:5: routine 'cnl_1' wrote NaN into \"y\" (#2) at [1], its first "
                   "non-finite value (check \"nan\"); written by =: log (the routine ran for "
                   "line 5)\n  y =: log x\n    ^");
    CHECK_INT(run_checked("let x = [1.0; 0.0]\nlet%cd r =\n  \"z\" =: x;\n  z =/ x ~logic:\".\"\n"
                          "run r\n",
                          "nan", b, msg, sizeof msg, printed, sizeof printed),
              CN_ERR_RUNTIME);
    CHECK_HAS(msg, "nan.cnl:4:5: routine 'cnl_1' wrote NaN into \"z_x\" (#2) at [1], its first "
                   "non-finite value (check \"nan\"); written by =/ id, the last of the %cd "
                   "assignments writing it (the routine ran for line 5)");
    /* a max-reduction's padding margins hold -inf (its neutral element): not reported */
    CHECK_INT(run_checked("let x = [1.0; 2.0; 3.0; 4.0]\n"
                          "print (x @^+ \"o=+k; k => o\" [0.0; 0.0; 0.0])\n",
                          "nan", b, msg, sizeof msg, printed, sizeof printed),
              CN_OK);
    CHECK_HAS(printed, "|->4\n2  3  4  4\n");
  }
  /* the environment sets the default; the option overrides it; bad values are refused */
  setenv("CANNL_CHECK", "nan", 1);
  CHECK_INT(run_checked(forward, NULL, 0, msg, sizeof msg, printed, sizeof printed),
            CN_ERR_RUNTIME);
  CHECK_INT(run_checked(forward, "off", 0, msg, sizeof msg, printed, sizeof printed), CN_OK);
  setenv("CANNL_CHECK", "nans", 1);
  CHECK_INT(run_checked(forward, NULL, 0, msg, sizeof msg, printed, sizeof printed),
            CN_ERR_INVALID);
  CHECK_HAS(msg, "CANNL_CHECK: unknown value 'nans', did you mean 'nan'? (known: nan, off)");
  unsetenv("CANNL_CHECK");
  CHECK_INT(run_checked(forward, "always", 0, msg, sizeof msg, printed, sizeof printed),
            CN_ERR_INVALID);
  CHECK_STR(msg, "option check: unknown value 'always' (known: nan, off)");
}

/* Through the C API: the routine's message names the node it wrote (its own id) and the cell. */
static void test_nan_check_api(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_dims d3 = {CN_AXES_NONE, CN_AXES_NONE, {1, (int64_t[]){3}, NULL}};
  cn_tensor *x = cn_tensor_data(g, "x", &d3, (double[]){4, 0, 9}, 3);
  cn_tensor *r = cn_tensor_apply(g, CN_OP_RECIP, 1, &x);
  CHECK(cn_ctx_set_option(ctx, "check", "nan") == CN_OK);
  cn_asgn *fwd = r ? cn_graph_forward(g, r) : NULL;
  cn_routine *routine = fwd ? cn_routine_compile(ctx, fwd, CN_BACKEND_INTERP, "recip") : NULL;
  CHECK_MSG(routine != NULL, "%s", cn_ctx_error(ctx));
  if (routine) {
    CHECK_INT(cn_routine_run(routine), CN_ERR_RUNTIME);
    CHECK_STR(cn_ctx_error(ctx), "routine 'recip' wrote +Inf into 'recip' (#2) at [1], its first "
                                 "non-finite value (check \"nan\")");
    /* the values are there to inspect */
    double v[3];
    CHECK(cn_node_get_values(cn_tensor_value(r), false, v, 3) == CN_OK);
    CHECK_NEAR(v[0], 0.25, 0);
    CHECK(isinf(v[1]) && v[1] > 0);
    CHECK(cn_ctx_set_option(ctx, "check", "off") == CN_OK);
    cn_ctx_clear_error(ctx);
    CHECK_INT(cn_routine_run(routine), CN_OK);
  }
  cn_ctx_destroy(ctx);
}

/* 4e11 bytes pass the shape-time limit (2^40) but not malloc under a 4 GiB address space: the
 * failure names the tensor as the script does, its dims and bytes, at the position that built it,
 * with the line that needed it; the status stays CN_ERR_NOMEM. */
static void test_buffer_too_large(void) {
  char msg[2048], printed[2048];
  struct rlimit saved;
  BOTH {
    CHECK(limit_address_space(&saved));
    cn_status st = run_checked("let x = range 100000000000\nprint x\n", NULL, b, msg, sizeof msg,
                               printed, sizeof printed);
    CHECK(restore_address_space(&saved));
    CHECK_INT(st, CN_ERR_NOMEM);
    CHECK_STR(msg, "nan.cnl:1:9: cannot allocate the buffer of \"x\" (#2) [100000000000] "
                   "(400000000000 bytes) (needed by line 2)\nlet x = range 100000000000\n"
                   "        ^");
    CHECK_STR(printed, "");
  }
}

int main(void) {
  test_buffer_too_large();
  test_nan_check();
  test_nan_check_api();
  test_integer_extremes();
  CHECK_DONE();
}
