// rtx::Tensor: a shape/strides view (up to 8 dims, int64) over shared storage on the CPU or
// a CUDA device. For the model and IO layers; kernels take raw pointers, not Tensors.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "rtx/core/dtype.hpp"

namespace rtx {

/// Maximum number of tensor dimensions.
constexpr int kMaxDims = 8;
/// Alignment of host tensor storage, bytes.
constexpr size_t kHostAlign = 64;

enum class DeviceType : uint8_t { CPU, CUDA };

/// Where a tensor lives: the CPU, or CUDA device `index`.
struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::CUDA, i}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device& o) const { return type == o.type && (type == DeviceType::CPU || index == o.index); }
  bool operator!=(const Device& o) const { return !(*this == o); }
  /// "cpu" or "cuda:N".
  std::string str() const;
};

/// A block of memory shared by a tensor and its views. Owning storage frees itself through
/// `deleter`; borrowed storage (Tensor::from_blob) has no deleter.
struct Storage {
  void* data = nullptr;
  size_t nbytes = 0;
  Device device;
  std::function<void(void*)> deleter;
  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (deleter && data) deleter(data);
  }
};

/// Maps a C++ element type to its DType (float f32, int32_t i32, int8_t i8, uint8_t u8;
/// uint16_t is the raw bits of bf16 or f16).
template <class T>
constexpr bool dtype_matches(DType t) {
  if constexpr (std::is_same_v<T, float>) return t == DType::F32;
  else if constexpr (std::is_same_v<T, int32_t>) return t == DType::I32;
  else if constexpr (std::is_same_v<T, int8_t>) return t == DType::I8;
  else if constexpr (std::is_same_v<T, uint8_t>) return t == DType::U8;
  else if constexpr (std::is_same_v<T, uint16_t>) return t == DType::BF16 || t == DType::F16;
  else return false;
}

/// A strided view: element (i0..ik) lives at storage element offset() + sum(i_d * stride(d)).
/// Copying a Tensor copies the view, not the data (storage is shared via shared_ptr).
/// Errors: a bad shape (negative size, more than 8 dims, element count overflow) is
/// rtx::Error(Input) naming "shape"; a bad dim, index, slice or permutation is
/// rtx::Error(Usage) naming the argument; CUDA without a GPU is rtx::Error(Environment).
class Tensor {
 public:
  /// An undefined tensor (no storage, 0 dims, defined() == false).
  Tensor() = default;

  /// Uninitialised contiguous tensor. CPU memory is 64-byte aligned; CUDA memory comes
  /// from cuda_allocator(device.index).
  static Tensor empty(const std::vector<int64_t>& shape, DType dtype, Device device = Device::cpu());
  /// Contiguous tensor of zeros.
  static Tensor zeros(const std::vector<int64_t>& shape, DType dtype, Device device = Device::cpu());
  /// Non-owning view of caller memory (kept alive by the caller). `strides` in elements;
  /// empty means contiguous row-major.
  static Tensor from_blob(void* data, const std::vector<int64_t>& shape, DType dtype, Device device = Device::cpu(),
                          const std::vector<int64_t>& strides = {});
  /// Contiguous f32 CPU tensor holding `values` (its size must equal the shape's element count).
  static Tensor from_vector(const std::vector<float>& values, const std::vector<int64_t>& shape);

  bool defined() const { return storage_ != nullptr; }
  int ndim() const { return ndim_; }
  /// Size / stride (elements) of dim `d`; negative d counts from the end.
  int64_t size(int d) const;
  int64_t stride(int d) const;
  std::vector<int64_t> shape() const { return {shape_.begin(), shape_.begin() + ndim_}; }
  std::vector<int64_t> strides() const { return {strides_.begin(), strides_.begin() + ndim_}; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device : Device::cpu(); }
  size_t itemsize() const { return dtype_size(dtype_); }
  /// Number of elements (product of the shape; 1 for 0 dims of a defined tensor).
  int64_t numel() const;
  /// numel() * itemsize(): bytes the elements occupy when contiguous.
  size_t nbytes() const { return static_cast<size_t>(numel()) * itemsize(); }
  /// Offset of element 0 of this view in its storage, in elements.
  int64_t offset() const { return offset_; }
  /// Storage element offset of element `idx` (one index per dim, bounds-checked).
  int64_t element_offset(const std::vector<int64_t>& idx) const;
  /// Address of element 0 of the view (storage base + offset * itemsize).
  void* data() const;
  /// Typed data pointer; throws Usage if T does not match dtype().
  template <class T>
  T* data_as() const {
    check_type(dtype_matches<T>(dtype_), "data_as");
    return static_cast<T*>(data());
  }
  /// Reference to element `idx` of a CPU tensor; throws Usage for a type mismatch or a CUDA tensor.
  template <class T>
  T& at(const std::vector<int64_t>& idx) const {
    check_type(dtype_matches<T>(dtype_), "at");
    check_cpu("at");
    return static_cast<T*>(storage_->data)[element_offset(idx)];
  }
  /// Element `idx` of a CPU tensor converted to double (exact for every dtype).
  double get(const std::vector<int64_t>& idx) const;
  /// Store `v` into element `idx` of a CPU tensor with the conversion rules of to().
  void set(const std::vector<int64_t>& idx, double v) const;
  /// The shared storage (for IO layers that need the owner's lifetime).
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  /// True when both views use the same storage.
  bool shares_storage(const Tensor& o) const { return storage_ && storage_ == o.storage_; }

  /// Row-major contiguous (strides of size-1 dims ignored; empty tensors are contiguous).
  bool is_contiguous() const;
  /// View of `length` entries of dim `dim` starting at `start`.
  Tensor narrow(int dim, int64_t start, int64_t length) const;
  /// View with dim `dim` fixed to `index` (one dim fewer).
  Tensor select(int dim, int64_t index) const;
  /// View with dims reordered: new dim i is old dim order[i]. `order` is a permutation.
  Tensor permute(const std::vector<int>& order) const;
  /// View with dims d0 and d1 swapped.
  Tensor transpose(int d0, int d1) const;
  /// View with a new shape of the same element count (one entry may be -1: inferred).
  /// The tensor must be contiguous (Usage error otherwise: call contiguous() first).
  Tensor reshape(const std::vector<int64_t>& shape) const;
  /// This tensor if contiguous, else a contiguous copy on the same device.
  Tensor contiguous() const;
  /// A contiguous copy with its own storage on the same device.
  Tensor clone() const;
  /// Copy converted to `dtype` (CPU only; Usage error for a CUDA tensor). Floats to bf16/f16
  /// round to nearest even (dtype.hpp); integers to floats round to nearest even (correctly,
  /// also i32 -> bf16/f16); floats to integers round to nearest even and saturate, NaN -> 0.
  Tensor to(DType dtype) const;
  /// Copy on `device` (contiguous). CPU<->CUDA needs the CUDA backend and a GPU
  /// (rtx::Error(Environment) otherwise). Returns *this when already on `device`.
  Tensor to(Device device) const;
  /// Copy src's elements into this tensor (same shape and dtype, any devices/strides).
  void copy_from(const Tensor& src) const;

  /// "f32[2, 3] cpu" style summary.
  std::string str() const;

 private:
  void check_type(bool ok, const char* fn) const;
  void check_cpu(const char* fn) const;
  int wrap_dim(int d, const char* arg) const;

  std::shared_ptr<Storage> storage_;
  std::array<int64_t, kMaxDims> shape_{};
  std::array<int64_t, kMaxDims> strides_{};
  int ndim_ = 0;
  int64_t offset_ = 0;
  DType dtype_ = DType::F32;
};

/// Contiguous row-major strides (elements) of `shape`. Throws Input for a bad shape.
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape);

#ifdef RTX_HAVE_CUDA
namespace detail {
/// GPU strided copy: dst (contiguous, n elements of `itemsize` bytes) from src at element
/// offsets sum(i_d * src_strides[d]) over `shape` (row-major order), on device `device`.
void cuda_strided_copy(void* dst, const void* src, int ndim, const int64_t* shape, const int64_t* src_strides,
                       int64_t n, size_t itemsize, int device);
}  // namespace detail
#endif

}  // namespace rtx
