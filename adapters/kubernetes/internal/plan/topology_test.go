package plan

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"placer.local/kubernetes/internal/translate"
)

// cliqued: 16 nodes of 8 GPUs, n01..n16: two zones of two racks (named
// r1 and r2 in both) of two NVLink cliques of two nodes.
func cliqued() []*corev1.Node {
	ns := nodes(16, 16)
	for i, n := range ns {
		n.Labels["topology.kubernetes.io/zone"] = fmt.Sprintf("z%d", i/8+1)
		n.Labels["placer.io/rack"] = fmt.Sprintf("r%d", i/4%2+1)
		n.Labels["nvidia.com/gpu.clique"] = fmt.Sprintf("c%d", i/2+1)
	}
	return ns
}

// where: the zones, racks and cliques (zone/rack/clique) the gang's pods were bound in.
func where(t *testing.T, out *Output, ns []*corev1.Node, prefix string) (zones, racks, cliques []string, pods int) {
	t.Helper()
	byName := map[string]*corev1.Node{}
	for _, n := range ns {
		byName[n.Name] = n
	}
	z, r, c := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, b := range out.Binds {
		if !strings.HasPrefix(b.Pod.Name, prefix) {
			continue
		}
		l := byName[b.Node].Labels
		z[l["topology.kubernetes.io/zone"]] = true
		r[l["topology.kubernetes.io/zone"]+"/"+l["placer.io/rack"]] = true
		c[l["topology.kubernetes.io/zone"]+"/"+l["placer.io/rack"]+"/"+l["nvidia.com/gpu.clique"]] = true
		pods++
	}
	keys := func(m map[string]bool) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		sort.Strings(out)
		return out
	}
	return keys(z), keys(r), keys(c), pods
}

// A gang goes in one NVLink clique when one can hold it, else in one rack,
// else in one zone (--rack-label nvidia.com/gpu.clique,placer.io/rack,
// topology.kubernetes.io/zone). The nodes are used so that packing alone
// splits each gang (n01 and n03, of cliques c1 and c2, have 4 GPUs free;
// n02, n04, n05 and n07 none; the rest 8): a gang of two 4-GPU pods on
// n01 and n03; of three 8-GPU pods on n06, n08 (zone z1) and n09 (z2).
func TestGangInOneCliqueElseOneRack(t *testing.T) {
	solve := solver(t)
	ns := cliqued()
	var bound []*corev1.Pod
	for node, use := range map[string]int64{"n01": 4, "n02": 8, "n03": 4, "n04": 8, "n05": 8, "n07": 8} {
		p := pod("busy-"+node, use, "1", nil)
		p.Spec.NodeName = node
		bound = append(bound, p)
	}
	for _, tc := range []struct {
		name                  string
		pods                  int
		gpus                  int64
		zones, racks, cliques int
	}{
		{name: "small", pods: 2, gpus: 4, zones: 1, racks: 1, cliques: 1}, // clique c3 (n06) or c4 (n08) holds both
		{name: "mid", pods: 3, gpus: 8, zones: 1, racks: 1, cliques: 2},   // no clique holds three; z2/r1 or z2/r2 does
		{name: "big", pods: 6, gpus: 8, zones: 1, racks: 2, cliques: 4},   // no rack holds six; z2 does
	} {
		var pending []*corev1.Pod
		for i := 0; i < tc.pods; i++ {
			pending = append(pending, pod(fmt.Sprintf("%s-%d", tc.name, i), tc.gpus, "1", map[string]string{translate.PodGroupLabel: tc.name}))
		}
		groups := map[string]Group{"podgroup/ns/" + tc.name: {Gang: true, Name: "pod group " + tc.name, MinName: "minMember"}}
		for _, labels := range [][]string{nil, {"nvidia.com/gpu.clique", "placer.io/rack", "topology.kubernetes.io/zone"}} {
			out := runOpt(t, solve, translate.Options{TopologyLabels: labels}, ns, bound, pending, groups)
			zones, racks, cliques, n := where(t, out, ns, tc.name)
			t.Logf("%s, topology %v: zones %v racks %v cliques %v", tc.name, labels, zones, racks, cliques)
			if labels == nil { // packing alone: the comparison
				continue
			}
			if n != tc.pods || len(zones) != tc.zones || len(racks) != tc.racks || len(cliques) > tc.cliques {
				t.Errorf("%s: %d pods bound in zones %v, racks %v, cliques %v; want %d in %d zone(s), %d rack(s), at most %d clique(s)",
					tc.name, n, zones, racks, cliques, tc.pods, tc.zones, tc.racks, tc.cliques)
			}
		}
	}
}

// The domain of a gang's members placed: the deepest that holds their
// nodes all (the rest of the gang prefers it, or is required in it).
func TestDomainOfPlacedMembers(t *testing.T) {
	ns := cliqued()
	delete(ns[15].Labels, "nvidia.com/gpu.clique")
	p := &planner{in: Input{Nodes: ns, Opt: translate.Options{TopologyLabels: []string{"nvidia.com/gpu.clique", "placer.io/rack", "topology.kubernetes.io/zone"}}}}
	for _, tc := range []struct {
		nodes []string
		want  string
	}{
		{[]string{"n01"}, "[z1 r1 c1]"},
		{[]string{"n01", "n02"}, "[z1 r1 c1]"},
		{[]string{"n01", "n03"}, "[z1 r1]"},
		{[]string{"n01", "n05"}, "[z1]"},
		{[]string{"n01", "n09"}, "[]"},
		{[]string{"n13", "n16"}, "[z2 r2]"}, // n16 has no clique label
		{[]string{"n01", "gone"}, "[]"},
		{nil, "[]"},
	} {
		if got := fmt.Sprint(p.domainOf(tc.nodes)); got != tc.want {
			t.Errorf("%v: %s, want %s", tc.nodes, got, tc.want)
		}
	}
	p = &planner{in: Input{Nodes: ns}}
	if d := p.domainOf([]string{"n01"}); d != nil {
		t.Errorf("no topology: %v", d)
	}
}
