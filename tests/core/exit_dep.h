/* The library of test_exit_callbacks.c (exit_dep.c). */
#ifndef EXIT_DEP_H
#define EXIT_DEP_H

#define EXIT_DEP_LEN (64 * 1024)

/* Make the cache, leave one range cached until exit and start the
 * workers: what the cache says of its host memory ("host memory:
 * monitored ..." or why not), or NULL on failure. */
const char *exit_dep_start(void);
/* One more range, cached and put; NULL on failure. */
char *exit_dep_cached_range(void);
/* Deregistrations so far. */
int exit_dep_deregs(void);

#endif
