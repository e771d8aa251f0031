#pragma once
// round_bench timeline (round_timeline.cpp): every backend call of whole rounds, timed.
namespace placer::bench {
/// argv[0] is "timeline"; returns the exit status (0, 1 error, 2 usage, 3 a counted step no call recorded).
int round_timeline_main(int argc, char** argv);
}  // namespace placer::bench
