/* The checking backend over the real driver (see gpu_backend.h). */
#include "gpu_backend.h"
#include "../common/stats_field.h"

#include <cuda.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UNUSED __attribute__((unused))

/* ------------------------------------------------------------------------ */
/* What the driver says about an address                                     */
/* ------------------------------------------------------------------------ */

struct facts {
    unsigned long long id;
    unsigned int type; /* CUmemorytype; 0: no CUDA memory */
    unsigned int managed, legacy_ipc;
    int ordinal;
    CUmemoryPool pool;
    CUdeviceptr range_start, mapping_start;
    size_t range_size, mapping_size;
};

/* One cuPointerGetAttributes call, for the attributes the library itself
 * reads on every kind of memory.  Memory the driver does not know (never
 * allocated, freed, an unmapped part of a VMM reservation) comes back as
 * CUDA_SUCCESS with type 0. */
static CUresult read_facts(uintptr_t addr, struct facts *f)
{
    *f = (struct facts){ 0 };
    CUpointer_attribute attrs[] = {
        CU_POINTER_ATTRIBUTE_BUFFER_ID,         CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        CU_POINTER_ATTRIBUTE_IS_MANAGED,        CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,    CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
        CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,  CU_POINTER_ATTRIBUTE_RANGE_SIZE,
        CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, CU_POINTER_ATTRIBUTE_MAPPING_SIZE,
    };
    void *values[] = { &f->id,          &f->type,       &f->managed,
                       &f->legacy_ipc,  &f->ordinal,    &f->pool,
                       &f->range_start, &f->range_size, &f->mapping_start,
                       &f->mapping_size };
    _Static_assert(sizeof attrs / sizeof attrs[0] == sizeof values / sizeof values[0],
                   "one value per attribute");
    CUresult r =
        cuPointerGetAttributes(sizeof attrs / sizeof attrs[0], attrs, values, (CUdeviceptr)addr);
    if (r == CUDA_ERROR_INVALID_VALUE || (r == CUDA_SUCCESS && f->type == 0)) {
        *f = (struct facts){ 0 }; /* some drivers say "unknown" this way */
        return CUDA_SUCCESS;
    }
    return r;
}

/* Asked apart from read_facts: only device memory needs it. */
static unsigned int rdma_capable(uintptr_t addr)
{
    unsigned int v = 0;
    cuPointerGetAttribute(&v, CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE, (CUdeviceptr)addr);
    return v;
}

static int kind_of(const struct facts *f)
{
    if (f->type == 0)
        return GB_KIND_NONE;
    if (f->managed)
        return GB_KIND_MANAGED;
    if (f->type == CU_MEMORYTYPE_HOST)
        return GB_KIND_HOST;
    if (f->legacy_ipc)
        return GB_KIND_MALLOC;
    return f->pool ? GB_KIND_POOL : GB_KIND_VMM;
}

static const char *kind_name(int kind)
{
    static const char *const names[] = { "no CUDA memory", "cuMemAlloc", "pool", "VMM",
                                         "pinned host",    "managed" };
    return names[kind];
}

static const char *cuda_error_name(CUresult r)
{
    const char *name = "unknown CUDA error";
    cuGetErrorName(r, &name);
    return name;
}

/* Allocations start at least 256-byte aligned, so a walk through memory the
 * driver does not know steps this far and still finds every allocation that
 * starts there (small allocations are packed into shared pages). */
#define HOLE_STEP 256

static uintptr_t narrow(uintptr_t end, uintptr_t addr, CUdeviceptr start, size_t size)
{
    uintptr_t s = (uintptr_t)start;
    if (size != 0 && s <= addr && addr - s < size && s + size < end)
        end = s + size;
    return end;
}

/* The end of the stretch from addr on that holds one buffer id.  A buffer
 * id belongs to an allocation: RANGE, except for VMM memory, where RANGE is
 * the whole reservation and each mapping (MAPPING) has its own id.  For
 * other memory MAPPING is a driver chunk, shared by small allocations or one
 * of several under a large pool allocation: no narrower than one id, and
 * only a fallback. */
static uintptr_t stretch_end(uintptr_t addr, const struct facts *f)
{
    static atomic_flag warned = ATOMIC_FLAG_INIT;
    uintptr_t end = UINTPTR_MAX;
    if (f->type != 0) {
        end = narrow(end, addr, f->range_start, f->range_size);
        if (kind_of(f) == GB_KIND_VMM || end == UINTPTR_MAX)
            end = narrow(end, addr, f->mapping_start, f->mapping_size);
        if (end == UINTPTR_MAX && !atomic_flag_test_and_set(&warned)) {
            printf("note: the driver gives no range or mapping for %s memory at %#lx: "
                   "walking it in %d-byte steps\n",
                   kind_name(kind_of(f)), (unsigned long)addr, HOLE_STEP);
            fflush(stdout);
        }
    }
    if (end == UINTPTR_MAX)
        end = (addr | (HOLE_STEP - 1)) + 1;
    return end;
}

/* ------------------------------------------------------------------------ */
/* Registrations: the memory under them when they were made                 */
/* ------------------------------------------------------------------------ */

struct seg {
    uintptr_t start, end;
    unsigned long long id; /* 0: no CUDA memory there */
};

struct record {
    uintptr_t addr;
    size_t len;
    int device;
    /* The hull of the requests served with this registration: the memory a
     * NIC would have used, which must still be the registered memory when the
     * cache deregisters.  Neighbours packed into the rounded range may go
     * first; they belong to other entries. */
    _Atomic uintptr_t used_lo, used_hi;
    size_t nseg;
    struct seg seg[]; /* contiguous, sorted, covering [addr, addr+len) */
};

struct walk {
    struct seg *seg;
    size_t n, cap;
};

static int walk_add(struct walk *w, uintptr_t start, uintptr_t end, unsigned long long id)
{
    if (w->n > 0 && w->seg[w->n - 1].id == id) {
        w->seg[w->n - 1].end = end;
        return 0;
    }
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 16;
        struct seg *s = realloc(w->seg, cap * sizeof *s);
        if (!s)
            return -1;
        w->seg = s;
        w->cap = cap;
    }
    w->seg[w->n++] = (struct seg){ start, end, id };
    return 0;
}

/* A registration wider than this many stretches (256 MiB of unmapped
 * memory walked in HOLE_STEP) is left partly unread, and says so. */
#define WALK_MAX_PROBES (1u << 20)

/* The memory under [start, end) now, one segment per buffer id. */
/* read_facts(), or -1 and the driver's error in why. */
static int read_facts_saying(uintptr_t p, struct facts *f, char *why, size_t size)
{
    CUresult r = read_facts(p, f);
    if (r == CUDA_SUCCESS)
        return 0;
    snprintf(why, size, "cuPointerGetAttributes(%#lx): %s", (unsigned long)p, cuda_error_name(r));
    return -1;
}

static int walk(uintptr_t start, uintptr_t end, struct walk *w, char *why, size_t size)
{
    unsigned int probes = 0;
    for (uintptr_t p = start; p < end;) {
        uintptr_t e = end;
        unsigned long long id = 0;
        if (++probes <= WALK_MAX_PROBES) {
            struct facts f;
            if (read_facts_saying(p, &f, why, size) != 0)
                return -1;
            uintptr_t stretch = stretch_end(p, &f);
            e = stretch < end ? stretch : end;
            id = f.id;
        } else {
            printf("note: registration %#lx+%zu: stopped reading it at %#lx after %u "
                   "stretches; the rest counts as no memory\n",
                   (unsigned long)start, (size_t)(end - start), (unsigned long)p, WALK_MAX_PROBES);
            fflush(stdout);
        }
        if (walk_add(w, p, e, id) != 0) {
            snprintf(why, size, "out of memory");
            return -1;
        }
        p = e;
    }
    return 0;
}

static const struct seg *find_seg(const struct record *r, uintptr_t addr)
{
    size_t lo = 0, hi = r->nseg;
    while (lo < hi) { /* the first segment ending after addr */
        size_t mid = lo + (hi - lo) / 2;
        if (r->seg[mid].end <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < r->nseg && r->seg[lo].start <= addr ? &r->seg[lo] : NULL;
}

/* Is the memory under [lo, hi) now what r was made for?  0 yes; 1 no, and
 * why; -1 the driver could not be asked. */
static int compare(const struct record *r, uintptr_t lo, uintptr_t hi, char *why, size_t size)
{
    for (uintptr_t p = lo; p < hi;) {
        struct facts f;
        if (read_facts_saying(p, &f, why, size) != 0)
            return -1;
        const struct seg *s = find_seg(r, p);
        if (!s) {
            snprintf(why, size, "%#lx lies outside the registration", (unsigned long)p);
            return 1;
        }
        if (f.type == 0 || s->id == 0 || f.id != s->id) {
            snprintf(why, size,
                     "at %#lx: registered for %s (buffer id %llu), now %s (buffer id %llu)",
                     (unsigned long)p, s->id ? "memory" : "no memory", s->id,
                     kind_name(kind_of(&f)), f.id);
            return 1;
        }
        uintptr_t e = stretch_end(p, &f);
        p = e < s->end ? e : s->end;
    }
    return 0;
}

int gb_cache_first(void)
{
    static regcache_t *first;
    if (!getenv("GB_CACHE_FIRST"))
        return 0;
    int rc = gb_create(REGCACHE_VALIDATE_AUTO, 0, &first);
    printf("cache created before CUDA: %s, validation %s (%s)\n", regcache_strerror(rc),
           rc == REGCACHE_OK && regcache_validation_mode(first) == REGCACHE_VALIDATE_HOOKS
               ? "HOOKS"
               : "TAG_CHECK",
           rc == REGCACHE_OK ? regcache_validation_reason(first) : regcache_last_error());
    fflush(stdout);
    return rc != REGCACHE_OK;
}

static void describe(const struct record *r, char *out, size_t size)
{
    int n = snprintf(out, size, "registration %#lx+%zu on device %d made for",
                     (unsigned long)r->addr, r->len, r->device);
    for (size_t i = 0; i < r->nseg && n >= 0 && (size_t)n < size; i++) {
        if (i == 8) {
            snprintf(out + n, size - n, " ... (%zu stretches)", r->nseg);
            return;
        }
        n += snprintf(out + n, size - n, " [%#lx+%zu id %llu]", (unsigned long)r->seg[i].start,
                      (size_t)(r->seg[i].end - r->seg[i].start), r->seg[i].id);
    }
}

/* ------------------------------------------------------------------------ */
/* Counters                                                                  */
/* ------------------------------------------------------------------------ */

static atomic_long regs, deregs, valid, stale, queries;

/* Per device: slot 0 is host memory, slot d + 1 device d. */
#define SLOTS 65
static atomic_long regs_on[SLOTS], deregs_on[SLOTS], bytes_on[SLOTS];
static _Atomic size_t capacity[SLOTS];

static int slot(int device)
{
    return device >= REGCACHE_DEVICE_HOST && device < SLOTS - 1 ? device + 1 : -1;
}

long gb_regs(void)
{
    return atomic_load(&regs);
}
long gb_deregs(void)
{
    return atomic_load(&deregs);
}
long gb_deregs_valid(void)
{
    return atomic_load(&valid);
}
long gb_deregs_stale(void)
{
    return atomic_load(&stale);
}
long gb_queries(void)
{
    return atomic_load(&queries);
}

static long on_device(atomic_long *counters, int device)
{
    return slot(device) < 0 ? 0 : atomic_load(&counters[slot(device)]);
}

long gb_regs_on(int device)
{
    return on_device(regs_on, device);
}
long gb_deregs_on(int device)
{
    return on_device(deregs_on, device);
}
long gb_bytes_on(int device)
{
    return on_device(bytes_on, device);
}

void gb_set_capacity(int device, size_t bytes)
{
    if (slot(device) >= 0)
        atomic_store(&capacity[slot(device)], bytes);
}

/* A long run must not drown its summary: the first reports say enough. */
#define MAX_REPORTS 20

static void report(const char *line)
{
    static atomic_int reports;
    int n = atomic_fetch_add(&reports, 1);
    if (n < MAX_REPORTS)
        printf("%s\n", line);
    else if (n == MAX_REPORTS)
        printf("(further backend reports not printed)\n");
    fflush(stdout);
}

/* ------------------------------------------------------------------------ */
/* The backend                                                               */
/* ------------------------------------------------------------------------ */

/* The request of the get in progress on this thread, so that a registration
 * knows which part of its rounded range the miss was for. */
static _Thread_local struct {
    uintptr_t lo, hi;
} request;

static int reg(UNUSED void *arg, void *addr, size_t len, int device, UNUSED int rail, void **handle)
{
    uintptr_t a = (uintptr_t)addr;
    int s = slot(device);
    if (s < 0) {
        printf("reg %#lx+%zu: device %d is out of the backend's range\n", (unsigned long)a, len,
               device);
        fflush(stdout);
        return EINVAL;
    }
    long now = atomic_fetch_add(&bytes_on[s], (long)len) + (long)len;
    size_t cap = atomic_load(&capacity[s]);
    if (cap != 0 && (size_t)now > cap) {
        atomic_fetch_sub(&bytes_on[s], (long)len);
        return ENOSPC; /* as nvidia-peermem reports a full BAR1 */
    }

    struct walk w = { 0 };
    char why[160] = "out of memory";
    struct record *r = NULL;
    if (walk(a, a + len, &w, why, sizeof why) != 0 ||
        !(r = malloc(sizeof *r + w.n * sizeof w.seg[0]))) {
        char line[256];
        snprintf(line, sizeof line, "reg %#lx+%zu failed: %s", (unsigned long)a, len, why);
        report(line);
        free(w.seg);
        atomic_fetch_sub(&bytes_on[s], (long)len);
        return EINVAL; /* not "exhausted": the cache must not evict and retry */
    }
    r->addr = a;
    r->len = len;
    r->device = device;
    int asked = request.lo < request.hi && request.lo >= a && request.hi <= a + len;
    atomic_init(&r->used_lo, asked ? request.lo : a);
    atomic_init(&r->used_hi, asked ? request.hi : a + len);
    r->nseg = w.n;
    memcpy(r->seg, w.seg, w.n * sizeof w.seg[0]);
    free(w.seg);
    atomic_fetch_add(&regs, 1);
    atomic_fetch_add(&regs_on[s], 1);
    *handle = r;
    return 0;
}

static atomic_int report_stale = 1;

void gb_report_stale_deregs(int on)
{
    atomic_store(&report_stale, on);
}

static void dereg(UNUSED void *arg, void *handle)
{
    struct record *r = handle;
    uintptr_t lo = atomic_load(&r->used_lo), hi = atomic_load(&r->used_hi);
    char why[256];
    int same = compare(r, lo, hi, why, sizeof why) == 0;
    atomic_fetch_add(same ? &valid : &stale, 1);
    if (!same && atomic_load(&report_stale)) {
        char what[512], line[1024];
        describe(r, what, sizeof what);
        snprintf(line, sizeof line, "STALE dereg of %#lx+%zu (used %#lx..%#lx): %s; %s",
                 (unsigned long)r->addr, r->len, (unsigned long)lo, (unsigned long)hi, why, what);
        report(line);
    }
    int s = slot(r->device);
    atomic_fetch_add(&deregs, 1);
    atomic_fetch_add(&deregs_on[s], 1);
    atomic_fetch_sub(&bytes_on[s], (long)r->len);
    free(r);
}

static int query(UNUSED void *arg, const void *addr, UNUSED size_t len,
                 struct regcache_mem_info *info)
{
    atomic_fetch_add(&queries, 1);
    CUdeviceptr base;
    size_t size;
    struct facts f;
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)addr;
    if (cuMemGetAddressRange(&base, &size, p) != CUDA_SUCCESS ||
        read_facts((uintptr_t)addr, &f) != CUDA_SUCCESS || f.type == 0)
        return REGCACHE_ERR_NOT_GPU;
    int host = f.type == CU_MEMORYTYPE_HOST;
    info->base = (uintptr_t)base;
    info->size = size;
    info->buffer_id = f.id;
    info->device = host ? REGCACHE_DEVICE_HOST : f.ordinal;
    info->type = host ? REGCACHE_MEM_HOST : REGCACHE_MEM_DEVICE;
    return REGCACHE_OK;
}

static const struct regcache_backend counting_query = { .reg = reg,
                                                        .dereg = dereg,
                                                        .query = query };
static const struct regcache_backend driver_query = { .reg = reg, .dereg = dereg };

static int create(const struct regcache_backend *backend, int validation, int host_memory,
                  size_t max_bytes, regcache_t **cache)
{
    struct regcache_params p;
    regcache_params_init(&p);
    p.backend = backend;
    p.validation = (enum regcache_validation)validation;
    p.host_memory = host_memory;
    p.max_bytes = max_bytes;
    return regcache_create(&p, cache);
}

int gb_create(int validation, int host_memory, regcache_t **cache)
{
    return create(&counting_query, validation, host_memory, 0, cache);
}

int gb_create_driver(int validation, size_t max_bytes, regcache_t **cache)
{
    return create(&driver_query, validation, 0, max_bytes, cache);
}

/* ------------------------------------------------------------------------ */
/* Checked gets                                                              */
/* ------------------------------------------------------------------------ */

/* Retained once per device and kept: tests switch often and never reset. */
static CUresult primary_context(int device, CUcontext *ctx)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static CUcontext retained[SLOTS - 1];
    if (device < 0 || device >= SLOTS - 1)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_SUCCESS;
    if (!retained[device]) {
        CUdevice dev;
        r = cuDeviceGet(&dev, device);
        if (r == CUDA_SUCCESS)
            r = cuDevicePrimaryCtxRetain(&retained[device], dev);
    }
    *ctx = retained[device];
    pthread_mutex_unlock(&lock);
    return r;
}

static CUresult make_current(int current, CUcontext *saved)
{
    if (current == GB_CURRENT_KEEP)
        return CUDA_SUCCESS;
    CUresult r = cuCtxGetCurrent(saved);
    CUcontext ctx = NULL;
    if (r == CUDA_SUCCESS && current != GB_CURRENT_NONE)
        r = primary_context(current, &ctx);
    return r == CUDA_SUCCESS ? cuCtxSetCurrent(ctx) : r;
}

static const char *current_name(int current, char *buf, size_t size)
{
    if (current == GB_CURRENT_KEEP)
        return "the caller's";
    if (current == GB_CURRENT_NONE)
        return "none";
    snprintf(buf, size, "device %d's", current);
    return buf;
}

static void extend_used(struct record *r, uintptr_t lo, uintptr_t hi)
{
    uintptr_t v = atomic_load(&r->used_lo);
    while (lo < v && !atomic_compare_exchange_weak(&r->used_lo, &v, lo))
        ;
    v = atomic_load(&r->used_hi);
    while (hi > v && !atomic_compare_exchange_weak(&r->used_hi, &v, hi))
        ;
}

static void facts_text(uintptr_t addr, char *out, size_t size)
{
    struct facts f;
    CUresult r = read_facts(addr, &f);
    if (r != CUDA_SUCCESS) {
        snprintf(out, size, "%#lx: cuPointerGetAttributes %s", (unsigned long)addr,
                 cuda_error_name(r));
        return;
    }
    int n = snprintf(out, size,
                     "%#lx: %s on device %d, allocation %#llx+%zu, mapping %#llx+%zu, "
                     "buffer id %llu",
                     (unsigned long)addr, kind_name(kind_of(&f)), f.ordinal,
                     (unsigned long long)f.range_start, f.range_size,
                     (unsigned long long)f.mapping_start, f.mapping_size, f.id);
    if (kind_of(&f) == GB_KIND_VMM && n >= 0 && (size_t)n < size)
        snprintf(out + n, size - n, ", gpuDirectRDMACapable %u", rdma_capable(addr));
}

/* A failed get: refused as expected (VMM memory without
 * gpuDirectRDMACapable), or a failure; msg says which and on what memory. */
static int explain(uintptr_t addr, size_t len, int rc, const char *detail, const char *current,
                   char *msg, size_t size)
{
    struct facts f;
    int refused = rc == REGCACHE_ERR_NOT_RDMA_CAPABLE && read_facts(addr, &f) == CUDA_SUCCESS &&
                  kind_of(&f) == GB_KIND_VMM && !rdma_capable(addr);
    char first[256], last[256];
    facts_text(addr, first, sizeof first);
    facts_text(addr + len - 1, last, sizeof last);
    snprintf(msg, size, "%s get %#lx+%zu (current context %s): %s (%d): %s [start %s] [end %s]",
             refused ? "REFUSED (VMM memory without gpuDirectRDMACapable)" : "FAILED",
             (unsigned long)addr, len, current, regcache_strerror(rc), rc, detail, first, last);
    return refused ? GB_REFUSED : GB_FAILED;
}

static int check(struct record *r, uintptr_t addr, size_t len, int device, const char *current,
                 char *msg, size_t size)
{
    char why[256], what[512];
    int outcome = GB_SERVED;
    if (device != GB_ANY_DEVICE && r->device != device) {
        snprintf(why, sizeof why, "the memory is on device %d", device);
        outcome = GB_WRONG_DEVICE;
    } else {
        int c = compare(r, addr, addr + len, why, sizeof why);
        outcome = c == 0 ? GB_SERVED : c == 1 ? GB_STALE : GB_UNCHECKABLE;
    }
    if (outcome == GB_SERVED)
        return outcome;
    static const char *const names[] = { "", "STALE", "WRONG DEVICE", "", "", "UNCHECKABLE" };
    describe(r, what, sizeof what);
    snprintf(msg, size, "%s get %#lx+%zu (current context %s): %s; %s", names[outcome],
             (unsigned long)addr, len, current, why, what);
    return outcome;
}

int gb_get(regcache_t *cache, uintptr_t addr, size_t len, regcache_entry_t **entry)
{
    request.lo = addr;
    request.hi = addr + len;
    int rc = regcache_get(cache, (const void *)addr, len, entry);
    request.lo = request.hi = 0;
    return rc;
}

int gb_checked_get(regcache_t *cache, uintptr_t addr, size_t len, int device, int current,
                   int *status, char *msg, size_t size)
{
    char none[1], cname[32];
    if (size == 0) {
        msg = none;
        size = sizeof none;
    }
    const char *cur = current_name(current, cname, sizeof cname);
    *status = REGCACHE_OK;
    CUcontext saved = NULL;
    CUresult r = make_current(current, &saved);
    if (r != CUDA_SUCCESS) {
        snprintf(msg, size, "UNCHECKABLE: cannot make %s context current: %s", cur,
                 cuda_error_name(r));
        return GB_UNCHECKABLE;
    }
    regcache_entry_t *e = NULL;
    int rc = gb_get(cache, addr, len, &e);
    char detail[256] = "";
    if (rc != REGCACHE_OK) /* read before any other call can replace it */
        snprintf(detail, sizeof detail, "%s", regcache_last_error());
    /* The checks below ask the driver from the caller's context. */
    if (current != GB_CURRENT_KEEP && (r = cuCtxSetCurrent(saved)) != CUDA_SUCCESS) {
        regcache_put(cache, e);
        snprintf(msg, size, "UNCHECKABLE: cannot restore the caller's context: %s",
                 cuda_error_name(r));
        return GB_UNCHECKABLE;
    }
    *status = rc;
    if (rc != REGCACHE_OK)
        return explain(addr, len, rc, detail, cur, msg, size);
    struct record *rec = regcache_entry_handle(e);
    extend_used(rec, addr, addr + len);
    int outcome = check(rec, addr, len, device, cur, msg, size);
    regcache_put(cache, e);
    return outcome;
}

int gb_touch(regcache_t *cache, uintptr_t addr, size_t len)
{
    char msg[1536];
    int rc;
    int outcome =
        gb_checked_get(cache, addr, len, GB_ANY_DEVICE, GB_CURRENT_KEEP, &rc, msg, sizeof msg);
    if (outcome != GB_SERVED) {
        printf("%s\n", msg);
        fflush(stdout);
    }
    return rc != REGCACHE_OK ? rc : outcome;
}

int gb_registered_for(const void *handle, uintptr_t addr, int *device,
                      unsigned long long *buffer_id)
{
    const struct record *r = handle;
    if (addr < r->addr || addr - r->addr >= r->len)
        return -1;
    const struct seg *s = find_seg(r, addr);
    *device = r->device;
    *buffer_id = s ? s->id : 0;
    return 0;
}

int gb_memory_kind(uintptr_t addr, unsigned long long *buffer_id)
{
    struct facts f;
    if (read_facts(addr, &f) != CUDA_SUCCESS)
        f = (struct facts){ 0 };
    *buffer_id = f.id;
    return kind_of(&f);
}

long long gb_stat(const regcache_t *cache, const char *name)
{
    struct regcache_stats s;
    uint64_t v;
    if (regcache_get_stats(cache, &s) != REGCACHE_OK || !stats_field(&s, name, &v))
        return -1;
    return (long long)v;
}

/* ------------------------------------------------------------------------ */
/* The hook tests' scenario                                                  */
/* ------------------------------------------------------------------------ */

#define GB_BUFFERS 4
#define GB_SIZE ((size_t)2 << 20)
#define GB_ROUNDS 3
#define GB_HITS 10

#define CHECK(cond, ...)                        \
    do {                                        \
        if (!(cond)) {                          \
            printf("FAIL [%s] ", memory->name); \
            printf(__VA_ARGS__);                \
            printf("\n");                       \
            failed = 1;                         \
        }                                       \
    } while (0)

/* Without memory nothing after means anything: stop at once. */
#define ALLOC(ptr)                                                 \
    do {                                                           \
        if (memory->alloc(ptr, GB_SIZE, memory->ctx) != 0) {       \
            printf("FAIL [%s] allocation failed\n", memory->name); \
            return 1;                                              \
        }                                                          \
    } while (0)

/* Eager registration: each new allocation is registered in the background
 * before its first get, which hits.  The library asks the driver itself,
 * from its worker threads, as the built-in backend does. */
static int run_eager(const struct gb_memory *memory)
{
    int failed = 0;
    struct regcache_params p;
    regcache_params_init(&p);
    p.backend = &driver_query;
    p.host_memory = memory->host;
    p.eager_min_bytes = GB_SIZE;
    regcache_t *cache = NULL;
    int rc = regcache_create(&p, &cache);
    if (rc != REGCACHE_OK) {
        printf("FAIL [%s] eager: regcache_create: %s\n", memory->name, regcache_strerror(rc));
        return 1;
    }
    CHECK(regcache_validation_mode(cache) == REGCACHE_VALIDATE_HOOKS,
          "eager: validation mode %d, not HOOKS: %s", regcache_validation_mode(cache),
          regcache_validation_reason(cache));
    uintptr_t buf[GB_BUFFERS];
    int made = 0;
    while (made < GB_BUFFERS && memory->alloc(&buf[made], GB_SIZE, memory->ctx) == 0)
        made++;
    CHECK(made == GB_BUFFERS, "eager: allocation %d failed", made);
    CHECK(regcache_prefetch_wait(cache) == REGCACHE_OK, "eager: regcache_prefetch_wait: %s",
          regcache_last_error());
    long long misses = gb_stat(cache, "misses");
    for (int i = 0; i < made; i++)
        CHECK(gb_touch(cache, buf[i], GB_SIZE) == REGCACHE_OK, "eager: get failed");
    long long missed = gb_stat(cache, "misses") - misses;
    long long prefetches = gb_stat(cache, "prefetches");
    long long failures = gb_stat(cache, "prefetch_failures");
    CHECK(missed == 0, "eager: %lld of %d first gets missed", missed, made);
    CHECK(prefetches == made, "eager: %lld allocations queued of %d", prefetches, made);
    CHECK(failures == 0, "eager: %lld background registrations failed", failures);
    for (int i = 0; i < made; i++)
        CHECK(memory->free(buf[i], GB_SIZE, memory->ctx) == 0, "eager: free failed");
    printf("[%s] eager: allocations=%d queued=%lld failed=%lld first-get misses=%lld %s\n",
           memory->name, made, prefetches, failures, missed, failed ? "FAIL" : "ok");
    regcache_destroy(cache);
    return failed;
}

int gb_run(const struct gb_memory *memory)
{
    int failed = 0;
    regcache_t *cache = NULL;
    int rc = gb_create(REGCACHE_VALIDATE_AUTO, memory->host, &cache);
    if (rc != REGCACHE_OK) {
        printf("FAIL [%s] regcache_create: %s\n", memory->name, regcache_strerror(rc));
        return 1;
    }
    CHECK(regcache_validation_mode(cache) == REGCACHE_VALIDATE_HOOKS,
          "validation mode %d, not HOOKS: %s", regcache_validation_mode(cache),
          regcache_validation_reason(cache));
    long deregs0 = gb_deregs(), valid0 = gb_deregs_valid(), queries_on_hits = 0;

    /* Kept across rounds: a free of another buffer must not take it. */
    uintptr_t bystander;
    ALLOC(&bystander);
    CHECK(gb_touch(cache, bystander, GB_SIZE) == REGCACHE_OK, "bystander get failed");

    uintptr_t first[GB_BUFFERS] = { 0 };
    long reused = 0;
    /* Every round runs even after a failure: without the hook, the later
     * rounds show what it prevents (stale entries, tag checks on hits). */
    for (int round = 0; round < GB_ROUNDS; round++) {
        uintptr_t buf[GB_BUFFERS];
        for (int i = 0; i < GB_BUFFERS; i++) {
            ALLOC(&buf[i]);
            if (round == 0)
                first[i] = buf[i];
            else
                for (int j = 0; j < GB_BUFFERS; j++)
                    reused += buf[i] == first[j];
            long regs_before = gb_regs();
            CHECK(gb_touch(cache, buf[i], GB_SIZE) == REGCACHE_OK, "get (miss) failed");
            /* A reused address must miss: its old entry left with the free. */
            CHECK(gb_regs() == regs_before + 1, "round %d buffer %d: no registration", round, i);
        }
        long q = gb_queries();
        for (int h = 0; h < GB_HITS; h++)
            for (int i = 0; i < GB_BUFFERS; i++)
                CHECK(gb_touch(cache, buf[i], GB_SIZE) == REGCACHE_OK, "get (hit) failed");
        queries_on_hits += gb_queries() - q;
        long before = gb_deregs();
        for (int i = 0; i < GB_BUFFERS; i++)
            CHECK(memory->free(buf[i], GB_SIZE, memory->ctx) == 0, "free failed");
        CHECK(gb_deregs() == before + GB_BUFFERS,
              "round %d: %ld deregs for %d frees (bystander taken too, or a free unseen)", round,
              gb_deregs() - before, GB_BUFFERS);
    }
    long before = gb_deregs();
    CHECK(memory->free(bystander, GB_SIZE, memory->ctx) == 0, "free failed");
    CHECK(gb_deregs() == before + 1, "bystander free: %ld deregs", gb_deregs() - before);

    struct regcache_stats s;
    regcache_get_stats(cache, &s);
    long deregs = gb_deregs() - deregs0, valid_now = gb_deregs_valid() - valid0;
    CHECK(deregs == GB_ROUNDS * GB_BUFFERS + 1, "deregs %ld", deregs);
    CHECK(valid_now == deregs, "%ld of %ld deregs saw a stale buffer id", deregs - valid_now,
          deregs);
    CHECK(queries_on_hits == 0, "%ld queries during hits", queries_on_hits);
    CHECK(s.hits == (uint64_t)GB_ROUNDS * GB_BUFFERS * GB_HITS, "hits %llu",
          (unsigned long long)s.hits);
    CHECK(s.invalidations_notify == (uint64_t)deregs, "invalidations_notify %llu",
          (unsigned long long)s.invalidations_notify);
    printf("[%s] mode=%s deregs=%ld valid_at_dereg=%ld stale=%ld hits=%llu "
           "queries_on_hits=%ld invalidations_notify=%llu tag=%llu reused_addresses=%ld %s\n",
           memory->name,
           regcache_validation_mode(cache) == REGCACHE_VALIDATE_HOOKS ? "HOOKS" : "TAG_CHECK",
           deregs, valid_now, deregs - valid_now, (unsigned long long)s.hits, queries_on_hits,
           (unsigned long long)s.invalidations_notify, (unsigned long long)s.invalidations_tag,
           reused, failed ? "FAIL" : "ok");
    regcache_destroy(cache);
    return memory->eager ? failed | run_eager(memory) : failed;
}

int gb_expect_deregs(const char *what, long deregs_before, long live)
{
    long deregs = gb_deregs() - deregs_before;
    int ok = deregs == live && gb_deregs_stale() == 0;
    printf("[%s] deregs=%ld of %ld live entries, stale total=%ld %s\n", what, deregs, live,
           gb_deregs_stale(), ok ? "ok" : "FAIL");
    return !ok;
}
