/* The evaluator's services floor (eval_services.h: it may include the services' and the base's
 * headers): what statements write besides tensors.
 * printf's formatting (the parser checked the format: one argument per conversion), strings,
 * the progress display of `for ... progress` loops (a bar redrawn in place on a terminal, at most
 * ten times a second; plain lines at every tenth of the steps otherwise; JSON objects with
 * --json; the rate and the time left count from the end of the first step, whose time holds the
 * compilation of the body, the total time from the loop's start), the warning at the end of a
 * run about the NaNs and infinities the script showed. (The output stream nt_out, the message
 * for a routine that reads a static index no enclosing loop binds and the note for a parameter
 * broadcast after its shape was closed are the base's, eval_base.c.)
 *
 * Invariants: a drawn bar is cleared (nt_out) before anything else is written to the stream, so
 * lines never interleave with it; the plain and JSON forms depend only on the steps and the loss,
 * apart from the rate and the times; nothing here allocates per step. */
#include "notation/eval_services.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
  for (int k = 0; k < NT_SHOWN_KINDS; k++) {
    const nt_nonfinite *n = &I->shown[k];
    if (!n->count) continue;
    const cn_nt_source *src = n->at.src;
    FILE *f = nt_err(I);
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
  if (pr->loss_slots > 1) loss /= (double)pr->loss_slots;
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
