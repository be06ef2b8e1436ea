/* Raw registration with real verbs, the figure the cache's hit is compared
 * with.  Only where an RDMA device exists (a VM with rxe); host memory,
 * since there is no GPU there. */
#include "bench.h"

#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

enum { PIN, UNPIN, BOTH, NPARTS };
static const char *const part_mode[NPARTS] = {"pin", "unpin", "pin+unpin"};
static const char *const part_name[NPARTS] = {"raw: ibv_reg_mr", "raw: ibv_dereg_mr",
                                               "raw: reg + dereg"};

static void size_rows(const struct bench_opts *o, struct ibv_pd *pd, const char *dev,
                      size_t size)
{
    double *v[NPARTS];
    int ok = 1;
    char err[96] = "";
    void *buf = mmap(NULL, size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    for (int p = 0; p < NPARTS; p++)
        ok &= (v[p] = malloc(o->pin_reps * sizeof(double))) != NULL;
    if (buf == MAP_FAILED) {
        ok = 0;
        snprintf(err, sizeof(err), "cannot map %zu bytes", size);
    }
    for (unsigned k = 0; ok && k < o->pin_reps; k++) {
        uint64_t t0 = bench_now_ns();
        struct ibv_mr *mr = ibv_reg_mr(pd, buf, size,
                                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                           IBV_ACCESS_REMOTE_READ);
        uint64_t t1 = bench_now_ns();
        if (!mr) {
            snprintf(err, sizeof(err), "ibv_reg_mr: %s", strerror(errno));
            ok = 0;
            break;
        }
        ibv_dereg_mr(mr);
        uint64_t t2 = bench_now_ns();
        v[PIN][k] = (double)(t1 - t0);
        v[UNPIN][k] = (double)(t2 - t1);
        v[BOTH][k] = (double)(t2 - t0);
    }
    for (int p = 0; p < NPARTS; p++) {
        struct bench_row *r = bench_row_add("pin", part_name[p]);
        snprintf(r->impl, sizeof(r->impl), "raw");
        snprintf(r->mode, sizeof(r->mode), "%s", part_mode[p]);
        r->size = size;
        if (ok) {
            struct bench_summary s = bench_summarize(v[p], o->pin_reps);
            r->median_ns = s.median;
            r->p99_ns = s.p99;
            snprintf(r->note, sizeof(r->note), "%s, host memory", dev);
        } else {
            snprintf(r->note, sizeof(r->note), "failed: %s", err);
        }
        free(v[p]);
    }
    if (buf != MAP_FAILED)
        munmap(buf, size);
}

void bench_verbs_pin(const struct bench_opts *o)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n == 0) {
        bench_skip("raw registration (verbs)",
                   "no RDMA device (ibv_get_device_list found none)");
        if (list)
            ibv_free_device_list(list);
        return;
    }
    struct ibv_context *ctx = ibv_open_device(list[0]);
    struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
    if (!pd) {
        bench_skip("raw registration (verbs)", "%s: cannot open or allocate a PD",
                   ibv_get_device_name(list[0]));
    } else {
        const size_t *sizes;
        size_t count = bench_pin_size_list(o, &sizes);
        for (size_t k = 0; k < count; k++)
            size_rows(o, pd, ibv_get_device_name(list[0]), sizes[k]);
        ibv_dealloc_pd(pd);
    }
    if (ctx)
        ibv_close_device(ctx);
    ibv_free_device_list(list);
}
