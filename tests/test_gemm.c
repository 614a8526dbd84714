/* Recognition of GEMM-class nests (issue 17, src/sched/gemm.c) on nests built by hand with the
 * cn_lb_* constructors: the groups (M, N, K, batch) of every loop for a matmul, transposed
 * operands, a batched attention product `b h q d; b h k d => b h q k`, a matmul's input gradient
 * (slots permuted), the gradients of the attention product, a strided, dilated, padded
 * convolution (implicit GEMM: K = window x input channels) and its weight gradient, and the nests
 * that are not GEMM-class: a max accumulation, a product of three operands, a product with a
 * constant, a broadcast operand (an output loop no operand walks), the convolution's input gradient
 * (several points per output cell) and an interleave (no accumulation). */
#include "loops_check.h"
#include "sched/sched.h"

#define MAX_LOOPS 6

/* for syms[0] .. syms[n-1] (extents ext): c[ci] := c[ci] accum value; returns the nest read
 * from it (found checked). */
typedef struct {
  cn_ll_proc *proc;
  cn_sched_nest nest;
} built;

static built nest_of(cn_ctx *ctx, int n, const cn_symbol *syms, const int64_t *ext,
                     cn_ll_stmt *store, int n_params, cn_node *const *nodes) {
  cn_ll_stmt *body = store;
  for (int k = n - 1; k >= 0; k--) body = cn_lb_loop(ctx, syms[k], 0, ext[k], body);
  cn_ll_param params[4];
  for (int k = 0; k < n_params; k++) params[k] = (cn_ll_param){nodes[k], false};
  built b = {cn_lb_proc(ctx, "nest", body, n_params, params, 0, NULL), {0}};
  CHECK(b.proc != NULL);
  if (!b.proc) return b;
  bool found = false;
  CHECK_INT(cn_sched_nest_read(ctx, &b.proc->body, &b.nest, &found), CN_OK);
  CHECK(found);
  return b;
}

static cn_ll_expr *get(cn_ctx *ctx, int param, cn_index *idx) {
  return cn_lb_get(ctx, param, CN_PREC_SINGLE, idx);
}

static cn_ll_expr *product(cn_ctx *ctx, cn_ll_expr *x, cn_ll_expr *y) {
  return cn_lb_op(ctx, CN_OP_MUL, CN_PREC_SINGLE, x, y, NULL);
}

/* The roles, one letter per loop (M, N, K, B), or "-" when the nest is not GEMM-class. */
static const char *roles(const built *b, int *x, int *y) {
  static char text[MAX_LOOPS + 1];
  cn_sched_gemm g;
  if (!b->proc || !cn_sched_gemm_of(b->proc, &b->nest, &g)) return "-";
  for (int k = 0; k < g.depth; k++) text[k] = "MNKB"[g.role[k]];
  text[g.depth] = '\0';
  *x = g.x;
  *y = g.y;
  return text;
}

static void test_matmuls(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_symbol i = cn_symbol_create(ctx, "i", 0), j = cn_symbol_create(ctx, "j", 0),
            k = cn_symbol_create(ctx, "k", 0);
  cn_node *abc[3] = {node(ctx, "a", CN_PREC_SINGLE, 2, (int64_t)8, (int64_t)6),
                     node(ctx, "b", CN_PREC_SINGLE, 2, (int64_t)6, (int64_t)5),
                     node(ctx, "c", CN_PREC_SINGLE, 2, (int64_t)8, (int64_t)5)};
  cn_symbol ikj[3] = {i, k, j};
  int64_t ext[3] = {8, 5, 6};
  int x = -1, y = -1;
  /* c[i, k] += a[i, j] * b[j, k], loops i, k, j */
  cn_index *c_ik = cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_iter(k));
  built mm = nest_of(
      ctx, 3, ikj, ext,
      cn_lb_accum(ctx, 2, CN_PREC_SINGLE, c_ik, CN_OP_ADD,
                  product(ctx,
                          get(ctx, 0, cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_iter(j))),
                          get(ctx, 1, cn_lb_indices(ctx, 2, cn_index_iter(j), cn_index_iter(k))))),
      3, abc);
  CHECK_STR(roles(&mm, &x, &y), "MNK");
  CHECK(x == 0 && y == 1);
  /* transposed operands: c[i, k] += at[j, i] * bt[k, j] (the same groups) */
  cn_node *t[3] = {node(ctx, "at", CN_PREC_SINGLE, 2, (int64_t)6, (int64_t)8),
                   node(ctx, "bt", CN_PREC_SINGLE, 2, (int64_t)5, (int64_t)6), abc[2]};
  built tr = nest_of(
      ctx, 3, ikj, ext,
      cn_lb_accum(ctx, 2, CN_PREC_SINGLE, c_ik, CN_OP_ADD,
                  product(ctx,
                          get(ctx, 0, cn_lb_indices(ctx, 2, cn_index_iter(j), cn_index_iter(i))),
                          get(ctx, 1, cn_lb_indices(ctx, 2, cn_index_iter(k), cn_index_iter(j))))),
      3, t);
  CHECK_STR(roles(&tr, &x, &y), "MNK");
  /* the input gradient of c = a * b: da[i, j] += dc[i, k] * b[j, k], loops i, j, k */
  cn_node *g[3] = {node(ctx, "dc", CN_PREC_SINGLE, 2, (int64_t)8, (int64_t)5), abc[1],
                   node(ctx, "da", CN_PREC_SINGLE, 2, (int64_t)8, (int64_t)6)};
  cn_symbol ijk[3] = {i, j, k};
  int64_t ext2[3] = {8, 6, 5};
  built grad = nest_of(
      ctx, 3, ijk, ext2,
      cn_lb_accum(ctx, 2, CN_PREC_SINGLE, cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_iter(j)),
                  CN_OP_ADD,
                  product(ctx,
                          get(ctx, 0, cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_iter(k))),
                          get(ctx, 1, cn_lb_indices(ctx, 2, cn_index_iter(j), cn_index_iter(k))))),
      3, g);
  CHECK_STR(roles(&grad, &x, &y), "MNK");
  CHECK(x == 0 && y == 1);
  /* not GEMM-class: the same nest with a max accumulation, with a constant for b, and with b
   * broadcast (b[j]: the output's k walks no operand) */
  built max = nest_of(
      ctx, 3, ikj, ext,
      cn_lb_accum(ctx, 2, CN_PREC_SINGLE, c_ik, CN_OP_MAX,
                  product(ctx,
                          get(ctx, 0, cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_iter(j))),
                          get(ctx, 1, cn_lb_indices(ctx, 2, cn_index_iter(j), cn_index_iter(k))))),
      3, abc);
  CHECK_STR(roles(&max, &x, &y), "-");
  built constant = nest_of(
      ctx, 3, ikj, ext,
      cn_lb_accum(ctx, 2, CN_PREC_SINGLE, c_ik, CN_OP_ADD,
                  product(ctx,
                          get(ctx, 0, cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_iter(j))),
                          cn_lb_num(ctx, CN_PREC_SINGLE, 2))),
      3, abc);
  CHECK_STR(roles(&constant, &x, &y), "-");
  cn_node *bv[3] = {abc[0], node(ctx, "bv", CN_PREC_SINGLE, 1, (int64_t)6), abc[2]};
  built broadcast = nest_of(
      ctx, 3, ikj, ext,
      cn_lb_accum(ctx, 2, CN_PREC_SINGLE, c_ik, CN_OP_ADD,
                  product(ctx,
                          get(ctx, 0, cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_iter(j))),
                          get(ctx, 1, cn_lb_indices(ctx, 1, cn_index_iter(j))))),
      3, bv);
  CHECK_STR(roles(&broadcast, &x, &y), "-");
  /* three operands: c[i, k] += (a[i, j] * b[j, k]) * d[i, k] */
  cn_node *abcd[4] = {abc[0], abc[1], abc[2],
                      node(ctx, "d", CN_PREC_SINGLE, 2, (int64_t)8, (int64_t)5)};
  built three = nest_of(
      ctx, 3, ikj, ext,
      cn_lb_accum(
          ctx, 2, CN_PREC_SINGLE, c_ik, CN_OP_ADD,
          product(ctx,
                  product(ctx,
                          get(ctx, 0, cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_iter(j))),
                          get(ctx, 1, cn_lb_indices(ctx, 2, cn_index_iter(j), cn_index_iter(k)))),
                  get(ctx, 3, cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_iter(k))))),
      4, abcd);
  CHECK_STR(roles(&three, &x, &y), "-");
  cn_ctx_destroy(ctx);
}

/* A gradient of the attention product s[b, h, q, k] += Q[b, h, q, d] * K[b, h, k, d] (loops v =
 * b, h, q, k, d): out[b, h, v[kept], d] += dS[b, h, q, k] * other[b, h, v[other_pos], d]; params
 * dS (the product's node), other, out. */
static built attention_grad(cn_ctx *ctx, const cn_symbol *v, const int64_t *ext, cn_node *out,
                            cn_node *other, int kept, int other_pos) {
  cn_node *nodes[3] = {NULL, other, out};
  nodes[0] = node(ctx, "dS", CN_PREC_SINGLE, 4, (int64_t)2, (int64_t)3, (int64_t)4, (int64_t)5);
  cn_index *ds = cn_lb_indices(ctx, 4, cn_index_iter(v[0]), cn_index_iter(v[1]),
                               cn_index_iter(v[2]), cn_index_iter(v[3]));
  cn_ll_stmt *store =
      cn_lb_accum(ctx, 2, CN_PREC_SINGLE,
                  cn_lb_indices(ctx, 4, cn_index_iter(v[0]), cn_index_iter(v[1]),
                                cn_index_iter(v[kept]), cn_index_iter(v[4])),
                  CN_OP_ADD,
                  product(ctx, get(ctx, 0, ds),
                          get(ctx, 1,
                              cn_lb_indices(ctx, 4, cn_index_iter(v[0]), cn_index_iter(v[1]),
                                            cn_index_iter(v[other_pos]), cn_index_iter(v[4])))));
  return nest_of(ctx, 5, v, ext, store, 3, nodes);
}

static void test_attention_and_conv(void) {
  cn_ctx *ctx = cn_ctx_create();
  /* s[b, h, q, k] += Q[b, h, q, d] * K[b, h, k, d] */
  const char *names[5] = {"b", "h", "q", "k", "d"};
  cn_symbol v[5];
  for (int a = 0; a < 5; a++) v[a] = cn_symbol_create(ctx, names[a], 0);
  int64_t ext[5] = {2, 3, 4, 5, 6};
  cn_node *qks[3] = {
      node(ctx, "Q", CN_PREC_SINGLE, 4, (int64_t)2, (int64_t)3, (int64_t)4, (int64_t)6),
      node(ctx, "K", CN_PREC_SINGLE, 4, (int64_t)2, (int64_t)3, (int64_t)5, (int64_t)6),
      node(ctx, "S", CN_PREC_SINGLE, 4, (int64_t)2, (int64_t)3, (int64_t)4, (int64_t)5)};
  cn_index *bhqk = cn_lb_indices(ctx, 4, cn_index_iter(v[0]), cn_index_iter(v[1]),
                                 cn_index_iter(v[2]), cn_index_iter(v[3]));
  built att = nest_of(
      ctx, 5, v, ext,
      cn_lb_accum(ctx, 2, CN_PREC_SINGLE, bhqk, CN_OP_ADD,
                  product(ctx,
                          get(ctx, 0,
                              cn_lb_indices(ctx, 4, cn_index_iter(v[0]), cn_index_iter(v[1]),
                                            cn_index_iter(v[2]), cn_index_iter(v[4]))),
                          get(ctx, 1,
                              cn_lb_indices(ctx, 4, cn_index_iter(v[0]), cn_index_iter(v[1]),
                                            cn_index_iter(v[3]), cn_index_iter(v[4]))))),
      3, qks);
  int x = -1, y = -1;
  CHECK_STR(roles(&att, &x, &y), "BBMNK");
  /* its gradients, slots permuted: dQ[b, h, q, d] += dS[b, h, q, k] * K[b, h, k, d] over loops
   * b, h, q, k, d (k the reduction) and dK[b, h, k, d] += dS[b, h, q, k] * Q[b, h, q, d] (q) */
  cn_node *dq = node(ctx, "dQ", CN_PREC_SINGLE, 4, (int64_t)2, (int64_t)3, (int64_t)4, (int64_t)6);
  cn_node *dk = node(ctx, "dK", CN_PREC_SINGLE, 4, (int64_t)2, (int64_t)3, (int64_t)5, (int64_t)6);
  built grad_q = attention_grad(ctx, v, ext, dq, qks[1], 2, 3);
  CHECK_STR(roles(&grad_q, &x, &y), "BBMKN");
  built grad_k = attention_grad(ctx, v, ext, dk, qks[0], 3, 2);
  CHECK_STR(roles(&grad_k, &x, &y), "BBKMN");
  /* out[n, o, oc] += in[n, 2*o + 3*kk - 1, ic] * w[kk, ic, oc]: stride 2, dilation 3, one cell
   * of padding on the left of in (its margin) */
  const char *cn[5] = {"n", "o", "oc", "kk", "ic"};
  cn_symbol c[5];
  for (int a = 0; a < 5; a++) c[a] = cn_symbol_create(ctx, cn[a], 0);
  int64_t cext[5] = {2, 4, 3, 3, 2};
  cn_node *iwo[3] = {node(ctx, "in", CN_PREC_SINGLE, 3, (int64_t)2, (int64_t)13, (int64_t)2),
                     node(ctx, "w", CN_PREC_SINGLE, 3, (int64_t)3, (int64_t)2, (int64_t)3),
                     node(ctx, "out", CN_PREC_SINGLE, 3, (int64_t)2, (int64_t)4, (int64_t)3)};
  CHECK_INT(cn_node_set_padding(iwo[0], 1, 1, 0), CN_OK);
  /* the three accesses, shared by the convolution and its gradients */
  cn_index *in_idx = cn_lb_indices(ctx, 3, cn_index_iter(c[0]), affine2(c[1], 2, c[3], 3, -1),
                                   cn_index_iter(c[4]));
  cn_index *w_idx =
      cn_lb_indices(ctx, 3, cn_index_iter(c[3]), cn_index_iter(c[4]), cn_index_iter(c[2]));
  cn_index *out_idx =
      cn_lb_indices(ctx, 3, cn_index_iter(c[0]), cn_index_iter(c[1]), cn_index_iter(c[2]));
  built conv = nest_of(ctx, 5, c, cext,
                       cn_lb_accum(ctx, 2, CN_PREC_SINGLE, out_idx, CN_OP_ADD,
                                   product(ctx, get(ctx, 0, in_idx), get(ctx, 1, w_idx))),
                       3, iwo);
  CHECK_STR(roles(&conv, &x, &y), "MMNKK");
  CHECK(x == 0 && y == 1);
  /* its weight gradient dw[kk, ic, oc] += in[n, 2*o + 3*kk - 1, ic] * dout[n, o, oc], loops n, o,
   * oc, kk, ic: the batch and the output positions are the reduction */
  cn_node *wg[3] = {iwo[0], iwo[2],
                    node(ctx, "dw", CN_PREC_SINGLE, 3, (int64_t)3, (int64_t)2, (int64_t)3)};
  built weight_grad = nest_of(ctx, 5, c, cext,
                              cn_lb_accum(ctx, 2, CN_PREC_SINGLE, w_idx, CN_OP_ADD,
                                          product(ctx, get(ctx, 0, in_idx), get(ctx, 1, out_idx))),
                              3, wg);
  CHECK_STR(roles(&weight_grad, &x, &y), "KKNMM");
  /* its input gradient din[n, 2*o + 3*kk - 1, ic] += dout[n, o, oc] * w[kk, ic, oc]: several
   * (o, kk) points per cell, not a matrix product as it stands (the gemm pass makes one by
   * hoisting kk: tests/test_gemm_run.c) */
  cn_node *gw[3] = {iwo[2], iwo[1],
                    node(ctx, "din", CN_PREC_SINGLE, 3, (int64_t)2, (int64_t)13, (int64_t)2)};
  CHECK_INT(cn_node_set_padding(gw[2], 1, 1, 0), CN_OK);
  built input_grad = nest_of(ctx, 5, c, cext,
                             cn_lb_accum(ctx, 2, CN_PREC_SINGLE, in_idx, CN_OP_ADD,
                                         product(ctx, get(ctx, 0, out_idx), get(ctx, 1, w_idx))),
                             3, gw);
  CHECK_STR(roles(&input_grad, &x, &y), "-");
  /* an interleave: out[2i] := a[i] (no accumulation) */
  cn_symbol i = cn_symbol_create(ctx, "i", 0);
  int64_t n = 8;
  cn_node *il[2] = {node(ctx, "a", CN_PREC_SINGLE, 1, n),
                    node(ctx, "o", CN_PREC_SINGLE, 1, (int64_t)16)};
  built inter = nest_of(ctx, 1, &i, &n,
                        cn_lb_set(ctx, 1, cn_lb_indices(ctx, 1, affine1(i, 2, 0)),
                                  get(ctx, 0, cn_lb_indices(ctx, 1, cn_index_iter(i)))),
                        2, il);
  CHECK_STR(roles(&inter, &x, &y), "-");
  cn_ctx_destroy(ctx);
}

int main(void) {
  test_matmuls();
  test_attention_and_conv();
  CHECK_DONE();
}
