#include "loopback.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#define PORT 1
#define QP_ACCESS                                                                \
    (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | \
     IBV_ACCESS_REMOTE_ATOMIC)

struct ibv_context *loopback_open_first(const char **reason)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    struct ibv_context *ctx = NULL;
    if (!list || n == 0)
        *reason = "no RDMA device (ibv_get_device_list found none)";
    else if (!(ctx = ibv_open_device(list[0])))
        *reason = "ibv_open_device failed on the first RDMA device";
    if (list)
        ibv_free_device_list(list);
    return ctx;
}

/* The first non-zero GID of the port: RoCE (soft-RoCE included) addresses
 * every packet by GID, and a freshly created device may have empty slots
 * before the one that carries its link-local address. */
static int first_gid(struct ibv_context *ctx, union ibv_gid *gid)
{
    struct ibv_port_attr pa;
    if (ibv_query_port(ctx, PORT, &pa))
        return -1;
    for (int i = 0; i < pa.gid_tbl_len; i++)
        if (!ibv_query_gid(ctx, PORT, i, gid) &&
            (gid->global.subnet_prefix || gid->global.interface_id))
            return i;
    return -1;
}

/* RESET -> INIT -> RTR -> RTS towards remote_qpn on the same port. */
static int connect_qp(struct ibv_qp *qp, uint32_t remote_qpn, const union ibv_gid *gid,
                      int gid_index)
{
    struct ibv_qp_attr a = {
        .qp_state = IBV_QPS_INIT,
        .port_num = PORT,
        .qp_access_flags = QP_ACCESS,
    };
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        return errno;

    a = (struct ibv_qp_attr){
        .qp_state = IBV_QPS_RTR,
        .path_mtu = IBV_MTU_1024,
        .dest_qp_num = remote_qpn,
        .max_dest_rd_atomic = 1,
        .min_rnr_timer = 1,
        .ah_attr = {
            .is_global = 1,
            .grh = { .dgid = *gid, .sgid_index = (uint8_t)gid_index,
                     .hop_limit = 1 },
            .port_num = PORT,
        },
    };
    if (ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        return errno;

    /* rnr_retry 7 retries forever: a send that races ahead of the peer's
     * receive waits for it instead of failing. */
    a = (struct ibv_qp_attr){
        .qp_state = IBV_QPS_RTS,
        .timeout = 14,
        .retry_cnt = 7,
        .rnr_retry = 7,
        .max_rd_atomic = 1,
    };
    if (ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
        return errno;
    return 0;
}

int loopback_create(struct ibv_pd *pd, struct loopback *lb)
{
    union ibv_gid gid;
    int gid_index = first_gid(pd->context, &gid);
    memset(lb, 0, sizeof(*lb));
    if (gid_index < 0)
        return ENODEV;
    for (int i = 0; i < 2; i++) {
        lb->send_cq[i] = ibv_create_cq(pd->context, 16, NULL, NULL, 0);
        lb->recv_cq[i] = ibv_create_cq(pd->context, 16, NULL, NULL, 0);
        if (!lb->send_cq[i] || !lb->recv_cq[i])
            goto fail;
        struct ibv_qp_init_attr ia = {
            .send_cq = lb->send_cq[i],
            .recv_cq = lb->recv_cq[i],
            .qp_type = IBV_QPT_RC,
            .cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
        };
        lb->qp[i] = ibv_create_qp(pd, &ia);
        if (!lb->qp[i])
            goto fail;
    }
    for (int i = 0; i < 2; i++) {
        int err = connect_qp(lb->qp[i], lb->qp[1 - i]->qp_num, &gid, gid_index);
        if (err) {
            loopback_destroy(lb);
            return err;
        }
    }
    return 0;
fail:;
    int err = errno ? errno : ENOMEM;
    loopback_destroy(lb);
    return err;
}

void loopback_destroy(struct loopback *lb)
{
    for (int i = 0; i < 2; i++) {
        if (lb->qp[i])
            ibv_destroy_qp(lb->qp[i]);
        if (lb->send_cq[i])
            ibv_destroy_cq(lb->send_cq[i]);
        if (lb->recv_cq[i])
            ibv_destroy_cq(lb->recv_cq[i]);
    }
    memset(lb, 0, sizeof(*lb));
}

static double seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int loopback_wait(struct ibv_cq *cq, struct ibv_wc *wc)
{
    double deadline = seconds() + 10.0;
    int n;
    while ((n = ibv_poll_cq(cq, 1, wc)) == 0)
        if (seconds() > deadline)
            return ETIMEDOUT;
    return n == 1 ? 0 : EIO;
}

int loopback_send_wait(struct loopback *lb, int side, struct ibv_send_wr *wr)
{
    struct ibv_send_wr *bad;
    struct ibv_wc wc;
    wr->send_flags |= IBV_SEND_SIGNALED;
    if (ibv_post_send(lb->qp[side], wr, &bad) || loopback_wait(lb->send_cq[side], &wc))
        return -1;
    return (int)wc.status;
}
