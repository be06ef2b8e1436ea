/*
 * rkey_revoke: how a transport keeps its own state per registration in the
 * cache and revokes the keys it handed to a peer.
 *
 * A "register once, send the key to the peer" transport (an rkey cache, a
 * registered-buffer API) packs each registration's remote key into the
 * entry's private data as the registration is made (params.on_register),
 * sends it to the peer the first time a buffer is used, and tells the peer
 * to forget it when the cache says the registration left
 * (params.on_leave): freed, invalidated, evicted.  The peer here is a
 * table in this process standing for the other side's key cache.
 *
 * The application frees its buffers with plain munmap(): the cache's host
 * memory monitor sees the pages go, and the notice comes before any get
 * can be served from them - at the latest in the next get of host memory,
 * or earlier on the monitor's own thread, which is why the peer's table
 * has a lock.  Where the monitor cannot watch (REGCACHE_HOST_MONITOR=off,
 * or memory it cannot follow), the example says so and keeps the explicit
 * contract: regcache_notify_free() before the munmap().  Last, the peer
 * asks for a key to be revoked while a transfer holds it:
 * regcache_entry_invalidate() takes the registration out of the cache at
 * once and says when its last hold is gone.
 *
 * With an RDMA device (soft-RoCE is enough) the built-in verbs backend
 * registers, and the callbacks decorate it; without one, a stand-in
 * backend makes up keys, so the example runs anywhere.  It exits non-zero
 * if the peer ever kept a key of freed memory.
 */
#include <regcache.h>

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define BUF_LEN ((size_t)1 << 20)
#define PEER_KEYS 64

/* What the transport keeps in each entry's private data. */
struct packed_key {
    uint64_t addr, len;
    uint32_t rkey;
    int sent; /* the peer has it */
};

/* The peer's view: the keys it may use, and how many it was told to drop.
 * on_leave may run on the monitor's thread: the lock. */
struct peer {
    pthread_mutex_t lock;
    uint32_t rkeys[PEER_KEYS];
    int n, revoked;
};

static void peer_add(struct peer *p, uint32_t rkey)
{
    pthread_mutex_lock(&p->lock);
    if (p->n < PEER_KEYS)
        p->rkeys[p->n++] = rkey;
    pthread_mutex_unlock(&p->lock);
}

static int peer_has(struct peer *p, uint32_t rkey)
{
    int has = 0;
    pthread_mutex_lock(&p->lock);
    for (int i = 0; i < p->n; i++)
        has |= p->rkeys[i] == rkey;
    pthread_mutex_unlock(&p->lock);
    return has;
}

static void peer_drop(struct peer *p, uint32_t rkey)
{
    pthread_mutex_lock(&p->lock);
    for (int i = 0; i < p->n; i++)
        if (p->rkeys[i] == rkey) {
            p->rkeys[i] = p->rkeys[--p->n];
            p->revoked++;
            break;
        }
    pthread_mutex_unlock(&p->lock);
}

static int peer_revoked(struct peer *p)
{
    pthread_mutex_lock(&p->lock);
    int n = p->revoked;
    pthread_mutex_unlock(&p->lock);
    return n;
}

static int peer_keys(struct peer *p)
{
    pthread_mutex_lock(&p->lock);
    int n = p->n;
    pthread_mutex_unlock(&p->lock);
    return n;
}

/* ---- the stand-in backend, without an RDMA device ----------------------- */

static uint32_t next_key = 0x1000;

static int standin_reg(void *arg, void *addr, size_t len, int device, int rail, void **handle)
{
    struct ibv_mr *mr = calloc(1, sizeof(*mr));
    (void)arg, (void)device, (void)rail;
    if (!mr)
        return 12; /* ENOMEM */
    mr->addr = addr;
    mr->length = len;
    mr->lkey = mr->rkey = next_key++;
    *handle = mr;
    return 0;
}

static void standin_dereg(void *arg, void *handle)
{
    (void)arg;
    free(handle);
}

/* ---- the transport's callbacks ------------------------------------------ */

/* A registration was made: pack its key (the built-in backend's handle is
 * the struct ibv_mr *; the stand-in's looks the same). */
static int pack(void *arg, regcache_entry_t *entry, unsigned rail, void *handle, void *priv)
{
    const struct ibv_mr *mr = handle;
    struct packed_key *k = priv;
    uintptr_t start;
    size_t len;
    (void)arg, (void)rail;
    regcache_entry_range(entry, &start, &len);
    *k = (struct packed_key){ .addr = start, .len = len, .rkey = mr->rkey };
    return 0;
}

/* The registration left the cache: if the peer has its key, revoke it. */
static void revoke(void *arg, const struct regcache_leave *l)
{
    struct peer *p = arg;
    const struct packed_key *k = l->priv;
    if (k->sent) {
        printf("rkey_revoke: revoke rkey %#x of [%#jx, +%ju) (%s)\n", k->rkey, (uintmax_t)k->addr,
               (uintmax_t)k->len, regcache_reason_name(l->reason));
        peer_drop(p, k->rkey);
    }
}

/* ---- a transfer ----------------------------------------------------------- */

/* What the transport does before the peer writes into buf: a held
 * registration with the access the peer needs, and its key sent once.
 * The hold is the caller's to put when the transfer completes. */
static regcache_entry_t *expose(regcache_t *cache, struct peer *p, void *buf, uint32_t *rkey)
{
    regcache_entry_t *e;
    int rc = regcache_get_access(cache, 0, buf, BUF_LEN,
                                 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, 0, &e);
    if (rc != REGCACHE_OK) {
        fprintf(stderr, "rkey_revoke: get: %s (%s)\n", regcache_strerror(rc),
                regcache_last_error());
        return NULL;
    }
    struct packed_key *k = regcache_entry_priv(e);
    if (!k->sent) {
        peer_add(p, k->rkey);
        k->sent = 1;
    }
    *rkey = k->rkey;
    return e;
}

/* A transfer: exposed, written by the peer, completed. */
static int transfer(regcache_t *cache, struct peer *p, void *buf, uint32_t *rkey)
{
    regcache_entry_t *e = expose(cache, p, buf, rkey);
    /* ... the peer writes, the completion comes ... */
    regcache_put(cache, e);
    return e ? 0 : -1;
}

static void *buffer(void)
{
    void *b = mmap(NULL, BUF_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return b == MAP_FAILED ? NULL : b;
}

/* Does the host memory monitor watch the cache's host entries?  It
 * counts those it cannot (host_unmonitored). */
static int watched(regcache_t *cache)
{
    struct regcache_stats s;
    return regcache_get_stats(cache, &s) == REGCACHE_OK && s.host_unmonitored == 0;
}

/* The application frees.  With the monitor watching, munmap() is all; the
 * cache hears of it by itself. */
static void release(regcache_t *cache, void *b)
{
    if (!watched(cache))
        regcache_notify_free(b, BUF_LEN);
    munmap(b, BUF_LEN);
}

/* The registration whose key the peer asked to revoke is gone. */
static void gone(void *arg)
{
    ++*(int *)arg;
}

int main(void)
{
    static struct peer peer = { .lock = PTHREAD_MUTEX_INITIALIZER };
    struct regcache_backend standin = { .reg = standin_reg, .dereg = standin_dereg };
    struct ibv_device **devs = ibv_get_device_list(NULL);
    struct ibv_context *ctx = devs && devs[0] ? ibv_open_device(devs[0]) : NULL;
    struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;

    struct regcache_params params;
    regcache_params_init(&params);
    params.host_memory = 1;
    if (pd)
        params.pd = pd;
    else
        params.backend = &standin;
    params.priv_size = sizeof(struct packed_key);
    params.on_register = pack;
    params.on_leave = revoke;
    params.callback_arg = &peer;
    printf("rkey_revoke: %s\n", pd ? ibv_get_device_name(devs[0])
                                   : "no RDMA device: a stand-in backend makes up the keys");

    regcache_t *cache;
    int rc = regcache_create(&params, &cache);
    if (rc != REGCACHE_OK) {
        fprintf(stderr, "rkey_revoke: create: %s (%s)\n", regcache_strerror(rc),
                regcache_last_error());
        return 1;
    }
    int bad = 0;
    uint32_t first, again, after;
    void *buf = buffer();
    if (!buf || transfer(cache, &peer, buf, &first) || transfer(cache, &peer, buf, &again))
        return 1;
    /* The second use was a hit: the same key, sent once. */
    bad |= again != first || peer_keys(&peer) != 1;
    printf("rkey_revoke: %s\n", watched(cache)
                                    ? "the host memory monitor watches the buffers: munmap() "
                                      "is all it takes"
                                    : "the buffers are not monitored: regcache_notify_free() "
                                      "before munmap()");

    release(cache, buf);
    buf = buffer(); /* mostly the same address again */
    /* Served from the new pages, never the old registration: the notice
     * came first. */
    if (!buf || transfer(cache, &peer, buf, &after))
        return 1;
    bad |= peer_has(&peer, first) || peer_revoked(&peer) != 1;
    bad |= after == first || !peer_has(&peer, after);
    printf("rkey_revoke: rkey %#x sent, revoked when freed; new memory got rkey %#x\n", first,
           after);

    /* The peer asks to revoke `after` while a transfer holds it: out of
     * the cache now (the notice revokes it), gone at the transfer's put. */
    int freed = 0;
    uint32_t held;
    regcache_entry_t *e = expose(cache, &peer, buf, &held);
    if (!e || regcache_entry_invalidate(cache, e, gone, &freed) != REGCACHE_OK)
        return 1;
    bad |= peer_has(&peer, held) || freed != 0;
    /* ... the transfer in flight completes with the key it had ... */
    regcache_put(cache, e);
    bad |= freed != 1;
    printf("rkey_revoke: rkey %#x revoked at the peer's request, deregistered at its put\n", held);

    release(cache, buf);
    regcache_destroy(cache);
    bad |= peer_keys(&peer) != 0;
    if (pd)
        ibv_dealloc_pd(pd);
    if (ctx)
        ibv_close_device(ctx);
    if (devs)
        ibv_free_device_list(devs);
    printf("rkey_revoke: %s\n",
           bad ? "FAILED: the peer kept a stale key" : "peer's keys all current");
    return bad;
}
