/* The evaluator's core floor (eval_core.h: it may include the core's, the services' and the
 * base's headers): application. The arguments of an
 * application, and let%op / let%cd / let%tile functions; a name the script does not bind is a
 * builtin (eval_builtin.c); the einsum specs of applications and operators (their "…" and the
 * strides and dilations a script binds spliced in).
 *
 * A function is applied curried: positional arguments fill its plain parameters in order, labeled
 * ones (~x, ?x) by name; once every required parameter is given the body runs (a let%op body gives
 * a value, a let%cd body a routine). Lifting points (syntax-extensions-cd-op "Lifting of the
 * applications of config arguments", convolution-is-a-contraction "the unit boundary"): supplying a
 * `~config` or `()` parameter creates the function's inline declarations for that application,
 * shared by every later application of the partial function; and a config application `f
 * ~config:{...}` inside a body is a *config block*, evaluated once per lifting point (when it is
 * created) and reused by every evaluation of the body, as syntax-extensions-cd-op's expansion into
 * config_block__i bindings does. The primary tensor a let%op function returns is labeled by the
 * function's name and its input argument's label (syntax-extensions-cd-op "Name from binding",
 * "Label from function argument").
 *
 * Invariants: an application never changes the function value it applies (partial
 * applications are copies); call depth is bounded by NT_MAX_CALL_DEPTH. */
#include "notation/eval_core.h"
#include "tile/tile.h"

#include <ctype.h>
#include <string.h>

/* ---- Arguments ----------------------------------------------------------------------------- */

/* Evaluates the arguments of x; a positional string is an inline declaration except in a spec
 * position; `skip` (a labeled argument already consumed, or NULL) is left out. */
static bool eval_args(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_expr *x,
                      const char *name, const cn_nt_arg *skip, nt_args *a) {
  memset(a, 0, sizeof *a);
  for (int i = 0; i < x->u.apply.n_args; i++) {
    const cn_nt_arg *arg = &x->u.apply.args[i];
    if (arg == skip) continue;
    nt_value *v;
    if (arg->value) {
      bool operand = !arg->label && !nt_spec_argument(name, a->n_pos);
      if (!(v = operand ? nt_eval_operand(I, e, ds, arg->value) : nt_eval(I, e, ds, arg->value)))
        return false;
    } else if (!(v = nt_lookup(I, e, arg->label))) {
      nt_fail_unbound(I, e, arg->pos, arg->label);
      return false;
    }
    if (arg->label) {
      if (a->n_lab == NT_MAX_ARGS)
        return nt_fail(I, arg->pos, "%s", "too many labeled arguments"), false;
      a->lab[a->n_lab] = arg->label;
      a->lab_at[a->n_lab] = arg->pos;
      a->lab_v[a->n_lab++] = v;
    } else {
      if (a->n_pos == NT_MAX_ARGS) return nt_fail(I, arg->pos, "%s", "too many arguments"), false;
      a->pos_at[a->n_pos] = arg->pos;
      a->pos[a->n_pos++] = v;
    }
  }
  return true;
}

/* Tile builds a statement from its tensors' dims: a tensor whose shape is still open (a pointwise
 * result's rows close at materialization) is settled by materializing the graph first. */
bool nt_settle_shapes(nt_interp *I, cn_tensor *const *t, int n, cn_nt_pos at) {
  for (int i = 0; i < n; i++) {
    int64_t dims[CN_MAX_RANK];
    if (!t[i] || cn_shape_dims(I->g->shapes, t[i]->shape, dims, CN_MAX_RANK) >= 0) continue;
    if (cn_ctx_status(I->ctx) == CN_ERR_NOMEM) return false;
    cn_ctx_clear_error(I->ctx);
    return nt_materialize(I, at);
  }
  return true;
}

/* ---- Functions ------------------------------------------------------------------------------- */

static nt_value *eval_body(nt_interp *I, nt_value *fn);

bool nt_is_lifting(const cn_nt_param *p) {
  return p->kind == CN_NT_PARAM_UNIT || (p->name && strcmp(p->name, "config") == 0);
}

/* The label of a ~config record (its `label` list joined), or NULL. */
static const char *config_label(nt_interp *I, const nt_value *cfg) {
  if (!cfg || cfg->kind != NT_V_RECORD) return NULL;
  for (int j = 0; j < cfg->n; j++) {
    const nt_value *l = cfg->items[j];
    if (strcmp(cfg->names[j], "label") != 0 || l->kind != NT_V_LIST) continue;
    const char *label = NULL;
    for (int k = 0; k < l->n; k++)
      if (l->items[k]->kind == NT_V_STR)
        label = label ? nt_join_label(I, label, l->items[k]->str) : l->items[k]->str;
    return label;
  }
  return NULL;
}

/* Curried application of a let%op / let%cd function: arguments fill its parameters (positional
 * ones in order, labeled ones by name); once every required parameter is given, the body runs. */
static nt_value *call(nt_interp *I, nt_value *fn, const nt_args *a) {
  const cn_nt_item *def = fn->fn.def;
  int np = def->u.let.n_params;
  nt_value *f = nt_mk(I, NT_V_FUNC);
  if (!f) return NULL;
  *f = *fn;
  f->fn.given = cn_alloc(I->ctx, sizeof(nt_value *) * (size_t)(np + 1));
  if (!f->fn.given) return NULL;
  memcpy(f->fn.given, fn->fn.given, sizeof(nt_value *) * (size_t)np);
  bool lifted = false;
  for (int i = 0; i < a->n_lab; i++) {
    int k = 0;
    while (k < np &&
           !(def->u.let.params[k].name && strcmp(def->u.let.params[k].name, a->lab[i]) == 0 &&
             def->u.let.params[k].kind != CN_NT_PARAM_PLAIN))
      k++;
    if (k == np) {
      cn_suggest s;
      cn_suggest_init(&s, a->lab[i]);
      s.prefix = "~";
      for (k = 0; k < np; k++)
        if (def->u.let.params[k].kind != CN_NT_PARAM_PLAIN)
          cn_suggest_consider(&s, def->u.let.params[k].name);
      return nt_fail(I, a->lab_at[i], "no parameter ~%s%s", a->lab[i], cn_suggest_text(&s));
    }
    f->fn.given[k] = a->lab_v[i];
    lifted |= nt_is_lifting(&def->u.let.params[k]);
  }
  int next = 0;
  for (int i = 0; i < a->n_pos; i++) {
    while (next < np && (f->fn.given[next] || def->u.let.params[next].kind == CN_NT_PARAM_LABELED ||
                         def->u.let.params[next].kind == CN_NT_PARAM_OPTIONAL))
      next++;
    if (next == np) return nt_fail(I, a->pos_at[i], "%s", "too many arguments");
    if (def->u.let.params[next].kind == CN_NT_PARAM_UNIT && a->pos[i]->kind != NT_V_UNIT)
      return nt_fail(I, a->pos_at[i], "%s", "expected ()");
    f->fn.given[next] = a->pos[i];
    if (def->pos.src == I->prelude_src) { /* operands, refused where the script wrote them */
      cn_tensor *t = nt_tensor_of(I, a->pos[i], a->pos_at[i]);
      if (!t || !(f->fn.given[next] = nt_tensor_value(I, t))) return NULL;
    }
    lifted |= nt_is_lifting(&def->u.let.params[next]);
  }
  if (lifted && def->u.let.ext == CN_NT_LET_OP) { /* a lifting point: its own declarations */
    nt_decl_scope *ds = cn_alloc(I->ctx, sizeof *ds);
    if (!ds) return NULL;
    if (def->u.let.config_param >= 0)
      ds->more_label = config_label(I, f->fn.given[def->u.let.config_param]);
    f->fn.decls = ds;
    nt_env *scope = NULL;
    for (int k = 0; k < np; k++)
      if (f->fn.given[k] && def->u.let.params[k].name &&
          !nt_bind(I, &scope, def->u.let.params[k].name, f->fn.given[k]))
        return NULL;
    if (!nt_predeclare(I, scope, ds, def->u.let.expr)) return NULL;
  }
  for (int k = 0; k < np; k++)
    if (!f->fn.given[k] && def->u.let.params[k].kind != CN_NT_PARAM_OPTIONAL) return f;
  return eval_body(I, f);
}

/* The primary tensor's label: the function's name, then its input argument's label. */
static bool label_result(nt_interp *I, const cn_nt_item *def, nt_value *const *given,
                         nt_value *result, int before) {
  if (!result || result->kind != NT_V_TENSOR || result->grad || result->t->id <= before ||
      result->t->is_param)
    return true;
  const char *label = def->u.let.name;
  for (int k = 0; k < def->u.let.n_params; k++)
    if (def->u.let.params[k].kind == CN_NT_PARAM_PLAIN && given[k] &&
        given[k]->kind == NT_V_TENSOR) {
      label = nt_join_label(I, label, given[k]->t->label);
      break;
    }
  return label && cn_tensor_set_label(result->t, label) == CN_OK;
}

/* Each tensor a let%tile application builds is noted where the body computes it (its contraction
 * statement or elementwise operation), so a later message about it (the NaN check's) points there
 * and not at the body's first line. */
typedef struct {
  nt_interp *I;
  const cn_nt_source *src;
} tile_noter;

static void note_tile(void *user, int line, int col) {
  tile_noter *n = user;
  nt_note(n->I, (cn_nt_pos){n->src, line, col});
}

/* A let%tile application: integers are dims (strides, sizes), everything else a tensor. Errors
 * come from src/tile, positioned in the function's body. */
static nt_value *tile_body(nt_interp *I, const nt_value *f) {
  const cn_nt_item *def = f->fn.def;
  int n = def->u.let.n_params;
  cn_tile_arg *targs = cn_alloc(I->ctx, sizeof *targs * (size_t)n);
  if (!targs) return NULL;
  for (int k = 0; k < n; k++) {
    nt_value *v = f->fn.given[k];
    if (v->kind == NT_V_NUM && v->is_int) {
      targs[k] = (cn_tile_arg){NULL, (int64_t)v->num};
    } else if (!(targs[k].tensor = nt_tensor_of(I, v, def->u.let.params[k].pos))) {
      return NULL;
    }
  }
  for (int k = 0; k < n; k++)
    if (!nt_settle_shapes(I, &targs[k].tensor, 1, def->u.let.params[k].pos)) return NULL;
  tile_noter noter = {I, def->u.let.tile_pos.src};
  cn_tensor *t = cn_tile_fn_apply_noted(I->g, def->u.let.tile_fn, n, targs, note_tile, &noter);
  if (!t) return NULL;
  nt_note(I, def->u.let.tile_pos);
  return nt_tensor_value(I, t);
}

static nt_value *eval_body(nt_interp *I, nt_value *f) {
  const cn_nt_item *def = f->fn.def;
  if (++I->depth > NT_MAX_CALL_DEPTH) {
    I->depth--;
    return nt_fail(I, def->pos, "%s", "function calls nested too deeply");
  }
  nt_env *scope = NULL;
  nt_value *result = NULL;
  bool ok = true;
  /* a prelude function's body: its names, its messages at the script's application, and its
   * arguments not named by binding them (it keeps none, as a builtin keeps none) */
  bool prelude = def->pos.src == I->prelude_src;
  I->in_prelude += prelude;
  for (int k = 0; k < def->u.let.n_params && ok; k++) {
    const cn_nt_param *p = &def->u.let.params[k];
    nt_value *v = f->fn.given[k];
    if (!v && p->default_value) v = nt_eval(I, NULL, f->fn.decls, p->default_value);
    if (!v) v = nt_mk(I, NT_V_UNIT);
    if (p->name) ok = v && nt_bind(I, &scope, p->name, v);
  }
  if (ok && def->u.let.ext == CN_NT_LET_TILE) {
    int before = I->g->n_tensors;
    result = tile_body(I, f);
    if (!label_result(I, def, f->fn.given, result, before)) result = NULL;
  } else if (ok && def->u.let.ext == CN_NT_LET_CD) {
    /* each application of a let%cd function is a routine with its own declarations */
    nt_decl_scope *ds = cn_alloc(I->ctx, sizeof *ds);
    nt_code *c = ds ? nt_eval_cd(I, scope, ds, def->u.let.cd) : NULL;
    if (c && (result = nt_mk(I, NT_V_ROUTINE))) result->routine = c;
  } else if (ok) {
    int before = I->g->n_tensors;
    result = nt_eval(I, scope, f->fn.decls, def->u.let.expr);
    /* a prelude operation is labeled by its ~label, as the builtin it replaces */
    if (!prelude && !label_result(I, def, f->fn.given, result, before)) result = NULL;
  }
  I->in_prelude -= prelude;
  I->depth--;
  return result;
}

bool nt_config_block(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_expr *x,
                     nt_value **out) {
  *out = NULL;
  if (x->kind != CN_NT_APPLY || x->u.apply.fn->kind != CN_NT_IDENT) return true;
  const cn_nt_arg *cfg = cn_nt_find_arg(x->u.apply.n_args, x->u.apply.args, "config");
  nt_value *f = cfg ? nt_lookup(I, e, x->u.apply.fn->u.ident.name) : NULL;
  if (!f || f->kind != NT_V_FUNC) return true;
  if ((*out = cn_map_get(&ds->blocks, x))) return true;
  nt_value *cv = cfg->value ? nt_eval(I, e, ds, cfg->value) : nt_lookup(I, e, "config");
  if (!cv) {
    if (!cfg->value) nt_fail(I, cfg->pos, "%s", "unbound name 'config'");
    return false;
  }
  nt_args a;
  memset(&a, 0, sizeof a);
  a.n_lab = 1;
  a.lab[0] = "config";
  a.lab_v[0] = cv;
  a.lab_at[0] = cfg->pos;
  nt_value *partial = call(I, f, &a);
  if (!partial || !cn_map_put(I->ctx, &ds->blocks, x, partial)) return false;
  *out = partial;
  return true;
}

nt_value *nt_apply(nt_interp *I, nt_env *e, nt_decl_scope *ds, const cn_nt_expr *x) {
  const cn_nt_expr *fx = x->u.apply.fn;
  const char *name = fx->kind == CN_NT_IDENT ? fx->u.ident.name : "";
  nt_value *block;
  if (!nt_config_block(I, e, ds, x, &block)) return NULL;
  nt_args a;
  const cn_nt_arg *cfg =
      block ? cn_nt_find_arg(x->u.apply.n_args, x->u.apply.args, "config") : NULL;
  if (!eval_args(I, e, ds, x, name, cfg, &a)) return NULL;
  if (!I->in_prelude) I->call_at = fx->pos; /* where a prelude function's work is reported */
  if (block) {                              /* the rest of the arguments go to the config block */
    if (a.n_pos == 0 && a.n_lab == 0) return block;
    if (block->kind != NT_V_FUNC)
      return nt_fail(I, fx->pos, "'%s' applied to its ~config is not a function", name);
    return call(I, block, &a);
  }
  if (fx->kind == CN_NT_IDENT) {
    nt_value *f = nt_lookup(I, e, name);
    if (!f) return nt_use_padding(I, e, fx->pos) ? nt_builtin(I, e, name, &a, fx->pos) : NULL;
    if (f->kind == NT_V_FUNC) return call(I, f, &a);
    return nt_fail(I, fx->pos, "'%s' is not a function", name);
  }
  nt_value *f = nt_eval(I, e, ds, fx);
  if (!f) return NULL;
  if (f->kind != NT_V_FUNC)
    return nt_fail(I, fx->pos, "%s is not a function", nt_kind_name(f->kind));
  return call(I, f, &a);
}

/* ---- Einsum specs ------------------------------------------------------------------------- */

/* "…" (U+2026, three bytes E2 80 A6) spells "..." in a spec: the replacement has the same length,
 * so the positions the einsum parser reports stay those of the written text. NULL only on an
 * allocation failure; the text itself when it has no "…". */
const char *nt_spec_text(nt_interp *I, const char *spec) {
  if (!spec || !strstr(spec, "\xE2\x80\xA6")) return spec;
  size_t n = strlen(spec);
  char *copy = cn_alloc(I->ctx, n + 1);
  if (!copy) return NULL;
  memcpy(copy, spec, n + 1);
  for (char *p = copy; (p = strstr(p, "\xE2\x80\xA6")) != NULL; p += 3) memcpy(p, "...", 3);
  return copy;
}

/* The graph's use_padding for the specs about to be read in e (convolution-is-a-contraction: a
 * kernel term's padding marker is "omitted where use_padding is in scope"): the script's
 * binding of use_padding there, a boolean, else none (such a term is refused). False with a
 * message at pos for a binding that is not a boolean. */
bool nt_use_padding(nt_interp *I, nt_env *e, cn_nt_pos pos) {
  nt_value *v = nt_lookup(I, e, "use_padding");
  if (v && v->kind != NT_V_BOOL)
    return nt_fail(I, pos,
                   "use_padding is %s: it must be a boolean (true: a kernel term without a "
                   "padding marker is padded, false: valid)",
                   nt_kind_name(v->kind)),
           false;
  cn_graph_set_use_padding(I->g, !v     ? CN_USE_PADDING_UNSET
                                 : v->b ? CN_USE_PADDING_TRUE
                                        : CN_USE_PADDING_FALSE);
  return true;
}

/* nt_spec_text, then every name written as a stride or dilation (`stride*o`) that the script
 * binds to an integer is replaced by that integer, so that `let stride = 2` then
 * "stride*o<+k; k => o" reads as "2*o<+k; k => o". A name the script does not bind is left for the
 * einsum parser, which reports it unbound; one bound to anything else is an error at `pos` naming
 * the column in the spec. NULL on an error. */
const char *nt_spec_splice(nt_interp *I, nt_env *e, const char *spec, cn_nt_pos pos) {
  spec = nt_spec_text(I, spec);
  if (!spec || !nt_use_padding(I, e, pos)) return NULL;
  cn_sbuf sb = {0};
  bool spliced = false;
  for (size_t i = 0; spec[i];) {
    bool starts = (isalpha((unsigned char)spec[i]) || spec[i] == '_') &&
                  (i == 0 || !(isalnum((unsigned char)spec[i - 1]) || spec[i - 1] == '_'));
    size_t end = i;
    if (starts)
      while (isalnum((unsigned char)spec[end]) || spec[end] == '_') end++;
    if (!starts || spec[end] != '*') {
      cn_sbuf_putc(&sb, spec[i++]);
      continue;
    }
    char name[64];
    nt_value *v = NULL;
    if (end - i < sizeof name) {
      memcpy(name, spec + i, end - i);
      name[end - i] = '\0';
      v = nt_lookup(I, e, name);
    }
    if (!v) {
      cn_sbuf_printf(&sb, "%.*s", (int)(end - i), spec + i);
    } else if (v->kind != NT_V_NUM || !v->is_int) {
      cn_sbuf_free(&sb);
      cn_sbuf msg = {0};
      cn_sbuf_printf(&msg,
                     "the stride or dilation '%s' at column %zu of the einsum spec is %s, not "
                     "an integer",
                     name, i + 1, v->kind == NT_V_NUM ? "a float" : nt_kind_name(v->kind));
      const char *text = cn_sbuf_finish(I->ctx, &msg);
      if (text) nt_fail(I, pos, "%s", text);
      return NULL;
    } else {
      cn_sbuf_printf(&sb, "%lld", (long long)v->num);
      spliced = true;
    }
    i = end;
  }
  const char *out = cn_sbuf_finish(I->ctx, &sb);
  return spliced ? out : out ? spec : NULL;
}
