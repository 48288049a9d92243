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

#endif  // MIRRORTRAIN_TENSOR_HOST_DEVICE_H_
