/* The process is exiting (exiting.h). */
#include "exiting.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

static atomic_bool exiting;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void now_exiting(void)
{
    atomic_store_explicit(&exiting, true, memory_order_relaxed);
}

static void register_handler(void)
{
    /* Without the handler (atexit() out of room) the threads go on
     * calling back until the library's own destructor stops them. */
    atexit(now_exiting);
}

void rc_exiting_watch(void)
{
    pthread_once(&once, register_handler);
}

bool rc_exiting(void)
{
    return atomic_load_explicit(&exiting, memory_order_relaxed);
}
