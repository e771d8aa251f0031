// Tests for the backfill policy: being written.
#include <gtest/gtest.h>
