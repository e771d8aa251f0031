// Tests for the preemption policy: being written.
#include <gtest/gtest.h>
