/* The listener table at the core's edge (listeners.h). */
#include "listeners.h"

#include "cache.h"

/* The events ops takes. */
static unsigned takes(const struct rc_listener *ops)
{
    return (ops->before_miss ? RC_ON_BEFORE_MISS : 0) | (ops->after_miss ? RC_ON_AFTER_MISS : 0) |
           (ops->after_register ? RC_ON_AFTER_REGISTER : 0) | (ops->on_leave ? RC_ON_LEAVE : 0) |
           (ops->before_deregister ? RC_ON_BEFORE_DEREGISTER : 0) |
           (ops->on_invalidate ? RC_ON_INVALIDATE : 0) | (ops->on_alloc ? RC_ON_ALLOC : 0) |
           (ops->on_destroy ? RC_ON_DESTROY : 0) | (ops->after_drain ? RC_ON_AFTER_DRAIN : 0) |
           (ops->before_register ? RC_ON_BEFORE_REGISTER : 0);
}

int rc_listen(struct regcache *c, const struct rc_listener *ops, void *arg)
{
    struct rc_listeners *ls = &c->listeners;
    if (ls->n == RC_LISTENERS || (ops->before_register && ls->marker))
        return -1;
    if (ops->before_register)
        ls->marker = ls->n + 1;
    ls->l[ls->n].ops = ops;
    ls->l[ls->n].arg = arg;
    ls->l[ls->n].takes = takes(ops);
    ls->events |= ls->l[ls->n].takes;
    return (int)ls->n++;
}

void *rc_listener_arg(const struct regcache *c, const struct rc_listener *ops)
{
    for (unsigned i = 0; i < c->listeners.n; i++)
        if (c->listeners.l[i].ops == ops)
            return c->listeners.l[i].arg;
    return NULL;
}

void rc_listener_pending(struct regcache *c, int id, bool on)
{
    /* Clearing acquires: a listener that clears without the cache lock
     * then looks again at what it keeps, and sees what the setter stored
     * before setting. */
    if (on)
        atomic_fetch_or_explicit(&c->listeners_pending, 1u << id, memory_order_release);
    else
        atomic_fetch_and_explicit(&c->listeners_pending, ~(1u << id), memory_order_acq_rel);
    /* Before the stores that follow (the unlink): a notice that sees those
     * sees this (its acquire fence, invalidate.c). */
    atomic_thread_fence(memory_order_release);
}

static void view_of(const struct regcache_entry *e, enum regcache_reason why,
                    struct rc_entry_view *v)
{
    *v = (struct rc_entry_view){
        .id = e,
        .start =
            atomic_load_explicit(&((struct regcache_entry *)e)->match_start, memory_order_relaxed),
        .end = atomic_load_explicit(&((struct regcache_entry *)e)->match_end, memory_order_relaxed),
        .device = e->device,
        .rails =
            atomic_load_explicit(&((struct regcache_entry *)e)->rails_ready, memory_order_relaxed),
        .handles = e->handles,
        .default_access = (e->access & RC_ACCESS_DEFAULT) != 0,
        .why = why,
    };
}

void rc_listeners_locked(struct regcache *c, void (*fn)(void *arg), void *arg)
{
    rc_lock(&c->lock);
    fn(arg);
    rc_unlock(&c->lock);
}

void rc_listeners_ready_device(struct regcache *c, int device)
{
    if (device >= 0 && device < RC_MAX_DEVICES)
        (void)rc_device(c, device);
}

struct each {
    void (*fn)(void *arg, const struct rc_entry_view *e);
    void *arg;
};

static void visit(struct rc_itree_node *n, void *arg)
{
    struct each *each = arg;
    struct regcache_entry *e = rc_entry_of_node(n);
    if (e->state != RC_READY)
        return;
    struct rc_entry_view v;
    view_of(e, REGCACHE_REASON_COUNT, &v);
    each->fn(each->arg, &v);
}

void rc_listeners_each_locked(struct regcache *c,
                              void (*fn)(void *arg, const struct rc_entry_view *e), void *arg)
{
    struct each each = { fn, arg };
    rc_itree_visit_all(&c->tree, visit, &each);
}

/* One event to every listener that takes it. */
#define CALL(c, bit, event, ...)                                    \
    do {                                                            \
        struct rc_listeners *ls_ = &(c)->listeners;                 \
        for (unsigned i_ = 0; i_ < ls_->n; i_++)                    \
            if (ls_->l[i_].takes & (bit))                           \
                ls_->l[i_].ops->event(ls_->l[i_].arg, __VA_ARGS__); \
    } while (0)

int rc_listeners_call_before_miss(struct regcache *c, uintptr_t start, uintptr_t end,
                                  struct rc_req rq)
{
    struct rc_listeners *ls = &c->listeners;
    for (unsigned i = 0; i < ls->n; i++)
        if (ls->l[i].takes & RC_ON_BEFORE_MISS) {
            int rc = ls->l[i].ops->before_miss(ls->l[i].arg, start, end, rq);
            if (rc != REGCACHE_OK)
                return rc;
        }
    return REGCACHE_OK;
}

void rc_listeners_call_after_miss(struct regcache *c, uint64_t now)
{
    CALL(c, RC_ON_AFTER_MISS, after_miss, now);
}

void rc_listeners_call_registered(struct regcache *c, const struct regcache_entry *e)
{
    struct rc_entry_view v;
    view_of(e, REGCACHE_REASON_COUNT, &v);
    CALL(c, RC_ON_AFTER_REGISTER, after_register, &v);
}

void rc_listeners_call_leave(struct regcache *c, const struct regcache_entry *e,
                             enum regcache_reason why)
{
    struct rc_entry_view v;
    view_of(e, why, &v);
    CALL(c, RC_ON_LEAVE, on_leave, &v);
}

void rc_listeners_call_deregister(struct regcache *c, const struct regcache_entry *e)
{
    struct rc_entry_view v;
    view_of(e, (enum regcache_reason)e->reason, &v);
    CALL(c, RC_ON_BEFORE_DEREGISTER, before_deregister, &v);
}

void rc_listeners_call_invalidate(struct regcache *c, uintptr_t start, uintptr_t end)
{
    CALL(c, RC_ON_INVALIDATE, on_invalidate, start, end);
}

void rc_listeners_call_alloc(struct regcache *c, uintptr_t start, uintptr_t end, bool pinned_host)
{
    CALL(c, RC_ON_ALLOC, on_alloc, start, end, pinned_host);
}

/* The marker alone hears of what it marked. */
#define MARKER(c) (&(c)->listeners.l[(c)->listeners.marker - 1])

void *rc_listeners_call_before_register(struct regcache *c, const struct rc_watch_want *w)
{
    return MARKER(c)->ops->before_register(MARKER(c)->arg, w);
}

enum regcache_reason rc_listeners_call_before_publish(struct regcache *c, void *mark)
{
    return MARKER(c)->ops->before_publish(MARKER(c)->arg, mark);
}

void rc_listeners_call_after_deregister(struct regcache *c, void *mark)
{
    MARKER(c)->ops->after_deregister(MARKER(c)->arg, mark);
}

/* Nobody else uses the cache during its destroy (regcache_destroy's rule):
 * the table changes without the lock. */
void rc_listeners_call_destroy(struct regcache *c)
{
    struct rc_listeners *ls = &c->listeners;
    for (unsigned i = 0; i < ls->n; i++)
        if (ls->l[i].takes & RC_ON_DESTROY)
            ls->l[i].ops->on_destroy(ls->l[i].arg);
    ls->events = 0;
    for (unsigned i = 0; i < ls->n; i++) {
        ls->l[i].takes &= RC_ON_AFTER_DRAIN | RC_ON_BEFORE_REGISTER;
        ls->events |= ls->l[i].takes;
    }
    atomic_store_explicit(&c->listeners_pending, 0, memory_order_relaxed);
}

void rc_listeners_call_drained(struct regcache *c)
{
    struct rc_listeners *ls = &c->listeners;
    for (unsigned i = ls->n; i-- > 0;)
        if (ls->l[i].takes & RC_ON_AFTER_DRAIN)
            ls->l[i].ops->after_drain(ls->l[i].arg);
    ls->n = 0;
    ls->events = 0;
    ls->marker = 0;
}
