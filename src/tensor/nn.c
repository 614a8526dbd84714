/* Neural-network blocks of the operation library (issue 28): GELU, layer normalization and
 * dropout. Like library.c and train.c, each is composed from the core constructors (pointwise
 * application, einsum, scalar constants, the counter-based uniform_at; GELU is one primitive op),
 * so its gradient is the one the core derives for those pieces and nothing here touches the
 * derivative machinery.
 *
 * Layout: layer_norm normalizes over x's whole output row, for each batch and input position
 * (softmax's reduction, "... | ..i.. -> ..o.. => ... | ..i.. ->"); scale and shift have exactly
 * x's output axes (no batch or input axes), typically parameters.
 *
 * Invariants: a failed argument check returns NULL with a message naming the operation; a failed
 * piece returns NULL keeping the message of the constructor that failed; each block labels its
 * result with its name. */
#include "tensor/tensor.h"

#include <math.h>

/* Constants without axes, as in library.c: they fill whatever shape they meet. */
static cn_tensor *num(cn_graph *g, double v) {
  return cn_tensor_scalar(g, v);
}

static cn_tensor *mul(cn_graph *g, cn_tensor *a, cn_tensor *b) {
  return cn_tensor_apply2(g, CN_OP_MUL, a, b);
}

/* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the tanh form (Hendrycks & Gimpel): the
 * primitive gelu (ops.def, builtins.h cn_gelu, which computes it in its logistic form), whose
 * forward is one pass and whose derivative (derivs.def) another. */
cn_tensor *cn_tensor_gelu(cn_graph *g, cn_tensor *x) {
  if (!cn_tensor_operands(g, "gelu", 1, &x)) return NULL;
  return cn_tensor_labeled(cn_tensor_apply1(g, CN_OP_GELU, x), "gelu");
}

/* Per example: the mean over the output row, as the sum of x / n with n the number of cells
 * summed into each result cell, counted at run time (x's shape may be solved only at
 * materialization) by summing snd(x, 1), which neither reads x nor has a derivative in it. */
static const char per_example[] = "... | ..i.. -> ..o.. => ... | ..i.. ->";

static cn_tensor *row_mean(cn_graph *g, cn_tensor *x, cn_tensor *n) {
  static const char divided[] = "... | ..i.. -> ..o..; ... | ..i.. -> => ... | ..i.. ->";
  return x && n ? cn_tensor_einsum(g, divided, CN_OP_ADD, CN_OP_DIV, 2, (cn_tensor *[]){x, n})
                : NULL;
}

/* The identity on a tensor of one value per example (no output axes). */
static const char per_example_pin[] = "... | ..i.. -> => ... | ..i.. ->";

/* scale and shift are per feature: exactly the output row's axes, shared by every batch and input
 * position (a pointwise product would let an inferred parameter take x's input axes too). */
static const char per_feature[] = "... | ..i.. -> ..o..; ..o.. => ... | ..i.. -> ..o..";

/* (x - mean) / sqrt(var + eps) * scale + shift, with the biased variance mean((x - mean)^2). */
cn_tensor *cn_tensor_layer_norm(cn_graph *g, cn_tensor *x, cn_tensor *scale, cn_tensor *shift,
                                double eps) {
  if (!cn_tensor_operands(g, "layer_norm", 1, &x)) return NULL;
  if (!(eps >= 0 && isfinite(eps))) {
    cn_fail(g->ctx, CN_ERR_INVALID, "layer_norm: eps %g (must be finite and non-negative)", eps);
    return NULL;
  }
  cn_tensor *ones = cn_tensor_apply2(g, CN_OP_ARG2, x, num(g, 1));
  cn_tensor *n = ones ? cn_tensor_einsum1(g, per_example, ones) : NULL;
  cn_tensor *d = cn_tensor_apply2(g, CN_OP_SUB, x, row_mean(g, x, n));
  cn_tensor *var = row_mean(g, mul(g, d, d), n);
  cn_tensor *r =
      cn_tensor_apply1(g, CN_OP_RECIP_SQRT, cn_tensor_apply2(g, CN_OP_ADD, var, num(g, eps)));
  /* pinned to one value per example: left open, the pointwise rows of var + eps and its
   * reciprocal square root would close at x's shape (the product with d bounds them), computing
   * the same value once per feature and storing it */
  if (r) r = cn_tensor_einsum1(g, per_example_pin, r);
  cn_tensor *y = mul(g, d, r);
  if (y && scale) y = cn_tensor_einsum2(g, per_feature, y, scale);
  if (y && shift) y = cn_tensor_outer_sum(g, per_feature, y, shift);
  return cn_tensor_labeled(y, "layer_norm");
}

/* where(u < rate, 0, x / (1 - rate)) with u = uniform_at(step): u is keyed by its own tensor id
 * and the seed (uniform1's key) and by step, so each dropout in a graph has its own mask, the same
 * for a seed and step and another for another step; a cell is kept with probability 1 - rate.
 * At rate 0 no u is below it and x / 1 is x: the identity, exactly. */
cn_tensor *cn_tensor_dropout(cn_graph *g, cn_tensor *x, cn_tensor *rate, cn_tensor *step) {
  if (!cn_tensor_operands(g, "dropout", 3, (cn_tensor *[]){x, rate, step})) return NULL;
  cn_tensor *u = cn_tensor_uniform_at(g, step);
  cn_tensor *drop = cn_tensor_apply2(g, CN_OP_LT, u, rate);
  cn_tensor *kept =
      cn_tensor_apply2(g, CN_OP_DIV, x, cn_tensor_apply2(g, CN_OP_SUB, num(g, 1), rate));
  cn_tensor *zero = num(g, 0);
  return cn_tensor_labeled(
      drop && kept && zero ? cn_tensor_apply(g, CN_OP_WHERE, 3, (cn_tensor *[]){drop, zero, kept})
                           : NULL,
      "dropout");
}
