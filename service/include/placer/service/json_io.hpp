#pragma once
// The CLI's files: the FlatBuffers JSON form of the wire tables (one schema,
// not two models). The schema text is embedded in the binary.
//
//   cluster c = placer::service::read_cluster_file("cluster.json");  // or an inventory CSV
//   auto [jobs, running, pol, now] = placer::service::read_jobs_file("jobs.json");
//   std::string j = placer::service::reply_to_json(reply_bytes);
//
// Errors name the file and, for JSON, the line the parser stopped at.

#include <placer/solver/model.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace placer::service {

struct job_batch {
  std::vector<job> pending;
  std::vector<running_job> running;
  policy pol;
  std::int64_t now = 0;
  bool has_policy = false;
  std::vector<queue_spec> queues;
};

/// JSON (root Cluster) or, by extension/header sniffing, a CSV inventory
/// handled by placer::traces (openb node list, PAI machine spec, spot nodes).
cluster read_cluster_file(std::string const& path);
/// JSON (root JobBatch) or an openb pod list CSV.
job_batch read_jobs_file(std::string const& path);

std::string cluster_to_json(cluster const& c);
std::string jobs_to_json(job_batch const& b);
/// A ScheduleReply (a verified Envelope buffer) as FlatBuffers JSON.
std::string envelope_to_json(void const* data, std::size_t size);

}  // namespace placer::service
