#include "tensor/gradient_registry.h"

#include <string>

#include "absl/container/flat_hash_map.h"

namespace mirrortrain {
namespace {

absl::flat_hash_map<std::string, GradientFunction>& Registry() {
  static auto* registry =
      new absl::flat_hash_map<std::string, GradientFunction>();
  return *registry;
}

}  // namespace

const GradientFunction* LookupGradient(const char* op) {
  auto it = Registry().find(op);
  return it == Registry().end() ? nullptr : &it->second;
}

GradientRegistrar::GradientRegistrar(const char* op, GradientFunction fn) {
  Registry()[op] = std::move(fn);
}

}  // namespace mirrortrain
