#pragma once
// An environment variable set for a scope and put back as it was after it,
// also when an ASSERT leaves the test early (the solver reads
// PLACER_VERIFY_SCORES when it builds an assignment).
#include <cstdlib>
#include <optional>
#include <string>

namespace placer::testing_support {

class scoped_env {
 public:
  scoped_env(char const* name, char const* value) : name_(name) {
    if (char const* was = std::getenv(name)) was_ = was;
    ::setenv(name, value, 1);
  }
  ~scoped_env() {
    if (was_) {
      ::setenv(name_.c_str(), was_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  scoped_env(scoped_env const&) = delete;
  scoped_env& operator=(scoped_env const&) = delete;

 private:
  std::string name_;
  std::optional<std::string> was_;
};

}  // namespace placer::testing_support
