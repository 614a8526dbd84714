/* Projection inference (issue 4; contraction-is-emergent "Two equation forms" to "Solving:
 * union-find with pinning", convolution-is-a-contraction "Solve, then evaluate", "Padding",
 * "Striding without a kernel"): turns one operation of a finalized shape environment into the
 * projections record (product space and one index map per tensor) that its assignments are lowered
 * with.
 *
 * Per operation ("global sizes, local identities"): the operation's shapes are copied with
 * fresh axis identities (solved sizes, a new projection id per axis), its constraints are
 * re-derived by the shape logic over the copies and re-solved in an empty local environment
 * (which binds the spec's row variables and labels to concrete axes), then the constraints are
 * elaborated by the six rules into co-iteration (union-find over axis identities), pins
 * (broadcast axes at 0, fixed indices, slice indices) and iteration markers; every tensor axis is
 * a terminal marker. Closing: a pinned class keeps its pin, an affine-derived class gets no loop
 * of its own, an iterated class of size > 1 gets a fresh iterator, the rest read Fix 0. A second
 * stratum evaluates affine terms, stride*over + dilation*kernel + stride_offset - left_margin,
 * against the first stratum's indices and checks deferred equalities.
 *
 * Padding: a padded convolution's input axis with a kernel of size k and dilation d needs margins
 * left = d * (k - right), right = d * ((k + 1) / 2) (convolution-is-a-contraction's split, scaled
 * by the dilation). The environment keeps the running maximum per tensor axis (shape id,
 * memory-order axis) over every operation inferred; cn_proj_freeze_padding commits one shape's
 * margins when its buffers are allocated, after which an operation needing more on that shape is an
 * error (other shapes, new or not yet materialized, keep growing theirs).
 *
 * Invariants: the product space lists iterators in order of first appearance over the LHS then
 * the RHS tensors (memory order: batch, output, input); every index is canonical; a conflict
 * (two pins, two sizes in one class, two different affine readings) fails with a message naming
 * the operation, the tensors, rows and axes, never with wrong loops. */
#ifndef CN_PROJ_H
#define CN_PROJ_H

#include "ir/ir.h"
#include "shape/shape.h"

typedef struct cn_proj_env cn_proj_env;

/* Projection inference over the (finalized) shapes of env. */
cn_proj_env *cn_proj_env_new(cn_shape_env *shapes);

/* The projections record of op: slot 0 its LHS, slots 1..n its operands, dims in memory order.
 * slice_index: for CN_SL_BATCH_SLICE, the index of the sliced leading batch axis (a Fixed
 * position or the Iter of a static symbol bound when the routine runs); ignored otherwise.
 * For CN_SL_VEC_CONVERT the LHS map addresses the first cell of each group of args.coeff cells.
 * NULL with a message when a shape is not final or the operation's projections conflict. */
cn_proj *cn_proj_infer(cn_proj_env *env, const cn_shape_op *op, const cn_index *slice_index);

/* The margins accumulated so far for one axis (memory order) of a shape: [0] left, [1] right. */
void cn_proj_padding(const cn_proj_env *env, const cn_shape *shape, int axis, int64_t margin[2]);
/* Commits a shape's margins: its buffers are about to be allocated (convolution-is-a-contraction:
 * frozen at finalization, when buffers can be allocated). */
cn_status cn_proj_freeze_padding(cn_proj_env *env, const cn_shape *shape);

#endif
