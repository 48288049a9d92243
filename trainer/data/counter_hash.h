// Counter-based random bits: a pure function of its inputs, the same on
// every platform, so whatever draws from it (synthetic data, augmentation,
// the seed of each epoch's shuffle) is reproducible without carrying
// generator state.
#ifndef MIRRORTRAIN_TRAINER_DATA_COUNTER_HASH_H_
#define MIRRORTRAIN_TRAINER_DATA_COUNTER_HASH_H_

#include <cstdint>

namespace mirrortrain::trainer {

// SplitMix64's finaliser: a bijective mix with good avalanche, fixed by its
// constants.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Independent streams of random bits keyed by (seed, stream, index).
inline uint64_t CounterHash(uint64_t seed, uint64_t stream, uint64_t index) {
  return Mix64(Mix64(seed ^ Mix64(stream)) + index);
}

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_DATA_COUNTER_HASH_H_
