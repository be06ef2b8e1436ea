/* dmabuf registrations of the built-in backend: the export's mapping type
 * and each rail's way of registering it. */
#ifndef RC_DMABUF_REG_H
#define RC_DMABUF_REG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bounds.h"

struct ibv_pd;
struct ibv_mr;

/* REGCACHE_DMABUF_MAPPING, in the order of its words. */
enum rc_dmabuf_mapping {
    RC_MAPPING_AUTO,   /* PCIe where the driver takes it, else the default */
    RC_MAPPING_PCIE,   /* PCIe only: exports fail where the driver refuses */
    RC_MAPPING_DEFAULT /* the driver's default (flags 0) */
};

/* REGCACHE_DATA_DIRECT, in the order of its words. */
enum rc_data_direct {
    RC_DATA_DIRECT_AUTO, /* on the rails whose device is a data-direct one */
    RC_DATA_DIRECT_ON,   /* on every rail */
    RC_DATA_DIRECT_OFF
};

struct rc_dmabuf_reg {
    int mapping; /* enum rc_dmabuf_mapping */
    bool data_direct[RC_MAX_RAILS];
    char why[RC_MAX_RAILS][128]; /* each rail's choice, for the stats dump */
    /* AUTO: GPUs whose driver refused the PCIe mapping (NOT_SUPPORTED,
     * INVALID_VALUE): their exports go straight to the default. */
    atomic_bool pcie_refused[RC_MAX_DEVICES];
    atomic_uint_fast64_t fds; /* dmabufs exported and not yet closed */
};

/* Choose each rail's registration.  Errors: UNSUPPORTED (data_direct ON
 * without libmlx5's calls; rc_set_error() says which). */
int rc_dmabuf_reg_init(struct rc_dmabuf_reg *d, struct ibv_pd *const *pds, unsigned rails,
                       int mapping, int data_direct);

/* Register [addr, addr+len) of GPU `device` on rail's pd: export, register,
 * close.  0 or an errno value (EMFILE/ENFILE: no fd for the export). */
int rc_dmabuf_reg(struct rc_dmabuf_reg *d, struct ibv_pd *pd, unsigned rail, int device, int access,
                  void *addr, size_t len, struct ibv_mr **mr);

/* How `rail` registers GPU `device` now (-1: one not seen yet): enum
 * regcache_dmabuf_mapping, and 1 for data-direct. */
void rc_dmabuf_reg_choice(const struct rc_dmabuf_reg *d, int device, unsigned rail,
                          uint32_t *mapping, uint32_t *data_direct);

/* What each of `rails` rails does, one line each, into buf. */
void rc_dmabuf_reg_describe(const struct rc_dmabuf_reg *d, unsigned rails, char *buf, size_t n);

#endif
