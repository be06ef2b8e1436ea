/* The GPU cache: dmabuf export. */
#include "gpu_cache.h"

/* ------------------------------------------------------------------------ */
/* dmabuf export                                                             */
/* ------------------------------------------------------------------------ */

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

static void export_checked(uintptr_t addr, size_t len, const char *kind)
{
    int fd = -1;
    uint64_t offset = ~0ull;
    int rc = rc_dmabuf_export(addr, len, &fd, &offset);
    if (rc != REGCACHE_OK)
        fail_msg("%s: rc_dmabuf_export(%#jx, %zu): %s (%s)", kind, (uintmax_t)addr, len,
                 regcache_strerror(rc), regcache_last_error());
    char path[64], target[128] = "";
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof target - 1);
    assert_true(n > 0);
    target[n] = '\0';
    printf("dmabuf %-22s %#jx+%zu: fd %d -> %s, offset %ju\n", kind, (uintmax_t)addr, len, fd,
           target, (uintmax_t)offset);
    assert_non_null(strstr(target, "dmabuf"));
    assert_int_equal(offset, addr % (uintptr_t)sysconf(_SC_PAGESIZE));
    close(fd);
}

struct export_job {
    uintptr_t addr;
    size_t len;
    const char *kind;
};

/* On a thread that has no current context (a progress thread). */
static void *export_without_context(void *arg)
{
    const struct export_job *job = arg;
    export_checked(job->addr, job->len, job->kind);
    return NULL;
}

/* A stand-in NIC for the registration after the export (no NIC here): it
 * records whether it was handed a dmabuf, and an MR it never dereferences. */
static int dmabuf_handed;

static struct ibv_mr *record_dmabuf(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova,
                                    int fd, int access)
{
    static char mr[64];
    char path[64], target[128] = "";
    (void)pd, (void)offset, (void)len, (void)iova, (void)access;
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof target - 1);
    dmabuf_handed = n > 0 && strstr(target, "dmabuf") != NULL;
    return (struct ibv_mr *)mr;
}

static int no_data_direct(struct ibv_pd *pd, char *why, size_t n)
{
    (void)pd;
    snprintf(why, n, "no NIC");
    return 0;
}

/* Measured: this GPU's driver refuses the PCIe mapping type (H200:
 * NOT_SUPPORTED; GB200 takes it, and there this check does not apply),
 * and the cache's export with mapping AUTO falls back to the default
 * mapping, remembers the refusal, and hands the NIC a dmabuf. */
void pcie_mapping_refused_and_the_export_falls_back(void **state)
{
    (void)state;
    CUdeviceptr p;
    assert_int_equal(cu.cuMemAlloc(&p, 2 * MIB), CUDA_SUCCESS);
    int fd = -1;
    CUresult r = rc_cuda_api()->MemGetHandleForAddressRange(
        &fd, p, 2 * MIB, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
        CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE);
    const char *name = "?";
    cu.cuGetErrorName(r, &name);
    printf("cuMemGetHandleForAddressRange(DMA_BUF_FD, MAPPING_TYPE_PCIE): %s (%d)\n", name, (int)r);
    if (r == CUDA_SUCCESS)
        close(fd);
    assert_true(r == CUDA_ERROR_NOT_SUPPORTED || r == CUDA_ERROR_INVALID_VALUE);

    static const struct rc_verbs_seam nic = { .reg_dmabuf_mr = record_dmabuf,
                                              .data_direct = no_data_direct };
    static struct rc_dmabuf_reg d;
    struct ibv_pd *pd = (struct ibv_pd *)&d;
    struct ibv_mr *mr = NULL;
    rc_verbs_seam_override(&nic);
    assert_int_equal(rc_dmabuf_reg_init(&d, &pd, 1, RC_MAPPING_AUTO, RC_DATA_DIRECT_AUTO),
                     REGCACHE_OK);
    for (int i = 0; i < 2; i++) {
        dmabuf_handed = 0;
        int err = rc_dmabuf_reg(&d, pd, 0, 0, 0, (void *)(uintptr_t)p, 2 * MIB, &mr);
        if (err)
            fail_msg("registration %d: %s (%s)", i, strerror(err), regcache_last_error());
        assert_true(dmabuf_handed);
        assert_true(atomic_load(&d.pcie_refused[0]));
        assert_int_equal(atomic_load(&d.fds), 0);
    }
    rc_verbs_seam_override(NULL);
    char how[512];
    rc_dmabuf_reg_describe(&d, 1, how, sizeof how);
    printf("%s\n", how);
    assert_int_equal(cu.cuMemFree(p), CUDA_SUCCESS);
}

/* Measured: what the driver answers an export when the process has no
 * file descriptor left, and that the cache's export calls that exhaustion
 * (NO_SPACE, errno EMFILE: evict and retry), not a CUDA error. */
void export_without_fds_is_exhaustion(void **state)
{
    (void)state;
    CUdeviceptr p;
    assert_int_equal(cu.cuMemAlloc(&p, 2 * MIB), CUDA_SUCCESS);
    struct rlimit saved, lim;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &saved), 0);
    lim = saved;
    lim.rlim_cur = (rlim_t)open_fds() + 16;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &lim), 0);
    int fillers[64], n = 0;
    while (n < 64 && (fillers[n] = eventfd(0, EFD_CLOEXEC)) >= 0)
        n++;
    int fd = -1;
    CUresult r = rc_cuda_api()->MemGetHandleForAddressRange(&fd, p, 2 * MIB,
                                                            CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    uint64_t offset;
    int dmabuf = -1;
    int rc = rc_dmabuf_export((uintptr_t)p, 2 * MIB, &dmabuf, &offset);
    int err = errno;
    char why[256];
    snprintf(why, sizeof why, "%s", regcache_last_error());
    while (n)
        close(fillers[--n]);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &saved), 0);
    const char *name = "?";
    cu.cuGetErrorName(r, &name);
    printf("export with no fd left: %s (%d); the cache's export: %s, errno %d (%s)\n", name, (int)r,
           regcache_err_name(rc), err, why);
    if (r == CUDA_SUCCESS)
        close(fd);
    if (rc == REGCACHE_OK)
        close(dmabuf);
    assert_int_not_equal(r, CUDA_SUCCESS);
    assert_int_equal(rc, REGCACHE_ERR_NO_SPACE);
    assert_int_equal(err, EMFILE);
    assert_int_equal(cu.cuMemFree(p), CUDA_SUCCESS);
}

void dmabuf_export_of_every_kind(void **state)
{
    (void)state;
    CUdeviceptr legacy, pool, small_pool, va;
    CK(cu.cuMemAlloc(&legacy, 4 * MIB));
    CK(cu.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CK(cu.cuMemAllocAsync(&pool, MIB, stream));
    CK(cu.cuMemAllocAsync(&small_pool, 1000, stream));
    CK(cu.cuStreamSynchronize(stream));
    vmm_granularity();
    CK(cu.cuMemAddressReserve(&va, vmm_size, 0, 0, 0));
    CK(cu.cuMemCreate(&vmm_handle, vmm_size, &vmm_prop, 0));
    vmm_map(va);

    /* The driver may keep files of its own open after its first export:
     * count from after it. */
    export_checked(legacy, 4 * MIB, "cuMemAlloc");
    int fds = open_fds();
    export_checked(legacy + 8192, 4096, "cuMemAlloc 4K sub-range");
    export_checked(legacy + 8192 + 100, 5000, "cuMemAlloc unaligned");
    export_checked(pool, MIB, "cuMemAllocAsync");
    export_checked(va, vmm_size, "VMM");
    struct export_job jobs[] = { { legacy, MIB, "no context, cuMemAlloc" },
                                 { pool, MIB, "no context, pool" },
                                 { va, vmm_size, "no context, VMM" } };
    for (size_t i = 0; i < sizeof jobs / sizeof jobs[0]; i++) {
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, export_without_context, &jobs[i]), 0);
        pthread_join(t, NULL);
    }
    /* What the verbs backend meets with a small pool allocation: its host
     * page, and the 64 KiB registration page around it (informational). */
    int fd = -1;
    uint64_t offset;
    for (size_t page = 4096; page <= 65536; page *= 16) {
        int rc = rc_dmabuf_export(small_pool & ~(uintptr_t)(page - 1), page, &fd, &offset);
        printf("dmabuf %zu-byte page around a 1000-byte pool allocation: %s %s\n", page,
               regcache_strerror(rc), rc == REGCACHE_OK ? "" : regcache_last_error());
        if (rc == REGCACHE_OK)
            close(fd);
    }

    /* A failing export leaves no fd behind either. */
    CUdeviceptr gone;
    CK(cu.cuMemAlloc(&gone, MIB));
    CK(cu.cuMemFree(gone));
    fd = -1;
    int rc = rc_dmabuf_export(gone, MIB, &fd, &offset);
    printf("dmabuf of freed memory: %s (%s)\n", regcache_strerror(rc), regcache_last_error());
    assert_int_not_equal(rc, REGCACHE_OK);
    assert_int_equal(fd, -1);
    assert_int_equal(open_fds(), fds);

    assert_int_equal(rc_dmabuf_supported(0), 1);
    CK(cu.cuMemUnmap(va, vmm_size));
    CK(cu.cuMemRelease(vmm_handle));
    CK(cu.cuMemAddressFree(va, vmm_size));
    CK(cu.cuMemFreeAsync(pool, stream));
    CK(cu.cuMemFreeAsync(small_pool, stream));
    CK(cu.cuStreamSynchronize(stream));
    CK(cu.cuStreamDestroy(stream));
    CK(cu.cuMemFree(legacy));
}
