/* regcache-stat against what real caches in two processes (cache_helper)
 * say of themselves through regcache_get_device_stats(), in its text and
 * JSON output: entries, bytes and budget at once (they go out with every
 * change of bytes), the counters - hits, misses, evictions, invalidations
 * by tag check and by notify, failed registrations - once the 100 ms
 * between two publications has passed and a miss published them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ledger_fixture.h"
#include "regcache.h"

/* The counters a cache's row shows, and the same of what the cache says. */
#define COUNTERS 6
static void counters(const struct stat_cache *c, const struct cache_view *v,
                     unsigned long long shown[COUNTERS], unsigned long long own[COUNTERS])
{
    const unsigned long long s[COUNTERS] = { c->hits,      c->misses,       c->evictions,
                                             c->inval_tag, c->inval_notify, c->reg_failures };
    const unsigned long long o[COUNTERS] = { v->hits, v->misses, v->evictions,
                                             v->tag,  v->notify, v->failures };
    memcpy(shown, s, sizeof s);
    memcpy(own, o, sizeof o);
}

/* Each process's JSON row against its own statistics; the counters equal
 * when `published`, else no further than the cache's own. */
static void json_agrees(const struct stat_gpu *g, const struct helper *h,
                        const struct cache_view *v, int n, bool published)
{
    unsigned long long total = 0;
    assert_int_equal(g->n, n);
    for (int i = 0; i < n; i++) {
        const struct stat_cache *c = stat_cache_of(g, h[i].pid);
        unsigned long long shown[COUNTERS], own[COUNTERS];
        assert_non_null(c);
        assert_string_equal(c->process, "cache_helper");
        assert_string_equal(c->state, "live");
        assert_int_equal(c->entries, v[i].entries);
        assert_int_equal(c->bytes, v[i].bytes);
        assert_int_equal(c->budget, v[i].budget);
        counters(c, &v[i], shown, own);
        for (int k = 0; k < COUNTERS; k++) {
            if (published)
                assert_int_equal(shown[k], own[k]);
            else
                assert_true(shown[k] <= own[k]);
        }
        total += v[i].bytes;
    }
    assert_int_equal(g->in_use, total);
}

/* "172.0M", as regcache-stat prints sizes from 1 MiB to below 1 GiB. */
static const char *mib_text(unsigned long long bytes, char out[16])
{
    assert_true(bytes >= M && bytes < 1024 * M);
    snprintf(out, 16, "%.1fM", (double)bytes / (double)M);
    return out;
}

static void text_agrees(const struct stat_gpu *g, const struct helper *h,
                        const struct cache_view *v, int n)
{
    int status;
    char *out = run_stat("", &status), line[256], size[16];
    assert_int_equal(status, 0);
    print_message("%s", out); /* what was compared, for the log */
    /* The caches read REGCACHE_BAR1_BYTES, and regcache-stat says so. */
    assert_string_equal(g->budget_source, "configured");
    snprintf(line, sizeof line, "GPU %s: budget %s (configured), ", g->key,
             mib_text(g->budget, size));
    assert_contains(out, line);
    snprintf(line, sizeof line, "in use %s by %d caches, pressure raised %llu times",
             mib_text(g->in_use, size), n, g->pressure);
    assert_contains(out, line);
    for (int i = 0; i < n; i++) {
        struct stat_row r;
        assert_true(stat_row(out, h[i].pid, &r));
        assert_string_equal(r.process, "cache_helper");
        assert_string_equal(r.state, "live");
        assert_int_equal(r.entries, v[i].entries);
        assert_string_equal(r.bytes, mib_text(v[i].bytes, size));
        assert_string_equal(r.budget, mib_text(v[i].budget, size));
        assert_int_equal(r.hits, v[i].hits);
        assert_int_equal(r.misses, v[i].misses);
        assert_int_equal(r.evictions, v[i].evictions);
        assert_int_equal(r.tag, v[i].tag);
        assert_int_equal(r.notify, v[i].notify);
        assert_int_equal(r.failures, v[i].failures);
    }
    free(out);
}

static void run(struct helper *h, struct cache_view *v, const char *const *commands)
{
    for (; *commands; commands++) {
        cache_ask(h, *commands, v);
        assert_int_equal(v->rc, strcmp(*commands, "fail") ? REGCACHE_OK : REGCACHE_ERR_BACKEND);
    }
}

static void stat_shows_what_each_cache_says(void **state)
{
    (void)state;
    /* A: hits, an invalidation by tag check (with its miss), one by
     * notify, a failed registration, a held entry; B: hits.  Then A's miss
     * on the full GPU evicts one of its entries. */
    static const char *const a_moves[] = { "reg 60", "reg 60", "reg 60",  "reg 60", "touch",
                                           "touch",  "touch",  "touch",   "touch",  "realloc",
                                           "notify", "fail",   "hold 10", NULL };
    static const char *const b_moves[] = { "reg 20", "touch", "touch", "touch", "reg 72", NULL };
    static const char *const a_full[] = { "reg 40", NULL };
    struct helper h[2];
    struct cache_view v[2];
    struct stat_gpu g;
    cache_start(&h[0], NULL);
    cache_start(&h[1], NULL);
    run(&h[0], &v[0], a_moves);
    run(&h[1], &v[1], b_moves);
    run(&h[0], &v[0], a_full);
    assert_int_equal(v[0].hits, 5);
    assert_int_equal(v[0].misses, 1 + 4 + 1 + 1 + 1 + 1); /* anchor, regs, realloc, fail, hold */
    assert_int_equal(v[0].evictions, 1);
    assert_int_equal(v[0].tag, 1);
    assert_int_equal(v[0].notify, 1);
    assert_int_equal(v[0].failures, 1);
    assert_int_equal(v[1].hits, 3);

    /* At once: what counts against the budget; counters as last published. */
    stat_json(&g);
    json_agrees(&g, h, v, 2, false);

    /* Past the 100 ms, a miss publishes everything (with room on the GPU,
     * so that it evicts nothing after publishing). */
    for (int i = 0; i < 2; i++) {
        cache_ask(&h[i], "sleep 110", &v[i]);
        cache_ask(&h[i], "reg 1", &v[i]);
    }
    stat_json(&g);
    json_agrees(&g, h, v, 2, true);
    text_agrees(&g, h, v, 2);
    int status;
    char *out = run_stat("--json", &status);
    assert_json(out);
    free(out);
    for (int i = 0; i < 2; i++)
        helper_stop(&h[i]);
}

/* A miss that evicts, past the 100 ms, publishes once it is done: what it
 * evicted is in the counters shown. */
static void stat_shows_the_evictions_of_the_miss_that_publishes(void **state)
{
    (void)state;
    struct helper h;
    struct cache_view v;
    struct stat_gpu g;
    cache_start(&h, NULL);
    for (int i = 0; i < 3; i++)
        cache_ask(&h, "reg 100", &v);
    assert_int_equal(v.evictions, 1);
    cache_ask(&h, "sleep 110", &v);
    cache_ask(&h, "reg 100", &v);
    assert_int_equal(v.evictions, 2);
    stat_json(&g);
    json_agrees(&g, &h, &v, 1, true);
    helper_stop(&h);
}

int main(void)
{
#define T(test) cmocka_unit_test_setup_teardown(test, ledger_setup, ledger_teardown)
    const struct CMUnitTest tests[] = {
        T(stat_shows_what_each_cache_says),
        T(stat_shows_the_evictions_of_the_miss_that_publishes),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
