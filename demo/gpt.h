/* nanoGPT's character model on a text corpus (demo/gpt.c): token and position embeddings by
 * gather, n_layer pre-norm transformer blocks (cn_tensor_transformer_block), a final layer norm
 * and the head tied to the token embedding (logits = x wte^T, as nanoGPT ties lm_head to wte),
 * the mean cross-entropy over every position of a batch of random windows (cn_text_draw_windows),
 * AdamW (decoupled weight decay on the parameters of 2 or more axes only) after global-norm
 * gradient clipping, nanoGPT's learning rate (linear warm-up, then a cosine to the minimum over
 * the run's steps), evaluation of the mean loss over batches of either split, checkpoints with
 * resume, and a forward over one window of context tokens for sampling. Shared by
 * examples/gpt.c and bench/bench_gpt.c, so the model and its training step exist once. Only the
 * public API (cannl.h) is used.
 *
 * Invariants: everything a run computes is a function of the configuration (the parameters'
 * counter-based init, step s's windows from (seed, s), the learning rate from s, Adam's state in
 * tensors), so a run resumed from a checkpoint computes what the uninterrupted run does, bit for
 * bit; the sampling model is a second graph of the same context whose parameters are copied from
 * the trained ones by gpt_sampler_sync (the blocks create their parameters per application, so a
 * model of another batch shape is another set of tensors); gpt_destroy releases everything
 * gpt_build created, whether or not it failed. */
#ifndef CANNL_DEMO_GPT_H
#define CANNL_DEMO_GPT_H

#include "cannl.h"

#include <stdbool.h>

#define GPT_DATA_DIR  "/usr/share/games/fortunes"
#define GPT_MAX_EVALS 64 /* evaluations recorded (every eval_interval steps and the last) */

typedef struct {
  int n_layer, n_head;
  int64_t n_embd, context, batch;
  int64_t steps, warmup; /* the run's steps; warm-up steps of the learning rate */
  double lr, min_lr;     /* the cosine goes from lr (after the warm-up) to min_lr at `steps` */
  double beta1, beta2, weight_decay, clip;
  uint64_t seed;          /* the windows' seed (the parameters' init has the graph's seed) */
  const char *data;       /* a file or directory of text (NULL: GPT_DATA_DIR) */
  const char *checkpoint; /* NULL: none; else gpt_save writes it */
  cn_backend_kind backend;
} gpt_config;

/* nanoGPT's CPU character run (config/train_shakespeare_char.py with its README's CPU flags):
 * 4 layers, 4 heads, embedding 128, context 64, batch 12, 2000 steps, warm-up 100, lr 1e-3 to
 * 1e-4, betas (0.9, 0.99), weight decay 0.1, clipping at 1.0, seed 0, generated C. */
gpt_config gpt_defaults(void);

typedef struct {
  gpt_config cfg;
  cn_ctx *ctx;
  cn_graph *g;
  cn_text text;
  cn_tensor *x, *y;  /* token ids and targets [batch; context] (buffers the host fills) */
  cn_tensor *lr;     /* the learning rate of the step (a one-cell buffer the host sets) */
  cn_tensor *logits; /* [batch, context | -> vocab] */
  cn_tensor *loss;   /* the mean cross-entropy of the batch */
  cn_routine *step, *eval;
  int64_t params; /* parameter cells without the position embedding (nanoGPT's count) */
  int64_t steps_done;
  double last_loss; /* the loss of the last step trained */
  /* evaluations so far: after evals_step[i] steps, the mean losses of either split */
  int n_evals;
  int64_t evals_step[GPT_MAX_EVALS];
  double evals_train[GPT_MAX_EVALS], evals_valid[GPT_MAX_EVALS];
  /* the sampling model (gpt_sampler_build): a graph of one window [1; context] whose last block
   * computes the last position only (cn_attention.last_position): logits [1, 1 | -> V] */
  cn_graph *sg;
  cn_tensor *window, *window_logits;
  char message[1280]; /* why a call failed when the context has no message */
} gpt;

/* The message of the last failure: m->message, else the context's. */
const char *gpt_error(const gpt *m);
/* Loads the corpus, builds the model, compiles the training step and the evaluation and
 * initializes the parameters. gpt_destroy releases everything either way. */
cn_status gpt_build(gpt *m, const gpt_config *cfg);
/* nanoGPT's learning rate at a step (0-based): lr (s + 1) / warmup during the warm-up, then
 * min_lr + (lr - min_lr) (1 + cos(pi r)) / 2 with r = (s - warmup) / (steps - warmup). */
double gpt_learning_rate(const gpt_config *cfg, int64_t step);
/* Trains step m->steps_done on its windows (m->last_loss is its loss). */
cn_status gpt_train_step(gpt *m);
/* The mean loss over `batches` batches of a split: the windows of steps 0 .. batches - 1 of
 * (seed, split) for the validation split (as bench_gpt.py), of (seed + 1, split) for the training
 * split (other windows than the training steps'). */
cn_status gpt_evaluate(gpt *m, cn_text_split split, int batches, double *loss);
/* Evaluates both splits and records them after m->steps_done steps. */
cn_status gpt_record_eval(gpt *m, int batches);
/* The checkpoint (cn_graph_state under the tensors' labels; the run's identity, the steps done
 * and the evaluations in the metadata) and its reading, which sets steps_done. */
cn_status gpt_save(gpt *m);
cn_status gpt_resume(gpt *m);
/* Builds the sampling graph (once) and copies the trained parameters into it. */
cn_status gpt_sampler_sync(gpt *m);
/* count characters by cn_text_sample from a window of newlines (m->window), after
 * gpt_sampler_sync; out holds count + 1 bytes. */
cn_status gpt_sample(gpt *m, int64_t count, double temperature, uint64_t seed, char *out);
void gpt_destroy(gpt *m);

#endif
