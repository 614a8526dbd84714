/* Causal attention and the transformer block (src/tile/attention.c), on the interpreter and on
 * generated C, in double:
 *   - forward values against NumPy, run by /usr/bin/python3 from a script this test writes (the
 *     mask there is the usual -inf select, independent of the Tile constraints): causal_softmax
 *     (with a huge value in a masked cell, which must not move its row's max, and rows of large
 *     scores, which need the max), causal_sdpa, causal_attention and transformer_block with their
 *     parameters set to known values (causal_sdpa in single precision too); masked probabilities
 *     exactly 0; skipped (exit 77, with a message) when NumPy is absent, after the checks that
 *     need no NumPy;
 *   - gradients of every parameter cell and of the input against central finite differences, for
 *     sdpa, attention and the block;
 *   - the mask in backprop: with a loss reading output row q0 only, the gradients of K and V (sdpa)
 *     and of x (attention, block) at every position after q0 are exactly 0, and some before it are
 *     not;
 *   - the lowered loops of every masked product are triangular (`for k in 0..q + 1`), forward and
 *     backward;
 *   - scheduled and unscheduled causal_sdpa (forward and backward, single precision) give the same
 *     bits on 1, 2 and 3 threads, the triangular products unrolled and jammed;
 *   - dropout inside attention: rate 0 gives the result without dropout exactly, rate 0.5 another;
 *   - last_position: the attention and the block for the last position only equal the full ones'
 *     last row, bit for bit in exact mode (single precision), within 2e-6 in the fused mode;
 *   - the notation builtins against the C functions, and refusals with their messages. */
#include "check.h"
#include "graph_check.h"

#include "cannl.h"

#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

#define MAXC 4096

/* ---- NumPy references ------------------------------------------------------------------------ */

static bool numpy_present(void) {
  static int have = -1;
  if (have < 0) have = system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
  return have;
}
static bool numpy_skipped;

static const char numpy_prelude[] =
    "import numpy as np\n"
    "def ln(x, w, b):\n"
    "    m = x.mean(-1, keepdims=True)\n"
    "    v = ((x - m) ** 2).mean(-1, keepdims=True)\n"
    "    return (x - m) / np.sqrt(v + 1e-5) * w + b\n"
    "def gelu(x):\n"
    "    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))\n"
    "def causal_softmax(s):\n"
    "    t = s.shape[-1]\n"
    "    s = np.where(np.tril(np.ones((t, t), dtype=bool)), s, -np.inf)\n"
    "    e = np.exp(s - s.max(-1, keepdims=True))\n"
    "    return e / e.sum(-1, keepdims=True)\n"
    "def sdpa(q, k, v):\n"
    "    s = np.einsum('bqhd,bkhd->bhqk', q, k) / np.sqrt(q.shape[-1])\n"
    "    return np.einsum('bhqk,bkhd->bqhd', causal_softmax(s), v)\n"
    "def attn(x, p, n):\n"
    "    q, k, v = (np.einsum('btc,hdc->bthd', x, p[n + 'attn.' + w + '.weight'])\n"
    "               + p[n + 'attn.' + w + '.bias'] for w in 'qkv')\n"
    "    o = sdpa(q, k, v)\n"
    "    return np.einsum('bthd,chd->btc', o, p[n + 'attn.c_proj.weight']) + p[n + "
    "'attn.c_proj.bias']\n"
    "def block(x, p, n):\n"
    "    x = x + attn(ln(x, p[n + 'ln_1.weight'], p[n + 'ln_1.bias']), p, n)\n"
    "    h = ln(x, p[n + 'ln_2.weight'], p[n + 'ln_2.bias'])\n"
    "    h = gelu(np.einsum('btc,fc->btf', h, p[n + 'mlp.c_fc.weight']) + p[n + 'mlp.c_fc.bias'])\n"
    "    return x + np.einsum('btf,cf->btc', h, p[n + 'mlp.c_proj.weight']) + p[n + "
    "'mlp.c_proj.bias']\n"
    "def out(a):\n"
    "    print('\\n'.join('%.17g' % v for v in np.asarray(a, dtype=float).ravel()))\n"
    "p = {}\n";

typedef struct {
  char *text;
  size_t len, cap;
} script;

static void put(script *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (s->len + (size_t)n + 1 > s->cap) {
    size_t cap = (s->len + (size_t)n + 1) * 2;
    char *t = realloc(s->text, cap);
    CHECK(t != NULL);
    if (!t) return;
    s->text = t;
    s->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(s->text + s->len, s->cap - s->len, fmt, ap);
  va_end(ap);
  s->len += (size_t)n;
}

/* `name = np.array([...]).reshape(dims)` with node's values and dims (memory order). */
static void put_node(script *s, const char *name, cn_node *node) {
  int64_t n = node ? cn_node_numel(node) : 0;
  double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  CHECK(node && v && cn_node_get_values(node, false, v, (size_t)n) == CN_OK);
  put(s, "%s = np.array([", name);
  for (int64_t i = 0; v && i < n; i++) put(s, "%.17g,", v[i]);
  put(s, "]).reshape((");
  for (int a = 0; node && a < cn_node_rank(node); a++)
    put(s, "%lld,", (long long)cn_node_dim(node, a));
  put(s, "))\n");
  free(v);
}

/* Runs the script (prelude first) and reads n numbers it prints; false when NumPy is absent (the
 * comparison is skipped) or the script fails (a failed check). */
static bool numpy_run(script *s, double *out, int64_t n) {
  if (!numpy_present()) {
    numpy_skipped = true;
    free(s->text);
    return false;
  }
  char path[] = "/tmp/cn_attention_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  bool ok = f && fputs(numpy_prelude, f) >= 0 && fputs(s->text, f) >= 0;
  if (f) ok = fclose(f) == 0 && ok;
  free(s->text);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s", path);
  FILE *p = ok ? popen(cmd, "r") : NULL;
  int64_t got = 0;
  while (p && got < n && fscanf(p, "%lf", &out[got]) == 1) got++;
  int rc = p ? pclose(p) : -1;
  unlink(path);
  CHECK_MSG(rc == 0 && got == n, "numpy script: exit %d, %lld of %lld values", rc, (long long)got,
            (long long)n);
  return rc == 0 && got == n;
}

/* ---- Graph helpers -------------------------------------------------------------------------- */

/* A deterministic value of cell j of parameter i, about the size trained weights have. */
static double param_value(int i, int64_t j) {
  return 0.5 * sin(0.9 * (double)j + 1.7 * i + 0.3);
}

/* Sets every parameter of t (after its init ran) to param_value; returns their count. */
static int set_params(cn_graph *g, cn_tensor *t, cn_tensor **ps, int cap) {
  int n = cn_graph_params(g, t, ps, cap);
  CHECK(n <= cap);
  double v[MAXC];
  for (int i = 0; i < n && i < cap; i++) {
    int64_t c = cn_node_numel(cn_tensor_value(ps[i]));
    CHECK(c <= MAXC);
    for (int64_t j = 0; j < c && j < MAXC; j++) v[j] = param_value(i, j);
    CHECK(cn_node_set_values(cn_tensor_value(ps[i]), false, v, (size_t)c) == CN_OK);
  }
  return n;
}

static void seq_values(double *v, int64_t n, double a, double b, double scale) {
  for (int64_t i = 0; i < n; i++) v[i] = scale * sin(a * (double)i + b);
}

/* Initializes t's parameters, sets them to known values, computes t and reads n cells. */
static bool forward_values(cn_graph *g, cn_tensor *t, cn_backend_kind b, double *got, int64_t n) {
  cn_tensor *ps[64];
  CHECK_MSG(t != NULL, "build: %s", cn_ctx_error(cn_graph_ctx(g)));
  if (!t || !run(g, cn_graph_init_params(g, t), b, "init")) return false;
  set_params(g, t, ps, 64);
  return run(g, cn_graph_forward(g, t), b, "forward") && read_node(cn_tensor_value(t), got, n);
}

static const cn_dims d_scores = {NONE, NONE, AXES(2, 2, 5, 5)}; /* B=2, H=2, T=5 */
static const cn_dims d_qkv = {AXES(2, 5), NONE, AXES(2, 3)};    /* B=2, T=5 | -> H=2, D=3 */
static const cn_dims d_x = {AXES(2, 4), NONE, AXES(8)};         /* B=2, T=4 | -> C=8 */

/* ---- causal_softmax ------------------------------------------------------------------------- */

static void test_softmax(cn_backend_kind b) {
  cn_graph *g = new_graph(CN_PREC_DOUBLE);
  double s[100], got[100], want[100];
  seq_values(s, 100, 1.3, 0.2, 3);
  /* batch 0, head 0: a masked cell (q = 0, k = 4) huge, which the max must not see (row 0 would
   * be exp(-1e30) / sum: 0 / 0); batch 1, head 1: large valid scores, which need the max */
  s[4] = 1e30;
  for (int i = 75; i < 100; i++) s[i] += 800;
  cn_tensor *ts = data(g, "s", d_scores, s);
  cn_tensor *p = cn_tensor_causal_softmax(g, ts);
  if (!forward_values(g, p, b, got, 100)) {
    free_graph(g);
    return;
  }
  CHECK_STR(cn_tensor_shape(p), "|->2,2,5,5");
  int nonzero_masked = 0;
  for (int i = 0; i < 100; i++) nonzero_masked += i % 5 > i / 5 % 5 && got[i] != 0;
  CHECK_INT(nonzero_masked, 0);
  script sc = {0};
  put_node(&sc, "s", cn_tensor_value(ts));
  put(&sc, "out(causal_softmax(s))\n");
  if (numpy_run(&sc, want, 100)) expect_near("causal_softmax", got, want, 100, 1e-14);
  free_graph(g);
}

/* ---- causal_sdpa ---------------------------------------------------------------------------- */

static void test_sdpa(cn_backend_kind b, cn_prec prec) {
  cn_graph *g = new_graph(prec);
  double q[60], k[60], v[60], got[60], want[60];
  seq_values(q, 60, 0.7, 0.1, 2);
  seq_values(k, 60, 1.1, 0.5, 2);
  seq_values(v, 60, 0.3, 0.9, 1.5);
  cn_tensor *tq = data(g, "q", d_qkv, q), *tk = data(g, "k", d_qkv, k),
            *tv = data(g, "v", d_qkv, v);
  cn_tensor *o = cn_tensor_causal_sdpa(g, tq, tk, tv, NULL, NULL);
  if (!forward_values(g, o, b, got, 60)) {
    free_graph(g);
    return;
  }
  CHECK_STR(cn_tensor_shape(o), "|->2,5,2,3");
  script sc = {0};
  put_node(&sc, "q", cn_tensor_value(tq));
  put_node(&sc, "k", cn_tensor_value(tk));
  put_node(&sc, "v", cn_tensor_value(tv));
  put(&sc, "out(sdpa(q, k, v))\n");
  if (numpy_run(&sc, want, 60))
    expect_near("causal_sdpa", got, want, 60, prec == CN_PREC_DOUBLE ? 1e-13 : 2e-6);
  /* query 0 sees key 0 only: its output is v at position 0 exactly (v as stored) */
  CHECK(read_node(cn_tensor_value(tv), v, 60));
  for (int h = 0; h < 2; h++)
    for (int d = 0; d < 3; d++) CHECK(got[h * 3 + d] == v[h * 3 + d]);
  free_graph(g);
}

/* ---- causal_attention and transformer_block ------------------------------------------------- */

static const cn_attention cfg2 = {2, 3, NULL, NULL, false};

static void test_block_values(cn_backend_kind b, bool block) {
  cn_graph *g = new_graph(CN_PREC_DOUBLE);
  double x[64], got[64], want[64];
  seq_values(x, 64, 0.45, 0.3, 1.2);
  cn_tensor *tx = data(g, "x", d_x, x);
  cn_tensor *y = block ? cn_tensor_transformer_block(g, tx, "h0", &cfg2)
                       : cn_tensor_causal_attention(g, tx, "h0", &cfg2);
  if (!forward_values(g, y, b, got, 64)) {
    free_graph(g);
    return;
  }
  CHECK_STR(cn_tensor_shape(y), "2,4|->8");
  cn_tensor *ps[64];
  int n = cn_graph_params(g, y, ps, 64);
  CHECK_INT(n, block ? 16 : 8);
  script sc = {0};
  put_node(&sc, "x", cn_tensor_value(tx));
  char name[300];
  for (int i = 0; i < n && i < 64; i++) {
    snprintf(name, sizeof name, "p['%s']", cn_tensor_label(ps[i]));
    put_node(&sc, name, cn_tensor_value(ps[i]));
  }
  put(&sc, "out(%s(x, p, 'h0.'))\n", block ? "block" : "attn");
  if (numpy_run(&sc, want, 64)) expect_near(block ? "block" : "attention", got, want, 64, 1e-12);
  free_graph(g);
}

/* last_position: the block (and the attention alone) for the last position only is the full
 * one's last row, bit for bit in exact mode (the same operations on the same values; single
 * precision, so a rounding difference would show), within 2e-6 in the fused mode (products below
 * the matrix-product threshold round each update as the nest says); shape B,1|->C. */
static void test_last_position(cn_backend_kind b, bool block, bool exact) {
  cn_graph *g = new_graph(CN_PREC_SINGLE);
  CHECK_INT(cn_ctx_set_option(cn_graph_ctx(g), "exact", exact ? "on" : "off"), CN_OK);
  double x[64], full[64], last[16];
  seq_values(x, 64, 0.45, 0.3, 1.2);
  cn_tensor *tx = data(g, "x", d_x, x);
  cn_attention only_last = cfg2;
  only_last.last_position = true;
  cn_tensor *y = block ? cn_tensor_transformer_block(g, tx, "h0", &cfg2)
                       : cn_tensor_causal_attention(g, tx, "h0", &cfg2);
  cn_tensor *yl = y ? (block ? cn_tensor_transformer_block(g, tx, "h0", &only_last)
                             : cn_tensor_causal_attention(g, tx, "h0", &only_last))
                    : NULL;
  CHECK_MSG(yl != NULL, "%s", cn_ctx_error(cn_graph_ctx(g)));
  if (!yl || !forward_values(g, y, b, full, 64) || !forward_values(g, yl, b, last, 16)) {
    free_graph(g);
    return;
  }
  CHECK_STR(cn_tensor_shape(yl), "2,1|->8");
  int differ = 0;
  for (int batch = 0; batch < 2; batch++)
    for (int c = 0; c < 8; c++) {
      double want = full[batch * 32 + 3 * 8 + c], got = last[batch * 8 + c];
      differ += exact ? memcmp(&want, &got, sizeof got) != 0 : fabs(got - want) > 2e-6;
    }
  CHECK_MSG(differ == 0, "last_position %s, %s: %d of 16 cells differ from the last row",
            block ? "block" : "attention", exact ? "exact" : "fused", differ);
  free_graph(g);
}

/* nanoGPT's init: labels, shapes, weights' standard deviations, zero biases, unit ln scales. */
static void test_init(void) {
  const cn_attention cfg = {2, 4, NULL, NULL, false};
  cn_graph *g2 = new_graph(CN_PREC_DOUBLE);
  double xs[2 * 4 * 64];
  seq_values(xs, 512, 0.45, 0.3, 1.2);
  cn_tensor *y = cn_tensor_transformer_block(
      g2, data(g2, "x", (cn_dims){AXES(2, 4), NONE, AXES(64)}, xs), "h1", &cfg);
  CHECK(y != NULL && run(g2, cn_graph_init_params(g2, y), CN_BACKEND_C, "init"));
  static const struct {
    const char *label, *shape;
    double std, mean; /* std 0: every cell equals mean */
  } want[16] = {
      {"h1.ln_1.weight", "|->64", 0, 1},
      {"h1.ln_1.bias", "|->64", 0, 0},
      {"h1.attn.q.weight", "|64->2,32", 0.02, 0},
      {"h1.attn.q.bias", "|->2,32", 0, 0},
      {"h1.attn.k.weight", "|64->2,32", 0.02, 0},
      {"h1.attn.k.bias", "|->2,32", 0, 0},
      {"h1.attn.v.weight", "|64->2,32", 0.02, 0},
      {"h1.attn.v.bias", "|->2,32", 0, 0},
      {"h1.attn.c_proj.weight", "|2,32->64", 0.0070710678118654752, 0}, /* 0.02 / sqrt(2 * 4) */
      {"h1.attn.c_proj.bias", "|->64", 0, 0},
      {"h1.ln_2.weight", "|->64", 0, 1},
      {"h1.ln_2.bias", "|->64", 0, 0},
      {"h1.mlp.c_fc.weight", "|64->256", 0.02, 0},
      {"h1.mlp.c_fc.bias", "|->256", 0, 0},
      {"h1.mlp.c_proj.weight", "|256->64", 0.0070710678118654752, 0},
      {"h1.mlp.c_proj.bias", "|->64", 0, 0},
  };
  cn_tensor *ps[16];
  CHECK_INT(y ? cn_graph_params(g2, y, ps, 16) : 0, 16);
  static double v[256 * 64];
  for (int i = 0; y && i < 16; i++) {
    CHECK_STR(cn_tensor_label(ps[i]), want[i].label);
    CHECK_STR(cn_tensor_shape(ps[i]), want[i].shape);
    int64_t n = cn_node_numel(cn_tensor_value(ps[i]));
    if (!read_node(cn_tensor_value(ps[i]), v, n)) continue;
    double sum = 0, sq = 0;
    int off = 0;
    for (int64_t j = 0; j < n; j++) {
      sum += v[j];
      sq += v[j] * v[j];
      off += want[i].std == 0 && v[j] != want[i].mean;
    }
    CHECK_INT(off, 0);
    if (want[i].std > 0) { /* n >= 4096 cells: the sample moments within a few percent */
      double mean = sum / (double)n, sd = sqrt(sq / (double)n - mean * mean);
      CHECK_MSG(fabs(mean) < 0.1 * want[i].std && fabs(sd / want[i].std - 1) < 0.05,
                "%s: mean %g, std %g", want[i].label, mean, sd);
    }
  }
  free_graph(g2);
}

/* ---- Gradients ------------------------------------------------------------------------------ */

/* Builds the network under test from its inputs (parameters, each of dims d). */
typedef cn_tensor *(*net_fn)(cn_graph *g, cn_tensor *const *in);

static cn_tensor *net_sdpa(cn_graph *g, cn_tensor *const *in) {
  return cn_tensor_causal_sdpa(g, in[0], in[1], in[2], NULL, NULL);
}
static cn_tensor *net_attention(cn_graph *g, cn_tensor *const *in) {
  return cn_tensor_causal_attention(g, in[0], "a", &cfg2);
}
static cn_tensor *net_block(cn_graph *g, cn_tensor *const *in) {
  return cn_tensor_transformer_block(g, in[0], "b", &cfg2);
}

/* loss = sum(y * w), w = sin(0.7 * cell + 0.3) on output row `row` of time axis 1 (memory order
 * [B, T, ...]) and 0 elsewhere (row < 0: everywhere). Checks the gradient of every cell of every
 * parameter (the n_in inputs first, their values set like the others) against central
 * differences, and writes the inputs' gradients into in_grad (n_in * numel(d) cells). */
static void fd_check(const char *name, cn_backend_kind b, net_fn net, int n_in, cn_dims d, int row,
                     double *in_grad) {
  cn_graph *g = new_graph(CN_PREC_DOUBLE);
  cn_ctx *ctx = cn_graph_ctx(g);
  int64_t n = numel_of(&d);
  cn_tensor *in[3];
  for (int i = 0; i < n_in; i++) {
    char label[8] = {(char)('x' + i), 0};
    in[i] = cn_tensor_param(g, label, &d, cn_tensor_number(g, 0));
  }
  cn_tensor *y = net(g, in);
  CHECK_MSG(y != NULL, "%s: %s", name, cn_ctx_error(ctx));
  if (!y || !cn_tensor_value(y)) {
    free_graph(g);
    return;
  }
  cn_node *yn = cn_tensor_value(y);
  int64_t ny = cn_node_numel(yn), t_size = cn_node_dim(yn, 1),
          inner = ny / cn_node_dim(yn, 0) / t_size;
  double w[MAXC];
  for (int64_t c = 0; c < ny && c < MAXC; c++)
    w[c] = row < 0 || (c / inner) % t_size == row ? sin(0.7 * (double)c + 0.3) : 0;
  cn_dims yd = {NONE,
                NONE,
                {cn_node_rank(yn),
                 (int64_t[]){cn_node_dim(yn, 0), cn_node_dim(yn, 1), cn_node_dim(yn, 2),
                             cn_node_rank(yn) > 3 ? cn_node_dim(yn, 3) : 1},
                 NULL}};
  cn_tensor *wt = data(g, "w", yd, w);
  /* w has y's memory-order dims as output axes: read y through an einsum naming every axis */
  cn_tensor *yw = cn_tensor_einsum(
      g, cn_node_rank(yn) == 4 ? "a,b,c,d; a,b,c,d => a,b,c,d" : "a,b|->c; a,b,c => a,b|->c",
      CN_OP_ADD, CN_OP_MUL, 2, (cn_tensor *[]){y, wt});
  cn_tensor *loss = cn_tensor_sum(g, yw);
  CHECK_MSG(loss != NULL, "%s: %s", name, cn_ctx_error(ctx));
  cn_routine *fwd = loss ? compile(g, cn_graph_forward(g, loss), b, "fd_forward") : NULL;
  cn_tensor *ps[64];
  int np = 0;
  if (fwd && run(g, cn_graph_init_params(g, loss), b, "fd_init")) {
    np = set_params(g, loss, ps, 64);
    if (!run(g, cn_graph_grad_update(g, loss), b, "fd_grad")) np = 0;
  }
  double ga[MAXC], v[MAXC], lv[2];
  int bad = 0;
  for (int i = 0; i < np; i++) {
    int64_t c = cn_node_numel(cn_tensor_value(ps[i]));
    if (!read_node(cn_tensor_grad(ps[i]), ga, c)) break;
    if (i < n_in) memcpy(in_grad + i * n, ga, (size_t)n * sizeof *ga);
    for (int64_t j = 0; j < c; j++) {
      for (int64_t k = 0; k < c; k++) v[k] = param_value(i, k);
      for (int side = 0; side < 2; side++) {
        v[j] = param_value(i, j) + (side ? -1e-6 : 1e-6);
        cn_node_set_values(cn_tensor_value(ps[i]), false, v, (size_t)c);
        lv[side] = NAN;
        if (cn_routine_run(fwd) == CN_OK)
          cn_node_get_values(cn_tensor_value(loss), false, &lv[side], 1);
      }
      v[j] = param_value(i, j);
      cn_node_set_values(cn_tensor_value(ps[i]), false, v, (size_t)c);
      double gn = (lv[0] - lv[1]) / 2e-6;
      if (!(fabs(gn - ga[j]) <= 1e-7 * fmax(1, fabs(ga[j]))) && bad++ < 4)
        fprintf(stderr, "  %s: d/d%s[%lld] = %.12g, differences %.12g\n", name,
                cn_tensor_label(ps[i]), (long long)j, ga[j], gn);
    }
  }
  CHECK_MSG(np >= n_in && np > 0, "%s: %d parameters", name, np);
  CHECK_MSG(bad == 0, "%s: %d gradient cells differ from finite differences", name, bad);
  cn_routine_free(fwd);
  free_graph(g);
}

/* Whether the gradient cells of positions after q0 (time axis 1 of [B, T, inner]) are exactly 0
 * while some cell at or before q0 is not. */
static void expect_no_future(const char *what, const double *grad, int64_t bsz, int64_t t,
                             int64_t inner, int q0) {
  int future = 0, past = 0;
  for (int64_t c = 0; c < bsz * t * inner; c++) {
    int64_t pos = c / inner % t;
    if (pos > q0)
      future += grad[c] != 0;
    else
      past += grad[c] != 0;
  }
  CHECK_MSG(future == 0, "%s: %d gradient cells after position %d are not 0", what, future, q0);
  CHECK_MSG(past > 0, "%s: no gradient up to position %d", what, q0);
}

static void test_gradients(cn_backend_kind b) {
  double g3[3 * 60], gx[64];
  fd_check("sdpa", b, net_sdpa, 3, d_qkv, -1, g3);
  fd_check("attention", b, net_attention, 1, d_x, -1, gx);
  fd_check("block", b, net_block, 1, (cn_dims){AXES(2, 3), NONE, AXES(4)}, -1, gx);
  /* output row 2 only: K and V (inputs 2 and 3) after position 2 get exactly 0; Q has no
   * gradient outside row 2 at all */
  fd_check("sdpa row 2", b, net_sdpa, 3, d_qkv, 2, g3);
  expect_no_future("sdpa dK", g3 + 60, 2, 5, 6, 2);
  expect_no_future("sdpa dV", g3 + 120, 2, 5, 6, 2);
  int q_off_row = 0;
  for (int c = 0; c < 60; c++) q_off_row += c / 6 % 5 != 2 && g3[c] != 0;
  CHECK_INT(q_off_row, 0);
  fd_check("attention row 1", b, net_attention, 1, d_x, 1, gx);
  expect_no_future("attention dx", gx, 2, 4, 8, 1);
  fd_check("block row 0", b, net_block, 1, (cn_dims){AXES(2, 3), NONE, AXES(4)}, 0, gx);
  expect_no_future("block dx", gx, 2, 3, 4, 0);
}

/* ---- Loops ---------------------------------------------------------------------------------- */

/* The number of loops `for k#N in 0..q#M + 1:` in text. */
static int triangular_loops(const char *text) {
  int count = 0;
  for (const char *p = strstr(text, "for k#"); p; p = strstr(p + 1, "for k#")) {
    const char *e = p + 6;
    while (*e >= '0' && *e <= '9') e++;
    if (strncmp(e, " in 0..q#", 9) != 0) continue;
    e += 9;
    while (*e >= '0' && *e <= '9') e++;
    count += strncmp(e, " + 1:", 5) == 0;
  }
  return count;
}

static void test_loops(cn_backend_kind b) {
  cn_graph *g = new_graph(CN_PREC_DOUBLE);
  cn_ctx *ctx = cn_graph_ctx(g);
  CHECK_INT(cn_ctx_set_option(ctx, "schedule", "none"), CN_OK);
  double q[60];
  seq_values(q, 60, 0.7, 0.1, 2);
  cn_tensor *tq = cn_tensor_param(g, "q", &d_qkv, data(g, "q0", d_qkv, q));
  cn_tensor *o = cn_tensor_causal_sdpa(g, tq, tq, tq, NULL, NULL);
  cn_tensor *loss = o ? cn_tensor_sum(g, o) : NULL;
  cn_routine *r = loss ? compile(g, cn_graph_forward(g, loss), b, "forward") : NULL;
  if (r) {
    const char *loops = cn_routine_loops(r);
    /* the scores, the max (its marking pass too), the shift, the sum, the normalization, the mix */
    CHECK_MSG(triangular_loops(loops) == 7, "%d triangular loops in\n%s", triangular_loops(loops),
              loops);
    /* the score product itself: its innermost loops are k in 0..q + 1, then d */
    const char *prod = strstr(loops, "+ Qs[");
    const char *k_loop = prod ? strstr(loops, "for k#") : NULL;
    CHECK(prod && k_loop && k_loop < prod);
    cn_routine_free(r);
  }
  r = loss ? compile(g, cn_graph_backprop(g, loss), b, "backprop") : NULL;
  if (r) { /* the gradients of every masked product visit the triangle only */
    CHECK_MSG(triangular_loops(cn_routine_loops(r)) >= 7, "backprop loops:\n%s",
              cn_routine_loops(r));
    cn_routine_free(r);
  }
  free_graph(g);
}

/* ---- Scheduled bits ------------------------------------------------------------------------- */

/* causal_sdpa forward and backward in single precision (T = 21: the jammed triangular loops cut
 * a group in most rows) gives the same bits scheduled as unscheduled, on 1, 2 and 3 threads; the
 * scheduled routine unrolls and jams the triangular score products (`k_jam` under a bound). */
#define SB_N (2 * 21 * 2 * 16)
static void test_schedule_bits(void) {
  static double want[4][SB_N], got[4][SB_N];
  const cn_dims d = {NONE, NONE, AXES(2, 21, 2, 16)};
  for (int run_k = 0; run_k < 4; run_k++) { /* unscheduled, then scheduled on 1, 2, 3 threads */
    cn_graph *g = new_graph(CN_PREC_SINGLE);
    cn_ctx *ctx = cn_graph_ctx(g);
    char threads[4];
    snprintf(threads, sizeof threads, "%d", run_k ? run_k : 1);
    CHECK_INT(cn_ctx_set_option(ctx, "schedule", run_k ? "all" : "none"), CN_OK);
    CHECK_INT(cn_ctx_set_option(ctx, "threads", threads), CN_OK);
    CHECK_INT(cn_ctx_set_option(ctx, "parallel_work", "1"), CN_OK);
    cn_tensor *in[3];
    for (int i = 0; i < 3; i++) {
      double v[SB_N];
      seq_values(v, SB_N, 0.37 + 0.2 * i, 0.1 * i, 1.5);
      const char labels[3][2] = {"q", "k", "v"};
      in[i] = cn_tensor_param(g, labels[i], &d, data(g, "init", d, v));
    }
    cn_tensor *y = cn_tensor_causal_sdpa(g, in[0], in[1], in[2], NULL, NULL);
    cn_tensor *loss = y ? cn_tensor_einsum(g, "...|...->... ; ...|...->... => 0", CN_OP_ADD,
                                           CN_OP_MUL, 2, (cn_tensor *[]){y, y})
                        : NULL;
    CHECK_MSG(loss != NULL, "build: %s", cn_ctx_error(ctx));
    cn_routine *r = loss && run(g, cn_graph_init_params(g, loss), CN_BACKEND_C, "init")
                        ? compile(g, cn_graph_grad_update(g, loss), CN_BACKEND_C, "grad")
                        : NULL;
    if (r) {
      const char *jam = strstr(cn_routine_loops(r), "_jam");
      CHECK_MSG(run_k ? jam && strstr(jam, "ceil(") : !jam, "loops:\n%s", cn_routine_loops(r));
      CHECK_INT(cn_routine_run(r), CN_OK);
      CHECK(read_node(cn_tensor_value(y), run_k ? got[0] : want[0], SB_N));
      for (int i = 0; i < 3; i++)
        CHECK(read_node(cn_tensor_grad(in[i]), run_k ? got[i + 1] : want[i + 1], SB_N));
      if (run_k)
        for (int i = 0; i < 4; i++)
          CHECK_MSG(memcmp(got[i], want[i], sizeof want[i]) == 0,
                    "%d threads: %s differs from the unscheduled bits", run_k,
                    i ? "a gradient" : "the output");
      cn_routine_free(r);
    }
    free_graph(g);
  }
}

/* ---- Dropout, notation, refusals ------------------------------------------------------------ */

static void test_dropout(cn_backend_kind b) {
  cn_graph *g = new_graph(CN_PREC_DOUBLE);
  double x[64], plain[64], with0[64], with5[64];
  seq_values(x, 64, 0.45, 0.3, 1.2);
  cn_tensor *tx = data(g, "x", d_x, x);
  cn_tensor *rate = cn_tensor_buffer(g, "rate", &(cn_dims){NONE, NONE, AXES(1)});
  cn_tensor *step = cn_tensor_buffer(g, "step", &(cn_dims){NONE, NONE, AXES(1)});
  const cn_attention cfg = {2, 1, rate, step, false};
  cn_tensor *y = cn_tensor_causal_attention(g, tx, "d", &cfg);
  cn_tensor *y0 = cn_tensor_causal_attention(g, tx, "p", &cfg2);
  if (!forward_values(g, y0, b, plain, 64) || !forward_values(g, y, b, with0, 64)) {
    free_graph(g);
    return;
  }
  expect_near("attention at dropout rate 0", with0, plain, 64, 0);
  CHECK(cn_node_set_values(cn_tensor_value(rate), false, (double[]){0.5}, 1) == CN_OK);
  if (run(g, cn_graph_forward(g, y), b, "dropout") && read_node(cn_tensor_value(y), with5, 64)) {
    int differ = 0;
    for (int i = 0; i < 64; i++) differ += isfinite(with5[i]) && with5[i] != plain[i];
    CHECK_MSG(differ > 32, "%d of 64 cells changed by dropout 0.5", differ);
  }
  free_graph(g);
}

static void test_notation(cn_backend_kind b) {
  cn_graph *g = new_graph(CN_PREC_DOUBLE);
  double x[64], got[64], want[64];
  seq_values(x, 64, 0.45, 0.3, 1.2);
  cn_tensor *tx = data(g, "x", d_x, x);
  const cn_notation_binding bind = {"x", tx, 0};
  cn_tensor *yn =
      cn_notation_op(g, "transformer_block x ~heads:2 ~layers:3 ~label:\"n\"", 1, &bind);
  CHECK_MSG(yn != NULL, "%s", cn_ctx_error(cn_graph_ctx(g)));
  cn_tensor *yc = cn_tensor_transformer_block(g, tx, "c", &cfg2);
  if (yn && forward_values(g, yn, b, got, 64) && forward_values(g, yc, b, want, 64))
    expect_near("notation transformer_block", got, want, 64, 0);
  cn_tensor *ps[16];
  CHECK_INT(yn ? cn_graph_params(g, yn, ps, 16) : 0, 16);
  if (yn) CHECK_STR(cn_tensor_label(ps[2]), "n.attn.q.weight");
  cn_tensor *an = cn_notation_op(g, "causal_attention ~heads:2 ~layers:3 ~label:\"m\" x", 1, &bind);
  cn_tensor *ac = cn_tensor_causal_attention(g, tx, "d", &cfg2);
  if (an && forward_values(g, an, b, got, 64) && forward_values(g, ac, b, want, 64))
    expect_near("notation causal_attention", got, want, 64, 0);
  free_graph(g);
}

static void expect_error(const char *text, const char *want) {
  cn_graph *g = new_graph(CN_PREC_DOUBLE);
  double x[64];
  seq_values(x, 64, 0.45, 0.3, 1.2);
  const cn_notation_binding bind = {"x", data(g, "x", d_x, x), 0};
  CHECK(cn_notation_op(g, text, 1, &bind) == NULL);
  const char *got = cn_ctx_error(cn_graph_ctx(g));
  CHECK_MSG(strstr(got, want) != NULL, "%s: %s", text, got);
  free_graph(g);
}

static void test_refusals(void) {
  cn_graph *g = new_graph(CN_PREC_DOUBLE);
  cn_ctx *ctx = cn_graph_ctx(g);
  double x[64];
  seq_values(x, 64, 0.45, 0.3, 1.2);
  cn_tensor *tx = data(g, "x", d_x, x);
  const cn_attention three = {3, 1, NULL, NULL, false}, zero = {0, 1, NULL, NULL, false};
  CHECK(cn_tensor_causal_attention(g, tx, "a", &three) == NULL);
  CHECK_STR(cn_ctx_error(ctx),
            "causal_attention: x \"x\" (#1) has shape 2,4|->8: it must be batch, "
            "time | -> channels (B,T|->C) with C a multiple of the 3 heads");
  CHECK(cn_tensor_transformer_block(g, tx, "a", &zero) == NULL);
  CHECK_STR(cn_ctx_error(ctx), "transformer_block: n_heads 0 and n_layer 1 must be at least 1");
  CHECK(cn_tensor_causal_attention(g, tx, "a", NULL) == NULL);
  const cn_attention no_step = {2, 1, tx, NULL, false};
  CHECK(cn_tensor_causal_attention(g, tx, "a", &no_step) == NULL);
  CHECK_STR(cn_ctx_error(ctx), "causal_attention: a dropout rate needs a step counter");
  const cn_attention last_dropout = {2, 1, tx, tx, true};
  CHECK(cn_tensor_transformer_block(g, tx, "a", &last_dropout) == NULL);
  CHECK_STR(cn_ctx_error(ctx), "transformer_block: last_position computes a forward for sampling: "
                               "no dropout rate with it");
  cn_tensor *t3 = data(g, "t3", (cn_dims){AXES(2, 2, 2), NONE, AXES(8)}, x);
  CHECK(cn_tensor_causal_attention(g, t3, "a", &cfg2) == NULL);
  CHECK(strstr(cn_ctx_error(ctx), "has shape 2,2,2|->8: it must be batch, time") != NULL);
  CHECK(cn_tensor_causal_sdpa(g, tx, NULL, tx, NULL, NULL) == NULL);
  CHECK_STR(cn_ctx_error(ctx), "causal_sdpa: operand 2 is NULL");
  /* Tile's own message for operands of the wrong rank */
  CHECK(cn_tensor_causal_softmax(g, tx) == NULL);
  CHECK(strstr(cn_ctx_error(ctx), "'S' has 3 axes") != NULL);
  free_graph(g);
  expect_error("causal_attention x", "causal_attention needs ~heads");
  expect_error("transformer_block x ~heads:2 ~rate:0.1", "dropout needs both ~rate and ~step");
  expect_error("transformer_block x ~heads:2 ~label:3", "~label expects a string");
  expect_error("causal_attention x ~heads:0", "~heads and ~layers must be positive integers");
  expect_error("causal_attention x ~heads:2 ~foo:1", "causal_attention has no argument ~foo");
}

/* A block applied again with its label (the model on a validation batch) reads the same 16
 * parameters, so both results agree on the same input; a label with other dims is refused. */
static void test_reuse(cn_backend_kind b) {
  cn_graph *g = new_graph(CN_PREC_DOUBLE);
  cn_ctx *ctx = cn_graph_ctx(g);
  double x[64], first[64], again[64];
  seq_values(x, 64, 0.45, 0.3, 1.2);
  cn_tensor *tx = data(g, "x", d_x, x), *tv = data(g, "v", d_x, x);
  cn_tensor *y = cn_tensor_transformer_block(g, tx, "h0", &cfg2);
  cn_tensor *yv = y ? cn_tensor_transformer_block(g, tv, "h0", &cfg2) : NULL;
  CHECK_MSG(yv != NULL, "%s", cn_ctx_error(ctx));
  cn_tensor *p[16], *pv[16];
  CHECK_INT(yv ? cn_graph_params(g, y, p, 16) : 0, 16);
  CHECK_INT(yv ? cn_graph_params(g, yv, pv, 16) : 0, 16);
  for (int i = 0; yv && i < 16; i++) CHECK(p[i] == pv[i]);
  if (yv && forward_values(g, y, b, first, 64) && forward_values(g, yv, b, again, 64))
    expect_near("block applied again", again, first, 64, 0);
  double x16[2 * 4 * 16] = {0};
  cn_tensor *wide = data(g, "w", (cn_dims){AXES(2, 4), NONE, AXES(16)}, x16);
  CHECK(cn_tensor_causal_attention(g, wide, "h0", &cfg2) == NULL);
  const char *err = cn_ctx_error(ctx);
  CHECK_MSG(strncmp(err, "parameter \"h0.attn.q.weight\" (#", 31) == 0 &&
                strstr(err, ") has shape |8->2,4, not the one this block needs: a block applied "
                            "again with the same label reuses its parameters") != NULL,
            "%s", err);
  free_graph(g);
}

/* AdamW with decay_matrices_only decays the blocks' weights but none of their biases and gains,
 * the q/k/v biases (|->H,D: two axes) included, as nanoGPT's groups do. The loss is 0 times the
 * output, so every gradient is 0 and one step only decays: p' = p - lr * wd * p exactly. */
static void test_decay(cn_backend_kind b) {
  cn_graph *g = new_graph(CN_PREC_DOUBLE);
  double x[64];
  seq_values(x, 64, 0.45, 0.3, 1.2);
  cn_tensor *y = cn_tensor_transformer_block(g, data(g, "x", d_x, x), "h0", &cfg2);
  cn_tensor *loss =
      y ? cn_tensor_sum(
              g, cn_tensor_apply(g, CN_OP_MUL, 2, (cn_tensor *[]){cn_tensor_number(g, 0), y}))
        : NULL;
  cn_adam adam = cn_adam_defaults(cn_tensor_number(g, 0.5));
  adam.weight_decay = 0.25;
  adam.decoupled = adam.decay_matrices_only = true;
  const cn_asgn *step = loss ? cn_graph_adam_update(g, loss, &adam) : NULL;
  const cn_asgn *grad = loss ? cn_graph_grad_update(g, loss) : NULL;
  CHECK_MSG(step && grad, "%s", cn_ctx_error(cn_graph_ctx(g)));
  cn_tensor *ps[16];
  if (!step || !grad || !run(g, cn_graph_init_params(g, loss), b, "init")) {
    free_graph(g);
    return;
  }
  int n = set_params(g, loss, ps, 16);
  CHECK_INT(n, 16);
  if (run(g, grad, b, "grad") && run(g, step, b, "adam")) {
    for (int i = 0; i < n; i++) {
      const char *label = cn_tensor_label(ps[i]);
      bool weight = strstr(label, ".weight") && !strstr(label, "ln_");
      int64_t c = cn_node_numel(cn_tensor_value(ps[i]));
      double got[MAXC], want[MAXC];
      if (!read_node(cn_tensor_value(ps[i]), got, c)) continue;
      for (int64_t j = 0; j < c; j++)
        want[j] = weight ? param_value(i, j) - 0.5 * 0.25 * param_value(i, j) : param_value(i, j);
      expect_near(label, got, want, c, 1e-15);
    }
  }
  free_graph(g);
}

int main(void) {
  for (int k = 0; k < 2; k++) {
    test_softmax(backends[k]);
    test_sdpa(backends[k], CN_PREC_DOUBLE);
    test_sdpa(backends[k], CN_PREC_SINGLE);
    test_block_values(backends[k], false);
    test_block_values(backends[k], true);
    for (int exact = 0; exact < 2; exact++) {
      test_last_position(backends[k], false, exact);
      test_last_position(backends[k], true, exact);
    }
    test_gradients(backends[k]);
    test_loops(backends[k]);
    test_dropout(backends[k]);
    test_notation(backends[k]);
    test_reuse(backends[k]);
    test_decay(backends[k]);
  }
  test_init();
  test_schedule_bits();
  test_refusals();
  if (numpy_skipped && check_failed_ == 0) {
    printf("skipped: /usr/bin/python3 lacks numpy (python3-numpy): the forward values were not "
           "compared (the other checks passed)\n");
    return 77;
  }
  CHECK_DONE();
}
