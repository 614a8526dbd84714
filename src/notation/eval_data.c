/* The evaluator's services floor (eval_services.h: it may include the services' and the base's
 * headers): data files. The builtins dataset (arrays of
 * IDX or .npy files shown as a cn_dataset's tensors), load (one array as a data tensor) and
 * restore (a checkpoint read back, or a fresh start), text_windows (batches of windows of a text
 * corpus, cn_data_load_text, written by the host as a data set's epochs are), bigram_loss,
 * vocab_size and sample over a corpus (cn_text_bigram_loss, cn_text_sample), and the work of
 * the statements shuffle, checkpoint and save_npy on the library's data API (include/cannl.h,
 * "Data files and checkpoints").
 *
 * A data set's nodes are written by the host (cn_dataset_begin_epoch), not by code: the
 * interpreter keeps the data sets the script made, each with its writer (write_set), and before
 * any routine runs the base writes epoch 0's order into those not written yet
 * (nt_begin_datasets), so a set the script never shuffles (a test set) needs no statement.
 * shuffle writes another epoch's order.
 *
 * Invariants: every array loaded is freed or handed to a data set (which then owns its cells) on
 * every path; every failure is a positioned message (the library's, naming the file, re-issued
 * at the argument). */
#include "notation/eval_services.h"

#include "data/data.h"
#include "dist/dist.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- Files ---------------------------------------------------------------------------------- */

/* The string positional argument k (a file name), or NULL after a message. */
static const char *file_argument(nt_interp *I, const nt_call *c, int k) {
  nt_value *v = c->a->pos[k];
  if (v->kind == NT_V_STR) return v->str;
  return nt_fail(I, c->a->pos_at[k], "%s expects a file name (a string), found %s", c->name,
                 nt_kind_name(v->kind)),
         NULL;
}

/* The labeled integer ~name (dflt when absent), at least lo; false after a message. */
static bool int_option(nt_interp *I, const nt_call *c, const char *name, int64_t dflt, int64_t lo,
                       int64_t *out) {
  cn_nt_pos at;
  nt_value *v = nt_labeled_at(c->a, name, &at);
  *out = dflt;
  if (!v) return true;
  if (!nt_as_int(I, v, at, out)) return false;
  if (*out < lo)
    return nt_fail(I, at, "%s: ~%s is %lld; it is at least %lld", c->name, name, (long long)*out,
                   (long long)lo),
           false;
  return true;
}

/* A file's array with an axis of size 0 (a valid file, NumPy's shape (3, 0)): a positioned
 * refusal naming the file and the axis, for the builtins that need cells (`why`); true when
 * every axis has cells. */
static bool has_cells(nt_interp *I, const nt_call *c, int k, const cn_array *a, const char *why) {
  for (int ax = 0; ax < a->rank; ax++)
    if (a->dims[ax] == 0)
      return nt_fail(I, c->a->pos_at[k],
                     "%s holds an empty array: axis %d of its %d has size 0, and %s",
                     c->a->pos[k]->str, ax, a->rank, why),
             false;
  return true;
}

/* ---- dataset -------------------------------------------------------------------------------- */

static cn_status write_set(nt_interp *I, const nt_dataset *s, uint64_t e);

/* Records a data set of the script (its tensors found by shuffle, written by
 * nt_begin_datasets through write_set). */
static bool add_dataset(nt_interp *I, cn_dataset *d, nt_text_set *text, int n) {
  if (!cn_arena_grow(I->ctx, (void **)&I->datasets, &I->cap_datasets, I->n_datasets + 1,
                     sizeof *I->datasets))
    return false;
  I->datasets[I->n_datasets++] = (nt_dataset){d, text, n, false, write_set};
  return true;
}

/* The files' arrays, each cut to its first `limit` examples (0: all) and, with channels, given
 * a trailing axis of 1 when of rank 3 or more; false after a positioned message. */
static bool load_arrays(nt_interp *I, const nt_call *c, int64_t limit, bool channels,
                        cn_array *arrays) {
  for (int k = 0; k < c->a->n_pos; k++) {
    const char *path = file_argument(I, c, k);
    if (!path) return false;
    if (cn_data_load(I->ctx, path, &arrays[k]) != CN_OK)
      return nt_fail_here(I, c->a->pos_at[k]), false;
    cn_array *a = &arrays[k];
    if (a->rank < 1)
      return nt_fail(I, c->a->pos_at[k],
                     "%s holds a scalar: a data set's arrays hold examples along their axis 0",
                     path),
             false;
    if (!has_cells(I, c, k, a, "a data set needs at least one example of at least one cell"))
      return false;
    if (limit > a->dims[0])
      return nt_fail(I, c->a->pos_at[k], "%s has %lld examples; ~limit asks for %lld", path,
                     (long long)a->dims[0], (long long)limit),
             false;
    if (limit > 0) a->dims[0] = limit; /* row-major: the first examples are a prefix */
    if (!channels || a->rank < 3) continue;
    if (a->rank == CN_MAX_RANK)
      return nt_fail(I, c->a->pos_at[k],
                     "%s has %d axes: ~channels:1 cannot add one (an array has at most %d)", path,
                     a->rank, CN_MAX_RANK),
             false;
    a->dims[a->rank++] = 1;
  }
  return true;
}

/* dataset ~batch_size:N [~shuffle:B ~seed:S ~limit:N ~channels:1] "file" ...: a cn_dataset of
 * the files' arrays; its tensors, as a tuple (one file: the tensor). */
nt_value *nt_builtin_dataset(nt_interp *I, const nt_call *c) {
  static const char *const known[] = {"batch_size", "shuffle", "seed", "limit", "channels"};
  const nt_args *a = c->a;
  int64_t batch, seed, limit, channels;
  cn_nt_pos shuffle_at, channels_at;
  nt_value *shuffle = nt_labeled_at(a, "shuffle", &shuffle_at);
  nt_labeled_at(a, "channels", &channels_at);
  if (!nt_known_labels(I, c, 5, known)) return NULL;
  if (a->n_pos < 1 || !nt_labeled(a, "batch_size"))
    return nt_fail(I, c->at, "%s",
                   "dataset takes ~batch_size:N (and ~shuffle, ~seed, ~limit, ~channels), then "
                   "one to eight file names");
  if (!int_option(I, c, "batch_size", 1, 1, &batch) || !int_option(I, c, "seed", 0, 0, &seed) ||
      !int_option(I, c, "limit", 0, 1, &limit) || !int_option(I, c, "channels", 0, 1, &channels))
    return NULL;
  if (shuffle && shuffle->kind != NT_V_BOOL)
    return nt_fail(I, shuffle_at, "dataset: ~shuffle expects a boolean, found %s",
                   nt_kind_name(shuffle->kind));
  if (channels > 1) /* given: int_option's default is 0 */
    return nt_fail(I, channels_at, "%s",
                   "dataset: ~channels:1 adds a channel axis of size 1; other sizes would need "
                   "the channels in the file");
  cn_array arrays[NT_MAX_ARGS];
  memset(arrays, 0, sizeof arrays);
  cn_dataset *d = NULL;
  if (load_arrays(I, c, limit, channels == 1, arrays)) {
    d = cn_dataset_create(I->g, "dataset", a->n_pos, arrays, batch, shuffle && shuffle->b,
                          (uint64_t)seed);
    if (!d) nt_fail_here(I, c->at);
  }
  for (int k = 0; k < a->n_pos; k++) cn_array_free(&arrays[k]); /* emptied when d took them */
  if (!d || !add_dataset(I, d, NULL, a->n_pos)) return NULL;
  if (a->n_pos == 1) return nt_tensor_value(I, cn_dataset_tensor(d, 0));
  nt_value *v = nt_mk(I, NT_V_LIST);
  if (!v || !(v->items = cn_alloc(I->ctx, sizeof *v->items * (size_t)a->n_pos))) return NULL;
  for (int k = 0; k < a->n_pos; k++)
    if (!(v->items[k] = nt_tensor_value(I, cn_dataset_tensor(d, k)))) return NULL;
  v->n = a->n_pos;
  v->tuple = true;
  return v;
}

/* ---- text_windows --------------------------------------------------------------------------- */

/* A text corpus (cn_text) and the two tensors its windows are written into: inputs and
 * next-token targets, int32 [batch] -> [context]. */
struct nt_text_set {
  cn_text corpus;
  cn_tensor *t[2];
  int64_t batch, context;
  uint64_t seed;
  cn_text_split split;
};

const cn_text *nt_text_set_corpus(const nt_text_set *s) {
  return &s->corpus;
}

static void free_text_set(void *arg) {
  cn_text_free(&((nt_text_set *)arg)->corpus);
}

/* The windows of step `step` written into the set's two nodes (the graph materialized). */
static cn_status write_windows(cn_ctx *ctx, cn_graph *g, nt_text_set *s, uint64_t step) {
  cn_status st = cn_graph_materialize(g);
  if (st != CN_OK) return st;
  size_t cells = (size_t)(s->batch * s->context);
  int32_t *xy = cn_malloc(ctx, 2 * cells * sizeof *xy);
  if (!xy) return CN_ERR_NOMEM;
  st = cn_text_draw_windows(ctx, &s->corpus, s->split, s->seed, step, s->batch, s->context, xy,
                            xy + cells);
  for (int k = 0; k < 2 && st == CN_OK; k++)
    st = cn_node_set_cells(s->t[k]->value, false, xy + (size_t)k * cells, cells);
  free(xy);
  return st;
}

/* The int32 tensor [batch] -> [context] of a text set, a buffer the host writes. */
static cn_tensor *window_tensor(cn_graph *g, const char *name, int64_t batch, int64_t context) {
  cn_dims dims = {{1, &batch, NULL}, CN_AXES_NONE, {1, &context, NULL}};
  cn_shape_row_spec rows[CN_N_ROWS];
  return cn_tensor_new(g, name, CN_TK_BUFFER, CN_PREC_INT32, cn_dims_rows(&dims, rows),
                       CN_SL_TERMINAL, NULL, 0, NULL);
}

/* text_windows ~batch_size:B ~context:T [~seed:S ~valid:B] "path" ...: the text corpus of the
 * files and directories (cn_data_load_text) and the tuple (x, y) of a batch of its windows:
 * tokens and next tokens, step 0's before anything runs, step E's after `shuffle x ~epoch:E`. */
nt_value *nt_builtin_text_windows(nt_interp *I, const nt_call *c) {
  static const char *const known[] = {"batch_size", "context", "seed", "valid"};
  const nt_args *a = c->a;
  int64_t batch, context, seed;
  cn_nt_pos valid_at;
  nt_value *valid = nt_labeled_at(a, "valid", &valid_at);
  if (!nt_known_labels(I, c, 4, known)) return NULL;
  if (a->n_pos < 1 || !nt_labeled(a, "batch_size") || !nt_labeled(a, "context"))
    return nt_fail(I, c->at, "%s",
                   "text_windows takes ~batch_size:N ~context:N (and ~seed, ~valid), then one to "
                   "eight text files or directories");
  if (!int_option(I, c, "batch_size", 1, 1, &batch) ||
      !int_option(I, c, "context", 1, 1, &context) || !int_option(I, c, "seed", 0, 0, &seed))
    return NULL;
  if (valid && valid->kind != NT_V_BOOL)
    return nt_fail(I, valid_at, "text_windows: ~valid expects a boolean, found %s",
                   nt_kind_name(valid->kind));
  const char *paths[NT_MAX_ARGS];
  for (int k = 0; k < a->n_pos; k++)
    if (!(paths[k] = file_argument(I, c, k))) return NULL;
  nt_text_set *s = cn_alloc(I->ctx, sizeof *s);
  if (!s) return NULL;
  *s = (nt_text_set){.batch = batch,
                     .context = context,
                     .seed = (uint64_t)seed,
                     .split = valid && valid->b ? CN_TEXT_VALID : CN_TEXT_TRAIN};
  if (cn_data_load_text(I->ctx, a->n_pos, paths, &s->corpus) != CN_OK)
    return nt_fail_here(I, c->at);
  if (!cn_ctx_add_cleanup(I->ctx, free_text_set, s)) {
    cn_text_free(&s->corpus);
    return NULL;
  }
  /* step 0's windows drawn once here, so that a context or batch the split cannot hold fails at
   * this call, with the library's message, rather than when the first routine runs */
  size_t cells = (size_t)batch * (size_t)context;
  int32_t *xy = cn_malloc(I->ctx, 2 * cells * sizeof *xy);
  if (!xy) return NULL;
  cn_status st = cn_text_draw_windows(I->ctx, &s->corpus, s->split, s->seed, 0, batch, context, xy,
                                      xy + cells);
  free(xy);
  if (st != CN_OK) return nt_fail_here(I, c->at);
  if (!(s->t[0] = window_tensor(I->g, "text_x", batch, context)) ||
      !(s->t[1] = window_tensor(I->g, "text_y", batch, context)))
    return nt_fail_here(I, c->at);
  if (!add_dataset(I, NULL, s, 2)) return NULL;
  nt_value *v = nt_mk(I, NT_V_LIST);
  if (!v || !(v->items = cn_alloc(I->ctx, sizeof *v->items * 2))) return NULL;
  for (int k = 0; k < 2; k++)
    if (!(v->items[k] = nt_tensor_value(I, s->t[k]))) return NULL;
  v->n = 2;
  v->tuple = true;
  return v;
}

/* The corpus an argument names: a tensor of text_windows (its corpus and split), or a string
 * (cn_text_from_bytes of its bytes, held in *own, which the caller frees; the validation
 * split). False after a message. */
static bool corpus_argument(nt_interp *I, const nt_call *c, nt_value *v, cn_nt_pos at, cn_text *own,
                            const cn_text **t, cn_text_split *split) {
  memset(own, 0, sizeof *own);
  if (v->kind == NT_V_STR) {
    if (cn_text_from_bytes(I->ctx, v->str, strlen(v->str), own) != CN_OK)
      return nt_fail_here(I, at), false;
    *t = own;
    *split = CN_TEXT_VALID;
    return true;
  }
  cn_tensor *x = nt_tensor_of(I, v, at);
  if (!x) return false;
  for (int i = 0; i < I->n_datasets; i++) {
    nt_text_set *s = I->datasets[i].text;
    if (s && (s->t[0] == x || s->t[1] == x)) {
      *t = &s->corpus;
      *split = s->split;
      return true;
    }
  }
  return nt_fail(I, at,
                 "%s: \"%s\" (#%d) is not a tensor of text_windows; a corpus is a tensor of "
                 "text_windows or a string",
                 c->name, x->label, x->id),
         false;
}

/* The corpus of a builtin's single positional argument (corpus_argument); `usage` is the
 * message for another arity. */
static bool single_corpus(nt_interp *I, const nt_call *c, const char *usage, cn_text *own,
                          const cn_text **t, cn_text_split *split) {
  if (c->a->n_pos != 1 || c->a->n_lab != 0) return nt_fail(I, c->at, "%s", usage), false;
  return corpus_argument(I, c, c->a->pos[0], c->a->pos_at[0], own, t, split);
}

/* bigram_loss X: the cross-entropy of the add-one bigram model of X's corpus, fitted on the
 * training split, over the split X draws from (a string: its validation split;
 * cn_text_bigram_loss); a host number. */
nt_value *nt_builtin_bigram_loss(nt_interp *I, const nt_call *c) {
  cn_text own;
  const cn_text *t;
  cn_text_split split;
  double loss;
  if (!single_corpus(I, c, "bigram_loss takes one tensor of text_windows or a string", &own, &t,
                     &split))
    return NULL;
  cn_status st = cn_text_bigram_loss(I->ctx, t, split, &loss);
  cn_text_free(&own);
  return st == CN_OK ? nt_num(I, loss, false) : nt_fail_here(I, c->at);
}

/* vocab_size X: the number of tokens of X's corpus (a tensor of text_windows, or a string's
 * distinct bytes); a host integer. */
nt_value *nt_builtin_vocab_size(nt_interp *I, const nt_call *c) {
  cn_text own;
  const cn_text *t;
  cn_text_split split;
  if (!single_corpus(I, c, "vocab_size takes one tensor of text_windows or a string", &own, &t,
                     &split))
    return NULL;
  int vocab = t->vocab;
  cn_text_free(&own);
  return nt_num(I, vocab, true);
}

/* sample logits ~input:T ~text:X ~count:N [~temperature:F ~seed:S ~prompt:"..."]: N bytes drawn
 * by cn_text_sample from the model logits computed from the placeholder T, over the vocabulary
 * of X's corpus (a tensor of text_windows, or a string whose bytes are the vocabulary); the
 * model's parameters are initialized first when nothing did. A string. */
nt_value *nt_builtin_sample(nt_interp *I, const nt_call *c) {
  static const char *const known[] = {"input", "text", "count", "temperature", "seed", "prompt"};
  const nt_args *a = c->a;
  cn_nt_pos input_at, text_at, temperature_at, prompt_at;
  nt_value *input = nt_labeled_at(a, "input", &input_at),
           *text = nt_labeled_at(a, "text", &text_at),
           *temperature = nt_labeled_at(a, "temperature", &temperature_at),
           *prompt = nt_labeled_at(a, "prompt", &prompt_at);
  if (!nt_known_labels(I, c, 6, known)) return NULL;
  /* a statement in a loop body is elaborated once, so a text drawn there would be printed again
   * at every step, never following the training */
  if (I->n_bound > 0)
    return nt_fail(I, c->at, "%s",
                   "sample draws its text once, where it is evaluated: inside a loop body its "
                   "text would be the first step's at every step; sample after the loop");
  if (a->n_pos != 1 || !input || !text || !nt_labeled(a, "count"))
    return nt_fail(I, c->at, "%s",
                   "sample takes the logits, ~input:PLACEHOLDER ~text:X (a tensor of "
                   "text_windows or a string) ~count:N, and optionally ~temperature:F ~seed:S "
                   "~prompt:\"...\"");
  int64_t count, seed;
  if (!int_option(I, c, "count", 0, 0, &count) || !int_option(I, c, "seed", 0, 0, &seed))
    return NULL;
  if (temperature && temperature->kind != NT_V_NUM)
    return nt_fail(I, temperature_at, "sample: ~temperature expects a number, found %s",
                   nt_kind_name(temperature->kind));
  if (prompt && prompt->kind != NT_V_STR)
    return nt_fail(I, prompt_at, "sample: ~prompt expects a string, found %s",
                   nt_kind_name(prompt->kind));
  cn_tensor *in = nt_tensor_of(I, input, input_at);
  cn_tensor *logits = in ? nt_tensor_of(I, a->pos[0], a->pos_at[0]) : NULL;
  if (!logits || !nt_materialize(I, c->at)) return NULL;
  cn_asgn *init = cn_graph_init_params(I->g, logits);
  if (!init) return nt_fail_here(I, c->at);
  if (!nt_asgn_empty(init) && !nt_run_asgn(I, init, NULL, c->at)) return NULL;
  cn_sample_options o = {count, temperature ? temperature->num : 1.0, (uint64_t)seed,
                         prompt ? prompt->str : NULL, prompt ? strlen(prompt->str) : 0};
  nt_value *v = nt_mk(I, NT_V_STR);
  char *out = v ? cn_alloc(I->ctx, (size_t)count + 1) : NULL;
  cn_text own;
  const cn_text *t;
  cn_text_split split;
  if (!out || !corpus_argument(I, c, text, text_at, &own, &t, &split)) return NULL;
  cn_status st = cn_text_sample(I->g, t, in, logits, I->opts.backend, &o, out);
  cn_text_free(&own);
  if (st != CN_OK) return nt_fail_here(I, c->at);
  v->str = out;
  return v;
}

/* The tensor k of a data set or text set. */
static cn_tensor *set_tensor(const nt_dataset *s, int k) {
  return s->d ? cn_dataset_tensor(s->d, k) : s->text->t[k];
}

/* The set's writer (nt_dataset.write): epoch (step) e's order (windows) into its nodes. */
static cn_status write_set(nt_interp *I, const nt_dataset *s, uint64_t e) {
  return s->d ? cn_dataset_begin_epoch(s->d, e) : write_windows(I->ctx, I->g, s->text, e);
}

bool nt_shuffle(nt_interp *I, cn_tensor *t, int64_t epoch, cn_nt_pos at) {
  for (int i = 0; i < I->n_datasets; i++)
    for (int k = 0; k < I->datasets[i].n; k++) {
      if (set_tensor(&I->datasets[i], k) != t) continue;
      return nt_materialize(I, at) && nt_begin_set(I, &I->datasets[i], (uint64_t)epoch, at);
    }
  return nt_fail(I, at,
                 "shuffle: \"%s\" (#%d) is not a tensor of a data set (made by dataset) or of "
                 "text_windows",
                 t->label, t->id),
         false;
}

/* ---- load ----------------------------------------------------------------------------------- */

/* The largest integer below which every integer is a double (2^53). */
#define EXACT_DOUBLE ((uint64_t)1 << 53)

/* The most cells load reads (2^26): each passes through a double, and the data tensor holds
 * them again, so a file's array costs about 16 bytes a cell (issue 27: a 0.5 MB gzip file of
 * 2^29 bytes took 8.9 GB). Refused from the file's header, before the cells are read. */
#define LOAD_MAX_CELLS ((size_t)1 << 26)

/* load "file": the file's array as a data tensor of its precision, every axis an output axis.
 * Data tensors hold doubles until their node is written: exact for every precision a file can
 * hold, except 64-bit integers of magnitude 2^53 or more, which are refused. */
nt_value *nt_builtin_load(nt_interp *I, const nt_call *c) {
  if (c->a->n_pos != 1 || c->a->n_lab != 0)
    return nt_fail(I, c->at, "%s", "load takes one file name");
  const char *path = file_argument(I, c, 0);
  cn_array a = {0};
  if (!path || !(path = nt_output_path(I, path, false, c->a->pos_at[0]))) return NULL;
  if (cn_data_load_at_most(I->ctx, path, LOAD_MAX_CELLS,
                           "load's limit: its cells pass through doubles; dataset reads larger "
                           "arrays",
                           &a) != CN_OK)
    return nt_fail_here(I, c->a->pos_at[0]);
  if (!has_cells(I, c, 0, &a, "a tensor has at least one cell")) return NULL;
  int64_t n = cn_array_numel(&a);
  size_t bytes = cn_prec_bytes(a.prec);
  double *values = cn_malloc(I->ctx, sizeof *values * (size_t)n);
  nt_value *result = NULL;
  bool wide = a.prec == CN_PREC_INT64 || a.prec == CN_PREC_UINT64;
  int64_t i = 0;
  for (; values && i < n; i++) {
    values[i] = cn_prec_cell_to_double(a.prec, (const char *)a.cells + (size_t)i * bytes);
    if (wide && fabs(values[i]) >= (double)EXACT_DOUBLE) break;
  }
  if (values && i < n) {
    result = nt_fail(I, c->a->pos_at[0],
                     "%s: cell %lld (%.17g) is not exact as a double: load reads integers of "
                     "magnitude below 2^53",
                     path, (long long)i, values[i]);
  } else if (values) {
    cn_dims dims = {CN_AXES_NONE, CN_AXES_NONE, {a.rank, a.dims, NULL}};
    cn_prec graph_prec = I->g->prec;
    cn_graph_set_prec(I->g, a.prec); /* the data tensor takes the graph's precision */
    cn_tensor *t = cn_tensor_data(I->g, "load", &dims, values, (size_t)n);
    cn_graph_set_prec(I->g, graph_prec);
    result = t ? nt_tensor_value(I, t) : nt_fail_here(I, c->at);
  }
  free(values);
  cn_array_free(&a);
  return result;
}

/* ---- Checkpoints ---------------------------------------------------------------------------- */

/* The training state of loss (cn_graph_state) in *out (arena); the count, -1 after a message. */
static int training_state(nt_interp *I, cn_tensor *loss, cn_named_node **out, cn_nt_pos at) {
  int n = cn_graph_state(I->g, loss, NULL, 0);
  if (n < 0) return nt_fail_here(I, at), -1;
  if (!(*out = cn_alloc(I->ctx, sizeof **out * (size_t)(n > 0 ? n : 1)))) return -1;
  return cn_graph_state(I->g, loss, *out, n);
}

bool nt_checkpoint(nt_interp *I, cn_tensor *loss, const char *path, int64_t epoch, cn_nt_pos at) {
  cn_named_node *state;
  int n = training_state(I, loss, &state, at);
  if (n < 0) return false;
  char text[32];
  snprintf(text, sizeof text, "%lld", (long long)epoch);
  const cn_metadata_entry meta = {"epoch", text};
  /* Under MPI every rank holds the same state: rank 0 writes (atomically), the others wait for
   * it, so that a restore on any rank reads the whole file. */
  cn_status status =
      cn_dist_writes_files() ? cn_data_save_safetensors(I->ctx, path, n, state, 1, &meta) : CN_OK;
  if (cn_dist_root_status(I->ctx, status, "checkpoint") != CN_OK) return nt_fail_here(I, at), false;
  return true;
}

/* The optimizer state restore creates: the tree of one update is built and dropped, which
 * creates the state nodes (optim.c keeps them on the parameters); the statement
 * adam or sgd of the script builds its own tree later and reuses them. */
static bool optimizer_state(nt_interp *I, cn_tensor *loss, const char *optimizer, cn_nt_pos at) {
  if (strcmp(optimizer, "none") == 0) return true;
  bool adam = strcmp(optimizer, "adam") == 0;
  if (!adam && strcmp(optimizer, "sgd") != 0)
    return nt_fail(I, at,
                   "restore: ~optimizer is \"adam\", \"sgd\" (its momentum) or \"none\", not "
                   "\"%s\"",
                   optimizer),
           false;
  cn_tensor *lr = cn_tensor_number(I->g, 0);
  cn_adam adam_options = cn_adam_defaults(lr);
  cn_sgd sgd_options = {lr, 0.9, 0, false}; /* a momentum, so that its state exists */
  cn_asgn *tree = !lr    ? NULL
                  : adam ? cn_graph_adam_update(I->g, loss, &adam_options)
                         : cn_graph_sgd_update(I->g, loss, &sgd_options);
  return tree ? true : (nt_fail_here(I, at), false);
}

/* The metadata "epoch" of a checkpoint, as a number; NULL after a message. The epoch is decimal
 * digits only, below 2^53 so that the number is exact (issue 27: strtoll saturated
 * "99999999999999999999" to 2^63 - 1). */
static nt_value *saved_epoch(nt_interp *I, const char *path, int n, const cn_metadata_entry *meta,
                             cn_nt_pos at) {
  for (int i = 0; i < n; i++) {
    if (strcmp(meta[i].key, "epoch") != 0) continue;
    uint64_t epoch;
    if (!cn_parse_natural(meta[i].value, strlen(meta[i].value), EXACT_DOUBLE - 1, &epoch))
      return nt_fail(I, at,
                     "restore: %s: the metadata \"epoch\" is \"%.40s%s\", expected a non-negative "
                     "integer below 2^53 (decimal digits only)",
                     path, meta[i].value, strlen(meta[i].value) > 40 ? "..." : "");
    return nt_num(I, (double)epoch, true);
  }
  return nt_fail(I, at, "restore: %s holds no epoch (a non-negative integer) in its metadata",
                 path);
}

/* restore "file" loss ~optimizer:"adam"|"sgd"|"none" [~resume:b]: initializes loss's parameters
 * now (so no later statement initializes them again), creates the optimizer's state, then, when
 * ~resume is true (the default) and the file exists, reads the training state back from it and
 * returns its epoch; 0 otherwise (the file is not read), with a note on the warnings' stream when
 * ~resume:true was written and there is no file yet (as example_fashion_mnist --resume). */
nt_value *nt_builtin_restore(nt_interp *I, const nt_call *c) {
  const nt_args *a = c->a;
  static const char *const known[] = {"optimizer", "resume"};
  cn_nt_pos resume_at;
  nt_value *optimizer = nt_labeled(a, "optimizer"),
           *resume = nt_labeled_at(a, "resume", &resume_at);
  if (!nt_known_labels(I, c, 2, known)) return NULL;
  if (a->n_pos != 2 || !optimizer || optimizer->kind != NT_V_STR)
    return nt_fail(I, c->at, "%s",
                   "restore takes a file name, the loss and ~optimizer:\"adam\" (or \"sgd\", "
                   "\"none\"), and optionally ~resume:BOOL");
  if (resume && resume->kind != NT_V_BOOL)
    return nt_fail(I, resume_at, "restore: ~resume expects a boolean, found %s",
                   nt_kind_name(resume->kind));
  const char *path = file_argument(I, c, 0);
  if (path && !(path = nt_output_path(I, path, false, a->pos_at[0]))) return NULL;
  cn_tensor *loss = path ? nt_tensor_of(I, a->pos[1], a->pos_at[1]) : NULL;
  if (!loss || !nt_materialize(I, c->at)) return NULL;
  cn_tensor_set_named(loss);
  cn_asgn *init = cn_graph_init_params(I->g, loss);
  if (!init) return nt_fail_here(I, c->at);
  if (!nt_asgn_empty(init) && !nt_run_asgn(I, init, NULL, c->at)) return NULL;
  if (!optimizer_state(I, loss, optimizer->str, c->at)) return NULL;
  if (resume && resume->b && access(path, F_OK) != 0) { /* asked for, not there: a first run */
    cn_nt_pos at = a->pos_at[0];
    fprintf(nt_err(I),
            "%s:%d:%d: note: restore: no checkpoint '%s' to resume from: the run starts at epoch "
            "0\n",
            at.src && at.src->file ? at.src->file : "<script>", at.line, at.col, path);
  }
  if ((resume && !resume->b) || access(path, F_OK) != 0) return nt_num(I, 0, true);
  cn_named_node *state;
  int n = training_state(I, loss, &state, c->at), n_meta = 0;
  cn_metadata_entry *meta = NULL;
  if (n < 0) return NULL;
  if (cn_data_load_safetensors(I->ctx, path, n, state, &n_meta, &meta) != CN_OK)
    return nt_fail_here(I, a->pos_at[0]);
  return saved_epoch(I, path, n_meta, meta, a->pos_at[0]);
}

/* ---- Output paths --------------------------------------------------------------------------- */

const char *nt_output_path(nt_interp *I, const char *path, bool writes, cn_nt_pos at) {
  const char *dir = I->opts.out_dir;
  const char *full = path;
  bool under = dir && dir[0] && path[0] != '/'; /* "." keeps the path unprefixed */
  if (under && strcmp(dir, ".") != 0) {
    cn_sbuf sb = {0};
    size_t len = strlen(dir);
    cn_sbuf_printf(&sb, "%s%s%s", dir, dir[len - 1] == '/' ? "" : "/", path);
    if (!(full = cn_sbuf_finish(I->ctx, &sb))) return nt_fail_here(I, at), NULL;
  }
  if (!writes) return full == path || access(full, F_OK) == 0 ? full : path;
  /* under the output directory, its directories are made; an absolute path is left to the
   * writer, whose message names what is missing */
  const char *slash = under ? strrchr(full, '/') : NULL;
  if (slash) {
    char parent[4096], why[4352];
    if ((size_t)(slash - full) >= sizeof parent)
      return nt_fail(I, at, "the path '%s' is too long", full), NULL;
    memcpy(parent, full, (size_t)(slash - full));
    parent[slash - full] = '\0';
    if (!cn_make_directories(parent, 0, 0777, "output directory", why, sizeof why))
      return nt_fail(I, at, "%s", why), NULL;
  }
  for (int i = 0; i < I->n_written; i++)
    if (strcmp(I->written[i], full) == 0) return full;
  if (!cn_arena_grow(I->ctx, (void **)&I->written, &I->cap_written, I->n_written + 1,
                     sizeof *I->written))
    return nt_fail_here(I, at), NULL;
  I->written[I->n_written++] = full;
  return full;
}

void nt_report_written(nt_interp *I) {
  if (!I->n_written || !cn_dist_writes_files()) return; /* under MPI rank 0 wrote them */
  FILE *f = nt_err(I);
  fputs("wrote ", f);
  for (int i = 0; i < I->n_written; i++) fprintf(f, "%s%s", i ? ", " : "", I->written[i]);
  fputc('\n', f);
}

/* ---- save_npy ------------------------------------------------------------------------------- */

bool nt_save_npy(nt_interp *I, cn_node *node, const char *path, cn_nt_pos at) {
  cn_array a = {cn_node_prec(node), cn_node_rank(node), {0}, NULL};
  for (int k = 0; k < a.rank; k++) a.dims[k] = cn_node_dim(node, k);
  int64_t n = cn_node_numel(node);
  a.cells = cn_malloc(I->ctx, (size_t)n * cn_prec_bytes(a.prec) + 1);
  if (!a.cells) return false;
  cn_status status = cn_node_get_cells(node, false, a.cells, (size_t)n);
  if (status == CN_OK && cn_dist_writes_files()) status = cn_data_save_npy(I->ctx, path, &a);
  bool ok = cn_dist_root_status(I->ctx, status, "save_npy") == CN_OK;
  free(a.cells);
  return ok ? true : (nt_fail_here(I, at), false);
}
