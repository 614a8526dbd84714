/* Host C from the loop IR: the host-C dialect (cn_cgen_dialect, read by the emitter of
 * cgen_emit.c) and the modules that lay out a translation unit for the host. One loop-IR
 * procedure becomes a C11 translation unit with the numeric prelude (builtins.h), a static
 * function doing the work and an exported entry point taking the buffers and free-symbol values
 * as arrays. A long procedure instead gets one function per distinct top-level statement
 * (kernels, shared by the statements that differ only in the buffers and static indices they
 * name) and steps calling them in order, so that the C compiler's time stays linear in the
 * routine (see "Routines as kernels"); a large one is compiled in pieces ("Routines in pieces").
 * Parallel loops are outlined into functions the runtime's pool runs ("Parallel loops").
 *
 * The text is deterministic (it doubles as the compile-cache key and as the golden text of
 * tests); the identifiers, offsets, expressions and statements keep cgen_emit.c's invariants. The
 * routine's name (a C name, cn_is_c_name) is only ever spelled with a suffix (NAME_body,
 * NAME_entry), so no name of the C library can clash with it; the names this file adds (cn_par,
 * cn_env, cn_body_<k>, cn_buffers, ...) carry the "cn_" prefix, never given to user names. */
#include "backend/cgen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Parallel loops ----
 * A CN_LL_PARALLEL loop (iterations independent, loops.h) becomes a static function
 * cn_body_<k>(env, lo, hi) running iterations [from + lo, from + hi) of it (through
 * cn_range_<k>, which has the body's text unchanged), and at its place a call through the
 * per-call cn_par_t (the runtime's pool, passed to the entry point and down to the function
 * holding the loop: never a global, since two contexts may load one object) over [0, to - from),
 * or a direct call over all of it without a pool. The loop is in the routine's function (a short
 * routine) or in a kernel (a routine of kernels, see "Routines as kernels"); the environment
 * struct cn_env_<k> carries that function's parameters — the routine's buffers and free symbols,
 * or the kernel's buffers and static indices — and the enclosing loop variables, which
 * cn_range_<k> takes as parameters under their names there (restrict buffers included), so the
 * body reads them as the function does. Outlined functions are numbered in the order of the
 * routine's text and emitted before the function using them. Each iteration runs whole on one
 * thread, in the scalar order: a cell gets the same sequence of stores for any thread count.
 * Parallel marks inside an outlined body run sequentially (one level of threads). */

/* Whether some loop of `s` carries `mark`. */
static bool has_mark(const cn_ll_stmt *s, unsigned mark) {
  switch (s->kind) {
  case CN_LL_SEQ:
    for (int i = 0; i < s->u.seq.count; i++)
      if (has_mark(s->u.seq.items[i], mark)) return true;
    return false;
  case CN_LL_FOR: return (s->u.loop.marks & mark) || has_mark(s->u.loop.body, mark);
  case CN_LL_IF: return has_mark(s->u.guard.body, mark);
  case CN_LL_LET: return has_mark(s->u.let.body, mark);
  case CN_LL_GEMM: /* its function goes to the outlined text and may run on the pool */
    return mark == CN_LL_PARALLEL;
  case CN_LL_COMMENT:
  case CN_LL_SET:
  case CN_LL_SET_VEC: return false;
  }
  return false;
}

/* The environment's entry types are the enclosing function's parameter types, constness
 * included (a kernel may only read a buffer the routine writes elsewhere), so copying a
 * parameter into the struct and back never drops a qualifier. */
typedef void env_entry_fn(const cgen *g, cn_sbuf *sb, int param, bool written, const char *name);

/* Calls fn(g, sb, param, written, name) for every entry of the environment: the buffers (param
 * their position in the procedure), then the static indices and the enclosing loop variables
 * (param -1: an int64_t). */
static void each_env_entry(const cgen *g, cn_sbuf *sb, env_entry_fn *fn) {
  const cgen_par *par = g->par;
  for (int k = 0; k < par->n_params; k++)
    fn(g, sb, par->params[k], par->writes[k], g->param_names[par->params[k]]);
  for (int i = 0; i < par->n_statics; i++)
    fn(g, sb, -1, false, cn_cgen_sym_name(g, par->statics[i]));
  for (int i = 0; i < par->n_scope; i++) fn(g, sb, -1, false, cn_cgen_sym_name(g, par->scope[i]));
}

/* A member of the struct cn_env_<k>. */
static void env_field(const cgen *g, cn_sbuf *sb, int param, bool written, const char *name) {
  cn_sbuf_puts(sb, "  ");
  if (param >= 0)
    cn_cgen_buffer_type(g, sb, param, written);
  else
    cn_sbuf_puts(sb, "int64_t ");
  cn_sbuf_printf(sb, "%s;\n", name);
}

/* A parameter of the range function: restrict buffers, as the enclosing function's are. */
static void env_param(const cgen *g, cn_sbuf *sb, int param, bool written, const char *name) {
  if (param >= 0) {
    cn_cgen_buffer_type(g, sb, param, written);
    cn_sbuf_puts(sb, g->dialect->restrict_qualifier);
  } else {
    cn_sbuf_puts(sb, "int64_t ");
  }
  cn_sbuf_printf(sb, "%s, ", name);
}

/* The body may not read every entry (a short routine's environment is all of its parameters). */
static void env_unused(const cgen *g, cn_sbuf *sb, int param, bool written, const char *name) {
  (void)g;
  (void)param;
  (void)written;
  cn_sbuf_printf(sb, "  (void)%s;\n", name);
}

/* An argument of cn_body_<k>'s call of the range function: the entry saved in the struct. */
static void env_arg(const cgen *g, cn_sbuf *sb, int param, bool written, const char *name) {
  (void)g;
  (void)param;
  (void)written;
  cn_sbuf_printf(sb, "cn_env->%s, ", name);
}

/* A designated initializer of the struct at the loop's place: the entry's value there. */
static void env_init(const cgen *g, cn_sbuf *sb, int param, bool written, const char *name) {
  (void)g;
  (void)param;
  (void)written;
  cn_sbuf_printf(sb, ".%s = %s, ", name, name);
}

/* The outlined functions of loop s, appended to the outlined text: cn_range_<k> runs iterations
 * [cn_lo, cn_hi) over the environment passed as restrict parameters, and cn_body_<k>, the pool's
 * callback, unpacks the struct into a call of it. The parameters are what carry the no-alias
 * promise: gcc ignores restrict on locals loaded from a struct, and without it (a kernel's
 * restrict parameters copied into such locals) left a conv net's hottest loop unvectorized,
 * 3 times slower on one thread; inlined into cn_body_<k>, the parameters keep it. */
static void emit_outlined(const cgen *g, int k, const cn_ll_stmt *s) {
  cn_sbuf fn = {0};
  cgen h = *g;
  h.out = &fn;
  cn_sbuf_printf(&fn, "static void cn_range_%d(", k);
  each_env_entry(g, &fn, env_param);
  cn_sbuf_puts(&fn, "int64_t cn_lo, int64_t cn_hi) {\n");
  each_env_entry(g, &fn, env_unused);
  const char *var = cn_cgen_sym_name(g, s->u.loop.sym);
  cn_sbuf_printf(&fn, "  for (int64_t %s = cn_lo; %s < cn_hi; ++%s) {\n", var, var, var);
  g->par->inside = true;
  cn_cgen_loop_body(&h, 1, s);
  g->par->inside = false;
  cn_sbuf_puts(&fn, "  }\n}\n");
  cn_sbuf_printf(&fn, "struct cn_env_%d {\n", k);
  each_env_entry(g, &fn, env_field);
  cn_sbuf_puts(&fn, "  int64_t cn_from;\n};\n");
  cn_sbuf_printf(&fn, "static void cn_body_%d(void *cn_envp, int64_t cn_lo, int64_t cn_hi) {\n", k);
  cn_sbuf_printf(&fn, "  const struct cn_env_%d *cn_env = cn_envp;\n  cn_range_%d(", k, k);
  each_env_entry(g, &fn, env_arg);
  cn_sbuf_puts(&fn, "cn_env->cn_from + cn_lo, cn_env->cn_from + cn_hi);\n}\n");
  cn_sbuf_puts(&g->par->outlined, cn_cgen_text(&fn));
  if (fn.failed) g->par->outlined.failed = true;
  cn_sbuf_free(&fn);
}

static void emit_parallel(const cgen *g, int depth, const cn_ll_stmt *s) {
  cn_sbuf *sb = g->out;
  int k = g->par->count++;
  cn_sbuf_indent(sb, depth);
  cn_sbuf_puts(sb, "{ /* parallel */\n");
  cn_sbuf_indent(sb, depth + 1);
  cn_sbuf_puts(sb, "const int64_t cn_from = ");
  cn_cgen_range_side(g, s->u.loop.from, s->u.loop.n_lower, s->u.loop.lower, "cn_max_i64");
  cn_sbuf_puts(sb, ", cn_to = ");
  cn_cgen_range_side(g, s->u.loop.to, s->u.loop.n_upper, s->u.loop.upper, "cn_min_i64");
  cn_sbuf_puts(sb, ";\n");
  cn_sbuf_indent(sb, depth + 1);
  cn_sbuf_printf(sb, "struct cn_env_%d cn_env = {", k);
  each_env_entry(g, sb, env_init);
  cn_sbuf_puts(sb, ".cn_from = cn_from};\n");
  cn_sbuf_indent(sb, depth + 1);
  cn_sbuf_puts(sb, "if (cn_from < cn_to && cn_par)\n");
  cn_sbuf_indent(sb, depth + 2);
  cn_sbuf_printf(sb, "cn_par->pool_for(cn_par->pool, cn_to - cn_from, cn_body_%d, &cn_env);\n", k);
  cn_sbuf_indent(sb, depth + 1);
  cn_sbuf_puts(sb, "else if (cn_from < cn_to)\n");
  cn_sbuf_indent(sb, depth + 2);
  cn_sbuf_printf(sb, "cn_body_%d(&cn_env, 0, cn_to - cn_from);\n", k);
  cn_sbuf_indent(sb, depth);
  cn_sbuf_puts(sb, "}\n");
  emit_outlined(g, k, s);
}

/* Host C11: the C library's types and <math.h>, restrict parameters, OpenMP's simd pragma (gcc
 * and clang vectorize with -fopenmp-simd, other compilers ignore it: see cn_cgen_source), the
 * numeric layer's C spellings, parallel loops outlined onto the runtime's pool. */
static const cn_cgen_dialect host_c = {
    /* C11 keywords, plus the C23 ones and the <stdbool.h> / <stdalign.h> / <stdnoreturn.h>
     * macros, so the text stays valid for any -std the user chooses. */
    .keywords =
        "auto break case char const continue default do double else enum extern float for goto "
        "if inline int long register restrict return short signed sizeof static struct switch "
        "typedef union unsigned void volatile while bool true false alignas alignof noreturn "
        "static_assert thread_local nullptr constexpr typeof typeof_unqual asm",
    .index_type = "int64_t",
    .const_qualifier = "const ",
    .restrict_qualifier = "restrict ",
    .vector_pragma = "#pragma omp simd\n",
    .precs = cn_prec_table,
    .convert = cn_conv_c,
    .load = cn_load_c,
    .store = cn_store_c,
    .constant = cn_const_c,
    .op = cn_op_c,
    .parallel_loop = emit_parallel,
    .gemm = cn_cgen_gemm,
    .prelude = cn_cgen_prelude,
    /* not a kernel dialect: a routine is one host function (kernels.h is for devices) */
    .kernel_prefix = NULL,
    .global_qualifier = NULL,
    .linear_id = NULL,
};

/* The type of a parameter of the routine's function, const when no statement stores into it. */
static void print_param_type(const cgen *g, cn_sbuf *sb, int param) {
  cn_cgen_buffer_type(g, sb, param, g->written[param]);
}

/* The signature of the routine's function; a routine with outlined loops takes the pool too. */
static void emit_signature(const cgen *g) {
  const cn_ll_proc *proc = g->proc;
  cn_sbuf *sb = g->out;
  cn_sbuf_printf(sb, "static void %s_body(", proc->name);
  for (int k = 0; k < proc->n_params; k++) {
    if (k > 0) cn_sbuf_puts(sb, ", ");
    print_param_type(g, sb, k);
    cn_sbuf_printf(sb, "%s%s", g->dialect->restrict_qualifier, g->param_names[k]);
  }
  for (int i = 0; i < proc->n_free_syms; i++)
    cn_sbuf_printf(sb, "%sint64_t %s", proc->n_params + i > 0 ? ", " : "",
                   cn_cgen_sym_name(g, proc->free_syms[i]));
  if (g->par)
    cn_sbuf_printf(sb, "%sconst cn_par_t *cn_par", proc->n_params + proc->n_free_syms ? ", " : "");
  else if (proc->n_params + proc->n_free_syms == 0)
    cn_sbuf_puts(sb, "void");
  cn_sbuf_puts(sb, ") {\n");
}

/* An entry point `<name><suffix>(buffers, syms<extra>)` calling the routine's function, which
 * gets `par` last when the routine outlines loops. */
static void emit_entry(const cgen *g, const char *suffix, const char *extra, const char *par) {
  const cn_ll_proc *proc = g->proc;
  cn_sbuf *sb = g->out;
  cn_sbuf_printf(sb, "void %s_entry%s(void *const *buffers, const int64_t *syms%s);\n", proc->name,
                 suffix, extra);
  cn_sbuf_printf(sb, "void %s_entry%s(void *const *buffers, const int64_t *syms%s) {\n", proc->name,
                 suffix, extra);
  if (proc->n_params == 0) cn_sbuf_puts(sb, "  (void)buffers;\n");
  if (proc->n_free_syms == 0) cn_sbuf_puts(sb, "  (void)syms;\n");
  cn_sbuf_printf(sb, "  %s_body(", proc->name);
  for (int k = 0; k < proc->n_params; k++) {
    if (k > 0) cn_sbuf_puts(sb, ", ");
    cn_sbuf_putc(sb, '(');
    print_param_type(g, sb, k);
    cn_sbuf_printf(sb, ")buffers[%d]", k);
  }
  for (int i = 0; i < proc->n_free_syms; i++)
    cn_sbuf_printf(sb, "%ssyms[%d]", proc->n_params + i > 0 ? ", " : "", i);
  if (g->par) cn_sbuf_printf(sb, "%s%s", proc->n_params + proc->n_free_syms ? ", " : "", par);
  cn_sbuf_puts(sb, ");\n}\n");
}

/* The pool's call table, as generated code sees it: a function with parallel loops takes one. */
static void emit_par_type(cn_sbuf *sb) {
  cn_sbuf_puts(sb, "/* the runtime's pool (cn_parallel of src/backend/backend.h) */\n"
                   "#include <stddef.h>\n"
                   "typedef struct {\n"
                   "  void (*pool_for)(void *pool, int64_t n,\n"
                   "                   void (*fn)(void *env, int64_t lo, int64_t hi), void *env);\n"
                   "  void *pool;\n"
                   "  void *(*scratch)(void *pool, size_t bytes);\n"
                   "} cn_par_t;\n");
}

static void emit_routine(const cgen *g) {
  const cn_ll_proc *proc = g->proc;
  cn_sbuf *sb = g->out;
  cn_sbuf body = {0};
  cgen h = *g;
  if (g->par) {
    h.out = &body; /* the outlined functions come first */
  } else {
    cn_sbuf_printf(sb, "/* ---- routine %s ---- */\n", proc->name);
    emit_signature(g);
  }
  for (int k = 0; k < proc->n_params; k++) /* e.g. a Tile contraction no valid point reaches */
    if (!g->accessed[k])
      cn_sbuf_printf(h.out, "  (void)%s; /* not accessed */\n", g->param_names[k]);
  cn_cgen_stmt(&h, 1, proc->body);
  if (g->par) {
    emit_par_type(sb);
    cn_sbuf_puts(sb, cn_cgen_text(&g->par->outlined));
    cn_sbuf_printf(sb, "/* ---- routine %s ---- */\n", proc->name);
    emit_signature(g);
    cn_sbuf_puts(sb, cn_cgen_text(&body));
    if (body.failed) sb->failed = true;
    cn_sbuf_free(&body);
  }
  cn_sbuf_puts(sb, "}\n");
  emit_entry(g, "", "", "NULL");
  if (g->par) emit_entry(g, "_par", ", const cn_par_t *par", "par");
}

/* ---- Routines as kernels ----
 * A C compiler's time grows faster than linearly with the size of a function (gcc -O3 on the ~500
 * loop nests of a 25-layer MLP's training step: 27 s as one function, 6 s as one function per
 * nest), while a model's routine repeats a few nests over and over (every layer's matmul, bias,
 * activation, gradients, SGD steps: 21 distinct nests there, 0.3 s as kernels and steps). So a
 * routine of more than CGEN_STEP_STATEMENTS top-level statements becomes kernels — one static
 * function per distinct top-level statement, shared by every statement that differs from it only by
 * the buffers and static indices it names — called from steps of at most CGEN_STEP_STATEMENTS
 * statements each, which the entry point calls in order. Kernels and steps are noinline: the
 * compiler would otherwise inline them back into one function. Two statements share a kernel when
 * they print the same text with their buffers, static indices and loop variables renamed by order
 * of first appearance (the key, never compiled): strides, margins, constants, precisions and
 * loop marks are part of that text, so a shared kernel computes each statement exactly and
 * outlines the same loops for each. A kernel's text is its first statement's, under that
 * statement's names. A kernel whose statement has a parallel loop takes the pool as a last
 * parameter cn_par and outlines the loop (see "Parallel loops": the environment is the kernel's
 * buffers and static indices and the loop variables around the loop), its outlined functions
 * emitted just before it; the steps calling such kernels take cn_par too, and the routine exports
 * <name>_entry_par passing the caller's pool, <name>_entry passing NULL. Smaller routines stay
 * one function. */

#define CGEN_STEP_STATEMENTS 32

/* The buffers (with whether they are stored into), static indices and loop variables a statement
 * or a step names, in order of first appearance. A mark equal to `stamp` tells that the entity
 * was seen in the current statement or step; `at` is then its position in the list. */
typedef struct {
  int *params;
  bool *writes;
  int n_params, cap_params, cap_writes;
  cn_symbol *statics, *loops;
  int n_statics, cap_statics, n_loops, cap_loops;
  int *param_mark, *param_at; /* per param of the routine */
  int *sym_mark;              /* per position in the routine's symbol list */
  int stamp;
} uses;

static bool uses_init(const cgen *g, uses *u) {
  size_t n_params = (size_t)(g->proc->n_params > 0 ? g->proc->n_params : 1);
  size_t n_syms = (size_t)(g->symbols.n > 0 ? g->symbols.n : 1);
  u->param_mark = cn_alloc(g->ctx, sizeof(int) * n_params);
  u->param_at = cn_alloc(g->ctx, sizeof(int) * n_params);
  u->sym_mark = cn_alloc(g->ctx, sizeof(int) * n_syms);
  u->stamp = 1;
  return u->param_mark && u->param_at && u->sym_mark;
}

/* Starts a new statement or step: nothing seen yet. */
static void uses_clear(uses *u) {
  u->n_params = u->n_statics = u->n_loops = 0;
  u->stamp++;
}

static bool use_param(const cgen *g, uses *u, int param, bool write) {
  if (u->param_mark[param] != u->stamp) {
    if (!cn_arena_grow(g->ctx, (void **)&u->params, &u->cap_params, u->n_params + 1, sizeof(int)) ||
        !cn_arena_grow(g->ctx, (void **)&u->writes, &u->cap_writes, u->n_params + 1, sizeof(bool)))
      return false;
    u->param_mark[param] = u->stamp;
    u->param_at[param] = u->n_params;
    u->params[u->n_params] = param;
    u->writes[u->n_params++] = false;
  }
  u->writes[u->param_at[param]] |= write;
  return true;
}

static bool use_symbol(const cgen *g, uses *u, cn_symbol sym, bool loop) {
  int slot = cn_cgen_sym_slot(g, sym);
  if (u->sym_mark[slot] == u->stamp) return true;
  cn_symbol **list = loop ? &u->loops : &u->statics;
  int *n = loop ? &u->n_loops : &u->n_statics, *cap = loop ? &u->cap_loops : &u->cap_statics;
  if (!cn_arena_grow(g->ctx, (void **)list, cap, *n + 1, sizeof(cn_symbol))) return false;
  u->sym_mark[slot] = u->stamp;
  (*list)[(*n)++] = sym;
  return true;
}

/* A symbol an index reads before any loop of the statement bound it is a static index. */
static bool use_index(const cgen *g, uses *u, const cn_index *idx) {
  if (idx->kind == CN_IDX_FIXED) return true;
  int terms = idx->kind == CN_IDX_ITER ? 1 : idx->n_terms;
  for (int t = 0; t < terms; t++)
    if (!use_symbol(g, u, idx->syms[t], false)) return false;
  return true;
}

static bool use_access(const cgen *g, uses *u, int param, const cn_index *idx, bool write) {
  if (!use_param(g, u, param, write)) return false;
  for (int d = 0; d < g->proc->params[param].node->rank; d++)
    if (!use_index(g, u, &idx[d])) return false;
  return true;
}

static bool use_expr(const cgen *g, uses *u, const cn_ll_expr *e) {
  switch (e->kind) {
  case CN_LE_GET: return use_access(g, u, e->u.get.param, e->u.get.idx, false);
  case CN_LE_CONST: return true;
  case CN_LE_INDEX: return use_index(g, u, &e->u.index);
  case CN_LE_OP:
    for (int a = 0; a < cn_op_arity(e->u.op.op); a++)
      if (cn_op_c_reads(e->u.op.op, e->prec, a) && !use_expr(g, u, e->u.op.args[a])) return false;
    return true;
  }
  CN_ASSERT(!"unknown expression kind");
  return false;
}

/* A loop's bounds read outer variables and static indices; its own variable is bound below. */
static bool use_stmt(const cgen *g, uses *u, const cn_ll_stmt *s) {
  switch (s->kind) {
  case CN_LL_SEQ:
    for (int i = 0; i < s->u.seq.count; i++)
      if (!use_stmt(g, u, s->u.seq.items[i])) return false;
    return true;
  case CN_LL_COMMENT: return true;
  case CN_LL_FOR:
    for (int k = 0; k < s->u.loop.n_lower; k++)
      if (!use_index(g, u, &s->u.loop.lower[k].expr)) return false;
    for (int k = 0; k < s->u.loop.n_upper; k++)
      if (!use_index(g, u, &s->u.loop.upper[k].expr)) return false;
    return use_symbol(g, u, s->u.loop.sym, true) && use_stmt(g, u, s->u.loop.body);
  case CN_LL_IF:
    for (int c = 0; c < s->u.guard.n_conds; c++)
      if (!use_index(g, u, &s->u.guard.conds[c].expr)) return false;
    return use_stmt(g, u, s->u.guard.body);
  case CN_LL_SET:
    return use_access(g, u, s->u.set.param, s->u.set.idx, true) && use_expr(g, u, s->u.set.value);
  case CN_LL_SET_VEC:
    return use_access(g, u, s->u.vec.param, s->u.vec.idx, true) && use_expr(g, u, s->u.vec.arg);
  case CN_LL_GEMM: return use_stmt(g, u, s->u.gemm.nest);
  case CN_LL_LET:
    return use_access(g, u, s->u.let.param, s->u.let.idx, false) &&
           use_symbol(g, u, s->u.let.sym, true) && use_stmt(g, u, s->u.let.body);
  }
  CN_ASSERT(!"unknown statement kind");
  return false;
}

/* A kernel's parameters under g's names: the statement's buffers, then its static indices, then
 * the pool when the statement has a parallel loop. */
static void print_kernel_params(const cgen *g, cn_sbuf *sb, const uses *u, bool parallel) {
  for (int k = 0; k < u->n_params; k++) {
    cn_prec prec = g->proc->params[u->params[k]].node->prec;
    cn_sbuf_printf(sb, "%s%s%s *restrict %s", k ? ", " : "", u->writes[k] ? "" : "const ",
                   cn_prec_table[prec].store_c, g->param_names[u->params[k]]);
  }
  for (int k = 0; k < u->n_statics; k++)
    cn_sbuf_printf(sb, "%sint64_t %s", u->n_params + k ? ", " : "",
                   cn_cgen_sym_name(g, u->statics[k]));
  if (parallel)
    cn_sbuf_printf(sb, "%sconst cn_par_t *cn_par", u->n_params + u->n_statics ? ", " : "");
  else if (u->n_params + u->n_statics == 0)
    cn_sbuf_puts(sb, "void");
}

/* The marks of the loops of s, in the order its text prints the loops: part of a kernel's key.
 * The key is printed without outlining, where a parallel loop's text is that of an unmarked loop:
 * its parameters tell whether a statement takes the pool, but not which of its loops is
 * outlined, so without the marks statements parallel on different loops would share a kernel
 * outlining the first one's loop. */
static void print_marks(cn_sbuf *sb, const cn_ll_stmt *s) {
  switch (s->kind) {
  case CN_LL_SEQ:
    for (int i = 0; i < s->u.seq.count; i++) print_marks(sb, s->u.seq.items[i]);
    return;
  case CN_LL_FOR:
    cn_sbuf_printf(sb, " %u", s->u.loop.marks);
    print_marks(sb, s->u.loop.body);
    return;
  case CN_LL_IF: print_marks(sb, s->u.guard.body); return;
  case CN_LL_GEMM: print_marks(sb, s->u.gemm.nest); return;
  case CN_LL_LET: print_marks(sb, s->u.let.body); return;
  case CN_LL_COMMENT:
  case CN_LL_SET:
  case CN_LL_SET_VEC: return;
  }
  CN_ASSERT(!"unknown statement kind");
}

typedef struct {
  cgen keyed;     /* the routine's cgen with positional names, printing into `key` */
  cn_sbuf key;    /* the current statement's key */
  cn_map kernels; /* key -> int * (the kernel's number) */
  int n_kernels, n_steps, in_step;
  const char **positional[3]; /* "@b<k>", "@s<k>", "@v<k>": never C, so never ambiguous */
  int cap_positional[3];
  cn_sbuf kernel_text, step_text, calls; /* kernels, finished steps, the current step's calls */
  cn_sbuf entry_calls;                   /* the entry point's calls of the finished steps */
  cn_sbuf decls;                         /* each kernel's declaration */
  cn_sbuf gemm_preamble;                 /* the GEMM preamble the kernels need (par) */
  size_t *kernel_end; /* per kernel: where its text (outlined functions, then it) ends */
  int cap_kernel_end;
  bool step_par; /* a call of the current step passes the pool */
  cgen_par par;  /* the outlining of the kernels' parallel loops */
  uses stmt, step;
} splitter;

/* Empties a builder for reuse, keeping its memory. */
static void sbuf_clear(cn_sbuf *sb) {
  sb->len = 0;
  if (sb->data) sb->data[0] = '\0';
}

/* The k-th positional name of a kind (0 buffers, 1 static indices, 2 loop variables). */
static const char *positional_name(cn_ctx *ctx, splitter *sp, int kind, int k) {
  if (k >= sp->cap_positional[kind]) {
    int old = sp->cap_positional[kind];
    if (!cn_arena_grow(ctx, (void **)&sp->positional[kind], &sp->cap_positional[kind], k + 1,
                       sizeof(char *)))
      return NULL;
    for (int i = old; i < sp->cap_positional[kind]; i++) sp->positional[kind][i] = NULL;
  }
  if (!sp->positional[kind][k]) {
    char name[24];
    snprintf(name, sizeof name, "@%c%d", "bsv"[kind], k);
    sp->positional[kind][k] = cn_strdup(ctx, name);
  }
  return sp->positional[kind][k];
}

/* The number of the kernel computing s (whose names are in sp->stmt), emitted when new, after
 * the outlined functions of its parallel loops when `parallel`. */
static cn_status kernel_of(const cgen *g, splitter *sp, const cn_ll_stmt *s, bool parallel,
                           int *number) {
  cn_ctx *ctx = g->ctx;
  const uses *u = &sp->stmt;
  for (int k = 0; k < u->n_params; k++)
    if (!(sp->keyed.param_names[u->params[k]] = positional_name(ctx, sp, 0, k))) return ctx->status;
  for (int k = 0; k < u->n_statics; k++)
    if (!(sp->keyed.sym_names[cn_cgen_sym_slot(g, u->statics[k])] = positional_name(ctx, sp, 1, k)))
      return ctx->status;
  for (int k = 0; k < u->n_loops; k++)
    if (!(sp->keyed.sym_names[cn_cgen_sym_slot(g, u->loops[k])] = positional_name(ctx, sp, 2, k)))
      return ctx->status;
  sbuf_clear(&sp->key);
  print_kernel_params(&sp->keyed, &sp->key, u, parallel);
  cn_sbuf_putc(&sp->key, '\n');
  cn_cgen_stmt(&sp->keyed, 1, s);
  cn_sbuf_puts(&sp->key, "marks:");
  print_marks(&sp->key, s);
  if (sp->key.failed)
    return cn_fail(ctx, CN_ERR_NOMEM, "out of memory generating C for routine '%s'", g->proc->name);
  const int *known = cn_map_get(&sp->kernels, sp->key.data);
  if (known) {
    *number = *known;
    return CN_OK;
  }
  const char *key = cn_strdup(ctx, sp->key.data);
  int *fresh = cn_alloc(ctx, sizeof *fresh);
  if (!key || !fresh) return ctx->status;
  *fresh = *number = sp->n_kernels++;
  if (!cn_map_put(ctx, &sp->kernels, key, fresh)) return ctx->status;
  cn_sbuf kernel = {0};
  cgen named = *g;
  named.out = &kernel;
  if (parallel) { /* the environment: the kernel's parameters */
    sp->par.params = u->params;
    sp->par.writes = u->writes;
    sp->par.n_params = u->n_params;
    sp->par.statics = u->statics;
    sp->par.n_statics = u->n_statics;
    named.par = &sp->par;
  }
  cn_sbuf_printf(&kernel, "CN_KERNEL void cn_kernel_%d(", *number);
  print_kernel_params(&named, &kernel, u, parallel);
  cn_sbuf_puts(&kernel, ")");
  cn_sbuf_puts(&sp->decls, cn_cgen_text(&kernel));
  cn_sbuf_puts(&sp->decls, ";\n");
  cn_sbuf_puts(&kernel, " {\n");
  cn_cgen_stmt(&named, 1, s);
  cn_sbuf_puts(&kernel, "}\n");
  if (kernel.failed || sp->par.outlined.failed) sp->kernel_text.failed = true;
  cn_sbuf_puts(&sp->kernel_text, cn_cgen_text(&sp->par.outlined));
  cn_sbuf_puts(&sp->kernel_text, cn_cgen_text(&kernel));
  sbuf_clear(&sp->par.outlined);
  cn_sbuf_free(&kernel);
  if (!cn_arena_grow(ctx, (void **)&sp->kernel_end, &sp->cap_kernel_end, sp->n_kernels,
                     sizeof *sp->kernel_end))
    return ctx->status;
  sp->kernel_end[*number] = sp->kernel_text.len;
  return CN_OK;
}

/* Closes the current step: its function takes what its calls pass from the entry point's arrays
 * (under the reserved names cn_buffers and cn_syms, which no buffer or symbol can take), and the
 * pool when a call passes it on to a kernel with parallel loops. */
static void end_step(const cgen *g, splitter *sp) {
  const cn_ll_proc *proc = g->proc;
  cn_sbuf *sb = &sp->step_text;
  const uses *st = &sp->step;
  cn_sbuf_printf(&sp->entry_calls, "  cn_step_%d(buffers, syms%s);\n", sp->n_steps,
                 sp->step_par ? ", par" : "");
  cn_sbuf_printf(sb,
                 "CN_NOINLINE static void cn_step_%d(void *const *cn_buffers, "
                 "const int64_t *cn_syms%s) {\n",
                 sp->n_steps++, sp->step_par ? ", const cn_par_t *cn_par" : "");
  if (st->n_params == 0) cn_sbuf_puts(sb, "  (void)cn_buffers;\n");
  if (st->n_statics == 0) cn_sbuf_puts(sb, "  (void)cn_syms;\n");
  for (int k = 0; k < st->n_params; k++) {
    int param = st->params[k];
    cn_sbuf_printf(sb, "  %s%s *%s = cn_buffers[%d];\n", st->writes[k] ? "" : "const ",
                   cn_prec_table[proc->params[param].node->prec].store_c, g->param_names[param],
                   param);
  }
  for (int k = 0; k < st->n_statics; k++) {
    int slot = 0;
    while (slot < proc->n_free_syms && proc->free_syms[slot] != st->statics[k]) slot++;
    CN_ASSERT(slot < proc->n_free_syms); /* a symbol no loop binds is a static index */
    cn_sbuf_printf(sb, "  const int64_t %s = cn_syms[%d];\n", cn_cgen_sym_name(g, st->statics[k]),
                   slot);
  }
  if (sp->calls.failed) sb->failed = true;
  cn_sbuf_puts(sb, sp->calls.data ? sp->calls.data : "");
  cn_sbuf_puts(sb, "}\n");
  sbuf_clear(&sp->calls);
  uses_clear(&sp->step);
  sp->in_step = 0;
  sp->step_par = false;
}

/* Top-level statements in order (nested sequences flattened): a comment goes into the current
 * step, any other statement becomes a call of its kernel. */
static cn_status split_stmt(const cgen *g, splitter *sp, const cn_ll_stmt *s) {
  if (s->kind == CN_LL_SEQ) {
    for (int i = 0; i < s->u.seq.count; i++) {
      cn_status status = split_stmt(g, sp, s->u.seq.items[i]);
      if (status != CN_OK) return status;
    }
    return CN_OK;
  }
  if (s->kind == CN_LL_COMMENT) {
    cn_sbuf_indent(&sp->calls, 1);
    cn_cgen_comment(&sp->calls, s->u.comment ? s->u.comment : "");
    return CN_OK;
  }
  uses *u = &sp->stmt;
  uses_clear(u);
  int number = 0;
  bool parallel = has_mark(s, CN_LL_PARALLEL);
  if (!use_stmt(g, u, s)) return g->ctx->status;
  cn_status status = kernel_of(g, sp, s, parallel, &number);
  if (status != CN_OK) return status;
  cn_sbuf_printf(&sp->calls, "  cn_kernel_%d(", number);
  for (int k = 0; k < u->n_params; k++) {
    cn_sbuf_printf(&sp->calls, "%s%s", k ? ", " : "", g->param_names[u->params[k]]);
    if (!use_param(g, &sp->step, u->params[k], u->writes[k])) return g->ctx->status;
  }
  for (int k = 0; k < u->n_statics; k++) {
    cn_sbuf_printf(&sp->calls, "%s%s", u->n_params + k ? ", " : "",
                   cn_cgen_sym_name(g, u->statics[k]));
    if (!use_symbol(g, &sp->step, u->statics[k], false)) return g->ctx->status;
  }
  if (parallel) cn_sbuf_puts(&sp->calls, u->n_params + u->n_statics ? ", cn_par" : "cn_par");
  sp->step_par = sp->step_par || parallel;
  cn_sbuf_puts(&sp->calls, ");\n");
  if (++sp->in_step == CGEN_STEP_STATEMENTS) end_step(g, sp);
  return CN_OK;
}

static int count_statements(const cn_ll_stmt *s) {
  if (s->kind == CN_LL_COMMENT) return 0;
  if (s->kind != CN_LL_SEQ) return 1;
  int n = 0;
  for (int i = 0; i < s->u.seq.count; i++) n += count_statements(s->u.seq.items[i]);
  return n;
}

/* ---- Routines in pieces ----
 * gcc -O3's time stays linear in a routine of kernels, but one compiler process uses one core: a
 * convnet's training step (170 KB of kernels) took 3 s. So a routine of kernels is also laid out
 * in CN_PIECES pieces of about equal text, one per CGEN_PIECE_BYTES (at most CN_CGEN_MAX_PIECES),
 * which the backend compiles at the same time, one process each (the file with -DCN_PIECE=k: the
 * shared head, the kernels of piece k and, in piece 0, the steps and entry points), then links;
 * without CN_PIECE the file is one translation unit as any other. Kernels are CN_KERNEL: static in
 * one unit, extern with hidden visibility in pieces, declared in the shared head; what a kernel
 * outlines stays static beside it, and the GEMM preamble goes into the shared head. The split
 * depends on the text only (the count on its size; each kernel, the largest first, to the piece
 * with the least text, ties to the lowest; piece 0 starts with the steps' text), never on the
 * machine, so text and cache key are the same everywhere; sizes count the text the compiler
 * reads in process (live_bytes: a library GEMM's driver is skipped). A routine of at least
 * CGEN_SPLIT_BYTES
 * (the half-moons backprop: 13 KB of 40 small kernels, 0.3 s) is in two pieces at least: alone in
 * its batch it would keep one core busy while the others wait, and a piece costs about 25 ms more
 * (its head, gcc's start, a link). */
#define CGEN_PIECE_BYTES 32768
#define CGEN_SPLIT_BYTES 8192

int cn_cgen_pieces(const char *source) {
  const char *at = strstr(source, "\n#define CN_PIECES ");
  int n = at ? atoi(at + strlen("\n#define CN_PIECES ")) : 1;
  return n >= 2 && n <= CN_CGEN_MAX_PIECES ? n : 1;
}

/* The bytes of text[from, to) the compiler reads in process: the generated driver of a GEMM the
 * GEMM library runs (from CGEN_STANDALONE_OPEN to CGEN_STANDALONE_ELSE, cgen_gemm.c) is skipped by
 * the preprocessor and weighs next to nothing (the training step of the Fashion MLP, weighed by
 * its whole text, took 0.53 s of gcc in piece 0 and 0.24 s in piece 1). */
static size_t live_bytes(const char *text, size_t from, size_t to) {
  size_t live = to - from;
  const char *end = text + to;
  for (const char *at = strstr(text + from, CGEN_STANDALONE_OPEN); at && at < end;
       at = strstr(at, CGEN_STANDALONE_OPEN)) {
    const char *skip_end = strstr(at, CGEN_STANDALONE_ELSE);
    CN_ASSERT(skip_end && skip_end < end); /* the two come together, in one kernel's text */
    live -= (size_t)(skip_end - at);
    at = skip_end;
  }
  return live;
}

/* piece[k]: the piece of kernel k (0 .. the count returned - 1; NULL when one piece). */
static int assign_pieces(cn_ctx *ctx, const splitter *sp, int **piece) {
  *piece = NULL;
  size_t *size = cn_alloc(ctx, sizeof *size * (size_t)(sp->n_kernels + 1));
  if (!size) return -1;
  const char *text = cn_cgen_text(&sp->kernel_text);
  size_t total = sp->step_text.len;
  for (int k = 0; k < sp->n_kernels; k++)
    total += size[k] = live_bytes(text, k ? sp->kernel_end[k - 1] : 0, sp->kernel_end[k]);
  int n = (int)(total / CGEN_PIECE_BYTES);
  if (n < 2 && total >= CGEN_SPLIT_BYTES) n = 2;
  if (n > CN_CGEN_MAX_PIECES) n = CN_CGEN_MAX_PIECES;
  if (n < 2 || sp->n_kernels < 2) return 1;
  if (n > sp->n_kernels) n = sp->n_kernels;
  int *at = cn_alloc(ctx, sizeof *at * (size_t)sp->n_kernels);
  bool *placed = cn_alloc(ctx, sizeof *placed * (size_t)sp->n_kernels);
  if (!at || !placed) return -1;
  memset(placed, 0, sizeof *placed * (size_t)sp->n_kernels);
  size_t load[CN_CGEN_MAX_PIECES] = {sp->step_text.len};
  for (int done = 0; done < sp->n_kernels; done++) {
    int largest = -1;
    size_t largest_size = 0;
    for (int k = 0; k < sp->n_kernels; k++) {
      if (!placed[k] && (largest < 0 || size[k] > largest_size))
        largest = k, largest_size = size[k];
    }
    int least = 0;
    for (int p = 1; p < n; p++)
      if (load[p] < load[least]) least = p;
    at[largest] = least;
    load[least] += largest_size;
    placed[largest] = true;
  }
  *piece = at;
  return n;
}

/* The text of the kernels of one piece, in their order. */
static void emit_piece(cn_sbuf *sb, const splitter *sp, const int *piece, int p) {
  const char *text = cn_cgen_text(&sp->kernel_text);
  for (int k = 0; k < sp->n_kernels; k++) {
    size_t from = k ? sp->kernel_end[k - 1] : 0;
    if (piece[k] == p) cn_sbuf_printf(sb, "%.*s", (int)(sp->kernel_end[k] - from), text + from);
  }
}

/* The routine as kernels, steps and an entry point. With a parallel mark the entry point is
 * <name>_entry_par, passing the pool down to the steps that need it, and <name>_entry calls it
 * with NULL (every loop on the caller's thread), as a short routine's entries do. */
static cn_status emit_kernels(const cgen *g) {
  cn_ctx *ctx = g->ctx;
  const cn_ll_proc *proc = g->proc;
  size_t n_params = (size_t)(proc->n_params > 0 ? proc->n_params : 1);
  size_t n_syms = (size_t)(g->symbols.n > 0 ? g->symbols.n : 1);
  splitter sp = {.keyed = *g, .kernels = {.strings = true}};
  sp.keyed.out = &sp.key;
  sp.par.gemm_preamble = &sp.gemm_preamble;
  sp.keyed.param_names = cn_alloc(ctx, sizeof(char *) * n_params);
  sp.keyed.sym_names = cn_alloc(ctx, sizeof(char *) * n_syms);
  sp.par.scope = cn_alloc(ctx, sizeof(cn_symbol) * n_syms);
  cn_status status = CN_OK;
  if (!sp.keyed.param_names || !sp.keyed.sym_names || !sp.par.scope || !uses_init(g, &sp.stmt) ||
      !uses_init(g, &sp.step))
    status = ctx->status;
  if (status == CN_OK) status = split_stmt(g, &sp, proc->body);
  if (status == CN_OK && (sp.in_step > 0 || sp.calls.len > 0)) end_step(g, &sp);
  int *piece = NULL, pieces = status == CN_OK ? assign_pieces(ctx, &sp, &piece) : 1;
  if (pieces < 0) status = ctx->status;
  cn_sbuf *sb = g->out;
  if (status == CN_OK) {
    cn_sbuf_printf(sb, "/* ---- routine %s ---- */\n", proc->name);
    cn_sbuf_puts(sb, "#if defined(__GNUC__)\n#define CN_NOINLINE __attribute__((noinline))\n"
                     "#else\n#define CN_NOINLINE\n#endif\n");
    if (pieces > 1)
      cn_sbuf_printf(sb,
                     "/* compiled in pieces (-DCN_PIECE=0 .. CN_PIECES - 1, linked together) or "
                     "as one unit */\n#define CN_PIECES %d\n#ifdef CN_PIECE\n"
                     "#define CN_KERNEL CN_NOINLINE __attribute__((visibility(\"hidden\")))\n"
                     "#else\n#define CN_KERNEL CN_NOINLINE static\n#endif\n",
                     pieces);
    else
      cn_sbuf_puts(sb, "#define CN_KERNEL CN_NOINLINE static\n");
    bool parallel = sp.par.count > 0;
    if (parallel) emit_par_type(sb);
    if (sp.kernel_text.failed || sp.step_text.failed || sp.entry_calls.failed || sp.decls.failed ||
        sp.gemm_preamble.failed)
      sb->failed = true;
    cn_sbuf_puts(sb, cn_cgen_text(&sp.gemm_preamble));
    if (pieces > 1) {
      cn_sbuf_puts(sb, cn_cgen_text(&sp.decls));
      for (int p = 1; p < pieces; p++) {
        cn_sbuf_printf(sb, "#if !defined(CN_PIECE) || CN_PIECE == %d\n", p);
        emit_piece(sb, &sp, piece, p);
        cn_sbuf_puts(sb, "#endif\n");
      }
      cn_sbuf_puts(sb, "#if !defined(CN_PIECE) || CN_PIECE == 0\n");
      emit_piece(sb, &sp, piece, 0);
    } else {
      cn_sbuf_puts(sb, cn_cgen_text(&sp.kernel_text));
    }
    cn_sbuf_puts(sb, cn_cgen_text(&sp.step_text));
    const char *entry_params = "(void *const *buffers, const int64_t *syms)";
    const char *par_params = "(void *const *buffers, const int64_t *syms, const cn_par_t *par)";
    const char *params = parallel ? par_params : entry_params, *suffix = parallel ? "_par" : "";
    cn_sbuf_printf(sb, "void %s_entry%s%s;\n", proc->name, suffix, params);
    cn_sbuf_printf(sb, "void %s_entry%s%s {\n", proc->name, suffix, params);
    cn_sbuf_puts(sb, cn_cgen_text(&sp.entry_calls));
    cn_sbuf_puts(sb, "}\n");
    if (parallel) {
      cn_sbuf_printf(sb, "void %s_entry%s;\n", proc->name, entry_params);
      cn_sbuf_printf(sb, "void %s_entry%s {\n", proc->name, entry_params);
      cn_sbuf_printf(sb, "  %s_entry_par(buffers, syms, NULL);\n}\n", proc->name);
    }
    if (pieces > 1) cn_sbuf_puts(sb, "#endif\n");
  }
  cn_sbuf_free(&sp.key);
  cn_sbuf_free(&sp.kernel_text);
  cn_sbuf_free(&sp.step_text);
  cn_sbuf_free(&sp.calls);
  cn_sbuf_free(&sp.entry_calls);
  cn_sbuf_free(&sp.decls);
  cn_sbuf_free(&sp.gemm_preamble);
  cn_sbuf_free(&sp.par.outlined);
  return status;
}

cn_status cn_cgen_source(cn_ctx *ctx, const cn_ll_proc *proc, cn_sbuf *out) {
  size_t n_params = (size_t)(proc->n_params > 0 ? proc->n_params : 1);
  cn_sbuf body = {0}; /* what follows the prelude, written first: it says what the prelude needs */
  cgen g;
  cn_status status = cn_cgen_init(&g, ctx, proc, &host_c, &body);
  if (status != CN_OK) return status;

  /* Flags without -fopenmp-simd make `#pragma omp simd` unknown: harmless, but -Wall -Werror in
   * the user's flags must not turn it into an error. Only procedures with vector marks say so. */
  if (has_mark(proc->body, CN_LL_VECTOR))
    cn_sbuf_puts(&body, "#pragma GCC diagnostic ignored \"-Wunknown-pragmas\"\n");
  if (count_statements(proc->body) > CGEN_STEP_STATEMENTS) {
    status = emit_kernels(&g);
  } else if (has_mark(proc->body, CN_LL_PARALLEL)) {
    /* the environment: the routine function's parameters, all buffers and free symbols */
    int *params = cn_alloc(ctx, sizeof(int) * n_params);
    cgen_par par = {.scope = cn_alloc(ctx, sizeof(cn_symbol) * (size_t)(g.symbols.n + 1)),
                    .params = params,
                    .writes = g.written,
                    .n_params = proc->n_params,
                    .statics = proc->free_syms,
                    .n_statics = proc->n_free_syms};
    for (int k = 0; params && k < proc->n_params; k++) params[k] = k;
    if (!par.scope || !params) status = ctx->status;
    g.par = &par;
    if (status == CN_OK) emit_routine(&g);
    if (par.outlined.failed) body.failed = true;
    cn_sbuf_free(&par.outlined);
  } else {
    emit_routine(&g);
  }

  cn_sbuf_printf(out, "/* Generated by cannl: routine %s. Do not edit. */\n", proc->name);
  cn_sbuf_puts(out, "#include <stdint.h>\n"); /* <tgmath.h> when used: cgen_prelude.c */
  /* No multiply and add the code keeps apart are fused, whatever flags the user gives: clang
   * contracts inside an expression unless told (gcc does not in ISO C mode, -std=c11; in GNU mode
   * it needs -ffp-contract=off, which the default flags have, and it warns about this pragma). */
  cn_sbuf_puts(out, "#if defined(__clang__)\n#pragma STDC FP_CONTRACT OFF\n#endif\n");
  /* The prelude's helpers may still outnumber what a routine calls (a whole family behind one
   * macro): they must not trip -Wall -Werror in the user's flags (clang warns about unused static
   * inline functions of a main file). */
  cn_sbuf_puts(out, "#pragma GCC diagnostic push\n"
                    "#pragma GCC diagnostic ignored \"-Wunused-function\"\n");
  if (status == CN_OK) status = g.dialect->prelude(ctx, out, &body);
  cn_sbuf_puts(out, "#pragma GCC diagnostic pop\n");
  cn_sbuf_puts(out, cn_cgen_text(&body));
  if (body.failed) out->failed = true;
  cn_sbuf_free(&body);
  if (status != CN_OK) return status;
  if (out->failed)
    return cn_fail(ctx, CN_ERR_NOMEM, "out of memory generating C for routine '%s'", proc->name);
  return CN_OK;
}
