/* The kernel view of a loop-IR procedure, shared by the device backends (OpenCL, CUDA): the
 * procedure as a program of kernels run in order, each kernel one top-level statement of the
 * body's sequence, its grid the maximal run of directly nested CN_LL_PARALLEL loops at the top of
 * the statement (for a CN_LL_GEMM, the loops of its nest before the first reduction loop; a
 * statement without a grid: a kernel of one work item, and consecutive such statements one
 * kernel running them in order, one launch instead of several). The text is written by the
 * dialect-neutral emitter (cgen_emit.c) steered by a kernel dialect (cgen.h: the kernel fields
 * set).
 *
 * Kernel ABI (both runtimes launch exactly this):
 * - arguments: first the n_args buffers, argument k being the device buffer of param params[k]
 *   (the start of the node's padded buffer, in the node's stored precision), then one 64-bit
 *   signed integer per free symbol of the procedure, in proc->free_syms order (the values a
 *   backend's run receives in syms);
 * - a one-dimensional grid: the runtime launches at least work_items work items (rounded up to
 *   its block / work-group size); the kernel reads its linear global id, returns at once when it
 *   is >= work_items, and decomposes the id into the grid loops' variables (div/mod by the
 *   constant extents, the innermost loop fastest); a grid loop's affine bounds become a condition
 *   inside the work item;
 * - a kernel with a group_size (a tiled GEMM kernel) is launched in work-groups (blocks) of
 *   exactly group_size work items, work_items being a multiple of it: its work items share local
 *   memory and wait for each other at barriers, so the runtime may not choose another size (it
 *   refuses the kernel when the device cannot run groups that large) nor launch more work items
 *   (such a kernel has no guard: every work item reaches every barrier);
 * - the kernels of one program run in order on one queue / stream; a backend's run returns after
 *   the last one finished.
 * Everything else runs inside the work item as written: reductions sequential and in order (no
 * atomics, deterministic), CN_LL_VECTOR / CN_LL_FLAT marks ignored. A top-level CN_LL_GEMM is a
 * tiled kernel when the device's limits allow one (kernels.c "Tiled GEMM kernels": a work-group
 * computes a tile of cells, its operands' slices of the reduction staged in local memory, each
 * work item a register block of cells, every cell's steps in the nest's order), else, as a
 * CN_LL_GEMM below the top, its nest of plain loops. Not a public interface. */
#ifndef CN_KERNELS_H
#define CN_KERNELS_H

#include "backend/cgen.h"

/* One kernel of a program: a function of the program's source. */
typedef struct {
  const char *name;   /* the function's name in the source: "<proc name>_k<i>" */
  int64_t work_items; /* how many work items the grid has (>= 1): the product of the extents of
                         the parallel loops that became the grid (1: a kernel of one work item
                         that runs its statement sequentially) */
  int n_args;         /* its buffer arguments ... */
  const int *params;  /* ... the procedure's params they are, in this order */
  int64_t group_size; /* 0: any work-group size; else exactly this one (work_items a multiple) */
} cn_kernel;

/* The tile of the tiled GEMM kernels (kernels.c "Tiled GEMM kernels"): work items along each side
 * of a work-group, cells a work item holds along each side (its register block), reduction steps
 * a slice stages in local memory; each a power of two. The tile shrinks from it along a side with
 * few cells and to the device's limits. A tile never changes the bits: each cell is one work
 * item's, its steps in the nest's order. */
typedef struct {
  int64_t items, cells, steps;
} cn_kernel_tile;

/* The tile when neither the backend nor the option says otherwise: 16 x 16 work items of 4 x 4
 * cells, 16 steps a slice. */
#define CN_KERNEL_TILE_DEFAULT ((cn_kernel_tile){16, 4, 16})
/* The largest of each (a group of 32 x 32 work items is CUDA's and most OpenCL GPUs' most). */
#define CN_KERNEL_TILE_MAX ((cn_kernel_tile){32, 16, 64})

/* What the device offers a work-group, for the tiled GEMM kernels: the most work items in a group
 * (OpenCL's CL_DEVICE_MAX_WORK_GROUP_SIZE and first work-item size, CUDA's threads per block)
 * and the bytes of local (shared) memory it may use; the tile to start from (zeros: the
 * default); and the work-groups a GEMM should have to keep the device busy (its compute units:
 * OpenCL's CL_DEVICE_MAX_COMPUTE_UNITS, CUDA's multiprocessors; 0: any count), for which a small
 * GEMM's tile gives up cells a work item, then work items a group (down to 64). */
typedef struct {
  int64_t max_group;
  int64_t local_bytes;
  cn_kernel_tile tile;
  int64_t min_groups;
} cn_kernel_limits;

/* The option "device_tile" (the tile of the device backends' GEMM kernels): the value set on ctx,
 * else $CANNL_DEVICE_TILE, else "auto". "auto" is the backend's own tile; "<items>x<cells>x<steps>"
 * (e.g. "16x8x16") replaces it, each a power of two up to CN_KERNEL_TILE_MAX's. */
const char *cn_kernel_tile_option(const cn_ctx *ctx);
/* Whether text is a value of "device_tile"; a tile's value in *tile ("auto" leaves it). */
bool cn_kernel_tile_parse(const char *text, cn_kernel_tile *tile);
/* CN_OK when value is one of "device_tile", else CN_ERR_INVALID "<what>: '<value>' is not a tile:
 * ..." (what names the option or the variable). */
cn_status cn_kernel_tile_check(cn_ctx *ctx, const char *what, const char *value);
/* *tile: the option's tile, else `backend_tile`; CN_ERR_INVALID naming the variable when the
 * environment's value is none (a value set on the context was checked when set). */
cn_status cn_kernel_tile_choose(cn_ctx *ctx, cn_kernel_tile backend_tile, cn_kernel_tile *tile);

/* A procedure as device kernels: one source text, kernels run in order, each finishing before
 * the next starts (an in-order queue / one stream). */
typedef struct {
  char *source; /* the whole program: the dialect's prelude, then every kernel */
  int n_kernels;
  cn_kernel *kernels;
} cn_kernel_program;

/* The program of proc in `dialect` (a kernel dialect) for a device with `limits` (NULL: no tiled
 * kernel, every GEMM plain loops); on failure *out is left empty (nothing to free) and the
 * context holds the message. The program owns everything it points to (heap), so it outlives the
 * context's arena; cn_kernel_program_free releases it (a zeroed program too). */
cn_status cn_kernel_program_make(cn_ctx *ctx, const cn_ll_proc *proc,
                                 const cn_cgen_dialect *dialect, const cn_kernel_limits *limits,
                                 cn_kernel_program *out);
void cn_kernel_program_free(cn_kernel_program *program);

/* The `gemm` hook of kernel dialects: a CN_LL_GEMM inside a statement as its nest of plain loops
 * (fused when the plan says fma, c cleared first when it starts from zero). */
void cn_kernel_gemm(const cgen *g, int depth, const cn_ll_stmt *s);

/* The OpenCL C dialect (cgen_opencl.c). */
extern const cn_cgen_dialect cn_cgen_opencl;

#endif
