/* regcache-bench: the command line, the order of the workloads, and the
 * outputs.  bench/README.md says what each figure means. */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fputs("usage: regcache-bench [--quick] [--json FILE] [--plot DIR]\n"
          "  --quick      fewer repetitions: under a minute on 2 cores\n"
          "  --json FILE  write every figure and the machine to FILE\n"
          "  --plot DIR   write PNG plots (gnuplot) and their data to DIR\n",
          f);
}

static int parse(int argc, char **argv, struct bench_opts *o)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            o->quick = 1;
        } else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
            o->json = argv[++i];
        } else if (strcmp(argv[i], "--plot") == 0 && i + 1 < argc) {
            o->plot = argv[++i];
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            exit(0);
        } else {
            usage(stderr);
            return -1;
        }
    }
    /* Batches of 1000 keep the clock's own cost (tens of ns) under 0.1% of
     * a batch; the counts give a stable p99 (20 samples beyond it in a
     * full run). */
    o->batch_ops = 1000;
    o->batches = o->quick ? 200 : 2000;
    o->pin_reps = o->quick ? 50 : 500;
    o->mt_seconds = o->quick ? 0.1 : 0.5;
    o->mt_runs = o->quick ? 3 : 7;
    return 0;
}

int main(int argc, char **argv)
{
    struct bench_opts o = {0};
    struct bench_machine m;
    int rc = 0;

    if (parse(argc, argv, &o) != 0)
        return 2;
    bench_machine_read(&m);
    /* Raw registration first: the per-size cache rows are compared with
     * it; the hit-cost rows before churn, whose miss penalty uses them. */
    bench_verbs_pin(&o);
    bench_pin_sizes(&o);
    bench_entries_and_threads(&o, m.cores);
    bench_churn(&o);
    bench_notify(&o);
    bench_cuda_run(&o, &m);
    if (o.plot && bench_write_plots(o.plot) != 0)
        rc = 1;
    bench_print_table(&m, &o);
    if (o.json && bench_write_json(o.json, &m, &o) != 0) {
        fprintf(stderr, "regcache-bench: cannot write %s\n", o.json);
        rc = 1;
    }
    return rc;
}
