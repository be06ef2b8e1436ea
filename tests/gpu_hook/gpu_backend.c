/* The counting backend over the real driver (see gpu_backend.h). */
#include "gpu_backend.h"

#include <cuda.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

struct record {
    uintptr_t addr;
    size_t len;
    unsigned long long id;
};

static atomic_long regs, deregs, valid, stale, queries;

static int buffer_id(uintptr_t addr, unsigned long long *id)
{
    return cuPointerGetAttribute(id, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)addr) ==
                   CUDA_SUCCESS
               ? 0
               : -1;
}

static int reg(void *arg, void *addr, size_t len, int device, void **handle)
{
    (void)arg, (void)device;
    struct record *r = malloc(sizeof *r);
    if (r == NULL)
        return 12; /* ENOMEM */
    r->addr = (uintptr_t)addr;
    r->len = len;
    if (buffer_id(r->addr, &r->id) != 0) {
        free(r);
        return 14; /* EFAULT */
    }
    atomic_fetch_add(&regs, 1);
    *handle = r;
    return 0;
}

static void dereg(void *arg, void *handle)
{
    (void)arg;
    struct record *r = handle;
    unsigned long long now = 0;
    if (buffer_id(r->addr, &now) == 0 && now == r->id) {
        atomic_fetch_add(&valid, 1);
    } else {
        atomic_fetch_add(&stale, 1);
        printf("STALE dereg: %#lx+%zu had buffer id %llu, now %llu\n",
               (unsigned long)r->addr, r->len, r->id, now);
    }
    atomic_fetch_add(&deregs, 1);
    free(r);
}

static int query(void *arg, const void *addr, size_t len, struct regcache_mem_info *info)
{
    (void)arg, (void)len;
    atomic_fetch_add(&queries, 1);
    CUdeviceptr base;
    size_t size;
    unsigned long long id;
    unsigned int type;
    int ordinal;
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)addr;
    if (cuMemGetAddressRange(&base, &size, p) != CUDA_SUCCESS ||
        buffer_id((uintptr_t)addr, &id) != 0 ||
        cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) != CUDA_SUCCESS ||
        cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p) != CUDA_SUCCESS)
        return REGCACHE_ERR_NOT_GPU;
    int host = type == CU_MEMORYTYPE_HOST;
    info->base = (uintptr_t)base;
    info->size = size;
    info->buffer_id = id;
    info->device = host ? REGCACHE_DEVICE_HOST : ordinal;
    info->type = host ? REGCACHE_MEM_HOST : REGCACHE_MEM_DEVICE;
    return REGCACHE_OK;
}

static const struct regcache_backend backend = { reg, dereg, NULL, query };

int gb_create(int validation, int host_memory, regcache_t **cache)
{
    struct regcache_params p;
    regcache_params_init(&p);
    p.backend = &backend;
    p.validation = (enum regcache_validation)validation;
    p.host_memory = host_memory;
    return regcache_create(&p, cache);
}

int gb_cache_first(void)
{
    static regcache_t *first;
    if (getenv("GB_CACHE_FIRST") == NULL)
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

int gb_touch(regcache_t *cache, uintptr_t addr, size_t len)
{
    regcache_entry_t *e;
    int rc = regcache_get(cache, (const void *)addr, len, &e);
    if (rc == REGCACHE_OK)
        regcache_put(cache, e);
    return rc;
}

long gb_regs(void) { return atomic_load(&regs); }
long gb_deregs(void) { return atomic_load(&deregs); }
long gb_deregs_valid(void) { return atomic_load(&valid); }
long gb_deregs_stale(void) { return atomic_load(&stale); }
long gb_queries(void) { return atomic_load(&queries); }

#define GB_BUFFERS 4
#define GB_SIZE ((size_t)2 << 20)
#define GB_ROUNDS 3
#define GB_HITS 10

#define CHECK(cond, ...)                                  \
    do {                                                  \
        if (!(cond)) {                                    \
            printf("FAIL [%s] ", memory->name);           \
            printf(__VA_ARGS__);                          \
            printf("\n");                                 \
            failed = 1;                                   \
        }                                                 \
    } while (0)

/* Without memory nothing after means anything: stop at once. */
#define ALLOC(ptr)                                                \
    do {                                                          \
        if (memory->alloc(ptr, GB_SIZE, memory->ctx) != 0) {      \
            printf("FAIL [%s] allocation failed\n", memory->name); \
            return 1;                                             \
        }                                                         \
    } while (0)

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
              "round %d: %ld deregs for %d frees (bystander taken too, or a free unseen)",
              round, gb_deregs() - before, GB_BUFFERS);
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
    return failed;
}

int gb_expect_deregs(const char *what, long deregs_before, long live)
{
    long deregs = gb_deregs() - deregs_before;
    int ok = deregs == live && gb_deregs_stale() == 0;
    printf("[%s] deregs=%ld of %ld live entries, stale total=%ld %s\n", what, deregs, live,
           gb_deregs_stale(), ok ? "ok" : "FAIL");
    return !ok;
}
