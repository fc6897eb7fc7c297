#pragma once

#include <atomic>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "proto/model_config.pb.h"
#include "server/repository/model_config.h"

namespace loopserve::server {

// Limits of each warm-up run.
struct WarmupOptions {
  int64_t max_loop_iterations = 0;  // the version's caps (0 = unlimited)
  int64_t max_output_bytes = 0;
  int64_t max_memory_bytes = 0;  // the version's per-request memory budget (0 = unlimited)
  // The version's Loop thread mode: its primitives are those the requests' runs then use.
  engine::LoopThreads loop_threads = engine::LoopThreads::kAdaptive;
  absl::Duration run_timeout = absl::Seconds(60);  // deadline of one run
  // oneDNN threads of the runs, as a worker would use (0 = leave the calling thread's setting):
  // a warm-up with more threads than the workers have would, on a busy machine, spin OpenMP
  // teams against the server's own threads.
  int intra_op_threads = 0;
  // Set (from any thread) to stop the warm-up: a run in progress stops as a cancelled request's
  // does (at its next Loop iteration or kernel chunk), and no further run starts. Not owned; may
  // be null.
  const std::atomic<bool>* cancelled = nullptr;
};

// Runs the `model_warmup` samples of a complete config (CompleteModelConfig has checked them
// against the inputs) on `model`, as Triton does before a version serves: each sample
// max(count, 1) times, in order, with inputs of the sample's data_type and dims (the batch dim
// batch_size first when max_batch_size > 0; inputs the sample leaves out are absent):
//   zero_data        zeros;
//   random_data      floats uniform in [-1, 1), integers in [0, 8) (trip counts and token ids
//                    stay small), fair-coin bools, zeros for FP16 (fixed seed: reproducible);
//   input_data_file  the raw little-endian row-major bytes of <model_dir>/warmup/<file> for one
//                    batch element, repeated batch_size times.
// The first run of a shape creates the oneDNN primitives it needs and touches the buffers, so the
// first client does not pay for it. Runs on the caller's thread (setting its intra-op threads
// when `intra_op_threads` > 0), outside every request metric.
//
// A sample's inputs are allocated through the version's memory budget (`max_memory_bytes`, the
// per-request one): a batch that does not fit is ResourceExhausted naming the sample, before the
// memory is asked for (so a config's batch_size can never exhaust the process).
//
// Returns how many runs it made. Errors name the sample and the run: InvalidArgument for a data
// file that is missing or of the wrong size, or inputs the model rejects; the engine's error
// (annotated) when a run fails, including DeadlineExceeded after `run_timeout` and
// ResourceExhausted at a cap; Cancelled once `cancelled` is set.
absl::StatusOr<int64_t> RunModelWarmup(const inference::ModelConfig& config, const ModelIo& io,
                                       const engine::Model& model, const std::string& model_dir,
                                       const WarmupOptions& options);

}  // namespace loopserve::server
