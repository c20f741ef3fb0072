#include "spec_decode/verify.h"

#include <algorithm>

#include "core/error.h"
#include "sampling/distribution.h"

namespace ts::spec_decode {

namespace {

EdgeRecord edge_record(const DraftTree& tree, int32_t child, bool accepted) {
  return EdgeRecord{clamped_logit(tree.draft_q[child]), static_cast<uint8_t>(accepted), tree.depth[child],
                    tree.sibling_rank[child]};
}

// One recursive-rejection step at a node: tests its children in draw order against p (updated in place to the
// residual after each rejection). Returns the accepted child or -1.
// q_j is never materialised: expansion drew c_j with the chooser from the float q with c_1..c_{j-1} zeroed, i.e.
// with probability q(t) / Z_j, Z_j = draw_total() of those floats; here the same floats are zeroed and summed by
// the same function, and q_j(t) = q(t) / Z_j is formed where it is read.
int32_t test_children(const DraftTree& tree, int32_t node, const std::vector<int32_t>& kids, const DraftSource& source,
                      std::vector<double>* p, Chooser& chooser) {
  const bool sampled_draft = tree.draft_temperature > 0;
  const int vocab = static_cast<int>(p->size());
  thread_local std::vector<float> q;  // [vocab] the node's draft q, drawn children zeroed as the walk goes
  thread_local std::vector<double> residual;  // [vocab]
  if (sampled_draft) {
    q.resize(vocab);
    draft_probs_f32(source, tree.q_source, tree.depth[node] + 1, tree.token[node], tree.draft_temperature, q.data(),
                    tree.draft_filter);
  }
  residual.resize(vocab);
  double* pv = p->data();
  for (int32_t kid : kids) {
    const int32_t x = tree.token[kid];
    double q_x = 1;          // deterministic draft: q_j is the point mass on x
    double remaining = 0;    // Z_j
    if (sampled_draft) {
      remaining = draw_total(q.data(), vocab);
      q_x = remaining > 0 ? static_cast<double>(q[x]) / remaining : 0;
      TS_CHECK(q_x > 0, "verify: node ", kid, " token ", x, " has q_j = ", q_x,
               ", but it was drawn from q_j (does the DraftSource differ from the one expand() used?)");
    }
    const double ratio = pv[x] / q_x;
    bool accept = ratio >= 1;
    if (!accept && ratio > 0) {
      const double coin[2] = {ratio, 1 - ratio};
      accept = chooser.choose(coin, 2) == 0;
    }
    if (accept) return kid;
    // Rejected: p <- normalise(max(p - q_j, 0)).
    double sum = 0;
    if (sampled_draft) {
      for (int t = 0; t < vocab; ++t) {
        residual[t] = std::max(pv[t] - static_cast<double>(q[t]) / remaining, 0.0);
        sum += residual[t];
      }
    } else {
      for (int t = 0; t < vocab; ++t) {
        residual[t] = std::max(pv[t] - (t == x ? 1.0 : 0.0), 0.0);
        sum += residual[t];
      }
    }
    if (sum > 0) {  // else the guard: a probability-zero rejection reached by rounding; keep p
      for (int t = 0; t < vocab; ++t) pv[t] = residual[t] / sum;
    }
    if (sampled_draft) q[x] = 0;  // x is drawn: q_{j+1} is q without it
  }
  return -1;
}

}  // namespace

VerifyResult verify(const DraftTree& tree, const float* target_logits, const SamplingParams& target_params,
                    const DraftSource& source, Chooser& chooser) {
  const int vocab = source.vocab;
  TS_CHECK(vocab > 0, "verify: DraftSource.vocab must be > 0, got ", vocab);
  tree.validate(vocab);
  validate_sampling_params(target_params);
  const bool greedy = target_params.temperature == 0;

  VerifyResult result;
  std::vector<double> p;  // [vocab] the current node's processed target distribution (then residual)
  int32_t node = 0;
  while (true) {
    const float* row = target_logits + static_cast<size_t>(node) * vocab;  // [vocab]
    const std::vector<int32_t> kids = tree.children(node);
    int32_t accepted = -1;
    int32_t best = -1;
    if (greedy) {
      best = argmax(row, vocab);
      for (int32_t kid : kids) {
        if (tree.token[kid] == best) {
          accepted = kid;
          break;
        }
      }
    } else {
      processed_distribution(row, vocab, target_params, &p);
      if (!kids.empty()) accepted = test_children(tree, node, kids, source, &p, chooser);
    }
    for (int32_t kid : kids) result.edges.push_back(edge_record(tree, kid, kid == accepted));
    if (accepted < 0) {
      result.last_node = node;
      result.bonus_token = greedy ? best : chooser.choose(p.data(), vocab);
      break;
    }
    result.accepted_nodes.push_back(accepted);
    result.emitted.push_back(tree.token[accepted]);
    node = accepted;
  }
  result.emitted.push_back(result.bonus_token);
  return result;
}

}  // namespace ts::spec_decode
