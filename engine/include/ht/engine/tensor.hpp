// A small dense row-major tensor: a shape and a contiguous buffer. Float32 in the engine; the
// float64 instantiation exists for finite-difference checks of the same layer code.
#pragma once

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace ht::engine {

template <class T>
struct Tensor {
  std::vector<int> shape;
  std::vector<T> data;

  Tensor() = default;
  explicit Tensor(std::vector<int> s) : shape(std::move(s)), data(count(shape), T(0)) {}
  Tensor(std::initializer_list<int> s) : Tensor(std::vector<int>(s)) {}

  static std::size_t count(const std::vector<int>& s) {
    std::size_t n = 1;
    for (int d : s) {
      if (d < 0) throw std::invalid_argument("negative tensor dimension");
      n *= static_cast<std::size_t>(d);
    }
    return n;
  }
  std::size_t size() const { return data.size(); }
  int dim(int i) const { return shape.at(static_cast<std::size_t>(i < 0 ? i + rank() : i)); }
  int rank() const { return static_cast<int>(shape.size()); }
  T* ptr() { return data.data(); }
  const T* ptr() const { return data.data(); }
  T& operator[](std::size_t i) { return data[i]; }
  const T& operator[](std::size_t i) const { return data[i]; }
  void zero() { std::fill(data.begin(), data.end(), T(0)); }
  bool operator==(const Tensor&) const = default;
};

using TensorF = Tensor<float>;
using TensorD = Tensor<double>;

}  // namespace ht::engine
