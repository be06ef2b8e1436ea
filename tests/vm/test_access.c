/* Access per get and the leave notice on a real provider: a read-only
 * mapping registered for remote read and read by the peer, a send buffer
 * prefetched for remote read alone (the peer reads it, its write is
 * refused), a remote atomic on a registration got with atomic access,
 * remote write asked for without local write and written by the peer, and
 * an rkey sent to the peer revoked through the notice when its memory goes
 * (the peer's next access with it fails at the responder; a fresh get
 * gives a new rkey that works). */
#include "vm_env.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cmocka.h>

#define LEN ((size_t)64 << 10)

static struct vm_dev dev;

/* What a transport keeps per registration and what it revoked. */
struct packed_key {
    uint32_t rkey;
    uint64_t addr;
};

struct revocations {
    int n, reason;
    uint32_t rkey;
    int held;
    uint32_t only; /* when set, the notices of this key alone are counted */
};

static struct revocations revoked;

static int pack_rkey(void *arg, regcache_entry_t *entry, unsigned rail, void *handle, void *priv)
{
    struct ibv_mr *mr = handle;
    struct packed_key *k = priv;
    (void)arg;
    (void)rail;
    uintptr_t start;
    regcache_entry_range(entry, &start, NULL);
    *k = (struct packed_key){ .rkey = mr->rkey, .addr = start };
    return 0;
}

static void revoke(void *arg, const struct regcache_leave *l)
{
    const struct packed_key *k = l->priv;
    (void)arg;
    if (revoked.only && k->rkey != revoked.only)
        return;
    revoked.n++;
    revoked.reason = l->reason;
    revoked.rkey = k->rkey;
    revoked.held = l->held;
}

struct fixture {
    regcache_t *cache;
    struct loopback lb;
    char *local; /* the initiator's buffer (side 0) */
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    struct regcache_params p;
    /* Registered to the page: the test's buffers, mapped side by side,
     * never share a registration (rounded to 64 KiB, one would reach into
     * its neighbour, and an invalidation of one revoke both keys). */
    vm_params_init(&p, VM_ACCESS_ALL, 4096);
    p.pd = dev.pd;
    p.priv_size = sizeof(struct packed_key);
    p.on_register = pack_rkey;
    p.on_leave = revoke;
    f->cache = vm_cache_create(&p);
    memset(&revoked, 0, sizeof(revoked));
    assert_int_equal(loopback_create(dev.pd, &f->lb), 0);
    f->local = vm_pages(LEN);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    loopback_destroy(&f->lb);
    regcache_destroy(f->cache);
    vm_pages_free(f->local, LEN);
    free(f);
    return 0;
}

static regcache_entry_t *get_access(struct fixture *f, void *addr, size_t len, int access)
{
    regcache_entry_t *e = NULL;
    int rc = regcache_get_access(f->cache, 0, addr, len, access, 0, &e);
    if (rc != REGCACHE_OK)
        fail_msg("get_access(%#x): %s: %s", access, regcache_err_name(rc), regcache_last_error());
    return e;
}

/* A read-only mapping: the cache's access (with local write) cannot
 * register it, remote-read access can, and the peer reads it. */
static void read_only_mapping_read_by_the_peer(void **state)
{
    struct fixture *f = *state;
    char *ro = vm_pages(LEN);
    vm_fill(ro, LEN, 3);
    assert_int_equal(mprotect(ro, LEN, PROT_READ), 0);

    regcache_entry_t *e = NULL;
    assert_int_equal(regcache_get(f->cache, ro, LEN, &e), REGCACHE_ERR_BAD_ADDRESS);
    regcache_entry_t *re = get_access(f, ro, LEN, IBV_ACCESS_REMOTE_READ);
    assert_int_equal(regcache_entry_access(re), IBV_ACCESS_REMOTE_READ);
    regcache_entry_t *le = get_access(f, f->local, LEN, IBV_ACCESS_LOCAL_WRITE);

    memset(f->local, 0, LEN);
    assert_int_equal(vm_rdma(&f->lb, IBV_WR_RDMA_READ, f->local, vm_lkey(le), ro, vm_rkey(re), LEN),
                     IBV_WC_SUCCESS);
    assert_memory_equal(f->local, ro, LEN);
    /* A second get for reading is a hit on the read-only registration. */
    regcache_entry_t *again = get_access(f, ro, LEN, IBV_ACCESS_REMOTE_READ);
    assert_int_equal(vm_rkey(again), vm_rkey(re));
    regcache_put(f->cache, again);

    /* The provider enforces it: the peer may not write there.  Last on
     * this pair (the refusal moves the QP to the error state). */
    vm_write_refused(&f->lb, f->local, vm_lkey(le), ro, vm_rkey(re), 4096);
    regcache_put(f->cache, re);
    regcache_put(f->cache, le);
    vm_pages_free(ro, LEN);
}

/* A send buffer prefetched for remote read alone is registered with
 * exactly that access: a lookup finds it (nothing registered since the
 * prefetch), the peer reads it, and the provider refuses the peer's
 * write. */
static void prefetched_for_remote_read_alone(void **state)
{
    struct fixture *f = *state;
    char *send = vm_pages(LEN);
    vm_fill(send, LEN, 5);
    assert_int_equal(regcache_prefetch_access(f->cache, 0, send, LEN, IBV_ACCESS_REMOTE_READ),
                     REGCACHE_OK);
    assert_int_equal(regcache_prefetch_wait(f->cache), REGCACHE_OK);
    struct regcache_stats s = vm_stats(f->cache);
    assert_int_equal(s.registrations, 1);
    assert_int_equal(s.prefetch_failures, 0);

    regcache_entry_t *re = NULL;
    assert_int_equal(regcache_get_access(f->cache, 0, send, LEN, IBV_ACCESS_REMOTE_READ,
                                         REGCACHE_GET_LOOKUP, &re),
                     REGCACHE_OK);
    assert_int_equal(regcache_entry_access(re), IBV_ACCESS_REMOTE_READ);
    assert_int_equal(vm_stats(f->cache).registrations, 1);
    /* Its key is the one on_register packed as the registration was made. */
    uint32_t rkey = ((const struct packed_key *)regcache_entry_priv(re))->rkey;
    assert_int_equal(rkey, vm_rkey(re));

    regcache_entry_t *le = get_access(f, f->local, LEN, IBV_ACCESS_LOCAL_WRITE);
    memset(f->local, 0, LEN);
    assert_int_equal(vm_rdma(&f->lb, IBV_WR_RDMA_READ, f->local, vm_lkey(le), send, rkey, LEN),
                     IBV_WC_SUCCESS);
    assert_memory_equal(f->local, send, LEN);
    /* Last on this pair (the refusal moves the QP to the error state). */
    vm_write_refused(&f->lb, f->local, vm_lkey(le), send, rkey, 4096);
    regcache_put(f->cache, re);
    regcache_put(f->cache, le);
    vm_pages_free(send, LEN);
}

static int atomic_op(struct loopback *lb, enum ibv_wr_opcode op, uint64_t *result, uint32_t lkey,
                     uint64_t *remote, uint32_t rkey, uint64_t add_or_compare, uint64_t swap)
{
    struct ibv_sge sge = { .addr = (uintptr_t)result, .length = 8, .lkey = lkey };
    struct ibv_send_wr wr = {
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = op,
        .wr.atomic = { .remote_addr = (uintptr_t)remote,
                       .compare_add = add_or_compare,
                       .swap = swap,
                       .rkey = rkey },
    };
    return loopback_send_wait(lb, 0, &wr);
}

/* Fetch-and-add and compare-and-swap on a target got with remote atomic
 * access; the same memory got with the cache's access (no atomic) first,
 * and that registration, replaced, refuses the atomic. */
static void remote_atomic_on_an_atomic_registration(void **state)
{
    struct fixture *f = *state;
    uint64_t *target = vm_pages(LEN);
    uint64_t *result = (uint64_t *)f->local;
    target[0] = 40;
    regcache_entry_t *plain = NULL;
    assert_int_equal(regcache_get(f->cache, target, 8, &plain), REGCACHE_OK);
    uint32_t plain_rkey = vm_rkey(plain);

    regcache_entry_t *le = get_access(f, f->local, LEN, IBV_ACCESS_LOCAL_WRITE);
    regcache_entry_t *te = get_access(f, target, 8, IBV_ACCESS_REMOTE_ATOMIC);
    assert_int_equal(regcache_entry_access(te), VM_ACCESS_ALL | IBV_ACCESS_REMOTE_ATOMIC);
    assert_int_not_equal(vm_rkey(te), plain_rkey);

    assert_int_equal(atomic_op(&f->lb, IBV_WR_ATOMIC_FETCH_AND_ADD, result, vm_lkey(le), target,
                               vm_rkey(te), 2, 0),
                     IBV_WC_SUCCESS);
    assert_int_equal(*result, 40);
    assert_int_equal(target[0], 42);
    assert_int_equal(atomic_op(&f->lb, IBV_WR_ATOMIC_CMP_AND_SWP, result, vm_lkey(le), target,
                               vm_rkey(te), 42, 7),
                     IBV_WC_SUCCESS);
    assert_int_equal(*result, 42);
    assert_int_equal(target[0], 7);

    /* The replaced registration is held: still valid, and it never
     * allowed atomics.  Last on this pair. */
    assert_int_equal(atomic_op(&f->lb, IBV_WR_ATOMIC_FETCH_AND_ADD, result, vm_lkey(le), target,
                               plain_rkey, 1, 0),
                     IBV_WC_REM_ACCESS_ERR);
    assert_int_equal(target[0], 7);
    regcache_put(f->cache, plain);
    regcache_put(f->cache, te);
    regcache_put(f->cache, le);
    struct regcache_stats s = vm_stats(f->cache);
    assert_int_equal(s.entries, 2);
    vm_pages_free(target, LEN);
}

/* Remote write asked for without local write, a set verbs refuses: the
 * cache registers it with local write added, and the peer writes there. */
static void remote_write_without_local_write(void **state)
{
    struct fixture *f = *state;
    char *target = vm_pages(LEN);
    regcache_entry_t *te = get_access(f, target, LEN, IBV_ACCESS_REMOTE_WRITE);
    assert_int_equal(regcache_entry_access(te), IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE);
    regcache_entry_t *le = get_access(f, f->local, LEN, IBV_ACCESS_LOCAL_WRITE);
    vm_fill(f->local, LEN, 9);
    assert_int_equal(
        vm_rdma(&f->lb, IBV_WR_RDMA_WRITE, f->local, vm_lkey(le), target, vm_rkey(te), LEN),
        IBV_WC_SUCCESS);
    assert_memory_equal(target, f->local, LEN);
    regcache_put(f->cache, te);
    regcache_put(f->cache, le);
    vm_pages_free(target, LEN);
}

/* The rkey packed at registration is sent to the peer; its memory goes
 * (an explicit invalidation, or a free seen by notify_free) and the
 * notice hands the transport the key to revoke; the peer's next access
 * with it fails, and a fresh get gives a new rkey that works. */
static void revoked_by_the_notice(struct fixture *f, int by_free)
{
    char *target = vm_pages(LEN);
    regcache_entry_t *le = get_access(f, f->local, LEN, VM_ACCESS_ALL);
    regcache_entry_t *te = NULL;
    assert_int_equal(regcache_get(f->cache, target, LEN, &te), REGCACHE_OK);
    const struct packed_key *k = regcache_entry_priv(te);
    uint32_t sent = k->rkey; /* what the peer holds */
    assert_int_equal(sent, vm_rkey(te));
    vm_write_read(&f->lb, f->local, vm_lkey(le), target, sent, LEN, 1);
    regcache_put(f->cache, te);
    assert_int_equal(revoked.n, 0);
    /* The buffers' mappings may touch: then the target's registration,
     * rounded, merged the local one's, whose held entry the memory's going
     * reaches as well.  Only the target's key counts here. */
    revoked.only = sent;

    if (by_free) {
        regcache_notify_free(target, LEN);
        vm_pages_free(target, LEN);
        target = vm_pages(LEN);
    } else {
        assert_int_equal(regcache_invalidate(f->cache, target, LEN), REGCACHE_OK);
    }
    assert_int_equal(revoked.n, 1);
    assert_int_equal(revoked.rkey, sent);
    assert_int_equal(revoked.held, 0);
    assert_string_equal(regcache_reason_name(revoked.reason),
                        by_free ? "freed-hook" : "invalidate");

    assert_int_equal(regcache_get(f->cache, target, LEN, &te), REGCACHE_OK);
    uint32_t fresh = ((const struct packed_key *)regcache_entry_priv(te))->rkey;
    assert_int_not_equal(fresh, sent);
    vm_write_read(&f->lb, f->local, vm_lkey(le), target, fresh, LEN, 2);
    /* Last on this pair: the revoked key is refused by the responder. */
    vm_write_refused(&f->lb, f->local, vm_lkey(le), target, sent, LEN);
    regcache_put(f->cache, te);
    regcache_put(f->cache, le);
    vm_pages_free(target, LEN);
}

static void rkey_revoked_after_invalidate(void **state)
{
    revoked_by_the_notice(*state, 0);
}

static void rkey_revoked_after_free(void **state)
{
    revoked_by_the_notice(*state, 1);
}

/* Held when its memory goes: the notice comes at once, while the holder
 * still has the registration. */
static void held_rkey_revoked_at_once(void **state)
{
    struct fixture *f = *state;
    char *target = vm_pages(LEN);
    regcache_entry_t *te = NULL;
    assert_int_equal(regcache_get(f->cache, target, LEN, &te), REGCACHE_OK);
    uint32_t sent = vm_rkey(te);
    assert_int_equal(regcache_invalidate(f->cache, target, LEN), REGCACHE_OK);
    assert_int_equal(revoked.n, 1);
    assert_int_equal(revoked.held, 1);
    assert_int_equal(revoked.rkey, sent);
    regcache_put(f->cache, te);
    assert_int_equal(revoked.n, 1);
    vm_pages_free(target, LEN);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(read_only_mapping_read_by_the_peer, setup, teardown),
        cmocka_unit_test_setup_teardown(prefetched_for_remote_read_alone, setup, teardown),
        cmocka_unit_test_setup_teardown(remote_atomic_on_an_atomic_registration, setup, teardown),
        cmocka_unit_test_setup_teardown(remote_write_without_local_write, setup, teardown),
        cmocka_unit_test_setup_teardown(rkey_revoked_after_invalidate, setup, teardown),
        cmocka_unit_test_setup_teardown(rkey_revoked_after_free, setup, teardown),
        cmocka_unit_test_setup_teardown(held_rkey_revoked_at_once, setup, teardown),
    };
    vm_dev_open(&dev);
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    vm_dev_close(&dev);
    return failed;
}
