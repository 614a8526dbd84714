/* Robustness of scripts (issue 14): integer extremes are reported as written, at the literal's
 * position, never wrapped (a script computes with doubles, exact up to 2^53); sizes computed from
 * script values are checked with positions. Messages compared exactly. */
#include "notation_check.h"

static void test_integer_extremes(void) {
  CHECK_HAS(run_error("print (range 9223372036854775807)\n"),
            "seed.cnl:1:14: the integer 9223372036854775807 has no exact value in a script, which "
            "computes with doubles (at most 2^53 = 9007199254740992 in magnitude)");
  CHECK_HAS(run_error("let n = -9223372036854775807\n"),
            "seed.cnl:1:9: the integer -9223372036854775807 has no exact value in a script");
  CHECK_HAS(run_error("print (range 9223372036854775808)\n"),
            "seed.cnl:1:14: integer literal too large");
  CHECK_HAS(run_error("print (range 1e300)\n"),
            "seed.cnl:1:8: the integer 1e+300 is out of range (at most 9e15 in magnitude)");
  CHECK_HAS(run_error("print (range 2.5)\n"), "seed.cnl:1:8: expected an integer, found 2.5");
  CHECK_HAS(run_error("print (range (-3))\n"), "seed.cnl:1:8: range: -3 values (at least 1)");
  /* 2^53 itself is exact, and too large to allocate: refused when the shape is known */
  CHECK_HAS(run_error("print (range 9007199254740992)\n"),
            "seed.cnl:1:8: the integer 9007199254740992 is out of range (at most 9e15 in "
            "magnitude)");
  CHECK_HAS(run_error("print (range 4000000000000000)\n"),
            "seed.cnl:1:8: \"range\" (#2) of shape |->4000000000000000 is too large: more than "
            "2^40 bytes (axis 0 of size 4000000000000000)");
  /* the largest exact integers still compute */
  BOTH {
    outcome o;
    if (!run(&o, b, "print (!.9007199254740992 - !.9007199254740991)\n")) continue;
    expect(&o, b, 0, NULL, "|->1", VALUES(1), 0);
  }
}

int main(void) {
  test_integer_extremes();
  CHECK_DONE();
}
