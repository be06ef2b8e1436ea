/* Every public function given bad input returns the documented error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fake_backend.h"

#define ADDR ((uintptr_t)0x7f0000000000ull)

static struct fake_backend fb;

static regcache_t *make_cache(void)
{
    struct regcache_params p;
    regcache_t *c;
    fake_init(&fb);
    fake_alloc(&fb, ADDR, 1 << 20, 0, REGCACHE_MEM_DEVICE);
    fake_params(&fb, &p);
    assert_int_equal(regcache_create(&p, &c), REGCACHE_OK);
    return c;
}

static void params_init_null(void **state)
{
    (void)state;
    assert_int_equal(regcache_params_init(NULL), REGCACHE_ERR_INVALID);
    struct regcache_params p;
    assert_int_equal(regcache_params_init(&p), REGCACHE_OK);
    assert_int_equal(p.size, sizeof(p));
    assert_int_equal(p.alignment, 65536);
    assert_int_equal(p.whole_allocation, 1);
    assert_int_equal(p.method, REGCACHE_METHOD_AUTO);
    assert_int_equal(p.validation, REGCACHE_VALIDATE_AUTO);
    assert_null(p.backend);
}

static void expect_create_invalid(struct regcache_params *p)
{
    regcache_t *c = (regcache_t *)(uintptr_t)1;
    assert_int_equal(regcache_create(p, &c), REGCACHE_ERR_INVALID);
    assert_null(c);
    assert_string_not_equal(regcache_last_error(), "");
}

static void create_bad_params(void **state)
{
    (void)state;
    struct regcache_params p;
    struct regcache_backend no_dereg = { 0 };
    regcache_t *c;
    fake_init(&fb);

    assert_int_equal(regcache_create(NULL, &c), REGCACHE_ERR_INVALID);
    fake_params(&fb, &p);
    assert_int_equal(regcache_create(&p, NULL), REGCACHE_ERR_INVALID);

    fake_params(&fb, &p);
    p.size = sizeof(p) + 8; /* a newer header than this library */
    expect_create_invalid(&p);
    fake_params(&fb, &p);
    p.size = 0;
    expect_create_invalid(&p);
    fake_params(&fb, &p);
    p.alignment = 65536 + 4096;
    expect_create_invalid(&p);
    fake_params(&fb, &p);
    p.alignment = 2048;
    expect_create_invalid(&p);
    fake_params(&fb, &p);
    p.method = (enum regcache_method)7;
    expect_create_invalid(&p);
    fake_params(&fb, &p);
    p.method = REGCACHE_METHOD_HOST; /* an answer of regcache_method_used() only */
    expect_create_invalid(&p);
    fake_params(&fb, &p);
    p.validation = (enum regcache_validation) - 1;
    expect_create_invalid(&p);
    fake_params(&fb, &p);
    p.host_monitor = REGCACHE_HOST_MONITOR_UCM + 1;
    expect_create_invalid(&p);
    fake_params(&fb, &p);
    no_dereg.reg = fb.ops.reg;
    p.backend = &no_dereg;
    expect_create_invalid(&p);
    regcache_params_init(&p); /* built-in backend without a pd */
    expect_create_invalid(&p);
}

static void get_bad_input(void **state)
{
    (void)state;
    regcache_t *c = make_cache();
    regcache_entry_t *e = (regcache_entry_t *)(uintptr_t)1;
    assert_int_equal(regcache_get(NULL, (void *)ADDR, 10, &e), REGCACHE_ERR_INVALID);
    assert_null(e);
    assert_int_equal(regcache_get(c, NULL, 10, &e), REGCACHE_ERR_INVALID);
    assert_int_equal(regcache_get(c, (void *)ADDR, 10, NULL), REGCACHE_ERR_INVALID);
    e = (regcache_entry_t *)(uintptr_t)1;
    assert_int_equal(regcache_get(c, (void *)ADDR, 0, &e), REGCACHE_ERR_INVALID);
    assert_null(e);
    assert_int_equal(regcache_get(c, (void *)(UINTPTR_MAX - 10), 100, &e), REGCACHE_ERR_INVALID);
    assert_int_equal(regcache_get(c, (void *)ADDR, SIZE_MAX, &e), REGCACHE_ERR_INVALID);
    /* The top page cannot be rounded out without wrapping. */
    assert_int_equal(regcache_get(c, (void *)(UINTPTR_MAX - 10), 5, &e), REGCACHE_ERR_NOT_GPU);
    struct regcache_stats s;
    regcache_get_stats(c, &s);
    assert_int_equal(s.registrations, 0);
    assert_int_equal(atomic_load(&fb.regs), 0);
    regcache_destroy(c);
}

static void host_range_at_the_top_cannot_round(void **state)
{
    (void)state;
    struct regcache_params p;
    regcache_t *c;
    regcache_entry_t *e;
    fake_init(&fb);
    fake_params(&fb, &p);
    p.host_memory = 1;
    assert_int_equal(regcache_create(&p, &c), REGCACHE_OK);
    assert_int_equal(regcache_get(c, (void *)(UINTPTR_MAX - 10), 5, &e), REGCACHE_ERR_INVALID);
    assert_int_equal(atomic_load(&fb.regs), 0);
    regcache_destroy(c);
}

static void entry_accessors_on_null(void **state)
{
    (void)state;
    uintptr_t start = 1;
    size_t len = 1;
    assert_null(regcache_entry_handle(NULL));
    assert_null(regcache_entry_mr(NULL));
    regcache_entry_range(NULL, &start, &len);
    assert_int_equal(start, 0);
    assert_int_equal(len, 0);
    regcache_entry_range(NULL, NULL, NULL);
    regcache_put(NULL, NULL);
    regcache_destroy(NULL);
}

static void custom_backend_has_no_mr(void **state)
{
    (void)state;
    regcache_t *c = make_cache();
    regcache_entry_t *e;
    assert_int_equal(regcache_get(c, (void *)ADDR, 10, &e), REGCACHE_OK);
    assert_null(regcache_entry_mr(e));
    assert_non_null(regcache_entry_handle(e));
    assert_int_equal(regcache_method_used(c), 0);
    regcache_put(c, e);
    regcache_destroy(c);
}

static void invalidate_flush_stats_bad_input(void **state)
{
    (void)state;
    regcache_t *c = make_cache();
    regcache_entry_t *e;
    assert_int_equal(regcache_get(c, (void *)ADDR, 10, &e), REGCACHE_OK);
    regcache_put(c, e);

    assert_int_equal(regcache_invalidate(NULL, (void *)ADDR, 1), REGCACHE_ERR_INVALID);
    assert_int_equal(regcache_invalidate(c, (void *)ADDR, 0), REGCACHE_ERR_INVALID);
    assert_int_equal(regcache_invalidate(c, (void *)(UINTPTR_MAX - 1), 10), REGCACHE_ERR_INVALID);
    /* Ignored, not applied: the entry is still cached. */
    regcache_notify_free((void *)ADDR, 0);
    regcache_notify_free((void *)(UINTPTR_MAX - 1), 10);
    struct regcache_stats s;
    assert_int_equal(regcache_get_stats(c, &s), REGCACHE_OK);
    assert_int_equal(s.entries, 1);

    assert_int_equal(regcache_flush(NULL), REGCACHE_ERR_INVALID);
    assert_int_equal(regcache_get_stats(NULL, &s), REGCACHE_ERR_INVALID);
    assert_int_equal(regcache_get_stats(c, NULL), REGCACHE_ERR_INVALID);
    assert_int_equal(regcache_validation_mode(NULL), REGCACHE_ERR_INVALID);
    assert_int_equal(regcache_method_used(NULL), REGCACHE_ERR_INVALID);
    regcache_destroy(c);
    assert_int_equal(atomic_load(&fb.live), 0);
}

static void strerror_and_version(void **state)
{
    (void)state;
    static const int codes[] = {
        REGCACHE_OK,          REGCACHE_ERR_INVALID, REGCACHE_ERR_NO_MEMORY,
        REGCACHE_ERR_NOT_GPU, REGCACHE_ERR_MANAGED, REGCACHE_ERR_NO_SPACE,
        REGCACHE_ERR_BACKEND, REGCACHE_ERR_CUDA,    REGCACHE_ERR_UNSUPPORTED,
        REGCACHE_ERR_FORKED,  REGCACHE_ERR_RANGE,
    };
    const size_t n = sizeof(codes) / sizeof(codes[0]);
    const char *unknown = regcache_strerror(12345);
    assert_non_null(unknown);
    for (size_t i = 0; i < n; i++) {
        const char *msg = regcache_strerror(codes[i]);
        assert_non_null(msg);
        assert_string_not_equal(msg, unknown);
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(msg, regcache_strerror(codes[j]));
    }
    char expect[32];
    snprintf(expect, sizeof(expect), "%d.%d.%d", REGCACHE_VERSION_MAJOR, REGCACHE_VERSION_MINOR,
             REGCACHE_VERSION_PATCH);
    assert_string_equal(regcache_version(), expect);
}

static void reason_names(void **state)
{
    (void)state;
    static const char *const expect[REGCACHE_REASON_COUNT] = {
        "evict-budget", "evict-exhausted", "flush",   "freed-hook", "freed-monitor",
        "freed-tag",    "invalidate",      "destroy", "replaced",   "merged",
    };
    for (int r = 0; r < REGCACHE_REASON_COUNT; r++)
        assert_string_equal(regcache_reason_name(r), expect[r]);
    assert_string_equal(regcache_reason_name(REGCACHE_REASON_COUNT), "unknown");
    assert_string_equal(regcache_reason_name(-1), "unknown");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(params_init_null),
        cmocka_unit_test(create_bad_params),
        cmocka_unit_test(get_bad_input),
        cmocka_unit_test(host_range_at_the_top_cannot_round),
        cmocka_unit_test(entry_accessors_on_null),
        cmocka_unit_test(custom_backend_has_no_mr),
        cmocka_unit_test(invalidate_flush_stats_bad_input),
        cmocka_unit_test(strerror_and_version),
        cmocka_unit_test(reason_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
