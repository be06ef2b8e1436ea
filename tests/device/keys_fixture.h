/* A cache with a device key table, for the device tests: the cache
 * fixture's fake backend (whose handles' serials are the keys: a key names
 * its registration), validation NOTIFY, params.device_keys, and one fake GPU
 * (fake_gpu.h) holding the table in host memory, where this thread and
 * others read it as kernels would, through regcache_device.h. */
#ifndef KEYS_FIXTURE_H
#define KEYS_FIXTURE_H

#include "cache_fixture.h"
#include "regcache_device.h"

struct kx {
    struct fx fx;
    struct regcache_device_keys_params kp; /* set fields before kx_attach */
    struct regcache_device_table t;
};

/* cmocka setup and teardown: the cache is not created yet; teardown
 * destroys it and checks that no GPU memory, pinned memory, stream or
 * context is left. */
int kx_setup(void **state);
int kx_teardown(void **state);

/* Create the cache and attach a table on device 0 (must succeed). */
void kx_attach(struct kx *k);

/* The lkey that params.lkey gives a fake handle: its serial. */
uint32_t kx_lkey(void *arg, void *handle, unsigned rail);

/* What a kernel's lookup finds: REGCACHE_DEVICE_HIT or _MISS. */
int kx_lookup(struct kx *k, uintptr_t addr, size_t len, unsigned rail,
              struct regcache_device_key *key);

/* What a kernel's hold section opened now may use for addr: the lookup's
 * key, confirmed where the section is told to (on the last hold slot,
 * which the tests leave to this): REGCACHE_DEVICE_HIT or _MISS. */
int kx_usable(struct kx *k, uintptr_t addr, size_t len, unsigned rail,
              struct regcache_device_key *key);

/* Whether a key may be used in a section hold_begin answered `confirm`:
 * confirmed against the host's number, or current in the table. */
int kx_key_good(struct kx *k, int confirm, const struct regcache_device_key *key);

/* Whether a section opened now (on the last hold slot) may use key. */
int kx_still_good(struct kx *k, const struct regcache_device_key *key);

/* Open a section on slot that uses no key: one a drain must see. */
void kx_hold_open(struct kx *k, unsigned slot);

/* The key a kernel gets for addr must be that of the host's get (on
 * rail), after the table is synced. */
void kx_assert_agrees(struct kx *k, uintptr_t addr, size_t len, unsigned rail);

struct regcache_device_keys_stats kx_stats(struct kx *k);

/* ---- one table, driven by hand (no cache, no threads) ------------------- */

struct rc_dtable;

#define KX_PAGE ((uint64_t)1 << REGCACHE_DEVICE_PAGE_SHIFT)

/* A table made with k->kp (must succeed); rc_dtable_destroy() frees it. */
struct rc_dtable *kx_table(struct kx *k);

/* An entry of one page, its id the page, published with key lkey on rail
 * 0; and its leaving (returns the removal's number, or 0). */
void kx_publish(struct rc_dtable *t, uint64_t page, uint32_t lkey);
uint64_t kx_leave(struct rc_dtable *t, uint64_t page);

/* What a kernel's lookup of the page finds in the table's device memory. */
int kx_look(struct rc_dtable *t, uint64_t page, struct regcache_device_key *key);

/* The first page from `from` on whose search starts in slots [lo, hi). */
uint64_t kx_page_homed(const struct rc_dtable *t, size_t lo, size_t hi, uint64_t from);

#define KX_MAIN(...)                                       \
    int main(void)                                         \
    {                                                      \
        return FX_RUN(kx_setup, kx_teardown, __VA_ARGS__); \
    }

#endif
