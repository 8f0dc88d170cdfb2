// Interactive flame graph SVG (own writer): hover details, click to zoom, regex search with
// highlight and matched share, reset; icicle layout; differential colouring after Brendan
// Gregg, "Differential Flame Graphs" (2014): drawn with the NEW profile, red = grew, blue = shrank.
#pragma once
#include <string>

#include "rtx/trace/folded.hpp"

namespace rtx::trace {

struct FlameOptions {
  std::string title = "Flame Graph";
  std::string subtitle;          ///< second line under the title ("" = none)
  int width = 1200;              ///< image width, px (>= 100)
  double minwidth = 0.1;         ///< frames narrower than this (px) are left out, with their children
  bool icicle = false;           ///< root at the top, stacks grow down
  std::string colors = "hot";    ///< palette: hot mem io aqua yellow green blue red orange purple gray
  bool diff = false;             ///< colour by self-weight change of column 0 (NEW) vs 1 (BASE)
  bool diff_normalize = false;   ///< scale BASE to NEW's total before comparing
  int frame_height = 16;         ///< px
  int font_size = 12;            ///< px
};

/// Palettes accepted by FlameOptions::colors.
const std::vector<std::string>& flame_palettes();

/// Render `trie` (totals computed by this call) as an SVG document: well-formed XML (names
/// escaped, invalid XML characters and bytes replaced), embedded ECMAScript. Errors:
/// rtx::Error(Usage) for a bad width/minwidth/palette, rtx::Error(Input) when the profile
/// is empty (total weight 0).
std::string render_flamegraph(StackTrie& trie, const FlameOptions& opt);

/// Human text of a weight: "1.250 ms" for unit "ns", else the number and the unit as a label
/// ("1,234 samples", "1 count", "2.5 counts"; singular for 1 when the unit ends in 's').
/// `frac_digits`: the weight is fixed point, w / 10^frac_digits (StackTrie::frac_digits).
std::string format_weight(uint64_t w, const std::string& unit, int frac_digits = 0);

}  // namespace rtx::trace
