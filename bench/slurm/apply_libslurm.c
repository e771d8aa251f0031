/* Applies placements through libslurm instead of scontrol, for
 * bench/slurm/apply_latency.py (issue 20: the bridge's cycle is the Slurm
 * CLI's; is the library the way out?). Not part of the build: the script
 * compiles it against the installed libslurm-dev, whose ABI is that Slurm
 * release's.
 *
 *   apply_libslurm two|one FILE
 *
 * FILE has one "JOBID NODELIST" per line. "two" does what the bridge does
 * with scontrol: every job's ReqNodeList and AdminComment first (held
 * still), then a release of each. "one" sends both in one update RPC per
 * job. Prints the RPCs made and the seconds they took; exits 1 on the
 * first failed RPC, naming it. */
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { max_jobs = 4096 };

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int update(uint32_t id, char *nodes, int release) {
  job_desc_msg_t m;
  slurm_init_job_desc_msg(&m);
  m.job_id = id;
  if (nodes != NULL) {
    m.req_nodes = nodes;
    m.admin_comment = "placer: placed (libslurm)";
  }
  if (release) m.priority = INFINITE; /* what `scontrol release` sends */
  if (slurm_update_job(&m) != SLURM_SUCCESS) {
    fprintf(stderr, "apply_libslurm: job %u: %s\n", id, slurm_strerror(slurm_get_errno()));
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 3 || (strcmp(argv[1], "two") != 0 && strcmp(argv[1], "one") != 0)) {
    fprintf(stderr, "usage: apply_libslurm two|one FILE\n");
    return 2;
  }
  int const one = strcmp(argv[1], "one") == 0;
  FILE *f = fopen(argv[2], "r");
  if (f == NULL) {
    perror(argv[2]);
    return 2;
  }
  static uint32_t ids[max_jobs];
  static char nodes[max_jobs][256];
  int n = 0;
  while (n < max_jobs && fscanf(f, "%u %255s", &ids[n], nodes[n]) == 2) ++n;
  fclose(f);

  slurm_init(NULL);
  double const t0 = now_s();
  int rpcs = 0;
  for (int i = 0; i < n; ++i, ++rpcs) {
    if (update(ids[i], nodes[i], one) != 0) return 1;
  }
  if (!one) {
    for (int i = 0; i < n; ++i, ++rpcs) {
      if (update(ids[i], NULL, 1) != 0) return 1;
    }
  }
  printf("%d %.6f\n", rpcs, now_s() - t0);
  slurm_fini();
  return 0;
}
