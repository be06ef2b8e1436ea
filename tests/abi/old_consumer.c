/* A program built against 0.2, before the stats struct grew fds and mrs:
 * linked against the unversioned library (old_library.c), run against the
 * real one.  The stats functions it reaches, by its unversioned references
 * and by dlvsym(REGCACHE_0.2), fill the 0.2 struct and not a byte past it;
 * dlvsym(REGCACHE_0.3) reaches the functions that fill the whole struct.
 * regcache_params_init, which programs linked before 0.4 reach by that
 * same unversioned reference (0.3's among them), fills the 0.3 params
 * struct and not a byte past it; dlvsym(REGCACHE_0.4) the whole one. */
#include <dlfcn.h>
#include <regcache.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "abi_backend.h"

/* struct regcache_stats as the 0.2 header declared it. */
struct stats_0_2 {
    uint64_t hits, misses, registrations, deregistrations, evictions, invalidations_tag,
        invalidations_notify, invalidations_explicit, reg_failures, entries, bytes, peak_bytes,
        one_shots, budget;
};
_Static_assert(sizeof(struct stats_0_2) == offsetof(struct regcache_stats, fds),
               "the 0.2 fields of struct regcache_stats moved");

#define CANARY 0xa5a5a5a5a5a5a5a5u

/* What a caller's stack holds: the struct it passes, then its own data. */
struct old_frame {
    struct stats_0_2 s;
    uint64_t after[2];
};
struct new_frame {
    struct regcache_stats s;
    uint64_t after[2];
};

/* The params struct as the 0.3 header declared it: up to host_merge. */
#define PARAMS_0_3 offsetof(struct regcache_params, host_merge)

typedef int params_init_fn(struct regcache_params *);
typedef int get_stats_fn(const regcache_t *, struct regcache_stats *);
typedef int get_device_stats_fn(const regcache_t *, int, struct regcache_stats *);

static int failures;

static void expect(int ok, const char *what, const char *how)
{
    if (!ok) {
        printf("%s: %s\n", what, how);
        failures++;
    }
}

/* One miss and one hit: every figure checked below is 1. */
static void expect_figures(const char *what, const struct stats_0_2 *s)
{
    expect(s->hits == 1 && s->misses == 1 && s->registrations == 1 && s->entries == 1, what,
           "figures are not those of one miss and one hit");
}

static void old_struct(const char *what, regcache_t *c, get_stats_fn *all,
                       get_device_stats_fn *device)
{
    struct old_frame f;
    memset(&f, 0xa5, sizeof(f));
    int rc = all ? all(c, (struct regcache_stats *)&f.s)
                 : device(c, REGCACHE_DEVICE_HOST, (struct regcache_stats *)&f.s);
    expect(rc == REGCACHE_OK, what, "failed");
    expect(f.after[0] == CANARY && f.after[1] == CANARY, what,
           "wrote past the 0.2 struct (the caller's canary is overwritten)");
    expect_figures(what, &f.s);
}

static void *versioned(void *lib, const char *name, const char *version)
{
    void *fn = dlvsym(lib, name, version);
    if (!fn)
        printf("no %s@%s: %s\n", name, version, dlerror());
    return fn;
}

/* params_init writes the layout `size` and nothing past it. */
static void params_layout(const char *what, params_init_fn *init, size_t size)
{
    unsigned char frame[sizeof(struct regcache_params) + 16];
    memset(frame, 0xa5, sizeof(frame));
    expect(init((struct regcache_params *)frame) == REGCACHE_OK, what, "failed");
    size_t reported;
    memcpy(&reported, frame + offsetof(struct regcache_params, size), sizeof(reported));
    expect(reported == size, what, "did not record the layout's size");
    int untouched = 1;
    for (size_t i = size; i < sizeof(frame); i++)
        untouched &= frame[i] == 0xa5;
    expect(untouched, what, "wrote past the layout (the caller's canary is overwritten)");
}

int main(void)
{
    params_layout("regcache_params_init", regcache_params_init, PARAMS_0_3);
    struct regcache_params p;
    regcache_t *c;
    regcache_entry_t *e;
    regcache_params_init(&p);
    p.backend = &abi_backend;
    p.host_memory = 1;
    p.validation = REGCACHE_VALIDATE_TAG_CHECK;
    if (regcache_create(&p, &c) != REGCACHE_OK) {
        printf("create failed\n");
        return 1;
    }
    for (int i = 0; i < 2; i++) {
        if (regcache_get(c, abi_buffer, 4096, &e) != REGCACHE_OK) {
            printf("get failed\n");
            return 1;
        }
        regcache_put(c, e);
    }

    old_struct("regcache_get_stats", c, regcache_get_stats, NULL);
    old_struct("regcache_get_device_stats", c, NULL, regcache_get_device_stats);

    void *lib = dlopen("libregcache.so.0", RTLD_NOW | RTLD_NOLOAD);
    if (!lib) {
        printf("libregcache.so.0 is not loaded: %s\n", dlerror());
        return 1;
    }
    get_stats_fn *all = versioned(lib, "regcache_get_stats", "REGCACHE_0.2");
    get_device_stats_fn *device = versioned(lib, "regcache_get_device_stats", "REGCACHE_0.2");
    get_stats_fn *all_0_3 = versioned(lib, "regcache_get_stats", "REGCACHE_0.3");
    params_init_fn *init_0_4 = versioned(lib, "regcache_params_init", "REGCACHE_0.4");
    if (!all || !device || !all_0_3 || !init_0_4)
        return 1;
    params_layout("regcache_params_init@REGCACHE_0.4", init_0_4, sizeof(struct regcache_params));
    old_struct("regcache_get_stats@REGCACHE_0.2", c, all, NULL);
    old_struct("regcache_get_device_stats@REGCACHE_0.2", c, NULL, device);

    struct new_frame f;
    memset(&f, 0xa5, sizeof(f));
    expect(all_0_3(c, &f.s) == REGCACHE_OK, "regcache_get_stats@REGCACHE_0.3", "failed");
    expect(f.s.mrs == 1 && f.s.fds == 0 && f.after[0] == CANARY && f.after[1] == CANARY,
           "regcache_get_stats@REGCACHE_0.3", "did not fill the whole struct, and only it");
    /* A device the cache never saw: 0.2 answered with zeros, 0.3 says it
     * is not one of the cache's. */
    struct old_frame unseen;
    memset(&unseen, 0xa5, sizeof(unseen));
    expect(regcache_get_device_stats(c, 7, (struct regcache_stats *)&unseen.s) == REGCACHE_OK &&
               unseen.s.hits == 0 && unseen.s.entries == 0 && unseen.after[0] == CANARY,
           "regcache_get_device_stats of a device never seen", "did not answer 0.2's zeros");
    get_device_stats_fn *device_0_3 = versioned(lib, "regcache_get_device_stats", "REGCACHE_0.3");
    expect(device_0_3 && device_0_3(c, 7, &f.s) == REGCACHE_ERR_INVALID,
           "regcache_get_device_stats@REGCACHE_0.3 of a device never seen", "is not INVALID");
    dlclose(lib);
    regcache_destroy(c);
    if (failures)
        return 1;
    printf("0.2 callers get the 0.2 struct and answers, 0.3 callers the whole one; callers "
           "linked before 0.4 get the 0.3 params\n");
    return 0;
}
