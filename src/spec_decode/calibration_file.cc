#include "spec_decode/calibration_file.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace ts::spec_decode {

namespace {

// The filter as it matters for matching: none at temperature 0.
DraftFilter effective(double temperature, const DraftFilter& filter) {
  return temperature > 0 ? filter : DraftFilter{};
}

// JSON keeps the filter's values as written (0.9, not 0.8999999761581421 from the float).
double shortest(float v) { return std::round(double(v) * 1e6) / 1e6; }

}  // namespace

bool same_filter(const DraftFilter& x, const DraftFilter& y) {
  return x.top_k == y.top_k && std::abs(x.top_p - y.top_p) < 1e-4f && std::abs(x.min_p - y.min_p) < 1e-4f;
}

CalibrationEntry fit_calibration_entry(const std::vector<EdgeRecord>& records, double temperature,
                                       const DraftFilter& filter) {
  const Calibration fitted = fit_calibration(records);
  CalibrationEntry e;
  e.temperature = temperature;
  e.filter = effective(temperature, filter);
  e.a = fitted.a;
  e.b = fitted.b;
  for (int k = 0; k < kRankBuckets; ++k) e.rank_offset[k] = fitted.rank_offset[k];
  for (int k = 0; k < kDepthBuckets; ++k) e.depth_offset[k] = fitted.depth_offset[k];
  e.edges = static_cast<int64_t>(records.size());
  e.ece_before = expected_calibration_error(records, Calibration{});
  e.ece_after = expected_calibration_error(records, fitted);
  e.ece_after_by_depth = expected_calibration_error_by_depth(records, fitted).ece;
  return e;
}

Calibration CalibrationEntry::calibration() const {
  Calibration c;
  c.a = a;
  c.b = b;
  for (int k = 0; k < kRankBuckets; ++k) c.rank_offset[k] = rank_offset[k];
  for (int k = 0; k < kDepthBuckets; ++k) c.depth_offset[k] = depth_offset[k];
  return c;
}

void measure_held_out(const std::vector<EdgeRecord>& held_out, CalibrationEntry* entry) {
  const Calibration fitted = entry->calibration();
  CalibrationEntry::HeldOut h;
  h.edges = static_cast<int64_t>(held_out.size());
  h.ece_before = expected_calibration_error(held_out, Calibration{});
  h.ece_after = expected_calibration_error(held_out, fitted);
  h.before_by_depth = expected_calibration_error_by_depth(held_out, Calibration{});
  h.after_by_depth = expected_calibration_error_by_depth(held_out, fitted);
  entry->held_out = h;
}

const CalibrationEntry* CalibrationTable::find(double temperature, const DraftFilter& filter) const {
  const DraftFilter wanted = effective(temperature, filter);
  const auto closer = [&](const CalibrationEntry& e, const CalibrationEntry* than) {
    return !than || std::abs(e.temperature - temperature) < std::abs(than->temperature - temperature);
  };
  const CalibrationEntry* same = nullptr;  // nearest temperature among the entries fitted under this filter
  const CalibrationEntry* any = nullptr;   // nearest temperature among all
  for (const CalibrationEntry& e : entries) {  // sorted by temperature, so '<' keeps the lower one on ties
    if (same_filter(e.filter, wanted) && closer(e, same)) same = &e;
    if (closer(e, any)) any = &e;
  }
  return same ? same : any;
}

Calibration CalibrationTable::lookup(double temperature, const DraftFilter& filter) const {
  const CalibrationEntry* best = find(temperature, filter);
  return best ? best->calibration() : Calibration{};
}

WeightsMatch weights_match(const CalibrationEntry& e, const std::string& weights, const std::string& drafter_weights) {
  if (e.weights == weights && e.drafter_weights == drafter_weights) return WeightsMatch::Same;
  return e.weights.empty() && e.drafter_weights.empty() ? WeightsMatch::NotRecorded : WeightsMatch::Other;
}

bool same_key(const CalibrationEntry& x, const CalibrationEntry& y) {
  return x.temperature == y.temperature && same_filter(x.filter, y.filter) &&
         weights_match(x, y.weights, y.drafter_weights) == WeightsMatch::Same;
}

void CalibrationTable::upsert(const CalibrationEntry& entry) {
  for (CalibrationEntry& e : entries) {
    if (same_key(e, entry)) {
      e = entry;
      return;
    }
  }
  entries.push_back(entry);
  std::sort(entries.begin(), entries.end(),
            [](const CalibrationEntry& x, const CalibrationEntry& y) { return x.temperature < y.temperature; });
}

CalibrationTable CalibrationTable::for_weights(const std::string& weights, const std::string& drafter_weights) const {
  const auto rank = [&](const CalibrationEntry& e) { return int(weights_match(e, weights, drafter_weights)); };
  CalibrationTable out;
  for (const CalibrationEntry& e : entries) {
    CalibrationEntry* kept = nullptr;  // the entry already chosen at e's temperature and filter
    for (CalibrationEntry& k : out.entries)
      if (k.temperature == e.temperature && same_filter(k.filter, e.filter)) kept = &k;
    if (!kept) {
      out.entries.push_back(e);
    } else if (rank(e) < rank(*kept)) {
      *kept = e;
    }
  }
  return out;  // still sorted by temperature: entries was, and replacements keep their places
}

std::string calibration_table_to_json(const CalibrationTable& table) {
  nlohmann::json entries = nlohmann::json::array();
  for (const CalibrationEntry& e : table.entries) {
    nlohmann::json j = {{"temperature", e.temperature},
                        {"top_k", e.filter.top_k},
                        {"top_p", shortest(e.filter.top_p)},
                        {"min_p", shortest(e.filter.min_p)},
                        {"a", e.a},
                        {"b", e.b},
                        {"rank_offsets", std::vector<double>(e.rank_offset + 1, e.rank_offset + kRankBuckets)},
                        {"depth_offsets", std::vector<double>(e.depth_offset + 1, e.depth_offset + kDepthBuckets)},
                        {"edges", e.edges},
                        {"ece_before", e.ece_before},
                        {"ece_after", e.ece_after},
                        {"ece_after_by_depth", e.ece_after_by_depth}};
    if (!e.weights.empty()) j["weights"] = e.weights;
    if (!e.drafter_weights.empty()) j["drafter_weights"] = e.drafter_weights;
    if (e.held_out) {
      const CalibrationEntry::HeldOut& h = *e.held_out;
      j["held_out"] = {{"edges", h.edges},
                       {"ece_before", h.ece_before},
                       {"ece_after", h.ece_after},
                       {"edges_by_depth", h.after_by_depth.edges},
                       {"ece_before_by_depth", h.before_by_depth.ece},
                       {"ece_after_by_depth", h.after_by_depth.ece}};
    }
    entries.push_back(std::move(j));
  }
  return nlohmann::json{{"version", 1}, {"entries", entries}}.dump(2) + "\n";
}

namespace {

double number_field(const nlohmann::json& entry, const char* name, size_t index) {
  TS_CHECK(entry.contains(name) && entry[name].is_number(), "calibration: entries[", index, "] needs a number '", name,
           "', got ", entry.contains(name) ? entry[name].dump() : std::string("nothing"));
  const double v = entry[name].get<double>();
  TS_CHECK(std::isfinite(v), "calibration: entries[", index, "].", name, " must be finite, got ", v);
  return v;
}

// An optional string named name into *out (at most 1024 bytes); absent leaves *out as it is.
void optional_string(const nlohmann::json& entry, const char* name, size_t index, std::string* out) {
  if (!entry.contains(name)) return;
  const nlohmann::json& s = entry[name];
  TS_CHECK(s.is_string() && s.get<std::string>().size() <= 1024, "calibration: entries[", index, "].", name,
           " must be a string of at most 1024 bytes, got ", s.is_string() ? "a longer one" : s.dump());
  *out = s.get<std::string>();
}

// An optional array of n finite numbers named name into out[0 .. n); absent leaves out as it is.
template <typename T>
void optional_numbers(const nlohmann::json& entry, const char* name, size_t index, size_t n, T* out) {
  if (!entry.contains(name)) return;
  const nlohmann::json& o = entry[name];
  TS_CHECK(o.is_array() && o.size() == n, "calibration: entries[", index, "].", name, " must be an array of ", n,
           " numbers, got ", o.dump());
  for (size_t k = 0; k < n; ++k) {
    TS_CHECK(o[k].is_number() && std::isfinite(o[k].get<double>()), "calibration: entries[", index, "].", name, "[",
             k, "] must be a finite number");
    out[k] = o[k].get<T>();
  }
}

}  // namespace

CalibrationTable calibration_table_from_json(const std::string& text) {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    TS_FAIL("calibration: expected JSON, parse error: ", e.what());
  }
  TS_CHECK(root.is_object(), "calibration: expected a JSON object at the top, got ", root.type_name());
  TS_CHECK(root.contains("version") && root["version"] == 1, "calibration: expected \"version\": 1, got ",
           root.contains("version") ? root["version"].dump() : std::string("no version"));
  TS_CHECK(root.contains("entries") && root["entries"].is_array(), "calibration: expected an \"entries\" array");
  CalibrationTable table;
  const nlohmann::json& entries = root["entries"];
  for (size_t i = 0; i < entries.size(); ++i) {
    const nlohmann::json& j = entries[i];
    TS_CHECK(j.is_object(), "calibration: entries[", i, "] must be an object, got ", j.type_name());
    CalibrationEntry e;
    e.temperature = number_field(j, "temperature", i);
    e.a = number_field(j, "a", i);
    e.b = number_field(j, "b", i);
    optional_numbers(j, "rank_offsets", i, kRankBuckets - 1, e.rank_offset + 1);
    optional_numbers(j, "depth_offsets", i, kDepthBuckets - 1, e.depth_offset + 1);
    TS_CHECK(e.temperature >= 0, "calibration: entries[", i, "].temperature must be >= 0, got ", e.temperature);
    if (j.contains("top_k")) {
      const double k = number_field(j, "top_k", i);
      TS_CHECK(k >= 0 && k == std::floor(k) && k < 1e9, "calibration: entries[", i,
               "].top_k must be a whole number >= 0, got ", k);
      e.filter.top_k = int(k);
    }
    if (j.contains("top_p")) e.filter.top_p = float(number_field(j, "top_p", i));
    if (j.contains("min_p")) e.filter.min_p = float(number_field(j, "min_p", i));
    TS_CHECK(e.filter.top_p > 0 && e.filter.top_p <= 1, "calibration: entries[", i, "].top_p must be in (0, 1], got ",
             e.filter.top_p);
    TS_CHECK(e.filter.min_p >= 0 && e.filter.min_p <= 1, "calibration: entries[", i,
             "].min_p must be in [0, 1], got ", e.filter.min_p);
    e.filter = effective(e.temperature, e.filter);
    optional_string(j, "weights", i, &e.weights);
    optional_string(j, "drafter_weights", i, &e.drafter_weights);
    TS_CHECK(e.a > 0, "calibration: entries[", i, "].a must be > 0 (p_hat increasing in q), got ", e.a);
    // Statistics are informative only: absent means unknown (0).
    if (j.contains("edges")) e.edges = static_cast<int64_t>(number_field(j, "edges", i));
    if (j.contains("ece_before")) e.ece_before = number_field(j, "ece_before", i);
    if (j.contains("ece_after")) e.ece_after = number_field(j, "ece_after", i);
    optional_numbers(j, "ece_after_by_depth", i, kDepthBuckets, e.ece_after_by_depth.data());
    if (j.contains("held_out")) {
      const nlohmann::json& h = j["held_out"];
      TS_CHECK(h.is_object(), "calibration: entries[", i, "].held_out must be an object, got ", h.type_name());
      CalibrationEntry::HeldOut held;
      if (h.contains("edges")) held.edges = static_cast<int64_t>(number_field(h, "edges", i));
      if (h.contains("ece_before")) held.ece_before = number_field(h, "ece_before", i);
      if (h.contains("ece_after")) held.ece_after = number_field(h, "ece_after", i);
      optional_numbers(h, "edges_by_depth", i, kDepthBuckets, held.after_by_depth.edges.data());
      held.before_by_depth.edges = held.after_by_depth.edges;
      optional_numbers(h, "ece_before_by_depth", i, kDepthBuckets, held.before_by_depth.ece.data());
      optional_numbers(h, "ece_after_by_depth", i, kDepthBuckets, held.after_by_depth.ece.data());
      e.held_out = held;
    }
    table.upsert(e);
  }
  return table;
}

CalibrationTable read_calibration_table(const std::string& path) {
  std::ifstream in(path);
  if (!in) return CalibrationTable{};
  std::stringstream buffer;
  buffer << in.rdbuf();
  try {
    return calibration_table_from_json(buffer.str());
  } catch (const Error& e) {
    TS_FAIL(path, ": ", e.what());
  }
}

void write_calibration_table(const std::string& path, const CalibrationTable& table) {
  std::ofstream out(path, std::ios::trunc);
  TS_CHECK(out.good(), "calibration: cannot open ", path, " for writing");
  out << calibration_table_to_json(table);
  TS_CHECK(out.good(), "calibration: failed writing ", path);
}

}  // namespace ts::spec_decode
