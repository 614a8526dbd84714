/* Tests of the notation front end (src/notation: lexer, parser, printer): every notation example
 * of syntax-extensions-cd-op (and convolution-is-a-contraction's %cd interleave and random-init
 * skeleton) parses and prints to a canonical text derived by hand; precedence and tree shape
 * checked through a test-side S-expression rendering independent of the printer; AST fields
 * (assignment operators against syntax-extensions-cd-op's table and ops.def, right-hand-side forms,
 * declarations, einsums, parameters, statements, for loops, tuple patterns, positions); exact
 * positioned error messages with source line and caret; print -> parse -> print identity for every
 * accepted input; a fuzz over random token streams and over grammar-generated programs, let%tile
 * bodies with calls of every arity included (run under ASan and UBSan: nothing may crash); deep
 * nesting; an allocation-failure sweep. */
#include "check.h"
#include "notation/notation.h"
#include "numeric/numeric.h"

#include <stdlib.h>

/* ---- Helpers ------------------------------------------------------------------------------- */

/* The text of a builder in a static buffer (valid until the next call). */
static const char *take(cn_sbuf *sb) {
  static char out[1 << 16];
  snprintf(out, sizeof out, "%s", sb->failed ? "(nomem)" : sb->data ? sb->data : "");
  cn_sbuf_free(sb);
  return out;
}

static const char *print_program(const cn_nt_program *prog) {
  cn_sbuf sb = {0};
  cn_nt_print_program(&sb, prog);
  return take(&sb);
}

/* Parses, prints, re-parses the print and checks it prints the same; returns the first print
 * (or the error message prefixed with "ERROR: "). */
static const char *roundtrip(cn_ctx *ctx, const char *text) {
  static char first[1 << 16];
  cn_nt_program *prog = cn_nt_parse_program(ctx, "t.cnl", text);
  if (!prog) {
    snprintf(first, sizeof first, "ERROR: %s", cn_ctx_error(ctx));
    return first;
  }
  snprintf(first, sizeof first, "%s", print_program(prog));
  cn_nt_program *again = cn_nt_parse_program(ctx, "again.cnl", first);
  CHECK_MSG(again != NULL, "reparse of\n%s\nfailed: %s", first, cn_ctx_error(ctx));
  if (again) CHECK_STR(print_program(again), first);
  return first;
}

/* ---- A test-side rendering of trees (independent of print.c) -------------------------------
 * Operators prefix their operands: (op lhs rhs); (@ f args...) an application, ~l:v a labeled
 * argument; (. e name) a field; (neg e) for "-"; (let x v body); [a b] a list, [|a b|] an array,
 * (, a b) a tuple; {decl name =init f=v} and {rec f=v}; einsums (op "spec" lhs rhs); numbers as
 * %g with 'label: in front. %cd: (=op lhs FORM op args... ~l:v) with FORM one of plain, infix,
 * curried, uncurried; (seq ...), (if c t e), (~~ parts... | body). */
static void sx(cn_sbuf *sb, const cn_nt_expr *e);

static void sx_fields(cn_sbuf *sb, int n, const cn_nt_field *fields) {
  for (int i = 0; i < n; i++) {
    cn_sbuf_printf(sb, " %s", fields[i].name);
    if (fields[i].value) {
      cn_sbuf_putc(sb, '=');
      sx(sb, fields[i].value);
    }
  }
}

static void sx(cn_sbuf *sb, const cn_nt_expr *e) {
  switch (e->kind) {
  case CN_NT_NUMBER:
    if (e->u.number.label) cn_sbuf_printf(sb, "'%s:", e->u.number.label);
    if (e->u.number.is_int)
      cn_sbuf_printf(sb, "%lld", (long long)e->u.number.ival);
    else
      cn_sbuf_printf(sb, "%g", e->u.number.value);
    break;
  case CN_NT_STRING: cn_sbuf_printf(sb, "\"%s\"", e->u.string.text); break;
  case CN_NT_BOOL: cn_sbuf_puts(sb, e->u.boolean ? "true" : "false"); break;
  case CN_NT_UNIT: cn_sbuf_puts(sb, "()"); break;
  case CN_NT_IDENT: cn_sbuf_puts(sb, e->u.ident.name); break;
  case CN_NT_FIELD:
    cn_sbuf_puts(sb, "(. ");
    sx(sb, e->u.field.subject);
    cn_sbuf_printf(sb, " %s)", e->u.field.name);
    break;
  case CN_NT_PREFIX:
    cn_sbuf_printf(sb, "(%s ", strcmp(e->u.prefix.op, "-") == 0 ? "neg" : e->u.prefix.op);
    sx(sb, e->u.prefix.operand);
    cn_sbuf_putc(sb, ')');
    break;
  case CN_NT_BINOP:
    cn_sbuf_printf(sb, "(%s ", e->u.binop.op);
    sx(sb, e->u.binop.lhs);
    cn_sbuf_putc(sb, ' ');
    sx(sb, e->u.binop.rhs);
    cn_sbuf_putc(sb, ')');
    break;
  case CN_NT_EINSUM:
    cn_sbuf_printf(sb, "(%s \"%s\" ", e->u.einsum.op, e->u.einsum.spec);
    sx(sb, e->u.einsum.lhs);
    if (e->u.einsum.rhs) {
      cn_sbuf_putc(sb, ' ');
      sx(sb, e->u.einsum.rhs);
    }
    cn_sbuf_putc(sb, ')');
    break;
  case CN_NT_APPLY:
    cn_sbuf_puts(sb, "(@ ");
    sx(sb, e->u.apply.fn);
    for (int i = 0; i < e->u.apply.n_args; i++) {
      const cn_nt_arg *a = &e->u.apply.args[i];
      cn_sbuf_putc(sb, ' ');
      if (a->label) cn_sbuf_printf(sb, "~%s%s", a->label, a->value ? ":" : "");
      if (a->value) sx(sb, a->value);
    }
    cn_sbuf_putc(sb, ')');
    break;
  case CN_NT_IF:
    cn_sbuf_puts(sb, "(if ");
    sx(sb, e->u.if_.cond);
    cn_sbuf_putc(sb, ' ');
    sx(sb, e->u.if_.then_);
    cn_sbuf_putc(sb, ' ');
    sx(sb, e->u.if_.else_);
    cn_sbuf_putc(sb, ')');
    break;
  case CN_NT_LET:
    cn_sbuf_printf(sb, "(let %s ", e->u.let.name);
    sx(sb, e->u.let.value);
    cn_sbuf_putc(sb, ' ');
    sx(sb, e->u.let.body);
    cn_sbuf_putc(sb, ')');
    break;
  case CN_NT_LIST:
  case CN_NT_ARRAY:
  case CN_NT_TUPLE:
    cn_sbuf_puts(sb, e->kind == CN_NT_LIST ? "[" : e->kind == CN_NT_ARRAY ? "[|" : "(,");
    for (int i = 0; i < e->u.items.n; i++) {
      if (i || e->kind == CN_NT_TUPLE) cn_sbuf_putc(sb, ' ');
      sx(sb, e->u.items.items[i]);
    }
    cn_sbuf_puts(sb, e->kind == CN_NT_LIST ? "]" : e->kind == CN_NT_ARRAY ? "|]" : ")");
    break;
  case CN_NT_ANNOT:
    cn_sbuf_puts(sb, "(: ");
    sx(sb, e->u.annot.expr);
    cn_sbuf_printf(sb, " %s)", e->u.annot.label);
    break;
  case CN_NT_DECL:
    cn_sbuf_printf(sb, "{decl %s", e->u.decl.name);
    if (e->u.decl.init) {
      cn_sbuf_puts(sb, " =");
      sx(sb, e->u.decl.init);
    }
    sx_fields(sb, e->u.decl.n_fields, e->u.decl.fields);
    if (e->u.decl.string_form) cn_sbuf_puts(sb, " str");
    cn_sbuf_putc(sb, '}');
    break;
  case CN_NT_RECORD:
    cn_sbuf_puts(sb, "{rec");
    sx_fields(sb, e->u.record.n_fields, e->u.record.fields);
    cn_sbuf_putc(sb, '}');
    break;
  }
}

static void sx_cd(cn_sbuf *sb, const cn_nt_cd *c) {
  static const char *const forms[] = {"plain", "infix", "curried", "uncurried"};
  switch (c->kind) {
  case CN_NT_CD_ASSIGN:
    cn_sbuf_printf(sb, "(%s ", c->u.assign.asgn_op);
    sx(sb, c->u.assign.lhs);
    cn_sbuf_printf(sb, " %s %s", forms[c->u.assign.form], cn_op_name(c->u.assign.op));
    for (int i = 0; i < c->u.assign.n_rhs; i++) {
      cn_sbuf_putc(sb, ' ');
      sx(sb, c->u.assign.rhs[i]);
    }
    for (int i = 0; i < c->u.assign.n_args; i++) {
      cn_sbuf_printf(sb, " ~%s", c->u.assign.args[i].label);
      if (c->u.assign.args[i].value) {
        cn_sbuf_putc(sb, ':');
        sx(sb, c->u.assign.args[i].value);
      }
    }
    cn_sbuf_putc(sb, ')');
    break;
  case CN_NT_CD_SEQ:
    cn_sbuf_puts(sb, "(seq");
    for (int i = 0; i < c->u.seq.n; i++) {
      cn_sbuf_putc(sb, ' ');
      sx_cd(sb, c->u.seq.items[i]);
    }
    cn_sbuf_putc(sb, ')');
    break;
  case CN_NT_CD_IF:
    cn_sbuf_puts(sb, "(if ");
    sx(sb, c->u.if_.cond);
    cn_sbuf_putc(sb, ' ');
    sx_cd(sb, c->u.if_.then_branch);
    if (c->u.if_.else_branch) {
      cn_sbuf_putc(sb, ' ');
      sx_cd(sb, c->u.if_.else_branch);
    }
    cn_sbuf_putc(sb, ')');
    break;
  case CN_NT_CD_COMMENT:
    cn_sbuf_puts(sb, "(~~");
    for (int i = 0; i < c->u.comment.n_parts; i++) {
      cn_sbuf_putc(sb, ' ');
      sx(sb, c->u.comment.parts[i]);
    }
    cn_sbuf_puts(sb, " | ");
    sx_cd(sb, c->u.comment.body);
    cn_sbuf_putc(sb, ')');
    break;
  }
}

static const char *sexp(cn_ctx *ctx, const char *text) {
  cn_nt_expr *e = cn_nt_parse_expr(ctx, "e.cnl", text);
  cn_sbuf sb = {0};
  if (e)
    sx(&sb, e);
  else
    cn_sbuf_printf(&sb, "ERROR: %s", cn_ctx_error(ctx));
  return take(&sb);
}

static const char *sexp_cd(cn_ctx *ctx, const char *text) {
  cn_nt_cd *c = cn_nt_parse_cd(ctx, "c.cnl", text);
  cn_sbuf sb = {0};
  if (c)
    sx_cd(&sb, c);
  else
    cn_sbuf_printf(&sb, "ERROR: %s", cn_ctx_error(ctx));
  return take(&sb);
}

/* ---- Seed examples and canonical printing --------------------------------------------------- */

typedef struct {
  const char *text, *expected;
} example;

/* syntax-extensions-cd-op's notation examples (OCaml-only wrappers such as `in` and Tensor.param
 * removed, the `if Float.(momentum > 0.0)` of sgd_one written as a host comparison),
 * convolution-is-a-contraction's, the issue's; the expected text is the canonical print, derived by
 * hand. */
static const example examples[] = {
    /* syntax-extensions-cd-op "The syntax for %op" */
    {"let hid_dim = 8", "let hid_dim = 8\n"},
    {"let%op layer x = relu(w * x + b)", "let%op layer x = relu ((w * x) + b)\n"},
    {"let%op mlp_layer x = relu(\"w\" * x + \"b\" hid_dim)",
     "let%op mlp_layer x = relu ((\"w\" * x) + \"b\" hid_dim)\n"},
    /* "The syntax for %cd" */
    {"let%cd mm = c =:+ a * b ~logic:\"@\"", "let%cd mm = c =:+ a * b ~logic:\"@\"\n"},
    {"let%cd u1 = p =+ learning_rate * p.grad ~logic:\".\"",
     "let%cd u1 = p =+ learning_rate * p.grad ~logic:\".\"\n"},
    {"let%cd u2 = p =+ learning_rate *. p.grad", "let%cd u2 = p =+ learning_rate *. p.grad\n"},
    /* literals and labels */
    {"let m = [ (1, 2, 3); (4, 5, 6) ]", "let m = [(1, 2, 3); (4, 5, 6)]\n"},
    {"let%op y = (\"hey\" * 'q' 2.0) + 'p' 1.0", "let%op y = (\"hey\" * 'q' 2.0) + 'p' 1.0\n"},
    /* "Inline declarations": sgd_one */
    {"let%cd sgd_one ~learning_rate ?(momentum = 0.0) ?(weight_decay = 0.0) ?(nesterov = false) "
     "p =\n"
     "    \"sgd_delta\" =: p.grad + (!.weight_decay *. p);\n"
     "    if momentum > 0.0 then (\n"
     "      \"sgd_momentum\" =: (!.momentum *. sgd_momentum) + sgd_delta;\n"
     "      if nesterov then sgd_delta =+ !.momentum *. sgd_momentum else sgd_delta =: "
     "sgd_momentum);\n"
     "    p =- learning_rate *. sgd_delta",
     "let%cd sgd_one ~learning_rate ?(momentum = 0.0) ?(weight_decay = 0.0) ?(nesterov = false) "
     "p = \"sgd_delta\" =: p.grad + (!.weight_decay *. p); if momentum > 0.0 then "
     "(\"sgd_momentum\" =: (!.momentum *. sgd_momentum) + sgd_delta; if nesterov then sgd_delta "
     "=+ !.momentum *. sgd_momentum else sgd_delta =: sgd_momentum); p =- learning_rate *. "
     "sgd_delta\n"},
    {"let%op mlp_layer ~config x = relu (\"w\" * x + \"b\" config.hid_dim)",
     "let%op mlp_layer ~config x = relu ((\"w\" * x) + \"b\" config.hid_dim)\n"},
    /* "Lifting of the applications of config arguments" */
    {"let%op three_layer_perceptron ~config x =\n"
     "  mlp_layer ~config:{ label = [ \"L3\" ]; hid_dim = config.dim3 }\n"
     "    (mlp_layer ~config:{ label = [ \"L2\" ]; hid_dim = config.dim2 }\n"
     "       (mlp_layer ~config:{ label = [ \"L1\" ]; hid_dim = config.dim1 } x))",
     "let%op three_layer_perceptron ~config x = mlp_layer ~config:{label = [\"L3\"]; hid_dim = "
     "config.dim3} (mlp_layer ~config:{label = [\"L2\"]; hid_dim = config.dim2} (mlp_layer "
     "~config:{label = [\"L1\"]; hid_dim = config.dim1} x))\n"},
    /* "Using OCANNL's generalized einsum notation" */
    {"let%op scalar_loss = (margin_loss ++ \"...|... => 0\") /. !..batch_size",
     "let%op scalar_loss = (margin_loss ++ \"...|... => 0\") /. !..batch_size\n"},
    {"let ex = rhs ++ \"...|... => ...|...2\"", "let ex = rhs ++ \"...|... => ...|...2\"\n"},
    {"let%cd ex2 = lhs =:* rhs ~logic:\"...|... => ...|...2\"",
     "let%cd ex2 = lhs =:* rhs ~logic:\"...|... => ...|...2\"\n"},
    /* "Configuring inline declarations" (micrograd) */
    {"let%op c = \"a\" [ -4 ] + \"b\" [ 2 ]", "let%op c = \"a\" [-4] + \"b\" [2]\n"},
    /* "Referencing arrays", "Block comments" */
    {"let%cd merge = p.grad =+ p.grad.merge", "let%cd merge = p.grad =+ p.grad.merge\n"},
    {"let%cd com = ~~(\"space\" \"separated\" \"comment\" \"tensor p debug_name:\" p; p =: p + "
     "p.grad)",
     "let%cd com = ~~(\"space\" \"separated\" \"comment\" \"tensor p debug_name:\" p; p =: p + "
     "p.grad)\n"},
    /* "The hard-coded to-the-power-of operator" */
    {"let%cd op_asn ~v ~t1 ~t2 ~projections = v =: v1 ** v2 ~projections",
     "let%cd op_asn ~v ~t1 ~t2 ~projections = v =: v1 ** v2 ~projections\n"},
    {"let%cd g2 = g1 =+ p_t *. t1 * g", "let%cd g2 = g1 =+ (p_t *. t1) * g\n"},
    {"let%cd g1 = g1 =+ g", "let%cd g1 = g1 =+ g\n"},
    {"let%cd gp = g1 =+ p_t *. (t1 **. (p -. 1.)) * g",
     "let%cd gp = g1 =+ (p_t *. (t1 **. (p -. 1.0))) * g\n"},
    /* convolution-is-a-contraction: interleave, random init, literal annotation */
    {"let%cd interleave = t =:+ id t1 ~logic:\"…, i => …, 2*i\";\n"
     "  t =+  id t2 ~logic:\"…, i => …, 2*i + 1\"",
     "let%cd interleave = t =:+ id t1 ~logic:\"…, i => …, 2*i\"; t =+ id t2 ~logic:\"…, i => "
     "…, 2*i + 1\"\n"},
    {"let r = uint4x32_to_prec_uniform\n"
     "  (threefry4x32\n"
     "     (threefry4x32 (embed_self_id ()) (random_seed ()))\n"
     "     range_over_offsets)",
     "let r = uint4x32_to_prec_uniform (threefry4x32 (threefry4x32 (embed_self_id ()) "
     "(random_seed ())) range_over_offsets)\n"},
    {"let l = ([ 2.0 ] : rgb)", "let l = ([2.0] : rgb)\n"},
    {"let conv = x +* \"... | stride*oh<+kh, stride*ow<+kw, ic -> oc; kh, kw, ic -> oc => ... | "
     "oh, ow, oc\" k",
     "let conv = x +* \"... | stride*oh<+kh, stride*ow<+kw, ic -> oc; kh, kw, ic -> oc => ... | "
     "oh, ow, oc\" k\n"},
    /* issue 6 */
    {"let d = relu ({w} * x + {b; o=[16]})", "let d = relu (({w} * x) + {b; o = [16]})\n"},
    {"let y = {w = [1.0]} *. x\nprint w.grad", "let y = {w = [1.0]} *. x\nprint w.grad\n"},
    {"let _ = x * w", "let _ = x * w\n"},
    {"let r = range_of_shape ~batch_dims:[2] ~output_dims:[3; 4]",
     "let r = range_of_shape ~batch_dims:[2] ~output_dims:[3; 4]\n"},
    {"let u = uniform1 () + embed_self_id ()", "let u = uniform1 () + embed_self_id ()\n"},
    {"let e3 = einsum3 \"i;i;i=>i\" a b c + where c a b + range 5",
     "let e3 = einsum3 \"i;i;i=>i\" a b c + where c a b + range 5\n"},
    {"let s = x @| 2 @| 0", "let s = x @| (2 @| 0)\n"},
    {"let t = a @^+ \"i;i=>i\" b", "let t = a @^+ \"i;i=>i\" b\n"},
    {"let t = (a @^^ \"ij=>i\") +++ \"i;i=>i\" b", "let t = (a @^^ \"ij=>i\") +++ \"i;i=>i\" b\n"},
    /* precedence by the operator's first character */
    {"let z = 3 *. x **. 2", "let z = 3 *. (x **. 2)\n"},
    {"let s = a + b * c", "let s = a + (b * c)\n"},
    {"let o = a -?/ b +* \"i;i=>i\" c", "let o = (a -?/ b) +* \"i;i=>i\" c\n"},
    {"let o = a + b @^+ \"i;i=>i\" c", "let o = (a + b) @^+ \"i;i=>i\" c\n"},
    {"let o = a ^^ b + c < d || e && f", "let o = ((a ^^ (b + c)) < d) || (e && f)\n"},
    {"let n = -x ** 2 - -4 - -.y", "let n = ((-x) ** 2) - (-4) - (-.y)\n"},
    {"let n = [ -1.5e3; 0.1; 'x' 7; 'y' -2.5; 1_000; 1e20; 1.25e-7; 0.0001; -0.0; 1. ]",
     "let n = [-1500.0; 0.1; 'x' 7; 'y' -2.5; 1000; 1e+20; 1.25e-07; 0.0001; -0.0; 1.0]\n"},
    {"let b = [| [1; 2]; [3; 4] |]", "let b = [|[1; 2]; [3; 4]|]\n"},
    {"let q = let y = 2 in y * y", "let q = let y = 2 in y * y\n"},
    {"let q = !.x.grad + (!.x).value", "let q = (!.x).grad + (!.x).value\n"},
    /* statements, separators, comments */
    {"backprop loss\nrun update\nsgd loss ~learning_rate:0.1 ~momentum:0.9 ~weight_decay:1e-4 "
     "~nesterov:true\nset_seed 42",
     "backprop loss\nrun update\nsgd loss ~learning_rate:0.1 ~momentum:0.9 "
     "~weight_decay:0.0001 ~nesterov:true\nset_seed 42\n"},
    {"(* a (* nested *) \"*)\" comment *)\nlet x = 1 # to the end of the line\n# a line\nprint "
     "x;;\n;; print (x, x)",
     "let x = 1\nprint x\nprint (x, x)\n"},
    {"let%op make () = relu ({w} * x)", "let%op make () = relu ({w} * x)\n"},
    {"let%op f ?scale ~config x _ = x", "let%op f ?scale ~config x _ = x\n"},
    /* %cd: every form */
    {"let%cd cu = c =: add a b; c =: add (a, b); c =: where x a b; c =: fma (a, b, c); c =: "
     "relu x; c =: a -?/ b; c =: a <> b; c =: exp (a + b); c =: f x;",
     "let%cd cu = c =: add a b; c =: add (a, b); c =: where x a b; c =: fma (a, b, c); c =: "
     "relu x; c =: a -?/ b; c =: a <> b; c =: exp (a + b); c =: f x\n"},
    {"let%cd cond = if a then (if b then x =: y) else x =: z; ()",
     "let%cd cond = if a then (if b then x =: y) else x =: z; ()\n"},
    {"let%cd dl = {d} =: a + b; \"e\" =:+ d * d ~logic:\"i;i=>\" ~projections",
     "let%cd dl = {d} =: a + b; \"e\" =:+ d * d ~logic:\"i;i=>\" ~projections\n"},
    {"let%cd st = x =: (f ~logic:\"a\") ~logic:\".\"",
     "let%cd st = x =: (f ~logic:\"a\") ~logic:\".\"\n"},
    /* tuple patterns, static indices, loops */
    {"let (pts, labels) = half_moons ~n:8 ~seed:1\nlet a, _ = (1, 2)",
     "let (pts, labels) = half_moons ~n:8 ~seed:1\nlet (a, _) = (1, 2)\n"},
    {"let i = static_index 4\nfor i = 0 to 3 do print (x @| i);; for j = 1 to n - 1 do backprop "
     "(l *. !@j) run r sgd l ~learning_rate:(0.1 *. !@i) done done\nprint !@i",
     "let i = static_index 4\nfor i = 0 to 3 do\n  print x @| i\n  for j = 1 to n - 1 do\n    "
     "backprop l *. !@j\n    run r\n    sgd l ~learning_rate:(0.1 *. !@i)\n  done\ndone\nprint "
     "!@i\n"},
    {"for k = 0 to 2 do done;; for k = let m = 1 in m to (3) do done",
     "for k = 0 to 2 do\ndone\nfor k = let m = 1 in m to 3 do\ndone\n"}, /* let%tile: the body is
    kept raw, its first line where it was; it ends before the next line that starts in the first
    column */
    {"let%tile pool I =\n\n    I.bind_dims(N)  \n  O = TensorOutput(N / 2)\n\n  O[i] >= I[2*i + j]"
     "\n  return O\n\nprint pool x",
     "let%tile pool I =\n    I.bind_dims(N)  \n  O = TensorOutput(N / 2)\n\n  O[i] >= I[2*i + j]\n"
     "  return O\nprint pool x\n"},
    {"let%tile s I J = O[i] += I[i] * J[i]; return O\nlet x = 1",
     "let%tile s I J = O[i] += I[i] * J[i]; return O\nlet x = 1\n"},
    /* a %cd target cannot start with '(': `!.x.grad` (read as (!.x).grad) prints as written */
    {"let%cd r = !.x.grad =: y", "let%cd r = !.x.grad =: y\n"},
    {"let%cd r = !.x.a.b =: y", "let%cd r = !.x.a.b =: y\n"},
    /* print's options; an application with a label of theirs keeps its parentheses */
    {"print x ~precision:3 ~full:true", "print x ~full:true ~precision:3\n"},
    {"print (f ~full:x)", "print (f ~full:x)\n"},
    {"print f ~p:1 ~full:(g ~full:2)", "print f ~p:1 ~full:(g ~full:2)\n"},
};

static void test_examples(void) {
  cn_ctx *ctx = cn_ctx_create();
  int n = (int)(sizeof examples / sizeof examples[0]);
  for (int i = 0; i < n; i++) CHECK_STR(roundtrip(ctx, examples[i].text), examples[i].expected);
  CHECK(n >= 25);
  cn_ctx_destroy(ctx);
}

/* The assignment operators: exactly syntax-extensions-cd-op's table, consistent with ops.def's
 * accumulators. */
static void test_assignment_table(void) {
  static const struct {
    const char *text;
    cn_op op;
    bool clear;
  } seed[] = {
      {"=:", CN_OP_ARG2, true},         {"=+", CN_OP_ADD, false},
      {"=:+", CN_OP_ADD, true},         {"=-", CN_OP_SUB, false},
      {"=:-", CN_OP_SUB, true},         {"=*", CN_OP_MUL, false},
      {"=:*", CN_OP_MUL, true},         {"=/", CN_OP_DIV, false},
      {"=:/", CN_OP_DIV, true},         {"=**", CN_OP_POW, false},
      {"=:**", CN_OP_POW, true},        {"=?/", CN_OP_RELU_GATE, false},
      {"=:?/", CN_OP_RELU_GATE, true},  {"=?^", CN_OP_SAT01_GATE, false},
      {"=:?^", CN_OP_SAT01_GATE, true}, {"=||", CN_OP_OR, false},
      {"=:||", CN_OP_OR, true},         {"=&&", CN_OP_AND, false},
      {"=:&&", CN_OP_AND, true},        {"=@^", CN_OP_MAX, false},
      {"=:@^", CN_OP_MAX, true},        {"=^^", CN_OP_MIN, false},
      {"=:^^", CN_OP_MIN, true},
  };
  int n = (int)(sizeof seed / sizeof seed[0]);
  cn_sbuf text = {0};
  cn_sbuf_puts(&text, "let%cd all = ");
  for (int i = 0; i < n; i++) {
    cn_op op = CN_OP_COUNT;
    bool clear = !seed[i].clear;
    CHECK(cn_nt_assign_op(seed[i].text, &op, &clear));
    CHECK_INT(op, seed[i].op);
    CHECK_INT(clear, seed[i].clear);
    CHECK_STR(cn_nt_assign_spelling(seed[i].op, seed[i].clear), seed[i].text);
    CHECK(cn_nt_infix_prec(seed[i].text) == CN_NT_PREC_NONE);
    cn_sbuf_printf(&text, "%sa %s b", i ? "; " : "", seed[i].text);
  }
  /* ops.def: an ACC op has both forms, Arg2 only "=:", no other op any. */
  int forms = 0;
  for (int op = 0; op < CN_OP_COUNT; op++) {
    cn_accum_kind acc = cn_op_table[op].accum;
    CHECK((cn_nt_assign_spelling((cn_op)op, false) != NULL) == (acc == CN_ACCUM_ACC));
    CHECK((cn_nt_assign_spelling((cn_op)op, true) != NULL) == (acc != CN_ACCUM_NO));
    forms += (acc == CN_ACCUM_ACC) * 2 + (acc == CN_ACCUM_ACC_INIT);
  }
  CHECK_INT(forms, n);
  CHECK(!cn_nt_assign_op("=", NULL, NULL));
  CHECK(!cn_nt_assign_op("=-?/", NULL, NULL));
  CHECK(!cn_nt_assign_op("=:%", NULL, NULL));
  /* Every operator in one routine: each assignment carries its table entry. */
  cn_ctx *ctx = cn_ctx_create();
  const char *all = take(&text);
  cn_nt_program *prog = cn_nt_parse_program(ctx, "all.cnl", all);
  CHECK(prog != NULL);
  if (prog) {
    const cn_nt_cd *seq = prog->items[0].u.let.cd;
    CHECK_INT(seq->kind, CN_NT_CD_SEQ);
    CHECK_INT(seq->u.seq.n, n);
    for (int i = 0; i < n && i < seq->u.seq.n; i++) {
      const cn_nt_cd *a = seq->u.seq.items[i];
      CHECK_STR(a->u.assign.asgn_op, seed[i].text);
      CHECK_INT(a->u.assign.accum, seed[i].op);
      CHECK_INT(a->u.assign.clear, seed[i].clear);
      CHECK_INT(a->u.assign.form, CN_NT_RHS_PLAIN);
      CHECK_INT(a->u.assign.op, CN_OP_ID);
    }
  }
  cn_ctx_destroy(ctx);
}

/* Precedence, associativity and the special forms, as trees. */
static void test_tree_shapes(void) {
  cn_ctx *ctx = cn_ctx_create();
  static const example shapes[] = {
      {"3 *. x **. 2", "(*. 3 (**. x 2))"},
      {"a + b * c", "(+ a (* b c))"},
      {"a - b - c", "(- (- a b) c)"},
      {"a ** b ** c", "(** a (** b c))"},
      {"a @| b @| c", "(@| a (@| b c))"},
      {"a ^^ b ^^ c", "(^^ a (^^ b c))"},
      {"a || b && c", "(|| a (&& b c))"},
      {"a && b || c", "(|| (&& a b) c)"},
      {"a & b & c", "(& a (& b c))"},
      {"a < b = c", "(= (< a b) c)"},
      {"a + b < c * d", "(< (+ a b) (* c d))"},
      {"a |> f $ g != h", "(!= ($ (|> a f) g) h)"},
      {"a ^^ b + c", "(^^ a (+ b c))"},
      {"a -?/ b * c", "(-?/ a (* b c))"},
      {"a *. b /. c % d", "(% (/. (*. a b) c) d)"},
      {"a ** b * c", "(* (** a b) c)"},
      {"-x ** 2", "(** (neg x) 2)"},
      {"-f x", "(neg (@ f x))"},
      {"- 4 + -.2.5", "(+ -4 -2.5)"},
      {"'q' -2.0 - x", "(- 'q:-2 x)"},
      {"!.x.grad", "(. (!. x) grad)"},
      {"!..n *. p", "(*. (!.. n) p)"},
      {"f x y ~l:z ~p ()", "(@ f x y ~l:z ~p ())"},
      {"relu x.grad.merge", "(@ relu (. (. x grad) merge))"},
      {"a + b @^+ \"s\" c", "(@^+ \"s\" (+ a b) c)"},
      {"a +* \"s\" b + c", "(+ (+* \"s\" a b) c)"},
      {"a *+ \"s\" b", "(*+ \"s\" a b)"},
      {"x ++ \"s\"", "(++ \"s\" x)"},
      {"(x ++ \"s\") /. !..k", "(/. (++ \"s\" x) (!.. k))"},
      {"\"w\" [ -4 ] + \"b\" 8", "(+ {decl w =[-4] str} {decl b o=8 str})"},
      {"\"w\" (3, 4) * {v} * {u = [1]; o = [2]}",
       "(* (* {decl w o=(, 3 4) str} {decl v}) {decl u =[1] o=[2]})"},
      {"\"hey\" * 'q' 2.0", "(* \"hey\" 'q:2)"},
      {"([ (1, 2); (3, 4) ] : rgb)", "(: [(, 1 2) (, 3 4)] rgb)"},
      {"[| [1; 2]; [| 3 |] |]", "[|[1 2] [|3|]|]"},
      {"[1, 2; 3, 4]", "[(, 1 2) (, 3 4)]"},
      {"[]", "[]"},
      {"m ~config:{ label = [\"L\"]; hid_dim } x", "(@ m ~config:{rec label=[\"L\"] hid_dim} x)"},
      {"let y = 2 in let z = y in y, z", "(let y 2 (let z y (, y z)))"},
      {"true && false", "(&& true false)"},
      {"(* c *) a # c\n + b", "(+ a b)"},
  };
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    CHECK_STR(sexp(ctx, shapes[i].text), shapes[i].expected);
  static const example cds[] = {
      {"c =:+ a * b ~logic:\"@\"", "(=:+ c infix mul a b ~logic:\"@\")"},
      {"p =+ learning_rate *. p.grad", "(=+ p plain id (*. learning_rate (. p grad)))"},
      {"g1 =+ p_t *. t1 * g", "(=+ g1 infix mul (*. p_t t1) g)"},
      {"c =: add (a, b)", "(=: c uncurried add a b)"},
      {"c =: where x a (b + 1)", "(=: c curried where x a (+ b 1))"},
      {"c =:@^ a + b ~projections", "(=:@^ c infix add a b ~projections)"},
      {"x =: relu y ~logic:\".\"", "(=: x curried relu y ~logic:\".\")"},
      {"x =: a ^^^^ b", "(=: x infix threefry4x32_crypto a b)"},
      {"x =: a != b", "(=: x infix ne a b)"},
      {"x =: a = b", "(=: x plain id (= a b))"},
      {"\"d\" =: a; {e} =+ d", "(seq (=: \"d\" plain id a) (=+ {decl e} plain id d))"},
      {"if c then a =: b; d =: e", "(seq (if c (=: a plain id b)) (=: d plain id e))"},
      {"if c then (a =: b; d =: e) else if f then ()",
       "(if c (seq (=: a plain id b) (=: d plain id e)) (if f (seq)))"},
      {"~~(\"x\" p.grad; a =: b; c =: d)",
       "(~~ \"x\" (. p grad) | (seq (=: a plain id b) (=: c plain id d)))"},
  };
  for (size_t i = 0; i < sizeof cds / sizeof cds[0]; i++)
    CHECK_STR(sexp_cd(ctx, cds[i].text), cds[i].expected);
  cn_ctx_destroy(ctx);
}

/* Fields of the tree: positions, statements, parameters, numbers, strings. */
static void test_fields(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_nt_program *prog = cn_nt_parse_program(ctx, "f.cnl",
                                            "let x =\n  a +\n  b * c\n"
                                            "let%op f ~config ?(m = 1) () y = y\n"
                                            "sgd l ~nesterov:false ~learning_rate:0.5\n"
                                            "set_seed 7\n"
                                            "let s = \"t\\\"\\\\\\n\\tA\\065\\x42\\\n    C\"\n"
                                            "let%cd r = v =:+ v1 +* \"i;i=>i\" v2\n"
                                            "run r\n");
  CHECK(prog != NULL);
  if (!prog) {
    cn_ctx_destroy(ctx);
    return;
  }
  CHECK_INT(prog->n_items, 7);
  CHECK_STR(prog->src->file, "f.cnl");
  const cn_nt_item *it = &prog->items[0];
  CHECK_INT(it->kind, CN_NT_ITEM_LET);
  CHECK_INT(it->u.let.ext, CN_NT_LET_PLAIN);
  CHECK_STR(it->u.let.name, "x");
  CHECK_INT(it->u.let.name_pos.line, 1);
  CHECK_INT(it->u.let.name_pos.col, 5);
  const cn_nt_expr *plus = it->u.let.expr;
  CHECK_INT(plus->kind, CN_NT_BINOP);
  CHECK_INT(plus->u.binop.prec, CN_NT_PREC_ADD);
  CHECK_INT(plus->pos.line, 2);
  CHECK_INT(plus->pos.col, 3);
  CHECK_INT(plus->u.binop.op_pos.line, 2);
  CHECK_INT(plus->u.binop.op_pos.col, 5);
  CHECK_INT(plus->u.binop.rhs->u.binop.op_pos.line, 3);
  CHECK_INT(plus->u.binop.rhs->u.binop.op_pos.col, 5);
  CHECK_INT(plus->u.binop.rhs->u.binop.prec, CN_NT_PREC_MUL);
  CHECK_INT(plus->height, 3);
  it = &prog->items[1];
  CHECK_INT(it->u.let.ext, CN_NT_LET_OP);
  CHECK_INT(it->u.let.n_params, 4);
  CHECK_INT(it->u.let.config_param, 0);
  CHECK_INT(it->u.let.params[0].kind, CN_NT_PARAM_LABELED);
  CHECK_INT(it->u.let.params[1].kind, CN_NT_PARAM_OPTIONAL);
  CHECK_STR(it->u.let.params[1].name, "m");
  CHECK_INT(it->u.let.params[1].default_value->u.number.ival, 1);
  CHECK_INT(it->u.let.params[2].kind, CN_NT_PARAM_UNIT);
  CHECK(it->u.let.params[2].name == NULL);
  CHECK_INT(it->u.let.params[3].kind, CN_NT_PARAM_PLAIN);
  CHECK_INT(it->u.let.params[3].pos.col, 30);
  it = &prog->items[2];
  CHECK_INT(it->kind, CN_NT_ITEM_SGD);
  CHECK_STR(it->u.sgd.expr->u.ident.name, "l");
  CHECK_NEAR(it->u.sgd.learning_rate->u.number.value, 0.5, 0);
  CHECK(!it->u.sgd.learning_rate->u.number.is_int);
  CHECK(it->u.sgd.momentum == NULL && it->u.sgd.weight_decay == NULL);
  CHECK(it->u.sgd.nesterov->kind == CN_NT_BOOL && !it->u.sgd.nesterov->u.boolean);
  CHECK_INT(prog->items[3].u.seed, 7);
  CHECK_INT(prog->items[3].pos.line, 6);
  const cn_nt_expr *s = prog->items[4].u.let.expr;
  /* The backslash-newline skips the next line's blanks: the text has no newline there. */
  CHECK_STR(s->u.string.text, "t\"\\\n\tAABC");
  const cn_nt_cd *asg = prog->items[5].u.let.cd;
  CHECK_INT(asg->kind, CN_NT_CD_ASSIGN);
  CHECK_INT(asg->u.assign.form, CN_NT_RHS_PLAIN);
  const cn_nt_expr *ein = asg->u.assign.rhs[0];
  CHECK_INT(ein->kind, CN_NT_EINSUM);
  CHECK_INT(ein->u.einsum.kind, CN_NT_EINSUM_BINARY);
  CHECK_STR(ein->u.einsum.spec, "i;i=>i");
  CHECK_INT(ein->u.einsum.spec_pos.col, 24);
  CHECK_INT(ein->u.einsum.op_pos.col, 21);
  CHECK_INT(asg->u.assign.op_pos.line, 9);
  CHECK_INT(asg->u.assign.op_pos.col, 14);
  CHECK_INT(prog->items[6].kind, CN_NT_ITEM_RUN);
  CHECK_INT(prog->items[6].pos.line, 10);
  /* The einsum kinds, and a labeled-argument lookup. */
  cn_nt_expr *e = cn_nt_parse_expr(ctx, "k.cnl", "a +++ \"s\" b");
  CHECK(e && e->u.einsum.kind == CN_NT_EINSUM_OUTER);
  e = cn_nt_parse_expr(ctx, "k.cnl", "a @^+ \"s\" b");
  CHECK(e && e->u.einsum.kind == CN_NT_EINSUM_TROPICAL);
  e = cn_nt_parse_expr(ctx, "k.cnl", "a @^^ \"s\"");
  CHECK(e && e->u.einsum.kind == CN_NT_EINSUM_MAX_UNARY && e->u.einsum.rhs == NULL);
  e = cn_nt_parse_expr(ctx, "k.cnl", "a ++ \"s\"");
  CHECK(e && e->u.einsum.kind == CN_NT_EINSUM_UNARY);
  e = cn_nt_parse_expr(ctx, "k.cnl", "range_of_shape ~batch_dims:[2] ~output_dims:[3] ~pun");
  CHECK(e && e->kind == CN_NT_APPLY);
  if (e) {
    const cn_nt_arg *a = cn_nt_find_arg(e->u.apply.n_args, e->u.apply.args, "output_dims");
    CHECK(a && a->value->kind == CN_NT_LIST && a->value->u.items.items[0]->u.number.ival == 3);
    a = cn_nt_find_arg(e->u.apply.n_args, e->u.apply.args, "pun");
    CHECK(a && a->value == NULL);
    CHECK(cn_nt_find_arg(e->u.apply.n_args, e->u.apply.args, "input_dims") == NULL);
  }
  /* Numbers: int and float values, labels. */
  e = cn_nt_parse_expr(ctx, "n.cnl", "'k' 9_007_199_254_740_993");
  CHECK(e && e->u.number.is_int && e->u.number.ival == 9007199254740993LL);
  CHECK(e && strcmp(e->u.number.label, "k") == 0);
  e = cn_nt_parse_expr(ctx, "n.cnl", "2.5e-3");
  CHECK(e && !e->u.number.is_int && e->u.number.value == 2.5e-3);
  /* The infix classes by first character, and tokens that are not infix operators. */
  CHECK_INT(cn_nt_infix_prec("**."), CN_NT_PREC_POW);
  CHECK_INT(cn_nt_infix_prec("*."), CN_NT_PREC_MUL);
  CHECK_INT(cn_nt_infix_prec("%"), CN_NT_PREC_MUL);
  CHECK_INT(cn_nt_infix_prec("+++"), CN_NT_PREC_ADD);
  CHECK_INT(cn_nt_infix_prec("-@>"), CN_NT_PREC_ADD);
  CHECK_INT(cn_nt_infix_prec("@^+"), CN_NT_PREC_CONCAT);
  CHECK_INT(cn_nt_infix_prec("^^^^"), CN_NT_PREC_CONCAT);
  CHECK_INT(cn_nt_infix_prec("<>"), CN_NT_PREC_CMP);
  CHECK_INT(cn_nt_infix_prec("="), CN_NT_PREC_CMP);
  CHECK_INT(cn_nt_infix_prec("$"), CN_NT_PREC_CMP);
  CHECK_INT(cn_nt_infix_prec("!="), CN_NT_PREC_CMP);
  CHECK_INT(cn_nt_infix_prec("&"), CN_NT_PREC_AND);
  CHECK_INT(cn_nt_infix_prec("||"), CN_NT_PREC_OR);
  CHECK_INT(cn_nt_infix_prec("->"), CN_NT_PREC_NONE);
  CHECK_INT(cn_nt_infix_prec("|"), CN_NT_PREC_NONE);
  CHECK_INT(cn_nt_infix_prec("!."), CN_NT_PREC_NONE);
  CHECK_INT(cn_nt_infix_prec(":"), CN_NT_PREC_NONE);
  CHECK_INT(cn_nt_infix_prec("=:+"), CN_NT_PREC_NONE);
  cn_ctx_destroy(ctx);
}

/* ---- Errors --------------------------------------------------------------------------------- */

typedef struct {
  const char *text, *message;
} bad;

static const bad bads[] = {
    {"let x = \"abc", "b.cnl:1:9: unterminated string literal\nlet x = \"abc\n        ^"},
    {"let x = (* a (* b *) ", "b.cnl:1:9: unterminated comment\nlet x = (* a (* b *) \n        ^"},
    {"let x = 1\n(* a\n \"*)\" *)\n  `a", "b.cnl:4:3: unexpected character '`'\n  `a\n  ^"},
    {"print (a + b",
     "b.cnl:1:13: expected ')' to close the '(' at line 1, column 7, found end of input\nprint (a "
     "+ b\n            ^"},
    {"let x = 1\nlet y = (2 +\n",
     "b.cnl:2:13: expected an expression, found end of input\nlet y = (2 +\n            ^"},
    {"let%foo x = 1", "b.cnl:1:4: unknown extension: write let%op, let%cd or let%tile, without "
                      "spaces\nlet%foo x = 1\n   ^"},
    {"let%cd f = a =% b",
     "b.cnl:1:14: unknown assignment operator '=%' (the assignment operators are =: and =op, =:op "
     "for op one of + - * / ** ?/ ?^ || && @^ ^^)\nlet%cd f = a =% b\n             ^"},
    {"let%cd f =\n  a + b",
     "b.cnl:2:5: expected an assignment operator (=:, =+, =:+, ...) after the left-hand side, "
     "found '+'\n  a + b\n    ^"},
    {"let x = 'q' x",
     "b.cnl:1:13: expected a number after the dimension label (as in 'q' 2.0), found 'x'\nlet x = "
     "'q' x\n            ^"},
    {"let y = x +* \"spec\"",
     "b.cnl:1:20: expected the right operand of '+*' after its spec, found end of input\nlet y = "
     "x +* \"spec\"\n                   ^"},
    {"let y = x ++ y",
     "b.cnl:1:14: expected an einsum spec string after '++' (as in a ++ \"ij=>ji\"), found "
     "'y'\nlet y = x ++ y\n             ^"},
    {"let y = x ++ \"s\" /. n",
     "b.cnl:1:18: '/.' binds tighter than '++' here: parenthesize the einsum or its "
     "operand\nlet y = x ++ \"s\" /. n\n                 ^"},
    {"let x = 1 in x",
     "b.cnl:1:11: unexpected 'in' (a reserved word) after the end of the statement (a top-level "
     "let has no 'in': its binding holds for the rest of the script)\nlet x = 1 in x\n          ^"},
    {"sgd loss", "b.cnl:1:1: sgd needs ~learning_rate:VALUE\nsgd loss\n^"},
    {"sgd loss ~learning_rate:0.1 ~foo:1",
     "b.cnl:1:29: unknown sgd argument '~foo' (sgd takes ~learning_rate, ~momentum, "
     "~weight_decay, ~nesterov and ~clip)\nsgd loss ~learning_rate:0.1 ~foo:1\n                    "
     "     "
     "   ^"},
    {"set_seed x",
     "b.cnl:1:10: expected a non-negative integer literal after set_seed, found 'x'\nset_seed "
     "x\n         ^"},
    {"let x = 99999999999999999999",
     "b.cnl:1:9: integer literal too large\nlet x = 99999999999999999999\n        ^"},
    {"let d = {}", "b.cnl:1:10: expected the declared name, found '}'\nlet d = {}\n         ^"},
    {"let d = {b; o}",
     "b.cnl:1:14: expected '=' after 'o' (a declaration's further fields are name = "
     "value)\nlet d = {b; o}\n             ^"},
    {"let%cd f = c =: relu x y",
     "b.cnl:1:17: primitive 'relu' takes 1 operand, got 2\nlet%cd f = c =: relu x y\n         "
     "       ^"},
    {"let%cd f = c =: add (a, b, c)",
     "b.cnl:1:17: primitive 'add' takes 2 operands, got a tuple of 3\nlet%cd f = c =: add (a, b, "
     "c)\n                ^"},
    {"let x = 2 3",
     "b.cnl:1:11: this value is not a function: it cannot be applied to arguments\nlet x = 2 "
     "3\n          ^"},
    {"let%cd f = ~~(\"c\")",
     "b.cnl:1:18: expected ';' after the comment's text, then the assignments it covers, found "
     "')'\nlet%cd f = ~~(\"c\")\n                 ^"},
    {"let s = \"\\q\"", "b.cnl:1:10: invalid escape '\\q' in string\nlet s = \"\\q\"\n         ^"},
    {"let x =\ta +\t)",
     "b.cnl:1:13: expected an expression, found ')'\nlet x =\ta +\t)\n       \t   \t^"},
    {"let run = 1",
     "b.cnl:1:5: expected a name after 'let', found 'run' (a reserved word)\nlet run = 1\n    ^"},
    {"let l = [1; 2",
     "b.cnl:1:14: expected ';' or ']' (closing the '[' at line 1, column 9), found end of "
     "input\nlet l = [1; 2\n             ^"},
    {"let x =-1", "b.cnl:1:7: '=-' is read as one operator: put a space after '='\nlet x =-1\n   "
                  "   ^"},
    {"let%cd f = a =: b =: c",
     "b.cnl:1:19: unexpected '=:' after the end of the statement (an assignment has one "
     "assignment operator; separate assignments with ';')\nlet%cd f = a =: b =: c\n             "
     "     ^"},
    {"let x = a =: b",
     "b.cnl:1:11: unexpected '=:' after the end of the statement (assignments belong in "
     "let%cd)\nlet x = a =: b\n          ^"},
    {"let f x = x",
     "b.cnl:1:7: a function needs let%op (or let%cd for a routine)\nlet f x = x\n      ^"},
    {"let x = a +* \"s\" f y",
     "b.cnl:1:20: the right operand of '+*' is one argument: parenthesize an application\nlet x "
     "= a +* \"s\" f y\n                   ^"},
    {"let x = _",
     "b.cnl:1:9: '_' is not a value (it names a wildcard binding: let _ = ...)\nlet x = _\n       "
     " ^"},
    {"let%op f x ~x = x",
     "b.cnl:1:12: parameter 'x' is given twice\nlet%op f x ~x = x\n           ^"},
    {"let%cd f = x =: y ~logic:\".\" ~logic:\"@\"",
     "b.cnl:1:30: '~logic' is given twice\nlet%cd f = x =: y ~logic:\".\" ~logic:\"@\"\n          "
     "                   ^"},
    {"let%cd f = x =: y ~logic:\".\" ~foo:1",
     "b.cnl:1:30: unknown assignment argument '~foo' (an assignment takes ~logic and "
     "~projections)\nlet%cd f = x =: y ~logic:\".\" ~foo:1\n                             ^"},
    {"let s = \"é\" `", "b.cnl:1:14: unexpected character '`'\nlet s = \"é\" `\n            ^"},
    {"let x = 1.5e", "b.cnl:1:9: invalid number literal: the exponent has no digits\nlet x = "
                     "1.5e\n        ^"},
    {"let x = 2x", "b.cnl:1:9: invalid number literal '2x'\nlet x = 2x\n        ^"},
    {"let x = \"\\000\"",
     "b.cnl:1:10: a string cannot contain a NUL character\nlet x = \"\\000\"\n         ^"},
    {"let x = 'ab'",
     "b.cnl:1:9: invalid character literal: a dimension label is one letter, digit or '_' in "
     "quotes, as in 'q'\nlet x = 'ab'\n        ^"},
    {"let%tile f = O", "b.cnl:1:1: a Tile function takes parameters (its tensors and dims)\n"
                       "let%tile f = O\n^"},
    {"let%tile f ~x = O", "b.cnl:1:12: a Tile function's parameters are plain names (tensors or "
                          "integer dims)\nlet%tile f ~x = O\n           ^"},
    {"let%tile f' I = O[i] += I[i]; return O",
     "b.cnl:1:10: a Tile function's name 'f'' cannot contain a prime (')\nlet%tile f' I = O[i] "
     "+= I[i]; return O\n         ^"},
    {"let%tile f I' = O[i] += I[i]; return O",
     "b.cnl:1:12: a Tile parameter name 'I'' cannot contain a prime (')\nlet%tile f I' = O[i] "
     "+= I[i]; return O\n           ^"},
    {"let%tile max_pool_d _  _ =wt.grad",
     "b.cnl:1:24: the Tile parameter '_' is repeated\nlet%tile max_pool_d _  _ =wt.grad\n"
     "                       ^"},
    {"let%tile f I =\nprint x",
     "b.cnl:1:15: expected the body of the Tile function\nlet%tile f I =\n              ^"},
    {"let x = let%op y = 1 in y", "b.cnl:1:12: let%op, let%cd and let%tile are only allowed at the "
                                  "top level\nlet x = let%op y = 1 in "
                                  "y\n           ^"},
    {"let%cd f = x =: ~~(\"c\"; a =: b)",
     "b.cnl:1:17: a block comment ~~(...) is a %cd statement, not an expression\nlet%cd f = x =: "
     "~~(\"c\"; a =: b)\n                ^"},
    {"let x = {w; o = 1; o = 2}",
     "b.cnl:1:20: field 'o' is given twice\nlet x = {w; o = 1; o = 2}\n                   ^"},
    {"let x = \"w\" 1 2", "b.cnl:1:15: an inline declaration \"name\" takes one argument: its "
                          "initial values [...] or its "
                          "output dimension(s)\nlet x = \"w\" 1 2\n              ^"},
    {"let%op f = if a then b",
     "b.cnl:1:23: expected 'else' (an if expression has both branches: if c then a else b), "
     "found end of input\nlet%op f = if a then b\n                      ^"},
    /* loops and tuple patterns */
    {"for i = 0 to 2 do\n  let x = 1\ndone",
     "b.cnl:2:3: a loop body holds print, printf, backprop, run, sgd, adam, shuffle, "
     "checkpoint, save_npy, plot, if and for statements: bind names and set the seed before the "
     "loop\n  "
     "let x = 1\n  ^"},
    {"for i = 0 to 2 print x",
     "b.cnl:1:16: expected 'do' after the loop's last value, found 'print' (a reserved word)\nfor "
     "i = 0 to 2 print x\n               ^"},
    {"for i = 0 to 2 do\n  print x", "b.cnl:2:10: expected 'done' to close the 'for' at line 1, "
                                     "column 1, found end of input\n  print x\n         ^"},
    {"for i = 0 do done", "b.cnl:1:11: expected 'to' after the loop's first value, found 'do' (a "
                          "reserved word)\nfor i = 0 do done\n          ^"},
    {"for _ = 0 to 1 do done", "b.cnl:1:5: expected the loop's index name after 'for', found "
                               "'_'\nfor _ = 0 to 1 do done\n    ^"},
    {"for i = 0 to 1 do set_seed 3 done",
     "b.cnl:1:19: a loop body holds print, printf, backprop, run, sgd, adam, shuffle, "
     "checkpoint, save_npy, plot, if and for statements: bind names and set the seed before the "
     "loop\nfor i = 0 to 1 do set_seed 3 "
     "done\n                  ^"},
    {"print x done", "b.cnl:1:9: unexpected 'done' (a reserved word) after the end of the "
                     "statement\nprint x done\n        ^"},
    {"let to = 1",
     "b.cnl:1:5: expected a name after 'let', found 'to' (a reserved word)\nlet to = 1\n    ^"},
    {"let%op (a, b) = x", "b.cnl:1:8: a tuple pattern binds with a plain let (not let%op or "
                          "let%cd)\nlet%op (a, b) = x\n       ^"},
    {"let (a, a) = x", "b.cnl:1:9: 'a' is bound twice in the pattern\nlet (a, a) = x\n        ^"},
    {"let (a) = x", "b.cnl:1:7: expected ',' and another name (a tuple pattern has at least two), "
                    "found ')'\nlet (a) = x\n      ^"},
    {"let (a, b = x", "b.cnl:1:11: expected ')' to close the '(' at line 1, column 5, found "
                      "'='\nlet (a, b = x\n          ^"},
};

/* The trees of a loop and of a tuple pattern. */
static void test_loop_fields(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_nt_program *prog = cn_nt_parse_program(ctx, "l.cnl",
                                            "let (p, _, q) = t\n"
                                            "for step = 1 to 2 * n do\n"
                                            "  print x @| step\n"
                                            "  for k = 0 to 3 do run r done\n"
                                            "  sgd l ~learning_rate:!@step\n"
                                            "done\n");
  CHECK(prog != NULL);
  if (!prog) {
    cn_ctx_destroy(ctx);
    return;
  }
  CHECK_INT(prog->n_items, 2);
  const cn_nt_item *it = &prog->items[0];
  CHECK_INT(it->kind, CN_NT_ITEM_LET);
  CHECK(it->u.let.name == NULL);
  CHECK_INT(it->u.let.n_names, 3);
  CHECK_STR(it->u.let.names[0], "p");
  CHECK_STR(it->u.let.names[1], "_");
  CHECK_STR(it->u.let.names[2], "q");
  CHECK_INT(it->u.let.name_pos.col, 6);
  CHECK_STR(it->u.let.expr->u.ident.name, "t");
  it = &prog->items[1];
  CHECK_INT(it->kind, CN_NT_ITEM_FOR);
  CHECK_INT(it->pos.line, 2);
  CHECK_STR(it->u.for_.name, "step");
  CHECK_INT(it->u.for_.name_pos.col, 5);
  CHECK_INT(it->u.for_.from->u.number.ival, 1);
  CHECK_INT(it->u.for_.to->kind, CN_NT_BINOP);
  CHECK_STR(it->u.for_.to->u.binop.op, "*");
  CHECK_INT(it->u.for_.n_items, 3);
  const cn_nt_item *body = it->u.for_.items;
  CHECK_INT(body[0].kind, CN_NT_ITEM_PRINT);
  CHECK_STR(body[0].u.print.expr->u.binop.op, "@|");
  CHECK_INT(body[0].pos.line, 3);
  CHECK_INT(body[1].kind, CN_NT_ITEM_FOR);
  CHECK_INT(body[1].u.for_.n_items, 1);
  CHECK_INT(body[1].u.for_.items[0].kind, CN_NT_ITEM_RUN);
  CHECK_INT(body[2].kind, CN_NT_ITEM_SGD);
  const cn_nt_expr *lr = body[2].u.sgd.learning_rate;
  CHECK_INT(lr->kind, CN_NT_PREFIX);
  CHECK_STR(lr->u.prefix.op, "!@");
  CHECK_STR(lr->u.prefix.operand->u.ident.name, "step");
  cn_ctx_destroy(ctx);
}

static void test_errors(void) {
  cn_ctx *ctx = cn_ctx_create();
  int n = (int)(sizeof bads / sizeof bads[0]);
  for (int i = 0; i < n; i++) {
    cn_nt_program *prog = cn_nt_parse_program(ctx, "b.cnl", bads[i].text);
    CHECK_MSG(prog == NULL, "accepted: %s", bads[i].text);
    CHECK_INT(cn_ctx_status(ctx), CN_ERR_INVALID);
    CHECK_STR(cn_ctx_error(ctx), bads[i].message);
  }
  CHECK(n >= 15);
  /* A long line shows a window around the column. */
  char text[400];
  snprintf(text, sizeof text, "let x = %240s`", "");
  CHECK(cn_nt_parse_program(ctx, "w.cnl", text) == NULL);
  char expected[400];
  snprintf(expected, sizeof expected, "w.cnl:1:249: unexpected character '`'\n%80s`\n%80s^", "",
           "");
  CHECK_STR(cn_ctx_error(ctx), expected);
  /* The entry points for C strings: trailing text and an empty text. */
  CHECK(cn_nt_parse_expr(ctx, "op", "relu x )") == NULL);
  CHECK_STR(cn_ctx_error(ctx), "op:1:8: unexpected ')' after the expression\nrelu x )\n       ^");
  CHECK(cn_nt_parse_cd(ctx, "cd", "a =: b; c") == NULL);
  CHECK_STR(cn_ctx_error(ctx), "cd:1:10: expected an assignment operator (=:, =+, =:+, ...) "
                               "after the left-hand side, found end of input\na =: b; c\n         "
                               "^");
  CHECK(cn_nt_parse_expr(ctx, "op", "") == NULL);
  CHECK_STR(cn_ctx_error(ctx), "op:1:1: expected an expression, found end of input\n\n^");
  CHECK(cn_nt_parse_cd(ctx, "cd", "a =: b;") != NULL);
  CHECK(cn_nt_parse_expr(ctx, NULL, NULL) == NULL);
  CHECK_INT(cn_ctx_status(ctx), CN_ERR_INVALID);
  /* An empty script is an empty program. */
  cn_nt_program *empty = cn_nt_parse_program(ctx, "e.cnl", "  (* nothing *)\n# at all\n");
  CHECK(empty && empty->n_items == 0);
  /* The evaluator's messages use the same format, at a node's position. */
  cn_nt_program *prog = cn_nt_parse_program(ctx, "v.cnl", "let a = 1\nlet b = a +\n    c");
  CHECK(prog != NULL);
  if (prog) {
    CHECK_INT(cn_nt_fail_at(ctx, prog->items[1].u.let.expr->u.binop.rhs->pos, "unbound '%s'", "c"),
              CN_ERR_INVALID);
    CHECK_STR(cn_ctx_error(ctx), "v.cnl:3:5: unbound 'c'\n    c\n    ^");
  }
  cn_ctx_destroy(ctx);
}

/* Nesting beyond the limit is an error, never a stack overflow; up to it, a tree. */
static void test_depth(void) {
  cn_ctx *ctx = cn_ctx_create();
  static const struct {
    const char *prefix, *unit, *middle, *closing;
    int count;
  } deep[] = {
      {"let x = ", "(", "x", ")", 100000},       {"let x = ", "[", "1", "]", 5000},
      {"let x = ", "- ", "x", "", 100000},       {"let x = ", "!. ", "x", "", 5000},
      {"let x = ", "a + (", "a", ")", 5000},     {"let x = ", "a ** ", "a", "", 5000},
      {"let x = ", "f (", "x", ")", 5000},       {"let x = ", "let y = 1 in ", "y", "", 5000},
      {"let x = x", ".grad", "", "", 5000},      {"let%cd x = ", "if c then ", "a =: b", "", 5000},
      {"let%cd x = ", "(", "a =: b", ")", 5000}, {"let%cd x = ", "~~(\"c\"; ", "a =: b", ")", 5000},
      {"let x = ", "{w = ", "1", "}", 5000},
  };
  for (size_t k = 0; k < sizeof deep / sizeof deep[0]; k++) {
    cn_sbuf sb = {0};
    cn_sbuf_puts(&sb, deep[k].prefix);
    for (int i = 0; i < deep[k].count; i++) cn_sbuf_puts(&sb, deep[k].unit);
    cn_sbuf_puts(&sb, deep[k].middle);
    for (int i = 0; i < deep[k].count; i++) cn_sbuf_puts(&sb, deep[k].closing);
    CHECK(!sb.failed && cn_nt_parse_program(ctx, "d.cnl", sb.data) == NULL);
    CHECK_HAS(cn_ctx_error(ctx), "too deeply nested (more than 200 levels)");
    cn_sbuf_free(&sb);
  }
  /* 150 levels are fine, and wide inputs are arrays, not deep trees; a left-associative chain
   * (a flat sum of 20000 terms) is one level: its walks iterate along the spine. */
  cn_sbuf sb = {0};
  cn_sbuf_puts(&sb, "let x = ");
  for (int i = 0; i < 150; i++) cn_sbuf_puts(&sb, "a ** ");
  cn_sbuf_puts(&sb, "a\nlet y = f");
  for (int i = 0; i < 20000; i++) cn_sbuf_puts(&sb, " a");
  cn_sbuf_puts(&sb, "\nlet%cd r = a =: b");
  for (int i = 0; i < 20000; i++) cn_sbuf_puts(&sb, "; a =: b");
  cn_sbuf_puts(&sb, "\nlet d = {w");
  for (int i = 1; i < 256; i++) cn_sbuf_printf(&sb, "; f%d = %d", i, i);
  cn_sbuf_puts(&sb, "}\nlet%op g");
  for (int i = 0; i < 256; i++) cn_sbuf_printf(&sb, " x%d", i);
  cn_sbuf_puts(&sb, " = 1\nlet s = a");
  for (int i = 0; i < 20000; i++) cn_sbuf_puts(&sb, i % 2 ? " + a" : " - a");
  cn_nt_program *prog = sb.failed ? NULL : cn_nt_parse_program(ctx, "w.cnl", sb.data);
  cn_sbuf_free(&sb);
  CHECK(prog != NULL);
  if (prog) {
    CHECK_INT(prog->items[0].u.let.expr->height, 151);
    CHECK_INT(prog->items[1].u.let.expr->u.apply.n_args, 20000);
    CHECK_INT(prog->items[2].u.let.cd->u.seq.n, 20001);
    CHECK_INT(prog->items[2].u.let.cd->height, 3);
    CHECK_INT(prog->items[3].u.let.expr->u.decl.n_fields, 255);
    CHECK_INT(prog->items[4].u.let.n_params, 256);
    const cn_nt_expr *sum = prog->items[5].u.let.expr;
    CHECK_INT(sum->height, 2);
    CHECK_INT(cn_nt_binop_spine(sum, NULL), 20000);
    /* it prints flat (no parentheses) and the text reads back to the same tree */
    cn_sbuf text = {0};
    cn_nt_print_expr(&text, sum);
    CHECK(!text.failed && text.len == 1 + 20000 * 4 && strchr(text.data, '(') == NULL);
    CHECK(text.data && strncmp(text.data, "a - a + a - a", 13) == 0);
    cn_sbuf_free(&text);
  }
  /* Names are compared pairwise for duplicates: their number is capped. */
  cn_sbuf many = {0};
  cn_sbuf_puts(&many, "let d = {w");
  for (int i = 1; i <= 256; i++) cn_sbuf_printf(&many, "; f%d = 1", i);
  cn_sbuf_puts(&many, "}");
  CHECK(cn_nt_parse_program(ctx, "m.cnl", take(&many)) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "m.cnl:1:2455: too many fields (at most 256)");
  cn_sbuf_puts(&many, "let%op g");
  for (int i = 0; i < 257; i++) cn_sbuf_puts(&many, " _");
  cn_sbuf_puts(&many, " = 1");
  CHECK(cn_nt_parse_program(ctx, "m.cnl", take(&many)) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "m.cnl:1:522: too many parameters (at most 256)");
  /* for loops nest at most CN_NT_MAX_LOOP_DEPTH (32) deep */
  for (int depth = CN_NT_MAX_LOOP_DEPTH; depth <= CN_NT_MAX_LOOP_DEPTH + 1; depth++) {
    for (int i = 0; i < depth; i++) cn_sbuf_puts(&many, "for i = 0 to 1 do ");
    for (int i = 0; i < depth; i++) cn_sbuf_puts(&many, "done ");
    prog = cn_nt_parse_program(ctx, "n.cnl", take(&many));
    CHECK((prog != NULL) == (depth == CN_NT_MAX_LOOP_DEPTH));
  }
  CHECK_HAS(cn_ctx_error(ctx), "n.cnl:1:577: for loops nested too deeply (more than 32)");
  cn_ctx_destroy(ctx);
}

/* ---- Fuzzing -------------------------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static unsigned rnd(unsigned n) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (unsigned)(rng_state % n);
}

/* A failed parse leaves "FILE:LINE:COL: message", a line, and a caret line ending in '^'. */
static void check_message_shape(cn_ctx *ctx, const char *file) {
  const char *m = cn_ctx_error(ctx);
  int line = 0, col = 0, used = 0;
  char fmt[64];
  snprintf(fmt, sizeof fmt, "%s:%%d:%%d: %%n", file);
  CHECK_MSG(sscanf(m, fmt, &line, &col, &used) == 2 && used > 0 && line >= 1 && col >= 1,
            "bad message: %s", m);
  const char *nl1 = strchr(m, '\n');
  const char *nl2 = nl1 ? strchr(nl1 + 1, '\n') : NULL;
  CHECK_MSG(nl2 && !strchr(nl2 + 1, '\n') && m[strlen(m) - 1] == '^' &&
                strspn(nl2 + 1, " \t") == strlen(nl2 + 1) - 1,
            "bad message shape: %s", m);
}

static const char *const vocabulary[] = {
    "a",        "b",          "x",     "p",    "relu",  "add",    "where",    "id",
    "f",        "config",     "_",     "1",    "2.5",   "0",      "1e3",      "-",
    "\"s\"",    "\"i;i=>i\"", "\"w\"", "'q'",  "+",     "*",      "/",        "*.",
    "/.",       "**.",        "**",    "+*",   "++",    "+++",    "@^+",      "@^^",
    "@|",       "=",          "<",     "<>",   "||",    "&&",     "-?/",      "^^",
    "!.",       "!..",        "~~",    "=:",   "=+",    "=:+",    "=-",       "=:@^",
    "->",       ":",          "(",     ")",    "[",     "]",      "[|",       "|]",
    "{",        "}",          ";",     ";;",   ",",     ".",      ".grad",    "~logic:",
    "~config:", "~x",         "?x",    "?(",   "let",   "let%op", "let%cd",   "in",
    "if",       "then",       "else",  "true", "false", "print",  "backprop", "run",
    "sgd",      "set_seed",   "for",   "to",   "do",    "done",   "!@",       "~learning_rate:",
    "(* c *)",  "# c\n",      "\n",    "()",   "%",     "|",      "!",        "?",
    "~",        "'",          "\"",    "(*",   "*)",    "\\",     "@",        "$",
    "\t",       "é",          "\x01",
};

static void test_token_fuzz(void) {
  int n_vocab = (int)(sizeof vocabulary / sizeof vocabulary[0]);
  int accepted = 0, rejected = 0;
  for (int iter = 0; iter < 6000; iter++) {
    cn_ctx *ctx = cn_ctx_create();
    cn_sbuf sb = {0};
    static const char *const starts[] = {"", "let x = ", "let%cd r = ", "let%op f x = "};
    int len = 1 + (int)rnd(30);
    if (iter % 2) {
      /* Operands and operators alternating, now and then a token from the whole vocabulary:
       * mostly valid streams, with errors at random places. */
      static const char *const operands[] = {"a",   "1",      "\"s\"",   "2.5", "x.grad", "()",
                                             "[1]", "relu a", "'q' 2.0", "{w}", "!.k",    "(a, b)"};
      static const char *const operators[] = {"+", "*",  "*.", "**.", "-?/", "@|", "^^",
                                              "<", "||", "&&", "/.",  "<>",  "-"};
      static const char *const heads[] = {"let x = ", "let%op f x = ", "let%cd r = c =:+ "};
      cn_sbuf_puts(&sb, heads[rnd(3)]);
      len = 1 + 2 * (int)rnd(8);
      for (int i = 0; i < len; i++) {
        const char *const *set = i % 2 ? operators : operands;
        unsigned n_set =
            i % 2 ? sizeof operators / sizeof operators[0] : sizeof operands / sizeof operands[0];
        cn_sbuf_printf(&sb, "%s ", rnd(40) ? set[rnd(n_set)] : vocabulary[rnd((unsigned)n_vocab)]);
      }
    } else {
      cn_sbuf_puts(&sb, starts[rnd(4)]);
      for (int i = 0; i < len; i++) {
        cn_sbuf_puts(&sb, vocabulary[rnd((unsigned)n_vocab)]);
        if (rnd(8)) cn_sbuf_putc(&sb, ' ');
      }
    }
    static char text[1 << 16];
    snprintf(text, sizeof text, "%s", take(&sb));
    cn_nt_program *prog = cn_nt_parse_program(ctx, "fuzz.cnl", text);
    if (prog) {
      accepted++;
      static char first[1 << 16];
      snprintf(first, sizeof first, "%s", print_program(prog));
      cn_nt_program *again = cn_nt_parse_program(ctx, "again.cnl", first);
      CHECK_MSG(again != NULL, "input %s printed as %s, which fails: %s", text, first,
                cn_ctx_error(ctx));
      if (again) CHECK_STR(print_program(again), first);
    } else {
      rejected++;
      CHECK_INT(cn_ctx_status(ctx), CN_ERR_INVALID);
      check_message_shape(ctx, "fuzz.cnl");
    }
    /* The same stream as an expression and as assignments. */
    if (!cn_nt_parse_expr(ctx, "fuzz.cnl", text)) check_message_shape(ctx, "fuzz.cnl");
    if (!cn_nt_parse_cd(ctx, "fuzz.cnl", text)) check_message_shape(ctx, "fuzz.cnl");
    cn_ctx_destroy(ctx);
  }
  printf("token fuzz: %d accepted, %d rejected\n", accepted, rejected);
  CHECK(accepted > 500);
  CHECK(rejected > 3000);
}

/* Grammar-generated programs: always valid (compound parts parenthesized), so each must parse
 * and its print must be a fixed point. */
static void gen_expr(cn_sbuf *sb, int depth, bool allow_let);

static void gen_arg(cn_sbuf *sb, int depth) {
  static const char *const atoms[] = {
      "a",   "x1", "2",    "0.5",    "\"s\"", "'q' 2.0", "[1; 2]",       "[|3|]", "(1, 2)",
      "{w}", "()", "true", "p.grad", "!.k",   "!..n",    "{b; o = [3]}", "(-4)"};
  if (depth <= 0 || rnd(3) == 0) {
    cn_sbuf_puts(sb, atoms[rnd(sizeof atoms / sizeof atoms[0])]);
    return;
  }
  cn_sbuf_putc(sb, '(');
  gen_expr(sb, depth - 1, true);
  cn_sbuf_putc(sb, ')');
}

/* allow_let: a `let ... in` may come first (not as a %cd right-hand side or a tuple element,
 * where its body would swallow what follows). */
static void gen_expr(cn_sbuf *sb, int depth, bool allow_let) {
  static const char *const ops[] = {"+",  "-",  "*", "/",  "*.", "/.", "**.", "**",
                                    "@|", "^^", "<", "<>", "=",  "||", "&&",  "-?/",
                                    "+.", "%",  "$", "|>", "!=", "&",  "-@>", "^^^^"};
  unsigned k = depth <= 0 ? 0 : rnd(12);
  if (k == 8 && !allow_let) k = 0;
  switch (k) {
  case 0:
  case 1: gen_arg(sb, depth); break;
  case 2:
  case 3:
    gen_arg(sb, depth - 1);
    cn_sbuf_printf(sb, " %s ", ops[rnd(sizeof ops / sizeof ops[0])]);
    gen_arg(sb, depth - 1);
    break;
  case 4:
    cn_sbuf_puts(sb, rnd(2) ? "relu " : "f ~l:1 ~pun ");
    gen_arg(sb, depth - 1);
    break;
  case 5:
    gen_arg(sb, depth - 1);
    cn_sbuf_puts(sb, rnd(2) ? " +* \"i;i=>i\" " : " @^+ \"i;i=>i\" ");
    gen_arg(sb, depth - 1);
    break;
  case 6:
    gen_arg(sb, depth - 1);
    cn_sbuf_puts(sb, " ++ \"i=>i\"");
    break;
  case 7:
    cn_sbuf_puts(sb, rnd(2) ? "- " : "!.");
    gen_arg(sb, depth - 1);
    break;
  case 8:
    cn_sbuf_puts(sb, "let v = ");
    gen_expr(sb, depth - 1, true);
    cn_sbuf_puts(sb, " in ");
    gen_expr(sb, depth - 1, true);
    break;
  case 9:
    cn_sbuf_puts(sb, "[");
    gen_expr(sb, depth - 1, true);
    cn_sbuf_puts(sb, "; ");
    gen_expr(sb, depth - 1, true);
    cn_sbuf_puts(sb, "]");
    break;
  case 10:
    cn_sbuf_puts(sb, "{d = ");
    gen_expr(sb, depth - 1, true);
    cn_sbuf_puts(sb, "; o = ");
    gen_arg(sb, depth - 1);
    cn_sbuf_puts(sb, "} * \"w\" ");
    gen_arg(sb, 0);
    break;
  default:
    cn_sbuf_putc(sb, '(');
    gen_arg(sb, depth - 1);
    cn_sbuf_puts(sb, ", ");
    gen_expr(sb, depth - 1, true);
    cn_sbuf_puts(sb, ").grad");
    break;
  }
}

static void gen_cd(cn_sbuf *sb, int depth) {
  static const char *const lhs[] = {"c", "p.grad", "\"d\"", "{e}"};
  static const char *const asgn[] = {"=:",  "=+",   "=:+", "=-",  "=:*", "=/",  "=:**",
                                     "=?/", "=:?^", "=||", "=&&", "=@^", "=:^^"};
  int n = 1 + (int)rnd(3);
  for (int i = 0; i < n; i++) {
    if (i) cn_sbuf_puts(sb, "; ");
    unsigned k = depth > 0 ? rnd(8) : 0;
    if (k == 6) {
      cn_sbuf_puts(sb, "if ");
      gen_arg(sb, 1);
      cn_sbuf_puts(sb, " then (");
      gen_cd(sb, depth - 1);
      cn_sbuf_puts(sb, ") else (");
      gen_cd(sb, depth - 1);
      cn_sbuf_puts(sb, ")");
      continue;
    }
    if (k == 7) {
      cn_sbuf_puts(sb, "~~(\"c\" x; ");
      gen_cd(sb, depth - 1);
      cn_sbuf_puts(sb, ")");
      continue;
    }
    cn_sbuf_printf(sb, "%s %s ", lhs[rnd(4)], asgn[rnd(sizeof asgn / sizeof asgn[0])]);
    switch (rnd(4)) {
    case 0: gen_expr(sb, 2, false); break;
    case 1:
      cn_sbuf_puts(sb, "add (");
      gen_expr(sb, 1, false);
      cn_sbuf_puts(sb, ", b)");
      break;
    case 2:
      cn_sbuf_puts(sb, "where c ");
      gen_arg(sb, 1);
      cn_sbuf_puts(sb, " b");
      break;
    default:
      gen_arg(sb, 1);
      cn_sbuf_puts(sb, " * ");
      gen_arg(sb, 1);
      break;
    }
    if (rnd(2)) cn_sbuf_puts(sb, " ~logic:\"@\"");
  }
}

/* A let%tile item whose body calls functions with 0 to 8 arguments (the parser's limit) and
 * integers up to the int64 extremes: the script parser parses the body (src/tile) when it reads
 * the item (issue 14: a zero-argument call crashed that parse). Arity and names are checked only
 * when the function is applied, so every body parses. */
static void gen_tile(cn_sbuf *sb, int *arities) {
  static const char *const fns[] = {"exp", "pow", "select", "frob"};
  static const char *const args[] = {
      "I", "2", "N", "-9223372036854775807", "9223372036854775807", "0.5", "exp()"};
  int n = (int)rnd(9);
  arities[n]++;
  cn_sbuf_printf(sb, "let%%tile t I =\n  I.bind_dims(N)\n  R = %s(", fns[rnd(4)]);
  for (int k = 0; k < n; k++)
    cn_sbuf_printf(sb, "%s%s", k ? ", " : "", args[rnd(sizeof args / sizeof *args)]);
  cn_sbuf_puts(sb, ")\n  return R\n");
}

static void test_grammar_fuzz(void) {
  cn_ctx *ctx = cn_ctx_create();
  int arities[9] = {0};
  for (int iter = 0; iter < 3000; iter++) {
    cn_sbuf sb = {0};
    cn_sbuf_puts(&sb, "let x = ");
    gen_expr(&sb, 4, true);
    cn_sbuf_puts(&sb, "\nlet%cd r = ");
    gen_cd(&sb, 2);
    /* a statement in zero to two loops, a tuple pattern */
    int loops = (int)rnd(3);
    for (int i = 0; i < loops; i++) {
      cn_sbuf_printf(&sb, "\nfor i%d = ", i);
      gen_arg(&sb, 1);
      cn_sbuf_puts(&sb, " to ");
      gen_arg(&sb, 1);
      cn_sbuf_puts(&sb, " do print !@i");
    }
    cn_sbuf_puts(&sb, "\nsgd ");
    gen_arg(&sb, 2);
    cn_sbuf_puts(&sb, " ~learning_rate:0.1\n");
    for (int i = 0; i < loops; i++) cn_sbuf_puts(&sb, rnd(2) ? "done\n" : ";; done\n");
    cn_sbuf_puts(&sb, "let (u, _) = ");
    gen_expr(&sb, 2, true);
    cn_sbuf_putc(&sb, '\n');
    gen_tile(&sb, arities);
    const char *text = take(&sb);
    static char copy[1 << 16];
    snprintf(copy, sizeof copy, "%s", text);
    cn_nt_program *prog = cn_nt_parse_program(ctx, "g.cnl", copy);
    CHECK_MSG(prog != NULL, "generated program\n%s\nfails: %s", copy, cn_ctx_error(ctx));
    if (prog) {
      static char first[1 << 16];
      snprintf(first, sizeof first, "%s", print_program(prog));
      cn_nt_program *again = cn_nt_parse_program(ctx, "again.cnl", first);
      CHECK_MSG(again != NULL, "print\n%s\nfails: %s", first, cn_ctx_error(ctx));
      if (again) CHECK_STR(print_program(again), first);
    }
  }
  for (int n = 0; n < 9; n++) CHECK_MSG(arities[n] > 200, "arity %d", n);
  cn_ctx_destroy(ctx);
}

/* Every allocation failure gives NULL with CN_ERR_NOMEM, never a crash or a half tree. */
static void test_allocation_failures(void) {
  const char *text = examples[8].text; /* sgd_one: params, %cd, if, strings, prefix ops */
  int n = 1;
  for (;; n++) {
    cn_ctx *ctx = cn_ctx_create();
    ctx->fail_alloc_countdown = n;
    cn_nt_program *prog = cn_nt_parse_program(ctx, "a.cnl", text);
    bool done = prog != NULL;
    if (done) {
      CHECK(ctx->fail_alloc_countdown > 0);
      CHECK_STR(print_program(prog), examples[8].expected);
    } else {
      CHECK_INT(cn_ctx_status(ctx), CN_ERR_NOMEM);
    }
    cn_ctx_destroy(ctx);
    if (done) break;
  }
  CHECK(n > 20);
}

int main(void) {
  test_examples();
  test_assignment_table();
  test_tree_shapes();
  test_fields();
  test_loop_fields();
  test_errors();
  test_depth();
  test_token_fuzz();
  test_grammar_fuzz();
  test_allocation_failures();
  CHECK_DONE();
}
