/* A minimal assertion harness for cannl's tests: every CHECK counts as one assertion; main ends
 * with CHECK_DONE(), which prints "N passed, N failed" and returns non-zero on any failure. */
#ifndef CN_CHECK_H
#define CN_CHECK_H

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static int check_passed_, check_failed_;

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (cond) {                                                                                    \
      check_passed_++;                                                                             \
    } else {                                                                                       \
      check_failed_++;                                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);                     \
    }                                                                                              \
  } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
  do {                                                                                             \
    if (cond) {                                                                                    \
      check_passed_++;                                                                             \
    } else {                                                                                       \
      check_failed_++;                                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);                     \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
    }                                                                                              \
  } while (0)

#define CHECK_INT(actual, expected)                                                                \
  do {                                                                                             \
    long long a_ = (long long)(actual), e_ = (long long)(expected);                                \
    CHECK_MSG(a_ == e_, "%s = %lld, expected %lld", #actual, a_, e_);                              \
  } while (0)

/* |actual - expected| <= tol, with NaN equal to NaN and infinities compared exactly. */
#define CHECK_NEAR(actual, expected, tol)                                                          \
  do {                                                                                             \
    double a_ = (double)(actual), e_ = (double)(expected);                                         \
    int ok_ = (isnan(a_) && isnan(e_)) || a_ == e_ || fabs(a_ - e_) <= (tol);                      \
    CHECK_MSG(ok_, "%s = %.17g, expected %.17g (tol %g)", #actual, a_, e_, (double)(tol));         \
  } while (0)

#define CHECK_STR(actual, expected)                                                                \
  do {                                                                                             \
    const char *a_ = (actual), *e_ = (expected);                                                   \
    int ok_ = a_ && e_ && strcmp(a_, e_) == 0;                                                     \
    CHECK_MSG(ok_, "%s =\n%s\nexpected\n%s", #actual, a_ ? a_ : "(null)", e_ ? e_ : "(null)");     \
  } while (0)

/* The string contains the substring. */
#define CHECK_HAS(actual, needle)                                                                  \
  do {                                                                                             \
    const char *a_ = (actual), *n_ = (needle);                                                     \
    int ok_ = a_ && n_ && strstr(a_, n_) != NULL;                                                  \
    CHECK_MSG(ok_, "%s = \"%s\" lacks \"%s\"", #actual, a_ ? a_ : "(null)", n_);                   \
  } while (0)

#define CHECK_DONE()                                                                               \
  do {                                                                                             \
    printf("%d passed, %d failed\n", check_passed_, check_failed_);                                \
    return check_failed_ != 0 || check_passed_ == 0;                                               \
  } while (0)

#endif
