#pragma once
// PLACER_HD marks functions compiled for host and device. Under nvcc it is
// __host__ __device__; under g++ it is empty, so the same functor builds for
// Thrust's OpenMP system.
//
// PLACER_BACKEND_NS keeps the two compilations of one functor apart at link
// time: nvcc translation units put portable code in placer::kernels::cuda_ns,
// g++ ones in placer::kernels::host_ns (an inline namespace, so source code
// just says placer::kernels::score_cell_op).

//
// PLACER_INLINE asks both compilers to inline a function whatever their
// heuristics say (a hot function's shared core, kept as fast as when it
// was written out in each caller).

#if defined(__CUDACC__)
#define PLACER_HD __host__ __device__
#define PLACER_BACKEND_NS cuda_ns
#define PLACER_INLINE __forceinline__
#else
#define PLACER_HD
#define PLACER_BACKEND_NS host_ns
#define PLACER_INLINE [[gnu::always_inline]] inline
#endif
