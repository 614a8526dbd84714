/* The OpenCL backend (cn_backend_opencl, registered as "opencl"): a procedure becomes a program
 * of kernels (kernels.c) in OpenCL C (cgen_opencl.c), built for the context's OpenCL device and
 * run on buffers in the device's memory, the kernels one after the other on one in-order queue.
 *
 * The OpenCL library is opened with dlopen (libOpenCL.so.1, the ICD loader), once per process
 * and kept loaded (an ICD's drivers may register exit handlers: unloading them is unsafe), so
 * cannl builds and runs without it; a missing library, no platform or no device is an error of
 * open_device, with what to install, never a crash. The device: $CANNL_OPENCL_DEVICE
 * ("<platform>:<device>", indices as `clinfo -l` lists them), else the first GPU of the first
 * platform that has one, else the first device. It is opened once per cn_ctx, on first use (a
 * context, one in-order queue), and released with the context: the state is reference counted
 * by the context's cleanup, each device buffer and each compiled program, so buffers and
 * programs a routine releases after the context's cleanup ran stay valid until then.
 *
 * Compile: the program's source built with -cl-fp32-correctly-rounded-divide-sqrt (with the
 * source's FP_CONTRACT OFF: + - * / sqrt and conversions give the C backend's bits) and the
 * options of $CANNL_OPENCL_FLAGS, or, when
 * the cache directory holds its binary, the binary (clCreateProgramWithBinary). Binaries are
 * records of the C backend's cache directory (backend.h cn_cc_record_load: key text compared byte
 * for byte, checksum, atomic rename), kind "opencl", keyed by the platform, device, device and
 * driver versions, the build options and the source; a binary the driver refuses is reported as
 * a warning and replaced by a build from source. A build failure is CN_ERR_COMPILE naming the file
 * the source was written to and quoting the build log. Run: every kernel's arguments set per the
 * kernel ABI (kernels.h: buffers, then the free symbols as 64-bit integers), enqueued with a
 * global size of its work items rounded up to the work-group size (a tiled kernel's own group
 * size, chosen by the kernel view from the device's work-group and local memory limits). A run
 * returns once its kernels are queued (the device's synchronize, clFinish, waits: the runtime
 * calls it when the host reads a node a run wrote, resident.c), as clears (clEnqueueFillBuffer)
 * are; uploads block (the host memory is free to change when they return), downloads are waited
 * for by the synchronize that follows them. */
#define CL_TARGET_OPENCL_VERSION 120
#include "backend/kernels.h"

#include <CL/cl.h>
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The options every program is built with; $CANNL_OPENCL_FLAGS adds to them (part of the cache
 * key: a flag that relaxes the math gives other bits, and another binary). */
#define BUILD_OPTIONS "-cl-fp32-correctly-rounded-divide-sqrt"
/* The work-group size a kernel is launched with (smaller when the device's limit is). */
#define GROUP_SIZE 64

/* ---- The library ---- */

#define CL_FUNCTIONS(X)                                                                            \
  X(clGetPlatformIDs, cl_int, (cl_uint, cl_platform_id *, cl_uint *))                              \
  X(clGetPlatformInfo, cl_int, (cl_platform_id, cl_platform_info, size_t, void *, size_t *))       \
  X(clGetDeviceIDs, cl_int, (cl_platform_id, cl_device_type, cl_uint, cl_device_id *, cl_uint *))  \
  X(clGetDeviceInfo, cl_int, (cl_device_id, cl_device_info, size_t, void *, size_t *))             \
  X(clCreateContext, cl_context,                                                                   \
    (const cl_context_properties *, cl_uint, const cl_device_id *,                                 \
     void(CL_CALLBACK *)(const char *, const void *, size_t, void *), void *, cl_int *))           \
  X(clReleaseContext, cl_int, (cl_context))                                                        \
  X(clCreateCommandQueue, cl_command_queue,                                                        \
    (cl_context, cl_device_id, cl_command_queue_properties, cl_int *))                             \
  X(clReleaseCommandQueue, cl_int, (cl_command_queue))                                             \
  X(clCreateBuffer, cl_mem, (cl_context, cl_mem_flags, size_t, void *, cl_int *))                  \
  X(clReleaseMemObject, cl_int, (cl_mem))                                                          \
  X(clEnqueueWriteBuffer, cl_int,                                                                  \
    (cl_command_queue, cl_mem, cl_bool, size_t, size_t, const void *, cl_uint, const cl_event *,   \
     cl_event *))                                                                                  \
  X(clEnqueueReadBuffer, cl_int,                                                                   \
    (cl_command_queue, cl_mem, cl_bool, size_t, size_t, void *, cl_uint, const cl_event *,         \
     cl_event *))                                                                                  \
  X(clFinish, cl_int, (cl_command_queue))                                                          \
  X(clCreateProgramWithSource, cl_program,                                                         \
    (cl_context, cl_uint, const char **, const size_t *, cl_int *))                                \
  X(clCreateProgramWithBinary, cl_program,                                                         \
    (cl_context, cl_uint, const cl_device_id *, const size_t *, const unsigned char **, cl_int *,  \
     cl_int *))                                                                                    \
  X(clBuildProgram, cl_int,                                                                        \
    (cl_program, cl_uint, const cl_device_id *, const char *,                                      \
     void(CL_CALLBACK *)(cl_program, void *), void *))                                             \
  X(clGetProgramBuildInfo, cl_int,                                                                 \
    (cl_program, cl_device_id, cl_program_build_info, size_t, void *, size_t *))                   \
  X(clGetProgramInfo, cl_int, (cl_program, cl_program_info, size_t, void *, size_t *))             \
  X(clReleaseProgram, cl_int, (cl_program))                                                        \
  X(clCreateKernel, cl_kernel, (cl_program, const char *, cl_int *))                               \
  X(clGetKernelWorkGroupInfo, cl_int,                                                              \
    (cl_kernel, cl_device_id, cl_kernel_work_group_info, size_t, void *, size_t *))                \
  X(clReleaseKernel, cl_int, (cl_kernel))                                                          \
  X(clSetKernelArg, cl_int, (cl_kernel, cl_uint, size_t, const void *))                            \
  X(clEnqueueNDRangeKernel, cl_int,                                                                \
    (cl_command_queue, cl_kernel, cl_uint, const size_t *, const size_t *, const size_t *,         \
     cl_uint, const cl_event *, cl_event *))                                                       \
  X(clEnqueueFillBuffer, cl_int,                                                                   \
    (cl_command_queue, cl_mem, const void *, size_t, size_t, size_t, cl_uint, const cl_event *,    \
     cl_event *))

static struct {
#define CL_MEMBER(name, ret, params) ret(CL_API_CALL *name) params;
  CL_FUNCTIONS(CL_MEMBER)
#undef CL_MEMBER
} cl;
static char cl_missing[512]; /* why the library cannot be used ("": it can) */
static pthread_once_t cl_once = PTHREAD_ONCE_INIT;

static void cl_load(void) {
  void *lib = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) lib = dlopen("libOpenCL.so", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *why = dlerror();
    snprintf(cl_missing, sizeof cl_missing,
             "cannot load the OpenCL library libOpenCL.so.1 (%s): install an ICD loader and a "
             "driver, e.g. ocl-icd-libopencl1 and pocl-opencl-icd",
             why ? why : "not found");
    return;
  }
  /* dlsym's void * to a function pointer goes through memcpy: ISO C has no such conversion */
#define CL_RESOLVE(name, ret, params)                                                              \
  {                                                                                                \
    void *sym = dlsym(lib, #name);                                                                 \
    if (!sym && !cl_missing[0])                                                                    \
      snprintf(cl_missing, sizeof cl_missing, "the OpenCL library has no %s", #name);              \
    memcpy(&cl.name, &sym, sizeof sym);                                                            \
  }
  CL_FUNCTIONS(CL_RESOLVE)
#undef CL_RESOLVE
}

/* The name of an OpenCL error code, for messages. */
static const char *cl_error(cl_int code) {
  switch (code) {
  case CL_DEVICE_NOT_FOUND: return "CL_DEVICE_NOT_FOUND";
  case CL_DEVICE_NOT_AVAILABLE: return "CL_DEVICE_NOT_AVAILABLE";
  case CL_COMPILER_NOT_AVAILABLE: return "CL_COMPILER_NOT_AVAILABLE";
  case CL_MEM_OBJECT_ALLOCATION_FAILURE: return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
  case CL_OUT_OF_RESOURCES: return "CL_OUT_OF_RESOURCES";
  case CL_OUT_OF_HOST_MEMORY: return "CL_OUT_OF_HOST_MEMORY";
  case CL_BUILD_PROGRAM_FAILURE: return "CL_BUILD_PROGRAM_FAILURE";
  case CL_INVALID_VALUE: return "CL_INVALID_VALUE";
  case CL_INVALID_PLATFORM: return "CL_INVALID_PLATFORM";
  case CL_INVALID_DEVICE: return "CL_INVALID_DEVICE";
  case CL_INVALID_BINARY: return "CL_INVALID_BINARY";
  case CL_INVALID_BUFFER_SIZE: return "CL_INVALID_BUFFER_SIZE";
  case CL_INVALID_KERNEL_NAME: return "CL_INVALID_KERNEL_NAME";
  case CL_INVALID_KERNEL_ARGS: return "CL_INVALID_KERNEL_ARGS";
  case CL_INVALID_ARG_SIZE: return "CL_INVALID_ARG_SIZE";
  case CL_INVALID_WORK_GROUP_SIZE: return "CL_INVALID_WORK_GROUP_SIZE";
  case CL_INVALID_GLOBAL_WORK_SIZE: return "CL_INVALID_GLOBAL_WORK_SIZE";
  case -1001: return "CL_PLATFORM_NOT_FOUND_KHR (no OpenCL driver installed)";
  default: return "an OpenCL error";
  }
}

/* ---- The device of a context ---- */

typedef struct {
  cn_device device; /* device.state points here */
  char name[1200];  /* what `cannl devices` shows */
  char key[1400];   /* the platform, device and versions: part of a binary's cache key */
  cl_device_id id;
  cl_context context;
  cl_command_queue queue;
  size_t max_group; /* CL_DEVICE_MAX_WORK_GROUP_SIZE */
  /* what a tiled kernel's work-group may have (kernels.h): the smaller of max_group and the first
   * work-item size (our grids are one-dimensional), and CL_DEVICE_LOCAL_MEM_SIZE */
  cn_kernel_limits limits;
  int refs; /* the context's cleanup, each buffer, each compiled program */
  /* the last kernel queued (runs are not waited for: a failure shows at the next synchronize,
   * which names it) */
  char last[300];
} ocl_state;

static void state_unref(ocl_state *st) {
  if (--st->refs > 0) return;
  if (st->queue) cl.clReleaseCommandQueue(st->queue);
  if (st->context) cl.clReleaseContext(st->context);
  free(st);
}

/* The context's cleanup: its reference goes (what a routine still holds keeps the rest). */
static void state_cleanup(void *arg) {
  state_unref(arg);
}

static cn_status ocl_allocate(cn_ctx *ctx, const cn_device *dev, size_t bytes, void **buffer) {
  ocl_state *st = dev->state;
  cl_int err;
  cl_mem mem = cl.clCreateBuffer(st->context, CL_MEM_READ_WRITE, bytes ? bytes : 1, NULL, &err);
  if (!mem)
    return cn_fail(ctx, CN_ERR_NOMEM, "opencl: cannot allocate %zu bytes on %s: %s (%d)", bytes,
                   st->name, cl_error(err), (int)err);
  st->refs++;
  *buffer = mem;
  return CN_OK;
}

/* Blocking: the host memory may be written or freed as soon as this returns (a node's host buffer
 * can be freed before its copies when the context is destroyed); the queue's earlier runs finish
 * first (an in-order queue), the later ones are not waited for. */
static cn_status ocl_upload(cn_ctx *ctx, const cn_device *dev, void *buffer, const void *host,
                            size_t bytes) {
  ocl_state *st = dev->state;
  cl_int err =
      bytes ? cl.clEnqueueWriteBuffer(st->queue, buffer, CL_TRUE, 0, bytes, host, 0, NULL, NULL)
            : CL_SUCCESS;
  if (err != CL_SUCCESS)
    return cn_fail(ctx, CN_ERR_IO, "opencl: cannot copy %zu bytes to %s: %s (%d)", bytes, st->name,
                   cl_error(err), (int)err);
  return CN_OK;
}

static cn_status ocl_download(cn_ctx *ctx, const cn_device *dev, void *host, const void *buffer,
                              size_t bytes) {
  ocl_state *st = dev->state;
  cl_int err = bytes ? cl.clEnqueueReadBuffer(st->queue, (cl_mem)(uintptr_t)buffer, CL_FALSE, 0,
                                              bytes, host, 0, NULL, NULL)
                     : CL_SUCCESS;
  if (err != CL_SUCCESS)
    return cn_fail(ctx, CN_ERR_IO, "opencl: cannot copy %zu bytes from %s: %s (%d)", bytes,
                   st->name, cl_error(err), (int)err);
  return CN_OK;
}

static cn_status ocl_synchronize(cn_ctx *ctx, const cn_device *dev) {
  ocl_state *st = dev->state;
  cl_int err = cl.clFinish(st->queue);
  if (err != CL_SUCCESS)
    return cn_fail(ctx, CN_ERR_IO, "opencl: %s failed (the last kernel queued: %s): %s (%d)",
                   st->name, st->last[0] ? st->last : "none", cl_error(err), (int)err);
  return CN_OK;
}

/* Zeros on the device (a local param's scratch), queued. */
static cn_status ocl_clear(cn_ctx *ctx, const cn_device *dev, void *buffer, size_t bytes) {
  ocl_state *st = dev->state;
  const unsigned char zero = 0;
  cl_int err = bytes ? cl.clEnqueueFillBuffer(st->queue, buffer, &zero, 1, 0, bytes, 0, NULL, NULL)
                     : CL_SUCCESS;
  if (err != CL_SUCCESS)
    return cn_fail(ctx, CN_ERR_IO, "opencl: cannot clear %zu bytes on %s: %s (%d)", bytes, st->name,
                   cl_error(err), (int)err);
  return CN_OK;
}

static void ocl_free(const cn_device *dev, void *buffer) {
  ocl_state *st = dev->state;
  cl.clReleaseMemObject(buffer); /* released once the queued work using it is done */
  state_unref(st);
}

/* A text parameter of a platform or device ("" when the driver does not say). */
static void platform_text(cl_platform_id p, cl_platform_info what, char *out, size_t cap) {
  size_t got = 0;
  if (cl.clGetPlatformInfo(p, what, cap - 1, out, &got) != CL_SUCCESS) got = 0;
  out[got < cap ? got : cap - 1] = '\0';
}
static void device_text(cl_device_id d, cl_device_info what, char *out, size_t cap) {
  size_t got = 0;
  if (cl.clGetDeviceInfo(d, what, cap - 1, out, &got) != CL_SUCCESS) got = 0;
  out[got < cap ? got : cap - 1] = '\0';
}

/* Parses "<platform>:<device>" (two naturals); false when malformed. */
static bool parse_choice(const char *text, cl_uint *platform, cl_uint *device) {
  char *end;
  errno = 0;
  unsigned long p = strtoul(text, &end, 10);
  if (end == text || *end != ':' || errno || p > 1000) return false;
  const char *d_text = end + 1;
  unsigned long d = strtoul(d_text, &end, 10);
  if (end == d_text || *end || errno || d > 1000 || *text == '-' || *d_text == '-') return false;
  *platform = (cl_uint)p;
  *device = (cl_uint)d;
  return true;
}

#define MAX_PLATFORMS 16
#define MAX_DEVICES   64

/* The device to open: $CANNL_OPENCL_DEVICE's, else the first GPU, else the first device. */
static cn_status choose_device(cn_ctx *ctx, cl_platform_id *platform, cl_device_id *device) {
  cl_platform_id platforms[MAX_PLATFORMS];
  cl_uint n_platforms = 0;
  cl_int err = cl.clGetPlatformIDs(MAX_PLATFORMS, platforms, &n_platforms);
  if (err != CL_SUCCESS || n_platforms == 0)
    return cn_fail(ctx, CN_ERR_UNSUPPORTED,
                   "opencl: no OpenCL platform found (%s): install a driver, e.g. pocl-opencl-icd",
                   err != CL_SUCCESS ? cl_error(err) : "none listed");
  if (n_platforms > MAX_PLATFORMS) n_platforms = MAX_PLATFORMS;
  const char *choice = getenv("CANNL_OPENCL_DEVICE");
  if (choice && *choice) {
    cl_uint p, d, n = 0;
    cl_device_id devices[MAX_DEVICES];
    if (!parse_choice(choice, &p, &d))
      return cn_fail(ctx, CN_ERR_INVALID,
                     "opencl: CANNL_OPENCL_DEVICE='%s' is not <platform>:<device> (e.g. 0:0)",
                     choice);
    if (p >= n_platforms)
      return cn_fail(ctx, CN_ERR_INVALID,
                     "opencl: CANNL_OPENCL_DEVICE='%s': no platform %u (there are %u)", choice, p,
                     n_platforms);
    if (cl.clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, MAX_DEVICES, devices, &n) !=
            CL_SUCCESS ||
        d >= n)
      return cn_fail(ctx, CN_ERR_INVALID,
                     "opencl: CANNL_OPENCL_DEVICE='%s': platform %u has no device %u (it has %u)",
                     choice, p, d, n);
    *platform = platforms[p];
    *device = devices[d];
    return CN_OK;
  }
  static const cl_device_type types[2] = {CL_DEVICE_TYPE_GPU, CL_DEVICE_TYPE_ALL};
  for (int t = 0; t < 2; t++)
    for (cl_uint p = 0; p < n_platforms; p++) {
      cl_uint n = 0;
      if (cl.clGetDeviceIDs(platforms[p], types[t], 1, device, &n) == CL_SUCCESS && n > 0) {
        *platform = platforms[p];
        return CN_OK;
      }
    }
  return cn_fail(ctx, CN_ERR_UNSUPPORTED, "opencl: the %u OpenCL platform%s list%s no device",
                 n_platforms, n_platforms == 1 ? "" : "s", n_platforms == 1 ? "s" : "");
}

/* Names the device and its cache key. */
static void describe(ocl_state *st, cl_platform_id platform) {
  char pname[256], pversion[256], dname[256], dversion[256], driver[256];
  platform_text(platform, CL_PLATFORM_NAME, pname, sizeof pname);
  platform_text(platform, CL_PLATFORM_VERSION, pversion, sizeof pversion);
  device_text(st->id, CL_DEVICE_NAME, dname, sizeof dname);
  device_text(st->id, CL_DEVICE_VERSION, dversion, sizeof dversion);
  device_text(st->id, CL_DRIVER_VERSION, driver, sizeof driver);
  cl_ulong memory = 0;
  cl_uint units = 0;
  cl.clGetDeviceInfo(st->id, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof memory, &memory, NULL);
  cl.clGetDeviceInfo(st->id, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL);
  if (cl.clGetDeviceInfo(st->id, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof st->max_group,
                         &st->max_group, NULL) != CL_SUCCESS ||
      st->max_group == 0)
    st->max_group = 1;
  size_t sizes[3] = {0};
  cl_ulong local = 0;
  st->limits.max_group = (int64_t)st->max_group;
  st->limits.min_groups = (int64_t)units;
  if (cl.clGetDeviceInfo(st->id, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof sizes, sizes, NULL) ==
          CL_SUCCESS &&
      sizes[0] > 0 && sizes[0] < st->max_group)
    st->limits.max_group = (int64_t)sizes[0];
  if (cl.clGetDeviceInfo(st->id, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local, &local, NULL) ==
      CL_SUCCESS)
    st->limits.local_bytes = (int64_t)local;
  snprintf(st->name, sizeof st->name,
           "%s (platform %s, %s, driver %s), %u compute units, %.1f GiB of global memory", dname,
           pname, dversion, driver, units, (double)memory / (1 << 30));
  snprintf(st->key, sizeof st->key,
           "platform %s\nplatform version %s\ndevice %s\n"
           "device version %s\ndriver %s",
           pname, pversion, dname, dversion, driver);
}

/* The context's open device (found among its cleanups), or NULL. */
static ocl_state *state_of(cn_ctx *ctx) {
  for (cn_cleanup *c = ctx->cleanups; c; c = c->next)
    if (c->fn == state_cleanup) return c->arg;
  return NULL;
}

static cn_status open_state(cn_ctx *ctx, ocl_state **out) {
  ocl_state *st = state_of(ctx);
  if (st) {
    *out = st;
    return CN_OK;
  }
  pthread_once(&cl_once, cl_load);
  if (cl_missing[0]) return cn_fail(ctx, CN_ERR_UNSUPPORTED, "opencl: %s", cl_missing);
  cl_platform_id platform;
  cl_device_id device;
  cn_status status = choose_device(ctx, &platform, &device);
  if (status != CN_OK) return status;
  st = calloc(1, sizeof *st);
  if (!st) return cn_fail(ctx, CN_ERR_NOMEM, "opencl: out of memory");
  st->refs = 1;
  st->id = device;
  describe(st, platform);
  cl_int err;
  cl_context_properties props[3] = {CL_CONTEXT_PLATFORM, (cl_context_properties)platform, 0};
  st->context = cl.clCreateContext(props, 1, &device, NULL, NULL, &err);
  if (st->context) st->queue = cl.clCreateCommandQueue(st->context, device, 0, &err);
  if (!st->queue) {
    state_unref(st);
    return cn_fail(ctx, CN_ERR_UNSUPPORTED, "opencl: cannot open %s: %s (%d)", st->name,
                   cl_error(err), (int)err);
  }
  st->device = (cn_device){.name = st->name,
                           .state = st,
                           .allocate = ocl_allocate,
                           .upload = ocl_upload,
                           .download = ocl_download,
                           .synchronize = ocl_synchronize,
                           .free = ocl_free,
                           .clear = ocl_clear};
  if (!cn_ctx_add_cleanup(ctx, state_cleanup, st)) {
    state_unref(st);
    return ctx->status;
  }
  *out = st;
  return CN_OK;
}

static cn_status ocl_open_device(cn_ctx *ctx, const cn_device **device) {
  ocl_state *st = NULL;
  cn_status status = open_state(ctx, &st);
  if (status == CN_OK) *device = &st->device;
  return status;
}

/* ---- Programs ---- */

static atomic_int builds; /* programs built from source in this process (cn_opencl_builds) */

int cn_opencl_builds(void) {
  return atomic_load(&builds);
}

typedef struct {
  ocl_state *st;
  cl_program program;
  cl_kernel *kernels;
  size_t *groups; /* per kernel: the work-group size it is launched with */
  int n_syms;     /* the procedure's free symbols: every kernel's last arguments */
  cn_kernel_program source;
} ocl_compiled;

static void ocl_release(void *compiled) {
  ocl_compiled *c = compiled;
  if (!c) return;
  for (int k = 0; c->kernels && k < c->source.n_kernels; k++)
    if (c->kernels[k]) cl.clReleaseKernel(c->kernels[k]);
  if (c->program) cl.clReleaseProgram(c->program);
  if (c->st) state_unref(c->st);
  cn_kernel_program_free(&c->source);
  free(c->kernels);
  free(c->groups);
  free(c);
}

/* Writes the program's source where a user can read it after a failed build: the cache directory
 * when it is one, else the temporary directory; the path (malloc'd), or NULL. */
static char *keep_source(cn_ctx *ctx, const char *name, const char *source) {
  const char *dir = cn_cc_option(ctx, "cache_dir");
  const char *tmp = getenv("TMPDIR");
  char path[4096];
  for (int attempt = 0; attempt < 2; attempt++) {
    const char *base = attempt == 0 && dir && strcmp(dir, "off") != 0 ? dir
                       : tmp && *tmp                                  ? tmp
                                                                      : "/tmp";
    snprintf(path, sizeof path, "%s/%s-opencl-%ld.cl", base, name, (long)getpid());
    FILE *f = fopen(path, "w");
    if (!f) continue;
    bool ok = fputs(source, f) >= 0;
    if (fclose(f) == 0 && ok) return strdup(path);
  }
  return NULL;
}

/* The build log of the program (malloc'd, "" when none). */
static char *build_log(const ocl_state *st, cl_program program) {
  size_t size = 0;
  cl.clGetProgramBuildInfo(program, st->id, CL_PROGRAM_BUILD_LOG, 0, NULL, &size);
  char *log = malloc(size + 1);
  if (!log) return NULL;
  if (size == 0 || cl.clGetProgramBuildInfo(program, st->id, CL_PROGRAM_BUILD_LOG, size, log,
                                            NULL) != CL_SUCCESS)
    size = 0;
  log[size] = '\0';
  return log;
}

/* One program being compiled: its state, the cache key and build options (heap), and, for a
 * build from source, the OpenCL status of clCreateProgramWithSource + clBuildProgram. */
typedef struct {
  const char *name; /* the procedure's */
  ocl_compiled *c;
  char *key, *options;
  bool found; /* its binary came from the cache */
  cl_int err;
} ocl_job;

static void job_free(ocl_job *job) {
  free(job->key);
  free(job->options);
  job->key = job->options = NULL;
}

/* Creates and builds the job's program from its source. Touches no context (it runs on a thread
 * of compile_many): the caller reports the outcome (build_done). */
static void build_program(ocl_job *job) {
  ocl_state *st = job->c->st;
  const char *text = job->c->source.source;
  job->c->program = cl.clCreateProgramWithSource(st->context, 1, &text, NULL, &job->err);
  if (!job->c->program) return;
  atomic_fetch_add(&builds, 1);
  job->err = cl.clBuildProgram(job->c->program, 1, &st->id, job->options, NULL, NULL);
}

/* The outcome of build_program: the failure with the source's path and the build log, or the
 * binary stored in the cache (best effort). */
static cn_status build_done(cn_ctx *ctx, ocl_job *job) {
  ocl_compiled *c = job->c;
  ocl_state *st = c->st;
  if (!c->program)
    return cn_fail(ctx, CN_ERR_COMPILE, "opencl: routine '%s': cannot create its program: %s (%d)",
                   job->name, cl_error(job->err), (int)job->err);
  if (job->err != CL_SUCCESS) {
    char *log = build_log(st, c->program), *path = keep_source(ctx, job->name, c->source.source);
    cn_status status =
        cn_fail(ctx, CN_ERR_COMPILE, "opencl: routine '%s' does not build on %s (%s): %s\n%s",
                job->name, st->name, cl_error(job->err),
                path ? path : "(its source could not be kept)", log ? log : "");
    free(log);
    free(path);
    return status;
  }
  size_t size = 0;
  unsigned char *binary = NULL;
  if (cl.clGetProgramInfo(c->program, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) ==
          CL_SUCCESS &&
      size > 0 && (binary = malloc(size)) &&
      cl.clGetProgramInfo(c->program, CL_PROGRAM_BINARIES, sizeof binary, &binary, NULL) ==
          CL_SUCCESS &&
      cn_cc_record_store(ctx, "opencl", "bin", job->key, (const char *)binary, size) != CN_OK)
    cn_ctx_clear_error(ctx); /* a cache that cannot be written only costs the next build */
  free(binary);
  return CN_OK;
}

/* Builds from the cached binary, when there is one the driver takes: job->found. */
static cn_status build_cached(cn_ctx *ctx, ocl_job *job) {
  ocl_compiled *c = job->c;
  ocl_state *st = c->st;
  char *binary;
  size_t size;
  cn_status status = cn_cc_record_load(ctx, "opencl", "bin", job->key, &binary, &size, &job->found);
  if (status != CN_OK || !job->found) return status;
  cl_int err, binary_status = CL_SUCCESS;
  const unsigned char *bytes = (const unsigned char *)binary;
  c->program =
      cl.clCreateProgramWithBinary(st->context, 1, &st->id, &size, &bytes, &binary_status, &err);
  if (c->program && err == CL_SUCCESS && binary_status == CL_SUCCESS)
    err = cl.clBuildProgram(c->program, 1, &st->id, job->options, NULL, NULL);
  free(binary);
  if (c->program && err == CL_SUCCESS && binary_status == CL_SUCCESS) return CN_OK;
  cn_cc_warn(ctx, NULL, "opencl: routine '%s': %s refuses its cached binary (%s): built again",
             job->name, st->name, cl_error(err != CL_SUCCESS ? err : binary_status));
  if (c->program) cl.clReleaseProgram(c->program);
  c->program = NULL;
  job->found = false;
  return CN_OK;
}

/* The first half of a compile: the state, the program's text, its key and options, and its
 * binary from the cache when there is one. On failure nothing is left (job->c NULL). */
static cn_status compile_begin(cn_ctx *ctx, const cn_ll_proc *proc, ocl_job *job) {
  *job = (ocl_job){.name = proc->name};
  ocl_state *st = NULL;
  cn_status status = open_state(ctx, &st);
  if (status != CN_OK) return status;
  ocl_compiled *c = calloc(1, sizeof *c);
  if (!c) return cn_fail(ctx, CN_ERR_NOMEM, "opencl: out of memory");
  c->st = st;
  c->n_syms = proc->n_free_syms;
  st->refs++;
  job->c = c;
  cn_kernel_limits limits = st->limits; /* the default tile, or the option's */
  status = cn_kernel_tile_choose(ctx, CN_KERNEL_TILE_DEFAULT, &limits.tile);
  if (status == CN_OK)
    status = cn_kernel_program_make(ctx, proc, &cn_cgen_opencl, &limits, &c->source);
  cn_sbuf key = {0}, options = {0};
  const char *extra = getenv("CANNL_OPENCL_FLAGS");
  cn_sbuf_printf(&options, "%s%s%s", BUILD_OPTIONS, extra && *extra ? " " : "", extra ? extra : "");
  if (status == CN_OK) {
    cn_sbuf_printf(&key, "cannl opencl program 1\n%s\noptions %s\n%s", st->key,
                   cn_cgen_text(&options), c->source.source);
    if (key.failed || options.failed) status = cn_fail(ctx, CN_ERR_NOMEM, "opencl: out of memory");
  }
  job->key = key.data;
  job->options = options.data;
  if (status == CN_OK) status = build_cached(ctx, job);
  if (status != CN_OK) {
    job_free(job);
    ocl_release(c);
    job->c = NULL;
  }
  return status;
}

/* The second half, after the program is built: its kernels and their work-group sizes. On
 * failure the state is released. */
static cn_status compile_end(cn_ctx *ctx, ocl_job *job) {
  ocl_compiled *c = job->c;
  ocl_state *st = c->st;
  int n = c->source.n_kernels;
  cn_status status = CN_OK;
  c->kernels = calloc((size_t)n + 1, sizeof *c->kernels);
  c->groups = calloc((size_t)n + 1, sizeof *c->groups);
  if (!c->kernels || !c->groups) status = cn_fail(ctx, CN_ERR_NOMEM, "opencl: out of memory");
  for (int k = 0; k < n && status == CN_OK; k++) {
    cl_int err;
    c->kernels[k] = cl.clCreateKernel(c->program, c->source.kernels[k].name, &err);
    if (!c->kernels[k]) {
      status = cn_fail(ctx, CN_ERR_COMPILE, "opencl: routine '%s': no kernel %s: %s (%d)",
                       job->name, c->source.kernels[k].name, cl_error(err), (int)err);
      break;
    }
    size_t limit = st->max_group;
    if (cl.clGetKernelWorkGroupInfo(c->kernels[k], st->id, CL_KERNEL_WORK_GROUP_SIZE, sizeof limit,
                                    &limit, NULL) != CL_SUCCESS ||
        limit == 0 || limit > st->max_group)
      limit = st->max_group;
    const cn_kernel *kernel = &c->source.kernels[k];
    if (kernel->group_size > 0 && (size_t)kernel->group_size > limit) {
      status = cn_fail(ctx, CN_ERR_UNSUPPORTED,
                       "opencl: routine '%s': kernel %s needs work-groups of %lld work items, "
                       "%s runs it in groups of at most %zu",
                       job->name, kernel->name, (long long)kernel->group_size, st->name, limit);
      break;
    }
    size_t group = limit < GROUP_SIZE ? limit : GROUP_SIZE;
    c->groups[k] = kernel->group_size > 0                ? (size_t)kernel->group_size
                   : kernel->work_items < (int64_t)group ? (size_t)kernel->work_items
                                                         : group;
  }
  if (status != CN_OK) {
    ocl_release(c);
    job->c = NULL;
  }
  return status;
}

static cn_status ocl_compile(cn_ctx *ctx, const cn_ll_proc *proc, void **compiled,
                             const char **source) {
  ocl_job job;
  cn_status status = compile_begin(ctx, proc, &job);
  if (status != CN_OK) return status;
  if (!job.found) {
    build_program(&job);
    status = build_done(ctx, &job);
  }
  job_free(&job);
  if (status != CN_OK) {
    ocl_release(job.c);
    return status;
  }
  if ((status = compile_end(ctx, &job)) != CN_OK) return status;
  *compiled = job.c;
  *source = job.c->source.source;
  return CN_OK;
}

/* ---- Programs built together ----
 * compile_many: every program's text, key and cached binary first (in order, on the caller's
 * thread, which alone touches the context), then the programs missing from the cache built from
 * source at the same time, one thread per online processor taking the next program (OpenCL's
 * calls are thread-safe on distinct programs), then each outcome in order: the first failure is
 * the result (every state released), else the kernels. A program's text, options and so its
 * binary and cache record are the ones a compile of it alone gives. */

#define MAX_BUILDERS 16

typedef struct {
  ocl_job *jobs;
  int n;
  atomic_int next;
} build_queue;

static void *builder_main(void *arg) {
  build_queue *q = arg;
  for (int k; (k = atomic_fetch_add(&q->next, 1)) < q->n;)
    if (!q->jobs[k].found) build_program(&q->jobs[k]);
  return NULL;
}

static cn_status ocl_compile_many(cn_ctx *ctx, int n, const cn_ll_proc *const *procs,
                                  void **compiled, const char **sources) {
  ocl_job *jobs = cn_calloc(ctx, (size_t)n + 1, sizeof *jobs);
  if (!jobs) return ctx->status;
  cn_status status = CN_OK;
  int begun = 0, to_build = 0;
  for (; begun < n && status == CN_OK; begun++) {
    status = compile_begin(ctx, procs[begun], &jobs[begun]);
    to_build += status == CN_OK && !jobs[begun].found;
  }
  if (status != CN_OK) begun--; /* the failed one left nothing */
  if (status == CN_OK && to_build > 0) {
    build_queue q = {jobs, n, 0};
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int width = online < 1 ? 1 : online > MAX_BUILDERS ? MAX_BUILDERS : (int)online;
    if (width > to_build) width = to_build;
    pthread_t threads[MAX_BUILDERS];
    int started = 0;
    while (started < width - 1 && pthread_create(&threads[started], NULL, builder_main, &q) == 0)
      started++;
    builder_main(&q); /* the caller builds too (alone when no thread starts) */
    for (int t = 0; t < started; t++) pthread_join(threads[t], NULL);
  }
  for (int k = 0; k < begun && status == CN_OK; k++)
    if (!jobs[k].found) status = build_done(ctx, &jobs[k]);
  for (int k = 0; k < begun && status == CN_OK; k++) status = compile_end(ctx, &jobs[k]);
  for (int k = 0; k < begun; k++) {
    job_free(&jobs[k]);
    if (status != CN_OK) {
      ocl_release(jobs[k].c);
      continue;
    }
    compiled[k] = jobs[k].c;
    sources[k] = jobs[k].c->source.source;
  }
  free(jobs);
  return status;
}

static cn_status ocl_run(cn_ctx *ctx, void *compiled, void *const *buffers, const int64_t *syms) {
  ocl_compiled *c = compiled;
  ocl_state *st = c->st;
  const char *failed = "the last kernel";
  cl_int err = CL_SUCCESS;
  for (int k = 0; k < c->source.n_kernels && err == CL_SUCCESS; k++) {
    const cn_kernel *kernel = &c->source.kernels[k];
    failed = kernel->name;
    cl_uint arg = 0;
    for (int a = 0; a < kernel->n_args && err == CL_SUCCESS; a++) {
      cl_mem mem = buffers[kernel->params[a]];
      err = cl.clSetKernelArg(c->kernels[k], arg++, sizeof mem, &mem);
    }
    for (int i = 0; err == CL_SUCCESS && i < c->n_syms; i++) {
      cl_long v = syms[i];
      err = cl.clSetKernelArg(c->kernels[k], arg++, sizeof v, &v);
    }
    size_t group = c->groups[k];
    size_t global = (size_t)((kernel->work_items + (int64_t)group - 1) / (int64_t)group) * group;
    if (err == CL_SUCCESS)
      err = cl.clEnqueueNDRangeKernel(st->queue, c->kernels[k], 1, NULL, &global, &group, 0, NULL,
                                      NULL);
    if (err == CL_SUCCESS) snprintf(st->last, sizeof st->last, "%s", kernel->name);
  }
  if (err != CL_SUCCESS)
    return cn_fail(ctx, CN_ERR_IO, "opencl: %s failed on %s: %s (%d)", failed, st->name,
                   cl_error(err), (int)err);
  return CN_OK;
}

const cn_backend cn_backend_opencl = {
    .name = "opencl",
    .caps = CN_BACKEND_DEVICE_MEMORY | CN_BACKEND_COMPILED,
    .open_device = ocl_open_device,
    .compile = ocl_compile,
    .compile_many = ocl_compile_many,
    .run = ocl_run,
    .release = ocl_release,
};
