#include "server/observability/tracer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "protocol/json_sink.h"
#include "rapidjson/writer.h"
#include "server/observability/logging.h"

namespace loopserve::server {
namespace {

constexpr char kNames[] =
    "trace_file, trace_level, trace_rate, trace_count, log_frequency, trace_mode";
constexpr char kClosing[] = "\n]\n";
// Models with trace settings of their own (a client cannot grow the table without bound).
constexpr size_t kMaxModels = 1024;
// Finished traces waiting for the writer thread; past this the finishing thread writes its own.
constexpr size_t kMaxQueued = 1024;
// The writer thread takes the finished traces when this many wait, or kWriteDelay after the first.
constexpr size_t kWriteBatch = 64;
constexpr absl::Duration kWriteDelay = absl::Milliseconds(50);

bool WriteAllAt(int fd, absl::string_view bytes, int64_t offset) {
  while (!bytes.empty()) {
    const ssize_t n = pwrite(fd, bytes.data(), bytes.size(), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
    offset += n;
  }
  return true;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// RequestTrace

const char* RequestTrace::ActivityName(Activity activity) {
  switch (activity) {
    case kRequestStart:
      return "REQUEST_START";
    case kQueueStart:
      return "QUEUE_START";
    case kComputeStart:
      return "COMPUTE_START";
    case kComputeInputEnd:
      return "COMPUTE_INPUT_END";
    case kComputeOutputStart:
      return "COMPUTE_OUTPUT_START";
    case kComputeEnd:
      return "COMPUTE_END";
    case kRequestEnd:
      return "REQUEST_END";
    case kActivities:
      break;
  }
  return "?";
}

RequestTrace::RequestTrace(uint64_t id, std::string model_name, int64_t model_version,
                           bool iterations, std::shared_ptr<TraceFile> file)
    : id_(id),
      model_name_(std::move(model_name)),
      model_version_(model_version),
      iterations_(iterations),
      file_(std::move(file)) {}

void RequestTrace::OnLoopStart(int loop_index) {
  last_ns_ = absl::ToUnixNanos(absl::Now());
  if (next_ != nullptr) next_->OnLoopStart(loop_index);
}

absl::Status RequestTrace::OnIteration(int loop_index, int64_t iteration,
                                       absl::Span<const engine::ScanSlice> slices) {
  const int64_t now = absl::ToUnixNanos(absl::Now());
  // An iteration starts where the one before it ended; the first where its Loop started (an
  // iteration-batching row has no Loop start: its first iteration starts with its compute).
  int64_t start = last_ns_;
  if (start == 0) start = ns_[kComputeInputEnd] != 0 ? ns_[kComputeInputEnd] : ns_[kComputeStart];
  spans_.push_back(Span{loop_index, iteration, start, now});
  last_ns_ = now;
  if (next_ == nullptr) return absl::OkStatus();
  absl::Status status = next_->OnIteration(loop_index, iteration, slices);
  // The next iteration starts after whatever the observers after this one did (streaming waits).
  last_ns_ = absl::ToUnixNanos(absl::Now());
  return status;
}

std::string RequestTrace::LoopName(int loop) const {
  if (loop_names_ == nullptr || loop < 0 || loop >= static_cast<int>(loop_names_->size())) {
    return "";
  }
  return (*loop_names_)[loop];
}

void RequestTrace::KeepLoopNames() {
  if (loop_names_ == nullptr || loop_names_ == &kept_loop_names_) return;
  kept_loop_names_ = *loop_names_;
  loop_names_ = &kept_loop_names_;
}

std::string RequestTrace::ToJson() const {
  std::string json;
  protocol::StringSink sink{&json};
  rapidjson::Writer<protocol::StringSink> w(sink);
  w.StartObject();
  w.Key("id");
  w.Uint64(id_);
  w.Key("model_name");
  w.String(model_name_.data(), static_cast<rapidjson::SizeType>(model_name_.size()));
  w.Key("model_version");
  w.Int64(model_version_);
  if (!request_id_.empty()) {
    w.Key("request_id");
    w.String(request_id_.data(), static_cast<rapidjson::SizeType>(request_id_.size()));
  }
  w.Key("timestamps");
  w.StartArray();
  auto stamp = [&](const char* name, int64_t ns) {
    w.StartObject();
    w.Key("name");
    w.String(name);
    w.Key("ns");
    w.Int64(ns);
  };
  for (int a = 0; a < kActivities; ++a) {
    if (a == kComputeOutputStart) {
      for (const Span& span : spans_) {
        for (int end = 0; end < 2; ++end) {
          stamp(end ? "LOOP_ITERATION_END" : "LOOP_ITERATION_START",
                end ? span.end_ns : span.start_ns);
          w.Key("loop");
          const std::string name = LoopName(span.loop);
          w.String(name.data(), static_cast<rapidjson::SizeType>(name.size()));
          w.Key("iteration");
          w.Int64(span.iteration);
          w.EndObject();
        }
      }
    }
    if (ns_[a] == 0) continue;  // not reached (a request refused before it ran)
    stamp(ActivityName(static_cast<Activity>(a)), ns_[a]);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return json;
}

// ---------------------------------------------------------------------------------------------
// TraceFile

TraceFile::TraceFile(std::string path, std::string name)
    : path_(std::move(path)), name_(std::move(name)) {}

TraceFile::~TraceFile() {
  absl::MutexLock lock(&mutex_);
  WriteLocked();
  if (fd_ >= 0) close(fd_);
}

void TraceFile::Add(std::string json, int64_t every) {
  absl::MutexLock lock(&mutex_);
  pending_.push_back(std::move(json));
  if (write_each_ || (every > 0 && static_cast<int64_t>(pending_.size()) >= every)) WriteLocked();
}

void TraceFile::WriteEach() {
  absl::MutexLock lock(&mutex_);
  write_each_ = true;
}

void TraceFile::Write() {
  absl::MutexLock lock(&mutex_);
  WriteLocked();
}

void TraceFile::WriteLocked() {
  if (pending_.empty() || failed_) {
    pending_.clear();
    return;
  }
  if (fd_ < 0) {
    // O_NOFOLLOW: a link planted in the folder does not send the traces elsewhere.
    fd_ = open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      failed_ = true;
      LogError(absl::StrCat("trace_file '", absl::CHexEscape(name_),
                            "': cannot open it in the trace folder: ", std::strerror(errno),
                            "; its traces are dropped"));
      pending_.clear();
      return;
    }
  }
  std::string bytes = end_ == 0 ? "[\n" : ",\n";
  for (size_t k = 0; k < pending_.size(); ++k) {
    if (k > 0) bytes += ",\n";
    bytes += pending_[k];
  }
  const int64_t end = end_ + static_cast<int64_t>(bytes.size());
  bytes += kClosing;
  // Over the old closing bracket: the file is a complete JSON array after each write.
  if (!WriteAllAt(fd_, bytes, end_)) {
    failed_ = true;
    LogError(absl::StrCat("trace_file '", absl::CHexEscape(name_),
                          "': write failed: ", std::strerror(errno), "; its traces are dropped"));
  }
  end_ = end;
  pending_.clear();
}

// ---------------------------------------------------------------------------------------------
// Tracer

Tracer& Tracer::Global() {
  static Tracer* const tracer = new Tracer();  // never destroyed: requests may end at exit
  return *tracer;
}

Tracer::~Tracer() {
  WriteAll();
  std::thread writer;
  {
    absl::MutexLock lock(&queue_mutex_);
    stop_ = true;
    writer = std::move(writer_);
  }
  if (writer.joinable()) writer.join();
}

void Tracer::SetExporter(std::unique_ptr<TraceExporter> exporter) {
  exporter_ = std::move(exporter);
}

void Tracer::SetDirectory(std::string dir) {
  absl::MutexLock lock(&mutex_);
  dir_ = std::move(dir);
}

absl::Status Tracer::Apply(Settings& settings, const std::string& name,
                           const std::vector<std::string>& values) const {
  if (name == "trace_level") {
    if (values.empty()) return absl::InvalidArgumentError("trace_level needs a level");
    bool off = false;
    for (const std::string& level : values) {
      if (level == "TENSORS") {
        return absl::UnimplementedError(
            "trace_level TENSORS: loopserve does not dump tensors into traces (TIMESTAMPS and "
            "LOOP_ITERATIONS are written)");
      }
      if (level != "OFF" && level != "TIMESTAMPS" && level != "LOOP_ITERATIONS") {
        return absl::InvalidArgumentError(absl::StrCat("unknown trace_level '",
                                                       absl::CHexEscape(level.substr(0, 32)),
                                                       "' (OFF, TIMESTAMPS, LOOP_ITERATIONS)"));
      }
      off = off || level == "OFF";
    }
    if (off && values.size() > 1) {
      return absl::InvalidArgumentError("trace_level OFF cannot be combined with other levels");
    }
    settings.level = values;
    return absl::OkStatus();
  }
  if (name == "trace_rate" || name == "trace_count" || name == "log_frequency") {
    int64_t number = 0;
    const int64_t least = name == "trace_rate" ? 1 : name == "trace_count" ? -1 : 0;
    if (values.size() != 1 || !absl::SimpleAtoi(values[0], &number) || number < least) {
      return absl::InvalidArgumentError(absl::StrCat("trace setting '", name, "' must be one ",
                                                     name == "trace_rate" ? "positive integer"
                                                     : name == "trace_count"
                                                         ? "non-negative integer (or -1: no limit)"
                                                         : "non-negative integer"));
    }
    (name == "trace_rate"    ? settings.rate
     : name == "trace_count" ? settings.count
                             : settings.log_frequency) = number;
    return absl::OkStatus();
  }
  if (values.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("trace setting '", name, "' takes one value"));
  }
  const std::string& value = values[0];
  if (name == "trace_file") {
    if (value.find('/') != std::string::npos || value == "." || value == ".." ||
        value.find('\0') != std::string::npos || value.size() > 255) {
      return absl::InvalidArgumentError(
          "trace_file must be a plain file name (it is created in the server's --trace_dir, or "
          "--log_dir without one)");
    }
    settings.file = value;
    return absl::OkStatus();
  }
  if (name == "trace_mode") {
    if (value != "triton" && value != "opentelemetry") {
      return absl::InvalidArgumentError(absl::StrCat("trace_mode '",
                                                     absl::CHexEscape(value.substr(0, 32)),
                                                     "': the modes are triton and opentelemetry"));
    }
    if (value == "opentelemetry" && exporter_ == nullptr) {
      return absl::FailedPreconditionError(
          "trace_mode opentelemetry needs the server started with an OTLP collector's URL "
          "(--trace_otlp_url, or Triton's --trace-config opentelemetry,url=...)");
    }
    settings.mode = value;
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown trace setting '", absl::CHexEscape(name.substr(0, 64)), "' (", kNames, ")"));
}

absl::StatusOr<TraceSettingList> Tracer::Update(absl::string_view model,
                                                const TraceSettingList& changes) {
  absl::MutexLock lock(&mutex_);
  const bool server = model.empty();
  auto found = server ? models_.end() : models_.find(model);
  Group* existing = server ? &server_ : found != models_.end() ? &found->second : nullptr;
  if (changes.empty()) {  // a read
    const Group& group = existing != nullptr ? *existing : server_;
    return ToList(group.effective, group.remaining);
  }
  // Validate everything on a copy first: all or nothing.
  Group next = existing != nullptr ? *existing : Group();
  if (existing == nullptr) next.own = server_.effective;
  const Settings defaults;
  for (const auto& [name, values] : changes) {
    if (values.empty()) {  // clear: the default, or the server's
      Settings fallback = server ? defaults : server_.effective;
      std::vector<std::string> one;
      if (name == "trace_level") {
        one = fallback.level;
      } else if (name == "trace_file") {
        one = {fallback.file};
      } else if (name == "trace_mode") {
        one = {fallback.mode};
      } else {
        one = {absl::StrCat(name == "trace_rate"    ? fallback.rate
                            : name == "trace_count" ? fallback.count
                                                    : fallback.log_frequency)};
      }
      absl::Status status = Apply(next.own, name, one);
      if (!status.ok()) return status;
      next.set.erase(std::remove(next.set.begin(), next.set.end(), name), next.set.end());
      continue;
    }
    absl::Status status = Apply(next.own, name, values);
    if (!status.ok()) return status;
    if (!server && std::find(next.set.begin(), next.set.end(), name) == next.set.end()) {
      next.set.push_back(name);
    }
  }
  Settings probe = server ? next.own : server_.effective;
  if (!server) {
    for (const std::string& name : next.set) {
      if (name == "trace_file") probe.file = next.own.file;
    }
  }
  if (!probe.file.empty() && dir_.empty()) {
    return absl::FailedPreconditionError(
        "trace_file can be set only when the server runs with --trace_dir or --log_dir (the "
        "folder it goes in)");
  }
  bool counts_changed = false;
  for (const auto& change : changes) {
    counts_changed = counts_changed || change.first == "trace_count" ||
                     change.first == "trace_rate" || change.first == "trace_level";
  }
  Group* group = nullptr;
  if (server) {
    server_ = std::move(next);
    group = &server_;
  } else if (next.set.empty()) {  // every setting cleared: the model follows the server again
    if (found != models_.end()) models_.erase(found);
    UpdateActive();
    return ToList(server_.effective, server_.remaining);
  } else {
    if (existing == nullptr && models_.size() >= kMaxModels) {
      return absl::ResourceExhaustedError(absl::StrCat("trace settings are kept for at most ",
                                                       kMaxModels,
                                                       " models; clear a model's settings first"));
    }
    group = &models_[std::string(model)];
    *group = std::move(next);
  }
  Refresh(*group, counts_changed || existing == nullptr);
  if (server) {
    for (auto& [name, model_group] : models_) Refresh(model_group, false);
  }
  UpdateActive();
  return ToList(group->effective, group->remaining);
}

void Tracer::Refresh(Group& group, bool reset_sampling) {
  Settings effective;
  if (&group == &server_) {
    effective = group.own;
  } else {
    effective = server_.effective;
    for (const std::string& name : group.set) {
      if (name == "trace_level") effective.level = group.own.level;
      if (name == "trace_rate") effective.rate = group.own.rate;
      if (name == "trace_count") effective.count = group.own.count;
      if (name == "log_frequency") effective.log_frequency = group.own.log_frequency;
      if (name == "trace_file") effective.file = group.own.file;
      if (name == "trace_mode") effective.mode = group.own.mode;
    }
  }
  const bool count_changed = effective.count != group.effective.count;
  group.effective = effective;
  if (reset_sampling || count_changed) {
    group.seen = 0;
    group.remaining = effective.count;
  }
  std::shared_ptr<TraceFile> file = effective.file.empty() ? nullptr : FileNamed(effective.file);
  if (group.file != nullptr && group.file != file) group.file->Write();  // the file changed
  group.file = std::move(file);
}

std::shared_ptr<TraceFile> Tracer::FileNamed(const std::string& name) {
  std::weak_ptr<TraceFile>& slot = files_[name];
  std::shared_ptr<TraceFile> file = slot.lock();
  if (file == nullptr) {
    file = std::make_shared<TraceFile>(absl::StrCat(dir_, "/", name), name);
    slot = file;
  }
  return file;
}

bool Tracer::Traces(const Group& group) {
  return group.effective.level.size() > 0 && group.effective.level[0] != "OFF" &&
         (group.file != nullptr || group.effective.mode == "opentelemetry") && group.remaining != 0;
}

void Tracer::UpdateActive() {
  bool active = Traces(server_);
  for (const auto& [name, group] : models_) active = active || Traces(group);
  active_.store(active, std::memory_order_relaxed);
  for (auto it = files_.begin(); it != files_.end();) {
    auto next = std::next(it);
    if (it->second.expired()) files_.erase(it);
    it = next;
  }
}

std::unique_ptr<RequestTrace> Tracer::SampleSlow(absl::string_view model, int64_t version) {
  absl::MutexLock lock(&mutex_);
  auto found = models_.find(model);
  Group& group = found != models_.end() ? found->second : server_;
  if (!Traces(group)) return nullptr;
  if (group.seen++ % static_cast<uint64_t>(group.effective.rate) != 0) return nullptr;
  if (group.remaining > 0 && --group.remaining == 0) UpdateActive();
  bool iterations = false;
  for (const std::string& level : group.effective.level) {
    iterations = iterations || level == "LOOP_ITERATIONS";
  }
  const bool exported = group.effective.mode == "opentelemetry";
  auto trace = std::make_unique<RequestTrace>(next_id_.fetch_add(1), std::string(model), version,
                                              iterations, exported ? nullptr : group.file);
  trace->every_ = group.effective.log_frequency;
  trace->last_ = group.remaining == 0;
  return trace;
}

void Tracer::Finish(std::unique_ptr<RequestTrace> trace) {
  if (trace == nullptr) return;
  if (trace->file_ == nullptr) {  // trace_mode opentelemetry
    trace->KeepLoopNames();       // the request (and its pin on the model) ends here
    if (exporter_ != nullptr) exporter_->Export(std::move(trace));
    return;
  }
  trace->KeepLoopNames();  // the request (and its pin on the model) ends here
  {
    absl::MutexLock lock(&queue_mutex_);
    if (!writer_.joinable()) writer_ = std::thread([this] { WriteLoop(); });
    if (finished_.size() < kMaxQueued) {
      finished_.push_back(std::move(trace));
      return;
    }
  }
  WriteTrace(*trace);  // the writer is behind: this thread does its part (bounded memory)
}

void Tracer::WriteTrace(const RequestTrace& trace) {
  // Once a count ran out, what was collected is written, and so is each trace that ends later.
  if (trace.last_) trace.file_->WriteEach();
  trace.file_->Add(trace.ToJson(), trace.every_);
}

void Tracer::WriteLoop() {
  std::vector<std::unique_ptr<RequestTrace>> batch;
  absl::MutexLock lock(&queue_mutex_);
  auto any = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mutex_) {
    return !finished_.empty() || stop_;
  };
  auto full = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mutex_) {
    return finished_.size() >= kWriteBatch || stop_ || waiters_ > 0;
  };
  while (true) {
    // Woken by the first trace, then collecting more for a while: a finishing request does not
    // wake this thread (a system call) for each trace.
    queue_mutex_.Await(absl::Condition(&any));
    queue_mutex_.AwaitWithTimeout(absl::Condition(&full), kWriteDelay);
    if (finished_.empty()) return;  // stopping
    batch.swap(finished_);
    writing_ = true;
    queue_mutex_.Unlock();
    for (const std::unique_ptr<RequestTrace>& trace : batch) WriteTrace(*trace);
    batch.clear();
    queue_mutex_.Lock();
    writing_ = false;
  }
}

void Tracer::WaitWritten() {
  absl::MutexLock lock(&queue_mutex_);
  ++waiters_;  // the writer does not wait for more
  auto written = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mutex_) {
    return finished_.empty() && !writing_;
  };
  queue_mutex_.Await(absl::Condition(&written));
  --waiters_;
}

void Tracer::WriteAll() {
  WaitWritten();
  std::vector<std::shared_ptr<TraceFile>> files;
  {
    absl::MutexLock lock(&mutex_);
    for (const auto& [name, weak] : files_) {
      if (std::shared_ptr<TraceFile> file = weak.lock()) files.push_back(std::move(file));
    }
  }
  for (const std::shared_ptr<TraceFile>& file : files) file->Write();
  if (exporter_ != nullptr) exporter_->Flush();
}

TraceSettingList Tracer::ToList(const Settings& settings, int64_t remaining) {
  return {{"trace_file", {settings.file}},
          {"trace_level", settings.level},
          {"trace_rate", {absl::StrCat(settings.rate)}},
          {"trace_count", {absl::StrCat(remaining)}},
          {"log_frequency", {absl::StrCat(settings.log_frequency)}},
          {"trace_mode", {settings.mode}}};
}

}  // namespace loopserve::server
