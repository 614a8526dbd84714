/* The graph: tensor creation (shape and shape-logic operation recorded at once, so inference is
 * online), materialization (finalize shapes, infer every operation's projections, freeze the
 * padding, create value and gradient nodes with the final dims and margins, copy literal data)
 * and the accessors of the public API. See tensor.h for the lifecycle. */
#include "tensor/tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cn_graph *cn_graph_create(cn_ctx *ctx) {
  cn_graph *g = cn_alloc(ctx, sizeof *g);
  if (!g) return NULL;
  g->ctx = ctx;
  g->prec = CN_PREC_SINGLE;
  g->seed = 42;
  if (!(g->shapes = cn_shape_env_new(ctx)) || !(g->projs = cn_proj_env_new(g->shapes))) return NULL;
  return g;
}

cn_ctx *cn_graph_ctx(const cn_graph *g) {
  return g->ctx;
}

void cn_graph_set_prec(cn_graph *g, cn_prec prec) {
  g->prec = prec;
}

void cn_graph_set_use_padding(cn_graph *g, cn_use_padding use_padding) {
  g->use_padding = use_padding;
}

cn_es_conv cn_graph_unmarked_conv(const cn_graph *g) {
  return g->use_padding == CN_USE_PADDING_TRUE    ? CN_ES_CONV_PADDED
         : g->use_padding == CN_USE_PADDING_FALSE ? CN_ES_CONV_VALID
                                                  : CN_ES_CONV_UNSPECIFIED;
}

cn_status cn_graph_set_seed(cn_graph *g, uint32_t seed) {
  if (g->seed_tensor)
    return cn_fail(g->ctx, CN_ERR_INVALID,
                   "the random seed is already part of built tensors; set it before building "
                   "random initializers");
  g->seed = seed;
  g->seed_set = true;
  return CN_OK;
}

cn_tensor *cn_tensor_new(cn_graph *g, const char *label, cn_tensor_kind kind, cn_prec prec,
                         const cn_shape_row_spec *rows, cn_shape_kind logic,
                         const cn_shape_args *args, int n_args, cn_tensor *const *operands) {
  cn_ctx *ctx = g->ctx;
  for (int i = 0; i < n_args; i++)
    if (!operands[i] || operands[i]->g != g) {
      cn_fail(ctx, CN_ERR_INVALID, "building \"%s\": operand %d is %s", label ? label : "", i + 1,
              operands[i] ? "from another graph" : "NULL");
      return NULL;
    }
  if (!cn_arena_grow(ctx, (void **)&g->tensors, &g->cap_tensors, g->n_tensors + 1,
                     sizeof(cn_tensor *)))
    return NULL;
  cn_tensor *t = cn_alloc(ctx, sizeof *t);
  if (!t) return NULL;
  t->g = g;
  t->label = cn_strdup(ctx, label ? label : "");
  t->prec = prec;
  t->kind = kind;
  t->n_args = n_args;
  for (int i = 0; i < n_args; i++) t->args[i] = operands[i];
  if (!t->label) return NULL;
  bool is_param = kind == CN_TK_PARAM;
  if (!(t->shape = cn_shape_new(g->shapes, t->label, is_param, rows))) return NULL;
  t->id = t->shape->id; /* so that shape messages name the tensor by its own id */
  cn_shape *rhs[3];
  for (int i = 0; i < n_args; i++) rhs[i] = operands[i]->shape;
  if (!(t->sop = cn_shape_add_op(g->shapes, logic, args, t->shape, rhs, n_args))) return NULL;
  t->scripted = g->fuse_unnamed;
  g->tensors[g->n_tensors++] = t;
  return t;
}

cn_tensor *cn_tensor_new_recorded(cn_graph *g, const char *label, int rank, const int64_t *dims,
                                  cn_op accum, cn_op prim, int n_args, cn_tensor *const *operands,
                                  cn_proj *proj) {
  const cn_dims rows = {CN_AXES_NONE, CN_AXES_NONE, {rank, dims, NULL}};
  return cn_tensor_new_recorded_rows(g, label, g->prec, &rows, accum, prim, n_args, operands, proj);
}

cn_tensor *cn_tensor_new_recorded_rows(cn_graph *g, const char *label, cn_prec prec,
                                       const cn_dims *rows, cn_op accum, cn_op prim, int n_args,
                                       cn_tensor *const *operands, cn_proj *proj) {
  /* The operands are not given to the shape logic: the record already relates their dims to the
   * output's, so the output's axes are Exact and nothing is left to infer. */
  cn_shape_args sargs;
  memset(&sargs, 0, sizeof sargs);
  const cn_axes *axes[CN_N_ROWS] = {[CN_ROW_BATCH] = &rows->batch,
                                    [CN_ROW_INPUT] = &rows->input,
                                    [CN_ROW_OUTPUT] = &rows->output};
  for (int k = 0; k < CN_N_ROWS; k++) {
    sargs.n_dims[k] = axes[k]->n;
    sargs.dims[k] = axes[k]->dims;
  }
  cn_tensor *t = cn_tensor_new(g, label, CN_TK_TILE, prec, NULL, CN_SL_DATA, &sargs, 0, NULL);
  if (!t) return NULL;
  t->n_args = n_args;
  for (int a = 0; a < n_args; a++) t->args[a] = operands[a];
  t->accum = accum;
  t->prim = prim;
  t->proj = proj;
  t->diff = cn_tensor_op_diff(t);
  return t;
}

/* The most bytes one node may hold (1 TiB): beyond it a size is a mistake in the program (a
 * dimension of 10^12, or padding margins that large), to be reported with the tensor's name and
 * shape now, not as an anonymous allocation failure when a routine first touches the buffer. The
 * margins count: a buffer holds left + dim + right cells per axis. */
#define MAX_NODE_BYTES ((int64_t)1 << 40)

/* Whether t's buffer (its final dims in memory order, with the margins recorded so far) fits in
 * MAX_NODE_BYTES; if not, *axis is the axis where the running product first passed it (an extent
 * beyond int64 passes it too). */
static bool node_fits(cn_graph *g, const cn_tensor *t, const int64_t *dims, int rank, bool margins,
                      int *axis) {
  int64_t bytes = (int64_t)cn_prec_bytes(t->prec);
  for (int a = 0; a < rank; a++) {
    int64_t m[2] = {0, 0}, extent;
    if (margins) cn_proj_padding(g->projs, t->shape, a, m);
    *axis = a;
    if (__builtin_add_overflow(dims[a], m[0], &extent) ||
        __builtin_add_overflow(extent, m[1], &extent))
      return false;
    if (extent > 0 && bytes > MAX_NODE_BYTES / extent) return false;
    bytes *= extent;
  }
  return true;
}

/* After the projections of the operation computing `by` (its own LHS included) grew the margins
 * of t: an error when the margins make t's buffer too large (dims too large without them are
 * make_node's to report). The message names `by` first, so that a script reports it at the
 * expression that asked for the margins. */
static cn_status check_margins(cn_graph *g, const cn_tensor *by, const cn_tensor *t) {
  int64_t dims[CN_MAX_RANK];
  int rank = cn_shape_dims(g->shapes, t->shape, dims, CN_MAX_RANK), axis;
  if (rank < 0) return g->ctx->status;
  if (node_fits(g, t, dims, rank, true, &axis) || !node_fits(g, t, dims, rank, false, &axis))
    return CN_OK;
  char margins[CN_MAX_RANK * 48] = "";
  for (int a = 0; a < rank; a++) {
    int64_t m[2];
    cn_proj_padding(g->projs, t->shape, a, m);
    if (m[0] || m[1])
      snprintf(margins + strlen(margins), sizeof margins - strlen(margins),
               "%s%lld/%lld on axis %d", margins[0] ? ", " : "", (long long)m[0], (long long)m[1],
               a);
  }
  return cn_fail(g->ctx, CN_ERR_INVALID,
                 "\"%s\" (#%d) reads \"%s\" (#%d) of shape %s with padding margins (left/right) "
                 "%s: its buffer would hold more than 2^40 bytes",
                 by->label, by->id, t->label, t->id, cn_tensor_shape(t), margins);
}

/* Whether t's value node may be inlined by the schedule (cn_node.fusable): a script's tensor no
 * name reaches, computed by its own code in every routine that reads it — forward code always
 * includes the code of every ancestor but parameters (code.c), so no routine reads such a node
 * without computing it first, and the host cannot name it. Parameters, host data, buffers of
 * standalone updates and gradient views never are. */
static bool fusable(const cn_tensor *t) {
  if (!t->scripted || t->named) return false;
  switch (t->kind) {
  case CN_TK_NUMBER:
  case CN_TK_FETCH:
  case CN_TK_ACCUM:
  case CN_TK_VEC:
  case CN_TK_TILE: return true;
  case CN_TK_DATA:
  case CN_TK_PARAM:
  case CN_TK_BUFFER:
  case CN_TK_VIEW: return false;
  }
  return false;
}

void cn_tensor_set_named(cn_tensor *t) {
  t->named = true;
  if (t->value && t->kind != CN_TK_VIEW) t->value->fusable = false;
}

/* The node of a final shape, in memory order, with the frozen margins. */
static cn_node *make_node(cn_graph *g, cn_tensor *t, const char *suffix) {
  int64_t dims[CN_MAX_RANK];
  int rank = cn_shape_dims(g->shapes, t->shape, dims, CN_MAX_RANK);
  if (rank < 0) return NULL;
  int axis;
  if (!node_fits(g, t, dims, rank, true, &axis)) {
    cn_fail(g->ctx, CN_ERR_INVALID,
            "\"%s%s\" (#%d) of shape %s is too large: more than 2^40 bytes (axis %d of size %lld)",
            t->label, suffix, t->id, cn_tensor_shape(t), axis, (long long)dims[axis]);
    return NULL;
  }
  char label[256];
  snprintf(label, sizeof label, "%s%s", t->label, suffix);
  cn_node *n = cn_node_create(g->ctx, label, t->prec, rank, dims);
  for (int a = 0; n && a < rank; a++) {
    int64_t m[2];
    cn_proj_padding(g->projs, t->shape, a, m);
    if ((m[0] || m[1]) && cn_node_set_padding(n, a, m[0], m[1]) != CN_OK) return NULL;
  }
  return n;
}

cn_tensor *cn_graph_tensor_of_node(const cn_graph *g, int node_id, bool *grad) {
  for (int i = 0; i < g->n_tensors; i++) {
    cn_tensor *t = g->tensors[i];
    if (t->kind != CN_TK_VIEW && t->value && t->value->id == node_id) return *grad = false, t;
    if (t->grad && t->grad->id == node_id) return *grad = true, t;
  }
  return NULL;
}

cn_status cn_graph_materialize(cn_graph *g) {
  if (g->n_materialized == g->n_tensors && g->n_updates_materialized == g->n_updates) return CN_OK;
  cn_status st = cn_shape_finalize(g->shapes);
  if (st != CN_OK) return st;
  for (int i = g->n_materialized; i < g->n_tensors; i++) {
    cn_tensor *t = g->tensors[i];
    if (t->kind == CN_TK_TILE) continue; /* its record came with it */
    if (!(t->proj = cn_proj_infer(g->projs, t->sop, t->has_slice ? &t->slice : NULL)))
      return g->ctx->status;
    for (int a = -1; a < t->n_args; a++)
      if ((st = check_margins(g, t, a < 0 ? t : t->args[a])) != CN_OK) return st;
  }
  for (int i = g->n_updates_materialized; i < g->n_updates; i++) {
    cn_update *u = g->updates[i];
    if (!(u->proj = cn_proj_infer(g->projs, u->sop, NULL))) return g->ctx->status;
    for (int a = -1; a < u->n_args; a++)
      if ((st = check_margins(g, u->lhs.tensor, a < 0 ? u->lhs.tensor : u->args[a].tensor)) !=
          CN_OK)
        return st;
  }
  g->n_updates_materialized = g->n_updates;
  for (int i = g->n_materialized; i < g->n_tensors; i++)
    if ((st = cn_proj_freeze_padding(g->projs, g->tensors[i]->shape)) != CN_OK) return st;
  for (int i = g->n_materialized; i < g->n_tensors; i++) {
    cn_tensor *t = g->tensors[i];
    if (t->kind == CN_TK_VIEW)
      t->value = t->args[0]->grad;
    else if (!(t->value = make_node(g, t, "")))
      return g->ctx->status;
    t->value->fusable = fusable(t);
    if (t->diff && !(t->grad = make_node(g, t, ".grad"))) return g->ctx->status;
    /* a gather reads its ids' node, created above (operands come first) */
    if (t->kind == CN_TK_ACCUM && (st = cn_tensor_gather_proj(t)) != CN_OK) return st;
    if (t->kind == CN_TK_DATA) {
      size_t numel = (size_t)cn_node_numel(t->value);
      if (t->n_values != numel && (t->n_values == 0 || numel % t->n_values != 0))
        return cn_fail(g->ctx, CN_ERR_INVALID,
                       "\"%s\" (#%d) has %zu values for %zu cells (shape %s)", t->label, t->id,
                       t->n_values, numel, cn_tensor_shape(t));
      double *v = cn_malloc(g->ctx, numel ? numel * sizeof *v : sizeof *v);
      if (!v) return CN_ERR_NOMEM;
      for (size_t c = 0; c < numel; c++) v[c] = t->values[c % t->n_values];
      st = cn_node_set_values(t->value, false, v, numel);
      free(v);
      if (st != CN_OK) return st;
    }
  }
  g->n_materialized = g->n_tensors;
  return CN_OK;
}

/* ---- Accessors --------------------------------------------------------------------------------
 */

cn_status cn_tensor_set_label(cn_tensor *t, const char *label) {
  const char *copy = cn_strdup(t->g->ctx, label ? label : "");
  if (!copy) return CN_ERR_NOMEM;
  t->label = copy;
  t->shape->label = copy;
  return CN_OK;
}

const char *cn_tensor_label(const cn_tensor *t) {
  return t->label;
}
int cn_tensor_id(const cn_tensor *t) {
  return t->id;
}
bool cn_tensor_is_diff(const cn_tensor *t) {
  return t->diff;
}

const char *cn_tensor_shape(const cn_tensor *t) {
  return cn_shape_str(t->g->shapes, t->shape);
}

cn_node *cn_tensor_value(cn_tensor *t) {
  return cn_graph_materialize(t->g) == CN_OK ? t->value : NULL;
}

cn_node *cn_tensor_grad(cn_tensor *t) {
  if (cn_graph_materialize(t->g) != CN_OK) return NULL;
  if (!t->grad) cn_fail(t->g->ctx, CN_ERR_INVALID, "\"%s\" (#%d) has no gradient", t->label, t->id);
  return t->grad;
}

cn_status cn_tensor_to_host(cn_tensor *t) {
  if (!t) return CN_ERR_INVALID;
  cn_status status = cn_graph_materialize(t->g);
  if (status == CN_OK) status = cn_node_to_host(t->value, false);
  if (status == CN_OK && t->grad) status = cn_node_to_host(t->grad, false);
  return status;
}
