#pragma once
// Verbs of the `placer` command implemented in their own files.
namespace placer::tools {
int cmd_experiment(int argc, char** argv);  // experiment_cmd.cpp: `placer experiment fgd|policies|tenants|rounds ...`
int cmd_experiment_tenants(int argc, char** argv);  // tenants_cmd.cpp: `placer experiment tenants ...`
int cmd_experiment_rounds(int argc, char** argv);   // rounds_cmd.cpp: `placer experiment rounds ...`
int cmd_simulate(int argc, char** argv);    // simulate_cmd.cpp: `placer simulate ...`
int cmd_bench(int argc, char** argv);       // bench_cmd.cpp: `placer bench ...`
int cmd_slurm_bridge(int argc, char** argv);  // slurm_bridge_cmd.cpp: `placer slurm-bridge ...`
}  // namespace placer::tools
