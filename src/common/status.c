#include "status.h"

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
#define RC_MESSAGE(name, value, message) \
    case REGCACHE_##name:                \
        return message;
        REGCACHE_STATUS_TABLE(RC_MESSAGE)
#undef RC_MESSAGE
    }
    return "unknown status code";
}

const char *regcache_err_name(int status)
{
    switch (status) {
#define RC_NAME(name, value, message) \
    case REGCACHE_##name:             \
        return "REGCACHE_" #name;
        REGCACHE_STATUS_TABLE(RC_NAME)
#undef RC_NAME
    }
    return "unknown";
}

bool rc_status_known(int status)
{
    switch (status) {
#define RC_KNOWN(name, value, message) case REGCACHE_##name:
        REGCACHE_STATUS_TABLE(RC_KNOWN)
#undef RC_KNOWN
        return true;
    }
    return false;
}
