// treespark_calibration.json, written beside the drafter by `treespark calibrate` and read by generation:
//   {"version": 1, "entries": [{"temperature": T, "a": .., "b": .., "rank_offsets": [o1, o2, o3], "edges": N,
//                               "ece_before": .., "ece_after": ..}]}
// rank_offsets (calibration.h) may be absent (older files): then 0. "top_k", "top_p", "min_p": the sampling filter
// the labels were collected under (a request's top-k / top-p / min-p also filter its sampled drafts, which changes
// both q and how often a draft is accepted); absent means unfiltered (0, 1, 0), and at temperature 0 they are
// ignored (greedy verification filters nothing).
// One entry per draft temperature and filter (0 = greedy). ece_before is the ECE of the uncalibrated p_hat = q on the fitting
// edges, ece_after that of the fitted (a, b) (calibration.h, kEceBins bins).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "spec/calibration.h"
#include "spec/draft_source.h"

namespace ts::spec {

inline constexpr const char* kCalibrationFileName = "treespark_calibration.json";

// Whether two draft filters are the same for calibration: top-k equal, top-p and min-p within 1e-4.
bool same_filter(const DraftFilter& x, const DraftFilter& y);

struct CalibrationEntry {
  double temperature = 0;
  double a = 1, b = 0;
  double rank_offset[kRankBuckets] = {0, 0, 0, 0};  // JSON "rank_offsets": [offset of rank 1, 2, >= 3]
  int64_t edges = 0;
  double ece_before = 0, ece_after = 0;
  DraftFilter filter;  // what the labels were collected under (unfiltered, and always so at temperature 0)
};

// Fits (a, b) on records and fills edges and the ECE before/after.
CalibrationEntry fit_calibration_entry(const std::vector<EdgeRecord>& records, double temperature,
                                       const DraftFilter& filter = {});

struct CalibrationTable {
  std::vector<CalibrationEntry> entries;

  // Among the entries fitted under this filter (any at temperature 0), the one with the nearest temperature (the
  // lower one on ties); when none has this filter, the nearest temperature among all. With no entries: the
  // documented default Calibration{} (a = 1, b = 0, i.e. p_hat = q, the uncalibrated log-q priority).
  // Why the filter counts: on the shipped pair an entry fitted at T = 1 with top-k 20, top-p 0.9 predicted half
  // the draft tokens that unfiltered T = 1 rounds then accepted (0.68 against 1.33 per round for a 3-node chain),
  // so the cost-priced trees stayed at ~2 nodes and ran 0.88-0.92x the chain.
  Calibration lookup(double temperature, const DraftFilter& filter = {}) const;
  const CalibrationEntry* find(double temperature, const DraftFilter& filter = {}) const;  // lookup's entry
  // Replaces the entry with exactly this temperature and filter, or adds it; entries stay sorted by temperature.
  void upsert(const CalibrationEntry& entry);
};

std::string calibration_table_to_json(const CalibrationTable& table);
// Throws ts::Error (with what was expected) on malformed JSON, a version other than 1, or missing fields.
CalibrationTable calibration_table_from_json(const std::string& text);
// A missing file gives an empty table (generation then uses the defaults); a malformed one throws.
CalibrationTable read_calibration_table(const std::string& path);
void write_calibration_table(const std::string& path, const CalibrationTable& table);

}  // namespace ts::spec
