/* The generated-C backend's parts shared by its two files: cc.c (sources and the cache, the
 * compiler command, loading, tune records, runs) and cc_jobs.c (the scheduler of compiler
 * processes, compiling behind). Internal to src/backend. */
#ifndef CN_BACKEND_CC_INTERNAL_H
#define CN_BACKEND_CC_INTERNAL_H

#include "backend/backend.h"
#include "backend/cgen.h"

#include <sys/types.h>

typedef void (*cc_entry_fn)(void *const *buffers, const int64_t *syms);
typedef void (*cc_entry_par_fn)(void *const *buffers, const int64_t *syms, const cn_parallel *par);

typedef struct {
  void *handle;
  bool fd_open; /* fd: the verified file the object was loaded from, open while it is loaded */
  int fd;
  cc_entry_fn entry;
  cc_entry_par_fn entry_par; /* NULL: the procedure has no parallel loop */
  char *source;              /* malloc'd generated C */
} cc_compiled;

/* Paths of one compilation (malloc'd). */
typedef struct {
  char *c_path, *so_path, *sum_path, *tmp_c, *tmp_so, *tmp_sum;
} cc_paths;

/* The compiler command: the words of cc, then of cflags (run_argv adds what a run needs). */
typedef struct {
  char **argv;
  char *chars; /* the words' characters, each NUL-terminated */
  int argc;
} cc_command;

/* Where this compilation's files go: a shared cache directory, or a private one. */
typedef struct {
  char *dir;        /* malloc'd */
  bool private_dir; /* created for this compilation; emptied and removed at its end */
} cc_place;

/* One compilation of a batch (cc_jobs.c schedules its compiler processes). */
typedef struct {
  const char *name; /* the routine's */
  cc_compiled *c;   /* until handed out */
  const char *cc, *flags;
  cc_command cmd;
  cc_place place;
  cc_paths paths;
  cn_sbuf head; /* the cache record's head (key text), in a shared cache */
  bool hit;     /* loaded from the cache: nothing to compile */
  /* The source's pieces, each compiled into object[k] (malloc'd: the temporary object of the
   * piece or, with one piece, the temporary shared object itself); with pieces, their link
   * writes the temporary shared object once all are `compiled`. */
  int pieces, compiled;
  bool linked;
  char *object[CN_CGEN_MAX_PIECES];
  cn_status status;   /* of its first failure, with its message */
  char failure[4096]; /* as long as the context's message */
  bool settled;       /* handed out or dropped (behind) */
} cc_job;

void cn_cc_job_init(cc_job *job, const char *name, cc_compiled *c);
/* Frees what the job holds, its pieces' temporary objects included. */
void cn_cc_job_free(cc_job *job);
/* Starts a compilation: the source generated, the object looked up in the cache (job->hit), and
 * on a miss (unless only_cached) the source written and its pieces planned. */
cn_status cn_cc_start(cn_ctx *ctx, const cn_ll_proc *proc, cc_compiled *c, cc_job *job,
                      bool only_cached);
/* Finishes a compiled job: loads its object and, in a shared cache, publishes it with its record.
 */
cn_status cn_cc_finish(cn_ctx *ctx, cc_job *job);
void cn_cc_release(void *compiled);
/* The argv of one compiler run (malloc'd): cc and cflags, without "-shared" when object_only,
 * then extra (NULL-terminated); NULL when out of memory. */
char **cn_cc_run_argv(const cc_command *cmd, bool object_only, char *const *extra);
/* Starts argv with its output (stdout and stderr) readable from *read_fd; 0 or an errno. */
int cn_cc_spawn(char **argv, pid_t *pid, int *read_fd);
/* Removes a file (or nothing there); 0 or an errno. */
int cn_cc_discard(const char *path);

/* cn_backend_c's compile, compile_many, compile_cached, start_many, take and drop (cc_jobs.c). */
cn_status cn_cc_compile(cn_ctx *ctx, const cn_ll_proc *proc, void **compiled, const char **source);
cn_status cn_cc_compile_many(cn_ctx *ctx, int n, const cn_ll_proc *const *procs, void **compiled,
                             const char **sources);
cn_status cn_cc_compile_cached(cn_ctx *ctx, const cn_ll_proc *proc, void **compiled,
                               const char **source, bool *found);
cn_status cn_cc_start_many(cn_ctx *ctx, int n, const cn_ll_proc *const *procs, void **batch,
                           const char **sources);
cn_status cn_cc_take(cn_ctx *ctx, void *batch, int k, void **compiled);
void cn_cc_drop(void *batch, int k);

#endif
