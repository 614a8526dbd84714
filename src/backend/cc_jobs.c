/* The generated-C backend's compilations as jobs (the rest of the backend is cc.c): the scheduler
 * of a batch's compiler processes, and compilations running behind their routines.
 *
 * A compilation is started (cn_cc_start in cc.c: generate the source, look the object up in the
 * cache and, on a miss, write the source), compiled (its compiler processes, scheduled with the
 * other jobs of its batch) and finished (cn_cc_finish: load the object, publish it with its
 * record).
 *
 * The compiler processes of a batch (one per piece of each source, cn_cgen_pieces, and one link
 * per source in pieces) run one per online processor at a time; when one ends, a free processor
 * takes the next waiting one at once. The next is a link when one is due (it is short and ends
 * its job), else the first waiting piece in order of the jobs' priority, then of size (in KB, so
 * that sources of about one size go in their jobs' order). compile_many gives every job one
 * priority: its batch ends when its longest process does, so the largest start first.
 * start_many ("behind") returns once the first processes run and gives each job the priority of
 * its order, the order in which its routines will first run: take(k) waits for job k alone (the
 * scheduler going on meanwhile, one process per processor), the later jobs compiling behind the
 * caller's work on one processor fewer (behind_width), which lets the batch start new processes
 * whenever it runs a routine (cn_cc_drive). A job's failure (its
 * first failing process) stops that job's processes from starting; the other jobs go on. Every
 * process compiles exactly what it would alone, so the objects do not depend on the order. */
#include "backend/cc_internal.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Compiler output kept in an error message: enough to see the first diagnostics. */
#define CC_MAX_OUTPUT_LINES 20
#define CC_MAX_OUTPUT_BYTES 2500

/* A compiler's output (stdout and stderr), the first lines of it kept for a message. */
typedef struct {
  cn_sbuf text;
  int lines;
  bool truncated;
} cc_output;

static void output_add(cc_output *out, const char *chunk, size_t got) {
  for (size_t i = 0; i < got; i++) {
    if (out->lines >= CC_MAX_OUTPUT_LINES || out->text.len >= CC_MAX_OUTPUT_BYTES) {
      out->truncated = out->truncated || !(chunk[i] == '\n' && out->lines < CC_MAX_OUTPUT_LINES);
      continue;
    }
    cn_sbuf_putc(&out->text, chunk[i]);
    if (chunk[i] == '\n') out->lines++;
  }
}

/* The kept text without its trailing newlines, "..." after it when lines were left out. */
static void output_end(cc_output *out) {
  cn_sbuf *t = &out->text;
  while (t->len > 0 && t->data[t->len - 1] == '\n') t->data[--t->len] = '\0';
  if (out->truncated) cn_sbuf_puts(t, "\n...");
}

static bool job_done(const cc_job *job) {
  return job->hit || job->status != CN_OK ||
         (job->pieces > 1 ? job->linked : job->compiled == job->pieces);
}

static void job_fail(cc_job *job, cn_status status, const char *fmt, ...) CN_PRINTF(3, 4);
static void job_fail(cc_job *job, cn_status status, const char *fmt, ...) {
  if (job->status != CN_OK) return; /* its first failure is the one to tell */
  job->status = status;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(job->failure, sizeof job->failure, fmt, ap);
  va_end(ap);
}

static atomic_bool serial_pieces;

void cn_cc_set_serial_pieces(bool serial) {
  atomic_store(&serial_pieces, serial);
}

/* One compiler process of a batch: piece `piece` of the job's source, or (-1) the link of its
 * pieces; `rank` and `cost` order the waiting ones, `order` among equals. */
typedef struct {
  cc_job *job;
  int piece, rank, order;
  size_t cost;
} cc_task;

typedef struct {
  cc_task task;
  pid_t pid;
  int fd; /* its output */
  cc_output out;
} cc_process;

static int by_priority(const void *a, const void *b) {
  const cc_task *x = a, *y = b;
  if (x->rank != y->rank) return x->rank - y->rank;
  if (x->cost != y->cost) return x->cost > y->cost ? -1 : 1;
  return x->order - y->order;
}

/* Starts the task's compiler, its output readable from p->fd; false (the job failed) when it
 * cannot start. */
static bool task_start(cn_ctx *ctx, const cc_task *task, cc_process *p) {
  cc_job *job = task->job;
  const cc_paths *paths = &job->paths;
  char define[32];
  snprintf(define, sizeof define, "-DCN_PIECE=%d", task->piece);
  char *piece[] = {define,        "-c", "-o", job->object[task->piece < 0 ? 0 : task->piece],
                   paths->c_path, NULL};
  char *whole[] = {"-o", job->object[0], paths->c_path, NULL};
  char *link[CN_CGEN_MAX_PIECES + 3] = {"-o", paths->tmp_so};
  for (int k = 0; k < job->pieces; k++) link[2 + k] = job->object[k];
  link[2 + job->pieces] = NULL;
  bool object_only = task->piece >= 0 && job->pieces > 1;
  char **argv = cn_cc_run_argv(&job->cmd, object_only,
                               task->piece < 0 ? link
                               : object_only   ? piece
                                               : whole);
  if (!argv) {
    job_fail(job, CN_ERR_NOMEM, "out of memory for a compiler command");
    return false;
  }
  cn_sbuf line = {0};
  for (int k = 0; argv[k]; k++) cn_sbuf_printf(&line, "%s%s", k ? " " : "", argv[k]);
  cn_log(ctx, CN_LOG_DEBUG, "compiling: %s", line.data ? line.data : "(out of memory)");
  cn_sbuf_free(&line);
  ctx->stats[CN_STAT_COMPILER_RUNS]++;
  *p = (cc_process){.task = *task};
  int err = cn_cc_spawn(argv, &p->pid, &p->fd);
  free(argv);
  if (err)
    job_fail(job, CN_ERR_COMPILE, "cannot run the C compiler '%s' on '%s': %s", job->cc,
             paths->c_path, strerror(err));
  return !err;
}

/* Waits for a process whose output ended and checks that it left what it writes: on success the
 * job has one more piece, or its link; a job whose last piece it was links next (*link). */
static void task_finish(cc_process *p, cc_job **link) {
  cc_job *job = p->task.job;
  const char *c_path = job->paths.c_path, *program = job->cmd.argv[0];
  const char *written = p->task.piece < 0 ? job->paths.tmp_so : job->object[p->task.piece];
  close(p->fd);
  int wait_status;
  pid_t waited;
  while ((waited = waitpid(p->pid, &wait_status, 0)) < 0 && errno == EINTR) continue;
  *link = NULL;
  output_end(&p->out);
  bool silent = p->out.text.failed || p->out.text.len == 0;
  if (waited < 0) {
    job_fail(job, CN_ERR_COMPILE, "C compiler on generated file %s: cannot wait: %s", c_path,
             strerror(errno));
  } else if (!WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0) {
    char how[64];
    if (WIFEXITED(wait_status))
      snprintf(how, sizeof how, "exit status %d", WEXITSTATUS(wait_status));
    else if (WIFSIGNALED(wait_status))
      snprintf(how, sizeof how, "killed by signal %d", WTERMSIG(wait_status));
    else
      snprintf(how, sizeof how, "wait status %d", wait_status);
    /* posix_spawnp reports a program it cannot execute as its own error, except where the
     * child cannot share memory with the parent (valgrind): there the child exits with 127. */
    if (silent && WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 127)
      job_fail(job, CN_ERR_COMPILE,
               "C compiler failed on generated file %s (%s):\n(no output: cannot run '%s')", c_path,
               how, program);
    else
      job_fail(job, CN_ERR_COMPILE, "C compiler failed on generated file %s (%s):\n%s", c_path, how,
               silent ? "(no output)" : p->out.text.data);
  } else if (access(written, F_OK) != 0) {
    job_fail(job, CN_ERR_COMPILE,
             "C compiler '%s' succeeded on generated file %s but wrote no '%s'", job->cc, c_path,
             written);
  } else if (p->task.piece < 0) {
    job->linked = true;
  } else if (++job->compiled == job->pieces && job->pieces > 1 && job->status == CN_OK) {
    *link = job;
  }
  if (job->status != CN_OK) cn_cc_discard(written);
  cn_sbuf_free(&p->out.text);
}

enum { CC_MAX_WIDTH = 64 };

/* A batch of jobs and the scheduler of their processes. */
typedef struct cc_batch {
  cn_ctx *ctx;
  int n, width;
  cc_job *jobs;
  cc_task *tasks; /* in the order they start */
  int n_tasks, next;
  cc_job **links; /* due, in the order they fell due */
  int n_links, next_link;
  cc_process running[CC_MAX_WIDTH];
  int n_running;
  int unsettled;                /* behind: jobs not yet handed out nor dropped */
  struct cc_batch *next_behind; /* the context's list of batches compiling behind */
} cc_batch;

/* One step of the scheduler: starts waiting processes while fewer than `width` run, then waits up
 * to timeout_ms for output or an end and takes them in. */
static void batch_step(cc_batch *b, int timeout_ms, int width) {
  while (b->n_running < width && (b->next_link < b->n_links || b->next < b->n_tasks)) {
    cc_task task = b->next_link < b->n_links
                       ? (cc_task){.job = b->links[b->next_link++], .piece = -1}
                       : b->tasks[b->next++];
    if (task.job->status == CN_OK && task_start(b->ctx, &task, &b->running[b->n_running]))
      b->n_running++;
  }
  if (b->n_running == 0) return;
  struct pollfd polled[CC_MAX_WIDTH];
  nfds_t n_polled = 0;
  for (int i = 0; i < b->n_running; i++)
    polled[n_polled++] = (struct pollfd){b->running[i].fd, POLLIN, 0};
  if (poll(polled, n_polled, timeout_ms) <= 0) return;
  /* From the last: an ended process is replaced by the last one, already looked at. */
  for (int i = b->n_running - 1; i >= 0; i--) {
    if (!polled[i].revents) continue;
    char chunk[4096];
    ssize_t got = read(b->running[i].fd, chunk, sizeof chunk);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got > 0) {
      output_add(&b->running[i].out, chunk, (size_t)got);
      continue;
    }
    cc_job *link;
    task_finish(&b->running[i], &link);
    if (link) b->links[b->n_links++] = link;
    b->running[i] = b->running[--b->n_running];
  }
}

/* Runs the scheduler until the job is done, the progress line ticking (its clock moves while the
 * compilers are silent); the wait counts as compiler time. */
static void batch_wait(cc_batch *b, const cc_job *job) {
  uint64_t start = cn_now_us();
  while (!job_done(job)) {
    batch_step(b, 100, b->width);
    cn_progress_tick(b->ctx);
  }
  b->ctx->stats[CN_STAT_US_COMPILE] += cn_now_us() - start;
}

/* A batch of the n started jobs (moved into it), ordered by size alone or (by_order) by the
 * jobs' order first; NULL when out of memory (the jobs are then still the caller's). */
static cc_batch *batch_new(cn_ctx *ctx, cc_job *jobs, int n, bool by_order) {
  cc_batch *b = cn_calloc(ctx, 1, sizeof *b);
  int n_tasks = 0;
  for (int j = 0; j < n; j++) n_tasks += jobs[j].hit ? 0 : jobs[j].pieces;
  if (b) b->tasks = cn_calloc(ctx, n_tasks > 0 ? (size_t)n_tasks : 1, sizeof *b->tasks);
  if (b) b->links = cn_calloc(ctx, n > 0 ? (size_t)n : 1, sizeof *b->links);
  if (!b || !b->tasks || !b->links) {
    if (b) {
      free(b->tasks);
      free(b->links);
    }
    free(b);
    return NULL;
  }
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  b->ctx = ctx;
  b->n = n;
  b->jobs = jobs;
  b->width = atomic_load(&serial_pieces) || online < 1 ? 1
             : online > CC_MAX_WIDTH                   ? CC_MAX_WIDTH
                                                       : (int)online;
  for (int j = 0; j < n; j++) {
    if (jobs[j].hit) continue;
    size_t cost = strlen(jobs[j].c->source) / (size_t)jobs[j].pieces / 1024;
    for (int k = 0; k < jobs[j].pieces; k++, b->n_tasks++)
      b->tasks[b->n_tasks] = (cc_task){
          .job = &jobs[j], .piece = k, .rank = by_order ? j : 0, .order = b->n_tasks, .cost = cost};
  }
  qsort(b->tasks, (size_t)b->n_tasks, sizeof *b->tasks, by_priority);
  return b;
}

/* Waits for the processes still running (a dropped job's temporary object goes) and frees the
 * batch with its jobs (their compiled states are handed out or released before). */
static void batch_free(cc_batch *b) {
  while (b->n_running > 0) batch_step(b, 100, b->width);
  for (int j = 0; j < b->n; j++) {
    if (!b->jobs[j].hit && !b->jobs[j].place.private_dir) cn_cc_discard(b->jobs[j].paths.tmp_so);
    cn_cc_job_free(&b->jobs[j]);
  }
  free(b->tasks);
  free(b->links);
  free(b->jobs);
  free(b);
}

/* Releases the compiled states of the first n jobs and the jobs themselves. */
static void jobs_free(cc_job *jobs, int n) {
  for (int k = 0; k < n; k++) {
    cn_cc_release(jobs[k].c);
    cn_cc_job_free(&jobs[k]);
  }
  free(jobs);
}

/* Starts the n jobs (cc_start) into a new array; on failure nothing is left. */
static cn_status start_jobs(cn_ctx *ctx, int n, const cn_ll_proc *const *procs, bool only_cached,
                            cc_job **out) {
  cc_job *jobs = cn_calloc(ctx, n > 0 ? (size_t)n : 1, sizeof *jobs);
  if (!jobs) return ctx->status;
  cn_status status = CN_OK;
  int started = 0;
  for (; started < n && status == CN_OK; started++) {
    cc_compiled *c = cn_calloc(ctx, 1, sizeof *c);
    if (c)
      status = cn_cc_start(ctx, procs[started], c, &jobs[started], only_cached);
    else {
      status = ctx->status;
      cn_cc_job_init(&jobs[started], procs[started]->name, NULL);
    }
  }
  if (status != CN_OK) {
    jobs_free(jobs, started);
    return status;
  }
  *out = jobs;
  return CN_OK;
}

/* Compiles the n procedures as one batch and waits for all (or with `found`, n = 1, only looks
 * the object up: *found false and nothing compiled on a miss). A failure is the earliest failed
 * job's, whichever compiler ended first, and keeps no state. */
static cn_status compile_batch(cn_ctx *ctx, int n, const cn_ll_proc *const *procs, void **compiled,
                               const char **sources, bool *found) {
  cc_job *jobs;
  cn_status status = start_jobs(ctx, n, procs, found != NULL, &jobs);
  if (status != CN_OK) return status;
  if (found && !(*found = jobs[0].hit)) {
    jobs_free(jobs, 1);
    return CN_OK;
  }
  cc_batch *b = batch_new(ctx, jobs, n, false);
  if (!b) {
    jobs_free(jobs, n);
    return ctx->status;
  }
  for (int k = 0; k < n; k++) batch_wait(b, &jobs[k]);
  for (int k = 0; k < n && status == CN_OK; k++)
    if (jobs[k].status != CN_OK) status = cn_fail(ctx, jobs[k].status, "%s", jobs[k].failure);
  for (int k = 0; k < n && status == CN_OK; k++) status = cn_cc_finish(ctx, &jobs[k]);
  for (int k = 0; k < n; k++) {
    if (status != CN_OK) {
      cn_cc_release(jobs[k].c);
      continue;
    }
    compiled[k] = jobs[k].c;
    if (sources) sources[k] = jobs[k].c->source;
  }
  batch_free(b);
  return status;
}

/* cc_compile, or with `found` (cn_backend.compile_cached, this function) only a cache hit: *found
 * false and nothing compiled on a miss. */
cn_status cn_cc_compile_cached(cn_ctx *ctx, const cn_ll_proc *proc, void **compiled,
                               const char **source, bool *found) {
  return compile_batch(ctx, 1, &proc, compiled, source, found);
}

cn_status cn_cc_compile(cn_ctx *ctx, const cn_ll_proc *proc, void **compiled, const char **source) {
  return compile_batch(ctx, 1, &proc, compiled, source, NULL);
}

cn_status cn_cc_compile_many(cn_ctx *ctx, int n, const cn_ll_proc *const *procs, void **compiled,
                             const char **sources) {
  return compile_batch(ctx, n, procs, compiled, sources, NULL);
}

/* ---- Compiling behind ----
 * A batch started by cc_start_many is on its context's list (ctx->compiling) until every job is
 * settled, handed out by cc_take or given up by cc_drop; the last settlement frees it. */

/* The processes a batch runs behind its caller's work (cc_start_many, cc_drive): one processor
 * fewer than while the caller waits for a job, so that the routines the caller runs meanwhile
 * keep a core. Three processes on two cores slowed the Fashion convnet's first epoch while its
 * test forward compiled: cold runs took 15.7-16.2 s with this against 16.4-18.4 s without
 * (alternated; the MLP's, whose compile is the longer part, 2.4-3.0 s against 2.2-2.9). */
static int behind_width(const cc_batch *b) {
  return b->width > 1 ? b->width - 1 : 1;
}

static void behind_unlink(cc_batch *b) {
  if (b->ctx->compiling == b) {
    b->ctx->compiling = b->next_behind;
    return;
  }
  for (cc_batch *at = b->ctx->compiling; at; at = at->next_behind)
    if (at->next_behind == b) {
      at->next_behind = b->next_behind;
      return;
    }
}

static void settle(cc_batch *b, cc_job *job) {
  job->settled = true;
  if (--b->unsettled > 0) return;
  behind_unlink(b);
  batch_free(b);
}

cn_status cn_cc_start_many(cn_ctx *ctx, int n, const cn_ll_proc *const *procs, void **batch,
                           const char **sources) {
  cc_job *jobs;
  cn_status status = start_jobs(ctx, n, procs, false, &jobs);
  if (status != CN_OK) return status;
  cc_batch *b = batch_new(ctx, jobs, n, true);
  if (!b) {
    jobs_free(jobs, n);
    return ctx->status;
  }
  for (int k = 0; k < n; k++) sources[k] = jobs[k].c->source;
  b->unsettled = n;
  b->next_behind = ctx->compiling;
  ctx->compiling = b;
  batch_step(b, 0, behind_width(b)); /* the first processes start now */
  *batch = b;
  return CN_OK;
}

cn_status cn_cc_take(cn_ctx *ctx, void *batch, int k, void **compiled) {
  cc_batch *b = batch;
  cc_job *job = &b->jobs[k];
  CN_ASSERT(k >= 0 && k < b->n && !job->settled && ctx == b->ctx);
  if (!job_done(job)) {
    cn_progress_add(ctx, CN_PROGRESS_COMPILE, 1);
    batch_wait(b, job);
    cn_progress_add(ctx, CN_PROGRESS_COMPILE, -1);
  }
  cn_status status =
      job->status != CN_OK ? cn_fail(ctx, job->status, "%s", job->failure) : cn_cc_finish(ctx, job);
  if (status == CN_OK)
    *compiled = job->c;
  else
    cn_cc_release(job->c);
  job->c = NULL;
  settle(b, job);
  return status;
}

void cn_cc_drop(void *batch, int k) {
  cc_batch *b = batch;
  cc_job *job = &b->jobs[k];
  CN_ASSERT(k >= 0 && k < b->n && !job->settled);
  cn_cc_release(job->c);
  job->c = NULL;
  settle(b, job);
}

void cn_cc_drive(cn_ctx *ctx) {
  for (cc_batch *b = ctx->compiling; b; b = b->next_behind) batch_step(b, 0, behind_width(b));
}
