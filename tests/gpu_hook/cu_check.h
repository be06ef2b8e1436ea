/* CU(call): a driver call in a GPU test program's function that returns
 * int: on failure it prints where and what came back, and returns 1. */
#ifndef CU_CHECK_H
#define CU_CHECK_H

#include <cuda.h>
#include <stdio.h>

#define CU(call)                                                             \
    do {                                                                     \
        CUresult r_ = (call);                                                \
        if (r_ != CUDA_SUCCESS) {                                            \
            printf("%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call, r_); \
            return 1;                                                        \
        }                                                                    \
    } while (0)

#endif
