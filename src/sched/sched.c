/* The scheduling stage's driver: the options (which passes run) and their text form, and
 * cn_sched_proc, which runs the selected passes in the order of passes.def (which says why that
 * order), logging each at the debug level.
 *
 * Contract: cn_sched_proc changes how proc runs, never its results (sched.h); with no pass
 * selected it leaves proc untouched. cn_sched_parse is the one reader of the option text, for the
 * context option "schedule" and CANNL_SCHEDULE: "all", "none", or a comma list of pass names. */
#include "sched/sched.h"

#include <stdio.h>
#include <string.h>

/* The names of the option text, for the message of an unknown one. */
static const char option_names[] = "all, none"
#define CN_SCHED_PASS(NAME, name) ", " #name
#include "sched/passes.def"
#undef CN_SCHED_PASS
    ;

static const struct {
  const char *name;
  unsigned bits;
} pass_names[] = {
    {"all", CN_SCHED_ALL},
    {"none", 0},
#define CN_SCHED_PASS(NAME, name) {#name, CN_SCHED_##NAME},
#include "sched/passes.def"
#undef CN_SCHED_PASS
};

cn_sched_options cn_sched_default(void) {
  return (cn_sched_options){.passes = CN_SCHED_ALL};
}

static bool is_space(char c) {
  return c == ' ' || c == '\t';
}

/* The bits of the name text[0..len), or false when it is no known name. */
static bool name_bits(const char *text, size_t len, unsigned *bits) {
  for (size_t k = 0; k < sizeof pass_names / sizeof pass_names[0]; k++) {
    if (strlen(pass_names[k].name) == len && strncmp(pass_names[k].name, text, len) == 0) {
      *bits = pass_names[k].bits;
      return true;
    }
  }
  return false;
}

cn_status cn_sched_parse(cn_ctx *ctx, const char *text, cn_sched_options *out) {
  if (!text || !text[0]) {
    *out = cn_sched_default();
    return CN_OK;
  }
  unsigned passes = 0;
  for (const char *item = text;;) {
    const char *end = strchr(item, ',');
    if (!end) end = item + strlen(item);
    const char *start = item, *stop = end;
    while (start < stop && is_space(*start)) start++;
    while (stop > start && is_space(stop[-1])) stop--;
    unsigned bits;
    if (!name_bits(start, (size_t)(stop - start), &bits)) {
      char pass[64];
      snprintf(pass, sizeof pass, "%.*s", (int)(stop - start), start);
      cn_suggest s;
      cn_suggest_init(&s, pass);
      cn_suggest_consider_list(&s, option_names);
      return cn_fail(ctx, CN_ERR_INVALID, "schedule '%s': unknown pass '%.*s'%s (known: %s)", text,
                     (int)(stop - start), start, cn_suggest_text(&s), option_names);
    }
    passes |= bits;
    if (!*end) break;
    item = end + 1;
  }
  *out = cn_sched_default(); /* the cache sizes: the machine's */
  out->passes = passes;
  return CN_OK;
}

/* Each pass behind the driver's one signature (passes.def names them run_<name>). */
static cn_status run_fill(cn_ctx *ctx, cn_ll_proc *proc, const cn_sched_options *o) {
  (void)o;
  return cn_sched_fill(ctx, proc);
}

static cn_status run_virtual(cn_ctx *ctx, cn_ll_proc *proc, const cn_sched_options *o) {
  return cn_sched_virtual(ctx, proc, o->keep_fusable);
}

/* With fill forwarding on, a planned GEMM's clear is forwarded into it as well (fill.c). */
static cn_status run_gemm(cn_ctx *ctx, cn_ll_proc *proc, const cn_sched_options *o) {
  cn_status st = cn_sched_gemm_plans(ctx, proc, o);
  if (st == CN_OK && (o->passes & CN_SCHED_FILL)) st = cn_sched_fill_gemm(ctx, proc);
  return st;
}

static cn_status run_order(cn_ctx *ctx, cn_ll_proc *proc, const cn_sched_options *o) {
  return cn_sched_order(ctx, proc, o->device);
}

static cn_status run_fuse(cn_ctx *ctx, cn_ll_proc *proc, const cn_sched_options *o) {
  (void)o;
  return cn_sched_fuse(ctx, proc);
}

static cn_status run_tile(cn_ctx *ctx, cn_ll_proc *proc, const cn_sched_options *o) {
  if (o->device) return CN_OK; /* a CPU cache's blocking (sched.h) */
  int64_t l1, llc;
  cn_sched_cache_sizes(&l1, &llc);
  return cn_sched_tile(ctx, proc, o->l1_bytes > 0 ? o->l1_bytes : l1,
                       o->llc_bytes > 0 ? o->llc_bytes : llc);
}

static cn_status run_marks(cn_ctx *ctx, cn_ll_proc *proc, const cn_sched_options *o) {
  return cn_sched_marks(ctx, proc, o->parallel_work > 0 ? o->parallel_work : CN_SCHED_PARALLEL_WORK,
                        o->device);
}

static cn_status run_jam(cn_ctx *ctx, cn_ll_proc *proc, const cn_sched_options *o) {
  if (o->device) return CN_OK; /* a CPU's registers (sched.h) */
  return cn_sched_jam(ctx, proc);
}

static const struct {
  const char *name;
  unsigned bit;
  cn_status (*run)(cn_ctx *ctx, cn_ll_proc *proc, const cn_sched_options *o);
} passes[] = {
#define CN_SCHED_PASS(NAME, name) {#name, CN_SCHED_##NAME, run_##name},
#include "sched/passes.def"
#undef CN_SCHED_PASS
};

/* After each pass, a debug log line with its time, as Halide's lowering logs each of its passes:
 * `schedule cnl_3: virtual 0.120 ms`. The clock is read only when such a line is wanted. */
cn_status cn_sched_proc(cn_ctx *ctx, cn_ll_proc *proc, const cn_sched_options *opts) {
  cn_sched_options o = opts ? *opts : cn_sched_default();
  bool logged = ctx->log_fn && ctx->log_min <= CN_LOG_DEBUG;
  for (size_t k = 0; k < sizeof passes / sizeof passes[0]; k++) {
    if (!(o.passes & passes[k].bit)) continue;
    uint64_t start = logged ? cn_now_us() : 0;
    cn_status st = passes[k].run(ctx, proc, &o);
    if (st != CN_OK) return st;
    if (logged)
      cn_log(ctx, CN_LOG_DEBUG, "schedule %s: %s %.3f ms", proc->name, passes[k].name,
             (double)(cn_now_us() - start) / 1e3);
  }
  return CN_OK;
}
