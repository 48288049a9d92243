// A name -> entry table filled during static initialisation, one per entry
// type (ops, layers, optimizers, schedules, data sources): the mechanism
// that lets a new component be one local change.
//
// Registration happens from static initialisers in the component's own .cc
// file (MT_REGISTER); the libraries are linked whole-archive so those
// initialisers are kept. Thread contract: Add() only during static
// initialisation; lookups are thread-safe afterwards.
#ifndef MIRRORTRAIN_TENSOR_REGISTRY_H_
#define MIRRORTRAIN_TENSOR_REGISTRY_H_

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace mirrortrain {

// Entry needs a `std::string name` member.
template <typename Entry>
class Registry {
 public:
  static Registry& Global() {
    static auto* registry = new Registry();
    return *registry;
  }

  // The first registration of a name wins; later ones are recorded in
  // duplicates() (a test checks it stays empty).
  bool Add(Entry entry) {
    std::string name = entry.name;
    if (entries_.contains(name)) {
      duplicates_.push_back(name);
      return false;
    }
    entries_.emplace(std::move(name), std::move(entry));
    return true;
  }

  const Entry* Find(absl::string_view name) const {
    auto it = entries_.find(std::string(name));
    return it == entries_.end() ? nullptr : &it->second;
  }

  // Sorted by name.
  std::vector<const Entry*> Entries() const {
    std::vector<const Entry*> out;
    for (const auto& [name, entry] : entries_) out.push_back(&entry);
    return out;
  }
  std::vector<std::string> Names() const {
    std::vector<std::string> out;
    for (const auto& [name, entry] : entries_) out.push_back(name);
    return out;
  }
  // "a, b, c": for "expected one of ..." messages.
  std::string NameList() const { return absl::StrJoin(Names(), ", "); }
  const std::vector<std::string>& duplicates() const { return duplicates_; }

 private:
  Registry() = default;
  std::map<std::string, Entry> entries_;
  std::vector<std::string> duplicates_;
};

}  // namespace mirrortrain

#define MT_REGISTRY_CONCAT_INNER_(a, b) a##b
#define MT_REGISTRY_CONCAT_(a, b) MT_REGISTRY_CONCAT_INNER_(a, b)

// MT_REGISTER(EntryType, {.name = "...", ...}); at namespace scope in a .cc.
#define MT_REGISTER(EntryType, ...)                                      \
  [[maybe_unused]] static const bool MT_REGISTRY_CONCAT_(mt_registered_, \
                                                         __LINE__) =     \
      ::mirrortrain::Registry<EntryType>::Global().Add(EntryType __VA_ARGS__)

#endif  // MIRRORTRAIN_TENSOR_REGISTRY_H_
