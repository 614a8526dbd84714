/* The `cannl` command (path in CANNL_CLI): `run` with a file and with -e, --json output parsed
 * for values, --emit, --backend, and the exit statuses (0 success, 1 runtime error, 2 usage or
 * parse error, with the positioned message on stderr); unreadable paths (missing, a directory, a
 * device) are refused with exit 2 and the reason. */
#include "check.h"

#include <stdlib.h>
#include <sys/wait.h>

/* Runs the command line (through sh), returning its exit status and its stdout+stderr. */
static int run(const char *args, char *out, size_t cap) {
  const char *cli = getenv("CANNL_CLI");
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", cli ? cli : "cannl", args);
  FILE *p = popen(cmd, "r");
  size_t n = p ? fread(out, 1, cap - 1, p) : 0;
  out[n] = '\0';
  int st = p ? pclose(p) : -1;
  return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int main(void) {
  static char out[1 << 16];
  const char *root = getenv("CANNL_SOURCE_DIR");
  char args[4096];

  snprintf(args, sizeof args, "run '%s/examples/micrograd.cnl' --backend interp --json",
           root ? root : ".");
  CHECK_INT(run(args, out, sizeof out), 0);
  CHECK_HAS(out, "\"label\": \"g\"");
  CHECK_HAS(out, "\"label\": \"a.grad\"");
  const char *v = strstr(out, "\"label\": \"b.grad\"");
  v = v ? strstr(v, "\"values\": [") : NULL;
  CHECK(v && fabs(strtod(v + strlen("\"values\": ["), NULL) - 645.5773) < 1e-3);

  CHECK_INT(
      run("run -e 'print ([(1, 2); (3, 4)] * [1; 1])' --json --backend interp", out, sizeof out),
      0);
  CHECK_HAS(out, "\"output\": [2], \"values\": [3, 7]}");

  CHECK_INT(run("run -e 'let x = [1; 2]\nprint (x *. x)' --emit=asgn --backend c", out, sizeof out),
            0);
  CHECK_HAS(out, "# cnl_1: assignments");
  CHECK_HAS(out, "mul =:+ x * x;");

  CHECK_INT(run("run -e 'let x = [1; 2' --backend interp", out, sizeof out), 2);
  CHECK_HAS(out, "<-e>:1:14: expected");
  CHECK_INT(run("run -e 'print nothing' --backend interp", out, sizeof out), 1);
  CHECK_HAS(out, "<-e>:1:7: unbound name 'nothing'");
  /* both streams on one pipe: the earlier print comes before the later error */
  CHECK_INT(run("run -e 'print [5]\nprint nothing' --backend interp", out, sizeof out), 1);
  const char *printed = strstr(out, "5"), *failed = strstr(out, "<-e>:2:7: unbound name");
  CHECK(printed && failed && printed < failed);
  CHECK_INT(run("run --backend gpu -e 'print 1'", out, sizeof out), 2);
  CHECK_HAS(out, "unknown backend 'gpu'");
  CHECK_INT(run("run /nonexistent/file.cnl", out, sizeof out), 2);
  CHECK_HAS(out, "cannl: cannot read '/nonexistent/file.cnl': No such file or directory");
  /* a directory (fopen succeeds on one) and a non-regular file are refused, not run as empty */
  snprintf(args, sizeof args, "run '%s/examples'", root ? root : ".");
  CHECK_INT(run(args, out, sizeof out), 2);
  CHECK_HAS(out, "/examples': it is a directory");
  CHECK_INT(run("run /dev/null", out, sizeof out), 2);
  CHECK_HAS(out, "cannl: cannot read '/dev/null': it is not a regular file");
  CHECK_INT(run("run -e 'print [1]' --emit=c --backend interp", out, sizeof out), 2);
  /* --check-nan: the first NaN a routine writes stops the run (exit 1), at the tensor's line */
  CHECK_INT(run("run --check-nan --backend interp -e 'let y = log [1.0; -1.0]\nprint y'", out,
                sizeof out),
            1);
  CHECK_HAS(out, "<-e>:1:9: routine 'cnl_1' wrote NaN into \"y\" (#2) at [1]");
  CHECK_INT(run("run --backend interp -e 'let y = log [1.0; -1.0]\nprint y'", out, sizeof out), 0);
  CHECK_INT(run("--version", out, sizeof out), 0);
  CHECK_HAS(out, "cannl ");
  CHECK_DONE();
}
