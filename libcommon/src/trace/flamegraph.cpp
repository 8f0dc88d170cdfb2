// Flame graph SVG writer: layout of a StackTrie, palettes, differential colouring and the
// embedded script (hover details, click-to-zoom, search, reset). Written for rtx.
#include "rtx/trace/flamegraph.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "rtx/core/error.hpp"
#include "rtx/core/hash.hpp"
#include "rtx/core/printable.hpp"

namespace rtx::trace {
namespace {

struct Rgb { int r, g, b; };

Rgb hsl(double h, double s, double l) {
  const double c = (1 - std::fabs(2 * l - 1)) * s;
  const double hp = std::fmod(h, 360.0) / 60.0;
  const double x = c * (1 - std::fabs(std::fmod(hp, 2.0) - 1));
  double r = 0, g = 0, b = 0;
  if (hp < 1) r = c, g = x;
  else if (hp < 2) r = x, g = c;
  else if (hp < 3) g = c, b = x;
  else if (hp < 4) g = x, b = c;
  else if (hp < 5) r = x, b = c;
  else r = c, b = x;
  const double m = l - c / 2;
  return {int(std::lround((r + m) * 255)), int(std::lround((g + m) * 255)), int(std::lround((b + m) * 255))};
}

struct Palette { const char* name; double hue_lo, hue_hi, sat, light; };
const Palette kPalettes[] = {
    {"hot", 0, 55, 0.85, 0.6},   {"mem", 95, 140, 0.55, 0.55}, {"io", 200, 235, 0.6, 0.62},
    {"aqua", 170, 190, 0.55, 0.6}, {"yellow", 48, 60, 0.85, 0.6}, {"green", 100, 130, 0.6, 0.5},
    {"blue", 215, 240, 0.7, 0.65}, {"red", 0, 12, 0.75, 0.6},     {"orange", 20, 38, 0.9, 0.58},
    {"purple", 265, 295, 0.5, 0.65}, {"gray", 0, 0, 0.0, 0.7}};

Rgb palette_color(const Palette& p, const std::string& name) {
  const uint32_t h = fnv1a32(name.data(), name.size());
  const double u = (h & 0xffff) / 65535.0, v = ((h >> 16) & 0xff) / 255.0;
  return hsl(p.hue_lo + (p.hue_hi - p.hue_lo) * u, p.sat, p.light - 0.08 * v);
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.10g", v);
  return b;
}
std::string px(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}

// The viewer script. Frames carry data-x / data-w (fractions of the root) and data-d (depth).
const char* kScript = R"JS(
"use strict";
var W, PAD, FONT, frames = [], details, matched, zoomed = null, term = null;
function rtxInit(evt) {
  var svg = document.documentElement;
  W = +svg.getAttribute("data-inner"); PAD = +svg.getAttribute("data-pad"); FONT = +svg.getAttribute("data-font");
  details = document.getElementById("details"); matched = document.getElementById("matched");
  var gs = document.getElementsByClassName("f");
  for (var i = 0; i < gs.length; i++) {
    var g = gs[i];
    var f = {g: g, x: +g.getAttribute("data-x"), w: +g.getAttribute("data-w"), d: +g.getAttribute("data-d"),
             n: g.getAttribute("data-n"), r: g.getElementsByTagName("rect")[0], t: g.getElementsByTagName("text")[0],
             info: g.getElementsByTagName("title")[0].textContent};
    f.fill = f.r.getAttribute("fill");
    frames.push(f);
    g.addEventListener("click", zoomTo.bind(null, f));
    g.addEventListener("mouseover", function(f) { details.textContent = f.info; }.bind(null, f));
    g.addEventListener("mouseout", function() { details.textContent = " "; });
  }
  document.getElementById("reset").addEventListener("click", resetAll);
  document.getElementById("search").addEventListener("click", askSearch);
  window.addEventListener("keydown", function(e) {
    if ((e.ctrlKey || e.metaKey) && e.key === "f") { e.preventDefault(); askSearch(); }
    else if (e.key === "Escape") resetAll();
  });
}
function label(f, width) {
  var room = Math.floor((width - 6) / (FONT * 0.59));
  if (room < 3) return "";
  return f.n.length <= room ? f.n : f.n.substring(0, room - 2) + "..";
}
function place(f, x, w, show) {
  f.g.style.display = show ? "" : "none";
  if (!show) return;
  f.r.setAttribute("x", (PAD + x).toFixed(2)); f.r.setAttribute("width", Math.max(w, 0).toFixed(2));
  f.t.setAttribute("x", (PAD + x + 3).toFixed(2)); f.t.textContent = label(f, w);
}
function zoomTo(z) {
  zoomed = z;
  var eps = 1e-12;
  document.getElementById("reset").style.opacity = "1";
  for (var i = 0; i < frames.length; i++) {
    var f = frames[i];
    if (f.d >= z.d && f.x >= z.x - eps && f.x + f.w <= z.x + z.w + eps) {
      place(f, (f.x - z.x) / z.w * W, f.w / z.w * W, true); f.g.style.opacity = "1";
    } else if (f.d < z.d && f.x <= z.x + eps && f.x + f.w >= z.x + z.w - eps) {
      place(f, 0, W, true); f.g.style.opacity = "0.55";
    } else {
      place(f, 0, 0, false);
    }
  }
}
function resetAll() {
  zoomed = null; term = null;
  document.getElementById("reset").style.opacity = "0.3";
  for (var i = 0; i < frames.length; i++) {
    var f = frames[i];
    place(f, f.x * W, f.w * W, true); f.g.style.opacity = "1"; f.r.setAttribute("fill", f.fill);
  }
  matched.textContent = " ";
}
function askSearch() {
  var t = window.prompt("Search frames (regular expression, case-insensitive)", term || "");
  if (t === null) return;
  search(t);
}
function search(t) {
  var re;
  try { re = new RegExp(t, "i"); } catch (err) { matched.textContent = "bad regex: " + err.message; return; }
  term = t;
  var spans = [];
  for (var i = 0; i < frames.length; i++) {
    var f = frames[i];
    if (t !== "" && re.test(f.n)) { f.r.setAttribute("fill", "rgb(225,0,225)"); spans.push([f.x, f.x + f.w]); }
    else f.r.setAttribute("fill", f.fill);
  }
  spans.sort(function(a, b) { return a[0] - b[0]; });
  var sum = 0, end = -1;
  for (var k = 0; k < spans.length; k++) {
    var s = spans[k];
    if (s[0] >= end) { sum += s[1] - s[0]; end = s[1]; }
    else if (s[1] > end) { sum += s[1] - end; end = s[1]; }
  }
  matched.textContent = t === "" ? " " : "Matched: " + (100 * sum).toFixed(2) + "% (" + spans.length + " frames)";
}
)JS";

}  // namespace

const std::vector<std::string>& flame_palettes() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> r;
    for (const Palette& p : kPalettes) r.push_back(p.name);
    return r;
  }();
  return v;
}

std::string format_weight(uint64_t w, const std::string& unit, int frac_digits) {
  char b[64];
  uint64_t scale = 1;
  for (int i = 0; i < frac_digits; ++i) scale *= 10;
  if (unit == "ns") {
    const double v = static_cast<double>(w) / static_cast<double>(scale);
    if (v >= 1e9) std::snprintf(b, sizeof b, "%.3f s", v / 1e9);
    else if (v >= 1e6) std::snprintf(b, sizeof b, "%.3f ms", v / 1e6);
    else if (v >= 1e3) std::snprintf(b, sizeof b, "%.3f us", v / 1e3);
    else if (scale > 1) std::snprintf(b, sizeof b, "%.*f ns", frac_digits, v);
    else std::snprintf(b, sizeof b, "%llu ns", static_cast<unsigned long long>(w));
    return b;
  }
  std::string digits = std::to_string(w / scale), r;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) r += ',';
    r += digits[i];
  }
  if (scale > 1 && w % scale) {  // fractional counts: their digits, trailing zeros dropped
    std::string f = std::to_string(w % scale);
    f.insert(0, static_cast<size_t>(frac_digits) - f.size(), '0');
    while (f.back() == '0') f.pop_back();
    r += "." + f;
  }
  // Any other unit is a label after the number ("1,234 samples", "1 count").
  if (unit.empty()) return r;
  const bool singular = w == scale && unit.size() > 1 && unit.back() == 's';
  return r + " " + (singular ? unit.substr(0, unit.size() - 1) : unit);
}

std::string render_flamegraph(StackTrie& trie, const FlameOptions& opt) {
  if (opt.width < 100 || opt.width > 100000)
    throw_usage("--width must be between 100 and 100000 px, got " + std::to_string(opt.width), "--width");
  if (!(opt.minwidth >= 0) || opt.minwidth > opt.width)
    throw_usage("--minwidth must be between 0 and the width (px), got " + num(opt.minwidth), "--minwidth");
  const Palette* pal = nullptr;
  for (const Palette& p : kPalettes)
    if (opt.colors == p.name) pal = &p;
  if (!pal) {
    std::string names;
    for (const auto& n : flame_palettes()) names += (names.empty() ? "" : ", ") + n;
    throw_usage("unknown palette \"" + opt.colors + "\"", "--colors", "use one of: " + names);
  }
  trie.compute_totals();
  const auto& nodes = trie.nodes();
  const uint64_t root_total = nodes[0].total[0];
  if (root_total == 0)
    throw_input("the profile is empty (total weight 0): nothing to draw", "",
                "check the input holds slices or stacks with non-zero counts");
  const double pad = 10, inner = opt.width - 2 * pad;
  const double scale_px = inner / static_cast<double>(root_total);
  // Differential colouring: self-weight change per frame, base optionally normalized.
  double base_scale = 1, max_delta = 0;
  if (opt.diff) {
    const uint64_t base_total = nodes[0].total[1];
    if (opt.diff_normalize && base_total > 0) base_scale = static_cast<double>(root_total) / static_cast<double>(base_total);
    for (const auto& n : nodes)
      max_delta = std::max(max_delta, std::fabs(static_cast<double>(n.self[0]) - base_scale * static_cast<double>(n.self[1])));
  }
  // Layout: x offset (weight units) of each drawn node, preorder by sorted children.
  const auto children = trie.sorted_children();
  struct Item { uint32_t node; uint64_t x; };
  std::vector<Item> drawn;
  std::vector<Item> stack{{0, 0}};
  uint32_t max_depth = 0;
  while (!stack.empty()) {
    Item it = stack.back();
    stack.pop_back();
    if (static_cast<double>(nodes[it.node].total[0]) * scale_px < opt.minwidth && it.node != 0) continue;
    drawn.push_back(it);
    max_depth = std::max(max_depth, nodes[it.node].depth);
    uint64_t x = it.x;
    std::vector<Item> kids;
    for (uint32_t c : children[it.node]) {
      kids.push_back({c, x});
      x += nodes[c].total[0];
    }
    for (size_t k = kids.size(); k-- > 0;) stack.push_back(kids[k]);
  }
  const int fh = opt.frame_height;
  const double top = opt.subtitle.empty() ? 38 : 56, bottom = 30;
  const double height = top + (max_depth + 1) * fh + bottom;

  std::string s;
  s.reserve(drawn.size() * 300 + 8192);
  s += "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n";
  s += "<svg version=\"1.1\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(opt.width) +
       "\" height=\"" + px(height) + "\" viewBox=\"0 0 " + std::to_string(opt.width) + " " + px(height) +
       "\" onload=\"rtxInit(evt)\" data-inner=\"" + px(inner) + "\" data-pad=\"" + px(pad) + "\" data-font=\"" +
       std::to_string(opt.font_size) + "\">\n";
  s += "<!-- rtx-flame: " + std::string(opt.diff ? "differential " : "") + (opt.icicle ? "icicle" : "flame") +
       " graph; click a frame to zoom, Ctrl-F or Search to highlight, Escape or Reset Zoom to reset -->\n";
  s += "<style type=\"text/css\">text{font-family:Verdana,Helvetica,sans-serif;fill:#000}"
       " .f text{font-size:" + std::to_string(opt.font_size) + "px;pointer-events:none}"
       " .f:hover rect{stroke:#222;stroke-width:0.6;cursor:pointer}"
       " .btn{font-size:12px;cursor:pointer} #details,#matched{font-size:12px}</style>\n";
  s += "<script type=\"text/ecmascript\"><![CDATA[";
  s += kScript;
  s += "]]></script>\n";
  s += "<defs><linearGradient id=\"bg\" x1=\"0\" y1=\"0\" x2=\"0\" y2=\"1\"><stop stop-color=\"#f4f4f4\" offset=\"0\"/>"
       "<stop stop-color=\"#e6e6f0\" offset=\"1\"/></linearGradient></defs>\n";
  s += "<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"url(#bg)\"/>\n";
  s += "<text id=\"title\" x=\"" + px(opt.width / 2.0) + "\" y=\"22\" text-anchor=\"middle\" font-size=\"17\">";
  xml_escape(s, opt.title);
  s += "</text>\n";
  if (!opt.subtitle.empty()) {
    s += "<text id=\"subtitle\" x=\"" + px(opt.width / 2.0) + "\" y=\"40\" text-anchor=\"middle\" font-size=\"12\" fill=\"#555\">";
    xml_escape(s, opt.subtitle);
    s += "</text>\n";
  }
  s += "<text id=\"reset\" class=\"btn\" x=\"" + px(pad) + "\" y=\"22\" style=\"opacity:0.3\">Reset Zoom</text>\n";
  s += "<text id=\"search\" class=\"btn\" x=\"" + px(opt.width - pad) + "\" y=\"22\" text-anchor=\"end\">Search</text>\n";
  s += "<text id=\"details\" x=\"" + px(pad) + "\" y=\"" + px(height - 10) + "\"> </text>\n";
  s += "<text id=\"matched\" x=\"" + px(opt.width - pad) + "\" y=\"" + px(height - 10) + "\" text-anchor=\"end\"> </text>\n";
  s += "<g id=\"frames\">\n";
  const double rt = static_cast<double>(root_total);
  const double char_w = opt.font_size * 0.59;
  for (const Item& it : drawn) {
    const auto& n = nodes[it.node];
    const std::string& name = trie.name(n.name);
    const double xf = static_cast<double>(it.x) / rt, wf = static_cast<double>(n.total[0]) / rt;
    const double x = pad + xf * inner, w = wf * inner;
    const double y = opt.icicle ? top + n.depth * fh : top + (max_depth - n.depth) * fh;
    Rgb c;
    std::string info = name + " (" + format_weight(n.total[0], trie.unit, trie.frac_digits());
    char pct[32];
    std::snprintf(pct, sizeof pct, ", %.2f%%", 100.0 * wf);
    info += pct;
    if (opt.diff) {
      const double d = static_cast<double>(n.self[0]) - base_scale * static_cast<double>(n.self[1]);
      const double f = max_delta > 0 ? std::min(1.0, std::fabs(d) / max_delta) : 0.0;
      const int v = static_cast<int>(std::lround(255 * (1 - f)));
      c = d > 0 ? Rgb{255, v, v} : d < 0 ? Rgb{v, v, 255} : Rgb{250, 250, 250};
      const double base_total = base_scale * static_cast<double>(n.total[1]);
      info += "; self new " + format_weight(n.self[0], trie.unit, trie.frac_digits()) + ", base " +
              format_weight(static_cast<uint64_t>(std::llround(base_scale * static_cast<double>(n.self[1]))), trie.unit,
                            trie.frac_digits());
      if (base_total > 0) {
        std::snprintf(pct, sizeof pct, "; total %+.2f%%", 100.0 * (static_cast<double>(n.total[0]) - base_total) / base_total);
        info += pct;
      } else {
        info += "; new frame";
      }
    } else {
      c = it.node == 0 ? Rgb{200, 200, 205} : palette_color(*pal, name);
    }
    info += ")";
    s += "<g class=\"f\" data-x=\"" + num(xf) + "\" data-w=\"" + num(wf) + "\" data-d=\"" + std::to_string(n.depth) +
         "\" data-n=\"";
    xml_escape(s, name);
    s += "\"><title>";
    xml_escape(s, info);
    s += "</title><rect x=\"" + px(x) + "\" y=\"" + px(y) + "\" width=\"" + px(w) + "\" height=\"" +
         std::to_string(fh - 1) + "\" rx=\"2\" ry=\"2\" fill=\"rgb(" + std::to_string(c.r) + "," + std::to_string(c.g) +
         "," + std::to_string(c.b) + ")\"/><text x=\"" + px(x + 3) + "\" y=\"" + px(y + fh - 4.5) + "\">";
    const int room = static_cast<int>((w - 6) / char_w);
    if (room >= 3) {
      if (static_cast<int>(name.size()) <= room) {
        xml_escape(s, name);
      } else {
        // Cut on a UTF-8 boundary.
        size_t cut = static_cast<size_t>(room - 2);
        while (cut > 0 && (static_cast<unsigned char>(name[cut]) & 0xC0) == 0x80) --cut;
        xml_escape(s, name.substr(0, cut));
        s += "..";
      }
    }
    s += "</text></g>\n";
  }
  s += "</g>\n</svg>\n";
  return s;
}

}  // namespace rtx::trace
