/* The NVML seam: the few NVML calls the BAR1 budget makes, loaded with
 * dlopen("libnvidia-ml.so.1") so that neither nvml.h nor the library is
 * needed to build or load regcache.  Tests replace the table. */
#ifndef RC_NVML_SEAM_H
#define RC_NVML_SEAM_H

/* nvmlBAR1Memory_t's layout. */
struct rc_nvml_bar1 {
    unsigned long long total, free, used;
};

/* Each returns NVML's status: 0 is NVML_SUCCESS. */
struct rc_nvml_api {
    int (*Init)(void);
    int (*Shutdown)(void);
    int (*DeviceGetHandleByPciBusId)(const char *bus_id, void **device);
    int (*DeviceGetBAR1MemoryInfo)(void *device, struct rc_nvml_bar1 *bar1);
};

/* NVML's table, loaded once (thread safe, lock free), or NULL when
 * libnvidia-ml.so.1 cannot be loaded or lacks one of the calls. */
const struct rc_nvml_api *rc_nvml_api(void);

/* Tests: use `api` instead of NVML; NULL goes back to NVML. */
void rc_nvml_api_override(const struct rc_nvml_api *api);

#endif
