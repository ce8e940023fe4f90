// rapidcheck generators for the pattern language, built from small named pieces: a symbol
// "world" (R2 keeps '*' and the MLA family apart), single layers, valid groups (disjoint
// namespaces, 'E' last), segments, MTP parts, and whole patterns kept as a model that knows its
// own item boundaries. Violation generators take a valid model and break exactly one rule, so a
// property can demand that exact rule (and caret position) back.
#pragma once

#include <rapidcheck.h>

#include <algorithm>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "ht/patterns/pattern.hpp"

namespace ht::patterns {
// Lets rapidcheck print items inside counterexamples.
inline void showValue(const Item& item, std::ostream& os) {
  os << (item.grouped ? "[" + item.symbols + "]" : item.symbols);
}
}  // namespace ht::patterns

namespace ht::verify::gen {

using patterns::Item;

// The symbols one model may use. `owners` are the symbols owning self_attention; together with
// 'M' (mixer) and '-'/'E' (mlp) they are the namespace classes a valid group draws from.
struct World {
  std::string name;
  std::string singles;
  std::string owners;
};

inline const World& plain_world() {
  static const World w{"plain", "MG*-E", "*G"};
  return w;
}
inline const World& mla_world() {
  static const World w{"mla", "MGD+CHW-E", "GD+CHW"};
  return w;
}

inline const World& world_named(const std::string& name) { return name == "mla" ? mla_world() : plain_world(); }

inline rc::Gen<World> world() { return rc::gen::element(plain_world(), mla_world()); }

// A whole pattern as generated: segments of items plus an MTP part written `mtp_repeats` times.
struct PatternModel {
  std::string world;
  std::vector<std::vector<Item>> segments;  // never empty; one empty segment = empty main
  std::string mtp;
  int mtp_repeats = 0;

  std::string main_text() const {
    std::string out;
    for (std::size_t s = 0; s < segments.size(); ++s) {
      if (s) out += '|';
      for (const Item& it : segments[s]) out += it.grouped ? "[" + it.symbols + "]" : it.symbols;
    }
    return out;
  }
  std::string mtp_text() const {
    std::string out;
    for (int d = 0; d < mtp_repeats; ++d) out += "/" + mtp;
    return out;
  }
  std::string text() const { return main_text() + mtp_text(); }
  // Offsets in main_text() that lie between items or at segment ends, never inside a group.
  std::vector<int> boundaries() const {
    std::vector<int> out;
    int pos = 0;
    for (std::size_t s = 0; s < segments.size(); ++s) {
      if (s) ++pos;
      out.push_back(pos);
      for (const Item& it : segments[s]) {
        pos += it.physical_count() + (it.grouped ? 2 : 0);
        out.push_back(pos);
      }
    }
    return out;
  }
  // Offset in main_text() just after the last item of each segment.
  std::vector<int> segment_ends() const {
    std::vector<int> out;
    int pos = 0;
    for (std::size_t s = 0; s < segments.size(); ++s) {
      if (s) ++pos;
      for (const Item& it : segments[s]) pos += it.physical_count() + (it.grouped ? 2 : 0);
      out.push_back(pos);
    }
    return out;
  }
  std::vector<Item> items() const {
    std::vector<Item> out;
    for (const auto& s : segments) out.insert(out.end(), s.begin(), s.end());
    return out;
  }
  std::string flattened() const {
    std::string out;
    for (const Item& it : items()) out += it.symbols;
    return out;
  }
  int expected_depth() const { return mtp.empty() ? 0 : mtp_repeats; }
};

inline void showValue(const PatternModel& m, std::ostream& os) { os << "'" << m.text() << "' (" << m.world << ")"; }

// A text that breaks exactly one rule: its code and the caret (-1: not pinned down).
struct Violation {
  std::string text;
  std::string code;
  int position = -1;
};

inline void showValue(const Violation& v, std::ostream& os) {
  os << "'" << v.text << "' expecting " << v.code << " at " << v.position;
}

inline std::string inserted(const std::string& s, int at, const std::string& what) {
  std::string out = s;
  out.insert(static_cast<std::size_t>(at), what);
  return out;
}

// --- single pieces ------------------------------------------------------------------------------

inline rc::Gen<Item> single_layer(const World& w) {
  return rc::gen::map(rc::gen::elementOf(w.singles), [](char c) { return Item{std::string(1, c), false, 0}; });
}

// A valid group body: at most one mixer 'M', one self_attention owner and one of '-'/'E', in any
// order except that 'E' comes last. ' ' stands for "no member of this class".
inline rc::Gen<std::string> group_body(const World& w) {
  return rc::gen::map(
      rc::gen::tuple(rc::gen::arbitrary<bool>(), rc::gen::elementOf(w.owners + " "),
                     rc::gen::element(' ', '-', 'E'), rc::gen::inRange(0, 6)),
      [](const std::tuple<bool, char, char, int>& t) {
        const auto& [mixer, owner, ffn, order] = t;
        std::string body;
        if (mixer) body += 'M';
        if (owner != ' ') body += owner;
        if (ffn == '-') body += '-';
        std::sort(body.begin(), body.end());
        for (int k = 0; k < order; ++k) std::next_permutation(body.begin(), body.end());
        if (ffn == 'E') body += 'E';
        return body.empty() ? std::string("M") : body;
      });
}

inline rc::Gen<Item> group(const World& w) {
  return rc::gen::map(group_body(w), [](std::string body) { return Item{std::move(body), true, 0}; });
}

inline rc::Gen<Item> item(const World& w) {
  return rc::gen::weightedOneOf<Item>({{3, single_layer(w)}, {1, group(w)}});
}

inline rc::Gen<std::vector<Item>> segment_of(rc::Gen<Item> items) {
  return rc::gen::mapcat(rc::gen::inRange(0, 7), [items](int n) {
    return rc::gen::container<std::vector<Item>>(static_cast<std::size_t>(n), items);
  });
}

inline rc::Gen<std::vector<std::vector<Item>>> segments_of(rc::Gen<Item> items, int count) {
  return rc::gen::container<std::vector<std::vector<Item>>>(static_cast<std::size_t>(count), segment_of(items));
}

// An MTP depth pattern: plain symbols of the world, no pipes, no brackets.
inline rc::Gen<std::string> mtp_part(const World& w) {
  return rc::gen::mapcat(rc::gen::inRange(0, 4), [w](int n) {
    return rc::gen::container<std::string>(static_cast<std::size_t>(n), rc::gen::elementOf(w.singles));
  });
}

// --- whole valid patterns -----------------------------------------------------------------------

inline rc::Gen<PatternModel> pattern_in(const World& w, rc::Gen<Item> items, int min_segments, int max_segments,
                                        bool with_mtp) {
  return rc::gen::mapcat(rc::gen::inRange(min_segments, max_segments + 1), [=](int nseg) {
    return rc::gen::map(
        rc::gen::tuple(segments_of(items, nseg), mtp_part(w), rc::gen::inRange(0, with_mtp ? 4 : 1)),
        [w](const std::tuple<std::vector<std::vector<Item>>, std::string, int>& t) {
          return PatternModel{w.name, std::get<0>(t), std::get<1>(t), std::get<2>(t)};
        });
  });
}

// Any valid pattern: symbols, groups, pipes (1..4 segments) and MTP depths.
inline rc::Gen<PatternModel> valid_pattern() {
  return rc::gen::mapcat(world(), [](const World& w) { return pattern_in(w, item(w), 1, 4, true); });
}

// A valid pattern without MTP whose segment count is a multiple of `pp` (pp * vpp segments).
inline rc::Gen<PatternModel> piped_pattern(int pp, int vpp) {
  return rc::gen::mapcat(world(), [=](const World& w) { return pattern_in(w, item(w), pp * vpp, pp * vpp, false); });
}

// One pipe-less, group-less segment of exactly n layers.
inline rc::Gen<PatternModel> flat_pattern(int n) {
  return rc::gen::mapcat(world(), [n](const World& w) {
    return rc::gen::map(rc::gen::container<std::vector<Item>>(static_cast<std::size_t>(n), single_layer(w)),
                        [w](std::vector<Item> items) { return PatternModel{w.name, {std::move(items)}, "", 0}; });
  });
}

// Items whose group members are drawn freely (namespaces may collide; 'E' still last), for
// parsing with ParseOptions{.check_namespaces = false}.
inline rc::Gen<Item> loose_group(const World& w) {
  std::string no_moe;
  for (char c : w.singles)
    if (c != 'E') no_moe += c;
  return rc::gen::map(
      rc::gen::tuple(rc::gen::mapcat(rc::gen::inRange(0, 4),
                                     [no_moe](int n) {
                                       return rc::gen::container<std::string>(static_cast<std::size_t>(n),
                                                                              rc::gen::elementOf(no_moe));
                                     }),
                     rc::gen::arbitrary<bool>()),
      [](const std::tuple<std::string, bool>& t) {
        std::string body = std::get<0>(t) + (std::get<1>(t) ? "E" : "");
        return Item{body.empty() ? std::string("E") : body, true, 0};
      });
}

inline rc::Gen<PatternModel> loosely_grouped_pattern() {
  return rc::gen::mapcat(world(), [](const World& w) {
    return pattern_in(w, rc::gen::weightedOneOf<Item>({{1, single_layer(w)}, {2, loose_group(w)}}), 1, 3, false);
  });
}

// --- single-rule violations of parse() ------------------------------------------------------------

inline rc::Gen<char> non_symbol() { return rc::gen::elementOf(std::string("abxz0 .#!?(){}m~")); }

// R1: one foreign character anywhere in main, or at the same place in every MTP part.
inline rc::Gen<Violation> r1_violation(rc::Gen<PatternModel> base = valid_pattern()) {
  return rc::gen::mapcat(base, [](const PatternModel& m) {
    const int main_size = static_cast<int>(m.main_text().size());
    return rc::gen::map(
        rc::gen::tuple(non_symbol(), rc::gen::inRange(0, main_size + 1), rc::gen::inRange(0, static_cast<int>(m.mtp.size()) + 1),
                       rc::gen::arbitrary<bool>()),
        [m, main_size](const std::tuple<char, int, int, bool>& t) {
          const auto& [c, at_main, at_mtp, in_mtp] = t;
          if (in_mtp && m.mtp_repeats > 0) {
            PatternModel broken = m;
            broken.mtp = inserted(m.mtp, at_mtp, std::string(1, c));
            return Violation{broken.text(), "R1", main_size + 1 + at_mtp};
          }
          return Violation{inserted(m.main_text(), at_main, std::string(1, c)) + m.mtp_text(), "R1", at_main};
        });
  });
}

// R2: '*' and an MLA-family symbol inserted between items of a '*'-world pattern. The caret goes
// to the first layer whose family conflicts with an earlier layer.
inline rc::Gen<Violation> r2_violation(rc::Gen<PatternModel> base = pattern_in(plain_world(), item(plain_world()), 1, 3, true)) {
  return rc::gen::mapcat(base, [](const PatternModel& m) {
    const auto bounds = m.boundaries();
    const int n = static_cast<int>(bounds.size());
    return rc::gen::map(
        rc::gen::tuple(rc::gen::elementOf(std::string("D+CHW")), rc::gen::inRange(0, n), rc::gen::inRange(0, n)),
        [m, bounds](const std::tuple<char, int, int>& t) {
          const auto& [mla, a, b] = t;
          // Insert the later offset first so the earlier one stays valid.
          int at_star = bounds[static_cast<std::size_t>(a)], at_mla = bounds[static_cast<std::size_t>(b)];
          std::string main = m.main_text();
          if (at_star >= at_mla) {
            main = inserted(inserted(main, at_star, "*"), at_mla, std::string(1, mla));
          } else {
            main = inserted(inserted(main, at_mla, std::string(1, mla)), at_star, "*");
          }
          int position = -1;
          bool plain = false, family = false;
          for (std::size_t i = 0; i < main.size() && position < 0; ++i) {
            if (main[i] == '*') plain = true;
            if (std::string("D+CHW").find(main[i]) != std::string::npos) family = true;
            if (plain && family) position = static_cast<int>(i);
          }
          return Violation{main + m.mtp_text(), "R2", position};
        });
  });
}

// R3: MTP parts that differ; the later part may even hold foreign characters, since identity is
// checked before symbols.
inline rc::Gen<Violation> r3_violation(rc::Gen<PatternModel> base = valid_pattern()) {
  return rc::gen::mapcat(base, [](const PatternModel& m) {
    return rc::gen::map(
        rc::gen::tuple(rc::gen::inRange(1, 3), rc::gen::elementOf(std::string("M*-Ex|[]")), rc::gen::inRange(0, 2)),
        [m](const std::tuple<int, char, int>& t) {
          const auto& [same, extra, tail] = t;
          std::string text = m.main_text();
          for (int d = 0; d < same; ++d) text += "/" + m.mtp;
          const int position = static_cast<int>(text.size()) + 1;
          text += "/" + m.mtp + std::string(1, extra);
          for (int d = 0; d < tail; ++d) text += "/" + m.mtp;
          return Violation{text, "R3", position};
        });
  });
}

// R4: a pipe inside identical MTP parts.
inline rc::Gen<Violation> r4_violation(rc::Gen<PatternModel> base = valid_pattern()) {
  return rc::gen::mapcat(base, [](const PatternModel& m) {
    return rc::gen::map(rc::gen::tuple(rc::gen::inRange(0, static_cast<int>(m.mtp.size()) + 1), rc::gen::inRange(1, 4)),
                        [m](const std::tuple<int, int>& t) {
                          const auto& [at, depths] = t;
                          PatternModel broken = m;
                          broken.mtp = inserted(m.mtp, at, "|");
                          broken.mtp_repeats = depths;
                          return Violation{broken.text(), "R4", static_cast<int>(m.main_text().size()) + 1 + at};
                        });
  });
}

// G1: an unmatched '[' at a segment end, a stray ']', an empty group, or a nested group.
inline rc::Gen<Violation> g1_violation(rc::Gen<PatternModel> base = valid_pattern()) {
  return rc::gen::mapcat(base, [](const PatternModel& m) {
    const auto bounds = m.boundaries();
    const auto ends = m.segment_ends();
    return rc::gen::map(
        rc::gen::tuple(rc::gen::inRange(0, 4), rc::gen::inRange(0, static_cast<int>(bounds.size())),
                       rc::gen::inRange(0, static_cast<int>(ends.size())), rc::gen::element(std::string(""), std::string("M"))),
        [m, bounds, ends](const std::tuple<int, int, int, std::string>& t) {
          const auto& [kind, b, e, pre] = t;
          const std::string main = m.main_text();
          const int at = bounds[static_cast<std::size_t>(b)];
          switch (kind) {
            case 0: {
              const int end = ends[static_cast<std::size_t>(e)];
              return Violation{inserted(main, end, "[" + pre) + m.mtp_text(), "G1", end};
            }
            case 1: return Violation{inserted(main, at, "]") + m.mtp_text(), "G1", at};
            case 2: return Violation{inserted(main, at, "[]") + m.mtp_text(), "G1", at};
            default:
              return Violation{inserted(main, at, "[" + pre + "[*]]") + m.mtp_text(), "G1",
                               at + 1 + static_cast<int>(pre.size())};
          }
        });
  });
}

// G2: a group of 'M', an attention owner and 'E', with 'E' anywhere but last.
inline rc::Gen<Violation> g2_violation(rc::Gen<PatternModel> base = valid_pattern()) {
  return rc::gen::mapcat(base, [](const PatternModel& m) {
    const auto bounds = m.boundaries();
    const std::string owners = m.world == "plain" ? plain_world().owners : mla_world().owners;
    return rc::gen::map(
        rc::gen::tuple(rc::gen::inRange(0, static_cast<int>(bounds.size())),
                       rc::gen::element(std::string("EM"), std::string("EA"), std::string("EMA"), std::string("EAM"),
                                        std::string("MEA"), std::string("AEM")),
                       rc::gen::elementOf(owners)),
        [m, bounds](const std::tuple<int, std::string, char>& t) {
          const auto& [b, shape, owner] = t;
          std::string body = shape;
          std::replace(body.begin(), body.end(), 'A', owner);
          const int at = bounds[static_cast<std::size_t>(b)];
          return Violation{inserted(m.main_text(), at, "[" + body + "]") + m.mtp_text(), "G2",
                           at + 1 + static_cast<int>(body.find('E'))};
        });
  });
}

// G3: a well-formed group inside every (identical) MTP part of `base` (its own MTP is replaced).
inline rc::Gen<Violation> g3_violation_on(rc::Gen<PatternModel> base) {
  return rc::gen::mapcat(base, [](const PatternModel& m) {
    const World& w = world_named(m.world);
    return rc::gen::map(rc::gen::tuple(mtp_part(w), group_body(w), mtp_part(w), rc::gen::inRange(1, 4)),
                        [m](const std::tuple<std::string, std::string, std::string, int>& t) {
                          const auto& [before, body, after, depths] = t;
                          PatternModel broken = m;
                          broken.mtp = before + "[" + body + "]" + after;
                          broken.mtp_repeats = depths;
                          return Violation{broken.text(), "G3",
                                           static_cast<int>(m.main_text().size()) + 1 + static_cast<int>(before.size())};
                        });
  });
}

// G3 on a generated MTP-free pattern.
inline rc::Gen<Violation> g3_violation() {
  return g3_violation_on(rc::gen::mapcat(world(), [](const World& w) { return pattern_in(w, item(w), 1, 3, false); }));
}

// G5: a group where two members come from one namespace class (the caret is on the second), with
// possibly a member of another class between them; 'E' stays last.
inline rc::Gen<Violation> g5_violation(rc::Gen<PatternModel> base = valid_pattern()) {
  return rc::gen::mapcat(base, [](const PatternModel& m) {
    const auto bounds = m.boundaries();
    const std::string owners = m.world == "plain" ? plain_world().owners : mla_world().owners;
    return rc::gen::map(
        rc::gen::tuple(rc::gen::inRange(0, static_cast<int>(bounds.size())), rc::gen::inRange(0, 3),
                       rc::gen::elementOf(owners), rc::gen::elementOf(owners), rc::gen::element('-', 'E'),
                       rc::gen::arbitrary<bool>()),
        [m, bounds](const std::tuple<int, int, char, char, char, bool>& t) {
          const auto& [b, cls, o1, o2, ffn, middle] = t;
          std::string first, second, between;
          if (cls == 0) {  // two mixers
            first = "M", second = "M", between = middle ? std::string(1, o1) : "";
          } else if (cls == 1) {  // two self_attention owners
            first = std::string(1, o1), second = std::string(1, o2), between = middle ? "M" : "";
          } else {  // '-' then '-' or 'E'
            first = "-", second = std::string(1, ffn), between = middle ? "M" : "";
          }
          const std::string body = first + between + second;
          const int at = bounds[static_cast<std::size_t>(b)];
          return Violation{inserted(m.main_text(), at, "[" + body + "]") + m.mtp_text(), "G5",
                           at + 1 + static_cast<int>(first.size() + between.size())};
        });
  });
}


// --- fixed patterns (hybrid-twin fuzz --pattern) -------------------------------------------------

// The model of an already parsed pattern, so violation generators can break a user's own pattern.
inline PatternModel model_of(const patterns::ParsedPattern& p) {
  PatternModel m;
  m.world = p.flattened_symbols().find_first_of("D+CHW") != std::string::npos ||
                    p.mtp.find_first_of("D+CHW") != std::string::npos
                ? "mla"
                : "plain";
  for (const patterns::Segment& seg : p.segments) {
    std::vector<Item> items;
    for (const Item& it : seg.items) items.push_back(Item{it.symbols, it.grouped, 0});
    m.segments.push_back(std::move(items));
  }
  if (m.segments.empty()) m.segments.emplace_back();
  m.mtp = p.mtp;
  m.mtp_repeats = p.mtp_depths;
  return m;
}

// --- GPT-importable patterns -------------------------------------------------------------------

// n blocks, each an attention and an MLP layer ('-' everywhere, or 'E' everywhere) in either
// order, Mamba layers sprinkled in, some neighbours grouped, some pipes.
inline rc::Gen<std::string> gpt_compatible_pattern() {
  return rc::gen::mapcat(rc::gen::tuple(rc::gen::inRange(1, 6), rc::gen::element('-', 'E')), [](const std::tuple<int, char>& t) {
    const auto [blocks, mlp] = t;
    const auto piece = rc::gen::tuple(rc::gen::inRange(0, 3), rc::gen::arbitrary<bool>(), rc::gen::inRange(0, 4));
    return rc::gen::map(rc::gen::container<std::vector<std::tuple<int, bool, int>>>(static_cast<std::size_t>(blocks), piece),
                        [mlp](const std::vector<std::tuple<int, bool, int>>& pieces) {
                          std::string out;
                          for (const auto& [mambas, grouped, shape] : pieces) {
                            out += std::string(static_cast<std::size_t>(mambas), 'M');
                            // 'E' must end its group, so a grouped MoE block is always "[*E]".
                            const bool attention_first = mlp == 'E' || shape % 2 == 0;
                            const std::string block = attention_first ? std::string("*") + mlp : std::string(1, mlp) + "*";
                            out += grouped ? "[" + block + "]" : block;
                            if (shape == 3) out += "|";
                          }
                          return out;
                        });
  });
}

}  // namespace ht::verify::gen
