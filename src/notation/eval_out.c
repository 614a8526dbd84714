/* The evaluator, part 6 of 8 (see eval_internal.h): what statements write besides tensors.
 * printf's formatting (the parser checked the format: one argument per conversion), strings,
 * the progress display of `for ... progress` loops (a bar redrawn in place on a terminal, at most
 * ten times a second; plain lines at every tenth of the steps otherwise; JSON objects with
 * --json; the rate and the time left count from the end of the first step, whose time holds the
 * compilation of the body, the total time from the loop's start), the warning at the end of a
 * run about the NaNs and infinities the script showed, the message for a routine that reads a
 * static index no enclosing loop binds, and the note for a parameter that a statement closed to
 * the fewest axes before any use and a later operation broadcasts (the library's way of warning,
 * as cc.c's: the context's log when it has one, else stderr).
 *
 * Invariants: a drawn bar is cleared (nt_out) before anything else is written to the stream, so
 * lines never interleave with it; the plain and JSON forms depend only on the steps and the loss,
 * apart from the rate and the times; nothing here allocates per step. */
#include "notation/eval_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

FILE *nt_out(nt_interp *I) {
  FILE *f = I->opts.out ? I->opts.out : stdout;
  if (I->bar_shown) {
    fputs("\r\033[K", f);
    I->bar_shown = false;
  }
  return f;
}

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    if (*c == '"' || *c == '\\')
      fprintf(f, "\\%c", *c);
    else if (*c == '\n')
      fputs("\\n", f);
    else if (*c == '\t')
      fputs("\\t", f);
    else if (*c < 0x20 || *c == 0x7f)
      fprintf(f, "\\u%04x", *c);
    else
      fputc(*c, f);
  }
  fputc('"', f);
}

void nt_write_text(nt_interp *I, const char *text) {
  FILE *f = nt_out(I);
  if (!I->opts.json) {
    fputs(text, f);
    return;
  }
  fputs("{\"text\": ", f);
  json_string(f, text);
  fputs("}\n", f);
}

/* ---- printf --------------------------------------------------------------------------------- */

static bool wrong_kind(nt_interp *I, const cn_nt_expr *arg, const cn_nt_fmt *part, const char *want,
                       const nt_value *v) {
  nt_fail(I, arg->pos, "the conversion '%s' expects %s, found %s", part->text, want,
          nt_kind_name(v->kind));
  return false;
}

bool nt_format(nt_interp *I, const cn_nt_item *it, nt_value *const *values, cn_sbuf *sb) {
  int k = 0;
  for (int i = 0; i < it->u.printf_.n_parts; i++) {
    const cn_nt_fmt *part = &it->u.printf_.parts[i];
    if (!part->conv) {
      cn_sbuf_puts(sb, part->text);
      continue;
    }
    const cn_nt_expr *arg = it->u.printf_.args[k];
    const nt_value *v = values[k++];
    int len = (int)strlen(part->text) - 1; /* the conversion without its letter */
    char fmt[32];
    switch (part->conv) {
    case 'd':
    case 'i': {
      if (v->kind != NT_V_NUM) return wrong_kind(I, arg, part, "a number", v);
      double r = round(v->num);
      if (!(fabs(r) < 9e18))
        return nt_fail(I, arg->pos, "the conversion '%s' takes an integer: %g is out of range",
                       part->text, v->num),
               false;
      snprintf(fmt, sizeof fmt, "%.*slld", len, part->text);
      cn_sbuf_printf(sb, fmt, (long long)r);
      break;
    }
    case 's':
      if (v->kind != NT_V_STR) return wrong_kind(I, arg, part, "a string", v);
      cn_sbuf_printf(sb, part->text, v->str);
      break;
    case 'b':
      if (v->kind != NT_V_BOOL) return wrong_kind(I, arg, part, "a boolean", v);
      snprintf(fmt, sizeof fmt, "%.*ss", len, part->text);
      cn_sbuf_printf(sb, fmt, v->b ? "true" : "false");
      break;
    default: /* f F e E g G */
      if (v->kind != NT_V_NUM) return wrong_kind(I, arg, part, "a number", v);
      cn_sbuf_printf(sb, part->text, v->num);
      break;
    }
  }
  return true;
}

/* ---- Progress ------------------------------------------------------------------------------- */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void nt_progress_start(nt_interp *I, nt_progress *pr, const cn_nt_item *it, int64_t total,
                       cn_tensor *loss, int64_t batch_size) {
  FILE *f = nt_out(I);
  memset(pr, 0, sizeof *pr);
  pr->loop = it;
  pr->total = total;
  pr->loss = loss;
  pr->batch_size = batch_size;
  pr->tty = !I->opts.json && isatty(fileno(f));
  pr->start = now();
  pr->tenth = 1;
  pr->next_line = (total + 9) / 10;
}

/* The loss as the body last computed it: a scalar tensor that a statement of the body computes
 * (the loss of backprop, a buffer a routine writes). */
static bool read_loss(nt_interp *I, const nt_progress *pr, double *out) {
  cn_tensor *t = pr->loss;
  cn_nt_pos at = pr->loop->u.for_.loss->pos;
  bool computed = t->kind == CN_TK_ACCUM || t->kind == CN_TK_TILE || t->kind == CN_TK_VEC;
  if (computed && !(t->id < I->cap_consumed && I->consumed[t->id]))
    return nt_fail(I, at,
                   "progress's ~loss \"%s\" (#%d) is not computed by a statement: give the tensor "
                   "that the body's backprop computes",
                   t->label, t->id),
           false;
  cn_node *node = cn_tensor_value(t);
  if (!node) return nt_fail_here(I, at), false;
  if (cn_node_numel(node) != 1)
    return nt_fail(I, at, "progress's ~loss is a scalar: \"%s\" (#%d) has %lld cells", t->label,
                   t->id, (long long)cn_node_numel(node)),
           false;
  if (cn_node_get_values(node, false, out, 1) != CN_OK) return nt_fail_here(I, at), false;
  return true;
}

/* "m:ss", or "h:mm:ss" from an hour. */
static void clock_text(char *buf, size_t cap, double seconds) {
  long s = seconds > 0 && seconds < 1e9 ? (long)(seconds + 0.5) : 0;
  if (s >= 3600)
    snprintf(buf, cap, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else
    snprintf(buf, cap, "%ld:%02ld", s / 60, s % 60);
}

void nt_note_nonfinite(nt_interp *I, nt_shown_kind kind, cn_nt_pos at, double value,
                       const char *where) {
  nt_nonfinite *n = &I->shown[kind];
  if (n->count++ == 0) {
    n->at = at;
    snprintf(n->what, sizeof n->what, "%s %s",
             isnan(value) ? "nan"
             : value > 0  ? "inf"
                          : "-inf",
             where);
  }
}

void nt_report_nonfinite(nt_interp *I) {
  static const char *const shown[NT_SHOWN_KINDS] = {"printed a NaN or an infinity",
                                                    "showed a progress loss that is not finite"};
  FILE *f = I->opts.err ? I->opts.err : stderr;
  for (int k = 0; k < NT_SHOWN_KINDS; k++) {
    const nt_nonfinite *n = &I->shown[k];
    if (!n->count) continue;
    const cn_nt_source *src = n->at.src;
    fflush(nt_out(I)); /* after what the script printed, where both streams go to one place */
    char times[48] = ":";
    if (n->count > 1) snprintf(times, sizeof times, " %lld times, first", (long long)n->count);
    fprintf(f,
            "warning: the script %s%s %s at %s:%d:%d (--check-nan, or the option check=nan, "
            "stops at the first non-finite value a routine computes)\n",
            shown[k], times, n->what, src && src->file ? src->file : "<script>", n->at.line,
            n->at.col);
  }
}

bool nt_progress_step(nt_interp *I, nt_progress *pr, int64_t done) {
  bool last = done == pr->total;
  double t = now();
  if (done == 1) pr->first_end = t;
  if (pr->tty ? !last && t - pr->last_draw < 0.1 : !last && done < pr->next_line) return true;
  double loss = 0;
  if (pr->loss && !read_loss(I, pr, &loss)) return false;
  if (pr->loss && !isfinite(loss)) {
    char where[48];
    snprintf(where, sizeof where, "(step %lld)", (long long)done);
    nt_note_nonfinite(I, NT_SHOWN_LOSS, pr->loop->u.for_.loss->pos, loss, where);
  }
  /* the rate and the time left: of the steps after the first, whose time includes the
   * compilation of the body; at the first step, unknown yet (shown "?", null in JSON, as tqdm
   * does), unless it is the last */
  bool known = done > 1 || last;
  double elapsed = t - pr->start, span = done > 1 ? t - pr->first_end : elapsed;
  int64_t steps = done > 1 ? done - 1 : 1;
  double per_step = span / (double)steps;
  double rate = span > 0 ? (double)steps * (double)(pr->batch_size ? pr->batch_size : 1) / span : 0;
  const char *name = pr->loop->u.for_.name, *unit = pr->batch_size ? "samples/s" : "steps/s";
  int pct = (int)(100 * done / pr->total);
  /* the time shown: the time left, or at the last step the time taken */
  double shown = last ? elapsed : per_step * (double)(pr->total - done);
  char eta[32];
  clock_text(eta, sizeof eta, shown);
  FILE *f = nt_out(I);
  pr->last_draw = t;
  while (pr->next_line <= done && pr->tenth < 10) /* the step that ends the next tenth */
    pr->next_line = (pr->total * ++pr->tenth + 9) / 10;
  if (I->opts.json) {
    fprintf(f, "{\"progress\": ");
    json_string(f, name);
    fprintf(f, ", \"step\": %lld, \"total\": %lld", (long long)done, (long long)pr->total);
    if (pr->loss && isfinite(loss))
      fprintf(f, ", \"loss\": %.17g", loss);
    else if (pr->loss) /* as --json prints tensors: NaN and infinities are strings */
      fprintf(f, ", \"loss\": \"%s\"", isnan(loss) ? "nan" : loss > 0 ? "inf" : "-inf");
    if (known)
      fprintf(f, ", \"rate\": %.4g, \"%s\": %.3f}\n", rate, last ? "elapsed_s" : "eta_s", shown);
    else
      fprintf(f, ", \"rate\": null, \"eta_s\": null}\n");
    fflush(f); /* a reader of a pipe sees each step when it happens, as on a terminal */
    return true;
  }
  if (pr->tty) {
    char bar[26];
    int filled = (int)(24 * done / pr->total);
    for (int i = 0; i < 24; i++) bar[i] = i < filled ? '=' : i == filled ? '>' : ' ';
    bar[24] = '\0';
    fprintf(f, "\r%s %lld/%lld [%s] %3d%%", name, (long long)done, (long long)pr->total, bar, pct);
  } else {
    fprintf(f, "%s %lld/%lld (%d%%)", name, (long long)done, (long long)pr->total, pct);
  }
  if (pr->loss) fprintf(f, " loss %.5g", loss);
  if (known)
    fprintf(f, " | %.4g %s | %s %s", rate, unit, last ? "in" : "ETA", eta);
  else
    fprintf(f, " | ? %s | ETA ?", unit);
  if (pr->tty && !last) {
    fputs("\033[K", f);
    I->bar_shown = true;
  } else {
    fputc('\n', f);
  }
  fflush(f);
  return true;
}

/* ---- Static indices ------------------------------------------------------------------------- */

bool nt_note_index(nt_interp *I, nt_value *v) {
  if (!cn_arena_grow(I->ctx, (void **)&I->indices, &I->cap_indices, I->n_indices + 1,
                     sizeof *I->indices))
    return false;
  I->indices[I->n_indices++] = v;
  return true;
}

bool nt_index_value(const nt_interp *I, const nt_value *v, int64_t *value) {
  for (int i = I->n_bound - 1; v->index.created && i >= 0; i--)
    if (I->bound[i].sym == v->index.sym) {
      *value = I->bound[i].value;
      return true;
    }
  return false;
}

bool nt_explain_unbound(nt_interp *I, const cn_routine *r) {
  const nt_value *v = NULL;
  int64_t value;
  for (int i = 0; i < I->n_indices && !v; i++)
    if (cn_routine_reads(r, I->indices[i]->index.sym) && !nt_index_value(I, I->indices[i], &value))
      v = I->indices[i];
  if (!v || !I->item || cn_ctx_status(I->ctx) == CN_ERR_NOMEM) return false;
  cn_sbuf stmt = {0}, loop = {0};
  cn_nt_print_item(&stmt, I->item);
  const char *nl = stmt.data ? strchr(stmt.data, '\n') : NULL;
  int len = stmt.data ? (int)(nl ? nl - stmt.data : (ptrdiff_t)stmt.len) : 0;
  const char *name = v->index.name ? v->index.name : "index";
  const cn_nt_item *l = v->index.loop;
  if (l) {
    cn_sbuf_printf(&loop, "which is bound only inside the loop `for %s = ", l->u.for_.name);
    cn_nt_print_expr(&loop, l->u.for_.from);
    cn_sbuf_puts(&loop, " to ");
    cn_nt_print_expr(&loop, l->u.for_.to);
    cn_sbuf_printf(&loop, "` at line %d, column %d", l->pos.line, l->pos.col);
  } else {
    cn_sbuf_printf(
        &loop, "which no loop has bound: read it in the body of `for %s = ... do ... done`", name);
  }
  const char *where = cn_sbuf_finish(I->ctx, &loop);
  if (where)
    nt_fail(I, I->item->pos,
            "`%.*s%s` reads the static index '%s' (declared at line %d, column %d), %s",
            len > 60 ? 57 : len, stmt.data ? stmt.data : "", len > 60 ? "..." : "", name,
            v->index.decl_at.line, v->index.decl_at.col, where);
  cn_sbuf_free(&stmt);
  return true;
}

/* ---- Shapes closed before any use ----------------------------------------------------------- */

static bool shape_open(cn_shape_env *env, const cn_shape *sh) {
  for (int k = 0; k < CN_N_ROWS; k++) {
    const cn_row *r = cn_row_resolve(env, sh->rows[k]);
    if (!r) return false; /* out of memory: no note rather than a wrong one */
    if (r->var >= 0) return true;
    for (int i = 0; i < r->n_trail; i++)
      if (r->trail[i]->kind != CN_DIM_SOLVED) return true;
  }
  return false;
}

void nt_guess_shapes(nt_interp *I, int first) {
  cn_graph *g = I->g;
  bool any = false;
  for (int i = first; i < g->n_tensors && !any; i++)
    any = g->tensors[i]->is_param && shape_open(g->shapes, g->tensors[i]->shape);
  if (!any) return; /* the usual case: no scan of the uses */
  int cap = g->tensors[g->n_tensors - 1]->id + 1;
  unsigned char *used = cn_malloc(I->ctx, (size_t)cap);
  if (!used) return; /* a lost note */
  memset(used, 0, (size_t)cap);
  for (int i = 0; i < g->n_tensors; i++)
    for (int k = 0; k < g->tensors[i]->n_args; k++) used[g->tensors[i]->args[k]->id] = 1;
  for (int i = first; i < g->n_tensors; i++) {
    cn_tensor *t = g->tensors[i];
    if (!t->is_param || used[t->id] || !shape_open(g->shapes, t->shape)) continue;
    if (t->id >= I->cap_guessed) {
      int old = I->cap_guessed;
      if (!cn_arena_grow(I->ctx, (void **)&I->guessed, &I->cap_guessed, t->id + 1, 1)) break;
      memset(I->guessed + old, 0, (size_t)(I->cap_guessed - old));
    }
    I->guessed[t->id] = 1;
  }
  free(used);
}

static int64_t cells_of(cn_shape_env *env, const cn_shape *sh) {
  int64_t dims[CN_N_ROWS * CN_MAX_RANK], n = 1;
  int rank = cn_shape_dims(env, sh, dims, CN_N_ROWS * CN_MAX_RANK);
  for (int i = 0; i < rank; i++) n *= dims[i];
  return rank < 0 ? -1 : n;
}

void nt_note_broadcasts(nt_interp *I, int first) {
  cn_graph *g = I->g;
  for (int i = first; i < g->n_tensors; i++) {
    cn_tensor *t = g->tensors[i];
    if (!t->sop || t->sop->kind != CN_SL_POINTWISE) continue;
    for (int k = 0; k < t->n_args; k++) {
      cn_tensor *a = t->args[k];
      if (a->id >= I->cap_guessed || !I->guessed[a->id] || a->id >= I->cap_computed_at ||
          !I->computed_at[a->id].src || t->id >= I->cap_tensor_at || !I->tensor_at[t->id].src)
        continue;
      int64_t own = cells_of(g->shapes, a->shape), to = cells_of(g->shapes, t->shape);
      if (own < 0 || to <= own) continue;
      I->guessed[a->id] = 0; /* once */
      cn_nt_pos at = I->tensor_at[t->id];
      char msg[1024];
      snprintf(msg, sizeof msg,
               "%s:%d:%d: note: parameter \"%s\" (#%d) of shape %s is broadcast to %s here: its "
               "shape was closed for line %d, before anything used it (a parameter gets the "
               "fewest axes its uses need); use it or give its dims before that line if it "
               "should have more cells",
               at.src->file, at.line, at.col, a->label, a->id, cn_shape_str(g->shapes, a->shape),
               cn_shape_str(g->shapes, t->shape), I->computed_at[a->id].line);
      if (I->ctx->log_fn)
        cn_log(I->ctx, CN_LOG_WARN, "%s", msg);
      else
        fprintf(stderr, "%s\n", msg);
    }
  }
}
