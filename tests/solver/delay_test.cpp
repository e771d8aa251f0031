// Tests for the delay policy: being written.
#include <gtest/gtest.h>
