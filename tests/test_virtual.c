/* Tests of virtual nodes (issue 16; src/sched/virtual.c): procedures built by hand with the
 * cn_lb_* constructors, each scheduled by the virtual pass alone and by every pass, run from the
 * same random buffers as the unscheduled procedure on generated C and on the interpreter, with
 * memcmp-identical results on every buffer the scheduled one keeps:
 *   - a pointwise chain t1 = a * b (double), t2 = t1 + c (single, read transposed and shifted),
 *     out = relu(t2) loses both intermediates, and so does an integer one whose byte
 *     intermediate wraps on store;
 *   - a half intermediate computed by an expression stays (local scratch, it rounds only on
 *     store), while a half constant is inlined rounded to half;
 *   - kept, with the reason printed: a reduction, an accumulation, a shifted write, a read that
 *     runs more often than the producer, an input written between producer and read, a read
 *     before the producer, a producer with affine bounds; a materialized node stays;
 *   - a read in the statement that updates the producer's input in place is inlined (also where
 *     the nodes have a size-1 axis written at 0, without a loop), one reading another point's cell
 *     is not;
 *   - every allocation of the pass failing in turn leaves the procedure unchanged;
 *   - routines: a virtual node that could not be inlined runs as scratch, a node the host reads
 *     or a later routine reads is materialized and stays, cn_node_get_values on a virtual node
 *     fails, cn_node_set_memory accepts CN_MEM_VIRTUAL;
 *   - a chain of 60 links: copies stop where they would nest deeper than the bound;
 *   - end to end: an MLP trained by a script (forward, backprop with its grad_tmp intermediates,
 *     SGD) prints the same bits with the schedule on and off, on both backends, and on 1, 2 and 3
 *     threads with every independent nest parallel; its unnamed first-layer sum is inlined and
 *     its named h1 stays. */
#include "backend/backend.h"
#include "loops_check.h"
#include "snapshot.h"
#include "sched/sched.h"

#include <stdlib.h>

/* ---- Running and comparing ---- */

static uint64_t rng_state = 0x2545F4914F6CDD1Du;

static uint64_t next_random(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

/* Fills every buffer of proc with random values of its precision: floats in [-2, 2) with 24
 * random bits (so that roundings show), integers over their whole range. */
static void fill_random(const cn_ll_proc *proc) {
  for (int k = 0; k < proc->n_params; k++) {
    cn_node *n = proc->params[k].node;
    unsigned char *cells = cn_node_buffer(n, proc->params[k].merge);
    CHECK(cells != NULL);
    if (!cells) return;
    size_t bytes = cn_prec_bytes(n->prec);
    for (size_t c = 0; c < cn_node_buffer_cells(n); c++) {
      uint64_t r = next_random();
      cn_value v = cn_value_of_double(n->prec, (double)(r >> 40) / (double)(1u << 22) - 2.0);
      if (cn_prec_kind_of(n->prec) != CN_PKIND_FLOAT) v.u = r;
      cn_value_store(n->prec, v, cells + c * bytes);
    }
  }
}

/* Whether the buffers of every param plain and scheduled share hold the same bits. */
static bool same_kept(const cn_ll_proc *plain, const cn_ll_proc *scheduled, const snapshot *a,
                      const snapshot *b) {
  for (int k = 0; k < plain->n_params; k++)
    for (int s = 0; s < scheduled->n_params; s++)
      if (scheduled->params[s].node == plain->params[k].node &&
          memcmp(a->data[k], b->data[k], a->bytes[k]) != 0)
        return false;
  return true;
}

/* plain and scheduled over the same nodes, run from the same random buffers: each backend gives
 * the same bits on every buffer the scheduled procedure keeps. */
static void check_same_results(cn_ctx *ctx, const cn_ll_proc *plain, const cn_ll_proc *scheduled) {
  fill_random(plain);
  snapshot start = {0}, c_plain = {0}, c_sched = {0}, i_plain = {0}, i_sched = {0};
  snapshot_save(plain, &start);
  snapshot_run(ctx, &cn_backend_c, plain, plain, &start, &c_plain);
  snapshot_run(ctx, &cn_backend_c, plain, scheduled, &start, &c_sched);
  snapshot_run(ctx, &cn_backend_interp, plain, plain, &start, &i_plain);
  snapshot_run(ctx, &cn_backend_interp, plain, scheduled, &start, &i_sched);
  CHECK(same_kept(plain, scheduled, &c_plain, &c_sched));
  CHECK(same_kept(plain, scheduled, &i_plain, &i_sched));
  CHECK(!same_kept(plain, scheduled, &start, &c_plain)); /* the run wrote something */
  snapshot_release(plain, &start);
  snapshot_release(plain, &c_plain);
  snapshot_release(plain, &c_sched);
  snapshot_release(plain, &i_plain);
  snapshot_release(plain, &i_sched);
}

typedef cn_ll_proc *(*builder)(cn_ctx *ctx, cn_node *const *nodes, const cn_symbol *syms);

/* Builds the procedure three times — plain, with the virtual pass alone, with every pass — and
 * checks both scheduled ones against the plain one; returns the text of the virtual pass's, and
 * its number of params in *n_params. */
static const char *check_builder(cn_ctx *ctx, builder build, cn_node *const *nodes,
                                 const cn_symbol *syms, int *n_params) {
  cn_ll_proc *plain = build(ctx, nodes, syms), *virt = build(ctx, nodes, syms),
             *all = build(ctx, nodes, syms);
  CHECK(plain && virt && all);
  if (!plain || !virt || !all) return "";
  CHECK_INT(cn_sched_virtual(ctx, virt, false), CN_OK);
  CHECK_INT(cn_sched_proc(ctx, all, NULL), CN_OK); /* every pass */
  CHECK_INT(all->n_params, virt->n_params);
  check_same_results(ctx, plain, virt);
  check_same_results(ctx, plain, all);
  *n_params = virt->n_params;
  const char *text = cn_ll_to_string(ctx, virt);
  CHECK(text != NULL);
  return text ? text : "";
}

static cn_ll_param param_of(cn_node *n) {
  return (cn_ll_param){n, false};
}

static cn_index *ij(cn_ctx *ctx, cn_symbol i, cn_symbol j) {
  return cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_iter(j));
}

static cn_ll_stmt *nest2(cn_ctx *ctx, cn_symbol i, int64_t m, cn_symbol j, int64_t n,
                         cn_ll_stmt *body) {
  return cn_lb_loop(ctx, i, 0, m, cn_lb_loop(ctx, j, 0, n, body));
}

/* ---- A pointwise chain ---- */

/* nodes a, b, c [4, 6] single, t1 [4, 6] double, t2 [6, 4] single, out [4, 6] single; syms p, q,
 * i, j:
 *   t1[p, q] := a[p, q] * b[p, q]                (computed in double)
 *   t2[q, p] := t1[p, q] + c[p, q]               (read through other loop variables)
 *   out[i, j] := relu(t2[j, i]) + t2[(j + 1) % 6 -> a shifted read, j < 5]
 */
static cn_ll_proc *chain_proc(cn_ctx *ctx, cn_node *const *n, const cn_symbol *s) {
  const cn_prec single = CN_PREC_SINGLE, dbl = CN_PREC_DOUBLE;
  cn_symbol p = s[0], q = s[1], i = s[2], j = s[3];
  cn_ll_expr *prod = cn_lb_op(ctx, CN_OP_MUL, dbl, cn_lb_get(ctx, 0, single, ij(ctx, p, q)),
                              cn_lb_get(ctx, 1, single, ij(ctx, p, q)), NULL);
  cn_ll_stmt *s1 = nest2(ctx, p, 4, q, 6, cn_lb_set(ctx, 3, ij(ctx, p, q), prod));
  cn_ll_expr *sum = cn_lb_op(ctx, CN_OP_ADD, single, cn_lb_get(ctx, 3, dbl, ij(ctx, p, q)),
                             cn_lb_get(ctx, 2, single, ij(ctx, p, q)), NULL);
  cn_ll_stmt *s2 = nest2(ctx, q, 6, p, 4, cn_lb_set(ctx, 4, ij(ctx, q, p), sum));
  cn_ll_expr *relu =
      cn_lb_op(ctx, CN_OP_RELU, single, cn_lb_get(ctx, 4, single, ij(ctx, j, i)), NULL, NULL);
  cn_ll_expr *shifted =
      cn_lb_get(ctx, 4, single, cn_lb_indices(ctx, 2, affine1(j, 1, 1), cn_index_iter(i)));
  cn_ll_stmt *s3 = nest2(
      ctx, i, 4, j, 5,
      cn_lb_set(ctx, 5, ij(ctx, i, j), cn_lb_op(ctx, CN_OP_ADD, single, relu, shifted, NULL)));
  cn_ll_param params[6] = {param_of(n[0]), param_of(n[1]), param_of(n[2]),
                           param_of(n[3]), param_of(n[4]), param_of(n[5])};
  return cn_lb_proc(ctx, "chain", cn_lb_seq(ctx, 3, s1, s2, s3), 6, params, 0, NULL);
}

/* The nodes and loop variables of chain_proc: a, b, c, the virtual t1 (double) and t2, out. */
static void chain_nodes(cn_ctx *ctx, cn_node **n, cn_symbol *s) {
  n[0] = node(ctx, "a", CN_PREC_SINGLE, 2, (int64_t)4, (int64_t)6);
  n[1] = node(ctx, "b", CN_PREC_SINGLE, 2, (int64_t)4, (int64_t)6);
  n[2] = node(ctx, "c", CN_PREC_SINGLE, 2, (int64_t)4, (int64_t)6);
  n[3] = node(ctx, "t1", CN_PREC_DOUBLE, 2, (int64_t)4, (int64_t)6);
  n[4] = node(ctx, "t2", CN_PREC_SINGLE, 2, (int64_t)6, (int64_t)4);
  n[5] = node(ctx, "out", CN_PREC_SINGLE, 2, (int64_t)4, (int64_t)6);
  const char *names[4] = {"p", "q", "i", "j"};
  for (int k = 0; k < 4; k++) s[k] = cn_symbol_create(ctx, names[k], 0);
  CHECK_INT(cn_node_set_memory(n[3], CN_MEM_VIRTUAL), CN_OK);
  CHECK_INT(cn_node_set_memory(n[4], CN_MEM_VIRTUAL), CN_OK);
}

static void test_chain(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *n[6];
  cn_symbol s[4];
  chain_nodes(ctx, n, s);
  CHECK_INT(cn_node_memory(n[4]), CN_MEM_VIRTUAL);
  int n_params = 0;
  const char *text = check_builder(ctx, chain_proc, n, s, &n_params);
  /* t1 and t2 are gone: the params are the inputs and the output, still ordered by node id */
  CHECK_INT(n_params, 4);
  check_text(text,
             "routine chain\n"
             "  params: a#1 single[4, 6], b#2 single[4, 6], c#3 single[4, 6], out#6 single[4, 6]\n"
             "# virtual, inlined: 't1' (#4), 't2' (#5)\n"
             "for i in 0..4:\n"
             "  for j in 0..5:\n"
             "    out[i, j] := relu(id(id(a[i, j] * b[i, j] + c[i, j]))) + id(id(a[i, j + 1] * "
             "b[i, j + 1] + c[i, j + 1]))\n");
  /* the plain procedure with the virtual nodes materialized gives the same bits (checked by
   * check_builder); without the pass the nodes stay, printed virtual */
  cn_ll_proc *plain = chain_proc(ctx, n, s);
  CHECK(plain != NULL);
  if (plain) CHECK_HAS(cn_ll_to_string(ctx, plain), "t1#4 double[4, 6] virtual");
  cn_ctx_destroy(ctx);
}

/* An integer chain: t[i] (byte) := a[i] * b[i] (int32, wraps on store), out[i] := t[i] + a[i]
 * (int32), u[i] (uint16) := t[i] (converted on store) read as out2[i] := u[i] * 3. */
static cn_ll_proc *int_proc(cn_ctx *ctx, cn_node *const *n, const cn_symbol *s) {
  const cn_prec i32 = CN_PREC_INT32, byte = CN_PREC_BYTE, u16 = CN_PREC_UINT16;
  cn_symbol i = s[0], j = s[1];
  cn_index *at_i = cn_lb_indices(ctx, 1, cn_index_iter(i)),
           *at_j = cn_lb_indices(ctx, 1, cn_index_iter(j));
  cn_ll_stmt *s1 = cn_lb_loop(ctx, i, 0, 16,
                              cn_lb_set(ctx, 2, at_i,
                                        cn_lb_op(ctx, CN_OP_MUL, i32, cn_lb_get(ctx, 0, i32, at_i),
                                                 cn_lb_get(ctx, 1, i32, at_i), NULL)));
  cn_ll_stmt *s2 = cn_lb_loop(ctx, j, 0, 16,
                              cn_lb_set(ctx, 3, at_j,
                                        cn_lb_op(ctx, CN_OP_ADD, i32, cn_lb_get(ctx, 2, byte, at_j),
                                                 cn_lb_get(ctx, 0, i32, at_j), NULL)));
  cn_ll_stmt *s3 =
      cn_lb_loop(ctx, i, 0, 16, cn_lb_set(ctx, 4, at_i, cn_lb_get(ctx, 2, byte, at_i)));
  cn_ll_stmt *s4 = cn_lb_loop(ctx, j, 0, 16,
                              cn_lb_set(ctx, 5, at_j,
                                        cn_lb_op(ctx, CN_OP_MUL, i32, cn_lb_get(ctx, 4, u16, at_j),
                                                 cn_lb_num(ctx, i32, 3), NULL)));
  cn_ll_param params[6] = {param_of(n[0]), param_of(n[1]), param_of(n[2]),
                           param_of(n[3]), param_of(n[4]), param_of(n[5])};
  return cn_lb_proc(ctx, "ints", cn_lb_seq(ctx, 4, s1, s2, s3, s4), 6, params, 0, NULL);
}

static void test_integers(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *n[6] = {node(ctx, "a", CN_PREC_INT32, 1, (int64_t)16),
                   node(ctx, "b", CN_PREC_INT32, 1, (int64_t)16),
                   node(ctx, "t", CN_PREC_BYTE, 1, (int64_t)16),
                   node(ctx, "out", CN_PREC_INT32, 1, (int64_t)16),
                   node(ctx, "u", CN_PREC_UINT16, 1, (int64_t)16),
                   node(ctx, "out2", CN_PREC_INT32, 1, (int64_t)16)};
  cn_symbol s[2] = {cn_symbol_create(ctx, "i", 0), cn_symbol_create(ctx, "j", 0)};
  CHECK_INT(cn_node_set_memory(n[2], CN_MEM_VIRTUAL), CN_OK);
  CHECK_INT(cn_node_set_memory(n[4], CN_MEM_VIRTUAL), CN_OK);
  int n_params = 0;
  const char *text = check_builder(ctx, int_proc, n, s, &n_params);
  CHECK_INT(n_params, 4);
  CHECK_HAS(text, "# virtual, inlined: 't' (#3), 'u' (#5)\n");
  CHECK(!strstr(text, "t#3") && !strstr(text, "u#5"));
  cn_ctx_destroy(ctx);
}

/* ---- Half precision ---- */

/* h[i] (half) := a[i] * b[i]; k[] (half) := 0.1; out[i] := h[i] + a[i] * k[] (single). */
static cn_ll_proc *half_proc(cn_ctx *ctx, cn_node *const *n, const cn_symbol *s) {
  const cn_prec single = CN_PREC_SINGLE, half = CN_PREC_HALF;
  cn_symbol i = s[0];
  cn_index *at = cn_lb_indices(ctx, 1, cn_index_iter(i)), *scalar = cn_lb_indices(ctx, 0);
  cn_ll_stmt *s1 =
      cn_lb_loop(ctx, i, 0, 32,
                 cn_lb_set(ctx, 2, at,
                           cn_lb_op(ctx, CN_OP_MUL, single, cn_lb_get(ctx, 0, single, at),
                                    cn_lb_get(ctx, 1, single, at), NULL)));
  cn_ll_stmt *s2 = cn_lb_set(ctx, 3, scalar, cn_lb_num(ctx, single, 0.1));
  cn_ll_expr *scaled = cn_lb_op(ctx, CN_OP_MUL, single, cn_lb_get(ctx, 0, single, at),
                                cn_lb_get(ctx, 3, half, scalar), NULL);
  cn_ll_stmt *s3 = cn_lb_loop(
      ctx, i, 0, 32,
      cn_lb_set(ctx, 4, at,
                cn_lb_op(ctx, CN_OP_ADD, single, cn_lb_get(ctx, 2, half, at), scaled, NULL)));
  cn_ll_param params[5] = {param_of(n[0]), param_of(n[1]), param_of(n[2]), param_of(n[3]),
                           param_of(n[4])};
  return cn_lb_proc(ctx, "halves", cn_lb_seq(ctx, 3, s1, s2, s3), 5, params, 0, NULL);
}

static void test_half(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *n[5] = {node(ctx, "a", CN_PREC_SINGLE, 1, (int64_t)32),
                   node(ctx, "b", CN_PREC_SINGLE, 1, (int64_t)32),
                   node(ctx, "h", CN_PREC_HALF, 1, (int64_t)32), node(ctx, "k", CN_PREC_HALF, 0),
                   node(ctx, "out", CN_PREC_SINGLE, 1, (int64_t)32)};
  cn_symbol s[1] = {cn_symbol_create(ctx, "i", 0)};
  CHECK_INT(cn_node_set_memory(n[2], CN_MEM_VIRTUAL), CN_OK);
  CHECK_INT(cn_node_set_memory(n[3], CN_MEM_VIRTUAL), CN_OK);
  int n_params = 0;
  const char *text = check_builder(ctx, half_proc, n, s, &n_params);
  /* k's constant is inlined rounded to half (0.1 is 0.0999755859375 in half); h stays */
  CHECK_INT(n_params, 4);
  CHECK_HAS(text, "h#3 half[32] virtual");
  CHECK_HAS(text, "# virtual, inlined: 'k' (#4)\n"
                  "# virtual 'h' (#3) kept as local scratch: its precision rounds only on store\n");
  CHECK_HAS(text, "out[i] := h[i] + a[i] * 0.0999755859375\n");
  cn_ctx_destroy(ctx);
}

/* ---- What stays ---- */

/* The case kept_proc builds (a builder takes no other argument). */
static int kept_case;

/* Each case: v[8] (virtual) produced and read in a way the pass must keep; a[8, 8] input,
 * out[8, 8] output. */
static cn_ll_proc *kept_proc(cn_ctx *ctx, cn_node *const *n, const cn_symbol *s) {
  const cn_prec single = CN_PREC_SINGLE;
  cn_symbol i = s[0], j = s[1];
  cn_index *at_i = cn_lb_indices(ctx, 1, cn_index_iter(i));
  cn_ll_expr *a_ij = cn_lb_get(ctx, 0, single, ij(ctx, i, j));
  cn_ll_expr *a_i0 =
      cn_lb_get(ctx, 0, single, cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_fixed(0)));
  cn_ll_stmt *produce = cn_lb_loop(
      ctx, i, 0, 8,
      cn_lb_set(ctx, 1, at_i,
                cn_lb_op(ctx, CN_OP_MUL, single, a_i0, cn_lb_num(ctx, single, 2), NULL)));
  cn_ll_stmt *consume = nest2(
      ctx, i, 8, j, 8,
      cn_lb_set(ctx, 2, ij(ctx, i, j),
                cn_lb_op(ctx, CN_OP_ADD, single, a_ij, cn_lb_get(ctx, 1, single, at_i), NULL)));
  cn_ll_stmt *body = NULL;
  switch (kept_case) {
  case 1: { /* a reduction: v[i] := 0; v[i] := v[i] + a[i, j] */
    cn_ll_stmt *clear =
        cn_lb_loop(ctx, i, 0, 8, cn_lb_set(ctx, 1, at_i, cn_lb_num(ctx, single, 0)));
    cn_ll_stmt *sum = nest2(ctx, i, 8, j, 8, cn_lb_accum(ctx, 1, single, at_i, CN_OP_ADD, a_ij));
    body = cn_lb_seq(ctx, 3, clear, sum, consume);
    break;
  }
  case 2: /* an accumulation in one statement: v[i] := v[i] + a[i, 0] */
    body = cn_lb_seq(ctx, 2,
                     cn_lb_loop(ctx, i, 0, 8, cn_lb_accum(ctx, 1, single, at_i, CN_OP_ADD, a_i0)),
                     consume);
    break;
  case 3: /* a shifted write covering cells 1..7 only: v[i + 1] := a[i, 0] */
    body = cn_lb_seq(
        ctx, 2,
        cn_lb_loop(ctx, i, 0, 7, cn_lb_set(ctx, 1, cn_lb_indices(ctx, 1, affine1(i, 1, 1)), a_i0)),
        consume);
    break;
  case 4: /* the consumer reads v[i] 8 times per cell (in its j loop): recomputation */
    body = cn_lb_seq(ctx, 2, produce, consume);
    break;
  case 5: { /* a[i, 0] changes between the producer and the read */
    cn_ll_stmt *clobber =
        cn_lb_loop(ctx, i, 0, 8,
                   cn_lb_set(ctx, 0, cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_fixed(0)),
                             cn_lb_num(ctx, single, 1)));
    cn_ll_stmt *copy =
        cn_lb_loop(ctx, i, 0, 8,
                   cn_lb_set(ctx, 2, cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_fixed(0)),
                             cn_lb_get(ctx, 1, single, at_i)));
    body = cn_lb_seq(ctx, 3, produce, clobber, copy);
    break;
  }
  case 6: { /* a read before the producer */
    cn_ll_stmt *early =
        cn_lb_loop(ctx, i, 0, 8,
                   cn_lb_set(ctx, 2, cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_fixed(1)),
                             cn_lb_get(ctx, 1, single, at_i)));
    body = cn_lb_seq(ctx, 2, early, produce);
    break;
  }
  default: { /* a producer with an affine bound: for i in 0..8, j in 0..i + 1 writes v[j] */
    cn_ll_bound upper = {affine1(i, 1, 1), 1};
    cn_ll_stmt *inner =
        cn_lb_bounds(ctx,
                     cn_lb_loop(ctx, j, 0, 8,
                                cn_lb_set(ctx, 1, cn_lb_indices(ctx, 1, cn_index_iter(j)),
                                          cn_lb_get(ctx, 0, single, ij(ctx, i, j)))),
                     0, NULL, 1, &upper);
    cn_ll_stmt *copy =
        cn_lb_loop(ctx, i, 0, 8,
                   cn_lb_set(ctx, 2, cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_fixed(0)),
                             cn_lb_get(ctx, 1, single, at_i)));
    body = cn_lb_seq(ctx, 2, cn_lb_loop(ctx, i, 0, 8, inner), copy);
    break;
  }
  }
  cn_ll_param params[3] = {param_of(n[0]), param_of(n[1]), param_of(n[2])};
  return cn_lb_proc(ctx, "kept", body, 3, params, 0, NULL);
}

static void test_kept(void) {
  static const char *const reasons[] = {"",
                                        "more than one statement writes it",
                                        "its producer is not one plain store per cell",
                                        "its producer is not one plain store per cell",
                                        "a read runs more often than its producer",
                                        "its inputs change before a read",
                                        "it is read before it is written",
                                        "its producer is not one plain store per cell"};
  for (int which = 1; which <= 7; which++) {
    cn_ctx *ctx = cn_ctx_create();
    cn_node *n[3] = {node(ctx, "a", CN_PREC_SINGLE, 2, (int64_t)8, (int64_t)8),
                     node(ctx, "v", CN_PREC_SINGLE, 1, (int64_t)8),
                     node(ctx, "out", CN_PREC_SINGLE, 2, (int64_t)8, (int64_t)8)};
    cn_symbol s[2] = {cn_symbol_create(ctx, "i", 0), cn_symbol_create(ctx, "j", 0)};
    kept_case = which;
    CHECK_INT(cn_node_set_memory(n[1], CN_MEM_VIRTUAL), CN_OK);
    int n_params = 0;
    const char *text = check_builder(ctx, kept_proc, n, s, &n_params);
    CHECK_INT(n_params, 3);
    char want[160];
    snprintf(want, sizeof want, "# virtual 'v' (#2) kept as local scratch: %s\n", reasons[which]);
    CHECK_MSG(strstr(text, want) != NULL, "case %d:\n%s", which, text);
    cn_ctx_destroy(ctx);
  }
  /* a materialized node is never touched: the procedure is left as it was */
  cn_ctx *ctx = cn_ctx_create();
  cn_node *n[3] = {node(ctx, "a", CN_PREC_SINGLE, 2, (int64_t)8, (int64_t)8),
                   node(ctx, "v", CN_PREC_SINGLE, 1, (int64_t)8),
                   node(ctx, "out", CN_PREC_SINGLE, 2, (int64_t)8, (int64_t)8)};
  cn_symbol s[2] = {cn_symbol_create(ctx, "i", 0), cn_symbol_create(ctx, "j", 0)};
  kept_case = 4;
  cn_ll_proc *proc = kept_proc(ctx, n, s);
  CHECK(proc != NULL);
  if (proc) {
    const char *before = cn_ll_to_string(ctx, proc);
    CHECK_INT(cn_sched_virtual(ctx, proc, false), CN_OK);
    CHECK_STR(cn_ll_to_string(ctx, proc), before);
  }
  cn_ctx_destroy(ctx);
}

/* The case in_place_proc builds: 0 reads v[j] where a[j] is updated, 1 reads v[j - 1]; 2 as 0
 * with nodes of [8, 1] written and read at [i, 0]: a size-1 axis without a loop, as the lowering
 * writes one. */
static int in_place_case;

/* v[i] (virtual) := a[i] * 2 over [8]; then a[j] := a[j] - v[j] (in place: each point reads the
 * cell it writes, before writing it) or, for j in 1..8, a[j] := a[j] - v[j - 1], where inlining
 * would read a[j - 1] after the previous point changed it: the pass must keep v. */
static cn_ll_proc *in_place_proc(cn_ctx *ctx, cn_node *const *n, const cn_symbol *s) {
  const cn_prec single = CN_PREC_SINGLE;
  cn_symbol i = s[0], j = s[1];
  bool column = in_place_case == 2, behind = in_place_case == 1;
  cn_index *at_i = column ? cn_lb_indices(ctx, 2, cn_index_iter(i), cn_index_fixed(0))
                          : cn_lb_indices(ctx, 1, cn_index_iter(i)),
           *at_j = column ? cn_lb_indices(ctx, 2, cn_index_iter(j), cn_index_fixed(0))
                          : cn_lb_indices(ctx, 1, cn_index_iter(j));
  cn_ll_stmt *produce =
      cn_lb_loop(ctx, i, 0, 8,
                 cn_lb_set(ctx, 1, at_i,
                           cn_lb_op(ctx, CN_OP_MUL, single, cn_lb_get(ctx, 0, single, at_i),
                                    cn_lb_num(ctx, single, 2), NULL)));
  cn_index *read = behind ? cn_lb_indices(ctx, 1, affine1(j, 1, 1)) : at_j;
  cn_ll_stmt *update =
      cn_lb_loop(ctx, j, 0, behind ? 7 : 8,
                 cn_lb_set(ctx, 0, at_j,
                           cn_lb_op(ctx, CN_OP_SUB, single, cn_lb_get(ctx, 0, single, at_j),
                                    cn_lb_get(ctx, 1, single, read), NULL)));
  cn_ll_param params[2] = {param_of(n[0]), param_of(n[1])};
  return cn_lb_proc(ctx, "in_place", cn_lb_seq(ctx, 2, produce, update), 2, params, 0, NULL);
}

static void test_in_place(void) {
  for (int which = 0; which < 3; which++) {
    cn_ctx *ctx = cn_ctx_create();
    cn_node *n[2] = {which == 2 ? node(ctx, "a", CN_PREC_SINGLE, 2, (int64_t)8, (int64_t)1)
                                : node(ctx, "a", CN_PREC_SINGLE, 1, (int64_t)8),
                     which == 2 ? node(ctx, "v", CN_PREC_SINGLE, 2, (int64_t)8, (int64_t)1)
                                : node(ctx, "v", CN_PREC_SINGLE, 1, (int64_t)8)};
    cn_symbol s[2] = {cn_symbol_create(ctx, "i", 0), cn_symbol_create(ctx, "j", 0)};
    CHECK_INT(cn_node_set_memory(n[1], CN_MEM_VIRTUAL), CN_OK);
    in_place_case = which;
    int n_params = 0;
    const char *text = check_builder(ctx, in_place_proc, n, s, &n_params);
    CHECK_INT(n_params, which == 1 ? 2 : 1);
    if (which == 0) CHECK_HAS(text, "  a[j] := a[j] - id(id(a[j] * 2))\n");
    if (which == 2) CHECK_HAS(text, "  a[j, 0] := a[j, 0] - id(id(a[j, 0] * 2))\n");
    if (which == 1)
      CHECK_HAS(text, "# virtual 'v' (#2) kept as local scratch: its inputs change before a read");
    cn_ctx_destroy(ctx);
  }
}

/* Every allocation of the pass failing in turn: CN_ERR_NOMEM, the procedure unchanged. */
static void test_allocation_failures(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *n[6];
  cn_symbol s[4];
  chain_nodes(ctx, n, s);
  int failures = 0;
  for (long k = 1; k < 1000; k++) {
    cn_ll_proc *proc = chain_proc(ctx, n, s);
    CHECK(proc != NULL);
    if (!proc) break;
    const char *before = cn_ll_to_string(ctx, proc);
    ctx->fail_alloc_countdown = k;
    cn_status st = cn_sched_virtual(ctx, proc, false);
    ctx->fail_alloc_countdown = 0;
    if (st == CN_OK) {
      CHECK_INT(proc->n_params, 4);
      break;
    }
    CHECK_INT(st, CN_ERR_NOMEM);
    CHECK_STR(cn_ll_to_string(ctx, proc), before);
    failures++;
  }
  CHECK(failures > 10);
  cn_ctx_destroy(ctx);
}

/* ---- Routines: modes, host reads, later routines ---- */

static cn_proj *pointwise(cn_ctx *ctx, cn_symbol i, cn_node *lhs, int n_rhs, cn_node *const *rhs) {
  int64_t size = cn_node_dim(lhs, 0);
  cn_index map = cn_index_iter(i);
  cn_proj_tensor slots[3];
  for (int k = 0; k < n_rhs; k++) slots[k] = tensor(rhs[k], &map);
  return cn_proj_create(ctx, 1, &i, &size, tensor(lhs, &map), n_rhs, slots);
}

/* lhs =: op(rhs...) pointwise over [n]. */
static cn_asgn *pw(cn_ctx *ctx, cn_symbol i, cn_node *lhs, cn_op op, int n_rhs,
                   cn_node *const *rhs) {
  cn_buffer bufs[3];
  for (int k = 0; k < n_rhs; k++) bufs[k] = (cn_buffer){rhs[k], false};
  return cn_asgn_accum(ctx, true, CN_OP_ARG2, lhs, op, bufs, pointwise(ctx, i, lhs, n_rhs, rhs));
}

static void test_routines(void) {
  for (int be = 0; be < 2; be++) {
    cn_backend_kind backend = be ? CN_BACKEND_C : CN_BACKEND_INTERP;
    cn_ctx *ctx = cn_ctx_create();
    cn_symbol i = cn_symbol_create(ctx, "i", 0);
    cn_node *a = node(ctx, "a", CN_PREC_SINGLE, 1, (int64_t)5),
            *b = node(ctx, "b", CN_PREC_SINGLE, 1, (int64_t)5),
            *t = node(ctx, "t", CN_PREC_SINGLE, 1, (int64_t)5),
            *host = node(ctx, "host", CN_PREC_SINGLE, 1, (int64_t)5),
            *out = node(ctx, "out", CN_PREC_SINGLE, 1, (int64_t)5),
            *later = node(ctx, "later", CN_PREC_SINGLE, 1, (int64_t)5);
    const double av[5] = {1, 2, 3, 4, 5}, bv[5] = {0.5, -1, 2, -3, 0.25};
    CHECK_INT(cn_node_set_values(a, false, av, 5), CN_OK);
    CHECK_INT(cn_node_set_values(b, false, bv, 5), CN_OK);
    CHECK_INT(cn_node_set_memory(t, CN_MEM_VIRTUAL), CN_OK);
    CHECK_INT(cn_node_set_memory(t, (cn_memory_mode)7), CN_ERR_INVALID);
    /* t = a * b (virtual), host = t + b (materialized: the host reads it, and so does `later`'s
     * routine), out = relu(host) * t */
    cn_asgn *first =
        cn_asgn_seq(ctx, 3,
                    (cn_asgn *[]){pw(ctx, i, t, CN_OP_MUL, 2, (cn_node *[]){a, b}),
                                  pw(ctx, i, host, CN_OP_ADD, 2, (cn_node *[]){t, b}),
                                  pw(ctx, i, out, CN_OP_MUL, 2, (cn_node *[]){host, t})});
    cn_routine *r1 = cn_routine_compile(ctx, first, backend, "first");
    CHECK_MSG(r1 != NULL, "%s", cn_ctx_error(ctx));
    if (!r1) {
      cn_ctx_destroy(ctx);
      continue;
    }
    const char *loops = cn_routine_loops(r1);
    bool scheduled = strcmp(cn_ctx_option(ctx, "schedule"), "none") != 0;
    /* t is inlined at its two reads, or (schedule off) runs as scratch; host stays */
    CHECK_HAS(loops, "host#4 single[5]");
    CHECK(!strstr(loops, "host#4 single[5] virtual"));
    if (scheduled) CHECK_HAS(loops, "# virtual, inlined: 't' (#3)\n");
    if (scheduled) CHECK(!strstr(loops, "t#3"));
    if (!scheduled) CHECK_HAS(loops, "t#3 single[5] virtual");
    CHECK_INT(cn_routine_run(r1), CN_OK);
    double got[5];
    CHECK_INT(cn_node_get_values(host, false, got, 5), CN_OK);
    for (int k = 0; k < 5; k++) CHECK_NEAR(got[k], av[k] * bv[k] + bv[k], 1e-6);
    CHECK_INT(cn_node_get_values(out, false, got, 5), CN_OK);
    for (int k = 0; k < 5; k++) {
      double h = av[k] * bv[k] + bv[k];
      CHECK_NEAR(got[k], h * av[k] * bv[k], 1e-5);
    }
    /* a virtual node has no host buffer */
    CHECK_INT(cn_node_get_values(t, false, got, 5), CN_ERR_INVALID);
    CHECK_HAS(cn_ctx_error(ctx), "'t' (#3) is virtual (CN_MEM_VIRTUAL)");
    CHECK_INT(cn_node_set_values(t, false, av, 5), CN_ERR_INVALID);
    /* a later routine reads host, which the first one kept */
    cn_routine *r2 = cn_routine_compile(ctx, pw(ctx, i, later, CN_OP_NEG, 1, (cn_node *[]){host}),
                                        backend, "second");
    CHECK(r2 != NULL);
    if (r2) CHECK_INT(cn_routine_run(r2), CN_OK);
    CHECK_INT(cn_node_get_values(later, false, got, 5), CN_OK);
    for (int k = 0; k < 5; k++) CHECK_NEAR(got[k], -(av[k] * bv[k] + bv[k]), 1e-6);
    cn_ctx_destroy(ctx);
  }
}

/* ---- A long chain: copies stop short of nesting too deeply ---- */

#define DEEP 60 /* links: t[k] := t[k-1] * 0.5 + a, t[1..DEEP-1] virtual, t[DEEP] the output */

static cn_ll_proc *deep_proc(cn_ctx *ctx, cn_node *const *t, const cn_symbol *s) {
  const cn_prec single = CN_PREC_SINGLE;
  cn_ll_stmt *links[DEEP];
  for (int k = 1; k <= DEEP; k++) {
    cn_symbol i = s[2 * k], j = s[2 * k + 1];
    cn_ll_expr *value =
        cn_lb_op(ctx, CN_OP_ADD, single,
                 cn_lb_op(ctx, CN_OP_MUL, single, cn_lb_get(ctx, k - 1, single, ij(ctx, i, j)),
                          cn_lb_num(ctx, single, 0.5), NULL),
                 cn_lb_get(ctx, 0, single, ij(ctx, i, j)), NULL);
    links[k - 1] = nest2(ctx, i, 2, j, 3, cn_lb_set(ctx, k, ij(ctx, i, j), value));
  }
  cn_ll_param params[DEEP + 1];
  for (int k = 0; k <= DEEP; k++) params[k] = param_of(t[k]);
  return cn_lb_proc(ctx, "deep", cn_lb_seq_array(ctx, DEEP, links), DEEP + 1, params, 0, NULL);
}

static void test_deep(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_node *t[DEEP + 1];
  cn_symbol s[2 * DEEP + 2];
  for (int k = 0; k <= DEEP; k++) {
    t[k] = node(ctx, "t", CN_PREC_SINGLE, 2, (int64_t)2, (int64_t)3);
    if (k > 0 && k < DEEP) CHECK_INT(cn_node_set_memory(t[k], CN_MEM_VIRTUAL), CN_OK);
    s[2 * k] = cn_symbol_create(ctx, "i", 0);
    s[2 * k + 1] = cn_symbol_create(ctx, "j", 0);
  }
  cn_ll_proc *plain = deep_proc(ctx, t, s), *virt = deep_proc(ctx, t, s);
  CHECK(plain && virt);
  if (!plain || !virt) return;
  CHECK_INT(cn_sched_virtual(ctx, virt, false), CN_OK);
  const char *text = cn_ll_to_string(ctx, virt);
  /* most links go, those whose copies would pass CN_SCHED_VIRTUAL_MAX_DEPTH stay */
  CHECK_HAS(text, "kept as local scratch: its copies would nest too deeply");
  CHECK(virt->n_params > 2 && virt->n_params < DEEP / 2);
  check_same_results(ctx, plain, virt);
  cn_ctx_destroy(ctx);
}

/* ---- End to end: an MLP trained by a script ---- */

static const char *const mlp_script =
    "let (moons, moons_classes) = half_moons ~n:40 ~noise:0.1 ~seed:3 ~batch_size:10\n"
    "let batch_n = static_index 4\n"
    "let x = moons @| batch_n\n"
    "let y = moons_classes @| batch_n\n"
    "let%op mlp x =\n"
    "  let h1 = relu ({w1} * x + {b1; o = [8]}) in\n"
    "  let h2 = relu ({w2} * h1 + {b2; o = [8]}) in\n"
    "  {w3} * h2\n"
    "let loss = ((relu (1 - y *. mlp x) **. 2.) ++ \"...|... => 0\") /. 10\n"
    "for epoch = 0 to 1 do\n"
    "  for batch_n = 0 to 3 do\n"
    "    backprop loss\n"
    "    sgd loss ~learning_rate:0.1 ~weight_decay:0.0001\n"
    "  done\n"
    "done\n"
    "print w1\n"
    "print w2\n"
    "print w3\n";

/* The script's printed text (JSON lines: full precision) under a schedule and a backend; with
 * `loops` the loop IR of its routines instead; `threads` (NULL: the default) with every
 * independent nest parallel. */
static char *run_mlp_threads(const char *schedule, cn_backend_kind backend, bool loops,
                             const char *threads) {
  cn_ctx *ctx = cn_ctx_create();
  CHECK_INT(cn_ctx_set_option(ctx, "schedule", schedule), CN_OK);
  if (threads) {
    CHECK_INT(cn_ctx_set_option(ctx, "threads", threads), CN_OK);
    CHECK_INT(cn_ctx_set_option(ctx, "parallel_work", "1"), CN_OK);
  }
  cn_graph *g = cn_graph_create(ctx);
  char *text = NULL;
  size_t size = 0;
  FILE *out = open_memstream(&text, &size);
  CHECK(out != NULL);
  cn_notation_options opts = {.backend = backend, .json = true, .emit_loops = loops, .out = out};
  cn_status st = cn_notation_run(g, "mlp.cnl", mlp_script, &opts);
  CHECK_MSG(st == CN_OK, "%s", cn_ctx_error(ctx));
  fclose(out);
  cn_ctx_destroy(ctx);
  return text;
}

static char *run_mlp(const char *schedule, cn_backend_kind backend, bool loops) {
  return run_mlp_threads(schedule, backend, loops, NULL);
}

static void test_mlp(void) {
  for (int be = 0; be < 2; be++) {
    cn_backend_kind backend = be ? CN_BACKEND_C : CN_BACKEND_INTERP;
    char *on = run_mlp("all", backend, false), *off = run_mlp("none", backend, false);
    CHECK(on && off && strstr(on, "\"w3\""));
    if (on && off) CHECK_STR(on, off);
    free(on);
    free(off);
  }
  /* every independent nest on 1, 2 and 3 threads: the same training, bit for bit */
  char *one = run_mlp_threads("all", CN_BACKEND_C, false, "1");
  for (int t = 2; t <= 3 && one; t++) {
    char *more = run_mlp_threads("all", CN_BACKEND_C, false, t == 2 ? "2" : "3");
    CHECK(more != NULL);
    if (more) CHECK_STR(more, one);
    free(more);
  }
  free(one);
  char *parallel = run_mlp_threads("all", CN_BACKEND_C, true, "2");
  CHECK(parallel != NULL);
  if (parallel) CHECK_HAS(parallel, "(parallel"); /* the runs above did split loops */
  free(parallel);
  /* the backprop routine's grad_tmp intermediates are inlined, and so are the script's unnamed
   * values (the first layer's `w1 * x + b1`, read by relu and by its derivative), while the named
   * h1 (relu) stays stored */
  char *loops = run_mlp("all", CN_BACKEND_INTERP, true);
  CHECK(loops != NULL);
  if (loops) {
    CHECK_HAS(loops, "'grad_tmp' (#");
    CHECK(!strstr(loops, "grad_tmp["));
    CHECK_HAS(loops, "'add' (#");
    CHECK(!strstr(loops, "add["));
    CHECK_HAS(loops, ", relu#");
  }
  free(loops);
}

int main(void) {
  test_chain();
  test_integers();
  test_half();
  test_kept();
  test_in_place();
  test_allocation_failures();
  test_routines();
  test_deep();
  test_mlp();
  CHECK_DONE();
}
