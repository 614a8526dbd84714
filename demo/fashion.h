/* Fashion-MNIST classifiers (demo/fashion.c): the data set of Debian's dataset-fashion-mnist
 * (IDX files, gzip), an MLP 784-128-10 or a LeNet-style convnet (two conv-relu-pool stages, two
 * dense layers), softmax cross-entropy, Adam, per-epoch evaluation on the test set with a
 * confusion matrix, checkpoints with resume, and export of the trained forward as C. Shared by
 * examples/fashion_mnist.c, bench/bench_fashion.c and tests/test_fashion.c, so the model and the
 * training loop exist once. Only the public API (cannl.h) is used.
 *
 * Invariants: everything a run computes is a function of the configuration (the parameters'
 * counter-based init, each epoch's order from (seed, epoch), Adam's state in tensors), so an
 * interrupted run resumed from its last checkpoint computes what the uninterrupted run does, bit
 * for bit; fashion_destroy releases everything fashion_build created, whether or not it failed. */
#ifndef CANNL_DEMO_FASHION_H
#define CANNL_DEMO_FASHION_H

#include "cannl.h"

#include <stdbool.h>

#define FASHION_DATA_DIR   "/usr/share/datasets/fashion-mnist"
#define FASHION_CLASSES    10
#define FASHION_SIDE       28
#define FASHION_MAX_EPOCHS 1000

typedef enum { FASHION_MLP, FASHION_CONVNET } fashion_model;

typedef struct {
  fashion_model model;
  int epochs;
  int64_t batch_size;     /* training mini-batch (default 100) */
  int64_t train_examples; /* the first N training examples (0: all 60 000) */
  int64_t test_examples;  /* the first N test examples (0: all 10 000) */
  /* Adam's learning rate, first + (last - first) * step / steps over the `epochs` epochs' steps,
   * so the last step runs one step short of `last` (0: the defaults 2e-3 and first / 20, 1e-4;
   * PyTorch's 87.5% test accuracy of the MLP after 5 epochs at a constant 1e-3 becomes 88.4%) */
  double learning_rate, final_learning_rate;
  uint64_t seed;          /* the shuffling seed (the parameters' init has the graph's seed) */
  const char *data_dir;   /* NULL: FASHION_DATA_DIR */
  const char *checkpoint; /* NULL: none; else written after every epoch */
  cn_backend_kind backend;
  /* 0 or 1: one routine on the host; N > 1: data parallel on N CPU devices (cn_dp_create), each
   * batch (batch_size divisible by N) split in N shards copied from the data set every epoch;
   * under MPI (cn_dist_init before fashion_build, more than one rank) in ranks x N shards (the
   * checkpoint option is then not for several ranks: each would write the file) */
  int devices;
} fashion_config;

typedef struct {
  fashion_config cfg;
  cn_ctx *ctx;
  cn_graph *g;
  cn_dataset *train, *test;
  cn_symbol batch, test_batch, step_n; /* step_n: the global step, for the learning rate */
  cn_tensor *params[8];
  int n_params;
  cn_tensor *loss;      /* mean cross-entropy of the training batch */
  cn_tensor *confusion; /* of the test batch: [true class, predicted class] counts */
  cn_tensor *image;     /* a placeholder image (pixel / 255), and the model applied to it */
  cn_tensor *image_logits;
  cn_routine *step, *eval, *predict;
  cn_dp *dp;                              /* devices > 1: the data-parallel step, step NULL */
  cn_tensor *shard_images, *shard_labels; /* devices > 1: a device's shard of every batch */
  int epochs_done; /* completed epochs (after a resume, those of the checkpoint) */
  double epoch_loss[FASHION_MAX_EPOCHS], test_accuracy[FASHION_MAX_EPOCHS];
  int64_t confusion_counts[FASHION_CLASSES * FASHION_CLASSES]; /* of the last evaluation */
  /* why a call failed when the context has no message (a checkpoint of another run) */
  char message[512];
} fashion;

/* The message of the last failure: f->message, else the context's. */
const char *fashion_error(const fashion *f);

/* Called after every training step with the epoch, the steps done in it, the steps it has and
 * the running mean loss. */
typedef void (*fashion_progress_fn)(void *user, int epoch, int64_t step, int64_t steps,
                                    double running_loss);

/* Whether the data set's four files are installed in dir (NULL: FASHION_DATA_DIR). */
bool fashion_data_available(const char *dir);
/* Loads the data, builds the model, compiles the routines and initializes the parameters. On
 * failure the context holds the message (f->ctx may be NULL only when out of memory);
 * fashion_destroy releases everything either way. */
cn_status fashion_build(fashion *f, const fashion_config *cfg);
/* Loads the checkpoint of cfg.checkpoint (parameters, Adam's state, the curves so far) and sets
 * epochs_done: training goes on from there. */
cn_status fashion_resume(fashion *f);
/* Trains epoch f->epochs_done, evaluates, records the curves and writes the checkpoint. */
cn_status fashion_train_epoch(fashion *f, fashion_progress_fn progress, void *user);
/* The test set's accuracy (in [0, 1]) and confusion matrix (f->confusion_counts). */
cn_status fashion_evaluate(fashion *f, double *accuracy);
/* The trained forward of one image as C (cn_graph_export_c): NAME_forward(in, out) with in the
 * 784 pixels / 255 (row-major 28x28, as float) and out the 10 logits. */
cn_status fashion_export(fashion *f, const char *name, const char *dir);
/* The class the model predicts for one image (784 pixels / 255, row-major), the first of the
 * largest logits. */
cn_status fashion_predict(fashion *f, const float *pixels, int *klass);
void fashion_destroy(fashion *f);

extern const char *const fashion_class_names[FASHION_CLASSES];

#endif
