/* examples/gpt.cnl shortened to a small GPT of wamerican's word list, run as a user runs it (the
 * script's text with --set parameters, C backend): 1 block of 2 heads, embedding 32, context 8,
 * batch 32, 200 steps (warm-up 20, learning rate 5e-3 to 5e-4), then two samples appended, and
 * exported with its sampler:
 *   - the training loss (the mean of the last 100 steps) and the validation loss (10 batches of
 *     the validation split) are below bounds measured with margin (2.69 and 2.71 nats with
 *     wamerican 2020.12.07-2), and the validation loss beats the bigram baseline of the same
 *     split (3.37) by at least 0.4 nats;
 *   - the block's parameters are shared by the training, validation and sampling applications
 *     (before transformer_block reused a label's parameters, the validation ran an untrained
 *     block beside the trained tables: 3.59, above the bigram);
 *   - sampling is deterministic: seed 0 at temperature 0.8 gives the same 50 characters twice,
 *     every one a byte of the word list;
 *   - `cannl export --sampler`'s C, built with a main and -Wall -Wextra -Werror (this model's
 *     generated code once had a kernel parameter only a `snd` operand named, and a packing
 *     pointer a GEMM reading x in place left unused), prints, at temperature 0.8 with seed 0 and
 *     at temperature 0, exactly the script's characters.
 * Skipped (77) when /usr/share/dict/words is absent (package wamerican, `make deps`). */
#include "check.h"
#include "script_check.h"

#include "cannl.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WORDS "/usr/share/dict/words"
#define COUNT 50

int main(void) {
  if (access(WORDS, R_OK) != 0) {
    printf("skipped: %s is absent (install wamerican: make deps)\n", WORDS);
    return 77;
  }
  char *script = read_example("gpt.cnl");
  if (!script) CHECK_DONE();
  strcat(script, "print (sample logits ~input:window ~text:x ~count:50 ~temperature:0.8 ~seed:0)\n"
                 "print (sample logits ~input:window ~text:x ~count:50 ~temperature:0)\n");
  char dir[64];
  snprintf(dir, sizeof dir, "/tmp/cannl-gpt-XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  char ckpt[128], svg[128];
  snprintf(ckpt, sizeof ckpt, "checkpoint_file=%s/gpt.safetensors", dir);
  snprintf(svg, sizeof svg, "svg_file=%s/gpt.svg", dir);
  const char *sets[] = {"corpus=" WORDS,
                        "layers=1",
                        "heads=2",
                        "n_embd=32",
                        "context=8",
                        "batch=32",
                        "steps=200",
                        "warmup=20",
                        "learning_rate=0.005",
                        "min_learning_rate=0.0005",
                        "eval_every=100",
                        "eval_batches=10",
                        "count=50",
                        ckpt,
                        svg};

  char *got;
  size_t len;
  cn_status st = run_exporting("gpt.cnl", script, sets, (int)(sizeof sets / sizeof *sets), "gpt",
                               dir, &got, &len);
  free(script);
  if (st != CN_OK) CHECK_DONE();

  /* "step 200: train loss L, validation loss V (bigram B)" */
  double loss = 0, valid = 0, bigram = 0;
  const char *last = strstr(got, "step 200: ");
  CHECK(last != NULL);
  if (last)
    CHECK_INT(sscanf(last, "step 200: train loss %lf, validation loss %lf (bigram %lf)", &loss,
                     &valid, &bigram),
              3);
  printf("loss %.4f valid %.4f bigram %.4f\n", loss, valid, bigram);
  CHECK(loss > 1.5 && loss < 3.0);
  CHECK(valid > 1.5 && valid < 3.0);
  CHECK(valid < bigram - 0.4);
  /* the last three samples of COUNT characters and a newline each: the script's own (seed 0,
   * temperature 0.8), the same appended, temperature 0 */
  CHECK(len > 3 * (COUNT + 1));
  if (len <= 3 * (COUNT + 1)) CHECK_DONE();
  const char *samples = got + len - 3 * (COUNT + 1);
  size_t words_len = 0;
  char *words = slurp(WORDS, &words_len);
  CHECK(words != NULL);
  char s[3][COUNT + 1];
  read_samples(samples, 3, COUNT, words, words_len, &s[0][0]);
  free(words);
  CHECK(strcmp(s[0], s[1]) == 0);
  CHECK(strcmp(s[1], s[2]) != 0);

  /* the exported sampler, built as a program, prints the same characters */
  build_sampler(dir, "gpt", "-O1");
  sampler_prints(dir, "gpt", "50 0.8 0", COUNT, s[0]);
  sampler_prints(dir, "gpt", "50 0 7", COUNT, s[2]);

  free(got);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK_INT(system(cmd), 0);
  CHECK_DONE();
}
