/* One cache over the fake backend (fake_backend.h), as most tests of the
 * cache's behaviour start: cmocka setup and teardown, and the steps such
 * tests repeat (a get that must succeed, the statistics, the backend's
 * handle behind an entry).  Allocation i of FX_ALLOC(i) lies 2 MiB after
 * the one before, 64 KiB aligned, so allocations of up to 2 MiB never meet
 * and each rounds to registrations of its own. */
#ifndef CACHE_FIXTURE_H
#define CACHE_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "fake_backend.h"
#include "regcache.h"

#define KiB ((size_t)1024)
#define MiB ((size_t)1024 * 1024)
#define FX_BASE ((uintptr_t)0x7f0000000000ull)
#define FX_ALLOC(i) (FX_BASE + (uintptr_t)(i)*2 * MiB)

struct fx {
    struct fake_backend fb;
    struct regcache_params p; /* fake_params(): set fields before fx_create */
    regcache_t *c;
    const void *param; /* the test's cmocka prestate, if any */
};

/* cmocka setup: a fake backend and its params, no cache yet.  Keeps a
 * prestate in fx.param. */
int fx_setup(void **state);
/* cmocka teardown: destroy the cache; every registration it made must be
 * gone with it. */
int fx_teardown(void **state);

void fx_create(struct fx *f);

/* A 1 MiB GPU allocation of device 0 at FX_ALLOC(i); its buffer id. */
uint64_t fx_device_alloc(struct fx *f, int i);
/* Pageable host memory at addr: the backend reports no buffer id, but
 * fake_realloc() still changes the id that reg records. */
uint64_t fx_pageable_alloc(struct fx *f, uintptr_t addr, size_t size);

/* A get (on `rail`) that must succeed. */
regcache_entry_t *fx_get(struct fx *f, uintptr_t addr, size_t len);
regcache_entry_t *fx_get_rail(struct fx *f, unsigned rail, uintptr_t addr, size_t len);
/* A counted hold (entry.h) on what serves [addr, addr + len), or NULL if a
 * get fails: the calling thread's free hold slots are filled first, so
 * that the get after them is counted, and emptied again. */
regcache_entry_t *get_counted_hold(regcache_t *c, uintptr_t addr, size_t len);
/* A get (that must succeed) by a thread that then exits holding it. */
regcache_entry_t *fx_get_and_exit(struct fx *f, uintptr_t addr, size_t len);
/* A get that must succeed, and its put: the entry is then cached unused. */
void fx_use(struct fx *f, uintptr_t addr, size_t len);
/* A get that must fail with `status`, leaving *entry NULL. */
void fx_get_fails(struct fx *f, uintptr_t addr, size_t len, int status);

/* What the fake backend's reg handed out for the entry. */
struct fake_handle *fx_handle(regcache_entry_t *e);
struct regcache_stats fx_stats(struct fx *f);
/* The statistics of f's cache (of cache c) named by each FX_STAT(field,
 * value) pair, up to a NULL, have those values:
 * fx_assert_stats(f, FX_STAT(hits, 1), NULL). */
#define FX_STAT(field, value) #field, (uint64_t)(value)
void fx_assert_stats(struct fx *f, const char *first, ...);
void assert_cache_stats(regcache_t *c, const char *first, ...);
/* The allocations FX_ALLOC(0 .. n-1), as fx_device_alloc() makes them. */
void fx_device_allocs(struct fx *f, int n);

/* Run one group of tests, each between setup and teardown: first a test of
 * case_fn for each of the n_cases cases of a table whose elements (of
 * case_size bytes) start with their name, a const char *, each test with
 * its case as fx.param; then the n functions fns, named in `names`, a
 * comma-separated list as #__VA_ARGS__ writes it.  Returns what cmocka does. */
int fx_run(int (*setup)(void **), int (*teardown)(void **), const char *names,
           void (*const *fns)(void **), size_t n, void (*case_fn)(void **), const void *cases,
           size_t n_cases, size_t case_size);

#define FX_FNS(...) ((void (*const[])(void **)){ __VA_ARGS__ })
#define FX_COUNT(...) (sizeof(FX_FNS(__VA_ARGS__)) / sizeof(FX_FNS(__VA_ARGS__)[0]))
/* The tests fns..., each between setup and teardown. */
#define FX_RUN(setup, teardown, ...)                                                              \
    fx_run(setup, teardown, #__VA_ARGS__, FX_FNS(__VA_ARGS__), FX_COUNT(__VA_ARGS__), NULL, NULL, \
           0, 0)
/* main() of a file whose tests each run between fx_setup and fx_teardown. */
#define FX_MAIN(...)                                       \
    int main(void)                                         \
    {                                                      \
        return FX_RUN(fx_setup, fx_teardown, __VA_ARGS__); \
    }
/* The same, with a test of case_fn for each case of the array `cases` first. */
#define FX_MAIN_CASES(case_fn, cases, ...)                                                     \
    int main(void)                                                                             \
    {                                                                                          \
        return fx_run(fx_setup, fx_teardown, #__VA_ARGS__, FX_FNS(__VA_ARGS__),                \
                      FX_COUNT(__VA_ARGS__), case_fn, cases, sizeof(cases) / sizeof(cases[0]), \
                      sizeof(cases[0]));                                                       \
    }

/* regcache_last_error() must contain each of the strings, up to a NULL. */
void fx_assert_error_says(const char *first, ...);

#endif
