/* The assignments IR (syntax-extensions-cd-op `Assignments.t`, ocannl-notes §2.3): constructors
 * that validate everything the lowering relies on, and the printer in %cd syntax.
 *
 * Invariants: a constructed assignment is consistent — the accumulator can accumulate (the
 * clear-only ones, Arg2, only as `=:`), the op's arity equals the record's RHS count, the op and
 * the accumulator are defined on the LHS precision, every slot's dims equal its node's dims, every
 * index stays within its node's padded extent over the product space (free symbols over their
 * declared range; for a valid_only record, within int64, since out-of-range points are skipped),
 * a vectorized write stays inside its unpadded LHS (and never takes a valid_only record), every
 * node belongs to the assignment's context; a failed constructor returns NULL with a message naming
 * the tensors, axes and sizes involved. Assignments, and the arrays and text they hold, live in the
 * arena. */
#include "ir/ir.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Failure helpers ---- */

/* A NULL argument is most often the result of a constructor that failed just before: that
 * failure's status is kept (an out-of-memory stays one) and its message quoted. */
static void fail_null(cn_ctx *ctx, const char *what) {
  if (ctx->status == CN_OK) {
    cn_fail(ctx, CN_ERR_INVALID, "%s is NULL", what);
    return;
  }
  char earlier[sizeof ctx->error];
  memcpy(earlier, ctx->error, sizeof earlier);
  cn_fail(ctx, ctx->status, "%s is NULL (after an earlier failure: %s)", what, earlier);
}

static bool valid_op(cn_op op) {
  return (int)op >= 0 && op < CN_OP_COUNT;
}

/* "[3, 4]" into buf (truncated to size). */
static void format_dims(char *buf, size_t size, int rank, const int64_t *dims) {
  size_t used = (size_t)snprintf(buf, size, "[");
  for (int a = 0; a < rank && used < size; a++)
    used += (size_t)snprintf(buf + used, size - used, "%s%lld", a ? ", " : "", (long long)dims[a]);
  if (used < size) snprintf(buf + used, size - used, "]");
}

#define DIMS_TEXT (CN_MAX_RANK * 24 + 4)

/* The node exists and belongs to ctx; `role` names it in the message ("lhs", "rhs2"). */
static bool check_node(cn_ctx *ctx, const char *what, const char *role, const cn_node *node) {
  if (!node) {
    char text[128];
    snprintf(text, sizeof text, "%s: %s", what, role);
    fail_null(ctx, text);
    return false;
  }
  if (node->ctx != ctx) {
    cn_fail(ctx, CN_ERR_INVALID, "%s: %s %s belongs to another context", what, role,
            cn_node_describe(node));
    return false;
  }
  return true;
}

static bool check_supports(cn_ctx *ctx, const char *kind, cn_op op, const cn_node *lhs) {
  if (cn_op_supports(op, lhs->prec)) return true;
  cn_fail(ctx, CN_ERR_UNSUPPORTED, "%s %s is not defined for precision %s (lhs %s)", kind,
          cn_op_name(op), cn_prec_name(lhs->prec), cn_node_describe(lhs));
  return false;
}

/* Why cn_index_bounds gave no range: a symbol without one, or arithmetic overflow. */
static void fail_no_bounds(cn_ctx *ctx, const cn_proj *proj, const cn_index *idx,
                           const char *index_text, int axis, const char *slot,
                           const cn_node *node) {
  for (int t = 0; t < idx->n_terms; t++) {
    bool iterator = false;
    for (int p = 0; p < proj->n_product; p++) iterator = iterator || proj->iters[p] == idx->syms[t];
    const cn_symbol_info *info = cn_ctx_symbol(ctx, idx->syms[t]);
    if (!iterator && (!info || info->range <= 0)) {
      cn_fail(ctx, CN_ERR_INVALID,
              "index %s of axis %d of %s %s uses '%s', which is not a product iterator and has no "
              "range (a static index needs a range > 0 from cn_symbol_create)",
              index_text, axis, slot, cn_node_describe(node), cn_symbol_name(ctx, idx->syms[t]));
      return;
    }
  }
  cn_fail(ctx, CN_ERR_INVALID, "index %s of axis %d of %s %s overflows 64-bit integers", index_text,
          axis, slot, cn_node_describe(node));
}

/* The slot's dims are the node's, and every index stays within the padded extent
 * [-pad_left, dim + pad_right - 1] of its axis wherever it is evaluated — or, for a valid_only
 * record, is merely bounded (its out-of-range points are never visited). */
static bool check_slot(cn_ctx *ctx, const cn_proj *proj, int slot_index, const char *slot,
                       const cn_node *node) {
  const cn_proj_slot *s = &proj->slot[slot_index];
  bool same = s->rank == node->rank;
  for (int a = 0; a < node->rank && same; a++) same = s->dims[a] == node->dims[a];
  if (!same) {
    char given[DIMS_TEXT], actual[DIMS_TEXT];
    format_dims(given, sizeof given, s->rank, s->dims);
    format_dims(actual, sizeof actual, node->rank, node->dims);
    cn_fail(ctx, CN_ERR_INVALID, "projections give %s dims %s but %s has %s", slot, given,
            cn_node_describe(node), actual);
    return false;
  }
  for (int a = 0; a < node->rank; a++) {
    int64_t lo, hi;
    bool bounded = cn_index_bounds(ctx, &s->map[a], proj, &lo, &hi);
    int64_t first = -node->pad[a][0], last = node->dims[a] + node->pad[a][1] - 1;
    if (bounded && (proj->valid_only || lo > hi || (lo >= first && hi <= last))) continue;
    cn_sbuf text = {0};
    cn_index_print(&text, ctx, &s->map[a]);
    const char *index_text = text.failed || !text.data ? "?" : text.data;
    if (!bounded)
      fail_no_bounds(ctx, proj, &s->map[a], index_text, a, slot, node);
    else
      cn_fail(ctx, CN_ERR_INVALID,
              "index %s of axis %d of %s %s ranges over [%lld, %lld] but the axis has size %lld "
              "with padding %lld+%lld",
              index_text, a, slot, cn_node_describe(node), (long long)lo, (long long)hi,
              (long long)node->dims[a], (long long)node->pad[a][0], (long long)node->pad[a][1]);
    cn_sbuf_free(&text);
    return false;
  }
  return true;
}

static cn_asgn *new_asgn(cn_ctx *ctx, cn_asgn_kind kind) {
  cn_asgn *asgn = cn_alloc(ctx, sizeof *asgn);
  if (asgn) asgn->kind = kind;
  return asgn;
}

/* ---- Accumulating and vectorized assignments ---- */

/* The accumulators, listed from the op table for the message. */
static void fail_not_accumulator(cn_ctx *ctx, cn_op accum) {
  char list[512];
  size_t used = 0;
  list[0] = '\0';
  for (int op = 0; op < CN_OP_COUNT && used < sizeof list; op++)
    if (cn_op_can_accumulate((cn_op)op))
      used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", used ? ", " : "",
                               cn_op_name((cn_op)op));
  cn_fail(ctx, CN_ERR_INVALID, "accumulation: %s cannot be an accumulator (those are: %s)",
          cn_op_name(accum), list);
}

cn_asgn *cn_asgn_accum(cn_ctx *ctx, bool init_neutral, cn_op accum, cn_node *lhs, cn_op op,
                       const cn_buffer *rhs, const cn_proj *proj) {
  if (!ctx) return NULL;
  const char *what = "accumulation";
  if (!valid_op(accum) || !valid_op(op)) {
    cn_fail(ctx, CN_ERR_INVALID, "accumulation: %d is not an op",
            (int)(valid_op(accum) ? op : accum));
    return NULL;
  }
  if (!cn_op_can_accumulate(accum)) {
    fail_not_accumulator(ctx, accum);
    return NULL;
  }
  if (cn_op_table[accum].accum == CN_ACCUM_ACC_INIT && !init_neutral) {
    cn_fail(ctx, CN_ERR_INVALID,
            "accumulation: %s accumulates only as `=:` (init_neutral), there is no `=%s` form",
            cn_op_name(accum), cn_op_infix(accum) ? cn_op_infix(accum) : cn_op_name(accum));
    return NULL;
  }
  if (cn_op_table[op].flags & CN_OPF_VEC) {
    cn_fail(ctx, CN_ERR_INVALID,
            "accumulation: %s is vectorized (one cell yields several): use cn_asgn_vec_unop",
            cn_op_name(op));
    return NULL;
  }
  if (!proj) {
    fail_null(ctx, "accumulation: the projections record");
    return NULL;
  }
  int arity = cn_op_arity(op);
  if (arity != proj->n_rhs) {
    cn_fail(ctx, CN_ERR_INVALID,
            "accumulation: %s takes %d operand%s but the projections record has %d RHS tensor%s",
            cn_op_name(op), arity, arity == 1 ? "" : "s", proj->n_rhs, proj->n_rhs == 1 ? "" : "s");
    return NULL;
  }
  if (!check_node(ctx, what, "lhs", lhs)) return NULL;
  if (!rhs) {
    fail_null(ctx, "accumulation: the rhs array");
    return NULL;
  }
  static const char *const rhs_names[3] = {"rhs1", "rhs2", "rhs3"};
  for (int r = 0; r < arity; r++)
    if (!check_node(ctx, what, rhs_names[r], rhs[r].node)) return NULL;
  if (!check_supports(ctx, "op", op, lhs) || !check_supports(ctx, "accumulator", accum, lhs))
    return NULL;
  /* A condition keeps its own precision (CN_OPF_COND), and a 128-bit word has no truth value. */
  if ((cn_op_table[op].flags & CN_OPF_COND) &&
      cn_prec_kind_of(rhs[0].node->prec) == CN_PKIND_BITS) {
    cn_fail(ctx, CN_ERR_UNSUPPORTED, "op %s: the condition %s cannot be of precision %s",
            cn_op_name(op), cn_node_describe(rhs[0].node), cn_prec_name(rhs[0].node->prec));
    return NULL;
  }
  if (!check_slot(ctx, proj, CN_SLOT_LHS, "lhs", lhs)) return NULL;
  for (int r = 0; r < arity; r++)
    if (!check_slot(ctx, proj, r + 1, rhs_names[r], rhs[r].node)) return NULL;
  cn_asgn *asgn = new_asgn(ctx, CN_ASGN_ACCUM);
  if (!asgn) return NULL;
  asgn->u.accum.init_neutral = init_neutral;
  asgn->u.accum.accum = accum;
  asgn->u.accum.op = op;
  asgn->u.accum.lhs = lhs;
  for (int r = 0; r < arity; r++) asgn->u.accum.rhs[r] = rhs[r];
  asgn->u.accum.proj = proj;
  return asgn;
}

/* The group of `length` cells written from the first addressed cell must end inside the LHS:
 * the largest first offset is bounded by the row-major sum of the per-axis maxima. */
static bool check_vec_group(cn_ctx *ctx, cn_op op, const cn_node *lhs, const cn_proj *proj) {
  int64_t length = cn_vec_length(lhs->prec), numel = cn_node_numel(lhs), last_first = 0;
  int64_t stride = 1;
  for (int a = lhs->rank - 1; a >= 0; a--) {
    int64_t lo, hi;
    bool bounded = cn_index_bounds(ctx, &proj->slot[CN_SLOT_LHS].map[a], proj, &lo, &hi);
    CN_ASSERT(bounded);        /* check_slot passed */
    if (lo > hi) return true;  /* never evaluated */
    last_first += hi * stride; /* within numel: hi < dim on every axis */
    stride *= lhs->dims[a];
  }
  if (last_first + length <= numel) return true;
  cn_fail(ctx, CN_ERR_INVALID,
          "vectorized %s writes %lld cells from each addressed cell of lhs %s, but the last group "
          "starts at offset %lld and overruns its %lld cells",
          cn_op_name(op), (long long)length, cn_node_describe(lhs), (long long)last_first,
          (long long)numel);
  return false;
}

cn_asgn *cn_asgn_vec_unop(cn_ctx *ctx, cn_op op, cn_node *lhs, cn_buffer rhs, const cn_proj *proj) {
  if (!ctx) return NULL;
  const char *what = "vectorized assignment";
  if (!valid_op(op)) {
    cn_fail(ctx, CN_ERR_INVALID, "vectorized assignment: %d is not an op", (int)op);
    return NULL;
  }
  if (!(cn_op_table[op].flags & CN_OPF_VEC)) {
    cn_fail(ctx, CN_ERR_INVALID,
            "vectorized assignment: %s is not a vectorized op: use cn_asgn_accum", cn_op_name(op));
    return NULL;
  }
  if (!proj) {
    fail_null(ctx, "vectorized assignment: the projections record");
    return NULL;
  }
  if (proj->n_rhs != 1) {
    cn_fail(ctx, CN_ERR_INVALID,
            "vectorized assignment: %s takes 1 operand but the projections record has %d RHS "
            "tensors",
            cn_op_name(op), proj->n_rhs);
    return NULL;
  }
  /* A group of cells is written from its first cell's index: a bound on that index alone would
   * not keep the group inside the LHS. */
  if (proj->valid_only) {
    cn_fail(ctx, CN_ERR_UNSUPPORTED,
            "vectorized assignment: %s cannot use a valid_only projections record", cn_op_name(op));
    return NULL;
  }
  if (!check_node(ctx, what, "lhs", lhs) || !check_node(ctx, what, "rhs1", rhs.node) ||
      !check_supports(ctx, "op", op, lhs))
    return NULL;
  for (int a = 0; a < lhs->rank; a++)
    if (lhs->pad[a][0] || lhs->pad[a][1]) {
      cn_fail(ctx, CN_ERR_INVALID,
              "vectorized assignment: lhs %s is padded (%lld+%lld on axis %d); its cell groups "
              "need an unpadded buffer",
              cn_node_describe(lhs), (long long)lhs->pad[a][0], (long long)lhs->pad[a][1], a);
      return NULL;
    }
  if (!check_slot(ctx, proj, CN_SLOT_LHS, "lhs", lhs) ||
      !check_slot(ctx, proj, 1, "rhs1", rhs.node) || !check_vec_group(ctx, op, lhs, proj))
    return NULL;
  cn_asgn *asgn = new_asgn(ctx, CN_ASGN_VEC_UNOP);
  if (!asgn) return NULL;
  asgn->u.vec.op = op;
  asgn->u.vec.lhs = lhs;
  asgn->u.vec.rhs = rhs;
  asgn->u.vec.proj = proj;
  return asgn;
}

/* ---- Fetches ---- */

static cn_asgn *new_fetch(cn_ctx *ctx, cn_node *lhs, cn_fetch_kind kind, const char *what) {
  if (!ctx || !check_node(ctx, what, "lhs", lhs)) return NULL;
  cn_asgn *asgn = new_asgn(ctx, CN_ASGN_FETCH);
  if (!asgn) return NULL;
  asgn->u.fetch.kind = kind;
  asgn->u.fetch.lhs = lhs;
  return asgn;
}

cn_asgn *cn_asgn_fetch_constant(cn_ctx *ctx, cn_node *lhs, double value) {
  cn_asgn *asgn = new_fetch(ctx, lhs, CN_FETCH_CONSTANT, "constant fetch");
  if (asgn) asgn->u.fetch.constant = value;
  return asgn;
}

cn_asgn *cn_asgn_fetch_constant_bits(cn_ctx *ctx, cn_node *lhs, uint64_t bits) {
  cn_asgn *asgn = new_fetch(ctx, lhs, CN_FETCH_CONSTANT_BITS, "bits fetch");
  if (asgn) asgn->u.fetch.bits = bits;
  return asgn;
}

cn_asgn *cn_asgn_fetch_constant_fill(cn_ctx *ctx, cn_node *lhs, const double *values,
                                     size_t count) {
  if (!ctx) return NULL;
  if (count < 1 || !values) {
    cn_fail(ctx, CN_ERR_INVALID, "fill fetch: %s", count < 1 ? "no values" : "values is NULL");
    return NULL;
  }
  size_t bytes;
  if (!cn_mul_size(count, sizeof(double), &bytes)) {
    cn_fail(ctx, CN_ERR_INVALID, "fill fetch: %zu values are too many", count);
    return NULL;
  }
  cn_asgn *asgn = new_fetch(ctx, lhs, CN_FETCH_CONSTANT_FILL, "fill fetch");
  double *copy = asgn ? cn_alloc(ctx, bytes) : NULL;
  if (!copy) return NULL;
  memcpy(copy, values, bytes);
  asgn->u.fetch.fill = copy;
  asgn->u.fetch.n_fill = count;
  return asgn;
}

cn_asgn *cn_asgn_fetch_range_over_offsets(cn_ctx *ctx, cn_node *lhs) {
  return new_fetch(ctx, lhs, CN_FETCH_RANGE_OVER_OFFSETS, "range_over_offsets fetch");
}

cn_asgn *cn_asgn_fetch_slice(cn_ctx *ctx, cn_node *lhs, cn_symbol batch_index, cn_node *sliced) {
  const char *what = "slice";
  if (!ctx || !check_node(ctx, what, "lhs", lhs) || !check_node(ctx, what, "source", sliced))
    return NULL;
  bool fits = sliced->rank == lhs->rank + 1;
  for (int a = 0; a < lhs->rank && fits; a++) fits = sliced->dims[a + 1] == lhs->dims[a];
  if (!fits) {
    char lhs_dims[DIMS_TEXT], src_dims[DIMS_TEXT];
    format_dims(lhs_dims, sizeof lhs_dims, lhs->rank, lhs->dims);
    format_dims(src_dims, sizeof src_dims, sliced->rank, sliced->dims);
    cn_fail(ctx, CN_ERR_INVALID,
            "slice: lhs %s has dims %s, but a slice of %s %s has its dims without the leading "
            "axis",
            cn_node_describe(lhs), lhs_dims, cn_node_describe(sliced), src_dims);
    return NULL;
  }
  const cn_symbol_info *info = cn_ctx_symbol(ctx, batch_index);
  if (!info) {
    cn_fail(ctx, CN_ERR_INVALID, "slice: batch index %d is not a symbol of this context",
            batch_index);
    return NULL;
  }
  if (info->range <= 0 || info->range > sliced->dims[0]) {
    cn_fail(ctx, CN_ERR_INVALID,
            "slice: batch index '%s' has range %lld%s, but it must be within 1..%lld, the leading "
            "dim of %s",
            info->name, (long long)info->range, info->range <= 0 ? " (unbounded)" : "",
            (long long)sliced->dims[0], cn_node_describe(sliced));
    return NULL;
  }
  cn_asgn *asgn = new_fetch(ctx, lhs, CN_FETCH_SLICE, what);
  if (!asgn) return NULL;
  asgn->u.fetch.sym = batch_index;
  asgn->u.fetch.sliced = sliced;
  return asgn;
}

cn_asgn *cn_asgn_fetch_embed_symbol(cn_ctx *ctx, cn_node *lhs, cn_symbol sym) {
  if (!ctx) return NULL;
  if (!cn_ctx_symbol(ctx, sym)) {
    cn_fail(ctx, CN_ERR_INVALID, "embed_symbol fetch: %d is not a symbol of this context", sym);
    return NULL;
  }
  cn_asgn *asgn = new_fetch(ctx, lhs, CN_FETCH_EMBED_SYMBOL, "embed_symbol fetch");
  if (asgn) asgn->u.fetch.sym = sym;
  return asgn;
}

cn_asgn *cn_asgn_fetch_embed_self_id(cn_ctx *ctx, cn_node *lhs) {
  return new_fetch(ctx, lhs, CN_FETCH_EMBED_SELF_ID, "embed_self_id fetch");
}

cn_asgn *cn_asgn_fetch_embed_dim(cn_ctx *ctx, cn_node *lhs, const int64_t *dim) {
  if (!ctx) return NULL;
  if (!dim) {
    cn_fail(ctx, CN_ERR_INVALID, "embed_dim fetch: the dim pointer is NULL");
    return NULL;
  }
  cn_asgn *asgn = new_fetch(ctx, lhs, CN_FETCH_EMBED_DIM, "embed_dim fetch");
  if (asgn) asgn->u.fetch.dim = dim;
  return asgn;
}

/* ---- Structure ---- */

cn_asgn *cn_asgn_seq(cn_ctx *ctx, int count, cn_asgn *const *items) {
  if (!ctx) return NULL;
  if (count < 0 || (count > 0 && !items)) {
    cn_fail(ctx, CN_ERR_INVALID, "seq: %d items%s", count,
            count < 0 ? " (negative)" : " but the items array is NULL");
    return NULL;
  }
  for (int k = 0; k < count; k++)
    if (!items[k]) {
      char what[64];
      snprintf(what, sizeof what, "seq: item %d", k);
      fail_null(ctx, what);
      return NULL;
    }
  cn_asgn *asgn = new_asgn(ctx, CN_ASGN_SEQ);
  cn_asgn **copy = asgn ? cn_alloc(ctx, (size_t)(count ? count : 1) * sizeof *copy) : NULL;
  if (!copy) return NULL;
  for (int k = 0; k < count; k++) copy[k] = items[k];
  asgn->u.seq.count = count;
  asgn->u.seq.items = copy;
  return asgn;
}

cn_asgn *cn_asgn_comment(cn_ctx *ctx, const char *text, cn_asgn *body) {
  if (!ctx) return NULL;
  if (!text) {
    cn_fail(ctx, CN_ERR_INVALID, "comment: the text is NULL");
    return NULL;
  }
  if (!body) {
    fail_null(ctx, "comment: the body");
    return NULL;
  }
  cn_asgn *asgn = new_asgn(ctx, CN_ASGN_COMMENT);
  char *copy = asgn ? cn_strdup(ctx, text) : NULL;
  if (!copy) return NULL;
  asgn->u.comment.text = copy;
  asgn->u.comment.body = body;
  return asgn;
}

cn_asgn *cn_asgn_noop(cn_ctx *ctx) {
  return ctx ? new_asgn(ctx, CN_ASGN_NOOP) : NULL;
}

/* ---- %cd printer ---- */

static void print_node(cn_sbuf *sb, const cn_node *node) {
  if (node->label[0])
    cn_sbuf_puts(sb, node->label);
  else
    cn_sbuf_printf(sb, "n%d", node->id);
}

static void print_buffer(cn_sbuf *sb, cn_buffer buffer) {
  print_node(sb, buffer.node);
  if (buffer.merge) cn_sbuf_puts(sb, ".merge");
}

/* The fewest %.*g digits that read back as the same double, so 0.1 prints 0.1. */
static void print_number(cn_sbuf *sb, double x) {
  if (isnan(x)) {
    cn_sbuf_puts(sb, "nan");
    return;
  }
  if (isinf(x)) {
    cn_sbuf_puts(sb, x < 0 ? "-inf" : "inf");
    return;
  }
  char text[40];
  for (int digits = 1; digits <= 17; digits++) {
    snprintf(text, sizeof text, "%.*g", digits, x);
    if (strtod(text, NULL) == x) break;
  }
  cn_sbuf_puts(sb, text);
}

/* A string literal in OCaml syntax, as block comments are written in %cd. */
static void print_string_literal(cn_sbuf *sb, const char *text) {
  cn_sbuf_putc(sb, '"');
  for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
    if (*c == '"' || *c == '\\')
      cn_sbuf_printf(sb, "\\%c", *c);
    else if (*c == '\n')
      cn_sbuf_puts(sb, "\\n");
    else if (*c == '\t')
      cn_sbuf_puts(sb, "\\t");
    else if (*c < 0x20 || *c == 0x7f)
      cn_sbuf_printf(sb, "\\x%02x", *c);
    else
      cn_sbuf_putc(sb, (char)*c);
  }
  cn_sbuf_putc(sb, '"');
}

/* `=:+`, `=-`, `=?/` (syntax-extensions-cd-op's spelling); a clear-only accumulator (Arg2) is the
 * plain `=:`. */
static void print_accum_operator(cn_sbuf *sb, cn_op accum, bool init_neutral) {
  char text[16];
  cn_sbuf_puts(sb, cn_op_assign_spelling(accum, init_neutral, text, sizeof text) ? text : "=?");
}

/* `a * b` for a binary op with an infix spelling, `x` for id, otherwise the curried
 * application `relu y`, `where c a b`. */
static void print_application(cn_sbuf *sb, cn_op op, const cn_buffer *args) {
  int arity = cn_op_arity(op);
  if (arity == 2 && cn_op_infix(op)) {
    print_buffer(sb, args[0]);
    cn_sbuf_printf(sb, " %s ", cn_op_infix(op));
    print_buffer(sb, args[1]);
    return;
  }
  if (op != CN_OP_ID) cn_sbuf_printf(sb, "%s ", cn_op_name(op));
  for (int k = 0; k < arity; k++) {
    if (k) cn_sbuf_putc(sb, ' ');
    print_buffer(sb, args[k]);
  }
}

static void print_fetch(cn_sbuf *sb, const cn_ctx *ctx, const cn_asgn *asgn) {
  print_node(sb, asgn->u.fetch.lhs);
  cn_sbuf_puts(sb, " =: ");
  switch (asgn->u.fetch.kind) {
  case CN_FETCH_CONSTANT: print_number(sb, asgn->u.fetch.constant); break;
  case CN_FETCH_CONSTANT_BITS:
    cn_sbuf_printf(sb, "bits 0x%llx", (unsigned long long)asgn->u.fetch.bits);
    break;
  case CN_FETCH_CONSTANT_FILL:
    cn_sbuf_puts(sb, "fill [");
    for (size_t k = 0; k < asgn->u.fetch.n_fill; k++) {
      if (k) cn_sbuf_puts(sb, "; ");
      print_number(sb, asgn->u.fetch.fill[k]);
    }
    cn_sbuf_putc(sb, ']');
    break;
  case CN_FETCH_RANGE_OVER_OFFSETS: cn_sbuf_puts(sb, "range_over_offsets ()"); break;
  case CN_FETCH_SLICE:
    print_node(sb, asgn->u.fetch.sliced);
    cn_sbuf_printf(sb, " @| %s", cn_symbol_name(ctx, asgn->u.fetch.sym));
    break;
  case CN_FETCH_EMBED_SYMBOL:
    cn_sbuf_printf(sb, "!@%s", cn_symbol_name(ctx, asgn->u.fetch.sym));
    break;
  case CN_FETCH_EMBED_SELF_ID: cn_sbuf_puts(sb, "embed_self_id ()"); break;
  case CN_FETCH_EMBED_DIM: cn_sbuf_printf(sb, "dim %lld", (long long)*asgn->u.fetch.dim); break;
  }
}

static void print_asgn(cn_sbuf *sb, const cn_ctx *ctx, const cn_asgn *asgn, int depth) {
  switch (asgn->kind) {
  case CN_ASGN_NOOP: return;
  case CN_ASGN_SEQ:
    for (int k = 0; k < asgn->u.seq.count; k++) print_asgn(sb, ctx, asgn->u.seq.items[k], depth);
    return;
  case CN_ASGN_COMMENT:
    cn_sbuf_indent(sb, depth);
    cn_sbuf_puts(sb, "~~(");
    print_string_literal(sb, asgn->u.comment.text);
    cn_sbuf_puts(sb, ";\n");
    print_asgn(sb, ctx, asgn->u.comment.body, depth + 1);
    cn_sbuf_indent(sb, depth);
    cn_sbuf_puts(sb, ");\n");
    return;
  case CN_ASGN_ACCUM:
    cn_sbuf_indent(sb, depth);
    print_node(sb, asgn->u.accum.lhs);
    cn_sbuf_putc(sb, ' ');
    print_accum_operator(sb, asgn->u.accum.accum, asgn->u.accum.init_neutral);
    cn_sbuf_putc(sb, ' ');
    print_application(sb, asgn->u.accum.op, asgn->u.accum.rhs);
    /* an index-valued projection: the symbol a tensor's cells give (ir.h cn_proj_gathered) */
    for (int k = 0; k < asgn->u.accum.proj->n_gathered; k++) {
      cn_sbuf_printf(sb, " ~gather:%s<-", cn_symbol_name(ctx, asgn->u.accum.proj->gathered[k].sym));
      print_node(sb, asgn->u.accum.proj->gathered[k].source);
    }
    cn_sbuf_puts(sb, ";\n");
    return;
  case CN_ASGN_VEC_UNOP:
    cn_sbuf_indent(sb, depth);
    print_node(sb, asgn->u.vec.lhs);
    cn_sbuf_printf(sb, " =: %s ", cn_op_name(asgn->u.vec.op));
    print_buffer(sb, asgn->u.vec.rhs);
    cn_sbuf_puts(sb, ";\n");
    return;
  case CN_ASGN_FETCH:
    cn_sbuf_indent(sb, depth);
    print_fetch(sb, ctx, asgn);
    cn_sbuf_puts(sb, ";\n");
    return;
  }
}

const char *cn_asgn_to_string(cn_ctx *ctx, const cn_asgn *asgn) {
  if (!ctx) return NULL;
  if (!asgn) {
    fail_null(ctx, "cn_asgn_to_string: the assignment");
    return NULL;
  }
  cn_sbuf sb = {0};
  print_asgn(&sb, ctx, asgn, 0);
  return cn_sbuf_finish(ctx, &sb);
}
