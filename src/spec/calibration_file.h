// treespark_calibration.json, written beside the drafter by `treespark calibrate` and read by generation:
//   {"version": 1, "entries": [{"temperature": T, "a": .., "b": .., "rank_offsets": [o1, o2, o3], "edges": N,
//                               "ece_before": .., "ece_after": ..}]}
// rank_offsets (calibration.h) may be absent (older files): then 0.
// One entry per draft temperature (0 = greedy). ece_before is the ECE of the uncalibrated p_hat = q on the fitting
// edges, ece_after that of the fitted (a, b) (calibration.h, kEceBins bins).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "spec/calibration.h"

namespace ts::spec {

inline constexpr const char* kCalibrationFileName = "treespark_calibration.json";

struct CalibrationEntry {
  double temperature = 0;
  double a = 1, b = 0;
  double rank_offset[kRankBuckets] = {0, 0, 0, 0};  // JSON "rank_offsets": [offset of rank 1, 2, >= 3]
  int64_t edges = 0;
  double ece_before = 0, ece_after = 0;
};

// Fits (a, b) on records and fills edges and the ECE before/after.
CalibrationEntry fit_calibration_entry(const std::vector<EdgeRecord>& records, double temperature);

struct CalibrationTable {
  std::vector<CalibrationEntry> entries;

  // The entry with the nearest temperature (the lower one on ties). With no entries: the documented default
  // Calibration{} (a = 1, b = 0, i.e. p_hat = q, the uncalibrated log-q priority).
  Calibration lookup(double temperature) const;
  // Replaces the entry with exactly this temperature, or adds it; entries stay sorted by temperature.
  void upsert(const CalibrationEntry& entry);
};

std::string calibration_table_to_json(const CalibrationTable& table);
// Throws ts::Error (with what was expected) on malformed JSON, a version other than 1, or missing fields.
CalibrationTable calibration_table_from_json(const std::string& text);
// A missing file gives an empty table (generation then uses the defaults); a malformed one throws.
CalibrationTable read_calibration_table(const std::string& path);
void write_calibration_table(const std::string& path, const CalibrationTable& table);

}  // namespace ts::spec
