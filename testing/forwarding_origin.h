// File: testing/forwarding_origin.h
//
// ForwardingOrigin hands every call to a shared Origin. Components open their
// origins through an opener that returns a unique_ptr; tests give them a
// ForwardingOrigin around one MemOrigin, so the test keeps its handle on the
// MemOrigin (to inject faults, count reads) while the component owns its own
// Origin object.
//
// Thread-safety: as the wrapped Origin.
#pragma once

#include <memory>

#include "origin/origin.h"

namespace hoard {

class ForwardingOrigin : public Origin {
 public:
  explicit ForwardingOrigin(std::shared_ptr<Origin> target) : target_(std::move(target)) {}

  const std::string& source() const override { return target_->source(); }
  Status Walk(const std::function<Status(const OriginEntry&)>& visit) override { return target_->Walk(visit); }
  Result<OriginEntry> Stat(std::string_view path) override { return target_->Stat(path); }
  Result<std::unique_ptr<OriginFile>> Open(std::string_view path) override { return target_->Open(path); }

  // An opener (for Coordinator::Options::open_origin, OriginPool, ...) that
  // serves `source` from `target` and fails every other source with kNotFound.
  static auto Opener(std::string source, std::shared_ptr<Origin> target) {
    return [source = std::move(source), target](const std::string& s) -> Result<std::unique_ptr<Origin>> {
      if (s != source) return Status::NotFound("no such source: " + s);
      return std::unique_ptr<Origin>(new ForwardingOrigin(target));
    };
  }

 private:
  std::shared_ptr<Origin> target_;
};

}  // namespace hoard
