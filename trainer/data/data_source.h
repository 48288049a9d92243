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

// What a split is loaded for.
struct SplitRequest {
  bool train = true;  // The training split, else the test split.
  // The config's seed (sources that generate data draw from it).
  uint64_t seed = 0;
  // model.input_shape (one example) when the config gives one, else empty.
  // Sources that generate data make examples of it; the others read what
  // their files hold (the trainer compares the two).
  Shape example_shape;
  // Only the first this many examples are used (data.train_examples or
  // test_examples; 0: all). A source may stop there; the caller cuts.
  int64_t max_examples = 0;
  // Only the examples' shape and kind are wanted (`sample` builds the model
  // and never reads an example): a source that knows them from its keys
  // returns a split of zero examples without reading its files; the others
  // load as usual.
  bool shapes_only = false;
};

struct DataSource {
  std::string name;
  std::string doc;
  ParamSchema params;
  // One split with `params` checked. Errors name the file. The returned
  // tensors are the caller's alone (data.normalize rewrites them).
  std::function<absl::StatusOr<InMemoryDataset>(const Params& params,
                                                const SplitRequest& split)>
      load;
};
using DataSourceRegistry = Registry<DataSource>;

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_DATA_DATA_SOURCE_H_
