#pragma once
// The rounds waiting for the solver workers, held by the server's I/O
// thread (server.cpp). Each worker has one FIFO queue per peer, and the
// peers with waiting rounds take turns: a worker that frees up takes the
// first round of the next peer in its ring, so a peer that sends fifty
// rounds delays another's one by one round, not by fifty. A session's
// rounds all go to one worker and come from one peer, so they stay in
// order.
//
// Bounds, checked when a round arrives: rounds and bytes per peer (over all
// workers) and bytes in all. A round past one is refused (the caller
// answers ResourceExhausted with a retry hint) and nothing is queued.
//
// Header only and free of ZeroMQ, so the policy is tested on its own
// (tests/service/round_queue_test.cpp).

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace placer::service {

struct queue_limits {
  std::size_t peer_rounds = 8;                  ///< rounds one peer may have waiting
  std::size_t peer_bytes = std::size_t{256} << 20;  ///< their bytes
  std::size_t total_bytes = std::size_t{1} << 30;   ///< every peer's waiting bytes
};

enum class admission { queued, peer_rounds, peer_bytes, total_bytes };

template <class Item>
class round_queue {
 public:
  using clock = std::chrono::steady_clock;

  round_queue(std::size_t workers, queue_limits limits) : workers_(workers), limits_(limits) {}

  /// Queues `item` (`bytes` long) from `peer` for `worker`, unless a bound
  /// would be passed; then says which, and `item` is untouched.
  admission push(std::size_t worker, std::string const& peer, std::size_t bytes, Item&& item,
                 clock::time_point now = clock::now()) {
    auto& load = load_[peer];
    admission verdict = admission::queued;
    if (load.rounds + 1 > limits_.peer_rounds) {
      verdict = admission::peer_rounds;
    } else if (load.bytes + bytes > limits_.peer_bytes) {
      verdict = admission::peer_bytes;
    } else if (bytes_ + bytes > limits_.total_bytes) {
      verdict = admission::total_bytes;
    }
    if (verdict != admission::queued) {
      if (load.rounds == 0) load_.erase(peer);
      return verdict;
    }
    ++load.rounds;
    load.bytes += bytes;
    bytes_ += bytes;
    ++rounds_;
    auto& w = workers_[worker];
    auto& q = w.peers[peer];
    if (q.empty()) w.ring.push_back(peer);
    q.push_back({std::move(item), bytes, now});
    ++w.queued;
    return verdict;
  }

  /// The next round for `worker`: the first of the peer whose turn it is.
  std::optional<Item> pop(std::size_t worker) {
    auto& w = workers_[worker];
    if (w.ring.empty()) return std::nullopt;
    std::string peer = std::move(w.ring.front());
    w.ring.pop_front();
    auto found = w.peers.find(peer);
    auto& q = found->second;
    entry e = std::move(q.front());
    q.pop_front();
    if (q.empty()) {
      w.peers.erase(found);
    } else {
      w.ring.push_back(peer);  // its next round waits for the others' turns
    }
    --w.queued;
    forget(peer, e.bytes);
    return std::move(e.item);
  }

  /// Removes every waiting round `pred` is true of (the rounds of a peer
  /// that has gone); returns how many.
  template <class Pred>
  std::size_t drop_if(Pred&& pred) {
    std::size_t dropped = 0;
    for (auto& w : workers_) {
      for (auto it = w.peers.begin(); it != w.peers.end();) {
        auto& q = it->second;
        for (auto e = q.begin(); e != q.end();) {
          if (!pred(static_cast<Item const&>(e->item))) {
            ++e;
            continue;
          }
          forget(it->first, e->bytes);
          --w.queued;
          ++dropped;
          e = q.erase(e);
        }
        if (q.empty()) {
          w.ring.erase(std::find(w.ring.begin(), w.ring.end(), it->first));
          it = w.peers.erase(it);
        } else {
          ++it;
        }
      }
    }
    return dropped;
  }

  [[nodiscard]] std::size_t queued(std::size_t worker) const { return workers_[worker].queued; }
  [[nodiscard]] std::size_t rounds() const { return rounds_; }
  [[nodiscard]] std::size_t bytes() const { return bytes_; }
  /// Peers with rounds waiting (their bookkeeping goes with their last round).
  [[nodiscard]] std::size_t peers() const { return load_.size(); }
  /// When the longest-waiting round for `worker` arrived.
  [[nodiscard]] std::optional<clock::time_point> oldest(std::size_t worker) const {
    std::optional<clock::time_point> t;
    for (auto const& [peer, q] : workers_[worker].peers) {
      if (!t || q.front().since < *t) t = q.front().since;
    }
    return t;
  }

 private:
  /// One of `peer`'s rounds, `bytes` long, leaves the queue.
  void forget(std::string const& peer, std::size_t bytes) {
    --rounds_;
    bytes_ -= bytes;
    auto load = load_.find(peer);
    --load->second.rounds;
    load->second.bytes -= bytes;
    if (load->second.rounds == 0) load_.erase(load);
  }
  struct entry {
    Item item;
    std::size_t bytes;
    clock::time_point since;
  };
  struct per_worker {
    std::map<std::string, std::deque<entry>> peers;  ///< each peer's waiting rounds, oldest first
    std::deque<std::string> ring;                     ///< peers with rounds waiting, in turn order
    std::size_t queued = 0;
  };
  struct peer_load {
    std::size_t rounds = 0, bytes = 0;
  };
  std::vector<per_worker> workers_;
  std::map<std::string, peer_load> load_;
  queue_limits limits_;
  std::size_t rounds_ = 0, bytes_ = 0;
};

}  // namespace placer::service
