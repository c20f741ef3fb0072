// treespark_calibration.json, written beside the drafter by `treespark calibrate` and read by generation:
//   {"version": 1, "entries": [{"temperature": T, "a": .., "b": .., "rank_offsets": [o1, o2, o3],
//                               "depth_offsets": [d2, d3, d4], "edges": N, "ece_before": .., "ece_after": ..,
//                               "ece_after_by_depth": [e1, e2, e3, e4], "held_out": {...}}]}
// rank_offsets (sibling ranks 1, 2, >= 3) and depth_offsets (depths 2, 3, >= 4; calibration.h) may be absent (older
// files): then 0. "top_k", "top_p", "min_p": the sampling filter the labels were collected under (a request's
// top-k / top-p / min-p also filter its sampled drafts, which changes both q and how often a draft is accepted);
// absent means unfiltered (0, 1, 0), and at temperature 0 they are ignored (greedy verification filters nothing).
// One entry per draft temperature and filter (0 = greedy). ece_before is the ECE of the uncalibrated p_hat = q on
// the fitting edges, ece_after that of the fit (calibration.h, kEceBins bins), ece_after_by_depth the fit's ECE on
// each depth bucket's fitting edges. "held_out" (optional): the same on edges of prompts the fit never saw:
// {"edges": N, "ece_before": .., "ece_after": .., "edges_by_depth": [..], "ece_before_by_depth": [..],
//  "ece_after_by_depth": [..]}. The statistics are informative only.
// "weights", "drafter_weights" (optional strings): the target's and the drafter's weight formats the labels were
// collected with (as the load logs them, e.g. "bf16", "q4_k_m (projections Q4_K+Q6_K, lm_head Q6_K)", "native"): a
// quantized target changes p and a quantized drafter q, so each pair of formats may have its own entries
// (CalibrationTable::for_weights). Absent: not recorded (files written before formats were), read as fitted on the
// checkpoints' own weights.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "spec_decode/calibration.h"
#include "spec_decode/draft_source.h"

namespace ts::spec_decode {

inline constexpr const char* kCalibrationFileName = "treespark_calibration.json";

// Whether two draft filters are the same for calibration: top-k equal, top-p and min-p within 1e-4.
bool same_filter(const DraftFilter& x, const DraftFilter& y);

struct CalibrationEntry {
  double temperature = 0;
  double a = 1, b = 0;
  double rank_offset[kRankBuckets] = {0, 0, 0, 0};    // JSON "rank_offsets": [offset of rank 1, 2, >= 3]
  double depth_offset[kDepthBuckets] = {0, 0, 0, 0};  // JSON "depth_offsets": [offset of depth 2, 3, >= 4]
  int64_t edges = 0;
  double ece_before = 0, ece_after = 0;
  std::array<double, kDepthBuckets> ece_after_by_depth{};  // on the fitting edges
  struct HeldOut {
    int64_t edges = 0;
    double ece_before = 0, ece_after = 0;
    DepthEce before_by_depth, after_by_depth;  // after_by_depth.edges: the edges per depth bucket
  };
  std::optional<HeldOut> held_out;  // measured by `calibrate --holdout-prompts`
  DraftFilter filter;  // what the labels were collected under (unfiltered, and always so at temperature 0)
  std::string weights, drafter_weights;  // the formats they were collected with; "" = not recorded

  Calibration calibration() const;  // (a, b, rank and depth offsets)
};

// How an entry's recorded weight formats stand to a pair's (CalibrationTable::for_weights prefers them in this order).
enum class WeightsMatch { Same, NotRecorded, Other };
WeightsMatch weights_match(const CalibrationEntry& e, const std::string& weights, const std::string& drafter_weights);
// Whether two entries are for the same temperature, draft filter and weight formats: what upsert replaces.
bool same_key(const CalibrationEntry& x, const CalibrationEntry& y);

// Fits the calibration on records and fills edges and the ECE before/after (over all and per depth bucket).
CalibrationEntry fit_calibration_entry(const std::vector<EdgeRecord>& records, double temperature,
                                       const DraftFilter& filter = {});

// Fills entry->held_out: the ECE of p_hat = q and of the entry's fit on edges the fit never saw.
void measure_held_out(const std::vector<EdgeRecord>& held_out, CalibrationEntry* entry);

struct CalibrationTable {
  std::vector<CalibrationEntry> entries;

  // Among the entries fitted under this filter (any at temperature 0), the one with the nearest temperature (the
  // lower one on ties); when none has this filter, the nearest temperature among all. With no entries: the
  // documented default Calibration{} (a = 1, b = 0, i.e. p_hat = q, the uncalibrated log-q priority).
  // Why the filter counts: an entry fitted under a top-k / top-p filter predicts far fewer draft tokens than unfiltered
  // rounds at that temperature accept, so the cost-priced trees stay too small and run slower than the chain
  // (docs/results/optimization-notes.md, "Calibration lookup: the draft filter counts").
  Calibration lookup(double temperature, const DraftFilter& filter = {}) const;
  const CalibrationEntry* find(double temperature, const DraftFilter& filter = {}) const;  // lookup's entry
  // Replaces the entry with exactly this temperature, filter and weight formats, or adds it; entries stay sorted by
  // temperature.
  void upsert(const CalibrationEntry& entry);
  // The entries a pair of these weight formats uses, one per temperature and filter: the entry fitted with exactly
  // these formats where there is one, else one whose formats were not recorded (fitted on the checkpoints' own
  // weights), else one fitted with other formats (a quantized target's acceptance moves little, so that is still
  // nearer than no calibration). What ModelBundle hands generation, so every lookup carries the formats.
  CalibrationTable for_weights(const std::string& weights, const std::string& drafter_weights) const;
};

std::string calibration_table_to_json(const CalibrationTable& table);
// Throws ts::Error (with what was expected) on malformed JSON, a version other than 1, or missing fields.
CalibrationTable calibration_table_from_json(const std::string& text);
// A missing file gives an empty table (generation then uses the defaults); a malformed one throws.
CalibrationTable read_calibration_table(const std::string& path);
void write_calibration_table(const std::string& path, const CalibrationTable& table);

}  // namespace ts::spec_decode
