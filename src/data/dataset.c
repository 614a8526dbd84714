/* Data sets for training (include/cannl.h, "A data set"): arrays of examples shown to a graph as
 * tensors with batch axes [batches, batch_size], an epoch's order written into their nodes by the
 * host, and the counter-based permutation behind shuffling and held-out splits.
 *
 * Invariants: the data set owns its arrays' cells (malloc'd, released by a context cleanup);
 * every array has the same count of examples along axis 0 and no axis of size 0 (so cells exist);
 * slot j of a tensor's node holds the example the epoch's order puts there (the identity when not
 * shuffled), so one mini-batch of a static index reads the same examples from every tensor. The
 * order is a pure function of (seed, epoch), never of the calls made before: resuming at epoch e
 * shows what an uninterrupted run showed. */
#include "core/core.h"
#include "tensor/tensor.h"

#include <stdlib.h>
#include <string.h>

struct cn_dataset {
  cn_graph *g;
  int n;
  cn_array *arrays; /* arena-owned descriptors of the cells this set owns */
  cn_tensor **tensors;
  int64_t count, batch_size, batches;
  bool shuffle;
  uint64_t seed;
  bool written; /* the nodes hold the order of epoch `written_epoch` */
  uint64_t written_epoch;
};

/* ---- The permutation ------------------------------------------------------------------------ */

/* splitmix64's finalizer: a bijective mix of 64 bits, so distinct round inputs give unrelated
 * round outputs. */
static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

#define PERMUTE_ROUNDS 6

/* The keyed network of one (seed, epoch) over [0, n): its keys are computed once per epoch. */
typedef struct {
  int h; /* half-width: the network permutes [0, 4^h) */
  uint64_t mask, n, keys[PERMUTE_ROUNDS];
} permuter;

static void permuter_init(permuter *p, uint64_t seed, uint64_t epoch, int64_t n) {
  /* a balanced Feistel network on 2h bits is a bijection of [0, 4^h) whatever its round function;
   * 4^h < 4n, so walking the cycle from i back into [0, n) takes fewer than 4 steps on average */
  p->h = 1;
  while (((uint64_t)1 << (2 * p->h)) < (uint64_t)n) p->h++;
  p->mask = ((uint64_t)1 << p->h) - 1;
  p->n = (uint64_t)n;
  for (int r = 0; r < PERMUTE_ROUNDS; r++)
    p->keys[r] = mix64(seed ^ mix64(epoch + 0x9E3779B97F4A7C15ull * (uint64_t)(r + 1)));
}

static int64_t permuter_at(const permuter *p, int64_t i) {
  uint64_t x = (uint64_t)i;
  do {
    uint64_t left = x >> p->h, right = x & p->mask;
    for (int r = 0; r < PERMUTE_ROUNDS; r++) {
      uint64_t next = left ^ (mix64(p->keys[r] ^ right) & p->mask);
      left = right;
      right = next;
    }
    x = (left << p->h) | right;
  } while (x >= p->n);
  return (int64_t)x;
}

int64_t cn_dataset_permute(uint64_t seed, uint64_t epoch, int64_t n, int64_t i) {
  if (n < 1 || n >= ((int64_t)1 << 62) || i < 0 || i >= n) return -1;
  permuter p;
  permuter_init(&p, seed, epoch, n);
  return permuter_at(&p, i);
}

/* ---- Creation ------------------------------------------------------------------------------ */

static void free_cells(void *arg) {
  cn_dataset *d = arg;
  for (int k = 0; k < d->n; k++) cn_array_free(&d->arrays[k]);
}

/* The bytes of one example of a (its cells past axis 0). */
static size_t example_bytes(const cn_array *a) {
  size_t cells = 1;
  for (int ax = 1; ax < a->rank; ax++) cells *= (size_t)a->dims[ax];
  return cells * cn_prec_bytes(a->prec);
}

static bool check_arrays(cn_ctx *ctx, const char *label, int n, const cn_array *arrays) {
  if (n < 1 || !arrays) {
    cn_fail(ctx, CN_ERR_INVALID, "data set \"%s\": no arrays", label);
    return false;
  }
  for (int k = 0; k < n; k++) {
    const cn_array *a = &arrays[k];
    if (cn_array_numel(a) < 0) {
      cn_fail(ctx, CN_ERR_INVALID, "data set \"%s\": array %d has no valid shape", label, k);
      return false;
    }
    if (a->rank < 1 || a->rank > CN_MAX_RANK - 1) {
      cn_fail(ctx, CN_ERR_INVALID,
              "data set \"%s\": array %d has rank %d; examples lie along axis 0 of an array of "
              "rank 1 to %d",
              label, k, a->rank, CN_MAX_RANK - 1);
      return false;
    }
    /* an empty array (NumPy's (3, 0), an IDX file of 0 examples) is a valid file but no data
     * set: refused here, so every example below has cells to copy (issue 27: a [3, 0] array's
     * NULL cells reached memcpy) */
    for (int ax = 0; ax < a->rank; ax++)
      if (a->dims[ax] == 0) {
        cn_fail(ctx, CN_ERR_INVALID,
                "data set \"%s\": array %d has size 0 along axis %d: a data set needs at least "
                "one example (axis 0) of at least one cell",
                label, k, ax);
        return false;
      }
    if (a->dims[0] != arrays[0].dims[0]) {
      cn_fail(ctx, CN_ERR_INVALID, "data set \"%s\": array %d has %lld examples, array 0 has %lld",
              label, k, (long long)a->dims[0], (long long)arrays[0].dims[0]);
      return false;
    }
    if (!a->cells) {
      cn_fail(ctx, CN_ERR_INVALID, "data set \"%s\": array %d has no cells", label, k);
      return false;
    }
  }
  return true;
}

cn_dataset *cn_dataset_create(cn_graph *g, const char *label, int n_arrays, cn_array *arrays,
                              int64_t batch_size, bool shuffle, uint64_t seed) {
  cn_ctx *ctx = cn_graph_ctx(g);
  label = label ? label : "data";
  if (!check_arrays(ctx, label, n_arrays, arrays)) return NULL;
  int64_t count = arrays[0].dims[0];
  if (batch_size < 1 || batch_size > count) {
    cn_fail(ctx, CN_ERR_INVALID,
            "data set \"%s\": batch size %lld; it must lie in [1, %lld], the examples it has",
            label, (long long)batch_size, (long long)count);
    return NULL;
  }
  cn_dataset *d = cn_alloc(ctx, sizeof *d);
  cn_array *copies = cn_alloc(ctx, (size_t)n_arrays * sizeof *copies);
  cn_tensor **tensors = cn_alloc(ctx, (size_t)n_arrays * sizeof *tensors);
  if (!d || !copies || !tensors) return NULL;
  *d = (cn_dataset){g,       n_arrays, copies, tensors, count, batch_size, count / batch_size,
                    shuffle, seed,     false,  0};
  for (int k = 0; k < n_arrays; k++) {
    const cn_array *a = &arrays[k];
    int64_t batch_dims[2] = {d->batches, batch_size};
    cn_dims dims = {{2, batch_dims, NULL}, CN_AXES_NONE, {a->rank - 1, a->dims + 1, NULL}};
    char name[256];
    snprintf(name, sizeof name, n_arrays == 1 ? "%s" : "%s_%d", label, k);
    cn_shape_row_spec rows[CN_N_ROWS];
    if (!(tensors[k] = cn_tensor_new(g, name, CN_TK_BUFFER, a->prec, cn_dims_rows(&dims, rows),
                                     CN_SL_TERMINAL, NULL, 0, NULL)))
      return NULL;
  }
  /* only now, when nothing can fail any more, do the cells change hands */
  if (!cn_ctx_add_cleanup(ctx, free_cells, d)) return NULL;
  for (int k = 0; k < n_arrays; k++) {
    copies[k] = arrays[k];
    arrays[k].cells = NULL;
  }
  return d;
}

cn_tensor *cn_dataset_tensor(const cn_dataset *d, int k) {
  return k >= 0 && k < d->n ? d->tensors[k] : NULL;
}
int64_t cn_dataset_batches(const cn_dataset *d) {
  return d->batches;
}
int64_t cn_dataset_examples(const cn_dataset *d) {
  return d->count;
}

/* ---- Epochs -------------------------------------------------------------------------------- */

cn_status cn_dataset_begin_epoch(cn_dataset *d, uint64_t epoch) {
  if (d->written && (!d->shuffle || d->written_epoch == epoch)) return CN_OK;
  cn_ctx *ctx = cn_graph_ctx(d->g);
  cn_status st = cn_graph_materialize(d->g);
  if (st != CN_OK) return st;
  int64_t used = d->batches * d->batch_size;
  int64_t *order = cn_malloc(ctx, (size_t)used * sizeof *order);
  if (!order) return CN_ERR_NOMEM;
  permuter p;
  permuter_init(&p, d->seed, epoch, d->count);
  for (int64_t j = 0; j < used; j++) order[j] = d->shuffle ? permuter_at(&p, j) : j;
  for (int k = 0; k < d->n && st == CN_OK; k++) {
    const cn_array *a = &d->arrays[k];
    size_t row = example_bytes(a);
    char *cells = cn_malloc(ctx, (size_t)used * row + 1);
    if (!cells) {
      st = CN_ERR_NOMEM;
      break;
    }
    for (int64_t j = 0; j < used; j++)
      memcpy(cells + (size_t)j * row, (const char *)a->cells + (size_t)order[j] * row, row);
    st = cn_node_set_cells(d->tensors[k]->value, false, cells,
                           (size_t)used * row / cn_prec_bytes(a->prec));
    free(cells);
  }
  free(order);
  if (st == CN_OK) {
    d->written = true;
    d->written_epoch = epoch;
  }
  return st;
}

/* ---- Held-out splits ----------------------------------------------------------------------- */

/* Copies the examples of a whose `test` flag equals `want`, in order, into out (malloc'd). */
static cn_status gather(cn_ctx *ctx, const cn_array *a, const bool *test, bool want, int64_t kept,
                        cn_array *out) {
  size_t row = example_bytes(a);
  *out = *a;
  out->dims[0] = kept;
  out->cells = cn_malloc(ctx, (size_t)kept * row + 1);
  if (!out->cells) return CN_ERR_NOMEM;
  int64_t at = 0;
  for (int64_t i = 0; i < a->dims[0]; i++)
    if (test[i] == want)
      memcpy((char *)out->cells + (size_t)at++ * row, (const char *)a->cells + (size_t)i * row,
             row);
  return CN_OK;
}

cn_status cn_dataset_split(cn_ctx *ctx, int n, cn_array *arrays, int64_t n_test, uint64_t seed,
                           cn_array *test) {
  if (!check_arrays(ctx, "split", n, arrays)) return ctx->status;
  int64_t count = arrays[0].dims[0];
  if (n_test < 0 || n_test > count)
    return cn_fail(ctx, CN_ERR_INVALID, "split: %lld test examples out of %lld", (long long)n_test,
                   (long long)count);
  bool *is_test = cn_calloc(ctx, (size_t)count + 1, sizeof *is_test);
  if (!is_test) return CN_ERR_NOMEM;
  /* the split's own order: an epoch no training run reaches */
  permuter p;
  permuter_init(&p, seed, UINT64_MAX, count);
  for (int64_t j = 0; j < n_test; j++) is_test[permuter_at(&p, j)] = 1;
  cn_status st = CN_OK;
  cn_array *train = cn_calloc(ctx, (size_t)n, sizeof *train);
  if (!train) st = CN_ERR_NOMEM;
  for (int k = 0; k < n; k++) test[k].cells = NULL;
  for (int k = 0; k < n && st == CN_OK; k++) {
    if ((st = gather(ctx, &arrays[k], is_test, true, n_test, &test[k])) == CN_OK)
      st = gather(ctx, &arrays[k], is_test, false, count - n_test, &train[k]);
  }
  for (int k = 0; k < n && train; k++) {
    if (st == CN_OK) {
      cn_array_free(&arrays[k]);
      arrays[k] = train[k];
    } else {
      cn_array_free(&test[k]);
      cn_array_free(&train[k]);
    }
  }
  free(train);
  free(is_test);
  return st;
}
