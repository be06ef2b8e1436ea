#include "backend.h"

#include <stddef.h>
#include <string.h>

static int user_reg(void *arg, uintptr_t addr, size_t len, int device, unsigned rail, int access,
                    void *get_arg, void **handle)
{
    const struct rc_backend *b = arg;
    if (b->user.reg_access)
        return b->user.reg_access(b->user.arg, (void *)addr, len, device, (int)rail, access,
                                  get_arg, handle);
    return b->user.reg(b->user.arg, (void *)addr, len, device, (int)rail, handle);
}

static void user_dereg(void *arg, void *handle)
{
    const struct rc_backend *b = arg;
    b->user.dereg(b->user.arg, handle);
}

void rc_backend_adapt(struct rc_backend *b, const struct regcache_backend *user,
                      bool has_reg_access)
{
    *b = (struct rc_backend){ .reg = user_reg, .dereg = user_dereg, .arg = b };
    /* A program built against an older header handed a struct that ends
     * before reg_access: not a byte past it is read. */
    memcpy(&b->user, user,
           has_reg_access ? sizeof(*user) : offsetof(struct regcache_backend, reg_access));
}
