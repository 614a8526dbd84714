/* Helpers for the files cannl reads and writes, shared by the layers that keep files (the
 * compile cache and tune records of src/backend, the atomic writer of src/data, the sysfs reads
 * of src/sched): the one checked parse of a decimal count read from a file, the clean-up of
 * temporary files that killed processes left, the names of file kinds for messages, mkdir -p
 * (the cache directory, a script's output directory), and the CPU's model name.
 *
 * Invariants: a number read from a file is never parsed with atoi, strto* or sscanf (which
 * saturate, wrap, accept signs and blanks, or, for sscanf, are undefined on out-of-range input);
 * a temporary file is removed only when its name has exactly the form its writer gives it and
 * names a process of this host that no longer exists. */
#define _XOPEN_SOURCE 700 /* dirfd, gethostname, kill, unlinkat */
#include "core/core.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bool cn_parse_natural(const char *s, size_t len, uint64_t max, uint64_t *out) {
  uint64_t v = 0;
  if (len == 0) return false;
  for (size_t i = 0; i < len; i++) {
    if (s[i] < '0' || s[i] > '9' || __builtin_mul_overflow(v, 10, &v) ||
        __builtin_add_overflow(v, (uint64_t)(s[i] - '0'), &v) || v > max)
      return false;
  }
  *out = v;
  return true;
}

void cn_host_tag(char *out, size_t size) {
  char name[256] = "";
  if (gethostname(name, sizeof name - 1) != 0 || !name[0]) snprintf(name, sizeof name, "host");
  size_t n = 0;
  for (const char *c = name; *c && n + 1 < size; c++, n++) {
    bool keep = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                *c == '-';
    out[n] = keep ? *c : '_';
  }
  out[n] = '\0';
}

/* The pid of a temporary's name: rest (after the prefix) is PID "." SERIAL followed by exactly
 * one of the suffixes; 0 when it is not. */
static pid_t temporary_pid(const char *rest, const char *const *suffixes) {
  size_t len = strlen(rest);
  for (const char *const *suffix = suffixes; *suffix; suffix++) {
    size_t slen = strlen(*suffix);
    if (len <= slen || strcmp(rest + len - slen, *suffix) != 0) continue;
    const char *dot = memchr(rest, '.', len - slen);
    uint64_t pid, serial;
    if (dot && cn_parse_natural(rest, (size_t)(dot - rest), INT_MAX, &pid) && pid > 0 &&
        cn_parse_natural(dot + 1, len - slen - (size_t)(dot + 1 - rest), UINT64_MAX, &serial))
      return (pid_t)pid;
  }
  return 0;
}

void cn_remove_stale_temporaries(const char *dir, const char *prefix, const char *const *suffixes) {
  size_t plen = strlen(prefix);
  DIR *d = opendir(dir);
  if (!d) return;
  for (struct dirent *e; (e = readdir(d));) {
    if (strncmp(e->d_name, prefix, plen) != 0) continue;
    pid_t pid = temporary_pid(e->d_name + plen, suffixes);
    /* pid > 0: kill(0, ...) or a negative pid would address a whole process group. */
    if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) unlinkat(dirfd(d), e->d_name, 0);
  }
  closedir(d);
}

const char *cn_file_kind(unsigned mode) {
  mode_t m = (mode_t)mode;
  return S_ISREG(m)    ? "a regular file"
         : S_ISDIR(m)  ? "a directory"
         : S_ISLNK(m)  ? "a symbolic link"
         : S_ISFIFO(m) ? "a FIFO"
         : S_ISSOCK(m) ? "a socket"
         : S_ISCHR(m)  ? "a character device"
         : S_ISBLK(m)  ? "a block device"
                       : "a special file";
}

bool cn_make_directories(const char *dir, size_t existing, unsigned mode, const char *what,
                         char *why, size_t why_size) {
  char path[PATH_MAX];
  size_t n = strlen(dir);
  if (n >= sizeof path) {
    snprintf(why, why_size, "cannot create %s '%s': %s", what, dir, strerror(ENAMETOOLONG));
    return false;
  }
  memcpy(path, dir, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (path[i] != '/' && path[i] != '\0') continue;
    if (path[i - 1] == '/' || i <= existing) continue; /* repeated or trailing slash */
    char saved = path[i];
    path[i] = '\0';
    if (mkdir(path, (mode_t)mode) != 0 && errno != EEXIST) {
      snprintf(why, why_size, "cannot create %s '%s' ('%s': %s)", what, dir, path, strerror(errno));
      return false;
    }
    path[i] = saved;
  }
  struct stat st;
  if (stat(dir, &st) != 0) {
    snprintf(why, why_size, "cannot use %s '%s': %s", what, dir, strerror(errno));
    return false;
  }
  if (!S_ISDIR(st.st_mode)) {
    snprintf(why, why_size, "%s '%s' is not a directory", what, dir);
    return false;
  }
  return true;
}

/* The model name of /proc/cpuinfo, read once per process (every GEMM statement's tune key names
 * it). */
static char cpu_model_name[256];
static pthread_once_t cpu_model_once = PTHREAD_ONCE_INIT;

static void read_cpu_model(void) {
  snprintf(cpu_model_name, sizeof cpu_model_name, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    const char *colon = strchr(line, ':');
    if (strncmp(line, "model name", 10) == 0 && colon) {
      snprintf(cpu_model_name, sizeof cpu_model_name, "%s", colon + 2);
      cpu_model_name[strcspn(cpu_model_name, "\n")] = '\0';
      break;
    }
  }
  fclose(f);
}

const char *cn_cpu_model(void) {
  pthread_once(&cpu_model_once, read_cpu_model);
  return cpu_model_name;
}
