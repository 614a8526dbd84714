/* The loop IR: nested for-loops, cell writes and scalar expressions (contraction-is-emergent "What
 * we compile to", after the projections are spent), the lowering from assignments, and
 * simplification.
 *
 * Invariants: a loop runs its variable over [start, end): start is the largest of its `lower`
 * bounds and end the smallest of its `upper` bounds, each bound ceil(expr / div) with expr affine
 * over outer loop variables and free symbols (never the loop's own variable nor an inner one) and
 * div >= 1; without lower bounds start is `from`, without upper bounds end is `to`; start >= end
 * runs nothing. The constant box [from, to) contains every value the loop runs (whoever adds bounds
 * keeps that, listing the box's constant among the bounds unless the affine ones provably stay
 * inside it), so readers that reason about ranges may use the box as an over-approximation. A guard
 * (CN_LL_IF) is a conjunction of affine conditions `lo <= index < hi` with constant lo, hi, and its
 * body runs exactly when all of them hold (the lowering puts them where Tile's valid index sets,
 * tile-edsl, need them, and the simplifier turns those it can into loop bounds, so a cell access
 * under a guard or in a bounded loop may be out of range for the points skipped, never for the
 * points run); every cell access names its buffer and one canonical cn_index per axis of the node,
 * in logical coordinates (the padding offset is added by the backends); every expression carries
 * the precision it is computed in, and operands of another precision are converted where they are
 * used (backends apply cn_value_convert / cn_conv_c); a procedure lists every buffer it touches as
 * a parameter, so backends need no knowledge of nodes beyond dims, padding and precision. IR is
 * built only through the cn_lb_* constructors below (build.c): the lowering, the simplifier and the
 * tests do, and passes and backends that add IR should too. Lower stages (backends) include this
 * header; this header never includes a backend. */
#ifndef CN_LOOPS_H
#define CN_LOOPS_H

#include "ir/ir.h"

typedef enum {
  CN_LE_GET,   /* a cell of a buffer */
  CN_LE_CONST, /* a constant, already a value of prec */
  CN_LE_INDEX, /* the value of an index expression (Embed_index), prec is the index prec */
  CN_LE_OP,    /* a primitive op over 1-3 arguments */
} cn_le_kind;

/* The precision of embedded indices (ocannl-notes §7.2: uint32, so that conversion to uint4x32
 * spreads the bits). */
#define CN_INDEX_PREC CN_PREC_UINT32

typedef struct cn_ll_expr cn_ll_expr;
struct cn_ll_expr {
  cn_le_kind kind;
  cn_prec prec; /* the precision the value is computed in */
  union {
    struct {
      int param;     /* index into the procedure's params */
      cn_index *idx; /* rank of the node */
    } get;
    cn_value constant;
    cn_index index;
    struct {
      cn_op op;
      cn_ll_expr *args[3];
    } op;
  } u;
};

typedef enum {
  CN_LL_SEQ,
  CN_LL_COMMENT,
  CN_LL_FOR,
  CN_LL_IF,
  CN_LL_SET,
  CN_LL_SET_VEC,
  CN_LL_GEMM, /* a GEMM-class nest with its plan (cn_ll_gemm) */
  CN_LL_LET,  /* a symbol bound to a cell's value, with its range check (an index-valued
                 projection's gathered symbol, ir.h cn_proj_gathered) */
} cn_ll_kind;

/* One condition of a guard: lo <= expr < hi, expr over loop variables and free symbols. */
typedef struct {
  cn_index expr;
  int64_t lo, hi;
} cn_ll_cond;

/* One affine loop bound: ceil(expr / div), expr over outer loop variables and free symbols.
 * A lower bound is the first value run (v >= ceil(expr / div)), an upper bound the first value
 * not run (v < ceil(expr / div)); with div 1 both are plain affine expressions. Upper bounds are
 * exclusive ceilings so that `lo <= a*v + r < hi` with a > 0 reads directly as
 * v in [ceil((lo - r) / a), ceil((hi - r) / a)). */
typedef struct {
  cn_index expr;
  int64_t div; /* >= 1 */
} cn_ll_bound;

/* Schedule marks of a FOR loop (set by the scheduling stage, src/sched; 0 from the lowering).
 * They are promises about the loop that let a backend run it faster without changing a bit of
 * its results; a backend may ignore them:
 *   CN_LL_PARALLEL  its iterations are independent (no two write the same cell, none reads a cell
 *                   another writes): they may run on several threads, each iteration whole;
 *   CN_LL_VECTOR    an innermost loop whose iterations are independent and whose accesses walk
 *                   memory with stride 0 or 1: it may run as SIMD lanes (no reassociation);
 *   CN_LL_FLAT      a loop from 0 without affine bounds whose whole body is one such loop from 0
 *                   (the inner), every access of which advances by the inner's extent times its
 *                   inner stride when the outer variable moves by one (the two walk the buffers
 *                   as one contiguous range), and whose body reads neither variable otherwise
 *                   (no guard, no embedded index): the pair may run as one loop over the product
 *                   of the extents, every access at (inner stride) * (flat position). */
enum { CN_LL_PARALLEL = 1u << 0, CN_LL_VECTOR = 1u << 1, CN_LL_FLAT = 1u << 2 };

/* A sum in lanes (the routine option "reduce" = "lanes", set by cn_ll_sum_lanes before the
 * scheduling stage). Unlike the marks above it changes what the loop computes, so every backend
 * must honour it. CN_LL_LANES goes on a loop without affine bounds, of at least CN_LL_LANES_MIN
 * iterations, whose whole body is the store `c := c + v` (cn_ll_lanes_store): c a single or double
 * cell its variable does not index, the add in c's precision, v not reading c's buffer. The loop
 * then means: CN_LL_LANES_COUNT lanes s[l] start at -0 (the neutral of +, signed zeros kept);
 * the iterations run in order, the k-th (k = 0 at the loop's start) doing s[l] := s[l] + v with
 * l = k % CN_LL_LANES_COUNT; then the halves fold, for w = CN_LL_LANES_COUNT / 2 down to 1: s[l] :=
 * s[l] + s[l + w] for l < w; then c := c + s[0]. Every add is rounded to c's precision. The result
 * is one function of the values, as the loop as written is, but another one: the same bits on every
 * backend, thread count, tile and device (the lanes are not the threads), and within the usual
 * error of a sum of n terms of the loop's (lanes and a pairwise fold have a smaller bound). The
 * scheduling passes leave a nest with such a loop as it is (no plan, order, fusion, tile or jam)
 * except for the marks of its other loops. */
enum { CN_LL_LANES = 1u << 3 };
#define CN_LL_LANES_COUNT 256
#define CN_LL_LANES_MIN   1024

/* The groups of the loops of a GEMM-class nest (src/sched/gemm.c): rows (the output and the first
 * operand), columns (the output and the second), the reduction (both operands), batch (all). */
typedef enum { CN_GEMM_M, CN_GEMM_N, CN_GEMM_K, CN_GEMM_BATCH } cn_gemm_role;
/* The triangles a plan takes (cn_ll_gemm.tri): which loop is bounded by which. */
typedef enum { CN_GEMM_TRI_NONE, CN_GEMM_TRI_N, CN_GEMM_TRI_K, CN_GEMM_TRI_M } cn_gemm_tri;
#define CN_GEMM_ROLES     4
#define CN_GEMM_MAX_LOOPS 16

/* How a backend may run a GEMM-class nest (CN_LL_GEMM, made by the scheduling stage): the nest
 * is a perfect nest of loops without affine bounds (but a triangle's, below) over the one store
 * c[w] := c[w] + x[p] * y[q] (one floating precision, c distinct from x and y), every loop in one
 * group (role, outermost first). Its meaning: every cell of c gets the updates of its points in the
 * order of the K loops (the nest's order, outer to inner), each update either c + x * y with the
 * product and the sum rounded apart (exact: what the nest says, bit for bit) or one fused
 * multiply-add, rounded once (fma) in the precision's compute type; a narrow precision (half,
 * bfloat16, fp8, computed in float) then rounds each update to itself, as the nest's store does,
 * and its operands are converted to float once, when a backend packs them (exactly: every narrow
 * value is a float). Either way a cell's value is one function of its operands, whatever tiles,
 * cache blocks, packing or threads a backend uses: they may only reorder work across cells. The
 * sizes are advice to a backend that tiles: a register tile of mr rows by nv vectors of columns (0:
 * the backend's default for the instruction set it compiles for) and cache blocks of mc rows, kc
 * reduction steps and nc columns. */
typedef struct {
  int c, x, y; /* params: the accumulated output, the first and the second operand */
  int depth;
  cn_gemm_role role[CN_GEMM_MAX_LOOPS];
  /* A triangle (a causal mask, Tile's `k <= q`): one loop of the nest has the one upper bound
   * `loop < other + tri_offset`, both loops from 0, the groups concerned one loop each, no other
   * loop bounded. CN_GEMM_TRI_N: the N loop below the M loop, a triangle of cells (attention's
   * scores): the cells past it are not the nest's, a backend never writes them. CN_GEMM_TRI_K:
   * the K loop below the M loop (P V: row m sums the steps k < m + offset); CN_GEMM_TRI_M: the M
   * loop below the K loop (the gradients of V and K: row m sums the steps k > m - offset).
   * Either way a cell sums its own steps in ascending order, the others' never. */
  cn_gemm_tri tri;
  int64_t tri_offset;
  /* c is all +0 before the nest (the fill pass took the clear that preceded it, sched/fill.c):
   * the first reduction step starts from +0 instead of reading c, the same bits; a backend that
   * reads c must clear it first. Never with tri (the cells past the triangle keep the clear). */
  bool c_zero;
  bool fma;
  bool parallel; /* enough work to split its blocks of cells across threads */
  int mr, nv;
  int64_t mc, kc, nc;
} cn_ll_gemm;

typedef struct cn_ll_stmt cn_ll_stmt;
struct cn_ll_stmt {
  cn_ll_kind kind;
  union {
    struct {
      int count;
      cn_ll_stmt **items;
    } seq;
    const char *comment;
    struct {
      cn_symbol sym;
      int64_t from, to;     /* the box: from inclusive, to exclusive */
      int n_lower, n_upper; /* 0: the box's side is the bound */
      cn_ll_bound *lower, *upper;
      cn_ll_stmt *body;
      unsigned marks; /* CN_LL_PARALLEL | CN_LL_VECTOR */
    } loop;
    struct {
      int n_conds; /* >= 1 after lowering; the simplifier removes a guard left without one */
      cn_ll_cond *conds;
      cn_ll_stmt *body; /* run when every condition holds */
    } guard;
    struct {
      int param;
      cn_index *idx;
      cn_ll_expr *value; /* converted to the node's precision on store */
    } set;
    struct {
      cn_op op; /* a CN_OPF_VEC op */
      int param;
      cn_index *idx; /* the first of `length` row-major cells */
      int length;
      cn_ll_expr *arg; /* uint4x32 */
    } vec;
    struct {
      cn_ll_stmt *nest; /* the outermost CN_LL_FOR of the nest the plan describes */
      const cn_ll_gemm *plan;
    } gemm;
    /* sym := the cell of param at idx converted to int64 (cn_value_convert: a float truncated and
     * saturated, NaN 0; a uint64 past INT64_MAX wraps negative); body runs with sym bound only when
     * 0 <= sym < bound, so an index outside the table it addresses skips its point and no access of
     * body goes out of range. sym is bound nowhere else (not a loop variable, not free) and read
     * only inside body; it varies from one iteration of an enclosing loop to the next, unlike a
     * free symbol. */
    struct {
      cn_symbol sym;
      int param;
      cn_index *idx;
      int64_t bound;
      cn_ll_stmt *body;
    } let;
  } u;
};

/* A buffer the procedure reads or writes; nodes with CN_MEM_LOCAL, and CN_MEM_VIRTUAL ones the
 * schedule did not inline, are scratch (the routine supplies a private buffer), the others are the
 * nodes' own buffers. */
typedef struct {
  cn_node *node;
  bool merge;
} cn_ll_param;

typedef struct {
  const char *name; /* a C identifier */
  cn_ll_stmt *body;
  int n_params;
  cn_ll_param *params; /* ordered by node id, value before merge */
  int n_free_syms;
  cn_symbol *free_syms; /* static indices read (not loop variables), ascending */
} cn_ll_proc;

/* ---- Constructors (src/loops/build.c): the only way loop IR is built ----
 *
 * Every node and array lives in the context arena. A constructor returns NULL when an allocation
 * fails (CN_ERR_NOMEM recorded in the context) and also when a child it is given is NULL, so a
 * caller may build a whole tree and check once, at the root. Arrays of children, conditions,
 * bounds, parameters and symbols are copied; index arrays (cn_index *) are referenced, because
 * accesses share them (a read-modify-write reads and writes through one map, the lowering uses
 * the projections record's maps): build them with cn_lb_indices or cn_lb_index_array, whose
 * result is never NULL on success, even for rank 0. The constructors check nothing the lowering
 * has not validated (params, ranks and precisions are the caller's), except an op's arity. */

/* An index array of `rank` cn_index arguments (variadic), or a copy of `idx`. */
cn_index *cn_lb_indices(cn_ctx *ctx, int rank, ...);
cn_index *cn_lb_index_array(cn_ctx *ctx, int rank, const cn_index *idx);

/* The cell of param `param` at idx, read in prec (the node's precision). */
cn_ll_expr *cn_lb_get(cn_ctx *ctx, int param, cn_prec prec, cn_index *idx);
/* A constant, already a value of prec; cn_lb_num converts x by cn_value_of_double. */
cn_ll_expr *cn_lb_const(cn_ctx *ctx, cn_prec prec, cn_value value);
cn_ll_expr *cn_lb_num(cn_ctx *ctx, cn_prec prec, double x);
/* The value of an index expression, in CN_INDEX_PREC. */
cn_ll_expr *cn_lb_index(cn_ctx *ctx, cn_index index);
/* op computed in prec over its cn_op_arity(op) first arguments; the others must be NULL. */
cn_ll_expr *cn_lb_op(cn_ctx *ctx, cn_op op, cn_prec prec, cn_ll_expr *a, cn_ll_expr *b,
                     cn_ll_expr *c);

/* param[idx] := value (converted to the node's precision on store). */
cn_ll_stmt *cn_lb_set(cn_ctx *ctx, int param, cn_index *idx, cn_ll_expr *value);
/* The accumulation param[idx] := param[idx] accum value, computed in prec (the node's). */
cn_ll_stmt *cn_lb_accum(cn_ctx *ctx, int param, cn_prec prec, cn_index *idx, cn_op accum,
                        cn_ll_expr *value);
/* `length` row-major cells of param from idx on := op(arg), op a CN_OPF_VEC op. */
cn_ll_stmt *cn_lb_set_vec(cn_ctx *ctx, cn_op op, int param, cn_index *idx, int length,
                          cn_ll_expr *arg);
/* A GEMM-class nest run by its plan (copied); nest is referenced. */
cn_ll_stmt *cn_lb_gemm(cn_ctx *ctx, cn_ll_stmt *nest, const cn_ll_gemm *plan);
/* The parts of a CN_LL_GEMM statement's nest: its loops, outermost first (plan->depth of them),
 * and its accesses, c's write then x's and y's reads (param and index array of each). */
typedef struct {
  const cn_ll_stmt *loops[CN_GEMM_MAX_LOOPS];
  int param[3];
  const cn_index *idx[3];
} cn_ll_gemm_parts;
void cn_ll_gemm_parts_of(const cn_ll_stmt *gemm, cn_ll_gemm_parts *out);
/* A comment; text is referenced (static or arena), NULL propagates. */
cn_ll_stmt *cn_lb_comment(cn_ctx *ctx, const char *text);
/* for sym in [from, to): body — the box, no affine bounds. */
cn_ll_stmt *cn_lb_loop(cn_ctx *ctx, cn_symbol sym, int64_t from, int64_t to, cn_ll_stmt *body);
/* Replaces the affine bounds of a loop (loops.h's invariant on the box is the caller's); returns
 * the loop. */
cn_ll_stmt *cn_lb_bounds(cn_ctx *ctx, cn_ll_stmt *loop, int n_lower, const cn_ll_bound *lower,
                         int n_upper, const cn_ll_bound *upper);
/* Sets the schedule marks of a loop (CN_LL_PARALLEL | CN_LL_VECTOR: the scheduling stage's
 * promises, whose truth is the caller's); returns the loop, NULL for NULL. */
cn_ll_stmt *cn_lb_marks(cn_ll_stmt *loop, unsigned marks);
/* if every condition holds: body (n_conds >= 1). */
cn_ll_stmt *cn_lb_guard(cn_ctx *ctx, int n_conds, const cn_ll_cond *conds, cn_ll_stmt *body);
/* let sym := param[idx] in [0, bound): body (loops.h CN_LL_LET). */
cn_ll_stmt *cn_lb_let(cn_ctx *ctx, cn_symbol sym, int param, cn_index *idx, int64_t bound,
                      cn_ll_stmt *body);
/* A sequence of `count` statements (variadic), or of the array items. */
cn_ll_stmt *cn_lb_seq(cn_ctx *ctx, int count, ...);
cn_ll_stmt *cn_lb_seq_array(cn_ctx *ctx, int count, cn_ll_stmt *const *items);
/* A procedure; name is copied (a C identifier), free_syms ascending (cn_ll_proc). */
cn_ll_proc *cn_lb_proc(cn_ctx *ctx, const char *name, cn_ll_stmt *body, int n_params,
                       const cn_ll_param *params, int n_free_syms, const cn_symbol *free_syms);

/* The symbols a procedure names — its loop variables, every symbol its indices, bounds and guards
 * read, its free symbols — ascending and without repeats (src/loops/symbols.c). A stage keeps its
 * per-symbol tables at the positions of this list (cn_ll_symbol_slot), so they are as large as the
 * routine, where tables indexed by symbol would be as large as the context, whose symbols grow
 * with every operation built: each routine compiled would then cost a pass over all of them. */
typedef struct {
  int n;
  cn_symbol *syms; /* arena */
} cn_ll_symbols;
cn_status cn_ll_symbols_of(cn_ctx *ctx, const cn_ll_proc *proc, cn_ll_symbols *out);
/* The position of sym in the list (binary search); -1 when the procedure does not name it. */
int cn_ll_symbol_slot(const cn_ll_symbols *symbols, cn_symbol sym);

/* The store `c := op(c, v)` when it is the whole body of `loop` and a reduction of one cell: c a
 * single or double cell its variable does not index, op computed in c's precision, v not reading
 * c's buffer; else NULL (src/loops/lanes.c; op CN_OP_MAX: generated C's max without order). */
const cn_ll_stmt *cn_ll_reduction_store(const cn_ll_proc *proc, const cn_ll_stmt *loop, cn_op op);
/* cn_ll_reduction_store for a loop without affine bounds of at least CN_LL_LANES_MIN iterations
 * (a reduction long enough for lanes), else NULL. */
const cn_ll_stmt *cn_ll_long_reduction_store(const cn_ll_proc *proc, const cn_ll_stmt *loop,
                                             cn_op op);
/* The store `c := c + v` that makes `loop` a sum CN_LL_LANES may go on (its whole body; see
 * there), or NULL (src/loops/lanes.c). */
const cn_ll_stmt *cn_ll_lanes_store(const cn_ll_proc *proc, const cn_ll_stmt *loop);
/* Marks CN_LL_LANES on every loop of proc that cn_ll_lanes_store takes, in place (the option
 * "reduce" = "lanes"). */
void cn_ll_sum_lanes(cn_ll_proc *proc);

/* Lowers an (already validated) assignments tree. name must pass cn_is_c_name. */
cn_status cn_ll_lower(cn_ctx *ctx, const cn_asgn *asgn, const char *name, cn_ll_proc **out);
/* Constant folding and algebraic identities (x+0, 0+x, x-0, x*1, 1*x, x/1), guard conditions
 * decided by the ranges of loop variables and static indices (always true: dropped; always false:
 * the guard with its body), and guard conditions turned into affine bounds of the loop of their
 * innermost variable when everything that loop runs is under the guard, in place. */
cn_status cn_ll_simplify(cn_ctx *ctx, cn_ll_proc *proc);
/* Readable text of the procedure (arena-owned). */
const char *cn_ll_to_string(cn_ctx *ctx, const cn_ll_proc *proc);

#endif
