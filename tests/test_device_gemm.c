/* The tiled GEMM kernels of the device backends (src/backend/kernels.c "Tiled GEMM kernels") on
 * the first OpenCL device (PoCL's CPU device here; exit 77 with the reason when there is none),
 * bit for bit against the generated C backend's packed GEMM: hand-built GEMM-class nests, planned
 * with the smallest work threshold (every size gets a plan), all in one procedure (one program
 * build a mode), run from the same random buffers (spread exponents, both zeros) in exact and in
 * fma mode. Every nest must be a tiled kernel (one `__local` slice pair each in the source). Cases:
 * sizes that are not multiples of the 64 x 64 tile nor of the 16-step slice (70 x 50 x 90), every
 * float precision (half, bfloat16, fp8 round each update to themselves), 1 x N, M x 1, K = 1,
 * both operands transposed, a batch loop, groups of two loops (M and K), a convolution's
 * affine input index, a plan from zero (c random before, the clear taken), and the three
 * triangles: cells (n < m + 3, the others keep their values), steps (k < m - 2: row m its own
 * prefix) and rows (m < k + 5, the M loop inside the K loop: row m a suffix). Also the tile's
 * shape under a small device (work-groups of at most 4 work items: the tile shrinks) and on one
 * with compute units to keep busy (smaller tiles, more groups), through the kernel view directly;
 * the option device_tile (values checked; the option over $CANNL_DEVICE_TILE over the backend's
 * tile); the CUDA variant of every case compiled to PTX by NVRTC with a clean log
 * (skipped with a message without NVRTC), and run on the host as CUDA code (tests/cudahost.h: each
 * block's threads meet at real barriers, `__shared__` slices shared), bit for bit against C in
 * both modes (skipped with a message without a C++ compiler): the CUDA tile's indices, slices and
 * barriers, checked without a GPU; with a GPU, every case on it against C in both modes. */
#include "loops_check.h"
#include "snapshot.h"
#include "cudahost.h"

#include "backend/cuda.h"
#include "backend/cuda_rt.h"
#include "backend/kernels.h"
#include "sched/sched.h"

#include <math.h>

/* One GEMM-class nest: c[...] += x[...] * y[...] over loops l0.. (nest order, extents ext), each
 * access's axes one loop each (axes[a]: x, y, c; -1 ends), a bound `loop bounded < loop by +
 * offset` (bounded -1: none), c cleared to +0 before (the plan's c_zero). */
typedef struct {
  const char *label;
  cn_prec prec;
  int n_loops;
  int64_t ext[5];
  int axes[3][4];
  int bounded, by;
  int64_t offset;
  bool cleared;
  bool conv; /* x's axes: l0, 2 l1 + l3, l4 (a stride-2 convolution's input); the rest as given */
} gemm_case;

#define MM(m, n, k) 3, {m, n, k}, {{0, 2, -1}, {2, 1, -1}, {0, 1, -1}}, -1, 0, 0

static const gemm_case cases[] = {
    {"half 70x50x90", CN_PREC_HALF, MM(70, 50, 90), false, false},
    {"bfloat16 70x50x90", CN_PREC_BFLOAT16, MM(70, 50, 90), false, false},
    {"fp8 70x50x90", CN_PREC_FP8, MM(70, 50, 90), false, false},
    {"single 70x50x90", CN_PREC_SINGLE, MM(70, 50, 90), false, false},
    {"double 70x50x90", CN_PREC_DOUBLE, MM(70, 50, 90), false, false},
    {"single 1x300x37", CN_PREC_SINGLE, MM(1, 300, 37), false, false},
    {"single 300x1x37", CN_PREC_SINGLE, MM(300, 1, 37), false, false},
    {"single 65x129x1", CN_PREC_SINGLE, MM(65, 129, 1), false, false},
    {"single 130x70x40 from zero", CN_PREC_SINGLE, MM(130, 70, 40), true, false},
    /* c[i, j] += x[k, i] * y[j, k] */
    {"transposed 67x131x29",
     CN_PREC_SINGLE,
     3,
     {67, 131, 29},
     {{2, 0, -1}, {1, 2, -1}, {0, 1, -1}},
     -1,
     0,
     0,
     false,
     false},
    /* c[b, i, j] += x[b, i, k] * y[b, k, j] */
    {"batched 3x33x20x17",
     CN_PREC_SINGLE,
     4,
     {3, 33, 20, 17},
     {{0, 1, 3, -1}, {0, 3, 2, -1}, {0, 1, 2, -1}},
     -1,
     0,
     0,
     false,
     false},
    /* c[i1, i2, j] += x[i1, i2, k1, k2] * y[k1, k2, j]: two M loops, two K loops */
    {"groups 5x13x40x(3x7)",
     CN_PREC_SINGLE,
     5,
     {5, 13, 40, 3, 7},
     {{0, 1, 3, 4}, {3, 4, 2, -1}, {0, 1, 2, -1}},
     -1,
     0,
     0,
     false,
     false},
    /* c[b, o, oc] += x[b, 2 o + k, ic] * y[k, ic, oc]: loops b, o, oc, k, ic */
    {"convolution 2x40x24 k3 ic5",
     CN_PREC_SINGLE,
     5,
     {2, 40, 24, 3, 5},
     {{0, -1, -1, -1}, {3, 4, 2, -1}, {0, 1, 2, -1}},
     -1,
     0,
     0,
     false,
     true},
    /* triangle of cells: c[i, j] += x[i, k] * y[j, k] over j < i + 3 (loops i, j, k) */
    {"triangle N < M + 3",
     CN_PREC_SINGLE,
     3,
     {90, 90, 33},
     {{0, 2, -1}, {1, 2, -1}, {0, 1, -1}},
     1,
     0,
     3,
     false,
     false},
    /* triangle of steps: c[i, j] += x[i, k] * y[k, j] over k < i - 2 (loops i, j, k) */
    {"triangle K < M - 2",
     CN_PREC_SINGLE,
     3,
     {80, 45, 80},
     {{0, 2, -1}, {2, 1, -1}, {0, 1, -1}},
     2,
     0,
     -2,
     false,
     false},
    /* triangle of rows: c[i, j] += x[i, k] * y[k, j] over i < k + 5 (loops k, i, j) */
    {"triangle M < K + 5",
     CN_PREC_HALF,
     3,
     {75, 75, 41},
     {{1, 0, -1}, {0, 2, -1}, {1, 2, -1}},
     1,
     0,
     5,
     false,
     false},
    /* groups of 16 x 8 work items, rows 33..63 of the tile past the end: PoCL 3.1 wrote them
       when the kernel could return before its barriers */
    {"single 33x20x17", CN_PREC_SINGLE, MM(33, 20, 17), false, false},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

static int rank_of(const int *axes) {
  int r = 0;
  while (r < 4 && axes[r] >= 0) r++;
  return r;
}

/* The index array of access a of case k (loop variables v). */
static cn_index *access_index(cn_ctx *ctx, const gemm_case *k, int a, const cn_symbol *v) {
  cn_index idx[4];
  int rank = rank_of(k->axes[a]);
  for (int d = 0; d < rank; d++) idx[d] = cn_index_iter(v[k->axes[a][d]]);
  if (k->conv && a == 0) {
    rank = 3;
    idx[0] = cn_index_iter(v[0]);
    idx[1] = affine2(v[1], 2, v[3], 1, 0);
    idx[2] = cn_index_iter(v[4]);
  }
  return cn_lb_index_array(ctx, rank, idx);
}

/* The nodes of case k (x, y, c), in ascending ids. */
static void case_nodes(cn_ctx *ctx, const gemm_case *k, cn_node **out) {
  static const char *labels[3] = {"x", "y", "c"};
  for (int a = 0; a < 3; a++) {
    int64_t dims[4];
    int rank = rank_of(k->axes[a]);
    for (int d = 0; d < rank; d++) dims[d] = k->ext[k->axes[a][d]];
    if (k->conv && a == 0) {
      rank = 3;
      dims[0] = k->ext[0];
      dims[1] = 2 * (k->ext[1] - 1) + k->ext[3];
      dims[2] = k->ext[4];
    }
    out[a] = cn_node_create(ctx, labels[a], k->prec, rank, dims);
    CHECK(out[a] != NULL);
  }
}

/* Case k's statement over params base.. (x, y, c): the clear when cleared, then the nest. */
static cn_ll_stmt *case_stmt(cn_ctx *ctx, const gemm_case *k, int base) {
  cn_symbol v[5];
  for (int l = 0; l < k->n_loops; l++) {
    char name[16];
    snprintf(name, sizeof name, "l%d", l);
    v[l] = cn_symbol_create(ctx, name, 0);
  }
  cn_ll_expr *product =
      cn_lb_op(ctx, CN_OP_MUL, k->prec, cn_lb_get(ctx, base, k->prec, access_index(ctx, k, 0, v)),
               cn_lb_get(ctx, base + 1, k->prec, access_index(ctx, k, 1, v)), NULL);
  cn_ll_stmt *body =
      cn_lb_accum(ctx, base + 2, k->prec, access_index(ctx, k, 2, v), CN_OP_ADD, product);
  for (int l = k->n_loops - 1; l >= 0; l--) {
    body = cn_lb_loop(ctx, v[l], 0, k->ext[l], body);
    if (l == k->bounded) {
      cn_ll_bound below = {affine1(v[k->by], 1, k->offset), 1};
      body = cn_lb_bounds(ctx, body, 0, NULL, 1, &below);
    }
  }
  if (!k->cleared) return body;
  cn_symbol w[4];
  int rank = rank_of(k->axes[2]);
  cn_index idx[4];
  for (int d = 0; d < rank; d++) {
    w[d] = cn_symbol_create(ctx, "z", 0);
    idx[d] = cn_index_iter(w[d]);
  }
  cn_ll_stmt *clear =
      cn_lb_set(ctx, base + 2, cn_lb_index_array(ctx, rank, idx), cn_lb_num(ctx, k->prec, 0));
  for (int d = rank - 1; d >= 0; d--)
    clear = cn_lb_loop(ctx, w[d], 0, k->ext[k->axes[2][d]], clear);
  return cn_lb_seq(ctx, 2, clear, body);
}

static int count_of(const char *text, const char *what) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, what)); p += strlen(what)) n++;
  return n;
}

/* Runs proc on the device of backend `kind` (opencl, cuda) from `start`; its buffers after the
 * run in *after. */
static void run_device(cn_ctx *ctx, cn_backend_kind kind, const cn_ll_proc *proc,
                       const snapshot *start, snapshot *after, const char **source_copy) {
  const cn_backend *b = cn_backend_get(kind);
  const cn_device *dev = NULL;
  void *compiled = NULL;
  const char *source = NULL;
  CHECK_INT(b->open_device(ctx, &dev), CN_OK);
  CHECK_MSG(b->compile(ctx, proc, &compiled, &source) == CN_OK, "%s", cn_ctx_error(ctx));
  if (!compiled) return;
  *source_copy = cn_strdup(ctx, source);
  void *bufs[SNAPSHOT_MAX_PARAMS] = {0};
  for (int p = 0; p < proc->n_params; p++) {
    CHECK_INT(dev->allocate(ctx, dev, start->bytes[p], &bufs[p]), CN_OK);
    CHECK_INT(dev->upload(ctx, dev, bufs[p], start->data[p], start->bytes[p]), CN_OK);
  }
  CHECK_INT(b->run(ctx, compiled, bufs, NULL), CN_OK);
  for (int p = 0; p < proc->n_params; p++) {
    after->bytes[p] = start->bytes[p];
    after->data[p] = malloc(start->bytes[p]);
    CHECK_INT(dev->download(ctx, dev, after->data[p], bufs[p], start->bytes[p]), CN_OK);
  }
  CHECK_INT(dev->synchronize(ctx, dev), CN_OK);
  for (int p = 0; p < proc->n_params; p++) dev->free(dev, bufs[p]);
  b->release(compiled);
}

/* The first cell of c where two buffers differ, or -1. */
static int64_t first_difference(const unsigned char *a, const unsigned char *b, size_t bytes,
                                size_t cell) {
  for (size_t at = 0; at < bytes; at++)
    if (a[at] != b[at]) return (int64_t)(at / cell);
  return -1;
}

/* Every case in one procedure, planned for the mode (its nodes filled). */
static cn_ll_proc *all_cases(cn_ctx *ctx, bool exact) {
  cn_node *nodes[3 * N_CASES];
  cn_ll_stmt *stmts[N_CASES];
  for (int k = 0; k < N_CASES; k++) {
    case_nodes(ctx, &cases[k], nodes + 3 * k);
    stmts[k] = case_stmt(ctx, &cases[k], 3 * k);
  }
  cn_ll_param params[3 * N_CASES];
  for (int p = 0; p < 3 * N_CASES; p++) {
    params[p] = (cn_ll_param){nodes[p], false};
    fill_spread(nodes[p], (uint64_t)(p + 1) * 7919u);
  }
  cn_ll_proc *proc =
      cn_lb_proc(ctx, "gemms", cn_lb_seq_array(ctx, N_CASES, stmts), 3 * N_CASES, params, 0, NULL);
  cn_sched_options opts = {.passes = CN_SCHED_GEMM | CN_SCHED_FILL, .exact = exact, .gemm_work = 1};
  CHECK_INT(cn_sched_proc(ctx, proc, &opts), CN_OK);
  const char *loops = cn_ll_to_string(ctx, proc);
  CHECK_INT(count_of(loops, exact ? " exact:\n" : " fma:\n"), N_CASES);
  CHECK_HAS(loops, " from zero ");
  CHECK_HAS(loops, " triangle N < M ");
  CHECK_HAS(loops, " triangle K < M ");
  CHECK_HAS(loops, " triangle M < K ");
  return proc;
}

/* The CUDA variant of every case compiled to PTX by NVRTC (no GPU needed): a clean log, every
 * kernel an entry, each GEMM a tiled kernel with its slices in shared memory. */
static void check_ptx(bool exact) {
  cn_ctx *ctx = cn_ctx_create();
  const cn_nvrtc *rt;
  if (cn_nvrtc_get(ctx, &rt) != CN_OK) {
    printf("NVRTC checks skipped: %s\n", cn_ctx_error(ctx));
    cn_ctx_destroy(ctx);
    return;
  }
  cn_ll_proc *proc = all_cases(ctx, exact);
  void *compiled = NULL;
  const char *source = NULL;
  CHECK_MSG(cn_backend_cuda.compile(ctx, proc, &compiled, &source) == CN_OK, "%s",
            cn_ctx_error(ctx));
  if (compiled) {
    const cn_kernel_program *program = cn_cuda_program(compiled);
    const char *ptx = cn_cuda_ptx(compiled), *log = cn_cuda_log(compiled);
    CHECK_MSG(log && log[0] == '\0', "NVRTC's log is not empty:\n%s", log ? log : "");
    for (int k = 0; ptx && k < program->n_kernels; k++) {
      char entry[300];
      snprintf(entry, sizeof entry, ".entry %s(", program->kernels[k].name);
      CHECK_MSG(strstr(ptx, entry) != NULL, "no '%s' in the PTX", entry);
    }
    CHECK_INT(count_of(source, "__shared__ "), 2 * N_CASES);
    CHECK_INT(count_of(source, "__syncthreads();"), 2 * N_CASES);
    CHECK_INT(count_of(ptx, "bar.sync"), 2 * N_CASES);
    cn_backend_cuda.release(compiled);
  }
  cn_ctx_destroy(ctx);
}

/* Runs proc as the CUDA program on the host (tests/cudahost.h) from `start`; its buffers after the
 * run in *after. */
static void run_cudahost(cn_ctx *ctx, const cn_ll_proc *proc, const snapshot *start,
                         snapshot *after, const char *acc) {
  void *compiled = NULL;
  const char *source = NULL;
  CHECK_MSG(cudahost_backend.compile(ctx, proc, &compiled, &source) == CN_OK, "%s",
            cn_ctx_error(ctx));
  if (!compiled) return;
  if (acc) CHECK_HAS(cudahost.source, acc);
  for (int p = 0; p < proc->n_params; p++) {
    after->bytes[p] = start->bytes[p];
    after->data[p] = malloc(start->bytes[p]);
    if (after->data[p]) memcpy(after->data[p], start->data[p], start->bytes[p]);
  }
  void *bufs[SNAPSHOT_MAX_PARAMS] = {0};
  for (int p = 0; p < proc->n_params; p++) bufs[p] = after->data[p];
  CHECK_INT(cudahost_backend.run(ctx, compiled, bufs, NULL), CN_OK);
  cudahost_backend.release(compiled);
}

/* Every case's c from a device against C's, cell by cell. */
static void compare_cases(const snapshot *want, const snapshot *got, const char *device,
                          bool exact) {
  for (int k = 0; k < N_CASES; k++) {
    int c = 3 * k + 2;
    if (!got->data[c]) continue;
    size_t cell = cn_prec_bytes(cases[k].prec);
    int64_t at = first_difference(want->data[c], got->data[c], want->bytes[c], cell);
    CHECK_MSG(at < 0, "%s %s: cell %lld of c differs: C %.9g, %s %.9g", cases[k].label,
              exact ? "exact" : "fma", (long long)at,
              at < 0 ? 0 : cn_prec_cell_to_double(cases[k].prec, want->data[c] + (size_t)at * cell),
              device,
              at < 0 ? 0 : cn_prec_cell_to_double(cases[k].prec, got->data[c] + (size_t)at * cell));
  }
}

/* Where check_mode runs the cases. */
typedef enum { ON_OPENCL, ON_CUDAHOST, ON_CUDA } target;
static const char *const target_names[] = {"OpenCL", "cudahost", "CUDA"};

/* Every case on C and on `on` (OpenCL, the CUDA program run on the host, the GPU), from the same
 * buffers, with the option device_tile `tile` (NULL: the backend's tile; the source's register
 * blocks then `acc`, e.g. "[8][8]", when not NULL). */
static void check_mode(bool exact, target on, const char *tile, const char *acc) {
  cn_ctx *ctx = cn_ctx_create();
  if (tile) CHECK_INT(cn_ctx_set_option(ctx, "device_tile", tile), CN_OK);
  cn_ll_proc *proc = all_cases(ctx, exact);
  snapshot start, want, got = {{0}, {0}};
  snapshot_save(proc, &start);
  snapshot_run(ctx, &cn_backend_c, proc, proc, &start, &want);
  if (on == ON_CUDAHOST) {
    int tiled = cudahost.tiled_kernels;
    run_cudahost(ctx, proc, &start, &got, acc);
    CHECK_INT(cudahost.tiled_kernels - tiled, N_CASES); /* every nest a tiled kernel */
  } else {
    const char *source = "";
    run_device(ctx, (cn_backend_kind)cn_backend_find(on == ON_CUDA ? "cuda" : "opencl"), proc,
               &start, &got, &source);
    /* every nest a tiled kernel, each with its two slices in local memory */
    const char *local = on == ON_CUDA ? "__shared__ " : "__local ";
    const char *barrier = on == ON_CUDA ? "__syncthreads();" : "barrier(CLK_LOCAL_MEM_FENCE);";
    CHECK_INT(count_of(source, local), 2 * N_CASES);
    CHECK_INT(count_of(source, barrier), 2 * N_CASES);
    if (!exact) CHECK_HAS(source, "fma(");
    if (exact) CHECK(!strstr(source, "fma("));
    if (acc) CHECK_HAS(source, acc);
  }
  compare_cases(&want, &got, target_names[on], exact);
  snapshot_release(proc, &start);
  snapshot_release(proc, &want);
  snapshot_release(proc, &got);
  cn_ctx_destroy(ctx);
}

/* The convolution's input gradient of loops_check.h (stride and dilation 2 on its second axis),
 * which the GEMM pass plans as kh and kw descending around a GEMM over (b, oh, ow) x ic x oc: on
 * a device, nine GEMM kernels, one a
 * point of (kh_rev, kw_rev) in order, not one work item running the whole product. On OpenCL and
 * as CUDA on the host (`on`), bit for bit against C, in exact and fma mode. */
static void check_hoisted(target on) {
  for (int exact = 0; exact < 2; exact++) {
    cn_ctx *ctx = cn_ctx_create();
    cn_node *n[3] = {
        node(ctx, "dout", CN_PREC_SINGLE, 4, (int64_t)2, (int64_t)9, (int64_t)5, (int64_t)7),
        node(ctx, "w", CN_PREC_SINGLE, 4, (int64_t)7, (int64_t)3, (int64_t)3, (int64_t)20),
        node(ctx, "din", CN_PREC_SINGLE, 4, (int64_t)2, (int64_t)11, (int64_t)13, (int64_t)20)};
    cn_ll_proc *proc = input_gradient_proc(ctx, n);
    for (int k = 0; k < 3; k++) fill_spread(n[k], (uint64_t)(k + 5) * 6007u);
    cn_sched_options opts = {.passes = CN_SCHED_GEMM, .exact = exact, .gemm_work = 1};
    CHECK_INT(cn_sched_proc(ctx, proc, &opts), CN_OK);
    CHECK_HAS(cn_ll_to_string(ctx, proc), "for kh_rev in 0..3:\n  for kw_rev in 0..3:\n    gemm ");
    cn_kernel_program program;
    cn_kernel_limits limits = {256, 32 << 10, CN_KERNEL_TILE_DEFAULT, 0};
    CHECK_INT(cn_kernel_program_make(ctx, proc, &cn_cgen_opencl, &limits, &program), CN_OK);
    CHECK_INT(program.n_kernels, 9);
    CHECK_HAS(program.source, "  const int64_t kh_rev = 2;\n  const int64_t kw_rev = 1;\n");
    cn_kernel_program_free(&program);
    snapshot start, want, got = {{0}, {0}};
    snapshot_save(proc, &start);
    snapshot_run(ctx, &cn_backend_c, proc, proc, &start, &want);
    const char *source = "";
    if (on == ON_CUDAHOST)
      run_cudahost(ctx, proc, &start, &got, NULL);
    else
      run_device(ctx, (cn_backend_kind)cn_backend_find(on == ON_CUDA ? "cuda" : "opencl"), proc,
                 &start, &got, &source);
    if (got.data[2]) {
      int64_t at = first_difference(want.data[2], got.data[2], want.bytes[2], sizeof(float));
      CHECK_MSG(at < 0, "input gradient %s on %s: cell %lld of din differs",
                exact ? "exact" : "fma", target_names[on], (long long)at);
    }
    snapshot_release(proc, &start);
    snapshot_release(proc, &want);
    snapshot_release(proc, &got);
    cn_ctx_destroy(ctx);
  }
}

/* The tile under device limits, through the kernel view: a 70 x 50 output of single on a device
 * of 4 work items a group and 1 KiB of local memory is a tile of 2 x 2 work items, 4 x 4 cells
 * each, slices of 8 steps ((8 + 1 + 8 + 1) x 8 x 4 bytes = 576 <= 1024; 16 steps would be 1152),
 * a row of padding each; a device with compute units to keep busy gets smaller tiles, so more
 * groups; without room for a slice of one step (72 bytes), plain loops. */
static void check_limits(void) {
  cn_ctx *ctx = cn_ctx_create();
  const gemm_case *k = &cases[3];
  cn_node *n[3];
  case_nodes(ctx, k, n);
  cn_ll_param params[3] = {{n[0], false}, {n[1], false}, {n[2], false}};
  cn_ll_proc *proc = cn_lb_proc(ctx, "small", case_stmt(ctx, k, 0), 3, params, 0, NULL);
  cn_sched_options opts = {.passes = CN_SCHED_GEMM, .gemm_work = 1};
  CHECK_INT(cn_sched_proc(ctx, proc, &opts), CN_OK);
  cn_kernel_program p;
  cn_kernel_limits small = {4, 1024, CN_KERNEL_TILE_DEFAULT, 0};
  CHECK_INT(cn_kernel_program_make(ctx, proc, &cn_cgen_opencl, &small, &p), CN_OK);
  CHECK_INT(p.n_kernels, 1);
  /* 70 x 50 cells in tiles of 8 x 8: 9 x 7 groups of 4 */
  CHECK_INT(p.kernels[0].group_size, 4);
  CHECK_INT(p.kernels[0].work_items, 9 * 7 * 4);
  CHECK_HAS(p.source, "__local float cn_xs[72];");
  CHECK_HAS(p.source, "__local float cn_ys[72];");
  CHECK_HAS(p.source, "float cn_acc[4][4];");
  cn_kernel_program_free(&p);
  /* CUDA's tile (16 x 16 work items of 8 x 8 cells) on a device of 4 compute units: 128 x 64
   * cells are one group; the cells a work item halve, rows first, to 64 x 32 (2 x 2 groups) */
  cn_kernel_limits gpu = {1024, 48 << 10, {16, 8, 16}, 4};
  CHECK_INT(cn_kernel_program_make(ctx, proc, &cn_cgen_opencl, &gpu, &p), CN_OK);
  CHECK_INT(p.kernels[0].group_size, 16 * 8);
  CHECK_INT(p.kernels[0].work_items, 2 * 2 * 16 * 8);
  CHECK_HAS(p.source, "float cn_acc[4][4];");
  cn_kernel_program_free(&p);
  /* on 132 (an H100's multiprocessors): one cell a work item, then groups of 8 x 8 (the least:
   * 64), 9 x 7 of them */
  gpu.min_groups = 132;
  CHECK_INT(cn_kernel_program_make(ctx, proc, &cn_cgen_opencl, &gpu, &p), CN_OK);
  CHECK_INT(p.kernels[0].group_size, 64);
  CHECK_INT(p.kernels[0].work_items, 9 * 7 * 64);
  CHECK_HAS(p.source, "float cn_acc[1][1];");
  cn_kernel_program_free(&p);
  cn_kernel_limits tiny = {256, 60, CN_KERNEL_TILE_DEFAULT, 0};
  CHECK_INT(cn_kernel_program_make(ctx, proc, &cn_cgen_opencl, &tiny, &p), CN_OK);
  CHECK(!strstr(p.source, "__local"));
  CHECK_INT(p.kernels[0].group_size, 0);
  cn_kernel_program_free(&p);
  cn_ctx_destroy(ctx);
}

/* The option device_tile: values checked when set (powers of two within CN_KERNEL_TILE_MAX, three
 * sides, or "auto"), the environment's when a routine compiles; the option wins over the
 * variable, which wins over the backend's tile. */
static void check_tile_option(void) {
  cn_ctx *ctx = cn_ctx_create();
  static const char *bad[] = {"16x8",  "16x8x16x1", "3x4x4",   "64x4x4", "16x32x4", "16x4x128",
                              "0x4x4", "16X4x4",    "16x4x4 ", "",       "x4x4"};
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    CHECK_MSG(cn_ctx_set_option(ctx, "device_tile", bad[k]) == CN_ERR_INVALID, "'%s'", bad[k]);
    CHECK_HAS(cn_ctx_error(ctx), "option device_tile: '");
    CHECK_HAS(cn_ctx_error(ctx), "' is not a tile: \"auto\" or <items>x<cells>x<steps>");
  }
  CHECK_INT(cn_ctx_set_option(ctx, "device_tile", "32x16x64"), CN_OK);
  CHECK_INT(cn_ctx_set_option(ctx, "device_tile", "1x1x1"), CN_OK);
  cn_kernel_limits limits;
  CHECK_INT(cn_cuda_kernel_limits(ctx, NULL, &limits), CN_OK);
  CHECK(limits.tile.items == 1 && limits.tile.cells == 1 && limits.tile.steps == 1);
  CHECK_INT(cn_ctx_set_option(ctx, "device_tile", "auto"), CN_OK);
  CHECK_INT(cn_cuda_kernel_limits(ctx, NULL, &limits), CN_OK);
  CHECK(limits.tile.items == 16 && limits.tile.cells == 8 && limits.tile.steps == 16);
  CHECK(limits.max_group == 1024 && limits.local_bytes == 48 << 10);
  CHECK_INT(cn_ctx_set_option(ctx, "device_tile", NULL), CN_OK);
  setenv("CANNL_DEVICE_TILE", "8x4x32", 1);
  CHECK_STR(cn_ctx_option(ctx, "device_tile"), "8x4x32");
  CHECK_INT(cn_cuda_kernel_limits(ctx, NULL, &limits), CN_OK);
  CHECK(limits.tile.items == 8 && limits.tile.cells == 4 && limits.tile.steps == 32);
  CHECK_INT(cn_ctx_set_option(ctx, "device_tile", "2x2x2"), CN_OK);
  CHECK_INT(cn_cuda_kernel_limits(ctx, NULL, &limits), CN_OK);
  CHECK(limits.tile.items == 2);
  CHECK_INT(cn_ctx_set_option(ctx, "device_tile", NULL), CN_OK);
  setenv("CANNL_DEVICE_TILE", "8x4", 1);
  CHECK_INT(cn_cuda_kernel_limits(ctx, NULL, &limits), CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "CANNL_DEVICE_TILE: '8x4' is not a tile");
  unsetenv("CANNL_DEVICE_TILE");
  CHECK_STR(cn_ctx_option(ctx, "device_tile"), "auto");
  cn_ctx_destroy(ctx);
}

int main(void) {
  check_limits();
  check_ptx(true);
  check_ptx(false);
  check_tile_option();
  cn_backend_kind host;
  if (cudahost_register("test_device_gemm: the CUDA kernels on the host", &host)) {
    /* CUDA's tile (8 x 8 cells a thread), then a small one (many slices and groups) and one of
     * 16 x 16 cells a thread: the same bits */
    check_mode(true, ON_CUDAHOST, NULL, "float cn_acc[8][8];");
    check_mode(false, ON_CUDAHOST, NULL, "float cn_acc[8][8];");
    check_mode(true, ON_CUDAHOST, "8x2x4", "float cn_acc[2][2];");
    check_mode(false, ON_CUDAHOST, "4x16x64", "float cn_acc[16][16];");
    check_hoisted(ON_CUDAHOST);
    cudahost_done();
  }
  /* on a GPU: CUDA's tile, shrunk for the GPU's multiprocessors, each case still one tiled
   * kernel of shared slices */
  if (cn_cuda_gpu_find()) {
    check_mode(true, ON_CUDA, NULL, NULL);
    check_mode(false, ON_CUDA, NULL, NULL);
    check_hoisted(ON_CUDA);
  } else {
    printf("CUDA GPU checks skipped: no GPU\n");
  }
  cn_ctx *probe = cn_ctx_create();
  char device[1400];
  if (cn_backend_device(probe, (cn_backend_kind)cn_backend_find("opencl"), device, sizeof device) !=
      CN_OK) {
    printf("skipped: no OpenCL device: %s\n", cn_ctx_error(probe));
    cn_ctx_destroy(probe);
    return check_failed_ ? 1 : 77;
  }
  printf("OpenCL device: %s\n", device);
  cn_ctx_destroy(probe);
  check_mode(true, ON_OPENCL, NULL, "float cn_acc[4][4];");
  check_mode(false, ON_OPENCL, NULL, "float cn_acc[4][4];");
  check_mode(false, ON_OPENCL, "8x2x8", "float cn_acc[2][2];");
  check_hoisted(ON_OPENCL);
  CHECK_DONE();
}
