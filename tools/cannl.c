/* The `cannl` command: runs `.cnl` scripts (`cannl run`) and exports the models they train as C
 * (`cannl export`), prints the version, the primitive-op
 * and precision tables (generated from the library's accessors, so they cannot drift from
 * include/cannl/ops.def and precisions.def), and the demo of demo/demo.c with a choice of
 * backend and of what to print.
 *
 * Exit status: 0 on success, 1 on a runtime error (message on stderr), 2 on a usage or parse error
 * (message on stderr): cn_notation_run tells a syntax error from a runtime error
 * (cn_notation_options.syntax_error), so a script is parsed once. An unknown command or option
 * suggests the closest known ones (cn_suggest_names); `export` says on stderr which files it
 * wrote. Only the public API (cannl.h) is used. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "cannl.h"

#include "../demo/demo.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef CANNL_VERSION
#error "CANNL_VERSION is defined by CMakeLists.txt from the project version"
#endif

enum { EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

static const char usage_text[] =
    "usage: cannl <command> [options]\n"
    "\n"
    "commands:\n"
    "  help          print this text\n"
    "  ops           the primitive-op table: name, infix spelling, arity, accumulation,\n"
    "                neutral element, precision kinds\n"
    "  precisions    the precision table: name, bytes, kind, promotion order\n"
    "  devices       the backends, what each can do and the device it runs on (or why\n"
    "                it is unavailable: no driver, no device)\n"
    "  run FILE.cnl | run -e TEXT [--backend NAME] [--json] [--emit=asgn|loops|c]...\n"
    "      [--check-nan] [--timings] [--set NAME=VALUE]... [--print-threshold N]\n"
    "      [--print-precision N] [--out DIR]\n"
    "                run a script in the cannl notation (docs/notation.md); --set replaces\n"
    "                the literal of the script's top-level `let NAME = LITERAL` (a number,\n"
    "                boolean or string; repeatable); --json prints each\n"
    "                printed tensor as one JSON line; --emit prints the code of every routine\n"
    "                run (repeatable); the backend is one `cannl devices` lists (interp,\n"
    "                c, opencl, ...), by default $CANNL_BACKEND, else c;\n"
    "                --check-nan (or\n"
    "                CANNL_CHECK=nan) stops at the first NaN or infinity a routine writes,\n"
    "                naming the tensor, its operation and its line (exit 1); --timings\n"
    "                prints where the time went (scheduling, tuning, C generation, the\n"
    "                compiler, runs) on stderr when the script ends; when stderr is a\n"
    "                terminal and not --json, compiling or tuning that lasts over a\n"
    "                second shows a line there saying what, erased when it ends;\n"
    "                --print-threshold (default 1000) and --print-precision (default 8)\n"
    "                set the options print_threshold and print_precision: a printed tensor\n"
    "                of more cells is elided, a number has at most N digits after the point;\n"
    "                the files the script writes with a relative path (plot, checkpoint and\n"
    "                the restore that reads it, save_npy) go under --out DIR (default runs,\n"
    "                created as needed; --out . writes beside the current directory), and\n"
    "                a line on stderr at the end names them\n"
    "  export FILE.cnl --input NAME --output NAME [--name C_NAME] [-o DIR] [--sampler]\n"
    "      [--backend NAME] [--set NAME=VALUE]... [--out DIR]\n"
    "                run a script as run does, then write the forward code of the tensor\n"
    "                the script binds to the --output name, computed from the one bound to\n"
    "                the --input name (a placeholder), as DIR/C_NAME.c and DIR/C_NAME.h\n"
    "                declaring void C_NAME_forward(const float *in, float *out): standard C\n"
    "                with the trained parameters inside; C_NAME defaults to the output's\n"
    "                name, DIR to the current directory; --sampler also writes\n"
    "                DIR/C_NAME_sample.c and .h, a text sampler over the vocabulary of the\n"
    "                script's text_windows corpus that draws what `sample` draws\n"
    "  demo [--backend NAME] [--emit=asgn|loops|c]\n"
    "                a matrix multiplication and a padded 2-D convolution built through the\n"
    "                C API and run on the interpreter and generated C (or the backend\n"
    "                given); --emit prints only the assignments, the loop IR or the\n"
    "                generated code (C, or OpenCL C with --backend opencl)\n"
    "\n"
    "options:\n"
    "  --version     print the version\n";

#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
static int
usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("cannl: ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs(" (try 'cannl help')\n", stderr);
  return EXIT_USAGE;
}

/* The commands and the options of each: what an unknown word is compared with, to suggest the
 * closest (an option's `=VALUE` left out). */
static const char *const commands[] = {"help",   "ops",  "precisions", "devices", "run",
                                       "export", "demo", "--version",  "--help",  "-h"};
static const char *const run_options[] = {"--backend",
                                          "--emit",
                                          "--json",
                                          "--check-nan",
                                          "--timings",
                                          "--set",
                                          "-e",
                                          "--out",
                                          "--print-threshold",
                                          "--print-precision",
                                          "--input",
                                          "--output",
                                          "--name",
                                          "-o",
                                          "--sampler"};
enum { N_DEMO_OPTIONS = 2, N_RUN_OPTIONS = 10, N_EXPORT_OPTIONS = 15 };

/* "unknown WHAT 'WORD'", with the closest of known[0 .. n) suggested; a usage error. */
static int unknown_word(const char *what, const char *word, int n, const char *const *known) {
  char name[64], hint[400];
  snprintf(name, sizeof name, "%.*s", (int)strcspn(word, "="), word);
  for (int k = N_RUN_OPTIONS; k < N_EXPORT_OPTIONS && n == N_RUN_OPTIONS; k++)
    if (strcmp(name, run_options[k]) == 0)
      return usage_error("option '%s' belongs to export, not to run", name);
  return usage_error("unknown %s '%s'%s", what, word,
                     cn_suggest_names(name, n, known, hint, sizeof hint));
}

/* "float int bits": the kinds of precision the op is defined on. */
static void op_kinds(cn_op op, char *out, size_t size) {
  bool on_float = false, on_int = false, on_bits = false;
  for (int p = 0; p < CN_PREC_COUNT; p++) {
    if (!cn_op_supports(op, (cn_prec)p)) continue;
    switch (cn_prec_kind_of((cn_prec)p)) {
    case CN_PKIND_FLOAT: on_float = true; break;
    case CN_PKIND_INT:
    case CN_PKIND_UINT: on_int = true; break;
    case CN_PKIND_BITS: on_bits = true; break;
    }
  }
  snprintf(out, size, "%s%s%s", on_float ? "float " : "", on_int ? "int " : "",
           on_bits ? "bits" : "");
}

/* `cannl devices`: each registered backend, its capabilities and the device it runs on. */
static int cmd_devices(void) {
  static const struct {
    cn_backend_cap cap;
    const char *name;
  } caps[] = {{CN_BACKEND_TUNABLE, "tunable"},
              {CN_BACKEND_PARALLEL, "parallel"},
              {CN_BACKEND_DEVICE_MEMORY, "device memory"},
              {CN_BACKEND_COMPILED, "compiled"}};
  cn_ctx *ctx = cn_ctx_create();
  if (!ctx) return fputs("cannl: out of memory\n", stderr), EXIT_RUNTIME;
  for (int k = 0; k < cn_backend_count(); k++) {
    char device[1400], names[128] = "";
    unsigned mask = cn_backend_caps((cn_backend_kind)k);
    for (size_t c = 0; c < sizeof caps / sizeof *caps; c++)
      if (mask & caps[c].cap)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", names[0] ? ", " : "",
                 caps[c].name);
    /* a backend whose device cannot be opened here (no driver) is listed with the reason */
    bool found = cn_backend_device(ctx, (cn_backend_kind)k, device, sizeof device) == CN_OK;
    if (!found) snprintf(device, sizeof device, "unavailable: %.1300s", cn_ctx_error(ctx));
    printf("%-8s %s (%s)\n", cn_backend_name((cn_backend_kind)k), device,
           names[0] ? names : "reference");
  }
  cn_ctx_destroy(ctx);
  return 0;
}

static int cmd_ops(void) {
  int name_width = 4;
  for (int op = 0; op < CN_OP_COUNT; op++) {
    int len = (int)strlen(cn_op_name((cn_op)op));
    if (len > name_width) name_width = len;
  }
  printf("%-*s  %-5s  %-5s  %-5s  %-7s  %s\n", name_width, "name", "infix", "arity", "accum",
         "neutral", "precisions");
  for (int i = 0; i < CN_OP_COUNT; i++) {
    cn_op op = (cn_op)i;
    const char *infix = cn_op_infix(op);
    bool accumulates = cn_op_can_accumulate(op);
    char neutral[32] = "-", kinds[32];
    if (accumulates) snprintf(neutral, sizeof neutral, "%g", cn_op_neutral(op, CN_PREC_DOUBLE));
    op_kinds(op, kinds, sizeof kinds);
    printf("%-*s  %-5s  %-5d  %-5s  %-7s  %s\n", name_width, cn_op_name(op), infix ? infix : "-",
           cn_op_arity(op), accumulates ? "yes" : "no", neutral, kinds);
  }
  return 0;
}

static const char *kind_name(cn_prec_kind kind) {
  switch (kind) {
  case CN_PKIND_INT: return "int";
  case CN_PKIND_UINT: return "uint";
  case CN_PKIND_FLOAT: return "float";
  case CN_PKIND_BITS: return "bits";
  }
  return "?";
}

/* The promotion rank of a precision: how many other precisions it dominates. */
static int promotion_rank(cn_prec prec) {
  int rank = 0;
  for (int q = 0; q < CN_PREC_COUNT; q++)
    if ((cn_prec)q != prec && cn_prec_promote(prec, (cn_prec)q) == prec) rank++;
  return rank;
}

static int cmd_precisions(void) {
  printf("%-9s  %-5s  %-5s  %s\n", "name", "bytes", "kind", "promotion rank");
  const char *by_rank[CN_PREC_COUNT] = {0};
  for (int p = 0; p < CN_PREC_COUNT; p++) {
    int rank = promotion_rank((cn_prec)p);
    printf("%-9s  %-5zu  %-5s  %d\n", cn_prec_name((cn_prec)p), cn_prec_bytes((cn_prec)p),
           kind_name(cn_prec_kind_of((cn_prec)p)), rank);
    if (rank >= 0 && rank < CN_PREC_COUNT) by_rank[rank] = cn_prec_name((cn_prec)p);
  }
  fputs("\npromotion order (of two precisions the later one dominates):\n ", stdout);
  for (int r = 0; r < CN_PREC_COUNT; r++)
    printf(" %s%s", r ? "< " : "", by_rank[r] ? by_rank[r] : "?");
  putchar('\n');
  return 0;
}

/* The value of `--name value` or `--name=value` at argv[*i], advancing *i past it; NULL if
 * argv[*i] is not that option. *missing is set when the option has no value. */
static const char *option_value(int argc, char **argv, int *i, const char *name, bool *missing) {
  size_t len = strlen(name);
  const char *arg = argv[*i];
  if (strncmp(arg, name, len) != 0) return NULL;
  if (arg[len] == '=') return arg + len + 1;
  if (arg[len] != '\0') return NULL;
  if (*i + 1 >= argc) {
    *missing = true;
    return NULL;
  }
  return argv[++*i];
}

/* "unknown backend 'NAME'", the closest registered names suggested; a usage error. */
static int unknown_backend(const char *prefix, const char *name) {
  char hint[400];
  return usage_error("%sunknown backend '%s'%s (known: %s)", prefix, name,
                     cn_backend_suggest(name, hint, sizeof hint), cn_backend_list());
}

/* Reads `--backend NAME` (a registered backend) or `--emit asgn|loops|c` at argv[*i]: 1 when it is
 * one of them (*backend = the backend's id, cn_backend_find; *emit = 0 asgn, 1 loops, 2 c), 0 when
 * argv[*i] is neither, -1 after printing a usage error. */
static int backend_or_emit(int argc, char **argv, int *i, int *backend, int *emit) {
  static const char *const emits[] = {"asgn", "loops", "c"};
  bool missing = false;
  const char *b = option_value(argc, argv, i, "--backend", &missing);
  const char *e = b || missing ? NULL : option_value(argc, argv, i, "--emit", &missing);
  if (missing) return usage_error("option '%s' needs a value", argv[*i]), -1;
  int found = b ? cn_backend_find(b) : -1;
  if (found >= 0) return *backend = found, 1;
  for (int k = 0; e && k < 3; k++)
    if (strcmp(e, emits[k]) == 0) return *emit = k, 1;
  char hint[400];
  if (b) return unknown_backend("", b), -1;
  if (e)
    return usage_error("unknown --emit value '%s'%s (known: asgn, loops, c)", e,
                       cn_suggest_names(e, 3, emits, hint, sizeof hint)),
           -1;
  return 0;
}

static int cmd_demo(int argc, char **argv) {
  demo_options opts = {.backend = -1, .emit = DEMO_EMIT_ALL};
  static const demo_emit emit_kinds[3] = {DEMO_EMIT_ASGN, DEMO_EMIT_LOOPS, DEMO_EMIT_C};
  for (int i = 2; i < argc; i++) {
    int backend = -1, emit = -1, got = backend_or_emit(argc, argv, &i, &backend, &emit);
    if (got < 0) return EXIT_USAGE;
    if (got == 0 && (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0))
      return fputs(usage_text, stdout), 0;
    if (got == 0) return unknown_word("demo option", argv[i], N_DEMO_OPTIONS, run_options);
    if (backend >= 0) opts.backend = backend;
    if (emit >= 0) opts.emit = emit_kinds[emit];
  }
  if (opts.emit == DEMO_EMIT_C && opts.backend == CN_BACKEND_INTERP)
    return usage_error("--emit=c needs a backend that generates code, not --backend interp");
  return demo_run(&opts, stdout) == 0 ? 0 : EXIT_RUNTIME;
}

/* The whole file, NUL-terminated (malloc'd), or NULL with the reason in *why: a directory or
 * any other non-regular file is refused (fopen succeeds on a directory and reading it fails
 * with EISDIR, or reads nothing), as is a read error. */
static char *read_file(const char *path, const char **why) {
  FILE *f = fopen(path, "rb");
  struct stat st;
  if (!f || fstat(fileno(f), &st) != 0) {
    *why = strerror(errno);
    if (f) fclose(f);
    return NULL;
  }
  if (!S_ISREG(st.st_mode)) {
    *why = S_ISDIR(st.st_mode) ? "it is a directory" : "it is not a regular file";
    fclose(f);
    return NULL;
  }
  size_t cap = 4096, n = 0;
  char *text = malloc(cap);
  *why = "out of memory";
  while (text) {
    n += fread(text + n, 1, cap - n - 1, f);
    if (n < cap - 1) break;
    char *bigger = realloc(text, cap *= 2);
    if (!bigger) free(text);
    text = bigger;
  }
  if (text && ferror(f)) {
    *why = strerror(errno);
    free(text);
    text = NULL;
  }
  if (text) text[n] = '\0';
  fclose(f);
  return text;
}

/* export's options at argv[*i] (--input, --output, --name, -o): 1 when it is one of them, 0 when
 * it is none, -1 after printing a usage error. */
static int export_option(int argc, char **argv, int *i, cn_notation_options *opts) {
  static const char *const names[] = {"--input", "--output", "--name", "-o"};
  const char **slots[] = {&opts->export_input, &opts->export_output, &opts->export_name,
                          &opts->export_dir};
  for (int k = 0; k < 4; k++) {
    bool missing = false;
    const char *v = option_value(argc, argv, i, names[k], &missing);
    if (missing) return usage_error("option '%s' needs a value", argv[*i]), -1;
    if (v) return *slots[k] = v, 1;
  }
  return 0;
}

/* cmd_run's work, --set's values gathered into sets (room for one per argument). */
static uint64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* --timings: where the run's time went (the CN_STAT_US_* phases, which do not overlap; "other"
 * is the rest: parsing, shape inference, building the graph, data and the host's work), on
 * stderr, as one JSON line with --json. */
static void print_timings(const cn_ctx *ctx, uint64_t total_us, bool json) {
  static const struct {
    cn_stat stat;
    const char *key, *text;
  } phases[] = {{CN_STAT_US_SCHEDULE, "schedule_s", "lowering and scheduling"},
                {CN_STAT_US_TUNE, "tune_s", "tuning"},
                {CN_STAT_US_CGEN, "cgen_s", "C generation"},
                {CN_STAT_US_COMPILE, "compiler_s", "compiler"},
                {CN_STAT_US_RUN, "run_s", "runs"},
                {CN_STAT_US_FIRST_RUN, "first_runs_s", "of which first runs"}};
  uint64_t counted = 0;
  fputs(json ? "{\"timings\": {" : "timings:", stderr);
  for (size_t k = 0; k < sizeof phases / sizeof *phases; k++) {
    uint64_t us = cn_ctx_stat(ctx, phases[k].stat);
    if (phases[k].stat != CN_STAT_US_FIRST_RUN) counted += us;
    if (json)
      fprintf(stderr, "%s\"%s\": %.6f", k ? ", " : "", phases[k].key, (double)us * 1e-6);
    else
      fprintf(stderr, "%s %s %.3f s", k ? "," : "", phases[k].text, (double)us * 1e-6);
  }
  double other = total_us > counted ? (double)(total_us - counted) * 1e-6 : 0;
  uint64_t compiled = cn_ctx_stat(ctx, CN_STAT_COMPILER_RUNS);
  uint64_t hits = cn_ctx_stat(ctx, CN_STAT_CACHE_HITS), tuned = cn_ctx_stat(ctx, CN_STAT_TUNE_RUNS);
  if (json)
    fprintf(stderr,
            ", \"other_s\": %.6f, \"total_s\": %.6f, \"compiler_runs\": %llu, "
            "\"cache_hits\": %llu, \"tuned\": %llu}}\n",
            other, (double)total_us * 1e-6, (unsigned long long)compiled, (unsigned long long)hits,
            (unsigned long long)tuned);
  else
    fprintf(stderr,
            ", other (parsing, shapes, data, host) %.3f s, total %.3f s; %llu compiler runs, "
            "%llu cache hits, %llu GEMM nests tuned\n",
            other, (double)total_us * 1e-6, (unsigned long long)compiled, (unsigned long long)hits,
            (unsigned long long)tuned);
}

/* The progress hook of run and export (stderr a terminal, no --json): the line redrawn in place
 * on stderr, cut to the terminal's width (a wrapped line would not be redrawn in place), erased
 * when the work ends. The library erases it before the script writes anything more (the work
 * ends inside the statement that started it). stdout is not flushed here, but the compiler's start
 * flushes it: a line the script began without ending it (printf without "\n") is on the terminal
 * then, and the progress line, drawn from the line's start, erases it from the screen. */
static void draw_progress(void *user, const char *line) {
  (void)user;
  struct winsize ws;
  int width = ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 ? ws.ws_col - 1 : 1000;
  if (line)
    fprintf(stderr, "\r%.*s\033[K", width, line);
  else
    fputs("\r\033[K", stderr);
  fflush(stderr);
}

static int run_with_sets(int argc, char **argv, bool exporting, const char **sets) {
  /* without --backend, the context's option "backend" decides: $CANNL_BACKEND, else c; a name no
   * backend has is a usage error here, before anything runs */
  cn_notation_options opts = {.backend = CN_BACKEND_DEFAULT, .sets = sets, .out_dir = "runs"};
  const char *env_backend = getenv("CANNL_BACKEND");
  int default_backend = env_backend && *env_backend ? cn_backend_find(env_backend) : CN_BACKEND_C;
  if (default_backend < 0) return unknown_backend("CANNL_BACKEND: ", env_backend);
  const char *file = NULL, *inline_text = NULL;
  bool check_nan = false, timings = false;
  /* --print-threshold and --print-precision: the context's options of the same names */
  static const char *const print_flags[] = {"--print-threshold", "--print-precision"};
  static const char *const print_keys[] = {"print_threshold", "print_precision"};
  const char *print_values[2] = {NULL, NULL};
  for (int i = 2; i < argc; i++) {
    bool missing = false;
    const char *set = option_value(argc, argv, &i, "--set", &missing);
    if (missing) return usage_error("option '--set' needs a value NAME=VALUE");
    if (set) {
      if (!strchr(set, '=') || set[0] == '=')
        return usage_error("--set expects NAME=VALUE, not '%s'", set);
      sets[opts.n_sets++] = set;
      continue;
    }
    const char *out = option_value(argc, argv, &i, "--out", &missing);
    if (missing) return usage_error("option '--out' needs a directory");
    if (out) {
      opts.out_dir = out;
      continue;
    }
    const char *print_value = NULL;
    for (int k = 0; k < 2 && !print_value && !missing; k++)
      if ((print_value = option_value(argc, argv, &i, print_flags[k], &missing)))
        print_values[k] = print_value;
    if (missing) return usage_error("option '%s' needs a value", argv[i]);
    if (print_value) continue;
    int backend = -1, emit = -1, got = backend_or_emit(argc, argv, &i, &backend, &emit);
    if (got == 0 && exporting) got = export_option(argc, argv, &i, &opts);
    if (got < 0) return EXIT_USAGE;
    if (got > 0) {
      if (backend >= 0) opts.backend = (cn_backend_kind)backend;
      if (emit == 0) opts.emit_asgn = true;
      if (emit == 1) opts.emit_loops = true;
      if (emit == 2) opts.emit_c = true;
    } else if (exporting && strcmp(argv[i], "--sampler") == 0) {
      opts.export_sampler = true;
    } else if (strcmp(argv[i], "--json") == 0) {
      opts.json = true;
    } else if (strcmp(argv[i], "--check-nan") == 0) {
      check_nan = true;
    } else if (strcmp(argv[i], "--timings") == 0) {
      timings = true;
    } else if (strcmp(argv[i], "-e") == 0) {
      if (i + 1 >= argc) return usage_error("option '-e' needs a value");
      inline_text = argv[++i];
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      fputs(usage_text, stdout);
      return 0;
    } else if (argv[i][0] == '-') {
      return unknown_word(exporting ? "export option" : "run option", argv[i],
                          exporting ? N_EXPORT_OPTIONS : N_RUN_OPTIONS, run_options);
    } else if (file) {
      return usage_error("unexpected argument '%s' (the script is '%s')", argv[i], file);
    } else {
      file = argv[i];
    }
  }
  if (!file == !inline_text) return usage_error("%s takes a script file or -e TEXT", argv[1]);
  if (exporting && (!opts.export_input || !opts.export_output))
    return usage_error("export needs --input NAME and --output NAME");
  cn_backend_kind chosen =
      opts.backend == CN_BACKEND_DEFAULT ? (cn_backend_kind)default_backend : opts.backend;
  if (opts.emit_c && !(cn_backend_caps(chosen) & CN_BACKEND_COMPILED))
    return usage_error("--emit=c needs a backend that generates code, not --backend %s",
                       cn_backend_name(chosen));
  const char *why = NULL;
  char *text = file ? read_file(file, &why) : NULL;
  if (file && !text) {
    fprintf(stderr, "cannl: cannot read '%s': %s\n", file, why);
    return EXIT_USAGE;
  }
  uint64_t start = now_us();
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = ctx ? cn_graph_create(ctx) : NULL;
  const char *name = file ? file : "<-e>", *source = file ? text : inline_text;
  int status = 0;
  bool parse_failed = false;
  opts.syntax_error = &parse_failed;
  /* Launched by mpirun (Open MPI's, or a PMI/PMIx launcher): every rank runs the script;
   * rank 0 alone prints (the others' stdout goes to /dev/null) and writes files. */
  bool mpi = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
  if (ctx && mpi && cn_dist_init(ctx, 0) != CN_OK) {
    fprintf(stderr, "cannl: %s\n", cn_ctx_error(ctx));
    cn_ctx_destroy(ctx);
    free(text);
    return EXIT_RUNTIME;
  }
  if (mpi && cn_dist_rank() != 0 && !freopen("/dev/null", "w", stdout)) {
    fprintf(stderr, "cannl: rank %d: cannot silence its output\n", cn_dist_rank());
    cn_dist_abort(EXIT_RUNTIME);
  }
  if (ctx && !opts.json && isatty(STDERR_FILENO)) cn_ctx_set_progress(ctx, draw_progress, NULL);
  bool bad_print = false;
  for (int k = 0; k < 2 && g && !bad_print; k++)
    bad_print = print_values[k] && cn_ctx_set_option(ctx, print_keys[k], print_values[k]) != CN_OK;
  if (bad_print) {
    fprintf(stderr, "cannl: %s\n", cn_ctx_error(ctx));
    status = EXIT_USAGE;
  } else if (!g || (check_nan && cn_ctx_set_option(ctx, "check", "nan") != CN_OK)) {
    fputs("cannl: out of memory\n", stderr);
    status = EXIT_RUNTIME;
  } else if (cn_notation_run(g, name, source, &opts) != CN_OK) {
    /* stdout is block-buffered on a pipe: what the script printed before failing must come out
     * before the message when both streams go to the same place */
    fflush(stdout);
    fprintf(stderr, "%s\n", cn_ctx_error(ctx));
    status = parse_failed ? EXIT_USAGE : EXIT_RUNTIME;
  }
  if (exporting && status == 0) {
    /* what export wrote, as cn_notation_run names the files (stdout is the script's) */
    const char *name = opts.export_name ? opts.export_name : opts.export_output;
    const char *dir = opts.export_dir ? opts.export_dir : ".";
    fflush(stdout);
    fprintf(stderr, "cannl: exported %s_forward ('%s' from '%s') to %s/%s.c and %s/%s.h", name,
            opts.export_output, opts.export_input, dir, name, dir, name);
    if (opts.export_sampler)
      fprintf(stderr, ", its sampler to %s/%s_sample.c and %s/%s_sample.h", dir, name, dir, name);
    fputc('\n', stderr);
  }
  if (timings && ctx) {
    fflush(stdout); /* the script's output first, where both streams go to one place */
    print_timings(ctx, now_us() - start, opts.json);
  }
  /* A failure may be one rank's own: end the others rather than leave them waiting on it. */
  if (mpi && status != 0 && cn_dist_size() > 1) {
    fprintf(stderr, "cannl: rank %d of %d failed: ending every rank\n", cn_dist_rank(),
            cn_dist_size());
    cn_dist_abort(status);
  }
  if (mpi && cn_dist_finalize(ctx) != CN_OK && status == 0) {
    fprintf(stderr, "cannl: %s\n", cn_ctx_error(ctx));
    status = EXIT_RUNTIME;
  }
  cn_ctx_destroy(ctx);
  free(text);
  return status;
}

/* cannl run, and cannl export (`exporting`: run, then export the model the options name). */
static int cmd_run(int argc, char **argv, bool exporting) {
  const char **sets = malloc(sizeof *sets * (size_t)argc); /* --set's values point into argv */
  if (!sets) {
    fputs("cannl: out of memory\n", stderr);
    return EXIT_RUNTIME;
  }
  int status = run_with_sets(argc, argv, exporting, sets);
  free(sets);
  return status;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fputs(usage_text, stderr);
    return EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "demo") == 0) return cmd_demo(argc, argv);
  if (strcmp(cmd, "run") == 0) return cmd_run(argc, argv, false);
  if (strcmp(cmd, "export") == 0) return cmd_run(argc, argv, true);
  size_t n_commands = sizeof commands / sizeof *commands, k = 0;
  while (k < n_commands && strcmp(cmd, commands[k]) != 0) k++;
  if (k == n_commands) return unknown_word("command", cmd, (int)n_commands, commands);
  if (argc > 2) return usage_error("'%s' takes no argument, not '%s'", cmd, argv[2]);
  if (strcmp(cmd, "--version") == 0) {
    printf("cannl %s\n", CANNL_VERSION);
    return 0;
  }
  if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
    fputs(usage_text, stdout);
    return 0;
  }
  if (strcmp(cmd, "devices") == 0) return cmd_devices();
  return strcmp(cmd, "ops") == 0 ? cmd_ops() : cmd_precisions(); /* the rest of commands[] */
}
