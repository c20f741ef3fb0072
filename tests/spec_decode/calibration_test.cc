// Calibration: logistic fit recovers known (a, b); ECE; degenerate data; the JSON file and lookup.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "core/error.h"
#include "sampling/chooser.h"
#include "spec_decode/calibration.h"
#include "spec_decode/calibration_file.h"

namespace ts::spec_decode {
namespace {

// Edges with q spread over (0, 1) and labels drawn from sigmoid(a * logit(q) + b).
std::vector<EdgeRecord> synthetic_records(double a, double b, int n, uint64_t seed) {
  RandomChooser rng(seed);
  std::vector<EdgeRecord> records;
  for (int i = 0; i < n; ++i) {
    const double q = 0.001 + 0.998 * rng.uniform();
    const double p = 1 / (1 + std::exp(-(a * clamped_logit(q) + b)));
    records.push_back(EdgeRecord{clamped_logit(q), static_cast<uint8_t>(rng.uniform() < p), 1, 0});
  }
  return records;
}

TEST(Calibration, DefaultsAreTheIdentity) {
  const Calibration c;
  for (double q : {1e-6, 0.1, 0.5, 0.9, 0.999}) {
    EXPECT_NEAR(c.p_hat(q), q, 1e-12);
    EXPECT_NEAR(c.log_p_hat(q), std::log(q), 1e-9);
  }
  EXPECT_EQ(fit_calibration({}).a, 1);
  EXPECT_EQ(fit_calibration({}).b, 0);
  EXPECT_TRUE(std::isfinite(Calibration{2, 1}.log_p_hat(0)));  // q clamped before the logit
}

TEST(Calibration, FitRecoversKnownParameters) {
  for (auto [a, b] : {std::pair{1.7, -0.4}, {0.6, 0.8}, {1.0, 0.0}}) {
    const std::vector<EdgeRecord> records = synthetic_records(a, b, 40000, 17);
    const Calibration fit = fit_calibration(records);
    EXPECT_NEAR(fit.a, a, 0.05) << a << " " << b;
    EXPECT_NEAR(fit.b, b, 0.05) << a << " " << b;
    const double after = expected_calibration_error(records, fit);
    EXPECT_LT(after, 0.015);
    if (a != 1.0) {
      EXPECT_GT(expected_calibration_error(records, Calibration{}), 2 * after);
    }
  }
}

TEST(Calibration, FitRecoversSiblingRankOffsets) {
  // Labels drawn from sigmoid(a logit(q) + b + offset[rank]) with ranks 0..4 (4 shares bucket 3).
  const double a = 1.3, b = 0.2, offsets[kRankBuckets] = {0, -1.0, -2.0, 0.5};
  std::vector<EdgeRecord> records;
  RandomChooser rng(29);
  for (int i = 0; i < 60000; ++i) {
    EdgeRecord r;
    r.logit_q = 4 * rng.uniform() - 3;
    r.sibling_rank = i % 5;
    const double p = 1 / (1 + std::exp(-(a * r.logit_q + b + offsets[rank_bucket(r.sibling_rank)])));
    r.accepted = rng.uniform() < p;
    records.push_back(r);
  }
  const Calibration fit = fit_calibration(records);
  EXPECT_NEAR(fit.a, a, 0.06);
  EXPECT_NEAR(fit.b, b, 0.08);
  for (int k = 1; k < kRankBuckets; ++k) EXPECT_NEAR(fit.rank_offset[k], offsets[k], 0.1) << k;
  EXPECT_EQ(fit.rank_offset[0], 0);
  // With the rank the fit is well calibrated.
  EXPECT_LT(expected_calibration_error(records, fit), 0.015);
  // The file keeps the offsets.
  CalibrationTable table;
  table.upsert(fit_calibration_entry(records, 1.0));
  const Calibration back = calibration_table_from_json(calibration_table_to_json(table)).lookup(1.0);
  for (int k = 0; k < kRankBuckets; ++k) EXPECT_DOUBLE_EQ(back.rank_offset[k], fit.rank_offset[k]);
}

TEST(Calibration, FitRecoversDepthOffsets) {
  // Labels drawn from sigmoid(a logit(q) + b + rank offset + depth offset), depths 1..6 (4..6 share bucket 3), the
  // deep ones as rare as in a real round (fewer than 1 in 10 past depth 3).
  const double a = 0.9, b = 0.7, rank_offsets[kRankBuckets] = {0, -1.5, -2.5, -3.0};
  const double depth_offsets[kDepthBuckets] = {0, -0.6, -1.0, 0.4};
  std::vector<EdgeRecord> records;
  RandomChooser rng(31);
  for (int i = 0; i < 80000; ++i) {
    EdgeRecord r;
    r.logit_q = 5 * rng.uniform() - 3;
    r.sibling_rank = i % 4;
    const double u = rng.uniform();
    r.depth = u < 0.45 ? 1 : u < 0.75 ? 2 : u < 0.92 ? 3 : 4 + i % 3;
    const double p = 1 / (1 + std::exp(-(a * r.logit_q + b + rank_offsets[rank_bucket(r.sibling_rank)] +
                                         depth_offsets[depth_bucket(r.depth)])));
    r.accepted = rng.uniform() < p;
    records.push_back(r);
  }
  const Calibration fit = fit_calibration(records);
  EXPECT_NEAR(fit.a, a, 0.05);
  EXPECT_NEAR(fit.b, b, 0.08);
  for (int k = 1; k < kRankBuckets; ++k) EXPECT_NEAR(fit.rank_offset[k], rank_offsets[k], 0.1) << k;
  for (int k = 1; k < kDepthBuckets; ++k) EXPECT_NEAR(fit.depth_offset[k], depth_offsets[k], 0.1) << k;
  EXPECT_EQ(fit.depth_offset[0], 0);
  EXPECT_EQ(depth_bucket(0), 0);  // records without a depth count as depth 1
  EXPECT_EQ(depth_bucket(4), kDepthBuckets - 1);
  EXPECT_EQ(depth_bucket(9), kDepthBuckets - 1);
  // p_hat reads the depth; depth 1 is the default.
  EXPECT_NEAR(fit.p_hat(0.5, 1, 3), 1 / (1 + std::exp(-(fit.b + fit.rank_offset[1] + fit.depth_offset[2]))), 1e-12);
  EXPECT_EQ(fit.p_hat(0.5, 1), fit.p_hat(0.5, 1, 1));
  EXPECT_NEAR(std::exp(fit.log_p_hat(0.3, 2, 5)), fit.p_hat(0.3, 2, 5), 1e-12);
  // Well calibrated at every depth; a fit that ignores depth is not (at depth 3 and >= 4 above all).
  const DepthEce with_depth = expected_calibration_error_by_depth(records, fit);
  std::vector<EdgeRecord> flat = records;
  for (EdgeRecord& r : flat) r.depth = 1;
  const DepthEce without_depth = expected_calibration_error_by_depth(records, fit_calibration(flat));
  for (int k = 0; k < kDepthBuckets; ++k) {
    EXPECT_GT(with_depth.edges[k], 5000) << k;
    EXPECT_LT(with_depth.ece[k], 0.025) << k;
  }
  EXPECT_GT(without_depth.ece[2], 2 * with_depth.ece[2]);
  EXPECT_GT(without_depth.ece[3], 2 * with_depth.ece[3]);
}

TEST(Calibration, EceByHand) {
  // Identity calibration; q = 0.25 (bin 2) labelled 1, 0, 0, 0 -> |0.25 - 0.25| = 0; q = 0.85 (bin 8) labelled 1, 1
  // -> |0.85 - 1| weighted 2/6.
  std::vector<EdgeRecord> records;
  for (int label : {1, 0, 0, 0}) records.push_back(EdgeRecord{clamped_logit(0.25), static_cast<uint8_t>(label)});
  for (int label : {1, 1}) records.push_back(EdgeRecord{clamped_logit(0.85), static_cast<uint8_t>(label)});
  EXPECT_NEAR(expected_calibration_error(records, Calibration{}), 2.0 / 6 * 0.15, 1e-12);
  EXPECT_EQ(expected_calibration_error({}, Calibration{}), 0);
}

TEST(Calibration, OneSidedLabelsStayFiniteAndIncreasing) {
  std::vector<EdgeRecord> ones = synthetic_records(1, 0, 500, 3);
  for (EdgeRecord& r : ones) r.accepted = 1;
  const Calibration up = fit_calibration(ones);
  EXPECT_TRUE(std::isfinite(up.a) && std::isfinite(up.b));
  EXPECT_GE(up.a, 1e-3);
  // Anti-informative labels (accepted iff q small) would give a < 0: clamped to keep p_hat increasing.
  std::vector<EdgeRecord> anti = synthetic_records(-2, 0, 2000, 4);
  EXPECT_GE(fit_calibration(anti).a, 1e-3);
}

CalibrationEntry make_entry(double temperature, double a, double b, int64_t edges = 0, double ece_before = 0,
                            double ece_after = 0, DraftFilter filter = {}) {
  CalibrationEntry e;
  e.temperature = temperature, e.a = a, e.b = b, e.edges = edges, e.ece_before = ece_before, e.ece_after = ece_after;
  e.filter = filter;
  return e;
}

TEST(CalibrationFile, RoundTripLookupAndDefaults) {
  const std::vector<EdgeRecord> records = synthetic_records(1.5, -0.3, 5000, 8);
  CalibrationTable table;
  table.upsert(fit_calibration_entry(records, 1.0));
  table.upsert(make_entry(0.0, 2.0, 0.5, 100, 0.2, 0.05));
  table.upsert(make_entry(0.7, 1.1, 0.1, 10, 0.1, 0.01));
  table.upsert(make_entry(0.7, 1.2, 0.2, 20, 0.1, 0.01));  // replaces the previous 0.7
  ASSERT_EQ(table.entries.size(), 3u);
  EXPECT_EQ(table.entries[1].a, 1.2);
  EXPECT_EQ(table.entries[2].edges, 5000);
  EXPECT_GT(table.entries[2].ece_before, table.entries[2].ece_after);

  const std::string path = std::string(TS_BINARY_DIR) + "/calibration_test.json";
  write_calibration_table(path, table);
  const CalibrationTable back = read_calibration_table(path);
  std::remove(path.c_str());
  ASSERT_EQ(back.entries.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back.entries[i].temperature, table.entries[i].temperature);
    EXPECT_EQ(back.entries[i].a, table.entries[i].a);
    EXPECT_EQ(back.entries[i].b, table.entries[i].b);
    EXPECT_EQ(back.entries[i].edges, table.entries[i].edges);
    EXPECT_EQ(back.entries[i].ece_after, table.entries[i].ece_after);
  }
  // Nearest temperature, the lower on ties.
  EXPECT_EQ(back.lookup(0.0).a, 2.0);
  EXPECT_EQ(back.lookup(0.3).a, 2.0);
  EXPECT_EQ(back.lookup(0.35).a, 2.0);  // tie between 0 and 0.7
  EXPECT_EQ(back.lookup(0.6).a, 1.2);
  EXPECT_EQ(back.lookup(5.0).a, table.entries[2].a);
  // Absent file: empty table, default calibration.
  const CalibrationTable none = read_calibration_table(path + ".missing");
  EXPECT_TRUE(none.entries.empty());
  EXPECT_EQ(none.lookup(1.0).a, 1);
  EXPECT_EQ(none.lookup(1.0).b, 0);
}

// Entries are keyed by temperature and sampling filter: a sampled request gets the entry fitted under its own
// top-k / top-p / min-p when there is one, else the nearest temperature as before; greedy ignores filters.
TEST(CalibrationFile, LookupPrefersTheRequestsFilter) {
  CalibrationTable table;
  const CalibrationEntry greedy = make_entry(0.0, 3.0, 0.0);
  const CalibrationEntry filtered = make_entry(1.0, 0.2, 0.6, 0, 0, 0, {20, 0.9f, 0.0f});
  const CalibrationEntry unfiltered = make_entry(1.0, 0.5, 1.0);
  const CalibrationEntry warm = make_entry(0.7, 0.25, 0.5, 0, 0, 0, {20, 0.9f, 0.0f});
  for (const CalibrationEntry& e : {greedy, filtered, unfiltered, warm}) table.upsert(e);
  ASSERT_EQ(table.entries.size(), 4u);  // the two T = 1 entries differ by filter: both kept
  CalibrationEntry refit = unfiltered;
  refit.a = 0.55;
  table.upsert(refit);  // same temperature and filter: replaces
  ASSERT_EQ(table.entries.size(), 4u);

  const std::string path = std::string(TS_BINARY_DIR) + "/calibration_filter_test.json";
  write_calibration_table(path, table);
  const CalibrationTable back = read_calibration_table(path);
  std::remove(path.c_str());
  ASSERT_EQ(back.entries.size(), 4u);
  EXPECT_EQ(back.lookup(1.0).a, 0.55);                    // unfiltered request: the unfiltered entry
  EXPECT_EQ(back.lookup(1.0, {20, 0.9f, 0.0f}).a, 0.2);   // float 0.9 from a request matches 0.9 in JSON
  EXPECT_EQ(back.lookup(0.8, {20, 0.9f, 0.0f}).a, 0.25);  // same filter, nearest temperature
  EXPECT_EQ(back.lookup(0.8).a, 0.55);                    // unfiltered: nearest among unfiltered (greedy included)
  EXPECT_EQ(back.lookup(0.8, {40, 0.95f, 0.0f}).a, 0.25);   // no entry with this filter: nearest temperature overall
  EXPECT_EQ(back.lookup(0.0, {20, 0.9f, 0.0f}).a, 3.0);     // greedy: the filter does not matter
  EXPECT_EQ(back.lookup(0.2).a, 3.0);

  // Older files carry no filter fields: unfiltered. Bad filter values are rejected with the field named.
  const CalibrationTable old = calibration_table_from_json(
      R"({"version": 1, "entries": [{"temperature": 1.0, "a": 0.3, "b": 0.1}]})");
  ASSERT_EQ(old.entries.size(), 1u);
  EXPECT_EQ(old.entries[0].filter.top_k, 0);
  EXPECT_EQ(old.entries[0].filter.top_p, 1.0f);
  EXPECT_THROW(calibration_table_from_json(
                   R"({"version": 1, "entries": [{"temperature": 1.0, "a": 0.3, "b": 0.1, "top_p": 0}]})"),
               Error);
  EXPECT_THROW(calibration_table_from_json(
                   R"({"version": 1, "entries": [{"temperature": 1.0, "a": 0.3, "b": 0.1, "top_k": 2.5}]})"),
               Error);
}

// depth_offsets and the per-depth statistics survive the file; a file written before depth offsets existed still
// reads, with offsets 0 (p_hat as it was fitted).
TEST(CalibrationFile, DepthOffsetsRoundTripAndOldFilesReadAsZero) {
  CalibrationEntry e = make_entry(1.0, 0.2, 0.6, 1234, 0.07, 0.01, {20, 0.9f, 0.0f});
  e.rank_offset[1] = -2.4, e.rank_offset[2] = -3.2, e.rank_offset[3] = -3.9;
  e.depth_offset[1] = -0.35, e.depth_offset[2] = -0.5, e.depth_offset[3] = -0.8;
  e.ece_after_by_depth = {0.01, 0.02, 0.03, 0.04};
  CalibrationEntry::HeldOut h;
  h.edges = 999, h.ece_before = 0.2, h.ece_after = 0.02;
  h.before_by_depth.ece = {0.1, 0.2, 0.3, 0.4};
  h.after_by_depth.ece = {0.011, 0.012, 0.013, 0.014};
  h.after_by_depth.edges = {500, 300, 150, 49};
  e.held_out = h;
  CalibrationTable table;
  table.upsert(e);
  table.upsert(make_entry(0.0, 1.0, 2.0));  // no held-out figures: written without "held_out"
  const std::string json = calibration_table_to_json(table);
  const CalibrationTable back = calibration_table_from_json(json);
  ASSERT_EQ(back.entries.size(), 2u);
  const CalibrationEntry& r = back.entries[1];
  for (int k = 0; k < kDepthBuckets; ++k) {
    EXPECT_EQ(r.depth_offset[k], e.depth_offset[k]) << k;
    EXPECT_EQ(r.ece_after_by_depth[k], e.ece_after_by_depth[k]) << k;
  }
  ASSERT_TRUE(r.held_out.has_value());
  EXPECT_EQ(r.held_out->edges, 999);
  EXPECT_EQ(r.held_out->ece_after, 0.02);
  EXPECT_EQ(r.held_out->after_by_depth.edges[3], 49);
  EXPECT_EQ(r.held_out->before_by_depth.ece[2], 0.3);
  EXPECT_EQ(r.held_out->after_by_depth.ece[1], 0.012);
  EXPECT_FALSE(back.entries[0].held_out.has_value());
  const Calibration c = back.lookup(1.0, {20, 0.9f, 0.0f});
  EXPECT_EQ(c.depth_offset[0], 0);
  for (int k = 1; k < kDepthBuckets; ++k) EXPECT_EQ(c.depth_offset[k], e.depth_offset[k]) << k;
  EXPECT_EQ(c.rank_offset[3], -3.9);
  EXPECT_NEAR(c.p_hat(0.4, 0, 4), 1 / (1 + std::exp(-(0.2 * clamped_logit(0.4) + 0.6 - 0.8))), 1e-12);

  // The shipped file's layout before depth offsets: read as before, every depth offset 0.
  const CalibrationTable old = calibration_table_from_json(R"({"version": 1, "entries": [
      {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "a": 0.058, "b": 0.91,
       "rank_offsets": [-2.75, -3.52, -4.04], "edges": 11206, "ece_before": 0.175, "ece_after": 0.009}]})");
  ASSERT_EQ(old.entries.size(), 1u);
  const Calibration o = old.lookup(1.0);
  EXPECT_EQ(o.rank_offset[2], -3.52);
  for (int k = 0; k < kDepthBuckets; ++k) EXPECT_EQ(o.depth_offset[k], 0) << k;
  EXPECT_EQ(o.p_hat(0.3, 1, 1), o.p_hat(0.3, 1, 5));
  EXPECT_FALSE(old.entries[0].held_out.has_value());
  // A malformed depth_offsets is an error naming the field.
  try {
    calibration_table_from_json(
        R"({"version": 1, "entries": [{"temperature": 1.0, "a": 0.3, "b": 0.1, "depth_offsets": [1, 2]}]})");
    ADD_FAILURE() << "a 2-element depth_offsets was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("depth_offsets"), std::string::npos) << err.what();
  }
}

TEST(CalibrationFile, MalformedInputThrows) {
  EXPECT_THROW(calibration_table_from_json("not json"), Error);
  EXPECT_THROW(calibration_table_from_json("[]"), Error);
  EXPECT_THROW(calibration_table_from_json(R"({"version": 2, "entries": []})"), Error);
  EXPECT_THROW(calibration_table_from_json(R"({"version": 1})"), Error);
  EXPECT_THROW(calibration_table_from_json(R"({"version": 1, "entries": [{"temperature": 1, "a": 1}]})"), Error);
  EXPECT_THROW(calibration_table_from_json(R"({"version": 1, "entries": [{"temperature": 1, "a": -1, "b": 0}]})"),
               Error);
  const CalibrationTable ok =
      calibration_table_from_json(R"({"version": 1, "entries": [{"temperature": 1, "a": 1.5, "b": -0.5}]})");
  EXPECT_EQ(ok.lookup(1).a, 1.5);
  EXPECT_EQ(ok.entries[0].edges, 0);
}

// Entries recorded with weight formats: a round trip keeps them, upsert keeps one entry per formats at a temperature,
// and for_weights gives each temperature the entry of the asked formats, else an unrecorded one, else another's.
TEST(CalibrationFile, EntriesPerWeightFormat) {
  const auto entry = [](double t, double a, const std::string& w, const std::string& dw) {
    CalibrationEntry e;
    e.temperature = t;
    e.a = a;
    e.weights = w;
    e.drafter_weights = dw;
    return e;
  };
  const std::string q4 = "q4_k_m (projections Q4_K+Q6_K, lm_head Q6_K)";
  CalibrationTable table;
  table.upsert(entry(0, 1.0, "", ""));      // an older file's entries: formats not recorded
  table.upsert(entry(0.7, 2.0, "", ""));
  table.upsert(entry(0, 3.0, q4, "q8_0"));  // fitted on the quantized pair
  table.upsert(entry(1.0, 4.0, "q8_0 (projections Q8_0, lm_head Q8_0)", "q8_0"));  // another format only
  table.upsert(entry(0, 3.5, q4, "q8_0"));  // refitted: replaces its own entry, not the unrecorded one
  ASSERT_EQ(table.entries.size(), 4u);
  const CalibrationTable back = calibration_table_from_json(calibration_table_to_json(table));
  ASSERT_EQ(back.entries.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(back.entries[i].weights, table.entries[i].weights);
    EXPECT_EQ(back.entries[i].drafter_weights, table.entries[i].drafter_weights);
    EXPECT_EQ(back.entries[i].a, table.entries[i].a);
  }
  const CalibrationTable quantized = back.for_weights(q4, "q8_0");
  ASSERT_EQ(quantized.entries.size(), 3u);  // one per temperature
  EXPECT_EQ(quantized.lookup(0).a, 3.5);    // its own
  EXPECT_EQ(quantized.lookup(0.7).a, 2.0);  // none of its own there: the unrecorded one
  EXPECT_EQ(quantized.lookup(1.0).a, 4.0);  // only another format's
  const CalibrationTable native = back.for_weights("bf16", "native");
  EXPECT_EQ(native.lookup(0).a, 1.0);
  EXPECT_EQ(native.lookup(0.7).a, 2.0);
  // The same target beside a drafter of another format is another pair.
  EXPECT_EQ(back.for_weights(q4, "native").lookup(0).a, 1.0);
  EXPECT_THROW(calibration_table_from_json(
                   R"({"version": 1, "entries": [{"temperature": 0, "a": 1, "b": 0, "weights": 5}]})"),
               Error);
}

}  // namespace
}  // namespace ts::spec_decode
