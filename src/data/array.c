/* cn_array and the file plumbing the readers and writers of src/data share (data.h): a reader
 * serving a file's bytes in order, plain or gzip-inflated on demand; positioned messages;
 * byte-order conversion; shape sizes; an atomic writer.
 *
 * Invariants: a reader holds at most the file's bytes and zlib's state, never a buffer sized by
 * the content's claims; the offsets of messages are those of the served (decompressed) bytes,
 * except for failures of the gzip layer itself, which name the compressed byte; a writer's
 * temporary file is either renamed over the target by commit or removed (by abort, or, after the
 * process was killed, by the next save of the same target); a save replaces only a regular file. */
#define _XOPEN_SOURCE 700 /* realpath, S_ISVTX */
#include "data/data.h"
#include "data/io_hook.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int64_t cn_array_numel(const cn_array *a) {
  size_t n;
  if (!a || a->rank < 0 || a->rank > CN_MAX_RANK || !cn_data_numel(a->rank, a->dims, &n) ||
      n > INT64_MAX)
    return -1;
  return (int64_t)n;
}

void cn_array_free(cn_array *a) {
  if (!a) return;
  free(a->cells);
  memset(a, 0, sizeof *a);
}

bool cn_data_numel(int rank, const int64_t *dims, size_t *out) {
  bool zero = false;
  for (int k = 0; k < rank; k++) {
    if (dims[k] < 0) return false;
    zero |= dims[k] == 0;
  }
  size_t n = 1;
  for (int k = 0; k < rank && !zero; k++)
    if ((uint64_t)dims[k] > SIZE_MAX || !cn_mul_size(n, (size_t)dims[k], &n)) return false;
  *out = zero ? 0 : n;
  return true;
}

/* ---- Reading ---- */

static const unsigned char gzip_magic[2] = {0x1f, 0x8b};

cn_status cn_data_reader_open_bytes(cn_ctx *ctx, const char *name, const void *bytes, size_t len,
                                    bool gunzip, cn_data_reader *r) {
  memset(r, 0, sizeof *r);
  r->path = name;
  r->raw = bytes;
  r->raw_len = len;
  r->gzip = gunzip && len >= 2 && memcmp(bytes, gzip_magic, 2) == 0;
  if (!r->gzip) return CN_OK;
  /* 16 + MAX_WBITS: a gzip wrapper only, whose CRC-32 and length trailer inflate checks. */
  int rc = inflateInit2(&r->zs, 16 + MAX_WBITS);
  if (rc == Z_MEM_ERROR) return cn_fail(ctx, CN_ERR_NOMEM, "%s: out of memory for zlib", name);
  if (rc != Z_OK) return cn_fail(ctx, CN_ERR_IO, "%s: zlib cannot start: error %d", name, rc);
  r->z_live = true;
  return CN_OK;
}

FILE *cn_data_open_read(const char *path) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
  if (!f && fd >= 0) {
    int err = errno;
    close(fd);
    errno = err;
  }
  return f;
}

cn_status cn_data_reader_open(cn_ctx *ctx, const char *path, bool gunzip, cn_data_reader *r) {
  memset(r, 0, sizeof *r);
  FILE *f = cn_data_open_read(path);
  if (!f) return cn_fail(ctx, CN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  const char *why = NULL;
  if (fstat(fileno(f), &st) != 0)
    why = strerror(errno);
  else if (!S_ISREG(st.st_mode))
    why = "not a regular file";
  if (why) {
    fclose(f);
    return cn_fail(ctx, CN_ERR_IO, "%s: cannot read: %s", path, why);
  }
  if ((uintmax_t)st.st_size > SIZE_MAX) {
    fclose(f);
    return cn_fail(ctx, CN_ERR_IO, "%s: cannot read: too large for memory", path);
  }
  size_t len = (size_t)st.st_size;
  unsigned char *bytes = cn_malloc(ctx, len);
  if (!bytes) {
    fclose(f);
    return cn_fail(ctx, CN_ERR_NOMEM, "%s: out of memory reading the file (%zu bytes)", path, len);
  }
  size_t got = fread(bytes, 1, len, f);
  bool failed = got != len || ferror(f);
  int err = errno;
  fclose(f);
  if (failed) {
    free(bytes);
    return cn_fail(ctx, CN_ERR_IO, "%s: cannot read: %s", path,
                   got != len ? "the file shrank while being read" : strerror(err));
  }
  cn_status s = cn_data_reader_open_bytes(ctx, path, bytes, len, gunzip, r);
  if (s != CN_OK) {
    free(bytes);
    return s;
  }
  r->owned = bytes;
  return CN_OK;
}

cn_status cn_data_load_at_most(cn_ctx *ctx, const char *path, size_t max_cells, const char *why,
                               cn_array *out) {
  static const unsigned char npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  memset(out, 0, sizeof *out);
  cn_data_reader r;
  cn_status s = cn_data_reader_open(ctx, path, true, &r);
  if (s != CN_OK) return s;
  r.max_cells = max_cells;
  r.max_cells_why = why;
  bool npy = r.raw_len >= sizeof npy_magic && memcmp(r.raw, npy_magic, sizeof npy_magic) == 0;
  s = npy ? cn_data_npy_read(ctx, &r, out) : cn_data_idx_read(ctx, &r, out);
  cn_data_reader_close(&r);
  return s;
}

cn_status cn_data_load(cn_ctx *ctx, const char *path, cn_array *out) {
  return cn_data_load_at_most(ctx, path, 0, NULL, out);
}

void cn_data_reader_close(cn_data_reader *r) {
  if (r->z_live) inflateEnd(&r->zs);
  free(r->owned);
  memset(r, 0, sizeof *r);
}

/* The compressed bytes zlib has consumed. */
static size_t z_consumed(const cn_data_reader *r) {
  return r->raw_pos - r->zs.avail_in;
}

/* After a member's end: another member follows (start it), the file ends, or garbage follows. */
static cn_status z_member_end(cn_ctx *ctx, cn_data_reader *r) {
  size_t at = z_consumed(r), left = r->raw_len - at;
  if (left == 0) {
    r->z_end = true;
    return CN_OK;
  }
  if (left >= 2 && memcmp(r->raw + at, gzip_magic, 2) == 0) {
    inflateReset(&r->zs);
    return CN_OK;
  }
  return cn_fail(ctx, CN_ERR_INVALID,
                 "%s: at byte %zu of the compressed file: expected another gzip member or the end "
                 "of the file, found %zu trailing bytes (0x%02x ...)",
                 r->path, at, left, r->raw[at]);
}

static cn_status gz_read(cn_ctx *ctx, cn_data_reader *r, unsigned char *dst, size_t n,
                         size_t *got) {
  size_t done = 0;
  while (done < n && !r->z_end) {
    if (r->zs.avail_in == 0 && r->raw_pos < r->raw_len) {
      size_t chunk = r->raw_len - r->raw_pos;
      if (chunk > UINT_MAX) chunk = UINT_MAX;
      r->zs.next_in = (Bytef *)(uintptr_t)(r->raw + r->raw_pos);
      r->zs.avail_in = (uInt)chunk;
      r->raw_pos += chunk;
    }
    size_t want = n - done > UINT_MAX ? UINT_MAX : n - done;
    r->zs.next_out = dst + done;
    r->zs.avail_out = (uInt)want;
    int rc = inflate(&r->zs, Z_NO_FLUSH);
    size_t produced = want - r->zs.avail_out;
    done += produced;
    r->pos += produced;
    cn_status s = CN_OK;
    if (rc == Z_STREAM_END) {
      s = z_member_end(ctx, r);
    } else if (rc == Z_MEM_ERROR) {
      s = cn_fail(ctx, CN_ERR_NOMEM, "%s: out of memory in zlib", r->path);
    } else if (rc == Z_BUF_ERROR) {
      /* With room for output, no progress means every compressed byte was consumed before the
       * stream's end. */
      s = cn_fail(ctx, CN_ERR_INVALID,
                  "%s: at byte %zu of the compressed file: expected more gzip data, found the end "
                  "of the file (truncated gzip stream)",
                  r->path, z_consumed(r));
    } else if (rc != Z_OK) {
      s = cn_fail(ctx, CN_ERR_INVALID,
                  "%s: at byte %zu of the compressed file: expected gzip-compressed data, found "
                  "corrupt data (%s)",
                  r->path, z_consumed(r), r->zs.msg ? r->zs.msg : "zlib error");
    }
    if (s != CN_OK) return s;
  }
  *got = done;
  return CN_OK;
}

cn_status cn_data_read(cn_ctx *ctx, cn_data_reader *r, void *dst, size_t n, size_t *got) {
  if (r->gzip) return gz_read(ctx, r, dst, n, got);
  size_t left = r->raw_len - r->raw_pos;
  *got = n < left ? n : left;
  if (*got) memcpy(dst, r->raw + r->raw_pos, *got);
  r->raw_pos += *got;
  r->pos += *got;
  return CN_OK;
}

size_t cn_data_reader_bound(const cn_data_reader *r) {
  if (!r->gzip) return r->raw_len - r->raw_pos;
  if (r->z_end) return 0;
  /* One more byte's worth covers output inflate decoded but has not delivered yet (the rest of
   * a match). */
  size_t bound;
  if (!cn_mul_size(r->raw_len - z_consumed(r) + 1, CN_DATA_DEFLATE_RATIO, &bound)) return SIZE_MAX;
  return bound;
}

/* The failure of a read of n bytes of `what` from offset `at` that found only `got`. */
static cn_status short_read(cn_ctx *ctx, const cn_data_reader *r, size_t at, size_t n,
                            const char *what, size_t got) {
  return cn_data_fail_at(ctx, CN_ERR_INVALID, r, at,
                         "expected %zu bytes of %s, found %zu (the %s ends at byte %zu)", n, what,
                         got, r->gzip ? "decompressed data" : "file", r->pos);
}

cn_status cn_data_read_exact(cn_ctx *ctx, cn_data_reader *r, void *dst, size_t n,
                             const char *what) {
  size_t at = r->pos, got;
  cn_status s = cn_data_read(ctx, r, dst, n, &got);
  if (s != CN_OK) return s;
  return got < n ? short_read(ctx, r, at, n, what, got) : CN_OK;
}

cn_status cn_data_check_claim(cn_ctx *ctx, const cn_data_reader *r, size_t claim,
                              const char *what) {
  size_t bound = cn_data_reader_bound(r);
  if (claim <= bound) return CN_OK;
  if (r->gzip && !r->z_end)
    return cn_data_fail_at(ctx, CN_ERR_INVALID, r, r->pos,
                           "expected %zu bytes of %s, found compressed data for at most %zu", claim,
                           what, bound);
  return cn_data_fail_at(ctx, CN_ERR_INVALID, r, r->pos,
                         "expected %zu bytes of %s, found %zu (the %s ends at byte %zu)", claim,
                         what, bound, r->gzip ? "decompressed data" : "file", r->pos + bound);
}

cn_status cn_data_expect_end(cn_ctx *ctx, cn_data_reader *r) {
  unsigned char byte;
  size_t got;
  cn_status s = cn_data_read(ctx, r, &byte, 1, &got);
  if (s != CN_OK) return s;
  if (got == 0) return CN_OK;
  return cn_data_fail_at(ctx, CN_ERR_INVALID, r, r->pos - 1,
                         "expected the end of the file, found trailing bytes (0x%02x ...)", byte);
}

/* The first buffer of a gzip payload, doubled as the data arrives. */
#define GROW_FIRST ((size_t)1 << 20)

static cn_status no_room(cn_ctx *ctx, const cn_data_reader *r, size_t numel, size_t bytes) {
  return cn_fail(ctx, CN_ERR_NOMEM, "%s: out of memory for %zu cells (%zu bytes)", r->path, numel,
                 bytes);
}

/* A gzip payload of `payload` bytes into a buffer of `bytes` >= payload (malloc'd, *out): grown
 * from GROW_FIRST as the decompressed bytes arrive, so a stream shorter than the header's claim
 * costs about twice what it held, not the claim (a deflate stream may claim 1032 times its
 * size). */
static cn_status read_growing(cn_ctx *ctx, cn_data_reader *r, size_t numel, size_t payload,
                              size_t bytes, const char *what, unsigned char **out) {
  size_t at = r->pos, have = 0, cap = payload < GROW_FIRST ? payload : GROW_FIRST;
  unsigned char *buf = cn_malloc(ctx, cap);
  cn_status s = buf ? CN_OK : no_room(ctx, r, numel, bytes);
  while (s == CN_OK && have < payload) {
    if (have == cap) {
      size_t next = cap > payload / 2 ? payload : 2 * cap;
      unsigned char *grown = cn_realloc(ctx, buf, next);
      if (!grown) {
        s = no_room(ctx, r, numel, bytes);
        break;
      }
      buf = grown;
      cap = next;
    }
    size_t got;
    s = cn_data_read(ctx, r, buf + have, cap - have, &got);
    if (s == CN_OK && got < cap - have) s = short_read(ctx, r, at, payload, what, have + got);
    have += got;
  }
  unsigned char *whole = s == CN_OK && bytes > payload ? cn_realloc(ctx, buf, bytes) : buf;
  if (s == CN_OK && !whole) s = no_room(ctx, r, numel, bytes);
  if (s != CN_OK) {
    free(buf);
    return s;
  }
  *out = whole;
  return CN_OK;
}

cn_status cn_data_read_payload(cn_ctx *ctx, cn_data_reader *r, cn_array *a, size_t numel,
                               size_t payload, const char *what) {
  size_t bytes = SIZE_MAX;
  if (!cn_mul_size(numel, cn_prec_bytes(a->prec), &bytes)) return no_room(ctx, r, numel, bytes);
  if (r->max_cells && numel > r->max_cells)
    return cn_data_fail_at(ctx, CN_ERR_UNSUPPORTED, r, r->pos,
                           "expected at most %zu cells (%s), found %zu", r->max_cells,
                           r->max_cells_why, numel);
  if (r->gzip) {
    unsigned char *cells = NULL;
    cn_status s = read_growing(ctx, r, numel, payload, bytes, what, &cells);
    a->cells = cells;
    return s;
  }
  /* plain: the claim is at most the file's bytes left (cn_data_check_claim) */
  if (!(a->cells = cn_malloc(ctx, bytes))) return no_room(ctx, r, numel, bytes);
  return cn_data_read_exact(ctx, r, a->cells, payload, what);
}

cn_status cn_data_finish_read(cn_ctx *ctx, cn_data_reader *r, cn_array *a, cn_status s,
                              cn_array *out) {
  if (s == CN_OK) s = cn_data_expect_end(ctx, r);
  if (s != CN_OK) {
    cn_array_free(a);
    return s;
  }
  *out = *a;
  return CN_OK;
}

cn_status cn_data_fail_at(cn_ctx *ctx, cn_status status, const cn_data_reader *r, size_t offset,
                          const char *fmt, ...) {
  char what[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return cn_fail(ctx, status, "%s: at byte %zu%s: %s", r->path, offset,
                 r->gzip ? " of the decompressed data" : "", what);
}

static bool host_big_endian(void) {
  const uint16_t one = 1;
  unsigned char first;
  memcpy(&first, &one, 1);
  return first == 0;
}

void cn_data_copy_order(void *dst, const void *src, size_t count, size_t width, bool big_endian) {
  if (width == 1 || big_endian == host_big_endian()) {
    if (dst != src && count) memmove(dst, src, count * width);
    return;
  }
  unsigned char *d = dst, cell[8];
  const unsigned char *s = src;
  for (size_t i = 0; i < count; i++) {
    memcpy(cell, s + i * width, width);
    for (size_t b = 0; b < width; b++) d[i * width + b] = cell[width - 1 - b];
  }
}

/* ---- Writing ---- */

static atomic_long fail_writes_after = -1;

void cn_data_fail_writes_after(long bytes) {
  atomic_store(&fail_writes_after, bytes);
}

/* The directory part of path in dir: "." for a bare name, "/" for a file of the root. */
static void parent_directory(const char *path, char *dir, size_t size) {
  const char *slash = strrchr(path, '/');
  if (!slash)
    snprintf(dir, size, ".");
  else if (slash == path)
    snprintf(dir, size, "/");
  else
    snprintf(dir, size, "%.*s", (int)(slash - path), path);
}

/* Removes what saves of target killed midway left behind: the temporaries
 * TARGET.tmp.HOST.PID.K of this host whose process no longer exists (cn_remove_stale_temporaries:
 * a live writer's file, another host's and any name of another form are left alone). */
static void remove_stale_temporaries(const char *target, const char *host) {
  static const char *const no_suffix[] = {"", NULL};
  char dir[PATH_MAX], prefix[NAME_MAX + 80];
  parent_directory(target, dir, sizeof dir);
  const char *slash = strrchr(target, '/'), *base = slash ? slash + 1 : target;
  int plen = snprintf(prefix, sizeof prefix, "%s.tmp.%s.", base, host);
  if (plen < 0 || (size_t)plen >= sizeof prefix) return;
  cn_remove_stale_temporaries(dir, prefix, no_suffix);
}

/* Whether the kernel would follow the symbolic link at path (its lstat in link): outside a
 * sticky world-writable directory (/tmp), or when the link is ours or the directory owner's --
 * the rule of Linux's protected_symlinks, which resolving a link ourselves would bypass. */
static bool link_followable(const char *path, const struct stat *link) {
  char dir[PATH_MAX];
  parent_directory(path, dir, sizeof dir);
  struct stat st;
  if (stat(dir, &st) != 0) return false;
  bool shared = (st.st_mode & S_ISVTX) && (st.st_mode & S_IWOTH);
  return !shared || link->st_uid == geteuid() || link->st_uid == st.st_uid;
}

/* The file a save of path replaces, in *target (malloc'd): path itself when it does not exist
 * or is a regular file; for a symbolic link, the regular file it resolves to (realpath), so that
 * the link survives and shows the new data. Refused (CN_ERR_IO naming path and what it is): a
 * directory, a FIFO, a socket or a device, at path or behind a link -- a save never replaces
 * one -- and a link that dangles or that the kernel would not follow (link_followable). */
static cn_status writer_target(cn_ctx *ctx, const char *path, char **target) {
  *target = NULL;
  struct stat st;
  bool missing = lstat(path, &st) != 0;
  if (missing && errno != ENOENT)
    return cn_fail(ctx, CN_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
  if (missing || S_ISREG(st.st_mode)) {
    *target = cn_malloc(ctx, strlen(path) + 1);
    if (*target) memcpy(*target, path, strlen(path) + 1);
    return *target ? CN_OK : ctx->status;
  }
  if (!S_ISLNK(st.st_mode))
    return cn_fail(ctx, CN_ERR_IO, "%s: is %s, not a regular file: a save never replaces it", path,
                   cn_file_kind(st.st_mode));
  if (!link_followable(path, &st))
    return cn_fail(ctx, CN_ERR_IO,
                   "%s: is a symbolic link in a sticky world-writable directory, owned by another "
                   "user: not followed",
                   path);
  char *real = realpath(path, NULL);
  if (!real && errno == ENOMEM) return cn_fail(ctx, CN_ERR_NOMEM, "%s: out of memory", path);
  if (!real)
    return cn_fail(ctx, CN_ERR_IO, "%s: is a symbolic link that cannot be resolved: %s", path,
                   errno == ENOENT ? "it points to a missing file" : strerror(errno));
  int err = stat(real, &st) != 0 ? errno : 0;
  if (err || !S_ISREG(st.st_mode)) {
    cn_status s = err ? cn_fail(ctx, CN_ERR_IO, "%s: is a symbolic link to '%s': %s", path, real,
                                strerror(err))
                      : cn_fail(ctx, CN_ERR_IO,
                                "%s: is a symbolic link to '%s', which is %s, not a regular file: "
                                "a save never replaces it",
                                path, real, cn_file_kind(st.st_mode));
    free(real);
    return s;
  }
  *target = real;
  return CN_OK;
}

cn_status cn_data_writer_open(cn_ctx *ctx, const char *path, cn_data_writer *w) {
  /* A fresh name per attempt (host, process id, counter); O_EXCL never reuses another's file,
   * and open's mode lets the umask give the file the permissions of any new file. */
  static atomic_uint counter;
  memset(w, 0, sizeof *w);
  w->path = path;
  w->fd = -1;
  cn_status s = writer_target(ctx, path, &w->target);
  if (s != CN_OK) return s;
  char host[64];
  cn_host_tag(host, sizeof host);
  remove_stale_temporaries(w->target, host);
  size_t len = strlen(w->target) + strlen(host) + 64;
  w->tmp_path = cn_malloc(ctx, len);
  if (!w->tmp_path) {
    free(w->target);
    w->target = NULL;
    return CN_ERR_NOMEM;
  }
  for (int attempt = 0; attempt < 100 && w->fd < 0; attempt++) {
    snprintf(w->tmp_path, len, "%s.tmp.%s.%ld.%u", w->target, host, (long)getpid(),
             atomic_fetch_add(&counter, 1));
    w->fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (w->fd < 0 && errno != EEXIST) break;
  }
  if (w->fd < 0) {
    /* Not abort: the last name tried may be another writer's file. */
    int err = errno;
    free(w->tmp_path);
    free(w->target);
    w->tmp_path = w->target = NULL;
    return cn_fail(ctx, CN_ERR_IO, "%s: cannot create: %s", path, strerror(err));
  }
  return CN_OK;
}

cn_status cn_data_write_at(cn_ctx *ctx, cn_data_writer *w, const void *bytes, size_t n,
                           uint64_t at) {
  const unsigned char *p = bytes;
  while (n > 0) {
    size_t chunk = n;
    long budget = atomic_load(&fail_writes_after);
    if (budget == 0) {
      errno = EIO;
      return cn_fail(ctx, CN_ERR_IO, "%s: cannot write: %s", w->path, strerror(errno));
    }
    if (budget > 0 && (size_t)budget < chunk) chunk = (size_t)budget;
    ssize_t done = pwrite(w->fd, p, chunk, (off_t)at);
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0)
      return cn_fail(ctx, CN_ERR_IO, "%s: cannot write: %s", w->path,
                     strerror(done == 0 ? ENOSPC : errno));
    if (budget > 0) atomic_store(&fail_writes_after, budget - (long)done);
    p += done;
    n -= (size_t)done;
    at += (uint64_t)done;
  }
  return CN_OK;
}

cn_status cn_data_write(cn_ctx *ctx, cn_data_writer *w, const void *bytes, size_t n) {
  cn_status st = cn_data_write_at(ctx, w, bytes, n, w->pos);
  if (st == CN_OK) w->pos += n;
  return st;
}

/* fsync of the directory holding path, so that the rename itself is durable; 0 or an errno. A
 * file system that cannot sync directories (EINVAL) has nothing more to flush. */
static int sync_directory(const char *path, char *dir, size_t size) {
  parent_directory(path, dir, size);
  int fd = open(dir, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  int err = fsync(fd) != 0 && errno != EINVAL ? errno : 0;
  close(fd);
  return err;
}

cn_status cn_data_writer_commit(cn_ctx *ctx, cn_data_writer *w) {
  const char *step = "flush (fsync) the temporary file";
  int err = fsync(w->fd) != 0 ? errno : 0;
  if (close(w->fd) != 0 && !err) err = errno, step = "close the temporary file";
  w->fd = -1;
  if (!err && rename(w->tmp_path, w->target) != 0) err = errno, step = "rename over the file";
  if (err) {
    cn_data_writer_abort(w);
    return cn_fail(ctx, CN_ERR_IO, "%s: cannot %s: %s", w->path, step, strerror(err));
  }
  free(w->tmp_path);
  w->tmp_path = NULL;
  char dir[PATH_MAX];
  err = sync_directory(w->target, dir, sizeof dir);
  free(w->target);
  w->target = NULL;
  if (err)
    return cn_fail(ctx, CN_ERR_IO,
                   "%s: the file was replaced, but syncing its directory '%s' failed: %s", w->path,
                   dir, strerror(err));
  return CN_OK;
}

void cn_data_writer_abort(cn_data_writer *w) {
  if (w->fd >= 0) close(w->fd);
  w->fd = -1;
  if (w->tmp_path) unlink(w->tmp_path);
  free(w->tmp_path);
  w->tmp_path = NULL;
  free(w->target);
  w->target = NULL;
}
