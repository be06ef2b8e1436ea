/* dmabuf registrations of the built-in backend (see dmabuf_reg.h).
 *
 * Where the GPU also reaches the CPU over a coherent link (GB200), an
 * export maps through that link unless it asks for the PCIe mapping, which
 * a NIC on PCIe needs; drivers without it refuse the flag (H200:
 * NOT_SUPPORTED), and their exports take the default.  A data-direct NIC
 * registers a PCIe-mapped export through mlx5dv with the DATA_DIRECT
 * access; every other registration is ibv_reg_dmabuf_mr.  Each
 * registration makes its own export, so rails that need different mappings
 * never share one. */
#include "dmabuf_reg.h"

#include <cuda.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dmabuf_export.h"
#include "last_error.h"
#include "regcache.h"
#include "verbs_seam.h"

static const char *const mapping_names[] = { "auto", "pcie", "default" };

int rc_dmabuf_reg_init(struct rc_dmabuf_reg *d, struct ibv_pd *const *pds, unsigned rails,
                       int mapping, int data_direct)
{
    d->mapping = mapping;
    for (unsigned r = 0; r < rails; r++) {
        char why[96] = "";
        int dd = data_direct == RC_DATA_DIRECT_OFF
                     ? 0
                     : rc_verbs_seam()->data_direct(pds[r], why, sizeof why);
        if (data_direct == RC_DATA_DIRECT_ON && dd < 0)
            return rc_fail(REGCACHE_ERR_UNSUPPORTED, "REGCACHE_DATA_DIRECT=on: %s", why);
        d->data_direct[r] = data_direct == RC_DATA_DIRECT_ON || dd == 1;
        if (d->data_direct[r] && mapping == RC_MAPPING_DEFAULT)
            snprintf(d->why[r], sizeof d->why[r],
                     "ibv_reg_dmabuf_mr: data direct needs the PCIe mapping, "
                     "REGCACHE_DMABUF_MAPPING=default");
        else if (d->data_direct[r])
            snprintf(d->why[r], sizeof d->why[r],
                     "mlx5dv_reg_dmabuf_mr DATA_DIRECT on PCIe-mapped exports%s",
                     data_direct == RC_DATA_DIRECT_ON ? " (REGCACHE_DATA_DIRECT=on)" : "");
        else
            snprintf(d->why[r], sizeof d->why[r], "ibv_reg_dmabuf_mr (data direct %s)",
                     data_direct == RC_DATA_DIRECT_OFF ? "off" : why);
    }
    return REGCACHE_OK;
}

/* What an export failure tells the cache: no file descriptor left is
 * exhaustion (evict and retry); UNSUPPORTED and CUDA errors are not, and
 * the export's rc_set_error() message says what went wrong. */
static int export_errno(int status)
{
    if (status == REGCACHE_ERR_NO_SPACE)
        return errno; /* EMFILE or ENFILE */
    return status == REGCACHE_ERR_UNSUPPORTED ? EOPNOTSUPP : EIO;
}

/* Export with the mapping type the cache uses on this GPU; in AUTO the
 * driver's first refusal of the PCIe mapping moves the GPU to the default
 * for good.  *pcie says which mapping the export has. */
static int export(struct rc_dmabuf_reg *d, int device, uintptr_t addr, size_t len, int *fd,
                  uint64_t *offset, bool *pcie)
{
    *pcie = d->mapping == RC_MAPPING_PCIE ||
            (d->mapping == RC_MAPPING_AUTO &&
             !atomic_load_explicit(&d->pcie_refused[device], memory_order_relaxed));
    int status = rc_dmabuf_export_mapped(
        addr, len, *pcie ? CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE : 0, fd, offset);
    if (status != REGCACHE_ERR_UNSUPPORTED || !*pcie || d->mapping != RC_MAPPING_AUTO)
        return status;
    *pcie = false;
    status = rc_dmabuf_export_mapped(addr, len, 0, fd, offset);
    if (status == REGCACHE_OK)
        atomic_store_explicit(&d->pcie_refused[device], true, memory_order_relaxed);
    return status;
}

/* The MR holds its own reference on the dmabuf, so the fd closes at once:
 * a cache keeps no file descriptor per entry, only one per registration in
 * flight.  The iova is the virtual address, so that the MR's keys work
 * with the addresses peers already use, exactly as for ibv_reg_mr. */
int rc_dmabuf_reg(struct rc_dmabuf_reg *d, struct ibv_pd *pd, unsigned rail, int device, int access,
                  void *addr, size_t len, struct ibv_mr **mr)
{
    int fd;
    uint64_t offset;
    bool pcie;
    int status = export(d, device, (uintptr_t)addr, len, &fd, &offset, &pcie);
    if (status != REGCACHE_OK)
        return export_errno(status);
    atomic_fetch_add_explicit(&d->fds, 1, memory_order_relaxed);
    const struct rc_verbs_seam *v = rc_verbs_seam();
    errno = 0;
    if (d->data_direct[rail] && pcie)
        *mr = v->reg_dmabuf_mr_data_direct(pd, offset, len, (uintptr_t)addr, fd, access);
    else
        *mr = v->reg_dmabuf_mr(pd, offset, len, (uintptr_t)addr, fd, access);
    int err = *mr ? 0 : errno ? errno : EIO;
    close(fd);
    atomic_fetch_sub_explicit(&d->fds, 1, memory_order_relaxed);
    return err;
}

void rc_dmabuf_reg_choice(const struct rc_dmabuf_reg *d, int device, unsigned rail,
                          uint32_t *mapping, uint32_t *data_direct)
{
    bool pcie =
        d->mapping == RC_MAPPING_PCIE ||
        (d->mapping == RC_MAPPING_AUTO &&
         (device < 0 || !atomic_load_explicit(&((struct rc_dmabuf_reg *)d)->pcie_refused[device],
                                              memory_order_relaxed)));
    *mapping = pcie ? REGCACHE_DMABUF_PCIE : REGCACHE_DMABUF_DEFAULT;
    *data_direct = d->data_direct[rail] && pcie; /* as rc_dmabuf_reg() decides */
}

void rc_dmabuf_reg_describe(const struct rc_dmabuf_reg *d, unsigned rails, char *buf, size_t n)
{
    size_t at = 0;
    int w = snprintf(buf, n, "dmabuf mapping %s", mapping_names[d->mapping]);
    at = w > 0 && (size_t)w < n ? (size_t)w : n;
    for (int g = 0; g < RC_MAX_DEVICES && at < n; g++) {
        if (!atomic_load_explicit(&((struct rc_dmabuf_reg *)d)->pcie_refused[g],
                                  memory_order_relaxed))
            continue;
        w = snprintf(buf + at, n - at, "; GPU %d refused the PCIe mapping: default", g);
        at = w > 0 && (size_t)w < n - at ? at + (size_t)w : n;
    }
    for (unsigned r = 0; r < rails && at < n; r++) {
        w = snprintf(buf + at, n - at, "\nrail %u: %s", r, d->why[r]);
        at = w > 0 && (size_t)w < n - at ? at + (size_t)w : n;
    }
}
