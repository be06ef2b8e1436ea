/* The GPU source: one cuMemAlloc allocation of up to 1M regions, which the
 * cache asks the driver about; its bare tag source, cuPointerGetAttribute
 * (BUFFER_ID); and the CUDA half of a dmabuf registration for the pin rows.
 * The driver is dlopened so that the harness runs where there is none. */
#include "bench.h"
#include "cuda_api.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static CUcontext ctx;
static uint64_t tag_failures;

/* The kernel module's version ("580.159.04"): the first token with two
 * dots in /proc/driver/nvidia/version. */
static void driver_version(char *out, size_t len)
{
    char line[256] = "";
    FILE *f = fopen("/proc/driver/nvidia/version", "r");
    snprintf(out, len, "unknown driver");
    if (f && fgets(line, sizeof(line), f))
        for (char *tok = strtok(line, " \t\n"); tok; tok = strtok(NULL, " \t\n"))
            if (strchr(tok, '.') && strchr(tok, '.') != strrchr(tok, '.')) {
                snprintf(out, len, "%s", tok);
                break;
            }
    if (f)
        fclose(f);
}

/* Worker threads start without a current context. */
static void enter(void)
{
    bench_cu.cuCtxSetCurrent(ctx);
}

static void buffer_id(void *src, struct bench_lane *l, uint64_t n)
{
    const struct bench_src *s = src;
    unsigned long long id = 0, sum = 0;
    uint64_t rng = l->rng;
    for (uint64_t i = 0; i < n; i++) {
        CUdeviceptr p = (CUdeviceptr)(uintptr_t)bench_pick(s->base, s->regions, &rng);
        tag_failures +=
            bench_cu.cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, p) != CUDA_SUCCESS;
        sum += id;
    }
    l->rng = rng;
    l->sink += sum;
}

static int buffer_id_check(void *src, char *why, size_t len)
{
    (void)src;
    snprintf(why, len, "%llu BUFFER_ID queries failed", (unsigned long long)tag_failures);
    return tag_failures ? -1 : 0;
}

/* The handle is the dmabuf fd plus one, so that fd 0 is not "no handle". */
static int export_pin(void *addr, size_t len, void **handle)
{
    unsigned one = 1;
    int fd = -1;
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)addr;
    if (bench_cu.cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p) != CUDA_SUCCESS ||
        bench_cu.cuMemGetHandleForAddressRange(&fd, p, len, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                                               0) != CUDA_SUCCESS)
        return EINVAL;
    *handle = (void *)(uintptr_t)(fd + 1);
    return 0;
}

static void export_unpin(void *handle)
{
    close((int)((uintptr_t)handle - 1));
}

const struct bench_pinner bench_dmabuf = { export_pin, export_unpin };

int bench_cuda_open(struct bench_src *s, struct bench_machine *m)
{
    CUdevice dev = 0;
    CUdeviceptr p = 0;
    CUresult r = CUDA_SUCCESS;
    size_t free_b = 0, total_b = 0, want = bench_entries[BENCH_NELEM(bench_entries) - 1];
    const char *why = bench_cu_open(&dev, &ctx);
    if (!why && (r = bench_cu.cuMemGetInfo(&free_b, &total_b)))
        why = bench_cu_err(r);
    /* An eighth of the free memory stays with the driver: 1M regions
     * (64 GiB) fit an 80 GB GPU less that. */
    size_t regions = free_b / 8 * 7 / BENCH_REGION - 1;
    regions = regions < want ? regions : want;
    if (!why && (r = bench_cu.cuMemAlloc(&p, (regions + 1) * BENCH_REGION)))
        why = bench_cu_err(r);
    if (why) {
        bench_note(&(struct bench_row){ .workload = "cuda" }, "no GPU rows: %s", why);
        return -1;
    }
    bench_cu.cuDeviceGetName(m->gpu, sizeof(m->gpu), dev);
    driver_version(m->driver, sizeof(m->driver));
    bench_thread_start = enter;
    /* Never freed: the process ends with the run. */
    *s = (struct bench_src){ "cuda",
                             (p + BENCH_REGION - 1) & ~(uintptr_t)(BENCH_REGION - 1),
                             regions,
                             1,
                             { buffer_id, NULL, buffer_id_check, NULL } };
    return 0;
}
