/* Projection inference for one operation (see proj.h): fresh copies of the operation's shapes,
 * the local re-solve, the six elaboration rules over a union-find of axis identities, closing,
 * the affine stratum, padding margins, and the record.
 *
 * Identities: a node is one axis instance: a tensor axis of the fresh copies (its dim's proj_id
 * is node + 1) or a spec variable of the local derivation (same tag in its proj_id). Nodes are
 * never keyed by size, so two equal-sized axes co-iterate only when a constraint of this
 * operation pairs them. A spec variable is also joined with the dims it was bound to by the
 * local solve, one binding step at a time, because resolution would skip the identities on the
 * way (a fixed-index variable bound to a tensor axis is what pins that axis).
 *
 * Invariants: a class root holds the merged facts of its class (size, pin, iterate, the first
 * tensor axis for messages); derived terms refer to nodes, evaluated through their roots after
 * closing; every failure names the operation. */
#include "proj/proj.h"

#include <stdio.h>
#include <string.h>

/* The margins of one shape, indexed by its id (ids are dense), so a lookup costs the same however
 * many axes are padded. */
typedef struct {
  bool set[CN_MAX_RANK]; /* some operation asked for margins on the axis */
  int64_t margin[CN_MAX_RANK][2];
} padding_block;

struct cn_proj_env {
  cn_shape_env *shapes;
  padding_block **pad; /* by shape id; NULL until an axis of the shape is asked for margins */
  int cap_pad;
  bool *frozen; /* by shape id: the shape's buffers exist, its margins are final */
  int cap_frozen;
};

cn_proj_env *cn_proj_env_new(cn_shape_env *shapes) {
  cn_proj_env *env = cn_alloc(cn_shape_env_ctx(shapes), sizeof *env);
  if (env) env->shapes = shapes;
  return env;
}

/* The margins recorded for an axis, or NULL when no operation asked for any. */
static int64_t *find_padding(const cn_proj_env *env, int shape_id, int axis) {
  padding_block *b = shape_id >= 0 && shape_id < env->cap_pad ? env->pad[shape_id] : NULL;
  return b && b->set[axis] ? b->margin[axis] : NULL;
}

void cn_proj_padding(const cn_proj_env *env, const cn_shape *shape, int axis, int64_t margin[2]) {
  const int64_t *m = find_padding(env, shape->id, axis);
  margin[0] = m ? m[0] : 0;
  margin[1] = m ? m[1] : 0;
}

cn_status cn_proj_freeze_padding(cn_proj_env *env, const cn_shape *shape) {
  cn_ctx *ctx = cn_shape_env_ctx(env->shapes);
  if (!cn_arena_grow(ctx, (void **)&env->frozen, &env->cap_frozen, shape->id + 1, sizeof(bool)))
    return ctx->status;
  env->frozen[shape->id] = true;
  return CN_OK;
}

static bool is_frozen(const cn_proj_env *env, int shape_id) {
  return shape_id < env->cap_frozen && env->frozen[shape_id];
}

/* The margins a padded convolution's input axis needs (convolution-is-a-contraction: "for a kernel
 * of size k the margin splits right = (k + 1) / 2, left = k - right"). With dilation d the dilated
 * kernel is centred the same way: both sides scale by d, and the right margin d * ((k + 1) / 2)
 * covers the overrun d * (k - 1) - left of the last tap. */
static bool split_margins(int64_t kernel, int64_t dilation, int64_t margin[2]) {
  int64_t right = kernel - kernel / 2; /* (kernel + 1) / 2 without overflow */
  /* a margin of 2^40 cells or more fits no node (tensor/graph.c's limit): refused here, before
   * any arithmetic on it could overflow */
  return !__builtin_mul_overflow(dilation, kernel - right, &margin[0]) &&
         !__builtin_mul_overflow(dilation, right, &margin[1]) && margin[1] < CN_EINSUM_INT_LIMIT;
}

/* ---- The solver state of one operation ------------------------------------------------------ */

typedef struct { /* stride*over + dilation*kernel + offset - left margin (kernel < 0: none) */
  int node;      /* the class this term derives */
  int over, kernel;
  int64_t stride, dilation, offset;
  bool padded;
} derived;

typedef struct {
  int parent;
  int64_t size; /* 0: unknown */
  const char *name;
  int slot, row, pos, axis; /* a tensor axis (slot >= 0), else a spec variable (slot -1) */
  bool iterate, pinned, vec_out;
  cn_index pin;
  int state; /* closing: 0 open, 1 evaluating, 2 closed */
  cn_index index;
} node;

typedef struct {
  cn_proj_env *penv;
  cn_shape_env *local;
  cn_ctx *ctx;
  const cn_shape_op *op;
  int n_slots;
  const cn_shape *global[4];
  cn_shape *fresh[4];
  int rank[4];
  int axis_node[4][CN_MAX_RANK]; /* memory-order axis -> node */
  node *nodes;
  int n_nodes, cap_nodes;
  derived *der;
  int n_der, cap_der;
} solver;

/* ---- Messages ------------------------------------------------------------------------------- */

static void describe_op(cn_sbuf *sb, const cn_shape_op *op) {
  cn_sbuf_printf(sb, "projections of %s", cn_shape_kind_name(op->kind));
  if (op->kind == CN_SL_EINSUM && op->args.spec) cn_sbuf_printf(sb, " \"%s\"", op->args.spec->text);
  if (op->lhs) cn_sbuf_printf(sb, " computing \"%s\" (#%d)", op->lhs->label, op->lhs->id);
}

static void describe_class(cn_sbuf *sb, const solver *s, int root) {
  const node *n = &s->nodes[root];
  if (n->slot >= 0) {
    const cn_shape *t = s->global[n->slot];
    cn_sbuf_printf(sb, "axis %d of the %s row of \"%s\" (#%d)", n->pos,
                   cn_row_kind_name((cn_row_kind)n->row), t->label, t->id);
  } else if (n->name) {
    cn_sbuf_printf(sb, "spec label '%s'", n->name);
  } else {
    cn_sbuf_puts(sb, "an axis of the spec");
  }
}

static cn_status fail_classes(solver *s, int a, int b, const char *what) {
  cn_sbuf sb = {0};
  describe_op(&sb, s->op);
  cn_sbuf_puts(&sb, ": ");
  describe_class(&sb, s, a);
  if (b >= 0) {
    cn_sbuf_puts(&sb, " and ");
    describe_class(&sb, s, b);
  }
  cn_sbuf_printf(&sb, " %s", what);
  const char *text = cn_sbuf_finish(s->ctx, &sb);
  return cn_fail(s->ctx, CN_ERR_INVALID, "%s", text ? text : what);
}

static cn_status fail_indices(solver *s, int root, const cn_index *a, const cn_index *b,
                              const char *what) {
  cn_sbuf sb = {0};
  cn_sbuf_printf(&sb, "%s: ", what);
  cn_index_print(&sb, s->ctx, a);
  cn_sbuf_puts(&sb, " vs ");
  cn_index_print(&sb, s->ctx, b);
  const char *text = cn_sbuf_finish(s->ctx, &sb);
  return fail_classes(s, root, -1, text ? text : what);
}

/* ---- Union-find ------------------------------------------------------------------------------ */

static int new_node(solver *s, int64_t size, const char *name) {
  if (!cn_arena_grow(s->ctx, (void **)&s->nodes, &s->cap_nodes, s->n_nodes + 1, sizeof(node)))
    return -1;
  node *n = &s->nodes[s->n_nodes];
  memset(n, 0, sizeof *n);
  n->parent = s->n_nodes;
  n->size = size;
  n->name = name;
  n->slot = -1;
  return s->n_nodes++;
}

static int find(solver *s, int n) {
  while (s->nodes[n].parent != n) {
    s->nodes[n].parent = s->nodes[s->nodes[n].parent].parent;
    n = s->nodes[n].parent;
  }
  return n;
}

static cn_status set_size(solver *s, int root, int64_t size) {
  node *n = &s->nodes[root];
  if (size == 0 || n->size == size) return CN_OK;
  if (n->size == 0) {
    n->size = size;
    return CN_OK;
  }
  char what[128];
  snprintf(what, sizeof what, "has size %lld but must co-iterate with an axis of size %lld",
           (long long)n->size, (long long)size);
  return fail_classes(s, root, -1, what);
}

static cn_status pin(solver *s, int n, cn_index idx) {
  int r = find(s, n);
  node *c = &s->nodes[r];
  if (!c->pinned) {
    c->pinned = true;
    c->pin = idx;
    return CN_OK;
  }
  if (cn_index_equal(&c->pin, &idx)) return CN_OK;
  return fail_indices(s, r, &c->pin, &idx, "is pinned to two different indices");
}

static cn_status unite(solver *s, int a, int b) {
  int ra = find(s, a), rb = find(s, b);
  if (ra == rb) return CN_OK;
  node *x = &s->nodes[ra], *y = &s->nodes[rb];
  if (x->size && y->size && x->size != y->size) {
    char what[160];
    snprintf(what, sizeof what, "must share a loop but have sizes %lld and %lld",
             (long long)x->size, (long long)y->size);
    return fail_classes(s, ra, rb, what);
  }
  if (x->slot < 0 && y->slot >= 0) { /* keep a tensor axis at the root, for messages */
    int t = ra;
    ra = rb;
    rb = t;
    x = &s->nodes[ra];
    y = &s->nodes[rb];
  }
  y->parent = ra;
  if (!x->size) x->size = y->size;
  if (!x->name) x->name = y->name;
  x->iterate |= y->iterate;
  x->vec_out |= y->vec_out;
  if (y->pinned) return pin(s, ra, y->pin);
  return CN_OK;
}

/* ---- Terms: dims to nodes -------------------------------------------------------------------- */

static int node_of(solver *s, cn_dim *d);

static bool add_derived(solver *s, int target, cn_dim *aff) {
  int over = node_of(s, aff->affine.over);
  int kernel = aff->affine.conv ? node_of(s, aff->affine.kernel) : -1;
  if (over < 0 || (aff->affine.conv && kernel < 0)) return false;
  if (!cn_arena_grow(s->ctx, (void **)&s->der, &s->cap_der, s->n_der + 1, sizeof(derived)))
    return false;
  s->der[s->n_der++] = (derived){target,
                                 over,
                                 kernel,
                                 aff->affine.stride,
                                 aff->affine.dilation,
                                 aff->affine.stride_offset,
                                 aff->affine.use_padding};
  return true;
}

/* The node of a dim (created on first sight); -1 on failure. A variable is joined with its
 * binding; a variable bound to an affine term derives its class from it. */
static int node_of(solver *s, cn_dim *d) {
  if (d->kind == CN_DIM_AFFINE) { /* a term standing alone: its own derived class */
    int n = new_node(s, 0, NULL);
    return n < 0 || !add_derived(s, n, d) ? -1 : n;
  }
  if (d->proj_id > 0) return d->proj_id - 1;
  int n = new_node(s, d->kind == CN_DIM_SOLVED ? d->size : 0, d->label);
  if (n < 0) return -1;
  d->proj_id = n + 1;
  if (d->kind != CN_DIM_VAR) return n;
  cn_dim *bound = cn_dim_var_binding(s->local, d);
  if (!bound) return n;
  if (bound->kind == CN_DIM_SOLVED && bound->proj_id == 0) {
    /* a size the solver computed (e.g. an affine reading), not an axis: only its size counts */
    return set_size(s, find(s, n), bound->size) == CN_OK ? n : -1;
  }
  if (bound->kind == CN_DIM_AFFINE) return add_derived(s, n, bound) ? n : -1;
  int b = node_of(s, bound);
  return b < 0 || unite(s, n, b) != CN_OK ? -1 : n;
}

static int64_t class_size(solver *s, int n) {
  return s->nodes[find(s, n)].size;
}

/* ---- The six rules --------------------------------------------------------------------------- */

/* Rules 1 and 4 (per pair): co-iteration, or a derived class when one side is affine. */
static cn_status elaborate_eq(solver *s, cn_dim *a, cn_dim *b) {
  if (a->kind == CN_DIM_AFFINE && b->kind == CN_DIM_AFFINE) {
    int n = new_node(s, 0, NULL); /* two readings of one index: checked after evaluation */
    if (n < 0 || !add_derived(s, n, a) || !add_derived(s, n, b)) return s->ctx->status;
    return CN_OK;
  }
  if (b->kind == CN_DIM_AFFINE) {
    cn_dim *t = a;
    a = b;
    b = t;
  }
  if (a->kind == CN_DIM_AFFINE) {
    int n = node_of(s, b);
    return n >= 0 && add_derived(s, n, a) ? CN_OK : s->ctx->status;
  }
  int x = node_of(s, a), y = node_of(s, b);
  if (x < 0 || y < 0) return s->ctx->status;
  return unite(s, x, y);
}

/* Rules 2 and 3: result ⊑ operand. An operand axis of size 1 against a larger result axis is
 * severed and read at 0; otherwise the two co-iterate. */
static cn_status elaborate_ineq(solver *s, cn_dim *result, cn_dim *operand) {
  if (result->kind == CN_DIM_AFFINE || operand->kind == CN_DIM_AFFINE)
    return elaborate_eq(s, result, operand);
  int x = node_of(s, result), y = node_of(s, operand);
  if (x < 0 || y < 0) return s->ctx->status;
  if (class_size(s, y) == 1 && class_size(s, x) != 1) return pin(s, y, cn_index_fixed(0));
  return unite(s, x, y);
}

typedef struct {
  cn_dim **v;
  int n, cap;
} dimlist;

/* The dims of r with its row variables followed through their bindings, unresolved. */
static cn_status flatten(solver *s, const cn_row *r, dimlist *out, int depth) {
  if (depth > 64) return cn_fail(s->ctx, CN_ERR_INVALID, "projections: cyclic row bindings");
  int need = out->n + r->n_lead + r->n_trail;
  if (!cn_arena_grow(s->ctx, (void **)&out->v, &out->cap, need, sizeof(cn_dim *)))
    return CN_ERR_NOMEM;
  for (int i = 0; i < r->n_lead; i++) out->v[out->n++] = r->lead[i];
  if (r->var >= 0) {
    cn_row *bound = cn_row_var_binding(s->local, r->var);
    if (!bound) {
      cn_sbuf sb = {0};
      describe_op(&sb, s->op);
      const char *text = cn_sbuf_finish(s->ctx, &sb);
      return cn_fail(s->ctx, CN_ERR_INVALID,
                     "%s: a row variable of the operation is not determined by its tensors",
                     text ? text : "projections");
    }
    cn_status st = flatten(s, bound, out, depth + 1);
    if (st != CN_OK) return st;
    if (!cn_arena_grow(s->ctx, (void **)&out->v, &out->cap, out->n + r->n_trail, sizeof(cn_dim *)))
      return CN_ERR_NOMEM;
  }
  for (int i = 0; i < r->n_trail; i++) out->v[out->n++] = r->trail[i];
  return CN_OK;
}

static cn_status fail_ranks(solver *s, const cn_shape_constraint *c, int n1, int n2) {
  cn_sbuf sb = {0};
  describe_op(&sb, s->op);
  cn_sbuf_printf(&sb, ": the %s row of slot %d has %d axes where the %s row of slot %d has %d",
                 cn_row_kind_name(c->a.row), c->a.slot, n1, cn_row_kind_name(c->b.row), c->b.slot,
                 n2);
  const char *text = cn_sbuf_finish(s->ctx, &sb);
  return cn_fail(s->ctx, CN_ERR_INVALID, "%s", text ? text : "projections: ranks differ");
}

/* Rules 4 and 5: align rows at their edges (closed after the local solve: from the right); the
 * result's surplus axes iterate on their own. */
static cn_status elaborate_rows(solver *s, const cn_shape_constraint *c, bool ineq) {
  dimlist a = {0}, b = {0};
  cn_status st = flatten(s, c->r1, &a, 0);
  if (st == CN_OK) st = flatten(s, c->r2, &b, 0);
  if (st != CN_OK) return st;
  if (a.n < b.n || (!ineq && a.n != b.n)) return fail_ranks(s, c, a.n, b.n);
  int surplus = a.n - b.n;
  for (int i = 0; i < surplus; i++) {
    int n = node_of(s, a.v[i]);
    if (n < 0) return s->ctx->status;
    s->nodes[find(s, n)].iterate = true;
  }
  for (int j = 0; j < b.n && st == CN_OK; j++)
    st = ineq ? elaborate_ineq(s, a.v[surplus + j], b.v[j])
              : elaborate_eq(s, a.v[surplus + j], b.v[j]);
  return st;
}

static cn_status elaborate(solver *s, const cn_shape_constraint *c) {
  switch (c->kind) {
  case CN_SC_DIM_EQ: return elaborate_eq(s, c->d1, c->d2);
  case CN_SC_DIM_INEQ: return elaborate_ineq(s, c->d1, c->d2);
  case CN_SC_ROW_EQ: return elaborate_rows(s, c, false);
  case CN_SC_ROW_INEQ: return elaborate_rows(s, c, true);
  case CN_SC_MIN_DIM: { /* a fixed index: the spec supplies the position */
    int n = node_of(s, c->d1);
    return n < 0 ? s->ctx->status : pin(s, n, cn_index_fixed(c->min - 1));
  }
  case CN_SC_EXACT:
  case CN_SC_TOTAL: return CN_OK; /* sizes only: initializers and vector groups have no pairs */
  }
  return CN_OK;
}

/* ---- Fresh copies ------------------------------------------------------------------------------
 */

static const cn_row_kind memory_order[CN_N_ROWS] = {CN_ROW_BATCH, CN_ROW_OUTPUT, CN_ROW_INPUT};

static cn_status freshen(solver *s, int slot, const cn_shape *g) {
  cn_shape *f = cn_alloc(s->ctx, sizeof *f);
  if (!f) return CN_ERR_NOMEM;
  *f = *g;
  int axis = 0;
  for (int m = 0; m < CN_N_ROWS; m++) {
    cn_row_kind k = memory_order[m];
    int64_t sizes[CN_MAX_RANK];
    int n = cn_shape_row_dims(s->penv->shapes, g, k, sizes, CN_MAX_RANK);
    if (n < 0) return s->ctx->status;
    if (axis + n > CN_MAX_RANK)
      return cn_fail(s->ctx, CN_ERR_INVALID, "\"%s\" (#%d) has more than %d axes", g->label, g->id,
                     CN_MAX_RANK);
    cn_dim *dims[CN_MAX_RANK];
    for (int i = 0; i < n; i++) {
      int nd = new_node(s, sizes[i], NULL);
      if (nd < 0 || !(dims[i] = cn_dim_solved(s->local, sizes[i], NULL))) return CN_ERR_NOMEM;
      dims[i]->proj_id = nd + 1;
      node *x = &s->nodes[nd];
      x->slot = slot;
      x->row = (int)k;
      x->pos = i;
      x->axis = axis;
      x->iterate = true; /* rule 6: every axis that exists is visited */
      s->axis_node[slot][axis++] = nd;
    }
    if (!(f->rows[k] = cn_row_make(s->local, 0, NULL, -1, n, dims))) return CN_ERR_NOMEM;
  }
  s->fresh[slot] = f;
  s->global[slot] = g;
  s->rank[slot] = axis;
  return CN_OK;
}

/* ---- Closing and the affine stratum ------------------------------------------------------------
 */

static cn_status fail_overflow(solver *s) {
  cn_sbuf sb = {0};
  describe_op(&sb, s->op);
  cn_sbuf_puts(&sb, ": an affine index overflows int64");
  const char *text = cn_sbuf_finish(s->ctx, &sb);
  return cn_fail(s->ctx, CN_ERR_INVALID, "%s", text ? text : "an affine index overflows int64");
}

static cn_status add_terms(solver *s, const cn_index *idx, int64_t coeff, cn_symbol *syms,
                           int64_t *coeffs, int *n, int64_t *offset) {
  int64_t scaled;
  if (__builtin_mul_overflow(coeff, idx->offset, &scaled) ||
      __builtin_add_overflow(*offset, scaled, offset))
    return fail_overflow(s);
  for (int t = 0; t < idx->n_terms; t++) {
    if (*n == 2 * CN_MAX_AFFINE_TERMS)
      return cn_fail(s->ctx, CN_ERR_INVALID, "projections: an affine index has too many terms");
    syms[*n] = idx->syms[t];
    if (__builtin_mul_overflow(coeff, idx->coeffs[t], &coeffs[(*n)++])) return fail_overflow(s);
  }
  return CN_OK;
}

static cn_status evaluate(solver *s, int root, cn_index *out);

static cn_status padding_margin(solver *s, int root, const int64_t need[2]);

static cn_status evaluate_term(solver *s, const derived *d, cn_index *out) {
  cn_index over, kernel;
  cn_status st = evaluate(s, find(s, d->over), &over);
  if (st == CN_OK && d->kernel >= 0) st = evaluate(s, find(s, d->kernel), &kernel);
  if (st != CN_OK) return st;
  cn_symbol syms[2 * CN_MAX_AFFINE_TERMS];
  int64_t coeffs[2 * CN_MAX_AFFINE_TERMS], offset = d->offset;
  int n = 0;
  st = add_terms(s, &over, d->stride, syms, coeffs, &n, &offset);
  if (st == CN_OK && d->kernel >= 0)
    st = add_terms(s, &kernel, d->dilation, syms, coeffs, &n, &offset);
  if (st != CN_OK) return st;
  if (d->padded) {
    if (class_size(s, d->kernel) < 1)
      return fail_classes(s, find(s, d->kernel), -1, "is a kernel axis of unknown size");
    int64_t need[2];
    if (!split_margins(class_size(s, d->kernel), d->dilation, need)) {
      char what[200];
      snprintf(what, sizeof what,
               "needs padding margins of 2^40 cells or more (kernel of size %lld, dilation %lld)",
               (long long)class_size(s, d->kernel), (long long)d->dilation);
      return fail_classes(s, find(s, d->node), -1, what);
    }
    if (__builtin_sub_overflow(offset, need[0], &offset)) return fail_overflow(s);
    if ((st = padding_margin(s, find(s, d->node), need)) != CN_OK) return st;
  }
  *out = cn_index_affine(n, syms, coeffs, offset);
  if (out->n_terms < 0)
    return fail_classes(s, find(s, d->node), -1,
                        "would be indexed by an affine form of more than 4 loop variables");
  return CN_OK;
}

static cn_status evaluate(solver *s, int root, cn_index *out) {
  node *n = &s->nodes[root];
  if (n->state == 2) {
    *out = n->index;
    return CN_OK;
  }
  if (n->state == 1) return fail_classes(s, root, -1, "is defined by a cycle of affine terms");
  n->state = 1;
  bool have = false;
  cn_index value = cn_index_fixed(0);
  for (int i = 0; i < s->n_der; i++) {
    if (find(s, s->der[i].node) != root) continue;
    cn_index v;
    cn_status st = evaluate_term(s, &s->der[i], &v);
    if (st != CN_OK) return st;
    n = &s->nodes[root];
    if (have && !cn_index_equal(&value, &v))
      return fail_indices(s, root, &value, &v, "is read by two different affine indices");
    value = v;
    have = true;
  }
  if (have && n->pinned && !cn_index_equal(&value, &n->pin))
    return fail_indices(s, root, &n->pin, &value, "is pinned but an affine term reads it");
  CN_ASSERT(have); /* closing settled every class that no affine term derives */
  n->index = value;
  n->state = 2;
  *out = value;
  return CN_OK;
}

static bool is_derived(solver *s, int root) {
  for (int i = 0; i < s->n_der; i++)
    if (find(s, s->der[i].node) == root) return true;
  return false;
}

/* Stratum 1: pins and iterators, in order of first appearance over the tensors' axes. */
static cn_status close_classes(solver *s, cn_symbol *iters, int64_t *sizes, int cap,
                               int *n_product) {
  for (int r = 0; r < s->n_nodes; r++) {
    node *n = &s->nodes[r];
    if (n->parent != r || n->pinned || is_derived(s, r)) continue;
    /* a spec variable is a loop by nature, like a tensor axis (rule 6) */
    if (n->slot < 0 && n->size > 1) n->iterate = true;
  }
  int order[4 * CN_MAX_RANK + 1], n_order = 0;
  for (int slot = 0; slot < s->n_slots; slot++)
    for (int a = 0; a < s->rank[slot]; a++) order[n_order++] = s->axis_node[slot][a];
  for (int i = 0; i <= n_order; i++) {
    /* tensor axes first, then (i == n_order) any remaining class, in node order */
    int lo = i < n_order ? order[i] : 0, hi = i < n_order ? order[i] + 1 : s->n_nodes;
    for (int x = lo; x < hi; x++) {
      int r = find(s, x);
      node *n = &s->nodes[r];
      if (n->state != 0 || n->pinned || n->vec_out || !n->iterate || n->size <= 1 ||
          is_derived(s, r))
        continue;
      if (*n_product == cap)
        return fail_classes(s, r, -1, "would need more loops than the product space can hold");
      char name[32];
      snprintf(name, sizeof name, "i%d", *n_product);
      cn_symbol sym = cn_symbol_create(s->ctx, n->name ? n->name : name, n->size);
      if (sym < 0) return s->ctx->status;
      iters[*n_product] = sym;
      sizes[(*n_product)++] = n->size;
      n->index = cn_index_iter(sym);
      n->state = 2;
    }
  }
  for (int r = 0; r < s->n_nodes; r++) {
    if (s->nodes[r].parent != r || s->nodes[r].state != 0 || is_derived(s, r)) continue;
    s->nodes[r].index = s->nodes[r].pinned ? s->nodes[r].pin : cn_index_fixed(0);
    s->nodes[r].state = 2;
  }
  return CN_OK;
}

/* Records margins of 0/0 for an axis that has none yet; NULL on exhaustion. */
static int64_t *new_padding(solver *s, int shape_id, int axis) {
  cn_proj_env *env = s->penv;
  if (!cn_arena_grow(s->ctx, (void **)&env->pad, &env->cap_pad, shape_id + 1,
                     sizeof(padding_block *)))
    return NULL;
  padding_block *b = env->pad[shape_id];
  if (!b && !(b = env->pad[shape_id] = cn_alloc(s->ctx, sizeof *b))) return NULL;
  b->set[axis] = true;
  return b->margin[axis];
}

/* Margins for every tensor axis of the class a padded convolution reads. A tensor whose buffers
 * exist keeps its margins: a reader needing more is an error (OCANNL refuses it too). */
static cn_status padding_margin(solver *s, int root, const int64_t need[2]) {
  for (int slot = 0; slot < s->n_slots; slot++)
    for (int a = 0; a < s->rank[slot]; a++) {
      if (find(s, s->axis_node[slot][a]) != root) continue;
      cn_proj_env *env = s->penv;
      int64_t *m = find_padding(env, s->global[slot]->id, a);
      if (m && m[0] >= need[0] && m[1] >= need[1]) continue;
      if (is_frozen(env, s->global[slot]->id)) {
        char what[400];
        snprintf(what, sizeof what,
                 "needs padding margins %lld/%lld (left/right), but the tensor's buffer was "
                 "allocated with margins %lld/%lld by an earlier statement that computed it (a "
                 "print, backprop, run or value read): build its padded readers before that",
                 (long long)need[0], (long long)need[1], (long long)(m ? m[0] : 0),
                 (long long)(m ? m[1] : 0));
        return fail_classes(s, s->axis_node[slot][a], -1, what);
      }
      if (!m && !(m = new_padding(s, s->global[slot]->id, a))) return CN_ERR_NOMEM;
      for (int side = 0; side < 2; side++)
        if (m[side] < need[side]) m[side] = need[side];
    }
  return CN_OK;
}

/* ---- Vector conversion: one operand cell feeds a group of `coeff` result cells -----------------
 */

/* The LHS output axes of a vector conversion address the first cell of each group: with one
 * output axis, its index is coeff times the operand cell's row-major offset within the operand's
 * output row; with as many axes as the operand's output row, the same axes and the last one
 * scaled by coeff. */
static cn_status vec_out_map(solver *s, cn_index *map) {
  const cn_shape *lhs = s->fresh[0], *rhs = s->fresh[1];
  const cn_row *lo = lhs->rows[CN_ROW_OUTPUT], *ro = rhs->rows[CN_ROW_OUTPUT];
  int lhs_first = lhs->rows[CN_ROW_BATCH]->n_trail;
  int rhs_first = rhs->rows[CN_ROW_BATCH]->n_trail;
  int64_t coeff = s->op->args.coeff;
  cn_index cell[CN_MAX_RANK];
  for (int j = 0; j < ro->n_trail; j++)
    cell[j] = s->nodes[find(s, s->axis_node[1][rhs_first + j])].index;
  if (lo->n_trail == 1) {
    cn_symbol syms[2 * CN_MAX_AFFINE_TERMS];
    int64_t coeffs[2 * CN_MAX_AFFINE_TERMS], offset = 0, stride = coeff;
    int n = 0;
    for (int j = ro->n_trail - 1; j >= 0; j--) {
      cn_status st = add_terms(s, &cell[j], stride, syms, coeffs, &n, &offset);
      if (st != CN_OK) return st;
      stride *= ro->trail[j]->size;
    }
    map[lhs_first] = cn_index_affine(n, syms, coeffs, offset);
    if (map[lhs_first].n_terms >= 0) return CN_OK;
  } else if (lo->n_trail == ro->n_trail && lo->n_trail > 0) {
    bool same = true;
    for (int j = 0; j + 1 < lo->n_trail; j++) same &= lo->trail[j]->size == ro->trail[j]->size;
    int last = lo->n_trail - 1;
    if (same && lo->trail[last]->size == coeff * ro->trail[last]->size) {
      for (int j = 0; j < last; j++) map[lhs_first + j] = cell[j];
      cn_symbol syms[CN_MAX_AFFINE_TERMS];
      int64_t coeffs[CN_MAX_AFFINE_TERMS], offset = 0;
      int n = 0;
      cn_status st = add_terms(s, &cell[last], coeff, syms, coeffs, &n, &offset);
      if (st != CN_OK) return st;
      map[lhs_first + last] = cn_index_affine(n, syms, coeffs, offset);
      return CN_OK;
    }
  }
  cn_sbuf sb = {0};
  describe_op(&sb, s->op);
  const char *text = cn_sbuf_finish(s->ctx, &sb);
  return cn_fail(s->ctx, CN_ERR_INVALID,
                 "%s: the output row of \"%s\" (#%d) does not split into groups of %lld cells "
                 "matching the output row of \"%s\" (#%d); give it one output axis",
                 text ? text : "projections", lhs->label, lhs->id, (long long)coeff, rhs->label,
                 rhs->id);
}

/* ---- The operation ------------------------------------------------------------------------------
 */

cn_proj *cn_proj_infer(cn_proj_env *env, const cn_shape_op *op, const cn_index *slice_index) {
  cn_ctx *ctx = cn_shape_env_ctx(env->shapes);
  solver s = {0};
  s.penv = env;
  s.ctx = ctx;
  s.op = op;
  s.n_slots = 1 + op->n_rhs;
  if (!(s.local = cn_shape_env_new_local(ctx))) return NULL;
  for (int slot = 0; slot < s.n_slots; slot++)
    if (freshen(&s, slot, slot == 0 ? op->lhs : op->rhs[slot - 1]) != CN_OK) return NULL;

  /* Re-derive this operation's constraints and re-solve them locally. */
  cn_shape_constraint *cs;
  int n_cs;
  if (cn_shape_derive(s.local, op->kind, &op->args, s.fresh[0], s.fresh + 1, op->n_rhs, &cs,
                      &n_cs) != CN_OK)
    return NULL;
  for (int i = 0; i < n_cs; i++)
    if (cn_shape_solve(s.local, op, &cs[i]) != CN_OK) return NULL;
  if (cn_shape_propagate(s.local) != CN_OK) return NULL;

  for (int i = 0; i < n_cs; i++)
    if (elaborate(&s, &cs[i]) != CN_OK) return NULL;
  if (op->kind == CN_SL_BATCH_SLICE) {
    if (!slice_index || s.rank[1] == 0 || s.fresh[1]->rows[CN_ROW_BATCH]->n_trail == 0) {
      cn_sbuf sb = {0};
      describe_op(&sb, op);
      const char *text = cn_sbuf_finish(ctx, &sb);
      cn_fail(ctx, CN_ERR_INVALID, "%s: %s", text ? text : "batch slice",
              slice_index ? "the sliced tensor has no batch axis" : "no slice index given");
      return NULL;
    }
    if (pin(&s, s.axis_node[1][0], *slice_index) != CN_OK) return NULL;
  }
  if (op->kind == CN_SL_VEC_CONVERT) {
    const cn_row *out = s.fresh[0]->rows[CN_ROW_OUTPUT];
    int first = s.fresh[0]->rows[CN_ROW_BATCH]->n_trail;
    for (int j = 0; j < out->n_trail; j++)
      s.nodes[find(&s, s.axis_node[0][first + j])].vec_out = true;
  }

  cn_symbol iters[4 * CN_MAX_RANK + 8];
  int64_t sizes[4 * CN_MAX_RANK + 8];
  int n_product = 0;
  int cap = (int)(sizeof iters / sizeof iters[0]);
  if (close_classes(&s, iters, sizes, cap, &n_product) != CN_OK) return NULL;
  for (int r = 0; r < s.n_nodes; r++) {
    cn_index ignored;
    if (s.nodes[r].parent == r && evaluate(&s, r, &ignored) != CN_OK) return NULL;
  }

  cn_index maps[4][CN_MAX_RANK];
  int64_t dims[4][CN_MAX_RANK];
  cn_proj_tensor t[4];
  for (int slot = 0; slot < s.n_slots; slot++) {
    for (int a = 0; a < s.rank[slot]; a++) {
      node *n = &s.nodes[s.axis_node[slot][a]];
      dims[slot][a] = n->size;
      maps[slot][a] = s.nodes[find(&s, s.axis_node[slot][a])].index;
    }
    t[slot] = (cn_proj_tensor){s.rank[slot], dims[slot], maps[slot]};
  }
  if (op->kind == CN_SL_VEC_CONVERT && vec_out_map(&s, maps[0]) != CN_OK) return NULL;
  return cn_proj_create(ctx, n_product, iters, sizes, t[0], op->n_rhs, t + 1);
}
