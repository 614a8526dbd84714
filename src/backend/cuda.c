/* The CUDA backend: a procedure as kernels (kernels.h) in the CUDA C++ dialect (cgen_cuda.c),
 * compiled to PTX by NVRTC, loaded with cuModuleLoadData and launched with cuLaunchKernel on the
 * device's buffers (cuda_rt.h: NVRTC and the driver opened with dlopen).
 *
 * Compile needs NVRTC only: without a GPU it still generates the program and compiles it to PTX
 * for the fixed architecture (cn_nvrtc_arch), so the kernels are checked; the device, and with it
 * every run, fails with the reason there is none ("no CUDA driver (libcuda.so.1): ...").
 * With a GPU the PTX is compiled for its compute capability and loaded at once.
 *
 * The PTX is a record of the generated-C backend's cache directory (backend.h cn_cc_record_load:
 * cuda-<hash>.ptx, holding its key text and a checksum) under the key text
 *   "nvrtc <major>.<minor>\n<options>\n" <source>
 * (the options name the architecture), so a second compile of the same routine runs no NVRTC
 * (CN_STAT_COMPILER_RUNS counts NVRTC runs, CN_STAT_CACHE_HITS the hits), and a corrupted record
 * is discarded with a warning and compiled again. A source NVRTC rejects is written to the cache
 * directory (<name>-<hash>.cu, cn_cc_source_store) and the error names it, with NVRTC's log.
 *
 * Launch (the kernel ABI of kernels.h): blocks of CUDA_BLOCK threads (a tiled kernel's group
 * size, chosen from the GPU's threads and shared memory a block), grid ceil(work_items / block);
 * arguments the kernel's buffers (CUdeviceptr) then every free symbol (int64); the kernels run in
 * order on the default stream, and run returns once they are launched (asynchronous: the device's
 * synchronize, cuCtxSynchronize, waits and reports a failed kernel; the runtime calls it when the
 * host reads a node a run wrote; cuMemcpyHtoD and cuMemFree wait for the stream themselves).
 * Clears (a routine's scratch, a node no one wrote) are cuMemsetD8Async on the same stream: a
 * run with scratch queues behind the last one instead of waiting for it. A device buffer handle is
 * the CUdeviceptr itself (no allocation of ours around it). Invariants: a compiled state owns its
 * program, PTX, log and loaded module; the device is process-wide (the primary context of the GPU,
 * retained until exit), and each call makes it current on the calling thread first. */
#define _DEFAULT_SOURCE
#include "backend/cuda.h"
#include "backend/cuda_rt.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_BLOCK 256
/* The tiled GEMM kernels' tile (kernels.h): 16 x 16 threads of 8 x 8 cells, a 128 x 128 tile, 16
 * steps a slice (16.5 KiB of shared memory in single precision). Against the default's 4 x 4
 * cells, each pair of values a thread reads from shared memory feeds 4 multiply-adds instead of
 * 2, the ratio GPU SGEMMs need to run at the FMA units' pace rather than shared memory's; 64
 * accumulators and 16 operands stay well inside a thread's 255 registers. */
#define CUDA_TILE ((cn_kernel_tile){16, 8, 16})

typedef struct {
  cn_kernel_program program;
  char *ptx, *log;
  void *module;     /* NULL without a GPU */
  void **functions; /* per kernel, with the module */
  int n_syms;
} cuda_compiled;

/* ---- The device ---- */

static char device_name[512];
static pthread_once_t name_once = PTHREAD_ONCE_INIT;

static void name_device(void) {
  const cn_cuda_gpu *g = cn_cuda_gpu_find();
  snprintf(device_name, sizeof device_name,
           "%s, compute capability %d.%d, %d SMs at %.2f GHz, %.1f GiB of memory, CUDA driver "
           "%d.%d",
           g->name, g->major, g->minor, g->multiprocessors, g->clock_khz / 1e6,
           (double)g->memory / (1 << 30), g->driver_version / 1000, g->driver_version % 1000 / 10);
}

/* The GPU made current on this thread; a failure with its message. */
static cn_status gpu_current(cn_ctx *ctx, const cn_cuda_gpu **gpu) {
  cn_status status = cn_cuda_gpu_get(ctx, gpu);
  if (status != CN_OK) return status;
  int result = (*gpu)->ctx_set_current((*gpu)->context);
  char err[256];
  if (result != 0)
    return cn_fail(ctx, CN_ERR_RUNTIME, "CUDA device: cannot make its context current (%s)",
                   cn_cuda_error(*gpu, result, err, sizeof err));
  return CN_OK;
}

/* A driver call's failure as a CN_ERR_RUNTIME message "CUDA <what>: <error>". */
static cn_status cuda_failed(cn_ctx *ctx, const cn_cuda_gpu *gpu, int result, const char *what) {
  char err[256];
  return cn_fail(ctx, CN_ERR_RUNTIME, "CUDA %s: %s", what,
                 cn_cuda_error(gpu, result, err, sizeof err));
}

static cn_status device_allocate(cn_ctx *ctx, const cn_device *dev, size_t bytes, void **buffer) {
  (void)dev;
  const cn_cuda_gpu *gpu;
  cn_status status = gpu_current(ctx, &gpu);
  if (status != CN_OK) return status;
  cn_cu_ptr ptr = 0;
  int result = gpu->mem_alloc(&ptr, bytes ? bytes : 1);
  if (result != 0) {
    char what[64];
    snprintf(what, sizeof what, "allocation of %zu bytes", bytes);
    return cuda_failed(ctx, gpu, result, what);
  }
  *buffer = (void *)(uintptr_t)ptr;
  return CN_OK;
}

static cn_status device_upload(cn_ctx *ctx, const cn_device *dev, void *buffer, const void *host,
                               size_t bytes) {
  (void)dev;
  const cn_cuda_gpu *gpu;
  cn_status status = gpu_current(ctx, &gpu);
  int result = status == CN_OK && bytes ? gpu->htod((cn_cu_ptr)(uintptr_t)buffer, host, bytes) : 0;
  return status != CN_OK ? status : result ? cuda_failed(ctx, gpu, result, "upload") : CN_OK;
}

static cn_status device_download(cn_ctx *ctx, const cn_device *dev, void *host, const void *buffer,
                                 size_t bytes) {
  (void)dev;
  const cn_cuda_gpu *gpu;
  cn_status status = gpu_current(ctx, &gpu);
  int result = status == CN_OK && bytes ? gpu->dtoh(host, (cn_cu_ptr)(uintptr_t)buffer, bytes) : 0;
  return status != CN_OK ? status : result ? cuda_failed(ctx, gpu, result, "download") : CN_OK;
}

/* Zeros on the device (a routine's scratch, a node never written): queued on the default stream
 * behind the kernels launched before it, so the host neither uploads zeros nor waits for the
 * previous run to stop reading them. */
static cn_status device_clear(cn_ctx *ctx, const cn_device *dev, void *buffer, size_t bytes) {
  (void)dev;
  const cn_cuda_gpu *gpu;
  cn_status status = gpu_current(ctx, &gpu);
  int result = status == CN_OK && bytes
                   ? gpu->memset_async((cn_cu_ptr)(uintptr_t)buffer, 0, bytes, NULL)
                   : 0;
  if (status != CN_OK) return status;
  if (result == 0) return CN_OK;
  char what[64];
  snprintf(what, sizeof what, "clear of %zu bytes", bytes);
  return cuda_failed(ctx, gpu, result, what);
}

static cn_status device_synchronize(cn_ctx *ctx, const cn_device *dev) {
  (void)dev;
  const cn_cuda_gpu *gpu;
  cn_status status = gpu_current(ctx, &gpu);
  int result = status == CN_OK ? gpu->ctx_synchronize() : 0;
  return status != CN_OK ? status : result ? cuda_failed(ctx, gpu, result, "synchronize") : CN_OK;
}

static void device_free(const cn_device *dev, void *buffer) {
  (void)dev;
  const cn_cuda_gpu *gpu = cn_cuda_gpu_find(); /* there: device_allocate made the buffer */
  if (gpu && gpu->ctx_set_current(gpu->context) == 0) gpu->mem_free((cn_cu_ptr)(uintptr_t)buffer);
}

static const cn_device cuda_device = {
    .name = device_name,
    .allocate = device_allocate,
    .upload = device_upload,
    .download = device_download,
    .synchronize = device_synchronize,
    .free = device_free,
    .clear = device_clear,
};

/* The device; without one the reason, and whether kernels still compile (NVRTC found). */
static cn_status cuda_open_device(cn_ctx *ctx, const cn_device **device) {
  const cn_cuda_gpu *gpu;
  if (cn_cuda_gpu_get(ctx, &gpu) != CN_OK) {
    char why[1024];
    snprintf(why, sizeof why, "%s", cn_ctx_error(ctx));
    const cn_nvrtc *rt;
    if (cn_nvrtc_get(ctx, &rt) == CN_OK)
      return cn_fail(ctx, CN_ERR_UNSUPPORTED,
                     "%s; NVRTC %d.%d (%s) is here: kernels compile to PTX, nothing runs", why,
                     rt->major, rt->minor, rt->library);
    char nvrtc_why[1024]; /* the context's message is the buffer cn_fail writes */
    snprintf(nvrtc_why, sizeof nvrtc_why, "%s", cn_ctx_error(ctx));
    return cn_fail(ctx, CN_ERR_UNSUPPORTED, "%s; %s", why, nvrtc_why);
  }
  pthread_once(&name_once, name_device);
  *device = &cuda_device;
  return CN_OK;
}

/* ---- Compiling ---- */

static void cuda_release(void *compiled) {
  cuda_compiled *c = compiled;
  if (!c) return;
  const cn_cuda_gpu *gpu = c->module ? cn_cuda_gpu_find() : NULL;
  if (gpu && gpu->ctx_set_current(gpu->context) == 0) gpu->module_unload(c->module);
  cn_kernel_program_free(&c->program);
  free(c->functions);
  free(c->ptx);
  free(c->log);
  free(c);
}

cn_status cn_cuda_ptx_of(cn_ctx *ctx, const char *name, const char *source, int arch, char **ptx,
                         char **log) {
  *ptx = *log = NULL;
  const cn_nvrtc *rt;
  cn_status status = cn_nvrtc_get(ctx, &rt);
  if (status != CN_OK) return status;
  char options[160];
  cn_nvrtc_options(arch, options, sizeof options);
  cn_sbuf key = {0};
  cn_sbuf_printf(&key, "nvrtc %d.%d\n%s\n%s", rt->major, rt->minor, options, source);
  if (key.failed) {
    cn_sbuf_free(&key);
    return cn_fail(ctx, CN_ERR_NOMEM, "out of memory for a cache key");
  }
  size_t len = 0;
  bool found = false;
  status = cn_cc_record_load(ctx, "cuda", "ptx", key.data, ptx, &len, &found);
  if (status == CN_OK && found) {
    ctx->stats[CN_STAT_CACHE_HITS]++;
    cn_log(ctx, CN_LOG_DEBUG, "routine '%s': cached PTX", name);
    *log = malloc(1);
    if (*log) **log = '\0';
  } else if (status == CN_OK) {
    ctx->stats[CN_STAT_COMPILER_RUNS]++;
    cn_log(ctx, CN_LOG_DEBUG, "compiling: NVRTC %s, routine '%s'", options, name);
    status = cn_nvrtc_compile(ctx, rt, arch, source, name, ptx, &len, log);
    if (status == CN_ERR_COMPILE && *log) {
      /* rejected: the message names the source, kept where it can be read, and NVRTC's log */
      char error[128], *path = NULL;
      snprintf(error, sizeof error, "%s", cn_ctx_error(ctx));
      if (cn_cc_source_store(ctx, name, "cu", source, &path) == CN_OK)
        status = cn_fail(ctx, CN_ERR_COMPILE, "NVRTC failed on generated file %s (%s):\n%s", path,
                         error, **log ? *log : "(no log)");
      free(path);
    } else if (status == CN_OK) {
      status = cn_cc_record_store(ctx, "cuda", "ptx", key.data, *ptx, len);
    }
  }
  cn_sbuf_free(&key);
  if (status == CN_OK && !*log) status = cn_fail(ctx, CN_ERR_NOMEM, "out of memory");
  if (status != CN_OK) {
    free(*ptx);
    free(*log);
    *ptx = *log = NULL;
  }
  return status;
}

/* Loads c's PTX on the GPU and finds its kernels. */
static cn_status cuda_load(cn_ctx *ctx, const cn_cuda_gpu *gpu, const cn_nvrtc *rt,
                           const char *name, cuda_compiled *c) {
  int result = gpu->module_load_data(&c->module, c->ptx);
  if (result != 0) {
    char err[256];
    c->module = NULL;
    return cn_fail(ctx, CN_ERR_COMPILE,
                   "routine '%s': the CUDA driver %d.%d cannot load the PTX of NVRTC %d.%d "
                   "(a driver at least as new as NVRTC is needed): %s",
                   name, gpu->driver_version / 1000, gpu->driver_version % 1000 / 10, rt->major,
                   rt->minor, cn_cuda_error(gpu, result, err, sizeof err));
  }
  c->functions = cn_calloc(ctx, (size_t)c->program.n_kernels + 1, sizeof(void *));
  if (!c->functions) return ctx->status;
  for (int k = 0; k < c->program.n_kernels; k++) {
    result = gpu->module_get_function(&c->functions[k], c->module, c->program.kernels[k].name);
    if (result != 0) {
      char err[256];
      return cn_fail(ctx, CN_ERR_COMPILE, "routine '%s': no kernel %s in its PTX: %s", name,
                     c->program.kernels[k].name, cn_cuda_error(gpu, result, err, sizeof err));
    }
  }
  return CN_OK;
}

cn_status cn_cuda_kernel_limits(cn_ctx *ctx, const cn_cuda_gpu *gpu, cn_kernel_limits *limits) {
  /* without a GPU, what every GPU NVRTC compiles for offers: 1024 threads, 48 KiB of static
   * shared memory a block */
  *limits = (cn_kernel_limits){gpu ? gpu->max_threads : 1024,
                               gpu ? gpu->shared_bytes : 48 << 10,
                               {0, 0, 0},
                               gpu ? gpu->multiprocessors : 0};
  return cn_kernel_tile_choose(ctx, CUDA_TILE, &limits->tile);
}

static cn_status cuda_compile(cn_ctx *ctx, const cn_ll_proc *proc, void **compiled,
                              const char **source) {
  const cn_nvrtc *rt;
  cn_status status = cn_nvrtc_get(ctx, &rt);
  if (status != CN_OK) return status;
  /* a GPU, when there is one, decides the architecture; none is no failure here */
  const cn_cuda_gpu *gpu = cn_cuda_gpu_find();
  if (gpu && (status = gpu_current(ctx, &gpu)) != CN_OK) return status;
  int arch = cn_nvrtc_arch(rt, gpu);
  if (arch == 0)
    return cn_fail(ctx, CN_ERR_UNSUPPORTED,
                   "routine '%s': NVRTC %d.%d (%s) compiles for no architecture the GPU %s "
                   "(compute capability %d.%d) runs",
                   proc->name, rt->major, rt->minor, rt->library, gpu->name, gpu->major,
                   gpu->minor);
  cuda_compiled *c = cn_calloc(ctx, 1, sizeof *c);
  if (!c) return ctx->status;
  c->n_syms = proc->n_free_syms;
  uint64_t start = cn_now_us();
  cn_kernel_limits limits;
  status = cn_cuda_kernel_limits(ctx, gpu, &limits);
  if (status == CN_OK)
    status = cn_kernel_program_make(ctx, proc, &cn_cgen_cuda, &limits, &c->program);
  ctx->stats[CN_STAT_US_CGEN] += cn_now_us() - start;
  start = cn_now_us();
  if (status == CN_OK)
    status = cn_cuda_ptx_of(ctx, proc->name, c->program.source, arch, &c->ptx, &c->log);
  if (status == CN_OK && gpu) status = cuda_load(ctx, gpu, rt, proc->name, c);
  ctx->stats[CN_STAT_US_COMPILE] += cn_now_us() - start;
  if (status != CN_OK) {
    cuda_release(c);
    return status;
  }
  *compiled = c;
  *source = c->program.source;
  return CN_OK;
}

/* ---- Running ---- */

static cn_status cuda_run(cn_ctx *ctx, void *compiled, void *const *buffers, const int64_t *syms) {
  cuda_compiled *c = compiled;
  const cn_cuda_gpu *gpu;
  cn_status status = gpu_current(ctx, &gpu);
  if (status != CN_OK) return status;
  CN_ASSERT(c->module); /* the GPU opens once per process: it was there at compile time too */
  int max_args = c->n_syms;
  for (int k = 0; k < c->program.n_kernels; k++)
    if (c->program.kernels[k].n_args + c->n_syms > max_args)
      max_args = c->program.kernels[k].n_args + c->n_syms;
  void **args = cn_calloc(ctx, (size_t)max_args + 1, sizeof(void *));
  cn_cu_ptr *ptrs = cn_calloc(ctx, (size_t)max_args + 1, sizeof(cn_cu_ptr));
  int64_t *values = cn_calloc(ctx, (size_t)c->n_syms + 1, sizeof(int64_t));
  if (!args || !ptrs || !values) status = ctx->status;
  for (int j = 0; status == CN_OK && j < c->n_syms; j++) values[j] = syms[j];
  for (int k = 0; status == CN_OK && k < c->program.n_kernels; k++) {
    const cn_kernel *kernel = &c->program.kernels[k];
    for (int a = 0; a < kernel->n_args; a++) {
      ptrs[a] = (cn_cu_ptr)(uintptr_t)buffers[kernel->params[a]];
      args[a] = &ptrs[a];
    }
    for (int j = 0; j < c->n_syms; j++) args[kernel->n_args + j] = &values[j];
    int64_t block = kernel->group_size > 0 ? kernel->group_size : CUDA_BLOCK;
    int64_t blocks = (kernel->work_items + block - 1) / block;
    if (blocks > 0x7FFFFFFF) {
      status = cn_fail(ctx, CN_ERR_UNSUPPORTED,
                       "CUDA: kernel %s has %lld work items, more than a grid of 2^31 - 1 blocks "
                       "of %d holds",
                       kernel->name, (long long)kernel->work_items, (int)block);
      break;
    }
    int result = gpu->launch(c->functions[k], (unsigned)blocks, 1, 1, (unsigned)block, 1, 1, 0,
                             NULL, args, NULL);
    if (result != 0) {
      char what[600];
      snprintf(what, sizeof what, "launch of kernel %s", kernel->name);
      status = cuda_failed(ctx, gpu, result, what);
    }
  }
  free(args);
  free(ptrs);
  free(values);
  return status;
}

const cn_kernel_program *cn_cuda_program(const void *compiled) {
  return &((const cuda_compiled *)compiled)->program;
}
const char *cn_cuda_ptx(const void *compiled) {
  return ((const cuda_compiled *)compiled)->ptx;
}
const char *cn_cuda_log(const void *compiled) {
  return ((const cuda_compiled *)compiled)->log;
}

const cn_backend cn_backend_cuda = {
    .name = "cuda",
    .caps = CN_BACKEND_DEVICE_MEMORY | CN_BACKEND_COMPILED,
    .open_device = cuda_open_device,
    .compile = cuda_compile,
    .run = cuda_run,
    .release = cuda_release,
};
