/* The address space the CPU workloads get from: one anonymous mapping, never
 * touched, so a million 64 KiB regions cost no memory. */
#include "bench.h"

#include <sys/mman.h>

int bench_space_map(struct bench_space *s, size_t regions)
{
    size_t bytes = regions * BENCH_REGION_SIZE;
    /* Over-map by one region so the base can be aligned to a region: the
     * null backend's query reports region-aligned allocations. */
    void *p = mmap(NULL, bytes + BENCH_REGION_SIZE, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    s->bytes = bytes + BENCH_REGION_SIZE;
    s->base = ((uintptr_t)p + BENCH_REGION_SIZE - 1) & ~(BENCH_REGION_SIZE - 1);
    s->regions = regions;
    /* The aligned base may lie above the mapping's start. */
    s->unmap_at = (uintptr_t)p;
    return 0;
}

void bench_space_unmap(struct bench_space *s)
{
    if (s->bytes)
        munmap((void *)s->unmap_at, s->bytes);
    s->bytes = 0;
}
