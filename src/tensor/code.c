/* Gathering code from the graph (convolution-is-a-contraction "What the tensor carries"): forward
 * code (each sub-expression once, in dependency order, parameters only read), parameter
 * initialization (held-out code gathered transitively, never handing a parameter out twice),
 * backprop (zero gradients, loss.grad =: 1, gradient assignments in reverse order, `=+` so a
 * tensor used twice gets both contributions) and grad_update. The optimizers' updates (optim.c)
 * gather with the helpers shared through tensor.h.
 *
 * Invariants: every entry point materializes the graph first; traversals mark tensors with a
 * fresh graph epoch, so shared sub-expressions are visited once per traversal. */
#include "tensor/tensor.h"

#include <stdlib.h>
#include <string.h>

cn_status cn_asgn_list_add(cn_asgn_list *l, cn_asgn *a) {
  if (!a) return l->ctx->status ? l->ctx->status : CN_ERR_NOMEM;
  if (!cn_arena_grow(l->ctx, (void **)&l->v, &l->cap, l->n + 1, sizeof(cn_asgn *)))
    return CN_ERR_NOMEM;
  l->v[l->n++] = a;
  return CN_OK;
}

cn_asgn *cn_asgn_list_finish(cn_asgn_list *l, cn_status st) {
  if (st != CN_OK) return NULL;
  return l->n == 0 ? cn_asgn_noop(l->ctx) : l->n == 1 ? l->v[0] : cn_asgn_seq(l->ctx, l->n, l->v);
}

/* Post-order over operands from t; parameters are leaves (their code is held out). Iterative,
 * with an explicit stack of (tensor, next operand), so a graph's depth costs no C stack (a chain
 * of 100 000 operations is an ordinary graph); the order is the recursive one's: a tensor is
 * marked when first reached, its operands are visited left to right, and it is appended after
 * them. */
typedef struct {
  cn_tensor *t;
  int next; /* the operand to visit next */
} walk_frame;

static cn_status order_from(cn_graph *g, cn_tensor *t, cn_tensor_list *out) {
  if (t->visit == g->epoch) return CN_OK;
  t->visit = g->epoch;
  walk_frame *stack = NULL;
  int depth = 0, cap = 0;
  if (!cn_arena_grow(g->ctx, (void **)&stack, &cap, 1, sizeof *stack)) return CN_ERR_NOMEM;
  stack[depth++] = (walk_frame){t, 0};
  while (depth > 0) {
    walk_frame *f = &stack[depth - 1];
    if (!f->t->is_param && f->next < f->t->n_args) {
      cn_tensor *arg = f->t->args[f->next++];
      if (arg->visit == g->epoch) continue;
      arg->visit = g->epoch;
      if (!cn_arena_grow(g->ctx, (void **)&stack, &cap, depth + 1, sizeof *stack))
        return CN_ERR_NOMEM;
      stack[depth++] = (walk_frame){arg, 0};
      continue;
    }
    if (!cn_arena_grow(g->ctx, (void **)&out->v, &out->cap, out->n + 1, sizeof(cn_tensor *)))
      return CN_ERR_NOMEM;
    out->v[out->n++] = f->t;
    depth--;
  }
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
static cn_status own_code(cn_tensor *t, cn_asgn_list *out) {
  cn_ctx *ctx = t->g->ctx;
  cn_status st = t->label_check ? cn_label_check_arm(t) : CN_OK;
  if (st != CN_OK) return st;
  switch (t->kind) {
  case CN_TK_NUMBER:
    return cn_asgn_list_add(out, t->number_bits
                                     ? cn_asgn_fetch_constant_bits(ctx, t->value, t->bits)
                                     : cn_asgn_fetch_constant(ctx, t->value, t->number));
  case CN_TK_DATA: return CN_OK;   /* copied into the node at materialization */
  case CN_TK_BUFFER: return CN_OK; /* written by standalone updates only */
  case CN_TK_VIEW: return CN_OK;   /* another tensor's gradient, computed by backprop */
  case CN_TK_FETCH: return cn_asgn_list_add(out, fetch_code(t));
  case CN_TK_ACCUM:
  case CN_TK_TILE:
  case CN_TK_PARAM: return cn_asgn_list_add(out, cn_tensor_forward_asgn(t));
  case CN_TK_VEC:
    return cn_asgn_list_add(out, cn_asgn_vec_unop(ctx, t->prim, t->value,
                                                  (cn_buffer){t->args[0]->value, false}, t->proj));
  }
  return CN_OK;
}

/* The code of u, which then counts as computed (cn_graph_forward_embedded reads it). */
static cn_status computed_code(cn_tensor *u, cn_asgn_list *out) {
  cn_status st = own_code(u, out);
  u->computed = st == CN_OK;
  return st;
}

cn_status cn_forward_into(cn_graph *g, cn_tensor *t, cn_asgn_list *out) {
  cn_tensor_list order = {0};
  cn_status st = order_from(g, t, &order);
  for (int i = 0; i < order.n && st == CN_OK; i++)
    if (!order.v[i]->is_param) st = computed_code(order.v[i], out);
  return st;
}

/* Each tensor's first consumer, for the tensors built since the last scan: operands are fixed
 * when a tensor is built, so one pass over the new ones keeps every `consumer` current. */
static void scan_consumers(cn_graph *g) {
  for (; g->n_consumers_scanned < g->n_tensors; g->n_consumers_scanned++) {
    cn_tensor *c = g->tensors[g->n_consumers_scanned];
    for (int k = 0; k < c->n_args; k++)
      if (!c->args[k]->consumer) c->args[k]->consumer = c;
  }
}

cn_asgn *cn_graph_forward_embedded(cn_graph *g, cn_tensor *t) {
  cn_asgn_list out = {g->ctx, NULL, 0, 0};
  cn_tensor_list order = {0};
  cn_status st = cn_code_begin(g, t);
  if (st == CN_OK) {
    scan_consumers(g);
    st = order_from(g, t, &order);
  }
  if (st != CN_OK) return NULL;
  /* Consumers before operands (the reverse of the post-order): an operand is needed by a needed
   * consumer that embeds it, or by any needed consumer while no code computed it yet. */
  t->needed = g->epoch;
  for (int i = order.n - 1; i >= 0; i--) {
    cn_tensor *c = order.v[i];
    if (c->needed != g->epoch || c->is_param) continue;
    for (int k = 0; k < c->n_args; k++)
      if (!c->args[k]->computed || c->args[k]->consumer == c) c->args[k]->needed = g->epoch;
  }
  for (int i = 0; i < order.n && st == CN_OK; i++)
    if (order.v[i]->needed == g->epoch && !order.v[i]->is_param)
      st = computed_code(order.v[i], &out);
  return cn_asgn_list_finish(&out, st);
}

cn_status cn_code_begin(cn_graph *g, cn_tensor *t) {
  if (!t) return cn_fail(g->ctx, CN_ERR_INVALID, "code of a NULL tensor");
  g->epoch++;
  return cn_graph_materialize(g);
}

cn_asgn *cn_graph_forward(cn_graph *g, cn_tensor *t) {
  cn_asgn_list out = {g->ctx, NULL, 0, 0};
  cn_status st = cn_code_begin(g, t);
  if (st == CN_OK) st = cn_forward_into(g, t, &out);
  return cn_asgn_list_finish(&out, st);
}

static int by_creation(const void *a, const void *b) {
  int x = (*(cn_tensor *const *)a)->id, y = (*(cn_tensor *const *)b)->id;
  return (x > y) - (x < y);
}

/* Parameters reachable from t through forward code; with `through_inits`, also those their
 * init expressions read (transitively). Creation order, which is the order of ids: sorting the
 * parameters the traversal met keeps the cost to the part of the graph below t, where scanning
 * every tensor of the graph would cost a whole-graph pass per call. */
cn_status cn_collect_params(cn_graph *g, cn_tensor *t, bool through_inits, cn_tensor_list *out) {
  cn_tensor_list order = {0};
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
  cn_asgn_list out = {g->ctx, NULL, 0, 0};
  cn_tensor_list params = {0};
  cn_status st = cn_code_begin(g, t);
  if (st == CN_OK) st = cn_collect_params(g, t, true, &params);
  g->epoch++; /* one traversal for all init code: shared sub-expressions are computed once */
  for (int i = 0; i < params.n && st == CN_OK; i++) {
    cn_tensor *p = params.v[i];
    if (p->seeded) continue;
    if (p->n_args) st = cn_forward_into(g, p->args[0], &out);
    if (st == CN_OK) st = own_code(p, &out);
    p->seeded = true;
  }
  return cn_asgn_list_finish(&out, st);
}

int cn_graph_params(cn_graph *g, cn_tensor *t, cn_tensor **out, int cap) {
  cn_tensor_list params = {0};
  if (cn_code_begin(g, t) != CN_OK || cn_collect_params(g, t, false, &params) != CN_OK) return -1;
  for (int i = 0; i < params.n && i < cap; i++) out[i] = params.v[i];
  return params.n;
}

static cn_status backprop_into(cn_graph *g, cn_tensor *loss, cn_asgn_list *out) {
  if (!loss->diff)
    return cn_fail(g->ctx, CN_ERR_INVALID,
                   "backprop of \"%s\" (#%d): it does not depend on any differentiable tensor",
                   loss->label, loss->id);
  cn_tensor_list order = {0};
  g->epoch++;
  cn_status st = order_from(g, loss, &order);
  for (int i = 0; i < order.n && st == CN_OK; i++)
    if (order.v[i]->diff)
      st = cn_asgn_list_add(out, cn_asgn_fetch_constant(g->ctx, order.v[i]->grad, 0));
  if (st == CN_OK) st = cn_asgn_list_add(out, cn_asgn_fetch_constant(g->ctx, loss->grad, 1));
  for (int i = order.n - 1; i >= 0 && st == CN_OK; i--) {
    cn_tensor *t = order.v[i];
    if (t->diff && !t->is_param && (t->kind == CN_TK_ACCUM || t->kind == CN_TK_TILE))
      st = cn_tensor_backprop_asgn(t, &out->v, &out->n, &out->cap);
  }
  return st;
}

cn_asgn *cn_graph_backprop(cn_graph *g, cn_tensor *loss) {
  cn_asgn_list out = {g->ctx, NULL, 0, 0};
  cn_status st = cn_code_begin(g, loss);
  if (st == CN_OK) st = backprop_into(g, loss, &out);
  return cn_asgn_list_finish(&out, st);
}

cn_asgn *cn_graph_grad_update(cn_graph *g, cn_tensor *loss) {
  cn_asgn_list out = {g->ctx, NULL, 0, 0};
  cn_status st = cn_code_begin(g, loss);
  if (st == CN_OK) st = cn_forward_into(g, loss, &out);
  if (st == CN_OK) st = backprop_into(g, loss, &out);
  return cn_asgn_list_finish(&out, st);
}
