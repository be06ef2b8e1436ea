/* The device tests' cache and table (see keys_fixture.h). */
#include "keys_fixture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

#include "device_table.h"
#include "fake_gpu.h"

int kx_setup(void **state)
{
    struct kx *k = calloc(1, sizeof *k);
    if (!k)
        return -1;
    k->fx.param = *state;
    fake_init(&k->fx.fb);
    fake_params(&k->fx.fb, &k->fx.p);
    k->fx.p.validation = REGCACHE_VALIDATE_NOTIFY;
    k->fx.p.device_keys = 1;
    regcache_device_keys_params_init(&k->kp);
    k->kp.lkey = kx_lkey;
    k->kp.page_slots = 4096;
    k->kp.records = 256;
    k->kp.poll_ns = 200000;
    fake_gpu_install(2);
    *state = k;
    return 0;
}

int kx_teardown(void **state)
{
    struct kx *k = *state;
    regcache_destroy(k->fx.c);
    assert_int_equal(atomic_load(&k->fx.fb.live), 0);
    assert_int_equal(atomic_load(&fake_gpu.allocs), 0);
    assert_int_equal(atomic_load(&fake_gpu.host_allocs), 0);
    assert_int_equal(atomic_load(&fake_gpu.streams), 0);
    assert_int_equal(atomic_load(&fake_gpu.retained), 0);
    fake_gpu_uninstall();
    free(k);
    return 0;
}

uint32_t kx_lkey(void *arg, void *handle, unsigned rail)
{
    (void)arg;
    (void)rail;
    return ((struct fake_handle *)handle)->serial;
}

void kx_attach(struct kx *k)
{
    fx_create(&k->fx);
    int rc = regcache_device_keys_attach(k->fx.c, 0, &k->kp, &k->t);
    if (rc != REGCACHE_OK)
        fail_msg("attach: %s (%s)", regcache_err_name(rc), regcache_last_error());
}

int kx_lookup(struct kx *k, uintptr_t addr, size_t len, unsigned rail,
              struct regcache_device_key *key)
{
    return regcache_device_lookup(&k->t, (const void *)addr, len, rail, key);
}

int kx_key_good(struct kx *k, int confirm, const struct regcache_device_key *key)
{
    return confirm ? regcache_device_confirm(&k->t, key) : regcache_device_key_current(&k->t, key);
}

int kx_usable(struct kx *k, uintptr_t addr, size_t len, unsigned rail,
              struct regcache_device_key *key)
{
    unsigned slot = k->t.hold_slots - 1;
    int confirm = regcache_device_hold_begin(&k->t, slot);
    int rc = kx_lookup(k, addr, len, rail, key);
    if (rc == REGCACHE_DEVICE_HIT && confirm && !regcache_device_confirm(&k->t, key))
        rc = REGCACHE_DEVICE_MISS;
    regcache_device_hold_end(&k->t, slot);
    return rc;
}

int kx_still_good(struct kx *k, const struct regcache_device_key *key)
{
    unsigned slot = k->t.hold_slots - 1;
    int good = kx_key_good(k, regcache_device_hold_begin(&k->t, slot), key);
    regcache_device_hold_end(&k->t, slot);
    return good;
}

void kx_hold_open(struct kx *k, unsigned slot)
{
    int confirm = regcache_device_hold_begin(&k->t, slot);
    (void)confirm; /* nothing is looked up in it */
}

void kx_assert_agrees(struct kx *k, uintptr_t addr, size_t len, unsigned rail)
{
    regcache_entry_t *e = fx_get_rail(&k->fx, rail, addr, len);
    assert_int_equal(regcache_device_keys_sync(k->fx.c, 0), REGCACHE_OK);
    struct regcache_device_key key;
    assert_int_equal(kx_lookup(k, addr, len, rail, &key), REGCACHE_DEVICE_HIT);
    assert_int_equal(key.lkey, fx_handle(e)->serial);
    assert_true(key.bytes >= len);
    regcache_put(k->fx.c, e);
}

struct regcache_device_keys_stats kx_stats(struct kx *k)
{
    struct regcache_device_keys_stats s;
    assert_int_equal(regcache_device_keys_stats(k->fx.c, 0, &s), REGCACHE_OK);
    return s;
}

struct rc_dtable *kx_table(struct kx *k)
{
    struct regcache_device_keys_params p = k->kp;
    struct rc_dtable *t = NULL;
    assert_int_equal(rc_dtable_create(&t, NULL, 0, &p), REGCACHE_OK);
    return t;
}

void kx_publish(struct rc_dtable *t, uint64_t page, uint32_t lkey)
{
    uint32_t keys[REGCACHE_DEVICE_RAILS] = { lkey };
    pthread_mutex_lock(&t->kt.lock);
    rc_kt_publish_locked(&t->kt, (const void *)(uintptr_t)page, page * KX_PAGE,
                         (page + 1) * KX_PAGE, 1, keys);
    pthread_mutex_unlock(&t->kt.lock);
}

uint64_t kx_leave(struct rc_dtable *t, uint64_t page)
{
    pthread_mutex_lock(&t->kt.lock);
    uint64_t removal = rc_kt_leave_locked(&t->kt, (const void *)(uintptr_t)page);
    pthread_mutex_unlock(&t->kt.lock);
    return removal;
}

int kx_look(struct rc_dtable *t, uint64_t page, struct regcache_device_key *key)
{
    return regcache_device_lookup(&t->desc, (const void *)(uintptr_t)(page * KX_PAGE), 64, 0, key);
}

uint64_t kx_page_homed(const struct rc_dtable *t, size_t lo, size_t hi, uint64_t from)
{
    for (uint64_t p = from;; p++) {
        size_t home = regcache_device_slot_of(p, t->kt.slot_bits);
        if (home >= lo && home < hi)
            return p;
    }
}
