/* A skeleton of the hit's protocol (src/core/hit_path.c): the least a hit
 * can do and keep its guarantees, so that a machine's floor for a hit shows
 * beside the library's (ab/floor.c, and the hits workload's "skeleton"
 * row).  A get hashes the page, probes one slot of a sharded table under
 * the shard's sequence counter, publishes a hold in a slot of the thread's
 * own, fences (FENCED: a NOTIFY or HOOKS hit, with the library's locked
 * instruction) or not (UNFENCED; TAGGED: TAG_CHECK, whose other side pays
 * a membarrier), reads the counter again and the slot's LRU stamp and hands
 * out; TAGGED then asks bench_null_query for the tag and compares.  A put
 * clears the hold and reads the table's flags.  Nothing else: no hit
 * counters, no note for the put, no rails or access to check, no host
 * monitor to ask. */
#ifndef BENCH_SKELETON_H
#define BENCH_SKELETON_H

#include <stddef.h>
#include <stdint.h>

enum bench_skeleton_kind { BENCH_SKELETON_FENCED, BENCH_SKELETON_UNFENCED, BENCH_SKELETON_TAGGED };

struct bench_skeleton;

/* A table of n BENCH_REGION regions from base, each with the null query's
 * buffer id; the calling thread's holds are the only ones it serves.  NULL
 * without memory. */
struct bench_skeleton *bench_skeleton_new(uintptr_t base, size_t n);
void bench_skeleton_free(struct bench_skeleton *s);

/* A get (0, or -1 where it would take a slow path: never on the calling
 * thread of bench_skeleton_new() for a page of its regions) and its put,
 * called through pointers as a library's functions are through the PLT. */
extern int (*volatile bench_skeleton_get[3])(struct bench_skeleton *s, uintptr_t addr, size_t len,
                                             void **handle);
extern void (*volatile bench_skeleton_put)(struct bench_skeleton *s, void *handle);

#endif
