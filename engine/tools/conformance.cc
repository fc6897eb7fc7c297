#include "engine/tools/conformance.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <regex>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/tools/looprun.h"

namespace loopserve::tools {
namespace {

namespace fs = std::filesystem;
using engine::Model;
using engine::Value;

// Longest failure reason kept; engine messages can quote whole shapes or tensors.
constexpr size_t kMaxReason = 400;

bool IsFile(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

std::string ModelPath(const fs::path& case_dir) {
  const fs::path onnx = case_dir / "model.onnx";
  if (IsFile(onnx)) return onnx.string();
  const fs::path xml = case_dir / "model.xml";
  if (IsFile(xml)) return xml.string();
  return std::string();
}

// Appends every case folder under `dir` (depth first, names sorted) to `cases` as (name, path).
void FindCases(const fs::path& root, const fs::path& dir,
               std::vector<std::pair<std::string, std::string>>& cases) {
  if (!ModelPath(dir).empty()) {
    std::string name = fs::relative(dir, root).generic_string();
    if (name.empty() || name == ".") name = root.filename().string();
    cases.emplace_back(std::move(name), dir.string());
    return;
  }
  std::vector<fs::path> subdirs;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    std::error_code type_ec;
    if (entry.is_directory(type_ec)) subdirs.push_back(entry.path());
  }
  std::sort(subdirs.begin(), subdirs.end());
  for (const fs::path& sub : subdirs) FindCases(root, sub, cases);
}

// The case's test_data_set_<k> folders, in order of k.
std::vector<fs::path> DataSets(const fs::path& case_dir) {
  std::vector<std::pair<int64_t, fs::path>> sets;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(case_dir, ec)) {
    const std::string name = entry.path().filename().string();
    std::error_code type_ec;
    if (!entry.is_directory(type_ec) || !absl::StartsWith(name, "test_data_set_")) continue;
    int64_t k = 0;
    if (!absl::SimpleAtoi(absl::string_view(name).substr(14), &k)) k = INT64_MAX;
    sets.emplace_back(k, entry.path());
  }
  std::sort(sets.begin(), sets.end());
  std::vector<fs::path> paths;
  for (auto& [k, path] : sets) paths.push_back(std::move(path));
  return paths;
}

// One line, at most kMaxReason characters.
std::string OneLine(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  if (s.size() > kMaxReason) s = s.substr(0, kMaxReason - 3) + "...";
  return s;
}

CaseResult Pass() { return CaseResult{true, ""}; }
CaseResult Fail(std::string reason) { return CaseResult{false, std::move(reason)}; }

CaseResult RunExpectError(const std::string& model_path, const std::vector<fs::path>& data_sets) {
  auto loaded = Model::Load(model_path);
  if (!loaded.ok()) return Pass();
  const Model& model = **loaded;
  bool ran = false;
  for (const fs::path& set : data_sets) {
    const std::string set_name = set.filename().string();
    auto inputs = ReadInputs(model, set.string());
    if (!inputs.ok()) return Fail(absl::StrCat(set_name, ": ", inputs.status().ToString()));
    if (!model.Run(std::move(inputs).value(), engine::RunOptions()).ok()) return Pass();
    ran = true;
  }
  if (data_sets.empty() && model.inputs().empty()) {
    if (!model.Run({}, engine::RunOptions()).ok()) return Pass();
    ran = true;
  }
  return Fail(absl::StrCat("EXPECT_ERROR, but the model loaded", ran ? " and ran" : "",
                           " without an error"));
}

CaseResult RunCaseOrThrow(const std::string& case_dir) {
  const std::string model_path = ModelPath(case_dir);
  if (model_path.empty()) return Fail("no model.onnx or model.xml");
  const std::vector<fs::path> data_sets = DataSets(case_dir);
  if (IsFile(fs::path(case_dir) / "EXPECT_ERROR")) return RunExpectError(model_path, data_sets);

  auto loaded = Model::Load(model_path);
  if (!loaded.ok()) return Fail(absl::StrCat("load: ", loaded.status().ToString()));
  const Model& model = **loaded;
  // NO_DATA, or no data sets: loading is the whole test.
  if (IsFile(fs::path(case_dir) / "NO_DATA")) return Pass();
  Tolerance tolerance;
  if (IsFile(fs::path(case_dir) / "ATOL")) {
    std::ifstream file(fs::path(case_dir) / "ATOL");
    std::string text;
    file >> text;
    double atol = 0;
    if (!absl::SimpleAtod(text, &atol) || !(atol >= 0) || atol > 1) {
      return Fail(absl::StrCat("ATOL: '", text, "' is not an absolute tolerance in [0, 1]"));
    }
    tolerance.atol = atol;
  }
  for (const fs::path& set : data_sets) {
    const std::string set_name = set.filename().string();
    auto inputs = ReadInputs(model, set.string());
    if (!inputs.ok()) return Fail(absl::StrCat(set_name, ": ", inputs.status().ToString()));
    auto outputs = model.Run(std::move(inputs).value(), engine::RunOptions());
    if (!outputs.ok()) return Fail(absl::StrCat(set_name, ": run: ", outputs.status().ToString()));
    auto mismatch =
        CompareWithReference(model, *outputs, set.string(), /*require_all=*/true, tolerance);
    if (!mismatch.ok()) return Fail(absl::StrCat(set_name, ": ", mismatch.status().ToString()));
    if (mismatch->has_value()) return Fail(absl::StrCat(set_name, ": ", **mismatch));
  }
  return Pass();
}

// ---- Isolation: one forked child per case. ----
//
// The child runs the case and writes its verdict to a pipe ("P" or "F<reason>"), then _exit(0)s.
// The parent reads the pipe, reaps the child, and turns a signal, a missing verdict or the timeout
// into a failure. Children never write to stdout (it is redirected to stderr), so the parent's
// per-case lines stay in order.

struct Child {
  size_t index = 0;
  pid_t pid = -1;
  int fd = -1;
  std::string verdict;
  bool eof = false;
  absl::Time deadline;
};

void WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

[[noreturn]] void ChildMain(const CaseRunner& run_case, const std::string& case_dir, int fd) {
  dup2(STDERR_FILENO, STDOUT_FILENO);
  const CaseResult result = run_case(case_dir);
  WriteAll(fd, result.passed ? std::string("P") : "F" + result.reason);
  close(fd);
  _exit(0);
}

absl::StatusOr<Child> StartChild(const CaseRunner& run_case, size_t index,
                                 const std::string& case_dir, absl::Duration timeout) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    close(fds[0]);
    ChildMain(run_case, case_dir, fds[1]);
  }
  close(fds[1]);
  // The parent drains the pipe without blocking (ReadVerdict reads until EAGAIN or EOF).
  fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  Child child;
  child.index = index;
  child.pid = pid;
  child.fd = fds[0];
  child.deadline = absl::Now() + timeout;
  return child;
}

// Reaps the exited child and turns what it left into a verdict.
CaseResult FinishChild(Child& child, int wait_status) {
  close(child.fd);
  child.fd = -1;
  if (WIFSIGNALED(wait_status)) {
    return Fail(absl::StrCat("crashed (signal ", WTERMSIG(wait_status), ")"));
  }
  if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0 && !child.verdict.empty()) {
    if (child.verdict[0] == 'P') return Pass();
    return Fail(child.verdict.substr(1));
  }
  return Fail(absl::StrCat("exited with status ",
                           WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1,
                           " without a verdict"));
}

CaseResult KillChild(Child& child, absl::Duration timeout) {
  kill(child.pid, SIGKILL);
  int status = 0;
  while (waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
  }
  close(child.fd);
  child.fd = -1;
  return Fail(absl::StrCat("timed out (", absl::FormatDuration(timeout), ")"));
}

// Drains whatever the child has written; sets eof when the pipe is closed.
void ReadVerdict(Child& child) {
  char buffer[4096];
  while (true) {
    const ssize_t n = read(child.fd, buffer, sizeof(buffer));
    if (n > 0) {
      child.verdict.append(buffer, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) child.eof = true;
    return;
  }
}

}  // namespace

absl::Status RunIsolated(const std::vector<std::string>& cases, int jobs, absl::Duration timeout,
                         const CaseRunner& run_case, const CaseReporter& report) {
  std::vector<std::optional<CaseResult>> results(cases.size());
  std::vector<Child> running;
  size_t next_to_start = 0;
  size_t next_to_report = 0;
  while (next_to_report < cases.size()) {
    while (next_to_start < cases.size() && static_cast<int>(running.size()) < jobs) {
      auto child = StartChild(run_case, next_to_start, cases[next_to_start], timeout);
      if (!child.ok()) return child.status();
      running.push_back(std::move(child).value());
      ++next_to_start;
    }

    // Wait for output, EOF or the earliest deadline; poll briefly while a child that closed its
    // pipe has not exited yet.
    const absl::Time now = absl::Now();
    absl::Duration wait = absl::Seconds(1);
    std::vector<pollfd> fds;
    for (const Child& child : running) {
      wait = std::min(wait, child.deadline - now);
      if (child.eof) {
        wait = std::min(wait, absl::Milliseconds(5));
      } else {
        fds.push_back(pollfd{child.fd, POLLIN, 0});
      }
    }
    const int wait_ms = static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(wait) + 1));
    if (poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("poll: ", std::strerror(errno)));
    }
    for (const pollfd& p : fds) {
      if ((p.revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      for (Child& child : running) {
        if (child.fd == p.fd) ReadVerdict(child);
      }
    }

    for (auto it = running.begin(); it != running.end();) {
      Child& child = *it;
      int status = 0;
      const pid_t done = child.eof ? waitpid(child.pid, &status, WNOHANG) : 0;
      if (done == child.pid) {
        results[child.index] = FinishChild(child, status);
      } else if (absl::Now() >= child.deadline) {
        results[child.index] = KillChild(child, timeout);
      } else {
        ++it;
        continue;
      }
      it = running.erase(it);
    }

    while (next_to_report < cases.size() && results[next_to_report].has_value()) {
      report(next_to_report, *results[next_to_report]);
      ++next_to_report;
    }
  }
  return absl::OkStatus();
}

CaseResult RunCase(const std::string& case_dir) {
  CaseResult result;
  try {
    result = RunCaseOrThrow(case_dir);
  } catch (const std::exception& e) {
    result = Fail(absl::StrCat("exception: ", e.what()));
  } catch (...) {
    result = Fail("unknown exception");
  }
  result.reason = OneLine(std::move(result.reason));
  return result;
}

int RunConformanceMain(const ConformanceOptions& options) {
  std::error_code ec;
  if (!fs::is_directory(options.dir, ec)) {
    std::cerr << "looprun: --conformance: '" << options.dir << "' is not a directory" << std::endl;
    return kExitError;
  }
  if (options.jobs < 1) {
    std::cerr << "looprun: --jobs must be at least 1" << std::endl;
    return kExitError;
  }
  std::regex filter;
  try {
    filter = std::regex(options.filter.empty() ? std::string(".*") : options.filter);
  } catch (const std::regex_error& e) {
    std::cerr << "looprun: --filter '" << options.filter << "' is not a valid regex: " << e.what()
              << std::endl;
    return kExitError;
  }

  std::vector<std::pair<std::string, std::string>> all_cases;
  FindCases(fs::path(options.dir), fs::path(options.dir), all_cases);
  std::vector<std::pair<std::string, std::string>> cases;
  for (auto& c : all_cases) {
    if (std::regex_search(c.first, filter)) cases.push_back(std::move(c));
  }

  std::ofstream list;
  if (!options.list_file.empty()) {
    list.open(options.list_file, std::ios::trunc);
    if (!list) {
      std::cerr << "looprun: cannot create '" << options.list_file << "'" << std::endl;
      return kExitError;
    }
  }

  std::vector<std::string> case_dirs;
  for (const auto& c : cases) case_dirs.push_back(c.second);
  int passed = 0;
  int failed = 0;
  const absl::Status status =
      RunIsolated(case_dirs, options.jobs, options.case_timeout, RunCase,
                  [&](size_t i, const CaseResult& result) {
                    const std::string& name = cases[i].first;
                    if (result.passed) {
                      ++passed;
                      std::cout << "PASS " << name << "\n";
                    } else {
                      ++failed;
                      std::cout << "FAIL " << name << ": " << result.reason << "\n";
                    }
                    std::cout.flush();
                    if (list.is_open()) {
                      list << name << '\t' << (result.passed ? "pass" : "fail") << '\t'
                           << result.reason << '\n';
                    }
                  });
  if (!status.ok()) {
    std::cerr << "looprun: " << status.ToString() << std::endl;
    return kExitError;
  }
  std::cout << passed << " passed, " << failed << " failed" << std::endl;
  if (list.is_open()) {
    list.close();
    if (!list) {
      std::cerr << "looprun: error writing '" << options.list_file << "'" << std::endl;
      return kExitError;
    }
  }
  return failed == 0 ? kExitOk : kExitMismatch;
}

}  // namespace loopserve::tools
