// Checks of a SimGrid XML platform before SimGrid sees it. SimGrid builds whatever the file
// describes (a <cluster radical="0-99999999"> is a hundred million hosts built for minutes) and
// aborts the process on what it cannot simulate (no route between two hosts, a link of zero
// bandwidth). The text checks here bound the work up front; platform_build.cpp checks the loaded
// platform's routes and links for the pairs of ranks the plan connects, so both end in a
// SimError(BadPlatform) naming the file and the offending element.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ht::sim {

// Hosts one XML platform may describe (the plan's rank limit).
inline constexpr std::uint64_t kMaxXmlHosts = std::uint64_t{1} << 20;
// Size of a platform file (a hand-written or generated description is kilobytes).
inline constexpr std::uint64_t kMaxXmlBytes = std::uint64_t{64} << 20;

// The hosts the text describes: every <host> element plus the ranges of every radical="..."
// attribute (<cluster>, <cabinet>). Throws SimError(BadPlatform) when the count passes
// kMaxXmlHosts or a radical is malformed; `source` names the file in messages.
std::uint64_t check_platform_xml(std::string_view text, const std::string& source);

}  // namespace ht::sim
