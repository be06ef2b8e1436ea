/* A custom backend's reg_access: told the IBV_ACCESS_* set it registers and
 * the argument of the regcache_get_with_arg() whose miss registers (NULL
 * for other gets and background registrations), and only that get's, not
 * that of a get a callback makes meanwhile.  Older backends keep working:
 * reg alone, and a struct of the 0.3 layout (params.size of 0.3) is read
 * not a byte past its end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>
#include <infiniband/verbs.h>

#include "cache_fixture.h"

#define A FX_ALLOC(0)
#define B FX_ALLOC(1)
#define RR IBV_ACCESS_REMOTE_READ

static int x_arg, y_arg;

static regcache_entry_t *get_with_arg(struct fx *f, unsigned rail, uintptr_t addr, int access,
                                      unsigned flags, void *arg, int expect)
{
    regcache_entry_t *e = NULL;
    assert_int_equal(
        regcache_get_with_arg(f->c, rail, (const void *)addr, 4096, access, flags, arg, &e),
        expect);
    return e;
}

/* The miss's registration is told the access and the argument; a hit
 * registers nothing; a rail the entry lacks is registered with the
 * argument of the get that asks for it. */
static void reg_access_told_access_and_argument(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 2);
    fake_tell_access(&f->fb);
    f->p.rails = 2;
    fx_create(f);
    regcache_entry_t *e = get_with_arg(f, 0, A, RR, 0, &x_arg, REGCACHE_OK);
    assert_int_equal(fx_handle(e)->access, RR);
    assert_ptr_equal(fx_handle(e)->get_arg, &x_arg);
    regcache_put(f->c, e);
    e = get_with_arg(f, 0, A, RR, 0, &y_arg, REGCACHE_OK);
    assert_ptr_equal(fx_handle(e)->get_arg, &x_arg); /* a hit */
    regcache_put(f->c, e);
    e = get_with_arg(f, 1, A, RR, 0, &y_arg, REGCACHE_OK);
    assert_int_equal(fx_handle(e)->rail, 1);
    assert_ptr_equal(fx_handle(e)->get_arg, &y_arg);
    regcache_put(f->c, e);
    /* A plain get passes nothing, with the cache's access. */
    e = fx_get(f, B, 4096);
    assert_null(fx_handle(e)->get_arg);
    assert_int_equal(fx_handle(e)->access, f->p.access);
    regcache_put(f->c, e);
    assert_int_equal(atomic_load(&f->fb.regs), 3);
}

/* A non-blocking get's range is registered in the background: no
 * argument reaches that registration, nor any later miss. */
static void background_registrations_pass_null(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 1);
    fake_tell_access(&f->fb);
    fx_create(f);
    get_with_arg(f, 0, A, RR, REGCACHE_GET_NONBLOCK, &x_arg, REGCACHE_ERR_AGAIN);
    assert_int_equal(regcache_prefetch_wait(f->c), REGCACHE_OK);
    regcache_entry_t *e = get_with_arg(f, 0, A, RR, REGCACHE_GET_NONBLOCK, &x_arg, REGCACHE_OK);
    assert_null(fx_handle(e)->get_arg);
    assert_int_equal(fx_handle(e)->access, RR);
    regcache_put(f->c, e);
    /* A lookup passes nothing either: it registers nothing. */
    get_with_arg(f, 0, B, RR, REGCACHE_GET_LOOKUP, &x_arg, REGCACHE_ERR_NOT_CACHED);
    assert_int_equal(atomic_load(&f->fb.regs), 1);
}

static struct fx *nested_fx;
static void *nested_arg_seen = (void *)1;

/* A deregistration that the get with the argument causes, before its own
 * miss, makes a get of its own: B's registration. */
static void get_b_in_dereg(void *arg, const struct fake_handle *h)
{
    (void)arg;
    if (h->start != A)
        return;
    regcache_entry_t *e;
    assert_int_equal(regcache_get(nested_fx->c, (const void *)B, 4096, &e), REGCACHE_OK);
    nested_arg_seen = fx_handle(e)->get_arg;
    regcache_put(nested_fx->c, e);
}

/* TAG_CHECK: A's entry is stale, so the get with the argument first drops
 * it (its dereg gets B), then registers A: B's registration gets no
 * argument, A's gets it. */
static void argument_not_taken_by_a_callbacks_get(void **state)
{
    struct fx *f = *state;
    fx_device_allocs(f, 2);
    fake_tell_access(&f->fb);
    f->p.validation = REGCACHE_VALIDATE_TAG_CHECK;
    f->fb.during_dereg = get_b_in_dereg;
    nested_fx = f;
    fx_create(f);
    fx_use(f, A, 4096);
    fake_realloc(&f->fb, A);
    regcache_entry_t *e = get_with_arg(f, 0, A, f->p.access, 0, &x_arg, REGCACHE_OK);
    assert_null(nested_arg_seen);
    assert_ptr_equal(fx_handle(e)->get_arg, &x_arg);
    regcache_put(f->c, e);
    f->fb.during_dereg = NULL;
}

static void *old_reg_addr;

static int old_reg(void *arg, void *addr, size_t len, int device, int rail, void **handle)
{
    (void)arg, (void)len, (void)device, (void)rail;
    old_reg_addr = addr;
    *handle = addr;
    return 0;
}

static void old_dereg(void *arg, void *handle)
{
    (void)arg, (void)handle;
}

/* A program built against 0.3: its params end before host_merge, its
 * backend before reg_access.  The backend struct ends right at a
 * PROT_NONE page, so a read past it would fault. */
static void backend_of_the_0_3_layout(void **state)
{
    (void)state;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char *p = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(p != MAP_FAILED);
    assert_int_equal(mprotect(p + page, page, PROT_NONE), 0);
    const size_t old_size = offsetof(struct regcache_backend, reg_access);
    struct regcache_backend *b = (struct regcache_backend *)(p + page - old_size);
    memset(b, 0, old_size);
    b->reg = old_reg;
    b->dereg = old_dereg;
    struct regcache_params params;
    regcache_params_init(&params);
    params.size = offsetof(struct regcache_params, host_merge);
    params.backend = b;
    params.host_memory = 1;
    static char buf[65536] __attribute__((aligned(65536)));
    regcache_t *c;
    assert_int_equal(regcache_create(&params, &c), REGCACHE_OK);
    regcache_entry_t *e;
    assert_int_equal(regcache_get(c, buf, 4096, &e), REGCACHE_OK);
    assert_ptr_equal(old_reg_addr, buf);
    regcache_put(c, e);
    regcache_destroy(c);
    /* Without reg, such a backend has nothing to register with. */
    b->reg = NULL;
    assert_int_equal(regcache_create(&params, &c), REGCACHE_ERR_INVALID);
    fx_assert_error_says("reg", NULL);
    assert_int_equal(munmap(p, 2 * page), 0);
}

/* A 0.4 backend needs dereg, and reg or reg_access. */
static void reg_or_reg_access_needed(void **state)
{
    struct fx *f = *state;
    f->fb.ops.reg = NULL;
    assert_int_equal(regcache_create(&f->p, &f->c), REGCACHE_ERR_INVALID);
    fx_assert_error_says("reg_access", NULL);
    fake_tell_access(&f->fb);
    f->fb.ops.dereg = NULL;
    assert_int_equal(regcache_create(&f->p, &f->c), REGCACHE_ERR_INVALID);
    f->c = NULL;
}

FX_MAIN(reg_access_told_access_and_argument, background_registrations_pass_null,
        argument_not_taken_by_a_callbacks_get, backend_of_the_0_3_layout, reg_or_reg_access_needed)
