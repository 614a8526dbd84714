/* The evaluator's core floor (eval_core.h: it may include the core's, the services' and the
 * base's headers): builtins: the primitive ops by their ops.def
 * name, and the library of builtins.def (the operation library, the Tile examples, the host
 * builtins static_index and half_moons, placeholder, the training pieces: reductions,
 * activations, losses and metrics, the nn blocks gelu, layer_norm, dropout, causal attention and
 * the transformer block), applied to
 * evaluated arguments; the data-file builtins (dataset, load, restore) are eval_data.c's, the
 * readers of labeled arguments (nt_labeled, nt_known_labels) the base's.
 *
 * A primitive op takes its operands curried, or uncurried as one tuple of as many tensors as its
 * arity (`add (a, b)`); `not` on a boolean is the host negation. A library builtin takes its
 * positional arguments as builtins.def states: specs first read as einsum text, every other
 * positional argument converted to a tensor (numbers included: the constant tensors they make
 * take ids, which printed labels show) unless the only argument is `()`, then the builtin's form
 * calls its constructor.
 *
 * Invariants: builtins.def is the only list of builtin names; every failure is a positioned
 * message returned as NULL; a wrong application of a known builtin reports "unknown function
 * '<name>' (or wrong arguments for it)"; a name that is no builtin, "unknown function '<name>'"
 * with the closest builtins and bound names suggested. */
#include "notation/eval_core.h"

#include "numeric/numeric.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- Arguments ------------------------------------------------------------------------------ */

static bool int_list(nt_interp *I, nt_value *v, cn_nt_pos pos, int64_t *out, int *n) {
  *n = 0;
  if (!v) return true;
  int count = v->kind == NT_V_LIST ? v->n : 1;
  if (count > CN_MAX_RANK) return nt_fail(I, pos, "too many axes"), false;
  for (int i = 0; i < count; i++)
    if (!nt_as_int(I, v->kind == NT_V_LIST ? v->items[i] : v, pos, &out[i])) return false;
  *n = count;
  return true;
}

static int64_t int_arg(const nt_args *a, const char *name, int64_t dflt) {
  nt_value *v = nt_labeled(a, name);
  return v && v->kind == NT_V_NUM ? (int64_t)v->num : dflt;
}

static bool bool_arg(const nt_args *a, const char *name) {
  nt_value *v = nt_labeled(a, name);
  return v && v->kind == NT_V_BOOL && v->b;
}

/* ~name:N or ~name:(N0, N1) for a 2-D operation: out[0], out[1] (dflt when absent). */
static bool pair_arg(nt_interp *I, const nt_args *a, const char *name, int64_t dflt, int64_t out[2],
                     cn_nt_pos at) {
  int64_t v[CN_MAX_RANK] = {0};
  int n;
  if (!int_list(I, nt_labeled(a, name), at, v, &n)) return false;
  if (n > 2) return nt_fail(I, at, "~%s takes one integer or a pair", name), false;
  out[0] = n ? v[0] : dflt;
  out[1] = n == 2 ? v[1] : out[0];
  return true;
}

static nt_value *wrong_arguments(nt_interp *I, const nt_call *c) {
  return nt_fail(I, c->at, "unknown function '%s' (or wrong arguments for it)", c->name);
}

/* The value of a constructed tensor: a Tile builtin's result takes the builtin's name (not the
 * Tile output's "O"); NULL re-issues the library's message at the application. */
static nt_value *tensor_result(nt_interp *I, const nt_call *c, bool tile, cn_tensor *r) {
  if (r && tile && cn_tensor_set_label(r, c->name) != CN_OK) r = NULL;
  if (!r) return nt_fail_here(I, c->at);
  return nt_tensor_value(I, r);
}

/* ---- Host builtins -------------------------------------------------------------------------- */

/* static_index N: a static index with values 0 .. N-1, bound by `for` loops. */
static nt_value *nt_builtin_static_index(nt_interp *I, const nt_call *c) {
  const nt_args *a = c->a;
  int64_t range;
  if (a->n_pos != 1 || a->n_lab != 0)
    return nt_fail(I, c->at, "static_index takes one argument, the number of values");
  if (!nt_as_int(I, a->pos[0], a->pos_at[0], &range)) return NULL;
  if (range < 1) return nt_fail(I, a->pos_at[0], "a static index needs at least one value");
  nt_value *v = nt_mk(I, NT_V_INDEX);
  if (v) {
    v->index.range = range;
    v->index.decl_at = c->at;
  }
  return v;
}

/* The (points, labels) tuple of half_moons: n points with batch axes [n / batch, batch] (batch
 * 0: [n]), points with one output axis of 2. */
static nt_value *moons_tuple(nt_interp *I, cn_nt_pos at, int64_t n, int64_t batch, int64_t seed,
                             double noise) {
  double *xy = cn_malloc(I->ctx, sizeof *xy * 3 * (size_t)n);
  if (!xy) return NULL;
  cn_dataset_half_moons((uint64_t)seed, noise, (size_t)n, xy, xy + 2 * n);
  const int64_t split[2] = {batch ? n / batch : n, batch}, coords = 2;
  const cn_axes batch_axes = {batch ? 2 : 1, split, NULL};
  const cn_dims pd = {batch_axes, CN_AXES_NONE, {1, &coords, NULL}};
  const cn_dims ld = {batch_axes, CN_AXES_NONE, CN_AXES_NONE};
  cn_tensor *points = cn_tensor_data(I->g, "half_moons", &pd, xy, 2 * (size_t)n);
  cn_tensor *labels =
      points ? cn_tensor_data(I->g, "half_moons_labels", &ld, xy + 2 * n, (size_t)n) : NULL;
  free(xy);
  nt_value *v = labels ? nt_mk(I, NT_V_LIST) : NULL;
  if (!labels) return nt_fail_here(I, at);
  if (!v || !(v->items = cn_alloc(I->ctx, 2 * sizeof *v->items)) ||
      !(v->items[0] = nt_tensor_value(I, points)) || !(v->items[1] = nt_tensor_value(I, labels)))
    return NULL;
  v->n = 2;
  v->tuple = true;
  return v;
}

/* half_moons ~n ~noise ~seed ~batch_size: the dataset of cn_dataset_half_moons as a tuple. */
static nt_value *nt_builtin_half_moons(nt_interp *I, const nt_call *c) {
  static const char *const known[] = {"n", "noise", "seed", "batch_size"};
  const nt_args *a = c->a;
  cn_nt_pos at = c->at;
  if (!nt_known_labels(I, c, 4, known)) return NULL;
  nt_value *nv = nt_labeled(a, "n"), *noise = nt_labeled(a, "noise"), *seed = nt_labeled(a, "seed");
  nt_value *bv = nt_labeled(a, "batch_size");
  int64_t n, batch = 0, seed_v = 0;
  if (a->n_pos > 0 || !nv)
    return nt_fail(I, at,
                   "half_moons takes labeled arguments: ~n (points), ~noise, ~seed, "
                   "~batch_size");
  if (!nt_as_int(I, nv, at, &n) || (seed && !nt_as_int(I, seed, at, &seed_v)) ||
      (bv && !nt_as_int(I, bv, at, &batch)))
    return NULL;
  if (noise && noise->kind != NT_V_NUM) return nt_fail(I, at, "~noise expects a number");
  if (n < 1 || n > (1 << 26) || seed_v < 0 || (bv && (batch < 1 || n % batch != 0)))
    return nt_fail(I, at,
                   "half_moons needs 1 <= ~n <= 2^26, ~seed >= 0 and a ~batch_size "
                   "dividing ~n");
  return moons_tuple(I, at, n, bv ? batch : 0, seed_v, noise ? noise->num : 0.1);
}

/* ---- Library builtins read from labeled options --------------------------------------------- */

static nt_value *nt_builtin_conv2d(nt_interp *I, const nt_call *c) {
  nt_value *bias = nt_labeled(c->a, "bias");
  cn_tensor *b = bias ? nt_tensor_of(I, bias, c->at) : NULL;
  if (bias && !b) return NULL;
  cn_conv2d opts = {int_arg(c->a, "stride", 1), int_arg(c->a, "dilation", 1),
                    bool_arg(c->a, "valid")};
  return tensor_result(I, c, false, cn_tensor_conv2d(I->g, c->t[0], c->t[1], b, &opts));
}

/* ~window_size:W (or ~window), default 2; ~stride, default the window. */
static void pool_options(const nt_args *a, int64_t *window, int64_t *stride) {
  *window = int_arg(a, "window_size", int_arg(a, "window", 2));
  *stride = int_arg(a, "stride", *window);
}

static nt_value *nt_builtin_max_pool2d(nt_interp *I, const nt_call *c) {
  int64_t window, stride;
  pool_options(c->a, &window, &stride);
  return tensor_result(I, c, false, cn_tensor_max_pool2d(I->g, c->t[0], window, stride));
}

static nt_value *nt_builtin_avg_pool2d(nt_interp *I, const nt_call *c) {
  int64_t window, stride;
  pool_options(c->a, &window, &stride);
  return tensor_result(I, c, false, cn_tensor_avg_pool2d(I->g, c->t[0], window, stride));
}

static nt_value *nt_builtin_range(nt_interp *I, const nt_call *c) {
  int64_t count;
  if (c->a->pos[0]->kind != NT_V_NUM) return wrong_arguments(I, c);
  if (!nt_as_int(I, c->a->pos[0], c->at, &count)) return NULL;
  return tensor_result(I, c, false, cn_tensor_range(I->g, count));
}

/* one_hot ids N: the ids' axes as batch axes, N classes as the output axis. */
static nt_value *nt_builtin_one_hot(nt_interp *I, const nt_call *c) {
  int64_t count;
  if (c->a->pos[1]->kind != NT_V_NUM) return wrong_arguments(I, c);
  if (!nt_as_int(I, c->a->pos[1], c->at, &count)) return NULL;
  return tensor_result(I, c, false, cn_tensor_one_hot(I->g, c->t[0], count));
}

static nt_value *nt_builtin_range_of_shape(nt_interp *I, const nt_call *c) {
  static const char *const labels[3] = {"batch_dims", "input_dims", "output_dims"};
  int64_t d[3][CN_MAX_RANK];
  int n[3];
  for (int k = 0; k < 3; k++)
    if (!int_list(I, nt_labeled(c->a, labels[k]), c->at, d[k], &n[k])) return NULL;
  cn_dims dims = {{n[0], d[0], NULL}, {n[1], d[1], NULL}, {n[2], d[2], NULL}};
  return tensor_result(I, c, false, cn_tensor_range_of_shape(I->g, &dims));
}

/* placeholder ~output_dims:[..] [~batch_dims:[..] ~input_dims:[..]]: a buffer at the graph's
 * precision, written by nothing the script runs: the input a model is applied to for export. */
static nt_value *nt_builtin_placeholder(nt_interp *I, const nt_call *c) {
  static const char *const labels[3] = {"batch_dims", "input_dims", "output_dims"};
  int64_t d[3][CN_MAX_RANK];
  int n[3];
  if (!nt_known_labels(I, c, 3, labels)) return NULL;
  if (!nt_labeled(c->a, "output_dims"))
    return nt_fail(I, c->at, "%s",
                   "placeholder takes labeled dims: ~output_dims:[..] (and ~batch_dims, "
                   "~input_dims)");
  for (int k = 0; k < 3; k++)
    if (!int_list(I, nt_labeled(c->a, labels[k]), c->at, d[k], &n[k])) return NULL;
  cn_dims dims = {{n[0], d[0], NULL}, {n[1], d[1], NULL}, {n[2], d[2], NULL}};
  return tensor_result(I, c, false, cn_tensor_buffer(I->g, "placeholder", &dims));
}

static nt_value *nt_builtin_dim(nt_interp *I, const nt_call *c) {
  if (c->a->pos[1]->kind != NT_V_NUM) return wrong_arguments(I, c);
  return tensor_result(I, c, false, cn_tensor_embed_dim(I->g, c->t[0], (int)c->a->pos[1]->num));
}

/* ~spec:"RHS => LHS" of sum and mean: the reduction as an einsum spec, or NULL (every cell);
 * false with a message when it is not a string. */
static bool reduction_spec(nt_interp *I, const nt_call *c, const char **spec) {
  cn_nt_pos at;
  nt_value *v = nt_labeled_at(c->a, "spec", &at);
  *spec = NULL;
  if (!v) return true;
  if (v->kind != NT_V_STR)
    return nt_fail(I, at, "~spec expects an einsum spec string, found %s", nt_kind_name(v->kind)),
           false;
  return (*spec = nt_spec_text(I, v->str)) != NULL;
}

/* A reduction's result, labeled by the builtin's name. */
static nt_value *reduction_result(nt_interp *I, const nt_call *c, cn_tensor *r) {
  if (r && cn_tensor_set_label(r, c->name) != CN_OK) r = NULL;
  return tensor_result(I, c, false, r);
}

/* sum x: every cell, a scalar; sum ~spec:"b|i => b" x: the einsum's sum (einsum1). */
static nt_value *nt_builtin_sum(nt_interp *I, const nt_call *c) {
  const char *spec;
  if (!reduction_spec(I, c, &spec)) return NULL;
  cn_tensor *x = c->t[0];
  return reduction_result(I, c, spec ? cn_tensor_einsum1(I->g, spec, x) : cn_tensor_sum(I->g, x));
}

/* max x, min x: the largest / smallest cell, a scalar; with ~spec:"RHS => LHS" over the axes the
 * spec reduces. Reached through the binary ops' names applied to one operand (nt_builtin). */
static nt_value *extremum(nt_interp *I, const nt_call *c, cn_op op) {
  static const char *const known[1] = {"spec"};
  const char *spec;
  if (!nt_known_labels(I, c, 1, known) || !reduction_spec(I, c, &spec)) return NULL;
  cn_tensor *x = c->t[0];
  return tensor_result(I, c, false,
                       op == CN_OP_MAX ? cn_tensor_reduce_max(I->g, x, spec)
                                       : cn_tensor_reduce_min(I->g, x, spec));
}

/* clip x ~min:LO ~max:HI: numbers, either side may be left out, not both. */
static nt_value *nt_builtin_clip(nt_interp *I, const nt_call *c) {
  static const char *const known[2] = {"min", "max"};
  if (!nt_known_labels(I, c, 2, known)) return NULL;
  double bound[2] = {-INFINITY, INFINITY};
  bool given = false;
  for (int k = 0; k < 2; k++) {
    cn_nt_pos at;
    nt_value *v = nt_labeled_at(c->a, known[k], &at);
    if (v && v->kind != NT_V_NUM)
      return nt_fail(I, at, "~%s expects a number, found %s", known[k], nt_kind_name(v->kind));
    if (v) bound[k] = v->num, given = true;
  }
  if (!given) return nt_fail(I, c->at, "%s", "clip needs ~min:LO, ~max:HI or both (numbers)");
  if (!(bound[0] <= bound[1]))
    return nt_fail(I, c->at, "clip: ~min:%g is above ~max:%g", bound[0], bound[1]);
  return tensor_result(I, c, false, cn_tensor_clip(I->g, c->t[0], bound[0], bound[1]));
}

/* concat a b [~axis:K]: along axis K in memory order, by default a's last output axis. */
static nt_value *nt_builtin_concat(nt_interp *I, const nt_call *c) {
  static const char *const known[1] = {"axis"};
  if (!nt_known_labels(I, c, 1, known) || !nt_settle_shapes(I, c->t, 2, c->at)) return NULL;
  cn_nt_pos at;
  nt_value *v = nt_labeled_at(c->a, "axis", &at);
  int64_t axis;
  if (v) {
    if (!nt_as_int(I, v, at, &axis)) return NULL;
    if (axis < 0 || axis >= CN_MAX_RANK)
      return nt_fail(I, at,
                     "~axis:%lld: an axis counts from 0, in memory order (batch, output, "
                     "input)",
                     (long long)axis);
  } else {
    int64_t batch = cn_shape_row_dims(I->g->shapes, c->t[0]->shape, CN_ROW_BATCH, NULL, 0);
    int64_t out = cn_shape_row_dims(I->g->shapes, c->t[0]->shape, CN_ROW_OUTPUT, NULL, 0);
    if (batch < 0 || out < 0) return nt_fail_here(I, c->at);
    if (out == 0)
      return nt_fail(I, c->at, "concat: %s has no output axis: give ~axis:K (memory order)",
                     cn_tensor_shape(c->t[0]));
    axis = batch + out - 1;
  }
  return tensor_result(I, c, false, cn_tensor_concat(I->g, c->t[0], c->t[1], (int)axis));
}

/* reshape t ~output_dims:[..] [~batch_dims:[..] ~input_dims:[..]]: rows not given are empty. */
static nt_value *nt_builtin_reshape(nt_interp *I, const nt_call *c) {
  static const char *const labels[3] = {"batch_dims", "input_dims", "output_dims"};
  int64_t d[3][CN_MAX_RANK];
  int n[3];
  if (!nt_known_labels(I, c, 3, labels)) return NULL;
  if (!nt_labeled(c->a, "output_dims") && !nt_labeled(c->a, "batch_dims") &&
      !nt_labeled(c->a, "input_dims"))
    return nt_fail(I, c->at, "%s",
                   "reshape takes the new rows: ~output_dims:[..] (and ~batch_dims, ~input_dims)");
  for (int k = 0; k < 3; k++)
    if (!int_list(I, nt_labeled(c->a, labels[k]), c->at, d[k], &n[k])) return NULL;
  if (!nt_settle_shapes(I, c->t, 1, c->at)) return NULL;
  cn_dims dims = {{n[0], d[0], NULL}, {n[1], d[1], NULL}, {n[2], d[2], NULL}};
  return tensor_result(I, c, false, cn_tensor_reshape(I->g, c->t[0], &dims));
}

/* mean x: of every cell; mean ~spec x: the einsum's sum divided by the number of cells summed
 * into each result cell (the same einsum over ones: snd x 1 reads no value of x and carries no
 * gradient). */
static nt_value *nt_builtin_mean(nt_interp *I, const nt_call *c) {
  const char *spec;
  if (!reduction_spec(I, c, &spec)) return NULL;
  cn_graph *g = I->g;
  cn_tensor *x = c->t[0];
  if (!spec) return reduction_result(I, c, cn_tensor_mean(g, x));
  cn_tensor *one = cn_tensor_scalar(g, 1);
  cn_tensor *ones = one ? cn_tensor_apply(g, CN_OP_ARG2, 2, (cn_tensor *[]){x, one}) : NULL;
  cn_tensor *count = ones ? cn_tensor_einsum1(g, spec, ones) : NULL;
  cn_tensor *sum = count ? cn_tensor_einsum1(g, spec, x) : NULL;
  return reduction_result(
      I, c, sum ? cn_tensor_apply(g, CN_OP_DIV, 2, (cn_tensor *[]){sum, count}) : NULL);
}

/* layer_norm x [~scale:s ~shift:b ~eps:E]: over x's output row; scale and shift are tensors
 * (typically parameters, `~scale:{gamma = 1.0}`), absent: none; eps defaults to 1e-5. */
static nt_value *nt_builtin_layer_norm(nt_interp *I, const nt_call *c) {
  static const char *const known[3] = {"scale", "shift", "eps"};
  if (!nt_known_labels(I, c, 3, known)) return NULL;
  cn_tensor *t[2] = {NULL, NULL};
  for (int k = 0; k < 2; k++) {
    nt_value *v = nt_labeled(c->a, known[k]);
    if (v && !(t[k] = nt_tensor_of(I, v, c->at))) return NULL;
  }
  cn_nt_pos at;
  nt_value *eps = nt_labeled_at(c->a, "eps", &at);
  if (eps && eps->kind != NT_V_NUM)
    return nt_fail(I, at, "~eps expects a number, found %s", nt_kind_name(eps->kind));
  return tensor_result(I, c, false,
                       cn_tensor_layer_norm(I->g, c->t[0], t[0], t[1], eps ? eps->num : 1e-5));
}

/* dropout x ~rate:R ~step:S: both required, each a tensor or a number (see cn_tensor_dropout). */
static nt_value *nt_builtin_dropout(nt_interp *I, const nt_call *c) {
  static const char *const known[2] = {"rate", "step"};
  if (!nt_known_labels(I, c, 2, known)) return NULL;
  cn_tensor *t[2];
  for (int k = 0; k < 2; k++) {
    nt_value *v = nt_labeled(c->a, known[k]);
    if (!v) return nt_fail(I, c->at, "dropout needs ~rate and ~step (tensors or numbers)");
    if (!(t[k] = nt_tensor_of(I, v, c->at))) return NULL;
  }
  return tensor_result(I, c, false, cn_tensor_dropout(I->g, c->t[0], t[0], t[1]));
}

/* ~rate:R ~step:S of dropout inside attention: both or neither (rate NULL: no dropout). */
static bool attention_dropout(nt_interp *I, const nt_call *c, cn_tensor **rate, cn_tensor **step) {
  nt_value *r = nt_labeled(c->a, "rate"), *s = nt_labeled(c->a, "step");
  *rate = *step = NULL;
  if (!r && !s) return true;
  if (!r || !s)
    return nt_fail(I, c->at, "%s: dropout needs both ~rate and ~step (tensors or numbers)",
                   c->name),
           false;
  return (*rate = nt_tensor_of(I, r, c->at)) && (*step = nt_tensor_of(I, s, c->at));
}

/* causal_sdpa q k v [~rate:R ~step:S]: see cn_tensor_causal_sdpa. */
static nt_value *nt_builtin_causal_sdpa(nt_interp *I, const nt_call *c) {
  static const char *const known[2] = {"rate", "step"};
  cn_tensor *rate, *step;
  if (!nt_known_labels(I, c, 2, known) || !attention_dropout(I, c, &rate, &step)) return NULL;
  return tensor_result(I, c, true,
                       cn_tensor_causal_sdpa(I->g, c->t[0], c->t[1], c->t[2], rate, step));
}

/* causal_attention x ~heads:H [~layers:L ~label:"P" ~rate:R ~step:S] and transformer_block x
 * with the same options: nanoGPT's blocks (cn_tensor_causal_attention, _transformer_block), their
 * parameters labeled "P.attn.q.weight" etc.; L (default 1) scales the residual projections'
 * init. */
static nt_value *attention_block(nt_interp *I, const nt_call *c, bool block) {
  static const char *const known[5] = {"heads", "layers", "label", "rate", "step"};
  if (!nt_known_labels(I, c, 5, known)) return NULL;
  cn_nt_pos at;
  nt_value *h = nt_labeled_at(c->a, "heads", &at);
  if (!h) return nt_fail(I, c->at, "%s needs ~heads (the number of attention heads)", c->name);
  int64_t heads, layers = 1;
  if (!nt_as_int(I, h, at, &heads)) return NULL;
  nt_value *l = nt_labeled_at(c->a, "layers", &at);
  if (l && !nt_as_int(I, l, at, &layers)) return NULL;
  nt_value *p = nt_labeled_at(c->a, "label", &at);
  if (p && p->kind != NT_V_STR)
    return nt_fail(I, at, "~label expects a string, found %s", nt_kind_name(p->kind));
  if (heads < 1 || heads > INT32_MAX || layers < 1 || layers > INT32_MAX)
    return nt_fail(I, c->at, "%s: ~heads and ~layers must be positive integers", c->name);
  cn_attention cfg = {(int)heads, (int)layers, NULL, NULL, false};
  if (!attention_dropout(I, c, &cfg.dropout_rate, &cfg.dropout_step)) return NULL;
  const char *prefix = p ? p->str : "";
  return tensor_result(I, c, true,
                       block ? cn_tensor_transformer_block(I->g, c->t[0], prefix, &cfg)
                             : cn_tensor_causal_attention(I->g, c->t[0], prefix, &cfg));
}

static nt_value *nt_builtin_causal_attention(nt_interp *I, const nt_call *c) {
  return attention_block(I, c, false);
}

static nt_value *nt_builtin_transformer_block(nt_interp *I, const nt_call *c) {
  return attention_block(I, c, true);
}

static nt_value *nt_builtin_tile_max_pool_1d(nt_interp *I, const nt_call *c) {
  return tensor_result(I, c, true, cn_tile_max_pool_1d(I->g, c->t[0], bool_arg(c->a, "round_up")));
}

static nt_value *nt_builtin_tile_conv_2d_dilated(nt_interp *I, const nt_call *c) {
  return tensor_result(
      I, c, true, cn_tile_conv_2d_dilated(I->g, c->t[0], c->t[1], c->dilation[0], c->dilation[1]));
}

static nt_value *nt_builtin_tile_complex_conv_2d(nt_interp *I, const nt_call *c) {
  return tensor_result(I, c, true,
                       cn_tile_complex_conv_2d(I->g, c->t[0], c->t[1], c->stride[0], c->stride[1],
                                               c->dilation[0], c->dilation[1]));
}

/* ---- The table ------------------------------------------------------------------------------ */

typedef enum {
  NT_BF_UNIT,
  NT_BF_T1,
  NT_BF_T2,
  NT_BF_E1,
  NT_BF_E2,
  NT_BF_E3,
  NT_BF_LIB,
  NT_BF_HOST
} nt_bform;

/* builtins.def's form tokens, spelled as the members of nt_builtin_fn, name the enum too. */
#define NT_BF_unit NT_BF_UNIT
#define NT_BF_t1   NT_BF_T1
#define NT_BF_t2   NT_BF_T2
#define NT_BF_e1   NT_BF_E1
#define NT_BF_e2   NT_BF_E2
#define NT_BF_e3   NT_BF_E3
#define NT_BF_lib  NT_BF_LIB
#define NT_BF_host NT_BF_HOST

typedef union {
  cn_tensor *(*unit)(cn_graph *g);
  cn_tensor *(*t1)(cn_graph *g, cn_tensor *a);
  cn_tensor *(*t2)(cn_graph *g, cn_tensor *a, cn_tensor *b);
  cn_tensor *(*e1)(cn_graph *g, const char *spec, cn_tensor *a);
  cn_tensor *(*e2)(cn_graph *g, const char *spec, cn_tensor *a, cn_tensor *b);
  cn_tensor *(*e3)(cn_graph *g, const char *spec, cn_tensor *a, cn_tensor *b, cn_tensor *c);
  nt_value *(*lib)(nt_interp *I, const nt_call *c);
  nt_value *(*host)(nt_interp *I, const nt_call *c);
} nt_builtin_fn;

typedef struct {
  const char *name;
  int min, max;
  unsigned specs;
  nt_bform form;
  bool tile;
  nt_builtin_fn fn;
} nt_builtin_entry;

static const nt_builtin_entry builtins[] = {
#define NT_BUILTIN(name, min, max, specs, form, tile, fn)                                          \
  {#name, min, max, specs, NT_BF_##form, tile, {.form = fn}},
#include "notation/builtins.def"
};

static const nt_builtin_entry *find_builtin(const char *name) {
  for (size_t i = 0; i < sizeof builtins / sizeof *builtins; i++)
    if (strcmp(builtins[i].name, name) == 0) return &builtins[i];
  return NULL;
}

bool nt_spec_argument(const char *name, int k) {
  const nt_builtin_entry *b = find_builtin(name);
  return b && k < 32 && (b->specs >> k & 1u);
}

/* ---- Application ---------------------------------------------------------------------------- */

/* Fills c's spec and operands from the positional arguments (false: a message, or *wrong when
 * they do not fit the builtin). */
static bool convert_arguments(nt_interp *I, const nt_builtin_entry *b, nt_call *c, bool *wrong) {
  const nt_args *a = c->a;
  bool unit = a->n_pos == 1 && a->pos[0]->kind == NT_V_UNIT;
  if (unit != (b->form == NT_BF_UNIT)) return *wrong = true, false;
  for (int i = 0; i < a->n_pos && !unit; i++) {
    if (b->specs >> i & 1u) {
      if (a->pos[i]->kind != NT_V_STR) return *wrong = true, false;
      if (!(c->spec = nt_spec_text(I, a->pos[i]->str))) return false;
    } else if (!(c->t[c->nt++] = nt_tensor_of(I, a->pos[i], a->pos_at[i]))) {
      return false;
    }
  }
  if (!b->tile) return true;
  return pair_arg(I, a, "stride", 1, c->stride, c->at) &&
         pair_arg(I, a, "dilation", 1, c->dilation, c->at) &&
         nt_settle_shapes(I, c->t, c->nt, c->at);
}

static nt_value *library_builtin(nt_interp *I, const nt_builtin_entry *b, const nt_args *a,
                                 cn_nt_pos at) {
  nt_call c = {.name = b->name, .a = a, .at = at};
  bool wrong = false;
  if (b->form != NT_BF_HOST && (a->n_pos < b->min || a->n_pos > b->max))
    return wrong_arguments(I, &c);
  if (b->form != NT_BF_HOST && !convert_arguments(I, b, &c, &wrong))
    return wrong ? wrong_arguments(I, &c) : NULL;
  cn_graph *g = I->g;
  cn_tensor *const *t = c.t;
  switch (b->form) {
  case NT_BF_UNIT: return tensor_result(I, &c, b->tile, b->fn.unit(g));
  case NT_BF_T1: return tensor_result(I, &c, b->tile, b->fn.t1(g, t[0]));
  case NT_BF_T2: return tensor_result(I, &c, b->tile, b->fn.t2(g, t[0], t[1]));
  case NT_BF_E1: return tensor_result(I, &c, b->tile, b->fn.e1(g, c.spec, t[0]));
  case NT_BF_E2: return tensor_result(I, &c, b->tile, b->fn.e2(g, c.spec, t[0], t[1]));
  case NT_BF_E3: return tensor_result(I, &c, b->tile, b->fn.e3(g, c.spec, t[0], t[1], t[2]));
  case NT_BF_LIB: return b->fn.lib(I, &c);
  case NT_BF_HOST:
  default: return b->fn.host(I, &c); /* checks its own arguments */
  }
}

/* A primitive op: its operands curried, or one tuple of them (uncurried). */
static nt_value *primitive(nt_interp *I, cn_op op, const char *name, const nt_args *a,
                           cn_nt_pos at) {
  int n = a->n_pos;
  if (op == CN_OP_NOT && n == 1 && a->pos[0]->kind == NT_V_BOOL) { /* host negation */
    nt_value *v = nt_mk(I, NT_V_BOOL);
    if (v) v->b = !a->pos[0]->b;
    return v;
  }
  if (n == 1 && a->pos[0]->kind == NT_V_LIST && a->pos[0]->tuple && !a->pos[0]->literal &&
      a->pos[0]->n == cn_op_arity(op) && a->pos[0]->n >= 2) { /* uncurried: add (a, b) */
    nt_args un = *a;
    un.n_pos = a->pos[0]->n;
    for (int i = 0; i < un.n_pos; i++) {
      un.pos[i] = a->pos[0]->items[i];
      un.pos_at[i] = a->pos_at[0];
    }
    return primitive(I, op, name, &un, at);
  }
  cn_tensor *t[NT_MAX_OPERANDS] = {NULL};
  int nt = n == 1 && a->pos[0]->kind == NT_V_UNIT ? 0 : n;
  for (int i = 0; i < nt && i < NT_MAX_OPERANDS; i++)
    if (!(t[i] = nt_tensor_of(I, a->pos[i], a->pos_at[i]))) return NULL;
  if (nt != cn_op_arity(op)) return nt_fail(I, at, "%s takes its operands as arguments", name);
  cn_tensor *r = cn_tensor_apply(I->g, op, nt, t);
  if (!r) return nt_fail_here(I, at);
  return nt_tensor_value(I, r);
}

/* max x [~spec:S], min x [~spec:S]: one operand, not a tuple of two (max (a, b) is the op). */
static bool reduces(cn_op op, const nt_args *a) {
  if (op != CN_OP_MAX && op != CN_OP_MIN) return false;
  if (a->n_lab) return true;
  const nt_value *x = a->n_pos == 1 ? a->pos[0] : NULL;
  return x && !(x->kind == NT_V_LIST && x->tuple && !x->literal) && x->kind != NT_V_UNIT;
}

nt_value *nt_builtin(nt_interp *I, const nt_env *e, const char *name, const nt_args *a,
                     cn_nt_pos at) {
  cn_op op;
  if (cn_op_from_name(name, &op) && reduces(op, a)) {
    nt_call c = {.name = name, .a = a, .at = at, .nt = 1};
    if (a->n_pos != 1)
      return nt_fail(I, at, "%s x [~spec:\"RHS => LHS\"] reduces one tensor x", name);
    if (!(c.t[0] = nt_tensor_of(I, a->pos[0], a->pos_at[0]))) return NULL;
    return extremum(I, &c, op);
  }
  if (cn_op_from_name(name, &op)) return primitive(I, op, name, a, at);
  const nt_builtin_entry *b = find_builtin(name);
  if (b) return library_builtin(I, b, a, at);
  cn_suggest s;
  cn_suggest_init(&s, name);
  for (int k = 0; k < CN_OP_COUNT; k++) cn_suggest_consider(&s, cn_op_name((cn_op)k));
  for (size_t i = 0; i < sizeof builtins / sizeof *builtins; i++)
    cn_suggest_consider(&s, builtins[i].name);
  nt_suggest_bound(I, e, &s);
  return nt_fail(I, at, "unknown function '%s'%s", name, cn_suggest_text(&s));
}
