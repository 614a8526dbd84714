/* Text corpora for sequence models (include/cannl.h, "A text corpus"): files or directories of
 * text read as one byte sequence, the `%` separator lines of fortune files dropped, encoded as
 * token ids over the bytes that occur, split 90/10 into training and validation tokens, and
 * random windows (inputs and next-token targets) drawn from a split by a counter-based draw.
 *
 * Invariants: the files are read through cn_data_reader_open (a FIFO never blocks the open, only
 * a regular file is read) in a fixed order (the paths as given, a directory's files sorted by
 * name), so the corpus is the same on every machine with the same files; the bytes held never
 * exceed CN_TEXT_MAX_BYTES, checked before a file is read (its size) and after (the bytes it
 * had); a cn_text holds tokens only when the load succeeded (count >= 1, 1 <= vocab <= 256, every
 * token < vocab); windows depend on (seed, step, b) only, never on the calls made before, so a
 * resumed run draws the batches an uninterrupted one drew. */
#define _XOPEN_SOURCE 700 /* lstat */
#include "data/data.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void cn_text_free(cn_text *t) {
  if (!t) return;
  free(t->tokens);
  memset(t, 0, sizeof *t);
}

/* ---- Reading ------------------------------------------------------------------------------ */

/* The bytes read so far (malloc'd, grown geometrically up to CN_TEXT_MAX_BYTES). */
typedef struct {
  unsigned char *bytes;
  size_t len, cap;
  int files;
} text_buf;

static cn_status buf_reserve(cn_ctx *ctx, text_buf *b, size_t more) {
  if (b->len + more <= b->cap) return CN_OK;
  size_t cap = b->cap ? b->cap : 1 << 16;
  while (cap < b->len + more) cap *= 2;
  unsigned char *grown = cn_realloc(ctx, b->bytes, cap);
  if (!grown) return CN_ERR_NOMEM;
  b->bytes = grown;
  b->cap = cap;
  return CN_OK;
}

static cn_status too_large(cn_ctx *ctx, const char *path, size_t held, size_t more) {
  return cn_fail(ctx, CN_ERR_UNSUPPORTED,
                 "%s: a text corpus holds at most %lld bytes; %zu bytes read before this file, "
                 "which has %zu",
                 path, (long long)CN_TEXT_MAX_BYTES, held, more);
}

/* Appends the file's lines to b, but for the lines that are exactly "%" (fortune's separator),
 * and a '\n' when the file's last line has none, so that files do not run into each other. */
static cn_status read_file(cn_ctx *ctx, const char *path, text_buf *b) {
  struct stat st;
  /* the size, so that an oversized file is refused before its bytes are held */
  if (stat(path, &st) == 0 && S_ISREG(st.st_mode) &&
      (uintmax_t)st.st_size > (uintmax_t)CN_TEXT_MAX_BYTES - b->len)
    return too_large(ctx, path, b->len, (size_t)st.st_size);
  cn_data_reader r;
  cn_status s = cn_data_reader_open(ctx, path, false, &r);
  if (s != CN_OK) return s;
  /* the file may have grown since stat: its bytes as read are what the limit counts */
  if (r.raw_len > (size_t)CN_TEXT_MAX_BYTES - b->len)
    s = too_large(ctx, path, b->len, r.raw_len);
  else
    s = buf_reserve(ctx, b, r.raw_len + 1);
  for (size_t at = 0; s == CN_OK && at < r.raw_len;) {
    const unsigned char *line = r.raw + at, *nl = memchr(line, '\n', r.raw_len - at);
    size_t len = nl ? (size_t)(nl - line) + 1 : r.raw_len - at;
    at += len;
    if (line[0] == '%' && (len == 1 || (len == 2 && line[1] == '\n'))) continue;
    memcpy(b->bytes + b->len, line, len);
    b->len += len;
    if (!nl) b->bytes[b->len++] = '\n';
  }
  b->files++;
  cn_data_reader_close(&r);
  return s;
}

static int compare_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_text_name(const char *name) {
  size_t len = strlen(name);
  return name[0] != '.' && !(len >= 4 && strcmp(name + len - 4, ".dat") == 0);
}

/* Reads the text files of directory dir in the byte order of their names: the regular files
 * (lstat: a symbolic link is not followed, as fortune's NAME.u8 links to NAME are the same
 * text) whose names start with no '.' and do not end in ".dat" (strfile's index files). */
static cn_status read_directory(cn_ctx *ctx, const char *dir, text_buf *b) {
  DIR *d = opendir(dir);
  if (!d) return cn_fail(ctx, CN_ERR_IO, "%s: cannot list the directory: %s", dir, strerror(errno));
  char **names = NULL;
  size_t n = 0, cap = 0;
  cn_status s = CN_OK;
  size_t dir_len = strlen(dir);
  for (struct dirent *e; s == CN_OK && (e = readdir(d));) {
    if (!is_text_name(e->d_name)) continue;
    size_t len = dir_len + 1 + strlen(e->d_name) + 1;
    char *path = cn_malloc(ctx, len);
    if (!path) {
      s = CN_ERR_NOMEM;
      break;
    }
    snprintf(path, len, "%s/%s", dir, e->d_name);
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
      free(path);
      continue;
    }
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      char **grown = cn_realloc(ctx, names, cap * sizeof *names);
      if (!grown) {
        free(path);
        s = CN_ERR_NOMEM;
        break;
      }
      names = grown;
    }
    names[n++] = path;
  }
  closedir(d);
  if (s == CN_OK && n == 0)
    s = cn_fail(ctx, CN_ERR_INVALID,
                "%s: no text file in the directory (a regular file whose name starts with no "
                "'.' and does not end in \".dat\")",
                dir);
  if (s == CN_OK) qsort(names, n, sizeof *names, compare_names);
  for (size_t k = 0; k < n; k++) {
    if (s == CN_OK) s = read_file(ctx, names[k], b);
    free(names[k]);
  }
  free(names);
  return s;
}

/* ---- The corpus --------------------------------------------------------------------------- */

/* The vocabulary of the bytes of b (ascending) and b's bytes rewritten as token ids. */
static void encode(text_buf *b, cn_text *t) {
  bool seen[256] = {false};
  for (size_t i = 0; i < b->len; i++) seen[b->bytes[i]] = true;
  t->vocab = 0;
  for (int c = 0; c < 256; c++) {
    t->ids[c] = -1;
    if (seen[c]) {
      t->ids[c] = (int16_t)t->vocab;
      t->bytes[t->vocab++] = (unsigned char)c;
    }
  }
  for (size_t i = 0; i < b->len; i++) b->bytes[i] = (unsigned char)t->ids[b->bytes[i]];
}

/* The corpus of b's bytes (out takes them): encoded, split 90/10 as nanoGPT splits. */
static void corpus_of(text_buf *b, cn_text *out) {
  encode(b, out);
  out->tokens = b->bytes;
  out->count = (int64_t)b->len;
  out->train = out->count * 9 / 10;
  out->files = b->files;
}

cn_status cn_data_load_text(cn_ctx *ctx, int n_paths, const char *const *paths, cn_text *out) {
  if (out) memset(out, 0, sizeof *out);
  if (!out || n_paths < 1 || !paths)
    return cn_fail(ctx, CN_ERR_INVALID, "text corpus: no file or directory to read");
  text_buf b = {NULL, 0, 0, 0};
  cn_status s = CN_OK;
  for (int k = 0; k < n_paths && s == CN_OK; k++) {
    const char *path = paths[k];
    struct stat st;
    if (!path)
      s = cn_fail(ctx, CN_ERR_INVALID, "text corpus: path %d is NULL", k);
    else if (stat(path, &st) != 0)
      s = cn_fail(ctx, CN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    else if (S_ISDIR(st.st_mode))
      s = read_directory(ctx, path, &b);
    else
      s = read_file(ctx, path, &b);
  }
  if (s == CN_OK && b.len == 0)
    s = cn_fail(ctx, CN_ERR_INVALID,
                "text corpus: no text in %d file%s once the \"%%\" separator lines are dropped",
                b.files, b.files == 1 ? "" : "s");
  if (s != CN_OK) {
    free(b.bytes);
    return s;
  }
  corpus_of(&b, out);
  return CN_OK;
}

cn_status cn_text_from_bytes(cn_ctx *ctx, const void *bytes, size_t len, cn_text *out) {
  if (out) memset(out, 0, sizeof *out);
  if (!out || (!bytes && len))
    return cn_fail(ctx, CN_ERR_INVALID, "text corpus: no bytes or no result");
  if (len == 0) return cn_fail(ctx, CN_ERR_INVALID, "text corpus: no byte");
  if (len > (size_t)CN_TEXT_MAX_BYTES) return too_large(ctx, "text corpus", 0, len);
  text_buf b = {cn_malloc(ctx, len), len, len, 0};
  if (!b.bytes) return CN_ERR_NOMEM;
  memcpy(b.bytes, bytes, len);
  corpus_of(&b, out);
  return CN_OK;
}

/* ---- Windows ------------------------------------------------------------------------------ */

cn_status cn_text_draw_windows(cn_ctx *ctx, const cn_text *t, cn_text_split split, uint64_t seed,
                               uint64_t step, int64_t batch, int64_t context, int32_t *x,
                               int32_t *y) {
  if (!t || !t->tokens || !x || !y)
    return cn_fail(ctx, CN_ERR_INVALID, "text windows: no corpus or no output buffers");
  if (split != CN_TEXT_TRAIN && split != CN_TEXT_VALID)
    return cn_fail(ctx, CN_ERR_INVALID, "text windows: split %d is neither train nor validation",
                   (int)split);
  const char *name = split == CN_TEXT_TRAIN ? "training" : "validation";
  int64_t lo = split == CN_TEXT_TRAIN ? 0 : t->train;
  int64_t len = split == CN_TEXT_TRAIN ? t->train : t->count - t->train;
  if (context < 1 || context >= len)
    return cn_fail(ctx, CN_ERR_INVALID,
                   "text windows: context %lld; the %s split holds %lld tokens, so the context "
                   "must lie in [1, %lld] (a window reads context + 1 tokens)",
                   (long long)context, name, (long long)len, (long long)(len - 1));
  int64_t starts = len - context;
  if (batch < 1 || batch > starts)
    return cn_fail(ctx, CN_ERR_INVALID,
                   "text windows: batch %lld; a context of %lld in the %s split's %lld tokens "
                   "has %lld window starts, and a batch draws distinct ones: it must lie in "
                   "[1, %lld]",
                   (long long)batch, (long long)context, name, (long long)len, (long long)starts,
                   (long long)starts);
  /* window b of a step starts at slot b of the keyed permutation of the starts: distinct
   * windows within a batch, a pure function of (seed, step, b) */
  for (int64_t bi = 0; bi < batch; bi++) {
    const uint8_t *w = t->tokens + lo + cn_dataset_permute(seed, step, starts, bi);
    for (int64_t i = 0; i < context; i++) {
      x[bi * context + i] = w[i];
      y[bi * context + i] = w[i + 1];
    }
  }
  return CN_OK;
}
