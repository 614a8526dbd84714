/* NVRTC and the CUDA driver API opened with dlopen (cuda_rt.h): the search for the libraries,
 * their functions looked up by the names of the ABI they export (the _v2 entry points where the
 * driver's header maps a name to one), the GPU opened once per process with its primary context,
 * and the compilation of a source to PTX.
 *
 * Invariants: each library is loaded once (pthread_once) into a static record that is never
 * changed afterwards, so readers need no lock; a failure is kept as its message, and every
 * request after it fails with that message. A CUDA call from a thread first makes the primary
 * context current there (the backend does it: ctx_set_current), since the driver's current
 * context is per thread. */
#define _DEFAULT_SOURCE
#include "backend/cuda_rt.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
  CU_SUCCESS = 0,
  CU_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
  CU_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8,
  CU_ATTRIBUTE_CLOCK_RATE = 13,
  CU_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  NVRTC_SUCCESS = 0,
};

/* Looks up `name` in handle into *slot (a function pointer, through POSIX's sanctioned object
 * pointer conversion); false with the missing name in why. */
static bool find_symbol(void *handle, const char *name, void *slot, char *why, size_t size) {
  void *fn = dlsym(handle, name);
  if (!fn) {
    snprintf(why, size, "no function %s", name);
    return false;
  }
  memcpy(slot, &fn, sizeof fn);
  return true;
}

/* ---- NVRTC ---- */

static cn_nvrtc nvrtc;
static char nvrtc_failure[1024];
static pthread_once_t nvrtc_once = PTHREAD_ONCE_INIT;

/* Opens the first NVRTC of the search order (cuda_rt.h) into *handle, its name in nvrtc.library;
 * false with what was tried in nvrtc_failure. */
static bool open_nvrtc(void **handle) {
  static const char *const names[] = {"libnvrtc.so.13",
                                      "libnvrtc.so.12",
                                      "libnvrtc.so",
                                      "/usr/local/cuda/lib64/libnvrtc.so.13",
                                      "/usr/local/cuda/lib64/libnvrtc.so.12",
                                      "/usr/local/cuda/lib64/libnvrtc.so",
                                      NULL};
  const char *env = getenv("CANNL_NVRTC");
  const char *only[] = {env, NULL};
  const char *const *list = env && *env ? only : names;
  const char *last = "not found";
  for (int k = 0; list[k]; k++) {
    *handle = dlopen(list[k], RTLD_NOW | RTLD_LOCAL);
    if (*handle) {
      snprintf(nvrtc.library, sizeof nvrtc.library, "%s", list[k]);
      return true;
    }
    const char *err = dlerror();
    last = err ? err : "not found";
  }
  if (env && *env)
    snprintf(nvrtc_failure, sizeof nvrtc_failure,
             "no NVRTC: $CANNL_NVRTC '%s' cannot be opened (%s)", env, last);
  else
    snprintf(nvrtc_failure, sizeof nvrtc_failure,
             "no NVRTC: none of libnvrtc.so.13, libnvrtc.so.12, libnvrtc.so in the loader's path "
             "or /usr/local/cuda/lib64 (set $CANNL_NVRTC to its path; last error: %s)",
             last);
  return false;
}

static void load_nvrtc(void) {
  void *h;
  if (!open_nvrtc(&h)) return;
  char why[256];
  int (*version)(int *, int *) = NULL;
  int (*n_archs)(int *) = NULL, (*archs)(int *) = NULL;
  bool ok = find_symbol(h, "nvrtcVersion", &version, why, sizeof why) &&
            find_symbol(h, "nvrtcCreateProgram", &nvrtc.create, why, sizeof why) &&
            find_symbol(h, "nvrtcDestroyProgram", &nvrtc.destroy, why, sizeof why) &&
            find_symbol(h, "nvrtcCompileProgram", &nvrtc.compile, why, sizeof why) &&
            find_symbol(h, "nvrtcGetProgramLogSize", &nvrtc.log_size, why, sizeof why) &&
            find_symbol(h, "nvrtcGetProgramLog", &nvrtc.log, why, sizeof why) &&
            find_symbol(h, "nvrtcGetPTXSize", &nvrtc.ptx_size, why, sizeof why) &&
            find_symbol(h, "nvrtcGetPTX", &nvrtc.ptx, why, sizeof why) &&
            find_symbol(h, "nvrtcGetErrorString", &nvrtc.error_string, why, sizeof why);
  if (ok && version(&nvrtc.major, &nvrtc.minor) != NVRTC_SUCCESS) {
    snprintf(why, sizeof why, "nvrtcVersion failed");
    ok = false;
  }
  if (!ok) {
    snprintf(nvrtc_failure, sizeof nvrtc_failure, "no NVRTC: %s: %s", nvrtc.library, why);
    dlclose(h);
    return;
  }
  /* Optional (NVRTC 11.2 on): which architectures it compiles for. */
  char unused[64];
  int n = 0;
  if (find_symbol(h, "nvrtcGetNumSupportedArchs", &n_archs, unused, sizeof unused) &&
      find_symbol(h, "nvrtcGetSupportedArchs", &archs, unused, sizeof unused) &&
      n_archs(&n) == NVRTC_SUCCESS && n > 0 && n <= (int)(sizeof nvrtc.archs / sizeof(int)) &&
      archs(nvrtc.archs) == NVRTC_SUCCESS)
    nvrtc.n_archs = n;
  for (int k = 0; k < nvrtc.n_archs; k++)
    if (nvrtc.archs[k] > nvrtc.newest_arch) nvrtc.newest_arch = nvrtc.archs[k];
  if (nvrtc.n_archs == 0) nvrtc.newest_arch = 90;
}

cn_status cn_nvrtc_get(cn_ctx *ctx, const cn_nvrtc **out) {
  pthread_once(&nvrtc_once, load_nvrtc);
  if (nvrtc_failure[0]) return cn_fail(ctx, CN_ERR_UNSUPPORTED, "%s", nvrtc_failure);
  *out = &nvrtc;
  return CN_OK;
}

static bool knows_arch(const cn_nvrtc *rt, int arch) {
  if (rt->n_archs == 0) return arch >= 52 && arch <= rt->newest_arch;
  for (int k = 0; k < rt->n_archs; k++)
    if (rt->archs[k] == arch) return true;
  return false;
}

int cn_nvrtc_arch(const cn_nvrtc *rt, const cn_cuda_gpu *gpu) {
  int want = gpu ? gpu->major * 10 + gpu->minor : 90;
  if (knows_arch(rt, want)) return want;
  int best = 0;
  for (int k = 0; k < rt->n_archs; k++)
    if (rt->archs[k] <= want && rt->archs[k] > best) best = rt->archs[k];
  if (rt->n_archs == 0 && want > rt->newest_arch) best = rt->newest_arch;
  return best || gpu ? best : rt->newest_arch;
}

void cn_nvrtc_options(int arch, char *text, size_t size) {
  snprintf(text, size, "--fmad=false -default-device --gpu-architecture=compute_%d", arch);
}

/* The program's log (malloc'd, "" when empty); NULL when out of memory. */
static char *program_log(const cn_nvrtc *rt, void *prog) {
  size_t size = 0;
  if (rt->log_size(prog, &size) != NVRTC_SUCCESS) size = 0;
  char *log = malloc(size + 1);
  if (!log) return NULL;
  log[0] = '\0';
  if (size > 0 && rt->log(prog, log) != NVRTC_SUCCESS) log[0] = '\0';
  log[size] = '\0';
  /* NVRTC ends even an empty log with a NUL, and a real one with "\n": trimmed for messages */
  size_t len = strlen(log);
  while (len > 0 && (log[len - 1] == '\n' || log[len - 1] == ' ')) log[--len] = '\0';
  return log;
}

cn_status cn_nvrtc_compile(cn_ctx *ctx, const cn_nvrtc *rt, int arch, const char *source,
                           const char *name, char **ptx, size_t *ptx_len, char **log) {
  char arch_option[48];
  snprintf(arch_option, sizeof arch_option, "--gpu-architecture=compute_%d", arch);
  const char *options[] = {"--fmad=false", "-default-device", arch_option};
  *ptx = NULL;
  *log = NULL;
  void *prog = NULL;
  int result = rt->create(&prog, source, name, 0, NULL, NULL);
  if (result != NVRTC_SUCCESS)
    return cn_fail(ctx, CN_ERR_COMPILE, "NVRTC cannot take %s: %s", name, rt->error_string(result));
  result = rt->compile(prog, 3, options);
  *log = program_log(rt, prog);
  cn_status status = CN_OK;
  if (!*log) {
    status = cn_fail(ctx, CN_ERR_NOMEM, "out of memory for NVRTC's log");
  } else if (result != NVRTC_SUCCESS) {
    rt->destroy(&prog);
    return cn_fail(ctx, CN_ERR_COMPILE, "%s", rt->error_string(result));
  } else {
    size_t size = 0;
    result = rt->ptx_size(prog, &size);
    *ptx = result == NVRTC_SUCCESS ? malloc(size + 1) : NULL;
    if (result != NVRTC_SUCCESS)
      status = cn_fail(ctx, CN_ERR_COMPILE, "NVRTC gives no PTX for %s: %s", name,
                       rt->error_string(result));
    else if (!*ptx)
      status = cn_fail(ctx, CN_ERR_NOMEM, "out of memory for PTX of %zu bytes", size);
    else if ((result = rt->ptx(prog, *ptx)) != NVRTC_SUCCESS)
      status = cn_fail(ctx, CN_ERR_COMPILE, "NVRTC gives no PTX for %s: %s", name,
                       rt->error_string(result));
    if (status == CN_OK) {
      (*ptx)[size] = '\0';
      *ptx_len = strlen(*ptx); /* the size counts the terminating NUL */
    }
  }
  rt->destroy(&prog);
  if (status != CN_OK) {
    free(*ptx);
    free(*log);
    *ptx = *log = NULL;
  }
  return status;
}

/* ---- The driver and the GPU ---- */

static cn_cuda_gpu gpu;
static char gpu_failure[1024];
static pthread_once_t gpu_once = PTHREAD_ONCE_INIT;

const char *cn_cuda_error(const cn_cuda_gpu *g, int result, char *buf, size_t size) {
  const char *text = NULL;
  if (!g || !g->error_string || g->error_string(result, &text) != CU_SUCCESS || !text)
    text = "unknown error";
  snprintf(buf, size, "CUDA error %d: %s", result, text);
  return buf;
}

static void load_gpu(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *err = dlerror();
    snprintf(gpu_failure, sizeof gpu_failure,
             "no CUDA driver (libcuda.so.1): %s (the NVIDIA driver is not installed here)",
             err ? err : "not found");
    return;
  }
  char why[256];
  int (*init)(unsigned) = NULL, (*driver_version)(int *) = NULL, (*count)(int *) = NULL;
  int (*device_get)(int *, int) = NULL, (*device_name)(char *, int, int) = NULL;
  int (*total_mem)(size_t *, int) = NULL, (*attribute)(int *, int, int) = NULL;
  int (*retain)(void **, int) = NULL;
  bool ok = find_symbol(h, "cuGetErrorString", &gpu.error_string, why, sizeof why) &&
            find_symbol(h, "cuInit", &init, why, sizeof why) &&
            find_symbol(h, "cuDriverGetVersion", &driver_version, why, sizeof why) &&
            find_symbol(h, "cuDeviceGetCount", &count, why, sizeof why) &&
            find_symbol(h, "cuDeviceGet", &device_get, why, sizeof why) &&
            find_symbol(h, "cuDeviceGetName", &device_name, why, sizeof why) &&
            find_symbol(h, "cuDeviceTotalMem_v2", &total_mem, why, sizeof why) &&
            find_symbol(h, "cuDeviceGetAttribute", &attribute, why, sizeof why) &&
            find_symbol(h, "cuDevicePrimaryCtxRetain", &retain, why, sizeof why) &&
            find_symbol(h, "cuCtxSetCurrent", &gpu.ctx_set_current, why, sizeof why) &&
            find_symbol(h, "cuCtxSynchronize", &gpu.ctx_synchronize, why, sizeof why) &&
            find_symbol(h, "cuMemAlloc_v2", &gpu.mem_alloc, why, sizeof why) &&
            find_symbol(h, "cuMemFree_v2", &gpu.mem_free, why, sizeof why) &&
            find_symbol(h, "cuMemcpyHtoD_v2", &gpu.htod, why, sizeof why) &&
            find_symbol(h, "cuMemcpyDtoH_v2", &gpu.dtoh, why, sizeof why) &&
            find_symbol(h, "cuMemsetD8Async", &gpu.memset_async, why, sizeof why) &&
            find_symbol(h, "cuModuleLoadData", &gpu.module_load_data, why, sizeof why) &&
            find_symbol(h, "cuModuleUnload", &gpu.module_unload, why, sizeof why) &&
            find_symbol(h, "cuModuleGetFunction", &gpu.module_get_function, why, sizeof why) &&
            find_symbol(h, "cuLaunchKernel", &gpu.launch, why, sizeof why);
  if (!ok) {
    snprintf(gpu_failure, sizeof gpu_failure, "no CUDA driver (libcuda.so.1): %s", why);
    return;
  }
  char err[256];
  int n = 0, result = init(0);
  if (result == CU_SUCCESS) result = count(&n);
  if (result != CU_SUCCESS) {
    snprintf(gpu_failure, sizeof gpu_failure, "no CUDA device: cuInit failed (%s)",
             cn_cuda_error(&gpu, result, err, sizeof err));
    return;
  }
  const char *env = getenv("CANNL_CUDA_DEVICE");
  char *end = NULL;
  long ordinal = env && *env ? strtol(env, &end, 10) : 0;
  if (env && *env && (*end || ordinal < 0 || ordinal >= n)) {
    snprintf(gpu_failure, sizeof gpu_failure,
             "no CUDA device: $CANNL_CUDA_DEVICE '%s' is not a device ordinal below %d", env, n);
    return;
  }
  if (n == 0) {
    snprintf(gpu_failure, sizeof gpu_failure, "no CUDA device: the driver sees no GPU");
    return;
  }
  driver_version(&gpu.driver_version);
  result = device_get(&gpu.device, (int)ordinal);
  if (result == CU_SUCCESS) result = device_name(gpu.name, (int)sizeof gpu.name, gpu.device);
  if (result == CU_SUCCESS) result = total_mem(&gpu.memory, gpu.device);
  if (result == CU_SUCCESS)
    result = attribute(&gpu.major, CU_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, gpu.device);
  if (result == CU_SUCCESS)
    result = attribute(&gpu.minor, CU_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, gpu.device);
  if (result == CU_SUCCESS)
    result = attribute(&gpu.multiprocessors, CU_ATTRIBUTE_MULTIPROCESSOR_COUNT, gpu.device);
  if (result == CU_SUCCESS) result = attribute(&gpu.clock_khz, CU_ATTRIBUTE_CLOCK_RATE, gpu.device);
  if (result == CU_SUCCESS)
    result = attribute(&gpu.max_threads, CU_ATTRIBUTE_MAX_THREADS_PER_BLOCK, gpu.device);
  if (result == CU_SUCCESS)
    result = attribute(&gpu.shared_bytes, CU_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, gpu.device);
  if (result == CU_SUCCESS) result = retain(&gpu.context, gpu.device);
  if (result != CU_SUCCESS)
    snprintf(gpu_failure, sizeof gpu_failure, "no CUDA device: device %ld cannot be opened (%s)",
             ordinal, cn_cuda_error(&gpu, result, err, sizeof err));
}

const cn_cuda_gpu *cn_cuda_gpu_find(void) {
  pthread_once(&gpu_once, load_gpu);
  return gpu_failure[0] ? NULL : &gpu;
}

cn_status cn_cuda_gpu_get(cn_ctx *ctx, const cn_cuda_gpu **out) {
  pthread_once(&gpu_once, load_gpu);
  if (gpu_failure[0]) return cn_fail(ctx, CN_ERR_UNSUPPORTED, "%s", gpu_failure);
  *out = &gpu;
  return CN_OK;
}
