// The commands' messages on stderr (see log.hpp).
#include "ht/io/log.hpp"

#include <unistd.h>

#include <cstdio>
#include <mutex>
#include <set>
#include <stdexcept>

namespace ht::io::log {
namespace {

struct State {
  std::mutex mutex;
  bool quiet = false;
  std::set<std::string, std::less<>> off, on;  // "-NAME", "+NAME"
  bool progress_drawn = false;                 // a progress line stands on the terminal
};

State& state() {
  static State s;
  return s;
}

bool always(std::string_view category) { return category == "error" || category == "warning"; }

// Writes `text` (a whole line or a progress line) after clearing a drawn progress line.
void write(const std::string& text, bool progress, bool tty) {
  State& s = state();
  const std::lock_guard lock(s.mutex);
  std::string out;
  if (s.progress_drawn) out = "\r\033[K";
  out += text;
  s.progress_drawn = progress && tty && !text.empty();
  std::fwrite(out.data(), 1, out.size(), stderr);
  std::fflush(stderr);
}

}  // namespace

void configure(std::string_view spec) {
  State& s = state();
  const std::lock_guard lock(s.mutex);
  s.quiet = false;
  s.off.clear();
  s.on.clear();
  while (!spec.empty()) {
    const std::size_t comma = spec.find(',');
    std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty()) continue;
    if (item == "quiet") {
      s.quiet = true;
    } else if ((item.front() == '-' || item.front() == '+') && item.size() > 1 &&
               item.find_first_not_of("abcdefghijklmnopqrstuvwxyz_-", 1) == std::string_view::npos) {
      (item.front() == '-' ? s.off : s.on).emplace(item.substr(1));
    } else {
      throw std::invalid_argument("HYBRID_TWIN_LOG: '" + std::string(item.substr(0, 40)) +
                                  "' is not 'quiet', '-CATEGORY' or '+CATEGORY'");
    }
  }
}

bool enabled(std::string_view category) {
  if (always(category)) return true;
  State& s = state();
  const std::lock_guard lock(s.mutex);
  if (s.on.count(category)) return true;
  return !s.quiet && !s.off.count(category);
}

Line::Line(std::string_view category, bool tagged)
    : on_(enabled(category)), prefix_(tagged && !category.empty() ? std::string(category) + ": " : std::string()) {}

Line::~Line() {
  if (on_) write(prefix_ + text_.str() + "\n", false, false);
}

Progress::Progress(std::string_view category)
    : category_(category), tty_(isatty(2) != 0), on_(enabled(category)) {}

Progress::~Progress() { clear(); }

void Progress::draw(const std::string& text, double elapsed_s) {
  if (!on_) return;
  if (tty_) {
    write(text, true, true);
    return;
  }
  if (elapsed_s < next_line_s_) return;
  write(text + "\n", false, false);
  next_line_s_ = elapsed_s + 10;
}

void Progress::clear() {
  State& s = state();
  const std::lock_guard lock(s.mutex);
  if (!s.progress_drawn) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  s.progress_drawn = false;
}

}  // namespace ht::io::log
