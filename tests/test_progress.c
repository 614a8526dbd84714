/* The progress of long work (issue 29): the context's hook (cn_ctx_set_progress) receives a line
 * once compiling or tuning has lasted past the delay, counted by kind, again when the counts change
 * or a fifth of a second later, and NULL exactly once when the work ends; nothing for work shorter
 * than the delay, nothing without a hook; work starting soon after the previous ends continues its
 * clock. A script run through the API erases the line before it writes anything (the routine and
 * the tuned GEMM nest of a statement end before the statement prints). `cannl run` draws the line
 * on stderr when it is a terminal (a pseudo-terminal here), cut to the terminal's width, erased
 * before the script's next output, and never with --json or when stderr is not a terminal. A
 * progress loop's rate and time left count from the end of its first step, which holds the
 * compilation, and its total time from its start.
 *
 * CANNL_PROGRESS_AFTER_MS (the delay, a knob for tests) is set to 0 where a line must appear, and
 * a fresh cache directory makes every routine compile. */
#define _XOPEN_SOURCE 700 /* posix_openpt, mkdtemp, setenv */
#include "check.h"
#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- The hook through the context ---- */

typedef struct {
  char lines[64][160]; /* "" for NULL */
  int n;
} calls;

static void record(void *user, const char *line) {
  calls *c = user;
  if (c->n < 64) snprintf(c->lines[c->n], sizeof c->lines[0], "%s", line ? line : "");
  c->n++;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) continue;
}

/* The seconds at the end of a line "... ... S s"; -1 when it does not end so. */
static double line_seconds(const char *line) {
  const char *dots = strstr(line, " ... ");
  double s;
  char unit[4];
  return dots && sscanf(dots + 5, "%lf %3s", &s, unit) == 2 && strcmp(unit, "s") == 0 ? s : -1;
}

static void test_delay_knob(void) {
  cn_ctx *ctx = cn_ctx_create();
  calls c = {.n = 0};
  unsetenv("CANNL_PROGRESS_AFTER_MS");
  cn_ctx_set_progress(ctx, record, &c);
  CHECK_INT(ctx->progress.after_us, 1000000);
  setenv("CANNL_PROGRESS_AFTER_MS", "250", 1);
  cn_ctx_set_progress(ctx, record, &c);
  CHECK_INT(ctx->progress.after_us, 250000);
  setenv("CANNL_PROGRESS_AFTER_MS", "25x", 1); /* not a number: the default */
  cn_ctx_set_progress(ctx, record, &c);
  CHECK_INT(ctx->progress.after_us, 1000000);
  /* work shorter than the delay: not a call */
  cn_progress_add(ctx, CN_PROGRESS_COMPILE, 1);
  cn_progress_tick(ctx);
  cn_progress_add(ctx, CN_PROGRESS_COMPILE, -1);
  CHECK_INT(c.n, 0);
  cn_ctx_destroy(ctx);
}

static void test_lines(void) {
  cn_ctx *ctx = cn_ctx_create();
  calls c = {.n = 0};
  setenv("CANNL_PROGRESS_AFTER_MS", "100", 1);
  cn_ctx_set_progress(ctx, record, &c);
  cn_progress_add(ctx, CN_PROGRESS_COMPILE, 3);
  cn_progress_tick(ctx); /* younger than 100 ms */
  CHECK_INT(c.n, 0);
  sleep_ms(120);
  cn_progress_tick(ctx);
  CHECK_INT(c.n, 1);
  CHECK(strncmp(c.lines[0], "compiling 3 routines ... ", 25) == 0);
  CHECK(line_seconds(c.lines[0]) >= 0.0 && line_seconds(c.lines[0]) < 10);
  cn_progress_tick(ctx); /* the same counts, a fifth of a second not past */
  CHECK_INT(c.n, 1);
  cn_progress_add(ctx, CN_PROGRESS_TUNE, 1); /* a new count: a new line at once */
  CHECK_INT(c.n, 2);
  CHECK(strncmp(c.lines[1], "compiling 3 routines, tuning 1 GEMM nest ... ", 45) == 0);
  sleep_ms(220);
  cn_progress_tick(ctx); /* the clock moved */
  CHECK_INT(c.n, 3);
  CHECK(strncmp(c.lines[2], "compiling 3 routines, tuning 1 GEMM nest ... ", 45) == 0);
  CHECK_MSG(line_seconds(c.lines[2]) >= 0.3, "%s", c.lines[2]);
  cn_progress_add(ctx, CN_PROGRESS_TUNE, -1);
  CHECK_INT(c.n, 4);
  CHECK(strncmp(c.lines[3], "compiling 3 routines ... ", 25) == 0);
  cn_progress_add(ctx, CN_PROGRESS_COMPILE, -1);
  CHECK(strncmp(c.lines[4], "compiling 2 routines (1 done) ... ", 34) == 0);
  cn_progress_add(ctx, CN_PROGRESS_COMPILE, -2); /* the end: NULL */
  CHECK_INT(c.n, 6);
  CHECK_STR(c.lines[5], "");
  /* soon after, more work continues the clock and the done counts: a line at once */
  cn_progress_add(ctx, CN_PROGRESS_COMPILE, 1);
  CHECK_INT(c.n, 7);
  CHECK(strncmp(c.lines[6], "compiling 1 routine (3 done) ... ", 33) == 0);
  CHECK_MSG(line_seconds(c.lines[6]) >= 0.3, "%s", c.lines[6]);
  cn_progress_add(ctx, CN_PROGRESS_COMPILE, -1);
  CHECK_INT(c.n, 8);
  CHECK_STR(c.lines[7], "");
  /* past the gap, new work starts a new clock: younger than the delay, no call */
  sleep_ms(600);
  cn_progress_add(ctx, CN_PROGRESS_COMPILE, 1);
  cn_progress_add(ctx, CN_PROGRESS_COMPILE, -1);
  CHECK_INT(c.n, 8);
  /* no hook: nothing */
  cn_ctx_set_progress(ctx, NULL, NULL);
  cn_progress_add(ctx, CN_PROGRESS_COMPILE, 1);
  sleep_ms(120);
  cn_progress_tick(ctx);
  cn_progress_add(ctx, CN_PROGRESS_COMPILE, -1);
  CHECK_INT(c.n, 8);
  cn_ctx_destroy(ctx);
}

/* ---- A script through the API: the hook writes into the script's output ---- */

static FILE *script_out;

static void mark(void *user, const char *line) {
  (void)user;
  fprintf(script_out, "<%s>", line ? line : "clear");
}

/* After every line <...> comes another line or <clear>, never the script's output; returns the
 * number of <clear>. */
static int check_cleared(const char *text) {
  int clears = 0;
  for (const char *at = strchr(text, '<'); at; at = strchr(at, '<')) {
    const char *end = strchr(at, '>');
    CHECK(end != NULL);
    if (!end) break;
    if (strncmp(at, "<clear>", 7) == 0)
      clears++;
    else
      CHECK_MSG(end[1] == '<', "output after a line: %.40s", end + 1);
    at = end + 1;
  }
  return clears;
}

/* A 256^3 matmul (tuned, issue 17's least) then a small routine: the line names the routine and
 * the GEMM nest, and each is erased before the statement prints. */
static void test_script(const char *cache_dir) {
  setenv("CANNL_PROGRESS_AFTER_MS", "0", 1);
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  CHECK_INT(cn_ctx_set_option(ctx, "cache_dir", cache_dir), CN_OK);
  CHECK_INT(cn_ctx_set_option(ctx, "tune", "quick"), CN_OK);
  /* the suite also runs with CANNL_SCHEDULE=none: a GEMM plan is what is tuned */
  CHECK_INT(cn_ctx_set_option(ctx, "schedule", "all"), CN_OK);
  cn_ctx_set_progress(ctx, mark, NULL);
  script_out = tmpfile();
  CHECK(script_out != NULL);
  if (!script_out) return;
  cn_notation_options opts = {.backend = CN_BACKEND_C, .out = script_out};
  const char *text = "let a = range_of_shape ~batch_dims:[256] ~input_dims:[256] /. !.65536.0\n"
                     "let w = range_of_shape ~input_dims:[256] ~output_dims:[256] /. !.65536.0\n"
                     "let y = (w * a) ++ \"...|... => 0\"\n"
                     "printf \"sum %g\\n\" y\n"
                     "print \"done\"\n";
  CHECK_INT(cn_notation_run(g, "progress.cnl", text, &opts), CN_OK);
  static char out[65536];
  rewind(script_out);
  size_t n = fread(out, 1, sizeof out - 1, script_out);
  out[n] = '\0';
  fclose(script_out);
  CHECK_HAS(out, "<compiling 1 routine ... ");
  CHECK_HAS(out, "<compiling 1 routine, tuning 1 GEMM nest ... ");
  CHECK_HAS(out, "<clear>sum ");
  CHECK_HAS(out, "done\n");
  CHECK(check_cleared(out) >= 1);
  cn_ctx_destroy(ctx);
}

/* ---- `cannl run` on a pseudo-terminal ---- */

/* Runs `cannl ARGS` with stdout on a pseudo-terminal of `cols` columns (0: unset) and stderr on
 * it too or, when !stderr_tty, in a file: what the terminal received into out, the file into err.
 * Returns the exit status. */
static int run_pty(const char *args, bool stderr_tty, int cols, char *out, size_t cap, char *err,
                   size_t err_cap) {
  const char *cli = getenv("CANNL_CLI");
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "exec '%s' %s", cli ? cli : "cannl", args);
  out[0] = err[0] = '\0';
  int master = posix_openpt(O_RDWR | O_NOCTTY);
  CHECK(master >= 0 && grantpt(master) == 0 && unlockpt(master) == 0);
  const char *name = master >= 0 ? ptsname(master) : NULL;
  int slave = name ? open(name, O_RDWR | O_NOCTTY) : -1;
  CHECK(slave >= 0);
  FILE *errf = tmpfile();
  CHECK(errf != NULL);
  if (slave < 0 || !errf) return -1;
  if (cols > 0)
    CHECK(ioctl(master, TIOCSWINSZ,
                &(struct winsize){.ws_row = 24, .ws_col = (unsigned short)cols}) == 0);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    int null = open("/dev/null", O_RDONLY);
    if (null < 0 || dup2(null, 0) < 0 || dup2(slave, 1) < 0 ||
        dup2(stderr_tty ? slave : fileno(errf), 2) < 0)
      _exit(126);
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
  }
  CHECK(pid > 0);
  /* the slave stays open here until the child is gone, so reading never meets a closed side */
  size_t n = 0;
  int status = -1;
  bool exited = pid < 0;
  for (;;) {
    struct pollfd p = {.fd = master, .events = POLLIN};
    int ready = poll(&p, 1, exited ? 0 : 50);
    if (ready > 0) {
      ssize_t got = read(master, out + n, cap - 1 - n);
      if (got > 0) {
        n += (size_t)got;
        if (n < cap - 1) continue;
      }
    }
    if (exited) break;
    if (waitpid(pid, &status, WNOHANG) == pid) exited = true;
  }
  out[n] = '\0';
  close(slave);
  close(master);
  rewind(errf);
  err[fread(err, 1, err_cap - 1, errf)] = '\0';
  fclose(errf);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Every "\rcompiling ..." the terminal received is ended by "\033[K" and followed by another one
 * or by "\r\033[K"; returns how many there were. */
static int terminal_lines(const char *text) {
  int lines = 0;
  for (const char *at = strstr(text, "\rcompiling"); at; at = strstr(at + 1, "\rcompiling")) {
    lines++;
    const char *end = strstr(at, "\033[K");
    CHECK(end != NULL);
    if (!end) break;
    end += 3;
    CHECK_MSG(strncmp(end, "\rcompiling", 10) == 0 || strncmp(end, "\r\033[K", 4) == 0,
              "after a line: %.40s", end);
  }
  return lines;
}

/* Writes DIR/NAME holding text and makes DIR/CACHE the cache directory of the commands run next;
 * false when the file cannot be written. */
static bool prepare(const char *dir, const char *name, const char *text, const char *cache) {
  char path[600];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f) return false;
  fputs(text, f);
  CHECK(fclose(f) == 0);
  snprintf(path, sizeof path, "%s/%s", dir, cache);
  setenv("CANNL_CACHE_DIR", path, 1);
  return true;
}

static void test_terminal(const char *dir) {
  char path[600], args[1400];
  if (!prepare(dir, "small.cnl",
               "let x = [1; 2; 3]\nlet y = (x *. 2) ++ \"...|... => 0\"\nprint \"first\"\n"
               "print y\nprintf \"%g\\n\" (y + 1)\n",
               "cache_tty"))
    return;
  static char out[65536], err[65536];
  setenv("CANNL_PROGRESS_AFTER_MS", "0", 1);
  snprintf(args, sizeof args, "run '%s/small.cnl'", dir);
  CHECK_INT(run_pty(args, true, 0, out, sizeof out, err, sizeof err), 0);
  CHECK(terminal_lines(out) >= 2); /* the two statements */
  CHECK_HAS(out, "first\r\n\rcompiling 1 routine ... 0.0 s\033[K");
  CHECK_HAS(out, "\r\033[K\"y\" (#");
  CHECK_HAS(out, "13\r\n");
  /* 24 columns: 23 characters of the line */
  snprintf(path, sizeof path, "%s/cache_narrow", dir);
  setenv("CANNL_CACHE_DIR", path, 1);
  CHECK_INT(run_pty(args, true, 24, out, sizeof out, err, sizeof err), 0);
  CHECK_HAS(out, "\rcompiling 1 routine ...\033[K");
  CHECK(terminal_lines(out) >= 2);
  /* --json: no line, on a terminal too */
  snprintf(path, sizeof path, "%s/cache_json", dir);
  setenv("CANNL_CACHE_DIR", path, 1);
  snprintf(args, sizeof args, "run '%s/small.cnl' --json", dir);
  CHECK_INT(run_pty(args, true, 0, out, sizeof out, err, sizeof err), 0);
  CHECK_HAS(out, "{\"text\": \"first");
  CHECK(!strstr(out, "compiling") && !strstr(out, "\033[K"));
  /* stderr not a terminal: no line, neither there nor on stdout's terminal */
  snprintf(path, sizeof path, "%s/cache_file", dir);
  setenv("CANNL_CACHE_DIR", path, 1);
  snprintf(args, sizeof args, "run '%s/small.cnl'", dir);
  CHECK_INT(run_pty(args, false, 0, out, sizeof out, err, sizeof err), 0);
  CHECK_HAS(out, "first\r\n");
  CHECK(!strstr(out, "compiling") && !strstr(err, "compiling"));
  CHECK_STR(err, "");
}

/* The "rate" and the time left or taken of a --json progress object for step `step`, false when
 * there is none. */
static bool progress_of(const char *text, int step, double *rate, double *seconds) {
  char key[64];
  snprintf(key, sizeof key, "\"step\": %d, ", step);
  const char *at = strstr(text, key), *r = at ? strstr(at, "\"rate\": ") : NULL;
  const char *s = r ? strstr(r, "_s\": ") : NULL;
  return s && sscanf(r + 8, "%lf", rate) == 1 && sscanf(s + 5, "%lf", seconds) == 1;
}

/* A loop of 5 steps whose first compiles its routine (a fresh cache): step 1 shows no rate and no
 * time left (null: its time holds the compilation); step 2, the rate of that one step and the time
 * left at it; the last, the rate of steps 2 .. 5 over the time since step 1 ended (the old rate,
 * 5 steps over the whole time, is a few times less) and the whole time. */
static void test_rate(const char *dir) {
  char args[1400];
  if (!prepare(dir, "loop.cnl",
               "let x = [1; 2; 3]\nlet y = (x *. 2) ++ \"...|... => 0\"\n"
               "let%cd step = {acc} =+ y\nfor i = 0 to 4 progress ~loss:acc do\n  run step\ndone\n",
               "cache_rate"))
    return;
  static char out[65536], err[65536];
  snprintf(args, sizeof args, "run '%s/loop.cnl' --json", dir);
  /* the step is tiny: compiled at once only when no routine is interpreted first */
  CHECK(setenv("CANNL_INTERPRET_BELOW", "0", 1) == 0);
  CHECK_INT(run_pty(args, false, 0, out, sizeof out, err, sizeof err), 0);
  CHECK(unsetenv("CANNL_INTERPRET_BELOW") == 0);
  CHECK_HAS(out, "\"step\": 1, \"total\": 5, \"loss\": 12, \"rate\": null, \"eta_s\": null}");
  double rate2 = 0, eta2 = 0, rate5 = 0, elapsed = 0;
  bool found = progress_of(out, 2, &rate2, &eta2) && progress_of(out, 5, &rate5, &elapsed);
  CHECK_MSG(found, "%s", out);
  if (!found) return;
  CHECK_HAS(out, "\"step\": 5, \"total\": 5, \"loss\": 60, ");
  CHECK_HAS(out, "\"elapsed_s\": ");
  /* step 2: one step in 1 / rate2 seconds, three left (eta_s is printed to the millisecond) */
  CHECK_MSG(fabs(eta2 - 3 / rate2) <= 0.0005 + 0.02 * eta2, "rate %g, eta %g", rate2, eta2);
  CHECK_MSG(rate5 > 3 * 5 / elapsed, "rate %g, 5 steps in %g s", rate5, elapsed);
}

int main(void) {
  char dir[] = "/tmp/cannl-test-progress-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  test_delay_knob();
  test_lines();
  test_terminal(dir);
  test_rate(dir);
  test_script(dir);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK_INT(system(cmd), 0);
  CHECK_DONE();
}
