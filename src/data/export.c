/* Ahead-of-time export (include/cannl.h, cn_graph_export_c): a model's forward routine as a C file
 * that needs nothing of cannl, and a header with its one function NAME_forward(in, out); for a
 * language model, also its text sampler NAME_sample (cn_text_export_sampler), the draw and the
 * pick of sample.c written out as C around NAME_forward, with the corpus's vocabulary as tables.
 *
 * The file is the generated source of the routine cannl compiles and runs for the forward code
 * (the same text, so the exported model computes what cannl computes; compiled with CN_STANDALONE
 * defined, so its GEMMs are the generated drivers, not calls of cannl's GEMM library, the same
 * bits: backend/gemm_lib.h), followed by one static
 * array per buffer of its entry point and the function that fills the input's, calls the entry
 * point and copies the output's out.
 *
 * Text from outside never reaches the files as code: the name must pass cn_is_c_name (it names
 * the files, the include and the functions), and every label or shape lands in a comment through
 * cn_sbuf_c_comment_text, which escapes whatever could end the comment, nest one, splice a line
 * or form a trigraph (a label holding a comment terminator and code stays a comment).
 *
 * Invariants: every buffer array has the node's padded layout (the entry point's contract); a
 * buffer the routine reads and never writes holds the node's current cells, exactly (floats as
 * hexadecimal literals), and is const; scratch of local nodes is zeroed before each call, as the
 * runtime does; the function's arrays are named NAME_*, its entry point NAME_model_entry, so
 * exported models link together. */
#include "backend/backend.h"
#include "data/data.h"
#include "numeric/numeric.h"
#include "runtime/routine.h"
#include "tensor/tensor.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT_NAME_MAX 200

/* A text from outside (a label, a shape's axis names) inside a comment of the files: inert. */
static void put_text(cn_sbuf *sb, const char *text) {
  if (text) cn_sbuf_c_comment_text(sb, text, strlen(text));
}

/* One cell as a C initializer of the precision's store type. */
static void put_cell(cn_sbuf *sb, cn_prec prec, const void *cell) {
  switch (prec) {
  case CN_PREC_SINGLE:
  case CN_PREC_DOUBLE: {
    double v = prec == CN_PREC_SINGLE ? (double)*(const float *)cell : *(const double *)cell;
    const char *suffix = prec == CN_PREC_SINGLE ? "f" : "";
    if (isnan(v))
      cn_sbuf_puts(sb, "NAN");
    else if (isinf(v))
      cn_sbuf_puts(sb, v < 0 ? "-INFINITY" : "INFINITY");
    else
      cn_sbuf_printf(sb, "%a%s", v, suffix);
    return;
  }
  case CN_PREC_UINT4X32: {
    const cn_u4x32 *w = cell;
    cn_sbuf_printf(sb, "{{0x%" PRIx32 "u, 0x%" PRIx32 "u, 0x%" PRIx32 "u, 0x%" PRIx32 "u}}",
                   w->v[0], w->v[1], w->v[2], w->v[3]);
    return;
  }
  default: break;
  }
  /* integers, and the bits of half, bfloat16 and fp8 cells */
  uint64_t bits = 0;
  bool negative = false;
  switch (cn_prec_bytes(prec)) {
  case 1: bits = *(const uint8_t *)cell; break;
  case 2: bits = *(const uint16_t *)cell; break;
  case 4:
    if (prec == CN_PREC_INT32) {
      int32_t v = *(const int32_t *)cell;
      negative = v < 0;
      bits = negative ? (uint64_t)(-(int64_t)v) : (uint64_t)v;
    } else {
      bits = *(const uint32_t *)cell;
    }
    break;
  default:
    if (prec == CN_PREC_INT64) {
      int64_t v = *(const int64_t *)cell;
      negative = v < 0;
      bits = negative ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    } else {
      bits = *(const uint64_t *)cell;
    }
  }
  /* the most negative values have no literal of their own: (-MAX - 1) */
  if (negative && prec == CN_PREC_INT32 && bits == (uint64_t)1 << 31)
    cn_sbuf_puts(sb, "(-2147483647 - 1)");
  else if (negative && prec == CN_PREC_INT64 && bits == (uint64_t)1 << 63)
    cn_sbuf_puts(sb, "(-9223372036854775807LL - 1)");
  else
    cn_sbuf_printf(sb, "%s%" PRIu64 "%s", negative ? "-" : "", bits,
                   prec == CN_PREC_INT32      ? ""
                   : prec == CN_PREC_INT64    ? "LL"
                   : cn_prec_bytes(prec) == 8 ? "ULL"
                                              : "u");
}

static bool all_zero(const unsigned char *bytes, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (bytes[i]) return false;
  return true;
}

/* The static array of params[i]: NAME_b<i>, const with the node's cells when the routine only
 * reads it, zero-initialized otherwise (scratch, the input, what the routine computes). */
static cn_status put_buffer(cn_ctx *ctx, cn_sbuf *sb, const char *name, int i,
                            const cn_ll_param *param, bool written) {
  cn_node *node = param->node;
  const cn_prec_info *info = &cn_prec_table[node->prec];
  size_t cells = cn_node_buffer_cells(node);
  bool scratch = node->mode != CN_MEM_MATERIALIZED;
  const unsigned char *data = NULL;
  if (!written && !scratch && !(data = cn_node_host(node, param->merge, CN_HOST_READ)))
    return ctx->status;
  cn_sbuf_puts(sb, "/* ");
  put_text(sb, cn_node_describe(node));
  cn_sbuf_printf(sb, "%s, %zu cells%s */\n", param->merge ? " (merge)" : "", cells,
                 scratch   ? ", scratch"
                 : written ? ", computed"
                           : "");
  if (!data || all_zero(data, cells * info->bytes)) {
    cn_sbuf_printf(sb, "static %s %s_b%d[%zu];\n", info->store_c, name, i, cells ? cells : 1);
    return CN_OK;
  }
  cn_sbuf_printf(sb, "static const %s %s_b%d[%zu] = {", info->store_c, name, i, cells);
  for (size_t c = 0; c < cells; c++) {
    cn_sbuf_puts(sb, c % 8 ? ", " : c ? ",\n  " : "\n  ");
    put_cell(sb, node->prec, data + c * info->bytes);
  }
  cn_sbuf_puts(sb, "\n};\n");
  return CN_OK;
}

/* The copy between the caller's dense array and a node's padded buffer, as a loop nest over
 * the node's dims (a memcpy when the node has no padding). */
static void put_copy(cn_sbuf *sb, const cn_node *node, const char *padded, const char *dense,
                     bool into_padded) {
  int64_t strides[CN_MAX_RANK], offset = 0;
  cn_node_strides(node, strides);
  bool padding = false;
  for (int a = 0; a < node->rank; a++) {
    offset += node->pad[a][0] * strides[a];
    padding = padding || node->pad[a][0] || node->pad[a][1];
  }
  if (!padding) {
    cn_sbuf_printf(sb, "  memcpy(%s, %s, sizeof(float) * %" PRId64 ");\n",
                   into_padded ? padded : dense, into_padded ? dense : padded, cn_node_numel(node));
    return;
  }
  cn_sbuf_puts(sb, "  {\n    int64_t at = 0;\n");
  for (int a = 0; a < node->rank; a++)
    cn_sbuf_printf(sb, "%*sfor (int64_t i%d = 0; i%d < %" PRId64 "; i%d++)\n", 4 + 2 * a, "", a, a,
                   node->dims[a], a);
  cn_sbuf_printf(sb, "%*s", 4 + 2 * node->rank, "");
  if (!into_padded) cn_sbuf_printf(sb, "%s[at++] = ", dense);
  cn_sbuf_printf(sb, "%s[%" PRId64, padded, offset);
  for (int a = 0; a < node->rank; a++) cn_sbuf_printf(sb, " + %" PRId64 " * i%d", strides[a], a);
  cn_sbuf_puts(sb, "]");
  if (into_padded) cn_sbuf_printf(sb, " = %s[at++]", dense);
  cn_sbuf_puts(sb, ";\n");
  cn_sbuf_puts(sb, "  }\n");
}

/* DIR/NAME.EXT through the module's atomic writer: an interrupted export leaves the old file. */
static cn_status write_text(cn_ctx *ctx, const char *dir, const char *name, const char *ext,
                            const cn_sbuf *text) {
  char path[4096];
  if (snprintf(path, sizeof path, "%s/%s.%s", dir, name, ext) >= (int)sizeof path)
    return cn_fail(ctx, CN_ERR_IO, "export: the path %s/%s.%s is too long", dir, name, ext);
  cn_data_writer w;
  cn_status st = cn_data_writer_open(ctx, path, &w);
  if (st != CN_OK) return st;
  if ((st = cn_data_write(ctx, &w, text->data, text->len)) != CN_OK) {
    cn_data_writer_abort(&w);
    return st;
  }
  return cn_data_writer_commit(ctx, &w);
}

static cn_status check_tensors(cn_graph *g, cn_tensor *input, cn_tensor *output, const char *name,
                               const char *dir) {
  cn_ctx *ctx = g->ctx;
  if (!cn_is_c_name(name))
    return cn_fail(ctx, CN_ERR_INVALID,
                   "export: the name '%s' is not a C identifier cannl can use (" CN_C_NAME_RULE
                   "): it names the files and the functions",
                   name ? name : "(null)");
  if (strlen(name) > EXPORT_NAME_MAX) /* NAME_model_entry and NAME_b<i> must fit their buffers */
    return cn_fail(ctx, CN_ERR_INVALID, "export: the name '%.40s...' is longer than %d characters",
                   name, EXPORT_NAME_MAX);
  if (!dir) return cn_fail(ctx, CN_ERR_INVALID, "export \"%s\": no directory", name);
  if (!input || !output || input->g != g || output->g != g)
    return cn_fail(ctx, CN_ERR_INVALID,
                   "export \"%s\": input and output must be tensors of the "
                   "graph",
                   name);
  if (input == output)
    return cn_fail(ctx, CN_ERR_INVALID, "export \"%s\": the input is the output", name);
  const cn_tensor *ends[2] = {input, output};
  for (int k = 0; k < 2; k++)
    if (ends[k]->prec != CN_PREC_SINGLE)
      return cn_fail(ctx, CN_ERR_UNSUPPORTED,
                     "export \"%s\": the %s \"%s\" is %s; NAME_forward takes and gives single "
                     "precision",
                     name, k ? "output" : "input", ends[k]->label, cn_prec_name(ends[k]->prec));
  if (input->kind != CN_TK_DATA && input->kind != CN_TK_BUFFER)
    return cn_fail(ctx, CN_ERR_INVALID,
                   "export \"%s\": the input \"%s\" is computed; it must be a data or buffer "
                   "tensor (the placeholder the model is applied to)",
                   name, input->label);
  return CN_OK;
}

/* The comment line on NAME_forward's arrays (the shapes' axis names are outside text too). */
static void put_shapes(cn_sbuf *sb, const char *name, cn_tensor *input, cn_tensor *output) {
  cn_sbuf_printf(
      sb, " * void %s_forward(const float *in, float *out): in holds %" PRId64 " floats (shape ",
      name, cn_node_numel(input->value));
  put_text(sb, cn_tensor_shape(input));
  cn_sbuf_printf(sb, "), out receives %" PRId64 " (shape ", cn_node_numel(output->value));
  put_text(sb, cn_tensor_shape(output));
  cn_sbuf_putc(sb, ')');
}

/* The header, the source and the function around the routine's entry point. */
static cn_status put_files(cn_ctx *ctx, cn_routine *r, cn_tensor *input, cn_tensor *output,
                           const char *name, const char *dir) {
  const cn_ll_proc *proc = cn_routine_proc(r);
  int in_param = -1, out_param = -1;
  for (int i = 0; i < proc->n_params; i++) {
    if (proc->params[i].merge) continue;
    if (proc->params[i].node == input->value) in_param = i;
    if (proc->params[i].node == output->value) out_param = i;
  }
  /* the input is a terminal (check_tensors): the routine may write its padding margins, never
   * its cells */
  if (in_param < 0 || out_param < 0 || !cn_routine_writes(r, out_param))
    return cn_fail(
        ctx, CN_ERR_INVALID, "export \"%s\": the forward code of \"%s\" %s", name, output->label,
        in_param < 0 ? "does not read the input" : "computes nothing (the output is a terminal)");
  if (proc->n_free_syms > 0)
    return cn_fail(ctx, CN_ERR_INVALID,
                   "export \"%s\": the forward code of \"%s\" reads the static index '%s'; export "
                   "the model applied to a placeholder input",
                   name, output->label, cn_symbol_name(ctx, proc->free_syms[0]));

  cn_sbuf src = {0}, hdr = {0};
  cn_sbuf_printf(&src, "/* %s.c: the forward routine of \"", name);
  put_text(&src, output->label);
  cn_sbuf_puts(&src, "\" from \"");
  put_text(&src, input->label);
  cn_sbuf_puts(&src, "\", exported by cannl.\n");
  put_shapes(&src, name, input, output);
  cn_sbuf_printf(&src,
                 ", row-major.\n"
                 " * Self-contained: cc -std=c11 -c %s.c, link with -lm. Not reentrant (static "
                 "buffers). */\n"
                 "#pragma GCC diagnostic ignored \"-Wunknown-pragmas\"\n"
                 "#define CN_STANDALONE 1 /* the GEMMs' own code, not cannl's library */\n",
                 name);
  cn_sbuf_puts(&src, cn_routine_source(r));
  cn_sbuf_puts(&src, "\n/* ---- the buffers of the entry point, in its order ---- */\n\n");
  cn_status st = CN_OK;
  for (int i = 0; i < proc->n_params && st == CN_OK; i++)
    st = put_buffer(ctx, &src, name, i, &proc->params[i], cn_routine_writes(r, i) || i == in_param);
  cn_sbuf_printf(&src, "\n#include \"%s.h\"\n\nvoid %s_forward(const float *in, float *out) {\n",
                 name, name);
  for (int i = 0; i < proc->n_params; i++)
    if (proc->params[i].node->mode != CN_MEM_MATERIALIZED)
      cn_sbuf_printf(&src, "  memset(%s_b%d, 0, sizeof %s_b%d);\n", name, i, name, i);
  char padded[300];
  snprintf(padded, sizeof padded, "%s_b%d", name, in_param);
  put_copy(&src, input->value, padded, "in", true);
  cn_sbuf_puts(&src, "  void *const buffers[] = {");
  for (int i = 0; i < proc->n_params; i++)
    cn_sbuf_printf(&src, "%s(void *)%s_b%d", i ? ", " : "", name, i);
  cn_sbuf_printf(&src, "};\n  const int64_t syms[1] = {0};\n  %s_model_entry(buffers, syms);\n",
                 name);
  snprintf(padded, sizeof padded, "%s_b%d", name, out_param);
  put_copy(&src, output->value, padded, "out", false);
  cn_sbuf_puts(&src, "}\n");

  cn_sbuf_printf(&hdr, "/* %s.h: the forward routine of \"", name);
  put_text(&hdr, output->label);
  cn_sbuf_printf(&hdr, "\", exported by cannl (%s.c).\n", name);
  put_shapes(&hdr, name, input, output);
  cn_sbuf_printf(&hdr,
                 ", row-major. Not reentrant. */\n"
                 "#ifndef %s_H\n#define %s_H\n\n"
                 "void %s_forward(const float *in, float *out);\n\n#endif\n",
                 name, name, name);
  if (st == CN_OK && (src.failed || hdr.failed))
    st = cn_fail(ctx, CN_ERR_NOMEM, "export \"%s\": out of memory for the source", name);
  if (st == CN_OK) st = write_text(ctx, dir, name, "h", &hdr);
  if (st == CN_OK) st = write_text(ctx, dir, name, "c", &src);
  cn_sbuf_free(&src);
  cn_sbuf_free(&hdr);
  return st;
}

cn_status cn_graph_export_c(cn_graph *g, cn_tensor *input, cn_tensor *output, const char *name,
                            const char *dir) {
  cn_ctx *ctx = g->ctx;
  cn_status st = check_tensors(g, input, output, name, dir);
  if (st != CN_OK) return st;
  cn_asgn *code = cn_graph_forward(g, output);
  if (!code) return ctx->status;
  char routine_name[300];
  snprintf(routine_name, sizeof routine_name, "%s_model", name);
  cn_routine *r = cn_routine_compile(ctx, code, CN_BACKEND_C, routine_name);
  if (!r) return ctx->status;
  st = put_files(ctx, r, input, output, name, dir);
  cn_routine_free(r);
  return st;
}

/* ---- The sampler of a language model ------------------------------------------------------ */

/* The C text of NAME_sample.c after its includes and tables: the draw and the pick of
 * sample.c (cn_text_sample_uniform with numeric/builtins.h's threefry4x32_crypto, and
 * cn_text_sample_pick), statement for statement, so the exported sampler draws the tokens
 * cn_text_sample draws. "@" stands for NAME. */
static const char *const sampler_code =
    "static uint32_t @_rotl(uint32_t x, unsigned r) { return (x << r) | (x >> (32u - r)); }\n"
    "\n"
    "static void @_round(uint32_t x[4], unsigned r0, unsigned r1, unsigned r2, unsigned r3) {\n"
    "  uint32_t t;\n"
    "  x[0] += x[1];\n"
    "  x[1] = @_rotl(x[1], r0) ^ x[0];\n"
    "  x[2] += x[3];\n"
    "  x[3] = @_rotl(x[3], r1) ^ x[2];\n"
    "  t = x[1], x[1] = x[3], x[3] = t;\n"
    "  x[0] += x[1];\n"
    "  x[1] = @_rotl(x[1], r2) ^ x[0];\n"
    "  x[2] += x[3];\n"
    "  x[3] = @_rotl(x[3], r3) ^ x[2];\n"
    "  t = x[1], x[1] = x[3], x[3] = t;\n"
    "}\n"
    "\n"
    "/* the draw of token i: threefry4x32 (20 rounds) keyed by the seed, a double in [0, 1) */\n"
    "static double @_uniform(unsigned long long seed, unsigned long long i) {\n"
    "  const uint32_t key[4] = {(uint32_t)seed, (uint32_t)(seed >> 32), @_KEY2, @_KEY3};\n"
    "  const uint32_t ctr[4] = {(uint32_t)i, (uint32_t)(i >> 32), 0u, 0u};\n"
    "  uint32_t ks[5], x[4];\n"
    "  ks[4] = 0x1BD11BDAu;\n"
    "  for (int k = 0; k < 4; k++) {\n"
    "    ks[k] = key[k];\n"
    "    ks[4] ^= key[k];\n"
    "    x[k] = ctr[k] + ks[k];\n"
    "  }\n"
    "  for (uint32_t s = 1; s <= 5; s++) {\n"
    "    @_round(x, 13, 15, 26, 6);\n"
    "    @_round(x, 17, 29, 16, 24);\n"
    "    @_round(x, 13, 15, 26, 6);\n"
    "    @_round(x, 17, 29, 16, 24);\n"
    "    for (uint32_t k = 0; k < 4; k++) x[k] += ks[(s + k) % 5u];\n"
    "    x[3] += s;\n"
    "  }\n"
    "  return (double)((((uint64_t)x[0] << 32) | x[1]) >> 11) * 0x1p-53;\n"
    "}\n"
    "\n"
    "/* temperature 0: the first largest logit; else softmax((l - max) / temperature) drawn by u "
    "*/\n"
    "static int @_pick(const double *logits, double temperature, double u) {\n"
    "  int best = 0;\n"
    "  for (int k = 0; k < @_VOCAB; k++) {\n"
    "    if (isnan(logits[k])) return -1;\n"
    "    if (logits[k] > logits[best]) best = k;\n"
    "  }\n"
    "  if (temperature <= 0 || isinf(logits[best])) return best;\n"
    "  double sum = 0;\n"
    "  for (int k = 0; k < @_VOCAB; k++) sum += exp((logits[k] - logits[best]) / temperature);\n"
    "  double target = u * sum, cum = 0;\n"
    "  int last = best;\n"
    "  for (int k = 0; k < @_VOCAB; k++) {\n"
    "    double p = exp((logits[k] - logits[best]) / temperature);\n"
    "    if (p <= 0) continue;\n"
    "    cum += p;\n"
    "    last = k;\n"
    "    if (target < cum) return k;\n"
    "  }\n"
    "  return last;\n"
    "}\n"
    "\n"
    "int @_sample(const char *prompt, size_t prompt_len, long long count, double temperature,\n"
    "             unsigned long long seed, char *out) {\n"
    "  static float window[@_WINDOW], logits[@_LOGITS];\n"
    "  double last[@_VOCAB];\n"
    "  out[0] = '\\0';\n"
    "  if (!prompt) prompt = \"\\n\", prompt_len = 1;\n"
    "  if (prompt_len == 0 || count < 0 || !(temperature >= 0) || isinf(temperature)) return -1;\n"
    "  for (size_t k = 0; k < prompt_len; k++)\n"
    "    if (@_ids[(unsigned char)prompt[k]] < 0) return -1;\n"
    "  for (int i = 0; i < @_WINDOW; i++) window[i] = (float)@_ids[(unsigned char)prompt[0]];\n"
    "  for (size_t k = 1; k < prompt_len; k++) {\n"
    "    memmove(window, window + 1, sizeof(float) * (@_WINDOW - 1));\n"
    "    window[@_WINDOW - 1] = (float)@_ids[(unsigned char)prompt[k]];\n"
    "  }\n"
    "  for (long long i = 0; i < count; i++) {\n"
    "    @_forward(window, logits);\n"
    "    for (int k = 0; k < @_VOCAB; k++) last[k] = logits[@_LOGITS - @_VOCAB + k];\n"
    "    int id = @_pick(last, temperature, @_uniform(seed, (unsigned long long)i));\n"
    "    if (id < 0) {\n"
    "      out[0] = '\\0';\n"
    "      return -1;\n"
    "    }\n"
    "    out[i] = (char)@_bytes[id];\n"
    "    memmove(window, window + 1, sizeof(float) * (@_WINDOW - 1));\n"
    "    window[@_WINDOW - 1] = (float)id;\n"
    "  }\n"
    "  out[count] = '\\0';\n"
    "  return 0;\n"
    "}\n"
    "\n"
    "#ifdef @_SAMPLE_MAIN\n"
    "/* @_sample [COUNT [TEMPERATURE [SEED [PROMPT]]]]: prints the sampled text */\n"
    "int main(int argc, char **argv) {\n"
    "  long long count = argc > 1 ? strtoll(argv[1], NULL, 10) : 500;\n"
    "  double temperature = argc > 2 ? strtod(argv[2], NULL) : 1.0;\n"
    "  unsigned long long seed = argc > 3 ? strtoull(argv[3], NULL, 10) : 0;\n"
    "  const char *prompt = argc > 4 ? argv[4] : \"\\n\";\n"
    "  char *out = count >= 0 ? malloc((size_t)count + 1) : NULL;\n"
    "  if (!out || @_sample(prompt, strlen(prompt), count, temperature, seed, out) != 0) {\n"
    "    fprintf(stderr, \"@_sample: a count >= 0, a temperature >= 0 and a prompt of the \"\n"
    "                    \"vocabulary's bytes\\n\");\n"
    "    free(out);\n"
    "    return 1;\n"
    "  }\n"
    "  fputs(out, stdout);\n"
    "  free(out);\n"
    "  return 0;\n"
    "}\n"
    "#endif\n";

/* text with every '@' replaced by name */
static void put_named(cn_sbuf *sb, const char *text, const char *name) {
  for (const char *at; (at = strchr(text, '@'));) {
    cn_sbuf_printf(sb, "%.*s%s", (int)(at - text), text, name);
    text = at + 1;
  }
  cn_sbuf_puts(sb, text);
}

cn_status cn_text_export_sampler(cn_graph *g, const cn_text *t, cn_tensor *input, cn_tensor *logits,
                                 const char *name, const char *dir) {
  cn_ctx *ctx = g->ctx;
  cn_status st = check_tensors(g, input, logits, name, dir);
  if (st == CN_OK) st = cn_text_sample_check(ctx, t, input, logits, "\n", 1);
  if (st != CN_OK) return st;
  int64_t window = cn_node_numel(input->value), n_logits = cn_node_numel(logits->value);
  cn_sbuf src = {0}, hdr = {0};
  cn_sbuf_printf(&src,
                 "/* %s_sample.c: the text sampler of the language model %s_forward (%s.c), "
                 "exported by cannl.\n"
                 " * A window of %" PRId64 " token ids, logits over a vocabulary of %d bytes. "
                 "Build: cc -std=c11 %s.c %s_sample.c -lm\n"
                 " * (-D%s_SAMPLE_MAIN for a main). Not reentrant (static buffers). */\n",
                 name, name, name, window, t->vocab, name, name, name);
  cn_sbuf_printf(&src,
                 "#include \"%s.h\"\n#include \"%s_sample.h\"\n\n#include <math.h>\n"
                 "#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n"
                 "#include <string.h>\n\n",
                 name, name);
  cn_sbuf_printf(&src,
                 "#define %s_WINDOW %" PRId64 "\n#define %s_LOGITS %" PRId64
                 "\n#define %s_VOCAB %d\n#define %s_KEY2 0x%08xu\n#define %s_KEY3 0x%08xu\n\n",
                 name, window, name, n_logits, name, t->vocab, name, CN_SAMPLE_KEY2, name,
                 CN_SAMPLE_KEY3);
  cn_sbuf_printf(&src,
                 "/* the byte of each token id */\nstatic const unsigned char %s_bytes[%d] = {",
                 name, t->vocab);
  for (int k = 0; k < t->vocab; k++)
    cn_sbuf_printf(&src, "%s%u", k % 16 ? ", " : k ? ",\n  " : "\n  ", (unsigned)t->bytes[k]);
  cn_sbuf_printf(&src,
                 "\n};\n/* the token id of each byte, -1 outside the vocabulary */\n"
                 "static const short %s_ids[256] = {",
                 name);
  for (int k = 0; k < 256; k++)
    cn_sbuf_printf(&src, "%s%d", k % 16 ? ", " : k ? ",\n  " : "\n  ", t->ids[k]);
  cn_sbuf_puts(&src, "\n};\n\n");
  put_named(&src, sampler_code, name);
  cn_sbuf_printf(&hdr,
                 "/* %s_sample.h: the text sampler of %s_forward, exported by cannl (%s_sample.c). "
                 "*/\n#ifndef %s_SAMPLE_H\n#define %s_SAMPLE_H\n\n#include <stddef.h>\n\n"
                 "/* count tokens drawn after the prompt (NULL: \"\\n\") into out (count + 1 "
                 "bytes);\n * 0, or -1 with out = \"\" on a bad argument or NaN logits */\n"
                 "int %s_sample(const char *prompt, size_t prompt_len, long long count, "
                 "double temperature,\n"
                 "              unsigned long long seed, char *out);\n\n#endif\n",
                 name, name, name, name, name, name);
  if (src.failed || hdr.failed)
    st = cn_fail(ctx, CN_ERR_NOMEM, "export \"%s\": out of memory for the sampler", name);
  char file[EXPORT_NAME_MAX + 16];
  snprintf(file, sizeof file, "%s_sample", name);
  if (st == CN_OK) st = write_text(ctx, dir, file, "h", &hdr);
  if (st == CN_OK) st = write_text(ctx, dir, file, "c", &src);
  cn_sbuf_free(&src);
  cn_sbuf_free(&hdr);
  return st;
}
