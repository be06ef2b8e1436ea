/* Two reliable-connected queue pairs on one RDMA port, connected to each
 * other: the smallest setup that moves data through a real provider without
 * a second machine or an out-of-band channel.  Used by the ping-pong example
 * and by the VM tests. */
#ifndef LOOPBACK_H
#define LOOPBACK_H

#include <infiniband/verbs.h>

struct loopback {
    /* Send and receive completions on separate queues, so that waiting for
     * one kind never consumes the other. */
    struct ibv_cq *send_cq[2];
    struct ibv_cq *recv_cq[2];
    struct ibv_qp *qp[2];
};

/* The first RDMA device, opened, or NULL with *reason saying why. */
struct ibv_context *loopback_open_first(const char **reason);

/* Create the pair on port 1 of pd's device and connect it.  Both QPs allow
 * remote read, write and atomics, so that only the memory registrations
 * decide what the peer may touch.  Returns 0 or an errno value. */
int loopback_create(struct ibv_pd *pd, struct loopback *lb);

/* Destroy what loopback_create() made; safe on a zeroed struct. */
void loopback_destroy(struct loopback *lb);

/* Wait for one completion on cq.  Returns 0, or ETIMEDOUT after 10 seconds
 * (a lost completion must fail a test, not hang it). */
int loopback_wait(struct ibv_cq *cq, struct ibv_wc *wc);

/* Post one signaled send-queue request on side's QP and wait for its
 * completion.  Returns the completion status (IBV_WC_SUCCESS, ...) or -1
 * when it could not be posted or did not complete. */
int loopback_send_wait(struct loopback *lb, int side, struct ibv_send_wr *wr);

#endif
