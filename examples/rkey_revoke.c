/*
 * rkey_revoke: how a transport keeps its own state per registration in the
 * cache and revokes the keys it handed to a peer when the memory goes.
 *
 * A "register once, send the key to the peer" transport (an rkey cache, a
 * registered-buffer API) packs each registration's remote key into the
 * entry's private data as the registration is made (params.on_register),
 * sends it to the peer the first time a buffer is used, and tells the peer
 * to forget it when the cache says the registration left
 * (params.on_leave): freed, invalidated, evicted.  The peer here is a
 * table in this process standing for the other side's key cache.
 *
 * With an RDMA device (soft-RoCE is enough) the built-in verbs backend
 * registers, and the callbacks decorate it; without one, a stand-in
 * backend makes up keys, so the example runs anywhere.  It exits non-zero
 * if the peer ever kept a key of freed memory.
 */
#include <regcache.h>

#include <infiniband/verbs.h>
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

/* The peer's view: the keys it may use, and how many it was told to drop. */
struct peer {
    uint32_t rkeys[PEER_KEYS];
    int n, revoked;
};

static void peer_add(struct peer *p, uint32_t rkey)
{
    if (p->n < PEER_KEYS)
        p->rkeys[p->n++] = rkey;
}

static int peer_has(const struct peer *p, uint32_t rkey)
{
    for (int i = 0; i < p->n; i++)
        if (p->rkeys[i] == rkey)
            return 1;
    return 0;
}

static void peer_drop(struct peer *p, uint32_t rkey)
{
    for (int i = 0; i < p->n; i++)
        if (p->rkeys[i] == rkey) {
            p->rkeys[i] = p->rkeys[--p->n];
            p->revoked++;
            return;
        }
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
 * registration with the access the peer needs, and its key sent once. */
static int expose(regcache_t *cache, struct peer *p, void *buf, uint32_t *rkey)
{
    regcache_entry_t *e;
    int rc = regcache_get_access(cache, 0, buf, BUF_LEN,
                                 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, 0, &e);
    if (rc != REGCACHE_OK) {
        fprintf(stderr, "rkey_revoke: get: %s (%s)\n", regcache_strerror(rc),
                regcache_last_error());
        return -1;
    }
    struct packed_key *k = regcache_entry_priv(e);
    if (!k->sent) {
        peer_add(p, k->rkey);
        k->sent = 1;
    }
    *rkey = k->rkey;
    /* ... the peer writes, the completion comes ... */
    regcache_put(cache, e);
    return 0;
}

static void *buffer(void)
{
    void *b = mmap(NULL, BUF_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return b == MAP_FAILED ? NULL : b;
}

/* The application frees: the cache hears of it first (the preload hook
 * does this for CUDA memory; host memory tells it so). */
static void release(void *b)
{
    regcache_notify_free(b, BUF_LEN);
    munmap(b, BUF_LEN);
}

int main(void)
{
    static struct peer peer;
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
    if (!buf || expose(cache, &peer, buf, &first) || expose(cache, &peer, buf, &again))
        return 1;
    /* The second use was a hit: the same key, sent once. */
    bad |= again != first || peer.n != 1;

    release(buf);
    bad |= peer_has(&peer, first) || peer.revoked != 1;

    buf = buffer(); /* mostly the same address again */
    if (!buf || expose(cache, &peer, buf, &after))
        return 1;
    bad |= after == first || !peer_has(&peer, after);
    printf("rkey_revoke: rkey %#x sent, revoked when freed; new memory got rkey %#x\n", first,
           after);

    release(buf);
    regcache_destroy(cache);
    bad |= peer.n != 0;
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
