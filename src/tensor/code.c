/* Gathering code from the graph (convolution-is-a-contraction "What the tensor carries",
 * contraction-is-emergent's SGD producer example): forward code (each sub-expression once, in
 * dependency order, parameters only read), parameter initialization (held-out code gathered
 * transitively, never handing a parameter out twice), backprop (zero gradients, loss.grad =: 1,
 * gradient assignments in reverse order, `=+` so a tensor used twice gets both contributions),
 * grad_update and sgd_update.
 *
 * Invariants: every entry point materializes the graph first; traversals mark tensors with a
 * fresh graph epoch, so shared sub-expressions are visited once per traversal. */
#include "tensor/tensor.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  cn_ctx *ctx;
  cn_asgn **v;
  int n, cap;
} asgn_list;

static cn_status add(asgn_list *l, cn_asgn *a) {
  if (!a) return l->ctx->status ? l->ctx->status : CN_ERR_NOMEM;
  if (!cn_arena_grow(l->ctx, (void **)&l->v, &l->cap, l->n + 1, sizeof(cn_asgn *)))
    return CN_ERR_NOMEM;
  l->v[l->n++] = a;
  return CN_OK;
}

static cn_asgn *finish(asgn_list *l, cn_status st) {
  if (st != CN_OK) return NULL;
  return l->n == 0 ? cn_asgn_noop(l->ctx) : l->n == 1 ? l->v[0] : cn_asgn_seq(l->ctx, l->n, l->v);
}

typedef struct {
  cn_tensor **v;
  int n, cap;
} tensor_list;

/* Post-order over operands from t; parameters are leaves (their code is held out). */
static cn_status order_from(cn_graph *g, cn_tensor *t, tensor_list *out) {
  if (t->visit == g->epoch) return CN_OK;
  t->visit = g->epoch;
  if (!t->is_param)
    for (int i = 0; i < t->n_args; i++) {
      cn_status st = order_from(g, t->args[i], out);
      if (st != CN_OK) return st;
    }
  if (!cn_arena_grow(g->ctx, (void **)&out->v, &out->cap, out->n + 1, sizeof(cn_tensor *)))
    return CN_ERR_NOMEM;
  out->v[out->n++] = t;
  return CN_OK;
}

static cn_asgn *fetch_code(cn_tensor *t) {
  cn_ctx *ctx = t->g->ctx;
  switch (t->fetch) {
  case CN_TF_RANGE_OVER_OFFSETS: return cn_asgn_fetch_range_over_offsets(ctx, t->value);
  case CN_TF_EMBED_SELF_ID: return cn_asgn_fetch_embed_self_id(ctx, t->value);
  case CN_TF_EMBED_SYMBOL: return cn_asgn_fetch_embed_symbol(ctx, t->value, t->sym);
  case CN_TF_EMBED_DIM: {
    /* the axis of args[0] (referenced for its shape, not an operand: n_args is 0), read when
     * lowered: its size is final once materialized */
    int64_t *dim = cn_alloc(ctx, sizeof *dim);
    if (!dim) return NULL;
    cn_tensor *of = t->args[0];
    if ((*dim = cn_node_dim(of->value, t->embed_axis)) < 0) {
      cn_fail(ctx, CN_ERR_INVALID, "embed_dim: \"%s\" (#%d) has no axis %d (shape %s)", of->label,
              of->id, t->embed_axis, cn_tensor_shape(of));
      return NULL;
    }
    return cn_asgn_fetch_embed_dim(ctx, t->value, dim);
  }
  }
  return NULL;
}

/* The code computing t's value from its operands' values. */
static cn_status own_code(cn_tensor *t, asgn_list *out) {
  cn_ctx *ctx = t->g->ctx;
  switch (t->kind) {
  case CN_TK_NUMBER:
    return add(out, t->number_bits ? cn_asgn_fetch_constant_bits(ctx, t->value, t->bits)
                                   : cn_asgn_fetch_constant(ctx, t->value, t->number));
  case CN_TK_DATA: return CN_OK;   /* copied into the node at materialization */
  case CN_TK_BUFFER: return CN_OK; /* written by standalone updates only */
  case CN_TK_VIEW: return CN_OK;   /* another tensor's gradient, computed by backprop */
  case CN_TK_FETCH: return add(out, fetch_code(t));
  case CN_TK_ACCUM:
  case CN_TK_TILE:
  case CN_TK_PARAM: return add(out, cn_tensor_forward_asgn(t));
  case CN_TK_VEC:
    return add(out, cn_asgn_vec_unop(ctx, t->prim, t->value, (cn_buffer){t->args[0]->value, false},
                                     t->proj));
  }
  return CN_OK;
}

static cn_status forward_into(cn_graph *g, cn_tensor *t, asgn_list *out) {
  tensor_list order = {0};
  cn_status st = order_from(g, t, &order);
  for (int i = 0; i < order.n && st == CN_OK; i++)
    if (!order.v[i]->is_param) st = own_code(order.v[i], out);
  return st;
}

static cn_status begin(cn_graph *g, cn_tensor *t) {
  if (!t) return cn_fail(g->ctx, CN_ERR_INVALID, "code of a NULL tensor");
  g->epoch++;
  return cn_graph_materialize(g);
}

cn_asgn *cn_graph_forward(cn_graph *g, cn_tensor *t) {
  asgn_list out = {g->ctx, NULL, 0, 0};
  cn_status st = begin(g, t);
  if (st == CN_OK) st = forward_into(g, t, &out);
  return finish(&out, st);
}

static int by_creation(const void *a, const void *b) {
  int x = (*(cn_tensor *const *)a)->id, y = (*(cn_tensor *const *)b)->id;
  return (x > y) - (x < y);
}

/* Parameters reachable from t through forward code; with `through_inits`, also those their
 * init expressions read (transitively). Creation order, which is the order of ids: sorting the
 * parameters the traversal met keeps the cost to the part of the graph below t, where scanning
 * every tensor of the graph would cost a whole-graph pass per call. */
static cn_status collect_params(cn_graph *g, cn_tensor *t, bool through_inits, tensor_list *out) {
  tensor_list order = {0};
  cn_status st = order_from(g, t, &order);
  for (int i = 0; i < order.n && st == CN_OK; i++) {
    cn_tensor *p = order.v[i];
    if (!p->is_param) continue;
    if (through_inits && p->n_args) st = order_from(g, p->args[0], &order);
    if (st != CN_OK) break;
    if (!cn_arena_grow(g->ctx, (void **)&out->v, &out->cap, out->n + 1, sizeof(cn_tensor *)))
      return CN_ERR_NOMEM;
    out->v[out->n++] = p;
  }
  if (st == CN_OK && out->n > 1) qsort(out->v, (size_t)out->n, sizeof *out->v, by_creation);
  return st;
}

cn_asgn *cn_graph_init_params(cn_graph *g, cn_tensor *t) {
  asgn_list out = {g->ctx, NULL, 0, 0};
  tensor_list params = {0};
  cn_status st = begin(g, t);
  if (st == CN_OK) st = collect_params(g, t, true, &params);
  g->epoch++; /* one traversal for all init code: shared sub-expressions are computed once */
  for (int i = 0; i < params.n && st == CN_OK; i++) {
    cn_tensor *p = params.v[i];
    if (p->seeded) continue;
    if (p->n_args) st = forward_into(g, p->args[0], &out);
    if (st == CN_OK) st = own_code(p, &out);
    p->seeded = true;
  }
  return finish(&out, st);
}

int cn_graph_params(cn_graph *g, cn_tensor *t, cn_tensor **out, int cap) {
  tensor_list params = {0};
  if (begin(g, t) != CN_OK || collect_params(g, t, false, &params) != CN_OK) return -1;
  for (int i = 0; i < params.n && i < cap; i++) out[i] = params.v[i];
  return params.n;
}

static cn_status backprop_into(cn_graph *g, cn_tensor *loss, asgn_list *out) {
  if (!loss->diff)
    return cn_fail(g->ctx, CN_ERR_INVALID,
                   "backprop of \"%s\" (#%d): it does not depend on any differentiable tensor",
                   loss->label, loss->id);
  tensor_list order = {0};
  g->epoch++;
  cn_status st = order_from(g, loss, &order);
  for (int i = 0; i < order.n && st == CN_OK; i++)
    if (order.v[i]->diff) st = add(out, cn_asgn_fetch_constant(g->ctx, order.v[i]->grad, 0));
  if (st == CN_OK) st = add(out, cn_asgn_fetch_constant(g->ctx, loss->grad, 1));
  for (int i = order.n - 1; i >= 0 && st == CN_OK; i--) {
    cn_tensor *t = order.v[i];
    if (t->diff && !t->is_param && (t->kind == CN_TK_ACCUM || t->kind == CN_TK_TILE))
      st = cn_tensor_backprop_asgn(t, &out->v, &out->n, &out->cap);
  }
  return st;
}

cn_asgn *cn_graph_backprop(cn_graph *g, cn_tensor *loss) {
  asgn_list out = {g->ctx, NULL, 0, 0};
  cn_status st = begin(g, loss);
  if (st == CN_OK) st = backprop_into(g, loss, &out);
  return finish(&out, st);
}

cn_asgn *cn_graph_grad_update(cn_graph *g, cn_tensor *loss) {
  asgn_list out = {g->ctx, NULL, 0, 0};
  cn_status st = begin(g, loss);
  if (st == CN_OK) st = forward_into(g, loss, &out);
  if (st == CN_OK) st = backprop_into(g, loss, &out);
  return finish(&out, st);
}

/* ---- SGD --------------------------------------------------------------------------------------
 */

/* The constants and temporaries below are fresh nodes of one cn_graph_sgd_update tree, written
 * and read only by it and never handed out: virtual (private to the routine that runs the tree),
 * so the schedule inlines them where it can (src/sched/virtual.c). */
static cn_node *temporary(cn_graph *g, const char *label, cn_prec prec, int rank,
                          const int64_t *dims) {
  cn_node *n = cn_node_create(g->ctx, label, prec, rank, dims);
  if (n && cn_node_set_memory(n, CN_MEM_VIRTUAL) != CN_OK) return NULL;
  return n;
}

static cn_node *constant(cn_graph *g, asgn_list *out, cn_prec prec, double value) {
  cn_node *c = temporary(g, "sgd_const", prec, 0, NULL);
  if (c && add(out, cn_asgn_fetch_constant(g->ctx, c, value)) != CN_OK) return NULL;
  return c;
}

/* target (=: or =-) op(refs...) pointwise over target. */
static cn_status update(cn_graph *g, asgn_list *out, cn_node *target, bool init, cn_op accum,
                        cn_op op, int n, cn_node *const *refs) {
  cn_proj *p = cn_pointwise_proj(g->ctx, target, n, refs);
  if (!p) return g->ctx->status;
  cn_buffer buf[3];
  for (int i = 0; i < n; i++) buf[i] = (cn_buffer){refs[i], false};
  return add(out, cn_asgn_accum(g->ctx, init, accum, target, op, buf, p));
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

static cn_status sgd_one(cn_graph *g, asgn_list *out, cn_tensor *p, const cn_sgd *sgd,
                         cn_node *lr) {
  cn_ctx *ctx = g->ctx;
  cn_status st = CN_OK;
  cn_node *delta = p->grad;
  if (sgd->weight_decay != 0) { /* delta =: weight_decay * p + p.grad */
    cn_node *wd = constant(g, out, p->prec, sgd->weight_decay);
    if (!wd || !(delta = node_like(g, p->value, "sgd_delta", true))) return ctx->status;
    st = update(g, out, delta, true, CN_OP_ADD, CN_OP_FMA, 3, (cn_node *[]){wd, p->value, p->grad});
  }
  if (st == CN_OK && sgd->momentum != 0) { /* m =: momentum * m + delta */
    cn_node *mu = constant(g, out, p->prec, sgd->momentum);
    if (!p->sgd_momentum && !(p->sgd_momentum = node_like(g, p->value, "sgd_momentum", false)))
      return ctx->status;
    if (!mu) return ctx->status;
    cn_node *m = p->sgd_momentum;
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
  asgn_list out = {g->ctx, NULL, 0, 0};
  tensor_list params = {0};
  cn_status st = begin(g, loss);
  if (st == CN_OK && (!sgd || !sgd->learning_rate))
    st = cn_fail(g->ctx, CN_ERR_INVALID, "sgd_update needs a learning rate tensor");
  if (st == CN_OK) st = cn_graph_materialize(g);
  if (st == CN_OK) st = collect_params(g, loss, false, &params);
  g->epoch++;
  if (st == CN_OK) st = forward_into(g, sgd->learning_rate, &out);
  for (int i = 0; i < params.n && st == CN_OK; i++)
    if (params.v[i]->diff) st = sgd_one(g, &out, params.v[i], sgd, sgd->learning_rate->value);
  return finish(&out, st);
}
