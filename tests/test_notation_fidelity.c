/* Fidelity items of issue 13: a float after an inline declaration string is its initial value,
 * script integers spliced into einsum strides, "…" for "...", `/` needing ~logic in %cd, and
 * uint4x32 cells printed as their four words, numbers as unit arrays and compose broadcasting,
 * fma's compose-accumulate and flat sums of thousands of terms.
 * Values computed by hand. */
#include "notation_check.h"

/* syntax-extensions-cd-op: "When the declaration is followed by a literal float, the float provides
 * the initial value": every cell of w is 0.25 and its shape (input 3) comes from w * x; y = 0.25 *
 * (1+2+3); v = 0.5 pointwise times [2; 4]. An integer after the string stays an output dimension (c
 * has 2 output cells; no backprop ran, so its gradient is zero). */
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

/* syntax-extensions-cd-op: `/`, like `*`, has no default projection logic in %cd. */
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
            "\"a\" (#1) |->\n[0x00000001 0x00000000 0x00000000 0x00000000]\n");
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

/* syntax-extensions-cd-op: numbers are arrays of one output axis of size 1, a label prefix names
 * that axis, and a number initializer does not fix a parameter's shape; contraction-is-emergent:
 * compose relates its operands by broadcasting. Values by hand:
 *   - ("hey" 7.0 * 'q' 2.0) + 'p' 1.0: hey is the 1x1 matrix q=1 -> p=1, y = 7 * 2 + 1 = 15;
 *   - ({hey = 7.0} * [2; 3]) + [4; 5; 6]: hey is |2->3 of 7s, y = 35 + [4; 5; 6];
 *   - m * !.2.0 with m = [(1, 2); (3, 4); (5, 6)] (|2->3): 2 * row sums = 6, 14, 22, and under
 *     the sum of those m's gradient is 2 in every cell (the number is read at index 0);
 *   - 2.0 alone is |->1; ("u" 3.0 *. 2.0) + 1.0 = 7 (u takes the number's unit axis).
 * A labeled unit does not broadcast: [1.0; 2.0] + 'p' 1.0 is a conflict naming the label. */
static void test_numbers_and_compose(void) {
  BOTH {
    outcome o;
    if (!run(&o, b,
             "let%op y = (\"hey\" 7.0 * 'q' 2.0) + 'p' 1.0\nprint y\nprint hey\n"
             "let y2 = ({hey2 = 7.0} * [2; 3]) + [4; 5; 6]\nprint y2\nprint hey2\n"
             "let m = {m = [(1, 2); (3, 4); (5, 6)]}\nlet r = m * !.2.0\n"
             "backprop (r ++ \"i => 0\")\nprint r\nprint m.grad\n"
             "print 2.0\nlet%op u2 = (\"u\" 3.0 *. 2.0) + 1.0\nprint u2\n"))
      continue;
    expect(&o, b, 0, "y", "|->1", VALUES(15), 0);
    expect(&o, b, 1, "hey", "|1->1", VALUES(7), 0);
    expect(&o, b, 2, "y2", "|->3", VALUES(39, 40, 41), 0);
    expect(&o, b, 3, "hey2", "|2->3", VALUES(7, 7, 7, 7, 7, 7), 0);
    expect(&o, b, 4, "r", "|->3", VALUES(6, 14, 22), 0);
    expect(&o, b, 5, "m.grad", "|2->3", VALUES(2, 2, 2, 2, 2, 2), 0);
    expect(&o, b, 6, "2", "|->1", VALUES(2), 0);
    expect(&o, b, 7, "u2", "|->1", VALUES(7), 0);
  }
  CHECK_HAS(run_error("let z = [1.0; 2.0] + 'p' 1.0\n"),
            "seed.cnl:1:20: shape conflict in pointwise (operation #3 computing \"add\" (#3)): "
            "operands that cannot broadcast together: output axis 0 of \"literal\" (#2) has size "
            "2 and output axis 'p' of \"p\" (#1) size 1 (axes align from the right; a labeled "
            "axis of size 1 does not broadcast)");
  CHECK_HAS(run_text("let%op y = (\"hey\" 7.0 * 'q' 2.0) + 'p' 1.0\nprint hey\n"),
            "\"hey\" (#2) |1:q->1:p\n");
}

/* syntax-extensions-cd-op's ternary table: fma's default projection is compose-accumulate. With
 * a = [(1, 2); (3, 4)] (|2->2), b = [5; 6], c0 = [10; 20], c =:+ fma a b c0 ~logic:"@" sums
 * a[i,k] * b[k] + c0[i] over k: c = [1*5 + 2*6 + 2*10; 3*5 + 4*6 + 2*20] = [37; 79]; without
 * ~logic the same (the table's default); ~logic:"." is pointwise, the result |2->2:
 * [[1*5+10, 2*5+10]; [3*6+20, 4*6+20]]. */
static void test_fma_compose_accumulate(void) {
  BOTH {
    outcome o;
    if (!run(&o, b,
             "let a = [(1, 2); (3, 4)]\nlet b = [5.0; 6.0]\nlet c0 = [10.0; 20.0]\n"
             "let%cd u = {c} =:+ fma a b c0 ~logic:\"@\"; {d} =:+ fma a b c0; "
             "{e} =: fma a b c0 ~logic:\".\"\n"
             "run u\nprint c\nprint d\nprint e\n"))
      continue;
    expect(&o, b, 0, "c_a", "|->2", VALUES(37, 79), 0);
    expect(&o, b, 1, "d_a", "|->2", VALUES(37, 79), 0);
    expect(&o, b, 2, "e_a", "|2->2", VALUES(15, 20, 38, 44), 0);
  }
  CHECK_HAS(run_error("let a = [(1, 2); (3, 4)]\nlet%cd u = {c} =:+ fma a a a ~logic:\"T\"\n"),
            "seed.cnl:2:16: shape logic transpose takes 1 operand, got 3");
}

/* "let a = [1.0; 2.0]\nprint (a OP a OP a ...)\n" with n terms, the operators alternating
 * between ops[0] and ops[1] (malloc'd; NULL when out of memory). */
static char *chain_script(int n, const char *const ops[2]) {
  size_t cap = 64 + (size_t)n * 4;
  char *s = malloc(cap);
  if (!s) return NULL;
  size_t len = (size_t)snprintf(s, cap, "let a = [1.0; 2.0]\nprint (a");
  for (int i = 1; i < n; i++) len += (size_t)snprintf(s + len, cap - len, " %s a", ops[i % 2 == 0]);
  snprintf(s + len, cap - len, ")\n");
  return s;
}

/* A flat sum is no deeper than its terms: `a + a + ... + a` over 201 and 5000 terms of
 * a = [1; 2] gives 201 a and 5000 a; a chain alternating + and - over 2001 terms (the first +)
 * leaves a. */
static void test_flat_sum(void) {
  static const char *const plus[2] = {"+", "+"}, *const plus_minus[2] = {"+", "-"};
  char *s201 = chain_script(201, plus), *s2001 = chain_script(2001, plus_minus);
  char *s5000 = chain_script(5000, plus);
  CHECK(s201 && s2001 && s5000);
  BOTH {
    outcome o;
    if (s201 && run(&o, b, s201)) expect(&o, b, 0, NULL, "|->2", VALUES(201, 402), 0);
    if (s2001 && run(&o, b, s2001)) expect(&o, b, 0, NULL, "|->2", VALUES(1, 2), 0);
  }
  outcome o;
  if (s5000 && run(&o, 0, s5000)) expect(&o, 0, 0, NULL, "|->2", VALUES(5000, 10000), 0);
  free(s201);
  free(s2001);
  free(s5000);
}

int main(void) {
  test_flat_sum();
  test_fma_compose_accumulate();
  test_numbers_and_compose();
  test_declaration_float();
  test_spliced_strides();
  test_unicode_ellipsis();
  test_cd_div_needs_logic();
  test_uint4x32_words();
  test_absurd_sizes();
  CHECK_DONE();
}
