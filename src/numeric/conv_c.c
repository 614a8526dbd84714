/* C spellings for generated code: loads, stores, conversions, literals and op applications, as
 * text over the helpers of builtins.h.
 *
 * Invariants: cn_conv_c spells exactly the conversion rules that cn_value_convert implements
 * (listed at the top of numeric.c); every spelled expression has the C compute type of its
 * precision (generated C relies on it: the _Generic helpers dispatch on it), so a template whose
 * C type differs (a comparison yields int) is cast; operands are parenthesized only when they are
 * not already primary or postfix expressions, which keeps generated C readable ("(x + y)").
 *
 * This file includes <tgmath.h> first, like generated C, so that the type probes of the op
 * templates below see exactly the types generated C sees (exp(a) on a float is a float). */
#include <tgmath.h>

#include "numeric/numeric.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

typedef enum { CT_FLOAT, CT_DOUBLE, CT_INT64, CT_UINT64, CT_BITS } compute_type;

/* clang-format off */
#define COMPUTE_TYPE(T)                                                                            \
  _Generic((T){0}, float: CT_FLOAT, double: CT_DOUBLE, int64_t: CT_INT64, uint64_t: CT_UINT64,     \
                   cn_u4x32: CT_BITS)
/* clang-format on */

static compute_type compute_type_of(cn_prec prec) {
  switch (prec) {
#define CN_PREC(ID, lc, bytes, store_t, compute_t, kind, rank)                                     \
  case CN_PREC_##ID: {                                                                             \
    return COMPUTE_TYPE(compute_t);                                                                \
  }
#include "cannl/precisions.def"
  default: break;
  }
  CN_ASSERT(!"invalid precision");
  return CT_BITS;
}

/* ---- Type probes: does an op's template, on operands of a compute type, have that type? The
 * operands only appear in unevaluated _Generic selections. CN_NA is never spelled (support is
 * asserted first); here it just has the operands' type. ---- */
#define CN_NA a

static bool float_template_keeps_type(cn_op op, float a, float b, float c) {
  (void)a, (void)b, (void)c;
  switch (op) {
#define CN_OP(ID, name, infix, arity, accum, logic, neutral, kinds, flags, fexpr, iexpr, bexpr)    \
  case CN_OP_##ID: {                                                                               \
    return _Generic((fexpr), float : true, default : false);                                       \
  }
#include "cannl/ops.def"
  default: break;
  }
  CN_ASSERT(!"invalid op");
  return false;
}

static bool double_template_keeps_type(cn_op op, double a, double b, double c) {
  (void)a, (void)b, (void)c;
  switch (op) {
#define CN_OP(ID, name, infix, arity, accum, logic, neutral, kinds, flags, fexpr, iexpr, bexpr)    \
  case CN_OP_##ID: {                                                                               \
    return _Generic((fexpr), double : true, default : false);                                      \
  }
#include "cannl/ops.def"
  default: break;
  }
  CN_ASSERT(!"invalid op");
  return false;
}

static bool int64_template_keeps_type(cn_op op, int64_t a, int64_t b, int64_t c) {
  (void)a, (void)b, (void)c;
  switch (op) {
#define CN_OP(ID, name, infix, arity, accum, logic, neutral, kinds, flags, fexpr, iexpr, bexpr)    \
  case CN_OP_##ID: {                                                                               \
    return _Generic((iexpr), int64_t : true, default : false);                                     \
  }
#include "cannl/ops.def"
  default: break;
  }
  CN_ASSERT(!"invalid op");
  return false;
}

/* `a >= 0` on uint64_t is always true, which is the templates' intended meaning. */
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtype-limits"
#endif
static bool uint64_template_keeps_type(cn_op op, uint64_t a, uint64_t b, uint64_t c) {
  (void)a, (void)b, (void)c;
  switch (op) {
#define CN_OP(ID, name, infix, arity, accum, logic, neutral, kinds, flags, fexpr, iexpr, bexpr)    \
  case CN_OP_##ID: {                                                                               \
    return _Generic((iexpr), uint64_t : true, default : false);                                    \
  }
#include "cannl/ops.def"
  default: break;
  }
  CN_ASSERT(!"invalid op");
  return false;
}
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

static bool bits_template_keeps_type(cn_op op, cn_u4x32 a, cn_u4x32 b, cn_u4x32 c) {
  (void)a, (void)b, (void)c;
  switch (op) {
#define CN_OP(ID, name, infix, arity, accum, logic, neutral, kinds, flags, fexpr, iexpr, bexpr)    \
  case CN_OP_##ID: {                                                                               \
    return _Generic((bexpr), cn_u4x32 : true, default : false);                                    \
  }
#include "cannl/ops.def"
  default: break;
  }
  CN_ASSERT(!"invalid op");
  return false;
}

#undef CN_NA

static bool template_keeps_type(cn_op op, cn_prec prec) {
  cn_u4x32 zero = {{0, 0, 0, 0}};
  switch (compute_type_of(prec)) {
  case CT_FLOAT: return float_template_keeps_type(op, 0, 0, 0);
  case CT_DOUBLE: return double_template_keeps_type(op, 0, 0, 0);
  case CT_INT64: return int64_template_keeps_type(op, 0, 0, 0);
  case CT_UINT64: return uint64_template_keeps_type(op, 0, 0, 0);
  case CT_BITS: return bits_template_keeps_type(op, zero, zero, zero);
  }
  CN_ASSERT(!"invalid compute type");
  return false;
}

/* ---- Operands ---- */

static bool is_ident_start(char c) {
  return isalpha((unsigned char)c) || c == '_';
}
static bool is_ident_char(char c) {
  return isalnum((unsigned char)c) || c == '_';
}
static bool starts_number(const char *s) {
  return isdigit((unsigned char)s[0]) || (s[0] == '.' && isdigit((unsigned char)s[1]));
}

/* The end of a preprocessing number starting at s (digits, letters, '.', and a sign after an
 * exponent letter), as C lexes it. */
static const char *skip_number(const char *s) {
  const char *p = s + 1;
  while (is_ident_char(*p) || *p == '.' || ((*p == '+' || *p == '-') && strchr("eEpP", p[-1]))) p++;
  return p;
}

/* Past the bracket group opening at s, or NULL if it is not closed. */
static const char *skip_group(const char *s) {
  int depth = 0;
  for (const char *p = s; *p; p++) {
    if (*p == '(' || *p == '[') depth++;
    if ((*p == ')' || *p == ']') && --depth == 0) return p + 1;
  }
  return NULL;
}

/* True unless expr is an identifier or number, or a bracketed group (which covers casts and
 * parenthesized expressions), followed by calls, subscripts and member accesses: such an
 * expression binds tighter than every operator the templates apply to their operands. */
static bool needs_parens(const char *expr) {
  const char *p = expr;
  if (*p == '(')
    p = skip_group(p);
  else if (starts_number(p))
    p = skip_number(p);
  else if (is_ident_start(*p))
    while (is_ident_char(*p)) p++;
  else
    return true;
  while (p && *p) {
    if (*p == '(' || *p == '[') {
      p = skip_group(p);
    } else if ((*p == '.' && is_ident_start(p[1])) || (p[0] == '-' && p[1] == '>')) {
      p += *p == '.' ? 1 : 2;
      while (is_ident_char(*p)) p++;
    } else {
      return true;
    }
  }
  return p == NULL;
}

static void put_operand(cn_sbuf *sb, const char *expr) {
  if (needs_parens(expr)) {
    cn_sbuf_putc(sb, '(');
    cn_sbuf_puts(sb, expr);
    cn_sbuf_putc(sb, ')');
  } else {
    cn_sbuf_puts(sb, expr);
  }
}

/* The template with the whole identifier tokens a, b, c replaced by the operands; with sb NULL it
 * only records in used[] which operands the template names. */
static void put_template(cn_sbuf *sb, const char *tmpl, const char *const *args, int arity,
                         bool *used) {
  const char *p = tmpl;
  while (*p) {
    const char *start = p;
    if (starts_number(p)) {
      p = skip_number(p);
    } else if (is_ident_start(*p)) {
      while (is_ident_char(*p)) p++;
      if (p - start == 1 && *start >= 'a' && *start <= 'c') {
        int index = *start - 'a';
        CN_ASSERT(index < arity);
        if (used) used[index] = true;
        if (sb) put_operand(sb, args[index]);
        continue;
      }
    } else {
      p++;
    }
    if (sb) cn_sbuf_printf(sb, "%.*s", (int)(p - start), start);
  }
}

/* ---- Spellings ---- */

void cn_load_c(cn_sbuf *sb, cn_prec prec, const char *cell) {
  if (cn_prec_stores_as_computed(prec))
    cn_sbuf_puts(sb, cell);
  else
    cn_sbuf_printf(sb, "cn_load_%s(%s)", cn_prec_table[prec].name, cell);
}

void cn_store_c(cn_sbuf *sb, cn_prec prec, const char *cell, const char *value) {
  if (cn_prec_stores_as_computed(prec))
    cn_sbuf_printf(sb, "%s = %s", cell, value);
  else
    cn_sbuf_printf(sb, "%s = cn_store_%s(%s)", cell, cn_prec_table[prec].name, value);
}

/* A finite floating literal that reads back exactly: "%.9g" / "%.17g" made a floating constant.
 * The host program's locale may spell the decimal point otherwise (even with several bytes): any
 * character that is not a digit, a sign or the exponent letter is that point, written '.'. */
static void put_float_literal(cn_sbuf *sb, double x, int digits, const char *suffix) {
  char text[64];
  snprintf(text, sizeof text, "%.*g", digits, x);
  bool floating = false;
  for (const char *p = text; *p;) {
    if (isdigit((unsigned char)*p) || *p == '-' || *p == '+' || *p == 'e') {
      floating = floating || *p == 'e';
      cn_sbuf_putc(sb, *p++);
      continue;
    }
    cn_sbuf_putc(sb, '.');
    floating = true;
    while (*p && !isdigit((unsigned char)*p) && *p != 'e') p++;
  }
  cn_sbuf_printf(sb, "%s%s", floating ? "" : ".0", suffix);
}

static void put_int64(cn_sbuf *sb, int64_t x) {
  if (x == INT64_MIN)
    cn_sbuf_puts(sb, "INT64_MIN");
  else if (x < 0)
    cn_sbuf_printf(sb, "-INT64_C(%" PRId64 ")", -x);
  else
    cn_sbuf_printf(sb, "INT64_C(%" PRId64 ")", x);
}

void cn_const_c(cn_sbuf *sb, cn_prec prec, cn_value v) {
  switch (compute_type_of(prec)) {
  case CT_FLOAT: {
    float x = (float)v.f;
    if (isnan(x))
      cn_sbuf_puts(sb, signbit(x) ? "-NAN" : "NAN");
    else if (isinf(x))
      cn_sbuf_puts(sb, x < 0 ? "-INFINITY" : "INFINITY");
    else
      put_float_literal(sb, x, 9, "f");
    return;
  }
  case CT_DOUBLE:
    /* INFINITY and NAN have type float in C11: cast, so cn_max & co. dispatch on double. */
    if (isnan(v.f))
      cn_sbuf_puts(sb, signbit(v.f) ? "-(double)NAN" : "(double)NAN");
    else if (isinf(v.f))
      cn_sbuf_puts(sb, v.f < 0 ? "-(double)INFINITY" : "(double)INFINITY");
    else
      put_float_literal(sb, v.f, 17, "");
    return;
  case CT_INT64: put_int64(sb, v.i); return;
  case CT_UINT64: cn_sbuf_printf(sb, "UINT64_C(%" PRIu64 ")", v.u); return;
  case CT_BITS:
    cn_sbuf_printf(sb,
                   "((cn_u4x32){{0x%" PRIx32 "u, 0x%" PRIx32 "u, 0x%" PRIx32 "u, 0x%" PRIx32 "u}})",
                   v.w.v[0], v.w.v[1], v.w.v[2], v.w.v[3]);
    return;
  }
  CN_ASSERT(!"invalid compute type");
}

/* The cast "(T)" of the compute type of prec applied to expr. */
static void put_cast(cn_sbuf *sb, cn_prec prec, const char *expr) {
  cn_sbuf_printf(sb, "(%s)", cn_prec_table[prec].compute_c);
  put_operand(sb, expr);
}

void cn_conv_c(cn_sbuf *sb, cn_prec from, cn_prec to, const char *expr) {
  CN_ASSERT((unsigned)from < CN_PREC_COUNT && (unsigned)to < CN_PREC_COUNT);
  cn_prec_kind fk = cn_prec_table[from].kind, tk = cn_prec_table[to].kind;
  const char *to_name = cn_prec_table[to].name;
  if (from == to) {
    cn_sbuf_puts(sb, expr);
  } else if (tk == CN_PKIND_BITS) {
    cn_sbuf_printf(sb, "cn_%s_to_u4x32(%s)", cn_prec_table[from].name, expr);
  } else if (fk == CN_PKIND_BITS && tk != CN_PKIND_FLOAT) {
    cn_sbuf_printf(sb, "cn_u4x32_to_%s_uniform(%s)", to_name, expr);
  } else if (fk == CN_PKIND_BITS) {
    cn_sbuf_printf(sb, "(%s)", cn_prec_table[to].compute_c);
    put_operand(sb, expr);
    cn_sbuf_puts(sb, ".v[0]");
  } else if (tk == CN_PKIND_FLOAT) {
    if (compute_type_of(from) == compute_type_of(to))
      cn_sbuf_puts(sb, expr);
    else
      put_cast(sb, to, expr);
  } else if (fk == CN_PKIND_FLOAT) {
    /* The bounds are the target's stored range, as cn_value_of_double saturates infinities. */
    cn_value lo = cn_value_of_double(to, -INFINITY), hi = cn_value_of_double(to, INFINITY);
    if (tk == CN_PKIND_INT) {
      cn_sbuf_printf(sb, "cn_ftoi(%s, ", expr);
      if (lo.i == INT64_MIN)
        cn_sbuf_puts(sb, "INT64_MIN");
      else
        cn_sbuf_printf(sb, "%" PRId64, lo.i);
      if (hi.i == INT64_MAX)
        cn_sbuf_puts(sb, ", INT64_MAX)");
      else
        cn_sbuf_printf(sb, ", %" PRId64 ")", hi.i);
    } else if (hi.u == UINT64_MAX) {
      cn_sbuf_printf(sb, "cn_ftou(%s, UINT64_MAX)", expr);
    } else {
      cn_sbuf_printf(sb, "cn_ftou(%s, UINT64_C(%" PRIu64 "))", expr, hi.u);
    }
  } else {
    /* Integer to integer: the compute type's signedness, then through a target cell. */
    bool wrap = !cn_prec_stores_as_computed(to);
    if (wrap) cn_sbuf_printf(sb, "cn_load_%s(cn_store_%s(", to_name, to_name);
    compute_type ft = compute_type_of(from), tt = compute_type_of(to);
    if (ft == tt)
      cn_sbuf_puts(sb, expr);
    else if (tt == CT_UINT64)
      put_cast(sb, to, expr);
    else
      cn_sbuf_printf(sb, "cn_u64_as_i64(%s)", expr);
    if (wrap) cn_sbuf_puts(sb, "))");
  }
}

/* The template of op's semantics on prec's kind. */
static const char *op_template(cn_op op, cn_prec prec) {
  const cn_op_info *info = &cn_op_table[op];
  if (cn_prec_table[prec].kind == CN_PKIND_INT || cn_prec_table[prec].kind == CN_PKIND_UINT)
    return info->iexpr;
  if (cn_prec_table[prec].kind == CN_PKIND_BITS) return info->bexpr;
  return info->fexpr;
}

void cn_op_c(cn_sbuf *sb, cn_op op, cn_prec prec, const char *const *args) {
  CN_ASSERT((unsigned)op < CN_OP_COUNT && (unsigned)prec < CN_PREC_COUNT);
  const cn_op_info *info = &cn_op_table[op];
  CN_ASSERT(!(info->flags & CN_OPF_VEC) && cn_op_supports(op, prec));
  if (info->flags & CN_OPF_TO_PREC) {
    cn_sbuf_printf(sb, "cn_u4x32_to_%s_uniform(%s)", cn_prec_table[prec].name, args[0]);
    return;
  }
  bool cast = !template_keeps_type(op, prec);
  if (cast) cn_sbuf_printf(sb, "((%s)", cn_prec_table[prec].compute_c);
  put_template(sb, op_template(op, prec), args, info->arity, NULL);
  if (cast) cn_sbuf_putc(sb, ')');
}

bool cn_op_c_reads(cn_op op, cn_prec prec, int arg) {
  CN_ASSERT((unsigned)op < CN_OP_COUNT && (unsigned)prec < CN_PREC_COUNT);
  const cn_op_info *info = &cn_op_table[op];
  CN_ASSERT(arg >= 0 && arg < info->arity);
  if (info->flags & CN_OPF_TO_PREC) return true;
  bool used[3] = {false, false, false};
  put_template(NULL, op_template(op, prec), NULL, info->arity, used);
  return used[arg];
}

/* ---- Typed spellings, for languages without _Generic (OpenCL C, C++) ---- */

static bool is_word_at(const char *s, size_t i) {
  return is_ident_char(s[i]);
}

/* The function builtins.h's generic macro `name` (a "#define name(" whose text is a _Generic
 * selection) selects for the compute type `type`, copied into out (NUL-terminated); false when
 * name is no such macro or has no association for type. Read from the macro's text, so the
 * mapping has one source, builtins.h. */
static bool generic_target(const char *name, size_t len, const char *type, char *out, size_t cap) {
  char head[64];
  if (len + 10 > sizeof head) return false;
  snprintf(head, sizeof head, "#define %.*s(", (int)len, name);
  const char *def = strstr(cn_builtins_source, head);
  if (!def) return false;
  const char *end = def; /* the macro's last line: the first without a continuation */
  while ((end = strchr(end, '\n')) && end[-1] == '\\') end++;
  const char *generic = strstr(def, "_Generic");
  if (!generic || (end && generic > end)) return false;
  size_t tlen = strlen(type);
  for (const char *p = generic; (p = strstr(p, type)) && (!end || p < end); p += tlen) {
    if (is_word_at(p - 1, 0) || is_word_at(p, tlen)) continue;
    const char *q = p + tlen;
    while (*q == ' ') q++;
    if (*q != ':') continue;
    q++;
    while (*q == ' ') q++;
    size_t n = 0;
    while (is_ident_char(q[n])) n++;
    if (n == 0 || n + 1 > cap) return false;
    memcpy(out, q, n);
    out[n] = '\0';
    return true;
  }
  return false;
}

void cn_op_c_typed(cn_sbuf *sb, cn_op op, cn_prec prec, const char *const *args) {
  cn_sbuf text = {0};
  cn_op_c(&text, op, prec, args);
  if (text.failed || !text.data) {
    sb->failed = sb->failed || text.failed;
    cn_sbuf_free(&text);
    return;
  }
  const char *type = cn_prec_table[prec].compute_c;
  for (const char *p = text.data; *p;) {
    if (!is_ident_start(*p) || (p > text.data && is_ident_char(p[-1]))) {
      cn_sbuf_putc(sb, *p++);
      continue;
    }
    const char *start = p;
    while (is_ident_char(*p)) p++;
    char target[64];
    if (*p == '(' && strncmp(start, "cn_", 3) == 0 &&
        generic_target(start, (size_t)(p - start), type, target, sizeof target))
      cn_sbuf_puts(sb, target);
    else
      cn_sbuf_printf(sb, "%.*s", (int)(p - start), start);
  }
  cn_sbuf_free(&text);
}
