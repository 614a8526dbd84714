/* Test helper shared by the shape-inference tests: a shape written as text. */
#ifndef CN_SHAPE_CHECK_H
#define CN_SHAPE_CHECK_H

#include "shape/shape.h"

#include <stdlib.h>
#include <string.h>

/* A shape from "B|I->O": each row is "?" (left to inference) or comma-separated sizes, where a
 * size may carry a label ("3:rgb") and 0 leaves the size to inference. */
static cn_shape *mk(cn_shape_env *env, const char *label, bool param, const char *text) {
  static int64_t dims[3][8];
  static char labels_buf[3][8][16];
  static const char *labels[3][8];
  cn_shape_row_spec rows[3] = {{0}};
  const char *bar = strchr(text, '|'), *arrow = strstr(text, "->");
  const char *start[3] = {text, bar + 1, arrow + 2};
  const char *end[3] = {bar, arrow, text + strlen(text)};
  for (int k = 0; k < 3; k++) {
    const char *p = start[k];
    if (*p == '?') continue;
    rows[k].given = true;
    rows[k].dims = dims[k];
    rows[k].labels = labels[k];
    while (p < end[k]) {
      char *q;
      int i = rows[k].n++;
      dims[k][i] = strtoll(p, &q, 10);
      labels[k][i] = NULL;
      if (*q == ':') {
        int n = 0;
        for (q++; *q && *q != ',' && q < end[k]; q++) labels_buf[k][i][n++] = *q;
        labels_buf[k][i][n] = 0;
        labels[k][i] = labels_buf[k][i];
      }
      p = *q == ',' ? q + 1 : q;
    }
  }
  /* map textual order (batch, input, output) onto cn_row_kind */
  cn_shape_row_spec by_kind[3];
  by_kind[CN_ROW_BATCH] = rows[0];
  by_kind[CN_ROW_INPUT] = rows[1];
  by_kind[CN_ROW_OUTPUT] = rows[2];
  return cn_shape_new(env, label, param, by_kind);
}

#endif
