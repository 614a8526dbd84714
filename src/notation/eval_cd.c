/* The evaluator's core floor (eval_core.h: it may include the core's, the services' and the
 * base's headers): %cd. An assignment becomes a standalone
 * update of the tensor layer (contraction-is-emergent's producer regime: it contributes its own
 * constraint through ~logic, "." by default); sequences, `if` on host values and block comments
 * build a code tree whose assignments are produced once shapes are known.
 *
 * Operands (syntax-extensions-cd-op "The syntax for %cd"): a tensor's value (`t`, `t.value`),
 * gradient (`t.grad`) or merge buffer (`t.merge`, `t.grad.merge`); an embedded tensor expression is
 * built as a tensor whose forward code runs just before the assignment that reads it. Targets: a
 * tensor's value or gradient, or an inline declaration ("name" or {name}): a non-differentiable
 * buffer whose label is the name, then the label of the first right-hand operand written as an
 * identifier or a field of one (syntax-extensions-cd-op "Intricacies": a declaration read on the
 * right passes on the tensor that enriched its own label). `~projections` belongs to the consumer
 * regime of an operation's code (eval_operation.c), which translates it; a routine refuses it.
 *
 * Invariants: code trees are built at evaluation and turned into assignments only after the
 * graph is materialized (nt_code_asgn); an update's operands are read through its record's slot
 * maps, with a merge buffer read in place of the node's value when flagged. */
#include "notation/eval_core.h"

#include <stdio.h>
#include <string.h>

static nt_code *new_code(nt_interp *I, nt_code_kind kind) {
  nt_code *c = cn_alloc(I->ctx, sizeof *c);
  if (c) c->kind = kind;
  return c;
}

nt_code *nt_seq_code(nt_interp *I, int n, nt_code **items) {
  nt_code *c = new_code(I, NT_C_SEQ);
  if (!c) return NULL;
  c->n = n;
  c->items = cn_alloc(I->ctx, sizeof *items * (size_t)(n + 1));
  if (!c->items) return NULL;
  if (n) memcpy(c->items, items, sizeof *items * (size_t)n);
  return c;
}

/* The tensor that enriches the label of the declaration on the left of `cd`: the first
 * right-hand operand written as an identifier or a field of one (not the declared name itself);
 * a %cd declaration passes on its own enriching tensor. */
static cn_tensor *enricher_of(nt_interp *I, nt_env *e, const cn_nt_cd *cd) {
  const cn_nt_expr *lhs = cd->u.assign.lhs;
  const char *self = lhs->kind == CN_NT_DECL ? lhs->u.decl.name : lhs->u.string.text;
  for (int i = 0; i < cd->u.assign.n_rhs; i++) {
    const cn_nt_expr *x = cd->u.assign.rhs[i];
    while (x->kind == CN_NT_FIELD) x = x->u.field.subject;
    if (x->kind != CN_NT_IDENT || strcmp(x->u.ident.name, self) == 0) continue;
    nt_value *v = nt_lookup(I, e, x->u.ident.name);
    if (!v || v->kind != NT_V_TENSOR) continue;
    const nt_cd_decl *d = cn_map_get(&I->cd_decls, v->t);
    if (!d) return v->t;
    if (d->enricher) return d->enricher;
  }
  return NULL;
}

/* Whether some tensor computes from t (then t is no forward root). The tensors built since the
 * last question are scanned for their operands first, so over a script each tensor is scanned
 * once instead of the whole graph at every question; false with a message on exhaustion. */
static bool computes_from(nt_interp *I, const cn_tensor *t, bool *yes) {
  for (; I->n_scanned < I->g->n_tensors; I->n_scanned++) {
    const cn_tensor *u = I->g->tensors[I->n_scanned];
    for (int k = 0; k < u->n_args; k++) {
      int id = u->args[k]->id;
      if (id >= I->cap_operand) {
        int old = I->cap_operand;
        if (!cn_arena_grow(I->ctx, (void **)&I->operand, &I->cap_operand, id + 1, 1)) return false;
        memset(I->operand + old, 0, (size_t)(I->cap_operand - old));
      }
      I->operand[id] = 1;
    }
  }
  *yes = t->id < I->cap_operand && I->operand[t->id];
  return true;
}

/* An operand or target of an assignment: a tensor's value, gradient or (operand only) merge
 * buffer. An embedded expression is built as a tensor whose forward code runs first (appended
 * to *pre); so does the forward code of a tensor named by an identifier if it is a forward root
 * (nothing computes from it) now and no statement or routine computed it before the routine's
 * first run, and the init code of a parameter not yet initialized. */
static bool cd_ref(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_expr *x, cn_tref *out,
                   bool *merge, nt_code **pre, int *n_pre, cn_tensor *enricher) {
  bool target = merge == NULL;
  if (x->kind == CN_NT_DECL || (x->kind == CN_NT_STRING && target)) {
    cn_tensor *t = nt_declare(I, e, ds, x, true, enricher);
    *out = (cn_tref){t, false};
    return t != NULL;
  }
  if (x->kind == CN_NT_STRING)
    return nt_fail(I, x->pos, "%s",
                   "a %cd declaration \"name\" is only allowed on the left of an assignment"),
           false;
  nt_value *v = nt_eval(I, e, ds, x);
  if (!v) return false;
  bool named = false; /* an existing tensor: its forward code only while it is a root */
  if (v->kind == NT_V_TENSOR) {
    if (target && v->merge)
      return nt_fail(I, x->pos, "%s", "a merge buffer is read, never assigned to"), false;
    *out = (cn_tref){v->t, v->grad};
    if (merge) *merge = v->merge;
    cn_tensor_kind k = v->t->kind;
    bool computed = k == CN_TK_ACCUM || k == CN_TK_NUMBER || k == CN_TK_FETCH || k == CN_TK_VEC ||
                    k == CN_TK_TILE;
    bool built = x->kind == CN_NT_BINOP || x->kind == CN_NT_APPLY || x->kind == CN_NT_EINSUM ||
                 x->kind == CN_NT_PREFIX;
    if (v->grad || !(v->t->is_param || (computed && !target))) return true;
    named = !built || v->t->is_param;
    bool computed_from = false;
    if (named && !v->t->is_param && !computes_from(I, v->t, &computed_from)) return false;
    if (computed_from) return true; /* not a root */
  } else {
    if (target) return nt_fail(I, x->pos, "cannot assign to %s", nt_kind_name(v->kind)), false;
    cn_tensor *t = nt_tensor_of(I, v, x->pos);
    if (!t) return false;
    *out = (cn_tref){t, false};
  }
  nt_code *c = new_code(I, NT_C_FORWARD);
  if (!c) return false;
  c->tensor = out->tensor;
  c->if_root = named;
  pre[(*n_pre)++] = c;
  return true;
}

/* The first inline declaration written in x, NULL when none: a {name} (or "name" ARG) anywhere,
 * or a string where an operand is read (as in %op, where it declares: the operand of a
 * binary operator other than ^ beside no other string, of a negation, of an einsum, or a
 * positional argument that is no spec), in the order of the source. */
static const cn_nt_expr *declaration_in(const cn_nt_expr *x, bool operand) {
  if (!x) return NULL;
  const cn_nt_expr *d = NULL;
  switch (x->kind) {
  case CN_NT_DECL: return x;
  case CN_NT_STRING: return operand ? x : NULL;
  case CN_NT_FIELD: return declaration_in(x->u.field.subject, false);
  case CN_NT_PREFIX: return declaration_in(x->u.prefix.operand, x->u.prefix.op[0] == '-');
  case CN_NT_BINOP: {
    const cn_nt_expr *l = x->u.binop.lhs, *r = x->u.binop.rhs;
    bool strings =
        strcmp(x->u.binop.op, "^") == 0 || l->kind == CN_NT_STRING || r->kind == CN_NT_STRING;
    if (strings && l->kind == CN_NT_STRING && r->kind == CN_NT_STRING) return NULL;
    if (!(d = declaration_in(l, !strings || l->kind != CN_NT_STRING)))
      d = declaration_in(r, !strings);
    return d;
  }
  case CN_NT_EINSUM:
    if (!(d = declaration_in(x->u.einsum.lhs, true))) d = declaration_in(x->u.einsum.rhs, true);
    return d;
  case CN_NT_APPLY: {
    const cn_nt_expr *fn = x->u.apply.fn;
    const char *name = fn->kind == CN_NT_IDENT ? fn->u.ident.name : "";
    if ((d = declaration_in(fn, false))) return d;
    for (int i = 0, k = 0; i < x->u.apply.n_args && !d; i++) {
      const cn_nt_arg *a = &x->u.apply.args[i];
      d = declaration_in(a->value, !a->label && !nt_spec_argument(name, k));
      if (!a->label) k++;
    }
    return d;
  }
  case CN_NT_LET:
    if (!(d = declaration_in(x->u.let.value, false))) d = declaration_in(x->u.let.body, false);
    return d;
  case CN_NT_ANNOT: return declaration_in(x->u.annot.expr, operand);
  case CN_NT_LIST:
  case CN_NT_TUPLE:
  case CN_NT_ARRAY:
    for (int i = 0; i < x->u.items.n && !d; i++) d = declaration_in(x->u.items.items[i], false);
    return d;
  case CN_NT_IF:
    if (!(d = declaration_in(x->u.if_.then_, operand))) d = declaration_in(x->u.if_.else_, operand);
    return d;
  default: return NULL;
  }
}

static nt_code *eval_assign(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_cd *cd) {
  const cn_nt_arg *pa = cn_nt_find_arg(cd->u.assign.n_args, cd->u.assign.args, "projections");
  if (pa)
    return nt_fail(I, pa->pos, "%s",
                   "no projections are in scope here: ~projections belongs to an operation's "
                   "code (operation ~op_asn ~grad_asn); give ~logic instead"),
           NULL;
  nt_code *items[5];
  int n = 0;
  cn_tref lhs, rhs[3];
  bool merge[3] = {false, false, false};
  const cn_nt_expr *target = cd->u.assign.lhs;
  bool declares = target->kind == CN_NT_DECL || target->kind == CN_NT_STRING;
  /* syntax-extensions-cd-op "Inline declarations": in %cd only in the assigned-to position */
  for (int i = 0; i < cd->u.assign.n_rhs; i++) {
    const cn_nt_expr *d = declaration_in(cd->u.assign.rhs[i], false);
    if (d && d->kind == CN_NT_DECL)
      return nt_fail(I, d->pos,
                     "a %%cd declaration {%s} is only allowed on the left of an assignment: "
                     "declare it there first, or create it outside the %%cd code",
                     d->u.decl.name),
             NULL;
    if (d)
      return nt_fail(I, d->pos, "%s",
                     "a %cd declaration \"name\" is only allowed on the left of an assignment"),
             NULL;
  }
  cn_tensor *enricher = declares ? enricher_of(I, e, cd) : NULL;
  if (!cd_ref(I, e, ds, target, &lhs, NULL, items, &n, enricher)) return NULL;
  for (int i = 0; i < cd->u.assign.n_rhs; i++)
    if (!cd_ref(I, e, ds, cd->u.assign.rhs[i], &rhs[i], &merge[i], items, &n, NULL)) return NULL;
  cn_shape_logic logic, *given = NULL; /* none given: the primitive's default */
  const cn_nt_arg *la = cn_nt_find_arg(cd->u.assign.n_args, cd->u.assign.args, "logic");
  if (la && la->value) {
    nt_value *lv = nt_eval(I, e, ds, la->value);
    if (!lv) return NULL;
    if (lv->kind != NT_V_STR) return nt_fail(I, la->pos, "%s", "~logic expects a string"), NULL;
    const char *text = nt_spec_splice(I, e, lv->str, la->value->pos);
    if (!text) return NULL;
    if (cn_shape_logic_parse(I->ctx, text, &logic) != CN_OK)
      return nt_fail_here(I, cd->u.assign.op_pos), NULL;
    given = &logic;
  } else if (la) {
    return nt_fail(I, la->pos, "%s", "~logic needs a value: ~logic:\".\", \"@\", \"T\" or a spec"),
           NULL;
  } else if (cd->u.assign.form == CN_NT_RHS_INFIX &&
             (strcmp(cd->u.assign.op_text, "*") == 0 || strcmp(cd->u.assign.op_text, "/") == 0)) {
    /* syntax-extensions-cd-op: `*` and `/` have no default projection logic in %cd (`*` is compose
     * in a tensor expression but Mul here); it must be told */
    const char *why =
        cd->u.assign.op_text[0] == '*'
            ? "'*' in an assignment needs ~logic (\".\" pointwise, \"@\" compose, or a "
              "spec)"
            : "'/' in an assignment needs ~logic (\".\" pointwise or a spec)";
    return nt_fail(I, cd->u.assign.op_pos, "%s", why), NULL;
  }
  cn_update *u = cn_graph_update_logic(I->g, lhs, cd->u.assign.clear, cd->u.assign.accum,
                                       cd->u.assign.op, cd->u.assign.n_rhs, rhs, given);
  if (!u) return nt_fail_here(I, cd->u.assign.op_pos), NULL;
  nt_note(I, cd->u.assign.op_pos);
  nt_code *c = new_code(I, NT_C_UPDATE);
  if (!c) return NULL;
  c->update = u;
  memcpy(c->merge, merge, sizeof merge);
  items[n++] = c;
  return n == 1 ? c : nt_seq_code(I, n, items);
}

/* ~~("text" t ...; body): the parts are strings and tensors (their labels; a gradient as
 * label.grad). */
static nt_code *eval_comment(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_cd *cd) {
  cn_sbuf sb = {0};
  for (int i = 0; i < cd->u.comment.n_parts; i++) {
    const cn_nt_expr *part = cd->u.comment.parts[i];
    nt_value *v = nt_eval(I, e, ds, part);
    if (v && v->kind == NT_V_LIST && v->literal && !nt_tensor_of(I, v, part->pos)) v = NULL;
    if (v && v->kind != NT_V_STR && v->kind != NT_V_TENSOR && !(v->kind == NT_V_LIST && v->literal))
      v = nt_fail(I, part->pos, "a comment is made of strings and tensors, not %s",
                  nt_kind_name(v->kind));
    if (!v) {
      cn_sbuf_free(&sb);
      return NULL;
    }
    if (i) cn_sbuf_putc(&sb, ' ');
    if (v->kind == NT_V_STR)
      cn_sbuf_puts(&sb, v->str);
    else
      cn_sbuf_printf(&sb, "%s%s", v->t->label, v->grad ? ".grad" : "");
  }
  nt_code *c = new_code(I, NT_C_COMMENT);
  if (!c) return cn_sbuf_free(&sb), NULL;
  c->text = cn_sbuf_finish(I->ctx, &sb);
  c->n = 1;
  c->items = cn_alloc(I->ctx, sizeof *c->items);
  if (!c->text || !c->items || !(c->items[0] = nt_eval_cd(I, e, ds, cd->u.comment.body)))
    return NULL;
  return c;
}

nt_code *nt_eval_cd(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_cd *cd) {
  switch (cd->kind) {
  case CN_NT_CD_ASSIGN: return eval_assign(I, e, ds, cd);
  case CN_NT_CD_SEQ: {
    nt_code **items = cn_alloc(I->ctx, sizeof *items * (size_t)(cd->u.seq.n + 1));
    if (!items) return NULL;
    for (int i = 0; i < cd->u.seq.n; i++)
      if (!(items[i] = nt_eval_cd(I, e, ds, cd->u.seq.items[i]))) return NULL;
    return nt_seq_code(I, cd->u.seq.n, items);
  }
  case CN_NT_CD_IF: {
    nt_value *c = nt_eval(I, e, ds, cd->u.if_.cond);
    if (!c) return NULL;
    if (c->kind != NT_V_BOOL && c->kind != NT_V_NUM)
      return nt_fail(I, cd->u.if_.cond->pos, "an if condition must be a host value, found %s",
                     nt_kind_name(c->kind)),
             NULL;
    bool yes = c->kind == NT_V_BOOL ? c->b : c->num != 0;
    if (yes) return nt_eval_cd(I, e, ds, cd->u.if_.then_branch);
    return cd->u.if_.else_branch ? nt_eval_cd(I, e, ds, cd->u.if_.else_branch)
                                 : nt_seq_code(I, 0, NULL);
  }
  case CN_NT_CD_COMMENT: return eval_comment(I, e, ds, cd);
  }
  return NULL;
}

void nt_consume(nt_interp *I, const cn_tensor *t) {
  if (t->id >= I->cap_consumed) {
    int old = I->cap_consumed;
    /* a failed allocation leaves t a root: its forward code may run once more, harmlessly */
    if (!cn_arena_grow(I->ctx, (void **)&I->consumed, &I->cap_consumed, t->id + 1, 1)) return;
    memset(I->consumed + old, 0, (size_t)(I->cap_consumed - old));
  }
  I->consumed[t->id] = 1;
}

/* The update's assignment with merge buffers read where flagged (cn_graph_update_code reads
 * every operand's node). */
static cn_asgn *update_asgn(nt_interp *I, const nt_code *c) {
  if (!c->merge[0] && !c->merge[1] && !c->merge[2]) return cn_graph_update_code(I->g, c->update);
  if (cn_graph_materialize(I->g) != CN_OK) return NULL;
  const cn_update *u = c->update;
  cn_buffer buf[3];
  for (int i = 0; i < u->n_args; i++) {
    buf[i] = (cn_buffer){cn_tref_node(u->args[i]), c->merge[i]};
    if (!buf[i].node) return NULL;
  }
  cn_node *lhs = cn_tref_node(u->lhs);
  return lhs ? cn_asgn_accum(I->ctx, u->init, u->accum, lhs, u->prim, buf, u->proj) : NULL;
}

cn_asgn *nt_code_asgn(nt_interp *I, const nt_code *c, cn_asgn **init) {
  cn_ctx *ctx = I->ctx;
  switch (c->kind) {
  case NT_C_UPDATE: return update_asgn(I, c);
  case NT_C_FORWARD: {
    if (c->if_root && c->tensor->is_param) { /* its init, once, before the routine */
      if (!init) return cn_asgn_noop(ctx);
      cn_asgn *params = cn_graph_init_params(I->g, c->tensor);
      *init = params && *init ? cn_asgn_seq(ctx, 2, (cn_asgn *[]){*init, params}) : params;
      return *init ? cn_asgn_noop(ctx) : NULL;
    }
    /* computed by a statement or routine since the assignment was built: no root any more */
    if (c->if_root && c->tensor->id < I->cap_consumed && I->consumed[c->tensor->id])
      return cn_asgn_noop(ctx);
    nt_consume(I, c->tensor);
    cn_asgn *params = cn_graph_init_params(I->g, c->tensor);
    cn_asgn *forward = params ? cn_graph_forward_embedded(I->g, c->tensor) : NULL;
    if (!forward) return NULL;
    if (!init) return cn_asgn_seq(ctx, 2, (cn_asgn *[]){params, forward});
    *init = *init ? cn_asgn_seq(ctx, 2, (cn_asgn *[]){*init, params}) : params;
    return *init ? forward : NULL;
  }
  case NT_C_COMMENT: {
    cn_asgn *body = nt_code_asgn(I, c->items[0], init);
    return body ? cn_asgn_comment(ctx, c->text, body) : NULL;
  }
  case NT_C_SEQ: {
    cn_asgn **items = cn_alloc(ctx, sizeof *items * (size_t)(c->n + 1));
    if (!items) return NULL;
    for (int i = 0; i < c->n; i++)
      if (!(items[i] = nt_code_asgn(I, c->items[i], init))) return NULL;
    return c->n ? cn_asgn_seq(ctx, c->n, items) : cn_asgn_noop(ctx);
  }
  }
  return NULL;
}
