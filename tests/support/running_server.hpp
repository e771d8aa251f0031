#pragma once
// A real server in a test: an ephemeral loopback port, served from a
// background thread (CPU backend, quiet), stopped with the object.
#include <placer/service/server.hpp>

#include <memory>
#include <string>
#include <thread>

namespace placer::testing_support {

/// A server on an ephemeral loopback port, served from a background thread.
class running_server {
 public:
  explicit running_server(std::size_t max_bytes = service::default_max_message_bytes,
                          std::string endpoint = "tcp://127.0.0.1:*", int workers = 1)
      : running_server([&] {
          service::service_config cfg;
          cfg.endpoint = std::move(endpoint);
          cfg.workers = workers;
          cfg.max_message_bytes = max_bytes;
          return cfg;
        }()) {}
  /// With the caller's configuration (test defaults: CPU backend, quiet).
  explicit running_server(service::service_config cfg) {
    cfg.backend = "cpu";
    cfg.poll_ms = 20;
    cfg.log_rounds = false;
    srv_ = std::make_unique<service::server>(cfg);
    thread_ = std::thread([this] { srv_->run(); });
  }
  ~running_server() {
    srv_->stop();
    thread_.join();
  }
  [[nodiscard]] std::string endpoint() const { return srv_->endpoint(); }
  service::server& get() { return *srv_; }

 private:
  std::unique_ptr<service::server> srv_;
  std::thread thread_;
};

}  // namespace placer::testing_support
