/* The fork generation (fork_generation.h). */
#include "fork_generation.h"

#include <pthread.h>

atomic_uint rc_fork_generation_now;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void child(void)
{
    atomic_fetch_add(&rc_fork_generation_now, 1);
}

static void install(void)
{
    pthread_atfork(NULL, NULL, child);
}

void rc_fork_generation_watch(void)
{
    pthread_once(&once, install);
}
