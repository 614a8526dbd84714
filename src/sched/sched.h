/* The scheduling stage (issue 16): passes over a loop-IR procedure, between the simplifier
 * (src/loops) and the backends, that change how a procedure runs and never what it computes.
 *
 * Invariants: every pass preserves the results bit for bit — for every cell, the sequence of
 * values stored into it (the order of its accumulation) is the one of the unscheduled procedure —
 * and is conservative: when an analysis cannot prove a change legal, the IR is left as it was. A
 * pass builds new IR only through the cn_lb_* constructors of loops.h. The passes run in the order
 * of passes.def (fill forwarding, virtual nodes, GEMM plans, loop order, fusion, tiling, marks,
 * then unroll-and-jam), each
 * can be switched off alone (cn_sched_options) so a failure can be bisected, and each is testable
 * alone through its own entry point below. This stage includes src/loops, src/ir, src/numeric and
 * src/core only; src/runtime calls it. */
#ifndef CN_SCHED_H
#define CN_SCHED_H

#include "loops/loops.h"

/* ---- The driver (sched.c) ---- */

/* The passes, as bits of cn_sched_options.passes, in the order they run (passes.def). */
enum {
#define CN_SCHED_PASS(NAME, name) CN_SCHED_INDEX_##NAME,
#include "sched/passes.def"
#undef CN_SCHED_PASS
  CN_SCHED_N_PASSES
};
enum {
#define CN_SCHED_PASS(NAME, name) CN_SCHED_##NAME = 1u << CN_SCHED_INDEX_##NAME,
#include "sched/passes.def"
#undef CN_SCHED_PASS
  CN_SCHED_ALL = (1u << CN_SCHED_N_PASSES) - 1
};

typedef struct {
  unsigned passes; /* CN_SCHED_* bits; 0 runs nothing */
  /* The cache sizes tiling aims at, in bytes: the L1 data cache and the last-level cache; 0: the
   * machine's (cn_sched_cache_sizes). */
  int64_t l1_bytes, llc_bytes;
  /* The least work (cell updates) of a loop marked parallel; 0: CN_SCHED_PARALLEL_WORK. */
  int64_t parallel_work;
  /* Keep fusable nodes (ir.h) stored: the "check" = "nan" option names the first stored node
   * holding a non-finite value, which must be the operation that produced it. */
  bool keep_fusable;
  /* GEMM plans in exact mode: separate multiply and add, the nest's bits (loops.h, cn_ll_gemm);
   * else fused multiply-adds. */
  bool exact;
  /* The fewest points of a nest given a GEMM plan; 0: CN_SCHED_GEMM_WORK (tests plan small
   * nests to reach every edge of the tiles). */
  int64_t gemm_work;
  /* Scheduling for a device backend (backend/kernels.h: a nest's leading parallel loops are a
   * kernel's grid): every loop of the run of independent loops that starts at a nest's parallel
   * loop is marked parallel, not only that outermost one (an element-wise [128, 784] nest is a
   * grid of 100 352 work items, not 128 that loop over 784 each), the loop order puts a nest's
   * output loops outside its reductions (order.c); no cache tiling and no
   * unroll-and-jam, which fit a CPU's caches and registers and would turn grid loops into
   * sequential ones. */
  bool device;
} cn_sched_options;

/* Every pass on: the default (what a NULL options pointer means). */
cn_sched_options cn_sched_default(void);
/* Reads an option text: "all" (or NULL or ""), "none", or a comma-separated list of pass names
 * (passes.def: "order,marks"; spaces around names allowed) naming the passes that run, into *out
 * (the other fields the defaults). An unknown or empty name is CN_ERR_INVALID with a message naming
 * it and the known names; *out is then unchanged. */
cn_status cn_sched_parse(cn_ctx *ctx, const char *text, cn_sched_options *out);
/* The L1 data and last-level (the highest level listed) cache sizes of cpu0 in bytes, read once
 * (thread-safe) from the files level,
 * type and size of /sys/devices/system/cpu/cpu0/cache/index<n>; 48 KiB and 1 MiB for a level that
 * cannot be read. */
void cn_sched_cache_sizes(int64_t *l1_bytes, int64_t *llc_bytes);
/* Runs the passes opts selects (NULL: all) over proc, in place. Fails only on allocation
 * failure (CN_ERR_NOMEM), the procedure then being unchanged or scheduled only in part, every part
 * being correct on its own. */
cn_status cn_sched_proc(cn_ctx *ctx, cn_ll_proc *proc, const cn_sched_options *opts);

/* ---- Dependence analysis (deps.c) ---- */

/* A perfect nest: a chain of FOR loops, each the whole body of the previous one (directly or as
 * the one statement of a SEQ), down to a body made only of stores (CN_LL_SET), guards over such
 * bodies, sequences of them and comments. Loops outside the nest are constants inside it. */
#define CN_SCHED_MAX_DEPTH 16

typedef struct {
  int param;
  const cn_index *idx; /* one per axis of the param's node */
  bool write;
} cn_sched_access;

typedef struct {
  int depth;
  cn_ll_stmt **slots[CN_SCHED_MAX_DEPTH]; /* where each loop is held: slots[0] in its parent */
  cn_ll_stmt *loops[CN_SCHED_MAX_DEPTH];  /* loops[0] outermost */
  int n_stores;                           /* the body's CN_LL_SET statements */
  int n_access;
  cn_sched_access *access; /* arena; every store's write, then its reads, in body order */
  /* Inside a CN_LL_LET (a gathered index; set by cn_sched_each_nest): the let's symbol is fixed
   * during the nest, as an outer loop's variable is, and passes that reorder the nest keep it
   * inside the let; the GEMM pass, whose plan runs apart from the nest's text, leaves it. */
  bool under_let;
  /* Some loop of the nest is a sum in lanes (loops.h CN_LL_LANES, the option "reduce"): its
   * meaning depends on the loop being as the lowering made it, so the passes that move, split,
   * fuse, plan or jam loops leave the nest as it is; the marks pass marks its other loops. */
  bool lanes;
} cn_sched_nest;

/* Reads the perfect nest whose outermost loop is *slot (a CN_LL_FOR): *found is false when the
 * chain does not end in a body of stores, or is deeper than CN_SCHED_MAX_DEPTH. CN_ERR_NOMEM on
 * allocation failure. */
cn_status cn_sched_nest_read(cn_ctx *ctx, cn_ll_stmt **slot, cn_sched_nest *nest, bool *found);
/* Calls fn on every perfect nest of proc, outermost first: a loop heading a perfect nest is handed
 * to fn (which may replace the nest in its slot) and not entered; other loops, guards, lets
 * (under_let) and sequences are entered. Stops at the first status fn returns other than CN_OK. */
typedef cn_status (*cn_sched_nest_fn)(cn_ctx *ctx, const cn_ll_proc *proc, cn_sched_nest *nest,
                                      void *user);
cn_status cn_sched_each_nest(cn_ctx *ctx, cn_ll_proc *proc, cn_sched_nest_fn fn, void *user);
/* The top-level statements of a body, sequences flattened, in order (an arena array): how the
 * passes that work across statements (virtual.c, fuse.c) read a procedure. */
typedef struct {
  cn_ll_stmt **items;
  int n, cap;
} cn_sched_stmts;
/* Appends s; false on allocation failure. */
bool cn_sched_stmts_push(cn_ctx *ctx, cn_sched_stmts *list, cn_ll_stmt *s);
/* Appends the statements of body, its sequences flattened; false on allocation failure. */
bool cn_sched_stmts_flatten(cn_ctx *ctx, cn_ll_stmt *body, cn_sched_stmts *list);
/* Whether e reads param; whether two accesses of `rank` axes are at the same indices; whether
 * every read of param in e is at idx (the helpers of fresh.c and fill.c). */
bool cn_sched_expr_reads(const cn_ll_expr *e, int param);
bool cn_sched_same_indices(const cn_index *a, const cn_index *b, int rank);
bool cn_sched_reads_only_at(const cn_ll_expr *e, int param, const cn_index *idx, int rank);
/* The loops of a nest from s (its outermost loop, sequences of one item entered) down to its
 * body (*body), when each runs from 0 without affine bounds (at most CN_SCHED_MAX_DEPTH): their
 * count, or -1. */
int cn_sched_box_loops(const cn_ll_stmt *s, const cn_ll_stmt **loops, const cn_ll_stmt **body);
/* Whether a write at idx to a node reaches every cell under loops[0..depth) (depth at most
 * CN_SCHED_MAX_DEPTH): each axis a distinct one of the loops, running over exactly [0, dim). */
bool cn_sched_covers(const cn_node *node, const cn_index *idx, const cn_ll_stmt *const *loops,
                     int depth);
/* The constant k as a read of a cell of prec gives it after `cell := k` (converted, rounded as
 * the store rounds): what a producer's or a fill's constant is where it is read (virtual.c,
 * fill.c). NULL on allocation failure. */
cn_ll_expr *cn_sched_const_as_stored(cn_ctx *ctx, cn_prec prec, const cn_ll_expr *k);
/* A new loop with old's variable, box, bounds and marks over body (NULL on allocation failure):
 * how the passes rebuild a nest in another shape. */
cn_ll_stmt *cn_sched_loop_copy(cn_ctx *ctx, const cn_ll_stmt *old, cn_ll_stmt *body);
/* The distance in cells between the cells an access reaches for two consecutive values of sym,
 * in the padded row-major layout of its node (coefficients of sym times the axes' strides). */
double cn_sched_stride(const cn_ll_proc *proc, const cn_sched_access *access, cn_symbol sym);
/* Whether sym is a reduction loop of the store whose write is access w: sym appears in none of
 * the indices of the written cell, so several of its values accumulate into one cell. */
bool cn_sched_is_reduction(const cn_sched_access *w, int rank, cn_symbol sym);
/* Whether the iterations of the loop of sym are independent when the symbols inner[0..n_inner)
 * vary inside each iteration (every other symbol is fixed): no two iterations write the same cell,
 * and no iteration reads a cell another writes. Conservative (false when unsure): each write and
 * each access of its buffer (itself included) must share an axis index that is c*sym (c != 0) plus
 * symbols other than the inner ones, or hold two different constants in one axis. */
bool cn_sched_independent(const cn_ll_proc *proc, const cn_sched_nest *nest, cn_symbol sym,
                          const cn_symbol *inner, int n_inner);

/* Whether the nest is one store and every other access of the written buffer has the write's
 * indices: no point reads a cell another point writes, except its own. */
bool cn_sched_own_cell(const cn_ll_proc *proc, const cn_sched_nest *nest);
/* Whether the nest is one store whose cells separate by output loops: cn_sched_own_cell and no
 * axis of the written cell mentions two of the nest's loop variables. Then two points touch one
 * cell only when all output loops agree, and such points run in the order of the reduction
 * loops: loops may be permuted (and output loops split) as long as the reduction loops keep their
 * relative order. */
bool cn_sched_separable(const cn_ll_proc *proc, const cn_sched_nest *nest);
/* Whether loop sym separates the cells of a one-store nest: some axis of the write mentions sym
 * and no other loop of the nest, so points with different values of sym write different cells.
 * In a cn_sched_own_cell nest such a loop may move anywhere, the others keeping their order:
 * every cell's points share one value of it and keep their relative order (a convolution's
 * input gradient in[oh + kh, ic] += ..., whose loop ic may run innermost). */
bool cn_sched_separates(const cn_ll_proc *proc, const cn_sched_nest *nest, cn_symbol sym);
/* Whether axis `axis` of node has one cell, reached at index ix = 0 (no padding): a store
 * covers it without a loop, as the lowering writes a size-1 axis ([128, 28, 28, 1]); the virtual
 * and fusion passes take such a write as one cell per point. */
bool cn_sched_single_cell_axis(const cn_node *node, int axis, const cn_index *ix);
/* Whether one of the affine bounds of a loop reads sym. */
bool cn_sched_bounds_mention(const cn_ll_stmt *loop, cn_symbol sym);

/* A replacement of loop variables (subst.c): from[k] becomes scale[k] * to[k] + offset[k]. */
typedef struct {
  int n;
  const cn_symbol *from, *to;
  const int64_t *scale, *offset;
} cn_sched_subst;
/* ix with the replacement applied (canonical form). */
cn_index cn_sched_subst_index(const cn_sched_subst *s, const cn_index *ix);
/* A copy of a body of stores (stores, guards, sequences, comments) with the replacement applied
 * to every index, guard condition and embedded index; NULL on allocation failure. */
cn_ll_stmt *cn_sched_subst_body(cn_ctx *ctx, const cn_ll_proc *proc, const cn_sched_subst *s,
                                const cn_ll_stmt *body);

/* ---- GEMM-class nests (gemm.c) ---- */

/* The group of a loop of a GEMM-class nest (cn_sched_gemm_of): rows (the output and the first
 * operand), columns (the output and the second), the reduction (both operands), batch (all). */
typedef struct {
  int c, x, y; /* params: the accumulated output, the first and the second operand */
  int depth;
  cn_gemm_role role[CN_SCHED_MAX_DEPTH]; /* per loop of the nest, outermost first */
  int count[CN_GEMM_ROLES];              /* loops per group */
} cn_sched_gemm;

/* Whether a perfect nest is GEMM-class: one store c[w] := c[w] + x[p] * y[q] (one precision, no
 * guard, each axis of w one loop at most) whose every loop falls in one of the groups, with at
 * least one M, one N and one K loop; *out then holds the operands and the groups. Indices may be
 * affine (transposed, strided, dilated, offset operands). */
bool cn_sched_gemm_of(const cn_ll_proc *proc, const cn_sched_nest *nest, cn_sched_gemm *out);

/* GEMM plans (gemm.c): every GEMM-class perfect nest of a floating precision with box
 * loops (no affine bounds) and at least opts->gemm_work points becomes a CN_LL_GEMM statement
 * with a plan (loops.h): fused or exact by opts->exact, the backend's default register tile, cache
 * blocks from the cache sizes. */
#define CN_SCHED_GEMM_WORK ((int64_t)1 << 15)
cn_status cn_sched_gemm_plans(cn_ctx *ctx, cn_ll_proc *proc, const cn_sched_options *opts);

/* Whether the first top-level statement of proc touching param writes every cell of it before
 * reading any (fresh.c): a routine then need not clear param's scratch before a run. */
bool cn_sched_written_first(const cn_ll_proc *proc, int param);

/* ---- Passes ---- */

/* Virtual nodes (virtual.c): every parameter whose node is CN_MEM_VIRTUAL, or fusable (ir.h)
 * unless keep_fusable, and whose producer can be recomputed exactly at each of its reads is
 * inlined there and leaves the procedure's params; the other virtual ones stay, as routine-local
 * scratch, the other fusable ones as they were. Runs first, so the later passes see the fused
 * nests. The most expression nodes a producer read more than once may copy into its reads, in
 * all. */
#define CN_SCHED_VIRTUAL_MAX_COPIED 32
/* The deepest expression a copy may leave in a statement: an unnamed chain of a thousand sums
 * would otherwise become one expression a thousand operations deep (recursion in every stage,
 * and clang refuses more than 256 nested parentheses). */
#define CN_SCHED_VIRTUAL_MAX_DEPTH 48
cn_status cn_sched_virtual(cn_ctx *ctx, cn_ll_proc *proc, bool keep_fusable);
/* Fill forwarding (fill.c): a clear of a buffer to a constant, followed by a nest whose first
 * store writes each cell once, becomes that store reading the constant, and the clear goes (the
 * gradients of pointwise chains). Runs before the virtual pass, whose producers must be the one
 * statement writing a node. */
cn_status cn_sched_fill(cn_ctx *ctx, cn_ll_proc *proc);
/* Its second half, after the GEMM plans: a +0 fill followed by a GEMM plan over every cell of
 * the filled node becomes the plan's c_zero (fill.c). */
cn_status cn_sched_fill_gemm(cn_ctx *ctx, cn_ll_proc *proc);

/* Loop order of every perfect nest (order.c), for a CPU's vectors or for a device's grid. */
cn_status cn_sched_order(cn_ctx *ctx, cn_ll_proc *proc, bool device);
/* Fusion of consecutive top-level nests where the second reads what the first wrote, cell by
 * cell (fuse.c). */
cn_status cn_sched_fuse(cn_ctx *ctx, cn_ll_proc *proc);
/* Tiling of every perfect nest whose working set exceeds the last-level cache (tile.c), for the
 * cache sizes given (bytes, > 0). */
cn_status cn_sched_tile(cn_ctx *ctx, cn_ll_proc *proc, int64_t l1_bytes, int64_t llc_bytes);
/* Parallel and vector marks of every perfect nest (marks.c); parallel_work (>= 1) is the least
 * work, in cell updates (stores run), of a loop marked parallel, by default
 * CN_SCHED_PARALLEL_WORK. */
#define CN_SCHED_PARALLEL_WORK ((int64_t)1 << 15)
cn_status cn_sched_marks(cn_ctx *ctx, cn_ll_proc *proc, int64_t parallel_work, bool grid);
/* Unroll-and-jam of one outer loop into the innermost loop of every separable perfect nest large
 * enough (jam.c); runs after the marks, which the copied loops keep. */
cn_status cn_sched_jam(cn_ctx *ctx, cn_ll_proc *proc);

#endif
