/* Internals of the generated-C backend shared by its source files: cgen_emit.c (the
 * dialect-neutral emitter: identifiers, cell offsets, expressions, statements, steered by a
 * cn_cgen_dialect), cgen.c (host C: the dialect, routines, parallel outlining onto the pool,
 * kernels, pieces), cgen_prelude.c (the numeric prelude pruned to what a file uses),
 * cgen_gemm.c (GEMM-class nests run by their plans as packed, cache-blocked, register-tiled code)
 * and cgen_reduce.c (max reductions without order, sums in lanes). Not a public interface. */
#ifndef CN_CGEN_H
#define CN_CGEN_H

#include "backend/backend.h"

/* The outlining of parallel loops (see "Parallel loops"): mutable state shared by the cgen
 * copies that write a function (the routine's or a kernel's) and its outlined loops. The
 * environment of an outlined loop is the enclosing function's parameters: `params` (positions in
 * the procedure's list, stored into when `writes`) and `statics`, plus the loop variables in
 * `scope`. */
typedef struct {
  cn_sbuf outlined; /* the outlined functions not yet emitted: they go before their user */
  int count;        /* outlined so far in the routine: the next function is cn_body_<count> */
  cn_symbol *scope; /* the loop variables enclosing the statement being emitted */
  int n_scope;      /* at most the number of symbols the procedure names */
  bool inside;      /* emitting an outlined body: inner parallel marks run sequentially */
  const int *params;
  const bool *writes;
  int n_params;
  const cn_symbol *statics;
  int n_statics;
  /* The parts of the GEMM preamble (cgen_gemm.c) already in the text: GEMM_* bits. */
  unsigned gemm_emitted;
  /* Where the GEMM preamble goes: NULL, into `outlined` before its first user; a routine of
   * kernels compiled in pieces keeps it apart, ahead of every piece (cgen.c). */
  cn_sbuf *gemm_preamble;
} cgen_par;

typedef struct cgen cgen;

/* What differs between the C dialects the emitter (cgen_emit.c) writes — host C11 now; OpenCL C
 * and CUDA C are further instances with their own kernel and launch modules — at the level of
 * names, types, expressions and statements. The emitter spells nothing of these itself. */
typedef struct {
  const char *keywords;           /* the language's reserved words, space-separated */
  const char *index_type;         /* loop variables, static indices, bounds: "int64_t" */
  const char *const_qualifier;    /* on a buffer no statement writes: "const " */
  const char *restrict_qualifier; /* on buffer parameters, which never alias: "restrict " */
  const char *vector_pragma;      /* the line before a vector-marked loop; NULL: none */
  const cn_prec_info *precs;      /* per precision: its storage and compute type names */
  /* The numeric layer's spellings (src/numeric): conversions, loads, stores, constants and the
   * ops' templates (math functions, select, UB-free integer ops). */
  void (*convert)(cn_sbuf *sb, cn_prec from, cn_prec to, const char *expr);
  void (*load)(cn_sbuf *sb, cn_prec prec, const char *cell);
  void (*store)(cn_sbuf *sb, cn_prec prec, const char *cell, const char *value);
  void (*constant)(cn_sbuf *sb, cn_prec prec, cn_value v);
  void (*op)(cn_sbuf *sb, cn_op op, cn_prec prec, const char *const *args);
  /* How a parallel-marked loop runs, outside an outlined body (host C: outlined onto the pool),
   * and a CN_LL_GEMM statement (host C: the packed plan of cgen_gemm.c). */
  void (*parallel_loop)(const cgen *g, int depth, const cn_ll_stmt *s);
  void (*gemm)(const cgen *g, int depth, const cn_ll_stmt *s);
  /* The prelude that `body`, the rest of the file, needs, appended to out. */
  cn_status (*prelude)(cn_ctx *ctx, cn_sbuf *out, const cn_sbuf *body);
  /* A kernel dialect (kernels.h: OpenCL C, CUDA C) sets these three; the host instance leaves
   * them NULL. The text before a kernel's name ("__kernel void " / "extern \"C\" __global__
   * void "), the qualifier on its buffer pointer parameters ("__global " / ""), and the
   * expression of the linear global id as a 64-bit integer ("(long)get_global_id(0)"). */
  const char *kernel_prefix;
  const char *global_qualifier;
  const char *linear_id;
  /* For the tiled GEMM kernels (kernels.c "Tiled GEMM kernels"): the qualifier of an array a
   * work-group shares ("__local " / "__shared__ "), the statement that waits for every work item
   * of the group and makes its local stores visible ("barrier(CLK_LOCAL_MEM_FENCE);" /
   * "__syncthreads();"), and the line before a loop of constant trip count to unroll. */
  const char *local_qualifier;
  const char *barrier;
  const char *unroll_pragma;
} cn_cgen_dialect;

/* An access printed as other text (cgen.aliases): every access to `param` whose index array is
 * `idx` (any when idx is NULL) is `text`, a cell of the kernel's own (a register, local memory). */
typedef struct {
  int param;
  const cn_index *idx;
  const char *text;
} cn_cgen_alias;

struct cgen {
  const cn_cgen_dialect *dialect;
  cn_ctx *ctx;
  const cn_ll_proc *proc;
  cgen_par *par; /* NULL: no loop is outlined (no parallel mark in the function emitted) */
  cn_sbuf *out;
  const char **param_names;        /* per param */
  int64_t (*strides)[CN_MAX_RANK]; /* per param: padded row-major strides */
  cn_ll_symbols symbols;           /* the symbols the procedure names */
  const char **sym_names;          /* per position in `symbols` (see sym_name) */
  bool *written;                   /* per param: some statement stores into it */
  bool *accessed;                  /* per param: some statement reads or stores it */
  /* Inside a CN_LL_FLAT pair run as one loop (emit_flat): the outer loop, whose variable is not
   * declared and whose terms are dropped from offsets; NULL elsewhere. */
  const cn_ll_stmt *flat_outer;
  /* The store of a max reduction (cgen_reduce.c) being emitted as key updates, and whether the
   * loop being emitted is such a reduction's loop as written (not recognized again). */
  const cn_ll_stmt *max_keyed;
  bool max_as_written;
  /* Inside the nest of a CN_LL_GEMM whose plan says fma, emitted as plain loops (a kernel
   * dialect): its store c + x * y is one fused multiply-add (emit_set). */
  bool fused;
  /* Inside a tiled GEMM kernel: the store's accesses read and write the kernel's registers, not
   * their buffers (the first alias that matches an access is its text). */
  int n_aliases;
  const cn_cgen_alias *aliases;
};

/* Around the generated driver of a GEMM the GEMM library runs (cgen_gemm.c): compiled with
 * -DCN_STANDALONE only; cgen.c weighs the pieces of a routine without it. */
#define CGEN_STANDALONE_OPEN "#if defined(CN_STANDALONE) /* the generated driver */\n"
#define CGEN_STANDALONE_ELSE "#else /* cannl's GEMM library */\n"

/* cgen_par.gemm_emitted: the common part, the vector types of float and double, the pointer to
 * the GEMM library (backend/gemm_lib.h), and the rounding of each narrow precision p
 * (GEMM_ROUND << p). */
enum {
  GEMM_COMMON = 1u << 0,
  GEMM_F32 = 1u << 1,
  GEMM_F64 = 1u << 2,
  GEMM_LIB = 1u << 3,
  GEMM_ROUND = 1u << 4
};

/* The number of pieces a generated source is compiled in: N > 1 when the text defines
 * CN_PIECES N (a routine of kernels large enough, cgen.c "Routines in pieces"), each piece k the
 * file compiled with -DCN_PIECE=k and the objects linked together; 1 otherwise. */
int cn_cgen_pieces(const char *source);
#define CN_CGEN_MAX_PIECES 8

/* The text a builder holds so far ("" before any). */
static inline const char *cn_cgen_text(const cn_sbuf *sb) {
  return sb->data ? sb->data : "";
}
/* Marks the params the procedure accesses and writes, collects its symbols and names the params
 * and symbols (cgen_emit.c "Identifiers"): the emitter's tables, filled before any text. */
cn_status cn_cgen_names(cgen *g);
/* A generator of proc in `dialect` writing to out: its tables allocated in the arena (strides,
 * names: cn_cgen_names), no outlining (g->par NULL). */
cn_status cn_cgen_init(cgen *g, cn_ctx *ctx, const cn_ll_proc *proc, const cn_cgen_dialect *dialect,
                       cn_sbuf *out);
/* Marks true, in accessed and written (per param), the params statement s reads or writes and
 * those it writes. */
void cn_cgen_access(const cgen *g, const cn_ll_stmt *s, bool *accessed, bool *written);
/* The name a symbol of the procedure has in the generated text, and its position in g->symbols. */
const char *cn_cgen_sym_name(const cgen *g, cn_symbol sym);
int cn_cgen_sym_slot(const cgen *g, cn_symbol sym);
/* A comment statement's text made inert, on one line. */
void cn_cgen_comment(cn_sbuf *sb, const char *text);
/* One side of a loop's range (the box's edge, a bound, or bounds combined by `combine`). */
void cn_cgen_range_side(const cgen *g, int64_t edge, int n, const cn_ll_bound *bounds,
                        const char *combine);
/* The body of loop s at depth + 1, its variable in the outlining's scope. */
void cn_cgen_loop_body(const cgen *g, int depth, const cn_ll_stmt *s);
/* The type of a buffer, without restrict: "const float *" unless `written`. */
void cn_cgen_buffer_type(const cgen *g, cn_sbuf *sb, int param, bool written);
/* "&buf[offset]" of the cell the access reaches when each of the n_loops loops (CN_LL_FOR) runs
 * its box's first value: where a GEMM's operand starts. */
void cn_cgen_base_cell(const cgen *g, cn_sbuf *sb, int param, const cn_index *idx,
                       const cn_ll_stmt *const *loops, int n_loops);
/* "buf[offset]" of a cell, and an expression converted to precision `to` (cgen_emit.c). */
void cn_cgen_cell(const cgen *g, cn_sbuf *sb, int param, const cn_index *idx);
void cn_cgen_value(const cgen *g, cn_sbuf *sb, const cn_ll_expr *e, cn_prec to);
/* Max reductions without order (cgen_reduce.c): when the loop's whole body is the store
 * `c := max(c, v)` of a reduction it may run without order, emits it as a block (the key and NaN
 * accumulators, the loop with its body as key updates by cn_cgen_max_update, the loop as written
 * when a NaN occurred, else the key's store) and returns true; else false and emits nothing. */
bool cn_cgen_max_reduction(const cgen *g, int depth, const cn_ll_stmt *loop);
void cn_cgen_max_update(const cgen *g, int depth, const cn_ll_stmt *set);
/* A sum in lanes (loops.h CN_LL_LANES, cgen_reduce.c): when the loop has the mark, emits it as
 * loops.h defines it and returns true; else false and emits nothing. */
bool cn_cgen_sum_lanes(const cgen *g, int depth, const cn_ll_stmt *loop);
/* The part of a kernel (a kernel dialect) in which a work-group of CN_LL_LANES_COUNT work items
 * computes the sum in lanes `loop` (a CN_LL_FOR with CN_LL_LANES), the enclosing loops' variables
 * and `cn_lane_id` (the work item's index in its group) declared: work item cn_lane_id holds lane
 * cn_lane_id, its values in order, the fold runs in local memory between barriers, work item 0
 * stores the cell: the bits of loops.h's definition. */
void cn_cgen_lanes_group(const cgen *g, int depth, const cn_ll_stmt *loop);
/* The same for a max reduction the emitter runs without order (cn_ll_reduction_store with
 * CN_OP_MAX): each work item keeps the keys' maximum and the NaN bits of its lane's values (its
 * steps cn_lane_id, + CN_LL_LANES_COUNT, ...), the group folds them, and work item 0 stores the
 * cell from the key or, when a value or the cell was a NaN, runs the loop as written: the bits of
 * the loop as written, whatever the option "reduce". */
void cn_cgen_max_group(const cgen *g, int depth, const cn_ll_stmt *loop);
/* The prelude's kept lines and the items of builtins.h that `body` (the rest of a generated file)
 * needs, in order, appended to out (cgen_prelude.c), with <tgmath.h> or <math.h> only when a
 * name of cn_cgen_is_math_name (cgen_emit.c: <math.h>, <complex.h>, <tgmath.h>) occurs. */
bool cn_cgen_is_math_name(const char *name);
cn_status cn_cgen_prelude(cn_ctx *ctx, cn_sbuf *out, const cn_sbuf *body);
/* The same items without the #include lines when `includes` is false: for a language whose
 * dialect supplies <stdint.h>'s and <math.h>'s names itself (OpenCL C's prelude header). */
cn_status cn_cgen_prelude_items(cn_ctx *ctx, cn_sbuf *out, const cn_sbuf *body, bool includes);
/* A statement at depth (cgen_emit.c). */
void cn_cgen_stmt(const cgen *g, int depth, const cn_ll_stmt *s);
/* A CN_LL_GEMM statement (cgen_gemm.c): a call at its place of a function, emitted before the
 * function using it (in the outlined text, g->par), that runs the plan; without g->par (the text
 * of a kernel's key, which is never compiled) the plan and the nest, which identify it. */
void cn_cgen_gemm(const cgen *g, int depth, const cn_ll_stmt *s);

#endif
