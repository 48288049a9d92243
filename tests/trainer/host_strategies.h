// The strategies a job runs under on logical CPU devices, for tests of
// behaviour that must hold under each: mirrored on one and two replicas,
// central storage and parameter servers on two.
#ifndef MIRRORTRAIN_TESTS_TRAINER_HOST_STRATEGIES_H_
#define MIRRORTRAIN_TESTS_TRAINER_HOST_STRATEGIES_H_

#include <ostream>
#include <string>

#include "gtest/gtest.h"

namespace mirrortrain::testing {

struct HostStrategy {
  const char* strategy;  // distribute.strategy
  const char* devices;   // distribute.devices
};

// What gtest prints for GetParam().
inline void PrintTo(const HostStrategy& s, std::ostream* os) {
  *os << s.strategy << " on " << s.devices;
}

inline auto EveryHostStrategy() {
  return ::testing::Values(HostStrategy{"mirrored", "[cpu:0]"},
                           HostStrategy{"mirrored", "[cpu:0,cpu:1]"},
                           HostStrategy{"central_storage", "[cpu:0,cpu:1]"},
                           HostStrategy{"parameter_server", "[cpu:0,cpu:1]"});
}

// "mirrored1", "mirrored2", "central_storage2", "parameter_server2".
inline std::string HostStrategyName(
    const ::testing::TestParamInfo<HostStrategy>& info) {
  const bool one =
      std::string(info.param.devices).find(',') == std::string::npos;
  return std::string(info.param.strategy) + (one ? "1" : "2");
}

}  // namespace mirrortrain::testing

#endif  // MIRRORTRAIN_TESTS_TRAINER_HOST_STRATEGIES_H_
