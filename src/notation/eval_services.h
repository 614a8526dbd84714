/* The evaluator's services floor (see eval_base.h for the floors): what statements write
 * (eval_out.c: printf's formatting, progress, the end-of-run warning about non-finite values) and
 * data files (eval_data.c: the data builtins, shuffle, checkpoint, save_npy). Includes the base
 * only; evaluates nothing (a builtin here gets its arguments evaluated, as an nt_call). */
#ifndef CN_NT_EVAL_SERVICES_H
#define CN_NT_EVAL_SERVICES_H

#include "notation/eval_base.h"

/* A loop's progress display during one of its executions (eval_out.c). */
typedef struct {
  const cn_nt_item *loop;
  int64_t total, batch_size;
  cn_tensor *loss; /* NULL: no loss shown */
  bool tty;        /* a bar redrawn in place; else plain lines */
  double start, last_draw;
  double first_end;   /* when the first step ended (the rate counts the steps after it) */
  int tenth;          /* plain lines: the next line ends this tenth of the steps (1 .. 10) */
  int64_t next_line;  /* at this step count */
  int64_t loss_slots; /* > 1: the loss is a data-parallel step's sum over its slots, shown as their
                         mean */
} nt_progress;

/* ---- eval_out.c ---- */
/* Writes text (printf's, print's string): as is, or with --json as {"text": ...}. */
void nt_write_text(nt_interp *I, const char *text);
/* printf's text from its arguments' values (numbers, booleans, strings); false with a message at
 * the argument that does not fit its conversion. */
bool nt_format(nt_interp *I, const cn_nt_item *it, nt_value *const *values, cn_sbuf *sb);
/* The progress display of one execution of the loop `it` over `total` steps; loss (a scalar
 * tensor computed by the body) or NULL; batch_size 0 counts steps. */
void nt_progress_start(nt_interp *I, nt_progress *pr, const cn_nt_item *it, int64_t total,
                       cn_tensor *loss, int64_t batch_size);
/* After `done` steps (1 .. hi - lo + 1): redraws or writes a line when due. */
bool nt_progress_step(nt_interp *I, nt_progress *pr, int64_t done);
/* Records that the statement at `at` showed the NaN or infinity `value` (`where`: "in \"y\" (#2)",
 * "(step 3)"). */
void nt_note_nonfinite(nt_interp *I, nt_shown_kind kind, cn_nt_pos at, double value,
                       const char *where);
/* The warning at the end of a run: one line per kind of non-finite value the script showed, on
 * opts.err (NULL: stderr); nothing when it showed none. */
void nt_report_nonfinite(nt_interp *I);

/* ---- eval_data.c ---- */
nt_value *nt_builtin_dataset(nt_interp *I, const nt_call *c);
nt_value *nt_builtin_text_windows(nt_interp *I, const nt_call *c);
nt_value *nt_builtin_bigram_loss(nt_interp *I, const nt_call *c);
nt_value *nt_builtin_vocab_size(nt_interp *I, const nt_call *c);
/* The corpus of a text set (eval_data.c: the set's struct is private there). */
const cn_text *nt_text_set_corpus(const nt_text_set *s);
nt_value *nt_builtin_sample(nt_interp *I, const nt_call *c);
nt_value *nt_builtin_load(nt_interp *I, const nt_call *c);
nt_value *nt_builtin_restore(nt_interp *I, const nt_call *c);
/* shuffle: the data set whose tensor t is shows epoch `epoch`'s order. */
bool nt_shuffle(nt_interp *I, cn_tensor *t, int64_t epoch, cn_nt_pos at);
/* checkpoint: loss's training state saved to path with the metadata {"epoch": epoch}. */
bool nt_checkpoint(nt_interp *I, cn_tensor *loss, const char *path, int64_t epoch, cn_nt_pos at);
/* save_npy: the node's cells written to path. */
bool nt_save_npy(nt_interp *I, cn_node *node, const char *path, cn_nt_pos at);
/* The path of a file the script writes (writes: plot, checkpoint, save_npy) or may read back as
 * its own output (restore, load): a relative path under opts.out_dir when it is set, else path
 * itself; a read takes the path as given when the output directory has no such file (a file the
 * script did not write, or from before --out). A written file's directories under the output
 * directory are created (mkdir -p), and the file is noted for nt_report_written. NULL with a
 * message at `at` when a directory cannot be made. */
const char *nt_output_path(nt_interp *I, const char *path, bool writes, cn_nt_pos at);
/* The line at the end of a run naming the files the script wrote, on opts.err (NULL: stderr):
 * "wrote runs/a.svg, runs/a.safetensors"; nothing when it wrote none. */
void nt_report_written(nt_interp *I);

#endif
