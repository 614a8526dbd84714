/* Tiling: a nest whose working set exceeds the last-level cache runs its innermost loop in tiles.
 *
 * Contract: in a separable perfect nest (cn_sched_separable) whose innermost loop v is an output
 * loop of constant range (no affine bounds, read by no other loop's bounds), when the cells the
 * loops inside the outermost one touch — per access (identical accesses counted once), its cell
 * size times the extents of the loops it mentions — exceed the last-level cache (LLC), v splits
 * into a tile loop v_tile, placed outermost, and v over [T*v_tile + from, min(to, T*v_tile + T +
 * from)) where it was. T is the largest multiple of 16 (whole vectors) such that those cells, with
 * v's extent replaced by T, fill at most half of the LLC, and the accesses v walks fill at most
 * half of L1 over one tile; a nest for which T would be below 16 or cover v's whole range is left
 * alone. For c[i,k] += a[i,j]*b[j,k] ordered i, j, k this is k_tile, i, j, k: the tile of b stays
 * in the cache while i sweeps it. The LLC, not L2: measured on the matmul ordered i, j, k (1024
 * and 2048, Zen 5), rows of b streamed from L3 by the hardware prefetcher run faster than tiles
 * held in L2, whose short inner loops (112 values) cost more than the misses they save; tiling
 * pays once the operand must come from memory. Legality: v_tile is a function of v, an output
 * loop, so two points writing one cell share v_tile; such points keep their relative order (the
 * reduction loops are not moved), so every cell's accumulation runs in the same order. */
#include "sched/sched.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TILE_QUANTUM 16

/* ---- Cache sizes (sysfs, read once) ---- */

static int64_t cache_l1 = 48 << 10, cache_llc = 1 << 20;
static int cache_llc_level = 0; /* the level cache_llc was read from */
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;

/* The first line of a sysfs file of cpu0's cache index k, or false. */
static bool read_cache_file(int k, const char *what, char *buf, size_t size) {
  char path[96];
  snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/%s", k, what);
  FILE *f = fopen(path, "r");
  if (!f) return false;
  bool ok = fgets(buf, (int)size, f) != NULL;
  fclose(f);
  return ok;
}

/* A number as sysfs writes it: decimal digits of at most max, then, for a size, an optional K or
 * M ("48K", "2048K", "1M"), then the line's end; its value (K and M scaled), or 0 for anything
 * else (cn_parse_natural: no atoi or strtoll saturating, wrapping or stopping at garbage). */
static int64_t parse_sysfs(const char *text, uint64_t max, bool size) {
  size_t digits = strspn(text, "0123456789");
  const char *suffix = text + digits;
  int shift = !size ? 0 : *suffix == 'K' ? 10 : *suffix == 'M' ? 20 : 0;
  const char *end = suffix + (shift > 0);
  uint64_t n;
  if ((*end != '\0' && strcmp(end, "\n") != 0) || !cn_parse_natural(text, digits, max, &n))
    return 0;
  return (int64_t)(n << shift);
}

static void read_cache_sizes(void) {
  for (int k = 0; k < 16; k++) {
    char level_text[16], type[32], size[32];
    if (!read_cache_file(k, "level", level_text, sizeof level_text) ||
        !read_cache_file(k, "type", type, sizeof type) ||
        !read_cache_file(k, "size", size, sizeof size))
      continue;
    int64_t bytes = parse_sysfs(size, (uint64_t)1 << 40, true),
            level = parse_sysfs(level_text, 16, false);
    if (bytes == 0 || level == 0 || strncmp(type, "Instruction", 11) == 0) continue;
    if (level == 1) cache_l1 = bytes;
    if (level >= 2 && level > cache_llc_level) {
      cache_llc = bytes;
      cache_llc_level = (int)level;
    }
  }
}

void cn_sched_cache_sizes(int64_t *l1_bytes, int64_t *llc_bytes) {
  pthread_once(&cache_once, read_cache_sizes);
  *l1_bytes = cache_l1;
  *llc_bytes = cache_llc;
}

/* ---- Working sets ---- */

static int64_t extent(const cn_ll_stmt *loop) {
  return loop->u.loop.to > loop->u.loop.from ? loop->u.loop.to - loop->u.loop.from : 0;
}

static bool same_access(const cn_ll_proc *proc, const cn_sched_access *a,
                        const cn_sched_access *b) {
  if (a->param != b->param) return false;
  for (int d = 0; d < proc->params[a->param].node->rank; d++)
    if (!cn_index_equal(&a->idx[d], &b->idx[d])) return false;
  return true;
}

/* The bytes the loops below the outermost touch, as fixed + per_t * T for a tile of T values of
 * the innermost loop; row: the bytes one value of the innermost loop touches through the
 * accesses that mention it. */
typedef struct {
  double fixed, per_t, row;
} working_set;

static working_set working_set_of(const cn_ll_proc *proc, const cn_sched_nest *nest) {
  working_set ws = {0, 0, 0};
  cn_symbol v = nest->loops[nest->depth - 1]->u.loop.sym;
  for (int a = 0; a < nest->n_access; a++) {
    const cn_sched_access *acc = &nest->access[a];
    bool repeated = false;
    for (int b = 0; b < a && !repeated; b++) repeated = same_access(proc, acc, &nest->access[b]);
    if (repeated) continue;
    const cn_node *node = proc->params[acc->param].node;
    double cells = (double)cn_prec_bytes(node->prec);
    for (int q = 1; q < nest->depth - 1; q++)
      if (cn_sched_stride(proc, acc, nest->loops[q]->u.loop.sym) != 0)
        cells *= (double)extent(nest->loops[q]);
    if (cn_sched_stride(proc, acc, v) != 0) {
      ws.per_t += cells;
      ws.row += (double)cn_prec_bytes(node->prec);
    } else {
      ws.fixed += cells;
    }
  }
  return ws;
}

/* The tile size for the nest, or 0 when it is not to be tiled. */
static int64_t tile_size(const cn_ll_proc *proc, const cn_sched_nest *nest, int64_t l1,
                         int64_t llc) {
  const cn_ll_stmt *inner = nest->loops[nest->depth - 1];
  cn_symbol v = inner->u.loop.sym;
  const cn_sched_access *w = &nest->access[0];
  if (nest->depth < 2 || !cn_sched_separable(proc, nest) ||
      cn_sched_is_reduction(w, proc->params[w->param].node->rank, v) || inner->u.loop.n_lower ||
      inner->u.loop.n_upper)
    return 0;
  for (int k = 0; k < nest->depth - 1; k++)
    if (cn_sched_bounds_mention(nest->loops[k], v)) return 0;
  working_set ws = working_set_of(proc, nest);
  int64_t e = extent(inner);
  if (ws.per_t <= 0 || ws.fixed + ws.per_t * (double)e <= (double)llc) return 0;
  double t = ((double)llc / 2 - ws.fixed) / ws.per_t;
  double t_l1 = (double)l1 / 2 / ws.row;
  if (t_l1 < t) t = t_l1;
  if (t < TILE_QUANTUM || t >= (double)e) return 0;
  return (int64_t)t / TILE_QUANTUM * TILE_QUANTUM;
}

/* ---- The split ---- */

/* The innermost loop over one tile: [T*vt + from, min(to, T*vt + T + from)), the box's edge kept
 * among the upper bounds unless the tiles divide the range. */
static cn_ll_stmt *tiled_loop(cn_ctx *ctx, const cn_ll_stmt *old, cn_symbol vt, int64_t t) {
  int64_t from = old->u.loop.from, to = old->u.loop.to;
  cn_ll_bound lower = {cn_index_affine(1, &vt, &t, from), 1};
  cn_ll_bound upper[2] = {{cn_index_fixed(to), 1}, {cn_index_affine(1, &vt, &t, from + t), 1}};
  bool exact = (to - from) % t == 0;
  cn_ll_stmt *loop = cn_lb_loop(ctx, old->u.loop.sym, from, to, old->u.loop.body);
  return cn_lb_bounds(ctx, loop, 1, &lower, exact ? 1 : 2, exact ? upper + 1 : upper);
}

/* The cache sizes the pass aims at. */
typedef struct {
  int64_t l1, llc;
} cache_sizes;

static cn_status tile_nest(cn_ctx *ctx, const cn_ll_proc *proc, cn_sched_nest *nest, void *user) {
  const cache_sizes *cache = user;
  if (nest->lanes) return CN_OK; /* a sum in lanes keeps its loop whole (loops.h) */
  int64_t t = tile_size(proc, nest, cache->l1, cache->llc);
  if (t == 0) return CN_OK;
  const cn_ll_stmt *inner = nest->loops[nest->depth - 1];
  char name[64];
  snprintf(name, sizeof name, "%s_tile", cn_symbol_name(ctx, inner->u.loop.sym));
  cn_symbol vt = cn_symbol_create(ctx, name, 0);
  if (vt < 0) return CN_ERR_NOMEM;
  cn_ll_stmt *body = tiled_loop(ctx, inner, vt, t);
  for (int k = nest->depth - 2; k >= 0; k--) body = cn_sched_loop_copy(ctx, nest->loops[k], body);
  body = cn_lb_loop(ctx, vt, 0, (extent(inner) + t - 1) / t, body);
  if (!body) return CN_ERR_NOMEM;
  *nest->slots[0] = body;
  return CN_OK;
}

cn_status cn_sched_tile(cn_ctx *ctx, cn_ll_proc *proc, int64_t l1_bytes, int64_t llc_bytes) {
  cache_sizes cache = {l1_bytes, llc_bytes};
  return cn_sched_each_nest(ctx, proc, tile_nest, &cache);
}
