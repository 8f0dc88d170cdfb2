// Gradient buckets for data-parallel training (PyTorch DDP's Reducer, Li et al. VLDB 2020):
// the flat gradient buffer cut into buckets of a tunable size, each all-reduced by a
// communication thread as soon as the backward pass has finished all of its gradients.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "rtx/dist/comm.hpp"

namespace rtx::dist {

/// A contiguous range of the flat gradient buffer, in floats.
struct Bucket {
  size_t offset = 0, count = 0;
};

/// Cut a buffer of `n` floats into buckets of at most `bucket_bytes` bytes (rounded down to
/// whole floats, at least one float), starting from the END of the buffer: a backward pass
/// finishes the last layers' gradients first, and those sit at the end of GPT-2's layout. The
/// result is ordered as the backward pass completes them (highest offsets first) and tiles
/// [0, n) exactly. bucket_bytes = 0: one bucket of everything. n = 0: no bucket.
std::vector<Bucket> plan_buckets(size_t n, size_t bucket_bytes);

/// Cumulative timings of a GradBucketer.
struct BucketStats {
  double comm_s = 0;       ///< time spent inside all-reduces (communication thread)
  double exposed_s = 0;    ///< time finish() waited after the backward pass returned
  size_t allreduces = 0;   ///< bucket all-reduces done
  size_t bytes = 0;        ///< bytes all-reduced
  /// Share of communication time hidden behind the backward: 1 - exposed/comm (0 when comm 0).
  double hidden_share() const;
};

/// Overlaps the all-reduce of gradient buckets with the backward pass. Per step:
///   begin(); model.backward(...) calling mark_ready(offset, count) per finished range;
///   finish();   // all-reduces what is left, waits for everything, rethrows a comm error
/// After finish(), grads[0..n) holds the sum over ranks. With a communicator that cannot be
/// driven from a second thread (see thread_capable) or `overlap` false, every bucket is reduced
/// in finish() on the calling thread. Not copyable; the thread is joined by the destructor.
class GradBucketer {
 public:
  /// `grads` (n floats, in comm.memory()) must outlive this object. Throws Error(Usage) for a
  /// null pointer with n > 0.
  GradBucketer(Communicator& comm, float* grads, size_t n, size_t bucket_bytes, bool overlap = true);
  ~GradBucketer();
  GradBucketer(const GradBucketer&) = delete;
  GradBucketer& operator=(const GradBucketer&) = delete;

  /// Arm for one backward pass: resets the per-bucket ready counts. Error(Usage) while a pass
  /// is armed and not finished.
  void begin();
  /// Gradients [offset, offset+count) are final for this pass (each float reported at most once
  /// per pass). Buckets whose every float is ready are queued for the communication thread.
  /// Ignored when not armed (e.g. the earlier micro-batches of gradient accumulation). Throws
  /// Error(Usage) for a range past n.
  void mark_ready(size_t offset, size_t count);
  /// Queue every bucket not yet queued, wait for all, disarm. Rethrows the communication
  /// thread's Error (timeout, dead rank).
  void finish();

  const std::vector<Bucket>& buckets() const { return buckets_; }
  BucketStats stats() const;
  bool overlapping() const { return threaded_; }

 private:
  void launch_locked(size_t b);
  void run_thread();
  void reduce(size_t b);

  Communicator& comm_;
  float* grads_;
  size_t n_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> ready_;    // floats ready per bucket this pass
  std::vector<char> launched_;   // queued this pass
  bool armed_ = false;
  bool threaded_ = false;

  mutable std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  std::deque<size_t> queue_;
  size_t done_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  BucketStats stats_;
  std::thread thread_;
};

}  // namespace rtx::dist
