/* The optimizers' update code and the training state a checkpoint holds: SGD with weight decay,
 * momentum and Nesterov (contraction-is-emergent's SGD producer example), Adam (Kingma & Ba,
 * bias-corrected) and AdamW (decoupled weight decay, Loshchilov & Hutter), global-norm gradient
 * clipping and gradient scaling (trees of their own, run between the gradient and the update),
 * and cn_graph_state.
 * An update is a list of pointwise assignments over each parameter's value node (`%cd`-like:
 * `p =- learning_rate * delta`), gathered after materialization for the parameters of the loss.
 *
 * Invariants: constants and temporaries are fresh virtual nodes of the tree being built, written
 * and read only by it; optimizer state (SGD's momentum, Adam's moments and step counter) is
 * created zero-filled by the first update that needs it, labeled "<param>.<state>", kept on the
 * parameter and reused by every later update, so routines compiled from different trees continue
 * one optimization; Adam's step counter is per parameter too ("<param>.adam_step", a double
 * scalar), so two Adam updates of different parameters in one graph count their own steps, and
 * a tree increments it before anything reads it. */
#include "tensor/tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Shared pieces ------------------------------------------------------------------------ */

/* Private to the routine that runs the tree, so the schedule inlines them where it can
 * (src/sched/virtual.c). */
static cn_node *temporary(cn_graph *g, const char *label, cn_prec prec, int rank,
                          const int64_t *dims) {
  cn_node *n = cn_node_create(g->ctx, label, prec, rank, dims);
  if (n && cn_node_set_memory(n, CN_MEM_VIRTUAL) != CN_OK) return NULL;
  return n;
}

static cn_node *constant(cn_graph *g, cn_asgn_list *out, const char *label, cn_prec prec,
                         double value) {
  cn_node *c = temporary(g, label, prec, 0, NULL);
  if (c && cn_asgn_list_add(out, cn_asgn_fetch_constant(g->ctx, c, value)) != CN_OK) return NULL;
  return c;
}

/* target (=: or =-) op(refs...) pointwise over target. */
static cn_status update(cn_graph *g, cn_asgn_list *out, cn_node *target, bool init, cn_op accum,
                        cn_op op, int n, cn_node *const *refs) {
  cn_proj *p = cn_pointwise_proj(g->ctx, target, n, refs);
  if (!p) return g->ctx->status;
  cn_buffer buf[3];
  for (int i = 0; i < n; i++) buf[i] = (cn_buffer){refs[i], false};
  return cn_asgn_list_add(out, cn_asgn_accum(g->ctx, init, accum, target, op, buf, p));
}

/* A node with the dims of `like` (no padding: updates touch the unpadded cells only), virtual
 * when it is a temporary of this update. */
static cn_node *node_like(cn_graph *g, cn_node *like, const char *label, bool temp) {
  int64_t dims[CN_MAX_RANK];
  int rank = cn_node_rank(like);
  for (int a = 0; a < rank; a++) dims[a] = cn_node_dim(like, a);
  if (temp) return temporary(g, label, cn_node_prec(like), rank, dims);
  return cn_node_create(g->ctx, label, cn_node_prec(like), rank, dims);
}

/* p's state node in *slot, created on first use as "<param>.<what>": a node like p's value, or
 * a double scalar for a counter (Adam's step). */
static cn_node *state_of(cn_graph *g, cn_tensor *p, cn_node **slot, const char *what,
                         bool counter) {
  if (*slot) return *slot;
  size_t len = strlen(p->label) + strlen(what) + 2;
  char *label = cn_alloc(g->ctx, len);
  if (!label) return NULL;
  snprintf(label, len, "%s.%s", p->label, what);
  return *slot = counter ? cn_node_create(g->ctx, label, CN_PREC_DOUBLE, 0, NULL)
                         : node_like(g, p->value, label, false);
}

/* The start of an update: the loss's parameters, then the learning rate's forward code. */
static cn_status begin_update(cn_graph *g, cn_tensor *loss, const char *what, cn_tensor *lr,
                              cn_tensor_list *params, cn_asgn_list *out) {
  cn_status st = cn_code_begin(g, loss);
  if (st == CN_OK && !lr)
    st = cn_fail(g->ctx, CN_ERR_INVALID, "%s needs a learning rate tensor", what);
  if (st == CN_OK) st = cn_collect_params(g, loss, false, params);
  g->epoch++;
  if (st == CN_OK) st = cn_forward_into(g, lr, out);
  return st;
}

/* ---- Global-norm gradient clipping -------------------------------------------------------- */

/* sum =:/=+ grad * grad over every cell of grad: the product space is grad's axes (size-1 axes
 * read cell 0), the scalar sum the target. */
static cn_status add_squares(cn_graph *g, cn_asgn_list *out, cn_node *sum, bool init,
                             cn_node *grad) {
  int rank = cn_node_rank(grad), n_product = 0;
  cn_symbol iters[CN_MAX_RANK];
  int64_t sizes[CN_MAX_RANK], dims[CN_MAX_RANK];
  cn_index map[CN_MAX_RANK];
  for (int a = 0; a < rank; a++) {
    dims[a] = cn_node_dim(grad, a);
    map[a] = cn_index_fixed(0);
    if (dims[a] == 1) continue;
    char name[16];
    snprintf(name, sizeof name, "i%d", a);
    cn_symbol s = cn_symbol_create(g->ctx, name, dims[a]);
    if (s < 0) return g->ctx->status;
    iters[n_product] = s;
    sizes[n_product++] = dims[a];
    map[a] = cn_index_iter(s);
  }
  cn_proj_tensor ref = {rank, dims, map};
  cn_proj *p = cn_proj_create(g->ctx, n_product, iters, sizes, (cn_proj_tensor){0, NULL, NULL}, 2,
                              (cn_proj_tensor[]){ref, ref});
  if (!p) return g->ctx->status;
  cn_buffer buf[2] = {{grad, false}, {grad, false}};
  return cn_asgn_list_add(out, cn_asgn_accum(g->ctx, init, CN_OP_ADD, sum, CN_OP_MUL, buf, p));
}

/* As torch.nn.utils.clip_grad_norm_: the sum of squares of every gradient first, then the scale,
 * then each gradient scaled, so the scale is the same for every parameter. */
cn_asgn *cn_graph_clip_grad_norm(cn_graph *g, cn_tensor *loss, double max_norm) {
  cn_asgn_list out = {g->ctx, NULL, 0, 0};
  cn_tensor_list params = {0};
  cn_status st = cn_code_begin(g, loss);
  if (st == CN_OK && !(max_norm > 0 && isfinite(max_norm)))
    st = cn_fail(g->ctx, CN_ERR_INVALID, "clip_grad_norm: max norm %g must be positive", max_norm);
  if (st == CN_OK) st = cn_collect_params(g, loss, false, &params);
  g->epoch++;
  const cn_prec d = CN_PREC_DOUBLE;
  cn_node *sum = st == CN_OK ? temporary(g, "clip_sum_squares", d, 0, NULL) : NULL;
  if (st == CN_OK && !sum) st = g->ctx->status;
  bool first = true;
  for (int i = 0; i < params.n && st == CN_OK; i++)
    if (params.v[i]->diff) {
      st = add_squares(g, &out, sum, first, params.v[i]->grad);
      first = false;
    }
  if (st != CN_OK || first) return cn_asgn_list_finish(&out, st);
  /* scale =: min(1, max_norm / (sqrt(sum) + 1e-6)) */
  cn_node *one = constant(g, &out, "clip_const", d, 1);
  cn_node *max_c = one ? constant(g, &out, "clip_const", d, max_norm) : NULL;
  cn_node *eps = max_c ? constant(g, &out, "clip_const", d, 1e-6) : NULL;
  cn_node *norm = eps ? temporary(g, "clip_norm", d, 0, NULL) : NULL;
  cn_node *den = norm ? temporary(g, "clip_denominator", d, 0, NULL) : NULL;
  cn_node *ratio = den ? temporary(g, "clip_ratio", d, 0, NULL) : NULL;
  cn_node *scale = ratio ? temporary(g, "clip_scale", d, 0, NULL) : NULL;
  if (!scale) return cn_asgn_list_finish(&out, g->ctx->status);
  st = update(g, &out, norm, true, CN_OP_ADD, CN_OP_SQRT, 1, &sum);
  if (st == CN_OK)
    st = update(g, &out, den, true, CN_OP_ADD, CN_OP_ADD, 2, (cn_node *[]){norm, eps});
  if (st == CN_OK)
    st = update(g, &out, ratio, true, CN_OP_ADD, CN_OP_DIV, 2, (cn_node *[]){max_c, den});
  if (st == CN_OK)
    st = update(g, &out, scale, true, CN_OP_ADD, CN_OP_MIN, 2, (cn_node *[]){one, ratio});
  for (int i = 0; i < params.n && st == CN_OK; i++)
    if (params.v[i]->diff) /* p.grad =: scale * p.grad */
      st = update(g, &out, params.v[i]->grad, true, CN_OP_ADD, CN_OP_MUL, 2,
                  (cn_node *[]){scale, params.v[i]->grad});
  return cn_asgn_list_finish(&out, st);
}

/* p.grad =: factor * p.grad, the factor a constant of each gradient's precision. */
cn_asgn *cn_graph_scale_grads(cn_graph *g, cn_tensor *loss, double factor) {
  cn_asgn_list out = {g->ctx, NULL, 0, 0};
  cn_tensor_list params = {0};
  cn_status st = cn_code_begin(g, loss);
  if (st == CN_OK && !isfinite(factor))
    st = cn_fail(g->ctx, CN_ERR_INVALID, "scale_grads: factor %g is not finite", factor);
  if (st == CN_OK) st = cn_collect_params(g, loss, false, &params);
  g->epoch++;
  for (int i = 0; i < params.n && st == CN_OK; i++) {
    cn_node *grad = params.v[i]->grad;
    if (!params.v[i]->diff) continue;
    cn_node *c = constant(g, &out, "scale_const", grad->prec, factor);
    st = c ? update(g, &out, grad, true, CN_OP_ADD, CN_OP_MUL, 2, (cn_node *[]){c, grad})
           : g->ctx->status;
  }
  return cn_asgn_list_finish(&out, st);
}

/* ---- SGD ------------------------------------------------------------------------------------ */

static cn_status sgd_one(cn_graph *g, cn_asgn_list *out, cn_tensor *p, const cn_sgd *sgd,
                         cn_node *lr) {
  cn_ctx *ctx = g->ctx;
  cn_status st = CN_OK;
  cn_node *delta = p->grad;
  if (sgd->weight_decay != 0) { /* delta =: weight_decay * p + p.grad */
    cn_node *wd = constant(g, out, "sgd_const", p->prec, sgd->weight_decay);
    if (!wd || !(delta = node_like(g, p->value, "sgd_delta", true))) return ctx->status;
    st = update(g, out, delta, true, CN_OP_ADD, CN_OP_FMA, 3, (cn_node *[]){wd, p->value, p->grad});
  }
  if (st == CN_OK && sgd->momentum != 0) { /* m =: momentum * m + delta */
    cn_node *mu = constant(g, out, "sgd_const", p->prec, sgd->momentum);
    cn_node *m = mu ? state_of(g, p, &p->sgd_momentum, "sgd_momentum", false) : NULL;
    if (!m) return ctx->status;
    st = update(g, out, m, true, CN_OP_ADD, CN_OP_FMA, 3, (cn_node *[]){mu, m, delta});
    if (st == CN_OK && sgd->nesterov) { /* delta + momentum * m */
      cn_node *step = node_like(g, p->value, "sgd_nesterov", true);
      if (!step) return ctx->status;
      st = update(g, out, step, true, CN_OP_ADD, CN_OP_FMA, 3, (cn_node *[]){mu, m, delta});
      delta = step;
    } else {
      delta = m;
    }
  }
  if (st == CN_OK) /* p =- learning_rate * delta */
    st = update(g, out, p->value, false, CN_OP_SUB, CN_OP_MUL, 2, (cn_node *[]){lr, delta});
  return st;
}

cn_asgn *cn_graph_sgd_update(cn_graph *g, cn_tensor *loss, const cn_sgd *sgd) {
  cn_asgn_list out = {g->ctx, NULL, 0, 0};
  cn_tensor_list params = {0};
  cn_status st =
      begin_update(g, loss, "sgd_update", sgd ? sgd->learning_rate : NULL, &params, &out);
  for (int i = 0; i < params.n && st == CN_OK; i++)
    if (params.v[i]->diff) st = sgd_one(g, &out, params.v[i], sgd, sgd->learning_rate->value);
  return cn_asgn_list_finish(&out, st);
}

/* ---- Adam and AdamW ------------------------------------------------------------------------- */

cn_adam cn_adam_defaults(cn_tensor *learning_rate) {
  return (cn_adam){learning_rate, 0.9, 0.999, 1e-8, 0, false, false};
}

/* The coefficients, taken as given (cn_adam_defaults has the usual ones), and the tree's
 * constants every parameter reads. The scalars are double: a step counter stays exact, and
 * 1 - beta2^t (1e-3 at t = 1) keeps its digits. */
typedef struct {
  double beta1, beta2, eps, weight_decay;
  bool decoupled, decay_matrices_only;
  cn_node *lr, *one, *beta1_c, *beta2_c, *one_minus_beta1, *one_minus_beta2, *eps_c, *wd_c;
} adam_tree;

static cn_status adam_config(cn_graph *g, const cn_adam *adam, adam_tree *a) {
  a->beta1 = adam->beta1;
  a->beta2 = adam->beta2;
  a->eps = adam->eps;
  a->weight_decay = adam->weight_decay;
  a->decoupled = adam->decoupled;
  a->decay_matrices_only = adam->decay_matrices_only;
  if (!(a->beta1 >= 0 && a->beta1 < 1) || !(a->beta2 >= 0 && a->beta2 < 1))
    return cn_fail(g->ctx, CN_ERR_INVALID, "adam_update: beta1 %g and beta2 %g must lie in [0, 1)",
                   a->beta1, a->beta2);
  if (!(a->eps > 0 && isfinite(a->eps)))
    return cn_fail(g->ctx, CN_ERR_INVALID, "adam_update: eps %g must be positive", a->eps);
  if (!isfinite(a->weight_decay))
    return cn_fail(g->ctx, CN_ERR_INVALID, "adam_update: weight decay %g is not finite",
                   a->weight_decay);
  return CN_OK;
}

/* inv =: 1 / (1 - beta^step), beta a constant node (beta = 0 gives 1: pow(0, t) is 0 for
 * t >= 1). */
static cn_node *inverse_bias_correction(cn_graph *g, cn_asgn_list *out, cn_node *beta, cn_node *one,
                                        cn_node *step) {
  cn_node *power = temporary(g, "adam_beta_t", CN_PREC_DOUBLE, 0, NULL);
  cn_node *bc = power ? temporary(g, "adam_bias_correction", CN_PREC_DOUBLE, 0, NULL) : NULL;
  cn_node *inv = bc ? temporary(g, "adam_inv_bias_correction", CN_PREC_DOUBLE, 0, NULL) : NULL;
  if (!inv ||
      update(g, out, power, true, CN_OP_ADD, CN_OP_POW, 2, (cn_node *[]){beta, step}) != CN_OK ||
      update(g, out, bc, true, CN_OP_ADD, CN_OP_SUB, 2, (cn_node *[]){one, power}) != CN_OK ||
      update(g, out, inv, true, CN_OP_ADD, CN_OP_RECIP, 1, &bc) != CN_OK)
    return NULL;
  return inv;
}

/* The constants of adam_tree. */
static cn_status adam_constants(cn_graph *g, cn_asgn_list *out, adam_tree *a) {
  const cn_prec d = CN_PREC_DOUBLE;
  if (!(a->one = constant(g, out, "adam_const", d, 1)) ||
      !(a->beta1_c = constant(g, out, "adam_const", d, a->beta1)) ||
      !(a->beta2_c = constant(g, out, "adam_const", d, a->beta2)) ||
      !(a->one_minus_beta1 = constant(g, out, "adam_const", d, 1 - a->beta1)) ||
      !(a->one_minus_beta2 = constant(g, out, "adam_const", d, 1 - a->beta2)) ||
      !(a->eps_c = constant(g, out, "adam_const", d, a->eps)) ||
      !(a->wd_c = constant(g, out, "adam_const", d, a->weight_decay)))
    return g->ctx->status;
  return CN_OK;
}

/* For one parameter p, with t its step counter and gr its gradient (plus weight_decay * p unless
 * decoupled):
 *   t =+ 1;  [p =- lr * weight_decay * p]  m =: beta1 * m;  m =+ (1 - beta1) * gr;
 *   v =: beta2 * v;  v =+ (1 - beta2) * gr * gr;
 *   den =: sqrt(v * inv_bc2) + eps;  p =- lr * inv_bc1 * (m / den)
 * with inv_bc = 1 / (1 - beta^t). The counter is the parameter's, as its moments are: the bias
 * correction undoes the zero start of exactly these moments, however many trees update p and
 * however often each runs. */
static cn_status adam_one(cn_graph *g, cn_asgn_list *out, cn_tensor *p, const adam_tree *a) {
  cn_ctx *ctx = g->ctx;
  cn_node *step = state_of(g, p, &p->adam_step, "adam_step", true);
  if (!step || update(g, out, step, false, CN_OP_ADD, CN_OP_ID, 1, (cn_node *[]){a->one}) != CN_OK)
    return ctx->status;
  cn_node *inv_bc1 = inverse_bias_correction(g, out, a->beta1_c, a->one, step);
  cn_node *inv_bc2 = inv_bc1 ? inverse_bias_correction(g, out, a->beta2_c, a->one, step) : NULL;
  if (!inv_bc2) return ctx->status;
  cn_node *gr = p->grad;
  bool matrix = cn_node_rank(p->value) >= 2 && !p->decay_exempt;
  bool decay = a->weight_decay != 0 && (!a->decay_matrices_only || matrix);
  if (decay && a->decoupled &&
      update(g, out, p->value, false, CN_OP_SUB, CN_OP_MUL3, 3,
             (cn_node *[]){a->lr, a->wd_c, p->value}) != CN_OK)
    return ctx->status;
  if (decay && !a->decoupled &&
      (!(gr = node_like(g, p->value, "adam_grad", true)) ||
       update(g, out, gr, true, CN_OP_ADD, CN_OP_FMA, 3,
              (cn_node *[]){a->wd_c, p->value, p->grad}) != CN_OK))
    return ctx->status;
  cn_node *m = state_of(g, p, &p->adam_m, "adam_m", false);
  cn_node *v = m ? state_of(g, p, &p->adam_v, "adam_v", false) : NULL;
  cn_node *scaled = v ? node_like(g, p->value, "adam_v_hat", true) : NULL;
  cn_node *root = scaled ? node_like(g, p->value, "adam_sqrt_v_hat", true) : NULL;
  cn_node *den = root ? node_like(g, p->value, "adam_denominator", true) : NULL;
  cn_node *ratio = den ? node_like(g, p->value, "adam_ratio", true) : NULL;
  if (!ratio) return ctx->status;
  const struct {
    cn_node *target;
    bool init;
    cn_op accum, op;
    int n;
    cn_node *refs[3];
  } steps[] = {
      {m, true, CN_OP_ADD, CN_OP_MUL, 2, {a->beta1_c, m}},
      {m, false, CN_OP_ADD, CN_OP_MUL, 2, {a->one_minus_beta1, gr}},
      {v, true, CN_OP_ADD, CN_OP_MUL, 2, {a->beta2_c, v}},
      {v, false, CN_OP_ADD, CN_OP_MUL3, 3, {a->one_minus_beta2, gr, gr}},
      {scaled, true, CN_OP_ADD, CN_OP_MUL, 2, {v, inv_bc2}},
      {root, true, CN_OP_ADD, CN_OP_SQRT, 1, {scaled}},
      {den, true, CN_OP_ADD, CN_OP_ADD, 2, {root, a->eps_c}},
      {ratio, true, CN_OP_ADD, CN_OP_DIV, 2, {m, den}},
      {p->value, false, CN_OP_SUB, CN_OP_MUL3, 3, {a->lr, inv_bc1, ratio}},
  };
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    cn_status st = update(g, out, steps[i].target, steps[i].init, steps[i].accum, steps[i].op,
                          steps[i].n, steps[i].refs);
    if (st != CN_OK) return st;
  }
  return CN_OK;
}

cn_asgn *cn_graph_adam_update(cn_graph *g, cn_tensor *loss, const cn_adam *adam) {
  cn_asgn_list out = {g->ctx, NULL, 0, 0};
  cn_tensor_list params = {0};
  adam_tree a = {0};
  cn_status st =
      begin_update(g, loss, "adam_update", adam ? adam->learning_rate : NULL, &params, &out);
  if (st == CN_OK) st = adam_config(g, adam, &a);
  if (st == CN_OK) {
    a.lr = adam->learning_rate->value;
    st = adam_constants(g, &out, &a);
  }
  for (int i = 0; i < params.n && st == CN_OK; i++)
    if (params.v[i]->diff) st = adam_one(g, &out, params.v[i], &a);
  return cn_asgn_list_finish(&out, st);
}

/* ---- Training state ------------------------------------------------------------------------- */

static int by_node_id(const void *a, const void *b) {
  int x = cn_node_id(((const cn_named_node *)a)->node);
  int y = cn_node_id(((const cn_named_node *)b)->node);
  return (x > y) - (x < y);
}

static int by_name(const void *a, const void *b) {
  return strcmp(((const cn_named_node *)a)->name, ((const cn_named_node *)b)->name);
}

int cn_graph_state(cn_graph *g, cn_tensor *t, cn_named_node *out, int cap) {
  cn_ctx *ctx = g->ctx;
  cn_tensor_list params = {0};
  if (cn_code_begin(g, t) != CN_OK || cn_collect_params(g, t, false, &params) != CN_OK) return -1;
  /* at most four state nodes per parameter */
  size_t max = (size_t)params.n * 5;
  cn_named_node *all = cn_alloc(ctx, (max ? max : 1) * sizeof *all);
  cn_named_node *sorted = all ? cn_alloc(ctx, (max ? max : 1) * sizeof *sorted) : NULL;
  if (!sorted) return -1;
  int n = 0;
  for (int i = 0; i < params.n; i++)
    all[n++] = (cn_named_node){params.v[i]->label, params.v[i]->value};
  int n_params = n;
  for (int i = 0; i < params.n; i++) {
    cn_tensor *p = params.v[i];
    cn_node *state[4] = {p->sgd_momentum, p->adam_m, p->adam_v, p->adam_step};
    for (int k = 0; k < 4; k++)
      if (state[k]) all[n++] = (cn_named_node){cn_node_label(state[k]), state[k]};
  }
  /* the parameters by creation already; the state by creation too, which is the order of ids */
  qsort(all + n_params, (size_t)(n - n_params), sizeof *all, by_node_id);
  memcpy(sorted, all, (size_t)n * sizeof *all);
  qsort(sorted, (size_t)n, sizeof *sorted, by_name);
  for (int i = 1; i < n; i++)
    if (strcmp(sorted[i - 1].name, sorted[i].name) == 0) {
      cn_fail(ctx, CN_ERR_INVALID,
              "graph state: two entries are labeled \"%s\" (nodes #%d and #%d): a checkpoint "
              "names each node once; relabel one of the parameters",
              sorted[i].name, cn_node_id(sorted[i - 1].node), cn_node_id(sorted[i].node));
      return -1;
    }
  for (int i = 0; i < n && i < cap; i++) out[i] = all[i];
  return n;
}
