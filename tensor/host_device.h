// MT_HOST_DEVICE marks functions that the CPU loops and the CUDA kernels
// share (update rules, dropout mask, integer divisors): __host__ __device__
// under nvcc, nothing for the host compiler.
#ifndef MIRRORTRAIN_TENSOR_HOST_DEVICE_H_
#define MIRRORTRAIN_TENSOR_HOST_DEVICE_H_

#if defined(__CUDACC__)
#define MT_HOST_DEVICE __host__ __device__
#else
#define MT_HOST_DEVICE
#endif

// MT_UNROLL before a loop of a compile-time trip count unrolls it fully in
// device code, so that the small arrays it indexes stay in registers
// (tensor/winograd.h's transforms); nothing for the host compiler.
#if defined(__CUDA_ARCH__)
#define MT_UNROLL _Pragma("unroll")
#else
#define MT_UNROLL
#endif

#endif  // MIRRORTRAIN_TENSOR_HOST_DEVICE_H_
