package e2e

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The scheduler's default topology, the NVLink clique, the rack, the
// zone (--rack-label nvidia.com/gpu.clique,placer.io/rack,
// topology.kubernetes.io/zone): 16 nodes of 8 GPUs, two zones of two racks
// of two cliques of two nodes. Running pods leave node-1 and node-3
// (cliques 1 and 2) 4 GPUs free, node-2, node-4, node-5 and node-7 none,
// so that packing alone would split both gangs (as the unit test
// TestGangInOneCliqueElseOneRack shows for the same nodes): a gang of
// two 4-GPU pods is bound in one clique, a gang of three 8-GPU pods,
// which no clique holds, in one rack; a gang of twelve 8-GPU pods, more
// than the free nodes, waits, told so in kube-scheduler's words ("6/16
// nodes are available: 10 Insufficient nvidia.com/gpu. Resources were
// found for 6 replica(s) while 12 are required.", or 10 found when told
// in a round before the other gangs were placed).
func TestGangsInOneCliqueElseOneRack(t *testing.T) {
	c := newClusterWith(t, clusterOpts{nodes: 16, racks: 4, cliqueNodes: 2})
	ns := "topo"
	start := time.Now().Add(-time.Hour)
	for node, gpus := range map[int]int64{1: 4, 2: 8, 3: 4, 4: 8, 5: 8, 7: 8} {
		c.runningPod(ns, fmt.Sprintf("busy-%d", node), fmt.Sprintf("node-%d", node), "", gpus, start)
	}
	var pods []*corev1.Pod
	var wide []string
	for _, g := range []struct {
		name string
		n    int
		gpus int64
	}{{"small", 2, 4}, {"mid", 3, 8}, {"wide", 12, 8}} {
		for i := 0; i < g.n; i++ {
			pods = append(pods, c.buildPod(ns, podSpec{name: fmt.Sprintf("%s-%d", g.name, i), group: g.name, gpus: g.gpus, minMember: g.n}))
			if g.name == "wide" {
				wide = append(wide, pods[len(pods)-1].Name)
			}
		}
	}
	c.create(ns, pods...)
	c.startScheduler()
	bound := c.waitBound(ns, 60*time.Second, wide...)
	labels := nodeLabels(c)
	in := func(group string, keys ...string) []string {
		seen := map[string]bool{}
		for _, p := range bound {
			if p.Labels["scheduling.x-k8s.io/pod-group"] == group {
				var v []string
				for _, k := range keys {
					v = append(v, labels[p.Spec.NodeName][k])
				}
				seen[strings.Join(v, "/")] = true
			}
		}
		var out []string
		for k := range seen {
			out = append(out, k)
		}
		sort.Strings(out)
		return out
	}
	const zone, rack, clique = "topology.kubernetes.io/zone", "placer.io/rack", "nvidia.com/gpu.clique"
	small, mid := in("small", zone, rack, clique), in("mid", zone, rack)
	t.Logf("small in cliques %v; mid in racks %v, cliques %v", small, mid, in("mid", zone, rack, clique))
	if len(small) != 1 {
		t.Errorf("the gang small (two 4-GPU pods) in cliques %v, want one", small)
	}
	if len(mid) != 1 {
		t.Errorf("the gang mid (three 8-GPU pods) in racks %v, want one", mid)
	}
	for _, p := range c.pods(ns) {
		if p.Labels["scheduling.x-k8s.io/pod-group"] == "wide" && p.Spec.NodeName != "" {
			t.Errorf("%s of the gang wide bound to %s: twelve do not fit", p.Name, p.Spec.NodeName)
		}
	}
	msg := c.waitCondition(ns, "wide-0", "Unschedulable", "/16 nodes are available", 30*time.Second)
	if !strings.Contains(msg, "while 12 are required") {
		t.Errorf("wide-0: %q", msg)
	}
	t.Logf("wide-0: %s", msg)
	c.checkCapacity()
}
