// Gradient buckets and the communication thread that all-reduces them while the backward pass
// runs (PyTorch DDP's Reducer: Li et al., "PyTorch Distributed", VLDB 2020, section 3.2.3).
#include "rtx/dist/buckets.hpp"

#include <algorithm>
#include <chrono>

#include "rtx/core/error.hpp"

namespace rtx::dist {

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

std::vector<Bucket> plan_buckets(size_t n, size_t bucket_bytes) {
  std::vector<Bucket> out;
  if (n == 0) return out;
  const size_t per = bucket_bytes == 0 ? n : std::max<size_t>(1, bucket_bytes / sizeof(float));
  size_t end = n;
  while (end > 0) {
    const size_t c = std::min(per, end);
    out.push_back(Bucket{end - c, c});
    end -= c;
  }
  return out;
}

double BucketStats::hidden_share() const {
  if (!(comm_s > 0)) return 0;
  return std::clamp(1.0 - exposed_s / comm_s, 0.0, 1.0);
}

GradBucketer::GradBucketer(Communicator& comm, float* grads, size_t n, size_t bucket_bytes, bool overlap)
    : comm_(comm), grads_(grads), n_(n), buckets_(plan_buckets(n, bucket_bytes)) {
  if (n > 0 && !grads) throw_usage("GradBucketer: null gradient buffer of " + std::to_string(n) + " floats", "grads");
  ready_.assign(buckets_.size(), 0);
  launched_.assign(buckets_.size(), 0);
  threaded_ = overlap && comm.size() > 1 && buckets_.size() > 0 && thread_capable(comm);
  if (threaded_) thread_ = std::thread([this] { run_thread(); });
}

GradBucketer::~GradBucketer() {
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_work_.notify_all();
    thread_.join();
  }
}

void GradBucketer::begin() {
  std::lock_guard<std::mutex> lk(mu_);
  if (armed_) throw_usage("GradBucketer::begin while a pass is armed; call finish() first", "GradBucketer");
  std::fill(ready_.begin(), ready_.end(), 0);
  std::fill(launched_.begin(), launched_.end(), 0);
  queue_.clear();
  done_ = 0;
  error_ = nullptr;
  armed_ = true;
}

void GradBucketer::launch_locked(size_t b) {
  launched_[b] = 1;
  queue_.push_back(b);
}

void GradBucketer::mark_ready(size_t offset, size_t count) {
  if (offset > n_ || count > n_ - offset)
    throw_usage("GradBucketer::mark_ready: range [" + std::to_string(offset) + ", " + std::to_string(offset + count) +
                    ") is past the buffer of " + std::to_string(n_) + " floats",
                "mark_ready");
  bool wake = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!armed_ || !threaded_) return;
    const size_t lo = offset, hi = offset + count;
    for (size_t b = 0; b < buckets_.size(); ++b) {
      const size_t bl = buckets_[b].offset, bh = bl + buckets_[b].count;
      const size_t a = std::max(lo, bl), e = std::min(hi, bh);
      if (a >= e) continue;
      ready_[b] += e - a;
      if (ready_[b] >= buckets_[b].count && !launched_[b]) {
        launch_locked(b);
        wake = true;
      }
    }
  }
  if (wake) cv_work_.notify_one();
}

void GradBucketer::reduce(size_t b) {
  const double t0 = now_s();
  comm_.allreduce_sum(grads_ + buckets_[b].offset, buckets_[b].count);
  const double dt = now_s() - t0;
  std::lock_guard<std::mutex> lk(mu_);
  stats_.comm_s += dt;
  stats_.allreduces += 1;
  stats_.bytes += buckets_[b].count * sizeof(float);
}

void GradBucketer::run_thread() {
  for (;;) {
    size_t b = 0;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_work_.wait(lk, [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      b = queue_.front();
      queue_.pop_front();
      if (error_) {  // an earlier bucket failed: the group is broken, skip the rest
        ++done_;
        cv_done_.notify_all();
        continue;
      }
    }
    try {
      reduce(b);
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      if (!error_) error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      ++done_;
    }
    cv_done_.notify_all();
  }
}

void GradBucketer::finish() {
  const double t0 = now_s();
  if (!threaded_) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      armed_ = false;
    }
    for (size_t b = 0; b < buckets_.size(); ++b) reduce(b);
    std::lock_guard<std::mutex> lk(mu_);
    stats_.exposed_s += now_s() - t0;
    return;
  }
  std::exception_ptr err;
  {
    std::unique_lock<std::mutex> lk(mu_);
    if (!armed_) throw_usage("GradBucketer::finish without begin()", "GradBucketer");
    for (size_t b = 0; b < buckets_.size(); ++b)
      if (!launched_[b]) launch_locked(b);
    cv_work_.notify_one();
    cv_done_.wait(lk, [this] { return done_ == buckets_.size(); });
    armed_ = false;
    stats_.exposed_s += now_s() - t0;
    err = error_;
  }
  if (err) std::rethrow_exception(err);
}

BucketStats GradBucketer::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

}  // namespace rtx::dist
