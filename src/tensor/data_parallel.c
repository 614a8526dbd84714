/* Data-parallel training on a context's CPU devices (include/cannl.h cn_dp_create): a global batch
 * sharded across N devices, the gradient routine (forward and backprop) run on each on its shard,
 * the gradients (and the loss) all-reduced (cn_allreduce_run), the update routine run on each,
 * then the parameters compared bit for bit across the devices and device 0's copied to the host.
 *
 * Invariants: every node the two routines write is replicated before their first device run, so
 * each device's copies are its own (a parameter that is not would have each device's update
 * applied on top of the previous one's); the merged gradient is the plain sum of the shards' (no
 * scaling: the loss is a sum over the shard divided by the global batch size, so the sum is the
 * single-device gradient); after a step that succeeded every device holds the same parameter bits
 * (checked, not assumed). The record is the context's (its cleanup) until cn_dp_free.
 *
 * Across MPI ranks (cn_dist_size() > 1 at creation): the shards are numbered rank * devices +
 * device, the devices' all-reduce is followed by the ranks' (cn_dist_allreduce_run does both, in
 * that order), the check compares a hash of each parameter's bits across ranks too, and every
 * collective call is reached by every rank in the same order, a rank that failed before one
 * sending its failure through it, so that no rank waits for a failed one until the timeout.
 * Checkpoints: rank 0 writes (atomically: cn_data_save_safetensors), every rank waits for its
 * status, every rank reads. */
#include "dist/dist.h"
#include "runtime/routine.h"
#include "tensor/tensor.h"

#include <stdlib.h>
#include <string.h>

struct cn_dp {
  cn_ctx *ctx;
  int devices;
  cn_routine *grad, *update;
  int n_params;
  cn_tensor **params;
  cn_node *loss; /* all-reduced with the gradients when materialized, else NULL */
  int n_binds;   /* cn_dp_bind_device: per symbol, the gradient routine's value on each device */
  cn_symbol *bind_syms;
  int64_t *bind_values; /* n_binds rows of `devices` values */
  int n_reduced;
  cn_node **reduced;       /* the parameters' gradients, then the loss when all-reduced */
  cn_allreduce *allreduce; /* one rank: the devices' all-reduce */
  int rank, ranks;         /* cn_dist_rank / cn_dist_size at creation */
  cn_dist_allreduce *dist; /* several ranks: the devices' all-reduce, then the ranks' */
  cn_graph *g;             /* the graph and the loss whose training state a checkpoint holds */
  cn_tensor *loss_tensor;
  cn_cleanup *cleanup;
};

static void dp_cleanup(void *arg) {
  cn_dp *dp = arg;
  free(dp->params);
  free(dp->bind_syms);
  free(dp->bind_values);
  free(dp->reduced);
  free(dp);
}

/* Every materialized node the routine writes holds a value per device. */
static cn_status replicate_writes(cn_routine *r) {
  const cn_ll_proc *proc = cn_routine_proc(r);
  for (int i = 0; i < proc->n_params; i++) {
    cn_node *node = proc->params[i].node;
    if (!cn_routine_writes(r, i) || node->mode != CN_MEM_MATERIALIZED || node->replicated) continue;
    cn_status status = cn_node_set_replicated(node, true);
    if (status != CN_OK) return status;
  }
  return CN_OK;
}

/* The parameters, the gradients (and the loss) to all-reduce, the written nodes replicated. */
static cn_status dp_setup(cn_dp *dp, cn_graph *g, cn_tensor *loss) {
  cn_ctx *ctx = dp->ctx;
  int n = cn_graph_params(g, loss, NULL, 0);
  if (n < 0) return cn_ctx_status(ctx);
  if (n == 0) return cn_fail(ctx, CN_ERR_INVALID, "cn_dp_create: the loss has no parameters");
  if (!(dp->params = cn_malloc(ctx, sizeof *dp->params * (size_t)n))) return CN_ERR_NOMEM;
  dp->n_params = cn_graph_params(g, loss, dp->params, n);
  cn_status status = replicate_writes(dp->grad);
  if (status == CN_OK) status = replicate_writes(dp->update);
  if (status != CN_OK) return status;
  cn_node **reduced = dp->reduced = cn_malloc(ctx, sizeof *reduced * (size_t)(n + 1));
  if (!reduced) return CN_ERR_NOMEM;
  for (int i = 0; i < n; i++) {
    cn_node *grad = cn_tensor_grad(dp->params[i]);
    if (!grad || grad->mode != CN_MEM_MATERIALIZED || !grad->replicated)
      return cn_fail(ctx, CN_ERR_INVALID,
                     "cn_dp_create: parameter '%s' has no gradient the gradient routine '%s' "
                     "writes",
                     dp->params[i]->label, cn_routine_proc(dp->grad)->name);
    reduced[dp->n_reduced++] = grad;
  }
  cn_node *value = cn_tensor_value(loss);
  if (value && value->mode == CN_MEM_MATERIALIZED && value->replicated)
    reduced[dp->n_reduced++] = dp->loss = value;
  return CN_OK;
}

cn_dp *cn_dp_create(cn_graph *g, cn_tensor *loss, cn_routine *grad, cn_routine *update, int devices,
                    cn_backend_kind backend) {
  if (!g) return NULL;
  cn_ctx *ctx = cn_graph_ctx(g);
  cn_status status = CN_OK;
  cn_dp *dp = NULL;
  if (!loss || !grad || !update)
    status = cn_fail(ctx, CN_ERR_INVALID,
                     "cn_dp_create: a loss, a gradient routine and an update routine needed");
  else if (devices < 1 || devices > CN_MAX_DEVICES)
    status = cn_fail(ctx, CN_ERR_INVALID, "cn_dp_create: %d devices, not in [1, %d]", devices,
                     CN_MAX_DEVICES);
  else
    status = cn_ctx_open_devices(ctx, devices);
  if (status == CN_OK) {
    dp = cn_calloc(ctx, 1, sizeof *dp);
    cn_cleanup *cleanup = dp ? cn_ctx_add_cleanup(ctx, dp_cleanup, dp) : NULL;
    if (cleanup) {
      *dp = (cn_dp){.ctx = ctx,
                    .devices = devices,
                    .grad = grad,
                    .update = update,
                    .rank = cn_dist_rank(),
                    .ranks = cn_dist_size(),
                    .g = g,
                    .loss_tensor = loss,
                    .cleanup = cleanup};
      status = dp_setup(dp, g, loss);
    } else {
      free(dp);
      dp = NULL;
      status = CN_ERR_NOMEM;
    }
  }
  /* Across ranks the start-up checks are collective: the compiled routines (their buffers'
   * shapes and a hash of their code), then, creating the ranks' all-reduce, the node lists and
   * device counts. A rank that failed above sends its message through the first. */
  if (cn_dist_size() > 1) {
    cn_routine *routines[2] = {grad, update};
    status = cn_dist_check_routines_after(ctx, status, 2, routines);
    if (status == CN_OK &&
        !(dp->dist = cn_dist_allreduce_create(ctx, dp->n_reduced, dp->reduced, backend)))
      status = cn_ctx_status(ctx);
  } else if (status == CN_OK &&
             !(dp->allreduce = cn_allreduce_create(ctx, dp->n_reduced, dp->reduced, backend))) {
    status = cn_ctx_status(ctx);
  }
  if (status != CN_OK) {
    cn_dp_free(dp);
    return NULL;
  }
  return dp;
}

cn_status cn_dp_shard(cn_dp *dp, cn_tensor *data, int axis, int64_t global, const double *values,
                      size_t count) {
  if (!dp) return CN_ERR_INVALID;
  cn_node *node = data ? cn_tensor_value(data) : NULL;
  if (!node || !values)
    return cn_fail(dp->ctx, CN_ERR_INVALID, "cn_dp_shard: a data tensor and its values needed");
  if (axis < 0 || axis >= node->rank)
    return cn_fail(dp->ctx, CN_ERR_INVALID, "cn_dp_shard: '%s' has no axis %d (rank %d)",
                   node->label, axis, node->rank);
  /* shard s = rank * devices + device of `shards` */
  const int shards = dp->ranks * dp->devices;
  char among[64];
  if (dp->ranks > 1)
    snprintf(among, sizeof among, "%d ranks x %d devices", dp->ranks, dp->devices);
  else
    snprintf(among, sizeof among, "%d devices", dp->devices);
  if (global <= 0 || global % shards != 0)
    return cn_fail(dp->ctx, CN_ERR_INVALID,
                   "cn_dp_shard: '%s': a global batch of %lld does not divide among %s",
                   node->label, (long long)global, among);
  const int64_t shard = global / shards;
  if (node->dims[axis] != shard)
    return cn_fail(dp->ctx, CN_ERR_INVALID,
                   "cn_dp_shard: '%s' axis %d has %lld cells, not the shard %lld of %lld over %s",
                   node->label, axis, (long long)node->dims[axis], (long long)shard,
                   (long long)global, among);
  int64_t outer = 1, inner = 1;
  for (int a = 0; a < axis; a++) outer *= node->dims[a];
  for (int a = axis + 1; a < node->rank; a++) inner *= node->dims[a];
  if ((int64_t)count != outer * global * inner)
    return cn_fail(dp->ctx, CN_ERR_INVALID,
                   "cn_dp_shard: '%s': %zu values given, %lld expected (its dims with axis %d "
                   "%lld)",
                   node->label, count, (long long)(outer * global * inner), axis,
                   (long long)global);
  if (!node->replicated) {
    cn_status status = cn_node_set_replicated(node, true);
    if (status != CN_OK) return status;
  }
  const size_t cells = (size_t)(outer * shard * inner), block = (size_t)(shard * inner);
  double *part = cn_malloc(dp->ctx, sizeof *part * (cells ? cells : 1));
  if (!part) return CN_ERR_NOMEM;
  cn_status status = CN_OK;
  for (int d = 0; d < dp->devices && status == CN_OK; d++) {
    for (int64_t o = 0; o < outer; o++)
      memcpy(part + (size_t)o * block,
             values + ((size_t)o * (size_t)shards + (size_t)(dp->rank * dp->devices + d)) * block,
             sizeof *part * block);
    status = cn_node_set_device_values(node, false, d, part, cells);
  }
  free(part);
  return status;
}

cn_status cn_dp_bind(cn_dp *dp, cn_symbol sym, int64_t value) {
  if (!dp) return CN_ERR_INVALID;
  bool bound = false;
  cn_routine *routines[2] = {dp->grad, dp->update};
  for (int r = 0; r < 2; r++) {
    if (!cn_routine_reads(routines[r], sym)) continue;
    cn_status status = cn_routine_bind(routines[r], sym, value);
    if (status != CN_OK) return status;
    bound = true;
  }
  return bound ? CN_OK
               : cn_fail(dp->ctx, CN_ERR_INVALID,
                         "cn_dp_bind: neither '%s' nor '%s' reads symbol '%s'",
                         cn_routine_proc(dp->grad)->name, cn_routine_proc(dp->update)->name,
                         cn_symbol_name(dp->ctx, sym));
}

/* A device's value of a symbol bound per device before cn_dp_bind_device gave one. */
#define UNBOUND INT64_MIN

/* Before the gradient routine's run on device d: its per-device bindings. */
static cn_status bind_device(cn_dp *dp, int d) {
  cn_status status = CN_OK;
  for (int row = 0; row < dp->n_binds && status == CN_OK; row++) {
    int64_t value = dp->bind_values[(size_t)row * (size_t)dp->devices + (size_t)d];
    status = value == UNBOUND ? cn_fail(dp->ctx, CN_ERR_INVALID,
                                        "cn_dp_step: symbol '%s' is bound per device but not on "
                                        "device %d",
                                        cn_symbol_name(dp->ctx, dp->bind_syms[row]), d)
                              : cn_routine_bind(dp->grad, dp->bind_syms[row], value);
  }
  return status;
}

cn_status cn_dp_bind_device(cn_dp *dp, cn_symbol sym, int device, int64_t value) {
  if (!dp) return CN_ERR_INVALID;
  if (device < 0 || device >= dp->devices)
    return cn_fail(dp->ctx, CN_ERR_INVALID, "cn_dp_bind_device: device %d, not in [0, %d)", device,
                   dp->devices);
  if (!cn_routine_reads(dp->grad, sym))
    return cn_fail(dp->ctx, CN_ERR_INVALID, "cn_dp_bind_device: '%s' does not read symbol '%s'",
                   cn_routine_proc(dp->grad)->name, cn_symbol_name(dp->ctx, sym));
  int row = 0;
  while (row < dp->n_binds && dp->bind_syms[row] != sym) row++;
  if (row == dp->n_binds) {
    cn_symbol *syms = realloc(dp->bind_syms, sizeof *syms * (size_t)(row + 1));
    if (syms) dp->bind_syms = syms;
    int64_t *values =
        syms ? realloc(dp->bind_values, sizeof *values * (size_t)(row + 1) * (size_t)dp->devices)
             : NULL;
    if (!values) return cn_fail(dp->ctx, CN_ERR_NOMEM, "out of memory");
    dp->bind_values = values;
    dp->bind_syms[row] = sym;
    dp->n_binds++;
    for (int d = 0; d < dp->devices; d++)
      values[(size_t)row * (size_t)dp->devices + (size_t)d] = UNBOUND;
  }
  dp->bind_values[(size_t)row * (size_t)dp->devices + (size_t)device] = value;
  return CN_OK;
}

/* FNV-1a over 8-byte words (then the last bytes): a parameter's bits, compared across ranks. */
static uint64_t hash_bits(const unsigned char *bytes, size_t n) {
  uint64_t hash = 1469598103934665603u;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t word;
    memcpy(&word, bytes + i, 8);
    hash = (hash ^ word) * 1099511628211u;
  }
  for (; i < n; i++) hash = (hash ^ bytes[i]) * 1099511628211u;
  return hash;
}

/* cn_dp_check after `local` (not CN_OK: this rank failed already, with its message; across ranks
 * it still takes part in the comparison, sending its failure). */
static cn_status check_after(cn_dp *dp, cn_status local) {
  cn_status status = local;
  uint64_t *hashes = cn_calloc(dp->ctx, (size_t)dp->n_params, sizeof *hashes);
  const char **names = hashes ? cn_calloc(dp->ctx, (size_t)dp->n_params, sizeof *names) : NULL;
  if (!names && status == CN_OK) status = CN_ERR_NOMEM;
  for (int i = 0; i < dp->n_params && status == CN_OK; i++) {
    cn_node *node = cn_tensor_value(dp->params[i]);
    const size_t count = (size_t)cn_node_numel(node), bytes = count * cn_prec_bytes(node->prec);
    unsigned char *first = cn_malloc(dp->ctx, 2 * (bytes ? bytes : 1));
    if (!first) {
      status = CN_ERR_NOMEM;
      break;
    }
    unsigned char *other = first + bytes;
    status = cn_node_get_device_cells(node, false, 0, first, count);
    for (int d = 1; d < dp->devices && status == CN_OK; d++) {
      status = cn_node_get_device_cells(node, false, d, other, count);
      if (status == CN_OK && memcmp(first, other, bytes) != 0)
        status = cn_fail(dp->ctx, CN_ERR_RUNTIME,
                         "cn_dp_check: parameter '%s' differs between device 0 and device %d",
                         dp->params[i]->label, d);
    }
    hashes[i] = hash_bits(first, bytes);
    names[i] = dp->params[i]->label;
    free(first);
  }
  /* Across ranks (collective, also after a failure here): device 0's bits against rank 0's. */
  if (dp->ranks > 1)
    status = cn_dist_compare_hashes(dp->ctx, status, names ? dp->n_params : 0, hashes, names,
                                    "cn_dp_check", "parameter");
  free(hashes);
  free(names);
  return status;
}

cn_status cn_dp_check(cn_dp *dp) {
  return dp ? check_after(dp, CN_OK) : CN_ERR_INVALID;
}

/* Device 0's values of what the update writes (the parameters, the optimizer's state) and the
 * loss onto the host, for host readers (evaluation, checkpoints). */
static cn_status to_host(cn_dp *dp) {
  const cn_ll_proc *proc = cn_routine_proc(dp->update);
  cn_status status = CN_OK;
  for (int i = 0; i < proc->n_params && status == CN_OK; i++)
    if (cn_routine_writes(dp->update, i) && proc->params[i].node->replicated)
      status = cn_node_transfer(proc->params[i].node, 0, CN_DEVICE_HOST, false);
  /* (across ranks the host holds the loss already: the ranks' all-reduce writes it there) */
  if (status == CN_OK && dp->loss && !dp->dist)
    status = cn_node_transfer(dp->loss, 0, CN_DEVICE_HOST, false);
  return status;
}

cn_status cn_dp_step(cn_dp *dp) {
  if (!dp) return CN_ERR_INVALID;
  cn_status status = CN_OK;
  for (int d = 0; d < dp->devices && status == CN_OK; d++) {
    status = bind_device(dp, d);
    if (status == CN_OK) status = cn_routine_run_on(dp->grad, d);
  }
  /* The one merge of the step: the gradients of every device summed (cn_allreduce_run); across
   * ranks cn_dist_allreduce_run runs that first, then sums the ranks' in rank order and writes
   * the result to the host's value, from which every device's copy is refreshed at the update. */
  if (status == CN_OK)
    status = dp->dist ? cn_dist_allreduce_run(dp->dist) : cn_allreduce_run(dp->allreduce);
  for (int d = 0; d < dp->devices && status == CN_OK; d++)
    status = cn_routine_run_on(dp->update, d);
  if (status == CN_OK) status = cn_dp_check(dp);
  return status == CN_OK ? to_host(dp) : status;
}

void cn_dp_free(cn_dp *dp) {
  if (!dp) return;
  cn_allreduce_free(dp->allreduce);
  cn_dist_allreduce_free(dp->dist);
  cn_ctx_remove_cleanup(dp->ctx, dp->cleanup);
  dp_cleanup(dp);
}

/* The loss's training state (cn_graph_state): malloc'd, its count in *n; NULL with a message. */
static cn_named_node *dp_state(cn_dp *dp, int *n) {
  *n = cn_graph_state(dp->g, dp->loss_tensor, NULL, 0);
  if (*n < 0) return NULL;
  cn_named_node *state = cn_malloc(dp->ctx, sizeof *state * (size_t)(*n ? *n : 1));
  if (state) *n = cn_graph_state(dp->g, dp->loss_tensor, state, *n);
  return state;
}

cn_status cn_dp_save(cn_dp *dp, const char *path) {
  if (!dp) return CN_ERR_INVALID;
  int n = 0;
  cn_named_node *state = dp_state(dp, &n);
  cn_status status = !state ? cn_ctx_status(dp->ctx)
                     : cn_dist_rank() == 0
                         ? cn_data_save_safetensors(dp->ctx, path, n, state, 0, NULL)
                         : CN_OK;
  free(state);
  /* Every rank leaves once rank 0's file is complete (or with its failure). */
  return dp->ranks > 1 ? cn_dist_root_status(dp->ctx, status, "cn_dp_save") : status;
}

cn_status cn_dp_load(cn_dp *dp, const char *path) {
  if (!dp) return CN_ERR_INVALID;
  int n = 0;
  cn_named_node *state = dp_state(dp, &n);
  /* A host write: every device's copy is refreshed from it at its next use. */
  cn_status status = state ? cn_data_load_safetensors(dp->ctx, path, n, state, NULL, NULL)
                           : cn_ctx_status(dp->ctx);
  free(state);
  /* Every device of every rank now holds the file's bits (checked; collective across ranks). */
  return check_after(dp, status);
}
