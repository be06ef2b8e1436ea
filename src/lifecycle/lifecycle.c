/* Creating and destroying caches, and what a cache reports about itself. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "asym_fence.h"
#include "cache.h"
#include "feature_list.h"
#include "hook_detect.h"
#include "intercept.h"
#include "last_error.h"
#include "cache_registry.h"
#include "threads.h"
#include "verbs_backend.h"

/* Trusting frees is only safe when every one of them is provably seen: by
 * the preload hook, or by the in-process interception once its self-test
 * has reached every patched function, or by the application (NOTIFY).
 * AUTO falls back to TAG_CHECK where no hook can be had; HOOKS, which its
 * user asked for to be spared the tag checks, is refused there instead of
 * serving registrations of freed memory. */
static int resolve_validation(struct regcache *c)
{
    struct rc_options *o = &c->opts;
    char *why = o->validation_reason;
    size_t n = sizeof o->validation_reason;
    int asked = o->params.validation;
    c->validation = asked;
    if (asked == REGCACHE_VALIDATE_TAG_CHECK) {
        snprintf(why, n, "set by params.validation or REGCACHE_VALIDATION");
        return REGCACHE_OK;
    }
    if (asked == REGCACHE_VALIDATE_NOTIFY) {
        snprintf(why, n,
                 "set by params.validation or REGCACHE_VALIDATION: the application calls "
                 "regcache_notify_free() and regcache_notify_alloc()");
        return REGCACHE_OK;
    }
    c->validation = REGCACHE_VALIDATE_HOOKS;
    if (rc_hook_active()) {
        snprintf(why, n, "libregcache-hook.so is preloaded and sees every CUDA free");
        return REGCACHE_OK;
    }
    /* Not a failure: no GPU memory can be freed behind the cache's back. */
    if (rc_memory_host_only(&c->mem)) {
        snprintf(why, n, "host memory only: no CUDA driver, nothing to validate on the GPU side");
        if (asked == REGCACHE_VALIDATE_AUTO)
            c->validation = REGCACHE_VALIDATE_TAG_CHECK;
        return REGCACHE_OK;
    }
    if (!o->intercept)
        snprintf(why, n, "REGCACHE_HOOKS=off: no in-process interception");
    else if (rc_intercept_ensure(why, n)) {
        c->patches_intact = rc_intercept_intact;
        return REGCACHE_OK;
    }
    if (asked == REGCACHE_VALIDATE_HOOKS)
        return rc_fail(REGCACHE_ERR_UNSUPPORTED,
                       "validation HOOKS: no hook sees every CUDA free (%s); an application "
                       "that calls regcache_notify_free() and regcache_notify_alloc() itself "
                       "asks for REGCACHE_VALIDATE_NOTIFY (REGCACHE_VALIDATION=notify), else "
                       "TAG_CHECK or AUTO",
                       why);
    c->validation = REGCACHE_VALIDATE_TAG_CHECK;
    if (o->intercept)
        rc_set_error("validation TAG_CHECK: %s", why);
    return REGCACHE_OK;
}

static int make_backend(struct regcache *c)
{
    const struct regcache_params *p = &c->opts.params;
    if (p->backend) {
        rc_backend_adapt(&c->backend, p->backend, c->opts.header_minor >= 4);
        return REGCACHE_OK;
    }
    c->builtin = true;
    return rc_verbs_backend_create(p, c->opts.dmabuf_mapping, c->opts.data_direct, &c->backend,
                                   &c->method_used);
}

static bool pool_owns(const void *pool, const void *e)
{
    return rc_entry_pool_owns(pool, e);
}

/* `consistent`: nobody held the cache lock, so the tree, the LRU, the
 * page index, the filter and the entry pool it guards are whole and may be
 * freed. */
static void free_cache(struct regcache *c, bool consistent)
{
    if (consistent) {
        rc_page_index_fini(&c->index);
        rc_filter_fini(&c->filter);
        /* Entries may be held still (the API lets a cache go with them):
         * those holds go first, or the next cache's entries, which malloc
         * may put where these were, would look held. */
        if (c->pool.nslabs)
            rc_thread_forget_holds(pool_owns, &c->pool);
        rc_entry_pool_fini(&c->pool);
        for (int i = 0; i < RC_DEVICE_SLOTS; i++)
            rc_lru_fini(&c->dev[i].lru);
    }
    if (c->builtin)
        rc_verbs_backend_destroy(&c->backend);
    rc_thread_release_hit_id(c->hit_id);
    rc_stats_fini(&c->stats);
    free(c);
}

int regcache_create(const struct regcache_params *params, regcache_t **out)
{
    if (out)
        *out = NULL;
    if (!params || !out)
        return rc_fail(REGCACHE_ERR_INVALID, "regcache_create: %s is NULL",
                       !params ? "params" : "cache");
    rc_clear_error();
    rc_fence_setup(rc_registry_fence_everywhere);
    rc_fork_generation_watch();
    rc_clock_setup();

    struct regcache *c;
    /* The page index shards and the counters are cache-line aligned. */
    if (posix_memalign((void **)&c, 64, sizeof(*c)))
        return rc_fail(REGCACHE_ERR_NO_MEMORY, "out of memory allocating the cache");
    memset(c, 0, sizeof(*c));
    c->hit_id = -1;
    rc_lock_init(&c->lock);
    rc_cond_init(&c->registered);
    rc_itree_init(&c->tree);
    rc_entry_pool_init(&c->pool, 0);
    for (int i = 0; i < RC_DEVICE_SLOTS; i++)
        rc_lru_init(&c->dev[i].lru, &c->index);

    int rc = rc_stats_init(&c->stats) == REGCACHE_OK
                 ? rc_options_resolve(params, &c->opts)
                 : rc_fail(REGCACHE_ERR_NO_MEMORY, "out of memory allocating the statistics");
    if (rc == REGCACHE_OK)
        rc_entry_pool_init(&c->pool, c->opts.params.priv_size);
    if (rc == REGCACHE_OK)
        rc = make_backend(c);
    if (rc == REGCACHE_OK &&
        rc_page_index_init(&c->index, (unsigned)__builtin_ctzll(c->opts.params.alignment)))
        rc = rc_fail(REGCACHE_ERR_NO_MEMORY, "out of memory allocating the page index");
    if (rc == REGCACHE_OK && rc_filter_init(&c->filter))
        rc = rc_fail(REGCACHE_ERR_NO_MEMORY, "out of memory allocating the range filter");
    if (rc != REGCACHE_OK) {
        free_cache(c, true);
        return rc;
    }
    const struct regcache_params *p = &c->opts.params;
    c->rails = (unsigned)p->rails;
    c->access = (unsigned)p->access;
    rc_host_merge_setup(c);
    c->max_reg = c->opts.max_mr_size  ? c->opts.max_mr_size
                 : c->backend.max_len ? c->backend.max_len
                                      : SIZE_MAX;
    c->host_page = (size_t)sysconf(_SC_PAGESIZE);
    rc_memory_select(p->backend ? &c->backend.user : NULL, &c->mem);
    rc = resolve_validation(c);
    if (rc != REGCACHE_OK) {
        free_cache(c, true);
        return rc;
    }
    bool tag_check = c->validation == REGCACHE_VALIDATE_TAG_CHECK;
    atomic_init(&c->tag_check, tag_check);
    atomic_init(&c->fenceless, tag_check && atomic_load(&rc_heavy_fence_works));
    c->put_flags = atomic_load(&rc_heavy_fence_works) ? 0 : RC_PUT_FENCE;
    c->tag_first = tag_check && !c->opts.params.host_memory;
    /* Behind the driver's query even an L1 miss hides (hit_path.c). */
    if (c->tag_first && c->mem.slow_tag)
        rc_page_index_large_from(&c->index, rc_page_index_l1_slots());
    c->hit_id = rc_thread_claim_hit_id();
    c->hit_offset = rc_thread_hits_offset(c->hit_id);
    c->fork_generation = rc_fork_generation();
    rc = rc_features_open(c);
    if (rc != REGCACHE_OK) {
        rc_listeners_call_destroy(c);
        rc_listeners_call_drained(c);
        free_cache(c, true);
        return rc;
    }
    /* The host memory feature said how the cache's host memory is watched
     * (host_note): the validation reason goes on with it. */
    if (p->host_memory)
        snprintf(c->host_reason, sizeof c->host_reason, "; host memory: %s", c->host_note);
    rc_validation_append_host(c, c->opts.validation_reason, sizeof c->opts.validation_reason);
    rc_registry_add(c);
    /* A switch to real fences that went through the registry before the
     * add did not see this cache (asym_fence.c). */
    if (!atomic_load(&rc_heavy_fence_works))
        rc_cache_fence_always(c);
    *out = c;
    return REGCACHE_OK;
}

void regcache_destroy(regcache_t *c)
{
    if (!c)
        return;
    bool child = rc_forked(c);
    /* A fork child's registry no longer lists inherited caches. */
    if (!child)
        rc_registry_remove(c);
    /* The features on the edge stop in the order they joined: those whose
     * threads register through the cache (background registration first,
     * then the features that register with its workers' help) before the
     * features that hear of registrations. */
    rc_listeners_call_destroy(c);
    /* A parent thread that held the cache lock at the fork may have been
     * halfway through changing what it guards (a tree rotation, a heap or
     * table being grown): the child's copy of the lock is still held then,
     * and the child must neither walk those structures (it could loop
     * forever) nor free them; it leaves them allocated. */
    bool consistent = !child || rc_trylock(&c->lock);
    if (child && consistent)
        rc_unlock(&c->lock);
    c->destroying = true;
    if (consistent)
        rc_cache_drain(c);
    rc_listeners_call_drained(c);
    rc_budget_fini(c);
    free_cache(c, consistent);
}

int regcache_method_used(const regcache_t *c)
{
    if (!c)
        return rc_fail(REGCACHE_ERR_INVALID, "regcache_method_used: cache is NULL");
    return c->builtin ? c->method_used : 0;
}

const char *regcache_name(const regcache_t *c)
{
    return c ? c->opts.name : NULL;
}
