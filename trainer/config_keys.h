// The keys of the config sections the trainer itself owns (the top level,
// data and its normalize and augment mappings, model, optimizer and its
// schedule, loss, ema, distribute, train, checkpoint) and of every layer entry,
// with the `name` keys that pick a component; components (data sources,
// presets, layers, optimizers, schedules) declare their own keys next to
// their code. SchemaMarkdown (config.h) tables all of them.
//
// Thread contract: each schema is built on first use (thread-safe static
// initialisation) and never changes after.
#ifndef MIRRORTRAIN_TRAINER_CONFIG_KEYS_H_
#define MIRRORTRAIN_TRAINER_CONFIG_KEYS_H_

#include <string>
#include <utility>
#include <vector>

#include "tensor/params.h"

namespace mirrortrain::trainer::config_internal {

const ParamSchema& RootSchema();
const ParamSchema& DataSchema();
// data.normalize: a mapping, so the per-channel lists stay together.
const ParamSchema& NormalizeSchema();
const ParamSchema& AugmentSchema();
const ParamSchema& ModelSchema();
const ParamSchema& LossSchema();
// An entry of the `metrics` list: its `name` (models::MetricType).
const ParamSchema& MetricSchema();
const ParamSchema& OptimizerSchema();
const ParamSchema& ScheduleSchema();
const ParamSchema& EmaSchema();
const ParamSchema& DistributeSchema();
// The distribute keys only some strategies read, with those strategies:
// the others' configs neither take them nor resolve them.
const std::vector<std::pair<std::string, std::vector<std::string>>>&
StrategyKeys();
const ParamSchema& TrainSchema();
const ParamSchema& CheckpointSchema();
// Keys of a layer entry that are not the layer's own.
const ParamSchema& LayerEntrySchema();

}  // namespace mirrortrain::trainer::config_internal

#endif  // MIRRORTRAIN_TRAINER_CONFIG_KEYS_H_
