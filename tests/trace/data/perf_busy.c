// Tiny CPU-bound program profiled by make_perf_sample.sh (forward/backward-like call tree).
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
static volatile double sink;
__attribute__((noinline)) double leaf_math(int n) { double s = 0; for (int i = 1; i < n; ++i) s += sqrt((double)i) * sin(i); return s; }
__attribute__((noinline)) void fill(char* b, int n) { for (int r = 0; r < 200; ++r) memset(b, r, n); }
__attribute__((noinline)) void forward(int n) { sink += leaf_math(n); }
__attribute__((noinline)) void backward(char* b, int n) { fill(b, n); sink += leaf_math(n / 2); }
int main(void) {
  char* b = malloc(1 << 20);
  for (int step = 0; step < 60; ++step) { forward(200000); backward(b, 1 << 20); }
  printf("%f\n", sink);
  return 0;
}
