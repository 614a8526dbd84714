/* The half-moons classifier (demo/moons.c), as OCANNL writes it: `w3 * relu(b2 + w2 * relu(b1 +
 * w1 * x))` with only the biases' output size given, trained on 800 points of the library's
 * generator (cn_dataset_half_moons) in batches of 10, with one compiled routine run once per step
 * with the static indices batch_n and step_n bound. examples/moons.cnl is the same training in
 * the notation, with the same numbers.
 *
 * Invariant: moons_destroy releases everything moons_build created, whether or not it failed. */
#ifndef CANNL_DEMO_MOONS_H
#define CANNL_DEMO_MOONS_H

#include "cannl.h"

#include <stdbool.h>
#include <stddef.h>

enum {
  MOONS_POINTS = 800,
  MOONS_BATCH = 10,
  MOONS_BATCHES = MOONS_POINTS / MOONS_BATCH, /* steps per epoch */
  MOONS_HIDDEN = 16,
  MOONS_EPOCHS = 80,
};
#define MOONS_NOISE        0.1
#define MOONS_LR_START     0.2
#define MOONS_LR_END       0.1
#define MOONS_WEIGHT_DECAY 1e-4
#define MOONS_SEED         1
#define MOONS_PI           3.14159265358979323846 /* the moons' geometry, for tests */

typedef struct {
  int epochs;    /* the learning rate decays over all of them */
  uint64_t seed; /* the data generator's seed */
  cn_backend_kind backend;
  /* 0 or 1: one routine on the host; N > 1: data parallel on N CPU devices (cn_dp_create), each
   * batch split in N shards, the gradient and the update two routines; under MPI (cn_dist_init
   * before moons_build, more than one rank) data parallel too, in ranks x N shards */
  int devices;
  int batch; /* 0: MOONS_BATCH; else in [1, 800]: the first (800 / batch) * batch points */
} moons_config;

typedef struct {
  moons_config cfg;
  cn_ctx *ctx;
  cn_graph *g;
  double xy[2 * MOONS_POINTS], labels[MOONS_POINTS];
  int batch, batches; /* the batch size and the steps per epoch */
  cn_symbol batch_n, step_n;
  cn_tensor *w1, *b1, *w2, *b2, *w3;
  cn_tensor *loss, *learning_rate;
  cn_routine *step; /* forward + backward + SGD update of one batch (one device) */
  cn_dp *dp;        /* devices > 1: the data-parallel step, step NULL */
} moons;

/* Called after every step with the epoch, the steps done in it and its running mean loss. */
typedef void (*moons_progress_fn)(void *user, int epoch, int step_in_epoch, double running_loss);

/* The library's half-moons generator (cn_dataset_half_moons): even points on the upper moon,
 * label +1, odd points on the lower one, label -1, so every batch of 10 holds five of each. */
void moons_generate(uint64_t seed, double noise, double *xy, double *labels);
/* Builds the graph, compiles the init and step routines and initializes the parameters. On
 * failure the context holds the message; moons_destroy releases everything either way. */
cn_status moons_build(moons *m, const moons_config *cfg);
/* One training step (global step number `step`, batch step % batches); *loss is the batch's loss
 * before the update. */
cn_status moons_train_step(moons *m, int64_t step, double *loss);
/* All epochs; epoch_loss[e] is the mean batch loss of epoch e. */
cn_status moons_train(moons *m, double *epoch_loss, moons_progress_fn progress, void *user);
/* f at n points (xy as moons_generate lays them out), by a forward routine over all of them. */
cn_status moons_eval(moons *m, size_t n, const double *xy, double *f);
/* The fraction of the training points on the right side of the boundary, given f at them. */
double moons_accuracy(const moons *m, const double *f);
void moons_destroy(moons *m);

#endif
