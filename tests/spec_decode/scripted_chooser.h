// A Chooser that enumerates every outcome of a randomised procedure with its exact probability: it replays a
// script of choices and, past the script's end, takes the first possible option and remembers the alternatives.
// After a run, next() moves the script to the next unexplored branch (depth-first), so that running the procedure
// until next() returns false visits every outcome exactly once; probability() is the current outcome's.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "sampling/chooser.h"

namespace ts::spec_decode::testing {

class ScriptedChooser : public Chooser {
 public:
  int choose(const double* probs, int n) override {
    double total = 0;
    for (int i = 0; i < n; ++i) total += probs[i];
    int c;
    if (pos_ < script_.size()) {
      c = script_[pos_];
      EXPECT_EQ(options_[pos_].size(), static_cast<size_t>(n)) << "the procedure is not deterministic";
    } else {
      c = 0;
      while (c < n && !(probs[c] > 0)) ++c;
      script_.push_back(c);
      options_.emplace_back();
    }
    options_[pos_].assign(probs, probs + n);
    probability_ *= probs[c] / total;
    ++pos_;
    return c;
  }

  double probability() const { return probability_; }
  size_t choices() const { return pos_; }

  // Moves to the next outcome; false when all have been visited. Call after each complete run.
  bool next() {
    EXPECT_EQ(pos_, script_.size()) << "a run consumed fewer choices than its script";
    script_.resize(pos_);
    options_.resize(pos_);
    pos_ = 0;
    probability_ = 1;
    while (!script_.empty()) {
      const std::vector<double>& options = options_.back();
      int c = script_.back() + 1;
      while (c < static_cast<int>(options.size()) && !(options[c] > 0)) ++c;
      if (c < static_cast<int>(options.size())) {
        script_.back() = c;
        return true;
      }
      script_.pop_back();
      options_.pop_back();
    }
    return false;
  }

 private:
  std::vector<int> script_;
  std::vector<std::vector<double>> options_;  // the probabilities offered at each scripted position
  size_t pos_ = 0;
  double probability_ = 1;
};

}  // namespace ts::spec_decode::testing
