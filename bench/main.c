/* regcache-bench: the command line, the sources and the order of the
 * workloads.  bench/README.md says what each figure means; report.py judges
 * them. */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void cpu_model(char *out, size_t len)
{
    char line[256];
    FILE *f = fopen("/proc/cpuinfo", "r");
    snprintf(out, len, "unknown");
    while (f && fgets(line, sizeof(line), f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon) {
            colon[strcspn(colon, "\n")] = '\0';
            snprintf(out, len, "%s", colon + 2);
            break;
        }
    }
    if (f)
        fclose(f);
}

int main(int argc, char **argv)
{
    struct bench_machine m = { .cores = sysconf(_SC_NPROCESSORS_ONLN), .load = -1 };
    struct bench_src cpu, gpu;
    if (argc == 4 && strcmp(argv[1], "--count") == 0) /* under callgrind: instructions.c */
        return bench_instructions_child(atoi(argv[2]), strtoull(argv[3], NULL, 10));
    int quick = argc == 4 && strcmp(argv[1], "--quick") == 0;
    if (argc != 3 + quick || strcmp(argv[1 + quick], "--json") != 0) {
        fputs("usage: regcache-bench [--quick] --json FILE\n"
              "  --quick: fewer samples, under a minute on 2 cores; FILE: for bench/report.py\n",
              stderr);
        return 2;
    }
    /* Enough samples for a stable p99 (5 beyond it in a full run); runs of
     * a tenth of a second keep 8 series in under a minute, each count's
     * runs beside as many one-thread runs (measure.c). */
    bench = (struct bench_settings){ quick, quick ? 100 : 500, 1000, quick ? 3 : 5,
                                     quick ? 0.05 : 0.1 };
    cpu_model(m.cpu, sizeof(m.cpu));
    getloadavg(&m.load, 1);
    m.physical_cores = bench_cpus_plan();
    if (bench_json_open(argv[2 + quick]) != 0 || bench_null_source(&cpu) != 0) {
        perror("regcache-bench: writing the JSON or mapping the address space");
        return 2;
    }
    /* Before UCX is loaded (without its memory hooks). */
    bench_host_monitor();
    bench_leave_notice();
    bench_ucx_load(&m);
    bench_instructions(&cpu);
    bench_hits(&cpu);
    bench_threads(&cpu);
    bench_churn(&cpu);
    bench_invalidation(&cpu);
    bench_misses(&cpu);
    bench_prefetch(&cpu);
    bench_eager(&cpu);
    bench_host_ranges();
    bench_host_merge();
    bench_host_cache(&cpu);
    if (bench_cuda_open(&gpu, &m) == 0) {
        bench_hits(&gpu);
        bench_threads(&gpu);
        bench_misses(&gpu);
        bench_linked(&gpu);
        bench_prefetch(&gpu);
        bench_eager(&gpu);
        bench_pins(&gpu, &bench_dmabuf);
    }
    return bench_json_close(&m) == 0 ? 0 : 1;
}
