#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/engine.h"

namespace loopserve::server {

// Triton's trace extension (GET/POST /v2[/models/<m>]/trace/setting, gRPC TraceSetting): settings
// by Triton's names, each a list of strings as Triton's messages carry them:
//   trace_level    ["OFF"], or any of "TIMESTAMPS" (Triton's request, queue and compute
//                  timestamps) and "LOOP_ITERATIONS" (ours: those timestamps plus one span per
//                  iteration of each top-level Loop). "TENSORS" is UNIMPLEMENTED.
//   trace_rate     trace 1 of N requests (the 1st, N+1st, ...; N >= 1); default 1000
//   trace_count    traces still to collect; -1 = no limit (default). Reads back as what is left.
//   log_frequency  write the file every N traces; 0 = when the count runs out, the file changes,
//                  or the server stops
//   trace_file     a plain file name inside the trace folder (SetDirectory): a client never picks
//                  a path of its own. "" = no file, nothing traced.
//   trace_mode     "triton" (files), or "opentelemetry" when the server has an exporter
//                  (SetExporter: OTLP/HTTP JSON, otlp_exporter.h); trace_file is then not needed
// A model's settings (model name given) override the server's one by one; clearing a model's
// setting (an empty list) makes it follow the server's again, and a model whose settings are all
// cleared shares the server's sampling. A model with settings of its own samples with its own
// rate counter and trace count.
using TraceSettingList = std::vector<std::pair<std::string, std::vector<std::string>>>;

class TraceFile;
class RequestTrace;

// Where traces of trace_mode "opentelemetry" go (OtlpExporter). Thread-safe; Export must not
// block for long (it runs on the thread that answered the request).
class TraceExporter {
 public:
  virtual ~TraceExporter() = default;
  virtual void Export(std::unique_ptr<RequestTrace> trace) = 0;
  // Sends what is pending and waits for it (shutdown).
  virtual void Flush() = 0;
};

// One traced request's timestamps (nanoseconds since the Unix epoch) and, at LOOP_ITERATIONS, one
// span per iteration of each top-level Loop it ran. Made by Tracer::Sample, filled on the
// request's path by whichever thread holds the request (one at a time), handed back to
// Tracer::Finish. As the engine's IterationObserver it records the spans and passes each call on
// to `next` (the request's streaming observer, another traced member of a merged batch).
class RequestTrace : public engine::IterationObserver {
 public:
  // Triton's activities, in the order a request passes them.
  enum Activity {
    kRequestStart,
    kQueueStart,
    kComputeStart,
    kComputeInputEnd,
    kComputeOutputStart,
    kComputeEnd,
    kRequestEnd,
    kActivities
  };
  static const char* ActivityName(Activity activity);

  RequestTrace(uint64_t id, std::string model_name, int64_t model_version, bool iterations,
               std::shared_ptr<TraceFile> file);

  uint64_t id() const { return id_; }
  const std::string& model_name() const { return model_name_; }
  int64_t model_version() const { return model_version_; }
  const std::string& request_id() const { return request_id_; }
  bool wants_iterations() const { return iterations_; }
  // Records `activity` at `time` (a later mark of the same activity replaces it).
  void Mark(Activity activity, absl::Time time) { ns_[activity] = absl::ToUnixNanos(time); }
  int64_t ns(Activity activity) const { return ns_[activity]; }
  void set_request_id(std::string id) { request_id_ = std::move(id); }
  // Where OnIteration passes every call on; may be null.
  void set_next(engine::IterationObserver* next) { next_ = next; }

  struct Span {
    int loop;
    int64_t iteration;
    int64_t start_ns;
    int64_t end_ns;
  };
  const std::vector<Span>& spans() const { return spans_; }
  // Names of the model's Loops (Model::loop_names), for the spans' "loop" field; the model must
  // outlive the trace's use until KeepLoopNames.
  void set_loop_names(const std::vector<std::string>* names) { loop_names_ = names; }
  // The name of Loop `loop` ("" when unknown).
  std::string LoopName(int loop) const;
  // Copies the Loop names into the trace (before it outlives its request: an exporter's queue).
  void KeepLoopNames();

  // engine::IterationObserver
  void OnLoopStart(int loop_index) override;
  absl::Status OnIteration(int loop_index, int64_t iteration,
                           absl::Span<const engine::ScanSlice> slices) override;

  // Triton's JSON trace object: {"id", "model_name", "model_version", "request_id"?,
  // "timestamps": [{"name", "ns"}...]} with the timestamps in time order; an iteration span is two
  // timestamps, LOOP_ITERATION_START and LOOP_ITERATION_END, with "loop" and "iteration" fields.
  std::string ToJson() const;

 private:
  friend class Tracer;
  const uint64_t id_;
  const std::string model_name_;
  const int64_t model_version_;
  const bool iterations_;
  const std::shared_ptr<TraceFile> file_;
  std::string request_id_;
  int64_t ns_[kActivities] = {};
  engine::IterationObserver* next_ = nullptr;
  const std::vector<std::string>* loop_names_ = nullptr;
  std::vector<std::string> kept_loop_names_;  // KeepLoopNames
  std::vector<Span> spans_;
  int64_t last_ns_ = 0;  // when the latest iteration (or Loop) started
  int64_t every_ = 0;    // its settings' log_frequency
  bool last_ = false;    // the last trace its settings' count allowed
};

// A trace file: a JSON array of trace objects that is valid JSON after every write (each write
// replaces the closing bracket). Traces wait in memory until Write; the file is created (emptied)
// at the first write. Thread-safe.
class TraceFile {
 public:
  // `path`: the full path; `name`: what the settings call it (messages).
  TraceFile(std::string path, std::string name);
  ~TraceFile();  // writes what is pending
  TraceFile(const TraceFile&) = delete;
  TraceFile& operator=(const TraceFile&) = delete;

  // Adds one trace object; writes the pending ones once `every` (> 0) are pending.
  void Add(std::string json, int64_t every);
  // Writes the pending traces.
  void Write();
  // From now on every Add writes at once (a trace count ran out).
  void WriteEach();
  const std::string& name() const { return name_; }

 private:
  void WriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  const std::string path_;
  const std::string name_;
  absl::Mutex mutex_;
  int fd_ ABSL_GUARDED_BY(mutex_) = -1;
  int64_t end_ ABSL_GUARDED_BY(mutex_) = 0;  // file bytes before the closing "\n]\n"
  bool failed_ ABSL_GUARDED_BY(mutex_) = false;
  bool write_each_ ABSL_GUARDED_BY(mutex_) = false;
  std::vector<std::string> pending_ ABSL_GUARDED_BY(mutex_);
};

// The trace settings (server and per model), the sampling and the files. Sample costs one atomic
// load while every level is OFF (no lock, no allocation). A finished trace is turned into JSON and
// added to its file by a writer thread of the tracer's own (started with the first trace), so a
// traced request does not pay for it. Thread-safe.
class Tracer {
 public:
  Tracer() = default;
  ~Tracer();  // writes every file's pending traces, stops the writer thread
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // The process's tracer (what the settings handlers and the request path share).
  static Tracer& Global();

  // Where trace_mode "opentelemetry" sends traces; without one that mode is refused. Call at
  // start-up, before requests.
  void SetExporter(std::unique_ptr<TraceExporter> exporter);

  // The folder trace_file names a file in ("" = trace_file can only be ""). Call at start-up.
  void SetDirectory(std::string dir);

  // Applies `changes` to the server's settings (`model` empty) or to a model's, all or none (an
  // empty value list clears: the server's setting to its default, a model's to the server's),
  // and returns the settings in effect there. InvalidArgument for an unknown name, a bad number,
  // an unknown level or mode, a trace_file that is not a plain name; FailedPrecondition for a
  // trace_file without a trace folder; Unimplemented for TENSORS.
  absl::StatusOr<TraceSettingList> Update(absl::string_view model, const TraceSettingList& changes);

  // Whether to trace the next request for `model` (version `version`): a new RequestTrace, or
  // null (tracing is off, no file, not this request's turn, the count is used up).
  std::unique_ptr<RequestTrace> Sample(absl::string_view model, int64_t version) {
    if (!active_.load(std::memory_order_relaxed)) return nullptr;
    return SampleSlow(model, version);
  }
  // Takes a finished trace to its file (through the writer thread) or to the exporter.
  void Finish(std::unique_ptr<RequestTrace> trace);
  // Waits until the writer thread has handed every trace Finish took to its file (which writes
  // it as log_frequency says).
  void WaitWritten();
  // WaitWritten, then writes every file's pending traces and flushes the exporter (shutdown).
  void WriteAll();

 private:
  // The settings of one place (the server, or one model), parsed; `set` marks a model's own.
  struct Settings {
    std::vector<std::string> level = {"OFF"};
    int64_t rate = 1000;
    int64_t count = -1;
    int64_t log_frequency = 0;
    std::string file;
    std::string mode = "triton";
  };
  // Where requests are sampled: the server's settings, or a model's on top of them.
  struct Group {
    Settings own;                  // a model's: only the names in `set` count
    std::vector<std::string> set;  // names a model sets itself (empty for the server)
    Settings effective;
    uint64_t seen = 0;       // requests sampled against the rate
    int64_t remaining = -1;  // traces left; -1 = no limit
    std::shared_ptr<TraceFile> file;
  };

  std::unique_ptr<RequestTrace> SampleSlow(absl::string_view model, int64_t version);
  absl::Status Apply(Settings& settings, const std::string& name,
                     const std::vector<std::string>& values) const;
  // Recomputes `group`'s effective settings from the server's, its file and whether it traces.
  void Refresh(Group& group, bool reset_sampling) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  std::shared_ptr<TraceFile> FileNamed(const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void UpdateActive() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  static TraceSettingList ToList(const Settings& settings, int64_t remaining);
  static bool Traces(const Group& group);

  void WriteLoop();
  static void WriteTrace(const RequestTrace& trace);

  std::unique_ptr<TraceExporter> exporter_;  // set before requests, then read-only
  // Finished traces on their way to their files (the writer thread's queue).
  absl::Mutex queue_mutex_;
  std::vector<std::unique_ptr<RequestTrace>> finished_ ABSL_GUARDED_BY(queue_mutex_);
  bool writing_ ABSL_GUARDED_BY(queue_mutex_) = false;  // the writer holds traces taken from it
  bool stop_ ABSL_GUARDED_BY(queue_mutex_) = false;
  int waiters_ ABSL_GUARDED_BY(queue_mutex_) = 0;  // in WaitWritten
  std::thread writer_ ABSL_GUARDED_BY(queue_mutex_);
  std::atomic<bool> active_{false};
  std::atomic<uint64_t> next_id_{1};
  absl::Mutex mutex_;
  std::string dir_ ABSL_GUARDED_BY(mutex_);
  Group server_ ABSL_GUARDED_BY(mutex_);
  absl::flat_hash_map<std::string, Group> models_ ABSL_GUARDED_BY(mutex_);
  // Every file opened, by name, while a group uses it or a trace is pending for it.
  absl::flat_hash_map<std::string, std::weak_ptr<TraceFile>> files_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace loopserve::server
