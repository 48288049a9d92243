// The `text` data source's loader (text.cc registers it as `text`),
// declared for its tests.
#ifndef MIRRORTRAIN_TRAINER_DATA_TEXT_H_
#define MIRRORTRAIN_TRAINER_DATA_TEXT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/data/dataset.h"

namespace mirrortrain::trainer {

// One split of the `text` source (text.cc): the files of `paths` read in
// order, the last `validation_fraction` of the bytes the test split, cut
// into windows of `sequence_length` byte tokens (images) with next-byte
// targets (labels), both [windows, sequence_length]. Errors: a missing file
// (NotFound naming it), an empty one, a window longer than either split
// (InvalidArgument naming data.sequence_length or data.validation_fraction).
absl::StatusOr<InMemoryDataset> LoadText(const std::vector<std::string>& paths,
                                         int64_t sequence_length,
                                         double validation_fraction,
                                         bool train);

}  // namespace mirrortrain::trainer

#endif  // MIRRORTRAIN_TRAINER_DATA_TEXT_H_
