#include "common/metrics.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace hoard::metrics {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const char* TypeName(Type t) {
  switch (t) {
    case Type::kCounter: return "counter";
    case Type::kGauge: return "gauge";
    case Type::kHistogram: return "histogram";
  }
  return "untyped";
}

// NAME{a="x",b="y"} VALUE, with `extra` (le="...") appended to the labels.
void AppendSample(std::string* out, const std::string& name, const Labels& labels, const std::string& extra,
                  double value) {
  *out += name;
  if (!labels.empty() || !extra.empty()) {
    *out += '{';
    bool first = true;
    for (const auto& [k, v] : labels) {
      if (!first) *out += ',';
      first = false;
      *out += k + "=\"" + EscapeLabelValue(v) + "\"";
    }
    if (!extra.empty()) {
      if (!first) *out += ',';
      *out += extra;
    }
    *out += '}';
  }
  *out += ' ' + FormatValue(value) + '\n';
}

void AppendHistogram(std::string* out, const std::string& name, const Labels& labels, const Histogram& h) {
  const Histogram::Snapshot s = h.snapshot();
  for (size_t i = 0; i < s.bounds.size(); ++i) {
    AppendSample(out, name + "_bucket", labels, "le=\"" + FormatValue(s.bounds[i]) + "\"", double(s.cumulative[i]));
  }
  AppendSample(out, name + "_bucket", labels, "le=\"+Inf\"", double(s.count));
  AppendSample(out, name + "_sum", labels, "", s.sum);
  AppendSample(out, name + "_count", labels, "", double(s.count));
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

std::vector<double> Histogram::LatencyBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

void Histogram::Observe(double v) {
  size_t b = 0;
  while (b < bounds_.size() && v > bounds_[b]) ++b;  // le: a value on a bound belongs to it
  counts_[b].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.bounds = bounds_;
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    total += counts_[i].load(std::memory_order_relaxed);
    s.cumulative.push_back(total);
  }
  s.count = total;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

ScopedTimer::ScopedTimer(Histogram* h) : h_(h), start_ns_(h != nullptr ? NowNs() : 0) {}

ScopedTimer::~ScopedTimer() {
  if (h_ != nullptr) h_->Observe(double(NowNs() - start_ns_) / 1e9);
}

Registry::Family& Registry::FamilyLocked(const std::string& name, const std::string& help, Type type) {
  auto it = by_name_.find(name);
  if (it != by_name_.end()) return *it->second;
  families_.push_back(std::make_unique<Family>(Family{.name = name, .help = help, .type = type}));
  by_name_[name] = families_.back().get();
  return *families_.back();
}

void Registry::AddCounter(const std::string& name, const std::string& help, Labels labels, const Counter* c) {
  AddCounter(name, help, std::move(labels), [c] { return double(c->value()); });
}

void Registry::AddCounter(const std::string& name, const std::string& help, Labels labels,
                          std::function<double()> read) {
  MutexLock lock(&mu_);
  FamilyLocked(name, help, Type::kCounter).series.push_back({std::move(labels), std::move(read)});
}

void Registry::AddGauge(const std::string& name, const std::string& help, Labels labels, const Gauge* g) {
  AddGauge(name, help, std::move(labels), [g] { return g->value(); });
}

void Registry::AddGauge(const std::string& name, const std::string& help, Labels labels,
                        std::function<double()> read) {
  MutexLock lock(&mu_);
  FamilyLocked(name, help, Type::kGauge).series.push_back({std::move(labels), std::move(read)});
}

void Registry::AddHistogram(const std::string& name, const std::string& help, Labels labels, const Histogram* h) {
  MutexLock lock(&mu_);
  FamilyLocked(name, help, Type::kHistogram).series.push_back({std::move(labels), nullptr, h});
}

void Registry::AddCollector(const std::string& name, const std::string& help, Type type,
                            std::function<std::vector<Sample>()> collect) {
  MutexLock lock(&mu_);
  FamilyLocked(name, help, type).collectors.push_back(std::move(collect));
}

std::string Registry::Render() const {
  MutexLock lock(&mu_);
  std::string out;
  for (const auto& f : families_) {
    out += "# HELP " + f->name + " " + EscapeHelp(f->help) + "\n";
    out += "# TYPE " + f->name + " " + TypeName(f->type) + "\n";
    for (const Series& s : f->series) {
      if (s.histogram != nullptr) {
        AppendHistogram(&out, f->name, s.labels, *s.histogram);
      } else {
        AppendSample(&out, f->name, s.labels, "", s.read());
      }
    }
    for (const auto& collect : f->collectors) {
      for (const Sample& s : collect()) AppendSample(&out, f->name, s.labels, "", s.value);
    }
  }
  for (const auto& render : rendered_) out += render();
  return out;
}

void Registry::AddRendered(std::function<std::string()> render) {
  MutexLock lock(&mu_);
  rendered_.push_back(std::move(render));
}

namespace {

// Backslash and newline always; the double quote inside label values only.
std::string Escape(const std::string& v, bool quote) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || (quote && c == '"')) {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string EscapeLabelValue(const std::string& v) { return Escape(v, true); }
std::string EscapeHelp(const std::string& v) { return Escape(v, false); }

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  // Counters of bytes pass 2^32 quickly: print integers in full, not as 1e+10.
  if (v == std::floor(v) && std::fabs(v) < 9.007199254740992e15) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
    return buf;
  }
  // The shortest of 15 and 17 digits that reads back as the same double
  // (le="0.1", not le="0.10000000000000001").
  std::snprintf(buf, sizeof(buf), "%.15g", v);
  if (std::strtod(buf, nullptr) != v) std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

}  // namespace hoard::metrics
