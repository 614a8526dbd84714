/* The dialect-neutral part of the C-source generator: what a routine's text is made of whatever
 * the C dialect (host C11 now; OpenCL C and CUDA C fit as further cn_cgen_dialect instances with
 * their own kernel and launch modules): identifiers, cell offsets, expressions and statements
 * (loops, guards, stores, lets). The host-C modules (cgen.c: routines, parallel outlining onto
 * the pool, kernels and pieces; cgen_gemm.c; cgen_prelude.c) call it and choose the dialect.
 *
 * Invariants of the text it writes: deterministic (a function of the procedure, the node
 * geometry, the symbol names and the dialect only) because it doubles as the compile-cache key
 * and as the golden text of tests; every identifier the procedure contributes (buffer parameters,
 * loop variables, free-symbol parameters) is distinct from the others, from the dialect's
 * keywords, from the names the generated expressions call (the ops' templates, the math library,
 * the prelude's cn_ helpers and the standard macros the prelude's headers define), so no user
 * label or symbol name can break compilation; free text (a %cd comment) reaches the file only
 * through cn_sbuf_c_comment_text, inert inside a comment; cell offsets are one folded linear
 * expression in the padded row-major buffer; every conversion between precisions goes through
 * the dialect's convert, every load and store through its load / store (host C: cn_conv_c,
 * cn_load_c, cn_store_c), so the semantics stay those of src/numeric; loop bounds and guards are
 * expressions of the dialect's index type over loop variables and static indices, a bound with a
 * divisor through the prelude's exact cn_ceil_div_i64, several bounds combined by cn_max_i64 /
 * cn_min_i64 (pure functions: the compiler hoists an upper bound out of the loop test). The
 * emitter writes no host-only construct itself: parallel loops and GEMM statements go through
 * the dialect's hooks. */
#include "backend/cgen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The generator's own block-local names: the "cn_" prefix is never given to user names. */
#define CGEN_LANES "cn_lanes"
#define CGEN_LANE  "cn_lane"

/* The position of a symbol of the procedure in its symbol list, where its tables keep it. */
int cn_cgen_sym_slot(const cgen *g, cn_symbol sym) {
  int slot = cn_ll_symbol_slot(&g->symbols, sym);
  CN_ASSERT(slot >= 0); /* the list holds every symbol the procedure names */
  return slot;
}

static const char *sym_name(const cgen *g, cn_symbol sym) {
  return g->sym_names[cn_cgen_sym_slot(g, sym)];
}

const char *cn_cgen_sym_name(const cgen *g, cn_symbol sym) {
  return sym_name(g, sym);
}

/* ---- Identifiers ---- */

static bool is_alpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
static bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
static bool is_upper_word(const char *s) {
  for (; *s; s++)
    if (!((*s >= 'A' && *s <= 'Z') || is_digit(*s) || *s == '_')) return false;
  return true;
}

static bool starts_with(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Prefixes of the object-like macros <stdint.h> and <math.h> define (INT64_MAX, UINT32_C, FP_NAN,
 * HUGE_VALF, M_PI, ...): an all-capitals name starting with one of them could be a macro. */
static bool looks_like_std_macro(const char *s) {
  static const char *const prefixes[] = {"INT",   "UINT", "PTRDIFF_", "SIZE_", "WCHAR_",
                                         "WINT_", "SIG_", "FP_",      "M_",    "MATH_",
                                         "HUGE_", "FLT_", "DBL_",     "LDBL_", "CMPLX"};
  if (!is_upper_word(s)) return false;
  for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
    if (starts_with(s, prefixes[i])) return true;
  return false;
}

/* A C identifier made of `text`: ASCII letters and digits kept, anything else '_'; an "n" is
 * prefixed when the result is no name cn_is_c_name accepts (empty, starting with a digit or an
 * underscore, or of the prelude's cn_ / CN_ family: the one rule for names, shared with routine
 * and export names) or has the shape of a standard macro, so that appending a suffix always makes
 * a name free. Arena-owned; NULL on exhaustion. */
static char *shape_identifier(cn_ctx *ctx, const char *text, const char *suffix) {
  size_t n = strlen(text), k = strlen(suffix);
  char *s = cn_alloc(ctx, n + k + 2);
  if (!s) return NULL;
  char *p = s + 1;
  for (size_t i = 0; i < n; i++) p[i] = is_alpha(text[i]) || is_digit(text[i]) ? text[i] : '_';
  memcpy(p + n, suffix, k + 1);
  if (!cn_is_c_name(p) || looks_like_std_macro(p)) {
    s[0] = 'n';
    return s;
  }
  return p;
}

/* True if name is one of the space-separated words of list. */
static bool in_word_list(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *p = list; *p;) {
    while (*p == ' ') p++;
    const char *end = p;
    while (*end && *end != ' ') end++;
    if ((size_t)(end - p) == n && memcmp(p, name, n) == 0) return true;
    p = end;
  }
  return false;
}

/* Names of <math.h>, <complex.h> and <tgmath.h>: functions, function-like and object-like macros
 * (the float and long double variants of the functions end in 'f' and 'l'). */
bool cn_cgen_is_math_name(const char *name) {
  static const char names[] =
      "acos asin atan atan2 cos sin tan acosh asinh atanh cosh sinh tanh exp exp2 expm1 frexp "
      "ilogb ldexp log log10 log1p log2 logb modf scalbn scalbln cbrt fabs hypot pow sqrt erf erfc "
      "lgamma tgamma ceil floor nearbyint rint lrint llrint round lround llround trunc fmod "
      "remainder remquo copysign nan nextafter nexttoward fdim fmax fmin fma carg cimag conj cproj "
      "creal cabs cexp clog cpow csqrt csin ccos ctan casin cacos catan csinh ccosh ctanh casinh "
      "cacosh catanh isnan isinf isfinite isnormal signbit fpclassify isgreater isgreaterequal "
      "isless islessequal islessgreater isunordered math_errhandling complex imaginary I INFINITY "
      "NAN";
  if (in_word_list(names, name)) return true;
  size_t n = strlen(name);
  char base[32];
  if (n < 2 || n > sizeof base || (name[n - 1] != 'f' && name[n - 1] != 'l')) return false;
  memcpy(base, name, n - 1);
  base[n - 1] = '\0';
  return in_word_list(names, base);
}

/* True if `name` is called, as name(...), in one of the op templates of ops.def: generated
 * expressions spell those calls, so a variable of that name would shadow them. */
static bool called_by_op_template(const char *name) {
  size_t n = strlen(name);
  for (int op = 0; op < CN_OP_COUNT; op++) {
    const char *templates[3] = {cn_op_table[op].fexpr, cn_op_table[op].iexpr,
                                cn_op_table[op].bexpr};
    for (int t = 0; t < 3; t++) {
      const char *s = templates[t];
      while (*s) {
        if (!is_alpha(*s) && *s != '_') {
          s++;
          continue;
        }
        const char *start = s;
        while (is_alpha(*s) || is_digit(*s) || *s == '_') s++;
        const char *after = s;
        while (*after == ' ') after++;
        if ((size_t)(s - start) == n && memcmp(start, name, n) == 0 && *after == '(') return true;
      }
    }
  }
  return false;
}

/* A name that generated code may not use for a variable. Appending "_<digits>" or "_" makes any
 * reserved name free (shape_identifier already excluded the prefix-reserved families). */
static bool is_reserved(const cgen *g, const char *name) {
  size_t n = strlen(name);
  return in_word_list(g->dialect->keywords, name) || cn_cgen_is_math_name(name) ||
         called_by_op_template(name) ||
         (n >= 2 && name[n - 2] == '_' && name[n - 1] == 't'); /* int64_t, float_t, ... */
}

/* Buffer names: label + "_" + id (+ "_merge"). The trailing id makes them distinct from each
 * other, and from every name of is_reserved, which never ends in a digit or "_merge". */
static cn_status name_params(cgen *g) {
  const cn_ll_proc *proc = g->proc;
  for (int k = 0; k < proc->n_params; k++) {
    const cn_node *node = proc->params[k].node;
    char suffix[48];
    snprintf(suffix, sizeof suffix, "_%d%s", node->id, proc->params[k].merge ? "_merge" : "");
    g->param_names[k] = shape_identifier(g->ctx, node->label ? node->label : "", suffix);
    if (!g->param_names[k]) return g->ctx->status;
  }
  return CN_OK;
}

/* The params a statement reads or writes (accessed) and those it writes (written), marked. */
typedef struct {
  const cn_ll_proc *proc;
  bool *accessed, *written;
} access_marks;

static void mark_access(const access_marks *m, int param) {
  CN_ASSERT(param >= 0 && param < m->proc->n_params);
  m->accessed[param] = true;
}

static void mark_expr(const access_marks *m, const cn_ll_expr *e) {
  switch (e->kind) {
  case CN_LE_GET: mark_access(m, e->u.get.param); return;
  case CN_LE_CONST:
  case CN_LE_INDEX: return;
  case CN_LE_OP:
    for (int a = 0; a < cn_op_arity(e->u.op.op); a++) mark_expr(m, e->u.op.args[a]);
    return;
  }
  CN_ASSERT(!"unknown expression kind");
}

static void mark_stmt(const access_marks *m, const cn_ll_stmt *s) {
  switch (s->kind) {
  case CN_LL_SEQ:
    for (int i = 0; i < s->u.seq.count; i++) mark_stmt(m, s->u.seq.items[i]);
    return;
  case CN_LL_COMMENT: return;
  case CN_LL_FOR: mark_stmt(m, s->u.loop.body); return;
  case CN_LL_IF: mark_stmt(m, s->u.guard.body); return;
  case CN_LL_SET:
    mark_access(m, s->u.set.param);
    mark_expr(m, s->u.set.value);
    m->written[s->u.set.param] = true;
    return;
  case CN_LL_SET_VEC:
    mark_access(m, s->u.vec.param);
    mark_expr(m, s->u.vec.arg);
    m->written[s->u.vec.param] = true;
    return;
  case CN_LL_GEMM: mark_stmt(m, s->u.gemm.nest); return;
  case CN_LL_LET:
    mark_access(m, s->u.let.param);
    mark_stmt(m, s->u.let.body);
    return;
  }
  CN_ASSERT(!"unknown statement kind");
}

void cn_cgen_access(const cgen *g, const cn_ll_stmt *s, bool *accessed, bool *written) {
  access_marks m = {g->proc, accessed, written};
  mark_stmt(&m, s);
}

/* Symbol names: the symbol's own name when it is free; "_<id>" appended when two symbols of the
 * routine share it or it clashes with a buffer or a reserved name; then, in symbol order, "_"
 * appended while a (pathological) clash remains. Deterministic: depends on names and ids only.
 * The clashes are found through maps (how many symbols share a base name; which names buffers and
 * earlier symbols took), so naming stays linear in the symbols and buffers of the routine. */
static cn_status name_symbols(cgen *g) {
  static char buffer_tag, symbol_tag, shared_tag; /* their addresses tag map values */
  cn_ctx *ctx = g->ctx;
  int n = g->symbols.n; /* ascending: the loops below go in symbol order */
  const char **base = cn_alloc(ctx, sizeof(char *) * (size_t)(n > 0 ? n : 1));
  g->sym_names = cn_alloc(ctx, sizeof(char *) * (size_t)(n > 0 ? n : 1));
  if (!base || !g->sym_names) return ctx->status;
  cn_map bases = {.strings = true}; /* base name -> its symbol, or &shared_tag for several */
  for (int k = 0; k < n; k++) {
    if (!(base[k] = shape_identifier(ctx, cn_symbol_name(ctx, g->symbols.syms[k]), "")))
      return ctx->status;
    void *first = cn_map_get(&bases, base[k]);
    if (!cn_map_put(ctx, &bases, base[k], first ? (void *)&shared_tag : (void *)&base[k]))
      return ctx->status;
  }
  cn_map taken = {.strings = true}; /* a buffer's name -> &buffer_tag, a symbol's -> &symbol_tag */
  for (int k = 0; k < g->proc->n_params; k++)
    if (!cn_map_put(ctx, &taken, g->param_names[k], &buffer_tag)) return ctx->status;
  for (int k = 0; k < n; k++) {
    bool clash = is_reserved(g, base[k]) || cn_map_get(&taken, base[k]) == &buffer_tag ||
                 cn_map_get(&bases, base[k]) == &shared_tag;
    cn_sbuf name = {0};
    cn_sbuf_puts(&name, base[k]);
    if (clash) cn_sbuf_printf(&name, "_%d", g->symbols.syms[k]);
    while (!name.failed && (is_reserved(g, name.data) || cn_map_get(&taken, name.data)))
      cn_sbuf_putc(&name, '_');
    if (!(g->sym_names[k] = cn_sbuf_finish(ctx, &name)) ||
        !cn_map_put(ctx, &taken, g->sym_names[k], &symbol_tag))
      return ctx->status;
  }
  return CN_OK;
}

cn_status cn_cgen_names(cgen *g) {
  cn_cgen_access(g, g->proc->body, g->accessed, g->written);
  cn_status status = cn_ll_symbols_of(g->ctx, g->proc, &g->symbols);
  if (status == CN_OK) status = name_params(g);
  if (status == CN_OK) status = name_symbols(g);
  return status;
}

cn_status cn_cgen_init(cgen *g, cn_ctx *ctx, const cn_ll_proc *proc, const cn_cgen_dialect *dialect,
                       cn_sbuf *out) {
  CN_ASSERT(proc && proc->name && proc->body && proc->n_params >= 0 && proc->n_free_syms >= 0);
  size_t n_params = (size_t)(proc->n_params > 0 ? proc->n_params : 1);
  *g = (cgen){.dialect = dialect, .ctx = ctx, .proc = proc, .out = out};
  g->param_names = cn_alloc(ctx, sizeof(char *) * n_params);
  g->strides = cn_alloc(ctx, sizeof(*g->strides) * n_params);
  g->written = cn_alloc(ctx, sizeof(bool) * n_params); /* the arena's memory is zeroed */
  g->accessed = cn_alloc(ctx, sizeof(bool) * n_params);
  if (!g->param_names || !g->strides || !g->written || !g->accessed) return ctx->status;
  for (int k = 0; k < proc->n_params; k++) {
    CN_ASSERT(proc->params[k].node != NULL);
    cn_node_strides(proc->params[k].node, g->strides[k]);
  }
  return cn_cgen_names(g);
}

/* ---- Linear offset expressions ---- */

#define CGEN_MAX_TERMS (CN_MAX_RANK * CN_MAX_AFFINE_TERMS)

/* sum coeffs[t] * syms[t] + constant, one term per symbol, in order of first appearance. */
typedef struct {
  int n;
  cn_symbol syms[CGEN_MAX_TERMS];
  int64_t coeffs[CGEN_MAX_TERMS];
  int64_t constant;
} linear;

static void linear_add_term(linear *l, cn_symbol sym, int64_t coeff) {
  for (int t = 0; t < l->n; t++)
    if (l->syms[t] == sym) {
      l->coeffs[t] += coeff;
      return;
    }
  CN_ASSERT(l->n < CGEN_MAX_TERMS);
  l->syms[l->n] = sym;
  l->coeffs[l->n++] = coeff;
}

/* Adds scale * idx. */
static void linear_add_index(linear *l, const cn_index *idx, int64_t scale) {
  switch (idx->kind) {
  case CN_IDX_FIXED: break;
  case CN_IDX_ITER: linear_add_term(l, idx->syms[0], scale); break;
  case CN_IDX_AFFINE:
    CN_ASSERT(idx->n_terms >= 1 && idx->n_terms <= CN_MAX_AFFINE_TERMS);
    for (int t = 0; t < idx->n_terms; t++) linear_add_term(l, idx->syms[t], idx->coeffs[t] * scale);
    break;
  }
  l->constant += idx->offset * scale;
}

static void print_term(cn_sbuf *sb, bool first, int64_t coeff, const char *name) {
  if (!first)
    cn_sbuf_puts(sb, coeff < 0 ? " - " : " + ");
  else if (coeff < 0)
    cn_sbuf_putc(sb, '-');
  if (cn_i64_magnitude(coeff) != 1)
    cn_sbuf_printf(sb, "%llu * ", (unsigned long long)cn_i64_magnitude(coeff));
  cn_sbuf_puts(sb, name);
}

/* Prints the expression ("5 * i + k", "2 * o + k + 1", "0"); `extra` (may be NULL) is a further
 * unit term placed before the constant. */
static void print_linear(const cgen *g, cn_sbuf *sb, const linear *l, const char *extra) {
  bool first = true;
  for (int t = 0; t < l->n; t++) {
    if (l->coeffs[t] == 0 || (g->flat_outer && l->syms[t] == g->flat_outer->u.loop.sym)) continue;
    print_term(sb, first, l->coeffs[t], sym_name(g, l->syms[t]));
    first = false;
  }
  if (extra) {
    print_term(sb, first, 1, extra);
    first = false;
  }
  if (first)
    cn_sbuf_printf(sb, "%lld", (long long)l->constant);
  else if (l->constant != 0)
    cn_sbuf_printf(sb, " %c %llu", l->constant < 0 ? '-' : '+',
                   (unsigned long long)cn_i64_magnitude(l->constant));
}

/* "buf[offset]" of a cell: sum_d (idx_d + left_d) * stride_d, plus `extra`. */
static void print_cell(const cgen *g, cn_sbuf *sb, int param, const cn_index *idx,
                       const char *extra) {
  for (int a = 0; a < g->n_aliases; a++)
    if (g->aliases[a].param == param && (!g->aliases[a].idx || g->aliases[a].idx == idx)) {
      CN_ASSERT(!extra);
      cn_sbuf_puts(sb, g->aliases[a].text);
      return;
    }
  const cn_node *node = g->proc->params[param].node;
  linear l = {0};
  for (int d = 0; d < node->rank; d++) {
    linear_add_index(&l, &idx[d], g->strides[param][d]);
    l.constant += node->pad[d][0] * g->strides[param][d];
  }
  cn_sbuf_printf(sb, "%s[", g->param_names[param]);
  print_linear(g, sb, &l, extra);
  cn_sbuf_putc(sb, ']');
}

void cn_cgen_base_cell(const cgen *g, cn_sbuf *sb, int param, const cn_index *idx,
                       const cn_ll_stmt *const *loops, int n_loops) {
  const cn_node *node = g->proc->params[param].node;
  linear l = {0};
  for (int d = 0; d < node->rank; d++) {
    linear_add_index(&l, &idx[d], g->strides[param][d]);
    l.constant += node->pad[d][0] * g->strides[param][d];
  }
  for (int t = 0; t < l.n; t++)
    for (int k = 0; k < n_loops; k++)
      if (l.syms[t] == loops[k]->u.loop.sym) {
        l.constant += l.coeffs[t] * loops[k]->u.loop.from;
        l.coeffs[t] = 0; /* print_linear skips it */
      }
  cn_sbuf_printf(sb, "&%s[", g->param_names[param]);
  print_linear(g, sb, &l, NULL);
  cn_sbuf_putc(sb, ']');
}

void cn_cgen_cell(const cgen *g, cn_sbuf *sb, int param, const cn_index *idx) {
  print_cell(g, sb, param, idx, NULL);
}

/* ---- Expressions and statements ---- */

static void emit_expr(const cgen *g, cn_sbuf *sb, const cn_ll_expr *e);

/* The expression converted from its precision to `to`. */
static void emit_converted(const cgen *g, cn_sbuf *sb, const cn_ll_expr *e, cn_prec to) {
  if (e->prec == to) {
    emit_expr(g, sb, e);
    return;
  }
  cn_sbuf value = {0};
  emit_expr(g, &value, e);
  if (value.failed)
    sb->failed = true;
  else
    g->dialect->convert(sb, e->prec, to, cn_cgen_text(&value));
  cn_sbuf_free(&value);
}

static void emit_expr(const cgen *g, cn_sbuf *sb, const cn_ll_expr *e) {
  switch (e->kind) {
  case CN_LE_GET: {
    cn_sbuf cell = {0};
    print_cell(g, &cell, e->u.get.param, e->u.get.idx, NULL);
    if (cell.failed)
      sb->failed = true;
    else
      g->dialect->load(sb, g->proc->params[e->u.get.param].node->prec, cn_cgen_text(&cell));
    cn_sbuf_free(&cell);
    return;
  }
  case CN_LE_CONST: g->dialect->constant(sb, e->prec, e->u.constant); return;
  case CN_LE_INDEX: {
    /* A value of CN_INDEX_PREC: the index wrapped to 32 bits, in its int64 compute type. */
    linear l = {0};
    linear_add_index(&l, &e->u.index, 1);
    cn_sbuf_printf(sb, "(%s)(uint32_t)(", g->dialect->index_type);
    print_linear(g, sb, &l, NULL);
    cn_sbuf_putc(sb, ')');
    return;
  }
  case CN_LE_OP: {
    cn_op op = e->u.op.op;
    int arity = cn_op_arity(op);
    cn_sbuf args[3] = {{0}};
    const char *texts[3] = {"", "", ""};
    bool failed = false;
    for (int a = 0; a < arity; a++) {
      const cn_ll_expr *arg = e->u.op.args[a];
      emit_converted(g, &args[a], arg, cn_op_operand_prec(op, e->prec, a, arg->prec));
      failed = failed || args[a].failed;
      texts[a] = cn_cgen_text(&args[a]);
    }
    if (failed)
      sb->failed = true;
    else
      g->dialect->op(sb, op, e->prec, texts);
    for (int a = 0; a < arity; a++) cn_sbuf_free(&args[a]);
    return;
  }
  }
  CN_ASSERT(!"unknown expression kind");
}

/* A comment statement's text (a %cd comment: the user's strings and labels) on one line, made inert
 * by the core's one escaper: it can neither end the comment, nor nest one, nor splice lines. */
void cn_cgen_comment(cn_sbuf *sb, const char *text) {
  cn_sbuf_puts(sb, "/* ");
  cn_sbuf_c_comment_text(sb, text, strlen(text));
  cn_sbuf_puts(sb, " */\n");
}

void cn_cgen_value(const cgen *g, cn_sbuf *sb, const cn_ll_expr *e, cn_prec to) {
  emit_converted(g, sb, e, to);
}

/* A GEMM store's value c + x * y (loops.h: one floating precision) as one fused multiply-add in
 * its compute type (the op fma's template), rounded once, then converted to `to`: what the plan's
 * `fma` means, and what the interpreter computes (interp.c eval_fused). */
static void emit_fused(const cgen *g, cn_sbuf *sb, const cn_ll_expr *sum, cn_prec to) {
  CN_ASSERT(sum->kind == CN_LE_OP && sum->u.op.op == CN_OP_ADD);
  const cn_ll_expr *product = sum->u.op.args[1];
  CN_ASSERT(product->kind == CN_LE_OP && product->u.op.op == CN_OP_MUL);
  const cn_ll_expr *operands[3] = {product->u.op.args[0], product->u.op.args[1], sum->u.op.args[0]};
  cn_sbuf args[3] = {{0}}, fused = {0};
  const char *texts[3];
  bool failed = false;
  for (int a = 0; a < 3; a++) {
    emit_converted(g, &args[a], operands[a], sum->prec);
    failed = failed || args[a].failed;
    texts[a] = cn_cgen_text(&args[a]);
  }
  if (!failed) g->dialect->op(&fused, CN_OP_FMA, sum->prec, texts);
  if (failed || fused.failed)
    sb->failed = true;
  else if (sum->prec == to)
    cn_sbuf_puts(sb, cn_cgen_text(&fused));
  else
    g->dialect->convert(sb, sum->prec, to, cn_cgen_text(&fused));
  for (int a = 0; a < 3; a++) cn_sbuf_free(&args[a]);
  cn_sbuf_free(&fused);
}

static void emit_set(const cgen *g, int depth, const cn_ll_stmt *s) {
  if (s == g->max_keyed) {
    cn_cgen_max_update(g, depth, s);
    return;
  }
  cn_sbuf *sb = g->out;
  int param = s->u.set.param;
  cn_prec prec = g->proc->params[param].node->prec;
  cn_sbuf cell = {0}, value = {0};
  print_cell(g, &cell, param, s->u.set.idx, NULL);
  if (g->fused)
    emit_fused(g, &value, s->u.set.value, prec);
  else
    emit_converted(g, &value, s->u.set.value, prec);
  if (cell.failed || value.failed) {
    sb->failed = true;
  } else {
    cn_sbuf_indent(sb, depth);
    g->dialect->store(sb, prec, cn_cgen_text(&cell), cn_cgen_text(&value));
    cn_sbuf_puts(sb, ";\n");
  }
  cn_sbuf_free(&cell);
  cn_sbuf_free(&value);
}

/* One uint4x32 word spread over `length` consecutive cells by the prelude's vectorized helper. */
static void emit_set_vec(const cgen *g, int depth, const cn_ll_stmt *s) {
  cn_sbuf *sb = g->out;
  int param = s->u.vec.param;
  cn_prec prec = g->proc->params[param].node->prec;
  int length = s->u.vec.length;
  CN_ASSERT(cn_op_table[s->u.vec.op].flags & CN_OPF_VEC);
  CN_ASSERT(length == cn_vec_length(prec));
  cn_sbuf cell = {0}, word = {0}, store = {0};
  print_cell(g, &cell, param, s->u.vec.idx, CGEN_LANE);
  emit_converted(g, &word, s->u.vec.arg, CN_PREC_UINT4X32);
  if (!cell.failed)
    g->dialect->store(&store, prec, cn_cgen_text(&cell), CGEN_LANES "[" CGEN_LANE "]");
  if (cell.failed || word.failed || store.failed) {
    sb->failed = true;
  } else {
    cn_sbuf_indent(sb, depth);
    cn_sbuf_puts(sb, "{\n");
    cn_sbuf_indent(sb, depth + 1);
    cn_sbuf_printf(sb, "%s " CGEN_LANES "[%d];\n", g->dialect->precs[prec].compute_c, length);
    cn_sbuf_indent(sb, depth + 1);
    cn_sbuf_printf(sb, "cn_u4x32_to_%s_uniform_vec(%s, " CGEN_LANES ");\n",
                   g->dialect->precs[prec].name, cn_cgen_text(&word));
    cn_sbuf_indent(sb, depth + 1);
    cn_sbuf_printf(sb, "for (int " CGEN_LANE " = 0; " CGEN_LANE " < %d; ++" CGEN_LANE ") %s;\n",
                   length, cn_cgen_text(&store));
    cn_sbuf_indent(sb, depth);
    cn_sbuf_puts(sb, "}\n");
  }
  cn_sbuf_free(&cell);
  cn_sbuf_free(&word);
  cn_sbuf_free(&store);
}

static void emit_stmt(const cgen *g, int depth, const cn_ll_stmt *s);

/* `if (0 <= 2 * i + j && 2 * i + j < 5 && j == 1) {`: each condition's expression in int64_t
 * (loop variables and static indices are int64_t; lowering keeps guarded values in range). */
static void emit_guard(const cgen *g, int depth, const cn_ll_stmt *s) {
  cn_sbuf *sb = g->out;
  cn_sbuf_indent(sb, depth);
  cn_sbuf_puts(sb, "if (");
  for (int c = 0; c < s->u.guard.n_conds; c++) {
    const cn_ll_cond *cond = &s->u.guard.conds[c];
    linear l = {0};
    linear_add_index(&l, &cond->expr, 1);
    if (c) cn_sbuf_puts(sb, " && ");
    if (cond->lo != INT64_MAX && cond->lo + 1 == cond->hi) {
      print_linear(g, sb, &l, NULL);
      cn_sbuf_printf(sb, " == %lld", (long long)cond->lo);
      continue;
    }
    cn_sbuf_printf(sb, "%lld <= ", (long long)cond->lo);
    print_linear(g, sb, &l, NULL);
    cn_sbuf_puts(sb, " && ");
    print_linear(g, sb, &l, NULL);
    cn_sbuf_printf(sb, " < %lld", (long long)cond->hi);
  }
  if (s->u.guard.n_conds == 0) cn_sbuf_puts(sb, "1");
  cn_sbuf_puts(sb, ") {\n");
  emit_stmt(g, depth + 1, s->u.guard.body);
  cn_sbuf_indent(sb, depth);
  cn_sbuf_puts(sb, "}\n");
}

/* One side of a loop's range: the box's edge without bounds, else the bound, or nested
 * cn_max_i64 / cn_min_i64 calls over several; a bound with a divisor goes through
 * cn_ceil_div_i64 (exact for negative numerators, unlike C's division). In int64_t, as guards. */
void cn_cgen_range_side(const cgen *g, int64_t edge, int n, const cn_ll_bound *bounds,
                        const char *combine) {
  cn_sbuf *sb = g->out;
  if (n == 0) {
    cn_sbuf_printf(sb, "%lld", (long long)edge);
    return;
  }
  for (int k = 0; k + 1 < n; k++) cn_sbuf_printf(sb, "%s(", combine);
  for (int k = 0; k < n; k++) {
    linear l = {0};
    linear_add_index(&l, &bounds[k].expr, 1);
    if (k) cn_sbuf_puts(sb, ", ");
    if (bounds[k].div != 1) cn_sbuf_puts(sb, "cn_ceil_div_i64(");
    print_linear(g, sb, &l, NULL);
    if (bounds[k].div != 1) cn_sbuf_printf(sb, ", %lld)", (long long)bounds[k].div);
    if (k) cn_sbuf_putc(sb, ')');
  }
}

void cn_cgen_loop_body(const cgen *g, int depth, const cn_ll_stmt *s) {
  if (g->par) g->par->scope[g->par->n_scope++] = s->u.loop.sym;
  emit_stmt(g, depth + 1, s->u.loop.body);
  if (g->par) g->par->n_scope--;
}

/* `{ const int64_t s = <cell as int64>; if (0 <= s && s < bound) { body } }`: the symbol is in
 * scope of the body as a loop variable is (an outlined parallel loop inside takes it along), and
 * an index outside the table skips the body (the guard node reports it, loops.h CN_LL_LET). */
static void emit_let(const cgen *g, int depth, const cn_ll_stmt *s) {
  cn_sbuf *sb = g->out;
  int param = s->u.let.param;
  cn_prec prec = g->proc->params[param].node->prec;
  cn_sbuf cell = {0}, load = {0};
  print_cell(g, &cell, param, s->u.let.idx, NULL);
  if (!cell.failed) g->dialect->load(&load, prec, cn_cgen_text(&cell));
  if (cell.failed || load.failed) {
    sb->failed = true;
  } else {
    const char *var = sym_name(g, s->u.let.sym);
    cn_sbuf_indent(sb, depth);
    cn_sbuf_printf(sb, "{\n");
    cn_sbuf_indent(sb, depth + 1);
    cn_sbuf_printf(sb, "const %s %s = ", g->dialect->index_type, var);
    g->dialect->convert(sb, prec, CN_PREC_INT64, cn_cgen_text(&load));
    cn_sbuf_puts(sb, ";\n");
    cn_sbuf_indent(sb, depth + 1);
    cn_sbuf_printf(sb, "if (0 <= %s && %s < %lld) {\n", var, var, (long long)s->u.let.bound);
    if (g->par) g->par->scope[g->par->n_scope++] = s->u.let.sym;
    emit_stmt(g, depth + 2, s->u.let.body);
    if (g->par) g->par->n_scope--;
    cn_sbuf_indent(sb, depth + 1);
    cn_sbuf_puts(sb, "}\n");
    cn_sbuf_indent(sb, depth);
    cn_sbuf_puts(sb, "}\n");
  }
  cn_sbuf_free(&cell);
  cn_sbuf_free(&load);
}

/* The loop a CN_LL_FLAT loop's body consists of (loops.h: its whole body, directly or alone in a
 * sequence). */
static const cn_ll_stmt *flat_inner(const cn_ll_stmt *outer) {
  const cn_ll_stmt *body = outer->u.loop.body;
  if (body->kind == CN_LL_SEQ && body->u.seq.count == 1) body = body->u.seq.items[0];
  CN_ASSERT(body->kind == CN_LL_FOR);
  return body;
}

/* A CN_LL_FLAT pair as one loop under the inner loop's name over the product of the extents:
 * every access of the pair advances by (inner extent) * (inner stride) with the outer variable,
 * so its offset with the outer term dropped and the inner variable running over the product is
 * the offset of the same point (the element-wise nest over [128, 10]: one loop of 1280). */
static void emit_flat(const cgen *g, int depth, const cn_ll_stmt *outer) {
  cn_sbuf *sb = g->out;
  const cn_ll_stmt *inner = flat_inner(outer);
  const char *var = sym_name(g, inner->u.loop.sym);
  if ((inner->u.loop.marks & CN_LL_VECTOR) && g->dialect->vector_pragma) {
    cn_sbuf_indent(sb, depth);
    cn_sbuf_puts(sb, g->dialect->vector_pragma);
  }
  cn_sbuf_indent(sb, depth);
  cn_sbuf_printf(sb, "for (%s %s = 0; %s < %lld; ++%s) { /* %s and %s as one loop */\n",
                 g->dialect->index_type, var, var, (long long)(outer->u.loop.to * inner->u.loop.to),
                 var, sym_name(g, outer->u.loop.sym), var);
  cgen h = *g;
  h.flat_outer = outer;
  cn_cgen_loop_body(&h, depth, inner);
  cn_sbuf_indent(sb, depth);
  cn_sbuf_puts(sb, "}\n");
}

static void emit_stmt(const cgen *g, int depth, const cn_ll_stmt *s) {
  cn_sbuf *sb = g->out;
  switch (s->kind) {
  case CN_LL_SEQ:
    for (int i = 0; i < s->u.seq.count; i++) emit_stmt(g, depth, s->u.seq.items[i]);
    return;
  case CN_LL_COMMENT:
    cn_sbuf_indent(sb, depth);
    cn_cgen_comment(sb, s->u.comment ? s->u.comment : "");
    return;
  case CN_LL_FOR: {
    if ((s->u.loop.marks & CN_LL_PARALLEL) && g->par && !g->par->inside) {
      g->dialect->parallel_loop(g, depth, s);
      return;
    }
    if (s->u.loop.marks & CN_LL_FLAT) {
      emit_flat(g, depth, s);
      return;
    }
    if (cn_cgen_max_reduction(g, depth, s) || cn_cgen_sum_lanes(g, depth, s)) return;
    const char *var = sym_name(g, s->u.loop.sym);
    /* A vector-marked loop's iterations are independent and its accesses unit-stride (loops.h):
     * the pragma lets the compiler vectorize it without proving that itself; the body is emitted
     * unchanged (no reassociation: one lane computes one cell exactly as the scalar loop). */
    if ((s->u.loop.marks & CN_LL_VECTOR) && g->dialect->vector_pragma) {
      cn_sbuf_indent(sb, depth);
      cn_sbuf_puts(sb, g->dialect->vector_pragma);
    }
    cn_sbuf_indent(sb, depth);
    cn_sbuf_printf(sb, "for (%s %s = ", g->dialect->index_type, var);
    cn_cgen_range_side(g, s->u.loop.from, s->u.loop.n_lower, s->u.loop.lower, "cn_max_i64");
    cn_sbuf_printf(sb, "; %s < ", var);
    cn_cgen_range_side(g, s->u.loop.to, s->u.loop.n_upper, s->u.loop.upper, "cn_min_i64");
    cn_sbuf_printf(sb, "; ++%s) {\n", var);
    cn_cgen_loop_body(g, depth, s);
    cn_sbuf_indent(sb, depth);
    cn_sbuf_puts(sb, "}\n");
    return;
  }
  case CN_LL_IF: emit_guard(g, depth, s); return;
  case CN_LL_SET: emit_set(g, depth, s); return;
  case CN_LL_SET_VEC: emit_set_vec(g, depth, s); return;
  case CN_LL_GEMM: g->dialect->gemm(g, depth, s); return;
  case CN_LL_LET: emit_let(g, depth, s); return;
  }
  CN_ASSERT(!"unknown statement kind");
}

void cn_cgen_stmt(const cgen *g, int depth, const cn_ll_stmt *s) {
  emit_stmt(g, depth, s);
}

/* The C type of a buffer, without restrict: "const float *" unless `written`. */
void cn_cgen_buffer_type(const cgen *g, cn_sbuf *sb, int param, bool written) {
  cn_prec prec = g->proc->params[param].node->prec;
  cn_sbuf_printf(sb, "%s%s *", written ? "" : g->dialect->const_qualifier,
                 g->dialect->precs[prec].store_c);
}
