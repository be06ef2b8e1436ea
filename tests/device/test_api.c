/* The device key tables' API given bad input, and failures on the way: a
 * clear status and message each time, nothing left allocated. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "fake_gpu.h"
#include "keys_fixture.h"

static void attach_fails(struct kx *k, int device, const struct regcache_device_keys_params *p,
                         int status, const char *says)
{
    struct regcache_device_table t;
    assert_int_equal(regcache_device_keys_attach(k->fx.c, device, p, &t), status);
    fx_assert_error_says(says, NULL);
}

static void without_device_keys(void **state)
{
    struct kx *k = *state;
    k->fx.p.device_keys = 0;
    fx_create(&k->fx);
    attach_fails(k, 0, &k->kp, REGCACHE_ERR_INVALID, "without params.device_keys");
    struct regcache_device_table t;
    struct regcache_device_keys_stats s;
    assert_int_equal(regcache_device_keys_table(k->fx.c, 0, &t), REGCACHE_ERR_INVALID);
    assert_int_equal(regcache_device_keys_stats(k->fx.c, 0, &s), REGCACHE_ERR_INVALID);
    assert_int_equal(regcache_device_keys_sync(k->fx.c, 0), REGCACHE_ERR_INVALID);
    assert_int_equal(regcache_device_keys_detach(k->fx.c, 0), REGCACHE_ERR_INVALID);
    k->fx.p.device_keys = 2;
    regcache_t *c = NULL;
    assert_int_equal(regcache_create(&k->fx.p, &c), REGCACHE_ERR_INVALID);
    fx_assert_error_says("params.device_keys 2", NULL);
}

static void bad_arguments(void **state)
{
    struct kx *k = *state;
    fx_create(&k->fx);
    struct regcache_device_table t;
    struct regcache_device_keys_params p = k->kp;
    assert_int_equal(regcache_device_keys_params_init(NULL), REGCACHE_ERR_INVALID);
    assert_int_equal(regcache_device_keys_attach(NULL, 0, &p, &t), REGCACHE_ERR_INVALID);
    attach_fails(k, 0, &p, REGCACHE_OK, "");
    assert_int_equal(regcache_device_keys_detach(k->fx.c, 0), REGCACHE_OK);
    assert_int_equal(regcache_device_keys_attach(k->fx.c, 0, &p, NULL), REGCACHE_ERR_INVALID);
    attach_fails(k, -1, &p, REGCACHE_ERR_INVALID, "device -1 is outside");
    attach_fails(k, 64, &p, REGCACHE_ERR_INVALID, "device 64 is outside");
    attach_fails(k, 5, &p, REGCACHE_ERR_INVALID, "no CUDA device 5");
    p.size = 8;
    attach_fails(k, 0, &p, REGCACHE_ERR_INVALID, "params.size 8");
    static const struct {
        size_t field;
        size_t value;
        const char *says;
    } bad[] = {
        { offsetof(struct regcache_device_keys_params, page_slots), 3000, "page_slots" },
        { offsetof(struct regcache_device_keys_params, page_slots), 512, "page_slots" },
        { offsetof(struct regcache_device_keys_params, records), 1, "records" },
        { offsetof(struct regcache_device_keys_params, hold_slots), 0, "hold_slots" },
        { offsetof(struct regcache_device_keys_params, ring_slots), 6, "ring_slots" },
        { offsetof(struct regcache_device_keys_params, poll_ns), 0, "poll_ns" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p = k->kp;
        if (bad[i].field == offsetof(struct regcache_device_keys_params, poll_ns))
            p.poll_ns = 0;
        else
            *(size_t *)((char *)&p + bad[i].field) = bad[i].value;
        attach_fails(k, 0, &p, REGCACHE_ERR_INVALID, bad[i].says);
    }
    p = k->kp;
    p.max_probe = 65;
    attach_fails(k, 0, &p, REGCACHE_ERR_INVALID, "max_probe");
    /* A custom backend's keys: the cache cannot know them. */
    p = k->kp;
    p.lkey = NULL;
    attach_fails(k, 0, &p, REGCACHE_ERR_INVALID, "params.lkey");
    assert_int_equal(regcache_device_keys_attach(k->fx.c, 0, &k->kp, &t), REGCACHE_OK);
    attach_fails(k, 0, &k->kp, REGCACHE_ERR_INVALID, "has a table already");
    assert_int_equal(regcache_device_keys_table(k->fx.c, 0, NULL), REGCACHE_ERR_INVALID);
    assert_int_equal(regcache_device_keys_stats(k->fx.c, 0, NULL), REGCACHE_ERR_INVALID);
    assert_int_equal(
        regcache_device_keys_stats(k->fx.c, 1, &(struct regcache_device_keys_stats){ 0 }),
        REGCACHE_ERR_INVALID);
}

/* A TAG_CHECK cache that hears of no free cannot keep a table (without the
 * interception, which a machine with libcuda could install). */
static void frees_unseen(void **state)
{
    struct kx *k = *state;
    k->fx.p.validation = REGCACHE_VALIDATE_TAG_CHECK;
    setenv("REGCACHE_HOOKS", "off", 1);
    fx_create(&k->fx);
    unsetenv("REGCACHE_HOOKS");
    attach_fails(k, 0, &k->kp, REGCACHE_ERR_UNSUPPORTED, "needs every CUDA free seen");
    fx_assert_error_says("REGCACHE_HOOKS=off", NULL);
}

/* Out of GPU memory, a failed copy: nothing stays allocated, and the cache
 * can attach again. */
static void failures_leave_nothing(void **state)
{
    struct kx *k = *state;
    fx_device_allocs(&k->fx, 1);
    fx_create(&k->fx);
    fx_use(&k->fx, FX_ALLOC(0), 64);
    atomic_store(&fake_gpu.fail_alloc, 1);
    attach_fails(k, 0, &k->kp, REGCACHE_ERR_NO_SPACE, "no room");
    atomic_store(&fake_gpu.fail_copy, 1);
    attach_fails(k, 0, &k->kp, REGCACHE_ERR_CUDA, "cuMemcpyHtoDAsync");
    assert_int_equal(atomic_load(&fake_gpu.allocs), 0);
    assert_int_equal(atomic_load(&fake_gpu.host_allocs), 0);
    assert_int_equal(atomic_load(&fake_gpu.streams), 0);
    assert_int_equal(atomic_load(&fake_gpu.retained), 0);
    assert_int_equal(regcache_device_keys_attach(k->fx.c, 0, &k->kp, &k->t), REGCACHE_OK);
    kx_assert_agrees(k, FX_ALLOC(0), 64, 0);
}

/* What the first registration on the device needs is read by attach, in
 * the caller's thread, not by the table's thread at a kernel's first miss:
 * the device is known to the cache (its budget read) before any get. */
static void attach_readies_device(void **state)
{
    struct kx *k = *state;
    kx_attach(k);
    struct regcache_stats s;
    assert_int_equal(regcache_get_device_stats(k->fx.c, 0, &s), REGCACHE_OK);
    assert_int_equal(s.misses, 0);
}

/* A fork child has no tables. */
static void fork_child(void **state)
{
    struct kx *k = *state;
    kx_attach(k);
    pid_t pid = fork();
    if (pid == 0) {
        struct regcache_device_table t;
        int ok = regcache_device_keys_table(k->fx.c, 0, &t) == REGCACHE_ERR_FORKED &&
                 regcache_device_keys_sync(k->fx.c, 0) == REGCACHE_ERR_FORKED &&
                 regcache_device_keys_detach(k->fx.c, 0) == REGCACHE_ERR_FORKED &&
                 regcache_device_keys_attach(k->fx.c, 1, &k->kp, &t) == REGCACHE_ERR_FORKED;
        regcache_destroy(k->fx.c);
        _exit(ok ? 0 : 1);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

KX_MAIN(without_device_keys, bad_arguments, frees_unseen, failures_leave_nothing,
        attach_readies_device, fork_child)
