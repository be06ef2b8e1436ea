/* The name of a GPU that every process on the machine agrees on: what the
 * shared BAR1 ledger is named by. */
#ifndef RC_GPU_KEY_H
#define RC_GPU_KEY_H

#include <stddef.h>

/* "GPU-" and the UUID as nvidia-smi prints it, with its NUL. */
#define RC_GPU_KEY_LEN 41

/*
 * The key of CUDA device `device` into key[0..n) (n >= RC_GPU_KEY_LEN):
 * its UUID, or "dev<N>" where there is no CUDA driver.
 * Errors: REGCACHE_ERR_CUDA when the driver cannot name the device
 * (regcache_last_error() names the call).
 */
int rc_gpu_key(int device, char *key, size_t n);

#endif
