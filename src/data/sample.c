/* Language-model scaffolding over a text corpus (include/cannl.h, "Sampling and the bigram
 * baseline"): a deterministic, seeded temperature sampler that runs a model's compiled forward
 * routine token by token over a sliding window, and the closed-form validation loss of the bigram
 * model, the baseline a character model must beat.
 *
 * Invariants: the forward routine is compiled once per cn_text_sample call and run once per
 * token (the window is rewritten in place, nothing is recompiled); the draw of token i is
 * cn_text_sample_uniform(seed, i), a pure function of (seed, i), so the text depends on the seed,
 * the prompt, the temperature and the model's logits only; the pick reads logits as doubles with
 * the arithmetic written out in cn_text_sample_pick, which the exported sampler
 * (cn_text_export_sampler in export.c) repeats statement for statement, so both produce the same
 * text from the same logits. */
#include "data/data.h"
#include "numeric/numeric.h"
#include "tensor/tensor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- The draw and the pick ---------------------------------------------------------------- */

double cn_text_sample_uniform(uint64_t seed, uint64_t i) {
  cn_u4x32 key = {{(uint32_t)seed, (uint32_t)(seed >> 32), CN_SAMPLE_KEY2, CN_SAMPLE_KEY3}};
  cn_u4x32 ctr = {{(uint32_t)i, (uint32_t)(i >> 32), 0, 0}};
  cn_u4x32 r = cn_threefry4x32_crypto(key, ctr);
  /* the top 53 bits of the first two words: a double in [0, 1), every value equally likely */
  return (double)((((uint64_t)r.v[0] << 32) | r.v[1]) >> 11) * 0x1p-53;
}

int cn_text_sample_pick(const double *logits, int vocab, double temperature, double u) {
  int best = 0;
  for (int k = 0; k < vocab; k++) {
    if (isnan(logits[k])) return -1;
    if (logits[k] > logits[best]) best = k;
  }
  if (temperature <= 0 || isinf(logits[best])) return best;
  /* softmax((l - max) / temperature): the largest term is 1, so the sum is in [1, vocab] */
  double sum = 0;
  for (int k = 0; k < vocab; k++) sum += exp((logits[k] - logits[best]) / temperature);
  double target = u * sum, cum = 0;
  int last = best;
  for (int k = 0; k < vocab; k++) {
    double p = exp((logits[k] - logits[best]) / temperature);
    if (p <= 0) continue;
    cum += p;
    last = k;
    if (target < cum) return k;
  }
  return last; /* rounding left target at or past the sum: the last token with a chance */
}

/* ---- The sampler -------------------------------------------------------------------------- */

/* The checks of cn_text_sample and the exported sampler: the prompt's bytes in the vocabulary,
 * the input a terminal, the logits' last axis the vocabulary. */
cn_status cn_text_sample_check(cn_ctx *ctx, const cn_text *t, cn_tensor *input, cn_tensor *logits,
                               const char *prompt, size_t prompt_len) {
  if (!t || !t->tokens || !input || !logits)
    return cn_fail(ctx, CN_ERR_INVALID, "sample: no corpus, input or logits");
  if (input->kind != CN_TK_DATA && input->kind != CN_TK_BUFFER)
    return cn_fail(ctx, CN_ERR_INVALID,
                   "sample: the input \"%s\" is computed; it must be a data or buffer tensor (a "
                   "placeholder holding the window of token ids)",
                   input->label);
  cn_node *in = cn_tensor_value(input), *out = in ? cn_tensor_value(logits) : NULL;
  if (!out) return ctx->status;
  int rank = cn_node_rank(out);
  int64_t last = rank > 0 ? cn_node_dim(out, rank - 1) : 1;
  if (last != t->vocab)
    return cn_fail(ctx, CN_ERR_INVALID,
                   "sample: the logits \"%s\" (shape %s) end in an axis of %lld; the corpus's "
                   "vocabulary has %d tokens",
                   logits->label, cn_tensor_shape(logits), (long long)last, t->vocab);
  for (size_t k = 0; prompt && k < prompt_len; k++)
    if (t->ids[(unsigned char)prompt[k]] < 0)
      return cn_fail(ctx, CN_ERR_INVALID,
                     "sample: byte %zu of the prompt (0x%02x) does not occur in the corpus, so it "
                     "has no token id",
                     k, (unsigned)(unsigned char)prompt[k]);
  if (!prompt || prompt_len == 0)
    return cn_fail(ctx, CN_ERR_INVALID, "%s",
                   "sample: the prompt is empty; it needs at least one byte to fill the window");
  return CN_OK;
}

cn_status cn_text_sample(cn_graph *g, const cn_text *t, cn_tensor *input, cn_tensor *logits,
                         cn_backend_kind backend, const cn_sample_options *o, char *out) {
  cn_ctx *ctx = g->ctx;
  if (!o || !out) return cn_fail(ctx, CN_ERR_INVALID, "sample: no options or no output buffer");
  const char *prompt = o->prompt ? o->prompt : "\n";
  size_t prompt_len = o->prompt ? o->prompt_len : 1;
  if (o->count < 0 || !(o->temperature >= 0) || isinf(o->temperature))
    return cn_fail(ctx, CN_ERR_INVALID,
                   "sample: count %lld and temperature %g; the count is at least 0 and the "
                   "temperature finite and at least 0 (0: the most likely token)",
                   (long long)o->count, o->temperature);
  cn_status st = cn_text_sample_check(ctx, t, input, logits, prompt, prompt_len);
  if (st != CN_OK) return st;
  cn_node *in = cn_tensor_value(input), *lg = cn_tensor_value(logits);
  size_t window = (size_t)cn_node_numel(in), n_logits = (size_t)cn_node_numel(lg);
  cn_asgn *code = cn_graph_forward(g, logits);
  if (!code) return ctx->status;
  cn_routine *r = cn_routine_compile(ctx, code, backend, "sample");
  if (!r) return ctx->status;
  double *w = cn_malloc(ctx, sizeof *w * (window + n_logits));
  if (!w) {
    cn_routine_free(r);
    return CN_ERR_NOMEM;
  }
  double *l = w + window;
  /* the window: the prompt's first token, then the prompt shifted in byte by byte, so its end
   * is the prompt (a prompt longer than the window keeps its last bytes) */
  for (size_t i = 0; i < window; i++) w[i] = t->ids[(unsigned char)prompt[0]];
  for (size_t k = 1; k < prompt_len; k++) {
    memmove(w, w + 1, sizeof *w * (window - 1));
    w[window - 1] = t->ids[(unsigned char)prompt[k]];
  }
  for (int64_t i = 0; i < o->count && st == CN_OK; i++) {
    st = cn_node_set_values(in, false, w, window);
    if (st == CN_OK) st = cn_routine_run(r);
    if (st == CN_OK) st = cn_node_get_values(lg, false, l, n_logits);
    if (st != CN_OK) break;
    int id = cn_text_sample_pick(l + n_logits - (size_t)t->vocab, t->vocab, o->temperature,
                                 cn_text_sample_uniform(o->seed, (uint64_t)i));
    if (id < 0) {
      st = cn_fail(ctx, CN_ERR_RUNTIME, "sample: the logits \"%s\" of token %lld hold a NaN",
                   logits->label, (long long)i);
      break;
    }
    out[i] = (char)t->bytes[id];
    memmove(w, w + 1, sizeof *w * (window - 1));
    w[window - 1] = id;
  }
  out[st == CN_OK ? o->count : 0] = '\0';
  free(w);
  cn_routine_free(r);
  return st;
}

/* ---- The bigram baseline ------------------------------------------------------------------ */

cn_status cn_text_bigram_loss(cn_ctx *ctx, const cn_text *t, cn_text_split split, double *loss) {
  if (!t || !t->tokens || !loss)
    return cn_fail(ctx, CN_ERR_INVALID, "bigram loss: no corpus or no result");
  if (split != CN_TEXT_TRAIN && split != CN_TEXT_VALID)
    return cn_fail(ctx, CN_ERR_INVALID, "bigram loss: split %d is neither train nor validation",
                   (int)split);
  int64_t lo = split == CN_TEXT_TRAIN ? 0 : t->train;
  int64_t hi = split == CN_TEXT_TRAIN ? t->train : t->count;
  if (t->train < 2 || hi - lo < 2)
    return cn_fail(ctx, CN_ERR_INVALID,
                   "bigram loss: the training split holds %lld tokens and the %s split %lld; "
                   "each needs at least 2 (one pair)",
                   (long long)t->train, split == CN_TEXT_TRAIN ? "training" : "validation",
                   (long long)(hi - lo));
  size_t v = (size_t)t->vocab;
  int64_t *pairs = cn_calloc(ctx, v * v + v, sizeof *pairs), *firsts = pairs + v * v;
  if (!pairs) return CN_ERR_NOMEM;
  for (int64_t i = 0; i + 1 < t->train; i++) {
    pairs[t->tokens[i] * v + t->tokens[i + 1]]++;
    firsts[t->tokens[i]]++;
  }
  /* add-one (Laplace) smoothing: P(b | a) = (pairs(a, b) + 1) / (firsts(a) + vocab), so a pair
   * the training split never shows costs a finite loss */
  double sum = 0;
  for (int64_t i = lo; i + 1 < hi; i++) {
    size_t a = t->tokens[i], b = t->tokens[i + 1];
    sum -= log((double)(pairs[a * v + b] + 1) / (double)(firsts[a] + (int64_t)v));
  }
  free(pairs);
  *loss = sum / (double)(hi - lo - 1);
  return CN_OK;
}
