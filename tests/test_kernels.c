/* The kernel view (src/backend/kernels.c) on loop-IR procedures built by hand, in the OpenCL C
 * dialect: the exact kernels of a matmul whose two outer loops are parallel (a 2-D grid, the
 * reduction sequential inside the work item), of a padded, strided convolution read with a free
 * symbol (the kernel ABI's trailing 64-bit argument), and of a parallel loop with affine bounds
 * (the bounds as a condition inside the work item); the kernel table (names, work items, buffer
 * arguments); a GEMM statement (its clear kernel when the plan starts from zero, its store fused
 * when the plan says fma), and one inside a parallel loop (one work item, the clear a loop);
 * consecutive statements of one work item each as one kernel. Needs
 * no OpenCL device: tests/test_opencl.c runs such programs. */
#include "backend/kernels.h"
#include "loops_check.h"

/* The program's kernels, from the first one on (the prelude before it is builtins.h's). */
static const char *kernels_text(const cn_kernel_program *p) {
  const char *at = p->source ? strstr(p->source, "__kernel void ") : NULL;
  CHECK(at != NULL);
  return at ? at : "";
}

/* c[3,5] =: a[3,4] * b[4,5] (loops_check.h matmul_body), both nests' two outer loops parallel;
 * with `gemm`, the accumulation is a CN_LL_GEMM statement starting from zero, fused. */
static cn_ll_proc *matmul(cn_ctx *ctx, bool gemm) {
  int64_t a_dims[2] = {3, 4}, b_dims[2] = {4, 5}, c_dims[2] = {3, 5};
  cn_node *a = cn_node_create(ctx, "a", CN_PREC_SINGLE, 2, a_dims);
  cn_node *b = cn_node_create(ctx, "b", CN_PREC_SINGLE, 2, b_dims);
  cn_node *c = cn_node_create(ctx, "c", CN_PREC_SINGLE, 2, c_dims);
  CHECK(a && b && c);
  cn_symbol i = cn_symbol_create(ctx, "i", 3), k = cn_symbol_create(ctx, "k", 5),
            j = cn_symbol_create(ctx, "j", 4);
  cn_ll_stmt *body = matmul_body(ctx, "c =:+ a * b", i, 3, k, 5, j, 4);
  CHECK(body != NULL);
  for (int s = 1; body && s <= 2; s++) {
    cn_ll_stmt *outer = body->u.seq.items[s];
    cn_lb_marks(outer, CN_LL_PARALLEL);
    cn_lb_marks(outer->u.loop.body, CN_LL_PARALLEL);
  }
  if (body && gemm) {
    cn_ll_gemm plan = {.c = 2,
                       .x = 0,
                       .y = 1,
                       .depth = 3,
                       .role = {CN_GEMM_M, CN_GEMM_N, CN_GEMM_K},
                       .c_zero = true,
                       .fma = true};
    body = cn_lb_seq(ctx, 1, cn_lb_gemm(ctx, body->u.seq.items[2], &plan));
  }
  cn_ll_param params[3] = {{a, false}, {b, false}, {c, false}};
  return cn_lb_proc(ctx, "matmul", body, 3, params, 0, NULL);
}

static const char matmul_golden[] =
    "__kernel void matmul_k0(__global float *restrict c_3) {\n"
    "  const int64_t cn_id = (long)get_global_id(0);\n"
    "  if (cn_id >= 15) return;\n"
    "  const int64_t k = cn_id % 5;\n"
    "  const int64_t i = cn_id / 5;\n"
    "  c_3[5 * i + k] = 0.0f;\n"
    "}\n"
    "\n"
    "__kernel void matmul_k1(__global const float *restrict a_1, __global const float *restrict "
    "b_2, __global float *restrict c_3) {\n"
    "  const int64_t cn_id = (long)get_global_id(0);\n"
    "  if (cn_id >= 15) return;\n"
    "  const int64_t k = cn_id % 5;\n"
    "  const int64_t i = cn_id / 5;\n"
    "  for (int64_t j = 0; j < 4; ++j) {\n"
    "    c_3[5 * i + k] = (c_3[5 * i + k] + (a_1[4 * i + j] * b_2[5 * j + k]));\n"
    "  }\n"
    "}\n"
    "\n";

static void test_matmul(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_kernel_program p;
  CHECK_INT(cn_kernel_program_make(ctx, matmul(ctx, false), &cn_cgen_opencl, NULL, &p), CN_OK);
  CHECK_STR(kernels_text(&p), matmul_golden);
  CHECK_INT(p.n_kernels, 2);
  CHECK_STR(p.kernels[0].name, "matmul_k0");
  CHECK_INT(p.kernels[0].work_items, 15);
  CHECK_INT(p.kernels[0].n_args, 1);
  CHECK_INT(p.kernels[0].params[0], 2);
  CHECK_STR(p.kernels[1].name, "matmul_k1");
  CHECK_INT(p.kernels[1].n_args, 3);
  for (int a = 0; a < 3; a++) CHECK_INT(p.kernels[1].params[a], a);
  /* the prelude: OpenCL's names for builtins.h, and no C library header */
  CHECK(strstr(p.source, "#pragma OPENCL FP_CONTRACT OFF\n") != NULL);
  CHECK(strstr(p.source, "typedef long int64_t;\n") != NULL);
  CHECK(strstr(p.source, "#include") == NULL);
  cn_kernel_program_free(&p);
  cn_ctx_destroy(ctx);
}

/* The padded, strided conv read of loops_check.h, its o loops parallel: the prefill and the
 * accumulation each a kernel over o, the free symbol b the kernels' last argument (a long), the
 * padding in the offsets. */
static void test_conv(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *x, *w, *out;
  cn_ll_proc *proc = padded_conv_proc(ctx, CN_LL_PARALLEL, &x, &w, &out);
  cn_kernel_program p;
  CHECK_INT(cn_kernel_program_make(ctx, proc, &cn_cgen_opencl, NULL, &p), CN_OK);
  CHECK_STR(kernels_text(&p),
            "__kernel void conv_k0(__global double *restrict out_3, int64_t b) {\n"
            "  const int64_t cn_id = (long)get_global_id(0);\n"
            "  if (cn_id >= 3) return;\n"
            "  const int64_t o = cn_id;\n"
            "  out_3[o] = 0.0;\n"
            "}\n"
            "\n"
            "__kernel void conv_k1(__global const float *restrict x_1, __global const float "
            "*restrict w_2, __global double *restrict out_3, int64_t b) {\n"
            "  const int64_t cn_id = (long)get_global_id(0);\n"
            "  if (cn_id >= 3) return;\n"
            "  const int64_t o = cn_id;\n"
            "  for (int64_t k = 0; k < 3; ++k) {\n"
            "    out_3[o] = (out_3[o] + (((double)w_2[k]) * ((double)x_1[8 * b + 2 * o + k + "
            "1])));\n"
            "  }\n"
            "}\n"
            "\n");
  CHECK_INT(p.n_kernels, 2);
  CHECK_INT(p.kernels[0].n_args, 1); /* out only: the free symbol follows the buffers */
  CHECK_INT(p.kernels[1].n_args, 3);
  cn_kernel_program_free(&p);
  cn_ctx_destroy(ctx);
}

/* A parallel loop from 1 with an upper bound min(7, n) (n a free symbol), over an inner loop whose
 * bounds depend on it: the grid is the box 1..7 (6 work items), the bound a condition, the inner
 * loop as written. */
static void test_bounds(void) {
  cn_ctx *ctx = cn_ctx_create();
  int64_t w_dims[1] = {7}, out_dims[1] = {7};
  cn_node *w = cn_node_create(ctx, "w", CN_PREC_DOUBLE, 1, w_dims);
  cn_node *out = cn_node_create(ctx, "out", CN_PREC_DOUBLE, 1, out_dims);
  CHECK(w && out);
  cn_symbol i = cn_symbol_create(ctx, "i", 0), k = cn_symbol_create(ctx, "k", 0),
            n = cn_symbol_create(ctx, "n", 0);
  cn_index *out_i = cn_lb_indices(ctx, 1, cn_index_iter(i));
  cn_ll_stmt *add =
      cn_lb_accum(ctx, 1, CN_PREC_DOUBLE, out_i, CN_OP_ADD,
                  cn_lb_get(ctx, 0, CN_PREC_DOUBLE, cn_lb_indices(ctx, 1, affine1(k, 1, 3))));
  const cn_ll_bound lower[2] = {{cn_index_fixed(-3), 1}, {affine1(i, 1, -5), 2}};
  const cn_ll_bound upper[1] = {{affine1(i, 1, 1), 2}};
  cn_ll_stmt *inner = cn_lb_bounds(ctx, cn_lb_loop(ctx, k, -3, 4, add), 2, lower, 1, upper);
  const cn_ll_bound outer_upper[2] = {{cn_index_fixed(7), 1}, {cn_index_iter(n), 1}};
  cn_ll_stmt *outer = cn_lb_bounds(
      ctx, cn_lb_marks(cn_lb_loop(ctx, i, 1, 7, inner), CN_LL_PARALLEL), 0, NULL, 2, outer_upper);
  cn_ll_param params[2] = {{w, false}, {out, false}};
  cn_ll_proc *proc = cn_lb_proc(ctx, "bounded", outer, 2, params, 1, &n);
  cn_kernel_program p;
  CHECK_INT(cn_kernel_program_make(ctx, proc, &cn_cgen_opencl, NULL, &p), CN_OK);
  CHECK_STR(kernels_text(&p),
            "__kernel void bounded_k0(__global const double *restrict w_1, __global double "
            "*restrict out_2, int64_t n) {\n"
            "  const int64_t cn_id = (long)get_global_id(0);\n"
            "  if (cn_id >= 6) return;\n"
            "  const int64_t i = 1 + cn_id;\n"
            "  if (1 <= i && i < cn_min_i64(7, n)) {\n"
            "    for (int64_t k = cn_max_i64(-3, cn_ceil_div_i64(i - 5, 2)); k < cn_ceil_div_i64(i "
            "+ 1, 2); ++k) {\n"
            "      out_2[i] = (out_2[i] + w_1[k + 3]);\n"
            "    }\n"
            "  }\n"
            "}\n"
            "\n");
  CHECK_INT(p.kernels[0].work_items, 6);
  /* the prelude carries the helpers the bounds call */
  CHECK(strstr(p.source, "static inline int64_t cn_min_i64(") != NULL);
  CHECK(strstr(p.source, "static inline int64_t cn_ceil_div_i64(") != NULL);
  cn_kernel_program_free(&p);
  cn_ctx_destroy(ctx);
}

/* The accumulation as a CN_LL_GEMM starting from zero with fma: a kernel clearing c (its whole
 * buffer), then the nest with its store one fma. */
static void test_gemm(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_kernel_program p;
  CHECK_INT(cn_kernel_program_make(ctx, matmul(ctx, true), &cn_cgen_opencl, NULL, &p), CN_OK);
  CHECK_STR(kernels_text(&p),
            "__kernel void matmul_k0(__global float *restrict c_3) {\n"
            "  const int64_t cn_id = (long)get_global_id(0);\n"
            "  if (cn_id >= 15) return;\n"
            "  c_3[cn_id] = 0;\n"
            "}\n"
            "\n"
            "__kernel void matmul_k1(__global const float *restrict a_1, __global const float "
            "*restrict b_2, __global float *restrict c_3) {\n"
            "  const int64_t cn_id = (long)get_global_id(0);\n"
            "  if (cn_id >= 15) return;\n"
            "  const int64_t k = cn_id % 5;\n"
            "  const int64_t i = cn_id / 5;\n"
            "  for (int64_t j = 0; j < 4; ++j) {\n"
            "    c_3[5 * i + k] = fma(a_1[4 * i + j], b_2[5 * j + k], c_3[5 * i + k]);\n"
            "  }\n"
            "}\n"
            "\n");
  cn_kernel_program_free(&p);
  cn_ctx_destroy(ctx);
}

/* The same GEMM inside a parallel loop t: the statement stays one work item (its clear is one
 * loop over c, which only one work item may run), the clear and the fused nest inside t. */
static void test_nested_gemm(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_ll_proc *inner = matmul(ctx, true);
  cn_symbol t = cn_symbol_create(ctx, "t", 0);
  cn_ll_stmt *loop =
      cn_lb_marks(cn_lb_loop(ctx, t, 0, 2, inner->body->u.seq.items[0]), CN_LL_PARALLEL);
  cn_ll_proc *proc = cn_lb_proc(ctx, "nested", loop, 3, inner->params, 0, NULL);
  cn_kernel_program p;
  CHECK_INT(cn_kernel_program_make(ctx, proc, &cn_cgen_opencl, NULL, &p), CN_OK);
  CHECK_STR(kernels_text(&p),
            "__kernel void nested_k0(__global const float *restrict a_1, __global const float "
            "*restrict b_2, __global float *restrict c_3) {\n"
            "  const int64_t cn_id = (long)get_global_id(0);\n"
            "  if (cn_id >= 1) return;\n"
            "  for (int64_t t = 0; t < 2; ++t) {\n"
            "    for (int64_t cn_cell = 0; cn_cell < 15; ++cn_cell) c_3[cn_cell] = 0;\n"
            "    for (int64_t i = 0; i < 3; ++i) {\n"
            "      for (int64_t k = 0; k < 5; ++k) {\n"
            "        for (int64_t j = 0; j < 4; ++j) {\n"
            "          c_3[5 * i + k] = fma(a_1[4 * i + j], b_2[5 * j + k], c_3[5 * i + k]);\n"
            "        }\n"
            "      }\n"
            "    }\n"
            "  }\n"
            "}\n"
            "\n");
  CHECK_INT(p.n_kernels, 1);
  CHECK_INT(p.kernels[0].work_items, 1);
  cn_kernel_program_free(&p);
  cn_ctx_destroy(ctx);
}

/* Consecutive statements of one work item each (no parallel loop at their top) are one kernel
 * running them in order: x[0] := 1; y[0] := x[0] + 2 | the grid z[i] := y[0] * 0.5 (4 items) |
 * x[0] := z[1]; the sequential loop w[i] := x[0] + w[i] — three kernels, not five. */
static void test_sequence(void) {
  cn_ctx *ctx = cn_ctx_create();
  const int64_t one = 1, four = 4;
  cn_node *nodes[4] = {cn_node_create(ctx, "x", CN_PREC_SINGLE, 1, &one),
                       cn_node_create(ctx, "y", CN_PREC_SINGLE, 1, &one),
                       cn_node_create(ctx, "z", CN_PREC_SINGLE, 1, &four),
                       cn_node_create(ctx, "w", CN_PREC_SINGLE, 1, &four)};
  const cn_prec f = CN_PREC_SINGLE;
  cn_symbol i = cn_symbol_create(ctx, "i", 4), j = cn_symbol_create(ctx, "j", 4);
  cn_index *at0 = cn_lb_indices(ctx, 1, cn_index_fixed(0));
  cn_ll_stmt *stmts[5] = {
      cn_lb_set(ctx, 0, at0, cn_lb_num(ctx, f, 1)),
      cn_lb_set(ctx, 1, at0,
                cn_lb_op(ctx, CN_OP_ADD, f, cn_lb_get(ctx, 0, f, at0), cn_lb_num(ctx, f, 2), NULL)),
      cn_lb_marks(cn_lb_loop(ctx, i, 0, 4,
                             cn_lb_set(ctx, 2, cn_lb_indices(ctx, 1, cn_index_iter(i)),
                                       cn_lb_op(ctx, CN_OP_MUL, f, cn_lb_get(ctx, 1, f, at0),
                                                cn_lb_num(ctx, f, 0.5), NULL))),
                  CN_LL_PARALLEL),
      cn_lb_set(ctx, 0, at0, cn_lb_get(ctx, 2, f, cn_lb_indices(ctx, 1, cn_index_fixed(1)))),
      cn_lb_loop(ctx, j, 0, 4,
                 cn_lb_set(ctx, 3, cn_lb_indices(ctx, 1, cn_index_iter(j)),
                           cn_lb_op(ctx, CN_OP_ADD, f, cn_lb_get(ctx, 0, f, at0),
                                    cn_lb_get(ctx, 3, f, cn_lb_indices(ctx, 1, cn_index_iter(j))),
                                    NULL)))};
  cn_ll_param params[4] = {
      {nodes[0], false}, {nodes[1], false}, {nodes[2], false}, {nodes[3], false}};
  cn_ll_proc *proc = cn_lb_proc(ctx, "seq", cn_lb_seq_array(ctx, 5, stmts), 4, params, 0, NULL);
  cn_kernel_program p;
  CHECK_INT(cn_kernel_program_make(ctx, proc, &cn_cgen_opencl, NULL, &p), CN_OK);
  CHECK_INT(p.n_kernels, 3);
  CHECK_INT(p.kernels[0].work_items, 1);
  CHECK_INT(p.kernels[1].work_items, 4);
  CHECK_INT(p.kernels[2].work_items, 1);
  CHECK_INT(p.kernels[0].n_args, 2); /* x and y */
  CHECK_INT(p.kernels[2].n_args, 3); /* x, z and w */
  CHECK_STR(kernels_text(&p),
            "__kernel void seq_k0(__global float *restrict x_1, __global float *restrict y_2) {\n"
            "  const int64_t cn_id = (long)get_global_id(0);\n"
            "  if (cn_id >= 1) return;\n"
            "  x_1[0] = 1.0f;\n"
            "  y_2[0] = (x_1[0] + 2.0f);\n"
            "}\n"
            "\n"
            "__kernel void seq_k1(__global const float *restrict y_2, __global float *restrict "
            "z_3) {\n"
            "  const int64_t cn_id = (long)get_global_id(0);\n"
            "  if (cn_id >= 4) return;\n"
            "  const int64_t i = cn_id;\n"
            "  z_3[i] = (y_2[0] * 0.5f);\n"
            "}\n"
            "\n"
            "__kernel void seq_k2(__global float *restrict x_1, __global const float *restrict "
            "z_3, __global float *restrict w_4) {\n"
            "  const int64_t cn_id = (long)get_global_id(0);\n"
            "  if (cn_id >= 1) return;\n"
            "  x_1[0] = z_3[1];\n"
            "  for (int64_t j = 0; j < 4; ++j) {\n"
            "    w_4[j] = (x_1[0] + w_4[j]);\n"
            "  }\n"
            "}\n"
            "\n");
  cn_kernel_program_free(&p);
  cn_ctx_destroy(ctx);
}

int main(void) {
  test_matmul();
  test_conv();
  test_bounds();
  test_gemm();
  test_nested_gemm();
  test_sequence();
  CHECK_DONE();
}
