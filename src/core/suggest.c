/* Suggestions for a misspelled name: the known names closest to what the user wrote, by the
 * optimal string alignment distance (Levenshtein's insertions, deletions and substitutions, plus
 * the transposition of two adjacent bytes, each costing 1: "sigmiod" is one step from "sigmoid",
 * "rnu" one from "run"). Every message about an unknown name, builtin, label, option or command
 * gathers its candidates here, so that all of them suggest alike.
 *
 * Invariants: a candidate is kept only when its distance is at most a third of the longer of the
 * two names (at least 1) and smaller than the word's length and the candidate's, so that "x" never
 * suggests "y" and a long name never suggests an unrelated one; a candidate equal to the word is
 * never suggested; at most CN_SUGGEST_MAX are kept, the closest first, equal distances in
 * byte order (strcmp), the same candidate once, so a message does not depend on the order the
 * candidates were offered in. */
#include "core/core.h"

#include <stdio.h>
#include <string.h>

/* Names longer than this are compared by their first CN_SUGGEST_LONGEST bytes, plus the
 * difference of their lengths past them: the distance's table stays on the stack, and so long a
 * name is not one a user retypes. */
#define CN_SUGGEST_LONGEST 127

static size_t min_size(size_t a, size_t b) {
  return a < b ? a : b;
}

/* The optimal string alignment distance of a[0 .. n) and b[0 .. m), both at most
 * CN_SUGGEST_LONGEST: three rows of the dynamic programme (the transposition looks two back). */
static int osa_distance(const char *a, size_t n, const char *b, size_t m) {
  int rows[3][CN_SUGGEST_LONGEST + 1];
  int *before = rows[0], *prev = rows[1], *cur = rows[2];
  for (size_t j = 0; j <= m; j++) prev[j] = (int)j;
  for (size_t i = 1; i <= n; i++) {
    cur[0] = (int)i;
    for (size_t j = 1; j <= m; j++) {
      int cost = a[i - 1] != b[j - 1];
      int best = prev[j - 1] + cost;
      if (prev[j] + 1 < best) best = prev[j] + 1;
      if (cur[j - 1] + 1 < best) best = cur[j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
          before[j - 2] + 1 < best)
        best = before[j - 2] + 1;
      cur[j] = best;
    }
    int *spare = before;
    before = prev;
    prev = cur;
    cur = spare;
  }
  return prev[m];
}

void cn_suggest_init(cn_suggest *s, const char *word) {
  memset(s, 0, sizeof *s);
  s->word = word;
}

/* Orders two kept candidates: the closer first, then byte order. */
static int compare(int dist_a, const char *a, size_t len_a, int dist_b, const char *b,
                   size_t len_b) {
  if (dist_a != dist_b) return dist_a < dist_b ? -1 : 1;
  int c = memcmp(a, b, min_size(len_a, len_b));
  if (c != 0) return c;
  return len_a < len_b ? -1 : len_a > len_b;
}

void cn_suggest_consider_n(cn_suggest *s, const char *name, size_t len) {
  size_t word_len = strlen(s->word);
  if (len == 0 || word_len == 0) return;
  size_t n = min_size(word_len, CN_SUGGEST_LONGEST), m = min_size(len, CN_SUGGEST_LONGEST);
  if (word_len == len && memcmp(s->word, name, len) == 0) return;
  size_t rest_word = word_len - n, rest = len - m;
  int dist = osa_distance(s->word, n, name, m) +
             (int)(rest_word > rest ? rest_word - rest : rest - rest_word);
  size_t longer = word_len > len ? word_len : len;
  int limit = longer / 3 > 1 ? (int)(longer / 3) : 1;
  if (dist > limit || (size_t)dist >= word_len || (size_t)dist >= len) return;
  for (int k = 0; k < s->n; k++)
    if (s->len[k] == len && memcmp(s->name[k], name, len) == 0) return;
  int at = s->n;
  while (at > 0 && compare(dist, name, len, s->dist[at - 1], s->name[at - 1], s->len[at - 1]) < 0)
    at--;
  if (at >= CN_SUGGEST_MAX) return;
  int last = s->n < CN_SUGGEST_MAX ? s->n : CN_SUGGEST_MAX - 1;
  for (int k = last; k > at; k--) {
    s->name[k] = s->name[k - 1];
    s->len[k] = s->len[k - 1];
    s->dist[k] = s->dist[k - 1];
  }
  s->name[at] = name;
  s->len[at] = len;
  s->dist[at] = dist;
  if (s->n < CN_SUGGEST_MAX) s->n++;
}

void cn_suggest_consider(cn_suggest *s, const char *name) {
  if (name) cn_suggest_consider_n(s, name, strlen(name));
}

void cn_suggest_consider_list(cn_suggest *s, const char *list) {
  const char *p = list;
  while (*p) {
    size_t skip = strspn(p, ", |"), len = strcspn(p + skip, ", |");
    cn_suggest_consider_n(s, p + skip, len);
    p += skip + len;
  }
}

const char *cn_suggest_text(cn_suggest *s) {
  int at = 0, size = (int)sizeof s->text;
  s->text[0] = '\0';
  for (int k = 0; k < s->n; k++) {
    const char *sep = k == 0 ? ", did you mean " : k + 1 == s->n ? " or " : ", ";
    int len = s->len[k] > 100 ? 100 : (int)s->len[k];
    int wrote = snprintf(s->text + at, (size_t)(size - at), "%s'%s%.*s'", sep,
                         s->prefix ? s->prefix : "", len, s->name[k]);
    if (wrote < 0 || wrote >= size - at - 1) break;
    at += wrote;
  }
  if (at > 0) s->text[at++] = '?', s->text[at] = '\0';
  return s->text;
}

const char *cn_suggest_names(const char *word, int n_known, const char *const *known, char *out,
                             size_t size) {
  cn_suggest s;
  cn_suggest_init(&s, word ? word : "");
  for (int i = 0; i < n_known; i++) cn_suggest_consider(&s, known[i]);
  if (size > 0) snprintf(out, size, "%s", cn_suggest_text(&s));
  return out;
}
