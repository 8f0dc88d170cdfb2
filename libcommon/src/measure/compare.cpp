// `rtx-bench compare`: match two rtx.bench.v1 artifacts by case id, judge each pair with
// stats::compare_samples, and print the report as a table, markdown, CSV or JSON.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <ostream>
#include <sstream>

#include "rtx/measure/measure.hpp"
#include "rtx/core/error.hpp"
#include "rtx/core/printable.hpp"

namespace rtx::measure {
namespace {

using nlohmann::json;

std::vector<double> samples_of(const json& c) { return c["samples_s"].get<std::vector<double>>(); }

/// The displayed median: computed from the samples the verdict is judged on, so the two
/// cannot disagree (check_bench_artifact also checks time.median_s against them).
double median_of(const json& c) {
  const auto s = samples_of(c);
  return s.empty() ? 0.0 : stats::median(s);
}

/// A markdown table cell: '|' escaped (it would end the cell), control characters shown as
/// \xHH by rtx::printable (a newline would end the row).
std::string md_cell(const std::string& s) {
  std::string o;
  for (char ch : printable(s)) {
    if (ch == '|') o += '\\';
    o += ch;
  }
  return o;
}

std::string csv_quote(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string o = "\"";
  for (char ch : s) o += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return o + "\"";
}

/// "" or "host busy during base: <evidence>" / "... during new: ..." / both, from each case's
/// host.contended and host.reason (checked by check_bench_artifact).
std::string busy_reason(const json& b, const json& n) {
  std::string out;
  for (const auto& [side, c] : {std::pair<const char*, const json*>{"base", &b}, {"new", &n}}) {
    if (!c->contains("host")) continue;
    const json& h = (*c)["host"];
    if (!h.value("contended", false)) continue;
    std::string why = h.value("reason", std::string());
    if (why.empty()) why = "flagged contended";
    out += (out.empty() ? "" : "; ") + std::string("host busy during ") + side + ": " + why;
  }
  return out;
}

/// True when `base` and `fresh` are the baseline and new sides of one interleaved
/// `run --baseline-exe` run: both carry the same non-empty ab.pair_id, with different roles.
bool same_abba_pair(const json& base, const json& fresh) {
  auto field = [](const json& d, const char* k) {
    if (!d.contains("ab") || !d["ab"].is_object() || !d["ab"].contains(k) || !d["ab"][k].is_string()) return std::string();
    return d["ab"][k].get<std::string>();
  };
  const std::string pb = field(base, "pair_id"), pn = field(fresh, "pair_id");
  return !pb.empty() && pb == pn && field(base, "role") != field(fresh, "role");
}

/// The two sides of one --baseline-exe run leave out the same rounds of a case (merge_rounds_paired),
/// and at each such round at least one side's own round was busy (the other's is then paired).
/// Throws rtx::Error(Input) naming the case and both files otherwise (an edited artifact).
void check_paired_rounds(const json& b, const json& n, const std::string& id, const std::string& base_src,
                         const std::string& new_src) {
  auto rounds = [](const json& c) {
    std::map<uint64_t, bool> out;  // round -> paired
    if (c.contains("host") && c["host"].contains("rounds_left_out"))
      for (const json& r : c["host"]["rounds_left_out"]) out[r["round"].get<uint64_t>()] = r.value("paired", false);
    return out;
  };
  const auto rb = rounds(b), rn = rounds(n);
  auto list = [](const std::map<uint64_t, bool>& m) {
    std::string s;
    for (const auto& [k, p] : m) s += (s.empty() ? "" : ", ") + std::to_string(k);
    return s.empty() ? std::string("none") : s;
  };
  const std::string where = "case " + printable(id) + " of " + base_src + " and " + new_src;
  bool same = rb.size() == rn.size();
  for (const auto& [k, paired] : rb) {
    const auto it = rn.find(k);
    if (it == rn.end()) {
      same = false;
      break;
    }
    if (paired && it->second)
      throw_input("round " + std::to_string(k) + " is left out of both sides as paired, but neither side's own round " +
                      std::to_string(k) + " was busy",
                  where, "the two files of one --baseline-exe run are written together; was one edited by hand?");
  }
  if (!same)
    throw_input("the two sides of one --baseline-exe run left out different rounds (base: " + list(rb) + "; new: " + list(rn) +
                    "); they are left out of both sides alike",
                where, "the two files of one --baseline-exe run are written together; was one edited by hand?");
}

/// "host busy in k/N rounds; interleaved ABBA rounds balance it", k and N over both sides
/// (host.rounds_contended / host.rounds, else the round_medians_s count).
std::string balanced_note(const json& b, const json& n) {
  size_t k = 0, total = 0;
  for (const json* c : {&b, &n}) {
    const size_t r = c->contains("round_medians_s") ? (*c)["round_medians_s"].size() : 0;
    if (c->contains("host")) {
      const json& h = (*c)["host"];
      total += h.value("rounds", r);
      k += h.value("rounds_contended", size_t{h.value("contended", false) ? 1u : 0u});
    } else {
      total += r;
    }
  }
  return "host busy in " + std::to_string(k) + "/" + std::to_string(total) + " rounds; interleaved ABBA rounds balance it";
}

/// "" or "<side> judged on K of N rounds (round i busy: <reason>; ...)" for each side whose case
/// was merged from its quiet rounds (host.rounds_left_out, checked by check_bench_artifact).
std::string left_out_note(const json& b, const json& n) {
  std::string out;
  for (const auto& [side, c] : {std::pair<const char*, const json*>{"base", &b}, {"new", &n}}) {
    if (!c->contains("host") || !(*c)["host"].contains("rounds_left_out")) continue;
    const json& h = (*c)["host"];
    const json& lo = h["rounds_left_out"];
    if (lo.empty()) continue;
    const size_t rounds = h.value("rounds", size_t{0});
    std::string s = std::string(side) + " judged on " + std::to_string(rounds - lo.size()) + " of " + std::to_string(rounds) + " rounds (";
    for (size_t i = 0; i < lo.size(); ++i)
      s += (i ? "; round " : "round ") + std::to_string(lo[i]["round"].get<size_t>()) +
           (lo[i].value("paired", false) ? " left out with its pair, " : " busy: ") + lo[i]["reason"].get<std::string>();
    out += (out.empty() ? "" : "; ") + s + ")";
  }
  return out;
}

/// The short "base 4/5, new 3/5 rounds" of a row's verdict cell ("" when no round was left out).
std::string left_out_short(const json& b, const json& n) {
  std::string out;
  for (const auto& [side, c] : {std::pair<const char*, const json*>{"base", &b}, {"new", &n}}) {
    if (!c->contains("host") || !(*c)["host"].contains("rounds_left_out") || (*c)["host"]["rounds_left_out"].empty()) continue;
    const json& h = (*c)["host"];
    const size_t rounds = h.value("rounds", size_t{0});
    out += (out.empty() ? "" : ", ") + std::string(side) + " " + std::to_string(rounds - h["rounds_left_out"].size()) + "/" +
           std::to_string(rounds);
  }
  return out.empty() ? out : out + " rounds";
}

/// "", "base", "new" or "both": the sides whose host evidence says judged_on "none" (the case and
/// its whole run under kMinJudgedWindow). A side without a host object (an older build) is not
/// counted: it recorded nothing, which compare cannot tell from a judged quiet host.
std::string unjudged_sides(const json& b, const json& n) {
  auto none = [](const json& c) {
    return c.contains("host") && c["host"].contains("judged_on") && c["host"]["judged_on"] == "none";
  };
  const bool nb = none(b), nn = none(n);
  return nb && nn ? "both" : nb ? "base" : nn ? "new" : "";
}

/// The short verdict cell of table/md/csv ("undecided (busy host)", "same (busy host, ABBA)",
/// "same (base 4/5 rounds; host not judged)").
std::string short_verdict(const CompareRow& row) {
  if (row.presence != "both") return row.presence;
  if (!row.busy.empty()) return "undecided (busy host)";
  if (!row.unconfirmed.empty()) return "unconfirmed (process shift)";
  std::vector<std::string> marks;
  if (!row.balanced.empty()) marks.push_back("busy host, ABBA");
  if (!row.judged_rounds.empty()) marks.push_back(row.judged_rounds);
  if (!row.unjudged.empty()) marks.push_back("host not judged");
  std::string v = stats::verdict_name(row.cmp.verdict);
  for (size_t i = 0; i < marks.size(); ++i) v += (i ? "; " : " (") + marks[i];
  return marks.empty() ? v : v + ")";
}

/// Each distinct host reason once, with the cases it applies to ("undecided (busy host):
/// <reason>" then "cases: a, b"; "busy rounds left out: <note>"); `bullet` starts each entry
/// ("  " or "- ").
std::string reason_list(const CompareReport& r, const std::string& bullet) {
  std::vector<std::pair<std::string, std::vector<std::string>>> groups;  // label: reason -> ids
  auto add = [&](const std::string& key, const std::string& id) {
    auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& p) { return p.first == key; });
    if (g == groups.end()) g = groups.insert(groups.end(), {key, {}});
    g->second.push_back(id);
  };
  for (const auto& row : r.rows) {
    if (row.presence != "both") continue;
    if (!row.busy.empty()) add("undecided (busy host): " + row.busy, row.id);
    else if (!row.unconfirmed.empty()) add("unconfirmed (process shift): " + row.unconfirmed, row.id);
    else if (!row.balanced.empty()) add("judged despite a busy host: " + row.balanced, row.id);
    if (!row.left_out.empty()) add("busy rounds left out: " + row.left_out, row.id);
  }
  std::string out;
  for (const auto& [key, ids] : groups) {
    // Reasons and ids come from artifact files: control bytes shown as \xHH.
    out += bullet + printable(key) + "\n" + std::string(bullet.size() + 2, ' ') + "cases: ";
    for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + printable(ids[i]);
    out += "\n";
  }
  return out;
}

}  // namespace

bool change_contradicts_medians(double change, double medians_ratio, double threshold) {
  if (!(change > 0) || !(medians_ratio > 0) || !std::isfinite(change) || !std::isfinite(medians_ratio)) return false;
  auto band = [&](double x) { return x < 1 - threshold ? -1 : x > 1 + threshold ? 1 : 0; };
  const double apart = std::max(change / medians_ratio, medians_ratio / change);
  return band(change) != band(medians_ratio) && apart > 1 + std::max(threshold, 0.01);
}

double parse_threshold(const std::string& s, const char* flag) {
  std::string t;
  for (char ch : s)
    if (!std::isspace(static_cast<unsigned char>(ch))) t += ch;
  bool percent = !t.empty() && t.back() == '%';
  if (percent) t.pop_back();
  double v = 0;
  try {
    size_t pos = 0;
    v = std::stod(t, &pos);
    if (pos != t.size()) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    throw_usage("bad value '" + s + "'", flag, "write e.g. 5% or 0.05");
  }
  if (percent) v /= 100;
  if (!(v >= 0 && v < 1)) throw_usage("'" + s + "' is outside [0%, 100%)", flag, "write e.g. 5% or 0.05");
  return v;
}

namespace {

/// A case's round series on one side (stats::RoundSeries) from round_medians_s and round_ids;
/// false when the artifact has no round ids (written before they existed).
bool round_series(const json& c, stats::RoundSeries& s) {
  if (!c.contains("round_medians_s") || !c.contains("round_ids")) return false;
  s.median = c["round_medians_s"].get<std::vector<double>>();
  s.round = c["round_ids"].get<std::vector<uint64_t>>();
  return s.median.size() == s.round.size();
}

/// The process-speed correction of two separate multi-round runs (stats::normalize_process_speed):
/// each row judged on round medians, host quiet, with round ids on both sides, is judged again on
/// its normalised round medians (basis "rounds/process"), and the whole-process shift between the
/// runs goes to rep.process_shift (reported, never counted: it is as much the machine's as the
/// code's). Needs kMinNormalizeCases such rows; fewer leave the raw round verdicts as they were.
void normalize_process(CompareReport& rep, const json& base, const json& fresh, const stats::CompareOptions& o) {
  std::map<std::string, const json*> bs, ns;
  for (const auto& c : base["cases"]) bs[c["id"].get<std::string>()] = &c;
  for (const auto& c : fresh["cases"]) ns[c["id"].get<std::string>()] = &c;
  std::vector<CompareRow*> rows;
  std::vector<stats::RoundSeries> sb, sn;
  for (auto& row : rep.rows) {
    if (row.presence != "both" || !row.busy.empty() || row.basis != "rounds") continue;
    stats::RoundSeries b, n;
    if (!round_series(*bs.at(row.id), b) || !round_series(*ns.at(row.id), n)) continue;
    rows.push_back(&row);
    sb.push_back(std::move(b));
    sn.push_back(std::move(n));
  }
  if (rows.size() < kMinNormalizeCases) return;
  const stats::ProcessNormalized pn = stats::normalize_process_speed(sb, sn);
  stats::CompareOptions ro = o;
  ro.min_samples = std::min(o.min_samples, kMinRoundsForBasis);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (pn.base[i].median.size() < kMinRoundsForBasis || pn.fresh[i].median.size() < kMinRoundsForBasis) continue;
    CompareRow& row = *rows[i];
    row.raw = row.cmp;
    row.basis = "rounds/process";
    row.cmp = stats::compare_samples(pn.base[i].median, pn.fresh[i].median, ro);
    // The medians shown stay raw; the change is corrected: compare it with the corrected medians.
    row.medians_ratio = stats::median(pn.fresh[i].median) / stats::median(pn.base[i].median);
    row.change_disagrees = change_contradicts_medians(row.cmp.ratio, row.medians_ratio, o.threshold);
  }
  rep.process_shift = stats::compare_samples(pn.base_factor, pn.fresh_factor, ro);
  rep.process_shift_cases = rows.size();
  // The machine changed between the runs: on the 2-vCPU VM, idle, whole runs (five processes,
  // seconds) came out 1.2-1.6x slower or faster than the run before, each case by its own
  // amount (OpenBLAS 127x96x80 2.2x, gelu 1.0x), so no per-case correction can undo it; every
  // A/A false alarm of 100 pairs had such a shift. Two separate runs cannot tell that state
  // from the code: their verdicts are unconfirmed; interleaved runs (--baseline-exe) can.
  const stats::Comparison& p = *rep.process_shift;
  if (p.ratio > 1 + o.threshold || p.ratio < 1 - o.threshold || p.verdict == stats::Verdict::Slower ||
      p.verdict == stats::Verdict::Faster) {
    rep.machine_shift = true;
    const std::string why = "the whole process ran at another speed between the runs (" + std::string(stats::kTimeRatioLabel) +
                            " " + stats::format_change(p) + " over " + std::to_string(rows.size()) +
                            " cases): the machine's state changed, which two separate runs cannot tell from the code";
    for (CompareRow* row : rows) {
      if (row->cmp.verdict != stats::Verdict::Slower && row->cmp.verdict != stats::Verdict::Faster) continue;
      row->unconfirmed = why;
      ++rep.unconfirmed;
    }
  }
}

/// Every slower/faster verdict resting on one process per side (basis "samples") becomes
/// unconfirmed: one process cannot separate a process-wide speed change (core placement,
/// clock, neighbours: +14..+29% on an idle 2-vCPU VM) from the code. The reason names the
/// common mode when most cases moved together (stats::common_mode_shift).
void mark_single_process(CompareReport& rep) {
  std::vector<CompareRow*> single;
  std::vector<stats::Comparison> cs;
  for (auto& row : rep.rows)
    if (row.presence == "both" && row.busy.empty() && row.basis == "samples") {
      single.push_back(&row);
      cs.push_back(row.cmp);
    }
  rep.common_mode = stats::common_mode_shift(cs);
  const auto& m = rep.common_mode;
  const std::string why =
      m.detected ? std::to_string(m.shifted) + " of " + std::to_string(m.of) + " cases judged on one process per side moved " +
                       stats::verdict_name(m.direction) + " together (median " + stats::kTimeRatioLabel + " " +
                       stats::format_time_ratio(m.median_ratio) +
                       "): the whole process ran at another speed, which one process per side cannot separate from the code"
                 : std::string("judged on one process per side: a process-wide speed change (core placement, clock, "
                               "neighbours) cannot be told from the code");
  for (CompareRow* row : single) {
    if (row->cmp.verdict != stats::Verdict::Slower && row->cmp.verdict != stats::Verdict::Faster) continue;
    row->unconfirmed = why;
    ++rep.unconfirmed;
  }
}

}  // namespace

CompareReport compare_artifacts(const json& base, const json& fresh, const stats::CompareOptions& o,
                                const std::string& base_source, const std::string& new_source) {
  CompareReport rep;
  rep.base_source = base_source;
  rep.new_source = new_source;
  rep.threshold = o.threshold;
  std::map<std::string, const json*> in_new;
  for (const auto& c : fresh["cases"]) in_new[c["id"].get<std::string>()] = &c;
  std::map<std::string, bool> seen;
  const bool abba = same_abba_pair(base, fresh);
  for (const auto& b : base["cases"]) {
    const std::string id = b["id"].get<std::string>();
    seen[id] = true;
    CompareRow row;
    row.id = id;
    auto it = in_new.find(id);
    if (it == in_new.end()) {
      row.presence = "base only";
      ++rep.unmatched;
      rep.rows.push_back(row);
      continue;
    }
    const json& n = *it->second;
    const std::string bs = b["status"].get<std::string>(), ns = n["status"].get<std::string>();
    if (bs != "ok" || ns != "ok") {
      row.presence = "not judged";
      row.note = "base " + bs + ", new " + ns;
      ++rep.unmatched;
      rep.rows.push_back(row);
      continue;
    }
    row.presence = "both";
    if (abba) check_paired_rounds(b, n, id, base_source.empty() ? "base" : base_source, new_source.empty() ? "new" : new_source);
    row.base_median = median_of(b);
    row.new_median = median_of(n);
    // Rounds in fresh processes carry the between-process variance that one process's
    // samples lack (asv's approach): judge on the round medians when both sides have enough.
    const size_t rb = b.contains("round_medians_s") ? b["round_medians_s"].size() : 0;
    const size_t rn = n.contains("round_medians_s") ? n["round_medians_s"].size() : 0;
    if (rb >= kMinRoundsForBasis && rn >= kMinRoundsForBasis) {
      stats::CompareOptions ro = o;
      ro.min_samples = std::min(o.min_samples, kMinRoundsForBasis);
      row.basis = "rounds";
      const auto mb = b["round_medians_s"].get<std::vector<double>>(), mn = n["round_medians_s"].get<std::vector<double>>();
      // Shown medians follow the basis: the median of the round medians.
      row.base_median = stats::median(mb);
      row.new_median = stats::median(mn);
      row.cmp = stats::compare_samples(mb, mn, ro);
    } else {
      row.cmp = stats::compare_samples(samples_of(b), samples_of(n), o);
    }
    row.medians_ratio = row.base_median > 0 ? row.new_median / row.base_median : 0;
    row.change_disagrees = change_contradicts_medians(row.cmp.ratio, row.medians_ratio, o.threshold);
    row.unjudged = unjudged_sides(b, n);
    rep.unjudged += !row.unjudged.empty();
    // A side merged from its quiet rounds is judged on them (merge_rounds left the busy ones
    // out of its samples and round medians); say which and why.
    row.left_out = left_out_note(b, n);
    row.judged_rounds = left_out_short(b, n);
    // Contention rule: a side measured while other work competed for the CPU says more about
    // the neighbours than about the code, so no verdict (an A/A with one busy side read +9315%).
    row.busy = busy_reason(b, n);
    if (!row.busy.empty() && abba && row.basis == "rounds") {
      // Interleaved ABBA rounds put the same neighbours on both sides, which is what they
      // are for (Kalibera & Jones 2013): the round medians' verdict stands, the busy rounds noted.
      row.balanced = balanced_note(b, n);
      row.busy.clear();
      ++rep.balanced;
    }
    if (!row.busy.empty()) ++rep.undecided;
    else rep.left_out += !row.left_out.empty();
    rep.rows.push_back(row);
  }
  if (!abba) normalize_process(rep, base, fresh, o);
  mark_single_process(rep);
  for (const auto& row : rep.rows) {
    if (row.presence != "both") continue;
    rep.disagreements += row.change_disagrees;
    if (!row.busy.empty() || !row.unconfirmed.empty()) continue;
    switch (row.cmp.verdict) {
      case stats::Verdict::Same: ++rep.same; break;
      case stats::Verdict::Faster: ++rep.faster; break;
      case stats::Verdict::Slower: ++rep.slower; break;
      case stats::Verdict::Ambiguous: ++rep.ambiguous; break;
    }
  }
  for (const auto& c : fresh["cases"]) {
    const std::string id = c["id"].get<std::string>();
    if (seen.count(id)) continue;
    CompareRow row;
    row.id = id;
    row.presence = "new only";
    ++rep.unmatched;
    rep.rows.push_back(row);
  }
  return rep;
}

namespace {

/// "", or the note that `n` cases' host contention was not judged (judged_on "none").
std::string unjudged_note(const CompareReport& r) {
  if (!r.unjudged) return "";
  return "note: " + std::to_string(r.unjudged) + " case(s) ran under " + format_seconds(kMinJudgedWindow) +
         ": host contention not judged (host.judged_on \"none\" on a side, marked \"host not judged\"); a busy host would go "
         "unseen in them";
}

/// "", or why verdicts are unconfirmed (one process per side; a common mode when most cases moved
/// together; the machine's state changed between two runs) and what to run to settle them.
std::string common_mode_note(const CompareReport& r) {
  if (!r.unconfirmed) return "";
  if (r.machine_shift)
    return "note: " + std::to_string(r.unconfirmed) +
           " verdict(s) unconfirmed: the whole process ran at another speed between the two runs, and the cases moved by "
           "different amounts, which two runs made at different times cannot tell from the code. To settle it, measure both "
           "builds interleaved: rtx-bench run PACK --rounds 6 --baseline-exe OLD_RTX_BENCH --baseline-out base.json -o new.json";
  return "note: " + std::to_string(r.unconfirmed) + " verdict(s) unconfirmed: " +
         (r.common_mode.detected ? "most cases moved together, as a whole process at another speed (core placement, clock, "
                                   "neighbours) moves them; "
                                 : "") +
         "one process per side cannot tell a process-wide speed change from the code. To settle it, measure several "
         "processes per side: rtx-bench run PACK -o FILE for each side (5 rounds by default; not --rounds 1), or in one "
         "interleaved run rtx-bench run PACK --rounds 6 --baseline-exe OLD_RTX_BENCH --baseline-out base.json -o new.json";
}

/// "", or the whole-process shift between two separate multi-round runs (rep.process_shift):
/// what it was and that the per-case changes are corrected for it.
std::string process_note(const CompareReport& r) {
  if (!r.process_shift) return "";
  const stats::Comparison& p = *r.process_shift;
  return "process: " + std::string(stats::kTimeRatioLabel) + " " + stats::format_change(p) + " for the whole process between the runs (" +
         std::to_string(r.process_shift_cases) + " cases, " + std::to_string(p.n_base) + " and " + std::to_string(p.n_new) +
         " rounds): the machine's as much as the code's, so not counted; basis rounds/process changes are corrected for it";
}

/// The footnote for rows whose change disagrees with their medians ("" when none): what each
/// statistic is, then one line per case; `md` escapes the marker and bullets the cases.
std::string disagreement_footnote(const CompareReport& r, bool md) {
  if (!r.disagreements) return "";
  const std::string band = "[" + stats::format_time_ratio(1 - r.threshold) + ", " + stats::format_time_ratio(1 + r.threshold) + "]";
  std::string out = std::string(md ? "\\*" : "*") + " change vs medians: for " + std::to_string(r.disagreements) +
                    " case(s) marked " + (md ? "\\*" : "*") + " the change and the ratio of the medians fall on different sides of the " +
                    band + " threshold band. change is the Hodges-Lehmann estimate: the median of all pairwise new/base ratios of the "
                    "round medians (basis rounds) or of the samples (basis samples); base and new are each side's median of "
                    "the same values. They part when those values are spread or bimodal (e.g. some rounds 1000x slower), so "
                    "neither number alone describes the case: look at its round_medians_s / samples_s.\n";
  if (md) out += "\n";
  for (const auto& row : r.rows) {
    if (row.presence != "both" || !row.change_disagrees) continue;
    out += (md ? "- `" + printable(row.id) + "`" : "  " + printable(row.id)) + ": change " + stats::format_time_ratio(row.cmp.ratio) + ", medians " +
           format_seconds(row.base_median) + " -> " + format_seconds(row.new_median) + " (" +
           stats::format_time_ratio(row.medians_ratio) + "), basis " + row.basis + "\n";
  }
  return out;
}

}  // namespace

void write_compare_error(const Error& e, const std::string& format, std::ostream& out) {
  if (format == "json") {
    const nlohmann::json j = {{"error",
                               {{"category", category_name(e.category())},
                                {"message", e.what()},
                                {"where", e.where()},
                                {"hint", e.hint()},
                                {"exit_code", e.exit_code()}}}};
    out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else if (format == "csv") {
    out << "error,category,message,where,hint,exit_code\nerror," << category_name(e.category()) << "," << csv_quote(e.what()) << ","
        << csv_quote(e.where()) << "," << csv_quote(e.hint()) << "," << e.exit_code() << "\n";
  }
}

std::string format_compare(const CompareReport& r, const std::string& format) {
  std::ostringstream os;
  auto cells = [&](const CompareRow& row) -> std::vector<std::string> {
    if (row.presence != "both")
      return {row.id, "-", "-", "-", "-", "-", short_verdict(row) + (row.note.empty() ? "" : " (" + row.note + ")")};
    char p[32];
    std::snprintf(p, sizeof p, "%.3g", row.cmp.p);
    // '*': the change disagrees with the medians (footnote below); a space keeps the others aligned.
    const std::string mark = row.change_disagrees ? "*" : r.disagreements ? " " : "";
    return {row.id,
            format_seconds(row.base_median),
            format_seconds(row.new_median),
            stats::format_change(row.cmp) + mark,
            p,
            row.basis,
            short_verdict(row)};
  };
  // The change in the suite's one notation (stats::format_change): time ratio new/base [95% CI].
  const std::vector<std::string> head{"case", "base", "new", std::string(stats::kTimeRatioLabel) + " [95% CI]", "p", "basis",
                                      "verdict"};
  char counts[320];
  std::snprintf(counts, sizeof counts, "%zu slower, %zu faster, %zu same, %zu ambiguous, %zu not compared (threshold %.1f%%)",
                r.slower, r.faster, r.same, r.ambiguous, r.unmatched, 100 * r.threshold);
  std::string summary = counts;
  if (r.undecided)
    summary += "; " + std::to_string(r.undecided) + " UNDECIDED: measured on a busy host, not judged (rerun them on a quiet machine)";
  if (r.unconfirmed)
    summary += "; " + std::to_string(r.unconfirmed) + " UNCONFIRMED: " +
               (r.machine_shift ? "the machine's speed changed between the runs" : "one process per side") + ", not counted";
  if (r.balanced) summary += "; " + std::to_string(r.balanced) + " judged despite a busy host (interleaved ABBA rounds)";
  if (r.left_out) summary += "; " + std::to_string(r.left_out) + " judged on quiet rounds (busy rounds left out)";
  const std::string process = process_note(r);
  const std::string unjudged = unjudged_note(r);
  const std::string common = common_mode_note(r);
  if (format == "json") {
    nlohmann::json j;
    j["schema"] = "rtx.bench-compare.v1";
    nlohmann::json notes = nlohmann::json::array();
    for (const std::string& x : {common, process, unjudged, disagreement_footnote(r, false)})
      if (!x.empty()) notes.push_back(x.back() == '\n' ? x.substr(0, x.find('\n')) : x);
    if (!notes.empty()) j["notes"] = notes;
    j["base"] = r.base_source;
    j["new"] = r.new_source;
    j["threshold"] = r.threshold;
    j["summary"] = {{"slower", r.slower},       {"faster", r.faster},       {"same", r.same},
                    {"ambiguous", r.ambiguous}, {"unmatched", r.unmatched}, {"undecided", r.undecided},
                    {"balanced", r.balanced},   {"left_out", r.left_out},   {"host_not_judged", r.unjudged},
                    {"change_disagrees", r.disagreements}, {"unconfirmed", r.unconfirmed}};
    j["notation"] = std::string(stats::kTimeRatioLabel) + " [95% CI]";
    j["common_mode"] = {{"detected", r.common_mode.detected},
                        {"shifted", r.common_mode.shifted},
                        {"of", r.common_mode.of},
                        {"median_time_ratio", r.common_mode.median_ratio}};
    if (r.common_mode.detected) j["common_mode"]["direction"] = stats::verdict_name(r.common_mode.direction);
    if (r.process_shift) {
      const stats::Comparison& p = *r.process_shift;
      j["process_shift"] = {{"time_ratio", p.ratio}, {"time_ratio_ci", {p.lo, p.hi}}, {"change", stats::format_change(p)},
                            {"p", p.p}, {"verdict", stats::verdict_name(p.verdict)}, {"cases", r.process_shift_cases},
                            {"rounds_base", p.n_base}, {"rounds_new", p.n_new}, {"counted", false},
                            {"beyond_threshold", r.machine_shift}};
    }
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& row : r.rows) {
      nlohmann::json x = {{"id", row.id}, {"presence", row.presence}};
      if (row.presence == "both") {
        x["verdict"] = stats::verdict_name(row.cmp.verdict);
        x["base_median_s"] = row.base_median;
        x["new_median_s"] = row.new_median;
        x["ratio"] = row.cmp.ratio;
        x["ratio_ci"] = {row.cmp.lo, row.cmp.hi};
        // The suite's notation (stats::format_change); ratio/ratio_ci above are the same numbers.
        x["time_ratio"] = row.cmp.ratio;
        x["time_ratio_ci"] = {row.cmp.lo, row.cmp.hi};
        x["change"] = stats::format_change(row.cmp);
        x["medians_ratio"] = row.medians_ratio;
        x["change_disagrees_with_medians"] = row.change_disagrees;
        x["p"] = row.cmp.p;
        x["n_base"] = row.cmp.n_base;
        x["n_new"] = row.cmp.n_new;
        x["reason"] = row.cmp.reason;
        x["basis"] = row.basis;
        if (row.raw) {
          // Before the process-speed correction (basis rounds/process): the raw round medians' verdict.
          x["raw_time_ratio"] = row.raw->ratio;
          x["raw_time_ratio_ci"] = {row.raw->lo, row.raw->hi};
          x["raw_verdict"] = stats::verdict_name(row.raw->verdict);
        }
        if (!row.busy.empty()) {
          // What the statistics alone would have said stays visible, but is not the verdict.
          x["verdict"] = "undecided";
          x["measured_verdict"] = stats::verdict_name(row.cmp.verdict);
          x["reason"] = row.busy;
          x["measured_reason"] = row.cmp.reason;
        } else if (!row.unconfirmed.empty()) {
          x["verdict"] = "unconfirmed";
          x["measured_verdict"] = stats::verdict_name(row.cmp.verdict);
          x["reason"] = row.unconfirmed;
          x["measured_reason"] = row.cmp.reason;
        }
        if (!row.balanced.empty()) x["host_note"] = row.balanced;
        if (!row.left_out.empty()) x["rounds_note"] = row.left_out;
        if (!row.unjudged.empty()) x["host_not_judged"] = row.unjudged;
      } else if (!row.note.empty()) {
        x["note"] = row.note;
      }
      rows.push_back(x);
    }
    j["cases"] = rows;
    os << j.dump(2) << "\n";
  } else if (format == "csv") {
    // verdict: "undecided" for a busy host, else the statistical verdict; reason: the host
    // notes (ABBA-balanced, rounds left out, not judged), a change that disagrees with the
    // medians, then the busy-host evidence or the statistics' reason; measured_verdict: what
    // the statistics alone said.
    os << "case,base_median_s,new_median_s,ratio,ratio_lo,ratio_hi,p,basis,verdict,reason,measured_verdict\n";
    for (const auto& row : r.rows) {
      os << csv_quote(row.id) << ",";
      if (row.presence == "both") {
        const std::string measured = stats::verdict_name(row.cmp.verdict);
        std::string reason;
        for (const std::string& x : {row.balanced, row.left_out,
                                     row.unjudged.empty() ? std::string() : "host not judged on " + row.unjudged + " (ran under " +
                                                                                format_seconds(kMinJudgedWindow) + ")",
                                     row.change_disagrees ? "change disagrees with the medians (" +
                                                                stats::format_time_ratio(row.medians_ratio) + ")"
                                                          : std::string(),
                                     !row.busy.empty() ? row.busy : !row.unconfirmed.empty() ? row.unconfirmed : row.cmp.reason})
          if (!x.empty()) reason += (reason.empty() ? "" : "; ") + x;
        os << row.base_median << "," << row.new_median << "," << row.cmp.ratio << "," << row.cmp.lo << "," << row.cmp.hi << ","
           << row.cmp.p << "," << row.basis << ","
           << (!row.busy.empty() ? "undecided" : !row.unconfirmed.empty() ? "unconfirmed" : measured) << "," << csv_quote(reason) << ","
           << measured << "\n";
      } else {
        os << ",,,,,,," << csv_quote(row.presence) << "," << csv_quote(row.note) << ",\n";
      }
    }
  } else if (format == "md") {
    os << "| " << head[0];
    for (size_t k = 1; k < head.size(); ++k) os << " | " << head[k];
    os << " |\n|---|---:|---:|---|---:|---|---|\n";
    for (const auto& row : r.rows) {
      auto c = cells(row);
      if (row.presence == "both" && !row.busy.empty()) c.back() = "**undecided** (busy host)";
      else if (row.presence == "both" && row.cmp.verdict == stats::Verdict::Slower) c.back() = "**slower**" + c.back().substr(6);  // markers kept
      if (row.change_disagrees) c[3] = c[3].substr(0, c[3].size() - 1) + "\\*";
      // A code span cannot hold its own delimiter: use `` when the id has a backtick.
      const std::string tick = c[0].find('`') == std::string::npos ? "`" : "`` ";
      const std::string untick = tick == "`" ? "`" : " ``";
      os << "| " << tick << md_cell(c[0]) << untick;
      for (size_t k = 1; k < c.size(); ++k) os << " | " << md_cell(c[k]);
      os << " |\n";
    }
    os << "\n" << summary << "\n";
    if (const std::string reasons = reason_list(r, "- "); !reasons.empty()) os << "\nhost:\n\n" << reasons;
    if (!common.empty()) os << "\n" << common << "\n";
    if (!process.empty()) os << "\n" << process << "\n";
    if (!unjudged.empty()) os << "\n" << unjudged << "\n";
    if (const std::string f = disagreement_footnote(r, true); !f.empty()) os << "\n" << f;
  } else if (format == "table") {
    std::vector<std::vector<std::string>> rows{head};
    for (const auto& row : r.rows) {
      auto c = cells(row);
      for (auto& x : c) x = printable(x);  // ids and notes come from artifact files: no raw controls
      rows.push_back(std::move(c));
    }
    std::vector<size_t> w(head.size(), 0);
    for (const auto& x : rows)
      for (size_t k = 0; k < x.size(); ++k) w[k] = std::max(w[k], x[k].size());
    for (const auto& x : rows) {
      for (size_t k = 0; k < x.size(); ++k) {
        const std::string& s = x[k];
        const bool right = k >= 1 && k <= 4;
        const std::string fill(w[k] - s.size(), ' ');
        os << (right ? fill + s : (k + 1 < x.size() ? s + fill : s)) << (k + 1 < x.size() ? "  " : "");
      }
      os << "\n";
    }
    os << summary << "\n";
    if (const std::string reasons = reason_list(r, "  "); !reasons.empty()) os << "host:\n" << reasons;
    if (!common.empty()) os << common << "\n";
    if (!process.empty()) os << process << "\n";
    if (!unjudged.empty()) os << unjudged << "\n";
    os << disagreement_footnote(r, false);
  } else {
    throw_usage("unknown format '" + format + "'", "--format", "use table, md, csv or json");
  }
  return os.str();
}

}  // namespace rtx::measure
