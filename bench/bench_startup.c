/* Benchmark (issue 29): the cold start of the example scripts. Each workload runs its script by
 * `cannl run SCRIPT --timings --json` (the `cannl` built next to this program) on one thread
 * (CANNL_THREADS=1) twice in a fresh working directory of its own: cold, with an empty
 * CANNL_CACHE_DIR in that directory, then warm, on the cache the cold run filled. The training
 * is the same both times, so the cold run's overhead is the difference of the two wall times
 * (from before the process starts to its end). The scripts with a target run several such pairs
 * (moons 5, mlp and convnet 3, gpt 1: rows[].pairs) and the pair of the median overhead is the one
 * reported,
 * every pair's overhead listed beside it; that pair's cold run's `--timings` line splits its time
 * into parsing, shapes, data and host work ("other"), lowering and scheduling, C generation, the
 * compiler, tuning, the first run of each routine and the later runs. The time to the end of the
 * first epoch is when the first `progress` line of a finished loop comes out (a script without
 * progress, moons, has none; stdbuf makes them come out on time, see STDBUF). The same run times
 * PyTorch (bench_startup.py next to this file, by /usr/bin/python3, one thread) from its process's
 * start to the end of its first training step and of its first epoch of the same model (the other
 * benchmarks' models, imported).
 *
 * Workloads: moons (examples/moons.cnl, the whole script), mlp and convnet
 * (examples/fashion_mnist.cnl, one epoch; skipped with a message without the Fashion-MNIST files)
 * and gpt (examples/gpt.cnl cut to GPT_STEPS training steps, one validation batch and one sampled
 * character; its "epoch" is those steps; skipped without the fortunes). The table shows the
 * seconds, the JSON lines (stdout, prefixed "json ", and with `--json FILE` that file) every
 * phase of both runs, and the targets follow as PASS / MISS lines. `--quick` runs moons
 * only (cold, warm and PyTorch), in a few seconds, targets not evaluated. Exit 1 when a script
 * fails; without python3-torch only cannl's columns are filled. The machine's other work shows in
 * every number: beyond the overheads' medians, the times are one run's. */
#include "../demo/fashion.h"
#include "../demo/gpt.h"
#include "bench_common.h"

#define GPT_STEPS "4"

/* The most cold-and-warm pairs of a workload (rows[].pairs: the scripts with a target run several,
 * and the median pair is reported, as one run's overhead swung by 0.1-0.5 s on this shared machine,
 * the convnet's by seconds: its 13-18 s epoch is what varies). */
enum { MAX_PAIRS = 8 };

/* The values of the `--timings --json` line (tools/cannl.c print_timings), by key. */
enum { OTHER, SCHEDULE, CGEN, COMPILER, TUNE, FIRST_RUNS, RUNS, TOTAL, N_TIMINGS };
static const char *const timing_keys[N_TIMINGS] = {
    "other_s", "schedule_s", "cgen_s", "compiler_s", "tune_s", "first_runs_s", "run_s", "total_s"};
enum { COMPILER_RUNS, CACHE_HITS, TUNED, N_COUNTS };
static const char *const count_keys[N_COUNTS] = {"compiler_runs", "cache_hits", "tuned"};

/* One run of a script; NAN where a value is missing. */
typedef struct {
  bool ran;       /* it ended with status 0 */
  double wall_s;  /* from before its process started to its end */
  double epoch_s; /* from the same start to the first progress line of a finished loop */
  double timing[N_TIMINGS], count[N_COUNTS];
} script_run;

/* A workload; the torch_* are seconds from before bench_startup.py started (NAN when missing). */
typedef struct {
  const char *name;   /* and bench_startup.py's model */
  const char *script; /* under examples/ */
  const char *sets;   /* the script's --set options */
  const char *needs;  /* the data it reads, NULL when built in */
  bool (*available)(const char *needs);
  const char *torch_args; /* bench_startup.py's arguments after the model */
  double target_s;        /* the bound on the cold overhead, NAN when none */
  int pairs;              /* cold and warm runs, each pair in a fresh directory */
  bool skipped;
  script_run cold, warm;       /* the pair of the median overhead */
  double overheads[MAX_PAIRS]; /* every pair's, in their order */
  int n_overheads;
  double torch_imported, torch_step, torch_epoch;
} row;

static bool path_exists(const char *path) {
  return access(path, R_OK) == 0;
}

static row rows[] = {
    {.name = "moons",
     .script = "moons.cnl",
     .sets = "",
     .torch_args = "",
     .target_s = 0.3,
     .pairs = 5},
    {.name = "mlp",
     .script = "fashion_mnist.cnl",
     .sets = "--set epochs=1",
     .needs = FASHION_DATA_DIR,
     .available = fashion_data_available,
     .torch_args = "'" FASHION_DATA_DIR "'",
     .target_s = 1.0,
     .pairs = 3},
    {.name = "convnet",
     .script = "fashion_mnist.cnl",
     .sets = "--set arch=convnet --set epochs=1",
     .needs = FASHION_DATA_DIR,
     .available = fashion_data_available,
     .torch_args = "'" FASHION_DATA_DIR "'",
     .target_s = 3.0,
     .pairs = 3},
    {.name = "gpt",
     .script = "gpt.cnl",
     .sets = "--set steps=" GPT_STEPS " --set eval_every=" GPT_STEPS
             " --set eval_batches=1 --set count=1",
     .needs = GPT_DATA_DIR,
     .available = path_exists,
     .torch_args = "'" GPT_DATA_DIR "' " GPT_STEPS,
     .target_s = NAN,
     .pairs = 1},
};
enum { N_ROWS = sizeof rows / sizeof rows[0] };

/* ---- Running a script ------------------------------------------------------------------------ */

/* `cannl run --json` does not flush its progress lines (the text ones it does): on a pipe they
 * come out when the buffer fills or the script ends, so the script runs under stdbuf -oL, its
 * stdout line-buffered, for their arrival to time the steps; without stdbuf the first epoch's end
 * is not measured. */
#define STDBUF "/usr/bin/stdbuf"
static bool line_buffered;

/* The number after `"key": ` in a JSON line, NAN when the key is not there. */
static double json_value(const char *line, const char *key) {
  char quoted[64];
  snprintf(quoted, sizeof quoted, "\"%s\": ", key);
  const char *at = strstr(line, quoted);
  return at ? strtod(at + strlen(quoted), NULL) : NAN;
}

/* The `{"timings": ...}` line of the run's stderr (the file err) into out; prints the last other
 * line (the error, when the run failed) as `what: LINE` when print_last. */
static void read_timings(const char *err, script_run *out, const char *what, bool print_last) {
  static char line[65536];
  char last[512] = "";
  FILE *f = fopen(err, "r");
  while (f && fgets(line, sizeof line, f)) {
    if (strncmp(line, "{\"timings\": ", 12) == 0) {
      for (int k = 0; k < N_TIMINGS; k++) out->timing[k] = json_value(line, timing_keys[k]);
      for (int k = 0; k < N_COUNTS; k++) out->count[k] = json_value(line, count_keys[k]);
    } else if (strspn(line, " \n") < strlen(line)) {
      snprintf(last, sizeof last, "%.*s", (int)strcspn(line, "\n"), line);
    }
  }
  if (f) fclose(f);
  if (print_last) fprintf(stderr, "bench_startup: %s: %s\n", what, *last ? last : "no message");
}

/* Runs the row's script in the directory work (its cache: work/cache) and times it into out.
 * False when it fails. */
static bool run_script(const char *cannl, const char *examples, const row *r, const char *work,
                       const char *what, script_run *out) {
  char cmd[3 * PATH_MAX + 512], err[PATH_MAX + 16];
  snprintf(err, sizeof err, "%s/stderr", work);
  snprintf(cmd, sizeof cmd,
           "cd '%s' && CANNL_THREADS=1 CANNL_CACHE_DIR='%s/cache' %s'%s' run '%s%s' --timings "
           "--json %s 2>'%s'",
           work, work, line_buffered ? STDBUF " -oL " : "", cannl, examples, r->script, r->sets,
           err);
  *out = (script_run){.epoch_s = NAN};
  for (int k = 0; k < N_TIMINGS; k++) out->timing[k] = NAN;
  for (int k = 0; k < N_COUNTS; k++) out->count[k] = NAN;
  fflush(stdout);
  double start = now_seconds();
  FILE *p = popen(cmd, "r");
  if (!p) return perror("bench_startup: popen"), false;
  static char line[65536]; /* the script's output: a JSON line may hold a whole ASCII chart */
  bool at_start = true;
  while (fgets(line, sizeof line, p)) {
    /* the progress lines come out line by line (stdbuf): one's arrival is its step's end */
    if (line_buffered && at_start && isnan(out->epoch_s) &&
        strncmp(line, "{\"progress\": ", 13) == 0 &&
        json_value(line, "step") == json_value(line, "total"))
      out->epoch_s = now_seconds() - start;
    at_start = strchr(line, '\n') != NULL;
  }
  out->ran = pclose(p) == 0;
  out->wall_s = now_seconds() - start;
  read_timings(err, out, what, !out->ran);
  return out->ran;
}

/* One cold and one warm run of the row in a fresh directory under TMPDIR (removed after). */
static bool run_pair(const bench *b, const char *examples, const row *r, script_run *cold,
                     script_run *warm) {
  char cannl[PATH_MAX], work[PATH_MAX], what[64];
  const char *tmp = getenv("TMPDIR"), *slash = strrchr(b->self, '/');
  snprintf(cannl, sizeof cannl, "%.*s/cannl", (int)(slash - b->self), b->self);
  snprintf(work, sizeof work, "%s/cannl-startup-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(work) || strchr(work, '\'')) {
    perror("bench_startup: a working directory");
    return false;
  }
  snprintf(what, sizeof what, "%s, cold", r->name);
  bool ok = run_script(cannl, examples, r, work, what, cold);
  snprintf(what, sizeof what, "%s, warm", r->name);
  ok = ok && run_script(cannl, examples, r, work, what, warm);
  char rm[PATH_MAX + 16];
  snprintf(rm, sizeof rm, "rm -rf '%s'", work);
  if (system(rm) != 0) fprintf(stderr, "bench_startup: could not remove %s\n", work);
  return ok;
}

/* The row's pairs; r->cold and r->warm become those of the median overhead (the lower middle of
 * an even count). False when a run fails (the pairs stop there). */
static bool run_cold_warm(const bench *b, const char *examples, row *r) {
  script_run cold[MAX_PAIRS], warm[MAX_PAIRS];
  int order[MAX_PAIRS], n = 0;
  bool ok = true;
  r->n_overheads = 0;
  for (; n < r->pairs && n < MAX_PAIRS && ok; n++) {
    ok = run_pair(b, examples, r, &cold[n], &warm[n]);
    r->overheads[r->n_overheads++] = ok ? cold[n].wall_s - warm[n].wall_s : NAN;
    order[n] = n;
  }
  if (!ok) {
    r->cold = cold[n - 1], r->warm = warm[n - 1];
    return false;
  }
  for (int i = 1; i < n; i++) /* insertion sort of the pairs by overhead */
    for (int j = i; j > 0 && r->overheads[order[j]] < r->overheads[order[j - 1]]; j--) {
      int t = order[j];
      order[j] = order[j - 1], order[j - 1] = t;
    }
  r->cold = cold[order[(n - 1) / 2]], r->warm = warm[order[(n - 1) / 2]];
  return true;
}

/* ---- The PyTorch side ------------------------------------------------------------------------ */

static double torch_start; /* now_seconds() before bench_startup.py started */

/* An `imported=T`, `first_step=T` or `first_epoch=T` line of bench_startup.py into the row. */
static void parse_line(void *row_, int slot, const char *line) {
  row *r = row_;
  double t;
  (void)slot;
  if (sscanf(line, "imported=%lf", &t) == 1) r->torch_imported = t - torch_start;
  if (sscanf(line, "first_step=%lf", &t) == 1) r->torch_step = t - torch_start;
  if (sscanf(line, "first_epoch=%lf", &t) == 1) r->torch_epoch = t - torch_start;
}

static void run_torch(bench *b, row *r) {
  char cmd[PATH_MAX + 256];
  snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' %s %s", b->script, r->name, r->torch_args);
  torch_start = now_seconds();
  if (!run_command(b, cmd, r, 0))
    fprintf(stderr, "bench_startup: %s: the python side failed\n", r->name);
}

/* ---- Report ---------------------------------------------------------------------------------- */

/* The cold overhead: cold wall - warm wall, NAN unless both ran. */
static double overhead(const row *r) {
  return r->cold.ran && r->warm.ran ? r->cold.wall_s - r->warm.wall_s : NAN;
}

/* cannl's cold first epoch end over PyTorch's. */
static double epoch_ratio(const row *r) {
  return r->cold.ran && r->torch_epoch > 0 ? r->cold.epoch_s / r->torch_epoch : NAN;
}

static double wall(const script_run *s) {
  return s->ran ? s->wall_s : NAN;
}

static void report(const bench *b, int n_rows) {
  printf("\ncannl run --timings, one thread; seconds (the pair of cold and warm runs of the median "
         "overhead; other engineers' work on this machine shows)\n");
  printf("overhead = cold - warm (wall); the cold run's phases: other = parsing, shapes, data and "
         "host work,\nsched = lowering and scheduling, cgen = C generation, first = the first run "
         "of each routine, later = the other runs\n");
  printf("%-8s %7s %7s %8s | %6s %6s %6s %8s %6s %6s %6s | %8s %5s %5s\n", "workload", "cold",
         "warm", "overhead", "other", "sched", "cgen", "compiler", "tune", "first", "later",
         "compiles", "hits", "tuned");
  for (int i = 0; i < n_rows; i++) {
    const row *r = &rows[i];
    if (r->skipped) {
      printf("%-8s skipped: %s is not installed\n", r->name, r->needs);
      continue;
    }
    double t[N_TIMINGS];
    for (int k = 0; k < N_TIMINGS; k++) t[k] = r->cold.ran ? r->cold.timing[k] : NAN;
    char c[14][24];
    fmt_number(c[0], 24, "%.2f", wall(&r->cold));
    fmt_number(c[1], 24, "%.2f", wall(&r->warm));
    fmt_number(c[2], 24, "%.2f", overhead(r));
    for (int k = OTHER; k <= FIRST_RUNS; k++) fmt_number(c[3 + k], 24, "%.2f", t[k]);
    fmt_number(c[9], 24, "%.2f", t[RUNS] - t[FIRST_RUNS]);
    for (int k = 0; k < N_COUNTS; k++)
      fmt_number(c[10 + k], 24, "%.0f", r->cold.ran ? r->cold.count[k] : NAN);
    printf("%-8s %7s %7s %8s | %6s %6s %6s %8s %6s %6s %6s | %8s %5s %5s\n", r->name, c[0], c[1],
           c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11], c[12]);
  }
  printf("\noverhead of every pair, in their order:");
  for (int i = 0; i < n_rows; i++) {
    if (rows[i].skipped || rows[i].n_overheads == 0) continue;
    printf("%s %s", i ? ";" : "", rows[i].name);
    for (int k = 0; k < rows[i].n_overheads; k++) printf(" %.2f", rows[i].overheads[k]);
  }
  printf("\n");
  printf("\nseconds from the process's start to the first epoch's end (gpt: its %s steps; moons "
         "shows no progress); PyTorch one thread%s%s\n",
         GPT_STEPS, *b->versions ? ": " : "", b->versions);
  printf("%-8s %10s %10s %9s | %14s %13s | %14s\n", "workload", "cannl cold", "cannl warm",
         "PyTorch", "PyTorch import", "PyTorch step 1", "cold / PyTorch");
  for (int i = 0; i < n_rows; i++) {
    const row *r = &rows[i];
    if (r->skipped) continue;
    char c[6][24];
    printf("%-8s %10s %10s %9s | %14s %13s | %14s\n", r->name,
           fmt_number(c[0], 24, "%.2f", r->cold.ran ? r->cold.epoch_s : NAN),
           fmt_number(c[1], 24, "%.2f", r->warm.ran ? r->warm.epoch_s : NAN),
           fmt_number(c[2], 24, "%.2f", r->torch_epoch),
           fmt_number(c[3], 24, "%.2f", r->torch_imported),
           fmt_number(c[4], 24, "%.2f", r->torch_step),
           fmt_number(c[5], 24, "%.2fx", epoch_ratio(r)));
  }
}

/* One run's members, keys prefixed by `side` ("cold", "warm"). */
static void json_run(char *buf, size_t size, const char *side, const script_run *s) {
  char key[64];
  snprintf(key, sizeof key, "%s_wall_s", side);
  json_num(buf, size, key, wall(s));
  snprintf(key, sizeof key, "%s_epoch_s", side);
  json_num(buf, size, key, s->ran ? s->epoch_s : NAN);
  for (int k = 0; k < N_TIMINGS; k++) {
    snprintf(key, sizeof key, "%s_%s", side, timing_keys[k]);
    json_num(buf, size, key, s->ran ? s->timing[k] : NAN);
  }
  for (int k = 0; k < N_COUNTS; k++) {
    snprintf(key, sizeof key, "%s_%s", side, count_keys[k]);
    json_num(buf, size, key, s->ran ? s->count[k] : NAN);
  }
}

static void json_line(const row *r, FILE *file) {
  char buf[2048];
  snprintf(buf, sizeof buf,
           "{\"bench\":\"startup\",\"workload\":\"%s\",\"script\":\"examples/%s\",\"sets\":\"%s\","
           "\"threads\":1,\"skipped\":%s",
           r->name, r->script, r->sets, r->skipped ? "true" : "false");
  json_run(buf, sizeof buf, "cold", &r->cold);
  json_run(buf, sizeof buf, "warm", &r->warm);
  json_num(buf, sizeof buf, "overhead_s", overhead(r));
  size_t at = strlen(buf);
  snprintf(buf + at, sizeof buf - at, ",\"pair_overheads_s\":[");
  for (int k = 0; k < r->n_overheads; k++) {
    at = strlen(buf);
    if (isnan(r->overheads[k]))
      snprintf(buf + at, sizeof buf - at, "%snull", k ? "," : "");
    else
      snprintf(buf + at, sizeof buf - at, "%s%.4f", k ? "," : "", r->overheads[k]);
  }
  at = strlen(buf);
  snprintf(buf + at, sizeof buf - at, "]");
  json_num(buf, sizeof buf, "target_overhead_s", r->target_s);
  json_num(buf, sizeof buf, "torch_import_s", r->torch_imported);
  json_num(buf, sizeof buf, "torch_first_step_s", r->torch_step);
  json_num(buf, sizeof buf, "torch_first_epoch_s", r->torch_epoch);
  json_num(buf, sizeof buf, "cold_over_torch_epoch", epoch_ratio(r));
  size_t len = strlen(buf);
  snprintf(buf + len, sizeof buf - len, "}");
  printf("json %s\n", buf);
  if (file) fprintf(file, "%s\n", buf);
}

/* The targets of issue 29: the cold overheads, and the convnet's cold first epoch ending before
 * PyTorch's. */
static void print_targets(void) {
  printf("\ntargets (issue 29; one thread; overhead = cold - warm wall, seconds):\n");
  for (int i = N_ROWS - 1; i >= 0; i--) {
    const row *r = &rows[i];
    char what[64];
    snprintf(what, sizeof what, "%s: cold overhead, s", r->name);
    if (isnan(r->target_s)) continue;
    if (r->skipped)
      printf("skip  %-40s (%s is not installed)\n", what, r->needs);
    else
      print_target(what, overhead(r), r->target_s, true);
  }
  const row *conv = NULL;
  for (int i = 0; i < N_ROWS; i++)
    if (strcmp(rows[i].name, "convnet") == 0) conv = &rows[i];
  const char *what = "convnet: cold first epoch / PyTorch's";
  if (conv->skipped)
    printf("skip  %-40s (%s is not installed)\n", what, conv->needs);
  else
    print_target(what, epoch_ratio(conv), 1.0, true);
}

int main(int argc, char **argv) {
  static bench b = {.name = "bench_startup", .parse = parse_line};
  int status = bench_start(&b, argc, argv);
  if (status >= 0) return status;
  char examples[PATH_MAX];
  const char *slash = strrchr(b.script, '/');
  snprintf(examples, sizeof examples, "%.*s../examples/", slash ? (int)(slash - b.script + 1) : 0,
           b.script);
  int n_rows = b.quick ? 1 : N_ROWS;
  line_buffered = access(STDBUF, X_OK) == 0;
  printf(
      "bench_startup%s: the example scripts by cannl run --timings, one thread (CANNL_THREADS=1), "
      "cold (a fresh empty CANNL_CACHE_DIR) then warm (the same cache), and PyTorch's first "
      "step and epoch of the same models (one thread)\n",
      b.quick ? " --quick" : "");
  if (!line_buffered)
    printf("%s (coreutils) is not installed: cannl's first epoch end is not measured\n", STDBUF);
  bool ok = true;
  for (int i = 0; i < n_rows; i++) {
    row *r = &rows[i];
    r->torch_imported = r->torch_step = r->torch_epoch = NAN;
    if (r->needs && !r->available(r->needs)) {
      printf("%s: skipped: %s is not installed\n", r->name, r->needs);
      r->skipped = true;
      continue;
    }
    printf("running %s: examples/%s%s%s (cold, warm), then PyTorch\n", r->name, r->script,
           *r->sets ? " " : "", r->sets);
    ok = run_cold_warm(&b, examples, r) && ok;
    run_torch(&b, r);
  }
  if (b.torch_missing)
    printf("PyTorch: python3-torch is not installed (`make bench` installs it)\n");
  if (b.numpy_missing) printf("numpy: python3-numpy is not installed (`make bench` installs it)\n");
  report(&b, n_rows);
  for (int i = 0; i < n_rows; i++) json_line(&rows[i], b.file);
  if (b.file && fclose(b.file) != 0) perror(b.json), ok = false;
  if (b.quick)
    printf("\ntargets: not evaluated with --quick (moons only)\n");
  else
    print_targets();
  return ok ? 0 : 1;
}
