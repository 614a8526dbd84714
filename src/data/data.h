/* Internal header of src/data, the readers and writers of data files (IDX, NumPy .npy; later
 * safetensors). What they share lives in array.c: a reader that serves a file's bytes, plain or
 * gzip-decompressed, in order; positioned messages; byte-order conversion; an atomic writer.
 *
 * Invariants: a reader never allocates more than the file's own size plus the buffers of the
 * caller, so a size claimed by a header is checked against cn_data_reader_bound before any
 * buffer of that size exists; the cells of a gzip file grow as its
 * decompressed bytes arrive (a stream that ends before its claim costs what it held); every failure
 * is a cn_status with a message that names the file (and, when it is about the content, the byte
 * offset and what was expected there); a cn_data_reader or cn_data_writer that was opened is
 * released by its close/abort call on every path. */
#ifndef CN_DATA_H
#define CN_DATA_H

#include "core/core.h"

#include <stdio.h>
#include <zlib.h>

/* Deflate's worst case expands one compressed byte to 1032 bytes (a 258-byte match per 2 bits):
 * the most a gzip stream of n bytes can hold is about n * CN_DATA_DEFLATE_RATIO. */
#define CN_DATA_DEFLATE_RATIO 1032

/* A file's content served in order. The file is read whole into memory (or given as bytes); a
 * gzip file (opened with gunzip and starting with the gzip magic 1f 8b, whatever its name) is
 * inflated on demand, member after member, straight into the caller's buffers. */
typedef struct {
  const char *path;         /* for messages */
  unsigned char *owned;     /* the file's bytes when read by cn_data_reader_open (malloc'd) */
  const unsigned char *raw; /* the file's bytes */
  size_t raw_len;
  size_t raw_pos;           /* plain: the next byte to serve; gzip: the next byte to give zlib */
  size_t pos;               /* bytes served so far: the offset messages name */
  bool gzip, z_live, z_end; /* z_end: the last member ended and no byte follows */
  z_stream zs;
  size_t max_cells;          /* 0, or the caller's limit on an array's cells ... */
  const char *max_cells_why; /* ... and why, for the message */
} cn_data_reader;

/* fopen(path, "rb") that does not block when path is a FIFO (so that the caller's check for a
 * regular file gets to run): NULL with errno set on failure. */
FILE *cn_data_open_read(const char *path);
/* cn_data_load with a limit on the array's cells (why: the reason, for the message), checked
 * against the header before the cells are allocated (the notation's load). */
cn_status cn_data_load_at_most(cn_ctx *ctx, const char *path, size_t max_cells, const char *why,
                               cn_array *out);
/* Reads the file at path whole; with gunzip, a gzip file is served decompressed. CN_ERR_IO
 * naming the file when it cannot be opened or read; on failure nothing needs closing. */
cn_status cn_data_reader_open(cn_ctx *ctx, const char *path, bool gunzip, cn_data_reader *r);
/* The same over bytes the caller keeps alive until close (the fuzz targets); name is the path
 * messages show. */
cn_status cn_data_reader_open_bytes(cn_ctx *ctx, const char *name, const void *bytes, size_t len,
                                    bool gunzip, cn_data_reader *r);
void cn_data_reader_close(cn_data_reader *r);
/* Up to n bytes into dst; *got < n only at the end of the content. Fails (CN_ERR_INVALID,
 * positioned) on corrupt or truncated gzip data and on bytes after a gzip stream that start no
 * other member; CN_ERR_NOMEM when zlib cannot allocate. */
cn_status cn_data_read(cn_ctx *ctx, cn_data_reader *r, void *dst, size_t n, size_t *got);
/* An upper bound of the bytes left to serve: exact for a plain file, the deflate bound for a
 * gzip one. A claimed size beyond it is refused before allocating. */
size_t cn_data_reader_bound(const cn_data_reader *r);
/* Reads exactly n bytes of `what` (a phrase such as "the header"), failing with a positioned
 * "expected N bytes of WHAT, found M" when the content ends first. */
cn_status cn_data_read_exact(cn_ctx *ctx, cn_data_reader *r, void *dst, size_t n, const char *what);
/* CN_OK when `claim` bytes of `what` may still follow; otherwise, before anything of that size
 * is allocated, a positioned CN_ERR_INVALID "expected CLAIM bytes of WHAT, found ..." naming
 * what the file can still hold. */
cn_status cn_data_check_claim(cn_ctx *ctx, const cn_data_reader *r, size_t claim, const char *what);
/* CN_OK when no byte is left; otherwise a positioned "expected the end of the file" failure. */
cn_status cn_data_expect_end(cn_ctx *ctx, cn_data_reader *r);
/* The cells of an array whose header was read: numel cells of a->prec allocated (a->cells), the
 * file's `payload` bytes read into their start (a reader widens narrower file cells in place
 * afterwards); `what` names the payload in messages. Refuses (CN_ERR_UNSUPPORTED, positioned)
 * more cells than r->max_cells before allocating; from
 * a gzip reader, the buffer grows geometrically (from 1 MiB) as the decompressed bytes arrive,
 * so a header claiming more than the stream holds fails with "expected N bytes of WHAT, found
 * M" having allocated about 2 M. */
cn_status cn_data_read_payload(cn_ctx *ctx, cn_data_reader *r, cn_array *a, size_t numel,
                               size_t payload, const char *what);
/* The end of a read with status s: the file must end here; on success *out takes a, otherwise
 * a's cells are freed. */
cn_status cn_data_finish_read(cn_ctx *ctx, cn_data_reader *r, cn_array *a, cn_status s,
                              cn_array *out);

/* Fails with status and "PATH: at byte OFFSET: MESSAGE" (offset in the decompressed data, said
 * so, for a gzip reader). The message conventionally reads "expected ..., found ...". */
cn_status cn_data_fail_at(cn_ctx *ctx, cn_status status, const cn_data_reader *r, size_t offset,
                          const char *fmt, ...) CN_PRINTF(5, 6);

/* Copies count cells of width bytes (1, 2, 4 or 8) from src to dst, reversing the bytes of each
 * cell when src's byte order (big_endian or not) is not the host's. Converts both ways; dst may
 * equal src. */
void cn_data_copy_order(void *dst, const void *src, size_t count, size_t width, bool big_endian);

/* The number of cells of a rank-dims shape (1 for rank 0, 0 when an axis is 0) in *out; false
 * when a dim is negative or the product overflows size_t (a zero axis makes any product valid). */
bool cn_data_numel(int rank, const int64_t *dims, size_t *out);

/* Writes a file atomically: the bytes go to a temporary file TARGET.tmp.HOST.PID.K in the
 * target's directory, which commit flushes to disk (fsync), renames over the target and makes
 * durable (fsync of the directory), so an interrupted save leaves the old file whole. The target
 * is path, or the regular file a symbolic link at path resolves to (the link survives); a
 * directory, FIFO, socket or device (at path or behind a link), a dangling link and a link the
 * kernel's protected_symlinks rule would not follow are refused by open, never replaced. open
 * also removes the temporaries of the same target that processes of this host no longer alive
 * left (a killed save). Writes go through the test hook of io_hook.h. Every failure is
 * CN_ERR_IO naming path (CN_ERR_NOMEM for memory); after a failed write, call abort (it removes
 * the temporary file); a failed commit has aborted already. */
typedef struct {
  const char *path;
  char *target;   /* malloc'd: the file commit replaces */
  char *tmp_path; /* malloc'd */
  int fd;
  uint64_t pos; /* where cn_data_write goes on */
} cn_data_writer;
cn_status cn_data_writer_open(cn_ctx *ctx, const char *path, cn_data_writer *w);
cn_status cn_data_write(cn_ctx *ctx, cn_data_writer *w, const void *bytes, size_t n);
/* Overwrites bytes already written at offset `at` (a checksum known only at the end). */
cn_status cn_data_write_at(cn_ctx *ctx, cn_data_writer *w, const void *bytes, size_t n,
                           uint64_t at);
cn_status cn_data_writer_commit(cn_ctx *ctx, cn_data_writer *w);
void cn_data_writer_abort(cn_data_writer *w);

/* The parsers behind cn_data_load_idx and cn_data_load_npy, over an open reader (left open),
 * for the fuzz target. On failure *out is zeroed. */
cn_status cn_data_idx_read(cn_ctx *ctx, cn_data_reader *r, cn_array *out);
cn_status cn_data_npy_read(cn_ctx *ctx, cn_data_reader *r, cn_array *out);
/* The .npy prefix of a (magic, version, header length, header dict padded to a multiple of 64
 * bytes) appended to sb: what cn_data_save_npy writes before the cells. CN_ERR_UNSUPPORTED for a
 * precision without a NumPy dtype, CN_ERR_INVALID for a bad rank or dim. */
cn_status cn_data_npy_prefix(cn_ctx *ctx, const cn_array *a, cn_sbuf *sb);

/* The checks cn_text_sample and cn_text_export_sampler share (sample.c): a corpus, the input a
 * data or buffer tensor, the logits' last axis the vocabulary, a prompt of at least one byte,
 * each in the vocabulary. */
cn_status cn_text_sample_check(cn_ctx *ctx, const cn_text *t, cn_tensor *input, cn_tensor *logits,
                               const char *prompt, size_t prompt_len);

#endif
