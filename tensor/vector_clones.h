// MT_VECTOR_CLONES compiles a host function twice, for AVX2 and for baseline
// x86-64, and the program picks the one the CPU supports when it loads (GCC
// and Clang function multiversioning): elementwise loops get 8 float lanes
// instead of SSE2's 4 without building for one machine. Nothing contracts
// a * b + c into an FMA (AVX2 alone has none, and -std=c++20 rather than
// gnu++20 turns GCC's contraction off), and elementwise and fixed-lane
// code (lane_reduce.h) does the same operations per element at any width,
// so both clones compute the same bits (tests/tensor/vector_math_test.cc):
// results do not depend on the machine.
#ifndef MIRRORTRAIN_TENSOR_VECTOR_CLONES_H_
#define MIRRORTRAIN_TENSOR_VECTOR_CLONES_H_

// Not under ThreadSanitizer: the loader runs a clone's resolver before the
// sanitizer's runtime is up, and the instrumented resolver crashes every
// binary at load (scripts/sanitizers.sh tsan).
#if defined(__x86_64__) && !defined(__CUDACC__) && defined(__GNUC__) && \
    !defined(MT_NO_VECTOR_CLONES) && !defined(__SANITIZE_THREAD__)
#define MT_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define MT_VECTOR_CLONES
#endif

#endif  // MIRRORTRAIN_TENSOR_VECTOR_CLONES_H_
