/* The releasing thread (host_release.h). */
#include "host_release.h"

#include <pthread.h>
#include <signal.h>

#include "cache.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static bool due, stopping; /* under lock */
static bool running;       /* under the monitor's life lock */
static pthread_t thread;

static void *releaser(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (!due && !stopping)
            pthread_cond_wait(&wake, &lock);
        if (!due)
            break;
        due = false;
        pthread_mutex_unlock(&lock);
        rc_host_watch_release();
        pthread_mutex_lock(&lock);
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

bool rc_host_release_start(void)
{
    if (running)
        return true;
    stopping = false;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    running = !pthread_create(&thread, NULL, releaser, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (running)
        pthread_setname_np(thread, "regcache-dereg");
    return running;
}

void rc_host_release_stop(void)
{
    if (!running)
        return;
    pthread_mutex_lock(&lock);
    stopping = true;
    pthread_cond_signal(&wake);
    pthread_mutex_unlock(&lock);
    pthread_join(thread, NULL);
    running = false;
}

void rc_host_release_later(void)
{
    pthread_mutex_lock(&lock);
    due = true;
    pthread_cond_signal(&wake);
    pthread_mutex_unlock(&lock);
}

void rc_host_release_forget(void)
{
    pthread_mutex_init(&lock, NULL);
    pthread_cond_init(&wake, NULL);
    due = stopping = running = false;
}
