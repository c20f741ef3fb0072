// The scheduler as a pure function, driven by a fake model: admission (batch limit, KV budget, first come first
// served), chunked prefill that never stalls decoding, tree budgets by load, finishing, cancellation, and KV
// accounting that returns to zero.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "engine/scheduler.h"
#include "engine/cost_model.h"

namespace ts::sched {
namespace {

// A fake model: prefill chunks are consumed as planned; a decode step emits 1 token, a speculative round
// 1 + accepted tokens, where accepted cycles 0, 1, 2, 3 per request; a request ends after max_new tokens.
struct FakeModel {
  std::map<RequestId, int> max_new, generated;
  int rounds = 0;

  std::vector<SeqOutcome> run(const SchedulerState& state, const Plan& plan) {
    std::vector<SeqOutcome> out;
    for (const PrefillWork& p : plan.prefill) {
      SeqOutcome o;
      o.id = p.id;
      o.prefilled = p.len;
      if (p.last) o.tokens_emitted = 1, generated[p.id] += 1;  // the first token comes from the prefill logits
      o.finished = generated[p.id] >= max_new[p.id];
      out.push_back(o);
    }
    for (const DecodeWork& d : plan.decode) {
      SeqOutcome o;
      o.id = d.id;
      if (d.speculate) {
        const int accepted = rounds++ % 4;
        o.speculated = true;
        o.tree_nodes = 6;
        o.tokens_emitted = 1 + accepted;
        o.committed = 1 + accepted;
      } else {
        o.tokens_emitted = 1;
        o.committed = 1;
      }
      generated[d.id] += o.tokens_emitted;
      o.finished = generated[d.id] >= max_new[d.id];
      out.push_back(o);
    }
    return out;
  }
};

SeqView seq(RequestId id, int prompt, int reserve, DecodeMode mode = DecodeMode::Tree) {
  SeqView s;
  s.id = id;
  s.prompt_len = prompt;
  s.max_context = 1000;
  s.reserve_rows = reserve;
  s.mode = mode;
  s.theta_floor = 0.05;
  s.node_cap = 16;
  return s;
}

SchedulerState make_state(int max_batch, int chunk, int64_t budget) {
  SchedulerState st;
  st.config.max_batch = max_batch;
  st.config.prefill_chunk = chunk;
  st.config.kv_budget_rows = budget;
  st.config.block_size = 8;
  return st;
}

bool contains(const std::vector<RequestId>& v, RequestId id) { return std::find(v.begin(), v.end(), id) != v.end(); }

TEST(Scheduler, AdmitsUpToTheBatchLimitInArrivalOrder) {
  SchedulerState st = make_state(/*max_batch=*/2, 64, 100000);
  FakeModel fake;
  for (RequestId id = 1; id <= 5; ++id) {
    st.seqs.push_back(seq(id, 4, 100));
    fake.max_new[id] = 3 + int(id);
  }
  Plan p = schedule(st);
  EXPECT_EQ(p.admit, (std::vector<RequestId>{1, 2}));
  std::vector<RequestId> admission_order;
  for (int step = 0; step < 200 && !st.seqs.empty(); ++step) {
    p = schedule(st);
    admission_order.insert(admission_order.end(), p.admit.begin(), p.admit.end());
    int admitted = 0;
    for (const SeqView& s : st.seqs) admitted += s.phase != Phase::Waiting;
    EXPECT_LE(admitted + int(p.admit.size()), 2) << "step " << step;
    update(st, p, fake.run(st, p));
  }
  EXPECT_TRUE(st.seqs.empty());
  EXPECT_EQ(admission_order, (std::vector<RequestId>{1, 2, 3, 4, 5}));
  for (RequestId id = 1; id <= 5; ++id) EXPECT_GE(fake.generated[id], fake.max_new[id]);
}

TEST(Scheduler, KvBudgetQueuesABurstOfLongPromptsInOrder) {
  // Budget 1000 rows; long requests reserve 600, short ones 100. A short one behind a long one does not overtake.
  SchedulerState st = make_state(/*max_batch=*/8, 4096, 1000);
  FakeModel fake;
  const std::vector<int> reserves = {600, 600, 100, 600};
  for (RequestId id = 1; id <= 4; ++id) {
    st.seqs.push_back(seq(id, 10, reserves[id - 1]));
    fake.max_new[id] = 5;
  }
  Plan p = schedule(st);
  EXPECT_EQ(p.admit, (std::vector<RequestId>{1}));  // 2 does not fit next to 1, and 3 must not overtake 2
  std::vector<RequestId> order;
  int64_t peak = 0;
  for (int step = 0; step < 200 && !st.seqs.empty(); ++step) {
    p = schedule(st);
    order.insert(order.end(), p.admit.begin(), p.admit.end());
    update(st, p, fake.run(st, p));
    peak = std::max(peak, reserved_rows(st));
    EXPECT_LE(reserved_rows(st), st.config.kv_budget_rows);
  }
  EXPECT_EQ(order, (std::vector<RequestId>{1, 2, 3, 4}));
  EXPECT_EQ(peak, 700);  // 2 and 3 ran together (600 + 100), never two long ones
  EXPECT_EQ(reserved_rows(st), 0);
}

TEST(Scheduler, ChunkedPrefillNeverStallsDecoding) {
  SchedulerState st = make_state(4, /*chunk=*/16, 100000);
  FakeModel fake;
  st.seqs.push_back(seq(1, 5, 100));
  fake.max_new[1] = 1000;
  // Let request 1 start decoding.
  for (int i = 0; i < 2; ++i) {
    Plan p = schedule(st);
    update(st, p, fake.run(st, p));
  }
  ASSERT_EQ(st.seqs[0].phase, Phase::Decode);
  st.seqs.push_back(seq(2, 50, 200, DecodeMode::None));
  fake.max_new[2] = 1000;
  std::vector<int> chunks;
  while (true) {
    Plan p = schedule(st);
    ASSERT_EQ(p.decode.size(), st.seqs[1].phase == Phase::Decode ? 2u : 1u);
    EXPECT_EQ(p.decode[0].id, 1u) << "the decoding request runs in every step of the long prefill";
    int total = 0;
    for (const PrefillWork& w : p.prefill) {
      EXPECT_EQ(w.id, 2u);
      chunks.push_back(w.len);
      total += w.len;
      EXPECT_EQ(w.last, w.start + w.len == 50);
    }
    EXPECT_LE(total, 16);
    const bool done = st.seqs[1].phase == Phase::Decode;
    update(st, p, fake.run(st, p));
    if (done) break;
  }
  EXPECT_EQ(chunks, (std::vector<int>{16, 16, 16, 2}));
  EXPECT_EQ(st.seqs[1].context_len, 50 + 1);  // the prompt plus the first anchor committed by one decode step
}

TEST(Scheduler, CancellationEvictsAndReleasesTheReservation) {
  SchedulerState st = make_state(2, 64, 100000);
  FakeModel fake;
  for (RequestId id = 1; id <= 3; ++id) {
    st.seqs.push_back(seq(id, 4, 100));
    fake.max_new[id] = 1000;
  }
  Plan p = schedule(st);
  update(st, p, fake.run(st, p));
  EXPECT_EQ(reserved_rows(st), 200);
  st.seqs[0].cancelled = true;  // running
  st.seqs[2].cancelled = true;  // waiting
  p = schedule(st);
  EXPECT_TRUE(contains(p.evict, 1));
  EXPECT_TRUE(contains(p.evict, 3));
  for (const DecodeWork& d : p.decode) EXPECT_NE(d.id, 1u);
  EXPECT_TRUE(p.admit.empty());  // 3 was cancelled while waiting, nothing else waits
  update(st, p, fake.run(st, p));
  ASSERT_EQ(st.seqs.size(), 1u);
  EXPECT_EQ(st.seqs[0].id, 2u);
  EXPECT_EQ(reserved_rows(st), 100);
  st.seqs[0].cancelled = true;
  p = schedule(st);
  update(st, p, fake.run(st, p));
  EXPECT_TRUE(st.seqs.empty());
  EXPECT_EQ(reserved_rows(st), 0);
}

TEST(Scheduler, NoSpeculationWithoutRoomForABlockOrWithoutADrafter) {
  SchedulerState st = make_state(2, 64, 100000);
  FakeModel fake;
  SeqView s = seq(1, 4, 100);
  s.max_context = 4 + 8 + 3;  // after the prompt, room for a few rounds only
  st.seqs.push_back(s);
  st.seqs.push_back(seq(2, 4, 100, DecodeMode::None));
  fake.max_new[1] = fake.max_new[2] = 1000;
  Plan p = schedule(st);
  update(st, p, fake.run(st, p));
  for (int step = 0; step < 6; ++step) {
    p = schedule(st);
    for (const DecodeWork& d : p.decode) {
      const SeqView& v = *std::find_if(st.seqs.begin(), st.seqs.end(), [&](auto& x) { return x.id == d.id; });
      EXPECT_EQ(d.speculate, v.mode != DecodeMode::None && v.context_len + 8 + 1 <= v.max_context);
    }
    update(st, p, fake.run(st, p));
  }
  st.config.block_size = 0;  // no drafter
  p = schedule(st);
  for (const DecodeWork& d : p.decode) EXPECT_FALSE(d.speculate);
}

// b adaptive requests decoding (context 4 of 100), priced with `curve`, measured at the given tokens and nodes
// per round.
SchedulerState adaptive_decoding(int b, int max_batch, const CostModel& curve, double tokens, double nodes) {
  SchedulerState st = make_state(max_batch, 64, 1 << 30);
  st.config.cost = &curve;
  for (int i = 0; i < b; ++i) {
    SeqView s = seq(RequestId(i + 1), 4, 100);
    s.phase = Phase::Decode;
    s.prefilled = s.context_len = 4;
    s.adaptive = true;
    s.theta_floor = 0.0;
    s.tokens_per_round = tokens;
    s.nodes_per_round = nodes;
    st.seqs.push_back(s);
  }
  return st;
}

// What the curve leaves out is learned from executed steps: rounds that cost far more than modelled switch
// speculation off where the curve alone keeps it on, and residuals that match the model change nothing.
TEST(Scheduler, MeasuredRoundOverheadBeyondTheCurveSwitchesSpeculationOff) {
  CostModel curve;
  curve.batches = {1, 8};
  curve.tokens = {1, 2, 4, 8, 16};
  curve.ms = {10, 10, 10.5, 11, 12, 10, 11, 12, 14, 18};  // memory-bound: speculation pays on the curve
  curve.fixed_ms_by_batch = {0.5, 1.0};
  curve.validate();
  auto state_with = [&](int b) { return adaptive_decoding(b, /*max_batch=*/8, curve, 2.5, 4); };
  auto speculating = [](const Plan& p) {
    int n = 0;
    for (const DecodeWork& d : p.decode) n += d.speculate;
    return n;
  };
  auto observe = [](SchedulerState& st, int batch, int drafting, double actual, double modelled) {
    StepObservation o;
    o.batch = batch, o.drafting = drafting, o.actual_ms = actual, o.modelled_ms = modelled;
    observe_step(st, o);
  };
  for (int b : {1, 8}) {
    SchedulerState st = state_with(b);
    EXPECT_EQ(speculating(schedule(st)), b) << "on the curve alone every request speculates (b = " << b << ")";
    // Steps that cost what the model says: nothing changes.
    for (int i = 0; i < 5; ++i) observe(st, b, 0, 10.0, 10.0), observe(st, b, b, 12.0, 12.0);
    EXPECT_NEAR(draft_residual_ms(st, b), 0.0, 1e-12);
    EXPECT_EQ(speculating(schedule(st)), b);
    // Rounds that take 30 ms more per drafting request than modelled: off.
    for (int i = 0; i < 40; ++i) observe(st, b, 0, 10.0, 10.0), observe(st, b, b, 12.0 + 30.0 * b, 12.0);
    EXPECT_NEAR(draft_residual_ms(st, b), 30.0, 1e-9);
    EXPECT_EQ(speculating(schedule(st)), 0) << "b = " << b;
    // The other batch bucket has not been measured: it keeps the curve's price.
    EXPECT_EQ(draft_residual_ms(st, b == 1 ? 8 : 1), 0.0);
  }
  // A bucket's first steps are not trusted (cold caches), nor is one outlier among steady steps.
  SchedulerState fresh = state_with(1);
  for (int i = 0; i < kResidualWarmupSteps; ++i) observe(fresh, 1, 1, 1000.0, 12.0);
  EXPECT_EQ(draft_residual_ms(fresh, 1), 0.0);
  EXPECT_EQ(speculating(schedule(fresh)), 1);
  for (int i = 0; i < 6; ++i) observe(fresh, 1, 1, 12.5, 12.0);
  observe(fresh, 1, 1, 1000.0, 12.0);
  EXPECT_NEAR(draft_residual_ms(fresh, 1), 0.5, 1e-9) << "the median ignores one outlier";
  EXPECT_EQ(speculating(schedule(fresh)), 1);
  // Each batch bucket's first drafting steps are warm-up too (buffers grow with the drafting requests): the first
  // rounds at batch 8, long after batch 1 was measured, teach nothing; the steps after them do. Plain steps warm up
  // once per process: a bucket's first plain step (a plain probe, where the policy speculates) is learned.
  for (int i = 0; i < kResidualWarmupSteps; ++i) observe(fresh, 1, 0, 1000.0, 10.0);  // the process's plain warm-up
  EXPECT_EQ(plain_residual_ms(fresh, 1), 0.0);
  observe(fresh, 8, 0, 10.5, 10.0);
  EXPECT_NEAR(plain_residual_ms(fresh, 8), 0.5, 1e-9);
  for (int i = 0; i < kResidualWarmupSteps; ++i) observe(fresh, 8, 8, 1000.0, 12.0);
  EXPECT_EQ(draft_residual_ms(fresh, 8), 0.0);
  observe(fresh, 8, 8, 12.0 + 0.5 + 8 * 0.25, 12.0);
  EXPECT_NEAR(plain_residual_ms(fresh, 8), 0.5, 1e-9);
  EXPECT_NEAR(draft_residual_ms(fresh, 8), 0.25, 1e-9);
  EXPECT_NEAR(draft_residual_ms(fresh, 1), 0.5, 1e-9) << "batch 1's estimate is its own";
  // Buffers grow with the drafting requests too: at batch 8, after steps in which one request drafted, the first
  // steps in which all eight do are warm-up again.
  SchedulerState grown = state_with(8);
  for (int i = 0; i < kResidualWarmupSteps + 1; ++i) observe(grown, 8, 0, 10.5, 10.0);  // the process's warm-up
  for (int i = 0; i < kResidualWarmupSteps; ++i) observe(grown, 8, 1, 1000.0, 11.0);
  observe(grown, 8, 1, 11.5 + 0.25, 11.0);
  EXPECT_NEAR(draft_residual_ms(grown, 8), 0.25, 1e-9);
  for (int i = 0; i < kResidualWarmupSteps; ++i) observe(grown, 8, 8, 1000.0, 12.0);
  EXPECT_NEAR(draft_residual_ms(grown, 8), 0.25, 1e-9) << "the first steps with eight drafting requests";
  observe(grown, 8, 8, 12.5 + 8 * 0.25, 12.0);
  observe(grown, 8, 8, 12.5 + 8 * 0.25, 12.0);
  EXPECT_NEAR(draft_residual_ms(grown, 8), 0.25, 1e-9);
  EXPECT_EQ(speculating(schedule(grown)), 8);
}

TEST(Scheduler, ResidualWindowIsTheLowerMedianOfTheNewestObservations) {
  ResidualWindow w;
  EXPECT_EQ(w.estimate(), 0.0);
  w.add(5.0);
  EXPECT_EQ(w.estimate(), 5.0);
  w.add(1.0);
  EXPECT_EQ(w.estimate(), 1.0) << "two values: the lower one";
  for (int i = 0; i < ResidualWindow::kSize; ++i) w.add(100.0);
  EXPECT_EQ(w.estimate(), 100.0) << "old values leave the window";
  for (int i = 0; i < ResidualWindow::kSize / 2 + 1; ++i) w.add(2.0);
  EXPECT_EQ(w.estimate(), 2.0) << "a majority of new values moves the median";
  w.add(9.0);
  w.keep_newest(1);
  EXPECT_EQ(w.count, 1);
  EXPECT_EQ(w.estimate(), 9.0) << "only the newest value is kept";
  w.add(3.0);
  EXPECT_EQ(w.estimate(), 3.0);
  w.keep_newest(ResidualWindow::kSize + 5);
  EXPECT_EQ(w.count, 2) << "keeping more than it holds keeps everything";
  w.keep_newest(0);
  EXPECT_EQ(w.estimate(), 0.0);
  EXPECT_EQ(batch_bucket(1), 0);
  EXPECT_EQ(batch_bucket(3), 1);
  EXPECT_EQ(batch_bucket(4), 2);
  EXPECT_EQ(batch_bucket(15), 3);
  EXPECT_EQ(batch_bucket(1000), kBatchBuckets - 1);
}

// L(b, k): a memory-bound forward (flat in k) at b = 1, turning compute-bound (proportional to b * k) as b grows.
CostModel serving_curve() {
  CostModel c;
  c.batches = {1, 4, 16, 64};
  c.tokens = {1, 2, 4, 8, 16, 32};
  for (int b : c.batches)
    for (int k : c.tokens) c.ms.push_back(10.0 + 0.02 * b * k * b / 4.0 + 0.05 * b * k);
  c.fixed_ms_by_batch = {1.0, 1.5, 3.0, 9.0};  // the drafter's batched forward
  c.validate();
  return c;
}

// The context term reaches the scheduler: the same requests that speculate at a short context stop where each
// extra row attends over many thousand keys, and the step is priced (and logged) at the requests' mean context.
TEST(Scheduler, LongContextsPriceSpeculationOff) {
  CostModel curve;
  curve.batches = {1, 8};
  curve.tokens = {1, 2, 4, 8, 16};
  curve.ms = {10, 10, 10.5, 11, 12, 10, 11, 12, 14, 18};
  curve.context = 256;
  curve.ms_per_context_seq = 0.001;
  curve.ms_per_context_row = 0.001;
  curve.validate();
  auto at_context = [&](int ctx) {
    SchedulerState st = adaptive_decoding(2, /*max_batch=*/8, curve, 2.0, 4);
    for (SeqView& s : st.seqs) s.context_len = ctx, s.max_context = ctx + 100;
    return st;
  };
  auto speculating = [](const Plan& p) {
    int n = 0;
    for (const DecodeWork& d : p.decode) n += d.speculate;
    return n;
  };
  const Plan short_plan = schedule(at_context(300));
  EXPECT_EQ(speculating(short_plan), 2);
  EXPECT_DOUBLE_EQ(short_plan.mean_context, 300);
  const Plan long_plan = schedule(at_context(8000));
  EXPECT_EQ(speculating(long_plan), 0);
  EXPECT_GT(long_plan.decode[0].theta, short_plan.decode[0].theta);
  EXPECT_NEAR(long_plan.decode[0].theta, adaptive_theta(curve, 2, 1, 1.0, 8000), 1e-12);
}

TEST(Scheduler, TreeBudgetsShrinkWithLoadAndSpeculationSwitchesOff) {
  const CostModel curve = serving_curve();
  double previous_theta = -1;
  bool switched_off = false, on_at_one = false;
  for (int b : {1, 2, 4, 8, 16, 32, 64}) {
    SchedulerState st = adaptive_decoding(b, /*max_batch=*/64, curve, 2.2, 6);
    Plan p = schedule(st);
    ASSERT_EQ(p.batch, b);
    int speculating = 0;
    for (const DecodeWork& d : p.decode) {
      EXPECT_EQ(d.pricing_batch, b);
      EXPECT_TRUE(d.adaptive);
      EXPECT_NEAR(d.theta, adaptive_theta(curve, b, 1, 1.0), 1e-12);
      speculating += d.speculate;
    }
    // The chosen number of speculating requests has the best modelled rate of all choices.
    auto rate = [&](int j) { return (b + 1.2 * j) / step_cost_ms(curve, b, b + 6.0 * j, j); };
    for (int j = 0; j <= b; ++j) EXPECT_GE(rate(speculating), rate(j) - 1e-12) << "b = " << b << " j = " << j;
    EXPECT_GE(p.decode[0].theta, previous_theta) << "theta must not fall as the load grows (b = " << b << ")";
    previous_theta = p.decode[0].theta;
    if (b == 1) on_at_one = speculating == 1;
    if (speculating == 0) switched_off = true;
    if (switched_off) {
      EXPECT_EQ(speculating, 0) << "once off it stays off at higher load (b = " << b << ")";
    }
  }
  EXPECT_TRUE(on_at_one);
  EXPECT_TRUE(switched_off);
  EXPECT_GT(previous_theta, 0.3);
}

TEST(Scheduler, SampledRequestsWithFewerTokensPerRoundStopSpeculatingFirst) {
  const CostModel curve = serving_curve();
  // The break-even batch of a request emitting 2.6 tokens per round is higher than one emitting 1.4.
  auto off_batch = [&](double tokens_per_round, float temperature) {
    for (int b = 1; b <= 64; ++b) {
      SchedulerState st = adaptive_decoding(b, 64, curve, tokens_per_round, 0);
      for (SeqView& s : st.seqs) s.temperature = temperature;
      if (!schedule(st).decode[0].speculate) return b;
    }
    return 65;
  };
  EXPECT_LT(off_batch(1.4, 1.0f), off_batch(2.6, 0.0f));
  // Before a measurement the prior per temperature class decides: sampled requests assume fewer tokens.
  EXPECT_LE(off_batch(0, 1.0f), off_batch(0, 0.0f));
}

// 16 adaptive decoding requests whose averages say 1.5 tokens per round from 3 nodes: a load at which a 1.5-token
// round does not pay and the prior's 2.5 does. Probes every 10 plain steps.
SchedulerState kept_off_requests(const CostModel& curve, int max_context) {
  SchedulerState st = make_state(64, 64, 1 << 30);
  st.config.cost = &curve;
  st.config.probe_interval = 10;
  for (int i = 0; i < 16; ++i) {
    SeqView s = seq(RequestId(i + 1), 4, max_context);
    s.phase = Phase::Decode;
    s.prefilled = s.context_len = 4;
    s.adaptive = true;
    s.tokens_per_round = 1.5;
    s.nodes_per_round = 3;
    st.seqs.push_back(s);
  }
  return st;
}

// `steps` steps in which a speculating round emits round_tokens from `nodes` nodes; the steps in which the first
// request speculated.
std::vector<int> run_kept_off(SchedulerState& st, int steps, int round_tokens, int nodes) {
  std::vector<int> speculating_steps;
  for (int step = 0; step < steps; ++step) {
    Plan p = schedule(st);
    std::vector<SeqOutcome> out;
    for (const DecodeWork& d : p.decode) {
      SeqOutcome o;
      o.id = d.id;
      o.committed = o.tokens_emitted = d.speculate ? round_tokens : 1;
      o.speculated = d.speculate;
      o.tree_nodes = d.speculate ? nodes : 0;
      out.push_back(o);
    }
    if (p.decode[0].speculate) speculating_steps.push_back(step);
    update(st, p, out);
  }
  return speculating_steps;
}

TEST(Scheduler, ARequestKeptFromSpeculatingIsProbedAndComesBack) {
  const CostModel curve = serving_curve();
  SchedulerState st = kept_off_requests(curve, 100);
  const std::vector<int> probe_steps = run_kept_off(st, 25, 5, 4);  // the probe finds a much better acceptance
  ASSERT_FALSE(probe_steps.empty());
  EXPECT_EQ(probe_steps.front(), 10) << "first probe after probe_interval plain steps";
  EXPECT_GT(st.seqs[0].tokens_per_round, 1.5) << "the probe's outcome is measured";
}

// A request kept plain by a pessimistic average whose acceptance has recovered (every round now emits 3): its
// first probe round re-prices it mostly by what that round found, so it speculates from then on. With the plain
// 10% weight the average would creep up a tenth of the gap per probe.
TEST(Scheduler, AnAverageAgesWithThePlainStepsItWentUnrefreshed) {
  const CostModel curve = serving_curve();
  SchedulerState st = kept_off_requests(curve, 200);
  const std::vector<int> speculating_steps = run_kept_off(st, 40, 3, 3);
  ASSERT_FALSE(speculating_steps.empty());
  EXPECT_EQ(speculating_steps.front(), 10) << "first probe after probe_interval plain steps";
  // 0.9^11 of the old average is left after the probe: 1.5 * 0.31 + 3 * 0.69 = 2.53. Every later step speculates
  // but one plain probe's steps (its settling steps and the one that measures the plain price: step 7 of
  // schedule()) after plain_probe_interval speculating steps.
  EXPECT_GE(int(speculating_steps.size()), 40 - 10 - (kPlainSettleSteps + 1)) << "speculates from the probe on";
  EXPECT_NEAR(st.seqs[0].tokens_per_round, 3.0, 0.05);
}

// Drives `steps` decode-only steps of the state's requests through schedule / run / update / observe_step as the
// engine does. A speculating request emits 3 tokens from a 4-node tree; a step takes extra_ms(drafting step
// index) beyond the modelled cost when some request drafts (the index counts drafting steps so far), plain_extra_ms
// otherwise (negative: plain steps cheaper than the curve says). Returns, per step, whether any request speculated.
// plain_extra_ms(plain step index) is the same for plain steps.
std::vector<bool> simulate_policy(SchedulerState& st, int steps, const std::function<double(int)>& extra_ms,
                                  const std::function<double(int)>& plain_extra_ms) {
  std::vector<bool> speculated;
  int drafting_steps = 0, plain_steps = 0;
  for (int i = 0; i < steps; ++i) {
    const Plan p = schedule(st);
    std::vector<SeqOutcome> out;
    StepObservation seen;
    seen.batch = p.batch;
    seen.probe = p.probe;
    int rows = 0;
    for (const DecodeWork& d : p.decode) {
      SeqOutcome o;
      o.id = d.id;
      o.speculated = d.speculate;
      o.committed = o.tokens_emitted = d.speculate ? 3 : 1;
      o.tree_nodes = d.speculate ? 4 : 0;
      rows += d.speculate ? 5 : 1;
      seen.drafting += d.speculate;
      out.push_back(o);
    }
    seen.plain_steps_before = st.steps_since_draft;
    update(st, p, out);
    seen.modelled_ms = step_cost_ms(*st.config.cost, p.batch, rows, seen.drafting, p.mean_context);
    seen.modelled_plain_ms = step_cost_ms(*st.config.cost, p.batch, p.batch, 0, p.mean_context);
    seen.actual_ms =
        seen.modelled_ms + (seen.drafting > 0 ? extra_ms(drafting_steps++) : plain_extra_ms(plain_steps++));
    observe_step(st, seen);
    speculated.push_back(seen.drafting > 0);
  }
  return speculated;
}

std::vector<bool> simulate_policy(SchedulerState& st, int steps, const std::function<double(int)>& extra_ms,
                                  double plain_extra_ms = 0) {
  return simulate_policy(st, steps, extra_ms, [=](int) { return plain_extra_ms; });
}

CostModel memory_bound_curve() {
  CostModel curve;
  curve.batches = {1, 8};
  curve.tokens = {1, 2, 4, 8, 16};
  curve.ms = {10, 10, 10.5, 11, 12, 10, 11, 12, 14, 18};
  curve.fixed_ms_by_batch = {0.5, 1.0};
  curve.validate();
  return curve;
}

SchedulerState one_long_request(const CostModel& curve) {
  SchedulerState st = adaptive_decoding(1, 8, curve, 3.0, 4);
  st.seqs[0].max_context = 1 << 30;
  return st;
}

int count(const std::vector<bool>& v, size_t from = 0) { return int(std::count(v.begin() + from, v.end(), true)); }

// The issue a server met: its first drafting steps were slow (cold caches, one-off table builds), the learned
// residual priced speculation out, and nothing ever drafted again to correct it. Now the slow start is partly
// dropped as warm-up, the rest is outvoted by probes, and speculation comes back for good.
TEST(Scheduler, SlowFirstDraftingStepsDoNotSwitchSpeculationOffForGood) {
  const CostModel curve = memory_bound_curve();
  for (int slow_steps : {3, 6}) {
    SchedulerState st = one_long_request(curve);
    const std::vector<bool> speculated =
        simulate_policy(st, 600, [&](int i) { return i < slow_steps ? 200.0 : 0.3; });
    // The slow steps did switch it off for a while...
    const auto first_off = std::find(speculated.begin(), speculated.end(), false);
    ASSERT_NE(first_off, speculated.end()) << "slow_steps " << slow_steps;
    // ...and it is back: every one of the last 200 steps speculates, but for at most one plain probe's steps (the
    // plain price is refreshed every kPlainRefreshSteps speculating steps).
    EXPECT_GE(count(speculated, 400), 200 - (kPlainSettleSteps + 1)) << "slow_steps " << slow_steps;
    EXPECT_LE(st.plain_probe_steps, kPlainSettleSteps + 1);
    EXPECT_NEAR(draft_residual_ms(st, 1), 0.3, 1e-9);
    EXPECT_GT(st.probe_steps, 0);
    EXPECT_EQ(st.decode_steps, 600);
  }
}

// Where speculation truly does not pay (every round costs 40 ms more than the curve says), it stays off but keeps
// probing, at most one round every max_probe_interval + 1 steps once the interval has grown.
TEST(Scheduler, SpeculationThatNeverPaysStaysMostlyOffAndKeepsProbingAtABoundedCost) {
  const CostModel curve = memory_bound_curve();
  SchedulerState st = one_long_request(curve);
  ASSERT_EQ(st.config.probe_interval, 8);
  ASSERT_EQ(st.config.max_probe_interval, 64);
  const int steps = 3000;
  const std::vector<bool> speculated = simulate_policy(st, steps, [](int) { return 40.0; });
  // Before the residual is measured: warm-up + 1 rounds; then probes at 8, 16, 32, 64, 64, ... plain steps apart.
  const int bound = kResidualWarmupSteps + 1 + 4 + steps / (64 + 1);
  EXPECT_LE(count(speculated), bound);
  EXPECT_GE(count(speculated, steps - 2 * 65), 2) << "still probing at the end";
  EXPECT_EQ(st.probe_interval, 64);
  EXPECT_EQ(st.speculative_steps, count(speculated));
  // The same with rounds whose extra cost scatters by +-15% around 40 ms: the bound holds.
  SchedulerState noisy = one_long_request(curve);
  const std::vector<bool> noisy_speculated =
      simulate_policy(noisy, steps, [](int i) { return 40.0 * (1.0 + 0.15 * std::sin(1.7 * i)); });
  EXPECT_LE(count(noisy_speculated), bound);
  EXPECT_GE(count(noisy_speculated, steps - 2 * 65), 2);
}

// The plain price is learned only from wholly plain steps. A curve that prices plain steps at more than they cost
// (here 10 ms for a 3 ms step, as a start-up measurement on a busy machine did at batch 4) makes speculation look
// worth it from the first step; without plain steps nothing would correct that. Plain probes measure it, and the
// policy then decodes plainly (but for its speculation probes), as it should: 1 token per 3 ms beats 3 per 11.
TEST(Scheduler, APlainPriceTooHighIsMeasuredAndSpeculationStopsWhereItLoses) {
  const CostModel curve = memory_bound_curve();
  SchedulerState st = one_long_request(curve);
  const int steps = 1000;
  const std::vector<bool> speculated = simulate_policy(st, steps, [](int) { return 0.0; }, -7.0);
  EXPECT_TRUE(speculated.front()) << "the curve made speculation look worth it";
  // One probe: its settling steps are the process's plain warm-up, and the step after them is measured.
  ASSERT_GE(kPlainSettleSteps, kResidualWarmupSteps);
  EXPECT_EQ(st.plain_probe_steps, kPlainSettleSteps + 1);
  EXPECT_NEAR(plain_residual_ms(st, 1), -7.0, 1e-9);
  // Once measured, speculation runs only in its probes: at most one step in max_probe_interval + 1.
  EXPECT_LE(count(speculated, steps - 400), 400 / (st.config.max_probe_interval + 1) + 1);
  // The same curve where plain steps cost what it says: speculation pays and runs but for the plain probes,
  // which stop once the bucket is measured and then refresh it every plain_refresh_steps(gain) steps, here
  // gain = 3 tokens per 5-row round against 1 per plain step, less 1.
  SchedulerState fair = one_long_request(curve);
  const std::vector<bool> fair_speculated = simulate_policy(fair, steps, [](int) { return 0.0; });
  const double gain = 3 / step_cost_ms(curve, 1, 5, 1) * step_cost_ms(curve, 1, 1, 0) - 1;
  ASSERT_GT(plain_refresh_steps(fair.config, gain), 100);
  EXPECT_LE(fair.plain_probe_steps,
            (kPlainSettleSteps + 1) * (1 + steps / plain_refresh_steps(fair.config, gain)));
  EXPECT_EQ(count(fair_speculated), steps - int(fair.plain_probe_steps));
  // Off: nothing measures the plain price, and speculation runs every step.
  SchedulerState off = one_long_request(curve);
  off.config.plain_probe_interval = 0;
  EXPECT_EQ(count(simulate_policy(off, steps, [](int) { return 0.0; }, -7.0)), steps);
  EXPECT_EQ(off.plain_probe_steps, 0);
}

// A plain price learned under conditions that pass: the first decode steps after a prefill can cost twice the
// steady ones (cache-resident weights on a big-L3 Xeon), so a bucket's plain residual learned from its first plain
// steps priced plain decoding ~30% high there, and speculation that lost ran for the rest of the phase. Now the
// price is re-measured after plain_refresh_steps(gain) speculating steps, and the re-measurement keeps only the
// window's newest value beside it, so one plain probe corrects it (four would have been needed to outvote four
// transient values) and speculation stops where it loses.
TEST(Scheduler, APlainPriceLearnedInATransientIsReMeasuredAndReplaced) {
  const CostModel curve = memory_bound_curve();  // plain 10 ms, a 5-row round 11.125 ms for 3 tokens
  SchedulerState st = one_long_request(curve);
  st.config.probe_interval = 0;  // no exploration: the plain steps below are the policy's own
  st.seqs[0].tokens_per_round = 1.05;  // kept plain at first (an unlucky start), so plain steps are learned...
  // ...while they cost what the curve says (the transient); steadily, plain steps cost 7 ms less.
  std::vector<bool> speculated = simulate_policy(
      st, 6, [](int) { return 0.0; }, [](int) { return 0.0; });
  EXPECT_EQ(count(speculated), 0);
  EXPECT_EQ(st.plain_residual[0].count, 6 - kResidualWarmupSteps);
  EXPECT_NEAR(plain_residual_ms(st, 1), 0.0, 1e-12);
  // Acceptance recovers: rounds emit 3 tokens, the priced plain step (10 ms) loses to them (3 per 11.125 ms),
  // though plain steps now cost 3 ms: 1 per 3 ms beats 3 per 11.125.
  st.seqs[0].tokens_per_round = 3.0;
  const double modelled_gain = 3 / step_cost_ms(curve, 1, 5, 1) * step_cost_ms(curve, 1, 1, 0) - 1;
  const int refresh = plain_refresh_steps(st.config, modelled_gain);
  ASSERT_GT(refresh, st.config.plain_probe_interval);
  speculated = simulate_policy(
      st, refresh + 200, [](int) { return 0.0; }, [](int) { return -7.0; });
  EXPECT_EQ(count(speculated, 0), refresh + ResidualWindow::kSize / 2 + 1)
      << "it speculates until the plain price is re-measured, and until the rounds' residual (learned against the "
         "old plain price) has caught up with the new one";
  EXPECT_EQ(st.plain_probe_steps, kPlainSettleSteps + 1) << "one probe: its settling steps and the measured one";
  EXPECT_NEAR(plain_residual_ms(st, 1), -7.0, 1e-9) << "one re-measurement replaces the transient's values";
  EXPECT_NEAR(draft_residual_ms(st, 1), 7.0, 1e-9);
  EXPECT_EQ(count(speculated, refresh + kPlainSettleSteps + 1 + ResidualWindow::kSize / 2 + 1), 0)
      << "then it decodes plainly, as it should";
}

// What a Xeon with a big L3 did under serving load: a plain step right after a round cost 5-10% more than a
// settled one, and the next two a little more still. Learned from those steps (a plain probe right after a streak
// of rounds is one), the plain price read high where speculation ran, and rounds that lost to settled plain
// decoding looked even. Here rounds cost 31 ms for 3 tokens (10.4 a token) against 10 ms for a settled plain step,
// and the first kPlainSettleSteps plain steps after a round cost 25 ms more: only settled steps teach the plain
// price, so the policy decodes plainly but for its exploration probes.
TEST(Scheduler, PlainStepsStillPayingForTheRoundsBeforeThemDoNotSetThePlainPrice) {
  const CostModel curve = memory_bound_curve();  // plain 10 ms, a 5-row round 11.125 ms for 3 tokens
  SchedulerState st = one_long_request(curve);
  int plain_since_round = kPlainSettleSteps;  // a fresh process is settled
  const int steps = 1000;
  const std::vector<bool> speculated = simulate_policy(
      st, steps,
      [&](int) {
        plain_since_round = 0;
        return 20.0;
      },
      [&](int) { return ++plain_since_round <= kPlainSettleSteps ? 25.0 : 0.0; });
  EXPECT_NEAR(plain_residual_ms(st, 1), 0.0, 1e-9) << "the settled plain price";
  EXPECT_NEAR(draft_residual_ms(st, 1), 20.0, 1e-9);
  // Over the last 600 steps only exploration rounds, at most one every max_probe_interval + 1 steps.
  EXPECT_LE(count(speculated, steps - 600), 600 / (st.config.max_probe_interval + 1) + 1);
  EXPECT_GE(count(speculated, steps - 600), 1) << "still exploring";
}

// Rounds and plain steps that alternate (a busy batch whose requests speculate by turns) leave no settled plain
// step to teach the plain price. It is still refreshed: unsettled plain steps do not restart the count of
// speculating steps toward a plain probe (they did, so the price went unrefreshed for as long as the alternation
// lasted).
TEST(Scheduler, APlainPriceIsRefreshedWhereRoundsAndPlainStepsAlternate) {
  const CostModel curve = memory_bound_curve();
  SchedulerState st = one_long_request(curve);  // 3 tokens per round: speculation pays
  for (int i = 0; i < kResidualWarmupSteps + 1; ++i) {  // a measured plain price
    StepObservation o;
    o.batch = 1, o.modelled_ms = 10.0, o.actual_ms = 10.0;
    observe_step(st, o);
  }
  ASSERT_EQ(st.plain_residual[0].count, 1);
  const double gain = 3 / step_cost_ms(curve, 1, 5, 1) * step_cost_ms(curve, 1, 1, 0) - 1;
  const int refresh = plain_refresh_steps(st.config, gain);
  int plain_probe_steps = 0, first_probe = -1;
  for (int i = 0; i < 2 * refresh + 40; ++i) {
    Plan p = schedule(st);
    ASSERT_EQ(p.decode.size(), 1u);
    if (p.plain_probe) {
      ++plain_probe_steps;
      if (first_probe < 0) first_probe = i;
    } else if (i % 2 == 1 && st.plain_probe_left == 0) {
      p.decode[0].speculate = false;  // every other step runs plain, for reasons outside this request's price
    }
    SeqOutcome o;
    o.id = p.decode[0].id, o.speculated = p.decode[0].speculate;
    o.committed = o.tokens_emitted = o.speculated ? 3 : 1;
    o.tree_nodes = o.speculated ? 4 : 0;
    update(st, p, {o});
  }
  EXPECT_EQ(plain_probe_steps, kPlainSettleSteps + 1) << "one whole probe";
  EXPECT_NEAR(first_probe, 2 * refresh, 2) << "after refresh speculating steps, one every other step";
}

// The refresh interval: every plain_probe_interval speculating steps where the gain is marginal, (kPlainSettleSteps
// + 1) * gain / kPlainProbeBudget steps above that (a probe's steps each cost about the gain), at most
// kPlainRefreshSteps.
TEST(Scheduler, APlainPriceIsReMeasuredSoonerTheCloserTheDecision) {
  SchedulerConfig c;
  constexpr int kProbeSteps = kPlainSettleSteps + 1;
  EXPECT_EQ(plain_refresh_steps(c, -0.2), c.plain_probe_interval);
  EXPECT_EQ(plain_refresh_steps(c, 0.001), c.plain_probe_interval);
  EXPECT_EQ(plain_refresh_steps(c, 0.1), int(kProbeSteps * 0.1 / kPlainProbeBudget));
  EXPECT_EQ(plain_refresh_steps(c, 0.25), int(kProbeSteps * 0.25 / kPlainProbeBudget));
  EXPECT_EQ(plain_refresh_steps(c, 5.0), kPlainRefreshSteps);
  // A policy at a marginal gain (3 tokens per round against 2.5-ish plain tokens' worth of time) re-measures the
  // plain price every plain_probe_interval speculating steps, and only then.
  CostModel curve = memory_bound_curve();
  curve.ms = {10, 13, 20, 24, 30, 10, 13, 20, 24, 30};  // a 5-row round 21 ms + 0.5 for 3 tokens: gain 40%
  curve.validate();
  SchedulerState st = one_long_request(curve);
  const double gain = 3 / step_cost_ms(curve, 1, 5, 1) * step_cost_ms(curve, 1, 1, 0) - 1;
  ASSERT_NEAR(gain, 0.395, 0.01);
  const std::vector<bool> speculated = simulate_policy(st, 1000, [](int) { return 0.0; });
  const int refresh = plain_refresh_steps(st.config, gain);
  EXPECT_EQ(refresh, int(kProbeSteps * gain / kPlainProbeBudget));
  // One plain probe measures it (its settling steps are the process's plain warm-up), then one per refresh.
  ASSERT_GE(kPlainSettleSteps, kResidualWarmupSteps);
  const int measured_after = st.config.plain_probe_interval + kProbeSteps;
  const int expected = kProbeSteps * (1 + (1000 - measured_after) / (refresh + kProbeSteps));
  EXPECT_EQ(st.plain_probe_steps, expected);
  EXPECT_EQ(count(speculated), 1000 - expected);
}

// The mirror image: a curve that overprices rounds (their k > 1 points timed while the machine was busy) says
// speculation does not pay where it does. Probes measure rounds far cheaper than the curve; the learned residual
// must be able to lower the price (never below a plain step's), or speculation stays off for good.
TEST(Scheduler, ACurveThatOverpricesRoundsDoesNotKeepSpeculationOff) {
  CostModel curve;
  curve.batches = {1, 8};
  curve.tokens = {1, 2, 4, 8, 16};
  curve.ms = {10, 25, 30, 35, 40, 10, 25, 30, 35, 40};  // a 5-row round priced 31.25 ms + F for 3 tokens: off
  curve.fixed_ms_by_batch = {0.5, 1.0};
  curve.validate();
  SchedulerState st = one_long_request(curve);
  // Real rounds cost 12 ms: 3 tokens per 12 ms beats 1 per 10.
  const double modelled_round = step_cost_ms(curve, 1, 5, 1, 0);
  const std::vector<bool> speculated = simulate_policy(st, 600, [&](int) { return 12.0 - modelled_round; });
  EXPECT_FALSE(speculated.front()) << "the curve kept speculation off at first";
  EXPECT_GE(count(speculated, 400), 195) << "probes found rounds cheaper and speculation came back";
  EXPECT_LT(draft_residual_ms(st, 1), 0);
}

// A probe that finds the estimate too pessimistic keeps the interval short.
TEST(Scheduler, ProbeIntervalResetsWhenAProbeFindsRoundsCheaper) {
  const CostModel curve = memory_bound_curve();
  SchedulerState st = one_long_request(curve);
  simulate_policy(st, 300, [](int) { return 40.0; });
  ASSERT_EQ(st.probe_interval, 64);
  simulate_policy(st, 400, [](int) { return 0.2; });
  EXPECT_EQ(st.probe_interval, st.config.probe_interval);
  EXPECT_TRUE(schedule(st).policy_speculates);
}

// "Clearly cheaper" is beyond a step's noise. Rounds that cost a little more than the curve says (a small positive
// estimate) were "found 25% cheaper" by any probe whose step ran a few percent fast, and the interval went back to 8
// after such probes (gaps of 9 steps between exploration rounds in a batch-8 serve run). Now a probe must also beat
// the estimate by 5% of the step's modelled cost per drafting request.
TEST(Scheduler, AProbeThatRanAFewPercentFastDoesNotResetTheInterval) {
  const CostModel curve = memory_bound_curve();
  auto observe = [](SchedulerState& st, int drafting, double modelled, double actual, bool probe) {
    StepObservation o;
    o.batch = 1, o.drafting = drafting, o.probe = probe, o.modelled_ms = modelled, o.actual_ms = actual;
    o.modelled_plain_ms = 10.0;
    observe_step(st, o);
  };
  SchedulerState st = one_long_request(curve);
  for (int i = 0; i < kResidualWarmupSteps + 1; ++i) observe(st, 0, 10.0, 10.0, false);
  for (int i = 0; i < kResidualWarmupSteps + 5; ++i) observe(st, 1, 11.0, 11.3, false);  // rounds 0.3 ms dear
  ASSERT_NEAR(draft_residual_ms(st, 1), 0.3, 1e-9);
  st.probe_interval = 32;
  observe(st, 1, 11.0, 11.0, true);  // 0.3 ms (3%) under: noise
  EXPECT_EQ(st.probe_interval, 64);
  observe(st, 1, 11.0, 10.3, true);  // 1 ms (9%) under: clearly cheaper
  EXPECT_EQ(st.probe_interval, st.config.probe_interval);
}

// Rounds the policy chooses by price restart exploration's countdown, not its interval. Under serving load a busy
// batch's marginal requests speculate now and then; each such round used to reset the interval to probe_interval,
// so probes that kept confirming speculation did not pay there came every 8-16 steps instead of every 64 (30-45
// exploration rounds in 900 steps of a batch-8 serve run, each losing to a plain step).
TEST(Scheduler, RoundsChosenByPriceRestartTheCountdownNotTheInterval) {
  const CostModel curve = memory_bound_curve();
  SchedulerState st = one_long_request(curve);
  st.probe_interval = st.config.max_probe_interval;  // grown by probes that confirmed the estimate
  st.steps_without_draft = 40;
  const Plan p = schedule(st);  // 3 tokens per round: pays on the curve
  ASSERT_TRUE(p.policy_speculates);
  ASSERT_FALSE(p.probe);
  SeqOutcome o;
  o.id = p.decode[0].id, o.speculated = true, o.committed = o.tokens_emitted = 3, o.tree_nodes = 4;
  update(st, p, {o});
  EXPECT_EQ(st.steps_without_draft, 0);
  EXPECT_EQ(st.probe_interval, st.config.max_probe_interval);
}

TEST(Scheduler, MovingAveragesFollowTheOutcomes) {
  SchedulerState st = make_state(1, 64, 100000);
  SeqView s = seq(1, 4, 100);
  s.phase = Phase::Decode;
  s.prefilled = s.context_len = 4;
  st.seqs.push_back(s);
  ASSERT_EQ(st.config.prior_rounds, 2);
  for (int n = 1; n <= 50; ++n) {
    Plan p = schedule(st);
    SeqOutcome o;
    o.id = 1;
    o.speculated = true;
    o.tokens_emitted = 3;
    o.committed = 3;
    o.tree_nodes = 10;
    update(st, p, {o});
    if (n <= 8) {
      // The prior (2.5 tokens, 4 nodes) counts as two rounds: the average is the mean over them and the rounds.
      EXPECT_NEAR(st.seqs[0].tokens_per_round, (2 * 2.5 + n * 3.0) / (2 + n), 1e-9) << n;
      EXPECT_NEAR(st.seqs[0].nodes_per_round, (2 * 4.0 + n * 10.0) / (2 + n), 1e-9) << n;
    }
  }
  // From the 9th round on, 1 / (2 + n) < ema_weight: each round weighs 0.1.
  EXPECT_NEAR(st.seqs[0].tokens_per_round, 3.0 - 0.5 * 2 / 10 * std::pow(0.9, 42), 1e-9);
  EXPECT_NEAR(st.seqs[0].nodes_per_round, 10.0 - 6.0 * 2 / 10 * std::pow(0.9, 42), 1e-9);
  // The class's averages: a pseudo-count mean until 1 / (2 + n) < class_ema_weight (0.02), from the 49th round.
  EXPECT_NEAR(st.class_tokens_per_round[0], 3.0 - 0.5 * 2 / 50 * std::pow(0.98, 2), 1e-9);
  EXPECT_EQ(st.class_rounds[0], 50);
  EXPECT_EQ(st.seqs[0].rounds, 50);
  EXPECT_EQ(st.seqs[0].context_len, 4 + 50 * 3);
}

// A new request starts from its class's averages: where the class's trees have 2 nodes (a busy batch's price),
// it is not priced as if it would grow the prior's 4, and its own first round moves its price by a third.
TEST(Scheduler, ANewRequestStartsFromItsClassAndItsFirstRoundsWeighMore) {
  const CostModel curve = serving_curve();
  SchedulerState st = make_state(2, 64, 100000);
  st.config.cost = &curve;
  for (RequestId id : {1, 2}) {
    SeqView s = seq(id, 4, 100);
    s.adaptive = true;
    s.phase = Phase::Decode;
    s.prefilled = s.context_len = 4;
    st.seqs.push_back(s);
  }
  st.class_tokens_per_round[0] = 2.0;
  st.class_nodes_per_round[0] = 2.0;
  st.class_rounds[0] = 100;
  const Plan p = schedule(st);
  EXPECT_EQ(p.decode[1].priced_rows, 3) << "priced with the class's 2 nodes";
  SeqOutcome round{1, 0, 3, true, 3, 2, false};  // 3 tokens from 2 nodes
  SeqOutcome plain{2, 0, 1, false, 1, 0, false};
  update(st, p, {round, plain});
  EXPECT_NEAR(st.seqs[0].tokens_per_round, (2 * 2.0 + 3) / 3, 1e-9) << "the class prior counts as two rounds";
  EXPECT_NEAR(st.seqs[0].nodes_per_round, 2.0, 1e-9);
  EXPECT_EQ(st.seqs[1].rounds, 0);
  EXPECT_EQ(st.seqs[1].tokens_per_round, 0) << "not measured: priced from the class";
  EXPECT_NEAR(st.class_tokens_per_round[0], 0.98 * 2.0 + 0.02 * 3, 1e-9);
}

// A round emits at most the tokens a request may still emit: its price counts no more, and with one left it
// decodes plainly (the bonus token is all a round could keep), even where speculation pays.
TEST(Scheduler, TheTokensLeftCapARoundsPriceAndOneLeftDecodesPlainly) {
  CostModel curve;
  curve.batches = {1, 8};
  curve.tokens = {1, 2, 4, 8, 16};
  curve.ms = {10, 10, 10.5, 11, 12, 10, 11, 12, 14, 18};  // memory-bound: speculation pays
  curve.fixed_ms_by_batch = {0.5, 1.0};
  curve.validate();
  SchedulerState st = adaptive_decoding(3, 8, curve, 3.5, 3);
  st.seqs[1].tokens_left = 2;
  st.seqs[2].tokens_left = 1;
  const Plan p = schedule(st);
  ASSERT_EQ(p.decode.size(), 3u);
  EXPECT_TRUE(p.decode[0].speculate);
  EXPECT_DOUBLE_EQ(p.decode[0].priced_tokens, 3.5);
  EXPECT_DOUBLE_EQ(p.decode[1].priced_tokens, 2.0) << "two left: a round emits at most two";
  EXPECT_FALSE(p.decode[2].speculate) << "one left";
  EXPECT_EQ(p.decode[2].priced_rows, 0) << "not a candidate";
  // The engine reports what is left after each step.
  Plan q = schedule(st);
  std::vector<SeqOutcome> out(3);
  for (int i = 0; i < 3; ++i) out[i].id = st.seqs[i].id, out[i].committed = 1, out[i].tokens_left = 5 - i;
  update(st, q, out);
  EXPECT_EQ(st.seqs[0].tokens_left, 5);
  EXPECT_EQ(st.seqs[2].tokens_left, 3);
}

// The plan says what an adaptive request was priced at (the debug line prints it): its own averages once measured,
// the prior before, the optimistic probe price once it went probe_interval plain steps without a round; a request
// outside the policy is not priced.
TEST(Scheduler, ThePlanRecordsWhatEachAdaptiveRequestWasPricedAt) {
  const CostModel curve = serving_curve();
  SchedulerState st = adaptive_decoding(3, 8, curve, 1.5, 3.2);
  st.seqs[1].tokens_per_round = st.seqs[1].nodes_per_round = 0;  // not measured yet
  st.seqs[2].steps_since_round = st.config.probe_interval;        // due a probe
  st.seqs.push_back(st.seqs[0]);
  st.seqs.back().id = 4;
  st.seqs.back().adaptive = false;
  const Plan p = schedule(st);
  ASSERT_EQ(p.decode.size(), 4u);
  EXPECT_DOUBLE_EQ(p.decode[0].priced_tokens, 1.5);
  EXPECT_EQ(p.decode[0].priced_rows, 4) << "1 + nodes rounded";
  EXPECT_DOUBLE_EQ(p.decode[1].priced_tokens, st.config.prior_tokens_per_round[0]);
  EXPECT_EQ(p.decode[1].priced_rows, 1 + std::min(st.seqs[1].node_cap, st.config.block_size / 2));
  EXPECT_DOUBLE_EQ(p.decode[2].priced_tokens, st.config.prior_tokens_per_round[0]) << "optimistic when due a probe";
  EXPECT_EQ(p.decode[3].priced_rows, 0);
  EXPECT_EQ(p.decode[3].priced_tokens, 0);
}

// Under load a poor request's optimistic probe rounds are losing rounds: bench serve at batch 7-8 ran one every
// probe_interval plain steps per request, priced at the prior's 2.5 tokens, emitting 1.75. Now a probe is priced at
// its class's E (the prior only before the class has rounds), and each probe that falls short of that price
// doubles the request's interval, up to max_probe_interval; a probe that meets it, or a round chosen by the
// request's own price, starts the interval over.
TEST(Scheduler, ARequestWhoseProbesFallShortIsProbedLessAndLessOften) {
  const CostModel curve = serving_curve();
  // At batch 16, a request averaging 1.5 tokens per round is kept off, and a class-average round (2.6) pays.
  // Request 2 emits 4 tokens a round and speculates every step, so the policy's own exploration (step 6) never
  // needs to run; the other 14 decode plainly (the load).
  SchedulerState st = kept_off_requests(curve, 100);
  for (size_t i = 2; i < st.seqs.size(); ++i) st.seqs[i].mode = DecodeMode::None;
  for (SeqView& s : st.seqs) s.max_context = 1 << 30;
  st.seqs[1].tokens_per_round = 4;
  st.config.probe_interval = 8;
  st.config.plain_probe_interval = 0;  // no step is observed here: nothing to measure
  st.class_tokens_per_round[0] = 2.6;
  st.class_nodes_per_round[0] = 3;
  st.class_rounds[0] = 1000;  // the class average barely moves with these requests' rounds
  auto step = [&](int emitted) {
    const Plan p = schedule(st);
    std::vector<SeqOutcome> out;
    for (const DecodeWork& d : p.decode) {
      SeqOutcome o;
      o.id = d.id;
      o.speculated = d.speculate;
      o.committed = o.tokens_emitted = d.speculate ? (d.id == st.seqs[0].id ? emitted : 4) : 1;
      o.tree_nodes = d.speculate ? 3 : 0;
      out.push_back(o);
    }
    update(st, p, out);
    EXPECT_TRUE(p.decode[1].speculate);
    EXPECT_FALSE(p.probe);
    return p;
  };
  const Plan first = schedule(st);
  ASSERT_FALSE(first.decode[0].speculate) << "kept off by its own average";
  EXPECT_FALSE(first.decode[0].probe_priced);
  // Its probes fall short of the class's E: they come after 8, 16, 32, 64, 64 plain steps.
  std::vector<int> gaps;
  int since = 0;
  for (int i = 0; i < 400 && gaps.size() < 5; ++i) {
    const double class_tokens = st.class_tokens_per_round[0];
    const Plan p = step(1);
    if (p.decode[0].probe_priced) {
      EXPECT_DOUBLE_EQ(p.decode[0].priced_tokens, class_tokens) << "priced at the class's E";
      EXPECT_TRUE(p.decode[0].speculate) << "a class-average round pays here";
      gaps.push_back(since);
      since = 0;
    } else {
      EXPECT_FALSE(p.decode[0].speculate);
      ++since;
    }
  }
  EXPECT_EQ(gaps, (std::vector<int>{8, 16, 32, 64, 64}));
  EXPECT_EQ(st.seqs[0].probe_interval, st.config.max_probe_interval);
  // A probe that meets its price (the request recovered) starts the interval over.
  for (int i = 0; i < 64 && !schedule(st).decode[0].probe_priced; ++i) step(1);
  ASSERT_TRUE(schedule(st).decode[0].probe_priced);
  ASSERT_LE(schedule(st).decode[0].priced_tokens, 4.0) << "the class's E, pulled toward request 2's 4";
  step(4);
  EXPECT_EQ(st.seqs[0].probe_interval, 0) << "back to probe_interval";
}

TEST(CostModelPolicy, DrafterCostPerBatchIsInterpolatedAndPriced) {
  CostModel c = serving_curve();
  EXPECT_DOUBLE_EQ(c.fixed_cost_ms(1), 1.0);
  EXPECT_DOUBLE_EQ(c.fixed_cost_ms(10), 1.5 + (3.0 - 1.5) * 6 / 12);
  EXPECT_DOUBLE_EQ(c.fixed_cost_ms(100), 9.0);
  // A dearer drafter lowers the node price (the round's fixed cost dilutes it) but makes speculation pay less.
  CostModel dear = c;
  for (double& f : dear.fixed_ms_by_batch) f *= 10;
  EXPECT_LT(adaptive_theta(dear, 16, 3, 2.0), adaptive_theta(c, 16, 3, 2.0));
  EXPECT_TRUE(speculation_pays(c, 1, 8, 2.0));
  EXPECT_FALSE(speculation_pays(dear, 1, 8, 1.5));
  CostModel wrong = c;
  wrong.fixed_ms_by_batch.pop_back();
  EXPECT_THROW(wrong.validate(), Error);
}

}  // namespace
}  // namespace ts::sched
