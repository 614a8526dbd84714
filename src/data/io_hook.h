/* A test hook of the data files' write path (cn_data_writer, src/data/array.c, which every save
 * goes through: safetensors, .npy, export): makes writes fail midway,
 * as a full disk or an I/O error would, so that tests can check that a failed save leaves the
 * previous file whole and no temporary file behind.
 *
 * Invariant: with the hook off (the default, or a negative count) writes are never altered. The
 * count is process-wide: tests only. */
#ifndef CN_DATA_IO_HOOK_H
#define CN_DATA_IO_HOOK_H

/* After `bytes` more bytes have been written (across files), every write fails with EIO;
 * negative: never (turns the hook off). */
void cn_data_fail_writes_after(long bytes);

#endif
