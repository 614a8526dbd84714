/* Counter-based random initialization (convolution-is-a-contraction "Random initialization,
 * assembled from the parts", ocannl-notes §7): uniform1 over 10^5 cells lies in [0, 1) with the
 * mean, deviation and 20-bin chi-square of a uniform; every cell equals the documented wiring
 * recomputed here from the threefry primitive (validated against known answers in test_numeric):
 *   key = light({id, 0, 0, 0}, {seed, 0, 0, 0}), bits = light(key, spread(offset)),
 *   single: (bits.v0 >> 8) * 2^-24
 * with id the node id of the embed_self_id tensor; the vectorized uniform follows the lane
 * layout of §7.3; uniform_at hashes its counter into the key; the default parameter init is
 * 0.5 * (uniform1 - 0.5) in [-0.25, 0.25). Runs are bit-identical across contexts and across
 * the interpreter and generated C; two tensors get different streams; the seed changes the
 * stream and cannot change once random code exists. Init code is gathered transitively (a
 * parameter initialized from another's value) and never seeds a parameter twice. The OCANNL known
 * word light({42,0,0,0}, spread(0)) comes out of the tensor API when the embed_self_id node has
 * id 42. */
#include "check.h"

#include "cannl.h"
#include "numeric/numeric.h"
#include "tensor/tensor.h"

#include <stdlib.h>

static const cn_backend_kind backends[2] = {CN_BACKEND_INTERP, CN_BACKEND_C};
static const char *const backend_names[2] = {"interp", "c"};

#define N_CELLS 100000

static cn_dims vector_dims(const int64_t *n) {
  return (cn_dims){{0, NULL, NULL}, {0, NULL, NULL}, {1, n, NULL}};
}

static bool run(cn_ctx *ctx, const cn_asgn *a, cn_backend_kind be, const char *what) {
  CHECK_MSG(a != NULL, "%s: %s", what, cn_ctx_error(ctx));
  if (!a) return false;
  cn_routine *r = cn_routine_compile(ctx, a, be, what);
  CHECK_MSG(r != NULL, "%s [%s]: %s", what, backend_names[be], cn_ctx_error(ctx));
  if (!r) return false;
  cn_status st = cn_routine_run(r);
  CHECK_MSG(st == CN_OK, "%s [%s]: %s", what, backend_names[be], cn_ctx_error(ctx));
  cn_routine_free(r);
  return st == CN_OK;
}

/* The bits of the documented wiring for one cell. */
static cn_u4x32 cell_bits(uint32_t self_id, uint32_t seed, const cn_u4x32 *counter,
                          uint32_t offset) {
  cn_u4x32 key = cn_threefry4x32_light((cn_u4x32){{self_id, 0, 0, 0}}, (cn_u4x32){{seed, 0, 0, 0}});
  if (counter) key = cn_threefry4x32_light(key, *counter);
  return cn_threefry4x32_light(key, cn_uint32_to_u4x32(offset));
}

static float single_uniform(cn_u4x32 w) {
  return (float)(w.v[0] >> 8) * 0x1p-24f;
}

/* The embed_self_id tensor of a uniform1 / uniform / uniform_at built by ops.c: the operand
 * chain uniform <- threefry(key, range) <- threefry(... threefry(embed_self_id, seed) ...). */
static cn_tensor *self_id_of(cn_tensor *uniform) {
  cn_tensor *t = uniform->args[0]; /* the bits */
  while (t->kind == CN_TK_ACCUM && t->n_args > 0) t = t->args[0];
  CHECK(t->kind == CN_TK_FETCH && t->fetch == CN_TF_EMBED_SELF_ID);
  return t;
}

/* ---- uniform1 over 10^5 cells: statistics and every cell by the wiring --------------------- */

typedef struct {
  cn_ctx *ctx;
  cn_graph *g;
  cn_tensor *u;     /* the uniform1 tensor */
  cn_tensor *p;     /* a parameter initialized by it */
  float *values;    /* N_CELLS values read back */
  uint32_t self_id; /* node id of u's embed_self_id */
} uniform_run;

static bool build_uniform1(uniform_run *u, cn_backend_kind be, uint32_t seed, bool set_seed) {
  static const int64_t n = N_CELLS;
  memset(u, 0, sizeof *u);
  u->ctx = cn_ctx_create();
  u->g = cn_graph_create(u->ctx);
  if (set_seed) CHECK(cn_graph_set_seed(u->g, seed) == CN_OK);
  cn_dims d = vector_dims(&n);
  u->u = cn_tensor_uniform1(u->g);
  u->p = u->u ? cn_tensor_param(u->g, "p", &d, u->u) : NULL;
  CHECK_MSG(u->p != NULL, "uniform1: %s", cn_ctx_error(u->ctx));
  if (!u->p || !run(u->ctx, cn_graph_init_params(u->g, u->p), be, "uniform1")) return false;
  u->values = malloc(N_CELLS * sizeof *u->values);
  CHECK(cn_node_get_cells(cn_tensor_value(u->p), false, u->values, N_CELLS) == CN_OK);
  u->self_id = (uint32_t)cn_node_id(cn_tensor_value(self_id_of(u->u)));
  return true;
}

static void free_uniform1(uniform_run *u) {
  free(u->values);
  cn_ctx_destroy(u->ctx);
}

static void test_uniform1_stream(cn_backend_kind be) {
  uniform_run u;
  if (!build_uniform1(&u, be, 42, false)) {
    free_uniform1(&u);
    return;
  }
  CHECK_STR(cn_tensor_shape(u.u), "|->100000");
  double sum = 0, sum2 = 0;
  int bins[20] = {0}, out_of_range = 0, mismatches = 0;
  for (int i = 0; i < N_CELLS; i++) {
    float v = u.values[i];
    if (!(v >= 0 && v < 1)) {
      out_of_range++;
      continue;
    }
    sum += v;
    sum2 += (double)v * v;
    bins[(int)(v * 20)]++;
    if (v != single_uniform(cell_bits(u.self_id, 42, NULL, (uint32_t)i))) mismatches++;
  }
  CHECK_INT(out_of_range, 0);
  CHECK_MSG(mismatches == 0, "[%s] %d of %d cells differ from the documented wiring",
            backend_names[be], mismatches, N_CELLS);
  double mean = sum / N_CELLS, sd = sqrt(sum2 / N_CELLS - mean * mean);
  /* 10^5 cells: the mean's standard error is 0.0009; these bounds are 5 of them */
  CHECK_NEAR(mean, 0.5, 0.0045);
  CHECK_NEAR(sd, sqrt(1.0 / 12), 0.003);
  double chi2 = 0, expected = N_CELLS / 20.0;
  for (int b = 0; b < 20; b++) chi2 += (bins[b] - expected) * (bins[b] - expected) / expected;
  CHECK_MSG(chi2 < 43.82, "chi-square %g over 20 bins (19 dof, p = 0.001 at 43.82)", chi2);
  /* cell values are not a linear run: neighbours differ and no two early cells repeat */
  int repeats = 0;
  for (int i = 1; i < 1000; i++) repeats += u.values[i] == u.values[i - 1];
  CHECK(repeats < 3);
  free_uniform1(&u);
}

/* Same graph in two contexts and on both backends: bit-identical; another seed: another stream,
 * again the wiring's. */
static void test_determinism_and_seed(void) {
  uniform_run runs[3];
  bool ok = build_uniform1(&runs[0], CN_BACKEND_INTERP, 42, false);
  ok = build_uniform1(&runs[1], CN_BACKEND_C, 42, false) && ok;
  ok = build_uniform1(&runs[2], CN_BACKEND_C, 42, true) && ok; /* the default, set explicitly */
  if (ok) {
    CHECK(memcmp(runs[0].values, runs[1].values, N_CELLS * sizeof(float)) == 0);
    CHECK(memcmp(runs[0].values, runs[2].values, N_CELLS * sizeof(float)) == 0);
  }
  for (int i = 0; i < 3; i++) free_uniform1(&runs[i]);

  uniform_run a, b;
  ok = build_uniform1(&a, CN_BACKEND_INTERP, 7, true);
  ok = build_uniform1(&b, CN_BACKEND_INTERP, 42, true) && ok;
  if (ok) {
    int same = 0, mismatches = 0;
    for (int i = 0; i < N_CELLS; i++) {
      same += a.values[i] == b.values[i];
      if (a.values[i] != single_uniform(cell_bits(a.self_id, 7, NULL, (uint32_t)i))) mismatches++;
    }
    CHECK_MSG(same < 100, "seeds 7 and 42 agree on %d cells", same);
    CHECK_INT(mismatches, 0);
    /* once random code exists the seed is fixed */
    CHECK(cn_graph_set_seed(a.g, 9) == CN_ERR_INVALID);
    CHECK_HAS(cn_ctx_error(a.ctx), "seed");
  }
  free_uniform1(&a);
  free_uniform1(&b);
}

/* ---- Default parameter init, different tensors, uniform_at ------------------------------------
 */

static void test_default_init(cn_backend_kind be) {
  static const int64_t n = 4096;
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_dims d = vector_dims(&n);
  cn_tensor *p = cn_tensor_param(g, "p", &d, NULL), *q = cn_tensor_param(g, "q", &d, NULL);
  cn_tensor *sum = p && q ? cn_tensor_apply(g, CN_OP_ADD, 2, (cn_tensor *[]){p, q}) : NULL;
  CHECK_MSG(sum != NULL, "%s", cn_ctx_error(ctx));
  if (sum && run(ctx, cn_graph_init_params(g, sum), be, "default_init")) {
    float *pv = malloc(n * sizeof *pv), *qv = malloc(n * sizeof *qv);
    CHECK(cn_node_get_cells(cn_tensor_value(p), false, pv, (size_t)n) == CN_OK);
    CHECK(cn_node_get_cells(cn_tensor_value(q), false, qv, (size_t)n) == CN_OK);
    /* p = 0.5 * (u - 0.5), u the uniform1 inside p's init expression */
    cn_tensor *u = p->args[0]->args[1]->args[0];
    CHECK(u->kind == CN_TK_ACCUM && u->prim == CN_OP_UNIFORM1);
    uint32_t id = (uint32_t)cn_node_id(cn_tensor_value(self_id_of(u)));
    int out = 0, same = 0, mismatches = 0;
    float lo = 1, hi = -1;
    for (int64_t i = 0; i < n; i++) {
      out += !(pv[i] >= -0.25f && pv[i] < 0.25f) + !(qv[i] >= -0.25f && qv[i] < 0.25f);
      same += pv[i] == qv[i];
      lo = pv[i] < lo ? pv[i] : lo;
      hi = pv[i] > hi ? pv[i] : hi;
      float want = 0.5f * (single_uniform(cell_bits(id, 42, NULL, (uint32_t)i)) - 0.5f);
      mismatches += pv[i] != want;
    }
    CHECK_INT(out, 0);
    CHECK_INT(mismatches, 0);
    CHECK_MSG(same < 5, "p and q share %d of %lld cells", same, (long long)n);
    CHECK(lo < -0.24f && hi > 0.24f); /* the whole range is used */
    free(pv);
    free(qv);
  }
  cn_ctx_destroy(ctx);
}

static void test_uniform_at(cn_backend_kind be) {
  static const int64_t n = 1000;
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_dims d = vector_dims(&n);
  cn_tensor *u3 = cn_tensor_uniform_at(g, cn_tensor_number(g, 3));
  cn_tensor *u4 = cn_tensor_uniform_at(g, cn_tensor_number(g, 4));
  cn_tensor *p3 = u3 ? cn_tensor_param(g, "p3", &d, u3) : NULL;
  cn_tensor *p4 = u4 ? cn_tensor_param(g, "p4", &d, u4) : NULL;
  CHECK_MSG(p3 && p4, "%s", cn_ctx_error(ctx));
  CHECK(cn_tensor_uniform_at(g, NULL) == NULL);
  CHECK_HAS(cn_ctx_error(ctx), "NULL counter");
  cn_tensor *both = p3 && p4 ? cn_tensor_apply(g, CN_OP_ADD, 2, (cn_tensor *[]){p3, p4}) : NULL;
  if (both && run(ctx, cn_graph_init_params(g, both), be, "uniform_at")) {
    float v3[1000], v4[1000];
    CHECK(cn_node_get_cells(cn_tensor_value(p3), false, v3, 1000) == CN_OK);
    CHECK(cn_node_get_cells(cn_tensor_value(p4), false, v4, 1000) == CN_OK);
    /* the counter is a single-precision number: its word is its raw bits {bits(3.0f),0,0,0} */
    cn_u4x32 c3 = cn_single_to_u4x32(3.0f);
    uint32_t id3 = (uint32_t)cn_node_id(cn_tensor_value(self_id_of(u3)));
    int same = 0, mismatches = 0;
    for (int i = 0; i < 1000; i++) {
      same += v3[i] == v4[i];
      mismatches += v3[i] != single_uniform(cell_bits(id3, 42, &c3, (uint32_t)i));
    }
    CHECK_INT(mismatches, 0);
    CHECK(same < 5);
  }
  cn_ctx_destroy(ctx);
}

/* ---- Init code gathered transitively, each parameter once --------------------------------------
 */

/* q is initialized from p's value (q = 2 * p + 1) and only q is used: init_params(q's user) seeds
 * p first, then q; a second request hands out nothing; a later parameter gets its own init. */
static void test_init_order(cn_backend_kind be) {
  static const int64_t n = 3;
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_dims d = vector_dims(&n);
  cn_tensor *p = cn_tensor_param(g, "p", &d, cn_tensor_data(g, "p0", &d, (double[]){1, 2, 3}, 3));
  cn_tensor *twice =
      p ? cn_tensor_apply(g, CN_OP_FMA, 3,
                          (cn_tensor *[]){cn_tensor_number(g, 2), p, cn_tensor_number(g, 1)})
        : NULL;
  cn_tensor *q = twice ? cn_tensor_param(g, "q", &d, twice) : NULL;
  cn_tensor *y = q ? cn_tensor_apply(g, CN_OP_NEG, 1, &q) : NULL;
  CHECK_MSG(y != NULL, "%s", cn_ctx_error(ctx));
  if (y) {
    cn_tensor *params[4] = {NULL};
    CHECK_INT(cn_graph_params(g, y, params, 4), 1); /* y reads q only */
    CHECK(params[0] == q);
    cn_asgn *init = cn_graph_init_params(g, y);
    CHECK_MSG(init && run(ctx, cn_asgn_seq(ctx, 2, (cn_asgn *[]){init, cn_graph_forward(g, y)}), be,
                          "init_order"),
              "%s", cn_ctx_error(ctx));
    double pv[3], qv[3], yv[3];
    CHECK(cn_node_get_values(cn_tensor_value(p), false, pv, 3) == CN_OK);
    CHECK(cn_node_get_values(cn_tensor_value(q), false, qv, 3) == CN_OK);
    CHECK(cn_node_get_values(cn_tensor_value(y), false, yv, 3) == CN_OK);
    for (int i = 0; i < 3; i++) {
      CHECK_NEAR(pv[i], i + 1, 0);
      CHECK_NEAR(qv[i], 2 * (i + 1) + 1, 0);
      CHECK_NEAR(yv[i], -(2 * (i + 1) + 1), 0);
    }
    /* nothing is seeded twice */
    const char *again = cn_asgn_to_string(ctx, cn_graph_init_params(g, y));
    CHECK_MSG(again && !strstr(again, "=:"), "second init:\n%s", again ? again : "");
    cn_tensor *r = cn_tensor_param(g, "r", &d, cn_tensor_data(g, "r0", &d, (double[]){7}, 1));
    cn_tensor *z = r ? cn_tensor_apply(g, CN_OP_ADD, 2, (cn_tensor *[]){y, r}) : NULL;
    const char *third = z ? cn_asgn_to_string(ctx, cn_graph_init_params(g, z)) : NULL;
    CHECK_MSG(third && strstr(third, "r =:") && !strstr(third, "q =:") && !strstr(third, "p =:"),
              "third init:\n%s", third ? third : cn_ctx_error(ctx));
  }
  cn_ctx_destroy(ctx);
}

/* ---- The vectorized uniform: lane j of hashed cell o is value o * lanes + j (§7.3) ----------- */

static void test_uniform_vec(cn_backend_kind be, cn_prec prec) {
  int lanes = (int)(16 / cn_prec_bytes(prec));
  const int64_t n = 64 * lanes;
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, prec);
  cn_dims d = vector_dims(&n);
  cn_tensor *u = cn_tensor_uniform(g);
  cn_tensor *p = u ? cn_tensor_param(g, "p", &d, u) : NULL;
  CHECK_MSG(p != NULL, "uniform %s: %s", cn_prec_name(prec), cn_ctx_error(ctx));
  if (p && run(ctx, cn_graph_init_params(g, p), be, "uniform_vec")) {
    CHECK_STR(cn_tensor_shape(u->args[0]), "|->64"); /* one hashed word per `lanes` values */
    uint32_t id = (uint32_t)cn_node_id(cn_tensor_value(self_id_of(u)));
    double *v = malloc((size_t)n * sizeof *v);
    CHECK(cn_node_get_values(cn_tensor_value(p), false, v, (size_t)n) == CN_OK);
    int mismatches = 0, out = 0;
    for (int o = 0; o < 64; o++) {
      cn_u4x32 w = cell_bits(id, 42, NULL, (uint32_t)o);
      for (int j = 0; j < lanes; j++) {
        double want = 0;
        switch (prec) {
        case CN_PREC_SINGLE: want = (float)(w.v[j] >> 8) * 0x1p-24f; break;
        case CN_PREC_DOUBLE:
          want = (double)((uint64_t)w.v[2 * j + 1] << 32 | w.v[2 * j]) * 0x1p-64;
          break;
        case CN_PREC_HALF: { /* lanes 2i, 2i+1: the low, high 16 bits of word i, as a half */
          uint32_t bits16 = j % 2 ? w.v[j / 2] >> 16 : w.v[j / 2] & 0xFFFFu;
          want = cn_prec_half_to_single(cn_prec_single_to_half((float)bits16 / 65536.0f));
          break;
        }
        default: CHECK(!"precision not covered");
        }
        double got = v[o * lanes + j];
        mismatches += got != want;
        out += !(got >= 0 && got <= 1); /* a half rounds the top fractions up to 1 */
      }
    }
    CHECK_MSG(mismatches == 0, "uniform %s [%s]: %d lanes differ", cn_prec_name(prec),
              backend_names[be], mismatches);
    CHECK_INT(out, 0);
    free(v);
  }
  cn_ctx_destroy(ctx);
}

/* ---- OCANNL's known word through the tensor API -----------------------------------------------
 */

/* light(key {42,0,0,0}, spread(0)) = 76bb7178 bb82ac4f 8f90552b 81b2da10 (test_numeric); as a
 * tensor program: threefry(embed_self_id, range_over_offsets) with the embed node's id 42, read
 * as words and as half uniforms (lo16 of word 0: 0x7178 / 65536 -> 0.443359375). */
static void test_known_word(cn_backend_kind be) {
  cn_ctx *ctx = cn_ctx_create();
  /* node ids are per context, in creation order: take 1..41 so the embed node gets 42 */
  for (int id = 1; id < 42; id++) cn_node_create(ctx, "filler", CN_PREC_BYTE, 0, NULL);
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_HALF);
  static const int64_t n = 4;
  cn_dims d = vector_dims(&n);
  cn_tensor *id = cn_tensor_embed_self_id(g), *range = cn_tensor_range_over_offsets(g);
  cn_tensor *words = cn_tensor_apply(g, CN_OP_THREEFRY_LIGHT, 2, (cn_tensor *[]){id, range});
  cn_tensor *u = words ? cn_tensor_apply(g, CN_OP_UNIFORM1, 1, &words) : NULL;
  cn_tensor *p = u ? cn_tensor_param(g, "p", &d, u) : NULL;
  CHECK_MSG(p != NULL, "%s", cn_ctx_error(ctx));
  if (p && run(ctx, cn_graph_init_params(g, p), be, "known_word")) {
    CHECK_INT(cn_node_id(cn_tensor_value(id)), 42);
    cn_u4x32 w[4];
    CHECK(cn_node_get_cells(cn_tensor_value(words), false, w, 4) == CN_OK);
    CHECK_MSG(w[0].v[0] == 0x76bb7178u && w[0].v[1] == 0xbb82ac4fu && w[0].v[2] == 0x8f90552bu &&
                  w[0].v[3] == 0x81b2da10u,
              "[%s] %08x %08x %08x %08x", backend_names[be], w[0].v[0], w[0].v[1], w[0].v[2],
              w[0].v[3]);
    double h[4];
    CHECK(cn_node_get_values(cn_tensor_value(p), false, h, 4) == CN_OK);
    CHECK_NEAR(h[0], 0.443359375, 0);
    for (int i = 1; i < 4; i++) {
      cn_u4x32 want = cn_threefry4x32_light((cn_u4x32){{42, 0, 0, 0}}, cn_uint32_to_u4x32(i));
      CHECK(memcmp(&w[i], &want, sizeof want) == 0);
    }
  }
  cn_ctx_destroy(ctx);
}

int main(void) {
  for (int b = 0; b < 2; b++) {
    test_uniform1_stream(backends[b]);
    test_default_init(backends[b]);
    test_uniform_at(backends[b]);
    test_uniform_vec(backends[b], CN_PREC_SINGLE);
    test_uniform_vec(backends[b], CN_PREC_DOUBLE);
    test_uniform_vec(backends[b], CN_PREC_HALF);
    test_known_word(backends[b]);
    test_init_order(backends[b]);
  }
  test_determinism_and_seed();
  CHECK_DONE();
}
