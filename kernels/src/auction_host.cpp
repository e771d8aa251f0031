// Host-side parts of the auction shared by both backends: preparation (slot
// CSR, largest value) and the reverse step that ends every epsilon phase.
//
// Why a reverse step: with a "stay pending" option the problem is
// asymmetric, and epsilon-scaling leaves copies that nobody holds at prices
// raised in earlier phases. Optimality needs every unheld copy at price 0
// (complementary slackness). The reverse step (Bertsekas' reverse auction)
// lowers each such copy's price to the level the second-best interested
// bidder would pay, and hands the copy to the best one; each step raises
// that bidder's profit by at least 1, so it terminates, and it keeps
// epsilon-complementary slackness for everyone. It is sequential host code,
// the same for both backends (the CUDA backend copies the state down and
// back once per phase).
#include <placer/kernels/auction.hpp>

#include <algorithm>
#include <climits>
#include <deque>
#include <stdexcept>
#include <vector>

namespace placer::kernels {

std::int64_t auction_prepare(auction_problem const& p, std::int32_t* copy_begin) {
  std::int64_t total = 0;
  copy_begin[0] = 0;
  for (std::int32_t j = 0; j < p.n_objects; ++j) {
    total += p.capacity[j] > 0 ? p.capacity[j] : 0;
    if (total > INT32_MAX) throw std::overflow_error("auction: more than 2^31 object slots");
    copy_begin[j + 1] = static_cast<std::int32_t>(total);
  }
  std::int64_t max_offset = 0;
  std::vector<std::int64_t> row_offset(p.offset != nullptr ? static_cast<std::size_t>(p.n_rows) : 0, LLONG_MIN);
  for (std::int32_t i = 0; i < p.n_bidders && p.offset != nullptr; ++i) {
    max_offset = p.offset[i] > max_offset ? p.offset[i] : max_offset;
    auto& ro = row_offset[static_cast<std::size_t>(p.row_of[i])];
    if (ro != LLONG_MIN && ro != p.offset[i]) {
      throw std::invalid_argument("auction: bidders sharing a row must share their offset");
    }
    ro = p.offset[i];
  }
  std::int64_t max_value = 0;
  std::int64_t const cells = static_cast<std::int64_t>(p.n_rows) * p.n_objects;
  for (std::int64_t c = 0; c < cells; ++c) max_value = p.values[c] > max_value ? p.values[c] : max_value;
  return max_value + 1 + max_offset;
}

void auction_reverse_step(auction_problem const& p, std::int32_t const* copy_begin, std::int64_t* price,
                          std::int32_t* holder, std::int32_t* assigned, std::int64_t scale, std::int64_t eps) {
  std::int32_t const n = p.n_bidders;
  std::int32_t const m = p.n_objects;
  auto value = [&](std::int32_t i, std::int32_t j) -> std::int64_t {
    std::int32_t const v = p.values[static_cast<std::int64_t>(p.row_of[i]) * m + j];
    return v < 0 ? LLONG_MIN : (static_cast<std::int64_t>(v) + 1 + (p.offset ? p.offset[i] : 0)) * scale;
  };
  std::vector<std::int64_t> profit(static_cast<std::size_t>(n), 0);
  std::vector<std::int32_t> copy_of(static_cast<std::size_t>(n), -1);
  std::deque<std::int32_t> queue;
  std::vector<char> queued(static_cast<std::size_t>(m), 0);
  for (std::int32_t j = 0; j < m; ++j) {
    for (std::int32_t c = copy_begin[j]; c < copy_begin[j + 1]; ++c) {
      if (holder[c] >= 0) {
        copy_of[holder[c]] = c;
        profit[holder[c]] = value(holder[c], j) - price[c];
      } else if (price[c] > 0 && !queued[j]) {
        queued[j] = 1;
        queue.push_back(j);
      }
    }
  }
  auto resort = [&](std::int32_t j) {  // insertion sort of j's copies by price
    for (std::int32_t c = copy_begin[j] + 1; c < copy_begin[j + 1]; ++c) {
      for (std::int32_t d = c; d > copy_begin[j] && price[d] < price[d - 1]; --d) {
        std::swap(price[d], price[d - 1]);
        std::swap(holder[d], holder[d - 1]);
      }
    }
    for (std::int32_t c = copy_begin[j]; c < copy_begin[j + 1]; ++c) {
      if (holder[c] >= 0) copy_of[holder[c]] = c;
    }
  };
  while (!queue.empty()) {
    std::int32_t const j = queue.front();
    std::int32_t c = -1;  // the cheapest unheld copy with a positive price
    for (std::int32_t k = copy_begin[j]; k < copy_begin[j + 1]; ++k) {
      if (holder[k] < 0 && price[k] > 0) { c = k; break; }
    }
    if (c < 0) {
      queue.pop_front();
      queued[j] = 0;
      continue;
    }
    std::int64_t b1 = LLONG_MIN, b2 = LLONG_MIN;
    std::int32_t best = -1;
    for (std::int32_t i = 0; i < n; ++i) {
      std::int64_t const a = value(i, j);
      if (a == LLONG_MIN) continue;
      std::int64_t const beta = a - profit[i];
      if (beta > b1) { b2 = b1; b1 = beta; best = i; } else if (beta > b2) { b2 = beta; }
    }
    std::int64_t const floor_price = b2 == LLONG_MIN || b2 - eps < 0 ? 0 : b2 - eps;
    if (best < 0 || b1 <= floor_price) {
      price[c] = floor_price;  // nobody gains from it even at this price
    } else {
      std::int32_t const old = copy_of[best];
      if (old >= 0) {
        holder[old] = -1;
        std::int32_t const oj = assigned[best];
        if (!queued[oj]) { queued[oj] = 1; queue.push_back(oj); }
      }
      holder[c] = best;
      price[c] = floor_price;
      assigned[best] = j;
      profit[best] = value(best, j) - floor_price;
      copy_of[best] = c;
    }
    resort(j);
  }
}

}  // namespace placer::kernels
