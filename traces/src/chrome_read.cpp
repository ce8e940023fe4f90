// Chrome-trace JSON -> Timeline: one streaming SAX pass (nlohmann::json::sax_parse) over a file
// read in 1 MiB chunks, so a trace of hundreds of MB costs the memory of the spans it keeps, not
// of its text or of a DOM. Each trace event is buffered field by field (keys come in any order),
// then kept as a span or dropped at its closing brace. See chrome.hpp for what is kept.
#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "decimal_time.hpp"
#include "ht/io/error.hpp"
#include "ht/io/input_file.hpp"
#include "ht/traces/chrome.hpp"
#include "ht/traces/comm_rules.hpp"
#include "ht/traces/error.hpp"

namespace ht::traces {

namespace {

using json = nlohmann::json;

// ---------------------------------------------------------------- chunked file input
// An input iterator over a bounded regular file (ht::io) in fixed chunks: what nlohmann's
// iterator adapter consumes.
class ChunkedFile {
 public:
  explicit ChunkedFile(io::InputFile& f) : file_(f), buffer_(1 << 20) {}
  // The per-character test stays tiny so the lexer's loop can inline it; refilling is rare.
  bool at_end() { return pos_ >= len_ && !refill(); }
  char current() const { return buffer_[pos_]; }
  void advance() { ++pos_; }
  std::uint64_t bytes() const { return bytes_; }

 private:
  [[gnu::noinline]] bool refill() {
    if (eof_) return false;
    len_ = file_.read(buffer_.data(), buffer_.size());  // IoError on a read error
    pos_ = 0;
    bytes_ += len_;
    if (len_ == 0) eof_ = true;
    return len_ > 0;
  }

  io::InputFile& file_;
  std::vector<char> buffer_;
  std::size_t pos_ = 0, len_ = 0;
  std::uint64_t bytes_ = 0;
  bool eof_ = false;
};

class ChunkedIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = char;

  ChunkedIterator() = default;  // the end sentinel
  explicit ChunkedIterator(ChunkedFile* file) : file_(file) {}
  char operator*() const { return file_->current(); }
  ChunkedIterator& operator++() {
    file_->advance();
    return *this;
  }
  ChunkedIterator operator++(int) {
    ChunkedIterator old = *this;
    file_->advance();
    return old;
  }
  bool operator==(const ChunkedIterator& other) const { return done() == other.done(); }
  bool operator!=(const ChunkedIterator& other) const { return !(*this == other); }

 private:
  bool done() const { return file_ == nullptr || file_->at_end(); }
  ChunkedFile* file_ = nullptr;
};

// ---------------------------------------------------------------- one buffered event
struct Id {
  enum Kind { None, Int, Str, Bad } kind = None;
  long long value = 0;
  std::string text;
  void clear() { kind = None; }
};

struct RawEvent {
  std::string ph, name, cat, ts, dur;
  bool has_cat = false, has_ts = false, has_dur = false, ts_not_number = false,
       dur_not_number = false;
  Id pid, tid, arg_device, arg_stream;
  std::vector<std::pair<std::string, std::string>> args;  // reused slots, first n_args valid
  std::size_t n_args = 0;
  std::string role;
  bool has_role = false;

  void clear() {
    ph.clear(), name.clear(), cat.clear(), ts.clear(), dur.clear(), role.clear();
    has_cat = has_ts = has_dur = ts_not_number = dur_not_number = has_role = false;
    pid.clear(), tid.clear(), arg_device.clear(), arg_stream.clear();
    n_args = 0;
  }
  void add_arg(const std::string& key, std::string_view value) {
    if (n_args == args.size()) args.emplace_back();
    args[n_args].first = key;
    args[n_args].second.assign(value.data(), value.size());
    ++n_args;
  }
};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool is_device_category(const std::string& cat_lower) {
  return cat_lower == "kernel" || cat_lower == "gpu_memcpy" || cat_lower == "gpu_memset" ||
         cat_lower == "memcpy" || cat_lower == "memset";
}
bool is_cpu_category(const std::string& cat_lower) {
  return cat_lower == "cpu_op" || cat_lower == "operator" || cat_lower == "user_annotation";
}
// Arguments worth keeping from foreign profiles (the rest, e.g. Kineto's grid/block/occupancy,
// would multiply the memory per span).
bool is_kept_foreign_arg(const std::string& key) {
  return key == "microbatch" || key == "layer" || key == "slot" || key == "phase" ||
         key == "bytes";
}

// Names and numbers quoted in messages: short, and on one line whatever the file holds.
std::string clip(std::string_view s) {
  std::string out = s.size() <= 80 ? std::string(s) : std::string(s.substr(0, 77)) + "...";
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  return out;
}

// ---------------------------------------------------------------- the SAX handler
enum class Frame { Root, Top, Events, Event, Args, OtherData, OtherMeta, Skip };

class TraceSax {
 public:
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  explicit TraceSax(const ReadOptions& options)
      : include_cpu_(options.include_cpu_ops),
        classifier_(options.comm_regex ? CommClassifier(*options.comm_regex) : CommClassifier()) {
    stack_.push_back(Frame::Root);
  }

  // -- SAX interface
  bool null() { return scalar(ScalarKind::Null, "null"); }
  bool boolean(bool v) { return scalar(ScalarKind::Bool, v ? "true" : "false"); }
  bool number_integer(number_integer_t v) {
    char buf[32];
    auto r = std::to_chars(buf, buf + sizeof buf, v);
    number_value_ = static_cast<double>(v);
    int_value_ = v, int_ok_ = true;
    return scalar(ScalarKind::Number, std::string_view(buf, static_cast<std::size_t>(r.ptr - buf)));
  }
  bool number_unsigned(number_unsigned_t v) {
    char buf[32];
    auto r = std::to_chars(buf, buf + sizeof buf, v);
    number_value_ = static_cast<double>(v);
    int_ok_ = v <= static_cast<number_unsigned_t>(std::numeric_limits<long long>::max());
    int_value_ = int_ok_ ? static_cast<long long>(v) : 0;
    return scalar(ScalarKind::Number, std::string_view(buf, static_cast<std::size_t>(r.ptr - buf)));
  }
  bool number_float(number_float_t v, const string_t& text) {
    number_value_ = v;
    int_ok_ = std::trunc(v) == v && std::fabs(v) < 9e15;
    int_value_ = int_ok_ ? static_cast<long long>(v) : 0;
    return scalar(ScalarKind::Number, text);
  }
  bool string(string_t& v) {
    const Frame f = stack_.back();
    if (f == Frame::Event && key_ == "name") {  // the hot path: steal the (often long) name
      ev_.name.swap(v);
      return true;
    }
    return scalar(ScalarKind::String, v);
  }
  bool binary(binary_t&) { return true; }
  bool key(string_t& k) {
    key_.swap(k);
    return true;
  }
  bool start_object(std::size_t) {
    check_depth();
    const Frame f = stack_.back();
    Frame next = Frame::Skip;
    if (f == Frame::Root)
      next = Frame::Top;
    else if (f == Frame::Top && key_ == "otherData")
      next = Frame::OtherData;
    else if (f == Frame::Events) {
      ev_.clear();
      next = Frame::Event;
    } else if (f == Frame::Event && key_ == "args")
      next = Frame::Args;
    else if (f == Frame::OtherData && key_ == "metadata")
      next = Frame::OtherMeta;
    stack_.push_back(next);
    return true;
  }
  bool end_object() {
    const Frame f = stack_.back();
    stack_.pop_back();
    if (f == Frame::Event) finish_event();
    return true;
  }
  bool start_array(std::size_t) {
    check_depth();
    const Frame f = stack_.back();
    if (f == Frame::Root || (f == Frame::Top && key_ == "traceEvents")) {
      saw_events_ = true;
      stack_.push_back(Frame::Events);
    } else {
      if (f == Frame::Events) not_an_object();
      stack_.push_back(Frame::Skip);
    }
    return true;
  }
  bool end_array() {
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) {
    std::string what = e.what();
    if (auto p = what.find("] "); what.rfind("[json.exception", 0) == 0 && p != std::string::npos)
      what.erase(0, p + 2);
    throw TraceError(TraceErrorCode::Parse,
                     "malformed trace JSON (byte " + std::to_string(position) + "): " + what);
  }

  Timeline finish();
  std::uint64_t events() const { return events_; }
  std::uint64_t skipped() const { return skipped_; }

 private:
  enum class ScalarKind { Null, Bool, Number, String };

  // Chrome traces are three levels deep; a limit keeps hostile input ("[[[[...") from growing
  // the frame stack without bound.
  void check_depth() const {
    if (stack_.size() > 512)
      throw TraceError(TraceErrorCode::Schema, "trace JSON is nested deeper than 512 levels");
  }

  [[noreturn]] void not_an_object() {
    throw TraceError(TraceErrorCode::Schema,
                     "traceEvents[" + std::to_string(events_) + "] is not an object");
  }

  void set_id(Id& id, ScalarKind kind, std::string_view text) {
    if (kind == ScalarKind::String) {
      id.kind = Id::Str;
      id.text.assign(text.data(), text.size());
    } else if (kind == ScalarKind::Number && int_ok_) {
      id.kind = Id::Int;
      id.value = int_value_;
    } else {
      id.kind = Id::Bad;
      id.text.assign(text.data(), text.size());
    }
  }

  bool scalar(ScalarKind kind, std::string_view text) {
    switch (stack_.back()) {
      case Frame::Root:
        throw TraceError(TraceErrorCode::Schema,
                         "not a Chrome trace: the document is a single value, not an object or "
                         "an array of events");
      case Frame::Events: not_an_object();
      case Frame::Top:
        if (key_ == "schemaVersion" || key_ == "deviceProperties" || key_ == "traceName" ||
            key_ == "baseTimeNanoseconds" || key_ == "distributedInfo")
          kineto_hint_ = true;
        return true;
      case Frame::Event: event_field(kind, text); return true;
      case Frame::Args:
        if (key_ == "device")
          set_id(ev_.arg_device, kind, text);
        else if (key_ == "stream")
          set_id(ev_.arg_stream, kind, text);
        if (key_ == kRoleArg) {
          ev_.has_role = true;
          ev_.role.assign(text.data(), text.size());
        } else {
          ev_.add_arg(key_, text);
        }
        return true;
      case Frame::OtherData:
        if (key_ == "generator") own_file_ = text == "hybrid-twin";
        if (key_ == "source") source_.assign(text.data(), text.size());
        return true;
      case Frame::OtherMeta: metadata_[key_] = std::string(text); return true;
      case Frame::Skip: return true;
    }
    return true;
  }

  void event_field(ScalarKind kind, std::string_view text) {
    const std::string& k = key_;
    if (k == "ph") {
      ev_.ph.assign(text.data(), text.size());
    } else if (k == "name") {
      ev_.name.assign(text.data(), text.size());
    } else if (k == "cat") {
      ev_.has_cat = true;
      ev_.cat.assign(text.data(), text.size());
    } else if (k == "ts") {
      ev_.has_ts = true;
      ev_.ts_not_number = kind != ScalarKind::Number;
      ev_.ts.assign(text.data(), text.size());
    } else if (k == "dur") {
      ev_.has_dur = true;
      ev_.dur_not_number = kind != ScalarKind::Number;
      ev_.dur.assign(text.data(), text.size());
    } else if (k == "pid") {
      set_id(ev_.pid, kind, text);
    } else if (k == "tid") {
      set_id(ev_.tid, kind, text);
    }
  }

  std::string where() const {
    return "event " + std::to_string(events_) + " ('" + clip(ev_.name) + "')";
  }

  // A pid / tid / args.device / args.stream as an int; strings that end in a number
  // ("stream 7") give that number, other strings a stable negative id per string.
  int resolve(const Id& id, const char* what, std::map<std::string, int>& synthetic) {
    if (id.kind == Id::Int) {
      if (id.value < std::numeric_limits<int>::min() || id.value > std::numeric_limits<int>::max())
        throw TraceError(TraceErrorCode::Range, where() + ": " + what + " " +
                                                    std::to_string(id.value) + " is out of range");
      return static_cast<int>(id.value);
    }
    if (id.kind == Id::Str) {
      std::size_t end = id.text.find_last_not_of(' ');
      std::size_t begin = end;
      while (begin != std::string::npos && begin > 0 && std::isdigit(static_cast<unsigned char>(id.text[begin - 1])))
        --begin;
      if (end != std::string::npos && std::isdigit(static_cast<unsigned char>(id.text[end])) &&
          end - begin < 9)
        return std::stoi(id.text.substr(begin, end - begin + 1));
      auto [it, inserted] = synthetic.try_emplace(id.text, -static_cast<int>(synthetic.size()) - 1);
      (void)inserted;
      return it->second;
    }
    if (id.kind == Id::Bad)
      throw TraceError(TraceErrorCode::Range,
                       where() + ": " + what + " '" + clip(id.text) + "' is not an integer id");
    throw TraceError(TraceErrorCode::Schema, where() + ": missing " + what);
  }

  int own_id(const Id& id, const char* what) {
    if (id.kind != Id::Int)
      throw TraceError(TraceErrorCode::Schema, where() + ": " + what + " must be an integer");
    std::map<std::string, int> unused;
    return resolve(id, what, unused);
  }

  Role own_role() {
    auto role = role_from_string(ev_.role);
    if (!role)
      throw TraceError(TraceErrorCode::Schema,
                       where() + ": unknown ht.role '" + clip(ev_.role) + "'");
    return *role;
  }

  void finish_event() {
    ++events_;
    if (ev_.ph == "M") {
      metadata_event();
      return;
    }
    if (ev_.ph != "X") {  // B/E, instants, flows (s/t/f), counters, async, ...
      ++skipped_;
      return;
    }
    enum class Kind { Own, Device, Cpu } kind;
    std::string cat_lower = lower(ev_.cat);
    if (ev_.has_role)
      kind = Kind::Own;
    else if (is_device_category(cat_lower))
      kind = Kind::Device;
    else if ((is_cpu_category(cat_lower) || !ev_.has_cat || ev_.cat.empty()))
      kind = Kind::Cpu;
    else {
      ++skipped_;
      return;
    }
    if (cat_lower == "kernel") kineto_hint_ = true;
    if (kind == Kind::Cpu) {
      if (cat_lower == "cpu_op") kineto_hint_ = true;
      if (ev_.pid.kind == Id::Str && ev_.pid.text == "CPU functions") legacy_hint_ = true;
      if (!include_cpu_) {
        ++skipped_;
        return;
      }
    }

    Span span;
    detail::SplitMicros split;
    read_times(span, split);

    if (kind == Kind::Own) {
      span.role = own_role();
      span.device = own_id(ev_.pid, "pid");
      span.stream = own_id(ev_.tid, "tid");
      span.category = ev_.cat;
      for (std::size_t i = 0; i < ev_.n_args; ++i) span.args.insert(ev_.args[i]);
    } else {
      if (kind == Kind::Device) {
        span.device = ev_.arg_device.kind != Id::None ? resolve(ev_.arg_device, "args.device", pid_names_)
                                                       : resolve(ev_.pid, "pid", pid_names_);
        span.stream = ev_.arg_stream.kind != Id::None ? resolve(ev_.arg_stream, "args.stream", tid_names_)
                                                       : resolve(ev_.tid, "tid", tid_names_);
      } else {
        span.device = resolve(ev_.pid, "pid", pid_names_);
        span.stream = resolve(ev_.tid, "tid", tid_names_);
        if (ev_.pid.kind == Id::Str) device_labels_.try_emplace(span.device, ev_.pid.text);
      }
      const std::optional<std::string>& comm = classify(ev_.name);
      span.role = comm ? Role::Comm : Role::Compute;
      if (comm)
        span.category = *comm;
      else if (cat_lower.empty())
        span.category = "cpu_op";
      else if (cat_lower == "gpu_memcpy")
        span.category = "memcpy";
      else if (cat_lower == "gpu_memset")
        span.category = "memset";
      else
        span.category = std::move(cat_lower);
      for (std::size_t i = 0; i < ev_.n_args; ++i)
        if (is_kept_foreign_arg(ev_.args[i].first)) span.args.insert(ev_.args[i]);
      stream_kind_.try_emplace({span.device, span.stream}, kind == Kind::Device);
    }
    span.name = std::move(ev_.name);
    if (spans_.size() >= kMaxTraceSpans)
      throw TraceError(TraceErrorCode::Range, "more than " + std::to_string(kMaxTraceSpans) +
                                                  " spans to keep (the limit of one timeline in memory); "
                                                  "cut the profile to fewer steps");
    spans_.push_back(std::move(span));
    splits_.push_back(split);
  }

  void read_times(Span& span, detail::SplitMicros& split) {
    if (!ev_.has_ts) throw TraceError(TraceErrorCode::Schema, where() + ": no ts");
    if (!ev_.has_dur)
      throw TraceError(TraceErrorCode::Schema, where() + ": complete event (ph X) without dur");
    if (ev_.ts_not_number || ev_.dur_not_number)
      throw TraceError(TraceErrorCode::Schema, where() + ": ts and dur must be numbers");
    // Only foreign files are rebased through the split; our own keep any finite time. Which one
    // this is may only be known at the end (otherData can come last), so the error waits.
    if (!detail::split_us_text(ev_.ts, split) && split_error_.empty())
      split_error_ = where() + ": ts " + clip(ev_.ts) + " us is out of range (|ts| < 1e17 us)";
    span.start_s = detail::us_text_to_seconds(ev_.ts);
    if (!std::isfinite(span.start_s))
      throw TraceError(TraceErrorCode::Range, where() + ": ts " + clip(ev_.ts) + " us is out of range");
    span.duration_s = detail::us_text_to_seconds(ev_.dur);
    if (!std::isfinite(span.duration_s) || span.duration_s < 0 || span.duration_s > kMaxTraceSeconds)
      throw TraceError(TraceErrorCode::Range,
                       where() + ": dur " + clip(ev_.dur) + " us is negative or out of range");
  }

  const std::optional<std::string>& classify(const std::string& name) {
    auto it = comm_memo_.find(name);
    if (it == comm_memo_.end()) it = comm_memo_.emplace(name, classifier_.classify(name)).first;
    return it->second;
  }

  void metadata_event() {
    if (ev_.name != "thread_name" && ev_.name != "process_name") return;
    std::string label;
    for (std::size_t i = 0; i < ev_.n_args; ++i)
      if (ev_.args[i].first == "name") label = ev_.args[i].second;
    if (ev_.name == "process_name") return;  // devices are numbered; names are cosmetic
    if (ev_.has_role) {
      StreamInfo info;
      info.device = own_id(ev_.pid, "pid");
      info.stream = own_id(ev_.tid, "tid");
      info.name = label;
      info.role = own_role();
      own_streams_.push_back(std::move(info));
      return;
    }
    if (ev_.pid.kind == Id::None || ev_.tid.kind == Id::None) return;
    try {
      const int d = resolve(ev_.pid, "pid", pid_names_);
      const int s = resolve(ev_.tid, "tid", tid_names_);
      thread_names_[{d, s}] = label;
    } catch (const TraceError&) {
      // A metadata record with an unusable id names nothing we keep; it is not worth failing for.
    }
  }

  // -- state
  bool include_cpu_;
  CommClassifier classifier_;
  std::vector<Frame> stack_;
  std::string key_;
  RawEvent ev_;
  double number_value_ = 0;
  long long int_value_ = 0;
  bool int_ok_ = false;

  std::string split_error_;
  bool saw_events_ = false, own_file_ = false, kineto_hint_ = false, legacy_hint_ = false;
  std::string source_;
  std::map<std::string, std::string> metadata_;
  std::uint64_t events_ = 0, skipped_ = 0;

  std::vector<Span> spans_;
  std::vector<detail::SplitMicros> splits_;
  std::vector<StreamInfo> own_streams_;
  std::map<std::string, int> pid_names_, tid_names_;
  std::map<int, std::string> device_labels_;
  std::map<std::pair<int, int>, std::string> thread_names_;
  std::map<std::pair<int, int>, bool> stream_kind_;  // true: device stream, false: CPU thread
  std::unordered_map<std::string, std::optional<std::string>> comm_memo_;

 public:
  bool saw_events() const { return saw_events_; }
};

Timeline TraceSax::finish() {
  if (!saw_events_)
    throw TraceError(TraceErrorCode::Schema,
                     "not a Chrome trace: no 'traceEvents' array in the top-level object");
  Timeline t;
  auto check_starts = [](const std::vector<Span>& spans) {
    for (const Span& s : spans)
      if (!(std::fabs(s.start_s) <= kMaxTraceSeconds))
        throw TraceError(TraceErrorCode::Range, "span '" + clip(s.name) +
                                                    "' starts beyond 1e9 s of the trace origin");
  };
  if (own_file_) {
    check_starts(spans_);
    t.source = std::move(source_);
    t.metadata = std::move(metadata_);
    t.streams = std::move(own_streams_);
    t.spans = std::move(spans_);
    return t;
  }
  if (!split_error_.empty()) throw TraceError(TraceErrorCode::Range, split_error_);
  t.source = kineto_hint_ ? "kineto" : legacy_hint_ ? "pytorch-legacy" : "chrome";
  // Rebase: whole microseconds relative to the earliest kept span, then the fraction, so epoch
  // timestamps keep their nanoseconds.
  if (!spans_.empty()) {
    std::int64_t origin = splits_[0].whole;
    for (const auto& s : splits_) origin = std::min(origin, s.whole);
    for (std::size_t i = 0; i < spans_.size(); ++i)
      spans_[i].start_s =
          (static_cast<double>(splits_[i].whole - origin) + splits_[i].fraction) / 1e6;
    t.metadata["origin_us"] = std::to_string(origin);
    check_starts(spans_);
  }
  // Streams: every (device, stream) with spans, named by thread_name metadata when present; the
  // role is the one with the most busy time on it.
  std::map<std::pair<int, int>, std::array<double, 3>> busy;
  for (const Span& s : spans_) busy[{s.device, s.stream}][static_cast<int>(s.role)] += s.duration_s;
  for (const auto& [key, by_role] : busy) {
    StreamInfo info;
    info.device = key.first;
    info.stream = key.second;
    info.role = by_role[1] > by_role[0] ? Role::Comm : Role::Compute;
    if (auto it = thread_names_.find(key); it != thread_names_.end() && !it->second.empty()) {
      info.name = it->second;
    } else if (stream_kind_[key]) {
      info.name = "stream " + std::to_string(key.second);
    } else {
      auto label = device_labels_.find(key.first);
      info.name = (label != device_labels_.end() ? label->second : "pid " + std::to_string(key.first)) +
                  " thread " + std::to_string(key.second);
    }
    t.streams.push_back(std::move(info));
  }
  t.spans = std::move(spans_);
  return t;
}

}  // namespace

Timeline read_chrome_trace_string(std::string_view text, const ReadOptions& options) {
  TraceSax sax(options);
  json::sax_parse(text.begin(), text.end(), &sax);
  return sax.finish();
}

Timeline read_chrome_trace(const std::string& path, const ReadOptions& options, ReadStats& stats) {
  const auto start = std::chrono::steady_clock::now();
  TraceSax sax(options);  // a bad --comm-regex is reported before the file is opened
  Timeline timeline;
  std::uint64_t bytes = 0;
  try {
    io::InputFile file(path, kMaxTraceBytes, "trace");
    ChunkedFile chunks(file);
    try {
      json::sax_parse(ChunkedIterator(&chunks), ChunkedIterator(), &sax);
      timeline = sax.finish();
    } catch (const TraceError& e) {
      throw TraceError(e.code(), "trace '" + path + "': " + e.what());
    }
    bytes = chunks.bytes();
  } catch (const io::IoError& e) {
    throw TraceError(TraceErrorCode::Io, e.what());
  }
  stats.bytes = bytes;
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats.events = sax.events();
  stats.spans = timeline.spans.size();
  stats.skipped = sax.skipped();
  return timeline;
}

Timeline read_chrome_trace(const std::string& path, const ReadOptions& options) {
  ReadStats stats;
  return read_chrome_trace(path, options, stats);
}

}  // namespace ht::traces
