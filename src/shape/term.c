/* Terms of the shape solver (the bottom pass, see solver.h): the environment, dimension and row
 * terms and their construction, resolution through the substitution, printing, the readers of
 * solved shapes, and the names of row and operation kinds. It writes no binding except a path
 * compression (same meaning) and calls no other file of the solver: the occurrence index grows
 * its chains on demand (worklist.c), so a new variable needs no registration here.
 *
 * Invariants: a variable is bound at most once and its binding is resolved (never mentions the
 * variable: cycles are errors); `stamp` changes on every binding or minimum (worklist.c's
 * setters), so a resolution cached under the current stamp is current; a closed row keeps every
 * dim in trail. */
#include "shape/solver.h"

#include <stdio.h>
#include <string.h>

/* ---- Environment and terms ------------------------------------------------------------------- */

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

const char *cn_shape_kind_name(cn_shape_kind kind) {
  switch (kind) {
  case CN_SL_POINTWISE: return "pointwise";
  case CN_SL_COMPOSE: return "compose";
  case CN_SL_TRANSPOSE: return "transpose";
  case CN_SL_EINSUM: return "einsum";
  case CN_SL_BATCH_SLICE: return "batch slice";
  case CN_SL_DATA: return "data";
  case CN_SL_RESHAPE: return "reshape";
  case CN_SL_VEC_CONVERT: return "vector conversion";
  case CN_SL_TERMINAL: return "terminal";
  }
  return "?";
}

cn_dim *cn_dim_var(cn_shape_env *env) {
  if (env->n_dims == INT_MAX - 1) {
    cn_fail(env->ctx, CN_ERR_NOMEM, "shape inference: too many dimension variables");
    return NULL;
  }
  /* dim_min grows first, to at least the capacity dim_bind will have: a failure between the two
   * leaves them consistent */
  int need = env->n_dims + 1, min_cap = env->cap_dims;
  if (!cn_arena_grow(env->ctx, (void **)&env->dim_min, &min_cap, need, sizeof(int64_t)) ||
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

/* The input size an affine term reads for the given output (and kernel) sizes, into *span; false
 * when it exceeds int64 (the sizes are the user's: a stride below 2^40 times an output of 2^30
 * already does). */
static bool affine_span(const cn_dim *a, int64_t over, int64_t kernel, int64_t *span) {
  if (!a->affine.conv || a->affine.use_padding)
    return !__builtin_mul_overflow(a->affine.stride, over, span);
  int64_t reach;
  return !__builtin_mul_overflow(a->affine.stride, over - 1, span) &&
         !__builtin_mul_overflow(kernel - 1, a->affine.dilation, &reach) &&
         !__builtin_add_overflow(*span, reach, span) && !__builtin_add_overflow(*span, 1, span);
}

cn_status cn_sv_span_status(cn_shape_env *env) {
  const cn_dim *d = env->span_overflow;
  if (!d) return CN_OK;
  char sizes[96];
  if (d->affine.conv && !d->affine.use_padding)
    snprintf(sizes, sizeof sizes, "an output of size %lld and a kernel of size %lld",
             (long long)env->span_over, (long long)env->span_kernel);
  else
    snprintf(sizes, sizeof sizes, "an output of size %lld", (long long)env->span_over);
  return cn_fail(env->ctx, CN_ERR_INVALID,
                 "einsum \"%s\": the axis at column %d (stride %lld, dilation %lld) over %s would "
                 "read an input of more than 2^63 - 1 cells",
                 d->affine.spec ? d->affine.spec : "?", d->affine.column,
                 (long long)d->affine.stride, (long long)d->affine.dilation, sizes);
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
  if (!cn_arena_grow(env->ctx, (void **)&env->row_bind, &env->cap_rows, env->n_rows + 1,
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

/* ---- Resolution ------------------------------------------------------------------------------ */

/* Path compression of a variable's binding: the same meaning, so the stamp stays and nothing
 * wakes; on the trail only while it has room (a rollback restores it, but never needs to). */
static void compress_dim(cn_shape_env *env, int var, cn_dim *to) {
  if (env->trailing) {
    if (env->n_trail >= env->cap_trail) return;
    env->trail[env->n_trail++] =
        (cn_sv_undo){.kind = CN_SV_UNDO_DIM, .index = var, .dim = env->dim_bind[var]};
  }
  env->dim_bind[var] = to;
}

static cn_dim *resolve_affine(cn_shape_env *env, cn_dim *d) {
  cn_dim *over = cn_dim_resolve(env, d->affine.over);
  cn_dim *kernel = d->affine.conv ? cn_dim_resolve(env, d->affine.kernel) : NULL;
  if (!over || (d->affine.conv && !kernel)) return NULL;
  bool needs_kernel = d->affine.conv && !d->affine.use_padding;
  if (over->kind == CN_DIM_SOLVED && (!needs_kernel || kernel->kind == CN_DIM_SOLVED)) {
    int64_t k = needs_kernel ? kernel->size : 0, span;
    if (!affine_span(d, over->size, k, &span)) {
      /* a size no tensor can have, standing in until the caller reports the error: resolution
       * itself does not fail (its callers read a failure as lost memory) */
      span = INT64_MAX;
      if (!env->span_overflow) {
        env->span_overflow = d;
        env->span_over = over->size;
        env->span_kernel = k;
      }
    }
    return cn_dim_solved(env, span, NULL);
  }
  if (over == d->affine.over && kernel == d->affine.kernel) return d;
  cn_dim *r = cn_dim_affine(env, d->affine.stride, over, d->affine.conv, d->affine.dilation, kernel,
                            d->affine.use_padding, d->affine.stride_offset);
  if (r && r->kind == CN_DIM_AFFINE) {
    r->affine.spec = d->affine.spec;
    r->affine.column = d->affine.column;
  }
  return r;
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

/* ---- Printing -------------------------------------------------------------------------------- */

void cn_sv_dim_print(cn_sbuf *sb, cn_shape_env *env, cn_dim *d) {
  d = cn_dim_resolve(env, d);
  if (!d) return;
  switch (d->kind) {
  case CN_DIM_VAR: cn_sbuf_putc(sb, '?'); break; /* the solver's name 'dN means nothing to users */
  case CN_DIM_SOLVED:
    cn_sbuf_printf(sb, "%lld", (long long)d->size);
    if (d->label) cn_sbuf_printf(sb, ":%s", d->label);
    break;
  case CN_DIM_AFFINE:
    if (d->affine.stride != 1) cn_sbuf_printf(sb, "%lld*", (long long)d->affine.stride);
    cn_sv_dim_print(sb, env, d->affine.over);
    if (d->affine.conv) cn_sbuf_puts(sb, d->affine.use_padding ? "=" : "<");
    if (d->affine.stride_offset) cn_sbuf_printf(sb, "+%lld", (long long)d->affine.stride_offset);
    if (d->affine.conv) {
      cn_sbuf_putc(sb, '+');
      if (d->affine.dilation != 1) cn_sbuf_printf(sb, "%lld*", (long long)d->affine.dilation);
      cn_sv_dim_print(sb, env, d->affine.kernel);
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
    cn_sv_dim_print(sb, env, res->lead[i]);
  }
  if (res->var >= 0) {
    if (!first) cn_sbuf_putc(sb, ',');
    cn_sbuf_puts(sb, "..."); /* as a spec writes "any number of axes", not the solver's ..rN.. */
    first = false;
  }
  for (int i = 0; i < res->n_trail; i++, first = false) {
    if (!first) cn_sbuf_putc(sb, ',');
    cn_sv_dim_print(sb, env, res->trail[i]);
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
