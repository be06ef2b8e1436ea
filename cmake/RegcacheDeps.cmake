# Third-party pieces: libibverbs (pkg-config), the CUDA driver header (the
# library dlopens libcuda, so only cuda.h is needed; NVML is dlopened too and
# its few declarations live in src/bar1_budget.c because the toolkit does not
# always ship nvml.h), uthash's utlist.h and pthreads.
find_package(PkgConfig REQUIRED)
pkg_check_modules(IBVERBS REQUIRED IMPORTED_TARGET libibverbs)
find_package(Threads REQUIRED)
# uthash's utlist.h (Debian uthash-dev, header only): the entry lists that
# only the cache lock's holder walks.
find_path(UTLIST_INCLUDE_DIR utlist.h REQUIRED)

find_path(CUDA_HEADERS_DIR cuda.h
  HINTS ${REGCACHE_CUDA_INCLUDE_DIR} $ENV{CUDA_HOME}/include /usr/local/cuda/include
  REQUIRED)
