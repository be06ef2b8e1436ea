/*
 * pingpong: messages bounce between two RC queue pairs on the first RDMA
 * device, and every buffer a transfer touches gets its memory registration
 * from regcache.
 *
 * This is the pattern a communication library follows: it cannot know
 * whether the user's buffer was seen before, so it asks the cache around
 * every transfer (regcache_get before posting, regcache_put once the
 * completion says the NIC is done with the memory).  Only the first
 * transfer on a buffer pays for ibv_reg_mr; the rest are hits.
 *
 * Both ends live in this process and talk through the device's loopback,
 * so the example needs one RDMA device (soft-RoCE is enough) and nothing
 * else.  Run it with no arguments; it prints the cache's hit and miss
 * counts and exits non-zero if a message arrived damaged.
 */
#include "loopback.h"

#include <regcache.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ROUNDS 200
#define SLOTS 4      /* message buffers per side, used in turn */
#define MSG_LEN 4096 /* one page per slot; a side's slots share one registration */

/* Send MSG_LEN bytes from src on QP `from` into dst on the other QP.
 * Returns 0, or -1 after printing what failed. */
static int transfer(regcache_t *cache, struct loopback *lb, int from, char *src, char *dst)
{
    int to = 1 - from;
    regcache_entry_t *src_e, *dst_e;
    int rc;

    /* The receiver's buffer must stay registered until its receive
     * completes, so its entry is held across the whole exchange. */
    if ((rc = regcache_get(cache, dst, MSG_LEN, &dst_e))) {
        fprintf(stderr, "pingpong: get(dst): %s\n", regcache_strerror(rc));
        return -1;
    }
    struct ibv_sge rsge = { .addr = (uintptr_t)dst,
                            .length = MSG_LEN,
                            .lkey = regcache_entry_mr(dst_e)->lkey };
    struct ibv_recv_wr rwr = { .sg_list = &rsge, .num_sge = 1 }, *bad_r;
    if (ibv_post_recv(lb->qp[to], &rwr, &bad_r)) {
        perror("pingpong: ibv_post_recv");
        regcache_put(cache, dst_e);
        return -1;
    }

    if ((rc = regcache_get(cache, src, MSG_LEN, &src_e))) {
        fprintf(stderr, "pingpong: get(src): %s\n", regcache_strerror(rc));
        regcache_put(cache, dst_e);
        return -1;
    }
    struct ibv_sge ssge = { .addr = (uintptr_t)src,
                            .length = MSG_LEN,
                            .lkey = regcache_entry_mr(src_e)->lkey };
    struct ibv_send_wr swr = { .sg_list = &ssge, .num_sge = 1, .opcode = IBV_WR_SEND };
    int status = loopback_send_wait(lb, from, &swr);
    /* The send completed (or failed): the NIC no longer reads src. */
    regcache_put(cache, src_e);

    struct ibv_wc wc;
    int recv_ok = status == IBV_WC_SUCCESS && loopback_wait(lb->recv_cq[to], &wc) == 0 &&
                  wc.status == IBV_WC_SUCCESS;
    regcache_put(cache, dst_e);
    if (!recv_ok) {
        fprintf(stderr, "pingpong: transfer failed (send status %d)\n", status);
        return -1;
    }
    return 0;
}

/* One round trip on slot `slot`: ping from side 0, pong back from side 1,
 * each message stamped with the round so that a stale buffer shows. */
static int round_trip(regcache_t *cache, struct loopback *lb, char *side[2], int round)
{
    char *a = side[0] + (size_t)(round % SLOTS) * MSG_LEN;
    char *b = side[1] + (size_t)(round % SLOTS) * MSG_LEN;
    memset(a, 'a' + round % 26, MSG_LEN);
    if (transfer(cache, lb, 0, a, b))
        return -1;
    for (size_t i = 0; i < MSG_LEN; i++)
        b[i] = (char)(b[i] + 1); /* the pong is the ping, changed */
    if (transfer(cache, lb, 1, b, a))
        return -1;
    if (a[0] != 'a' + round % 26 + 1 || memcmp(a, a + 1, MSG_LEN - 1)) {
        fprintf(stderr, "pingpong: round %d came back damaged\n", round);
        return -1;
    }
    return 0;
}

int main(void)
{
    const char *why = NULL;
    struct ibv_context *ctx = loopback_open_first(&why);
    if (!ctx) {
        fprintf(stderr, "pingpong: %s\n", why);
        return 1;
    }
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct loopback lb;
    if (!pd || loopback_create(pd, &lb)) {
        fprintf(stderr, "pingpong: cannot set up queue pairs on %s\n",
                ibv_get_device_name(ctx->device));
        return 1;
    }

    /* One cache per protection domain.  The buffers here are host memory
     * from the heap, so host_memory must be on; GPU memory would go through
     * the same calls. */
    struct regcache_params params;
    regcache_params_init(&params);
    params.pd = pd;
    params.host_memory = 1;
    regcache_t *cache;
    int rc = regcache_create(&params, &cache);
    if (rc) {
        fprintf(stderr, "pingpong: regcache_create: %s (%s)\n", regcache_strerror(rc),
                regcache_last_error());
        return 1;
    }

    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char *side[2] = { aligned_alloc(page, SLOTS * MSG_LEN), aligned_alloc(page, SLOTS * MSG_LEN) };
    int failed = !side[0] || !side[1];
    for (int r = 0; r < ROUNDS && !failed; r++)
        failed = round_trip(cache, &lb, side, r) != 0;

    struct regcache_stats st;
    regcache_get_stats(cache, &st);
    printf("pingpong: %s, %d round trips of %d bytes: %s\n", ibv_get_device_name(ctx->device),
           ROUNDS, MSG_LEN, failed ? "FAILED" : "all data verified");
    printf("pingpong: cache hits %llu, misses %llu, registrations %llu\n",
           (unsigned long long)st.hits, (unsigned long long)st.misses,
           (unsigned long long)st.registrations);

    regcache_destroy(cache);
    free(side[0]);
    free(side[1]);
    loopback_destroy(&lb);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    return failed;
}
