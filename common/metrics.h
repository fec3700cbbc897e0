// File: common/metrics.h
//
// Metrics in the Prometheus text exposition format (version 0.0.4): counters,
// gauges and histograms with fixed buckets, each a family with a name, a HELP
// text and any number of labelled series.
//
// The components count, the registry only shows. A component keeps its own
// Counter, Gauge or Histogram (or the plain atomics it already had, such as
// ChunkService::Counters), and the daemon's main() registers them here by
// pointer or as a function read at scrape time. So nothing is counted twice,
// and a component works, and is tested, without a registry.
//
//   metrics::Registry registry;
//   registry.AddHistogram("hoard_origin_read_seconds", "Chunk reads from the origin", {}, &filler.origin_latency());
//   registry.AddCounter("hoard_node_served_bytes_total", "...", {{"source", "disk"}},
//                       [&] { return double(service.counters().cache_bytes.load()); });
//   std::string text = registry.Render();
//
// Hot paths: Counter::Add, Gauge::Set and Histogram::Observe are a few
// relaxed atomic operations (Observe also scans the bucket bounds, a dozen
// compares); no lock, no allocation.
//
// Thread-safety: Counter, Gauge and Histogram may be updated from any thread.
// Registry methods may be called from any thread (one mutex); Render calls the
// registered functions under it, from the caller's thread, so they must be
// cheap and must not call back into the registry. Whatever a registration
// points at must outlive the registry's last Render.
//
// Invariants: a family has one type and one HELP (the first registration's);
// series of a family render together, in registration order; a histogram's
// buckets render cumulative, ending with le="+Inf", whose count is _count.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/mutex.h"

namespace hoard::metrics {

// Label name/value pairs of one series, in the order they render.
using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void Add(uint64_t n = 1) { v_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

class Gauge {
 public:
  void Set(double v) { v_.store(v, std::memory_order_relaxed); }
  void Add(double d) { v_.fetch_add(d, std::memory_order_relaxed); }
  double value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> v_{0};
};

class Histogram {
 public:
  // `bounds`: the buckets' upper bounds, ascending; +Inf is implied.
  explicit Histogram(std::vector<double> bounds);
  // 100 us .. 10 s, for latencies in seconds.
  static std::vector<double> LatencyBuckets();

  void Observe(double v);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // one per bound, then +Inf (= count)
    double sum = 0;
    uint64_t count = 0;
  };
  // Each bucket is exact; the set is not taken at one instant, but the
  // cumulative counts never decrease along the buckets.
  Snapshot snapshot() const;

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds_.size() + 1, not cumulative
  std::atomic<double> sum_{0};
};

// Measures from construction to destruction into `h` (none if null).
class ScopedTimer {
 public:
  explicit ScopedTimer(Histogram* h);
  ~ScopedTimer();
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  Histogram* h_;
  int64_t start_ns_;
};

enum class Type { kCounter, kGauge, kHistogram };

// One series a collector reports at scrape time.
struct Sample {
  Labels labels;
  double value = 0;
};

class Registry {
 public:
  void AddCounter(const std::string& name, const std::string& help, Labels labels, const Counter* c);
  void AddCounter(const std::string& name, const std::string& help, Labels labels, std::function<double()> read);
  void AddGauge(const std::string& name, const std::string& help, Labels labels, const Gauge* g);
  void AddGauge(const std::string& name, const std::string& help, Labels labels, std::function<double()> read);
  void AddHistogram(const std::string& name, const std::string& help, Labels labels, const Histogram* h);
  // A family whose series are known only at scrape time (one per dataset...).
  // Its HELP and TYPE render even when `collect` returns no series.
  void AddCollector(const std::string& name, const std::string& help, Type type,
                    std::function<std::vector<Sample>()> collect);

  // Text another registry renders, appended after this one's families: how
  // a process whose parts come and go (a coordinator's terms in high
  // availability) exports the current part's metrics. `render` must not
  // return a family this registry has.
  void AddRendered(std::function<std::string()> render);

  std::string Render() const;

 private:
  struct Series {
    Labels labels;
    std::function<double()> read;  // counters and gauges
    const Histogram* histogram = nullptr;
  };
  struct Family {
    std::string name, help;
    Type type;
    std::vector<Series> series;
    std::vector<std::function<std::vector<Sample>()>> collectors;
  };
  Family& FamilyLocked(const std::string& name, const std::string& help, Type type) REQUIRES(mu_);

  mutable Mutex mu_;
  std::vector<std::unique_ptr<Family>> families_ GUARDED_BY(mu_);  // in registration order
  std::map<std::string, Family*> by_name_ GUARDED_BY(mu_);
  std::vector<std::function<std::string()>> rendered_ GUARDED_BY(mu_);
};

// The text format's escaping: of a label value (\\, \" and \n) and of a HELP
// text (\\ and \n).
std::string EscapeLabelValue(const std::string& v);
std::string EscapeHelp(const std::string& v);
// A sample value: integers exactly, others with full precision, +Inf, -Inf, NaN.
std::string FormatValue(double v);

}  // namespace hoard::metrics
