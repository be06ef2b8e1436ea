/* What each figure is measured over and for how long: main.c sets the
 * lengths from the command line, every workload reads them.  A file of its
 * own so that the workloads depend on the settings, not on the program
 * that runs them or on one another. */
#include "bench.h"

struct bench_settings bench;

const size_t bench_entries[4] = { 1, 1000, 100000, 1000000 };
const unsigned bench_thread_counts[7] = { 1, 2, 4, 8, 16, 24, 32 };
