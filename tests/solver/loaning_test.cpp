// Tests for the loaning policy: being written.
#include <gtest/gtest.h>
