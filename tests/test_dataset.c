/* Data sets (cn_dataset_*): the counter-based permutation, mini-batches through a static index,
 * epochs and held-out splits.
 *   - cn_dataset_permute is a bijection of [0, n) for n = 1 .. 300 and 60 000 and several
 *     (seed, epoch) pairs, depends on the seed and the epoch, and is the same on every call;
 *     out-of-range arguments give -1;
 *   - a set of two arrays (images of 2x3 bytes whose cells encode their example, labels as
 *     int32) shown with batch size 4: shapes, and a routine reading `x @| batch` sees the
 *     examples of the epoch's order, the label still matching its image; unshuffled sets keep
 *     their order; an epoch's order does not depend on the epochs shown before;
 *   - splits: sizes, disjoint and complete, original order kept, the same for the same seed;
 *   - errors: no arrays, examples that disagree, a bad batch size, a bad split. */
#include "check.h"

#include "cannl.h"

#include <stdlib.h>
#include <string.h>

static void test_permute(void) {
  static bool seen[60000];
  const int64_t sizes[] = {1, 2, 3, 4, 5, 7, 16, 17, 63, 64, 65, 100, 255, 256, 300, 60000};
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
    int64_t n = sizes[s];
    for (uint64_t key = 0; key < 3; key++) {
      memset(seen, 0, sizeof seen);
      bool bijective = true;
      for (int64_t i = 0; i < n; i++) {
        int64_t j = cn_dataset_permute(7 + key, key * 5, n, i);
        if (j < 0 || j >= n || seen[j]) bijective = false;
        if (j >= 0 && j < n) seen[j] = true;
      }
      CHECK_MSG(bijective, "n = %lld, key %llu", (long long)n, (unsigned long long)key);
    }
  }
  /* different epochs and seeds give different orders; the same arguments the same one */
  int64_t n = 1000, moved_epoch = 0, moved_seed = 0, fixed = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t a = cn_dataset_permute(1, 0, n, i);
    moved_epoch += a != cn_dataset_permute(1, 1, n, i);
    moved_seed += a != cn_dataset_permute(2, 0, n, i);
    fixed += a == i;
    CHECK(a == cn_dataset_permute(1, 0, n, i));
  }
  CHECK_MSG(moved_epoch > 900 && moved_seed > 900, "%lld %lld", (long long)moved_epoch,
            (long long)moved_seed);
  CHECK_MSG(fixed < 20, "%lld fixed points", (long long)fixed); /* about 1 expected */
  CHECK_INT(cn_dataset_permute(1, 0, 0, 0), -1);
  CHECK_INT(cn_dataset_permute(1, 0, 5, 5), -1);
  CHECK_INT(cn_dataset_permute(1, 0, 5, -1), -1);
  CHECK_INT(cn_dataset_permute(1, 0, 1, 0), 0);
}

#define EXAMPLES 10

/* images[e] has cells 10 e + c (c = 0 .. 5), labels[e] = 100 + e. */
static void make_arrays(cn_array *arrays) {
  uint8_t *images = malloc(EXAMPLES * 6);
  int32_t *labels = malloc(EXAMPLES * sizeof *labels);
  for (int e = 0; e < EXAMPLES; e++) {
    for (int c = 0; c < 6; c++) images[e * 6 + c] = (uint8_t)(10 * e + c);
    labels[e] = 100 + e;
  }
  arrays[0] = (cn_array){CN_PREC_BYTE, 3, {EXAMPLES, 2, 3}, images};
  arrays[1] = (cn_array){CN_PREC_INT32, 1, {EXAMPLES}, labels};
}

/* Runs `out = x @| batch` (as single) and `lab = y @| batch` for every batch of epoch, checking
 * that slot j of the epoch holds example order(j). */
static void check_epoch(cn_ctx *ctx, cn_dataset *d, cn_routine *r, cn_symbol batch, cn_tensor *out,
                        cn_tensor *lab, bool shuffled, uint64_t seed, uint64_t epoch) {
  CHECK_MSG(cn_dataset_begin_epoch(d, epoch) == CN_OK, "%s", cn_ctx_error(ctx));
  bool ok = true;
  for (int64_t b = 0; b < cn_dataset_batches(d); b++) {
    double v[4 * 6], l[4];
    ok = ok && cn_routine_bind(r, batch, b) == CN_OK && cn_routine_run(r) == CN_OK &&
         cn_node_get_values(cn_tensor_value(out), false, v, 24) == CN_OK &&
         cn_node_get_values(cn_tensor_value(lab), false, l, 4) == CN_OK;
    for (int k = 0; k < 4 && ok; k++) {
      int64_t slot = 4 * b + k;
      int64_t e = shuffled ? cn_dataset_permute(seed, epoch, EXAMPLES, slot) : slot;
      for (int c = 0; c < 6; c++) ok = ok && v[6 * k + c] == 10 * e + c;
      ok = ok && l[k] == 100 + e;
    }
  }
  CHECK_MSG(ok, "epoch %llu (%s): %s", (unsigned long long)epoch, shuffled ? "shuffled" : "ordered",
            cn_ctx_error(ctx));
}

static void test_batches(bool shuffled) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_array arrays[2];
  make_arrays(arrays);
  cn_dataset *d = cn_dataset_create(g, "toy", 2, arrays, 4, shuffled, 99);
  CHECK(d != NULL);
  if (!d) {
    cn_array_free(&arrays[0]);
    cn_array_free(&arrays[1]);
    cn_ctx_destroy(ctx);
    return;
  }
  CHECK(arrays[0].cells == NULL && arrays[1].cells == NULL); /* taken by the set */
  CHECK_INT(cn_dataset_batches(d), 2);                       /* 10 / 4, two left out */
  CHECK_INT(cn_dataset_examples(d), EXAMPLES);
  cn_tensor *x = cn_dataset_tensor(d, 0), *y = cn_dataset_tensor(d, 1);
  CHECK(cn_dataset_tensor(d, 2) == NULL);
  CHECK(strcmp(cn_tensor_shape(x), "2,4|->2,3") == 0);
  CHECK(strcmp(cn_tensor_shape(y), "2,4|->") == 0);
  cn_symbol batch = cn_symbol_create(ctx, "batch", 2);
  cn_tensor *slice = cn_tensor_batch_slice(g, x, batch);
  /* byte cells times a single-precision 1: the mini-batch as floats */
  cn_tensor *out = cn_tensor_apply(g, CN_OP_MUL, 2, (cn_tensor *[]){slice, cn_tensor_number(g, 1)});
  cn_tensor *lab = cn_tensor_apply(
      g, CN_OP_MUL, 2, (cn_tensor *[]){cn_tensor_batch_slice(g, y, batch), cn_tensor_number(g, 1)});
  cn_asgn *code =
      cn_asgn_seq(ctx, 2, (cn_asgn *[]){cn_graph_forward(g, out), cn_graph_forward(g, lab)});
  cn_routine *r = cn_routine_compile(ctx, code, CN_BACKEND_C, "batches");
  CHECK_MSG(r != NULL, "%s", cn_ctx_error(ctx));
  if (r) {
    /* epochs out of order: each is a function of (seed, epoch) alone */
    const uint64_t epochs[] = {0, 3, 1, 3, 0};
    for (size_t i = 0; i < sizeof epochs / sizeof *epochs; i++)
      check_epoch(ctx, d, r, batch, out, lab, shuffled, 99, epochs[i]);
  }
  cn_routine_free(r);
  cn_ctx_destroy(ctx);
}

static void test_split(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_array a[2], test[2], again[2], test_again[2];
  make_arrays(a);
  make_arrays(again);
  CHECK(cn_dataset_split(ctx, 2, a, 3, 5, test) == CN_OK);
  CHECK(cn_dataset_split(ctx, 2, again, 3, 5, test_again) == CN_OK);
  CHECK_INT(a[0].dims[0], 7);
  CHECK_INT(a[1].dims[0], 7);
  CHECK_INT(test[0].dims[0], 3);
  CHECK_INT(test[0].rank, 3);
  CHECK_INT(test[0].dims[2], 3);
  const int32_t *train_labels = a[1].cells, *test_labels = test[1].cells;
  bool seen[EXAMPLES] = {0}, ordered = true, matches = true;
  for (int i = 0; i < 7; i++) {
    seen[train_labels[i] - 100] = true;
    ordered = ordered && (i == 0 || train_labels[i] > train_labels[i - 1]);
    matches = matches && ((const uint8_t *)a[0].cells)[6 * i] == 10 * (train_labels[i] - 100);
  }
  for (int i = 0; i < 3; i++) {
    CHECK(!seen[test_labels[i] - 100]);
    seen[test_labels[i] - 100] = true;
    ordered = ordered && (i == 0 || test_labels[i] > test_labels[i - 1]);
    matches = matches && ((const uint8_t *)test[0].cells)[6 * i] == 10 * (test_labels[i] - 100);
  }
  for (int e = 0; e < EXAMPLES; e++) CHECK(seen[e]);
  CHECK(ordered && matches);
  CHECK(memcmp(test[1].cells, test_again[1].cells, 3 * sizeof(int32_t)) == 0);
  CHECK(cn_dataset_split(ctx, 2, a, 8, 5, test_again) != CN_OK);
  CHECK(strstr(cn_ctx_error(ctx), "8 test examples out of 7") != NULL);
  for (int k = 0; k < 2; k++) {
    cn_array_free(&a[k]);
    cn_array_free(&test[k]);
    cn_array_free(&again[k]);
    cn_array_free(&test_again[k]);
  }
  cn_ctx_destroy(ctx);
}

static void test_errors(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_array a[2];
  make_arrays(a);
  CHECK(cn_dataset_create(g, "none", 0, a, 4, true, 1) == NULL);
  CHECK(strstr(cn_ctx_error(ctx), "no arrays") != NULL);
  CHECK(cn_dataset_create(g, "big", 2, a, 11, true, 1) == NULL);
  CHECK(strstr(cn_ctx_error(ctx), "batch size 11; it must lie in [1, 10]") != NULL);
  a[1].dims[0] = 9;
  CHECK(cn_dataset_create(g, "odd", 2, a, 4, true, 1) == NULL);
  CHECK(strstr(cn_ctx_error(ctx), "array 1 has 9 examples, array 0 has 10") != NULL);
  CHECK(a[0].cells != NULL && a[1].cells != NULL); /* a failed create takes nothing */
  /* issue 27: an array with an axis of size 0 (its cells NULL, as a loader leaves an empty
   * file's) or without examples is refused, by create and split */
  cn_array empty[2] = {{CN_PREC_BYTE, 2, {3, 0}, NULL}, {CN_PREC_BYTE, 2, {0, 3}, NULL}};
  for (int k = 0; k < 2; k++) {
    char needle[128];
    snprintf(needle, sizeof needle,
             "array 0 has size 0 along axis %d: a data set needs at least one example (axis 0) of "
             "at least one cell",
             1 - k);
    CHECK(cn_dataset_create(g, "empty", 1, &empty[k], 1, false, 1) == NULL);
    CHECK_HAS(cn_ctx_error(ctx), "data set \"empty\": ");
    CHECK_HAS(cn_ctx_error(ctx), needle);
    cn_array held;
    CHECK(cn_dataset_split(ctx, 1, &empty[k], 0, 7, &held) == CN_ERR_INVALID);
    CHECK_HAS(cn_ctx_error(ctx), needle);
  }
  cn_array bad = {CN_PREC_BYTE, 3, {4, -2, -3}, NULL}, held_out;
  CHECK(cn_dataset_split(ctx, 1, &bad, 1, 7, &held_out) != CN_OK);
  CHECK(strstr(cn_ctx_error(ctx), "array 0 has no valid shape") != NULL);
  cn_array_free(&a[0]);
  cn_array_free(&a[1]);
  cn_ctx_destroy(ctx);
}

int main(void) {
  test_permute();
  test_batches(false);
  test_batches(true);
  test_split();
  test_errors();
  CHECK_DONE();
}
