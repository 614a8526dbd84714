/* Tensor constructors of the core library: numbers, data literals, parameters (with the default
 * random init), pointwise application of any primitive op, einsum with 1-3 operands, compose,
 * transpose, stop_gradient, batch slices, the fetch terminals and counter-based random
 * initialization assembled as convolution-is-a-contraction describes it: uniform1 =
 * uint4x32_to_prec_uniform1(threefry(threefry(embed_self_id, seed), range_over_offsets)) with the
 * light (2-round) threefry, as OCANNL wires it (ocannl-notes §7.4).
 *
 * Invariants: a result's precision is the promotion of its operands' (uint4x32 wins, so hashes
 * stay words), except the uint4x32 conversions, which produce the graph's precision; a tensor is
 * differentiable iff some operand is and the op has a derivative in that operand (parameters
 * always, constants and fetches never). */
#include "tensor/tensor.h"

#include "numeric/numeric.h"
#include "shape/einsum.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Numbers are arrays of one output axis of size 1 (syntax-extensions-cd-op "Numeric and
 * N-dimensional array literals"; ocannl-notes §2.5): an unlabeled unit axis, which broadcasts to
 * any size but gives a result of numbers its axis. The library's own scalars (the embedded node id,
 * symbol value and random seed, the default initializer's constants) have no axes: they fill
 * whatever shape they meet and never give a parameter's initializer, which takes the parameter's
 * shape, an axis. */
static const int64_t unit_dim[1] = {1};
static const cn_shape_row_spec unit_rows[CN_N_ROWS] = {
    {true, 0, NULL, NULL}, {true, 0, NULL, NULL}, {true, 1, unit_dim, NULL}};
static const cn_shape_row_spec scalar_rows[CN_N_ROWS] = {
    {true, 0, NULL, NULL}, {true, 0, NULL, NULL}, {true, 0, NULL, NULL}};

bool cn_tensor_op_diff(const cn_tensor *t) {
  if (t->stops_gradient || (t->kind != CN_TK_ACCUM && t->kind != CN_TK_TILE)) return false;
  for (int i = 0; i < cn_tensor_n_operands(t); i++)
    if (t->args[i]->diff && (t->formulas ? cn_op_formulas_differentiable(t->formulas, i)
                                         : cn_op_differentiable(t->prim, i)))
      return true;
  return false;
}

static cn_prec result_prec(cn_graph *g, cn_op prim, int n, cn_tensor *const *args) {
  if (cn_op_table[prim].flags & CN_OPF_TO_PREC) return g->prec;
  cn_prec p = args[0]->prec;
  for (int i = 1; i < n; i++) p = cn_prec_promote(p, args[i]->prec);
  return p;
}

static cn_tensor *labeled_constant(cn_graph *g, double value, const cn_shape_row_spec *rows) {
  char label[64];
  snprintf(label, sizeof label, "%g", value);
  return cn_tensor_constant(g, label, value, rows);
}

cn_tensor *cn_tensor_number(cn_graph *g, double value) {
  return labeled_constant(g, value, unit_rows);
}

cn_tensor *cn_tensor_scalar(cn_graph *g, double value) {
  return labeled_constant(g, value, scalar_rows);
}

/* A row with n > 0 axes must give their sizes. *numel: the cell count when every row and size
 * is given, else -1. */
static bool dims_given(cn_ctx *ctx, const char *what, const char *label, const cn_dims *dims,
                       int64_t *numel) {
  const cn_axes *axes[CN_N_ROWS] = {&dims->batch, &dims->input, &dims->output};
  *numel = 1;
  for (int k = 0; k < CN_N_ROWS; k++) {
    if (axes[k]->n > 0 && !axes[k]->dims) {
      cn_fail(ctx, CN_ERR_INVALID, "%s \"%s\": its %s row has %d axes but no sizes (NULL)", what,
              label ? label : "", cn_row_kind_name((cn_row_kind)k), axes[k]->n);
      return false;
    }
    if (axes[k]->n < 0) *numel = -1;
    for (int a = 0; a < axes[k]->n && *numel >= 0; a++)
      *numel = axes[k]->dims[a] > 0 ? *numel * axes[k]->dims[a] : -1;
  }
  return true;
}

const cn_shape_row_spec *cn_dims_rows(const cn_dims *dims, cn_shape_row_spec rows[CN_N_ROWS]) {
  if (!dims) return NULL;
  const cn_axes *axes[CN_N_ROWS] = {&dims->batch, &dims->input, &dims->output};
  for (int k = 0; k < CN_N_ROWS; k++)
    rows[k] = (cn_shape_row_spec){axes[k]->n >= 0, axes[k]->n > 0 ? axes[k]->n : 0, axes[k]->dims,
                                  axes[k]->labels};
  return rows;
}

cn_tensor *cn_tensor_constant(cn_graph *g, const char *label, double value,
                              const cn_shape_row_spec *rows) {
  cn_tensor *t =
      cn_tensor_new(g, label, CN_TK_NUMBER, g->prec, rows, CN_SL_TERMINAL, NULL, 0, NULL);
  if (t) t->number = value;
  return t;
}

cn_tensor *cn_tensor_data(cn_graph *g, const char *label, const cn_dims *dims, const double *values,
                          size_t count) {
  cn_ctx *ctx = g->ctx;
  if (!values || count == 0) {
    cn_fail(ctx, CN_ERR_INVALID, "data \"%s\": no values", label ? label : "");
    return NULL;
  }
  cn_shape_args args;
  memset(&args, 0, sizeof args);
  cn_shape_kind logic = CN_SL_RESHAPE;
  if (dims) {
    const cn_axes *axes[CN_N_ROWS] = {&dims->batch, &dims->input, &dims->output};
    for (int k = 0; k < CN_N_ROWS; k++) {
      if (axes[k]->n < 0) {
        cn_fail(ctx, CN_ERR_INVALID, "data \"%s\": its %s row must be given", label ? label : "",
                cn_row_kind_name((cn_row_kind)k));
        return NULL;
      }
      args.n_dims[k] = axes[k]->n;
      args.dims[k] = axes[k]->dims;
      args.labels[k] = axes[k]->labels;
    }
    /* sizes known now: a count that cannot fill them is reported here, not at materialization
     * (where it would fail every later request of the graph) */
    int64_t numel;
    if (!dims_given(ctx, "data", label, dims, &numel)) return NULL;
    if (numel > 0 && (uint64_t)numel % count != 0) {
      cn_fail(ctx, CN_ERR_INVALID, "data \"%s\": %zu values cannot fill its %lld cells",
              label ? label : "", count, (long long)numel);
      return NULL;
    }
    logic = CN_SL_DATA;
  } else {
    args.total = (int64_t)count;
  }
  double *copy = cn_alloc(ctx, count * sizeof *copy);
  if (!copy) return NULL;
  memcpy(copy, values, count * sizeof *copy);
  cn_tensor *t = cn_tensor_new(g, label, CN_TK_DATA, g->prec, NULL, logic, &args, 0, NULL);
  if (t) {
    t->values = copy;
    t->n_values = count;
  }
  return t;
}

/* ---- Fetch terminals and random init ------------------------------------------------------- */

static cn_tensor *fetch(cn_graph *g, const char *label, cn_prec prec, cn_tensor_fetch kind,
                        const cn_shape_row_spec *rows) {
  cn_tensor *t = cn_tensor_new(g, label, CN_TK_FETCH, prec, rows, CN_SL_TERMINAL, NULL, 0, NULL);
  if (t) t->fetch = kind;
  return t;
}

cn_tensor *cn_tensor_range_over_offsets(cn_graph *g) {
  return fetch(g, "range_over_offsets", CN_PREC_UINT32, CN_TF_RANGE_OVER_OFFSETS, NULL);
}

cn_tensor *cn_tensor_embed_self_id(cn_graph *g) {
  return fetch(g, "embed_self_id", CN_PREC_UINT4X32, CN_TF_EMBED_SELF_ID, scalar_rows);
}

cn_tensor *cn_tensor_embed_symbol(cn_graph *g, cn_symbol sym) {
  cn_tensor *t = fetch(g, cn_symbol_name(g->ctx, sym), g->prec, CN_TF_EMBED_SYMBOL, scalar_rows);
  if (t) t->sym = sym;
  return t;
}

/* The context's option "random_seed" (else $CANNL_RANDOM_SEED) into g->seed unless the graph's was
 * set; false with a message for a value of the variable that is no seed (the option's is checked
 * when set). */
static bool configured_seed(cn_graph *g) {
  if (g->seed_set) return true;
  const char *text = cn_ctx_stored_option(g->ctx, "random_seed");
  const char *from = "option random_seed";
  if (!text && (text = getenv("CANNL_RANDOM_SEED"))) from = "CANNL_RANDOM_SEED";
  if (!text) return true;
  uint64_t seed;
  if (!cn_parse_natural(text, strlen(text), UINT32_MAX, &seed))
    return cn_fail(g->ctx, CN_ERR_INVALID, "%s: '%s' is not a seed (an integer in [0, 2^32))", from,
                   text),
           false;
  g->seed = (uint32_t)seed;
  return true;
}

static cn_tensor *seed_tensor(cn_graph *g) {
  if (g->seed_tensor) return g->seed_tensor;
  if (!configured_seed(g)) return NULL;
  cn_tensor *t = cn_tensor_new(g, "random_seed", CN_TK_NUMBER, CN_PREC_UINT4X32, scalar_rows,
                               CN_SL_TERMINAL, NULL, 0, NULL);
  if (t) {
    t->number_bits = true;
    t->bits = g->seed;
  }
  return g->seed_tensor = t;
}

static cn_tensor *binop(cn_graph *g, cn_op op, cn_tensor *a, cn_tensor *b) {
  return cn_tensor_apply(g, op, 2, (cn_tensor *[]){a, b});
}

cn_tensor *cn_tensor_random_seed(cn_graph *g) {
  return seed_tensor(g);
}

cn_tensor *cn_tensor_threefry4x32(cn_graph *g, cn_tensor *key, cn_tensor *counter) {
  return binop(g, CN_OP_THREEFRY_LIGHT, key, counter);
}

/* threefry(threefry(embed_self_id, seed)[, counter], range_over_offsets): one word per cell. */
static cn_tensor *random_bits(cn_graph *g, cn_tensor *counter) {
  cn_tensor *id = cn_tensor_embed_self_id(g), *seed = seed_tensor(g);
  if (!id || !seed) return NULL;
  cn_tensor *key = cn_tensor_threefry4x32(g, id, seed);
  if (key && counter) key = cn_tensor_threefry4x32(g, key, counter);
  cn_tensor *range = key ? cn_tensor_range_over_offsets(g) : NULL;
  return range ? cn_tensor_threefry4x32(g, key, range) : NULL;
}

cn_tensor *cn_tensor_uniform1(cn_graph *g) {
  cn_tensor *bits = random_bits(g, NULL);
  return bits ? cn_tensor_apply(g, CN_OP_UNIFORM1, 1, &bits) : NULL;
}

cn_tensor *cn_tensor_uniform_at(cn_graph *g, cn_tensor *counter) {
  if (!counter) {
    cn_fail(g->ctx, CN_ERR_INVALID, "uniform_at: NULL counter");
    return NULL;
  }
  cn_tensor *bits = random_bits(g, counter);
  return bits ? cn_tensor_apply(g, CN_OP_UNIFORM1, 1, &bits) : NULL;
}

/* A vectorized op (CN_OPF_VEC) of bits: 16 / bytes(prec) values of the graph's precision per
 * cell of bits, along the last output axis. */
static cn_tensor *vec_apply(cn_graph *g, const char *label, cn_op op, cn_tensor *bits) {
  cn_shape_args args;
  memset(&args, 0, sizeof args);
  args.coeff = (int64_t)(16 / cn_prec_bytes(g->prec));
  cn_tensor *t =
      cn_tensor_new(g, label, CN_TK_VEC, g->prec, NULL, CN_SL_VEC_CONVERT, &args, 1, &bits);
  if (t) t->prim = op;
  return t;
}

cn_tensor *cn_tensor_uniform(cn_graph *g) {
  cn_tensor *bits = random_bits(g, NULL);
  return bits ? vec_apply(g, "uniform", CN_OP_UNIFORM, bits) : NULL;
}

/* ---- Parameters ------------------------------------------------------------------------------ */

cn_tensor *cn_tensor_param(cn_graph *g, const char *label, const cn_dims *dims, cn_tensor *init) {
  int64_t numel;
  if (dims && !dims_given(g->ctx, "parameter", label, dims, &numel)) return NULL;
  if (!init) { /* 0.5 * (uniform1 - 0.5), in [-0.25, 0.25) */
    cn_tensor *u = cn_tensor_uniform1(g), *half = u ? cn_tensor_scalar(g, 0.5) : NULL;
    cn_tensor *centered = half ? binop(g, CN_OP_SUB, u, half) : NULL;
    cn_tensor *half2 = centered ? cn_tensor_scalar(g, 0.5) : NULL;
    init = half2 ? binop(g, CN_OP_MUL, half2, centered) : NULL;
    if (!init) return NULL;
  }
  /* A number initializer fills the parameter (rank-free) and lets inference guess what nothing
   * determines, as for any leaf: {q = 3.0} alone is a scalar, while {hey = 7.0} * [2; 3] makes hey
   * a matrix (syntax-extensions-cd-op). */
  int64_t init_dims[CN_MAX_RANK];
  int init_rank = init->kind == CN_TK_NUMBER && !init->number_bits
                      ? cn_shape_dims(g->shapes, init->shape, init_dims, CN_MAX_RANK)
                      : -1;
  bool filled = init_rank == 0 || (init_rank == 1 && init_dims[0] == 1);
  if (init_rank == 1 && filled && !(init = cn_tensor_scalar(g, init->number))) return NULL;
  cn_shape_row_spec rows[CN_N_ROWS];
  cn_tensor *t = cn_tensor_new(g, label, CN_TK_PARAM, g->prec, cn_dims_rows(dims, rows),
                               CN_SL_POINTWISE, NULL, 1, &init);
  if (!t) return NULL;
  t->shape->guessable = filled;
  t->is_param = t->diff = true;
  t->accum = CN_OP_ADD;
  t->prim = CN_OP_ID;
  return t;
}

/* ---- Operations ---------------------------------------------------------------------------- */

static cn_tensor *accum_op(cn_graph *g, const char *label, cn_shape_kind logic,
                           const cn_shape_args *args, cn_op accum, cn_op prim, int n,
                           cn_tensor *const *operands) {
  cn_ctx *ctx = g->ctx;
  if (n != cn_op_arity(prim)) {
    cn_fail(ctx, CN_ERR_INVALID, "%s takes %d operand(s), got %d", cn_op_name(prim),
            cn_op_arity(prim), n);
    return NULL;
  }
  if (!cn_op_can_accumulate(accum)) {
    cn_fail(ctx, CN_ERR_INVALID, "%s is not an accumulation operator", cn_op_name(accum));
    return NULL;
  }
  for (int i = 0; i < n; i++)
    if (!operands[i]) {
      cn_fail(ctx, CN_ERR_INVALID, "%s: operand %d is NULL", cn_op_name(prim), i + 1);
      return NULL;
    }
  cn_prec prec = result_prec(g, prim, n, operands);
  /* 128-bit words do not add: a pointwise op producing uint4x32 (the threefry hashes) is the
   * plain `=:` (Arg2), which needs no neutral element since the pointwise LHS map is bijective */
  if (logic == CN_SL_POINTWISE && accum == CN_OP_ADD && cn_prec_kind_of(prec) == CN_PKIND_BITS)
    accum = CN_OP_ARG2;
  cn_tensor *t = cn_tensor_new(g, label, CN_TK_ACCUM, prec, NULL, logic, args, n, operands);
  if (!t) return NULL;
  t->accum = accum;
  t->prim = prim;
  t->diff = cn_tensor_op_diff(t);
  return t;
}

/* The checks of an operation's code and operands, before its logic is read (the text form's
 * order too). */
static bool operation_ok(cn_graph *g, const cn_op_code *code, cn_tensor *const *args) {
  cn_ctx *ctx = g->ctx;
  const char *label = code && code->label ? code->label : "operation";
  if (!code || code->arity < 1 || code->arity > 3 || !args) {
    cn_fail(ctx, CN_ERR_INVALID, "operation \"%s\": %s", label,
            !code   ? "no code"
            : !args ? "no operands"
                    : "1 to 3 operands");
    return false;
  }
  for (int i = 0; i < code->arity; i++)
    if (!args[i]) {
      cn_fail(ctx, CN_ERR_INVALID, "operation \"%s\": operand %d is NULL", label, i + 1);
      return false;
    }
  if (code->accum != CN_OP_ARG2 && code->accum != CN_OP_ADD && code->accum != CN_OP_MAX &&
      code->accum != CN_OP_MIN) {
    cn_fail(ctx, CN_ERR_INVALID,
            "operation \"%s\": accumulation %s (=: is arg2, =:+ add, =:@^ max, =:^^ min)", label,
            cn_op_name(code->accum));
    return false;
  }
  return true;
}

cn_tensor *cn_tensor_operation(cn_graph *g, const cn_op_code *code, cn_tensor *const *args) {
  if (!operation_ok(g, code, args)) return NULL;
  cn_shape_logic logic = {CN_SL_POINTWISE, NULL};
  if (code->logic && code->logic[0] && cn_shape_logic_parse(g->ctx, code->logic, &logic) != CN_OK)
    return NULL;
  return cn_tensor_operation_logic(g, code, &logic, args);
}

cn_tensor *cn_tensor_operation_logic(cn_graph *g, const cn_op_code *code,
                                     const cn_shape_logic *logic, cn_tensor *const *args) {
  cn_ctx *ctx = g->ctx;
  if (!operation_ok(g, code, args)) return NULL;
  const char *label = code->label ? code->label : "operation";
  cn_shape_kind kind = logic->kind;
  cn_shape_args sargs;
  memset(&sargs, 0, sizeof sargs);
  if (kind == CN_SL_COMPOSE && code->arity != 2) {
    cn_fail(ctx, CN_ERR_INVALID, "operation \"%s\": compose (\"@\") takes 2 operands, not %d",
            label, code->arity);
    return NULL;
  }
  if (kind == CN_SL_TRANSPOSE) {
    cn_fail(ctx, CN_ERR_INVALID,
            "operation \"%s\": transpose (\"T\") is not an operation's logic (\".\" pointwise, "
            "\"@\" compose or an einsum spec)",
            label);
    return NULL;
  }
  CN_ASSERT(kind == CN_SL_POINTWISE || kind == CN_SL_COMPOSE || kind == CN_SL_EINSUM);
  if (kind == CN_SL_EINSUM) {
    sargs.spec = logic->spec;
    sargs.unmarked = cn_graph_unmarked_conv(g);
  }
  cn_op_formulas *f = cn_op_formulas_parse(ctx, code);
  cn_op prim;
  bool is_prim;
  if (!f || cn_op_formulas_primitive(ctx, f, code->arity, &prim, &is_prim) != CN_OK) return NULL;
  cn_tensor *t;
  if (is_prim) {
    /* The primitive's own operation, as cn_tensor_apply / compose / einsum build it: the same
     * code, rewrites (a one-hot product's gather) and speed, which is what lets the notation's
     * prelude define library operations this way. A pointwise `=:` is the library's `=:+`: one
     * point writes each cell, so they agree (accum_op turns it back for 128-bit words). */
    cn_op accum = kind == CN_SL_POINTWISE && code->accum == CN_OP_ARG2 ? CN_OP_ADD : code->accum;
    t = accum_op(g, label, kind, kind == CN_SL_EINSUM ? &sargs : NULL, accum, prim, code->arity,
                 args);
    if (!t) return NULL;
  } else {
    t = cn_tensor_new(g, label, CN_TK_ACCUM, result_prec(g, CN_OP_ID, code->arity, args), NULL,
                      kind, &sargs, code->arity, args);
    if (!t) return NULL;
    t->accum = code->accum;
    t->prim = CN_OP_ID; /* unused: the formulas stand for it */
    t->formulas = f;
    t->diff = cn_tensor_op_diff(t);
  }
  if (code->no_grad) t->diff = false;
  t->stops_gradient = code->no_grad;
  return t;
}

cn_status cn_tensor_set_grad_spec(cn_tensor *t, cn_grad_spec spec) {
  cn_graph *g = t->g;
  bool used = t->value != NULL;
  for (int i = 0; i < g->n_tensors && !used; i++)
    for (int k = 0; k < g->tensors[i]->n_args; k++) used |= g->tensors[i]->args[k] == t;
  if (used)
    return cn_fail(g->ctx, CN_ERR_INVALID,
                   "the gradient spec of \"%s\" (#%d) must be set before the tensor is used",
                   t->label, t->id);
  switch (spec) {
  case CN_GRAD_PROHIBIT: t->diff = false; break;
  case CN_GRAD_REQUIRE: t->diff = true; break;
  case CN_GRAD_IF_NEEDED: t->diff = t->is_param || cn_tensor_op_diff(t); break;
  }
  return CN_OK;
}

cn_tensor *cn_tensor_apply(cn_graph *g, cn_op op, int n_args, cn_tensor *const *args) {
  if (n_args < 1 || n_args > 3 || !args) {
    cn_fail(g->ctx, CN_ERR_INVALID, "apply %s: %d operands", cn_op_name(op), n_args);
    return NULL;
  }
  if (cn_op_table[op].flags & CN_OPF_VEC)
    return n_args == 1 ? vec_apply(g, cn_op_name(op), op, args[0])
                       : (cn_fail(g->ctx, CN_ERR_INVALID, "apply %s: %d operands, not 1",
                                  cn_op_name(op), n_args),
                          NULL);
  return accum_op(g, cn_op_name(op), CN_SL_POINTWISE, NULL, CN_OP_ADD, op, n_args, args);
}

cn_tensor *cn_tensor_einsum(cn_graph *g, const char *spec, cn_op accum, cn_op prim, int n_args,
                            cn_tensor *const *args) {
  cn_shape_args sargs;
  memset(&sargs, 0, sizeof sargs);
  if (!(sargs.spec = cn_einsum_parse(g->ctx, spec))) return NULL;
  sargs.unmarked = cn_graph_unmarked_conv(g);
  return accum_op(g, spec, CN_SL_EINSUM, &sargs, accum, prim, n_args, args);
}

cn_tensor *cn_tensor_compose(cn_graph *g, cn_op accum, cn_op prim, cn_tensor *a, cn_tensor *b) {
  return accum_op(g, "compose", CN_SL_COMPOSE, NULL, accum, prim, 2, (cn_tensor *[]){a, b});
}

cn_tensor *cn_tensor_transpose(cn_graph *g, cn_tensor *a) {
  return accum_op(g, "transpose", CN_SL_TRANSPOSE, NULL, CN_OP_ADD, CN_OP_ID, 1, &a);
}

cn_tensor *cn_tensor_stop_gradient(cn_graph *g, cn_tensor *t) {
  cn_tensor *r = accum_op(g, "stop_gradient", CN_SL_POINTWISE, NULL, CN_OP_ADD, CN_OP_ID, 1, &t);
  if (r) r->diff = false, r->stops_gradient = true;
  return r;
}

cn_tensor *cn_tensor_batch_slice(cn_graph *g, cn_tensor *t, cn_symbol index) {
  if (!cn_ctx_symbol(g->ctx, index)) {
    cn_fail(g->ctx, CN_ERR_INVALID, "batch slice: symbol %d does not exist", index);
    return NULL;
  }
  cn_tensor *r = accum_op(g, "batch_slice", CN_SL_BATCH_SLICE, NULL, CN_OP_ADD, CN_OP_ID, 1, &t);
  if (r) {
    r->has_slice = true;
    r->slice = cn_index_iter(index);
  }
  return r;
}
