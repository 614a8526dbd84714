/* Synthetic datasets generated on the host (include/cannl.h, "Datasets"): the half-moons points
 * of the demo (examples/moons.c) and of the notation's `half_moons` builtin.
 *
 * Invariant: the values depend only on the arguments — a seeded splitmix64 stream and the C math
 * library's sqrt, log and cos, no global state — so every machine and every caller (the C demo,
 * a script) sees the same points for the same seed. */
#include "cannl.h"

#include <math.h>

#define HALF_MOONS_PI 3.14159265358979323846

/* splitmix64: a seeded, portable generator. */
static uint64_t next_bits(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* In [0, 1), 53 bits. */
static double uniform(uint64_t *state) {
  return (double)(next_bits(state) >> 11) * 0x1p-53;
}

/* A standard normal sample (Box-Muller; 1 - u lies in (0, 1], so the log is finite). */
static double gaussian(uint64_t *state) {
  double u = 1.0 - uniform(state), v = uniform(state);
  return sqrt(-2.0 * log(u)) * cos(2.0 * HALF_MOONS_PI * v);
}

void cn_dataset_half_moons(uint64_t seed, double noise, size_t n, double *xy, double *labels) {
  uint64_t state = seed;
  for (size_t i = 0; i < n; i++) {
    double t = HALF_MOONS_PI * uniform(&state);
    bool upper = i % 2 == 0;
    double x = upper ? cos(t) : 1.0 - cos(t), y = upper ? sin(t) : 0.5 - sin(t);
    xy[2 * i] = x + noise * gaussian(&state);
    xy[2 * i + 1] = y + noise * gaussian(&state);
    labels[i] = upper ? 1.0 : -1.0;
  }
}
