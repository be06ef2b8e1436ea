/* GPU keys for the shared BAR1 ledger (see gpu_key.h). */
#include "gpu_key.h"

#include <stdio.h>

#include "cuda_seam.h"
#include "regcache.h"

int rc_gpu_key(int device, char *key, size_t n)
{
    const struct rc_cuda_api *api = rc_cuda_api();
    /* Without a driver only a custom backend's query describes memory (as
     * in tests): its device numbers are the only names there are. */
    if (!api) {
        snprintf(key, n, "dev%d", device);
        return REGCACHE_OK;
    }
    /* The ordinal would not do: CUDA_VISIBLE_DEVICES renumbers GPUs per
     * process, the UUID names the same GPU in all of them.  (Under MIG,
     * cuDeviceGetUuid_v2 names the instance, not the GPU.) */
    CUdevice dev;
    CUuuid id;
    CUresult r = api->DeviceGet(&dev, device);
    if (r != CUDA_SUCCESS)
        return rc_cuda_error(api, "cuDeviceGet", r);
    r = api->DeviceGetUuid(&id, dev);
    if (r != CUDA_SUCCESS)
        return rc_cuda_error(api, "cuDeviceGetUuid_v2", r);
    const unsigned char *b = (const unsigned char *)id.bytes;
    snprintf(key, n, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
    return REGCACHE_OK;
}
