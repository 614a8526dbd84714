/* The evaluator's statement floor (eval_stmt.h: it may include every floor's header): the
 * statements of a script (let, print, printf, backprop, run, sgd, adam, shuffle, checkpoint,
 * save_npy, set_seed, for loops, if; plot is in eval_plot.c, a statement's tensors and host
 * arguments in eval_elab.c), the entry points cn_notation_run (with --set's replaced literals and
 * its export of a model), cn_notation_check, cn_notation_op and cn_notation_cd.
 *
 * Loops: a statement in a loop body is elaborated once, on its first execution (its tensors
 * built, its parameters initialized by a routine of their own, its code compiled), and each later
 * execution only binds the enclosing loops' indices and runs the compiled routine again; the
 * backprop / sgd / adam / run statements a loop body starts with are elaborated together at the
 * loop's first iteration and their routines compiled at once (compile_ahead). A data-parallel
 * loop (`~devices:N`) runs its backprop and optimizer as one cn_dp step on N CPU devices (dp_*).
 * Statements materialize the graph before building code, so that a shape conflict found only
 * when shapes are closed is reported at the expression that introduced it (nt_materialize).
 *
 * A statement's state is created on its first execution, which is when it is elaborated (an `if`
 * branch may be first taken in any iteration): an iteration that creates no state allocates only
 * temporaries, which run_loop gives back, so a long loop takes no memory per step.
 *
 * Invariants: a routine compiled for a statement outside loops is freed after its run; routines
 * kept by loop statements and %cd routines live until the context is destroyed. */
#include "notation/eval_stmt.h"
#include "runtime/routine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Runs a statement's compiled routine, after its parameter init when that is still to run (a
 * statement compiled ahead: compile_ahead). */
static bool run_compiled(nt_interp *I, nt_item_state *st, cn_routine **routine, cn_nt_pos at) {
  if (st->init) {
    cn_asgn *init = st->init;
    st->init = NULL;
    if (!nt_run_asgn_named(I, init, NULL, at, st->init_name)) return false;
  }
  return nt_run_asgn(I, NULL, routine, at);
}

/* The code of a statement as its first execution elaborates it: the parameter init (empty when
 * every parameter is initialized already) and the main code; false with a message. */
static bool statement_code(nt_interp *I, cn_asgn *init, cn_asgn *main, cn_asgn **init_out,
                           cn_asgn **main_out, cn_nt_pos at) {
  if (!init || !main) return nt_fail_here(I, at), false;
  *init_out = init;
  *main_out = main;
  return true;
}

/* The state of a statement in a loop body (created on its first execution); outside loops a
 * statement runs once and uses the caller's zeroed `local`. */
static nt_item_state *state_of(nt_interp *I, const cn_nt_item *it, nt_item_state *local) {
  if (I->n_bound == 0) return local;
  nt_item_state *s = cn_map_get(&I->states, it);
  if (s) return s;
  if (!(s = cn_alloc(I->ctx, sizeof *s))) return NULL;
  s->item = it;
  I->n_states++;
  return cn_map_put(I->ctx, &I->states, it, s) ? s : NULL;
}

/* x's tensor (a number or any tensor expression), evaluated by nt_elab_eval: an optimizer's
 * learning rate, progress's loss, shuffle's tensor. */
static cn_tensor *elab_tensor(nt_interp *I, nt_env *scope, const cn_nt_expr *x) {
  nt_value *v = nt_elab_eval(I, scope, x);
  return v ? nt_tensor_of(I, v, x->pos) : NULL;
}

static bool item(nt_interp *I, const cn_nt_item *it, nt_env *scope);
static bool compile_ahead(nt_interp *I, const cn_nt_item *loop, nt_env *body);

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

/* progress's options for one execution of the loop: the loss tensor (evaluated on the first
 * execution, kept in st->tensor) and the batch size. */
static bool progress_options(nt_interp *I, const cn_nt_item *it, nt_env *scope, nt_item_state *st,
                             int64_t *batch_size) {
  const cn_nt_expr *loss = it->u.for_.loss, *batch = it->u.for_.batch_size;
  if (loss && !st->tensor) {
    if (!(st->tensor = elab_tensor(I, scope, loss))) return false;
    cn_tensor_set_named(st->tensor);
  }
  *batch_size = 0;
  if (!batch) return true;
  nt_value *b = nt_eval(I, scope, &I->top, batch);
  if (!b || !nt_as_int(I, b, batch->pos, batch_size)) return false;
  if (*batch_size < 1) return nt_fail(I, batch->pos, "%s", "~batch_size is at least 1"), false;
  return true;
}

/* One execution of a for loop (for_item): the bounds, the index, the iterations. An iteration
 * that elaborates nothing (creates no statement state) gives its temporaries back. */
/* A loop's range and index: its bounds evaluated, its static index (created on its first
 * execution), the index's symbol and the body's scope binding it. */
static bool loop_setup(nt_interp *I, const cn_nt_item *it, nt_env *scope, nt_item_state *st,
                       int64_t *lo, int64_t *hi, cn_symbol *sym, nt_env **body) {
  nt_value *from = nt_eval(I, scope, &I->top, it->u.for_.from);
  nt_value *to = from ? nt_eval(I, scope, &I->top, it->u.for_.to) : NULL;
  if (!to || !nt_as_int(I, from, it->u.for_.from->pos, lo) ||
      !nt_as_int(I, to, it->u.for_.to->pos, hi))
    return false;
  if (*lo < 0 && *hi >= *lo)
    return nt_fail(I, it->u.for_.from->pos, "%s", "a static index starts at 0 or more");
  if (!st->index) {
    nt_value *v = nt_lookup(I, scope, it->u.for_.name);
    if (!v || v->kind != NT_V_INDEX) {
      if (!(v = nt_mk(I, NT_V_INDEX))) return false;
      v->index.range = *hi >= *lo ? *hi + 1 : 1;
      v->index.name = it->u.for_.name;
      v->index.decl_at = it->u.for_.name_pos;
    }
    st->index = v;
  }
  if (*hi >= *lo && *hi >= st->index->index.range)
    return nt_fail(I, it->u.for_.to->pos,
                   "the loop reaches %lld, outside the values 0 .. %lld of '%s'", (long long)*hi,
                   (long long)st->index->index.range - 1, it->u.for_.name);
  *body = scope;
  if (!nt_index_symbol(I, st->index, it->u.for_.name_pos, sym) ||
      !nt_bind(I, body, it->u.for_.name, st->index))
    return false;
  if (!st->index->index.loop) st->index->index.loop = it;
  return true;
}

/* Binds a loop's index symbol for its body, at lo, with its trip count; the slot in I->bound. */
static int bind_loop(nt_interp *I, cn_symbol sym, int64_t lo, int64_t hi) {
  CN_ASSERT(I->n_bound < CN_NT_MAX_LOOP_DEPTH); /* the parser's nesting limit */
  int slot = I->n_bound++;
  I->bound[slot].sym = sym;
  I->bound[slot].value = lo;
  I->bound[slot].trips = hi >= lo ? hi - lo + 1 : 0;
  return slot;
}

static bool dp_setup(nt_interp *I, const cn_nt_item *it, nt_env *scope, nt_item_state *st,
                     int64_t lo, int64_t hi, int64_t *stride);
static bool dp_elaborate(nt_interp *I, const cn_nt_item *it, nt_env *body, nt_item_state *st,
                         cn_symbol sym);
static bool dp_step(nt_interp *I, const cn_nt_item *it, nt_item_state *st, cn_symbol sym,
                    int64_t i);

/* A data-parallel loop (~devices, on more than one slot) steps by its slot count; its training
 * pair runs as one cn_dp_step (dp_step), its other statements once per step. */
static bool run_loop(nt_interp *I, const cn_nt_item *it, nt_env *scope, nt_item_state *st) {
  int64_t lo, hi, batch_size = 0, stride = 1;
  cn_symbol sym;
  nt_env *body;
  if (!loop_setup(I, it, scope, st, &lo, &hi, &sym, &body)) return false;
  if (it->u.for_.devices && !dp_setup(I, it, scope, st, lo, hi, &stride)) return false;
  if (it->u.for_.progress && !progress_options(I, it, scope, st, &batch_size)) return false;
  nt_progress progress;
  if (it->u.for_.progress)
    nt_progress_start(I, &progress, it, hi >= lo ? (hi - lo + 1) / stride : 0, st->tensor,
                      batch_size * stride); /* a step: `stride` minibatches */
  int slot = bind_loop(I, sym, lo, hi);
  bool ok = true;
  for (int64_t i = lo; ok && i <= hi; i += stride) {
    cn_arena_marker mark = cn_arena_mark(&I->ctx->arena);
    int states = I->n_states;
    I->bound[slot].value = i;
    bool first = !st->looped && i == lo; /* its first iteration ever: its memory is kept */
    if (stride > 1 && !st->dp)
      ok = dp_elaborate(I, it, body, st, sym);
    else if (first)
      ok = compile_ahead(I, it, body);
    if (ok && stride > 1 && it->u.for_.progress && i == lo) {
      nt_item_state *pair = state_of(I, &it->u.for_.items[st->dp_at], NULL);
      ok = pair != NULL;
      if (ok && pair->tensor == st->tensor) progress.loss_slots = stride; /* the slots' sum */
    }
    for (int k = 0; ok && k < it->u.for_.n_items; k++) {
      if (stride > 1 && k == st->dp_at) {
        ok = dp_step(I, it, st, sym, i);
        k++; /* the optimizer statement: part of the step */
        continue;
      }
      ok = item(I, &it->u.for_.items[k], body);
    }
    if (ok && it->u.for_.progress) ok = nt_progress_step(I, &progress, (i - lo) / stride + 1);
    if (ok && !first && I->n_states == states) cn_arena_reset(&I->ctx->arena, mark);
  }
  I->n_bound--;
  st->looped = true;
  return ok;
}

/* for i = a to b do ... done: binds i (an existing static index, or a new one with the values
 * 0 .. b) to a, a + 1, ..., b in turn and runs the body each time; nothing when b < a.
 * A loop in a loop body runs again at each step of the outer loop. A later execution that
 * elaborates nothing allocates only temporaries (the bounds' values, the index binding): it
 * gives them back (cn_arena_reset), or nested loops would grow the arena at every step. A
 * failure keeps them: the message may live there. */
static bool for_item(nt_interp *I, const cn_nt_item *it, nt_env *scope, nt_item_state *st) {
  cn_arena_marker mark = cn_arena_mark(&I->ctx->arena);
  bool again = st->looped; /* not st->index: compile-ahead sets that before the loop runs */
  int states = I->n_states;
  if (!run_loop(I, it, scope, st)) return false;
  if (again && I->n_states == states) cn_arena_reset(&I->ctx->arena, mark);
  return true;
}

/* The optional number (or boolean) option x of an optimizer; false with a message when it is
 * given with another kind. */
static bool option_value(nt_interp *I, nt_env *scope, const cn_nt_expr *x, nt_vkind kind,
                         nt_value **out) {
  *out = NULL;
  if (!x) return true;
  if (!(*out = nt_elab_eval(I, scope, x))) return false;
  if ((*out)->kind == kind) return true;
  nt_fail(I, x->pos, "expected %s, found %s", nt_kind_name(kind), nt_kind_name((*out)->kind));
  return false;
}

/* update after clipping the gradients to the global norm clip (~clip:X), when given: the clip
 * tree comes first in the routine, so every gradient is scaled before any parameter moves. */
static cn_asgn *clipped(nt_interp *I, cn_tensor *loss, const nt_value *clip, cn_asgn *update) {
  if (!clip || !update) return update;
  cn_asgn *c = cn_graph_clip_grad_norm(I->g, loss, clip->num);
  return c ? cn_asgn_seq(I->ctx, 2, (cn_asgn *[]){c, update}) : NULL;
}

static bool sgd_code(nt_interp *I, const cn_nt_item *it, nt_env *scope, nt_item_state *st,
                     cn_asgn **init, cn_asgn **main) {
  if (!nt_statement_tensor(I, scope, it->u.sgd.expr, st)) return false;
  cn_tensor *lrt = elab_tensor(I, scope, it->u.sgd.learning_rate);
  nt_value *m, *w, *nv, *clip;
  if (!lrt || !option_value(I, scope, it->u.sgd.momentum, NT_V_NUM, &m) ||
      !option_value(I, scope, it->u.sgd.clip, NT_V_NUM, &clip) ||
      !option_value(I, scope, it->u.sgd.weight_decay, NT_V_NUM, &w) ||
      !option_value(I, scope, it->u.sgd.nesterov, NT_V_BOOL, &nv) || !nt_materialize(I, it->pos))
    return false;
  cn_sgd sgd = {lrt, m ? m->num : 0, w ? w->num : 0, nv && nv->b};
  cn_asgn *params = cn_graph_init_params(I->g, st->tensor);
  cn_asgn *update = params ? cn_graph_sgd_update(I->g, st->tensor, &sgd) : NULL;
  return statement_code(I, params, clipped(I, st->tensor, clip, update), init, main, it->pos);
}

/* adam e ~learning_rate ...: one Adam (AdamW with ~decoupled:true) update of e's parameters;
 * an option not given takes the library's default. */
static bool adam_code(nt_interp *I, const cn_nt_item *it, nt_env *scope, nt_item_state *st,
                      cn_asgn **init, cn_asgn **main) {
  if (!nt_statement_tensor(I, scope, it->u.adam.expr, st)) return false;
  cn_tensor *lrt = elab_tensor(I, scope, it->u.adam.learning_rate);
  nt_value *b1, *b2, *eps, *wd, *dec, *clip, *dmo;
  if (!lrt || !option_value(I, scope, it->u.adam.beta1, NT_V_NUM, &b1) ||
      !option_value(I, scope, it->u.adam.beta2, NT_V_NUM, &b2) ||
      !option_value(I, scope, it->u.adam.eps, NT_V_NUM, &eps) ||
      !option_value(I, scope, it->u.adam.weight_decay, NT_V_NUM, &wd) ||
      !option_value(I, scope, it->u.adam.clip, NT_V_NUM, &clip) ||
      !option_value(I, scope, it->u.adam.decay_matrices_only, NT_V_BOOL, &dmo) ||
      !option_value(I, scope, it->u.adam.decoupled, NT_V_BOOL, &dec) || !nt_materialize(I, it->pos))
    return false;
  cn_adam adam = cn_adam_defaults(lrt);
  if (b1) adam.beta1 = b1->num;
  if (b2) adam.beta2 = b2->num;
  if (eps) adam.eps = eps->num;
  if (wd) adam.weight_decay = wd->num;
  adam.decoupled = dec && dec->b;
  adam.decay_matrices_only = dmo && dmo->b;
  cn_asgn *params = cn_graph_init_params(I->g, st->tensor);
  cn_asgn *update = params ? cn_graph_adam_update(I->g, st->tensor, &adam) : NULL;
  return statement_code(I, params, clipped(I, st->tensor, clip, update), init, main, it->pos);
}

static bool backprop_code(nt_interp *I, const cn_nt_item *it, nt_env *scope, nt_item_state *st,
                          cn_asgn **init, cn_asgn **main) {
  if (!nt_statement_tensor(I, scope, it->u.expr, st)) return false;
  nt_consume(I, st->tensor);
  cn_asgn *params = cn_graph_init_params(I->g, st->tensor);
  return statement_code(I, params, params ? cn_graph_grad_update(I->g, st->tensor) : NULL, init,
                        main, it->u.expr->pos);
}

/* What elaborates the code of a backprop, sgd or adam statement (NULL for another statement). */
typedef bool (*statement_code_fn)(nt_interp *, const cn_nt_item *, nt_env *, nt_item_state *,
                                  cn_asgn **, cn_asgn **);
static statement_code_fn optimizer_code(const cn_nt_item *it) {
  return it->kind == CN_NT_ITEM_BACKPROP ? backprop_code
         : it->kind == CN_NT_ITEM_SGD    ? sgd_code
         : it->kind == CN_NT_ITEM_ADAM   ? adam_code
                                         : NULL;
}

/* backprop, sgd, adam: the statement's code elaborated on its first execution, compiled, run. */
static bool optimizer_item(nt_interp *I, const cn_nt_item *it, nt_env *scope, nt_item_state *st) {
  cn_nt_pos at = it->kind == CN_NT_ITEM_BACKPROP ? it->u.expr->pos : it->pos;
  if (st->routine) return run_compiled(I, st, &st->routine, at);
  cn_asgn *init, *main;
  return optimizer_code(it)(I, it, scope, st, &init, &main) &&
         nt_run_statement(I, st, init, main, at);
}

/* ---- Data-parallel loops ---------------------------------------------------------------------
 * for b = A to B ~devices:N do ... done (docs/notation.md, "Data-parallel training"): the body's
 * one `backprop L` directly followed by `sgd L ...` or `adam L ...` becomes one cn_dp step over
 * S = N * (MPI processes) slots. Rank r's device d takes b = i + r * N + d at the step that starts
 * at i, so a step covers S consecutive values of b and the loop advances by S: an epoch sees the
 * same minibatches as on one device, S at a time. The gradient routine runs on every device with
 * its own b, the gradients are summed (cn_dp), the update starts with a scale by 1 / S (so it
 * applies the mean of the slots' gradients: with a loss that is a minibatch's mean, the gradient
 * of the step's global batch's mean) and reads b = i; the loss the host sees after the step is
 * the sum of the slots' losses. The other statements of the body run once per step on the host,
 * b = i, reading device 0's values (cn_dp_step copies them to the host). With S = 1 the loop is
 * an ordinary one. Elaborated at the loop's first execution with more than one slot (dp_elaborate:
 * the two statements' code, their parameter init run on the host, the two routines compiled, the
 * driver created) and kept in the loop's state. */

/* The first backprop, sgd or adam statement among items and the blocks they hold, or NULL. */
static const cn_nt_item *find_training(const cn_nt_item *items, int n) {
  for (int k = 0; k < n; k++) {
    const cn_nt_item *it = &items[k], *inner = NULL;
    if (optimizer_code(it)) return it;
    if (it->kind == CN_NT_ITEM_FOR) inner = find_training(it->u.for_.items, it->u.for_.n_items);
    if (it->kind == CN_NT_ITEM_IF) {
      inner = find_training(it->u.if_.then_items, it->u.if_.n_then);
      if (!inner) inner = find_training(it->u.if_.else_items, it->u.if_.n_else);
    }
    if (inner) return inner;
  }
  return NULL;
}

/* The position in the body of the loop's one backprop, directly followed by its sgd or adam;
 * -1 after a message when the body is not of that form. */
static int dp_pair(nt_interp *I, const cn_nt_item *loop) {
  const cn_nt_item *items = loop->u.for_.items;
  const int n = loop->u.for_.n_items;
  int at = -1;
  for (int k = 0; k < n; k++) {
    const cn_nt_item *it = &items[k], *inner;
    if (it->kind == CN_NT_ITEM_BACKPROP) {
      if (at >= 0)
        return nt_fail(I, it->pos, "%s",
                       "a data-parallel loop (~devices) trains with one backprop statement, and "
                       "this is a second"),
               -1;
      if (k + 1 == n ||
          (items[k + 1].kind != CN_NT_ITEM_SGD && items[k + 1].kind != CN_NT_ITEM_ADAM))
        return nt_fail(I, it->pos, "%s",
                       "in a data-parallel loop (~devices) backprop is directly followed by the "
                       "sgd or adam statement of the same loss (the step's update)"),
               -1;
      at = k++;
    } else if (optimizer_code(it)) {
      return nt_fail(I, it->pos,
                     "in a data-parallel loop (~devices) %s directly follows the "
                     "backprop of its loss",
                     it->kind == CN_NT_ITEM_SGD ? "sgd" : "adam"),
             -1;
    } else if ((it->kind == CN_NT_ITEM_FOR || it->kind == CN_NT_ITEM_IF) &&
               (inner = find_training(&items[k], 1))) {
      return nt_fail(I, inner->pos, "%s",
                     "a data-parallel loop (~devices) trains in its own body, not in a loop or "
                     "an if inside it"),
             -1;
    }
  }
  if (at < 0)
    nt_fail(I, loop->u.for_.devices->pos, "%s",
            "a data-parallel loop (~devices) needs a backprop statement followed by sgd or adam "
            "in its body");
  return at;
}

/* ~devices:N evaluated (once), the body's form checked, the step (the slot count) given;
 * false with a message at the option for a count, backend or trip count that cannot work. */
static bool dp_setup(nt_interp *I, const cn_nt_item *it, nt_env *scope, nt_item_state *st,
                     int64_t lo, int64_t hi, int64_t *stride) {
  const cn_nt_expr *x = it->u.for_.devices;
  if (!st->dp_devices) {
    nt_value *v = nt_eval(I, scope, &I->top, x);
    int64_t n;
    if (!v || !nt_as_int(I, v, x->pos, &n)) return false;
    if (n < 1 || n > CN_MAX_DEVICES)
      return nt_fail(I, x->pos, "~devices is a count of CPU devices in [1, %d], not %lld",
                     CN_MAX_DEVICES, (long long)n),
             false;
    if ((st->dp_at = dp_pair(I, it)) < 0) return false;
    st->dp_devices = (int)n;
  }
  const int ranks = cn_dist_size();
  const int64_t slots = (int64_t)st->dp_devices * ranks, trips = hi >= lo ? hi - lo + 1 : 0;
  if (slots > 1 && (cn_backend_caps(I->opts.backend) & CN_BACKEND_DEVICE_MEMORY))
    return nt_fail(I, x->pos,
                   "~devices: a data-parallel loop runs on CPU devices with a host backend (interp "
                   "or c), not '%s'",
                   cn_backend_name(I->opts.backend)),
           false;
  if (trips % slots != 0)
    return nt_fail(I, x->pos,
                   "~devices: the loop's %lld values of '%s' do not divide among %lld slots (%d "
                   "device%s x %d process%s), which take %lld consecutive values at each step",
                   (long long)trips, it->u.for_.name, (long long)slots, st->dp_devices,
                   st->dp_devices == 1 ? "" : "s", ranks, ranks == 1 ? "" : "es", (long long)slots),
           false;
  *stride = slots;
  return true;
}

/* A routine compiled for one of the pair's statements, named as its own run would name it. */
static cn_routine *dp_compile(nt_interp *I, const cn_asgn *main, cn_nt_pos at) {
  char name[32];
  snprintf(name, sizeof name, "cnl_%d", ++I->n_routines);
  return nt_compile_emit(I, main, name, false, at);
}

static bool dp_elaborate(nt_interp *I, const cn_nt_item *it, nt_env *body, nt_item_state *st,
                         cn_symbol sym) {
  const cn_nt_item *bp = &it->u.for_.items[st->dp_at], *opt = bp + 1;
  nt_item_state *sb = state_of(I, bp, NULL), *so = state_of(I, opt, NULL);
  cn_asgn *init, *grad, *opt_init, *update;
  if (!sb || !so) return false;
  I->item = bp;
  if (!backprop_code(I, bp, body, sb, &init, &grad)) return false;
  I->item = opt;
  if (!optimizer_code(opt)(I, opt, body, so, &opt_init, &update)) return false;
  if (sb->tensor != so->tensor)
    return nt_fail(I, opt->pos,
                   "in a data-parallel loop (~devices) the update is of the loss backprop "
                   "computes ('%s'), not of '%s'",
                   sb->tensor->label, so->tensor->label),
           false;
  const int64_t slots = (int64_t)st->dp_devices * cn_dist_size();
  cn_asgn *mean = cn_graph_scale_grads(I->g, sb->tensor, 1.0 / (double)slots);
  if (!mean || !(update = cn_asgn_seq(I->ctx, 2, (cn_asgn *[]){mean, update})))
    return nt_fail_here(I, opt->pos), false;
  if ((!nt_asgn_empty(init) && !nt_run_asgn(I, init, NULL, bp->pos)) ||
      (!nt_asgn_empty(opt_init) && !nt_run_asgn(I, opt_init, NULL, opt->pos)))
    return false;
  if (!(sb->routine = dp_compile(I, grad, bp->pos)) ||
      !(so->routine = dp_compile(I, update, opt->pos)))
    return false;
  if (!cn_routine_reads(sb->routine, sym))
    return nt_fail(I, it->u.for_.devices->pos,
                   "~devices: the loss '%s' does not read the loop's index '%s', so every device "
                   "would train on the same data: slice the data set by it (x = data @| %s)",
                   sb->tensor->label, it->u.for_.name, it->u.for_.name),
           false;
  st->dp =
      cn_dp_create(I->g, sb->tensor, sb->routine, so->routine, st->dp_devices, I->opts.backend);
  return st->dp || (nt_fail_here(I, it->u.for_.devices->pos), false);
}

/* One step at i: the enclosing loops' indices bound on both routines, the loop's own per device
 * (i + rank * N + d), the driver's step. */
static bool dp_step(nt_interp *I, const cn_nt_item *it, nt_item_state *st, cn_symbol sym,
                    int64_t i) {
  const cn_nt_item *bp = &it->u.for_.items[st->dp_at];
  nt_item_state *sb = state_of(I, bp, NULL), *so = state_of(I, bp + 1, NULL);
  if (!sb || !so || !nt_begin_datasets(I, bp->pos)) return false;
  cn_status status = CN_OK;
  for (int j = 0; j < I->n_bound && status == CN_OK; j++)
    if (cn_routine_reads(sb->routine, I->bound[j].sym) ||
        cn_routine_reads(so->routine, I->bound[j].sym))
      status = cn_dp_bind(st->dp, I->bound[j].sym, I->bound[j].value);
  const int64_t first = i + (int64_t)cn_dist_rank() * st->dp_devices;
  for (int d = 0; d < st->dp_devices && status == CN_OK; d++)
    status = cn_dp_bind_device(st->dp, sym, d, first + d);
  if (status == CN_OK) status = cn_dp_step(st->dp);
  return status == CN_OK || (nt_fail_here(I, bp->pos), false);
}

/* print's ~full and ~precision into st (evaluated once, as sgd's options). */
static bool print_options(nt_interp *I, const cn_nt_item *it, nt_env *scope, nt_item_state *st) {
  nt_value *full, *precision;
  if (!option_value(I, scope, it->u.print.full, NT_V_BOOL, &full) ||
      !option_value(I, scope, it->u.print.precision, NT_V_NUM, &precision))
    return false;
  st->print_full = full && full->b;
  st->print_precision = -1;
  if (!precision) return true;
  double p = precision->num;
  if (!(p >= 0 && p <= 17 && p == floor(p)))
    return nt_fail(I, it->u.print.precision->pos,
                   "print's ~precision is a count of digits in [0, 17], not %g", p),
           false;
  st->print_precision = (int)p;
  return true;
}

/* A NaN or an infinity among the values print showed, for the warning at the end of the run. */
static void note_printed(nt_interp *I, const nt_item_state *st, cn_nt_pos at) {
  cn_node *node = st->grad ? cn_tensor_grad(st->tensor) : cn_tensor_value(st->tensor);
  void *cells = node ? cn_node_host(node, false, CN_HOST_READ) : NULL;
  int64_t cell[CN_MAX_RANK];
  double value;
  if (!cells || !cn_node_find_cell(node, cells, false, cell, &value)) return;
  char where[160];
  snprintf(where, sizeof where, "in %s\"%s\" (#%d)", st->grad ? "the gradient of " : "",
           st->tensor->label, st->tensor->id);
  nt_note_nonfinite(I, NT_SHOWN_PRINTED, at, value, where);
}

/* print e: a tensor (computed first), or a string written with a newline. */
static bool print_item(nt_interp *I, const cn_nt_item *it, nt_env *scope, nt_item_state *st) {
  cn_nt_pos at = it->u.print.expr->pos;
  if (!st->tensor && !st->text) {
    nt_value *v = nt_elab_eval(I, scope, it->u.print.expr);
    if (!v) return false;
    if (v->kind == NT_V_STR) {
      const cn_nt_expr *option = it->u.print.full ? it->u.print.full : it->u.print.precision;
      if (option)
        return nt_fail(I, option->pos, "%s", "print's ~full and ~precision apply to a tensor"),
               false;
      cn_sbuf line = {0};
      cn_sbuf_printf(&line, "%s\n", v->str);
      if (!(st->text = cn_sbuf_finish(I->ctx, &line))) return false;
    } else if (!print_options(I, it, scope, st) ||
               !nt_set_statement_tensor(I, v, it->u.print.expr, st)) {
      return false;
    }
  }
  if (st->text) {
    nt_write_text(I, st->text);
    return true;
  }
  if (!nt_compute_tensor(I, st, at)) return false;
  cn_print_options o = {.json = true}; /* JSON reads no option */
  if (!I->opts.json && cn_tensor_print_options(I->ctx, &o) != CN_OK)
    return nt_fail_here(I, at), false;
  if (st->print_full) o.threshold = -1;
  if (st->print_precision >= 0) o.precision = st->print_precision;
  const char *text = cn_tensor_format_with(st->tensor, st->grad, &o);
  if (!text) return nt_fail_here(I, at), false;
  fprintf(nt_out(I), "%s%s", text, I->opts.json ? "\n" : "");
  note_printed(I, st, at);
  return true;
}

/* printf "format" args: the arguments' values formatted, written as print writes a string. */
static bool printf_item(nt_interp *I, const cn_nt_item *it, nt_env *scope, nt_item_state *st) {
  int n = it->u.printf_.n_args;
  bool first = !st->args;
  if (first && !(st->args = cn_alloc(I->ctx, sizeof *st->args * (size_t)(n + 1)))) return false;
  nt_value **values = cn_alloc(I->ctx, sizeof *values * (size_t)(n + 1));
  if (!values) return false;
  for (int k = 0; k < n; k++)
    if (!(values[k] =
              nt_cell_value(I, scope, it->u.printf_.args[k], &st->args[k], first, "printf prints")))
      return false;
  for (int k = 0; k < n; k++)
    if (values[k]->kind == NT_V_NUM && !isfinite(values[k]->num)) {
      char where[48];
      snprintf(where, sizeof where, "as printf's argument %d", k + 1);
      nt_note_nonfinite(I, NT_SHOWN_PRINTED, it->u.printf_.args[k]->pos, values[k]->num, where);
      break;
    }
  cn_sbuf text = {0};
  bool ok = nt_format(I, it, values, &text);
  if (ok && text.failed) ok = (cn_fail(I->ctx, CN_ERR_NOMEM, "out of memory"), false);
  if (ok) nt_write_text(I, text.data ? text.data : "");
  cn_sbuf_free(&text);
  return ok;
}

/* A statement's file name: a host string, evaluated at each execution. */
static const char *host_file(nt_interp *I, nt_env *scope, const cn_nt_expr *x) {
  nt_value *v = nt_host_of(I, scope, x, NT_V_STR, "expected a file name (a string)");
  return v ? v->str : NULL;
}

/* A statement's ~epoch: a host integer >= 0, evaluated at each execution. */
static bool host_epoch(nt_interp *I, nt_env *scope, const cn_nt_expr *x, int64_t *epoch) {
  nt_value *v = nt_host_eval(I, scope, x);
  if (!v || !nt_as_int(I, v, x->pos, epoch)) return false;
  if (*epoch < 0)
    return nt_fail(I, x->pos, "an epoch is 0 or more, not %lld", (long long)*epoch), false;
  return true;
}

/* shuffle t ~epoch:e: the data set of t shows epoch e's order (t evaluated once). */
static bool shuffle_item(nt_interp *I, const cn_nt_item *it, nt_env *scope, nt_item_state *st) {
  const cn_nt_expr *x = it->u.data.expr;
  int64_t epoch;
  if (!st->tensor && !(st->tensor = elab_tensor(I, scope, x))) return false;
  return host_epoch(I, scope, it->u.data.epoch, &epoch) && nt_shuffle(I, st->tensor, epoch, x->pos);
}

/* checkpoint "file" loss ~epoch:e: loss's training state (parameters, optimizer state) saved,
 * with e in the metadata. */
static bool checkpoint_item(nt_interp *I, const cn_nt_item *it, nt_env *scope, nt_item_state *st) {
  int64_t epoch;
  if (!nt_statement_tensor(I, scope, it->u.data.expr, st)) return false;
  const char *path = host_file(I, scope, it->u.data.file);
  if (path) path = nt_output_path(I, path, true, it->u.data.file->pos);
  return path && host_epoch(I, scope, it->u.data.epoch, &epoch) &&
         nt_checkpoint(I, st->tensor, path, epoch, it->u.data.file->pos);
}

/* save_npy "file" t: t computed as print computes it, its cells written as a .npy file. */
static bool save_npy_item(nt_interp *I, const cn_nt_item *it, nt_env *scope, nt_item_state *st) {
  if (!nt_statement_tensor(I, scope, it->u.data.expr, st)) return false;
  const char *path = host_file(I, scope, it->u.data.file);
  if (path) path = nt_output_path(I, path, true, it->u.data.file->pos);
  cn_node *node = path ? nt_computed_node(I, scope, it->u.data.expr, st) : NULL;
  return node && nt_save_npy(I, node, path, it->u.data.file->pos);
}

/* if c then ... else ... end: c is a host boolean, evaluated at each execution. */
static bool if_item(nt_interp *I, const cn_nt_item *it, nt_env *scope) {
  nt_value *c = nt_host_eval(I, scope, it->u.if_.cond);
  if (!c) return false;
  if (c->kind != NT_V_BOOL)
    return nt_fail(I, it->u.if_.cond->pos,
                   "the condition is %s: if tests a boolean computed on the host, from numbers "
                   "and loop indices (as in step mod 100 = 0)",
                   nt_kind_name(c->kind)),
           false;
  int n = c->b ? it->u.if_.n_then : it->u.if_.n_else;
  const cn_nt_item *items = c->b ? it->u.if_.then_items : it->u.if_.else_items;
  for (int k = 0; k < n; k++)
    if (!item(I, &items[k], scope)) return false;
  return true;
}

/* The routine of `run r` or `run f args` (a let%cd function applied), elaborated once; *main NULL
 * when it is compiled already, else its code and parameter init. */
static bool run_code(nt_interp *I, const cn_nt_item *it, nt_env *scope, nt_item_state *st,
                     nt_code **code, cn_asgn **init, cn_asgn **main) {
  cn_nt_pos at = it->u.expr->pos;
  nt_value *v = st->run ? st->run : nt_elab_eval(I, scope, it->u.expr);
  if (!v) return false;
  if (v->kind != NT_V_ROUTINE)
    return nt_fail(I, at, "%s is not a routine%s", nt_kind_name(v->kind),
                   v->kind == NT_V_FUNC ? " (a let%cd function needs all its arguments)" : ""),
           false;
  st->run = v;
  *code = v->routine;
  *init = *main = NULL;
  if ((*code)->compiled) return true;
  if (!nt_materialize(I, at)) return false;
  if (!(*main = nt_code_asgn(I, *code, init))) return nt_fail_here(I, at), false;
  return true;
}

/* run r, or run f args: the routine's parameter init runs once, before its first run; in a loop
 * the application is elaborated once. */
static bool run_item(nt_interp *I, const cn_nt_item *it, nt_env *scope, nt_item_state *st) {
  cn_nt_pos at = it->u.expr->pos;
  nt_code *c;
  cn_asgn *init, *main;
  if (!run_code(I, it, scope, st, &c, &init, &main)) return false;
  if (!main) return run_compiled(I, st, &c->compiled, at);
  if (init && !nt_asgn_empty(init) && !nt_run_asgn(I, init, NULL, at)) return false;
  return nt_run_asgn(I, main, &c->compiled, at);
}

/* Compile-ahead (issue 29): the statements a loop body starts with that compile a routine
 * (backprop, sgd, adam, run), with those of the loops it starts with in turn, are elaborated
 * together at the loop's first iteration, in their order and as their first executions would
 * elaborate them, and their routines compiled at once (cn_routine_compile_tiered_many: the
 * compilers run at the same time, not one after the other as the statements come). Each
 * statement's parameter init still runs at its first execution, before its first run
 * (run_compiled), and every routine keeps the name the statement would have given it. The loops'
 * trip counts say how often each will run: a routine whose work over all those runs costs the
 * interpreter less than a compile is interpreted, one that would be compiled after its first 30
 * ms of interpreted runs is compiled with the others at once. The prefix ends at the first other
 * statement (a shuffle, which compiles nothing, is elaborated in its turn and passed; whatever
 * the others elaborate comes after the prefix either way), at a loop whose body it does not take
 * whole and at a routine run a second time; --emit prints each routine where it is compiled, so
 * it elaborates one statement at a time as before. */
typedef struct {
  const cn_asgn *main;
  const char *name;
  cn_routine **slot; /* where the compiled routine goes */
  int64_t runs;      /* the statement's executions, the loops around it counted in full */
} ahead_entry;

typedef struct {
  ahead_entry *v;
  int n, cap;
} ahead_list;

static bool ahead_add(nt_interp *I, ahead_list *list, nt_item_state *st, cn_asgn *init,
                      cn_asgn *main, cn_routine **slot) {
  if (!cn_arena_grow(I->ctx, (void **)&list->v, &list->cap, list->n + 1, sizeof *list->v))
    return false;
  char name[32];
  if (init && !nt_asgn_empty(init)) {
    snprintf(name, sizeof name, "cnl_%d", ++I->n_routines);
    if (!(st->init_name = cn_strdup(I->ctx, name))) return false;
    st->init = init;
  }
  ahead_entry *e = &list->v[list->n++];
  snprintf(name, sizeof name, "cnl_%d", ++I->n_routines);
  if (!(e->name = cn_strdup(I->ctx, name))) return false;
  e->runs = 1;
  for (int j = 0; j < I->n_bound; j++)
    e->runs =
        e->runs > INT64_MAX / (I->bound[j].trips + 1) ? INT64_MAX : e->runs * I->bound[j].trips;
  e->main = main;
  e->slot = slot;
  return true;
}

/* Elaborates the prefix of items (see compile_ahead) into list; *whole: every item taken. */
static bool collect_ahead(nt_interp *I, const cn_nt_item *items, int n, nt_env *scope,
                          ahead_list *list, bool *whole) {
  *whole = false;
  for (int k = 0; k < n; k++) {
    const cn_nt_item *it = &items[k];
    statement_code_fn code = optimizer_code(it);
    if (!code && it->kind != CN_NT_ITEM_RUN && it->kind != CN_NT_ITEM_SHUFFLE &&
        it->kind != CN_NT_ITEM_FOR)
      return true;
    nt_item_state *st = state_of(I, it, NULL);
    if (!st) return false;
    I->item = it;
    if (it->kind == CN_NT_ITEM_SHUFFLE) {
      if (!st->tensor && !(st->tensor = elab_tensor(I, scope, it->u.data.expr))) return false;
      continue;
    }
    if (it->kind == CN_NT_ITEM_FOR) {
      int64_t lo, hi, stride = 1;
      cn_symbol sym;
      nt_env *body;
      bool inner_whole;
      if (!loop_setup(I, it, scope, st, &lo, &hi, &sym, &body)) return false;
      if (hi < lo) return true; /* its body runs later or never: stop here */
      /* a data-parallel loop on more than one slot compiles its own pair (dp_elaborate); on
       * one it is the plain loop (run_loop), taken like one */
      if (it->u.for_.devices && !dp_setup(I, it, scope, st, lo, hi, &stride)) return false;
      if (stride > 1) return true;
      bind_loop(I, sym, lo, hi);
      bool ok = collect_ahead(I, it->u.for_.items, it->u.for_.n_items, body, list, &inner_whole);
      I->n_bound--;
      if (!ok || !inner_whole) return ok;
      continue;
    }
    cn_asgn *init = NULL, *main = NULL;
    cn_routine **slot = &st->routine;
    if (code) {
      if (st->routine) continue;
      if (!code(I, it, scope, st, &init, &main)) return false;
    } else {
      nt_code *c;
      if (!run_code(I, it, scope, st, &c, &init, &main)) return false;
      if (!main) continue;
      slot = &c->compiled;
      for (int j = 0; j < list->n; j++)
        if (list->v[j].slot == slot) return true; /* its first execution compiles it */
    }
    if (!ahead_add(I, list, st, init, main, slot)) return false;
  }
  *whole = true;
  return true;
}

static bool compile_ahead(nt_interp *I, const cn_nt_item *loop, nt_env *body) {
  if (!(cn_backend_caps(I->opts.backend) & CN_BACKEND_COMPILED) || I->opts.emit_asgn ||
      I->opts.emit_loops || I->opts.emit_c)
    return true;
  ahead_list list = {0};
  bool whole;
  if (!collect_ahead(I, loop->u.for_.items, loop->u.for_.n_items, body, &list, &whole))
    return false;
  if (list.n == 0) return true;
  int n = list.n;
  const cn_asgn **mains = cn_alloc(I->ctx, sizeof *mains * (size_t)n);
  const char **names = cn_alloc(I->ctx, sizeof *names * (size_t)n);
  int64_t *runs = cn_alloc(I->ctx, sizeof *runs * (size_t)n);
  cn_routine **out = cn_alloc(I->ctx, sizeof *out * (size_t)n);
  if (!mains || !names || !runs || !out) return false;
  for (int k = 0; k < n; k++) {
    mains[k] = list.v[k].main;
    names[k] = list.v[k].name;
    runs[k] = list.v[k].runs;
  }
  if (cn_routine_compile_tiered_many(I->ctx, n, mains, names, I->opts.backend, runs, out) != CN_OK)
    return nt_fail_here(I, loop->u.for_.items[0].pos), false;
  for (int k = 0; k < n; k++) *list.v[k].slot = out[k];
  return true;
}

static bool item(nt_interp *I, const cn_nt_item *it, nt_env *scope) {
  I->item = it;
  if (it->kind == CN_NT_ITEM_LET) return let_item(I, it);
  if (it->kind == CN_NT_ITEM_IF) return if_item(I, it, scope);
  nt_item_state local = {0}, *st = state_of(I, it, &local);
  if (!st) return false;
  switch (it->kind) {
  case CN_NT_ITEM_LET:
  case CN_NT_ITEM_IF: return false; /* handled above: they keep no state */
  case CN_NT_ITEM_PRINT: return print_item(I, it, scope, st);
  case CN_NT_ITEM_PRINTF: return printf_item(I, it, scope, st);
  case CN_NT_ITEM_ADAM:
  case CN_NT_ITEM_BACKPROP:
  case CN_NT_ITEM_SGD: return optimizer_item(I, it, scope, st);
  case CN_NT_ITEM_RUN: return run_item(I, it, scope, st);
  case CN_NT_ITEM_SET_SEED:
    if (cn_graph_set_seed(I->g, (uint32_t)it->u.seed) != CN_OK)
      return nt_fail_here(I, it->pos), false;
    return true;
  case CN_NT_ITEM_FOR: return for_item(I, it, scope, st);
  case CN_NT_ITEM_SHUFFLE: return shuffle_item(I, it, scope, st);
  case CN_NT_ITEM_CHECKPOINT: return checkpoint_item(I, it, scope, st);
  case CN_NT_ITEM_SAVE_NPY: return save_npy_item(I, it, scope, st);
  case CN_NT_ITEM_PLOT: return nt_plot_item(I, it, scope, st);
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

/* The prelude's functions bound in I->prelude: definitions only (its items are let%op and let%cd
 * functions, which build nothing until applied), so it costs a parse, not a routine. */
static bool load_prelude(nt_interp *I) {
  cn_nt_program *prog = cn_nt_parse_program(I->ctx, "<prelude>", cn_nt_prelude_source);
  if (!prog) return false; /* out of memory: the text itself parses (test_prelude) */
  I->prelude_src = prog->src;
  for (int i = 0; i < prog->n_items; i++) {
    const cn_nt_item *it = &prog->items[i];
    CN_ASSERT(it->kind == CN_NT_ITEM_LET && it->u.let.n_params > 0);
    nt_value *v = function_value(I, it);
    if (!v || !cn_map_put(I->ctx, &I->prelude, it->u.let.name, v)) return false;
  }
  return true;
}

static bool open_interp(nt_interp *I, cn_graph *g, const cn_notation_options *opts) {
  memset(I, 0, sizeof *I);
  I->ctx = cn_graph_ctx(g);
  I->g = g;
  I->globals.strings = true;
  I->prelude.strings = true;
  if (opts) I->opts = *opts;
  /* tensors built before (by C code) have no position in this text */
  I->noted_tensors = g->n_tensors;
  I->noted_updates = g->n_updates;
  return load_prelude(I);
}

/* The tensor a top-level name is bound to when the script ends (`option` is the option that
 * names it, for messages at `at`), or NULL after a message. */
static cn_tensor *top_level_tensor(nt_interp *I, const char *name, const char *option,
                                   cn_nt_pos at) {
  nt_value *v = cn_map_get(&I->globals, name);
  if (!v)
    return nt_fail(I, at, "export: %s '%s' is not a name the script binds at its top level", option,
                   name),
           NULL;
  if (v->kind != NT_V_TENSOR || v->grad)
    return nt_fail(I, at, "export: %s '%s' is bound to %s, not a tensor", option, name,
                   v->grad ? "a gradient" : nt_kind_name(v->kind)),
           NULL;
  return v->t;
}

/* After the script: the export cn_notation_options asks for (cn_graph_export_c of the tensors
 * bound to the two names, and with export_sampler cn_text_export_sampler over the corpus of the
 * script's first text_windows), the output's parameters initialized first when nothing did.
 * Messages point at the script's last statement, where the names are looked up. */
static bool export_model(nt_interp *I, const cn_nt_program *prog) {
  const cn_notation_options *o = &I->opts;
  if (!o->export_input && !o->export_output) return true;
  cn_nt_pos at = prog->n_items ? prog->items[prog->n_items - 1].pos : (cn_nt_pos){prog->src, 1, 1};
  if (!o->export_input || !o->export_output)
    return nt_fail(I, at, "%s", "export needs both the input and the output tensor's names"), false;
  cn_tensor *in = top_level_tensor(I, o->export_input, "the input", at);
  cn_tensor *out = in ? top_level_tensor(I, o->export_output, "the output", at) : NULL;
  if (!out || !nt_materialize(I, at)) return false;
  cn_asgn *init = cn_graph_init_params(I->g, out);
  if (!init) return nt_fail_here(I, at), false;
  if (!nt_asgn_empty(init) && !nt_run_asgn(I, init, NULL, at)) return false;
  const char *name = o->export_name ? o->export_name : o->export_output;
  const char *dir = o->export_dir ? o->export_dir : ".";
  /* the sampler's vocabulary: the corpus of the script's first text_windows, found before
   * anything is written */
  const cn_text *corpus = NULL;
  for (int i = 0; o->export_sampler && !corpus && i < I->n_datasets; i++)
    if (I->datasets[i].text) corpus = nt_text_set_corpus(I->datasets[i].text);
  if (o->export_sampler && !corpus)
    return nt_fail(I, at, "%s",
                   "export --sampler: the script reads no text corpus (text_windows), so the "
                   "sampler has no vocabulary"),
           false;
  if (cn_graph_export_c(I->g, in, out, name, dir) != CN_OK ||
      (corpus && cn_text_export_sampler(I->g, corpus, in, out, name, dir) != CN_OK))
    return nt_fail_here(I, at), false;
  return true;
}

/* Whether a top-level let binds a literal --set can replace: a number, a boolean or a string. */
static bool settable(const cn_nt_item *it) {
  if (it->kind != CN_NT_ITEM_LET || it->u.let.ext != CN_NT_LET_PLAIN || !it->u.let.name ||
      it->u.let.n_params > 0)
    return false;
  cn_nt_expr_kind k = it->u.let.expr->kind;
  return (k == CN_NT_NUMBER && !it->u.let.expr->u.number.label) || k == CN_NT_BOOL ||
         k == CN_NT_STRING;
}

/* The literal of `it` replaced by the text `value`, read as the literal's kind; false after a
 * message at the let. */
static bool set_literal(nt_interp *I, cn_nt_item *it, const char *set, const char *value) {
  const cn_nt_expr *old = it->u.let.expr;
  cn_nt_expr *e = cn_alloc(I->ctx, sizeof *e);
  if (!e) return false;
  *e = *old;
  char *end = NULL;
  const char *kind = NULL;
  if (old->kind == CN_NT_STRING) {
    e->u.string.text = cn_strdup(I->ctx, value);
    if (!e->u.string.text) return false;
  } else if (old->kind == CN_NT_BOOL) {
    e->u.boolean = strcmp(value, "true") == 0;
    if (!e->u.boolean && strcmp(value, "false") != 0) kind = "a boolean (true or false)";
  } else if (old->u.number.is_int) {
    long long n = strtoll(value, &end, 10);
    e->u.number.ival = n;
    e->u.number.value = (double)n;
    if (end == value || *end || n > 9007199254740992LL || n < -9007199254740992LL)
      kind = "an integer";
  } else {
    e->u.number.value = strtod(value, &end);
    if (end == value || *end || !isfinite(e->u.number.value)) kind = "a number";
  }
  if (kind)
    return nt_fail(I, old->pos, "--set %s: '%s' is %s here, and '%s' is not", set, it->u.let.name,
                   kind, value),
           false;
  it->u.let.expr = e;
  return true;
}

/* cn_notation_options.sets: each NAME=VALUE replaces the literal of every top-level `let NAME =
 * LITERAL`; an unknown name is an error naming those that can be set. A malformed or unknown
 * --set is a command-line error: its message has no position in the script. */
static bool apply_sets(nt_interp *I, cn_nt_program *prog) {
  for (int k = 0; k < I->opts.n_sets; k++) {
    const char *set = I->opts.sets && I->opts.sets[k] ? I->opts.sets[k] : "";
    const char *eq = strchr(set, '=');
    if (!eq || eq == set)
      return cn_fail(I->ctx, CN_ERR_INVALID, "--set '%s': expected NAME=VALUE", set), false;
    size_t len = (size_t)(eq - set);
    int found = 0;
    for (int i = 0; i < prog->n_items; i++) {
      cn_nt_item *it = &prog->items[i];
      if (!settable(it) || strlen(it->u.let.name) != len || strncmp(it->u.let.name, set, len) != 0)
        continue;
      if (!set_literal(I, it, set, eq + 1)) return false;
      found++;
    }
    if (found) continue;
    cn_sbuf names = {0};
    char *name = cn_alloc(I->ctx, len + 1);
    if (!name) return false;
    memcpy(name, set, len);
    cn_suggest s;
    cn_suggest_init(&s, name);
    for (int i = 0; i < prog->n_items; i++)
      if (settable(&prog->items[i])) {
        cn_sbuf_printf(&names, "%s%s", names.len ? ", " : "", prog->items[i].u.let.name);
        cn_suggest_consider(&s, prog->items[i].u.let.name);
      }
    const char *list = cn_sbuf_finish(I->ctx, &names);
    if (!list) return false;
    return cn_fail(I->ctx, CN_ERR_INVALID,
                   "--set %s: the script has no top-level let %s = LITERAL (a number, boolean or "
                   "string)%s; the names it can set: %s",
                   set, name, cn_suggest_text(&s), *list ? list : "none"),
           false;
  }
  return true;
}

static cn_status run_program(nt_interp *I, const char *file, const char *text,
                             const cn_notation_options *opts) {
  cn_nt_program *prog = cn_nt_parse_program(I->ctx, file ? file : "<script>", text ? text : "");
  if (opts && opts->syntax_error) *opts->syntax_error = !prog;
  if (!prog) return cn_ctx_status(I->ctx);
  bool ok = apply_sets(I, prog);
  for (int i = 0; ok && i < prog->n_items; i++) ok = item(I, &prog->items[i], NULL);
  if (ok) ok = export_model(I, prog);
  nt_report_nonfinite(I);
  nt_report_written(I);
  if (!ok) return cn_ctx_status(I->ctx) ? cn_ctx_status(I->ctx) : CN_ERR_INVALID;
  return CN_OK;
}

/* A script's tensors reach the host and later code only through names, so those it never names
 * are fusable while it runs (tensor.h, fuse_unnamed); cn_notation_op and cn_notation_cd hand
 * their results to C code and keep every node. */
cn_status cn_notation_run(cn_graph *g, const char *file, const char *text,
                          const cn_notation_options *opts) {
  nt_interp I;
  /* NULL options are the defaults: the backend too, the context's option "backend" */
  cn_notation_options defaults = {.backend = CN_BACKEND_DEFAULT};
  if (!opts) opts = &defaults;
  if (!open_interp(&I, g, opts) || (I.opts.backend == CN_BACKEND_DEFAULT &&
                                    cn_routine_default_backend(I.ctx, &I.opts.backend) != CN_OK)) {
    if (opts && opts->syntax_error) *opts->syntax_error = false;
    return cn_ctx_status(I.ctx);
  }
  bool was = g->fuse_unnamed;
  g->fuse_unnamed = true;
  cn_status st = run_program(&I, file, text, opts);
  nt_plots_free(&I);
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
  if (!open_interp(&I, g, NULL) || !bind_all(&I, n_bindings, bindings)) return NULL;
  cn_nt_expr *x = cn_nt_parse_expr(I.ctx, "<cn_op>", text ? text : "");
  nt_value *v = x ? nt_eval(&I, NULL, &I.top, x) : NULL;
  return v ? nt_tensor_of(&I, v, x->pos) : NULL;
}

cn_asgn *cn_notation_cd(cn_graph *g, const char *text, int n_bindings,
                        const cn_notation_binding *bindings) {
  nt_interp I;
  if (!open_interp(&I, g, NULL) || !bind_all(&I, n_bindings, bindings)) return NULL;
  cn_nt_cd *cd = cn_nt_parse_cd(I.ctx, "<cn_cd>", text ? text : "");
  nt_code *c = cd ? nt_eval_cd(&I, NULL, &I.top, cd) : NULL;
  return c && nt_materialize(&I, cd->pos) ? nt_code_asgn(&I, c, NULL) : NULL;
}
