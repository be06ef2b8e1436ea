#include "regcache.h"

#define RC_STR2(x) #x
#define RC_STR(x) RC_STR2(x)

const char *regcache_version(void)
{
    return RC_STR(REGCACHE_VERSION_MAJOR) "." RC_STR(REGCACHE_VERSION_MINOR) "." RC_STR(
        REGCACHE_VERSION_PATCH);
}

const char *regcache_strerror(int status)
{
    switch (status) {
    case REGCACHE_OK:
        return "success";
    case REGCACHE_ERR_INVALID:
        return "invalid argument (NULL pointer, zero length, wrapping range or bad parameter)";
    case REGCACHE_ERR_NO_MEMORY:
        return "out of host memory";
    case REGCACHE_ERR_NOT_GPU:
        return "not GPU memory (host memory, unknown to CUDA, or already freed)";
    case REGCACHE_ERR_MANAGED:
        return "CUDA managed memory cannot be registered for GPUDirect RDMA";
    case REGCACHE_ERR_NO_SPACE:
        return "registration resources exhausted (BAR1 or pinned memory) and nothing left to evict";
    case REGCACHE_ERR_BACKEND:
        return "the registration backend failed";
    case REGCACHE_ERR_CUDA:
        return "a CUDA driver call failed";
    case REGCACHE_ERR_UNSUPPORTED:
        return "registration method not available on this system";
    case REGCACHE_ERR_FORKED:
        return "cache was inherited across fork(); create a new cache in the child";
    case REGCACHE_ERR_RANGE:
        return "range extends past the end of its allocation";
    default:
        return "unknown status code";
    }
}
