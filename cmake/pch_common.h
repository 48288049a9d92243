// Precompiled for every project library (mt_precompile in CMakeLists.txt):
// the standard and Abseil headers most files include, parsed once per target
// instead of once per file. Files still include what they use.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
