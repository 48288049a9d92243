// Reductions over 8 interleaved lanes combined in a fixed tree. A plain loop
// `acc = combine(acc, term(i))` is one chain of dependent operations (4
// cycles per float add), which the compiler may not reorder without
// -ffast-math; 8 independent lanes pipeline and vectorise, and the fixed
// order keeps the result the same bits from run to run.
#ifndef MIRRORTRAIN_TENSOR_LANE_REDUCE_H_
#define MIRRORTRAIN_TENSOR_LANE_REDUCE_H_

#include <cstdint>
#include <functional>

namespace mirrortrain {

template <typename Acc, typename Term, typename Combine>
Acc LaneReduce(int64_t n, Acc init, Term term, Combine combine) {
  Acc lane[8] = {init, init, init, init, init, init, init, init};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) lane[k] = combine(lane[k], term(i + k));
  }
  for (; i < n; ++i) lane[i % 8] = combine(lane[i % 8], term(i));
  return combine(combine(combine(lane[0], lane[1]), combine(lane[2], lane[3])),
                 combine(combine(lane[4], lane[5]), combine(lane[6], lane[7])));
}

// sum of term(0..n), accumulated in Acc.
template <typename Acc, typename Term>
Acc LaneSum(int64_t n, Term term) {
  return LaneReduce<Acc>(n, Acc(0), term, std::plus<Acc>());
}

}  // namespace mirrortrain

#endif  // MIRRORTRAIN_TENSOR_LANE_REDUCE_H_
