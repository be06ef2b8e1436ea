/* The built-in verbs backend registering host memory through the cache on
 * a real provider: the MR a miss creates, the MR a hit hands back, the
 * access flags the provider enforces, concurrent misses, and flush/destroy
 * leaving no MR behind (counted by the provider, not by the library). */
#include "vm_env.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static struct vm_dev dev;
static size_t page;

static uintptr_t page_down(uintptr_t a)
{
    return a & ~(uintptr_t)(page - 1);
}

static uintptr_t page_up(uintptr_t a)
{
    return page_down(a + page - 1);
}

/* The entry's MR covers the request rounded out to host pages (the
 * alignment these caches ask for), exactly,
 * and belongs to the cache's PD. */
static void check_mr_covers(const regcache_entry_t *e, const void *addr, size_t len)
{
    struct ibv_mr *mr = regcache_entry_mr(e);
    uintptr_t start;
    size_t rlen;

    assert_non_null(mr);
    assert_ptr_equal(regcache_entry_handle(e), mr);
    assert_ptr_equal(mr->pd, dev.pd);
    assert_int_not_equal(mr->lkey, 0);
    assert_int_not_equal(mr->rkey, 0);
    regcache_entry_range(e, &start, &rlen);
    assert_int_equal(start, page_down((uintptr_t)addr));
    assert_int_equal(start + rlen, page_up((uintptr_t)addr + len));
    assert_int_equal((uintptr_t)mr->addr, start);
    assert_int_equal(mr->length, rlen);
}

static void miss_registers_hit_returns_same_mr(void **state)
{
    (void)state;
    regcache_t *c = vm_cache(dev.pd, VM_ACCESS_ALL, page);
    size_t len = 16 * page;
    char *buf = vm_pages(len);
    int before = vm_provider_mrs();
    regcache_entry_t *e, *hit, *other;

    assert_int_equal(regcache_get(c, buf + 100, 2 * page, &e), REGCACHE_OK);
    check_mr_covers(e, buf + 100, 2 * page);
    assert_int_equal(vm_provider_mrs(), before + 1);
    struct ibv_mr *mr = regcache_entry_mr(e);
    uint32_t lkey = mr->lkey, rkey = mr->rkey;
    regcache_put(c, e);

    /* Any range inside the registered pages is a hit on the same MR (the
     * entry pointers are hold tokens: a hit's differs from the miss's). */
    assert_int_equal(regcache_get(c, buf + page, 100, &hit), REGCACHE_OK);
    assert_int_equal(vm_stats(c).hits, 1);
    assert_ptr_equal(regcache_entry_mr(hit), mr);
    assert_int_equal(regcache_entry_mr(hit)->lkey, lkey);
    assert_int_equal(regcache_entry_mr(hit)->rkey, rkey);

    /* A range outside it is a second registration. */
    assert_int_equal(regcache_get(c, buf + 8 * page, page, &other), REGCACHE_OK);
    assert_ptr_not_equal(regcache_entry_mr(other), mr);
    check_mr_covers(other, buf + 8 * page, page);
    assert_int_equal(vm_provider_mrs(), before + 2);

    struct regcache_stats s = vm_stats(c);
    assert_int_equal(s.hits, 1);
    assert_int_equal(s.misses, 2);
    assert_int_equal(s.registrations, 2);
    assert_int_equal(s.entries, 2);

    regcache_put(c, hit);
    regcache_put(c, other);
    assert_int_equal(regcache_flush(c), REGCACHE_OK);
    assert_int_equal(vm_provider_mrs(), before);
    s = vm_stats(c);
    assert_int_equal(s.entries, 0);
    assert_int_equal(s.bytes, 0);
    assert_int_equal(s.deregistrations, 2);
    regcache_destroy(c);
    vm_pages_free(buf, len);
}

static void malloc_memory_registers(void **state)
{
    (void)state;
    regcache_t *c = vm_cache(dev.pd, VM_ACCESS_ALL, page);
    size_t len = 100000;
    char *buf = malloc(len);
    int before = vm_provider_mrs();
    regcache_entry_t *e;

    assert_non_null(buf);
    assert_int_equal(regcache_get(c, buf, len, &e), REGCACHE_OK);
    check_mr_covers(e, buf, len);
    assert_int_equal(vm_provider_mrs(), before + 1);
    regcache_put(c, e);
    regcache_destroy(c);
    assert_int_equal(vm_provider_mrs(), before);
    free(buf);
}

/* flush leaves held entries registered; destroy takes them too. */
static void flush_keeps_held_destroy_takes_all(void **state)
{
    (void)state;
    regcache_t *c = vm_cache(dev.pd, VM_ACCESS_ALL, page);
    size_t len = 12 * page;
    char *buf = vm_pages(len);
    int before = vm_provider_mrs();
    regcache_entry_t *e[3];

    for (int i = 0; i < 3; i++)
        assert_int_equal(regcache_get(c, buf + 4 * i * page, page, &e[i]), REGCACHE_OK);
    assert_int_equal(vm_provider_mrs(), before + 3);
    regcache_put(c, e[0]);
    assert_int_equal(regcache_flush(c), REGCACHE_OK);
    assert_int_equal(vm_provider_mrs(), before + 2);
    assert_int_equal(vm_stats(c).entries, 2);

    regcache_destroy(c); /* e[1] and e[2] still held */
    assert_int_equal(vm_provider_mrs(), before);
    vm_pages_free(buf, len);
}

#define THREADS 4
#define RANGES 16
#define ROUNDS 300

struct worker {
    regcache_t *cache;
    char *buf;
    unsigned seed;
    int bad; /* cmocka's asserts are not thread safe: count instead */
};

static void *get_put_random_ranges(void *arg)
{
    struct worker *w = arg;
    for (int i = 0; i < ROUNDS; i++) {
        char *p = w->buf + (size_t)(rand_r(&w->seed) % RANGES) * 2 * page;
        regcache_entry_t *e;
        if (regcache_get(w->cache, p, page, &e) != REGCACHE_OK) {
            w->bad++;
            continue;
        }
        struct ibv_mr *mr = regcache_entry_mr(e);
        w->bad += !mr || (char *)mr->addr > p || (char *)mr->addr + mr->length < p + page;
        regcache_put(w->cache, e);
    }
    return NULL;
}

/* Threads racing to miss on the same ranges, with a real (slow) ibv_reg_mr
 * in the way: every range is registered once, however many threads missed
 * on it together. */
static void concurrent_misses_register_once(void **state)
{
    (void)state;
    regcache_t *c = vm_cache(dev.pd, VM_ACCESS_ALL, page);
    size_t len = 2 * RANGES * page; /* a gap after each range */
    char *buf = vm_pages(len);
    int before = vm_provider_mrs();
    pthread_t t[THREADS];
    struct worker w[THREADS];

    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){ .cache = c, .buf = buf, .seed = (unsigned)i };
        assert_int_equal(pthread_create(&t[i], NULL, get_put_random_ranges, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
        assert_int_equal(w[i].bad, 0);
    }
    struct regcache_stats s = vm_stats(c);
    assert_int_equal(s.hits + s.misses, THREADS * ROUNDS);
    assert_int_equal(s.registrations, RANGES);
    assert_int_equal(s.entries, RANGES);
    assert_int_equal(vm_provider_mrs(), before + RANGES);
    regcache_destroy(c);
    assert_int_equal(vm_provider_mrs(), before);
    vm_pages_free(buf, len);
}

/* The access flags reach the provider: a target registered without
 * REMOTE_WRITE can be read remotely but not written. */
static void remote_write_needs_remote_write_access(void **state)
{
    (void)state;
    regcache_t *rw = vm_cache(dev.pd, VM_ACCESS_ALL, page);
    regcache_t *ro = vm_cache(dev.pd, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ, page);
    struct loopback lb;
    size_t len = 4 * page;
    char *local = vm_pages(len);
    char *writable = vm_pages(len), *readonly = vm_pages(len);
    regcache_entry_t *le, *oe, *ce;

    assert_int_equal(loopback_create(dev.pd, &lb), 0);
    assert_int_equal(regcache_get(rw, local, len, &le), REGCACHE_OK);
    assert_int_equal(regcache_get(rw, writable, len, &oe), REGCACHE_OK);
    assert_int_equal(regcache_get(ro, readonly, len, &ce), REGCACHE_OK);
    uint32_t lkey = regcache_entry_mr(le)->lkey;

    memset(readonly, 0x11, len);
    assert_int_equal(
        vm_rdma(&lb, IBV_WR_RDMA_READ, local, lkey, readonly, regcache_entry_mr(ce)->rkey, len),
        IBV_WC_SUCCESS);
    assert_memory_equal(local, readonly, len);

    memset(local, 0x5a, len);
    assert_int_equal(
        vm_rdma(&lb, IBV_WR_RDMA_WRITE, local, lkey, writable, regcache_entry_mr(oe)->rkey, len),
        IBV_WC_SUCCESS);
    assert_memory_equal(writable, local, len);

    /* Last on this pair: the refusal moves the QP to the error state. */
    assert_int_equal(
        vm_rdma(&lb, IBV_WR_RDMA_WRITE, local, lkey, readonly, regcache_entry_mr(ce)->rkey, len),
        IBV_WC_REM_ACCESS_ERR);
    for (size_t i = 0; i < len; i++)
        assert_int_equal(readonly[i], 0x11);

    loopback_destroy(&lb);
    regcache_put(rw, le);
    regcache_put(rw, oe);
    regcache_put(ro, ce);
    regcache_destroy(rw);
    regcache_destroy(ro);
    vm_pages_free(local, len);
    vm_pages_free(writable, len);
    vm_pages_free(readonly, len);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(miss_registers_hit_returns_same_mr),
        cmocka_unit_test(malloc_memory_registers),
        cmocka_unit_test(flush_keeps_held_destroy_takes_all),
        cmocka_unit_test(remote_write_needs_remote_write_access),
        cmocka_unit_test(concurrent_misses_register_once),
    };
    page = (size_t)sysconf(_SC_PAGESIZE);
    vm_dev_open(&dev);
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    vm_dev_close(&dev);
    return failed;
}
