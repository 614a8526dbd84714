/* Causal self-attention and the pre-norm transformer block (issue 28), the nn blocks built on Tile:
 * the mask is a Tile constraint, not a select.
 *
 * Every product that would read a future position is a Tile contraction with the constraint
 * `q - k < T` (0 <= q - k, that is k <= q): the scores, the softmax's max and sum, the
 * normalization and the mix with V. Their records are valid-only ranged records, so the lowering
 * turns the constraint into the affine bound `for k in 0..q + 1` and a masked cell is never
 * visited: the products cost T(T+1)/2 points per head, not T², and backprop (the same records,
 * permuted) never reaches a future position. Output cells no valid point writes are 0 (Tile's
 * zero_unreached), so a masked probability is exactly 0. The one pass over the whole square is the
 * exp between the shifted scores and the sum (Tile's combinations have no unary function); its
 * masked cells hold exp(0) and no later statement reads them.
 *
 * The bodies are Tile functions (tile-edsl's Python flavor), the same text docs/notation.md shows
 * as let%tile, so the library and a script write attention the same way. Tile needs its operands'
 * dims when a statement is built: an operand whose shape is still open (a pointwise result, such
 * as layer_norm's) settles the graph's shapes first, as the notation does for Tile functions
 * (cn_graph_materialize: tensors built so far get their nodes; building goes on after).
 *
 * Layout (memory order): x is batch (B, T) | -> C; heads are H, head size D = C / H; q, k, v are
 * [B, T, H, D] (heads as output axes, so the projection weights | C -> H, D are nanoGPT's per-head
 * slices of Linear(C, C) in its own memory order [H, D, C]); scores and probabilities are
 * [B, H, T, T] (query, then key). Parameters follow nanoGPT's init: weights normal with std 0.02,
 * the residual projections' std 0.02 / sqrt(2 n_layer), biases 0, layer-norm scale 1 and shift 0;
 * labels are the caller's prefix joined with nanoGPT's names (e.g. "h0.attn.c_proj.weight").
 *
 * Layering: this file sits in src/tile (it uses Tile and the tensor constructors below it), so
 * nothing in src/tensor depends on Tile.
 *
 * Invariants: a failed check returns NULL with a message naming the operation; a failed piece
 * returns NULL keeping its constructor's message. */
#include "shape/shape.h"
#include "tile/tile.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The masked parts, each a Tile function (Python flavor). scores: Q, K [B, T, H, D] ->
 * [B, H, T, T], Q scaled by 1/sqrt(D) first (T·C multiplications, not T² divisions). */
static const char scores_body[] = "Q.bind_dims(B, T, H, D)\n"
                                  "K.bind_dims(B, T, H, D)\n"
                                  "Qs = Q / sqrt(D)\n"
                                  "S = TensorOutput(B, H, T, T)\n"
                                  "S[b, h, q, k] += Qs[b, q, h, d] * K[b, k, h, d]\n"
                                  "S.add_constraint(q - k < T)\n"
                                  "return S\n";

/* softmax over k <= q for each (b, h, q) of S [B, H, T, T]: the max over valid k (M), the shifted
 * scores on valid cells (X, 0 elsewhere), exp over the square, the sum over valid k (Z) and the
 * normalization on valid cells (P, exactly 0 elsewhere). */
static const char softmax_body[] = "S.bind_dims(B, H, T, T)\n"
                                   "M = TensorOutput(B, H, T)\n"
                                   "M[b, h, q] >= S[b, h, q, k]\n"
                                   "M.add_constraint(q - k < T)\n"
                                   "N = -M\n"
                                   "X = TensorOutput(B, H, T, T)\n"
                                   "X[b, h, q, k] += S[b, h, q, k] + N[b, h, q]\n"
                                   "X.add_constraint(q - k < T)\n"
                                   "E = exp(X)\n"
                                   "Z = TensorOutput(B, H, T)\n"
                                   "Z[b, h, q] += E[b, h, q, k]\n"
                                   "Z.add_constraint(q - k < T)\n"
                                   "R = 1 / Z\n"
                                   "P = TensorOutput(B, H, T, T)\n"
                                   "P[b, h, q, k] += E[b, h, q, k] * R[b, h, q]\n"
                                   "P.add_constraint(q - k < T)\n"
                                   "return P\n";

/* mix: P [B, H, T, T], V [B, T, H, D] -> O [B, T, H, D], the sum over k <= q. */
static const char mix_body[] = "P.bind_dims(B, H, T, T)\n"
                               "V.bind_dims(B, T, H, D)\n"
                               "O = TensorOutput(B, T, H, D)\n"
                               "O[b, q, h, d] += P[b, h, q, k] * V[b, k, h, d]\n"
                               "O.add_constraint(q - k < T)\n"
                               "return O\n";

/* The last position's query against every key (last_position): Q [B, 1, H, D], K [B, T, H, D];
 * every key precedes the last query, so no constraint; the same sums as the causal scores' last
 * row, then softmax_body's steps over the whole row, then the mix. */
static const char last_scores_body[] = "Q.bind_dims(B, I, H, D)\n"
                                       "K.bind_dims(B, T, H, D)\n"
                                       "Qs = Q / sqrt(D)\n"
                                       "S = TensorOutput(B, H, I, T)\n"
                                       "S[b, h, i, k] += Qs[b, i, h, d] * K[b, k, h, d]\n"
                                       "return S\n";
static const char last_softmax_body[] = "S.bind_dims(B, H, I, T)\n"
                                        "M = TensorOutput(B, H, I)\n"
                                        "M[b, h, i] >= S[b, h, i, k]\n"
                                        "N = -M\n"
                                        "X = TensorOutput(B, H, I, T)\n"
                                        "X[b, h, i, k] += S[b, h, i, k] + N[b, h, i]\n"
                                        "E = exp(X)\n"
                                        "Z = TensorOutput(B, H, I)\n"
                                        "Z[b, h, i] += E[b, h, i, k]\n"
                                        "R = 1 / Z\n"
                                        "P = TensorOutput(B, H, I, T)\n"
                                        "P[b, h, i, k] += E[b, h, i, k] * R[b, h, i]\n"
                                        "return P\n";
static const char last_mix_body[] = "P.bind_dims(B, H, I, T)\n"
                                    "V.bind_dims(B, T, H, D)\n"
                                    "O = TensorOutput(B, I, H, D)\n"
                                    "O[b, i, h, d] += P[b, h, i, k] * V[b, k, h, d]\n"
                                    "return O\n";

/* x [B, T | -> C]'s last position, copied (Tile's `=`, then an assignment einsum: no arithmetic,
 * so every bit, a zero's sign too): [B, 1 | -> C]. */
static const char last_position_body[] = "X.bind_dims(B, T, C)\n"
                                         "L = TensorOutput(B, 1, C)\n"
                                         "L[b, i, c] = X[b, i + T - 1, c]\n"
                                         "return L\n";

/* Settles t's shape when it is still open (materializing the graph so far); false with the
 * context's message if it cannot be. */
static bool settle(cn_graph *g, cn_tensor *t) {
  if (cn_shape_dims(g->shapes, t->shape, NULL, 0) >= 0) return true;
  if (cn_ctx_status(g->ctx) == CN_ERR_NOMEM) return false;
  cn_ctx_clear_error(g->ctx);
  return cn_graph_materialize(g) == CN_OK;
}

/* Applies a Tile body to n tensors named by params, settling their shapes first. */
static cn_tensor *apply_body(cn_graph *g, const char *name, int n, const char *const *params,
                             const char *body, cn_tensor *const *ts) {
  cn_tile_arg args[3];
  for (int i = 0; i < n; i++) {
    if (!settle(g, ts[i])) return NULL;
    args[i] = (cn_tile_arg){ts[i], 0};
  }
  cn_tile_fn *fn = cn_tile_fn_create(g->ctx, name, n, params, body, NULL, 1, 1);
  return cn_tensor_labeled(fn ? cn_tile_fn_apply(g, fn, n, args) : NULL, name);
}

cn_tensor *cn_tensor_causal_softmax(cn_graph *g, cn_tensor *scores) {
  if (!cn_tensor_operands(g, "causal_softmax", 1, &scores)) return NULL;
  return apply_body(g, "causal_softmax", 1, (const char *const[]){"S"}, softmax_body, &scores);
}

/* Dropout keeps P's shape known for the mix: its pointwise result is read through an einsum that
 * names P's axes (snd reads only the dropped-out cells and has no derivative in P). */
static cn_tensor *dropout_known(cn_graph *g, cn_tensor *p, cn_tensor *rate, cn_tensor *step) {
  cn_tensor *d = cn_tensor_dropout(g, p, rate, step);
  return d ? cn_tensor_einsum(g, "b,h,q,k; b,h,q,k => b,h,q,k", CN_OP_ADD, CN_OP_ARG2, 2,
                              (cn_tensor *[]){p, d})
           : NULL;
}

cn_tensor *cn_tensor_causal_sdpa(cn_graph *g, cn_tensor *q, cn_tensor *k, cn_tensor *v,
                                 cn_tensor *rate, cn_tensor *step) {
  if (!cn_tensor_operands(g, "causal_sdpa", 3, (cn_tensor *[]){q, k, v})) return NULL;
  if (rate && !step) {
    cn_fail(g->ctx, CN_ERR_INVALID, "causal_sdpa: a dropout rate needs a step counter");
    return NULL;
  }
  cn_tensor *s = apply_body(g, "causal_scores", 2, (const char *const[]){"Q", "K"}, scores_body,
                            (cn_tensor *[]){q, k});
  cn_tensor *p = s ? cn_tensor_causal_softmax(g, s) : NULL;
  if (p && rate) p = dropout_known(g, p, rate, step);
  return p ? apply_body(g, "causal_sdpa", 2, (const char *const[]){"P", "V"}, mix_body,
                        (cn_tensor *[]){p, v})
           : NULL;
}

/* ---- Parameters ------------------------------------------------------------------------------ */

#define AX(...)                                                                                    \
  ((cn_axes){(int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__},  \
             NULL})

/* The parameter of g labeled label, if one exists, when its rows have the dims d: a block applied
 * again with the same prefix (to a validation batch, a sampling window) reads the same weights.
 * *found is the parameter (NULL: none); false with a message when it has other dims. */
static bool existing_param(cn_graph *g, const char *label, const cn_dims *d, cn_tensor **found) {
  *found = NULL;
  for (int i = 0; i < g->n_tensors; i++) {
    cn_tensor *t = g->tensors[i];
    if (!t->is_param || strcmp(t->label, label) != 0) continue;
    const cn_axes *rows[3] = {&d->batch, &d->input, &d->output};
    const cn_row_kind kinds[3] = {CN_ROW_BATCH, CN_ROW_INPUT, CN_ROW_OUTPUT};
    bool same = true;
    for (int r = 0; r < 3 && same; r++) {
      int64_t have[CN_MAX_RANK];
      int n = cn_shape_row_dims(g->shapes, t->shape, kinds[r], have, CN_MAX_RANK);
      same = n == (rows[r]->n < 0 ? 0 : rows[r]->n);
      for (int k = 0; k < n && same; k++) same = have[k] == rows[r]->dims[k];
    }
    if (!same) {
      cn_fail(g->ctx, CN_ERR_INVALID,
              "parameter \"%s\" (#%d) has shape %s, not the one this block needs: a block "
              "applied again with the same label reuses its parameters (same channels and heads)",
              label, t->id, cn_tensor_shape(t));
      return false;
    }
    *found = t;
    return true;
  }
  return true;
}

/* A parameter labeled "<prefix>.<name>" (or name alone for an empty prefix): the graph's own when
 * it has one of that label (existing_param), else a new one. std > 0: normal with that standard
 * deviation; otherwise filled with the constant fill. */
static cn_tensor *param(cn_graph *g, const char *prefix, const char *name, cn_dims dims, double std,
                        double fill) {
  char label[256];
  int n = snprintf(label, sizeof label, "%s%s%s", prefix, *prefix ? "." : "", name);
  if (n < 0 || (size_t)n >= sizeof label) {
    cn_fail(g->ctx, CN_ERR_INVALID, "parameter label \"%s.%s\" is longer than %zu bytes", prefix,
            name, sizeof label - 1);
    return NULL;
  }
  cn_tensor *old;
  if (!existing_param(g, label, &dims, &old)) return NULL;
  if (old) return old;
  cn_tensor *init = std > 0 ? cn_tensor_normal(g) : cn_tensor_number(g, fill);
  if (init && std > 0) init = cn_tensor_apply2(g, CN_OP_MUL, cn_tensor_scalar(g, std), init);
  cn_tensor *p = init ? cn_tensor_param(g, label, &dims, init) : NULL;
  /* the constant-initialized ones are biases and gains: no weight decay (nanoGPT's groups) */
  if (p) p->decay_exempt = std <= 0;
  return p;
}

/* x [B, T | -> IN] times a weight | IN -> OUT plus a bias | -> OUT, the specs naming the rows. */
static cn_tensor *linear(cn_graph *g, cn_tensor *x, const char *wspec, const char *bspec,
                         cn_tensor *w, cn_tensor *b) {
  cn_tensor *y = w && b ? cn_tensor_einsum2(g, wspec, x, w) : NULL;
  return y ? cn_tensor_outer_sum(g, bspec, y, b) : NULL;
}

/* Checks cfg and x (batch B, T | -> C with C a multiple of the heads), writing C. */
static bool check_block(cn_graph *g, const char *what, cn_tensor *x, const cn_attention *cfg,
                        int64_t *c) {
  if (!cn_tensor_operands(g, what, 1, &x)) return false;
  if (!cfg || cfg->n_heads < 1 || cfg->n_layer < 1) {
    cn_fail(g->ctx, CN_ERR_INVALID, "%s: n_heads %d and n_layer %d must be at least 1", what,
            cfg ? cfg->n_heads : 0, cfg ? cfg->n_layer : 0);
    return false;
  }
  if (cfg->dropout_rate && !cfg->dropout_step) {
    cn_fail(g->ctx, CN_ERR_INVALID, "%s: a dropout rate needs a step counter", what);
    return false;
  }
  if (cfg->dropout_rate && cfg->last_position) {
    cn_fail(g->ctx, CN_ERR_INVALID,
            "%s: last_position computes a forward for sampling: no dropout rate with it", what);
    return false;
  }
  if (!settle(g, x)) return false;
  int64_t batch[2], out[1];
  int nb = cn_shape_row_dims(g->shapes, x->shape, CN_ROW_BATCH, batch, 2);
  int ni = cn_shape_row_dims(g->shapes, x->shape, CN_ROW_INPUT, NULL, 0);
  int no = cn_shape_row_dims(g->shapes, x->shape, CN_ROW_OUTPUT, out, 1);
  if (nb != 2 || ni != 0 || no != 1 || out[0] % cfg->n_heads != 0) {
    cn_fail(g->ctx, CN_ERR_INVALID,
            "%s: x \"%s\" (#%d) has shape %s: it must be batch, time | -> channels (B,T|->C) "
            "with C a multiple of the %d heads",
            what, x->label, x->id, cn_tensor_shape(x), cfg->n_heads);
    return false;
  }
  *c = out[0];
  return true;
}

static cn_tensor *dropout_opt(cn_graph *g, cn_tensor *y, const cn_attention *cfg) {
  return y && cfg->dropout_rate ? cn_tensor_dropout(g, y, cfg->dropout_rate, cfg->dropout_step) : y;
}

/* One of q, k, v: x [B, T | -> C] to [B, T | -> H, D]. */
static cn_tensor *head_proj(cn_graph *g, cn_tensor *x, const char *prefix, const char *name,
                            int64_t c, int64_t h) {
  char wname[32], bname[32];
  snprintf(wname, sizeof wname, "attn.%s.weight", name);
  snprintf(bname, sizeof bname, "attn.%s.bias", name);
  cn_tensor *w = param(g, prefix, wname, (cn_dims){CN_AXES_NONE, AX(c), AX(h, c / h)}, 0.02, 0);
  cn_tensor *b =
      w ? param(g, prefix, bname, (cn_dims){CN_AXES_NONE, CN_AXES_NONE, AX(h, c / h)}, 0, 0) : NULL;
  return linear(g, x, "b,t|->c; c->h,d => b,t|->h,d", "b,t|->h,d; h,d => b,t|->h,d", w, b);
}

/* x's last position, [B, 1 | -> C] (last_position_body). */
static cn_tensor *last_position(cn_graph *g, cn_tensor *x) {
  cn_tensor *l =
      apply_body(g, "last_position", 1, (const char *const[]){"X"}, last_position_body, &x);
  return l ? cn_tensor_einsum(g, "b,t,c => b,t|->c", CN_OP_ARG2, CN_OP_ID, 1, &l) : NULL;
}

/* The attention of the last position's query q [B, 1 | -> H, D] over every k and v. */
static cn_tensor *last_sdpa(cn_graph *g, cn_tensor *q, cn_tensor *k, cn_tensor *v) {
  cn_tensor *s = apply_body(g, "last_scores", 2, (const char *const[]){"Q", "K"}, last_scores_body,
                            (cn_tensor *[]){q, k});
  cn_tensor *p =
      s ? apply_body(g, "last_softmax", 1, (const char *const[]){"S"}, last_softmax_body, &s)
        : NULL;
  return p ? apply_body(g, "last_sdpa", 2, (const char *const[]){"P", "V"}, last_mix_body,
                        (cn_tensor *[]){p, v})
           : NULL;
}

cn_tensor *cn_tensor_causal_attention(cn_graph *g, cn_tensor *x, const char *prefix,
                                      const cn_attention *cfg) {
  int64_t c;
  if (!check_block(g, "causal_attention", x, cfg, &c)) return NULL;
  if (!prefix) prefix = "";
  int64_t h = cfg->n_heads;
  cn_tensor *q = head_proj(g, cfg->last_position ? last_position(g, x) : x, prefix, "q", c, h);
  cn_tensor *k = q ? head_proj(g, x, prefix, "k", c, h) : NULL;
  cn_tensor *v = k ? head_proj(g, x, prefix, "v", c, h) : NULL;
  cn_tensor *o = !v ? NULL
                 : cfg->last_position
                     ? last_sdpa(g, q, k, v)
                     : cn_tensor_causal_sdpa(g, q, k, v, cfg->dropout_rate, cfg->dropout_step);
  double resid_std = 0.02 / sqrt(2.0 * cfg->n_layer);
  cn_tensor *wo = o ? param(g, prefix, "attn.c_proj.weight",
                            (cn_dims){CN_AXES_NONE, AX(h, c / h), AX(c)}, resid_std, 0)
                    : NULL;
  cn_tensor *bo =
      wo ? param(g, prefix, "attn.c_proj.bias", (cn_dims){CN_AXES_NONE, CN_AXES_NONE, AX(c)}, 0, 0)
         : NULL;
  cn_tensor *y = linear(g, o, "b,t,h,d; h,d->c => b,t|->c", "b,t|->c; c => b,t|->c", wo, bo);
  return cn_tensor_labeled(dropout_opt(g, y, cfg), "causal_attention");
}

/* Layer norm with a learned scale (1) and shift (0) of C cells, nanoGPT's LayerNorm(bias=True). */
static cn_tensor *ln(cn_graph *g, cn_tensor *x, const char *prefix, const char *name, int64_t c) {
  char sname[32], bname[32];
  snprintf(sname, sizeof sname, "%s.weight", name);
  snprintf(bname, sizeof bname, "%s.bias", name);
  cn_dims d = {CN_AXES_NONE, CN_AXES_NONE, AX(c)};
  cn_tensor *s = param(g, prefix, sname, d, 0, 1);
  cn_tensor *b = s ? param(g, prefix, bname, d, 0, 0) : NULL;
  return b ? cn_tensor_layer_norm(g, x, s, b, 1e-5) : NULL;
}

cn_tensor *cn_tensor_transformer_block(cn_graph *g, cn_tensor *x, const char *prefix,
                                       const cn_attention *cfg) {
  int64_t c;
  if (!check_block(g, "transformer_block", x, cfg, &c)) return NULL;
  if (!prefix) prefix = "";
  cn_tensor *a = ln(g, x, prefix, "ln_1", c);
  a = a ? cn_tensor_causal_attention(g, a, prefix, cfg) : NULL;
  cn_tensor *rest = a && cfg->last_position ? last_position(g, x) : x;
  cn_tensor *x1 = a && rest ? cn_tensor_apply2(g, CN_OP_ADD, rest, a) : NULL;
  cn_tensor *m = x1 ? ln(g, x1, prefix, "ln_2", c) : NULL;
  cn_tensor *wfc =
      m ? param(g, prefix, "mlp.c_fc.weight", (cn_dims){CN_AXES_NONE, AX(c), AX(4 * c)}, 0.02, 0)
        : NULL;
  cn_tensor *bfc = wfc ? param(g, prefix, "mlp.c_fc.bias",
                               (cn_dims){CN_AXES_NONE, CN_AXES_NONE, AX(4 * c)}, 0, 0)
                       : NULL;
  m = linear(g, m, "b,t|->c; c->f => b,t|->f", "b,t|->f; f => b,t|->f", wfc, bfc);
  m = m ? cn_tensor_gelu(g, m) : NULL;
  cn_tensor *wp =
      m ? param(g, prefix, "mlp.c_proj.weight", (cn_dims){CN_AXES_NONE, AX(4 * c), AX(c)},
                0.02 / sqrt(2.0 * cfg->n_layer), 0)
        : NULL;
  cn_tensor *bp =
      wp ? param(g, prefix, "mlp.c_proj.bias", (cn_dims){CN_AXES_NONE, CN_AXES_NONE, AX(c)}, 0, 0)
         : NULL;
  m = dropout_opt(g, linear(g, m, "b,t|->f; f->c => b,t|->c", "b,t|->c; c => b,t|->c", wp, bp),
                  cfg);
  return cn_tensor_labeled(m ? cn_tensor_apply2(g, CN_OP_ADD, x1, m) : NULL, "transformer_block");
}
