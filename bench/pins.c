/* Pin/unpin per size with a real registration: what a hit saves. */
#include "bench.h"

void bench_pins(const struct bench_src *s, const struct bench_pinner *p)
{
    static const size_t sizes[] = { (size_t)4 << 10,  (size_t)64 << 10,  (size_t)1 << 20,
                                    (size_t)16 << 20, (size_t)256 << 20, (size_t)1 << 30 };
    for (size_t k = 0; k < BENCH_NELEM(sizes); k++) {
        struct bench_row r = {
            .workload = "pins", .source = s->name, .impl = "backend", .size = sizes[k]
        };
        if (sizes[k] > s->regions * BENCH_REGION)
            bench_note(&r, "does not fit in the %s source", s->name);
        else
            bench_miss_rows(&r, s, p, sizes[k], 1);
    }
}
