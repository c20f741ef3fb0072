// Tables, JSON and the SVG plot for bench serve (live and simulated).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>

#include "bench_serve.h"
#include "core/error.h"

namespace ts::bench {

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = size_t(std::ceil(q * double(v.size())));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

void print_serve_table(const std::vector<ServeRow>& rows) {
  std::printf("%-9s %7s %5s %4s %10s %9s %9s %9s %9s %8s %7s %7s\n", "arm", "rate/s", "reqs", "fail", "goodput",
              "lat_mean", "lat_p99", "ttft_mean", "ttft_p99", "tok/rnd", "tree", "batch");
  for (const ServeRow& r : rows)
    std::printf("%-9s %7.2f %5d %4d %10.1f %9.3f %9.3f %9.3f %9.3f %8.2f %7.2f %7.2f\n", r.arm.c_str(), r.rate,
                r.requests, r.failed, r.goodput_tps, r.mean_latency_s, r.p99_latency_s, r.mean_ttft_s, r.p99_ttft_s,
                r.tokens_per_round, r.mean_tree_size, r.mean_batch);
  // Each arm's goodput as a ratio to the best arm at the same rate (measured side by side in this run).
  std::map<double, double> best;
  for (const ServeRow& r : rows) best[r.rate] = std::max(best[r.rate], r.goodput_tps);
  std::printf("\ngoodput / best arm at that rate:\n");
  for (const ServeRow& r : rows)
    std::printf("  %-9s rate %6.2f: %.3f\n", r.arm.c_str(), r.rate, best[r.rate] > 0 ? r.goodput_tps / best[r.rate] : 0.0);
}

nlohmann::json serve_rows_json(const std::vector<ServeRow>& rows) {
  nlohmann::json a = nlohmann::json::array();
  for (const ServeRow& r : rows)
    a.push_back({{"arm", r.arm}, {"rate", r.rate}, {"requests", r.requests}, {"failed", r.failed},
                 {"goodput_tps", r.goodput_tps}, {"mean_latency_s", r.mean_latency_s},
                 {"p99_latency_s", r.p99_latency_s}, {"mean_ttft_s", r.mean_ttft_s}, {"p99_ttft_s", r.p99_ttft_s},
                 {"tokens_per_round", r.tokens_per_round}, {"mean_tree_size", r.mean_tree_size},
                 {"mean_batch", r.mean_batch}});
  return a;
}

namespace {

const char* arm_color(const std::string& arm) {
  if (arm == "none") return "#7f7f7f";
  if (arm == "chain") return "#1f77b4";
  if (arm == "tree") return "#ff7f0e";
  if (arm == "adaptive") return "#2ca02c";
  return "#9467bd";
}

// One panel: x = rate (log2 axis when the rates span more than 4x), y = value(row).
void panel(std::string& svg, const std::vector<ServeRow>& rows, double (*value)(const ServeRow&), const char* ylabel,
           double x0, double y0, double w, double h) {
  double rmin = 1e300, rmax = 0, vmax = 0;
  for (const ServeRow& r : rows) {
    rmin = std::min(rmin, r.rate);
    rmax = std::max(rmax, r.rate);
    vmax = std::max(vmax, value(r));
  }
  if (rows.empty()) return;
  const bool logx = rmin > 0 && rmax / rmin > 4;
  auto fx = [&](double rate) {
    if (rmax <= rmin) return x0 + w / 2;
    const double t = logx ? std::log(rate / rmin) / std::log(rmax / rmin) : (rate - rmin) / (rmax - rmin);
    return x0 + t * w;
  };
  vmax = vmax > 0 ? vmax * 1.1 : 1;
  auto fy = [&](double v) { return y0 + h - v / vmax * h; };
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='none' stroke='#333'/>\n"
                "<text x='%.1f' y='%.1f' font-size='12' text-anchor='middle' transform='rotate(-90 %.1f %.1f)'>%s</text>\n"
                "<text x='%.1f' y='%.1f' font-size='12' text-anchor='middle'>arrival rate (requests/s%s)</text>\n",
                x0, y0, w, h, x0 - 45, y0 + h / 2, x0 - 45, y0 + h / 2, ylabel, x0 + w / 2, y0 + h + 35,
                logx ? ", log scale" : "");
  svg += buf;
  for (int i = 0; i <= 4; ++i) {
    const double v = vmax * i / 4;
    std::snprintf(buf, sizeof buf,
                  "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#ddd'/>"
                  "<text x='%.1f' y='%.1f' font-size='10' text-anchor='end'>%.3g</text>\n",
                  x0, fy(v), x0 + w, fy(v), x0 - 4, fy(v) + 3, v);
    svg += buf;
  }
  std::vector<double> rates;
  for (const ServeRow& r : rows) rates.push_back(r.rate);
  std::sort(rates.begin(), rates.end());
  rates.erase(std::unique(rates.begin(), rates.end()), rates.end());
  for (double rate : rates) {
    std::snprintf(buf, sizeof buf, "<text x='%.1f' y='%.1f' font-size='10' text-anchor='middle'>%.3g</text>\n", fx(rate),
                  y0 + h + 14, rate);
    svg += buf;
  }
  std::map<std::string, std::vector<const ServeRow*>> by_arm;
  for (const ServeRow& r : rows) by_arm[r.arm].push_back(&r);
  for (auto& [arm, list] : by_arm) {
    std::sort(list.begin(), list.end(), [](auto* a, auto* b) { return a->rate < b->rate; });
    std::string pts;
    for (const ServeRow* r : list) {
      std::snprintf(buf, sizeof buf, "%.1f,%.1f ", fx(r->rate), fy(value(*r)));
      pts += buf;
    }
    svg += "<polyline fill='none' stroke-width='2' stroke='" + std::string(arm_color(arm)) + "' points='" + pts + "'/>\n";
    for (const ServeRow* r : list) {
      std::snprintf(buf, sizeof buf, "<circle cx='%.1f' cy='%.1f' r='3' fill='%s'/>\n", fx(r->rate), fy(value(*r)),
                    arm_color(arm));
      svg += buf;
    }
  }
}

}  // namespace

void write_serve_svg(const std::vector<ServeRow>& rows, const std::string& path, const std::string& title) {
  const double W = 900, H = 420;
  std::string svg = "<svg xmlns='http://www.w3.org/2000/svg' width='900' height='420' font-family='sans-serif'>\n"
                    "<rect width='100%' height='100%' fill='white'/>\n";
  svg += "<text x='450' y='22' font-size='15' text-anchor='middle'>" + title + "</text>\n";
  panel(svg, rows, [](const ServeRow& r) { return r.goodput_tps; }, "goodput (tokens/s)", 70, 50, 330, 300);
  panel(svg, rows, [](const ServeRow& r) { return r.mean_tree_size; }, "mean tree size (draft nodes/round)", 530, 50,
        330, 300);
  std::vector<std::string> arms;
  for (const ServeRow& r : rows)
    if (std::find(arms.begin(), arms.end(), r.arm) == arms.end()) arms.push_back(r.arm);
  for (size_t i = 0; i < arms.size(); ++i) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "<rect x='%.0f' y='%.0f' width='14' height='4' fill='%s'/><text x='%.0f' y='%.0f' font-size='12'>%s</text>\n",
                  70 + 130.0 * i, H - 22, arm_color(arms[i]), 90 + 130.0 * i, H - 16, arms[i].c_str());
    svg += buf;
  }
  svg += "</svg>\n";
  (void)W;
  std::ofstream out(path);
  TS_CHECK(out, "cannot write ", path);
  out << svg;
}

}  // namespace ts::bench
