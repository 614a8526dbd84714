/* The evaluator, part 2 of 4 (see eval_internal.h): application. Builtins (primitive ops by
 * their ops.def name, the operation library, the host builtins static_index and half_moons) and
 * let%op / let%cd functions.
 *
 * A function is applied curried: positional arguments fill its plain parameters in order,
 * labeled ones (~x, ?x) by name; once every required parameter is given the body runs (a let%op
 * body gives a value, a let%cd body a routine). Lifting points (seed 002 "Lifting of the
 * applications of config arguments", seed 000 "the unit boundary"): supplying a `~config` or
 * `()` parameter creates the function's inline declarations for that application, shared by
 * every later application of the partial function; and a config application `f ~config:{...}`
 * inside a body is a *config block*, evaluated once per lifting point (when it is created) and
 * reused by every evaluation of the body, as seed 002's expansion into config_block__i
 * bindings does. The primary tensor a let%op function returns is labeled by the function's name
 * and its input argument's label (seed 002 "Name from binding", "Label from function argument").
 *
 * Invariants: an application never changes the function value it applies (partial
 * applications are copies); call depth is bounded by MAX_CALL_DEPTH. */
#include "notation/eval_internal.h"

#include "numeric/numeric.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Arguments ----------------------------------------------------------------------------- */

bool nt_spec_argument(const char *name, int k) {
  return k == 0 && (strcmp(name, "einsum") == 0 || strcmp(name, "einsum1") == 0 ||
                    strcmp(name, "einsum3") == 0);
}

/* Evaluates the arguments of x; a positional string is an inline declaration except in a spec
 * position; `skip` (a labeled argument already consumed, or NULL) is left out. */
static bool eval_args(interp *I, env *e, decl_scope *ds, const cn_nt_expr *x, const char *name,
                      const cn_nt_arg *skip, args *a) {
  memset(a, 0, sizeof *a);
  for (int i = 0; i < x->u.apply.n_args; i++) {
    const cn_nt_arg *arg = &x->u.apply.args[i];
    if (arg == skip) continue;
    value *v;
    if (arg->value) {
      bool operand = !arg->label && !nt_spec_argument(name, a->n_pos);
      if (!(v = operand ? nt_eval_operand(I, e, ds, arg->value) : nt_eval(I, e, ds, arg->value)))
        return false;
    } else if (!(v = nt_lookup(I, e, arg->label))) {
      nt_fail(I, arg->pos, "unbound name '%s'", arg->label);
      return false;
    }
    if (arg->label) {
      if (a->n_lab == MAX_ARGS)
        return nt_fail(I, arg->pos, "%s", "too many labeled arguments"), false;
      a->lab[a->n_lab] = arg->label;
      a->lab_at[a->n_lab] = arg->pos;
      a->lab_v[a->n_lab++] = v;
    } else {
      if (a->n_pos == MAX_ARGS) return nt_fail(I, arg->pos, "%s", "too many arguments"), false;
      a->pos_at[a->n_pos] = arg->pos;
      a->pos[a->n_pos++] = v;
    }
  }
  return true;
}

static value *labeled(const args *a, const char *name) {
  for (int i = 0; i < a->n_lab; i++)
    if (strcmp(a->lab[i], name) == 0) return a->lab_v[i];
  return NULL;
}

static bool int_list(interp *I, value *v, cn_nt_pos pos, int64_t *out, int *n) {
  *n = 0;
  if (!v) return true;
  int count = v->kind == V_LIST ? v->n : 1;
  if (count > CN_MAX_RANK) return nt_fail(I, pos, "%s", "too many axes"), false;
  for (int i = 0; i < count; i++)
    if (!nt_as_int(I, v->kind == V_LIST ? v->items[i] : v, pos, &out[i])) return false;
  *n = count;
  return true;
}

static int64_t int_arg(const args *a, const char *name, int64_t dflt) {
  value *v = labeled(a, name);
  return v && v->kind == V_NUM ? (int64_t)v->num : dflt;
}

/* ---- Host builtins --------------------------------------------------------------------------- */

/* static_index N: a static index with values 0 .. N-1, bound by `for` loops. */
static value *static_index(interp *I, const args *a, cn_nt_pos at) {
  int64_t range;
  if (a->n_pos != 1 || a->n_lab != 0)
    return nt_fail(I, at, "%s", "static_index takes one argument, the number of values");
  if (!nt_as_int(I, a->pos[0], a->pos_at[0], &range)) return NULL;
  if (range < 1) return nt_fail(I, a->pos_at[0], "%s", "a static index needs at least one value");
  value *v = nt_mk(I, V_INDEX);
  if (v) v->index.range = range;
  return v;
}

/* half_moons ~n ~noise ~seed ~batch_size: the (points, labels) tuple of cn_dataset_half_moons;
 * batch axes [n / batch_size, batch_size] (or [n]), points with one output axis of 2. */
static value *half_moons(interp *I, const args *a, cn_nt_pos at) {
  static const char *const known[] = {"n", "noise", "seed", "batch_size"};
  for (int i = 0; i < a->n_lab; i++) {
    int k = 0;
    while (k < 4 && strcmp(a->lab[i], known[k]) != 0) k++;
    if (k == 4)
      return nt_fail(I, a->lab_at[i],
                     "half_moons has no argument ~%s (~n ~noise ~seed ~batch_size)", a->lab[i]);
  }
  value *nv = labeled(a, "n"), *noise = labeled(a, "noise"), *seed = labeled(a, "seed");
  value *bv = labeled(a, "batch_size");
  int64_t n, batch = 0, seed_v = 0;
  if (a->n_pos > 0 || !nv)
    return nt_fail(I, at, "%s",
                   "half_moons takes labeled arguments: ~n (points), ~noise, ~seed, "
                   "~batch_size");
  if (!nt_as_int(I, nv, at, &n) || (seed && !nt_as_int(I, seed, at, &seed_v)) ||
      (bv && !nt_as_int(I, bv, at, &batch)))
    return NULL;
  if (noise && noise->kind != V_NUM) return nt_fail(I, at, "%s", "~noise expects a number");
  if (n < 1 || n > (1 << 26) || seed_v < 0 || (bv && (batch < 1 || n % batch != 0)))
    return nt_fail(I, at, "%s",
                   "half_moons needs 1 <= ~n <= 2^26, ~seed >= 0 and a ~batch_size "
                   "dividing ~n");
  double *xy = cn_malloc(I->ctx, sizeof *xy * 3 * (size_t)n);
  if (!xy) return NULL;
  cn_dataset_half_moons((uint64_t)seed_v, noise ? noise->num : 0.1, (size_t)n, xy, xy + 2 * n);
  const int64_t split[2] = {bv ? n / batch : n, batch}, coords = 2;
  const cn_axes batch_axes = {bv ? 2 : 1, split, NULL};
  const cn_dims pd = {batch_axes, CN_AXES_NONE, {1, &coords, NULL}};
  const cn_dims ld = {batch_axes, CN_AXES_NONE, CN_AXES_NONE};
  cn_tensor *points = cn_tensor_data(I->g, "half_moons", &pd, xy, 2 * (size_t)n);
  cn_tensor *labels =
      points ? cn_tensor_data(I->g, "half_moons_labels", &ld, xy + 2 * n, (size_t)n) : NULL;
  free(xy);
  value *v = labels ? nt_mk(I, V_LIST) : NULL;
  if (!labels) return nt_fail_here(I, at);
  if (!v || !(v->items = cn_alloc(I->ctx, 2 * sizeof *v->items)) ||
      !(v->items[0] = nt_tensor_value(I, points)) || !(v->items[1] = nt_tensor_value(I, labels)))
    return NULL;
  v->n = 2;
  v->tuple = true;
  return v;
}

/* ---- Tensor builtins ------------------------------------------------------------------------- */

/* Tile builds a statement from its tensors' dims: a tensor whose shape is still open (a pointwise
 * result's rows close at materialization) is settled by materializing the graph first. */
static bool settle_shapes(interp *I, cn_tensor *const *t, int n, cn_nt_pos at) {
  for (int i = 0; i < n; i++) {
    int64_t dims[CN_MAX_RANK];
    if (!t[i] || cn_shape_dims(I->g->shapes, t[i]->shape, dims, CN_MAX_RANK) >= 0) continue;
    if (cn_ctx_status(I->ctx) == CN_ERR_NOMEM) return false;
    cn_ctx_clear_error(I->ctx);
    return nt_materialize(I, at);
  }
  return true;
}

/* ~name:N or ~name:(N0, N1) for a 2-D operation: out[0], out[1] (dflt when absent). */
static bool pair_arg(interp *I, const args *a, const char *name, int64_t dflt, int64_t out[2],
                     cn_nt_pos at) {
  int64_t v[CN_MAX_RANK] = {0};
  int n;
  if (!int_list(I, labeled(a, name), at, v, &n)) return false;
  if (n > 2) return nt_fail(I, at, "~%s takes one integer or a pair", name), false;
  out[0] = n ? v[0] : dflt;
  out[1] = n == 2 ? v[1] : out[0];
  return true;
}

/* The Tile library (seed 003's examples, cn_tile_* in include/cannl.h) by its C name without
 * cn_: tile_max_pool_1d [~round_up:true], tile_conv_2d_dilated [~dilation:D or (D0, D1)],
 * tile_complex_conv_2d [~stride] [~dilation], ... Returns 0 when the name is not one of them (or
 * the operands do not fit), -1 on a bad option (positioned message), else 1 with *r the result
 * (NULL with the library's message on a failure). */
static int tile_builtin(interp *I, const char *name, const args *a, cn_tensor *const *t, int nt,
                        cn_nt_pos at, cn_tensor **r) {
  cn_graph *g = I->g;
  int64_t s[2], d[2];
  if (strncmp(name, "tile_", 5) != 0) return 0;
  if (!pair_arg(I, a, "stride", 1, s, at) || !pair_arg(I, a, "dilation", 1, d, at) ||
      !settle_shapes(I, t, nt, at))
    return -1;
  const char *op = name + 5;
  if (nt == 1 && strcmp(op, "sum_over_axis") == 0)
    *r = cn_tile_sum_over_axis(g, t[0]);
  else if (nt == 1 && strcmp(op, "max_over_axis") == 0)
    *r = cn_tile_max_over_axis(g, t[0]);
  else if (nt == 1 && strcmp(op, "global_min") == 0)
    *r = cn_tile_global_min(g, t[0]);
  else if (nt == 1 && strcmp(op, "average") == 0)
    *r = cn_tile_average(g, t[0]);
  else if (nt == 1 && strcmp(op, "max_pool_1d") == 0) {
    value *up = labeled(a, "round_up");
    *r = cn_tile_max_pool_1d(g, t[0], up && up->kind == V_BOOL && up->b);
  } else if (nt == 1 && strcmp(op, "cumsum") == 0)
    *r = cn_tile_cumsum(g, t[0]);
  else if (nt == 2 && strcmp(op, "conv_1d") == 0)
    *r = cn_tile_conv_1d(g, t[0], t[1]);
  else if (nt == 2 && strcmp(op, "conv_2d_dilated") == 0)
    *r = cn_tile_conv_2d_dilated(g, t[0], t[1], d[0], d[1]);
  else if (nt == 2 && strcmp(op, "complex_conv_2d") == 0)
    *r = cn_tile_complex_conv_2d(g, t[0], t[1], s[0], s[1], d[0], d[1]);
  else
    return 0;
  if (*r && cn_tensor_set_label(*r, name) != CN_OK) *r = NULL; /* not the Tile output's "O" */
  return 1;
}

/* The builtins of the notation: primitive ops by their ops.def name (curried, or uncurried on a
 * tuple of as many tensors as the op's arity), and the library. */
static value *builtin(interp *I, const char *name, const args *a, cn_nt_pos at) {
  /* host builtins first: their arguments are not tensors */
  if (strcmp(name, "static_index") == 0) return static_index(I, a, at);
  if (strcmp(name, "half_moons") == 0) return half_moons(I, a, at);
  int n = a->n_pos;
  if (strcmp(name, "not") == 0 && n == 1 && a->pos[0]->kind == V_BOOL) { /* host negation */
    value *v = nt_mk(I, V_BOOL);
    if (v) v->b = !a->pos[0]->b;
    return v;
  }
  cn_op op;
  bool prim = cn_op_from_name(name, &op);
  if (prim && n == 1 && a->pos[0]->kind == V_LIST && a->pos[0]->tuple && !a->pos[0]->literal &&
      a->pos[0]->n == cn_op_arity(op) && a->pos[0]->n >= 2) { /* uncurried: add (a, b) */
    args un = *a;
    un.n_pos = a->pos[0]->n;
    for (int i = 0; i < un.n_pos; i++) {
      un.pos[i] = a->pos[0]->items[i];
      un.pos_at[i] = a->pos_at[0];
    }
    return builtin(I, name, &un, at);
  }
  cn_graph *g = I->g;
  cn_tensor *t[4] = {NULL, NULL, NULL, NULL};
  bool unit = n == 1 && a->pos[0]->kind == V_UNIT;
  const char *spec = n > 0 && a->pos[0]->kind == V_STR ? a->pos[0]->str : NULL;
  if (spec && !(spec = nt_spec_text(I, spec))) return NULL;
  for (int i = spec ? 1 : 0; i < n && i < 4 && !unit; i++)
    if (!(t[i - (spec ? 1 : 0)] = nt_tensor_of(I, a->pos[i], a->pos_at[i]))) return NULL;
  int nt = unit ? 0 : n - (spec ? 1 : 0);
  cn_tensor *r = NULL;
  int tiled;
  if (prim && !spec) {
    if (nt != cn_op_arity(op)) return nt_fail(I, at, "%s takes its operands as arguments", name);
    r = cn_tensor_apply(g, op, nt, t);
  } else if (strcmp(name, "einsum3") == 0 && spec && nt == 3) {
    r = cn_tensor_einsum3(g, spec, t[0], t[1], t[2]);
  } else if (strcmp(name, "einsum1") == 0 && spec && nt == 1) {
    r = cn_tensor_einsum1(g, spec, t[0]);
  } else if (strcmp(name, "einsum") == 0 && spec && nt == 2) {
    r = cn_tensor_einsum2(g, spec, t[0], t[1]);
  } else if (strcmp(name, "matmul") == 0 && nt == 2) {
    r = cn_tensor_matmul(g, t[0], t[1]);
  } else if (strcmp(name, "transpose") == 0 && nt == 1) {
    r = cn_tensor_transpose(g, t[0]);
  } else if (strcmp(name, "stop_gradient") == 0 && nt == 1) {
    r = cn_tensor_stop_gradient(g, t[0]);
  } else if (strcmp(name, "softmax") == 0 && nt == 1) {
    r = cn_tensor_softmax(g, t[0]);
  } else if (strcmp(name, "interleave") == 0 && nt == 2) {
    r = cn_tensor_interleave(g, t[0], t[1]);
  } else if (strcmp(name, "deinterleave_even") == 0 && nt == 1) {
    r = cn_tensor_deinterleave_even(g, t[0]);
  } else if (strcmp(name, "deinterleave_odd") == 0 && nt == 1) {
    r = cn_tensor_deinterleave_odd(g, t[0]);
  } else if (strcmp(name, "uniform1") == 0 && unit) {
    r = cn_tensor_uniform1(g);
  } else if (strcmp(name, "uniform") == 0 && unit) {
    r = cn_tensor_uniform(g);
  } else if (strcmp(name, "uniform_at") == 0 && nt == 1) {
    r = cn_tensor_uniform_at(g, t[0]);
  } else if (strcmp(name, "normal") == 0 && unit) {
    r = cn_tensor_normal(g);
  } else if (strcmp(name, "normal_at") == 0 && nt == 1) {
    r = cn_tensor_normal_at(g, t[0]);
  } else if (strcmp(name, "embed_self_id") == 0 && unit) {
    r = cn_tensor_embed_self_id(g);
  } else if (strcmp(name, "offsets") == 0 && unit) {
    r = cn_tensor_offsets(g);
  } else if (strcmp(name, "range") == 0 && n == 1 && a->pos[0]->kind == V_NUM) {
    int64_t count;
    if (!nt_as_int(I, a->pos[0], at, &count)) return NULL;
    r = cn_tensor_range(g, count);
  } else if (strcmp(name, "range_of_shape") == 0) {
    int64_t d[3][CN_MAX_RANK];
    int c[3];
    static const char *const labels[3] = {"batch_dims", "input_dims", "output_dims"};
    for (int k = 0; k < 3; k++)
      if (!int_list(I, labeled(a, labels[k]), at, d[k], &c[k])) return NULL;
    cn_dims dims = {{c[0], d[0], NULL}, {c[1], d[1], NULL}, {c[2], d[2], NULL}};
    r = cn_tensor_range_of_shape(g, &dims);
  } else if (strcmp(name, "conv2d") == 0 && nt == 2) {
    value *bias = labeled(a, "bias"), *valid = labeled(a, "valid");
    cn_tensor *b = bias ? nt_tensor_of(I, bias, at) : NULL;
    if (bias && !b) return NULL;
    cn_conv2d opts = {int_arg(a, "stride", 1), int_arg(a, "dilation", 1),
                      valid && valid->kind == V_BOOL && valid->b};
    r = cn_tensor_conv2d(g, t[0], t[1], b, &opts);
  } else if ((strcmp(name, "max_pool2d") == 0 || strcmp(name, "avg_pool2d") == 0) && nt == 1) {
    int64_t window = int_arg(a, "window_size", int_arg(a, "window", 2));
    int64_t stride = int_arg(a, "stride", window);
    r = name[0] == 'm' ? cn_tensor_max_pool2d(g, t[0], window, stride)
                       : cn_tensor_avg_pool2d(g, t[0], window, stride);
  } else if (strcmp(name, "dim") == 0 && n == 2 && a->pos[1]->kind == V_NUM) {
    r = cn_tensor_embed_dim(g, t[0], (int)a->pos[1]->num);
  } else if ((tiled = tile_builtin(I, name, a, t, nt, at, &r)) != 0) {
    if (tiled < 0) return NULL;
  } else {
    return nt_fail(I, at, "unknown function '%s' (or wrong arguments for it)", name);
  }
  if (!r) return nt_fail_here(I, at);
  return nt_tensor_value(I, r);
}

/* ---- Functions ------------------------------------------------------------------------------- */

static value *eval_body(interp *I, value *fn);

bool nt_is_lifting(const cn_nt_param *p) {
  return p->kind == CN_NT_PARAM_UNIT || (p->name && strcmp(p->name, "config") == 0);
}

/* The label of a ~config record (its `label` list joined), or NULL. */
static const char *config_label(interp *I, const value *cfg) {
  if (!cfg || cfg->kind != V_RECORD) return NULL;
  for (int j = 0; j < cfg->n; j++) {
    const value *l = cfg->items[j];
    if (strcmp(cfg->names[j], "label") != 0 || l->kind != V_LIST) continue;
    const char *label = NULL;
    for (int k = 0; k < l->n; k++)
      if (l->items[k]->kind == V_STR)
        label = label ? nt_join_label(I, label, l->items[k]->str) : l->items[k]->str;
    return label;
  }
  return NULL;
}

/* Curried application of a let%op / let%cd function: arguments fill its parameters (positional
 * ones in order, labeled ones by name); once every required parameter is given, the body runs. */
static value *call(interp *I, value *fn, const args *a) {
  const cn_nt_item *def = fn->fn.def;
  int np = def->u.let.n_params;
  value *f = nt_mk(I, V_FUNC);
  if (!f) return NULL;
  *f = *fn;
  f->fn.given = cn_alloc(I->ctx, sizeof(value *) * (size_t)(np + 1));
  if (!f->fn.given) return NULL;
  memcpy(f->fn.given, fn->fn.given, sizeof(value *) * (size_t)np);
  bool lifted = false;
  for (int i = 0; i < a->n_lab; i++) {
    int k = 0;
    while (k < np &&
           !(def->u.let.params[k].name && strcmp(def->u.let.params[k].name, a->lab[i]) == 0 &&
             def->u.let.params[k].kind != CN_NT_PARAM_PLAIN))
      k++;
    if (k == np) return nt_fail(I, a->lab_at[i], "no parameter ~%s", a->lab[i]);
    f->fn.given[k] = a->lab_v[i];
    lifted |= nt_is_lifting(&def->u.let.params[k]);
  }
  int next = 0;
  for (int i = 0; i < a->n_pos; i++) {
    while (next < np && (f->fn.given[next] || def->u.let.params[next].kind == CN_NT_PARAM_LABELED ||
                         def->u.let.params[next].kind == CN_NT_PARAM_OPTIONAL))
      next++;
    if (next == np) return nt_fail(I, a->pos_at[i], "%s", "too many arguments");
    if (def->u.let.params[next].kind == CN_NT_PARAM_UNIT && a->pos[i]->kind != V_UNIT)
      return nt_fail(I, a->pos_at[i], "%s", "expected ()");
    f->fn.given[next] = a->pos[i];
    lifted |= nt_is_lifting(&def->u.let.params[next]);
  }
  if (lifted && def->u.let.ext == CN_NT_LET_OP) { /* a lifting point: its own declarations */
    decl_scope *ds = cn_alloc(I->ctx, sizeof *ds);
    if (!ds) return NULL;
    if (def->u.let.config_param >= 0)
      ds->more_label = config_label(I, f->fn.given[def->u.let.config_param]);
    f->fn.decls = ds;
    env *scope = NULL;
    for (int k = 0; k < np; k++)
      if (f->fn.given[k] && def->u.let.params[k].name &&
          !nt_bind(I, &scope, def->u.let.params[k].name, f->fn.given[k]))
        return NULL;
    if (!nt_predeclare(I, scope, ds, def->u.let.expr)) return NULL;
  }
  for (int k = 0; k < np; k++)
    if (!f->fn.given[k] && def->u.let.params[k].kind != CN_NT_PARAM_OPTIONAL) return f;
  return eval_body(I, f);
}

/* The primary tensor's label: the function's name, then its input argument's label. */
static bool label_result(interp *I, const cn_nt_item *def, value *const *given, value *result,
                         int before) {
  if (!result || result->kind != V_TENSOR || result->grad || result->t->id <= before ||
      result->t->is_param)
    return true;
  const char *label = def->u.let.name;
  for (int k = 0; k < def->u.let.n_params; k++)
    if (def->u.let.params[k].kind == CN_NT_PARAM_PLAIN && given[k] && given[k]->kind == V_TENSOR) {
      label = nt_join_label(I, label, given[k]->t->label);
      break;
    }
  return label && cn_tensor_set_label(result->t, label) == CN_OK;
}

/* A let%tile application: integers are dims (strides, sizes), everything else a tensor. Errors
 * come from src/tile, positioned in the function's body. */
static value *tile_body(interp *I, const value *f) {
  const cn_nt_item *def = f->fn.def;
  int n = def->u.let.n_params;
  cn_tile_arg *targs = cn_alloc(I->ctx, sizeof *targs * (size_t)n);
  if (!targs) return NULL;
  for (int k = 0; k < n; k++) {
    value *v = f->fn.given[k];
    if (v->kind == V_NUM && v->is_int) {
      targs[k] = (cn_tile_arg){NULL, (int64_t)v->num};
    } else if (!(targs[k].tensor = nt_tensor_of(I, v, def->u.let.params[k].pos))) {
      return NULL;
    }
  }
  for (int k = 0; k < n; k++)
    if (!settle_shapes(I, &targs[k].tensor, 1, def->u.let.params[k].pos)) return NULL;
  cn_tensor *t = cn_tile_fn_apply(I->g, def->u.let.tile_fn, n, targs);
  if (!t) return NULL;
  nt_note(I, def->u.let.tile_pos);
  return nt_tensor_value(I, t);
}

static value *eval_body(interp *I, value *f) {
  const cn_nt_item *def = f->fn.def;
  if (++I->depth > MAX_CALL_DEPTH) {
    I->depth--;
    return nt_fail(I, def->pos, "%s", "function calls nested too deeply");
  }
  env *scope = NULL;
  value *result = NULL;
  bool ok = true;
  for (int k = 0; k < def->u.let.n_params && ok; k++) {
    const cn_nt_param *p = &def->u.let.params[k];
    value *v = f->fn.given[k];
    if (!v && p->default_value) v = nt_eval(I, NULL, f->fn.decls, p->default_value);
    if (!v) v = nt_mk(I, V_UNIT);
    if (p->name) ok = v && nt_bind(I, &scope, p->name, v);
  }
  if (ok && def->u.let.ext == CN_NT_LET_TILE) {
    int before = I->g->n_tensors;
    result = tile_body(I, f);
    if (!label_result(I, def, f->fn.given, result, before)) result = NULL;
  } else if (ok && def->u.let.ext == CN_NT_LET_CD) {
    /* each application of a let%cd function is a routine with its own declarations */
    decl_scope *ds = cn_alloc(I->ctx, sizeof *ds);
    code *c = ds ? nt_eval_cd(I, scope, ds, def->u.let.cd) : NULL;
    if (c && (result = nt_mk(I, V_ROUTINE))) result->routine = c;
  } else if (ok) {
    int before = I->g->n_tensors;
    result = nt_eval(I, scope, f->fn.decls, def->u.let.expr);
    if (!label_result(I, def, f->fn.given, result, before)) result = NULL;
  }
  I->depth--;
  return result;
}

bool nt_config_block(interp *I, env *e, decl_scope *ds, const cn_nt_expr *x, value **out) {
  *out = NULL;
  if (x->kind != CN_NT_APPLY || x->u.apply.fn->kind != CN_NT_IDENT) return true;
  const cn_nt_arg *cfg = cn_nt_find_arg(x->u.apply.n_args, x->u.apply.args, "config");
  value *f = cfg ? nt_lookup(I, e, x->u.apply.fn->u.ident.name) : NULL;
  if (!f || f->kind != V_FUNC) return true;
  if ((*out = cn_map_get(&ds->blocks, x))) return true;
  value *cv = cfg->value ? nt_eval(I, e, ds, cfg->value) : nt_lookup(I, e, "config");
  if (!cv) {
    if (!cfg->value) nt_fail(I, cfg->pos, "%s", "unbound name 'config'");
    return false;
  }
  args a;
  memset(&a, 0, sizeof a);
  a.n_lab = 1;
  a.lab[0] = "config";
  a.lab_v[0] = cv;
  a.lab_at[0] = cfg->pos;
  value *partial = call(I, f, &a);
  if (!partial || !cn_map_put(I->ctx, &ds->blocks, x, partial)) return false;
  *out = partial;
  return true;
}

value *nt_apply(interp *I, env *e, decl_scope *ds, const cn_nt_expr *x) {
  const cn_nt_expr *fx = x->u.apply.fn;
  const char *name = fx->kind == CN_NT_IDENT ? fx->u.ident.name : "";
  value *block;
  if (!nt_config_block(I, e, ds, x, &block)) return NULL;
  args a;
  const cn_nt_arg *cfg =
      block ? cn_nt_find_arg(x->u.apply.n_args, x->u.apply.args, "config") : NULL;
  if (!eval_args(I, e, ds, x, name, cfg, &a)) return NULL;
  if (block) { /* the rest of the arguments go to the config block */
    if (a.n_pos == 0 && a.n_lab == 0) return block;
    if (block->kind != V_FUNC)
      return nt_fail(I, fx->pos, "'%s' applied to its ~config is not a function", name);
    return call(I, block, &a);
  }
  if (fx->kind == CN_NT_IDENT) {
    value *f = nt_lookup(I, e, name);
    if (!f) return builtin(I, name, &a, fx->pos);
    if (f->kind == V_FUNC) return call(I, f, &a);
    return nt_fail(I, fx->pos, "'%s' is not a function", name);
  }
  value *f = nt_eval(I, e, ds, fx);
  if (!f) return NULL;
  if (f->kind != V_FUNC) return nt_fail(I, fx->pos, "%s is not a function", nt_kind_name(f->kind));
  return call(I, f, &a);
}
