#include "engine/cost_model.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace ts {

void CostModel::validate() const {
  TS_CHECK(!batches.empty() && tokens.size() >= 2, "cost model: need >= 1 batch and >= 2 token counts, got ",
           batches.size(), " and ", tokens.size());
  TS_CHECK(ms.size() == batches.size() * tokens.size(), "cost model: ms must hold ", batches.size(), " x ",
           tokens.size(), " entries, got ", ms.size());
  for (size_t i = 0; i < batches.size(); ++i) {
    TS_CHECK(batches[i] >= 1 && (i == 0 || batches[i] > batches[i - 1]),
             "cost model: batches must be >= 1 and strictly increasing, got ", batches[i], " at ", i);
  }
  for (size_t j = 0; j < tokens.size(); ++j) {
    TS_CHECK(tokens[j] >= 1 && (j == 0 || tokens[j] > tokens[j - 1]),
             "cost model: token counts must be >= 1 and strictly increasing, got ", tokens[j], " at ", j);
  }
  for (double v : ms) TS_CHECK(v > 0, "cost model: every cost must be > 0 ms, got ", v);
  TS_CHECK(fixed_ms_by_batch.empty() || fixed_ms_by_batch.size() == batches.size(),
           "cost model: fixed_ms_by_batch must be empty or hold one cost per batch (", batches.size(), "), got ",
           fixed_ms_by_batch.size());
  for (double v : fixed_ms_by_batch) TS_CHECK(v >= 0, "cost model: fixed costs must be >= 0 ms, got ", v);
  TS_CHECK(context >= 0, "cost model: context must be >= 0, got ", context);
  TS_CHECK(ms_per_context_seq >= 0 && ms_per_context_row >= 0 && std::isfinite(ms_per_context_seq) &&
               std::isfinite(ms_per_context_row),
           "cost model: context slopes must be finite and >= 0, got ", ms_per_context_seq, " and ",
           ms_per_context_row);
}

namespace {

// L(batches[row], k), piecewise linear in k.
double row_cost(const CostModel& m, size_t row, int k) {
  const size_t K = m.tokens.size();
  const double* costs = &m.ms[row * K];
  size_t j = 1;  // segment [j - 1, j]
  while (j + 1 < K && m.tokens[j] < k) ++j;
  const double k0 = m.tokens[j - 1], k1 = m.tokens[j];
  return costs[j - 1] + (costs[j] - costs[j - 1]) * (k - k0) / (k1 - k0);
}

}  // namespace

double CostModel::cost_ms(int batch, int k) const {
  if (batch <= batches.front()) return row_cost(*this, 0, k);
  if (batch >= batches.back()) return row_cost(*this, batches.size() - 1, k);
  size_t i = 1;
  while (batches[i] < batch) ++i;
  const double w = static_cast<double>(batch - batches[i - 1]) / (batches[i] - batches[i - 1]);
  return (1 - w) * row_cost(*this, i - 1, k) + w * row_cost(*this, i, k);
}

double CostModel::cost_ms(int batch, double k, double ctx) const {
  const int k0 = std::max(1, static_cast<int>(k));
  const double w = k - k0;
  const double base = w > 0 ? (1 - w) * cost_ms(batch, k0) + w * cost_ms(batch, k0 + 1) : cost_ms(batch, k0);
  if (context <= 0 || ctx <= context) return base;
  return base + batch * (ctx - context) * (ms_per_context_seq + ms_per_context_row * std::max(0.0, k - 1));
}

double CostModel::fixed_cost_ms(int batch) const {
  if (fixed_ms_by_batch.empty() || fixed_ms_by_batch.size() != batches.size()) return std::max(0.0, fixed_ms);
  if (batch <= batches.front()) return fixed_ms_by_batch.front();
  if (batch >= batches.back()) return fixed_ms_by_batch.back();
  size_t i = 1;
  while (batches[i] < batch) ++i;
  const double w = static_cast<double>(batch - batches[i - 1]) / (batches[i] - batches[i - 1]);
  return (1 - w) * fixed_ms_by_batch[i - 1] + w * fixed_ms_by_batch[i];
}

bool speculation_pays(const CostModel& cost, int batch, int k, double expected_tokens, double ctx) {
  const double plain = cost.cost_ms(batch, 1.0, ctx);
  const double round = cost.cost_ms(batch, std::max(1, k), ctx) + cost.fixed_cost_ms(batch);
  return plain > 0 && round > 0 && expected_tokens / round >= 1.0 / plain;
}

double step_cost_ms(const CostModel& cost, int batch, double rows, int drafting, double ctx) {
  TS_CHECK(batch >= 1 && rows >= batch, "step cost: need batch >= 1 and rows >= batch, got ", batch, " and ", rows);
  return cost.cost_ms(batch, rows / batch, ctx) + (drafting > 0 ? cost.fixed_cost_ms(drafting) : 0.0);
}

double adaptive_theta(const CostModel& cost, int batch, int tree_size_so_far, double expected_tokens_so_far,
                      double ctx) {
  TS_CHECK(tree_size_so_far >= 1, "adaptive theta: the tree holds at least the anchor, got size ", tree_size_so_far);
  const double now = cost.cost_ms(batch, tree_size_so_far, ctx);
  const double next = cost.cost_ms(batch, tree_size_so_far + 1, ctx);
  TS_CHECK(now > 0, "adaptive theta: cost model gives ", now, " ms for k = ", tree_size_so_far, ", expected > 0");
  return std::max(0.0, (next - now) * expected_tokens_so_far / (now + cost.fixed_cost_ms(batch)));
}

double round_cost_ms(const CostModel& cost, int batch, int k, double ctx, double node_ms) {
  return cost.cost_ms(batch, double(k), ctx) + cost.fixed_cost_ms(batch) + std::max(0.0, node_ms) * (k - 1);
}

}  // namespace ts
