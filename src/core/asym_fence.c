#include "asym_fence.h"

#include <linux/membarrier.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

atomic_bool rc_heavy_fence_works;
static pthread_once_t setup_once = PTHREAD_ONCE_INIT;

static long membarrier(int cmd)
{
    return syscall(__NR_membarrier, cmd, 0, 0);
}

static void setup(void)
{
    long cmds = membarrier(MEMBARRIER_CMD_QUERY);
    bool ok = cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
              membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
    /* Light fences start relying on heavy ones only once the process is
     * registered, and are then never demoted. */
    atomic_store_explicit(&rc_heavy_fence_works, ok, memory_order_seq_cst);
}

void rc_fence_setup(void)
{
    pthread_once(&setup_once, setup);
}

void rc_fence_heavy(void)
{
    if (!atomic_load_explicit(&rc_heavy_fence_works, memory_order_seq_cst) ||
        membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0)
        atomic_thread_fence(memory_order_seq_cst);
}
