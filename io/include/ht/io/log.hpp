// What the commands say beside their results, in one place. Results go to stdout or to -o files;
// progress, notes, "wrote FILE" lines, warnings and errors go through here, onto stderr, each line
// under a named category ("search", "fuzz", "train", "wrote", "error", ...), written whole.
//
// A progress line (Progress) is redrawn in place on a terminal and printed at most every 10 s
// otherwise; any other line clears it first, so no line starts on a half-drawn progress line.
//
// HYBRID_TWIN_LOG chooses what is said: a comma list of "quiet" (nothing but warnings and
// errors), "-NAME" (not category NAME) and "+NAME" (NAME even when quiet). Errors and warnings are
// always said. configure() reads it once at start-up (main); a bad list is a usage error.
#pragma once

#include <sstream>
#include <string>
#include <string_view>

namespace ht::io::log {

// Sets what is said from a HYBRID_TWIN_LOG list (header comment); throws std::invalid_argument
// naming the first item it does not know.
void configure(std::string_view spec);

// Whether lines of `category` are said.
bool enabled(std::string_view category);

// One line under `category`, written when the Line goes out of scope. Tagged: "category: text";
// untagged: the text alone (for lines that open with their verb, as "wrote FILE").
class Line {
 public:
  explicit Line(std::string_view category, bool tagged = true);
  Line(const Line&) = delete;
  Line& operator=(const Line&) = delete;
  ~Line();
  template <class V>
  Line& operator<<(const V& value) {
    if (on_) text_ << value;
    return *this;
  }
  // Stream manipulators (std::setw, std::fixed, ...).
  Line& operator<<(std::ostream& (*manipulator)(std::ostream&)) {
    if (on_) text_ << manipulator;
    return *this;
  }
  Line& operator<<(std::ios_base& (*manipulator)(std::ios_base&)) {
    if (on_) text_ << manipulator;
    return *this;
  }

 private:
  bool on_;
  std::string prefix_;
  std::ostringstream text_;
};

inline Line say(std::string_view category) { return Line(category); }
inline Line error() { return Line("error"); }
inline Line warning() { return Line("warning"); }

// A progress line of `category` (header comment). draw() replaces the line; clear() removes it
// (on a terminal) before a result is printed.
class Progress {
 public:
  explicit Progress(std::string_view category);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  // `text` without the category; `elapsed_s` paces the lines written where stderr is no terminal.
  void draw(const std::string& text, double elapsed_s);
  void clear();
  bool terminal() const { return tty_; }

 private:
  std::string category_;
  bool tty_, on_;
  double next_line_s_ = 0;
};

}  // namespace ht::io::log
