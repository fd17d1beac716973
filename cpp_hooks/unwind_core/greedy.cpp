#include "unwind_core/greedy.hpp"

#include <algorithm>
#include <functional>
#include <optional>
#include <queue>
#include <unordered_map>

namespace popart_unwind::core {

// -- the analysis ------------------------------------------------------------------------
Analysis::Analysis(const Graph &g) : graph(g) {
  const int n = g.size();
  length.assign(n, 0);
  for (int t = n - 1; t >= 0; --t) {
    int longest = -1;
    for (int user : g.consumers(t))
      longest = std::max(longest, length[user]);
    length[t] = 1 + longest;
  }
  back.resize(n);
  ancestors.resize(n);
  forward.resize(n);
  for (int t = 0; t < n; ++t) {
    forward[t] = g.forwardEdges(t);
    if (g.kind(t) == Kind::Sink) {
      back[t].emplace_back(t, Chain(g.shape(t)));
      ancestors[t] = {t};
      sinks.push_back(t);
      continue;
    }
    // The same (sink, chain) reached by two routes is kept once: a copy would plant
    // nothing (the first took every element it reaches), and in a chain of Adds of one
    // weight each tensor met the weight once more than its input did (quadratic memory).
    std::unordered_map<int, std::vector<std::size_t>> kept; // entries of back[t] per sink
    for (auto &[source, route] : g.unwindRoutes(t))
      for (const auto &[sink, chain] : back[source]) {
        Chain through = route.then(chain).canonicalized();
        std::vector<std::size_t> &same = kept[sink];
        if (std::any_of(same.begin(), same.end(),
                        [&](std::size_t i) { return back[t][i].second == through; }))
          continue;
        same.push_back(back[t].size());
        back[t].emplace_back(sink, std::move(through));
      }
    std::vector<int> merged;
    for (int input : g.layoutInputs(t))
      merged.insert(merged.end(), ancestors[input].begin(), ancestors[input].end());
    std::sort(merged.begin(), merged.end());
    merged.erase(std::unique(merged.begin(), merged.end()), merged.end());
    ancestors[t] = std::move(merged);
    if (isDependentRoot(g.kind(t)))
      dependentRoots.push_back(t);
  }
  partners.resize(n);
  const auto &pairs = g.pairs();
  for (int index = 0; index < static_cast<int>(pairs.size()); ++index) {
    partners[pairs[index].a].emplace_back(pairs[index].b, index);
    partners[pairs[index].b].emplace_back(pairs[index].a, index);
  }
  rootsAfter.resize(n);
  for (int root : dependentRoots) {
    const std::vector<int> &mine = ancestors[root];
    auto &rootAims = aims[root];
    bool aiming = false;
    for (const auto &[partner, index] : partners[root]) {
      const double worth = pairs[index].value * static_cast<double>(g.numel(partner));
      std::vector<int> behind;
      for (const auto &entry : back[partner])
        if (!std::binary_search(mine.begin(), mine.end(), entry.first))
          behind.push_back(entry.first);
      std::sort(behind.begin(), behind.end());
      behind.erase(std::unique(behind.begin(), behind.end()), behind.end());
      aiming = aiming || !behind.empty();
      rootAims.emplace_back(worth, std::move(behind));
    }
    if (aiming)
      aimingRoots.push_back(root);
    Index count = 0, sum = 0;
    for (int sink : mine) {
      rootsAfter[sink].push_back(root);
      if (g.numel(sink)) {
        ++count;
        sum += sink;
      }
    }
    pendingAtStart[root] = {count, sum};
  }
}

// -- one run -----------------------------------------------------------------------------
namespace {

// (deferred, -value, -length of the other side, other, known, pair index): smallest first.
using QueueKey = std::tuple<int, double, int, int, int, int>;

class Run {
public:
  Run(const Analysis &analysis, const std::set<int> &deferred, const std::set<int> &late)
      : a_(analysis), g_(analysis.graph), deferred_(deferred), late_(late) {
    const int n = g_.size();
    inward_.resize(n);
    free_.resize(n);
    missing_.resize(n);
    pending_.assign(n, {0, 0});
    plantedBy_.resize(n);
    for (int t = 0; t < n; ++t)
      missing_[t] = g_.numel(t);
    for (const auto &[root, start] : a_.pendingAtStart)
      pending_[root] = start;
    for (int t : a_.sinks)
      if (!complete(t))
        open_.insert(openKey(t));
  }

  RunResult run() {
    for (int t = 0; t < g_.size(); ++t)
      if (g_.kind(t) == Kind::Source || g_.kind(t) == Kind::FixedPoint)
        startRoot(t);
    const auto &pairs = g_.pairs();
    while (true) {
      for (int known : propagate())
        for (const auto &[other, index] : a_.partners[known])
          queue_.emplace(deferred_.count(index) ? 1 : 0, -pairs[index].value, -a_.length[other],
                         other, known, index);
      if (unwindBestPair() || !stack_.empty())
        continue;
      const std::optional<int> sink = sinkToFinalize();
      if (!sink)
        break;
      finalized_.insert(*sink);
      Regions rest = uncovered(*sink);
      insert(Path{*sink, *sink, Chain(g_.shape(*sink)), std::move(rest)});
    }
    return std::move(result_);
  }

private:
  const Analysis &a_;
  const Graph &g_;
  const std::set<int> &deferred_;
  const std::set<int> &late_;
  std::vector<std::vector<Path>> inward_;
  std::vector<std::optional<Regions>> free_;
  std::vector<Index> missing_;
  std::vector<std::pair<Index, Index>> pending_;
  std::vector<std::vector<int>> plantedBy_;
  std::vector<std::pair<int, std::size_t>> stack_; // (tensor, index into inward_)
  std::priority_queue<QueueKey, std::vector<QueueKey>, std::greater<QueueKey>> queue_;
  std::set<int> finalized_;
  // The incomplete sinks by (late, -length, id): the order in which a sink no aim values
  // is finalized, so finding the next needs no pass over every sink.
  std::set<std::tuple<int, int, int>> open_;
  RunResult result_;

  std::tuple<int, int, int> openKey(int t) const {
    return {late_.count(t) ? 1 : 0, -a_.length[t], t};
  }

  bool complete(int t) const { return missing_[t] == 0; }

  const Regions &uncovered(int t) {
    if (!free_[t])
      free_[t] = Regions::of(Region::full(g_.shape(t)));
    return *free_[t];
  }

  void insert(Path path) {
    const int dst = path.dst;
    const bool wasComplete = complete(dst);
    free_[dst] = uncovered(dst).subtract(path.regions);
    missing_[dst] -= path.regions.totalElms();
    inward_[dst].push_back(std::move(path));
    stack_.emplace_back(dst, inward_[dst].size() - 1);
    if (g_.kind(dst) == Kind::Sink && complete(dst)) {
      if (!wasComplete)
        open_.erase(openKey(dst));
      const std::vector<int> &roots = a_.rootsAfter[dst];
      if (!wasComplete)
        for (int root : roots) {
          pending_[root].first -= 1;
          pending_[root].second -= dst;
        }
      for (int root : roots)
        if (pending_[root].first == 0)
          startIfReady(root);
    }
  }

  void startIfReady(int root) {
    if (complete(root) || pending_[root].first != 0)
      return;
    for (int input : g_.tensor(root).inputs)
      if (!complete(input))
        return;
    startRoot(root);
  }

  void startRoot(int t) {
    const Shape &shape = g_.shape(t);
    insert(Path{t, t, Chain(shape), Regions::of(Region::full(shape))});
  }

  std::vector<int> propagate() {
    std::vector<int> extended;
    while (!stack_.empty()) {
      const auto [dst, index] = stack_.back();
      stack_.pop_back();
      extended.push_back(dst);
      // Propagation only inserts into later tensors, so this reference stays valid.
      const Path &path = inward_[dst][index];
      for (int user : g_.consumers(dst))
        extendInto(path, user);
    }
    std::sort(extended.begin(), extended.end());
    extended.erase(std::unique(extended.begin(), extended.end()), extended.end());
    return extended;
  }

  void extendInto(const Path &path, int user) {
    if (isDependentRoot(g_.kind(user))) {
      startIfReady(user);
      return;
    }
    for (const Edge &edge : a_.forward[user]) {
      if (edge.src != path.dst)
        continue;
      Regions regions = edge.chain.apply(path.regions).intersect(uncovered(user));
      if (regions.totalElms())
        insert(Path{path.src, user, path.chain.then(edge.chain).canonicalized(),
                    std::move(regions)});
    }
  }

  bool unwindBestPair() {
    while (!queue_.empty()) {
      if (std::get<0>(queue_.top()) && finalizingPays())
        return false; // only deferred pairs are left: finalize a sink first
      const auto [deferred, value, length, other, known, index] = queue_.top();
      queue_.pop();
      if (plant(known, other, index))
        return true;
      noteBlockers(other, index);
    }
    return false;
  }

  bool plant(int known, int other, int pairIndex) {
    const Regions wanted = uncovered(other);
    if (!wanted.totalElms())
      return false;
    bool planted = false;
    const std::size_t count = inward_[known].size(); // paths planted now are not reused
    for (std::size_t i = 0; i < count; ++i) {
      const int src = inward_[known][i].src;
      const Chain chainIn = inward_[known][i].chain;
      for (const Region &want : wanted.members()) {
        Chain toOther = chainIn;
        toOther.mask(want);
        for (const auto &[sink, toSink] : a_.back[other]) {
          const Chain through = toOther.then(toSink);
          const Regions frees = uncovered(sink);
          for (const Region &free : frees.members()) {
            Chain chain = through;
            chain = chain.mask(free).canonicalized();
            Regions regions = chain.apply(Region::full(g_.shape(src)));
            if (!regions.totalElms())
              continue;
            Path path{src, sink, std::move(chain), std::move(regions)};
            result_.sinkPaths.push_back(path);
            insert(std::move(path));
            plantedBy_[sink].push_back(pairIndex);
            planted = true;
          }
        }
      }
    }
    return planted;
  }

  // The incomplete sink to finalize: not late first, then the best value of finalizing it,
  // then the earliest in the graph, then the lowest id. Only the first is ever used.
  using FinalKey = std::tuple<int, double, int, int>;

  // The same as the least key over every incomplete sink: the sinks an aim values are
  // keyed one by one, the others share value 0, and the first of them in open_ is their
  // least (a pass over every sink per finalization made runs quadratic in the sinks).
  std::optional<FinalKey> bestFinalization() {
    std::unordered_map<int, double> value = finalizingValues();
    std::optional<FinalKey> best;
    for (const auto &[t, v] : value) {
      if (g_.kind(t) != Kind::Sink || complete(t))
        continue;
      const FinalKey key{late_.count(t) ? 1 : 0, -v, -a_.length[t], t};
      if (!best || key < *best)
        best = key;
    }
    for (const auto &[late, negLength, t] : open_) {
      if (value.count(t))
        continue;
      const FinalKey key{late, -0.0, negLength, t};
      if (!best || key < *best)
        best = key;
      break;
    }
    return best;
  }

  std::optional<int> sinkToFinalize() {
    const auto best = bestFinalization();
    if (!best)
      return std::nullopt;
    return std::get<3>(*best);
  }

  bool finalizingPays() {
    const auto best = bestFinalization();
    return best && !std::get<0>(*best) && std::get<1>(*best) < 0;
  }

  std::unordered_map<int, double> finalizingValues() {
    std::unordered_map<int, double> value;
    for (int root : a_.aimingRoots) {
      if (complete(root))
        continue;
      const bool lone = pending_[root].first == 1;
      const int loneSink = static_cast<int>(pending_[root].second);
      for (const auto &[worth, sinks] : a_.aims.at(root)) {
        bool other = false;
        for (int sink : sinks) {
          if (complete(sink))
            continue;
          value[sink] -= worth;
          other = other || sink != loneSink;
        }
        if (lone && other)
          value[loneSink] += worth;
      }
    }
    return value;
  }

  void noteBlockers(int other, int pairIndex) {
    const auto &pairs = g_.pairs();
    for (const auto &entry : a_.back[other]) {
      const int sink = entry.first;
      if (finalized_.count(sink))
        result_.lateSinks.insert(sink);
      for (int planter : plantedBy_[sink])
        if (pairs[planter].value < pairs[pairIndex].value)
          result_.blockers.insert(planter);
    }
  }
};

} // namespace

RunResult greedyRun(const Analysis &analysis, const std::set<int> &deferred,
                    const std::set<int> &late) {
  return Run(analysis, deferred, late).run();
}

} // namespace popart_unwind::core
