/* For tests that make an allocation fail on purpose: the address space limited to 4 GiB with
 * setrlimit (so a buffer of hundreds of GB fails the same way on every machine, whatever its
 * memory and overcommit policy) and restored afterwards; under AddressSanitizer, its allocator
 * told to return NULL rather than report the failed allocation as fatal. Include in one file per
 * test program (it defines the sanitizer's options hook). */
#ifndef CANNL_LIMIT_CHECK_H
#define CANNL_LIMIT_CHECK_H

#include <stdbool.h>
#include <sys/resource.h>

#if defined(__SANITIZE_ADDRESS__)
#define LIMIT_CHECK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LIMIT_CHECK_ASAN 1
#endif
#endif
#ifdef LIMIT_CHECK_ASAN
/* read by the sanitizer at start-up */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
  return "allocator_may_return_null=1";
}
#endif

/* Lowers the soft address-space limit to 4 GiB (an unprivileged process may raise it back to the
 * hard limit); *saved receives the limits to restore. False when the limits cannot be read or
 * set. */
static inline bool limit_address_space(struct rlimit *saved) {
  if (getrlimit(RLIMIT_AS, saved) != 0) return false;
  struct rlimit limited = *saved;
  rlim_t four_gib = (rlim_t)4 << 30;
  if (limited.rlim_max == RLIM_INFINITY || limited.rlim_max > four_gib) limited.rlim_cur = four_gib;
  return setrlimit(RLIMIT_AS, &limited) == 0;
}

static inline bool restore_address_space(const struct rlimit *saved) {
  return setrlimit(RLIMIT_AS, saved) == 0;
}

#endif
