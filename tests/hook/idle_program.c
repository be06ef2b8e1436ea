/* A program that never touches CUDA, run with the preload hook: the hook
 * must leave it as it found it.  It looks itself over through /proc and
 * exits 1 naming the first thing that is there and should not be:
 *   idle_program count   prints how many threads the process has (run
 *                        without the hook: a sanitizer runtime may have one
 *                        of its own);
 *   idle_program N       checks that the hook and libregcache.so are
 *                        loaded, libcuda is not, the process has N threads,
 *                        and nothing of /dev/shm is mapped or open, before
 *                        and after a dlsym on a library handle (the lookup
 *                        the hook interposes). */
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static DIR *open_dir(const char *path)
{
    DIR *d = opendir(path);
    if (!d) {
        perror(path);
        exit(1);
    }
    return d;
}

static int tasks(void)
{
    DIR *d = open_dir("/proc/self/task");
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static int mapped(const char *what)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) {
        perror("/proc/self/maps");
        exit(1);
    }
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, what) != NULL;
    fclose(f);
    return found;
}

static int shm_open_fd(void)
{
    DIR *d = open_dir("/proc/self/fd");
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        char link[300], target[4096];
        snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n > 0) {
            target[n] = '\0';
            found = strncmp(target, "/dev/shm/", 9) == 0;
        }
    }
    closedir(d);
    return found;
}

static int fail(const char *why)
{
    fprintf(stderr, "idle_program: %s\n", why);
    return 1;
}

static int check(int threads, const char *when)
{
    fprintf(stderr, "idle_program: checking %s\n", when);
    if (!mapped("/libregcache-hook.so"))
        return fail("libregcache-hook.so is not loaded (not preloaded?)");
    if (!mapped("/libregcache.so"))
        return fail("libregcache.so is not loaded");
    if (mapped("libcuda.so"))
        return fail("libcuda is loaded");
    if (mapped("/dev/shm/"))
        return fail("something of /dev/shm is mapped");
    if (shm_open_fd())
        return fail("a file of /dev/shm is open");
    if (tasks() != threads) {
        fprintf(stderr, "idle_program: %d threads, %d expected\n", tasks(), threads);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return fail("usage: idle_program count | idle_program THREADS");
    if (strcmp(argv[1], "count") == 0) {
        printf("%d\n", tasks());
        return 0;
    }
    int threads = atoi(argv[1]);
    if (check(threads, "at start"))
        return 1;
    void *libc = dlopen("libc.so.6", RTLD_NOW);
    if (!libc || !dlsym(libc, "getpid"))
        return fail("dlsym on a library handle failed");
    return check(threads, "after a dlsym on a library handle");
}
