/* The process-wide registry of backends (backend.h): the interpreter and generated C under their
 * fixed ids, the built-in device backends, OpenCL (id 2) and CUDA (id 3), each library opened
 * only when its backend is used, then the backends registered at run time (a test's), and the
 * public lookups by id and name and the description of a backend's device (include/cannl.h).
 *
 * Invariants: slots [0, count) are set and never change; a registration fills slot `count` under
 * the lock and then publishes count + 1 with release order, so readers (acquire) take no lock. */
#define _DEFAULT_SOURCE /* sysconf's _SC_PHYS_PAGES */
#include "backend/backend.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const cn_backend *registry[CN_BACKEND_MAX] = {&cn_backend_interp, &cn_backend_c,
                                                     &cn_backend_opencl, &cn_backend_cuda};
static atomic_int registered = 4;
static pthread_mutex_t registering = PTHREAD_MUTEX_INITIALIZER;

/* A registry name: [a-z][a-z0-9_]*, at most CN_BACKEND_NAME_MAX characters (cn_backend_list's
 * buffer holds them all). */
static bool valid_name(const char *name) {
  size_t n = name ? strlen(name) : 0;
  if (n == 0 || n > CN_BACKEND_NAME_MAX || !(name[0] >= 'a' && name[0] <= 'z')) return false;
  for (size_t i = 1; i < n; i++)
    if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') ||
          name[i] == '_'))
      return false;
  return true;
}

/* Why impl cannot be registered as it is (NULL: it can), the registry aside. */
static const char *invalid_impl(const cn_backend *impl) {
  if (!impl || !valid_name(impl->name))
    return "its name is not a lowercase identifier of at most 31 characters";
  if (!impl->compile || !impl->run || !impl->release) return "compile, run or release is missing";
  if (!(impl->caps & CN_BACKEND_PARALLEL) != !impl->run_parallel)
    return "CN_BACKEND_PARALLEL and run_parallel disagree";
  if (!(impl->caps & CN_BACKEND_DEVICE_MEMORY) != !impl->open_device)
    return "CN_BACKEND_DEVICE_MEMORY and open_device disagree";
  return NULL;
}

cn_status cn_backend_register(cn_ctx *ctx, const cn_backend *impl, cn_backend_kind *kind) {
  const char *why = invalid_impl(impl);
  const char *name = impl && impl->name ? impl->name : "(null)";
  if (why) return cn_fail(ctx, CN_ERR_INVALID, "backend '%s' cannot be registered: %s", name, why);
  pthread_mutex_lock(&registering);
  int n = atomic_load_explicit(&registered, memory_order_relaxed);
  bool taken = cn_backend_find(name) >= 0;
  if (!taken && n < CN_BACKEND_MAX) {
    registry[n] = impl;
    atomic_store_explicit(&registered, n + 1, memory_order_release);
    *kind = (cn_backend_kind)n;
  }
  pthread_mutex_unlock(&registering);
  if (taken)
    return cn_fail(ctx, CN_ERR_INVALID, "backend '%s' cannot be registered: the name is taken",
                   name);
  if (n >= CN_BACKEND_MAX)
    return cn_fail(ctx, CN_ERR_INVALID,
                   "backend '%s' cannot be registered: %d backends are, the most there can be",
                   name, CN_BACKEND_MAX);
  return CN_OK;
}

const cn_backend *cn_backend_get(cn_backend_kind kind) {
  int n = atomic_load_explicit(&registered, memory_order_acquire);
  return (int)kind >= 0 && (int)kind < n ? registry[kind] : NULL;
}

int cn_backend_count(void) {
  return atomic_load_explicit(&registered, memory_order_acquire);
}

int cn_backend_find(const char *name) {
  int n = cn_backend_count();
  for (int k = 0; name && k < n; k++)
    if (strcmp(registry[k]->name, name) == 0) return k;
  return -1;
}

const char *cn_backend_name(cn_backend_kind kind) {
  const cn_backend *impl = cn_backend_get(kind);
  return impl ? impl->name : NULL;
}

unsigned cn_backend_caps(cn_backend_kind kind) {
  const cn_backend *impl = cn_backend_get(kind);
  return impl ? impl->caps : 0;
}

const char *cn_backend_list(void) {
  static _Thread_local char text[CN_BACKEND_MAX * (CN_BACKEND_NAME_MAX + 2) + 1];
  int n = cn_backend_count();
  size_t len = 0;
  text[0] = '\0';
  for (int k = 0; k < n; k++)
    len +=
        (size_t)snprintf(text + len, sizeof text - len, "%s%s", k ? ", " : "", registry[k]->name);
  return text;
}

const char *cn_backend_suggest(const char *name, char *out, size_t size) {
  cn_suggest s;
  cn_suggest_init(&s, name ? name : "");
  cn_suggest_consider_list(&s, cn_backend_list());
  if (size > 0) snprintf(out, size, "%s", cn_suggest_text(&s));
  return out;
}

cn_status cn_backend_device(cn_ctx *ctx, cn_backend_kind kind, char *out, size_t cap) {
  const cn_backend *b = cn_backend_get(kind);
  if (!b) return cn_fail(ctx, CN_ERR_INVALID, "unknown backend kind %d", (int)kind);
  if (b->caps & CN_BACKEND_DEVICE_MEMORY) {
    const cn_device *device;
    cn_status st = b->open_device(ctx, &device);
    if (st == CN_OK) snprintf(out, cap, "%s", device->name);
    return st;
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN), pages = sysconf(_SC_PHYS_PAGES),
       page = sysconf(_SC_PAGE_SIZE);
  snprintf(out, cap, "the host: %s, %ld cores, %.1f GiB of memory", cn_cpu_model(), cores,
           pages > 0 && page > 0 ? (double)pages * (double)page / (1 << 30) : 0.0);
  return CN_OK;
}
