/* The CUDA backend (src/backend/cuda.c). Without NVRTC the test is skipped (exit 77, saying why).
 * With NVRTC, every kernel program of these compiles to PTX with an empty NVRTC log and a PTX
 * `.entry` per kernel: the end-to-end cases (tests/e2e_cases.h: padded convolution, reductions,
 * fetches, the uniform stream...), every op in every precision and every conversion
 * (tests/ops_cases.h), Tile nests over valid index sets, and three training steps of the
 * half-moons model. They go through "ptx", a backend registered here that compiles each procedure
 * with the CUDA backend (checking its PTX) and runs it on the interpreter, so the routines are
 * the ones a user's run makes. Also: a broken source fails with NVRTC's log and the source's
 * path; the PTX cache (a second compile runs no NVRTC, a corrupted entry is compiled again); the
 * CUDA prelude compiled as host C++ (g++, the bit-cast intrinsics defined on the host, the
 * prelude in a namespace of its own) gives builtins.h's bits for its helpers on every pair of edge
 * values, which checks the transformation of builtins.h (overloads for _Generic, cn_bit_copy for
 * memcpy) without a GPU; the CUDA programs themselves compiled by g++ and run on the host
 * ("cudahost", tests/cudahost.h: the kernel ABI's arguments, every work item of each grid in turn,
 * a tiled GEMM kernel's blocks by threads meeting at barriers), which must give
 * the interpreter's bits on the e2e cases and generated C's on every op and conversion; and,
 * without a GPU, the clear error of the device and of a routine run on "cuda". With a GPU (else
 * skipped with a message): the e2e cases on cuda against generated C bit for bit, every op against
 * generated C (exact, but a stated relative tolerance for the transcendental functions CUDA's
 * library computes: log, exp2, log2, sin, cos, pow, and exp/tanh/gelu on double), and the moons
 * steps within 1e-4 of generated C; a routine's scratch cleared on the device before each run. */
#define _DEFAULT_SOURCE
#include "../demo/moons.h"
#include "e2e_cases.h"
#include "ops_cases.h"
#include "cudahost.h"

#include "backend/backend.h"
#include "backend/cuda.h"
#include "backend/cuda_rt.h"

#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static struct { int programs, kernels; } seen;

/* The PTX of one compiled state: NVRTC said nothing, and every kernel is an entry. */
static void check_ptx(const char *name, const void *compiled) {
  const cn_kernel_program *program = cn_cuda_program(compiled);
  const char *ptx = cn_cuda_ptx(compiled), *log = cn_cuda_log(compiled);
  CHECK_MSG(log && log[0] == '\0', "%s: NVRTC's log is not empty:\n%s", name, log ? log : "");
  CHECK_MSG(ptx && strstr(ptx, ".target sm_"), "%s: no PTX target", name);
  for (int k = 0; ptx && k < program->n_kernels; k++) {
    char entry[300];
    snprintf(entry, sizeof entry, ".entry %s(", program->kernels[k].name);
    CHECK_MSG(strstr(ptx, entry) != NULL, "%s: no '%s' in its PTX", name, entry);
  }
  seen.programs++;
  seen.kernels += program->n_kernels;
}

static cn_status ptx_compile(cn_ctx *ctx, const cn_ll_proc *proc, void **compiled,
                             const char **source) {
  void *cuda;
  const char *text;
  cn_status status = cn_backend_cuda.compile(ctx, proc, &cuda, &text);
  CHECK_MSG(status == CN_OK, "%s: %s", proc->name, cn_ctx_error(ctx));
  if (status != CN_OK) return status;
  check_ptx(proc->name, cuda);
  cn_backend_cuda.release(cuda);
  return cn_backend_interp.compile(ctx, proc, compiled, source);
}

static cn_status ptx_run(cn_ctx *ctx, void *compiled, void *const *buffers, const int64_t *syms) {
  return cn_backend_interp.run(ctx, compiled, buffers, syms);
}

static void ptx_release(void *compiled) {
  cn_backend_interp.release(compiled);
}

static const cn_backend ptx_backend = {
    .name = "ptx",
    .compile = ptx_compile,
    .run = ptx_run,
    .release = ptx_release,
};

/* ---- Every kernel to PTX ---- */

static void test_e2e_ptx(cn_backend_kind ptx) {
  seen.programs = seen.kernels = 0;
  backends[0] = CN_BACKEND_INTERP;
  backends[1] = ptx;
  n_backends = 2;
  e2e_threads = false;
  e2e_run_all();
  /* 33 cases through run_both, the slice, the uniform stream and the merge buffer */
  CHECK_INT(seen.programs, 44);
  CHECK(seen.kernels >= seen.programs);
}

/* Every op in every precision, and every conversion, compiled (and run on the interpreter). */
static void test_ops_ptx(cn_backend_kind ptx) {
  seen.programs = 0;
  for (int prec = 0; prec < CN_PREC_COUNT; prec++) {
    cn_ctx *ctx = cn_ctx_create();
    op_case cases[CN_OP_COUNT];
    cn_node *outs[CN_OP_COUNT];
    int count;
    cn_asgn *all = build_all_ops(ctx, (cn_prec)prec, cases, outs, &count);
    cn_routine *r = cn_routine_compile(ctx, all, ptx, "ops");
    CHECK_MSG(r && cn_routine_run(r) == CN_OK, "ops in %s: %s", cn_prec_name((cn_prec)prec),
              cn_ctx_error(ctx));
    cn_routine_free(r);
    cn_node *conv_outs[CN_PREC_COUNT];
    r = cn_routine_compile(ctx, build_conversions(ctx, (cn_prec)prec, conv_outs), ptx, "conv");
    CHECK_MSG(r && cn_routine_run(r) == CN_OK, "conversions to %s: %s", cn_prec_name((cn_prec)prec),
              cn_ctx_error(ctx));
    cn_routine_free(r);
    cn_ctx_destroy(ctx);
  }
  CHECK_INT(seen.programs, 2 * CN_PREC_COUNT);
}

/* A Tile statement's forward code on `backend`: the output's cells. */
static void run_tile(cn_backend_kind backend, const char *text, const double *in, int64_t n_in,
                     const double *expected, int64_t count) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_dims d = {CN_AXES_NONE, CN_AXES_NONE, {1, &n_in, NULL}};
  cn_tensor *I = cn_tensor_data(g, "I", &d, in, (size_t)n_in);
  cn_tile_binding b[1] = {{"I", I, "N", 0}};
  cn_tensor *t = I ? cn_tile(g, text, 1, b) : NULL;
  cn_asgn *code = t ? cn_graph_forward(g, t) : NULL;
  cn_routine *r = code ? cn_routine_compile(ctx, code, backend, "tile") : NULL;
  CHECK_MSG(r && cn_routine_run(r) == CN_OK, "%s: %s", text, cn_ctx_error(ctx));
  double got[16] = {0};
  if (r) CHECK_INT(cn_node_get_values(cn_tensor_value(t), false, got, (size_t)count), CN_OK);
  for (int64_t c = 0; r && c < count; c++)
    CHECK_MSG(got[c] == expected[c], "%s: cell %lld = %g, expected %g", text, (long long)c, got[c],
              expected[c]);
  cn_routine_free(r);
  cn_ctx_destroy(ctx);
}

/* Tile nests over valid index sets (tile-edsl "Valid Indices"): a constraint on a division
 * (i / 2 < 2 keeps i = 0, 2), a max pool whose last window runs off the input, an upsampling
 * (odd cells skipped). */
static void test_tile_on(cn_backend_kind backend) {
  const double v5[5] = {1, 2, 3, 4, 5};
  run_tile(backend, "O[i : N] += I[i], i / 2 < 2", v5, 5, (double[]){1, 0, 3, 0, 0}, 5);
  run_tile(backend, "O[i / 2 : 3] >= I[i + j], j < 2", v5, 5, (double[]){2, 4, 5}, 3);
  run_tile(backend, "O[x : 2 * N] += I[x / 2]", v5, 3, (double[]){1, 0, 2, 0, 3, 0}, 6);
}

/* Three steps of the half-moons model on `backend`; their losses into loss[]. */
static void moons_steps(cn_backend_kind backend, double loss[3]) {
  static moons m;
  const moons_config cfg = {2, MOONS_SEED, backend, 1, MOONS_BATCH};
  cn_status st = moons_build(&m, &cfg);
  for (int s = 0; s < 3 && st == CN_OK; s++) st = moons_train_step(&m, s, &loss[s]);
  CHECK_MSG(st == CN_OK, "moons on %s: %s", cn_backend_name(backend),
            m.ctx ? cn_ctx_error(m.ctx) : "no context");
  moons_destroy(&m);
}

static void test_moons_ptx(cn_backend_kind ptx) {
  seen.programs = 0;
  double loss[3] = {0, 0, 0};
  moons_steps(ptx, loss);
  CHECK(seen.programs >= 2); /* the init and the step at least */
  CHECK(loss[0] > 0.1 && loss[0] < 2);
}

/* ---- The CUDA prelude as host C++ ---- */

/* Calls of builtins.h's helpers: evaluated here through builtins.h (C, _Generic, memcpy) and in
 * the CUDA prelude compiled by g++ (C++ overloads, cn_bit_copy): each printed as bits. */
/* clang-format off */
#define FLOAT_CALLS(X) \
  X(cn_max(x, y)) \
  X(cn_min(x, y)) \
  X(cn_pow(x, y)) \
  X(cn_mod(x, y)) \
  X(cn_exp(x)) \
  X(cn_tanh(x)) \
  X(cn_gelu(x)) \
  X(cn_select(x > 0, x, y)) \
  X(cn_load_half(cn_store_half(x))) \
  X(cn_load_bfloat16(cn_store_bfloat16(x))) \
  X(cn_load_fp8(cn_store_fp8(x))) \
  X(cn_of_max_key_f32(cn_max_key_f32(x))) \
  X(cn_u4x32_to_single_uniform(cn_single_to_u4x32(x)))
#define DOUBLE_CALLS(X) \
  X(cn_max(d, e)) \
  X(cn_min(d, e)) \
  X(cn_pow(d, e)) \
  X(cn_mod(d, e)) \
  X(cn_gelu(d)) \
  X(cn_select(d > 0, d, e)) \
  X(cn_of_max_key_f64(cn_max_key_f64(d))) \
  X(cn_u4x32_to_double_uniform(cn_double_to_u4x32(d)))
#define INT_CALLS(X) \
  X(cn_iadd(a, b)) \
  X(cn_isub(a, b)) \
  X(cn_imul(a, b)) \
  X(cn_idiv(a, b)) \
  X(cn_imod(a, b)) \
  X(cn_ipow(a, b)) \
  X(cn_ineg(a)) \
  X(cn_max(a, b)) \
  X(cn_min(a, b)) \
  X(cn_select(a > 0, a, b)) \
  X(cn_ceil_div_i64(a, b)) \
  X(cn_floor_div_i64(a, b)) \
  X(cn_ftoi(x, INT64_MIN, INT64_MAX)) \
  X(cn_ftou(x, UINT64_MAX)) \
  X(cn_store_int32(a)) \
  X(cn_iadd(u, v)) \
  X(cn_idiv(u, v)) \
  X(cn_ipow(u, v))
#define WORD_CALLS(X) \
  X(cn_threefry4x32_crypto(w, cn_int64_to_u4x32(a))) \
  X(cn_threefry4x32_light(w, cn_int32_to_u4x32(b)))
/* clang-format on */

/* The loop over the value pairs, in C here and as the C++ text's: x, y float; d, e double; a, b
 * int64; u, v uint64; w a word of x's and a's bits. */
#define FOR_PAIRS                                                                                  \
  for (int i = 0; i < NVALS; i++)                                                                  \
    for (int j = 0; j < NVALS; j++) {                                                              \
      float x = (float)float_vals[i], y = (float)float_vals[j];                                    \
      double d = float_vals[i] * 1.1, e = float_vals[j];                                           \
      int64_t a = (int64_t)int_vals[i], b = (int64_t)int_vals[j] % 70;                             \
      uint64_t u = (uint64_t)a, v = (uint64_t)b;                                                   \
      cn_u4x32 w = {{cn_f32_bits(x), (uint32_t)a, (uint32_t)i, 7u}};
#define STR(...)  #__VA_ARGS__
#define XSTR(...) STR(__VA_ARGS__)

#define PRINT_F(e) fprintf(out, "%08x\n", cn_f32_bits((float)(e)));
#define PRINT_D(e) fprintf(out, "%016llx\n", (unsigned long long)cn_f64_bits((double)(e)));
#define PRINT_I(e) fprintf(out, "%016llx\n", (unsigned long long)(e));
#define PRINT_W(e)                                                                                 \
  {                                                                                                \
    cn_u4x32 r = e;                                                                                \
    fprintf(out, "%08x %08x %08x %08x\n", r.v[0], r.v[1], r.v[2], r.v[3]);                         \
  }
#define TEXT_F(e) "PRINT_F(" #e ")\n"
#define TEXT_D(e) "PRINT_D(" #e ")\n"
#define TEXT_I(e) "PRINT_I(" #e ")\n"
#define TEXT_W(e) "PRINT_W(" #e ")\n"

/* The calls evaluated by the library's builtins.h. */
static void host_calls(FILE *out) {
  FOR_PAIRS
  FLOAT_CALLS(PRINT_F) DOUBLE_CALLS(PRINT_D) INT_CALLS(PRINT_I) WORD_CALLS(PRINT_W)
}
}

static void test_prelude_host(void) {
  const char *cxx = cudahost_cxx_find("test_cuda: the prelude's host check");
  if (!cxx) return;
  cn_ctx *ctx = cn_ctx_create();
  cn_sbuf body = {0}, program = {0};
  cn_sbuf_puts(&body, XSTR(FLOAT_CALLS(TEXT_F) DOUBLE_CALLS(TEXT_D) INT_CALLS(TEXT_I)
                               WORD_CALLS(TEXT_W)) " cn_f32_bits cn_f64_bits cn_int64_to_u4x32");
  cn_sbuf_puts(&program, cudahost_head);
  CHECK_INT(cn_cgen_cuda.prelude(ctx, &program, &body), CN_OK);
  cn_sbuf_printf(&program, "static const double float_vals[] = {");
  for (int i = 0; i < NVALS; i++) {
    double x = float_vals[i];
    if (isnan(x))
      cn_sbuf_printf(&program, "%s(double)NAN", i ? ", " : "");
    else if (isinf(x))
      cn_sbuf_printf(&program, "%s%s(double)INFINITY", i ? ", " : "", x < 0 ? "-" : "");
    else
      cn_sbuf_printf(&program, "%s%a", i ? ", " : "", x);
  }
  cn_sbuf_printf(&program, "};\nstatic const double int_vals[] = {");
  for (int i = 0; i < NVALS; i++) cn_sbuf_printf(&program, "%s%a", i ? ", " : "", int_vals[i]);
  cn_sbuf_printf(&program, "};\n#define NVALS %d\n#define out stdout\n%s\n%s\n%s\n%s\n", NVALS,
                 "#define PRINT_F(e) " XSTR(PRINT_F(e)), "#define PRINT_D(e) " XSTR(PRINT_D(e)),
                 "#define PRINT_I(e) " XSTR(PRINT_I(e)), "#define PRINT_W(e) " XSTR(PRINT_W(e)));
  cn_sbuf_printf(&program, "static void run() {\n%s\n%s}\n}\n}\nint main() {\n  cu::run();\n}\n",
                 XSTR(FOR_PAIRS),
                 FLOAT_CALLS(TEXT_F) DOUBLE_CALLS(TEXT_D) INT_CALLS(TEXT_I) WORD_CALLS(TEXT_W));
  char dir[] = "/tmp/cannl-test-cuda-cxx-XXXXXX", src[128], exe[128];
  CHECK(mkdtemp(dir) != NULL && !program.failed);
  cudahost_compile_cxx(cxx, program.data, dir, "prelude", false, src, exe, sizeof src);
  char *want = NULL, *got = NULL;
  size_t want_len = 0, got_len = 0;
  FILE *mem = open_memstream(&want, &want_len);
  host_calls(mem);
  fclose(mem);
  FILE *pipe = popen(exe, "r");
  mem = open_memstream(&got, &got_len);
  char chunk[4096];
  size_t n;
  while (pipe && (n = fread(chunk, 1, sizeof chunk, pipe)) > 0) fwrite(chunk, 1, n, mem);
  CHECK(pipe && pclose(pipe) == 0);
  fclose(mem);
  CHECK(want_len > 10000); /* NVALS^2 pairs of calls */
  size_t at = 0;
  while (at < want_len && at < got_len && want[at] == got[at]) at++;
  CHECK_MSG(got_len == want_len && at == want_len,
            "the CUDA prelude as C++ differs from builtins.h at byte %zu: '%.40s' against '%.40s'",
            at, got + (at < got_len ? at : got_len), want + at);
  free(want);
  free(got);
  unlink(src);
  unlink(exe);
  rmdir(dir);
  cn_sbuf_free(&body);
  cn_sbuf_free(&program);
  cn_ctx_destroy(ctx);
}

/* ---- Comparing ops across backends ---- */

/* The relative difference allowed between CUDA's and glibc's value of op in prec: 0 (exact) but
 * for the functions CUDA's library computes (a few ulp of float or double, which a narrow
 * precision's rounding may turn into one of its own ulp). */
static double tolerance(cn_op op, cn_prec prec) {
  bool libm = op == CN_OP_LOG || op == CN_OP_EXP2 || op == CN_OP_LOG2 || op == CN_OP_SIN ||
              op == CN_OP_COS || op == CN_OP_POW ||
              (prec == CN_PREC_DOUBLE && (op == CN_OP_EXP || op == CN_OP_TANH || op == CN_OP_GELU));
  if (!libm) return 0;
  switch (prec) {
  case CN_PREC_DOUBLE: return 1e-15;
  case CN_PREC_HALF: return 1e-3;
  case CN_PREC_BFLOAT16: return 1e-2;
  case CN_PREC_FP8: return 0.25;
  default: return 4e-7;
  }
}

static void run_ops(cn_ctx *ctx, cn_asgn *asgn, cn_backend_kind backend, int count,
                    cn_node *const *outs, double **cells) {
  cn_routine *r = cn_routine_compile(ctx, asgn, backend, "ops");
  CHECK_MSG(r && cn_routine_run(r) == CN_OK, "%s", cn_ctx_error(ctx));
  for (int k = 0; k < count; k++) {
    size_t n = (size_t)cn_node_numel(outs[k]);
    cells[k] = calloc(n, sizeof(double));
    CHECK(cn_node_get_values(outs[k], false, cells[k], n) == CN_OK);
  }
  cn_routine_free(r);
}

/* Every op in every precision, and every conversion, on `backend` against generated C, cell by
 * cell: exact (any NaN for a NaN), but with the tolerance of `tolerance` unless `exact`. */
static void compare_ops(cn_backend_kind reference, cn_backend_kind backend, bool exact) {
  for (int prec = 0; prec < CN_PREC_COUNT; prec++) {
    cn_ctx *ctx = cn_ctx_create();
    op_case cases[CN_OP_COUNT + CN_PREC_COUNT];
    cn_node *outs[CN_OP_COUNT + CN_PREC_COUNT];
    double *ref_cells[CN_OP_COUNT + CN_PREC_COUNT], *cells[CN_OP_COUNT + CN_PREC_COUNT];
    int count;
    cn_asgn *parts[2] = {build_all_ops(ctx, (cn_prec)prec, cases, outs, &count), NULL};
    parts[1] = build_conversions(ctx, (cn_prec)prec, outs + count);
    for (int k = 0; k < CN_PREC_COUNT; k++)
      cases[count + k] = (op_case){CN_OP_ID, outs[count + k], NULL};
    count += CN_PREC_COUNT;
    cn_asgn *all = cn_asgn_seq(ctx, 2, parts);
    run_ops(ctx, all, reference, count, outs, ref_cells);
    run_ops(ctx, all, backend, count, outs, cells);
    for (int k = 0; k < count; k++) {
      double tol = exact ? 0 : tolerance(cases[k].op, (cn_prec)prec);
      for (int64_t c = 0; c < cn_node_numel(outs[k]); c++) {
        double a = ref_cells[k][c], b = cells[k][c];
        CHECK_MSG((isnan(a) && isnan(b)) || a == b || fabs(a - b) <= tol * fmax(fabs(a), fabs(b)),
                  "%s on %s (output %d): cell %lld: %s %.17g, %s %.17g", cn_op_name(cases[k].op),
                  cn_prec_name((cn_prec)prec), k, (long long)c, cn_backend_name(reference), a,
                  cn_backend_name(backend), b);
      }
      free(ref_cells[k]);
      free(cells[k]);
    }
    cn_ctx_destroy(ctx);
  }
}

/* ---- The CUDA programs run on the host (tests/cudahost.h) ---- */

/* The e2e cases against the interpreter's bits, every op and conversion against generated C's
 * (exact: the host's libm on both sides), and the Tile nests, on cudahost. */
static void test_on_host(void) {
  cn_backend_kind host;
  if (!cudahost_register("test_cuda: running the CUDA programs on the host", &host)) return;
  backends[0] = CN_BACKEND_INTERP;
  backends[1] = host;
  n_backends = 2;
  e2e_threads = false;
  e2e_run_all();
  compare_ops(CN_BACKEND_C, host, true);
  test_tile_on(host);
  /* a sum in lanes alone at the top of a statement is a work-group of 256 threads (the row of
   * test_sum_lanes, compiled twice there), in order one thread's loop; its rows stay one work
   * item here: cudahost, of host memory, is scheduled as for a CPU, and so little work gets no
   * parallel loop (OpenCL's rows are a work-group each: test_opencl) */
  int before = cudahost.tiled_kernels;
  test_sum_lanes(CN_PREC_SINGLE, false);
  int ordered = cudahost.tiled_kernels - before;
  before = cudahost.tiled_kernels;
  test_sum_lanes(CN_PREC_SINGLE, true);
  CHECK_INT(cudahost.tiled_kernels - before, ordered + 2);
  CHECK_INT(cudahost.programs, 54 + CN_PREC_COUNT + 3);
  cudahost_done();
}

/* The architecture PTX is compiled for: 90 without a GPU; with one, its compute capability when
 * NVRTC knows it, else the newest older one NVRTC knows, else none (a GPU too old). */
static void test_arch(const cn_nvrtc *rt) {
  CHECK_INT(cn_nvrtc_arch(rt, NULL), 90);
  cn_cuda_gpu gpu = {.major = 9, .minor = 0};
  CHECK_INT(cn_nvrtc_arch(rt, &gpu), 90);
  gpu = (cn_cuda_gpu){.major = 8, .minor = 6};
  CHECK_INT(cn_nvrtc_arch(rt, &gpu), 86);
  if (rt->n_archs == 0) return; /* an NVRTC that cannot list its architectures */
  int oldest = rt->newest_arch;
  for (int k = 0; k < rt->n_archs; k++)
    if (rt->archs[k] < oldest) oldest = rt->archs[k];
  gpu = (cn_cuda_gpu){.major = (rt->newest_arch + 10) / 10, .minor = 9};
  CHECK_INT(cn_nvrtc_arch(rt, &gpu), rt->newest_arch);
  gpu = (cn_cuda_gpu){.major = (oldest - 1) / 10, .minor = (oldest - 1) % 10};
  CHECK_INT(cn_nvrtc_arch(rt, &gpu), 0);
}

/* ---- Errors and the cache ---- */

/* A source NVRTC rejects: the message has NVRTC's log and the path of the source, which is there
 * (in the cache directory, or with the cache off a directory of its own). */
static void test_broken_source(void) {
  cn_ctx *ctx = cn_ctx_create();
  char *ptx, *log;
  const char *broken = "extern \"C\" __global__ void k() { nowhere = 1; }\n";
  cn_status st = cn_cuda_ptx_of(ctx, "broken", broken, 90, &ptx, &log);
  CHECK_INT(st, CN_ERR_COMPILE);
  const char *msg = cn_ctx_error(ctx), *prefix = "NVRTC failed on generated file ";
  CHECK_MSG(strncmp(msg, prefix, strlen(prefix)) == 0, "%s", msg);
  CHECK_HAS(msg, "(NVRTC_ERROR_COMPILATION):\n");
  CHECK_HAS(msg, "identifier \"nowhere\" is undefined");
  CHECK(ptx == NULL && log == NULL);
  char path[512] = "";
  const char *space = strchr(msg + strlen(prefix), ' ');
  if (space)
    snprintf(path, sizeof path, "%.*s", (int)(space - msg - strlen(prefix)), msg + strlen(prefix));
  CHECK_MSG(strstr(path, "/broken-") && strstr(path, ".cu"), "%s", path);
  FILE *f = fopen(path, "r");
  char text[256] = "";
  CHECK_MSG(f && fread(text, 1, sizeof text - 1, f) > 0, "%s", path);
  if (f) fclose(f);
  CHECK_STR(text, broken);
  unlink(path);
  char *slash = strrchr(path, '/');
  if (slash && strstr(path, "/cannl-")) { /* a private directory of its own */
    *slash = '\0';
    rmdir(path);
  }
  cn_ctx_destroy(ctx);
}

/* out = a + b over 5 cells, lowered: the procedure the cache test compiles. */
static cn_ll_proc *add_proc(cn_ctx *ctx) {
  int64_t n = 5;
  cn_node *a = node(ctx, "a", CN_PREC_SINGLE, 1, &n), *b = node(ctx, "b", CN_PREC_SINGLE, 1, &n),
          *out = node(ctx, "out", CN_PREC_SINGLE, 1, &n);
  cn_symbol i = cn_symbol_create(ctx, "i", 0);
  cn_index map = cn_index_iter(i);
  cn_proj_tensor t = {1, &n, &map};
  cn_proj *p = cn_proj_create(ctx, 1, &i, &n, t, 2, (cn_proj_tensor[]){t, t});
  cn_asgn *asgn = cn_asgn_accum(ctx, true, CN_OP_ARG2, out, CN_OP_ADD,
                                (cn_buffer[]){{a, false}, {b, false}}, p);
  cn_ll_proc *proc = NULL;
  CHECK_MSG(asgn && cn_ll_lower(ctx, asgn, "add", &proc) == CN_OK, "%s", cn_ctx_error(ctx));
  return proc;
}

/* The path of the one file of dir ending in ext, in path; false when there is none. */
static bool find_file(const char *dir, const char *ext, char *path, size_t size) {
  DIR *d = opendir(dir);
  struct dirent *e;
  bool found = false;
  while (d && !found && (e = readdir(d))) {
    size_t n = strlen(e->d_name), k = strlen(ext);
    if (n > k && strcmp(e->d_name + n - k, ext) == 0) {
      snprintf(path, size, "%s/%s", dir, e->d_name);
      found = true;
    }
  }
  if (d) closedir(d);
  return found;
}

static void test_cache(void) {
  char dir[] = "/tmp/cannl-test-cuda-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  cn_ctx *ctx = cn_ctx_create();
  CHECK_INT(cn_ctx_set_option(ctx, "cache_dir", dir), CN_OK);
  cn_ll_proc *proc = add_proc(ctx);
  void *first = NULL, *again = NULL, *rebuilt = NULL;
  const char *source;
  CHECK_INT(cn_backend_cuda.compile(ctx, proc, &first, &source), CN_OK);
  CHECK_INT((int)cn_ctx_stat(ctx, CN_STAT_COMPILER_RUNS), 1);
  char ptx[512];
  CHECK(find_file(dir, ".ptx", ptx, sizeof ptx));
  /* a second compile: no NVRTC, the same PTX */
  CHECK_INT(cn_backend_cuda.compile(ctx, proc, &again, &source), CN_OK);
  CHECK_INT((int)cn_ctx_stat(ctx, CN_STAT_COMPILER_RUNS), 1);
  CHECK_INT((int)cn_ctx_stat(ctx, CN_STAT_CACHE_HITS), 1);
  CHECK(first && again && strcmp(cn_cuda_ptx(first), cn_cuda_ptx(again)) == 0);
  /* a corrupted PTX (same size, one byte changed): discarded, compiled again */
  FILE *f = fopen(ptx, "r+");
  CHECK(f && fseek(f, -100, SEEK_END) == 0 && fputc('#', f) != EOF);
  if (f) fclose(f);
  CHECK_INT(cn_backend_cuda.compile(ctx, proc, &rebuilt, &source), CN_OK);
  CHECK_INT((int)cn_ctx_stat(ctx, CN_STAT_COMPILER_RUNS), 2);
  CHECK_INT((int)cn_ctx_stat(ctx, CN_STAT_CACHE_HITS), 1);
  CHECK(rebuilt && strcmp(cn_cuda_ptx(first), cn_cuda_ptx(rebuilt)) == 0);
  cn_backend_cuda.release(first);
  cn_backend_cuda.release(again);
  cn_backend_cuda.release(rebuilt);
  cn_ctx_destroy(ctx);
  unlink(ptx);
  CHECK(rmdir(dir) == 0);
}

/* Without a GPU: the device's error says why and that NVRTC is here; a routine on "cuda"
 * compiles its kernels (its source there) and then its first run fails with that error (never a
 * crash, never a silent pass). */
static void test_no_gpu(void) {
  cn_ctx *ctx = cn_ctx_create();
  int cuda = cn_backend_find("cuda");
  CHECK(cuda >= 0);
  char device[512];
  CHECK_INT(cn_backend_device(ctx, (cn_backend_kind)cuda, device, sizeof device),
            CN_ERR_UNSUPPORTED);
  const char *why = cn_ctx_error(ctx);
  CHECK_MSG(strncmp(why, "no CUDA driver (libcuda.so.1): ", 31) == 0 ||
                strncmp(why, "no CUDA device: ", 16) == 0,
            "%s", why);
  CHECK_HAS(why, "is here: kernels compile to PTX, nothing runs");
  printf("test_cuda: no GPU, launching skipped: %s\n", why);
  int64_t n = 3;
  cn_node *x = node(ctx, "x", CN_PREC_SINGLE, 1, &n), *y = node(ctx, "y", CN_PREC_SINGLE, 1, &n);
  cn_symbol i = cn_symbol_create(ctx, "i", 0);
  cn_index map = cn_index_iter(i);
  cn_proj_tensor t = {1, &n, &map};
  cn_proj *p = cn_proj_create(ctx, 1, &i, &n, t, 1, &t);
  cn_asgn *asgn = cn_asgn_accum(ctx, true, CN_OP_ARG2, y, CN_OP_EXP, (cn_buffer[]){{x, false}}, p);
  /* the device is linked at the first run: the routine compiles, its source is there */
  cn_routine *r = cn_routine_compile(ctx, asgn, (cn_backend_kind)cuda, "exp");
  CHECK_MSG(r != NULL, "%s", cn_ctx_error(ctx));
  CHECK_HAS(r ? cn_routine_source(r) : "", "extern \"C\" __global__ void exp_k0(");
  if (r) CHECK(cn_routine_run(r) != CN_OK);
  CHECK_HAS(cn_ctx_error(ctx), "no CUDA");
  cn_routine_free(r);
  cn_ctx_destroy(ctx);
}

/* ---- With a GPU ---- */

/* A routine's scratch on the GPU: t =+ a with t CN_MEM_LOCAL (read before written, so cleared
 * before each run), c =:+ t * a. Three runs queued, then one read: c = a * a only if every run
 * found t at zero (a kept t gives 3 a * a by the third). The clears are the device's: a is the one
 * upload, no zeros go up from the host. */
static void test_gpu_scratch(cn_backend_kind cuda) {
  cn_ctx *ctx = cn_ctx_create();
  int64_t n = 3;
  cn_node *a = node(ctx, "a", CN_PREC_SINGLE, 1, &n), *t = node(ctx, "t", CN_PREC_SINGLE, 1, &n);
  cn_node *c = node(ctx, "c", CN_PREC_SINGLE, 1, &n);
  CHECK_INT(cn_node_set_values(a, false, (const double[]){1, 2, 3}, 3), CN_OK);
  CHECK_INT(cn_node_set_memory(t, CN_MEM_LOCAL), CN_OK);
  cn_symbol i = cn_symbol_create(ctx, "i", 0);
  cn_index map = cn_index_iter(i);
  cn_proj_tensor one = {1, &n, &map}, two[2] = {one, one};
  cn_asgn *steps[2] = {cn_asgn_accum(ctx, false, CN_OP_ADD, t, CN_OP_ID, (cn_buffer[]){{a, false}},
                                     cn_proj_create(ctx, 1, &i, &n, one, 1, &one)),
                       cn_asgn_accum(ctx, true, CN_OP_ADD, c, CN_OP_MUL,
                                     (cn_buffer[]){{t, false}, {a, false}},
                                     cn_proj_create(ctx, 1, &i, &n, one, 2, two))};
  cn_routine *r = steps[0] && steps[1]
                      ? cn_routine_compile(ctx, cn_asgn_seq(ctx, 2, steps), cuda, "scratch")
                      : NULL;
  CHECK_MSG(r != NULL, "%s", cn_ctx_error(ctx));
  for (int rep = 0; r && rep < 3; rep++)
    CHECK_MSG(cn_routine_run(r) == CN_OK, "%s", cn_ctx_error(ctx));
  double got[3] = {0, 0, 0};
  CHECK_INT(cn_node_get_values(c, false, got, 3), CN_OK);
  CHECK(got[0] == 1 && got[1] == 4 && got[2] == 9);
  CHECK_INT(cn_ctx_stat(ctx, CN_STAT_UPLOADS), 1);
  cn_routine_free(r);
  cn_ctx_destroy(ctx);
}

static void test_gpu(cn_backend_kind cuda) {
  test_gpu_scratch(cuda);
  backends[0] = CN_BACKEND_C;
  backends[1] = cuda;
  n_backends = 2;
  e2e_threads = false;
  e2e_run_all();
  compare_ops(CN_BACKEND_C, cuda, false);
  test_tile_on(cuda);
  double c_loss[3], cuda_loss[3];
  moons_steps(CN_BACKEND_C, c_loss);
  moons_steps(cuda, cuda_loss);
  for (int s = 0; s < 3; s++) CHECK_NEAR(cuda_loss[s], c_loss[s], 1e-4);
}

int main(void) {
  cn_ctx *ctx = cn_ctx_create();
  const cn_nvrtc *rt = NULL;
  if (cn_nvrtc_get(ctx, &rt) != CN_OK) {
    printf("test_cuda: skipped: %s\n", cn_ctx_error(ctx));
    cn_ctx_destroy(ctx);
    return 77;
  }
  printf("test_cuda: NVRTC %d.%d (%s)\n", rt->major, rt->minor, rt->library);
  cn_backend_kind ptx;
  CHECK_MSG(cn_backend_register(ctx, &ptx_backend, &ptx) == CN_OK, "%s", cn_ctx_error(ctx));
  cn_ctx_destroy(ctx);
  /* every compile runs NVRTC, so each log is there to check */
  setenv("CANNL_CACHE_DIR", "off", 1);
  test_arch(rt);
  test_prelude_host();
  test_on_host();
  test_broken_source();
  test_e2e_ptx(ptx);
  test_ops_ptx(ptx);
  seen.programs = 0;
  test_tile_on(ptx);
  CHECK_INT(seen.programs, 3);
  test_moons_ptx(ptx);
  test_cache();
  int cuda = cn_backend_find("cuda");
  if (cn_cuda_gpu_find())
    test_gpu((cn_backend_kind)cuda);
  else
    test_no_gpu();
  CHECK_DONE();
}
