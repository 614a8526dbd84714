/* The shape logic of each operation kind (issue 3 "Shape logic per operation kind"): turns an
 * operation over shapes into its constraint list, a pure function of the shapes, the kind and the
 * arguments, so projection inference can derive the same constraints again over fresh copies.
 *
 * Einsum reading (syntax-extensions-cd-op): a label names one dim variable per operation; `...` is
 * the row variable of its row kind (..batch.., ..input.., ..output..) and a named ..v.. is shared
 * across the spec; a fixed index k is a fresh dim of at least k+1; `_` is a fresh dim. An operand
 * row written without a row variable broadcasts "to the left": it gets a fresh row variable before
 * its axes, so "ijk => ki" reduces any further axes; the result's rows are exactly what the spec
 * writes. Einsum asserts equalities only.
 *
 * The one reader of a logic's text ("." "@" "T" or an einsum spec, cn_shape_logic_parse) is here
 * too: the notation and the API's text entry points call it once and pass the parsed record down.
 *
 * Invariants: the logic builds terms (term.c's constructors: fresh variables, solved and affine
 * dims, rows) and solves nothing; it calls no other file of the solver, so ops.c derives and
 * then unifies, and projection inference can derive alone. */
#include "shape/shape.h"

#include <string.h>

typedef struct {
  cn_shape_env *env;
  cn_shape_constraint *v;
  int n, cap;
} builder;

static cn_shape_constraint *add(builder *b, cn_sc_kind kind, int slot_a, cn_row_kind row_a,
                                int slot_b, cn_row_kind row_b) {
  if (b->n == b->cap) {
    int cap = b->cap ? b->cap * 2 : 8;
    cn_shape_constraint *v = cn_alloc(cn_shape_env_ctx(b->env), sizeof *v * (size_t)cap);
    if (!v) return NULL;
    if (b->n) memcpy(v, b->v, sizeof *v * (size_t)b->n);
    b->v = v;
    b->cap = cap;
  }
  cn_shape_constraint *c = &b->v[b->n++];
  memset(c, 0, sizeof *c);
  c->kind = kind;
  c->a = (cn_sc_side){slot_a, row_a};
  c->b = (cn_sc_side){slot_b, row_b};
  return c;
}

static bool row_rel(builder *b, cn_sc_kind kind, cn_shape *const *slots, int sa, cn_row_kind ra,
                    int sb, cn_row_kind rb) {
  cn_shape_constraint *c = add(b, kind, sa, ra, sb, rb);
  if (!c) return false;
  c->r1 = slots[sa]->rows[ra];
  c->r2 = slots[sb]->rows[rb];
  return true;
}

static cn_status arity(cn_ctx *ctx, cn_shape_kind kind, int n_rhs, int lo, int hi) {
  if (n_rhs >= lo && n_rhs <= hi) return CN_OK;
  if (lo == hi)
    return cn_fail(ctx, CN_ERR_INVALID, "shape logic %s takes %d operand%s, got %d",
                   cn_shape_kind_name(kind), lo, lo == 1 ? "" : "s", n_rhs);
  return cn_fail(ctx, CN_ERR_INVALID, "shape logic %s takes %d to %d operands, got %d",
                 cn_shape_kind_name(kind), lo, hi, n_rhs);
}

static cn_row *closed_row(cn_shape_env *env, int n, const int64_t *dims,
                          const char *const *labels) {
  cn_dim **d = cn_alloc(cn_shape_env_ctx(env), sizeof *d * (size_t)(n + 1));
  if (!d) return NULL;
  for (int i = 0; i < n; i++) {
    if (dims[i] < 1) {
      cn_fail(cn_shape_env_ctx(env), CN_ERR_INVALID, "data dims must be >= 1, got %lld",
              (long long)dims[i]);
      return NULL;
    }
    if (!(d[i] = cn_dim_solved(env, dims[i], labels ? labels[i] : NULL))) return NULL;
  }
  return cn_row_make(env, 0, NULL, -1, n, d);
}

/* ---- Einsum ---------------------------------------------------------------------------------- */

typedef struct {
  const char *name;
  cn_dim *dim;
  int row_var;
} name_entry;

typedef struct {
  builder *b;
  const cn_shape_args *args;
  name_entry *labels, *rows;
  int n_labels, n_rows, cap;
} einsum_ctx;

static cn_dim *label_dim(einsum_ctx *e, const char *name) {
  for (int i = 0; i < e->n_labels; i++)
    if (strcmp(e->labels[i].name, name) == 0) return e->labels[i].dim;
  cn_dim *d = cn_dim_var(e->b->env);
  if (!d) return NULL;
  d->label = name; /* a variable's label only names it (loop names in projections) */
  e->labels[e->n_labels++] = (name_entry){name, d, -1};
  return d;
}

static int named_row_var(einsum_ctx *e, const char *name) {
  for (int i = 0; i < e->n_rows; i++)
    if (strcmp(e->rows[i].name, name) == 0) return e->rows[i].row_var;
  int v = cn_row_var_new(e->b->env);
  if (v >= 0) e->rows[e->n_rows++] = (name_entry){name, NULL, v};
  return v;
}

static bool bound_int(einsum_ctx *e, const char *name, int64_t literal, const char *what,
                      int column, int64_t *out) {
  cn_ctx *ctx = cn_shape_env_ctx(e->b->env);
  *out = literal;
  if (name) {
    int i = 0;
    while (i < e->args->n_bindings && strcmp(e->args->bindings[i].name, name) != 0) i++;
    if (i == e->args->n_bindings) {
      cn_suggest s;
      cn_suggest_init(&s, name);
      for (i = 0; i < e->args->n_bindings; i++) cn_suggest_consider(&s, e->args->bindings[i].name);
      cn_fail(ctx, CN_ERR_INVALID, "einsum \"%s\": the %s '%s' at column %d is not bound%s",
              e->args->spec->text, what, name, column, cn_suggest_text(&s));
      return false;
    }
    *out = e->args->bindings[i].value;
  }
  if (*out < 1) {
    cn_fail(ctx, CN_ERR_INVALID, "einsum \"%s\": the %s at column %d is %lld; it must be >= 1",
            e->args->spec->text, what, column, (long long)*out);
    return false;
  }
  /* a literal is below the limit by parsing; a value bound by name is held to the same limit */
  if (*out >= CN_EINSUM_INT_LIMIT) {
    cn_fail(ctx, CN_ERR_INVALID,
            "einsum \"%s\": the %s at column %d is %lld; it must be below 2^40",
            e->args->spec->text, what, column, (long long)*out);
    return false;
  }
  return true;
}

static cn_dim *axis_dim(einsum_ctx *e, const cn_es_axis *ax, int slot, cn_row_kind row) {
  cn_shape_env *env = e->b->env;
  switch (ax->kind) {
  case CN_ES_LABEL: return label_dim(e, ax->label);
  case CN_ES_PLACEHOLDER: return cn_dim_var(env);
  case CN_ES_FIXED: {
    cn_dim *d = cn_dim_var(env);
    cn_shape_constraint *c = d ? add(e->b, CN_SC_MIN_DIM, slot, row, -1, row) : NULL;
    if (!c) return NULL;
    c->d1 = d;
    c->min = ax->fixed + 1; /* no overflow: the parser keeps fixed below CN_EINSUM_INT_LIMIT */
    return d;
  }
  case CN_ES_AFFINE: {
    int64_t stride, dilation = 1;
    if (!bound_int(e, ax->stride_name, ax->stride, "stride", ax->column, &stride)) return NULL;
    bool conv = ax->conv != CN_ES_CONV_NONE;
    if (conv && !bound_int(e, ax->dilation_name, ax->dilation, "dilation", ax->column, &dilation))
      return NULL;
    if (ax->stride_offset < 0 || ax->stride_offset >= stride) {
      cn_fail(cn_shape_env_ctx(env), CN_ERR_INVALID,
              "einsum \"%s\": stride offset %lld at column %d must be in [0, %lld)",
              e->args->spec->text, (long long)ax->stride_offset, ax->column, (long long)stride);
      return NULL;
    }
    cn_dim *over = label_dim(e, ax->label);
    cn_dim *kernel = conv ? label_dim(e, ax->kernel) : NULL;
    if (!over || (conv && !kernel)) return NULL;
    cn_es_conv mode = ax->conv == CN_ES_CONV_UNSPECIFIED ? e->args->unmarked : ax->conv;
    if (conv && mode != CN_ES_CONV_PADDED && mode != CN_ES_CONV_VALID) {
      cn_fail(cn_shape_env_ctx(env), CN_ERR_INVALID,
              "einsum \"%s\": the kernel term at column %d has no padding marker: write "
              "%s=+%s (padded: the output as long as the input) or %s<+%s (valid), or set "
              "use_padding (`let use_padding = true` in a script, cn_graph_set_use_padding in C)",
              e->args->spec->text, ax->column, ax->label, ax->kernel, ax->label, ax->kernel);
      return NULL;
    }
    bool padded = mode == CN_ES_CONV_PADDED;
    cn_dim *d = cn_dim_affine(env, stride, over, conv, dilation, kernel, padded, ax->stride_offset);
    if (d && d->kind == CN_DIM_AFFINE) {
      d->affine.spec = e->args->spec->text;
      d->affine.column = ax->column;
    }
    return d;
  }
  }
  return NULL;
}

static cn_row *spec_row(einsum_ctx *e, const cn_es_row *r, int slot, cn_row_kind row) {
  cn_ctx *ctx = cn_shape_env_ctx(e->b->env);
  cn_dim **lead = cn_alloc(ctx, sizeof *lead * (size_t)(r->n_leading + 1));
  cn_dim **trail = cn_alloc(ctx, sizeof *trail * (size_t)(r->n_trailing + 1));
  if (!lead || !trail) return NULL;
  for (int i = 0; i < r->n_leading; i++)
    if (!(lead[i] = axis_dim(e, &r->leading[i], slot, row))) return NULL;
  for (int i = 0; i < r->n_trailing; i++)
    if (!(trail[i] = axis_dim(e, &r->trailing[i], slot, row))) return NULL;
  int var = -1;
  if (r->row_var)
    var = named_row_var(e, r->row_var);
  else if (slot != 0)
    var = cn_row_var_new(e->b->env); /* an operand broadcasts to the left of its axes */
  if ((r->row_var || slot != 0) && var < 0) return NULL;
  return cn_row_make(e->b->env, r->n_leading, lead, var, r->n_trailing, trail);
}

static int count_axes(const cn_es_shape *s) {
  return s->batch.n_leading + s->batch.n_trailing + s->input.n_leading + s->input.n_trailing +
         s->output.n_leading + s->output.n_trailing;
}

static cn_status einsum(builder *b, const cn_shape_args *args, cn_shape *const *slots, int n_rhs) {
  cn_ctx *ctx = cn_shape_env_ctx(b->env);
  const cn_einsum *spec = args->spec;
  if (!spec) return cn_fail(ctx, CN_ERR_INVALID, "einsum shape logic without a spec");
  if (spec->n_rhs != n_rhs)
    return cn_fail(ctx, CN_ERR_INVALID, "einsum \"%s\" has %d operand(s) but is applied to %d",
                   spec->text, spec->n_rhs, n_rhs);
  int total = count_axes(&spec->lhs);
  for (int i = 0; i < n_rhs; i++) total += count_axes(&spec->rhs[i]);
  einsum_ctx e = {b, args, NULL, NULL, 0, 0, 2 * total + 8};
  e.labels = cn_alloc(ctx, sizeof *e.labels * (size_t)e.cap);
  e.rows = cn_alloc(ctx, sizeof *e.rows * 12);
  if (!e.labels || !e.rows) return CN_ERR_NOMEM;
  for (int s = 0; s <= n_rhs; s++) {
    const cn_es_shape *sh = s == 0 ? &spec->lhs : &spec->rhs[s - 1];
    const cn_es_row *rows[CN_N_ROWS] = {&sh->batch, &sh->input, &sh->output};
    for (int k = 0; k < CN_N_ROWS; k++) {
      cn_row *r = spec_row(&e, rows[k], s, (cn_row_kind)k);
      if (!r) return ctx->status ? ctx->status : CN_ERR_NOMEM;
      cn_shape_constraint *c = add(b, CN_SC_ROW_EQ, s, (cn_row_kind)k, -1, (cn_row_kind)k);
      if (!c) return CN_ERR_NOMEM;
      c->r1 = slots[s]->rows[k];
      c->r2 = r;
    }
  }
  return CN_OK;
}

/* ---- The logic of each kind ------------------------------------------------------------------ */

/* Pointwise, compose and transpose: the result broadcasts each operand row it reads. */
static cn_status broadcasts(builder *b, cn_shape_kind kind, cn_shape *const *slots, int n_rhs) {
  const cn_row_kind B = CN_ROW_BATCH, I = CN_ROW_INPUT, O = CN_ROW_OUTPUT;
  bool ok = true;
  if (kind == CN_SL_POINTWISE) {
    for (int i = 1; i <= n_rhs && ok; i++)
      for (int k = 0; k < CN_N_ROWS && ok; k++)
        ok = row_rel(b, CN_SC_ROW_INEQ, slots, 0, (cn_row_kind)k, i, (cn_row_kind)k);
  } else if (kind == CN_SL_COMPOSE) {
    ok = row_rel(b, CN_SC_ROW_INEQ, slots, 1, I, 2, O) &&
         row_rel(b, CN_SC_ROW_INEQ, slots, 0, O, 1, O) &&
         row_rel(b, CN_SC_ROW_INEQ, slots, 0, I, 2, I) &&
         row_rel(b, CN_SC_ROW_INEQ, slots, 0, B, 1, B) &&
         row_rel(b, CN_SC_ROW_INEQ, slots, 0, B, 2, B);
    /* compose-accumulate (fma, syntax-extensions-cd-op): the third operand is read like the result
     * */
    for (int k = 0; k < CN_N_ROWS && ok && n_rhs == 3; k++)
      ok = row_rel(b, CN_SC_ROW_INEQ, slots, 0, (cn_row_kind)k, 3, (cn_row_kind)k);
  } else {
    ok = row_rel(b, CN_SC_ROW_INEQ, slots, 0, B, 1, B) &&
         row_rel(b, CN_SC_ROW_INEQ, slots, 0, I, 1, O) &&
         row_rel(b, CN_SC_ROW_INEQ, slots, 0, O, 1, I);
  }
  return ok ? CN_OK : CN_ERR_NOMEM;
}

/* The operand's batch row is the result's with one more leading axis (the sliced one). */
static cn_status batch_slice(builder *b, cn_shape *const *slots) {
  cn_shape_env *env = b->env;
  const cn_row_kind B = CN_ROW_BATCH;
  const cn_row *lb = slots[0]->rows[B];
  cn_dim **lead =
      cn_alloc(cn_shape_env_ctx(env), sizeof *lead * (size_t)(lb->n_lead + lb->n_trail + 1));
  cn_dim *sliced = cn_dim_var(env);
  if (!lead || !sliced) return CN_ERR_NOMEM;
  lead[0] = sliced;
  cn_row *wider;
  if (lb->var < 0) {
    memcpy(lead + 1, lb->trail, sizeof *lead * (size_t)lb->n_trail);
    wider = cn_row_make(env, 0, NULL, -1, lb->n_trail + 1, lead);
  } else {
    memcpy(lead + 1, lb->lead, sizeof *lead * (size_t)lb->n_lead);
    wider = cn_row_make(env, lb->n_lead + 1, lead, lb->var, lb->n_trail, lb->trail);
  }
  cn_shape_constraint *eq = wider ? add(b, CN_SC_ROW_EQ, 1, B, 0, B) : NULL;
  if (!eq) return CN_ERR_NOMEM;
  eq->r1 = slots[1]->rows[B];
  eq->r2 = wider;
  return row_rel(b, CN_SC_ROW_EQ, slots, 0, CN_ROW_INPUT, 1, CN_ROW_INPUT) &&
                 row_rel(b, CN_SC_ROW_EQ, slots, 0, CN_ROW_OUTPUT, 1, CN_ROW_OUTPUT)
             ? CN_OK
             : CN_ERR_NOMEM;
}

/* Data fixes every row; reshape fixes batch and input and leaves the output row its total. */
static cn_status data_or_reshape(builder *b, cn_shape_kind kind, const cn_shape_args *args,
                                 cn_shape *lhs) {
  cn_shape_env *env = b->env;
  cn_ctx *ctx = cn_shape_env_ctx(env);
  const cn_row_kind O = CN_ROW_OUTPUT;
  int64_t outer = 1;
  for (int k = 0; k < CN_N_ROWS; k++) {
    if (kind == CN_SL_RESHAPE && k == (int)O) continue;
    cn_row *r = closed_row(env, args->n_dims[k], args->dims[k], args->labels[k]);
    cn_shape_constraint *c = r ? add(b, CN_SC_EXACT, 0, (cn_row_kind)k, -1, (cn_row_kind)k) : NULL;
    if (!c) return ctx->status ? ctx->status : CN_ERR_NOMEM;
    c->r1 = lhs->rows[k];
    c->r2 = r;
    for (int i = 0; i < args->n_dims[k]; i++) outer *= args->dims[k][i];
  }
  if (kind != CN_SL_RESHAPE) return CN_OK;
  if (args->total < 1 || args->total % outer != 0)
    return cn_fail(ctx, CN_ERR_INVALID,
                   "reshape of \"%s\" (#%d): %lld elements do not split into batch and input "
                   "axes holding %lld",
                   lhs->label, lhs->id, (long long)args->total, (long long)outer);
  cn_shape_constraint *c = add(b, CN_SC_TOTAL, 0, O, -1, O);
  if (!c) return CN_ERR_NOMEM;
  c->r1 = lhs->rows[O];
  c->count = args->total / outer;
  return CN_OK;
}

/* Equal batch and input rows; the output rows hold `cells` and `coeff` times `cells` elements. */
static cn_status vec_convert(builder *b, const cn_shape_args *args, cn_shape *const *slots) {
  cn_shape_env *env = b->env;
  const cn_row_kind O = CN_ROW_OUTPUT;
  cn_shape *lhs = slots[0];
  if (args->coeff < 1)
    return cn_fail(cn_shape_env_ctx(env), CN_ERR_INVALID,
                   "vector conversion into \"%s\" (#%d): coefficient %lld", lhs->label, lhs->id,
                   (long long)args->coeff);
  cn_dim *cells = cn_dim_var(env);
  if (!cells) return CN_ERR_NOMEM;
  bool ok = row_rel(b, CN_SC_ROW_EQ, slots, 0, CN_ROW_BATCH, 1, CN_ROW_BATCH) &&
            row_rel(b, CN_SC_ROW_EQ, slots, 0, CN_ROW_INPUT, 1, CN_ROW_INPUT);
  cn_shape_constraint *c1 = ok ? add(b, CN_SC_TOTAL, 1, O, -1, O) : NULL;
  if (!c1) return CN_ERR_NOMEM;
  c1->r1 = slots[1]->rows[O];
  c1->d1 = cells;
  c1->coeff = c1->denom = 1;
  cn_shape_constraint *c2 = add(b, CN_SC_TOTAL, 0, O, -1, O);
  if (!c2) return CN_ERR_NOMEM;
  c2->r1 = lhs->rows[O];
  c2->d1 = cells;
  c2->coeff = args->coeff;
  c2->denom = 1;
  return CN_OK;
}

/* The operand count each kind takes, then its logic. */
static cn_status derive_kind(builder *b, cn_shape_kind kind, const cn_shape_args *args,
                             cn_shape *const *slots, int n_rhs) {
  cn_ctx *ctx = cn_shape_env_ctx(b->env);
  cn_status st;
  switch (kind) {
  case CN_SL_POINTWISE:
    st = arity(ctx, kind, n_rhs, 1, 3);
    return st != CN_OK ? st : broadcasts(b, kind, slots, n_rhs);
  case CN_SL_COMPOSE:
    st = arity(ctx, kind, n_rhs, 2, 3);
    return st != CN_OK ? st : broadcasts(b, kind, slots, n_rhs);
  case CN_SL_TRANSPOSE:
    st = arity(ctx, kind, n_rhs, 1, 1);
    return st != CN_OK ? st : broadcasts(b, kind, slots, n_rhs);
  case CN_SL_EINSUM:
    st = arity(ctx, kind, n_rhs, 1, 3);
    return st != CN_OK ? st : einsum(b, args, slots, n_rhs);
  case CN_SL_BATCH_SLICE:
    st = arity(ctx, kind, n_rhs, 1, 1);
    return st != CN_OK ? st : batch_slice(b, slots);
  case CN_SL_DATA:
  case CN_SL_RESHAPE:
    st = arity(ctx, kind, n_rhs, 0, 0);
    return st != CN_OK ? st : data_or_reshape(b, kind, args, slots[0]);
  case CN_SL_VEC_CONVERT:
    st = arity(ctx, kind, n_rhs, 1, 1);
    return st != CN_OK ? st : vec_convert(b, args, slots);
  case CN_SL_TERMINAL: return arity(ctx, kind, n_rhs, 0, 0);
  }
  return CN_OK;
}

cn_shape_kind cn_shape_logic_kind(const char *text) {
  if (text && strcmp(text, ".") == 0) return CN_SL_POINTWISE;
  if (text && strcmp(text, "@") == 0) return CN_SL_COMPOSE;
  if (text && strcmp(text, "T") == 0) return CN_SL_TRANSPOSE;
  return CN_SL_EINSUM;
}

cn_status cn_shape_logic_parse(cn_ctx *ctx, const char *text, cn_shape_logic *out) {
  out->kind = cn_shape_logic_kind(text);
  out->spec = NULL;
  if (out->kind == CN_SL_EINSUM && !(out->spec = cn_einsum_parse(ctx, text)))
    return ctx->status ? ctx->status : CN_ERR_NOMEM;
  return CN_OK;
}

cn_status cn_shape_derive(cn_shape_env *env, cn_shape_kind kind, const cn_shape_args *args,
                          cn_shape *lhs, cn_shape *const *rhs, int n_rhs, cn_shape_constraint **out,
                          int *n_out) {
  static const cn_shape_args no_args;
  if (!args) args = &no_args;
  builder b = {env, NULL, 0, 0};
  cn_shape *slots[4] = {lhs, NULL, NULL, NULL};
  if (n_rhs < 0 || n_rhs > 3) return arity(cn_shape_env_ctx(env), kind, n_rhs, 0, 3);
  for (int i = 0; i < n_rhs; i++) slots[i + 1] = rhs[i];
  cn_status st = derive_kind(&b, kind, args, slots, n_rhs);
  if (st != CN_OK) return st;
  *out = b.v;
  *n_out = b.n;
  return CN_OK;
}
