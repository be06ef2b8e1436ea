/* Where the harness's threads run.  A thread left to the scheduler may
 * share a core with another hyperthread or move between cores mid-sample,
 * and on a VM a single thread's figure then moved by 1.5x between runs -
 * more than the scaling goals tolerate.  So the main thread (every
 * single-thread figure) stays on one CPU, and worker i of a series takes
 * the i-th CPU of an order that uses each physical core once before any
 * core's second hyperthread.  UCX's rows run through the same runner. */
#include "bench.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

static int order[CPU_SETSIZE];
static int ncpus;

struct placed {
    int cpu, sibling; /* sibling: how many of its core's CPUs come before it */
};

/* Position of cpu among its core's CPUs (thread_siblings_list, e.g. "3,19"
 * or "2-3"); 0 when the topology cannot be read. */
static int sibling_rank(int cpu)
{
    char path[96];
    snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list",
             cpu);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int rank = 0, lo, hi;
    char sep;
    while (fscanf(f, "%d", &lo) == 1) {
        hi = lo;
        if (fscanf(f, "%c", &sep) == 1 && sep == '-' && fscanf(f, "%d%c", &hi, &sep) < 1)
            break;
        for (int c = lo; c <= hi; c++)
            rank += c < cpu;
        if (sep != ',')
            break;
    }
    fclose(f);
    return rank;
}

static int by_sibling_then_cpu(const void *a, const void *b)
{
    const struct placed *x = a, *y = b;
    if (x->sibling != y->sibling)
        return x->sibling - y->sibling;
    return x->cpu - y->cpu;
}

static void pin(pthread_t thread, int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(thread, sizeof(set), &set); /* best effort */
}

int bench_cpus_plan(void)
{
    cpu_set_t allowed;
    struct placed p[CPU_SETSIZE];
    int n = 0, cores = 0;
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0)
        return 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, &allowed)) {
            p[n] = (struct placed){ cpu, sibling_rank(cpu) };
            cores += p[n].sibling == 0;
            n++;
        }
    qsort(p, (size_t)n, sizeof(p[0]), by_sibling_then_cpu);
    for (int i = 0; i < n; i++)
        order[i] = p[i].cpu;
    ncpus = n;
    if (n)
        pin(pthread_self(), order[0]);
    return cores;
}

void bench_cpus_pin_worker(unsigned index)
{
    if (ncpus)
        pin(pthread_self(), order[index % (unsigned)ncpus]);
}
