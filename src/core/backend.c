#include "backend.h"

static int user_reg(void *arg, uintptr_t addr, size_t len, int device, unsigned rail, int access,
                    void **handle)
{
    const struct rc_backend *b = arg;
    (void)access;
    return b->user.reg(b->user.arg, (void *)addr, len, device, (int)rail, handle);
}

static void user_dereg(void *arg, void *handle)
{
    const struct rc_backend *b = arg;
    b->user.dereg(b->user.arg, handle);
}

void rc_backend_adapt(struct rc_backend *b, const struct regcache_backend *user)
{
    *b = (struct rc_backend){ .reg = user_reg, .dereg = user_dereg, .arg = b, .user = *user };
}
