/* The high-level IR: tensor nodes, index maps, projections records and assignments
 * (syntax-extensions-cd-op `Assignments.t`, generalized), with the analyses the lowering needs.
 *
 * Invariants: a cn_proj is immutable once created and owns copies of its arrays (arena); slot 0
 * is the LHS and slots 1..n_rhs the RHS tensors, so a slot permutation is an index shuffle;
 * every cn_index stored in a record is canonical (cn_index_affine); an assignment is validated on
 * construction (arity, accumulator, precision support, dims against the nodes, index ranges
 * within the padded buffers — for a valid_only record only that they are bounded, since the
 * lowering guards out-of-range points away), so the lowering can assume a consistent tree. */
#ifndef CN_IR_H
#define CN_IR_H

#include "core/core.h"
#include "numeric/numeric.h"

/* A device with memory of its own: where a routine of a backend with CN_BACKEND_DEVICE_MEMORY
 * (src/backend/backend.h) runs, and where the nodes it touches keep a copy of their buffers
 * (resident.c). Defined here, below the backends, because a node's copy is read back through it
 * whenever the host reads the node, from any layer.
 * A buffer is an opaque handle of `bytes` bytes (allocate: contents unspecified); upload and
 * download copy a whole buffer from and to host memory and may return before the copy is done
 * (the host memory must then stay put until synchronize, which waits for everything the device
 * was asked to do); clear sets a buffer's bytes to zero (NULL: the runtime uploads zeros
 * instead). The backends whose buffers are host memory (the interpreter, generated C) have no
 * device object: their device is the host, and a routine passes them the nodes' own buffers,
 * nothing copied. */
typedef struct cn_device cn_device;
struct cn_device {
  const char *name;
  void *state; /* the implementation's */
  cn_status (*allocate)(cn_ctx *ctx, const cn_device *dev, size_t bytes, void **buffer);
  cn_status (*upload)(cn_ctx *ctx, const cn_device *dev, void *buffer, const void *host,
                      size_t bytes);
  cn_status (*download)(cn_ctx *ctx, const cn_device *dev, void *host, const void *buffer,
                        size_t bytes);
  cn_status (*synchronize)(cn_ctx *ctx, const cn_device *dev);
  void (*free)(const cn_device *dev, void *buffer);
  cn_status (*clear)(cn_ctx *ctx, const cn_device *dev, void *buffer, size_t bytes);
  /* Its buffers are host memory, written by the calls above before they return (the CPU devices,
   * devices.c): a copy between two such devices is a memcpy, and the host reads such a copy in
   * place. False for a device of its own memory: its copies move through the host. */
  bool host_memory;
};

/* A node's buffer (value or merge) as kept on one device (resident.c). */
typedef struct cn_node_copy cn_node_copy;

struct cn_node {
  cn_ctx *ctx;
  int id;
  const char *label; /* arena */
  cn_prec prec;
  int rank;
  int64_t dims[CN_MAX_RANK];
  int64_t pad[CN_MAX_RANK][2]; /* [axis][0] left, [axis][1] right */
  cn_memory_mode mode;
  void *value, *merge; /* malloc'd padded buffers, NULL until first use; freed by the context */
  bool buffers_used;   /* set once a buffer exists, here or on a device: padding is frozen */
  /* The copies of the buffers on devices (resident.c), newest first; NULL: the host buffers are
   * the only ones (the host backends never make any, so their runs copy nothing). host_stale[1]
   * for the merge buffer, [0] for the value: a device copy holds a newer value than the host
   * buffer, read back when the host reads (cn_node_host). */
  cn_node_copy *copies;
  bool host_stale[2];
  /* Replicated (cn_node_set_replicated): each device's copy is a value of its own (a device's
   * gradient in data parallelism), and the host buffer one more: a device write leaves the other
   * copies current and the host's value as it was (host_stale stays false). */
  bool replicated;
  /* An intermediate nothing outside the routines that compute it can read (set by the tensor
   * layer for the unnamed values of a script, cn_graph_fuse_unnamed): the schedule may inline it
   * like a CN_MEM_VIRTUAL node where that is exact, and otherwise leaves it materialized. */
  bool fusable;
  /* A validity test the program computes (cross_entropy's labels, src/tensor/train.c): every cell
   * must be 0 after a run that writes the node, and a run that leaves one nonzero fails whatever
   * the "check" option, with "<guard_what> <value> at [cell] <guard_rule>" (arena texts; NULL: no
   * test). Such a node is never fusable, so the schedule keeps it stored. */
  const char *guard_what, *guard_rule;
};

/* Cells of the padded buffer, and row-major strides over the padded dims. */
int64_t cn_node_padded_dim(const cn_node *node, int axis);
size_t cn_node_buffer_cells(const cn_node *node);
void cn_node_strides(const cn_node *node, int64_t *strides);
/* The host buffer of a node (allocated zero-filled on first use) for an access of the host: the
 * one accessor every host read or write of a node's cells goes through (resident.c), so that a
 * value a device computed is seen and a value the host wrote reaches the devices. READ brings the
 * host buffer up to date first (a download from the device holding the newest value, waited
 * for); WRITE (a read-modify-write: a part of the cells, or the padding margins kept) also marks
 * every device copy stale; OVERWRITE (every byte of the padded buffer written) marks them stale
 * without a download. A node no device touched costs one test. NULL with an error on failure. */
typedef enum { CN_HOST_READ, CN_HOST_WRITE, CN_HOST_OVERWRITE } cn_host_access;
void *cn_node_host(cn_node *node, bool merge, cn_host_access access);
/* cn_node_host(node, merge, CN_HOST_WRITE): the buffer for any use (tests, raw callers). */
void *cn_node_buffer(cn_node *node, bool merge);
/* The buffer without any synchronization, allocated zero-filled on first use (node.c): only for
 * cn_node_host and the device transfers of resident.c. */
void *cn_node_raw_buffer(cn_node *node, bool merge);
/* The copy of a node's buffer on dev, holding the node's newest value (a replicated node's: dev's
 * own, else the host's), for a run on dev: made on first use (the device's allocation, released
 * with the context), uploaded from the host when stale (after a download from another device
 * holding the newest value), cleared on the device instead when the host has no buffer yet (all
 * zeros). Never allocates a host buffer a device can clear. Counts CN_STAT_UPLOADS and
 * CN_STAT_UPLOAD_BYTES. */
cn_status cn_node_device(cn_node *node, bool merge, const cn_device *dev, void **buffer);
/* A run on dev wrote the node's copy there: it alone is current, the host's and the other
 * devices' copies are stale; for a replicated node only dev's copy changes (made current). */
void cn_node_device_wrote(cn_node *node, bool merge, const cn_device *dev);
/* The cells of a node's buffer as dev holds them, on a device of host memory (a CPU device), for
 * an access of the host as with cn_node_host: READ returns the copy there made current (as a run
 * on dev would see it); WRITE and OVERWRITE also make it the device's newest value
 * (cn_node_device_wrote). NULL with an error on failure. */
void *cn_node_device_host(cn_node *node, bool merge, const cn_device *dev, cn_host_access access);
/* Copies the node's value as device `from` holds it (NULL: the host's value) into device to's
 * copy (NULL: the host buffer) of its value, or of its merge buffer (into_merge): a memcpy
 * between host memories (the host's and the CPU devices'), else a download and/or an upload
 * (through a host buffer of the transfer's own between two devices of their own memory). The
 * destination becomes current: into a device's value of a node that is not replicated, or into
 * the host's value, the other copies keep their state (the value copied is the newest, or for a
 * replicated node the host's own); otherwise as a write there (cn_node_device_wrote, or a host
 * overwrite of the merge buffer). Counts CN_STAT_TRANSFERS and CN_STAT_TRANSFER_BYTES. */
cn_status cn_node_transfer_between(cn_node *node, const cn_device *from, const cn_device *to,
                                   bool into_merge);
/* The context's CPU devices (devices.c): device k of the count cn_ctx_open_devices made, NULL with
 * a message naming `what` (the caller) for a k out of range. */
const cn_device *cn_cpu_device(cn_ctx *ctx, int k, const char *what);
/* "label" (#id) for messages; arena-owned. */
const char *cn_node_describe(const cn_node *node);
/* The first unpadded cell, in row-major order, of `cells` (a buffer laid out as node's: its value,
 * its merge buffer or a routine's scratch for a local node) that holds a NaN or an infinity
 * (nonzero false; none when node's precision is not a float kind) or, with nonzero, any value but
 * 0 (NaN included): true with its coordinates in at[0..rank) and its value; false when there is
 * none. Padding margins are not read (they may hold a neutral element such as -inf). */
bool cn_node_find_cell(const cn_node *node, const void *cells, bool nonzero, int64_t *at,
                       double *value);

#define CN_SLOT_LHS  0
#define CN_MAX_SLOTS 4
typedef struct {
  int rank;
  int64_t *dims;
  cn_index *map;
} cn_proj_slot;

/* A gathered symbol (an index-valued projection: docs/ARCHITECTURE.md "Index-valued projections"):
 * a pseudo-iterator whose value at a product point is the cell (as an integer) of `source` at
 * `map` (one index over the record's iterators per axis of source). It ranges over [0, bound), the
 * size of the axis it indexes, and is created with that range (cn_symbol_create), so the analyses
 * that bound indices take it as a static index; a point whose cell holds a value outside the range
 * is skipped (the lowering's CN_LL_LET). Slot maps mention it like any symbol. The node is named
 * here rather than through a slot because it is no operand of the arithmetic: every record derived
 * from this one (cn_proj_permute, cn_proj_over: the gradient's) reads the same cells. */
#define CN_PROJ_MAX_GATHERED 2
typedef struct {
  cn_symbol sym;
  int64_t bound;
  cn_node *source;
  cn_index *map; /* source->rank indices */
} cn_proj_gathered;

/* Iterator p ranges over [lo[p], lo[p] + sizes[p]) (lo is 0 for cn_proj_create, so `sizes` keeps
 * its meaning of a value count for every consumer). The constraints and valid_only restrict the
 * visited points to a subset of that box (tile-edsl "Valid Indices"); zero_unreached changes what
 * `=:` leaves in LHS cells no visited point writes (0 instead of the neutral element). */
struct cn_proj {
  int n_product;
  cn_symbol *iters;
  int64_t *lo;
  int64_t *sizes;
  int n_rhs;
  cn_proj_slot slot[CN_MAX_SLOTS];
  int n_constraints;
  cn_proj_constraint *constraints;
  bool valid_only, zero_unreached;
  int n_gathered;
  cn_proj_gathered *gathered;
};

/* The record of `proj` with the iterator v of axis `axis` of slot `slot` (the table's class axis)
 * turned into a gathered symbol read from `source` (a node of numbers: each cell is truncated to
 * an integer, as cn_value_convert does), and slot `from` dropped. proj is the record of
 * a one-hot contraction: slot `from` is the one-hot, whose axis `from_axis` is Iter(v) and whose
 * other axes are source's (the index tensor's) in order; from_axis -1 stands for the index tensor
 * itself (the one-hot unmaterialized, every axis of from being source's). v must drive nothing
 * else, so that it is the contraction's class loop. The new symbol is named after v with v's size
 * as range. NULL with a message when the axes are not so, source is a uint4x32 node or not of those
 * dims, or the record has conditions or CN_PROJ_MAX_GATHERED gathered symbols already. */
cn_proj *cn_proj_gather(cn_ctx *ctx, const cn_proj *proj, int slot, int axis, int from,
                        int from_axis, cn_node *source);
/* Why cn_proj_gather would refuse those arguments (a static text), NULL when it would not. */
const char *cn_proj_gather_refusal(const cn_proj *proj, int slot, int axis, int from, int from_axis,
                                   const cn_node *source);
/* The gathered symbol sym stands for in proj, NULL when sym is none. */
const cn_proj_gathered *cn_proj_gathered_of(const cn_proj *proj, cn_symbol sym);

/* True if the record visits a subset of its box (constraints or valid_only). */
bool cn_proj_has_conditions(const cn_proj *proj);

/* A record visiting exactly proj's points (iterators, ranges, constraints, valid_only) for other
 * tensors: the gradient builder's assignments, whose tensors are the forward operation's slots and
 * intermediates shaped like its box. Tensor i (0 the LHS, then rhs[0..n_rhs)) reads through slot
 * from[i] of proj (its map and dims), or from[i] < 0 for a tensor whose indices stay within its
 * dims over the whole box. zero_unreached is given, not inherited: it describes the forward
 * operation's `=:`, not an accumulation into a gradient. cn_proj_permute is the case where every
 * tensor is a slot and the flag is kept. */
cn_proj *cn_proj_over(cn_ctx *ctx, const cn_proj *proj, cn_proj_tensor lhs, int n_rhs,
                      const cn_proj_tensor *rhs, const int *from, bool zero_unreached);

/* Inclusive range [*lo, *hi] an index takes over the product space's box (iterators over their
 * ranges, free symbols over their declared range; false if a free symbol has no range, the index
 * is invalid or the range overflows). */
bool cn_index_bounds(const cn_ctx *ctx, const cn_index *idx, const cn_proj *proj, int64_t *lo,
                     int64_t *hi);
/* The number of values of a product iterator in proj, or 0 if sym is not one of its iterators. */
int64_t cn_proj_iter_size(const cn_proj *proj, cn_symbol sym);
bool cn_index_mentions(const cn_index *idx, cn_symbol sym);
/* The coefficient of sym in the index (0 when it does not mention it). */
int64_t cn_index_coeff(const cn_index *idx, cn_symbol sym);
void cn_index_print(cn_sbuf *sb, const cn_ctx *ctx, const cn_index *idx);

typedef enum {
  CN_ASGN_NOOP,
  CN_ASGN_SEQ,
  CN_ASGN_COMMENT,
  CN_ASGN_ACCUM,
  CN_ASGN_VEC_UNOP,
  CN_ASGN_FETCH
} cn_asgn_kind;

typedef enum {
  CN_FETCH_CONSTANT,
  CN_FETCH_CONSTANT_BITS,
  CN_FETCH_CONSTANT_FILL,
  CN_FETCH_RANGE_OVER_OFFSETS,
  CN_FETCH_SLICE,
  CN_FETCH_EMBED_SYMBOL,
  CN_FETCH_EMBED_SELF_ID,
  CN_FETCH_EMBED_DIM
} cn_fetch_kind;

struct cn_asgn {
  cn_asgn_kind kind;
  union {
    struct {
      int count;
      cn_asgn **items;
    } seq;
    struct {
      const char *text;
      cn_asgn *body;
    } comment;
    struct {
      bool init_neutral;
      cn_op accum, op;
      cn_node *lhs;
      cn_buffer rhs[3]; /* cn_op_arity(op) of them */
      const cn_proj *proj;
    } accum;
    struct {
      cn_op op;
      cn_node *lhs;
      cn_buffer rhs;
      const cn_proj *proj;
    } vec;
    struct {
      cn_fetch_kind kind;
      cn_node *lhs;
      double constant;    /* CONSTANT */
      uint64_t bits;      /* CONSTANT_BITS */
      const double *fill; /* CONSTANT_FILL (arena copy) */
      size_t n_fill;
      cn_symbol sym;      /* SLICE batch index, EMBED_SYMBOL */
      cn_node *sliced;    /* SLICE */
      const int64_t *dim; /* EMBED_DIM */
    } fetch;
  } u;
};

#endif
