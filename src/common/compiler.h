/* What the compiler is told beyond C11, in one place. */
#ifndef RC_COMPILER_H
#define RC_COMPILER_H

#include <stddef.h>

/* Out of the hot paths' way: never inlined into them, laid out apart. */
#define COLD __attribute__((noinline, cold))

/* The structure of `type` whose `member` ptr points to. */
#define rc_container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

#endif
