// Tests for the elastic policy: being written.
#include <gtest/gtest.h>
