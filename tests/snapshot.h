/* Snapshots of a hand-built procedure's buffers, for tests that run one procedure several ways
 * (scheduled and not, on each backend) from the same starting values and compare the results bit
 * for bit: snapshot_save copies every parameter's buffer (padding included), snapshot_restore
 * writes them back, snapshot_release frees the copies, snapshot_run runs a procedure from a
 * snapshot. A procedure has at most
 * SNAPSHOT_MAX_PARAMS parameters (checked). */
#ifndef CN_TEST_SNAPSHOT_H
#define CN_TEST_SNAPSHOT_H

#include "backend/backend.h"
#include "check.h"
#include "loops/loops.h"

#include <stdlib.h>

#define SNAPSHOT_MAX_PARAMS 64

typedef struct {
  size_t bytes[SNAPSHOT_MAX_PARAMS];
  unsigned char *data[SNAPSHOT_MAX_PARAMS];
} snapshot;

static inline void snapshot_save(const cn_ll_proc *proc, snapshot *b) {
  CHECK(proc->n_params <= SNAPSHOT_MAX_PARAMS);
  for (int k = 0; k < proc->n_params && k < SNAPSHOT_MAX_PARAMS; k++) {
    cn_node *n = proc->params[k].node;
    b->bytes[k] = cn_node_buffer_cells(n) * cn_prec_bytes(n->prec);
    b->data[k] = malloc(b->bytes[k]);
    CHECK(b->data[k] != NULL);
    if (b->data[k]) memcpy(b->data[k], cn_node_buffer(n, proc->params[k].merge), b->bytes[k]);
  }
}

static inline void snapshot_restore(const cn_ll_proc *proc, const snapshot *b) {
  for (int k = 0; k < proc->n_params && k < SNAPSHOT_MAX_PARAMS; k++)
    if (b->data[k])
      memcpy(cn_node_buffer(proc->params[k].node, proc->params[k].merge), b->data[k], b->bytes[k]);
}

static inline void snapshot_release(const cn_ll_proc *proc, snapshot *b) {
  for (int k = 0; k < proc->n_params && k < SNAPSHOT_MAX_PARAMS; k++) free(b->data[k]);
}

/* Runs proc on a backend from the buffers `start` of `plain` (proc's params are plain's or a
 * subset of them: a scheduled copy may have dropped some), saving plain's buffers after the run
 * into `after`. */
static inline void snapshot_run(cn_ctx *ctx, const cn_backend *backend, const cn_ll_proc *plain,
                                const cn_ll_proc *proc, const snapshot *start, snapshot *after) {
  snapshot_restore(plain, start);
  void *compiled = NULL;
  const char *source = NULL;
  cn_status st = backend->compile(ctx, proc, &compiled, &source);
  CHECK_MSG(st == CN_OK, "%s", cn_ctx_error(ctx));
  if (st == CN_OK) {
    void *bufs[SNAPSHOT_MAX_PARAMS];
    for (int k = 0; k < proc->n_params && k < SNAPSHOT_MAX_PARAMS; k++)
      bufs[k] = cn_node_buffer(proc->params[k].node, proc->params[k].merge);
    CHECK_INT(backend->run(ctx, compiled, bufs, NULL), CN_OK);
    backend->release(compiled);
  }
  snapshot_save(plain, after);
}

#endif
