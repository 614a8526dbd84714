/* The readable text of a loop-IR procedure (cn_ll_to_string), used in tests, logs and
 * cn_routine_loops:
 *
 *   routine add
 *     params: a#1 single[3, 4 pad 1:1], b#2 single[3, 4], c#3 single[3, 4]
 *     static: t
 *   # a comment
 *   for i in 0..3:
 *     for j in 0..4:
 *       c[i, j] := a[i, j - 1] + b[i, j] * 2
 *   for i in 0..3:
 *     for k in 0..4:
 *       if 0 <= i - k < 3 and 2*i + k == 4:
 *         c[i, k] := a[i, k - 1]
 *   for i in 0..3:
 *     for k in max(0, i - 2)..min(4, ceil((-i + 9) / 2)):
 *       c[i, k] := a[i, k - 1]
 *   for i in 0..3 (parallel):
 *     for j in 0..4 (vector):
 *       c[i, j] := a[i, j]
 *
 * Invariants: the text is deterministic (no addresses, nothing dependent on allocation); a name
 * means one thing within a procedure — a symbol is printed by its name, and by name#id when
 * another symbol of the procedure shares the name; a buffer by its node's label (n<id> when the
 * label is empty), with #id when another node of the procedure shares it, and `.merge` for a
 * merge buffer; the parameter list always shows ids, and after a parameter's dims its memory mode
 * when it is not materialized (` local`, or ` virtual` for a virtual node the schedule did not
 * inline, which runs as local scratch; the virtual pass names the nodes it inlined, and why it kept
 * the others, in a comment at the top of the body). Infix ops print infix, parenthesized only
 * where the usual binding of + - * / % ** requires it (other infix operators parenthesize every
 * compound operand); other ops print as name(args). Constants print in the shortest form that
 * reads back to the same value. A loop prints its range as start..end, each side the box's edge
 * or its bounds (max(...) of the lower ones, min(...) of the upper ones, ceil(expr / div) for a
 * bound with a divisor), then its schedule marks in parentheses when it has any
 * (`for i in 0..64 (parallel):`, `(vector)`, `(parallel, vector)`). A guard prints its conditions
 * joined by `and`, one that admits a single value as `expr == value`. */
#include "loops/loops.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How tightly an expression binds, for parenthesization. */
enum {
  BIND_OTHER = 1, /* an infix operator without a conventional precedence */
  BIND_ADD = 2,
  BIND_MUL = 3,
  BIND_POW = 4,
  BIND_ATOM = 5
};

typedef struct {
  cn_ctx *ctx;
  const cn_ll_proc *proc;
  cn_sbuf sb;
  bool *param_dup;       /* per param: another node of the procedure has the same printed label */
  cn_ll_symbols symbols; /* the symbols the procedure names */
  bool *sym_dup;         /* per position in `symbols`: another of them has the same name */
} printer;

/* ---- Names ---- */

/* The label a node prints under: its label, or n<id> (written into buf) when it is empty. */
static const char *node_base(const cn_node *node, char *buf, size_t size) {
  if (node->label && node->label[0]) return node->label;
  snprintf(buf, size, "n%d", node->id);
  return buf;
}

static void print_buffer(printer *p, int param) {
  const cn_ll_param *prm = &p->proc->params[param];
  char buf[24];
  cn_sbuf_puts(&p->sb, node_base(prm->node, buf, sizeof buf));
  if (p->param_dup[param]) cn_sbuf_printf(&p->sb, "#%d", prm->node->id);
  if (prm->merge) cn_sbuf_puts(&p->sb, ".merge");
}

static void print_symbol(printer *p, cn_symbol sym) {
  int slot = cn_ll_symbol_slot(&p->symbols, sym);
  CN_ASSERT(slot >= 0); /* the list holds every symbol the procedure names */
  cn_sbuf_puts(&p->sb, cn_symbol_name(p->ctx, sym));
  if (p->sym_dup[slot]) cn_sbuf_printf(&p->sb, "#%d", sym);
}

typedef struct {
  const char *name;
  int sym; /* its position in the procedure's symbol list */
} named_symbol;

static int compare_named(const void *pa, const void *pb) {
  const named_symbol *a = pa, *b = pb;
  int c = strcmp(a->name, b->name);
  return c ? c : (a->sym > b->sym) - (a->sym < b->sym);
}

/* Finds the symbols sharing a name with another symbol of the procedure. */
static cn_status find_symbol_clashes(printer *p) {
  int n = p->symbols.n;
  named_symbol *named = cn_malloc(p->ctx, (size_t)(n ? n : 1) * sizeof *named);
  if (!named) return CN_ERR_NOMEM;
  for (int i = 0; i < n; i++)
    named[i] = (named_symbol){cn_symbol_name(p->ctx, p->symbols.syms[i]), i};
  qsort(named, (size_t)n, sizeof *named, compare_named);
  for (int i = 0; i + 1 < n; i++) {
    if (strcmp(named[i].name, named[i + 1].name) != 0) continue;
    p->sym_dup[named[i].sym] = true;
    p->sym_dup[named[i + 1].sym] = true;
  }
  free(named);
  return CN_OK;
}

/* Finds the params whose printed label another node of the procedure shares, through a map from
 * label to the first node printing it (or `shared` once a second node does), so the check stays
 * linear in the number of params. */
static cn_status find_label_clashes(printer *p) {
  static char shared; /* its address marks a label of several nodes */
  const cn_ll_proc *proc = p->proc;
  const char **bases =
      cn_alloc(p->ctx, (size_t)(proc->n_params ? proc->n_params : 1) * sizeof *bases);
  if (!bases) return CN_ERR_NOMEM;
  cn_map owners = {.strings = true};
  for (int i = 0; i < proc->n_params; i++) {
    cn_node *node = proc->params[i].node;
    char buf[24];
    const char *base = node_base(node, buf, sizeof buf);
    if (base == buf && !(base = cn_strdup(p->ctx, buf))) return CN_ERR_NOMEM;
    bases[i] = base;
    void *owner = cn_map_get(&owners, base);
    if (owner == node || owner == &shared) continue;
    if (!cn_map_put(p->ctx, &owners, base, owner ? (void *)&shared : node)) return CN_ERR_NOMEM;
  }
  for (int i = 0; i < proc->n_params; i++)
    p->param_dup[i] = cn_map_get(&owners, bases[i]) == &shared;
  return CN_OK;
}

/* ---- Indices, constants, expressions ---- */

static void print_index(printer *p, const cn_index *idx) {
  if (idx->kind == CN_IDX_FIXED) {
    cn_sbuf_printf(&p->sb, "%" PRId64, idx->offset);
    return;
  }
  if (idx->n_terms < 1) {
    cn_sbuf_puts(&p->sb, "<invalid index>");
    return;
  }
  for (int t = 0; t < idx->n_terms; t++) {
    int64_t c = idx->coeffs[t];
    if (t > 0)
      cn_sbuf_puts(&p->sb, c < 0 ? " - " : " + ");
    else if (c < 0)
      cn_sbuf_putc(&p->sb, '-');
    uint64_t magnitude = c < 0 ? (uint64_t)0 - (uint64_t)c : (uint64_t)c;
    if (magnitude != 1) cn_sbuf_printf(&p->sb, "%" PRIu64 "*", magnitude);
    print_symbol(p, idx->syms[t]);
  }
  if (idx->offset > 0) cn_sbuf_printf(&p->sb, " + %" PRId64, idx->offset);
  if (idx->offset < 0) cn_sbuf_printf(&p->sb, " - %" PRIu64, (uint64_t)0 - (uint64_t)idx->offset);
}

static void print_access(printer *p, int param, const cn_index *idx) {
  print_buffer(p, param);
  cn_sbuf_putc(&p->sb, '[');
  for (int d = 0; d < p->proc->params[param].node->rank; d++) {
    if (d) cn_sbuf_puts(&p->sb, ", ");
    print_index(p, &idx[d]);
  }
  cn_sbuf_putc(&p->sb, ']');
}

/* The shortest %g form that reads back as the same double. */
static void print_double(cn_sbuf *sb, double x) {
  if (isnan(x)) {
    cn_sbuf_puts(sb, "nan");
    return;
  }
  char buf[40];
  for (int digits = 1; digits <= 17; digits++) {
    snprintf(buf, sizeof buf, "%.*g", digits, x);
    if (strtod(buf, NULL) == x) break;
  }
  cn_sbuf_puts(sb, buf);
}

static void print_value(cn_sbuf *sb, cn_prec prec, cn_value v) {
  switch (cn_prec_kind_of(prec)) {
  case CN_PKIND_FLOAT: print_double(sb, v.f); return;
  case CN_PKIND_INT: cn_sbuf_printf(sb, "%" PRId64, v.i); return;
  case CN_PKIND_UINT: cn_sbuf_printf(sb, "%" PRIu64, v.u); return;
  case CN_PKIND_BITS:
    cn_sbuf_printf(sb, "{%" PRIu32 ", %" PRIu32 ", %" PRIu32 ", %" PRIu32 "}", v.w.v[0], v.w.v[1],
                   v.w.v[2], v.w.v[3]);
    return;
  }
  cn_assert_fail(__FILE__, __LINE__, "unknown precision kind");
}

static int infix_binding(const char *infix) {
  if (strcmp(infix, "**") == 0) return BIND_POW;
  if (strcmp(infix, "*") == 0 || strcmp(infix, "/") == 0 || strcmp(infix, "%") == 0)
    return BIND_MUL;
  if (strcmp(infix, "+") == 0 || strcmp(infix, "-") == 0) return BIND_ADD;
  return BIND_OTHER;
}

static bool prints_infix(const cn_ll_expr *e) {
  return e->kind == CN_LE_OP && cn_op_table[e->u.op.op].infix && cn_op_arity(e->u.op.op) == 2;
}

static int expr_binding(const cn_ll_expr *e) {
  if (prints_infix(e)) return infix_binding(cn_op_table[e->u.op.op].infix);
  if (e->kind != CN_LE_INDEX || e->u.index.kind != CN_IDX_AFFINE) return BIND_ATOM;
  const cn_index *idx = &e->u.index;
  bool product = idx->n_terms == 1 && idx->offset == 0 && idx->coeffs[0] > 0;
  return product ? BIND_MUL : BIND_ADD;
}

static void print_expr(printer *p, const cn_ll_expr *e);

static void print_operand(printer *p, const cn_ll_expr *parent, const cn_ll_expr *arg, bool right) {
  int outer = infix_binding(cn_op_table[parent->u.op.op].infix), inner = expr_binding(arg);
  bool parens = outer == BIND_OTHER
                    ? inner < BIND_ATOM
                    : inner < outer || (inner == outer && (right || outer == BIND_POW));
  if (parens) cn_sbuf_putc(&p->sb, '(');
  print_expr(p, arg);
  if (parens) cn_sbuf_putc(&p->sb, ')');
}

static void print_expr(printer *p, const cn_ll_expr *e) {
  switch (e->kind) {
  case CN_LE_GET: print_access(p, e->u.get.param, e->u.get.idx); return;
  case CN_LE_CONST: print_value(&p->sb, e->prec, e->u.constant); return;
  case CN_LE_INDEX: print_index(p, &e->u.index); return;
  case CN_LE_OP: {
    const cn_op_info *info = &cn_op_table[e->u.op.op];
    if (prints_infix(e)) {
      print_operand(p, e, e->u.op.args[0], false);
      cn_sbuf_printf(&p->sb, " %s ", info->infix);
      print_operand(p, e, e->u.op.args[1], true);
      return;
    }
    cn_sbuf_printf(&p->sb, "%s(", info->name);
    for (int a = 0; a < info->arity; a++) {
      if (a) cn_sbuf_puts(&p->sb, ", ");
      print_expr(p, e->u.op.args[a]);
    }
    cn_sbuf_putc(&p->sb, ')');
    return;
  }
  }
  cn_assert_fail(__FILE__, __LINE__, "unknown expression kind");
}

/* ---- Statements ---- */

/* One side of a loop's range: the box's edge without bounds, else the bound, or max(...) /
 * min(...) of several; a bound with a divisor prints as ceil(expr / div). */
static void print_range_side(printer *p, int64_t edge, int n, const cn_ll_bound *bounds,
                             const char *combine) {
  if (n == 0) {
    cn_sbuf_printf(&p->sb, "%" PRId64, edge);
    return;
  }
  if (n > 1) cn_sbuf_printf(&p->sb, "%s(", combine);
  for (int k = 0; k < n; k++) {
    if (k) cn_sbuf_puts(&p->sb, ", ");
    const cn_index *expr = &bounds[k].expr;
    if (bounds[k].div == 1) {
      print_index(p, expr);
      continue;
    }
    bool compound = expr->n_terms > 1 || (expr->n_terms == 1 && expr->offset != 0);
    cn_sbuf_puts(&p->sb, compound ? "ceil((" : "ceil(");
    print_index(p, expr);
    cn_sbuf_printf(&p->sb, "%s / %" PRId64 ")", compound ? ")" : "", bounds[k].div);
  }
  if (n > 1) cn_sbuf_putc(&p->sb, ')');
}

/* A loop's schedule marks, ` (parallel)`, ` (vector, flat)`...; nothing without marks. */
static void print_marks(cn_sbuf *sb, unsigned marks) {
  if (!marks) return;
  static const struct {
    unsigned bit;
    const char *name;
  } names[] = {{CN_LL_PARALLEL, "parallel"},
               {CN_LL_VECTOR, "vector"},
               {CN_LL_FLAT, "flat"},
               {CN_LL_LANES, "lanes"}};
  const char *sep = " (";
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
    if (!(marks & names[k].bit)) continue;
    cn_sbuf_printf(sb, "%s%s", sep, names[k].name);
    sep = ", ";
  }
  cn_sbuf_putc(sb, ')');
}

static void print_stmt(printer *p, const cn_ll_stmt *s, int depth);

/* `gemm M=(i) N=(j) K=(k) tile 0x0 blocks 112/384/4096 fma:` over the nest: the groups with their
 * loops in nest order, the register tile (rows x vectors, 0 for the backend's default), the cache
 * blocks and the mode. */
static void print_gemm(printer *p, const cn_ll_stmt *s, int depth) {
  static const char *const group_names[CN_GEMM_ROLES] = {"M", "N", "K", "batch"};
  const cn_ll_gemm *plan = s->u.gemm.plan;
  cn_sbuf *sb = &p->sb;
  cn_ll_gemm_parts parts;
  cn_ll_gemm_parts_of(s, &parts);
  cn_sbuf_indent(sb, depth);
  cn_sbuf_puts(sb, "gemm");
  for (int g = 0; g < CN_GEMM_ROLES; g++) {
    int n = 0;
    for (int k = 0; k < plan->depth; k++) {
      if (plan->role[k] != (cn_gemm_role)g) continue;
      cn_sbuf_puts(sb, n++ ? ", " : " ");
      if (n == 1) cn_sbuf_printf(sb, "%s=(", group_names[g]);
      print_symbol(p, parts.loops[k]->u.loop.sym);
    }
    if (n) cn_sbuf_putc(sb, ')');
  }
  static const char *const triangles[] = {"", "N < M", "K < M", "M < K"};
  if (plan->tri)
    cn_sbuf_printf(sb, " triangle %s %c %" PRId64, triangles[plan->tri],
                   plan->tri_offset < 0 ? '-' : '+',
                   plan->tri_offset < 0 ? -plan->tri_offset : plan->tri_offset);
  if (plan->c_zero) cn_sbuf_puts(sb, " from zero");
  cn_sbuf_printf(sb, " tile %dx%d blocks %" PRId64 "/%" PRId64 "/%" PRId64 " %s:\n", plan->mr,
                 plan->nv, plan->mc, plan->kc, plan->nc, plan->fma ? "fma" : "exact");
  print_stmt(p, s->u.gemm.nest, depth + 1);
}

static void print_stmt(printer *p, const cn_ll_stmt *s, int depth) {
  cn_sbuf *sb = &p->sb;
  switch (s->kind) {
  case CN_LL_SEQ:
    for (int i = 0; i < s->u.seq.count; i++) print_stmt(p, s->u.seq.items[i], depth);
    return;
  case CN_LL_COMMENT:
    /* Every line of the text is a comment line. */
    for (const char *line = s->u.comment;;) {
      const char *end = strchr(line, '\n');
      int len = end ? (int)(end - line) : (int)strlen(line);
      cn_sbuf_indent(sb, depth);
      cn_sbuf_printf(sb, "# %.*s\n", len, line);
      if (!end) return;
      line = end + 1;
    }
  case CN_LL_FOR: {
    cn_sbuf_indent(sb, depth);
    cn_sbuf_puts(sb, "for ");
    print_symbol(p, s->u.loop.sym);
    cn_sbuf_puts(sb, " in ");
    print_range_side(p, s->u.loop.from, s->u.loop.n_lower, s->u.loop.lower, "max");
    cn_sbuf_puts(sb, "..");
    print_range_side(p, s->u.loop.to, s->u.loop.n_upper, s->u.loop.upper, "min");
    print_marks(sb, s->u.loop.marks);
    cn_sbuf_puts(sb, ":\n");
    const cn_ll_stmt *body = s->u.loop.body;
    if (body->kind == CN_LL_SEQ && body->u.seq.count == 0) {
      cn_sbuf_indent(sb, depth + 1);
      cn_sbuf_puts(sb, "pass\n");
    }
    print_stmt(p, body, depth + 1);
    return;
  }
  case CN_LL_IF: {
    cn_sbuf_indent(sb, depth);
    cn_sbuf_puts(sb, "if ");
    for (int c = 0; c < s->u.guard.n_conds; c++) {
      const cn_ll_cond *cond = &s->u.guard.conds[c];
      if (c) cn_sbuf_puts(sb, " and ");
      if (cond->lo != INT64_MAX && cond->lo + 1 == cond->hi) {
        print_index(p, &cond->expr);
        cn_sbuf_printf(sb, " == %" PRId64, cond->lo);
        continue;
      }
      cn_sbuf_printf(sb, "%" PRId64 " <= ", cond->lo);
      print_index(p, &cond->expr);
      cn_sbuf_printf(sb, " < %" PRId64, cond->hi);
    }
    if (s->u.guard.n_conds == 0) cn_sbuf_puts(sb, "true");
    cn_sbuf_puts(sb, ":\n");
    const cn_ll_stmt *body = s->u.guard.body;
    if (body->kind == CN_LL_SEQ && body->u.seq.count == 0) {
      cn_sbuf_indent(sb, depth + 1);
      cn_sbuf_puts(sb, "pass\n");
    }
    print_stmt(p, body, depth + 1);
    return;
  }
  case CN_LL_SET:
    cn_sbuf_indent(sb, depth);
    print_access(p, s->u.set.param, s->u.set.idx);
    cn_sbuf_puts(sb, " := ");
    print_expr(p, s->u.set.value);
    cn_sbuf_putc(sb, '\n');
    return;
  case CN_LL_SET_VEC: {
    cn_sbuf_indent(sb, depth);
    print_buffer(p, s->u.vec.param);
    cn_sbuf_putc(sb, '[');
    int rank = p->proc->params[s->u.vec.param].node->rank;
    for (int d = 0; d < rank; d++) {
      if (d) cn_sbuf_puts(sb, ", ");
      print_index(p, &s->u.vec.idx[d]);
    }
    cn_sbuf_printf(sb, "%s+%d] := %s(", rank ? " " : "", s->u.vec.length,
                   cn_op_table[s->u.vec.op].name);
    print_expr(p, s->u.vec.arg);
    cn_sbuf_puts(sb, ")\n");
    return;
  }
  case CN_LL_GEMM: print_gemm(p, s, depth); return;
  case CN_LL_LET:
    cn_sbuf_indent(sb, depth);
    cn_sbuf_puts(sb, "let ");
    print_symbol(p, s->u.let.sym);
    cn_sbuf_puts(sb, " = ");
    print_access(p, s->u.let.param, s->u.let.idx);
    cn_sbuf_printf(sb, " in 0..%" PRId64 ":\n", s->u.let.bound);
    print_stmt(p, s->u.let.body, depth + 1);
    return;
  }
  cn_assert_fail(__FILE__, __LINE__, "unknown statement kind");
}

static void print_header(printer *p) {
  const cn_ll_proc *proc = p->proc;
  cn_sbuf *sb = &p->sb;
  cn_sbuf_printf(sb, "routine %s\n  params:", proc->name);
  if (proc->n_params == 0) cn_sbuf_puts(sb, " (none)");
  for (int i = 0; i < proc->n_params; i++) {
    const cn_node *node = proc->params[i].node;
    char buf[24];
    cn_sbuf_puts(sb, i ? ", " : " ");
    cn_sbuf_puts(sb, node_base(node, buf, sizeof buf));
    if (node->label && node->label[0]) cn_sbuf_printf(sb, "#%d", node->id);
    if (proc->params[i].merge) cn_sbuf_puts(sb, ".merge");
    cn_sbuf_printf(sb, " %s[", cn_prec_name(node->prec));
    for (int d = 0; d < node->rank; d++) {
      cn_sbuf_printf(sb, "%s%" PRId64, d ? ", " : "", node->dims[d]);
      if (node->pad[d][0] || node->pad[d][1])
        cn_sbuf_printf(sb, " pad %" PRId64 ":%" PRId64, node->pad[d][0], node->pad[d][1]);
    }
    cn_sbuf_putc(sb, ']');
    if (node->mode == CN_MEM_LOCAL) cn_sbuf_puts(sb, " local");
    if (node->mode == CN_MEM_VIRTUAL) cn_sbuf_puts(sb, " virtual");
  }
  cn_sbuf_putc(sb, '\n');
  if (proc->n_free_syms == 0) return;
  cn_sbuf_puts(sb, "  static:");
  for (int i = 0; i < proc->n_free_syms; i++) {
    cn_sbuf_puts(sb, i ? ", " : " ");
    print_symbol(p, proc->free_syms[i]);
  }
  cn_sbuf_putc(sb, '\n');
}

const char *cn_ll_to_string(cn_ctx *ctx, const cn_ll_proc *proc) {
  printer p = {.ctx = ctx, .proc = proc};
  if (cn_ll_symbols_of(ctx, proc, &p.symbols) != CN_OK) return NULL;
  p.param_dup = cn_calloc(ctx, (size_t)(proc->n_params ? proc->n_params : 1), sizeof(bool));
  p.sym_dup = cn_calloc(ctx, (size_t)(p.symbols.n ? p.symbols.n : 1), sizeof(bool));
  const char *text = NULL;
  if (p.param_dup && p.sym_dup) {
    if (find_label_clashes(&p) == CN_OK && find_symbol_clashes(&p) == CN_OK) {
      print_header(&p);
      print_stmt(&p, proc->body, 0);
      text = cn_sbuf_finish(ctx, &p.sb);
    }
  }
  cn_sbuf_free(&p.sb);
  free(p.param_dup);
  free(p.sym_dup);
  return text;
}
