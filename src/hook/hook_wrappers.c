/* The hook's own kinds of wrapper: cuGetProcAddress in both forms, which
 * wrap what they hand out when it allocates or frees.  The memory kinds
 * are shared with the in-process interception (src/wrap). */
#include "hook.h"

/* What cuGetProcAddress found, wrapped when it allocates or frees. */
static CUresult wrap_found(CUresult result, const char *symbol, int version, void **pfn)
{
    if (result == CUDA_SUCCESS && symbol && pfn)
        *pfn = rc_hook_wrap(rc_hook_kind_of_proc(symbol, version), *pfn);
    return result;
}

CUresult rc_wrap_get_proc(void *real, const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    CUresult (*fn)(const char *, void **, int, cuuint64_t) =
        (CUresult(*)(const char *, void **, int, cuuint64_t))real;
    return wrap_found(fn(symbol, pfn, version, flags), symbol, version, pfn);
}

CUresult rc_wrap_get_proc_v2(void *real, const char *symbol, void **pfn, int version,
                             cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    CUresult (*fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
        (CUresult(*)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *))real;
    return wrap_found(fn(symbol, pfn, version, flags, status), symbol, version, pfn);
}
