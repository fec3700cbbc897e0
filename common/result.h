// File: common/result.h
//
// Result<T> holds either a T or a non-OK Status (C++20 has no std::expected).
//
//   Result<Manifest> m = LoadManifest(path);
//   if (!m.ok()) return m.status();
//   Use(*m);
//
// or, inside a function that itself returns Status or Result<U>:
//
//   HOARD_ASSIGN_OR_RETURN(Manifest m, LoadManifest(path));
//
// Invariant: a Result never holds an OK Status without a value; building one
// from Status::Ok() is a bug and turns into kInternal.
//
// Thread-safety: a value type, like Status.
#pragma once

#include <cassert>
#include <utility>
#include <variant>

#include "common/status.h"

namespace hoard {

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit on purpose
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit on purpose
    if (std::get<Status>(v_).ok()) v_ = Status::Internal("Result built from an OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }

  // OK when a value is held.
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }

  // REQUIRES: ok().
  T& value() & { assert(ok()); return std::get<T>(v_); }
  const T& value() const& { assert(ok()); return std::get<T>(v_); }
  T&& value() && { assert(ok()); return std::get<T>(std::move(v_)); }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

#define HOARD_CONCAT_INNER_(a, b) a##b
#define HOARD_CONCAT_(a, b) HOARD_CONCAT_INNER_(a, b)

// Evaluates `expr` (a Result<T>); on error returns its Status from the
// enclosing function, else move-assigns the value to `lhs` (which may be a
// declaration).
#define HOARD_ASSIGN_OR_RETURN(lhs, expr)                                  \
  auto HOARD_CONCAT_(hoard_result_, __LINE__) = (expr);                    \
  if (!HOARD_CONCAT_(hoard_result_, __LINE__).ok())                        \
    return HOARD_CONCAT_(hoard_result_, __LINE__).status();                \
  lhs = std::move(HOARD_CONCAT_(hoard_result_, __LINE__)).value()

}  // namespace hoard
