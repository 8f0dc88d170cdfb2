// rtx::Tensor: shape checks, views (narrow/select/permute/reshape), strided CPU copies,
// dtype conversion, and CPU<->CUDA copies (cudaMemcpy; the strided GPU gather is in tensor_cuda.cu).
#include "rtx/core/tensor.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>

#include "rtx/core/allocator.hpp"
#include "rtx/core/device.hpp"
#include "rtx/core/error.hpp"

#ifdef RTX_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "rtx/core/cuda_check.hpp"
#endif

namespace rtx {

std::string Device::str() const { return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index); }

namespace {

std::string shape_str(const int64_t* s, int n) {
  std::string r = "[";
  for (int i = 0; i < n; ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// Validate a shape and return its element count. Errors are Input naming "shape".
int64_t checked_numel(const std::vector<int64_t>& shape, size_t itemsize) {
  if (shape.size() > static_cast<size_t>(kMaxDims))
    throw_input("tensor has " + std::to_string(shape.size()) + " dims, at most " + std::to_string(kMaxDims) +
                    " are supported", "shape", "merge dims before building the tensor");
  int64_t n = 1;
  const int64_t cap = std::numeric_limits<int64_t>::max() / 8;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0)
      throw_input("negative size " + std::to_string(shape[i]) + " at dim " + std::to_string(i) + " of shape " +
                      shape_str(shape.data(), static_cast<int>(shape.size())), "shape");
    if (shape[i] != 0 && n > cap / shape[i])
      throw_input("element count of shape " + shape_str(shape.data(), static_cast<int>(shape.size())) +
                      " overflows", "shape");
    n *= shape[i];
  }
  if (static_cast<uint64_t>(n) > static_cast<uint64_t>(cap) / itemsize)
    throw_input("byte size of shape " + shape_str(shape.data(), static_cast<int>(shape.size())) + " overflows", "shape");
  return n;
}

// Calls f(offset_a, offset_b) for every element of `shape` in row-major order, where the
// offsets advance by strides sa and sb from oa and ob.
template <class F>
void walk2(int ndim, const int64_t* shape, const int64_t* sa, const int64_t* sb, int64_t oa, int64_t ob, F&& f) {
  for (int d = 0; d < ndim; ++d)
    if (shape[d] == 0) return;
  if (ndim == 0) {
    f(oa, ob);
    return;
  }
  std::array<int64_t, kMaxDims> idx{};
  const int last = ndim - 1;
  for (;;) {
    int64_t a = oa, b = ob;
    for (int d = 0; d < last; ++d) {
      a += idx[d] * sa[d];
      b += idx[d] * sb[d];
    }
    for (int64_t i = 0; i < shape[last]; ++i) f(a + i * sa[last], b + i * sb[last]);
    int d = last - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

double read_elem(const void* base, int64_t off, DType t) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(base)[off];
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(base)[off]);
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(base)[off]);
    case DType::I32: return static_cast<const int32_t*>(base)[off];
    case DType::I8: return static_cast<const int8_t*>(base)[off];
    case DType::U8: return static_cast<const uint8_t*>(base)[off];
  }
  return 0.0;
}

// double -> f32 rounding to odd: an intermediate that makes the later RNE to bf16/f16
// correctly rounded (Boldo & Melquiond, "Emulation of FMA and correctly rounded sums:
// proved algorithms using rounding to odd", IEEE TC 2008; needs 24 >= 11 + 2 bits).
float f32_round_odd(double d) {
  float f = static_cast<float>(d);
  if (std::isnan(d) || static_cast<double>(f) == d) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);  // truncate
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u |= 1u;
  std::memcpy(&f, &u, 4);
  return f;
}

template <class I>
I saturate_int(double v) {
  if (std::isnan(v)) return 0;
  const double r = std::nearbyint(v);  // default rounding mode: nearest even
  if (r <= static_cast<double>(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  if (r >= static_cast<double>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return static_cast<I>(r);
}

void write_elem(void* base, int64_t off, DType t, double v) {
  switch (t) {
    case DType::F32: static_cast<float*>(base)[off] = static_cast<float>(v); return;
    case DType::BF16: static_cast<uint16_t*>(base)[off] = f32_to_bf16(f32_round_odd(v)); return;
    case DType::F16: static_cast<uint16_t*>(base)[off] = f32_to_f16(f32_round_odd(v)); return;
    case DType::I32: static_cast<int32_t*>(base)[off] = saturate_int<int32_t>(v); return;
    case DType::I8: static_cast<int8_t*>(base)[off] = saturate_int<int8_t>(v); return;
    case DType::U8: static_cast<uint8_t*>(base)[off] = saturate_int<uint8_t>(v); return;
  }
}

template <class T>
void strided_copy_typed(void* dst, const int64_t* dstr, int64_t doff, const void* src, const int64_t* sstr,
                        int64_t soff, int ndim, const int64_t* shape) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  walk2(ndim, shape, dstr, sstr, doff, soff, [&](int64_t a, int64_t b) { d[a] = s[b]; });
}

// Host strided copy of same-dtype elements between two views' storages.
void cpu_strided_copy(void* dst, const int64_t* dstr, int64_t doff, const void* src, const int64_t* sstr,
                      int64_t soff, int ndim, const int64_t* shape, size_t itemsize) {
  switch (itemsize) {
    case 1: strided_copy_typed<uint8_t>(dst, dstr, doff, src, sstr, soff, ndim, shape); return;
    case 2: strided_copy_typed<uint16_t>(dst, dstr, doff, src, sstr, soff, ndim, shape); return;
    case 4: strided_copy_typed<uint32_t>(dst, dstr, doff, src, sstr, soff, ndim, shape); return;
    default: throw_internal("unexpected element size " + std::to_string(itemsize), "cpu_strided_copy");
  }
}

void require_cuda_for(const Device& d, const std::string& what) {
  if (!d.is_cuda()) return;
  require_cuda(what);
  const int n = cuda_device_count();
  if (d.index < 0 || d.index >= n)
    throw_usage("CUDA device index " + std::to_string(d.index) + " out of range (" + std::to_string(n) +
                    " device(s))", what);
}

}  // namespace

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  checked_numel(shape, 1);
  std::vector<int64_t> st(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    st[i] = s;
    s *= std::max<int64_t>(shape[i], 1);
  }
  return st;
}

Tensor Tensor::empty(const std::vector<int64_t>& shape, DType dtype, Device device) {
  const int64_t n = checked_numel(shape, dtype_size(dtype));
  const size_t nbytes = static_cast<size_t>(n) * dtype_size(dtype);
  auto st = std::make_shared<Storage>();
  st->device = device;
  st->nbytes = nbytes;
  if (device.is_cpu()) {
    const size_t alloc = (std::max<size_t>(nbytes, 1) + kHostAlign - 1) / kHostAlign * kHostAlign;
    st->data = ::operator new(alloc, std::align_val_t(kHostAlign), std::nothrow);
    if (!st->data)
      throw_env("out of host memory: tensor of shape " + shape_str(shape.data(), static_cast<int>(shape.size())) +
                    " needs " + std::to_string(alloc) + " B", "Tensor::empty");
    st->deleter = [](void* p) { ::operator delete(p, std::align_val_t(kHostAlign)); };
  } else {
    require_cuda_for(device, "Tensor::empty on " + device.str());
    CachingAllocator* a = &cuda_allocator(device.index);
    st->data = a->allocate(std::max<size_t>(nbytes, 1));
    st->deleter = [a](void* p) {
      try {
        a->deallocate(p);
      } catch (...) {
        // Called from a destructor: nothing sensible to do with a failure here.
      }
    };
  }
  Tensor t;
  t.storage_ = std::move(st);
  t.dtype_ = dtype;
  t.ndim_ = static_cast<int>(shape.size());
  const auto strides = contiguous_strides(shape);
  for (int d = 0; d < t.ndim_; ++d) {
    t.shape_[d] = shape[d];
    t.strides_[d] = strides[d];
  }
  return t;
}

Tensor Tensor::zeros(const std::vector<int64_t>& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (device.is_cpu()) {
    std::memset(t.storage_->data, 0, t.nbytes());
  } else {
#ifdef RTX_HAVE_CUDA
    RTX_CUDA_CHECK(cudaSetDevice(device.index));
    RTX_CUDA_CHECK(cudaMemset(t.storage_->data, 0, t.nbytes()));
#endif
  }
  return t;
}

Tensor Tensor::from_blob(void* data, const std::vector<int64_t>& shape, DType dtype, Device device,
                         const std::vector<int64_t>& strides) {
  const int64_t n = checked_numel(shape, dtype_size(dtype));
  require_cuda_for(device, "Tensor::from_blob on " + device.str());
  if (!data && n > 0) throw_usage("null data pointer for a tensor of " + std::to_string(n) + " elements", "data");
  std::vector<int64_t> st = strides.empty() ? contiguous_strides(shape) : strides;
  if (st.size() != shape.size())
    throw_usage("got " + std::to_string(st.size()) + " strides for " + std::to_string(shape.size()) + " dims",
                "strides");
  int64_t extent = n > 0 ? 1 : 0;
  for (size_t d = 0; d < st.size(); ++d) {
    if (st[d] < 0) throw_usage("negative stride " + std::to_string(st[d]) + " at dim " + std::to_string(d), "strides");
    if (n > 0) extent += (shape[d] - 1) * st[d];
  }
  Tensor t;
  t.storage_ = std::make_shared<Storage>();
  t.storage_->data = data;
  t.storage_->nbytes = static_cast<size_t>(extent) * dtype_size(dtype);
  t.storage_->device = device;
  t.dtype_ = dtype;
  t.ndim_ = static_cast<int>(shape.size());
  for (int d = 0; d < t.ndim_; ++d) {
    t.shape_[d] = shape[d];
    t.strides_[d] = st[d];
  }
  return t;
}

Tensor Tensor::from_vector(const std::vector<float>& values, const std::vector<int64_t>& shape) {
  Tensor t = empty(shape, DType::F32);
  if (static_cast<int64_t>(values.size()) != t.numel())
    throw_usage(std::to_string(values.size()) + " values for shape " + shape_str(shape.data(), t.ndim_) + " of " +
                    std::to_string(t.numel()) + " elements", "values");
  if (!values.empty()) std::memcpy(t.storage_->data, values.data(), values.size() * sizeof(float));
  return t;
}

int Tensor::wrap_dim(int d, const char* arg) const {
  const int w = d < 0 ? d + ndim_ : d;
  if (w < 0 || w >= ndim_)
    throw_usage("dim " + std::to_string(d) + " out of range for a " + std::to_string(ndim_) + "-dim tensor", arg);
  return w;
}

void Tensor::check_type(bool ok, const char* fn) const {
  if (!ok)
    throw_usage(std::string("element type does not match the tensor's dtype ") + dtype_name(dtype_), fn);
}

void Tensor::check_cpu(const char* fn) const {
  if (!storage_) throw_usage("tensor is undefined", fn);
  if (!storage_->device.is_cpu())
    throw_usage("needs a CPU tensor, this one is on " + storage_->device.str(), fn, "copy it with .to(Device::cpu())");
}

int64_t Tensor::size(int d) const { return shape_[wrap_dim(d, "dim")]; }
int64_t Tensor::stride(int d) const { return strides_[wrap_dim(d, "dim")]; }

int64_t Tensor::numel() const {
  if (!storage_) return 0;
  int64_t n = 1;
  for (int d = 0; d < ndim_; ++d) n *= shape_[d];
  return n;
}

int64_t Tensor::element_offset(const std::vector<int64_t>& idx) const {
  if (static_cast<int>(idx.size()) != ndim_)
    throw_usage(std::to_string(idx.size()) + " indices for a " + std::to_string(ndim_) + "-dim tensor", "index");
  int64_t off = offset_;
  for (int d = 0; d < ndim_; ++d) {
    if (idx[d] < 0 || idx[d] >= shape_[d])
      throw_usage("index " + std::to_string(idx[d]) + " out of range [0, " + std::to_string(shape_[d]) +
                      ") at dim " + std::to_string(d), "index[" + std::to_string(d) + "]");
    off += idx[d] * strides_[d];
  }
  return off;
}

void* Tensor::data() const {
  if (!storage_) return nullptr;
  return static_cast<char*>(storage_->data) + offset_ * static_cast<int64_t>(itemsize());
}

double Tensor::get(const std::vector<int64_t>& idx) const {
  check_cpu("Tensor::get");
  return read_elem(storage_->data, element_offset(idx), dtype_);
}

void Tensor::set(const std::vector<int64_t>& idx, double v) const {
  check_cpu("Tensor::set");
  write_elem(storage_->data, element_offset(idx), dtype_, v);
}

bool Tensor::is_contiguous() const {
  int64_t expect = 1;
  for (int d = ndim_ - 1; d >= 0; --d) {
    if (shape_[d] == 0) return true;
    if (shape_[d] == 1) continue;
    if (strides_[d] != expect) return false;
    expect *= shape_[d];
  }
  return true;
}

Tensor Tensor::narrow(int dim, int64_t start, int64_t length) const {
  const int d = wrap_dim(dim, "dim");
  if (start < 0 || start > shape_[d])
    throw_usage("start " + std::to_string(start) + " out of range [0, " + std::to_string(shape_[d]) + "] at dim " +
                    std::to_string(d), "start");
  if (length < 0 || start + length > shape_[d])
    throw_usage("length " + std::to_string(length) + " from start " + std::to_string(start) + " exceeds size " +
                    std::to_string(shape_[d]) + " of dim " + std::to_string(d), "length");
  Tensor t = *this;
  t.offset_ += start * strides_[d];
  t.shape_[d] = length;
  return t;
}

Tensor Tensor::select(int dim, int64_t index) const {
  const int d = wrap_dim(dim, "dim");
  if (index < 0 || index >= shape_[d])
    throw_usage("index " + std::to_string(index) + " out of range [0, " + std::to_string(shape_[d]) + ") at dim " +
                    std::to_string(d), "index");
  Tensor t = *this;
  t.offset_ += index * strides_[d];
  for (int i = d; i + 1 < ndim_; ++i) {
    t.shape_[i] = shape_[i + 1];
    t.strides_[i] = strides_[i + 1];
  }
  --t.ndim_;
  t.shape_[t.ndim_] = 0;
  t.strides_[t.ndim_] = 0;
  return t;
}

Tensor Tensor::permute(const std::vector<int>& order) const {
  if (static_cast<int>(order.size()) != ndim_)
    throw_usage("permutation has " + std::to_string(order.size()) + " entries for a " + std::to_string(ndim_) +
                    "-dim tensor", "order");
  std::array<bool, kMaxDims> seen{};
  Tensor t = *this;
  for (int i = 0; i < ndim_; ++i) {
    const int d = wrap_dim(order[i], "order");
    if (seen[d]) throw_usage("dim " + std::to_string(d) + " appears twice in the permutation", "order");
    seen[d] = true;
    t.shape_[i] = shape_[d];
    t.strides_[i] = strides_[d];
  }
  return t;
}

Tensor Tensor::transpose(int d0, int d1) const {
  const int a = wrap_dim(d0, "d0"), b = wrap_dim(d1, "d1");
  Tensor t = *this;
  std::swap(t.shape_[a], t.shape_[b]);
  std::swap(t.strides_[a], t.strides_[b]);
  return t;
}

Tensor Tensor::reshape(const std::vector<int64_t>& shape) const {
  if (!storage_) throw_usage("tensor is undefined", "Tensor::reshape");
  if (!is_contiguous())
    throw_usage("reshape of a non-contiguous " + str() + " view", "Tensor::reshape", "call contiguous() first");
  std::vector<int64_t> s = shape;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      if (infer >= 0) throw_usage("more than one -1 in the new shape", "shape");
      infer = static_cast<int>(i);
    } else if (s[i] >= 0) {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel() % known != 0)
      throw_usage("cannot infer the -1 entry: " + std::to_string(numel()) + " elements", "shape");
    s[infer] = numel() / known;
  }
  const int64_t n = checked_numel(s, itemsize());
  if (n != numel())
    throw_usage("new shape " + shape_str(s.data(), static_cast<int>(s.size())) + " has " + std::to_string(n) +
                    " elements, the tensor has " + std::to_string(numel()), "shape");
  Tensor t = *this;
  t.ndim_ = static_cast<int>(s.size());
  const auto st = contiguous_strides(s);
  t.shape_.fill(0);
  t.strides_.fill(0);
  for (int d = 0; d < t.ndim_; ++d) {
    t.shape_[d] = s[d];
    t.strides_[d] = st[d];
  }
  return t;
}

Tensor Tensor::contiguous() const {
  if (!storage_) throw_usage("tensor is undefined", "Tensor::contiguous");
  return is_contiguous() ? *this : clone();
}

Tensor Tensor::clone() const {
  if (!storage_) throw_usage("tensor is undefined", "Tensor::clone");
  Tensor t = empty(shape(), dtype_, device());
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(DType dtype) const {
  check_cpu("Tensor::to(dtype)");
  if (dtype == dtype_) return clone();
  Tensor out = empty(shape(), dtype);
  const int64_t n = numel();
  if (is_contiguous() && dtype_ == DType::F32 && (dtype == DType::BF16 || dtype == DType::F16)) {
    const float* s = static_cast<const float*>(data());
    uint16_t* d = static_cast<uint16_t*>(out.data());
    if (dtype == DType::BF16)
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(s[i]);
    else
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16(s[i]);
    return out;
  }
  if (is_contiguous() && dtype == DType::F32 && (dtype_ == DType::BF16 || dtype_ == DType::F16)) {
    const uint16_t* s = static_cast<const uint16_t*>(data());
    float* d = static_cast<float*>(out.data());
    if (dtype_ == DType::BF16)
      for (int64_t i = 0; i < n; ++i) d[i] = bf16_to_f32(s[i]);
    else
      for (int64_t i = 0; i < n; ++i) d[i] = f16_to_f32(s[i]);
    return out;
  }
  const void* src = storage_->data;
  void* dst = out.storage_->data;
  const DType st = dtype_;
  walk2(ndim_, shape_.data(), out.strides_.data(), strides_.data(), 0, offset_,
        [&](int64_t a, int64_t b) { write_elem(dst, a, dtype, read_elem(src, b, st)); });
  return out;
}

Tensor Tensor::to(Device device) const {
  if (!storage_) throw_usage("tensor is undefined", "Tensor::to(device)");
  if (device == this->device()) return *this;
  const std::string what = "Tensor::to(" + device.str() + ") from " + this->device().str();
  require_cuda_for(device, what);
  require_cuda_for(this->device(), what);
  Tensor out = empty(shape(), dtype_, device);
  out.copy_from(*this);
  return out;
}

void Tensor::copy_from(const Tensor& src) const {
  if (!storage_ || !src.storage_) throw_usage("copy between undefined tensors", "Tensor::copy_from");
  if (src.dtype_ != dtype_)
    throw_usage(std::string("dtype mismatch: source ") + dtype_name(src.dtype_) + ", destination " + dtype_name(dtype_),
                "Tensor::copy_from", "convert with .to(dtype) first");
  if (src.shape() != shape())
    throw_usage("shape mismatch: source " + shape_str(src.shape_.data(), src.ndim_) + ", destination " +
                    shape_str(shape_.data(), ndim_), "Tensor::copy_from");
  const Device dd = device(), sd = src.device();
  if (dd.is_cpu() && sd.is_cpu()) {
    cpu_strided_copy(storage_->data, strides_.data(), offset_, src.storage_->data, src.strides_.data(), src.offset_,
                     ndim_, shape_.data(), itemsize());
    return;
  }
  const std::string what = "Tensor::copy_from " + sd.str() + " -> " + dd.str();
  require_cuda_for(dd, what);
  require_cuda_for(sd, what);
#ifdef RTX_HAVE_CUDA
  if (numel() == 0) return;
  if (dd.is_cpu()) {  // CUDA -> CPU: gather on the GPU if needed, then one memcpy
    const Tensor s = src.contiguous();
    if (is_contiguous()) {
      RTX_CUDA_CHECK(cudaSetDevice(sd.index));
      RTX_CUDA_CHECK(cudaMemcpy(data(), s.data(), nbytes(), cudaMemcpyDeviceToHost));
    } else {
      Tensor tmp = empty(shape(), dtype_);
      tmp.copy_from(s);
      copy_from(tmp);
    }
    return;
  }
  if (!is_contiguous())
    throw_usage("a CUDA destination must be contiguous, this one is a strided view", what,
                "copy into a contiguous tensor, then take the view");
  RTX_CUDA_CHECK(cudaSetDevice(dd.index));
  if (sd.is_cpu()) {  // CPU -> CUDA
    const Tensor s = src.contiguous();
    RTX_CUDA_CHECK(cudaMemcpy(data(), s.data(), nbytes(), cudaMemcpyHostToDevice));
  } else if (src.is_contiguous()) {  // CUDA -> CUDA (cudaMemcpyDefault: also across devices)
    RTX_CUDA_CHECK(cudaMemcpy(data(), src.data(), nbytes(), cudaMemcpyDefault));
  } else {
    if (sd != dd) {
      copy_from(src.contiguous());
      return;
    }
    detail::cuda_strided_copy(data(), src.data(), ndim_, shape_.data(), src.strides_.data(), numel(), itemsize(),
                              dd.index);
  }
#endif
}

std::string Tensor::str() const {
  if (!storage_) return "undefined";
  return std::string(dtype_name(dtype_)) + shape_str(shape_.data(), ndim_) + " " + device().str();
}

}  // namespace rtx
