/*
 * device_keys: a kernel that builds RDMA work requests for the tensors it
 * sends, with the local keys from the cache's table in GPU memory - no
 * round trip to the host when the table has them.
 *
 * The host registers the tensors ahead (regcache_prefetch(), then
 * regcache_device_keys_sync()), launches the kernel, and frees a tensor
 * while the cache holds it.  Each warp of the kernel takes a tensor: it
 * finds the tensor's key - in the table, or for a tensor the table lacks
 * in the host's answer to the miss it posts through the ring - then opens a
 * hold section (keys that are current in it stay registered until it
 * ends), checks the key, and fills one work request per piece, clipped
 * where the registration ends.  A real transport would ring the NIC's
 * doorbell and poll the completions before ending the section; this one
 * only counts the work requests.
 *
 * No NIC is needed to run it: a stand-in backend makes up keys.  With a NIC
 * the cache uses the built-in verbs backend (params.pd), and the table's
 * keys are the MRs' lkeys (params.lkey left NULL).  Exits 77 without a GPU,
 * non-zero if a work request got a key other than the host's.
 */
#include <regcache.h>
#include <regcache_device.h>

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define TENSORS 64
#define TENSOR_BYTES ((size_t)3 << 20)
#define PIECE ((size_t)1 << 20)

struct wqe {
    unsigned long long addr, len;
    unsigned lkey;
};

/* Made-up keys: each registration's number. */
static unsigned serial;
static int fake_reg(void *, void *, size_t, int, int, void **handle)
{
    *handle = (void *)(uintptr_t)__atomic_add_fetch(&serial, 1, __ATOMIC_RELAXED);
    return 0;
}
static void fake_dereg(void *, void *)
{
}
static uint32_t key_of(void *, void *handle, unsigned)
{
    return (uint32_t)(uintptr_t)handle;
}

/* One warp per tensor; lane 0 speaks for it. */
__global__ void build_wqes(regcache_device_table t, void *const *tensors, wqe *out, unsigned *count)
{
    unsigned w = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (w >= TENSORS || threadIdx.x % 32)
        return;
    const char *p = (const char *)tensors[w];
    regcache_device_key key;
    int confirm;
    /* The table's key, else the ring's (about two seconds of waiting at
     * most); one that left before the section opened is asked for again. */
    for (int tries = 0;; tries++) {
        if (tries == 3 || regcache_device_get_key(&t, p, TENSOR_BYTES, 0, 1ull << 21, &key) !=
                              REGCACHE_DEVICE_HIT)
            return; /* no key: a real transport sends from a bounce buffer */
        /* In a section told to confirm, a removal is on its way to the
         * table: the host's number says whether the key is still good. */
        confirm = regcache_device_hold_begin(&t, w);
        if (confirm ? regcache_device_confirm(&t, &key) : regcache_device_key_current(&t, &key))
            break;
        regcache_device_hold_end(&t, w);
    }
    for (size_t done = 0, at = 0; done < TENSOR_BYTES;) {
        if (done - at >= key.bytes) { /* past that registration: the next */
            at = done;
            if (regcache_device_lookup(&t, p + done, TENSOR_BYTES - done, 0, &key) !=
                    REGCACHE_DEVICE_HIT ||
                (confirm && !regcache_device_confirm(&t, &key)))
                break;
        }
        size_t len = TENSOR_BYTES - done;
        len = len > PIECE ? PIECE : len;
        len = len > key.bytes - (done - at) ? key.bytes - (done - at) : len;
        unsigned i = atomicAdd(count, 1u);
        out[i] = wqe{ (unsigned long long)(p + done), len, key.lkey };
        done += len;
    }
    /* Here: ring the doorbell, poll the completions. */
    regcache_device_hold_end(&t, w);
}

__global__ void look_up(regcache_device_table t, const void *p, int *found)
{
    regcache_device_key key;
    *found = regcache_device_lookup(&t, p, 1, 0, &key) == REGCACHE_DEVICE_HIT;
}

#define CHECK(x)                                                            \
    do {                                                                    \
        int rc_ = (x);                                                      \
        if (rc_) {                                                          \
            printf("%s failed: %d (%s)\n", #x, rc_, regcache_last_error()); \
            return 1;                                                       \
        }                                                                   \
    } while (0)

int main(void)
{
    int gpus = 0;
    if (cudaGetDeviceCount(&gpus) != cudaSuccess || !gpus) {
        printf("no GPU: nothing to show\n");
        return 77;
    }
    static const struct regcache_backend backend = { fake_reg, fake_dereg, NULL, NULL, NULL };
    struct regcache_params p;
    regcache_params_init(&p);
    p.backend = &backend;
    p.device_keys = 1;
    regcache_t *cache;
    CHECK(regcache_create(&p, &cache));
    struct regcache_device_keys_params kp;
    regcache_device_keys_params_init(&kp);
    kp.lkey = key_of;
    kp.hold_slots = TENSORS;
    regcache_device_table table;
    CHECK(regcache_device_keys_attach(cache, 0, &kp, &table));

    void **tensors;
    CHECK(cudaMallocManaged(&tensors, TENSORS * sizeof(void *)));
    for (int i = 0; i < TENSORS; i++)
        CHECK(cudaMalloc(&tensors[i], TENSOR_BYTES));
    /* All but the last registered ahead: the last is found through the ring. */
    for (int i = 0; i < TENSORS - 1; i++)
        CHECK(regcache_prefetch(cache, 0, tensors[i], TENSOR_BYTES));
    CHECK(regcache_prefetch_wait(cache));
    CHECK(regcache_device_keys_sync(cache, 0));

    wqe *wqes;
    unsigned *count;
    CHECK(cudaMallocManaged(&wqes, TENSORS * 4 * sizeof(wqe)));
    CHECK(cudaMallocManaged(&count, sizeof(unsigned)));
    *count = 0;
    build_wqes<<<TENSORS / 4, 128>>>(table, tensors, wqes, count);
    CHECK(cudaDeviceSynchronize());

    int wrong = 0;
    for (unsigned i = 0; i < *count; i++) {
        regcache_entry_t *e;
        CHECK(regcache_get(cache, (void *)wqes[i].addr, wqes[i].len, &e));
        wrong += (uint32_t)(uintptr_t)regcache_entry_handle(e) != wqes[i].lkey;
        regcache_put(cache, e);
    }
    struct regcache_device_keys_stats st;
    CHECK(regcache_device_keys_stats(cache, 0, &st));
    printf("%u work requests for %d tensors, %d with a key other than the host's; "
           "misses the host served: %llu\n",
           *count, TENSORS, wrong, (unsigned long long)st.requests);

    /* A tensor freed: its record leaves the table before the free goes on
     * (the hooks tell the cache; an application without them calls
     * regcache_notify_free() itself). */
    CHECK(cudaFree(tensors[0]));
    int *found;
    CHECK(cudaMallocManaged(&found, sizeof(int)));
    look_up<<<1, 1>>>(table, tensors[0], found);
    CHECK(cudaDeviceSynchronize());
    printf("after its free, tensor 0 is %s the table\n", *found ? "still in" : "gone from");

    regcache_destroy(cache);
    return wrong != 0 || *count != TENSORS * 3 || *found;
}
