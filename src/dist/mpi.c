/* The MPI layer (include/cannl.h cn_dist_*): ranks, the all-reduce of nodes across ranks, the
 * start-up checks of the ranks' node lists and compiled routines, and the comparison of hashes
 * across ranks (the data-parallel driver's check). The only file of libcannl that includes <mpi.h>;
 * built without MPI (CANNL_HAVE_MPI undefined) its entry points fail with "cannl was built
 * without MPI".
 *
 * Invariants: every wait on the other ranks is a non-blocking collective polled against the
 * deadline of the init's timeout, so no call blocks for longer (a dead or stalled rank is an
 * error, never a hang); the ranks' sums are added in rank order by the rank owning the segment,
 * so every rank receives the same bits (copied, never recomputed) and the grouping depends only
 * on the rank count; the communicator is a duplicate of MPI_COMM_WORLD with errors returned. */
#include "dist/dist.h"
#include "ir/ir.h"
#include "runtime/routine.h"

#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef CANNL_HAVE_MPI
#include <mpi.h>
#endif

#define DIST_DEFAULT_TIMEOUT 20.0

static struct {
  bool ready;       /* cn_dist_init succeeded, not finalized */
  bool initialized; /* cn_dist_init called MPI_Init_thread (so finalize ends MPI) */
  int rank, size;
  double timeout;
#ifdef CANNL_HAVE_MPI
  MPI_Comm comm;
#endif
} dist = {false,
          false,
          0,
          1,
          DIST_DEFAULT_TIMEOUT
#ifdef CANNL_HAVE_MPI
          ,
          MPI_COMM_NULL
#endif
};

int cn_dist_rank(void) {
  return dist.ready ? dist.rank : 0;
}
int cn_dist_size(void) {
  return dist.ready ? dist.size : 1;
}
bool cn_dist_writes_files(void) {
  return cn_dist_rank() == 0;
}

#ifdef CANNL_HAVE_MPI

/* A node's label, precision, dims and padding, as the start-up checks compare them. */
static void describe_node(cn_sbuf *sb, const cn_node *node) {
  cn_sbuf_printf(sb, "`%s` %s [", node->label ? node->label : "", cn_prec_name(node->prec));
  for (int a = 0; a < node->rank; a++)
    cn_sbuf_printf(sb, "%s%" PRId64, a ? "," : "", node->dims[a]);
  cn_sbuf_putc(sb, ']');
  for (int a = 0; a < node->rank; a++)
    if (node->pad[a][0] || node->pad[a][1])
      cn_sbuf_printf(sb, " padding %d:%" PRId64 "+%" PRId64, a, node->pad[a][0], node->pad[a][1]);
}

/* One line per node, then the device count: what must agree between ranks. In the context's
 * arena, NULL with a message. */
static const char *describe_nodes(cn_ctx *ctx, int n, cn_node *const *nodes) {
  cn_sbuf sb = {0};
  for (int k = 0; k < n; k++) {
    describe_node(&sb, nodes[k]);
    cn_sbuf_putc(&sb, '\n');
  }
  cn_sbuf_printf(&sb, "%d CPU devices\n", cn_ctx_device_count(ctx));
  return cn_sbuf_finish(ctx, &sb);
}

static uint64_t fnv1a(uint64_t hash, const char *text) {
  for (const char *c = text; *c; c++) hash = (hash ^ (unsigned char)*c) * 1099511628211u;
  return hash;
}
#define FNV_BASIS 1469598103934665603u

/* Per routine a line per buffer it uses (its node, "(merge)" for a merge buffer) and a line with
 * the hash of its code: the loop IR after optimization and the generated source when the backend
 * has one (what a compile cache keys on), so that two ranks running other computations on the
 * same shapes differ too. In the context's arena, NULL with a message. */
static const char *describe_routines(cn_ctx *ctx, int n, cn_routine *const *routines) {
  cn_sbuf sb = {0};
  for (int k = 0; k < n; k++) {
    const cn_ll_proc *proc = cn_routine_proc(routines[k]);
    for (int i = 0; i < proc->n_params; i++) {
      cn_sbuf_printf(&sb, "routine `%s` buffer ", proc->name);
      describe_node(&sb, proc->params[i].node);
      cn_sbuf_puts(&sb, proc->params[i].merge ? " (merge)\n" : "\n");
    }
    uint64_t hash = fnv1a(FNV_BASIS, cn_routine_loops(routines[k]));
    const char *source = cn_routine_source(routines[k]);
    if (source) hash = fnv1a(hash, source);
    cn_sbuf_printf(&sb, "routine `%s` code %016" PRIx64 " (%s)\n", proc->name, hash,
                   source ? "loop IR and generated source" : "loop IR");
  }
  return cn_sbuf_finish(ctx, &sb);
}

/* acc[i] = acc[i] + x[i] for count stored cells: float precisions add in double and round to the
 * precision (for single and double that is the IEEE addition of the precision, so those two take
 * the plain loop), integers wrap. */
static void add_cells(cn_prec prec, unsigned char *acc, const unsigned char *x, int64_t count) {
  switch (prec) {
#define ADD_LOOP(ID, T, SUM)                                                                       \
  case CN_PREC_##ID:                                                                               \
    for (int64_t i = 0; i < count; i++) {                                                          \
      T a, b;                                                                                      \
      memcpy(&a, acc + (size_t)i * sizeof a, sizeof a);                                            \
      memcpy(&b, x + (size_t)i * sizeof b, sizeof b);                                              \
      a = SUM;                                                                                     \
      memcpy(acc + (size_t)i * sizeof a, &a, sizeof a);                                            \
    }                                                                                              \
    return;
    ADD_LOOP(SINGLE, float, a + b)
    ADD_LOOP(DOUBLE, double, a + b)
    ADD_LOOP(BYTE, uint8_t, (uint8_t)((uint64_t)a + (uint64_t)b))
    ADD_LOOP(UINT16, uint16_t, (uint16_t)((uint64_t)a + (uint64_t)b))
    ADD_LOOP(INT32, int32_t, (int32_t)((uint64_t)a + (uint64_t)b))
    ADD_LOOP(UINT32, uint32_t, (uint32_t)((uint64_t)a + (uint64_t)b))
    ADD_LOOP(INT64, int64_t, (int64_t)((uint64_t)a + (uint64_t)b))
    ADD_LOOP(UINT64, uint64_t, a + b)
#undef ADD_LOOP
  default: {
    size_t bytes = cn_prec_bytes(prec);
    for (int64_t i = 0; i < count; i++) {
      unsigned char *a = acc + (size_t)i * bytes;
      cn_prec_cell_from_double(
          prec,
          cn_prec_cell_to_double(prec, a) + cn_prec_cell_to_double(prec, x + (size_t)i * bytes), a);
    }
  }
  }
}

struct cn_dist_allreduce {
  cn_ctx *ctx;
  int n;
  cn_node **nodes;
  cn_allreduce *local;  /* the devices' in-process all-reduce; NULL without devices */
  int64_t *cells;       /* cells of each node */
  size_t total;         /* bytes of all the nodes' cells */
  unsigned char *full;  /* every node's cells, node after node (total bytes) */
  unsigned char *send;  /* the same, by destination rank then node (total bytes) */
  unsigned char *recv;  /* my segment of every node from every rank, by source rank */
  int *counts, *displs; /* bytes of rank r's segments of all nodes, their offsets in `send` */
  cn_cleanup *cleanup;
};

static char term_message[160];
static size_t term_length;

static void on_sigterm(int sig) {
  (void)sig;
  ssize_t written = write(STDERR_FILENO, term_message, term_length);
  (void)written;
  _exit(143);
}

bool cn_dist_available(void) {
  return true;
}

static cn_status fail_mpi(cn_ctx *ctx, int code, const char *what) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS)
    snprintf(text, sizeof text, "code %d", code);
  return cn_fail(ctx, CN_ERR_RUNTIME, "rank %d of %d: %s failed: %s", dist.rank, dist.size, what,
                 text);
}

/* Polls a started collective until it completes, an error, or the deadline. Polling rather than
 * MPI_Wait: a blocking wait on a rank that died or stalls never returns. */
static cn_status dist_wait(cn_ctx *ctx, MPI_Request *request, const char *what) {
  double deadline = MPI_Wtime() + dist.timeout;
  for (long spin = 0;; spin++) {
    int done = 0;
    int code = MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (code != MPI_SUCCESS) return fail_mpi(ctx, code, what);
    if (done) return CN_OK;
    if (MPI_Wtime() > deadline)
      return cn_fail(ctx, CN_ERR_RUNTIME,
                     "rank %d of %d: %s did not complete within %g s: another rank died or "
                     "stalled (CANNL_DIST_TIMEOUT)",
                     dist.rank, dist.size, what, dist.timeout);
    /* Spin a little (a short collective completes in microseconds), then yield the core: on an
     * oversubscribed machine the rank being waited for needs it. */
    if (spin > 2000) nanosleep(&(struct timespec){0, 50000}, NULL);
  }
}

cn_status cn_dist_init(cn_ctx *ctx, double timeout_s) {
  if (!ctx) return CN_ERR_INVALID;
  if (dist.ready) return CN_OK;
  if (timeout_s < 0)
    return cn_fail(ctx, CN_ERR_INVALID, "cn_dist_init: timeout %g s < 0", timeout_s);
  if (timeout_s == 0) {
    const char *env = getenv("CANNL_DIST_TIMEOUT");
    char *end = NULL;
    timeout_s = env ? strtod(env, &end) : DIST_DEFAULT_TIMEOUT;
    if (env && (end == env || *end || !(timeout_s > 0)))
      return cn_fail(ctx, CN_ERR_INVALID, "CANNL_DIST_TIMEOUT=%s: a number of seconds > 0 expected",
                     env);
  }
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) /* MPI_Init after MPI_Finalize is erroneous: Open MPI ends the process */
    return cn_fail(ctx, CN_ERR_INVALID, "cn_dist_init: MPI was finalized, it cannot start again");
  if (!initialized) {
    int provided = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
      return cn_fail(ctx, CN_ERR_RUNTIME, "cn_dist_init: MPI_Init_thread failed");
    dist.initialized = true;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &dist.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &dist.size);
  dist.timeout = timeout_s;
  MPI_Request request;
  int code = MPI_Comm_idup(MPI_COMM_WORLD, &dist.comm, &request);
  cn_status status = code == MPI_SUCCESS ? dist_wait(ctx, &request, "cn_dist_init (MPI_Comm_idup)")
                                         : fail_mpi(ctx, code, "cn_dist_init (MPI_Comm_idup)");
  if (status != CN_OK) return status;
  MPI_Comm_set_errhandler(dist.comm, MPI_ERRORS_RETURN);
  struct sigaction old;
  if (sigaction(SIGTERM, NULL, &old) == 0 && old.sa_handler == SIG_DFL) {
    int len = snprintf(term_message, sizeof term_message,
                       "cannl rank %d of %d: stopped by the launcher (SIGTERM): another rank "
                       "failed or the job was cancelled\n",
                       dist.rank, dist.size);
    term_length = len > 0 && (size_t)len < sizeof term_message ? (size_t)len : 0;
    struct sigaction action = {0};
    action.sa_handler = on_sigterm;
    sigemptyset(&action.sa_mask);
    sigaction(SIGTERM, &action, NULL);
  }
  dist.ready = true;
  return CN_OK;
}

cn_status cn_dist_finalize(cn_ctx *ctx) {
  if (!dist.ready) return CN_OK;
  dist.ready = false;
  MPI_Comm_free(&dist.comm);
  if (dist.initialized && MPI_Finalize() != MPI_SUCCESS)
    return cn_fail(ctx, CN_ERR_RUNTIME, "cn_dist_finalize: MPI_Finalize failed");
  dist.initialized = false;
  return CN_OK;
}

void cn_dist_abort(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
  }
}

static void dist_allreduce_cleanup(void *arg) {
  cn_dist_allreduce *ar = arg;
  free(ar->nodes);
  free(ar->cells);
  free(ar->full);
  free(ar->send);
  free(ar->recv);
  free(ar->counts);
  free(ar->displs);
  free(ar);
}

/* Rank r's segment of a node of `cells` cells: [cells * r / size, cells * (r + 1) / size). */
static int64_t segment_start(int64_t cells, int r) {
  return cells * r / dist.size;
}

/* The ranks' texts (one line per item) agree (hashes gathered); else every rank fails naming
 * the first rank whose text differs from rank 0's and its first line that differs ("rank 1's
 * ITEM 3 is ... where rank 0's is ..." where item is not NULL and the line is not the last, "rank
 * 1 has ... where rank 0 has ..." otherwise). A text "error: MESSAGE" is a rank's own failure:
 * every rank fails with that message, naming the rank. Collective. */
static cn_status check_texts(cn_ctx *ctx, const char *text, const char *caller, const char *lists,
                             const char *item) {
  uint64_t hash = fnv1a(FNV_BASIS, text);
  uint64_t *hashes = cn_calloc(ctx, (size_t)dist.size, sizeof *hashes);
  int *lengths = cn_calloc(ctx, (size_t)dist.size, sizeof *lengths);
  int *offsets = cn_calloc(ctx, (size_t)dist.size, sizeof *offsets);
  char *all = NULL, what[160];
  cn_status status = hashes && lengths && offsets ? CN_OK : CN_ERR_NOMEM;
  MPI_Request request;
  snprintf(what, sizeof what, "%s (the %s' hashes)", caller, lists);
  if (status == CN_OK) {
    int code = MPI_Iallgather(&hash, 8, MPI_BYTE, hashes, 8, MPI_BYTE, dist.comm, &request);
    status = code == MPI_SUCCESS ? dist_wait(ctx, &request, what) : fail_mpi(ctx, code, what);
  }
  int differs = 0;
  for (int r = 1; status == CN_OK && r < dist.size; r++)
    if (hashes[r] != hashes[0]) differs = r;
  if (status == CN_OK && differs) {
    /* Every rank saw the same hashes, so every rank takes this branch: gather the texts. */
    int length = (int)strlen(text) + 1;
    snprintf(what, sizeof what, "%s (the %s)", caller, lists);
    int code = MPI_Iallgather(&length, 1, MPI_INT, lengths, 1, MPI_INT, dist.comm, &request);
    status = code == MPI_SUCCESS ? dist_wait(ctx, &request, what) : fail_mpi(ctx, code, what);
    size_t sum = 0;
    for (int r = 0; status == CN_OK && r < dist.size; r++) {
      offsets[r] = (int)sum;
      sum += (size_t)lengths[r];
    }
    if (status == CN_OK && !(all = cn_malloc(ctx, sum))) status = CN_ERR_NOMEM;
    if (status == CN_OK) {
      code = MPI_Iallgatherv(text, length, MPI_CHAR, all, lengths, offsets, MPI_CHAR, dist.comm,
                             &request);
      status = code == MPI_SUCCESS ? dist_wait(ctx, &request, what) : fail_mpi(ctx, code, what);
    }
    for (int r = 1; status == CN_OK && r < dist.size; r++) {
      const char *mine = all + offsets[r], *first = all;
      if (strcmp(mine, first) == 0) continue;
      int line = 0;
      while (*mine && *mine == *first) {
        if (*mine == '\n') line++;
        mine++;
        first++;
      }
      while (mine > all + offsets[r] && mine[-1] != '\n') mine--, first--;
      int a = (int)strcspn(mine, "\n"), b = (int)strcspn(first, "\n");
      int n_lines = 0;
      for (const char *c = all + offsets[r]; *c; c++) n_lines += *c == '\n';
      const char *error = strncmp(mine, "error: ", 7) == 0 ? mine : first;
      int failed = error == mine ? r : 0, length = error == mine ? a : b;
      if (strncmp(error, "error: ", 7) == 0)
        status = cn_fail(ctx, CN_ERR_INVALID, "rank %d of %d: %.*s", failed, dist.size, length - 7,
                         error + 7);
      else if (item && line < n_lines - 1)
        status = cn_fail(ctx, CN_ERR_INVALID,
                         "%s: the ranks' %s differ: rank %d's %s %d is %.*s where rank 0's is %.*s",
                         caller, lists, r, item, line, a, mine, b, first);
      else
        status = cn_fail(ctx, CN_ERR_INVALID,
                         "%s: the ranks' %s differ: rank %d has %.*s where rank 0 has %.*s", caller,
                         lists, r, a, mine, b, first);
      break;
    }
  }
  free(hashes);
  free(lengths);
  free(offsets);
  free(all);
  return status;
}

/* check_texts of `text`, or where this rank failed (local not CN_OK, or text NULL: the message
 * is the context's), of that failure, which every rank then reports. */
static cn_status agree(cn_ctx *ctx, cn_status local, const char *text, const char *caller,
                       const char *lists, const char *item) {
  if (local != CN_OK || !text) {
    cn_sbuf sb = {0};
    cn_sbuf_printf(&sb, "error: %s\n", cn_ctx_error(ctx));
    if (sb.failed || !sb.data) {
      cn_sbuf_free(&sb);
      return CN_ERR_NOMEM;
    }
    cn_status status = check_texts(ctx, sb.data, caller, lists, item);
    cn_sbuf_free(&sb);
    return local != CN_OK ? local : status != CN_OK ? status : CN_ERR_NOMEM;
  }
  return check_texts(ctx, text, caller, lists, item);
}

cn_status cn_dist_check_routines_after(cn_ctx *ctx, cn_status local, int n,
                                       cn_routine *const *routines) {
  if (!ctx) return CN_ERR_INVALID;
  if (!dist.ready)
    return cn_fail(ctx, CN_ERR_INVALID,
                   "cn_dist_check_routines: MPI is not initialized (cn_dist_init)");
  if (local == CN_OK && (n < 1 || !routines))
    local =
        cn_fail(ctx, CN_ERR_INVALID, "cn_dist_check_routines: %d routines, at least one needed", n);
  for (int k = 0; local == CN_OK && k < n; k++)
    if (!routines[k])
      local = cn_fail(ctx, CN_ERR_INVALID, "cn_dist_check_routines: routine %d is NULL", k);
  const char *text = local == CN_OK ? describe_routines(ctx, n, routines) : NULL;
  return agree(ctx, local, text, "cn_dist_check_routines", "compiled routines", NULL);
}

cn_status cn_dist_check_routines(cn_ctx *ctx, int n, cn_routine *const *routines) {
  return cn_dist_check_routines_after(ctx, CN_OK, n, routines);
}

/* Why this rank cannot all-reduce the list (a status and a message), before any exchange. */
static cn_status refusal(cn_ctx *ctx, int n, cn_node *const *nodes) {
  if (n < 1 || !nodes)
    return cn_fail(ctx, CN_ERR_INVALID, "cn_dist_allreduce_create: %d nodes, at least one needed",
                   n);
  for (int k = 0; k < n; k++) {
    const char *why = !nodes[k]                                          ? "is NULL"
                      : nodes[k]->mode != CN_MEM_MATERIALIZED            ? "is not materialized"
                      : cn_prec_kind_of(nodes[k]->prec) == CN_PKIND_BITS ? "has no addition"
                                                                         : NULL;
    for (int j = 0; !why && j < k; j++)
      if (nodes[j] == nodes[k]) why = "is listed twice";
    if (why)
      return cn_fail(ctx, CN_ERR_INVALID, "cn_dist_allreduce_create: node %d (%s) %s", k,
                     nodes[k] ? cn_node_describe(nodes[k]) : "-", why);
  }
  return CN_OK;
}

cn_dist_allreduce *cn_dist_allreduce_create(cn_ctx *ctx, int n, cn_node *const *nodes,
                                            cn_backend_kind backend) {
  if (!ctx) return NULL;
  if (!dist.ready) {
    cn_fail(ctx, CN_ERR_INVALID, "cn_dist_allreduce_create: MPI is not initialized (cn_dist_init)");
    return NULL;
  }
  /* A rank's own refusal still takes part in the exchange below (its text is the message), so
   * that every rank fails with it rather than waiting for this rank until the timeout. */
  cn_dist_allreduce *ar = cn_calloc(ctx, 1, sizeof *ar);
  if (!ar) return NULL;
  ar->ctx = ctx;
  ar->n = n;
  cn_status status = refusal(ctx, n, nodes);
  if (status == CN_OK && cn_ctx_device_count(ctx) > 0 &&
      !(ar->local = cn_allreduce_create(ctx, n, nodes, backend)))
    status = CN_ERR_INVALID;
  const char *text = status == CN_OK ? describe_nodes(ctx, n, nodes) : NULL;
  status = agree(ctx, status, text, "cn_dist_allreduce_create", "node lists", "node");
  ar->nodes = status == CN_OK ? cn_malloc(ctx, sizeof *ar->nodes * (size_t)n) : NULL;
  ar->cells = ar->nodes ? cn_calloc(ctx, (size_t)n, sizeof *ar->cells) : NULL;
  ar->counts = ar->cells ? cn_calloc(ctx, (size_t)dist.size, sizeof *ar->counts) : NULL;
  ar->displs = ar->counts ? cn_calloc(ctx, (size_t)dist.size, sizeof *ar->displs) : NULL;
  if (ar->displs) {
    memcpy(ar->nodes, nodes, sizeof *nodes * (size_t)n);
    size_t total = 0;
    for (int k = 0; k < n; k++) {
      ar->cells[k] = cn_node_numel(nodes[k]);
      total += (size_t)ar->cells[k] * cn_prec_bytes(nodes[k]->prec);
    }
    if (total > INT_MAX) {
      status = cn_fail(ctx, CN_ERR_UNSUPPORTED,
                       "cn_dist_allreduce_create: %zu bytes of cells, at most %d per all-reduce",
                       total, INT_MAX);
    } else {
      ar->total = total;
      size_t offset = 0;
      for (int r = 0; r < dist.size; r++) {
        size_t bytes = 0;
        for (int k = 0; k < n; k++)
          bytes += (size_t)(segment_start(ar->cells[k], r + 1) - segment_start(ar->cells[k], r)) *
                   cn_prec_bytes(nodes[k]->prec);
        ar->counts[r] = (int)bytes;
        ar->displs[r] = (int)offset;
        offset += bytes;
      }
      size_t mine = (size_t)ar->counts[dist.rank] * (size_t)dist.size;
      ar->full = cn_malloc(ctx, total + 1);
      ar->send = ar->full ? cn_malloc(ctx, total + 1) : NULL;
      ar->recv = ar->send ? cn_malloc(ctx, mine + 1) : NULL;
      if (!ar->recv) status = CN_ERR_NOMEM;
    }
  } else if (status == CN_OK) {
    status = CN_ERR_NOMEM;
  }
  if (status == CN_OK && !(ar->cleanup = cn_ctx_add_cleanup(ctx, dist_allreduce_cleanup, ar)))
    status = CN_ERR_NOMEM;
  if (status != CN_OK) {
    cn_allreduce_free(ar->local);
    dist_allreduce_cleanup(ar);
    return NULL;
  }
  return ar;
}

/* Each node's cells as this rank holds them (device 0's after the in-process all-reduce). */
static cn_status gather_local(cn_dist_allreduce *ar) {
  cn_status status = ar->local ? cn_allreduce_run(ar->local) : CN_OK;
  size_t offset = 0;
  for (int k = 0; k < ar->n && status == CN_OK; k++) {
    cn_node *node = ar->nodes[k];
    size_t count = (size_t)ar->cells[k];
    status = ar->local ? cn_node_get_device_cells(node, false, 0, ar->full + offset, count)
                       : cn_node_get_cells(node, false, ar->full + offset, count);
    offset += count * cn_prec_bytes(node->prec);
  }
  return status;
}

/* Copies between `full` (node after node) and `send` (rank r's segments of every node at
 * displs[r]); to_send picks the direction. */
static void shuffle(cn_dist_allreduce *ar, bool to_send) {
  size_t node_offset = 0;
  for (int k = 0; k < ar->n; k++) {
    size_t bytes = cn_prec_bytes(ar->nodes[k]->prec);
    for (int r = 0; r < dist.size; r++) {
      int64_t start = segment_start(ar->cells[k], r), end = segment_start(ar->cells[k], r + 1);
      size_t at = (size_t)ar->displs[r];
      for (int j = 0; j < k; j++)
        at += (size_t)(segment_start(ar->cells[j], r + 1) - segment_start(ar->cells[j], r)) *
              cn_prec_bytes(ar->nodes[j]->prec);
      unsigned char *f = ar->full + node_offset + (size_t)start * bytes, *s = ar->send + at;
      size_t len = (size_t)(end - start) * bytes;
      if (to_send)
        memcpy(s, f, len);
      else
        memcpy(f, s, len);
    }
    node_offset += (size_t)ar->cells[k] * bytes;
  }
}

cn_status cn_dist_allreduce_run(cn_dist_allreduce *ar) {
  if (!ar) return CN_ERR_INVALID;
  cn_ctx *ctx = ar->ctx;
  if (!dist.ready)
    return cn_fail(ctx, CN_ERR_INVALID, "cn_dist_allreduce_run: MPI is not initialized");
  cn_status status = gather_local(ar);
  if (status != CN_OK) return status;
  shuffle(ar, true);
  int mine = ar->counts[dist.rank];
  int *recv_counts = cn_calloc(ctx, (size_t)dist.size, sizeof *recv_counts);
  int *recv_displs = recv_counts ? cn_calloc(ctx, (size_t)dist.size, sizeof *recv_displs) : NULL;
  if (!recv_displs) {
    free(recv_counts);
    return CN_ERR_NOMEM;
  }
  for (int r = 0; r < dist.size; r++) {
    recv_counts[r] = mine;
    recv_displs[r] = r * mine;
  }
  MPI_Request request;
  const char *what = "cn_dist_allreduce_run (the segments to their owners)";
  int code = MPI_Ialltoallv(ar->send, ar->counts, ar->displs, MPI_BYTE, ar->recv, recv_counts,
                            recv_displs, MPI_BYTE, dist.comm, &request);
  status = code == MPI_SUCCESS ? dist_wait(ctx, &request, what) : fail_mpi(ctx, code, what);
  free(recv_counts);
  free(recv_displs);
  if (status != CN_OK) return status;
  /* My segment's sum, in rank order, into rank 0's contribution, then into send at my place. */
  size_t at = 0;
  for (int k = 0; k < ar->n; k++) {
    cn_prec prec = ar->nodes[k]->prec;
    size_t bytes = cn_prec_bytes(prec);
    int64_t count =
        segment_start(ar->cells[k], dist.rank + 1) - segment_start(ar->cells[k], dist.rank);
    for (int r = 1; r < dist.size; r++)
      add_cells(prec, ar->recv + at, ar->recv + (size_t)r * (size_t)mine + at, count);
    at += (size_t)count * bytes;
  }
  memcpy(ar->send + ar->displs[dist.rank], ar->recv, (size_t)mine);
  what = "cn_dist_allreduce_run (the sums to every rank)";
  code = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_BYTE, ar->send, ar->counts, ar->displs, MPI_BYTE,
                         dist.comm, &request);
  status = code == MPI_SUCCESS ? dist_wait(ctx, &request, what) : fail_mpi(ctx, code, what);
  if (status != CN_OK) return status;
  shuffle(ar, false);
  size_t offset = 0;
  for (int k = 0; k < ar->n && status == CN_OK; k++) {
    size_t count = (size_t)ar->cells[k];
    /* A host write: the host's value and, at their next use, every device's. */
    status = cn_node_set_cells(ar->nodes[k], false, ar->full + offset, count);
    offset += count * cn_prec_bytes(ar->nodes[k]->prec);
  }
  return status;
}

cn_status cn_dist_compare_hashes(cn_ctx *ctx, cn_status local, int n, const uint64_t *hashes,
                                 const char *const *names, const char *caller, const char *noun) {
  if (!dist.ready || dist.size == 1) return local;
  /* Each rank's status, then its hashes (zeros after a failure: they are not compared). */
  const size_t row = (size_t)n + 1;
  uint64_t *mine = cn_calloc(ctx, row, sizeof *mine);
  uint64_t *all = mine ? cn_calloc(ctx, row * (size_t)dist.size, sizeof *all) : NULL;
  if (!all) {
    free(mine);
    return CN_ERR_NOMEM;
  }
  mine[0] = (uint64_t)local;
  if (local == CN_OK) memcpy(mine + 1, hashes, sizeof *hashes * (size_t)n);
  char what[160];
  snprintf(what, sizeof what, "%s (the %ss' hashes)", caller, noun);
  MPI_Request request;
  int code = MPI_Iallgather(mine, (int)row * 8, MPI_BYTE, all, (int)row * 8, MPI_BYTE, dist.comm,
                            &request);
  cn_status status =
      code == MPI_SUCCESS ? dist_wait(ctx, &request, what) : fail_mpi(ctx, code, what);
  for (int r = 0; status == CN_OK && r < dist.size; r++)
    if (all[(size_t)r * row] != CN_OK)
      status = r == dist.rank ? local
                              : cn_fail(ctx, (cn_status)all[(size_t)r * row],
                                        "%s: rank %d of %d failed (its message is on rank %d's "
                                        "error output)",
                                        caller, r, dist.size, r);
  for (int k = 0; status == CN_OK && k < n; k++)
    for (int r = 1; status == CN_OK && r < dist.size; r++)
      if (all[(size_t)r * row + 1 + (size_t)k] != all[1 + (size_t)k])
        status =
            cn_fail(ctx, CN_ERR_RUNTIME, "%s: %s '%s' differs between rank 0 and rank %d of %d",
                    caller, noun, names[k], r, dist.size);
  free(mine);
  free(all);
  return status;
}

cn_status cn_dist_root_status(cn_ctx *ctx, cn_status status, const char *what) {
  if (!dist.ready || dist.size == 1) return status;
  int root = (int)status;
  MPI_Request request;
  int code = MPI_Ibcast(&root, 1, MPI_INT, 0, dist.comm, &request);
  cn_status waited =
      code == MPI_SUCCESS ? dist_wait(ctx, &request, what) : fail_mpi(ctx, code, what);
  if (waited != CN_OK || dist.rank == 0) return waited != CN_OK ? waited : status;
  return root == CN_OK
             ? CN_OK
             : cn_fail(ctx, (cn_status)root,
                       "%s: rank 0 failed (its message is on rank 0's error output)", what);
}

void cn_dist_allreduce_free(cn_dist_allreduce *ar) {
  if (!ar) return;
  cn_allreduce_free(ar->local);
  cn_ctx_remove_cleanup(ar->ctx, ar->cleanup);
  dist_allreduce_cleanup(ar);
}

#else /* built without MPI */

#define NO_MPI "cannl was built without MPI (configure with an MPI installed: make deps)"

bool cn_dist_available(void) {
  return false;
}

cn_status cn_dist_init(cn_ctx *ctx, double timeout_s) {
  (void)timeout_s;
  return ctx ? cn_fail(ctx, CN_ERR_UNSUPPORTED, "cn_dist_init: " NO_MPI) : CN_ERR_UNSUPPORTED;
}

cn_status cn_dist_finalize(cn_ctx *ctx) {
  (void)ctx;
  return CN_OK;
}

void cn_dist_abort(int code) {
  (void)code;
}

cn_status cn_dist_root_status(cn_ctx *ctx, cn_status status, const char *what) {
  (void)ctx, (void)what;
  return status;
}

cn_status cn_dist_compare_hashes(cn_ctx *ctx, cn_status local, int n, const uint64_t *hashes,
                                 const char *const *names, const char *caller, const char *noun) {
  (void)ctx, (void)n, (void)hashes, (void)names, (void)caller, (void)noun;
  return local;
}

cn_status cn_dist_check_routines_after(cn_ctx *ctx, cn_status local, int n,
                                       cn_routine *const *routines) {
  (void)n, (void)routines;
  if (!ctx) return CN_ERR_INVALID;
  return local != CN_OK ? local
                        : cn_fail(ctx, CN_ERR_UNSUPPORTED, "cn_dist_check_routines: " NO_MPI);
}

cn_status cn_dist_check_routines(cn_ctx *ctx, int n, cn_routine *const *routines) {
  return cn_dist_check_routines_after(ctx, CN_OK, n, routines);
}

cn_dist_allreduce *cn_dist_allreduce_create(cn_ctx *ctx, int n, cn_node *const *nodes,
                                            cn_backend_kind backend) {
  (void)n, (void)nodes, (void)backend;
  if (ctx) cn_fail(ctx, CN_ERR_UNSUPPORTED, "cn_dist_allreduce_create: " NO_MPI);
  return NULL;
}

cn_status cn_dist_allreduce_run(cn_dist_allreduce *ar) {
  (void)ar;
  return CN_ERR_UNSUPPORTED;
}

void cn_dist_allreduce_free(cn_dist_allreduce *ar) {
  (void)ar;
}

#endif
