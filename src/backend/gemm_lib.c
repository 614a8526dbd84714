/* The GEMM library's entry (gemm_lib.h): the instruction set of this process, chosen once from
 * the CPU (the kernels of every set are compiled into cannl: src/backend/isa/gemm_isa.c), and the
 * count of the GEMMs it ran (a test hook). */
#include "backend/gemm_lib.h"

#include <stdatomic.h>

static _Atomic(const cn_gemm_isa *) chosen;
static atomic_llong runs;

/* The widest set the CPU runs with its fused multiply-add; two threads asking at once compute
 * the same answer. */
static const cn_gemm_isa *isa_of_cpu(void) {
  const cn_gemm_isa *isa = atomic_load_explicit(&chosen, memory_order_acquire);
  if (isa) return isa;
  isa = &cn_gemm_isa_generic;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("fma") && __builtin_cpu_supports("avx512f"))
    isa = &cn_gemm_isa_avx512;
  else if (__builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2"))
    isa = &cn_gemm_isa_avx2;
#endif
  atomic_store_explicit(&chosen, isa, memory_order_release);
  return isa;
}

void cn_gemm_lib_run(const int64_t *args, void *c, const void *x, const void *y,
                     const cn_parallel *par) {
  const cn_gemm_isa *isa = isa_of_cpu();
  atomic_fetch_add_explicit(&runs, 1, memory_order_relaxed);
  if (args[CN_GEMM_ARG_FLAGS] & CN_GEMM_DOUBLE)
    isa->run_f64(args, c, x, y, par);
  else
    isa->run_f32(args, c, x, y, par);
}

const char *cn_gemm_lib_isa(void) {
  return isa_of_cpu()->name;
}

int64_t cn_gemm_lib_runs(void) {
  return atomic_load_explicit(&runs, memory_order_relaxed);
}
