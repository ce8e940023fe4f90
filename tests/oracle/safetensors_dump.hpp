// Minimal safetensors writer for the PyTorch oracle dumps (tests/oracle only): an 8-byte
// little-endian header length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__":
// {string: string}}, then the raw little-endian tensor bytes in insertion order. Written to a
// temporary file and renamed, so a reader never sees half a dump.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "ht/engine/tensor.hpp"

namespace ht::oracle {

class SafetensorsDump {
 public:
  template <class T>
  void add(const std::string& name, const std::vector<int>& shape, const T* data, std::size_t n) {
    static_assert(sizeof(float) == 4 && sizeof(double) == 8 && sizeof(int) == 4);
    Entry e;
    e.name = name;
    e.shape = shape;
    if constexpr (std::is_same_v<T, float>)
      e.dtype = "F32";
    else if constexpr (std::is_same_v<T, double>)
      e.dtype = "F64";
    else if constexpr (std::is_same_v<T, int>)
      e.dtype = "I32";
    else
      static_assert(sizeof(T) == 0, "unsupported dtype");
    e.bytes.resize(n * sizeof(T));
    if (n) std::memcpy(e.bytes.data(), data, e.bytes.size());
    for (const auto& other : entries_)
      if (other.name == name) throw std::logic_error("safetensors dump: duplicate name " + name);
    entries_.push_back(std::move(e));
  }
  template <class T>
  void add(const std::string& name, const engine::Tensor<T>& t) {
    add(name, t.shape, t.ptr(), t.size());
  }
  template <class T>
  void add_scalar(const std::string& name, T v) {
    add(name, {}, &v, 1);
  }
  void meta(const std::string& key, const std::string& value) { meta_[key] = value; }

  void write(const std::filesystem::path& path) const {
    nlohmann::json header = nlohmann::json::object();
    header["__metadata__"] = meta_;
    std::size_t offset = 0;
    for (const auto& e : entries_) {
      header[e.name] = {{"dtype", e.dtype},
                        {"shape", e.shape},
                        {"data_offsets", {offset, offset + e.bytes.size()}}};
      offset += e.bytes.size();
    }
    std::string text = header.dump();
    while (text.size() % 8 != 0) text.push_back(' ');  // the format allows trailing spaces
    const std::uint64_t len = text.size();
    const std::filesystem::path tmp = path.string() + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      if (!out) throw std::runtime_error("cannot write " + tmp.string());
      unsigned char le[8];
      for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>((len >> (8 * i)) & 0xff);
      out.write(reinterpret_cast<const char*>(le), 8);
      out.write(text.data(), static_cast<std::streamsize>(text.size()));
      for (const auto& e : entries_)
        out.write(reinterpret_cast<const char*>(e.bytes.data()),
                  static_cast<std::streamsize>(e.bytes.size()));
      if (!out) throw std::runtime_error("short write to " + tmp.string());
    }
    std::filesystem::rename(tmp, path);
  }

 private:
  struct Entry {
    std::string name, dtype;
    std::vector<int> shape;
    std::vector<unsigned char> bytes;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> meta_;
};

}  // namespace ht::oracle
