/* libFuzzer target: the einsum spec parser (cn_einsum_parse) and the shape logic of the specs it
 * accepts. The input (up to its first NUL byte) is the spec. Beyond ASan and UBSan, the harness
 * aborts (a crash libFuzzer reports) when a documented property fails:
 *   - a refused spec is CN_ERR_INVALID with "at column" in its message;
 *   - an accepted spec prints (cn_einsum_print) as a text that parses back to an equal tree;
 *   - applied to fresh operands (open, or of a few small sizes chosen by the input's bytes) with
 *     the names s, d and k bound as strides or dilations, shape inference succeeds or reports
 *     CN_ERR_INVALID.
 * One context per input, destroyed after it, so that inputs do not interact. */
#include "shape/einsum.h"
#include "shape/shape.h"

#define FUZZ_NAME "fuzz_einsum"
#include "fuzz_common.h"

/* Sizes of the operands' rows (batch, input, output), a few axes of small sizes each; 0 axes and
 * `open` leave a row to inference. */
typedef struct {
  bool open;
  int n[3];
  int64_t dims[3][2];
} operand_shape;

static const operand_shape shapes[] = {
    {true, {0, 0, 0}, {{0}}},
    {false, {0, 0, 1}, {{0}, {0}, {3}}},
    {false, {1, 1, 2}, {{2}, {4}, {5, 6}}},
    {false, {0, 0, 2}, {{0}, {0}, {7, 7}}},
    {false, {1, 1, 1}, {{3}, {2}, {1}}},
};

static cn_shape *new_shape(cn_shape_env *env, const operand_shape *s) {
  cn_shape_row_spec rows[3] = {{0}};
  for (int k = 0; k < 3 && !s->open; k++)
    rows[k] = (cn_shape_row_spec){true, s->n[k], s->dims[k], NULL};
  return cn_shape_new(env, "x", false, s->open ? NULL : rows);
}

static void infer(cn_ctx *ctx, cn_einsum *spec, const uint8_t *data, size_t size) {
  cn_shape_env *env = cn_shape_env_new(ctx);
  if (!env) abort(); /* no allocation limit here: memory does not run out */
  unsigned pick = size ? data[size - 1] : 0;
  cn_shape *lhs = new_shape(env, &shapes[0]), *rhs[3];
  for (int i = 0; i < spec->n_rhs; i++, pick /= 5) rhs[i] = new_shape(env, &shapes[pick % 5]);
  cn_shape_binding bindings[3] = {{"s", 2}, {"d", 3}, {"k", 1}};
  cn_shape_args args = {0};
  args.spec = spec;
  args.bindings = bindings;
  args.n_bindings = 3;
  cn_status st = cn_shape_add_op(env, CN_SL_EINSUM, &args, lhs, rhs, spec->n_rhs)
                     ? cn_shape_finalize(env)
                     : cn_ctx_status(ctx);
  if (st != CN_OK && st != CN_ERR_INVALID)
    fail("shape inference failed with a status other than CN_ERR_INVALID:", cn_ctx_error(ctx));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size);
  if (!text) return 0;
  cn_ctx *ctx = cn_ctx_create();
  if (!ctx) abort();
  cn_einsum *spec = cn_einsum_parse(ctx, text);
  if (!spec) {
    if (cn_ctx_status(ctx) != CN_ERR_INVALID || !strstr(cn_ctx_error(ctx), "at column"))
      fail("a refusal that is not a positioned CN_ERR_INVALID:", cn_ctx_error(ctx));
  } else {
    cn_sbuf sb = {0};
    cn_einsum_print(&sb, spec);
    if (sb.failed) abort();
    cn_einsum *back = cn_einsum_parse(ctx, sb.data);
    if (!back || !cn_einsum_equal(spec, back))
      fail("the canonical text does not parse back to the same tree:", sb.data);
    cn_sbuf_free(&sb);
    infer(ctx, spec, data, size);
  }
  cn_ctx_destroy(ctx);
  free(text);
  return 0;
}
