/* A transport over a real provider, written as one is against the header:
 * its buffers packed one after another in a few mappings (neighbours
 * overlap once rounded to 64 KiB), each a send buffer that the peer reads
 * or a receive buffer that the peer writes, got with that access; each
 * registration's rkey packed by on_register and advertised to the peer at
 * its first use; the peer's keys revoked through on_leave, counted by
 * reason.  Every transfer goes through the key the peer holds, and is
 * checked byte for byte.  Run under the default merge policy and under
 * `all`: the default revokes no key for a merge and registers at most
 * twice as often as `all`, which does merge. */
#include "vm_env.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define MAPPINGS 2
#define MAPPING ((size_t)1 << 20)
#define MAX_BUFFERS 128
#define MAX_LEN ((size_t)72 << 10)
#define OPS 400
#define IN_FLIGHT 4
#define SEND IBV_ACCESS_REMOTE_READ
#define RECV (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
#define PEER_KEYS 1024

static struct vm_dev dev;

struct buffer {
    char *addr;
    size_t len;
    int access;
};

/* What the transport keeps in each entry's private data. */
struct packed_key {
    uint32_t rkey;
    int advertised;
};

/* The peer's keys, and what the transport's callbacks counted. */
struct peer {
    uint32_t keys[PEER_KEYS];
    int n;
    uint64_t advertised, revoked[REGCACHE_REASON_COUNT];
};

static bool peer_has(const struct peer *p, uint32_t rkey)
{
    for (int i = 0; i < p->n; i++)
        if (p->keys[i] == rkey)
            return true;
    return false;
}

static int pack(void *arg, regcache_entry_t *entry, unsigned rail, void *handle, void *priv)
{
    (void)arg, (void)entry, (void)rail;
    *(struct packed_key *)priv = (struct packed_key){ ((struct ibv_mr *)handle)->rkey, 0 };
    return 0;
}

static void revoke(void *arg, const struct regcache_leave *l)
{
    struct peer *p = arg;
    const struct packed_key *k = l->priv;
    if (!k->advertised)
        return;
    p->revoked[l->reason]++;
    for (int i = 0; i < p->n; i++)
        if (p->keys[i] == k->rkey) {
            p->keys[i] = p->keys[--p->n];
            return;
        }
    fail_msg("revoked rkey %#x, which the peer never had", k->rkey);
}

/* The key of a held entry, advertised to the peer at its first use. */
static uint32_t advertise(struct peer *p, regcache_entry_t *e)
{
    struct packed_key *k = regcache_entry_priv(e);
    if (!k->advertised) {
        assert_true(p->n < PEER_KEYS);
        p->keys[p->n++] = k->rkey;
        p->advertised++;
        k->advertised = 1;
    }
    return k->rkey;
}

static uint64_t next(uint64_t *rng)
{
    *rng ^= *rng << 13, *rng ^= *rng >> 7, *rng ^= *rng << 17;
    return *rng;
}

/* The mappings cut into buffers of 8 to 72 KiB, each a send or a receive
 * buffer; how many. */
static size_t cut(char *const map[MAPPINGS], struct buffer *b)
{
    uint64_t rng = 0x2545f4914f6cdd1dull;
    size_t n = 0;
    for (int m = 0; m < MAPPINGS; m++)
        for (size_t off = 0; n < MAX_BUFFERS;) {
            size_t len = (8 + next(&rng) % 65) << 10;
            if (off + len > MAPPING)
                break;
            b[n++] = (struct buffer){ map[m] + off, len, next(&rng) & 1 ? SEND : RECV };
            off += len;
        }
    return n;
}

struct run {
    uint64_t registrations, merged, revoked, advertised;
};

/* OPS transfers, each on one buffer, mostly a neighbour of the last, with
 * IN_FLIGHT held at once; the peer reads a send buffer and writes a
 * receive buffer through the key it holds.  host_merge -1: the default. */
static struct run transfers(const struct buffer *b, size_t n, int host_merge)
{
    static struct peer peer;
    memset(&peer, 0, sizeof(peer));
    struct regcache_params p;
    vm_params_init(&p, VM_ACCESS_ALL, 0);
    p.pd = dev.pd;
    p.priv_size = sizeof(struct packed_key);
    p.on_register = pack;
    p.on_leave = revoke;
    p.callback_arg = &peer;
    if (host_merge >= 0)
        p.host_merge = host_merge;
    regcache_t *cache = vm_cache_create(&p);
    struct loopback lb;
    assert_int_equal(loopback_create(dev.pd, &lb), 0);
    char *stage = vm_pages(MAX_LEN);
    regcache_entry_t *se;
    assert_int_equal(regcache_get_access(cache, 0, stage, MAX_LEN, IBV_ACCESS_LOCAL_WRITE, 0, &se),
                     REGCACHE_OK);

    regcache_entry_t *flight[IN_FLIGHT] = { 0 };
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    size_t at = 0;
    for (int i = 0; i < OPS; i++) {
        uint64_t x = next(&rng);
        at = x % 4 ? (at + n + (x >> 8) % 3 - 1) % n : (x >> 8) % n;
        const struct buffer *buf = &b[at];
        regcache_entry_t **slot = &flight[i % IN_FLIGHT];
        regcache_put(cache, *slot);
        int rc = regcache_get_access(cache, 0, buf->addr, buf->len, buf->access, 0, slot);
        if (rc != REGCACHE_OK)
            fail_msg("get %d: %s: %s", i, regcache_err_name(rc), regcache_last_error());
        uint32_t rkey = advertise(&peer, *slot);
        assert_true(peer_has(&peer, rkey));
        bool send = buf->access == SEND;
        vm_fill(send ? buf->addr : stage, buf->len, i);
        rc = vm_rdma(&lb, send ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE, stage, vm_lkey(se),
                     buf->addr, rkey, buf->len);
        if (rc != IBV_WC_SUCCESS)
            fail_msg("transfer %d (%s of %zu bytes, rkey %#x): completion status %d", i,
                     send ? "READ" : "WRITE", buf->len, rkey, rc);
        assert_memory_equal(stage, buf->addr, buf->len);
    }
    for (int i = 0; i < IN_FLIGHT; i++)
        regcache_put(cache, flight[i]);
    regcache_put(cache, se);
    struct regcache_stats s = vm_stats(cache);
    struct run r = { .registrations = s.registrations,
                     .merged = peer.revoked[REGCACHE_REASON_MERGED],
                     .advertised = peer.advertised };
    for (int why = 0; why < REGCACHE_REASON_COUNT; why++)
        r.revoked += peer.revoked[why];
    loopback_destroy(&lb);
    regcache_destroy(cache);
    vm_pages_free(stage, MAX_LEN);
    /* Every key advertised was revoked by the end (destroy included). */
    assert_int_equal(peer.n, 0);
    return r;
}

static void default_policy_spares_the_peers_keys(void **state)
{
    (void)state;
    int mrs = vm_provider_mrs();
    char *map[MAPPINGS];
    static struct buffer b[MAX_BUFFERS];
    for (int m = 0; m < MAPPINGS; m++)
        map[m] = vm_pages(MAPPING);
    size_t n = cut(map, b);
    struct run def = transfers(b, n, -1);
    struct run all = transfers(b, n, REGCACHE_HOST_MERGE_ALL);
    printf("transport: %zu buffers, %d transfers each run\n", n, OPS);
    printf("transport: default: %ju registrations, %ju keys advertised, %ju revoked "
           "(%ju by merges)\n",
           (uintmax_t)def.registrations, (uintmax_t)def.advertised, (uintmax_t)def.revoked,
           (uintmax_t)def.merged);
    printf("transport: all: %ju registrations, %ju keys advertised, %ju revoked (%ju by merges)\n",
           (uintmax_t)all.registrations, (uintmax_t)all.advertised, (uintmax_t)all.revoked,
           (uintmax_t)all.merged);
    assert_int_equal(def.merged, 0);
    assert_true(all.merged > 0); /* the workload does merge under `all` */
    assert_true(def.registrations <= 2 * all.registrations);
    for (int m = 0; m < MAPPINGS; m++)
        vm_pages_free(map[m], MAPPING);
    assert_int_equal(vm_provider_mrs(), mrs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(default_policy_spares_the_peers_keys),
    };
    vm_dev_open(&dev);
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    vm_dev_close(&dev);
    return failed;
}
