/* Creating and destroying caches, and what a cache reports about itself. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "hook_detect.h"
#include "intercept.h"
#include "last_error.h"
#include "registry.h"
#include "verbs_backend.h"

static unsigned log2_of(size_t pow2)
{
    return (unsigned)__builtin_ctzll((unsigned long long)pow2);
}

/* Trusting frees is only safe when every one of them is provably seen: by
 * the preload hook, or by the in-process interception once its self-test
 * has reached every patched function. */
static int resolve_validation(struct rc_options *o)
{
    char *why = o->validation_reason;
    size_t n = sizeof o->validation_reason;
    if (o->params.validation != REGCACHE_VALIDATE_AUTO) {
        snprintf(why, n, "set by params.validation or REGCACHE_VALIDATION");
        return o->params.validation;
    }
    if (rc_hook_active()) {
        snprintf(why, n, "libregcache-hook.so is preloaded and sees every CUDA free");
        return REGCACHE_VALIDATE_HOOKS;
    }
    if (!o->intercept) {
        snprintf(why, n, "REGCACHE_HOOKS=off: no in-process interception");
        return REGCACHE_VALIDATE_TAG_CHECK;
    }
    if (rc_intercept_ensure(why, n))
        return REGCACHE_VALIDATE_HOOKS;
    rc_set_error("validation TAG_CHECK: %s", why);
    return REGCACHE_VALIDATE_TAG_CHECK;
}

int regcache_create(const struct regcache_params *params, regcache_t **out)
{
    if (out)
        *out = NULL;
    if (!params || !out)
        return REGCACHE_ERR_INVALID;
    rc_clear_error();

    struct regcache *c;
    /* The page index shards are cache-line aligned. */
    if (posix_memalign((void **)&c, 64, sizeof(*c))) {
        rc_set_error("out of memory allocating the cache");
        return REGCACHE_ERR_NO_MEMORY;
    }
    memset(c, 0, sizeof(*c));
    int rc = rc_options_resolve(params, &c->opts);
    if (rc) {
        free(c);
        return rc;
    }
    const struct regcache_params *p = &c->opts.params;
    if (p->backend) {
        c->backend = *p->backend;
    } else {
        rc = rc_verbs_backend_create(p, &c->backend, &c->method_used);
        if (rc) {
            free(c);
            return rc;
        }
        c->builtin = true;
    }
    c->shift = log2_of(p->alignment);
    c->host_page = (size_t)sysconf(_SC_PAGESIZE);
    c->validation = resolve_validation(&c->opts);
    c->tag_check = c->validation == REGCACHE_VALIDATE_TAG_CHECK;
    rc_memory_select(&c->backend, &c->mem);
    if (rc_page_index_init(&c->index, c->shift) != REGCACHE_OK) {
        if (c->builtin)
            rc_verbs_backend_destroy(&c->backend);
        free(c);
        rc_set_error("out of memory allocating the page index");
        return REGCACHE_ERR_NO_MEMORY;
    }
    rc_itree_init(&c->tree);
    rc_entry_pool_init(&c->pool);
    for (int i = 0; i <= RC_MAX_DEVICES; i++)
        rc_lru_init(&c->dev[i].lru);
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->registered, NULL);
    c->fork_generation = rc_fork_generation();
    rc_registry_add(c);
    *out = c;
    return REGCACHE_OK;
}

void regcache_destroy(regcache_t *c)
{
    if (!c)
        return;
    bool child = c->fork_generation != rc_fork_generation();
    /* A fork child's registry no longer lists inherited caches. */
    if (!child)
        rc_registry_remove(c);
    rc_cache_drain(c);
    if (c->opts.stats_dump)
        rc_stats_dump(c);
    rc_page_index_fini(&c->index);
    rc_entry_pool_fini(&c->pool);
    for (int i = 0; i <= RC_MAX_DEVICES; i++)
        rc_lru_fini(&c->dev[i].lru);
    if (c->builtin)
        rc_verbs_backend_destroy(&c->backend);
    pthread_cond_destroy(&c->registered);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

int regcache_validation_mode(const regcache_t *c)
{
    return c ? c->validation : REGCACHE_ERR_INVALID;
}

const char *regcache_validation_reason(const regcache_t *c)
{
    return c ? c->opts.validation_reason : NULL;
}

int regcache_method_used(const regcache_t *c)
{
    if (!c)
        return REGCACHE_ERR_INVALID;
    return c->builtin ? c->method_used : 0;
}
