#pragma once
// Intra-op threads: a team of threads that one replica's large operations split over (the
// intra-op pool of TensorFlow and PyTorch). A strategy gives each replica thread a team when
// the replicas leave cores idle (OneDevice on a many-core CPU), and binds it to that thread
// while the replica runs a task; CpuBackend::gemm then splits the output columns of a product
// large enough to pay for the hand-off over the team. Without a bound team, or with a team
// of one, every operation runs on the calling thread exactly as before.
//
// The team is type-erased here (comm::ThreadGroup provides it) so that core/ depends on
// nothing above it. One indirect call per split operation; the parts are fully typed.

#include <algorithm>
#include <cstddef>
#include <thread>
#include <utility>

#if defined(__linux__)
#include <sched.h>
#endif

namespace strata {

// The cores this process may run on (its CPU affinity: a container's or taskset's limit),
// at least 1.
inline int available_cores() {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
#endif
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

struct IntraOpTeam {
  int threads = 1;  // the calling thread included
  void* owner = nullptr;
  // Calls invoke(task, p) for every p in [0, parts), p = 0 on the calling thread; returns
  // when all are done.
  void (*run)(void* owner, int parts, void* task, void (*invoke)(void*, int)) = nullptr;
};

namespace detail {
inline thread_local IntraOpTeam const* bound_intra_op_team = nullptr;
}  // namespace detail

// The team bound to this thread, or nullptr.
[[nodiscard]] inline IntraOpTeam const* intra_op_team() { return detail::bound_intra_op_team; }

// Binds `team` (may be nullptr) to the calling thread for the scope's duration.
class IntraOpBinding {
 public:
  explicit IntraOpBinding(IntraOpTeam const* team)
      : previous_(std::exchange(detail::bound_intra_op_team, team)) {}
  IntraOpBinding(IntraOpBinding const&) = delete;
  IntraOpBinding& operator=(IntraOpBinding const&) = delete;
  ~IntraOpBinding() { detail::bound_intra_op_team = previous_; }

 private:
  IntraOpTeam const* previous_;
};

// How many parts `units` of work split into on the bound team, each of at least `min_units`
// units: 1 without a team. A function of the work and the team's size only, so a run's
// arithmetic is the same every time.
inline int intra_op_parts(int units, int min_units) {
  IntraOpTeam const* team = intra_op_team();
  if (!team || team->threads < 2) return 1;
  return std::max(1, std::min(team->threads, units / min_units));
}

// Calls part(p) for every p in [0, parts) on the bound team (thread t takes t, t + threads,
// ...; p = 0 on this thread), or all on this thread when none is bound.
template <class Part>
void run_intra_op(int parts, Part&& part) {
  IntraOpTeam const* team = intra_op_team();
  if (!team || team->threads < 2 || parts < 2) {
    for (int p = 0; p < parts; ++p) part(p);
    return;
  }
  int const threads = std::min(parts, team->threads);
  auto strided = [&](int t) {
    for (int p = t; p < parts; p += threads) part(p);
  };
  IntraOpBinding const busy(nullptr);  // a split inside a part runs on its own thread: the team is taken
  team->run(team->owner, threads, &strided, [](void* f, int t) { (*static_cast<decltype(strided)*>(f))(t); });
}

// The first column and the count of part p when `columns` are split into `parts` in order.
template <class N>
struct Range {
  N first = 0, count = 0;
};
template <class N>
Range<N> split_evenly(N units, int parts, int p) {
  N const base = units / N(parts), extra = units % N(parts), q = N(p);
  return {q * base + std::min(q, extra), base + (q < extra ? N(1) : N(0))};
}
using ColumnRange = Range<int>;
inline ColumnRange split_columns(int columns, int parts, int p) { return split_evenly(columns, parts, p); }

// Element-wise work (a layer's activation, a bias, a rounding pass) on a large batch is split
// over the bound team too, from this many floats: below it the hand-off costs more than the
// second core gains. (Each part computes its own elements, so the bits do not depend on the split.)
inline constexpr int min_split_floats = 1 << 16;

// Calls part(first, count) over [0, units) split in order into parts of at least
// `min_units` on the bound team (or once, with all of them, without one).
template <class Part>
void run_split(int units, int min_units, Part&& part) {
  int const parts = intra_op_parts(units, std::max(1, min_units));
  run_intra_op(parts, [&](int p) {
    auto const [first, count] = split_columns(units, parts, p);
    part(first, count);
  });
}

// The same over the columns of a rows x columns element-wise operation, from min_split_floats.
template <class Part>
void run_split_columns(int rows, int columns, Part&& part) {
  run_split(columns, min_split_floats / std::max(1, rows), std::forward<Part>(part));
}

// The same over n floats of one array: part(begin, count), from min_split_floats.
template <class Part>
void run_split_floats(std::size_t n, Part&& part) {
  std::size_t const units = std::min<std::size_t>(n / min_split_floats, std::size_t(1) << 20);
  int const parts = intra_op_parts(int(units), 1);
  run_intra_op(parts, [&](int p) {
    auto const [begin, count] = split_evenly(n, parts, p);
    part(begin, count);
  });
}

}  // namespace strata
