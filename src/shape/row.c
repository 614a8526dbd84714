/* The shape solver: dimension and row terms, resolution through the substitution environment,
 * unification, broadcasting inequalities, Total_elems / minimum-dim / affine constraints,
 * conflict messages, readers, the printer, and operations with their rollback (see shape.h;
 * propagation is in worklist.c, finalization in finalize.c).
 *
 * Invariants: a variable is bound at most once and its binding is resolved (never mentions the
 * variable: cycles are errors); a pending entry is retried whenever a variable it mentions
 * changes and marked done once decided; `events` grows on every binding or simplification;
 * `stamp` on every binding or minimum, so a resolution cached under the current stamp is
 * current; while an operation is added every write is on the undo trail (solver.h). Axis
 * positions in messages count from the left (0-based) or, when the row still has a row variable,
 * from the right (-1 is the last axis). */
#include "shape/solver.h"

#include <stdio.h>
#include <string.h>

/* ---- Environment and terms ------------------------------------------------------------------- */

static bool record(cn_shape_env *env, const undo *u) {
  if (!env->trailing) return true;
  if (!cn_arena_grow(env->ctx, (void **)&env->trail, &env->cap_trail, env->n_trail + 1,
                     sizeof(undo)))
    return false;
  env->trail[env->n_trail++] = *u;
  return true;
}

bool cn_sv_set_dim(cn_shape_env *env, int var, cn_dim *to) {
  undo u = {.kind = U_DIM, .index = var, .dim = env->dim_bind[var]};
  if (!record(env, &u)) return false;
  env->dim_bind[var] = to;
  env->stamp++;
  return cn_sv_wake_dim(env, var);
}

bool cn_sv_set_row(cn_shape_env *env, int var, cn_row *to) {
  undo u = {.kind = U_ROW, .index = var, .row = env->row_bind[var]};
  if (!record(env, &u)) return false;
  env->row_bind[var] = to;
  env->stamp++;
  return cn_sv_wake_row(env, var);
}

static bool set_min(cn_shape_env *env, int var, int64_t min) {
  undo u = {.kind = U_MIN, .index = var, .min = env->dim_min[var]};
  if (!record(env, &u)) return false;
  env->dim_min[var] = min;
  env->stamp++;
  return cn_sv_wake_dim(env, var);
}

bool cn_sv_set_pending(cn_shape_env *env, int i, const pending *p) {
  undo u = {.kind = U_PEND, .index = i, .pend = env->pend[i]};
  if (!record(env, &u)) return false;
  env->pend[i] = *p;
  return true;
}

/* Undoes every recorded write, newest first, and drops the pending entries added since (the
 * index and the queues may still name them: they are filtered when read). */
static void rollback(cn_shape_env *env, int n_pend) {
  for (int i = env->n_trail - 1; i >= 0; i--) {
    const undo *u = &env->trail[i];
    switch (u->kind) {
    case U_DIM: env->dim_bind[u->index] = u->dim; break;
    case U_MIN: env->dim_min[u->index] = u->min; break;
    case U_ROW: env->row_bind[u->index] = u->row; break;
    case U_PEND: env->pend[u->index] = u->pend; break;
    }
  }
  env->n_trail = 0;
  env->n_pend = n_pend;
  env->stamp++;
}

cn_shape_env *cn_shape_env_new(cn_ctx *ctx) {
  cn_shape_env *env = cn_alloc(ctx, sizeof *env);
  if (!env) return NULL;
  env->ctx = ctx;
  env->current = -1;
  return env;
}

cn_shape_env *cn_shape_env_new_local(cn_ctx *ctx) {
  cn_shape_env *env = cn_shape_env_new(ctx);
  if (env) env->reference = true;
  return env;
}

cn_ctx *cn_shape_env_ctx(const cn_shape_env *env) {
  return env->ctx;
}
int cn_shape_env_n_ops(const cn_shape_env *env) {
  return env->n_ops;
}
const cn_shape_op *cn_shape_env_op(const cn_shape_env *env, int index) {
  return index >= 0 && index < env->n_ops ? env->ops[index] : NULL;
}

const char *cn_row_kind_name(cn_row_kind kind) {
  return kind == CN_ROW_BATCH ? "batch" : kind == CN_ROW_INPUT ? "input" : "output";
}

cn_dim *cn_dim_var(cn_shape_env *env) {
  if (env->n_dims == INT_MAX - 1) {
    cn_fail(env->ctx, CN_ERR_NOMEM, "shape inference: too many dimension variables");
    return NULL;
  }
  /* dim_min grows first, to at least the capacity dim_bind will have: a failure between the two
   * leaves them consistent */
  int need = env->n_dims + 1, min_cap = env->cap_dims;
  if (!cn_sv_index_dim_var(env, env->n_dims) ||
      !cn_arena_grow(env->ctx, (void **)&env->dim_min, &min_cap, need, sizeof(int64_t)) ||
      !cn_arena_grow(env->ctx, (void **)&env->dim_bind, &env->cap_dims, need, sizeof(cn_dim *)))
    return NULL;
  cn_dim *d = cn_alloc(env->ctx, sizeof *d);
  if (!d) return NULL;
  d->kind = CN_DIM_VAR;
  d->var = env->n_dims++;
  env->dim_bind[d->var] = NULL;
  env->dim_min[d->var] = 1;
  return d;
}

cn_dim *cn_dim_solved(cn_shape_env *env, int64_t size, const char *label) {
  cn_dim *d = cn_alloc(env->ctx, sizeof *d);
  if (!d) return NULL;
  d->kind = CN_DIM_SOLVED;
  d->size = size;
  d->label = label;
  return d;
}

/* The input size an affine term reads for the given output (and kernel) sizes. */
static int64_t affine_span(const cn_dim *a, int64_t over, int64_t kernel) {
  if (!a->affine.conv || a->affine.use_padding) return a->affine.stride * over;
  return a->affine.stride * (over - 1) + 1 + (kernel - 1) * a->affine.dilation;
}

cn_dim *cn_dim_affine(cn_shape_env *env, int64_t stride, cn_dim *over, bool conv, int64_t dilation,
                      cn_dim *kernel, bool use_padding, int64_t stride_offset) {
  /* Only pure unit striding is the identity: a padded stride-1 convolution has the size of
   * `over` but its kernel term still moves the read, which projection inference needs. */
  if (stride == 1 && !conv) return over;
  cn_dim *d = cn_alloc(env->ctx, sizeof *d);
  if (!d) return NULL;
  d->kind = CN_DIM_AFFINE;
  d->affine.stride = stride;
  d->affine.over = over;
  d->affine.conv = conv;
  d->affine.dilation = conv ? dilation : 1;
  d->affine.kernel = conv ? kernel : NULL;
  d->affine.use_padding = conv && use_padding;
  d->affine.stride_offset = stride_offset;
  return d;
}

int cn_row_var_new(cn_shape_env *env) {
  if (!cn_sv_index_row_var(env, env->n_rows) ||
      !cn_arena_grow(env->ctx, (void **)&env->row_bind, &env->cap_rows, env->n_rows + 1,
                     sizeof(cn_row *)))
    return -1;
  env->row_bind[env->n_rows] = NULL;
  return env->n_rows++;
}

cn_dim *cn_dim_var_binding(const cn_shape_env *env, const cn_dim *d) {
  return d->kind == CN_DIM_VAR ? env->dim_bind[d->var] : NULL;
}

cn_row *cn_row_var_binding(const cn_shape_env *env, int var) {
  return var >= 0 && var < env->n_rows ? env->row_bind[var] : NULL;
}

cn_row *cn_row_make(cn_shape_env *env, int n_lead, cn_dim *const *lead, int var, int n_trail,
                    cn_dim *const *trail) {
  cn_row *r = cn_alloc(env->ctx, sizeof *r);
  if (!r) return NULL;
  if (var < 0) { /* a closed row keeps every dim in trail */
    r->var = -1;
    r->n_trail = n_lead + n_trail;
    r->trail = cn_alloc(env->ctx, sizeof(cn_dim *) * (size_t)(r->n_trail + 1));
    if (!r->trail) return NULL;
    if (n_lead) memcpy(r->trail, lead, sizeof(cn_dim *) * (size_t)n_lead);
    if (n_trail) memcpy(r->trail + n_lead, trail, sizeof(cn_dim *) * (size_t)n_trail);
    return r;
  }
  r->var = var;
  r->n_lead = n_lead;
  r->n_trail = n_trail;
  r->lead = cn_alloc(env->ctx, sizeof(cn_dim *) * (size_t)(n_lead + 1));
  r->trail = cn_alloc(env->ctx, sizeof(cn_dim *) * (size_t)(n_trail + 1));
  if (!r->lead || !r->trail) return NULL;
  if (n_lead) memcpy(r->lead, lead, sizeof(cn_dim *) * (size_t)n_lead);
  if (n_trail) memcpy(r->trail, trail, sizeof(cn_dim *) * (size_t)n_trail);
  return r;
}

cn_shape *cn_shape_new(cn_shape_env *env, const char *label, bool is_param,
                       const cn_shape_row_spec *rows) {
  if (!cn_arena_grow(env->ctx, (void **)&env->shapes, &env->cap_shapes, env->n_shapes + 1,
                     sizeof(cn_shape *)))
    return NULL;
  cn_shape *sh = cn_alloc(env->ctx, sizeof *sh);
  if (!sh) return NULL;
  sh->id = env->n_shapes + 1;
  sh->label = cn_strdup(env->ctx, label ? label : "");
  sh->is_param = is_param;
  sh->guessable = false;
  if (!sh->label) return NULL;
  for (int k = 0; k < CN_N_ROWS; k++) {
    const cn_shape_row_spec *spec = rows ? &rows[k] : NULL;
    if (spec && spec->given) {
      if (spec->n < 0) {
        cn_fail(env->ctx, CN_ERR_INVALID, "shape of \"%s\": negative axis count %d for the %s row",
                sh->label, spec->n, cn_row_kind_name((cn_row_kind)k));
        return NULL;
      }
      cn_dim **dims = cn_alloc(env->ctx, sizeof(cn_dim *) * (size_t)(spec->n + 1));
      if (!dims) return NULL;
      for (int i = 0; i < spec->n; i++) {
        if (spec->dims[i] < 0) {
          cn_fail(env->ctx, CN_ERR_INVALID,
                  "shape of \"%s\": axis %d of the %s row has size %lld; sizes must be >= 1 "
                  "(or 0: inferred)",
                  sh->label, i, cn_row_kind_name((cn_row_kind)k), (long long)spec->dims[i]);
          return NULL;
        }
        const char *axis_label = spec->labels ? spec->labels[i] : NULL;
        if (axis_label && !(axis_label = cn_strdup(env->ctx, axis_label))) return NULL;
        dims[i] =
            spec->dims[i] == 0 ? cn_dim_var(env) : cn_dim_solved(env, spec->dims[i], axis_label);
        if (!dims[i]) return NULL;
      }
      sh->rows[k] = cn_row_make(env, 0, NULL, -1, spec->n, dims);
    } else if (is_param && k == CN_ROW_BATCH) {
      sh->rows[k] = cn_row_make(env, 0, NULL, -1, 0, NULL);
    } else {
      int var = cn_row_var_new(env);
      sh->rows[k] = var < 0 ? NULL : cn_row_make(env, 0, NULL, var, 0, NULL);
    }
    if (!sh->rows[k]) return NULL;
  }
  if (is_param && (!cn_arena_grow(env->ctx, (void **)&env->open_params, &env->cap_open_params,
                                  env->n_open_params + 1, sizeof(int)) ||
                   !cn_sv_note_param(env, sh, env->n_shapes, true)))
    return NULL;
  if (is_param) env->open_params[env->n_open_params++] = env->n_shapes;
  env->shapes[env->n_shapes++] = sh;
  return sh;
}

/* ---- Resolution ------------------------------------------------------------------------------ */

/* Path compression of a variable's binding: the same meaning, so the stamp stays and nothing
 * wakes; on the trail only while it has room (a rollback restores it, but never needs to). */
static void compress_dim(cn_shape_env *env, int var, cn_dim *to) {
  if (env->trailing) {
    if (env->n_trail >= env->cap_trail) return;
    env->trail[env->n_trail++] = (undo){.kind = U_DIM, .index = var, .dim = env->dim_bind[var]};
  }
  env->dim_bind[var] = to;
}

static cn_dim *resolve_affine(cn_shape_env *env, cn_dim *d) {
  cn_dim *over = cn_dim_resolve(env, d->affine.over);
  cn_dim *kernel = d->affine.conv ? cn_dim_resolve(env, d->affine.kernel) : NULL;
  if (!over || (d->affine.conv && !kernel)) return NULL;
  bool needs_kernel = d->affine.conv && !d->affine.use_padding;
  if (over->kind == CN_DIM_SOLVED && (!needs_kernel || kernel->kind == CN_DIM_SOLVED))
    return cn_dim_solved(env, affine_span(d, over->size, needs_kernel ? kernel->size : 0), NULL);
  if (over == d->affine.over && kernel == d->affine.kernel) return d;
  return cn_dim_affine(env, d->affine.stride, over, d->affine.conv, d->affine.dilation, kernel,
                       d->affine.use_padding, d->affine.stride_offset);
}

cn_dim *cn_dim_resolve(cn_shape_env *env, cn_dim *d) {
  if (!d) return NULL;
  if (d->kind == CN_DIM_VAR) {
    cn_dim *bound = env->dim_bind[d->var];
    if (!bound) return d;
    cn_dim *r = cn_dim_resolve(env, bound);
    if (r && r != bound) compress_dim(env, d->var, r);
    return r;
  }
  if (d->kind == CN_DIM_SOLVED) return d;
  if (d->res_env == env && d->res_stamp == env->stamp) return d->res;
  cn_dim *r = resolve_affine(env, d);
  if (r) {
    d->res_env = env;
    d->res_stamp = env->stamp;
    d->res = r;
  }
  return r;
}

/* Resolves n dims into out (NULL: only checks); whether each resolved to itself, in *same. */
static bool resolve_dims(cn_shape_env *env, cn_dim *const *dims, int n, cn_dim **out, bool *same) {
  for (int i = 0; i < n; i++) {
    cn_dim *d = cn_dim_resolve(env, dims[i]);
    if (!d) return false;
    if (d != dims[i]) *same = false;
    if (out) out[i] = d;
  }
  return true;
}

/* r's own dims around b, the resolution of r's bound variable (NULL when r's variable is unbound
 * or r is closed): r itself when nothing changes, else a new row. */
static cn_row *splice(cn_shape_env *env, cn_row *r, const cn_row *b) {
  bool same = !b;
  if (!resolve_dims(env, r->lead, r->n_lead, NULL, &same) ||
      !resolve_dims(env, r->trail, r->n_trail, NULL, &same))
    return NULL;
  if (same) return r;
  int b_lead = b && b->var >= 0 ? b->n_lead : 0, b_trail = b ? b->n_trail : 0;
  int var = b ? b->var : r->var;
  int n_lead = r->n_lead + b_lead, n_trail = b_trail + r->n_trail;
  cn_row *res = cn_alloc(env->ctx, sizeof *res);
  cn_dim **dims = cn_alloc(env->ctx, sizeof(cn_dim *) * (size_t)(n_lead + n_trail + 1));
  if (!res || !dims) return NULL;
  if (!resolve_dims(env, r->lead, r->n_lead, dims, &same)) return NULL;
  if (b_lead) memcpy(dims + r->n_lead, b->lead, sizeof(cn_dim *) * (size_t)b_lead);
  if (b_trail) memcpy(dims + n_lead, b->trail, sizeof(cn_dim *) * (size_t)b_trail);
  if (!resolve_dims(env, r->trail, r->n_trail, dims + n_lead + b_trail, &same)) return NULL;
  res->var = var;
  if (var < 0) { /* a closed row keeps every dim in trail */
    res->n_trail = n_lead + n_trail;
    res->trail = dims;
  } else {
    res->n_lead = n_lead;
    res->lead = dims;
    res->n_trail = n_trail;
    res->trail = dims + n_lead;
  }
  return res;
}

static cn_row *resolve_row(cn_shape_env *env, const cn_row *r, int depth) {
  cn_row *m = (cn_row *)r; /* only the cache is written */
  if (m->res_env == env && m->res_stamp == env->stamp) return m->res;
  if (depth > env->n_rows + 1) {
    cn_fail(env->ctx, CN_ERR_INVALID, "shape inference: cyclic row variable bindings");
    return NULL;
  }
  cn_row *bound = r->var >= 0 ? env->row_bind[r->var] : NULL;
  cn_row *b = bound ? resolve_row(env, bound, depth + 1) : NULL;
  if (bound && !b) return NULL;
  cn_row *res = b && !r->n_lead && !r->n_trail ? b : splice(env, m, b);
  if (!res) return NULL;
  m->res_env = env;
  m->res_stamp = env->stamp;
  m->res = res;
  return res;
}

/* Cached per stamp: repeated lookups between two bindings allocate nothing, and a row already in
 * resolved form is its own resolution. */
cn_row *cn_row_resolve(cn_shape_env *env, const cn_row *r) {
  return resolve_row(env, r, 0);
}

static bool dim_mentions(cn_shape_env *env, cn_dim *d, int var) {
  d = cn_dim_resolve(env, d);
  if (!d) return false;
  if (d->kind == CN_DIM_VAR) return d->var == var;
  if (d->kind == CN_DIM_AFFINE)
    return dim_mentions(env, d->affine.over, var) ||
           (d->affine.conv && dim_mentions(env, d->affine.kernel, var));
  return false;
}

/* ---- Printing -------------------------------------------------------------------------------- */

static void dim_print(cn_sbuf *sb, cn_shape_env *env, cn_dim *d) {
  d = cn_dim_resolve(env, d);
  if (!d) return;
  switch (d->kind) {
  case CN_DIM_VAR: cn_sbuf_printf(sb, "'d%d", d->var); break;
  case CN_DIM_SOLVED:
    cn_sbuf_printf(sb, "%lld", (long long)d->size);
    if (d->label) cn_sbuf_printf(sb, ":%s", d->label);
    break;
  case CN_DIM_AFFINE:
    if (d->affine.stride != 1) cn_sbuf_printf(sb, "%lld*", (long long)d->affine.stride);
    dim_print(sb, env, d->affine.over);
    if (d->affine.conv) cn_sbuf_puts(sb, d->affine.use_padding ? "=" : "<");
    if (d->affine.stride_offset) cn_sbuf_printf(sb, "+%lld", (long long)d->affine.stride_offset);
    if (d->affine.conv) {
      cn_sbuf_putc(sb, '+');
      if (d->affine.dilation != 1) cn_sbuf_printf(sb, "%lld*", (long long)d->affine.dilation);
      dim_print(sb, env, d->affine.kernel);
    }
    break;
  }
}

void cn_row_print(cn_sbuf *sb, cn_shape_env *env, const cn_row *r) {
  cn_row *res = cn_row_resolve(env, r);
  if (!res) return;
  bool first = true;
  for (int i = 0; i < res->n_lead; i++, first = false) {
    if (!first) cn_sbuf_putc(sb, ',');
    dim_print(sb, env, res->lead[i]);
  }
  if (res->var >= 0) {
    if (!first) cn_sbuf_putc(sb, ',');
    cn_sbuf_printf(sb, "..r%d..", res->var);
    first = false;
  }
  for (int i = 0; i < res->n_trail; i++, first = false) {
    if (!first) cn_sbuf_putc(sb, ',');
    dim_print(sb, env, res->trail[i]);
  }
}

void cn_shape_print(cn_sbuf *sb, cn_shape_env *env, const cn_shape *sh) {
  cn_row_print(sb, env, sh->rows[CN_ROW_BATCH]);
  cn_sbuf_putc(sb, '|');
  cn_row_print(sb, env, sh->rows[CN_ROW_INPUT]);
  cn_sbuf_puts(sb, "->");
  cn_row_print(sb, env, sh->rows[CN_ROW_OUTPUT]);
}

const char *cn_shape_str(cn_shape_env *env, const cn_shape *sh) {
  cn_sbuf sb = {0};
  cn_shape_print(&sb, env, sh);
  const char *s = cn_sbuf_finish(env->ctx, &sb);
  return s ? s : "";
}

/* ---- Messages -------------------------------------------------------------------------------- */

typedef struct {
  const cn_shape_op *op;
  const cn_shape_constraint *c;
  int axis_a, axis_b;
  pending *self; /* retrying this dim entry: a deferral updates it instead of adding another */
  /* an einsum row equality: side b is this spec row, `spec_len` axes long once resolved (-1 while
   * it has a row variable); spec_pos locates the current pair's side b in it (SPEC_*) */
  const cn_es_row *spec_row;
  int spec_len, spec_pos;
} site;

static const cn_shape *side_tensor(const cn_shape_op *op, int slot) {
  if (!op || slot < 0) return NULL;
  return slot == 0 ? op->lhs : slot <= op->n_rhs ? op->rhs[slot - 1] : NULL;
}

static const cn_es_row *es_row(const cn_es_shape *sh, cn_row_kind kind) {
  return kind == CN_ROW_BATCH ? &sh->batch : kind == CN_ROW_INPUT ? &sh->input : &sh->output;
}

static const cn_es_shape *es_shape(const cn_einsum *spec, int slot) {
  return slot == 0 ? &spec->lhs : &spec->rhs[slot - 1];
}

/* The spec row on side b of an einsum row equality (the logic puts the tensor on side a), or
 * NULL for any other constraint. */
static const cn_es_row *spec_row_of(const cn_shape_op *op, const cn_shape_constraint *c) {
  if (!op || op->kind != CN_SL_EINSUM || !op->args.spec || !c || c->b.slot >= 0 || c->a.slot < 0 ||
      c->a.slot > op->args.spec->n_rhs)
    return NULL;
  return es_row(es_shape(op->args.spec, c->a.slot), c->b.row);
}

/* Where a message axis of the resolved spec row (len axes when closed, else -1) falls in the
 * written row: a leading or trailing axis, or the row variable. */
static int spec_pos(const cn_es_row *r, int len, int axis) {
  if (axis == NO_AXIS) return SPEC_WHOLE;
  if (axis >= 0 && axis < r->n_leading) return axis;
  if (axis < 0 && -axis <= r->n_trailing) return r->n_leading + r->n_trailing + axis;
  if (axis >= 0 && len >= 0 && axis >= len - r->n_trailing)
    return r->n_leading + axis - (len - r->n_trailing);
  return SPEC_IN_VAR;
}

static void es_var_print(cn_sbuf *sb, const cn_es_row *r) {
  if (r->ellipsis)
    cn_sbuf_puts(sb, "...");
  else
    cn_sbuf_printf(sb, "..%s..", r->row_var);
}

static void es_row_print(cn_sbuf *sb, const cn_es_row *r, bool multichar) {
  const char *sep = multichar ? ", " : "";
  for (int i = 0; i < r->n_leading; i++) {
    if (i) cn_sbuf_puts(sb, sep);
    cn_einsum_axis_print(sb, &r->leading[i]);
  }
  if (r->row_var) {
    if (r->n_leading) cn_sbuf_puts(sb, sep);
    es_var_print(sb, r);
  }
  for (int i = 0; i < r->n_trailing; i++) {
    if (i || r->n_leading || r->row_var) cn_sbuf_puts(sb, sep);
    cn_einsum_axis_print(sb, &r->trailing[i]);
  }
}

static bool es_row_has_label(const cn_es_row *r, const char *label) {
  for (int i = 0; i < r->n_leading + r->n_trailing; i++) {
    const cn_es_axis *ax = i < r->n_leading ? &r->leading[i] : &r->trailing[i - r->n_leading];
    if (ax->kind == CN_ES_LABEL && strcmp(ax->label, label) == 0) return true;
  }
  return false;
}

/* Names a tensor the operation already equated with the spec's label (or row variable, when
 * label is NULL): the operands before `slot` first, then the result, which the logic processes
 * first. The size found on the spec side is that tensor's. */
static void es_source(cn_sbuf *sb, const cn_shape_op *op, int slot, const char *label,
                      const char *row_var) {
  int order[4], n = 0;
  if (slot > 0) {
    for (int t = 1; t < slot; t++) order[n++] = t;
    order[n++] = 0;
  }
  for (int i = 0; i < n; i++) {
    const cn_shape *tensor = side_tensor(op, order[i]);
    for (int k = 0; k < CN_N_ROWS && tensor; k++) {
      const cn_es_row *r = es_row(es_shape(op->args.spec, order[i]), (cn_row_kind)k);
      if (label ? es_row_has_label(r, label)
                : row_var && r->row_var && !strcmp(r->row_var, row_var)) {
        cn_sbuf_printf(sb, ", as in the %s row of \"%s\" (#%d)", cn_row_kind_name((cn_row_kind)k),
                       tensor->label, tensor->id);
        return;
      }
    }
  }
}

static void describe_axis(cn_sbuf *sb, int axis) {
  if (axis == NO_AXIS) return;
  if (axis >= 0)
    cn_sbuf_printf(sb, " axis %d", axis);
  else
    cn_sbuf_printf(sb, " axis %d (from the right)", axis);
}

static void describe_spec(cn_sbuf *sb, cn_shape_env *env, const site *s, cn_dim *d) {
  const cn_es_row *r = s->spec_row;
  const cn_es_axis *ax = NULL;
  bool multichar = s->op->args.spec->multichar;
  if (s->spec_pos >= 0) {
    ax = s->spec_pos < r->n_leading ? &r->leading[s->spec_pos]
                                    : &r->trailing[s->spec_pos - r->n_leading];
    cn_sbuf_puts(sb, "spec axis '");
    cn_einsum_axis_print(sb, ax);
    cn_sbuf_putc(sb, '\'');
  } else if (s->spec_pos == SPEC_IN_VAR && r->row_var) {
    cn_sbuf_puts(sb, "spec row variable '");
    es_var_print(sb, r);
    cn_sbuf_putc(sb, '\'');
  } else {
    cn_sbuf_printf(sb, "the spec's %s row", cn_row_kind_name(s->c->b.row));
    if (r->n_leading || r->row_var || r->n_trailing) {
      cn_sbuf_puts(sb, " '");
      es_row_print(sb, r, multichar);
      cn_sbuf_putc(sb, '\'');
    }
    if (s->spec_pos == SPEC_IN_VAR) describe_axis(sb, s->axis_b);
  }
  d = d ? cn_dim_resolve(env, d) : NULL;
  if (!d || d->kind != CN_DIM_SOLVED) return; /* a spec variable's name says more than 'd7 */
  cn_sbuf_puts(sb, " (size ");
  dim_print(sb, env, d);
  if (ax && ax->kind == CN_ES_LABEL)
    es_source(sb, s->op, s->c->a.slot, ax->label, NULL);
  else if (!ax && r->row_var)
    es_source(sb, s->op, s->c->a.slot, NULL, r->row_var);
  cn_sbuf_putc(sb, ')');
}

static void describe_op(cn_sbuf *sb, const cn_shape_op *op) {
  if (!op) {
    cn_sbuf_puts(sb, "a shape constraint");
    return;
  }
  if (op->kind == CN_SL_EINSUM && op->args.spec)
    cn_sbuf_printf(sb, "einsum \"%s\"", op->args.spec->text);
  else
    cn_sbuf_puts(sb, cn_shape_kind_name(op->kind));
  cn_sbuf_printf(sb, " (operation #%d", op->id);
  if (op->lhs) cn_sbuf_printf(sb, " computing \"%s\" (#%d)", op->lhs->label, op->lhs->id);
  cn_sbuf_putc(sb, ')');
}

static void describe_side(cn_sbuf *sb, cn_shape_env *env, const site *s, bool side_b, cn_dim *d) {
  cn_sc_side side = s->c ? (side_b ? s->c->b : s->c->a) : (cn_sc_side){-1, CN_ROW_OUTPUT};
  int axis = side_b ? s->axis_b : s->axis_a;
  const cn_shape *t = side_tensor(s->op, side.slot);
  if (!t && side_b && s->spec_row) {
    describe_spec(sb, env, s, d);
    return;
  }
  if (t) {
    cn_sbuf_printf(sb, "%s row of \"%s\" (#%d)", cn_row_kind_name(side.row), t->label, t->id);
  } else {
    cn_sbuf_puts(sb, s->op && s->op->kind == CN_SL_EINSUM ? "the spec" : "the constraint");
  }
  describe_axis(sb, axis);
  if (d) {
    cn_sbuf_puts(sb, " (size ");
    dim_print(sb, env, d);
    cn_sbuf_putc(sb, ')');
  }
}

/* A conflict between the two sides of the site; d_a / d_b may be NULL (rank conflicts). */
static cn_status conflict(cn_shape_env *env, const site *s, cn_dim *d_a, cn_dim *d_b,
                          const char *what) {
  cn_sbuf sb = {0};
  cn_sbuf_puts(&sb, "shape conflict in ");
  describe_op(&sb, s->op);
  cn_sbuf_printf(&sb, ": %s: ", what);
  describe_side(&sb, env, s, false, d_a);
  cn_sbuf_puts(&sb, " vs ");
  describe_side(&sb, env, s, true, d_b);
  cn_status st = cn_fail(env->ctx, CN_ERR_INVALID, "%s", sb.failed ? what : sb.data);
  cn_sbuf_free(&sb);
  return st;
}

cn_status cn_sv_pending_conflict(cn_shape_env *env, const pending *p, const char *what) {
  site s = {.op = p->op,
            .c = &p->c,
            .axis_a = p->axis_a,
            .axis_b = p->axis_b,
            .spec_row = p->spec_row,
            .spec_len = -1,
            .spec_pos = p->spec_pos};
  return conflict(env, &s, NULL, NULL, what);
}

/* ---- Pending constraints --------------------------------------------------------------------- */

static result push_pending(cn_shape_env *env, const pending *p) {
  if (!cn_arena_grow(env->ctx, (void **)&env->pend, &env->cap_pend, env->n_pend + 1,
                     sizeof(pending)))
    return R_FAIL;
  env->pend[env->n_pend++] = *p;
  return cn_sv_note_entry(env, env->n_pend - 1, true) ? R_PEND : R_FAIL;
}

static result defer_dim(cn_shape_env *env, const site *s, cn_sc_kind kind, cn_dim *a, cn_dim *b) {
  if (s->self && !s->self->reused) {
    s->self->reused = true;
    s->self->c.kind = kind;
    s->self->c.d1 = a;
    s->self->c.d2 = b;
    return R_PEND;
  }
  pending p = {0};
  p.op = s->op;
  if (s->c) p.c = *s->c;
  p.c.kind = kind;
  p.c.d1 = a;
  p.c.d2 = b;
  p.c.r1 = p.c.r2 = NULL;
  p.axis_a = s->axis_a;
  p.axis_b = s->axis_b;
  p.spec_row = s->spec_row;
  p.spec_pos = s->spec_pos;
  return push_pending(env, &p);
}

/* ---- Dimensions ------------------------------------------------------------------------------ */

static result unify_dim(cn_shape_env *env, const site *s, cn_dim *a, cn_dim *b);

static result bind_dim(cn_shape_env *env, const site *s, cn_dim *var, cn_dim *to, bool var_is_a) {
  if (dim_mentions(env, to, var->var)) {
    conflict(env, s, var_is_a ? var : to, var_is_a ? to : var,
             "a dimension would have to contain itself (size cycle)");
    return R_FAIL;
  }
  int64_t min = env->dim_min[var->var];
  if (to->kind == CN_DIM_SOLVED && to->size < min) {
    char what[160];
    snprintf(what, sizeof what, "fixed index %lld is out of range of an axis of size %lld",
             (long long)(min - 1), (long long)to->size);
    conflict(env, s, var_is_a ? var : to, var_is_a ? to : var, what);
    return R_FAIL;
  }
  if (!cn_sv_set_dim(env, var->var, to)) return R_FAIL;
  env->events++;
  if (to->kind == CN_DIM_VAR && env->dim_min[to->var] < min && !set_min(env, to->var, min))
    return R_FAIL;
  if (to->kind == CN_DIM_AFFINE && min > 1) { /* checked once the affine term has a size */
    pending p = {0};
    p.op = s->op;
    if (s->c) p.c = *s->c;
    p.c.kind = CN_SC_MIN_DIM;
    p.c.d1 = to;
    p.c.d2 = NULL;
    p.c.r1 = p.c.r2 = NULL;
    p.c.min = min;
    p.axis_a = s->axis_a;
    p.axis_b = s->axis_b;
    p.min_on_b = var_is_a;
    p.spec_row = s->spec_row;
    p.spec_pos = s->spec_pos;
    if (push_pending(env, &p) == R_FAIL) return R_FAIL;
  }
  return R_DONE;
}

static result same_solved(cn_shape_env *env, const site *s, cn_dim *a, cn_dim *b,
                          const char *what) {
  if (a->size != b->size) {
    conflict(env, s, a, b, what);
    return R_FAIL;
  }
  if (a->label && b->label && strcmp(a->label, b->label) != 0) {
    char msg[256];
    snprintf(msg, sizeof msg, "axis labels differ ('%s' vs '%s')", a->label, b->label);
    conflict(env, s, a, b, msg);
    return R_FAIL;
  }
  return R_DONE;
}

/* aff (side a iff aff_is_a) reads an input of size n: solve its output or kernel. */
static result solve_affine(cn_shape_env *env, const site *s, cn_dim *aff, cn_dim *n_dim,
                           bool aff_is_a) {
  int64_t n = n_dim->size, st = aff->affine.stride, dil = aff->affine.dilation;
  cn_dim *over = aff->affine.over, *kernel = aff->affine.kernel;
  char what[320];
  site inner = *s;
  if (!aff->affine.conv || aff->affine.use_padding) {
    if (n % st != 0) {
      snprintf(what, sizeof what, "input size %lld is not a multiple of the stride %lld",
               (long long)n, (long long)st);
      conflict(env, s, aff_is_a ? aff : n_dim, aff_is_a ? n_dim : aff, what);
      return R_FAIL;
    }
    cn_dim *o = cn_dim_solved(env, n / st, NULL); /* strided: not the input's basis */
    return o ? unify_dim(env, &inner, over, o) : R_FAIL;
  }
  if (kernel->kind == CN_DIM_SOLVED) {
    int64_t t = n - 1 - (kernel->size - 1) * dil;
    if (t < 0 || t % st != 0) {
      snprintf(what, sizeof what,
               "a valid convolution does not tile: input size %lld, kernel %lld, dilation %lld, "
               "stride %lld: %lld - 1 - (%lld-1)*%lld = %lld is not a non-negative multiple of "
               "%lld",
               (long long)n, (long long)kernel->size, (long long)dil, (long long)st, (long long)n,
               (long long)kernel->size, (long long)dil, (long long)t, (long long)st);
      conflict(env, s, aff_is_a ? aff : n_dim, aff_is_a ? n_dim : aff, what);
      return R_FAIL;
    }
    cn_dim *o = cn_dim_solved(env, t / st + 1, NULL);
    return o ? unify_dim(env, &inner, over, o) : R_FAIL;
  }
  if (over->kind == CN_DIM_SOLVED) {
    int64_t t = n - 1 - st * (over->size - 1);
    if (t < 0 || t % dil != 0) {
      snprintf(what, sizeof what,
               "a valid convolution does not tile: input size %lld, output %lld, stride %lld, "
               "dilation %lld leave no whole kernel size",
               (long long)n, (long long)over->size, (long long)st, (long long)dil);
      conflict(env, s, aff_is_a ? aff : n_dim, aff_is_a ? n_dim : aff, what);
      return R_FAIL;
    }
    cn_dim *k = cn_dim_solved(env, t / dil + 1, NULL);
    return k ? unify_dim(env, &inner, kernel, k) : R_FAIL;
  }
  return aff_is_a ? defer_dim(env, s, CN_SC_DIM_EQ, aff, n_dim)
                  : defer_dim(env, s, CN_SC_DIM_EQ, n_dim, aff);
}

static result unify_dim(cn_shape_env *env, const site *s, cn_dim *a, cn_dim *b) {
  a = cn_dim_resolve(env, a);
  b = cn_dim_resolve(env, b);
  if (!a || !b) return R_FAIL;
  if (a == b) return R_DONE;
  if (a->kind == CN_DIM_VAR && b->kind == CN_DIM_VAR && a->var == b->var) return R_DONE;
  if (a->kind == CN_DIM_VAR) return bind_dim(env, s, a, b, true);
  if (b->kind == CN_DIM_VAR) return bind_dim(env, s, b, a, false);
  if (a->kind == CN_DIM_SOLVED && b->kind == CN_DIM_SOLVED)
    return same_solved(env, s, a, b, "sizes differ");
  if (a->kind == CN_DIM_AFFINE && b->kind == CN_DIM_SOLVED) return solve_affine(env, s, a, b, true);
  if (b->kind == CN_DIM_AFFINE && a->kind == CN_DIM_SOLVED)
    return solve_affine(env, s, b, a, false);
  /* two affine terms: the same reading unifies component-wise, otherwise wait for sizes */
  if (a->affine.stride == b->affine.stride && a->affine.conv == b->affine.conv &&
      a->affine.dilation == b->affine.dilation && a->affine.use_padding == b->affine.use_padding) {
    result r_over = unify_dim(env, s, a->affine.over, b->affine.over);
    if (r_over == R_FAIL || !a->affine.conv) return r_over;
    result r_kernel = unify_dim(env, s, a->affine.kernel, b->affine.kernel);
    return r_kernel == R_DONE ? r_over : r_kernel;
  }
  return defer_dim(env, s, CN_SC_DIM_EQ, a, b);
}

/* sub ⊑ super: equal, or the super is a broadcasting unit (an unlabeled size 1). A variable below
 * a unit stays pending: it may take any size, and finalization closes a parameter's such dim to
 * its minimum instead of asking for it (a weight reading a number: `w * 2.0`). */
static result ineq_dim(cn_shape_env *env, const site *s, cn_dim *sub, cn_dim *super) {
  sub = cn_dim_resolve(env, sub);
  super = cn_dim_resolve(env, super);
  if (!sub || !super) return R_FAIL;
  if (super->kind == CN_DIM_SOLVED) {
    if (cn_dim_is_unit(super)) {
      if (sub->kind == CN_DIM_VAR) return defer_dim(env, s, CN_SC_DIM_INEQ, sub, super);
      return R_DONE;
    }
    if (sub->kind == CN_DIM_SOLVED)
      return same_solved(env, s, sub, super, "sizes differ and the operand's is not 1");
    return unify_dim(env, s, sub, super);
  }
  if (sub->kind == CN_DIM_SOLVED && sub->size == 1) return unify_dim(env, s, sub, super);
  if (sub == super ||
      (sub->kind == CN_DIM_VAR && super->kind == CN_DIM_VAR && sub->var == super->var))
    return R_DONE;
  return defer_dim(env, s, CN_SC_DIM_INEQ, sub, super);
}

/* ---- Rows ------------------------------------------------------------------------------------ */

static result bind_row(cn_shape_env *env, const site *s, int var, cn_row *to) {
  if (to->var == var) {
    conflict(env, s, NULL, NULL, "rank cycle: a row variable would have to contain itself");
    return R_FAIL;
  }
  if (!cn_sv_set_row(env, var, to)) return R_FAIL;
  env->events++;
  return R_DONE;
}

/* The message index of dim j of the n trailing dims of a row (right_off more were already
 * paired from the right): absolute for a closed row, counted from the right otherwise. */
static int trail_axis(const cn_row *r, int j, int n, int left_off, int right_off) {
  return r->var < 0 ? left_off + j : -(n - j) - right_off;
}

static result pair_dims(cn_shape_env *env, const site *base, bool ineq, cn_dim *a, int axis_a,
                        cn_dim *b, int axis_b) {
  site s = *base;
  s.axis_a = axis_a;
  s.axis_b = axis_b;
  s.spec_pos = s.spec_row ? spec_pos(s.spec_row, s.spec_len, axis_b) : SPEC_WHOLE;
  result r = ineq ? ineq_dim(env, &s, a, b) : unify_dim(env, &s, a, b);
  return r == R_FAIL ? R_FAIL : R_DONE; /* a deferred pair is its own pending entry */
}

static cn_status rank_conflict(cn_shape_env *env, const site *s, const cn_row *a, const cn_row *b,
                               const char *what) {
  char msg[200];
  snprintf(msg, sizeof msg, "%s (%d%s axes vs %d%s axes)", what, a->n_lead + a->n_trail,
           a->var >= 0 ? " or more" : "", b->n_lead + b->n_trail, b->var >= 0 ? " or more" : "");
  return conflict(env, s, NULL, NULL, msg);
}

static result unify_row(cn_shape_env *env, const site *base, const int off[2][2], cn_row *a,
                        cn_row *b) {
  a = cn_row_resolve(env, a);
  b = cn_row_resolve(env, b);
  if (!a || !b) return R_FAIL;
  site spec_site = *base;
  spec_site.spec_len = b->var < 0 ? b->n_trail : -1;
  const site *s = &spec_site;
  if (a->var < 0 && b->var < 0) {
    if (a->n_trail != b->n_trail) {
      rank_conflict(env, s, a, b, "the rows have different numbers of axes");
      return R_FAIL;
    }
    for (int i = 0; i < a->n_trail; i++)
      if (pair_dims(env, s, false, a->trail[i], off[0][0] + i, b->trail[i], off[1][0] + i) ==
          R_FAIL)
        return R_FAIL;
    return R_DONE;
  }
  if (a->var < 0 || b->var < 0) {
    bool a_closed = a->var < 0;
    cn_row *c = a_closed ? a : b, *o = a_closed ? b : a;
    int n = c->n_trail;
    if (n < o->n_lead + o->n_trail) {
      rank_conflict(env, s, a, b, "too few axes");
      return R_FAIL;
    }
    for (int i = 0; i < o->n_lead; i++) {
      int ac = off[a_closed ? 0 : 1][0] + i, ao = off[a_closed ? 1 : 0][0] + i;
      if (pair_dims(env, s, false, a_closed ? c->trail[i] : o->lead[i], a_closed ? ac : ao,
                    a_closed ? o->lead[i] : c->trail[i], a_closed ? ao : ac) == R_FAIL)
        return R_FAIL;
    }
    for (int j = 0; j < o->n_trail; j++) {
      int ci = n - o->n_trail + j, oi = j;
      int ac = off[a_closed ? 0 : 1][0] + ci, ao = -(o->n_trail - j) - off[a_closed ? 1 : 0][1];
      if (pair_dims(env, s, false, a_closed ? c->trail[ci] : o->trail[oi], a_closed ? ac : ao,
                    a_closed ? o->trail[oi] : c->trail[ci], a_closed ? ao : ac) == R_FAIL)
        return R_FAIL;
    }
    cn_row *middle =
        cn_row_make(env, 0, NULL, -1, n - o->n_lead - o->n_trail, c->trail + o->n_lead);
    return middle ? bind_row(env, s, o->var, middle) : R_FAIL;
  }
  int kl = a->n_lead < b->n_lead ? a->n_lead : b->n_lead;
  int kr = a->n_trail < b->n_trail ? a->n_trail : b->n_trail;
  for (int i = 0; i < kl; i++)
    if (pair_dims(env, s, false, a->lead[i], off[0][0] + i, b->lead[i], off[1][0] + i) == R_FAIL)
      return R_FAIL;
  for (int j = 0; j < kr; j++)
    if (pair_dims(env, s, false, a->trail[a->n_trail - kr + j], -(kr - j) - off[0][1],
                  b->trail[b->n_trail - kr + j], -(kr - j) - off[1][1]) == R_FAIL)
      return R_FAIL;
  int al = a->n_lead - kl, at = a->n_trail - kr, bl = b->n_lead - kl, bt = b->n_trail - kr;
  if (a->var == b->var) {
    if (al || at || bl || bt) {
      conflict(env, s, NULL, NULL,
               "rank cycle: a row variable would have to equal itself plus more axes");
      return R_FAIL;
    }
    return R_DONE;
  }
  if (!al && !at) {
    cn_row *to = cn_row_make(env, bl, b->lead + kl, b->var, bt, b->trail);
    return to ? bind_row(env, s, a->var, to) : R_FAIL;
  }
  if (!bl && !bt) {
    cn_row *to = cn_row_make(env, al, a->lead + kl, a->var, at, a->trail);
    return to ? bind_row(env, s, b->var, to) : R_FAIL;
  }
  /* a = La' va, b = vb Tb' (or the mirror): both grow around a fresh variable */
  int w = cn_row_var_new(env);
  if (w < 0) return R_FAIL;
  cn_row *for_a, *for_b;
  if (al) {
    for_a = cn_row_make(env, 0, NULL, w, bt, b->trail);
    for_b = cn_row_make(env, al, a->lead + kl, w, 0, NULL);
  } else {
    for_a = cn_row_make(env, bl, b->lead + kl, w, 0, NULL);
    for_b = cn_row_make(env, 0, NULL, w, at, a->trail);
  }
  if (!for_a || !for_b) return R_FAIL;
  if (bind_row(env, s, a->var, for_a) == R_FAIL) return R_FAIL;
  return bind_row(env, s, b->var, for_b);
}

/* sub ⊑ super; may narrow the pending entry's rows to what is still undecided. */
static result ineq_row(cn_shape_env *env, const site *s, pending *p) {
  cn_row *sub = cn_row_resolve(env, p->c.r1), *sup = cn_row_resolve(env, p->c.r2);
  if (!sub || !sup) return R_FAIL;
  int sl = sup->var >= 0 ? sup->n_lead : 0, st = sup->n_trail, w = sup->var;
  cn_dim **supL = sup->lead, **supT = sup->trail;
  if (sub->var < 0) {
    int n = sub->n_trail;
    if (n < sl + st) {
      rank_conflict(env, s, sub, sup, "the result has fewer axes than the operand it broadcasts");
      return R_FAIL;
    }
    for (int i = 0; i < sl; i++)
      if (pair_dims(env, s, true, sub->trail[i], p->off[0][0] + i, supL[i], p->off[1][0] + i) ==
          R_FAIL)
        return R_FAIL;
    for (int j = 0; j < st; j++)
      if (pair_dims(env, s, true, sub->trail[n - st + j], p->off[0][0] + n - st + j, supT[j],
                    trail_axis(sup, j, st, p->off[1][0], p->off[1][1])) == R_FAIL)
        return R_FAIL;
    if (w < 0) return R_DONE;
    if (sl == 0 && st == 0) return R_PEND; /* a lower bound of w, for finalization */
    p->c.r1 = cn_row_make(env, 0, NULL, -1, n - sl - st, sub->trail + sl);
    p->c.r2 = cn_row_make(env, 0, NULL, w, 0, NULL);
    p->off[0][0] += sl;
    p->off[1][0] += sl;
    p->off[1][1] += st;
    env->events++;
    return p->c.r1 && p->c.r2 ? R_PEND : R_FAIL;
  }
  int kr = sub->n_trail < st ? sub->n_trail : st;
  int kl = w >= 0 ? (sub->n_lead < sl ? sub->n_lead : sl) : 0;
  for (int j = 0; j < kr; j++)
    if (pair_dims(env, s, true, sub->trail[sub->n_trail - kr + j], -(kr - j) - p->off[0][1],
                  supT[st - kr + j],
                  trail_axis(sup, st - kr + j, st, p->off[1][0], p->off[1][1])) == R_FAIL)
      return R_FAIL;
  for (int i = 0; i < kl; i++)
    if (pair_dims(env, s, true, sub->lead[i], p->off[0][0] + i, supL[i], p->off[1][0] + i) ==
        R_FAIL)
      return R_FAIL;
  if (w == sub->var) {
    if (sub->n_lead - kl || sub->n_trail - kr || sl - kl || st - kr) {
      conflict(env, s, NULL, NULL,
               "rank cycle: a row variable would have to broadcast to itself plus more axes");
      return R_FAIL;
    }
    return R_DONE;
  }
  if (w < 0 && st - kr == 0) return R_DONE; /* the implicit variable absorbs the rest */
  if (kl || kr) {
    p->c.r1 =
        cn_row_make(env, sub->n_lead - kl, sub->lead + kl, sub->var, sub->n_trail - kr, sub->trail);
    p->c.r2 = w >= 0 ? cn_row_make(env, sl - kl, supL + kl, w, st - kr, supT)
                     : cn_row_make(env, 0, NULL, -1, st - kr, supT);
    p->off[0][0] += kl;
    p->off[1][0] += kl;
    p->off[0][1] += kr;
    p->off[1][1] += kr;
    env->events++;
    if (!p->c.r1 || !p->c.r2) return R_FAIL;
  }
  return R_PEND;
}

/* ---- Row constraints ------------------------------------------------------------------------- */

static result total_elems(cn_shape_env *env, const site *s, pending *p) {
  cn_row *r = cn_row_resolve(env, p->c.r1);
  if (!r) return R_FAIL;
  int64_t product = 1;
  int unknown = 0;
  cn_dim *last_unknown = NULL;
  for (int i = 0; i < r->n_lead + r->n_trail; i++) {
    cn_dim *d = i < r->n_lead ? r->lead[i] : r->trail[i - r->n_lead];
    if (d->kind == CN_DIM_SOLVED) {
      product *= d->size;
    } else {
      unknown++;
      last_unknown = d;
    }
  }
  char what[256];
  int64_t num = p->c.count;
  bool known = true;
  if (p->c.d1) {
    cn_dim *v = cn_dim_resolve(env, p->c.d1);
    if (!v) return R_FAIL;
    known = v->kind == CN_DIM_SOLVED;
    if (known) {
      if ((v->size * p->c.coeff) % p->c.denom != 0) {
        snprintf(what, sizeof what, "%lld * %lld is not divisible by %lld", (long long)p->c.coeff,
                 (long long)v->size, (long long)p->c.denom);
        conflict(env, s, v, NULL, what);
        return R_FAIL;
      }
      num = v->size * p->c.coeff / p->c.denom;
    }
  }
  if (known) {
    if (num % product != 0 || (r->var < 0 && unknown == 0 && num != product)) {
      snprintf(what, sizeof what, "the row must hold %lld elements but its known axes hold %lld%s",
               (long long)num, (long long)product, num % product ? " (not a divisor)" : "");
      conflict(env, s, NULL, NULL, what);
      return R_FAIL;
    }
    if (r->var < 0 && unknown == 0) return R_DONE;
    if (r->var < 0 && unknown == 1 && last_unknown->kind == CN_DIM_VAR) {
      cn_dim *d = cn_dim_solved(env, num / product, NULL);
      return d ? unify_dim(env, s, last_unknown, d) : R_FAIL;
    }
    return R_PEND;
  }
  if (r->var >= 0 || unknown) return R_PEND;
  if ((product * p->c.denom) % p->c.coeff != 0) {
    snprintf(what, sizeof what, "%lld elements are not a multiple of %lld", (long long)product,
             (long long)p->c.coeff);
    conflict(env, s, NULL, NULL, what);
    return R_FAIL;
  }
  cn_dim *d = cn_dim_solved(env, product * p->c.denom / p->c.coeff, NULL);
  return d ? unify_dim(env, s, p->c.d1, d) : R_FAIL;
}

static result min_dim(cn_shape_env *env, const site *s, pending *p) {
  cn_dim *d = cn_dim_resolve(env, p->c.d1);
  if (!d) return R_FAIL;
  if (d->kind == CN_DIM_VAR) {
    if (env->dim_min[d->var] < p->c.min && !set_min(env, d->var, p->c.min)) return R_FAIL;
    return R_DONE;
  }
  if (d->kind == CN_DIM_AFFINE) return R_PEND;
  if (d->size < p->c.min) {
    char what[160];
    snprintf(what, sizeof what, "fixed index %lld is out of range of an axis of size %lld",
             (long long)(p->c.min - 1), (long long)d->size);
    conflict(env, s, p->min_on_b ? NULL : d, p->min_on_b ? d : NULL, what);
    return R_FAIL;
  }
  return R_DONE;
}

result cn_sv_process(cn_shape_env *env, pending *p) {
  bool dim_entry = p->c.kind == CN_SC_DIM_EQ || p->c.kind == CN_SC_DIM_INEQ;
  bool row_eq = p->c.kind == CN_SC_ROW_EQ;
  site s = {.op = p->op,
            .c = &p->c,
            .axis_a = p->axis_a,
            .axis_b = p->axis_b,
            .self = dim_entry ? p : NULL,
            .spec_row = row_eq ? spec_row_of(p->op, &p->c) : p->spec_row,
            .spec_len = -1,
            .spec_pos = row_eq ? SPEC_WHOLE : p->spec_pos};
  p->reused = false;
  switch (p->c.kind) {
  case CN_SC_DIM_EQ: return unify_dim(env, &s, p->c.d1, p->c.d2);
  case CN_SC_DIM_INEQ: return ineq_dim(env, &s, p->c.d1, p->c.d2);
  case CN_SC_ROW_EQ:
  case CN_SC_EXACT: return unify_row(env, &s, (const int(*)[2])p->off, p->c.r1, p->c.r2);
  case CN_SC_ROW_INEQ: return ineq_row(env, &s, p);
  case CN_SC_TOTAL: return total_elems(env, &s, p);
  case CN_SC_MIN_DIM: return min_dim(env, &s, p);
  }
  return R_FAIL;
}

cn_status cn_shape_solve(cn_shape_env *env, const cn_shape_op *op, const cn_shape_constraint *c) {
  pending p = {0};
  p.op = op;
  p.c = *c;
  p.axis_a = p.axis_b = NO_AXIS;
  result r = cn_sv_process(env, &p);
  if (r == R_FAIL) return env->ctx->status ? env->ctx->status : CN_ERR_INVALID;
  if (r == R_PEND && push_pending(env, &p) == R_FAIL) return CN_ERR_NOMEM;
  return CN_OK;
}

static const cn_shape *super_shape(const pending *p) {
  if (!p->op || p->c.b.slot < 0) return NULL;
  return p->c.b.slot == 0 ? p->op->lhs : p->op->rhs[p->c.b.slot - 1];
}

/* Two pending `w ⊑ R1`, `w ⊑ R2` over one open result row w with closed operand rows: w must
 * broadcast to both, so their right-aligned solved dims must agree or be units. Checked for the
 * constraints of the operation just added, so a pointwise operation over operands that can
 * never broadcast together fails when it is built, not at finalization. */
static cn_status check_joint_bounds(cn_shape_env *env, const cn_shape_op *op, int first) {
  for (int i = first; i < env->n_pend; i++) {
    const pending *p = &env->pend[i];
    if (p->done || p->op != op || p->c.kind != CN_SC_ROW_INEQ) continue;
    cn_row *w = cn_row_resolve(env, p->c.r1), *r1 = cn_row_resolve(env, p->c.r2);
    if (!w || !r1) return CN_ERR_NOMEM;
    if (w->var < 0 || w->n_lead || w->n_trail || r1->var >= 0) continue;
    int n_uses = cn_sv_gather_row(env, w->var);
    if (n_uses < 0) return CN_ERR_NOMEM;
    for (int u = 0; u < n_uses; u++) {
      int j = env->gathered[u];
      const pending *q = &env->pend[j];
      if (j == i || q->c.kind != CN_SC_ROW_INEQ || (q->op == op && j < i)) continue;
      cn_row *w2 = cn_row_resolve(env, q->c.r1), *r2 = cn_row_resolve(env, q->c.r2);
      if (!w2 || !r2) return CN_ERR_NOMEM;
      if (w2->var != w->var || w2->n_lead || w2->n_trail || r2->var >= 0) continue;
      int n = r1->n_trail < r2->n_trail ? r1->n_trail : r2->n_trail;
      for (int k = 1; k <= n; k++) {
        cn_dim *a = cn_dim_resolve(env, r1->trail[r1->n_trail - k]);
        cn_dim *b = cn_dim_resolve(env, r2->trail[r2->n_trail - k]);
        if (!a || !b) return CN_ERR_NOMEM;
        if (a->kind != CN_DIM_SOLVED || b->kind != CN_DIM_SOLVED || a->size == b->size ||
            cn_dim_is_unit(a) || cn_dim_is_unit(b))
          continue;
        const cn_shape *sa = super_shape(p), *sb = super_shape(q);
        char what[480];
        snprintf(what, sizeof what,
                 "operands that cannot broadcast together: axis %d of the %s row has size %lld%s%s "
                 "in \"%s\" (#%d) and %lld%s%s in \"%s\" (#%d)%s",
                 -k, cn_row_kind_name(q->c.b.row), (long long)a->size, a->label ? ":" : "",
                 a->label ? a->label : "", sa ? sa->label : "?", sa ? sa->id : 0,
                 (long long)b->size, b->label ? ":" : "", b->label ? b->label : "",
                 sb ? sb->label : "?", sb ? sb->id : 0,
                 (a->label && a->size == 1) || (b->label && b->size == 1)
                     ? " (a labeled axis of size 1 does not broadcast)"
                     : "");
        return cn_sv_pending_conflict(env, q, what);
      }
    }
  }
  return CN_OK;
}

/* ---- Readers --------------------------------------------------------------------------------- */

int cn_shape_row_dims(cn_shape_env *env, const cn_shape *sh, cn_row_kind kind, int64_t *out,
                      int cap) {
  cn_row *r = cn_row_resolve(env, sh->rows[kind]);
  if (!r) return -1;
  if (r->var >= 0) {
    cn_fail(env->ctx, CN_ERR_INVALID, "the %s row of \"%s\" (#%d) is not solved: %s",
            cn_row_kind_name(kind), sh->label, sh->id, cn_shape_str(env, sh));
    return -1;
  }
  for (int i = 0; i < r->n_trail; i++) {
    if (r->trail[i]->kind != CN_DIM_SOLVED) {
      cn_fail(env->ctx, CN_ERR_INVALID, "axis %d of the %s row of \"%s\" (#%d) is not solved: %s",
              i, cn_row_kind_name(kind), sh->label, sh->id, cn_shape_str(env, sh));
      return -1;
    }
    if (i < cap) out[i] = r->trail[i]->size;
  }
  return r->n_trail;
}

int cn_shape_dims(cn_shape_env *env, const cn_shape *sh, int64_t *out, int cap) {
  static const cn_row_kind order[CN_N_ROWS] = {CN_ROW_BATCH, CN_ROW_OUTPUT, CN_ROW_INPUT};
  int total = 0;
  for (int k = 0; k < CN_N_ROWS; k++) {
    int n = cn_shape_row_dims(env, sh, order[k], out ? out + (total < cap ? total : cap) : NULL,
                              cap > total ? cap - total : 0);
    if (n < 0) return -1;
    total += n;
  }
  return total;
}

/* ---- Operations ------------------------------------------------------------------------------ */

static bool copy_args(cn_shape_env *env, cn_shape_args *dst, const cn_shape_args *src) {
  *dst = *src;
  if (src->n_bindings) {
    cn_shape_binding *b = cn_alloc(env->ctx, sizeof *b * (size_t)src->n_bindings);
    if (!b) return false;
    for (int i = 0; i < src->n_bindings; i++) {
      b[i].value = src->bindings[i].value;
      if (!(b[i].name = cn_strdup(env->ctx, src->bindings[i].name))) return false;
    }
    dst->bindings = b;
  }
  for (int k = 0; k < CN_N_ROWS; k++) {
    if (!src->n_dims[k]) continue;
    int64_t *d = cn_alloc(env->ctx, sizeof *d * (size_t)src->n_dims[k]);
    if (!d) return false;
    memcpy(d, src->dims[k], sizeof *d * (size_t)src->n_dims[k]);
    dst->dims[k] = d;
    if (src->labels[k]) {
      const char **l = cn_alloc(env->ctx, sizeof *l * (size_t)src->n_dims[k]);
      if (!l) return false;
      for (int i = 0; i < src->n_dims[k]; i++)
        if (src->labels[k][i] && !(l[i] = cn_strdup(env->ctx, src->labels[k][i]))) return false;
      dst->labels[k] = l;
    }
  }
  return true;
}

cn_shape_op *cn_shape_add_op(cn_shape_env *env, cn_shape_kind kind, const cn_shape_args *args,
                             cn_shape *lhs, cn_shape *const *rhs, int n_rhs) {
  static const cn_shape_args no_args;
  if (!args) args = &no_args;
  if (!cn_arena_grow(env->ctx, (void **)&env->ops, &env->cap_ops, env->n_ops + 1,
                     sizeof(cn_shape_op *)))
    return NULL;
  cn_shape_op *op = cn_alloc(env->ctx, sizeof *op);
  if (!op || !copy_args(env, &op->args, args)) return NULL;
  op->id = env->n_ops + 1;
  op->kind = kind;
  op->lhs = lhs;
  op->n_rhs = n_rhs;
  for (int i = 0; i < n_rhs && i < 3; i++) op->rhs[i] = rhs[i];
  if (cn_shape_derive(env, kind, &op->args, lhs, rhs, n_rhs, &op->constraints,
                      &op->n_constraints) != CN_OK)
    return NULL;
  int n_pend = env->n_pend;
  env->ops[env->n_ops++] = op;
  env->trailing = true;
  env->n_trail = 0;
  bool ok = true;
  for (int i = 0; i < op->n_constraints && ok; i++)
    ok = cn_shape_solve(env, op, &op->constraints[i]) == CN_OK;
  ok = ok && cn_shape_propagate(env) == CN_OK && check_joint_bounds(env, op, n_pend) == CN_OK;
  env->trailing = false;
  if (!ok) {
    rollback(env, n_pend);
    env->n_ops--;
    return NULL;
  }
  env->n_trail = 0;
  return op;
}
