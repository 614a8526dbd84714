/* The scheduling stage's driver: the options (which passes run) and their text form, and
 * cn_sched_proc, which runs the selected passes in their order — fill forwarding (fill.c), which
 * leaves a cleared gradient's first update the one statement writing it, virtual nodes (virtual.c),
 * whose inlining changes the nests the others see, GEMM plans (gemm.c) for the GEMM-class nests as
 * the lowering ordered them (their K order is each cell's order of accumulation; the later passes
 * leave planned nests alone), loop order (order.c), fusion (fuse.c) of the ordered
 * nests, tiling (tile.c), the marks (marks.c), then unroll-and-jam (jam.c), which
 * copies the marked loops with their marks.
 *
 * Contract: cn_sched_proc changes how proc runs, never its results (sched.h); with no pass
 * selected it leaves proc untouched. cn_sched_parse is the one reader of the option text, for the
 * context option "schedule" and CANNL_SCHEDULE: "all", "none", or a comma list of pass names. */
#include "sched/sched.h"

#include <stdio.h>
#include <string.h>

static const struct {
  const char *name;
  unsigned bits;
} pass_names[] = {
    {"all", CN_SCHED_ALL},     {"none", 0},
    {"fill", CN_SCHED_FILL},   {"virtual", CN_SCHED_VIRTUAL},
    {"order", CN_SCHED_ORDER}, {"fuse", CN_SCHED_FUSE},
    {"tile", CN_SCHED_TILE},   {"marks", CN_SCHED_MARKS},
    {"jam", CN_SCHED_JAM},     {"gemm", CN_SCHED_GEMM},
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
      cn_suggest_consider_list(&s, CN_SCHED_OPTION_NAMES);
      return cn_fail(ctx, CN_ERR_INVALID,
                     "schedule '%s': unknown pass '%.*s'%s (known: " CN_SCHED_OPTION_NAMES ")",
                     text, (int)(stop - start), start, cn_suggest_text(&s));
    }
    passes |= bits;
    if (!*end) break;
    item = end + 1;
  }
  *out = cn_sched_default(); /* the cache sizes: the machine's */
  out->passes = passes;
  return CN_OK;
}

cn_status cn_sched_proc(cn_ctx *ctx, cn_ll_proc *proc, const cn_sched_options *opts) {
  cn_sched_options o = opts ? *opts : cn_sched_default();
  cn_status st = CN_OK;
  if (o.passes & CN_SCHED_FILL) st = cn_sched_fill(ctx, proc);
  if (st == CN_OK && (o.passes & CN_SCHED_VIRTUAL))
    st = cn_sched_virtual(ctx, proc, o.keep_fusable);
  if (st == CN_OK && (o.passes & CN_SCHED_GEMM)) st = cn_sched_gemm_plans(ctx, proc, &o);
  if (st == CN_OK && (o.passes & CN_SCHED_GEMM) && (o.passes & CN_SCHED_FILL))
    st = cn_sched_fill_gemm(ctx, proc);
  if (st == CN_OK && (o.passes & CN_SCHED_ORDER)) st = cn_sched_order(ctx, proc);
  if (st == CN_OK && (o.passes & CN_SCHED_FUSE)) st = cn_sched_fuse(ctx, proc);
  if (st == CN_OK && (o.passes & CN_SCHED_TILE)) {
    int64_t l1, llc;
    cn_sched_cache_sizes(&l1, &llc);
    st = cn_sched_tile(ctx, proc, o.l1_bytes > 0 ? o.l1_bytes : l1,
                       o.llc_bytes > 0 ? o.llc_bytes : llc);
  }
  if (st == CN_OK && (o.passes & CN_SCHED_MARKS))
    st = cn_sched_marks(ctx, proc, o.parallel_work > 0 ? o.parallel_work : CN_SCHED_PARALLEL_WORK);
  if (st == CN_OK && (o.passes & CN_SCHED_JAM)) st = cn_sched_jam(ctx, proc);
  return st;
}
