// Our safetensors reader/writer (format in safetensors.hpp).
#include "ht/engine/safetensors.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "ht/engine/error.hpp"
#include "ht/io/error.hpp"
#include "ht/io/input_file.hpp"
#include "ht/io/json_input.hpp"
#include "ht/io/output_file.hpp"

namespace ht::engine {
namespace {

constexpr std::uint64_t kMaxHeader = 100u << 20;  // the reference implementation's limit

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw EngineError(ErrorCode::BadCheckpoint, "checkpoint file '" + path + "': " + what);
}

}  // namespace

std::uint64_t fnv1a_update(std::uint64_t h, const void* bytes, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(bytes);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

std::string fnv1a_hex(std::uint64_t h) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

WrittenFile write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, const Tensor<float>*>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, const Tensor<float>*>> sorted = tensors;
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (std::size_t i = 1; i < sorted.size(); ++i)
    if (sorted[i].first == sorted[i - 1].first)
      throw EngineError(ErrorCode::Io, "duplicate tensor name '" + sorted[i].first + "'");
  nlohmann::json header = nlohmann::json::object();
  std::uint64_t offset = 0;
  std::vector<std::pair<const char*, std::size_t>> chunks;
  for (const auto& [name, t] : sorted) {
    const std::uint64_t bytes = t->size() * sizeof(float);
    header[name] = {{"dtype", "F32"}, {"shape", t->shape}, {"data_offsets", {offset, offset + bytes}}};
    chunks.emplace_back(reinterpret_cast<const char*>(t->ptr()), bytes);
    offset += bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  // Pad with spaces so the data section starts 8-byte aligned (allowed by the format).
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  std::string prefix(8, '\0');
  std::uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) prefix[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  WrittenFile written;
  std::uint64_t hash = kFnvOffset;
  auto put = [&](std::ostream& out, const char* bytes, std::size_t count) {
    hash = fnv1a_update(hash, bytes, count);
    written.bytes += count;
    out.write(bytes, static_cast<std::streamsize>(count));
  };
  try {
    io::write_output_file(path, "checkpoint file", [&](std::ostream& out) {
      put(out, prefix.data(), prefix.size());
      put(out, text.data(), text.size());
      for (const auto& [bytes, count] : chunks) put(out, bytes, count);
    }, io::OutputOptions{.durable = true});
  } catch (const io::IoError& e) {
    if (e.code() == io::IoErrorCode::Interrupted) throw;
    throw EngineError(ErrorCode::Io, e.what());
  }
  written.fnv1a64 = fnv1a_hex(hash);
  return written;
}

SafetensorsFile read_safetensors(const std::string& path, std::uint64_t max_bytes) {
  try {
    io::InputFile in(path, max_bytes, "safetensors file");
    return read_safetensors(in);
  } catch (const io::IoError& e) {
    throw EngineError(ErrorCode::BadCheckpoint, e.what());
  }
}

SafetensorsFile read_safetensors(io::InputFile& in) {
  const std::string& path = in.path();
  const std::uint64_t file_size = in.size();
  if (file_size < 8) bad(path, "shorter than the 8-byte header length (truncated?)");
  unsigned char len_bytes[8];
  in.read_at(0, len_bytes, 8);
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  if (header_len > kMaxHeader || header_len > file_size - 8)
    bad(path, "header length " + std::to_string(header_len) + " exceeds the file size " +
                  std::to_string(file_size) + " (truncated or corrupted)");
  std::string text(header_len, '\0');
  in.read_at(8, text.data(), header_len);
  nlohmann::json header;
  try {
    header = io::parse_json(text, "its header");
  } catch (const io::IoError& e) {
    bad(path, e.what());
  }
  if (!header.is_object()) bad(path, "header is not a JSON object");
  const std::uint64_t data_size = file_size - 8 - header_len;

  SafetensorsFile out;
  struct Span {
    std::uint64_t begin, end;
    std::string name;
  };
  std::vector<Span> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) bad(path, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) bad(path, "__metadata__ value of '" + m.key() + "' is not a string");
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      bad(path, "entry '" + name + "' lacks dtype, shape or data_offsets");
    if (v["dtype"] != "F32")
      bad(path, "tensor '" + name + "' has dtype " + v["dtype"].dump() + ", only F32 is supported");
    const auto& shape = v["shape"];
    if (!shape.is_array()) bad(path, "shape of '" + name + "' is not an array");
    std::vector<int> dims;
    std::uint64_t count = 1;
    for (const auto& d : shape) {
      if (!d.is_number_integer() || d.get<long long>() < 0 || d.get<long long>() > (1LL << 31) - 1)
        bad(path, "shape of '" + name + "' holds a value that is not a non-negative integer");
      dims.push_back(d.get<int>());
      count *= static_cast<std::uint64_t>(dims.back());
      if (count > data_size) bad(path, "shape of '" + name + "' is larger than the data section");
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      bad(path, "data_offsets of '" + name + "' is not a pair of non-negative integers");
    const std::uint64_t b = off[0].get<std::uint64_t>(), e = off[1].get<std::uint64_t>();
    if (b > e || e > data_size)
      bad(path, "data_offsets [" + std::to_string(b) + ", " + std::to_string(e) + "] of '" + name +
                    "' fall outside the data section of " + std::to_string(data_size) +
                    " bytes (truncated?)");
    if (e - b != count * sizeof(float))
      bad(path, "tensor '" + name + "' has " + std::to_string(e - b) + " bytes but its shape needs " +
                    std::to_string(count * sizeof(float)));
    spans.push_back({b, e, name});
    Tensor<float> t(dims);
    in.read_at(8 + header_len + b, t.ptr(), static_cast<std::size_t>(e - b));
    out.tensors.emplace(name, std::move(t));
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  std::uint64_t pos = 0;
  for (const auto& s : spans) {
    if (s.begin != pos)
      bad(path, s.begin < pos ? "tensor '" + s.name + "' overlaps another tensor"
                              : "gap before tensor '" + s.name + "' in the data section");
    pos = s.end;
  }
  if (pos != data_size)
    bad(path, "data section has " + std::to_string(data_size - pos) + " trailing bytes not owned by any tensor");
  return out;
}

}  // namespace ht::engine
