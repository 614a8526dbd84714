/* The names model of examples/names.cnl on wamerican's word list, run as a user runs it (the
 * script's text, C backend), with three samples appended, and exported with its sampler:
 *   - the training loss of the last batch and the validation loss are below bounds measured with
 *     margin (2.44 and 2.65 nats after 300 steps with wamerican 2020.12.07-2), and the validation
 *     loss beats the bigram baseline of the same split by at least 0.5 nats (3.37: the MLP sees
 *     three characters);
 *   - the bigram baseline equals the value an independent Python computation gives for that
 *     list (add-one smoothing over the same split), when the list is that version (985 084
 *     bytes);
 *   - sampling is deterministic: seed 1 gives the same 50 characters twice, seed 2 other ones,
 *     and every character is a byte of the word list;
 *   - `cannl export --sampler`'s C (the model and names_sample.c, built with -Wall -Wextra
 *     -Werror and a main) prints, for seed 1 at temperature 1 and for temperature 0, exactly the
 *     characters the script's `sample` printed.
 * Skipped (77) when /usr/share/dict/words is absent (package wamerican, `make deps`). */
#include "check.h"
#include "script_check.h"

#include "cannl.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WORDS "/usr/share/dict/words"
#define COUNT 50

static char dir[64];

int main(void) {
  if (access(WORDS, R_OK) != 0) {
    printf("skipped: %s is absent (install wamerican: make deps)\n", WORDS);
    return 77;
  }
  char *script = read_example("names.cnl");
  if (!script) CHECK_DONE();
  strcat(script, "print (sample logits ~input:window ~text:x ~count:50 ~temperature:1 ~seed:1)\n"
                 "print (sample logits ~input:window ~text:x ~count:50 ~temperature:1 ~seed:2)\n"
                 "print (sample logits ~input:window ~text:x ~count:50 ~temperature:0)\n");
  snprintf(dir, sizeof dir, "/tmp/cannl-names-XXXXXX");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }

  char *got;
  size_t len;
  cn_status st = run_exporting("names.cnl", script, NULL, 0, "names", dir, &got, &len);
  free(script);
  if (st != CN_OK) CHECK_DONE();

  /* "loss L valid V bigram B\n", then four samples of COUNT characters and a newline each (the
   * script's own, seed 1, then the three appended) */
  double loss = 0, valid = 0, bigram = 0;
  CHECK_INT(sscanf(got, "loss %lf valid %lf bigram %lf", &loss, &valid, &bigram), 3);
  printf("loss %.4f valid %.4f bigram %.4f\n", loss, valid, bigram);
  CHECK(loss > 1.5 && loss < 2.8);
  CHECK(valid > 1.5 && valid < 2.9);
  CHECK(valid < bigram - 0.5);
  size_t words_len = 0;
  char *words = slurp(WORDS, &words_len);
  CHECK(words != NULL);
  if (words && words_len == 985084) CHECK_NEAR(bigram, 3.368549664708828, 1e-4);
  const char *samples = strchr(got, '\n') + 1;
  CHECK_INT((long)(len - (size_t)(samples - got)), 4 * (COUNT + 1));
  char s[4][COUNT + 1];
  read_samples(samples, 4, COUNT, words, words_len, &s[0][0]);
  free(words);
  CHECK(strcmp(s[0], s[1]) == 0);
  CHECK(strcmp(s[1], s[2]) != 0);

  /* the exported sampler, built as a program, prints the same characters */
  build_sampler(dir, "names", "-O2");
  sampler_prints(dir, "names", "50 1 1", COUNT, s[1]);
  sampler_prints(dir, "names", "50 0 7", COUNT, s[3]);
  /* a prompt byte outside the vocabulary: no text, exit 1 */
  char cmd[512], text[4 * COUNT];
  snprintf(cmd, sizeof cmd, "%s/names_sample 5 1 1 '~' 2>/dev/null", dir);
  CHECK_INT(run_command(cmd, text, sizeof text), -1);

  free(got);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK_INT(system(cmd), 0);
  CHECK_DONE();
}
