/* Index maps and projections records: the canonical constructors of cn_index, the validated
 * construction of cn_proj (with tile-edsl's ranged iterators, constraints and valid-only flag), the
 * range of an index over a product space, the surjectivity and injectivity analyses of the LHS map
 * (contraction-is-emergent "What we compile to") and the readable dumps.
 *
 * Invariants: every index returned by a constructor is canonical (convolution-is-a-contraction:
 * Fixed for no term, Iter for one unit term without offset, otherwise Affine
 * with 1..CN_MAX_AFFINE_TERMS terms, nonzero coefficients, distinct symbols ordered by id), or
 * invalid (Affine with n_terms = -1); a cn_proj holds arena copies of its arrays, only canonical
 * indices, only symbols of its context, pairwise distinct iterators whose ranges fit in int64, and
 * constraints whose symbols all have values (iterators, or static indices with a range). The
 * analyses are conservative: they may answer false for a map that has the property, never true for
 * one that lacks it. */
#include "ir/ir.h"

#include <stdlib.h>
#include <string.h>

#define CN_STR_(x) #x
#define CN_STR(x)  CN_STR_(x)

/* ---- Checked arithmetic (overflow makes an index invalid or an analysis answer false) ---- */

static bool add_i64(int64_t a, int64_t b, int64_t *out) {
  return !__builtin_add_overflow(a, b, out);
}
static bool mul_i64(int64_t a, int64_t b, int64_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}
static bool abs_i64(int64_t a, int64_t *out) {
  if (a == INT64_MIN) return false;
  *out = a < 0 ? -a : a;
  return true;
}

/* ---- Canonical constructors ---- */

static cn_index invalid_index(void) {
  cn_index idx;
  memset(&idx, 0, sizeof idx);
  idx.kind = CN_IDX_AFFINE;
  idx.n_terms = -1;
  return idx;
}

cn_index cn_index_fixed(int64_t position) {
  cn_index idx;
  memset(&idx, 0, sizeof idx);
  idx.kind = CN_IDX_FIXED;
  idx.offset = position;
  return idx;
}

cn_index cn_index_iter(cn_symbol sym) {
  cn_index idx;
  memset(&idx, 0, sizeof idx);
  idx.kind = CN_IDX_ITER;
  idx.n_terms = 1;
  idx.syms[0] = sym;
  idx.coeffs[0] = 1;
  return idx;
}

/* Quadratic in n_terms, without allocation: each symbol's total is summed at its first
 * occurrence, so a symbol whose coefficients cancel never takes a slot, and only the surviving
 * distinct symbols count against CN_MAX_AFFINE_TERMS. A partial sum that overflows makes the
 * index invalid. Terms are kept ordered by symbol id, so equal affine forms compare equal. */
cn_index cn_index_affine(int n_terms, const cn_symbol *syms, const int64_t *coeffs,
                         int64_t offset) {
  if (n_terms < 0 || (n_terms > 0 && (!syms || !coeffs))) return invalid_index();
  cn_index idx;
  memset(&idx, 0, sizeof idx);
  idx.offset = offset;
  for (int t = 0; t < n_terms; t++) {
    bool seen = false;
    for (int e = 0; e < t && !seen; e++) seen = syms[e] == syms[t];
    if (seen) continue;
    int64_t total = 0;
    for (int e = t; e < n_terms; e++)
      if (syms[e] == syms[t] && !add_i64(total, coeffs[e], &total)) return invalid_index();
    if (total == 0) continue;
    if (idx.n_terms == CN_MAX_AFFINE_TERMS) return invalid_index();
    int pos = idx.n_terms;
    while (pos > 0 && idx.syms[pos - 1] > syms[t]) {
      idx.syms[pos] = idx.syms[pos - 1];
      idx.coeffs[pos] = idx.coeffs[pos - 1];
      pos--;
    }
    idx.syms[pos] = syms[t];
    idx.coeffs[pos] = total;
    idx.n_terms++;
  }
  if (idx.n_terms == 0) return cn_index_fixed(offset);
  if (idx.n_terms == 1 && idx.coeffs[0] == 1 && offset == 0) return cn_index_iter(idx.syms[0]);
  idx.kind = CN_IDX_AFFINE;
  return idx;
}

bool cn_index_mentions(const cn_index *idx, cn_symbol sym) {
  for (int t = 0; t < idx->n_terms; t++)
    if (idx->syms[t] == sym) return true;
  return false;
}

int64_t cn_index_coeff(const cn_index *idx, cn_symbol sym) {
  if (idx->kind == CN_IDX_FIXED) return 0;
  for (int t = 0; t < idx->n_terms; t++)
    if (idx->syms[t] == sym) return idx->coeffs[t];
  return 0;
}

/* ---- Printing ---- */

/* True if another symbol of the record (an iterator or a symbol of a map) has sym's name: the
 * dump then appends #id so that the two stay distinguishable. */
static bool name_is_shared(const cn_ctx *ctx, const cn_proj *proj, cn_symbol sym) {
  if (!proj) return false;
  const char *name = cn_symbol_name(ctx, sym);
  for (int p = 0; p < proj->n_product; p++)
    if (proj->iters[p] != sym && strcmp(cn_symbol_name(ctx, proj->iters[p]), name) == 0)
      return true;
  for (int s = 0; s <= proj->n_rhs; s++)
    for (int a = 0; a < proj->slot[s].rank; a++) {
      const cn_index *idx = &proj->slot[s].map[a];
      for (int t = 0; t < idx->n_terms; t++)
        if (idx->syms[t] != sym && strcmp(cn_symbol_name(ctx, idx->syms[t]), name) == 0)
          return true;
    }
  for (int k = 0; k < proj->n_constraints; k++) {
    const cn_index *idx = &proj->constraints[k].expr;
    for (int t = 0; t < idx->n_terms; t++)
      if (idx->syms[t] != sym && strcmp(cn_symbol_name(ctx, idx->syms[t]), name) == 0) return true;
  }
  return false;
}

static void print_symbol(cn_sbuf *sb, const cn_ctx *ctx, const cn_proj *proj, cn_symbol sym) {
  cn_sbuf_puts(sb, cn_symbol_name(ctx, sym));
  if (name_is_shared(ctx, proj, sym)) cn_sbuf_printf(sb, "#%d", sym);
}

/* `i`, `3`, `2*o + k - 1`, `-i + 4`; proj (or NULL) disambiguates shared names. */
static void print_index(cn_sbuf *sb, const cn_ctx *ctx, const cn_proj *proj, const cn_index *idx) {
  if (idx->n_terms < 0) {
    cn_sbuf_puts(sb, "<invalid index>");
    return;
  }
  if (idx->n_terms == 0) {
    cn_sbuf_printf(sb, "%lld", (long long)idx->offset);
    return;
  }
  for (int t = 0; t < idx->n_terms; t++) {
    int64_t c = idx->coeffs[t];
    if (t == 0)
      cn_sbuf_puts(sb, c < 0 ? "-" : "");
    else
      cn_sbuf_puts(sb, c < 0 ? " - " : " + ");
    if (cn_i64_magnitude(c) != 1)
      cn_sbuf_printf(sb, "%llu*", (unsigned long long)cn_i64_magnitude(c));
    print_symbol(sb, ctx, proj, idx->syms[t]);
  }
  if (idx->offset != 0)
    cn_sbuf_printf(sb, " %c %llu", idx->offset < 0 ? '-' : '+',
                   (unsigned long long)cn_i64_magnitude(idx->offset));
}

void cn_index_print(cn_sbuf *sb, const cn_ctx *ctx, const cn_index *idx) {
  print_index(sb, ctx, NULL, idx);
}

/* ---- Ranges of indices over a record's box ---- */

static int iter_position(const cn_proj *proj, cn_symbol sym) {
  for (int p = 0; p < proj->n_product; p++)
    if (proj->iters[p] == sym) return p;
  return -1;
}

int64_t cn_proj_iter_size(const cn_proj *proj, cn_symbol sym) {
  int p = iter_position(proj, sym);
  return p < 0 ? 0 : proj->sizes[p];
}

static bool product_is_empty(const cn_proj *proj) {
  for (int p = 0; p < proj->n_product; p++)
    if (proj->sizes[p] == 0) return true;
  return false;
}

/* Each term c*s ranges between c*first and c*last (an iterator's first and last values, or 0
 * and range - 1 for a free symbol); the sum of the per-term ranges is exact for an affine form of
 * distinct symbols, since the symbols vary independently. Over an empty product space no index
 * is ever evaluated: the range is empty (lo > hi), which validation accepts. */
bool cn_index_bounds(const cn_ctx *ctx, const cn_index *idx, const cn_proj *proj, int64_t *lo,
                     int64_t *hi) {
  if (idx->n_terms < 0) return false;
  int64_t low = idx->offset, high = idx->offset;
  for (int t = 0; t < idx->n_terms; t++) {
    int p = iter_position(proj, idx->syms[t]);
    int64_t first = 0, extent;
    if (p >= 0) {
      first = proj->lo[p];
      extent = proj->sizes[p];
    } else {
      const cn_symbol_info *info = cn_ctx_symbol(ctx, idx->syms[t]);
      if (!info || info->range <= 0) return false;
      extent = info->range;
    }
    if (extent == 0) continue; /* an empty product space: handled below */
    int64_t at_first, at_last; /* first + extent - 1 is the range's end minus 1: no overflow */
    if (!mul_i64(idx->coeffs[t], first, &at_first) ||
        !mul_i64(idx->coeffs[t], first + (extent - 1), &at_last))
      return false;
    bool rising = at_first <= at_last;
    if (!add_i64(low, rising ? at_first : at_last, &low) ||
        !add_i64(high, rising ? at_last : at_first, &high))
      return false;
  }
  if (product_is_empty(proj)) {
    *lo = 0;
    *hi = -1;
    return true;
  }
  *lo = low;
  *hi = high;
  return true;
}

/* ---- Projections records ---- */

static const char *slot_name(int slot) {
  static const char *const names[CN_MAX_SLOTS] = {"lhs", "rhs1", "rhs2", "rhs3"};
  return names[slot];
}

/* Checks one index as given by the caller (it may have been written as a struct literal) and
 * stores its canonical form; `what` names it in messages ("the index of axis 1 of rhs2"). */
static bool copy_index(cn_ctx *ctx, const cn_index *given, const char *what, cn_index *out) {
  const char *malformed = NULL;
  if (given->n_terms == -1)
    malformed = "is invalid (more than " CN_STR(CN_MAX_AFFINE_TERMS) " distinct symbols, or a "
                                                                     "coefficient overflowed)";
  else if (given->n_terms < -1 || given->n_terms > CN_MAX_AFFINE_TERMS)
    malformed = "has a term count outside 0.." CN_STR(CN_MAX_AFFINE_TERMS);
  else if (given->kind == CN_IDX_FIXED && given->n_terms != 0)
    malformed = "is Fixed but has terms";
  else if (given->kind == CN_IDX_ITER &&
           (given->n_terms != 1 || given->coeffs[0] != 1 || given->offset != 0))
    malformed = "is Iter but not a single unit term without offset";
  else if (given->kind == CN_IDX_AFFINE && given->n_terms == 0)
    malformed = "is Affine without terms";
  else if (given->kind != CN_IDX_FIXED && given->kind != CN_IDX_ITER &&
           given->kind != CN_IDX_AFFINE)
    malformed = "has an unknown kind";
  if (malformed) {
    cn_fail(ctx, CN_ERR_INVALID, "projections: %s %s", what, malformed);
    return false;
  }
  for (int t = 0; t < given->n_terms; t++)
    if (!cn_ctx_symbol(ctx, given->syms[t])) {
      cn_fail(ctx, CN_ERR_INVALID,
              "projections: %s mentions symbol %d, which does not exist in this context", what,
              given->syms[t]);
      return false;
    }
  *out = cn_index_affine(given->n_terms, given->syms, given->coeffs, given->offset);
  if (out->n_terms < 0) {
    cn_fail(ctx, CN_ERR_INVALID, "projections: the coefficients of %s overflow when summed", what);
    return false;
  }
  return true;
}

static bool copy_tensor(cn_ctx *ctx, const cn_proj_tensor *given, int slot, cn_proj_slot *out) {
  const char *name = slot_name(slot);
  if (given->rank < 0 || given->rank > CN_MAX_RANK) {
    cn_fail(ctx, CN_ERR_INVALID, "projections: %s has rank %d, outside 0..%d", name, given->rank,
            CN_MAX_RANK);
    return false;
  }
  if (given->rank > 0 && (!given->dims || !given->map)) {
    cn_fail(ctx, CN_ERR_INVALID, "projections: %s has rank %d but its %s array is NULL", name,
            given->rank, given->dims ? "map" : "dims");
    return false;
  }
  int rank = given->rank;
  out->rank = rank;
  /* Arrays of at least one element, so that a rank-0 slot still has non-NULL pointers. */
  out->dims = cn_alloc(ctx, (size_t)(rank ? rank : 1) * sizeof(int64_t));
  out->map = cn_alloc(ctx, (size_t)(rank ? rank : 1) * sizeof(cn_index));
  if (!out->dims || !out->map) return false;
  for (int a = 0; a < rank; a++) {
    if (given->dims[a] < 0) {
      cn_fail(ctx, CN_ERR_INVALID, "projections: dim %lld of axis %d of %s is negative",
              (long long)given->dims[a], a, name);
      return false;
    }
    out->dims[a] = given->dims[a];
    char what[64];
    snprintf(what, sizeof what, "the index of axis %d of %s", a, name);
    if (!copy_index(ctx, &given->map[a], what, &out->map[a])) return false;
  }
  return true;
}

/* What a record holds besides the product box and the slots (the tile-edsl extension). */
typedef struct {
  int n_constraints;
  const cn_proj_constraint *constraints;
  bool valid_only, zero_unreached;
  int n_gathered;
  const cn_proj_gathered *gathered; /* arena arrays of a record, shared by its derived records */
} proj_extra;

/* A constraint's symbols must have values wherever it is evaluated: product iterators, or
 * static indices with a range (the same rule as for maps, checked through cn_index_bounds). */
static bool check_constraint(cn_ctx *ctx, const cn_proj *proj, int k) {
  const cn_index *expr = &proj->constraints[k].expr;
  int64_t lo, hi;
  if (cn_index_bounds(ctx, expr, proj, &lo, &hi)) return true;
  for (int t = 0; t < expr->n_terms; t++) {
    const cn_symbol_info *info = cn_ctx_symbol(ctx, expr->syms[t]);
    if (iter_position(proj, expr->syms[t]) < 0 && (!info || info->range <= 0)) {
      cn_fail(ctx, CN_ERR_INVALID,
              "projections: constraint %d uses '%s', which is not a product iterator and has no "
              "range",
              k, cn_symbol_name(ctx, expr->syms[t]));
      return false;
    }
  }
  cn_fail(ctx, CN_ERR_INVALID, "projections: constraint %d overflows 64-bit integers", k);
  return false;
}

/* The common construction: lo NULL means every iterator starts at 0. */
static cn_proj *proj_build(cn_ctx *ctx, int n_product, const cn_symbol *iterators,
                           const int64_t *lo, const int64_t *sizes, cn_proj_tensor lhs, int n_rhs,
                           const cn_proj_tensor *rhs, const proj_extra *extra) {
  if (n_product < 0) {
    cn_fail(ctx, CN_ERR_INVALID, "projections: %d product iterators (negative)", n_product);
    return NULL;
  }
  if (n_rhs < 0 || n_rhs > CN_MAX_SLOTS - 1) {
    cn_fail(ctx, CN_ERR_INVALID, "projections: %d RHS tensors, expected 0..%d", n_rhs,
            CN_MAX_SLOTS - 1);
    return NULL;
  }
  if (n_product > 0 && (!iterators || !sizes)) {
    cn_fail(ctx, CN_ERR_INVALID, "projections: %d product iterators but the %s array is NULL",
            n_product, iterators ? "sizes" : "iterators");
    return NULL;
  }
  if (n_rhs > 0 && !rhs) {
    cn_fail(ctx, CN_ERR_INVALID, "projections: %d RHS tensors but the rhs array is NULL", n_rhs);
    return NULL;
  }
  if (extra->n_constraints < 0 || (extra->n_constraints > 0 && !extra->constraints)) {
    cn_fail(ctx, CN_ERR_INVALID, "projections: %d constraints%s", extra->n_constraints,
            extra->n_constraints < 0 ? " (negative)" : " but the constraints array is NULL");
    return NULL;
  }
  for (int p = 0; p < n_product; p++) {
    if (!cn_ctx_symbol(ctx, iterators[p])) {
      cn_fail(ctx, CN_ERR_INVALID,
              "projections: product iterator %d is symbol %d, which does not exist in this context",
              p, iterators[p]);
      return NULL;
    }
    for (int q = 0; q < p; q++)
      if (iterators[q] == iterators[p]) {
        cn_fail(ctx, CN_ERR_INVALID,
                "projections: iterator '%s' appears twice in the product space (positions %d and "
                "%d)",
                cn_symbol_name(ctx, iterators[p]), q, p);
        return NULL;
      }
    if (sizes[p] < 0) {
      cn_fail(ctx, CN_ERR_INVALID, "projections: iterator '%s' has negative size %lld",
              cn_symbol_name(ctx, iterators[p]), (long long)sizes[p]);
      return NULL;
    }
  }
  cn_proj *proj = cn_alloc(ctx, sizeof *proj);
  if (!proj) return NULL;
  size_t n = (size_t)(n_product ? n_product : 1);
  proj->iters = cn_alloc(ctx, n * sizeof(cn_symbol));
  proj->lo = cn_alloc(ctx, n * sizeof(int64_t)); /* zero-filled: the default start */
  proj->sizes = cn_alloc(ctx, n * sizeof(int64_t));
  size_t n_cons = (size_t)(extra->n_constraints ? extra->n_constraints : 1);
  proj->constraints = cn_alloc(ctx, n_cons * sizeof(cn_proj_constraint));
  if (!proj->iters || !proj->lo || !proj->sizes || !proj->constraints) return NULL;
  proj->n_product = n_product;
  if (n_product > 0) {
    memcpy(proj->iters, iterators, (size_t)n_product * sizeof(cn_symbol));
    if (lo) memcpy(proj->lo, lo, (size_t)n_product * sizeof(int64_t));
    memcpy(proj->sizes, sizes, (size_t)n_product * sizeof(int64_t));
  }
  proj->n_rhs = n_rhs;
  if (!copy_tensor(ctx, &lhs, CN_SLOT_LHS, &proj->slot[CN_SLOT_LHS])) return NULL;
  for (int r = 0; r < n_rhs; r++)
    if (!copy_tensor(ctx, &rhs[r], r + 1, &proj->slot[r + 1])) return NULL;
  proj->valid_only = extra->valid_only;
  proj->zero_unreached = extra->zero_unreached;
  for (int k = 0; k < extra->n_constraints; k++) {
    char what[48];
    snprintf(what, sizeof what, "constraint %d", k);
    if (!copy_index(ctx, &extra->constraints[k].expr, what, &proj->constraints[k].expr))
      return NULL;
    proj->constraints[k].bound = extra->constraints[k].bound;
    proj->n_constraints = k + 1;
    if (!check_constraint(ctx, proj, k)) return NULL;
  }
  /* Gathered symbols come from cn_proj_gather, which checked them; a derived record shares them
   * (its iterators are the original's, so their source maps stay valid). */
  proj->n_gathered = extra->n_gathered;
  proj->gathered = (cn_proj_gathered *)extra->gathered;
  return proj;
}

cn_proj *cn_proj_create(cn_ctx *ctx, int n_product, const cn_symbol *iterators,
                        const int64_t *sizes, cn_proj_tensor lhs, int n_rhs,
                        const cn_proj_tensor *rhs) {
  if (!ctx) return NULL;
  proj_extra none = {0};
  return proj_build(ctx, n_product, iterators, NULL, sizes, lhs, n_rhs, rhs, &none);
}

cn_proj *cn_proj_create_ranged(cn_ctx *ctx, const cn_proj_space *space, cn_proj_tensor lhs,
                               int n_rhs, const cn_proj_tensor *rhs) {
  if (!ctx) return NULL;
  if (!space) {
    cn_fail(ctx, CN_ERR_INVALID, "projections: the product space description is NULL");
    return NULL;
  }
  int n = space->n_product;
  if (n > 0 && (!space->iterators || !space->hi)) {
    cn_fail(ctx, CN_ERR_INVALID, "projections: %d product iterators but the %s array is NULL", n,
            space->iterators ? "hi" : "iterators");
    return NULL;
  }
  int64_t *sizes = n > 0 ? cn_alloc(ctx, (size_t)n * sizeof *sizes) : NULL;
  if (n > 0 && !sizes) return NULL;
  for (int p = 0; p < n; p++) {
    int64_t lo = space->lo ? space->lo[p] : 0;
    bool fits = space->hi[p] >= lo && !__builtin_sub_overflow(space->hi[p], lo, &sizes[p]);
    if (fits) continue;
    const cn_symbol_info *info = cn_ctx_symbol(ctx, space->iterators[p]);
    cn_fail(ctx, CN_ERR_INVALID, "projections: iterator '%s' has range [%lld, %lld), %s",
            info ? info->name : "?", (long long)lo, (long long)space->hi[p],
            space->hi[p] < lo ? "which ends before it starts" : "too wide for 64-bit integers");
    return NULL;
  }
  proj_extra extra = {
      space->n_constraints, space->constraints, space->valid_only, space->zero_unreached, 0, NULL};
  return proj_build(ctx, n, space->iterators, space->lo, sizes, lhs, n_rhs, rhs, &extra);
}

const cn_proj_gathered *cn_proj_gathered_of(const cn_proj *proj, cn_symbol sym) {
  for (int k = 0; k < proj->n_gathered; k++)
    if (proj->gathered[k].sym == sym) return &proj->gathered[k];
  return NULL;
}

/* Whether an index of proj other than slot `slot`'s axis `axis` and slot `from`'s axis
 * `from_axis` mentions iterator sym (the class iterator must drive those two only). */
static bool mentioned_elsewhere(const cn_proj *proj, int slot, int axis, int from, int from_axis,
                                cn_symbol sym) {
  for (int s = 0; s <= proj->n_rhs; s++)
    for (int a = 0; a < proj->slot[s].rank; a++)
      if (!(s == slot && a == axis) && !(s == from && a == from_axis) &&
          cn_index_mentions(&proj->slot[s].map[a], sym))
        return true;
  for (int k = 0; k < proj->n_gathered; k++)
    for (int a = 0; a < proj->gathered[k].source->rank; a++)
      if (cn_index_mentions(&proj->gathered[k].map[a], sym)) return true;
  return false;
}

const char *cn_proj_gather_refusal(const cn_proj *proj, int slot, int axis, int from, int from_axis,
                                   const cn_node *source) {
  if (slot < 0 || slot > proj->n_rhs || from < 1 || from > proj->n_rhs || from == slot ||
      axis < 0 || axis >= proj->slot[slot].rank || from_axis < -1 ||
      from_axis >= proj->slot[from].rank)
    return "no such slots and axes";
  if (cn_proj_has_conditions(proj)) return "the record has constraints or valid_only";
  if (proj->n_gathered >= CN_PROJ_MAX_GATHERED) return "the record has enough gathered symbols";
  const cn_index *at = &proj->slot[slot].map[axis];
  int p = at->kind == CN_IDX_ITER ? iter_position(proj, at->syms[0]) : -1;
  const cn_index *hot = from_axis >= 0 ? &proj->slot[from].map[from_axis] : NULL;
  if (p < 0 || proj->lo[p] != 0 || (hot && !cn_index_equal(hot, at)) ||
      mentioned_elsewhere(proj, slot, axis, from, from_axis, at->syms[0]))
    return "the axis is not driven by a class loop of its own";
  const cn_proj_slot *ids = &proj->slot[from];
  int rank = 0;
  bool same = true;
  for (int a = 0; a < ids->rank; a++)
    if (a != from_axis) {
      same = same && rank < source->rank && source->dims[rank] == ids->dims[a];
      rank++;
    }
  cn_prec_kind kind = cn_prec_kind_of(source->prec);
  if (!same || rank != source->rank) return "the index tensor's dims differ";
  if (kind == CN_PKIND_BITS) return "the index tensor holds words, not numbers";
  return NULL;
}

cn_proj *cn_proj_gather(cn_ctx *ctx, const cn_proj *proj, int slot, int axis, int from,
                        int from_axis, cn_node *source) {
  const char *why = cn_proj_gather_refusal(proj, slot, axis, from, from_axis, source);
  if (why) {
    cn_fail(ctx, CN_ERR_INVALID, "gather of axis %d of %s through %s from %s: %s", axis,
            slot_name(slot), slot_name(from), cn_node_describe(source), why);
    return NULL;
  }
  const cn_index *at = &proj->slot[slot].map[axis];
  int p = iter_position(proj, at->syms[0]);
  /* the index tensor's axes: slot from's without the class axis */
  const cn_proj_slot *ids = &proj->slot[from];
  cn_index *map = cn_alloc(ctx, (size_t)(ids->rank ? ids->rank : 1) * sizeof *map);
  if (!map) return NULL;
  for (int a = 0, k = 0; a < ids->rank; a++)
    if (a != from_axis) map[k++] = ids->map[a];
  int64_t bound = proj->sizes[p];
  cn_symbol sym = cn_symbol_create(ctx, cn_symbol_name(ctx, at->syms[0]), bound > 0 ? bound : 1);
  int n = proj->n_product - 1, n_gathered = proj->n_gathered + 1;
  cn_symbol *iters = cn_alloc(ctx, (size_t)(n > 0 ? n : 1) * sizeof *iters);
  int64_t *lo = cn_alloc(ctx, (size_t)(n > 0 ? n : 1) * sizeof *lo);
  int64_t *sizes = cn_alloc(ctx, (size_t)(n > 0 ? n : 1) * sizeof *sizes);
  cn_proj_gathered *gathered = cn_alloc(ctx, (size_t)n_gathered * sizeof *gathered);
  cn_index *slot_map = cn_alloc(ctx, (size_t)proj->slot[slot].rank * sizeof *slot_map);
  if (sym < 0 || !iters || !lo || !sizes || !gathered || !slot_map) return NULL;
  for (int q = 0, k = 0; q < proj->n_product; q++)
    if (q != p) {
      iters[k] = proj->iters[q];
      lo[k] = proj->lo[q];
      sizes[k++] = proj->sizes[q];
    }
  if (proj->n_gathered)
    memcpy(gathered, proj->gathered, (size_t)proj->n_gathered * sizeof *gathered);
  gathered[proj->n_gathered] = (cn_proj_gathered){sym, bound, source, map};
  memcpy(slot_map, proj->slot[slot].map, (size_t)proj->slot[slot].rank * sizeof *slot_map);
  slot_map[axis] = cn_index_iter(sym);
  cn_proj_tensor t[CN_MAX_SLOTS];
  int count = 0;
  for (int s = 0; s <= proj->n_rhs; s++)
    if (s != from)
      t[count++] = (cn_proj_tensor){proj->slot[s].rank, proj->slot[s].dims,
                                    s == slot ? slot_map : proj->slot[s].map};
  proj_extra extra = {0, NULL, false, proj->zero_unreached, n_gathered, gathered};
  return proj_build(ctx, n, iters, lo, sizes, t[0], count - 1, t + 1, &extra);
}

bool cn_proj_has_conditions(const cn_proj *proj) {
  return proj->n_constraints > 0 || proj->valid_only;
}

/* Under valid_only the visited points must stay the same: the bounds of a slot of proj that no
 * tensor of the new record reads through become constraints (a bound 0 <= index < dim is a
 * constraint's form); the kept slots' bounds are still checked by valid_only itself. */
cn_proj *cn_proj_over(cn_ctx *ctx, const cn_proj *proj, cn_proj_tensor lhs, int n_rhs,
                      const cn_proj_tensor *rhs, const int *from, bool zero_unreached) {
  bool kept[CN_MAX_SLOTS] = {false};
  for (int i = 0; i <= n_rhs && i < CN_MAX_SLOTS; i++) {
    CN_ASSERT(from[i] <= proj->n_rhs);
    if (from[i] >= 0) kept[from[i]] = true;
  }
  int n_cons = proj->n_constraints;
  for (int s = 0; s <= proj->n_rhs; s++)
    if (proj->valid_only && !kept[s]) n_cons += proj->slot[s].rank;
  cn_proj_constraint *cons = cn_alloc(ctx, (size_t)(n_cons ? n_cons : 1) * sizeof *cons);
  if (!cons) return NULL;
  if (proj->n_constraints > 0)
    memcpy(cons, proj->constraints, (size_t)proj->n_constraints * sizeof *cons);
  n_cons = proj->n_constraints;
  for (int s = 0; s <= proj->n_rhs; s++)
    for (int a = 0; proj->valid_only && !kept[s] && a < proj->slot[s].rank; a++)
      cons[n_cons++] = (cn_proj_constraint){proj->slot[s].map[a], proj->slot[s].dims[a]};
  proj_extra extra = {n_cons,           cons,          proj->valid_only, zero_unreached,
                      proj->n_gathered, proj->gathered};
  return proj_build(ctx, proj->n_product, proj->iters, proj->lo, proj->sizes, lhs, n_rhs, rhs,
                    &extra);
}

/* The slots are re-addressed, never re-derived: every map is the original's, so a gradient
 * assignment reads the forward operation's loops (contraction-is-emergent, last section). */
cn_proj *cn_proj_permute(cn_ctx *ctx, const cn_proj *proj, int lhs_slot, int n_rhs,
                         const int *rhs_slots) {
  if (!ctx) return NULL;
  if (!proj) {
    cn_fail(ctx, CN_ERR_INVALID, "slot permutation of a NULL projections record");
    return NULL;
  }
  if (n_rhs < 0 || n_rhs > CN_MAX_SLOTS - 1 || (n_rhs > 0 && !rhs_slots)) {
    cn_fail(ctx, CN_ERR_INVALID, "slot permutation: %d RHS slots, expected 0..%d", n_rhs,
            CN_MAX_SLOTS - 1);
    return NULL;
  }
  int want[CN_MAX_SLOTS];
  want[0] = lhs_slot;
  for (int r = 0; r < n_rhs; r++) want[r + 1] = rhs_slots[r];
  cn_proj_tensor t[CN_MAX_SLOTS];
  for (int i = 0; i <= n_rhs; i++) {
    if (want[i] < 0 || want[i] > proj->n_rhs) {
      cn_fail(ctx, CN_ERR_INVALID,
              "slot permutation: %s asks for slot %d, but the record has slots 0..%d", slot_name(i),
              want[i], proj->n_rhs);
      return NULL;
    }
    const cn_proj_slot *from = &proj->slot[want[i]];
    t[i] = (cn_proj_tensor){from->rank, from->dims, from->map};
  }
  return cn_proj_over(ctx, proj, t[0], n_rhs, t + 1, want, proj->zero_unreached);
}

bool cn_index_equal(const cn_index *a, const cn_index *b) {
  if (a->kind != b->kind || a->n_terms != b->n_terms || a->offset != b->offset) return false;
  for (int t = 0; t < a->n_terms; t++) {
    int u = 0;
    while (u < b->n_terms && b->syms[u] != a->syms[t]) u++;
    if (u == b->n_terms || b->coeffs[u] != a->coeffs[t]) return false;
  }
  return true;
}

/* ---- Surjectivity and injectivity of the LHS map ---- */

/* The terms of an index that vary over the product space, each iterator counted from its first
 * value (see start_value): iterators of size 1 are constant and drop out; free symbols are reported
 * through *free_symbol (constant during a run, but of unknown value). */
typedef struct {
  int n;
  int pos[CN_MAX_AFFINE_TERMS]; /* product position of the iterator */
  int64_t coeff[CN_MAX_AFFINE_TERMS];
} varying_terms;

static varying_terms varying(const cn_proj *proj, const cn_index *idx, bool *free_symbol) {
  varying_terms v = {0};
  for (int t = 0; t < idx->n_terms; t++) {
    int p = iter_position(proj, idx->syms[t]);
    if (p < 0) {
      if (free_symbol) *free_symbol = true;
      continue;
    }
    if (proj->sizes[p] <= 1) continue;
    v.pos[v.n] = p;
    v.coeff[v.n++] = idx->coeffs[t];
  }
  return v;
}

/* The value of an index with every iterator at its first value and free symbols at 0; with it,
 * the index is that value plus the sum of coeff * (iterator - first), each factor in
 * [0, size - 1]. False on overflow. */
static bool start_value(const cn_proj *proj, const cn_index *idx, int64_t *out) {
  int64_t v = idx->offset;
  for (int t = 0; t < idx->n_terms; t++) {
    int p = iter_position(proj, idx->syms[t]);
    int64_t shift;
    if (p >= 0 && (!mul_i64(idx->coeffs[t], proj->lo[p], &shift) || !add_i64(v, shift, &v)))
      return false;
  }
  *out = v;
  return true;
}

/* Sorts terms by |coefficient| ascending (insertion sort: at most CN_MAX_AFFINE_TERMS). False if
 * a magnitude overflows. */
static bool sort_by_magnitude(varying_terms *v, int64_t *mag) {
  for (int t = 0; t < v->n; t++)
    if (!abs_i64(v->coeff[t], &mag[t])) return false;
  for (int t = 1; t < v->n; t++)
    for (int u = t; u > 0 && mag[u - 1] > mag[u]; u--) {
      int64_t m = mag[u];
      mag[u] = mag[u - 1];
      mag[u - 1] = m;
      int p = v->pos[u];
      v->pos[u] = v->pos[u - 1];
      v->pos[u - 1] = p;
      int64_t c = v->coeff[u];
      v->coeff[u] = v->coeff[u - 1];
      v->coeff[u - 1] = c;
    }
  return true;
}

/* The varying iterators an LHS map mentions (at most CN_MAX_RANK * CN_MAX_AFFINE_TERMS), so
 * that the analyses keep per-iterator state in fixed arrays whatever the product space. */
#define MAX_MENTIONED (CN_MAX_RANK * CN_MAX_AFFINE_TERMS)
typedef struct {
  int n;
  int pos[MAX_MENTIONED];
} mentioned_set;

static int mentioned_slot(mentioned_set *set, int pos) {
  for (int k = 0; k < set->n; k++)
    if (set->pos[k] == pos) return k;
  CN_ASSERT(set->n < MAX_MENTIONED);
  set->pos[set->n] = pos;
  return set->n++;
}

/* Injectivity. Iterators of size <= 1 take a single value and need nothing; an empty product
 * space writes nothing and is vacuously injective. The others must be "determined" by the LHS
 * address: an Iter(s) axis determines s; an Affine axis determines all its not yet determined
 * iterators at once when, ordered by |coefficient|, each |c_k| exceeds the sum of |c_j|*(n_j-1)
 * over the smaller ones (a mixed-radix numeral: two tuples giving the same value would differ
 * first, from the top, at some k where |c_k| <= |sum of smaller differences| < |c_k|); terms of
 * already determined iterators and free symbols (constant during a run) are known and move to
 * the left side. Axes are revisited until nothing changes. Injective iff every iterator of size
 * > 1 ends determined. (Interleave's 2*i is injective; the convolution input map o + k with
 * both sizes > 1 is not: 1 > 1*(n_o - 1) fails.) */
bool cn_proj_lhs_injective(const cn_proj *proj) {
  if (!proj) return false;
  if (product_is_empty(proj)) return true;
  const cn_proj_slot *lhs = &proj->slot[CN_SLOT_LHS];
  /* A gathered symbol varies from point to point with values nobody knows before the run (two
   * points may read equal ids): an LHS that mentions one may be written twice (a scatter-add). */
  for (int a = 0; a < lhs->rank; a++)
    for (int t = 0; t < lhs->map[a].n_terms; t++)
      if (cn_proj_gathered_of(proj, lhs->map[a].syms[t])) return false;
  mentioned_set set = {0};
  varying_terms terms[CN_MAX_RANK];
  for (int a = 0; a < lhs->rank; a++) {
    terms[a] = varying(proj, &lhs->map[a], NULL);
    for (int t = 0; t < terms[a].n; t++) mentioned_slot(&set, terms[a].pos[t]);
  }
  /* An iterator of size > 1 the map does not mention is a reduction axis. */
  for (int p = 0; p < proj->n_product; p++)
    if (proj->sizes[p] > 1) {
      bool found = false;
      for (int k = 0; k < set.n && !found; k++) found = set.pos[k] == p;
      if (!found) return false;
    }
  bool determined[MAX_MENTIONED] = {false};
  int n_determined = 0;
  for (bool changed = true; changed;) {
    changed = false;
    for (int a = 0; a < lhs->rank; a++) {
      varying_terms open = {0};
      for (int t = 0; t < terms[a].n; t++)
        if (!determined[mentioned_slot(&set, terms[a].pos[t])]) {
          open.pos[open.n] = terms[a].pos[t];
          open.coeff[open.n++] = terms[a].coeff[t];
        }
      if (open.n == 0) continue;
      int64_t mag[CN_MAX_AFFINE_TERMS];
      if (!sort_by_magnitude(&open, mag)) continue;
      int64_t smaller = 0; /* the largest |value| the smaller terms can add */
      bool radix = true;
      for (int t = 0; t < open.n && radix; t++) {
        int64_t span;
        radix = mag[t] > smaller && mul_i64(mag[t], proj->sizes[open.pos[t]] - 1, &span) &&
                add_i64(smaller, span, &smaller);
      }
      if (!radix) continue;
      for (int t = 0; t < open.n; t++) determined[mentioned_slot(&set, open.pos[t])] = true;
      n_determined += open.n;
      changed = true;
    }
  }
  return n_determined == set.n;
}

/* True if the varying terms of an axis, plus its start value `offset`, reach every position of [0,
 * d-1]. Terms of negative coefficient c over [0, n-1] reach c*(n-1)..0, the same set as |c|*[0,
 * n-1] shifted by c*(n-1), so the reachable set is shift + {sum |c_i| t_i}. With terms by |c|
 * ascending that set is the whole interval [0, sum |c_i|(n_i-1)] when the smallest |c| is 1 and
 * each next |c_k| is at most 1 + the span of the previous ones (each step fills the gaps of the
 * last); otherwise it is answered as not covering (conservative). */
static bool axis_covered(const cn_proj *proj, varying_terms v, int64_t offset, int64_t d) {
  int64_t mag[CN_MAX_AFFINE_TERMS];
  if (!sort_by_magnitude(&v, mag)) return false;
  int64_t low = offset, span_total = 0;
  for (int t = 0; t < v.n; t++) {
    int64_t n1 = proj->sizes[v.pos[t]] - 1, span, limit;
    if (!add_i64(span_total, 1, &limit) || mag[t] > limit) return false; /* 1 for the first */
    if (!mul_i64(mag[t], n1, &span) || !add_i64(span_total, span, &span_total)) return false;
    if (v.coeff[t] < 0 && !add_i64(low, -span, &low)) return false;
  }
  int64_t high;
  if (!add_i64(low, span_total, &high)) return false;
  return low <= 0 && high >= d - 1;
}

/* Surjectivity. A record with constraints or valid_only visits an unknown part of its box: not
 * covered (conservative). An LHS without cells is covered; otherwise an empty product space
 * covers nothing. Iterators of size 1 are constant and drop out of the indices, every iterator
 * counted from its first value (start_value). The per-axis test
 * (axis_covered: Fixed(c) covers only d = 1 with c = 0, Iter(s) iff size(s) >= d, Affine iff its
 * reachable set is an interval containing [0, d-1]) is sound when the axes vary independently,
 * i.e. when no varying iterator appears in two axes: one that does (a diagonal i => ii) fails
 * unless every axis it appears in has size 1 and start value 0 — then the point with all their
 * iterators at their first values addresses position 0 on each of them at once, and those
 * iterators appear in no other axis. A free symbol in the LHS map has an unknown value: not
 * covered; nor is a record with gathered symbols. */
bool cn_proj_lhs_surjective(const cn_proj *proj) {
  /* A gathered symbol's out-of-range cells skip their points (CN_LL_LET): which ones is data. */
  if (!proj || cn_proj_has_conditions(proj) || proj->n_gathered > 0) return false;
  const cn_proj_slot *lhs = &proj->slot[CN_SLOT_LHS];
  for (int a = 0; a < lhs->rank; a++)
    if (lhs->dims[a] == 0) return true;
  if (product_is_empty(proj)) return false;
  mentioned_set set = {0};
  int uses[MAX_MENTIONED] = {0};
  varying_terms terms[CN_MAX_RANK];
  for (int a = 0; a < lhs->rank; a++) {
    bool free_symbol = false;
    terms[a] = varying(proj, &lhs->map[a], &free_symbol);
    if (free_symbol) return false;
    for (int t = 0; t < terms[a].n; t++) uses[mentioned_slot(&set, terms[a].pos[t])]++;
  }
  for (int a = 0; a < lhs->rank; a++) {
    bool shared = false;
    for (int t = 0; t < terms[a].n; t++)
      shared = shared || uses[mentioned_slot(&set, terms[a].pos[t])] > 1;
    int64_t start;
    if (!start_value(proj, &lhs->map[a], &start)) return false;
    if (shared) {
      if (lhs->dims[a] != 1 || start != 0) return false;
    } else if (!axis_covered(proj, terms[a], start, lhs->dims[a])) {
      return false;
    }
  }
  return true;
}

/* ---- Dump ---- */

static void print_dims(cn_sbuf *sb, int rank, const int64_t *dims) {
  cn_sbuf_putc(sb, '[');
  for (int a = 0; a < rank; a++) cn_sbuf_printf(sb, "%s%lld", a ? ", " : "", (long long)dims[a]);
  cn_sbuf_putc(sb, ']');
}

const char *cn_proj_to_string(cn_ctx *ctx, const cn_proj *proj) {
  if (!ctx) return NULL;
  if (!proj) {
    cn_fail(ctx, CN_ERR_INVALID, "cn_proj_to_string: the projections record is NULL");
    return NULL;
  }
  cn_sbuf sb = {0};
  cn_sbuf_puts(&sb, "product space:");
  if (proj->n_product == 0) cn_sbuf_puts(&sb, " (none)");
  for (int p = 0; p < proj->n_product; p++) {
    cn_sbuf_putc(&sb, ' ');
    print_symbol(&sb, ctx, proj, proj->iters[p]);
    if (proj->lo[p] == 0)
      cn_sbuf_printf(&sb, "=%lld", (long long)proj->sizes[p]);
    else /* from..to, `to` exclusive as in the loop IR */
      cn_sbuf_printf(&sb, "=%lld..%lld", (long long)proj->lo[p],
                     (long long)(proj->lo[p] + proj->sizes[p]));
  }
  cn_sbuf_putc(&sb, '\n');
  for (int k = 0; k < proj->n_constraints; k++) {
    cn_sbuf_puts(&sb, k ? ", " : "constraints: ");
    cn_sbuf_puts(&sb, "0 <= ");
    print_index(&sb, ctx, proj, &proj->constraints[k].expr);
    cn_sbuf_printf(&sb, " < %lld", (long long)proj->constraints[k].bound);
  }
  if (proj->n_constraints > 0) cn_sbuf_putc(&sb, '\n');
  if (proj->valid_only || proj->zero_unreached)
    cn_sbuf_printf(&sb, "flags:%s%s\n", proj->valid_only ? " valid_only" : "",
                   proj->zero_unreached ? " zero_unreached" : "");
  for (int k = 0; k < proj->n_gathered; k++) {
    const cn_proj_gathered *gs = &proj->gathered[k];
    cn_sbuf_puts(&sb, "gathered ");
    print_symbol(&sb, ctx, proj, gs->sym);
    cn_sbuf_printf(&sb, "=%lld from %s (", (long long)gs->bound, cn_node_describe(gs->source));
    for (int a = 0; a < gs->source->rank; a++) {
      if (a) cn_sbuf_puts(&sb, ", ");
      print_index(&sb, ctx, proj, &gs->map[a]);
    }
    cn_sbuf_puts(&sb, ")\n");
  }
  for (int s = 0; s <= proj->n_rhs; s++) {
    const cn_proj_slot *slot = &proj->slot[s];
    cn_sbuf_printf(&sb, "%-4s ", slot_name(s));
    print_dims(&sb, slot->rank, slot->dims);
    cn_sbuf_puts(&sb, ": (");
    for (int a = 0; a < slot->rank; a++) {
      if (a) cn_sbuf_puts(&sb, ", ");
      print_index(&sb, ctx, proj, &slot->map[a]);
    }
    cn_sbuf_puts(&sb, ")\n");
  }
  return cn_sbuf_finish(ctx, &sb);
}
