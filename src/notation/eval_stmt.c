/* The evaluator, part 4 of 5 (see eval_internal.h): the statements of a script (let, print,
 * backprop, run, sgd, set_seed, for loops) and the entry points cn_notation_run, cn_notation_check,
 * cn_notation_op and cn_notation_cd.
 *
 * Loops: a statement in a loop body is elaborated once, on its first execution (its tensors
 * built, its parameters initialized by a routine of their own, its code compiled), and each later
 * execution only binds the enclosing loops' indices and runs the compiled routine again.
 * Statements materialize the graph before building code, so that a shape conflict found only
 * when shapes are closed is reported at the expression that introduced it (nt_materialize).
 *
 * Invariants: a routine compiled for a statement outside loops is freed after its run; routines
 * kept by loop statements and %cd routines live until the context is destroyed. */
#include "notation/eval_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static FILE *out(nt_interp *I) {
  return I->opts.out ? I->opts.out : stdout;
}

/* Compiles asgn (or reuses *cache when it holds a routine), binds the enclosing loops' indices the
 * routine reads and runs it, printing what --emit asks for. Without a cache the routine is freed
 * after the run. */
static bool run_asgn(nt_interp *I, cn_asgn *asgn, cn_routine **cache, cn_nt_pos at) {
  cn_routine *r = cache ? *cache : NULL;
  if (!r) {
    char name[32];
    snprintf(name, sizeof name, "cnl_%d", ++I->n_routines);
    if (!asgn || !(r = cn_routine_compile(I->ctx, asgn, I->opts.backend, name)))
      return nt_fail_here(I, at), false;
    if (I->opts.emit_asgn)
      fprintf(out(I), "# %s: assignments\n%s", name, cn_asgn_to_string(I->ctx, asgn));
    if (I->opts.emit_loops) fprintf(out(I), "# %s: loops\n%s", name, cn_routine_loops(r));
    if (I->opts.emit_c && cn_routine_source(r))
      fprintf(out(I), "# %s: C\n%s", name, cn_routine_source(r));
    if (cache) *cache = r;
  }
  cn_status st = CN_OK;
  for (int i = 0; i < I->n_bound && st == CN_OK; i++)
    if (cn_routine_reads(r, I->bound[i].sym))
      st = cn_routine_bind(r, I->bound[i].sym, I->bound[i].value);
  if (st == CN_OK) st = cn_routine_run(r);
  if (!cache) cn_routine_free(r);
  if (st != CN_OK) return nt_fail_here(I, at), false;
  return true;
}

static bool asgn_empty(const cn_asgn *a) {
  switch (a->kind) {
  case CN_ASGN_NOOP: return true;
  case CN_ASGN_COMMENT: return asgn_empty(a->u.comment.body);
  case CN_ASGN_SEQ:
    for (int i = 0; i < a->u.seq.count; i++)
      if (!asgn_empty(a->u.seq.items[i])) return false;
    return true;
  default: return false;
  }
}

/* Runs a statement's parameter init code and its main code. Outside loops as one routine, freed
 * after the run; in a loop body the init code (if any) runs on its own, once, and main is
 * compiled into st->routine, which later executions run again. */
static bool run_statement(nt_interp *I, nt_item_state *st, cn_asgn *init, cn_asgn *main,
                          cn_nt_pos at) {
  if (!init || !main) return nt_fail_here(I, at), false;
  if (I->n_bound == 0)
    return run_asgn(I, cn_asgn_seq(I->ctx, 2, (cn_asgn *[]){init, main}), NULL, at);
  if (!asgn_empty(init) && !run_asgn(I, init, NULL, at)) return false;
  return run_asgn(I, main, &st->routine, at);
}

/* The state of a statement in a loop body (created on its first execution); outside loops a
 * statement runs once and uses the caller's zeroed `local`. */
static nt_item_state *state_of(nt_interp *I, const cn_nt_item *it, nt_item_state *local) {
  if (I->n_bound == 0) return local;
  nt_item_state *s = cn_map_get(&I->states, it);
  if (s) return s;
  if (!(s = cn_alloc(I->ctx, sizeof *s))) return NULL;
  s->item = it;
  return cn_map_put(I->ctx, &I->states, it, s) ? s : NULL;
}

/* The tensor a statement works on (built once per statement state), with the graph
 * materialized. */
static bool statement_tensor(nt_interp *I, nt_env *scope, const cn_nt_expr *x, nt_item_state *st) {
  if (st->tensor) return true;
  nt_value *v = nt_eval(I, scope, &I->top, x);
  st->grad = v && v->kind == NT_V_TENSOR && v->grad;
  st->tensor = v && v->kind == NT_V_TENSOR ? v->t : v ? nt_tensor_of(I, v, x->pos) : NULL;
  if (st->tensor) cn_tensor_set_named(st->tensor); /* printed, or a loss the host reports */
  return st->tensor != NULL && nt_materialize(I, x->pos);
}

static bool item(nt_interp *I, const cn_nt_item *it, nt_env *scope);

/* A value bound by a let: a literal becomes its tensor; a tensor or static index this let
 * created takes the name. */
static nt_value *let_value(nt_interp *I, nt_value *v, const char *name, int before, cn_nt_pos pos) {
  if (v->kind == NT_V_LIST && v->literal) {
    if (!nt_tensor_of(I, v, pos)) return NULL;
    v = nt_tensor_value(I, v->t);
  }
  if (!v || strcmp(name, "_") == 0) return v;
  if (v->kind == NT_V_TENSOR && v->t->id > before && cn_tensor_set_label(v->t, name) != CN_OK)
    return NULL;
  if (v->kind == NT_V_INDEX && !v->index.name) v->index.name = name;
  return v;
}

/* let (a, b, ...) = e: e must be a tuple of as many items. */
static bool bind_pattern(nt_interp *I, const cn_nt_item *it, nt_value *v, int before) {
  int n = it->u.let.n_names;
  if (v->kind != NT_V_LIST || !v->tuple || v->n != n)
    return nt_fail(I, it->u.let.expr->pos, "the pattern binds %d names: expected a tuple of %d", n,
                   n),
           false;
  for (int i = 0; i < n; i++) {
    const char *name = it->u.let.names[i];
    nt_value *item_v = let_value(I, v->items[i], name, before, it->u.let.expr->pos);
    if (!item_v || (strcmp(name, "_") != 0 && !nt_bind_global(I, name, item_v))) return false;
  }
  return true;
}

/* A let%op / let%cd / let%tile function (a Tile body was parsed with the script): a let%op function
 * without a lifting parameter creates its inline declarations (and config blocks) now, once, shared
 * by every application. */
static nt_value *function_value(nt_interp *I, const cn_nt_item *it) {
  nt_value *v = nt_mk(I, NT_V_FUNC);
  if (!v) return NULL;
  v->fn.def = it;
  v->fn.given = cn_alloc(I->ctx, sizeof(nt_value *) * (size_t)it->u.let.n_params);
  v->fn.decls = cn_alloc(I->ctx, sizeof *v->fn.decls);
  if (!v->fn.given || !v->fn.decls) return NULL;
  if (it->u.let.ext == CN_NT_LET_TILE) return v; /* the parser made the Tile function */
  bool lifting = it->u.let.ext == CN_NT_LET_CD;
  for (int k = 0; k < it->u.let.n_params; k++) lifting |= nt_is_lifting(&it->u.let.params[k]);
  if (!lifting && !nt_predeclare(I, NULL, v->fn.decls, it->u.let.expr)) return NULL;
  return v;
}

static bool let_item(nt_interp *I, const cn_nt_item *it) {
  const char *name = it->u.let.name;
  nt_value *v;
  if (it->u.let.n_params > 0) {
    if (!(v = function_value(I, it))) return false;
  } else if (it->u.let.ext == CN_NT_LET_CD) {
    nt_code *c = nt_eval_cd(I, NULL, &I->top, it->u.let.cd);
    if (!c || !(v = nt_mk(I, NT_V_ROUTINE))) return false;
    v->routine = c;
  } else {
    int before = I->g->n_tensors;
    if (!(v = nt_eval(I, NULL, &I->top, it->u.let.expr))) return false;
    if (it->u.let.n_names > 0) return bind_pattern(I, it, v, before);
    if (!(v = let_value(I, v, name, before, it->u.let.expr->pos))) return false;
  }
  return strcmp(name, "_") == 0 || nt_bind_global(I, name, v);
}

/* One execution of a for loop (for_item): the bounds, the index, the iterations. */
static bool run_loop(nt_interp *I, const cn_nt_item *it, nt_env *scope, nt_item_state *st) {
  nt_value *from = nt_eval(I, scope, &I->top, it->u.for_.from);
  nt_value *to = from ? nt_eval(I, scope, &I->top, it->u.for_.to) : NULL;
  int64_t lo, hi;
  if (!to || !nt_as_int(I, from, it->u.for_.from->pos, &lo) ||
      !nt_as_int(I, to, it->u.for_.to->pos, &hi))
    return false;
  if (lo < 0 && hi >= lo)
    return nt_fail(I, it->u.for_.from->pos, "%s", "a static index starts at 0 or more");
  if (!st->index) {
    nt_value *v = nt_lookup(I, scope, it->u.for_.name);
    if (!v || v->kind != NT_V_INDEX) {
      if (!(v = nt_mk(I, NT_V_INDEX))) return false;
      v->index.range = hi >= lo ? hi + 1 : 1;
      v->index.name = it->u.for_.name;
    }
    st->index = v;
  }
  if (hi >= lo && hi >= st->index->index.range)
    return nt_fail(I, it->u.for_.to->pos,
                   "the loop reaches %lld, outside the values 0 .. %lld of '%s'", (long long)hi,
                   (long long)st->index->index.range - 1, it->u.for_.name);
  cn_symbol sym;
  nt_env *body = scope;
  if (!nt_index_symbol(I, st->index, it->u.for_.name_pos, &sym) ||
      !nt_bind(I, &body, it->u.for_.name, st->index))
    return false;
  CN_ASSERT(I->n_bound < CN_NT_MAX_LOOP_DEPTH); /* the parser's nesting limit */
  int slot = I->n_bound++;
  I->bound[slot].sym = sym;
  bool ok = true;
  for (int64_t i = lo; ok && i <= hi; i++) {
    I->bound[slot].value = i;
    for (int k = 0; ok && k < it->u.for_.n_items; k++) ok = item(I, &it->u.for_.items[k], body);
  }
  I->n_bound--;
  st->ran |= ok && hi >= lo;
  return ok;
}

/* for i = a to b do ... done: binds i (an existing static index, or a new one with the values
 * 0 .. b) to a, a + 1, ..., b in turn and runs the body each time; nothing when b < a.
 * A loop in a loop body runs again at each step of the outer loop. Once an execution has run
 * its body, every statement below it is elaborated (bodies have no conditionals and their
 * bounds are the same each time), so a later execution allocates only temporaries (the bounds'
 * values, the index binding): it gives them back (cn_arena_reset), or nested loops would grow
 * the arena at every step. A failure keeps them: the message may live there. */
static bool for_item(nt_interp *I, const cn_nt_item *it, nt_env *scope, nt_item_state *st) {
  cn_arena_marker mark = cn_arena_mark(&I->ctx->arena);
  bool again = st->ran;
  if (!run_loop(I, it, scope, st)) return false;
  if (again) cn_arena_reset(&I->ctx->arena, mark);
  return true;
}

static bool sgd_item(nt_interp *I, const cn_nt_item *it, nt_env *scope, nt_item_state *st) {
  if (st->routine) return run_asgn(I, NULL, &st->routine, it->pos);
  if (!statement_tensor(I, scope, it->u.sgd.expr, st)) return false;
  nt_value *lr = nt_eval(I, scope, &I->top, it->u.sgd.learning_rate);
  cn_tensor *lrt = lr ? nt_tensor_of(I, lr, it->u.sgd.learning_rate->pos) : NULL;
  if (!lrt) return false;
  nt_value *m = it->u.sgd.momentum ? nt_eval(I, scope, &I->top, it->u.sgd.momentum) : NULL;
  nt_value *w = it->u.sgd.weight_decay ? nt_eval(I, scope, &I->top, it->u.sgd.weight_decay) : NULL;
  nt_value *nv = it->u.sgd.nesterov ? nt_eval(I, scope, &I->top, it->u.sgd.nesterov) : NULL;
  if ((it->u.sgd.momentum && (!m || m->kind != NT_V_NUM)) ||
      (it->u.sgd.weight_decay && (!w || w->kind != NT_V_NUM)) ||
      (it->u.sgd.nesterov && (!nv || nv->kind != NT_V_BOOL)))
    return nt_fail(I, it->pos, "%s",
                   "sgd expects numbers for ~momentum and ~weight_decay, a boolean for ~nesterov"),
           false;
  if (!nt_materialize(I, it->pos)) return false;
  cn_sgd sgd = {lrt, m ? m->num : 0, w ? w->num : 0, nv && nv->b};
  cn_asgn *init = cn_graph_init_params(I->g, st->tensor);
  return run_statement(I, st, init, init ? cn_graph_sgd_update(I->g, st->tensor, &sgd) : NULL,
                       it->pos);
}

static bool print_item(nt_interp *I, const cn_nt_item *it, nt_env *scope, nt_item_state *st) {
  cn_nt_pos at = it->u.expr->pos;
  if (!statement_tensor(I, scope, it->u.expr, st)) return false;
  if (!st->grad && st->routine && !run_asgn(I, NULL, &st->routine, at)) return false;
  if (!st->grad && !st->routine) {
    nt_consume(I, st->tensor);
    cn_asgn *init = cn_graph_init_params(I->g, st->tensor);
    if (!run_statement(I, st, init, init ? cn_graph_forward(I->g, st->tensor) : NULL, at))
      return false;
  }
  const char *text = cn_tensor_format(st->tensor, st->grad, I->opts.json);
  if (!text) return nt_fail_here(I, at), false;
  fprintf(out(I), "%s%s", text, I->opts.json ? "\n" : "");
  return true;
}

/* run r, or run f args (a let%cd function applied): the routine's parameter init runs once,
 * before its first run; in a loop the application is elaborated once. */
static bool run_item(nt_interp *I, const cn_nt_item *it, nt_env *scope, nt_item_state *st) {
  cn_nt_pos at = it->u.expr->pos;
  nt_value *v = st->run ? st->run : nt_eval(I, scope, &I->top, it->u.expr);
  if (!v) return false;
  if (v->kind != NT_V_ROUTINE)
    return nt_fail(I, at, "%s is not a routine%s", nt_kind_name(v->kind),
                   v->kind == NT_V_FUNC ? " (a let%cd function needs all its arguments)" : ""),
           false;
  st->run = v;
  nt_code *c = v->routine;
  if (c->compiled) return run_asgn(I, NULL, &c->compiled, at);
  if (!nt_materialize(I, at)) return false;
  cn_asgn *init = NULL, *main = nt_code_asgn(I, c, &init);
  if (!main) return nt_fail_here(I, at), false;
  if (init && !asgn_empty(init) && !run_asgn(I, init, NULL, at)) return false;
  return run_asgn(I, main, &c->compiled, at);
}

static bool item(nt_interp *I, const cn_nt_item *it, nt_env *scope) {
  if (it->kind == CN_NT_ITEM_LET) return let_item(I, it);
  nt_item_state local = {0}, *st = state_of(I, it, &local);
  if (!st) return false;
  switch (it->kind) {
  case CN_NT_ITEM_LET: return false; /* handled above: a let keeps no state */
  case CN_NT_ITEM_PRINT: return print_item(I, it, scope, st);
  case CN_NT_ITEM_BACKPROP: {
    cn_nt_pos at = it->u.expr->pos;
    if (st->routine) return run_asgn(I, NULL, &st->routine, at);
    if (!statement_tensor(I, scope, it->u.expr, st)) return false;
    nt_consume(I, st->tensor);
    cn_asgn *init = cn_graph_init_params(I->g, st->tensor);
    return run_statement(I, st, init, init ? cn_graph_grad_update(I->g, st->tensor) : NULL, at);
  }
  case CN_NT_ITEM_RUN: return run_item(I, it, scope, st);
  case CN_NT_ITEM_SGD: return sgd_item(I, it, scope, st);
  case CN_NT_ITEM_SET_SEED:
    if (cn_graph_set_seed(I->g, (uint32_t)it->u.seed) != CN_OK)
      return nt_fail_here(I, it->pos), false;
    return true;
  case CN_NT_ITEM_FOR: return for_item(I, it, scope, st);
  }
  return false;
}

/* ---- Entry points ---------------------------------------------------------------------------- */

static bool bind_all(nt_interp *I, int n, const cn_notation_binding *b) {
  for (int i = 0; i < n; i++) {
    nt_value *v = b[i].tensor ? nt_tensor_value(I, b[i].tensor)
                              : nt_num(I, b[i].number, b[i].number == floor(b[i].number));
    if (!b[i].name || !v || !nt_bind_global(I, b[i].name, v)) {
      if (!b[i].name) cn_fail(I->ctx, CN_ERR_INVALID, "binding %d has no name", i);
      return false;
    }
  }
  return true;
}

static void open_interp(nt_interp *I, cn_graph *g, const cn_notation_options *opts) {
  memset(I, 0, sizeof *I);
  I->ctx = cn_graph_ctx(g);
  I->g = g;
  I->globals.strings = true;
  if (opts) I->opts = *opts;
  /* tensors built before (by C code) have no position in this text */
  I->noted_tensors = g->n_tensors;
  I->noted_updates = g->n_updates;
}

static cn_status run_program(nt_interp *I, const char *file, const char *text,
                             const cn_notation_options *opts) {
  cn_nt_program *prog = cn_nt_parse_program(I->ctx, file ? file : "<script>", text ? text : "");
  if (opts && opts->syntax_error) *opts->syntax_error = !prog;
  if (!prog) return cn_ctx_status(I->ctx);
  for (int i = 0; i < prog->n_items; i++)
    if (!item(I, &prog->items[i], NULL))
      return cn_ctx_status(I->ctx) ? cn_ctx_status(I->ctx) : CN_ERR_INVALID;
  return CN_OK;
}

/* A script's tensors reach the host and later code only through names, so those it never names
 * are fusable while it runs (tensor.h, fuse_unnamed); cn_notation_op and cn_notation_cd hand
 * their results to C code and keep every node. */
cn_status cn_notation_run(cn_graph *g, const char *file, const char *text,
                          const cn_notation_options *opts) {
  nt_interp I;
  open_interp(&I, g, opts);
  bool was = g->fuse_unnamed;
  g->fuse_unnamed = true;
  cn_status st = run_program(&I, file, text, opts);
  g->fuse_unnamed = was;
  return st;
}

cn_status cn_notation_check(cn_ctx *ctx, const char *file, const char *text) {
  return cn_nt_parse_program(ctx, file ? file : "<script>", text ? text : "") ? CN_OK
                                                                              : cn_ctx_status(ctx);
}

cn_tensor *cn_notation_op(cn_graph *g, const char *text, int n_bindings,
                          const cn_notation_binding *bindings) {
  nt_interp I;
  open_interp(&I, g, NULL);
  if (!bind_all(&I, n_bindings, bindings)) return NULL;
  cn_nt_expr *x = cn_nt_parse_expr(I.ctx, "<cn_op>", text ? text : "");
  nt_value *v = x ? nt_eval(&I, NULL, &I.top, x) : NULL;
  return v ? nt_tensor_of(&I, v, x->pos) : NULL;
}

cn_asgn *cn_notation_cd(cn_graph *g, const char *text, int n_bindings,
                        const cn_notation_binding *bindings) {
  nt_interp I;
  open_interp(&I, g, NULL);
  if (!bind_all(&I, n_bindings, bindings)) return NULL;
  cn_nt_cd *cd = cn_nt_parse_cd(I.ctx, "<cn_cd>", text ? text : "");
  nt_code *c = cd ? nt_eval_cd(&I, NULL, &I.top, cd) : NULL;
  return c && nt_materialize(&I, cd->pos) ? nt_code_asgn(&I, c, NULL) : NULL;
}
