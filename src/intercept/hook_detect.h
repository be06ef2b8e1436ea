/* How the library learns that the preload hook (libregcache-hook.so) sees
 * every CUDA free in this process. */
#ifndef RC_HOOK_LINK_H
#define RC_HOOK_LINK_H

/* Non-zero when the hook is loaded and reports that its interposition is
 * live (it exports int regcache_hook_active(void)). */
int rc_hook_active(void);

#endif
