/* Fidelity items of issue 13: a float after an inline declaration string is its initial value,
 * script integers spliced into einsum strides, "…" for "...", `/` needing ~logic in %cd, and
 * uint4x32 cells printed as their four words. Values computed by hand. */
#include "notation_check.h"

/* seed 002: "When the declaration is followed by a literal float, the float provides the initial
 * value": every cell of w is 0.25 and its shape (input 3) comes from w * x; y = 0.25 * (1+2+3);
 * v = 0.5 pointwise times [2; 4]. An integer after the string stays an output dimension (c has 2
 * output cells; no backprop ran, so its gradient is zero). */
static void test_declaration_float(void) {
  BOTH {
    outcome o;
    if (!run(&o, b,
             "let x = [1.0; 2.0; 3.0]\n"
             "let y = \"w\" 0.25 * x\n"
             "print w\nprint y\n"
             "let z = \"v\" 0.5 *. [2.0; 4.0]\n"
             "print v\nprint z\n"
             "let _ = \"c\" 2 + [1.0; 2.0]\nprint c.grad\n"))
      continue;
    expect(&o, b, 0, "w", "|3->", VALUES(0.25, 0.25, 0.25), 0);
    expect(&o, b, 1, "y", "|->", VALUES(1.5), 0);
    expect(&o, b, 2, "v", "|->2", VALUES(0.5, 0.5), 0);
    expect(&o, b, 3, "z", "|->2", VALUES(1.0, 2.0), 0);
    expect(&o, b, 4, "c.grad", "|->2", VALUES(0, 0), 0);
  }
}

/* x = 1..5, w = [1; 10]: with stride 3, out[o] = x[3o] + 10 x[3o+1] = 1 + 20, 4 + 50 (the valid
 * input length 3(2-1) + 1 + (2-1) = 5). With a dilation variable d = 2 and stride 1:
 * out[o] = x[o] + 10 x[o+2] = 31, 42, 53. */
static void test_spliced_strides(void) {
  BOTH {
    outcome o;
    if (!run(&o, b,
             "let stride = 3\nlet d = 2\n"
             "let x = [1.0; 2.0; 3.0; 4.0; 5.0]\nlet w = [1.0; 10.0]\n"
             "print (x +* \"stride*o<+k; k => o\" w)\n"
             "print (x +* \"o<+d*k; k => o\" w)\n"))
      continue;
    expect(&o, b, 0, NULL, "|->2", VALUES(21, 54), 0);
    expect(&o, b, 1, NULL, "|->3", VALUES(31, 42, 53), 0);
  }
  CHECK_HAS(run_error("let stride = 2.5\nlet x = [1.0; 2.0; 3.0]\n"
                      "let y = x +* \"stride*o<+k; k => o\" [1.0]\n"),
            "seed.cnl:3:14: the stride or dilation 'stride' at column 1 of the einsum spec is a "
            "float, not an integer");
  CHECK_HAS(run_error("let x = [1.0; 2.0; 3.0]\nlet y = x +* \"s*o<+k; k => o\" [1.0]\n"),
            "seed.cnl:2:14: einsum \"s*o<+k; k => o\": the stride 's' at column 1 is not bound");
}

/* "…" (U+2026) is "...": summing the last axis of [[1;2];[3;4]] gives 3, 7; the first, 4, 6. */
static void test_unicode_ellipsis(void) {
  BOTH {
    outcome o;
    if (!run(&o, b,
             "let x = [[1.0; 2.0]; [3.0; 4.0]]\n"
             "print (x ++ \"\xE2\x80\xA6i => \xE2\x80\xA6\")\n"
             "print (einsum1 \"\xE2\x80\xA6i => i\" x)\n"
             "let%cd u = {s} =:+ x ~logic:\"\xE2\x80\xA6i => \xE2\x80\xA6\"\n"
             "run u\nprint s\n"))
      continue;
    expect(&o, b, 0, NULL, "|->2", VALUES(3, 7), 0);
    expect(&o, b, 1, NULL, "|->2", VALUES(4, 6), 0);
    expect(&o, b, 2, "s_x", "|->2", VALUES(3, 7), 0);
  }
}

/* seed 002: `/`, like `*`, has no default projection logic in %cd. */
static void test_cd_div_needs_logic(void) {
  CHECK_HAS(run_error("let a = [2.0]\nlet%cd u = a =: a / a\n"),
            "seed.cnl:2:14: '/' in an assignment needs ~logic (\".\" pointwise or a spec)");
  BOTH {
    outcome o;
    if (!run(&o, b,
             "let a = [6.0; 8.0]\nlet%cd u = {q} =: a / [2.0; 4.0] ~logic:\".\"\n"
             "run u\nprint q\n"))
      continue;
    expect(&o, b, 0, "q_a", "|->2", VALUES(3, 2), 0);
  }
}

/* embed_self_id of the script's first tensor (#1) is the word {1, 0, 0, 0}. */
static void test_uint4x32_words(void) {
  CHECK_HAS(run_text("let a = embed_self_id ()\nprint a\n"),
            "\"a\" (#1) |->\n  [0x00000001 0x00000000 0x00000000 0x00000000]\n");
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  cn_notation_options opts = {.backend = CN_BACKEND_C, .json = true, .out = out};
  CHECK(cn_notation_run(g, "seed.cnl", "let a = embed_self_id ()\nprint a\n", &opts) == CN_OK);
  fclose(out);
  CHECK_HAS(buf, "\"values\": [[1, 0, 0, 0]]}");
  free(buf);
  cn_ctx_destroy(ctx);
}

/* 10^12 cells of 4 bytes (4 * 10^12 > 2^40), and a 10^6 x 10^6 result of 4 * 10^12
 * bytes: refused when the shapes are known, at the statement, naming the tensor and its shape. */
static void test_absurd_sizes(void) {
  CHECK_HAS(run_error("let x = 1\nprint (range 1000000000000)\n"),
            "seed.cnl:2:8: \"range\" (#2) of shape |->1000000000000 is too large: more than 2^40 "
            "bytes (axis 0 of size 1000000000000)");
  CHECK_HAS(run_error("let a = range 1000000\nlet b = a +* \"i; j => i->j\" a\nprint b\n"),
            "seed.cnl:2:11: \"b\" (#3) of shape |1000000->1000000 is too large: more than 2^40 "
            "bytes (axis 1 of size 1000000)");
}

int main(void) {
  test_declaration_float();
  test_spliced_strides();
  test_unicode_ellipsis();
  test_cd_div_needs_logic();
  test_uint4x32_words();
  test_absurd_sizes();
  CHECK_DONE();
}
