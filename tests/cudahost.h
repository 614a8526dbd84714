/* CUDA programs run on the host, for the tests that have no GPU (test_cuda, test_device_gemm).
 *
 * "cudahost" is a backend a test registers (cudahost_register): a procedure's kernel program in
 * the CUDA dialect, the very source NVRTC compiles without a GPU (cn_cuda_kernel_limits: 1024
 * threads and 48 KiB of shared memory a block, CUDA's tile or the option "device_tile"'s, so GEMMs
 * are tiled kernels as on a GPU),
 * compiled by the host's C++ compiler with the CUDA intrinsics of cudahost_head defined on the
 * host, and a launcher that runs each kernel's grid with the kernel ABI's arguments (argument k
 * the routine's buffer params[k], then every free symbol):
 * - a kernel of any block size: every work item in turn, blockIdx, blockDim and threadIdx as a
 *   launch of 256-thread blocks sets them, the items past work_items included (the kernel's guard
 *   must skip them);
 * - a tiled kernel (group_size set): its blocks one after the other, each run by group_size host
 *   threads; `__shared__` arrays are statics (one block at a time holds them) and __syncthreads()
 *   is a std::barrier of the block's threads, so a missing or misplaced barrier, a shared index
 *   out of its slice or a thread that skips a barrier shows up as wrong bits or a hang.
 * Without a GPU this checks what the kernels compute, bit for bit against the interpreter and
 * generated C. Include after check.h; the includer provides nothing else. */
#ifndef CANNL_TESTS_CUDAHOST_H
#define CANNL_TESTS_CUDAHOST_H

#include "check.h"

#include "backend/backend.h"
#include "backend/cuda.h"
#include "backend/kernels.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The C++ program around a CUDA source: the CUDA intrinsics the prelude uses, defined on the
 * host; the source goes into namespace cu, which the includer closes. */
static const char cudahost_head[] =
    "#include <stdio.h>\n#include <string.h>\n#include <math.h>\n"
    "static unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }\n"
    "static float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }\n"
    "static float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }\n"
    "static long long __double_as_longlong(double d) { long long u; memcpy(&u, &d, 8); return u; "
    "}\n"
    "static double __longlong_as_double(long long u) { double d; memcpy(&d, &u, 8); return d; }\n"
    "#undef NAN\n#undef INFINITY\n"
    "#undef INT64_MIN\n#undef INT64_MAX\n#undef UINT64_MAX\n#undef INT32_MIN\n#undef INT32_MAX\n"
    "#undef UINT32_MAX\n#undef INT64_C\n#undef UINT64_C\n"
    "namespace cu {\n";

/* The host's C++ compiler ($CXX, else g++), or NULL after saying that `what` is skipped. */
static const char *cudahost_cxx_find(const char *what) {
  const char *cxx = getenv("CXX") && *getenv("CXX") ? getenv("CXX") : "g++";
  char command[1024];
  snprintf(command, sizeof command, "%s --version >/dev/null 2>&1", cxx);
  if (system(command) == 0) return cxx;
  printf("no C++ compiler '%s': %s skipped\n", cxx, what);
  return NULL;
}

/* Compiles the C++ text into dir/name (an executable, or a shared object when `shared`); false
 * after a failed check. src (dir/name.cpp) is left for the caller to remove. C++20 for
 * std::barrier. */
static bool cudahost_compile_cxx(const char *cxx, const char *text, const char *dir,
                                 const char *name, bool shared, char *src, char *out, size_t size) {
  snprintf(src, size, "%s/%s.cpp", dir, name);
  snprintf(out, size, "%s/%s", dir, name);
  FILE *f = fopen(src, "w");
  CHECK(f && fputs(text, f) >= 0);
  if (f) fclose(f);
  char command[2048];
  snprintf(command, sizeof command, "%s -std=c++20 -pthread -w -O1 -ffp-contract=off%s -o %s %s",
           cxx, shared ? " -shared -fPIC" : "", out, src);
  bool ok = system(command) == 0;
  CHECK_MSG(ok, "%s failed on %s", cxx, src);
  return ok;
}

typedef struct {
  void *handle;
  void (*launch)(void *const *buffers, const int64_t *syms);
} cudahost_program;

static struct {
  const char *cxx;
  char dir[64];
  int programs;      /* compiled */
  int tiled_kernels; /* of those, kernels run by blocks of threads */
  char *source;      /* the CUDA source of the last program compiled (malloc'd) */
} cudahost;

/* The launch of one kernel: its call, then the loop over its grid. */
static void cudahost_launch_text(cn_sbuf *cpp, const cn_ll_proc *proc, const cn_kernel *kernel) {
  cn_sbuf call = {0};
  cn_sbuf_printf(&call, "%s(", kernel->name);
  for (int a = 0; a < kernel->n_args; a++)
    cn_sbuf_printf(&call, "%scn_ptr{b[%d]}", a ? ", " : "", kernel->params[a]);
  for (int j = 0; j < proc->n_free_syms; j++)
    cn_sbuf_printf(&call, "%ss[%d]", kernel->n_args + j ? ", " : "", j);
  cn_sbuf_puts(&call, ");");
  if (kernel->group_size > 0) {
    long long size = (long long)kernel->group_size;
    long long blocks = ((long long)kernel->work_items + size - 1) / size;
    cudahost.tiled_kernels++;
    cn_sbuf_printf(cpp,
                   "  {\n"
                   "    blockDim.x = %lld;\n"
                   "    std::barrier<> block(%lld);\n"
                   "    cn_block = &block;\n"
                   "    std::vector<std::thread> team;\n"
                   "    for (unsigned t = 0; t < %lld; t++)\n"
                   "      team.emplace_back([&, t] {\n"
                   "        threadIdx.x = t;\n"
                   "        for (long long g = 0; g < %lld; g++) {\n"
                   "          blockIdx.x = (unsigned)g;\n"
                   "          %s\n"
                   "          block.arrive_and_wait(); /* the next block reuses the statics */\n"
                   "        }\n"
                   "      });\n"
                   "    for (std::thread &t : team) t.join();\n"
                   "  }\n",
                   size, size, size, blocks, call.data ? call.data : "");
  } else {
    long long items = ((long long)kernel->work_items + 255) / 256 * 256;
    cn_sbuf_printf(cpp,
                   "  blockDim.x = 256;\n"
                   "  for (long long id = 0; id < %lld; id++) {\n"
                   "    blockIdx.x = (unsigned)(id / 256);\n"
                   "    threadIdx.x = (unsigned)(id %% 256);\n"
                   "    %s\n"
                   "  }\n",
                   items, call.data ? call.data : "");
  }
  if (call.failed) cpp->failed = true;
  cn_sbuf_free(&call);
}

static cn_status cudahost_compile(cn_ctx *ctx, const cn_ll_proc *proc, void **compiled,
                                  const char **source) {
  cn_kernel_program program;
  cn_kernel_limits limits; /* the CUDA backend's without a GPU, its tile the option's or its own */
  cn_status status = cn_cuda_kernel_limits(ctx, NULL, &limits);
  if (status == CN_OK) status = cn_kernel_program_make(ctx, proc, &cn_cgen_cuda, &limits, &program);
  CHECK_MSG(status == CN_OK, "%s: %s", proc->name, cn_ctx_error(ctx));
  if (status != CN_OK) return status;
  cn_sbuf cpp = {0};
  cn_sbuf_puts(&cpp, "#include <barrier>\n#include <thread>\n#include <vector>\n");
  cn_sbuf_puts(&cpp, cudahost_head);
  cn_sbuf_puts(&cpp, "struct cn_dim3 {\n  unsigned x, y, z;\n};\n"
                     "static thread_local cn_dim3 blockIdx, threadIdx;\n"
                     "static cn_dim3 blockDim;\n"
                     "static std::barrier<> *cn_block;\n"
                     "static void __syncthreads() { cn_block->arrive_and_wait(); }\n"
                     "#define __global__\n#define __shared__ static\n");
  cn_sbuf_puts(&cpp, program.source);
  cn_sbuf_puts(&cpp, "struct cn_ptr {\n  void *p;\n  template <class T> operator T *() const {\n"
                     "    return (T *)p;\n  }\n};\n"
                     "extern \"C\" void cn_host_launch(void *const *b, const long long *s) {\n"
                     "  (void)b;\n  (void)s;\n");
  for (int k = 0; k < program.n_kernels; k++) cudahost_launch_text(&cpp, proc, &program.kernels[k]);
  free(cudahost.source);
  cudahost.source = strdup(program.source);
  cn_sbuf_puts(&cpp, "}\n}\n");
  cn_kernel_program_free(&program);
  char name[64], src[256], lib[256];
  snprintf(name, sizeof name, "p%d.so", cudahost.programs++);
  cudahost_program *h = calloc(1, sizeof *h);
  bool ok =
      h && !cpp.failed &&
      cudahost_compile_cxx(cudahost.cxx, cpp.data, cudahost.dir, name, true, src, lib, sizeof src);
  if (ok) {
    h->handle = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    CHECK_MSG(h->handle, "%s", dlerror());
    void *fn = h->handle ? dlsym(h->handle, "cn_host_launch") : NULL;
    memcpy(&h->launch, &fn, sizeof fn);
    ok = h->launch != NULL;
    unlink(lib);
    unlink(src);
  }
  cn_sbuf_free(&cpp);
  if (!ok) {
    if (h && h->handle) dlclose(h->handle);
    free(h);
    return cn_fail(ctx, CN_ERR_COMPILE, "%s: the CUDA program does not build on the host",
                   proc->name);
  }
  *compiled = h;
  *source = NULL;
  return CN_OK;
}

static cn_status cudahost_run(cn_ctx *ctx, void *compiled, void *const *buffers,
                              const int64_t *syms) {
  (void)ctx;
  ((cudahost_program *)compiled)->launch(buffers, syms);
  return CN_OK;
}

static void cudahost_release(void *compiled) {
  cudahost_program *h = compiled;
  dlclose(h->handle);
  free(h);
}

static const cn_backend cudahost_backend = {
    .name = "cudahost",
    .compile = cudahost_compile,
    .run = cudahost_run,
    .release = cudahost_release,
};

/* Registers "cudahost" (its programs built in a fresh directory under /tmp); false, after saying
 * why `what` is skipped, without a C++ compiler. */
static bool cudahost_register(const char *what, cn_backend_kind *kind) {
  if (!(cudahost.cxx = cudahost_cxx_find(what))) return false;
  snprintf(cudahost.dir, sizeof cudahost.dir, "/tmp/cannl-test-cudahost-XXXXXX");
  CHECK(mkdtemp(cudahost.dir) != NULL);
  cn_ctx *ctx = cn_ctx_create();
  cn_status status = cn_backend_register(ctx, &cudahost_backend, kind);
  CHECK_MSG(status == CN_OK, "%s", cn_ctx_error(ctx));
  cn_ctx_destroy(ctx);
  return status == CN_OK;
}

/* Removes the directory of the programs (each removed once loaded). */
static void cudahost_done(void) {
  rmdir(cudahost.dir);
  free(cudahost.source);
  cudahost.source = NULL;
}

#endif
