// Data sources as the config names them (`data.name`), each registered next
// to its reader with its own keys:
//   MT_REGISTER(DataSource, {.name = "fashion_mnist", .params = {...},
//                            .load = ...});
#ifndef MIRRORTRAIN_TRAINER_DATA_DATA_SOURCE_H_
#define MIRRORTRAIN_TRAINER_DATA_DATA_SOURCE_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "tensor/params.h"
#include "tensor/registry.h"
#include "trainer/data/dataset.h"

namespace mirrortrain::trainer {

struct DataSource {
  std::string name;
  std::string doc;
  ParamSchema params;
  // One split (train or test) with `params` checked; `seed` is the config's
  // (sources that generate data draw from it). Errors name the file. The
  // returned tensors are the caller's alone (data.normalize rewrites them).
  std::function<absl::StatusOr<InMemoryDataset>(const Params& params,
                                                bool train, uint64_t seed)>
      load;
};
using DataSourceRegistry = Registry<DataSource>;

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_DATA_DATA_SOURCE_H_
